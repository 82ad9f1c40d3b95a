//! Connection supervision from outside tiny_http, on Linux (see `docs/hardening.md`).
//!
//! tiny_http 0.12 reads each connection in a thread of its own, with no timeout, no limit on the
//! number of connections and no handle on the socket. This module closes those gaps from outside
//! tiny_http: it finds the server's accepted sockets through `/proc/self/fd`, knows from the
//! [`Registry`] which of them have a request in our hands (keyed by the peer address, which is
//! unique per live connection) and which are sending a body tiny_http reads before handing the
//! request over, and `shutdown(2)`s the others when they idle too long, send a request slower than
//! the minimum rate, send too many bytes without completing a request head, or exceed the
//! connection limit. It never closes a
//! descriptor (tiny_http owns them): a shut-down socket makes tiny_http's blocked read return EOF,
//! and its thread and descriptors go away on their own.
//!
//! It never duplicates or closes a descriptor (see `sys.rs` for why: SQLite's POSIX locks; an
//! earlier version that inspected descriptors through `dup3` let another process checkpoint and
//! delete the WAL under the server). Descriptors are inspected in place, which needs no free
//! descriptor, so the supervisor keeps working when the process has run out of them — exactly when
//! it must free some. The directory handle on `/proc/self/fd` is opened once and rewound.
//!
//! The price of working in place: between finding the socket of a peer and shutting it down,
//! tiny_http could close that descriptor and the number could be reused by a newly accepted
//! socket, which would then be shut down instead. The two calls follow each other directly, so the
//! window is a few microseconds; the cost of a hit is one connection closed early (its client sees
//! EOF and retries; every write of the API is idempotent).
//!
//! The policy lives here; the system calls it makes are in `sys.rs` (the crate's `unsafe`
//! code), the request bookkeeping in `registry.rs`.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, Shutdown, SocketAddr};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Limits, Ticker};
use crate::http::registry::{Phase, Registry};
use crate::http::sys::{
    self, address, bytes_received, inode, is_listening, shutdown_fd, unread, Fds,
};
use crate::http::Reply;
use crate::metrics::{Metrics, ShutReason};

/// How long a connection must have been without a request before it may be shut down to free its
/// thread for a connection tiny_http's pool left without one.
pub const RECLAIM_MIN_IDLE: Duration = Duration::from_secs(1);

/// One accepted socket as seen by a scan.
#[derive(Debug, Clone)]
pub struct SockInfo {
    pub inode: u64,
    pub peer: SocketAddr,
    pub bytes_received: u64,
    /// Bytes received by the kernel that nobody has read yet.
    pub unread: u32,
}

/// Tracking of one connection across scans.
struct Track {
    first_seen: Instant,
    /// `bytes_received` when the connection was last seen with, or just after, a request in our
    /// hands: what it sent since then is the next request head.
    base_bytes: u64,
    /// The end of its last request when the last scan looked.
    last_done_seen: Option<Instant>,
    /// Consecutive scans that found it over the head budget.
    over_budget: u32,
    /// Consecutive scans that found unread bytes and no request of it in our hands.
    unread_scans: u32,
    /// The scan that first saw bytes of its next request (more than `base_bytes`).
    started: Option<Instant>,
    /// A handler reading its body: when that phase began (the registry's `since`), when a scan
    /// first saw it, and `bytes_received` then.
    body_watch: Option<(Instant, Instant, u64)>,
    shut: bool,
}

/// A connection without a request in our hands: idle since, peer, socket inode.
type Idle = (Instant, SocketAddr, u64);

/// Finds and acts on the server's accepted sockets.
pub struct Supervisor {
    local: SocketAddr,
    limits: Limits,
    fds: Mutex<Fds>,
    registry: Arc<Registry>,
    tracks: Mutex<HashMap<u64, Track>>,
    metrics: Metrics,
    ticker: Arc<Ticker>,
    /// The raw `431` answer written to a connection shut down for an oversized head.
    head_refusal: Vec<u8>,
}

