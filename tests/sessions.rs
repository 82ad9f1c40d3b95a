//! Sessions through the front door: how a conversion finds its session (by `clientId` across
//! devices, `visitorId`, `sessionId`, in that order; the latest session; the attribution window's
//! edges; `occurredAt` in the past), how pixel batches sessionise (30 idle minutes, new campaigns,
//! `ts` clamped to receive time), and `POST /api/collect`'s surface (CORS, preflight, unknown
//! tracker, malformed batches naming the event index, `text/plain`).
//!
//! Time is simulated with pixel `ts` values in the past (the server clamps `ts` to its receive time,
//! never the other way) and explicit `occurredAt` values, so no test waits for a clock.

use crate::common::*;
use serde_json::{json, Value};

/// Reports a conversion and returns the session it was attached to (asserting 202).
#[track_caller]
fn session_of(app: &TestApp, ids: Value) -> String {
    let mut body = ids;
    body["orderId"] = json!(unique("order"));
    app.post_conversion(&body).accepted().1
}

/// Reports a conversion at `at` (epoch ms) and returns its session.
#[track_caller]
fn session_at(app: &TestApp, ids: Value, at: i64) -> String {
    let mut body = ids;
    body["occurredAt"] = json!(iso(at));
    session_of(app, body)
}

#[track_caller]
fn no_session(app: &TestApp, ids: Value) {
    let mut body = ids;
    body["orderId"] = json!(unique("order"));
    expect_error(&app.post_conversion(&body), 422, "NO_SESSION");
}

#[test]
fn resolution_by_client_id_across_devices_visitor_id_and_session_id() {
    let app = TestApp::start();
    let t = now_ms();
    // Device A, then device B, both identified as user-1.
    let a1 = app.identify("v-a", "user-1", t - 5 * HOUR);
    let b1 = app.identify("v-b", "user-1", t - 4 * HOUR);
    assert_ne!(a1, b1);

    // clientId: the person is both devices; the latest session wins.
    assert_eq!(session_of(&app, json!({"clientId": "user-1"})), b1);
    // visitorId: that device only.
    assert_eq!(session_of(&app, json!({"visitorId": "v-a"})), a1);
    assert_eq!(session_of(&app, json!({"visitorId": "v-b"})), b1);

    // Device A comes back two hours later, without identify(): the link holds for good, and
    // A's new session is now the person's latest.
    let a2 = app.pageview("v-a", "https://shop.example/again", t - 3 * HOUR);
    assert!(![a1.as_str(), b1.as_str()].contains(&a2.as_str()));
    assert_eq!(session_of(&app, json!({"clientId": "user-1"})), a2);
    assert_eq!(session_of(&app, json!({"visitorId": "v-b"})), b1);

    // sessionId names the visitor of that session; the chosen session is that person's latest.
    assert_eq!(session_of(&app, json!({"sessionId": a1})), a2);
    assert_eq!(session_of(&app, json!({"sessionId": b1})), b1);

    // Order of preference: clientId, then visitorId, then sessionId; the first known one decides.
    assert_eq!(
        session_of(
            &app,
            json!({"clientId": "user-1", "visitorId": "v-b", "sessionId": b1})
        ),
        a2
    );
    assert_eq!(
        session_of(&app, json!({"visitorId": "v-b", "sessionId": a1})),
        b1
    );
    // Fallback: an unknown clientId passes to the visitorId, an unknown visitorId to the sessionId.
    assert_eq!(
        session_of(
            &app,
            json!({"clientId": "never-identified", "visitorId": "v-b"})
        ),
        b1
    );
    assert_eq!(
        session_of(
            &app,
            json!({"clientId": "never-identified", "visitorId": "v-unknown", "sessionId": b1})
        ),
        b1
    );
    // Nothing known: 422.
    no_session(
        &app,
        json!({"clientId": "never-identified", "visitorId": "v-unknown", "sessionId": "s-unknown"}),
    );

    // A known clientId decides even when its person has no session in the window: no fallback
    // to another identifier's person.
    app.identify("v-c", "user-2", t - 40 * DAY);
    no_session(&app, json!({"clientId": "user-2", "visitorId": "v-b"}));
}

