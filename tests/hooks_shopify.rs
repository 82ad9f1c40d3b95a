//! Shopify webhook sources (docs/shopify.md) through the front door: `POST /hooks/{sourceId}` with
//! the order and refund resources as Shopify's webhook reference shapes them (built here from its
//! documented fields, not copied from a live store; ids and times fresh per test), signed as
//! Shopify signs them (`X-Shopify-Hmac-Sha256`: base64 HMAC-SHA256 of the raw body). A paid order
//! is a purchase with its exact total (USD and JPY), refunds are the sum of their successful refund
//! transactions, a cancellation cancels, a delivery again changes nothing, and the refusals.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{json, Value};

use crate::common::*;

const SECRET: &str = "4f2b8c1e9d7a6b5c3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d";

/// A fresh Shopify id (a 64-bit number, as Shopify's are).
fn shopify_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    820_982_911_946_154_508
        + (now_ms() as u64 % 1_000_000) * 1000
        + NEXT.fetch_add(1, Ordering::Relaxed)
}

/// `ms` as Shopify writes times: RFC 3339 with the shop's offset.
fn shop_time(ms: i64) -> String {
    let t = chrono::DateTime::from_timestamp_millis(ms).unwrap();
    t.with_timezone(&chrono::FixedOffset::west_opt(5 * 3600).unwrap())
        .to_rfc3339()
}

/// An order as `orders/paid` and `orders/cancelled` send it (the Order resource of the REST Admin
/// API's webhook reference), with the fields convapi reads and many it does not.
fn order(id: u64, total: &str, currency: &str, customer: u64, note_attributes: Value) -> Value {
    let at = shop_time(now_ms() - 60_000);
    let order = json!({
        "id": id,
        "admin_graphql_api_id": format!("gid://shopify/Order/{id}"),
        "app_id": null,
        "browser_ip": null,
        "buyer_accepts_marketing": true,
        "cancel_reason": null,
        "cancelled_at": null,
        "cart_token": null,
        "checkout_id": null,
        "checkout_token": null,
        "closed_at": null,
        "confirmed": false,
        "contact_email": "jon@example.com",
        "created_at": at,
        "currency": currency,
        "current_subtotal_price": total,
        "current_total_price": total,
        "current_total_tax": "0.00",
        "customer_locale": "en",
        "email": "jon@example.com",
        "financial_status": "paid",
    });
    let middle = json!({
        "fulfillment_status": null,
        "landing_site": null,
        "name": "#9999",
        "note": null,
        "note_attributes": note_attributes,
        "number": 234,
        "order_number": 1234,
        "payment_gateway_names": ["visa", "bogus"],
        "presentment_currency": currency,
        "processed_at": at,
        "source_name": "web",
        "subtotal_price": total,
        "tags": "tag1, tag2",
        "test": true,
        "token": "123456abcd",
        "total_discounts": "0.00",
        "total_line_items_price": total,
        "total_price": total,
        "total_price_set": {
            "shop_money": {"amount": total, "currency_code": currency},
            "presentment_money": {"amount": total, "currency_code": currency},
        },
        "total_tax": "0.00",
        "total_weight": 0,
        "updated_at": at,
        "user_id": null,
    });
    let more = json!({
        "billing_address": {"first_name": "Steve", "last_name": "Shipper", "country_code": "US"},
        "customer": {
            "id": customer,
            "email": "john@example.com",
            "created_at": null,
            "updated_at": null,
            "first_name": "John",
            "last_name": "Smith",
            "state": "disabled",
            "note": null,
            "verified_email": true,
            "currency": currency,
            "admin_graphql_api_id": format!("gid://shopify/Customer/{customer}"),
        },
        "discount_applications": [],
        "fulfillments": [],
        "line_items": [{
            "id": 866550311766439020u64,
            "admin_graphql_api_id": "gid://shopify/LineItem/866550311766439020",
            "fulfillable_quantity": 1,
            "name": "IPod Nano - 8GB",
            "price": total,
            "product_id": 632910392,
            "quantity": 1,
            "sku": "IPOD2008PINK",
            "title": "IPod Nano - 8GB",
            "variant_id": 808950810,
        }],
        "refunds": [],
        "shipping_lines": [],
    });
    let mut order = order;
    for part in [middle, more] {
        order
            .as_object_mut()
            .unwrap()
            .extend(part.as_object().unwrap().clone());
    }
    order
}

