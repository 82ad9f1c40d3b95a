//! Retention (docs/decisions.md §9): the statements that delete a site's pixel data older than its
//! `retain_days` (and, when the site asks for it, its old conversions), a few rows per call, and
//! the settings that make deleted data leave the file; and the rows of a deleted site, removed the
//! same way ([`purge_site`]).
//!
//! Every function here runs inside the caller's write transaction and does at most about
//! `limit` row deletions, so that the writer is never held up long by one job. What the pruner
//! removes and when is decided by `crate::retention`; nothing here loops over a whole table.

use super::engine::{args, AsConn, Conn};
use super::Result;

/// `site create`'s default for `--retain-days`: 13 months, so a year-on-year comparison of a
/// whole month still finds its sessions.
pub const DEFAULT_RETAIN_DAYS: i64 = 395;

/// Free pages given back to the file system per [`reclaim`] call: 1,000 pages of 4 KiB.
pub const RECLAIM_PAGES: i64 = 1_000;
/// [`RECLAIM_PAGES`] as the statement takes it: a literal, so no SQL is built at run time.
const INCREMENTAL_VACUUM: &str = "PRAGMA incremental_vacuum(1000)";

/// Gives up to [`RECLAIM_PAGES`] free pages back to the file system; returns how many were free
/// before. Inside a write transaction, like any other job. PostgreSQL has no such step: its
/// autovacuum makes dead rows' space reusable, and only `VACUUM FULL` (outside any transaction, an
/// operator's decision) gives it back to the file system; it answers 0.
pub fn reclaim(conn: &impl AsConn) -> Result<i64> {
    let sqlite = match conn.conn() {
        Conn::Sqlite(c) => c,
        Conn::Postgres(_) => return Ok(0),
    };
    let free: i64 = sqlite.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
    if free > 0 {
        sqlite.execute_batch(INCREMENTAL_VACUUM)?;
    }
    Ok(free)
}

/// The key of the advisory lock a PostgreSQL node holds while it prunes ("convapi" and 2): the
/// cluster prunes on one node at a time.
pub const PRUNE_LOCK: i64 = 0x636f_6e76_6170_6902;

/// Takes the lead of pruning for this connection's session: on PostgreSQL the advisory lock
/// [`PRUNE_LOCK`] if no other node holds it (`false` then: that node prunes); on SQLite always
/// (one server per file). Ends with [`end_lead`], or with the session.
pub fn take_lead(conn: &impl AsConn) -> Result<bool> {
    match conn.conn() {
        Conn::Sqlite(_) => Ok(true),
        c @ Conn::Postgres(_) => Ok(c
            .query_opt("SELECT pg_try_advisory_lock(?1)", args![PRUNE_LOCK], |r| {
                r.get::<bool>(0)
            })?
            .unwrap_or(false)),
    }
}

/// Gives up the lead [`take_lead`] took.
pub fn end_lead(conn: &impl AsConn) -> Result<()> {
    if let c @ Conn::Postgres(_) = conn.conn() {
        c.query_opt("SELECT pg_advisory_unlock(?1)", args![PRUNE_LOCK], |_| {
            Ok(())
        })?;
    }
    Ok(())
}

/// A site's retention settings, as the pruner reads them.
#[derive(Debug, Clone)]
pub struct Policy {
    pub site_id: String,
    pub retain_days: i64,
    pub expire_conversions: bool,
}

/// The sites that keep pixel data for a limited time.
pub fn policies(conn: &impl AsConn) -> Result<Vec<Policy>> {
    conn.conn().query_all(
        "SELECT id, retain_days, expire_conversions FROM sites
         WHERE retain_days > 0 AND deleted_at IS NULL ORDER BY id",
        args![],
        |r| {
            Ok(Policy {
                site_id: r.get(0)?,
                retain_days: r.get(1)?,
                expire_conversions: r.get(2)?,
            })
        },
    )
}

