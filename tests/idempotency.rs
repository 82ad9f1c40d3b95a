//! Idempotency and deduplication (docs/decisions.md §3, §4): one conversion per (site, orderId)
//! whichever source came first; a repeat answers the original `eventId` and `sessionId`; the other
//! source is recorded on the existing row; concurrent sends of one order make one row. Checked
//! three ways: the answers, the database file, and `GET .../conversions/{orderId}`'s `sources`.
//!
//! The servers here run with `--pipeline off`, so each conversion's outbox row stays put and can be
//! counted exactly.

use std::sync::{Arc, Barrier};

use crate::common::*;
use serde_json::{json, Value};

fn app() -> TestApp {
    TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .start()
}

/// `(rows, outbox rows, source_api, source_pixel)` for one order of the default site.
fn stored(app: &TestApp, order: &str) -> (i64, i64, i64, i64) {
    let row = &app.rows(
        "SELECT COUNT(*), COALESCE(SUM(source_api), 0), COALESCE(SUM(source_pixel), 0)
         FROM conversions WHERE site_id = ?1 AND order_id = ?2",
        &[&app.site.id, &order],
    )[0];
    let n = |i: usize| row[i].as_i64().unwrap_or_else(|| panic!("{row:?}"));
    let outbox = app.query_i64(
        "SELECT COUNT(*) FROM outbox o JOIN conversions c ON c.id = o.conversion_id
         WHERE c.site_id = ?1 AND c.order_id = ?2",
        &[&app.site.id, &order],
    );
    (n(0), outbox, n(1), n(2))
}

/// The order's `sources` from the status endpoint, sorted, and its `eventId`.
fn status_sources(app: &TestApp, order: &str) -> (Vec<String>, String) {
    let v = app.order_status(order).expect(200);
    let mut sources: Vec<String> = v["sources"]
        .as_array()
        .unwrap_or_else(|| panic!("sources: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect();
    sources.sort();
    (sources, v["eventId"].as_str().unwrap().to_owned())
}

fn pixel_purchase(app: &TestApp, visitor: &str, order: &str, value: f64) -> String {
    app.pixel(
        visitor,
        json!([
            {"type": "pageview", "url": "https://shop.example/checkout"},
            {"type": "purchase", "orderId": order, "value": value, "currency": "EUR"},
        ]),
    )
}

#[test]
fn a_repeated_order_answers_the_original_event_and_session() {
    let app = app();
    let t = now_ms();
    let s1 = app.pageview("v-1", "https://shop.example/", t - 2 * HOUR);
    let body = json!({"visitorId": "v-1", "orderId": "A-1", "value": 10, "currency": "EUR"});
    let (e1, first_session) = app.post_conversion(&body).accepted();
    assert_eq!(first_session, s1);

    // The visitor moves on to a new session; repeats still answer the original pair.
    let s2 = app.pageview(
        "v-1",
        "https://shop.example/?utm_source=news",
        t - 10 * MINUTE,
    );
    assert_ne!(s2, s1);
    assert_eq!(
        app.post_conversion(&body).accepted(),
        (e1.clone(), s1.clone())
    );
    // A repeat with other details changes nothing.
    let changed = json!({"visitorId": "v-1", "orderId": "A-1", "value": 99, "currency": "USD", "type": "purchase"});
    assert_eq!(
        app.post_conversion(&changed).accepted(),
        (e1.clone(), s1.clone())
    );
    // Even when its identifiers resolve to no session at all, a known order is answered.
    let lost = json!({"clientId": "never-identified", "orderId": "A-1"});
    assert_eq!(
        app.post_conversion(&lost).accepted(),
        (e1.clone(), s1.clone())
    );

    assert_eq!(stored(&app, "A-1"), (1, 1, 1, 0));
    assert_eq!(
        app.query_str(
            "SELECT value || ' ' || currency FROM conversions WHERE id = ?1",
            &[&e1]
        ),
        Some("10 EUR".into())
    );
    assert_eq!(status_sources(&app, "A-1"), (vec!["api".into()], e1));

    // Any type with an orderId is deduplicated by it...
    let lead = json!({"visitorId": "v-1", "orderId": "L-1", "type": "lead"});
    let first = app.post_conversion(&lead).accepted();
    assert_eq!(app.post_conversion(&lead).accepted(), first);
    // ...and conversions without an orderId never are.
    let signup = json!({"visitorId": "v-1", "type": "signup"});
    let a = app.post_conversion(&signup).accepted().0;
    let b = app.post_conversion(&signup).accepted().0;
    assert_ne!(a, b);
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM conversions WHERE type = 'signup'",
            &[]
        ),
        2
    );
    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM outbox", &[]),
        app.query_i64("SELECT COUNT(*) FROM conversions", &[]),
        "one outbox row per conversion"
    );
}

