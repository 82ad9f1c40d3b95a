//! Unknown fields in a report (docs/decisions.md §3, "Typos are named"): still accepted, but the
//! 202 (and each accepted batch item) names each in `warnings` with the known field it most
//! resembles; a missing required field's 400 names the near miss the body holds; `/metrics` counts
//! them per site, and the site overview says how many reports today had any, with an example.
//!
//! What belongs here: what a client learns about fields convapi does not know.

use serde_json::{json, Value};

use crate::common::*;

fn warnings(v: &Value) -> Vec<(String, String)> {
    v["warnings"]
        .as_array()
        .unwrap_or_else(|| panic!("no warnings in {v}"))
        .iter()
        .map(|w| {
            (
                w["field"].as_str().unwrap().to_owned(),
                w["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn visitor(app: &TestApp) -> String {
    let v = unique("v");
    app.pageview(&v, "https://shop.example/", now_ms() - HOUR);
    v
}

#[test]
fn each_typo_is_named_with_the_field_it_resembles() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .start();
    let v = visitor(&app);
    for (typo, meant) in [
        ("amount", "value"),
        ("order_id", "orderId"),
        ("client_id", "clientId"),
        ("occured_at", "occurredAt"),
    ] {
        let mut body = json!({"visitorId": v, "orderId": unique("W"), "value": 1});
        body[typo] = json!("2026-11-20T10:00:00Z");
        let r = app.post_conversion(&body);
        r.accepted();
        assert_eq!(
            warnings(&r.json()),
            [(
                typo.to_owned(),
                format!("unknown field, ignored; did you mean {meant}?")
            )],
            "{typo}"
        );
    }
    // Still ignored: `amount` is no value.
    let r = app.post_conversion(&json!({"visitorId": v, "orderId": "W-amount", "amount": 42}));
    r.accepted();
    assert_eq!(
        app.order_status("W-amount").expect(200)["value"],
        Value::Null
    );
    // Without unknown fields, no `warnings` at all.
    let r = app.post_conversion(&json!({"visitorId": v, "orderId": "W-clean", "value": 1}));
    r.accepted();
    assert_eq!(r.json().get("warnings"), None, "{}", r.text());
    // A field like no known one is still named.
    let r = app.post_conversion(&json!({"visitorId": v, "orderId": "W-coupon", "coupon": "X"}));
    let w = warnings(&r.json());
    assert_eq!(w[0].0, "coupon");
    assert!(w[0].1.starts_with("unknown field, ignored"), "{w:?}");
}

#[test]
fn a_missing_required_field_names_the_near_miss_in_the_body() {
    let app = TestApp::start();
    let v = visitor(&app);
    let e = expect_invalid(
        &app.post_conversion(&json!({"visitorId": v, "order_id": "N-1"})),
        "orderId",
    );
    assert_eq!(
        e["error"],
        json!("orderId is required for a purchase; the body has order_id — did you mean orderId?")
    );
    let e = expect_invalid(
        &app.post_conversion(&json!({"client_id": "c-1", "orderId": "N-2"})),
        "clientId",
    );
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .ends_with("; the body has client_id — did you mean clientId?"),
        "{e}"
    );
    // No near miss: the plain message.
    let e = expect_invalid(&app.post_conversion(&json!({"visitorId": v})), "orderId");
    assert_eq!(e["error"], json!("orderId is required for a purchase"));
}

#[test]
fn batch_items_carry_their_warnings_and_metrics_and_the_overview_count_them() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .start();
    let v = visitor(&app);
    let r = app.send(
        "POST",
        &format!("/api/sites/{}/conversions/batch", app.site.id),
        &[
            ("Authorization", &format!("Bearer {}", app.key.key)),
            ("Content-Type", "application/json"),
        ],
        Some(
            &serde_json::to_vec(&json!({"conversions": [
                {"visitorId": v, "orderId": "WB-1", "amount": 5},
                {"visitorId": v, "orderId": "WB-2", "value": 5},
                {"visitorId": v, "order_id": "WB-3"},
                {"visitorId": v, "orderId": "WB-4", "occured_at": "x", "client_id": "c"},
            ]}))
            .unwrap(),
        ),
    );
    let body = r.expect(200);
    let res = body["results"].as_array().unwrap();
    assert_eq!(
        warnings(&res[0]),
        [(
            "amount".into(),
            "unknown field, ignored; did you mean value?".into()
        )]
    );
    assert_eq!(res[1].get("warnings"), None);
    assert_eq!(res[2]["status"], json!(400));
    assert!(res[2]["error"]
        .as_str()
        .unwrap()
        .contains("did you mean orderId?"));
    let mut w = warnings(&res[3]);
    w.sort();
    assert_eq!(
        w.iter().map(|(f, _)| f.as_str()).collect::<Vec<_>>(),
        ["client_id", "occured_at"]
    );
    // One single call with a typo too: 3 reports stored with unknown fields, 4 fields named.
    app.post_conversion(&json!({"visitorId": v, "orderId": "WS-1", "revenue": 7}))
        .accepted();
    let site = &app.site.id;
    assert_eq!(
        app.metric(&format!("convapi_field_warnings_total{{site=\"{site}\"}}")),
        4
    );
    assert_eq!(
        app.query_i64(
            "SELECT reports FROM field_warnings WHERE site_id = ?1",
            &[site]
        ),
        3
    );
    // A repeat is not stored again, so it is not counted again.
    app.post_conversion(&json!({"visitorId": v, "orderId": "WS-1", "revenue": 7}))
        .accepted();
    assert_eq!(
        app.query_i64(
            "SELECT reports FROM field_warnings WHERE site_id = ?1",
            &[site]
        ),
        3
    );
    let email = format!("{}@example.com", unique("user"));
    create_user(&app, &app.tenant.id, &email, "correct horse battery");
    let d = DashClient::logged_in(&app, &email, "correct horse battery");
    let page = d.page(&format!("/dashboard/sites/{site}"));
    assert!(
        page.contains("3 reports today had unknown fields"),
        "{page}"
    );
    assert!(page.contains("revenue (did you mean value?)"), "{page}");
    // Yesterday's count is not today's.
    app.execute(
        "UPDATE field_warnings SET day = day - 1 WHERE site_id = ?1",
        &[site],
    );
    let page = d.page(&format!("/dashboard/sites/{site}"));
    assert!(!page.contains("today had unknown fields"), "{page}");
}
