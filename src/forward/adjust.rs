//! Passing an order's adjustments (refunds, cancels, restates) on to the platforms that can take
//! them (docs/decisions.md §13, "Adjustments"): one batch of a destination's due
//! `adjustment_deliveries` at a time, after its conversion deliveries, by the same sender thread
//! and under the same claim of the destination (`sender.rs`).
//!
//! - An adjustment goes only after the order itself reached the destination: an order delivery
//!   that ended otherwise (skipped, failed, too old) makes its adjustments `skipped`, saying why.
//!   An order's adjustments go one at a time, in the order they arrived.
//! - Google Ads: `uploadConversionAdjustments`, keyed by the order's `orderId` and conversion
//!   action. Each adjustment sends the order's net value once it was admitted (its answer): a net
//!   of 0 is a `RETRACTION`, any other a `RESTATEMENT` to that absolute value. Its
//!   `adjustmentDateTime` is its `occurredAt`, moved past the conversion's time and a second past
//!   the order's adjustment sent before it, so that each of an order's is later than the last
//!   (Google keeps the latest): an adjustment that arrives late with an earlier `occurredAt`
//!   sends the net value as it is then, at a time after the last one sent. Held until 24 hours
//!   after the conversion's upload (Google refuses an earlier one); `too_old` past
//!   [`ADS_MAX_AGE_MS`] after the conversion.
//! - GA4: a `refund` event of the purchase for what the adjustment took off its net value; a
//!   restate upwards has no GA4 event (`not_supported`), one that changed nothing is `skipped`.
//! - Meta has no such API: those rows are `not_supported` from the start
//!   (`store::adjustment_deliveries::NOT_SUPPORTED`).
//! - Google Ads restates no retracted conversion: a restatement after a retraction (the order
//!   restated after a full refund, and what follows) answered `CONVERSION_ALREADY_RETRACTED` is
//!   `not_supported`, saying so; a retraction answered so is a repeat, in effect.
//!
//! A crash between a send and its record sends the adjustment again with the same fields (its time
//! depends only on what is committed), which Google answers as in effect
//! (`RESTATEMENT_ALREADY_EXISTS`, `CONVERSION_ALREADY_RETRACTED`).

use std::str::FromStr;

use rust_decimal::Decimal;

use super::ga4;
use super::google_ads::{self, AdjustmentUpload};
use super::kinds::{GA4, GOOGLE_ADS};
use super::platform::{self, AdjustVerdict, Http, Outage};
use super::Health;
use crate::store;
use crate::store::adjustment_deliveries::{self as rows, AdjustmentFacts, Due};
use crate::store::deliveries::{self, Facts, Status};
use crate::store::destinations::Destination;
use crate::store::engine::{AsConn, Conn};
use crate::worker::{self, Backoff};
use crate::writer::Writer;

/// How long after a conversion's upload Google Ads takes an adjustment of it.
pub const ADS_HOLD_MS: i64 = 24 * 3_600_000;
/// How old a conversion Google Ads takes an adjustment of (`CONVERSION_EXPIRED` past it).
pub const ADS_MAX_AGE_MS: i64 = 54 * 86_400_000;
/// Tries of an adjustment whose conversion Google does not know yet (`CONVERSION_NOT_FOUND`: a
/// conversion takes hours to appear) before it is a dead letter, [`NOT_FOUND_WAIT_MS`] apart.
pub const NOT_FOUND_TRIES: i64 = 12;
pub const NOT_FOUND_WAIT_MS: i64 = 2 * 3_600_000;
/// How long an adjustment of an order the pipeline has not processed yet waits before it looks
/// again.
pub const UNPROCESSED_WAIT_MS: i64 = 60_000;

/// The sender's retry policy, as it applies to conversions.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub max_attempts: i64,
    pub backoff: Backoff,
    /// The wait after refused credentials, and after throttling when the platform named none.
    pub unauthorized_pause_ms: i64,
    pub throttled_pause_ms: i64,
}

/// What becomes of one adjustment delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    Delivered {
        attempts: i64,
        sent_time: Option<i64>,
        note: Option<String>,
    },
    /// Due again at `at`, with this many tries counted.
    Again {
        attempts: i64,
        at: i64,
        error: String,
    },
    Final {
        status: &'static str,
        attempts: i64,
        sent_time: Option<i64>,
        reason: String,
    },
}

