//! Requests in our hands, by request id: which connection (peer address) each came from, and where
//! it is ([`Phase`]). The pumps register a request, the workers move it through its phases and end
//! it; the supervisor reads it to tell connections with a request in our hands from idle ones.
//! tiny_http's connection threads report each request head they read ([`Registry::head_read`]),
//! so that the supervisor can tell a body being read before its request is handed over from an
//! oversized head.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Instant;

/// Where a request in our hands is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Taken from tiny_http, waiting for a worker.
    Queued,
    /// A handler reads its body from the client.
    Body,
    /// A handler works on it.
    Handling,
    /// The response goes out (and tiny_http drains an unread body).
    Writing,
}

pub(super) struct Flight {
    pub(super) peer: Option<SocketAddr>,
    pub(super) generation: u64,
    pub(super) phase: Phase,
    pub(super) since: Instant,
}

/// Requests of one connection seen so far.
pub(super) struct Heads {
    /// Request heads tiny_http has read.
    read: u64,
    /// Requests taken from tiny_http ([`Registry::begin`]).
    begun: u64,
    /// Last change, so that the supervisor does not forget a connection it has not listed yet.
    pub(super) touched: Instant,
}

#[derive(Default)]
pub(super) struct RegistryState {
    pub(super) flights: HashMap<u64, Flight>,
    /// When the last request of a connection left our hands.
    pub(super) last_done: HashMap<SocketAddr, Instant>,
    pub(super) heads: HashMap<SocketAddr, Heads>,
}

impl RegistryState {
    /// A head of this connection has been read and its request not handed over yet: what the
    /// client sends now is that request's body, which tiny_http reads first (and bounds).
    pub(super) fn reading_body(&self, peer: &SocketAddr) -> bool {
        self.heads.get(peer).is_some_and(|h| h.read > h.begun)
    }

    fn heads_of(&mut self, peer: SocketAddr) -> &mut Heads {
        let h = self.heads.entry(peer).or_insert(Heads {
            read: 0,
            begun: 0,
            touched: Instant::now(),
        });
        h.touched = Instant::now();
        h
    }
}

/// Requests in our hands, by request id. Shared by the pumps, the workers and the supervisor.
#[derive(Default)]
pub struct Registry {
    state: Mutex<RegistryState>,
}

impl Registry {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, RegistryState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Called by tiny_http's connection thread when it has read a request head of `peer`.
    pub fn head_read(&self, peer: Option<SocketAddr>) {
        if let Some(peer) = peer {
            self.lock().heads_of(peer).read += 1;
        }
    }

    pub fn begin(&self, id: u64, peer: Option<SocketAddr>, generation: u64) {
        let mut st = self.lock();
        if let Some(peer) = peer {
            st.heads_of(peer).begun += 1;
        }
        st.flights.insert(
            id,
            Flight {
                peer,
                generation,
                phase: Phase::Queued,
                since: Instant::now(),
            },
        );
    }

    pub fn phase(&self, id: u64, phase: Phase) {
        if let Some(f) = self.lock().flights.get_mut(&id) {
            f.phase = phase;
            f.since = Instant::now();
        }
    }

    pub fn end(&self, id: u64) {
        let mut st = self.lock();
        if let Some(f) = st.flights.remove(&id) {
            if let Some(peer) = f.peer {
                st.last_done.insert(peer, Instant::now());
            }
        }
    }

    /// Connections whose request head tiny_http has read but whose request it has not handed over
    /// yet: their bodies are being read.
    pub fn bodies_in_transit(&self) -> usize {
        let st = self.lock();
        st.heads.keys().filter(|p| st.reading_body(p)).count()
    }

    /// Requests of `generation` still in our hands.
    pub fn in_flight(&self, generation: u64) -> usize {
        self.lock()
            .flights
            .values()
            .filter(|f| f.generation == generation)
            .count()
    }
}
