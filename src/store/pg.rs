//! PostgreSQL, the engine for several nodes on one database: its connection and the schema's
//! history on it. The migrations are the numbered files in `migrations/postgres/`, one per schema
//! version as on SQLite (`migrations/sqlite/`); a PostgreSQL database starts at version 6, the
//! first that convapi runs on PostgreSQL, built by `0006_initial.sql` in one step. The version is
//! the one row of `schema_version`.
//!
//! Nodes that start at once on one database migrate one at a time: each takes a
//! transaction-scoped advisory lock ([`MIGRATION_LOCK`]) before it reads the version, and applies
//! what is missing, and sets the version, in that same transaction (PostgreSQL's DDL is
//! transactional), so every migration is applied once, entirely or not at all. A database newer
//! than the binary is refused.

use postgres::{Client, NoTls};

use super::{Result, StoreError};

/// One migration: its file in `migrations/postgres/`, and the schema version it leaves.
struct Migration {
    version: i64,
    file: &'static str,
    sql: &'static str,
}

/// Every migration of PostgreSQL, in order.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 6,
        file: "0006_initial.sql",
        sql: include_str!("migrations/postgres/0006_initial.sql"),
    },
    Migration {
        version: 7,
        file: "0007_first_run_token.sql",
        sql: include_str!("migrations/postgres/0007_first_run_token.sql"),
    },
    Migration {
        version: 8,
        file: "0008_forwarding.sql",
        sql: include_str!("migrations/postgres/0008_forwarding.sql"),
    },
    Migration {
        version: 9,
        file: "0009_destination_api_version.sql",
        sql: include_str!("migrations/postgres/0009_destination_api_version.sql"),
    },
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
            redacted(url)
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

/// `url` without its password, for logs and messages.
pub fn redacted(url: &str) -> String {
    let mut out = url.to_owned();
    // In the authority: scheme://user:password@host
    if let Some(start) = out.find("://").map(|i| i + 3) {
        let end = out[start..]
            .find(['/', '?'])
            .map_or(out.len(), |i| start + i);
        if let Some(at) = out[start..end].rfind('@').map(|i| start + i) {
            if let Some(colon) = out[start..at].find(':').map(|i| start + i) {
                out.replace_range(colon + 1..at, "***");
            }
        }
    }
    // In the query: ?password=…&…
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if k == "password" => format!("{k}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
}

/// Connects to the database at `url` and brings its schema up to date: a connection for the
/// store's functions (`db.rs`).
pub fn open(url: &str) -> Result<super::db::PgConn> {
    open_bounded(url, None)
}

/// [`open`] with the lock waits of [`connect_bounded`].
pub fn open_bounded(
    url: &str,
    lock_timeout: Option<std::time::Duration>,
) -> Result<super::db::PgConn> {
    let mut client = connect_bounded(url, lock_timeout)?;
    migrate(&mut client)?;
    Ok(super::db::PgConn::new(client))
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

/// Brings the database to [`super::SCHEMA_VERSION`] under the migration lock; refuses a newer one.
pub fn migrate(client: &mut Client) -> Result<()> {
    migrate_with(client, MIGRATIONS, super::SCHEMA_VERSION)
}

fn migrate_with(client: &mut Client, migrations: &[Migration], target: i64) -> Result<()> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    // Created only when missing: a role that may read and write the tables but not create any
    // opens a migrated database all the same.
    let exists: bool = tx
        .query_one("SELECT to_regclass('schema_version') IS NOT NULL", &[])?
        .get(0);
    if !exists {
        tx.batch_execute("CREATE TABLE schema_version (version BIGINT NOT NULL)")?;
    }
    let found = tx
        .query_opt("SELECT version FROM schema_version", &[])?
        .map(|r| r.get::<_, i64>(0));
    let version = found.unwrap_or(0);
    if version > target {
        return Err(StoreError::Other(format!(
            "database schema version {version} is newer than this binary understands \
             ({target}); upgrade convapi"
        )));
    }
    if version == target {
        return Ok(tx.commit()?);
    }
    for m in migrations
        .iter()
        .filter(|m| m.version > version && m.version <= target)
    {
        tx.batch_execute(m.sql).map_err(|e| {
            StoreError::Other(format!("migration {}: {}", m.file, postgres_message(&e)))
        })?;
    }
    match found {
        None => tx.execute("INSERT INTO schema_version VALUES ($1)", &[&target])?,
        Some(_) => tx.execute("UPDATE schema_version SET version = $1", &[&target])?,
    };
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_shown_without_its_password() {
        assert_eq!(
            redacted("postgres://convapi:s3cr%40t@db.example:5432/convapi?sslmode=require"),
            "postgres://convapi:***@db.example:5432/convapi?sslmode=require"
        );
        assert_eq!(
            redacted("postgresql://u@/convapi?host=/run/postgresql&password=pw&port=5433"),
            "postgresql://u@/convapi?host=/run/postgresql&password=***&port=5433"
        );
        assert_eq!(
            redacted("postgres://db.example/convapi"),
            "postgres://db.example/convapi"
        );
    }

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
