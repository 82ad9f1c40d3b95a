//! `convapi export`: a site's conversions (or sessions) as CSV or NDJSON on stdout, written row by
//! row as `store::export` reads them from one read transaction, so memory stays flat whatever the
//! row count and the output can go straight into `gzip`. Must not collect rows.
//!
//! CSV records and the conversion columns are `crate::csv`'s (the dashboard's download writes the
//! same). NDJSON lines are the order status lookup's JSON (`api::conversions::status_json`, with
//! its ledger: `ledger_json`, each adjustment with its deliveries) plus `visitorId` and `clientId`,
//! without the lookup's `deliveries` of the conversion to ad platforms (the export is of the
//! conversions; where each went is the lookup's and the order page's). The range's adjustments
//! (and, for NDJSON, their deliveries) are read first, one entry each in memory: the NDJSON's
//! ledgers, the CSV's `netValue` and `state`.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use serde_json::{json, Value};

use super::{open, site_by_id, CliError, CliResult};
use crate::store::engine::Location;
use crate::store::{self, sessions::Session};

#[derive(clap::Args)]
pub(super) struct ExportArgs {
    /// The site's id (UUID).
    #[arg(long)]
    site: String,
    /// First day included (YYYY-MM-DD, UTC), by the conversions' occurredAt (sessions: startedAt).
    #[arg(long, value_parser = super::report::parse_day)]
    from: Option<chrono::NaiveDate>,
    /// Last day included (YYYY-MM-DD, UTC).
    #[arg(long, value_parser = super::report::parse_day)]
    to: Option<chrono::NaiveDate>,
    /// Output format: CSV with a header row, or one JSON object per line.
    #[arg(long, value_parser = ["csv", "ndjson"])]
    format: String,
    /// Export the site's sessions instead of its conversions.
    #[arg(long)]
    sessions: bool,
    /// Write to this new file (made readable by its owner only, mode 0600) instead of stdout; an
    /// existing file is not replaced.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
}

const SESSION_COLUMNS: [&str; 18] = [
    "sessionId",
    "visitorId",
    "clientId",
    "startedAt",
    "lastActivityAt",
    "landingUrl",
    "referrer",
    "utmSource",
    "utmMedium",
    "utmCampaign",
    "utmTerm",
    "utmContent",
    "gclid",
    "gbraid",
    "wbraid",
    "fbclid",
    "msclkid",
    "ttclid",
];

pub(super) fn export(db: &Location, a: ExportArgs) -> CliResult {
    if let (Some(from), Some(to)) = (a.from, a.to) {
        if from > to {
            return Err(format!("--from {from} is after --to {to}").into());
        }
    }
    let (from_ms, to_ms) = crate::report::day_range(a.from, a.to);
    let csv = a.format == "csv";
    let conn = open(db)?;
    let site = site_by_id(&conn, &a.site)?;
    let sink: Box<dyn Write> = match &a.output {
        None => Box::new(std::io::stdout().lock()),
        Some(path) => Box::new(super::private_file(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                format!(
                    "{} exists; choose another file or remove it",
                    path.display()
                )
            } else {
                format!("{}: {e}", path.display())
            }
        })?),
    };
    let mut out = BufWriter::with_capacity(64 * 1024, sink);
    let reader_gone = std::cell::Cell::new(false);
    let io = |e: std::io::Error| {
        reader_gone.set(e.kind() == std::io::ErrorKind::BrokenPipe);
        CliError::Failed(format!("writing the export: {e}"))
    };
    let written = write_rows(&conn, &site.id, &a, from_ms, to_ms, csv, &mut out, io);
    let written = written.and_then(|()| out.flush().map_err(io));
    // A reader of stdout that went away (`| head`) ends the export quietly.
    if a.output.is_none() && reader_gone.get() {
        return Ok(());
    }
    if written.is_err() {
        if let Some(path) = &a.output {
            // Half an export is not one: nothing is left that looks like it.
            drop(out);
            let _ = std::fs::remove_file(path);
        }
    }
    written
}

