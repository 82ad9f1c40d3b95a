//! WooCommerce's webhooks (docs/woocommerce.md): `X-WC-Webhook-Signature`, the base64
//! HMAC-SHA256 of the raw body under the webhook's secret, and `X-WC-Webhook-Topic`. An order
//! (`order.created`, `order.updated`; the REST API v3 shape) says what it is by its status:
//! `processing` or `completed` is a purchase, its `refunds` are refunds keyed by their ids,
//! `refunded` with no refund listed is a full refund, `cancelled` a cancel. The same order sent
//! again in the same state changes nothing: the purchase is keyed by the order, each refund by its
//! id. The unsigned ping WooCommerce posts when a webhook is saved (`webhook_id=N`) answers 200.

use rust_decimal::Decimal;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{
    bad, base64_hmac_holds, decimal_at, id_at, str_at, Action, BadSignature, Event, OrderRef,
    Purchase, Refund,
};
use crate::api::ApiError;
use crate::http::Ctx;

const SIGNATURE: &str = "X-WC-Webhook-Signature";
const NO_MATCH: &str = "the X-WC-Webhook-Signature signature does not match: the source's secret \
    must be the webhook's Secret (WordPress admin: WooCommerce → Settings → Advanced → Webhooks → \
    the webhook → Secret); add the source again with it";

/// Whether the post is the ping WooCommerce sends, unsigned, when a webhook is saved: a form body
/// `webhook_id=N` and no signature.
pub fn is_ping(ctx: &Ctx, body: &[u8]) -> bool {
    if ctx.header(SIGNATURE).is_some() {
        return false;
    }
    let mut fields = form_urlencoded::parse(body);
    matches!(
        (fields.next(), fields.next()),
        (Some((k, v)), None) if k == "webhook_id" && !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit())
    )
}

/// Checks `X-WC-Webhook-Signature` over the raw body.
pub fn verify(ctx: &Ctx, body: &[u8], secret: &str) -> Result<(), BadSignature> {
    let sig = ctx
        .header(SIGNATURE)
        .ok_or(BadSignature::Missing("WooCommerce", SIGNATURE))?;
    if base64_hmac_holds(sig, body, secret) {
        Ok(())
    } else {
        Err(BadSignature::NoMatch(NO_MATCH))
    }
}

/// A WooCommerce delivery: the topic from `X-WC-Webhook-Topic`, `X-WC-Webhook-Delivery-ID` in
/// its key.
pub fn parse(ctx: &Ctx, body: &[u8]) -> Result<Event, ApiError> {
    let topic = ctx.header("X-WC-Webhook-Topic").unwrap_or_default().trim();
    let delivery = ctx
        .header("X-WC-Webhook-Delivery-ID")
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let payload: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    map(topic, delivery, &payload, body)
}

/// What the delivery of `topic` with the order `payload` asks for. Its key is the delivery id
/// (when sent), the order's id, its status and the ids of its refunds: a retry of the delivery is
/// a `duplicate`; another delivery of the same state is taken and changes nothing.
pub fn map(
    topic: &str,
    delivery: Option<&str>,
    order: &Value,
    body: &[u8],
) -> Result<Event, ApiError> {
    if !matches!(topic, "order.created" | "order.updated") {
        let key = match delivery {
            Some(d) => format!("{topic}:{d}"),
            None => format!("{topic}:{:x}", Sha256::digest(body)),
        };
        return Ok(Event {
            id: key,
            kind: topic.to_owned(),
            occurred_ms: None,
            actions: Vec::new(),
            client_id: None,
        });
    }
    let order_id = id_at(order, "id").ok_or_else(|| bad("id", "an order has no id"))?;
    let status = str_at(order, &["status"]).unwrap_or_default();
    let currency = str_at(order, &["currency"])
        .unwrap_or_default()
        .to_ascii_uppercase();
    let total = || {
        decimal_at(order, "total")
            .filter(|v| *v >= Decimal::ZERO)
            .ok_or_else(|| {
                bad(
                    "total",
                    "an order needs total, a decimal amount such as \"29.35\"",
                )
            })
    };
    let mut actions = Vec::new();
    if matches!(status, "processing" | "completed") {
        if crate::fx::minor_units(&currency).is_none() {
            return Err(bad("currency", "a paid order needs an ISO 4217 currency"));
        }
        let visitor_id = order
            .get("meta_data")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|m| str_at(m, &["key"]) == Some("_svc_vid"))
            .and_then(|m| str_at(m, &["value"]))
            .map(str::to_owned);
        actions.push(Action::Purchase(Purchase {
            order_id: order_id.clone(),
            client_id: id_at(order, "customer_id").filter(|c| c != "0"),
            visitor_id,
            value: total()?,
            currency: currency.clone(),
            payment_ref: None,
        }));
    }
    let mut refunds = Vec::new();
    let listed = order.get("refunds").and_then(Value::as_array);
    for (i, r) in listed.into_iter().flatten().enumerate() {
        let id = id_at(r, "id").ok_or_else(|| bad(&format!("refunds.{i}.id"), "no id"))?;
        // WooCommerce lists a refund's total as a negative amount ("-10.00").
        let value = decimal_at(r, "total")
            .map(|v| v.abs())
            .filter(|v| *v > Decimal::ZERO)
            .ok_or_else(|| {
                bad(
                    &format!("refunds.{i}.total"),
                    "a refund needs a decimal total such as \"-10.00\"",
                )
            })?;
        refunds.push(Refund {
            id: format!("woocommerce-refund-{id}"),
            value,
            currency: None,
            created_ms: None,
            reason: match str_at(r, &["reason"]) {
                Some(why) => format!("WooCommerce refund: {why}"),
                None => "WooCommerce refund".into(),
            },
        });
    }
    let refund_ids: Vec<&str> = refunds.iter().map(|r| r.id.as_str()).collect();
    let key = format!(
        "{}:{order_id}:{status}:{}",
        delivery.unwrap_or("-"),
        refund_ids.join(",")
    );
    if refunds.is_empty() && status == "refunded" {
        refunds.push(Refund {
            id: format!("woocommerce-refunded-{order_id}"),
            value: total()?,
            currency: None,
            created_ms: None,
            reason: "WooCommerce: order refunded".into(),
        });
    }
    if !refunds.is_empty() {
        actions.push(Action::Refunds {
            order: OrderRef::Order(order_id.clone()),
            refunds,
        });
    }
    if status == "cancelled" {
        actions.push(Action::Cancel {
            adjustment_id: format!("woocommerce-cancel-{order_id}"),
            order_id: order_id.clone(),
            occurred_ms: None,
            reason: "order cancelled".into(),
        });
    }
    Ok(Event {
        id: key,
        kind: topic.to_owned(),
        occurred_ms: gmt_at(order, "date_paid_gmt").or(gmt_at(order, "date_created_gmt")),
        actions,
        client_id: id_at(order, "customer_id").filter(|c| c != "0"),
    })
}

