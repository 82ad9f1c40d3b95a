//! `POST /api/sites/{siteId}/conversions` (a merchant's backend reports an order) and
//! `GET /api/sites/{siteId}/conversions/{orderId}` (an order's status).
//!
//! A report is checked and its session resolved on a read snapshot; whether it creates the order,
//! repeats it or takes over the pixel's (the trust order, docs/decisions.md §3) is decided again
//! in the writer's transaction (`store::conversions::record_api`), never on the snapshot alone.

use crate::store::engine::AsConn;
use serde_json::{json, Value};

use super::warnings::{self, Warnings};
use super::{validate, ApiError, App};
use crate::http::{Ctx, Reply};
use crate::store::conversions::{ApiRecorded, ApiReport, OrderStatus, Recorded, Source};
use crate::store::sessions::Identifier;
use crate::store::{self, sites::Site};

/// Largest accepted body.
pub const BODY_LIMIT: usize = 64 * 1024;

/// The session a report attaches to: the first identifier that names a known person decides.
pub(super) fn resolve_session(
    conn: &impl AsConn,
    site: &Site,
    r: &validate::Report,
) -> Result<(String, String), ApiError> {
    let idents = [
        r.client_id.as_deref().map(Identifier::Client),
        r.visitor_id.as_deref().map(Identifier::Visitor),
        r.session_id.as_deref().map(Identifier::Session),
    ];
    let idents: Vec<Identifier<'_>> = idents.into_iter().flatten().collect();
    store::sessions::resolve_first(conn, &site.id, &idents, r.occurred_at, site.window_ms())?
        .ok_or(ApiError::NoSession)
}

/// A 202's body, with the report's unknown fields named (docs/decisions.md §3); its members in
/// the order a `serde_json::Map` keeps them (by name), so both forms below print the same bytes.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Accepted<'a> {
    /// `false` for an order kept with no session (docs/decisions.md §3); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    attributed: Option<bool>,
    event_id: &'a str,
    session_id: &'a Option<String>,
    success: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<Value>,
}

