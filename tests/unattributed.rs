//! Orders kept with no session (docs/decisions/api.md, "Unattributed orders"): without the site's
//! `--keep-unattributed` the 422 NO_SESSION is as before; with it an API order (alone or in a
//! batch) whose identifiers resolve no session is a 202 with `sessionId: null, attributed: false`,
//! counted at once as `(unattributed)` in the report; the pipeline resolves it again
//! `pipeline::UNATTRIBUTED_RETRY` after it was received: a pixel batch arrived meanwhile
//! attributes it, none leaves it unattributed for good. Webhook orders are always kept the same
//! way. Here: what becomes of an order no session explains.

use std::collections::BTreeMap;

use convapi::forward::platform::Http;
use convapi::forward::sender;
use convapi::metrics::Metrics;
use convapi::store::destinations::{self, Destination, Health};
use serde_json::{json, Value};

use crate::common::fake::{FakePlatform, Reply};
use crate::common::pipeline_support::*;
use crate::common::*;

/// `pipeline::UNATTRIBUTED_RETRY`, the delay the in-process passes run with.
const RETRY: i64 = 120_000;

fn keep_unattributed(app: &TestApp, on: &str) {
    let run = app.cli(&[
        "site",
        "update",
        &app.site.id,
        "--keep-unattributed",
        on,
        "--json",
    ]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.json()["keepUnattributed"], json!(on == "true"));
}

/// Posts an order for a visitor the pixel has not reported (yet); the 202's body.
#[track_caller]
fn unseen_order(app: &TestApp, visitor: &str, order: &str, value: u32) -> Value {
    app.post_conversion(&json!({
        "visitorId": visitor, "orderId": order, "value": value, "currency": "EUR",
    }))
    .expect(202)
}

