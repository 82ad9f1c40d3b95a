//! `POST /api/sites/{siteId}/conversions` through the front door: every row of CONTRACT §3's
//! table (status and code, in the contract's order), every field rule, and 404/405 routing.
//! Session resolution lives in `sessions.rs`, deduplication in `idempotency.rs`.

mod common;

use common::*;
use serde_json::json;

#[test]
fn a_conversion_for_a_known_visitor_is_accepted() {
    let app = TestApp::start();
    let session = app.pageview("v-1", "https://shop.example/", now_ms() - MINUTE);
    let r = app.post_conversion(
        &json!({"visitorId": "v-1", "orderId": "A-1", "value": 49.9, "currency": "EUR"}),
    );
    let (event_id, session_id) = r.accepted();
    assert_eq!(session_id, session);
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM conversions WHERE id = ?1 AND order_id = 'A-1'",
            [&event_id]
        ),
        1
    );
}
