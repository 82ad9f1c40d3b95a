//! A site's report: the rows of `convapi report` for a range of days grouped by source, medium,
//! campaign or type, the chart of conversions and revenue per day, and the rows as CSV.
//!
//! The numbers come only from `crate::report::build` and `crate::report::daily`, the CLI's own
//! path, so the page and `convapi report` cannot disagree. The chart is `chart::svg`'s string of
//! numbers and constant text, the one thing embedded unescaped (`PreEscaped`).

use std::collections::HashMap;

use chrono::NaiveDate;
use maud::{html, PreEscaped};

use super::layout::{self, SiteTab};
use super::{chart, form, Dashboard, PageError, PageResult, Viewer};
use crate::http::Ctx;
use crate::report::{self as rep, Row};
use crate::store::report::GroupBy;
use crate::store::sites::Site;

/// Days a report covers when the query names no range: the last 30, today included.
pub const DEFAULT_DAYS: u64 = 30;
/// The longest range a page or CSV covers (three years): the chart draws every day.
pub const MAX_DAYS: i64 = 1096;

const GROUPS: [(&str, &str); 4] = [
    ("source", "Source"),
    ("medium", "Medium"),
    ("campaign", "Campaign"),
    ("type", "Type"),
];

/// A checked report query.
struct Range {
    from: NaiveDate,
    to: NaiveDate,
    by: GroupBy,
    by_name: &'static str,
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
                "from ({from}) is after to ({to})."
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
            "type" => (GroupBy::Type, "type"),
            _ => {
                return Err(PageError::BadRequest(
                    "by must be one of source, medium, campaign, type.".into(),
                ))
            }
        };
        Ok(Range {
            from,
            to,
            by,
            by_name,
        })
    }

    fn query(&self) -> String {
        format!("from={}&to={}&by={}", self.from, self.to, self.by_name)
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
    }
}

/// `GET /dashboard/sites/{id}/report?from=&to=&by=`.
pub fn page(d: &Dashboard, ctx: &mut Ctx, v: &Viewer, site: &Site) -> PageResult {
    let r = Range::parse(&form::query(ctx), today())?;
    let (rows, days) = d.read(|c| {
        let rows =
            rep::build(c, site, Some(r.from), Some(r.to), r.by).map_err(PageError::Internal)?;
        let days = rep::daily(c, site, Some(r.from), Some(r.to)).map_err(PageError::Internal)?;
        Ok((rows, days))
    })?;
    let svg = chart::svg(&days, r.from, r.to, &site.currency);
    let sum = total(&rows, &site.currency);
    let base = format!("/dashboard/sites/{}", site.id);
    let label = GROUPS
        .iter()
        .find(|(n, _)| *n == r.by_name)
        .map_or("Source", |(_, l)| *l);
    let body = html! {
        div.page-head {
            h1 { "Report" }
            a.button.secondary #report-csv href={ (base) "/report.csv?" (r.query()) } { "Download CSV" }
        }
        form.filters #report-form method="get" action={ (base) "/report" } {
            div.field {
                label for="r-from" { "From" }
                input #r-from type="date" name="from" value=(r.from.to_string());
            }
            div.field {
                label for="r-to" { "To" }
                input #r-to type="date" name="to" value=(r.to.to_string());
            }
            div.field {
                label for="r-by" { "Group by" }
                select #r-by name="by" {
                    @for (value, text) in GROUPS {
                        option value=(value) selected[value == r.by_name] { (text) }
                    }
                }
            }
            div.field.actions { button type="submit" { "Show" } }
        }
        figure.card.chart-card {
            // The chart is built from numbers and constant text only (see chart.rs).
            (PreEscaped(svg))
            figcaption.hint { "Conversions per day (bars, left axis) and revenue in " (site.currency) " (line, right axis), " (r.from) " to " (r.to) ", UTC days." }
        }
        div.table-wrap {
            table #report {
                thead { tr {
                    th { (label) } th.num { "Conversions" } th.num { "Revenue (" (site.currency) ")" } th.num { "Unconverted" }
                } }
                tbody {
                    @for row in &rows {
                        tr.report-row {
                            td { (row.key) }
                            td.num { (row.conversions) }
                            td.num { (row.revenue) }
                            td.num { (row.unconverted) }
                        }
                    }
                    tr.total #report-total {
                        td { (sum.key) }
                        td.num { (sum.conversions) }
                        td.num { (sum.revenue) }
                        td.num { (sum.unconverted) }
                    }
                }
            }
        }
        p.hint { "Revenue counts processed conversions, converted to " (site.currency)
            "; unconverted ones (queued, waiting for rates, or failed) are counted apart." }
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
    let r = Range::parse(&form::query(ctx), today())?;
    let rows = d.read(|c| {
        rep::build(c, site, Some(r.from), Some(r.to), r.by).map_err(PageError::Internal)
    })?;
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
    for row in &rows {
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
        &format!("report-{}-{}-{}-{}.csv", r.by_name, r.from, r.to, site.id),
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
