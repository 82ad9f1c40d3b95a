//! A site's report: the rows of `convapi report` for a range of days grouped by source, medium,
//! campaign or type, with preset ranges, a comparison of its totals with the previous period of
//! as many days, the chart of conversions and revenue per day, and the rows (and their total) as
//! CSV.
//!
//! The numbers come only from `crate::report::build` and `crate::report::daily`, the CLI's own
//! path, so the page and `convapi report` cannot disagree. The chart is `chart::svg`'s string of
//! numbers and constant text, the one thing embedded unescaped (`PreEscaped`).

use std::collections::HashMap;

use chrono::{Datelike, NaiveDate};
use maud::{html, PreEscaped};
use rust_decimal::Decimal;

use super::layout::{self, SiteTab};
use super::{chart, form, Dashboard, PageError, PageResult, Viewer};
use crate::http::Ctx;
use crate::report::{self as rep, Row};
use crate::store::report::{Dated, GroupBy};
use crate::store::sites::Site;

/// Days a report covers when the query names no range: the last 30, today included.
pub const DEFAULT_DAYS: u64 = 30;
/// The longest range a page or CSV covers (three years): the chart draws every day.
pub const MAX_DAYS: i64 = 1096;

const GROUPS: [(&str, &str); 5] = [
    ("source", "Source"),
    ("medium", "Medium"),
    ("campaign", "Campaign"),
    ("channel", "Channel"),
    ("type", "Type"),
];

/// A checked report query.
struct Range {
    from: NaiveDate,
    to: NaiveDate,
    by: GroupBy,
    by_name: &'static str,
    dated: Dated,
    compare: rep::Compare,
}

impl Range {
    fn parse(q: &HashMap<String, String>, today: NaiveDate) -> Result<Range, PageError> {
        let get = |name: &str| q.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
        let to = get("to").map(form::day).transpose()?.unwrap_or(today);
        let from = match get("from").map(form::day).transpose()? {
            Some(f) => f,
            None => to
                .checked_sub_days(chrono::Days::new(DEFAULT_DAYS - 1))
                .unwrap_or(to),
        };
        if from > to {
            return Err(PageError::BadRequest(format!(
                "The range ends before it starts: From ({from}) is after To ({to}). Swap them."
            )));
        }
        if (to - from).num_days() + 1 > MAX_DAYS {
            return Err(PageError::BadRequest(format!(
                "A report covers at most {MAX_DAYS} days."
            )));
        }
        let (by, by_name) = match get("by").unwrap_or("source") {
            "source" => (GroupBy::Source, "source"),
            "medium" => (GroupBy::Medium, "medium"),
            "campaign" => (GroupBy::Campaign, "campaign"),
            "channel" => (GroupBy::Channel, "channel"),
            "type" => (GroupBy::Type, "type"),
            _ => {
                return Err(PageError::BadRequest(
                    "by must be one of source, medium, campaign, channel, type.".into(),
                ))
            }
        };
        let dated = match get("dated").unwrap_or("order") {
            "order" => Dated::Order,
            "adjustment" => Dated::Adjustment,
            _ => {
                return Err(PageError::BadRequest(
                    "dated must be order or adjustment.".into(),
                ))
            }
        };
        let compare = match get("compare").unwrap_or("previous") {
            "previous" => rep::Compare::Previous,
            "weekday" => rep::Compare::Weekday,
            _ => {
                return Err(PageError::BadRequest(
                    "compare must be previous or weekday.".into(),
                ))
            }
        };
        Ok(Range {
            from,
            to,
            by,
            by_name,
            dated,
            compare,
        })
    }

    fn query(&self) -> String {
        format!(
            "from={}&to={}&by={}&dated={}",
            self.from,
            self.to,
            self.by_name,
            dated_name(self.dated)
        )
    }
}

fn dated_name(dated: Dated) -> &'static str {
    match dated {
        Dated::Order => "order",
        Dated::Adjustment => "adjustment",
    }
}

fn today() -> NaiveDate {
    chrono::Utc::now().date_naive()
}

