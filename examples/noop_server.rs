//! The benchmark's ceiling: a tiny_http server that does the request work of
//! `POST /api/sites/{siteId}/conversions` *except the database*, and answers 202.
//!
//! ```text
//! cargo run --release --example noop_server -- [--addr 127.0.0.1:0] [--threads 8]
//! ```
//!
//! Same as convapi: a pool of `--threads` threads on one `tiny_http::Server::recv`, the path split
//! and percent-decoded into segments, the route matched, the `Authorization` header parsed and the
//! key hashed (SHA-256, as for the lookup), the site id parsed as a UUID, the body read under the
//! 64 KiB limit, the `Content-Type` checked, the JSON parsed and validated by the crate's own
//! `validate::json_object` and `conversions::parse_report`, a fresh event id minted, and a 202 with
//! the same body shape and headers (`Content-Type`, `X-Request-Id`) written back.
//! Not done: the key/site lookups, session resolution, the write, the access log and the metrics.
//!
//! It links the same vendored tiny_http as convapi (`vendor/tiny_http`), whose pool no longer
//! loses wakeups when wrk opens its 16 connections at once, so every connection is served.
//!
//! Prints `listening on http://ADDR` on stdout, like `convapi serve`, and serves until killed.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use convapi::api::ApiError;
use convapi::api::{conversions, validate};
use convapi::http::Reply;

/// A stand-in for the session id the database would resolve.
const SESSION_ID: &str = "00000000-0000-4000-8000-000000000000";

fn report(rq: &mut tiny_http::Request, site_id: &str) -> Result<Reply, ApiError> {
    let header = |rq: &tiny_http::Request, name: &str| {
        rq.headers()
            .iter()
            .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str().to_owned())
    };
    let token = header(rq, "Authorization")
        .and_then(|h| {
            let (scheme, rest) = h.trim().split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| rest.trim().to_owned())
        })
        .filter(|t| t.starts_with(convapi::keys::PREFIX))
        .ok_or(ApiError::Unauthorized)?;
    std::hint::black_box(convapi::keys::hash(&token));
    uuid::Uuid::parse_str(site_id).map_err(|_| ApiError::SiteNotFound(None))?;

    let limit = conversions::BODY_LIMIT;
    if rq.body_length().is_some_and(|n| n > limit) {
        return Err(ApiError::PayloadTooLarge(limit));
    }
    let mut body = Vec::with_capacity(rq.body_length().unwrap_or(0).min(limit));
    rq.as_reader()
        .take(limit as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|e| ApiError::InvalidJson(format!("cannot read body: {e}")))?;
    if body.len() > limit {
        return Err(ApiError::PayloadTooLarge(limit));
    }
    if !validate::media_type_is(header(rq, "Content-Type").as_deref(), &["application/json"]) {
        return Err(ApiError::UnsupportedMediaType("application/json"));
    }
    let obj = validate::json_object(&body)?;
    std::hint::black_box(conversions::parse_submission(
        &obj,
        convapi::store::now_ms(),
    )?);
    Ok(Reply::json(
        202,
        &serde_json::json!({
            "success": true,
            "sessionId": SESSION_ID,
            "eventId": uuid::Uuid::new_v4().to_string(),
        }),
    ))
}

fn handle(mut rq: tiny_http::Request, request_id: u64) {
    let method = rq.method().as_str().to_owned();
    let url = rq.url().to_owned();
    let path = url.split_once('?').map_or(url.as_str(), |(p, _)| p);
    let segments = convapi::http::path_segments(path);
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let reply = match (method.as_str(), segs.as_slice()) {
        ("POST", ["api", "sites", site, "conversions"]) => report(&mut rq, site),
        ("GET", ["healthz"]) => Ok(Reply::json(200, &serde_json::json!({"status": "ok"}))),
        _ => Err(ApiError::NotFound),
    }
    .unwrap_or_else(|e| e.to_reply());
    let response = reply.into_response(&request_id.to_string());
    let _ = rq.respond(response);
}

fn main() {
    let mut addr = "127.0.0.1:0".to_owned();
    let mut threads = 8usize;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--addr", Some(v)) => addr = v,
            ("--threads", Some(v)) => threads = v.parse().expect("--threads N"),
            _ => {
                eprintln!("usage: noop_server [--addr HOST:PORT] [--threads N]");
                std::process::exit(2);
            }
        }
    }
    let server = Arc::new(tiny_http::Server::http(&addr).unwrap_or_else(|e| {
        eprintln!("noop_server: cannot listen on {addr}: {e}");
        std::process::exit(1);
    }));
    println!(
        "listening on http://{}",
        server
            .server_addr()
            .to_ip()
            .expect("a TCP listener has an IP address")
    );
    let next_id = Arc::new(AtomicU64::new(1));
    let workers: Vec<_> = (0..threads.max(1))
        .map(|_| {
            let (server, next_id) = (server.clone(), next_id.clone());
            std::thread::spawn(move || loop {
                match server.recv() {
                    Ok(rq) => handle(rq, next_id.fetch_add(1, Ordering::Relaxed)),
                    Err(e) => {
                        eprintln!("noop_server: {e}");
                        return;
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
}
