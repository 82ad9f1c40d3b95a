//! The report's figures (`GET /api/sites/{siteId}/report`, `convapi report`, the dashboard): the
//! visitors and conversions of a site grouped by source, medium, campaign, channel or type, with
//! their revenue in the site currency and how many are not converted yet.
//!
//! Rules: a conversion counts once (there is one row per order); it occurred in the range when its
//! `occurredAt` falls on a day from `--from` to `--to` inclusive (UTC). Revenue is the exact decimal
//! sum of the processed conversions' reporting values (each already rounded to the currency's minor
//! units by the pipeline). `unconverted` counts the conversions whose value is not in the revenue
//! yet: `queued`, `fx_pending` or `failed`. A processed conversion without a value adds 0.
//! Before attribution has run the source/medium/campaign key is `(unattributed)`; a missing
//! campaign is `(not set)`.
//!
//! Net revenue: `revenue` is the gross revenue (the reporting values as first reported, never
//! rewritten); `refunds` is what the orders' adjustments took off it in the site currency (their
//! changes of net value, negated: negative after a restate upwards; a cancelled order's whole
//! value); the net revenue is gross less refunds. By the order's day (`Dated::Order`, the default)
//! an order's refunds count in its own row and day; by the adjustment's day
//! (`Dated::Adjustment`) each change counts on the day it occurred, in its order's row, while the
//! gross revenue and the conversions stay on the order's day.

use std::collections::BTreeMap;

use chrono::NaiveDate;
use rust_decimal::Decimal;

use crate::attribution::NOT_SET;
use crate::fx;
use crate::sketch::{self, Sketch};
use crate::store::report::{Dated, GroupBy, DAY_MS};
use crate::store::{self, sites::Site, StoreError};

pub use crate::attribution::UNATTRIBUTED;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub key: String,
    pub conversions: u64,
    /// The gross revenue: in the site currency, scaled to its minor units.
    pub revenue: Decimal,
    pub unconverted: u64,
    /// Gross less net revenue, in the site currency, scaled to its minor units.
    pub refunds: Decimal,
    /// How many of the conversions are purchases (the average order value's divisor).
    pub purchases: u64,
}

impl Row {
    /// The net revenue: gross less refunds.
    pub fn net(&self) -> Decimal {
        let mut net = self.revenue - self.refunds;
        // 0.00 - 0.00 is 0 in rust_decimal; the money keeps its places.
        net.rescale(self.revenue.scale().max(self.refunds.scale()));
        net
    }
}

/// The epoch-ms range `[from, to)` of the inclusive UTC days `from..=to`; an open end is unbounded.
/// `convapi export` reads its rows by the same range.
pub fn day_range(from: Option<NaiveDate>, to: Option<NaiveDate>) -> (i64, i64) {
    let day_ms = |d: NaiveDate| {
        d.and_hms_opt(0, 0, 0)
            .expect("midnight exists")
            .and_utc()
            .timestamp_millis()
    };
    let from_ms = from.map(day_ms).unwrap_or(i64::MIN);
    let to_ms = to
        .and_then(|d| d.succ_opt())
        .map(day_ms)
        .unwrap_or(i64::MAX);
    (from_ms, to_ms)
}

/// The days `convapi report` covers: `from` and `to` where given; else from the site's first day
/// with a session or a counted conversion, to its last or `today`, whichever is later (every day
/// with data; `today` alone when there is none).
pub fn days_or_all(
    conn: &impl crate::store::engine::AsConn,
    site: &Site,
    from: Option<NaiveDate>,
    to: Option<NaiveDate>,
    today: NaiveDate,
) -> store::Result<(NaiveDate, NaiveDate)> {
    let (first, last) = match (from, to) {
        (Some(from), Some(to)) => return Ok((from, to)),
        _ => match store::report::data_days(conn, &site.id)? {
            Some((first, last)) => (date_of(first)?, date_of(last)?.max(today)),
            None => (today, today),
        },
    };
    let to = to.unwrap_or(last);
    Ok((from.unwrap_or(first.min(to)), to))
}

/// One UTC day of the report's chart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Day {
    pub day: NaiveDate,
    pub conversions: u64,
    /// In the site currency, scaled to its minor units.
    pub revenue: Decimal,
    pub unconverted: u64,
}

/// The UTC day numbers `[from, to)` (days since 1970-01-01) of the inclusive days `from..=to`;
/// the same conversions as [`day_range`]'s milliseconds, as the rollup keys them.
fn day_numbers(from: Option<NaiveDate>, to: Option<NaiveDate>) -> (i64, i64) {
    let (from_ms, to_ms) = day_range(from, to);
    let to_day = if to_ms == i64::MAX {
        i64::MAX
    } else {
        to_ms.div_euclid(DAY_MS)
    };
    (from_ms.div_euclid(DAY_MS), to_day)
}

/// The report's rows: highest revenue first, then most conversions, then by key.
///
/// Sums the site's daily rollup (a few rows per day and key, whatever the number of conversions);
/// reads the conversions one by one only where the rollup cannot be exact (docs/decisions.md §11).
pub fn build(
    conn: &impl crate::store::engine::AsConn,
    site: &Site,
    from: Option<NaiveDate>,
    to: Option<NaiveDate>,
    by: GroupBy,
) -> store::Result<Vec<Row>> {
    build_dated(conn, site, from, to, by, Dated::Order)
}

