//! The route table: one line per route. Unknown path: 404 `NOT_FOUND`; known path with another
//! method: 405 `METHOD_NOT_ALLOWED` with `Allow`; a path parameter that does not decode to UTF-8:
//! 400 `VALIDATION_ERROR` naming it, before the handler (docs/decisions.md §2).

use super::{
    adjustments, batch, collect, conversions, health, hooks, people, report, static_files,
    ApiError, App,
};
use crate::http::{decode_segment, Ctx, Lane, Reply};

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

/// The path parameters `(name as openapi.yaml spells it, segment)`, percent-decoded; the first that
/// is not UTF-8 is refused, so that no handler looks up (or erases) a guess at what was meant.
fn params<const N: usize>(raw: [(&'static str, &str); N]) -> Result<[String; N], ApiError> {
    let mut decoded: [String; N] = std::array::from_fn(|_| String::new());
    for (out, (name, segment)) in decoded.iter_mut().zip(raw) {
        *out = decode_segment(segment).map_err(|_| {
            ApiError::validation(name, format!("{name} is not UTF-8 once percent-decoded"))
        })?;
    }
    Ok(decoded)
}

/// Sends the request to its handler. Route words match the path as sent; parameters are
/// percent-decoded here (see `http::path_segments`). Kept one line per route on purpose (no rustfmt).
#[rustfmt::skip]
pub fn dispatch(app: &App, ctx: &mut Ctx) -> (Route, Result<Reply, ApiError>) {
    let segs: Vec<String> = ctx.segments.clone();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let method = ctx.method.clone();
    match (method.as_str(), segs.as_slice()) {
        ("POST", ["api", "sites", site, "conversions"]) => (private("conversions_report"), params([("siteId", site)]).and_then(|[site]| conversions::accept(app, ctx, &site))),
        (_, ["api", "sites", _, "conversions"]) => (UNKNOWN, Err(ApiError::MethodNotAllowed("POST"))),
        ("POST", ["api", "sites", site, "conversions", "batch"]) => (private("conversions_batch"), params([("siteId", site)]).and_then(|[site]| batch::accept(app, ctx, &site))),
        // `GET …/conversions/batch` stays the status lookup of an order named `batch` (below).
        (m, ["api", "sites", _, "conversions", "batch"]) if m != "GET" && m != "HEAD" => (UNKNOWN, Err(ApiError::MethodNotAllowed("POST"))),
        ("GET" | "HEAD", ["api", "sites", site, "conversions", order]) => (private("conversions_status"), params([("siteId", site), ("orderId", order)]).and_then(|[site, order]| conversions::order_status(app, ctx, &site, &order))),
        (_, ["api", "sites", _, "conversions", _]) => (UNKNOWN, Err(ApiError::MethodNotAllowed("GET, HEAD"))),
        ("POST", ["api", "sites", site, "conversions", order, "adjustments"]) => (private("conversions_adjust"), params([("siteId", site), ("orderId", order)]).and_then(|[site, order]| adjustments::adjust(app, ctx, &site, &order))),
        (_, ["api", "sites", _, "conversions", _, "adjustments"]) => (UNKNOWN, Err(ApiError::MethodNotAllowed("POST"))),
        ("GET" | "HEAD", ["api", "sites", site, "report"]) => (private("report"), params([("siteId", site)]).and_then(|[site]| report::report(app, ctx, &site))),
        (_, ["api", "sites", _, "report"]) => (UNKNOWN, Err(ApiError::MethodNotAllowed("GET, HEAD"))),
        ("DELETE", ["api", "sites", site, "people", client]) => (private("people_forget"), params([("siteId", site), ("clientId", client)]).and_then(|[site, client]| people::forget(app, ctx, &site, &client))),
        (_, ["api", "sites", _, "people", _]) => (UNKNOWN, Err(ApiError::MethodNotAllowed("DELETE"))),
        ("POST", ["hooks", source]) => (private("hooks"), params([("sourceId", source)]).and_then(|[source]| hooks::receive(app, ctx, &source))),
        (_, ["hooks", _]) => (UNKNOWN, Err(ApiError::MethodNotAllowed("POST"))),
        ("POST", ["api", "collect"]) => (public("collect"), collect::collect(app, ctx)),
        ("OPTIONS", ["api", "collect"]) => (public("collect_preflight"), Ok(collect::preflight())),
        (_, ["api", "collect"]) => (UNKNOWN, Err(ApiError::MethodNotAllowed("POST, OPTIONS"))),
        ("GET" | "HEAD", ["pixel.js"]) => (private("pixel"), Ok(static_files::pixel(ctx))),
        ("GET" | "HEAD", ["openapi.yaml"]) => (private("openapi"), Ok(static_files::openapi(ctx))),
        ("GET" | "HEAD", ["favicon.ico"]) => (private("favicon"), Ok(static_files::favicon(ctx))),
        ("GET" | "HEAD", ["healthz"]) => (private("healthz"), health::healthz(app)),
        ("GET" | "HEAD", ["metrics"]) => (private("metrics"), health::metrics(app, ctx)),
        (_, ["pixel.js"] | ["openapi.yaml"] | ["favicon.ico"] | ["healthz"] | ["metrics"]) => (UNKNOWN, Err(ApiError::MethodNotAllowed("GET, HEAD"))),
        (_, ["dashboard", ..]) | ("GET" | "HEAD", [""]) => dashboard(app, ctx),
        // The unit tests' build only (`cli/serve.rs`): a handler that panics, to check that a panic is a 500 and never a dead worker.
        #[cfg(test)]
        ("GET", ["__test", "panic"]) => panic!("a handler panicked on purpose (unit test route)"),
        _ => (UNKNOWN, Err(ApiError::NotFound)),
    }
}
