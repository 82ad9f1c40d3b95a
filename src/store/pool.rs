//! Where the database is, and connections to it of either engine: what `--db` names
//! ([`Location`]), one connection of its own for a command or a thread ([`DbConn`]), and the pool
//! the request threads borrow from ([`Db`]). Callers hold these and pass them to the store's
//! functions as `&impl AsConn`; none of them learns which engine answers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use r2d2::Pool;
use r2d2_sqlite::SqliteConnectionManager;

use super::db::{AsConn, Conn, PgConn};
use super::{pg, DbPool, Result, Settings, StoreError};

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
            Location::Postgres(url) => pg::redacted(url),
        }
    }
}

/// A connection of its own, of either engine.
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
    /// `lock_timeout` = `busy_timeout` (pg::connect_bounded).
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
        Location::File(path) => DbConn::Sqlite(super::open_with(path, settings)?),
        Location::Postgres(url) => {
            DbConn::Postgres(pg::open_bounded(url, waits.lock_timeout(settings))?)
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

/// Makes the PostgreSQL connections of a [`Db`]: r2d2's manager for [`PgConn`], so that each
/// pooled connection keeps the statements it prepared (`r2d2_postgres` hands out a bare client,
/// with nowhere to keep them).
#[derive(Debug)]
pub struct PgManager {
    url: String,
    lock_timeout: Option<Duration>,
}

impl r2d2::ManageConnection for PgManager {
    type Connection = PgConn;
    type Error = StoreError;

    fn connect(&self) -> Result<PgConn> {
        pg::connect_bounded(&self.url, self.lock_timeout).map(PgConn::new)
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

/// The request threads' pool, of either engine.
#[derive(Clone)]
pub enum Db {
    Sqlite(DbPool),
    Postgres(Pool<PgManager>),
}

/// A connection borrowed from a [`Db`]; it goes back to the pool when dropped.
pub enum Pooled {
    Sqlite(r2d2::PooledConnection<SqliteConnectionManager>),
    Postgres(r2d2::PooledConnection<PgManager>),
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
            Location::File(path) => Ok(Db::Sqlite(super::open_pool(path, size, settings)?)),
            Location::Postgres(url) => {
                drop(pg::open(url)?);
                let pool = Pool::builder()
                    .max_size(size.max(1))
                    // No round trip per checkout: a broken connection is found by using it
                    // (`has_broken`), and the pool starts empty so that opening never waits for
                    // `size` connections.
                    .test_on_check_out(false)
                    .min_idle(Some(0))
                    .connection_timeout(settings.busy_timeout.max(Duration::from_millis(1)))
                    .build_unchecked(PgManager {
                        url: url.clone(),
                        lock_timeout: Waits::BusyTimeout.lock_timeout(settings),
                    });
                Ok(Db::Postgres(pool))
            }
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
