//! The pruner (docs/decisions.md §9): a background thread that deletes each site's pixel data —
//! sessions, their events, visitors left without a session — once it is older than the site's
//! `retain_days`, with the events its webhook sources received (and the payloads kept with them),
//! and the site's conversions as well when it set `expire_conversions`. Conversions
//! that stay keep what the pipeline stored on them (attribution, reporting value), so the order
//! status and the report read the same after their sessions are gone. It also removes the rows of
//! each site marked deleted (`ops::sites::delete`), the same way, the site's row last, and test
//! data (what test keys sent) 7 days after it was received.
//!
//! It never holds the write lock long: it writes through the request writer in jobs of about
//! [`BATCH_ROWS`] deleted rows, waits for queued requests before each job
//! ([`Writer::yield_to_queued`]) and pauses between jobs, [`PAUSE_FACTOR`] times as long as the
//! job took and at least [`PAUSE`], so that it never takes more than a tenth of the writer's time. After deleting it gives the
//! freed pages back to the file system, [`store::retention::RECLAIM_PAGES`] per job. It wakes
//! every `serve --prune-every` ([`EVERY`] by default), the first time one interval after the server
//! started. Its SQL is
//! `store::retention`'s; it decides only what goes when.
//!
//! Tests call [`prune_once`] on a connection of their own, through a [`Writer`] of their own: the
//! same write path as the thread's.

use std::time::Duration;

use crate::store::engine::{AsConn, Conn};
use crate::store::engine::{Lasting, Location};

use crate::metrics::Metrics;
use crate::store::retention::{Pruned, RECLAIM_PAGES};
use crate::store::{self, StoreError};
use crate::worker::{Stop, Worker};
use crate::writer::Writer;

/// How often the pruner looks for data past its retention, by default (`serve --prune-every`).
pub const EVERY: Duration = Duration::from_secs(60);
/// Rows one job deletes at most (a session's events count one each).
pub const BATCH_ROWS: usize = 500;
/// Test conversions one job deletes at most: each goes with its outbox row, deliveries and
/// adjustments, about five rows.
const TEST_BATCH: usize = BATCH_ROWS / 5;
/// The shortest pause between two jobs.
pub const PAUSE: Duration = Duration::from_millis(10);
/// After each job the pruner pauses this many times as long as the job took (waiting for its
/// commit included), so that it takes at most a tenth of the writer's time however busy the
/// writer is: measured with 1,000,000 rows to prune (`scripts/bench/retention.sh`), pruning with
/// only the fixed pause cost the conversions endpoint 15 % of its throughput.
pub const PAUSE_FACTOR: u32 = 9;
/// Longest the pruner waits for queued requests to be written before its next job.
const MAX_YIELD: Duration = Duration::from_millis(20);
const DAY_MS: i64 = 86_400_000;

/// Deletes everything past its retention at `now_ms`, then gives the free pages back; reads with
/// `conn`, writes through `writer`.
pub fn prune_once(conn: &impl AsConn, writer: &Writer, now_ms: i64) -> store::Result<Pruned> {
    prune(conn, now_ms, writer, &Metrics::default(), &|| false)
}

/// Runs one job through the writer, then pauses (see [`PAUSE_FACTOR`]).
fn job<T: Send + 'static>(
    writer: &Writer,
    f: impl FnOnce(&Conn) -> store::Result<T> + Send + 'static,
) -> store::Result<T> {
    writer.yield_to_queued(MAX_YIELD);
    let started = std::time::Instant::now();
    let out = writer.submit(f).map_err(|e| e.into_store_error("pruner"));
    std::thread::sleep(PAUSE.max(started.elapsed() * PAUSE_FACTOR));
    out
}