#[test]
fn identifiers_are_scoped_to_their_site() {
    let app = TestApp::start();
    let s = app.identify("v-1", "user-1", now_ms() - HOUR);
    let other = app.create_site(&app.tenant.id, "Second site", &[]);
    let post = |ids: Value| {
        let mut body = ids;
        body["orderId"] = json!(unique("order"));
        app.post_conversion_as(&app.key.key, &other.id, &body)
    };
    expect_error(&post(json!({"clientId": "user-1"})), 422, "NO_SESSION");
    expect_error(&post(json!({"visitorId": "v-1"})), 422, "NO_SESSION");
    expect_error(&post(json!({"sessionId": s})), 422, "NO_SESSION");
    assert_eq!(session_of(&app, json!({"sessionId": s})), s);
}

#[test]
fn occurred_at_in_the_past_picks_the_session_of_that_time() {
    let app = TestApp::start();
    let t = now_ms();
    let s1 = app.pageview("v-1", "https://shop.example/", t - 5 * HOUR);
    assert_eq!(
        app.pageview("v-1", "https://shop.example/p", t - 5 * HOUR + 10 * MINUTE),
        s1
    );
    let s2_start = t - HOUR;
    let s2 = app.pageview("v-1", "https://shop.example/", s2_start);
    assert_ne!(s1, s2);

    let ids = json!({"visitorId": "v-1"});
    assert_eq!(session_of(&app, ids.clone()), s2, "no occurredAt: now");
    assert_eq!(session_at(&app, ids.clone(), t - 3 * HOUR), s1);
    assert_eq!(session_at(&app, ids.clone(), t - 5 * HOUR + 5 * MINUTE), s1);
    // A session that starts at occurredAt counts; one that starts a millisecond later does not.
    assert_eq!(session_at(&app, ids.clone(), s2_start), s2);
    assert_eq!(session_at(&app, ids.clone(), s2_start - 1), s1);
    // Before the first session: nothing.
    let mut body = ids;
    body["orderId"] = json!(unique("order"));
    body["occurredAt"] = json!(iso(t - 6 * HOUR));
    expect_error(&app.post_conversion(&body), 422, "NO_SESSION");
}

#[test]
fn the_attribution_window_edge_on_both_sides() {
    let app = TestApp::builder().window_days(1).start();
    assert_eq!(app.site.json["windowDays"], json!(1));
    // One session with a single pageview at `l`: it starts and last acts at `l`.
    let l = now_ms() - 3 * DAY;
    let s = app.pageview("v-1", "https://shop.example/", l);
    let ids = json!({"visitorId": "v-1"});
    let rejected = |at: i64| {
        let mut body = ids.clone();
        body["orderId"] = json!(unique("order"));
        body["occurredAt"] = json!(iso(at));
        expect_error(&app.post_conversion(&body), 422, "NO_SESSION");
    };
    // Upper edge: last activity exactly one window before occurredAt is in; a millisecond more is out.
    assert_eq!(session_at(&app, ids.clone(), l + DAY), s);
    rejected(l + DAY + 1);
    assert_eq!(session_at(&app, ids.clone(), l + DAY - 1), s);
    // Lower edge: the session must have started no later than occurredAt.
    assert_eq!(session_at(&app, ids.clone(), l), s);
    rejected(l - 1);
    // And with no occurredAt (now, three days later), it is out of the window.
    no_session(&app, ids.clone());

    // Activity extends the window: a later pageview in the same session moves its last activity.
    let l2 = l + 20 * MINUTE;
    assert_eq!(app.pageview("v-1", "https://shop.example/p2", l2), s);
    assert_eq!(session_at(&app, ids.clone(), l2 + DAY), s);
    rejected(l2 + DAY + 1);
}

