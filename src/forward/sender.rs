//! The sender (docs/decisions.md §13): drains the `deliveries` the pipeline writes, one
//! destination at a time per thread, in batches within the platform's limit.
//!
//! A few threads (`serve --forward-threads`, 2 by default, one [`Worker`]) each with a database
//! connection of their own for reads; every outcome goes through the request writer, one job per
//! batch, like the pipeline's. A thread takes a destination (in-process, and on PostgreSQL with an
//! advisory lock so one node sends it), reads its due deliveries, and shapes a batch like the
//! pipeline's chunk: `decide` reads their facts and settles those whose consent rule does not
//! hold (`skipped`) or that the platform would refuse (`too_old`), `send` sends the rest as one
//! request, and `record` stores the `Fate` of each ([`Status`] names the stored statuses,
//! [`Outcome`] what `/metrics` counts). A crash between the send and the
//! commit leaves the deliveries pending: they are sent again with the same dedup key (the order
//! id), which every platform recognises.
//!
//! What goes wrong is kept to its destination:
//! - a request that fails as a whole (no answer, 5xx, throttled, refused credentials) reschedules
//!   its events and counts a failure of the destination; after [`CIRCUIT_AFTER`] in a row its
//!   circuit opens ([`pause_ms`]): nothing is sent to it until then, while the other threads go on
//!   with the other destinations;
//! - a request refused as invalid as a whole is sent again event by event, so one bad event is
//!   the only one failed;
//! - an event refused for good is a dead letter (`failed`); one that keeps failing is one after
//!   [`MAX_ATTEMPTS`] tries, with backoff and jitter between them (about 15 hours in all).
//!
//! What one tenant's destinations do is kept to that tenant: its destinations hold at most
//! [`per_tenant`] of the threads at once (one of the default two), so a tenant whose endpoints
//! never answer delays its own deliveries, not another's; a destination whose last request failed
//! is served after those that answer, and a new one after the healthy ones
//! (`deliveries::due_destinations`); a site has at most [`super::MAX_DESTINATIONS_PER_SITE`].
//!
//! Budget: at most `threads` requests in flight, each within [`REQUEST_TIMEOUT`], at most
//! [`per_tenant`] of them for one tenant; a batch holds at most the platform's limit of events;
//! an answer is read up to `MAX_ANSWER_BYTES`; idle connections are kept per host and few; only
//! public addresses and the operator's `reach` are connected to (`platform::Http`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::platform::{self, Event, Http, Outage, Platform, Reach, Verdict, REQUEST_TIMEOUT};
use super::Health;
use crate::metrics::Metrics;
use crate::ratelimit::{KeyedPlace, KeyedPlaces};
use crate::store::deliveries::{self, Due, DueDestination, Facts, Status};
use crate::store::destinations::{self, Destination};
use crate::store::engine::{AsConn, Conn};
use crate::store::engine::{Lasting, Location};
use crate::store::{self, StoreError};
use crate::worker::{self, Backoff, Stop, Worker};
use crate::writer::Writer;

/// Tries after which a delivery that keeps failing is a dead letter.
pub const MAX_ATTEMPTS: i64 = 24;
/// The delay after the first failed try; it doubles with each further one, up to the cap.
pub const BACKOFF_BASE_MS: i64 = 5_000;
pub const BACKOFF_CAP_MS: i64 = 3_600_000;
/// The delay before a failed delivery's next try, with jitter.
pub const BACKOFF: Backoff = Backoff {
    base_ms: BACKOFF_BASE_MS,
    cap_ms: BACKOFF_CAP_MS,
};
/// Failed requests in a row after which a destination's circuit opens.
pub const CIRCUIT_AFTER: i64 = 3;
/// How long the circuit stays open the first time; it doubles with each further failure, up to
/// the cap.
pub const CIRCUIT_BASE_MS: i64 = 30_000;
pub const CIRCUIT_CAP_MS: i64 = 600_000;
/// How long a destination's circuit stays open, without jitter.
pub const CIRCUIT: Backoff = Backoff {
    base_ms: CIRCUIT_BASE_MS,
    cap_ms: CIRCUIT_CAP_MS,
};
/// How long a destination whose credentials were refused waits before it is tried again.
pub const UNAUTHORIZED_PAUSE_MS: i64 = 900_000;
/// How long a destination whose API version the platform answered is gone waits before the sender
/// looks at it again (it sends only once the destination is on another version).
pub const VERSION_GONE_PAUSE_MS: i64 = 3_600_000;
/// How long a throttled destination waits when the platform named no time.
pub const THROTTLED_PAUSE_MS: i64 = 60_000;
/// The longest a sender thread sleeps without looking for due deliveries.
pub const POLL: Duration = Duration::from_secs(1);

