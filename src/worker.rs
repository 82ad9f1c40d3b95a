//! How background work runs: every background thread of `serve` (the pipeline, the sender, the
//! pruner, the rates fetcher, the checkpointer) is a [`Worker`] — started, woken and stopped the
//! same way — and every retry delay is a [`Backoff`] value.
//!
//! A worker runs one *pass* at a time; a pass returns how long to wait before the next one
//! ([`Duration::ZERO`]: at once). The wait ends early when the worker is woken ([`Waker::wake`],
//! the pipeline after each accepted request) or stopped. [`Worker::stop`] asks every thread to
//! stop — a pass sees it through [`Stop::requested`] and returns between two of its steps — and
//! waits for them; dropping a worker stops it the same way. A worker started
//! [`Worker::with_last_pass`] runs one more pass once stopped (the checkpointer's last checkpoint).
//! It knows nothing of what a pass does.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// A delay that doubles with each failure in a row, up to a cap, shortened by a jitter so that
/// what failed together is not tried again together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The delay after the first failure.
    pub base_ms: i64,
    /// The longest delay.
    pub cap_ms: i64,
}

impl Backoff {
    /// The delay after the `failures`-th failure in a row (1: the first): `base × 2^(failures-1)`,
    /// at most `cap`, times `jitter` clamped to [0.5, 1].
    pub fn delay_ms(&self, failures: i64, jitter: f64) -> i64 {
        let exp = (failures - 1).clamp(0, 30) as u32;
        let full = self.base_ms.saturating_mul(1i64 << exp).min(self.cap_ms);
        ((full as f64) * jitter.clamp(0.5, 1.0)).round() as i64
    }
}

/// A random factor in [0.5, 1] from the OS random source (0.75 if it fails: jitter is a courtesy).
pub fn jitter() -> f64 {
    getrandom::u32()
        .map(|r| 0.5 + 0.5 * (r as f64 / u32::MAX as f64))
        .unwrap_or(0.75)
}

#[derive(Default)]
struct State {
    woken: bool,
    stopped: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    cv: Condvar,
    /// Set by the first wake since a thread last looked: later wakes (one per accepted request)
    /// cost one atomic swap instead of a lock and a futex call.
    wake_pending: AtomicBool,
    /// Mirrors `state.stopped` for a pass's checks between its steps, without the lock.
    stopping: AtomicBool,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What a pass asks of its worker: whether to stop.
pub struct Stop(Arc<Shared>);

impl Stop {
    /// Whether the worker is stopping: a pass returns at its next step when it is.
    pub fn requested(&self) -> bool {
        self.0.stopping.load(Ordering::SeqCst)
    }
}

/// Wakes a worker's threads early. Cheap to clone.
#[derive(Clone)]
pub struct Waker(Option<Arc<Shared>>);

impl Waker {
    /// A waker with no worker behind it (the worker is switched off).
    pub fn disabled() -> Waker {
        Waker(None)
    }

    /// Ends the wait of a thread between two passes (or makes its next wait end at once).
    pub fn wake(&self) {
        if let Some(s) = &self.0 {
            if s.wake_pending.swap(true, Ordering::AcqRel) {
                return;
            }
            s.state().woken = true;
            s.cv.notify_one();
        }
    }
}

/// Background threads running passes until stopped.
pub struct Worker {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    last_pass: bool,
}

impl Default for Worker {
    fn default() -> Self {
        Worker::new()
    }
}

impl Worker {
    /// A worker with no thread yet: [`Worker::spawn`] adds them.
    pub fn new() -> Worker {
        Worker {
            shared: Arc::default(),
            threads: Vec::new(),
            last_pass: false,
        }
    }

    /// Threads spawned after this run one more pass once stopped.
    pub fn with_last_pass(mut self) -> Worker {
        self.last_pass = true;
        self
    }

