//! `convapi migrate`'s copy of a SQLite database into an empty PostgreSQL one (docs/decisions.md
//! §12): every table, row for row, ids and hashes as they are, in one snapshot of the source and one
//! transaction of the target, checked before it commits.
//!
//! - **One snapshot, one transaction.** The source is read in one read transaction
//!   ([`super::read`]); everything is written in one PostgreSQL transaction, which commits only
//!   after the checks, so a failure anywhere leaves no row in the target. The target's tables are
//!   locked against writers for that transaction (`EXCLUSIVE`: readers still see them, empty), so
//!   a node starting on the database meanwhile, or a second `migrate`, waits or fails instead of
//!   mixing its rows in. The target must hold no convapi data ([`CopyError::NotEmpty`]).
//! - **Columns by name, converted by the target's type.** Each table's columns are read from both
//!   schemas (`PRAGMA table_info`, `information_schema.columns`), and must be the same names; each
//!   value is written as the text PostgreSQL's column type reads (integers, `NUMERIC`, `BYTEA` as
//!   hex, text with its `COPY` escapes). A table or column either side lacks, a column type this
//!   copy does not convert, or a trigger it does not know stops it before any row is written
//!   ([`CopyError::Schema`]). Rows are streamed from SQLite (rusqlite's row iterator, as
//!   `db::Conn::query_each` does, read here as untyped values) into `COPY … FROM STDIN` in text
//!   format: one statement per table, rows sent as they are read, so memory stays flat whatever the
//!   table's size, and PostgreSQL's fastest way in (a multi-row `INSERT` parses and plans every
//!   batch, and its parameters would need one type per column anyway).
//! - **Ids.** Ids are copied as they are, the identity columns (`outbox.id`,
//!   `visitor_clients.id`, `adjustments.id`, `adjustment_deliveries.id`) included (`COPY` writes given values even into a `GENERATED ALWAYS`
//!   column); afterwards each identity's sequence is moved past the largest id, so rows inserted
//!   after the move get new ids.
//! - **The rollup.** `report_daily` is derived data, kept by a trigger on `conversions` on both
//!   engines. Left on during the copy, the trigger would update each cell once per conversion, in
//!   one transaction, so each update adds a row version its cell's next update has to step over
//!   (minutes for a few hundred thousand conversions, and worse the more conversions share a
//!   cell). So the trigger is switched off for the copy of `conversions` (`ALTER TABLE … DISABLE
//!   TRIGGER`: the table's owner may, no superuser needed, unlike `session_replication_role`; and
//!   within the transaction, so no other session ever sees it off and a failure undoes it), and
//!   on again after it; the rollup is then built from the copied conversions in one `INSERT …
//!   SELECT … GROUP BY`, with the trigger's arithmetic, exactly (its revenue is `NUMERIC`, where
//!   SQLite's cells past 64 bits are approximate `REAL`s). A role that does not own the table
//!   cannot switch the trigger off: the copy then leaves it on, and the trigger builds the rollup,
//!   slowly. Either way the source's `report_daily` is then compared with the rollup built, cell by
//!   cell: counts equal, revenue equal (within 10⁻⁹ of it where the source's cell is a `REAL`), so
//!   the check is independent of how it was built. The source's cells whose counts all came back
//!   to 0 (a deleted conversion leaves its cell at 0 on both engines) are copied as they are,
//!   zero, so that the rollups have the same rows. A source whose rollup disagrees with its
//!   conversions is refused, naming the first cell.
//! - **The net revenue's rollup.** `report_refunds` is built in the target by its trigger on
//!   `adjustments` as they are copied (each row carries its change and its order's cell), never
//!   copied; its zero cells are deleted on both engines, so its row count is checked as every
//!   table's.
//! - **The visitors rollup.** `sketch_days` and `visitor_sketches` are derived and never copied:
//!   their triggers on `sessions` and `conversions` are switched off for the copy as the rollup's
//!   (left on when the role may not), the tables are emptied at its end and every site's
//!   `sketches_through` cleared, so the target's `serve` builds them again from each site's first
//!   day; their row counts are not compared.
//! - **Checks before the commit.** Each table's row count equals the source's, and the caller's
//!   own check (the CLI compares each site's report on both connections) passes.

#![cfg_attr(not(feature = "postgres"), allow(dead_code, unused_imports))]

use std::fmt;
use std::io::Write;

use rusqlite::types::ValueRef;

use super::engine::{Conn, PgConn};
use super::StoreError;

/// Every table of the schema but PostgreSQL's `schema_version`, in the order they are copied: each
/// after the tables its foreign keys name, and `report_daily` after `conversions` (see the module
/// doc). A table a migration adds must be added here: [`copy`] refuses a schema with a table it
/// does not list.
pub const TABLES: &[&str] = &[
    "tenants",
    "api_keys",
    "sites",
    "sketch_days",
    "visitor_sketches",
    "field_warnings",
    "visitors",
    "sessions",
    "visitor_clients",
    "events",
    "conversions",
    "adjustments",
    "outbox",
    "destinations",
    "deliveries",
    "adjustment_deliveries",
    "sources",
    "hook_events",
    "fx_rates",
    "users",
    "web_sessions",
    "report_daily",
    "report_refunds",
    "first_run",
    "daily_salts",
    "user_tokens",
];

