//! The `sites` table: what the backend addresses by UUID and the pixel by tracker id.
//!
//! A site's identity secret is read only by [`identify_check`] and written only by
//! [`set_identity_secret`]: [`Site`] never carries it, so no listing or log can show it. Written
//! once for both engines (`engine/mod.rs`).
//!
//! A site marked deleted ([`mark_deleted`], `deleted_at` set) is gone for every function here at
//! once; `store::retention` removes its rows, the row itself last.

use serde::Serialize;

use super::engine::{args, AsConn, Row};
use super::keys::AuthKey;
use super::Result;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Site {
    pub id: String,
    pub tenant_id: String,
    pub tracker_id: String,
    pub name: String,
    pub domain: Option<String>,
    pub currency: String,
    pub window_days: i64,
    pub model: String,
    /// Whether the pixel's `identify` must be signed with the site's identity secret.
    pub signed_identify: bool,
    /// Days pixel data (sessions, events, visitors without a newer session) is kept; 0: forever.
    pub retain_days: i64,
    /// Whether conversions older than `retain_days` are deleted too.
    pub expire_conversions: bool,
    /// Whether the pixel keeps nothing on the device, and nothing is forwarded, before the visitor
    /// consents (docs/decisions.md §13).
    pub consent_required: bool,
    /// Whether an API order whose identifiers resolve no session is kept as unattributed (202)
    /// instead of refused (422 `NO_SESSION`); docs/decisions.md §3.
    pub keep_unattributed: bool,
    /// Milliseconds since the Unix epoch; RFC 3339 in JSON (formatted only there: a conversion's
    /// checks read the site and never show this).
    #[serde(serialize_with = "super::serialize_iso")]
    pub created_at: i64,
}

impl Site {
    /// The attribution window in milliseconds.
    pub fn window_ms(&self) -> i64 {
        self.window_days * 86_400_000
    }
}

/// [`COLUMNS`] as a literal, for `concat!` (the statement that every request runs is then a
/// literal too, with no text formatted per call).
macro_rules! columns {
    () => {
        "id, tenant_id, tracker_id, name, domain, currency, window_days, model, created_at, \
        signed_identify, retain_days, expire_conversions, consent_required, keep_unattributed"
    };
}
const COLUMNS: &str = columns!();

fn from_row(r: &Row) -> Result<Site> {
    from_row_at(r, 0)
}

/// A site from [`COLUMNS`] starting at column `at` of `r`.
fn from_row_at(r: &Row, at: usize) -> Result<Site> {
    Ok(Site {
        id: r.get(at)?,
        tenant_id: r.get(at + 1)?,
        tracker_id: r.get(at + 2)?,
        name: r.get(at + 3)?,
        domain: r.get(at + 4)?,
        currency: r.get(at + 5)?,
        window_days: r.get(at + 6)?,
        model: r.get(at + 7)?,
        created_at: r.get(at + 8)?,
        signed_identify: r.get(at + 9)?,
        retain_days: r.get(at + 10)?,
        expire_conversions: r.get(at + 11)?,
        consent_required: r.get(at + 12)?,
        keep_unattributed: r.get(at + 13)?,
    })
}

/// [`COLUMNS`] of the site `s` in a join, as a literal.
macro_rules! joined_columns {
    () => {
        "s.id, s.tenant_id, s.tracker_id, s.name, s.domain, s.currency, s.window_days, s.model, \
        s.created_at, s.signed_identify, s.retain_days, s.expire_conversions, s.consent_required, \
        s.keep_unattributed"
    };
}

/// A request's key (by its hash) and the site `site_id` (`None` when there is no such site) in
/// one statement: what every keyed request reads first (`api::authorize`). `None`: no such key.
pub fn with_key(
    conn: &impl AsConn,
    key_hash: &[u8],
    site_id: &str,
) -> Result<Option<(AuthKey, Option<Site>)>> {
    conn.conn().query_opt(
        concat!(
            "SELECT k.id, k.tenant_id, k.revoked_at IS NOT NULL, k.last_used_at, k.test <> 0, ",
            joined_columns!(),
            " FROM api_keys k LEFT JOIN sites s ON s.id = ?2 AND s.deleted_at IS NULL
             WHERE k.hash = ?1"
        ),
        args![key_hash, site_id],
        |r| {
            let key = super::keys::auth_key(r)?;
            let site = match r.get::<Option<String>>(5)? {
                Some(_) => Some(from_row_at(r, 5)?),
                None => None,
            };
            Ok((key, site))
        },
    )
}

pub struct NewSite<'a> {
    pub id: &'a str,
    pub tenant_id: &'a str,
    pub tracker_id: &'a str,
    pub name: &'a str,
    pub domain: Option<&'a str>,
    pub currency: &'a str,
    pub window_days: i64,
    pub model: &'a str,
}

pub fn create(conn: &impl AsConn, s: &NewSite<'_>, now_ms: i64) -> Result<Site> {
    conn.conn().execute(
        "INSERT INTO sites (id, tenant_id, tracker_id, name, domain, currency, window_days, model, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        args![s.id, s.tenant_id, s.tracker_id, s.name, s.domain, s.currency, s.window_days, s.model, now_ms],
    )?;
    Ok(by_id(conn, s.id)?.expect("site just inserted"))
}

pub fn by_id(conn: &impl AsConn, id: &str) -> Result<Option<Site>> {
    conn.conn().query_opt(
        concat!(
            "SELECT ",
            columns!(),
            " FROM sites WHERE id = ?1 AND deleted_at IS NULL"
        ),
        args![id],
        from_row,
    )
}

