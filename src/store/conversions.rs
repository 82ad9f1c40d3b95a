//! The `conversions` table and its `outbox` rows: one conversion per (site, orderId), whichever
//! source reported it first, and the pipeline's work item written in the same transaction.

use rusqlite::{params, Connection, OptionalExtension};

use super::pipeline::{Attribution, Reported};
use super::Result;

/// Where a conversion report came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Api,
    Pixel,
}

impl Source {
    fn column(self) -> &'static str {
        match self {
            Source::Api => "source_api",
            Source::Pixel => "source_pixel",
        }
    }
}

/// A conversion as reported and stored: what a report writes, and what the pipeline reads back to
/// attribute and convert it. Which source reported it is not part of it: a stored conversion may
/// have been reported by both (see [`Source`]).
#[derive(Debug, Clone)]
pub struct Conversion {
    pub id: String,
    pub site_id: String,
    pub order_id: Option<String>,
    pub kind: String,
    pub session_id: String,
    pub visitor_id: String,
    pub client_id: Option<String>,
    /// Decimal text in `currency`.
    pub value: Option<String>,
    pub currency: String,
    pub occurred_at: i64,
}

/// The outcome of recording a report: the conversion it now belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub event_id: String,
    pub session_id: String,
    /// False when the order was already known (a repeat or the other source's report).
    pub created: bool,
}

/// An existing conversion for (site, orderId): its id, session, and whether `source` already reported it.
pub fn find_order(
    conn: &Connection,
    site_id: &str,
    order_id: &str,
    source: Source,
) -> Result<Option<(Recorded, bool)>> {
    // One literal per source: the statement cache is keyed by the SQL text, and this runs for
    // every report.
    let sql = match source {
        Source::Api => {
            "SELECT id, session_id, source_api FROM conversions WHERE site_id = ?1 AND order_id = ?2"
        }
        Source::Pixel => {
            "SELECT id, session_id, source_pixel FROM conversions WHERE site_id = ?1 AND order_id = ?2"
        }
    };
    Ok(conn
        .prepare_cached(sql)?
        .query_row(params![site_id, order_id], |r| {
            Ok((
                Recorded {
                    event_id: r.get(0)?,
                    session_id: r.get(1)?,
                    created: false,
                },
                r.get::<_, bool>(2)?,
            ))
        })
        .optional()?)
}

/// Records `source`'s report inside the caller's write transaction: a new conversion plus its outbox
/// row, or, for a known order, just the repeat's source on the existing conversion.
pub fn record(conn: &Connection, c: &Conversion, source: Source, now_ms: i64) -> Result<Recorded> {
    if let Some(order_id) = &c.order_id {
        if let Some(existing) = add_source(conn, &c.site_id, order_id, source)? {
            return Ok(existing);
        }
    }
    conn.prepare_cached(
        "INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id, client_id, value,
            currency, occurred_at, created_at, source_api, source_pixel)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?
    .execute(params![
        c.id,
        c.site_id,
        c.order_id,
        c.kind,
        c.session_id,
        c.visitor_id,
        c.client_id,
        c.value,
        c.currency,
        c.occurred_at,
        now_ms,
        source == Source::Api,
        source == Source::Pixel,
    ])?;
    conn.prepare_cached(
        "INSERT INTO outbox (conversion_id, next_attempt_at, created_at) VALUES (?1, ?2, ?2)",
    )?
    .execute(params![c.id, now_ms])?;
    Ok(Recorded {
        event_id: c.id.clone(),
        session_id: c.session_id.clone(),
        created: true,
    })
}

/// A [`Conversion`] from the first ten columns of a row: `conversions.id, site_id, order_id, type,
/// session_id, visitor_id, client_id, value, currency, occurred_at`.
fn conversion(r: &rusqlite::Row<'_>) -> rusqlite::Result<Conversion> {
    Ok(Conversion {
        id: r.get(0)?,
        site_id: r.get(1)?,
        order_id: r.get(2)?,
        kind: r.get(3)?,
        session_id: r.get(4)?,
        visitor_id: r.get(5)?,
        client_id: r.get(6)?,
        value: r.get(7)?,
        currency: r.get(8)?,
        occurred_at: r.get(9)?,
    })
}

/// The conversion `id`, as the pipeline reads it back; `None` when there is none.
pub fn by_id(conn: &Connection, id: &str) -> Result<Option<Conversion>> {
    Ok(conn
        .prepare_cached(
            "SELECT id, site_id, order_id, type, session_id, visitor_id, client_id, value, currency,
                    occurred_at
             FROM conversions WHERE id = ?1",
        )?
        .query_row([id], conversion)
        .optional()?)
}