/// The rollup's trigger on `conversions`, switched off for the copy when the role may.
const ROLLUP_TRIGGER: (&str, &str) = ("conversions", "report_daily_track");

/// The triggers of the PostgreSQL schema that this copy knows the effect of (table, trigger).
const KNOWN_TRIGGERS: &[(&str, &str)] = &[
    ROLLUP_TRIGGER,
    REFUNDS_TRIGGERS[0],
    REFUNDS_TRIGGERS[1],
    SKETCH_TRIGGERS[0],
    SKETCH_TRIGGERS[1],
    SKETCH_TRIGGERS[2],
    SKETCH_TRIGGERS[3],
    SKETCH_TRIGGERS[4],
    SKETCH_TRIGGERS[5],
    SKETCH_TRIGGERS[6],
];

/// The visitors rollup (`0022_visitor_sketches.sql`): its tables are derived and never copied;
/// its triggers note, as sessions and conversions of past days are copied, each such day as due
/// (`sketch_days`), and the target's `serve` builds them again.
const SKETCH_TABLES: [&str; 2] = ["sketch_days", "visitor_sketches"];
const SKETCH_TRIGGERS: [(&str, &str); 7] = [
    ("sessions", "sketch_days_session_added"),
    ("sessions", "sketch_days_session_changed"),
    ("sessions", "sketch_days_session_deleted"),
    ("conversions", "sketch_days_conversion_added"),
    ("conversions", "sketch_days_conversion_changed"),
    ("conversions", "sketch_days_conversion_deleted"),
    ("sites", "sketch_days_site_keys_changed"),
];

/// The net revenue's triggers (`0016_net_revenue.sql`): `report_refunds` is built in the target by
/// the first as `adjustments` are copied, never copied itself; the second fires on updates only.
/// Its cells whose sums came back to 0 are deleted on both engines, so its row count is compared
/// like every table's.
const REFUNDS_TRIGGERS: [(&str, &str); 2] = [
    ("adjustments", "report_refunds_track"),
    ("conversions", "adjustments_follow_conversion"),
];

/// Rows between two [`Step::Rows`] reports.
/// Columns PostgreSQL's schema has and SQLite's has not, left to their default in a copy:
/// `report_daily.slot`, the writing connection's part of a cell (migration 23), is 0 for every
/// cell copied or built by migrate.
const TARGET_ONLY: [(&str, &str); 1] = [("report_daily", "slot")];

const PROGRESS_EVERY: u64 = 1_000;

/// How far a cell's revenue may be from the source's when SQLite holds it as an approximate `REAL`
/// (a cell past 64 bits): a fraction of it.
const REAL_TOLERANCE: &str = "0.000000001";

/// What the copy is doing, for the caller's progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    /// The copy of a table begins: `total` rows.
    Table { table: &'a str, total: u64 },
    /// `done` of the table's `total` rows are sent.
    Rows {
        table: &'a str,
        done: u64,
        total: u64,
    },
    /// The table is copied: `rows` rows.
    Copied { table: &'a str, rows: u64 },
    /// Every table is copied; the checks run.
    Checking,
}

/// Why the copy did not happen. Nothing of it is in the target in any case.
#[derive(Debug)]
pub enum CopyError {
    /// The target holds convapi data already: the tables that have rows.
    NotEmpty(Vec<&'static str>),
    /// The two schemas differ in a way the copy does not handle: what differs.
    Schema(String),
    /// Copying a table failed: a value the target cannot hold, or the target refused a row.
    Table { table: String, error: StoreError },
    /// A check after the copy found a difference: the table and what differs.
    Mismatch { table: String, detail: String },
    /// Either database failed outside a table's copy.
    Store(StoreError),
}

impl fmt::Display for CopyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CopyError::NotEmpty(tables) => {
                write!(
                    f,
                    "holds convapi data already (rows in {})",
                    tables.join(", ")
                )
            }
            CopyError::Schema(why) => write!(f, "the schemas differ: {why}"),
            CopyError::Table { table, error } => write!(f, "copying {table}: {error}"),
            CopyError::Mismatch { table, detail } => {
                write!(f, "the copy of {table} differs from the source: {detail}")
            }
            CopyError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for CopyError {}

impl From<StoreError> for CopyError {
    fn from(e: StoreError) -> Self {
        CopyError::Store(e)
    }
}

/// What was copied: each table with its rows, in the order copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    pub tables: Vec<(&'static str, u64)>,
}

impl Copied {
    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|(_, n)| n).sum()
    }
}

/// How a column's values are written for PostgreSQL, by the target column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Integer,
    Numeric,
    Text,
    Bytes,
    Boolean,
}

impl Kind {
    fn of(data_type: &str) -> Option<Kind> {
        Some(match data_type {
            "bigint" | "integer" | "smallint" => Kind::Integer,
            "numeric" => Kind::Numeric,
            "text" | "character varying" => Kind::Text,
            "bytea" => Kind::Bytes,
            "boolean" => Kind::Boolean,
            _ => return None,
        })
    }
}

