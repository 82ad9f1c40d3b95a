//! What the sender asks of each platform (`meta.rs`, `ga4.rs`, `google_ads.rs`), the HTTP client
//! they send with, and the consent in force for a conversion (docs/decisions.md §13).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use ipnet::IpNet;
use serde_json::Number;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

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

/// What the platform said of one adjustment of an order (`adjust.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdjustVerdict {
    /// Taken.
    Delivered,
    /// Not taken, but the platform has it in effect (already retracted, a later restatement
    /// there, the same restatement there): delivered, with what it said.
    InEffect(String),
    /// Not taken this time through no fault of its own: tried again after `after_ms` (else the
    /// backoff), the try counted.
    Retry {
        error: String,
        after_ms: Option<i64>,
    },
    /// Too early for the platform: held until `after_ms` from now, the try not counted.
    Hold { error: String, after_ms: i64 },
    /// The platform does not know the conversion yet (it may take hours to appear): tried again a
    /// bounded number of times.
    NotFound(String),
    /// The conversion is past the platform's age limit for adjustments.
    TooOld(String),
    /// The platform cannot take it as it stands (Google Ads restates no retracted conversion):
    /// `not_supported`, with the reason.
    NotSupported(String),
    /// Refused for good, with the platform's reason.
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

    /// Whether an event (whose consent already holds) may be sent: `Some((status, why))` with the
    /// [`Status`](crate::store::deliveries::Status) it ends in as stored — `too_old` past the platform's age limit, `skipped` when
    /// it lacks what the platform needs
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

    /// Why a test order cannot go to this destination's test endpoint (Meta without a
    /// `test_event_code`): it is then `skipped` with this reason, never sent live.
    fn test_refusal(&self, _dest: &Destination) -> Option<String> {
        None
    }

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

/// Where the HTTP client may connect, checked on every address a host name resolves to (or an IP
/// literal is), at connect time: a host that resolved to a public address when a destination was
/// saved may resolve to another since.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reach {
    /// Any address: the operator's own requests (`convapi destination test`).
    anywhere: bool,
    /// The non-public addresses the operator allowed besides the public ones
    /// (`serve --forward-private-endpoints`), for a gateway on the private network.
    private: Vec<PrivateEndpoint>,
}

impl Reach {
    /// Any address, loopback and the private network included: the operator's command line.
    pub fn anywhere() -> Reach {
        Reach {
            anywhere: true,
            private: Vec::new(),
        }
    }

    /// Public addresses, and the non-public ones `private` names: what `serve` sends to for every
    /// destination (a tenant's included), and its dashboard's test events.
    pub fn public_and(private: Vec<PrivateEndpoint>) -> Reach {
        Reach {
            anywhere: false,
            private,
        }
    }

    /// Whether a connection to `addr` is allowed.
    pub fn allows(&self, addr: SocketAddr) -> bool {
        self.anywhere || is_public(addr.ip()) || self.private.iter().any(|p| p.contains(addr))
    }

    /// The non-public endpoints allowed besides the public ones.
    pub fn private(&self) -> &[PrivateEndpoint] {
        &self.private
    }
}

/// A non-public address the operator allows: a network (`10.0.0.0/8`, `127.0.0.1`: any port) or
/// one address and port (`10.0.0.5:8443`, `[fd00::5]:8443`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrivateEndpoint {
    pub net: IpNet,
    /// `None`: any port.
    pub port: Option<u16>,
}

impl PrivateEndpoint {
    fn contains(&self, addr: SocketAddr) -> bool {
        // An IPv4-mapped IPv6 address is the IPv4 address it maps.
        let ip = match addr.ip() {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        self.net.contains(&ip) && self.port.is_none_or(|p| p == addr.port())
    }
}

impl std::str::FromStr for PrivateEndpoint {
    type Err = crate::invalid::Invalid;

    fn from_str(s: &str) -> Result<PrivateEndpoint, Self::Err> {
        let t = s.trim();
        if let Ok(a) = t.parse::<SocketAddr>() {
            return Ok(PrivateEndpoint {
                net: IpNet::from(a.ip()),
                port: Some(a.port()),
            });
        }
        let net = t
            .parse::<IpNet>()
            .or_else(|_| t.parse::<IpAddr>().map(IpNet::from))
            .map_err(|_| {
                crate::invalid::Invalid(format!(
                    "{s:?} is not an address (127.0.0.1), a network (10.0.0.0/8) or an address \
                     and port (10.0.0.5:8443, [fd00::5]:8443)"
                ))
            })?;
        Ok(PrivateEndpoint { net, port: None })
    }
}

impl std::fmt::Display for PrivateEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (
            self.port,
            self.net.prefix_len() == self.net.max_prefix_len(),
        ) {
            (Some(p), _) => write!(f, "{}", SocketAddr::new(self.net.addr(), p)),
            (None, true) => write!(f, "{}", self.net.addr()),
            (None, false) => write!(f, "{}", self.net),
        }
    }
}