    /// Starts a thread named `name` that waits `first`, then runs `pass` until stopped, waiting
    /// what each pass returns between two.
    pub fn spawn(
        &mut self,
        name: String,
        first: Duration,
        mut pass: impl FnMut(&Stop) -> Duration + Send + 'static,
    ) -> std::io::Result<()> {
        let shared = self.shared.clone();
        let last_pass = self.last_pass;
        let label = name.clone();
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            let stop = Stop(shared.clone());
            let mut wait = first;
            loop {
                let mut st = shared.state();
                if !wait.is_zero() {
                    st = shared
                        .cv
                        .wait_timeout_while(st, wait, |st| !st.woken && !st.stopped)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                if st.stopped {
                    drop(st);
                    if last_pass {
                        pass(&stop);
                    }
                    log::debug!("{label}: stopped");
                    return;
                }
                // Cleared before the pass: a wake during the pass triggers another one.
                st.woken = false;
                shared.wake_pending.store(false, Ordering::Release);
                drop(st);
                wait = pass(&stop);
            }
        })?;
        self.threads.push(thread);
        Ok(())
    }

    /// A waker of this worker's threads.
    pub fn waker(&self) -> Waker {
        Waker(Some(self.shared.clone()))
    }

    /// Stops every thread after the step of its pass in hand, and waits for them.
    pub fn stop(self) {
        drop(self);
    }

    fn stop_and_join(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.shared.state().stopped = true;
        self.shared.cv.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Instant;

    #[test]
    fn a_backoff_doubles_to_its_cap_within_its_jitter() {
        let b = Backoff {
            base_ms: 1_000,
            cap_ms: 15_000,
        };
        assert_eq!(b.delay_ms(1, 1.0), 1_000);
        assert_eq!(b.delay_ms(0, 1.0), 1_000, "no failure counts as the first");
        assert_eq!(b.delay_ms(2, 1.0), 2_000);
        assert_eq!(b.delay_ms(4, 1.0), 8_000);
        assert_eq!(b.delay_ms(5, 1.0), 15_000);
        assert_eq!(b.delay_ms(i64::MAX, 1.0), 15_000);
        assert_eq!(b.delay_ms(1, 0.5), 500);
        // Out-of-range jitter is clamped, never zero or growing.
        assert_eq!(b.delay_ms(3, 0.0), 2_000);
        assert_eq!(b.delay_ms(3, 7.0), 4_000);
        for _ in 0..100 {
            let j = jitter();
            assert!((0.5..=1.0).contains(&j), "{j}");
        }
    }

    fn counting(w: &mut Worker, first: Duration, every: Duration) -> Arc<AtomicUsize> {
        let passes = Arc::new(AtomicUsize::new(0));
        let p = passes.clone();
        w.spawn("test-worker".into(), first, move |_| {
            p.fetch_add(1, Ordering::SeqCst);
            every
        })
        .unwrap();
        passes
    }

    fn until(what: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !what() {
            assert!(Instant::now() < deadline, "timed out");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_wake_ends_the_wait_and_a_stop_ends_the_thread_without_another_pass() {
        let mut w = Worker::new();
        let passes = counting(&mut w, Duration::ZERO, Duration::from_secs(3600));
        until(|| passes.load(Ordering::SeqCst) == 1);
        w.waker().wake();
        until(|| passes.load(Ordering::SeqCst) == 2);
        let started = Instant::now();
        w.stop();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(passes.load(Ordering::SeqCst), 2);
        Waker::disabled().wake();
    }

    #[test]
    fn a_first_wait_delays_the_first_pass_and_a_last_pass_runs_once_stopped() {
        let mut w = Worker::new().with_last_pass();
        let passes = counting(&mut w, Duration::from_secs(3600), Duration::from_secs(3600));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(passes.load(Ordering::SeqCst), 0);
        drop(w);
        assert_eq!(passes.load(Ordering::SeqCst), 1, "the last pass");
    }

    #[test]
    fn a_pass_sees_the_stop_and_every_thread_is_joined() {
        let mut w = Worker::new();
        let (entered, seen) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        for i in 0..3 {
            let (e, s) = (entered.clone(), seen.clone());
            w.spawn(format!("test-{i}"), Duration::ZERO, move |stop| {
                e.fetch_add(1, Ordering::SeqCst);
                while !stop.requested() {
                    std::thread::sleep(Duration::from_millis(1));
                }
                s.fetch_add(1, Ordering::SeqCst);
                Duration::ZERO
            })
            .unwrap();
        }
        until(|| entered.load(Ordering::SeqCst) == 3);
        w.stop();
        assert_eq!(seen.load(Ordering::SeqCst), 3);
    }
}