/// A column of the target, with its kind.
#[derive(Debug, Clone)]
struct Column {
    name: String,
    kind: Kind,
}

/// Copies the SQLite database `source` into the PostgreSQL database `target` (migrated to the
/// same schema version, and empty of convapi data), reporting each [`Step`] to `progress`, then
/// runs `check` on both (source, target) inside the snapshot and the transaction, and commits
/// when it passes. Any failure rolls the target back to as it was.
#[cfg(feature = "postgres")]
pub fn copy(
    source: &rusqlite::Connection,
    target: &PgConn,
    progress: &mut dyn FnMut(Step),
    check: impl FnOnce(Conn<'_>, Conn<'_>) -> Result<(), CopyError>,
) -> Result<Copied, CopyError> {
    super::read(source, |_| {
        let tx = Transaction::begin(target)?;
        let copied = copy_in(source, target, progress)?;
        progress(Step::Checking);
        check(Conn::Sqlite(source), Conn::Postgres(target))?;
        tx.commit()?;
        // Statistics for the planner now, not when autovacuum comes by: without them the nodes'
        // prepared statements cache plans that read a whole site per lookup (found by
        // scripts/bench/postgres.sh: 2.5 times slower until the first autovacuum).
        target
            .with_client(|c| c.batch_execute("ANALYZE"))
            .map_err(StoreError::from)?;
        Ok(copied)
    })
}

/// Without the `postgres` feature no PostgreSQL connection exists (`engine/without_postgres.rs`):
/// `convapi migrate` fails when it opens the target, before any copy.
#[cfg(not(feature = "postgres"))]
pub fn copy(
    _source: &rusqlite::Connection,
    target: &PgConn,
    _progress: &mut dyn FnMut(Step),
    _check: impl FnOnce(Conn<'_>, Conn<'_>) -> Result<(), CopyError>,
) -> Result<Copied, CopyError> {
    target.never()
}

/// The target's transaction: rolled back when dropped before [`Transaction::commit`].
#[cfg(feature = "postgres")]
struct Transaction<'a> {
    target: &'a PgConn,
    open: bool,
}

#[cfg(feature = "postgres")]
impl<'a> Transaction<'a> {
    fn begin(target: &'a PgConn) -> Result<Transaction<'a>, CopyError> {
        target
            .with_client(|c| c.batch_execute("BEGIN"))
            .map_err(pg_error)?;
        Ok(Transaction { target, open: true })
    }

    fn commit(mut self) -> Result<(), CopyError> {
        self.open = false;
        self.target
            .with_client(|c| c.batch_execute("COMMIT"))
            .map_err(pg_error)?;
        Ok(())
    }
}

#[cfg(feature = "postgres")]
impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if self.open {
            // A connection whose transaction cannot be ended is closed by its owner next, which
            // ends the transaction on the server as well.
            let _ = self.target.with_client(|c| c.batch_execute("ROLLBACK"));
        }
    }
}

/// A PostgreSQL failure with the server's own message (its `Display` says only "db error").
#[cfg(feature = "postgres")]
fn pg_error(e: postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(db) => StoreError::Other(match db.detail() {
            Some(detail) => format!("PostgreSQL: {} ({detail})", db.message()),
            None => format!("PostgreSQL: {}", db.message()),
        }),
        None => StoreError::from(e),
    }
}

/// An identifier, quoted for either engine.
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Everything between `BEGIN` and the caller's check.
#[cfg(feature = "postgres")]
fn copy_in(
    source: &rusqlite::Connection,
    target: &PgConn,
    progress: &mut dyn FnMut(Step),
) -> Result<Copied, CopyError> {
    target.with_client(|client| {
        check_encoding(client)?;
        let plans = plan(source, client)?;
        lock_and_check_empty(client)?;
        let mut tables = Vec::with_capacity(plans.len());
        let mut totals = Vec::with_capacity(plans.len());
        let mut trigger_off = false;
        for (table, columns) in &plans {
            let total = count_sqlite(source, table)?;
            progress(Step::Table { table, total });
            let rows = if *table == "report_daily" {
                copy_rollup(source, client, columns, total, trigger_off, progress)?
            } else if *table == "report_refunds" || SKETCH_TABLES.contains(table) {
                count_postgres(client, table)?
            } else {
                if *table == ROLLUP_TRIGGER.0 {
                    trigger_off = switch_rollup_trigger_off(client)?;
                }
                let sketch_trigger = SKETCH_TRIGGERS
                    .iter()
                    .find(|(t, name)| t == table && name.ends_with("_added"));
                let sketch_off = match sketch_trigger {
                    Some(trigger) => switch_trigger(client, trigger, false)?,
                    None => false,
                };
                let rows = copy_rows(source, client, table, table, columns, &[], total, progress)?;
                if let (true, Some(trigger)) = (sketch_off, sketch_trigger) {
                    switch_trigger(client, trigger, true)?;
                }
                if *table == ROLLUP_TRIGGER.0 && trigger_off {
                    client
                        .batch_execute(&format!(
                            "ALTER TABLE {} ENABLE TRIGGER {}",
                            quoted(ROLLUP_TRIGGER.0),
                            quoted(ROLLUP_TRIGGER.1)
                        ))
                        .map_err(pg_error)?;
                }
                rows
            };
            progress(Step::Copied { table, rows });
            tables.push((*table, rows));
            totals.push(total);
        }
        move_sequences(client)?;
        // The visitors rollup is built again by the target's `serve`, from each site's first day.
        client
            .batch_execute(
                "DELETE FROM visitor_sketches; DELETE FROM sketch_days;
                 UPDATE sites SET sketches_through = NULL",
            )
            .map_err(pg_error)?;
        for ((table, _), total) in tables.iter().zip(totals) {
            if SKETCH_TABLES.contains(table) {
                continue;
            }
            let there = count_postgres(client, table)?;
            if there != total {
                return Err(CopyError::Mismatch {
                    table: (*table).to_owned(),
                    detail: format!("{total} rows in the source, {there} in the target"),
                });
            }
        }
        Ok(Copied { tables })
    })
}

