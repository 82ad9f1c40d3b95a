//! The application behind the HTTP front: the route table ([`routes`]) and its handlers, plain
//! functions from a [`Ctx`] to `Result<Reply, ApiError>`. They read through the pool and write only
//! through the writer; they never see `tiny_http`. [`Api`] is what `server.rs` hands the front.

pub mod adjustments;
pub mod batch;
pub mod collect;
pub mod conversions;
pub mod error;
pub mod health;
pub mod hooks;
pub mod people;
pub mod report;
pub mod routes;
pub mod static_files;
pub mod validate;
pub mod warnings;

use std::sync::Arc;
use std::time::Duration;

use crate::store::engine::AsConn;

pub use error::ApiError;

use crate::http::{Ctx, Handled, Lane, Refusal, Reply, Service};
use crate::metrics::Metrics;
use crate::ratelimit::{Limiter, Rate};
use crate::store::engine::Db;
use crate::store::{self, keys::AuthKey, sites::Site};
use crate::writer::Writer;

/// Everything a handler may use: the read pool, the writer, metrics and the pipeline's waker.
pub struct App {
    pub pool: Db,
    pub writer: Writer,
    pub metrics: Metrics,
    /// Keys whose `lastUsedAt` was written within the last minute (by key id).
    pub key_touched: Limiter<String, Rate>,
    /// Wakes the pipeline worker when new work is committed.
    pub pipeline: crate::pipeline::Waker,
    /// Rate limits and bounds of the public pixel endpoint.
    pub pixel: collect::PixelGuard,
    /// The bearer token `/metrics` asks for; `None`: open.
    pub metrics_token: Option<String>,
    /// Batches handled at once (`batch::Slots`).
    pub batches: batch::Slots,
    /// The HTML dashboard, which answers every path under `/dashboard`.
    pub dashboard: crate::dashboard::Dashboard,
    /// Webhook signature failures not yet written, by source (`hooks::Failures`).
    pub hook_failures: Arc<hooks::Failures>,
}

/// The [`Service`] the HTTP front serves: routes each request, and renders every error once.
pub struct Api(pub Arc<App>);

impl Service for Api {
    fn lane(&self, method: &str, path: &str) -> Lane {
        routes::lane(method, path)
    }

    fn handle(&self, ctx: &mut Ctx) -> Handled {
        let (route, result) = routes::dispatch(&self.0, ctx);
        let mut code = route.code;
        let reply = result.unwrap_or_else(|err| {
            if let Some(detail) = err.detail() {
                log::warn!("{}: {detail}", ctx.label());
            }
            code = Some(err.code());
            err.to_reply()
        });
        let reply = if route.cors {
            reply
                .header("Access-Control-Allow-Origin", "*")
                .header("Vary", "Origin")
        } else {
            reply
        };
        Handled {
            reply,
            route: route.name,
            code,
        }
    }

    fn refusal(&self, why: Refusal) -> Reply {
        ApiError::from(why).to_reply()
    }

    fn refused(&self, why: Refusal) -> Handled {
        let err = ApiError::from(why);
        Handled {
            reply: err.to_reply(),
            route: "unknown",
            code: Some(err.code()),
        }
    }
}

/// Counts a write the writer could not take (`convapi_queue_unavailable_total`).
pub fn count_unavailable(app: &App, e: &crate::writer::WriteError) {
    if matches!(e, crate::writer::WriteError::Unavailable(_)) {
        app.metrics.inc_unavailable();
    }
}

/// How often `lastUsedAt` is written per key at most.
pub const KEY_TOUCH_INTERVAL: Duration = Duration::from_secs(60);
/// Most keys whose last write is remembered at once.
pub const KEY_TOUCH_KEYS: usize = 10_000;

/// Headers other APIs take a key in; one of them without an `Authorization` header gets a hint.
const OTHER_KEY_HEADERS: [&str; 3] = ["X-Api-Key", "Api-Key", "X-Auth-Token"];

