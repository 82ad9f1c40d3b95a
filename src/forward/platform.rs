//! What the sender asks of each platform (`meta.rs`, `ga4.rs`, `google_ads.rs`), the HTTP client
//! they send with, and the consent in force for a conversion (docs/decisions.md §13).

use std::time::Duration;

use serde_json::Number;

use crate::store::deliveries::{Facts, SessionFacts};
use crate::store::destinations::Destination;

use super::kinds::Kind;

/// One conversion as a batch carries it.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    pub delivery_id: i64,
    pub facts: &'a Facts,
    /// The platform's event name (the destination's mapping of the conversion's type).
    pub name: &'a str,
}

/// What the platform said of one event of a batch it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Taken, or already there (a repeat the platform recognised by its dedup key).
    Delivered,
    /// Not taken this time; try again after `after_ms` when the platform named a wait, else after
    /// the sender's backoff.
    Retry {
        error: String,
        after_ms: Option<i64>,
    },
    /// Refused for good: a dead letter, with the platform's reason.
    Failed(String),
}

/// A request that failed as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outage {
    /// No answer, a timeout, a 5xx, or an error the platform calls transient: every event is tried
    /// again after the backoff, and the destination's circuit counts a failure.
    Transient(String),
    /// The platform asks to slow down (HTTP 429, Meta's rate-limit codes, Ads' RESOURCE_EXHAUSTED):
    /// nothing is sent to the destination before `retry_after_ms` (or the backoff).
    Throttled {
        error: String,
        retry_after_ms: Option<i64>,
    },
    /// The credentials or the account were refused (HTTP 401/403, Meta's code 190): no event can
    /// go until someone fixes the destination; its deliveries wait, its circuit stays open.
    Unauthorized(String),
    /// The request as a whole was refused as invalid, without saying which event: the sender
    /// sends the events of the batch one by one, so one bad event sinks only itself.
    Rejected(String),
    /// The platform no longer serves the API version the request went to (Meta's #2635, Google
    /// Ads' `UNSUPPORTED_VERSION`): the destination stops until it is moved to another version
    /// (`forward/versions.rs`); its deliveries wait, their tries not counted.
    VersionGone { version: String, error: String },
}

impl std::fmt::Display for Outage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outage::Transient(e) | Outage::Unauthorized(e) | Outage::Rejected(e) => f.write_str(e),
            Outage::Throttled { error, .. } | Outage::VersionGone { error, .. } => {
                f.write_str(error)
            }
        }
    }
}

/// A platform's mapping and its protocol.
pub trait Platform: Sync {
    fn kind(&self) -> &'static Kind;

