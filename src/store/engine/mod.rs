//! The engines side by side: `sqlite.rs` and `postgres.rs` each hold their connect, every
//! per-connection setting, their error mapping and their migration list; this file is the one seam
//! the rest of the store runs SQL through, on either engine: a [`Conn`] (a SQLite connection or a
//! PostgreSQL one), arguments as [`Value`]s, rows read through [`Row::get`]; and where the database
//! is ([`Location`], what `--db` names), an owned connection ([`DbConn`]), one that reconnects
//! ([`Lasting`]) and the request threads' pool ([`Db`]). A function written against it takes
//! `conn: &impl AsConn`, so its callers pass whatever connection they hold and never learn which
//! engine answers.
//!
//! What differs between the engines and is settled here, once:
//! - **Placeholders.** SQL is written with SQLite's numbered `?N`; for PostgreSQL each becomes
//!   `$N` when the statement is first prepared on a connection (`dialect::postgres_placeholders`).
//! - **Prepared statements** are kept per connection on both: rusqlite's statement cache for
//!   SQLite, a map from SQL text to statement on [`PgConn`] for PostgreSQL (whose client keeps
//!   none).
//! - **Types.** Arguments are integers, text, bytes or NULL ([`Value`]); a flag is the integer 0
//!   or 1 on both engines (every integer column is `BIGINT` on PostgreSQL). Reading, an `i64`
//!   accepts any integer column and a `bool` also PostgreSQL's `boolean` (what `x IS NULL` gives
//!   there).
//!
//! SQL that the two dialects spell differently is named once in `store/dialect.rs`; shared SQL is
//! written once. PostgreSQL is the cargo feature `postgres` (on by default): without it
//! `postgres.rs` is replaced by `without_postgres.rs`, whose connection type has no values, so
//! every PostgreSQL branch compiles and none can run, and opening a `postgres://` database says how
//! to build a binary that can.

pub mod sqlite;

#[cfg_attr(not(feature = "postgres"), path = "without_postgres.rs")]
pub mod postgres;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use self::postgres::PgConn;
pub use super::dialect::postgres_placeholders;

use super::{Result, Settings, StoreError};
use crate::text::{redacted_url, Query};

/// Which engine a connection talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

/// A connection of either engine, for one call into the store.
#[derive(Clone, Copy)]
pub enum Conn<'c> {
    Sqlite(&'c rusqlite::Connection),
    Postgres(&'c PgConn),
}

/// Whatever connection a caller holds, as a [`Conn`].
pub trait AsConn {
    fn conn(&self) -> Conn<'_>;
}

impl AsConn for rusqlite::Connection {
    fn conn(&self) -> Conn<'_> {
        Conn::Sqlite(self)
    }
}

impl AsConn for rusqlite::Transaction<'_> {
    fn conn(&self) -> Conn<'_> {
        Conn::Sqlite(self)
    }
}

impl AsConn for PgConn {
    fn conn(&self) -> Conn<'_> {
        Conn::Postgres(self)
    }
}

impl AsConn for Conn<'_> {
    fn conn(&self) -> Conn<'_> {
        *self
    }
}

impl<M: r2d2::ManageConnection<Connection = rusqlite::Connection>> AsConn
    for r2d2::PooledConnection<M>
{
    fn conn(&self) -> Conn<'_> {
        Conn::Sqlite(self)
    }
}

/// An argument of a statement.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    Null,
    Int(i64),
    Text(&'a str),
    Bytes(&'a [u8]),
}

impl From<i64> for Value<'_> {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<bool> for Value<'_> {
    fn from(v: bool) -> Self {
        Value::Int(i64::from(v))
    }
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(v: &'a str) -> Self {
        Value::Text(v)
    }
}

impl<'a> From<&'a String> for Value<'a> {
    fn from(v: &'a String) -> Self {
        Value::Text(v)
    }
}

impl<'a> From<&'a Option<String>> for Value<'a> {
    fn from(v: &'a Option<String>) -> Self {
        v.as_deref().into()
    }
}

impl<'a> From<&'a [u8]> for Value<'a> {
    fn from(v: &'a [u8]) -> Self {
        Value::Bytes(v)
    }
}

impl<'a, T: Into<Value<'a>>> From<Option<T>> for Value<'a> {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// `args![a, b, …]`: the arguments of a statement, each converted to a [`Value`].
#[macro_export]
macro_rules! args {
    ($($v:expr),* $(,)?) => { &[$($crate::store::engine::Value::from($v)),*] as &[$crate::store::engine::Value] };
}
pub use crate::args;