/// How the sender runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Sender threads: at most this many requests to platforms at a time. 0: nothing is sent
    /// (deliveries wait).
    pub threads: usize,
    /// The time limit of one request.
    pub timeout: Duration,
    /// Where requests may go: public addresses, and the non-public ones the operator allows
    /// (`serve --forward-private-endpoints`).
    pub reach: Reach,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: 2,
            timeout: REQUEST_TIMEOUT,
            reach: Reach::default(),
        }
    }
}

/// Sender threads one tenant's destinations may hold at once: all but one of `threads` (at least
/// one), so another tenant always finds a thread.
pub fn per_tenant(threads: usize) -> usize {
    threads.saturating_sub(1).max(1)
}

/// What one pass did, in deliveries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendStats {
    pub delivered: usize,
    /// Test orders sent to the platforms' test endpoints (stored `delivered`, with the verdict).
    pub tested: usize,
    pub retried: usize,
    pub failed: usize,
    pub too_old: usize,
    pub skipped: usize,
    /// Requests that failed as a whole.
    pub outages: usize,
    /// Adjustment deliveries whose fate was written (`adjust.rs`).
    pub adjustments: usize,
}

/// The destinations in this process's hands, so two of its threads never send one together, and
/// a place per destination in hand among its tenant's, so one tenant never holds more than
/// `per_tenant` threads ([`KeyedPlaces`]).
pub struct InHand {
    ids: Mutex<HashSet<String>>,
    tenants: KeyedPlaces,
}

/// A destination in a thread's hands: given back (the id and its tenant's place) when dropped.
struct Held<'a> {
    in_hand: &'a InHand,
    id: &'a str,
    _place: KeyedPlace,
}

impl InHand {
    pub fn new(per_tenant: usize) -> InHand {
        InHand {
            ids: Mutex::default(),
            // No bound of its own in total: each sender thread holds one destination at most.
            tenants: KeyedPlaces::new(usize::MAX, per_tenant),
        }
    }

    fn take<'a>(&'a self, d: &'a DueDestination) -> Option<Held<'a>> {
        let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        if ids.contains(&d.id) {
            return None;
        }
        let place = self.tenants.take(&d.tenant_id).ok()?;
        ids.insert(d.id.clone());
        Some(Held {
            in_hand: self,
            id: &d.id,
            _place: place,
        })
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.in_hand
            .ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(self.id);
    }
}

/// The delay before try `attempts + 1`, given `attempts` failed ones: [`BACKOFF`], jittered.
pub fn backoff_ms(attempts: i64, jitter: f64) -> i64 {
    BACKOFF.delay_ms(attempts, jitter)
}

/// How long a destination's circuit opens after its `failures`-th failed request in a row
/// (`None`: not yet, below [`CIRCUIT_AFTER`]): [`CIRCUIT`], from the first failure that opens it.
pub fn pause_ms(failures: i64) -> Option<i64> {
    (failures >= CIRCUIT_AFTER).then(|| CIRCUIT.delay_ms(failures - CIRCUIT_AFTER + 1, 1.0))
}

/// Sends what is due at `now_ms` to every destination not in another sender's hands, once each
/// (tests drive it with a clock of their own). Reads with `conn`, writes through `writer`.
pub fn drain_once(
    conn: &impl AsConn,
    writer: &Writer,
    metrics: &Metrics,
    http: &Http,
    now_ms: i64,
) -> store::Result<SendStats> {
    let mut stats = SendStats::default();
    let in_hand = InHand::new(1);
    for due in deliveries::due_destinations(conn, now_ms)? {
        send_destination(
            conn, writer, metrics, http, &in_hand, &due, now_ms, &mut stats,
        )?;
    }
    Ok(stats)
}

/// One batch of one destination, if it is free: taken, sent, its outcomes written, given back.
/// Returns whether it was free.
#[allow(clippy::too_many_arguments)]
fn send_destination(
    conn: &impl AsConn,
    writer: &Writer,
    metrics: &Metrics,
    http: &Http,
    in_hand: &InHand,
    due: &DueDestination,
    now_ms: i64,
    stats: &mut SendStats,
) -> store::Result<bool> {
    let Some(_held) = in_hand.take(due) else {
        return Ok(false);
    };
    let id = due.id.as_str();
    if !deliveries::claim(conn, id)? {
        return Ok(false);
    }
    let sent = send_batch(conn, writer, metrics, http, id, now_ms, stats)
        .and_then(|()| send_adjustments(conn, writer, http, id, now_ms, stats));
    let released = deliveries::release(conn, id);
    sent?;
    released?;
    Ok(true)
}

