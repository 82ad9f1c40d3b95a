//! Passing processed conversions on to ad platforms (docs/decisions.md §13): Meta's Conversions
//! API, GA4's Measurement Protocol and Google Ads' click conversions.

pub mod adjust;
pub mod ga4;
pub mod google_ads;
pub mod hash;
pub mod kinds;
pub mod meta;
pub mod platform;
pub mod sender;
pub mod versions;

use platform::{Event, Http, Outage, Platform, REQUEST_TIMEOUT};

use crate::store;
use crate::store::deliveries::{Facts, SessionFacts};
use crate::store::destinations::{self, Destination};
use crate::store::engine::Conn;
use crate::store::sessions::Forwarding;

/// Most destinations one site may have (`convapi destination add` and the dashboard refuse one
/// more): with the sender's share per tenant, it bounds what one site's dead endpoints cost.
pub const MAX_DESTINATIONS_PER_SITE: usize = 10;

/// Every platform convapi sends to, one per kind of destination.
static PLATFORMS: &[&dyn Platform] = &[&meta::Meta, &ga4::Ga4, &google_ads::GoogleAds];

/// The platform of a kind of destination (`None`: not one convapi knows).
pub fn platform(kind: &str) -> Option<&'static dyn Platform> {
    PLATFORMS.iter().copied().find(|p| p.kind().name == kind)
}

/// A made-up purchase, as the "send a test event" button and `convapi destination test` send it:
/// an order id that says what it is, one unit of the site's currency, a session with a click of
/// each network and consent granted.
pub fn test_facts(dest: &Destination, currency: &str, now_ms: i64) -> Facts {
    let session = SessionFacts {
        id: "convapi-test-session".into(),
        started_at: now_ms - 60_000,
        landing_url: Some("https://example.com/?utm_source=convapi-test".into()),
        forwarding: Forwarding {
            consent_analytics: Some(true),
            consent_ads: Some(true),
            client_ip: Some("203.0.113.7".into()),
            user_agent: Some("Mozilla/5.0 (convapi test event)".into()),
            fbp: Some(format!("fb.1.{}.1234567890", now_ms - 60_000)),
            fbc: None,
            ga_client_id: Some("1234567890.1700000000".into()),
            ga_session_id: Some(((now_ms - 60_000) / 1000).to_string()),
        },
        gclid: Some("convapi-test-gclid".into()),
        gbraid: None,
        wbraid: None,
        fbclid: Some("convapi-test-fbclid".into()),
    };
    Facts {
        conversion_id: format!("convapi-test-{now_ms}"),
        site_id: dest.site_id.clone(),
        order_id: Some(format!("convapi-test-{now_ms}")),
        conversion_type: "purchase".into(),
        value: Some("1.00".into()),
        currency: currency.to_string(),
        occurred_at: now_ms - 1_000,
        client_id: Some("convapi-test-customer".into()),
        visitor_id: "convapi-test-visitor".into(),
        user_hashes: hash::user_hashes(Some("test@example.com"), None),
        consent_ad_user_data: Some(true),
        consent_ad_personalization: Some(true),
        consent_required: false,
        session: Some(session),
        attributed: None,
    }
}

/// Sends a test event to `dest` in its platform's test mode and returns the platform's answer:
/// the operator's (`convapi destination test`), to any address.
pub fn send_test(dest: &Destination, currency: &str, now_ms: i64) -> Result<String, Outage> {
    send_test_with(&Http::new(REQUEST_TIMEOUT), dest, currency, now_ms)
}

/// [`send_test`] with `http`: the dashboard's, which reaches only what `serve` allows.
pub fn send_test_with(
    http: &Http,
    dest: &Destination,
    currency: &str,
    now_ms: i64,
) -> Result<String, Outage> {
    let p = platform(&dest.kind)
        .ok_or_else(|| Outage::Rejected(format!("unknown destination kind '{}'", dest.kind)))?;
    let facts = test_facts(dest, currency, now_ms);
    let name = dest
        .events
        .get("purchase")
        .cloned()
        .unwrap_or_else(|| p.kind().default_event("purchase"));
    let event = Event {
        delivery_id: 0,
        facts: &facts,
        name: &name,
    };
    p.test(http, dest, &event, now_ms)
}

/// A destination's health after one request (or one pass that sent none), as the job that
/// records the request's outcomes writes it: the outage (a version gone pauses the destination
/// until its `paused_until`), else that the platform answered. One for conversions' and
/// adjustments' deliveries (`adjust.rs`).
struct Health {
    dest_id: String,
    /// What went wrong, as the site's people read it.
    error: Option<String>,
    /// The API version the platform said is gone.
    gone: Option<String>,
    paused_until: Option<i64>,
    answered: bool,
}

impl Health {
    fn after(
        dest: &Destination,
        outage: Option<Outage>,
        answered: bool,
        paused_until: Option<i64>,
    ) -> Health {
        let error = outage
            .as_ref()
            .map(|o| platform::shown(&o.to_string(), dest));
        let gone = match outage {
            Some(Outage::VersionGone { version, .. }) => Some(version),
            _ => None,
        };
        Health {
            dest_id: dest.id.clone(),
            error,
            gone,
            paused_until,
            answered,
        }
    }

    /// Writes it, inside the job that writes the request's outcomes.
    fn write(&self, c: &Conn, now_ms: i64) -> store::Result<()> {
        let id = &self.dest_id;
        if let (Some(e), Some(v), Some(until)) = (&self.error, &self.gone, self.paused_until) {
            destinations::record_version_gone(c, id, v, e, until, now_ms)?;
        } else if let Some(e) = &self.error {
            destinations::record_failure(c, id, e, self.paused_until, now_ms)?;
        } else if self.answered {
            destinations::record_ok(c, id, now_ms)?;
        }
        Ok(())
    }
}
