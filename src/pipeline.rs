//! The background pipeline (CONTRACT §5): drains the outbox after the 202 — attribution, then
//! currency conversion — at least once, every step idempotent. It never sees a request.
//!
//! One thread with its own connection (never the request writer's). Items are handled in chunks:
//! one `BEGIN IMMEDIATE` transaction (one fsync) for as many items as fit in [`CHUNK_BUDGET`], each
//! item in its own savepoint that re-reads the item, computes, stores the result and deletes (or
//! parks) the outbox row: a crash before the commit leaves the chunk's items due, a crash after
//! leaves them done, so nothing is lost or counted twice. A failing item is rescheduled with
//! exponential backoff and jitter and, after [`MAX_ATTEMPTS`] tries, dead-lettered (conversion
//! `failed`, last error kept); it never holds up the items behind it, and a slow one is interrupted
//! after [`ITEM_DEADLINE`]. A conversion whose rates are missing is parked as `fx_pending`; `convapi
//! rates import` makes parked items due again, and the worker notices within [`POLL`]. A conversion
//! without a value needs no rate: it is processed with no reporting value.
//!
//! Tests drive [`drain_once`] in-process against the database file of a server started with
//! `--pipeline off`.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::attribution::{self, Model};
use crate::fx::{self, Leg};
use crate::metrics::Metrics;
use crate::store::pipeline::{Attributed, Item, Reported};
use crate::store::sessions::Identifier;
use crate::store::{self, StoreError};
use crate::writer::WriteGate;

/// Failed tries after which an item is dead-lettered.
pub const MAX_ATTEMPTS: i64 = 10;
/// The delay after the first failure; it doubles with each further one.
pub const BACKOFF_BASE_MS: i64 = 1_000;
/// The longest delay between two tries.
pub const BACKOFF_CAP_MS: i64 = 15 * 60 * 1_000;
/// The longest the worker sleeps without looking at the outbox: rates imported by another
/// process make parked items due, and nothing else would wake the worker for them.
pub const POLL: Duration = Duration::from_secs(1);
/// Longest time one item may take before it is interrupted and counted as a failed try.
pub const ITEM_DEADLINE: Duration = Duration::from_secs(10);
/// Longest a chunk of items waits for queued requests to be written first (see [`WriteGate`]):
/// under a burst the pipeline slows to about one chunk per this interval, and catches up afterwards.
pub const MAX_YIELD: Duration = Duration::from_millis(20);
/// Items are committed in chunks: one transaction (so one fsync) for as many items as are handled
/// within this time, each in its own savepoint. It bounds how long the request writer waits behind
/// the pipeline.
pub const CHUNK_BUDGET: Duration = Duration::from_millis(2);

/// How one drain pass runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Items read from the outbox per query.
    pub batch: usize,
    /// See [`ITEM_DEADLINE`].
    pub item_deadline: Duration,
    /// Taken around each chunk's transaction when the request writer runs in the same process.
    pub gate: Option<WriteGate>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            batch: 64,
            item_deadline: ITEM_DEADLINE,
            gate: None,
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainStats {
    /// Items finished: attribution and currency stored, outbox row deleted.
    pub processed: usize,
    /// Items parked as `fx_pending` (attribution stored, no rate yet).
    pub fx_pending: usize,
    /// Items that failed and were rescheduled.
    pub retried: usize,
    /// Items that failed for the last time.
    pub dead_lettered: usize,
}

/// Handles every item due at `now_ms`, each once, in order of due time. Items that fail are
/// rescheduled after `now_ms`, so they wait for a later pass. The hook tests use.
pub fn drain_once(
    conn: &mut Connection,
    metrics: &Metrics,
    now_ms: i64,
) -> store::Result<DrainStats> {
    drain(conn, metrics, now_ms, &Options::default(), &|| false)
}

/// [`drain_once`] with options, stopping early (between items) when `stop` says so.
/// Returns `Err(Busy)` when the database stays locked; what was committed before stays done.
pub fn drain(
    conn: &mut Connection,
    metrics: &Metrics,
    now_ms: i64,
    opts: &Options,
    stop: &dyn Fn() -> bool,
) -> store::Result<DrainStats> {
    let mut stats = DrainStats::default();
    let mut seen = HashSet::new();
    loop {
        let items = store::pipeline::due(conn, now_ms, opts.batch.max(1))?;
        // An item still due after its turn (its failure could not be recorded) is not retried in
        // this pass: the pass always ends.
        let fresh: Vec<Item> = items.into_iter().filter(|i| seen.insert(i.id)).collect();
        if fresh.is_empty() {
            return Ok(stats);
        }
        let mut fresh = fresh.into_iter().peekable();
        while fresh.peek().is_some() {
            if stop() {
                return Ok(stats);
            }
            let _held = opts.gate.as_ref().map(|g| g.background(MAX_YIELD));
            let chunk = drain_chunk(conn, &mut fresh, now_ms, opts, stop)?;
            // Counted once committed.
            (0..chunk.processed).for_each(|_| metrics.inc_processed());
            (0..chunk.dead_lettered).for_each(|_| metrics.inc_dead_lettered());
            stats.processed += chunk.processed;
            stats.fx_pending += chunk.fx_pending;
            stats.retried += chunk.retried;
            stats.dead_lettered += chunk.dead_lettered;
        }
    }
}

