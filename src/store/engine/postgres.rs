//! PostgreSQL, the engine for several nodes on one database: its connect (TLS, timeouts, durable
//! commits), its error mapping, its migration list, and how it runs the statements of the seam in
//! `mod.rs` ([`PgConn`]). Built with the cargo feature `postgres` only. The migrations are the numbered files in `migrations/postgres/`, one per schema
//! version as on SQLite (`migrations/sqlite/`); a PostgreSQL database starts at version 6, the
//! first that convapi runs on PostgreSQL, built by `0006_initial.sql` in one step. The version is
//! the one row of `schema_version`.
//!
//! Nodes that start at once on one database migrate one at a time: each takes a
//! transaction-scoped advisory lock ([`MIGRATION_LOCK`]) before it reads the version, and applies
//! what is missing, and sets the version, in that same transaction (PostgreSQL's DDL is
//! transactional), so every migration is applied once, entirely or not at all (the runner is
//! `store/migrate.rs`'s). A database newer than the binary is refused.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::time::Duration;

use postgres::types::{IsNull, ToSql, Type};
use postgres::{Client, NoTls};

pub use postgres::Row;

use super::Value;
use crate::store::dialect::postgres_placeholders;
use crate::store::migrate::{self, Chain, Migration};
use crate::store::{Result, StoreError};
use crate::text::{redacted_url, Query};

/// Every migration of PostgreSQL, in order.
pub(in crate::store) const MIGRATIONS: &[Migration] = &[
    Migration::new(
        6,
        "0006_initial.sql",
        include_str!("../migrations/postgres/0006_initial.sql"),
    ),
    Migration::new(
        7,
        "0007_first_run_token.sql",
        include_str!("../migrations/postgres/0007_first_run_token.sql"),
    ),
    Migration::new(
        8,
        "0008_forwarding.sql",
        include_str!("../migrations/postgres/0008_forwarding.sql"),
    ),
    Migration::new(
        9,
        "0009_destination_api_version.sql",
        include_str!("../migrations/postgres/0009_destination_api_version.sql"),
    ),
    Migration::new(
        10,
        "0010_people.sql",
        include_str!("../migrations/postgres/0010_people.sql"),
    ),
    Migration::new(
        11,
        "0011_adjustments.sql",
        include_str!("../migrations/postgres/0011_adjustments.sql"),
    ),
    Migration::new(
        12,
        "0012_rollup_plpgsql.sql",
        include_str!("../migrations/postgres/0012_rollup_plpgsql.sql"),
    ),
    Migration::new(
        13,
        "0013_site_deletion.sql",
        include_str!("../migrations/postgres/0013_site_deletion.sql"),
    ),
    Migration::new(
        14,
        "0014_field_warnings.sql",
        include_str!("../migrations/postgres/0014_field_warnings.sql"),
    ),
    Migration::new(
        15,
        "0015_adjustment_deliveries.sql",
        include_str!("../migrations/postgres/0015_adjustment_deliveries.sql"),
    ),
    Migration::new(
        16,
        "0016_net_revenue.sql",
        include_str!("../migrations/postgres/0016_net_revenue.sql"),
    ),
    Migration::new(
        17,
        "0017_sources.sql",
        include_str!("../migrations/postgres/0017_sources.sql"),
    ),
    Migration::new(
        18,
        "0018_adjusted_orders.sql",
        include_str!("../migrations/postgres/0018_adjusted_orders.sql"),
    ),
    Migration::new(
        19,
        "0019_unattributed.sql",
        include_str!("../migrations/postgres/0019_unattributed.sql"),
    ),
    Migration::new(
        20,
        "0020_test_mode.sql",
        include_str!("../migrations/postgres/0020_test_mode.sql"),
    ),
    Migration::new(
        21,
        "0021_referral_exclusion.sql",
        include_str!("../migrations/postgres/0021_referral_exclusion.sql"),
    ),
    Migration::new(
        22,
        "0022_visitor_sketches.sql",
        include_str!("../migrations/postgres/0022_visitor_sketches.sql"),
    ),
    Migration::new(
        23,
        "0023_rollup_slots.sql",
        include_str!("../migrations/postgres/0023_rollup_slots.sql"),
    ),
    Migration::new(
        24,
        "0024_sketch_day_clock.sql",
        include_str!("../migrations/postgres/0024_sketch_day_clock.sql"),
    ),
    Migration::new(
        25,
        "0025_outbox_due_order.sql",
        include_str!("../migrations/postgres/0025_outbox_due_order.sql"),
    ),
    Migration::new(
        26,
        "0026_rollup_update_first.sql",
        include_str!("../migrations/postgres/0026_rollup_update_first.sql"),
    ),
    Migration::new(
        27,
        "0027_sessions_visitor_id.sql",
        include_str!("../migrations/postgres/0027_sessions_visitor_id.sql"),
    ),
];

