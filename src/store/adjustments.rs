//! The `adjustments` table: each order's ledger of refunds, cancels and restates
//! (docs/decisions/api.md, "Adjustments"). A new adjustment is decided inside the writer's
//! transaction with the order's row locked ([`record`]), so that concurrent adjustments of one
//! order, from one node or several, are decided one after the other on the ledger as it is.

use std::str::FromStr;

use rust_decimal::Decimal;

use super::dialect::Statement;
use super::engine::{args, AsConn, Row};
use super::{Result, StoreError};
use crate::ledger::{self, Entry, Kind, Net, Refusal};

/// One stored adjustment, as the status lookup shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adjustment {
    pub adjustment_id: String,
    /// `refund`, `cancel` or `restate`.
    pub kind: String,
    /// Decimal text in `currency`; `None` for a cancel.
    pub value: Option<String>,
    pub currency: String,
    pub occurred_at: i64,
    pub received_at: i64,
    pub reason: Option<String>,
    /// The arrival order (the row id).
    pub arrival: i64,
}

impl Adjustment {
    /// The ledger's view of it; `None` when its stored text is not what was written.
    pub(in crate::store) fn entry(&self) -> Result<Entry> {
        let kind = Kind::parse(&self.kind)
            .ok_or_else(|| StoreError::Other(format!("unknown adjustment type {:?}", self.kind)))?;
        Ok(Entry {
            kind,
            value: self.value.as_deref().map(decimal).transpose()?,
            occurred_at: self.occurred_at,
            arrival: self.arrival,
        })
    }
}

fn decimal(text: &str) -> Result<Decimal> {
    Decimal::from_str(text.trim())
        .map_err(|_| StoreError::Other(format!("{text:?} is not a decimal number")))
}

const COLUMNS: &str = "adjustment_id, type, value, currency, occurred_at, received_at, reason, id";

fn adjustment(r: &Row) -> Result<Adjustment> {
    Ok(Adjustment {
        adjustment_id: r.get(0)?,
        kind: r.get(1)?,
        value: r.get(2)?,
        currency: r.get(3)?,
        occurred_at: r.get(4)?,
        received_at: r.get(5)?,
        reason: r.get(6)?,
        arrival: r.get(7)?,
    })
}

/// The ledger of conversion `conversion_id`, in `occurredAt` order (ties: arrival).
pub fn of_conversion(conn: &impl AsConn, conversion_id: &str) -> Result<Vec<Adjustment>> {
    conn.conn().query_all(
        &format!(
            "SELECT {COLUMNS} FROM adjustments WHERE conversion_id = ?1 ORDER BY occurred_at, id"
        ),
        args![conversion_id],
        adjustment,
    )
}

/// The net value and state of an order reported at `value` (decimal text; `None` counts as 0)
/// with the ledger `adjustments`.
pub fn net_of(value: Option<&str>, adjustments: &[Adjustment]) -> Result<Net> {
    let reported = value.map(decimal).transpose()?.unwrap_or(Decimal::ZERO);
    let entries = adjustments
        .iter()
        .map(Adjustment::entry)
        .collect::<Result<Vec<_>>>()?;
    Ok(ledger::net(reported, &entries))
}

