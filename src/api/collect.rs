//! `POST /api/collect` (pixel batches) and its CORS preflight. Public and anonymous: the tracker id
//! is not a secret, so everything a batch carries is treated as an attacker's (docs/decisions.md
//! §4, §8). Batches are rate-limited per client address and per tracker, bounded in size, count,
//! value and age, and never decide what an authenticated report says. What a batch may keep
//! depends on the visitor's consent (docs/decisions.md §13): its `consent` object, else the site's
//! default; the ad platforms' cookies it carries are checked and a malformed one is dropped.

use crate::store::engine::AsConn;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::validate;
use super::{ApiError, App};
use crate::http::{Ctx, Reply};
use crate::ratelimit::{self, Limiter, Rate};
use crate::store;
use crate::store::conversions::Source;
use crate::store::sessions::Forwarding;
use crate::tracking::{Batch, Cookieless, Event, EventKind, Privacy};

/// Largest accepted batch body.
pub const BODY_LIMIT: usize = 256 * 1024;
/// Most events in one batch.
pub const MAX_EVENTS: usize = 100;
/// Most purchases in one batch: a real page reports the one order it confirms.
pub const MAX_PURCHASES: usize = 10;
/// Largest `value` of a pixel purchase (the authenticated API takes up to 1e12).
pub const MAX_PIXEL_VALUE: f64 = 1e9;
/// Longest URL or referrer kept, in characters.
const MAX_URL_CHARS: usize = 2048;
/// Longest custom event name.
const MAX_NAME_CHARS: usize = 128;
/// Largest `ts` accepted: the largest integer a JSON number holds exactly (2^53 - 1).
const MAX_TS: i64 = (1 << 53) - 1;
const TS_RULE: &str = "ts must be epoch milliseconds (a non-negative integer)";
/// Longest `signature` of an identify (an HMAC-SHA256 in hex is 64).
const MAX_SIGNATURE_CHARS: usize = 128;
/// Largest serialised `props` of a custom event.
const MAX_PROPS_BYTES: usize = 4096;
/// Longest `_fbp`, `_fbc`, `_ga` or `_ga_<container>` value kept; a longer one is dropped.
pub const MAX_COOKIE_CHARS: usize = 512;
/// Most members of a batch's `cookies`; a batch with more keeps none of them.
pub const MAX_COOKIES: usize = 16;
/// Longest user agent kept for forwarding (a longer one still counts a cookieless visitor).
pub const MAX_USER_AGENT_CHARS: usize = 512;

/// How the pixel endpoint guards itself: `serve`'s options (defaults in `cli.rs`).
#[derive(Debug, Clone)]
pub struct PixelPolicy {
    /// Events per second (and burst) one client address may send.
    pub per_address: Rate,
    /// Events per second (and burst) one tracker (site) may receive, from all addresses together.
    pub per_tracker: Rate,
    /// Oldest `ts` kept as sent, before the time of receipt; older ones are clamped to it.
    pub max_event_age: Duration,
}

/// A [`PixelPolicy`] with its buckets.
pub struct PixelGuard {
    pub policy: PixelPolicy,
    by_address: Limiter<IpAddr, Rate>,
    by_tracker: Limiter<String, Rate>,
    /// `(day, salt)` of the last cookieless batch: the stored salt of a day never changes, so
    /// the day's later batches need not read it again (`store::salts`).
    salt: Mutex<Option<(i64, String)>>,
}

impl PixelGuard {
    pub fn new(policy: PixelPolicy) -> PixelGuard {
        PixelGuard {
            by_address: Limiter::new(policy.per_address),
            by_tracker: Limiter::new(policy.per_tracker),
            policy,
            salt: Mutex::new(None),
        }
    }
}

/// The CORS preflight; the CORS headers every answer of this route carries are added by the route
/// table (`routes::Route::cors`).
pub fn preflight() -> Reply {
    Reply::bytes(204, "text/plain", Vec::new())
        .header("Access-Control-Allow-Methods", "POST, OPTIONS")
        .header("Access-Control-Allow-Headers", "Content-Type")
        .header("Access-Control-Max-Age", "86400")
}

