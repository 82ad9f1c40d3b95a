//! SQLite, the engine of one node and one file: its connect, every per-connection setting, its
//! error mapping, its migration list, and how it runs the statements of the seam in `mod.rs`.
//!
//! The migrations are the numbered SQL files in `migrations/sqlite/` (`0001_initial.sql` …),
//! embedded in order in [`MIGRATIONS`]; migration `N` takes `PRAGMA user_version` from `N - 1` to
//! `N`, in its own transaction (`BEGIN IMMEDIATE`: one process migrates at a time), applied by the
//! runner of `store/migrate.rs`. Where SQL cannot say a step, the file calls a SQL function written
//! in Rust, named after the file (`m0005_…`) and registered on the migrating connection only while
//! its step runs ([`FUNCTIONS`]).

use std::path::Path;
use std::time::{Duration, Instant};

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::functions::{Context, FunctionFlags};
use rusqlite::{Connection, ErrorCode, OptionalExtension};

use super::{Row, Value};
use crate::store::migrate::{self, Chain, Migration};
use crate::store::{report, Result, Settings, StoreError, WAL_SIZE_LIMIT};

/// Opens one connection with `settings`, creating the file, bringing its schema up to date, and
/// switching it to incremental auto-vacuum and secure deletes ([`prepare_deletes`]).
pub fn open(path: &Path, settings: &Settings) -> Result<Connection> {
    let mut conn = Connection::open(path)?;
    configure(&conn, settings)?;
    migrate(&mut conn)?;
    prepare_deletes(&conn)?;
    Ok(conn)
}

/// Applies the per-connection settings. Called for every connection, pooled or not.
pub fn configure(conn: &Connection, settings: &Settings) -> rusqlite::Result<()> {
    conn.busy_timeout(settings.busy_timeout.max(Duration::from_millis(1)))?;
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
    if let Some(pages) = settings.max_page_count {
        conn.pragma_update(None, "max_page_count", pages as i64)?;
    }
    Ok(())
}

/// Per-connection settings for the connections that delete (every connection [`open`]
/// makes: the writer's, the pipeline's, the command line's), and the file's auto-vacuum mode.
///
/// `secure_delete` overwrites deleted rows and freed pages with zeros, so an erased id does not
/// linger in a free page or a page's unused space. Incremental auto-vacuum lets `retention::reclaim` give
/// free pages back to the file system a few at a time. The mode can only change on a file without
/// tables or with a `VACUUM` (never inside a transaction), so a file made before it is vacuumed
/// once, here, on the first open by this version; when the file is busy (another process writes)
/// the `VACUUM` is tried again at the next open.
pub fn prepare_deletes(conn: &Connection) -> Result<()> {
    conn.pragma_update(None, "secure_delete", "ON")?;
    let mode: i64 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?;
    if mode != 2 {
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
        if let Err(e) = conn.execute_batch("VACUUM") {
            log::warn!("cannot switch the database to incremental auto-vacuum yet: {e}");
        }
    }
    Ok(())
}

pub type Pool = r2d2::Pool<SqliteConnectionManager>;
pub type Pooled = r2d2::PooledConnection<SqliteConnectionManager>;

/// Opens (and migrates) the database, then builds the read pool over it.
pub fn pool(path: &Path, size: u32, settings: &Settings) -> Result<Pool> {
    drop(open(path, settings)?);
    let settings = *settings;
    let manager = SqliteConnectionManager::file(path).with_init(move |c| configure(c, &settings));
    let pool = r2d2::Pool::builder()
        .max_size(size.max(1))
        // A local file does not go stale: r2d2's check would run a statement per checkout.
        .test_on_check_out(false)
        .connection_timeout(settings.busy_timeout.max(Duration::from_millis(1)))
        // Not `build`: it waits for every connection within the checkout timeout, which a short
        // --busy-timeout-ms on a loaded machine missed at startup. The pool fills in the
        // background; one connection proves it opens.
        .build_unchecked(manager);
    pool.get_timeout(STARTUP_WAIT.max(settings.busy_timeout))
        .map_err(|e| StoreError::Other(format!("cannot open {}: {e}", path.display())))?;
    Ok(pool)
}

