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

/// The command line of a no-op server.
pub struct Args {
    pub addr: String,
    pub threads: usize,
    /// `--writer MODE --db PATH` (`noop_front.rs` only).
    pub writer: Option<(String, std::path::PathBuf)>,
}

/// `[--addr HOST:PORT] [--threads N]`, and `[--writer MODE --db PATH]` when `floor` is true; exits
/// 2 on anything else.
pub fn args(program: &str, floor: bool) -> Args {
    let usage = || -> ! {
        let extra = if floor {
            " [--writer hop|row --db PATH]"
        } else {
            ""
        };
        eprintln!("usage: {program} [--addr HOST:PORT] [--threads N]{extra}");
        std::process::exit(2);
    };
    let mut a = Args {
        addr: "127.0.0.1:0".to_owned(),
        threads: 8,
        writer: None,
    };
    let (mut writer, mut db) = (None, None);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--addr", Some(v)) => a.addr = v,
            ("--threads", Some(v)) => a.threads = v.parse().unwrap_or_else(|_| usage()),
            ("--writer", Some(v)) if floor => writer = Some(v),
            ("--db", Some(v)) if floor => db = Some(std::path::PathBuf::from(v)),
            _ => usage(),
        }
    }
    a.writer = match (writer, db) {
        (Some(w), Some(d)) => Some((w, d)),
        (None, None) => None,
        _ => usage(),
    };
    a
}
