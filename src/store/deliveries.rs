//! The `deliveries` table: one row per processed conversion and destination that receives it
//! (docs/decisions.md §13), written by the pipeline in the transaction that processes the
//! conversion and drained by the sender (`forward/`).
//!
//! States: `pending` (due at `next_attempt_at`), `delivered`, `failed` (a dead letter: the platform
//! refused it for good, or it failed too often; `convapi destination retry` makes it pending again),
//! `too_old` (past the platform's age limit, never sent) and `skipped` (the destination's consent
//! rule does not hold, or the platform needs something the conversion has not, such as a click id).
//! Every outcome is written only over a `pending` row, so two senders never both decide one.
//! Written once for both engines (`engine/mod.rs`).

use super::dialect::Statement;
use super::engine::{args, AsConn, Engine, Row};
use super::sessions::Forwarding;
use super::Result;

/// The status of a delivery; [`Status::as_str`] is how it is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Pending,
    Delivered,
    Failed,
    TooOld,
    Skipped,
}

impl Status {
    /// Every status, in the order of [`STATUSES`].
    pub const ALL: [Status; 5] = [
        Status::Pending,
        Status::Delivered,
        Status::Failed,
        Status::TooOld,
        Status::Skipped,
    ];

    /// Its stored spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Delivered => "delivered",
            Status::Failed => "failed",
            Status::TooOld => "too_old",
            Status::Skipped => "skipped",
        }
    }

    /// The status stored as `s`.
    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

/// The statuses of a delivery, as stored.
pub const STATUSES: &[&str] = &[
    Status::ALL[0].as_str(),
    Status::ALL[1].as_str(),
    Status::ALL[2].as_str(),
    Status::ALL[3].as_str(),
    Status::ALL[4].as_str(),
];

/// Whether any site has an enabled destination: the pipeline asks once per chunk, and with none
/// it writes no delivery (and runs no statement for them) per conversion.
pub fn any_enabled_destination(conn: &impl AsConn) -> Result<bool> {
    Ok(conn
        .conn()
        .query_opt(
            "SELECT 1 FROM destinations WHERE enabled = 1 LIMIT 1",
            args![],
            |_| Ok(()),
        )?
        .is_some())
}

/// Writes one pending delivery of a processed conversion for each enabled destination of its site
/// that receives its type, due at once. Runs in the pipeline's transaction: with no destination it
/// is one read of the conversion by its key and one indexed read of an empty range.
pub fn enqueue(conn: &impl AsConn, conversion_id: &str, now_ms: i64) -> Result<u64> {
    static SQL: Statement = Statement::new();
    let sql = SQL.get(conn, |d| {
        let json_has_key = d.json_has_key("d.events", "c.type");
        format!(
            "INSERT INTO deliveries (destination_id, conversion_id, next_attempt_at, created_at)
             SELECT d.id, c.id, ?2, ?2 FROM conversions c JOIN destinations d ON d.site_id = c.site_id
             WHERE c.id = ?1 AND d.enabled = 1 AND {json_has_key}
             ON CONFLICT DO NOTHING"
        )
    });
    conn.conn().execute(sql, args![conversion_id, now_ms])
}

/// Writes a pending delivery to `destination_id` for each processed conversion of its site that
/// occurred in `[from_ms, to_ms)`, whose type it receives and that it has no delivery of yet
/// (`convapi destination replay`). Returns how many.
pub fn replay(
    conn: &impl AsConn,
    destination_id: &str,
    from_ms: i64,
    to_ms: i64,
    now_ms: i64,
) -> Result<u64> {
    static SQL: Statement = Statement::new();
    let sql = SQL.get(conn, |d| {
        let json_has_key = d.json_has_key("d.events", "c.type");
        format!(
            "INSERT INTO deliveries (destination_id, conversion_id, next_attempt_at, created_at)
             SELECT d.id, c.id, ?4, ?4 FROM destinations d
             JOIN conversions c ON c.site_id = d.site_id
             WHERE d.id = ?1 AND c.status = 'processed' AND c.occurred_at >= ?2
               AND c.occurred_at < ?3 AND {json_has_key}
             ON CONFLICT DO NOTHING"
        )
    });
    conn.conn()
        .execute(sql, args![destination_id, from_ms, to_ms, now_ms])
}