impl Supervisor {
    pub fn new(
        local: SocketAddr,
        limits: Limits,
        registry: Arc<Registry>,
        metrics: Metrics,
        head_refusal: &Reply,
    ) -> io::Result<Supervisor> {
        Ok(Supervisor {
            local,
            limits,
            fds: Mutex::new(Fds::open()?),
            registry,
            tracks: Mutex::new(HashMap::new()),
            metrics,
            ticker: Arc::default(),
            head_refusal: raw_close_response(head_refusal),
        })
    }

    /// tiny_http keeps no bound of its own here: this supervisor enforces them from outside.
    pub fn configure(&self, _options: &mut tiny_http::ServerOptions) {}

    fn fds(&self) -> std::sync::MutexGuard<'_, Fds> {
        self.fds.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every accepted connection of our listener, one entry per socket.
    pub fn sockets(&self) -> Vec<SockInfo> {
        let mut fds = self.fds();
        let mut seen: HashMap<u64, SockInfo> = HashMap::new();
        for fd in fds.list() {
            let local = self.local;
            let info = fds.with_socket(fd, |s| {
                if is_listening(s) || address(s, false) != Some(local) {
                    return None;
                }
                let peer = address(s, true)?;
                Some(SockInfo {
                    inode: inode(s),
                    peer,
                    bytes_received: bytes_received(s),
                    unread: unread(s),
                })
            });
            if let Some(Some(info)) = info {
                seen.entry(info.inode).or_insert(info);
            }
        }
        seen.into_values().collect()
    }

    /// Shuts down the accepted connection from `peer` (`how`); false when there is none.
    pub fn shutdown_peer(&self, peer: SocketAddr, how: Shutdown) -> bool {
        let mut fds = self.fds();
        let local = self.local;
        for fd in fds.list() {
            let hit = fds.with_socket(fd, |s| {
                let ours = !is_listening(s)
                    && address(s, false) == Some(local)
                    && address(s, true) == Some(peer);
                if ours {
                    shutdown_fd(s, how);
                }
                ours
            });
            if hit == Some(true) {
                return true;
            }
        }
        false
    }

    /// Writes `bytes` to the connection from `peer` directly (bypassing tiny_http); used only for
    /// connections of which no request is in our hands (the supervisor's 431 for an oversized head).
    pub fn write_peer(&self, peer: SocketAddr, bytes: &[u8]) -> bool {
        let mut fds = self.fds();
        let local = self.local;
        for fd in fds.list() {
            let hit = fds.with_socket(fd, |s| {
                if is_listening(s)
                    || address(s, false) != Some(local)
                    || address(s, true) != Some(peer)
                {
                    return false;
                }
                sys::send_nonblocking(s, bytes);
                true
            });
            if hit == Some(true) {
                return true;
            }
        }
        false
    }

