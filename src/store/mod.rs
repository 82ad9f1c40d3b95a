//! Storage: the database of either engine (a SQLite file, or PostgreSQL for several nodes), its
//! schema, and every SQL statement of the project.
//!
//! `engine/` holds each engine's connect, per-connection settings, error mapping and migration
//! list, and the one seam the table files run SQL through (`&impl AsConn`); `dialect.rs` names the
//! spellings that differ between the engines; `migrate.rs` is the one migration runner, applied
//! whenever a connection opens a database. This file holds the transaction runners ([`read`],
//! [`write_tx`], [`savepoint`]); the rest is one module per table or concern. `schema.sql` at the
//! top of the repository is SQLite's schema after every migration. Nothing outside `store/` writes
//! SQL, transaction control included, or branches on the engine. The table functions take a
//! connection (reads, or work inside a transaction the caller opened with a runner) and never
//! open their own transaction, so the writer can group many of them into one commit.

pub mod adjustment_deliveries;
pub mod adjustments;
pub mod conversions;
pub mod copy;
pub mod dashboard;
pub mod deliveries;
pub mod destinations;
pub mod dialect;
pub mod engine;
pub mod erasure;
pub mod export;
pub mod field_warnings;
pub mod first_run;
pub mod keys;
mod migrate;
pub mod outbox;
pub mod pipeline;
pub mod rates;
pub mod referrals;
pub mod report;
pub mod retention;
pub mod salts;
pub mod sealed;
pub mod sessions;
pub mod sites;
pub mod sketches;
pub mod sources;
pub mod tenants;
pub mod user_tokens;
pub mod users;
pub mod web_sessions;

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

use dialect::Dialect;
pub use engine::sqlite::configure;
#[cfg(test)]
use engine::sqlite::migrate;
#[cfg(test)]
pub(crate) use engine::sqlite::version_1_fixture;
use engine::{AsConn, Conn, Engine};

/// The schema version this binary writes and understands: the number of the last migration.
pub const SCHEMA_VERSION: i64 = engine::sqlite::MIGRATIONS.len() as i64;

/// How long a connection waits for SQLite's write lock before giving up with `Busy`, by default.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Bytes the WAL file is truncated to when it starts over after growing past them.
pub const WAL_SIZE_LIMIT: u64 = 64 * 1024 * 1024;

/// The per-connection settings of the connections [`open_with`] and [`open_pool`] open. Passed to
/// whatever opens connections (`serve` hands its own to every part it starts), never kept in the
/// process, so that several servers or tools in one process each keep theirs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// How long a connection waits for SQLite's write lock before giving up with `Busy`
    /// (`serve --busy-timeout-ms`).
    pub busy_timeout: Duration,
    /// Most pages the database may grow to (`PRAGMA max_page_count`); `None`: SQLite's own bound.
    /// No option sets it: a program that runs the server through the library (the tests) caps the
    /// file with it to run into `SQLITE_FULL`, a full disk, and out of it again.
    pub max_page_count: Option<u64>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            busy_timeout: BUSY_TIMEOUT,
            max_page_count: None,
        }
    }
}

/// A storage failure, in the few kinds the callers act on differently.
#[derive(Debug, Clone)]
pub enum StoreError {
    /// The database stayed locked past the busy timeout.
    Busy,
    /// The disk (or `max_page_count`) is full.
    Full,
    /// A uniqueness or foreign-key constraint failed.
    Conflict(String),
    /// Anything else: a bug or a broken file.
    Other(String),
}

