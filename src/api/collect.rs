//! `POST /api/collect` (pixel batches) and its CORS preflight. Public and anonymous: the tracker id
//! is not a secret, so everything a batch carries is treated as an attacker's (docs/decisions.md
//! §4, §8). Batches are rate-limited per client address and per tracker, bounded in size, count,
//! value and age, and never decide what an authenticated report says.

use crate::store::db::AsConn;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::validate;
use super::{ApiError, App};
use crate::http::{Ctx, Reply};
use crate::ratelimit::{self, Limiter, Rate};
use crate::store;
use crate::store::conversions::Source;
use crate::tracking::{Batch, Event, EventKind};

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
}

impl PixelGuard {
    pub fn new(policy: PixelPolicy) -> PixelGuard {
        PixelGuard {
            by_address: Limiter::new(policy.per_address),
            by_tracker: Limiter::new(policy.per_tracker),
            policy,
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
    let tracker_id = match validate::field(&obj, "trackerId") {
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 64 => s.clone(),
        _ => {
            return Err(ApiError::validation(
                "trackerId",
                "trackerId must be a non-empty string",
            ))
        }
    };
    let visitor_id = validate::opt_string(&obj, "visitorId", "visitorId", validate::MAX_ID_CHARS)?
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let now = store::now_ms();
    let oldest = now.saturating_sub(guard.policy.max_event_age.as_millis() as i64);
    let events = parse_events(&obj, now, oldest)?;
    // Each event costs one token of the address's bucket and one of the tracker's.
    let cost = events.len() as f64;
    let at = Instant::now();
    if let Some(client) = &client {
        guard
            .by_address
            .charge(client, cost, at)
            .map_err(|wait| limited(app, wait))?;
    }
    guard
        .by_tracker
        .take(&tracker_id, cost, at)
        .map_err(|wait| limited(app, wait))?;
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
    let batch = Batch {
        site_id: site.id,
        visitor_id: visitor_id.clone(),
        events,
        received_at: now,
    };
    let outcome = app
        .writer
        .submit_pixel(move |c| crate::tracking::apply(c, &batch))
        .inspect_err(|e| super::count_unavailable(app, e))?;
    for _ in 0..outcome.conversions_created {
        app.metrics.inc_accepted();
    }
    for _ in 0..outcome.conversions_repeated {
        app.metrics.inc_deduplicated();
    }
    app.metrics
        .add_identify_rejected(outcome.identify_rejected as u64);
    if outcome.conversions_created > 0 {
        app.pipeline.wake();
    }
    Ok(Reply::json(
        200,
        &json!({"visitorId": visitor_id, "sessionId": outcome.session_id, "accepted": accepted}),
    ))
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
