//! The sender of deliveries to ad platforms (docs/decisions.md §13), whatever the platform: each
//! processed conversion delivered once, consent gating, the one bad event of a batch, a platform
//! down or throttling (backoff, circuit, nothing lost), another destination unaffected, `kill -9`
//! during delivery, the order status and `/metrics`. A platform's own mapping and error codes are
//! tested in its file (`forward_meta.rs`, `forward_ga4.rs`, `forward_ads.rs`).
//!
//! The destination here is Meta's (the simplest answer: `{"events_received": n}`) on a
//! [`FakePlatform`]. Deterministic tests run the server with `--pipeline off --forward-threads 0`
//! and drive both in this process with a clock of their own; the others watch a running server.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use convapi::forward::platform::Http;
use convapi::forward::sender::{self, SendStats};
use convapi::metrics::Metrics;
use convapi::store::destinations::{self, Destination, Health};
use serde_json::{json, Map, Value};

use crate::common::fake::{FakePlatform, Recorded, Reply};
use crate::common::pipeline_support::*;
use crate::common::*;

/// Plants a destination of `kind` sending `purchase` to `endpoint`; returns its id.
fn add_destination(app: &TestApp, kind: &str, name: &str, endpoint: &str) -> String {
    add_destination_to(app, &app.site.id, kind, name, endpoint)
}

/// [`add_destination`] on the site `site`.
fn add_destination_to(app: &TestApp, site: &str, kind: &str, name: &str, endpoint: &str) -> String {
    let (settings, secrets, event) = match kind {
        "meta" => (
            json!({"pixel_id": "1234567890"}),
            json!({"access_token": "EAAB-secret-token-0000"}),
            "Purchase",
        ),
        "ga4" => (
            json!({"measurement_id": "G-TEST123"}),
            json!({"api_secret": "ga4-secret-0000000"}),
            "purchase",
        ),
        other => panic!("no fixture for {other}"),
    };
    let obj = |v: Value| -> Map<String, Value> { v.as_object().unwrap().clone() };
    let now = now_ms();
    let d = Destination {
        id: uuid(),
        site_id: site.to_owned(),
        kind: kind.into(),
        name: name.into(),
        settings: obj(settings),
        secrets: obj(secrets),
        endpoint: Some(endpoint.into()),
        api_version: None,
        events: BTreeMap::from([("purchase".to_string(), event.to_string())]),
        consent: if kind == "ga4" { "analytics" } else { "ads" }.into(),
        enabled: true,
        created_at: now,
        updated_at: now,
        health: Health::default(),
    };
    destinations::insert(&app.store(), &d).unwrap();
    d.id
}

fn uuid() -> String {
    unique("dest")
}

/// The Meta answer to a batch: every event received.
fn meta_ok(r: &Recorded) -> Reply {
    let n = r.json()["data"].as_array().map_or(0, Vec::len);
    Reply::ok(json!({"events_received": n, "messages": [], "fbtrace_id": "AbC"}))
}

/// The `event_id`s of every event the fake got, in order.
fn event_ids(reqs: &[Recorded]) -> Vec<String> {
    reqs.iter()
        .flat_map(|r| {
            r.json()["data"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|e| e["event_id"].as_str().unwrap_or_default().to_string())
        })
        .collect()
}

/// One sender pass in this process at `now`, on the app's database.
fn send_at(app: &TestApp, now: i64) -> SendStats {
    let conn = app.store();
    let http = Http::new(Duration::from_secs(5));
    with_writer(app, |w| {
        sender::drain_once(&conn, w, &Metrics::default(), &http, now).expect("send")
    })
}

fn order(app: &TestApp, visitor: &str) -> String {
    let id = unique("order");
    app.post_conversion(
        &json!({"visitorId": visitor, "orderId": id, "value": 19.99, "currency": "EUR"}),
    )
    .accepted();
    id
}

/// A server driven by hand: pipeline and sender off.
fn by_hand() -> TestApp {
    TestApp::builder()
        .serve_args(&["--pipeline", "off", "--forward-threads", "0"])
        .start()
}

fn delivery(app: &TestApp, order: &str) -> Value {
    let v = status(app, order);
    assert_eq!(v["deliveries"].as_array().map(Vec::len), Some(1), "{v}");
    v["deliveries"][0].clone()
}

