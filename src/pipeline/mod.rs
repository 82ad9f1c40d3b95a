//! The background pipeline (docs/decisions.md §5): drains the outbox after the 202 — attribution,
//! then currency conversion — at least once, every step idempotent. It never sees a request.
//!
//! One thread. It reads with its own connection: items are handled in chunks of as many as are
//! decided within [`CHUNK_BUDGET`] ([`BESIDE_CHUNK_BUDGET`] on PostgreSQL; one read transaction).
//! On SQLite each chunk goes to the request writer as one job, committed with whatever requests
//! share its batch — no transaction, fsync or write lock of its own — and the next chunk is decided
//! while it waits and commits; on PostgreSQL, which takes several writers at once, the pipeline
//! writes the chunk in a transaction of its own connection, beside the writer
//! ([`store::pipeline::writes_beside_the_writer`]), a pass at most every [`GATHER`]. Inside the
//! write (one savepoint per chunk; one per item only after the database refused an item's result,
//! see [`apply`]) each item is claimed again (still due, same number of tries), its result stored
//! and its outbox row deleted (or parked): a crash before the commit leaves the items due, a crash
//! after leaves them done, so nothing is lost or counted twice. A failing item is rescheduled with
//! exponential backoff and jitter and, after [`MAX_ATTEMPTS`] tries, dead-lettered (conversion
//! `failed`, last error kept); it never holds up the items behind it, and a slow one is interrupted
//! after [`ITEM_DEADLINE`]. A conversion whose rates are missing is parked as `fx_pending`;
//! `convapi rates import` makes parked items due again, and the worker notices within [`POLL`]. A
//! conversion without a value needs no rate: it is processed with no reporting value.
//!
//! Tests drive [`drain_once`] in-process against the database file of a server started with
//! `--pipeline off`, through a [`Writer`] of their own on that file: the same write path as the
//! worker's.

use std::collections::HashSet;
use std::time::Duration;

use crate::store::engine::AsConn;
use crate::store::engine::{Lasting, Location};

use crate::metrics::Metrics;
use crate::store::pipeline::Item;
use crate::store::{self, StoreError};
use crate::worker::{Backoff, Stop, Worker};
use crate::writer::{Queued, Writer};

mod apply;
mod decide;

pub use apply::backoff_ms;
use apply::{apply, Applied};
use decide::decide_chunk;

/// Failed tries after which an item is dead-lettered.
pub const MAX_ATTEMPTS: i64 = 10;
/// The delay after the first failure; it doubles with each further one.
pub const BACKOFF_BASE_MS: i64 = 1_000;
/// The longest delay between two tries.
pub const BACKOFF_CAP_MS: i64 = 15 * 60 * 1_000;
/// The delay before an item's next try, with jitter.
pub const BACKOFF: Backoff = Backoff {
    base_ms: BACKOFF_BASE_MS,
    cap_ms: BACKOFF_CAP_MS,
};
/// The longest the worker sleeps without looking at the outbox: rates imported by another
/// process make parked items due, and nothing else would wake the worker for them.
pub const POLL: Duration = Duration::from_secs(1);
/// Longest time one item may take before it is interrupted and counted as a failed try.
pub const ITEM_DEADLINE: Duration = Duration::from_secs(10);
/// Longest a chunk waits for queued requests to be written first (see
/// [`Writer::yield_to_queued`]): under a burst the pipeline slows to about one chunk per this
/// interval, and catches up afterwards.
pub const MAX_YIELD: Duration = Duration::from_millis(20);
/// How long after an unattributed order (one kept with no session) was received its identifiers
/// are resolved for the last time: the pipeline counts it as `(unattributed)` at once, keeps its
/// outbox row due at this time, and attributes it then if the pixel's batch has arrived meanwhile
/// (docs/decisions.md §5). One retry; `serve --unattributed-retry` changes the delay.
pub const UNATTRIBUTED_RETRY: Duration = Duration::from_secs(120);
/// The shortest wait after a pass that finished nothing while items were due (another node's
/// pipeline holds them).
pub const IDLE_RECHECK: Duration = Duration::from_millis(10);
/// Items are decided and written in chunks: as many items as are decided within this time go to
/// the writer as one job (see [`drain`]). It bounds how long one job holds up the request writer.
pub const CHUNK_BUDGET: Duration = Duration::from_millis(2);
/// [`CHUNK_BUDGET`] where the pipeline writes beside the writer (PostgreSQL): its chunk holds up
/// no request, and each chunk costs a transaction and its commit's WAL flush.
pub const BESIDE_CHUNK_BUDGET: Duration = Duration::from_millis(20);
/// Where the pipeline writes beside the writer, the shortest time from the start of one pass to
/// the start of the next: every accepted request wakes the pipeline, and passes of one or two items
/// each would cost a transaction apiece; what arrives within this time is taken in one pass.
pub const GATHER: Duration = Duration::from_millis(20);