/// The report over all days by source: `(key, conversions, revenue text, unconverted)`.
fn by_source(app: &TestApp) -> Vec<(String, i64, String, i64)> {
    let (rows, revenues) = report(app, &app.site.id, &["--by", "source"]);
    rows.iter()
        .zip(revenues)
        .map(|(r, rev)| {
            (
                r["key"].as_str().unwrap().to_owned(),
                r["conversions"].as_i64().unwrap(),
                rev,
                r["unconverted"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn row(key: &str, conversions: i64, revenue: &str) -> (String, i64, String, i64) {
    (key.into(), conversions, revenue.into(), 0)
}

#[test]
fn without_the_option_an_order_with_no_session_is_refused_as_before() {
    let app = manual().start();
    let order = unique("order");
    let r = app.post_conversion(&json!({"visitorId": unique("v"), "orderId": order, "value": 5}));
    let v = expect_error(&r, 422, "NO_SESSION");
    let message = v["error"].as_str().unwrap();
    for what in ["visitorId", "--keep-unattributed true"] {
        assert!(
            message.contains(what),
            "the message names {what}: {message}"
        );
    }
    app.order_status(&order).expect(404);
    // Turned on, then off again: refused again.
    keep_unattributed(&app, "true");
    keep_unattributed(&app, "false");
    let r = app.post_conversion(&json!({"visitorId": unique("v"), "orderId": order, "value": 5}));
    expect_error(&r, 422, "NO_SESSION");
    app.order_status(&order).expect(404);
}

#[test]
fn with_the_option_an_order_with_no_session_is_kept_and_counted_as_unattributed_at_once() {
    let app = manual().start();
    keep_unattributed(&app, "true");
    let order = unique("order");
    let v = unseen_order(&app, &unique("v"), &order, 40);
    assert_eq!(v["success"], json!(true), "{v}");
    assert_eq!(v["sessionId"], Value::Null, "{v}");
    assert_eq!(v["attributed"], json!(false), "{v}");
    let event = v["eventId"].as_str().expect("an eventId").to_owned();
    // Durable with its outbox row before the answer, as any conversion.
    assert_eq!(item(&app, &event).attempts, 0);
    // A repeat is the idempotent 202 with the same ids.
    let again = unseen_order(&app, &unique("v"), &order, 40);
    assert_eq!(
        (&again["eventId"], &again["sessionId"]),
        (&json!(event), &Value::Null)
    );

    assert_eq!(drain(&app).processed, 1);
    let s = status(&app, &order);
    assert_eq!(s["status"], json!("processed"), "{s}");
    assert_eq!(s["sessionId"], Value::Null, "{s}");
    assert_eq!(s["attribution"]["source"], json!("(unattributed)"), "{s}");
    assert_eq!(s["attribution"]["sessionId"], Value::Null, "{s}");
    assert_eq!(by_source(&app), [row("(unattributed)", 1, "40.00")]);
    // An attributed order of the same site keeps its own row.
    let seen = unique("v");
    app.pageview(
        &seen,
        "https://shop.example/?utm_source=news",
        now_ms() - MINUTE,
    );
    let r = app.post_conversion(
        &json!({"visitorId": seen, "orderId": unique("o"), "value": 2, "currency": "EUR"}),
    );
    let (_, session) = r.accepted();
    assert!(!session.is_empty());
    assert!(r.json().get("attributed").is_none(), "{}", r.json());
    drain(&app);
    assert_eq!(
        by_source(&app),
        [row("(unattributed)", 1, "40.00"), row("news", 1, "2.00")]
    );
}

#[test]
fn the_pixel_batch_arriving_before_the_retry_attributes_the_order() {
    let app = manual().start();
    keep_unattributed(&app, "true");
    let (visitor, order) = (unique("v"), unique("order"));
    let received = now_ms();
    let event = unseen_order(&app, &visitor, &order, 25)["eventId"]
        .as_str()
        .unwrap()
        .to_owned();
    drain_at(&app, received + 1_000);
    assert_eq!(by_source(&app), [row("(unattributed)", 1, "25.00")]);
    // The visit that led to the order, in a batch that arrives after it.
    let session = app.pageview(
        &visitor,
        "https://shop.example/?utm_source=newsletter&utm_medium=email",
        received - 5 * MINUTE,
    );
    // Not yet due: the order waits for its retry.
    assert_eq!(drain_at(&app, received + RETRY / 2).processed, 0);
    assert_eq!(status(&app, &order)["sessionId"], Value::Null);
    assert_eq!(drain_at(&app, received + RETRY + 1_000).processed, 1);
    let s = status(&app, &order);
    assert_eq!(s["sessionId"], json!(session), "{s}");
    assert_eq!(touch(&s).0, "newsletter");
    assert_eq!(touch(&s).3.as_deref(), Some(session.as_str()));
    assert_eq!(by_source(&app), [row("newsletter", 1, "25.00")]);
    // Done: nothing waits any more.
    assert!(convapi::store::pipeline::item_state(&app.store(), &event)
        .unwrap()
        .is_none());
    // A repeat now answers the session it got.
    let again = unseen_order(&app, &visitor, &order, 25);
    assert_eq!(again["sessionId"], json!(session), "{again}");
}

#[test]
fn an_order_whose_pixel_batch_never_comes_stays_unattributed_and_counted() {
    let app = manual().start();
    keep_unattributed(&app, "true");
    let (visitor, order) = (unique("v"), unique("order"));
    let received = now_ms();
    let event = unseen_order(&app, &visitor, &order, 9)["eventId"]
        .as_str()
        .unwrap()
        .to_owned();
    // Counted in the revenue at once, finished once: the metric of finished conversions counts
    // it when its retry ends it, not at both passes.
    let metrics = Metrics::default();
    let finished = |m: &Metrics| metric_in(&m.render(0, 0), "convapi_pipeline_processed_total");
    assert_eq!(drain_with(&app, received + 1_000, &metrics).processed, 1);
    assert_eq!(finished(&metrics), 0.0);
    assert_eq!(
        drain_with(&app, received + RETRY + 1_000, &metrics).processed,
        1
    );
    assert_eq!(finished(&metrics), 1.0);
    assert!(convapi::store::pipeline::item_state(&app.store(), &event)
        .unwrap()
        .is_none());
    // A visit reported later than the retry changes nothing: it had one try.
    app.pageview(
        &visitor,
        "https://shop.example/?utm_source=late",
        received - MINUTE,
    );
    assert_eq!(drain_at(&app, received + 10 * RETRY).processed, 0);
    let s = status(&app, &order);
    assert_eq!(s["sessionId"], Value::Null, "{s}");
    assert_eq!(touch(&s).0, "(unattributed)");
    assert_eq!(by_source(&app), [row("(unattributed)", 1, "9.00")]);
}

#[test]
fn batch_items_with_no_session_are_kept_each_as_alone() {
    let app = manual().start();
    let seen = unique("v");
    app.pageview(&seen, "https://shop.example/", now_ms() - MINUTE);
    let items = json!({"conversions": [
        {"visitorId": seen, "orderId": unique("o"), "value": 1},
        {"visitorId": unique("v"), "orderId": unique("o"), "value": 2},
    ]});
    let post = |app: &TestApp| {
        app.send(
            "POST",
            &format!("/api/sites/{}/conversions/batch", app.site.id),
            &[
                ("Authorization", &format!("Bearer {}", app.key.key)),
                ("Content-Type", "application/json"),
            ],
            Some(&serde_json::to_vec(&items).unwrap()),
        )
        .expect(200)
    };
    let v = post(&app);
    assert_eq!(v["results"][1]["code"], json!("NO_SESSION"), "{v}");
    keep_unattributed(&app, "true");
    let v = post(&app);
    assert_eq!(
        (v["accepted"].as_i64(), v["rejected"].as_i64()),
        (Some(2), Some(0)),
        "{v}"
    );
    assert!(v["results"][0]["sessionId"].is_string(), "{v}");
    assert!(v["results"][0].get("attributed").is_none(), "{v}");
    assert_eq!(v["results"][1]["status"], json!(202), "{v}");
    assert_eq!(v["results"][1]["sessionId"], Value::Null, "{v}");
    assert_eq!(v["results"][1]["attributed"], json!(false), "{v}");
}

/// The server's own pipeline with a short retry (`serve --unattributed-retry`): a Stripe order
/// whose visitor the pixel has not reported is answered, counted as unattributed, and attributed
/// once the pixel's batch arrives before the retry.
#[test]
fn a_webhook_order_with_no_session_is_counted_then_attributed_when_its_pixel_batch_arrives() {
    let app = TestApp::builder()
        .serve_args(&["--unattributed-retry", "4"])
        .start();
    let source = app.add_stripe_source(&app.site.id, "https://stats.shop.example")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (visitor, order) = (unique("v"), unique("order"));
    let created = now_ms() / 1000 - 60;
    let event = json!({
        "id": unique("evt"), "object": "event", "type": "checkout.session.completed",
        "created": created,
        "data": {"object": {
            "id": unique("cs_test"), "object": "checkout.session", "amount_total": 4990,
            "currency": "eur", "client_reference_id": null, "payment_status": "paid",
            "metadata": {"order_id": order, "svc_vid": visitor},
            "payment_intent": unique("pi"), "status": "complete",
        }},
    });
    let v = app.post_stripe_event(&source, &event).expect(200);
    assert_eq!(v["outcome"], json!("unattributed"), "{v}");
    let s = await_status(&app, &order, "processed");
    assert_eq!(touch(&s).0, "(unattributed)");
    assert_eq!(by_source(&app), [row("(unattributed)", 1, "49.90")]);
    // The visitor's batch, sent from the page before it went to Stripe, arrives now.
    let session = app.pageview(
        &visitor,
        "https://shop.example/?utm_source=newsletter",
        created * 1000 - 2 * MINUTE,
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let s = loop {
        let s = status(&app, &order);
        if s["sessionId"] == json!(session) && s["status"] == "processed" {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never attributed: {s}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(touch(&s).0, "newsletter");
    assert_eq!(by_source(&app), [row("newsletter", 1, "49.90")]);
}

#[test]
fn a_webhook_order_whose_pixel_never_comes_is_kept_unattributed_without_the_site_option() {
    let app = manual().start();
    let source = app.add_stripe_source(&app.site.id, "https://stats.shop.example")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let order = unique("order");
    let event = json!({
        "id": unique("evt"), "object": "event", "type": "checkout.session.completed",
        "created": now_ms() / 1000 - 60,
        "data": {"object": {
            "id": unique("cs_test"), "object": "checkout.session", "amount_total": 1000,
            "currency": "eur", "client_reference_id": unique("nobody"), "payment_status": "paid",
            "metadata": {"order_id": order}, "payment_intent": unique("pi"), "status": "complete",
        }},
    });
    let received = now_ms();
    assert_eq!(
        app.post_stripe_event(&source, &event).expect(200)["outcome"],
        json!("unattributed")
    );
    // Delivered again by Stripe: nothing changes.
    assert_eq!(
        app.post_stripe_event(&source, &event).expect(200)["outcome"],
        json!("duplicate")
    );
    drain_at(&app, received + 1_000);
    drain_at(&app, received + RETRY + 1_000);
    let s = status(&app, &order);
    assert_eq!(s["sessionId"], Value::Null, "{s}");
    assert_eq!(touch(&s).0, "(unattributed)");
    assert_eq!(by_source(&app), [row("(unattributed)", 1, "10.00")]);
}

/// The visitorId an order was kept with names a visitor the pixel may never have seen: forgetting
/// that visitor still reaches the order, and its retry then finds nobody.
#[test]
fn forgetting_the_visitor_an_unattributed_order_named_reaches_it() {
    let app = manual().start();
    keep_unattributed(&app, "true");
    let (visitor, order) = (unique("v"), unique("order"));
    let event = unseen_order(&app, &visitor, &order, 3)["eventId"]
        .as_str()
        .unwrap()
        .to_owned();
    let named = |app: &TestApp| {
        app.query_i64(
            "SELECT COUNT(*) FROM conversions WHERE visitor_id = ?1",
            &[&visitor],
        )
    };
    assert_eq!(named(&app), 1);
    let run = app.cli(&[
        "forget",
        "--site",
        &app.site.id,
        "--visitor-id",
        &visitor,
        "--json",
    ]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(named(&app), 0);
    app.pageview(
        &visitor,
        "https://shop.example/?utm_source=late",
        now_ms() - MINUTE,
    );
    drain_at(&app, now_ms() + RETRY + 1_000);
    assert!(convapi::store::pipeline::item_state(&app.store(), &event)
        .unwrap()
        .is_none());
    assert_eq!(touch(&status(&app, &order)).0, "(unattributed)");
}

/// A destination of `kind` on the default site, its endpoint a fake that must never be called.
fn destination(app: &TestApp, kind: &str, fake: &FakePlatform) {
    let (settings, secrets, event, consent) = match kind {
        "google_ads" => (
            json!({"customer_id": "123-456-7890", "conversion_action": "987654321",
                   "client_id": "cid.apps.googleusercontent.com"}),
            json!({"developer_token": "dev-token-0000", "client_secret": "secret-0000",
                   "refresh_token": "refresh-0000"}),
            "purchase",
            "ads",
        ),
        "ga4" => (
            json!({"measurement_id": "G-TEST123"}),
            json!({"api_secret": "ga4-secret-0000000"}),
            "purchase",
            "analytics",
        ),
        other => panic!("no fixture for {other}"),
    };
    let obj = |v: Value| v.as_object().unwrap().clone();
    let now = now_ms();
    let d = Destination {
        id: unique("dest"),
        site_id: app.site.id.clone(),
        kind: kind.into(),
        name: kind.into(),
        settings: obj(settings),
        secrets: obj(secrets),
        endpoint: Some(fake.url()),
        api_version: None,
        events: BTreeMap::from([("purchase".to_string(), event.to_string())]),
        consent: consent.into(),
        enabled: true,
        created_at: now,
        updated_at: now,
        health: Health::default(),
    };
    destinations::insert(&app.store(), &d).unwrap();
}

/// An order kept with no session and no visitorId has no click for Google Ads and no client id
/// for GA4: each delivery is skipped, saying why, and nothing is sent. Its deliveries are written
/// once the retry is over, not while its session may still come.
#[test]
fn an_unattributed_order_is_not_sent_where_a_click_or_a_client_id_is_needed() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off", "--forward-threads", "0"])
        .start();
    keep_unattributed(&app, "true");
    let fake = FakePlatform::start(|_| Reply::status(500, json!({})));
    destination(&app, "google_ads", &fake);
    destination(&app, "ga4", &fake);
    let order = unique("order");
    let received = now_ms();
    let v = app
        .post_conversion(&json!({
            "clientId": unique("nobody"), "orderId": order, "value": 30, "currency": "EUR",
        }))
        .expect(202);
    assert_eq!(v["attributed"], json!(false), "{v}");
    drain_at(&app, received + 1_000);
    let deliveries = |app: &TestApp| status(app, &order)["deliveries"].clone();
    assert_eq!(
        deliveries(&app),
        json!([]),
        "no delivery while the retry waits"
    );
    drain_at(&app, received + RETRY + 1_000);
    let conn = app.store();
    let http = Http::new(std::time::Duration::from_secs(5));
    with_writer(&app, |w| {
        sender::drain_once(
            &conn,
            w,
            &Metrics::default(),
            &http,
            received + RETRY + 2_000,
        )
        .expect("send")
    });
    let ds = deliveries(&app);
    let ds = ds.as_array().unwrap();
    assert_eq!(ds.len(), 2, "{ds:?}");
    for d in ds {
        assert_eq!(d["status"], json!("skipped"), "{d}");
        let why = d["lastError"].as_str().unwrap();
        assert!(why.contains("no session (unattributed)"), "{why}");
    }
    assert!(fake.requests().is_empty(), "nothing sent");
}
