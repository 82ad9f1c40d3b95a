//! The report's visitors rollup (migration 0022): per site and UTC day, sketches of the visitors'
//! ids (`crate::sketch`) by kind, grouping and key, and whether they are current
//! (`sketch_days`: `built` equal to `version`, and the rules of this build). The triggers of the
//! migration move a day's version when its rows change; [`store_day`] stores a build only if the
//! version it read is still the day's. `crate::sketches` builds them, `crate::report` reads them.

use super::engine::{args, AsConn, Value};
use super::Result;

/// The days in `from_day..=to_day` (UTC days since 1970) of the site whose sketches are current.
pub fn current_days(
    conn: &impl AsConn,
    site_id: &str,
    from_day: i64,
    to_day: i64,
    rules: i64,
) -> Result<Vec<i64>> {
    // Current: built at its version, with `rules`.
    conn.conn().query_all(
        "SELECT d.day FROM sketch_days d
         WHERE d.site_id = ?1 AND d.day >= ?2 AND d.day <= ?3
            AND d.built = d.version AND d.rules = ?4
         ORDER BY d.day",
        args![site_id, from_day, to_day, rules],
        |r| r.get(0),
    )
}

/// One stored sketch: kind (0 visitors, 1 converting visitors), grouping ('' for all), key, bytes.
pub type Stored = (i64, String, String, Vec<u8>);

/// Calls `f` with each current sketch of the site's days in `from_day..=to_day` whose grouping is
/// '' (every visitor) or `dim`.
pub fn each_current<E: From<super::StoreError>>(
    conn: &impl AsConn,
    site_id: &str,
    from_day: i64,
    to_day: i64,
    rules: i64,
    dim: &str,
    mut f: impl FnMut(Stored) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    conn.conn().query_each(
        "SELECT s.kind, s.dim, s.key, s.sketch FROM sketch_days d
         JOIN visitor_sketches s ON s.site_id = d.site_id AND s.day = d.day
         WHERE d.site_id = ?1 AND d.day >= ?2 AND d.day <= ?3
            AND d.built = d.version AND d.rules = ?4 AND (s.dim = '' OR s.dim = ?5)",
        args![site_id, from_day, to_day, rules, dim],
        |r| f((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
    )
}

/// A day to build before `before_day`: one whose sketches are missing or not current (the
/// earliest, of the first site by id), or else the day after the site's last one in day order
/// (from its first day with a session or a counted conversion). With it: its version now (0 when
/// it has no row) and the site's `sketches_through` when the day is the next in day order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub site_id: String,
    pub day: i64,
    pub version: i64,
    /// `Some(through)` when the day is the site's next in day order, read as `through`.
    pub advances: Option<Option<i64>>,
}

pub fn next_due(conn: &impl AsConn, before_day: i64, rules: i64) -> Result<Option<Due>> {
    let stale = conn.conn().query_opt(
        "SELECT d.site_id, d.day, d.version FROM sketch_days d JOIN sites s ON s.id = d.site_id
         WHERE s.deleted_at IS NULL AND d.day < ?1
            AND (d.built IS NULL OR d.built <> d.version OR d.rules <> ?2)
         ORDER BY d.site_id, d.day LIMIT 1",
        args![before_day, rules],
        |r| {
            Ok(Due {
                site_id: r.get(0)?,
                day: r.get(1)?,
                version: r.get(2)?,
                advances: None,
            })
        },
    )?;
    if stale.is_some() {
        return Ok(stale);
    }
    let behind: Vec<(String, Option<i64>)> = conn.conn().query_all(
        "SELECT id, sketches_through FROM sites
         WHERE deleted_at IS NULL AND (sketches_through IS NULL OR sketches_through < ?1)
         ORDER BY id",
        args![before_day - 1],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    for (site_id, through) in behind {
        let day = match through {
            Some(t) => t + 1,
            None => match first_day(conn, &site_id)? {
                Some(first) => first,
                // Nothing yet: the order starts at the first day with rows.
                None => continue,
            },
        };
        if day >= before_day {
            continue;
        }
        let version = conn
            .conn()
            .query_opt(
                "SELECT version FROM sketch_days WHERE site_id = ?1 AND day = ?2",
                args![site_id.as_str(), day],
                |r| r.get(0),
            )?
            .unwrap_or(0);
        return Ok(Some(Due {
            site_id,
            day,
            version,
            advances: Some(through),
        }));
    }
    Ok(None)
}

/// The site's first UTC day with a session or a counted conversion.
fn first_day(conn: &impl AsConn, site_id: &str) -> Result<Option<i64>> {
    let session: Option<Option<i64>> = conn.conn().query_opt(
        "SELECT MIN(started_at) FROM sessions WHERE site_id = ?1",
        args![site_id],
        |r| r.get(0),
    )?;
    let conversion: Option<Option<i64>> = conn.conn().query_opt(
        "SELECT MIN(occurred_at) FROM conversions WHERE site_id = ?1 AND test = 0",
        args![site_id],
        |r| r.get(0),
    )?;
    let first = [session.flatten(), conversion.flatten()]
        .into_iter()
        .flatten()
        .min();
    Ok(first.map(|ms| ms.div_euclid(super::report::DAY_MS)))
}

/// Stores a build of the site's day read at `version`, if that is still the day's version (else
/// nothing: the day is due again); and, for a day in day order, moves `sketches_through` to it if
/// it is still as read. Whether the build was stored.
pub fn store_day(
    conn: &impl AsConn,
    due: &Due,
    rules: i64,
    sketches: &[(i64, String, String, Vec<u8>)],
) -> Result<bool> {
    let c = conn.conn();
    let stored = c.execute(
        "INSERT INTO sketch_days (site_id, day, version, built, rules) VALUES (?1, ?2, ?3, ?3, ?4)
         ON CONFLICT (site_id, day) DO UPDATE SET built = excluded.built, rules = excluded.rules
         WHERE sketch_days.version = excluded.version",
        args![due.site_id.as_str(), due.day, due.version, rules],
    )? == 1;
    if stored {
        c.execute(
            "DELETE FROM visitor_sketches WHERE site_id = ?1 AND day = ?2",
            args![due.site_id.as_str(), due.day],
        )?;
        for (kind, dim, key, bytes) in sketches {
            c.execute(
                "INSERT INTO visitor_sketches (site_id, day, kind, dim, key, sketch)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                args![
                    due.site_id.as_str(),
                    due.day,
                    *kind,
                    dim.as_str(),
                    key.as_str(),
                    bytes.as_slice()
                ],
            )?;
        }
    }
    if let Some(through) = due.advances {
        let was = match through {
            Some(t) => Value::Int(t),
            None => Value::Null,
        };
        c.execute(
            "UPDATE sites SET sketches_through = ?2
             WHERE id = ?1
                AND COALESCE(sketches_through, CAST(-1 AS BIGINT)) = COALESCE(?3, CAST(-1 AS BIGINT))",
            &[Value::from(due.site_id.as_str()), Value::Int(due.day), was],
        )?;
    }
    Ok(stored)
}