/// Whether `ip` is a global unicast address: not loopback, the private networks (RFC 1918, ULA
/// `fc00::/7`), shared address space (`100.64.0.0/10`), link-local (`169.254.0.0/16`, the cloud
/// metadata address among them; `fe80::/10`), unspecified, multicast, broadcast, reserved or a
/// documentation or benchmarking range; an IPv4 address mapped, translated (`64:ff9b::/96`) or
/// tunnelled (6to4) in IPv6 is judged as that IPv4 address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public_v4(v4);
            }
            let s = v6.segments();
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let [a, b] = s[6].to_be_bytes();
                let [c, d] = s[7].to_be_bytes();
                return is_public_v4(Ipv4Addr::new(a, b, c, d));
            }
            if s[0] == 0x2002 {
                let [a, b] = s[1].to_be_bytes();
                let [c, d] = s[2].to_be_bytes();
                return is_public_v4(Ipv4Addr::new(a, b, c, d));
            }
            // Global unicast is 2000::/3, less IETF protocol assignments (2001::/23, Teredo
            // among them) and the documentation ranges (2001:db8::/32, 3fff::/20).
            (s[0] & 0xe000) == 0x2000
                && !(s[0] == 0x2001 && s[1] < 0x0200)
                && !(s[0] == 0x2001 && s[1] == 0x0db8)
                && !(s[0] == 0x3fff && s[1] < 0x1000)
        }
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0 // "this network"
        || a == 10
        || a == 127
        || a >= 224 // multicast, reserved, broadcast
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 169 && b == 254) // link-local, cloud metadata
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 168)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2) // documentation
        || (a == 192 && b == 88 && c == 99) // 6to4 relay anycast
        || (a == 198 && (18..20).contains(&b)) // benchmarking
        || (a == 198 && b == 51 && c == 100) // documentation
        || (a == 203 && b == 0 && c == 113)) // documentation
}

/// Why an endpoint typed in the dashboard is refused: its host is an address (or `localhost`) that
/// `reach` does not allow. A host name is checked when a request connects (it may resolve to
/// another address by then), not here: this names the fix early for what is plain to see.
pub fn endpoint_refusal(endpoint: &str, reach: &Reach) -> Option<String> {
    let uri = endpoint.trim().parse::<ureq::http::Uri>().ok()?;
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("http") {
            80
        } else {
            443
        });
    let lower = host.to_ascii_lowercase();
    let ip = if lower == "localhost" || lower.ends_with(".localhost") {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        host.parse::<IpAddr>().ok()?
    };
    (!reach.allows(SocketAddr::new(ip, port))).then(|| {
        format!(
            "the endpoint's host {host} is not a public address: destinations send only to public \
             addresses (use the platform's own endpoint, or leave the field blank)"
        )
    })
}

/// The resolver of the senders' client: the default one, then only the addresses its [`Reach`]
/// allows; none left is a refusal that names the address and the fix.
#[derive(Debug)]
struct Guarded(Reach);

impl Resolver for Guarded {
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let all = DefaultResolver::default().resolve(uri, config, timeout)?;
        let mut kept = self.empty();
        for a in all.iter().filter(|a| self.0.allows(**a)) {
            kept.push(*a);
        }
        match all.first() {
            Some(refused) if kept.is_empty() => Err(ureq::Error::Io(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "{} is not a public address: convapi sends only to public addresses \
                     (the operator may allow a gateway on the private network with \
                     `serve --forward-private-endpoints`)",
                    refused.ip()
                ),
            ))),
            _ => Ok(kept),
        }
    }
}

/// The senders' HTTP client: ureq (blocking, as the rest of convapi; already in the tree for the
/// ECB rates) over rustls, with a time limit per request, a bound on the answer it reads,
/// connections kept alive per host, no redirect followed (an answer 3xx is the platform's answer),
/// no proxy from the environment, and only the addresses its [`Reach`] allows.
#[derive(Clone)]
pub struct Http {
    agent: ureq::Agent,
}

impl Http {
    /// The operator's client (the command line): any address.
    pub fn new(timeout: Duration) -> Http {
        Http::reaching(timeout, Reach::anywhere())
    }

