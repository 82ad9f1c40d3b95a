//! Visitors, their `clientId` links, sessions and pixel events: what the pixel writes and what
//! session resolution reads.
//!
//! A pageview's URL is stored once, in its event row; a session refers to its landing pageview
//! (`landing_event_id`) and reads the landing URL from there. A `clientId` keeps at most
//! [`MAX_VISITORS_PER_CLIENT`] visitors, so that resolving a person costs the same however often
//! its id was claimed. Written once for both engines (`engine/mod.rs`).

use super::engine::{args, AsConn, Row};
use super::Result;

/// Most visitors one `clientId` is linked to (docs/decisions.md §4); linking one more drops the
/// link identified least recently. The migration that added the cap trims with the same number.
pub const MAX_VISITORS_PER_CLIENT: usize = 50;

/// The traffic-source fields a session carries from its first event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Campaign {
    pub utm_source: Option<String>,
    pub utm_medium: Option<String>,
    pub utm_campaign: Option<String>,
    pub utm_term: Option<String>,
    pub utm_content: Option<String>,
    pub gclid: Option<String>,
    pub gbraid: Option<String>,
    pub wbraid: Option<String>,
    pub fbclid: Option<String>,
    pub msclkid: Option<String>,
    pub ttclid: Option<String>,
}

impl Campaign {
    /// True when any UTM parameter or click id is present.
    pub fn is_some(&self) -> bool {
        *self != Campaign::default()
    }
}

#[derive(Debug, Clone)]
pub struct Session {
    pub id: String,
    pub visitor_id: String,
    pub client_id: Option<String>,
    pub started_at: i64,
    pub last_activity_at: i64,
    /// The URL of the session's landing pageview: read through `landing_event_id`, never written
    /// from here (see [`insert_with_landing`]).
    pub landing_url: Option<String>,
    pub referrer: Option<String>,
    pub campaign: Campaign,
}

pub(super) const COLUMNS: &str = "id, visitor_id, client_id, started_at, last_activity_at, \
    (SELECT e.url FROM events e WHERE e.id = sessions.landing_event_id), referrer, \
    utm_source, utm_medium, utm_campaign, utm_term, utm_content, gclid, gbraid, wbraid, fbclid, msclkid, ttclid";

pub(super) fn from_row(r: &Row) -> Result<Session> {
    Ok(Session {
        id: r.get(0)?,
        visitor_id: r.get(1)?,
        client_id: r.get(2)?,
        started_at: r.get(3)?,
        last_activity_at: r.get(4)?,
        landing_url: r.get(5)?,
        referrer: r.get(6)?,
        campaign: Campaign {
            utm_source: r.get(7)?,
            utm_medium: r.get(8)?,
            utm_campaign: r.get(9)?,
            utm_term: r.get(10)?,
            utm_content: r.get(11)?,
            gclid: r.get(12)?,
            gbraid: r.get(13)?,
            wbraid: r.get(14)?,
            fbclid: r.get(15)?,
            msclkid: r.get(16)?,
            ttclid: r.get(17)?,
        },
    })
}

/// Records the visitor if it is new.
pub fn ensure_visitor(
    conn: &impl AsConn,
    site_id: &str,
    visitor_id: &str,
    now_ms: i64,
) -> Result<()> {
    conn.conn().execute(
        "INSERT INTO visitors (site_id, id, created_at) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
        args![site_id, visitor_id, now_ms],
    )?;
    Ok(())
}

/// Holds the visitor's row until the caller's transaction ends, on PostgreSQL, where several
/// nodes may apply batches of one visitor at once: the second waits for the first to commit, then
/// sees its session and links, so the two batches make one session and one link. SQLite's one
/// writer needs no lock. The visitor must exist ([`ensure_visitor`]).
pub fn lock_visitor(conn: &impl AsConn, site_id: &str, visitor_id: &str) -> Result<()> {
    let conn = conn.conn();
    if conn.engine() == super::engine::Engine::Postgres {
        conn.query_opt(
            "SELECT 1 FROM visitors WHERE site_id = ?1 AND id = ?2 FOR UPDATE",
            args![site_id, visitor_id],
            |_| Ok(()),
        )?;
    }
    Ok(())
}

