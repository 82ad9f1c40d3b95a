//! The public pixel endpoint and anonymous input (docs/decisions.md §4, §8): rate limits per client
//! address and per tracker, bounds on what a batch may carry, duplicate JSON members, one spelling
//! per route, path parameters that are not UTF-8, and the optional `/metrics` token. Each test
//! names the defect it pins.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{json, Value};

/// A batch of `n` pageviews with URLs of the longest kept length.
fn big_batch(tracker: &str, visitor: &str, n: usize) -> Value {
    let url = format!("https://shop.example/?q={}", "x".repeat(2048 - 25));
    let events: Vec<Value> = (0..n)
        .map(|_| json!({"type": "pageview", "url": url, "referrer": "https://mail.example/"}))
        .collect();
    json!({"trackerId": tracker, "visitorId": visitor, "events": events})
}

/// The size of the database file and its WAL; on PostgreSQL, of the database
/// (`pg_database_size`).
fn db_and_wal_bytes(app: &TestApp) -> u64 {
    if app.is_postgres() {
        return app.query_i64("SELECT pg_database_size(current_database())", &[]) as u64;
    }
    let size = |suffix: &str| {
        std::fs::metadata(format!("{}{suffix}", app.db.display()))
            .map(|m| m.len())
            .unwrap_or(0)
    };
    size("") + size("-wal")
}