/// When a pending row `x` of `adjustment_deliveries` (`adjustment_deliveries.rs`) may go, besides its `next_attempt_at`: the
/// order's delivery to the destination is not pending (or there is none), and no earlier
/// adjustment of the order to the destination is pending.
pub const ADJUSTMENT_DUE: &str = "NOT EXISTS (SELECT 1 FROM deliveries o
                   WHERE o.destination_id = x.destination_id AND o.conversion_id = x.conversion_id
                     AND o.status = 'pending')
      AND NOT EXISTS (SELECT 1 FROM adjustment_deliveries p
                   WHERE p.conversion_id = x.conversion_id AND p.destination_id = x.destination_id
                     AND p.adjustment_id < x.adjustment_id AND p.status = 'pending')";

/// An enabled destination with a delivery due, and the tenant whose site it sends for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueDestination {
    pub id: String,
    pub tenant_id: String,
}

/// The enabled destinations with a delivery due at `now` whose circuit is closed (a disabled
/// destination's deliveries wait until it is enabled again): the healthy ones first (their last
/// request taken), the one served longest ago first; then the new ones (nothing sent yet); then
/// those whose last request failed (a platform that times out waits behind those that answer).
pub fn due_destinations(conn: &impl AsConn, now_ms: i64) -> Result<Vec<DueDestination>> {
    static SQL: Statement = Statement::new();
    let sql = SQL.get(conn, |_| {
        // An adjustment of an order is due too.
        format!(
            "SELECT d.id, s.tenant_id FROM destinations d JOIN sites s ON s.id = d.site_id
             WHERE d.enabled = 1 AND (d.paused_until IS NULL OR d.paused_until <= ?1)
               AND (EXISTS (SELECT 1 FROM deliveries x WHERE x.destination_id = d.id
                            AND x.status = 'pending' AND x.next_attempt_at <= ?1)
                    OR EXISTS (SELECT 1 FROM adjustment_deliveries x
                               WHERE x.destination_id = d.id AND x.status = 'pending'
                                 AND x.next_attempt_at <= ?1 AND {ADJUSTMENT_DUE}))
             ORDER BY d.failures > 0, d.last_ok_at IS NULL, COALESCE(d.last_ok_at, 0), d.id"
        )
    });
    conn.conn().query_all(sql, args![now_ms], |r| {
        Ok(DueDestination {
            id: r.get(0)?,
            tenant_id: r.get(1)?,
        })
    })
}

/// The earliest time a pending delivery (or adjustment delivery) is due, at or after the circuit
/// of its destination closes (`None`: nothing is pending).
pub fn next_due(conn: &impl AsConn) -> Result<Option<i64>> {
    static SQL: Statement = Statement::new();
    let sql = SQL.get(conn, |_| {
        format!(
            "SELECT MIN(CASE WHEN d.paused_until > x.next_attempt_at THEN d.paused_until
                             ELSE x.next_attempt_at END)
             FROM (SELECT destination_id, next_attempt_at FROM deliveries WHERE status = 'pending'
                   UNION ALL
                   SELECT x.destination_id, x.next_attempt_at FROM adjustment_deliveries x
                   WHERE x.status = 'pending' AND {ADJUSTMENT_DUE}) x
             JOIN destinations d ON d.id = x.destination_id
             WHERE d.enabled = 1"
        )
    });
    Ok(conn
        .conn()
        .query_opt(sql, args![], |r| r.get::<Option<i64>>(0))?
        .flatten())
}

/// Takes a destination for this connection's sender until [`release`]: on PostgreSQL, where
/// several nodes send, a session-level advisory lock in a key space of its own (two keys: a
/// constant and the hash of the id), so one destination has one sender at a time; `false` when
/// another node holds it. SQLite's one server keeps its own table of destinations in hand.
pub fn claim(conn: &impl AsConn, destination_id: &str) -> Result<bool> {
    let conn = conn.conn();
    if conn.engine() == Engine::Postgres {
        return Ok(conn
            .query_opt(
                "SELECT pg_try_advisory_lock(1668246134, hashtext(?1))",
                args![destination_id],
                |r| r.get::<bool>(0),
            )?
            .unwrap_or(false));
    }
    Ok(true)
}