/// Links a visitor to a merchant user id as its most recently identified visitor, and drops the
/// links beyond [`MAX_VISITORS_PER_CLIENT`], least recently identified first. A link's
/// `created_at` stays the time of its first `identify`.
pub fn link_client(
    conn: &impl AsConn,
    site_id: &str,
    client_id: &str,
    visitor_id: &str,
    now_ms: i64,
) -> Result<()> {
    let conn = conn.conn();
    // The common case, a person's browser identifying on every page, writes nothing.
    let newest: Option<String> = conn.query_opt(
        "SELECT visitor_id FROM visitor_clients WHERE site_id = ?1 AND client_id = ?2
         ORDER BY id DESC LIMIT 1",
        args![site_id, client_id],
        |r| r.get(0),
    )?;
    if newest.as_deref() == Some(visitor_id) {
        return Ok(());
    }
    // A new row takes an id above every other row's: it becomes the newest link.
    let first_linked: Option<i64> = conn.query_opt(
        "DELETE FROM visitor_clients WHERE site_id = ?1 AND client_id = ?2 AND visitor_id = ?3
         RETURNING created_at",
        args![site_id, client_id, visitor_id],
        |r| r.get(0),
    )?;
    conn.execute(
        "INSERT INTO visitor_clients (site_id, client_id, visitor_id, created_at) VALUES (?1, ?2, ?3, ?4)",
        args![site_id, client_id, visitor_id, first_linked.unwrap_or(now_ms)],
    )?;
    conn.execute(
        "DELETE FROM visitor_clients WHERE site_id = ?1 AND client_id = ?2 AND id <= (
             SELECT id FROM visitor_clients WHERE site_id = ?1 AND client_id = ?2
             ORDER BY id DESC LIMIT 1 OFFSET ?3)",
        args![site_id, client_id, MAX_VISITORS_PER_CLIENT as i64],
    )?;
    Ok(())
}

/// The visitor's session with the latest activity, if any.
pub fn latest_for_visitor(
    conn: &impl AsConn,
    site_id: &str,
    visitor_id: &str,
) -> Result<Option<Session>> {
    conn.conn().query_opt(
        &format!(
            "SELECT {COLUMNS} FROM sessions WHERE site_id = ?1 AND visitor_id = ?2
             ORDER BY started_at DESC, last_activity_at DESC LIMIT 1"
        ),
        args![site_id, visitor_id],
        from_row,
    )
}

pub fn by_id(conn: &impl AsConn, site_id: &str, id: &str) -> Result<Option<Session>> {
    conn.conn().query_opt(
        &format!("SELECT {COLUMNS} FROM sessions WHERE site_id = ?1 AND id = ?2"),
        args![site_id, id],
        from_row,
    )
}

/// Inserts a session without a landing pageview (its `landing_url` is not stored).
pub fn insert(conn: &impl AsConn, site_id: &str, s: &Session) -> Result<()> {
    insert_with_landing(conn, site_id, s, None)
}

/// Inserts a session whose landing URL is the `url` of the pageview event `landing_event_id`,
/// which the caller inserts in the same transaction (after the session, which the event refers
/// to). `s.landing_url` is not stored: the URL lives in the event row only.
pub fn insert_with_landing(
    conn: &impl AsConn,
    site_id: &str,
    s: &Session,
    landing_event_id: Option<&str>,
) -> Result<()> {
    insert_forwarding(conn, site_id, s, landing_event_id, &Forwarding::default())
}

/// [`insert_with_landing`], with the consent the batch stated and what it allows the session to
/// keep for passing conversions on.
pub fn insert_forwarding(
    conn: &impl AsConn,
    site_id: &str,
    s: &Session,
    landing_event_id: Option<&str>,
    f: &Forwarding,
) -> Result<()> {
    let c = &s.campaign;
    conn.conn().execute(
        "INSERT INTO sessions (id, site_id, visitor_id, client_id, started_at, last_activity_at,
            landing_event_id, referrer, utm_source, utm_medium, utm_campaign, utm_term, utm_content,
            gclid, gbraid, wbraid, fbclid, msclkid, ttclid, consent_analytics, consent_ads,
            client_ip, user_agent, fbp, fbc, ga_client_id, ga_session_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19,
            ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27)",
        args![
            &s.id, site_id, &s.visitor_id, &s.client_id, s.started_at, s.last_activity_at,
            landing_event_id, &s.referrer, &c.utm_source, &c.utm_medium, &c.utm_campaign,
            &c.utm_term, &c.utm_content, &c.gclid, &c.gbraid, &c.wbraid, &c.fbclid, &c.msclkid,
            &c.ttclid, f.consent_analytics.map(i64::from), f.consent_ads.map(i64::from),
            &f.client_ip, &f.user_agent, &f.fbp, &f.fbc, &f.ga_client_id, &f.ga_session_id
        ],
    )?;
    Ok(())
}