/// [`build`] with the refunds by the order's day or by the adjustment's (the module doc).
pub fn build_dated(
    conn: &impl crate::store::engine::AsConn,
    site: &Site,
    from: Option<NaiveDate>,
    to: Option<NaiveDate>,
    by: GroupBy,
    dated: Dated,
) -> store::Result<Vec<Row>> {
    let minor = fx::minor_units(&site.currency);
    let mut groups: BTreeMap<String, Row> = BTreeMap::new();
    let summed = match minor {
        Some(dp) => {
            let (from_day, to_day) = day_numbers(from, to);
            let gross = store::report::groups(conn, &site.id, from_day, to_day, by)?;
            let changes =
                store::report::change_groups(conn, &site.id, from_day, to_day, by, dated)?;
            match (gross, changes) {
                (Some(gross), Some(changes)) => {
                    add_sums(&mut groups, by, dp, gross)?;
                    add_changes(&mut groups, by, dp, changes)?;
                    Some(())
                }
                _ => None,
            }
        }
        None => None,
    };
    if summed.is_none() {
        groups.clear();
        add_lines(conn, site, from, to, by, dated, &mut groups)?;
    }
    let mut rows: Vec<Row> = groups
        .into_values()
        .map(|mut r| {
            r.revenue = fx::round_to_minor(r.revenue, minor);
            r.refunds = fx::round_to_minor(r.refunds, minor);
            r
        })
        .collect();
    rows.sort_by(|a, b| {
        b.revenue
            .cmp(&a.revenue)
            .then(b.conversions.cmp(&a.conversions))
            .then_with(|| a.key.cmp(&b.key))
    });
    Ok(rows)
}

/// Stored data a report cannot use: a broken file or a bug, never the reader's mistake.
fn broken(why: String) -> StoreError {
    StoreError::Other(why)
}

/// The report's key for a conversion's grouping column.
fn key(by: GroupBy, attributed: bool, column: Option<String>) -> String {
    if by == GroupBy::Channel {
        let (source, medium) = match &column {
            Some(k) if attributed => k
                .split_once(store::report::CHANNEL_SEPARATOR)
                .unwrap_or((k.as_str(), "")),
            _ if attributed => (NOT_SET, NOT_SET),
            _ => (UNATTRIBUTED, UNATTRIBUTED),
        };
        return crate::attribution::channel_group(source, medium).to_owned();
    }
    match (by, column) {
        (GroupBy::Type, Some(k)) => k,
        (_, _) if !attributed => UNATTRIBUTED.to_owned(),
        (_, Some(k)) => k,
        (_, None) => NOT_SET.to_owned(),
    }
}

fn group(groups: &mut BTreeMap<String, Row>, key: String) -> &mut Row {
    groups.entry(key.clone()).or_insert_with(|| Row {
        key,
        conversions: 0,
        revenue: Decimal::ZERO,
        unconverted: 0,
        refunds: Decimal::ZERO,
        purchases: 0,
    })
}

/// Counts a count read from the rollup; a negative one means the rollup is broken.
fn count(n: i64) -> store::Result<u64> {
    u64::try_from(n).map_err(|_| broken(format!("the report rollup holds a negative count ({n})")))
}

/// Adds the rollup's sums (revenue in `dp`-place minor units) to the groups.
fn add_sums(
    groups: &mut BTreeMap<String, Row>,
    by: GroupBy,
    dp: u32,
    sums: Vec<store::report::Sums<Option<String>>>,
) -> store::Result<()> {
    for s in sums {
        let row = group(groups, key(by, s.attributed, s.key));
        row.conversions += count(s.conversions)?;
        row.unconverted += count(s.unconverted)?;
        row.purchases += count(s.purchases)?;
        row.revenue = row
            .revenue
            .checked_add(Decimal::from_i128_with_scale(
                i128::from(s.revenue_minor),
                dp,
            ))
            .ok_or_else(|| broken("revenue exceeds the decimal range".into()))?;
    }
    Ok(())
}

/// Takes the rollup's changes of net value (in `dp`-place minor units) off the groups' revenue,
/// as refunds.
fn add_changes(
    groups: &mut BTreeMap<String, Row>,
    by: GroupBy,
    dp: u32,
    sums: Vec<store::report::Sums<Option<String>>>,
) -> store::Result<()> {
    for s in sums {
        if s.revenue_minor == 0 {
            continue;
        }
        let row = group(groups, key(by, s.attributed, s.key));
        row.refunds = row
            .refunds
            .checked_sub(Decimal::from_i128_with_scale(
                i128::from(s.revenue_minor),
                dp,
            ))
            .ok_or_else(|| broken("refunds exceed the decimal range".into()))?;
    }
    Ok(())
}