#[test]
fn a_new_session_starts_after_30_idle_minutes() {
    let app = TestApp::start();
    let t0 = now_ms() - 5 * HOUR;
    let s1 = app.pageview("v-1", "https://shop.example/", t0);
    // 30 minutes less a millisecond: same session.
    let t1 = t0 + 30 * MINUTE - 1;
    assert_eq!(app.pageview("v-1", "https://shop.example/a", t1), s1);
    // Exactly 30 idle minutes after the last activity: a new session.
    let t2 = t1 + 30 * MINUTE;
    let s2 = app.pageview("v-1", "https://shop.example/b", t2);
    assert_ne!(s2, s1);
    assert_eq!(
        app.pageview("v-1", "https://shop.example/c", t2 + 29 * MINUTE),
        s2
    );

    // Inside one batch, too.
    let t3 = t2 + 2 * HOUR;
    let s3 = app.pixel(
        "v-1",
        json!([
            {"type": "pageview", "url": "https://shop.example/d", "ts": t3},
            {"type": "pageview", "url": "https://shop.example/e", "ts": t3 + 31 * MINUTE},
        ]),
    );
    let sessions: Vec<(String, i64, i64)> = app
        .rows("SELECT id, started_at, last_activity_at FROM sessions WHERE visitor_id = 'v-1' ORDER BY started_at", &[])
        .iter()
        .map(|r| (r[0].as_str().unwrap().to_owned(), r[1].as_i64().unwrap(), r[2].as_i64().unwrap()))
        .collect();
    assert_eq!(sessions.len(), 4, "{sessions:?}");
    assert_eq!(sessions[0], (s1.clone(), t0, t1));
    assert_eq!(sessions[1], (s2.clone(), t2, t2 + 29 * MINUTE));
    assert_eq!(sessions[2].1, t3);
    assert_eq!(
        sessions[3],
        (s3.clone(), t3 + 31 * MINUTE, t3 + 31 * MINUTE)
    );
    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM events WHERE session_id = ?1", &[&s1]),
        2
    );

    // Each idle gap is also where conversions split.
    let ids = json!({"visitorId": "v-1"});
    assert_eq!(session_at(&app, ids.clone(), t1 + 10 * MINUTE), s1);
    assert_eq!(session_at(&app, ids, t2), s2);
}

#[test]
fn a_new_campaign_starts_a_new_session_carrying_its_landing_page() {
    let app = TestApp::start();
    let t = now_ms() - 2 * HOUR;
    let plain = app.pageview("v-1", "https://shop.example/", t);
    let news_url = "https://shop.example/sale?utm_source=news&utm_medium=email&utm_campaign=spring&utm_term=shoes&utm_content=top";
    let news = app.pixel(
        "v-1",
        json!([{"type": "pageview", "url": news_url, "referrer": "https://mail.example/", "ts": t + MINUTE}]),
    );
    assert_ne!(news, plain, "UTM parameters start a new session");
    // A page without campaign parameters, or with the same campaign, stays in it.
    assert_eq!(
        app.pageview("v-1", "https://shop.example/cart", t + 2 * MINUTE),
        news
    );
    assert_eq!(app.pageview("v-1", news_url, t + 3 * MINUTE), news);
    // A click id is a new campaign too.
    let ad_url = "https://shop.example/?gclid=abc123";
    let ad = app.pageview("v-1", ad_url, t + 4 * MINUTE);
    assert_ne!(ad, news);

    let rows = app.rows(
        "SELECT (SELECT url FROM events WHERE id = landing_event_id), referrer, utm_source, utm_medium, utm_campaign, utm_term, utm_content, gclid
         FROM sessions WHERE id = ?1",
        &[&news],
    );
    let row: [Option<String>; 8] = std::array::from_fn(|i| rows[0][i].as_str().map(str::to_owned));
    assert_eq!(
        row,
        [
            Some(news_url.to_owned()),
            Some("https://mail.example/".to_owned()),
            Some("news".into()),
            Some("email".into()),
            Some("spring".into()),
            Some("shoes".into()),
            Some("top".into()),
            None
        ]
    );
    assert_eq!(
        app.query_str("SELECT gclid FROM sessions WHERE id = ?1", &[&ad])
            .as_deref(),
        Some("abc123")
    );
    assert_eq!(
        app.query_str("SELECT (SELECT url FROM events WHERE id = landing_event_id) FROM sessions WHERE id = ?1", &[&ad])
            .as_deref(),
        Some(ad_url)
    );
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM sessions WHERE visitor_id = 'v-1'",
            &[]
        ),
        3
    );
}