/// What a session keeps for passing its conversions on (docs/decisions.md §13), only as the
/// visitor's consent allows: the caller leaves out what it does not allow.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Forwarding {
    /// The consent the pixel stated (`None`: not asked).
    pub consent_analytics: Option<bool>,
    pub consent_ads: Option<bool>,
    /// With ads consent.
    pub client_ip: Option<String>,
    pub user_agent: Option<String>,
    pub fbp: Option<String>,
    pub fbc: Option<String>,
    /// With analytics consent.
    pub ga_client_id: Option<String>,
    pub ga_session_id: Option<String>,
}

/// A later batch's consent and forwarding fields, applied to a session it joined. A stated
/// consent replaces the stored one. An explicit ads denial clears what ads consent kept (address,
/// user agent, Meta's cookies; the click ids: [`set_campaign`]), an explicit analytics denial the
/// Google Analytics ids.
/// Otherwise the address and user agent of the session's first batch stay, and newer cookies
/// replace older ones.
pub fn update_forwarding(conn: &impl AsConn, id: &str, f: &Forwarding) -> Result<()> {
    conn.conn().execute(
        "UPDATE sessions SET
            consent_analytics = COALESCE(?2, consent_analytics),
            consent_ads = COALESCE(?3, consent_ads),
            client_ip = CASE WHEN ?3 = 0 THEN NULL ELSE COALESCE(client_ip, ?4) END,
            user_agent = CASE WHEN ?3 = 0 THEN NULL ELSE COALESCE(user_agent, ?5) END,
            fbp = CASE WHEN ?3 = 0 THEN NULL ELSE COALESCE(?6, fbp) END,
            fbc = CASE WHEN ?3 = 0 THEN NULL ELSE COALESCE(?7, fbc) END,
            ga_client_id = CASE WHEN ?2 = 0 THEN NULL ELSE COALESCE(?8, ga_client_id) END,
            ga_session_id = CASE WHEN ?2 = 0 THEN NULL ELSE COALESCE(?9, ga_session_id) END
         WHERE id = ?1",
        args![
            id,
            f.consent_analytics.map(i64::from),
            f.consent_ads.map(i64::from),
            &f.client_ip,
            &f.user_agent,
            &f.fbp,
            &f.fbc,
            &f.ga_client_id,
            &f.ga_session_id
        ],
    )?;
    Ok(())
}

/// Replaces a session's UTM fields and click ids (when ads consent is withdrawn: the click ids go,
/// their channel stays, see `tracking::without_click_ids`).
pub fn set_campaign(conn: &impl AsConn, id: &str, c: &Campaign) -> Result<()> {
    conn.conn().execute(
        "UPDATE sessions SET utm_source = ?2, utm_medium = ?3, utm_campaign = ?4, utm_term = ?5,
            utm_content = ?6, gclid = ?7, gbraid = ?8, wbraid = ?9, fbclid = ?10, msclkid = ?11,
            ttclid = ?12
         WHERE id = ?1",
        args![
            id,
            &c.utm_source,
            &c.utm_medium,
            &c.utm_campaign,
            &c.utm_term,
            &c.utm_content,
            &c.gclid,
            &c.gbraid,
            &c.wbraid,
            &c.fbclid,
            &c.msclkid,
            &c.ttclid
        ],
    )?;
    Ok(())
}

/// Rewrites the URL of a session's landing pageview (when ads consent is withdrawn: without its
/// click ids).
pub fn set_landing_url(conn: &impl AsConn, session_id: &str, url: &str) -> Result<()> {
    conn.conn().execute(
        "UPDATE events SET url = ?2
         WHERE id = (SELECT landing_event_id FROM sessions WHERE id = ?1)",
        args![session_id, url],
    )?;
    Ok(())
}

/// Replaces a session's referrer (when ads consent is withdrawn: its click ids go).
pub fn set_referrer(conn: &impl AsConn, id: &str, referrer: &str) -> Result<()> {
    conn.conn().execute(
        "UPDATE sessions SET referrer = ?2 WHERE id = ?1",
        args![id, referrer],
    )?;
    Ok(())
}

