//! Peeking into the server's database with a plain client (not the library): counting rows,
//! reading a column, planting a state the API refuses to create (a poison item), on either engine.
//! SQL is written once, with SQLite's numbered `?N` placeholders (each becomes `$N` on PostgreSQL,
//! as in the store) and in the subset both dialects accept; arguments are `&[&dyn Arg]` (integers,
//! text, bytes, `Option`s of them). It runs on rusqlite for a file and on the `postgres` client for
//! a URL, on a connection of its own beside the server's (WAL lets both read a file).
//!
//! Which engine a whole test run uses is [`ENGINE_VAR`] (`sqlite`, the default, or `postgres`):
//! [`TestApp::start_with`] then serves a fresh database of that engine. What only SQLite has (the
//! file's bytes, its WAL, `PRAGMA`s, the lock file) stays behind [`TestApp::sqlite`] and
//! [`TestApp::db_bytes`], in tests that start with [`sqlite_only`].

use std::io::Read;
use std::path::PathBuf;

use serde_json::{json, Value};

use super::app::{TestApp, WAIT};

/// The variable that selects the engine of a test run: `sqlite` (the default) or `postgres`.
pub const ENGINE_VAR: &str = "CONVAPI_TEST_ENGINE";

/// The engine of this test run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

/// The engine [`ENGINE_VAR`] selects; any other value than the two fails the test that asks.
pub fn engine() -> Engine {
    match std::env::var(ENGINE_VAR).as_deref() {
        Err(_) | Ok("") | Ok("sqlite") => Engine::Sqlite,
        Ok("postgres") => Engine::Postgres,
        Ok(other) => panic!("{ENGINE_VAR}={other:?}: say `sqlite` or `postgres`"),
    }
}

/// Whether this run serves PostgreSQL.
pub fn on_postgres() -> bool {
    engine() == Engine::Postgres
}

/// The marker line of a test that checks what only SQLite has; `scripts/test.sh` counts them.
pub const SQLITE_ONLY: &str = "SQLITE ONLY:";

/// Starts a test that checks what only SQLite has (the file's bytes, its WAL, a `PRAGMA`, the lock
/// file): `true` on a PostgreSQL run, after printing `SQLITE ONLY: <test>: <why>` (with
/// `--nocapture` or `--show-output`, which `scripts/test.sh` passes, and counts the lines), so the
/// test returns at once, visibly, instead of passing as if it had run:
///
/// ```ignore
/// if sqlite_only("the WAL is checkpointed") { return; }
/// ```
#[must_use]
pub fn sqlite_only(why: &str) -> bool {
    if !on_postgres() {
        return false;
    }
    let name = std::thread::current().name().unwrap_or("a test").to_owned();
    println!("{SQLITE_ONLY} {name}: {why}");
    true
}

/// A database of the run's engine for a test that runs commands without a [`TestApp`]: the file
/// `name` in `dir` on SQLite, a fresh database of the test cluster on PostgreSQL (`postgres.rs`).
pub fn test_db(dir: &std::path::Path, name: &str) -> PathBuf {
    if on_postgres() {
        PathBuf::from(super::postgres::fresh_database())
    } else {
        dir.join(name)
    }
}

/// One integer from a query on the database `db` (a file or a URL), on a connection of its own.
pub fn query_i64_at(db: &std::path::Path, sql: &str, args: &[&dyn Arg]) -> i64 {
    let text = db.to_string_lossy();
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        let mut c = ::postgres::Client::connect(&text, ::postgres::NoTls)
            .unwrap_or_else(|e| panic!("connect to {text}: {e}"));
        let args: Vec<&(dyn ::postgres::types::ToSql + Sync)> =
            args.iter().map(|a| *a as _).collect();
        let row = c
            .query_one(&convapi::store::engine::postgres_placeholders(sql), &args)
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        row.get::<_, Any>(0)
            .0
            .as_i64()
            .unwrap_or_else(|| panic!("{sql}: not an integer"))
    } else {
        let args: Vec<&dyn rusqlite::ToSql> = args.iter().map(|a| *a as _).collect();
        rusqlite::Connection::open(db)
            .and_then(|c| c.query_row(sql, args.as_slice(), |r| r.get(0)))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }
}

/// Whether to run a part of a test that checks what only SQLite has, the rest running on both
/// engines: `true` on SQLite; on a PostgreSQL run `false`, after printing
/// `SQLITE ONLY (PART): <test>: <why>` (counted apart by `scripts/test.sh`).
#[must_use]
pub fn sqlite_part(why: &str) -> bool {
    if !on_postgres() {
        return true;
    }
    let name = std::thread::current().name().unwrap_or("a test").to_owned();
    println!("{SQLITE_ONLY_PART} {name}: {why}");
    false
}

