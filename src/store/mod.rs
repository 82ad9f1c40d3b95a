//! Storage: the SQLite file, its schema, and every SQL statement of the project.
//!
//! Owns connection set-up (WAL, `synchronous=FULL`, `foreign_keys`, `busy_timeout`), the schema and its
//! migrations, the transaction runners ([`read`], [`write_tx`], [`savepoint`]), and one module per
//! table or concern. Nothing outside `store/` writes SQL, transaction control included. The table
//! functions take a `&Connection` (reads, or work inside a transaction the caller opened with a
//! runner) and never open their own transaction, so the writer can group many of them into one
//! commit.

pub mod conversions;
pub mod dashboard;
pub mod erasure;
pub mod export;
pub mod keys;
pub mod outbox;
pub mod pipeline;
pub mod rates;
#[macro_use]
pub mod report;
pub mod retention;
pub mod sessions;
pub mod sites;
pub mod tenants;
pub mod users;
pub mod web_sessions;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use r2d2::Pool;
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::functions::FunctionFlags;
use rusqlite::{Connection, ErrorCode};

/// The schema of a fresh database; see `schema.sql` at the top of the repository.
const SCHEMA: &str = include_str!("../../schema.sql");

/// Which source created each outbox row, so that the pixel's anonymous work and the API's are
/// counted against budgets of their own (docs/decisions.md §8). Rows of orders the API never
/// reported are the pixel's. The index serves the writer's bounded counts of waiting items.
/// `parked_reason`: why an item parked for rates waits (shown by the order status, §5).
const OUTBOX_ORIGIN: &str = "
ALTER TABLE outbox ADD COLUMN origin TEXT NOT NULL DEFAULT 'api' CHECK (origin IN ('api', 'pixel'));
ALTER TABLE outbox ADD COLUMN parked_reason TEXT;
UPDATE outbox SET origin = 'pixel'
    WHERE conversion_id IN (SELECT id FROM conversions WHERE source_api = 0);
CREATE INDEX outbox_waiting_by_origin ON outbox(origin, next_attempt_at) WHERE dead_at IS NULL;
";

/// Migration steps after the initial schema. Step `i` takes `user_version` from `i + 1` to `i + 2`.
const MIGRATIONS: &[&str] = &[
    PIXEL_TRUST_AND_STORAGE,
    OUTBOX_ORIGIN,
    DATA_LIFECYCLE,
    REPORT_ROLLUP,
    DASHBOARD_ACCOUNTS,
];

/// The report reads a daily rollup instead of every conversion (docs/decisions.md §11):
/// - `conversions.reporting_minor`: the reporting value in integer minor units of its currency,
///   written by the pipeline with `reporting_value`; here computed for the rows there are by
///   [`MINOR_AMOUNT_FN`] (Rust, exact), NULL where there is no exact integer (see
///   `report::minor_amount`);
/// - `report_daily` built from every conversion, and the triggers that keep it exact from now on
///   (`report.rs`).
const REPORT_ROLLUP: &str = concat!(
    "ALTER TABLE conversions ADD COLUMN reporting_minor INTEGER;
UPDATE conversions SET reporting_minor = convapi_minor_amount(reporting_value, reporting_currency)
    WHERE reporting_value IS NOT NULL;
",
    rollup_schema!()
);

/// The SQL function [`REPORT_ROLLUP`] fills `reporting_minor` with: `report::minor_amount`.
/// Registered on the migrating connection only while migrations run.
const MINOR_AMOUNT_FN: &str = "convapi_minor_amount";

/// Dashboard accounts and their logins (docs/decisions.md §10): a user belongs to one tenant, its
/// email is unique in any case, its password is kept only as an Argon2id PHC string; a session row
/// is keyed by the SHA-256 of the id in the browser's cookie, and goes with its user.
const DASHBOARD_ACCOUNTS: &str = "
CREATE TABLE users (
    id                  TEXT PRIMARY KEY,
    tenant_id           TEXT NOT NULL REFERENCES tenants(id),
    email               TEXT NOT NULL UNIQUE COLLATE NOCASE,
    password_hash       TEXT NOT NULL,
    created_at          INTEGER NOT NULL,
    password_changed_at INTEGER NOT NULL
);
CREATE INDEX users_tenant ON users(tenant_id);
CREATE TABLE web_sessions (
    id_hash       BLOB PRIMARY KEY,
    user_id       TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    csrf          TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    last_seen_at  INTEGER NOT NULL
);
CREATE INDEX web_sessions_user ON web_sessions(user_id);
";