/// `POST /api/collect`: the address's tokens, the body's checks, both buckets charged, the site,
/// the pixel's budget, then the batch applied through the writer as the consent allows.
pub fn collect(app: &App, ctx: &mut Ctx) -> Result<Reply, ApiError> {
    let guard = &app.pixel;
    let client = ctx.client.map(ratelimit::address_key);
    // An address with no token left is refused before its body is read.
    if let Some(client) = &client {
        guard
            .by_address
            .peek(client, 1.0, Instant::now())
            .map_err(|wait| limited(app, wait))?;
    }
    let body = ctx.body(BODY_LIMIT)?;
    if !validate::media_type_is(
        ctx.header("Content-Type"),
        &["application/json", "text/plain"],
    ) {
        return Err(ApiError::UnsupportedMediaType(
            "application/json or text/plain",
        ));
    }
    let obj = validate::json_object(&body)?;
    let tracker_id = tracker_id_of(&obj)?;
    // Ignored without analytics consent (`tracking::cookieless_visitor`), still checked.
    let visitor_id = validate::opt_string(&obj, "visitorId", "visitorId", validate::MAX_ID_CHARS)?
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let now = store::now_ms();
    let oldest = now.saturating_sub(guard.policy.max_event_age.as_millis() as i64);
    let events = parse_events(&obj, now, oldest)?;
    let stated = stated_consent(&obj);
    let cookies = ad_cookies(&obj);
    charge(app, client.as_ref(), &tracker_id, events.len())?;
    let site = {
        let conn = app.pool.get()?;
        match store::sites::by_tracker(&conn, &tracker_id)? {
            Some(site) => site,
            None => return Err(unknown_tracker(&conn, &tracker_id)?),
        }
    };
    let accepted = events.len();
    // Pixel work has its own budget (docs/decisions.md §8): a batch with a purchase is refused
    // while the pixel's outbox backlog is at its limit, and pixel batches hold at most a quarter
    // of the writer's channel, so a flood of them never makes the API answer 503.
    if events
        .iter()
        .any(|e| matches!(e.kind, EventKind::Purchase { .. }))
    {
        app.writer
            .admit_outbox_work(Source::Pixel)
            .inspect_err(|_| app.metrics.inc_unavailable())?;
    }
    let privacy = privacy(ctx, guard, site.consent_required, stated, cookies);
    let batch = Batch {
        site_id: site.id,
        visitor_id,
        events,
        received_at: now,
    };
    let outcome = app
        .writer
        .submit_pixel(move |c| crate::tracking::apply_with(c, &batch, &privacy))
        .inspect_err(|e| super::count_unavailable(app, e))?;
    count(app, guard, &outcome);
    // A cookieless visitor's answer has no visitor id to keep; on a site that requires consent
    // the answer says so, and a pixel set up without the option deletes its cookie.
    let mut answer = json!({
        "visitorId": outcome.visitor_id,
        "sessionId": outcome.session_id,
        "accepted": accepted,
    });
    if site.consent_required {
        answer["consent"] = json!("required");
    }
    Ok(Reply::json(200, &answer))
}

/// The batch's `trackerId`: a non-empty string of at most 64 bytes.
fn tracker_id_of(obj: &Map<String, Value>) -> Result<String, ApiError> {
    match validate::field(obj, "trackerId") {
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 64 => Ok(s.clone()),
        _ => Err(ApiError::validation(
            "trackerId",
            "trackerId must be a non-empty string",
        )),
    }
}

/// Each event costs one token of the address's bucket and one of the tracker's.
fn charge(
    app: &App,
    client: Option<&IpAddr>,
    tracker_id: &String,
    events: usize,
) -> Result<(), ApiError> {
    let guard = &app.pixel;
    let cost = events as f64;
    let at = Instant::now();
    if let Some(client) = client {
        guard
            .by_address
            .charge(client, cost, at)
            .map_err(|wait| limited(app, wait))?;
    }
    guard
        .by_tracker
        .take(tracker_id, cost, at)
        .map_err(|wait| limited(app, wait))
}

