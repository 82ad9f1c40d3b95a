//! The benchmark's ceiling: a bare tiny_http server that does the request work of
//! `POST /api/sites/{siteId}/conversions` *except the database*, and answers 202.
//!
//! ```text
//! cargo run --release --example noop_server -- [--addr 127.0.0.1:0] [--threads 8]
//! ```
//!
//! A pool of `--threads` threads on one `tiny_http::Server::recv` (the vendored tiny_http, whose
//! pool no longer loses wakeups when wrk opens its 16 connections at once), with no front of
//! convapi's around it: no lanes, no hand-over of the answer to the connection's thread, no
//! supervisor, no access log, no metrics. What convapi's front and application add on top of this
//! is what the CPU benchmark measures (`scripts/bench/cpu.sh`). On each request, as convapi does:
//! the path split into segments and the route matched, the site id percent-decoded and parsed as a
//! UUID, the key taken from `Authorization` and hashed (SHA-256, as for the lookup), the body read
//! under the route's 64 KiB limit, the `Content-Type` checked, the JSON parsed by the crate's own
//! `validate::json_object` and each field checked by the same `validate` rules, in the same order,
//! as the conversions route; a fresh event id minted, and a 202 with the same body shape and
//! headers (`Content-Type`, `X-Request-Id`) written back. Everything is reached through the
//! library's public API; nothing in it is public for this program alone.
//!
//! Prints `listening on http://ADDR` on stdout, like `convapi serve`, and serves until killed.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::json;

#[path = "common/noop.rs"]
mod noop;

use convapi::api::conversions::BODY_LIMIT;
use convapi::api::{validate, ApiError};
use convapi::http::Reply;

fn header(rq: &tiny_http::Request, name: &str) -> Option<String> {
    rq.headers()
        .iter()
        .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str().to_owned())
}

fn report(rq: &mut tiny_http::Request, site: &str) -> Result<Reply, ApiError> {
    let site = convapi::http::decode_segment(site)
        .map_err(|_| ApiError::validation("siteId", "siteId is not UTF-8 once percent-decoded"))?;
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
    uuid::Uuid::parse_str(&site).map_err(|_| ApiError::SiteNotFound(None))?;
    if rq.body_length().is_some_and(|n| n > BODY_LIMIT) {
        return Err(ApiError::PayloadTooLarge(BODY_LIMIT));
    }
    let mut body = Vec::with_capacity(rq.body_length().unwrap_or(0).min(BODY_LIMIT));
    rq.as_reader()
        .take(BODY_LIMIT as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|e| ApiError::InvalidJson(format!("cannot read body: {e}")))?;
    if body.len() > BODY_LIMIT {
        return Err(ApiError::PayloadTooLarge(BODY_LIMIT));
    }
    if !validate::media_type_is(header(rq, "Content-Type").as_deref(), &["application/json"]) {
        return Err(ApiError::UnsupportedMediaType("application/json"));
    }
    noop::accepted(&body)
}

fn handle(mut rq: tiny_http::Request, request_id: u64) {
    let method = rq.method().as_str().to_owned();
    let url = rq.url().to_owned();
    let path = url.split_once('?').map_or(url.as_str(), |(p, _)| p);
    let segs: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
    let reply = match (method.as_str(), segs.as_slice()) {
        ("POST", ["api", "sites", site, "conversions"]) => report(&mut rq, site),
        ("GET", ["healthz"]) => Ok(Reply::json(200, &json!({"status": "ok"}))),
        _ => Err(ApiError::NotFound),
    }
    .unwrap_or_else(|e| e.to_reply());
    let mut response = tiny_http::Response::from_data(reply.body).with_status_code(reply.status);
    let id = request_id.to_string();
    for (name, value) in reply
        .headers
        .iter()
        .map(|(n, v)| (*n, v.as_str()))
        .chain([("X-Request-Id", id.as_str())])
    {
        if let Ok(h) = tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            response.add_header(h);
        }
    }
    let _ = rq.respond(response);
}

fn main() {
    let noop::Args { addr, threads, .. } = noop::args("noop_server", false);
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
