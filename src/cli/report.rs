//! `convapi report`: its options and their checks; the figures, the JSON object (the same as
//! `GET /api/sites/{siteId}/report`'s) and the table are `crate::report`'s.

use super::{open, CliResult};
use crate::invalid::Invalid;
use crate::store::engine::Location;

#[derive(clap::Args)]
pub(super) struct ReportArgs {
    /// The site's id (UUID).
    #[arg(long)]
    site: String,
    /// First day included (YYYY-MM-DD, UTC), by the conversions' occurredAt and the sessions'
    /// start; default: the site's first day with either.
    #[arg(long, value_parser = parse_day)]
    from: Option<chrono::NaiveDate>,
    /// Last day included (YYYY-MM-DD, UTC); default: today, or the site's last day with a
    /// session or a conversion if later.
    #[arg(long, value_parser = parse_day)]
    to: Option<chrono::NaiveDate>,
    /// What the rows group the visitors and conversions by.
    #[arg(long, default_value = "source", value_parser = ["source", "medium", "campaign", "channel", "type"])]
    by: String,
    /// Which day an adjustment's refund counts on: the order's (what a campaign earned) or the
    /// adjustment's own (money in the period); the gross revenue is always by the order's day.
    #[arg(long, default_value = "order", value_parser = ["order", "adjustment"])]
    dated: String,
    /// Accepted and ignored: the report always prints its figures (an older flag).
    #[arg(long = "figures", hide = true)]
    _figures: bool,
    /// The period compared with, beside it (previous: the days just before; weekday: moved back
    /// by whole weeks).
    #[arg(long, value_parser = ["previous", "weekday"])]
    compare: Option<String>,
    /// Print the object `GET /api/sites/{siteId}/report` answers: currency, from, to, by, totals
    /// and rows, each row with its key, figures and `revenue` (its gross revenue).
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
    let dated = match a.dated.as_str() {
        "adjustment" => crate::store::report::Dated::Adjustment,
        _ => crate::store::report::Dated::Order,
    };
    let compare = a.compare.as_deref().and_then(crate::report::Compare::parse);
    let today = chrono::Utc::now().date_naive();
    let (from, to) = crate::store::read(&conn, |c| {
        crate::report::days_or_all(c, &site, a.from, a.to, today)
    })?;
    if from > to {
        return Err(format!(
            "--from {from} is after {to} (today, or the last day with data); give --to too"
        )
        .into());
    }
    let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).expect("a date");
    if from < epoch {
        return Err(format!(
            "--from {from} is before 1970-01-01, when nothing is stored; give 1970-01-01 or later"
        )
        .into());
    }
    let q = crate::report::Query {
        from,
        to,
        by,
        compare,
    };
    let report = crate::store::read(&conn, |c| crate::report::report_dated(c, &site, &q, dated))?;
    super::out(&if a.json {
        crate::report::report_json(&report).to_string()
    } else {
        crate::report::report_table(&report)
    })
}