/// Adds the site's conversions in the range one by one, with exact decimal sums of their stored
/// reporting values, and their adjustments' changes by `dated`.
fn add_lines(
    conn: &impl crate::store::engine::AsConn,
    site: &Site,
    from: Option<NaiveDate>,
    to: Option<NaiveDate>,
    by: GroupBy,
    dated: Dated,
    groups: &mut BTreeMap<String, Row>,
) -> store::Result<()> {
    let (from_ms, to_ms) = day_range(from, to);
    store::report::each_line(conn, &site.id, from_ms, to_ms, by, |mut line| {
        let row = group(groups, key(by, line.attributed, line.key.take()));
        row.purchases += u64::from(line.purchase);
        count_line(
            &line,
            &mut row.conversions,
            &mut row.revenue,
            &mut row.unconverted,
        )
    })?;
    store::report::each_change(conn, &site.id, from_ms, to_ms, by, dated, |mut change| {
        let Some(text) = change.net_delta.as_deref() else {
            return Ok(());
        };
        let v = fx::decimal(text).map_err(|e| broken(format!("stored net change {e}")))?;
        if v.is_zero() {
            return Ok(());
        }
        let row = group(groups, key(by, change.attributed, change.key.take()));
        row.refunds = row
            .refunds
            .checked_sub(v)
            .ok_or_else(|| broken("refunds exceed the decimal range".into()))?;
        Ok::<_, StoreError>(())
    })
}

/// Counts one conversion into a group's or a day's sums: its reporting value into the revenue
/// once processed, else one more unconverted conversion (a processed one without a value adds 0).
fn count_line(
    line: &store::report::Line,
    conversions: &mut u64,
    revenue: &mut Decimal,
    unconverted: &mut u64,
) -> store::Result<()> {
    *conversions += 1;
    match (&line.reporting_value, line.status.as_str()) {
        (Some(v), "processed") => {
            let v = fx::decimal(v).map_err(|e| broken(format!("stored reporting value {e}")))?;
            *revenue = revenue
                .checked_add(v)
                .ok_or_else(|| broken("revenue exceeds the decimal range".into()))?;
        }
        (None, "processed") => {}
        _ => *unconverted += 1,
    }
    Ok(())
}

/// Conversions, revenue and unconverted conversions per UTC day of the range (days with
/// conversions only, ascending), by the same rules and the same read as [`build`].
pub fn daily(
    conn: &impl crate::store::engine::AsConn,
    site: &Site,
    from: Option<NaiveDate>,
    to: Option<NaiveDate>,
) -> store::Result<Vec<Day>> {
    let minor = fx::minor_units(&site.currency);
    if let Some(dp) = minor {
        let (from_day, to_day) = day_numbers(from, to);
        if let Some(sums) = store::report::days(conn, &site.id, from_day, to_day)? {
            return sums
                .into_iter()
                .map(|s| {
                    Ok(Day {
                        day: date_of(s.key)?,
                        conversions: count(s.conversions)?,
                        revenue: Decimal::from_i128_with_scale(i128::from(s.revenue_minor), dp),
                        unconverted: count(s.unconverted)?,
                    })
                })
                .collect();
        }
    }
    let (from_ms, to_ms) = day_range(from, to);
    let mut days: BTreeMap<i64, Day> = BTreeMap::new();
    store::report::each_line(conn, &site.id, from_ms, to_ms, GroupBy::Type, |line| {
        let n = line.occurred_at.div_euclid(DAY_MS);
        let day = match days.entry(n) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => e.insert(Day {
                day: date_of(n)?,
                conversions: 0,
                revenue: Decimal::ZERO,
                unconverted: 0,
            }),
        };
        count_line(
            &line,
            &mut day.conversions,
            &mut day.revenue,
            &mut day.unconverted,
        )
    })?;
    Ok(days
        .into_values()
        .map(|mut d| {
            d.revenue = fx::round_to_minor(d.revenue, minor);
            d
        })
        .collect())
}

/// The date of a UTC day number.
fn date_of(day: i64) -> store::Result<NaiveDate> {
    day.checked_mul(86_400)
        .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
        .map(|t| t.date_naive())
        .ok_or_else(|| broken(format!("day {day} is out of range")))
}

/// The glossary of the report's figures (docs/decisions.md §11), as the dashboard's tooltips show
/// it; openapi.yaml's descriptions say the same.
pub const GLOSSARY: [(&str, &str); 9] = [
    ("visitors", "Distinct visitors with a session that started in the range (UTC days); a row's: those whose visit's channel gives its key (by type, all of them). Exact up to 512 a day and 4,096 in the range; estimated beyond (1.6 % standard error)."),
    ("convertingVisitors", "Distinct visitors credited with at least one conversion of the row in the range; an order no visit explains (kept unattributed) has none. Exact up to 512 a day and 4,096 in the range; estimated beyond (1.6 % standard error)."),
    ("conversionRate", "Converting visitors / visitors, from 0 to 1 (0 without visitors)."),
    ("conversions", "Every conversion on the UTC day of its occurredAt, a cancelled order included; test data never counts; not yet attributed: the (unattributed) row."),
    ("purchases", "The conversions of type purchase."),
    ("grossRevenue", "The values as first reported, in the site currency."),
    ("refunds", "Gross less net revenue, by the order's date: refunds, a cancelled order's whole value; negative after a restatement upwards."),
    ("netRevenue", "Gross revenue less refunds, in the site currency."),
    ("averageOrderValue", "Net revenue / purchases, rounded to the currency's minor units; none without purchases."),
];

