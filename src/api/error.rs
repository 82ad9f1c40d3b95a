//! `ApiError`: every failure a request can end in, with its one status, code and JSON body.
//! The only place that turns an error into a response body: handlers return it through the route
//! table ([`super::routes`]), [`super::Api`]'s `handle` renders it once, and the HTTP front's own
//! refusals (head or body too large, a panic) reach it through `Api`'s `refusal` and `refused`.

use serde_json::json;

use crate::http::{BodyError, Refusal, Reply};
use crate::store::StoreError;
use crate::writer::WriteError;

#[derive(Debug)]
pub enum ApiError {
    Unauthorized,
    /// A 401 whose cause is plain from the request: the message names the fix.
    UnauthorizedBecause(&'static str),
    /// No such site; a message that names the fix when the id given looks like the other kind
    /// of site identifier (a tracker id for a site id, or the reverse).
    SiteNotFound(Option<String>),
    Forbidden,
    OrderNotFound,
    /// No webhook source with this id (`POST /hooks/{sourceId}`).
    SourceNotFound,
    /// A webhook's signature did not hold: why, naming the fix.
    BadSignature(String),
    NotFound,
    MethodNotAllowed(&'static str),
    PayloadTooLarge(usize),
    HeadersTooLarge,
    UnsupportedMediaType(&'static str),
    InvalidJson(String),
    /// A field is missing or invalid: `field` names it (e.g. `value`, `events[3].userId`).
    Validation {
        field: String,
        message: String,
    },
    /// A pixel batch's event `index` is invalid; `field` names the member (e.g. `events[3].userId`).
    BadEvent {
        index: usize,
        field: String,
        message: String,
    },
    NoSession,
    /// The adjustmentId was used before with another type, value or currency.
    AdjustmentConflict,
    /// The order's ledger holds a cancel: no new adjustment.
    OrderCancelled,
    /// The adjustment would make the order's net value negative at some point.
    ExceedsOrderValue,
    /// The pixel endpoint's rate limit; retry after the given time.
    RateLimited(std::time::Duration),
    /// The write path cannot take the request now; retry after the given seconds.
    QueueUnavailable(String),
    /// The database cannot answer (health check).
    Unhealthy,
    /// A bug or a broken file; the detail goes to the log, never to the client.
    Internal(String),
}

impl ApiError {
    pub fn validation(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::Validation {
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            ApiError::Unauthorized
            | ApiError::UnauthorizedBecause(_)
            | ApiError::BadSignature(_) => 401,
            ApiError::SiteNotFound(_)
            | ApiError::OrderNotFound
            | ApiError::SourceNotFound
            | ApiError::NotFound => 404,
            ApiError::Forbidden => 403,
            ApiError::MethodNotAllowed(_) => 405,
            ApiError::PayloadTooLarge(_) => 413,
            ApiError::HeadersTooLarge => 431,
            ApiError::UnsupportedMediaType(_) => 415,
            ApiError::InvalidJson(_) | ApiError::Validation { .. } | ApiError::BadEvent { .. } => {
                400
            }
            ApiError::AdjustmentConflict => 409,
            ApiError::NoSession | ApiError::OrderCancelled | ApiError::ExceedsOrderValue => 422,
            ApiError::RateLimited(_) => 429,
            ApiError::QueueUnavailable(_) | ApiError::Unhealthy => 503,
            ApiError::Internal(_) => 500,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Unauthorized | ApiError::UnauthorizedBecause(_) => "UNAUTHORIZED",
            ApiError::SiteNotFound(_) => "SITE_NOT_FOUND",
            ApiError::Forbidden => "FORBIDDEN",
            ApiError::OrderNotFound => "ORDER_NOT_FOUND",
            ApiError::SourceNotFound => "SOURCE_NOT_FOUND",
            ApiError::BadSignature(_) => "BAD_SIGNATURE",
            ApiError::NotFound => "NOT_FOUND",
            ApiError::MethodNotAllowed(_) => "METHOD_NOT_ALLOWED",
            ApiError::PayloadTooLarge(_) => "PAYLOAD_TOO_LARGE",
            ApiError::HeadersTooLarge => "REQUEST_HEADER_FIELDS_TOO_LARGE",
            ApiError::UnsupportedMediaType(_) => "UNSUPPORTED_MEDIA_TYPE",
            ApiError::InvalidJson(_) => "INVALID_JSON",
            ApiError::Validation { .. } | ApiError::BadEvent { .. } => "VALIDATION_ERROR",
            ApiError::NoSession => "NO_SESSION",
            ApiError::AdjustmentConflict => "ADJUSTMENT_CONFLICT",
            ApiError::OrderCancelled => "ORDER_CANCELLED",
            ApiError::ExceedsOrderValue => "EXCEEDS_ORDER_VALUE",
            ApiError::RateLimited(_) => "RATE_LIMITED",
            ApiError::QueueUnavailable(_) => "QUEUE_UNAVAILABLE",
            ApiError::Unhealthy => "UNAVAILABLE",
            ApiError::Internal(_) => "INTERNAL",
        }
    }

    fn message(&self) -> String {
        match self {
            ApiError::Unauthorized => "missing, unknown or revoked API key".into(),
            ApiError::UnauthorizedBecause(why) => (*why).into(),
            ApiError::SiteNotFound(None) => "no such site".into(),
            ApiError::SiteNotFound(Some(why)) => format!("no such site: {why}"),
            ApiError::Forbidden => "the site does not belong to the tenant of this API key".into(),
            ApiError::OrderNotFound => crate::ledger::ORDER_NOT_FOUND.into(),
            ApiError::SourceNotFound => "no such source: the address is not (or no longer) a webhook source of a site; convapi source list --site SITE_ID shows the addresses".into(),
            ApiError::BadSignature(why) => why.clone(),
            ApiError::NotFound => "no such resource".into(),
            ApiError::MethodNotAllowed(allow) => format!("method not allowed; allowed: {allow}"),
            ApiError::PayloadTooLarge(limit) => format!("request body exceeds {limit} bytes"),
            ApiError::HeadersTooLarge => "request headers too large".into(),
            ApiError::UnsupportedMediaType(want) => format!("Content-Type must be {want}"),
            ApiError::InvalidJson(detail) => format!("body is not a valid JSON object: {detail}"),
            ApiError::Validation { message, .. } => message.clone(),
            ApiError::BadEvent { index, message, .. } => format!("event {index}: {message}"),
            ApiError::NoSession => "no session found for the given identifiers within the site's \
                                    attribution window: the pixel has not seen a visit of this customer \
                                    (or not yet). Send the visitorId the pixel exposes on the page \
                                    (svc('visitorId')) or the clientId it identified, retry once after \
                                    1 to 2 minutes for a fresh order, or keep such orders as unattributed \
                                    with `convapi site update SITE_ID --keep-unattributed true`"
                .into(),
            ApiError::AdjustmentConflict => crate::ledger::CONFLICT.into(),
            ApiError::OrderCancelled => crate::ledger::Refusal::OrderCancelled.message().into(),
            ApiError::ExceedsOrderValue => crate::ledger::Refusal::ExceedsOrderValue.message().into(),
            ApiError::RateLimited(_) => "too many requests; retry after the time in Retry-After".into(),
            ApiError::QueueUnavailable(_) => "conversion queue unavailable; retry with exponential backoff".into(),
            ApiError::Unhealthy => "database unavailable".into(),
            ApiError::Internal(_) => "internal error".into(),
        }
    }

    /// The error's JSON body (a batch's item answer is built on it).
    pub fn body(&self) -> serde_json::Value {
        let mut body = json!({"error": self.message(), "code": self.code()});
        match self {
            ApiError::Validation { field, .. } => body["field"] = json!(field),
            ApiError::BadEvent { index, field, .. } => {
                body["field"] = json!(field);
                body["index"] = json!(index);
            }
            _ => {}
        }
        body
    }

    /// The response for this error. Server-side detail is logged by the caller with the request id.
    pub fn to_reply(&self) -> Reply {
        let mut reply = Reply::json(self.status(), &self.body());
        match self {
            ApiError::MethodNotAllowed(allow) => reply = reply.header("Allow", allow),
            ApiError::QueueUnavailable(_) | ApiError::Unhealthy => {
                reply = reply.header("Retry-After", "1")
            }
            ApiError::RateLimited(wait) => {
                let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
                reply = reply.header("Retry-After", &secs.to_string())
            }
            _ => {}
        }
        reply
    }

    /// Detail worth a log line (5xx only).
    pub fn detail(&self) -> Option<&str> {
        match self {
            ApiError::QueueUnavailable(d) | ApiError::Internal(d) => Some(d),
            _ => None,
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        if e.is_transient() {
            ApiError::QueueUnavailable(e.to_string())
        } else {
            ApiError::Internal(e.to_string())
        }
    }
}

impl From<BodyError> for ApiError {
    fn from(e: BodyError) -> Self {
        match e {
            BodyError::TooLarge(limit) => ApiError::PayloadTooLarge(limit),
            BodyError::Unreadable(detail) => {
                ApiError::InvalidJson(format!("cannot read body: {detail}"))
            }
        }
    }
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::HeadTooLarge => ApiError::HeadersTooLarge,
            Refusal::BodyTooLarge(limit) => ApiError::PayloadTooLarge(limit),
            Refusal::Panicked(msg) => ApiError::Internal(msg),
        }
    }
}

impl From<WriteError> for ApiError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::Unavailable(m) => ApiError::QueueUnavailable(m),
            WriteError::Failed(e) => ApiError::from(e),
        }
    }
}
