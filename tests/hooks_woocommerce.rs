//! WooCommerce webhook sources (docs/woocommerce.md) through the front door: `POST
//! /hooks/{sourceId}` with orders as WooCommerce's REST API v3 shapes them (its documented order and
//! refund properties, built here, not captured from a real shop; ids and times fresh per test),
//! signed as WooCommerce signs them (`X-WC-Webhook-Signature`: base64 HMAC-SHA256 of the raw body).
//! The unsigned ping answers 200; an order is a purchase by its status, its refunds count once by
//! their ids, `refunded` alone refunds the whole total, `cancelled` cancels; deliveries again change
//! nothing; the refusals.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{json, Value};

use crate::common::*;

const SECRET: &str = "wc-secret-7Hq2!pZ9@Lm4";

fn order_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(700);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// `ms` as WooCommerce writes its `*_gmt` times.
fn gmt(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string()
}

/// An order as the REST API v3 (and its webhooks) shape it: `refunds` each `(id, total)`.
fn order(
    id: u64,
    status: &str,
    total: &str,
    customer_id: u64,
    vid: Option<&str>,
    refunds: &[(u64, &str)],
) -> Value {
    let created = gmt(now_ms() - 60_000);
    let meta: Vec<Value> = vid
        .map(|v| json!({"id": 4521, "key": "_svc_vid", "value": v}))
        .into_iter()
        .chain([json!({"id": 4522, "key": "is_vat_exempt", "value": "no"})])
        .collect();
    let refunds: Vec<Value> = refunds
        .iter()
        .map(|(rid, t)| json!({"id": rid, "reason": "damaged in transit", "total": t}))
        .collect();
    let mut order = json!({
        "id": id,
        "parent_id": 0,
        "number": id.to_string(),
        "order_key": format!("wc_order_{id}"),
        "created_via": "checkout",
        "version": "8.9.1",
        "status": status,
        "currency": "EUR",
        "date_created": created,
        "date_created_gmt": created,
        "date_modified": created,
        "date_modified_gmt": created,
        "discount_total": "0.00",
        "discount_tax": "0.00",
        "shipping_total": "10.00",
        "shipping_tax": "0.00",
        "cart_tax": "1.35",
        "total": total,
        "total_tax": "1.35",
        "prices_include_tax": false,
        "customer_id": customer_id,
    });
    let rest = json!({
        "customer_ip_address": "",
        "customer_user_agent": "",
        "customer_note": "",
        "billing": {"first_name": "John", "last_name": "Doe", "country": "US", "email": "john.doe@example.com"},
        "shipping": {"first_name": "John", "last_name": "Doe", "country": "US"},
        "payment_method": "bacs",
        "payment_method_title": "Direct Bank Transfer",
        "transaction_id": "",
        "date_paid": created,
        "date_paid_gmt": created,
        "date_completed": null,
        "date_completed_gmt": null,
        "cart_hash": "",
        "meta_data": meta,
        "line_items": [{
            "id": 315, "name": "Woo Single #1", "product_id": 93, "variation_id": 0,
            "quantity": 2, "tax_class": "", "subtotal": "6.00", "subtotal_tax": "0.45",
            "total": "6.00", "total_tax": "0.45", "sku": "", "price": 3,
        }],
        "tax_lines": [],
        "shipping_lines": [{"id": 317, "method_title": "Flat Rate", "method_id": "flat_rate", "total": "10.00"}],
        "fee_lines": [],
        "coupon_lines": [],
        "refunds": refunds,
    });
    order
        .as_object_mut()
        .unwrap()
        .extend(rest.as_object().unwrap().clone());
    order
}

/// Posts `payload` as WooCommerce delivers `topic` (delivery id `delivery`), signed with `secret`.
fn post(
    app: &TestApp,
    source: &str,
    topic: &str,
    delivery: &str,
    payload: &Value,
    secret: &str,
) -> Resp {
    let body = serde_json::to_vec(payload).unwrap();
    let sig = base64_signature(secret, &body);
    let (resource, event) = topic.split_once('.').unwrap_or((topic, ""));
    app.post_hook_with(
        source,
        &[
            ("X-WC-Webhook-Source", "https://shop.example/"),
            ("X-WC-Webhook-Topic", topic),
            ("X-WC-Webhook-Resource", resource),
            ("X-WC-Webhook-Event", event),
            ("X-WC-Webhook-Signature", &sig),
            ("X-WC-Webhook-ID", "12"),
            ("X-WC-Webhook-Delivery-ID", delivery),
        ],
        &body,
    )
}