impl rusqlite::ToSql for Value<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match *self {
            Value::Null => ValueRef::Null,
            Value::Int(i) => ValueRef::Integer(i),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
            Value::Bytes(b) => ValueRef::Blob(b),
        }))
    }
}

/// A row of a result, of either engine.
pub enum Row<'r> {
    Sqlite(&'r rusqlite::Row<'r>),
    Postgres(&'r postgres::Row),
}

impl Row<'_> {
    /// Column `i` (from 0) as a `T`.
    pub fn get<T: FromColumn>(&self, i: usize) -> Result<T> {
        match self {
            Row::Sqlite(r) => T::from_sqlite(r, i),
            Row::Postgres(r) => T::from_postgres(r, i),
        }
    }
}

/// A Rust type a column can be read as, on both engines (PostgreSQL's reading is in
/// `postgres.rs`, [`postgres::Column`]).
pub trait FromColumn: Sized + postgres::Column {
    fn from_sqlite(r: &rusqlite::Row<'_>, i: usize) -> Result<Self>;
}

macro_rules! from_sqlite_column {
    ($($t:ty),*) => {$(
        impl FromColumn for $t {
            fn from_sqlite(r: &rusqlite::Row<'_>, i: usize) -> Result<Self> {
                Ok(r.get(i)?)
            }
        }
    )*};
}
from_sqlite_column!(
    i64,
    Option<i64>,
    bool,
    String,
    Option<String>,
    Option<Vec<u8>>,
    Vec<u8>
);

impl Conn<'_> {
    pub fn engine(&self) -> Engine {
        match self {
            Conn::Sqlite(_) => Engine::Sqlite,
            Conn::Postgres(_) => Engine::Postgres,
        }
    }

    /// Runs a transaction-control statement (`BEGIN`, `SAVEPOINT x`, `COMMIT`...): on SQLite
    /// through the statement cache (parsed once per connection), on PostgreSQL as a simple query
    /// (one round trip, nothing to prepare).
    pub(in crate::store) fn tx_control(&self, sql: &str) -> Result<()> {
        match self {
            Conn::Sqlite(c) => sqlite::tx_control(c, sql),
            Conn::Postgres(c) => c.tx_control(sql),
        }
    }

    /// Whether a transaction is open and can still commit what it wrote. On SQLite a failed
    /// statement may end the whole transaction by itself (`SQLITE_FULL`, `SQLITE_BUSY`,
    /// `SQLITE_NOMEM`); on PostgreSQL any failed statement outside a savepoint that was rolled back
    /// leaves the transaction unable to commit.
    pub fn in_transaction(&self) -> bool {
        match self {
            Conn::Sqlite(c) => !c.is_autocommit(),
            Conn::Postgres(c) => c.in_transaction(),
        }
    }

    /// Runs `f`, whose statements on this connection are interrupted once `deadline` has passed:
    /// they fail, and `f` with them. On SQLite a progress handler checks the clock every thousand
    /// virtual-machine steps across everything `f` runs; on PostgreSQL each statement of `f` may
    /// run for `deadline` (`statement_timeout`, local to the open transaction), and the
    /// transaction can then only roll back ([`Conn::in_transaction`] says so).
    pub fn interrupt_after<T>(&self, deadline: Duration, f: impl FnOnce() -> T) -> Result<T> {
        match self {
            Conn::Sqlite(c) => sqlite::interrupt_after(c, deadline, f),
            Conn::Postgres(c) => c.interrupt_after(deadline, f),
        }
    }

    /// Rows this connection has inserted, updated or deleted since it opened, rolled back or not:
    /// an upper bound of what it changed.
    pub fn total_changes(&self) -> u64 {
        match self {
            Conn::Sqlite(c) => c.total_changes(),
            Conn::Postgres(c) => c.total_changes(),
        }
    }

    /// Whether a transaction is open at all, even one that can only roll back.
    pub(in crate::store) fn transaction_open(&self) -> bool {
        match self {
            Conn::Sqlite(c) => !c.is_autocommit(),
            Conn::Postgres(c) => c.transaction_open(),
        }
    }

    /// Runs a statement; the number of rows it changed.
    pub fn execute(&self, sql: &str, args: &[Value]) -> Result<u64> {
        match self {
            Conn::Sqlite(c) => sqlite::execute(c, sql, args),
            Conn::Postgres(c) => c.execute(sql, args),
        }
    }

