//! Currency: reading the ECB reference-rate CSV, and exact conversion between currencies through EUR.
//!
//! Pure code: no SQL, no clock. The pipeline looks rates up (`store::rates`) and calls [`convert`];
//! `convapi rates import` calls [`read_ecb_csv`]. Money is `rust_decimal::Decimal` end to end, never
//! `f64`; a converted amount is rounded once, to the target currency's minor units, exactly.

use std::str::FromStr;

use chrono::NaiveDate;
use rust_decimal::{Decimal, RoundingStrategy};

use crate::invalid::Invalid;

/// The ECB's base currency: every rate in its files is "units of X per 1 EUR".
pub const BASE: &str = "EUR";

/// How a day is written wherever one is stored or shown (a rate's date, `fxDate`, the report's
/// days): `YYYY-MM-DD`.
pub const DAY_FORMAT: &str = "%Y-%m-%d";

/// `day` as [`DAY_FORMAT`] text.
pub fn format_day(day: NaiveDate) -> String {
    day.format(DAY_FORMAT).to_string()
}

/// Reads [`DAY_FORMAT`] text.
pub fn parse_day(text: &str) -> chrono::ParseResult<NaiveDate> {
    NaiveDate::parse_from_str(text, DAY_FORMAT)
}

/// Decimal places kept for a displayed cross rate (the amount itself is computed without it).
const RATE_DP: u32 = 10;

/// One rate read from a file: `rate` units of `currency` per 1 EUR on `date`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rate {
    pub date: NaiveDate,
    pub currency: String,
    pub rate: Decimal,
}

/// The longest line an ECB file may have, in bytes: the history file's lines are under 500 (a
/// day's rates of about 40 currencies). A longer one is no ECB file and is refused as soon as it
/// is read, so that a file of one endless line costs no more memory than this.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// Most lines of rates a file may have: the history since 1999 has about 7,000 (one per working
/// day); this is 150 years of them. What a file holds is kept until it is stored, so this bounds
/// the memory of an import.
pub const MAX_DAYS: usize = 40_000;

/// Most characters of a file's cell quoted in a refusal.
const QUOTED_CHARS: usize = 100;

/// Reads an ECB reference-rate CSV: the daily `eurofxref.csv` (`Date, USD, JPY, ...,` then one row
/// dated like `20 November 2026`) or the history `eurofxref-hist.csv` (one row per day, dated
/// `2026-11-20`). Cells may carry spaces and every line a trailing comma; `N/A` and empty cells
/// are skipped. Any other malformed cell is an error naming its line, so a truncated or foreign
/// file is refused rather than half-imported.
pub fn parse_ecb_csv(text: &str) -> Result<Vec<Rate>, Invalid> {
    read_ecb_csv(text.as_bytes())
}

