//! Reports stored with unknown fields (docs/decisions.md §3, "Typos are named"): per site, how
//! many today (UTC) and the last example, for the dashboard's site overview. One row per site,
//! started over on a new day, so the table never grows past the sites. Written in the writer's
//! transaction of the conversions it counts: no commit of its own. Written once for both engines.

use super::engine::{args, AsConn};
use super::Result;

/// A day as stored: days since the Unix epoch (UTC).
pub fn day_of(ms: i64) -> i64 {
    ms.div_euclid(86_400_000)
}

/// Adds `reports` stored with unknown fields to the site's count of the day of `now_ms`, with
/// `example` the last seen.
pub fn add(
    conn: &impl AsConn,
    site_id: &str,
    reports: i64,
    example: &str,
    now_ms: i64,
) -> Result<()> {
    conn.conn().execute(
        "INSERT INTO field_warnings (site_id, day, reports, example, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (site_id) DO UPDATE SET
             reports = CASE WHEN field_warnings.day = excluded.day
                            THEN field_warnings.reports + excluded.reports
                            ELSE excluded.reports END,
             day = excluded.day, example = excluded.example, updated_at = excluded.updated_at",
        args![site_id, day_of(now_ms), reports, example, now_ms],
    )?;
    Ok(())
}

/// Today's count of a site: `(reports, last example)`, `None` when it has none today.
pub fn today(conn: &impl AsConn, site_id: &str, now_ms: i64) -> Result<Option<(i64, String)>> {
    conn.conn().query_opt(
        "SELECT reports, example FROM field_warnings WHERE site_id = ?1 AND day = ?2",
        args![site_id, day_of(now_ms)],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}