/// How long the pool's first connection may take to open at startup.
const STARTUP_WAIT: Duration = Duration::from_secs(30);

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

// The statements of the seam (`Conn`'s methods), on SQLite: every one through the connection's
// statement cache, parsed once per connection.

pub(super) fn tx_control(c: &Connection, sql: &str) -> Result<()> {
    Ok(c.prepare_cached(sql)?.execute([]).map(|_| ())?)
}

/// See [`super::Conn::interrupt_after`]: a progress handler checks the clock every thousand
/// virtual-machine steps across everything `f` runs.
pub(super) fn interrupt_after<T>(
    c: &Connection,
    deadline: Duration,
    f: impl FnOnce() -> T,
) -> Result<T> {
    let until = Instant::now() + deadline;
    c.progress_handler(1_000, Some(move || Instant::now() > until))?;
    let out = f();
    c.progress_handler(0, None::<fn() -> bool>)?;
    Ok(out)
}

pub(super) fn execute(c: &Connection, sql: &str, args: &[Value]) -> Result<u64> {
    Ok(c.prepare_cached(sql)?
        .execute(rusqlite::params_from_iter(args))? as u64)
}

pub(super) fn query_opt<T>(
    c: &Connection,
    sql: &str,
    args: &[Value],
    f: impl FnOnce(&Row) -> Result<T>,
) -> Result<Option<T>> {
    c.prepare_cached(sql)?
        .query_row(rusqlite::params_from_iter(args), |r| Ok(f(&Row::Sqlite(r))))
        .optional()?
        .transpose()
}

pub(super) fn query_each<E: From<StoreError>>(
    c: &Connection,
    sql: &str,
    args: &[Value],
    mut f: impl FnMut(&Row) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let mut statement = c.prepare_cached(sql).map_err(StoreError::from)?;
    let mut rows = statement
        .query(rusqlite::params_from_iter(args))
        .map_err(StoreError::from)?;
    while let Some(r) = rows.next().map_err(StoreError::from)? {
        f(&Row::Sqlite(r))?;
    }
    Ok(())
}

