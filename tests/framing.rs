//! HTTP/1.1 message framing (RFC 9112) of the vendored tiny_http (vendor/tiny_http/PATCHES.md,
//! docs/decisions.md §8): each test but `valid_requests_keep_working` pins one defect of tiny_http
//! 0.12.0 as published, on a bare in-process `tiny_http::Server` spoken to in raw bytes, and fails
//! on it. A request whose framing cannot be trusted is answered by tiny_http itself (it never
//! reaches the application) with `Connection: close`, and the connection is closed after the
//! answer; a body that ends early or is malformed is an error for the application's read, and
//! ends the connection too.
//!
//! The last two tests run the two cases that matter most for data against the real binary: a body
//! cut short, and a duplicate `Content-Length` hiding a second request. Neither may commit.
//!
//! Every wait is bounded: reads have a timeout, loops a deadline.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::*;

/// How long a raw exchange may take before the connection counts as left open.
const PATIENCE: Duration = Duration::from_secs(5);

/// What the application saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    url: String,
    body: Result<Vec<u8>, ErrorKind>,
}

/// A bare tiny_http server whose application reads each body to its end and answers 200 with
/// what it read, or 400 naming the read error.
struct Bare {
    server: Arc<tiny_http::Server>,
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    app: Option<JoinHandle<()>>,
}

impl Bare {
    fn start() -> Bare {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("listen"));
        let addr = server.server_addr().to_ip().expect("ip address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let app = {
            let (server, seen) = (server.clone(), seen.clone());
            std::thread::spawn(move || {
                while let Ok(mut rq) = server.recv() {
                    let mut body = Vec::new();
                    let read = rq.as_reader().read_to_end(&mut body);
                    let url = rq.url().to_owned();
                    let (status, text, body) = match read {
                        Ok(_) => (200, format!("read {} bytes\n", body.len()), Ok(body)),
                        Err(e) => (400, format!("body error: {:?}\n", e.kind()), Err(e.kind())),
                    };
                    seen.lock().unwrap().push(Seen { url, body });
                    let _ =
                        rq.respond(tiny_http::Response::from_string(text).with_status_code(status));
                }
            })
        };
        Bare {
            server,
            addr,
            seen,
            app: Some(app),
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Sends `bytes` on a new connection (then half-closes it if `half_close`) and reads until the
    /// server closes it or [`PATIENCE`] passes.
    fn exchange(&self, bytes: &[u8], half_close: bool) -> Exchange {
        exchange(&self.addr.to_string(), bytes, half_close)
    }
}

impl Drop for Bare {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(app) = self.app.take() {
            let _ = app.join();
        }
    }
}

/// What came back on one connection.
#[derive(Debug)]
struct Exchange {
    raw: String,
    /// The server closed the connection (EOF or reset) within the patience.
    closed: bool,
}

impl Exchange {
    /// Status codes of the responses, in order.
    fn statuses(&self) -> Vec<u16> {
        self.raw
            .match_indices("HTTP/1.")
            .filter(|(i, _)| *i == 0 || self.raw[..*i].ends_with('\n'))
            .filter_map(|(i, _)| self.raw.get(i + 9..i + 12)?.parse().ok())
            .collect()
    }

    fn says_close(&self) -> bool {
        self.raw
            .split("\r\n")
            .any(|l| l.eq_ignore_ascii_case("connection: close"))
    }

    /// Exactly one response, with `status` and `Connection: close`, and the connection closed.
    #[track_caller]
    fn assert_refused(&self, status: u16, case: &str) {
        assert_eq!(self.statuses(), vec![status], "{case}: {:?}", self.raw);
        assert!(
            self.says_close(),
            "{case}: no Connection: close: {:?}",
            self.raw
        );
        assert!(self.closed, "{case}: connection left open: {:?}", self.raw);
    }
}

fn exchange(addr: &str, bytes: &[u8], half_close: bool) -> Exchange {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let started = Instant::now();
    // A server that refuses may close before everything is sent: not an error here.
    let _ = s.write_all(bytes);
    if half_close {
        let _ = s.shutdown(Shutdown::Write);
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                break false
            }
            Err(_) => break true,
        }
        if started.elapsed() > PATIENCE {
            break false;
        }
    };
    Exchange {
        raw: String::from_utf8_lossy(&out).into_owned(),
        closed,
    }
}