/// Handles items from `items` in one transaction until [`CHUNK_BUDGET`] is spent, `opts.batch`
/// items are done or `stop` says so, then commits. Each item runs in a savepoint, so a failing one
/// is rolled back alone; a transient failure rolls the chunk back (its items stay due) and ends
/// the pass.
fn drain_chunk(
    conn: &mut Connection,
    items: &mut std::iter::Peekable<std::vec::IntoIter<Item>>,
    now_ms: i64,
    opts: &Options,
    stop: &dyn Fn() -> bool,
) -> store::Result<DrainStats> {
    let mut stats = DrainStats::default();
    let started = Instant::now();
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    let outcome = (|| {
        let mut n = 0;
        for item in items.by_ref() {
            match handle(conn, &item, now_ms, opts.item_deadline) {
                Ok(Handled::Processed) => stats.processed += 1,
                Ok(Handled::FxPending) => stats.fx_pending += 1,
                Ok(Handled::Gone) => {}
                Err(Failure::Transient(e)) => return Err(e),
                Err(Failure::Item(msg)) => match record_failure(conn, &item, &msg, now_ms)? {
                    true => stats.dead_lettered += 1,
                    false => stats.retried += 1,
                },
            }
            n += 1;
            if n >= opts.batch.max(1) || started.elapsed() >= CHUNK_BUDGET || stop() {
                break;
            }
        }
        conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    })();
    if let Err(e) = outcome {
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        return Err(e);
    }
    Ok(stats)
}

enum Handled {
    Processed,
    FxPending,
    /// Finished, parked or rescheduled by someone else since it was listed.
    Gone,
}

enum Failure {
    /// The database is busy or full: not the item's fault, so not counted as a try.
    Transient(StoreError),
    /// Processing this item failed; counted as a try.
    Item(String),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Busy | StoreError::Full => Failure::Transient(e),
            other => Failure::Item(other.to_string()),
        }
    }
}

impl From<rusqlite::Error> for Failure {
    fn from(e: rusqlite::Error) -> Self {
        Failure::from(StoreError::from(e))
    }
}

/// The decision for one conversion, computed inside its transaction.
struct Decision {
    model: Model,
    touch: attribution::Touch,
    /// `None`: no rate yet (`fx_pending`).
    fx: Option<Reported>,
}

fn handle(
    conn: &mut Connection,
    listed: &Item,
    now_ms: i64,
    deadline: Duration,
) -> Result<Handled, Failure> {
    // Inside the chunk's transaction (see `drain_chunk`).
    let tx = conn.savepoint()?;
    let Some(item) = store::pipeline::claim(&tx, listed.id, now_ms)? else {
        return Ok(Handled::Gone);
    };
    let until = Instant::now() + deadline;
    tx.progress_handler(1_000, Some(move || Instant::now() > until))?;
    let decided = decide(&tx, &item.conversion_id);
    tx.progress_handler(0, None::<fn() -> bool>)?;
    let d = decided.map_err(|f| match f {
        Failure::Item(msg) if Instant::now() > until => Failure::Item(format!(
            "took longer than {}s ({msg})",
            deadline.as_secs_f32()
        )),
        other => other,
    })?;
    let campaign = d.touch.channel.campaign.as_deref();
    let attributed = Attributed {
        model: d.model.as_str(),
        session_id: d.touch.session_id.as_deref(),
        source: &d.touch.channel.source,
        medium: &d.touch.channel.medium,
        campaign,
    };
    let handled = match &d.fx {
        Some(fx) => {
            store::pipeline::finish(&tx, item.id, &item.conversion_id, &attributed, fx, now_ms)?;
            Handled::Processed
        }
        None => {
            store::pipeline::park(&tx, item.id, &item.conversion_id, &attributed)?;
            Handled::FxPending
        }
    };
    tx.commit()?;
    Ok(handled)
}

