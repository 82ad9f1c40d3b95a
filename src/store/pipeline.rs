//! The pipeline's SQL: picking due outbox items and storing each
//! outcome. Every outcome function runs inside a write transaction (the request writer's in `serve`,
//! the pipeline's own [`super::write_tx`] otherwise), after `claim` in the same transaction, so a
//! result and the fate of its outbox row commit together or not at all.
//!
//! Outbox states: due (`next_attempt_at <= now`), backing off (`next_attempt_at` later), parked for
//! rates (`next_attempt_at IS NULL`, conversion `fx_pending`), dead (`dead_at` set, conversion `failed`).
//! Written once for both engines (`engine/mod.rs`).

use super::engine::{args, AsConn, Engine, Row, Value};
use super::Result;

/// The `UPDATE … SET` of a finished conversion's columns, `?2` to `?12` of [`result_args`] (`?1`
/// is the conversion), for [`store_result`] and [`claim_and_finish`] to complete.
macro_rules! store_result_set {
    () => {
        "UPDATE conversions SET status = 'processed', attr_model = ?2, attr_session_id = ?3,
            attr_source = ?4, attr_medium = ?5, attr_campaign = ?6, reporting_value = ?7,
            reporting_minor = ?8, reporting_currency = ?9, fx_rate = ?10, fx_date = ?11,
            processed_at = ?12"
    };
}

/// One outbox row as the worker sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub id: i64,
    pub conversion_id: String,
    /// Failed tries so far.
    pub attempts: i64,
}

/// Up to `limit` items due at `now`, oldest due first, dead letters and parked items excluded,
/// each *claimed* for this connection until [`release_claims`].
///
/// On PostgreSQL, where several nodes' pipelines drain one outbox, a claim is a session-level
/// advisory lock on the item's id: an item another node holds is skipped, so two nodes do not
/// decide the same items, and a node that dies loses its claims with its session at once (no lease
/// to wait out). The lock is tried in the outer query over the [`CLAIM_WINDOW`] × `limit` oldest
/// candidates, already ordered (`OFFSET 0` keeps PostgreSQL from merging the two), and the outer
/// `LIMIT` stops at `limit` locks taken: each candidate is tried at most once, every lock taken is
/// on a row returned, and a second pipeline (another node's) takes the next candidates instead of
/// finding the first `limit` held and coming back empty. A claim never decides what is stored: [`claim`], in the
/// writer's transaction, still re-reads each item before its outcome is written. On SQLite one
/// server drains the file and nothing is locked.
pub fn due(conn: &impl AsConn, now_ms: i64, limit: usize) -> Result<Vec<Item>> {
    let conn = conn.conn();
    match conn.engine() {
        Engine::Sqlite => conn.query_all(
            "SELECT id, conversion_id, attempts FROM outbox
             WHERE dead_at IS NULL AND next_attempt_at <= ?1
             ORDER BY next_attempt_at, id LIMIT ?2",
            args![now_ms, limit as i64],
            item,
        ),
        Engine::Postgres => conn.query_all(
            "SELECT id, conversion_id, attempts FROM (
                 SELECT id, conversion_id, attempts FROM outbox
                 WHERE dead_at IS NULL AND next_attempt_at <= ?1
                 ORDER BY next_attempt_at, id LIMIT ?3 OFFSET 0) candidates
             WHERE pg_try_advisory_lock(id)
             LIMIT ?2",
            args![
                now_ms,
                limit as i64,
                limit.saturating_mul(CLAIM_WINDOW) as i64
            ],
            item,
        ),
    }
}

/// How many candidates per item asked for [`due`] tries to claim on PostgreSQL.
pub const CLAIM_WINDOW: usize = 8;

/// Whether the pipeline writes its results in transactions of its own connection, beside the
/// request writer, rather than as jobs of the writer: on PostgreSQL, which takes several writing
/// connections at once (a chunk's statements then run beside the requests' instead of after them,
/// and its commit's WAL flush is shared with the commits waiting at the same time); not on SQLite,
/// where a second writer would wait for the file's lock and the writer's group commit is how
/// commits share an fsync.
pub fn writes_beside_the_writer(conn: &impl AsConn) -> bool {
    conn.conn().engine() == Engine::Postgres
}