/// The target must store text as UTF-8, as SQLite does: in another encoding a character it
/// cannot hold would fail the copy half-way.
#[cfg(feature = "postgres")]
fn check_encoding(client: &mut postgres::Client) -> Result<(), CopyError> {
    let encoding: String = client
        .query_one("SELECT pg_encoding_to_char(encoding)::text FROM pg_database WHERE datname = current_database()", &[])
        .map_err(pg_error)?
        .get(0);
    if encoding != "UTF8" {
        return Err(CopyError::Schema(format!(
            "the target database's encoding is {encoding}, not UTF8: make a new one with \
             ENCODING 'UTF8'"
        )));
    }
    Ok(())
}

/// Each table of [`TABLES`] with the target's columns, after checking that both schemas have the
/// same tables, columns and only the triggers this copy knows.
#[cfg(feature = "postgres")]
fn plan(
    source: &rusqlite::Connection,
    client: &mut postgres::Client,
) -> Result<Vec<(&'static str, Vec<Column>)>, CopyError> {
    let listed = |name: &str| TABLES.contains(&name);
    let mut stmt = source
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
        )
        .map_err(StoreError::from)?;
    let in_source: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .map_err(StoreError::from)?;
    let in_target: Vec<String> = client
        .query(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
               AND table_name <> 'schema_version' ORDER BY 1",
            &[],
        )
        .map_err(pg_error)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for (side, names) in [("source", &in_source), ("target", &in_target)] {
        if let Some(extra) = names.iter().find(|n| !listed(n)) {
            return Err(CopyError::Schema(format!(
                "the {side} has a table {extra} that migrate does not copy"
            )));
        }
        if let Some(missing) = TABLES.iter().find(|t| !names.iter().any(|n| n == *t)) {
            return Err(CopyError::Schema(format!(
                "the {side} has no table {missing}"
            )));
        }
    }
    let triggers = client
        .query(
            "SELECT c.relname::text, t.tgname::text FROM pg_trigger t
             JOIN pg_class c ON c.oid = t.tgrelid
             WHERE c.relnamespace = current_schema()::regnamespace AND NOT t.tgisinternal
             ORDER BY 1, 2",
            &[],
        )
        .map_err(pg_error)?;
    for r in &triggers {
        let (table, name): (String, String) = (r.get(0), r.get(1));
        if !KNOWN_TRIGGERS.contains(&(table.as_str(), name.as_str())) {
            return Err(CopyError::Schema(format!(
                "the target has a trigger {name} on {table} that migrate does not know"
            )));
        }
    }
    let mut plans = Vec::with_capacity(TABLES.len());
    for table in TABLES {
        let mut stmt = source
            .prepare("SELECT name FROM pragma_table_info(?1)")
            .map_err(StoreError::from)?;
        let mut from: Vec<String> = stmt
            .query_map([table], |r| r.get(0))
            .and_then(|rows| rows.collect())
            .map_err(StoreError::from)?;
        let mut columns = Vec::new();
        for r in client
            .query(
                "SELECT column_name::text, data_type::text FROM information_schema.columns
                 WHERE table_schema = current_schema() AND table_name = $1
                 ORDER BY ordinal_position",
                &[table],
            )
            .map_err(pg_error)?
        {
            let (name, data_type): (String, String) = (r.get(0), r.get(1));
            let Some(kind) = Kind::of(&data_type) else {
                return Err(CopyError::Schema(format!(
                    "{table}.{name} is {data_type} in the target, a type migrate does not convert"
                )));
            };
            let Some(at) = from.iter().position(|f| *f == name) else {
                if TARGET_ONLY.contains(&(*table, name.as_str())) {
                    continue;
                }
                return Err(CopyError::Schema(format!(
                    "the source has no column {table}.{name}"
                )));
            };
            from.swap_remove(at);
            columns.push(Column { name, kind });
        }
        if let Some(extra) = from.first() {
            return Err(CopyError::Schema(format!(
                "the target has no column {table}.{extra}"
            )));
        }
        plans.push((*table, columns));
    }
    Ok(plans)
}

