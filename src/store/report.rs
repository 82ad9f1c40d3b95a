//! The report's reads, and the rollup they read: `report_daily`, one row per site, UTC day and
//! grouping key (type, whether attribution ran, source, medium, campaign) with the number of
//! conversions, their revenue in integer minor units of the site currency, and how many are not
//! converted yet (docs/decisions.md §11). SQLite triggers on `conversions` keep it exact on every
//! write, whoever writes: the table and its triggers are created by the migration
//! `migrations/sqlite/0005_report_rollup.sql` (PostgreSQL: `migrations/postgres/`) (their text as the database keeps it is in `schema.sql`); no
//! code here writes it. [`check_rollup`] aggregates the same cells from scratch, independently of
//! the triggers, to find where they went wrong.
//!
//! The row-by-row read [`each_line`] stays for what the rollup cannot sum exactly: a reporting value
//! without integer minor units (a currency without them, such as XAU, or an amount past 64 bits),
//! or a cell whose sum went past 64 bits (SQLite then stores it as an approximate REAL).
//!
//! The net revenue has a rollup of its own, `report_refunds` (`migrations/*/0016_net_revenue.sql`):
//! per site, date basis ([`Dated`]), UTC day and the same cell, the sum of the adjustments'
//! changes of their orders' net values, kept by triggers on `adjustments`. The changes themselves
//! are [`deltas`], which `store::adjustments::settle` stores; [`check_refunds`] checks both from
//! scratch, and [`each_change`] is their row-by-row read.
//!
//! On PostgreSQL the rollup's revenue is `NUMERIC`, so a cell never overflows; a sum past 64 bits
//! is answered as not exact, like SQLite's. The reads are written once for both engines except
//! [`sums`] (SQLite's `REAL` cells and its `SUM` overflow error, against PostgreSQL's range check)
//! and [`check_rollup`] (SQLite only, for its tests and operators).

use rusqlite::{params, types::Value, Connection};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;

use super::engine::{args, AsConn, Conn, FromColumn, Row};
use super::{Result, StoreError};
use crate::ledger::{Entry, Kind};

/// The milliseconds of a UTC day.
pub const DAY_MS: i64 = 86_400_000;

/// `value` (decimal text in `currency`) as an integer number of the currency's minor units, when
/// that is exact and fits 64 bits; `None` otherwise (no minor units in ISO 4217, more decimals
/// than the currency has, not a decimal, too large). What `reporting_minor` holds.
pub fn minor_amount(value: &str, currency: &str) -> Option<i64> {
    let dp = crate::fx::minor_units(currency)?;
    let amount = crate::fx::decimal(value).ok()?;
    let scaled = amount.checked_mul(Decimal::from(10i64.checked_pow(dp)?))?;
    if !scaled.fract().is_zero() {
        return None;
    }
    scaled.to_i64()
}

/// The column a report groups by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    Source,
    Medium,
    Campaign,
    /// The channel of the attributed source and medium (`attribution::channel_group`): the key is
    /// the source and medium joined by [`CHANNEL_SEPARATOR`], for the caller to map.
    Channel,
    Type,
}

/// What joins a source and its medium in [`GroupBy::Channel`]'s key: a control character that
/// neither takes from a tagged link (the pixel drops them).
pub const CHANNEL_SEPARATOR: char = '\u{1f}';

/// The conversions a report counts, as the `FROM … WHERE` of every read of them here (the site is
/// `?1`): one place for what never counts.
const COUNTED_CONVERSIONS: &str = "FROM conversions WHERE site_id = ?1 AND test = 0";

impl GroupBy {
    fn column(self) -> &'static str {
        match self {
            GroupBy::Source => "attr_source",
            GroupBy::Medium => "attr_medium",
            GroupBy::Campaign => "attr_campaign",
            GroupBy::Channel => "attr_source || '\u{1f}' || attr_medium",
            GroupBy::Type => "type",
        }
    }

    /// The key of a `report_daily` row, NULL where the conversion's column was.
    fn rollup_key(self) -> &'static str {
        match self {
            GroupBy::Source => "CASE WHEN (nulls & 1) <> 0 THEN NULL ELSE source END",
            GroupBy::Medium => "CASE WHEN (nulls & 2) <> 0 THEN NULL ELSE medium END",
            GroupBy::Campaign => "CASE WHEN (nulls & 4) <> 0 THEN NULL ELSE campaign END",
            GroupBy::Channel => {
                "CASE WHEN (nulls & 3) <> 0 THEN NULL ELSE source || '\u{1f}' || medium END"
            }
            GroupBy::Type => "type",
        }
    }
}

/// One conversion as the report sees it.
#[derive(Debug, Clone)]
pub struct Line {
    /// The grouping column's value.
    pub key: Option<String>,
    /// Whether attribution has run (`attr_model` set).
    pub attributed: bool,
    pub status: String,
    /// Decimal text in the site currency, once processed.
    pub reporting_value: Option<String>,
    pub occurred_at: i64,
    /// Whether its type is `purchase`.
    pub purchase: bool,
}

/// Calls `f` with each conversion of the site in `[from_ms, to_ms)`, one at a time, without
/// collecting them: the report's exact path where the rollup cannot be exact, in memory that does
/// not grow with the rows. Stops at the first error `f` returns.
pub fn each_line<E: From<StoreError>>(
    conn: &impl AsConn,
    site_id: &str,
    from_ms: i64,
    to_ms: i64,
    by: GroupBy,
    mut f: impl FnMut(Line) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    conn.conn().query_each(
        &format!(
            "SELECT {}, attr_model IS NOT NULL, status, reporting_value, occurred_at,
                type = 'purchase' {COUNTED_CONVERSIONS} AND occurred_at >= ?2 AND occurred_at < ?3",
            by.column()
        ),
        args![site_id, from_ms, to_ms],
        |r| {
            f(Line {
                key: r.get(0)?,
                attributed: r.get(1)?,
                status: r.get(2)?,
                reporting_value: r.get(3)?,
                occurred_at: r.get(4)?,
                purchase: r.get(5)?,
            })
        },
    )
}

