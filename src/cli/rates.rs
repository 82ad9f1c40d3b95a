//! `convapi rates ...`: ECB reference rates, which the pipeline converts currencies with.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde_json::json;

use super::{count, open, print, CliResult};
use crate::store;

#[derive(Subcommand)]
pub(super) enum RatesCmd {
    /// Import an ECB reference-rate CSV (eurofxref.csv or eurofxref-hist.csv).
    Import(ImportArgs),
}

#[derive(clap::Args)]
pub(super) struct ImportArgs {
    /// The CSV file, as downloaded from the ECB.
    file: PathBuf,
    /// Print what was imported as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Reads an ECB CSV and stores its rates in one transaction, which also makes every `fx_pending`
/// conversion due again (a running server's pipeline picks them up within a second or so).
pub(super) fn import(db: &Path, a: ImportArgs) -> CliResult {
    let file = &a.file;
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let rates = crate::fx::parse_ecb_csv(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    // The parser accepts any three capital letters; a column that is no currency means a foreign
    // or damaged file, refused whole like any other bad cell.
    if let Some((n, code)) =
        header_columns(&text).find(|(_, c)| !crate::currency::is_ecb_rate_currency(c))
    {
        return Err(format!(
            "{}: line 1: column {n} is {code:?}, not an ISO 4217 currency code; nothing imported",
            file.display()
        ));
    }
    let conn = open(db)?;
    let released = store::write_tx(&conn, |tx| {
        for r in &rates {
            store::rates::upsert(
                tx,
                &r.currency,
                &crate::fx::format_day(r.date),
                &r.rate.to_string(),
            )?;
        }
        store::pipeline::unpark(tx, store::now_ms())
    })
    .map_err(|e| e.to_string())?;
    let (first, last) = (
        rates.iter().map(|r| r.date).min(),
        rates.iter().map(|r| r.date).max(),
    );
    let currencies: std::collections::BTreeSet<&str> =
        rates.iter().map(|r| r.currency.as_str()).collect();
    let out = json!({
        "imported": rates.len(),
        "currencies": currencies.len(),
        "from": first.map(|d| d.to_string()),
        "to": last.map(|d| d.to_string()),
        "released": released,
    });
    print(a.json, &out, || match (first, last) {
        (Some(a), Some(b)) => format!(
            "imported {} for {}, {a} to {b}; {} waiting for rates released",
            count(rates.len(), "rate", "rates"),
            count(currencies.len(), "currency", "currencies"),
            count(released, "conversion", "conversions")
        ),
        _ => "the file holds no rates".to_owned(),
    })
}

/// The currency columns of a file `parse_ecb_csv` accepted, numbered from 1 as it numbers them
/// (the `Date` column is 1).
fn header_columns(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.trim_start_matches('\u{feff}')
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .enumerate()
        .skip(1)
        .filter(|(_, c)| !c.is_empty())
        .map(|(i, c)| (i + 1, c))
}
