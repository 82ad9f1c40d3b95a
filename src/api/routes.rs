//! The route table: one line per route. Unknown path: 404 `NOT_FOUND`; known path with another
//! method: 405 `METHOD_NOT_ALLOWED` with `Allow`.

use std::sync::OnceLock;

use super::{collect, conversions, health, people, static_files, ApiError, App};
use crate::http::{decode_segment as decoded, Ctx, Lane, Reply};

/// A matched route: its name for logs and metrics, and whether its answers, errors included,
/// carry CORS headers (the pixel reads them from any page).
#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub name: &'static str,
    pub cors: bool,
    /// The error code of an answer rendered before it got here (a dashboard error page).
    pub code: Option<&'static str>,
}

const fn private(name: &'static str) -> Route {
    Route {
        name,
        cors: false,
        code: None,
    }
}

const fn public(name: &'static str) -> Route {
    Route {
        name,
        cors: true,
        code: None,
    }
}

/// The dashboard answers its own paths, errors included, as HTML pages.
fn dashboard(app: &App, ctx: &mut Ctx) -> (Route, Result<Reply, ApiError>) {
    let page = crate::dashboard::handle(&app.dashboard, ctx);
    (
        Route {
            name: page.route,
            cors: false,
            code: page.code,
        },
        Ok(page.reply),
    )
}

/// No route matched (404, 405).
const UNKNOWN: Route = private("unknown");

/// `CONVAPI_TEST_ROUTES=1` adds `GET /__test/panic`, a handler that panics, so tests can check that
/// a panic is a 500 and never a dead worker. Off unless set; not part of the API.
fn test_routes() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("CONVAPI_TEST_ROUTES").is_ok_and(|v| v == "1"))
}

/// The lane a request waits in for a request thread (`http::Lane`): the authenticated API (keyed
/// routes under `/api/sites/`) and `/healthz`, which a load balancer uses to decide whether this
/// node lives, keep threads that anonymous work (the pixel, the dashboard and its password checks,
/// static files, `/metrics`) cannot take (docs/hardening.md, "Budgets").
pub fn lane(_method: &str, path: &str) -> Lane {
    if path.starts_with("/api/sites/") || path == "/healthz" {
        Lane::Reserved
    } else {
        Lane::Shared
    }
}

/// Sends the request to its handler. Route words match the path as sent; parameters are
/// percent-decoded here (see `http::path_segments`). Kept one line per route on purpose (no rustfmt).
#[rustfmt::skip]
pub fn dispatch(app: &App, ctx: &mut Ctx) -> (Route, Result<Reply, ApiError>) {
    let segs: Vec<String> = ctx.segments.clone();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let method = ctx.method.clone();
    match (method.as_str(), segs.as_slice()) {
        ("POST", ["api", "sites", site, "conversions"]) => (private("conversions_report"), conversions::accept(app, ctx, &decoded(site))),
        (_, ["api", "sites", _, "conversions"]) => (UNKNOWN, Err(ApiError::MethodNotAllowed("POST"))),
        ("GET" | "HEAD", ["api", "sites", site, "conversions", order]) => (private("conversions_status"), conversions::order_status(app, ctx, &decoded(site), &decoded(order))),
        (_, ["api", "sites", _, "conversions", _]) => (UNKNOWN, Err(ApiError::MethodNotAllowed("GET, HEAD"))),
        ("DELETE", ["api", "sites", site, "people", client]) => (private("people_forget"), people::forget(app, ctx, &decoded(site), &decoded(client))),
        (_, ["api", "sites", _, "people", _]) => (UNKNOWN, Err(ApiError::MethodNotAllowed("DELETE"))),
        ("POST", ["api", "collect"]) => (public("collect"), collect::collect(app, ctx)),
        ("OPTIONS", ["api", "collect"]) => (public("collect_preflight"), Ok(collect::preflight())),
        (_, ["api", "collect"]) => (UNKNOWN, Err(ApiError::MethodNotAllowed("POST, OPTIONS"))),
        ("GET" | "HEAD", ["pixel.js"]) => (private("pixel"), Ok(static_files::pixel(ctx))),
        ("GET" | "HEAD", ["openapi.yaml"]) => (private("openapi"), Ok(static_files::openapi(ctx))),
        ("GET" | "HEAD", ["healthz"]) => (private("healthz"), health::healthz(app)),
        ("GET" | "HEAD", ["metrics"]) => (private("metrics"), health::metrics(app, ctx)),
        (_, ["pixel.js"] | ["openapi.yaml"] | ["healthz"] | ["metrics"]) => (UNKNOWN, Err(ApiError::MethodNotAllowed("GET, HEAD"))),
        (_, ["dashboard", ..]) | ("GET" | "HEAD", [""]) => dashboard(app, ctx),
        ("GET", ["__test", "panic"]) if test_routes() => panic!("a handler panicked on purpose (CONVAPI_TEST_ROUTES)"),
        _ => (UNKNOWN, Err(ApiError::NotFound)),
    }
}