impl StoreError {
    /// Busy or full: the database, not the work, is at fault, and the same work may succeed
    /// later. Callers answer these with "retry later" (503) and never count them against the work.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Busy | StoreError::Full)
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Busy => write!(f, "database is busy"),
            StoreError::Full => write!(f, "database or disk is full"),
            StoreError::Conflict(m) => write!(f, "constraint failed: {m}"),
            StoreError::Other(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<r2d2::Error> for StoreError {
    fn from(e: r2d2::Error) -> Self {
        // The pool only fails when no connection frees up in time: the database is saturated.
        log::warn!("connection pool: {e}");
        StoreError::Busy
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Keeps the connection's temporary files in memory (`PRAGMA temp_store = MEMORY`). For the writer's
/// connection: every job runs in a savepoint of its own, whose journal holds the pages the job
/// touched; in a file that cost a `pwrite` per page, about a fifth of the writer's time. Those
/// journals hold one job's pages at a time and never need to survive a crash (the WAL does).
/// Not for connections that migrate or `VACUUM` (`open` does both): their temporary files can be
/// as large as the database. PostgreSQL has nothing of the kind to set.
pub fn journals_in_memory(conn: &impl AsConn) -> Result<()> {
    if let Conn::Sqlite(c) = conn.conn() {
        c.execute_batch("PRAGMA temp_store = MEMORY")?;
    }
    Ok(())
}

/// Copies what the WAL holds into the database file as far as no reader needs the old pages, without
/// waiting for the writer or readers (`PRAGMA wal_checkpoint(PASSIVE)`). Returns how many frames
/// the WAL holds since it last started over. PostgreSQL checkpoints by itself: 0.
pub fn checkpoint_passive(conn: &impl AsConn) -> Result<i64> {
    match conn.conn() {
        Conn::Sqlite(c) => Ok(c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))?),
        Conn::Postgres(_) => Ok(0),
    }
}

/// Changes whenever another connection commits (SQLite's `PRAGMA data_version`): the
/// checkpointer's cheap test for new frames in the WAL.
pub fn data_version(conn: &Connection) -> Result<i64> {
    // Cached: the writer asks after every commit.
    Ok(conn
        .prepare_cached("PRAGMA data_version")?
        .query_row([], |r| r.get(0))?)
}

/// How long the writer may go on trusting its own count of the outbox on PostgreSQL, where other
/// nodes commit all the time and there is no cheap test that they did.
pub const OUTSIDE_COMMITS_EVERY_MS: i64 = 1_000;

/// A value that changes whenever other connections may have committed since it was last read: on
/// SQLite `data_version` (exact, and free); on PostgreSQL the current period of
/// [`OUTSIDE_COMMITS_EVERY_MS`], so whoever compares it counts again at least that often.
pub fn outside_commits(conn: &impl AsConn) -> Result<i64> {
    match conn.conn() {
        Conn::Sqlite(c) => data_version(c),
        Conn::Postgres(_) => Ok(now_ms().div_euclid(OUTSIDE_COMMITS_EVERY_MS)),
    }
}

/// The health check's proof that the database opens, has its schema and answers, without waiting
/// on any writer: SQLite reads one table (a WAL reader never waits for the writer); PostgreSQL
/// looks the table up in its catalog, which takes no lock on it, so a lock held on `sites` (a
/// migration, an operator's `LOCK TABLE`) cannot hold the answer.
pub fn ping(conn: &impl AsConn) -> Result<()> {
    let sql = match conn.conn().engine() {
        Engine::Sqlite => "SELECT COUNT(*) FROM sites",
        Engine::Postgres => "SELECT COUNT(*) FROM pg_class WHERE oid = to_regclass('sites')",
    };
    let found = conn
        .conn()
        .query_opt(sql, engine::args![], |r| r.get::<i64>(0))?;
    if conn.conn().engine() == Engine::Postgres && found != Some(1) {
        return Err(StoreError::Other(
            "the database has no table sites: is --db convapi's database?".to_owned(),
        ));
    }
    Ok(())
}

/// Opens one connection with the default [`Settings`], creating the file and its schema on first use.
pub fn open(path: &Path) -> Result<Connection> {
    open_with(path, &Settings::default())
}

/// [`open`] with the given settings.
pub fn open_with(path: &Path, settings: &Settings) -> Result<Connection> {
    engine::sqlite::open(path, settings)
}

/// Ends a failed write transaction, unless it already ended (SQLite rolls the whole transaction
/// back by itself when a statement fails with `SQLITE_FULL`, `SQLITE_BUSY` or `SQLITE_NOMEM`).
fn roll_back(conn: Conn) {
    if conn.transaction_open() {
        let _ = conn.tx_control("ROLLBACK");
    }
}

/// The process's one write-transaction runner: runs `f` in a write transaction and commits when it
/// succeeds; when `f` or the commit fails, nothing of it stays. SQLite's is `BEGIN IMMEDIATE` (the
/// write lock first: no deadlock between two writers that both read first); PostgreSQL's is
/// `READ COMMITTED`, each statement written to be right under concurrent writers (`ON CONFLICT`,
/// conditional updates, row locks). A transaction a failed statement left unable to commit is an
/// error here, never a silent rollback. In `serve` only the writer thread calls it (once per
/// batch); the CLI's commands call it for their own writes.
pub fn write_tx<T, E: From<StoreError>>(
    conn: &impl AsConn,
    f: impl FnOnce(&Conn) -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    let conn = conn.conn();
    conn.tx_control(Dialect::of(&conn).begin_write())?;
    let result = f(&conn).and_then(|v| {
        if !conn.in_transaction() {
            return Err(
                StoreError::Other("the transaction failed and was rolled back".to_owned()).into(),
            );
        }
        conn.tx_control("COMMIT")?;
        Ok(v)
    });
    if result.is_err() {
        roll_back(conn);
    }
    result
}

/// Runs `f` in a savepoint of the caller's write transaction: `Ok` keeps what it wrote, `Err`
/// leaves nothing of it. After an `Err` the rest of the transaction goes on, unless the whole
/// transaction is gone — rolled back by SQLite itself (see [`roll_back`]) or, should the savepoint
/// fail to roll back, here — which the caller must check with [`Conn::in_transaction`] before
/// writing anything more. Savepoints nest: the pipeline's, one per item, inside the writer's, one
/// per job.
pub fn savepoint<T>(conn: &impl AsConn, f: impl FnOnce(&Conn) -> Result<T>) -> Result<T> {
    let conn = conn.conn();
    conn.tx_control("SAVEPOINT work")?;
    let result = f(&conn).and_then(|v| {
        conn.tx_control("RELEASE work")?;
        Ok(v)
    });
    if result.is_err() && conn.transaction_open() {
        // `ROLLBACK TO` and `RELEASE` name the innermost savepoint called `work`: this one.
        let undone = conn
            .tx_control("ROLLBACK TO work")
            .and_then(|()| conn.tx_control("RELEASE work"));
        if undone.is_err() {
            roll_back(conn);
        }
    }
    result
}

/// Runs `f`'s reads in one read transaction: one snapshot (PostgreSQL's `REPEATABLE READ`, which
/// SQLite's read transactions are by nature), and on SQLite one WAL read lock and page-cache check
/// instead of one per statement. (Every commit by the writer empties a reader's page cache at its
/// next transaction, so statements in separate transactions each start cold.)
pub fn read<T, E: From<StoreError>>(
    conn: &impl AsConn,
    f: impl FnOnce(&Conn) -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    struct End<'a>(Conn<'a>);
    impl Drop for End<'_> {
        fn drop(&mut self) {
            // Nothing was written: ending the transaction either way is the same. A pooled
            // connection must never go back to the pool inside one, even after a panic.
            if self.0.transaction_open() && self.0.tx_control("COMMIT").is_err() {
                roll_back(self.0);
            }
        }
    }
    let conn = conn.conn();
    conn.tx_control(Dialect::of(&conn).begin_read())?;
    let _end = End(conn);
    f(&conn)
}

/// [`read`] for reads that need no common snapshot, each statement seeing what was committed when
/// it ran (a request's checks before the writer decides again): on PostgreSQL no transaction at
/// all, two round trips fewer; on SQLite one read transaction still, whose one WAL read lock costs
/// less than one per statement.
pub fn read_each<T, E: From<StoreError>>(
    conn: &impl AsConn,
    f: impl FnOnce(&Conn) -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    let c = conn.conn();
    match c.engine() {
        Engine::Sqlite => read(conn, f),
        Engine::Postgres => f(&c),
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// An epoch-milliseconds time as RFC 3339 UTC with milliseconds, the form every JSON output uses.
pub fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// [`iso`] as a serde field writer (`#[serde(serialize_with = …)]`).
pub fn serialize_iso<S: serde::Serializer>(ms: &i64, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&iso(*ms))
}
