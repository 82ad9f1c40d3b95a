//! The single writer: every write a request makes goes through this thread, which commits whatever
//! has queued (up to a batch cap) in one `IMMEDIATE` transaction — group commit, so one fsync covers
//! many acknowledged requests.
//!
//! Each job runs inside its own savepoint: a job that fails is rolled back alone and told so, the
//! others still commit. A job's result is handed back only after the commit is durable. A full
//! channel, a busy or full database: the caller gets `WriteError::Unavailable` (503), never a hang.
//! This module owns no SQL: the transaction and the savepoints are `store::write_tx` and
//! `store::savepoint`, and jobs call into `store/`.
//!
//! Backpressure (docs/decisions.md §3, check 9; §8). Besides the bounded channel, new outbox work
//! is refused (503) while the outbox holds too many waiting items of its origin: the API's work
//! counts against `max_backlog`, the anonymous pixel's against `max_pixel_backlog`, so a pixel
//! flood can never refuse the API. Items parked for rates and dead letters wait for no one and do
//! not count. The counts are cached: the writer thread refreshes them after every commit, before
//! answering the batch (upper bounds kept from its own row changes, counted exactly only when a
//! bound reaches its limit or another connection committed), so admission costs one atomic load
//! and a client that got its 202 sees a count that includes its item. Pixel jobs may also hold at
//! most a quarter of the channel ([`Writer::submit_pixel`]), so the API always finds room in it.
//!
//! It is the only writer in the process: the pipeline's results come as jobs too (one per chunk of
//! items), so they share the requests' commits and nobody waits in SQLite's busy handler.
//!
//! Between two batches it also does the checkpointer's last step when asked ([`CatchUp`]): under
//! steady load only a checkpoint that leaves no frame behind lets the next commit start the WAL
//! over, and only this thread can run one with no commit in between (see `checkpoint.rs`).

use std::any::Any;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::ratelimit::Places;
use crate::store::conversions::Source;
use crate::store::engine::{AsConn, Conn};
use crate::store::engine::{Lasting, Location};
use crate::store::{self, StoreError};

type Value = Box<dyn Any + Send>;
type JobFn = Box<dyn FnOnce(&Conn) -> store::Result<Value> + Send>;
type ReplyTx = SyncSender<Result<Value, WriteError>>;

struct Job {
    run: JobFn,
    reply: Option<ReplyTx>,
}

/// Why a write did not happen.
#[derive(Debug)]
pub enum WriteError {
    /// The queue is full, the database busy past its timeout, or the disk full: retry later.
    Unavailable(String),
    /// The job itself failed (a bug or a broken file); nothing of it was written.
    Failed(StoreError),
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Unavailable(m) => write!(f, "write queue unavailable: {m}"),
            WriteError::Failed(e) => write!(f, "write failed: {e}"),
        }
    }
}

impl WriteError {
    /// The refusal as a background worker's store error: an unavailable writer is a busy database
    /// (the worker's pass is tried again later), logged under the worker's name; a failed job is
    /// its own error.
    pub fn into_store_error(self, worker: &str) -> StoreError {
        match self {
            WriteError::Unavailable(m) => {
                log::debug!("{worker}: writer unavailable: {m}");
                StoreError::Busy
            }
            WriteError::Failed(e) => e,
        }
    }
}

impl From<StoreError> for WriteError {
    fn from(e: StoreError) -> Self {
        if e.is_transient() {
            WriteError::Unavailable(e.to_string())
        } else {
            WriteError::Failed(e)
        }
    }
}

/// How often an idle writer looks for outbox changes made by other processes.
const IDLE_REFRESH: Duration = Duration::from_secs(1);