fn total(rows: &[Row], currency: &str) -> Row {
    Row {
        key: "Total".into(),
        conversions: rows.iter().map(|r| r.conversions).sum(),
        revenue: crate::fx::round_to_minor(
            rows.iter().fold(rust_decimal::Decimal::ZERO, |a, r| {
                a.saturating_add(r.revenue)
            }),
            crate::fx::minor_units(currency),
        ),
        unconverted: rows.iter().map(|r| r.unconverted).sum(),
        refunds: crate::fx::round_to_minor(
            rows.iter().fold(rust_decimal::Decimal::ZERO, |a, r| {
                a.saturating_add(r.refunds)
            }),
            crate::fx::minor_units(currency),
        ),
        purchases: rows.iter().map(|r| r.purchases).sum(),
    }
}

/// The ranges offered as links above the form, relative to `today`: today, the last 7 and 30
/// days (today included), the month so far, the last whole month.
pub fn presets(today: NaiveDate) -> [(&'static str, NaiveDate, NaiveDate); 5] {
    let back = |n: u64| {
        today
            .checked_sub_days(chrono::Days::new(n))
            .unwrap_or(today)
    };
    let month_start = today.with_day(1).unwrap_or(today);
    let last_month_end = month_start.pred_opt().unwrap_or(month_start);
    let last_month_start = last_month_end.with_day(1).unwrap_or(last_month_end);
    [
        ("Today", today, today),
        ("Last 7 days", back(6), today),
        ("Last 30 days", back(29), today),
        ("Month to date", month_start, today),
        ("Last month", last_month_start, last_month_end),
    ]
}

/// The period of the same number of days just before `from..=to`.
pub fn previous_period(from: NaiveDate, to: NaiveDate) -> (NaiveDate, NaiveDate) {
    let days = (to - from).num_days() + 1;
    let prev_to = from.pred_opt().unwrap_or(from);
    let prev_from = prev_to
        .checked_sub_days(chrono::Days::new((days - 1).max(0) as u64))
        .unwrap_or(prev_to);
    (prev_from, prev_to)
}

/// The change from `before` to `now` in per cent, one decimal, signed; `None` from zero.
pub fn change(before: Decimal, now: Decimal) -> Option<String> {
    if before.is_zero() {
        return None;
    }
    let mut pct = ((now - before) / before * Decimal::ONE_HUNDRED).round_dp(1);
    // One decimal always: 25 % is "25.0%", as 66.7 % is "66.7%".
    pct.rescale(1);
    let pct = pct.to_string();
    Some(if !pct.starts_with('-') && pct != "0.0" {
        format!("+{pct}%")
    } else {
        format!("{pct}%")
    })
}

/// The comparison of one figure: now, before, and the change.
fn compared(label: &str, now: &str, before: &str, pct: Option<String>) -> maud::Markup {
    let class = match pct.as_deref() {
        Some(p) if p.starts_with('+') => "up",
        Some(p) if p.starts_with('-') => "down",
        _ => "",
    };
    html! {
        span.figure {
            (label) " " strong { (now) } " (before: " (before)
            @if let Some(p) = pct { ", " span class=(class) { (p) } }
            ")"
        }
    }
}

/// The range links and the form, with what was typed.
fn report_form(
    base: &str,
    from: &str,
    to: &str,
    by: &str,
    dated: &str,
    today: NaiveDate,
) -> maud::Markup {
    html! {
        nav.presets #presets aria-label="Ranges" {
            @for (name, f, t) in presets(today) {
                @let href = format!("{base}/report?from={f}&to={t}&by={by}");
                @if from == f.to_string() && to == t.to_string() {
                    a.current href=(href) aria-current="true" { (name) }
                } @else {
                    a href=(href) { (name) }
                }
            }
        }
        form.filters #report-form method="get" action={ (base) "/report" } {
            div.field {
                label for="r-from" { "From" }
                input #r-from type="date" name="from" value=(from);
            }
            div.field {
                label for="r-to" { "To" }
                input #r-to type="date" name="to" value=(to);
            }
            div.field {
                label for="r-by" { "Group by" }
                select #r-by name="by" {
                    @for (value, text) in GROUPS {
                        option value=(value) selected[value == by] { (text) }
                    }
                }
            }
            div.field {
                label for="r-dated" { "Refunds by" }
                select #r-dated name="dated" {
                    option value="order" selected[dated != "adjustment"] { "Order date" }
                    option value="adjustment" selected[dated == "adjustment"] { "Adjustment date" }
                }
            }
            div.field.actions { button type="submit" { "Show" } }
        }
    }
}