/// [`parse_ecb_csv`] reading `reader` a line at a time: at most [`MAX_LINE_BYTES`] of the file are
/// held at once, besides the rates read. Every currency column must be an ISO 4217 code (or one
/// the ECB's history still carries), else the file is refused at its header; a line that is not
/// UTF-8, a line longer than [`MAX_LINE_BYTES`] and more than [`MAX_DAYS`] lines of rates are
/// refused too. A read error is refused with its message.
pub fn read_ecb_csv(mut reader: impl std::io::BufRead) -> Result<Vec<Rate>, Invalid> {
    use std::io::BufRead;
    let mut buf = Vec::with_capacity(1024);
    let mut lineno = 0usize;
    let mut header: Option<(usize, Vec<(usize, String)>)> = None;
    let mut days = 0usize;
    let mut out = Vec::new();
    loop {
        buf.clear();
        let read = std::io::Read::take(&mut reader, MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| format!("line {}: cannot be read: {e}", lineno + 1))?;
        if read == 0 {
            break;
        }
        lineno += 1;
        if buf.len() > MAX_LINE_BYTES {
            return Err(format!(
                "line {lineno} is longer than {MAX_LINE_BYTES} bytes, which no ECB rates file \
                 has (expected eurofxref.zip, eurofxref-hist.zip or the CSV inside them)"
            )
            .into());
        }
        let line = std::str::from_utf8(&buf).map_err(|_| {
            format!(
                "line {lineno} is not UTF-8 text: not an ECB rates file (expected \
                 eurofxref.zip, eurofxref-hist.zip or the CSV inside them)"
            )
        })?;
        let line = line.strip_suffix('\n').unwrap_or(line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        let line = match lineno {
            1 => line.strip_prefix('\u{feff}').unwrap_or(line),
            _ => line,
        };
        if line.trim().is_empty() {
            continue;
        }
        let Some((width, currencies)) = &header else {
            header = Some(read_header(line)?);
            continue;
        };
        days += 1;
        if days > MAX_DAYS {
            return Err(format!(
                "line {lineno}: more than {MAX_DAYS} days of rates, more than any ECB file has"
            )
            .into());
        }
        read_day(lineno, line, *width, currencies, &mut out)?;
    }
    if header.is_none() {
        return Err("the file is empty".into());
    }
    Ok(out)
}

/// The header line: how many columns it has, and its currencies with their column numbers
/// (from 0; the `Date` column is 0).
fn read_header(header: &str) -> Result<(usize, Vec<(usize, String)>), Invalid> {
    let columns: Vec<&str> = header.split(',').map(str::trim).collect();
    if !columns
        .first()
        .is_some_and(|c| c.eq_ignore_ascii_case("date"))
    {
        return Err(format!(
            "line 1: expected a header starting with \"Date\", found {}",
            quoted(header)
        )
        .into());
    }
    let mut currencies = Vec::with_capacity(columns.len());
    for (i, c) in columns.iter().enumerate().skip(1) {
        if c.is_empty() {
            // The trailing comma the ECB puts at the end of every line.
            if i == columns.len() - 1 {
                continue;
            }
            return Err(format!("line 1: column {} has no currency name", i + 1).into());
        }
        if c.len() != 3 || !c.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!(
                "line 1: column {} is {}, not a currency code",
                i + 1,
                quoted(c)
            )
            .into());
        }
        // Any three capital letters parse; a column that is no currency means a foreign or
        // damaged file, refused whole like any other bad cell.
        if !crate::currency::is_ecb_rate_currency(c) {
            return Err(format!(
                "line 1: column {} is {c:?}, not an ISO 4217 currency code; nothing imported",
                i + 1
            )
            .into());
        }
        currencies.push((i, (*c).to_owned()));
    }
    if currencies.is_empty() {
        return Err("line 1: the header names no currency".into());
    }
    Ok((columns.len(), currencies))
}

/// One line of rates, added to `out`.
fn read_day(
    lineno: usize,
    line: &str,
    width: usize,
    currencies: &[(usize, String)],
    out: &mut Vec<Rate>,
) -> Result<(), Invalid> {
    let cells: Vec<&str> = line.split(',').map(str::trim).collect();
    let date = parse_date(cells[0])
        .ok_or_else(|| format!("line {lineno}: {} is not a date", quoted(cells[0])))?;
    let extra = cells.len() > width && cells[width..].iter().any(|c| !c.is_empty());
    if extra {
        return Err(format!("line {lineno}: more cells than the header has columns").into());
    }
    for (i, currency) in currencies {
        let cell = cells.get(*i).copied().unwrap_or("");
        if cell.is_empty() || cell.eq_ignore_ascii_case("N/A") {
            continue;
        }
        let rate = Decimal::from_str_exact(cell)
            .ok()
            .filter(|r| *r > Decimal::ZERO)
            .ok_or_else(|| {
                format!(
                    "line {lineno}: {currency} rate {} is not a positive number",
                    quoted(cell)
                )
            })?;
        if currency == BASE {
            if rate != Decimal::ONE {
                return Err(format!("line {lineno}: the EUR rate must be 1, not {rate}").into());
            }
            continue;
        }
        out.push(Rate {
            date,
            currency: currency.clone(),
            rate: rate.normalize(),
        });
    }
    Ok(())
}

/// A file's text as a refusal quotes it: at most [`QUOTED_CHARS`] characters, with an ellipsis
/// when there were more.
pub fn quoted(s: &str) -> String {
    match s.char_indices().nth(QUOTED_CHARS) {
        Some((end, _)) => format!("{:?}…", &s[..end]),
        None => format!("{s:?}"),
    }
}

/// `2026-11-20` (history file) or `20 November 2026` (daily file).
fn parse_date(s: &str) -> Option<NaiveDate> {
    parse_day(s)
        .or_else(|_| NaiveDate::parse_from_str(s, "%d %B %Y"))
        .ok()
}

/// A currency's rate against EUR as looked up for one conversion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leg {
    /// The currency is EUR itself: rate 1, no date.
    Eur,
    /// `per_eur` units per 1 EUR, published for `date`.
    Quoted { per_eur: Decimal, date: NaiveDate },
}