pub fn by_tracker(conn: &impl AsConn, tracker_id: &str) -> Result<Option<Site>> {
    conn.conn().query_opt(
        &format!("SELECT {COLUMNS} FROM sites WHERE tracker_id = ?1 AND deleted_at IS NULL"),
        args![tracker_id],
        from_row,
    )
}

/// Every site, or a tenant's; oldest first.
pub fn list(conn: &impl AsConn, tenant_id: Option<&str>) -> Result<Vec<Site>> {
    // The CAST gives PostgreSQL the parameter's type where it is tested for NULL.
    conn.conn().query_all(
        &format!(
            "SELECT {COLUMNS} FROM sites
             WHERE (CAST(?1 AS TEXT) IS NULL OR tenant_id = ?1) AND deleted_at IS NULL
             ORDER BY created_at, id"
        ),
        args![tenant_id],
        from_row,
    )
}

/// The settings [`update`] changes; `None` keeps the stored value.
#[derive(Debug, Default)]
pub struct SiteChanges<'a> {
    pub name: Option<&'a str>,
    /// `Some(None)` clears the domain; `None` keeps it.
    pub domain: Option<Option<&'a str>>,
    pub currency: Option<&'a str>,
    pub window_days: Option<i64>,
    pub model: Option<&'a str>,
    pub signed_identify: Option<bool>,
    pub retain_days: Option<i64>,
    pub expire_conversions: Option<bool>,
    pub consent_required: Option<bool>,
    pub keep_unattributed: Option<bool>,
}

/// Changes a site's settings; `None` when there is no such site.
pub fn update(conn: &impl AsConn, id: &str, c: &SiteChanges<'_>) -> Result<Option<Site>> {
    let changed = conn.conn().execute(
        "UPDATE sites SET name = COALESCE(?2, name), domain = CASE WHEN ?10 THEN ?3 ELSE domain END,
             currency = COALESCE(?4, currency), window_days = COALESCE(?5, window_days),
             model = COALESCE(?6, model), signed_identify = COALESCE(?7, signed_identify),
             retain_days = COALESCE(?8, retain_days),
             expire_conversions = COALESCE(?9, expire_conversions),
             consent_required = COALESCE(?11, consent_required),
             keep_unattributed = COALESCE(?12, keep_unattributed)
         WHERE id = ?1 AND deleted_at IS NULL",
        args![
            id,
            c.name,
            c.domain.flatten(),
            c.currency,
            c.window_days,
            c.model,
            c.signed_identify,
            c.retain_days,
            c.expire_conversions,
            c.domain.is_some(),
            c.consent_required,
            c.keep_unattributed
        ],
    )?;
    if changed == 0 {
        return Ok(None);
    }
    by_id(conn, id)
}

/// A reporting currency other than `currency` that some of the site's conversions were already
/// converted to (the report sums reporting values, so they must all be in one currency).
pub fn other_reporting_currency(
    conn: &impl AsConn,
    site_id: &str,
    currency: &str,
) -> Result<Option<String>> {
    conn.conn().query_opt(
        "SELECT reporting_currency FROM conversions
         WHERE site_id = ?1 AND reporting_currency IS NOT NULL AND reporting_currency <> ?2
         LIMIT 1",
        args![site_id, currency],
        |r| r.get(0),
    )
}

/// How a site checks the pixel's `identify`.
pub struct IdentifyCheck {
    /// An `identify` must carry `HMAC-SHA256(secret, userId)`.
    pub signed: bool,
    /// The identity secret, as the merchant's backend holds it (the HMAC key is its bytes).
    pub secret: Option<String>,
}

/// `None` when there is no such site.
pub fn identify_check(conn: &impl AsConn, site_id: &str) -> Result<Option<IdentifyCheck>> {
    conn.conn().query_opt(
        "SELECT signed_identify, identity_secret FROM sites WHERE id = ?1 AND deleted_at IS NULL",
        args![site_id],
        |r| {
            Ok(IdentifyCheck {
                signed: r.get(0)?,
                secret: r.get(1)?,
            })
        },
    )
}

/// Stores a site's new identity secret in place of the old one; false when there is no such site.
/// Stored as given, unlike an API key: the server computes HMACs with it.
pub fn set_identity_secret(conn: &impl AsConn, site_id: &str, secret: &str) -> Result<bool> {
    Ok(conn.conn().execute(
        "UPDATE sites SET identity_secret = ?2 WHERE id = ?1 AND deleted_at IS NULL",
        args![site_id, secret],
    )? > 0)
}

/// Marks the site deleted at `now_ms` (gone for every lookup from then on) and disables its
/// destinations, so that nothing more of it is passed on; its rows stay for
/// `store::retention::purge_site`. A few rows, whatever the site's size. False when there is no
/// such site (or it was deleted already).
pub fn mark_deleted(conn: &impl AsConn, site_id: &str, now_ms: i64) -> Result<bool> {
    let conn = conn.conn();
    let marked = conn.execute(
        "UPDATE sites SET deleted_at = ?2 WHERE id = ?1 AND deleted_at IS NULL",
        args![site_id, now_ms],
    )?;
    if marked == 0 {
        return Ok(false);
    }
    conn.execute(
        "UPDATE destinations SET enabled = 0 WHERE site_id = ?1",
        args![site_id],
    )?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_joined_columns_are_the_columns() {
        let plain = |s: &str| {
            s.split(',')
                .map(|c| c.trim().to_owned())
                .collect::<Vec<_>>()
        };
        let joined: Vec<String> = plain(joined_columns!())
            .iter()
            .map(|c| c.strip_prefix("s.").expect("prefixed").to_owned())
            .collect();
        assert_eq!(joined, plain(super::COLUMNS));
    }
}
