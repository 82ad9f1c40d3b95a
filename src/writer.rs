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
//! Backpressure: besides the bounded channel, new outbox work is refused (503) while the outbox
//! holds `max_backlog` waiting items or more. The count is cached: the writer thread refreshes it
//! after every commit, before answering the batch (an upper bound kept from its own row changes,
//! counted exactly only when the bound reaches the limit), so admission costs one atomic load and a
//! client that got its 202 sees a count that includes its item.
//!
//! It is the only writer in the process: the pipeline's results come as jobs too (one per chunk of
//! items), so they share the requests' commits and nobody waits in SQLite's busy handler.
//!
//! Between two batches it also does the checkpointer's last step when asked ([`CatchUp`]): under
//! steady load only a checkpoint that leaves no frame behind lets the next commit start the WAL
//! over, and only this thread can run one with no commit in between (see `checkpoint.rs`).

use std::any::Any;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::Connection;

use crate::store::{self, StoreError};

type Value = Box<dyn Any + Send>;
type JobFn = Box<dyn FnOnce(&Connection) -> store::Result<Value> + Send>;
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

impl From<StoreError> for WriteError {
    fn from(e: StoreError) -> Self {
        if e.is_transient() {
            WriteError::Unavailable(e.to_string())
        } else {
            WriteError::Failed(e)
        }
    }
}

/// Tuning of the writer.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Jobs that may wait in the channel; beyond this, callers get `Unavailable`.
    pub queue: usize,
    /// Most jobs committed in one transaction.
    pub batch: usize,
    /// One transaction per job instead of group commit (only for comparison benchmarks).
    pub per_request: bool,
    /// How long a caller waits for its result before giving up with `Unavailable`.
    pub reply_timeout: Duration,
    /// Waiting outbox items beyond which new conversions are refused; 0: no limit.
    pub max_backlog: u64,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            queue: 1024,
            batch: 256,
            per_request: false,
            reply_timeout: Duration::from_secs(30),
            max_backlog: 100_000,
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

/// A handle to the writer thread; cheap to clone.
#[derive(Clone)]
pub struct Writer {
    tx: SyncSender<Job>,
    reply_timeout: Duration,
    healthy: Arc<AtomicBool>,
    max_backlog: u64,
    /// Waiting outbox items at the last refresh (an upper bound while under the limit).
    backlog: Arc<AtomicU64>,
    /// Jobs submitted and not yet answered.
    pending: Arc<AtomicUsize>,
    catch_up: CatchUp,
}

impl Writer {
    /// Opens the writer's own connection and starts its thread. The thread ends, after committing
    /// everything queued, once every `Writer` handle is dropped.
    pub fn start(path: &Path, config: WriterConfig) -> store::Result<(Writer, JoinHandle<()>)> {
        let conn = store::open(path)?;
        let reply_timeout = config.reply_timeout;
        let max_backlog = config.max_backlog;
        let (tx, rx) = mpsc::sync_channel::<Job>(config.queue.max(1));
        let healthy = Arc::new(AtomicBool::new(true));
        let backlog = Arc::new(AtomicU64::new(store::conversions::outbox_waiting_capped(
            &conn,
            config.max_backlog,
        )?));
        let pending = Arc::new(AtomicUsize::new(0));
        let catch_up = CatchUp::default();
        let (h, b, p, c) = (
            healthy.clone(),
            backlog.clone(),
            pending.clone(),
            catch_up.clone(),
        );
        let handle = std::thread::Builder::new()
            .name("writer".into())
            .spawn(move || run(conn, rx, config, h, b, &p, &c))
            .map_err(|e| StoreError::Other(format!("cannot start writer: {e}")))?;
        Ok((
            Writer {
                tx,
                reply_timeout,
                healthy,
                max_backlog,
                backlog,
                pending,
                catch_up,
            },
            handle,
        ))
    }

