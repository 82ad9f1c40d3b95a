//! `GET /healthz` and `GET /metrics`.

use serde_json::json;

use crate::http::{ApiError, App, Reply};
use crate::store;

/// 200 when the database answers a query and the writer's last commit succeeded.
pub fn healthz(app: &App) -> Result<Reply, ApiError> {
    let conn = app.pool.get().map_err(|_| ApiError::Unhealthy)?;
    store::ping(&conn).map_err(|e| {
        log::warn!("health check: {e}");
        ApiError::Unhealthy
    })?;
    if !app.writer.healthy() {
        return Err(ApiError::Unhealthy);
    }
    Ok(Reply::json(200, &json!({"status": "ok"})))
}

pub fn metrics(app: &App) -> Reply {
    let (depth, dead) = app
        .pool
        .get()
        .ok()
        .and_then(|c| store::conversions::outbox_counts(&c).ok())
        .unwrap_or((-1, -1));
    Reply::bytes(
        200,
        "text/plain; version=0.0.4; charset=utf-8",
        app.metrics.render(depth, dead).into_bytes(),
    )
}