impl Leg {
    fn per_eur(&self) -> Decimal {
        match self {
            Leg::Eur => Decimal::ONE,
            Leg::Quoted { per_eur, .. } => *per_eur,
        }
    }
    fn date(&self) -> Option<NaiveDate> {
        match self {
            Leg::Eur => None,
            Leg::Quoted { date, .. } => Some(*date),
        }
    }
}

/// An amount converted into the reporting currency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converted {
    /// Exactly `amount × to / from`, rounded half away from zero to the target's minor units.
    pub value: Decimal,
    /// Target units per source unit, rounded to 10 decimal places (for display; `value` does not use it).
    pub rate: Decimal,
    /// The older of the dates of the rates used; `None` when no published rate was needed.
    pub date: Option<NaiveDate>,
}

/// Converts `amount` from the currency of `from` into that of `to`, crossing through EUR:
/// `amount × to.per_eur / from.per_eur`, rounded once and exactly to `minor_units` decimal places
/// (`None`: a currency without minor units in ISO 4217, such as gold; kept as computed).
pub fn convert(
    amount: Decimal,
    from: &Leg,
    to: &Leg,
    minor_units: Option<u32>,
) -> Result<Converted, Invalid> {
    let (f, t) = (from.per_eur(), to.per_eur());
    if f <= Decimal::ZERO || t <= Decimal::ZERO {
        return Err(Invalid::new("a rate is not positive"));
    }
    let overflow = || Invalid(format!("{amount} is too large to convert"));
    let numerator = amount.checked_mul(t).ok_or_else(overflow)?;
    let value = match minor_units {
        Some(dp) => div_round(numerator, f, dp).ok_or_else(overflow)?,
        None => numerator.checked_div(f).ok_or_else(overflow)?,
    };
    let rate = (t / f)
        .round_dp_with_strategy(RATE_DP, RoundingStrategy::MidpointAwayFromZero)
        .normalize();
    let date = match (from.date(), to.date()) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(Converted { value, rate, date })
}

/// `n / d` rounded half away from zero to `dp` places, exactly: integer division with remainder
/// on `n × 10^dp`, so no intermediate rounding at 28 digits can move a result across a midpoint.
/// Both operands are non-negative here (values are >= 0 and rates > 0).
fn div_round(n: Decimal, d: Decimal, dp: u32) -> Option<Decimal> {
    let scaled = n.checked_mul(Decimal::from_i128_with_scale(10i128.checked_pow(dp)?, 0))?;
    let rem = scaled.checked_rem(d)?;
    let mut q = (scaled.checked_sub(rem)?).checked_div(d)?.round();
    if rem.checked_mul(Decimal::TWO)? >= d {
        q = q.checked_add(Decimal::ONE)?;
    }
    let mut out = q.checked_div(Decimal::from_i128_with_scale(10i128.checked_pow(dp)?, 0))?;
    out.rescale(dp);
    Some(out)
}

/// Rounds an amount already in `currency` to its minor units (a same-currency "conversion").
pub fn round_to_minor(amount: Decimal, minor_units: Option<u32>) -> Decimal {
    match minor_units {
        Some(dp) => {
            let mut v = amount.round_dp_with_strategy(dp, RoundingStrategy::MidpointAwayFromZero);
            v.rescale(dp);
            v
        }
        None => amount,
    }
}

/// Decimal places of a currency's minor unit per ISO 4217 (EUR 2, JPY 0, BHD 3); `None` for codes
/// without one (XAU) or unknown to the table.
pub fn minor_units(currency: &str) -> Option<u32> {
    iso_currency::Currency::from_code(currency)
        .and_then(|c| c.exponent())
        .map(u32::from)
}

/// `amount` written with at least `currency`'s minor digits (49.9 EUR as 49.90), never fewer
/// digits than it has: padding only, no rounding (49.905 EUR stays 49.905). Unchanged for a
/// currency without minor units, or where the padded form does not fit a `Decimal`.
pub fn with_minor_digits(amount: Decimal, currency: &str) -> Decimal {
    match minor_units(currency) {
        Some(dp) if amount.scale() < dp => {
            let mut padded = amount;
            padded.rescale(dp);
            if padded == amount {
                padded
            } else {
                amount
            }
        }
        _ => amount,
    }
}

