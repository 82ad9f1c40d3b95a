//! Erasure of one person of one site (docs/decisions.md §9): every visitor that makes up the
//! person, their `clientId` links, sessions and pixel events go; their conversions stay, for the
//! revenue totals, with every identifier cleared — or go too when asked.
//!
//! An erased conversion keeps its order id, type, value, currency, times and everything the
//! pipeline stored except the attributed session's id: `visitor_id` and `session_id` become `''`
//! (the columns are `NOT NULL`, and no visitor or session has an empty id), `client_id` and
//! `attr_session_id` become NULL. It runs inside the caller's write transaction, so a person is
//! erased entirely or not at all, and a second erasure finds nothing and counts zeros.
//!
//! Written once for both engines (`engine/mod.rs`). What the rows leave behind in the file differs:
//! SQLite overwrites deleted rows in place (`secure_delete`, see `retention.rs`); PostgreSQL keeps
//! dead row versions until `VACUUM` removes them ([`vacuum_erased`]).

use serde::Serialize;

use super::engine::{args, AsConn, Conn};
use super::Result;

/// After an erasure has committed, on PostgreSQL: `VACUUM` of the tables erasure touches, so that
/// the dead versions of the erased rows leave the tables and their indexes now rather than when
/// autovacuum comes by (no snapshot can read them any more; their bytes stay in the files' free
/// space until overwritten, and in the write-ahead log until it is recycled). It reads each table
/// whole: the operator's `convapi forget` runs it, the API's erasure leaves it to autovacuum.
/// SQLite needs nothing: `secure_delete` overwrote the rows in the transaction itself.
pub fn vacuum_erased(conn: &impl AsConn) -> Result<()> {
    if let Conn::Postgres(c) = conn.conn() {
        c.batch_execute("VACUUM events, sessions, visitor_clients, visitors, conversions")?;
    }
    Ok(())
}

/// Whom to forget.
#[derive(Debug, Clone, Copy)]
pub enum Person<'a> {
    /// The merchant's user id: every visitor linked to it or seen in a session it identified.
    Client(&'a str),
    /// One browser.
    Visitor(&'a str),
}

/// What an erasure removed or changed, row counts per table.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Erased {
    pub visitors: usize,
    pub links: usize,
    pub sessions: usize,
    pub events: usize,
    pub conversions_anonymised: usize,
    pub conversions_deleted: usize,
}

/// Forgets `person` on `site_id`; with `delete_conversions` their conversions (and any pipeline
/// work left for them) are deleted instead of anonymised.
pub fn forget(
    conn: &impl AsConn,
    site_id: &str,
    person: Person<'_>,
    delete_conversions: bool,
) -> Result<Erased> {
    let conn = conn.conn();
    let client_id = match person {
        Person::Client(c) => Some(c),
        Person::Visitor(_) => None,
    };
    let visitors = visitors_of(&conn, site_id, person)?;
    let mut erased = Erased::default();

    // Conversions first: they name sessions and visitors that are about to go.
    let mut ids: Vec<String> = Vec::new();
    if let Some(c) = client_id {
        ids.extend(conn.query_all(
            "SELECT id FROM conversions WHERE site_id = ?1 AND client_id = ?2",
            args![site_id, c],
            |r| r.get(0),
        )?);
    }
    // An order kept with no session names the visitorId it was reported with, which the pixel
    // may never have seen (docs/decisions.md §3).
    if let Person::Visitor(v) = person {
        ids.extend(conn.query_all(
            "SELECT id FROM conversions WHERE site_id = ?1 AND visitor_id = ?2",
            args![site_id, v],
            |r| r.get(0),
        )?);
    }
    // By the visitor, or by one of its sessions: the pixel may have recorded the visitor of the
    // session it saw, the API the one its identifiers resolved to.
    for v in &visitors {
        ids.extend(conn.query_all(
            "SELECT id FROM conversions WHERE site_id = ?1 AND visitor_id = ?2
             UNION
             SELECT c.id FROM sessions s JOIN conversions c ON c.session_id = s.id
             WHERE s.site_id = ?1 AND s.visitor_id = ?2",
            args![site_id, v],
            |r| r.get(0),
        )?);
    }
    ids.sort();
    ids.dedup();
    let count = |n: u64| n as usize;
    for id in &ids {
        if delete_conversions {
            conn.execute("DELETE FROM outbox WHERE conversion_id = ?1", args![id])?;
            erased.conversions_deleted +=
                count(conn.execute("DELETE FROM conversions WHERE id = ?1", args![id])?);
        } else {
            erased.conversions_anonymised += count(conn.execute(
                // One kept with no session stays without (unattributed, never resolved again).
                "UPDATE conversions SET visitor_id = '', client_id = NULL,
                     session_id = CASE WHEN session_id IS NULL THEN NULL ELSE '' END,
                     attr_session_id = NULL, user_hashes = NULL
                 WHERE id = ?1",
                args![id],
            )?);
            // Nothing of the person goes to an ad platform after this (docs/decisions.md §13).
            conn.execute(
                "UPDATE deliveries SET status = 'skipped', next_attempt_at = NULL,
                     last_error = 'the person was erased (forget) before it was sent'
                 WHERE conversion_id = ?1 AND status = 'pending'",
                args![id],
            )?;
        }
    }

    // A webhook event kept for a later retry holds the person's identifiers in its payload.
    if let Some(c) = client_id {
        conn.execute(
            "UPDATE hook_events SET payload = NULL, client_id = NULL
             WHERE client_id = ?1 AND source_id IN (SELECT id FROM sources WHERE site_id = ?2)",
            args![c, site_id],
        )?;
    }

    for v in &visitors {
        erased.events += count(conn.execute(
            "DELETE FROM events WHERE session_id IN
                 (SELECT id FROM sessions WHERE site_id = ?1 AND visitor_id = ?2)",
            args![site_id, v],
        )?);
        erased.sessions += count(conn.execute(
            "DELETE FROM sessions WHERE site_id = ?1 AND visitor_id = ?2",
            args![site_id, v],
        )?);
        erased.links += count(conn.execute(
            "DELETE FROM visitor_clients WHERE site_id = ?1 AND visitor_id = ?2",
            args![site_id, v],
        )?);
        erased.visitors += count(conn.execute(
            "DELETE FROM visitors WHERE site_id = ?1 AND id = ?2",
            args![site_id, v],
        )?);
    }
    Ok(erased)
}

/// The visitors that make up `person`, without the empty id of erased conversions.
fn visitors_of(conn: &impl AsConn, site_id: &str, person: Person<'_>) -> Result<Vec<String>> {
    let conn = conn.conn();
    let mut out: Vec<String> = Vec::new();
    match person {
        Person::Visitor(v) => {
            let known = conn
                .query_opt(
                    "SELECT 1 FROM visitors WHERE site_id = ?1 AND id = ?2",
                    args![site_id, v],
                    |_| Ok(()),
                )?
                .is_some();
            if known {
                out.push(v.to_owned());
            }
        }
        Person::Client(c) => {
            // Linked now, or seen identifying in a session (a link dropped by the cap on visitors
            // per clientId still left its sessions marked).
            out.extend(conn.query_all(
                "SELECT visitor_id FROM visitor_clients WHERE site_id = ?1 AND client_id = ?2
                 UNION
                 SELECT visitor_id FROM sessions WHERE site_id = ?1 AND client_id = ?2",
                args![site_id, c],
                |r| r.get(0),
            )?);
        }
    }
    out.retain(|v| !v.is_empty());
    Ok(out)
}