#[test]
fn order_ids_are_unique_per_site_not_globally() {
    let app = app();
    app.pageview("v-1", "https://shop.example/", now_ms() - HOUR);
    let second = app.create_site(&app.tenant.id, "Second", &[]);
    app.collect(&json!({
        "trackerId": second.tracker_id, "visitorId": "v-1",
        "events": [{"type": "pageview", "url": "https://second.example/"}],
    }))
    .expect(200);
    let body = json!({"visitorId": "v-1", "orderId": "SAME"});
    let (e1, _) = app.post_conversion(&body).accepted();
    let (e2, _) = app
        .post_conversion_as(&app.key.key, &second.id, &body)
        .accepted();
    assert_ne!(e1, e2);
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM conversions WHERE order_id = 'SAME'",
            &[]
        ),
        2
    );
}

#[test]
fn pixel_purchase_then_api_leaves_one_conversion_with_both_sources() {
    let app = app();
    let s = pixel_purchase(&app, "v-1", "P-1", 49.9);
    assert_eq!(stored(&app, "P-1"), (1, 1, 0, 1));
    let (sources, pixel_event) = status_sources(&app, "P-1");
    assert_eq!(sources, ["pixel"]);
    assert_eq!(
        app.query_str(
            "SELECT session_id FROM conversions WHERE id = ?1",
            &[&pixel_event]
        ),
        Some(s.clone())
    );

    let body = json!({"visitorId": "v-1", "orderId": "P-1", "value": 49.9, "currency": "EUR"});
    assert_eq!(
        app.post_conversion(&body).accepted(),
        (pixel_event.clone(), s.clone())
    );
    assert_eq!(stored(&app, "P-1"), (1, 1, 1, 1));
    assert_eq!(
        status_sources(&app, "P-1"),
        (vec!["api".into(), "pixel".into()], pixel_event.clone())
    );
    // More repeats from either side change nothing.
    assert_eq!(
        app.post_conversion(&body).accepted(),
        (pixel_event.clone(), s.clone())
    );
    pixel_purchase(&app, "v-1", "P-1", 49.9);
    assert_eq!(stored(&app, "P-1"), (1, 1, 1, 1));
}

#[test]
fn api_then_pixel_purchase_leaves_one_conversion_with_both_sources() {
    let app = app();
    let t = now_ms();
    let s = app.pageview("v-1", "https://shop.example/", t - 2 * HOUR);
    let (event, session) = app
        .post_conversion(
            &json!({"clientId": null, "visitorId": "v-1", "orderId": "Q-1", "value": 20}),
        )
        .accepted();
    assert_eq!(session, s);
    assert_eq!(stored(&app, "Q-1"), (1, 1, 1, 0));

    // The pixel's purchase arrives later, in a new session; the conversion keeps its own.
    let later = pixel_purchase(&app, "v-1", "Q-1", 20.0);
    assert_ne!(later, s);
    assert_eq!(stored(&app, "Q-1"), (1, 1, 1, 1));
    assert_eq!(
        status_sources(&app, "Q-1"),
        (vec!["api".into(), "pixel".into()], event.clone())
    );
    assert_eq!(
        app.order_status("Q-1").expect(200)["sessionId"],
        json!(s),
        "the original session is kept"
    );
}

#[test]
fn an_api_repeat_of_a_pixel_order_is_answered_even_without_a_resolvable_session() {
    let app = app();
    let s = pixel_purchase(&app, "v-1", "R-1", 5.0);
    let (_, event) = status_sources(&app, "R-1");
    // The backend knows the user by an id the pixel never saw.
    let r = app.post_conversion(&json!({"clientId": "crm-42", "orderId": "R-1"}));
    assert_eq!(r.accepted(), (event.clone(), s));
    assert_eq!(stored(&app, "R-1"), (1, 1, 1, 1));
    assert_eq!(
        status_sources(&app, "R-1"),
        (vec!["api".into(), "pixel".into()], event)
    );
}