/// What becomes of one delivery.
#[derive(Debug)]
enum Fate {
    Delivered {
        attempts: i64,
    },
    /// A test order sent to the platform's test endpoint, with the platform's verdict.
    Tested {
        attempts: i64,
        verdict: String,
    },
    /// Due again at the time given, with this many tries counted.
    Again {
        attempts: i64,
        at: i64,
        error: String,
    },
    Final {
        status: Status,
        attempts: i64,
        reason: String,
    },
}

impl Fate {
    fn outcome(&self) -> Outcome {
        match self {
            Fate::Delivered { .. } => Outcome::Delivered,
            // A test send is no live delivery: counted apart.
            Fate::Tested { .. } => Outcome::Tested,
            Fate::Again { .. } => Outcome::Retried,
            Fate::Final { status, .. } => Outcome::from(*status),
        }
    }
}

/// What became of a delivery in one pass, as `/metrics` counts it (`Outage`: a request that
/// failed as a whole; `Tested`: a test order sent to the platform's test endpoint, stored as
/// `delivered` with its verdict). A final one is its stored [`Status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    Tested,
    Retried,
    Failed,
    TooOld,
    Skipped,
    Outage,
}

impl Outcome {
    const ALL: [Outcome; 7] = [
        Outcome::Delivered,
        Outcome::Tested,
        Outcome::Retried,
        Outcome::Failed,
        Outcome::TooOld,
        Outcome::Skipped,
        Outcome::Outage,
    ];

    /// Its label in `/metrics`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Delivered => Status::Delivered.as_str(),
            Outcome::Tested => "tested",
            Outcome::Retried => "retried",
            Outcome::Failed => Status::Failed.as_str(),
            Outcome::TooOld => Status::TooOld.as_str(),
            Outcome::Skipped => Status::Skipped.as_str(),
            Outcome::Outage => "outage",
        }
    }
}

impl From<Status> for Outcome {
    /// A delivery left pending after its try was retried.
    fn from(s: Status) -> Outcome {
        match s {
            Status::Pending => Outcome::Retried,
            Status::Delivered => Outcome::Delivered,
            Status::Failed => Outcome::Failed,
            Status::TooOld => Outcome::TooOld,
            Status::Skipped => Outcome::Skipped,
        }
    }
}