/// [`net_of`] for a view of the order: `None` when the reported value is not a decimal (a broken
/// row, which the pipeline dead-letters) and the ledger is empty, so that the order still shows.
pub fn net_shown(value: Option<&str>, adjustments: &[Adjustment]) -> Result<Option<Net>> {
    match net_of(value, adjustments) {
        Ok(net) => Ok(Some(net)),
        Err(_) if adjustments.is_empty() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The adjustments of the conversions of `site_id` that occurred in `[from_ms, to_ms)`, by
/// conversion id, each ledger in `occurredAt` order: what an export of those conversions shows
/// beside each (one entry per adjustment in memory, never one per conversion).
pub fn of_site_between(
    conn: &impl AsConn,
    site_id: &str,
    from_ms: i64,
    to_ms: i64,
) -> Result<std::collections::HashMap<String, Vec<Adjustment>>> {
    let mut out: std::collections::HashMap<String, Vec<Adjustment>> = Default::default();
    conn.conn().query_each(
        "SELECT a.adjustment_id, a.type, a.value, a.currency, a.occurred_at, a.received_at,
                a.reason, a.id, a.conversion_id
         FROM adjustments a JOIN conversions c ON c.id = a.conversion_id
         WHERE c.site_id = ?1 AND c.occurred_at >= ?2 AND c.occurred_at < ?3
         ORDER BY a.conversion_id, a.occurred_at, a.id",
        args![site_id, from_ms, to_ms],
        |r| {
            let conversion_id: String = r.get(8)?;
            out.entry(conversion_id).or_default().push(adjustment(r)?);
            Ok::<_, StoreError>(())
        },
    )?;
    Ok(out)
}

/// Conversion ids one query of [`of_conversions`] asks for: a page of a list in one query, and one
/// statement text whatever the count (PostgreSQL keeps each text it prepared), the last ids
/// repeated to fill it.
pub const IDS_PER_QUERY: usize = 100;

/// The ledgers of the conversions `conversion_ids` (a page of a list, a download's rows), by
/// conversion id, each in `occurredAt` order: one query per [`IDS_PER_QUERY`] ids, none for none.
pub fn of_conversions(
    conn: &impl AsConn,
    conversion_ids: &[&str],
) -> Result<std::collections::HashMap<String, Vec<Adjustment>>> {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let sql = SQL.get_or_init(|| {
        let placeholders = (1..=IDS_PER_QUERY)
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "SELECT {COLUMNS}, conversion_id FROM adjustments
             WHERE conversion_id IN ({placeholders})
             ORDER BY conversion_id, occurred_at, id"
        )
    });
    let mut out: std::collections::HashMap<String, Vec<Adjustment>> = Default::default();
    for chunk in conversion_ids.chunks(IDS_PER_QUERY) {
        let last = chunk[chunk.len() - 1];
        let values: Vec<super::engine::Value> = (0..IDS_PER_QUERY)
            .map(|i| super::engine::Value::from(chunk.get(i).copied().unwrap_or(last)))
            .collect();
        conn.conn().query_each(sql, &values, |r| {
            let conversion_id: String = r.get(8)?;
            out.entry(conversion_id).or_default().push(adjustment(r)?);
            Ok::<_, StoreError>(())
        })?;
    }
    Ok(out)
}

/// A new adjustment as the request gave it, its fields checked one by one already.
#[derive(Debug, Clone)]
pub struct NewAdjustment {
    pub site_id: String,
    pub order_id: String,
    pub adjustment_id: String,
    pub kind: Kind,
    /// Decimal text; `None` for a cancel.
    pub value: Option<Decimal>,
    /// `None`: the order's.
    pub currency: Option<String>,
    /// `None`: the time of the call, or the order's `occurredAt` if that is later.
    pub occurred_at: Option<i64>,
    pub reason: Option<String>,
}

/// What an adjustment was answered: the order's event id, its net value and state then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub event_id: String,
    pub net_value: String,
    pub state: String,
}

/// What [`record`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// Stored; the order's net value and state now.
    Accepted(Answer),
    /// The same adjustment again: nothing changed, the first answer.
    Repeat(Answer),
    /// No conversion with that orderId on the site.
    OrderNotFound,
    /// A field does not fit the order: `(field, message)`.
    Invalid(&'static str, String),
    /// The adjustmentId was used with another type, value or currency.
    Conflict,
    Refused(Refusal),
}

/// The order an adjustment is for, its row locked until the transaction ends.
struct Order {
    id: String,
    value: Option<String>,
    currency: String,
    occurred_at: i64,
}

fn lock_order(
    conn: &impl AsConn,
    site_id: &str,
    order_id: &str,
    test: bool,
) -> Result<Option<Order>> {
    static SQL: Statement = Statement::new();
    let sql = SQL.get(conn, |d| {
        let for_update = d.for_update();
        format!(
            "SELECT id, value, currency, occurred_at FROM conversions
             WHERE site_id = ?1 AND test = ?3 AND order_id = ?2{for_update}"
        )
    });
    conn.conn()
        .query_opt(sql, args![site_id, order_id, i64::from(test)], |r| {
            Ok(Order {
                id: r.get(0)?,
                value: r.get(1)?,
                currency: r.get(2)?,
                occurred_at: r.get(3)?,
            })
        })
}

