//! Connection supervision where the Linux socket scan is not available (macOS, the BSDs), or
//! not wanted (the `portable-supervision` feature, which CI builds on Linux to test this path).
//!
//! The bounds are kept by the vendored tiny_http on each connection's own thread
//! (`vendor/tiny_http/PATCHES.md`, patches 15–17), configured here through its `ServerOptions`:
//! read and write timeouts of every accepted socket at the idle timeout, the minimum rate of a
//! request head and a pre-read body, a limit on the head, and a table of its connections with a
//! handle on each, which sheds the longest-waiting connection beyond the connection limit and lets
//! the request path shut a connection down by peer. This module only reads that table (the
//! open-connections gauge) and counts what tiny_http cut off. It makes no system call of its own.
//!
//! What differs from the Linux supervisor is listed in `docs/hardening.md` ("Other platforms").

use std::io;
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::{Limits, Ticker};
use crate::http::registry::Registry;
use crate::http::Reply;
use crate::metrics::{Metrics, ShutReason};

/// Hands the bounds to tiny_http and reads its table of connections.
pub struct Supervisor {
    limits: Limits,
    connections: Arc<tiny_http::Connections>,
    metrics: Metrics,
    ticker: Arc<Ticker>,
}

impl Supervisor {
    /// Same arguments as the Linux supervisor. The local address and the registry are not needed
    /// (tiny_http knows which connections wait for a request); an oversized head is refused by
    /// tiny_http with its own plain-text 431, so `_head_refusal` is unused.
    pub fn new(
        _local: SocketAddr,
        limits: Limits,
        _registry: Arc<Registry>,
        metrics: Metrics,
        _head_refusal: &Reply,
    ) -> io::Result<Supervisor> {
        Ok(Supervisor {
            limits,
            connections: Arc::new(tiny_http::Connections::default()),
            metrics,
            ticker: Arc::default(),
        })
    }

    /// The limits as tiny_http's own bounds on every connection it accepts.
    pub fn configure(&self, options: &mut tiny_http::ServerOptions) {
        options.socket_timeout = Some(self.limits.idle_timeout);
        options.min_rate = Some(tiny_http::MinRate {
            bytes_per_sec: self.limits.min_rate,
            grace: self.limits.min_rate_grace,
        });
        options.max_head_bytes =
            Some(usize::try_from(self.limits.head_budget).unwrap_or(usize::MAX));
        options.connections = Some(self.connections.clone());
        options.max_connections = Some(self.limits.max_connections);
        if self.limits.max_per_address > 0 {
            options.max_per_address = Some(self.limits.max_per_address);
            let limits = self.limits.clone();
            options.shared_address = Some(Arc::new(move |ip| !limits.bounded_per_address(ip)));
        }
        let metrics = self.metrics.clone();
        options.on_cut = Some(Arc::new(move |cut| {
            metrics.inc_connections_shut(match cut {
                tiny_http::Cut::Idle => ShutReason::Idle,
                tiny_http::Cut::Slow => ShutReason::Slow,
                tiny_http::Cut::HeadTooLarge => ShutReason::Head,
                tiny_http::Cut::OverLimit => ShutReason::OverLimit,
                tiny_http::Cut::AddressLimit => ShutReason::AddressLimit,
            })
        }));
    }

    /// Shuts down the connection from `peer` (`how`); false when there is none.
    pub fn shutdown_peer(&self, peer: SocketAddr, how: Shutdown) -> bool {
        self.connections.shutdown(peer, how)
    }

    /// Starts the thread that keeps the open-connections gauge; it ends after [`Supervisor::stop`].
    pub fn spawn(self: &Arc<Self>) -> io::Result<JoinHandle<()>> {
        let me = self.clone();
        Ticker::spawn(
            self.ticker.clone(),
            "conn-supervisor",
            self.limits.scan_every,
            move || me.metrics.set_open_connections(me.connections.len() as u64),
        )
    }

    pub fn stop(&self) {
        self.ticker.stop();
    }
}
