//! Connection policy around tiny_http: the limits (`Limits`) and the supervisor that enforces
//! them (see `docs/hardening.md`). It decides when a connection is cut off; it never answers a
//! request (except the raw 431 of an oversized head on Linux) and never closes a descriptor.
//!
//! Two implementations with one interface, chosen at build time:
//! - `linux.rs` (Linux, the default there): a thread that scans the process's sockets through
//!   `/proc/self/fd` and `TCP_INFO` and shuts connections down from outside tiny_http;
//! - `portable.rs` (every other platform, and Linux with the `portable-supervision` feature, which
//!   CI builds so that this path is tested): the bounds are handed to the vendored tiny_http
//!   (`ServerOptions`: socket timeouts, minimum rate, head limit, a table of its connections),
//!   which keeps them on each connection's own thread; the supervisor reads its table.

use std::io;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

#[cfg(all(target_os = "linux", not(feature = "portable-supervision")))]
mod linux;
#[cfg(all(target_os = "linux", not(feature = "portable-supervision")))]
pub use linux::Supervisor;

#[cfg(any(not(target_os = "linux"), feature = "portable-supervision"))]
mod portable;
#[cfg(any(not(target_os = "linux"), feature = "portable-supervision"))]
pub use portable::Supervisor;

/// What the supervisor enforces.
#[derive(Debug, Clone)]
pub struct Limits {
    /// A connection that has sent nothing since its last request ended (or since it was opened)
    /// is shut down after this long; so is a request whose body or response transfer takes
    /// longer.
    pub idle_timeout: Duration,
    /// Least average rate, in bytes per second, at which a connection that has started sending a
    /// request (head and body, until the request is in our hands) must send it, measured from
    /// the scan that first saw its bytes; also the least rate of a body a handler reads.
    pub min_rate: u64,
    /// How long a request may take before [`Limits::min_rate`] applies: a head and a small body
    /// come in one or two packets, so this only spares a few round trips on a slow link.
    pub min_rate_grace: Duration,
    /// Most open connections; beyond it the longest-idle connections without a request in our
    /// hands are shut down.
    pub max_connections: usize,
    /// Most open connections from one client address (0: no bound of its own); beyond it that
    /// address's longest-idle connections without a request in our hands are shut down. Peers in
    /// [`Limits::trusted_proxies`] are exempt.
    pub max_per_address: usize,
    /// Reverse proxies: their `X-Forwarded-For` names the client of a request
    /// (`http::client_address`), and, standing for many clients, they are not bounded per address.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// Bytes a connection may send while no request of it is in our hands and tiny_http has not
    /// read a complete head (a request head plus slack); more means an oversized head. A body
    /// tiny_http reads before handing the request over does not count: tiny_http bounds it.
    pub head_budget: u64,
    /// How often the sockets are scanned.
    pub scan_every: Duration,
}

impl Limits {
    /// Whether connections from `ip` are bounded per address.
    pub fn bounded_per_address(&self, ip: std::net::IpAddr) -> bool {
        self.max_per_address > 0 && !self.trusted_proxies.iter().any(|n| n.contains(&ip))
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            idle_timeout: Duration::from_secs(10),
            min_rate: 1024,
            min_rate_grace: Duration::from_secs(2),
            max_connections: 1024,
            max_per_address: 64,
            trusted_proxies: Vec::new(),
            head_budget: 64 * 1024,
            scan_every: Duration::from_millis(200),
        }
    }
}

/// A thread that runs a task every period until stopped; both supervisors run theirs on one.
#[derive(Default)]
pub(super) struct Ticker {
    stop: Mutex<bool>,
    wake: Condvar,
}

impl Ticker {
    /// Starts a thread named `name` that runs `tick` at once and then every `every`, until
    /// [`Ticker::stop`]; `ticker` is the one this thread watches.
    pub(super) fn spawn(
        ticker: Arc<Ticker>,
        name: &str,
        every: Duration,
        mut tick: impl FnMut() + Send + 'static,
    ) -> io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut stopped = ticker.stop.lock().unwrap_or_else(|p| p.into_inner());
                while !*stopped {
                    drop(stopped);
                    tick();
                    stopped = ticker.stop.lock().unwrap_or_else(|p| p.into_inner());
                    if *stopped {
                        break;
                    }
                    stopped = ticker
                        .wake
                        .wait_timeout(stopped, every)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            })
    }

    pub(super) fn stop(&self) {
        *self.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.wake.notify_all();
    }
}
