//! The `fx_rates` table: ECB reference rates, units of a currency per 1 EUR on a day. Written once
//! for both engines (`engine/mod.rs`).

use super::engine::{args, AsConn};
use super::Result;

/// Stores one rate, replacing the one already known for that currency and day (imports are idempotent).
pub fn upsert(conn: &impl AsConn, currency: &str, date: &str, rate: &str) -> Result<()> {
    conn.conn().execute(
        "INSERT INTO fx_rates (currency, date, rate) VALUES (?1, ?2, ?3)
         ON CONFLICT (currency, date) DO UPDATE SET rate = excluded.rate",
        args![currency, date, rate],
    )?;
    Ok(())
}

/// The rate of `currency` on `date` (YYYY-MM-DD) or the latest earlier day: `(rate, its date)`.
pub fn on_or_before(
    conn: &impl AsConn,
    currency: &str,
    date: &str,
) -> Result<Option<(String, String)>> {
    conn.conn().query_opt(
        "SELECT rate, date FROM fx_rates WHERE currency = ?1 AND date <= ?2
         ORDER BY date DESC LIMIT 1",
        args![currency, date],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// Currencies the ECB publishes every working day: the newest day among them is the newest day
/// of a rates file, found with one primary-key step each (a `max` over all of `fx_rates` would
/// read every row of a history file).
const DAILY_CURRENCIES: [&str; 4] = ["USD", "GBP", "JPY", "CHF"];

/// The newest day of the imported rates (`YYYY-MM-DD`), by [`DAILY_CURRENCIES`].
pub fn newest_day(conn: &impl AsConn) -> Result<Option<String>> {
    let conn = conn.conn();
    let mut newest: Option<String> = None;
    for c in DAILY_CURRENCIES {
        let day: Option<String> = conn.query_opt(
            "SELECT date FROM fx_rates WHERE currency = ?1 ORDER BY date DESC LIMIT 1",
            args![c],
            |r| r.get(0),
        )?;
        if day > newest {
            newest = day;
        }
    }
    Ok(newest)
}
