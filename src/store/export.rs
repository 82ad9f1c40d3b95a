//! Getting data out of the file: a site's conversions or sessions read one row at a time for
//! `convapi export`, the online backup behind `convapi backup`, and the file sizes `/metrics` shows.
//!
//! The streaming reads hand each row to the caller and keep nothing: memory stays the same for ten
//! rows or ten million. They never open a transaction themselves (the caller runs them inside
//! [`super::read`], so the whole export is one snapshot), and their `ORDER BY` is always the order of
//! the index the query walks, so SQLite never buffers rows to sort them. The two streaming reads
//! are written for both engines (`engine/mod.rs`); the backup and the file sizes are SQLite's (on
//! PostgreSQL, `pg_dump` does the backup's work).

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::backup::{Backup, StepResult};
use rusqlite::Connection;

use super::conversions::{status_row, OrderStatus, STATUS_COLUMNS};
use super::dialect::Statement;
use super::engine::{args, AsConn, Conn};
use super::sessions::{self, Session};
use super::{Result, StoreError};

/// Calls `each` with every conversion of `site_id` that occurred in `[from_ms, to_ms)`, oldest
/// first; stops at the first error `each` returns.
pub fn conversions<E: From<StoreError>>(
    conn: &impl AsConn,
    site_id: &str,
    from_ms: i64,
    to_ms: i64,
    mut each: impl FnMut(&OrderStatus) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let conn = conn.conn();
    // SQLite: `rowid` breaks ties in `occurred_at` because it is the index entry's own last key:
    // any other tie-breaker would make SQLite sort each run of equal times in memory. PostgreSQL
    // has neither `INDEXED BY` nor a rowid; the id breaks ties there.
    static SQL: Statement = Statement::new();
    let sql = SQL.get(&conn, |d| {
        let (indexed_by, row_order) = (d.indexed_by("conversions_site_time"), d.row_order());
        format!(
            "SELECT {STATUS_COLUMNS}
             FROM conversions{indexed_by}
             LEFT JOIN outbox ON outbox.conversion_id = conversions.id
             WHERE site_id = ?1 AND occurred_at >= ?2 AND occurred_at < ?3 AND test = 0
             ORDER BY occurred_at, conversions.{row_order}"
        )
    });
    conn.query_each(sql, args![site_id, from_ms, to_ms], |row| {
        each(&status_row(row)?)
    })
}

/// Calls `each` with every session of `site_id` that started in `[from_ms, to_ms)`, by visitor and
/// then start time (the order of the index on sessions); stops at the first error `each` returns.
pub fn sessions<E: From<StoreError>>(
    conn: &impl AsConn,
    site_id: &str,
    from_ms: i64,
    to_ms: i64,
    mut each: impl FnMut(&Session) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let conn = conn.conn();
    static SQL: Statement = Statement::new();
    let sql = SQL.get(&conn, |d| {
        let indexed_by = d.indexed_by("sessions_visitor");
        format!(
            "SELECT {} FROM sessions{indexed_by}
             WHERE site_id = ?1 AND started_at >= ?2 AND started_at < ?3
             ORDER BY visitor_id, started_at, id",
            sessions::COLUMNS
        )
    });
    conn.query_each(sql, args![site_id, from_ms, to_ms], |row| {
        each(&sessions::from_row(row)?)
    })
}

/// Pages copied per backup step: 4 MiB at the default page size.
const BACKUP_STEP_PAGES: i32 = 1024;
/// The pause between steps, in which the server's writer and checkpointer run freely.
const BACKUP_PAUSE: Duration = Duration::from_millis(5);
/// Restarts tolerated before the rest is copied in one step. SQLite restarts a backup whenever
/// another connection commits to the source; under steady traffic a stepped copy of a large file
/// would never finish. One step holds a WAL read snapshot, which in WAL mode blocks no writer (it
/// only keeps the checkpointer from recycling the WAL until the step ends).
const BACKUP_MAX_RESTARTS: u32 = 3;

/// What a backup wrote.
#[derive(Debug, Clone)]
pub struct BackupDone {
    pub pages: i64,
    pub page_size: i64,
    /// The size of the written file.
    pub bytes: u64,
    /// Steps that got no nearer the end: a commit to the source had started the copy over.
    pub restarts: u32,
}

/// Copies the database `src` is connected to into a new file `dest` through SQLite's online backup,
/// a consistent snapshot of one moment. `dest` must not exist: the caller decides about
/// overwriting and moves the file into place (see `cli::backup`).
pub fn backup(src: &Connection, dest: &Path) -> Result<BackupDone> {
    let mut out = Connection::open(dest)?;
    let (pages, restarts) = {
        let copy = Backup::new(src, &mut out)?;
        let mut restarts = 0;
        let mut last_remaining = i32::MAX;
        loop {
            let step = if restarts >= BACKUP_MAX_RESTARTS {
                -1
            } else {
                BACKUP_STEP_PAGES
            };
            let result = copy.step(step)?;
            let progress = copy.progress();
            if result == StepResult::Done {
                break (progress.pagecount, restarts);
            }
            // A restarted copy ends its step where the first step ended, not further back: a step
            // that got no nearer the end is one that started over (or found the source busy).
            if progress.remaining >= last_remaining {
                restarts += 1;
            }
            last_remaining = progress.remaining;
            std::thread::sleep(BACKUP_PAUSE);
        }
    };
    // The copy carries the source's WAL flag; a backup is one self-contained file instead, until a
    // server opens it again (which puts it back in WAL mode).
    out.query_row("PRAGMA journal_mode = DELETE", [], |_| Ok(()))?;
    let page_size: i64 = out.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    out.close().map_err(|(_, e)| StoreError::from(e))?;
    let bytes = std::fs::metadata(dest)
        .map_err(|e| StoreError::Other(format!("{}: {e}", dest.display())))?
        .len();
    Ok(BackupDone {
        pages: pages.into(),
        page_size,
        bytes,
        restarts,
    })
}

/// How often [`file_sizes`] is worth measuring again: SQLite's are two `stat`s, every time;
/// PostgreSQL's walks the database's files, so once a minute is enough for a gauge.
pub fn sizes_every_ms(conn: &impl AsConn) -> i64 {
    match conn.conn() {
        Conn::Sqlite(_) => 0,
        Conn::Postgres(_) => 60_000,
    }
}

/// The bytes of the database file `conn` is connected to, and of its WAL (0 when there is none);
/// on PostgreSQL the size of the database and 0.
pub fn file_sizes(conn: &impl AsConn) -> Result<(u64, u64)> {
    let conn = match conn.conn() {
        Conn::Sqlite(c) => c,
        Conn::Postgres(_) => {
            let bytes: i64 = conn
                .conn()
                .query_opt(
                    "SELECT pg_database_size(current_database())",
                    args![],
                    |r| r.get(0),
                )?
                .unwrap_or(0);
            return Ok((bytes.max(0) as u64, 0));
        }
    };
    let path = conn
        .path()
        .filter(|p| !p.is_empty())
        .ok_or_else(|| StoreError::Other("not a database file".into()))?;
    let size = |p: &Path| match std::fs::metadata(p) {
        Ok(m) => Ok(m.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(StoreError::Other(format!("{}: {e}", p.display()))),
    };
    let db = Path::new(path);
    let mut wal = PathBuf::from(path).into_os_string();
    wal.push("-wal");
    Ok((size(db)?, size(Path::new(&wal))?))
}
