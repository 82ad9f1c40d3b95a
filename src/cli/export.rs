//! `convapi export`: a site's conversions (or sessions) as CSV or NDJSON on stdout, written row by
//! row as `store::export` reads them from one read transaction, so memory stays flat whatever the
//! row count and the output can go straight into `gzip`. Must not collect rows.
//!
//! CSV is RFC 4180, written here rather than with the `csv` crate: quoting is the one rule needed
//! (a field holding a comma, a quote, CR or LF is quoted, its quotes doubled), and a dozen lines
//! are cheaper to keep than a dependency tree. Records end in CRLF, as the RFC says; a NULL is an
//! empty field. NDJSON lines are the order status lookup's JSON (`api::conversions::status_json`)
//! plus `visitorId` and `clientId`.

use std::io::{BufWriter, Write};
use std::path::Path;

use serde_json::{json, Value};

use super::{open, site_by_id, CliResult};
use crate::store::{self, conversions::OrderStatus, sessions::Session};

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
}

const CONVERSION_COLUMNS: [&str; 23] = [
    "eventId",
    "orderId",
    "type",
    "status",
    "sources",
    "value",
    "currency",
    "reportingValue",
    "reportingCurrency",
    "fxRate",
    "fxDate",
    "occurredAt",
    "processedAt",
    "sessionId",
    "visitorId",
    "clientId",
    "attributionModel",
    "attributionSessionId",
    "attributionSource",
    "attributionMedium",
    "attributionCampaign",
    "attempts",
    "lastError",
];

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

pub(super) fn export(db: &Path, a: ExportArgs) -> CliResult {
    if let (Some(from), Some(to)) = (a.from, a.to) {
        if from > to {
            return Err(format!("--from {from} is after --to {to}"));
        }
    }
    let (from_ms, to_ms) = crate::report::day_range(a.from, a.to);
    let csv = a.format == "csv";
    let conn = open(db)?;
    let site = site_by_id(&conn, &a.site)?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(64 * 1024, stdout.lock());
    let io = |e: std::io::Error| format!("writing the export: {e}");
    store::read(&conn, |conn| {
        if a.sessions {
            if csv {
                csv_record(&mut out, SESSION_COLUMNS).map_err(io)?;
            }
            store::export::sessions(conn, &site.id, from_ms, to_ms, |s| {
                if csv {
                    csv_record(&mut out, session_fields(s))
                } else {
                    json_line(&mut out, &session_json(s))
                }
                .map_err(io)
            })
        } else {
            if csv {
                csv_record(&mut out, CONVERSION_COLUMNS).map_err(io)?;
            }
            store::export::conversions(conn, &site.id, from_ms, to_ms, |o| {
                if csv {
                    csv_record(&mut out, conversion_fields(o))
                } else {
                    let mut v = crate::api::conversions::status_json(o);
                    v["visitorId"] = json!(o.conversion.visitor_id);
                    v["clientId"] = json!(o.conversion.client_id);
                    json_line(&mut out, &v)
                }
                .map_err(io)
            })
        }
    })?;
    out.flush().map_err(io)
}

/// One CSV record, CRLF-terminated; a field is quoted only when it must be.
fn csv_record<S: AsRef<str>>(
    out: &mut impl Write,
    fields: impl IntoIterator<Item = S>,
) -> std::io::Result<()> {
    for (i, field) in fields.into_iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        let f = field.as_ref();
        if f.contains([',', '"', '\r', '\n']) {
            out.write_all(b"\"")?;
            out.write_all(f.replace('"', "\"\"").as_bytes())?;
            out.write_all(b"\"")?;
        } else {
            out.write_all(f.as_bytes())?;
        }
    }
    out.write_all(b"\r\n")
}

fn json_line(out: &mut impl Write, v: &Value) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, v)?;
    out.write_all(b"\n")
}

fn text(s: &Option<String>) -> String {
    s.clone().unwrap_or_default()
}

fn conversion_fields(o: &OrderStatus) -> [String; 23] {
    let c = &o.conversion;
    let sources = match (o.by_pixel, o.by_api) {
        (true, true) => "pixel;api",
        (true, false) => "pixel",
        (false, true) => "api",
        (false, false) => "",
    };
    let attr = |f: fn(&store::pipeline::Attribution) -> Option<String>| {
        o.attribution.as_ref().and_then(f).unwrap_or_default()
    };
    [
        c.id.clone(),
        text(&c.order_id),
        c.kind.clone(),
        o.status.clone(),
        sources.to_owned(),
        text(&c.value),
        c.currency.clone(),
        text(&o.fx.value),
        text(&o.fx.currency),
        text(&o.fx.rate),
        text(&o.fx.date),
        store::iso(c.occurred_at),
        o.processed_at.map(store::iso).unwrap_or_default(),
        c.session_id.clone(),
        c.visitor_id.clone(),
        text(&c.client_id),
        attr(|a| Some(a.model.clone())),
        attr(|a| a.session_id.clone()),
        attr(|a| Some(a.source.clone())),
        attr(|a| Some(a.medium.clone())),
        attr(|a| a.campaign.clone()),
        o.attempts.to_string(),
        text(&o.last_error),
    ]
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

#[cfg(test)]
mod tests {
    use super::csv_record;

    fn record(fields: &[&str]) -> String {
        let mut out = Vec::new();
        csv_record(&mut out, fields).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn quotes_only_the_fields_that_need_it() {
        assert_eq!(record(&["a", "", "b c"]), "a,,b c\r\n");
        assert_eq!(
            record(&["a,b", "say \"hi\"", "x\ny", "cr\r"]),
            "\"a,b\",\"say \"\"hi\"\"\",\"x\ny\",\"cr\r\"\r\n"
        );
    }
}