#[track_caller]
fn deliver(app: &TestApp, source: &str, topic: &str, delivery: &str, payload: &Value) -> String {
    let v = post(app, source, topic, delivery, payload, SECRET).expect(200);
    assert_eq!(v["received"], json!(true), "{v}");
    v["outcome"].as_str().expect("an outcome").to_owned()
}

/// (value, netValue, state, number of adjustments) of order `id`.
fn status(app: &TestApp, id: u64) -> (String, String, Value, usize) {
    let v = app.order_status(&id.to_string()).expect(200);
    assert_eq!(v["currency"], json!("EUR"), "{v}");
    (
        v["value"].to_string(),
        v["netValue"].to_string(),
        v["state"].clone(),
        v["adjustments"].as_array().unwrap().len(),
    )
}

/// A visitor with a pageview an hour ago; its id.
fn visitor(app: &TestApp) -> String {
    let v = unique("v");
    app.pageview(&v, "https://shop.example/", now_ms() - HOUR);
    v
}

#[test]
fn the_unsigned_ping_a_new_webhook_sends_answers_200_and_is_no_failure() {
    let app = TestApp::start();
    let source = app.add_source("woocommerce", SECRET);
    let resp = app.send(
        "POST",
        &format!("/hooks/{source}"),
        &[("Content-Type", "application/x-www-form-urlencoded")],
        Some(b"webhook_id=12"),
    );
    assert_eq!(resp.expect(200)["outcome"], json!("ping"));
    // Anything else unsigned is refused.
    let resp = app.send(
        "POST",
        &format!("/hooks/{source}"),
        &[("Content-Type", "application/x-www-form-urlencoded")],
        Some(b"webhook_id=12&status=completed"),
    );
    expect_error(&resp, 401, "BAD_SIGNATURE");
    let list = app.cli_json(&["source", "list", "--site", &app.site.id, "--json"]);
    assert_eq!(list[0]["signatureFailures"], json!(1), "{list}");
}

#[test]
fn a_paid_order_is_a_purchase_once_whatever_the_updates_and_retries() {
    let app = TestApp::start();
    let source = app.add_source("woocommerce", SECRET);
    let id = order_id();
    let vid = visitor(&app);
    // Pending payment: nothing yet.
    let pending = order(id, "pending", "29.35", 0, Some(&vid), &[]);
    assert_eq!(
        deliver(&app, &source, "order.created", &unique("d"), &pending),
        "ignored"
    );
    app.order_status(&id.to_string()).expect(404);
    // Paid: processing.
    let processing = order(id, "processing", "29.35", 0, Some(&vid), &[]);
    let delivery = unique("d");
    assert_eq!(
        deliver(&app, &source, "order.updated", &delivery, &processing),
        "accepted"
    );
    assert_eq!(
        status(&app, id),
        ("29.35".into(), "29.35".into(), json!("active"), 0)
    );
    let event_id = app.order_status(&id.to_string()).expect(200)["eventId"].clone();
    // The same delivery again: duplicate.
    assert_eq!(
        deliver(&app, &source, "order.updated", &delivery, &processing),
        "duplicate"
    );
    // Updated again with the same status (a note added), and then completed: the same order.
    assert_eq!(
        deliver(&app, &source, "order.updated", &unique("d"), &processing),
        "accepted"
    );
    let completed = order(id, "completed", "29.35", 0, Some(&vid), &[]);
    assert_eq!(
        deliver(&app, &source, "order.updated", &unique("d"), &completed),
        "accepted"
    );
    assert_eq!(
        status(&app, id),
        ("29.35".into(), "29.35".into(), json!("active"), 0)
    );
    assert_eq!(
        app.order_status(&id.to_string()).expect(200)["eventId"],
        event_id
    );
}