/// The marker line of a SQLite-only part of a test ([`sqlite_part`]).
pub const SQLITE_ONLY_PART: &str = "SQLITE ONLY (PART):";

/// An argument of a query, on either engine: `i64`, `&str`, `String`, `Vec<u8>`, `Option`s of them.
pub trait Arg: rusqlite::ToSql + ::postgres::types::ToSql + Sync {}
impl<T: rusqlite::ToSql + ::postgres::types::ToSql + Sync + ?Sized> Arg for T {}

/// Any column value PostgreSQL sends, read as the JSON value [`TestApp::rows`] gives.
struct Any(Value);

impl<'a> ::postgres::types::FromSql<'a> for Any {
    fn from_sql(
        ty: &::postgres::types::Type,
        raw: &'a [u8],
    ) -> Result<Any, Box<dyn std::error::Error + Sync + Send>> {
        use ::postgres::types::Type;
        Ok(Any(match *ty {
            Type::INT2 => json!(i16::from_sql(ty, raw)?),
            Type::INT4 => json!(i32::from_sql(ty, raw)?),
            Type::INT8 => json!(i64::from_sql(ty, raw)?),
            // A flag is 0 or 1 on SQLite; PostgreSQL answers `x IS NULL` with a boolean.
            Type::BOOL => json!(i64::from(bool::from_sql(ty, raw)?)),
            Type::FLOAT4 => json!(f32::from_sql(ty, raw)?),
            Type::FLOAT8 => json!(f64::from_sql(ty, raw)?),
            Type::BYTEA => json!(<Vec<u8>>::from_sql(ty, raw)?),
            Type::NUMERIC => numeric(raw)?,
            _ => json!(String::from_sql(ty, raw)?),
        }))
    }

    fn from_sql_null(
        _: &::postgres::types::Type,
    ) -> Result<Any, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Any(Value::Null))
    }

    fn accepts(_: &::postgres::types::Type) -> bool {
        true
    }
}

/// A `NUMERIC` in PostgreSQL's binary form (what `SUM` of a `BIGINT` column gives): an integer as
/// a JSON integer, anything with a fraction as a float. Base-10000 digits, a weight, a sign.
fn numeric(raw: &[u8]) -> Result<Value, Box<dyn std::error::Error + Sync + Send>> {
    let word = |i: usize| -> i64 { i64::from(i16::from_be_bytes([raw[2 * i], raw[2 * i + 1]])) };
    let (ndigits, weight, sign) = (word(0), word(1), word(2) as u16);
    if sign == 0xC000 {
        return Err("NaN".into());
    }
    let mut value = 0f64;
    let mut integer = 0i64;
    let mut whole = true;
    for i in 0..ndigits {
        let digit = word(4 + i as usize);
        let power = weight - i;
        value += digit as f64 * 10000f64.powi(power as i32);
        if power >= 0 {
            integer += digit * 10000i64.pow(power as u32);
        } else if digit != 0 {
            whole = false;
        }
    }
    let negative = sign == 0x4000;
    Ok(match (whole, negative) {
        (true, false) => json!(integer),
        (true, true) => json!(-integer),
        (false, false) => json!(value),
        (false, true) => json!(-value),
    })
}

fn sqlite_value(v: rusqlite::types::ValueRef) -> Value {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(n) => json!(n),
        ValueRef::Real(f) => json!(f),
        ValueRef::Text(t) => json!(String::from_utf8_lossy(t)),
        ValueRef::Blob(b) => json!(b),
    }
}

impl TestApp {
    /// A fresh connection to the database file (beside the server's; WAL lets both read), for what
    /// only SQLite has; a test that calls it starts with [`sqlite_only`].
    pub fn sqlite(&self) -> rusqlite::Connection {
        assert!(
            !on_postgres(),
            "this test reads the SQLite file itself: start it with `if sqlite_only(\"why\") {{ return; }}`"
        );
        let c = rusqlite::Connection::open(&self.db).expect("open db");
        c.busy_timeout(WAIT).expect("busy timeout");
        c
    }

    /// Whether this app serves a PostgreSQL URL (the run's engine, or a test's own `--db`).
    pub fn is_postgres(&self) -> bool {
        let db = self.db.to_string_lossy();
        db.starts_with("postgres://") || db.starts_with("postgresql://")
    }

