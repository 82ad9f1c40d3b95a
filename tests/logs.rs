//! Request ids and the server's log: every response carries `X-Request-Id` (the client's own when
//! well-formed, else a fresh UUIDv7), and the one access line per request names that id, the client
//! (the forwarded one behind a trusted proxy), method, path, status, error code and duration, in
//! the text format and in `--log-format json`, where every stderr line is one JSON object.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{json, Value};

/// A conversion no session can be found for: 422 `NO_SESSION`.
const NO_SESSION: &[u8] = br#"{"clientId":"nobody","orderId":"N-1"}"#;

/// The first line of the server's log for which `pick` holds, waiting for it (bounded): the access
/// line is written after the response went out, so the client may see the response first.
fn wait_for_line(app: &TestApp, pick: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(line) = app.log().lines().find(|l| pick(l)) {
            return line.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "no such log line after 10s; log:\n{}",
            app.log()
        );
        // The log is a file the server appends to: there is no hook to wait on.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The fields of the text access line of request `id`: `ID CLIENT METHOD PATH STATUS CODE MSms`
/// and, behind a trusted proxy, `via PEER`.
fn text_access(app: &TestApp, id: &str) -> Vec<String> {
    let line = wait_for_line(app, |l| {
        l.split_once(" access] ")
            .is_some_and(|(_, rest)| rest.starts_with(&format!("{id} ")))
    });
    let (_, rest) = line.split_once(" access] ").unwrap();
    let fields: Vec<String> = rest.split(' ').map(str::to_owned).collect();
    let ms = fields[6]
        .strip_suffix("ms")
        .and_then(|n| n.parse::<f64>().ok());
    assert!(ms.is_some_and(|ms| ms >= 0.0), "duration in {line:?}");
    fields
}

/// The JSON access line of request `id`.
fn json_access(app: &TestApp, id: &str) -> Value {
    let line = wait_for_line(app, |l| {
        serde_json::from_str::<Value>(l)
            .is_ok_and(|v| v["target"] == "access" && v["requestId"] == id)
    });
    serde_json::from_str(&line).unwrap()
}

/// `s` is a UUID of version 7.
fn assert_uuid_v7(s: &str) {
    let uuid = uuid::Uuid::parse_str(s).unwrap_or_else(|e| panic!("{s:?} is no UUID: {e}"));
    assert_eq!(uuid.get_version_num(), 7, "{s} is not a UUIDv7");
}

fn request_id(r: &Resp) -> String {
    r.header("X-Request-Id")
        .unwrap_or_else(|| panic!("no X-Request-Id in {:?}", r.headers))
        .to_owned()
}

#[test]
fn a_well_formed_incoming_request_id_is_echoed_and_logged() {
    let app = TestApp::start();
    let long = "Z".repeat(128);
    for id in ["trace-42.a_b:c-D", "7", long.as_str()] {
        let r = app.send("GET", "/healthz", &[("X-Request-Id", id)], None);
        assert_eq!(r.status, 200);
        assert_eq!(request_id(&r), id);
        let fields = text_access(&app, id);
        assert_eq!(
            fields[..6],
            [id, "127.0.0.1", "GET", "/healthz", "200", "-"]
        );
    }
}

#[test]
fn a_malformed_request_id_is_replaced_by_a_uuid_v7() {
    let app = TestApp::start();
    let too_long = "a".repeat(129);
    for bad in [
        too_long.as_str(),
        "with space",
        "<script>",
        "a,b",
        "tab\there",
    ] {
        let r = app.send("GET", "/healthz", &[("X-Request-Id", bad)], None);
        assert_eq!(r.status, 200);
        let id = request_id(&r);
        assert_uuid_v7(&id);
        assert_eq!(
            text_access(&app, &id)[..5],
            [id.as_str(), "127.0.0.1", "GET", "/healthz", "200"]
        );
    }
    let log = app.log();
    for bad in [too_long.as_str(), "with space", "<script>"] {
        assert!(!log.contains(bad), "{bad:?} reached the log:\n{log}");
    }
}

#[test]
fn every_response_gets_its_own_id() {
    let app = TestApp::start();
    let a = request_id(&app.get("/healthz"));
    let b = request_id(&app.get("/healthz"));
    let missing = app.get("/no/such/route");
    expect_error(&missing, 404, "NOT_FOUND");
    let c = request_id(&missing);
    for id in [&a, &b, &c] {
        assert_uuid_v7(id);
    }
    assert!(a != b && b != c && a != c, "ids repeat: {a} {b} {c}");
    let fields = text_access(&app, &c);
    assert_eq!(
        fields[..6],
        [
            c.as_str(),
            "127.0.0.1",
            "GET",
            "/no/such/route",
            "404",
            "NOT_FOUND"
        ]
    );
}

#[test]
fn the_text_access_line_names_client_status_and_error_code() {
    let app = TestApp::builder()
        .serve_args(&["--trusted-proxies", "127.0.0.1"])
        .start();
    let path = format!("/api/sites/{}/conversions", app.site.id);
    let auth = format!("Bearer {}", app.key.key);
    let r = app.post_conversion_raw(
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("X-Request-Id", "text-422"),
            ("X-Forwarded-For", "203.0.113.7"),
        ],
        &app.site.id,
        NO_SESSION,
    );
    expect_error(&r, 422, "NO_SESSION");
    let fields = text_access(&app, "text-422");
    assert_eq!(
        fields[..6],
        [
            "text-422",
            "203.0.113.7",
            "POST",
            path.as_str(),
            "422",
            "NO_SESSION"
        ]
    );
    assert_eq!(fields[7..], ["via", "127.0.0.1"], "{fields:?}");

    // The front's own refusals carry their code too: a declared body over every limit is refused
    // unread.
    let mut conn = TcpStream::connect(app.addr()).unwrap();
    conn.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        conn,
        "POST {path} HTTP/1.1\r\nHost: x\r\nX-Request-Id: text-413\r\n\
         Content-Length: 999999999\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer:?}");
    assert!(answer.contains("X-Request-Id: text-413\r\n"), "{answer:?}");
    let fields = text_access(&app, "text-413");
    assert_eq!(fields[4..6], ["413", "PAYLOAD_TOO_LARGE"]);
}