/// The glossary's text of a figure.
pub fn meaning(figure: &str) -> &'static str {
    GLOSSARY
        .iter()
        .find(|(f, _)| *f == figure)
        .map_or("", |(_, m)| *m)
}

/// How the previous period beside a report is chosen (docs/decisions.md §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    /// The same number of days, ending the day before `from`.
    Previous,
    /// The same number of days, moved back by whole weeks (the fewest that do not overlap), so
    /// that each day lines up with the same weekday.
    Weekday,
}

impl Compare {
    pub fn parse(s: &str) -> Option<Compare> {
        match s {
            "previous" => Some(Compare::Previous),
            "weekday" => Some(Compare::Weekday),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Compare::Previous => "previous",
            Compare::Weekday => "weekday",
        }
    }

    /// The period compared with the inclusive days `from..=to`.
    pub fn period(self, from: NaiveDate, to: NaiveDate) -> (NaiveDate, NaiveDate) {
        let days = (to - from).num_days() + 1;
        let back = match self {
            Compare::Previous => days,
            Compare::Weekday => (days + 6) / 7 * 7,
        };
        let shift = chrono::Duration::days(back);
        (from - shift, to - shift)
    }
}

/// The grouping's name as the API, the CLI and the dashboard spell it.
pub fn by_name(by: GroupBy) -> &'static str {
    match by {
        GroupBy::Source => "source",
        GroupBy::Medium => "medium",
        GroupBy::Campaign => "campaign",
        GroupBy::Channel => "channel",
        GroupBy::Type => "type",
    }
}

/// [`by_name`]'s inverse.
pub fn parse_by(s: &str) -> Option<GroupBy> {
    [
        GroupBy::Source,
        GroupBy::Medium,
        GroupBy::Campaign,
        GroupBy::Channel,
        GroupBy::Type,
    ]
    .into_iter()
    .find(|b| by_name(*b) == s)
}

/// The longest range a report covers: ten years and their leap days.
pub const MAX_DAYS: i64 = 3653;

/// What a report is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query {
    pub from: NaiveDate,
    pub to: NaiveDate,
    pub by: GroupBy,
    pub compare: Option<Compare>,
}

/// A query's parameter that cannot be answered: which one, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadParameter {
    pub name: &'static str,
    pub why: String,
}

impl Query {
    /// The query from its parameters as text (`None`: absent): `from` and `to` are UTC days
    /// `YYYY-MM-DD` (default: the 30 days ending `today`; one alone: that day to `today`, or the
    /// 30 days ending it), `by` one of [`parse_by`]'s (default `source`), `compare` `previous` or
    /// `weekday` (default: none).
    pub fn parse(
        from: Option<&str>,
        to: Option<&str>,
        by: Option<&str>,
        compare: Option<&str>,
        today: NaiveDate,
    ) -> Result<Query, BadParameter> {
        let day = |name: &'static str, v: Option<&str>| {
            v.map(|t| {
                fx::parse_day(t).map_err(|_| BadParameter {
                    name,
                    why: format!("{name} {t:?} is not a date like 2026-11-20 (YYYY-MM-DD, UTC)"),
                })
            })
            .transpose()
        };
        let (from_day, to_day) = (day("from", from)?, day("to", to)?);
        let to = to_day.unwrap_or(today);
        let from = from_day.unwrap_or(to - chrono::Duration::days(29));
        // Nothing is stored before the epoch, and a compared period before year 0 would have no
        // date like YYYY-MM-DD.
        let first = NaiveDate::from_ymd_opt(1970, 1, 1).expect("a date");
        for (name, d) in [("from", from), ("to", to)] {
            if d < first {
                return Err(BadParameter {
                    name,
                    why: format!("{name} {d} is before 1970-01-01"),
                });
            }
        }
        if from > to {
            return Err(BadParameter {
                name: "from",
                why: format!("from {from} is after to {to}"),
            });
        }
        if (to - from).num_days() + 1 > MAX_DAYS {
            return Err(BadParameter {
                name: "from",
                why: format!(
                    "from {from} to {to} covers more than {MAX_DAYS} days; move from closer to to"
                ),
            });
        }
        let by = match by {
            None => GroupBy::Source,
            Some(t) => parse_by(t).ok_or_else(|| BadParameter {
                name: "by",
                why: format!("by {t:?} is not one of source, medium, campaign, channel, type"),
            })?,
        };
        let compare = compare
            .map(|t| {
                Compare::parse(t).ok_or_else(|| BadParameter {
                    name: "compare",
                    why: format!("compare {t:?} is not one of previous, weekday"),
                })
            })
            .transpose()?;
        Ok(Query {
            from,
            to,
            by,
            compare,
        })
    }
}

/// The report's figures for one row or the totals (docs/decisions.md §11, the glossary).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Figures {
    /// Distinct visitors with a session that started in the range (in a row: whose session's
    /// channel gives the row's key).
    pub visitors: u64,
    /// Distinct visitors credited with at least one conversion counted in the range (of the row).
    pub converting_visitors: u64,
    pub conversions: u64,
    pub purchases: u64,
    /// Conversions whose value is not in the revenue yet (queued, waiting for a rate, failed).
    pub unconverted: u64,
    /// In the site currency, scaled to its minor units.
    pub gross: Decimal,
    /// Gross less net revenue.
    pub refunds: Decimal,
}