/// Ends a [`claim`].
pub fn release(conn: &impl AsConn, destination_id: &str) -> Result<()> {
    let conn = conn.conn();
    if conn.engine() == Engine::Postgres {
        conn.query_opt(
            "SELECT pg_advisory_unlock(1668246134, hashtext(?1))",
            args![destination_id],
            |_| Ok(()),
        )?;
    }
    Ok(())
}

/// A pending delivery as the sender lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    pub id: i64,
    pub conversion_id: String,
    /// Failed tries so far.
    pub attempts: i64,
}

/// Up to `limit` deliveries of a destination due at `now`, oldest due first.
pub fn due(
    conn: &impl AsConn,
    destination_id: &str,
    now_ms: i64,
    limit: usize,
) -> Result<Vec<Due>> {
    conn.conn().query_all(
        "SELECT id, conversion_id, attempts FROM deliveries
         WHERE destination_id = ?1 AND status = 'pending' AND next_attempt_at <= ?2
         ORDER BY next_attempt_at, id LIMIT ?3",
        args![destination_id, now_ms, limit as i64],
        |r| {
            Ok(Due {
                id: r.get(0)?,
                conversion_id: r.get(1)?,
                attempts: r.get(2)?,
            })
        },
    )
}

/// What a session holds for forwarding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionFacts {
    pub id: String,
    pub started_at: i64,
    pub landing_url: Option<String>,
    /// The consent and what it let the session keep, as the pixel wrote them.
    pub forwarding: Forwarding,
    pub gclid: Option<String>,
    pub gbraid: Option<String>,
    pub wbraid: Option<String>,
    pub fbclid: Option<String>,
}

/// Everything a destination's mapping reads of one conversion.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    pub conversion_id: String,
    pub site_id: String,
    pub order_id: Option<String>,
    pub conversion_type: String,
    pub value: Option<String>,
    pub currency: String,
    pub occurred_at: i64,
    /// The conversion's `clientId`, else the one its session was identified with.
    pub client_id: Option<String>,
    /// Empty for an order kept with no session and no visitorId.
    pub visitor_id: String,
    /// JSON of SHA-256 digests (`em`, `ph`, `em_g`, `ph_g`), see the migration `0008`.
    pub user_hashes: Option<String>,
    pub consent_ad_user_data: Option<bool>,
    pub consent_ad_personalization: Option<bool>,
    /// Whether the site asks for consent before anything is kept (then no answer means no).
    pub consent_required: bool,
    /// The session the conversion was recorded in.
    pub session: Option<SessionFacts>,
    /// The session attribution credited, when it is another one.
    pub attributed: Option<SessionFacts>,
}

const SESSION_COLUMNS: &str = "s.id, s.started_at, \
    (SELECT e.url FROM events e WHERE e.id = s.landing_event_id), s.consent_analytics, s.consent_ads, \
    s.client_ip, s.user_agent, s.fbp, s.fbc, s.ga_client_id, s.ga_session_id, s.gclid, s.gbraid, \
    s.wbraid, s.fbclid";

fn opt_bool(r: &Row, i: usize) -> Result<Option<bool>> {
    Ok(r.get::<Option<i64>>(i)?.map(|v| v != 0))
}

fn session_facts(r: &Row) -> Result<SessionFacts> {
    Ok(SessionFacts {
        id: r.get(0)?,
        started_at: r.get(1)?,
        landing_url: r.get(2)?,
        forwarding: Forwarding {
            consent_analytics: opt_bool(r, 3)?,
            consent_ads: opt_bool(r, 4)?,
            client_ip: r.get(5)?,
            user_agent: r.get(6)?,
            fbp: r.get(7)?,
            fbc: r.get(8)?,
            ga_client_id: r.get(9)?,
            ga_session_id: r.get(10)?,
        },
        gclid: r.get(11)?,
        gbraid: r.get(12)?,
        wbraid: r.get(13)?,
        fbclid: r.get(14)?,
    })
}