/// Ends every claim [`due`] made on this connection (PostgreSQL's advisory locks; nothing on
/// SQLite). The pipeline's connection holds no other session lock.
pub fn release_claims(conn: &impl AsConn) -> Result<()> {
    let conn = conn.conn();
    if conn.engine() == Engine::Postgres {
        conn.query_opt("SELECT pg_advisory_unlock_all()", args![], |_| Ok(()))?;
    }
    Ok(())
}

/// Re-reads an item inside the worker's transaction: `None` when it was finished, parked, killed
/// or rescheduled since it was listed (so no outcome is ever stored twice).
///
/// "Still due" is one `IS TRUE` test here and in [`claim_and_finish`], a filter and never an index
/// condition, so that PostgreSQL finds the row by its id: a queue's statistics are often those of
/// an empty table, and with `dead_at IS NULL AND next_attempt_at <= now` as conditions it
/// range-scanned the partial index of due items up to now instead (125 pages a finish, measured).
pub fn claim(conn: &impl AsConn, id: i64, now_ms: i64) -> Result<Option<Item>> {
    conn.conn().query_opt(
        "SELECT id, conversion_id, attempts FROM outbox
         WHERE id = ?1 AND (dead_at IS NULL AND next_attempt_at <= ?2) IS TRUE",
        args![id, now_ms],
        item,
    )
}

/// An [`Item`] from a row of `id, conversion_id, attempts`.
fn item(r: &Row) -> Result<Item> {
    Ok(Item {
        id: r.get(0)?,
        conversion_id: r.get(1)?,
        attempts: r.get(2)?,
    })
}

/// The earliest time an item becomes due (`None`: nothing waits but parked or dead items).
pub fn next_due(conn: &impl AsConn) -> Result<Option<i64>> {
    Ok(conn
        .conn()
        .query_opt(
            "SELECT MIN(next_attempt_at) FROM outbox WHERE dead_at IS NULL",
            args![],
            |r| r.get::<Option<i64>>(0),
        )?
        .flatten())
}

/// The attribution stored with a conversion: what the pipeline decides (on its own thread, for the
/// writer's to store), and what the order status view reads back. Only [`finish`] and [`park`]
/// write it, all five columns at once, so a stored one always has its source and medium.
#[derive(Debug, Clone)]
pub struct Attribution {
    pub model: String,
    pub session_id: Option<String>,
    pub source: String,
    pub medium: String,
    pub campaign: Option<String>,
}

/// The currency conversion stored with a conversion (all `None` for a conversion without a value).
#[derive(Debug, Clone, Default)]
pub struct Reported {
    pub value: Option<String>,
    pub currency: Option<String>,
    pub rate: Option<String>,
    pub date: Option<String>,
}

fn store_attribution(
    conn: &impl AsConn,
    conversion_id: &str,
    a: &Attribution,
    status: &str,
) -> Result<()> {
    conn.conn().execute(
        "UPDATE conversions SET status = ?2, attr_model = ?3, attr_session_id = ?4, attr_source = ?5,
            attr_medium = ?6, attr_campaign = ?7
         WHERE id = ?1",
        args![conversion_id, status, &a.model, &a.session_id, &a.source, &a.medium, &a.campaign],
    )?;
    Ok(())
}

/// Stores the finished result (with the reporting value in integer minor units for the report's
/// rollup, `report::minor_amount`) and deletes the outbox row. The conversion's deliveries are
/// the pipeline's next step ([`super::deliveries::enqueue`], same transaction). Returns whether
/// the order has adjustments (`conversions.adjusted`, read in this transaction): only then has
/// [`super::adjustments::settle`] anything to do.
pub fn finish(
    conn: &impl AsConn,
    item_id: i64,
    conversion_id: &str,
    a: &Attribution,
    fx: &Reported,
    now_ms: i64,
) -> Result<bool> {
    let adjusted = store_result(conn, conversion_id, a, fx, now_ms)?;
    done(conn, item_id)?;
    Ok(adjusted)
}