/// How long a connection attempt may take when the URL sets no `connect_timeout`.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The key of the advisory lock that migrating nodes take, one at a time ("convapi" and 1).
pub const MIGRATION_LOCK: i64 = 0x636f_6e76_6170_6901;

impl From<postgres::Error> for StoreError {
    fn from(e: postgres::Error) -> Self {
        use postgres::error::SqlState;
        match e.code() {
            Some(c)
                if *c == SqlState::UNIQUE_VIOLATION || *c == SqlState::FOREIGN_KEY_VIOLATION =>
            {
                StoreError::Conflict(postgres_message(&e))
            }
            Some(c) if *c == SqlState::DISK_FULL => StoreError::Full,
            // A closed connection, a socket that broke under the statement (the server stopped
            // between the client's write and its read: a broken pipe, a reset, a message cut
            // short), or the server refusing or shutting down: the database, not the work, is at
            // fault. The work may be retried: a conversion's repeat is recognised by its order id.
            None if e.is_closed() || broken_socket(&e) => StoreError::Busy,
            Some(c) if c.code().starts_with("08") => StoreError::Busy,
            Some(c)
                if *c == SqlState::ADMIN_SHUTDOWN
                    || *c == SqlState::CRASH_SHUTDOWN
                    || *c == SqlState::CANNOT_CONNECT_NOW
                    || *c == SqlState::TOO_MANY_CONNECTIONS
                    || *c == SqlState::T_R_SERIALIZATION_FAILURE
                    || *c == SqlState::T_R_DEADLOCK_DETECTED
                    || *c == SqlState::LOCK_NOT_AVAILABLE =>
            {
                StoreError::Busy
            }
            _ => StoreError::Other(postgres_message(&e)),
        }
    }
}

/// Whether the client's error is its socket's (an I/O error, the only cause the client gives
/// as a `std::io::Error`).
fn broken_socket(e: &postgres::Error) -> bool {
    std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

/// The server's own message when there is one (`Display` of the client's error says only "db
/// error"), else the client's.
fn postgres_message(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("PostgreSQL: {}", db.message()),
        None => {
            // The client's own words ("error performing TLS handshake") and then why.
            let mut out = format!("PostgreSQL: {e}");
            let mut cause = std::error::Error::source(e);
            while let Some(c) = cause {
                out.push_str(&format!(": {c}"));
                cause = c.source();
            }
            out
        }
    }
}

/// Connects to the database at `url` (`postgres://` or `postgresql://`: user, password, host or
/// Unix-socket directory, port, database), durably: see [`durable_commits`]. A URL without a
/// password takes `PGPASSWORD`'s, as libpq's tools do, so that none need be on a command line.
pub fn connect(url: &str) -> Result<Client> {
    connect_bounded(url, None)
}