/// The export's rows into `out`, from one read transaction.
#[allow(clippy::too_many_arguments)]
fn write_rows(
    conn: &impl crate::store::engine::AsConn,
    site_id: &str,
    a: &ExportArgs,
    from_ms: i64,
    to_ms: i64,
    csv: bool,
    mut out: impl Write,
    io: impl Fn(std::io::Error) -> CliError + Copy,
) -> CliResult {
    store::read(conn, |conn| {
        if a.sessions {
            if csv {
                crate::csv::record(&mut out, SESSION_COLUMNS).map_err(io)?;
            }
            store::export::sessions(conn, site_id, from_ms, to_ms, |s| {
                if csv {
                    crate::csv::record(&mut out, session_fields(s))
                } else {
                    json_line(&mut out, &session_json(s))
                }
                .map_err(io)
            })
        } else {
            if csv {
                crate::csv::record(&mut out, crate::csv::CONVERSION_COLUMNS).map_err(io)?;
            }
            let ledgers = store::adjustments::of_site_between(conn, site_id, from_ms, to_ms)?;
            let passed_on = if csv {
                Default::default()
            } else {
                store::adjustment_deliveries::of_site_between(conn, site_id, from_ms, to_ms)?
            };
            store::export::conversions(conn, site_id, from_ms, to_ms, |o| {
                let ledger = ledgers.get(&o.conversion.id).map_or(&[][..], Vec::as_slice);
                if csv {
                    let net = store::adjustments::net_shown(o.conversion.value.as_deref(), ledger)?;
                    crate::csv::record(&mut out, crate::csv::conversion_fields(o, net.as_ref()))
                        .map_err(io)
                } else {
                    let mut v = crate::api::conversions::status_json(o);
                    let sent = passed_on
                        .get(&o.conversion.id)
                        .map_or(&[][..], Vec::as_slice);
                    crate::api::conversions::ledger_json(&mut v, o, ledger, sent)?;
                    v["visitorId"] = json!(o.conversion.visitor_id);
                    v["clientId"] = json!(o.conversion.client_id);
                    json_line(&mut out, &v).map_err(io)
                }
            })
        }
    })
}

fn json_line(out: &mut impl Write, v: &Value) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, v)?;
    out.write_all(b"\n")
}

fn text(s: &Option<String>) -> String {
    s.clone().unwrap_or_default()
}

fn session_fields(s: &Session) -> [String; 18] {
    let c = &s.campaign;
    [
        s.id.clone(),
        s.visitor_id.clone(),
        text(&s.client_id),
        store::iso(s.started_at),
        store::iso(s.last_activity_at),
        text(&s.landing_url),
        text(&s.referrer),
        text(&c.utm_source),
        text(&c.utm_medium),
        text(&c.utm_campaign),
        text(&c.utm_term),
        text(&c.utm_content),
        text(&c.gclid),
        text(&c.gbraid),
        text(&c.wbraid),
        text(&c.fbclid),
        text(&c.msclkid),
        text(&c.ttclid),
    ]
}

fn session_json(s: &Session) -> Value {
    let c = &s.campaign;
    json!({
        "sessionId": s.id,
        "visitorId": s.visitor_id,
        "clientId": s.client_id,
        "startedAt": store::iso(s.started_at),
        "lastActivityAt": store::iso(s.last_activity_at),
        "landingUrl": s.landing_url,
        "referrer": s.referrer,
        "utmSource": c.utm_source,
        "utmMedium": c.utm_medium,
        "utmCampaign": c.utm_campaign,
        "utmTerm": c.utm_term,
        "utmContent": c.utm_content,
        "gclid": c.gclid,
        "gbraid": c.gbraid,
        "wbraid": c.wbraid,
        "fbclid": c.fbclid,
        "msclkid": c.msclkid,
        "ttclid": c.ttclid,
    })
}