/// Tuning of the writer.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Jobs that may wait in the channel; beyond this, callers get `Unavailable`.
    pub queue: usize,
    /// Most jobs committed in one transaction.
    pub batch: usize,
    /// How long a caller waits for its result before giving up with `Unavailable`.
    pub reply_timeout: Duration,
    /// Waiting outbox items created by the API beyond which new API conversions are refused;
    /// 0: no limit.
    pub max_backlog: u64,
    /// Waiting outbox items created by the pixel beyond which pixel purchases are refused;
    /// 0: no limit.
    pub max_pixel_backlog: u64,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            queue: 1024,
            batch: 256,
            reply_timeout: Duration::from_secs(30),
            max_backlog: 100_000,
            max_pixel_backlog: 10_000,
        }
    }
}

/// Asks the writer thread to checkpoint the frames committed since the checkpointer's last pass,
/// after its next commit, so that the commit after it starts the WAL over. Holds no channel: the
/// writer stops whether or not the checkpointer still has one.
#[derive(Clone, Default)]
pub struct CatchUp(Arc<AtomicBool>);

impl CatchUp {
    pub fn request(&self) {
        self.0.store(true, Ordering::Release);
    }

    fn take(&self) -> bool {
        self.0.swap(false, Ordering::AcqRel)
    }
}

/// One origin's outbox budget: its limit (0: none) and its waiting items at the last refresh
/// (an upper bound while under the limit).
#[derive(Clone)]
struct Budget {
    source: Source,
    limit: u64,
    waiting: Arc<AtomicU64>,
}

impl Budget {
    fn start(conn: &impl AsConn, source: Source, limit: u64) -> store::Result<Budget> {
        let waiting = if limit == 0 {
            0
        } else {
            store::conversions::outbox_waiting_capped(conn, source, limit)?
        };
        Ok(Budget {
            source,
            limit,
            waiting: Arc::new(AtomicU64::new(waiting)),
        })
    }

    fn admit(&self) -> Result<(), WriteError> {
        if self.limit > 0 && self.waiting.load(Ordering::Relaxed) >= self.limit {
            return Err(WriteError::Unavailable(format!(
                "{} outbox backlog over its limit of {}",
                self.source.origin(),
                self.limit
            )));
        }
        Ok(())
    }
}

/// A handle to the writer thread; cheap to clone.
#[derive(Clone)]
pub struct Writer {
    tx: SyncSender<Job>,
    reply_timeout: Duration,
    healthy: Arc<AtomicBool>,
    api: Budget,
    pixel: Budget,
    /// Pixel jobs queued or running, and how many may be.
    pixel_jobs: Places,
    /// Jobs submitted and not yet answered.
    pending: Arc<Pending>,
    catch_up: CatchUp,
}

/// The jobs submitted and not yet answered, and a way to wait until there are none, for
/// background work that lets requests go first ([`Writer::yield_to_queued`]). The writer takes the
/// lock and signals only when someone waits.
#[derive(Default)]
struct Pending {
    jobs: AtomicUsize,
    waiters: AtomicUsize,
    lock: std::sync::Mutex<()>,
    none: std::sync::Condvar,
}

impl Pending {
    fn add(&self) {
        self.jobs.fetch_add(1, Ordering::AcqRel);
    }

    fn done(&self, n: usize) {
        let before = self.jobs.fetch_sub(n, Ordering::SeqCst);
        if before == n && self.waiters.load(Ordering::SeqCst) > 0 {
            let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.none.notify_all();
        }
    }

