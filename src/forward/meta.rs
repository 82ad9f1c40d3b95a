//! Meta's Conversions API (docs/decisions.md §13): one `POST {base}/{version}/{pixel_id}/events`
//! per batch of at most 1,000 events (the version the destination is on, `versions.rs`), the access token in the JSON body (never in a URL, which a proxy
//! or a log could keep), each conversion mapped as Meta's parameter reference says, and Meta's
//! answers sorted into the sender's classes by their documented error codes.

use serde_json::{json, Map, Value};

use crate::store::deliveries::{Facts, SessionFacts, Status};
use crate::store::destinations::Destination;

use super::hash::{sha256_hex, user_hash};
use super::kinds::{Kind, META};
use super::platform::{
    age, base, click_session, consent, decimal, dedup_key, Answer, Event, Http, Outage, Platform,
    Verdict,
};

/// Meta's Conversions API.
pub struct Meta;

/// The Graph API's host, replaced by a destination's `endpoint`.
pub const DEFAULT_BASE: &str = "https://graph.facebook.com";
/// Meta's error code of a call to an API version it no longer serves ("You are calling a
/// deprecated version of the Ads API").
pub const VERSION_GONE_CODE: i64 = 2635;
/// Oldest click an `fbc` is built from: Meta's click id, like the pixel's `_fbc` cookie, lives 90 days.
pub const FBC_MAX_AGE_MS: i64 = 90 * 86_400_000;
/// Why a test event was not sent, as the dashboard shows it beside the destination's form (the
/// command line names its option instead).
pub const NO_TEST_EVENT_CODE: &str = "Meta shows test events only with a test event code: copy \
    the code from Events Manager (your dataset → Test events) into this destination's \"Test event \
    code\" field, save, then send the test again";
/// Most characters of a platform's message kept in an error.
const MAX_ERROR_CHARS: usize = 500;

impl Platform for Meta {
    fn kind(&self) -> &'static Kind {
        &META
    }

    fn check(
        &self,
        _dest: &Destination,
        event: &Event<'_>,
        now_ms: i64,
    ) -> Option<(&'static str, String)> {
        let f = event.facts;
        if now_ms - f.occurred_at > META.max_age_ms {
            return Some((
                Status::TooOld.as_str(),
                format!(
                    "the conversion is {} old; Meta takes events up to 7 days old",
                    age(now_ms - f.occurred_at)
                ),
            ));
        }
        if event.name == "Purchase" && f.value.as_deref().and_then(decimal).is_none() {
            return Some((
                Status::Skipped.as_str(),
                "Meta requires a value with a Purchase, and the conversion has none: report \
                 purchases with their value, or map this conversion type to another of Meta's \
                 events on the destination"
                    .into(),
            ));
        }
        if user_data(f, now_ms).is_empty() {
            return Some((
                Status::Skipped.as_str(),
                "nothing to match the person on: no e-mail, phone, client id, browser or click id, \
                 IP address or user agent (or no consent to send them)"
                    .into(),
            ));
        }
        None
    }

    fn send(
        &self,
        http: &Http,
        dest: &Destination,
        events: &[Event<'_>],
        now_ms: i64,
    ) -> Result<Vec<Verdict>, Outage> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        // A live order never carries the destination's test code: with it Meta would take the
        // order as a test event, out of the advertiser's results. The code is for test sends.
        let answer = post(http, dest, events, None, now_ms)?;
        classify(dest, &answer, events.len())
            .map(|()| vec![Verdict::Delivered; events.len()])
            .or_else(|e| match e {
                Refusal::Outage(o) => Err(o),
                Refusal::Event(reason) => Ok(vec![Verdict::Failed(reason); events.len()]),
            })
    }

    fn test_refusal(&self, dest: &Destination) -> Option<String> {
        dest.setting("test_event_code").is_none().then(|| {
            "test order: no test_event_code set on the destination, and a test order goes to \
             Meta only as a test event (set the destination's \"Test event code\" to send it)"
                .to_string()
        })
    }

    fn test(
        &self,
        http: &Http,
        dest: &Destination,
        event: &Event<'_>,
        now_ms: i64,
    ) -> Result<String, Outage> {
        let Some(code) = dest.setting("test_event_code") else {
            return Err(Outage::Rejected(NO_TEST_EVENT_CODE.into()));
        };
        let answer = post(http, dest, std::slice::from_ref(event), Some(code), now_ms)?;
        match classify(dest, &answer, 1) {
            Ok(()) => {}
            Err(Refusal::Outage(o)) => return Err(o),
            Err(Refusal::Event(reason)) => return Err(Outage::Rejected(reason)),
        }
        let v: Value = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
        let n = v
            .get("events_received")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let mut text = format!(
            "Meta received {n} event{} (fbtrace_id {}) with test event code {code}",
            if n == 1 { "" } else { "s" },
            v.get("fbtrace_id")
                .and_then(Value::as_str)
                .unwrap_or("none")
        );
        if let Some(msgs) = v.get("messages").and_then(Value::as_array) {
            let msgs: Vec<String> = msgs
                .iter()
                .map(|m| m.as_str().map_or_else(|| m.to_string(), str::to_string))
                .collect();
            if !msgs.is_empty() {
                text.push_str(&format!("; messages: {}", msgs.join("; ")));
            }
        }
        Ok(scrub(&text, dest))
    }
}