/// Before: one client at full speed grew the database by gigabytes and could fill the outbox so
/// that the authenticated endpoint answered 503. Now the address is limited (429 with
/// Retry-After), the database grows by a bounded amount, and a conversion reported meanwhile is
/// accepted within a second.
#[test]
fn pixel_flood_from_one_address_is_rate_limited_and_conversions_still_answer_202() {
    // Floods the server and has deadlines of its own: alone, never beside a timing-sensitive test.
    let _load = heavy_load();
    let app = TestApp::start();
    let session_visitor = "v-real";
    app.pageview(session_visitor, "https://shop.example/", now_ms());
    let before = db_and_wal_bytes(&app);

    let stop = Arc::new(AtomicBool::new(false));
    let (ok, limited, other) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let body = serde_json::to_vec(&big_batch(&app.site.tracker_id, "v-flood", 100)).unwrap();
    let url = format!("{}/api/collect", app.base);
    let flooders: Vec<_> = (0..4)
        .map(|_| {
            let (stop, ok, limited, other) =
                (stop.clone(), ok.clone(), limited.clone(), other.clone());
            let (body, url) = (body.clone(), url.clone());
            std::thread::spawn(move || {
                let agent = agent();
                let mut retry_after_seen = true;
                while !stop.load(Ordering::Relaxed) {
                    let r = send(
                        &agent,
                        "POST",
                        &url,
                        &[("Content-Type", "text/plain")],
                        Some(&body),
                    );
                    match r.status {
                        200 => ok.fetch_add(1, Ordering::Relaxed),
                        429 => {
                            retry_after_seen &= r
                                .header("Retry-After")
                                .and_then(|s| s.parse::<u64>().ok())
                                .is_some_and(|s| s >= 1);
                            assert_eq!(r.json()["code"], "RATE_LIMITED");
                            limited.fetch_add(1, Ordering::Relaxed)
                        }
                        s => {
                            eprintln!("unexpected {s}: {}", r.text());
                            other.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
                retry_after_seen
            })
        })
        .collect();

    // Conversions reported while the flood runs: every one accepted, each within a second.
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut n = 0;
    while started.elapsed() < Duration::from_secs(10) {
        let t = Instant::now();
        let r = app.post_conversion(&json!({
            "visitorId": session_visitor, "orderId": format!("flood-{n}"), "value": 10, "currency": "USD"
        }));
        slowest = slowest.max(t.elapsed());
        r.expect(202);
        n += 1;
        std::thread::sleep(Duration::from_millis(250));
    }
    stop.store(true, Ordering::Relaxed);
    for f in flooders {
        assert!(
            f.join().unwrap(),
            "every 429 carries a Retry-After of at least 1 second"
        );
    }
    let (ok, limited, other) = (
        ok.load(Ordering::Relaxed),
        limited.load(Ordering::Relaxed),
        other.load(Ordering::Relaxed),
    );
    assert_eq!(other, 0, "only 200 and 429 answers");
    assert!(
        limited > 10 * ok,
        "mostly refused: {ok} accepted, {limited} limited"
    );
    // At the defaults (20 events/s, bursts of 200): at most 200 + 10 s * 20 = 400 events, i.e. 4
    // batches of 100 plus slack for the timing of the refill.
    assert!(ok <= 6, "{ok} batches of 100 accepted in 10 s");
    assert!(
        slowest < Duration::from_secs(1),
        "slowest conversion during the flood took {slowest:?}"
    );
    let grown = db_and_wal_bytes(&app).saturating_sub(before);
    eprintln!(
        "flood: {ok} batches accepted, {limited} refused, {n} conversions (slowest {slowest:?}), \
         database + WAL grew {grown} bytes in 10 s"
    );
    assert!(grown < 16 << 20, "database grew {grown} bytes in 10 s");
}

/// The per-address limit is per address: behind a trusted proxy, `X-Forwarded-For` names the
/// client; from any other peer the header is ignored (a client could otherwise pick a fresh
/// address per request).
#[test]
fn forwarded_for_counts_only_from_a_trusted_proxy() {
    let batch = |app: &TestApp, xff: &str| {
        app.send(
            "POST",
            "/api/collect",
            &[
                ("Content-Type", "application/json"),
                ("X-Forwarded-For", xff),
            ],
            Some(&serde_json::to_vec(&big_batch(&app.site.tracker_id, "v", 10)).unwrap()),
        )
        .status
    };
    // 1 event/s, bursts of 10: one batch of 10 empties an address's bucket.
    let trusting = TestApp::builder()
        .serve_args(&["--pixel-rate", "1", "--trusted-proxies", "127.0.0.0/8"])
        .start();
    assert_eq!(batch(&trusting, "198.51.100.1"), 200);
    assert_eq!(batch(&trusting, "198.51.100.1"), 429);
    assert_eq!(
        batch(&trusting, "203.0.113.9, 198.51.100.2"),
        200,
        "another client"
    );

    let direct = TestApp::builder()
        .serve_args(&["--pixel-rate", "1"])
        .start();
    assert_eq!(batch(&direct, "198.51.100.1"), 200);
    assert_eq!(
        batch(&direct, "198.51.100.2"),
        429,
        "the header is not believed"
    );
}

/// The per-tracker limit holds whatever the addresses.
#[test]
fn one_tracker_is_limited_across_addresses() {
    let app = TestApp::builder()
        .serve_args(&["--pixel-site-rate", "1", "--trusted-proxies", "127.0.0.1"])
        .start();
    let body = serde_json::to_vec(&big_batch(&app.site.tracker_id, "v", 10)).unwrap();
    let from = |xff: &str| {
        app.send(
            "POST",
            "/api/collect",
            &[
                ("Content-Type", "application/json"),
                ("X-Forwarded-For", xff),
            ],
            Some(&body),
        )
    };
    assert_eq!(from("198.51.100.1").status, 200);
    let r = from("198.51.100.2");
    expect_error(&r, 429, "RATE_LIMITED");
    assert_eq!(
        r.header("Access-Control-Allow-Origin"),
        Some("*"),
        "the pixel can read it"
    );
}

/// Before: `{"orderId":"A","orderId":"B"}` stored order B (serde keeps the last member).
#[test]
fn duplicate_json_members_are_invalid_json_on_both_endpoints() {
    let app = TestApp::start();
    let r = app.post_conversion_raw(
        &[
            ("Authorization", &format!("Bearer {}", app.key.key)),
            ("Content-Type", "application/json"),
        ],
        &app.site.id,
        br#"{"visitorId":"v","orderId":"A","orderId":"B"}"#,
    );
    let body = expect_error(&r, 400, "INVALID_JSON");
    assert!(
        body["error"].as_str().unwrap().contains("orderId"),
        "{body}"
    );
    let pixel = format!(
        r#"{{"trackerId":"{}","events":[{{"type":"pageview","type":"purchase","orderId":"X"}}]}}"#,
        app.site.tracker_id
    );
    let r = app.send(
        "POST",
        "/api/collect",
        &[("Content-Type", "text/plain")],
        Some(pixel.as_bytes()),
    );
    expect_error(&r, 400, "INVALID_JSON");
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 0);
}

/// Before: one batch could carry 100 purchases of up to 1e12 each, inflating revenue at will, and
/// `ts: 0` dated a pixel order 1970-01-01.
#[test]
fn pixel_purchases_are_bounded_in_count_value_and_age() {
    // The production default, which the harness raises for other tests.
    let app = TestApp::builder()
        .serve_args(&["--pixel-max-age-hours", "24"])
        .start();
    let purchases: Vec<Value> = (0..11)
        .map(|i| json!({"type": "purchase", "orderId": format!("p-{i}"), "value": 1}))
        .collect();
    let r = app
        .collect(&json!({"trackerId": app.site.tracker_id, "visitorId": "v", "events": purchases}));
    let body = expect_error(&r, 400, "VALIDATION_ERROR");
    assert_eq!(body["index"], 10, "{body}");

    let r = app.collect(
        &json!({"trackerId": app.site.tracker_id, "visitorId": "v", "events": [
            {"type": "purchase", "orderId": "big", "value": 1e9 + 1.0}
        ]}),
    );
    let body = expect_error(&r, 400, "VALIDATION_ERROR");
    assert_eq!(body["field"], "events[0].value", "{body}");
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 0);

    app.pixel(
        "v",
        json!([{"type": "purchase", "orderId": "old", "value": 5, "currency": "USD", "ts": 0}]),
    );
    let status = app.order_status("old").expect(200);
    let occurred = chrono::DateTime::parse_from_rfc3339(status["occurredAt"].as_str().unwrap())
        .unwrap()
        .timestamp_millis();
    let bound = now_ms() - DAY;
    assert!(
        (bound - MINUTE..=bound + MINUTE).contains(&occurred),
        "ts 0 is clamped to a day before receipt: {status}"
    );
}

/// Before: `/metrics` showed order volume and outbox depth to anyone. With a token configured it
/// asks for it; without one it stays open (a scraper on the same box).
#[test]
fn metrics_asks_for_its_token_when_one_is_configured() {
    let app = TestApp::builder()
        .serve_args(&["--metrics-token", "s3cret-token"])
        .start();
    expect_error(&app.get("/metrics"), 401, "UNAUTHORIZED");
    let wrong = app.send("GET", "/metrics", &[("Authorization", "Bearer nope")], None);
    expect_error(&wrong, 401, "UNAUTHORIZED");
    let right = app.send(
        "GET",
        "/metrics",
        &[("Authorization", "Bearer s3cret-token")],
        None,
    );
    assert_eq!(right.status, 200);
    assert!(right.text().contains("convapi_pixel_rate_limited_total"));
    assert_eq!(TestApp::start().get("/metrics").status, 200);
}

/// Before: the conversions endpoint read the body before checking the key, so any `Bearer` value
/// let a client hold a request thread for as long as it took to send the body. Bodies up to 256 KiB
/// are now read on the connection's own thread before any request thread sees them
/// (tests/slow_bodies.rs); a larger declared body is left for the handler, which checks the key and
/// the site first: a bad key is answered at once (401, not the 413 a valid key would get), before
/// any body byte arrives.
#[test]
fn a_bad_key_is_refused_before_the_body_is_read() {
    use std::io::{Read, Write};
    let app = TestApp::start();
    let other = app.create_tenant("other");
    let other_key = app.create_key(&other.id);
    for (auth, want) in [
        ("Bearer ask_not-a-real-key".to_owned(), "401"),
        (format!("Bearer {}", other_key.key), "403"),
    ] {
        let mut s = std::net::TcpStream::connect(app.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let head = format!(
            "POST /api/sites/{}/conversions HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n\
             Content-Type: application/json\r\nContent-Length: 300000\r\n\r\n{{\"visitorId\"",
            app.site.id
        );
        s.write_all(head.as_bytes()).unwrap();
        let started = Instant::now();
        let mut buf = [0u8; 512];
        let n = s.read(&mut buf).expect("an answer without the body");
        let answer = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(answer.starts_with(&format!("HTTP/1.1 {want}")), "{answer}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
}

/// Before: `/%6detrics` and `//metrics` served `/metrics`, so a proxy rule guarding one spelling
/// could be walked around. Route words now match the path as sent; only parameters are decoded.
#[test]
fn a_route_has_one_spelling() {
    let app = TestApp::start();
    assert_eq!(app.get("/metrics").status, 200);
    for path in [
        "/%6detrics",
        "//metrics",
        "/metrics/",
        "/%2Fmetrics",
        "/./metrics",
    ] {
        expect_error(&app.get(path), 404, "NOT_FOUND");
    }
    let r = app.send(
        "GET",
        &format!("/api/%73ites/{}/conversions/x", app.site.id),
        &[("Authorization", &format!("Bearer {}", app.key.key))],
        None,
    );
    expect_error(&r, 404, "NOT_FOUND");
    // Parameters are still percent-decoded: an order id with a slash and a space.
    app.pageview("v", "https://shop.example/", now_ms());
    app.post_conversion(&json!({"visitorId": "v", "orderId": "A/1 b"}))
        .expect(202);
    app.order_status("A/1 b").expect(200);
}

/// Regression: path parameters were percent-decoded lossily, so `DELETE
/// …/people/x%FFy` (not UTF-8) answered 200 and erased the stored person `x\u{FFFD}y`, and a
/// backend sending Latin-1 (`M%FCller`) got 200 with zero counts while "Müller" stayed stored.
/// A parameter that does not decode to UTF-8 is now 400 `VALIDATION_ERROR` naming it, on every
/// route, before anything is looked up.
#[test]
fn path_parameters_are_not_decoded_lossily() {
    let app = TestApp::start();
    let now = now_ms();
    let (replaced, latin) = ("x\u{FFFD}y", "M\u{FC}ller");
    app.identify("v-replaced", replaced, now - 60_000);
    app.identify("v-latin", latin, now - 60_000);
    app.post_conversion(&json!({"clientId": replaced, "orderId": replaced}))
        .accepted();
    let site = app.site.id.clone();
    let auth = format!("Bearer {}", app.key.key);
    let send = |method: &str, path: &str| app.send(method, path, &[("Authorization", &auth)], None);

    let people = format!("/api/sites/{site}/people");
    for raw in ["x%FFy", "M%FCller", "%C3", "%80abc"] {
        expect_invalid(&send("DELETE", &format!("{people}/{raw}")), "clientId");
    }
    let orders = format!("/api/sites/{site}/conversions");
    expect_invalid(&send("GET", &format!("{orders}/x%FFy")), "orderId");
    let head = send("HEAD", &format!("{orders}/x%FFy"));
    assert_eq!(head.status, 400, "HEAD of an order id that is not UTF-8");
    for (method, path) in [
        ("POST", "/api/sites/%FF/conversions".to_owned()),
        ("GET", "/api/sites/%FF/conversions/A-1".to_owned()),
        ("DELETE", "/api/sites/%FF/people/someone".to_owned()),
        // The site id is checked before the other parameter.
        ("DELETE", "/api/sites/%FF/people/x%FFy".to_owned()),
    ] {
        expect_invalid(&send(method, &path), "siteId");
    }
    // Before the key, like the §8 limits: nothing is looked up for a request that cannot name
    // anything.
    let anonymous = app.send("DELETE", &format!("{people}/x%FFy"), &[], None);
    expect_invalid(&anonymous, "clientId");

    // Nothing was erased: both people are still there for the right spelling.
    for stored in [replaced, latin] {
        let done = send("DELETE", &format!("{people}/{}", encode_segment(stored))).expect(200);
        assert_eq!(done["visitors"], json!(1), "{stored:?}: {done}");
    }
    // And the right spelling of the order finds it.
    app.order_status(replaced).expect(200);
}