/// Locks every table against other writers until the transaction ends, then refuses a target
/// with rows in any of them. A writer holding a table (a node running on it) makes the lock wait
/// at most 10 s, then fail.
#[cfg(feature = "postgres")]
fn lock_and_check_empty(client: &mut postgres::Client) -> Result<(), CopyError> {
    let table_list: Vec<String> = TABLES.iter().map(|t| quoted(t)).collect();
    let table_list = table_list.join(", ");
    client
        .batch_execute(&format!(
            "SET LOCAL lock_timeout = '10s'; LOCK TABLE {table_list} IN EXCLUSIVE MODE"
        ))
        .map_err(|e| match e.code() {
            Some(c) if *c == postgres::error::SqlState::LOCK_NOT_AVAILABLE => {
                CopyError::Store(StoreError::Other(
                    "another session kept writing to the target's tables for 10 s (a convapi \
                     node running on it, or another migrate): the target must be a database \
                     nothing else uses"
                        .to_owned(),
                ))
            }
            _ => pg_error(e).into(),
        })?;
    let mut full = Vec::new();
    for table in TABLES {
        let table_ident = quoted(table);
        let any: bool = client
            .query_one(&format!("SELECT EXISTS (SELECT 1 FROM {table_ident})"), &[])
            .map_err(pg_error)?
            .get(0);
        if any {
            full.push(*table);
        }
    }
    if full.is_empty() {
        Ok(())
    } else {
        Err(CopyError::NotEmpty(full))
    }
}

fn count_sqlite(source: &rusqlite::Connection, table: &'static str) -> Result<u64, CopyError> {
    let table_ident = quoted(table);
    let n: i64 = source
        .query_row(&format!("SELECT COUNT(*) FROM {table_ident}"), [], |r| {
            r.get(0)
        })
        .map_err(StoreError::from)?;
    Ok(n as u64)
}

#[cfg(feature = "postgres")]
fn count_postgres(client: &mut postgres::Client, table: &'static str) -> Result<u64, CopyError> {
    let table_ident = quoted(table);
    let n: i64 = client
        .query_one(&format!("SELECT COUNT(*) FROM {table_ident}"), &[])
        .map_err(pg_error)?
        .get(0);
    Ok(n as u64)
}

/// Streams the rows of the source's `from` into the target's `into` with one `COPY`: the columns
/// `columns` (by name on both sides), then the source expressions `extra` (each with its kind),
/// which `into` must have after them. Returns the rows copied.
#[cfg(feature = "postgres")]
#[allow(clippy::too_many_arguments)]
fn copy_rows(
    source: &rusqlite::Connection,
    client: &mut postgres::Client,
    from: &'static str,
    into: &'static str,
    columns: &[Column],
    extra: &[(&str, &str, Kind)],
    total: u64,
    progress: &mut dyn FnMut(Step),
) -> Result<u64, CopyError> {
    let failed = |error: StoreError| CopyError::Table {
        table: from.to_owned(),
        error,
    };
    let mut select: Vec<String> = columns.iter().map(|c| quoted(&c.name)).collect();
    let mut names = select.clone();
    let mut kinds: Vec<(&str, Kind)> = columns.iter().map(|c| (c.name.as_str(), c.kind)).collect();
    for (expression, name, kind) in extra {
        select.push((*expression).to_owned());
        names.push(quoted(name));
        kinds.push((name, *kind));
    }
    // The tables are `TABLES` (or the rollup's temporary twin) and the columns both catalogs',
    // each quoted.
    let (column_list, table_ident) = (select.join(", "), quoted(from));
    let mut stmt = source
        .prepare(&format!("SELECT {column_list} FROM {table_ident}"))
        .map_err(|e| failed(e.into()))?;
    let mut rows = stmt.query([]).map_err(|e| failed(e.into()))?;
    let (column_list, table_ident) = (names.join(", "), quoted(into));
    let mut writer = client
        .copy_in(&format!("COPY {table_ident} ({column_list}) FROM STDIN"))
        .map_err(|e| failed(pg_error(e)))?;
    let mut line = String::new();
    let mut done = 0u64;
    while let Some(row) = rows.next().map_err(|e| failed(e.into()))? {
        line.clear();
        for (i, (name, kind)) in kinds.iter().enumerate() {
            if i > 0 {
                line.push('\t');
            }
            let value = row.get_ref(i).map_err(|e| failed(e.into()))?;
            write_value(&mut line, value, *kind).map_err(|why| {
                failed(StoreError::Other(format!(
                    "row {} of the source, column {name}: {why}",
                    done + 1
                )))
            })?;
        }
        line.push('\n');
        if let Err(e) = writer.write_all(line.as_bytes()) {
            return Err(failed(io_error(e)));
        }
        done += 1;
        if done.is_multiple_of(PROGRESS_EVERY) {
            progress(Step::Rows {
                table: from,
                done,
                total,
            });
        }
    }
    let written = writer.finish().map_err(|e| failed(pg_error(e)))?;
    if written != done {
        return Err(CopyError::Mismatch {
            table: from.to_owned(),
            detail: format!("{done} rows sent, {written} written"),
        });
    }
    Ok(done)
}

