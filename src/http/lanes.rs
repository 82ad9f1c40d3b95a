//! Lanes (bulkheads) between the accept side and the request threads: requests wait here, one
//! queue per [`Lane`], until a request thread takes them.
//!
//! The request threads are one pool, but requests of the [`Lane::Shared`] lane (everything
//! anonymous: the pixel, the dashboard with its logins, static files) are taken by at most
//! `threads - reserved` of them at once, so `reserved` threads always remain for the
//! [`Lane::Reserved`] lane (the authenticated API and the health check), however much anonymous
//! work waits. Reserved requests go first; within a lane, first come first served. Nothing is
//! dropped here: a connection has at most one request in our hands (tiny_http's
//! `answers_on_connection`), so each queue is bounded by the connections, which the supervisor
//! bounds.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::metrics::Metrics;

/// A request taken from tiny_http, on its way to a request thread: what the lanes hold.
pub struct Incoming {
    pub rq: tiny_http::Request,
    pub id: u64,
    pub generation: u64,
}

/// Which capacity a request may use; the [`super::Service`] decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Keeps request threads that [`Lane::Shared`] work cannot take.
    Reserved,
    /// Takes at most the threads not reserved.
    Shared,
}

/// Threads kept for [`Lane::Reserved`] out of `threads`: a quarter, at least one (none when there
/// is only one thread: it must serve both lanes).
pub fn reserved_threads(threads: usize) -> usize {
    if threads <= 1 {
        0
    } else {
        (threads / 4).max(1)
    }
}

struct State {
    reserved: VecDeque<Incoming>,
    shared: VecDeque<Incoming>,
    /// Shared requests being handled now.
    shared_busy: usize,
    closed: bool,
}

pub struct Lanes {
    state: Mutex<State>,
    ready: Condvar,
    /// Most shared requests handled at once.
    shared_max: usize,
    metrics: Metrics,
}

impl Lanes {
    pub fn new(threads: usize, metrics: Metrics) -> Lanes {
        Lanes {
            state: Mutex::new(State {
                reserved: VecDeque::new(),
                shared: VecDeque::new(),
                shared_busy: 0,
                closed: false,
            }),
            ready: Condvar::new(),
            shared_max: threads.saturating_sub(reserved_threads(threads)).max(1),
            metrics,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a request for the request threads; gives it back once the lanes are closed.
    pub fn push(&self, lane: Lane, inc: Incoming) -> Result<(), Box<Incoming>> {
        let mut st = self.lock();
        if st.closed {
            return Err(Box::new(inc));
        }
        match lane {
            Lane::Reserved => st.reserved.push_back(inc),
            Lane::Shared => st.shared.push_back(inc),
        }
        self.metrics
            .set_lane_waiting(st.reserved.len() as u64, st.shared.len() as u64);
        drop(st);
        // Every waiting thread can take what it is woken for, or nobody can (a shared request
        // with every shared slot busy: `done` wakes one when a slot frees), so one is enough.
        self.ready.notify_one();
        Ok(())
    }

    /// The next request for a request thread, waiting for one; `None` once closed and empty.
    /// A [`Lane::Shared`] request must be given back with [`Lanes::done`].
    pub fn pop(&self) -> Option<(Lane, Incoming)> {
        let mut st = self.lock();
        loop {
            let next = if let Some(inc) = st.reserved.pop_front() {
                Some((Lane::Reserved, inc))
            } else if st.shared_busy < self.shared_max {
                st.shared.pop_front().map(|inc| (Lane::Shared, inc))
            } else {
                None
            };
            if let Some((lane, inc)) = next {
                if lane == Lane::Shared {
                    st.shared_busy += 1;
                }
                self.metrics
                    .set_lane_waiting(st.reserved.len() as u64, st.shared.len() as u64);
                return Some((lane, inc));
            }
            if st.closed && st.reserved.is_empty() && st.shared.is_empty() {
                return None;
            }
            st = self.ready.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// A request of `lane` taken by [`Lanes::pop`] is finished.
    pub fn done(&self, lane: Lane) {
        if lane == Lane::Shared {
            let mut st = self.lock();
            st.shared_busy -= 1;
            let more = !st.shared.is_empty();
            drop(st);
            if more {
                self.ready.notify_one();
            }
        }
    }

    /// No request comes any more: threads end once the queues are empty.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }
}