/// The currency and the ledger of the live order `order_id` of `site_id` (`None`: no such order),
/// its row locked until the caller's write transaction ends, as [`record`] locks it: what the
/// caller decides from the ledger holds until it records its adjustments, whatever another node
/// records meanwhile (SQLite's one writer gives the same).
pub fn locked_ledger(
    conn: &impl AsConn,
    site_id: &str,
    order_id: &str,
) -> Result<Option<(String, Vec<Adjustment>)>> {
    let Some(order) = lock_order(conn, site_id, order_id, false)? else {
        return Ok(None);
    };
    Ok(Some((order.currency, of_conversion(conn, &order.id)?)))
}

/// Records `a` inside the caller's write transaction, after the checks that need the order, in
/// this order: no such order; currency other than the order's, or occurredAt before the order's;
/// the adjustmentId already used (the same type, value and currency again: a repeat, answered as
/// the first time; else a conflict); the order cancelled; the net value below 0 at some point.
/// Nothing is written unless it is accepted.
pub fn record(conn: &impl AsConn, a: &NewAdjustment, now_ms: i64) -> Result<Recorded> {
    record_in(conn, a, false, now_ms)
}

/// [`record`] for an order among the site's test orders (`test`, a test key's adjustment) or its
/// live ones: an adjustment never reaches the other mode's order of the same orderId.
pub fn record_in(
    conn: &impl AsConn,
    a: &NewAdjustment,
    test: bool,
    now_ms: i64,
) -> Result<Recorded> {
    let Some(order) = lock_order(conn, &a.site_id, &a.order_id, test)? else {
        return Ok(Recorded::OrderNotFound);
    };
    if let Some(c) = &a.currency {
        if *c != order.currency {
            return Ok(Recorded::Invalid(
                "currency",
                format!(
                    "currency must be the order's currency, {}, or absent",
                    order.currency
                ),
            ));
        }
    }
    let occurred_at = match a.occurred_at {
        Some(t) if t < order.occurred_at => {
            return Ok(Recorded::Invalid(
                "occurredAt",
                format!(
                    "occurredAt must not be before the order's occurredAt, {}",
                    super::iso(order.occurred_at)
                ),
            ))
        }
        Some(t) => t,
        None => now_ms.max(order.occurred_at),
    };
    let ledger = of_conversion(conn, &order.id)?;
    if let Some(first) = ledger.iter().find(|x| x.adjustment_id == a.adjustment_id) {
        let same_value = match (&first.value, &a.value) {
            (None, None) => true,
            (Some(t), Some(v)) => decimal(t)? == *v,
            _ => false,
        };
        if first.kind != a.kind.as_str() || !same_value {
            return Ok(Recorded::Conflict);
        }
        return answered(conn, &order.id, &a.adjustment_id).map(Recorded::Repeat);
    }
    let reported = order
        .value
        .as_deref()
        .map(decimal)
        .transpose()?
        .unwrap_or(Decimal::ZERO);
    let entries = ledger
        .iter()
        .map(Adjustment::entry)
        .collect::<Result<Vec<_>>>()?;
    let new = Entry {
        kind: a.kind,
        value: a.value,
        occurred_at,
        // After every stored one: it arrives last.
        arrival: i64::MAX,
    };
    let net = match ledger::admit(reported, &entries, new) {
        Ok(net) => net,
        Err(refusal) => return Ok(Recorded::Refused(refusal)),
    };
    let answer = Answer {
        event_id: order.id.clone(),
        net_value: net.value.to_string(),
        state: net.state.as_str().to_string(),
    };
    let value = a.value.map(|v| v.normalize().to_string());
    conn.conn().execute(
        "INSERT INTO adjustments (conversion_id, site_id, order_id, adjustment_id, type, value,
            currency, occurred_at, received_at, reason, answer_net, answer_state)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        args![
            &order.id,
            &a.site_id,
            &a.order_id,
            &a.adjustment_id,
            a.kind.as_str(),
            &value,
            &order.currency,
            occurred_at,
            now_ms,
            &a.reason,
            &answer.net_value,
            &answer.state,
        ],
    )?;
    // The order's cell now has copies to keep (`adjustments_follow_conversion`).
    conn.conn().execute(
        "UPDATE conversions SET adjusted = 1 WHERE id = ?1 AND adjusted = 0",
        args![&order.id],
    )?;
    // Passed on to the site's destinations, durably with the adjustment itself.
    super::adjustment_deliveries::enqueue(conn, &a.site_id, &order.id, &a.adjustment_id, now_ms)?;
    conn.conn().execute(
        &format!(
            "UPDATE adjustments SET (cell_day, cell_type, cell_attributed, cell_source,
                cell_medium, cell_campaign, cell_nulls, counted) =
                (SELECT {CELL} FROM conversions c WHERE c.id = adjustments.conversion_id)
             WHERE conversion_id = ?1 AND adjustment_id = ?2"
        ),
        args![&order.id, &a.adjustment_id],
    )?;
    settle(conn, &order.id)?;
    Ok(Recorded::Accepted(answer))
}

