//! `convapi serve`: its options and the start-up and shutdown of the server.

use std::io::Write;
use std::path::PathBuf;

use super::{check_db_dir, count, CliResult};
use crate::invalid::Invalid;
use crate::store;
use crate::store::engine::Location;

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
    /// Most open connections from one client address (0: no bound of its own); beyond it that
    /// address's longest-idle ones are closed. `--trusted-proxies` are exempt.
    #[arg(
        long,
        env = "CONVAPI_MAX_CONNECTIONS_PER_ADDRESS",
        default_value_t = 64
    )]
    max_connections_per_address: u32,
    /// Outbox items of API conversions waiting for the pipeline beyond which new API conversions
    /// get 503 (0: no limit). Items waiting for exchange rates do not count.
    #[arg(long, env = "CONVAPI_MAX_BACKLOG", default_value_t = 100_000)]
    max_backlog: u64,
    /// Outbox items of pixel purchases waiting for the pipeline beyond which pixel batches with a
    /// purchase get 503 (0: no limit). Items waiting for exchange rates do not count.
    #[arg(long, env = "CONVAPI_MAX_PIXEL_BACKLOG", default_value_t = 10_000)]
    max_pixel_backlog: u64,
    /// Milliseconds a request waits for a lock (SQLite's write lock; on PostgreSQL any, as
    /// lock_timeout) before it gets 503.
    #[arg(long, env = "CONVAPI_BUSY_TIMEOUT_MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    busy_timeout_ms: u64,
    /// Pixel events per second one client address may send (bursts up to 10 times this); 0: no limit.
    #[arg(long, env = "CONVAPI_PIXEL_RATE", default_value_t = 20.0, value_parser = non_negative)]
    pixel_rate: f64,
    /// Pixel events per second one site's tracker may receive from all addresses together (bursts
    /// up to 10 times this); 0: no limit.
    #[arg(long, env = "CONVAPI_PIXEL_SITE_RATE", default_value_t = 500.0, value_parser = non_negative)]
    pixel_site_rate: f64,
    /// Hours a pixel event's `ts` may lie before the time it arrives; older ones are set to that bound.
    #[arg(long, env = "CONVAPI_PIXEL_MAX_AGE_HOURS", default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..=876_000))]
    pixel_max_age_hours: u32,
    /// Reverse proxies (addresses or CIDR ranges, comma-separated) whose X-Forwarded-For header
    /// names the client for the pixel's rate limits; other peers' headers are ignored.
    #[arg(long, env = "CONVAPI_TRUSTED_PROXIES", value_delimiter = ',', value_parser = proxy_net)]
    trusted_proxies: Vec<ipnet::IpNet>,
    /// Seconds between two looks of the pruner for pixel data past each site's --retain-days.
    #[arg(long, env = "CONVAPI_PRUNE_EVERY", default_value_t = 60.0, value_parser = positive_secs)]
    prune_every: f64,
    /// A token `GET /metrics` requires as `Authorization: Bearer TOKEN`; unset: /metrics is open.
    #[arg(long, env = "CONVAPI_METRICS_TOKEN", hide_env_values = true)]
    metrics_token: Option<String>,
    /// The dashboard's cookies get `Secure` (browsers send them over HTTPS only) and its pixel
    /// snippet says `https://`: set it when clients reach the server through a TLS proxy.
    #[arg(long, env = "CONVAPI_SECURE_COOKIES", action = clap::ArgAction::SetTrue, value_parser = clap::builder::BoolishValueParser::new())]
    secure_cookies: bool,
    /// The origin people and browsers reach this server at, e.g. `https://stats.shop.example` (a
    /// reverse proxy's): used in the first-run link, the pixel snippet and every absolute URL
    /// convapi prints or renders. Unset: the listening address (loopback for 0.0.0.0), and the
    /// dashboard's snippet takes the host the browser used.
    #[arg(long, env = "CONVAPI_PUBLIC_URL", value_parser = public_url)]
    public_url: Option<String>,
    /// `daily`: fetch the ECB's reference rates once a day after their publication (about 16:00
    /// CET), and at start when the newest rate is older than the last working day; failures are
    /// retried with backoff and shown in /metrics, the log and each site's overview. `off`: rates
    /// come only from `convapi rates import` / `rates fetch`.
    #[arg(long, env = "CONVAPI_RATES_FETCH", default_value = "off", value_parser = ["off", "daily"])]
    rates_fetch: String,
    /// Threads that send processed conversions to the sites' destinations (Meta, GA4, Google Ads):
    /// at most this many requests to ad platforms at a time. 0: nothing is sent; deliveries wait.
    #[arg(long, env = "CONVAPI_FORWARD_THREADS", default_value_t = 2, value_parser = clap::value_parser!(u16).range(0..=64))]
    forward_threads: u16,
    /// Seconds one request to an ad platform may take, connection included.
    #[arg(long, env = "CONVAPI_FORWARD_TIMEOUT", default_value_t = 15.0, value_parser = positive_secs)]
    forward_timeout: f64,
    /// Non-public addresses the sender and the dashboard's test events may connect to besides the
    /// public ones (comma-separated): a gateway on the private network, as an address and port
    /// (`10.0.0.5:8443`), an address (any port) or a network (`10.0.0.0/8`). Unset: loopback, the
    /// private networks, link-local (the cloud metadata address) and every other non-public
    /// address are refused, for every destination, whoever set its endpoint.
    #[arg(long, env = "CONVAPI_FORWARD_PRIVATE_ENDPOINTS", value_delimiter = ',')]
    forward_private_endpoints: Vec<crate::forward::platform::PrivateEndpoint>,
    /// Seconds after an order kept with no session was received that its identifiers are
    /// resolved once more (the pixel's batch may arrive after the order); then it stays
    /// unattributed for good.
    #[arg(long, env = "CONVAPI_UNATTRIBUTED_RETRY", default_value_t = crate::pipeline::UNATTRIBUTED_RETRY.as_secs_f64(), value_parser = positive_secs)]
    unattributed_retry: f64,
    /// Where `--rates-fetch daily` downloads the daily file from.
    #[arg(long, env = "CONVAPI_RATES_URL", default_value = crate::ecb::DAILY_URL)]
    rates_url: String,
}

