//! `POST /api/collect` (pixel batches) and its CORS preflight. Public: the tracker id is not a secret.

use serde_json::{json, Map, Value};

use super::validate;
use super::{ApiError, App};
use crate::http::{Ctx, Reply};
use crate::store::{self, StoreError};
use crate::tracking::{Batch, Event, EventKind};

/// Largest accepted batch body.
pub const BODY_LIMIT: usize = 256 * 1024;
/// Most events in one batch.
pub const MAX_EVENTS: usize = 100;
/// Longest URL or referrer kept, in characters.
const MAX_URL_CHARS: usize = 4096;
/// Longest custom event name.
const MAX_NAME_CHARS: usize = 128;
/// Largest `ts` accepted: the largest integer a JSON number holds exactly (2^53 - 1).
const MAX_TS: i64 = (1 << 53) - 1;
const TS_RULE: &str = "ts must be epoch milliseconds (a non-negative integer)";
/// Largest serialised `props` of a custom event.
const MAX_PROPS_BYTES: usize = 4096;

/// The CORS preflight; the CORS headers every answer of this route carries are added by the route
/// table (`routes::Route::cors`).
pub fn preflight() -> Reply {
    Reply::bytes(204, "text/plain", Vec::new())
        .header("Access-Control-Allow-Methods", "POST, OPTIONS")
        .header("Access-Control-Allow-Headers", "Content-Type")
        .header("Access-Control-Max-Age", "86400")
}

pub fn collect(app: &App, ctx: &mut Ctx) -> Result<Reply, ApiError> {
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
    let events = parse_events(&obj, now)?;
    let site = {
        let conn = app.pool.get().map_err(StoreError::from)?;
        store::sites::by_tracker(&conn, &tracker_id)?.ok_or(ApiError::SiteNotFound)?
    };
    let accepted = events.len();
    let batch = Batch {
        site_id: site.id,
        visitor_id: visitor_id.clone(),
        events,
        received_at: now,
    };
    let outcome = app
        .writer
        .submit(move |c| crate::tracking::apply(c, &batch))
        .inspect_err(|e| {
            if matches!(e, crate::writer::WriteError::Unavailable(_)) {
                app.metrics.inc_unavailable();
            }
        })?;
    for _ in 0..outcome.conversions_created {
        app.metrics.inc_accepted();
    }
    for _ in 0..outcome.conversions_repeated {
        app.metrics.inc_deduplicated();
    }
    if outcome.conversions_created > 0 {
        app.pipeline.wake();
    }
    Ok(Reply::json(
        200,
        &json!({"visitorId": visitor_id, "sessionId": outcome.session_id, "accepted": accepted}),
    ))
}

fn parse_events(obj: &Map<String, Value>, now_ms: i64) -> Result<Vec<Event>, ApiError> {
    let list = match validate::field(obj, "events") {
        Some(Value::Array(a)) if !a.is_empty() && a.len() <= MAX_EVENTS => a,
        _ => {
            return Err(ApiError::validation(
                "events",
                format!("events must be an array of 1 to {MAX_EVENTS} events"),
            ))
        }
    };
    list.iter()
        .enumerate()
        .map(|(i, v)| {
            parse_event(v, i, now_ms).map_err(|e| match e {
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

fn parse_event(v: &Value, i: usize, now_ms: i64) -> Result<Event, ApiError> {
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
                (t as i64).min(now_ms)
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
        },
        "purchase" => EventKind::Purchase {
            order_id: validate::opt_string(ev, "orderId", &p("orderId"), validate::MAX_ID_CHARS)?
                .ok_or_else(|| {
                ApiError::validation(p("orderId"), "a purchase needs an orderId")
            })?,
            value: validate::value(ev, &p("value"))?,
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