/// Calls `f` with each session of the site that started in `[from_ms, to_ms)`, with the fields its
/// channel is decided from (`attribution::channel`): the report's visitors, counted into sketches
/// (`crate::sketch`) of bounded size.
pub fn each_visit<E: From<StoreError>>(
    conn: &impl AsConn,
    site_id: &str,
    from_ms: i64,
    to_ms: i64,
    mut f: impl FnMut(super::sessions::Session) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    conn.conn().query_each(
        "SELECT visitor_id, started_at, referrer, utm_source, utm_medium, utm_campaign, gclid,
            gbraid, wbraid, fbclid, msclkid, ttclid FROM sessions
         WHERE site_id = ?1 AND started_at >= ?2 AND started_at < ?3",
        args![site_id, from_ms, to_ms],
        |r| {
            f(super::sessions::Session {
                id: String::new(),
                visitor_id: r.get(0)?,
                client_id: None,
                started_at: r.get(1)?,
                last_activity_at: r.get(1)?,
                landing_url: None,
                referrer: r.get(2)?,
                campaign: super::sessions::Campaign {
                    utm_source: r.get(3)?,
                    utm_medium: r.get(4)?,
                    utm_campaign: r.get(5)?,
                    utm_term: None,
                    utm_content: None,
                    gclid: r.get(6)?,
                    gbraid: r.get(7)?,
                    wbraid: r.get(8)?,
                    fbclid: r.get(9)?,
                    msclkid: r.get(10)?,
                    ttclid: r.get(11)?,
                },
            })
        },
    )
}