/// `http(s)://host[:port]`, with an optional trailing slash (dropped) and nothing after it.
pub(super) fn public_url(s: &str) -> Result<String, Invalid> {
    let t = s.trim().trim_end_matches('/');
    let rest = t
        .strip_prefix("https://")
        .or_else(|| t.strip_prefix("http://"))
        .ok_or_else(|| {
            Invalid(format!(
                "{s:?} is not an http:// or https:// origin such as https://stats.shop.example"
            ))
        })?;
    let ok = !rest.is_empty()
        && rest.len() <= 255
        && rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b));
    if ok {
        Ok(t.to_owned())
    } else {
        Err(format!(
            "{s:?} is not an origin such as https://stats.shop.example (a scheme, a host and an optional port; no path)"
        ).into())
    }
}

fn non_negative(s: &str) -> Result<f64, Invalid> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a non-negative number").into()),
    }
}

/// An address (a network of one) or a CIDR range.
fn proxy_net(s: &str) -> Result<ipnet::IpNet, Invalid> {
    let s = s.trim();
    s.parse::<ipnet::IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| Invalid(format!("{s:?} is not an IP address or CIDR range")))
}

/// A pixel rate of `per_second` events, with bursts of ten seconds' worth.
fn pixel_rate(per_second: f64) -> crate::ratelimit::Rate {
    crate::ratelimit::Rate {
        per_second,
        burst: per_second * 10.0,
        max_keys: 100_000,
    }
}

fn positive_secs(s: &str) -> Result<f64, Invalid> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds between 0 and 86400").into()),
    }
}

/// Whether the address can be listened on, tried before anything else so that a server that
/// cannot start creates nothing (no lock file, no database); the error names `--addr`.
fn check_addr(addr: &str) -> CliResult {
    std::net::TcpListener::bind(addr)
        .map(drop)
        .map_err(|e| cannot_listen(addr, &e).into())
}

/// An error of listening on `addr`, with what to do about it: another address with `--addr`.
fn cannot_listen(addr: &str, e: &std::io::Error) -> String {
    let taken = e.kind() == std::io::ErrorKind::AddrInUse;
    format!(
        "cannot listen on {addr}: {e}{}; choose another with --addr HOST:PORT (env CONVAPI_ADDR; \
         port 0 picks a free one)",
        if taken {
            format!(" (another server, maybe another convapi serve, listens on {addr})")
        } else {
            String::new()
        }
    )
}