/// Check 1 without the database: the hash of a well-formed `Authorization: Bearer ask_...` key.
/// A key sent without its scheme (`Authorization: ask_...`) is told to add `Bearer `, and one sent
/// in another header (`X-Api-Key`, as some APIs take it) is told where it goes.
pub fn bearer_key_hash(ctx: &Ctx) -> Result<Vec<u8>, ApiError> {
    let header = ctx.header("Authorization").map(str::trim);
    if header.is_none() && OTHER_KEY_HEADERS.iter().any(|h| ctx.header(h).is_some()) {
        return Err(ApiError::UnauthorizedBecause(
            "the API key goes in the Authorization header, after \"Bearer \": write \
             Authorization: Bearer ask_... (not X-Api-Key)",
        ));
    }
    if header.is_some_and(|h| h.starts_with(crate::keys::PREFIX)) {
        return Err(ApiError::UnauthorizedBecause(
            "the Authorization header must be \"Bearer \" followed by the key: \
             write Authorization: Bearer ask_...",
        ));
    }
    header
        .and_then(|h| {
            let (scheme, rest) = h.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
        .filter(|t| t.starts_with(crate::keys::PREFIX))
        .map(crate::keys::hash)
        .ok_or(ApiError::Unauthorized)
}

/// The checks 1 to 3 of a report (docs/decisions.md §3), in order: a valid key (401), a known site (404), the key's tenant
/// owns the site (403); then records the key's use. Runs inside the caller's read transaction (see
/// `store::read`), so that a request reads its key, site and whatever else it needs in one.
pub fn authorize(
    app: &App,
    conn: &impl AsConn,
    key_hash: &[u8],
    site_id: &str,
) -> Result<Site, ApiError> {
    authorize_mode(app, conn, key_hash, site_id).map(|(site, _)| site)
}

/// [`authorize`], with the key's mode: `true` for a test key, whose requests are test data
/// (docs/decisions/api.md, "Test mode").
pub fn authorize_mode(
    app: &App,
    conn: &impl AsConn,
    key_hash: &[u8],
    site_id: &str,
) -> Result<(Site, bool), ApiError> {
    let Ok(uuid) = uuid::Uuid::parse_str(site_id) else {
        store::keys::by_hash(conn, key_hash)?
            .filter(|k| !k.revoked)
            .ok_or(ApiError::Unauthorized)?;
        // A tracker id in its place is the likely mistake: it is the id people see in the snippet.
        let why = if store::sites::by_tracker(conn, site_id)?.is_some() {
            format!(
                "{site_id:?} is a site's tracker id, which only the pixel uses; the URL takes \
                 the site id, a UUID (the dashboard's site overview and convapi site list show it)"
            )
        } else {
            format!(
                "{site_id:?} is not a site id; the URL takes the site id, a UUID (the \
                 dashboard's site overview and convapi site list show it)"
            )
        };
        return Err(ApiError::SiteNotFound(Some(why)));
    };
    // The key and the site in one statement: every keyed request starts here.
    let (key, site) = store::sites::with_key(conn, key_hash, &uuid.hyphenated().to_string())?
        .filter(|(k, _)| !k.revoked)
        .ok_or(ApiError::Unauthorized)?;
    let site = site.ok_or(ApiError::SiteNotFound(None))?;
    if site.tenant_id != key.tenant_id {
        return Err(ApiError::Forbidden);
    }
    touch_key(app, &key);
    Ok((site, key.test))
}

/// Records `lastUsedAt`, at most once a minute per key, without delaying the request.
fn touch_key(app: &App, key: &AuthKey) {
    let now = store::now_ms();
    if key
        .last_used_at
        .is_some_and(|t| now - t < KEY_TOUCH_INTERVAL.as_millis() as i64)
    {
        return;
    }
    if app
        .key_touched
        .take(&key.id, 1.0, std::time::Instant::now())
        .is_err()
    {
        return;
    }
    let id = key.id.clone();
    app.writer
        .submit_detached(move |c| store::keys::touch(c, &id, now));
}