/// Every migration of SQLite, in order; see `store/migrate.rs`'s `released_migrations_are_frozen`
/// to add one.
pub(in crate::store) const MIGRATIONS: &[Migration] = &[
    Migration::new(
        1,
        "0001_initial.sql",
        include_str!("../migrations/sqlite/0001_initial.sql"),
    ),
    Migration::new(
        2,
        "0002_pixel_trust_and_storage.sql",
        include_str!("../migrations/sqlite/0002_pixel_trust_and_storage.sql"),
    ),
    Migration::new(
        3,
        "0003_outbox_origin.sql",
        include_str!("../migrations/sqlite/0003_outbox_origin.sql"),
    ),
    Migration::new(
        4,
        "0004_data_lifecycle.sql",
        include_str!("../migrations/sqlite/0004_data_lifecycle.sql"),
    ),
    Migration::new(
        5,
        "0005_report_rollup.sql",
        include_str!("../migrations/sqlite/0005_report_rollup.sql"),
    ),
    Migration::new(
        6,
        "0006_dashboard_accounts.sql",
        include_str!("../migrations/sqlite/0006_dashboard_accounts.sql"),
    ),
    Migration::new(
        7,
        "0007_first_run_token.sql",
        include_str!("../migrations/sqlite/0007_first_run_token.sql"),
    ),
    Migration::new(
        8,
        "0008_forwarding.sql",
        include_str!("../migrations/sqlite/0008_forwarding.sql"),
    ),
    Migration::new(
        9,
        "0009_destination_api_version.sql",
        include_str!("../migrations/sqlite/0009_destination_api_version.sql"),
    ),
    Migration::new(
        10,
        "0010_people.sql",
        include_str!("../migrations/sqlite/0010_people.sql"),
    ),
    Migration::new(
        11,
        "0011_adjustments.sql",
        include_str!("../migrations/sqlite/0011_adjustments.sql"),
    ),
    Migration::new(
        12,
        "0012_rollup_plpgsql.sql",
        include_str!("../migrations/sqlite/0012_rollup_plpgsql.sql"),
    ),
    Migration::new(
        13,
        "0013_site_deletion.sql",
        include_str!("../migrations/sqlite/0013_site_deletion.sql"),
    ),
    Migration::new(
        14,
        "0014_field_warnings.sql",
        include_str!("../migrations/sqlite/0014_field_warnings.sql"),
    ),
    Migration::new(
        15,
        "0015_adjustment_deliveries.sql",
        include_str!("../migrations/sqlite/0015_adjustment_deliveries.sql"),
    ),
    Migration::new(
        16,
        "0016_net_revenue.sql",
        include_str!("../migrations/sqlite/0016_net_revenue.sql"),
    ),
    Migration::new(
        17,
        "0017_sources.sql",
        include_str!("../migrations/sqlite/0017_sources.sql"),
    ),
    Migration::new(
        18,
        "0018_adjusted_orders.sql",
        include_str!("../migrations/sqlite/0018_adjusted_orders.sql"),
    ),
    Migration::new(
        19,
        "0019_unattributed.sql",
        include_str!("../migrations/sqlite/0019_unattributed.sql"),
    ),
    Migration::new(
        20,
        "0020_test_mode.sql",
        include_str!("../migrations/sqlite/0020_test_mode.sql"),
    ),
    Migration::new(
        21,
        "0021_referral_exclusion.sql",
        include_str!("../migrations/sqlite/0021_referral_exclusion.sql"),
    ),
    Migration::new(
        22,
        "0022_visitor_sketches.sql",
        include_str!("../migrations/sqlite/0022_visitor_sketches.sql"),
    ),
    Migration::new(
        23,
        "0023_rollup_slots.sql",
        include_str!("../migrations/sqlite/0023_rollup_slots.sql"),
    ),
    Migration::new(
        24,
        "0024_sketch_day_clock.sql",
        include_str!("../migrations/sqlite/0024_sketch_day_clock.sql"),
    ),
    Migration::new(
        25,
        "0025_outbox_due_order.sql",
        include_str!("../migrations/sqlite/0025_outbox_due_order.sql"),
    ),
    Migration::new(
        26,
        "0026_rollup_update_first.sql",
        include_str!("../migrations/sqlite/0026_rollup_update_first.sql"),
    ),
    Migration::new(
        27,
        "0027_sessions_visitor_id.sql",
        include_str!("../migrations/sqlite/0027_sessions_visitor_id.sql"),
    ),
];