/// What the batch may keep: an explicit answer wins, without one the site decides
/// (docs/decisions.md §13); without analytics consent the visitor is counted cookieless, with the
/// day's salt when this process knows it already.
fn privacy(
    ctx: &Ctx,
    guard: &PixelGuard,
    consent_required: bool,
    (said_analytics, said_ads): (Option<bool>, Option<bool>),
    cookies: AdCookies,
) -> Privacy {
    let analytics = said_analytics.unwrap_or(!consent_required);
    let ads = said_ads.unwrap_or(!consent_required);
    let address = ctx.client.map(|a| a.to_string());
    let user_agent = ctx.header("User-Agent").map(str::to_owned);
    Privacy {
        no_ads: !ads,
        forwarding: Forwarding {
            consent_analytics: said_analytics,
            consent_ads: said_ads,
            client_ip: address.clone().filter(|_| ads),
            user_agent: user_agent.clone().filter(|ua| ads && user_agent_ok(ua)),
            fbp: cookies.fbp.filter(|_| ads),
            fbc: cookies.fbc.filter(|_| ads),
            ga_client_id: cookies.ga_client_id.filter(|_| analytics),
            ga_session_id: cookies.ga_session_id.filter(|_| analytics),
        },
        cookieless: (!analytics).then(|| Cookieless {
            address: address.unwrap_or_default(),
            user_agent: user_agent.unwrap_or_default(),
            salt: guard.salt.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }),
    }
}

/// A batch applied: the day's salt kept for the next cookieless batch, the counters, and the
/// pipeline woken for new conversions.
fn count(app: &App, guard: &PixelGuard, outcome: &crate::tracking::Outcome) {
    if let Some(salt) = &outcome.salt {
        let mut known = guard.salt.lock().unwrap_or_else(|e| e.into_inner());
        if known.as_ref() != Some(salt) {
            *known = Some(salt.clone());
        }
    }
    for _ in 0..outcome.conversions_created {
        app.metrics.inc_accepted();
    }
    for _ in 0..outcome.conversions_repeated {
        app.metrics.inc_deduplicated();
    }
    app.metrics
        .add_identify_rejected(outcome.identify_rejected as u64);
    app.metrics
        .add_identify_without_consent(outcome.identify_dropped as u64);
    if outcome.conversions_created > 0 {
        app.pipeline.wake();
    }
}

/// The batch's `consent` object: `(analytics, ads)`, each `None` when not stated. A value other
/// than `true`, `false` or `null` (or a `consent` that is not an object) counts as a denial: a
/// broken consent banner must not read as consent.
fn stated_consent(obj: &Map<String, Value>) -> (Option<bool>, Option<bool>) {
    let flag = |m: &Map<String, Value>, name: &str| match validate::field(m, name) {
        None => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => Some(false),
    };
    match validate::field(obj, "consent") {
        None => (None, None),
        Some(Value::Object(m)) => (flag(m, "analytics"), flag(m, "ads")),
        Some(_) => (Some(false), Some(false)),
    }
}

/// What a batch's `cookies` carried, each parsed and checked; a malformed value is `None`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct AdCookies {
    pub fbp: Option<String>,
    pub fbc: Option<String>,
    /// `<a>.<b>` of `_ga` = `GA1.<n>.<a>.<b>`.
    pub ga_client_id: Option<String>,
    /// The session id of the first `_ga_<container>` (in name order) that has one.
    pub ga_session_id: Option<String>,
}

