//! Stripe's webhooks (docs/stripe.md): the `Stripe-Signature` check with its timestamp tolerance,
//! and the mapping of its events: paid Checkout Sessions (also delayed payments) are purchases;
//! `refund.created` and `charge.refunded` are refunds of the order their PaymentIntent paid.
//!
//! Each refund counts once whichever of the two a site subscribes to, in any order, however often:
//! an event proves that Stripe refunded at least the larger of its charge's running
//! `amount_refunded` and the sum of the distinct refunds known by id (the ones in the order's
//! ledger and the ones it lists), and the order's ledger gains what that exceeds what it counts
//! from Stripe already ([`still_to_count`]). A refund the event names that fits in what is missing
//! is recorded under its id (`re_…`); the rest, a rise of the running total no refund known by id
//! explains, under the charge and the total reached (`ch_…@1500`). Decided on the ledger as it is, its
//! order's row locked (`store::adjustments::locked_ledger`), so two events of one order never
//! count the same money twice.

use hmac::{Hmac, Mac};
use rust_decimal::Decimal;
use serde_json::Value;
use sha2::Sha256;

use super::{bad, str_at, Action, BadSignature, Event, Purchase, Refund};
use crate::api::ApiError;
use crate::http::Ctx;
use crate::store::adjustments::Adjustment;

/// The reason of a refund Stripe named by id.
pub const REFUND_REASON: &str = "Stripe refund";
/// The reason of a refund known only by its charge's running total.
pub const TOTAL_REASON: &str = "Stripe refund (the charge's amount_refunded)";

/// What a Stripe refund event says of a payment's refunds.
#[derive(Debug, Clone, PartialEq)]
pub struct Refunded {
    /// The PaymentIntent, which names the order.
    pub payment_ref: String,
    /// The charge refunded (`ch_…`; the PaymentIntent when the refund does not say), the key of a
    /// running total's adjustment.
    pub charge: String,
    /// Upper case, as the refunds' and the total's.
    pub currency: String,
    /// The refunds it names by id, not failed nor cancelled.
    pub refunds: Vec<Refund>,
    /// The charge's `amount_refunded`: all that was refunded on it so far.
    pub total: Option<Decimal>,
    /// When the total was reached: the event's time.
    pub occurred_ms: Option<i64>,
}

/// How far a Stripe signature's timestamp may be from now, either way, in seconds (Stripe's
/// libraries' default): an older signed body is a replay.
pub const STRIPE_TOLERANCE_S: i64 = 300;

const NO_MATCH: &str = "no v1 signature matches: the source's secret must be this endpoint's \
    signing secret (Stripe: Developers → Webhooks → the endpoint → Signing secret); add the \
    source again with it";

/// [`verify_stripe`] of a request.
pub fn verify(ctx: &Ctx, body: &[u8], secret: &str, now_s: i64) -> Result<(), BadSignature> {
    verify_stripe(ctx.header("Stripe-Signature"), body, secret, now_s)
}

/// A Stripe event: its `id` is the dedup key, `created` its time.
pub fn parse(body: &[u8]) -> Result<Event, ApiError> {
    let event: Value =
        serde_json::from_slice(body).map_err(|e| ApiError::InvalidJson(e.to_string()))?;
    let id = str_at(&event, &["id"])
        .ok_or_else(|| bad("id", "the event has no id"))?
        .to_owned();
    Ok(Event {
        id,
        kind: str_at(&event, &["type"]).unwrap_or_default().to_owned(),
        occurred_ms: event
            .get("created")
            .and_then(Value::as_i64)
            .map(|s| s * 1000),
        actions: map_stripe(&event)?,
        client_id: None,
    })
}

