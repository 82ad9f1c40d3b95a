//! The `sources` table (where a site's orders are paid: its webhook secret, sealed at rest by
//! `sealed.rs` as destinations' credentials are) and `hook_events` (each provider event received,
//! once per source and provider event id, with what became of it). docs/decisions/api.md, "Webhook
//! sources".

use super::engine::{args, AsConn, Row};
use super::sealed::Keyring;
use super::Result;

/// The field a source's secret is sealed for (bound into the sealed value with the source's id).
const SECRET_FIELD: &str = "source secret";

/// A source as listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub id: String,
    pub site_id: String,
    /// `stripe`, `shopify` or `woocommerce`.
    pub kind: String,
    pub created_at: i64,
    /// Posts whose signature did not hold.
    pub signature_failures: i64,
    pub last_failure_at: Option<i64>,
}

const COLUMNS: &str = "id, site_id, kind, created_at, signature_failures, last_failure_at";

fn from_row(r: &Row<'_>) -> Result<Source> {
    Ok(Source {
        id: r.get(0)?,
        site_id: r.get(1)?,
        kind: r.get(2)?,
        created_at: r.get(3)?,
        signature_failures: r.get(4)?,
        last_failure_at: r.get(5)?,
    })
}

/// Adds a source, its secret sealed with the current key.
pub fn insert(conn: &impl AsConn, s: &Source, secret: &str) -> Result<()> {
    let mut keys = Keyring::of(conn.conn())?;
    let sealed = keys.sealing_key()?.seal(&s.id, SECRET_FIELD, secret)?;
    conn.conn().execute(
        "INSERT INTO sources (id, site_id, kind, secret, created_at, signature_failures)
         VALUES (?1, ?2, ?3, ?4, ?5, 0)",
        args![&s.id, &s.site_id, &s.kind, &sealed, s.created_at],
    )?;
    Ok(())
}

/// A site's sources, oldest first.
pub fn of_site(conn: &impl AsConn, site_id: &str) -> Result<Vec<Source>> {
    conn.conn().query_all(
        &format!("SELECT {COLUMNS} FROM sources WHERE site_id = ?1 ORDER BY created_at, id"),
        args![site_id],
        from_row,
    )
}

/// The source `id`, whatever its site.
pub fn by_id(conn: &impl AsConn, id: &str) -> Result<Option<Source>> {
    conn.conn().query_opt(
        &format!("SELECT {COLUMNS} FROM sources WHERE id = ?1"),
        args![id],
        from_row,
    )
}

/// Removes source `id` with its events; whether there was one.
pub fn remove(conn: &impl AsConn, id: &str) -> Result<bool> {
    let conn = conn.conn();
    conn.execute("DELETE FROM hook_events WHERE source_id = ?1", args![id])?;
    Ok(conn.execute("DELETE FROM sources WHERE id = ?1", args![id])? > 0)
}

/// The source `id` of a live site with its secret opened. The secret is `None` when its key is
/// here but it does not open (altered, or copied from another row): no signature can hold then.
pub fn for_hook(conn: &impl AsConn, id: &str) -> Result<Option<(Source, Option<String>)>> {
    let found = conn.conn().query_opt(
        "SELECT s.id, s.site_id, s.kind, s.created_at, s.signature_failures, s.last_failure_at,
                s.secret
         FROM sources s JOIN sites t ON t.id = s.site_id
         WHERE s.id = ?1 AND t.deleted_at IS NULL",
        args![id],
        |r| Ok((from_row(r)?, r.get::<String>(6)?)),
    )?;
    let Some((source, stored)) = found else {
        return Ok(None);
    };
    let secret = Keyring::of(conn.conn())?.open(&source.id, SECRET_FIELD, &stored)?;
    if secret.is_none() {
        log::warn!(
            "source {}'s secret does not open with its key (altered, or copied from another \
             source): every post to it fails its signature; add the source again",
            source.id
        );
    }
    Ok(Some((source, secret)))
}

