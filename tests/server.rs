//! The server loop itself: SIGTERM stops accepting, lets the request in flight finish, and exits 0;
//! the binary has no test route. (A panicking handler is a 500 and never a dead worker: a unit test
//! of the library, `src/cli/serve.rs`, whose build alone has a route that panics.)

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::json;

/// The panicking handler of the library's unit tests (`src/cli/serve.rs`: a panic is a 500 and the
/// workers live on) is compiled into their build only: the shipped binary has no such route, and
/// no switch that would add it.
#[test]
fn the_binary_has_no_test_route() {
    let app = TestApp::builder().env("CONVAPI_TEST_ROUTES", "1").start();
    expect_error(&app.get("/__test/panic"), 404, "NOT_FOUND");
}

/// `convapi_requests_in_flight` from `/metrics` (the metrics request itself counts as one).
fn in_flight(app: &TestApp) -> i64 {
    let text = app.get("/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix("convapi_requests_in_flight "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no convapi_requests_in_flight in:\n{text}"))
}

#[test]
fn sigterm_lets_the_request_in_flight_finish_then_exits_0() {
    let mut app = TestApp::start();
    app.pageview("v-drain", "https://shop.example/", now_ms() - 60_000);

    // A report whose body arrives in two halves, with SIGTERM in between. tiny_http reads the body
    // on the connection's thread before handing the request over; the server waits for it.
    let body = serde_json::to_vec(&json!({
        "visitorId": "v-drain", "orderId": "DRAIN-1", "value": 5,
        "padding": "x".repeat(4000),
    }))
    .unwrap();
    let (first, rest) = body.split_at(body.len() / 2);
    let mut conn = TcpStream::connect(app.addr()).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        conn,
        "POST /api/sites/{}/conversions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        app.site.id,
        app.key.key,
        body.len()
    )
    .unwrap();
    conn.write_all(first).unwrap();
    conn.flush().unwrap();

    // Nothing outside shows when tiny_http has read the head; on loopback it takes microseconds.
    std::thread::sleep(Duration::from_millis(500));
    // No request thread waits for the rest of the body (only the metrics request is in flight).
    assert_eq!(in_flight(&app), 1);

    let killed = Command::new("kill")
        .args(["-TERM", &app.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    // Once stopping, the server accepts no new connections (bounded wait for the listener to close).
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(app.addr()).is_ok_and(|mut s| {
        // A connection still accepted by the kernel backlog is not served: it sees EOF or reset.
        s.set_read_timeout(Some(Duration::from_millis(200))).ok();
        let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
        let mut buf = [0u8; 16];
        matches!(s.read(&mut buf), Ok(n) if n > 0)
    }) {
        assert!(
            Instant::now() < deadline,
            "still serving new connections after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    conn.write_all(rest).unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response)
        .expect("the in-flight request is answered");
    assert!(
        response.starts_with("HTTP/1.1 202"),
        "in-flight request finished with a 202: {response}"
    );
    assert_eq!(app.wait_exit(), Some(0), "log:\n{}", app.log());
    // A clean stop is not an error: the listener shut down under tiny_http's accept loop once
    // logged `ERROR ... Invalid argument` (vendor/tiny_http/PATCHES.md 18).
    // (The test cluster's `fsync = off` is logged as an error at start: a cluster's setting.)
    let log = app.log();
    assert!(
        !log.lines()
            .any(|l| l.contains(" ERROR ") && !l.contains("fsync = off")),
        "a clean stop logs no error:\n{log}"
    );
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM conversions c JOIN outbox o ON o.conversion_id = c.id \
             WHERE c.order_id = 'DRAIN-1'",
            &[]
        ),
        1,
        "the acknowledged conversion and its outbox row are on disk"
    );
}
