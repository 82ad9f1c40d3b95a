//! The accept side: tiny_http `Server`s built on clones of our own listener. Each connection's
//! thread registers every request it reads and queues it in its lane (`lanes.rs`) itself
//! (`ServerOptions::deliver`), and ends its registration once the answer is written
//! (`on_answered`); one pump thread per server watches for accept errors.
//!
//! tiny_http's accept thread ends for good on the first accept error (EMFILE, ENFILE, ENOBUFS...):
//! it pushes the error into its queue and stops (tiny-http PR #219). A pump that receives that error
//! starts the next *generation* — a new `Server` on a `try_clone()` of the listener — with an
//! exponential backoff while the error persists, while the open connections of its own, now
//! retired, server still deliver their requests. A retired generation ends once none of its
//! requests is in our hands and it has been quiet for longer than the idle timeout: the supervisor
//! (`supervisor.rs`) shuts down every connection that stays quiet that long, so nothing can arrive later.
//! Workers never see which generation a request came from, except that requests of a retired one
//! are answered with the connection closed.
//!
//! The accept thread can also die without a word: when `accept` takes the last free descriptor,
//! tiny_http's `try_clone().unwrap()` of the new socket panics in that thread. The current pump
//! therefore watches the listener's accept queue: a queue that stays non-empty for
//! [`DEAF_AFTER`] means nobody accepts, and the generation is replaced as after an error. Such a
//! generation is only *presumed* dead, so its pump never ends (a live accept thread of it would
//! otherwise feed a queue nobody reads); this costs one parked thread per such event. The queue is
//! read through `TCP_INFO`, so this check exists only where the Linux supervisor is built.

use std::net::TcpListener;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::lanes::{Incoming, Lane, Lanes};
use super::registry::Registry;
use crate::metrics::Metrics;

/// A request that reached a generation's pump instead of `deliver`: with `deliver` set, tiny_http
/// queues only its HTTPS clients' requests for `recv`, and convapi configures no HTTPS. Handed over
/// from the pump's thread its flight would never end (`OUT` belongs to the connection's thread), so
/// it is answered `500` and its connection closed.
fn refuse_stray(rq: tiny_http::Request, generation: u64) {
    log::error!("generation {generation}: a request reached the accept pump; answering 500");
    let _ = rq.respond_closing(tiny_http::Response::empty(500));
}

