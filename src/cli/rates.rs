//! `convapi rates ...`: ECB reference rates, which the pipeline converts currencies with: a file
//! imported as the ECB publishes it (CSV or zip), or the daily file fetched (`crate::ecb`).

use std::path::PathBuf;

use clap::Subcommand;
use serde_json::json;

use super::{count, open, print, CliResult};
use crate::store;
use crate::store::engine::Location;

#[derive(Subcommand)]
pub(super) enum RatesCmd {
    /// Import an ECB reference-rate file as published: eurofxref.zip or eurofxref-hist.zip, or the
    /// CSV inside (eurofxref.csv, eurofxref-hist.csv).
    Import(ImportArgs),
    /// Download the ECB's daily rates over HTTPS and import them (what `serve --rates-fetch daily`
    /// does once a day).
    Fetch(FetchArgs),
}

#[derive(clap::Args)]
pub(super) struct ImportArgs {
    /// The file, as downloaded from the ECB (zip or CSV).
    file: PathBuf,
    /// Print what was imported as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(super) struct FetchArgs {
    /// Where to download the file from (zip or CSV).
    #[arg(long, default_value = crate::ecb::DAILY_URL)]
    url: String,
    /// Print what was imported as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Reads an ECB file and stores its rates in one transaction, which also makes every `fx_pending`
/// conversion due again (a running server's pipeline picks them up within a second or so).
pub(super) fn import(db: &Location, a: ImportArgs) -> CliResult {
    let file = &a.file;
    let opened = std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let rates = crate::ecb::read_file(opened).map_err(|e| format!("{}: {e}", file.display()))?;
    store_and_print(db, &rates, a.json)
}

/// Downloads the file at `--url` and imports it like `rates import`.
pub(super) fn fetch(db: &Location, a: FetchArgs) -> CliResult {
    let rates = crate::ecb::fetch(&a.url).map_err(|e| e.to_string())?;
    store_and_print(db, &rates, a.json)
}

fn store_and_print(db: &Location, rates: &[crate::fx::Rate], as_json: bool) -> CliResult {
    let conn = open(db)?;
    let released = store::write_tx(&conn, |tx| {
        crate::ecb::store_rates(tx, rates, store::now_ms())
    })?;
    let s = crate::ecb::summary(rates);
    let out = json!({
        "imported": s.imported,
        "currencies": s.currencies,
        "from": s.from.map(|d| d.to_string()),
        "to": s.to.map(|d| d.to_string()),
        "released": released,
    });
    print(as_json, &out, || match (s.from, s.to) {
        (Some(a), Some(b)) => format!(
            "imported {} for {}, {a} to {b}; {} waiting for rates released",
            count(s.imported, "rate", "rates"),
            count(s.currencies, "currency", "currencies"),
            count(released, "conversion", "conversions")
        ),
        _ => "the file holds no rates".to_owned(),
    })
}