impl Figures {
    fn from_row(r: &Row) -> Figures {
        Figures {
            visitors: 0,
            converting_visitors: 0,
            conversions: r.conversions,
            purchases: r.purchases,
            unconverted: r.unconverted,
            gross: r.revenue,
            refunds: r.refunds,
        }
    }

    pub fn net(&self) -> Decimal {
        let mut net = self.gross - self.refunds;
        net.rescale(self.gross.scale().max(self.refunds.scale()));
        net
    }

    /// Converting visitors over visitors, 0 without visitors, at most 1 (a visitor whose session
    /// began before the range may convert in it).
    pub fn conversion_rate(&self) -> f64 {
        if self.visitors == 0 {
            return 0.0;
        }
        (self.converting_visitors as f64 / self.visitors as f64).min(1.0)
    }

    /// The net revenue over the purchases, rounded half away from zero to the currency's minor
    /// units; `None` without purchases.
    pub fn average_order_value(&self, currency: &str) -> Option<Decimal> {
        if self.purchases == 0 {
            return None;
        }
        let aov = self.net().checked_div(Decimal::from(self.purchases))?;
        Some(fx::round_to_minor(aov, fx::minor_units(currency)))
    }
}

/// One period of a report: its figures per key and in total.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Period {
    pub from: NaiveDate,
    pub to: NaiveDate,
    pub totals: Figures,
    /// Highest net revenue first, then most conversions, most visitors, by key.
    pub rows: Vec<(String, Figures)>,
}

/// A report: the period asked for, and the one compared with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub currency: String,
    pub by: GroupBy,
    pub current: Period,
    pub previous: Option<(Compare, Period)>,
}

/// The report of a query: what `GET /api/sites/{siteId}/report`, `convapi report` and the
/// dashboard's report page show. Reads in the caller's transaction.
pub fn report(
    conn: &impl crate::store::engine::AsConn,
    site: &Site,
    q: &Query,
) -> store::Result<Report> {
    report_dated(conn, site, q, Dated::Order)
}

/// [`report`] with the refunds by the order's day or by the adjustment's (the module doc):
/// `convapi report --dated`.
pub fn report_dated(
    conn: &impl crate::store::engine::AsConn,
    site: &Site,
    q: &Query,
    dated: Dated,
) -> store::Result<Report> {
    let current = period_dated(conn, site, q.from, q.to, q.by, dated)?;
    let previous = match q.compare {
        Some(c) => {
            let (from, to) = c.period(q.from, q.to);
            Some((c, period_dated(conn, site, from, to, q.by, dated)?))
        }
        None => None,
    };
    Ok(Report {
        currency: site.currency.clone(),
        by: q.by,
        current,
        previous,
    })
}

/// The figures of the inclusive UTC days `from..=to`: the conversions' from the rollups
/// ([`build`]), the visitors' and converting visitors' from sketches of the visitors' ids
/// ([`visitors_of`]).
pub fn period(
    conn: &impl crate::store::engine::AsConn,
    site: &Site,
    from: NaiveDate,
    to: NaiveDate,
    by: GroupBy,
) -> store::Result<Period> {
    period_dated(conn, site, from, to, by, Dated::Order)
}

/// [`period`] with the refunds by the order's day or by the adjustment's.
pub fn period_dated(
    conn: &impl crate::store::engine::AsConn,
    site: &Site,
    from: NaiveDate,
    to: NaiveDate,
    by: GroupBy,
    dated: Dated,
) -> store::Result<Period> {
    let minor = fx::minor_units(&site.currency);
    let mut rows: BTreeMap<String, Figures> =
        build_dated(conn, site, Some(from), Some(to), by, dated)?
            .iter()
            .map(|r| (r.key.clone(), Figures::from_row(r)))
            .collect();
    let mut totals = Figures::default();
    for f in rows.values() {
        totals.conversions += f.conversions;
        totals.purchases += f.purchases;
        totals.unconverted += f.unconverted;
        totals.gross += f.gross;
        totals.refunds += f.refunds;
    }
    totals.gross = fx::round_to_minor(totals.gross, minor);
    totals.refunds = fx::round_to_minor(totals.refunds, minor);
    let excluded = store::referrals::excluded(conn, &site.id)?.unwrap_or_default();
    let mut merged = visitors_of(conn, site, &excluded, from, to, by)?;
    let mut count = |kind: i64, dim: &'static str, key: &str| -> u64 {
        merged
            .get_mut(&(kind, dim, key.to_owned()))
            .map(Sketch::count)
            .unwrap_or(0)
    };
    totals.visitors = count(VISITORS, "", "");
    totals.converting_visitors = count(CONVERTING, "", "");
    let dim = dim_name(by);
    let keys: Vec<(i64, String)> = merged
        .keys()
        .filter(|(_, d, _)| *d == dim)
        .map(|(kind, _, key)| (*kind, key.clone()))
        .collect();
    for (kind, key) in keys {
        let n = merged
            .get_mut(&(kind, dim, key.clone()))
            .map(Sketch::count)
            .unwrap_or(0);
        let row = rows.entry(key).or_default();
        if kind == VISITORS {
            row.visitors = n;
        } else {
            row.converting_visitors = n;
        }
    }
    // A visit has no conversion type: every type's row counts the site's visitors.
    if by == GroupBy::Type {
        for f in rows.values_mut() {
            f.visitors = totals.visitors;
        }
    }
    let zero = fx::round_to_minor(Decimal::ZERO, minor);
    let mut rows: Vec<(String, Figures)> = rows
        .into_iter()
        .map(|(k, mut f)| {
            // Rows with visitors only: their money in the currency's places too. (A row of
            // refunds alone, by the adjustment's day, keeps them.)
            if f.conversions == 0 && f.gross.is_zero() && f.refunds.is_zero() {
                f.gross = zero;
                f.refunds = zero;
            }
            (k, f)
        })
        .collect();
    rows.sort_by(|(ka, a), (kb, b)| {
        b.net()
            .cmp(&a.net())
            .then(b.conversions.cmp(&a.conversions))
            .then(b.visitors.cmp(&a.visitors))
            .then_with(|| ka.cmp(kb))
    });
    Ok(Period {
        from,
        to,
        totals,
        rows,
    })
}

