//! The trust order between the anonymous pixel and the authenticated API (docs/decisions.md §3,
//! §8): the API's first report of an order the pixel created replaces the pixel's details, an API
//! repeat changes nothing, and pixel work can never make the API answer 503 through the outbox
//! backlog. Each test is named after the defect it guards against.
//!
//! The servers run with `--pipeline off`; the tests drain the outbox in-process.

use std::time::{Duration, Instant};

use crate::common::pipeline_support::*;
use crate::common::*;
use serde_json::{json, Value};

/// A pageview with `url` at `ts` then a purchase at `ts`, from `visitor`; returns the session.
fn pixel_purchase(
    app: &TestApp,
    visitor: &str,
    url: &str,
    order: &str,
    value: Value,
    currency: &str,
    ts: i64,
) -> String {
    app.pixel(
        visitor,
        json!([
            {"type": "pageview", "url": url, "ts": ts},
            {"type": "purchase", "orderId": order, "value": value, "currency": currency, "ts": ts},
        ]),
    )
}

#[track_caller]
fn expect_unavailable(r: &Resp) {
    expect_error(r, 503, "QUEUE_UNAVAILABLE");
    assert!(r.header("retry-after").is_some(), "{:?}", r.headers);
}

#[test]
fn order_poisoning_by_a_pixel_purchase_is_replaced_by_the_api_report() {
    let app = manual()
        .serve_args(&["--pixel-max-age-hours", "100000"])
        .start();
    let t = now_ms();
    // The attacker pre-registers the merchant's next order id: 0.01 in a currency that never
    // gets a rate, weeks ago, in a session of their own campaign.
    pixel_purchase(
        &app,
        "attacker",
        "https://shop.example/?utm_source=attacker&utm_medium=spam",
        "ORD-1001",
        json!(0.01),
        "XTS",
        t - 20 * DAY,
    );
    assert_eq!(drain(&app).fx_pending, 1);
    let poisoned = status(&app, "ORD-1001");
    assert_eq!(poisoned["status"], "fx_pending", "{poisoned}");
    let event = poisoned["eventId"].as_str().unwrap().to_owned();

    // The real customer arrives from the newsletter, logs in, buys.
    let customer = app.pixel(
        "customer",
        json!([
            {"type": "pageview", "url": "https://shop.example/?utm_source=newsletter&utm_medium=email", "ts": t - HOUR},
            {"type": "identify", "userId": "crm-7", "ts": t - HOUR},
        ]),
    );
    let occurred = iso(t - 30 * MINUTE);
    let answer = app
        .post_conversion(&json!({
            "clientId": "crm-7", "orderId": "ORD-1001", "value": 499.00, "currency": "EUR",
            "occurredAt": occurred,
        }))
        .accepted();
    assert_eq!(
        answer,
        (event.clone(), customer.clone()),
        "the API's session"
    );

    let v = status(&app, "ORD-1001");
    assert_eq!(v["eventId"], json!(event));
    assert_eq!(v["sessionId"], json!(customer));
    assert_eq!(v["value"].as_f64(), Some(499.0), "{v}");
    assert_eq!(v["currency"], "EUR");
    assert_eq!(v["occurredAt"], json!(occurred));
    assert_eq!(v["sources"], json!(["pixel", "api"]));
    // Processed again from the start: the pixel's results and parking are gone.
    assert_eq!(v["status"], "queued", "{v}");
    assert_eq!(v["attribution"], Value::Null);
    assert_eq!(v["pendingReason"], Value::Null);
    assert_eq!(v["attempts"], 0);

    assert_eq!(drain(&app).processed, 1);
    let v = status(&app, "ORD-1001");
    assert_eq!(v["status"], "processed", "{v}");
    assert_eq!(v["reportingValue"].as_f64(), Some(499.0), "{v}");
    assert_eq!(v["reportingCurrency"], "EUR");
    let (source, medium, _, session) = touch(&v);
    assert_eq!(
        (source.as_str(), medium.as_str(), session),
        ("newsletter", "email", Some(customer))
    );

    let (rows, revenues) = report(&app, &app.site.id, &[]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["key"], "newsletter", "{rows:?}");
    assert_eq!(rows[0]["conversions"], 1);
    assert_eq!(rows[0]["unconverted"], 0);
    assert_eq!(revenues, ["499.00"], "{rows:?}");
}

#[test]
fn an_api_repeat_after_a_take_over_returns_the_original_event_and_session_and_changes_nothing() {
    let app = manual().start();
    let t = now_ms();
    let pixel_session = pixel_purchase(
        &app,
        "pv",
        "https://shop.example/?utm_source=pixelside",
        "ORD-2",
        json!(10),
        "EUR",
        t - HOUR,
    );
    let event = status(&app, "ORD-2")["eventId"]
        .as_str()
        .unwrap()
        .to_owned();
    let customer = app.pageview(
        "cust",
        "https://shop.example/?utm_source=newsletter",
        t - 2 * HOUR,
    );
    assert_ne!(customer, pixel_session);

    let first = json!({"visitorId": "cust", "orderId": "ORD-2", "value": 25, "currency": "EUR"});
    assert_eq!(
        app.post_conversion(&first).accepted(),
        (event.clone(), customer.clone())
    );
    assert_eq!(drain(&app).processed, 1);
    let processed = status(&app, "ORD-2");
    assert_eq!(processed["value"].as_f64(), Some(25.0), "{processed}");

    // Repeats, the same or with other details and identifiers, answer the original pair.
    let other = json!({
        "visitorId": "pv", "orderId": "ORD-2", "value": 99, "currency": "USD", "type": "lead",
        "occurredAt": iso(t - 10 * MINUTE),
    });
    for body in [&first, &other] {
        assert_eq!(
            app.post_conversion(body).accepted(),
            (event.clone(), customer.clone())
        );
    }
    assert_eq!(status(&app, "ORD-2"), processed, "nothing changed");
    assert_eq!(drain(&app), Default::default(), "nothing queued again");
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM conversions WHERE order_id = 'ORD-2'",
            &[]
        ),
        1
    );
}