/// A refund as `refunds/create` sends it (the Refund resource), with its transactions: each
/// `(kind, status, amount)`.
fn refund(id: u64, order_id: u64, currency: &str, transactions: &[(&str, &str, &str)]) -> Value {
    let at = shop_time(now_ms() - 30_000);
    let transactions: Vec<Value> = transactions
        .iter()
        .enumerate()
        .map(|(i, (kind, status, amount))| {
            json!({
                "id": id * 10 + i as u64,
                "order_id": order_id,
                "kind": kind,
                "gateway": "bogus",
                "status": status,
                "message": "Bogus Gateway: Forced success",
                "created_at": at,
                "test": true,
                "authorization": null,
                "parent_id": 389404469,
                "processed_at": at,
                "source_name": "web",
                "receipt": {},
                "amount": amount,
                "currency": currency,
                "admin_graphql_api_id": format!("gid://shopify/OrderTransaction/{}", id * 10 + i as u64),
            })
        })
        .collect();
    json!({
        "id": id,
        "order_id": order_id,
        "created_at": at,
        "note": "Things were damaged",
        "user_id": 548380009,
        "processed_at": at,
        "restock": false,
        "duties": [],
        "additional_fees": [],
        "admin_graphql_api_id": format!("gid://shopify/Refund/{id}"),
        "refund_line_items": [],
        "transactions": transactions,
        "order_adjustments": [],
    })
}

/// Posts `payload` as Shopify delivers `topic` (webhook id `webhook_id`), signed with `secret`.
fn post(
    app: &TestApp,
    source: &str,
    topic: &str,
    webhook_id: &str,
    payload: &Value,
    secret: &str,
) -> Resp {
    let body = serde_json::to_vec(payload).unwrap();
    let sig = base64_signature(secret, &body);
    app.post_hook_with(
        source,
        &[
            ("X-Shopify-Topic", topic),
            ("X-Shopify-Hmac-Sha256", &sig),
            ("X-Shopify-Shop-Domain", "example.myshopify.com"),
            ("X-Shopify-API-Version", "2024-07"),
            ("X-Shopify-Webhook-Id", webhook_id),
        ],
        &body,
    )
}

/// The outcome of a delivery signed with [`SECRET`].
#[track_caller]
fn deliver(app: &TestApp, source: &str, topic: &str, webhook_id: &str, payload: &Value) -> String {
    let v = post(app, source, topic, webhook_id, payload, SECRET).expect(200);
    assert_eq!(v["received"], json!(true), "{v}");
    v["outcome"].as_str().expect("an outcome").to_owned()
}

/// (value, currency, netValue, state, number of adjustments) of order `id`.
fn status(app: &TestApp, id: u64) -> (String, Value, String, Value, usize) {
    let v = app.order_status(&id.to_string()).expect(200);
    (
        v["value"].to_string(),
        v["currency"].clone(),
        v["netValue"].to_string(),
        v["state"].clone(),
        v["adjustments"].as_array().unwrap().len(),
    )
}

#[test]
fn a_paid_order_is_a_purchase_with_its_exact_total_joined_by_customer_or_cart_attribute() {
    let app = TestApp::start();
    let source = app.add_source("shopify", SECRET);

    // USD, the person by the customer's id (the identify user id).
    let customer = shopify_id();
    app.identify(&unique("v"), &customer.to_string(), now_ms() - HOUR);
    let id = shopify_id();
    let paid = order(id, "598.94", "USD", customer, json!([]));
    assert_eq!(
        deliver(&app, &source, "orders/paid", &unique("wh"), &paid),
        "accepted"
    );
    assert_eq!(
        status(&app, id),
        (
            "598.94".into(),
            json!("USD"),
            "598.94".into(),
            json!("active"),
            0
        )
    );

    // JPY has no minor unit: "5000" is 5000 yen. The visitor by the cart attribute svc_vid.
    let visitor = unique("v");
    app.pageview(&visitor, "https://shop.example/", now_ms() - HOUR);
    let id = shopify_id();
    let attrs =
        json!([{"name": "gift_wrap", "value": "no"}, {"name": "svc_vid", "value": visitor}]);
    let yen = order(id, "5000", "JPY", shopify_id(), attrs);
    assert_eq!(
        deliver(&app, &source, "orders/paid", &unique("wh"), &yen),
        "accepted"
    );
    assert_eq!(status(&app, id).0, "5000");
    assert_eq!(status(&app, id).1, json!("JPY"));
}