/// Sketch kinds: the visitors (from sessions) and the converting visitors (from counted
/// conversions).
pub const VISITORS: i64 = 0;
pub const CONVERTING: i64 = 1;
/// A stored day's sketch counts exactly up to this many visitors (8 bytes each), a HyperLogLog
/// beyond (`crate::sketch`: 1.6 % standard error).
pub const DAY_EXACT: usize = 512;
/// A report's merged sketch counts exactly up to this many visitors, an estimate beyond: as many
/// as a HyperLogLog has registers, so a row's exact set (8 bytes a visitor, sorted once) stays
/// within 64 KiB and a year's report over 1M orders merges in a few milliseconds per row.
pub const REPORT_EXACT: usize = crate::sketch::REGISTERS;
/// The rules a stored day's sketches were built with (`sketch_days.rules`): raised whenever what
/// decides a visitor's keys changes in the code (the channel rules, the default referral exclusion
/// list, the keys below), so that every day is built again and no report merges old keys.
/// 2: an order without a session (kept unattributed) is no converting visitor.
pub const SKETCH_RULES: i64 = 2;
/// Every grouping a stored day has sketches for, besides '' (every visitor).
pub const GROUPINGS: [GroupBy; 5] = [
    GroupBy::Source,
    GroupBy::Medium,
    GroupBy::Campaign,
    GroupBy::Channel,
    GroupBy::Type,
];

/// Sketches by (kind, grouping, key); grouping '' with key '' holds every visitor of the kind.
pub type Sketches = BTreeMap<(i64, &'static str, String), Sketch>;

/// A grouping's name in `visitor_sketches.dim`.
pub fn dim_name(by: GroupBy) -> &'static str {
    match by {
        GroupBy::Source => "source",
        GroupBy::Medium => "medium",
        GroupBy::Campaign => "campaign",
        GroupBy::Channel => "channel",
        GroupBy::Type => "type",
    }
}

fn dim_of(name: &str) -> Option<&'static str> {
    std::iter::once("")
        .chain(GROUPINGS.iter().map(|g| dim_name(*g)))
        .find(|d| *d == name)
}

/// The visitors and converting visitors of the days `from..=to`, by '' and `by`: the days whose
/// stored sketches are current (`store::sketches`, built by `crate::sketches` once a day is two
/// days past) merged, and every other day counted from its rows, into sketches exact up to
/// [`REPORT_EXACT`] visitors each.
pub fn visitors_of(
    conn: &impl crate::store::engine::AsConn,
    site: &Site,
    excluded: &[String],
    from: NaiveDate,
    to: NaiveDate,
    by: GroupBy,
) -> store::Result<Sketches> {
    let (from_ms, to_ms) = day_range(Some(from), Some(to));
    let (from_day, to_day) = (from_ms.div_euclid(DAY_MS), (to_ms - 1).div_euclid(DAY_MS));
    // The last day a build may cover: the pass builds days before the day before yesterday.
    let last_built = store::now_ms().div_euclid(DAY_MS) - 3;
    let mut merged = Sketches::new();
    let mut current: Vec<i64> = Vec::new();
    if from_day <= last_built {
        let upto = to_day.min(last_built);
        current = store::sketches::current_days(conn, &site.id, from_day, upto, SKETCH_RULES)?;
        store::sketches::each_current(
            conn,
            &site.id,
            from_day,
            upto,
            SKETCH_RULES,
            dim_name(by),
            |(kind, dim, key, bytes)| {
                let read = dim_of(&dim).is_some_and(|dim| {
                    merged
                        .entry((kind, dim, key))
                        .or_insert_with(|| Sketch::new(REPORT_EXACT))
                        .merge_encoded(&bytes)
                });
                if !read {
                    return Err(StoreError::Other(format!(
                        "a stored visitor sketch of site {} does not read",
                        site.id
                    )));
                }
                Ok(())
            },
        )?;
    }
    // The other days, in runs of consecutive days, from their rows.
    let mut day = from_day;
    let mut built = current.into_iter().peekable();
    while day <= to_day {
        while built.peek().is_some_and(|b| *b < day) {
            built.next();
        }
        if built.peek() == Some(&day) {
            day += 1;
            continue;
        }
        let end = built.peek().map_or(to_day, |b| b - 1);
        let part = sketches_of(
            conn,
            site,
            excluded,
            day * DAY_MS,
            (end + 1) * DAY_MS,
            &[by],
            REPORT_EXACT,
        )?;
        for (k, s) in part {
            merged
                .entry(k)
                .or_insert_with(|| Sketch::new(REPORT_EXACT))
                .merge(&s);
        }
        day = end + 1;
    }
    Ok(merged)
}