    /// A client that connects only where `reach` allows (`serve`'s sender and test events).
    pub fn reaching(timeout: Duration, reach: Reach) -> Http {
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .proxy(None)
            .max_idle_connections(16)
            .max_idle_connections_per_host(2)
            .user_agent(concat!("convapi/", env!("CARGO_PKG_VERSION")))
            .build();
        let agent = ureq::Agent::with_parts(config, DefaultConnector::new(), Guarded(reach));
        Http { agent }
    }

    /// POSTs `body` as `content_type`; `Err` only when no answer came (connection, timeout, an
    /// answer over [`MAX_ANSWER_BYTES`], an address the client may not reach). Every HTTP status
    /// is an answer, a redirect's too.
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

/// Most characters of a platform's error shown to a tenant (a destination's last error, a test
/// event's answer, a delivery's reason).
pub const MAX_SHOWN_CHARS: usize = 300;

/// What a platform or the sender said about `dest`, as the site's people read it (a delivery's
/// error, the destination's last error, a test event's answer): its credentials masked, then
/// [`bounded`].
pub fn shown(text: &str, dest: &Destination) -> String {
    bounded(&mask_secrets(text, dest))
}

/// `text` cut to [`MAX_SHOWN_CHARS`], with `…` where it was cut.
pub fn bounded(text: &str) -> String {
    if text.chars().count() <= MAX_SHOWN_CHARS {
        return text.to_owned();
    }
    text.chars().take(MAX_SHOWN_CHARS - 1).collect::<String>() + "…"
}

/// What an answer that is not a success says, as a tenant may read it: the platform's parsed
/// error (`error.message` and Meta's `error_user_msg`, OAuth's `error` and `error_description`,
/// GA4's validation messages), never the raw body: an endpoint that is not a platform's answers
/// `"(not a platform answer)"`. Not yet [`bounded`] (secrets are masked first).
pub fn error_text(a: &Answer) -> String {
    let v: serde_json::Value = serde_json::from_str(&a.body).unwrap_or_default();
    let s = |v: &serde_json::Value, k: &str| {
        v.get(k)
            .and_then(serde_json::Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let mut parts: Vec<String> = Vec::new();
    match v.get("error") {
        Some(e @ serde_json::Value::Object(_)) => {
            parts.extend(s(e, "message"));
            parts.extend(s(e, "error_user_msg"));
        }
        Some(serde_json::Value::String(e)) if !e.trim().is_empty() => {
            parts.push(e.trim().to_owned());
            parts.extend(s(&v, "error_description"));
        }
        _ => {}
    }
    if let Some(msgs) = v.get("validationMessages").and_then(|m| m.as_array()) {
        parts.extend(msgs.iter().filter_map(|m| s(m, "description")));
    }
    if parts.is_empty() {
        "(not a platform answer)".into()
    } else {
        parts.join(": ")
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

/// A URL as an error may show it: no query (where GA4's API secret and Meta's token travel), no
/// password in its authority (an endpoint a tenant typed may carry one).
fn redact_url(url: &str) -> String {
    crate::text::redacted_url(url, crate::text::Query::Dropped)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_global_unicast_addresses_are_public() {
        for s in [
            "8.8.8.8",
            "157.240.1.35",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "2a03:2880:f10c:83:face:b00c:0:25de",
            "2001:4860:4860::8888",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert!(is_public(ip(s)), "{s} is public");
        }
        for s in [
            "127.0.0.1",
            "127.255.255.254",
            "0.0.0.0",
            "0.1.2.3",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.127.255.255",
            "169.254.169.254",
            "192.0.0.8",
            "192.0.2.1",
            "198.18.0.1",
            "198.51.100.1",
            "203.0.113.7",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::1",
            "2002:a00:1::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "2001::1",
            "3fff::1",
            "::127.0.0.1",
            "100::1",
        ] {
            assert!(!is_public(ip(s)), "{s} is not public");
        }
    }

    #[test]
    fn the_operators_private_endpoints_are_an_address_a_network_or_an_address_and_port() {
        let parse = |s: &str| s.parse::<PrivateEndpoint>().unwrap();
        let gw = parse("10.0.0.5:8443");
        let reach = Reach::public_and(vec![gw, parse("fd00::/8"), parse("127.0.0.1")]);
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(reach.allows(at("10.0.0.5:8443")));
        assert!(reach.allows(at("[::ffff:10.0.0.5]:8443")), "mapped");
        assert!(
            !reach.allows(at("10.0.0.5:22")),
            "another port of the gateway"
        );
        assert!(!reach.allows(at("10.0.0.6:8443")));
        assert!(reach.allows(at("[fd00::1]:80")));
        assert!(reach.allows(at("127.0.0.1:9")));
        assert!(!reach.allows(at("127.0.0.2:9")));
        assert!(!reach.allows(at("169.254.169.254:80")));
        assert!(reach.allows(at("8.8.8.8:443")));
        assert!(Reach::anywhere().allows(at("169.254.169.254:80")));
        assert!(!Reach::default().allows(at("127.0.0.1:80")));
        assert_eq!(gw.to_string(), "10.0.0.5:8443");
        assert_eq!(parse("[fd00::5]:443").to_string(), "[fd00::5]:443");
        assert_eq!(parse("10.0.0.0/8").to_string(), "10.0.0.0/8");
        let e = "gateway".parse::<PrivateEndpoint>().unwrap_err();
        assert!(e.0.contains("10.0.0.5:8443"), "{}", e.0);
    }

    #[test]
    fn an_ip_literal_is_checked_when_the_request_connects() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/x?token=secret", closed.local_addr().unwrap());
        drop(closed);
        let quick = Duration::from_secs(5);
        let e = Http::reaching(quick, Reach::default())
            .post(&url, &[], "text/plain", "")
            .unwrap_err();
        assert!(e.0.contains("127.0.0.1 is not a public address"), "{e}");
        assert!(!e.0.contains("secret"), "{e}");
        // The operator's client reaches it (nothing listens: refused by the system, not by us).
        let e = Http::new(quick)
            .post(&url, &[], "text/plain", "")
            .unwrap_err();
        assert!(!e.0.contains("not a public address"), "{e}");
    }

    #[test]
    fn a_typed_endpoint_on_a_non_public_address_is_refused_with_the_fix() {
        let none = Reach::default();
        for e in [
            "http://127.0.0.1:8080/admin?x=",
            "http://localhost/",
            "https://api.localhost",
            "http://[::1]:9/",
            "http://169.254.169.254/latest/meta-data",
            "https://10.0.0.5",
        ] {
            let why = endpoint_refusal(e, &none).unwrap_or_else(|| panic!("{e} passed"));
            assert!(why.contains("is not a public address"), "{why}");
        }
        for e in ["https://gateway.example", "https://8.8.8.8/", ""] {
            assert_eq!(endpoint_refusal(e, &none), None, "{e}");
        }
        let gw = Reach::public_and(vec!["10.0.0.5:443".parse().unwrap()]);
        assert_eq!(endpoint_refusal("https://10.0.0.5", &gw), None);
        assert!(
            endpoint_refusal("http://10.0.0.5", &gw).is_some(),
            "port 80"
        );
    }

    #[test]
    fn a_tenant_reads_the_platforms_parsed_error_never_the_raw_body() {
        let a = |status: u16, body: &str| Answer {
            status,
            body: body.into(),
            retry_after_ms: None,
        };
        assert_eq!(
            error_text(&a(502, "<html>internal stack trace</html>")),
            "(not a platform answer)"
        );
        assert_eq!(
            error_text(&a(500, r#"{"debug": "internal"}"#)),
            "(not a platform answer)"
        );
        assert_eq!(
            error_text(&a(
                400,
                r#"{"error": {"message": "Invalid parameter", "error_user_msg": "Bad pixel"}}"#
            )),
            "Invalid parameter: Bad pixel"
        );
        assert_eq!(
            error_text(&a(
                400,
                r#"{"error": "invalid_grant", "error_description": "Token has been expired"}"#
            )),
            "invalid_grant: Token has been expired"
        );
        assert_eq!(
            error_text(&a(
                400,
                r#"{"validationMessages": [{"description": "Unknown field"}]}"#
            )),
            "Unknown field"
        );
        let long = "é".repeat(1_000);
        assert_eq!(bounded(&long).chars().count(), MAX_SHOWN_CHARS);
        assert!(bounded(&long).ends_with('…'));
        assert_eq!(bounded("short"), "short");
    }

    #[test]
    fn no_answer_names_the_url_without_its_credentials() {
        // A closed port on this host: the connection is refused at once.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let url = format!("http://gw:s3cret-pw@127.0.0.1:{port}/mp/collect?api_secret=sekrit-as");
        let Err(NoAnswer(text)) =
            Http::new(Duration::from_secs(2)).post(&url, &[], "text/plain", "")
        else {
            panic!("a closed port answered");
        };
        assert!(
            text.contains(&format!("127.0.0.1:{port}/mp/collect")),
            "{text}"
        );
        assert!(
            !text.contains("s3cret-pw") && !text.contains("sekrit-as"),
            "{text}"
        );
    }
}