/// How one drain pass runs.
#[derive(Clone)]
pub struct Options {
    /// Items read from the outbox per query.
    pub batch: usize,
    /// See [`ITEM_DEADLINE`].
    pub item_deadline: Duration,
    /// See [`UNATTRIBUTED_RETRY`].
    pub unattributed_retry: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            batch: 64,
            item_deadline: ITEM_DEADLINE,
            unattributed_retry: UNATTRIBUTED_RETRY,
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainStats {
    /// Items whose attribution and currency were stored: finished (outbox row deleted), or held
    /// for the retry of an order with no session (counted again when the retry finishes it).
    pub processed: usize,
    /// Items parked as `fx_pending` (attribution stored, no rate yet).
    pub fx_pending: usize,
    /// Items that failed and were rescheduled.
    pub retried: usize,
    /// Items that failed for the last time.
    pub dead_lettered: usize,
}

/// Handles every item due at `now_ms`, each once, in order of due time, reading with `conn` and
/// writing through `writer`. Items that fail are rescheduled after `now_ms`, so they wait for a
/// later pass.
pub fn drain_once(
    conn: &impl AsConn,
    writer: &Writer,
    metrics: &Metrics,
    now_ms: i64,
) -> store::Result<DrainStats> {
    drain(conn, writer, metrics, now_ms, &Options::default(), &|| {
        false
    })
}

/// [`drain_once`] with options, stopping early (between chunks) when `stop` says so.
/// Returns `Err(Busy)` when the database stays locked or the writer refuses work; what was
/// committed before stays done.
///
/// Each chunk is decided first — attribution and currency for as many items as fit in
/// [`CHUNK_BUDGET`], read in one read transaction of the pipeline's connection — and then written
/// in one go by [`apply`]: as one job of the writer, committed with whatever requests share its
/// batch, or on PostgreSQL in a transaction of `conn`. `apply` re-checks every item inside the
/// write transaction, so an item that changed in between is left alone.
pub fn drain(
    conn: &impl AsConn,
    writer: &Writer,
    metrics: &Metrics,
    now_ms: i64,
    opts: &Options,
    stop: &dyn Fn() -> bool,
) -> store::Result<DrainStats> {
    let mut stats = DrainStats::default();
    let mut seen = HashSet::new();
    let beside = store::pipeline::writes_beside_the_writer(conn);
    /// Ends the claims of one listing however the pass leaves it (done, stopped, failed).
    struct Claims<'a, C: AsConn>(&'a C);
    impl<C: AsConn> Drop for Claims<'_, C> {
        fn drop(&mut self) {
            if let Err(e) = store::pipeline::release_claims(self.0) {
                log::warn!("pipeline: cannot release its claims: {e}");
            }
        }
    }
    loop {
        let items = store::pipeline::due(conn, now_ms, opts.batch.max(1))?;
        let _claims = Claims(conn);
        // An item still due after its turn (its failure could not be recorded, or rates arrived
        // while it was being parked) is not taken again in this pass: the pass always ends.
        let fresh: Vec<Item> = items.into_iter().filter(|i| seen.insert(i.id)).collect();
        if fresh.is_empty() {
            return Ok(stats);
        }
        let mut fresh = fresh.into_iter().peekable();
        // On SQLite, one chunk at a time waits in the writer's queue or commits (an fsync) while
        // the next is decided.
        let mut queued: Option<Queued<Vec<Applied>>> = None;
        while fresh.peek().is_some() {
            if stop() {
                settle(queued.take(), &mut stats, metrics)?;
                return Ok(stats);
            }
            if beside {
                let decided = decide_chunk(conn, &mut fresh, opts)?;
                let applied = store::write_tx(conn, |c| apply(c, decided, now_ms))?;
                tally(applied, &mut stats, metrics);
                continue;
            }
            let decided = match decide_chunk(conn, &mut fresh, opts) {
                Ok(decided) => decided,
                Err(e) => {
                    let _ = settle(queued.take(), &mut stats, metrics);
                    return Err(e);
                }
            };
            settle(queued.take(), &mut stats, metrics)?;
            // Queued requests go first.
            writer.yield_to_queued(MAX_YIELD);
            queued = Some(
                writer
                    .submit_queued(move |c| apply(c, decided, now_ms))
                    .map_err(|e| e.into_store_error("pipeline"))?,
            );
        }
        settle(queued.take(), &mut stats, metrics)?;
    }
}