/// Sketches of the site's sessions and counted conversions in `[from_ms, to_ms)`, by '' and each
/// of `groupings`, each exact up to `cap` visitors. A visit's keys are its channel's, as
/// attribution decides it with the site's domain and `excluded`; a conversion's are its report
/// keys (a visit has no type).
pub fn sketches_of(
    conn: &impl crate::store::engine::AsConn,
    site: &Site,
    excluded: &[String],
    from_ms: i64,
    to_ms: i64,
    groupings: &[GroupBy],
    cap: usize,
) -> store::Result<Sketches> {
    let mut out = Sketches::new();
    let mut add = |kind: i64, dim: &'static str, key: String, h: u64| {
        out.entry((kind, dim, key))
            .or_insert_with(|| Sketch::new(cap))
            .insert_hash(h);
    };
    let own = site.domain.as_deref();
    store::report::each_visit(conn, &site.id, from_ms, to_ms, |s| {
        let h = sketch::hash(&s.visitor_id);
        add(VISITORS, "", String::new(), h);
        let ch = crate::attribution::channel_with(&s, own, excluded);
        for by in groupings {
            let key = match by {
                GroupBy::Source => ch.source.clone(),
                GroupBy::Medium => ch.medium.clone(),
                GroupBy::Campaign => ch.campaign.clone().unwrap_or_else(|| NOT_SET.to_owned()),
                GroupBy::Channel => {
                    crate::attribution::channel_group(&ch.source, &ch.medium).to_owned()
                }
                GroupBy::Type => continue,
            };
            add(VISITORS, dim_name(*by), key, h);
        }
        Ok::<_, StoreError>(())
    })?;
    store::report::each_converter(conn, &site.id, from_ms, to_ms, |c| {
        let h = sketch::hash(&c.visitor_id);
        add(CONVERTING, "", String::new(), h);
        for by in groupings {
            let column = match by {
                GroupBy::Source => c.source.clone(),
                GroupBy::Medium => c.medium.clone(),
                GroupBy::Campaign => c.campaign.clone(),
                GroupBy::Channel => match (&c.source, &c.medium) {
                    (Some(s), Some(m)) => {
                        Some(format!("{s}{}{m}", store::report::CHANNEL_SEPARATOR))
                    }
                    _ => None,
                },
                GroupBy::Type => Some(c.kind.clone()),
            };
            add(CONVERTING, dim_name(*by), key(*by, c.attributed, column), h);
        }
        Ok::<_, StoreError>(())
    })?;
    Ok(out)
}

/// One period's figures as JSON: the money as exact decimal strings in the site currency.
fn figures_json(f: &Figures, currency: &str) -> serde_json::Value {
    serde_json::json!({
        "visitors": f.visitors,
        "convertingVisitors": f.converting_visitors,
        "conversionRate": f.conversion_rate(),
        "conversions": f.conversions,
        "purchases": f.purchases,
        "unconverted": f.unconverted,
        "grossRevenue": f.gross.to_string(),
        "refunds": f.refunds.to_string(),
        "netRevenue": f.net().to_string(),
        "averageOrderValue": f.average_order_value(currency).map(|d| d.to_string()),
    })
}

fn period_json(p: &Period, currency: &str) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = p
        .rows
        .iter()
        .map(|(k, f)| {
            let mut v = figures_json(f, currency);
            v["key"] = serde_json::Value::String(k.clone());
            // The name a row's gross revenue had in the command line's first report.
            v["revenue"] = serde_json::Value::String(f.gross.to_string());
            v
        })
        .collect();
    serde_json::json!({
        "from": p.from.to_string(),
        "to": p.to.to_string(),
        "totals": figures_json(&p.totals, currency),
        "rows": rows,
    })
}

/// The report as the API answers it (and `convapi report --json` prints it): `currency`, `from`,
/// `to`, `by`, `totals`, `rows` (each also with `revenue`, the same as its `grossRevenue`), and
/// with a comparison `previous` (`compare`, `from`, `to`, `totals`, `rows`).
pub fn report_json(r: &Report) -> serde_json::Value {
    let mut v = period_json(&r.current, &r.currency);
    v["currency"] = serde_json::Value::String(r.currency.clone());
    v["by"] = serde_json::Value::String(by_name(r.by).to_owned());
    if let Some((c, p)) = &r.previous {
        let mut prev = period_json(p, &r.currency);
        prev["compare"] = serde_json::Value::String(c.as_str().to_owned());
        v["previous"] = prev;
    }
    v
}