/// A request the application would serve, to be found hidden in a body.
const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n";

#[test]
fn two_content_lengths_are_refused_not_served_as_two_requests() {
    // Upstream took the first (0) and served the body as a second request.
    let srv = Bare::start();
    for (first, second) in [(0, SMUGGLED.len()), (SMUGGLED.len(), 0), (5, 5)] {
        let case = format!("Content-Length: {first} then {second}");
        let req = format!(
            "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: {first}\r\nContent-Length: {second}\r\n\r\n{SMUGGLED}"
        );
        srv.exchange(req.as_bytes(), false)
            .assert_refused(400, &case);
    }
    assert!(srv.seen().is_empty(), "reached the app: {:?}", srv.seen());
}

#[test]
fn an_invalid_content_length_is_refused_not_taken_for_no_body() {
    // Upstream read `abc`, `-1`, lists, hex and overflows as "no body" (the body became the next
    // request) and accepted `+N` as N.
    let srv = Bare::start();
    let n = SMUGGLED.len();
    for value in [
        "abc".to_owned(),
        "-1".to_owned(),
        format!("{n}, {n}"),
        format!("+{n}"),
        "0x10".to_owned(),
        "99999999999999999999".to_owned(),
        format!("{n} {n}"),
        String::new(),
    ] {
        let req =
            format!("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: {value}\r\n\r\n{SMUGGLED}");
        srv.exchange(req.as_bytes(), false)
            .assert_refused(400, &format!("Content-Length: {value:?}"));
    }
    assert!(srv.seen().is_empty(), "reached the app: {:?}", srv.seen());
}

#[test]
fn content_length_with_transfer_encoding_is_refused_and_closed() {
    // Upstream decoded the chunked body, kept the connection and served what followed.
    let srv = Bare::start();
    let req = format!(
        "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{SMUGGLED}"
    );
    srv.exchange(req.as_bytes(), false)
        .assert_refused(400, "Content-Length and Transfer-Encoding");
    // The same in an HTTP/1.0 request, where Transfer-Encoding alone is already faulty framing.
    let req = "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    srv.exchange(req.as_bytes(), false)
        .assert_refused(400, "Transfer-Encoding in HTTP/1.0");
    assert!(srv.seen().is_empty(), "reached the app: {:?}", srv.seen());
}

#[test]
fn only_chunked_is_accepted_as_a_transfer_coding() {
    // Upstream decoded any Transfer-Encoding value as chunked (`identity` then waited forever).
    let srv = Bare::start();
    for (coding, status) in [
        ("xchunked", 400),
        ("identity", 400),
        ("chunked, identity", 400),
        ("chunked;q=1", 400),
        ("chunked, chunked", 400),
        ("gzip, chunked", 501),
        ("", 400),
    ] {
        let req = format!(
            "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: {coding}\r\n\r\n0\r\n\r\n{SMUGGLED}"
        );
        srv.exchange(req.as_bytes(), false)
            .assert_refused(status, &format!("Transfer-Encoding: {coding:?}"));
    }
    assert!(srv.seen().is_empty(), "reached the app: {:?}", srv.seen());
}