/// Rows one prune call deleted, per table (the last five only of a deleted site: [`purge_site`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pruned {
    pub sessions: usize,
    pub events: usize,
    pub visitors: usize,
    pub links: usize,
    pub conversions: usize,
    /// Outbox rows of deleted conversions.
    pub outbox: usize,
    pub deliveries: usize,
    pub destinations: usize,
    /// Webhook sources and the events they received.
    pub sources: usize,
    /// `report_daily` rows.
    pub rollup: usize,
    /// Site rows (a deleted site's, once nothing else of it is left).
    pub sites: usize,
}

impl Pruned {
    pub fn rows(&self) -> usize {
        self.sessions
            + self.events
            + self.visitors
            + self.links
            + self.conversions
            + self.outbox
            + self.deliveries
            + self.destinations
            + self.sources
            + self.rollup
            + self.sites
    }

    pub fn add(&mut self, o: &Pruned) {
        self.sessions += o.sessions;
        self.events += o.events;
        self.visitors += o.visitors;
        self.links += o.links;
        self.conversions += o.conversions;
        self.outbox += o.outbox;
        self.deliveries += o.deliveries;
        self.destinations += o.destinations;
        self.sources += o.sources;
        self.rollup += o.rollup;
        self.sites += o.sites;
    }
}

/// Whether a query finds a row.
fn exists(conn: &impl AsConn, sql: &str, args: &[super::engine::Value]) -> Result<bool> {
    Ok(conn.conn().query_opt(sql, args, |_| Ok(()))?.is_some())
}

/// Whether the site has a session [`prune_sessions`] would delete: a read, so that the pruner
/// sends the writer no job for a site with nothing to prune.
pub fn has_old_sessions(conn: &impl AsConn, site_id: &str, cutoff_ms: i64) -> Result<bool> {
    exists(
        conn,
        "SELECT 1 FROM sessions
         WHERE site_id = ?1 AND started_at < ?2 AND last_activity_at < ?2 LIMIT 1",
        args![site_id, cutoff_ms],
    )
}

/// Whether the site's webhook sources have an event received before `cutoff_ms`.
pub fn has_old_hook_events(conn: &impl AsConn, site_id: &str, cutoff_ms: i64) -> Result<bool> {
    exists(
        conn,
        "SELECT 1 FROM hook_events h JOIN sources s ON s.id = h.source_id
         WHERE s.site_id = ?1 AND h.received_at < ?2 LIMIT 1",
        args![site_id, cutoff_ms],
    )
}

/// Deletes up to `limit` events the site's webhook sources received before `cutoff_ms`, with
/// their kept payloads; how many.
pub fn prune_hook_events(
    conn: &impl AsConn,
    site_id: &str,
    cutoff_ms: i64,
    limit: usize,
) -> Result<usize> {
    let n = conn.conn().execute(
        "DELETE FROM hook_events WHERE (source_id, event_id) IN (
             SELECT h.source_id, h.event_id FROM hook_events h JOIN sources s ON s.id = h.source_id
             WHERE s.site_id = ?1 AND h.received_at < ?2 LIMIT ?3)",
        args![site_id, cutoff_ms, limit as i64],
    )?;
    Ok(n as usize)
}

/// Whether the site has a conversion [`expire_conversions`] would delete.
pub fn has_old_conversions(conn: &impl AsConn, site_id: &str, cutoff_ms: i64) -> Result<bool> {
    exists(
        conn,
        "SELECT 1 FROM conversions WHERE site_id = ?1 AND occurred_at < ?2 LIMIT 1",
        args![site_id, cutoff_ms],
    )
}

