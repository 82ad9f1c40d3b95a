//! One way for the store's functions to run SQL on either engine: a [`Conn`] (a SQLite connection
//! or a PostgreSQL one), arguments as [`Value`]s, and rows read through [`Row::get`]. A function
//! written against it takes `conn: &impl AsConn`, so its callers pass whatever connection they hold
//! and never learn which engine answers.
//!
//! What differs between the engines and is settled here, once:
//! - **Placeholders.** SQL is written with SQLite's numbered `?N`; for PostgreSQL each becomes
//!   `$N` when the statement is first prepared on a connection ([`postgres_placeholders`]).
//! - **Prepared statements** are kept per connection on both: rusqlite's statement cache for
//!   SQLite, a map from SQL text to statement on [`PgConn`] for PostgreSQL (whose client keeps
//!   none).
//! - **Types.** Arguments are integers, text, bytes or NULL ([`Value`]); a flag is the integer 0
//!   or 1 on both engines (every integer column is `BIGINT` on PostgreSQL). Reading, an `i64`
//!   accepts any integer column and a `bool` also PostgreSQL's `boolean` (what `x IS NULL` gives
//!   there).
//!
//! SQL that the two dialects spell differently is chosen by the function that runs it, with
//! [`Conn::engine`]; shared SQL is written once.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::time::{Duration, Instant};

use postgres::types::{IsNull, ToSql, Type};
use rusqlite::OptionalExtension;

use super::{Result, StoreError};

/// Which engine a connection talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

/// A PostgreSQL connection with the statements it prepared, by SQL text, and the state of its
/// transaction, which the client does not tell.
pub struct PgConn {
    client: RefCell<postgres::Client>,
    statements: RefCell<HashMap<String, postgres::Statement>>,
    /// A transaction is open (a `BEGIN` succeeded, no `COMMIT` or `ROLLBACK` ran since).
    in_tx: Cell<bool>,
    /// Rows inserted, updated or deleted by [`Conn::execute`] on this connection since it opened
    /// (SQLite's `total_changes`, which counts the same).
    changes: Cell<u64>,
    /// A statement failed in the open transaction and no `ROLLBACK TO` a savepoint undid it since.
    /// PostgreSQL then refuses every statement until the transaction ends, and turns its `COMMIT`
    /// into a silent `ROLLBACK`: the runners check this flag instead of trusting the `COMMIT`.
    aborted: Cell<bool>,
}

impl PgConn {
    pub fn new(client: postgres::Client) -> PgConn {
        PgConn {
            client: RefCell::new(client),
            statements: RefCell::new(HashMap::new()),
            in_tx: Cell::new(false),
            aborted: Cell::new(false),
            changes: Cell::new(0),
        }
    }

    /// One round trip: whether the server answers on this connection.
    pub fn ping(&self) -> Result<()> {
        self.failed(self.client.borrow_mut().simple_query("SELECT 1"))
            .map(drop)
    }

    /// Whether the client's connection is gone (the server closed it, or the network did).
    pub fn is_closed(&self) -> bool {
        self.client.borrow().is_closed()
    }

    /// Notes a failed statement: inside a transaction it aborts the transaction.
    fn failed<T>(&self, r: std::result::Result<T, postgres::Error>) -> Result<T> {
        if r.is_err() && self.in_tx.get() {
            self.aborted.set(true);
        }
        Ok(r?)
    }

    /// Runs a transaction-control statement and keeps track of the transaction's state.
    fn tx_control(&self, sql: &str) -> Result<()> {
        let r = self.client.borrow_mut().batch_execute(sql);
        let word = sql.split_whitespace().next().unwrap_or("");
        match word {
            "BEGIN" | "START" if r.is_ok() => {
                self.in_tx.set(true);
                self.aborted.set(false);
            }
            // Whatever they answer, the transaction is over (or the connection is).
            "COMMIT" | "ROLLBACK" if !sql.starts_with("ROLLBACK TO") => {
                self.in_tx.set(false);
                self.aborted.set(false);
            }
            "ROLLBACK" if r.is_ok() => self.aborted.set(false),
            _ => {}
        }
        self.failed(r)
    }

    /// Runs `f` on the client itself (migrations, transaction control).
    pub(super) fn with_client<T>(&self, f: impl FnOnce(&mut postgres::Client) -> T) -> T {
        f(&mut self.client.borrow_mut())
    }