/// Waits for a chunk queued in the writer and counts what it did.
fn settle(
    queued: Option<Queued<Vec<Applied>>>,
    stats: &mut DrainStats,
    metrics: &Metrics,
) -> store::Result<()> {
    if let Some(q) = queued {
        tally(
            q.wait().map_err(|e| e.into_store_error("pipeline"))?,
            stats,
            metrics,
        );
    }
    Ok(())
}

/// Counts and logs a chunk's outcomes, once committed.
fn tally(applied: Vec<Applied>, stats: &mut DrainStats, metrics: &Metrics) {
    for a in applied {
        match a {
            Applied::Processed => {
                stats.processed += 1;
                metrics.inc_processed();
            }
            // Counted in the metric once, when its retry finishes it.
            Applied::Held => stats.processed += 1,
            Applied::FxPending => stats.fx_pending += 1,
            Applied::Again | Applied::Gone => {}
            Applied::Retried {
                conversion_id,
                attempts,
                error,
            } => {
                stats.retried += 1;
                log::warn!(
                    "pipeline: conversion {conversion_id} failed (try {attempts} of {MAX_ATTEMPTS}): {error}"
                );
            }
            Applied::DeadLettered {
                conversion_id,
                attempts,
                error,
            } => {
                stats.dead_lettered += 1;
                metrics.inc_dead_lettered();
                log::error!(
                    "pipeline: conversion {conversion_id} dead-lettered after {attempts} tries: {error}"
                );
            }
        }
    }
}

/// Wakes the pipeline when work is committed (a disabled one when it is switched off).
pub use crate::worker::Waker;

/// Opens the worker's own connection (for its reads, and on PostgreSQL its writes) and starts its
/// thread; on SQLite results are written through `writer`. [`Worker::waker`] wakes it when work is committed.
pub fn spawn(
    location: &Location,
    settings: &store::Settings,
    metrics: Metrics,
    writer: Writer,
    opts: Options,
) -> store::Result<Worker> {
    let mut conn = store::engine::Lasting::open(location, settings)?;
    let mut worker = Worker::new();
    let mut last: Option<std::time::Instant> = None;
    worker
        .spawn("pipeline".into(), Duration::ZERO, move |stop| {
            pass(&mut conn, &metrics, &writer, &opts, stop, &mut last)
        })
        .map_err(|e| StoreError::Other(e.to_string()))?;
    Ok(worker)
}

/// One pass of the thread: drains what is due, then says when the next item is (at most
/// [`POLL`] away).
fn pass(
    lasting: &mut Lasting,
    metrics: &Metrics,
    writer: &Writer,
    opts: &Options,
    stop: &Stop,
    last: &mut Option<std::time::Instant>,
) -> Duration {
    let drained = lasting.get().and_then(|conn| {
        if store::pipeline::writes_beside_the_writer(conn) {
            if let Some(wait) = last.and_then(|t| GATHER.checked_sub(t.elapsed())) {
                std::thread::sleep(wait);
            }
            *last = Some(std::time::Instant::now());
        }
        let now = store::now_ms();
        Ok((
            conn,
            drain(conn, writer, metrics, now, opts, &|| stop.requested())?,
        ))
    });
    match drained {
        Ok((conn, stats)) => {
            let idle = stats == DrainStats::default();
            if !idle {
                log::debug!("pipeline: {stats:?}");
            }
            match store::pipeline::next_due(conn) {
                Ok(Some(due)) => {
                    let ms = due.saturating_sub(store::now_ms()).max(0) as u64;
                    // Items due that a pass left alone are claimed by another node's pipeline
                    // (PostgreSQL): looked at again after a pause, not in a loop of listings.
                    let floor = if idle { IDLE_RECHECK } else { Duration::ZERO };
                    Duration::from_millis(ms).clamp(floor, POLL)
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
    }
}