/// What one batch did: the fates written by status (`delivered`, `retried`, final statuses), and
/// whether a request failed as a whole.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    pub delivered: usize,
    pub retried: usize,
    pub finished: usize,
    pub outage: bool,
}

/// Whether a kind of destination's platform takes adjustments.
pub fn supported(kind: &str) -> bool {
    kind == GOOGLE_ADS.name || kind == GA4.name
}

/// One prepared adjustment: its row, the conversion's facts, its own, and (Google Ads) its time.
struct Ready<'a> {
    due: &'a Due,
    facts: Facts,
    adj: AdjustmentFacts,
    event_name: String,
    at_ms: i64,
}

/// Sends one batch of `dest`'s due adjustment deliveries and records what became of each and of
/// the destination (`paused_until`: the sender's circuit for an outage). Reads with `conn`, writes
/// through `writer`.
pub fn send_batch(
    conn: &impl AsConn,
    writer: &Writer,
    http: &Http,
    dest: &Destination,
    policy: Policy,
    paused_until: &dyn Fn(Option<&Outage>) -> Option<i64>,
    now_ms: i64,
) -> store::Result<Batch> {
    if !supported(&dest.kind) {
        return Ok(Batch::default());
    }
    let limit = if dest.kind == GA4.name {
        GA4.max_batch
    } else {
        google_ads::MAX_ADJUSTMENTS.min(GOOGLE_ADS.max_batch)
    };
    let due = rows::due(conn, &dest.id, now_ms, limit)?;
    if due.is_empty() {
        return Ok(Batch::default());
    }
    let mut fates: Vec<(i64, Fate)> = Vec::with_capacity(due.len());
    let mut ready = Vec::new();
    for d in &due {
        let (Some(adj), Some(facts)) = (
            rows::facts(conn, &dest.id, d)?,
            deliveries::facts(conn, &d.conversion_id)?,
        ) else {
            continue; // deleted since, with its rows
        };
        match decide(dest, d, facts, adj, now_ms) {
            Ok(r) => ready.push(r),
            Err(f) => fates.push((d.id, f)),
        }
    }
    let outage = if dest.kind == GA4.name {
        send_ga4(http, dest, &ready, policy, now_ms, &mut fates)
    } else {
        send_ads(http, dest, &ready, policy, now_ms, &mut fates)
    };
    let answered = !ready.is_empty() && outage.is_none();
    let until = paused_until(outage.as_ref());
    let mut batch = Batch {
        outage: outage.is_some(),
        ..Batch::default()
    };
    for (_, f) in &fates {
        match f {
            Fate::Delivered { .. } => batch.delivered += 1,
            Fate::Again { .. } => batch.retried += 1,
            Fate::Final { .. } => batch.finished += 1,
        }
    }
    if let Some(o) = &outage {
        log::warn!(
            "forward: destination {} ({}), adjustments: {}",
            dest.id,
            dest.kind,
            crate::text::printable(&o.to_string())
        );
    }
    record(writer, dest, fates, outage, answered, until, now_ms)?;
    Ok(batch)
}