    fn wait_for_none(&self, max_wait: Duration) {
        let until = std::time::Instant::now() + max_wait;
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        while self.jobs.load(Ordering::SeqCst) > 0 {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            held = self
                .none
                .wait_timeout(held, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        drop(held);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Writer {
    /// Opens the writer's own connection and starts its thread. The thread ends, after committing
    /// everything queued, once every `Writer` handle is dropped.
    pub fn start(
        location: &Location,
        settings: &store::Settings,
        config: WriterConfig,
    ) -> store::Result<(Writer, JoinHandle<()>)> {
        // On PostgreSQL its statements wait for a lock no longer than SQLite's writer would.
        let mut lasting =
            store::engine::Lasting::open_as(location, settings, store::engine::Waits::BusyTimeout)?;
        let conn = lasting.get()?;
        store::journals_in_memory(conn)?;
        let reply_timeout = config.reply_timeout;
        let queue = config.queue.max(1);
        let (tx, rx) = mpsc::sync_channel::<Job>(queue);
        let healthy = Arc::new(AtomicBool::new(true));
        let api = Budget::start(conn, Source::Api, config.max_backlog)?;
        let pixel = Budget::start(conn, Source::Pixel, config.max_pixel_backlog)?;
        let pending = Arc::new(Pending::default());
        let catch_up = CatchUp::default();
        let (h, budgets, p, c) = (
            healthy.clone(),
            [api.clone(), pixel.clone()],
            pending.clone(),
            catch_up.clone(),
        );
        let handle = std::thread::Builder::new()
            .name("writer".into())
            .spawn(move || run(lasting, rx, config, h, budgets, &p, &c))
            .map_err(|e| StoreError::Other(format!("cannot start writer: {e}")))?;
        Ok((
            Writer {
                tx,
                reply_timeout,
                healthy,
                api,
                pixel,
                pixel_jobs: Places::new((queue / 4).max(1)),
                pending,
                catch_up,
            },
            handle,
        ))
    }

    /// [`Writer::submit`] for the anonymous pixel: refused (`Unavailable`) while a quarter of the
    /// channel already holds pixel jobs, so that a pixel flood cannot fill the channel the API's
    /// reports need.
    pub fn submit_pixel<T, F>(&self, f: F) -> Result<T, WriteError>
    where
        T: Send + 'static,
        F: FnOnce(&Conn) -> store::Result<T> + Send + 'static,
    {
        let Some(slot) = self.pixel_jobs.take() else {
            return Err(WriteError::Unavailable(format!(
                "{} pixel writes already queued",
                self.pixel_jobs.max()
            )));
        };
        self.submit(move |c| {
            // Given back when the job ends, whether it ran or was never queued.
            let _slot = slot;
            f(c)
        })
    }

    /// Runs `f` inside the next group transaction and returns its result once committed.
    pub fn submit<T, F>(&self, f: F) -> Result<T, WriteError>
    where
        T: Send + 'static,
        F: FnOnce(&Conn) -> store::Result<T> + Send + 'static,
    {
        self.submit_queued(f)?.wait()
    }

    /// Queues `f` for the next group transaction and returns at once: [`Queued::wait`] gives its
    /// result once committed. The pipeline decides its next chunk meanwhile.
    pub fn submit_queued<T, F>(&self, f: F) -> Result<Queued<T>, WriteError>
    where
        T: Send + 'static,
        F: FnOnce(&Conn) -> store::Result<T> + Send + 'static,
    {
        let (reply, rx) = mpsc::sync_channel(1);
        let job = Job {
            run: Box::new(move |c| f(c).map(|v| Box::new(v) as Value)),
            reply: Some(reply),
        };
        self.enqueue(job)?;
        Ok(Queued {
            rx,
            timeout: self.reply_timeout,
            kind: std::marker::PhantomData,
        })
    }

    /// Queues `f` without waiting for it (best-effort bookkeeping such as `lastUsedAt`).
    pub fn submit_detached<F>(&self, f: F)
    where
        F: FnOnce(&Conn) -> store::Result<()> + Send + 'static,
    {
        let job = Job {
            run: Box::new(move |c| f(c).map(|()| Box::new(()) as Value)),
            reply: None,
        };
        let _ = self.enqueue(job);
    }

    /// Refuses new outbox work from `source` while its cached backlog is at its limit.
    pub fn admit_outbox_work(&self, source: Source) -> Result<(), WriteError> {
        match source {
            Source::Api => self.api.admit(),
            Source::Pixel => self.pixel.admit(),
        }
    }

    /// Waiting outbox items of `source` at the last refresh: exact when at or over its limit,
    /// else an upper bound (see `run`).
    pub fn backlog(&self, source: Source) -> u64 {
        match source {
            Source::Api => &self.api,
            Source::Pixel => &self.pixel,
        }
        .waiting
        .load(Ordering::Relaxed)
    }

    /// The checkpointer's way to ask for a [`CatchUp`].
    pub fn catch_up(&self) -> CatchUp {
        self.catch_up.clone()
    }

    /// Whether the last transaction committed (the health check reports this).
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::SeqCst)
    }

    /// For background work (the pipeline): waits while jobs are queued, so that requests go
    /// first, but for at most `max_wait`, so that background work is delayed, never starved.
    pub fn yield_to_queued(&self, max_wait: Duration) {
        self.pending.wait_for_none(max_wait);
    }

    fn enqueue(&self, job: Job) -> Result<(), WriteError> {
        self.pending.add();
        let sent = self.tx.try_send(job);
        if sent.is_err() {
            self.pending.done(1);
        }
        match sent {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(WriteError::Unavailable("write queue full".into())),
            Err(TrySendError::Disconnected(_)) => {
                Err(WriteError::Unavailable("writer stopped".into()))
            }
        }
    }
}

/// A job queued by [`Writer::submit_queued`].
pub struct Queued<T> {
    rx: Receiver<Result<Value, WriteError>>,
    timeout: Duration,
    kind: std::marker::PhantomData<fn() -> T>,
}

impl<T: 'static> Queued<T> {
    /// The job's result once its transaction committed (or why it did not run).
    pub fn wait(self) -> Result<T, WriteError> {
        match self.rx.recv_timeout(self.timeout) {
            Ok(r) => r.map(|v| {
                *v.downcast::<T>()
                    .expect("writer returns the job's own type")
            }),
            Err(RecvTimeoutError::Timeout) => {
                Err(WriteError::Unavailable("write timed out".into()))
            }
            Err(RecvTimeoutError::Disconnected) => {
                Err(WriteError::Unavailable("writer stopped".into()))
            }
        }
    }
}

fn run(
    mut lasting: Lasting,
    rx: Receiver<Job>,
    config: WriterConfig,
    healthy: Arc<AtomicBool>,
    budgets: [Budget; 2],
    pending: &Pending,
    catch_up: &CatchUp,
) {
    let cap = config.batch.max(1);
    let mut batch: Vec<Job> = Vec::with_capacity(cap);
    // Counting the outbox costs time in proportion to its size (3 ms at 36k waiting items), too
    // much after every commit. In `serve` this connection makes every change that adds a waiting
    // item (a new row, a re-queued one), each with a row change, so the last exact count plus the
    // rows changed here since is an upper bound: while it stays under the limit every admission
    // decision is the one an exact count would give, and the exact count is taken only once the
    // bound reaches the limit. Another process can add waiting items too (`rates import` makes
    // parked ones due): a commit by another connection changes `data_version`, and then every
    // budget is counted exactly.
    let Ok(first) = lasting.get() else {
        log::error!("writer: its database connection is gone before the first write");
        return;
    };
    let changes_at_start = first.conn().total_changes();
    let counted: Vec<std::cell::Cell<(u64, u64)>> = budgets
        .iter()
        .map(|b| std::cell::Cell::new((b.waiting.load(Ordering::Relaxed), changes_at_start)))
        .collect();
    let data_version = std::cell::Cell::new(store::outside_commits(first).ok());
    let refresh = |c: &Conn| {
        let version = store::outside_commits(c).ok();
        let others_committed = version.is_none() || version != data_version.get();
        data_version.set(version);
        for (budget, counted) in budgets.iter().zip(&counted) {
            if budget.limit == 0 {
                continue;
            }
            let (exact, changes_then) = counted.get();
            let bound = exact.saturating_add(c.total_changes().saturating_sub(changes_then));
            if bound < budget.limit && !others_committed {
                budget.waiting.store(bound, Ordering::Relaxed);
                continue;
            }
            let changes_now = c.total_changes();
            match store::conversions::outbox_waiting_capped(c, budget.source, budget.limit) {
                Ok(n) => {
                    counted.set((n, changes_now));
                    budget.waiting.store(n, Ordering::Relaxed);
                }
                // Counted again after the next commit.
                Err(_) => data_version.set(None),
            }
        }
    };
    // Ends when every sender is gone and the channel is drained. While idle, the counts are
    // refreshed now and then, so that what another process changed (an import making parked
    // items due, an operator clearing the outbox) is admitted on without waiting for a commit.
    loop {
        let first = match rx.recv_timeout(IDLE_REFRESH) {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => {
                if let Ok(conn) = lasting.get() {
                    refresh(&conn.conn());
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        batch.push(first);
        while batch.len() < cap {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let n = batch.len();
        // On PostgreSQL the connection may have been closed by a restart: opened again here, and
        // while the database cannot be reached every write is answered "retry later".
        let conn = match lasting.get() {
            Ok(conn) => conn,
            Err(e) => {
                healthy.store(false, Ordering::SeqCst);
                for job in batch.drain(..) {
                    answer(job.reply, Err(WriteError::from(e.clone())));
                }
                pending.done(n);
                continue;
            }
        };
        commit_batch(&conn.conn(), &mut batch, &healthy, &refresh);
        pending.done(n);
        if catch_up.take() {
            // Outside any transaction, after the batch was answered. A failure only means the WAL
            // does not start over this time; the checkpointer logs lasting ones.
            if let Err(e) = store::checkpoint_passive(conn) {
                log::debug!("writer checkpoint: {e}");
            }
        }
    }
    log::debug!("writer stopped");
}

/// Runs and commits one batch, answering every job. `healthy` is set before the jobs are answered,
/// so that a client that got its answer sees the health that goes with it.
///
/// SQLite may roll back the whole transaction by itself when a statement fails with
/// `SQLITE_FULL`, `SQLITE_BUSY` or `SQLITE_NOMEM`: the jobs already run in it are then lost, are
/// answered `Unavailable` (retry), and the rest of the batch goes on in a new transaction.
fn commit_batch(
    conn: &Conn,
    batch: &mut Vec<Job>,
    healthy: &AtomicBool,
    after_commit: &dyn Fn(&Conn),
) {
    let mut jobs = batch.drain(..).collect::<std::collections::VecDeque<Job>>();
    while !jobs.is_empty() {
        let mut began = false;
        let mut done: Vec<(Option<ReplyTx>, Value)> = Vec::with_capacity(jobs.len());
        let committed = store::write_tx(conn, |conn| {
            began = true;
            while let Some(Job { run, reply }) = jobs.pop_front() {
                match store::savepoint(conn, run) {
                    Ok(v) => done.push((reply, v)),
                    Err(e) => {
                        if !e.is_transient() {
                            log::error!("write job failed: {e}");
                        }
                        answer(reply, Err(WriteError::from(e.clone())));
                        if !conn.in_transaction() {
                            return Err(BatchError::Lost(e));
                        }
                        if matches!(e, StoreError::Busy) {
                            // A lock another connection holds (PostgreSQL's `lock_timeout`): the
                            // jobs after it would most likely wait the whole timeout each, one
                            // after the other, so they are answered busy now, unrun, and the jobs
                            // before it commit.
                            for job in jobs.drain(..) {
                                answer(job.reply, Err(WriteError::from(e.clone())));
                            }
                        }
                    }
                }
            }
            Ok(())
        });
        match committed {
            Ok(()) => {
                after_commit(conn);
                healthy.store(true, Ordering::SeqCst);
                for (reply, v) in done {
                    answer(reply, Ok(v));
                }
            }
            Err(BatchError::Lost(e)) => {
                log::warn!("writer transaction rolled back by SQLite ({e}); its jobs are retried by their callers");
                healthy.store(false, Ordering::SeqCst);
                for (reply, _) in done {
                    answer(
                        reply,
                        Err(WriteError::Unavailable(format!(
                            "transaction rolled back: {e}"
                        ))),
                    );
                }
            }
            Err(BatchError::Store(err)) => {
                healthy.store(false, Ordering::SeqCst);
                if began {
                    log::warn!("writer commit failed: {err}");
                    for (reply, _) in done {
                        answer(reply, Err(WriteError::from(err.clone())));
                    }
                } else {
                    log::warn!("writer cannot begin a transaction: {err}");
                    for job in jobs.drain(..) {
                        answer(job.reply, Err(WriteError::from(err.clone())));
                    }
                    return;
                }
            }
        }
    }
}

/// Why a batch's transaction did not commit.
enum BatchError {
    /// `BEGIN` or `COMMIT` failed.
    Store(StoreError),
    /// A job's failure made SQLite roll back the whole transaction: the jobs run before it are
    /// lost with it, and the rest of the batch goes on in a new transaction.
    Lost(StoreError),
}

impl From<StoreError> for BatchError {
    fn from(e: StoreError) -> Self {
        BatchError::Store(e)
    }
}

fn answer(reply: Option<ReplyTx>, r: Result<Value, WriteError>) {
    if let Some(reply) = reply {
        // The caller may have timed out and gone; that is its business.
        let _ = reply.try_send(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_for_no_pending_jobs_ends_when_the_last_is_done_or_at_the_deadline() {
        let p = Arc::new(Pending::default());
        // Nothing pending: no wait at all.
        let t = std::time::Instant::now();
        p.wait_for_none(Duration::from_secs(10));
        assert!(t.elapsed() < Duration::from_secs(1));
        // Pending until another thread finishes them: woken then, long before the deadline.
        p.add();
        p.add();
        let q = p.clone();
        let done = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            q.done(2);
        });
        let t = std::time::Instant::now();
        p.wait_for_none(Duration::from_secs(10));
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        done.join().unwrap();
        // Never finished: back at the deadline.
        p.add();
        let t = std::time::Instant::now();
        p.wait_for_none(Duration::from_millis(100));
        assert!(t.elapsed() >= Duration::from_millis(100));
        assert_eq!(p.waiters.load(Ordering::SeqCst), 0);
    }

    /// The checkpoint sequence number in the WAL header: SQLite adds one each time the WAL
    /// starts over from its beginning.
    fn wal_generation(db: &std::path::Path) -> u32 {
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        let header = std::fs::read(wal).expect("the WAL exists while the writer runs");
        u32::from_be_bytes(header[12..16].try_into().unwrap())
    }

    /// The race of a running server, one step at a time: a reader holds a snapshot while another
    /// commit lands, so the checkpointer's pass leaves frames behind. Returns how often the WAL
    /// started over in the two commits after that, with or without asking for a catch-up.
    fn restarts_after_a_partial_checkpoint(ask: bool) -> u32 {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("w.db");
        let checkpointer = store::open(&db).unwrap();
        let reader = store::open(&db).unwrap();
        let (writer, thread) = Writer::start(
            &Location::of(&db),
            &Default::default(),
            WriterConfig::default(),
        )
        .unwrap();
        let write = |n: u32| {
            writer
                .submit(move |c| store::tenants::create(c, &format!("t{n}"), "t", 0).map(drop))
                .unwrap()
        };
        write(1);
        store::read(&reader, |r| {
            store::tenants::exists(r, "t1")?;
            write(2);
            // The reader's snapshot holds the checkpoint back to before write 2.
            store::checkpoint_passive(&checkpointer)
        })
        .unwrap();
        let before = wal_generation(&db);
        if ask {
            writer.catch_up().request();
        }
        write(3);
        write(4);
        let restarts = wal_generation(&db) - before;
        drop(writer);
        thread.join().unwrap();
        restarts
    }

    #[test]
    fn a_wal_that_grew_past_its_limit_is_cut_back_when_it_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("w.db");
        let wal_len = || {
            std::fs::metadata(dir.path().join("w.db-wal"))
                .unwrap()
                .len()
        };
        let checkpointer = store::open(&db).unwrap();
        let (writer, thread) = Writer::start(
            &Location::of(&db),
            &Default::default(),
            WriterConfig::default(),
        )
        .unwrap();
        let big = "x".repeat(1 << 20);
        let n = store::WAL_SIZE_LIMIT / (1 << 20) + 8;
        writer
            .submit(move |c| {
                for i in 0..n {
                    store::tenants::create(c, &format!("big{i}"), &big, 0)?;
                }
                Ok(())
            })
            .unwrap();
        assert!(wal_len() > store::WAL_SIZE_LIMIT);
        store::checkpoint_passive(&checkpointer).unwrap();
        writer
            .submit(|c| store::tenants::create(c, "small", "t", 0).map(drop))
            .unwrap();
        assert!(
            wal_len() <= store::WAL_SIZE_LIMIT,
            "WAL is {} bytes",
            wal_len()
        );
        drop(writer);
        thread.join().unwrap();
    }

    #[test]
    fn pixel_jobs_hold_at_most_a_quarter_of_the_channel() {
        let dir = tempfile::tempdir().unwrap();
        let config = WriterConfig {
            queue: 8,
            ..WriterConfig::default()
        };
        let (writer, thread) = Writer::start(
            &Location::of(&dir.path().join("w.db")),
            &Default::default(),
            config,
        )
        .unwrap();
        // The writer is held inside a job until the test lets it go.
        let (release, held) = mpsc::channel::<()>();
        let (started, running) = mpsc::channel::<()>();
        let w = writer.clone();
        let blocker = std::thread::spawn(move || {
            w.submit(move |_| {
                started.send(()).unwrap();
                held.recv().unwrap();
                Ok(())
            })
        });
        running.recv().unwrap();
        let pixel: Vec<_> = (0..2)
            .map(|_| {
                let w = writer.clone();
                std::thread::spawn(move || w.submit_pixel(|_| Ok(())))
            })
            .collect();
        while writer.pixel_jobs.taken() < 2 {
            std::thread::yield_now();
        }
        // A third pixel job finds its share of 8 / 4 = 2 taken; other jobs still get in.
        assert!(matches!(
            writer.submit_pixel(|_| Ok(())),
            Err(WriteError::Unavailable(_))
        ));
        let w = writer.clone();
        let api = std::thread::spawn(move || w.submit(|_| Ok(7)));
        release.send(()).unwrap();
        blocker.join().unwrap().unwrap();
        for p in pixel {
            p.join().unwrap().unwrap();
        }
        assert_eq!(api.join().unwrap().unwrap(), 7);
        assert_eq!(writer.pixel_jobs.taken(), 0, "slots given back");
        writer.submit_pixel(|_| Ok(())).unwrap();
        drop(writer);
        thread.join().unwrap();
    }

    #[test]
    fn another_connections_passive_checkpoint_does_not_look_like_a_commit() {
        // The writer recounts its budgets exactly whenever `data_version` moves; the
        // checkpointer's passes after every commit must not make it recount every time.
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("w.db");
        let writer = store::open(&db).unwrap();
        let checkpointer = store::open(&db).unwrap();
        let other = store::open(&db).unwrap();
        store::tenants::create(&writer, "t1", "t", 0).unwrap();
        let before = store::data_version(&writer).unwrap();
        store::checkpoint_passive(&checkpointer).unwrap();
        store::tenants::create(&writer, "t2", "t", 0).unwrap();
        store::checkpoint_passive(&checkpointer).unwrap();
        assert_eq!(store::data_version(&writer).unwrap(), before);
        store::tenants::create(&other, "t3", "t", 0).unwrap();
        assert_ne!(store::data_version(&writer).unwrap(), before);
    }

    #[test]
    fn a_requested_catch_up_lets_the_next_commit_start_the_wal_over() {
        assert_eq!(restarts_after_a_partial_checkpoint(true), 1);
    }

    #[test]
    fn without_a_catch_up_the_wal_keeps_growing_after_a_partial_checkpoint() {
        assert_eq!(restarts_after_a_partial_checkpoint(false), 0);
    }
}
