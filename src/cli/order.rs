//! `convapi order ...`: an order's ledger (docs/decisions/api.md, "Adjustments"). `adjust` records
//! a refund, cancel or restate with the API's rules, refusals and codes (`ops::orders::adjust`), in
//! one transaction of the command's own connection, beside a running server; `show` prints the
//! order as the status lookup does.

use clap::Subcommand;
use serde_json::json;

use super::{open, print, CliError, CliResult};
use crate::ops::orders::{self, AdjustInput, OrderError};
use crate::store::{self, engine::Location};

#[derive(Subcommand)]
pub(super) enum OrderCmd {
    /// Record a refund, cancel or restate of an order (as the API's adjustments endpoint).
    Adjust(AdjustArgs),
    /// Show an order: its status, net value, state, ledger and deliveries.
    Show(ShowArgs),
}

#[derive(clap::Args)]
pub(super) struct AdjustArgs {
    /// The site's id (UUID).
    #[arg(long)]
    site: String,
    /// The order's id, as reported.
    #[arg(value_name = "ORDER_ID")]
    order_id: String,
    /// Your id of this adjustment (a payment provider's refund id fits); a repeat is answered as
    /// the first time.
    #[arg(long)]
    adjustment_id: String,
    /// refund (gives back --value), cancel (no --value) or restate (--value is the new total).
    #[arg(long = "type", value_name = "TYPE")]
    kind: String,
    /// The amount, in the order's currency.
    #[arg(long)]
    value: Option<String>,
    /// When it happened, RFC 3339 with an offset (default: now).
    #[arg(long)]
    occurred_at: Option<String>,
    /// Why, in at most 256 characters.
    #[arg(long)]
    reason: Option<String>,
    /// Print the answer as one JSON object (the API's 202 body).
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub(super) struct ShowArgs {
    /// The site's id (UUID).
    #[arg(long)]
    site: String,
    /// The order's id, as reported.
    #[arg(value_name = "ORDER_ID")]
    order_id: String,
    /// Print the order as one JSON object (the status lookup's).
    #[arg(long)]
    json: bool,
}

/// A refusal as one line: the API's code, then its words.
fn refused(e: OrderError) -> CliError {
    match e {
        OrderError::Store(e) => CliError::Store(e),
        e => CliError::Failed(format!("{}: {e}", e.code())),
    }
}

pub(super) fn adjust(db: &Location, a: AdjustArgs) -> CliResult {
    let input = AdjustInput {
        site_id: a.site,
        order_id: a.order_id.clone(),
        adjustment_id: a.adjustment_id.clone(),
        kind: a.kind,
        value: a.value,
        occurred_at: a.occurred_at,
        reason: a.reason,
    };
    let conn = open(db)?;
    let answer = store::write_tx(&conn, |tx| orders::adjust(tx, &input, store::now_ms()))
        .map_err(refused)?;
    let out = json!({
        "success": true,
        "orderId": a.order_id,
        "adjustmentId": a.adjustment_id,
        "eventId": answer.event_id,
        "netValue": crate::api::conversions::number(&answer.net_value),
        "state": answer.state,
    });
    print(a.json, &out, || {
        format!(
            "order {}: adjustment {} recorded; net value {}, {}",
            a.order_id, a.adjustment_id, answer.net_value, answer.state
        )
    })
}

pub(super) fn show(db: &Location, a: ShowArgs) -> CliResult {
    let conn = open(db)?;
    let order = store::read(&conn, |c| orders::show(c, &a.site, &a.order_id)).map_err(refused)?;
    let v = crate::api::conversions::order_json(
        &order.status,
        &order.deliveries,
        &order.adjustments,
        &order.adjustment_deliveries,
    )?;
    print(a.json, &v, || {
        let mut out = format!(
            "order {} ({}): {} {}, net {} ({}), {}",
            a.order_id,
            order.status.conversion.id,
            order.status.conversion.value.as_deref().unwrap_or("-"),
            order.status.conversion.currency,
            v["netValue"],
            v["state"].as_str().unwrap_or("-"),
            order.status.status,
        );
        for x in &order.adjustments {
            out.push_str(&format!(
                "\n  {}  {:<8} {:>14}  {}  {}",
                store::iso(x.occurred_at),
                x.kind,
                x.value.as_deref().unwrap_or("-"),
                x.adjustment_id,
                x.reason.as_deref().unwrap_or(""),
            ));
            for (_, d) in order
                .adjustment_deliveries
                .iter()
                .filter(|(id, _)| *id == x.arrival)
            {
                out.push_str(&format!(
                    "\n      → {} ({}): {}, {} tries{}",
                    d.destination,
                    d.kind,
                    d.status,
                    d.attempts,
                    d.last_error
                        .as_deref()
                        .map_or(String::new(), |e| format!(", {e}")),
                ));
            }
        }
        out
    })
}