/// Settles what needs no request (the order not delivered, too old, held, nothing to send), else
/// prepares the adjustment.
fn decide<'a>(
    dest: &Destination,
    d: &'a Due,
    facts: Facts,
    adj: AdjustmentFacts,
    now_ms: i64,
) -> Result<Ready<'a>, Fate> {
    let fin = |status: &'static str, reason: String| Fate::Final {
        status,
        attempts: d.attempts,
        sent_time: None,
        reason,
    };
    let skipped = |reason: String| fin(Status::Skipped.as_str(), reason);
    let delivered_at = match &adj.order_delivery {
        // Still in the pipeline (`queued`, `fx_pending`): its deliveries are not written yet.
        None if !matches!(adj.conversion_status.as_str(), "processed" | "failed") => {
            return Err(Fate::Again {
                attempts: d.attempts,
                at: now_ms + UNPROCESSED_WAIT_MS,
                error: "waits until the order is processed and passed on".into(),
            })
        }
        None => {
            return Err(skipped(
                "the order itself was not passed on to this destination (it does not receive \
                 its type, or was added after the order was processed)"
                    .into(),
            ))
        }
        Some((status, _, at)) if status == Status::Delivered.as_str() => {
            at.unwrap_or(facts.occurred_at)
        }
        Some((status, error, _)) => {
            let why = error.as_deref().map_or(String::new(), |e| format!(": {e}"));
            return Err(skipped(format!(
                "the order itself was not delivered to this destination ({status}{why})"
            )));
        }
    };
    let Some(event_name) = dest.events.get(&facts.conversion_type).cloned() else {
        return Err(skipped(format!(
            "the destination no longer sends conversions of type '{}'",
            facts.conversion_type
        )));
    };
    let mut at_ms = adj.occurred_at;
    if dest.kind == GOOGLE_ADS.name {
        let old = now_ms - facts.occurred_at;
        if old > ADS_MAX_AGE_MS {
            return Err(fin(
                Status::TooOld.as_str(),
                format!(
                    "the conversion is {} old; Google Ads takes adjustments of conversions up to \
                     {} days old",
                    platform::age(old),
                    ADS_MAX_AGE_MS / 86_400_000
                ),
            ));
        }
        let ready_at = delivered_at + ADS_HOLD_MS;
        if now_ms < ready_at {
            return Err(Fate::Again {
                attempts: d.attempts,
                at: ready_at,
                error: format!(
                    "held until {}: Google Ads takes an adjustment 24 hours after the conversion's \
                     upload",
                    store::iso(ready_at)
                ),
            });
        }
        at_ms = ads_time(&adj, facts.occurred_at);
    } else {
        match refunded(&adj) {
            Some(v) if v > Decimal::ZERO => {}
            Some(v) if v < Decimal::ZERO => {
                return Err(fin(
                    rows::NOT_SUPPORTED_STATUS,
                    format!(
                        "GA4 has no event that raises a purchase's value: the restate from {} to \
                         {} is not passed on",
                        adj.net_before.as_deref().unwrap_or("0"),
                        adj.net_after
                    ),
                ))
            }
            Some(_) => {
                return Err(skipped(format!(
                    "the order's net value did not change ({}): nothing to refund",
                    adj.net_after
                )))
            }
            None => {
                return Err(fin(
                    Status::Failed.as_str(),
                    format!(
                        "the order's net value ({:?} before, {:?} after) is not a decimal number",
                        adj.net_before, adj.net_after
                    ),
                ))
            }
        }
    }
    Ok(Ready {
        due: d,
        facts,
        adj,
        event_name,
        at_ms,
    })
}

/// The adjustment time sent to Google Ads: its `occurredAt`, at least a second after the
/// conversion's time and after the order's adjustment sent before it, in whole seconds (the
/// format's precision).
pub fn ads_time(adj: &AdjustmentFacts, conversion_at: i64) -> i64 {
    let second = |ms: i64| ms.div_euclid(1_000) * 1_000;
    let mut t = second(adj.occurred_at + 999);
    t = t.max(second(conversion_at) + 1_000);
    if let Some(last) = adj.last_sent_time {
        t = t.max(second(last) + 1_000);
    }
    t
}

fn decimal(text: &str) -> Option<Decimal> {
    Decimal::from_str(text.trim()).ok()
}

/// What the adjustment took off the order's net value (negative: it raised it); `None` when a
/// stored value is no decimal.
pub fn refunded(adj: &AdjustmentFacts) -> Option<Decimal> {
    let before = match adj.net_before.as_deref() {
        Some(t) => decimal(t)?,
        None => Decimal::ZERO,
    };
    Some((before - decimal(&adj.net_after)?).normalize())
}

