//! The background pipeline (CONTRACT §5): drains the outbox after the 202 — attribution, then
//! currency conversion — at least once, every step idempotent. It never sees a request.
//!
//! One thread. It reads with its own connection and writes through the request writer: items are
//! handled in chunks of as many as are decided within [`CHUNK_BUDGET`] (one read transaction),
//! and each chunk goes to the writer as one job, committed with whatever requests share its batch
//! — no transaction, fsync or write lock of its own. Inside the job each item has a savepoint that
//! claims the item again (still due, same number of tries), stores the result and deletes (or
//! parks) the outbox row: a crash before the commit leaves the items due, a crash after leaves
//! them done, so nothing is lost or counted twice. A failing item is rescheduled with
//! exponential backoff and jitter and, after [`MAX_ATTEMPTS`] tries, dead-lettered (conversion
//! `failed`, last error kept); it never holds up the items behind it, and a slow one is interrupted
//! after [`ITEM_DEADLINE`]. A conversion whose rates are missing is parked as `fx_pending`; `convapi
//! rates import` makes parked items due again, and the worker notices within [`POLL`]. A conversion
//! without a value needs no rate: it is processed with no reporting value.
//!
//! Tests drive [`drain_once`] in-process against the database file of a server started with
//! `--pipeline off`; without a writer, each chunk is written in a transaction of the pipeline's own
//! connection instead ([`store::write_tx`]).

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
use crate::writer::{WriteError, Writer};

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
/// Longest a chunk waits for queued requests to be written first (see
/// [`Writer::yield_to_queued`]): under a burst the pipeline slows to about one chunk per this
/// interval, and catches up afterwards.
pub const MAX_YIELD: Duration = Duration::from_millis(20);
/// Items are decided and written in chunks: as many items as are decided within this time go to
/// the writer as one job (see [`drain`]). It bounds how long one job holds up the request writer.
pub const CHUNK_BUDGET: Duration = Duration::from_millis(2);