/// Why Meta did not take a request: an outage of the whole request, or a refusal of its one event.
enum Refusal {
    Outage(Outage),
    Event(String),
}

/// Posts `events` as one request.
fn post(
    http: &Http,
    dest: &Destination,
    events: &[Event<'_>],
    test_event_code: Option<&str>,
    now_ms: i64,
) -> Result<Answer, Outage> {
    let (Some(pixel), Some(token)) = (dest.setting("pixel_id"), dest.secret("access_token")) else {
        return Err(Outage::Unauthorized(
            "the destination has no pixel id or access token".into(),
        ));
    };
    let version = super::versions::in_use(dest).unwrap_or_default();
    let url = format!(
        "{}/{version}/{}/events",
        base(dest, DEFAULT_BASE),
        percent_encoding::utf8_percent_encode(pixel, percent_encoding::NON_ALPHANUMERIC)
    );
    let mut body = Map::new();
    body.insert(
        "data".into(),
        Value::Array(events.iter().map(|e| event_json(e, now_ms)).collect()),
    );
    body.insert("access_token".into(), Value::String(token.to_string()));
    if let Some(code) = test_event_code {
        body.insert("test_event_code".into(), Value::String(code.to_string()));
    }
    http.post(
        &url,
        &[],
        "application/json",
        &Value::Object(body).to_string(),
    )
    .map_err(|e| Outage::Transient(scrub(&format!("Meta: no answer: {e}"), dest)))
}

/// One conversion as an element of Meta's `data` (docs/decisions.md §13 says where each field
/// comes from).
pub fn event_json(e: &Event<'_>, now_ms: i64) -> Value {
    let f = e.facts;
    let user = user_data(f, now_ms);
    let mut m = Map::new();
    m.insert("event_name".into(), json!(e.name));
    // A time ahead of the send (a backend's clock, up to the 5 minutes the API lets through) goes
    // as the send's: neither platform takes events from the future.
    m.insert(
        "event_time".into(),
        json!(f.occurred_at.min(now_ms).div_euclid(1_000)),
    );
    m.insert("event_id".into(), json!(dedup_key(f)));
    let url = f
        .session
        .as_ref()
        .and_then(|s| s.landing_url.as_deref())
        .filter(|u| !u.is_empty());
    // Meta requires both the user agent and the page's URL of a website event; a session that
    // began without a pageview has no URL, and its conversion goes as `other`.
    let website = user.contains_key("client_user_agent") && url.is_some();
    m.insert(
        "action_source".into(),
        json!(if website { "website" } else { "other" }),
    );
    if let Some(url) = url {
        m.insert("event_source_url".into(), json!(url));
    }
    m.insert("user_data".into(), Value::Object(user));
    let mut custom = Map::new();
    if let Some(v) = f.value.as_deref().and_then(decimal) {
        custom.insert("value".into(), Value::Number(v));
    }
    if !f.currency.is_empty() {
        // Lower-case, as Meta's own SDK normalises it (`CustomData.normalize`).
        custom.insert("currency".into(), json!(f.currency.to_ascii_lowercase()));
    }
    if let Some(order) = f.order_id.as_deref().filter(|o| !o.is_empty()) {
        custom.insert("order_id".into(), json!(order));
    }
    m.insert("custom_data".into(), Value::Object(custom));
    Value::Object(m)
}

/// Meta's `user_data` of a conversion: only what the consent in force lets go for advertising.
fn user_data(f: &Facts, now_ms: i64) -> Map<String, Value> {
    let mut u = Map::new();
    if !consent(f).ad_user_data {
        return u;
    }
    if let Some(c) = f.client_id.as_deref().filter(|c| !c.is_empty()) {
        u.insert("external_id".into(), json!([sha256_hex(c)]));
    }
    for key in ["em", "ph"] {
        if let Some(h) = user_hash(f.user_hashes.as_deref(), key) {
            u.insert(key.into(), json!([h]));
        }
    }
    let s = f.session.as_ref();
    if let Some(fbp) = s
        .and_then(|s| s.forwarding.fbp.as_deref())
        .filter(|v| !v.is_empty())
    {
        u.insert("fbp".into(), json!(fbp));
    }
    if let Some(fbc) = fbc(f, now_ms) {
        u.insert("fbc".into(), json!(fbc));
    }
    if let Some(ip) = s
        .and_then(|s| s.forwarding.client_ip.as_deref())
        .filter(|v| !v.is_empty())
    {
        u.insert("client_ip_address".into(), json!(ip));
    }
    if let Some(ua) = s
        .and_then(|s| s.forwarding.user_agent.as_deref())
        .filter(|v| !v.is_empty())
    {
        u.insert("client_user_agent".into(), json!(ua));
    }
    u
}

/// The click id: the `_fbc` cookie the pixel saw (in the conversion's session, else the credited
/// one), else `fb.1.<first seen, ms>.<fbclid>` from the click that brought the visitor, the
/// fbclid unmodified; either only while its click is at most 90 days old.
pub fn fbc(f: &Facts, now_ms: i64) -> Option<String> {
    let cookie = |s: Option<&SessionFacts>| {
        s.and_then(|s| s.forwarding.fbc.clone())
            .filter(|v: &String| !v.is_empty())
    };
    if let Some(c) = cookie(f.session.as_ref()).or_else(|| cookie(f.attributed.as_ref())) {
        // `fb.<subdomain index>.<creation time, ms>.<fbclid>`: a cookie whose time cannot be read
        // goes as the pixel saw it.
        let created = c.split('.').nth(2).and_then(|t| t.parse::<i64>().ok());
        return created
            .is_none_or(|t| now_ms - t <= FBC_MAX_AGE_MS)
            .then_some(c);
    }
    let click = click_session(f)?;
    let fbclid = click.fbclid.as_deref().filter(|v| !v.is_empty())?;
    (now_ms - click.started_at <= FBC_MAX_AGE_MS)
        .then(|| format!("fb.1.{}.{fbclid}", click.started_at))
}

/// `text` without any of the destination's credentials (a platform may echo a token back), cut to
/// a length an error column and a log line take.
pub fn scrub(text: &str, dest: &Destination) -> String {
    let mut t = super::platform::hide_secrets(
        &crate::text::redacted_urls(text),
        super::platform::secrets_of(dest),
        |_| "[redacted]".into(),
    );
    if t.chars().count() > MAX_ERROR_CHARS {
        t = t.chars().take(MAX_ERROR_CHARS).collect::<String>() + "…";
    }
    t
}

/// Meta's answer to a request of `n` events: taken, or why not (the Graph API's error codes,
/// "Handling Errors", and the Marketing API's rate-limit codes).
fn classify(dest: &Destination, a: &Answer, n: usize) -> Result<(), Refusal> {
    let v: Value = serde_json::from_str(&a.body).unwrap_or(Value::Null);
    if (200..300).contains(&a.status) {
        if v.get("events_received").is_some() {
            return Ok(());
        }
        return Err(Refusal::Outage(Outage::Transient(scrub(
            &format!(
                "Meta answered HTTP {} without events_received: {}",
                a.status,
                super::platform::error_text(a)
            ),
            dest,
        ))));
    }
    let err = v.get("error");
    let code = err.and_then(|e| e.get("code")).and_then(Value::as_i64);
    let subcode = err
        .and_then(|e| e.get("error_subcode"))
        .and_then(Value::as_i64);
    let transient = err
        .and_then(|e| e.get("is_transient"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let text = scrub(&describe(a, err), dest);
    let throttled = || {
        Refusal::Outage(Outage::Throttled {
            error: text.clone(),
            retry_after_ms: a.retry_after_ms,
        })
    };
    if a.status == 429 {
        return Err(throttled());
    }
    if code == Some(VERSION_GONE_CODE) {
        let version = super::versions::in_use(dest)
            .unwrap_or_default()
            .to_string();
        return Err(Refusal::Outage(Outage::VersionGone {
            error: super::versions::version_gone_message(META.label, &version, &text),
            version,
        }));
    }
    match (code, subcode) {
        _ if transient => Err(Refusal::Outage(Outage::Transient(text))),
        (Some(1 | 2), _) => Err(Refusal::Outage(Outage::Transient(text))),
        (Some(4 | 17 | 32 | 341 | 368 | 613 | 80_000..=80_014), _) | (_, Some(2_446_079)) => {
            Err(throttled())
        }
        (Some(3 | 10 | 102 | 190 | 200..=299), _) | (Some(100), Some(33)) => {
            Err(Refusal::Outage(Outage::Unauthorized(text)))
        }
        _ if a.status >= 500 => Err(Refusal::Outage(Outage::Transient(text))),
        (None, _) if a.status == 401 || a.status == 403 => {
            Err(Refusal::Outage(Outage::Unauthorized(text)))
        }
        (None, _) if a.status == 408 => Err(Refusal::Outage(Outage::Transient(text))),
        _ if n > 1 => Err(Refusal::Outage(Outage::Rejected(text))),
        _ => Err(Refusal::Event(text)),
    }
}

/// "Meta answered HTTP 400: (#100) Invalid parameter [code 100, subcode 2804003]: the user's
/// message (fbtrace_id …)".
fn describe(a: &Answer, err: Option<&Value>) -> String {
    let Some(e) = err else {
        return format!(
            "Meta answered HTTP {}: {}",
            a.status,
            super::platform::error_text(a)
        );
    };
    let s = |k: &str| e.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    let mut t = format!(
        "Meta answered HTTP {}: {}",
        a.status,
        s("message").unwrap_or("an error")
    );
    match (
        e.get("code").and_then(Value::as_i64),
        e.get("error_subcode").and_then(Value::as_i64),
    ) {
        (Some(c), Some(sc)) => t.push_str(&format!(" [code {c}, subcode {sc}]")),
        (Some(c), None) => t.push_str(&format!(" [code {c}]")),
        _ => {}
    }
    if let Some(m) = s("error_user_msg") {
        t.push_str(&format!(": {m}"));
    }
    if let Some(id) = s("fbtrace_id") {
        t.push_str(&format!(" (fbtrace_id {id})"));
    }
    t
}