/// Attribution and currency for one conversion; reads only.
fn decide(conn: &Connection, conversion_id: &str) -> Result<Decision, Failure> {
    let w = store::pipeline::work(conn, conversion_id)?
        .ok_or_else(|| Failure::Item(format!("conversion {conversion_id} does not exist")))?;
    let site = store::sites::by_id(conn, &w.site_id)?
        .ok_or_else(|| Failure::Item(format!("site {} does not exist", w.site_id)))?;
    let model: Model = site.model.parse().map_err(Failure::Item)?;

    // The person: every visitor linked to the conversion's clientId, else its own visitor.
    let mut visitors = match &w.client_id {
        Some(c) => store::sessions::person(conn, &site.id, Identifier::Client(c))?,
        None => Vec::new(),
    };
    if !visitors.contains(&w.visitor_id) {
        visitors.push(w.visitor_id.clone());
    }
    let mut sessions = store::sessions::in_window(
        conn,
        &site.id,
        &visitors,
        w.occurred_at.saturating_sub(site.window_ms()),
        w.occurred_at,
    )?;
    if !sessions.iter().any(|s| s.id == w.session_id) {
        // The session the report was attached to always counts, even if the window rules
        // would now leave it out.
        sessions.extend(store::sessions::by_id(conn, &site.id, &w.session_id)?);
    }
    let touch = attribution::attribute(model, &sessions, site.domain.as_deref());

    let fx = match &w.value {
        None => Some(Reported::default()),
        Some(text) => {
            let amount =
                fx::decimal(text).map_err(|e| Failure::Item(format!("stored value {e}")))?;
            let target = site.currency.as_str();
            let minor = fx::minor_units(target);
            if w.currency == target {
                Some(Reported {
                    value: Some(fx::round_to_minor(amount, minor).to_string()),
                    currency: Some(target.to_owned()),
                    rate: Some("1".into()),
                    date: None,
                })
            } else {
                let day = chrono::DateTime::from_timestamp_millis(w.occurred_at)
                    .ok_or_else(|| {
                        Failure::Item(format!("occurred_at {} out of range", w.occurred_at))
                    })?
                    .date_naive()
                    .format("%Y-%m-%d")
                    .to_string();
                match (leg(conn, &w.currency, &day)?, leg(conn, target, &day)?) {
                    (Some(from), Some(to)) => {
                        let c = fx::convert(amount, &from, &to, minor).map_err(Failure::Item)?;
                        Some(Reported {
                            value: Some(c.value.to_string()),
                            currency: Some(target.to_owned()),
                            rate: Some(c.rate.to_string()),
                            date: c.date.map(|d| d.format("%Y-%m-%d").to_string()),
                        })
                    }
                    _ => None,
                }
            }
        }
    };
    Ok(Decision { model, touch, fx })
}

/// A currency's rate against EUR on `day` or the latest earlier day; `None` when there is none.
fn leg(conn: &Connection, currency: &str, day: &str) -> Result<Option<Leg>, Failure> {
    if currency == fx::BASE {
        return Ok(Some(Leg::Eur));
    }
    let Some((rate, date)) = store::rates::on_or_before(conn, currency, day)? else {
        return Ok(None);
    };
    let per_eur =
        fx::decimal(&rate).map_err(|e| Failure::Item(format!("stored {currency} rate {e}")))?;
    let date = chrono::NaiveDate::parse_from_str(&date, "%Y-%m-%d").map_err(|_| {
        Failure::Item(format!(
            "stored {currency} rate date {date:?} is not a date"
        ))
    })?;
    Ok(Some(Leg::Quoted { per_eur, date }))
}

/// Records a failed try in its own transaction; returns whether the item is now dead-lettered.
fn record_failure(
    conn: &mut Connection,
    listed: &Item,
    error: &str,
    now_ms: i64,
) -> store::Result<bool> {
    // Inside the chunk's transaction (see `drain_chunk`).
    let tx = conn.savepoint()?;
    let Some(item) = store::pipeline::claim(&tx, listed.id, now_ms)? else {
        return Ok(false);
    };
    let attempts = item.attempts + 1;
    let dead = attempts >= MAX_ATTEMPTS;
    if dead {
        store::pipeline::dead_letter(&tx, item.id, &item.conversion_id, attempts, error, now_ms)?;
    } else {
        let next = now_ms.saturating_add(backoff_ms(attempts, jitter()));
        store::pipeline::retry_later(&tx, item.id, attempts, next, error)?;
    }
    tx.commit()?;
    if dead {
        log::error!(
            "pipeline: conversion {} dead-lettered after {attempts} tries: {error}",
            item.conversion_id
        );
    } else {
        log::warn!(
            "pipeline: conversion {} failed (try {attempts} of {MAX_ATTEMPTS}): {error}",
            item.conversion_id
        );
    }
    Ok(dead)
}

