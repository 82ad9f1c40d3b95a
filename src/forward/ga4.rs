//! GA4's Measurement Protocol (docs/decisions.md §13): `POST {base}/mp/collect?measurement_id=…&
//! api_secret=…`, one request per browser (one `client_id` a request) of at most 25 events. GA4
//! answers 2xx even to a payload it drops, so what a request carries is checked here and in the
//! tests against the validation server's rules; `test` asks that server (`/debug/mp/collect`).

use serde_json::{json, Map, Value};

use crate::store::deliveries::{Facts, SessionFacts, Status};
use crate::store::destinations::Destination;

use super::hash::{sha256_hex, user_hash};
use super::kinds::{Kind, GA4};
use super::meta::scrub;
use super::platform::{
    age, base, consent, decimal, dedup_key, AdjustVerdict, Answer, Event, Http, Outage, Platform,
    Verdict,
};

/// GA4's Measurement Protocol.
pub struct Ga4;

/// The Measurement Protocol's host, replaced by a destination's `endpoint`.
pub const DEFAULT_BASE: &str = "https://www.google-analytics.com";
/// `engagement_time_msec` of each event: GA4 counts a user active (Realtime, engagement) only with
/// a positive one; a conversion reported by a backend took no time on the page, so the least.
pub const ENGAGEMENT_TIME_MSEC: i64 = 1;