/// Retention and erasure (docs/decisions.md §9):
/// - `sites` gets how many days pixel data is kept (0: forever) and whether conversions expire too;
/// - `conversions.session_id` loses its foreign key: a conversion outlives its session (pruned or
///   erased) and keeps what the pipeline stored on it. An erased conversion's `session_id` and
///   `visitor_id` are `''` (see `erasure.rs`). SQLite cannot drop a constraint, so the table is
///   built again; the outbox rows that refer to it are counted as deferred violations when the old
///   table goes and cleared again as the rows come back, all inside this step's transaction;
/// - indexes that let the pruner and erasure find rows without scanning a table while they hold
///   the write lock: sessions by start time and by `clientId`, conversions by `clientId`, links
///   by visitor.
const DATA_LIFECYCLE: &str = "
ALTER TABLE sites ADD COLUMN retain_days INTEGER NOT NULL DEFAULT 395;
ALTER TABLE sites ADD COLUMN expire_conversions INTEGER NOT NULL DEFAULT 0;

PRAGMA defer_foreign_keys = ON;
CREATE TABLE conversions_copy AS SELECT * FROM conversions;
DROP TABLE conversions;
CREATE TABLE conversions (
    id                  TEXT PRIMARY KEY,
    site_id             TEXT NOT NULL REFERENCES sites(id),
    order_id            TEXT,
    type                TEXT NOT NULL,
    session_id          TEXT NOT NULL,
    visitor_id          TEXT NOT NULL,
    client_id           TEXT,
    value               TEXT,
    currency            TEXT NOT NULL,
    occurred_at         INTEGER NOT NULL,
    created_at          INTEGER NOT NULL,
    source_api          INTEGER NOT NULL DEFAULT 0,
    source_pixel        INTEGER NOT NULL DEFAULT 0,
    status              TEXT NOT NULL DEFAULT 'queued',
    attr_model          TEXT,
    attr_session_id     TEXT,
    attr_source         TEXT,
    attr_medium         TEXT,
    attr_campaign       TEXT,
    reporting_value     TEXT,
    reporting_currency  TEXT,
    fx_rate             TEXT,
    fx_date             TEXT,
    processed_at        INTEGER
);
INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id, client_id, value, currency,
        occurred_at, created_at, source_api, source_pixel, status, attr_model, attr_session_id,
        attr_source, attr_medium, attr_campaign, reporting_value, reporting_currency, fx_rate, fx_date,
        processed_at)
    SELECT id, site_id, order_id, type, session_id, visitor_id, client_id, value, currency,
        occurred_at, created_at, source_api, source_pixel, status, attr_model, attr_session_id,
        attr_source, attr_medium, attr_campaign, reporting_value, reporting_currency, fx_rate, fx_date,
        processed_at
    FROM conversions_copy;
DROP TABLE conversions_copy;
CREATE UNIQUE INDEX conversions_site_order ON conversions(site_id, order_id) WHERE order_id IS NOT NULL;
CREATE INDEX conversions_site_time ON conversions(site_id, occurred_at);
CREATE INDEX conversions_site_client ON conversions(site_id, client_id) WHERE client_id IS NOT NULL;

CREATE INDEX sessions_site_start ON sessions(site_id, started_at);
CREATE INDEX sessions_site_client ON sessions(site_id, client_id) WHERE client_id IS NOT NULL;
CREATE INDEX visitor_clients_visitor ON visitor_clients(site_id, visitor_id);
";