/// Extends a session's activity (never backwards) and marks it identified when `client_id` is given.
pub fn touch(
    conn: &impl AsConn,
    id: &str,
    activity_ms: i64,
    client_id: Option<&str>,
) -> Result<()> {
    // A CASE, not SQLite's two-argument MAX (PostgreSQL's is GREATEST): both engines read it.
    conn.conn().execute(
        "UPDATE sessions SET last_activity_at = CASE WHEN ?2 > last_activity_at THEN ?2
                ELSE last_activity_at END,
            client_id = COALESCE(?3, client_id)
         WHERE id = ?1",
        args![id, activity_ms, client_id],
    )?;
    Ok(())
}

pub struct NewEvent<'a> {
    pub id: &'a str,
    pub site_id: &'a str,
    pub session_id: &'a str,
    pub kind: &'a str,
    pub name: Option<&'a str>,
    pub url: Option<&'a str>,
    pub props: Option<&'a str>,
    pub ts: i64,
}

pub fn insert_event(conn: &impl AsConn, e: &NewEvent<'_>) -> Result<()> {
    conn.conn().execute(
        "INSERT INTO events (id, site_id, session_id, type, name, url, props, ts) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        args![e.id, e.site_id, e.session_id, e.kind, e.name, e.url, e.props, e.ts],
    )?;
    Ok(())
}