#[test]
fn pixel_ts_is_clamped_to_the_receive_time() {
    let app = TestApp::start();
    let before = now_ms();
    let s = app.pageview("v-1", "https://shop.example/", before + DAY);
    let after = now_ms();
    let started = app.query_i64("SELECT started_at FROM sessions WHERE id = ?1", &[&s]);
    assert!(
        (before..=after).contains(&started),
        "a ts a day ahead is clamped to the receive time: {started} not in [{before}, {after}]"
    );
    // So the session is usable right away by a conversion reported now.
    assert_eq!(session_of(&app, json!({"visitorId": "v-1"})), s);
}

#[test]
fn pixel_ts_written_as_an_integral_float_is_a_timestamp() {
    // JSON has one number type: `1763800000000.0` is the same integer (schemathesis sends these).
    let app = TestApp::start();
    let t = now_ms() - 2 * MINUTE;
    let r = app.collect(&json!({
        "trackerId": app.site.tracker_id, "visitorId": "v-f",
        "events": [{"type": "pageview", "url": "https://shop.example/", "ts": t as f64}]
    }));
    let v = r.json();
    assert_eq!(r.status, 200, "{v}");
    let sid = v["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(
        app.query_i64("SELECT started_at FROM sessions WHERE id = ?1", &[&sid]),
        t
    );
}

#[test]
fn identify_marks_the_session_and_links_the_visitor() {
    let app = TestApp::start();
    let s = app.identify("v-1", "user-9", now_ms() - MINUTE);
    assert_eq!(
        app.query_str("SELECT client_id FROM sessions WHERE id = ?1", &[&s])
            .as_deref(),
        Some("user-9")
    );
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM visitor_clients WHERE client_id = 'user-9' AND visitor_id = 'v-1'",
            &[]
        ),
        1
    );
    assert_eq!(session_of(&app, json!({"clientId": "user-9"})), s);
}

// ---- POST /api/collect ----------------------------------------------------------------------

fn assert_cors(r: &Resp) {
    assert_eq!(
        r.header("Access-Control-Allow-Origin"),
        Some("*"),
        "status {}: CORS header missing; {}",
        r.status,
        r.text()
    );
}

fn post_collect(app: &TestApp, content_type: Option<&str>, body: &[u8]) -> Resp {
    let headers: Vec<(&str, &str)> = content_type
        .map(|ct| vec![("Content-Type", ct), ("Origin", "https://shop.example")])
        .unwrap_or_else(|| vec![("Origin", "https://shop.example")]);
    app.send("POST", "/api/collect", &headers, Some(body))
}