    fn statement(&self, sql: &str) -> Result<postgres::Statement> {
        if let Some(s) = self.statements.borrow().get(sql) {
            return Ok(s.clone());
        }
        let prepared = self.failed(
            self.client
                .borrow_mut()
                .prepare(&postgres_placeholders(sql)),
        )?;
        self.statements
            .borrow_mut()
            .insert(sql.to_owned(), prepared.clone());
        Ok(prepared)
    }
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
    ($($v:expr),* $(,)?) => { &[$($crate::store::db::Value::from($v)),*] as &[$crate::store::db::Value] };
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

impl ToSql for Value<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut postgres::types::private::BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match *self {
            Value::Null => Ok(IsNull::Yes),
            // The parameter's type is what PostgreSQL inferred from where it stands.
            Value::Int(i) => match *ty {
                Type::INT4 => i32::try_from(i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(i)?.to_sql(ty, out),
                Type::BOOL => (i != 0).to_sql(ty, out),
                _ => i.to_sql(ty, out),
            },
            Value::Text(s) => s.to_sql(ty, out),
            Value::Bytes(b) => b.to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
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

/// A Rust type a column can be read as, on both engines.
pub trait FromColumn: Sized {
    fn from_sqlite(r: &rusqlite::Row<'_>, i: usize) -> Result<Self>;
    fn from_postgres(r: &postgres::Row, i: usize) -> Result<Self>;
}

fn pg_column<'r, T: postgres::types::FromSql<'r>>(r: &'r postgres::Row, i: usize) -> Result<T> {
    r.try_get(i)
        .map_err(|e| StoreError::Other(format!("column {i}: {e}")))
}

/// An integer of any width, or a `boolean` as 0 or 1.
fn pg_int(r: &postgres::Row, i: usize) -> Result<Option<i64>> {
    let ty = r.columns()[i].type_().clone();
    Ok(match ty {
        Type::INT8 => pg_column::<Option<i64>>(r, i)?,
        Type::INT4 => pg_column::<Option<i32>>(r, i)?.map(i64::from),
        Type::INT2 => pg_column::<Option<i16>>(r, i)?.map(i64::from),
        Type::BOOL => pg_column::<Option<bool>>(r, i)?.map(i64::from),
        other => {
            return Err(StoreError::Other(format!(
                "column {i} is {other}, not an integer"
            )))
        }
    })
}

fn not_null<T>(v: Option<T>, i: usize) -> Result<T> {
    v.ok_or_else(|| StoreError::Other(format!("column {i} is NULL")))
}

impl FromColumn for i64 {
    fn from_sqlite(r: &rusqlite::Row<'_>, i: usize) -> Result<Self> {
        Ok(r.get(i)?)
    }
    fn from_postgres(r: &postgres::Row, i: usize) -> Result<Self> {
        not_null(pg_int(r, i)?, i)
    }
}

impl FromColumn for Option<i64> {
    fn from_sqlite(r: &rusqlite::Row<'_>, i: usize) -> Result<Self> {
        Ok(r.get(i)?)
    }
    fn from_postgres(r: &postgres::Row, i: usize) -> Result<Self> {
        pg_int(r, i)
    }
}

impl FromColumn for bool {
    fn from_sqlite(r: &rusqlite::Row<'_>, i: usize) -> Result<Self> {
        Ok(r.get(i)?)
    }
    fn from_postgres(r: &postgres::Row, i: usize) -> Result<Self> {
        Ok(not_null(pg_int(r, i)?, i)? != 0)
    }
}

impl FromColumn for String {
    fn from_sqlite(r: &rusqlite::Row<'_>, i: usize) -> Result<Self> {
        Ok(r.get(i)?)
    }
    fn from_postgres(r: &postgres::Row, i: usize) -> Result<Self> {
        pg_column(r, i)
    }
}

impl FromColumn for Option<String> {
    fn from_sqlite(r: &rusqlite::Row<'_>, i: usize) -> Result<Self> {
        Ok(r.get(i)?)
    }
    fn from_postgres(r: &postgres::Row, i: usize) -> Result<Self> {
        pg_column(r, i)
    }
}

impl FromColumn for Option<Vec<u8>> {
    fn from_sqlite(r: &rusqlite::Row<'_>, i: usize) -> Result<Self> {
        Ok(r.get(i)?)
    }
    fn from_postgres(r: &postgres::Row, i: usize) -> Result<Self> {
        pg_column(r, i)
    }
}

impl FromColumn for Vec<u8> {
    fn from_sqlite(r: &rusqlite::Row<'_>, i: usize) -> Result<Self> {
        Ok(r.get(i)?)
    }
    fn from_postgres(r: &postgres::Row, i: usize) -> Result<Self> {
        pg_column(r, i)
    }
}

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
    pub(super) fn tx_control(&self, sql: &str) -> Result<()> {
        match self {
            Conn::Sqlite(c) => Ok(c.prepare_cached(sql)?.execute([]).map(|_| ())?),
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
            Conn::Postgres(c) => c.in_tx.get() && !c.aborted.get(),
        }
    }

    /// Runs `f`, whose statements on this connection are interrupted once `deadline` has passed:
    /// they fail, and `f` with them. On SQLite a progress handler checks the clock every thousand
    /// virtual-machine steps across everything `f` runs; on PostgreSQL each statement of `f` may
    /// run for `deadline` (`statement_timeout`, local to the open transaction), and the
    /// transaction can then only roll back ([`Conn::in_transaction`] says so).
    pub fn interrupt_after<T>(&self, deadline: Duration, f: impl FnOnce() -> T) -> Result<T> {
        match self {
            Conn::Sqlite(c) => {
                let until = Instant::now() + deadline;
                c.progress_handler(1_000, Some(move || Instant::now() > until))?;
                let out = f();
                c.progress_handler(0, None::<fn() -> bool>)?;
                Ok(out)
            }
            Conn::Postgres(_) => {
                let ms = deadline.as_millis().clamp(1, i32::MAX as u128).to_string();
                self.query_opt(
                    "SELECT set_config('statement_timeout', ?1, true)",
                    args![&ms],
                    |_| Ok(()),
                )?;
                Ok(f())
            }
        }
    }

    /// Rows this connection has inserted, updated or deleted since it opened, rolled back or not:
    /// an upper bound of what it changed.
    pub fn total_changes(&self) -> u64 {
        match self {
            Conn::Sqlite(c) => c.total_changes(),
            Conn::Postgres(c) => c.changes.get(),
        }
    }

    /// Whether a transaction is open at all, even one that can only roll back.
    pub(super) fn transaction_open(&self) -> bool {
        match self {
            Conn::Sqlite(c) => !c.is_autocommit(),
            Conn::Postgres(c) => c.in_tx.get(),
        }
    }

    /// Runs a statement; the number of rows it changed.
    pub fn execute(&self, sql: &str, args: &[Value]) -> Result<u64> {
        match self {
            Conn::Sqlite(c) => {
                Ok(c.prepare_cached(sql)?
                    .execute(rusqlite::params_from_iter(args))? as u64)
            }
            Conn::Postgres(c) => {
                let statement = c.statement(sql)?;
                let n =
                    c.failed(c.with_client(|client| client.execute(&statement, &pg_params(args))))?;
                c.changes.set(c.changes.get().saturating_add(n));
                Ok(n)
            }
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
            Conn::Sqlite(c) => c
                .prepare_cached(sql)?
                .query_row(rusqlite::params_from_iter(args), |r| Ok(f(&Row::Sqlite(r))))
                .optional()?
                .transpose(),
            Conn::Postgres(c) => {
                let statement = c.statement(sql)?;
                let rows =
                    c.failed(c.with_client(|client| client.query(&statement, &pg_params(args))))?;
                rows.first().map(|r| f(&Row::Postgres(r))).transpose()
            }
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
        mut f: impl FnMut(&Row) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        match self {
            Conn::Sqlite(c) => {
                let mut statement = c.prepare_cached(sql).map_err(StoreError::from)?;
                let mut rows = statement
                    .query(rusqlite::params_from_iter(args))
                    .map_err(StoreError::from)?;
                while let Some(r) = rows.next().map_err(StoreError::from)? {
                    f(&Row::Sqlite(r))?;
                }
                Ok(())
            }
            Conn::Postgres(c) => {
                use postgres::fallible_iterator::FallibleIterator;
                let statement = c.statement(sql)?;
                c.with_client(|client| {
                    let mut rows = client
                        .query_raw(&statement, args.iter())
                        .or_else(|e| c.failed(Err(e)))?;
                    while let Some(r) = rows.next().or_else(|e| c.failed(Err(e)))? {
                        f(&Row::Postgres(&r))?;
                    }
                    Ok(())
                })
            }
        }
    }
}

/// A statement's arguments as the PostgreSQL client takes them.
fn pg_params<'a>(args: &'a [Value<'a>]) -> Vec<&'a (dyn ToSql + Sync)> {
    args.iter().map(|a| a as &(dyn ToSql + Sync)).collect()
}

/// `sql` with SQLite's numbered placeholders `?N` written as PostgreSQL's `$N`, outside string
/// literals, quoted identifiers and comments.
pub fn postgres_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == c {
                        break;
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == '\n' {
                        break;
                    }
                }
            }
            '?' if chars.peek().is_some_and(char::is_ascii_digit) => out.push('$'),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_placeholders_become_dollars_outside_literals_and_comments() {
        assert_eq!(
            postgres_placeholders(
                "SELECT a FROM t WHERE b = ?1 AND c = '?2' AND \"?3\" = ?12 -- ?4\n AND d = ?2"
            ),
            "SELECT a FROM t WHERE b = $1 AND c = '?2' AND \"?3\" = $12 -- ?4\n AND d = $2"
        );
        // A doubled quote inside a literal ends it and opens the next one: still a literal.
        assert_eq!(
            postgres_placeholders("SELECT 'it''s ?1', ?1"),
            "SELECT 'it''s ?1', $1"
        );
    }

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