/// `GET /dashboard/sites/{id}/report?from=&to=&by=`. A range the form cannot make sense of (one
/// that ends before it starts, or too long) shows the form again with the message.
pub fn page(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site) -> PageResult {
    let q = form::query(ctx);
    let base = format!("/dashboard/sites/{}", site.id);
    let today = today();
    let r = match Range::parse(&q, today) {
        Ok(r) => r,
        Err(PageError::BadRequest(msg)) => {
            let typed = |k: &str| q.get(k).map(|v| v.trim().to_owned()).unwrap_or_default();
            let by = GROUPS
                .iter()
                .map(|(n, _)| *n)
                .find(|n| *n == typed("by"))
                .unwrap_or("source");
            let body = html! {
                div.page-head { h1 { "Report" } }
                (layout::form_error(Some(&msg)))
                (report_form(&base, &typed("from"), &typed("to"), by, &typed("dated"), today))
            };
            return Ok(layout::html(
                400,
                layout::site_page(v, site, SiteTab::Report, "Report", body),
            ));
        }
        Err(e) => return Err(e),
    };
    let (prev_from, prev_to) = previous_period(r.from, r.to);
    let (rows, days, prev_rows, figures, progress) = d.read(|c| {
        let rows = rep::build_dated(c, site, Some(r.from), Some(r.to), r.by, r.dated)?;
        let days = rep::daily(c, site, Some(r.from), Some(r.to))?;
        let prev = rep::build_dated(c, site, Some(prev_from), Some(prev_to), r.by, r.dated)?;
        let figures = rep::report(c, site, &r.figures_query())?;
        let progress = crate::store::referrals::progress(c, &site.id)?;
        Ok((rows, days, prev, figures, progress))
    })?;
    let svg = chart::svg(&days, r.from, r.to, &site.currency);
    let sum = total(&rows, &site.currency);
    let prev = total(&prev_rows, &site.currency);
    let label = GROUPS
        .iter()
        .find(|(n, _)| *n == r.by_name)
        .map_or("Source", |(_, l)| *l);
    let money = |d: Decimal| format!("{} {}", layout::thousands(&d.to_string()), site.currency);
    let body = html! {
        div.page-head {
            h1 { "Report" }
            a.button.secondary #report-csv href={ (base) "/report.csv?" (r.query()) } { "Download CSV" }
        }
        (report_form(&base, &r.from.to_string(), &r.to.to_string(), r.by_name, dated_name(r.dated), today))
        p.compare #compare {
            "Compared with the previous period (" (prev_from) " to " (prev_to) "): "
            (compared("conversions", &layout::thousands(&sum.conversions.to_string()), &layout::thousands(&prev.conversions.to_string()),
                change(Decimal::from(prev.conversions), Decimal::from(sum.conversions))))
            "; "
            (compared("revenue", &money(sum.revenue), &money(prev.revenue), change(prev.revenue, sum.revenue)))
            "; "
            (compared("net revenue", &money(sum.net()), &money(prev.net()), change(prev.net(), sum.net())))
            "."
        }
        figure.card.chart-card {
            // The chart is built from numbers and constant text only (see chart.rs).
            (PreEscaped(svg))
            figcaption.hint { "Conversions per day (bars, left axis) and revenue in " (site.currency) " (line, right axis), " (r.from) " to " (r.to) ", UTC days." }
        }
        p.scroll-hint { "The table is wider than the screen: swipe it sideways for every column." }
        div.table-wrap {
            table #report {
                thead { tr {
                    th { (label) } th.num { "Conversions" } th.num { "Revenue (" (site.currency) ")" }
                    th.num { abbr title="Not yet in the site's currency: queued, waiting for exchange rates, or failed" { "Unconverted" } }
                    th.num { abbr title="Gross less net revenue: refunds, cancellations and restatements (negative after a restatement upwards)" { "Refunds" } }
                    th.num { "Net revenue" }
                } }
                tbody {
                    @for row in &rows {
                        tr.report-row {
                            td { (row.key) }
                            td.num { (layout::thousands(&row.conversions.to_string())) }
                            td.num { (layout::thousands(&row.revenue.to_string())) }
                            td.num { (row.unconverted) }
                            td.num { (layout::thousands(&row.refunds.to_string())) }
                            td.num { (layout::thousands(&row.net().to_string())) }
                        }
                    }
                    tr.total #report-total {
                        td { (sum.key) }
                        td.num { (layout::thousands(&sum.conversions.to_string())) }
                        td.num { (layout::thousands(&sum.revenue.to_string())) }
                        td.num { (sum.unconverted) }
                        td.num { (layout::thousands(&sum.refunds.to_string())) }
                        td.num { (layout::thousands(&sum.net().to_string())) }
                    }
                }
            }
        }
        (figures_card(&base, &r, &figures, progress.as_ref()))
        p.hint { "Revenue counts processed conversions, converted to " (site.currency)
            ", as first reported; refunds are what their refunds, cancellations and restatements took off it (by the order's date, or by the adjustment's), and net revenue is revenue less refunds. Unconverted: conversions not yet in " (site.currency) " (queued, waiting for exchange rates, or failed), counted apart; "
            (crate::attribution::NOT_SET) " is a visit without that UTM parameter (null in the API)." }
    };
    Ok(layout::html(
        200,
        layout::site_page(v, site, SiteTab::Report, "Report", body),
    ))
}