/// Signed identify, the cap on visitors per `clientId`, and each pageview URL stored once
/// (docs/decisions.md §4):
/// - `sites` gets the per-site option and its shared secret;
/// - `visitor_clients` gets an integer key that orders the links by their latest `identify`, so that
///   the cap can drop the oldest; links over the cap (`sessions::MAX_VISITORS_PER_CLIENT`) go now;
/// - `sessions` keeps the id of its landing pageview instead of a copy of its URL. A session whose
///   landing URL matches none of its events (not written by this program) gets an event holding it.
const PIXEL_TRUST_AND_STORAGE: &str = "
ALTER TABLE sites ADD COLUMN signed_identify INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sites ADD COLUMN identity_secret TEXT;

CREATE TABLE visitor_clients_new (
    id          INTEGER PRIMARY KEY,
    site_id     TEXT NOT NULL,
    client_id   TEXT NOT NULL,
    visitor_id  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    UNIQUE (site_id, client_id, visitor_id),
    FOREIGN KEY (site_id, visitor_id) REFERENCES visitors(site_id, id)
);
INSERT INTO visitor_clients_new (site_id, client_id, visitor_id, created_at)
    SELECT site_id, client_id, visitor_id, created_at FROM visitor_clients
    ORDER BY created_at, visitor_id;
DROP TABLE visitor_clients;
ALTER TABLE visitor_clients_new RENAME TO visitor_clients;
DELETE FROM visitor_clients WHERE id IN (
    SELECT id FROM (
        SELECT id, row_number() OVER (PARTITION BY site_id, client_id ORDER BY id DESC) AS n
        FROM visitor_clients)
    WHERE n > 50);

ALTER TABLE sessions ADD COLUMN landing_event_id TEXT;
UPDATE sessions SET landing_event_id = (
    SELECT e.id FROM events e
    WHERE e.session_id = sessions.id AND e.type = 'pageview' AND e.url = sessions.landing_url
    ORDER BY e.ts, e.id LIMIT 1)
WHERE landing_url IS NOT NULL;
INSERT INTO events (id, site_id, session_id, type, url, ts)
    SELECT 'landing-' || id, site_id, id, 'pageview', landing_url, started_at FROM sessions
    WHERE landing_url IS NOT NULL AND landing_event_id IS NULL;
UPDATE sessions SET landing_event_id = 'landing-' || id
WHERE landing_url IS NOT NULL AND landing_event_id IS NULL;
ALTER TABLE sessions DROP COLUMN landing_url;
";

/// The schema version this binary writes and understands.
pub const SCHEMA_VERSION: i64 = 1 + MIGRATIONS.len() as i64;

/// How long a connection waits for SQLite's write lock before giving up with `Busy`, by default.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Bytes the WAL file is truncated to when it starts over after growing past them.
pub const WAL_SIZE_LIMIT: u64 = 64 * 1024 * 1024;

static BUSY_TIMEOUT_MS: AtomicU64 = AtomicU64::new(BUSY_TIMEOUT.as_millis() as u64);
static MAX_PAGE_COUNT: AtomicU64 = AtomicU64::new(0);

/// Sets the busy timeout of every connection opened from now on (`serve --busy-timeout-ms`).
pub fn set_busy_timeout(d: Duration) {
    BUSY_TIMEOUT_MS.store(d.as_millis().max(1) as u64, Ordering::Relaxed);
}

/// The busy timeout connections are opened with.
pub fn busy_timeout() -> Duration {
    Duration::from_millis(BUSY_TIMEOUT_MS.load(Ordering::Relaxed))
}

/// Test only: caps the database size of every connection opened from now on, so that a test can
/// run the server into `SQLITE_FULL` (a full disk) and out of it again.
pub fn set_max_page_count(pages: u64) {
    MAX_PAGE_COUNT.store(pages, Ordering::Relaxed);
}

pub type DbPool = Pool<SqliteConnectionManager>;

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

/// The command line reports errors as one line of text.
impl From<StoreError> for String {
    fn from(e: StoreError) -> String {
        e.to_string()
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        match e.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => StoreError::Busy,
            Some(ErrorCode::DiskFull) => StoreError::Full,
            Some(ErrorCode::ConstraintViolation) => StoreError::Conflict(e.to_string()),
            _ => StoreError::Other(e.to_string()),
        }
    }
}

