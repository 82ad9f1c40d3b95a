//! The `conversions` table and its `outbox` rows: one conversion per (site, orderId), whichever
//! source reported it first, and the pipeline's work item written in the same transaction.

use rusqlite::{params, Connection, OptionalExtension};

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

#[derive(Debug, Clone)]
pub struct NewConversion {
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
    pub source: Source,
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

/// Records a report inside the caller's write transaction: a new conversion plus its outbox row, or,
/// for a known order, just the repeat's source on the existing conversion.
pub fn record(conn: &Connection, c: &NewConversion, now_ms: i64) -> Result<Recorded> {
    if let Some(order_id) = &c.order_id {
        if let Some((existing, seen)) = find_order(conn, &c.site_id, order_id, c.source)? {
            if !seen {
                conn.prepare_cached(&format!(
                    "UPDATE conversions SET {} = 1 WHERE id = ?1",
                    c.source.column()
                ))?
                .execute([&existing.event_id])?;
            }
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
        c.source == Source::Api,
        c.source == Source::Pixel,
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

/// The public view of one order (`GET /api/sites/{siteId}/conversions/{orderId}`).
pub fn status(
    conn: &Connection,
    site_id: &str,
    order_id: &str,
) -> Result<Option<serde_json::Value>> {
    use serde_json::json;
    let number = |s: Option<String>| -> serde_json::Value {
        s.and_then(|t| serde_json::from_str::<serde_json::Number>(&t).ok())
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::Null)
    };
    Ok(conn
        .prepare_cached(
            "SELECT conversions.id, order_id, type, session_id, source_pixel, source_api, status, value, currency,
                    reporting_value, reporting_currency, fx_rate, fx_date, attr_model, attr_session_id,
                    attr_source, attr_medium, attr_campaign, occurred_at, processed_at,
                    outbox.attempts, outbox.last_error
             FROM conversions LEFT JOIN outbox ON outbox.conversion_id = conversions.id
             WHERE site_id = ?1 AND order_id = ?2",
        )?
        .query_row(params![site_id, order_id], |r| {
            let mut sources = Vec::new();
            if r.get::<_, bool>(4)? {
                sources.push("pixel");
            }
            if r.get::<_, bool>(5)? {
                sources.push("api");
            }
            let model: Option<String> = r.get(13)?;
            let attribution = match model {
                Some(model) => json!({
                    "model": model,
                    "sessionId": r.get::<_, Option<String>>(14)?,
                    "source": r.get::<_, Option<String>>(15)?,
                    "medium": r.get::<_, Option<String>>(16)?,
                    "campaign": r.get::<_, Option<String>>(17)?,
                }),
                None => serde_json::Value::Null,
            };
            Ok(json!({
                "eventId": r.get::<_, String>(0)?,
                "orderId": r.get::<_, String>(1)?,
                "type": r.get::<_, String>(2)?,
                "sessionId": r.get::<_, String>(3)?,
                "sources": sources,
                "status": r.get::<_, String>(6)?,
                "value": number(r.get(7)?),
                "currency": r.get::<_, String>(8)?,
                "reportingValue": number(r.get(9)?),
                "reportingCurrency": r.get::<_, Option<String>>(10)?,
                "fxRate": number(r.get(11)?),
                "fxDate": r.get::<_, Option<String>>(12)?,
                "attribution": attribution,
                "occurredAt": super::iso(r.get(18)?),
                "processedAt": r.get::<_, Option<i64>>(19)?.map(super::iso),
                // Failed pipeline tries so far, and the last one's error (kept on a dead letter).
                "attempts": r.get::<_, Option<i64>>(20)?.unwrap_or(0),
                "lastError": r.get::<_, Option<String>>(21)?,
            }))
        })
        .optional()?)
}