    /// The first row of a query, read by `f`; `None` when there is none.
    pub fn query_opt<T>(
        &self,
        sql: &str,
        args: &[Value],
        f: impl FnOnce(&Row) -> Result<T>,
    ) -> Result<Option<T>> {
        match self {
            Conn::Sqlite(c) => sqlite::query_opt(c, sql, args, f),
            Conn::Postgres(c) => c.query_opt(sql, args, f),
        }
    }

    /// Every row of a query, each read by `f`.
    pub fn query_all<T>(
        &self,
        sql: &str,
        args: &[Value],
        mut f: impl FnMut(&Row) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        self.query_each(sql, args, |r| {
            out.push(f(r)?);
            Ok::<_, StoreError>(())
        })?;
        Ok(out)
    }

    /// Calls `f` with each row of a query as it is read, without collecting them (PostgreSQL
    /// streams them from the server); stops at the first error `f` returns. `f` must not use this
    /// connection.
    pub fn query_each<E: From<StoreError>>(
        &self,
        sql: &str,
        args: &[Value],
        f: impl FnMut(&Row) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        match self {
            Conn::Sqlite(c) => sqlite::query_each(c, sql, args, f),
            Conn::Postgres(c) => c.query_each(sql, args, f),
        }
    }
}

/// What `--db` names: a SQLite file, or a PostgreSQL database by its URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    File(PathBuf),
    Postgres(String),
}

impl Location {
    /// `postgres://…` and `postgresql://…` name a PostgreSQL database; anything else is a file.
    pub fn of(db: &Path) -> Location {
        let text = db.to_string_lossy();
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            Location::Postgres(text.into_owned())
        } else {
            Location::File(db.to_path_buf())
        }
    }

    /// How logs and messages name it: the file's path, or the URL without its password.
    pub fn display(&self) -> String {
        match self {
            Location::File(p) => p.display().to_string(),
            Location::Postgres(url) => redacted_url(url, Query::PasswordHidden),
        }
    }
}

/// A connection of its own, of either engine. (Made once per connection and never copied around:
/// the size of its larger variant costs nothing worth a box.)
#[allow(clippy::large_enum_variant)]
pub enum DbConn {
    Sqlite(rusqlite::Connection),
    Postgres(PgConn),
}

impl AsConn for DbConn {
    fn conn(&self) -> Conn<'_> {
        match self {
            DbConn::Sqlite(c) => Conn::Sqlite(c),
            DbConn::Postgres(c) => Conn::Postgres(c),
        }
    }
}

/// Opens one connection to `location` with `settings` (SQLite's; PostgreSQL's server has its
/// own), creating a SQLite file and bringing either engine's schema up to date.
pub fn open(location: &Location, settings: &Settings) -> Result<DbConn> {
    open_as(location, settings, Waits::Unbounded)
}

/// How long a PostgreSQL connection's statements may wait for a lock. SQLite's connections all
/// wait `busy_timeout` for its write lock; on PostgreSQL only the request path is bounded (the
/// pool and the writer: a request never waits longer on a lock than on SQLite), while commands,
/// migrations and the background threads' reads may wait as long as the work needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waits {
    Unbounded,
    /// `lock_timeout` = `busy_timeout` (`postgres::connect_bounded`).
    BusyTimeout,
}

impl Waits {
    fn lock_timeout(self, settings: &Settings) -> Option<Duration> {
        match self {
            Waits::Unbounded => None,
            Waits::BusyTimeout => Some(settings.busy_timeout),
        }
    }
}

fn open_as(location: &Location, settings: &Settings, waits: Waits) -> Result<DbConn> {
    Ok(match location {
        Location::File(path) => DbConn::Sqlite(sqlite::open(path, settings)?),
        Location::Postgres(url) => {
            DbConn::Postgres(postgres::open_bounded(url, waits.lock_timeout(settings))?)
        }
    })
}

/// A connection of its own for a thread that keeps one for as long as `serve` runs (the writer, the
/// pipeline, the pruner): when the server closed it (PostgreSQL restarted, the network broke),
/// [`Lasting::get`] opens a new one, so the thread recovers by itself once the database is back.
pub struct Lasting {
    location: Location,
    settings: Settings,
    waits: Waits,
    conn: Option<DbConn>,
}

impl Lasting {
    /// Opens the first connection: an error here is the caller's to report (the server does not
    /// start).
    pub fn open(location: &Location, settings: &Settings) -> Result<Lasting> {
        Lasting::open_as(location, settings, Waits::Unbounded)
    }