#[test]
fn an_untrusted_peer_cannot_name_the_client() {
    let app = TestApp::start();
    let r = app.send(
        "GET",
        "/healthz",
        &[
            ("X-Request-Id", "spoof-1"),
            ("X-Forwarded-For", "203.0.113.7"),
        ],
        None,
    );
    assert_eq!(r.status, 200);
    let fields = text_access(&app, "spoof-1");
    assert_eq!(fields[1], "127.0.0.1");
    assert_eq!(fields.len(), 7, "no `via` without a proxy: {fields:?}");
}

/// Every line of the log is a JSON object with the four members every line has.
fn assert_all_json(log: &str) {
    assert!(!log.trim().is_empty(), "empty log");
    for line in log.lines() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("a log line is not JSON ({e}): {line:?}"));
        for member in ["ts", "level", "target", "msg"] {
            assert!(v[member].is_string(), "{member} in {line}");
        }
        chrono::DateTime::parse_from_rfc3339(v["ts"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("ts is not RFC 3339 ({e}): {line}"));
    }
}

#[test]
fn with_log_format_json_every_line_is_a_json_object_with_the_access_fields() {
    let app = TestApp::builder()
        .serve_args(&["--log-format", "json", "--trusted-proxies", "127.0.0.1"])
        .start();
    let auth = format!("Bearer {}", app.key.key);
    let r = app.post_conversion_raw(
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("X-Request-Id", "json-422"),
            ("X-Forwarded-For", "198.51.100.1, 203.0.113.7"),
        ],
        &app.site.id,
        NO_SESSION,
    );
    expect_error(&r, 422, "NO_SESSION");
    let line = json_access(&app, "json-422");
    assert!(line["ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{line}");
    assert_eq!(line["level"], "INFO");
    let path = format!("/api/sites/{}/conversions", app.site.id);
    for (member, want) in [
        ("requestId", json!("json-422")),
        // The nearest address the trusted proxy did not add itself.
        ("client", json!("203.0.113.7")),
        ("peer", json!("127.0.0.1")),
        ("method", json!("POST")),
        ("path", json!(path)),
        ("status", json!(422)),
        ("code", json!("NO_SESSION")),
    ] {
        assert_eq!(line[member], want, "{member} in {line}");
    }

    let id = request_id(&app.get("/healthz"));
    let ok = json_access(&app, &id);
    assert_eq!(ok["status"], 200);
    assert_eq!(ok["code"], Value::Null, "no code on a 200: {ok}");
    assert_eq!(ok["client"], "127.0.0.1");
    assert_all_json(&app.log());
}

