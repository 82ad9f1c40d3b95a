//! The first two fixes convapi carries in its vendored tiny_http (vendor/tiny_http/PATCHES.md, 1–2),
//! tested on a bare `tiny_http::Server` — without convapi's connection supervisor, which worked
//! around both. The framing fixes (3–12) are pinned by `tests/framing.rs`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// Far longer than a healthy answer takes; a starved connection never gets one at all.
const PATIENCE: Duration = Duration::from_secs(10);

fn answer_all(server: Arc<tiny_http::Server>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while let Ok(rq) = server.recv() {
            let _ = rq.respond(tiny_http::Response::from_string("ok"));
        }
    })
}

#[test]
fn a_burst_of_keep_alive_connections_each_gets_a_thread_without_help() {
    // Upstream's pool counted a thread that was already notified as still waiting, so connections
    // arriving together could be queued for the same thread and wait until another connection
    // closed: here none ever closes. 32 connections at once, 4 times, all kept open.
    let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("listen"));
    let addr = server.server_addr().to_ip().expect("ip address");
    let worker = answer_all(server.clone());
    let mut held = Vec::new();
    for round in 0..4 {
        let barrier = Barrier::new(32);
        let results: Vec<(Option<String>, TcpStream)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..32)
                .map(|_| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        barrier.wait();
                        let mut c = TcpStream::connect(addr).expect("connect");
                        c.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
                        c.set_read_timeout(Some(PATIENCE)).unwrap();
                        let mut buf = [0u8; 512];
                        let n = c.read(&mut buf).unwrap_or(0);
                        let line = String::from_utf8_lossy(&buf[..n])
                            .lines()
                            .next()
                            .map(str::to_owned);
                        (line, c)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (line, c) in results {
            assert_eq!(
                line.as_deref(),
                Some("HTTP/1.1 200 OK"),
                "round {round}: a connection got no answer within {PATIENCE:?}"
            );
            held.push(c);
        }
    }
    drop(held);
    server.unblock();
    worker.join().unwrap();
}

#[test]
fn dropping_a_request_that_declares_a_huge_body_does_not_allocate_it() {
    // Upstream drained an unread body into one buffer of the declared length: 1 TB here, which
    // aborts the process (the whole integration test binary) instead of reading the few bytes that
    // really came.
    let server = tiny_http::Server::http("127.0.0.1:0").expect("listen");
    let addr = server.server_addr().to_ip().expect("ip address");
    let client = std::thread::spawn(move || {
        let mut c = TcpStream::connect(addr).expect("connect");
        c.write_all(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000000000\r\n\r\nabc")
            .unwrap();
        // The client gives up: the body ends early, at EOF.
        c.shutdown(std::net::Shutdown::Write).unwrap();
        c.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest);
        String::from_utf8_lossy(&rest).into_owned()
    });
    let rq = server
        .recv_timeout(PATIENCE)
        .expect("recv")
        .expect("a request within the patience");
    assert_eq!(rq.body_length(), Some(1_000_000_000_000));
    // Answering drops the request with its body unread: tiny_http drains what is left.
    rq.respond(tiny_http::Response::from_string("refused").with_status_code(413))
        .expect("respond");
    let answer = client.join().unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 413"),
        "client read: {answer:?}"
    );
}