/// The first and last UTC day numbers with a session or a counted conversion of the site; `None`
/// without either. What `convapi report` covers without `--from`/`--to` (every day with data).
pub fn data_days(conn: &impl AsConn, site_id: &str) -> Result<Option<(i64, i64)>> {
    let span = |sql: &str| -> Result<Option<(i64, i64)>> {
        let row: Option<(Option<i64>, Option<i64>)> =
            conn.conn()
                .query_opt(sql, args![site_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(match row {
            Some((Some(first), Some(last))) => Some((first, last)),
            _ => None,
        })
    };
    let sessions =
        span("SELECT MIN(started_at), MAX(started_at) FROM sessions WHERE site_id = ?1")?;
    let conversions = span(&format!(
        "SELECT MIN(occurred_at), MAX(occurred_at) {COUNTED_CONVERSIONS}"
    ))?;
    let both = [sessions, conversions].into_iter().flatten();
    Ok(both
        .reduce(|(f1, l1), (f2, l2)| (f1.min(f2), l1.max(l2)))
        .map(|(f, l)| (f.div_euclid(DAY_MS), l.div_euclid(DAY_MS))))
}

/// A counted conversion's visitor and what its report keys are made of.
#[derive(Debug, Clone)]
pub struct Converter {
    pub visitor_id: String,
    pub source: Option<String>,
    pub medium: Option<String>,
    pub campaign: Option<String>,
    pub kind: String,
    /// Whether attribution has run (`attr_model` set).
    pub attributed: bool,
}

/// Calls `f` with each of the site's counted conversions in `[from_ms, to_ms)` that has a visitor
/// and a session: the report's converting visitors, counted into sketches (`crate::sketch`). An
/// order no session explains (kept unattributed: its `visitorId` was never seen) is no visitor
/// the site had; it counts once the pipeline's retry gives it a session.
pub fn each_converter<E: From<StoreError>>(
    conn: &impl AsConn,
    site_id: &str,
    from_ms: i64,
    to_ms: i64,
    mut f: impl FnMut(Converter) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    conn.conn().query_each(
        &format!(
            "SELECT visitor_id, attr_source, attr_medium, attr_campaign, type,
                attr_model IS NOT NULL
             {COUNTED_CONVERSIONS} AND occurred_at >= ?2 AND occurred_at < ?3
                AND visitor_id IS NOT NULL AND session_id IS NOT NULL"
        ),
        args![site_id, from_ms, to_ms],
        |r| {
            f(Converter {
                visitor_id: r.get(0)?,
                source: r.get(1)?,
                medium: r.get(2)?,
                campaign: r.get(3)?,
                kind: r.get(4)?,
                attributed: r.get(5)?,
            })
        },
    )
}

/// The sums of some rollup rows (one group of the report, or one day).
#[derive(Debug, Clone)]
pub struct Sums<K> {
    pub key: K,
    /// For a group: whether attribution had run (`report_daily.attributed`).
    pub attributed: bool,
    pub conversions: i64,
    pub revenue_minor: i64,
    pub unconverted: i64,
    /// How many of the conversions are purchases.
    pub purchases: i64,
}

/// The sums' columns on PostgreSQL, after the key and `attributed`: the revenue only when it fits
/// 64 bits (else 0, and the row counts as inexact).
const PG_SUMS: &str = "CAST(SUM(conversions) AS BIGINT),
    CASE WHEN SUM(revenue_minor) BETWEEN -9223372036854775808 AND 9223372036854775807
        THEN CAST(SUM(revenue_minor) AS BIGINT) ELSE 0 END,
    CAST(SUM(unconverted) AS BIGINT),
    CAST(SUM(inexact) AS BIGINT)
        + CASE WHEN SUM(revenue_minor) BETWEEN -9223372036854775808 AND 9223372036854775807
            THEN 0 ELSE 1 END";

/// Runs a rollup query whose rows are `key, attributed, conversions, revenue_minor, unconverted,
/// inexact, purchases` (`sqlite` or `postgres`, by the engine); `None` as soon as a sum cannot be exact: a
/// row counts inexact values, or its revenue is not an integer (a SQLite cell past 64 bits), or
/// the sum went past 64 bits (SQLite's `SUM` fails; PostgreSQL's is checked in the query).
fn sums<K: rusqlite::types::FromSql + FromColumn>(
    conn: &impl AsConn,
    sqlite: &str,
    postgres: &str,
    site_id: &str,
    from_day: i64,
    to_day: i64,
) -> Result<Option<Vec<Sums<K>>>> {
    let conn = match conn.conn() {
        Conn::Sqlite(c) => c,
        Conn::Postgres(_) => return pg_sums(conn, postgres, site_id, from_day, to_day),
    };
    let mut stmt = conn.prepare_cached(sqlite)?;
    let mut rows = stmt.query(params![site_id, from_day, to_day])?;
    let mut out = Vec::new();
    loop {
        let row = match rows.next() {
            Ok(Some(row)) => row,
            Ok(None) => break,
            Err(e) if is_integer_overflow(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let Value::Integer(revenue_minor) = row.get::<_, Value>(3)? else {
            return Ok(None);
        };
        if row.get::<_, i64>(5)? != 0 {
            return Ok(None);
        }
        out.push(Sums {
            key: row.get(0)?,
            attributed: row.get(1)?,
            conversions: row.get(2)?,
            revenue_minor,
            unconverted: row.get(4)?,
            purchases: row.get(6)?,
        });
    }
    Ok(Some(out))
}

/// [`sums`] on PostgreSQL, whose query checks the revenue's 64 bits itself.
fn pg_sums<K: FromColumn>(
    conn: &impl AsConn,
    sql: &str,
    site_id: &str,
    from_day: i64,
    to_day: i64,
) -> Result<Option<Vec<Sums<K>>>> {
    let rows = conn
        .conn()
        .query_all(sql, args![site_id, from_day, to_day], |r: &Row| {
            Ok((
                r.get::<i64>(5)?,
                Sums {
                    key: r.get(0)?,
                    attributed: r.get(1)?,
                    conversions: r.get(2)?,
                    revenue_minor: r.get(3)?,
                    unconverted: r.get(4)?,
                    purchases: r.get(6)?,
                },
            ))
        })?;
    if rows.iter().any(|(inexact, _)| *inexact != 0) {
        return Ok(None);
    }
    Ok(Some(rows.into_iter().map(|(_, s)| s).collect()))
}

/// SQLite's `SUM()` fails with this message rather than lose integer precision.
fn is_integer_overflow(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(_, Some(m)) if m == "integer overflow")
}

/// The rollup summed per grouping key over the UTC days `[from_day, to_day)`, one row per key and
/// `attributed`, NULL keys as `None`; `None` when the sums cannot be exact (see [`sums`]).
pub fn groups(
    conn: &impl AsConn,
    site_id: &str,
    from_day: i64,
    to_day: i64,
    by: GroupBy,
) -> Result<Option<Vec<Sums<Option<String>>>>> {
    if let Conn::Sqlite(c) = conn.conn() {
        let rows = format!(
            "SELECT {} AS k, attributed, conversions, revenue_minor, unconverted, inexact,
                CASE WHEN type = 'purchase' THEN conversions ELSE 0 END
             FROM report_daily WHERE site_id = ?1 AND day >= ?2 AND day < ?3",
            by.rollup_key()
        );
        return sqlite_group_sums(c, &rows, site_id, from_day, to_day, true);
    }
    let postgres = format!(
        "SELECT {} AS k, attributed, {PG_SUMS}, CAST(SUM(CASE WHEN type = 'purchase' THEN conversions ELSE 0 END) AS BIGINT)
         FROM report_daily WHERE site_id = ?1 AND day >= ?2 AND day < ?3
         GROUP BY k, attributed HAVING SUM(conversions) > 0",
        by.rollup_key()
    );
    pg_sums(conn, &postgres, site_id, from_day, to_day)
}

/// Sums SQLite rows of `key, attributed, conversions, revenue_minor, unconverted, inexact,
/// purchases` per key and `attributed`, in key order, as `GROUP BY k, attributed` would (with
/// `HAVING SUM(conversions) > 0` when `converted_only`), and with its exactness: `None` when a row
/// is inexact or its revenue not an integer, or a sum passes 64 bits (where SQLite's `SUM` fails).
/// Summed here because SQLite groups by an expression through a temporary b-tree, which sorting a
/// year's rollup rows (~70,000 for 1M orders) made most of a report's time.
fn sqlite_group_sums(
    c: &Connection,
    rows_sql: &str,
    site_id: &str,
    from_day: i64,
    to_day: i64,
    converted_only: bool,
) -> Result<Option<Vec<Sums<Option<String>>>>> {
    use rusqlite::types::ValueRef;
    use std::collections::HashMap;
    /// One group's sums so far: conversions, revenue, unconverted, purchases.
    type Acc = [i64; 4];
    fn add(acc: &mut Acc, row: &Acc) -> bool {
        for (a, r) in acc.iter_mut().zip(row) {
            match a.checked_add(*r) {
                Some(v) => *a = v,
                None => return false,
            }
        }
        true
    }
    let mut unkeyed: [Option<Acc>; 2] = [None, None];
    let mut keyed: HashMap<String, [Option<Acc>; 2]> = HashMap::new();
    let mut stmt = c.prepare_cached(rows_sql)?;
    let mut rows = stmt.query(params![site_id, from_day, to_day])?;
    while let Some(row) = rows.next()? {
        let ValueRef::Integer(revenue_minor) = row.get_ref(3)? else {
            return Ok(None);
        };
        if row.get::<_, i64>(5)? != 0 {
            return Ok(None);
        }
        let sums = [row.get(2)?, revenue_minor, row.get(4)?, row.get(6)?];
        let attributed = usize::from(row.get::<_, bool>(1)?);
        let group = match row
            .get_ref(0)?
            .as_str_or_null()
            .map_err(rusqlite::Error::from)?
        {
            None => &mut unkeyed,
            Some(k) => {
                if !keyed.contains_key(k) {
                    keyed.insert(k.to_owned(), [None, None]);
                }
                keyed.get_mut(k).expect("inserted above")
            }
        };
        match &mut group[attributed] {
            Some(acc) => {
                if !add(acc, &sums) {
                    return Ok(None);
                }
            }
            empty @ None => *empty = Some(sums),
        }
    }
    let mut groups: Vec<(Option<String>, [Option<Acc>; 2])> = keyed
        .into_iter()
        .map(|(k, g)| (Some(k), g))
        .chain(std::iter::once((None, unkeyed)))
        .collect();
    groups.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = Vec::new();
    for (key, by_attributed) in groups {
        for (attributed, acc) in by_attributed.into_iter().enumerate() {
            let Some([conversions, revenue_minor, unconverted, purchases]) = acc else {
                continue;
            };
            if converted_only && conversions <= 0 {
                continue;
            }
            out.push(Sums {
                key: key.clone(),
                attributed: attributed == 1,
                conversions,
                revenue_minor,
                unconverted,
                purchases,
            });
        }
    }
    Ok(Some(out))
}

/// The rollup summed per UTC day number over `[from_day, to_day)`, days with conversions only,
/// ascending; `None` when the sums cannot be exact (see [`sums`]).
pub fn days(
    conn: &impl AsConn,
    site_id: &str,
    from_day: i64,
    to_day: i64,
) -> Result<Option<Vec<Sums<i64>>>> {
    sums(
        conn,
        "SELECT day, 1, SUM(conversions), SUM(revenue_minor), SUM(unconverted),
            SUM(inexact) + SUM(typeof(revenue_minor) <> 'integer'), SUM(CASE WHEN type = 'purchase' THEN conversions ELSE 0 END)
         FROM report_daily WHERE site_id = ?1 AND day >= ?2 AND day < ?3
         GROUP BY day HAVING SUM(conversions) > 0 ORDER BY day",
        &format!(
            "SELECT day, 1, {PG_SUMS}, CAST(SUM(CASE WHEN type = 'purchase' THEN conversions ELSE 0 END) AS BIGINT)
             FROM report_daily WHERE site_id = ?1 AND day >= ?2 AND day < ?3
             GROUP BY day HAVING SUM(conversions) > 0 ORDER BY day"
        ),
        site_id,
        from_day,
        to_day,
    )
}

/// The day an adjustment's change of an order's net value counts on (docs/decisions.md §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dated {
    /// The order's day, in its cell: what a campaign earned.
    #[default]
    Order,
    /// The adjustment's `occurredAt` day, in the order's cell: money in the period.
    Adjustment,
}

impl Dated {
    /// `report_refunds.dated`.
    fn code(self) -> i64 {
        match self {
            Dated::Order => 0,
            Dated::Adjustment => 1,
        }
    }
}

/// The changes of net value summed per grouping key over the UTC days `[from_day, to_day)` of
/// `dated`, from `report_refunds` (in `Sums::revenue_minor`; the counts are 0); `None` when the
/// sums cannot be exact (see [`sums`]).
pub fn change_groups(
    conn: &impl AsConn,
    site_id: &str,
    from_day: i64,
    to_day: i64,
    by: GroupBy,
    dated: Dated,
) -> Result<Option<Vec<Sums<Option<String>>>>> {
    let dated_code = dated.code();
    if let Conn::Sqlite(c) = conn.conn() {
        let rows = format!(
            "SELECT {} AS k, attributed, 0, net_change_minor, 0, inexact, 0
             FROM report_refunds WHERE site_id = ?1 AND dated = {dated_code} AND day >= ?2 AND day < ?3",
            by.rollup_key()
        );
        return sqlite_group_sums(c, &rows, site_id, from_day, to_day, false);
    }
    let postgres = format!(
        "SELECT {} AS k, attributed, CAST(0 AS BIGINT),
            CASE WHEN SUM(net_change_minor) BETWEEN -9223372036854775808 AND 9223372036854775807
                THEN CAST(SUM(net_change_minor) AS BIGINT) ELSE 0 END,
            CAST(0 AS BIGINT),
            CAST(SUM(inexact) AS BIGINT)
                + CASE WHEN SUM(net_change_minor) BETWEEN -9223372036854775808 AND 9223372036854775807
                    THEN 0 ELSE 1 END,
            CAST(0 AS BIGINT)
         FROM report_refunds WHERE site_id = ?1 AND dated = {dated_code} AND day >= ?2 AND day < ?3
         GROUP BY k, attributed",
        by.rollup_key()
    );
    pg_sums(conn, &postgres, site_id, from_day, to_day)
}

/// The change each adjustment made to the order's net value in the site currency, in `occurredAt`
/// order (ties: arrival), as `(arrival, change)`: the net value in the site currency after it
/// ([`site_value`]) less the one before it, starting from the reporting value. The changes add up
/// to the net value less the reporting value, so an order's refunds are exactly its reporting value
/// less its net value (0 net for a full refund or a cancel). `None` while the order has no
/// reporting value (`reporting`: decimal text in `currency`, the site's); `value`: the reported
/// value (`None` counts as 0); `rate`: the order's stored rate.
pub fn deltas(
    value: Option<&str>,
    reporting: Option<&str>,
    currency: Option<&str>,
    rate: Option<&str>,
    entries: &[Entry],
) -> Result<Vec<(i64, Option<Decimal>)>> {
    let decimal = |text: &str| {
        crate::fx::decimal(text).map_err(|e| StoreError::Other(format!("stored money {e}")))
    };
    let mut sorted: Vec<Entry> = entries.to_vec();
    sorted.sort_by_key(|e| (e.occurred_at, e.arrival));
    let reported = value.map(decimal).transpose()?.unwrap_or(Decimal::ZERO);
    let site = match (reporting, currency) {
        (Some(r), Some(c)) => Some((
            decimal(r)?,
            crate::fx::minor_units(c),
            rate.map(decimal).transpose()?,
        )),
        _ => None,
    };
    let mut before = site.map(|(reporting, _, _)| reporting);
    let mut out = Vec::with_capacity(sorted.len());
    for i in 0..sorted.len() {
        let net = crate::ledger::net(reported, &sorted[..=i]).value;
        let after = site
            .and_then(|(reporting, minor, rate)| site_value(reported, reporting, minor, rate, net));
        let change = match (before, after) {
            (Some(b), Some(a)) => a.checked_sub(b),
            _ => None,
        };
        out.push((sorted[i].arrival, change));
        before = after;
    }
    Ok(out)
}

/// The net value `net` of an order in the site currency, at the order's own rate: `reporting` (its
/// reporting value, for its reported value `reported`) scaled by `net` over `reported`, so that an
/// unadjusted order keeps its reporting value and a fully refunded one is exactly 0; or `net`
/// times `rate` when the reported value is 0; rounded to `minor` places. `None` without a rate
/// where one is needed, or past the decimal range.
pub(in crate::store) fn site_value(
    reported: Decimal,
    reporting: Decimal,
    minor: Option<u32>,
    rate: Option<Decimal>,
    net: Decimal,
) -> Option<Decimal> {
    if net == reported {
        return Some(reporting);
    }
    if !reported.is_zero() {
        let scaled = reporting.checked_mul(net)?.checked_div(reported)?;
        return Some(crate::fx::round_to_minor(scaled, minor));
    }
    crate::ledger::in_site_currency(net, rate, minor)
}

/// One adjustment's change of its order's net value, as the report's row-by-row read sees it.
#[derive(Debug, Clone)]
pub struct Change {
    /// The order's grouping column.
    pub key: Option<String>,
    /// Whether attribution has run on the order.
    pub attributed: bool,
    /// Decimal text in the site currency; `None` while unknown (it counts 0).
    pub net_delta: Option<String>,
}

/// Calls `f` with each change of a counted order (processed, with a reporting value) of the site
/// whose order (`Dated::Order`) or adjustment (`Dated::Adjustment`) occurred in `[from_ms,
/// to_ms)`, one at a time: [`each_line`]'s companion for the net revenue.
pub fn each_change<E: From<StoreError>>(
    conn: &impl AsConn,
    site_id: &str,
    from_ms: i64,
    to_ms: i64,
    by: GroupBy,
    dated: Dated,
    mut f: impl FnMut(Change) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let at_column = match dated {
        Dated::Order => "c.occurred_at",
        Dated::Adjustment => "a.occurred_at",
    };
    conn.conn().query_each(
        &format!(
            "SELECT c.{}, c.attr_model IS NOT NULL, a.net_delta
             FROM adjustments a JOIN conversions c ON c.id = a.conversion_id
             WHERE a.site_id = ?1 AND {at_column} >= ?2 AND {at_column} < ?3 AND c.status = 'processed'
                AND c.reporting_value IS NOT NULL AND c.test = 0",
            by.column()
        ),
        args![site_id, from_ms, to_ms],
        |r| {
            f(Change {
                key: r.get(0)?,
                attributed: r.get(1)?,
                net_delta: r.get(2)?,
            })
        },
    )
}

/// A `report_refunds` cell: site, dated, day, type, attributed, source, medium, campaign, nulls.
type RefundCell = (String, i64, i64, String, i64, String, String, String, i64);

/// What [`check_refunds`] reads of one adjustment and its order.
struct Checked {
    conversion_id: String,
    adjustment_id: String,
    entry: Entry,
    net_delta: Option<String>,
    net_delta_minor: Option<i64>,
    site_id: String,
    order: [Option<String>; 4],
    cell: (i64, String, i64, String, String, String, i64),
    counted: bool,
}

/// Where the net revenue's stored data differs from what it is from scratch, on either engine:
/// each adjustment's change against [`deltas`] of its order's whole ledger
/// now (`stale: …`), and `report_refunds` against an aggregation of those changes by the orders'
/// own columns (`missing: …`, `extra: …`). Empty when every write kept them. Reads every
/// adjustment; for tests and an operator's check.
pub fn check_refunds(conn: &impl AsConn) -> Result<Vec<String>> {
    use std::collections::BTreeMap;
    let mut rows: Vec<Checked> = Vec::new();
    conn.conn().query_each(
        "SELECT a.adjustment_id, a.type, a.value, NULL, a.occurred_at, NULL, NULL, a.id, a.conversion_id, a.net_delta, a.net_delta_minor, a.site_id,
            c.value, c.reporting_value, c.reporting_currency, c.fx_rate,
            c.occurred_at / 86400000 - (CASE WHEN c.occurred_at % 86400000 < 0 THEN 1 ELSE 0 END),
            c.type, (CASE WHEN c.attr_model IS NOT NULL THEN 1 ELSE 0 END),
            COALESCE(c.attr_source, ''), COALESCE(c.attr_medium, ''), COALESCE(c.attr_campaign, ''),
            (CASE WHEN c.attr_source IS NULL THEN 1 ELSE 0 END)
                + 2 * (CASE WHEN c.attr_medium IS NULL THEN 1 ELSE 0 END)
                + 4 * (CASE WHEN c.attr_campaign IS NULL THEN 1 ELSE 0 END),
            c.status = 'processed' AND c.reporting_value IS NOT NULL AND c.test = 0
         FROM adjustments a JOIN conversions c ON c.id = a.conversion_id
         ORDER BY a.conversion_id, a.id",
        args![],
        |r| {
            let kind: String = r.get(1)?;
            let value: Option<String> = r.get(2)?;
            rows.push(Checked {
                adjustment_id: r.get(0)?,
                entry: Entry {
                    kind: Kind::parse(&kind).ok_or_else(|| {
                        StoreError::Other(format!("unknown adjustment type {kind:?}"))
                    })?,
                    value: value
                        .as_deref()
                        .map(crate::fx::decimal)
                        .transpose()
                        .map_err(|e| StoreError::Other(format!("stored adjustment value {e}")))?,
                    occurred_at: r.get(4)?,
                    arrival: r.get(7)?,
                },
                conversion_id: r.get(8)?,
                net_delta: r.get(9)?,
                net_delta_minor: r.get(10)?,
                site_id: r.get(11)?,
                order: [r.get(12)?, r.get(13)?, r.get(14)?, r.get(15)?],
                cell: (
                    r.get(16)?,
                    r.get(17)?,
                    r.get(18)?,
                    r.get(19)?,
                    r.get(20)?,
                    r.get(21)?,
                    r.get(22)?,
                ),
                counted: r.get(23)?,
            });
            Ok::<_, StoreError>(())
        },
    )?;
    let mut out = Vec::new();
    let mut scratch: BTreeMap<RefundCell, (i128, i64)> = BTreeMap::new();
    for order in rows.chunk_by(|a, b| a.conversion_id == b.conversion_id) {
        let first = &order[0];
        let [value, reporting, currency, rate] = &first.order;
        let entries: Vec<Entry> = order.iter().map(|c| c.entry.clone()).collect();
        let changes = deltas(
            value.as_deref(),
            reporting.as_deref(),
            currency.as_deref(),
            rate.as_deref(),
            &entries,
        )?;
        for c in order {
            let change = changes
                .iter()
                .find(|(arrival, _)| *arrival == c.entry.arrival)
                .and_then(|(_, d)| d.map(|d| d.to_string()));
            let minor = match (&change, currency) {
                (Some(t), Some(cur)) => minor_amount(t, cur),
                _ => None,
            };
            if change != c.net_delta || minor != c.net_delta_minor {
                out.push(format!(
                    "stale: adjustment {} of {}: stored {:?} {:?}, from scratch {change:?} {minor:?}",
                    c.adjustment_id, c.conversion_id, c.net_delta, c.net_delta_minor
                ));
            }
            if !c.counted {
                continue;
            }
            let (day, t, attributed, source, medium, campaign, nulls) = c.cell.clone();
            let adjustment_day = c.entry.occurred_at.div_euclid(DAY_MS);
            for (dated, day) in [(0, day), (1, adjustment_day)] {
                let sums = scratch
                    .entry((
                        c.site_id.clone(),
                        dated,
                        day,
                        t.clone(),
                        attributed,
                        source.clone(),
                        medium.clone(),
                        campaign.clone(),
                        nulls,
                    ))
                    .or_default();
                sums.0 += i128::from(c.net_delta_minor.unwrap_or(0));
                sums.1 += i64::from(c.net_delta_minor.is_none());
            }
        }
    }
    scratch.retain(|_, v| *v != (0, 0));
    let mut kept: BTreeMap<RefundCell, (i128, i64)> = BTreeMap::new();
    conn.conn().query_each(
        "SELECT site_id, dated, day, type, attributed, source, medium, campaign, nulls,
            CAST(net_change_minor AS TEXT), inexact FROM report_refunds",
        args![],
        |r| {
            let text: String = r.get(9)?;
            let sum = text
                .parse::<i128>()
                .map_err(|_| StoreError::Other(format!("report_refunds holds {text:?}")))?;
            kept.insert(
                (
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                ),
                (sum, r.get(10)?),
            );
            Ok::<_, StoreError>(())
        },
    )?;
    for (cell, sums) in &scratch {
        if kept.get(cell) != Some(sums) {
            out.push(format!("missing: {cell:?} {sums:?}"));
        }
    }
    for (cell, sums) in &kept {
        if scratch.get(cell) != Some(sums) {
            out.push(format!("extra: {cell:?} {sums:?}"));
        }
    }
    Ok(out)
}

/// The rollup's cells that differ from an aggregation of `conversions` from scratch, each as
/// `missing: …` (in the aggregation, not in the rollup) or `extra: …` (the other way); empty when
/// the triggers kept it exact. Cells whose counts all came back to 0 are not differences. Then
/// [`check_refunds`]'s differences. For tests and for an operator's check; it reads every
/// conversion.
pub fn check_rollup(conn: &Connection) -> Result<Vec<String>> {
    // A cell's key and sums as 0005_report_rollup.sql's triggers compute them for one row.
    let sql = "WITH scratch AS (
            SELECT c.site_id, c.occurred_at / 86400000 - (c.occurred_at % 86400000 < 0), c.type,
                c.attr_model IS NOT NULL, COALESCE(c.attr_source, ''), COALESCE(c.attr_medium, ''),
                COALESCE(c.attr_campaign, ''),
                (c.attr_source IS NULL) + 2 * (c.attr_medium IS NULL) + 4 * (c.attr_campaign IS NULL),
                COUNT(*),
                SUM(CASE WHEN c.status = 'processed' AND c.reporting_value IS NOT NULL
                    THEN COALESCE(c.reporting_minor, 0) ELSE 0 END),
                SUM(c.status <> 'processed'),
                SUM(c.status = 'processed' AND c.reporting_value IS NOT NULL
                    AND c.reporting_minor IS NULL)
            FROM conversions c WHERE c.test = 0 GROUP BY 1, 2, 3, 4, 5, 6, 7, 8),
        kept AS (
            SELECT * FROM report_daily
            WHERE conversions <> 0 OR revenue_minor <> 0 OR unconverted <> 0 OR inexact <> 0)
        SELECT 'missing', * FROM (SELECT * FROM scratch EXCEPT SELECT * FROM kept)
        UNION ALL
        SELECT 'extra', * FROM (SELECT * FROM kept EXCEPT SELECT * FROM scratch)";
    let mut stmt = conn.prepare(sql)?;
    let rows = stmt.query_map([], |r| {
        let cells: Vec<String> = (0..13)
            .map(|i| match r.get::<_, Value>(i) {
                Ok(Value::Text(t)) => format!("{t:?}"),
                Ok(Value::Integer(n)) => n.to_string(),
                Ok(Value::Real(x)) => format!("{x}"),
                Ok(v) => format!("{v:?}"),
                Err(e) => e.to_string(),
            })
            .collect();
        Ok(format!(
            "{}: {}",
            cells[0].trim_matches('"'),
            cells[1..].join(" ")
        ))
    })?;
    let mut out = rows.collect::<rusqlite::Result<Vec<_>>>()?;
    out.extend(check_refunds(conn)?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// key, attributed, conversions, revenue, unconverted, inexact.
    type GroupRow<'a> = (Option<&'a str>, i64, i64, Value, i64, i64);

    /// A table of rollup-like rows for [`sqlite_group_sums`], and its query.
    fn group_rows(rows: &[GroupRow<'_>]) -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE t (site_id TEXT, day INTEGER, k TEXT, attributed INTEGER,
                 conversions INTEGER, revenue_minor, unconverted INTEGER, inexact INTEGER)",
        )
        .unwrap();
        for (k, attributed, conversions, revenue, unconverted, inexact) in rows {
            conn.execute(
                "INSERT INTO t VALUES ('s', 1, ?1, ?2, ?3, ?4, ?5, ?6)",
                params![k, attributed, conversions, revenue, unconverted, inexact],
            )
            .unwrap();
        }
        conn
    }
    const GROUP_ROWS: &str = "SELECT k, attributed, conversions, revenue_minor, unconverted,
        inexact, conversions * 2 FROM t WHERE site_id = ?1 AND day >= ?2 AND day < ?3";

    #[test]
    fn sqlite_group_sums_add_up_as_group_by_would() {
        let i = Value::Integer;
        let conn = group_rows(&[
            (Some("b"), 1, 2, i(500), 0, 0),
            (None, 0, 1, i(7), 1, 0),
            (Some("a"), 1, 1, i(100), 0, 0),
            (Some("b"), 1, 3, i(-200), 1, 0),
            (Some("a"), 0, 0, i(0), 4, 0),
            (Some("b"), 0, 1, i(9), 0, 0),
        ]);
        let sums = |converted_only| {
            sqlite_group_sums(&conn, GROUP_ROWS, "s", 0, 2, converted_only)
                .unwrap()
                .unwrap()
                .into_iter()
                .map(|s| {
                    (
                        s.key,
                        s.attributed,
                        s.conversions,
                        s.revenue_minor,
                        s.unconverted,
                        s.purchases,
                    )
                })
                .collect::<Vec<_>>()
        };
        let a = |k: &str| Some(k.to_owned());
        let all = vec![
            (None, false, 1, 7, 1, 2),
            (a("a"), false, 0, 0, 4, 0),
            (a("a"), true, 1, 100, 0, 2),
            (a("b"), false, 1, 9, 0, 2),
            (a("b"), true, 5, 300, 1, 10),
        ];
        assert_eq!(sums(false), all);
        // `HAVING SUM(conversions) > 0`.
        let converted: Vec<_> = all.into_iter().filter(|g| g.2 > 0).collect();
        assert_eq!(sums(true), converted);
        // The same as SQLite's own grouping.
        let grouped: Vec<(Option<String>, bool, i64, i64, i64, i64)> = conn
            .prepare(
                "SELECT k, attributed, SUM(conversions), SUM(revenue_minor), SUM(unconverted),
                     SUM(conversions * 2) FROM t GROUP BY k, attributed HAVING SUM(conversions) > 0",
            )
            .unwrap()
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
            })
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(sums(true), grouped);
        assert!(sqlite_group_sums(&conn, GROUP_ROWS, "s", 2, 3, true)
            .unwrap()
            .unwrap()
            .is_empty());
    }

    #[test]
    fn sqlite_group_sums_are_none_when_they_cannot_be_exact() {
        let i = Value::Integer;
        let none = |rows: &[GroupRow<'_>]| {
            sqlite_group_sums(&group_rows(rows), GROUP_ROWS, "s", 0, 2, false)
                .unwrap()
                .is_none()
        };
        assert!(!none(&[(Some("a"), 1, 1, i(i64::MAX), 0, 0)]));
        // A sum past 64 bits, where SQLite's SUM fails.
        assert!(none(&[
            (Some("a"), 1, 1, i(i64::MAX), 0, 0),
            (Some("a"), 1, 1, i(1), 0, 0)
        ]));
        assert!(none(&[
            (None, 0, 1, i(i64::MIN), 0, 0),
            (None, 0, 1, i(-1), 0, 0)
        ]));
        // A cell that counted inexact values, or whose revenue is no integer.
        assert!(none(&[(Some("a"), 1, 1, i(1), 0, 1)]));
        assert!(none(&[(Some("a"), 1, 1, Value::Real(1e19), 0, 0)]));
        // In separate groups, the largest values add up to nothing.
        assert!(!none(&[
            (Some("a"), 1, 1, i(i64::MAX), 0, 0),
            (Some("b"), 1, 1, i(i64::MAX), 0, 0)
        ]));
    }

    #[test]
    fn the_migration_fills_minor_units_and_builds_the_rollup_from_the_rows_there_are() {
        let mut conn = super::super::version_1_fixture();
        conn.execute_batch(
            "INSERT INTO sessions (id, site_id, visitor_id, started_at, last_activity_at)
                 VALUES ('x', 's', 'v', 0, 0);
             INSERT INTO conversions (id, site_id, type, session_id, visitor_id, currency,
                     occurred_at, created_at, status, attr_model, attr_source, attr_medium,
                     attr_campaign, reporting_value, reporting_currency)
                 VALUES ('a', 's', 'purchase', 'x', 'v', 'EUR', 86400000, 0, 'processed',
                         'last_touch', 'news', 'email', NULL, '49.90', 'EUR'),
                        ('b', 's', 'purchase', 'x', 'v', 'EUR', 86400001, 0, 'processed',
                         'last_touch', 'news', 'email', NULL, '0.10', 'EUR'),
                        ('c', 's', 'purchase', 'x', 'v', 'EUR', -1, 0, 'processed',
                         'last_touch', 'news', 'email', '', '1.234', 'EUR'),
                        ('d', 's', 'signup', 'x', 'v', 'EUR', 86400000, 0, 'queued',
                         NULL, NULL, NULL, NULL, NULL, NULL);",
        )
        .unwrap();
        super::super::migrate(&mut conn).unwrap();
        let minor = |id: &str| -> Option<i64> {
            conn.query_row(
                "SELECT reporting_minor FROM conversions WHERE id = ?1",
                [id],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert_eq!(
            (minor("a"), minor("b"), minor("c"), minor("d")),
            (Some(4990), Some(10), None, None)
        );
        let cells: Vec<String> = conn
            .prepare(
                "SELECT day || ' ' || type || ' ' || quote(campaign) || ' ' || nulls || ' ' ||
                    conversions || ' ' || revenue_minor || ' ' || unconverted || ' ' || inexact
                 FROM report_daily ORDER BY day, type",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        // A millisecond before the epoch is on day -1; '' and NULL campaigns stay apart.
        assert_eq!(
            cells,
            vec![
                "-1 purchase '' 0 1 0 0 1",
                "1 purchase '' 4 2 5000 0 0",
                "1 signup '' 7 1 0 1 0",
            ]
        );
        assert_eq!(check_rollup(&conn).unwrap(), Vec::<String>::new());
        assert!(
            groups(&conn, "s", -1, 2, GroupBy::Campaign)
                .unwrap()
                .is_none(),
            "an inexact value sends the report to the rows"
        );
        let summed = groups(&conn, "s", 0, 2, GroupBy::Campaign)
            .unwrap()
            .unwrap();
        assert_eq!(summed.len(), 2);
        conn.execute("DELETE FROM conversions WHERE id = 'a'", [])
            .unwrap();
        conn.execute(
            "UPDATE conversions SET status = 'processed', reporting_value = '2', reporting_minor = 200
             WHERE id = 'd'",
            [],
        )
        .unwrap();
        assert_eq!(check_rollup(&conn).unwrap(), Vec::<String>::new());
        assert!(
            days(&conn, "s", i64::MIN, i64::MAX).unwrap().is_none(),
            "day -1 is inexact"
        );
        assert_eq!(days_in(&conn, 0, 5), vec![(1, 2, 210, 0)]);
    }

    /// Migration 16 computes the changes of the ledgers there are with the arithmetic of every later
    /// write: a partial then full refund of a USD order nets 0 in EUR; a restate upwards is a negative
    /// refund; a cancel takes the whole value; an order not converted yet counts nothing.
    #[test]
    fn the_migration_computes_the_existing_ledgers_changes_and_builds_their_rollup() {
        let mut conn = super::super::version_1_fixture();
        super::super::engine::sqlite::migrate_to(&mut conn, 15).unwrap();
        conn.execute_batch(
            "INSERT INTO sessions (id, site_id, visitor_id, started_at, last_activity_at)
                 VALUES ('x', 's', 'v', 0, 0);
             INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id, value,
                     currency, occurred_at, created_at, status, attr_model, attr_source,
                     attr_medium, attr_campaign, reporting_value, reporting_minor,
                     reporting_currency, fx_rate)
                 VALUES ('usd', 's', 'o1', 'purchase', 'x', 'v', '49.99', 'USD', 86400000, 0,
                         'processed', 'last_touch', 'news', 'email', NULL, '47.61', 4761, 'EUR', '1.05'),
                        ('up', 's', 'o2', 'purchase', 'x', 'v', '50', 'EUR', 86400000, 0,
                         'processed', 'last_touch', 'news', 'email', NULL, '50.00', 5000, 'EUR', '1'),
                        ('gone', 's', 'o3', 'purchase', 'x', 'v', '20', 'EUR', 172800000, 0,
                         'processed', 'last_touch', 'ads', 'cpc', NULL, '20.00', 2000, 'EUR', '1'),
                        ('new', 's', 'o4', 'purchase', 'x', 'v', '10', 'EUR', 172800000, 0,
                         'queued', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
             INSERT INTO adjustments (conversion_id, site_id, order_id, adjustment_id, type, value,
                     currency, occurred_at, received_at, answer_net, answer_state)
                 VALUES ('usd', 's', 'o1', 'a', 'refund', '16.66', 'USD', 259200000, 0, '', ''),
                        ('usd', 's', 'o1', 'b', 'refund', '33.33', 'USD', 259200001, 0, '', ''),
                        ('up', 's', 'o2', 's', 'restate', '80', 'EUR', 259200000, 0, '', ''),
                        ('gone', 's', 'o3', 'r', 'refund', '5', 'EUR', 172800001, 0, '', ''),
                        ('gone', 's', 'o3', 'c', 'cancel', NULL, 'EUR', 172800002, 0, '', ''),
                        ('new', 's', 'o4', 'r', 'refund', '4', 'EUR', 172800001, 0, '', '');",
        )
        .unwrap();
        super::super::migrate(&mut conn).unwrap();
        let changes: Vec<String> = conn
            .prepare(
                "SELECT adjustment_id || ' ' || quote(net_delta) || ' ' || quote(net_delta_minor)
                    || ' ' || counted FROM adjustments ORDER BY id",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(
            changes,
            [
                "a '-15.87' -1587 1",
                "b '-31.74' -3174 1",
                "s '30.00' 3000 1",
                "r '-5.00' -500 1",
                "c '-15.00' -1500 1",
                "r NULL NULL 0",
            ]
        );
        let cells: Vec<String> = conn
            .prepare(
                "SELECT dated || ' ' || day || ' ' || source || ' ' || net_change_minor || ' ' ||
                    inexact FROM report_refunds ORDER BY dated, day, source",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        // By the order's day: news -47.61 + 30.00 on day 1, ads -20.00 on day 2; by the
        // adjustment's: ads on day 2, news on day 3.
        assert_eq!(
            cells,
            [
                "0 1 news -1761 0",
                "0 2 ads -2000 0",
                "1 2 ads -2000 0",
                "1 3 news -1761 0"
            ]
        );
        assert_eq!(check_rollup(&conn).unwrap(), Vec::<String>::new());
        // Converting the queued order makes its early refund count.
        conn.execute(
            "UPDATE conversions SET status = 'processed', attr_model = 'last_touch',
                reporting_value = '10.00', reporting_minor = 1000, reporting_currency = 'EUR',
                fx_rate = '1' WHERE id = 'new'",
            [],
        )
        .unwrap();
        assert!(
            !check_rollup(&conn).unwrap().is_empty(),
            "stale until settled"
        );
        crate::store::adjustments::settle(&conn, "new").unwrap();
        assert_eq!(check_rollup(&conn).unwrap(), Vec::<String>::new());
        conn.execute("DELETE FROM conversions WHERE id IN ('usd', 'new')", [])
            .unwrap();
        assert_eq!(check_rollup(&conn).unwrap(), Vec::<String>::new());
    }

    fn days_in(conn: &Connection, from: i64, to: i64) -> Vec<(i64, i64, i64, i64)> {
        days(conn, "s", from, to)
            .unwrap()
            .unwrap()
            .into_iter()
            .map(|d| (d.key, d.conversions, d.revenue_minor, d.unconverted))
            .collect()
    }

    #[test]
    fn minor_amounts_are_exact_or_none() {
        assert_eq!(minor_amount("49.90", "EUR"), Some(4990));
        assert_eq!(minor_amount("49.9", "EUR"), Some(4990));
        assert_eq!(minor_amount("0.00", "EUR"), Some(0));
        assert_eq!(minor_amount("1234", "JPY"), Some(1234));
        assert_eq!(minor_amount("1.234", "BHD"), Some(1234));
        assert_eq!(minor_amount("1.234", "EUR"), None);
        assert_eq!(minor_amount("1.5", "XAU"), None);
        assert_eq!(minor_amount("nine", "EUR"), None);
        assert_eq!(minor_amount("100000000000000000000", "EUR"), None);
        assert_eq!(minor_amount("92233720368547758.07", "EUR"), Some(i64::MAX));
        assert_eq!(minor_amount("92233720368547758.08", "EUR"), None);
    }
}
