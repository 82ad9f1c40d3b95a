//! `POST /api/sites/{siteId}/conversions/{orderId}/adjustments` through the front door, the order
//! ledger of docs/decisions/api.md ("Adjustments") line by line: the checks in order with each
//! status and code, the field rules, idempotent repeats and 409, the net value in `occurredAt`
//! order (a late arrival lands in its place), over-refunds, the cancel that closes an order, the
//! states, the site-currency net of a foreign-currency order, the status lookup's ledger, and
//! concurrent refunds of one order (from several nodes on PostgreSQL). Here: a rule of an order's
//! ledger.

use crate::common::pipeline_support::*;
use crate::common::*;
use serde_json::{json, Value};

const JSON: &str = "application/json";

/// An order of `value` EUR reported by the API an hour ago; returns its id.
fn order(app: &TestApp, value: Value) -> String {
    order_at(app, &unique("v"), value, "EUR", now_ms() - HOUR)
}

/// Asserts a 202 with `netValue` (as JSON text) and `state`; returns the body.
#[track_caller]
fn accepted(resp: &Resp, order: &str, adjustment: &str, net: &str, state: &str) -> Value {
    let v = resp.expect(202);
    assert_eq!(v["success"], json!(true), "{v}");
    assert_eq!(v["orderId"], json!(order), "{v}");
    assert_eq!(v["adjustmentId"], json!(adjustment), "{v}");
    assert!(v["eventId"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    assert_eq!(v["netValue"].to_string(), net, "{v}");
    assert_eq!(v["state"], json!(state), "{v}");
    v
}

fn refund(id: &str, value: Value) -> Value {
    json!({"adjustmentId": id, "type": "refund", "value": value})
}

/// `(name, key ("": none), site, order, Content-Type, body, status, code)`.
type Case<'a> = (
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    Option<&'a str>,
    &'a [u8],
    u16,
    &'a str,
);

#[test]
fn the_checks_answer_in_the_contract_order() {
    let app = TestApp::start();
    let o = order(&app, json!(100));
    let (key, site) = (app.key.key.clone(), app.site.id.clone());
    let other_tenant = app.create_tenant("Other");
    let other_site = app.create_site(&other_tenant.id, "Other site", &[]);
    let unknown_site = "8d3f9f8e-3c1b-4d55-9a57-0a1f2b3c4d5e";
    let ok = serde_json::to_vec(&refund("r-1", json!(1))).unwrap();
    let invalid = serde_json::to_vec(&json!({"type": "refund", "value": 1})).unwrap();
    let mut too_big = br#"{"adjustmentId":"r","type":"cancel","pad":""#.to_vec();
    too_big.resize(64 * 1024 + 1 - 2, b'x');
    too_big.extend_from_slice(br#""}"#);
    let bad_key = format!("ask_{}", "A".repeat(40));

    let cases: Vec<Case> = vec![
        (
            "no key",
            "",
            &site,
            &o,
            Some(JSON),
            &ok,
            401,
            "UNAUTHORIZED",
        ),
        (
            "unknown key",
            &bad_key,
            &site,
            &o,
            Some(JSON),
            &ok,
            401,
            "UNAUTHORIZED",
        ),
        (
            "401 before 404",
            "",
            unknown_site,
            &o,
            Some(JSON),
            &ok,
            401,
            "UNAUTHORIZED",
        ),
        (
            "unknown site",
            &key,
            unknown_site,
            &o,
            Some(JSON),
            &ok,
            404,
            "SITE_NOT_FOUND",
        ),
        (
            "site not a uuid",
            &key,
            "nope",
            &o,
            Some(JSON),
            &ok,
            404,
            "SITE_NOT_FOUND",
        ),
        (
            "other tenant",
            &key,
            &other_site.id,
            &o,
            Some(JSON),
            &ok,
            403,
            "FORBIDDEN",
        ),
        (
            "403 before 413",
            &key,
            &other_site.id,
            &o,
            Some(JSON),
            &too_big,
            403,
            "FORBIDDEN",
        ),
        (
            "too big",
            &key,
            &site,
            &o,
            Some(JSON),
            &too_big,
            413,
            "PAYLOAD_TOO_LARGE",
        ),
        (
            "413 before 415",
            &key,
            &site,
            &o,
            Some("text/plain"),
            &too_big,
            413,
            "PAYLOAD_TOO_LARGE",
        ),
        (
            "no content type",
            &key,
            &site,
            &o,
            None,
            &ok,
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        (
            "text/plain",
            &key,
            &site,
            &o,
            Some("text/plain"),
            &ok,
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        (
            "415 before 400",
            &key,
            &site,
            &o,
            Some("text/plain"),
            b"nope",
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        (
            "not json",
            &key,
            &site,
            &o,
            Some(JSON),
            b"nope",
            400,
            "INVALID_JSON",
        ),
        (
            "an array",
            &key,
            &site,
            &o,
            Some(JSON),
            b"[]",
            400,
            "INVALID_JSON",
        ),
        (
            "invalid",
            &key,
            &site,
            &o,
            Some(JSON),
            &invalid,
            400,
            "VALIDATION_ERROR",
        ),
        (
            "400 before 404",
            &key,
            &site,
            "no-such-order",
            Some(JSON),
            &invalid,
            400,
            "VALIDATION_ERROR",
        ),
        (
            "no such order",
            &key,
            &site,
            "no-such-order",
            Some(JSON),
            &ok,
            404,
            "ORDER_NOT_FOUND",
        ),
    ];
    for (name, key, site, order, ct, body, status, code) in cases {
        let resp = if key.is_empty() {
            app.send(
                "POST",
                &format!("/api/sites/{site}/conversions/{order}/adjustments"),
                &[("Content-Type", JSON)],
                Some(body),
            )
        } else {
            app.post_adjustment_raw(key, site, order, ct, body)
        };
        assert_eq!(
            (resp.status, resp.json()["code"].as_str().map(str::to_owned)),
            (status, Some(code.to_owned())),
            "{name}: {}",
            resp.text()
        );
    }
    // Nothing of the refused ones was written; `application/json; charset=utf-8` is JSON.
    let v = status(&app, &o);
    assert_eq!(v["adjustments"], json!([]), "{v}");
    let resp = app.post_adjustment_raw(
        &key,
        &site,
        &o,
        Some("application/json; charset=utf-8"),
        &ok,
    );
    accepted(&resp, &o, "r-1", "99", "partially_refunded");
    // Another method on the path: 405 naming POST.
    let resp = app.send(
        "GET",
        &format!("/api/sites/{site}/conversions/{o}/adjustments"),
        &[("Authorization", &format!("Bearer {key}"))],
        None,
    );
    expect_error(&resp, 405, "METHOD_NOT_ALLOWED");
    assert_eq!(resp.header("allow"), Some("POST"));
}

#[test]
fn every_field_rule_names_its_field() {
    let app = TestApp::start();
    let o = order(&app, json!(100));
    let before_order = iso(now_ms() - 2 * HOUR);
    let cases: Vec<(Value, &str)> = vec![
        (json!({"type": "cancel"}), "adjustmentId"),
        (
            json!({"adjustmentId": "", "type": "cancel"}),
            "adjustmentId",
        ),
        (
            json!({"adjustmentId": "x".repeat(257), "type": "cancel"}),
            "adjustmentId",
        ),
        (json!({"adjustmentId": 5, "type": "cancel"}), "adjustmentId"),
        (json!({"adjustmentId": "a"}), "type"),
        (json!({"adjustmentId": "a", "type": "chargeback"}), "type"),
        (
            json!({"adjustmentId": "a", "type": "Refund", "value": 1}),
            "type",
        ),
        (json!({"adjustmentId": "a", "type": "refund"}), "value"),
        (
            json!({"adjustmentId": "a", "type": "refund", "value": 0}),
            "value",
        ),
        (
            json!({"adjustmentId": "a", "type": "refund", "value": -1}),
            "value",
        ),
        (
            json!({"adjustmentId": "a", "type": "refund", "value": "5"}),
            "value",
        ),
        (
            json!({"adjustmentId": "a", "type": "refund", "value": 1e13}),
            "value",
        ),
        (json!({"adjustmentId": "a", "type": "restate"}), "value"),
        (
            json!({"adjustmentId": "a", "type": "restate", "value": -0.01}),
            "value",
        ),
        (
            json!({"adjustmentId": "a", "type": "cancel", "value": 0}),
            "value",
        ),
        (
            json!({"adjustmentId": "a", "type": "cancel", "currency": "eur"}),
            "currency",
        ),
        (
            json!({"adjustmentId": "a", "type": "cancel", "currency": "XXY"}),
            "currency",
        ),
        (
            json!({"adjustmentId": "a", "type": "cancel", "currency": "USD"}),
            "currency",
        ),
        (
            json!({"adjustmentId": "a", "type": "cancel", "occurredAt": "yesterday"}),
            "occurredAt",
        ),
        (
            json!({"adjustmentId": "a", "type": "cancel", "occurredAt": "2026-11-13T15:00:00"}),
            "occurredAt",
        ),
        (
            json!({"adjustmentId": "a", "type": "cancel", "occurredAt": iso(now_ms() + HOUR)}),
            "occurredAt",
        ),
        (
            json!({"adjustmentId": "a", "type": "cancel", "occurredAt": before_order}),
            "occurredAt",
        ),
        (
            json!({"adjustmentId": "a", "type": "cancel", "reason": "r".repeat(257)}),
            "reason",
        ),
        (
            json!({"adjustmentId": "a", "type": "cancel", "reason": 7}),
            "reason",
        ),
    ];
    for (body, field) in cases {
        expect_invalid(&app.post_adjustment(&o, &body), field);
    }
    assert_eq!(status(&app, &o)["adjustments"], json!([]));
    // The limits themselves pass; null counts as absent; unknown fields are ignored.
    let id = "i".repeat(256);
    let resp = app.post_adjustment(
        &o,
        &json!({"adjustmentId": id, "type": "restate", "value": 1e12, "currency": "EUR",
                "reason": "r".repeat(256), "occurredAt": null, "extra": 1}),
    );
    accepted(&resp, &o, &id, "1000000000000", "restated");
    let resp = app.post_adjustment(
        &o,
        &json!({"adjustmentId": "c", "type": "cancel", "value": null}),
    );
    accepted(&resp, &o, "c", "0", "cancelled");
}

#[test]
fn a_repeat_answers_the_first_answer_and_another_content_is_a_conflict() {
    let app = TestApp::start();
    let o = order(&app, json!(100));
    let first = accepted(
        &app.post_adjustment(&o, &refund("r-1", json!(30))),
        &o,
        "r-1",
        "70",
        "partially_refunded",
    );
    accepted(
        &app.post_adjustment(&o, &refund("r-2", json!(70))),
        &o,
        "r-2",
        "0",
        "refunded",
    );
    // The same type, value and currency again, whatever the other fields: the first answer.
    for body in [
        refund("r-1", json!(30)),
        refund("r-1", json!(30.0)),
        json!({"adjustmentId": "r-1", "type": "refund", "value": 30, "currency": "EUR",
               "reason": "another reason", "occurredAt": iso(now_ms())}),
    ] {
        assert_eq!(app.post_adjustment(&o, &body).expect(202), first, "{body}");
    }
    // Another value or type: 409, and nothing changed.
    for body in [
        refund("r-1", json!(31)),
        json!({"adjustmentId": "r-1", "type": "restate", "value": 30}),
        json!({"adjustmentId": "r-1", "type": "cancel"}),
    ] {
        expect_error(&app.post_adjustment(&o, &body), 409, "ADJUSTMENT_CONFLICT");
    }
    let v = status(&app, &o);
    assert_eq!(v["adjustments"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(
        (v["netValue"].to_string(), v["state"].clone()),
        ("0".into(), json!("refunded"))
    );
    // The id is per order: the same id on another order is its own adjustment.
    let o2 = order(&app, json!(50));
    accepted(
        &app.post_adjustment(&o2, &refund("r-1", json!(5))),
        &o2,
        "r-1",
        "45",
        "partially_refunded",
    );
}

#[test]
fn partial_then_full_refund_nets_zero_and_over_refunds_are_refused() {
    let app = TestApp::start();
    let o = order(&app, json!(49.9));
    let v = status(&app, &o);
    assert_eq!(
        (v["netValue"].clone(), v["state"].clone()),
        (json!(49.9), json!("active"))
    );
    accepted(
        &app.post_adjustment(&o, &refund("p", json!(19.95))),
        &o,
        "p",
        "29.95",
        "partially_refunded",
    );
    // More than what is left: refused, nothing written.
    expect_error(
        &app.post_adjustment(&o, &refund("too-much", json!(29.96))),
        422,
        "EXCEEDS_ORDER_VALUE",
    );
    accepted(
        &app.post_adjustment(&o, &refund("rest", json!(29.95))),
        &o,
        "rest",
        "0",
        "refunded",
    );
    expect_error(
        &app.post_adjustment(&o, &refund("more", json!(0.01))),
        422,
        "EXCEEDS_ORDER_VALUE",
    );
    let v = status(&app, &o);
    assert_eq!(
        (v["netValue"].to_string(), v["state"].clone()),
        ("0".into(), json!("refunded"))
    );
    // The report is never rewritten; the ledger lists each adjustment once, with its fields.
    assert_eq!(v["value"], json!(49.9));
    let adj = v["adjustments"].as_array().unwrap();
    let ids: Vec<_> = adj.iter().map(|a| a["adjustmentId"].clone()).collect();
    assert_eq!(ids, [json!("p"), json!("rest")], "{v}");
    for a in adj {
        assert_eq!(
            (a["type"].clone(), a["currency"].clone()),
            (json!("refund"), json!("EUR"))
        );
        for t in ["occurredAt", "receivedAt"] {
            assert!(
                chrono::DateTime::parse_from_rfc3339(a[t].as_str().unwrap()).is_ok(),
                "{t}: {a}"
            );
        }
    }
    assert_eq!(adj[0]["value"], json!(19.95));
}

#[test]
fn a_late_arrival_lands_in_its_occurred_at_place() {
    let app = TestApp::start();
    let t = now_ms() - 10 * HOUR;
    let o = order_at(&app, &unique("v"), json!(100), "EUR", t);
    let at = |h: i64| iso(t + h * HOUR);
    // A restate to 200 at +5h.
    let restate =
        json!({"adjustmentId": "restate", "type": "restate", "value": 200, "occurredAt": at(5)});
    accepted(
        &app.post_adjustment(&o, &restate),
        &o,
        "restate",
        "200",
        "restated",
    );
    // A refund of 150 that happened at +1h, arriving now: 100 - 150 < 0 at +1h, refused though
    // the end would be 200.
    let early =
        json!({"adjustmentId": "early", "type": "refund", "value": 150, "occurredAt": at(1)});
    expect_error(&app.post_adjustment(&o, &early), 422, "EXCEEDS_ORDER_VALUE");
    // A refund of 40 at +1h fits before the restate, which still sets 200: the state follows
    // the last adjustment in occurredAt order, the restate.
    let early =
        json!({"adjustmentId": "early-40", "type": "refund", "value": 40, "occurredAt": at(1)});
    accepted(
        &app.post_adjustment(&o, &early),
        &o,
        "early-40",
        "200",
        "restated",
    );
    // A refund at +6h comes after the restate.
    let late = json!({"adjustmentId": "late", "type": "refund", "value": 50, "occurredAt": at(6)});
    accepted(
        &app.post_adjustment(&o, &late),
        &o,
        "late",
        "150",
        "partially_refunded",
    );
    // A restate at +3h arriving last changes nothing after +5h's restate.
    let mid = json!({"adjustmentId": "mid", "type": "restate", "value": 10, "occurredAt": at(3)});
    accepted(
        &app.post_adjustment(&o, &mid),
        &o,
        "mid",
        "150",
        "partially_refunded",
    );
    // Ties on occurredAt go in arrival order: a restate to 20 then a refund of 20, both at +7h.
    let tie1 =
        json!({"adjustmentId": "tie-1", "type": "restate", "value": 20, "occurredAt": at(7)});
    let tie2 = json!({"adjustmentId": "tie-2", "type": "refund", "value": 20, "occurredAt": at(7)});
    accepted(
        &app.post_adjustment(&o, &tie1),
        &o,
        "tie-1",
        "20",
        "restated",
    );
    accepted(
        &app.post_adjustment(&o, &tie2),
        &o,
        "tie-2",
        "0",
        "refunded",
    );
    let v = status(&app, &o);
    let ids: Vec<_> = v["adjustments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["adjustmentId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        ids,
        ["early-40", "mid", "restate", "late", "tie-1", "tie-2"],
        "{v}"
    );
    assert_eq!(
        (v["netValue"].to_string(), v["state"].clone()),
        ("0".into(), json!("refunded"))
    );
}

#[test]
fn a_cancel_closes_the_order_whatever_the_time_of_what_follows() {
    let app = TestApp::start();
    let t = now_ms() - 10 * HOUR;
    let o = order_at(&app, &unique("v"), json!(80), "EUR", t);
    let r =
        json!({"adjustmentId": "r", "type": "refund", "value": 30, "occurredAt": iso(t + HOUR)});
    accepted(
        &app.post_adjustment(&o, &r),
        &o,
        "r",
        "50",
        "partially_refunded",
    );
    let c = json!({"adjustmentId": "c", "type": "cancel", "occurredAt": iso(t + 5 * HOUR), "reason": "fraud"});
    let first = accepted(&app.post_adjustment(&o, &c), &o, "c", "0", "cancelled");
    for (id, body) in [
        ("later", refund("later", json!(1))),
        (
            "earlier",
            json!({"adjustmentId": "earlier", "type": "refund", "value": 1, "occurredAt": iso(t + 2 * HOUR)}),
        ),
        (
            "restate",
            json!({"adjustmentId": "restate", "type": "restate", "value": 80}),
        ),
        (
            "cancel-again",
            json!({"adjustmentId": "cancel-again", "type": "cancel"}),
        ),
    ] {
        expect_error(&app.post_adjustment(&o, &body), 422, "ORDER_CANCELLED");
        let _ = id;
    }
    // Repeats of what the ledger holds still answer as the first time.
    assert_eq!(app.post_adjustment(&o, &c).expect(202), first);
    accepted(
        &app.post_adjustment(&o, &r),
        &o,
        "r",
        "50",
        "partially_refunded",
    );
    let v = status(&app, &o);
    assert_eq!(
        (v["netValue"].to_string(), v["state"].clone()),
        ("0".into(), json!("cancelled"))
    );
    assert_eq!(v["adjustments"].as_array().unwrap().len(), 2);
    assert_eq!(v["adjustments"][1]["value"], Value::Null);
    assert_eq!(v["adjustments"][1]["reason"], json!("fraud"));
    // A restate before any refund, and an order without a value.
    let o = order(&app, json!(10));
    let s = json!({"adjustmentId": "s", "type": "restate", "value": 12.5});
    accepted(&app.post_adjustment(&o, &s), &o, "s", "12.5", "restated");
    let s = json!({"adjustmentId": "z", "type": "restate", "value": 0});
    accepted(&app.post_adjustment(&o, &s), &o, "z", "0", "restated");
}

#[test]
fn a_full_refund_of_a_foreign_currency_order_nets_exactly_zero_in_the_site_currency() {
    let app = manual().currency("EUR").start();
    import_rates(&app, &fixture("eurofxref-hist-sample.csv"));
    let o = order_at(
        &app,
        &unique("v"),
        json!(49.99),
        "USD",
        ms("2026-11-13T15:00:00Z"),
    );
    // Before the rate: no site-currency net.
    assert_eq!(status(&app, &o)["netReportingValue"], Value::Null);
    drain(&app);
    let v = status(&app, &o);
    assert_eq!(v["status"], "processed", "{v}");
    // 49.99 USD at 1.05 USD per EUR: 47.61 EUR.
    assert_eq!(
        (
            v["reportingValue"].to_string(),
            v["netReportingValue"].to_string()
        ),
        ("47.61".into(), "47.61".into())
    );
    let r = |id: &str, value: Value| json!({"adjustmentId": id, "type": "refund", "value": value, "currency": "USD"});
    accepted(
        &app.post_adjustment(&o, &r("a", json!(16.66))),
        &o,
        "a",
        "33.33",
        "partially_refunded",
    );
    // At the order's rate (1.05 on 2026-11-13), not the latest one (1.06): 33.33 / 1.05 = 31.74.
    assert_eq!(status(&app, &o)["netReportingValue"].to_string(), "31.74");
    accepted(
        &app.post_adjustment(&o, &r("b", json!(16.66))),
        &o,
        "b",
        "16.67",
        "partially_refunded",
    );
    accepted(
        &app.post_adjustment(&o, &r("c", json!(16.67))),
        &o,
        "c",
        "0",
        "refunded",
    );
    let v = status(&app, &o);
    assert_eq!(
        (
            v["netValue"].to_string(),
            v["netReportingValue"].to_string()
        ),
        ("0".into(), "0.00".into()),
        "{v}"
    );
    // The order's own conversion is unchanged.
    assert_eq!(
        (v["value"].clone(), v["reportingValue"].to_string()),
        (json!(49.99), "47.61".into())
    );
}

#[test]
fn concurrent_refunds_of_one_order_keep_one_net_value_and_lose_none() {
    let app = TestApp::start();
    // Several nodes over one database where the engine allows it (PostgreSQL).
    let second = on_postgres().then(|| app.another_node());
    let o = order(&app, json!(100));
    let nodes: Vec<&TestApp> = std::iter::once(&app).chain(second.as_ref()).collect();
    // 8 clients × 5 refunds of 3 = 120 asked for; 33 fit (99), the rest would go below 0.
    let answers: Vec<(String, u16, Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|client| {
                let node = nodes[client % nodes.len()];
                let o = o.clone();
                s.spawn(move || {
                    (0..5)
                        .map(|i| {
                            let id = format!("c{client}-{i}");
                            let resp = node.post_adjustment(&o, &refund(&id, json!(3)));
                            let v = resp.json();
                            // A retry of the same refund answers as the first time.
                            let again = node.post_adjustment(&o, &refund(&id, json!(3)));
                            assert_eq!(
                                (again.status, again.json()),
                                (resp.status, v.clone()),
                                "{id}"
                            );
                            (id, resp.status, v)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let ok: Vec<_> = answers.iter().filter(|a| a.1 == 202).collect();
    assert_eq!(ok.len(), 33, "{answers:?}");
    for (id, status, v) in &answers {
        if *status != 202 {
            assert_eq!(
                (*status, v["code"].clone()),
                (422, json!("EXCEEDS_ORDER_VALUE")),
                "{id}"
            );
        }
    }
    // Each accepted answer saw a distinct net value: 97, 94, …, 1, one after the other.
    let mut nets: Vec<i64> = ok
        .iter()
        .map(|a| a.2["netValue"].as_i64().unwrap())
        .collect();
    nets.sort_unstable();
    assert_eq!(nets, (0..33).map(|i| 1 + 3 * i).collect::<Vec<_>>());
    for node in &nodes {
        let v = status(node, &o);
        assert_eq!(v["netValue"], json!(1), "{v}");
        assert_eq!(v["adjustments"].as_array().unwrap().len(), 33);
    }
}

#[test]
fn adjustments_go_with_their_conversion_when_it_expires_or_is_erased() {
    let app = manual().start();
    let site = app.site.id.clone();
    let now = now_ms();
    let count = |order: &str| {
        app.query_i64(
            "SELECT COUNT(*) FROM adjustments WHERE order_id = ?1",
            &[&order],
        )
    };
    let old = order_at(&app, &unique("v-old"), json!(10), "EUR", now - 40 * DAY);
    let kept = order_at(&app, &unique("v-kept"), json!(10), "EUR", now - DAY);
    let gone_visitor = unique("v-gone");
    let gone = order_at(&app, &gone_visitor, json!(10), "EUR", now - DAY);
    for o in [&old, &kept, &gone] {
        app.post_adjustment(o, &refund("r", json!(4))).expect(202);
        assert_eq!(count(o), 1);
    }
    // Retention expires the old conversion and its ledger with it.
    app.cli(&[
        "site",
        "update",
        &site,
        "--retain-days",
        "30",
        "--expire-conversions",
        "on",
    ]);
    let conn = app.store();
    let expired =
        with_writer(&app, |w| convapi::retention::prune_once(&conn, w, now_ms())).expect("prune");
    assert_eq!(expired.conversions, 1, "{expired:?}");
    expect_error(&app.order_status(&old), 404, "ORDER_NOT_FOUND");
    assert_eq!(count(&old), 0);
    // Erasure that deletes the person's conversions deletes their ledgers.
    app.cli_json(&[
        "forget",
        "--site",
        &site,
        "--visitor-id",
        &gone_visitor,
        "--delete-conversions",
        "--json",
    ]);
    expect_error(&app.order_status(&gone), 404, "ORDER_NOT_FOUND");
    assert_eq!(count(&gone), 0);
    // The rest stays as it was.
    let v = status(&app, &kept);
    assert_eq!(
        (
            v["netValue"].clone(),
            v["adjustments"].as_array().unwrap().len()
        ),
        (json!(6), 1)
    );
}

#[test]
fn the_command_line_adjusts_and_shows_with_the_apis_rules_and_codes() {
    let app = manual().start();
    let o = order(&app, json!(100));
    let site = app.site.id.clone();
    let adjust = |rest: &[&str]| {
        let mut args = vec!["order", "adjust", "--site", &site, &o];
        args.extend_from_slice(rest);
        app.cli(&args)
    };
    let run = adjust(&[
        "--adjustment-id",
        "cli-1",
        "--type",
        "refund",
        "--value",
        "25.5",
        "--reason",
        "by hand",
        "--json",
    ]);
    assert_eq!(run.code, 0, "{run:?}");
    let first = run.json();
    accepted(
        &app.post_adjustment(&o, &refund("cli-1", json!(25.5))),
        &o,
        "cli-1",
        "74.5",
        "partially_refunded",
    );
    assert_eq!(
        app.post_adjustment(&o, &refund("cli-1", json!(25.5)))
            .json(),
        first
    );
    let refusals: [(&[&str], &str); 7] = [
        (
            &[
                "--adjustment-id",
                "cli-1",
                "--type",
                "refund",
                "--value",
                "3",
            ],
            "ADJUSTMENT_CONFLICT",
        ),
        (
            &[
                "--adjustment-id",
                "x",
                "--type",
                "refund",
                "--value",
                "74.51",
            ],
            "EXCEEDS_ORDER_VALUE",
        ),
        (
            &["--adjustment-id", "x", "--type", "refund"],
            "VALIDATION_ERROR: value",
        ),
        (
            &["--adjustment-id", "x", "--type", "refund", "--value=-1"],
            "VALIDATION_ERROR: value",
        ),
        (
            &["--adjustment-id", "x", "--type", "cancel", "--value", "1"],
            "VALIDATION_ERROR: value",
        ),
        (
            &["--adjustment-id", "x", "--type", "chargeback"],
            "VALIDATION_ERROR: type",
        ),
        (
            &[
                "--adjustment-id",
                "x",
                "--type",
                "cancel",
                "--occurred-at",
                "2000-01-01T00:00:00Z",
            ],
            "VALIDATION_ERROR: occurredAt",
        ),
    ];
    for (args, code) in refusals {
        let run = adjust(args);
        assert_eq!(run.code, 1, "{args:?}: {run:?}");
        assert!(run.stderr.contains(code), "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{args:?}: {}", run.stdout);
    }
    let run = app.cli(&[
        "order",
        "adjust",
        "--site",
        &site,
        "nope",
        "--adjustment-id",
        "x",
        "--type",
        "cancel",
    ]);
    assert!(
        run.code == 1 && run.stderr.contains("ORDER_NOT_FOUND"),
        "{run:?}"
    );
    let unknown = "8d3f9f8e-3c1b-4d55-9a57-0a1f2b3c4d5e";
    let run = app.cli(&["order", "show", "--site", unknown, &o]);
    assert!(
        run.code == 1 && run.stderr.contains("SITE_NOT_FOUND"),
        "{run:?}"
    );
    let run = adjust(&["--adjustment-id", "c", "--type", "cancel", "--json"]);
    assert_eq!(run.json()["state"], json!("cancelled"), "{run:?}");
    let run = adjust(&["--adjustment-id", "y", "--type", "restate", "--value", "1"]);
    assert!(
        run.code == 1 && run.stderr.contains("ORDER_CANCELLED"),
        "{run:?}"
    );
    // `order show --json` is the status lookup's object.
    let shown = app.cli_json(&["order", "show", "--site", &site, &o, "--json"]);
    assert_eq!(shown, status(&app, &o));
    assert_eq!(shown["adjustments"][0]["reason"], json!("by hand"));
    let human = app.cli(&["order", "show", "--site", &site, &o]);
    assert!(
        human.code == 0 && human.stdout.contains("cancelled"),
        "{human:?}"
    );
}

#[test]
fn the_dashboards_order_page_shows_the_ledger() {
    let app = manual().start();
    let o = order(&app, json!(80));
    let event = status(&app, &o)["eventId"].as_str().unwrap().to_owned();
    let email = format!("{}@example.com", unique("user"));
    create_user(&app, &app.tenant.id, &email, "a long passphrase");
    let d = DashClient::logged_in(&app, &email, "a long passphrase");
    let page = d.page(&format!(
        "/dashboard/sites/{}/conversions/{event}",
        app.site.id
    ));
    assert!(page.contains("id=\"no-adjustments\""), "{page}");
    assert!(page.contains(">active</dd>"), "{page}");
    app.post_adjustment(
        &o,
        &json!({"adjustmentId": "re_<b>1</b>", "type": "refund", "value": 30, "reason": "one <i>item</i> back"}),
    )
    .expect(202);
    let page = d.page(&format!(
        "/dashboard/sites/{}/conversions/{event}",
        app.site.id
    ));
    assert!(page.contains("id=\"adjustments\""), "{page}");
    assert!(page.contains(">partially_refunded</dd>"), "{page}");
    assert!(page.contains("50.00"), "net value in the page: {page}");
    // What the client sent is shown as text, never as markup.
    assert!(
        page.contains("re_&lt;b&gt;1&lt;/b&gt;") && !page.contains("<b>1</b>"),
        "{page}"
    );
    assert!(page.contains("one &lt;i&gt;item&lt;/i&gt; back"), "{page}");
}

#[test]
fn a_held_lock_answers_503_with_retry_after_and_nothing_is_written() {
    let app = manual().env("CONVAPI_BUSY_TIMEOUT_MS", "300").start();
    let o = order(&app, json!(100));
    // SQLite: the write lock. PostgreSQL: the order's row, locked as the writer locks it.
    let holder = if app.is_postgres() {
        let mut c = ::postgres::Client::connect(&app.db.to_string_lossy(), ::postgres::NoTls)
            .expect("connect");
        c.batch_execute(&format!(
            "BEGIN; SELECT id FROM conversions WHERE order_id = '{o}' FOR UPDATE"
        ))
        .unwrap();
        Ok(c)
    } else {
        let lock = app.sqlite();
        lock.execute_batch("BEGIN IMMEDIATE").unwrap();
        Err(lock)
    };
    let started = std::time::Instant::now();
    let r = app.post_adjustment(&o, &refund("r", json!(10)));
    let took = started.elapsed();
    expect_error(&r, 503, "QUEUE_UNAVAILABLE");
    let retry: u64 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!(retry >= 1);
    assert!(
        took < std::time::Duration::from_secs(3),
        "503 took {took:?}"
    );
    match holder {
        Ok(mut c) => c.batch_execute("ROLLBACK").unwrap(),
        Err(lock) => lock.execute_batch("ROLLBACK").unwrap(),
    }
    assert_eq!(status(&app, &o)["adjustments"], json!([]));
    accepted(
        &app.post_adjustment(&o, &refund("r", json!(10))),
        &o,
        "r",
        "90",
        "partially_refunded",
    );
}

#[test]
fn the_ndjson_export_carries_each_orders_ledger_as_the_lookup_shows_it() {
    let app = manual().start();
    let adjusted = order(&app, json!(40));
    let plain = order(&app, json!(5));
    app.post_adjustment(&adjusted, &refund("r-1", json!(15)))
        .expect(202);
    let restate =
        json!({"adjustmentId": "s-1", "type": "restate", "value": 30, "reason": "discount"});
    app.post_adjustment(&adjusted, &restate).expect(202);
    let run = app.cli(&["export", "--site", &app.site.id, "--format", "ndjson"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut seen = 0;
    for line in run.stdout.lines() {
        let mut v: Value = serde_json::from_str(line).unwrap();
        let order = v["orderId"].as_str().unwrap().to_owned();
        for k in ["visitorId", "clientId"] {
            v.as_object_mut().unwrap().remove(k);
        }
        let mut lookup = status(&app, &order);
        lookup.as_object_mut().unwrap().remove("deliveries");
        assert_eq!(v, lookup, "{order}");
        if order == adjusted {
            assert_eq!(
                (v["netValue"].clone(), v["state"].clone()),
                (json!(30), json!("restated"))
            );
            assert_eq!(v["adjustments"].as_array().unwrap().len(), 2);
        } else {
            assert_eq!(order, plain);
            assert_eq!(v["adjustments"], json!([]));
        }
        seen += 1;
    }
    assert_eq!(seen, 2);
}