fn session(conn: &impl AsConn, id: &str) -> Result<Option<SessionFacts>> {
    conn.conn().query_opt(
        &format!("SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.id = ?1"),
        args![id],
        session_facts,
    )
}

/// The facts of a conversion (`None` when it was deleted since).
pub fn facts(conn: &impl AsConn, conversion_id: &str) -> Result<Option<Facts>> {
    Ok(facts_with_mode(conn, conversion_id)?.map(|(f, _)| f))
}

/// [`facts`], and whether the conversion is a test order (sent only to test endpoints).
pub fn facts_with_mode(conn: &impl AsConn, conversion_id: &str) -> Result<Option<(Facts, bool)>> {
    let row = conn.conn().query_opt(
        "SELECT c.id, c.site_id, c.order_id, c.type, c.value, c.currency, c.occurred_at,
             COALESCE(c.client_id, (SELECT s.client_id FROM sessions s WHERE s.id = c.session_id)),
             COALESCE(c.visitor_id, ''), c.user_hashes, c.consent_ad_user_data,
             c.consent_ad_personalization, s.consent_required, c.session_id, c.attr_session_id,
             c.test <> 0
         FROM conversions c JOIN sites s ON s.id = c.site_id WHERE c.id = ?1",
        args![conversion_id],
        |r| {
            Ok((
                Facts {
                    conversion_id: r.get(0)?,
                    site_id: r.get(1)?,
                    order_id: r.get(2)?,
                    conversion_type: r.get(3)?,
                    value: r.get(4)?,
                    currency: r.get(5)?,
                    occurred_at: r.get(6)?,
                    client_id: r.get(7)?,
                    visitor_id: r.get(8)?,
                    user_hashes: r.get(9)?,
                    consent_ad_user_data: opt_bool(r, 10)?,
                    consent_ad_personalization: opt_bool(r, 11)?,
                    consent_required: r.get(12)?,
                    session: None,
                    attributed: None,
                },
                r.get::<Option<String>>(13)?,
                r.get::<Option<String>>(14)?,
                r.get::<bool>(15)?,
            ))
        },
    )?;
    let Some((mut f, session_id, attributed_id, test)) = row else {
        return Ok(None);
    };
    // An order kept with no session (unattributed) has none to forward with.
    if let Some(s) = &session_id {
        f.session = session(conn, s)?;
    }
    if let Some(a) = attributed_id.filter(|a| Some(a) != session_id.as_ref()) {
        f.attributed = session(conn, &a)?;
    }
    Ok(Some((f, test)))
}

/// Marks a pending delivery of a test order sent to the platform's test endpoint as delivered,
/// with the platform's verdict on it as its detail (`last_error`, which the status lookup and the
/// order page show); `false` when it was not pending any more.
pub fn tested(
    conn: &impl AsConn,
    id: i64,
    attempts: i64,
    now_ms: i64,
    verdict: &str,
) -> Result<bool> {
    Ok(conn.conn().execute(
        "UPDATE deliveries SET status = 'delivered', attempts = ?2, delivered_at = ?3,
             next_attempt_at = NULL, last_error = ?4
         WHERE id = ?1 AND status = 'pending'",
        args![id, attempts, now_ms, verdict],
    )? == 1)
}

/// Marks a pending delivery delivered; `false` when it was not pending any more.
pub fn delivered(conn: &impl AsConn, id: i64, attempts: i64, now_ms: i64) -> Result<bool> {
    Ok(conn.conn().execute(
        "UPDATE deliveries SET status = 'delivered', attempts = ?2, delivered_at = ?3,
             next_attempt_at = NULL, last_error = NULL
         WHERE id = ?1 AND status = 'pending'",
        args![id, attempts, now_ms],
    )? == 1)
}