/// [`prune_once`], counting deleted rows in `metrics` as each job commits, and stopping between
/// jobs when `stop` says so. What was committed before an error stays done; the next pass goes on
/// from there.
pub fn prune(
    conn: &impl AsConn,
    now_ms: i64,
    writer: &Writer,
    metrics: &Metrics,
    stop: &dyn Fn() -> bool,
) -> store::Result<Pruned> {
    // On PostgreSQL one node of the cluster prunes at a time; the others skip the pass.
    if !store::retention::take_lead(conn)? {
        log::debug!("pruner: another node is pruning");
        return Ok(Pruned::default());
    }
    struct Lead<'a, C: AsConn>(&'a C);
    impl<C: AsConn> Drop for Lead<'_, C> {
        fn drop(&mut self) {
            if let Err(e) = store::retention::end_lead(self.0) {
                log::warn!("pruner: cannot give up the lead: {e}");
            }
        }
    }
    let _lead = Lead(conn);
    let today = store::salts::day_of(now_ms);
    job(writer, move |c| store::retention::drop_past_salts(c, today))?;
    let mut total = Pruned::default();
    for site in store::read(conn, |c| store::retention::deleted_sites(c))? {
        loop {
            if stop() {
                return Ok(total);
            }
            let id = site.clone();
            let done = job(writer, move |c| {
                store::retention::purge_site(c, &id, BATCH_ROWS)
            })?;
            total.add(&done);
            metrics.inc_rows_pruned(done.rows() as u64);
            if done.sites > 0 || done.rows() == 0 {
                break;
            }
        }
    }
    // Test data goes 7 days after it was received, whatever the site's retention.
    let cutoff = now_ms - store::retention::TEST_DATA_DAYS * DAY_MS;
    let mut tests = store::read(conn, |c| store::retention::has_test_data_before(c, cutoff))?;
    while tests {
        if stop() {
            return Ok(total);
        }
        let n = job(writer, move |c| {
            store::retention::purge_test_data(c, None, cutoff, TEST_BATCH)
        })?;
        total.conversions += n;
        metrics.inc_rows_pruned(n as u64);
        tests = n > 0;
    }
    let policies = store::read(conn, |c| store::retention::policies(c))?;
    let mut hook_events = 0;
    for p in policies {
        let cutoff = now_ms - p.retain_days * DAY_MS;
        // Checked on the pruner's own connection first: a site with nothing to prune costs the
        // writer no job.
        let (mut sessions, mut conversions, mut hashes, mut hooks) = store::read(conn, |c| {
            Ok::<_, StoreError>((
                store::retention::has_old_sessions(c, &p.site_id, cutoff)?,
                p.expire_conversions
                    && store::retention::has_old_conversions(c, &p.site_id, cutoff)?,
                !p.expire_conversions
                    && store::retention::has_old_user_hashes(c, &p.site_id, cutoff)?,
                store::retention::has_old_hook_events(c, &p.site_id, cutoff)?,
            ))
        })?;
        // Webhook events (and the payloads kept with them) are raw data like the pixel's.
        while hooks {
            if stop() {
                return Ok(total);
            }
            let site = p.site_id.clone();
            let n = job(writer, move |c| {
                store::retention::prune_hook_events(c, &site, cutoff, BATCH_ROWS)
            })?;
            hook_events += n;
            metrics.inc_rows_pruned(n as u64);
            hooks = n > 0;
        }
        // Kept conversions keep no hashed e-mail or phone past the retention (docs/decisions.md §13).
        while hashes {
            if stop() {
                return Ok(total);
            }
            let site = p.site_id.clone();
            let n = job(writer, move |c| {
                store::retention::drop_old_user_hashes(c, &site, cutoff, BATCH_ROWS)
            })?;
            hashes = n > 0;
        }
        while sessions {
            if stop() {
                return Ok(total);
            }
            let site = p.site_id.clone();
            let done = job(writer, move |c| {
                store::retention::prune_sessions(c, &site, cutoff, BATCH_ROWS)
            })?;
            total.add(&done);
            metrics.inc_rows_pruned(done.rows() as u64);
            sessions = done.rows() > 0;
        }
        while conversions {
            if stop() {
                return Ok(total);
            }
            let site = p.site_id.clone();
            let n = job(writer, move |c| {
                store::retention::expire_conversions(c, &site, cutoff, BATCH_ROWS)
            })?;
            total.conversions += n;
            metrics.inc_rows_pruned(n as u64);
            conversions = n > 0;
        }
    }
    if hook_events > 0 {
        log::info!("pruner: deleted {hook_events} webhook events past their sites' retention");
    }
    if total.rows() + hook_events > 0 {
        log::info!(
            "pruner: deleted {} sessions, {} events, {} visitors, {} links, {} conversions{}",
            total.sessions,
            total.events,
            total.visitors,
            total.links,
            total.conversions,
            match total.sites {
                0 => String::new(),
                n => format!(", and {n} deleted site(s) with all their rows"),
            }
        );
        // Each job returns the free pages it found and frees up to RECLAIM_PAGES of them.
        while !stop() && job(writer, |c| store::retention::reclaim(c))? > RECLAIM_PAGES {}
    }
    Ok(total)
}

/// The running pruner thread; [`Pruner::stop`] ends it after the job in hand.
pub struct Pruner(Worker);

impl Pruner {
    /// Opens the pruner's own connection (for its reads) and starts its thread; deletions go
    /// through `writer`.
    pub fn start(
        location: &Location,
        settings: &store::Settings,
        writer: Writer,
        metrics: Metrics,
        every: Duration,
    ) -> store::Result<Pruner> {
        let mut conn = store::engine::Lasting::open(location, settings)?;
        let mut worker = Worker::new();
        worker
            .spawn("pruner".into(), every, move |stop| {
                pass(&mut conn, &writer, &metrics, every, stop)
            })
            .map_err(|e| StoreError::Other(e.to_string()))?;
        Ok(Pruner(worker))
    }

    /// Stops the thread and waits for it; its writer handle is dropped with it.
    pub fn stop(self) {
        self.0.stop();
    }
}

/// One pass of the thread, `every` after the last one.
fn pass(
    lasting: &mut Lasting,
    writer: &Writer,
    metrics: &Metrics,
    every: Duration,
    stop: &Stop,
) -> Duration {
    let pruned = lasting
        .get()
        .and_then(|conn| prune(conn, store::now_ms(), writer, metrics, &|| stop.requested()));
    if let Err(e) = pruned {
        log::warn!("pruner: {e}; trying again in {:.0}s", every.as_secs_f64());
    }
    every
}