/// What [`decide`] made of a batch's due deliveries: those settled without a request, and those
/// to send with their facts and event name.
struct Decided<'a> {
    fates: Vec<(&'a Due, Fate)>,
    /// Each with whether it is a test order.
    ready: Vec<(&'a Due, Facts, String, bool)>,
}

/// One batch of one destination: [`decide`] what to send, [`send`] it, [`record`] what became of
/// each delivery and of the destination, then count it.
fn send_batch(
    conn: &impl AsConn,
    writer: &Writer,
    metrics: &Metrics,
    http: &Http,
    id: &str,
    now_ms: i64,
    stats: &mut SendStats,
) -> store::Result<()> {
    let Some((dest, platform)) = sendable(conn, writer, id, now_ms)? else {
        return Ok(());
    };
    let due = deliveries::due(conn, id, now_ms, platform.kind().max_batch)?;
    if due.is_empty() {
        return Ok(());
    }
    let Decided { mut fates, ready } = decide(conn, platform, &dest, &due, now_ms)?;
    let outage = send(platform, http, &dest, &ready, now_ms, &mut fates);
    let answered = !ready.is_empty() && outage.is_none();
    let paused_until = paused_until(&dest, outage.as_ref(), now_ms);
    if let Some(o) = &outage {
        stats.outages += 1;
        log::warn!(
            "forward: destination {id} ({}): {}{}",
            dest.kind,
            crate::text::printable(&o.to_string()),
            paused_until.map_or(String::new(), |t| format!(
                "; paused until {}",
                store::iso(t)
            ))
        );
    }
    let mut counted = [0u64; Outcome::ALL.len()];
    for (_, f) in &fates {
        counted[f.outcome() as usize] += 1;
    }
    // One per request that failed as a whole.
    counted[Outcome::Outage as usize] = u64::from(outage.is_some());
    record(writer, &dest, fates, outage, answered, paused_until, now_ms)?;
    // Counted once committed.
    count(metrics, stats, &dest, counted);
    Ok(())
}

/// One batch of the destination's due adjustments of orders (`adjust.rs`), after its conversions.
fn send_adjustments(
    conn: &impl AsConn,
    writer: &Writer,
    http: &Http,
    id: &str,
    now_ms: i64,
    stats: &mut SendStats,
) -> store::Result<()> {
    let Some((dest, _)) = sendable(conn, writer, id, now_ms)? else {
        return Ok(());
    };
    let policy = super::adjust::Policy {
        max_attempts: MAX_ATTEMPTS,
        backoff: BACKOFF,
        unauthorized_pause_ms: UNAUTHORIZED_PAUSE_MS,
        throttled_pause_ms: THROTTLED_PAUSE_MS,
    };
    let until = |o: Option<&Outage>| paused_until(&dest, o, now_ms);
    let b = super::adjust::send_batch(conn, writer, http, &dest, policy, &until, now_ms)?;
    stats.adjustments += b.delivered + b.retried + b.finished;
    stats.outages += usize::from(b.outage);
    Ok(())
}

/// The destination `id` with its platform, when something may be sent to it now. A destination
/// still on the API version its platform said is gone gets that recorded again instead (its
/// deliveries wait).
fn sendable(
    conn: &impl AsConn,
    writer: &Writer,
    id: &str,
    now_ms: i64,
) -> store::Result<Option<(Destination, &'static dyn Platform)>> {
    let Some(dest) = destinations::by_id(conn, id)? else {
        return Ok(None);
    };
    if !dest.enabled || dest.health.paused_until.is_some_and(|until| until > now_ms) {
        return Ok(None);
    }
    if !super::versions::sendable(&dest) {
        // Still on the version the platform said is gone: nothing is sent, the deliveries wait.
        let (dest_id, version) = (dest.id.clone(), dest.health.version_gone.clone());
        let error = dest.health.last_error.clone().unwrap_or_default();
        writer
            .submit(move |c| {
                destinations::record_version_gone(
                    c,
                    &dest_id,
                    version.as_deref().unwrap_or_default(),
                    &error,
                    now_ms + VERSION_GONE_PAUSE_MS,
                    now_ms,
                )
            })
            .map_err(|e| e.into_store_error("forward"))?;
        return Ok(None);
    }
    let Some(platform) = super::platform(&dest.kind) else {
        log::error!(
            "forward: destination {id} is of kind '{}', which this binary does not know",
            crate::text::printable(&dest.kind)
        );
        return Ok(None);
    };
    Ok(Some((dest, platform)))
}

/// Settles what needs no request — a conversion deleted since, no consent, a type the destination
/// no longer sends, what the platform would refuse ([`Platform::check`]) — and reads the facts of
/// the rest.
fn decide<'a>(
    conn: &impl AsConn,
    platform: &dyn Platform,
    dest: &Destination,
    due: &'a [Due],
    now_ms: i64,
) -> store::Result<Decided<'a>> {
    let mut fates = Vec::with_capacity(due.len());
    let mut ready = Vec::with_capacity(due.len());
    for d in due {
        // A conversion deleted since (forget, retention) took its deliveries with it.
        let Some((facts, test)) = deliveries::facts_with_mode(conn, &d.conversion_id)? else {
            continue;
        };
        let final_ = |status, reason: String| Fate::Final {
            status,
            attempts: d.attempts,
            reason,
        };
        if !platform::consent_holds(&dest.consent, platform::consent(&facts)) {
            fates.push((d, final_(Status::Skipped, consent_reason(&dest.consent))));
            continue;
        }
        let Some(name) = dest.events.get(&facts.conversion_type).cloned() else {
            let reason = format!(
                "the destination no longer sends conversions of type '{}'",
                facts.conversion_type
            );
            fates.push((d, final_(Status::Skipped, reason)));
            continue;
        };
        let event = Event {
            delivery_id: d.id,
            facts: &facts,
            name: &name,
        };
        if let Some((status, reason)) = platform.check(dest, &event, now_ms) {
            fates.push((d, final_(checked(status), reason)));
            continue;
        }
        // A test order goes to the platform's test endpoint or nowhere.
        if let Some(reason) = test.then(|| platform.test_refusal(dest)).flatten() {
            fates.push((d, final_(Status::Skipped, reason)));
            continue;
        }
        ready.push((d, facts, name, test));
    }
    Ok(Decided { fates, ready })
}