#[test]
fn a_processed_conversion_is_delivered_once_and_the_status_and_metrics_say_so() {
    let fake = FakePlatform::start(meta_ok);
    let app = TestApp::start();
    let dest = add_destination(&app, "meta", "Meta", &fake.url());
    app.identify("v1", "client-1", now_ms() - 60_000);
    app.pageview("v1", "https://shop.example/?fbclid=abc", now_ms() - 50_000);
    let orders: Vec<String> = (0..3).map(|_| order(&app, "v1")).collect();
    let reqs = fake.wait_for(Duration::from_secs(30), |r| event_ids(r).len() >= 3);
    let got: BTreeSet<String> = event_ids(&reqs).into_iter().collect();
    assert_eq!(
        got,
        orders.iter().cloned().collect(),
        "each order once, by its id"
    );
    for o in &orders {
        let deadline = Instant::now() + Duration::from_secs(10);
        let d = loop {
            let d = delivery(&app, o);
            if d["status"] == "delivered" || Instant::now() > deadline {
                break d;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(d["status"], "delivered", "{d}");
        assert_eq!(d["destinationId"], dest.as_str());
        assert_eq!(d["kind"], "meta");
        assert_eq!(d["attempts"], 1);
        assert!(d["deliveredAt"].is_string(), "{d}");
    }
    let metrics = app.get("/metrics").text();
    let line = format!(
        "convapi_deliveries_total{{destination=\"{dest}\",kind=\"meta\",outcome=\"delivered\"}} 3"
    );
    assert!(metrics.contains(&line), "{line} in:\n{metrics}");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(event_ids(&fake.requests()).len(), 3, "nothing sent twice");
    assert!(
        !app.log().contains("EAAB-secret-token-0000"),
        "the access token is never logged"
    );
}

#[test]
fn a_conversion_without_ads_consent_reaches_no_destination_that_needs_it() {
    let fake = FakePlatform::start(meta_ok);
    let app = by_hand();
    add_destination(&app, "meta", "Meta", &fake.url());
    app.identify("v1", "client-1", now_ms() - 60_000);
    let denied = order(&app, "v1");
    let given = order(&app, "v1");
    app.execute(
        "UPDATE conversions SET consent_ad_user_data = 0 WHERE order_id = ?1",
        &[&denied],
    );
    drain(&app);
    let stats = send_at(&app, now_ms());
    assert_eq!((stats.delivered, stats.skipped), (1, 1), "{stats:?}");
    assert_eq!(event_ids(&fake.requests()), vec![given]);
    let d = delivery(&app, &denied);
    assert_eq!(d["status"], "skipped", "{d}");
    assert!(d["lastError"].as_str().unwrap().contains("consent"), "{d}");
}

#[test]
fn one_invalid_event_fails_alone_and_the_rest_of_its_batch_is_delivered() {
    // Meta refuses a whole batch for one bad event (code 100); alone, the others go through.
    let fake = FakePlatform::start(|r| {
        let data = r.json()["data"].as_array().cloned().unwrap_or_default();
        if data
            .iter()
            .any(|e| e["event_id"].as_str().unwrap().contains("bad"))
        {
            Reply::status(
                400,
                json!({"error": {"message": "Invalid parameter", "type": "OAuthException",
                       "code": 100, "error_subcode": 2804003, "is_transient": false,
                       "fbtrace_id": "X"}}),
            )
        } else {
            meta_ok(r)
        }
    });
    let app = by_hand();
    add_destination(&app, "meta", "Meta", &fake.url());
    app.identify("v1", "client-1", now_ms() - 60_000);
    let mut good: Vec<String> = (0..4).map(|_| order(&app, "v1")).collect();
    let bad = unique("bad-order");
    app.post_conversion(&json!({"visitorId": "v1", "orderId": bad, "value": 1, "currency": "EUR"}))
        .accepted();
    good.push(order(&app, "v1"));
    drain(&app);
    let stats = send_at(&app, now_ms());
    assert_eq!((stats.delivered, stats.failed), (5, 1), "{stats:?}");
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 7, "one batch of six, then each alone");
    assert_eq!(reqs[0].json()["data"].as_array().unwrap().len(), 6);
    assert_eq!(delivery(&app, &bad)["status"], "failed");
    assert!(delivery(&app, &bad)["lastError"]
        .as_str()
        .unwrap()
        .contains("Invalid parameter"));
    for o in &good {
        assert_eq!(delivery(&app, o)["status"], "delivered");
    }
}

#[test]
fn a_platform_down_for_a_minute_opens_its_circuit_and_loses_nothing() {
    let fake = FakePlatform::start(|_| Reply::status(503, json!({"error": "unavailable"})));
    let app = by_hand();
    let dest = add_destination(&app, "meta", "Meta", &fake.url());
    app.identify("v1", "client-1", now_ms() - 60_000);
    let orders: Vec<String> = (0..3).map(|_| order(&app, "v1")).collect();
    drain(&app);
    let t0 = now_ms();
    // A minute of outage, the sender looking every second of it.
    let mut tries_at = Vec::new();
    for s in 0..60 {
        let before = fake.requests().len();
        send_at(&app, t0 + s * 1000);
        if fake.requests().len() > before {
            tries_at.push(s);
        }
    }
    let h = destinations::by_id(&app.store(), &dest)
        .unwrap()
        .unwrap()
        .health;
    assert!(h.failures >= sender::CIRCUIT_AFTER, "{h:?}");
    assert!(h.last_error.as_deref().unwrap().contains("503"), "{h:?}");
    // Backoff, then the open circuit: a handful of tries, not sixty.
    assert!(
        (3..=6).contains(&tries_at.len()),
        "tries at seconds {tries_at:?}"
    );
    for o in &orders {
        let d = delivery(&app, o);
        assert_eq!(d["status"], "pending", "{d}");
        assert!(d["lastError"].as_str().unwrap().contains("503"), "{d}");
    }
    // The platform is back: within the circuit's and the backoff's longest wait, all delivered.
    fake.set(meta_ok);
    let mut t = t0 + 60_000;
    while t < t0 + 60_000 + sender::CIRCUIT_CAP_MS + sender::BACKOFF_CAP_MS {
        send_at(&app, t);
        if orders
            .iter()
            .all(|o| delivery(&app, o)["status"] == "delivered")
        {
            break;
        }
        t += 5_000;
    }
    for o in &orders {
        assert_eq!(
            delivery(&app, o)["status"],
            "delivered",
            "after {} s",
            (t - t0) / 1000
        );
    }
    let ids = event_ids(&fake.requests());
    let distinct: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(
        distinct.len(),
        3,
        "every repeat carries the same event_id: {ids:?}"
    );
    let h = destinations::by_id(&app.store(), &dest)
        .unwrap()
        .unwrap()
        .health;
    assert_eq!(
        (h.failures, h.paused_until),
        (0, None),
        "the circuit closed: {h:?}"
    );
}

#[test]
fn throttling_waits_what_the_platform_asks() {
    let fake = FakePlatform::start(|_| {
        Reply::Json(
            429,
            json!({"error": {"message": "User request limit reached", "code": 17, "is_transient": true}}),
            vec![("Retry-After".into(), "120".into())],
        )
    });
    let app = by_hand();
    let dest = add_destination(&app, "meta", "Meta", &fake.url());
    app.identify("v1", "client-1", now_ms() - 60_000);
    let o = order(&app, "v1");
    drain(&app);
    let t0 = now_ms();
    send_at(&app, t0);
    assert_eq!(fake.requests().len(), 1);
    for s in [10, 60, 119] {
        send_at(&app, t0 + s * 1000);
    }
    assert_eq!(
        fake.requests().len(),
        1,
        "nothing before the two minutes asked"
    );
    let d = delivery(&app, &o);
    assert_eq!(
        (d["status"].as_str(), d["attempts"].as_i64()),
        (Some("pending"), Some(0)),
        "{d}"
    );
    fake.set(meta_ok);
    send_at(&app, t0 + 121_000);
    assert_eq!(delivery(&app, &o)["status"], "delivered");
    let h = destinations::by_id(&app.store(), &dest)
        .unwrap()
        .unwrap()
        .health;
    assert!(h.last_ok_at.is_some(), "{h:?}");
}

#[test]
fn a_destination_that_is_down_delays_neither_conversions_nor_another_destination() {
    // A hangs past the sender's time limit; B answers. Both see every order; B gets them all
    // while A is still down, and the API's answers do not wait for either.
    let down = FakePlatform::start(|_| Reply::Hang(Duration::from_secs(30)));
    let up = FakePlatform::start(meta_ok);
    let app = TestApp::builder()
        .serve_args(&["--forward-timeout", "1"])
        .start();
    add_destination(&app, "meta", "A (down)", &down.url());
    add_destination(&app, "meta", "B", &up.url());
    app.identify("v1", "client-1", now_ms() - 60_000);
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut orders = Vec::new();
    for _ in 0..100 {
        let t = Instant::now();
        orders.push(order(&app, "v1"));
        slowest = slowest.max(t.elapsed());
    }
    let sent = started.elapsed();
    let reqs = up.wait_for(Duration::from_secs(30), |r| event_ids(r).len() >= 100);
    let b_done = started.elapsed();
    let got: BTreeSet<String> = event_ids(&reqs).into_iter().collect();
    assert_eq!(got.len(), 100);
    eprintln!(
        "100 orders sent in {sent:?} (slowest 202: {slowest:?}); B had all of them after {b_done:?}; A got {} requests",
        down.requests().len()
    );
    for o in orders.iter().take(5) {
        let v = status(&app, o);
        let a = v["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["destination"] == "A (down)")
            .cloned()
            .unwrap();
        assert_eq!(a["status"], "pending", "{a}");
    }
}

#[test]
fn kill_9_during_delivery_under_load_loses_no_delivery_and_repeats_only_with_the_same_id() {
    let fake = FakePlatform::start(|r| {
        // Slow enough that kills land between a send and its commit.
        std::thread::sleep(Duration::from_millis(20));
        meta_ok(r)
    });
    let mut app = TestApp::start();
    add_destination(&app, "meta", "Meta", &fake.url());
    app.identify("v1", "client-1", now_ms() - 60_000);
    let mut acked: Vec<String> = Vec::new();
    for cycle in 0..5 {
        let load = crash::Load {
            what: format!("cycle {cycle}"),
            senders: 4,
            max_per_sender: 10_000,
            acks_before_kill: 150,
            deadline: Duration::from_secs(30),
            visitor: "v1",
        };
        let killed =
            crash::kill_9_under_load(&mut app, &load, |s, i| (format!("c{cycle}-s{s}-{i}"), None));
        acked.extend(killed.acked.into_iter().map(|(o, _)| o));
        app.restart();
    }
    // Everything processed is delivered, each order at least once and only under its own id.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let pending = app.query_i64(
            "SELECT COUNT(*) FROM deliveries WHERE status <> 'delivered'",
            &[],
        );
        let processed = app.query_i64(
            "SELECT COUNT(*) FROM conversions WHERE status <> 'processed'",
            &[],
        );
        if pending == 0 && processed == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{pending} deliveries and {processed} conversions left"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let stored: BTreeSet<String> = app
        .rows("SELECT order_id FROM conversions", &[])
        .into_iter()
        .map(|r| r[0].as_str().unwrap().to_string())
        .collect();
    let delivered = app.query_i64("SELECT COUNT(*) FROM deliveries", &[]);
    assert_eq!(
        delivered as usize,
        stored.len(),
        "one delivery per processed conversion"
    );
    for o in &acked {
        assert!(stored.contains(o), "acknowledged {o} is stored");
    }
    let ids = event_ids(&fake.requests());
    let sent: BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(
        sent, stored,
        "every conversion reached the platform, under its order id"
    );
    eprintln!(
        "{} conversions over 5 kills: {} events sent, {} of them repeats",
        stored.len(),
        ids.len(),
        ids.len() - sent.len()
    );
}

#[test]
fn a_disabled_destination_sends_nothing_and_its_pending_deliveries_wait_for_it() {
    let fake = FakePlatform::start(meta_ok);
    let app = by_hand();
    let dest = add_destination(&app, "meta", "Meta", &fake.url());
    app.identify("v1", "client-1", now_ms() - 60_000);
    let queued = order(&app, "v1");
    drain(&app);
    app.cli_json(&["destination", "update", &dest, "--disabled", "--json"]);
    let later = order(&app, "v1");
    drain(&app);
    let stats = send_at(&app, now_ms());
    assert_eq!(
        stats,
        SendStats::default(),
        "nothing is sent while it is off"
    );
    assert!(fake.requests().is_empty());
    assert_eq!(delivery(&app, &queued)["status"], "pending");
    assert_eq!(
        status(&app, &later)["deliveries"],
        json!([]),
        "a conversion processed while it is off is not queued for it"
    );
    app.cli_json(&["destination", "update", &dest, "--enabled", "--json"]);
    send_at(&app, now_ms());
    assert_eq!(event_ids(&fake.requests()), vec![queued.clone()]);
    assert_eq!(delivery(&app, &queued)["status"], "delivered");
}

/// Ten destinations of another tenant on an endpoint that takes the connection and never answers
/// hold at most that tenant's share of the sender's threads (one of two): this tenant's healthy
/// destination gets its next order within a second or so, not after the other's time limits.
#[test]
fn one_tenants_dead_endpoints_do_not_hold_up_another_tenants_deliveries() {
    let silent = FakePlatform::start(|_| Reply::Hang(Duration::from_secs(120)));
    let up = FakePlatform::start(meta_ok);
    let app = TestApp::builder()
        .serve_args(&["--forward-timeout", "5"])
        .start();
    // This tenant's destination, healthy: its first order delivered.
    add_destination(&app, "meta", "A", &up.url());
    app.identify("v1", "client-1", now_ms() - 60_000);
    order(&app, "v1");
    up.wait_for(Duration::from_secs(30), |r| !event_ids(r).is_empty());
    // Another tenant: a site with ten destinations on the silent endpoint, and an order.
    let b = app.create_tenant("B");
    let b_site = app.create_site(&b.id, "B shop", &[]);
    let b_key = app.create_key(&b.id);
    for i in 0..10 {
        add_destination_to(&app, &b_site.id, "meta", &format!("B{i}"), &silent.url());
    }
    app.collect(&json!({
        "trackerId": b_site.tracker_id,
        "visitorId": "vb",
        "events": [{"type": "pageview", "url": "https://b.example/", "ts": now_ms() - 60_000}],
    }))
    .expect(200);
    app.post_conversion_as(
        &b_key.key,
        &b_site.id,
        &json!({"visitorId": "vb", "orderId": unique("b"), "value": 1, "currency": "EUR"}),
    )
    .accepted();
    silent.wait_for(Duration::from_secs(30), |r| !r.is_empty());
    let t = Instant::now();
    order(&app, "v1");
    up.wait_for(Duration::from_secs(60), |r| event_ids(r).len() >= 2);
    let took = t.elapsed();
    eprintln!(
        "A's order delivered after {took:?}; B's endpoint got {} requests",
        silent.requests().len()
    );
    assert!(
        took < Duration::from_secs(4),
        "A's delivery waited {took:?} behind B's dead endpoints"
    );
}

/// The order destinations are served in: the healthy ones first, then the new ones (nothing sent
/// yet), then those whose last request failed (a platform that timed out waits its turn behind
/// the platforms that answer).
#[test]
fn healthy_destinations_go_before_new_ones_and_failing_ones_last() {
    let app = by_hand();
    let failing = add_destination(&app, "meta", "failing", "http://127.0.0.1:9");
    let new = add_destination(&app, "meta", "new", "http://127.0.0.1:9");
    let healthy = add_destination(&app, "meta", "healthy", "http://127.0.0.1:9");
    app.identify("v1", "client-1", now_ms() - 60_000);
    order(&app, "v1");
    drain(&app);
    let store = app.store();
    let now = now_ms();
    // The failing one succeeded an hour ago, then timed out once; the healthy one a minute ago.
    destinations::record_ok(&store, &failing, now - 3_600_000).unwrap();
    destinations::record_failure(&store, &failing, "timed out", None, now - 1_000).unwrap();
    destinations::record_ok(&store, &healthy, now - 60_000).unwrap();
    let order: Vec<String> = convapi::store::deliveries::due_destinations(&store, now)
        .unwrap()
        .into_iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(order, vec![healthy, new, failing]);
}

/// What the sender stores of an answer (the destination's last error, a delivery's) is what a
/// tenant may read: the platform's parsed error, bounded, never the body of an answer that is
/// not a platform's.
#[test]
fn the_sender_stores_the_platforms_parsed_error_never_a_raw_body() {
    let fake = FakePlatform::start(|_| {
        Reply::status(
            502,
            json!({"debug": "INTERNAL-STACK-TRACE of the endpoint"}),
        )
    });
    let app = by_hand();
    let dest = add_destination(&app, "meta", "Meta", &fake.url());
    app.identify("v1", "client-1", now_ms() - 60_000);
    let o = order(&app, "v1");
    drain(&app);
    let stats = send_at(&app, now_ms());
    assert_eq!(stats.outages, 1, "{stats:?}");
    let h = destinations::by_id(&app.store(), &dest)
        .unwrap()
        .unwrap()
        .health;
    let e = h.last_error.unwrap();
    assert!(
        e.contains("HTTP 502") && e.contains("not a platform answer"),
        "{e}"
    );
    assert!(!e.contains("INTERNAL-STACK-TRACE"), "{e}");
    let d = delivery(&app, &o);
    let e = d["lastError"].as_str().unwrap();
    assert!(
        !e.contains("INTERNAL-STACK-TRACE") && e.contains("HTTP 502"),
        "{d}"
    );
    // A platform's own error, however long, is stored bounded.
    fake.set(|_| {
        Reply::status(
            500,
            json!({"error": {"message": "z".repeat(5_000), "code": 2, "is_transient": true}}),
        )
    });
    send_at(&app, now_ms() + 3_600_000);
    let e = destinations::by_id(&app.store(), &dest)
        .unwrap()
        .unwrap()
        .health
        .last_error
        .unwrap();
    assert!(e.contains("zzzz"), "{e}");
    assert!(e.chars().count() <= 300, "{} chars", e.chars().count());
}