/// Deletes about `limit` rows of the site's sessions whose start and last activity both lie
/// before `cutoff_ms`, with their events, oldest first; then the visitors of those sessions that
/// have no session left (so none in the retention period), with their `clientId` links. A
/// visitor and its first session are written in one transaction, so no new visitor is caught
/// between the two.
/// A session with more events than the budget left loses some of them now and goes in a later
/// call. Returns nothing deleted once no such session is left.
pub fn prune_sessions(
    conn: &impl AsConn,
    site_id: &str,
    cutoff_ms: i64,
    limit: usize,
) -> Result<Pruned> {
    let conn = conn.conn();
    let mut out = Pruned::default();
    let old: Vec<(String, String)> = conn.query_all(
        "SELECT id, visitor_id FROM sessions
         WHERE site_id = ?1 AND started_at < ?2 AND last_activity_at < ?2
         ORDER BY started_at LIMIT ?3",
        args![site_id, cutoff_ms, limit as i64],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let mut visitors: Vec<String> = Vec::new();
    for (session, visitor) in &old {
        let budget = limit.saturating_sub(out.rows());
        if budget == 0 {
            break;
        }
        let events = conn.execute(
            "DELETE FROM events WHERE id IN
                 (SELECT id FROM events WHERE session_id = ?1 LIMIT ?2)",
            args![session, budget as i64],
        )? as usize;
        out.events += events;
        if events == budget {
            // Maybe more events: the session waits for the next call.
            break;
        }
        out.sessions +=
            conn.execute("DELETE FROM sessions WHERE id = ?1", args![session])? as usize;
        visitors.push(visitor.clone());
    }
    visitors.sort();
    visitors.dedup();
    for v in &visitors {
        let left = exists(
            &conn,
            "SELECT 1 FROM sessions WHERE site_id = ?1 AND visitor_id = ?2",
            args![site_id, v],
        )?;
        if left {
            continue;
        }
        out.links += conn.execute(
            "DELETE FROM visitor_clients WHERE site_id = ?1 AND visitor_id = ?2",
            args![site_id, v],
        )? as usize;
        out.visitors += conn.execute(
            "DELETE FROM visitors WHERE site_id = ?1 AND id = ?2",
            args![site_id, v],
        )? as usize;
    }
    Ok(out)
}

/// Whether the site keeps conversions older than `cutoff_ms` with a hashed e-mail or phone.
pub fn has_old_user_hashes(conn: &impl AsConn, site_id: &str, cutoff_ms: i64) -> Result<bool> {
    exists(
        conn,
        "SELECT 1 FROM conversions WHERE site_id = ?1 AND occurred_at < ?2
             AND user_hashes IS NOT NULL LIMIT 1",
        args![site_id, cutoff_ms],
    )
}

/// Drops the hashed e-mail and phone of up to `limit` of the site's conversions that occurred
/// before `cutoff_ms` (kept conversions keep no personal data past the site's retention); how many.
pub fn drop_old_user_hashes(
    conn: &impl AsConn,
    site_id: &str,
    cutoff_ms: i64,
    limit: usize,
) -> Result<usize> {
    Ok(conn.conn().execute(
        "UPDATE conversions SET user_hashes = NULL WHERE id IN (
             SELECT id FROM conversions WHERE site_id = ?1 AND occurred_at < ?2
                 AND user_hashes IS NOT NULL LIMIT ?3)",
        args![site_id, cutoff_ms, limit as i64],
    )? as usize)
}

/// Deletes the salts of days before `day` (`daily_salts`): a day's salt goes once it is over even
/// when no visitor without consent comes the next day.
pub fn drop_past_salts(conn: &impl AsConn, day: i64) -> Result<usize> {
    Ok(conn
        .conn()
        .execute("DELETE FROM daily_salts WHERE day < ?1", args![day])? as usize)
}

/// Deletes up to `limit` of the site's conversions that occurred before `cutoff_ms`, with any
/// pipeline work left for them.
pub fn expire_conversions(
    conn: &impl AsConn,
    site_id: &str,
    cutoff_ms: i64,
    limit: usize,
) -> Result<usize> {
    let conn = conn.conn();
    let ids: Vec<String> = conn.query_all(
        "SELECT id FROM conversions WHERE site_id = ?1 AND occurred_at < ?2
         ORDER BY occurred_at LIMIT ?3",
        args![site_id, cutoff_ms, limit as i64],
        |r| r.get(0),
    )?;
    let mut deleted = 0;
    for id in &ids {
        conn.execute("DELETE FROM outbox WHERE conversion_id = ?1", args![id])?;
        deleted += conn.execute("DELETE FROM conversions WHERE id = ?1", args![id])? as usize;
    }
    Ok(deleted)
}

/// How long test data is kept after it was received (docs/decisions/api.md, "Test mode").
pub const TEST_DATA_DAYS: i64 = 7;