#[test]
fn the_log_format_comes_from_the_environment_too() {
    let app = TestApp::builder()
        .env("CONVAPI_LOG_FORMAT", "json")
        .env("RUST_LOG", "debug")
        .start();
    let id = request_id(&app.get("/healthz"));
    assert_eq!(json_access(&app, &id)["status"], 200);
    assert_all_json(&app.log());
}

/// Regression: at `RUST_LOG=trace` the HTTP client logged each request's URL, GA4's `api_secret`
/// in its query, and on PostgreSQL at `RUST_LOG=debug` the client logged every statement with its
/// parameters (tokens, password hashes, personal data). The clients' lines stop at `info`.
#[test]
fn no_secret_reaches_the_log_at_trace_level() {
    use crate::common::fake::{FakePlatform, Reply};
    use convapi::store::destinations::{self, Destination, Health};
    use std::collections::BTreeMap;

    let fake = FakePlatform::start(|_| Reply::status(204, json!("")));
    let app = TestApp::builder().env("RUST_LOG", "trace").start();
    let secret = "ga4-api-secret-in-the-url-0001";
    let now = now_ms();
    let dest = Destination {
        id: unique("dest"),
        site_id: app.site.id.clone(),
        kind: "ga4".into(),
        name: "GA4".into(),
        settings: json!({"measurement_id": "G-TEST123"})
            .as_object()
            .unwrap()
            .clone(),
        secrets: json!({"api_secret": secret}).as_object().unwrap().clone(),
        endpoint: Some(fake.url()),
        api_version: None,
        events: BTreeMap::from([("purchase".to_owned(), "purchase".to_owned())]),
        consent: "analytics".into(),
        enabled: true,
        created_at: now,
        updated_at: now,
        health: Health::default(),
    };
    destinations::insert(&app.store(), &dest).unwrap();
    // A visitor id and an order id that the store writes as statement parameters.
    let visitor = "visitor-personal-data-0001";
    let order = "order-personal-data-0001";
    app.identify(visitor, "client-1", now - 60_000);
    app.post_conversion(
        &json!({"visitorId": visitor, "orderId": order, "value": 19.99, "currency": "EUR"}),
    )
    .accepted();
    let reqs = fake.wait_for(Duration::from_secs(30), |r| !r.is_empty());
    assert_eq!(reqs[0].query("api_secret").as_deref(), Some(secret));
    // Its outcome is written after the request: wait for the delivery's row to say so.
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.query_i64(
        "SELECT COUNT(*) FROM deliveries WHERE status = 'delivered'",
        &[],
    ) == 0
    {
        assert!(Instant::now() < deadline, "never delivered:\n{}", app.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = app.log();
    assert!(log.contains(" TRACE ") || log.contains(" DEBUG "), "{log}");
    for needle in [secret, visitor, order] {
        assert!(!log.contains(needle), "{needle} in the log:\n{log}");
    }
}
