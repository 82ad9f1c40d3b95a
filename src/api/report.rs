//! `GET /api/sites/{siteId}/report`: the report's figures over HTTP, `crate::report::report`'s
//! answer as JSON (docs/decisions.md §11). The key, the site and its owner are checked first
//! (401, 404, 403), then the parameters (400 `VALIDATION_ERROR` naming the one to fix).

use super::{ApiError, App};
use crate::http::{Ctx, Reply};
use crate::report::{self, Query};
use crate::store;

/// The parameters the report takes; any other is ignored, like an unknown field of a body.
const PARAMETERS: [&str; 4] = ["from", "to", "by", "compare"];

pub fn report(app: &App, ctx: &mut Ctx, site_id: &str) -> Result<Reply, ApiError> {
    let key_hash = super::bearer_key_hash(ctx)?;
    let mut given: [Option<String>; 4] = Default::default();
    for (name, value) in form_urlencoded::parse(ctx.query.as_bytes()) {
        let Some(i) = PARAMETERS.iter().position(|p| *p == name) else {
            continue;
        };
        if given[i].as_deref().is_some_and(|v| v != value) {
            return Err(ApiError::validation(
                PARAMETERS[i],
                format!("{name} is given twice with different values; give it once"),
            ));
        }
        given[i] = Some(value.into_owned());
    }
    let conn = app.pool.get()?;
    let answer = store::read(&conn, |conn| {
        let site = super::authorize(app, conn, &key_hash, site_id)?;
        let q = Query::parse(
            given[0].as_deref(),
            given[1].as_deref(),
            given[2].as_deref(),
            given[3].as_deref(),
            chrono::Utc::now().date_naive(),
        )
        .map_err(|bad| ApiError::validation(bad.name, bad.why))?;
        Ok::<_, ApiError>(report::report(conn, &site, &q)?)
    })?;
    drop(conn);
    Ok(Reply::json(200, &report::report_json(&answer)))
}