/// The batch's `cookies` object (`{"_fbp": …, "_fbc": …, "_ga": …, "_ga_<container>": …}`), the
/// cookies the pixel read as consent allowed. Anonymous input: anything malformed is dropped, the
/// batch still counts.
pub fn ad_cookies(obj: &Map<String, Value>) -> AdCookies {
    let mut out = AdCookies::default();
    let Some(Value::Object(m)) = validate::field(obj, "cookies") else {
        return out;
    };
    if m.len() > MAX_COOKIES {
        return out;
    }
    for (name, v) in m {
        let Some(v) = v.as_str().filter(|v| v.chars().count() <= MAX_COOKIE_CHARS) else {
            continue;
        };
        match name.as_str() {
            "_fbp" => out.fbp = meta_cookie(v),
            "_fbc" => out.fbc = meta_cookie(v),
            "_ga" => out.ga_client_id = ga_client_id(v),
            n if out.ga_session_id.is_none()
                && n.strip_prefix("_ga_").is_some_and(is_container) =>
            {
                out.ga_session_id = ga_session_id(v);
            }
            _ => {}
        }
    }
    out
}

fn digits(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_digit())
}

/// Meta's `_fbp` (`fb.<subdomain index>.<creation ms>.<random>`) or `_fbc`
/// (`fb.<subdomain index>.<creation ms>.<fbclid>`), as set: both are sent to Meta unmodified.
fn meta_cookie(v: &str) -> Option<String> {
    let mut p = v.splitn(4, '.');
    let ok = p.next() == Some("fb")
        && p.next().is_some_and(|i| digits(i, 1))
        && p.next().is_some_and(|t| digits(t, 16))
        && p.next().is_some_and(|r| {
            !r.is_empty()
                && r.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
        });
    ok.then(|| v.to_owned())
}

/// The client id of a `_ga` cookie: `GA1.<n>.<a>.<b>` → `<a>.<b>`.
fn ga_client_id(v: &str) -> Option<String> {
    let rest = v.strip_prefix("GA1.")?;
    let (n, id) = rest.split_once('.')?;
    let (a, b) = id.split_once('.')?;
    (digits(n, 2) && digits(a, 20) && digits(b, 20)).then(|| id.to_owned())
}

/// The session id of a `_ga_<container>` cookie: `GS1.<n>.<sid>.…` or `GS2.<n>.s<sid>$o…`.
fn ga_session_id(v: &str) -> Option<String> {
    let (version, rest) = v.split_at_checked(4)?;
    let (n, rest) = rest.split_once('.')?;
    if !digits(n, 2) {
        return None;
    }
    let sid = match version {
        "GS1." => rest.split('.').next()?,
        "GS2." => rest.strip_prefix('s')?.split('$').next()?,
        _ => return None,
    };
    digits(sid, 20).then(|| sid.to_owned())
}

/// A GA4 container's part of a cookie name (`_ga_<container>`, the measurement id without `G-`).
fn is_container(c: &str) -> bool {
    !c.is_empty() && c.len() <= 20 && c.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A user agent worth keeping for forwarding: printable, at most [`MAX_USER_AGENT_CHARS`].
fn user_agent_ok(ua: &str) -> bool {
    !ua.is_empty()
        && ua.chars().count() <= MAX_USER_AGENT_CHARS
        && !ua.chars().any(char::is_control)
}

fn limited(app: &App, wait: Duration) -> ApiError {
    app.metrics.inc_rate_limited();
    ApiError::RateLimited(wait)
}

/// The batch's events; each `ts` is clamped to `[oldest, now_ms]`.
fn parse_events(
    obj: &Map<String, Value>,
    now_ms: i64,
    oldest: i64,
) -> Result<Vec<Event>, ApiError> {
    let list = match validate::field(obj, "events") {
        Some(Value::Array(a)) if !a.is_empty() && a.len() <= MAX_EVENTS => a,
        _ => {
            return Err(ApiError::validation(
                "events",
                format!("events must be an array of 1 to {MAX_EVENTS} events"),
            ))
        }
    };
    let mut purchases = 0;
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            let event = parse_event(v, i, now_ms, oldest);
            if let Ok(Event {
                kind: EventKind::Purchase { .. },
                ..
            }) = &event
            {
                purchases += 1;
                if purchases > MAX_PURCHASES {
                    return Err(ApiError::BadEvent {
                        index: i,
                        field: format!("events[{i}]"),
                        message: format!("at most {MAX_PURCHASES} purchases per batch"),
                    });
                }
            }
            event.map_err(|e| match e {
                ApiError::Validation { field, message } => ApiError::BadEvent {
                    index: i,
                    field,
                    message,
                },
                other => other,
            })
        })
        .collect()
}