#[test]
fn refunds_count_once_each_partial_then_full_and_a_delivery_again_changes_nothing() {
    let app = TestApp::start();
    let source = app.add_source("shopify", SECRET);
    let customer = shopify_id();
    app.identify(&unique("v"), &customer.to_string(), now_ms() - HOUR);
    let id = shopify_id();
    let paid_hook = unique("wh");
    let paid = order(id, "100.00", "EUR", customer, json!([]));
    assert_eq!(
        deliver(&app, &source, "orders/paid", &paid_hook, &paid),
        "accepted"
    );

    // A partial refund: two successful refund transactions; a failed one and a sale do not count.
    let first = refund(
        shopify_id(),
        id,
        "EUR",
        &[
            ("refund", "success", "20.00"),
            ("refund", "success", "5.50"),
            ("refund", "failure", "50.00"),
        ],
    );
    let first_hook = unique("wh");
    assert_eq!(
        deliver(&app, &source, "refunds/create", &first_hook, &first),
        "accepted"
    );
    let (_, _, net, state, n) = status(&app, id);
    assert_eq!(
        (net.as_str(), state, n),
        ("74.5", json!("partially_refunded"), 1)
    );

    // The same deliveries again (Shopify retries with the same webhook id): duplicate.
    assert_eq!(
        deliver(&app, &source, "refunds/create", &first_hook, &first),
        "duplicate"
    );
    assert_eq!(
        deliver(&app, &source, "orders/paid", &paid_hook, &paid),
        "duplicate"
    );
    // The same refund under another webhook id (a second subscription): still counted once.
    assert_eq!(
        deliver(&app, &source, "refunds/create", &unique("wh"), &first),
        "accepted"
    );
    assert_eq!(status(&app, id).2, "74.5");

    // The rest: fully refunded.
    let rest = refund(shopify_id(), id, "EUR", &[("refund", "success", "74.50")]);
    assert_eq!(
        deliver(&app, &source, "refunds/create", &unique("wh"), &rest),
        "accepted"
    );
    let (value, _, net, state, n) = status(&app, id);
    assert_eq!(
        (value.as_str(), net.as_str(), state, n),
        ("100", "0", json!("refunded"), 2)
    );
}

#[test]
fn a_refund_in_yen_is_exact() {
    let app = TestApp::start();
    let source = app.add_source("shopify", SECRET);
    let customer = shopify_id();
    app.identify(&unique("v"), &customer.to_string(), now_ms() - HOUR);
    let id = shopify_id();
    let paid = order(id, "12800", "JPY", customer, json!([]));
    assert_eq!(
        deliver(&app, &source, "orders/paid", &unique("wh"), &paid),
        "accepted"
    );
    let r = refund(shopify_id(), id, "JPY", &[("refund", "success", "3200")]);
    assert_eq!(
        deliver(&app, &source, "refunds/create", &unique("wh"), &r),
        "accepted"
    );
    assert_eq!(status(&app, id).2, "9600");
}

#[test]
fn a_cancelled_order_is_cancelled_once() {
    let app = TestApp::start();
    let source = app.add_source("shopify", SECRET);
    let customer = shopify_id();
    app.identify(&unique("v"), &customer.to_string(), now_ms() - HOUR);
    let id = shopify_id();
    let paid = order(id, "42.00", "USD", customer, json!([]));
    assert_eq!(
        deliver(&app, &source, "orders/paid", &unique("wh"), &paid),
        "accepted"
    );
    let mut cancelled = paid.clone();
    cancelled["cancelled_at"] = json!(shop_time(now_ms() - 10_000));
    cancelled["cancel_reason"] = json!("customer");
    cancelled["financial_status"] = json!("voided");
    assert_eq!(
        deliver(&app, &source, "orders/cancelled", &unique("wh"), &cancelled),
        "accepted"
    );
    // Another delivery of the same cancellation: the same cancel, nothing more.
    assert_eq!(
        deliver(&app, &source, "orders/cancelled", &unique("wh"), &cancelled),
        "accepted"
    );
    let (_, _, net, state, n) = status(&app, id);
    assert_eq!((net.as_str(), state, n), ("0", json!("cancelled"), 1));
}