impl From<r2d2::Error> for StoreError {
    fn from(e: r2d2::Error) -> Self {
        // The pool only fails when no connection frees up in time: the database is saturated.
        log::warn!("connection pool: {e}");
        StoreError::Busy
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Applies the per-connection settings. Called for every connection, pooled or not.
pub fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(busy_timeout())?;
    // WAL lets readers run beside the single writer; FULL fsyncs the WAL on every commit so that an
    // acknowledged conversion survives power loss, not just a process crash.
    // No checkpoint inside a commit: in `serve` the checkpointer thread does it (see
    // `checkpoint.rs`); elsewhere SQLite checkpoints when the last connection closes.
    // A WAL that grew during a burst is cut back to `WAL_SIZE_LIMIT` when it next starts over
    // (without it the file keeps its largest size for as long as the server runs).
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = FULL;
         PRAGMA foreign_keys = ON;
         PRAGMA wal_autocheckpoint = 0;",
    )?;
    conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT as i64)?;
    conn.set_prepared_statement_cache_capacity(64);
    let pages = MAX_PAGE_COUNT.load(Ordering::Relaxed);
    if pages > 0 {
        conn.pragma_update(None, "max_page_count", pages as i64)?;
    }
    Ok(())
}

/// Copies what the WAL holds into the database file as far as no reader needs the old pages, without
/// waiting for the writer or readers (`PRAGMA wal_checkpoint(PASSIVE)`). Returns how many frames
/// the WAL holds since it last started over.
pub fn checkpoint_passive(conn: &Connection) -> Result<i64> {
    Ok(conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))?)
}

/// Changes whenever another connection commits (SQLite's `PRAGMA data_version`): the
/// checkpointer's cheap test for new frames in the WAL.
pub fn data_version(conn: &Connection) -> Result<i64> {
    Ok(conn.query_row("PRAGMA data_version", [], |r| r.get(0))?)
}

/// Reads one table: the health check's proof that the file opens, has its schema and answers.
pub fn ping(conn: &Connection) -> Result<()> {
    conn.query_row("SELECT COUNT(*) FROM sites", [], |r| r.get::<_, i64>(0))?;
    Ok(())
}

/// Opens one connection, creating the file and its schema on first use.
pub fn open(path: &Path) -> Result<Connection> {
    let mut conn = Connection::open(path)?;
    configure(&conn)?;
    migrate(&mut conn)?;
    retention::prepare_deletes(&conn)?;
    Ok(conn)
}

/// Opens (and migrates) the database, then builds the read pool over it.
pub fn open_pool(path: &Path, size: u32) -> Result<DbPool> {
    drop(open(path)?);
    let manager = SqliteConnectionManager::file(path).with_init(|c| configure(c));
    Pool::builder()
        .max_size(size.max(1))
        // A local file does not go stale: r2d2's check would run a statement per checkout.
        .test_on_check_out(false)
        .connection_timeout(busy_timeout())
        .build(manager)
        .map_err(|e| StoreError::Other(format!("cannot open {}: {e}", path.display())))
}

/// Brings the schema to `SCHEMA_VERSION`, each step in its own transaction; refuses a newer file.
fn migrate(conn: &mut Connection) -> Result<()> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::Other(format!(
            "database schema version {version} is newer than this binary understands ({SCHEMA_VERSION}); \
             upgrade convapi"
        )));
    }
    if version == 0 {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        // Another process may have created it while we waited for the lock.
        let again: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if again == 0 {
            tx.execute_batch(SCHEMA)?;
            tx.execute_batch("PRAGMA user_version = 1")?;
        }
        tx.commit()?;
    }
    conn.create_scalar_function(
        MINOR_AMOUNT_FN,
        2,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let value: Option<String> = ctx.get(0)?;
            let currency: Option<String> = ctx.get(1)?;
            Ok(match (value, currency) {
                (Some(v), Some(c)) => report::minor_amount(&v, &c),
                _ => None,
            })
        },
    )?;
    let done = run_migrations(conn);
    conn.remove_function(MINOR_AMOUNT_FN, 2)?;
    done
}

