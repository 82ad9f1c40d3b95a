//! `GET /healthz` and `GET /metrics`.

use serde_json::json;

use super::{ApiError, App};
use sha2::{Digest, Sha256};

use crate::http::{Ctx, Reply};
use crate::store;

/// How long `/healthz` waits for a pooled connection: a load balancer's check times out after a
/// few seconds, and an answer after it is no answer.
const CONNECTION_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// 200 when the database answers a query and the writer's last commit succeeded. Within a second
/// whatever the writer or a request waits on (a lock another connection holds is every node's
/// problem, not this node's): the query waits on no lock (`store::ping`) and the connection is
/// waited for [`CONNECTION_WAIT`] at most.
pub fn healthz(app: &App) -> Result<Reply, ApiError> {
    let conn = app
        .pool
        .get_within(CONNECTION_WAIT)
        .map_err(|_| ApiError::Unhealthy)?;
    store::ping(&conn).map_err(|e| {
        log::warn!("health check: {e}");
        ApiError::Unhealthy
    })?;
    if !app.writer.healthy() {
        return Err(ApiError::Unhealthy);
    }
    Ok(Reply::json(200, &json!({"status": "ok"})))
}

/// Prometheus text. With a token configured (`serve --metrics-token`), only for a request that
/// presents it as `Authorization: Bearer <token>`: order volume and outbox depth are the
/// merchant's business, not every visitor's.
pub fn metrics(app: &App, ctx: &Ctx) -> Result<Reply, ApiError> {
    if let Some(token) = &app.metrics_token {
        let presented = ctx
            .header("Authorization")
            .and_then(|h| h.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim());
        // Compared as digests, so the comparison's time says nothing about the token.
        let digest = |s: &str| Sha256::digest(s.as_bytes());
        if presented.map(digest) != Some(digest(token)) {
            return Err(ApiError::Unauthorized);
        }
    }
    let conn = app.pool.get().ok();
    let (depth, dead) = conn
        .as_ref()
        .and_then(|c| store::conversions::outbox_counts(c).ok())
        .unwrap_or((-1, -1));
    if let Some(Ok(dests)) = conn.as_ref().map(store::destinations::all) {
        let rows = crate::forward::versions::metrics_rows(&dests, store::now_ms());
        app.metrics.set_api_versions(rows);
    }
    let now = store::now_ms();
    if let Some(c) = conn.as_ref() {
        if !app
            .metrics
            .sizes_fresh(now, store::export::sizes_every_ms(c))
        {
            if let Ok((db, wal)) = store::export::file_sizes(c) {
                app.metrics.set_db_sizes(db, wal, now);
            }
        }
    }
    drop(conn);
    Ok(Reply::bytes(
        200,
        "text/plain; version=0.0.4; charset=utf-8",
        app.metrics.render(depth, dead).into_bytes(),
    ))
}