    /// Whether an event (whose consent already holds) may be sent: `Some(("too_old", why))` past
    /// the platform's age limit, `Some(("skipped", why))` when it lacks what the platform needs
    /// (Google Ads: a click id). Nothing is sent for such an event, ever.
    fn check(
        &self,
        dest: &Destination,
        event: &Event<'_>,
        now_ms: i64,
    ) -> Option<(&'static str, String)>;

    /// Sends one batch of at most `kind().max_batch` events that passed [`Platform::check`]:
    /// one verdict per event, in order, or the outage of the whole request.
    fn send(
        &self,
        http: &Http,
        dest: &Destination,
        events: &[Event<'_>],
        now_ms: i64,
    ) -> Result<Vec<Verdict>, Outage>;

    /// Sends `event` in the platform's test mode (Meta's `test_event_code`, GA4's validation
    /// endpoint, Google Ads' `validate_only`): nothing is counted as a conversion. Returns the
    /// platform's answer as a person reads it.
    fn test(
        &self,
        http: &Http,
        dest: &Destination,
        event: &Event<'_>,
        now_ms: i64,
    ) -> Result<String, Outage>;
}

/// The platform's answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// At most [`MAX_ANSWER_BYTES`] of the body, as text.
    pub body: String,
    /// The `Retry-After` header in milliseconds, when it is a number of seconds.
    pub retry_after_ms: Option<i64>,
}

/// Most bytes of a platform's answer read; a longer one fails as a transport error.
pub const MAX_ANSWER_BYTES: u64 = 4 * 1024 * 1024;
/// The time limit of one request, connection included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// The senders' HTTP client: ureq (blocking, as the rest of convapi; already in the tree for the
/// ECB rates) over rustls, with a time limit per request, a bound on the answer it reads, and
/// connections kept alive per host.
#[derive(Clone)]
pub struct Http {
    agent: ureq::Agent,
}

impl Http {
    pub fn new(timeout: Duration) -> Http {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .max_idle_connections(16)
            .max_idle_connections_per_host(2)
            .user_agent(concat!("convapi/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Http { agent }
    }

    /// POSTs `body` as `content_type`; `Err` only when no answer came (connection, timeout, an
    /// answer over [`MAX_ANSWER_BYTES`]). Every HTTP status is an answer.
    pub fn post(
        &self,
        url: &str,
        headers: &[(&str, &str)],
        content_type: &str,
        body: &str,
    ) -> Result<Answer, NoAnswer> {
        let mut req = self.agent.post(url).header("Content-Type", content_type);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let mut resp = req
            .send(body)
            .map_err(|e| NoAnswer(format!("{}: {e}", redact_url(url))))?;
        let status = resp.status().as_u16();
        let retry_after_ms = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<i64>().ok())
            .map(|s| s.saturating_mul(1_000));
        let body = resp
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_string()
            .map_err(|e| NoAnswer(format!("{}: {e}", redact_url(url))))?;
        Ok(Answer {
            status,
            body,
            retry_after_ms,
        })
    }
}

/// Why a request got no answer (connection, timeout, an answer too long), without secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoAnswer(pub String);

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A URL without its query string (where GA4's API secret and Meta's token may travel), for logs
/// and errors.
pub fn redact_url(url: &str) -> &str {
    url.split('?').next().unwrap_or(url)
}

/// `text` with each of `secrets` of four characters or more — as written, and as a URL or a form
/// encodes it — replaced by `with(secret)`: what a platform answers may quote a request back.
pub fn hide_secrets<'a>(
    text: &str,
    secrets: impl IntoIterator<Item = &'a str>,
    with: impl Fn(&str) -> String,
) -> String {
    let mut out = text.to_owned();
    for s in secrets.into_iter().filter(|s| s.len() >= 4) {
        out = out.replace(s, &with(s));
        let encoded: String = form_urlencoded::byte_serialize(s.as_bytes()).collect();
        if encoded != s {
            out = out.replace(&encoded, &with(s));
        }
    }
    out
}

/// `text` with each of `dest`'s credentials replaced by its mask: what a platform or the sender
/// said may quote a request (a URL with GA4's `api_secret`, say), and a credential is never shown.
pub fn mask_secrets(text: &str, dest: &Destination) -> String {
    hide_secrets(text, secrets_of(dest), crate::store::destinations::mask)
}

/// A destination's credentials as text.
pub fn secrets_of(dest: &Destination) -> impl Iterator<Item = &str> {
    dest.secrets.values().filter_map(|v| v.as_str())
}

/// The key every platform deduplicates a conversion on (Meta's `event_id`, GA4's `transaction_id`,
/// Google Ads' `orderId`): the order id, or the conversion's id when the backend sent none.
pub fn dedup_key(f: &Facts) -> &str {
    f.order_id
        .as_deref()
        .filter(|o| !o.is_empty())
        .unwrap_or(&f.conversion_id)
}

/// A decimal's exact text as a JSON number (no trip through `f64`: serde_json keeps the digits).
pub fn decimal(text: &str) -> Option<Number> {
    let t = text.trim();
    let digits = t.strip_prefix('-').unwrap_or(t);
    let (int, frac) = digits.split_once('.').unwrap_or((digits, "0"));
    let ok = !int.is_empty()
        && !frac.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && frac.bytes().all(|b| b.is_ascii_digit());
    if !ok {
        return None;
    }
    t.parse::<Number>().ok()
}

/// The base URL: the destination's `endpoint` when it has one, without a trailing `/`.
pub fn base<'a>(dest: &'a Destination, default: &'a str) -> &'a str {
    dest.endpoint
        .as_deref()
        .filter(|e| !e.is_empty())
        .unwrap_or(default)
        .trim_end_matches('/')
}

/// "3 days", "5 hours": how old something is, for a reason a person reads.
pub fn age(ms: i64) -> String {
    let hours = ms / 3_600_000;
    if hours >= 48 {
        format!("{} days", hours / 24)
    } else {
        format!("{hours} hours")
    }
}

/// The consent in force for a conversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Consent {
    pub analytics: bool,
    /// Google's `ad_user_data` (and what Meta needs): the person's data may be sent for advertising.
    pub ad_user_data: bool,
    /// Google's `ad_personalization`.
    pub ad_personalization: bool,
}

/// The consent in force: the backend's `consent` of the conversion where it gave one, else the
/// consent the pixel recorded in the conversion's session; where neither answered, granted unless
/// the site requires consent (docs/decisions.md §13).
pub fn consent(f: &Facts) -> Consent {
    let s = f.session.as_ref();
    let default = !f.consent_required;
    let analytics = s
        .and_then(|s| s.forwarding.consent_analytics)
        .unwrap_or(default);
    let ads = s.and_then(|s| s.forwarding.consent_ads).unwrap_or(default);
    Consent {
        analytics,
        ad_user_data: f.consent_ad_user_data.unwrap_or(ads),
        ad_personalization: f.consent_ad_personalization.unwrap_or(ads),
    }
}

/// Whether a destination's consent rule (`ads`, `analytics`, `none`) holds for a conversion.
pub fn consent_holds(rule: &str, c: Consent) -> bool {
    match rule {
        "ads" => c.ad_user_data,
        "analytics" => c.analytics,
        _ => true,
    }
}

/// The session whose click brought the conversion: the one attribution credited, else the
/// conversion's own.
pub fn click_session(f: &Facts) -> Option<&SessionFacts> {
    f.attributed.as_ref().or(f.session.as_ref())
}
