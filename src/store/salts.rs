//! The `daily_salts` table: the salt of the day that a visitor without analytics consent is counted
//! by (`tracking::cookieless_visitor`). The day's first such batch makes it, on whichever node gets
//! it: the insert does nothing when another node's came first, and everyone then reads the one
//! stored. Salts of past days are deleted then, so yesterday's visitor ids can no longer be
//! recomputed from an address and a user agent. Written once for both engines (`engine/mod.rs`).

use super::engine::{args, AsConn};
use super::{Result, StoreError};

/// Milliseconds in a day: days are counted from 1970-01-01 in UTC.
pub const DAY_MS: i64 = 86_400_000;

/// The day (since 1970-01-01, UTC) of an epoch-ms time.
pub fn day_of(ms: i64) -> i64 {
    ms.div_euclid(DAY_MS)
}

/// The salt of `day`, made now if no node made it yet; the salts of earlier days are deleted.
/// Runs inside the caller's write transaction.
pub fn for_day(conn: &impl AsConn, day: i64, now_ms: i64) -> Result<String> {
    let conn = conn.conn();
    if let Some(salt) = read(&conn, day)? {
        return Ok(salt);
    }
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| StoreError::Other(format!("no OS randomness for the day's salt: {e}")))?;
    let salt: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    conn.execute(
        "INSERT INTO daily_salts (day, salt, created_at) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
        args![day, &salt, now_ms],
    )?;
    conn.execute("DELETE FROM daily_salts WHERE day < ?1", args![day])?;
    // Another node's salt when its insert came first: every node counts a visitor alike.
    read(&conn, day)?
        .ok_or_else(|| StoreError::Other(format!("the salt of day {day} is gone again")))
}

fn read(conn: &impl AsConn, day: i64) -> Result<Option<String>> {
    conn.conn().query_opt(
        "SELECT salt FROM daily_salts WHERE day = ?1",
        args![day],
        |r| r.get(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_salt_per_day_and_past_days_are_deleted() {
        let mut conn = rusqlite::Connection::open_in_memory().unwrap();
        super::super::migrate(&mut conn).unwrap();
        let a = for_day(&conn, 100, 1).unwrap();
        assert_eq!(a.len(), 64);
        assert_eq!(
            for_day(&conn, 100, 2).unwrap(),
            a,
            "the stored one is read back"
        );
        let b = for_day(&conn, 101, 3).unwrap();
        assert_ne!(a, b);
        let days: Vec<i64> = conn
            .conn()
            .query_all("SELECT day FROM daily_salts", args![], |r| r.get(0))
            .unwrap();
        assert_eq!(days, vec![101], "yesterday's salt is gone");
        assert_eq!(day_of(DAY_MS * 5 + 1), 5);
        assert_eq!(day_of(-1), -1);
    }
}
