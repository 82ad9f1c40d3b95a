//! A site's webhook sources (docs/decisions/api.md, "Webhook sources"): where its orders are paid
//! (Stripe, Shopify, WooCommerce), each with the secret that signs what the provider posts to
//! `/hooks/{id}`. Add, list, remove; the secret is written once and never shown again.

use super::{canonical_id, op_error};
use crate::store::sources::{Received, Source};
use crate::store::{self, engine::AsConn, StoreError};

/// The providers a source can be.
pub const KINDS: [&str; 3] = ["stripe", "shopify", "woocommerce"];
/// A kind's name as people know it.
pub fn provider_name(kind: &str) -> &'static str {
    match kind {
        "shopify" => "Shopify",
        "woocommerce" => "WooCommerce",
        _ => "Stripe",
    }
}

/// Longest secret accepted, in bytes (providers' are well under).
pub const MAX_SECRET_BYTES: usize = 512;

#[derive(Debug)]
pub enum SourceError {
    /// No live site with this id.
    NoSite(String),
    /// No source with this id.
    NoSource(String),
    /// `(field, why)`: a refusal of the input that names the fix.
    Invalid(&'static str, String),
    Store(StoreError),
}
op_error!(SourceError);

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceError::NoSite(id) => write!(f, "no site with id {id} (see convapi site list)"),
            SourceError::NoSource(id) => {
                write!(
                    f,
                    "no source with id {id} (see convapi source list --site SITE_ID)"
                )
            }
            SourceError::Invalid(field, why) => write!(f, "{field}: {why}"),
            SourceError::Store(e) => write!(f, "{e}"),
        }
    }
}

/// The address a provider posts a source's events to: `{origin}/hooks/{id}`.
pub fn url(origin: &str, id: &str) -> String {
    format!("{}/hooks/{id}", origin.trim_end_matches('/'))
}

/// Adds a source of `kind` to site `site_id` with the provider's signing `secret`.
pub fn add(
    conn: &impl AsConn,
    site_id: &str,
    kind: &str,
    secret: &str,
    now_ms: i64,
) -> Result<Source, SourceError> {
    let kind = kind.trim().to_ascii_lowercase();
    if !KINDS.contains(&kind.as_str()) {
        return Err(SourceError::Invalid(
            "kind",
            format!("{kind:?} is not a source kind: use stripe, shopify or woocommerce"),
        ));
    }
    let secret = secret.trim();
    if secret.is_empty() || secret.len() > MAX_SECRET_BYTES {
        return Err(SourceError::Invalid(
            "secret",
            format!(
                "give the webhook's signing secret as the provider shows it (1 to \
                 {MAX_SECRET_BYTES} bytes; Stripe's starts with whsec_)"
            ),
        ));
    }
    if kind == "stripe" && !secret.starts_with("whsec_") {
        return Err(SourceError::Invalid(
            "secret",
            "a Stripe endpoint's signing secret starts with whsec_ (Developers → Webhooks → the \
             endpoint → Signing secret), not an API key (sk_…, rk_…)"
                .into(),
        ));
    }
    let site = store::sites::by_id(conn, &canonical_id(site_id))?
        .ok_or_else(|| SourceError::NoSite(site_id.to_owned()))?;
    let source = Source {
        id: uuid::Uuid::now_v7().to_string(),
        site_id: site.id,
        kind,
        created_at: now_ms,
        signature_failures: 0,
        last_failure_at: None,
    };
    store::sources::insert(conn, &source, secret)?;
    Ok(source)
}

/// Site `site_id`'s sources, oldest first.
pub fn list(conn: &impl AsConn, site_id: &str) -> Result<Vec<Source>, SourceError> {
    let site = store::sites::by_id(conn, &canonical_id(site_id))?
        .ok_or_else(|| SourceError::NoSite(site_id.to_owned()))?;
    Ok(store::sources::of_site(conn, &site.id)?)
}

/// Removes source `id` (of site `site_id` when given: another site's is not found) and the events
/// it received; later posts to its address answer 404.
pub fn remove(conn: &impl AsConn, id: &str, site_id: Option<&str>) -> Result<Source, SourceError> {
    let id = canonical_id(id);
    let source = store::sources::by_id(conn, &id)?
        .filter(|s| site_id.is_none_or(|site| s.site_id == site))
        .ok_or_else(|| SourceError::NoSource(id.clone()))?;
    store::sources::remove(conn, &id)?;
    Ok(source)
}

/// How many of a source's latest events its page shows.
pub const RECENT_EVENTS: i64 = 10;

/// Site `site_id`'s sources, each with its [`RECENT_EVENTS`] latest events, newest first.
pub fn with_events(
    conn: &impl AsConn,
    site_id: &str,
) -> Result<Vec<(Source, Vec<Received>)>, SourceError> {
    list(conn, site_id)?
        .into_iter()
        .map(|s| {
            let events = store::sources::recent_events(conn, &s.id, RECENT_EVENTS)?;
            Ok((s, events))
        })
        .collect()
}