/// A write to `COPY` that failed: the server's message when it sent one.
#[cfg(feature = "postgres")]
fn io_error(e: std::io::Error) -> StoreError {
    match e
        .into_inner()
        .map(|inner| inner.downcast::<postgres::Error>())
    {
        Some(Ok(pg)) => pg_error(*pg),
        Some(Err(other)) => StoreError::Other(other.to_string()),
        None => StoreError::Other("writing to COPY failed".to_owned()),
    }
}

/// Why a source value cannot be written to its column.
#[derive(Debug)]
struct Unwritable(String);

impl fmt::Display for Unwritable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Appends `value` to a `COPY` text-format line as a `kind` column reads it: `\N` for NULL, text
/// with backslash, tab, newline and carriage return escaped, bytes as `\\x` and hex.
fn write_value(line: &mut String, value: ValueRef<'_>, kind: Kind) -> Result<(), Unwritable> {
    use std::fmt::Write as _;
    let not = |what: &str| Unwritable(format!("{what}, for a column of kind {kind:?}"));
    match (value, kind) {
        (ValueRef::Null, _) => line.push_str("\\N"),
        (ValueRef::Integer(i), Kind::Integer | Kind::Numeric) => {
            let _ = write!(line, "{i}");
        }
        (ValueRef::Integer(i), Kind::Boolean) => line.push(if i != 0 { 't' } else { 'f' }),
        (ValueRef::Integer(i), Kind::Text) => {
            let _ = write!(line, "{i}");
        }
        // SQLite keeps an integer sum past 64 bits as an approximate REAL (the rollup's revenue).
        (ValueRef::Real(x), Kind::Numeric) if x.is_finite() => {
            let _ = write!(line, "{x}");
        }
        (ValueRef::Real(x), _) => return Err(not(&format!("the real number {x}"))),
        (ValueRef::Text(t), Kind::Text | Kind::Integer | Kind::Numeric) => {
            let text = std::str::from_utf8(t)
                .map_err(|_| Unwritable("text that is not UTF-8".to_owned()))?;
            if matches!(kind, Kind::Integer) && text.trim().parse::<i64>().is_err() {
                return Err(not(&format!("the text {text:?}")));
            }
            escape(line, text)?;
        }
        (ValueRef::Blob(b), Kind::Bytes) | (ValueRef::Text(b), Kind::Bytes) => {
            line.push_str("\\\\x");
            for byte in b {
                let _ = write!(line, "{byte:02x}");
            }
        }
        (ValueRef::Blob(b), Kind::Text) => match std::str::from_utf8(b) {
            Ok(text) => escape(line, text)?,
            Err(_) => return Err(not("bytes that are not UTF-8 text")),
        },
        (ValueRef::Integer(i), Kind::Bytes) => return Err(not(&format!("the integer {i}"))),
        (ValueRef::Text(t), Kind::Boolean) => {
            return Err(not(&format!("the text {:?}", String::from_utf8_lossy(t))))
        }
        (ValueRef::Blob(_), _) => return Err(not("bytes")),
    }
    Ok(())
}

/// `text` with `COPY`'s text-format escapes. PostgreSQL's text cannot hold the character NUL.
fn escape(line: &mut String, text: &str) -> Result<(), Unwritable> {
    for c in text.chars() {
        match c {
            '\\' => line.push_str("\\\\"),
            '\t' => line.push_str("\\t"),
            '\n' => line.push_str("\\n"),
            '\r' => line.push_str("\\r"),
            '\0' => {
                return Err(Unwritable(
                    "text with a NUL character, which PostgreSQL's text cannot hold".to_owned(),
                ))
            }
            c => line.push(c),
        }
    }
    Ok(())
}

/// Switches the rollup's trigger off until [`copy_in`] switches it on again, within the
/// transaction; `false` when the role may not (it does not own `conversions`), leaving it on.
#[cfg(feature = "postgres")]
fn switch_rollup_trigger_off(client: &mut postgres::Client) -> Result<bool, CopyError> {
    client
        .batch_execute("SAVEPOINT rollup_trigger")
        .map_err(pg_error)?;
    let off = client.batch_execute(&format!(
        "ALTER TABLE {} DISABLE TRIGGER {}",
        quoted(ROLLUP_TRIGGER.0),
        quoted(ROLLUP_TRIGGER.1)
    ));
    let (end, switched) = match off {
        Ok(()) => ("RELEASE rollup_trigger", true),
        Err(e) if e.code() == Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => {
            ("ROLLBACK TO rollup_trigger", false)
        }
        Err(e) => return Err(pg_error(e).into()),
    };
    client.batch_execute(end).map_err(pg_error)?;
    Ok(switched)
}