/// `GET /dashboard/sites/{id}/report.csv?from=&to=&by=`: the report's rows, one per key, with
/// the currency in a column of its own. The key is the visitors' text (a UTM value): `crate::csv`
/// neutralises it; the counts and the revenue are our numbers.
pub fn csv(d: &Dashboard, ctx: &mut Ctx, _v: &Viewer, site: &Site) -> PageResult {
    let q = form::query(ctx);
    let r = Range::parse(&q, today())?;
    if q.get("figures").is_some_and(|v| v == "1") {
        return figures_csv(d, &r, site);
    }
    let rows = d.read(|c| Ok(rep::build(c, site, Some(r.from), Some(r.to), r.by)?))?;
    let mut out = Vec::with_capacity(128 + rows.len() * 64);
    let io = |e: std::io::Error| PageError::Internal(e.to_string());
    crate::csv::record(
        &mut out,
        [
            r.by_name,
            "conversions",
            "revenue",
            "currency",
            "unconverted",
        ],
    )
    .map_err(io)?;
    // The rows, then the total row of the page.
    for row in rows.iter().chain([&total(&rows, &site.currency)]) {
        crate::csv::record(
            &mut out,
            [
                row.key.clone().into(),
                crate::csv::number(row.conversions),
                crate::csv::number(row.revenue),
                site.currency.clone().into(),
                crate::csv::number(row.unconverted),
            ],
        )
        .map_err(io)?;
    }
    Ok(layout::csv(
        &format!(
            "report-{}-by-{}-{}-{}.csv",
            layout::slug(&site.name),
            r.by_name,
            r.from,
            r.to
        ),
        out,
    ))
}

impl Range {
    fn figures_query(&self) -> rep::Query {
        rep::Query {
            from: self.from,
            to: self.to,
            by: self.by,
            compare: Some(self.compare),
        }
    }
}

/// A figure's column head, its tooltip the glossary's text.
fn head(figure: &str, text: &str) -> maud::Markup {
    html! { th.num { abbr title=(rep::meaning(figure)) { (text) } } }
}