#[test]
fn obs_fold_and_stray_cr_lf_in_the_head_are_refused() {
    // Upstream trimmed a folded line into a header of its own, kept a bare LF or CR inside a
    // value (a proxy ending lines at LF sees two headers), and waited forever for a CRLF when
    // lines ended with LF alone.
    let srv = Bare::start();
    for (case, head) in [
        (
            "obs-fold",
            "GET / HTTP/1.1\r\nHost: t\r\nX-A: a\r\n folded\r\n\r\n",
        ),
        (
            "obs-fold with tab",
            "GET / HTTP/1.1\r\nHost: t\r\nX-A: a\r\n\tfolded\r\n\r\n",
        ),
        (
            "bare LF in a value",
            "GET / HTTP/1.1\r\nHost: t\r\nX-A: a\nX-B: b\r\n\r\n",
        ),
        (
            "bare CR in a value",
            "GET / HTTP/1.1\r\nHost: t\r\nX-A: a\rb\r\n\r\n",
        ),
        (
            "NUL in a value",
            "GET / HTTP/1.1\r\nHost: t\r\nX-A: a\0b\r\n\r\n",
        ),
        (
            "space before the colon",
            "GET / HTTP/1.1\r\nHost: t\r\nX-A : a\r\n\r\n",
        ),
        ("LF line ends", "GET / HTTP/1.1\nHost: t\n\n"),
        (
            "extra word in the request line",
            "GET / HTTP/1.1 x\r\nHost: t\r\n\r\n",
        ),
    ] {
        srv.exchange(head.as_bytes(), false)
            .assert_refused(400, case);
    }
    assert!(srv.seen().is_empty(), "reached the app: {:?}", srv.seen());
}

#[test]
fn a_body_cut_short_is_a_read_error_not_a_complete_body() {
    // Upstream's reader for a declared length over 1 KiB returned the early end of the stream as
    // the end of the body: the application processed a truncated body.
    let srv = Bare::start();
    let mut req = b"POST /large HTTP/1.1\r\nHost: t\r\nContent-Length: 4096\r\n\r\n".to_vec();
    req.extend_from_slice(&[b'x'; 3000]);
    let ex = srv.exchange(&req, true);
    assert_eq!(ex.statuses(), vec![400], "{:?}", ex.raw);
    assert!(ex.raw.contains("UnexpectedEof"), "{:?}", ex.raw);
    assert!(ex.says_close(), "no Connection: close: {:?}", ex.raw);
    assert!(ex.closed, "left open: {:?}", ex.raw);
    let seen = srv.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].body, Err(ErrorKind::UnexpectedEof));

    // A small body is read by tiny_http before the application sees the request: upstream
    // closed without an answer; the client, still reading, now learns why.
    let req = b"POST /small HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nonly this";
    srv.exchange(req, true)
        .assert_refused(400, "small body cut short");
    assert_eq!(srv.seen().len(), 1, "reached the app: {:?}", srv.seen());
}

#[test]
fn a_chunked_body_cut_short_is_a_read_error_not_a_complete_body() {
    // Upstream's chunk decoder returned the end of the stream inside a chunk as the end of the
    // body.
    let srv = Bare::start();
    for (case, body) in [
        ("inside a chunk", "10\r\nhello"),
        ("before the CRLF after a chunk", "5\r\nhello"),
        ("without the last chunk", "5\r\nhello\r\n"),
        (
            "without the CRLF after the last chunk",
            "5\r\nhello\r\n0\r\n",
        ),
    ] {
        let req = format!(
            "POST /{} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n{body}",
            case.replace(' ', "-")
        );
        let ex = srv.exchange(req.as_bytes(), true);
        ex.assert_refused(400, case);
        assert!(ex.raw.contains("UnexpectedEof"), "{case}: {:?}", ex.raw);
    }
    let seen = srv.seen();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(
        seen.iter().all(|s| s.body == Err(ErrorKind::UnexpectedEof)),
        "{seen:?}"
    );
}

#[test]
fn a_malformed_chunked_body_ends_the_connection() {
    // Upstream accepted a signed chunk size, and after a chunk error read the next request from
    // wherever the decoder stopped.
    let srv = Bare::start();
    for (case, body) in [
        ("signed size", "+5\r\nhello\r\n0\r\n\r\n"),
        ("space before the size", " 5\r\nhello\r\n0\r\n\r\n"),
        ("chunk longer than its size", "5\r\nhelloXX\r\n0\r\n\r\n"),
        ("bare LF after the size", "5\nhello\r\n0\r\n\r\n"),
    ] {
        let req = format!(
            "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n{body}{SMUGGLED}"
        );
        let ex = srv.exchange(req.as_bytes(), false);
        ex.assert_refused(400, case);
        assert!(ex.raw.contains("InvalidData"), "{case}: {:?}", ex.raw);
    }
    let seen = srv.seen();
    assert!(seen.iter().all(|s| s.url != "/smuggled"), "{seen:?}");
}