/// Switches one trigger off (or on again) for the copy, when the role may (the table's owner);
/// whether it did. Left on, a trigger of the visitors rollup notes each copied row's day, one
/// row version at a time: slow, and undone by the copy's end anyway.
#[cfg(feature = "postgres")]
fn switch_trigger(
    client: &mut postgres::Client,
    (table, name): &(&str, &str),
    on: bool,
) -> Result<bool, CopyError> {
    client
        .batch_execute("SAVEPOINT switch_trigger")
        .map_err(pg_error)?;
    let switched = client.batch_execute(&format!(
        "ALTER TABLE {} {} TRIGGER {}",
        quoted(table),
        if on { "ENABLE" } else { "DISABLE" },
        quoted(name)
    ));
    let (end, done) = match switched {
        Ok(()) => ("RELEASE switch_trigger", true),
        Err(e) if e.code() == Some(&postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => {
            ("ROLLBACK TO switch_trigger", false)
        }
        Err(e) => return Err(pg_error(e).into()),
    };
    client.batch_execute(end).map_err(pg_error)?;
    Ok(done)
}

/// The rollup built from the copied conversions in one statement, with the arithmetic of the
/// trigger functions of `migrations/postgres/0006_initial.sql` (`report_daily_add`), for when the
/// trigger was off during their copy.
const BUILD_ROLLUP: &str = "INSERT INTO report_daily
    SELECT site_id,
        occurred_at / 86400000 - (CASE WHEN occurred_at % 86400000 < 0 THEN 1 ELSE 0 END),
        type, (CASE WHEN attr_model IS NOT NULL THEN 1 ELSE 0 END), COALESCE(attr_source, ''),
        COALESCE(attr_medium, ''), COALESCE(attr_campaign, ''),
        (CASE WHEN attr_source IS NULL THEN 1 ELSE 0 END)
            + 2 * (CASE WHEN attr_medium IS NULL THEN 1 ELSE 0 END)
            + 4 * (CASE WHEN attr_campaign IS NULL THEN 1 ELSE 0 END),
        COUNT(*),
        SUM(CASE WHEN status = 'processed' AND reporting_value IS NOT NULL
            THEN COALESCE(reporting_minor, 0) ELSE 0 END),
        SUM(CASE WHEN status <> 'processed' THEN 1 ELSE 0 END),
        SUM(CASE WHEN status = 'processed' AND reporting_value IS NOT NULL
            AND reporting_minor IS NULL THEN 1 ELSE 0 END)
    FROM conversions WHERE test = 0 GROUP BY 1, 2, 3, 4, 5, 6, 7, 8";

/// `report_daily`, built in the target from the copied conversions (by the trigger, or now when
/// it was off: see the module doc): the source's cells go to a temporary table and are compared
/// with it; the source's all-zero cells without a conversion are added. Returns the source's
/// cells.
#[cfg(feature = "postgres")]
fn copy_rollup(
    source: &rusqlite::Connection,
    client: &mut postgres::Client,
    columns: &[Column],
    total: u64,
    trigger_was_off: bool,
    progress: &mut dyn FnMut(Step),
) -> Result<u64, CopyError> {
    if trigger_was_off {
        client.batch_execute(BUILD_ROLLUP).map_err(pg_error)?;
    }
    client
        .batch_execute(
            "CREATE TEMPORARY TABLE migrate_source_rollup (LIKE report_daily INCLUDING DEFAULTS) ON COMMIT DROP;
             ALTER TABLE migrate_source_rollup ADD COLUMN revenue_exact BIGINT NOT NULL",
        )
        .map_err(pg_error)?;
    let rows = copy_rows(
        source,
        client,
        "report_daily",
        "migrate_source_rollup",
        columns,
        &[(
            "typeof(revenue_minor) = 'integer'",
            "revenue_exact",
            Kind::Integer,
        )],
        total,
        progress,
    )?;
    // A source cell matches the rebuilt one with the same key when their counts are equal and
    // their revenue too (approximately for a REAL), or, without a rebuilt one, when it is all zero.
    let differing = client
        .query(
            &format!(
                "SELECT COUNT(*) OVER (),
                    format('site %s, day %s, type %s, attributed %s, source %L, medium %L, \
                            campaign %L, nulls %s: %s in the source, %s rebuilt from its \
                            conversions (conversions, revenue_minor, unconverted, inexact)',
                        site_id, day, type, attributed, source, medium, campaign, nulls,
                        CASE WHEN s.conversions IS NULL THEN 'no cell' ELSE format('%s, %s, %s, %s',
                            s.conversions, s.revenue_minor, s.unconverted, s.inexact) END,
                        CASE WHEN t.conversions IS NULL THEN 'no cell' ELSE format('%s, %s, %s, %s',
                            t.conversions, t.revenue_minor, t.unconverted, t.inexact) END)
                 FROM migrate_source_rollup s
                 FULL JOIN (
                     SELECT site_id, day, type, attributed, source, medium, campaign, nulls,
                         SUM(conversions) AS conversions, SUM(revenue_minor) AS revenue_minor,
                         SUM(unconverted) AS unconverted, SUM(inexact) AS inexact
                     FROM report_daily
                     GROUP BY site_id, day, type, attributed, source, medium, campaign, nulls) t
                     USING (site_id, day, type, attributed, source, medium, campaign, nulls)
                 WHERE NOT COALESCE(
                     CASE WHEN t.conversions IS NULL THEN
                         s.conversions = 0 AND s.unconverted = 0 AND s.inexact = 0
                         AND (s.revenue_minor = 0 OR s.revenue_exact = 0)
                     ELSE
                         s.conversions = t.conversions AND s.unconverted = t.unconverted
                         AND s.inexact = t.inexact
                         AND CASE WHEN s.revenue_exact = 1 THEN s.revenue_minor = t.revenue_minor
                             ELSE abs(s.revenue_minor - t.revenue_minor)
                                 <= abs(t.revenue_minor) * {REAL_TOLERANCE} END
                     END, FALSE)
                 ORDER BY site_id, day, type, attributed, source, medium, campaign, nulls
                 LIMIT 1",
            ),
            &[],
        )
        .map_err(pg_error)?;
    if let Some(first) = differing.first() {
        let (n, cell): (i64, String) = (first.get(0), first.get(1));
        return Err(CopyError::Mismatch {
            table: "report_daily".to_owned(),
            detail: format!(
                "{n} cell{} of the source's rollup disagree with its conversions; the first: {cell}",
                if n == 1 { "" } else { "s" }
            ),
        });
    }
    client
        .batch_execute(
            "INSERT INTO report_daily
             SELECT site_id, day, type, attributed, source, medium, campaign, nulls, 0, 0, 0, 0
             FROM migrate_source_rollup s
             WHERE NOT EXISTS (SELECT 1 FROM report_daily t
                 WHERE (t.site_id, t.day, t.type, t.attributed, t.source, t.medium, t.campaign,
                        t.nulls)
                     = (s.site_id, s.day, s.type, s.attributed, s.source, s.medium, s.campaign,
                        s.nulls))",
        )
        .map_err(pg_error)?;
    Ok(rows)
}

/// Moves the sequence of every identity (or serial) column past its table's largest id, so that
/// the next row inserted gets a new one.
#[cfg(feature = "postgres")]
fn move_sequences(client: &mut postgres::Client) -> Result<(), CopyError> {
    let columns = client
        .query(
            "SELECT table_name::text, column_name::text FROM information_schema.columns
             WHERE table_schema = current_schema()
               AND (is_identity = 'YES' OR column_default LIKE 'nextval(%')",
            &[],
        )
        .map_err(pg_error)?;
    for r in &columns {
        let (table, column): (String, String) = (r.get(0), r.get(1));
        // Names from the target's catalog, quoted. With no row the sequence starts over at 1
        // (is_called false: 1 is the next value).
        let (table_ident, identity_column) = (quoted(&table), quoted(&column));
        client
            .execute(
                &format!(
                    "SELECT setval(pg_get_serial_sequence($1, $2), \
                     COALESCE(MAX({identity_column}), 1), MAX({identity_column}) IS NOT NULL) \
                     FROM {table_ident}"
                ),
                &[&table_ident, &column],
            )
            .map_err(pg_error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_of_the_sqlite_schema_is_copied_once() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        super::super::migrate(&mut conn).unwrap();
        let mut tables: Vec<String> = conn
            .prepare(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        tables.sort();
        let mut listed: Vec<String> = TABLES.iter().map(|t| (*t).to_owned()).collect();
        listed.sort();
        listed.dedup();
        assert_eq!(listed.len(), TABLES.len(), "a table listed twice");
        assert_eq!(tables, listed);
    }

    fn line(values: &[(ValueRef<'_>, Kind)]) -> Result<String, Unwritable> {
        let mut out = String::new();
        for (i, (v, k)) in values.iter().enumerate() {
            if i > 0 {
                out.push('\t');
            }
            write_value(&mut out, *v, *k)?;
        }
        Ok(out)
    }

    #[test]
    fn values_are_written_as_copy_text_for_the_target_type() {
        let got = line(&[
            (ValueRef::Integer(-42), Kind::Integer),
            (ValueRef::Null, Kind::Text),
            (ValueRef::Text(b"a\\b\tc\nd\re"), Kind::Text),
            (ValueRef::Blob(&[0, 0xab, 0xff]), Kind::Bytes),
            (ValueRef::Real(1.8446744073709552e19), Kind::Numeric),
            (ValueRef::Integer(1), Kind::Boolean),
            (ValueRef::Text("ünïcode €".as_bytes()), Kind::Text),
        ])
        .unwrap();
        assert_eq!(
            got,
            "-42\t\\N\ta\\\\b\\tc\\nd\\re\t\\\\x00abff\t18446744073709552000\tt\tünïcode €"
        );
        for (value, kind, why) in [
            (ValueRef::Text(b"a\0b"), Kind::Text, "NUL"),
            (ValueRef::Text(&[0xff, 0xfe]), Kind::Text, "not UTF-8"),
            (
                ValueRef::Text(b"seven"),
                Kind::Integer,
                "the text \"seven\"",
            ),
            (ValueRef::Real(1.5), Kind::Integer, "the real number 1.5"),
            (
                ValueRef::Real(f64::NAN),
                Kind::Numeric,
                "the real number NaN",
            ),
            (ValueRef::Blob(&[1]), Kind::Integer, "bytes"),
        ] {
            let e = line(&[(value, kind)]).unwrap_err().to_string();
            assert!(e.contains(why), "{value:?} as {kind:?}: {e}");
        }
    }
}