/// Whether any site has test data received before `before_ms` (the pruner's cheap look first).
pub fn has_test_data_before(conn: &impl AsConn, before_ms: i64) -> Result<bool> {
    Ok(conn
        .conn()
        .query_opt(
            "SELECT 1 FROM conversions WHERE test <> 0 AND created_at < ?1 LIMIT 1",
            args![before_ms],
            |_| Ok(()),
        )?
        .is_some())
}

/// Deletes up to `limit` test conversions received before `before_ms`, of site `site_id` (`None`:
/// of any site), with everything that hangs on them: their adjustments and the deliveries of
/// those, their deliveries, their outbox rows. Returns how many conversions. Test rows are in no
/// rollup, so none changes. Both reads walk `conversions_test`, which holds test rows only.
pub fn purge_test_data(
    conn: &impl AsConn,
    site_id: Option<&str>,
    before_ms: i64,
    limit: usize,
) -> Result<usize> {
    let conn = conn.conn();
    let ids: Vec<String> = match site_id {
        Some(site) => conn.query_all(
            "SELECT id FROM conversions WHERE site_id = ?1 AND test <> 0 AND created_at < ?2
             ORDER BY created_at LIMIT ?3",
            args![site, before_ms, limit as i64],
            |r| r.get(0),
        )?,
        None => conn.query_all(
            "SELECT id FROM conversions WHERE test <> 0 AND created_at < ?1
             ORDER BY created_at LIMIT ?2",
            args![before_ms, limit as i64],
            |r| r.get(0),
        )?,
    };
    let mut deleted = 0;
    for id in &ids {
        conn.execute(
            "DELETE FROM adjustment_deliveries WHERE conversion_id = ?1",
            args![id],
        )?;
        conn.execute(
            "DELETE FROM adjustments WHERE conversion_id = ?1",
            args![id],
        )?;
        conn.execute("DELETE FROM deliveries WHERE conversion_id = ?1", args![id])?;
        conn.execute("DELETE FROM outbox WHERE conversion_id = ?1", args![id])?;
        deleted += conn.execute(
            "DELETE FROM conversions WHERE id = ?1 AND test <> 0",
            args![id],
        )? as usize;
    }
    Ok(deleted)
}

/// The sites marked deleted whose rows [`purge_site`] has still to remove, oldest deletion first.
pub fn deleted_sites(conn: &impl AsConn) -> Result<Vec<String>> {
    conn.conn().query_all(
        "SELECT id FROM sites WHERE deleted_at IS NOT NULL ORDER BY deleted_at, id",
        args![],
        |r| r.get(0),
    )
}