/// [`claim`] and [`finish`] in one: the item `listed` is finished only if it is still due at
/// `now_ms`, for the same conversion, with the tries it had when it was listed. `None`: it was
/// not, and nothing was written; otherwise, as [`finish`], whether the order has adjustments.
/// On PostgreSQL, where each statement is a round trip, the claim, the result and the outbox row's
/// deletion are one statement; on SQLite three: the claim (which reads `adjusted`), the result and
/// the deletion.
pub fn claim_and_finish(
    conn: &impl AsConn,
    listed: &Item,
    a: &Attribution,
    fx: &Reported,
    now_ms: i64,
) -> Result<Option<bool>> {
    if conn.conn().engine() == Engine::Sqlite {
        // The claim reads whether the order has adjustments too (nothing else writes in this
        // transaction), so that the result's `UPDATE` needs no `RETURNING`: SQLite gathers a
        // `RETURNING`'s rows in a table of their own, about 10 µs per finish (measured).
        let adjusted = conn.conn().query_opt(
            "SELECT c.adjusted <> 0 FROM outbox o JOIN conversions c ON c.id = o.conversion_id
             WHERE o.id = ?1 AND o.conversion_id = ?2 AND o.attempts = ?3 AND o.dead_at IS NULL
                 AND o.next_attempt_at <= ?4",
            args![listed.id, &listed.conversion_id, listed.attempts, now_ms],
            |r| r.get(0),
        )?;
        let Some(adjusted) = adjusted else {
            return Ok(None);
        };
        let updated = conn.conn().execute(
            concat!(store_result_set!(), " WHERE id = ?1"),
            &result_args(&listed.conversion_id, a, fx, now_ms),
        )?;
        if updated != 1 {
            return Err(super::StoreError::Other(format!(
                "conversion {} vanished while being processed",
                listed.conversion_id
            )));
        }
        done(conn, listed.id)?;
        return Ok(Some(adjusted));
    }
    // The `DELETE` claims the row (a row another statement changed since the listing no longer
    // matches); the `UPDATE` runs only on the conversion of a row it deleted.
    let [a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12] =
        result_args(&listed.conversion_id, a, fx, now_ms);
    let adjusted = conn.conn().query_opt(
        concat!(
            "WITH claimed AS (
                 DELETE FROM outbox
                 WHERE id = ?13 AND conversion_id = ?1 AND attempts = ?14
                     AND (dead_at IS NULL AND next_attempt_at <= ?12) IS TRUE
                 RETURNING conversion_id) ",
            store_result_set!(),
            " WHERE id = (SELECT conversion_id FROM claimed) RETURNING adjusted <> 0"
        ),
        args![
            a1,
            a2,
            a3,
            a4,
            a5,
            a6,
            a7,
            a8,
            a9,
            a10,
            a11,
            a12,
            listed.id,
            listed.attempts
        ],
        |r| r.get(0),
    )?;
    Ok(adjusted)
}

/// [`finish`] for a conversion with no session (unattributed): its result is stored (it counts
/// at once), and its item stays, due again `retry_ms` after the conversion was received, while
/// that time is after `now_ms`. Otherwise the item is deleted as by [`finish`]: this was the last
/// try to resolve its session. Returns whether the item stays, and as [`finish`] whether the order
/// has adjustments.
pub fn finish_or_hold(
    conn: &impl AsConn,
    item_id: i64,
    conversion_id: &str,
    a: &Attribution,
    fx: &Reported,
    now_ms: i64,
    retry_ms: i64,
) -> Result<(bool, bool)> {
    let adjusted = store_result(conn, conversion_id, a, fx, now_ms)?;
    let held = conn.conn().execute(
        "UPDATE outbox SET next_attempt_at =
             (SELECT created_at FROM conversions WHERE id = ?2) + ?3
         WHERE id = ?1 AND (SELECT created_at FROM conversions WHERE id = ?2) + ?3 > ?4",
        args![item_id, conversion_id, retry_ms, now_ms],
    )?;
    if held == 1 {
        return Ok((true, adjusted));
    }
    done(conn, item_id)?;
    Ok((false, adjusted))
}

/// The arguments of `store_result_set!`, the conversion's id first, with the reporting value in
/// integer minor units for the report's rollup (`report::minor_amount`).
fn result_args<'a>(
    conversion_id: &'a str,
    a: &'a Attribution,
    fx: &'a Reported,
    now_ms: i64,
) -> [Value<'a>; 12] {
    let minor = match (&fx.value, &fx.currency) {
        (Some(v), Some(c)) => super::report::minor_amount(v, c),
        _ => None,
    };
    [
        conversion_id.into(),
        a.model.as_str().into(),
        (&a.session_id).into(),
        a.source.as_str().into(),
        a.medium.as_str().into(),
        (&a.campaign).into(),
        (&fx.value).into(),
        minor.into(),
        (&fx.currency).into(),
        (&fx.rate).into(),
        (&fx.date).into(),
        now_ms.into(),
    ]
}