/// GA4: one `refund` request per adjustment; an outage leaves the rest for later.
fn send_ga4(
    http: &Http,
    dest: &Destination,
    ready: &[Ready<'_>],
    policy: Policy,
    now_ms: i64,
    fates: &mut Vec<(i64, Fate)>,
) -> Option<Outage> {
    let mut outage = None;
    for r in ready {
        let v = match &outage {
            Some(o) => Err(Outage::clone(o)),
            None => {
                let value = refunded(&r.adj).map(|v| v.to_string()).unwrap_or_default();
                ga4::send_refund(http, dest, &r.facts, &value, r.at_ms, now_ms)
            }
        };
        if let Some(f) = fate(r, v, None, policy, now_ms, &mut outage) {
            fates.push((r.due.id, f));
        }
    }
    outage
}

/// Google Ads: the batch as one request; refused as a whole as invalid, one by one.
fn send_ads(
    http: &Http,
    dest: &Destination,
    ready: &[Ready<'_>],
    policy: Policy,
    now_ms: i64,
    fates: &mut Vec<(i64, Fate)>,
) -> Option<Outage> {
    if ready.is_empty() {
        return None;
    }
    let uploads: Vec<AdjustmentUpload<'_>> = ready.iter().map(upload).collect();
    let verdicts: Vec<Result<AdjustVerdict, Outage>> =
        match google_ads::send_adjustments(http, dest, &uploads, now_ms) {
            Ok(v) if v.len() == ready.len() => v.into_iter().map(Ok).collect(),
            Ok(v) => vec![
                Err(Outage::Transient(format!(
                    "the Google Ads mapping gave {} answers for {} adjustments",
                    v.len(),
                    ready.len()
                )));
                ready.len()
            ],
            Err(Outage::Rejected(_)) if ready.len() > 1 => uploads
                .iter()
                .map(|u| {
                    google_ads::send_adjustments(http, dest, std::slice::from_ref(u), now_ms)
                        .map(|mut v| v.pop().unwrap_or(AdjustVerdict::Delivered))
                })
                .collect(),
            Err(o) => vec![Err(o); ready.len()],
        };
    let mut outage = None;
    for (r, v) in ready.iter().zip(verdicts) {
        if let Some(f) = fate(r, v, Some(r.at_ms), policy, now_ms, &mut outage) {
            fates.push((r.due.id, f));
        }
    }
    outage
}

fn upload<'a>(r: &'a Ready<'_>) -> AdjustmentUpload<'a> {
    let zero = decimal(&r.adj.net_after).is_some_and(|v| v.is_zero());
    AdjustmentUpload {
        facts: &r.facts,
        event_name: &r.event_name,
        at_ms: r.at_ms,
        restated: (!zero).then_some(r.adj.net_after.as_str()),
    }
}

/// The fate of `r` from the platform's answer (`sent_time`: the time sent, Google Ads'); the first
/// outage is kept in `outage`. `None`: nothing of it is written.
fn fate(
    r: &Ready<'_>,
    v: Result<AdjustVerdict, Outage>,
    sent_time: Option<i64>,
    policy: Policy,
    now_ms: i64,
    outage: &mut Option<Outage>,
) -> Option<Fate> {
    let d = r.due;
    let tried = d.attempts + 1;
    let fin = |status: &'static str, reason: String| Fate::Final {
        status,
        attempts: tried,
        sent_time,
        reason,
    };
    let again = |error: String, after_ms: Option<i64>, counts: bool| {
        let attempts = d.attempts + i64::from(counts);
        if counts && attempts >= policy.max_attempts {
            return Fate::Final {
                status: Status::Failed.as_str(),
                attempts,
                sent_time,
                reason: format!("{error} (gave up after {attempts} tries)"),
            };
        }
        let wait = after_ms
            .unwrap_or(0)
            .max(policy.backoff.delay_ms(attempts.max(1), worker::jitter()));
        Fate::Again {
            attempts,
            at: now_ms + wait,
            error,
        }
    };
    let o = match v {
        Ok(AdjustVerdict::Delivered) => {
            return Some(Fate::Delivered {
                attempts: tried,
                sent_time,
                note: None,
            })
        }
        Ok(AdjustVerdict::InEffect(note)) => {
            return Some(Fate::Delivered {
                attempts: tried,
                sent_time,
                note: Some(format!("in effect already: {note}")),
            })
        }
        Ok(AdjustVerdict::Retry { error, after_ms }) => return Some(again(error, after_ms, true)),
        Ok(AdjustVerdict::Hold { error, after_ms }) => {
            return Some(Fate::Again {
                attempts: d.attempts,
                at: now_ms + after_ms,
                error,
            })
        }
        Ok(AdjustVerdict::NotFound(error)) if tried >= NOT_FOUND_TRIES => {
            return Some(fin(
                Status::Failed.as_str(),
                format!("{error} (the conversion was not found after {tried} tries)"),
            ))
        }
        Ok(AdjustVerdict::NotFound(error)) => {
            return Some(Fate::Again {
                attempts: tried,
                at: now_ms + NOT_FOUND_WAIT_MS,
                error,
            })
        }
        Ok(AdjustVerdict::TooOld(e)) => return Some(fin(Status::TooOld.as_str(), e)),
        Ok(AdjustVerdict::NotSupported(e)) => return Some(fin(rows::NOT_SUPPORTED_STATUS, e)),
        Ok(AdjustVerdict::Failed(e)) => return Some(fin(Status::Failed.as_str(), e)),
        Err(o @ Outage::VersionGone { .. }) => {
            outage.get_or_insert(o);
            return None;
        }
        Err(o) => o,
    };
    let f = match &o {
        Outage::Transient(e) => again(e.clone(), None, true),
        Outage::Throttled {
            error,
            retry_after_ms,
        } => again(
            error.clone(),
            Some(retry_after_ms.unwrap_or(policy.throttled_pause_ms)),
            false,
        ),
        Outage::Unauthorized(e) => again(e.clone(), Some(policy.unauthorized_pause_ms), false),
        Outage::Rejected(e) => fin(Status::Failed.as_str(), e.clone()),
        Outage::VersionGone { .. } => unreachable!("handled above"),
    };
    if !matches!(o, Outage::Rejected(_)) {
        outage.get_or_insert(o);
    }
    Some(f)
}

/// Writes each fate and the destination's health as one job of the writer.
fn record(
    writer: &Writer,
    dest: &Destination,
    fates: Vec<(i64, Fate)>,
    outage: Option<Outage>,
    answered: bool,
    paused_until: Option<i64>,
    now_ms: i64,
) -> store::Result<()> {
    let writes: Vec<(i64, Fate)> = fates
        .into_iter()
        .map(|(id, mut f)| {
            if let Fate::Again { error: text, .. } | Fate::Final { reason: text, .. } = &mut f {
                *text = platform::shown(text, dest);
            }
            (id, f)
        })
        .collect();
    let health = Health::after(dest, outage, answered, paused_until);
    writer
        .submit(move |c| {
            for (id, fate) in &writes {
                write_fate(c, *id, fate, now_ms)?;
            }
            health.write(c, now_ms)
        })
        .map_err(|e| e.into_store_error("forward"))
}

fn write_fate(c: &Conn, id: i64, fate: &Fate, now_ms: i64) -> store::Result<()> {
    match fate {
        Fate::Delivered {
            attempts,
            sent_time,
            note,
        } => rows::delivered(c, id, *attempts, *sent_time, note.as_deref(), now_ms)?,
        Fate::Again {
            attempts,
            at,
            error,
        } => rows::retry(c, id, *attempts, *at, error)?,
        Fate::Final {
            status,
            attempts,
            sent_time,
            reason,
        } => rows::finish(c, id, status, *attempts, *sent_time, reason)?,
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adj(
        occurred_at: i64,
        last: Option<i64>,
        before: Option<&str>,
        after: &str,
    ) -> AdjustmentFacts {
        AdjustmentFacts {
            kind: "refund".into(),
            adjustment_id: "a".into(),
            occurred_at,
            net_after: after.into(),
            net_before: before.map(Into::into),
            order_delivery: None,
            conversion_status: "processed".into(),
            last_sent_time: last,
        }
    }

    #[test]
    fn google_ads_times_are_whole_seconds_after_the_conversion_and_the_last_sent() {
        // Its own time, rounded up to a second.
        assert_eq!(ads_time(&adj(10_500, None, None, "1"), 1_000), 11_000);
        // Never at or before the conversion's second.
        assert_eq!(ads_time(&adj(5_000, None, None, "1"), 5_400), 6_000);
        // After the last one sent: a late adjustment with an earlier time goes after it.
        assert_eq!(
            ads_time(&adj(3_000, Some(20_000), None, "1"), 1_000),
            21_000
        );
    }

    #[test]
    fn refunded_is_the_drop_of_the_net_value() {
        assert_eq!(
            refunded(&adj(0, None, Some("100"), "70")),
            Some(Decimal::new(30, 0))
        );
        assert_eq!(refunded(&adj(0, None, None, "0")), Some(Decimal::ZERO));
        assert_eq!(
            refunded(&adj(0, None, Some("50"), "80")),
            Some(Decimal::new(-30, 0))
        );
    }

    #[test]
    fn every_platform_either_takes_adjustments_or_is_marked_not_supported() {
        for kind in [super::super::kinds::META.name, GA4.name, GOOGLE_ADS.name] {
            assert!(supported(kind) != (kind == rows::NOT_SUPPORTED.0), "{kind}");
        }
    }
}
