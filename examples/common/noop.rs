//! What the two no-op servers share (`noop_server.rs`, `noop_front.rs`): the body's checks and the
//! 202 of `POST /api/sites/{siteId}/conversions` without the database, by the library's own
//! functions, and the command line.

use convapi::api::{validate, ApiError};
use convapi::http::Reply;
use serde_json::json;

/// A stand-in for the session id the database would resolve.
const SESSION_ID: &str = "00000000-0000-4000-8000-000000000000";

/// The body checked as the route checks it (`validate::json_object`, `validate::report`), and the
/// 202 the route would answer, with a fresh event id.
pub fn accepted(body: &[u8]) -> Result<Reply, ApiError> {
    std::hint::black_box(validate::report(
        &validate::json_object(body)?,
        convapi::store::now_ms(),
    )?);
    Ok(Reply::json(
        202,
        &json!({
            "success": true,
            "sessionId": SESSION_ID,
            "eventId": uuid::Uuid::now_v7().to_string(),
        }),
    ))
}

/// `[--addr HOST:PORT] [--threads N]`; exits 2 on anything else.
pub fn args(program: &str) -> (String, usize) {
    let mut addr = "127.0.0.1:0".to_owned();
    let mut threads = 8usize;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--addr", Some(v)) => addr = v,
            ("--threads", Some(v)) => threads = v.parse().expect("--threads N"),
            _ => {
                eprintln!("usage: {program} [--addr HOST:PORT] [--threads N]");
                std::process::exit(2);
            }
        }
    }
    (addr, threads)
}