fn parse_event(v: &Value, i: usize, now_ms: i64, oldest: i64) -> Result<Event, ApiError> {
    let p = |name: &str| format!("events[{i}].{name}");
    let Value::Object(ev) = v else {
        return Err(ApiError::validation(
            format!("events[{i}]"),
            "an event must be a JSON object",
        ));
    };
    let ts = match validate::field(ev, "ts") {
        None => now_ms,
        // JSON has one number type: an integral `1.7e12` or `1763800000000.0` is a valid timestamp.
        Some(Value::Number(n)) => match n.as_f64() {
            Some(t) if t.fract() == 0.0 && (0.0..=MAX_TS as f64).contains(&t) => {
                (t as i64).clamp(oldest.min(now_ms), now_ms)
            }
            _ => return Err(ApiError::validation(p("ts"), TS_RULE)),
        },
        Some(_) => return Err(ApiError::validation(p("ts"), TS_RULE)),
    };
    let kind = match validate::field(ev, "type") {
        Some(Value::String(t)) => t.as_str(),
        _ => {
            return Err(ApiError::validation(
                p("type"),
                "type must be one of pageview, identify, purchase, event",
            ))
        }
    };
    let kind = match kind {
        "pageview" => EventKind::Pageview {
            url: validate::opt_string(ev, "url", &p("url"), MAX_URL_CHARS)?,
            referrer: match validate::field(ev, "referrer") {
                Some(Value::String(s)) if s.is_empty() => None,
                _ => validate::opt_string(ev, "referrer", &p("referrer"), MAX_URL_CHARS)?,
            },
        },
        "identify" => EventKind::Identify {
            user_id: validate::opt_string(ev, "userId", &p("userId"), validate::MAX_ID_CHARS)?
                .ok_or_else(|| ApiError::validation(p("userId"), "identify needs a userId"))?,
            signature: validate::opt_string(ev, "signature", &p("signature"), MAX_SIGNATURE_CHARS)?,
        },
        "purchase" => EventKind::Purchase {
            order_id: validate::opt_string(ev, "orderId", &p("orderId"), validate::MAX_ID_CHARS)?
                .ok_or_else(|| {
                ApiError::validation(p("orderId"), "a purchase needs an orderId")
            })?,
            value: validate::value_at_most(ev, &p("value"), MAX_PIXEL_VALUE)?,
            currency: validate::currency(ev, &p("currency"))?,
        },
        "event" => EventKind::Custom {
            name: validate::opt_string(ev, "name", &p("name"), MAX_NAME_CHARS)?
                .ok_or_else(|| ApiError::validation(p("name"), "a custom event needs a name"))?,
            props: match validate::field(ev, "props") {
                None => None,
                Some(props @ Value::Object(_)) => {
                    let s = props.to_string();
                    if s.len() > MAX_PROPS_BYTES {
                        return Err(ApiError::validation(
                            p("props"),
                            format!("props must be at most {MAX_PROPS_BYTES} bytes"),
                        ));
                    }
                    Some(s)
                }
                Some(_) => return Err(ApiError::validation(p("props"), "props must be an object")),
            },
        },
        _ => {
            return Err(ApiError::validation(
                p("type"),
                "type must be one of pageview, identify, purchase, event",
            ))
        }
    };
    Ok(Event { ts, kind })
}