    /// One pass: applies every limit once. Returns the number of open connections.
    pub fn scan(&self) -> usize {
        let now = Instant::now();
        let socks = self.sockets();
        let idle = self.limits.idle_timeout;
        let (busy, last_done, reading_body) = {
            let st = self.registry.lock();
            let mut busy: HashMap<SocketAddr, Vec<(Phase, Instant)>> = HashMap::new();
            for f in st.flights.values() {
                if let Some(p) = f.peer {
                    busy.entry(p).or_default().push((f.phase, f.since));
                }
            }
            let last_done: HashMap<SocketAddr, Instant> = socks
                .iter()
                .filter_map(|s| st.last_done.get(&s.peer).map(|t| (s.peer, *t)))
                .collect();
            let reading_body: HashSet<SocketAddr> = socks
                .iter()
                .filter(|s| st.reading_body(&s.peer))
                .map(|s| s.peer)
                .collect();
            (busy, last_done, reading_body)
        };
        let mut to_shut: Vec<(SocketAddr, ShutReason)> = Vec::new();
        let mut idle_candidates: Vec<Idle> = Vec::new();
        // Open connections per client address (bounded ones only), the idle ones among them.
        let mut per_address: HashMap<IpAddr, (usize, Vec<Idle>)> = HashMap::new();
        let mut starving = 0usize;
        let mut open = 0usize;
        {
            let mut tracks = self.tracks.lock().unwrap_or_else(|p| p.into_inner());
            tracks.retain(|inode, _| socks.iter().any(|s| s.inode == *inode));
            for s in &socks {
                let t = tracks.entry(s.inode).or_insert(Track {
                    first_seen: now,
                    base_bytes: 0,
                    over_budget: 0,
                    unread_scans: 0,
                    last_done_seen: None,
                    started: None,
                    body_watch: None,
                    shut: false,
                });
                // A request of it ended since the last scan (maybe too fast for any scan to see it
                // in flight): the bytes so far belonged to it.
                let done = last_done.get(&s.peer).copied();
                if done != t.last_done_seen {
                    t.last_done_seen = done;
                    t.base_bytes = s.bytes_received;
                    t.over_budget = 0;
                    t.started = None;
                }
                if t.shut {
                    continue;
                }
                open += 1;
                if self.limits.bounded_per_address(s.peer.ip()) {
                    per_address.entry(s.peer.ip()).or_default().0 += 1;
                }
                if let Some(flights) = busy.get(&s.peer) {
                    t.base_bytes = s.bytes_received;
                    t.over_budget = 0;
                    t.unread_scans = 0;
                    t.started = None;
                    let timed_out = flights.iter().any(|(phase, since)| {
                        matches!(phase, Phase::Body | Phase::Writing) && now - *since > idle
                    });
                    // Only bodies over tiny_http's pre-read limit are read by a handler.
                    let body = flights
                        .iter()
                        .find(|(phase, _)| *phase == Phase::Body)
                        .map(|(_, since)| *since);
                    let crawling = match body {
                        Some(since) => {
                            let (_, seen, bytes) = match t.body_watch {
                                Some(w) if w.0 == since => w,
                                _ => *t.body_watch.insert((since, now, s.bytes_received)),
                            };
                            self.below_min_rate(s.bytes_received.saturating_sub(bytes), now - seen)
                        }
                        None => {
                            t.body_watch = None;
                            false
                        }
                    };
                    if timed_out || crawling {
                        t.shut = true;
                        to_shut.push((s.peer, ShutReason::Slow));
                    }
                    continue;
                }
                let idle_since = last_done
                    .get(&s.peer)
                    .map_or(t.first_seen, |d| (*d).max(t.first_seen));
                let sent = s.bytes_received.saturating_sub(t.base_bytes);
                if sent > 0 && t.started.is_none() {
                    t.started = Some(now);
                }
                let expired = match t.started {
                    // Idle: nothing of a next request yet.
                    None => (now - idle_since > idle).then_some(ShutReason::Idle),
                    // Sending a request: it must keep up the minimum rate. Bytes still unread
                    // mean tiny_http has not taken them (no thread yet): the delay is ours, and
                    // only the idle timeout applies.
                    Some(start) if s.unread == 0 => self
                        .below_min_rate(sent, now - start)
                        .then_some(ShutReason::Slow),
                    Some(start) => (now - start > idle).then_some(ShutReason::Idle),
                };
                if let Some(reason) = expired {
                    t.shut = true;
                    to_shut.push((s.peer, reason));
                    continue;
                }
                if sent > self.limits.head_budget && !reading_body.contains(&s.peer) {
                    t.over_budget += 1;
                    // Twice in a row: a complete head is reported by tiny_http (or its request
                    // is in our hands) within a scan period.
                    if t.over_budget >= 2 {
                        t.shut = true;
                        to_shut.push((s.peer, ShutReason::Head));
                        continue;
                    }
                } else {
                    t.over_budget = 0;
                }
                if s.unread > 0 {
                    t.unread_scans += 1;
                    // tiny_http's thread for a connection reads whatever arrives at once: bytes
                    // left unread across two scans mean the connection has no thread (see below).
                    if t.unread_scans >= 2 {
                        starving += 1;
                    }
                } else {
                    t.unread_scans = 0;
                    idle_candidates.push((idle_since, s.peer, s.inode));
                    if let Some(a) = per_address.get_mut(&s.peer.ip()) {
                        a.1.push((idle_since, s.peer, s.inode));
                    }
                }
            }
            // One address over its own bound loses its longest-idle connections first, whatever
            // the total: one client cannot take the connections everybody else needs.
            for (count, mut idle) in per_address.into_values() {
                let over = count.saturating_sub(self.limits.max_per_address);
                if over == 0 {
                    continue;
                }
                idle.sort_by_key(|c| c.0);
                for (_, peer, inode) in idle.into_iter().take(over) {
                    if let Some(t) = tracks.get_mut(&inode) {
                        t.shut = true;
                    }
                    to_shut.push((peer, ShutReason::AddressLimit));
                }
            }
            let shut_now: HashSet<SocketAddr> = to_shut.iter().map(|(p, _)| *p).collect();
            idle_candidates.retain(|c| !shut_now.contains(&c.1));
            // Longest idle first: idle keep-alive connections whose client sends nothing.
            idle_candidates.sort_by_key(|c| c.0);
            let mut candidates = idle_candidates.into_iter();
            let live = open - to_shut.len();
            let over = live.saturating_sub(self.limits.max_connections);
            // tiny_http's pool wakes one waiting thread per new connection but counts threads that
            // were merely notified as still waiting, so in a burst some connections stay queued
            // without a thread while every pool thread is held by a keep-alive connection (a lost
            // wakeup). First remedy: a connection of our own, closed at once (`poke`): with no
            // thread waiting, the pool starts a new one for it, which then takes the queued
            // connection; nobody's connection is closed. Second, for connections still starving
            // later: shutting idle connections down frees their threads.
            for _ in 0..starving {
                self.poke();
            }
            for (i, (since, peer, inode)) in
                candidates.by_ref().take(over.max(starving)).enumerate()
            {
                // Reclaim only connections quiet for a while: an active keep-alive connection is
                // idle for the moment between an answer and its client's next request, and shutting
                // it down then breaks the request the client is sending (wrk saw read errors under
                // load). A starving connection waits a little longer instead. Longest idle first,
                // so the rest are younger still.
                if i >= over && now - since < RECLAIM_MIN_IDLE {
                    break;
                }
                if let Some(t) = tracks.get_mut(&inode) {
                    t.shut = true;
                }
                let reason = if i < over {
                    ShutReason::OverLimit
                } else {
                    ShutReason::Reclaim
                };
                to_shut.push((peer, reason));
            }
        }
        {
            let mut st = self.registry.lock();
            let live: HashSet<SocketAddr> = socks.iter().map(|s| s.peer).collect();
            st.last_done.retain(|peer, _| live.contains(peer));
            // A connection accepted after the sockets were listed may have reported a head
            // already: kept until the next scan lists it.
            st.heads
                .retain(|peer, h| h.touched >= now || live.contains(peer));
        }
        for (peer, reason) in &to_shut {
            if *reason == ShutReason::Head {
                // Nothing of this connection is in our hands, so nobody else writes to it.
                self.write_peer(*peer, &self.head_refusal);
            }
            if self.shutdown_peer(*peer, Shutdown::Both) {
                self.metrics.inc_connections_shut(*reason);
                log::debug!("shut down connection from {peer}: {reason:?}");
            }
        }
        let open = open - to_shut.len();
        self.metrics.set_open_connections(open as u64);
        open
    }