/// Runs `n` closures at once (released together by a barrier) and returns their results.
fn all_at_once<T: Send + 'static>(
    n: usize,
    f: impl Fn(usize) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let barrier = Arc::new(Barrier::new(n));
    let f = Arc::new(f);
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (barrier, f) = (barrier.clone(), f.clone());
            std::thread::spawn(move || {
                barrier.wait();
                f(i)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// `POST /api/sites/{site}/conversions` of `body` with the app's key, through `agent`: a sender
/// with a client of its own has a connection of its own (the app's client is shared).
fn post_conversion_via(agent: &ureq::Agent, app: &TestApp, body: &Value) -> Resp {
    send(
        agent,
        "POST",
        &format!("{}/api/sites/{}/conversions", app.base, app.site.id),
        &[
            ("Authorization", &format!("Bearer {}", app.key.key)),
            ("Content-Type", "application/json"),
        ],
        Some(&serde_json::to_vec(body).unwrap()),
    )
}

#[test]
fn thirty_two_concurrent_sends_of_one_new_order_make_one_conversion() {
    let app = Arc::new(app());
    app.pageview("v-1", "https://shop.example/", now_ms() - HOUR);
    // A few rounds, each a new order, to give a race more than one chance to show.
    for round in 0..3 {
        let order = format!("C-{round}");
        let (a, o) = (app.clone(), order.clone());
        let answers = all_at_once(32, move |_| {
            // Each sender has its own client, so each has its own connection.
            let body = json!({"visitorId": "v-1", "orderId": o, "value": 1});
            post_conversion_via(&agent(), &a, &body)
        });
        let pairs: Vec<(String, String)> = answers.iter().map(Resp::accepted).collect();
        assert_eq!(pairs.len(), 32);
        assert!(
            pairs.iter().all(|p| *p == pairs[0]),
            "round {round}: all answers name one event: {pairs:?}"
        );
        assert_eq!(stored(&app, &order), (1, 1, 1, 0), "round {round}");
        assert_eq!(
            app.query_str(
                "SELECT id FROM conversions WHERE site_id = ?1 AND order_id = ?2",
                &[&app.site.id, &order]
            ),
            Some(pairs[0].0.clone())
        );
    }
}

#[test]
fn concurrent_pixel_and_api_sends_of_one_order_make_one_conversion_with_both_sources() {
    let app = Arc::new(app());
    app.pageview("v-1", "https://shop.example/", now_ms() - HOUR);
    let a = app.clone();
    let answers = all_at_once(32, move |i| {
        let agent = agent();
        if i % 2 == 0 {
            let body = json!({"visitorId": "v-1", "orderId": "M-1", "value": 3});
            post_conversion_via(&agent, &a, &body)
        } else {
            let body = json!({
                "trackerId": a.site.tracker_id, "visitorId": "v-1",
                "events": [{"type": "purchase", "orderId": "M-1", "value": 3}],
            });
            send(
                &agent,
                "POST",
                &format!("{}/api/collect", a.base),
                &[("Content-Type", "text/plain")],
                Some(&serde_json::to_vec(&body).unwrap()),
            )
        }
    });
    let mut events: Vec<String> = Vec::new();
    for (i, r) in answers.iter().enumerate() {
        if i % 2 == 0 {
            events.push(r.accepted().0);
        } else {
            assert_eq!(r.status, 200, "pixel send {i}: {}", r.text());
        }
    }
    events.dedup();
    assert_eq!(events.len(), 1, "API answers name one event: {events:?}");
    assert_eq!(stored(&app, "M-1"), (1, 1, 1, 1));
    assert_eq!(
        status_sources(&app, "M-1"),
        (vec!["api".into(), "pixel".into()], events[0].clone())
    );
}

#[test]
fn a_pixel_batch_with_the_same_order_twice_records_it_once() {
    let app = app();
    let r = app.collect(&json!({
        "trackerId": app.site.tracker_id, "visitorId": "v-1",
        "events": [
            {"type": "purchase", "orderId": "B-1", "value": 1},
            {"type": "purchase", "orderId": "B-1", "value": 1},
        ],
    }));
    assert_eq!(r.expect(200)["accepted"], json!(2));
    assert_eq!(stored(&app, "B-1"), (1, 1, 0, 1));
    let _: Value = app.order_status("B-1").expect(200);
}