/// The report as an aligned table with a total line (the previous period's totals below):
/// `convapi report`'s output without `--json`.
pub fn report_table(r: &Report) -> String {
    let head = [
        by_name(r.by).to_ascii_uppercase(),
        "VISITORS".into(),
        "CONVERTING".into(),
        "RATE".into(),
        "CONVERSIONS".into(),
        format!("GROSS ({})", r.currency),
        "REFUNDS".into(),
        "NET".into(),
        "AOV".into(),
        "UNCONVERTED".into(),
    ];
    let cells = |k: &str, f: &Figures| -> [String; 10] {
        [
            k.to_owned(),
            f.visitors.to_string(),
            f.converting_visitors.to_string(),
            format!("{:.2}%", f.conversion_rate() * 100.0),
            f.conversions.to_string(),
            f.gross.to_string(),
            f.refunds.to_string(),
            f.net().to_string(),
            f.average_order_value(&r.currency)
                .map(|d| d.to_string())
                .unwrap_or_else(|| "-".into()),
            f.unconverted.to_string(),
        ]
    };
    let mut lines: Vec<[String; 10]> = vec![head];
    lines.extend(r.current.rows.iter().map(|(k, f)| cells(k, f)));
    lines.push(cells("TOTAL", &r.current.totals));
    if let Some((c, p)) = &r.previous {
        lines.push(cells(
            &format!("{} {}..{}", c.as_str().to_ascii_uppercase(), p.from, p.to),
            &p.totals,
        ));
    }
    let mut widths = [0usize; 10];
    for line in &lines {
        for (w, c) in widths.iter_mut().zip(line) {
            *w = (*w).max(c.chars().count());
        }
    }
    lines
        .iter()
        .map(|line| {
            let mut out = format!("{:<w$}", line[0], w = widths[0]);
            for (cell, w) in line.iter().zip(widths).skip(1) {
                out.push_str(&format!("  {cell:>w$}"));
            }
            out
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(
        visitors: u64,
        converting: u64,
        purchases: u64,
        gross: &str,
        refunds: &str,
    ) -> Figures {
        Figures {
            visitors,
            converting_visitors: converting,
            conversions: purchases + 1,
            purchases,
            unconverted: 1,
            gross: Decimal::from_str_exact(gross).unwrap(),
            refunds: Decimal::from_str_exact(refunds).unwrap(),
        }
    }

    /// `convapi report`'s table: every figure and the unconverted count, aligned, a total line,
    /// and the compared period's totals below.
    #[test]
    fn table_is_aligned_with_a_total_and_the_previous_period() {
        let day = NaiveDate::from_ymd_opt(2026, 11, 13).unwrap();
        let period = |rows: Vec<(String, Figures)>, totals: Figures, d: NaiveDate| Period {
            from: d,
            to: d,
            totals,
            rows,
        };
        let report = Report {
            currency: "EUR".into(),
            by: GroupBy::Channel,
            current: period(
                vec![
                    ("Email".into(), figures(4, 1, 1, "1045.20", "10.00")),
                    ("Direct".into(), figures(2, 0, 0, "0.00", "-5.05")),
                ],
                figures(6, 1, 1, "1045.20", "4.95"),
                day,
            ),
            previous: Some((
                Compare::Previous,
                period(
                    vec![],
                    figures(0, 0, 0, "0.00", "0.00"),
                    day.pred_opt().unwrap(),
                ),
            )),
        };
        assert_eq!(
            report_table(&report),
            "CHANNEL                          VISITORS  CONVERTING    RATE  CONVERSIONS  GROSS (EUR)  REFUNDS      NET      AOV  UNCONVERTED\n\
             Email                                   4           1  25.00%            2      1045.20    10.00  1035.20  1035.20            1\n\
             Direct                                  2           0   0.00%            1         0.00    -5.05     5.05        -            1\n\
             TOTAL                                   6           1  16.67%            2      1045.20     4.95  1040.25  1040.25            1\n\
             PREVIOUS 2026-11-12..2026-11-12         0           0   0.00%            1         0.00     0.00     0.00        -            1"
        );
    }

    /// A compared period before year 0 has no YYYY-MM-DD date (schemathesis found the report
    /// answering `"from": "-0003-12-25"`): days before the epoch are refused, naming the parameter.
    #[test]
    fn days_before_the_epoch_are_refused() {
        let today = NaiveDate::from_ymd_opt(2026, 11, 27).unwrap();
        let bad =
            Query::parse(Some("0004-01-01"), Some("0010-01-01"), None, None, today).unwrap_err();
        assert_eq!(bad.name, "from");
        let bad =
            Query::parse(Some("1970-01-01"), Some("1969-12-31"), None, None, today).unwrap_err();
        assert_eq!(bad.name, "to");
        let ok = Query::parse(Some("1970-01-01"), Some("1970-01-31"), None, None, today).unwrap();
        assert_eq!(ok.from, NaiveDate::from_ymd_opt(1970, 1, 1).unwrap());
    }
}