/// WooCommerce's `*_gmt` times (`2017-03-22T16:28:08`, UTC without an offset) in epoch ms.
fn gmt_at(v: &Value, key: &str) -> Option<i64> {
    chrono::NaiveDateTime::parse_from_str(str_at(v, &[key])?, "%Y-%m-%dT%H:%M:%S")
        .ok()
        .map(|t| t.and_utc().timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn order(status: &str, refunds: Value) -> Value {
        json!({
            "id": 727, "status": status, "currency": "EUR", "total": "29.35",
            "customer_id": 0, "date_created_gmt": "2017-03-22T16:28:02",
            "date_paid_gmt": "2017-03-22T16:28:08",
            "meta_data": [{"id": 1, "key": "_svc_vid", "value": "v-9"}],
            "refunds": refunds,
        })
    }

    #[test]
    fn a_processing_order_is_a_purchase() {
        let e = map(
            "order.created",
            Some("d1"),
            &order("processing", json!([])),
            b"",
        )
        .unwrap();
        assert_eq!(e.id, "d1:727:processing:");
        assert_eq!(e.occurred_ms, Some(1_490_200_088_000));
        let Action::Purchase(p) = &e.actions[0] else {
            panic!("{e:?}")
        };
        assert_eq!(
            (
                p.order_id.as_str(),
                p.value.to_string(),
                p.currency.as_str()
            ),
            ("727", "29.35".into(), "EUR")
        );
        assert_eq!(p.client_id, None, "customer_id 0 is a guest");
        assert_eq!(p.visitor_id.as_deref(), Some("v-9"));
        for status in ["pending", "on-hold", "failed"] {
            let e = map("order.updated", None, &order(status, json!([])), b"").unwrap();
            assert!(e.actions.is_empty(), "{status}: {e:?}");
        }
    }

    #[test]
    fn refunds_are_keyed_by_their_ids_and_refunded_alone_is_the_whole_total() {
        let refunds = json!([{"id": 730, "reason": "damaged", "total": "-10.00"}]);
        let e = map("order.updated", None, &order("completed", refunds), b"").unwrap();
        assert_eq!(e.id, "-:727:completed:woocommerce-refund-730");
        let Action::Refunds { refunds, .. } = &e.actions[1] else {
            panic!("{e:?}")
        };
        assert_eq!(refunds[0].value.to_string(), "10");
        let e = map("order.updated", None, &order("refunded", json!([])), b"").unwrap();
        let [Action::Refunds { refunds, .. }] = e.actions.as_slice() else {
            panic!("{e:?}")
        };
        assert_eq!(
            (refunds[0].id.as_str(), refunds[0].value.to_string()),
            ("woocommerce-refunded-727", "29.35".into())
        );
        let e = map("order.updated", None, &order("cancelled", json!([])), b"").unwrap();
        assert!(
            matches!(e.actions.as_slice(), [Action::Cancel { .. }]),
            "{e:?}"
        );
    }
}