/// Outbox rows waiting (dead letters excluded), and dead letters.
pub fn outbox_counts(conn: &Connection) -> Result<(i64, i64)> {
    Ok(conn
        .prepare_cached("SELECT COUNT(*) - COUNT(dead_at), COUNT(dead_at) FROM outbox")?
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?)
}

/// Outbox rows waiting (dead letters excluded), counted up to `cap` only: the writer calls this
/// after every commit to enforce the backlog limit, so its cost must stay bounded.
pub fn outbox_waiting_capped(conn: &Connection, cap: u64) -> Result<u64> {
    Ok(conn
        .prepare_cached(
            "SELECT COUNT(*) FROM (SELECT 1 FROM outbox WHERE dead_at IS NULL LIMIT ?1)",
        )?
        .query_row([cap.min(i64::MAX as u64) as i64], |r| r.get::<_, i64>(0))?
        .max(0) as u64)
}

/// Records `source` on an existing order; `None` when the site has no such order.
pub fn add_source(
    conn: &Connection,
    site_id: &str,
    order_id: &str,
    source: Source,
) -> Result<Option<Recorded>> {
    let Some((rec, seen)) = find_order(conn, site_id, order_id, source)? else {
        return Ok(None);
    };
    if !seen {
        conn.prepare_cached(&format!(
            "UPDATE conversions SET {} = 1 WHERE id = ?1",
            source.column()
        ))?
        .execute([&rec.event_id])?;
    }
    Ok(Some(rec))
}

/// One order as its status view shows it: the conversion, its pipeline result and its outbox
/// bookkeeping. Money and rates stay the decimal text they are stored as.
#[derive(Debug, Clone)]
pub struct OrderStatus {
    pub conversion: Conversion,
    /// Whether the pixel reported the order.
    pub by_pixel: bool,
    /// Whether the API reported the order.
    pub by_api: bool,
    /// `pending`, `processed`, `fx_pending` or `failed`.
    pub status: String,
    /// The currency conversion (all `None` until processed, and for a conversion without a value).
    pub fx: Reported,
    /// `None` until the pipeline has attributed the conversion.
    pub attribution: Option<Attribution>,
    pub processed_at: Option<i64>,
    /// Failed pipeline tries so far (0 once processed), and the last one's error (kept on a dead
    /// letter).
    pub attempts: i64,
    pub last_error: Option<String>,
}

/// The columns [`status_row`] reads, from `conversions LEFT JOIN outbox`.
pub(super) const STATUS_COLUMNS: &str =
    "conversions.id, site_id, order_id, type, session_id, visitor_id, client_id, value,
     currency, occurred_at,
     source_pixel, source_api, status, reporting_value, reporting_currency, fx_rate,
     fx_date, attr_model, attr_session_id, attr_source, attr_medium, attr_campaign,
     processed_at, outbox.attempts, outbox.last_error";

/// An [`OrderStatus`] from a row of [`STATUS_COLUMNS`].
pub(super) fn status_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<OrderStatus> {
    let attribution = match r.get::<_, Option<String>>(17)? {
        Some(model) => Some(Attribution {
            model,
            session_id: r.get(18)?,
            source: r.get(19)?,
            medium: r.get(20)?,
            campaign: r.get(21)?,
        }),
        None => None,
    };
    Ok(OrderStatus {
        conversion: conversion(r)?,
        by_pixel: r.get(10)?,
        by_api: r.get(11)?,
        status: r.get(12)?,
        fx: Reported {
            value: r.get(13)?,
            currency: r.get(14)?,
            rate: r.get(15)?,
            date: r.get(16)?,
        },
        attribution,
        processed_at: r.get(22)?,
        attempts: r.get::<_, Option<i64>>(23)?.unwrap_or(0),
        last_error: r.get(24)?,
    })
}

/// The order `order_id` of a site; `None` when the site has no such order.
pub fn order_status(
    conn: &Connection,
    site_id: &str,
    order_id: &str,
) -> Result<Option<OrderStatus>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {STATUS_COLUMNS}
             FROM conversions LEFT JOIN outbox ON outbox.conversion_id = conversions.id
             WHERE site_id = ?1 AND order_id = ?2"
        ))?
        .query_row(params![site_id, order_id], status_row)
        .optional()?)
}