#[test]
fn an_http_1_1_request_needs_exactly_one_valid_host() {
    // Upstream served these.
    let srv = Bare::start();
    for (case, head) in [
        ("no Host", "GET / HTTP/1.1\r\n\r\n"),
        ("two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
        (
            "two Hosts in HTTP/1.0",
            "GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n",
        ),
        ("Host with a path", "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"),
    ] {
        srv.exchange(head.as_bytes(), false)
            .assert_refused(400, case);
    }
    assert!(srv.seen().is_empty(), "reached the app: {:?}", srv.seen());
    // HTTP/1.0 may omit it.
    let ex = srv.exchange(b"GET /old HTTP/1.0\r\n\r\n", false);
    assert_eq!(ex.statuses(), vec![200], "{:?}", ex.raw);
}

/// Threads of this process named like the current one: those this test started, and the
/// threads they started in turn (a new thread inherits its creator's name on Linux), so other
/// tests running at the same time are not counted.
fn threads_named_like_me() -> usize {
    let me = std::fs::read_to_string("/proc/thread-self/comm").expect("own thread name");
    std::fs::read_dir("/proc/self/task")
        .expect("tasks")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| *name == me)
        .count()
}

/// Descriptors of this process on server-side sockets of `port` other than the listener (found
/// through /proc/net/tcp by inode), so other tests' sockets are not counted.
fn server_sockets_open(port: u16) -> usize {
    let mut inodes = std::collections::HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (cols.get(1), cols.get(3), cols.get(9))
            else {
                continue;
            };
            let local_port = local
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) && *state != "0A" && *inode != "0" {
                inodes.insert(format!("socket:[{inode}]"));
            }
        }
    }
    std::fs::read_dir("/proc/self/fd")
        .expect("fds")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| inodes.contains(&*l.to_string_lossy()))
        .count()
}

