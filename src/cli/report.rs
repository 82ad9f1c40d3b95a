//! `convapi report`: its options and their checks; the grouping and sums are `crate::report`'s.

use super::{open, CliResult};
use crate::invalid::Invalid;
use crate::store::engine::Location;

#[derive(clap::Args)]
pub(super) struct ReportArgs {
    /// The site's id (UUID).
    #[arg(long)]
    site: String,
    /// First day included (YYYY-MM-DD, UTC), by the conversions' occurredAt.
    #[arg(long, value_parser = parse_day)]
    from: Option<chrono::NaiveDate>,
    /// Last day included (YYYY-MM-DD, UTC).
    #[arg(long, value_parser = parse_day)]
    to: Option<chrono::NaiveDate>,
    /// What the rows group conversions by.
    #[arg(long, default_value = "source", value_parser = ["source", "medium", "campaign", "channel", "type"])]
    by: String,
    /// Which day an adjustment's refund counts on: the order's (what a campaign earned) or the
    /// adjustment's own (money in the period); the gross revenue is always by the order's day.
    #[arg(long, default_value = "order", value_parser = ["order", "adjustment"])]
    dated: String,
    /// Print the report's figures (docs/decisions.md §11): visitors, converting visitors,
    /// conversion rate, conversions, gross, refunds, net, average order value; with --json the
    /// object `GET /api/sites/{siteId}/report` answers. Without --from/--to: the 30 days to today.
    #[arg(long)]
    figures: bool,
    /// With --figures: the period compared with, beside it (previous: the days just before;
    /// weekday: moved back by whole weeks).
    #[arg(long, value_parser = ["previous", "weekday"], requires = "figures")]
    compare: Option<String>,
    /// Print a JSON array of rows {key, conversions, revenue, unconverted, grossRevenue, refunds,
    /// netRevenue}, where revenue is the gross revenue.
    #[arg(long)]
    json: bool,
}

pub(super) fn parse_day(s: &str) -> Result<chrono::NaiveDate, Invalid> {
    crate::fx::parse_day(s).map_err(|_| Invalid(format!("{s:?} is not a date like 2026-11-20")))
}

pub(super) fn report(db: &Location, a: ReportArgs) -> CliResult {
    use crate::store::report::GroupBy;
    if let (Some(from), Some(to)) = (a.from, a.to) {
        if from > to {
            return Err(format!("--from {from} is after --to {to}").into());
        }
    }
    let by = crate::report::parse_by(&a.by).unwrap_or(GroupBy::Source);
    let conn = open(db)?;
    let site = match crate::ops::sites::find(&conn, &a.site) {
        Err(crate::ops::sites::SiteError::NoSite(_))
            if uuid::Uuid::parse_str(a.site.trim()).is_err() =>
        {
            return Err(format!("--site {:?} is not a site id (a UUID)", a.site).into());
        }
        found => found.map_err(super::site::refused)?,
    };
    if a.figures {
        let day = |d: Option<chrono::NaiveDate>| d.map(|d| d.to_string());
        let (from, to) = (day(a.from), day(a.to));
        let q = crate::report::Query::parse(
            from.as_deref(),
            to.as_deref(),
            Some(&a.by),
            a.compare.as_deref(),
            chrono::Utc::now().date_naive(),
        )
        .map_err(|bad| Invalid(format!("--{}: {}", bad.name, bad.why)))?;
        let report = crate::store::read(&conn, |c| crate::report::report(c, &site, &q))?;
        if a.json {
            println!("{}", crate::report::report_json(&report));
        } else {
            println!("{}", crate::report::report_table(&report));
        }
        return Ok(());
    }
    let dated = match a.dated.as_str() {
        "adjustment" => crate::store::report::Dated::Adjustment,
        _ => crate::store::report::Dated::Order,
    };
    let rows = crate::report::build_dated(&conn, &site, a.from, a.to, by, dated)?;
    if a.json {
        println!("{}", crate::report::to_json(&rows));
    } else {
        println!("{}", crate::report::to_table(&rows, by, &site.currency));
    }
    Ok(())
}
