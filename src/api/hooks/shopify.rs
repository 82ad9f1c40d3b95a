//! Shopify's webhooks (docs/shopify.md): `X-Shopify-Hmac-Sha256`, the base64 HMAC-SHA256 of the
//! raw body under the store's webhook signing secret, and `X-Shopify-Topic`. `orders/paid` is a
//! purchase, `refunds/create` a refund (the sum of its successful `refund` transactions, keyed by
//! the refund's id), `orders/cancelled` a cancel; every other topic is ignored. The dedup key is
//! `X-Shopify-Webhook-Id` (the same for every retry of a delivery), else the topic and the
//! resource's ids.

use rust_decimal::Decimal;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{
    bad, base64_hmac_holds, decimal_at, id_at, str_at, time_at, Action, BadSignature, Event,
    OrderRef, Purchase, Refund,
};
use crate::api::ApiError;
use crate::http::Ctx;

const SIGNATURE: &str = "X-Shopify-Hmac-Sha256";
const NO_MATCH: &str = "the X-Shopify-Hmac-Sha256 signature does not match: the source's secret \
    must be the key Shopify signs webhooks with (Shopify admin: Settings → Notifications → \
    Webhooks, \"Your webhooks will be signed with …\"; an app's webhooks: the app's client \
    secret); add the source again with it";

/// Checks `X-Shopify-Hmac-Sha256` over the raw body.
pub fn verify(ctx: &Ctx, body: &[u8], secret: &str) -> Result<(), BadSignature> {
    let sig = ctx
        .header(SIGNATURE)
        .ok_or(BadSignature::Missing("Shopify", SIGNATURE))?;
    if base64_hmac_holds(sig, body, secret) {
        Ok(())
    } else {
        Err(BadSignature::NoMatch(NO_MATCH))
    }
}

/// A Shopify delivery: the topic from `X-Shopify-Topic`, the key from `X-Shopify-Webhook-Id`.
pub fn parse(ctx: &Ctx, body: &[u8]) -> Result<Event, ApiError> {
    let topic = ctx.header("X-Shopify-Topic").unwrap_or_default().trim();
    let payload: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    let webhook_id = ctx
        .header("X-Shopify-Webhook-Id")
        .map(str::trim)
        .filter(|s| !s.is_empty());
    map(topic, webhook_id, &payload, body)
}

/// What the delivery of `topic` with `payload` asks for, keyed by `webhook_id` when Shopify sent
/// one.
pub fn map(
    topic: &str,
    webhook_id: Option<&str>,
    payload: &Value,
    body: &[u8],
) -> Result<Event, ApiError> {
    let (actions, own_key) = match topic {
        "orders/paid" => {
            let p = purchase(payload)?;
            let key = format!("{topic}:{}", p.order_id);
            (vec![Action::Purchase(p)], Some(key))
        }
        "refunds/create" => {
            let order_id = id_at(payload, "order_id")
                .ok_or_else(|| bad("order_id", "a refund names no order_id"))?;
            let id = id_at(payload, "id").ok_or_else(|| bad("id", "a refund has no id"))?;
            let key = format!("{topic}:{order_id}:{id}");
            let actions = match refund(payload, id)? {
                Some(r) => vec![Action::Refunds {
                    order: OrderRef::Order(order_id),
                    refunds: vec![r],
                }],
                // Only restocked, or its money did not go back: nothing to count.
                None => Vec::new(),
            };
            (actions, Some(key))
        }
        "orders/cancelled" => {
            let order_id = id_at(payload, "id").ok_or_else(|| bad("id", "an order has no id"))?;
            let key = format!("{topic}:{order_id}");
            let reason = str_at(payload, &["cancel_reason"]).unwrap_or("cancelled");
            let cancel = Action::Cancel {
                adjustment_id: format!("shopify-cancel-{order_id}"),
                order_id,
                occurred_ms: time_at(payload, "cancelled_at"),
                reason: format!("order cancelled ({reason})"),
            };
            (vec![cancel], Some(key))
        }
        _ => (Vec::new(), None),
    };
    let id = match (webhook_id, own_key) {
        (Some(w), _) => w.to_owned(),
        (None, Some(k)) => k,
        // Another topic with no webhook id: the same body again is the same delivery.
        (None, None) => format!("{topic}:{:x}", Sha256::digest(body)),
    };
    Ok(Event {
        id,
        kind: topic.to_owned(),
        occurred_ms: match topic {
            "orders/paid" => time_at(payload, "processed_at").or(time_at(payload, "created_at")),
            "refunds/create" => time_at(payload, "created_at"),
            _ => time_at(payload, "cancelled_at"),
        },
        actions,
        client_id: payload.get("customer").and_then(|c| id_at(c, "id")),
    })
}

