//! An order's ledger from the command line and the dashboard (docs/decisions/api.md,
//! "Adjustments"): a refund, cancel or restate given as text ([`adjust`]), checked with the API's
//! rules and words, then decided by `store::adjustments::record` exactly as the API's are; and an
//! order with its ledger ([`show`]).

use std::str::FromStr;

use rust_decimal::Decimal;

use super::op_error;
use crate::ledger::{self, Kind, Refusal};
use crate::store::adjustments::{Adjustment, Answer, NewAdjustment, Recorded};
use crate::store::conversions::OrderStatus;
use crate::store::deliveries::View;
use crate::store::{self, engine::AsConn, StoreError};

/// Longest `adjustmentId`, in characters (the API's identifiers' limit).
pub const MAX_ADJUSTMENT_ID_CHARS: usize = 256;
/// Largest `value` (the API's number rule).
pub const MAX_VALUE: i64 = 1_000_000_000_000;
/// How far in the future `occurredAt` may lie (the API's rule).
pub const MAX_FUTURE_MS: i64 = 5 * 60 * 1000;

/// Why an adjustment or a lookup is refused; [`OrderError::code`] is the API's code for it.
#[derive(Debug)]
pub enum OrderError {
    /// No site with this id.
    NoSite(String),
    /// A field breaks its rule: `(field, message)` in the API's words.
    Invalid(&'static str, String),
    OrderNotFound,
    Conflict,
    Refused(Refusal),
    Store(StoreError),
}
op_error!(OrderError);

impl OrderError {
    /// The API's error code for the same refusal.
    pub fn code(&self) -> &'static str {
        match self {
            OrderError::NoSite(_) => "SITE_NOT_FOUND",
            OrderError::Invalid(..) => "VALIDATION_ERROR",
            OrderError::OrderNotFound => "ORDER_NOT_FOUND",
            OrderError::Conflict => "ADJUSTMENT_CONFLICT",
            OrderError::Refused(Refusal::OrderCancelled) => "ORDER_CANCELLED",
            OrderError::Refused(Refusal::ExceedsOrderValue) => "EXCEEDS_ORDER_VALUE",
            OrderError::Store(_) => "INTERNAL",
        }
    }
}

impl std::fmt::Display for OrderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OrderError::NoSite(id) => write!(f, "no such site: {id:?}"),
            OrderError::Invalid(field, message) => write!(f, "{field}: {message}"),
            OrderError::OrderNotFound => f.write_str(ledger::ORDER_NOT_FOUND),
            OrderError::Conflict => f.write_str(ledger::CONFLICT),
            OrderError::Refused(r) => f.write_str(r.message()),
            OrderError::Store(e) => write!(f, "{e}"),
        }
    }
}

/// An adjustment as text, the way the command line and a form give it.
#[derive(Debug, Clone)]
pub struct AdjustInput {
    pub site_id: String,
    pub order_id: String,
    pub adjustment_id: String,
    /// `refund`, `cancel` or `restate`.
    pub kind: String,
    pub value: Option<String>,
    /// RFC 3339 with an offset; `None`: now.
    pub occurred_at: Option<String>,
    pub reason: Option<String>,
}

fn invalid(field: &'static str, message: impl Into<String>) -> OrderError {
    OrderError::Invalid(field, message.into())
}