#[test]
fn h2_and_other_versions_get_505_and_leak_nothing() {
    // Upstream answered 505 through a second writer that waited for the request's own writer,
    // which it still held: the answer never came, and the thread and both descriptors of the
    // connection stayed for good.
    let srv = Bare::start();
    let port = srv.addr.port();
    // Warm up: the pool's first threads exist before the baseline is taken.
    let ex = srv.exchange(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n", true);
    assert_eq!(ex.statuses(), vec![200], "{:?}", ex.raw);
    let threads_before = threads_named_like_me();
    for i in 0..40 {
        let line = match i % 4 {
            0 => "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            1 => "GET / HTTP/2.0\r\nHost: t\r\n\r\n",
            2 => "GET / HTTP/3.0\r\nHost: t\r\n\r\n",
            _ => "GET / HTTP/0.9\r\nHost: t\r\n\r\n",
        };
        srv.exchange(line.as_bytes(), false)
            .assert_refused(505, &format!("request {i}: {line:?}"));
    }
    assert!(srv.seen().len() == 1, "reached the app: {:?}", srv.seen());
    // Threads the pool added for overlapping connections retire after 5 s idle.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (threads, sockets) = (threads_named_like_me(), server_sockets_open(port));
        if threads <= threads_before && sockets == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after 40 refused versions: {threads} threads (before: {threads_before}), \
             {sockets} server-side sockets still open"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn valid_requests_keep_working() {
    // Not a defect: keep-alive, pipelining, chunked bodies (any case, with an extension),
    // `Expect: 100-continue` and HTTP/1.0 as tiny_http served them before.
    let srv = Bare::start();
    let mut big = b"POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: 2000\r\n\r\n".to_vec();
    big.extend_from_slice(&[b'y'; 2000]);
    let mut pipelined = b"GET /a HTTP/1.1\r\nHost: t\r\n\r\n".to_vec();
    pipelined.extend_from_slice(b"POST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello");
    pipelined.extend_from_slice(
        b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: Chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\n\r\n",
    );
    pipelined.extend_from_slice(&big);
    pipelined.extend_from_slice(b"GET /d HTTP/1.1\r\nhost:\tt \r\nConnection: close\r\n\r\n");
    let ex = srv.exchange(&pipelined, false);
    assert_eq!(ex.statuses(), vec![200; 5], "{:?}", ex.raw);
    assert!(ex.closed, "Connection: close was not honoured");
    assert!(ex.raw.contains("read 5 bytes") && ex.raw.contains("read 3 bytes"));
    assert!(ex.raw.contains("read 2000 bytes"), "{:?}", ex.raw);

    // Keep-alive: a second request on the same connection after the first answer.
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    for i in 0..2 {
        s.write_all(b"GET /k HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let mut buf = [0u8; 1024];
        let n = s.read(&mut buf).unwrap();
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(text.starts_with("HTTP/1.1 200"), "request {i}: {text:?}");
    }

    // Expect: 100-continue: the client sends the body only after the interim answer.
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(
        b"POST /e HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
    )
    .unwrap();
    let mut buf = [0u8; 1024];
    let n = s.read(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 100"), "{text:?}");
    s.write_all(b"abc").unwrap();
    let n = s.read(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(
        text.starts_with("HTTP/1.1 200") && text.contains("read 3 bytes"),
        "{text:?}"
    );

    let ex = srv.exchange(b"GET /old HTTP/1.0\r\n\r\n", false);
    assert_eq!(ex.statuses(), vec![200], "{:?}", ex.raw);
    assert!(ex.closed);
}

// ---- End to end, against the real binary ----

/// A conversion body of `len` bytes: valid JSON padded with trailing spaces, so that any prefix
/// that keeps the JSON is valid too (a truncated body must be refused for being short, not for
/// being bad JSON).
fn padded_conversion(order_id: &str, len: usize) -> Vec<u8> {
    let json =
        format!(r#"{{"visitorId":"v-known","orderId":"{order_id}","value":10,"currency":"EUR"}}"#);
    let mut body = json.into_bytes();
    assert!(body.len() < len);
    body.resize(len, b' ');
    body
}

fn conversion_head(app: &TestApp, extra: &str) -> String {
    format!(
        "POST /api/sites/{}/conversions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\n{extra}\r\n",
        app.site.id, app.key.key
    )
}

#[test]
fn e2e_a_conversion_whose_body_is_cut_short_is_not_committed() {
    let app = TestApp::start();
    app.pageview("v-known", "https://shop.example/", now_ms() - HOUR);
    for (case, declared, sent) in [("large", 4096, 3000), ("small", 600, 400)] {
        let body = padded_conversion(&unique("cut"), declared);
        let mut req =
            conversion_head(&app, &format!("Content-Length: {declared}\r\n")).into_bytes();
        req.extend_from_slice(&body[..sent]);
        let ex = exchange(&app.addr(), &req, true);
        assert_eq!(ex.statuses(), vec![400], "{case}: {:?}", ex.raw);
        assert!(ex.closed, "{case}: left open: {:?}", ex.raw);
    }
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 0);
    // The same request whole is accepted: the refusals above were for the cut alone.
    let body = padded_conversion(&unique("whole"), 4096);
    let mut req =
        conversion_head(&app, "Content-Length: 4096\r\nConnection: close\r\n").into_bytes();
    req.extend_from_slice(&body);
    let ex = exchange(&app.addr(), &req, false);
    assert_eq!(ex.statuses(), vec![202], "{:?}", ex.raw);
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 1);
}

#[test]
fn e2e_a_conversion_hidden_behind_a_duplicate_content_length_is_not_committed() {
    let app = TestApp::start();
    app.pageview("v-known", "https://shop.example/", now_ms() - HOUR);
    let body = padded_conversion(&unique("smuggled"), 200);
    let mut inner = conversion_head(&app, "Content-Length: 200\r\n").into_bytes();
    inner.extend_from_slice(&body);
    let mut req = conversion_head(
        &app,
        &format!("Content-Length: 0\r\nContent-Length: {}\r\n", inner.len()),
    )
    .into_bytes();
    req.extend_from_slice(&inner);
    let ex = exchange(&app.addr(), &req, false);
    assert_eq!(ex.statuses(), vec![400], "{:?}", ex.raw);
    assert!(ex.says_close() && ex.closed, "{:?}", ex.raw);
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 0);
}