/// The final status a [`Platform::check`] names (`too_old` or `skipped`).
fn checked(status: &str) -> Status {
    match Status::parse(status) {
        Some(s @ (Status::TooOld | Status::Skipped | Status::Failed)) => s,
        _ => {
            debug_assert!(false, "a check named the status '{status}'");
            Status::Skipped
        }
    }
}

/// Sends the `ready` deliveries as one request ([`deliver`]) and adds the fate of each to
/// `fates`. Returns the outage of the request as a whole, if any.
fn send<'a>(
    platform: &dyn Platform,
    http: &Http,
    dest: &Destination,
    ready: &[(&'a Due, Facts, String, bool)],
    now_ms: i64,
    fates: &mut Vec<(&'a Due, Fate)>,
) -> Option<Outage> {
    if ready.is_empty() {
        return None;
    }
    let (tests, live): (Vec<_>, Vec<_>) = ready.iter().partition(|(_, _, _, test)| *test);
    fn event<'e>((d, f, name, _): &&'e (&Due, Facts, String, bool)) -> Event<'e> {
        Event {
            delivery_id: d.id,
            facts: f,
            name,
        }
    }
    let mut outage = None;
    if !live.is_empty() {
        let events: Vec<Event<'_>> = live.iter().map(event).collect();
        for ((d, _, _, _), v) in live
            .iter()
            .zip(deliver(platform, http, dest, &events, now_ms))
        {
            if let Some(fate) = fate(d, v, now_ms, &mut outage) {
                fates.push((d, fate));
            }
        }
    }
    // Test orders one by one, each to the platform's test endpoint (Meta with the destination's
    // test_event_code, GA4's validation server, Google Ads with validate_only), never with the
    // live ones; the platform's verdict is kept on the delivery.
    for t in &tests {
        let d = t.0;
        let sent = platform.test(http, dest, &event(t), now_ms);
        let f = match sent {
            Ok(verdict) => Some(Fate::Tested {
                attempts: d.attempts + 1,
                verdict: format!("test send: {verdict}"),
            }),
            Err(o) => fate(d, Err(o), now_ms, &mut outage),
        };
        if let Some(f) = f {
            fates.push((d, f));
        }
    }
    outage
}

/// The fate of `d` from the platform's answer; the first outage of the request is kept in
/// `outage`. `None`: nothing of it is written.
fn fate(
    d: &Due,
    v: Result<Verdict, Outage>,
    now_ms: i64,
    outage: &mut Option<Outage>,
) -> Option<Fate> {
    let failed = |reason| Fate::Final {
        status: Status::Failed,
        attempts: d.attempts + 1,
        reason,
    };
    let o = match v {
        Ok(Verdict::Delivered) => {
            return Some(Fate::Delivered {
                attempts: d.attempts + 1,
            })
        }
        Ok(Verdict::Failed(reason)) => return Some(failed(reason)),
        Ok(Verdict::Retry { error, after_ms }) => {
            return Some(again(d, error, after_ms, true, now_ms))
        }
        // Not the event's fault: it waits as it is, due, until the destination is moved to
        // another version; nothing of it is written.
        Err(o @ Outage::VersionGone { .. }) => {
            outage.get_or_insert(o);
            return None;
        }
        Err(o) => o,
    };
    let f = match &o {
        Outage::Transient(e) => again(d, e.clone(), None, true, now_ms),
        // Not the event's fault: its tries are not counted.
        Outage::Throttled {
            error,
            retry_after_ms,
        } => {
            let wait = retry_after_ms.unwrap_or(THROTTLED_PAUSE_MS);
            again(d, error.clone(), Some(wait), false, now_ms)
        }
        Outage::Unauthorized(e) => again(d, e.clone(), Some(UNAUTHORIZED_PAUSE_MS), false, now_ms),
        Outage::Rejected(e) => failed(e.clone()),
        Outage::VersionGone { .. } => unreachable!("handled above"),
    };
    if !matches!(o, Outage::Rejected(_)) {
        outage.get_or_insert(o);
    }
    Some(f)
}