    /// [`Lasting::open`] whose PostgreSQL connections wait for locks as `waits` says (the writer's).
    pub fn open_as(location: &Location, settings: &Settings, waits: Waits) -> Result<Lasting> {
        Ok(Lasting {
            location: location.clone(),
            settings: *settings,
            waits,
            conn: Some(open_as(location, settings, waits)?),
        })
    }

    /// The connection, opened again first when the last one broke; `Busy` while the database
    /// cannot be reached (the next call tries again).
    pub fn get(&mut self) -> Result<&DbConn> {
        let broken = match &self.conn {
            Some(DbConn::Postgres(c)) => c.is_closed(),
            Some(DbConn::Sqlite(_)) => false,
            None => true,
        };
        if broken {
            self.conn = None;
            match open_as(&self.location, &self.settings, self.waits) {
                Ok(c) => {
                    log::info!("connected to {} again", self.location.display());
                    self.conn = Some(c);
                }
                Err(e) => {
                    log::warn!("cannot reach {}: {e}", self.location.display());
                    return Err(StoreError::Busy);
                }
            }
        }
        Ok(self.conn.as_ref().expect("opened above"))
    }
}

/// The request threads' pool, of either engine.
#[derive(Clone)]
pub enum Db {
    Sqlite(sqlite::Pool),
    Postgres(postgres::Pool),
}

/// A connection borrowed from a [`Db`]; it goes back to the pool when dropped.
#[allow(clippy::large_enum_variant)]
pub enum Pooled {
    Sqlite(sqlite::Pooled),
    Postgres(postgres::Pooled),
}

impl AsConn for Pooled {
    fn conn(&self) -> Conn<'_> {
        match self {
            Pooled::Sqlite(c) => Conn::Sqlite(c),
            Pooled::Postgres(c) => Conn::Postgres(c),
        }
    }
}

impl Db {
    /// Opens (creates, migrates) the database at `location`, then builds a pool of up to `size`
    /// connections over it. A connection is waited for up to `settings.busy_timeout`, and so is a
    /// lock by a statement on a PostgreSQL one ([`Waits::BusyTimeout`]).
    pub fn open(location: &Location, size: u32, settings: &Settings) -> Result<Db> {
        match location {
            Location::File(path) => Ok(Db::Sqlite(sqlite::pool(path, size, settings)?)),
            Location::Postgres(url) => Ok(Db::Postgres(postgres::pool(
                url,
                size,
                settings.busy_timeout,
                Waits::BusyTimeout.lock_timeout(settings),
            )?)),
        }
    }

    /// A connection from the pool; `Busy` when none frees up in time (or PostgreSQL cannot be
    /// reached).
    pub fn get(&self) -> Result<Pooled> {
        Ok(match self {
            Db::Sqlite(p) => Pooled::Sqlite(p.get()?),
            Db::Postgres(p) => Pooled::Postgres(p.get()?),
        })
    }

    /// [`Db::get`], waiting at most `wait` for a connection to free up (`/healthz`).
    pub fn get_within(&self, wait: Duration) -> Result<Pooled> {
        Ok(match self {
            Db::Sqlite(p) => Pooled::Sqlite(p.get_timeout(wait)?),
            Db::Postgres(p) => Pooled::Postgres(p.get_timeout(wait)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_reads_and_writes_through_the_shared_api() {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE t (a INTEGER, b TEXT, c BLOB, d INTEGER)")
            .unwrap();
        let conn = c.conn();
        let bytes: &[u8] = &[1, 2];
        let n = conn
            .execute(
                "INSERT INTO t VALUES (?1, ?2, ?3, ?4)",
                args![7_i64, "x", bytes, None::<i64>],
            )
            .unwrap();
        assert_eq!(n, 1);
        let row = conn
            .query_opt(
                "SELECT a, b, c, d, a > 5 FROM t WHERE b = ?1",
                args!["x"],
                |r| {
                    Ok((
                        r.get::<i64>(0)?,
                        r.get::<String>(1)?,
                        r.get::<Vec<u8>>(2)?,
                        r.get::<Option<i64>>(3)?,
                        r.get::<bool>(4)?,
                    ))
                },
            )
            .unwrap();
        assert_eq!(row, Some((7, "x".to_owned(), vec![1, 2], None, true)));
        assert_eq!(
            conn.query_opt("SELECT a FROM t WHERE b = ?1", args!["y"], |r| r
                .get::<i64>(0))
                .unwrap(),
            None
        );
        let all = conn
            .query_all("SELECT b FROM t ORDER BY a", args![], |r| {
                r.get::<String>(0)
            })
            .unwrap();
        assert_eq!(all, vec!["x".to_owned()]);
    }
}