    /// Whether `sent` bytes in `elapsed` fall short of the minimum rate, once the grace period has
    /// passed.
    fn below_min_rate(&self, sent: u64, elapsed: Duration) -> bool {
        elapsed > self.limits.min_rate_grace
            && (sent as f64) < self.limits.min_rate as f64 * elapsed.as_secs_f64()
    }

    /// Opens a connection to our own listener and closes it at once (see `scan`).
    fn poke(&self) {
        let mut to = self.local;
        if to.ip().is_unspecified() {
            to.set_ip(match to {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        match std::net::TcpStream::connect_timeout(&to, Duration::from_millis(100)) {
            Ok(c) => {
                self.metrics.inc_pool_pokes();
                drop(c);
            }
            Err(e) => log::debug!("cannot poke the listener at {to}: {e}"),
        }
    }

    /// Starts the scanning thread; it ends after [`Supervisor::stop`].
    pub fn spawn(self: &Arc<Self>) -> io::Result<JoinHandle<()>> {
        let me = self.clone();
        Ticker::spawn(
            self.ticker.clone(),
            "conn-supervisor",
            self.limits.scan_every,
            move || {
                me.scan();
            },
        )
    }

    pub fn stop(&self) {
        self.ticker.stop();
    }
}

/// `reply` as bytes on the wire, with `Connection: close` (the connection is shut down after it).
fn raw_close_response(reply: &Reply) -> Vec<u8> {
    let mut raw = format!(
        "HTTP/1.1 {} {}\r\n",
        reply.status,
        tiny_http::StatusCode(reply.status).default_reason_phrase()
    );
    for (name, value) in &reply.headers {
        raw.push_str(&format!("{name}: {value}\r\n"));
    }
    raw.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        reply.body.len()
    ));
    let mut raw = raw.into_bytes();
    raw.extend_from_slice(&reply.body);
    raw
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn finds_accepted_sockets_and_shuts_one_down_by_peer() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let sup = Supervisor::new(
            local,
            Limits::default(),
            Arc::new(Registry::default()),
            Metrics::default(),
            &Reply::bytes(431, "text/plain", Vec::new()),
        )
        .unwrap();
        let mut client = TcpStream::connect(local).unwrap();
        let (mut server_side, peer) = listener.accept().unwrap();
        let socks = sup.sockets();
        assert_eq!(socks.len(), 1, "{socks:?}");
        assert_eq!(socks[0].peer, peer);
        client.write_all(b"hello").unwrap();
        assert!(sup.shutdown_peer(peer, Shutdown::Both));
        // The owner's read now ends (after the bytes already queued) and the client sees EOF.
        let mut buf = Vec::new();
        server_side.read_to_end(&mut buf).unwrap();
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
    }