/// An order (`orders/paid`) as a purchase.
fn purchase(order: &Value) -> Result<Purchase, ApiError> {
    let order_id = id_at(order, "id").ok_or_else(|| bad("id", "an order has no id"))?;
    let currency = str_at(order, &["currency"])
        .unwrap_or_default()
        .to_ascii_uppercase();
    if crate::fx::minor_units(&currency).is_none() {
        return Err(bad("currency", "a paid order needs an ISO 4217 currency"));
    }
    let value = decimal_at(order, "total_price")
        .filter(|v| *v >= Decimal::ZERO)
        .ok_or_else(|| {
            bad(
                "total_price",
                "a paid order needs total_price, a decimal amount such as \"598.94\"",
            )
        })?;
    let visitor_id = order
        .get("note_attributes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|a| str_at(a, &["name"]) == Some("svc_vid"))
        .and_then(|a| str_at(a, &["value"]))
        .map(str::to_owned);
    Ok(Purchase {
        order_id,
        client_id: order.get("customer").and_then(|c| id_at(c, "id")),
        visitor_id,
        value,
        currency,
        payment_ref: None,
    })
}

/// A refund (`refunds/create`): the sum of its successful `refund` transactions; `None` when no
/// money went back.
fn refund(r: &Value, id: String) -> Result<Option<Refund>, ApiError> {
    let mut total = Decimal::ZERO;
    let mut currency = None;
    let transactions = r.get("transactions").and_then(Value::as_array);
    for (i, t) in transactions.into_iter().flatten().enumerate() {
        if str_at(t, &["kind"]) != Some("refund") || str_at(t, &["status"]) != Some("success") {
            continue;
        }
        let amount = decimal_at(t, "amount")
            .filter(|a| *a >= Decimal::ZERO)
            .ok_or_else(|| {
                bad(
                    &format!("transactions.{i}.amount"),
                    "a refund transaction needs a decimal amount such as \"10.00\"",
                )
            })?;
        total += amount;
        if currency.is_none() {
            currency = str_at(t, &["currency"]).map(str::to_ascii_uppercase);
        }
    }
    if total <= Decimal::ZERO {
        return Ok(None);
    }
    Ok(Some(Refund {
        id,
        value: total.normalize(),
        currency,
        created_ms: time_at(r, "created_at"),
        reason: match str_at(r, &["note"]) {
            Some(note) => format!("Shopify refund: {note}"),
            None => "Shopify refund".into(),
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_paid_order_is_a_purchase_with_its_exact_total_and_identifiers() {
        let order = json!({
            "id": 820982911946154508u64, "total_price": "598.94", "currency": "jpy",
            "processed_at": "2024-03-01T10:00:00-05:00",
            "customer": {"id": 115310627314723954u64},
            "note_attributes": [{"name": "gift", "value": "no"}, {"name": "svc_vid", "value": "v-1"}],
        });
        let e = map("orders/paid", Some("b54557e4"), &order, b"").unwrap();
        assert_eq!(e.id, "b54557e4");
        assert_eq!(e.occurred_ms, Some(1_709_305_200_000));
        let Action::Purchase(p) = &e.actions[0] else {
            panic!("{e:?}")
        };
        assert_eq!(p.order_id, "820982911946154508");
        assert_eq!(p.value.to_string(), "598.94");
        assert_eq!(p.currency, "JPY");
        assert_eq!(p.client_id.as_deref(), Some("115310627314723954"));
        assert_eq!(p.visitor_id.as_deref(), Some("v-1"));
        // No webhook id: the order's id and the topic.
        let e = map("orders/paid", None, &order, b"").unwrap();
        assert_eq!(e.id, "orders/paid:820982911946154508");
    }

    #[test]
    fn a_refund_is_the_sum_of_its_successful_refund_transactions() {
        let r = json!({
            "id": 509562969, "order_id": 450789469, "created_at": "2024-03-02T10:00:00Z",
            "transactions": [
                {"kind": "refund", "status": "success", "amount": "41.94", "currency": "USD"},
                {"kind": "refund", "status": "success", "amount": "0.06", "currency": "USD"},
                {"kind": "refund", "status": "failure", "amount": "100.00", "currency": "USD"},
                {"kind": "sale", "status": "success", "amount": "7.00", "currency": "USD"},
            ],
        });
        let e = map("refunds/create", None, &r, b"").unwrap();
        assert_eq!(e.id, "refunds/create:450789469:509562969");
        let Action::Refunds { order, refunds } = &e.actions[0] else {
            panic!("{e:?}")
        };
        assert_eq!(order, &OrderRef::Order("450789469".into()));
        assert_eq!(refunds[0].id, "509562969");
        assert_eq!(refunds[0].value.to_string(), "42");
        assert_eq!(refunds[0].currency.as_deref(), Some("USD"));
        // A restock without money: nothing to count.
        let restock = json!({"id": 1, "order_id": 2, "transactions": []});
        assert!(map("refunds/create", None, &restock, b"")
            .unwrap()
            .actions
            .is_empty());
    }

    #[test]
    fn other_topics_are_ignored_and_keyed_by_their_body() {
        let e = map("products/update", None, &json!({"id": 1}), b"{\"id\":1}").unwrap();
        assert!(e.actions.is_empty());
        assert!(e.id.starts_with("products/update:"), "{}", e.id);
        assert_ne!(
            e.id,
            map("products/update", None, &json!({"id": 2}), b"{\"id\":2}")
                .unwrap()
                .id
        );
    }
}