impl Platform for Ga4 {
    fn kind(&self) -> &'static Kind {
        &GA4
    }

    fn check(
        &self,
        _dest: &Destination,
        event: &Event<'_>,
        now_ms: i64,
    ) -> Option<(&'static str, String)> {
        let old = now_ms - event.facts.occurred_at;
        if old > GA4.max_age_ms {
            return Some((
                Status::TooOld.as_str(),
                format!(
                    "the conversion is {} old; GA4 takes events up to 72 hours old",
                    age(old)
                ),
            ));
        }
        // GA4 needs a browser's client id: an order kept with no session and no visitorId has
        // none (docs/decisions.md §13).
        if event.facts.visitor_id.is_empty() && ga_session(event.facts).is_none() {
            return Some((
                Status::Skipped.as_str(),
                "no client id for GA4: the order has no session (unattributed) and named no \
                 visitorId; send orders with the visitorId the pixel exposes"
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
        let url = url(dest, "/mp/collect")?;
        let groups = groups(events);
        let mut verdicts: Vec<Option<Verdict>> = vec![None; events.len()];
        for (i, group) in groups.iter().enumerate() {
            match post_group(http, dest, &url, events, group, now_ms) {
                Ok(()) => {
                    for &k in group {
                        verdicts[k] = Some(Verdict::Delivered);
                    }
                }
                Err(Refusal::Event(reason)) if group.len() == 1 => {
                    verdicts[group[0]] = Some(Verdict::Failed(reason));
                }
                Err(Refusal::Event(reason)) if groups.len() == 1 => {
                    return Err(Outage::Rejected(reason));
                }
                Err(Refusal::Event(_)) => {
                    // The request of one browser among others was refused without saying which
                    // event: each of its events alone, so one bad event sinks only itself.
                    for &k in group {
                        verdicts[k] =
                            Some(match post_group(http, dest, &url, events, &[k], now_ms) {
                                Ok(()) => Verdict::Delivered,
                                Err(Refusal::Event(reason)) => Verdict::Failed(reason),
                                Err(Refusal::Outage(o)) => retry(o),
                            });
                    }
                }
                Err(Refusal::Outage(o)) => {
                    // The platform is down, slowing us or refusing the credentials: the requests
                    // left would fare no better.
                    if verdicts.iter().all(Option::is_none) {
                        return Err(o);
                    }
                    for g in &groups[i..] {
                        for &k in g {
                            verdicts[k].get_or_insert_with(|| retry(o.clone()));
                        }
                    }
                    break;
                }
            }
        }
        Ok(verdicts
            .into_iter()
            .map(|v| {
                v.unwrap_or_else(|| Verdict::Retry {
                    error: "not sent".into(),
                    after_ms: None,
                })
            })
            .collect())
    }

    fn test(
        &self,
        http: &Http,
        dest: &Destination,
        event: &Event<'_>,
        now_ms: i64,
    ) -> Result<String, Outage> {
        let url = url(dest, "/debug/mp/collect")?;
        let body = request_json(std::slice::from_ref(event), &[0], now_ms);
        let answer = http
            .post(&url, &[], "application/json", &body.to_string())
            .map_err(|e| Outage::Transient(scrub(&format!("GA4: no answer: {e}"), dest)))?;
        match classify(dest, &answer) {
            Ok(()) => {}
            Err(Refusal::Outage(o)) => return Err(o),
            Err(Refusal::Event(reason)) => return Err(Outage::Rejected(reason)),
        }
        let v: Value = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
        let msgs: Vec<String> = v
            .get("validationMessages")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|m| {
                        let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("");
                        format!(
                            "{}: {} ({})",
                            s("fieldPath"),
                            s("description"),
                            s("validationCode")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let text = if msgs.is_empty() {
            "GA4 validated the event: no validation messages (the validation server does not \
             check the measurement id or the API secret)"
                .to_string()
        } else {
            format!(
                "GA4's validation server found {} problem{}: {}",
                msgs.len(),
                if msgs.len() == 1 { "" } else { "s" },
                msgs.join("; ")
            )
        };
        Ok(scrub(&text, dest))
    }
}

/// GA4's event of money given back for a purchase.
pub const REFUND_EVENT: &str = "refund";
/// How far back a refund's time is sent: GA4 takes events up to 72 hours old; an older refund goes
/// with a time within them.
const REFUND_MAX_BACK_MS: i64 = 71 * 3_600_000;

/// The request of a `refund` event of the purchase `purchase` (as its own request was made of it:
/// the same `client_id`, `transaction_id`, consent), for `value` (decimal text) in its currency,
/// at `at_ms`.
pub fn refund_json(purchase: &Facts, value: &str, at_ms: i64, now_ms: i64) -> Value {
    let f = Facts {
        value: Some(value.to_string()),
        occurred_at: at_ms.clamp(now_ms - REFUND_MAX_BACK_MS, now_ms),
        ..purchase.clone()
    };
    let event = Event {
        delivery_id: 0,
        facts: &f,
        name: REFUND_EVENT,
    };
    request_json(&[event], &[0], now_ms)
}

/// Sends a `refund` event ([`refund_json`]) to the destination's Measurement Protocol endpoint
/// (the purchase's): its verdict, or the outage of the request.
pub fn send_refund(
    http: &Http,
    dest: &Destination,
    purchase: &Facts,
    value: &str,
    at_ms: i64,
    now_ms: i64,
) -> Result<AdjustVerdict, Outage> {
    let url = url(dest, "/mp/collect")?;
    let body = refund_json(purchase, value, at_ms, now_ms);
    let answer = http
        .post(&url, &[], "application/json", &body.to_string())
        .map_err(|e| Outage::Transient(scrub(&format!("GA4: no answer: {e}"), dest)))?;
    match classify(dest, &answer) {
        Ok(()) => Ok(AdjustVerdict::Delivered),
        Err(Refusal::Event(reason)) => Ok(AdjustVerdict::Failed(reason)),
        Err(Refusal::Outage(o)) => Err(o),
    }
}

/// Why GA4 did not take a request: an outage, or a refusal of its events as invalid.
enum Refusal {
    Outage(Outage),
    Event(String),
}

/// A whole-request outage as the verdict of one event of a batch others of which went.
fn retry(o: Outage) -> Verdict {
    match o {
        Outage::Throttled {
            error,
            retry_after_ms,
        } => Verdict::Retry {
            error,
            after_ms: retry_after_ms,
        },
        Outage::Transient(e)
        | Outage::Unauthorized(e)
        | Outage::Rejected(e)
        | Outage::VersionGone { error: e, .. } => Verdict::Retry {
            error: e,
            after_ms: None,
        },
    }
}

/// `{base}{path}?measurement_id=…&api_secret=…`.
fn url(dest: &Destination, path: &str) -> Result<String, Outage> {
    let (Some(id), Some(secret)) = (dest.setting("measurement_id"), dest.secret("api_secret"))
    else {
        return Err(Outage::Unauthorized(
            "the destination has no measurement id or API secret".into(),
        ));
    };
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("measurement_id", id)
        .append_pair("api_secret", secret)
        .finish();
    Ok(format!("{}{path}?{query}", base(dest, DEFAULT_BASE)))
}

/// Posts the events `idx` of `events` (one request's worth: one header) as one request.
fn post_group(
    http: &Http,
    dest: &Destination,
    url: &str,
    events: &[Event<'_>],
    idx: &[usize],
    now_ms: i64,
) -> Result<(), Refusal> {
    let body = request_json(events, idx, now_ms);
    let answer = http
        .post(url, &[], "application/json", &body.to_string())
        .map_err(|e| {
            Refusal::Outage(Outage::Transient(scrub(
                &format!("GA4: no answer: {e}"),
                dest,
            )))
        })?;
    classify(dest, &answer)
}

/// GA4's answer: 2xx is taken (GA4 says no more, even of what it drops), 429 slows down, 5xx and
/// 408 are transient, 401/403 refuse the credentials, any other 4xx refuses the request.
fn classify(dest: &Destination, a: &Answer) -> Result<(), Refusal> {
    if (200..300).contains(&a.status) {
        return Ok(());
    }
    let text = scrub(
        &format!(
            "GA4 answered HTTP {}: {}",
            a.status,
            super::platform::error_text(a)
        ),
        dest,
    );
    Err(match a.status {
        429 => Refusal::Outage(Outage::Throttled {
            error: text,
            retry_after_ms: a.retry_after_ms,
        }),
        401 | 403 => Refusal::Outage(Outage::Unauthorized(text)),
        408 | 500.. => Refusal::Outage(Outage::Transient(text)),
        _ => Refusal::Event(text),
    })
}

/// The request-level fields of an event: events share a request only when all of these agree.
#[derive(Debug, Clone, PartialEq)]
struct Header {
    client_id: String,
    user_id: Option<String>,
    consent: (bool, bool),
    user_data: Option<Value>,
}

fn header(f: &Facts) -> Header {
    let c = consent(f);
    let mut user_data = Map::new();
    if c.ad_user_data {
        for (key, field) in [
            ("em_g", "sha256_email_address"),
            ("ph_g", "sha256_phone_number"),
        ] {
            if let Some(h) = user_hash(f.user_hashes.as_deref(), key) {
                user_data.insert(field.into(), json!([h]));
            }
        }
    }
    Header {
        client_id: client_id(f),
        user_id: f.client_id.clone().filter(|c| !c.is_empty()),
        consent: (c.ad_user_data, c.ad_personalization),
        user_data: (!user_data.is_empty()).then_some(Value::Object(user_data)),
    }
}

/// The events of a batch grouped into requests: same header, at most 25 each, in batch order.
fn groups(events: &[Event<'_>]) -> Vec<Vec<usize>> {
    let mut out: Vec<(Header, Vec<usize>)> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let h = header(e.facts);
        match out
            .iter_mut()
            .find(|(g, idx)| *g == h && idx.len() < GA4.max_batch)
        {
            Some((_, idx)) => idx.push(i),
            None => out.push((h, vec![i])),
        }
    }
    out.into_iter().map(|(_, idx)| idx).collect()
}

/// The body of one request: the events `idx` of `events`, which share a [`Header`].
fn request_json(events: &[Event<'_>], idx: &[usize], now_ms: i64) -> Value {
    let first = events[idx[0]].facts;
    let h = header(first);
    let grant = |b: bool| if b { "GRANTED" } else { "DENIED" };
    let mut m = Map::new();
    m.insert("client_id".into(), json!(h.client_id));
    if let Some(u) = h.user_id {
        m.insert("user_id".into(), json!(u));
    }
    let earliest = idx
        .iter()
        .map(|&k| micros(events[k].facts, now_ms))
        .min()
        .unwrap_or_else(|| micros(first, now_ms));
    m.insert("timestamp_micros".into(), json!(earliest));
    m.insert(
        "consent".into(),
        json!({"ad_user_data": grant(h.consent.0), "ad_personalization": grant(h.consent.1)}),
    );
    if let Some(u) = h.user_data {
        m.insert("user_data".into(), u);
    }
    m.insert(
        "events".into(),
        Value::Array(
            idx.iter()
                .map(|&k| event_json(&events[k], now_ms))
                .collect(),
        ),
    );
    Value::Object(m)
}

/// When a conversion happened, in microseconds; a time ahead of the send (a backend's clock) as
/// the send's, GA4 taking no events from the future.
fn micros(f: &Facts, now_ms: i64) -> i64 {
    f.occurred_at.min(now_ms) * 1_000
}

/// One conversion as an element of `events`.
fn event_json(e: &Event<'_>, now_ms: i64) -> Value {
    let f = e.facts;
    let mut p = Map::new();
    p.insert("transaction_id".into(), json!(dedup_key(f)));
    if let Some(v) = f.value.as_deref().and_then(decimal) {
        p.insert("value".into(), Value::Number(v));
    }
    if !f.currency.is_empty() {
        p.insert("currency".into(), json!(f.currency));
    }
    if let Some(sid) =
        ga_session(f).and_then(|s| session_id(s.forwarding.ga_session_id.as_deref()?))
    {
        p.insert("session_id".into(), json!(sid));
    }
    p.insert("engagement_time_msec".into(), json!(ENGAGEMENT_TIME_MSEC));
    json!({
        "name": e.name,
        "timestamp_micros": micros(f, now_ms),
        "params": Value::Object(p),
    })
}

/// The session whose `_ga` cookies identify the browser: the conversion's own, else the credited
/// one, whichever has a client id.
fn ga_session(f: &Facts) -> Option<&SessionFacts> {
    [f.session.as_ref(), f.attributed.as_ref()]
        .into_iter()
        .flatten()
        .find(|s| {
            s.forwarding
                .ga_client_id
                .as_deref()
                .and_then(cookie_client_id)
                .is_some()
        })
}

/// GA4's `client_id`: the `_ga` cookie's (as the pixel read it); without one, a stable one made
/// from convapi's visitor id: the first eight bytes of its SHA-256 as two 32-bit numbers,
/// `"<n>.<m>"`, the shape of the cookie's id.
pub fn client_id(f: &Facts) -> String {
    if let Some(id) =
        ga_session(f).and_then(|s| cookie_client_id(s.forwarding.ga_client_id.as_deref()?))
    {
        return id;
    }
    let h = sha256_hex(&f.visitor_id);
    let n = u32::from_str_radix(&h[0..8], 16).unwrap_or(0);
    let m = u32::from_str_radix(&h[8..16], 16).unwrap_or(0);
    format!("{n}.{m}")
}

/// The client id of a `_ga` cookie: `GA1.1.123.456` (the cookie as set) or `123.456` (its id).
pub fn cookie_client_id(v: &str) -> Option<String> {
    let v = v.trim();
    let parts: Vec<&str> = v.split('.').collect();
    let id = match parts.as_slice() {
        [ga, _, a, b] if ga.starts_with("GA") => format!("{a}.{b}"),
        [_, _] => v.to_string(),
        _ => return None,
    };
    id.split('.')
        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        .then_some(id)
}

/// The session id of a `_ga_<container>` cookie, a number (the session's start in seconds, as
/// gtag.js sends it): `1700000000` as it is, `GS1.1.1700000000.3.1…` (the older cookie) or
/// `GS2.1.s1700000000$o3$g1…` (the newer).
pub fn session_id(v: &str) -> Option<u64> {
    let v = v.trim();
    if let Ok(n) = v.parse::<u64>() {
        return Some(n);
    }
    let third = v.split('.').nth(2)?;
    if v.starts_with("GS1.") {
        return third.parse().ok();
    }
    if v.starts_with("GS2.") {
        let s = v.splitn(3, '.').nth(2)?;
        return s
            .split('$')
            .find_map(|p| p.strip_prefix('s'))
            .and_then(|n| n.parse().ok());
    }
    None
}