pub(super) fn serve(db: Location, a: ServeArgs) -> CliResult {
    use signal_hook::consts::{SIGINT, SIGTERM};
    // Register before starting so that a signal during start-up is not lost.
    check_db_dir(&db)?;
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).map_err(|e| e.to_string())?;
    check_addr(&a.addr)?;
    // A setting of the whole process, so made by its owner, not by `server::start`.
    crate::malloc::unmap_large_allocations();
    let config = config(db, a);
    let addr = config.http.addr.clone();
    let running = crate::server::start(&config).map_err(|e| match e {
        crate::server::StartError::Http(crate::http::StartError::Listen { error, .. }) => {
            super::CliError::Failed(cannot_listen(&addr, &error))
        }
        crate::server::StartError::Store(e) => super::CliError::Store(e),
        e => super::CliError::Failed(e.to_string()),
    })?;
    log::info!(
        "serving {} with {}, group commit of up to {}",
        config.db.display(),
        count(config.http.threads, "thread", "threads"),
        count(config.writer.batch, "write", "writes"),
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

/// The configuration `convapi --db DB serve ARGS...` runs with, parsed by the command's own
/// options and defaults, without starting anything and without reading the environment. For
/// programs that run the server through the library (`server::start`): the tests start servers in
/// their own process with it, and set there what no option of the binary sets (such as
/// `store.max_page_count`).
pub fn serve_config<I, T>(db: PathBuf, args: I) -> Result<crate::server::ServeConfig, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString>,
{
    use clap::{Args, FromArgMatches};
    let command =
        ServeArgs::augment_args(clap::Command::new("serve")).mut_args(|arg| arg.env(None::<&str>));
    let args = std::iter::once("serve".into()).chain(args.into_iter().map(Into::into));
    let matches = command.try_get_matches_from(args)?;
    let a = ServeArgs::from_arg_matches(&matches)?;
    Ok(config(Location::of(&db), a))
}

fn config(db: Location, a: ServeArgs) -> crate::server::ServeConfig {
    crate::server::ServeConfig {
        http: crate::http::Config {
            addr: a.addr,
            threads: a.threads as usize,
            limits: crate::http::Limits {
                idle_timeout: std::time::Duration::from_secs_f64(a.idle_timeout),
                max_connections: a.max_connections as usize,
                max_per_address: a.max_connections_per_address as usize,
                trusted_proxies: a.trusted_proxies,
                ..Default::default()
            },
        },
        db,
        store: store::Settings {
            busy_timeout: std::time::Duration::from_millis(a.busy_timeout_ms),
            ..Default::default()
        },
        writer: crate::writer::WriterConfig {
            queue: a.queue.max(1),
            batch: a.batch as usize,
            max_backlog: a.max_backlog,
            max_pixel_backlog: a.max_pixel_backlog,
            ..Default::default()
        },
        pipeline: a.pipeline == "on",
        unattributed_retry: std::time::Duration::from_secs_f64(a.unattributed_retry),
        pixel: crate::api::collect::PixelPolicy {
            per_address: pixel_rate(a.pixel_rate),
            per_tracker: pixel_rate(a.pixel_site_rate),
            max_event_age: std::time::Duration::from_secs(u64::from(a.pixel_max_age_hours) * 3600),
        },
        metrics_token: a.metrics_token.filter(|t| !t.is_empty()),
        prune_every: std::time::Duration::from_secs_f64(a.prune_every),
        secure_cookies: a.secure_cookies,
        public_url: a.public_url,
        rates_fetch: (a.rates_fetch == "daily").then_some(a.rates_url),
        forward: crate::forward::sender::Options {
            threads: a.forward_threads as usize,
            timeout: std::time::Duration::from_secs_f64(a.forward_timeout),
            reach: crate::forward::platform::Reach::public_and(a.forward_private_endpoints),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::sync::Mutex;

    use std::net::SocketAddr;

    use super::*;

    /// The error lines logged in this process (the library's unit tests), for the assertion on the
    /// panic's log line; installed by the first test that asks.
    struct Captured(Mutex<Vec<String>>);

    impl log::Log for Captured {
        fn enabled(&self, meta: &log::Metadata) -> bool {
            meta.level() <= log::Level::Error
        }
        fn log(&self, record: &log::Record) {
            if self.enabled(record.metadata()) {
                let mut lines = self.0.lock().unwrap_or_else(|p| p.into_inner());
                lines.push(record.args().to_string());
            }
        }
        fn flush(&self) {}
    }

    static LOG: Captured = Captured(Mutex::new(Vec::new()));

    fn error_lines() -> Vec<String> {
        if log::set_logger(&LOG).is_ok() {
            log::set_max_level(log::LevelFilter::Error);
        }
        LOG.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// One request on a connection of its own; the whole answer.
    fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer
    }

    /// The server loop with the real service: a panicking handler (the route `/__test/panic`,
    /// which only this build has) is a 500 with a generic body and a log line, never a dead
    /// worker. One request thread: if a panic killed it, nothing after the first would be answered.
    #[test]
    fn a_panicking_handler_is_a_500_and_the_workers_live_on() {
        error_lines();
        let dir = tempfile::tempdir().unwrap();
        let args = [
            "--addr",
            "127.0.0.1:0",
            "--threads",
            "1",
            "--pipeline",
            "off",
        ];
        let config = serve_config(dir.path().join("t.db"), args).unwrap();
        let running = crate::server::start(&config).unwrap();
        for _ in 0..3 {
            let answer = get(running.addr, "/__test/panic");
            assert!(answer.starts_with("HTTP/1.1 500 "), "{answer}");
            let body = answer.split_once("\r\n\r\n").unwrap().1;
            let v: serde_json::Value = serde_json::from_str(body).unwrap();
            assert_eq!(v["code"], "INTERNAL", "{v}");
            assert_eq!(v["error"], "internal error", "5xx bodies are generic: {v}");
            assert!(
                !answer.contains("on purpose"),
                "the panic message stays in the log"
            );
            let health = get(running.addr, "/healthz");
            assert!(health.starts_with("HTTP/1.1 200 "), "{health}");
        }
        running.shutdown();
        let lines = error_lines();
        assert!(
            lines
                .iter()
                .any(|l| l.contains("handler panicked: a handler panicked on purpose")),
            "a log line names the panic: {lines:?}"
        );
    }
}