    /// Runs `f` on a plain client of this app's PostgreSQL database, connected on first use and
    /// kept for the app's later peeks (or again, if the database closed it).
    fn with_postgres<T>(&self, f: impl FnOnce(&mut ::postgres::Client) -> T) -> T {
        let mut peek = self.peek.lock().unwrap_or_else(|e| e.into_inner());
        if peek.as_ref().is_none_or(|c| c.is_closed()) {
            let url = self.db.to_string_lossy().into_owned();
            let client = ::postgres::Client::connect(&url, ::postgres::NoTls)
                .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
            *peek = Some(client);
        }
        f(peek.as_mut().expect("connected above"))
    }

    /// Every row of a query, each as its columns' JSON values (integers, floats, text, bytes as an
    /// array of numbers, `null`), on either engine.
    pub fn rows(&self, sql: &str, args: &[&dyn Arg]) -> Vec<Vec<Value>> {
        self.query(sql, args).1
    }

    /// Every row of a query as a JSON object keyed by column name (values as [`TestApp::rows`]).
    pub fn objects(&self, sql: &str, args: &[&dyn Arg]) -> Vec<Value> {
        let (names, rows) = self.query(sql, args);
        rows.into_iter()
            .map(|row| Value::Object(names.iter().cloned().zip(row).collect()))
            .collect()
    }

    /// The column names of a query and its rows.
    fn query(&self, sql: &str, args: &[&dyn Arg]) -> (Vec<String>, Vec<Vec<Value>>) {
        if self.is_postgres() {
            let pg_sql = convapi::store::engine::postgres_placeholders(sql);
            let args: Vec<&(dyn ::postgres::types::ToSql + Sync)> =
                args.iter().map(|a| *a as _).collect();
            self.with_postgres(|c| {
                let stmt = c.prepare(&pg_sql)?;
                let names = stmt.columns().iter().map(|c| c.name().to_owned()).collect();
                let rows = c.query(&stmt, &args)?;
                Ok::<_, ::postgres::Error>((names, rows))
            })
            .map(|(names, rows)| {
                let rows = rows
                    .iter()
                    .map(|row| (0..row.len()).map(|i| row.get::<_, Any>(i).0).collect())
                    .collect();
                (names, rows)
            })
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        } else {
            let c = self.sqlite_peek();
            let mut stmt = c.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
            let names: Vec<String> = stmt.column_names().iter().map(|n| n.to_string()).collect();
            let n = names.len();
            let args: Vec<&dyn rusqlite::ToSql> = args.iter().map(|a| *a as _).collect();
            let rows = stmt
                .query_map(args.as_slice(), |r| {
                    (0..n).map(|i| Ok(sqlite_value(r.get_ref(i)?))).collect()
                })
                .and_then(|rows| rows.collect())
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
            (names, rows)
        }
    }

    /// The first column of the first row, `None` without rows.
    fn first(&self, sql: &str, args: &[&dyn Arg]) -> Option<Value> {
        self.rows(sql, args)
            .into_iter()
            .next()
            .map(|row| row.into_iter().next().expect("a column"))
    }

    /// One integer from a query (e.g. `SELECT COUNT(*) ...`).
    #[track_caller]
    pub fn query_i64(&self, sql: &str, args: &[&dyn Arg]) -> i64 {
        let v = self
            .first(sql, args)
            .unwrap_or_else(|| panic!("{sql}: no row"));
        v.as_i64()
            .unwrap_or_else(|| panic!("{sql}: {v} is not an integer"))
    }

    /// One optional text value from a query (`None`: no row, or NULL).
    #[track_caller]
    pub fn query_str(&self, sql: &str, args: &[&dyn Arg]) -> Option<String> {
        match self.first(sql, args)? {
            Value::Null => None,
            Value::String(s) => Some(s),
            v => panic!("{sql}: {v} is not text"),
        }
    }

    /// Runs one statement that changes rows (`UPDATE`, `INSERT`, `DELETE`); how many it changed.
    pub fn execute(&self, sql: &str, args: &[&dyn Arg]) -> u64 {
        if self.is_postgres() {
            let pg_sql = convapi::store::engine::postgres_placeholders(sql);
            let args: Vec<&(dyn ::postgres::types::ToSql + Sync)> =
                args.iter().map(|a| *a as _).collect();
            self.with_postgres(|c| c.execute(&pg_sql, &args))
                .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        } else {
            let args: Vec<&dyn rusqlite::ToSql> = args.iter().map(|a| *a as _).collect();
            self.sqlite_peek()
                .execute(sql, args.as_slice())
                .unwrap_or_else(|e| panic!("{sql}: {e}")) as u64
        }
    }