impl<'a> Accepted<'a> {
    fn of(rec: &'a Recorded, warnings: Option<&Warnings>) -> Accepted<'a> {
        Accepted {
            attributed: rec.session_id.is_none().then_some(false),
            event_id: &rec.event_id,
            session_id: &rec.session_id,
            success: true,
            warnings: warnings.map(Warnings::json),
        }
    }
}

/// A 202's body as a JSON value (a batch's item).
pub(super) fn accepted_json(rec: &Recorded, warnings: Option<&Warnings>) -> Value {
    serde_json::to_value(Accepted::of(rec, warnings)).expect("a 202 serialises")
}

fn accepted(app: &App, site_id: &str, rec: &Recorded, warnings: Option<&Warnings>) -> Reply {
    if let Some(w) = warnings {
        app.metrics.add_field_warnings(site_id, w.count());
    }
    // Written straight from the struct: no `Value` built per answer.
    let body = serde_json::to_vec(&Accepted::of(rec, warnings)).expect("a 202 serialises");
    Reply::bytes(202, "application/json", body)
}

/// Checks 4 to 6: the body as one JSON object (the adjustments endpoint checks the same).
pub fn read_body(ctx: &mut Ctx) -> Result<serde_json::Map<String, Value>, ApiError> {
    let body = ctx.body(BODY_LIMIT)?;
    if !validate::media_type_is(ctx.header("Content-Type"), &["application/json"]) {
        return Err(ApiError::UnsupportedMediaType("application/json"));
    }
    validate::json_object(&body)
}

/// Check 7 on a parsed body: the report and its unknown fields; a missing required field's error
/// names the near miss the body holds (`warnings::explain_missing`).
pub(super) fn report_of(
    obj: &serde_json::Map<String, Value>,
    now_ms: i64,
) -> Result<(validate::Report, Option<Warnings>), ApiError> {
    let r = validate::report(obj, now_ms).map_err(|e| warnings::explain_missing(obj, e))?;
    Ok((r, warnings::of(obj)))
}

/// Checks 4 to 7: the body as a report.
fn read_submission(
    ctx: &mut Ctx,
    now_ms: i64,
) -> Result<(validate::Report, Option<Warnings>), ApiError> {
    report_of(&read_body(ctx)?, now_ms)
}

/// A stored decimal text as a JSON number (`null` when it is none).
pub fn number(text: &str) -> Value {
    serde_json::from_str::<serde_json::Number>(text)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

pub fn accept(app: &App, ctx: &mut Ctx, site_id: &str) -> Result<Reply, ApiError> {
    let key_hash = super::bearer_key_hash(ctx)?;
    let conn = app.pool.get()?;
    let now = store::now_ms();
    // Checks 1 to 3, then the body (4 to 7), then order and session: the body is in memory already
    // (the connection's thread read it before the request came here, `http::PREREAD_BODY_LIMIT`),
    // so no read stays open while a client sends it. No common snapshot is needed: the writer
    // decides the order again.
    let (site, test, r, warned, known, resolved) = store::read_each(&conn, |conn| {
        let (site, test) = super::authorize_mode(app, conn, &key_hash, site_id)?;
        let (r, warned) = read_submission(ctx, now)?;
        let known = match &r.order_id {
            Some(order_id) => {
                store::conversions::find_order_in(conn, &site.id, order_id, Source::Api, test)?
            }
            None => None,
        };
        // A repeat already reported by this source needs no write at all.
        let resolved = match known {
            Some((_, true)) => Err(ApiError::NoSession),
            _ => resolve_session(conn, &site, &r),
        };
        Ok::<_, ApiError>((site, test, r, warned, known, resolved))
    })?;
    drop(conn);
    let order_known = match known {
        // The trust order (docs/decisions.md §3): the API's repeat changes nothing. It is
        // answered even when its session has left the window or the backlog is full.
        Some((rec, true)) => {
            app.metrics.inc_deduplicated_in(test);
            return Ok(accepted(app, &site.id, &rec, warned.as_ref()));
        }
        found => found.is_some(),
    };
    let session = match resolved {
        Ok(s) => Some(s),
        // A known order is taken over even when the API's identifiers resolve no session: it
        // keeps the pixel's. An unknown one is kept as unattributed when the site says so, else
        // a plain 422 that needs no write (so it is not a 503 when the database is busy).
        Err(ApiError::NoSession) if order_known || site.keep_unattributed => None,
        Err(e) => {
            if matches!(e, ApiError::NoSession) {
                app.metrics.inc_no_session_in(test);
            }
            return Err(e);
        }
    };

    // A new conversion, or the take-over of a pixel order, adds API outbox work: refuse it while
    // the API's backlog is at its limit. The pixel's backlog has a budget of its own.
    app.writer
        .admit_outbox_work(Source::Api)
        .inspect_err(|_| app.metrics.inc_unavailable())?;
    let user_data = r.user_data;
    let report = ApiReport {
        id: uuid::Uuid::now_v7().to_string(),
        site_id: site.id.clone(),
        order_id: r.order_id,
        kind: r.kind,
        session,
        keep_unattributed: site.keep_unattributed,
        visitor_id: r.visitor_id,
        client_id: r.client_id,
        value: r.value,
        currency: r.currency,
        occurred_at: r.occurred_at,
    };
    // Stored with the conversion it counts, in its transaction (`None`: no allocation).
    let example = warned.as_ref().map(Warnings::example);
    // Whether the order is new, the pixel's or already the API's is decided again inside the
    // writer's transaction: the snapshot above may be stale.
    let outcome = app
        .writer
        .submit(move |c| {
            let out = store::conversions::record_api_in(c, &report, user_data.as_ref(), test, now)?;
            if let (Some(example), ApiRecorded::Created(_) | ApiRecorded::TakenOver(_)) =
                (&example, &out)
            {
                store::field_warnings::add(c, &report.site_id, 1, example, now)?;
            }
            Ok(out)
        })
        .inspect_err(|e| super::count_unavailable(app, e))?;
    let rec = match outcome {
        ApiRecorded::Created(rec) => {
            app.metrics.inc_accepted_in(test);
            app.pipeline.wake();
            rec
        }
        ApiRecorded::TakenOver(rec) => {
            app.metrics.inc_deduplicated_in(test);
            app.pipeline.wake();
            rec
        }
        ApiRecorded::Repeat(rec) => {
            app.metrics.inc_deduplicated_in(test);
            rec
        }
        ApiRecorded::NoSession => {
            app.metrics.inc_no_session_in(test);
            return Err(ApiError::NoSession);
        }
    };
    Ok(accepted(app, &site.id, &rec, warned.as_ref()))
}

pub fn order_status(
    app: &App,
    ctx: &mut Ctx,
    site_id: &str,
    order_id: &str,
) -> Result<Reply, ApiError> {
    let key_hash = super::bearer_key_hash(ctx)?;
    let conn = app.pool.get()?;
    let (order, deliveries, adjustments) = store::read(&conn, |conn| {
        // A test key sees the site's test orders only, a live key its live ones.
        let (site, test) = super::authorize_mode(app, conn, &key_hash, site_id)?;
        let Some(order) = store::conversions::order_status_in(conn, &site.id, order_id, test)?
        else {
            return Err(ApiError::OrderNotFound);
        };
        let deliveries = store::deliveries::of_conversion(conn, &order.conversion.id)?;
        let adjustments = store::adjustments::of_conversion(conn, &order.conversion.id)?;
        let passed_on = store::adjustment_deliveries::of_conversion(conn, &order.conversion.id)?;
        Ok::<_, ApiError>((order, deliveries, (adjustments, passed_on)))
    })?;
    drop(conn);
    let (adjustments, passed_on) = adjustments;
    Ok(Reply::json(
        200,
        &order_json(&order, &deliveries, &adjustments, &passed_on)?,
    ))
}

/// The order status lookup's JSON: the order, its ledger and its deliveries, each adjustment with
/// its own (`passed_on`: by the adjustment's row id) (`convapi order show --json` prints the
/// same).
pub fn order_json(
    order: &OrderStatus,
    deliveries: &[store::deliveries::View],
    adjustments: &[store::adjustments::Adjustment],
    passed_on: &[(i64, store::deliveries::View)],
) -> Result<Value, store::StoreError> {
    let mut v = status_json(order);
    ledger_json(&mut v, order, adjustments, passed_on)?;
    v["deliveries"] = deliveries_json(deliveries);
    Ok(v)
}

/// Adds the order's ledger to its status view: `netValue`, `state`, `netReportingValue` (in the
/// site currency, at the order's rate; `null` while it has none) and `adjustments`, each with its
/// `deliveries` (`passed_on`: by the adjustment's row id).
pub fn ledger_json(
    v: &mut Value,
    order: &OrderStatus,
    adjustments: &[store::adjustments::Adjustment],
    passed_on: &[(i64, store::deliveries::View)],
) -> Result<(), store::StoreError> {
    match store::adjustments::net_shown(order.conversion.value.as_deref(), adjustments)? {
        Some(net) => {
            let reporting = store::adjustments::net_in_site_currency(order, net.value)?;
            v["netValue"] = number(&net.value.to_string());
            v["state"] = json!(net.state.as_str());
            v["netReportingValue"] = reporting.map_or(Value::Null, |r| number(&r.to_string()));
        }
        // A broken row (its value is no decimal): nothing to net, nothing adjusted.
        None => {
            v["netValue"] = Value::Null;
            v["state"] = json!(crate::ledger::State::Active.as_str());
            v["netReportingValue"] = Value::Null;
        }
    }
    v["adjustments"] = adjustments
        .iter()
        .map(|a| {
            json!({
                "adjustmentId": a.adjustment_id,
                "type": a.kind,
                "value": a.value.as_deref().map_or(Value::Null, number),
                "currency": a.currency,
                "occurredAt": store::iso(a.occurred_at),
                "receivedAt": store::iso(a.received_at),
                "reason": a.reason,
                "deliveries": deliveries_json(
                    &passed_on
                        .iter()
                        .filter(|(id, _)| *id == a.arrival)
                        .map(|(_, d)| d.clone())
                        .collect::<Vec<_>>()
                ),
            })
        })
        .collect();
    Ok(())
}

/// A conversion's deliveries to the site's destinations, as the order status lookup shows them.
pub fn deliveries_json(deliveries: &[store::deliveries::View]) -> Value {
    Value::Array(
        deliveries
            .iter()
            .map(|d| {
                json!({
                    "destinationId": d.destination_id,
                    "destination": d.destination,
                    "kind": d.kind,
                    "status": d.status,
                    "attempts": d.attempts,
                    "lastError": d.last_error,
                    "nextAttemptAt": d.next_attempt_at.map(store::iso),
                    "deliveredAt": d.delivered_at.map(store::iso),
                })
            })
            .collect(),
    )
}

/// The order status view's JSON: stored decimal texts as JSON numbers, times as RFC 3339.
pub fn status_json(o: &OrderStatus) -> Value {
    let number = |s: &Option<String>| -> Value {
        s.as_deref()
            .and_then(|t| serde_json::from_str::<serde_json::Number>(t).ok())
            .map(Value::Number)
            .unwrap_or(Value::Null)
    };
    let sources = o.sources();
    let attribution = match &o.attribution {
        Some(a) => json!({
            "model": a.model,
            "sessionId": a.session_id,
            "source": a.source,
            "medium": a.medium,
            "campaign": a.campaign,
        }),
        None => Value::Null,
    };
    let c = &o.conversion;
    json!({
        "eventId": c.id,
        "orderId": c.order_id,
        "type": c.kind,
        "sessionId": c.session_id,
        "sources": sources,
        "status": o.status,
        "value": number(&c.value),
        "currency": c.currency,
        "reportingValue": number(&o.fx.value),
        "reportingCurrency": o.fx.currency,
        "fxRate": number(&o.fx.rate),
        "fxDate": o.fx.date,
        "attribution": attribution,
        "occurredAt": store::iso(c.occurred_at),
        "processedAt": o.processed_at.map(store::iso),
        "attempts": o.attempts,
        "lastError": o.last_error,
        "pendingReason": o.pending_reason(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_202_prints_the_members_a_json_object_of_them_would() {
        for session_id in [Some("s1".to_owned()), None] {
            let rec = Recorded {
                event_id: "e1".into(),
                session_id: session_id.clone(),
                created: true,
            };
            let mut expected = json!({"success": true, "sessionId": session_id, "eventId": "e1"});
            if session_id.is_none() {
                expected["attributed"] = json!(false);
            }
            let body = serde_json::to_vec(&Accepted::of(&rec, None)).unwrap();
            assert_eq!(body, serde_json::to_vec(&expected).unwrap());
            assert_eq!(accepted_json(&rec, None), expected);
        }
    }
}