/// The delay after the `attempts`-th failure: `BASE × 2^(attempts-1)`, capped, scaled by
/// `jitter` in [0.5, 1] so that items failing together do not retry together.
pub fn backoff_ms(attempts: i64, jitter: f64) -> i64 {
    let exp = (attempts - 1).clamp(0, 30) as u32;
    let full = BACKOFF_BASE_MS
        .saturating_mul(1i64 << exp)
        .min(BACKOFF_CAP_MS);
    let j = jitter.clamp(0.5, 1.0);
    ((full as f64) * j).round() as i64
}

/// A random factor in [0.5, 1] from the OS random source (0.75 if it fails: jitter is a courtesy).
fn jitter() -> f64 {
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
    /// Set by the first wake since the worker last looked: later wakes (one per accepted request)
    /// cost one atomic swap instead of a lock and a futex call.
    wake_pending: AtomicBool,
    /// Mirrors `state.stopped` for the drain loop's check between items, without the lock.
    stopping: AtomicBool,
}

/// Wakes the worker when work is committed; stops it at shutdown. Cheap to clone.
#[derive(Clone)]
pub struct Waker(Option<Arc<Shared>>);

impl Waker {
    /// A waker with no worker behind it (the pipeline is switched off).
    pub fn disabled() -> Waker {
        Waker(None)
    }

    pub fn wake(&self) {
        if let Some(s) = &self.0 {
            if s.wake_pending.swap(true, Ordering::AcqRel) {
                return;
            }
            s.state.lock().unwrap_or_else(|p| p.into_inner()).woken = true;
            s.cv.notify_one();
        }
    }

    /// Asks the worker to stop after the item in hand.
    pub fn stop(&self) {
        if let Some(s) = &self.0 {
            s.stopping.store(true, Ordering::SeqCst);
            s.state.lock().unwrap_or_else(|p| p.into_inner()).stopped = true;
            s.cv.notify_one();
        }
    }
}

/// Opens the worker's own connection and starts its thread; `gate` is the request writer's.
pub fn spawn(
    db: &Path,
    metrics: Metrics,
    gate: WriteGate,
) -> store::Result<(Waker, JoinHandle<()>)> {
    let conn = store::open(db)?;
    let shared = Arc::new(Shared::default());
    let s = shared.clone();
    let handle = std::thread::Builder::new()
        .name("pipeline".into())
        .spawn(move || run(conn, &metrics, &s, gate))
        .map_err(|e| StoreError::Other(e.to_string()))?;
    Ok((Waker(Some(shared)), handle))
}

fn run(mut conn: Connection, metrics: &Metrics, s: &Shared, gate: WriteGate) {
    let opts = Options {
        gate: Some(gate),
        ..Options::default()
    };
    let stop = || s.stopping.load(Ordering::SeqCst);
    loop {
        {
            let mut st = s.state.lock().unwrap_or_else(|p| p.into_inner());
            if st.stopped {
                break;
            }
            // Cleared before the pass: a wake during the pass triggers another one.
            st.woken = false;
            s.wake_pending.store(false, Ordering::Release);
        }
        let now = store::now_ms();
        let wait = match drain(&mut conn, metrics, now, &opts, &stop) {
            Ok(stats) => {
                if stats != DrainStats::default() {
                    log::debug!("pipeline: {stats:?}");
                }
                match store::pipeline::next_due(&conn) {
                    Ok(Some(due)) => {
                        let ms = due.saturating_sub(store::now_ms()).max(0) as u64;
                        Duration::from_millis(ms).min(POLL)
                    }
                    Ok(None) => POLL,
                    Err(e) => {
                        log::warn!("pipeline: cannot read the outbox: {e}");
                        POLL
                    }
                }
            }
            Err(e) => {
                log::warn!("pipeline: pass interrupted, retrying: {e}");
                POLL
            }
        };
        if wait.is_zero() {
            continue;
        }
        let st = s.state.lock().unwrap_or_else(|p| p.into_inner());
        let _ =
            s.cv.wait_timeout_while(st, wait, |st| !st.woken && !st.stopped)
                .unwrap_or_else(|p| p.into_inner());
    }
    log::debug!("pipeline stopped");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_within_its_jitter_and_is_capped() {
        assert_eq!(backoff_ms(1, 1.0), 1_000);
        assert_eq!(backoff_ms(1, 0.5), 500);
        assert_eq!(backoff_ms(2, 1.0), 2_000);
        assert_eq!(backoff_ms(9, 1.0), 256_000);
        assert_eq!(backoff_ms(11, 1.0), BACKOFF_CAP_MS);
        assert_eq!(backoff_ms(60, 1.0), BACKOFF_CAP_MS);
        // Out-of-range jitter is clamped, never zero or growing.
        assert_eq!(backoff_ms(3, 0.0), 2_000);
        assert_eq!(backoff_ms(3, 7.0), 4_000);
        for _ in 0..100 {
            let j = jitter();
            assert!((0.5..=1.0).contains(&j), "{j}");
        }
    }
}