/// The input's fields by the API's rules, in the API's order.
fn checked(i: &AdjustInput, site_id: String, now_ms: i64) -> Result<NewAdjustment, OrderError> {
    let n = i.adjustment_id.chars().count();
    if n == 0 {
        return Err(invalid("adjustmentId", "adjustmentId must not be empty"));
    }
    if n > MAX_ADJUSTMENT_ID_CHARS {
        return Err(invalid(
            "adjustmentId",
            format!("adjustmentId must be at most {MAX_ADJUSTMENT_ID_CHARS} characters"),
        ));
    }
    let kind = Kind::parse(&i.kind)
        .ok_or_else(|| invalid("type", "type must be refund, cancel or restate"))?;
    let value = match &i.value {
        None => None,
        Some(text) => {
            let v = Decimal::from_str(text.trim())
                .ok()
                .filter(|v| *v >= Decimal::ZERO && *v <= Decimal::from(MAX_VALUE))
                .ok_or_else(|| invalid("value", "value must be a number between 0 and 1e12"))?;
            Some(v)
        }
    };
    ledger::value_rule(kind, value).map_err(|why| invalid("value", why))?;
    let occurred_at = match &i.occurred_at {
        None => None,
        Some(s) => {
            let t = chrono::DateTime::parse_from_rfc3339(s.trim())
                .map_err(|_| {
                    invalid(
                        "occurredAt",
                        "occurredAt must be an ISO 8601 timestamp with an offset, e.g. 2026-11-22T10:00:00Z",
                    )
                })?
                .timestamp_millis();
            if t > now_ms + MAX_FUTURE_MS {
                return Err(invalid(
                    "occurredAt",
                    "occurredAt must not be more than 5 minutes in the future",
                ));
            }
            Some(t)
        }
    };
    if let Some(r) = &i.reason {
        if r.chars().count() > ledger::MAX_REASON_CHARS {
            return Err(invalid(
                "reason",
                format!(
                    "reason must be a string of at most {} characters",
                    ledger::MAX_REASON_CHARS
                ),
            ));
        }
    }
    Ok(NewAdjustment {
        site_id,
        order_id: i.order_id.clone(),
        adjustment_id: i.adjustment_id.clone(),
        kind,
        value,
        currency: None,
        occurred_at,
        reason: i.reason.clone(),
    })
}

/// The site `id`; any refusal but the store's is "no such site".
fn site(conn: &impl AsConn, id: &str) -> Result<crate::store::sites::Site, OrderError> {
    match super::sites::find(conn, id) {
        Ok(site) => Ok(site),
        Err(super::sites::SiteError::Store(e)) => Err(OrderError::Store(e)),
        Err(_) => Err(OrderError::NoSite(id.to_owned())),
    }
}

/// Records an adjustment of an order on the connection's write transaction: the same decision,
/// refusals and first answer as the API's. Nothing is written unless it is accepted.
pub fn adjust(conn: &impl AsConn, i: &AdjustInput, now_ms: i64) -> Result<Answer, OrderError> {
    let a = checked(i, site(conn, &i.site_id)?.id, now_ms)?;
    match store::adjustments::record(conn, &a, now_ms)? {
        Recorded::Accepted(answer) | Recorded::Repeat(answer) => Ok(answer),
        Recorded::OrderNotFound => Err(OrderError::OrderNotFound),
        Recorded::Invalid(field, message) => Err(OrderError::Invalid(field, message)),
        Recorded::Conflict => Err(OrderError::Conflict),
        Recorded::Refused(r) => Err(OrderError::Refused(r)),
    }
}

/// An order with its deliveries and its ledger, as the status lookup shows it.
#[derive(Debug, Clone)]
pub struct Order {
    pub status: OrderStatus,
    pub deliveries: Vec<View>,
    pub adjustments: Vec<Adjustment>,
    /// The deliveries of its adjustments, by the adjustment's row id ([`Adjustment::arrival`]).
    pub adjustment_deliveries: Vec<(i64, View)>,
}

/// The order `order_id` of site `site_id` (read in the caller's transaction).
pub fn show(conn: &impl AsConn, site_id: &str, order_id: &str) -> Result<Order, OrderError> {
    let site = site(conn, site_id)?;
    let status = store::conversions::order_status(conn, &site.id, order_id)?
        .ok_or(OrderError::OrderNotFound)?;
    let deliveries = store::deliveries::of_conversion(conn, &status.conversion.id)?;
    let adjustments = store::adjustments::of_conversion(conn, &status.conversion.id)?;
    let adjustment_deliveries =
        store::adjustment_deliveries::of_conversion(conn, &status.conversion.id)?;
    Ok(Order {
        status,
        deliveries,
        adjustments,
        adjustment_deliveries,
    })
}