/// The schema version this binary writes and understands: the number of the last migration.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// A SQL function written in Rust, for what a migration's SQL cannot say; named after its file.
struct RustFunction {
    name: &'static str,
    args: i32,
    f: fn(&Context<'_>) -> rusqlite::Result<rusqlite::types::Value>,
}

/// The Rust functions each migration's SQL calls, by its file.
const FUNCTIONS: &[(&str, RustFunction)] = &[
    (
        "0005_report_rollup.sql",
        RustFunction {
            name: "m0005_minor_amount",
            args: 2,
            f: m0005_minor_amount,
        },
    ),
    (
        "0016_net_revenue.sql",
        RustFunction {
            name: "m0016_net_delta",
            args: 6,
            f: m0016_net_delta,
        },
    ),
    (
        "0016_net_revenue.sql",
        RustFunction {
            name: "m0016_minor_amount",
            args: 2,
            f: m0005_minor_amount,
        },
    ),
];

/// `m0005_minor_amount(value, currency)`, the Rust part of `0005_report_rollup.sql`: the existing
/// rows' `reporting_minor`, exact decimal arithmetic SQL has not. It is `report::minor_amount`, the
/// function the pipeline fills new rows' `reporting_minor` with, so that old and new rows agree.
fn m0005_minor_amount(ctx: &Context<'_>) -> rusqlite::Result<rusqlite::types::Value> {
    let value: Option<String> = ctx.get(0)?;
    let currency: Option<String> = ctx.get(1)?;
    Ok(match (value, currency) {
        (Some(v), Some(c)) => report::minor_amount(&v, &c).map_or(
            rusqlite::types::Value::Null,
            rusqlite::types::Value::Integer,
        ),
        _ => rusqlite::types::Value::Null,
    })
}

/// `m0016_net_delta(value, reporting_value, reporting_currency, fx_rate, ledger, id)`, the Rust
/// part of `0016_net_revenue.sql`: the change adjustment `id` made to its order's net value in the
/// site currency, by `store::report::deltas`, the function every later write uses. `ledger`
/// is the order's adjustments as `id,type,value,occurred_at` joined by `;`. NULL where the order
/// has no value in the site currency; an error for a ledger that is not what was written.
fn m0016_net_delta(ctx: &Context<'_>) -> rusqlite::Result<rusqlite::types::Value> {
    use crate::ledger::{Entry, Kind};
    let broken = |why: String| rusqlite::Error::UserFunctionError(why.into());
    let value: Option<String> = ctx.get(0)?;
    let reporting: Option<String> = ctx.get(1)?;
    let currency: Option<String> = ctx.get(2)?;
    let rate: Option<String> = ctx.get(3)?;
    let ledger: Option<String> = ctx.get(4)?;
    let id: i64 = ctx.get(5)?;
    let mut entries = Vec::new();
    for item in ledger
        .as_deref()
        .unwrap_or("")
        .split(';')
        .filter(|s| !s.is_empty())
    {
        let fields: Vec<&str> = item.split(',').collect();
        let [arrival, kind, value, occurred_at] = fields[..] else {
            return Err(broken(format!(
                "adjustment {item:?} is not id,type,value,occurred_at"
            )));
        };
        let number = |s: &str| s.parse::<i64>().map_err(|e| broken(format!("{s:?}: {e}")));
        let kind = Kind::parse(kind).ok_or_else(|| broken(format!("adjustment type {kind:?}")))?;
        let value = match value {
            "" => None,
            v => Some(crate::fx::decimal(v).map_err(|e| broken(format!("adjustment value {e}")))?),
        };
        entries.push(Entry {
            kind,
            value,
            occurred_at: number(occurred_at)?,
            arrival: number(arrival)?,
        });
    }
    let deltas = crate::store::report::deltas(
        value.as_deref(),
        reporting.as_deref(),
        currency.as_deref(),
        rate.as_deref(),
        &entries,
    )
    .map_err(|e| broken(e.to_string()))?;
    Ok(deltas
        .into_iter()
        .find(|(arrival, _)| *arrival == id)
        .and_then(|(_, d)| d)
        .map_or(rusqlite::types::Value::Null, |d| {
            rusqlite::types::Value::Text(d.to_string())
        }))
}

pub(in crate::store) fn user_version(conn: &Connection) -> Result<i64> {
    Ok(conn.query_row("PRAGMA user_version", [], |r| r.get(0))?)
}

/// Brings the schema to [`crate::store::SCHEMA_VERSION`], each migration in its own transaction;
/// refuses a newer file. An up-to-date file costs one read and takes no lock.
pub(in crate::store) fn migrate(conn: &mut Connection) -> Result<()> {
    migrate_to(conn, crate::store::SCHEMA_VERSION).map(drop)
}

/// [`migrate`], stopping at `target` (tests build a file as an older binary left it); the lines
/// it logged, one per migration applied.
pub(in crate::store) fn migrate_to(conn: &mut Connection, target: i64) -> Result<Vec<String>> {
    migrate::run(&mut SqliteChain { conn }, MIGRATIONS, target)
}

/// The migration runner's steps on SQLite: the version is `PRAGMA user_version`, the lock
/// SQLite's write lock (`BEGIN IMMEDIATE`), one transaction per migration.
struct SqliteChain<'c> {
    conn: &'c Connection,
}

