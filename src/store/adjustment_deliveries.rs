//! The `adjustment_deliveries` table: one row per adjustment of an order (refund, cancel,
//! restate) and destination of its site (docs/decisions.md §13, "Adjustments"), written in the
//! transaction that records the adjustment ([`enqueue`]) and drained by the sender
//! (`forward/adjust.rs`).
//!
//! A row is due (`deliveries::ADJUSTMENT_DUE`) at its `next_attempt_at` once the order's own delivery to that
//! destination is no longer pending and the order's earlier adjustments to it are settled, so an
//! order's adjustments reach a platform one after the other, in the order they arrived. Its
//! statuses are those of `deliveries`, plus `not_supported`: the platform has no way to adjust a
//! conversion ([`NOT_SUPPORTED`]), written at once. Every outcome is written only over a
//! `pending` row. Written once for both engines (`engine/mod.rs`).

use super::deliveries::{Status, View, ADJUSTMENT_DUE as DUE};
use super::dialect::Statement;
use std::collections::HashMap;

use super::engine::{args, AsConn, Row};
use super::{Result, StoreError};

/// The stored status of an adjustment's delivery to a platform that cannot adjust a conversion.
pub const NOT_SUPPORTED_STATUS: &str = "not_supported";

/// The kind of destination whose platform has no way to adjust a conversion, and what its
/// adjustment deliveries say.
pub const NOT_SUPPORTED: (&str, &str) = (
    "meta",
    "Meta's Conversions API has no way to change or retract a conversion: refunds, cancels and \
     restates are not passed on to Meta",
);

/// Why an adjustment of a test order is `skipped` at every destination: it never goes to a live
/// endpoint, and it is not sent to a test one either.
pub const TEST_ORDER: &str = "test order: its refunds, cancels and restates are not passed on \
    (a test order reaches the platforms only as a test send of the order itself)";

/// Writes one delivery of the adjustment `adjustment_id` of conversion `conversion_id` of site `site_id`
/// for each enabled destination of the site that receives the order's type: pending and due at
/// once, or `not_supported` for [`NOT_SUPPORTED`]'s kind. Runs in the transaction that records the
/// adjustment. Returns how many.
pub fn enqueue(
    conn: &impl AsConn,
    site_id: &str,
    conversion_id: &str,
    adjustment_id: &str,
    now_ms: i64,
) -> Result<u64> {
    static SQL: Statement = Statement::new();
    let sql = SQL.get(conn, |d| {
        let json_has_key = d.json_has_key("d.events", "c.type");
        format!(
            "INSERT INTO adjustment_deliveries (adjustment_id, conversion_id, destination_id,
                 status, next_attempt_at, last_error, created_at)
             SELECT a.id, a.conversion_id, d.id,
                 CASE WHEN d.kind = ?4 THEN 'not_supported' WHEN c.test <> 0 THEN 'skipped'
                     ELSE 'pending' END,
                 CASE WHEN d.kind = ?4 OR c.test <> 0 THEN NULL ELSE CAST(?6 AS BIGINT) END,
                 CASE WHEN d.kind = ?4 THEN CAST(?5 AS TEXT)
                     WHEN c.test <> 0 THEN CAST(?7 AS TEXT) ELSE NULL END,
                 ?6
             FROM adjustments a JOIN conversions c ON c.id = a.conversion_id
             JOIN destinations d ON d.site_id = a.site_id
             WHERE a.site_id = ?1 AND a.conversion_id = ?2 AND a.adjustment_id = ?3
               AND d.enabled = 1 AND {json_has_key}
             ON CONFLICT DO NOTHING"
        )
    });
    conn.conn().execute(
        sql,
        args![
            site_id,
            conversion_id,
            adjustment_id,
            NOT_SUPPORTED.0,
            NOT_SUPPORTED.1,
            now_ms,
            TEST_ORDER
        ],
    )
}

/// A pending adjustment delivery as the sender lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub id: i64,
    /// The `adjustments` row.
    pub adjustment: i64,
    pub conversion_id: String,
    /// Tries so far that counted.
    pub attempts: i64,
}

