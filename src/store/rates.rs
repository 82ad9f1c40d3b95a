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