/// The 404 of an unknown tracker id; when it is a site id (the UUID the API's URLs take), the
/// message says so and names the id the pixel takes.
fn unknown_tracker(conn: &impl AsConn, tracker_id: &str) -> Result<ApiError, ApiError> {
    let is_site_id = match uuid::Uuid::parse_str(tracker_id) {
        Ok(u) => store::sites::by_id(conn, &u.hyphenated().to_string())?.is_some(),
        Err(_) => false,
    };
    Ok(ApiError::SiteNotFound(is_site_id.then(|| {
        format!(
            "trackerId {tracker_id:?} is a site id, which the conversions API takes; the pixel \
             takes the site's tracker id: svc('init', 'TRACKER_ID'), as in the snippet on the \
             dashboard's site overview"
        )
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cookies(v: Value) -> AdCookies {
        ad_cookies(v.as_object().unwrap())
    }

    #[test]
    fn ad_platform_cookies_are_parsed_and_malformed_ones_dropped() {
        let c = cookies(json!({"cookies": {
            "_fbp": "fb.1.1700000000000.1234567890",
            "_fbc": "fb.1.1700000000001.IwAR2x_-y.AbCd",
            "_ga": "GA1.1.1234567890.1700000000",
            "_ga_ABC123": "GS2.1.s1700000001$o3$g1$t1700000100$j60$l0$h0",
            "other": "x",
        }}));
        assert_eq!(
            c,
            AdCookies {
                fbp: Some("fb.1.1700000000000.1234567890".into()),
                fbc: Some("fb.1.1700000000001.IwAR2x_-y.AbCd".into()),
                ga_client_id: Some("1234567890.1700000000".into()),
                ga_session_id: Some("1700000001".into()),
            }
        );
        let old = cookies(json!({"cookies": {
            "_ga": "GA1.2.99.88",
            "_ga_X1": "GS1.1.1700000002.4.1.1700000050.0.0.0",
        }}));
        assert_eq!(old.ga_client_id.as_deref(), Some("99.88"));
        assert_eq!(old.ga_session_id.as_deref(), Some("1700000002"));
        for bad in [
            json!({"cookies": {"_fbp": "fb.1.x.1", "_fbc": "fb.12.1.a", "_ga": "GA1.1.1", "_ga_X": "GS2.1.1700"}}),
            json!({"cookies": {"_fbp": "fbp.1.1.1", "_fbc": "fb.1.1.a b", "_ga": "GA2.1.1.2", "_ga_X": "GS3.1.s1"}}),
            json!({"cookies": {"_fbp": 1, "_fbc": ["fb.1.1.a"], "_ga": "GA1.1.1.2x", "_ga_X-Y": "GS2.1.s1"}}),
            json!({"cookies": {"_fbc": format!("fb.1.1.{}", "a".repeat(MAX_COOKIE_CHARS))}}),
            json!({"cookies": "fb.1.1.1"}),
            json!({"cookies": (0..=MAX_COOKIES).map(|i| (format!("_ga_{i}"), json!("GS2.1.s1"))).collect::<Map<_, _>>()}),
        ] {
            assert_eq!(cookies(bad.clone()), AdCookies::default(), "{bad}");
        }
    }

    #[test]
    fn stated_consent_reads_booleans_and_anything_else_as_a_denial() {
        let c = |v: Value| stated_consent(v.as_object().unwrap());
        assert_eq!(c(json!({})), (None, None));
        assert_eq!(c(json!({"consent": {}})), (None, None));
        assert_eq!(
            c(json!({"consent": {"analytics": true, "ads": null}})),
            (Some(true), None)
        );
        assert_eq!(c(json!({"consent": {"ads": false}})), (None, Some(false)));
        assert_eq!(
            c(json!({"consent": {"analytics": "yes", "ads": 1}})),
            (Some(false), Some(false))
        );
        assert_eq!(c(json!({"consent": "granted"})), (Some(false), Some(false)));
        assert!(!user_agent_ok(&"a".repeat(MAX_USER_AGENT_CHARS + 1)));
        assert!(!user_agent_ok("a\u{7}b"));
        assert!(user_agent_ok("Mozilla/5.0 (X11; Linux x86_64)"));
    }
}