/// An order's report cell as `adjustments.cell_*` and `counted` copy it from its conversion `c`
/// (`migrations/*/0016_net_revenue.sql`, whose trigger keeps the copies afterwards).
const CELL: &str = "c.occurred_at / 86400000 - (CASE WHEN c.occurred_at % 86400000 < 0 THEN 1 ELSE 0 END),
    c.type, (CASE WHEN c.attr_model IS NOT NULL THEN 1 ELSE 0 END), COALESCE(c.attr_source, ''),
    COALESCE(c.attr_medium, ''), COALESCE(c.attr_campaign, ''),
    (CASE WHEN c.attr_source IS NULL THEN 1 ELSE 0 END) + 2 * (CASE WHEN c.attr_medium IS NULL THEN 1 ELSE 0 END)
        + 4 * (CASE WHEN c.attr_campaign IS NULL THEN 1 ELSE 0 END),
    (CASE WHEN c.status = 'processed' AND c.reporting_value IS NOT NULL AND c.test = 0 THEN 1 ELSE 0 END)";

/// Recomputes the changes ([`super::report::deltas`]) of conversion `conversion_id`'s whole ledger and stores the
/// ones that differ, inside the caller's write transaction; the report's rollup follows by trigger.
/// Called on every write of the ledger and whenever the pipeline stores the order's reporting value
/// (an adjustment may arrive before it: its change is unknown until then). Costs one indexed read
/// for an order without adjustments.
pub fn settle(conn: &impl AsConn, conversion_id: &str) -> Result<()> {
    type Stored = (Adjustment, Option<String>, Option<i64>);
    let stored: Vec<Stored> = conn.conn().query_all(
        &format!(
            "SELECT {COLUMNS}, net_delta, net_delta_minor FROM adjustments WHERE conversion_id = ?1"
        ),
        args![conversion_id],
        |r| Ok((adjustment(r)?, r.get(8)?, r.get(9)?)),
    )?;
    if stored.is_empty() {
        return Ok(());
    }
    let order = conn.conn().query_opt(
        "SELECT value, reporting_value, reporting_currency, fx_rate FROM conversions WHERE id = ?1",
        args![conversion_id],
        |r| {
            Ok((
                r.get::<Option<String>>(0)?,
                r.get::<Option<String>>(1)?,
                r.get::<Option<String>>(2)?,
                r.get::<Option<String>>(3)?,
            ))
        },
    )?;
    let Some((value, reporting, currency, rate)) = order else {
        return Ok(());
    };
    let entries = stored
        .iter()
        .map(|(a, _, _)| a.entry())
        .collect::<Result<Vec<_>>>()?;
    let changes = super::report::deltas(
        value.as_deref(),
        reporting.as_deref(),
        currency.as_deref(),
        rate.as_deref(),
        &entries,
    )?;
    for (arrival, change) in changes {
        let text = change.map(|d| d.to_string());
        let minor = match (&text, &currency) {
            (Some(t), Some(c)) => super::report::minor_amount(t, c),
            _ => None,
        };
        let Some((_, was_text, was_minor)) = stored.iter().find(|(a, _, _)| a.arrival == arrival)
        else {
            continue;
        };
        if *was_text != text || *was_minor != minor {
            conn.conn().execute(
                "UPDATE adjustments SET net_delta = ?2, net_delta_minor = ?3 WHERE id = ?1",
                args![arrival, &text, minor],
            )?;
        }
    }
    Ok(())
}

