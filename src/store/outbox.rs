//! The operator's view of the outbox (`convapi outbox list` and `outbox retry`): what waits for the
//! pipeline, and dead letters made due again.
//!
//! The pipeline's own reads and outcomes live in `pipeline.rs`; this module never decides an
//! outcome. Retrying only puts a dead letter back where a new conversion starts (due now, no tries,
//! status `queued`), so the pipeline treats it like any other item and a running server's worker
//! picks it up at its next poll. Like every table module, it opens no transaction of its own.
//! Written once for both engines (`engine/mod.rs`).

use super::dialect::Statement;
use super::engine::{args, AsConn, Row};
use super::Result;

/// One outbox row with the conversion it is for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub conversion_id: String,
    pub site_id: String,
    pub order_id: Option<String>,
    /// `due` (waiting for its first or next try, which may lie ahead: see `next_attempt_at`),
    /// `fx_pending` (parked until a rates import) or `dead`.
    pub state: &'static str,
    /// The conversion's status (`queued`, `fx_pending`, `failed`).
    pub status: String,
    /// Failed tries so far.
    pub attempts: i64,
    pub next_attempt_at: Option<String>,
    pub last_error: Option<String>,
    /// Why an `fx_pending` item waits: the rates it needs.
    pub parked_reason: Option<String>,
    pub dead_at: Option<String>,
    pub created_at: String,
}

const ENTRY_COLUMNS: &str = "o.conversion_id, c.site_id, c.order_id, c.status, o.attempts,
    o.next_attempt_at, o.last_error, o.dead_at, o.created_at, o.parked_reason";

fn entry(r: &Row) -> Result<Entry> {
    let next: Option<i64> = r.get(5)?;
    let dead: Option<i64> = r.get(7)?;
    Ok(Entry {
        conversion_id: r.get(0)?,
        site_id: r.get(1)?,
        order_id: r.get(2)?,
        state: match (dead, next) {
            (Some(_), _) => "dead",
            (None, None) => "fx_pending",
            (None, Some(_)) => "due",
        },
        status: r.get(3)?,
        attempts: r.get(4)?,
        next_attempt_at: next.map(super::iso),
        last_error: r.get(6)?,
        dead_at: dead.map(super::iso),
        created_at: super::iso(r.get(8)?),
        parked_reason: r.get(9)?,
    })
}

/// The outbox, oldest first: of one site or all, dead letters only or everything.
pub fn list(conn: &impl AsConn, site_id: Option<&str>, dead_only: bool) -> Result<Vec<Entry>> {
    conn.conn().query_all(
        &format!(
            "SELECT {ENTRY_COLUMNS}
             FROM outbox o JOIN conversions c ON c.id = o.conversion_id
             WHERE (CAST(?1 AS TEXT) IS NULL OR c.site_id = ?1) AND (?2 = 0 OR o.dead_at IS NOT NULL)
             ORDER BY o.created_at, o.id"
        ),
        args![site_id, dead_only],
        entry,
    )
}

/// A site's dead letters, the most recently dead first, at most `limit` of them, and how many
/// there are in all. `CROSS JOIN` keeps the outbox as the outer loop, read through `outbox_due`
/// (dead ones only): with a plain join SQLite walks the site's conversions instead, a second or
/// more for a site with a million of them, however few dead letters there are. PostgreSQL has no
/// `CROSS JOIN … ON` (and plans the join itself): a plain join there.
pub fn dead_letters(conn: &impl AsConn, site_id: &str, limit: u32) -> Result<(Vec<Entry>, u64)> {
    let conn = conn.conn();
    static LIST: Statement = Statement::new();
    static COUNT: Statement = Statement::new();
    let list = LIST.get(&conn, |d| {
        let join_in_order = d.join_in_order();
        format!(
            "SELECT {ENTRY_COLUMNS}
             FROM outbox o {join_in_order} conversions c ON c.id = o.conversion_id
             WHERE o.dead_at IS NOT NULL AND c.site_id = ?1
             ORDER BY o.dead_at DESC, o.id DESC LIMIT ?2"
        )
    });
    let count = COUNT.get(&conn, |d| {
        let join_in_order = d.join_in_order();
        format!(
            "SELECT COUNT(*) FROM outbox o {join_in_order} conversions c ON c.id = o.conversion_id
             WHERE o.dead_at IS NOT NULL AND c.site_id = ?1"
        )
    });
    let items = conn.query_all(list, args![site_id, i64::from(limit)], entry)?;
    let total: Option<i64> = conn.query_opt(count, args![site_id], |r| r.get(0))?;
    Ok((items, total.unwrap_or(0).max(0) as u64))
}

/// Why a conversion cannot be retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotDead {
    /// No conversion has that id.
    Unknown,
    /// The conversion is not a dead letter; its status.
    Status(String),
}

/// Whether the conversion `id` is a dead letter (`Ok(())`), or why not.
pub fn check_dead(conn: &impl AsConn, id: &str) -> Result<std::result::Result<(), NotDead>> {
    let row: Option<(String, Option<i64>)> = conn.conn().query_opt(
        "SELECT c.status, o.dead_at FROM conversions c
         LEFT JOIN outbox o ON o.conversion_id = c.id WHERE c.id = ?1",
        args![id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok(match row {
        None => Err(NotDead::Unknown),
        Some((_, Some(_))) => Ok(()),
        Some((status, None)) => Err(NotDead::Status(status)),
    })
}

/// Makes the dead letters of these conversions (all of them with `None`) due at `now_ms` with no
/// tries counted, and their conversions `queued` again. Returns the conversion ids retried.
pub fn retry(conn: &impl AsConn, ids: Option<&[String]>, now_ms: i64) -> Result<Vec<String>> {
    let conn = conn.conn();
    let dead: Vec<String> = match ids {
        Some(ids) => ids.to_vec(),
        None => conn.query_all(
            "SELECT conversion_id FROM outbox WHERE dead_at IS NOT NULL ORDER BY created_at, id",
            args![],
            |r| r.get(0),
        )?,
    };
    let mut retried = Vec::with_capacity(dead.len());
    for id in dead {
        let n = conn.execute(
            "UPDATE outbox SET dead_at = NULL, attempts = 0, next_attempt_at = ?2, last_error = NULL
             WHERE conversion_id = ?1 AND dead_at IS NOT NULL",
            args![&id, now_ms],
        )?;
        if n == 1 {
            conn.execute(
                "UPDATE conversions SET status = 'queued' WHERE id = ?1",
                args![&id],
            )?;
            retried.push(id);
        }
    }
    Ok(retried)
}