#[test]
fn collect_answers_with_cors_and_accepts_text_plain_for_send_beacon() {
    let app = TestApp::start();
    let batch = |visitor: Option<&str>| {
        let mut b = json!({
            "trackerId": app.site.tracker_id,
            "events": [
                {"type": "pageview", "url": "https://shop.example/", "referrer": ""},
                {"type": "event", "name": "add_to_cart", "props": {"sku": "A"}},
            ],
        });
        if let Some(v) = visitor {
            b["visitorId"] = json!(v);
        }
        serde_json::to_vec(&b).unwrap()
    };
    for ct in ["application/json", "text/plain", "text/plain;charset=UTF-8"] {
        let r = post_collect(&app, Some(ct), &batch(Some("v-1")));
        assert_eq!(r.status, 200, "{ct}: {}", r.text());
        assert_cors(&r);
        let v = r.json();
        assert_eq!(v["accepted"], json!(2), "{v}");
        assert_eq!(v["visitorId"], json!("v-1"));
        assert!(
            v["sessionId"].as_str().is_some_and(|s| !s.is_empty()),
            "{v}"
        );
    }
    // A visitor id is minted when absent, and names a real visitor afterwards.
    let r = post_collect(&app, Some("text/plain"), &batch(None));
    let minted = r.str("visitorId");
    assert!(!minted.is_empty());
    let s = r.str("sessionId");
    assert_eq!(session_of(&app, json!({"visitorId": minted})), s);
    // Another content type is refused, still with CORS headers.
    let r = post_collect(
        &app,
        Some("application/x-www-form-urlencoded"),
        &batch(Some("v-1")),
    );
    expect_error(&r, 415, "UNSUPPORTED_MEDIA_TYPE");
    assert_cors(&r);
}

#[test]
fn collect_preflight_allows_the_pixel() {
    let app = TestApp::start();
    let r = app.send(
        "OPTIONS",
        "/api/collect",
        &[
            ("Origin", "https://shop.example"),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "content-type"),
        ],
        None,
    );
    assert!(
        (200..300).contains(&r.status),
        "preflight status {}",
        r.status
    );
    assert_cors(&r);
    let list = |name: &str| -> Vec<String> {
        r.header(name)
            .unwrap_or_else(|| panic!("{name} missing"))
            .split(',')
            .map(|s| s.trim().to_ascii_lowercase())
            .collect()
    };
    assert!(list("Access-Control-Allow-Methods").contains(&"post".to_owned()));
    assert!(list("Access-Control-Allow-Headers").contains(&"content-type".to_owned()));
}