#[test]
fn other_topics_are_ignored() {
    let app = TestApp::start();
    let source = app.add_source("shopify", SECRET);
    let id = shopify_id();
    let o = order(id, "10.00", "USD", shopify_id(), json!([]));
    let hook = unique("wh");
    assert_eq!(
        deliver(&app, &source, "orders/create", &hook, &o),
        "ignored"
    );
    assert_eq!(
        deliver(&app, &source, "orders/create", &hook, &o),
        "duplicate"
    );
    assert_eq!(
        deliver(
            &app,
            &source,
            "products/update",
            &unique("wh"),
            &json!({"id": 1})
        ),
        "ignored"
    );
    app.order_status(&id.to_string()).expect(404);
}

#[test]
fn a_wrong_secret_or_no_signature_is_refused_and_counted_and_a_large_body_is_413() {
    let app = TestApp::start();
    let source = app.add_source("shopify", SECRET);
    let customer = shopify_id();
    app.identify(&unique("v"), &customer.to_string(), now_ms() - HOUR);
    let id = shopify_id();
    let paid = order(id, "10.00", "USD", customer, json!([]));
    let resp = post(
        &app,
        &source,
        "orders/paid",
        &unique("wh"),
        &paid,
        "another-secret",
    );
    expect_error(&resp, 401, "BAD_SIGNATURE");
    assert!(
        resp.text().contains("Settings → Notifications → Webhooks"),
        "{}",
        resp.text()
    );
    let body = serde_json::to_vec(&paid).unwrap();
    let unsigned = app.post_hook_with(&source, &[("X-Shopify-Topic", "orders/paid")], &body);
    expect_error(&unsigned, 401, "BAD_SIGNATURE");
    app.order_status(&id.to_string()).expect(404);
    let list = app.cli_json(&["source", "list", "--site", &app.site.id, "--json"]);
    assert_eq!(list[0]["signatureFailures"], json!(2), "{list}");

    // Over 1 MiB by its Content-Length: refused before the body is read.
    let sig = base64_signature(SECRET, b"{}");
    let answer = app.post_hook_declaring(
        &source,
        &[
            ("X-Shopify-Topic", "orders/paid"),
            ("X-Shopify-Hmac-Sha256", &sig),
        ],
        1024 * 1024 + 1,
    );
    assert!(
        answer.starts_with("HTTP/1.1 413") && answer.contains("PAYLOAD_TOO_LARGE"),
        "{answer}"
    );

    // The right secret still holds.
    assert_eq!(
        deliver(&app, &source, "orders/paid", &unique("wh"), &paid),
        "accepted"
    );
}

/// Shopify's own published samples (tests/fixtures/README.md), as they are: order #1001 paid
/// (409.94 USD, customer 207119551, whom no visit here names: recorded unattributed), then its
/// refund 509562969 (one successful refund transaction of 209.00).
#[test]
fn shopifys_published_order_and_refund_samples() {
    let app = TestApp::start();
    let source = app.add_source("shopify", SECRET);
    let order: Value =
        serde_json::from_str(include_str!("fixtures/shopify/order-450789469.json")).unwrap();
    let refund: Value =
        serde_json::from_str(include_str!("fixtures/shopify/refund-509562969.json")).unwrap();
    assert_eq!(
        deliver(&app, &source, "orders/paid", &unique("wh"), &order),
        "unattributed"
    );
    let (value, currency, net, _, adjustments) = status(&app, 450789469);
    assert_eq!(
        (value.as_str(), currency, net.as_str(), adjustments),
        ("409.94", json!("USD"), "409.94", 0)
    );
    // Counted at once as (unattributed) by the server's pipeline, on its first pass (a pass of
    // this test's own would race with it: an item the server's pass holds is skipped). No rates
    // are imported here, so the order then waits for one (`fx_pending`).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let v = app.order_status("450789469").expect(200);
        if v["attribution"].is_object() {
            assert_eq!(v["attribution"]["source"], json!("(unattributed)"), "{v}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never attributed: {v}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        deliver(&app, &source, "refunds/create", &unique("wh"), &refund),
        "accepted"
    );
    let (_, _, net, state, adjustments) = status(&app, 450789469);
    assert_eq!(
        (net.as_str(), state, adjustments),
        ("200.94", json!("partially_refunded"), 1)
    );
}