/// Checks Stripe's `Stripe-Signature: t=…,v1=…[,v1=…]` over `body`: some `v1` is the hex
/// HMAC-SHA256 under `secret` of `"{t}.{body}"` (compared in constant time) and `t` is within
/// [`STRIPE_TOLERANCE_S`] of `now_s`.
pub fn verify_stripe(
    header: Option<&str>,
    body: &[u8],
    secret: &str,
    now_s: i64,
) -> Result<(), BadSignature> {
    let header = header.ok_or(BadSignature::Missing("Stripe", "Stripe-Signature"))?;
    let mut t = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.trim().parse::<i64>().ok(),
            Some(("v1", v)) => signatures.push(v.trim()),
            _ => {}
        }
    }
    let t = t.ok_or(BadSignature::NoTimestamp)?;
    if signatures.is_empty() {
        return Err(BadSignature::NoV1);
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let matches = signatures
        .iter()
        .any(|s| hex_decode(s).is_some_and(|sig| mac.clone().verify_slice(&sig).is_ok()));
    if !matches {
        return Err(BadSignature::NoMatch(NO_MATCH));
    }
    if (now_s - t).abs() > STRIPE_TOLERANCE_S {
        return Err(BadSignature::Stale((now_s - t).abs()));
    }
    Ok(())
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// An amount in a currency's minor units (Stripe's integers) as an exact decimal: 4990 EUR cents
/// is 49.9, 5000 JPY is 5000 (JPY has no minor unit). `None`: not an ISO 4217 currency.
pub fn from_minor_units(amount: i64, currency: &str) -> Option<Decimal> {
    let dp = crate::fx::minor_units(currency)?;
    Some(Decimal::new(amount, dp).normalize())
}

/// `obj`'s `currency`, upper-cased as the ledger keeps it (empty when it has none).
fn currency_of(obj: &Value) -> String {
    str_at(obj, &["currency"])
        .unwrap_or_default()
        .to_ascii_uppercase()
}

/// `obj[key]`: an integer of at least `min` in `currency`'s minor units, as an exact decimal; else
/// a 400 naming `field` and what it `needs`.
fn minor_amount(
    obj: &Value,
    key: &str,
    min: i64,
    currency: &str,
    field: &str,
    needs: &str,
) -> Result<Decimal, ApiError> {
    obj.get(key)
        .and_then(Value::as_i64)
        .filter(|a| *a >= min)
        .and_then(|a| from_minor_units(a, currency))
        .ok_or_else(|| bad(field, needs))
}

/// The refund object `r` (from `refund.created`, or an entry of a charge's `refunds.data`); `None`
/// for a refund that failed or was cancelled (no money went back).
fn refund(r: &Value, field: &str) -> Result<Option<Refund>, ApiError> {
    if matches!(
        r.get("status").and_then(Value::as_str),
        Some("failed" | "canceled")
    ) {
        return Ok(None);
    }
    let id = str_at(r, &["id"]).ok_or_else(|| bad(&format!("{field}.id"), "a refund has no id"))?;
    let currency = currency_of(r);
    let value = minor_amount(
        r,
        "amount",
        1,
        &currency,
        &format!("{field}.amount"),
        "a refund needs a positive integer amount in an ISO 4217 currency's minor units",
    )?;
    Ok(Some(Refund {
        id: id.to_owned(),
        value,
        currency: Some(currency),
        created_ms: r.get("created").and_then(Value::as_i64).map(|s| s * 1000),
        reason: REFUND_REASON.into(),
    }))
}

/// What a Stripe event (`type`, `data.object`) asks for, in docs/decisions.md's mapping.
pub fn map_stripe(event: &Value) -> Result<Vec<Action>, ApiError> {
    let kind = str_at(event, &["type"]).unwrap_or_default();
    let obj = event.pointer("/data/object").unwrap_or(&Value::Null);
    match kind {
        "checkout.session.completed" | "checkout.session.async_payment_succeeded" => {
            if str_at(obj, &["payment_status"]) != Some("paid") {
                return Ok(Vec::new());
            }
            let session_id = str_at(obj, &["id"])
                .ok_or_else(|| bad("data.object.id", "a Checkout Session has no id"))?;
            let currency = currency_of(obj);
            let value = minor_amount(
                obj,
                "amount_total",
                0,
                &currency,
                "data.object.amount_total",
                "a paid Checkout Session needs amount_total, an integer in an ISO 4217 \
                 currency's minor units",
            )?;
            let order_id = str_at(obj, &["metadata", "order_id"]).unwrap_or(session_id);
            let client_id = str_at(obj, &["client_reference_id"])
                .or_else(|| str_at(obj, &["metadata", "client_id"]));
            Ok(vec![Action::Purchase(Purchase {
                order_id: order_id.to_owned(),
                client_id: client_id.map(str::to_owned),
                visitor_id: str_at(obj, &["metadata", "svc_vid"]).map(str::to_owned),
                value,
                currency,
                payment_ref: str_at(obj, &["payment_intent"]).map(str::to_owned),
            })])
        }
        "refund.created" => {
            let Some(payment_ref) = str_at(obj, &["payment_intent"]) else {
                return Ok(Vec::new());
            };
            let Some(r) = refund(obj, "data.object")? else {
                return Ok(Vec::new());
            };
            Ok(vec![Action::StripeRefunds(Refunded {
                payment_ref: payment_ref.to_owned(),
                charge: str_at(obj, &["charge"]).unwrap_or(payment_ref).to_owned(),
                currency: r.currency.clone().unwrap_or_default(),
                refunds: vec![r],
                total: None,
                occurred_ms: None,
            })])
        }
        "charge.refunded" => {
            let Some(payment_ref) = str_at(obj, &["payment_intent"]) else {
                return Ok(Vec::new());
            };
            let charge =
                str_at(obj, &["id"]).ok_or_else(|| bad("data.object.id", "a charge has no id"))?;
            let currency = currency_of(obj);
            let total = minor_amount(
                obj,
                "amount_refunded",
                0,
                &currency,
                "data.object.amount_refunded",
                "a refunded charge needs amount_refunded, an integer in an ISO 4217 currency's \
                 minor units",
            )?;
            // Listed by API versions before 2022-11-15 only.
            let list = obj.pointer("/refunds/data").and_then(Value::as_array);
            let mut refunds = Vec::new();
            for (i, r) in list.into_iter().flatten().enumerate() {
                refunds.extend(refund(r, &format!("data.object.refunds.data.{i}"))?);
            }
            Ok(vec![Action::StripeRefunds(Refunded {
                payment_ref: payment_ref.to_owned(),
                charge: charge.to_owned(),
                currency,
                refunds,
                total: Some(total),
                occurred_ms: event
                    .get("created")
                    .and_then(Value::as_i64)
                    .map(|s| s * 1000),
            })])
        }
        _ => Ok(Vec::new()),
    }
}

/// The refunds to record on an order whose ledger is `ledger` for the event `r`: what Stripe
/// refunded at least (the larger of `r`'s running total and the sum of the distinct refunds known
/// by id) minus what the ledger counts from Stripe already. Each of `r`'s refunds not in the ledger
/// that fits in it is recorded under its id; the rest, if any, under `{charge}@{the total reached,
/// in minor units}`, which no other rise can reach again. Nothing when nothing is missing: a
/// repeat, a refund counted already by a running total, or a total its refunds explain.
pub fn still_to_count(ledger: &[Adjustment], r: &Refunded) -> Vec<Refund> {
    let mut counted = Decimal::ZERO;
    let mut by_id = std::collections::BTreeMap::new();
    for a in ledger {
        let from_stripe = matches!(a.reason.as_deref(), Some(REFUND_REASON | TOTAL_REASON));
        let value = a.value.as_deref().and_then(|v| v.parse::<Decimal>().ok());
        if let (true, "refund", Some(value)) = (from_stripe, a.kind.as_str(), value) {
            counted += value;
            if a.reason.as_deref() == Some(REFUND_REASON) {
                by_id.insert(a.adjustment_id.as_str(), value);
            }
        }
    }
    let in_ledger = |id: &str| ledger.iter().any(|a| a.adjustment_id == id);
    for f in &r.refunds {
        by_id.entry(f.id.as_str()).or_insert(f.value);
    }
    let at_least = by_id
        .values()
        .sum::<Decimal>()
        .max(r.total.unwrap_or_default());
    let mut missing = at_least - counted;
    let mut out: Vec<Refund> = Vec::new();
    for f in &r.refunds {
        if f.value <= missing && !in_ledger(&f.id) && !out.iter().any(|o| o.id == f.id) {
            missing -= f.value;
            out.push(f.clone());
        }
    }
    if missing > Decimal::ZERO {
        out.push(Refund {
            id: format!("{}@{}", r.charge, minor_units_of(at_least, &r.currency)),
            value: missing,
            currency: Some(r.currency.clone()),
            created_ms: r.occurred_ms,
            reason: TOTAL_REASON.into(),
        });
    }
    out
}

/// `amount` in `currency`'s minor units, as Stripe writes it (49.9 EUR: 4990).
fn minor_units_of(amount: Decimal, currency: &str) -> Decimal {
    let dp = crate::fx::minor_units(currency).unwrap_or(0);
    (amount * Decimal::from(10_i64.pow(dp))).normalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn sign(secret: &str, t: i64, body: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("{t}.{body}").as_bytes());
        hex(&mac.finalize().into_bytes())
    }

    #[test]
    fn a_stripe_signature_holds_with_its_secret_within_five_minutes_only() {
        let (secret, body, t) = ("whsec_test", r#"{"id":"evt_1"}"#, 1_700_000_000);
        let good = sign(secret, t, body);
        let header = format!("t={t},v1={good}");
        assert!(verify_stripe(Some(&header), body.as_bytes(), secret, t).is_ok());
        assert!(verify_stripe(Some(&header), body.as_bytes(), secret, t + 300).is_ok());
        assert!(verify_stripe(Some(&header), body.as_bytes(), secret, t - 300).is_ok());
        assert!(verify_stripe(Some(&header), body.as_bytes(), secret, t + 301).is_err());
        assert!(verify_stripe(Some(&header), body.as_bytes(), secret, t - 301).is_err());
        assert!(verify_stripe(Some(&header), body.as_bytes(), "whsec_other", t).is_err());
        assert!(verify_stripe(Some(&header), b"{\"id\":\"evt_2\"}", secret, t).is_err());
        assert!(verify_stripe(None, body.as_bytes(), secret, t).is_err());
        // Several v1 (a secret being rolled): one that matches is enough, wherever it is.
        let rolled = format!("t={t},v1={},v1={good},v0=abc", sign("whsec_old", t, body));
        assert!(verify_stripe(Some(&rolled), body.as_bytes(), secret, t).is_ok());
        let only_v0 = format!("t={t},v0={good}");
        assert!(verify_stripe(Some(&only_v0), body.as_bytes(), secret, t).is_err());
    }

    #[test]
    fn a_signature_stripes_library_computes_holds() {
        // From stripe-python 16.1 (`stripe.WebhookSignature._compute_signature(f"{t}.{body}",
        // secret)`), the library `verify_header` is in.
        let body = r#"{"id":"evt_1","object":"event","type":"checkout.session.completed"}"#;
        let header =
            "t=1700000000,v1=d1e4aa90551919f198c22ba0a9691b35338d4b631d54ce1f1465e93b1d41c430";
        assert!(verify_stripe(
            Some(header),
            body.as_bytes(),
            "whsec_test_secret",
            1_700_000_000
        )
        .is_ok());
    }

    fn refund_of(id: &str, minor: i64) -> Refund {
        Refund {
            id: id.into(),
            value: from_minor_units(minor, "EUR").unwrap(),
            currency: Some("EUR".into()),
            created_ms: None,
            reason: REFUND_REASON.into(),
        }
    }

    /// Applies `r` to `ledger` as the hook does; what it recorded.
    fn apply(ledger: &mut Vec<Adjustment>, r: &Refunded) -> Vec<String> {
        let new = still_to_count(ledger, r);
        for f in &new {
            ledger.push(Adjustment {
                adjustment_id: f.id.clone(),
                kind: "refund".into(),
                value: Some(f.value.to_string()),
                currency: "EUR".into(),
                occurred_at: 0,
                received_at: 0,
                reason: Some(f.reason.clone()),
                arrival: ledger.len() as i64,
            });
        }
        new.into_iter()
            .map(|f| format!("{}={}", f.id, f.value))
            .collect()
    }

    fn counted(ledger: &[Adjustment]) -> Decimal {
        ledger
            .iter()
            .map(|a| a.value.as_deref().unwrap().parse::<Decimal>().unwrap())
            .sum()
    }

    #[test]
    fn a_refund_known_by_id_and_by_total_is_counted_once_in_any_order() {
        let event = |refunds: Vec<Refund>, total: Option<i64>| Refunded {
            payment_ref: "pi_1".into(),
            charge: "ch_1".into(),
            currency: "EUR".into(),
            refunds,
            total: total.map(|t| from_minor_units(t, "EUR").unwrap()),
            occurred_ms: None,
        };
        let (re1, re2) = (refund_of("re_1", 3000), refund_of("re_2", 2000));
        let events = [
            event(vec![re1.clone()], None),
            event(vec![re2.clone()], None),
            event(vec![], Some(3000)),
            event(vec![], Some(5000)),
            event(vec![re1.clone()], Some(3000)),
            event(vec![re1, re2], Some(5000)),
        ];
        // Every order of the four first, then of four whose totals list their refunds; each
        // event told twice.
        let mut orders = vec![vec![]];
        for n in 0..4 {
            orders = orders
                .into_iter()
                .flat_map(|p: Vec<usize>| {
                    (0..=p.len()).map(move |at| {
                        let mut q = p.clone();
                        q.insert(at, n);
                        q
                    })
                })
                .collect();
        }
        assert_eq!(orders.len(), 24);
        for set in [[0, 1, 2, 3], [0, 1, 4, 5]] {
            for order in &orders {
                let mut ledger = Vec::new();
                for &i in order {
                    apply(&mut ledger, &events[set[i]]);
                    assert!(apply(&mut ledger, &events[set[i]]).is_empty());
                    assert!(counted(&ledger) <= Decimal::from(50));
                }
                assert_eq!(counted(&ledger), Decimal::from(50), "{set:?} {order:?}");
            }
        }
        // The ids: a refund's own when its amount is what is missing, else the charge's total.
        let mut ledger = Vec::new();
        assert_eq!(apply(&mut ledger, &events[2]), ["ch_1@3000=30"]);
        assert!(apply(&mut ledger, &events[1]).is_empty());
        assert_eq!(apply(&mut ledger, &events[5]), ["re_2=20"]);
        let mut ledger = Vec::new();
        assert_eq!(apply(&mut ledger, &events[1]), ["re_2=20"]);
        assert_eq!(apply(&mut ledger, &events[2]), ["ch_1@3000=10"]);
        assert_eq!(apply(&mut ledger, &events[3]), ["ch_1@5000=20"]);
    }

    #[test]
    fn minor_units_follow_iso_4217() {
        assert_eq!(from_minor_units(4990, "EUR").unwrap().to_string(), "49.9");
        assert_eq!(from_minor_units(5000, "JPY").unwrap().to_string(), "5000");
        assert_eq!(from_minor_units(1234, "KWD").unwrap().to_string(), "1.234");
        assert_eq!(from_minor_units(1, "USD").unwrap().to_string(), "0.01");
        assert_eq!(from_minor_units(1, "XXZ"), None);
    }
}
