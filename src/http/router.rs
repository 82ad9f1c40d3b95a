//! The route table: one line per route. Unknown path: 404 `NOT_FOUND`; known path with another
//! method: 405 `METHOD_NOT_ALLOWED` with `Allow`.

use std::sync::OnceLock;

use super::{ApiError, App, Ctx, Reply};
use crate::api;

/// `CONVAPI_TEST_ROUTES=1` adds `GET /__test/panic`, a handler that panics, so tests can check that
/// a panic is a 500 and never a dead worker. Off unless set; not part of the API.
fn test_routes() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("CONVAPI_TEST_ROUTES").is_ok_and(|v| v == "1"))
}

/// Sends the request to its handler; `route` receives the route's name for logs and metrics.
pub fn dispatch(app: &App, ctx: &mut Ctx, route: &mut &'static str) -> Result<Reply, ApiError> {
    let segs: Vec<String> = ctx.segments.clone();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let method = ctx.method.clone();
    let m = method.as_str();
    match (m, segs.as_slice()) {
        ("POST", ["api", "sites", site, "conversions"]) => {
            *route = "conversions_report";
            api::conversions::report(app, ctx, site)
        }
        (_, ["api", "sites", _, "conversions"]) => Err(ApiError::MethodNotAllowed("POST")),
        ("GET" | "HEAD", ["api", "sites", site, "conversions", order]) => {
            *route = "conversions_status";
            api::conversions::status(app, ctx, site, order)
        }
        (_, ["api", "sites", _, "conversions", _]) => Err(ApiError::MethodNotAllowed("GET, HEAD")),
        ("POST", ["api", "collect"]) => {
            *route = "collect";
            api::collect::collect(app, ctx)
        }
        ("OPTIONS", ["api", "collect"]) => {
            *route = "collect_preflight";
            Ok(api::collect::preflight())
        }
        (_, ["api", "collect"]) => Err(ApiError::MethodNotAllowed("POST, OPTIONS")),
        ("GET" | "HEAD", ["pixel.js"]) => {
            *route = "pixel";
            Ok(api::static_files::pixel(ctx))
        }
        ("GET" | "HEAD", ["openapi.yaml"]) => {
            *route = "openapi";
            Ok(api::static_files::openapi(ctx))
        }
        ("GET" | "HEAD", ["healthz"]) => {
            *route = "healthz";
            api::health::healthz(app)
        }
        ("GET" | "HEAD", ["metrics"]) => {
            *route = "metrics";
            Ok(api::health::metrics(app))
        }
        (_, ["pixel.js"] | ["openapi.yaml"] | ["healthz"] | ["metrics"]) => {
            Err(ApiError::MethodNotAllowed("GET, HEAD"))
        }
        ("GET", ["__test", "panic"]) if test_routes() => {
            *route = "test_panic";
            panic!("a handler panicked on purpose (CONVAPI_TEST_ROUTES)")
        }
        _ => Err(ApiError::NotFound),
    }
}