/// Until when the destination pauses after `outage`: the platform's wait, or its circuit's.
fn paused_until(dest: &Destination, outage: Option<&Outage>, now_ms: i64) -> Option<i64> {
    outage.and_then(|o| match o {
        Outage::Throttled { retry_after_ms, .. } => {
            Some(now_ms + retry_after_ms.unwrap_or(THROTTLED_PAUSE_MS))
        }
        Outage::Unauthorized(_) => Some(now_ms + UNAUTHORIZED_PAUSE_MS),
        Outage::VersionGone { .. } => Some(now_ms + VERSION_GONE_PAUSE_MS),
        _ => pause_ms(dest.health.failures + 1).map(|p| now_ms + p),
    })
}

/// Writes the fate of each delivery and the destination's health (its outage, or that it
/// answered) as one job of the writer. What a platform said is stored as the site's people will
/// read it: no credential, bounded.
fn record(
    writer: &Writer,
    dest: &Destination,
    fates: Vec<(&Due, Fate)>,
    outage: Option<Outage>,
    answered: bool,
    paused_until: Option<i64>,
    now_ms: i64,
) -> store::Result<()> {
    let writes: Vec<(i64, Fate)> = fates
        .into_iter()
        .map(|(d, mut f)| {
            if let Fate::Again { error: text, .. }
            | Fate::Final { reason: text, .. }
            | Fate::Tested { verdict: text, .. } = &mut f
            {
                *text = platform::shown(text, dest);
            }
            (d.id, f)
        })
        .collect();
    let health = Health::after(dest, outage, answered, paused_until);
    writer
        .submit(move |c| {
            for (delivery, fate) in &writes {
                write_fate(c, *delivery, fate, now_ms)?;
            }
            health.write(c, now_ms)
        })
        .map_err(|e| e.into_store_error("forward"))
}

fn write_fate(c: &Conn, delivery: i64, fate: &Fate, now_ms: i64) -> store::Result<()> {
    match fate {
        Fate::Delivered { attempts } => deliveries::delivered(c, delivery, *attempts, now_ms)?,
        Fate::Tested { attempts, verdict } => {
            deliveries::tested(c, delivery, *attempts, now_ms, verdict)?
        }
        Fate::Again {
            attempts,
            at,
            error,
        } => deliveries::retry(c, delivery, *attempts, *at, error)?,
        Fate::Final {
            status,
            attempts,
            reason,
        } => deliveries::finish(c, delivery, *status, *attempts, reason)?,
    };
    Ok(())
}

/// Counts a committed batch's outcomes (`counted`, by [`Outcome`]) in `/metrics` and `stats`.
fn count(
    metrics: &Metrics,
    stats: &mut SendStats,
    dest: &Destination,
    counted: [u64; Outcome::ALL.len()],
) {
    for (outcome, n) in Outcome::ALL.into_iter().zip(counted) {
        if n == 0 {
            continue;
        }
        metrics.add_deliveries(&dest.id, &dest.kind, outcome.as_str(), n);
        let n = n as usize;
        match outcome {
            Outcome::Delivered => stats.delivered += n,
            Outcome::Tested => stats.tested += n,
            Outcome::Retried => stats.retried += n,
            Outcome::Failed => stats.failed += n,
            Outcome::TooOld => stats.too_old += n,
            Outcome::Skipped => stats.skipped += n,
            // Counted when it happened, committed or not.
            Outcome::Outage => {}
        }
    }
}

fn consent_reason(rule: &str) -> String {
    match rule {
        "analytics" => "no analytics consent".into(),
        _ => "no consent to use the person's data for ads (ad_user_data)".into(),
    }
}

/// A failed try of `d`: due again after the platform's wait or the backoff, or a dead letter
/// once it has had [`MAX_ATTEMPTS`] counted tries.
fn again(d: &Due, error: String, after_ms: Option<i64>, counts: bool, now_ms: i64) -> Fate {
    let attempts = d.attempts + i64::from(counts);
    if counts && attempts >= MAX_ATTEMPTS {
        return Fate::Final {
            status: Status::Failed,
            attempts,
            reason: format!("{error} (gave up after {attempts} tries)"),
        };
    }
    let wait = after_ms
        .unwrap_or(0)
        .max(backoff_ms(attempts.max(1), worker::jitter()));
    Fate::Again {
        attempts,
        at: now_ms + wait,
        error,
    }
}