/// The finished conversion's columns: [`finish`]'s first half; whether the order has adjustments.
fn store_result(
    conn: &impl AsConn,
    conversion_id: &str,
    a: &Attribution,
    fx: &Reported,
    now_ms: i64,
) -> Result<bool> {
    // One statement, so that the report's rollup trigger moves the conversion once (docs/decisions.md §11).
    let adjusted = conn.conn().query_opt(
        concat!(
            store_result_set!(),
            " WHERE id = ?1 RETURNING adjusted <> 0"
        ),
        &result_args(conversion_id, a, fx, now_ms),
        |r| r.get(0),
    )?;
    Ok(adjusted.unwrap_or(false))
}

/// Deletes a finished item's outbox row, claimed by the caller in this transaction.
fn done(conn: &impl AsConn, item_id: i64) -> Result<()> {
    let deleted = conn
        .conn()
        .execute("DELETE FROM outbox WHERE id = ?1", args![item_id])?;
    if deleted != 1 {
        // The caller claimed the item in this transaction; anything else would be a double.
        return Err(super::StoreError::Other(format!(
            "outbox item {item_id} vanished while being processed"
        )));
    }
    Ok(())
}

/// Stores the attribution, marks the conversion `fx_pending` and parks its item until rates
/// arrive, with `reason` (which rate is missing) for the order status to show. Not a failed try:
/// `attempts` and `last_error` stay.
pub fn park(
    conn: &impl AsConn,
    item_id: i64,
    conversion_id: &str,
    a: &Attribution,
    reason: &str,
) -> Result<()> {
    store_attribution(conn, conversion_id, a, "fx_pending")?;
    conn.conn().execute(
        "UPDATE outbox SET next_attempt_at = NULL, parked_reason = ?2 WHERE id = ?1",
        args![item_id, reason],
    )?;
    Ok(())
}

/// Makes every parked item due at `now` (after a rates import); returns how many.
pub fn unpark(conn: &impl AsConn, now_ms: i64) -> Result<usize> {
    let n = conn.conn().execute(
        "UPDATE outbox SET next_attempt_at = ?1 WHERE next_attempt_at IS NULL AND dead_at IS NULL",
        args![now_ms],
    )?;
    Ok(n as usize)
}

/// Records a failed try and when to try again.
pub fn retry_later(
    conn: &impl AsConn,
    item_id: i64,
    attempts: i64,
    next_at: i64,
    error: &str,
) -> Result<()> {
    conn.conn().execute(
        "UPDATE outbox SET attempts = ?2, next_attempt_at = ?3, last_error = ?4 WHERE id = ?1",
        args![item_id, attempts, next_at, error],
    )?;
    Ok(())
}

/// Gives up on an item: it stays in the outbox as a dead letter with its last error, and its
/// conversion shows `failed`.
pub fn dead_letter(
    conn: &impl AsConn,
    item_id: i64,
    conversion_id: &str,
    attempts: i64,
    error: &str,
    now_ms: i64,
) -> Result<()> {
    let conn = conn.conn();
    conn.execute(
        "UPDATE outbox SET attempts = ?2, last_error = ?3, dead_at = ?4 WHERE id = ?1",
        args![item_id, attempts, error, now_ms],
    )?;
    conn.execute(
        "UPDATE conversions SET status = 'failed' WHERE id = ?1",
        args![conversion_id],
    )?;
    Ok(())
}

/// An item's bookkeeping, for the status view, operators and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemState {
    pub attempts: i64,
    pub next_attempt_at: Option<i64>,
    pub last_error: Option<String>,
    pub dead_at: Option<i64>,
}

/// The outbox row of a conversion; `None` once it has been processed.
pub fn item_state(conn: &impl AsConn, conversion_id: &str) -> Result<Option<ItemState>> {
    conn.conn().query_opt(
        "SELECT attempts, next_attempt_at, last_error, dead_at FROM outbox WHERE conversion_id = ?1",
        args![conversion_id],
        |r| {
            Ok(ItemState {
                attempts: r.get(0)?,
                next_attempt_at: r.get(1)?,
                last_error: r.get(2)?,
                dead_at: r.get(3)?,
            })
        },
    )
}