impl Chain for SqliteChain<'_> {
    const ENGINE: &'static str = "sqlite";
    const STEPWISE: bool = true;

    fn peek(&mut self) -> Result<Option<i64>> {
        user_version(self.conn).map(Some)
    }

    /// Foreign keys are off while a migration runs (they can only be switched outside a
    /// transaction): a table built again (SQLite's documented procedure for what `ALTER TABLE`
    /// cannot do) drops the old one, and with them on that drop would delete the rows that
    /// refer to it through `ON DELETE CASCADE`. [`Chain::commit`] checks them all before it
    /// commits.
    fn begin(&mut self) -> Result<()> {
        self.conn.execute_batch("PRAGMA foreign_keys = OFF")?;
        self.conn.execute_batch("BEGIN IMMEDIATE").map_err(|e| {
            let _ = self.conn.execute_batch("PRAGMA foreign_keys = ON");
            e.into()
        })
    }

    fn version(&mut self) -> Result<i64> {
        user_version(self.conn)
    }

    fn apply(&mut self, m: &Migration) -> Result<()> {
        let functions = FUNCTIONS.iter().filter(|(file, _)| *file == m.file);
        for (_, f) in functions.clone() {
            self.conn.create_scalar_function(
                f.name,
                f.args,
                FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
                f.f,
            )?;
        }
        let done = self.conn.execute_batch(m.sql);
        for (_, f) in functions {
            self.conn.remove_function(f.name, f.args)?;
        }
        done.map_err(|e| match StoreError::from(e) {
            StoreError::Other(why) => StoreError::Other(format!("migration {}: {why}", m.file)),
            StoreError::Conflict(why) => {
                StoreError::Conflict(format!("migration {}: {why}", m.file))
            }
            transient => transient,
        })
    }

    fn set_version(&mut self, version: i64) -> Result<()> {
        Ok(self.conn.pragma_update(None, "user_version", version)?)
    }

    fn commit(&mut self) -> Result<()> {
        let broken: Vec<String> = {
            let mut check = self.conn.prepare("PRAGMA foreign_key_check")?;
            let rows = check.query_map([], |r| {
                Ok(format!(
                    "{} row {} refers to a missing {}",
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<i64>>(1)?.unwrap_or(0),
                    r.get::<_, String>(2)?
                ))
            })?;
            rows.take(5).collect::<rusqlite::Result<_>>()?
        };
        if !broken.is_empty() {
            return Err(StoreError::Other(format!(
                "a migration would leave broken references: {}",
                broken.join("; ")
            )));
        }
        self.conn.execute_batch("COMMIT")?;
        Ok(self.conn.execute_batch("PRAGMA foreign_keys = ON")?)
    }

    fn rollback(&mut self) {
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        let _ = self.conn.execute_batch("PRAGMA foreign_keys = ON");
    }
}

/// A database at schema version 1 (before every later migration) in memory, with a tenant `t`, its
/// site `s` and a visitor `v`: the fixture the migrations' unit tests add their own rows to.
#[cfg(test)]
pub(crate) fn version_1_fixture() -> Connection {
    let mut conn = Connection::open_in_memory().unwrap();
    conn.execute_batch("PRAGMA foreign_keys = ON").unwrap();
    migrate_to(&mut conn, 1).unwrap();
    conn.execute_batch(
        "INSERT INTO tenants VALUES ('t', 'T', 0);
         INSERT INTO sites (id, tenant_id, tracker_id, name, currency, window_days, model, created_at)
             VALUES ('s', 't', 'trk', 'S', 'EUR', 30, 'last_touch', 0);
         INSERT INTO visitors VALUES ('s', 'v', 0);",
    )
    .unwrap();
    conn
}