/// The first answer of the adjustment `adjustment_id` of conversion `conversion_id`.
fn answered(conn: &impl AsConn, conversion_id: &str, adjustment_id: &str) -> Result<Answer> {
    conn.conn()
        .query_opt(
            "SELECT answer_net, answer_state FROM adjustments
             WHERE conversion_id = ?1 AND adjustment_id = ?2",
            args![conversion_id, adjustment_id],
            |r| {
                Ok(Answer {
                    event_id: conversion_id.to_string(),
                    net_value: r.get(0)?,
                    state: r.get(1)?,
                })
            },
        )?
        .ok_or_else(|| StoreError::Other(format!("adjustment {adjustment_id:?} is gone")))
}

/// The net value `net` of `order` in the site currency, at the order's own rate: its reporting
/// value scaled by `net` over its reported value (so an unadjusted order keeps its reporting
/// value and a fully refunded one is exactly 0), or `net` times its stored rate when its reported
/// value is 0; rounded to the site currency's minor units. `None` while the order has no rate.
pub fn net_in_site_currency(
    order: &super::conversions::OrderStatus,
    net: Decimal,
) -> Result<Option<Decimal>> {
    let (Some(reporting), Some(currency)) = (&order.fx.value, &order.fx.currency) else {
        return Ok(None);
    };
    let reported = order
        .conversion
        .value
        .as_deref()
        .map(decimal)
        .transpose()?
        .unwrap_or(Decimal::ZERO);
    let rate = order.fx.rate.as_deref().map(decimal).transpose()?;
    Ok(super::report::site_value(
        reported,
        decimal(reporting)?,
        crate::fx::minor_units(currency),
        rate,
        net,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledgers_of_more_ids_than_one_query_takes_come_whole_and_in_order() {
        let n = 2 * IDS_PER_QUERY as i64 + 50;
        let conn = crate::store::dashboard::tests::db(n);
        // The fixture's ids.
        let ids: Vec<String> = (0..n)
            .map(|i| format!("c{:05}", (i * 7919) % 100_000))
            .collect();
        for i in (0..n).step_by(10) {
            // Two refunds each, the second received first.
            for (j, at) in [(0, 2_000), (1, 1_000)] {
                let a = NewAdjustment {
                    site_id: "s".into(),
                    order_id: format!("o{i}"),
                    adjustment_id: format!("a{j}"),
                    kind: Kind::Refund,
                    value: Some(Decimal::new(1, 1)),
                    currency: None,
                    occurred_at: Some(n * 60_000 + at),
                    reason: None,
                };
                assert!(matches!(
                    record(&conn, &a, n * 60_000 + 5_000).unwrap(),
                    Recorded::Accepted(_)
                ));
            }
        }
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let ledgers = of_conversions(&conn, &refs).unwrap();
        assert_eq!(ledgers.len(), (n as usize).div_ceil(10));
        for (i, id) in ids.iter().enumerate() {
            let want = of_conversion(&conn, id).unwrap();
            assert_eq!(want.len(), if i % 10 == 0 { 2 } else { 0 });
            assert_eq!(ledgers.get(id).cloned().unwrap_or_default(), want, "{id}");
        }
        assert_eq!(ledgers[&ids[0]][0].adjustment_id, "a1", "occurredAt order");
        // A page of some of them: only theirs.
        let some = of_conversions(&conn, &refs[..15]).unwrap();
        assert_eq!(some.keys().len(), 2);
        assert!(of_conversions(&conn, &[]).unwrap().is_empty());
    }
}