#[test]
fn the_api_keeps_the_pixels_session_when_its_identifiers_resolve_none() {
    let app = manual().start();
    let t = now_ms();
    let pixel_session = pixel_purchase(
        &app,
        "pv",
        "https://shop.example/?utm_source=pixelside",
        "ORD-3",
        json!(5),
        "EUR",
        t - HOUR,
    );
    let event = status(&app, "ORD-3")["eventId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(drain(&app).processed, 1);

    // The backend knows the buyer by an id the pixel never saw: 202, not 422.
    let body =
        json!({"clientId": "crm-unknown", "orderId": "ORD-3", "value": 20, "currency": "EUR"});
    assert_eq!(
        app.post_conversion(&body).accepted(),
        (event.clone(), pixel_session.clone())
    );
    let v = status(&app, "ORD-3");
    assert_eq!(
        (
            v["value"].as_f64(),
            v["sessionId"].clone(),
            v["status"].clone()
        ),
        (Some(20.0), json!(pixel_session), json!("queued")),
        "{v}"
    );
    assert_eq!(v["sources"], json!(["pixel", "api"]));
    assert_eq!(drain(&app).processed, 1);
    let v = status(&app, "ORD-3");
    assert_eq!(v["reportingValue"].as_f64(), Some(20.0), "{v}");
    assert_eq!(touch(&v).3, Some(pixel_session));

    // An unknown order with the same identifiers has no session to keep.
    let fresh = json!({"clientId": "crm-unknown", "orderId": "ORD-4", "value": 20});
    expect_error(&app.post_conversion(&fresh), 422, "NO_SESSION");
}

#[test]
fn a_pixel_flood_of_unconvertible_purchases_cannot_make_the_api_answer_503() {
    let mut app = manual()
        .serve_args(&[
            "--max-backlog",
            "50",
            "--max-pixel-backlog",
            "20",
            "--pixel-rate",
            "0",
            "--pixel-site-rate",
            "0",
        ])
        .start();
    let t = now_ms();
    app.pageview("cust", "https://shop.example/", t - HOUR);
    // 80 purchases in a currency that never gets a rate, more than the API's backlog limit.
    let flood: Vec<u16> = (0..8)
        .map(|i| {
            let events: Vec<Value> = (0..10)
                .map(|j| json!({"type": "purchase", "orderId": format!("X-{i}-{j}"), "value": 1, "currency": "XTS"}))
                .collect();
            let r = app.collect(&json!({
                "trackerId": app.site.tracker_id, "visitorId": format!("flood-{i}"),
                "events": events,
            }));
            if r.status == 503 {
                expect_unavailable(&r);
            }
            r.status
        })
        .collect();

    app.post_conversion(&json!({"visitorId": "cust", "orderId": "real-1", "value": 10}))
        .accepted();
    assert_eq!(
        flood,
        [200, 200, 503, 503, 503, 503, 503, 503],
        "pixel purchases are refused once the pixel's budget of 20 is used"
    );
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM conversions WHERE currency = 'XTS'",
            &[]
        ),
        20
    );
    // Batches without a purchase are still taken.
    app.pageview("cust", "https://shop.example/again", t - MINUTE);

    app.restart();
    app.post_conversion(&json!({"visitorId": "cust", "orderId": "real-2", "value": 10}))
        .accepted();
    let r = app.collect(&json!({
        "trackerId": app.site.tracker_id, "visitorId": "flood-x",
        "events": [{"type": "purchase", "orderId": "X-after", "value": 1, "currency": "XTS"}],
    }));
    expect_unavailable(&r);
}

#[test]
fn parked_fx_pending_items_do_not_count_toward_the_backlog() {
    let app = manual().serve_args(&["--max-backlog", "5"]).start();
    app.pageview("cust", "https://shop.example/", now_ms() - HOUR);
    let order = |o: &str| json!({"visitorId": "cust", "orderId": o, "value": 3, "currency": "XTS"});
    for i in 0..5 {
        app.post_conversion(&order(&format!("xts-{i}"))).accepted();
    }
    expect_unavailable(&app.post_conversion(&order("xts-5")));
    // More parked items than the limit: waiting for rates, they wait for no one.
    assert_eq!(drain(&app).fx_pending, 5);
    // The server sees the other process's commit within a second, without a write of its own.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = app.post_conversion(&order("xts-5"));
        if r.status == 202 {
            break;
        }
        expect_unavailable(&r);
        assert!(Instant::now() < deadline, "the API kept answering 503");
        std::thread::sleep(Duration::from_millis(100));
    }
    for i in 6..9 {
        app.post_conversion(&order(&format!("xts-{i}"))).accepted();
    }

    // A parked order says what it waits for.
    let v = status(&app, "xts-0");
    assert_eq!(v["status"], "fx_pending", "{v}");
    let day = &v["occurredAt"].as_str().unwrap()[..10];
    assert_eq!(
        v["pendingReason"],
        json!(format!(
            "no EUR→XTS rate on or before {day}: get ECB rates with `convapi rates fetch` (or `rates import FILE`, or `serve --rates-fetch daily`)"
        ))
    );
    assert_eq!(
        v["lastError"],
        Value::Null,
        "waiting for rates is not a failure"
    );
}