/// [`connect`] for the request path (the request threads' pool and the writer): every wait for a
/// lock is bounded by `lock_timeout` (`serve --busy-timeout-ms`, as SQLite's busy timeout bounds
/// the wait for its write lock), after which the statement fails with `lock_not_available`, a
/// `Busy`. Set in the connection's start-up packet (`options=-c lock_timeout=…`): no round trip.
pub fn connect_bounded(url: &str, lock_timeout: Option<std::time::Duration>) -> Result<Client> {
    let fail = |why: String| {
        StoreError::Other(format!(
            "cannot connect to PostgreSQL at {}: {why}",
            redacted_url(url, Query::PasswordHidden)
        ))
    };
    let (url_for_client, root_cert) = split_root_cert(url);
    let mut config: postgres::Config = url_for_client
        .parse()
        .map_err(|e: postgres::Error| fail(postgres_message(&e)))?;
    // A host that does not answer would otherwise hold the caller for the system's TCP timeout
    // (minutes): the writer's reconnect, the pool's request threads.
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    password_from(&mut config, std::env::var_os("PGPASSWORD"));
    if let Some(timeout) = lock_timeout {
        let options = bounded_options(config.get_options(), timeout);
        config.options(&options);
    }
    // TLS when the URL asks for it; `prefer` (the client's default) and `disable` connect in the
    // clear, as before TLS was built, so a local server's self-signed certificate stops no one.
    let mut client = if config.get_ssl_mode() == postgres::config::SslMode::Require {
        config.connect(tls(root_cert.as_deref()).map_err(|e| fail(e.to_string()))?)
    } else {
        config.connect(NoTls)
    }
    .map_err(|e| fail(postgres_message(&e)))?;
    durable_commits(&mut client)?;
    Ok(client)
}

/// `pgpassword` (`PGPASSWORD`'s value) as the password of a URL that gives none.
fn password_from(config: &mut postgres::Config, pgpassword: Option<std::ffi::OsString>) {
    if config.get_password().is_none() {
        if let Some(password) = pgpassword {
            config.password(password.as_encoded_bytes());
        }
    }
}

/// The start-up `options` that bound lock waits to `timeout` (at least 1 ms: 0 would mean no
/// bound), after the URL's own.
fn bounded_options(url_options: Option<&str>, timeout: std::time::Duration) -> String {
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128);
    match url_options {
        Some(own) if !own.trim().is_empty() => format!("{own} -c lock_timeout={ms}"),
        _ => format!("-c lock_timeout={ms}"),
    }
}