thread_local! {
    /// The request a connection's thread has handed over and not yet written the answer of (a
    /// connection has at most one out: `answers_on_connection`).
    static OUT: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// Shortest and longest wait between two attempts to restart accepting.
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How often a pump looks up from an empty queue.
const POLL: Duration = Duration::from_millis(250);
/// How long the accept queue may stay non-empty before the accept thread is presumed dead.
pub const DEAF_AFTER: Duration = Duration::from_secs(1);
/// How often the current pump samples the accept queue.
const DEAF_CHECK: Duration = Duration::from_millis(100);

/// Connections waiting in the listener's accept queue, where the platform tells: Linux, when the
/// Linux supervisor is built. Elsewhere `None`, and the deafness check never fires (a tiny_http
/// accept thread that dies by panicking goes unnoticed there; see `docs/hardening.md`).
fn accept_queue_len(listener: &TcpListener) -> Option<u32> {
    #[cfg(all(target_os = "linux", not(feature = "portable-supervision")))]
    return super::sys::accept_queue_len(listener);
    #[cfg(any(not(target_os = "linux"), feature = "portable-supervision"))]
    {
        let _ = listener;
        None
    }
}

struct Generation {
    id: u64,
    server: Arc<tiny_http::Server>,
    pump: Option<JoinHandle<()>>,
}

struct Backoff {
    delay: Duration,
    next_attempt: Instant,
    last_start: Instant,
}

/// Which lane a request goes to (the service decides, from its method and path).
pub type Classify = Arc<dyn Fn(&str, &str) -> Lane + Send + Sync>;

pub struct Front {
    listener: TcpListener,
    /// Where requests go for the request threads; closed once every pump has ended.
    lanes: Arc<Lanes>,
    classify: Classify,
    registry: Arc<Registry>,
    metrics: Metrics,
    /// How long a retired generation must stay quiet before it ends.
    drain_quiet: Duration,
    /// How every generation's tiny_http server reads requests.
    options: tiny_http::ServerOptions,
    generations: Mutex<Vec<Generation>>,
    current: AtomicU64,
    next_id: AtomicU64,
    /// The clock of `now_ms`.
    started: Instant,
    stopping: AtomicBool,
    /// Accepting has stopped for good (shutting down): an accept error is expected, not restarted.
    no_accept: AtomicBool,
    backoff: Mutex<Backoff>,
}

impl Front {
    /// Starts the first generation. `drain_quiet` must exceed the supervisor's idle timeout plus
    /// one scan period.
    pub fn start(
        listener: TcpListener,
        lanes: Arc<Lanes>,
        classify: Classify,
        registry: Arc<Registry>,
        metrics: Metrics,
        drain_quiet: Duration,
        options: tiny_http::ServerOptions,
    ) -> std::io::Result<Arc<Front>> {
        let now = Instant::now();
        let front = Arc::new(Front {
            listener,
            lanes,
            classify,
            registry,
            metrics,
            drain_quiet,
            options,
            generations: Mutex::new(Vec::new()),
            current: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
            started: now,
            stopping: AtomicBool::new(false),
            no_accept: AtomicBool::new(false),
            backoff: Mutex::new(Backoff {
                delay: BACKOFF_MIN,
                next_attempt: now,
                last_start: now,
            }),
        });
        front.start_generation()?;
        Ok(front)
    }

    /// The generation whose server currently accepts.
    pub fn current_generation(&self) -> u64 {
        self.current.load(Ordering::SeqCst)
    }

    fn lock_generations(&self) -> std::sync::MutexGuard<'_, Vec<Generation>> {
        self.generations.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Builds a server on a clone of the listener and starts its pump. The server's connection
    /// threads hand their requests over themselves (`deliver`); the pump watches for accept
    /// errors and a deaf accept loop.
    fn start_generation(self: &Arc<Self>) -> std::io::Result<()> {
        let listener = self.listener.try_clone().map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot clone the listener: {e}"))
        })?;
        if self.stopping.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("stopping"));
        }
        let mut gens = self.lock_generations();
        let id = gens.iter().map(|g| g.id + 1).max().unwrap_or(0);
        let last_request = Arc::new(AtomicU64::new(self.now_ms()));
        let mut options = self.options.clone();
        let (front, seen) = (Arc::downgrade(self), last_request.clone());
        options.deliver = Some(Arc::new(move |rq| {
            // A front that is gone drops the request: tiny_http answers it 500.
            if let Some(front) = front.upgrade() {
                seen.store(front.now_ms(), Ordering::Relaxed);
                front.hand_over(rq, id);
            }
        }));
        let front = Arc::downgrade(self);
        options.on_answered = Some(Arc::new(move || {
            if let Some(front) = front.upgrade() {
                front.answered();
            }
        }));
        // tiny_http spawns its accept thread here; a failed spawn panics inside it.
        let server = catch_unwind(AssertUnwindSafe(|| {
            tiny_http::Server::from_listener_with_options(listener, None, options)
        }))
        .map_err(|_| std::io::Error::other("cannot start an accept thread"))?
        .map_err(|e| std::io::Error::other(format!("cannot serve: {e}")))?;
        let server = Arc::new(server);
        let (me, s, seen) = (self.clone(), server.clone(), last_request);
        let pump = std::thread::Builder::new()
            .name(format!("http-accept-{id}"))
            .spawn(move || me.pump(id, &s, &seen))
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot start a pump: {e}")))?;
        gens.push(Generation {
            id,
            server,
            pump: Some(pump),
        });
        self.current.store(id, Ordering::SeqCst);
        Ok(())
    }

    /// Milliseconds since the front started (the clock of a generation's last request).
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Tries to start the next generation unless the backoff says wait; true once it runs.
    fn try_restart(self: &Arc<Self>) -> bool {
        let now = Instant::now();
        {
            let mut b = self.backoff.lock().unwrap_or_else(|p| p.into_inner());
            if now < b.next_attempt {
                return false;
            }
            // A generation that lived a while means the error was a one-off: start over quickly.
            if now - b.last_start > BACKOFF_MAX * 4 {
                b.delay = BACKOFF_MIN;
            }
            b.next_attempt = now + b.delay;
            b.delay = (b.delay * 2).min(BACKOFF_MAX);
        }
        match self.start_generation() {
            Ok(()) => {
                self.backoff
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .last_start = Instant::now();
                self.metrics.inc_accept_restarts();
                log::warn!("accepting again (generation {})", self.current_generation());
                true
            }
            Err(e) => {
                log::warn!("cannot restart accepting yet: {e}");
                false
            }
        }
    }

    /// Registers a request and queues it in its lane, on the connection's thread. Once the lanes
    /// are closed (stopping) the request is dropped unregistered: tiny_http answers it 500.
    fn hand_over(&self, rq: tiny_http::Request, generation: u64) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let url = rq.url();
        let path = url.split_once('?').map_or(url, |(p, _)| p);
        let lane = (self.classify)(rq.method().as_str(), path);
        self.registry
            .begin(id, rq.remote_addr().copied(), generation);
        if self
            .lanes
            .push(lane, Incoming { rq, id, generation })
            .is_err()
        {
            self.registry.end(id);
        } else {
            // Ended by this same thread once the answer is written (`answered`).
            OUT.set(Some(id));
        }
    }

    /// On a connection's thread, once the answer of its request is written: the request leaves
    /// our hands (the supervisor counts the connection idle from now on, and until now bounds
    /// the answer's transfer by the idle timeout).
    fn answered(&self) {
        if let Some(id) = OUT.take() {
            self.registry.end(id);
        }
    }

    fn pump(
        self: Arc<Self>,
        generation: u64,
        server: &tiny_http::Server,
        last_request: &AtomicU64,
    ) {
        let mut retired = false;
        let mut presumed_dead = false;
        let mut restarted = false;
        let mut last_message = Instant::now();
        let mut last_check = Instant::now();
        let mut queue_stuck_since: Option<Instant> = None;
        loop {
            let no_accept = self.no_accept.load(Ordering::SeqCst);
            if !retired && !no_accept && last_check.elapsed() >= DEAF_CHECK {
                last_check = Instant::now();
                match accept_queue_len(&self.listener) {
                    Some(n) if n > 0 => {
                        let since = *queue_stuck_since.get_or_insert(last_check);
                        if last_check - since >= DEAF_AFTER {
                            log::error!(
                                "accept loop of generation {generation} stopped accepting \
                                 ({n} connections waiting); restarting it"
                            );
                            retired = true;
                            presumed_dead = true;
                        }
                    }
                    _ => queue_stuck_since = None,
                }
            }
            if retired && !restarted && !no_accept && !self.stopping.load(Ordering::SeqCst) {
                restarted = self.try_restart();
            }
            let wait = if retired && !restarted {
                BACKOFF_MIN
            } else if !retired {
                DEAF_CHECK
            } else {
                POLL
            };
            match server.recv_timeout(wait) {
                Ok(Some(rq)) => {
                    last_message = Instant::now();
                    refuse_stray(rq, generation);
                }
                Ok(None) => {
                    if self.stopping.load(Ordering::SeqCst) {
                        while let Ok(Some(rq)) = server.try_recv() {
                            refuse_stray(rq, generation);
                        }
                        return;
                    }
                    let since_request = Duration::from_millis(
                        self.now_ms()
                            .saturating_sub(last_request.load(Ordering::Relaxed)),
                    );
                    if retired
                        && restarted
                        && !presumed_dead
                        && last_message.elapsed() > self.drain_quiet
                        && since_request > self.drain_quiet
                        && self.registry.in_flight(generation) == 0
                    {
                        log::debug!("generation {generation} drained");
                        self.lock_generations().retain(|g| g.id != generation);
                        return;
                    }
                }
                Err(e) => {
                    if self.stopping.load(Ordering::SeqCst) {
                        return;
                    }
                    // Read again: `stop_accepting` may have run while this pump waited.
                    if no_accept || self.no_accept.load(Ordering::SeqCst) {
                        // Our own doing (`stop_accepting`); requests of open connections still come.
                        continue;
                    }
                    // tiny_http's accept thread for this server has ended for good.
                    log::error!("accept failed: {e}; restarting the accept loop");
                    retired = true;
                    last_message = Instant::now();
                }
            }
        }
    }

    /// Stops accepting new connections, for every generation at once, while requests of open
    /// connections are still pumped. Shutting the listening socket down makes every blocked
    /// `accept` on it fail (tiny_http's accept threads then end) and refuses new connections.
    pub fn stop_accepting(&self) {
        self.no_accept.store(true, Ordering::SeqCst);
        super::sys::shutdown_listener(&self.listener);
    }

    /// Stops every generation: no new connection is accepted, requests already parsed are handed
    /// over, then the pumps end and the lanes close (the workers end once they took everything).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let mut gens: Vec<Generation> = std::mem::take(&mut *self.lock_generations());
        for g in &gens {
            g.server.unblock();
        }
        for g in &mut gens {
            if let Some(p) = g.pump.take() {
                let _ = p.join();
            }
        }
        drop(gens);
        self.lanes.close();
    }
}