/// Reschedules a pending delivery after a failed try.
pub fn retry(
    conn: &impl AsConn,
    id: i64,
    attempts: i64,
    next_at: i64,
    error: &str,
) -> Result<bool> {
    Ok(conn.conn().execute(
        "UPDATE deliveries SET attempts = ?2, next_attempt_at = ?3, last_error = ?4
         WHERE id = ?1 AND status = 'pending'",
        args![id, attempts, next_at, error],
    )? == 1)
}

/// Moves a pending delivery to a final status (`failed`, `too_old`, `skipped`) with its reason.
pub fn finish(
    conn: &impl AsConn,
    id: i64,
    status: Status,
    attempts: i64,
    reason: &str,
) -> Result<bool> {
    debug_assert!(matches!(
        status,
        Status::Failed | Status::TooOld | Status::Skipped
    ));
    Ok(conn.conn().execute(
        "UPDATE deliveries SET status = ?2, attempts = ?3, last_error = ?4, next_attempt_at = NULL
         WHERE id = ?1 AND status = 'pending'",
        args![id, status.as_str(), attempts, reason],
    )? == 1)
}

/// Makes a destination's dead letters (or one conversion's, with `conversion_id`) pending again,
/// due at `now`, with their tries counted from zero. Returns how many. The adjustments of those
/// orders that were skipped because the order had not reached the destination are pending again
/// with them: they go once the order has.
pub fn retry_failed(
    conn: &impl AsConn,
    destination_id: &str,
    conversion_id: Option<&str>,
    now_ms: i64,
) -> Result<u64> {
    let conn = conn.conn();
    conn.execute(
        "UPDATE adjustment_deliveries SET status = 'pending', attempts = 0, next_attempt_at = ?3,
             last_error = NULL
         WHERE destination_id = ?1 AND status = 'skipped' AND conversion_id IN (
             SELECT conversion_id FROM deliveries
             WHERE destination_id = ?1 AND status = 'failed'
               AND (CAST(?2 AS TEXT) IS NULL OR conversion_id = ?2))",
        args![destination_id, conversion_id, now_ms],
    )?;
    conn.execute(
        "UPDATE deliveries SET status = 'pending', attempts = 0, next_attempt_at = ?3
         WHERE destination_id = ?1 AND status = 'failed' AND (CAST(?2 AS TEXT) IS NULL OR conversion_id = ?2)",
        args![destination_id, conversion_id, now_ms],
    )
}

/// One delivery as the order status and the order page show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub destination_id: String,
    pub destination: String,
    pub kind: String,
    pub status: String,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub next_attempt_at: Option<i64>,
    pub delivered_at: Option<i64>,
}

/// A conversion's deliveries, in the order its destinations were made.
pub fn of_conversion(conn: &impl AsConn, conversion_id: &str) -> Result<Vec<View>> {
    conn.conn().query_all(
        "SELECT d.id, d.name, d.kind, x.status, x.attempts, x.last_error, x.next_attempt_at,
             x.delivered_at
         FROM deliveries x JOIN destinations d ON d.id = x.destination_id
         WHERE x.conversion_id = ?1 ORDER BY d.created_at, d.id",
        args![conversion_id],
        |r| {
            Ok(View {
                destination_id: r.get(0)?,
                destination: r.get(1)?,
                kind: r.get(2)?,
                status: r.get(3)?,
                attempts: r.get(4)?,
                last_error: r.get(5)?,
                next_attempt_at: r.get(6)?,
                delivered_at: r.get(7)?,
            })
        },
    )
}

/// How many deliveries of a destination are in each status, in the order of [`STATUSES`].
pub fn counts(conn: &impl AsConn, destination_id: &str) -> Result<[i64; 5]> {
    let mut out = [0i64; 5];
    for (status, n) in conn.conn().query_all(
        "SELECT status, COUNT(*) FROM deliveries WHERE destination_id = ?1 GROUP BY status",
        args![destination_id],
        |r| Ok((r.get::<String>(0)?, r.get::<i64>(1)?)),
    )? {
        if let Some(i) = STATUSES.iter().position(|s| *s == status) {
            out[i] = n;
        }
    }
    Ok(out)
}