/// How one drain pass runs.
#[derive(Clone)]
pub struct Options {
    /// Items read from the outbox per query.
    pub batch: usize,
    /// See [`ITEM_DEADLINE`].
    pub item_deadline: Duration,
    /// Where results are written. `Some` in `serve`: each chunk becomes one job of the request
    /// writer, committed with the requests of its batch (no transaction or fsync of its own).
    /// `None`: one [`store::write_tx`] transaction per chunk on the pipeline's own connection
    /// (tests, and any caller without a writer).
    pub writer: Option<Writer>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            batch: 64,
            item_deadline: ITEM_DEADLINE,
            writer: None,
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
pub fn drain_once(conn: &Connection, metrics: &Metrics, now_ms: i64) -> store::Result<DrainStats> {
    drain(conn, metrics, now_ms, &Options::default(), &|| false)
}

/// [`drain_once`] with options, stopping early (between chunks) when `stop` says so.
/// Returns `Err(Busy)` when the database stays locked or the writer refuses work; what was
/// committed before stays done.
///
/// Each chunk is decided first — attribution and currency for as many items as fit in
/// [`CHUNK_BUDGET`], read in one read transaction of the pipeline's connection — and then written
/// in one go by [`apply`], which re-checks every item inside the write transaction, so an item
/// that changed in between is left alone.
pub fn drain(
    conn: &Connection,
    metrics: &Metrics,
    now_ms: i64,
    opts: &Options,
    stop: &dyn Fn() -> bool,
) -> store::Result<DrainStats> {
    let mut stats = DrainStats::default();
    let mut seen = HashSet::new();
    loop {
        let items = store::pipeline::due(conn, now_ms, opts.batch.max(1))?;
        // An item still due after its turn (its failure could not be recorded, or rates arrived
        // while it was being parked) is not taken again in this pass: the pass always ends.
        let fresh: Vec<Item> = items.into_iter().filter(|i| seen.insert(i.id)).collect();
        if fresh.is_empty() {
            return Ok(stats);
        }
        let mut fresh = fresh.into_iter().peekable();
        while fresh.peek().is_some() {
            if stop() {
                return Ok(stats);
            }
            if let Some(w) = &opts.writer {
                w.yield_to_queued(MAX_YIELD);
            }
            let decided = decide_chunk(conn, &mut fresh, opts)?;
            let applied = match &opts.writer {
                Some(w) => w
                    .submit(move |c| apply(c, decided, now_ms))
                    .map_err(|e| match e {
                        WriteError::Unavailable(m) => {
                            log::debug!("pipeline: writer unavailable: {m}");
                            StoreError::Busy
                        }
                        WriteError::Failed(e) => e,
                    })?,
                None => store::write_tx(conn, |c| apply(c, decided, now_ms))?,
            };
            // Counted and logged once committed.
            for a in applied {
                match a {
                    Applied::Processed => {
                        stats.processed += 1;
                        metrics.inc_processed();
                    }
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
    }
}

/// Decides items from `items` until [`CHUNK_BUDGET`] is spent or `opts.batch` items are decided,
/// in one read transaction. A transient failure (busy, full) ends the pass; nothing is written.
fn decide_chunk(
    conn: &Connection,
    items: &mut std::iter::Peekable<std::vec::IntoIter<Item>>,
    opts: &Options,
) -> store::Result<Vec<Decided>> {
    let started = Instant::now();
    store::read(conn, |conn| {
        let mut decided = Vec::new();
        for item in items.by_ref() {
            let d = match decide_item(conn, &item.conversion_id, opts.item_deadline) {
                Ok(decision) => decision.into_decided(item),
                Err(Failure::Transient(e)) => return Err(e),
                Err(Failure::Item(error)) => Decided::Fail { item, error },
            };
            decided.push(d);
            if decided.len() >= opts.batch.max(1) || started.elapsed() >= CHUNK_BUDGET {
                break;
            }
        }
        Ok(decided)
    })
}

/// [`decide`] for one item, interrupted after `deadline`.
fn decide_item(
    conn: &Connection,
    conversion_id: &str,
    deadline: Duration,
) -> Result<Decision, Failure> {
    let until = Instant::now() + deadline;
    conn.progress_handler(1_000, Some(move || Instant::now() > until))?;
    let decided = decide(conn, conversion_id);
    conn.progress_handler(0, None::<fn() -> bool>)?;
    decided.map_err(|f| match f {
        Failure::Item(msg) if Instant::now() > until => Failure::Item(format!(
            "took longer than {}s ({msg})",
            deadline.as_secs_f32()
        )),
        other => other,
    })
}

/// What was decided for one item, to be written by [`apply`].
enum Decided {
    Finish {
        item: Item,
        attribution: Attribution,
        fx: Reported,
    },
    /// No rate yet for `from` or `to` on `day`: park as `fx_pending`.
    Park {
        item: Item,
        attribution: Attribution,
        from: String,
        to: String,
        day: String,
    },
    Fail {
        item: Item,
        error: String,
    },
}

/// The attribution to store, owned (it travels to the writer thread).
struct Attribution {
    model: &'static str,
    session_id: Option<String>,
    source: String,
    medium: String,
    campaign: Option<String>,
}

impl Attribution {
    fn borrowed(&self) -> Attributed<'_> {
        Attributed {
            model: self.model,
            session_id: self.session_id.as_deref(),
            source: &self.source,
            medium: &self.medium,
            campaign: self.campaign.as_deref(),
        }
    }
}

/// What [`apply`] did with one decided item.
enum Applied {
    Processed,
    FxPending,
    /// Left due: rates for it arrived after it was decided; the next pass takes it again.
    Again,
    /// Finished, parked or rescheduled by someone else since it was listed.
    Gone,
    Retried {
        conversion_id: String,
        attempts: i64,
        error: String,
    },
    DeadLettered {
        conversion_id: String,
        attempts: i64,
        error: String,
    },
}

/// Writes a chunk of decided items inside the caller's write transaction, each in its own
/// savepoint. Every item is claimed again first: one that is no longer due, or whose tries changed
/// since it was decided, is left alone. An item whose write fails is rolled back alone and counted
/// as a failed try; a transient error (busy, full), or one that cost the whole transaction, fails
/// the whole chunk, which then stays due.
fn apply(conn: &Connection, decided: Vec<Decided>, now_ms: i64) -> store::Result<Vec<Applied>> {
    let mut applied = Vec::with_capacity(decided.len());
    for d in decided {
        let done = match store::savepoint(conn, |conn| apply_one(conn, &d, now_ms)) {
            Ok(a) => a,
            Err(e) if e.is_transient() || conn.is_autocommit() => return Err(e),
            Err(e) => match claim_unchanged(conn, d.item(), now_ms)? {
                Some(current) => record_failure(conn, &current, &e.to_string(), now_ms)?,
                None => Applied::Gone,
            },
        };
        applied.push(done);
    }
    Ok(applied)
}

fn apply_one(conn: &Connection, d: &Decided, now_ms: i64) -> store::Result<Applied> {
    let Some(item) = claim_unchanged(conn, d.item(), now_ms)? else {
        return Ok(Applied::Gone);
    };
    Ok(match d {
        Decided::Finish {
            attribution, fx, ..
        } => {
            let a = attribution.borrowed();
            store::pipeline::finish(conn, item.id, &item.conversion_id, &a, fx, now_ms)?;
            Applied::Processed
        }
        Decided::Park {
            attribution,
            from,
            to,
            day,
            ..
        } => {
            // `rates import` makes parked items due in its own transaction: had it committed
            // after this item was decided, parking it now would leave it parked until the next
            // import. With both rates present now, the item stays due instead.
            let has = |currency: &str| -> store::Result<bool> {
                Ok(currency == fx::BASE
                    || store::rates::on_or_before(conn, currency, day)?.is_some())
            };
            if has(from)? && has(to)? {
                Applied::Again
            } else {
                let a = attribution.borrowed();
                store::pipeline::park(conn, item.id, &item.conversion_id, &a)?;
                Applied::FxPending
            }
        }
        Decided::Fail { error, .. } => record_failure(conn, &item, error, now_ms)?,
    })
}

impl Decided {
    fn item(&self) -> &Item {
        match self {
            Decided::Finish { item, .. }
            | Decided::Park { item, .. }
            | Decided::Fail { item, .. } => item,
        }
    }
}

/// The item as it is now, if it is still due and has the tries it had when it was decided.
fn claim_unchanged(conn: &Connection, listed: &Item, now_ms: i64) -> store::Result<Option<Item>> {
    Ok(store::pipeline::claim(conn, listed.id, now_ms)?.filter(|i| i.attempts == listed.attempts))
}

/// Records a failed try; the item is dead-lettered at [`MAX_ATTEMPTS`].
fn record_failure(
    conn: &Connection,
    item: &Item,
    error: &str,
    now_ms: i64,
) -> store::Result<Applied> {
    let attempts = item.attempts + 1;
    let conversion_id = item.conversion_id.clone();
    let error = error.to_owned();
    if attempts >= MAX_ATTEMPTS {
        store::pipeline::dead_letter(conn, item.id, &conversion_id, attempts, &error, now_ms)?;
        Ok(Applied::DeadLettered {
            conversion_id,
            attempts,
            error,
        })
    } else {
        let next = now_ms.saturating_add(backoff_ms(attempts, jitter()));
        store::pipeline::retry_later(conn, item.id, attempts, next, &error)?;
        Ok(Applied::Retried {
            conversion_id,
            attempts,
            error,
        })
    }
}

enum Failure {
    /// The database is busy or full: not the item's fault, so not counted as a try.
    Transient(StoreError),
    /// Processing this item failed; counted as a try.
    Item(String),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        if e.is_transient() {
            Failure::Transient(e)
        } else {
            Failure::Item(e.to_string())
        }
    }
}

impl From<rusqlite::Error> for Failure {
    fn from(e: rusqlite::Error) -> Self {
        Failure::from(StoreError::from(e))
    }
}

/// The decision for one conversion, computed on a snapshot and written by [`apply`].
struct Decision {
    model: Model,
    touch: attribution::Touch,
    /// `Err((from, to, day))`: no rate yet for one of them (`fx_pending`).
    fx: Result<Reported, (String, String, String)>,
}

impl Decision {
    fn into_decided(self, item: Item) -> Decided {
        let channel = self.touch.channel;
        let attribution = Attribution {
            model: self.model.as_str(),
            session_id: self.touch.session_id,
            source: channel.source,
            medium: channel.medium,
            campaign: channel.campaign,
        };
        match self.fx {
            Ok(fx) => Decided::Finish {
                item,
                attribution,
                fx,
            },
            Err((from, to, day)) => Decided::Park {
                item,
                attribution,
                from,
                to,
                day,
            },
        }
    }
}

/// Attribution and currency for one conversion; reads only.
fn decide(conn: &Connection, conversion_id: &str) -> Result<Decision, Failure> {
    let w = store::conversions::by_id(conn, conversion_id)?
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
        None => Ok(Reported::default()),
        Some(text) => {
            let amount =
                fx::decimal(text).map_err(|e| Failure::Item(format!("stored value {e}")))?;
            let target = site.currency.as_str();
            let minor = fx::minor_units(target);
            if w.currency == target {
                Ok(Reported {
                    value: Some(fx::round_to_minor(amount, minor).to_string()),
                    currency: Some(target.to_owned()),
                    rate: Some("1".into()),
                    date: None,
                })
            } else {
                let day = chrono::DateTime::from_timestamp_millis(w.occurred_at)
                    .map(|t| fx::format_day(t.date_naive()))
                    .ok_or_else(|| {
                        Failure::Item(format!("occurred_at {} out of range", w.occurred_at))
                    })?;
                match (leg(conn, &w.currency, &day)?, leg(conn, target, &day)?) {
                    (Some(from), Some(to)) => {
                        let c = fx::convert(amount, &from, &to, minor).map_err(Failure::Item)?;
                        Ok(Reported {
                            value: Some(c.value.to_string()),
                            currency: Some(target.to_owned()),
                            rate: Some(c.rate.to_string()),
                            date: c.date.map(fx::format_day),
                        })
                    }
                    _ => Err((w.currency.clone(), target.to_owned(), day)),
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
    let date = fx::parse_day(&date).map_err(|_| {
        Failure::Item(format!(
            "stored {currency} rate date {date:?} is not a date"
        ))
    })?;
    Ok(Some(Leg::Quoted { per_eur, date }))
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

/// Opens the worker's own connection (for its reads) and starts its thread; results are written
/// through `writer`.
pub fn spawn(
    db: &Path,
    metrics: Metrics,
    writer: Writer,
) -> store::Result<(Waker, JoinHandle<()>)> {
    let conn = store::open(db)?;
    let shared = Arc::new(Shared::default());
    let s = shared.clone();
    let handle = std::thread::Builder::new()
        .name("pipeline".into())
        .spawn(move || run(conn, &metrics, &s, writer))
        .map_err(|e| StoreError::Other(e.to_string()))?;
    Ok((Waker(Some(shared)), handle))
}

fn run(conn: Connection, metrics: &Metrics, s: &Shared, writer: Writer) {
    let opts = Options {
        writer: Some(writer),
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
        let wait = match drain(&conn, metrics, now, &opts, &stop) {
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
    use crate::store::conversions::{self, Conversion, Source};
    use crate::store::sessions::{self, Session};
    use crate::store::{sites, tenants};

    const DAY_MS: i64 = 86_400_000;

    /// A database with one EUR site and one USD conversion waiting in the outbox (no rates yet).
    fn one_usd_conversion(dir: &std::path::Path) -> (Connection, i64) {
        let conn = store::open(&dir.join("t.db")).unwrap();
        let now = store::now_ms();
        tenants::create(&conn, "t1", "T", now).unwrap();
        let site = sites::NewSite {
            id: "11111111-1111-4111-8111-111111111111",
            tenant_id: "t1",
            tracker_id: "trk",
            name: "S",
            domain: None,
            currency: "EUR",
            window_days: 30,
            model: "last_touch",
        };
        sites::create(&conn, &site, now).unwrap();
        sessions::ensure_visitor(&conn, site.id, "v1", now).unwrap();
        let session = Session {
            id: "s1".into(),
            visitor_id: "v1".into(),
            client_id: None,
            started_at: now - DAY_MS,
            last_activity_at: now - DAY_MS,
            landing_url: None,
            referrer: None,
            campaign: Default::default(),
        };
        sessions::insert(&conn, site.id, &session).unwrap();
        let c = Conversion {
            id: "c1".into(),
            site_id: site.id.into(),
            order_id: Some("o1".into()),
            kind: "purchase".into(),
            session_id: "s1".into(),
            visitor_id: "v1".into(),
            client_id: None,
            value: Some("10.00".into()),
            currency: "USD".into(),
            occurred_at: now,
        };
        conversions::record(&conn, &c, Source::Api, now).unwrap();
        (conn, now)
    }

    fn due_now(conn: &Connection, now: i64) -> std::iter::Peekable<std::vec::IntoIter<Item>> {
        store::pipeline::due(conn, now, 10)
            .unwrap()
            .into_iter()
            .peekable()
    }

    #[test]
    fn an_item_decided_without_rates_is_not_parked_when_rates_arrived_before_it_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let (conn, now) = one_usd_conversion(dir.path());
        let decided = decide_chunk(&conn, &mut due_now(&conn, now), &Options::default()).unwrap();
        assert!(matches!(decided.as_slice(), [Decided::Park { .. }]));
        // `rates import` commits in between: the rate, and every parked item made due.
        let day = chrono::DateTime::from_timestamp_millis(now)
            .unwrap()
            .date_naive();
        store::rates::upsert(&conn, "USD", &day.to_string(), "1.1").unwrap();
        store::pipeline::unpark(&conn, now).unwrap();

        let applied = store::write_tx(&conn, |c| apply(c, decided, now)).unwrap();
        assert!(matches!(applied.as_slice(), [Applied::Again]));
        let state = store::pipeline::item_state(&conn, "c1").unwrap().unwrap();
        assert_eq!(state.next_attempt_at, Some(now), "left due, not parked");
        // The next pass finishes it with the rate.
        let stats = drain_once(&conn, &Metrics::default(), now).unwrap();
        assert_eq!(stats.processed, 1);
        assert!(store::pipeline::item_state(&conn, "c1").unwrap().is_none());
    }

    #[test]
    fn an_item_decided_without_rates_is_parked_when_none_arrived() {
        let dir = tempfile::tempdir().unwrap();
        let (conn, now) = one_usd_conversion(dir.path());
        let decided = decide_chunk(&conn, &mut due_now(&conn, now), &Options::default()).unwrap();
        let applied = store::write_tx(&conn, |c| apply(c, decided, now)).unwrap();
        assert!(matches!(applied.as_slice(), [Applied::FxPending]));
        let state = store::pipeline::item_state(&conn, "c1").unwrap().unwrap();
        assert_eq!(state.next_attempt_at, None, "parked");
    }

    #[test]
    fn an_item_whose_tries_changed_after_it_was_decided_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (conn, now) = one_usd_conversion(dir.path());
        store::rates::upsert(&conn, "USD", "2000-01-01", "1.1").unwrap();
        let decided = decide_chunk(&conn, &mut due_now(&conn, now), &Options::default()).unwrap();
        assert!(matches!(decided.as_slice(), [Decided::Finish { .. }]));
        // Someone else recorded a failed try in between (still due).
        let item = store::pipeline::due(&conn, now, 1).unwrap().remove(0);
        store::pipeline::retry_later(&conn, item.id, 1, now, "elsewhere").unwrap();
        let applied = store::write_tx(&conn, |c| apply(c, decided, now)).unwrap();
        assert!(matches!(applied.as_slice(), [Applied::Gone]));
        let state = store::pipeline::item_state(&conn, "c1").unwrap().unwrap();
        assert_eq!(state.attempts, 1);
        assert_eq!(state.last_error.as_deref(), Some("elsewhere"));
    }

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