/// The URL without its `sslrootcert=PATH` parameter (libpq's name; the client's parser knows no
/// such option), and that path.
fn split_root_cert(url: &str) -> (String, Option<String>) {
    let Some((head, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut root = None;
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.strip_prefix("sslrootcert=") {
            Some(path) => {
                root = Some(path.to_owned());
                false
            }
            None => true,
        })
        .collect();
    let url = if kept.is_empty() {
        head.to_owned()
    } else {
        format!("{head}?{}", kept.join("&"))
    };
    (url, root)
}

/// TLS for a TCP connection with `sslmode=require`, through rustls. The
/// server's certificate is always verified, against the CA certificates of `root_cert` (a PEM file,
/// `sslrootcert=` in the URL: a managed PostgreSQL's own CA) or else the public web roots; a
/// certificate that does not verify fails the connection. This is stricter than libpq's `require`,
/// which encrypts without verifying. Unix-socket connections never use TLS.
/// Why TLS could not be set up (the CA file, the protocol versions).
#[derive(Debug)]
pub struct TlsSetup(String);

impl std::fmt::Display for TlsSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn tls(
    root_cert: Option<&str>,
) -> std::result::Result<tokio_postgres_rustls::MakeRustlsConnect, TlsSetup> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match root_cert {
        Some(path) => {
            let pem =
                std::fs::read(path).map_err(|e| TlsSetup(format!("sslrootcert {path}: {e}")))?;
            let mut found = 0;
            for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| TlsSetup(format!("sslrootcert {path}: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| TlsSetup(format!("sslrootcert {path}: {e}")))?;
                found += 1;
            }
            if found == 0 {
                return Err(TlsSetup(format!(
                    "sslrootcert {path}: no PEM certificate in it"
                )));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| TlsSetup(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// convapi answers 202 only once a conversion is durable. PostgreSQL's `synchronous_commit = off`
/// (settable per server, database or role) acknowledges a commit before it is on disk, so a
/// connection that starts with it off switches it back on for its own session. `local`,
/// `remote_write`, `on` and `remote_apply` all flush locally before answering and are kept.
/// [`durability_warnings`] says what a session cannot change.
fn durable_commits(client: &mut Client) -> Result<()> {
    let commit: String = client
        .query_one("SELECT current_setting('synchronous_commit')", &[])?
        .get(0);
    if commit == "off" {
        client.batch_execute("SET synchronous_commit = on")?;
    }
    Ok(())
}

/// What `serve` logs at start about the server's durability: `fsync = off` (which no session can
/// change: a power failure can lose acknowledged conversions) and a `synchronous_commit = off`
/// default (which convapi's sessions override).
pub fn durability_warnings(url: &str) -> Result<Vec<String>> {
    let mut client = connect(url)?;
    // `reset_val`: the default this session started with, before `durable_commits` changed it.
    let row = client.query_one(
        "SELECT (SELECT reset_val FROM pg_settings WHERE name = 'synchronous_commit'),
                current_setting('fsync')",
        &[],
    )?;
    let (commit, fsync): (String, String) = (row.get(0), row.get(1));
    let mut out = Vec::new();
    if fsync == "off" {
        out.push(
            "PostgreSQL runs with fsync = off: a power failure can lose acknowledged conversions; \
             set fsync = on in postgresql.conf"
                .to_owned(),
        );
    }
    if commit == "off" {
        out.push(
            "PostgreSQL's default is synchronous_commit = off: convapi's connections set it to on \
             for themselves, since a conversion is acknowledged only once durable"
                .to_owned(),
        );
    }
    Ok(out)
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
    /// Transaction-control statements not sent yet (`BEGIN`, `SAVEPOINT`, `RELEASE`, `SET LOCAL`):
    /// they go in one simple query just before the next statement, or with the `COMMIT`, so that
    /// they cost one round trip between two statements however many there are. A `SAVEPOINT`
    /// released before any statement ran is never sent, nor is a transaction that ran none.
    pending: RefCell<Vec<String>>,
    /// The `statement_timeout` set in the open transaction (ms), so that a chunk's items set it once.
    timeout_ms: Cell<Option<u128>>,
    /// Messages sent to the server and answered (round trips) since the connection opened.
    round_trips: Cell<u64>,
}

impl PgConn {
    pub fn new(client: postgres::Client) -> PgConn {
        PgConn {
            client: RefCell::new(client),
            statements: RefCell::new(HashMap::new()),
            in_tx: Cell::new(false),
            aborted: Cell::new(false),
            changes: Cell::new(0),
            pending: RefCell::new(Vec::new()),
            timeout_ms: Cell::new(None),
            round_trips: Cell::new(0),
        }
    }

    /// How many round trips this connection made since it opened: what the store's spelling of a
    /// piece of work costs, for the tests that keep it from growing.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.get()
    }

    /// The client, for one round trip (counted).
    fn send(&self) -> std::cell::RefMut<'_, postgres::Client> {
        self.round_trips.set(self.round_trips.get() + 1);
        self.client.borrow_mut()
    }

    /// One round trip: whether the server answers on this connection.
    pub fn ping(&self) -> Result<()> {
        self.flush()?;
        self.failed(self.send().simple_query("SELECT 1")).map(drop)
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

    /// Takes a transaction-control statement and keeps track of the transaction's state. `BEGIN`,
    /// `SAVEPOINT` and `RELEASE` wait in [`PgConn::pending`] (a `RELEASE` of a savepoint still
    /// pending takes it back); `COMMIT` goes with them in one round trip, and a transaction that
    /// never ran a statement is neither sent nor committed; `ROLLBACK TO` goes at once.
    pub(super) fn tx_control(&self, sql: &str) -> Result<()> {
        let word = sql.split_whitespace().next().unwrap_or("");
        match word {
            "BEGIN" | "START" => {
                self.flush()?;
                self.pending.borrow_mut().push(sql.to_owned());
                self.in_tx.set(true);
                self.aborted.set(false);
                self.timeout_ms.set(None);
                Ok(())
            }
            "SAVEPOINT" => {
                self.pending.borrow_mut().push(sql.to_owned());
                Ok(())
            }
            "RELEASE" => {
                let mut pending = self.pending.borrow_mut();
                let name = sql.split_whitespace().last().unwrap_or("");
                let unsent = pending.last().is_some_and(|p| {
                    p.split_whitespace().next() == Some("SAVEPOINT")
                        && p.split_whitespace().last() == Some(name)
                });
                if unsent {
                    pending.pop();
                } else {
                    pending.push(sql.to_owned());
                }
                Ok(())
            }
            // Whatever they answer, the transaction is over (or the connection is).
            "COMMIT" | "ROLLBACK" if !sql.starts_with("ROLLBACK TO") => {
                let pending = std::mem::take(&mut *self.pending.borrow_mut());
                let was_open = self.in_tx.replace(false);
                self.aborted.set(false);
                self.timeout_ms.set(None);
                let unsent = pending.first().is_some_and(|p| {
                    matches!(p.split_whitespace().next(), Some("BEGIN" | "START"))
                });
                if unsent && was_open {
                    // Nothing of this transaction reached the server: nothing to end.
                    return Ok(());
                }
                if word == "ROLLBACK" {
                    return Ok(self.send().batch_execute(sql)?);
                }
                let mut batch = pending;
                batch.push(sql.to_owned());
                let r = self.send().batch_execute(&batch.join("; "));
                if r.is_err() && batch.len() > 1 {
                    // A statement before the `COMMIT` failed, so the `COMMIT` never ran: the
                    // transaction is still open on the server, refusing everything.
                    let _ = self.send().batch_execute("ROLLBACK");
                }
                Ok(r?)
            }
            _ => {
                self.flush()?;
                let r = self.send().batch_execute(sql);
                if word == "ROLLBACK" && r.is_ok() {
                    // `ROLLBACK TO` undid the failed statement, and any `SET LOCAL` after it.
                    self.aborted.set(false);
                    self.timeout_ms.set(None);
                }
                self.failed(r)
            }
        }
    }

    /// Sends the pending transaction-control statements, in one round trip.
    fn flush(&self) -> Result<()> {
        if self.pending.borrow().is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut *self.pending.borrow_mut()).join("; ");
        let r = self.send().batch_execute(&batch);
        self.failed(r)
    }

    /// Runs `f` on the client itself (migrations, transaction control).
    /// Pending transaction control is sent first; should that fail, the transaction refuses
    /// whatever `f` runs, which then fails.
    pub(in crate::store) fn with_client<T>(&self, f: impl FnOnce(&mut postgres::Client) -> T) -> T {
        let _ = self.flush();
        f(&mut self.send())
    }

    fn statement(&self, sql: &str) -> Result<postgres::Statement> {
        self.flush()?;
        if let Some(s) = self.statements.borrow().get(sql) {
            return Ok(s.clone());
        }
        let prepared = self.failed(self.send().prepare(&postgres_placeholders(sql)))?;
        self.statements
            .borrow_mut()
            .insert(sql.to_owned(), prepared.clone());
        Ok(prepared)
    }

    /// Runs `sql`, one or more statements without arguments, as a simple query.
    pub fn batch_execute(&self, sql: &str) -> Result<()> {
        self.flush()?;
        self.failed(self.send().batch_execute(sql))
    }

    pub(super) fn in_transaction(&self) -> bool {
        self.in_tx.get() && !self.aborted.get()
    }

    pub(super) fn transaction_open(&self) -> bool {
        self.in_tx.get()
    }

    pub(super) fn total_changes(&self) -> u64 {
        self.changes.get()
    }

    /// See [`Conn::interrupt_after`]: `statement_timeout`, local to the open transaction.
    pub(super) fn interrupt_after<T>(
        &self,
        deadline: Duration,
        f: impl FnOnce() -> T,
    ) -> Result<T> {
        let timeout_ms = deadline.as_millis().clamp(1, i32::MAX as u128);
        if !self.in_tx.get() {
            // Outside a transaction a local setting would end with its own statement.
            return Ok(f());
        }
        if self.timeout_ms.get() != Some(timeout_ms) {
            // An integer, so it can go with the pending transaction control (a simple query,
            // which takes no parameters), costing no round trip of its own.
            self.pending
                .borrow_mut()
                .push(format!("SET LOCAL statement_timeout = {timeout_ms}"));
            self.timeout_ms.set(Some(timeout_ms));
        }
        Ok(f())
    }

    pub(super) fn execute(&self, sql: &str, args: &[Value]) -> Result<u64> {
        let statement = self.statement(sql)?;
        let n =
            self.failed(self.with_client(|client| client.execute(&statement, &pg_params(args))))?;
        self.changes.set(self.changes.get().saturating_add(n));
        Ok(n)
    }

    pub(super) fn query_opt<T>(
        &self,
        sql: &str,
        args: &[Value],
        f: impl FnOnce(&super::Row) -> Result<T>,
    ) -> Result<Option<T>> {
        let statement = self.statement(sql)?;
        let rows =
            self.failed(self.with_client(|client| client.query(&statement, &pg_params(args))))?;
        rows.first()
            .map(|r| f(&super::Row::Postgres(r)))
            .transpose()
    }

    pub(super) fn query_each<E: From<StoreError>>(
        &self,
        sql: &str,
        args: &[Value],
        mut f: impl FnMut(&super::Row) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        use postgres::fallible_iterator::FallibleIterator;
        let statement = self.statement(sql)?;
        self.with_client(|client| {
            let mut rows = client
                .query_raw(&statement, args.iter())
                .or_else(|e| self.failed(Err(e)))?;
            while let Some(r) = rows.next().or_else(|e| self.failed(Err(e)))? {
                f(&super::Row::Postgres(&r))?;
            }
            Ok(())
        })
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

/// A Rust type a column can be read as on PostgreSQL (see [`super::FromColumn`]).
pub trait Column: Sized {
    fn from_postgres(r: &Row, i: usize) -> Result<Self>;
}

fn pg_column<'r, T: postgres::types::FromSql<'r>>(r: &'r Row, i: usize) -> Result<T> {
    r.try_get(i)
        .map_err(|e| StoreError::Other(format!("column {i}: {e}")))
}

/// An integer of any width, or a `boolean` as 0 or 1.
fn pg_int(r: &Row, i: usize) -> Result<Option<i64>> {
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

impl Column for i64 {
    fn from_postgres(r: &Row, i: usize) -> Result<Self> {
        not_null(pg_int(r, i)?, i)
    }
}

impl Column for Option<i64> {
    fn from_postgres(r: &Row, i: usize) -> Result<Self> {
        pg_int(r, i)
    }
}

impl Column for bool {
    fn from_postgres(r: &Row, i: usize) -> Result<Self> {
        Ok(not_null(pg_int(r, i)?, i)? != 0)
    }
}

macro_rules! column_as_is {
    ($($t:ty),*) => {$(
        impl Column for $t {
            fn from_postgres(r: &Row, i: usize) -> Result<Self> {
                pg_column(r, i)
            }
        }
    )*};
}
column_as_is!(String, Option<String>, Option<Vec<u8>>, Vec<u8>);

/// A statement's arguments as the PostgreSQL client takes them.
fn pg_params<'a>(args: &'a [Value<'a>]) -> Vec<&'a (dyn ToSql + Sync)> {
    args.iter().map(|a| a as &(dyn ToSql + Sync)).collect()
}

/// Makes the PostgreSQL connections of the request threads' pool: r2d2's manager for [`PgConn`],
/// so that each pooled connection keeps the statements it prepared (`r2d2_postgres` hands out a
/// bare client, with nowhere to keep them).
#[derive(Debug)]
pub struct PgManager {
    url: String,
    lock_timeout: Option<Duration>,
}

impl r2d2::ManageConnection for PgManager {
    type Connection = PgConn;
    type Error = StoreError;

    fn connect(&self) -> Result<PgConn> {
        connect_bounded(&self.url, self.lock_timeout).map(PgConn::new)
    }

    fn is_valid(&self, conn: &mut PgConn) -> Result<()> {
        conn.ping()
    }

    /// A connection the server or the network closed is dropped when it comes back to the pool,
    /// and a new one is made when needed: after PostgreSQL restarts, the first request on each
    /// old connection fails (a 503 to retry) and the pool heals by itself.
    fn has_broken(&self, conn: &mut PgConn) -> bool {
        conn.is_closed()
    }
}

pub type Pool = r2d2::Pool<PgManager>;
pub type Pooled = r2d2::PooledConnection<PgManager>;

/// Brings the database's schema up to date, then builds a pool of up to `size` connections over
/// it, each waiting for locks up to `lock_timeout`; a connection is waited for up to `wait`.
pub fn pool(url: &str, size: u32, wait: Duration, lock_timeout: Option<Duration>) -> Result<Pool> {
    drop(open(url)?);
    Ok(r2d2::Pool::builder()
        .max_size(size.max(1))
        // No round trip per checkout: a broken connection is found by using it (`has_broken`),
        // and the pool starts empty so that opening never waits for `size` connections.
        .test_on_check_out(false)
        .min_idle(Some(0))
        .connection_timeout(wait.max(Duration::from_millis(1)))
        .build_unchecked(PgManager {
            url: url.to_owned(),
            lock_timeout,
        }))
}

/// Connects to the database at `url` and brings its schema up to date: a connection for the
/// store's functions (`engine/mod.rs`).
pub fn open(url: &str) -> Result<PgConn> {
    open_bounded(url, None)
}

/// [`open`] with the lock waits of [`connect_bounded`].
pub fn open_bounded(url: &str, lock_timeout: Option<std::time::Duration>) -> Result<PgConn> {
    let mut client = connect_bounded(url, lock_timeout)?;
    migrate(&mut client)?;
    Ok(PgConn::new(client))
}

/// The schema version of the database, 0 for one convapi never migrated.
pub fn schema_version(client: &mut Client) -> Result<i64> {
    let exists: bool = client
        .query_one("SELECT to_regclass('schema_version') IS NOT NULL", &[])?
        .get(0);
    if !exists {
        return Ok(0);
    }
    Ok(client
        .query_opt("SELECT version FROM schema_version", &[])?
        .map_or(0, |r| r.get(0)))
}

/// Brings the database to [`crate::store::SCHEMA_VERSION`] under the migration lock; refuses a
/// newer one.
pub fn migrate(client: &mut Client) -> Result<()> {
    migrate_to(client, crate::store::SCHEMA_VERSION)
}

/// [`migrate`], stopping at `target` (tests build a database as an older binary left it).
pub fn migrate_to(client: &mut Client, target: i64) -> Result<()> {
    migrate::run(
        &mut PgChain {
            client,
            found: None,
        },
        MIGRATIONS,
        target,
    )
    .map(drop)
}

/// The migration runner's steps on PostgreSQL: the version is the one row of `schema_version`,
/// the lock a transaction-scoped advisory lock ([`MIGRATION_LOCK`]), and every pending migration
/// and the new version go in one transaction (PostgreSQL's DDL is transactional).
struct PgChain<'c> {
    client: &'c mut Client,
    /// The version row as read, `None` when the table had none.
    found: Option<i64>,
}

impl Chain for PgChain<'_> {
    const ENGINE: &'static str = "postgres";
    const STEPWISE: bool = false;

    fn peek(&mut self) -> Result<Option<i64>> {
        Ok(None)
    }

    fn begin(&mut self) -> Result<()> {
        self.client.batch_execute("BEGIN")?;
        self.client
            .execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
        // Created only when missing: a role that may read and write the tables but not create any
        // opens a migrated database all the same.
        let exists: bool = self
            .client
            .query_one("SELECT to_regclass('schema_version') IS NOT NULL", &[])?
            .get(0);
        if !exists {
            self.client
                .batch_execute("CREATE TABLE schema_version (version BIGINT NOT NULL)")?;
        }
        Ok(())
    }

    fn version(&mut self) -> Result<i64> {
        self.found = self
            .client
            .query_opt("SELECT version FROM schema_version", &[])?
            .map(|r| r.get::<_, i64>(0));
        Ok(self.found.unwrap_or(0))
    }

    fn apply(&mut self, m: &Migration) -> Result<()> {
        self.client.batch_execute(m.sql).map_err(|e| {
            StoreError::Other(format!("migration {}: {}", m.file, postgres_message(&e)))
        })
    }

    fn set_version(&mut self, version: i64) -> Result<()> {
        match self.found {
            None => self
                .client
                .execute("INSERT INTO schema_version VALUES ($1)", &[&version])?,
            Some(_) => self
                .client
                .execute("UPDATE schema_version SET version = $1", &[&version])?,
        };
        Ok(())
    }

    fn commit(&mut self) -> Result<()> {
        Ok(self.client.batch_execute("COMMIT")?)
    }

    fn rollback(&mut self) {
        let _ = self.client.batch_execute("ROLLBACK");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_without_a_password_takes_pgpasswords() {
        let with = |url: &str, env: Option<&str>| {
            let mut config: postgres::Config = url.parse().unwrap();
            password_from(&mut config, env.map(std::ffi::OsString::from));
            config.get_password().map(<[u8]>::to_vec)
        };
        assert_eq!(
            with("postgres://app@db.example/convapi", Some("from-env")),
            Some(b"from-env".to_vec())
        );
        assert_eq!(
            with("postgres://app:own@db.example/convapi", Some("from-env")),
            Some(b"own".to_vec())
        );
        assert_eq!(with("postgres://app@db.example/convapi", None), None);
    }

    #[test]
    fn a_bounded_connection_asks_for_a_lock_timeout_after_the_urls_own_options() {
        use std::time::Duration;
        assert_eq!(
            bounded_options(None, Duration::from_millis(300)),
            "-c lock_timeout=300"
        );
        assert_eq!(
            bounded_options(Some("-c search_path=app"), Duration::from_secs(5)),
            "-c search_path=app -c lock_timeout=5000"
        );
        assert_eq!(
            bounded_options(Some(""), Duration::ZERO),
            "-c lock_timeout=1"
        );
    }

    #[test]
    fn the_postgres_migrations_end_at_the_sqlite_schema_version() {
        let last = MIGRATIONS.last().expect("at least one migration");
        assert_eq!(last.version, crate::store::SCHEMA_VERSION);
        for pair in MIGRATIONS.windows(2) {
            assert_eq!(pair[1].version, pair[0].version + 1, "{}", pair[1].file);
        }
        for m in MIGRATIONS {
            assert!(
                m.file.starts_with(&format!("{:04}_", m.version)),
                "{} is named after its version",
                m.file
            );
        }
    }
}