/// Parses a stored decimal text (the conversion's `value`, a stored rate).
pub fn decimal(text: &str) -> Result<Decimal, Invalid> {
    Decimal::from_str(text.trim()).map_err(|_| Invalid(format!("{text:?} is not a decimal number")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        Decimal::from_str_exact(s).unwrap()
    }
    fn day(s: &str) -> NaiveDate {
        parse_day(s).unwrap()
    }
    fn q(rate: &str, date: &str) -> Leg {
        Leg::Quoted {
            per_eur: d(rate),
            date: day(date),
        }
    }

    #[test]
    fn minor_digits_pad_and_never_round() {
        let shown = |v: &str, c: &str| with_minor_digits(d(v), c).to_string();
        assert_eq!(shown("49.9", "EUR"), "49.90");
        assert_eq!(shown("49", "EUR"), "49.00");
        assert_eq!(shown("49.905", "EUR"), "49.905");
        assert_eq!(shown("1200", "JPY"), "1200");
        assert_eq!(shown("1.5", "BHD"), "1.500");
        assert_eq!(shown("1.5", "XAU"), "1.5");
        assert_eq!(shown("1.5", "ZZZ"), "1.5");
        assert_eq!(
            shown("79228162514264337593543950335", "EUR"),
            "79228162514264337593543950335"
        );
    }

    #[test]
    fn daily_file_as_the_ecb_publishes_it() {
        // The layout of eurofxref.csv: spaces after commas, a trailing comma, a spelled-out date.
        let text = "Date, USD, JPY, BGN, CZK, \n20 November 2026, 1.0512, 162.31, N/A, 25.301, \n";
        let rates = parse_ecb_csv(text).unwrap();
        assert_eq!(
            rates,
            vec![
                Rate {
                    date: day("2026-11-20"),
                    currency: "USD".into(),
                    rate: d("1.0512")
                },
                Rate {
                    date: day("2026-11-20"),
                    currency: "JPY".into(),
                    rate: d("162.31")
                },
                Rate {
                    date: day("2026-11-20"),
                    currency: "CZK".into(),
                    rate: d("25.301")
                },
            ]
        );
    }

    #[test]
    fn history_file_with_bom_crlf_and_missing_cells() {
        let text = "\u{feff}Date,USD,ISK,\r\n2026-11-20,1.0512,N/A,\r\n2026-11-19,1.0498,,\r\n\r\n2008-12-09,1.2880,290,\r\n";
        let rates = parse_ecb_csv(text).unwrap();
        let got: Vec<(String, &str, String)> = rates
            .iter()
            .map(|r| (r.date.to_string(), r.currency.as_str(), r.rate.to_string()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("2026-11-20".into(), "USD", "1.0512".into()),
                ("2026-11-19".into(), "USD", "1.0498".into()),
                ("2008-12-09".into(), "USD", "1.288".into()),
                ("2008-12-09".into(), "ISK", "290".into()),
            ]
        );
    }

    #[test]
    fn malformed_files_are_refused_with_the_line() {
        let cases = [
            ("", "empty"),
            ("Currency,USD\n2026-11-20,1\n", "line 1"),
            ("Date,usd\n", "line 1"),
            ("Date\n2026-11-20\n", "no currency"),
            ("Date,USD\n20/11/2026,1.05\n", "line 2"),
            ("Date,USD\n2026-11-20,1.05\n2026-11-19,abc\n", "line 3"),
            ("Date,USD\n2026-11-20,-1\n", "line 2"),
            ("Date,USD\n2026-11-20,0\n", "line 2"),
            ("Date,USD\n2026-11-20,1.05,7\n", "more cells"),
            ("Date,EUR\n2026-11-20,2\n", "EUR rate must be 1"),
        ];
        for (text, needle) in cases {
            let err = parse_ecb_csv(text).expect_err(text);
            assert!(err.0.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn a_refusal_quotes_at_most_a_hundred_characters() {
        let cell = "9".repeat(10_000);
        let text = format!("Date,USD\n2026-11-20,{cell}x\n");
        let err = parse_ecb_csv(&text).expect_err("not a number");
        assert!(err.0.starts_with("line 2: USD rate \"999"), "{err}");
        assert!(err.0.len() < 200 && err.0.contains('…'), "{err}");
        assert_eq!(quoted("short"), "\"short\"");
        assert_eq!(quoted(&"é".repeat(101)), format!("{:?}…", "é".repeat(100)));
    }

    #[test]
    fn a_line_longer_than_any_ecb_file_has_is_refused_as_soon_as_it_is_read() {
        let text = format!("Date,USD\n2026-11-20,{}\n", "1".repeat(MAX_LINE_BYTES));
        let err = parse_ecb_csv(&text).expect_err("too long");
        assert!(err.0.starts_with("line 2 is longer than"), "{err}");
        let mut days = String::from("Date,USD\n");
        for _ in 0..=MAX_DAYS {
            days.push_str("2026-11-20,1\n");
        }
        let err = parse_ecb_csv(&days).expect_err("too many days");
        assert!(err.0.contains("more than 40000 days"), "{err}");
        let err = read_ecb_csv(&b"Date,USD\n2026-11-20,\xff\n"[..]).expect_err("binary");
        assert!(err.0.contains("line 2"), "{err}");
        assert!(
            parse_ecb_csv("Date,USD\n2026-11-20,1").is_ok(),
            "no final newline"
        );
    }

    #[test]
    fn usd_to_eur_divides_by_the_rate() {
        // 100 USD at 1.0512 USD/EUR = 95.1293759512... EUR
        let c = convert(d("100"), &q("1.0512", "2026-11-20"), &Leg::Eur, Some(2)).unwrap();
        assert_eq!(c.value.to_string(), "95.13");
        assert_eq!(c.rate.to_string(), "0.9512937595");
        assert_eq!(c.date, Some(day("2026-11-20")));
    }

    #[test]
    fn eur_to_jpy_has_no_minor_units() {
        let c = convert(
            d("10.50"),
            &Leg::Eur,
            &q("162.31", "2026-11-20"),
            minor_units("JPY"),
        )
        .unwrap();
        // 10.50 × 162.31 = 1704.255 → 1704
        assert_eq!(c.value.to_string(), "1704");
        assert_eq!(c.rate.to_string(), "162.31");
    }

    #[test]
    fn usd_to_gbp_crosses_through_eur_and_keeps_the_older_date() {
        // 49.90 × 0.8741 / 1.0512 = 41.4936... GBP
        let c = convert(
            d("49.90"),
            &q("1.0512", "2026-11-20"),
            &q("0.8741", "2026-11-19"),
            Some(2),
        )
        .unwrap();
        assert_eq!(c.value.to_string(), "41.49");
        assert_eq!(c.date, Some(day("2026-11-19")));
    }

    #[test]
    fn midpoints_round_away_from_zero_exactly() {
        // 0.125 EUR → 2 places: exactly on the midpoint.
        let c = convert(d("0.125"), &Leg::Eur, &q("1", "2026-11-20"), Some(2)).unwrap();
        assert_eq!(c.value.to_string(), "0.13");
        // 1 / 3 × 3 is exactly 1: no drift from a rounded intermediate quotient.
        let c = convert(
            d("1"),
            &q("3", "2026-11-20"),
            &q("3", "2026-11-20"),
            Some(2),
        )
        .unwrap();
        assert_eq!(c.value.to_string(), "1.00");
        // 2 units at 3 per EUR = 0.666...: rounds up; 1 unit = 0.333...: rounds down.
        let two = convert(d("2"), &q("3", "2026-11-20"), &Leg::Eur, Some(2)).unwrap();
        let one = convert(d("1"), &q("3", "2026-11-20"), &Leg::Eur, Some(2)).unwrap();
        assert_eq!(
            (two.value.to_string(), one.value.to_string()),
            ("0.67".into(), "0.33".into())
        );
        // Three decimals for BHD.
        let c = convert(
            d("1"),
            &Leg::Eur,
            &q("0.3969", "2026-11-20"),
            minor_units("BHD"),
        )
        .unwrap();
        assert_eq!(c.value.to_string(), "0.397");
    }

    #[test]
    fn the_largest_accepted_value_converts() {
        let c = convert(
            d("1000000000000"),
            &Leg::Eur,
            &q("162.31", "2026-11-20"),
            Some(0),
        )
        .unwrap();
        assert_eq!(c.value.to_string(), "162310000000000");
        let c = convert(
            d("999999999999.99"),
            &q("0.0001", "2026-11-20"),
            &Leg::Eur,
            Some(2),
        )
        .unwrap();
        assert_eq!(c.value.to_string(), "9999999999999900.00");
    }

    #[test]
    fn same_currency_rounds_to_minor_units() {
        assert_eq!(round_to_minor(d("49.9"), Some(2)).to_string(), "49.90");
        assert_eq!(round_to_minor(d("49.995"), Some(2)).to_string(), "50.00");
        assert_eq!(round_to_minor(d("7.5"), Some(0)).to_string(), "8");
        assert_eq!(round_to_minor(d("1.23456"), None).to_string(), "1.23456");
    }

    #[test]
    fn minor_units_come_from_iso_4217() {
        assert_eq!(minor_units("EUR"), Some(2));
        assert_eq!(minor_units("JPY"), Some(0));
        assert_eq!(minor_units("BHD"), Some(3));
        assert_eq!(minor_units("XAU"), None);
    }
}
