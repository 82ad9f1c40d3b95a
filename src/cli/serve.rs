//! `convapi serve`: its options and the start-up and shutdown of the server.

use std::io::Write;
use std::path::PathBuf;

use super::{check_db_dir, count, CliResult};
use crate::store;

#[derive(clap::Args)]
pub(super) struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, env = "CONVAPI_ADDR", default_value = "127.0.0.1:8080")]
    addr: String,
    /// Request threads. Each waits for its write's group commit, so there should be more of them than
    /// concurrent writers: with 8, no commit could hold more than 8 writes (see BENCHMARKS.md).
    #[arg(long, env = "CONVAPI_THREADS", default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: u16,
    /// Writes waiting for the writer before requests get 503.
    #[arg(long, env = "CONVAPI_QUEUE", default_value_t = 1024)]
    queue: usize,
    /// Most writes committed in one transaction.
    #[arg(long, env = "CONVAPI_BATCH", default_value_t = 256, value_parser = clap::value_parser!(u16).range(1..))]
    batch: u16,
    /// `group` (group commit) or `per-request` (one transaction per request; for benchmarks only).
    #[arg(long, env = "CONVAPI_WRITE_MODE", default_value = "group", value_parser = ["group", "per-request"])]
    write_mode: String,
    /// Run the background pipeline (`off` lets tests drive it by hand).
    #[arg(long, env = "CONVAPI_PIPELINE", default_value = "on", value_parser = ["on", "off"])]
    pipeline: String,
    /// Seconds a connection may stay without a request in progress (silent, half a request, idle
    /// keep-alive), or take to send a body or receive a response, before it is closed.
    #[arg(long, env = "CONVAPI_IDLE_TIMEOUT", default_value_t = 10.0, value_parser = positive_secs)]
    idle_timeout: f64,
    /// Most open client connections; beyond it the longest-idle ones are closed.
    #[arg(long, env = "CONVAPI_MAX_CONNECTIONS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// Outbox items waiting for the pipeline beyond which new conversions get 503 (0: no limit).
    #[arg(long, env = "CONVAPI_MAX_BACKLOG", default_value_t = 100_000)]
    max_backlog: u64,
    /// Milliseconds a write waits for SQLite's lock before the request gets 503.
    #[arg(long, env = "CONVAPI_BUSY_TIMEOUT_MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    busy_timeout_ms: u64,
    /// Test only: caps the database at this many pages to simulate a full disk.
    #[arg(long, env = "CONVAPI_TEST_MAX_PAGE_COUNT", hide = true)]
    test_max_page_count: Option<u64>,
}

fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!(
            "{s:?} is not a number of seconds between 0 and 86400"
        )),
    }
}

pub(super) fn serve(db: PathBuf, a: ServeArgs) -> CliResult {
    use signal_hook::consts::{SIGINT, SIGTERM};
    // Register before starting so that a signal during start-up is not lost.
    check_db_dir(&db)?;
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).map_err(|e| e.to_string())?;
    store::set_busy_timeout(std::time::Duration::from_millis(a.busy_timeout_ms));
    if let Some(pages) = a.test_max_page_count {
        store::set_max_page_count(pages);
    }
    let config = crate::http::ServeConfig {
        addr: a.addr,
        threads: a.threads as usize,
        db,
        writer: crate::writer::WriterConfig {
            queue: a.queue.max(1),
            batch: a.batch as usize,
            per_request: a.write_mode == "per-request",
            max_backlog: a.max_backlog,
            ..Default::default()
        },
        pipeline: a.pipeline == "on",
        limits: crate::http::conn::Limits {
            idle_timeout: std::time::Duration::from_secs_f64(a.idle_timeout),
            max_connections: a.max_connections as usize,
            ..Default::default()
        },
    };
    let running = crate::http::start(&config)?;
    log::info!(
        "serving {} with {}, write mode {}",
        config.db.display(),
        count(config.threads, "thread", "threads"),
        if config.writer.per_request {
            "per-request"
        } else {
            "group commit"
        }
    );
    // The one line on stdout: scripts and tests read the chosen port from it.
    println!("listening on http://{}", running.addr);
    let _ = std::io::stdout().flush();
    if let Some(sig) = signals.forever().next() {
        log::info!("signal {sig}: draining and stopping");
    }
    running.shutdown();
    log::info!("stopped");
    Ok(())
}