/// Removes about `limit` rows of a site marked deleted (`sites::mark_deleted`), in an order that
/// leaves no row pointing at a removed one: its conversions with their deliveries and outbox rows
/// (what else hangs on a conversion goes with it by `ON DELETE CASCADE`; the rollup's trigger
/// takes each out of `report_daily`), its sessions with their events and visitors, the visitors and
/// links left, its destinations, its `report_daily` rows, and once nothing of it is left the site
/// row itself (`sites` is 1 then). Each step reads through the site's own index. Nothing deleted:
/// the site is gone, or was never marked (a live site is never touched).
pub fn purge_site(conn: &impl AsConn, site_id: &str, limit: usize) -> Result<Pruned> {
    let conn = conn.conn();
    let mut out = Pruned::default();
    let marked = exists(
        &conn,
        "SELECT 1 FROM sites WHERE id = ?1 AND deleted_at IS NOT NULL",
        args![site_id],
    )?;
    if !marked {
        return Ok(out);
    }
    let left = |out: &Pruned| limit.saturating_sub(out.rows());
    let conversions: Vec<String> = conn.query_all(
        "SELECT id FROM conversions WHERE site_id = ?1 LIMIT ?2",
        args![site_id, limit as i64],
        |r| r.get(0),
    )?;
    for id in &conversions {
        if left(&out) == 0 {
            return Ok(out);
        }
        out.deliveries +=
            conn.execute("DELETE FROM deliveries WHERE conversion_id = ?1", args![id])? as usize;
        out.outbox +=
            conn.execute("DELETE FROM outbox WHERE conversion_id = ?1", args![id])? as usize;
        out.conversions +=
            conn.execute("DELETE FROM conversions WHERE id = ?1", args![id])? as usize;
    }
    if left(&out) == 0 {
        return Ok(out);
    }
    out.add(&prune_sessions(&conn, site_id, i64::MAX, left(&out))?);
    if left(&out) == 0 {
        return Ok(out);
    }
    // Links and visitors without a session (their sessions pruned before, or never written).
    out.links += conn.execute(
        "DELETE FROM visitor_clients WHERE id IN
             (SELECT id FROM visitor_clients WHERE site_id = ?1 LIMIT ?2)",
        args![site_id, left(&out) as i64],
    )? as usize;
    let no_session = !exists(
        &conn,
        "SELECT 1 FROM sessions WHERE site_id = ?1 LIMIT 1",
        args![site_id],
    )?;
    if no_session && left(&out) > 0 {
        out.visitors += conn.execute(
            "DELETE FROM visitors WHERE site_id = ?1 AND id IN
                 (SELECT id FROM visitors WHERE site_id = ?1 LIMIT ?2)",
            args![site_id, left(&out) as i64],
        )? as usize;
    }
    if left(&out) == 0 {
        return Ok(out);
    }
    out.destinations += conn.execute(
        "DELETE FROM destinations WHERE id IN
             (SELECT id FROM destinations WHERE site_id = ?1 LIMIT ?2)",
        args![site_id, left(&out) as i64],
    )? as usize;
    if left(&out) == 0 {
        return Ok(out);
    }
    // Its webhook sources, their events first (a source's events may be many).
    out.sources += conn.execute(
        "DELETE FROM hook_events WHERE (source_id, event_id) IN
             (SELECT e.source_id, e.event_id FROM hook_events e JOIN sources s ON s.id = e.source_id
              WHERE s.site_id = ?1 LIMIT ?2)",
        args![site_id, left(&out) as i64],
    )? as usize;
    if left(&out) == 0 {
        return Ok(out);
    }
    out.sources += conn.execute(
        "DELETE FROM sources WHERE site_id = ?1 AND id NOT IN (SELECT source_id FROM hook_events)",
        args![site_id],
    )? as usize;
    if left(&out) == 0 {
        return Ok(out);
    }
    out.rollup += conn.execute(
        "DELETE FROM report_daily
         WHERE (site_id, day, type, attributed, source, medium, campaign, nulls) IN
             (SELECT site_id, day, type, attributed, source, medium, campaign, nulls
              FROM report_daily WHERE site_id = ?1 LIMIT ?2)",
        args![site_id, left(&out) as i64],
    )? as usize;
    if left(&out) == 0 {
        return Ok(out);
    }
    let remains = exists(
        &conn,
        "SELECT 1 FROM conversions WHERE site_id = ?1
         UNION ALL SELECT 1 FROM sessions WHERE site_id = ?1
         UNION ALL SELECT 1 FROM visitors WHERE site_id = ?1
         UNION ALL SELECT 1 FROM visitor_clients WHERE site_id = ?1
         UNION ALL SELECT 1 FROM destinations WHERE site_id = ?1
         UNION ALL SELECT 1 FROM sources WHERE site_id = ?1
         UNION ALL SELECT 1 FROM report_daily WHERE site_id = ?1 LIMIT 1",
        args![site_id],
    )?;
    if !remains {
        out.sites += conn.execute(
            "DELETE FROM sites WHERE id = ?1 AND deleted_at IS NOT NULL",
            args![site_id],
        )? as usize;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    /// A file at schema version 1 with a conversion, its session and its outbox row.
    fn version_1_with_a_conversion() -> Connection {
        let conn = super::super::version_1_fixture();
        conn.execute_batch(
            "INSERT INTO sessions (id, site_id, visitor_id, started_at, last_activity_at)
                 VALUES ('old', 's', 'v', 10, 20);
             INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id, value,
                     currency, occurred_at, created_at, source_api, status, reporting_value)
                 VALUES ('c', 's', 'o1', 'purchase', 'old', 'v', '12.50', 'EUR', 15, 15, 1,
                     'processed', '12.50');
             INSERT INTO outbox (conversion_id, next_attempt_at, created_at) VALUES ('c', 15, 15);",
        )
        .unwrap();
        conn
    }

    #[test]
    fn the_migration_keeps_conversions_and_outbox_and_frees_sessions() {
        let mut conn = version_1_with_a_conversion();
        super::super::migrate(&mut conn).unwrap();
        let violations: i64 = conn
            .query_row("SELECT COUNT(*) FROM pragma_foreign_key_check", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(violations, 0);
        let kept: (String, String, i64) = conn
            .query_row(
                "SELECT c.session_id, c.reporting_value, o.id FROM conversions c
                 JOIN outbox o ON o.conversion_id = c.id",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(kept, ("old".to_owned(), "12.50".to_owned(), 1));
        let (days, expire): (i64, bool) = conn
            .query_row(
                "SELECT retain_days, expire_conversions FROM sites",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((days, expire), (DEFAULT_RETAIN_DAYS, false));
        // The outbox still refers to conversions: a conversion with work left cannot vanish.
        assert!(conn
            .execute("DELETE FROM conversions WHERE id = 'c'", [])
            .is_err());
        // The session can go; the conversion stays with what the pipeline stored.
        let pruned = prune_sessions(&conn, "s", 1_000, 500).unwrap();
        assert_eq!((pruned.sessions, pruned.visitors), (1, 1));
        assert_eq!(expire_conversions(&conn, "s", 15, 500).unwrap(), 0);
        assert_eq!(expire_conversions(&conn, "s", 16, 500).unwrap(), 1);
        let left: i64 = conn
            .query_row("SELECT COUNT(*) FROM outbox", [], |r| r.get(0))
            .unwrap();
        assert_eq!(left, 0);
    }

    /// A site marked deleted, `kept` live, each with visitors, sessions, 7 events, links,
    /// conversions with outbox rows and deliveries, a destination and rollup rows.
    fn two_sites() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::migrate(&mut conn).unwrap();
        conn.execute_batch("INSERT INTO tenants (id, name, created_at) VALUES ('t', 'T', 0)")
            .unwrap();
        for s in ["gone", "kept"] {
            let deleted_at = (s == "gone").then_some(1_i64);
            let run = |sql: &str, args: &[&dyn rusqlite::ToSql]| {
                conn.execute(sql, args).unwrap();
            };
            run(
                "INSERT INTO sites (id, tenant_id, tracker_id, name, currency, window_days, model,
                     created_at, deleted_at)
                     VALUES (?1, 't', 'tr-' || ?1, ?1, 'EUR', 30, 'last_touch', 0, ?2)",
                &[&s, &deleted_at],
            );
            run(
                "INSERT INTO destinations (id, site_id, kind, name, settings, secrets, events,
                     consent, created_at, updated_at)
                     VALUES ('d-' || ?1, ?1, 'meta', 'M', '{}', '{}', '{}', 'none', 0, 0)",
                &[&s],
            );
            for v in 0..2 {
                let visitor = format!("v{v}");
                let session = format!("{s}-s{v}");
                run(
                    "INSERT INTO visitors (site_id, id, created_at) VALUES (?1, ?2, 0)",
                    &[&s, &visitor],
                );
                run(
                    "INSERT INTO visitor_clients (site_id, client_id, visitor_id, created_at)
                         VALUES (?1, 'c', ?2, 0)",
                    &[&s, &visitor],
                );
                run(
                    "INSERT INTO sessions (id, site_id, visitor_id, started_at, last_activity_at)
                         VALUES (?3, ?1, ?2, 0, 0)",
                    &[&s, &visitor, &session],
                );
            }
            for e in 0..7 {
                run(
                    "INSERT INTO events (id, site_id, session_id, type, ts)
                         VALUES (?2, ?1, ?1 || '-s0', 'pageview', 0)",
                    &[&s, &format!("{s}-e{e}")],
                );
            }
            for c in 0..3_i64 {
                let id = format!("{s}-c{c}");
                run(
                    "INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id,
                         currency, occurred_at, created_at, source_api, status)
                         VALUES (?2, ?1, 'o' || ?3, 'purchase', ?1 || '-s0', 'v0', 'EUR',
                             ?3, 0, 1, 'processed')",
                    &[&s, &id, &c],
                );
                run(
                    "INSERT INTO outbox (conversion_id, created_at) VALUES (?1, 0)",
                    &[&id],
                );
                run(
                    "INSERT INTO deliveries (destination_id, conversion_id, created_at)
                         VALUES ('d-' || ?1, ?2, 0)",
                    &[&s, &id],
                );
            }
        }
        conn
    }

    /// Every row that names the site, in every table that can (sites by id).
    fn rows_of(conn: &Connection, site: &str) -> i64 {
        conn.query_row(
            "SELECT (SELECT COUNT(*) FROM sites WHERE id = ?1)
                 + (SELECT COUNT(*) FROM visitors WHERE site_id = ?1)
                 + (SELECT COUNT(*) FROM visitor_clients WHERE site_id = ?1)
                 + (SELECT COUNT(*) FROM sessions WHERE site_id = ?1)
                 + (SELECT COUNT(*) FROM events WHERE site_id = ?1)
                 + (SELECT COUNT(*) FROM conversions WHERE site_id = ?1)
                 + (SELECT COUNT(*) FROM outbox o JOIN conversions c ON c.id = o.conversion_id
                        WHERE c.site_id = ?1)
                 + (SELECT COUNT(*) FROM deliveries x JOIN destinations d ON d.id = x.destination_id
                        WHERE d.site_id = ?1)
                 + (SELECT COUNT(*) FROM destinations WHERE site_id = ?1)
                 + (SELECT COUNT(*) FROM report_daily WHERE site_id = ?1)",
            [site],
            |r| r.get(0),
        )
        .unwrap()
    }

    #[test]
    fn a_deleted_site_goes_in_jobs_of_about_the_limit_the_site_row_last() {
        let conn = two_sites();
        let (gone, kept) = (rows_of(&conn, "gone"), rows_of(&conn, "kept"));
        assert!(gone > 20, "{gone}");
        let (mut calls, mut left) = (0, gone);
        loop {
            let done = purge_site(&conn, "gone", 4).unwrap();
            calls += 1;
            // About the limit: a conversion goes whole, with its outbox row and deliveries, and
            // a session with its visitor and the visitor's links (up to 3 rows each here).
            assert!(done.rows() <= 3 * 4, "{done:?}");
            if done.sites == 1 {
                assert_eq!(rows_of(&conn, "gone"), 0);
                break;
            }
            assert!(
                done.rows() > 0,
                "a call that deletes nothing before the end"
            );
            left -= done.rows() as i64;
            assert_eq!(rows_of(&conn, "gone"), left, "each row counted once");
        }
        assert!(calls >= gone as usize / 12, "{calls} calls for {gone} rows");
        assert_eq!(
            rows_of(&conn, "kept"),
            kept,
            "the live site keeps every row"
        );
        // A live site is never touched, whatever it is asked.
        assert_eq!(purge_site(&conn, "kept", 1_000).unwrap(), Pruned::default());
        assert_eq!(rows_of(&conn, "kept"), kept);
    }

    #[test]
    fn the_vacuum_statement_frees_reclaim_pages() {
        assert!(INCREMENTAL_VACUUM.ends_with(&format!("({RECLAIM_PAGES})")));
    }

    #[test]
    fn a_session_with_more_events_than_the_budget_goes_over_several_calls() {
        let mut conn = version_1_with_a_conversion();
        super::super::migrate(&mut conn).unwrap();
        for i in 0..7 {
            conn.execute(
                "INSERT INTO events (id, site_id, session_id, type, ts) VALUES (?1, 's', 'old', 'pageview', 12)",
                [format!("e{i}")],
            )
            .unwrap();
        }
        let first = prune_sessions(&conn, "s", 1_000, 5).unwrap();
        assert_eq!((first.events, first.sessions), (5, 0));
        let second = prune_sessions(&conn, "s", 1_000, 5).unwrap();
        assert_eq!((second.events, second.sessions, second.visitors), (2, 1, 1));
        assert_eq!(
            prune_sessions(&conn, "s", 1_000, 5).unwrap(),
            Pruned::default()
        );
    }
}