/// Sends `events` as one request; when the platform refuses the request as a whole as invalid,
/// sends them one by one, so that only the bad one fails. One answer per event, in order.
fn deliver(
    platform: &dyn Platform,
    http: &Http,
    dest: &Destination,
    events: &[Event<'_>],
    now_ms: i64,
) -> Vec<Result<Verdict, Outage>> {
    match platform.send(http, dest, events, now_ms) {
        Ok(v) if v.len() == events.len() => v.into_iter().map(Ok).collect(),
        Ok(v) => {
            let o = Outage::Transient(format!(
                "the {} mapping gave {} answers for {} events",
                dest.kind,
                v.len(),
                events.len()
            ));
            vec![Err(o); events.len()]
        }
        Err(Outage::Rejected(e)) if events.len() > 1 => {
            log::info!(
                "forward: destination {} refused a batch of {} as invalid ({}); sending them one by one",
                dest.id,
                events.len(),
                crate::text::printable(&e.to_string())
            );
            let mut out = Vec::with_capacity(events.len());
            for (i, one) in events.iter().enumerate() {
                let r = deliver(platform, http, dest, std::slice::from_ref(one), now_ms);
                let stop = matches!(r.first(), Some(Err(o)) if !matches!(o, Outage::Rejected(_)));
                out.extend(r);
                if stop {
                    // The platform is down or throttling: the rest wait with it.
                    let o = out.last().cloned().expect("one answer").unwrap_err();
                    out.extend(std::iter::repeat_n(Err(o), events.len() - i - 1));
                    break;
                }
            }
            out
        }
        Err(o) => vec![Err(o); events.len()],
    }
}

/// The running sender threads.
pub struct Sender(Worker);

impl Sender {
    /// Starts `opts.threads` sender threads, each with a connection of its own.
    pub fn start(
        location: &Location,
        settings: &store::Settings,
        metrics: Metrics,
        writer: Writer,
        opts: &Options,
    ) -> store::Result<Sender> {
        let in_hand = Arc::new(InHand::new(per_tenant(opts.threads)));
        let http = Http::reaching(opts.timeout, opts.reach.clone());
        let mut worker = Worker::new();
        for i in 0..opts.threads {
            let mut conn = Lasting::open(location, settings)?;
            if i == 0 {
                // Versions that end soon, ended or were answered gone, said once at start.
                if let Ok(dests) = conn.get().and_then(destinations::all) {
                    super::versions::log_warnings(&dests, store::now_ms());
                }
            }
            let (in_hand, w, m, h) = (
                in_hand.clone(),
                writer.clone(),
                metrics.clone(),
                http.clone(),
            );
            worker
                .spawn(format!("forward-{i}"), Duration::ZERO, move |stop| {
                    pass(&mut conn, &in_hand, &w, &m, &h, stop)
                })
                .map_err(|e| StoreError::Other(e.to_string()))?;
        }
        Ok(Sender(worker))
    }

    /// Stops the threads after the request each has in hand (at most the request time limit).
    pub fn stop(self) {
        self.0.stop();
    }
}

/// One pass of a sender thread: one batch of the first free destination with due deliveries.
/// Returns when to look again: at once after a batch, else when the next delivery is due.
fn pass(
    lasting: &mut Lasting,
    in_hand: &InHand,
    writer: &Writer,
    metrics: &Metrics,
    http: &Http,
    stop: &Stop,
) -> Duration {
    let now = store::now_ms();
    let pass = lasting.get().and_then(|conn| {
        let mut stats = SendStats::default();
        let mut worked = false;
        for due in deliveries::due_destinations(conn, now)? {
            if stop.requested() {
                break;
            }
            if send_destination(conn, writer, metrics, http, in_hand, &due, now, &mut stats)? {
                worked = true;
                // Look again from the start: the healthy destination waiting longest goes first.
                break;
            }
        }
        let next = if worked {
            None
        } else {
            deliveries::next_due(conn)?
        };
        Ok((worked, next))
    });
    match pass {
        Ok((true, _)) => Duration::ZERO,
        // Due now but in another thread's or node's hands: look again shortly.
        Ok((false, Some(due))) => {
            Duration::from_millis((due - store::now_ms()).clamp(100, POLL.as_millis() as i64) as u64)
        }
        Ok((false, None)) => POLL,
        Err(e) => {
            log::warn!(
                "forward: pass interrupted, retrying: {}",
                crate::text::printable(&e.to_string())
            );
            POLL
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::forward::kinds::{Kind, META};
    use crate::store::deliveries::Facts;

    /// A platform that refuses any batch holding an order id starting with `bad` as a whole, and
    /// fails with `down` once that many requests were made.
    struct Scripted {
        batches: Mutex<Vec<Vec<String>>>,
        down_after: usize,
    }

    impl Platform for Scripted {
        fn kind(&self) -> &'static Kind {
            &META
        }
        fn check(&self, _: &Destination, _: &Event<'_>, _: i64) -> Option<(&'static str, String)> {
            None
        }
        fn send(
            &self,
            _: &Http,
            _: &Destination,
            events: &[Event<'_>],
            _: i64,
        ) -> Result<Vec<Verdict>, Outage> {
            let ids: Vec<String> = events
                .iter()
                .map(|e| e.facts.order_id.clone().unwrap())
                .collect();
            let mut b = self.batches.lock().unwrap();
            b.push(ids.clone());
            if b.len() > self.down_after {
                return Err(Outage::Transient("down".into()));
            }
            if ids.iter().any(|i| i.starts_with("bad")) {
                return Err(Outage::Rejected("invalid parameter".into()));
            }
            Ok(vec![Verdict::Delivered; events.len()])
        }
        fn test(&self, _: &Http, _: &Destination, _: &Event<'_>, _: i64) -> Result<String, Outage> {
            Ok(String::new())
        }
    }

    fn dest() -> Destination {
        Destination {
            id: "d".into(),
            site_id: "s".into(),
            kind: "meta".into(),
            name: "d".into(),
            settings: Default::default(),
            secrets: Default::default(),
            endpoint: None,
            api_version: None,
            events: Default::default(),
            consent: "none".into(),
            enabled: true,
            created_at: 0,
            updated_at: 0,
            health: Default::default(),
        }
    }

    fn run(orders: &[&str], down_after: usize) -> (Vec<Result<Verdict, Outage>>, Vec<Vec<String>>) {
        let facts: Vec<Facts> = orders
            .iter()
            .map(|o| Facts {
                order_id: Some(o.to_string()),
                ..Default::default()
            })
            .collect();
        let events: Vec<Event<'_>> = facts
            .iter()
            .map(|f| Event {
                delivery_id: 0,
                facts: f,
                name: "Purchase",
            })
            .collect();
        let p = Scripted {
            batches: Mutex::new(Vec::new()),
            down_after,
        };
        let out = deliver(&p, &Http::new(REQUEST_TIMEOUT), &dest(), &events, 0);
        (out, p.batches.into_inner().unwrap())
    }

    #[test]
    fn a_batch_refused_as_a_whole_is_sent_again_one_by_one_and_only_the_bad_event_fails() {
        let (out, batches) = run(&["a", "bad", "c"], usize::MAX);
        assert_eq!(batches.len(), 4, "{batches:?}");
        assert_eq!(out[0], Ok(Verdict::Delivered));
        assert_eq!(out[1], Err(Outage::Rejected("invalid parameter".into())));
        assert_eq!(out[2], Ok(Verdict::Delivered));
    }

    #[test]
    fn an_outage_while_sending_one_by_one_stops_there_and_the_rest_wait() {
        let (out, batches) = run(&["bad", "b", "c", "d"], 2);
        assert_eq!(
            batches.len(),
            3,
            "whole batch, then 'bad', then 'b' finds it down"
        );
        assert_eq!(out.len(), 4);
        assert!(matches!(out[0], Err(Outage::Rejected(_))));
        for o in &out[1..] {
            assert_eq!(*o, Err(Outage::Transient("down".into())));
        }
    }

    #[test]
    fn backoff_doubles_to_its_cap_and_the_circuit_opens_after_three_failures() {
        assert_eq!(backoff_ms(1, 1.0), BACKOFF_BASE_MS);
        assert_eq!(backoff_ms(2, 1.0), 2 * BACKOFF_BASE_MS);
        assert_eq!(backoff_ms(40, 1.0), BACKOFF_CAP_MS);
        assert_eq!(backoff_ms(1, 0.5), BACKOFF_BASE_MS / 2);
        assert_eq!(pause_ms(CIRCUIT_AFTER - 1), None);
        assert_eq!(pause_ms(CIRCUIT_AFTER), Some(CIRCUIT_BASE_MS));
        assert_eq!(pause_ms(CIRCUIT_AFTER + 1), Some(2 * CIRCUIT_BASE_MS));
        assert_eq!(pause_ms(100), Some(CIRCUIT_CAP_MS));
        // The tries of a delivery that keeps failing span about fifteen hours.
        let total: i64 = (1..MAX_ATTEMPTS).map(|a| backoff_ms(a, 1.0)).sum();
        assert!((14 * 3_600_000..17 * 3_600_000).contains(&total), "{total}");
    }
}
