//! The examples the pages show filled in with a site's ids: the pixel snippet of
//! docs/decisions.md §4, the page's `identify` and `track` calls, a `curl` for the API, and this
//! server's origin they name. The site's getting-started card and the new-key card show them.

use super::Dashboard;
use crate::http::Ctx;

/// This server's origin for the snippet and the examples: `--public-url` when set, else as the
/// browser reached it: the `Host` header when it is a plain host (and port), else a placeholder.
pub fn origin(d: &Dashboard, ctx: &Ctx) -> String {
    if let Some(url) = &d.settings.public_url {
        return url.clone();
    }
    let scheme = if d.settings.secure_cookies {
        "https"
    } else {
        "http"
    };
    match ctx.header("Host").map(str::trim) {
        Some(h)
            if !h.is_empty()
                && h.len() <= 255
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b)) =>
        {
            format!("{scheme}://{h}")
        }
        _ => format!("{scheme}://YOUR-CONVAPI-HOST"),
    }
}

/// The pixel snippet of docs/decisions.md §4 for this site and server.
pub fn snippet(tracker_id: &str, origin: &str) -> String {
    format!(
        "<script>\n  window.svc = window.svc || function () {{ (svc.q = svc.q || []).push(arguments); }};\n  \
         svc('init', '{tracker_id}');\n</script>\n<script async src=\"{origin}/pixel.js\"></script>"
    )
}

/// The customer id of the examples: the `identify` call and the `curl` use the same one, so that
/// a page that ran the first makes the second find its session.
pub const EXAMPLE_CLIENT_ID: &str = "customer-42";
/// The order id of the examples.
pub const EXAMPLE_ORDER_ID: &str = "ORDER-1001";
/// What stands for the key in the `curl` example until one is created.
pub const KEY_PLACEHOLDER: &str = "ask_YOUR_API_KEY";

/// The page's calls after a login and on the order confirmation page, in the site's currency.
pub fn snippet_calls(currency: &str) -> String {
    format!(
        "<script>\n  // When the customer is known (logged in, or at checkout): your id of them.\n  \
         svc('identify', '{EXAMPLE_CLIENT_ID}');\n</script>\n\
         <script>\n  // On the order confirmation page only.\n  \
         svc('track', 'purchase', {{ orderId: '{EXAMPLE_ORDER_ID}', value: 49.90, currency: '{currency}' }});\n</script>"
    )
}

/// A `curl` that reports one conversion to this site, runnable as shown in a POSIX shell.
pub fn curl(origin: &str, site_id: &str, key: Option<&str>, currency: &str) -> String {
    let key = key.unwrap_or(KEY_PLACEHOLDER);
    format!(
        "curl -sS -X POST '{origin}/api/sites/{site_id}/conversions' \\\n  \
         -H 'Authorization: Bearer {key}' \\\n  \
         -H 'Content-Type: application/json' \\\n  \
         -d '{{\"clientId\": \"{EXAMPLE_CLIENT_ID}\", \"orderId\": \"{EXAMPLE_ORDER_ID}\", \"value\": 49.90, \"currency\": \"{currency}\"}}'"
    )
}
