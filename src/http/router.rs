//! The route table: one line per route. Unknown path: 404 `NOT_FOUND`; known path with another
//! method: 405 `METHOD_NOT_ALLOWED` with `Allow`.

use super::{ApiError, App, Ctx, Reply};
use crate::api;

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
        _ => Err(ApiError::NotFound),
    }
}
