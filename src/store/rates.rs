//! The `fx_rates` table: ECB reference rates, units of a currency per 1 EUR on a day.

use rusqlite::{params, Connection, OptionalExtension};

use super::Result;

/// Stores one rate, replacing the one already known for that currency and day (imports are idempotent).
pub fn upsert(conn: &Connection, currency: &str, date: &str, rate: &str) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO fx_rates (currency, date, rate) VALUES (?1, ?2, ?3)
         ON CONFLICT (currency, date) DO UPDATE SET rate = excluded.rate",
    )?
    .execute(params![currency, date, rate])?;
    Ok(())
}

/// The rate of `currency` on `date` (YYYY-MM-DD) or the latest earlier day: `(rate, its date)`.
pub fn on_or_before(
    conn: &Connection,
    currency: &str,
    date: &str,
) -> Result<Option<(String, String)>> {
    Ok(conn
        .prepare_cached(
            "SELECT rate, date FROM fx_rates WHERE currency = ?1 AND date <= ?2
             ORDER BY date DESC LIMIT 1",
        )?
        .query_row(params![currency, date], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?)
}

/// Currencies the ECB publishes every working day: the newest day among them is the newest day
/// of a rates file, found with one primary-key step each (a `max` over all of `fx_rates` would
/// read every row of a history file).
const DAILY_CURRENCIES: [&str; 4] = ["USD", "GBP", "JPY", "CHF"];

/// The newest day of the imported rates (`YYYY-MM-DD`), by [`DAILY_CURRENCIES`].
pub fn newest_day(conn: &Connection) -> Result<Option<String>> {
    let mut newest: Option<String> = None;
    let mut stmt = conn.prepare_cached(
        "SELECT date FROM fx_rates WHERE currency = ?1 ORDER BY date DESC LIMIT 1",
    )?;
    for c in DAILY_CURRENCIES {
        let day: Option<String> = stmt.query_row([c], |r| r.get(0)).optional()?;
        if day > newest {
            newest = day;
        }
    }
    Ok(newest)
}