#[test]
fn a_registered_customer_is_joined_by_customer_id() {
    let app = TestApp::start();
    let source = app.add_source("woocommerce", SECRET);
    app.identify(&unique("v"), "42", now_ms() - HOUR);
    let id = order_id();
    let paid = order(id, "processing", "119.90", 42, None, &[]);
    assert_eq!(
        deliver(&app, &source, "order.created", &unique("d"), &paid),
        "accepted"
    );
    assert_eq!(status(&app, id).0, "119.9");
}

#[test]
fn refunds_count_once_by_id_partial_then_full() {
    let app = TestApp::start();
    let source = app.add_source("woocommerce", SECRET);
    let id = order_id();
    let vid = visitor(&app);
    let paid = order(id, "processing", "29.35", 0, Some(&vid), &[]);
    assert_eq!(
        deliver(&app, &source, "order.created", &unique("d"), &paid),
        "accepted"
    );

    // A partial refund: the order stays processing with one refund listed.
    let partial = order(id, "processing", "29.35", 0, Some(&vid), &[(730, "-10.00")]);
    assert_eq!(
        deliver(&app, &source, "order.updated", &unique("d"), &partial),
        "accepted"
    );
    assert_eq!(
        status(&app, id),
        (
            "29.35".into(),
            "19.35".into(),
            json!("partially_refunded"),
            1
        )
    );
    // Sent again under another delivery: the same refund, counted once.
    assert_eq!(
        deliver(&app, &source, "order.updated", &unique("d"), &partial),
        "accepted"
    );
    assert_eq!(status(&app, id).3, 1);

    // The rest: refunded, both refunds listed (newest first, as WooCommerce lists them).
    let full = order(
        id,
        "refunded",
        "29.35",
        0,
        Some(&vid),
        &[(731, "-19.35"), (730, "-10.00")],
    );
    assert_eq!(
        deliver(&app, &source, "order.updated", &unique("d"), &full),
        "accepted"
    );
    assert_eq!(
        status(&app, id),
        ("29.35".into(), "0".into(), json!("refunded"), 2)
    );
}

#[test]
fn refunded_with_no_refund_listed_refunds_the_whole_total() {
    let app = TestApp::start();
    let source = app.add_source("woocommerce", SECRET);
    let id = order_id();
    let vid = visitor(&app);
    let paid = order(id, "completed", "45.00", 0, Some(&vid), &[]);
    assert_eq!(
        deliver(&app, &source, "order.created", &unique("d"), &paid),
        "accepted"
    );
    let refunded = order(id, "refunded", "45.00", 0, Some(&vid), &[]);
    assert_eq!(
        deliver(&app, &source, "order.updated", &unique("d"), &refunded),
        "accepted"
    );
    assert_eq!(
        deliver(&app, &source, "order.updated", &unique("d"), &refunded),
        "accepted"
    );
    assert_eq!(
        status(&app, id),
        ("45".into(), "0".into(), json!("refunded"), 1)
    );
}

#[test]
fn a_cancelled_order_is_cancelled() {
    let app = TestApp::start();
    let source = app.add_source("woocommerce", SECRET);
    let id = order_id();
    let vid = visitor(&app);
    let paid = order(id, "processing", "12.50", 0, Some(&vid), &[]);
    assert_eq!(
        deliver(&app, &source, "order.created", &unique("d"), &paid),
        "accepted"
    );
    let cancelled = order(id, "cancelled", "12.50", 0, Some(&vid), &[]);
    assert_eq!(
        deliver(&app, &source, "order.updated", &unique("d"), &cancelled),
        "accepted"
    );
    assert_eq!(
        status(&app, id),
        ("12.5".into(), "0".into(), json!("cancelled"), 1)
    );
}