/// The figures of docs/decisions.md §11 per key and in total, the total beside the compared
/// period's with the change; what the last re-attribution did.
fn figures_card(
    base: &str,
    r: &Range,
    report: &rep::Report,
    progress: Option<&crate::store::referrals::Progress>,
) -> maud::Markup {
    let cur = &report.currency;
    let aov = |f: &rep::Figures| {
        f.average_order_value(cur)
            .map_or("–".to_owned(), |d| layout::thousands(&d.to_string()))
    };
    let rate = |f: &rep::Figures| format!("{:.2}%", f.conversion_rate() * 100.0);
    let other = match r.compare {
        rep::Compare::Previous => "weekday",
        rep::Compare::Weekday => "previous",
    };
    let other_href = format!(
        "{base}/report?from={}&to={}&by={}&dated={}&compare={other}",
        r.from,
        r.to,
        r.by_name,
        dated_name(r.dated)
    );
    html! {
        section.card #figures-card {
            h2 { "Visitors, conversion and order value" }
            @if let Some(p) = progress {
                @if p.running {
                    p.notice #reattribution { "Re-attributing this site's conversions after its referral exclusion list changed: "
                        (p.done) " looked at so far, " (p.changed) " changed source. The figures follow as it goes." }
                } @else if let Some(at) = p.finished_at {
                    p.notice #reattribution { "Conversions were re-attributed on " (layout::date(at)) " after the referral exclusion list changed: "
                        (p.done) " looked at, " (p.changed) " changed source." }
                }
            }
            @if let Some((c, prev)) = &report.previous {
                @let t = &report.current.totals;
                @let p = &prev.totals;
                p.compare #figures-compare {
                    "Compared with " (prev.from) " to " (prev.to)
                    (match c { rep::Compare::Previous => " (the days before)", rep::Compare::Weekday => " (same weekdays)" })
                    ": "
                    (compared("visitors", &t.visitors.to_string(), &p.visitors.to_string(), change(Decimal::from(p.visitors), Decimal::from(t.visitors))))
                    "; "
                    (compared("conversion rate", &rate(t), &rate(p), change(Decimal::from_f64_retain(p.conversion_rate()).unwrap_or_default(), Decimal::from_f64_retain(t.conversion_rate()).unwrap_or_default())))
                    "; "
                    (compared("net revenue", &layout::thousands(&t.net().to_string()), &layout::thousands(&p.net().to_string()), change(p.net(), t.net())))
                    "; "
                    (compared("average order value", &aov(t), &aov(p), match (p.average_order_value(cur), t.average_order_value(cur)) { (Some(a), Some(b)) => change(a, b), _ => None }))
                    ". "
                    a #figures-other-compare href=(other_href) { "Compare with " (other) " instead" }
                }
            }
            div.table-wrap {
                table #figures {
                    thead { tr {
                        th { (GROUPS.iter().find(|(n, _)| *n == r.by_name).map_or("Source", |(_, l)| *l)) }
                        (head("visitors", "Visitors")) (head("convertingVisitors", "Converting"))
                        (head("conversionRate", "Conversion rate")) (head("conversions", "Conversions"))
                        (head("grossRevenue", &format!("Gross ({cur})"))) (head("refunds", "Refunds"))
                        (head("netRevenue", "Net revenue")) (head("averageOrderValue", "Avg. order value"))
                    } }
                    tbody {
                        @for (key, f) in report.current.rows.iter().map(|(k, f)| (k.as_str(), f)).chain([("Total", &report.current.totals)]) {
                            tr.figures-row.total[std::ptr::eq(f, &report.current.totals)] {
                                td { (key) }
                                td.num { (layout::thousands(&f.visitors.to_string())) }
                                td.num { (layout::thousands(&f.converting_visitors.to_string())) }
                                td.num { (rate(f)) }
                                td.num { (layout::thousands(&f.conversions.to_string())) }
                                td.num { (layout::thousands(&f.gross.to_string())) }
                                td.num { (layout::thousands(&f.refunds.to_string())) }
                                td.num { (layout::thousands(&f.net().to_string())) }
                                td.num { (aov(f)) }
                            }
                        }
                    }
                }
            }
            p { a.button.secondary #figures-csv href={ (base) "/report.csv?figures=1&" (r.query()) } { "Download these figures (CSV)" } }
        }
    }
}