/// The steps of [`MIGRATIONS`] the file has not had yet, each in its own transaction.
fn run_migrations(conn: &mut Connection) -> Result<()> {
    loop {
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version >= SCHEMA_VERSION {
            return Ok(());
        }
        let step = MIGRATIONS[(version - 1) as usize];
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.execute_batch(step)?;
        tx.execute_batch(&format!("PRAGMA user_version = {}", version + 1))?;
        tx.commit()?;
    }
}

/// Runs a transaction-control statement (`BEGIN`, `SAVEPOINT x`, `COMMIT`...) through the
/// connection's statement cache: parsed once per connection, not once per use.
fn tx_control(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// Ends a failed write transaction, unless SQLite already did (it rolls the whole transaction back
/// by itself when a statement fails with `SQLITE_FULL`, `SQLITE_BUSY` or `SQLITE_NOMEM`).
fn roll_back(conn: &Connection) {
    if !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
}

/// The process's one write-transaction runner: runs `f` in a `BEGIN IMMEDIATE` transaction and
/// commits when it succeeds; when `f` or the commit fails, nothing of it stays. In `serve` only
/// the writer thread calls it (once per batch); without a writer the pipeline does (once per chunk).
pub fn write_tx<T, E: From<StoreError>>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    tx_control(conn, "BEGIN IMMEDIATE").map_err(StoreError::from)?;
    let result = f(conn).and_then(|v| {
        tx_control(conn, "COMMIT").map_err(StoreError::from)?;
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
/// fail to roll back, here — which the caller must check with `conn.is_autocommit()` before
/// writing anything more. Savepoints nest: the pipeline's, one per item, inside the writer's, one
/// per job.
pub fn savepoint<T>(conn: &Connection, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    tx_control(conn, "SAVEPOINT work")?;
    let result = f(conn).and_then(|v| {
        tx_control(conn, "RELEASE work")?;
        Ok(v)
    });
    if result.is_err() && !conn.is_autocommit() {
        // `ROLLBACK TO` and `RELEASE` name the innermost savepoint called `work`: this one.
        let undone =
            tx_control(conn, "ROLLBACK TO work").and_then(|()| tx_control(conn, "RELEASE work"));
        if undone.is_err() {
            roll_back(conn);
        }
    }
    result
}

/// Runs `f`'s reads in one read transaction: one snapshot, and one WAL read lock and page-cache
/// check instead of one per statement. (Every commit by the writer empties a reader's page cache at
/// its next transaction, so statements in separate transactions each start cold.)
pub fn read<T, E: From<StoreError>>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    struct End<'a>(&'a Connection);
    impl Drop for End<'_> {
        fn drop(&mut self) {
            // Nothing was written: ending the transaction either way is the same. A pooled
            // connection must never go back to the pool inside one, even after a panic.
            if !self.0.is_autocommit() && tx_control(self.0, "COMMIT").is_err() {
                roll_back(self.0);
            }
        }
    }
    tx_control(conn, "BEGIN").map_err(StoreError::from)?;
    let _end = End(conn);
    f(conn)
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

/// A database at schema version 1 (before every migration) in memory, with a tenant `t`, its site
/// `s` and a visitor `v`: the fixture the migrations' unit tests add their own rows to.
#[cfg(test)]
pub(crate) fn version_1_fixture() -> Connection {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch("PRAGMA foreign_keys = ON").unwrap();
    conn.execute_batch(SCHEMA).unwrap();
    conn.execute_batch(
        "PRAGMA user_version = 1;
         INSERT INTO tenants VALUES ('t', 'T', 0);
         INSERT INTO sites (id, tenant_id, tracker_id, name, currency, window_days, model, created_at)
             VALUES ('s', 't', 'trk', 'S', 'EUR', 30, 'last_touch', 0);
         INSERT INTO visitors VALUES ('s', 'v', 0);",
    )
    .unwrap();
    conn
}