#[test]
fn other_topics_are_ignored_and_a_wrong_secret_or_large_body_refused() {
    let app = TestApp::start();
    let source = app.add_source("woocommerce", SECRET);
    let product = json!({"id": 794, "name": "Premium Quality", "type": "simple", "price": "21.99"});
    assert_eq!(
        deliver(&app, &source, "product.updated", &unique("d"), &product),
        "ignored"
    );
    let coupon = json!({"id": 719, "code": "10off", "amount": "10.00"});
    assert_eq!(
        deliver(&app, &source, "coupon.created", &unique("d"), &coupon),
        "ignored"
    );

    let id = order_id();
    let paid = order(id, "processing", "29.35", 0, Some(&visitor(&app)), &[]);
    let resp = post(
        &app,
        &source,
        "order.created",
        &unique("d"),
        &paid,
        "another secret",
    );
    expect_error(&resp, 401, "BAD_SIGNATURE");
    assert!(
        resp.text().contains("Advanced → Webhooks"),
        "{}",
        resp.text()
    );
    app.order_status(&id.to_string()).expect(404);
    let list = app.cli_json(&["source", "list", "--site", &app.site.id, "--json"]);
    assert_eq!(list[0]["signatureFailures"], json!(1), "{list}");

    // Over 1 MiB by its Content-Length: refused before the body is read.
    let sig = base64_signature(SECRET, b"{}");
    let answer = app.post_hook_declaring(
        &source,
        &[
            ("X-WC-Webhook-Topic", "order.created"),
            ("X-WC-Webhook-Signature", &sig),
        ],
        1024 * 1024 + 1,
    );
    assert!(
        answer.starts_with("HTTP/1.1 413") && answer.contains("PAYLOAD_TOO_LARGE"),
        "{answer}"
    );
}

#[test]
fn forgetting_a_customer_clears_a_kept_refund_of_theirs() {
    let app = TestApp::start();
    let source = app.add_source("woocommerce", SECRET);
    // A refund of an order convapi never received: kept with its payload (the customer's
    // details in it), and the customer's id with it.
    let id = order_id();
    let refunded = order(id, "refunded", "45.00", 4242, None, &[(990, "-45.00")]);
    let outcome = deliver(&app, &source, "order.updated", &unique("d"), &refunded);
    assert_eq!(outcome, "order_unknown");
    let kept = || {
        app.query_i64(
            "SELECT COUNT(*) FROM hook_events WHERE payload IS NOT NULL",
            &[],
        )
    };
    assert_eq!(kept(), 1);
    app.cli_json(&[
        "forget",
        "--site",
        &app.site.id,
        "--client-id",
        "4242",
        "--json",
    ]);
    assert_eq!(kept(), 0);
}

/// WooCommerce's published samples (tests/fixtures/README.md), as they are: order 727 in
/// `processing` (29.35 USD, a guest) is a purchase; order 723, `completed` with two refunds listed
/// (10.00 and 9.00 of 39.00), is a purchase and its two refunds, each once.
#[test]
fn woocommerces_published_order_samples() {
    let app = TestApp::start();
    let source = app.add_source("woocommerce", SECRET);
    let processing: Value = serde_json::from_str(include_str!(
        "fixtures/woocommerce/order-727-processing.json"
    ))
    .unwrap();
    let refunded: Value = serde_json::from_str(include_str!(
        "fixtures/woocommerce/order-723-completed-with-refunds.json"
    ))
    .unwrap();
    assert_eq!(
        deliver(&app, &source, "order.created", &unique("d"), &processing),
        "unattributed"
    );
    let v = app.order_status("727").expect(200);
    assert_eq!(
        (&v["value"], &v["currency"], &v["netValue"]),
        (&json!(29.35), &json!("USD"), &json!(29.35)),
        "{v}"
    );
    assert_eq!(
        deliver(&app, &source, "order.updated", &unique("d"), &refunded),
        "unattributed"
    );
    let v = app.order_status("723").expect(200);
    assert_eq!(
        (&v["value"], &v["netValue"], &v["state"]),
        (&json!(39), &json!(20), &json!("partially_refunded")),
        "{v}"
    );
    assert_eq!(v["adjustments"].as_array().unwrap().len(), 2, "{v}");
    // The same state delivered again changes nothing.
    deliver(&app, &source, "order.updated", &unique("d"), &refunded);
    let again = app.order_status("723").expect(200);
    assert_eq!(again["netValue"], json!(20), "{again}");
    assert_eq!(again["adjustments"].as_array().unwrap().len(), 2, "{again}");
}