    /// Runs statements without arguments, separated by `;`, in one transaction.
    pub fn execute_batch(&self, sql: &str) {
        let batch = format!("BEGIN; {sql}; COMMIT;");
        if self.is_postgres() {
            self.with_postgres(|c| c.batch_execute(&batch))
                .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        } else {
            self.sqlite_peek()
                .execute_batch(&batch)
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }

    /// A trigger that makes the database refuse every `op` (`INSERT` or `UPDATE`) of the
    /// conversion of order `order_id`, with the error `message`: a write refused by the database
    /// itself, on either engine.
    pub fn refuse_conversion(&self, op: &str, order_id: &str, message: &str) {
        if self.is_postgres() {
            self.execute_batch(&format!(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
                     IF NEW.order_id = '{order_id}' THEN RAISE EXCEPTION '{message}'; END IF;
                     RETURN NEW; END $$;
                 CREATE TRIGGER refuse BEFORE {op} ON conversions FOR EACH ROW
                     EXECUTE FUNCTION refuse()"
            ));
        } else {
            self.execute_batch(&format!(
                "CREATE TRIGGER refuse BEFORE {op} ON conversions WHEN NEW.order_id = '{order_id}'
                 BEGIN SELECT RAISE(ABORT, '{message}'); END"
            ));
        }
    }

    /// A connection of the library's store to this app's database, of either engine (it brings
    /// the schema up to date first, as every command does): for the store's and the pipeline's
    /// functions run in this process.
    pub fn store(&self) -> convapi::store::engine::DbConn {
        if self.is_postgres() {
            // What the harness gives the server and the commands (`app.rs`), for the
            // destinations' credentials this process reads or writes.
            convapi::store::sealed::give_postgres_key(super::app::PG_SECRET_KEY)
                .expect("one key for the whole run");
        }
        convapi::store::engine::open(
            &convapi::store::engine::Location::of(&self.db),
            &convapi::store::Settings::default(),
        )
        .expect("open the store")
    }

    /// The SQLite connection [`TestApp::rows`] and friends use (not limited to SQLite-only tests).
    fn sqlite_peek(&self) -> rusqlite::Connection {
        let c = rusqlite::Connection::open(&self.db).expect("open db");
        c.busy_timeout(WAIT).expect("busy timeout");
        c
    }

    /// The bytes of the database and its `-wal`/`-shm` companions, concatenated: SQLite's file,
    /// for tests that start with [`sqlite_only`]; what PostgreSQL holds is [`TestApp::db_text`].
    pub fn db_bytes(&self) -> Vec<u8> {
        assert!(
            !self.is_postgres(),
            "db_bytes reads SQLite's file: use db_text, or start the test with sqlite_only"
        );
        let mut all = Vec::new();
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let p = PathBuf::from(format!("{}{suffix}", self.db.display()));
            if let Ok(mut f) = std::fs::File::open(&p) {
                f.read_to_end(&mut all).expect("read db file");
            }
        }
        all
    }

    /// Everything the database holds, as bytes to search: on SQLite, the file and its companions
    /// ([`TestApp::db_bytes`], deleted pages included); on PostgreSQL, every column of every row of
    /// every table of the schema (text as it is, bytes as they are, numbers in decimal): the live
    /// rows, what a query can reach there (deleted rows wait in its pages for `VACUUM`, which only
    /// SQLite's file check covers: decisions §12).
    pub fn db_text(&self) -> Vec<u8> {
        if !self.is_postgres() {
            return self.db_bytes();
        }
        let tables = self.rows(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()",
            &[],
        );
        let mut all = Vec::new();
        for t in tables {
            let t = t[0].as_str().expect("a table name");
            for row in self.rows(&format!("SELECT * FROM \"{t}\""), &[]) {
                for v in row {
                    match v {
                        Value::String(s) => all.extend_from_slice(s.as_bytes()),
                        // bytea, as the bytes themselves (a key's hash)
                        Value::Array(bytes) => {
                            all.extend(bytes.iter().map(|b| b.as_u64().unwrap_or(0) as u8))
                        }
                        other => all.extend_from_slice(other.to_string().as_bytes()),
                    }
                    all.push(b'\t');
                }
                all.push(b'\n');
            }
        }
        all
    }
}