#[test]
fn collect_refuses_an_unknown_tracker_and_malformed_batches() {
    let app = TestApp::start();
    let tracker = app.site.tracker_id.clone();
    let pv = json!({"type": "pageview", "url": "https://shop.example/"});

    let r =
        app.collect(&json!({"trackerId": "no-such-tracker", "visitorId": "v-x", "events": [pv]}));
    expect_error(&r, 404, "SITE_NOT_FOUND");
    assert_cors(&r);
    // The site UUID is not a tracker id.
    expect_error(
        &app.collect(&json!({"trackerId": app.site.id, "visitorId": "v-x", "events": [pv]})),
        404,
        "SITE_NOT_FOUND",
    );

    // A bad event: 400 naming its index (the first bad one), and nothing of the batch is written.
    let bad_events: Vec<(&str, Value, usize)> = vec![
        (
            "identify without userId",
            json!([pv, pv, {"type": "identify"}, {"type": "nope"}]),
            2,
        ),
        ("unknown type", json!([{"type": "click"}]), 0),
        ("event not an object", json!([pv, "pageview"]), 1),
        (
            "missing type",
            json!([pv, pv, pv, {"url": "https://shop.example/"}]),
            3,
        ),
        (
            "purchase without orderId",
            json!([pv, {"type": "purchase", "value": 5}]),
            1,
        ),
        (
            "purchase with a bad currency",
            json!([pv, {"type": "purchase", "orderId": "P-1", "currency": "eur"}]),
            1,
        ),
        (
            "purchase with a negative value",
            json!([pv, {"type": "purchase", "orderId": "P-1", "value": -1}]),
            1,
        ),
        ("negative ts", json!([{"type": "pageview", "ts": -1}]), 0),
        (
            "fractional ts",
            json!([pv, {"type": "pageview", "ts": 1.5}]),
            1,
        ),
        (
            "ts beyond 2^53",
            json!([pv, {"type": "pageview", "ts": 1e300}]),
            1,
        ),
        (
            "ts as a string",
            json!([pv, {"type": "pageview", "ts": "yesterday"}]),
            1,
        ),
        (
            "custom event without a name",
            json!([pv, {"type": "event"}]),
            1,
        ),
        (
            "url not a string",
            json!([pv, pv, {"type": "pageview", "url": 5}]),
            2,
        ),
    ];
    for (name, events, index) in &bad_events {
        let r = app.collect(&json!({"trackerId": tracker, "visitorId": "v-bad", "events": events}));
        let v = expect_error(&r, 400, "VALIDATION_ERROR");
        assert_cors(&r);
        assert_eq!(v["index"], json!(index), "case {name:?}: {v}");
        let field = v["field"].as_str().unwrap_or_default();
        assert!(
            field.starts_with(&format!("events[{index}]")),
            "case {name:?}: field {field:?}"
        );
        assert!(
            v["error"]
                .as_str()
                .unwrap_or_default()
                .contains(&index.to_string()),
            "case {name:?}: the message names the index: {v}"
        );
    }
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM sessions WHERE visitor_id = 'v-bad'",
            &[]
        ) + app.query_i64("SELECT COUNT(*) FROM conversions", &[]),
        0,
        "a refused batch writes nothing"
    );

    // Batch-level problems.
    let too_many: Vec<Value> = (0..101).map(|_| pv.clone()).collect();
    let batch_cases: Vec<(&str, Value, &str)> = vec![
        (
            "no events",
            json!({"trackerId": tracker, "events": []}),
            "events",
        ),
        ("events missing", json!({"trackerId": tracker}), "events"),
        (
            "events not an array",
            json!({"trackerId": tracker, "events": pv}),
            "events",
        ),
        (
            "101 events",
            json!({"trackerId": tracker, "events": too_many}),
            "events",
        ),
        ("no trackerId", json!({"events": [pv]}), "trackerId"),
        (
            "numeric trackerId",
            json!({"trackerId": 7, "events": [pv]}),
            "trackerId",
        ),
        (
            "empty visitorId",
            json!({"trackerId": tracker, "visitorId": "", "events": [pv]}),
            "visitorId",
        ),
    ];
    for (name, body, field) in &batch_cases {
        let r = app.collect(body);
        assert_eq!(r.status, 400, "case {name:?}: {}", r.text());
        expect_invalid(&r, field);
        assert_cors(&r);
    }
    let hundred: Vec<Value> = (0..100).map(|_| pv.clone()).collect();
    let r = app.collect(&json!({"trackerId": tracker, "visitorId": "v-100", "events": hundred}));
    assert_eq!(r.expect(200)["accepted"], json!(100));

    // Not JSON at all, or nested past any reason.
    for body in [
        b"trackerId=abc".to_vec(),
        b"[]".to_vec(),
        format!(
            "{{\"trackerId\":\"{tracker}\",\"events\":{}",
            "[".repeat(200_000)
        )
        .into_bytes(),
    ] {
        let r = post_collect(&app, Some("text/plain"), &body);
        expect_error(&r, 400, "INVALID_JSON");
        assert_cors(&r);
    }
    // Over 256 KiB.
    let mut big = format!("{{\"trackerId\":\"{tracker}\",\"pad\":\"");
    big.push_str(&"x".repeat(256 * 1024));
    big.push_str("\",\"events\":[{\"type\":\"pageview\"}]}");
    let r = post_collect(&app, Some("application/json"), big.as_bytes());
    expect_error(&r, 413, "PAYLOAD_TOO_LARGE");
    assert_cors(&r);
    assert_eq!(app.get("/healthz").status, 200);
}
