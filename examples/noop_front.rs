//! The no-op server's twin behind convapi's own front: the HTTP front serving a service that does
//! the request work of `POST /api/sites/{siteId}/conversions` *except the database*, and answers
//! 202. Against `noop_server.rs` (bare tiny_http) it measures what the front costs; against
//! `convapi serve`, what the database and the application cost.
//!
//! ```text
//! cargo run --release --example noop_front -- [--addr 127.0.0.1:0] [--threads 8]
//!     [--writer hop|row --db PATH]
//! ```
//!
//! Same as convapi, through the library's public API: the HTTP front (`convapi::http::serve`: the
//! vendored tiny_http, the connection supervisor, the lanes, `--threads` request threads, the
//! request id, the metrics of every request) with a [`Service`] of its own; the route matched on
//! the path's segments, the site id percent-decoded and parsed as a UUID, the key taken from
//! `Authorization` and hashed (`api::bearer_key_hash`, SHA-256, as for the lookup), the body taken
//! under the route's 64 KiB limit, the `Content-Type` checked, the JSON parsed by the crate's own
//! `validate::json_object` and each field checked by the same `validate` rules, in the same order,
//! as the conversions route; a fresh event id minted, and a 202 with the same body shape written
//! back. Not done: the key/site lookups, session resolution, the write, and the access log (no
//! logger is installed).
//!
//! With `--writer MODE --db PATH` it is also the *design's floor*: after the checks each report
//! goes through convapi's own single writer (`writer::Writer`, group commit, each job in a
//! savepoint, on a database at PATH opened as `serve` opens it: WAL, `synchronous=FULL`) and the
//! 202 is answered only once the writer has answered the job, as the conversions route does.
//! `--writer hop`: the job changes nothing (a commit with no change writes and syncs nothing), so
//! it measures the hand-over to the writer and back alone; `--writer row`: the job updates one row
//! of a table of its own (`noop_floor`), so every batch writes one WAL frame and syncs it. What
//! convapi costs beyond `--writer row` is its own SQL: the lookups, the conversion and outbox
//! rows, the rollup, and the pipeline (`scripts/bench/cpu.sh` runs it as `floor`).
//!
//! Prints `listening on http://ADDR` on stdout, like `convapi serve`, and serves until killed.

use std::sync::Arc;

use serde_json::json;

#[path = "common/noop.rs"]
mod noop;

use convapi::api::conversions::BODY_LIMIT;
use convapi::api::{bearer_key_hash, validate, ApiError};
use convapi::http::{self, Ctx, Handled, Lane, Refusal, Reply, Service};

fn report(ctx: &mut Ctx, site: &str) -> Result<Reply, ApiError> {
    let site = http::decode_segment(site)
        .map_err(|_| ApiError::validation("siteId", "siteId is not UTF-8 once percent-decoded"))?;
    std::hint::black_box(bearer_key_hash(ctx)?);
    uuid::Uuid::parse_str(&site).map_err(|_| ApiError::SiteNotFound(None))?;
    let body = ctx.body(BODY_LIMIT)?;
    if !validate::media_type_is(ctx.header("Content-Type"), &["application/json"]) {
        return Err(ApiError::UnsupportedMediaType("application/json"));
    }
    let reply = noop::accepted(&body)?;
    if let Some(floor) = WRITER.get() {
        floor.commit()?;
    }
    Ok(reply)
}

/// What each report's writer job does (`--writer`).
#[derive(Clone, Copy, PartialEq)]
enum Job {
    /// Nothing: the hand-over to the writer and back.
    Hop,
    /// One row updated: a durable commit per batch.
    Row,
}

struct Floor {
    writer: convapi::writer::Writer,
    job: Job,
}

impl Floor {
    /// Opens PATH as `serve` does (migrated, WAL, `synchronous=FULL`), adds the floor's one-row
    /// table, and starts convapi's writer on it.
    fn start(job: Job, path: &std::path::Path) -> Result<Floor, String> {
        let settings = convapi::store::Settings::default();
        let conn = convapi::store::open_with(path, &settings).map_err(|e| e.to_string())?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS noop_floor (n INTEGER NOT NULL);
             DELETE FROM noop_floor; INSERT INTO noop_floor VALUES (0);",
        )
        .map_err(|e| e.to_string())?;
        drop(conn);
        let (writer, thread) = convapi::writer::Writer::start(
            &convapi::store::engine::Location::of(path),
            &settings,
            Default::default(),
        )
        .map_err(|e| e.to_string())?;
        // The writer runs as long as the process: it is never joined.
        drop(thread);
        Ok(Floor { writer, job })
    }

    /// One job through the writer, answered once committed.
    fn commit(&self) -> Result<(), ApiError> {
        let job = self.job;
        self.writer
            .submit(move |c| {
                if job == Job::Row {
                    c.execute("UPDATE noop_floor SET n = n + 1", &[])?;
                }
                Ok(())
            })
            .map_err(|e| ApiError::QueueUnavailable(e.to_string()))
    }
}

static WRITER: std::sync::OnceLock<Floor> = std::sync::OnceLock::new();

struct Noop;

impl Service for Noop {
    fn lane(&self, method: &str, path: &str) -> Lane {
        convapi::api::routes::lane(method, path)
    }

    fn handle(&self, ctx: &mut Ctx) -> Handled {
        let segments = ctx.segments.clone();
        let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
        let method = ctx.method.clone();
        let (route, result) = match (method.as_str(), segs.as_slice()) {
            ("POST", ["api", "sites", site, "conversions"]) => {
                ("conversions_report", report(ctx, site))
            }
            ("GET", ["healthz"]) => ("healthz", Ok(Reply::json(200, &json!({"status": "ok"})))),
            _ => ("unknown", Err(ApiError::NotFound)),
        };
        match result {
            Ok(reply) => Handled {
                reply,
                route,
                code: None,
            },
            Err(e) => Handled {
                reply: e.to_reply(),
                route,
                code: Some(e.code()),
            },
        }
    }

    fn refusal(&self, why: Refusal) -> Reply {
        ApiError::from(why).to_reply()
    }

    fn refused(&self, why: Refusal) -> Handled {
        let e = ApiError::from(why);
        Handled {
            reply: e.to_reply(),
            route: "unknown",
            code: Some(e.code()),
        }
    }
}

fn main() {
    let args = noop::args("noop_front", true);
    if let Some((mode, db)) = &args.writer {
        let job = match mode.as_str() {
            "hop" => Job::Hop,
            "row" => Job::Row,
            _ => {
                eprintln!("noop_front: --writer is hop or row, not {mode}");
                std::process::exit(2);
            }
        };
        let floor = Floor::start(job, db).unwrap_or_else(|e| {
            eprintln!(
                "noop_front: cannot start the writer on {}: {e}",
                db.display()
            );
            std::process::exit(1);
        });
        let _ = WRITER.set(floor);
    }
    let config = http::Config {
        addr: args.addr,
        threads: args.threads,
        limits: http::Limits::default(),
    };
    let server = http::serve(
        &config,
        Arc::new(Noop),
        convapi::metrics::Metrics::default(),
    )
    .unwrap_or_else(|e| {
        eprintln!("noop_front: {e}");
        std::process::exit(1);
    });
    println!("listening on http://{}", server.addr);
    loop {
        std::thread::park();
    }
}