    /// Runs `f` inside the next group transaction and returns its result once committed.
    pub fn submit<T, F>(&self, f: F) -> Result<T, WriteError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> store::Result<T> + Send + 'static,
    {
        let (reply, rx) = mpsc::sync_channel(1);
        let job = Job {
            run: Box::new(move |c| f(c).map(|v| Box::new(v) as Value)),
            reply: Some(reply),
        };
        self.enqueue(job)?;
        match rx.recv_timeout(self.reply_timeout) {
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

    /// Queues `f` without waiting for it (best-effort bookkeeping such as `lastUsedAt`).
    pub fn submit_detached<F>(&self, f: F)
    where
        F: FnOnce(&Connection) -> store::Result<()> + Send + 'static,
    {
        let job = Job {
            run: Box::new(move |c| f(c).map(|()| Box::new(()) as Value)),
            reply: None,
        };
        let _ = self.enqueue(job);
    }

    /// Refuses new outbox work while the cached backlog is over its limit.
    pub fn admit_outbox_work(&self) -> Result<(), WriteError> {
        if self.max_backlog > 0 && self.backlog.load(Ordering::Relaxed) >= self.max_backlog {
            return Err(WriteError::Unavailable(format!(
                "outbox backlog over its limit of {}",
                self.max_backlog
            )));
        }
        Ok(())
    }

    /// Waiting outbox items at the last refresh: exact when at or over the limit, else an upper
    /// bound (see `run`).
    pub fn backlog(&self) -> u64 {
        self.backlog.load(Ordering::Relaxed)
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
        const STEP: Duration = Duration::from_micros(500);
        let until = std::time::Instant::now() + max_wait;
        while self.pending.load(Ordering::Acquire) > 0 && std::time::Instant::now() < until {
            std::thread::sleep(STEP);
        }
    }

    fn enqueue(&self, job: Job) -> Result<(), WriteError> {
        self.pending.fetch_add(1, Ordering::AcqRel);
        let sent = self.tx.try_send(job);
        if sent.is_err() {
            self.pending.fetch_sub(1, Ordering::AcqRel);
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

fn run(
    conn: Connection,
    rx: Receiver<Job>,
    config: WriterConfig,
    healthy: Arc<AtomicBool>,
    backlog: Arc<AtomicU64>,
    pending: &AtomicUsize,
    catch_up: &CatchUp,
) {
    let cap = if config.per_request {
        1
    } else {
        config.batch.max(1)
    };
    let mut batch: Vec<Job> = Vec::with_capacity(cap);
    // Counting the outbox costs time in proportion to its size (3 ms at 36k waiting items), too
    // much after every commit. Only this connection adds outbox rows, each with one row change,
    // so the last exact count plus the rows changed here since is an upper bound: while it stays
    // under the limit every admission decision is the one an exact count would give, and the exact
    // count is taken only once the bound reaches the limit.
    let counted = std::cell::Cell::new((backlog.load(Ordering::Relaxed), conn.total_changes()));
    let refresh = |c: &Connection| {
        if config.max_backlog == 0 {
            return;
        }
        let (exact, changes_then) = counted.get();
        let bound = exact.saturating_add(c.total_changes().saturating_sub(changes_then));
        if bound < config.max_backlog {
            backlog.store(bound, Ordering::Relaxed);
            return;
        }
        let changes_now = c.total_changes();
        if let Ok(n) = store::conversions::outbox_waiting_capped(c, config.max_backlog) {
            counted.set((n, changes_now));
            backlog.store(n, Ordering::Relaxed);
        }
    };
    // Blocks while idle; ends when every sender is gone and the channel is drained.
    while let Ok(first) = rx.recv() {
        batch.push(first);
        while batch.len() < cap {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let n = batch.len();
        commit_batch(&conn, &mut batch, &healthy, &refresh);
        pending.fetch_sub(n, Ordering::AcqRel);
        if catch_up.take() {
            // Outside any transaction, after the batch was answered. A failure only means the WAL
            // does not start over this time; the checkpointer logs lasting ones.
            if let Err(e) = store::checkpoint_passive(&conn) {
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
    conn: &Connection,
    batch: &mut Vec<Job>,
    healthy: &AtomicBool,
    after_commit: &dyn Fn(&Connection),
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
                        if conn.is_autocommit() {
                            return Err(BatchError::Lost(e));
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

    /// The checkpoint sequence number in the WAL header: SQLite adds one each time the WAL
    /// starts over from its beginning.
    fn wal_generation(db: &Path) -> u32 {
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
        let (writer, thread) = Writer::start(&db, WriterConfig::default()).unwrap();
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
        let (writer, thread) = Writer::start(&db, WriterConfig::default()).unwrap();
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
    fn a_requested_catch_up_lets_the_next_commit_start_the_wal_over() {
        assert_eq!(restarts_after_a_partial_checkpoint(true), 1);
    }

    #[test]
    fn without_a_catch_up_the_wal_keeps_growing_after_a_partial_checkpoint() {
        assert_eq!(restarts_after_a_partial_checkpoint(false), 0);
    }
}
