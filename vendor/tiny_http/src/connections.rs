//! convapi: bounds on connections kept by the server itself (`PATCHES.md`, patches 15–17), for
//! platforms where the application cannot watch the sockets from outside: the open connections
//! with a handle to shut each down, and a clock per connection that says how long it has been
//! without a request in the application's hands and how fast its current request arrives.

use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::connection::Connection;

/// Least average rate at which a request (its head, and a body read before it is handed over)
/// must arrive, measured from its first byte once `grace` has passed.
#[derive(Debug, Clone, Copy)]
pub struct MinRate {
    pub bytes_per_sec: u64,
    pub grace: Duration,
}

/// Why the server ended a connection by itself (`ServerOptions::on_cut`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Nothing of a next request arrived within the socket timeout.
    Idle,
    /// A request arrived slower than the minimum rate, or stalled for the socket timeout.
    Slow,
    /// A request head over `ServerOptions::max_head_bytes` (answered 431).
    HeadTooLarge,
    /// Shut down to make room for a new connection (`ServerOptions::max_connections`).
    OverLimit,
    /// More connections from one client address than `ServerOptions::max_per_address`.
    AddressLimit,
}

/// Where a connection's current request is, as the connection's own thread sees it.
#[derive(Default)]
struct Pace {
    /// When the connection began waiting for its next request head (none: a request of it is
    /// in the application's hands).
    waiting_since: Option<Instant>,
    /// First byte of that request, and bytes of it so far (head and pre-read body).
    first_byte: Option<Instant>,
    bytes: u64,
    /// The request fell under the minimum rate.
    too_slow: bool,
}

/// A connection's clock, shared by its reader, its thread and the table.
#[derive(Default)]
pub(crate) struct PaceClock(Mutex<Pace>);

impl PaceClock {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pace> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection waits for its next request: nothing of it is in the application's hands.
    pub(crate) fn arm(&self) {
        *self.lock() = Pace {
            waiting_since: Some(Instant::now()),
            ..Pace::default()
        };
    }

    /// The request has been handed over.
    pub(crate) fn disarm(&self) {
        self.lock().waiting_since = None;
    }

    /// Why a read of the current request failed: slow if any of it had arrived, else idle.
    pub(crate) fn cut_reason(&self) -> Cut {
        let p = self.lock();
        if p.too_slow || p.first_byte.is_some() {
            Cut::Slow
        } else {
            Cut::Idle
        }
    }

    /// The current request fell under the minimum rate.
    pub(crate) fn too_slow(&self) -> bool {
        self.lock().too_slow
    }

    fn waiting_since(&self) -> Option<Instant> {
        self.lock().waiting_since
    }
}

/// The connection's reader: counts the bytes of the request being read and fails once they
/// arrive slower than the minimum rate.
pub(crate) struct PacedReader<R> {
    inner: R,
    clock: Arc<PaceClock>,
    min_rate: Option<MinRate>,
}

impl<R> PacedReader<R> {
    pub(crate) fn new(inner: R, clock: Arc<PaceClock>, min_rate: Option<MinRate>) -> Self {
        PacedReader {
            inner,
            clock,
            min_rate,
        }
    }
}

impl<R: Read> Read for PacedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let Some(rate) = self.min_rate else {
            return Ok(n);
        };
        let mut p = self.clock.lock();
        if n == 0 || p.waiting_since.is_none() {
            return Ok(n);
        }
        let now = Instant::now();
        let first = *p.first_byte.get_or_insert(now);
        p.bytes += n as u64;
        let elapsed = now - first;
        if elapsed > rate.grace
            && (p.bytes as f64) < rate.bytes_per_sec as f64 * elapsed.as_secs_f64()
        {
            p.too_slow = true;
            return Err(io::Error::other("request slower than the minimum rate"));
        }
        Ok(n)
    }
}

struct Entry {
    peer: Option<SocketAddr>,
    /// A clone of the socket, only ever shut down (its descriptor closes with the entry).
    handle: Connection,
    clock: Arc<PaceClock>,
    shut: bool,
}

/// The server's open connections. Each holds a clone of its socket (one more descriptor per
/// connection) until its thread ends, so that it can be shut down by peer address.
#[derive(Default)]
pub struct Connections {
    table: Mutex<(u64, HashMap<u64, Entry>)>,
}

impl Connections {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, HashMap<u64, Entry>)> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Open connections, not counting those already shut down whose threads have not ended yet.
    pub fn len(&self) -> usize {
        self.lock().1.values().filter(|e| !e.shut).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Shuts down (`how`) the connection from `peer`; false when there is none.
    pub fn shutdown(&self, peer: SocketAddr, how: Shutdown) -> bool {
        let mut t = self.lock();
        let Some(e) = t.1.values_mut().find(|e| e.peer == Some(peer)) else {
            return false;
        };
        if how == Shutdown::Both {
            e.shut = true;
        }
        e.handle.shutdown(how).is_ok()
    }

    /// Registers an accepted connection; fails when its socket cannot be cloned (no descriptor
    /// left). The entry goes with the returned guard.
    pub(crate) fn register(
        self: &Arc<Self>,
        conn: &Connection,
        peer: Option<SocketAddr>,
        clock: Arc<PaceClock>,
    ) -> io::Result<Registered> {
        let handle = conn.try_clone()?;
        let mut t = self.lock();
        t.0 += 1;
        let id = t.0;
        t.1.insert(
            id,
            Entry {
                peer,
                handle,
                clock,
                shut: false,
            },
        );
        Ok(Registered {
            table: self.clone(),
            id,
        })
    }

    /// Makes room for one more connection under `max`: shuts down the connection that has
    /// waited longest for its next request (none of it in the application's hands). `Some(true)`
    /// when one was shut down, `None` when every connection has a request in the application's
    /// hands.
    pub(crate) fn make_room(&self, max: usize) -> Option<bool> {
        self.make_room_among(max, |_| true)
    }

    /// convapi: [`Connections::make_room`] among the connections whose peer `among` selects
    /// (those of one client address).
    pub(crate) fn make_room_among(
        &self,
        max: usize,
        among: impl Fn(Option<SocketAddr>) -> bool,
    ) -> Option<bool> {
        let mut t = self.lock();
        if t.1.values().filter(|e| !e.shut && among(e.peer)).count() < max {
            return Some(false);
        }
        let oldest =
            t.1.values_mut()
                .filter(|e| !e.shut && among(e.peer))
                .filter_map(|e| e.clock.waiting_since().map(|w| (w, e)))
                .min_by_key(|(w, _)| *w);
        match oldest {
            Some((_, e)) => {
                e.shut = true;
                e.handle.shutdown(Shutdown::Both).ok();
                Some(true)
            }
            None => None,
        }
    }
}

/// Removes its connection from the table when the connection's thread ends.
pub(crate) struct Registered {
    table: Arc<Connections>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.table.lock().1.remove(&self.id);
    }
}