/// Up to `limit` adjustment deliveries of a destination due at `now`, oldest due first.
pub fn due(
    conn: &impl AsConn,
    destination_id: &str,
    now_ms: i64,
    limit: usize,
) -> Result<Vec<Due>> {
    conn.conn().query_all(
        &format!(
            "SELECT x.id, x.adjustment_id, x.conversion_id, x.attempts FROM adjustment_deliveries x
             WHERE x.destination_id = ?1 AND x.status = 'pending' AND x.next_attempt_at <= ?2
               AND {DUE}
             ORDER BY x.next_attempt_at, x.id LIMIT ?3"
        ),
        args![destination_id, now_ms, limit as i64],
        |r| {
            Ok(Due {
                id: r.get(0)?,
                adjustment: r.get(1)?,
                conversion_id: r.get(2)?,
                attempts: r.get(3)?,
            })
        },
    )
}

/// Everything the sender reads of one adjustment delivery besides the conversion's facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdjustmentFacts {
    /// `refund`, `cancel` or `restate`.
    pub kind: String,
    pub adjustment_id: String,
    pub occurred_at: i64,
    /// The order's net value once this adjustment was admitted (decimal text).
    pub net_after: String,
    /// The order's net value before it, by arrival: the previous adjustment's answer, else the
    /// reported value (`None`: no value reported).
    pub net_before: Option<String>,
    /// The order's delivery to the destination: status, last error, when delivered (`None`: it
    /// has none).
    pub order_delivery: Option<(String, Option<String>, Option<i64>)>,
    /// The conversion's status (`queued` or `fx_pending` while the pipeline has not processed it).
    pub conversion_status: String,
    /// The latest adjustment time sent for the order's earlier adjustments to the destination.
    pub last_sent_time: Option<i64>,
}