/// `report.csv?figures=1&…`: the figures of the card, one row per key then the total, money in
/// the site currency; every cell through `crate::csv`.
fn figures_csv(d: &Dashboard, r: &Range, site: &Site) -> PageResult {
    let report = d.read(|c| Ok(rep::report(c, site, &r.figures_query())?))?;
    let mut out = Vec::with_capacity(256 + report.current.rows.len() * 96);
    let io = |e: std::io::Error| PageError::Internal(e.to_string());
    crate::csv::record(
        &mut out,
        [
            r.by_name,
            "visitors",
            "convertingVisitors",
            "conversionRate",
            "conversions",
            "purchases",
            "grossRevenue",
            "refunds",
            "netRevenue",
            "averageOrderValue",
            "currency",
        ],
    )
    .map_err(io)?;
    let cur = &report.currency;
    for (key, f) in report
        .current
        .rows
        .iter()
        .map(|(k, f)| (k.as_str(), f))
        .chain([("Total", &report.current.totals)])
    {
        crate::csv::record(
            &mut out,
            [
                crate::csv::Field::from(key.to_owned()),
                crate::csv::number(f.visitors),
                crate::csv::number(f.converting_visitors),
                crate::csv::number(f.conversion_rate()),
                crate::csv::number(f.conversions),
                crate::csv::number(f.purchases),
                crate::csv::number(f.gross),
                crate::csv::number(f.refunds),
                crate::csv::number(f.net()),
                f.average_order_value(cur)
                    .map_or(crate::csv::Field::from(String::new()), crate::csv::number),
                crate::csv::Field::from(cur.clone()),
            ],
        )
        .map_err(io)?;
    }
    Ok(layout::csv(
        &format!(
            "figures-{}-by-{}-{}-{}.csv",
            layout::slug(&site.name),
            r.by_name,
            r.from,
            r.to
        ),
        out,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_default_range_is_the_last_30_days_by_source() {
        let today: NaiveDate = "2026-11-23".parse().unwrap();
        let r = Range::parse(&q(&[]), today).unwrap();
        assert_eq!(
            (r.from.to_string(), r.to.to_string()),
            ("2026-10-25".into(), "2026-11-23".into())
        );
        assert_eq!(r.by, GroupBy::Source);
        let r = Range::parse(&q(&[("to", "2026-01-10"), ("by", "type")]), today).unwrap();
        assert_eq!(r.from.to_string(), "2025-12-12");
        assert_eq!(r.by, GroupBy::Type);
    }

    #[test]
    fn presets_and_the_previous_period() {
        let today: NaiveDate = "2026-03-10".parse().unwrap();
        let p: Vec<(String, String)> = presets(today)
            .iter()
            .map(|(_, f, t)| (f.to_string(), t.to_string()))
            .collect();
        let want = [
            ("2026-03-10", "2026-03-10"),
            ("2026-03-04", "2026-03-10"),
            ("2026-02-09", "2026-03-10"),
            ("2026-03-01", "2026-03-10"),
            ("2026-02-01", "2026-02-28"),
        ];
        for (got, (f, t)) in p.iter().zip(want) {
            assert_eq!((got.0.as_str(), got.1.as_str()), (f, t));
        }
        let d = |s: &str| s.parse::<NaiveDate>().unwrap();
        assert_eq!(
            previous_period(d("2026-03-04"), d("2026-03-10")),
            (d("2026-02-25"), d("2026-03-03"))
        );
        assert_eq!(
            previous_period(d("2026-03-10"), d("2026-03-10")),
            (d("2026-03-09"), d("2026-03-09"))
        );
        assert_eq!(
            change(Decimal::from(4), Decimal::from(5)).as_deref(),
            Some("+25.0%")
        );
        assert_eq!(
            change(Decimal::from(3), Decimal::from(1)).as_deref(),
            Some("-66.7%")
        );
        assert_eq!(
            change(Decimal::from(2), Decimal::from(2)).as_deref(),
            Some("0.0%")
        );
        assert_eq!(change(Decimal::ZERO, Decimal::from(2)), None);
    }

    #[test]
    fn bad_ranges_are_refused() {
        let today: NaiveDate = "2026-11-23".parse().unwrap();
        for pairs in [
            vec![("from", "2026-11-02"), ("to", "2026-11-01")],
            vec![("from", "2020-01-01"), ("to", "2026-11-01")],
            vec![("from", "yesterday")],
            vec![("by", "<script>")],
        ] {
            assert!(
                matches!(
                    Range::parse(&q(&pairs), today),
                    Err(PageError::BadRequest(_))
                ),
                "{pairs:?}"
            );
        }
        let r = Range::parse(&q(&[("from", "2023-11-24"), ("to", "2026-11-23")]), today).unwrap();
        assert_eq!((r.to - r.from).num_days() + 1, MAX_DAYS);
    }
}
