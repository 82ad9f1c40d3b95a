//! CSV as RFC 4180, and the columns of a conversion: what `convapi export --format csv` writes and
//! what the dashboard's conversions download writes, from the same code.
//!
//! Written here rather than with the `csv` crate: quoting is the one rule needed (a field holding a
//! comma, a quote, CR or LF is quoted, its quotes doubled), and a dozen lines are cheaper to keep
//! than a dependency tree. Records end in CRLF, as the RFC says; a NULL is an empty field.

use std::io::Write;

use crate::store::{self, conversions::OrderStatus};

/// The header of a conversions CSV, in the order of [`conversion_fields`].
pub const CONVERSION_COLUMNS: [&str; 23] = [
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

/// One CSV record, CRLF-terminated; a field is quoted only when it must be.
pub fn record<S: AsRef<str>>(
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

fn text(s: &Option<String>) -> String {
    s.clone().unwrap_or_default()
}

/// One conversion's fields, as [`CONVERSION_COLUMNS`] names them.
pub fn conversion_fields(o: &OrderStatus) -> [String; 23] {
    let c = &o.conversion;
    let attr = |f: fn(&store::pipeline::Attribution) -> Option<String>| {
        o.attribution.as_ref().and_then(f).unwrap_or_default()
    };
    [
        c.id.clone(),
        text(&c.order_id),
        c.kind.clone(),
        o.status.clone(),
        o.sources().join(";"),
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

#[cfg(test)]
mod tests {
    use super::record as csv_record;

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
