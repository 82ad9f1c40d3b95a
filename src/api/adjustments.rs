//! `POST /api/sites/{siteId}/conversions/{orderId}/adjustments`: a refund, cancel or restate in
//! an order's ledger (docs/decisions/api.md, "Adjustments").
//!
//! Checks 1 to 6 are the conversions endpoint's (`conversions::read_body`); the fields are
//! checked here on the request thread; everything that depends on the order and its ledger is
//! decided in the writer's transaction (`store::adjustments::record`), committed before the 202.

use rust_decimal::Decimal;
use serde_json::{json, Map, Value};

use super::{conversions, validate, ApiError, App};
use crate::http::{Ctx, Reply};
use crate::ledger::{self, Kind, Refusal};
use crate::store::{
    self,
    adjustments::{Answer, NewAdjustment, Recorded},
};

/// Check 7: the body's fields, in the order docs/decisions/api.md lists them.
fn fields(
    obj: &Map<String, Value>,
    site_id: &str,
    order_id: &str,
    now_ms: i64,
) -> Result<NewAdjustment, ApiError> {
    let adjustment_id = validate::opt_string(
        obj,
        "adjustmentId",
        "adjustmentId",
        validate::MAX_ID_CHARS,
    )?
    .ok_or_else(|| {
        ApiError::validation(
            "adjustmentId",
            "adjustmentId is required: your id of this adjustment, such as the payment provider's refund id",
        )
    })?;
    let kind = match validate::field(obj, "type") {
        Some(Value::String(s)) => Kind::parse(s),
        _ => None,
    }
    .ok_or_else(|| ApiError::validation("type", "type must be refund, cancel or restate"))?;
    let value = match validate::value(obj, "value")? {
        Some(text) => Some(text.parse::<Decimal>().map_err(|_| {
            ApiError::validation("value", "value has more digits than an amount can hold")
        })?),
        None => None,
    };
    ledger::value_rule(kind, value).map_err(|why| ApiError::validation("value", why))?;
    let currency = match validate::field(obj, "currency") {
        Some(_) => Some(validate::currency(obj, "currency")?),
        None => None,
    };
    let occurred_at = match validate::field(obj, "occurredAt") {
        Some(_) => Some(validate::occurred_at(obj, now_ms)?),
        None => None,
    };
    let reason = match validate::field(obj, "reason") {
        None => None,
        Some(Value::String(s)) if s.chars().count() <= ledger::MAX_REASON_CHARS => Some(s.clone()),
        Some(_) => {
            return Err(ApiError::validation(
                "reason",
                format!(
                    "reason must be a string of at most {} characters",
                    ledger::MAX_REASON_CHARS
                ),
            ))
        }
    };
    Ok(NewAdjustment {
        site_id: site_id.to_owned(),
        order_id: order_id.to_owned(),
        adjustment_id,
        kind,
        value,
        currency,
        occurred_at,
        reason,
    })
}

fn accepted(order_id: &str, adjustment_id: &str, a: &Answer) -> Reply {
    Reply::json(
        202,
        &json!({
            "success": true,
            "orderId": order_id,
            "adjustmentId": adjustment_id,
            "eventId": a.event_id,
            "netValue": conversions::number(&a.net_value),
            "state": a.state,
        }),
    )
}

pub fn adjust(app: &App, ctx: &mut Ctx, site_id: &str, order_id: &str) -> Result<Reply, ApiError> {
    let key_hash = super::bearer_key_hash(ctx)?;
    let conn = app.pool.get()?;
    let now = store::now_ms();
    let (adjustment, test) = store::read(&conn, |conn| {
        let (site, test) = super::authorize_mode(app, conn, &key_hash, site_id)?;
        let obj = conversions::read_body(ctx)?;
        Ok::<_, ApiError>((fields(&obj, &site.id, order_id, now)?, test))
    })?;
    drop(conn);
    let (order_id, adjustment_id) = (
        adjustment.order_id.clone(),
        adjustment.adjustment_id.clone(),
    );
    let outcome = app
        .writer
        .submit(move |c| store::adjustments::record_in(c, &adjustment, test, now))
        .inspect_err(|e| super::count_unavailable(app, e))?;
    match outcome {
        Recorded::Accepted(a) | Recorded::Repeat(a) => Ok(accepted(&order_id, &adjustment_id, &a)),
        Recorded::OrderNotFound => Err(ApiError::OrderNotFound),
        Recorded::Invalid(field, message) => Err(ApiError::validation(field, message)),
        Recorded::Conflict => Err(ApiError::AdjustmentConflict),
        Recorded::Refused(Refusal::OrderCancelled) => Err(ApiError::OrderCancelled),
        Recorded::Refused(Refusal::ExceedsOrderValue) => Err(ApiError::ExceedsOrderValue),
    }
}