/// Counts `n` posts to source `id` whose signature did not hold, the last at `last_ms`.
pub fn count_failures(conn: &impl AsConn, id: &str, n: i64, last_ms: i64) -> Result<()> {
    conn.conn().execute(
        "UPDATE sources SET signature_failures = signature_failures + ?2, last_failure_at = ?3
         WHERE id = ?1",
        args![id, n, last_ms],
    )?;
    Ok(())
}

/// One provider event as received, and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookEvent {
    pub source_id: String,
    pub event_id: String,
    /// The provider's event type, e.g. `checkout.session.completed`.
    pub kind: String,
    pub received_at: i64,
    pub outcome: String,
    pub order_id: Option<String>,
    /// The payment the order was paid by (Stripe's PaymentIntent), which its refunds name.
    pub payment_ref: Option<String>,
    pub client_id: Option<String>,
    /// The raw event, kept only while it is not applied.
    pub payload: Option<String>,
}

/// Whether source `source_id` received event `event_id` already and applied it (an event kept
/// with its payload, not applied, is taken again when it is delivered again).
pub fn settled(conn: &impl AsConn, source_id: &str, event_id: &str) -> Result<bool> {
    Ok(conn
        .conn()
        .query_opt(
            "SELECT 1 FROM hook_events
             WHERE source_id = ?1 AND event_id = ?2 AND payload IS NULL",
            args![source_id, event_id],
            |_| Ok(()),
        )?
        .is_some())
}

/// Records an event unless its source received and applied it already (a kept one is replaced);
/// whether it was recorded (false: a repeat delivery, nothing written).
pub fn record_event(conn: &impl AsConn, e: &HookEvent) -> Result<bool> {
    let n = conn.conn().execute(
        "INSERT INTO hook_events (source_id, event_id, type, received_at, outcome, order_id,
                                  payment_ref, client_id, payload)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
         ON CONFLICT (source_id, event_id) DO UPDATE SET
             received_at = excluded.received_at, outcome = excluded.outcome,
             order_id = excluded.order_id, payment_ref = excluded.payment_ref,
             client_id = excluded.client_id, payload = excluded.payload
         WHERE hook_events.payload IS NOT NULL",
        args![
            &e.source_id,
            &e.event_id,
            &e.kind,
            e.received_at,
            &e.outcome,
            e.order_id.as_deref(),
            e.payment_ref.as_deref(),
            e.client_id.as_deref(),
            e.payload.as_deref(),
        ],
    )?;
    Ok(n > 0)
}

/// The outcome an event was recorded with.
pub fn outcome(conn: &impl AsConn, source_id: &str, event_id: &str) -> Result<Option<String>> {
    conn.conn().query_opt(
        "SELECT outcome FROM hook_events WHERE source_id = ?1 AND event_id = ?2",
        args![source_id, event_id],
        |r| r.get(0),
    )
}

/// The order a payment (`payment_ref`) of source `source_id` paid, from the event that reported it.
pub fn order_of_payment(
    conn: &impl AsConn,
    source_id: &str,
    payment_ref: &str,
) -> Result<Option<String>> {
    conn.conn().query_opt(
        "SELECT order_id FROM hook_events
         WHERE source_id = ?1 AND payment_ref = ?2 AND order_id IS NOT NULL LIMIT 1",
        args![source_id, payment_ref],
        |r| r.get(0),
    )
}

/// One event as a source's page lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub received_at: i64,
    /// The provider's event type or topic.
    pub kind: String,
    pub outcome: String,
}

/// Source `source_id`'s `limit` latest events, newest first.
pub fn recent_events(conn: &impl AsConn, source_id: &str, limit: i64) -> Result<Vec<Received>> {
    conn.conn().query_all(
        "SELECT received_at, type, outcome FROM hook_events WHERE source_id = ?1
         ORDER BY received_at DESC, event_id LIMIT ?2",
        args![source_id, limit],
        |r| {
            Ok(Received {
                received_at: r.get(0)?,
                kind: r.get(1)?,
                outcome: r.get(2)?,
            })
        },
    )
}