/// The facts of the adjustment delivery `d` to `destination_id` (`None`: deleted since).
pub fn facts(conn: &impl AsConn, destination_id: &str, d: &Due) -> Result<Option<AdjustmentFacts>> {
    let conn = conn.conn();
    let row = conn.query_opt(
        "SELECT a.type, a.adjustment_id, a.occurred_at, a.answer_net, c.status,
             COALESCE((SELECT p.answer_net FROM adjustments p
                       WHERE p.conversion_id = a.conversion_id AND p.id < a.id
                       ORDER BY p.id DESC LIMIT 1), c.value)
         FROM adjustments a JOIN conversions c ON c.id = a.conversion_id WHERE a.id = ?1",
        args![d.adjustment],
        |r| {
            Ok((
                r.get::<String>(0)?,
                r.get::<String>(1)?,
                r.get::<i64>(2)?,
                r.get::<String>(3)?,
                r.get::<String>(4)?,
                r.get::<Option<String>>(5)?,
            ))
        },
    )?;
    let Some((kind, adjustment_id, occurred_at, net_after, conversion_status, net_before)) = row
    else {
        return Ok(None);
    };
    let order_delivery = conn.query_opt(
        "SELECT status, last_error, delivered_at FROM deliveries
         WHERE destination_id = ?1 AND conversion_id = ?2",
        args![destination_id, &d.conversion_id],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    let last_sent_time = conn
        .query_opt(
            "SELECT MAX(sent_time) FROM adjustment_deliveries
             WHERE conversion_id = ?1 AND destination_id = ?2 AND adjustment_id < ?3",
            args![&d.conversion_id, destination_id, d.adjustment],
            |r| r.get::<Option<i64>>(0),
        )?
        .flatten();
    Ok(Some(AdjustmentFacts {
        kind,
        adjustment_id,
        occurred_at,
        net_after,
        net_before,
        order_delivery,
        conversion_status,
        last_sent_time,
    }))
}

/// Marks a pending adjustment delivery delivered (`note`: what the platform said, when it took it
/// as already done); `false` when it was not pending any more.
pub fn delivered(
    conn: &impl AsConn,
    id: i64,
    attempts: i64,
    sent_time: Option<i64>,
    note: Option<&str>,
    now_ms: i64,
) -> Result<bool> {
    Ok(conn.conn().execute(
        "UPDATE adjustment_deliveries SET status = 'delivered', attempts = ?2, delivered_at = ?3,
             sent_time = ?4, next_attempt_at = NULL, last_error = ?5
         WHERE id = ?1 AND status = 'pending'",
        args![id, attempts, now_ms, sent_time, note],
    )? == 1)
}

/// Reschedules a pending adjustment delivery: after a failed try, or held until the platform
/// takes it.
pub fn retry(
    conn: &impl AsConn,
    id: i64,
    attempts: i64,
    next_at: i64,
    error: &str,
) -> Result<bool> {
    Ok(conn.conn().execute(
        "UPDATE adjustment_deliveries SET attempts = ?2, next_attempt_at = ?3, last_error = ?4
         WHERE id = ?1 AND status = 'pending'",
        args![id, attempts, next_at, error],
    )? == 1)
}

/// Moves a pending adjustment delivery to a final status (`failed`, `too_old`, `skipped`,
/// `not_supported`) with its reason, and the adjustment time sent, if it was sent.
pub fn finish(
    conn: &impl AsConn,
    id: i64,
    status: &str,
    attempts: i64,
    sent_time: Option<i64>,
    reason: &str,
) -> Result<bool> {
    debug_assert!(
        status == NOT_SUPPORTED_STATUS
            || matches!(
                Status::parse(status),
                Some(Status::Failed | Status::TooOld | Status::Skipped)
            )
    );
    Ok(conn.conn().execute(
        "UPDATE adjustment_deliveries SET status = ?2, attempts = ?3, last_error = ?4,
             next_attempt_at = NULL, sent_time = COALESCE(?5, sent_time)
         WHERE id = ?1 AND status = 'pending'",
        args![id, status, attempts, reason, sent_time],
    )? == 1)
}

/// The deliveries of a conversion's adjustments, each with its `adjustments` row id, in the order
/// its destinations were made.
pub fn of_conversion(conn: &impl AsConn, conversion_id: &str) -> Result<Vec<(i64, View)>> {
    conn.conn().query_all(
        "SELECT x.adjustment_id, d.id, d.name, d.kind, x.status, x.attempts, x.last_error,
             x.next_attempt_at, x.delivered_at
         FROM adjustment_deliveries x JOIN destinations d ON d.id = x.destination_id
         WHERE x.conversion_id = ?1 ORDER BY x.adjustment_id, d.created_at, d.id",
        args![conversion_id],
        |r| Ok((r.get(0)?, view(r, 1)?)),
    )
}

/// The adjustment deliveries of the conversions of `site_id` that occurred in `[from_ms, to_ms)`,
/// by conversion id, as [`of_conversion`] gives each (what an export shows beside each ledger).
pub fn of_site_between(
    conn: &impl AsConn,
    site_id: &str,
    from_ms: i64,
    to_ms: i64,
) -> Result<HashMap<String, Vec<(i64, View)>>> {
    let mut out: HashMap<String, Vec<(i64, View)>> = HashMap::new();
    conn.conn().query_each(
        "SELECT x.adjustment_id, d.id, d.name, d.kind, x.status, x.attempts, x.last_error,
             x.next_attempt_at, x.delivered_at, x.conversion_id
         FROM adjustment_deliveries x JOIN destinations d ON d.id = x.destination_id
         JOIN conversions c ON c.id = x.conversion_id
         WHERE c.site_id = ?1 AND c.occurred_at >= ?2 AND c.occurred_at < ?3
         ORDER BY x.conversion_id, x.adjustment_id, d.created_at, d.id",
        args![site_id, from_ms, to_ms],
        |r| {
            let conversion_id: String = r.get(9)?;
            out.entry(conversion_id)
                .or_default()
                .push((r.get(0)?, view(r, 1)?));
            Ok::<_, StoreError>(())
        },
    )?;
    Ok(out)
}

/// A [`View`] from the row's columns from `at` on: destination id, name, kind, status, attempts,
/// last error, next attempt, delivered at.
fn view(r: &Row, at: usize) -> Result<View> {
    Ok(View {
        destination_id: r.get(at)?,
        destination: r.get(at + 1)?,
        kind: r.get(at + 2)?,
        status: r.get(at + 3)?,
        attempts: r.get(at + 4)?,
        last_error: r.get(at + 5)?,
        next_attempt_at: r.get(at + 6)?,
        delivered_at: r.get(at + 7)?,
    })
}