    #[test]
    fn accept_queue_length_of_a_listener() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        assert_eq!(sys::accept_queue_len(&listener), Some(0));
        let _c = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert_eq!(sys::accept_queue_len(&listener), Some(1));
        let _s = listener.accept().unwrap();
        assert_eq!(sys::accept_queue_len(&listener), Some(0));
    }

    #[test]
    fn idle_connection_is_shut_down_after_the_timeout_but_a_busy_one_is_not() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let registry = Arc::new(Registry::default());
        let limits = Limits {
            idle_timeout: Duration::ZERO,
            ..Limits::default()
        };
        let metrics = Metrics::default();
        let refusal = Reply::bytes(431, "text/plain", Vec::new());
        let sup =
            Supervisor::new(local, limits, registry.clone(), metrics.clone(), &refusal).unwrap();
        let _idle = TcpStream::connect(local).unwrap();
        let (_s1, _) = listener.accept().unwrap();
        let _busy = TcpStream::connect(local).unwrap();
        let (_s2, busy_peer) = listener.accept().unwrap();
        registry.begin(1, Some(busy_peer), 0);
        registry.phase(1, Phase::Handling);
        // The first scan records the idle one; any later scan finds it past a zero timeout.
        assert_eq!(sup.scan(), 2);
        assert_eq!(sup.scan(), 1, "the busy connection stays");
        assert_eq!(metrics.connections_shut(ShutReason::Idle), 1);
        assert_eq!(metrics.connections_shut(ShutReason::Slow), 0);
    }
}