/// Who a conversion report names, in order of preference (clientId, visitorId, sessionId).
#[derive(Debug, Clone, Copy)]
pub enum Identifier<'a> {
    Client(&'a str),
    Visitor(&'a str),
    Session(&'a str),
}

/// The visitors that make up the person an identifier names on this site (empty: unknown).
pub fn person(conn: &impl AsConn, site_id: &str, ident: Identifier<'_>) -> Result<Vec<String>> {
    let (sql, key) = match ident {
        Identifier::Client(k) => (
            "SELECT visitor_id FROM visitor_clients WHERE site_id = ?1 AND client_id = ?2",
            k,
        ),
        Identifier::Visitor(k) => ("SELECT id FROM visitors WHERE site_id = ?1 AND id = ?2", k),
        Identifier::Session(k) => (
            "SELECT visitor_id FROM sessions WHERE site_id = ?1 AND id = ?2",
            k,
        ),
    };
    conn.conn()
        .query_all(sql, args![site_id, key], |r| r.get(0))
}

/// The session a report's identifiers name, tried in order (clientId, visitorId, sessionId): the
/// first identifier that names a known person decides, and [`resolve`] picks that person's
/// session; `None` when no identifier names anyone or the person has no session in the window.
pub fn resolve_first(
    conn: &impl AsConn,
    site_id: &str,
    idents: &[Identifier<'_>],
    at: i64,
    window_ms: i64,
) -> Result<Option<(String, String)>> {
    for ident in idents {
        let person = person(conn, site_id, *ident)?;
        if !person.is_empty() {
            return resolve(conn, site_id, &person, at, window_ms);
        }
    }
    Ok(None)
}

/// The person's most recent session that started no later than `at` and whose last activity lies
/// within `window_ms` before `at` (both edges inclusive): `(session id, its visitor id)`.
pub fn resolve(
    conn: &impl AsConn,
    site_id: &str,
    visitors: &[String],
    at: i64,
    window_ms: i64,
) -> Result<Option<(String, String)>> {
    let conn = conn.conn();
    let mut best: Option<(String, String, i64)> = None;
    for v in visitors {
        let found = conn.query_opt(
            "SELECT id, started_at FROM sessions
             WHERE site_id = ?1 AND visitor_id = ?2 AND started_at <= ?3 AND last_activity_at >= ?4
             ORDER BY started_at DESC, id DESC LIMIT 1",
            args![site_id, v, at, at - window_ms],
            |r| Ok((r.get::<String>(0)?, r.get::<i64>(1)?)),
        )?;
        if let Some((id, started)) = found {
            if best.as_ref().is_none_or(|(_, _, s)| started > *s) {
                best = Some((id, v.clone(), started));
            }
        }
    }
    Ok(best.map(|(id, v, _)| (id, v)))
}

/// The sessions of a set of visitors whose last activity lies in `[from, to]`, oldest first:
/// the candidates attribution chooses from.
pub fn in_window(
    conn: &impl AsConn,
    site_id: &str,
    visitors: &[String],
    from: i64,
    to: i64,
) -> Result<Vec<Session>> {
    let conn = conn.conn();
    let sql = format!(
        "SELECT {COLUMNS} FROM sessions
         WHERE site_id = ?1 AND visitor_id = ?2 AND started_at <= ?4 AND last_activity_at >= ?3"
    );
    let mut out = Vec::new();
    for v in visitors {
        out.extend(conn.query_all(&sql, args![site_id, v, from, to], from_row)?);
    }
    out.sort_by(|a, b| (a.started_at, &a.id).cmp(&(b.started_at, &b.id)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::{params, Connection};

    /// A database at schema version 1 (before the migrations), with the table rows the migration
    /// rewrites.
    fn version_1() -> Connection {
        let conn = super::super::version_1_fixture();
        conn.execute_batch(
            "INSERT INTO sessions (id, site_id, visitor_id, started_at, last_activity_at, landing_url, utm_source)
                 VALUES ('with-event', 's', 'v', 10, 20, 'https://a.example/?utm_source=x', 'x'),
                        ('without-event', 's', 'v', 30, 40, 'https://b.example/', NULL),
                        ('no-landing', 's', 'v', 50, 60, NULL, NULL);
             INSERT INTO events (id, site_id, session_id, type, url, ts)
                 VALUES ('e2', 's', 'with-event', 'pageview', 'https://a.example/?utm_source=x', 15),
                        ('e1', 's', 'with-event', 'pageview', 'https://a.example/?utm_source=x', 10),
                        ('e3', 's', 'without-event', 'pageview', 'https://b.example/other', 30);",
        )
        .unwrap();
        for i in 0..60 {
            conn.execute(
                "INSERT INTO visitors VALUES ('s', ?1, 0)",
                [format!("v{i:02}")],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO visitor_clients VALUES ('s', 'c', ?1, ?2)",
                params![format!("v{i:02}"), 1000 - i],
            )
            .unwrap();
        }
        conn
    }

    fn landing(conn: &Connection, id: &str) -> Option<String> {
        by_id(conn, "s", id).unwrap().unwrap().landing_url
    }

    #[test]
    fn the_migration_keeps_landing_urls_and_trims_links() {
        let mut conn = version_1();
        super::super::migrate(&mut conn).unwrap();
        assert_eq!(
            landing(&conn, "with-event").as_deref(),
            Some("https://a.example/?utm_source=x")
        );
        let landing_event: String = conn
            .query_row(
                "SELECT landing_event_id FROM sessions WHERE id = 'with-event'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(landing_event, "e1", "the earliest matching pageview");
        assert_eq!(
            landing(&conn, "without-event").as_deref(),
            Some("https://b.example/")
        );
        assert_eq!(landing(&conn, "no-landing"), None);
        let c = by_id(&conn, "s", "with-event").unwrap().unwrap().campaign;
        assert_eq!(c.utm_source.as_deref(), Some("x"));
        // Links were ordered by created_at, which here runs opposite to the visitor ids.
        let mut kept = person(&conn, "s", Identifier::Client("c")).unwrap();
        kept.sort();
        let expected: Vec<String> = (0..50).map(|i| format!("v{i:02}")).collect();
        assert_eq!(kept, expected);
    }

    #[test]
    fn the_migration_trims_to_the_cap() {
        let sql = include_str!("migrations/sqlite/0002_pixel_trust_and_storage.sql");
        assert!(sql.contains(&format!("WHERE n > {MAX_VISITORS_PER_CLIENT})")));
    }

    #[test]
    fn linking_again_makes_a_link_the_newest_and_keeps_its_first_time() {
        let mut conn = version_1();
        super::super::migrate(&mut conn).unwrap();
        // v49 is the oldest link left (created_at 951); linking it again saves it from the cap.
        link_client(&conn, "s", "c", "v49", 5000).unwrap();
        ensure_visitor(&conn, "s", "new", 0).unwrap();
        link_client(&conn, "s", "c", "new", 6000).unwrap();
        let kept = person(&conn, "s", Identifier::Client("c")).unwrap();
        assert_eq!(kept.len(), MAX_VISITORS_PER_CLIENT);
        assert!(kept.contains(&"v49".to_owned()) && kept.contains(&"new".to_owned()));
        assert!(!kept.contains(&"v48".to_owned()));
        let first: i64 = conn
            .query_row(
                "SELECT created_at FROM visitor_clients WHERE visitor_id = 'v49'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(first, 951);
        // The newest link identifying again writes nothing.
        link_client(&conn, "s", "c", "new", 7000).unwrap();
        assert_eq!(
            person(&conn, "s", Identifier::Client("c")).unwrap().len(),
            MAX_VISITORS_PER_CLIENT
        );
    }
}
