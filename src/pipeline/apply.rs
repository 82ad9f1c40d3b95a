//! Writing what was decided: each item claimed again, then finished, parked, left due or counted
//! as a failed try (rescheduled with backoff, or dead-lettered), in a savepoint of the caller's
//! write transaction. It opens no transaction of its own: the writer's job holds it, so a result
//! and the fate of its outbox row commit together.

use crate::store::engine::AsConn;

use super::decide::{Decided, Session};
use super::MAX_ATTEMPTS;
use crate::fx;
use crate::store;
use crate::store::pipeline::Item;
use crate::worker::jitter;

/// What [`apply`] did with one decided item.
pub(super) enum Applied {
    Processed,
    /// Its result stored (it counts at once), its item kept for the retry of an order with no
    /// session: finished by that retry.
    Held,
    FxPending,
    /// Left due: rates for it arrived after it was decided; the next pass takes it again.
    Again,
    /// Finished, parked or rescheduled by someone else since it was listed.
    Gone,
    Retried {
        conversion_id: String,
        attempts: i64,
        error: String,
    },
    DeadLettered {
        conversion_id: String,
        attempts: i64,
        error: String,
    },
}

/// Writes a chunk of decided items inside the caller's write transaction. Every item is claimed
/// again first: one that is no longer due, or whose tries changed since it was decided, is left
/// alone. The chunk is written in one savepoint; if an item's write fails, the chunk is rolled back
/// to it and written again item by item, each in its own savepoint, so that only the failing item
/// is rolled back, and counted as a failed try. A transient error (busy, full), or one that cost
/// the whole transaction, fails the whole chunk, which then stays due. (On PostgreSQL a savepoint
/// that writes is a subtransaction, and each costs a round trip: one per chunk, not per item.)
pub(super) fn apply(
    conn: &impl AsConn,
    decided: Vec<Decided>,
    now_ms: i64,
) -> store::Result<Vec<Applied>> {
    // Read in this transaction: a destination added after it counts from the next chunk on, as if
    // these conversions had been processed a moment earlier (docs/decisions.md §13).
    let forwarding = decided.iter().any(|d| matches!(d, Decided::Finish { .. }))
        && store::deliveries::any_enabled_destination(conn)?;
    if decided.len() > 1 {
        let together = store::savepoint(conn, |conn| {
            decided
                .iter()
                .map(|d| apply_one(conn, d, now_ms, forwarding))
                .collect::<store::Result<Vec<Applied>>>()
        });
        match together {
            Ok(applied) => return Ok(applied),
            Err(e) if e.is_transient() || !conn.conn().in_transaction() => return Err(e),
            // Rolled back: item by item below.
            Err(_) => {}
        }
    }
    let mut applied = Vec::with_capacity(decided.len());
    for d in decided {
        let done = match store::savepoint(conn, |conn| apply_one(conn, &d, now_ms, forwarding)) {
            Ok(a) => a,
            Err(e) if e.is_transient() || !conn.conn().in_transaction() => return Err(e),
            Err(e) => match claim_unchanged(conn, d.item(), now_ms)? {
                Some(current) => record_failure(conn, &current, &e.to_string(), now_ms)?,
                None => Applied::Gone,
            },
        };
        applied.push(done);
    }
    Ok(applied)
}

fn apply_one(
    conn: &impl AsConn,
    d: &Decided,
    now_ms: i64,
    forwarding: bool,
) -> store::Result<Applied> {
    // The common case, an order that had its session: claimed and finished in one go.
    if let Decided::Finish {
        item,
        attribution,
        fx,
        session: Session::Known,
    } = d
    {
        let Some(adjusted) =
            store::pipeline::claim_and_finish(conn, item, attribution, fx, now_ms)?
        else {
            return Ok(Applied::Gone);
        };
        if adjusted {
            store::adjustments::settle(conn, &item.conversion_id)?;
        }
        if forwarding {
            write_deliveries(conn, &item.conversion_id, now_ms)?;
        }
        return Ok(Applied::Processed);
    }
    let Some(item) = claim_unchanged(conn, d.item(), now_ms)? else {
        return Ok(Applied::Gone);
    };
    Ok(match d {
        Decided::Finish {
            attribution,
            fx,
            session,
            ..
        } => {
            attach(conn, &item.conversion_id, session)?;
            // An order with no session counts at once; it is passed on once its session is
            // found, or once the last try to find it is over (docs/decisions.md §5).
            let (held, adjusted) = match session {
                Session::None { retry_ms } => store::pipeline::finish_or_hold(
                    conn,
                    item.id,
                    &item.conversion_id,
                    attribution,
                    fx,
                    now_ms,
                    *retry_ms,
                )?,
                Session::Known | Session::Found(..) => (
                    false,
                    store::pipeline::finish(
                        conn,
                        item.id,
                        &item.conversion_id,
                        attribution,
                        fx,
                        now_ms,
                    )?,
                ),
            };
            // An adjustment may have arrived before the order had a value in the site currency.
            if adjusted {
                store::adjustments::settle(conn, &item.conversion_id)?;
            }
            if held {
                return Ok(Applied::Held);
            }
            if forwarding {
                write_deliveries(conn, &item.conversion_id, now_ms)?;
            }
            Applied::Processed
        }
        Decided::Park {
            attribution,
            from,
            to,
            day,
            session,
            ..
        } => {
            // `rates import` makes parked items due in its own transaction: had it committed
            // after this item was decided, parking it now would leave it parked until the next
            // import. With both rates present now, the item stays due instead.
            let has = |currency: &str| -> store::Result<bool> {
                Ok(currency == fx::BASE
                    || store::rates::on_or_before(conn, currency, day)?.is_some())
            };
            let mut missing = Vec::new();
            for currency in [from, to] {
                if !has(currency)? && !missing.contains(&currency) {
                    missing.push(currency);
                }
            }
            if missing.is_empty() {
                Applied::Again
            } else {
                let reason = missing_rates(&missing, day);
                attach(conn, &item.conversion_id, session)?;
                store::pipeline::park(conn, item.id, &item.conversion_id, attribution, &reason)?;
                Applied::FxPending
            }
        }
        Decided::Fail { error, .. } => record_failure(conn, &item, error, now_ms)?,
    })
}

/// Stores the session found for a conversion that had none (its identifiers resolved at last).
fn attach(conn: &impl AsConn, conversion_id: &str, session: &Session) -> store::Result<()> {
    if let Session::Found(session_id, visitor_id) = session {
        store::conversions::attach_session(conn, conversion_id, session_id, visitor_id)?;
    }
    Ok(())
}

/// Writes a processed conversion's deliveries to its site's destinations, in the savepoint that
/// finishes it (docs/decisions.md §13); the sender (`forward/sender.rs`) drains them. Not even
/// looked for when the chunk found no enabled destination at all.
fn write_deliveries(conn: &impl AsConn, conversion_id: &str, now_ms: i64) -> store::Result<()> {
    store::deliveries::enqueue(conn, conversion_id, now_ms)?;
    Ok(())
}

/// Why a parked conversion waits, as its order status shows it: the ECB publishes rates per
/// EUR, so each missing currency needs an EUR rate on or before the conversion's day.
fn missing_rates(currencies: &[&String], day: &str) -> String {
    let pairs: Vec<String> = currencies.iter().map(|c| format!("EUR→{c}")).collect();
    format!(
        "no {} rate on or before {day}: get ECB rates with `convapi rates fetch` (or `rates import FILE`, or `serve --rates-fetch daily`)",
        pairs.join(" or ")
    )
}

/// The item as it is now, if it is still due, for the same conversion, with the tries it had when
/// it was decided.
fn claim_unchanged(conn: &impl AsConn, listed: &Item, now_ms: i64) -> store::Result<Option<Item>> {
    Ok(store::pipeline::claim(conn, listed.id, now_ms)?
        .filter(|i| i.attempts == listed.attempts && i.conversion_id == listed.conversion_id))
}

/// Records a failed try; the item is dead-lettered at [`MAX_ATTEMPTS`].
fn record_failure(
    conn: &impl AsConn,
    item: &Item,
    error: &str,
    now_ms: i64,
) -> store::Result<Applied> {
    let attempts = item.attempts + 1;
    let conversion_id = item.conversion_id.clone();
    let error = error.to_owned();
    if attempts >= MAX_ATTEMPTS {
        store::pipeline::dead_letter(conn, item.id, &conversion_id, attempts, &error, now_ms)?;
        Ok(Applied::DeadLettered {
            conversion_id,
            attempts,
            error,
        })
    } else {
        let next = now_ms.saturating_add(backoff_ms(attempts, jitter()));
        store::pipeline::retry_later(conn, item.id, attempts, next, &error)?;
        Ok(Applied::Retried {
            conversion_id,
            attempts,
            error,
        })
    }
}

/// The delay after the `attempts`-th failure: [`super::BACKOFF`], so that items failing together
/// do not retry together.
pub fn backoff_ms(attempts: i64, jitter: f64) -> i64 {
    super::BACKOFF.delay_ms(attempts, jitter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::pipeline::decide::decide_chunk;
    use crate::pipeline::{drain_once, Options, BACKOFF_CAP_MS};
    use crate::store::conversions::{self, Conversion, Source};
    use crate::store::sessions::{self, Session};
    use crate::store::{sites, tenants};
    use rusqlite::Connection;

    const DAY_MS: i64 = 86_400_000;

    /// One pass at `now` as the worker makes it, through a writer of its own on the test's file.
    fn drain_at(dir: &std::path::Path, conn: &Connection, now: i64) -> crate::pipeline::DrainStats {
        let (writer, thread) = crate::writer::Writer::start(
            &crate::store::engine::Location::of(&dir.join("t.db")),
            &Default::default(),
            Default::default(),
        )
        .unwrap();
        let stats = drain_once(conn, &writer, &Metrics::default(), now).unwrap();
        drop(writer);
        thread.join().unwrap();
        stats
    }

    /// A database with one EUR site and one USD conversion waiting in the outbox (no rates yet).
    fn one_usd_conversion(dir: &std::path::Path) -> (Connection, i64) {
        one_usd_conversion_from(dir, Source::Api)
    }

    fn one_usd_conversion_from(dir: &std::path::Path, source: Source) -> (Connection, i64) {
        let conn = store::open(&dir.join("t.db")).unwrap();
        let now = store::now_ms();
        tenants::create(&conn, "t1", "T", now).unwrap();
        let site = sites::NewSite {
            id: "11111111-1111-4111-8111-111111111111",
            tenant_id: "t1",
            tracker_id: "trk",
            name: "S",
            domain: None,
            currency: "EUR",
            window_days: 30,
            model: "last_touch",
        };
        sites::create(&conn, &site, now).unwrap();
        sessions::ensure_visitor(&conn, site.id, "v1", now).unwrap();
        let session = Session {
            id: "s1".into(),
            visitor_id: "v1".into(),
            client_id: None,
            started_at: now - DAY_MS,
            last_activity_at: now - DAY_MS,
            landing_url: None,
            referrer: None,
            campaign: Default::default(),
        };
        sessions::insert(&conn, site.id, &session).unwrap();
        let c = Conversion {
            id: "c1".into(),
            site_id: site.id.into(),
            order_id: Some("o1".into()),
            kind: "purchase".into(),
            session_id: Some("s1".into()),
            visitor_id: Some("v1".into()),
            client_id: None,
            value: Some("10.00".into()),
            currency: "USD".into(),
            occurred_at: now,
        };
        conversions::record(&conn, &c, source, now).unwrap();
        (conn, now)
    }

    fn due_now(conn: &impl AsConn, now: i64) -> std::iter::Peekable<std::vec::IntoIter<Item>> {
        store::pipeline::due(conn, now, 10)
            .unwrap()
            .into_iter()
            .peekable()
    }

    #[test]
    fn an_item_decided_without_rates_is_not_parked_when_rates_arrived_before_it_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let (conn, now) = one_usd_conversion(dir.path());
        let decided = decide_chunk(&conn, &mut due_now(&conn, now), &Options::default()).unwrap();
        assert!(matches!(decided.as_slice(), [Decided::Park { .. }]));
        // `rates import` commits in between: the rate, and every parked item made due.
        let day = chrono::DateTime::from_timestamp_millis(now)
            .unwrap()
            .date_naive();
        store::rates::upsert(&conn, "USD", &day.to_string(), "1.1").unwrap();
        store::pipeline::unpark(&conn, now).unwrap();

        let applied = store::write_tx(&conn, |c| apply(c, decided, now)).unwrap();
        assert!(matches!(applied.as_slice(), [Applied::Again]));
        let state = store::pipeline::item_state(&conn, "c1").unwrap().unwrap();
        assert_eq!(state.next_attempt_at, Some(now), "left due, not parked");
        // The next pass finishes it with the rate.
        let stats = drain_at(dir.path(), &conn, now);
        assert_eq!(stats.processed, 1);
        assert!(store::pipeline::item_state(&conn, "c1").unwrap().is_none());
    }

    #[test]
    fn an_item_decided_without_rates_is_parked_when_none_arrived() {
        let dir = tempfile::tempdir().unwrap();
        let (conn, now) = one_usd_conversion(dir.path());
        let decided = decide_chunk(&conn, &mut due_now(&conn, now), &Options::default()).unwrap();
        let applied = store::write_tx(&conn, |c| apply(c, decided, now)).unwrap();
        assert!(matches!(applied.as_slice(), [Applied::FxPending]));
        let state = store::pipeline::item_state(&conn, "c1").unwrap().unwrap();
        assert_eq!(state.next_attempt_at, None, "parked");
    }

    #[test]
    fn an_item_whose_tries_changed_after_it_was_decided_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (conn, now) = one_usd_conversion(dir.path());
        store::rates::upsert(&conn, "USD", "2000-01-01", "1.1").unwrap();
        let decided = decide_chunk(&conn, &mut due_now(&conn, now), &Options::default()).unwrap();
        assert!(matches!(decided.as_slice(), [Decided::Finish { .. }]));
        // Someone else recorded a failed try in between (still due).
        let item = store::pipeline::due(&conn, now, 1).unwrap().remove(0);
        store::pipeline::retry_later(&conn, item.id, 1, now, "elsewhere").unwrap();
        let applied = store::write_tx(&conn, |c| apply(c, decided, now)).unwrap();
        assert!(matches!(applied.as_slice(), [Applied::Gone]));
        let state = store::pipeline::item_state(&conn, "c1").unwrap().unwrap();
        assert_eq!(state.attempts, 1);
        assert_eq!(state.last_error.as_deref(), Some("elsewhere"));
    }

    #[test]
    fn a_pixel_order_taken_over_by_the_api_after_it_was_decided_is_not_finished_with_the_pixels_details(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let (conn, now) = one_usd_conversion_from(dir.path(), Source::Pixel);
        store::rates::upsert(&conn, "USD", "2000-01-01", "1.1").unwrap();
        let decided = decide_chunk(&conn, &mut due_now(&conn, now), &Options::default()).unwrap();
        assert!(matches!(decided.as_slice(), [Decided::Finish { .. }]));
        // The API reports the order in between, with its own amount.
        let report = conversions::ApiReport {
            id: "api-event".into(),
            site_id: "11111111-1111-4111-8111-111111111111".into(),
            order_id: Some("o1".into()),
            kind: "purchase".into(),
            session: None,
            keep_unattributed: false,
            visitor_id: None,
            client_id: None,
            value: Some("499.00".into()),
            currency: "EUR".into(),
            occurred_at: now,
        };
        let taken = conversions::record_api(&conn, &report, now).unwrap();
        assert!(matches!(taken, conversions::ApiRecorded::TakenOver(ref r) if r.event_id == "c1"));
        let applied = store::write_tx(&conn, |c| apply(c, decided, now)).unwrap();
        assert!(matches!(applied.as_slice(), [Applied::Gone]));
        let state = store::pipeline::item_state(&conn, "c1").unwrap().unwrap();
        assert_eq!((state.attempts, state.next_attempt_at), (0, Some(now)));
        // The next pass processes the API's amount.
        assert_eq!(drain_at(dir.path(), &conn, now).processed, 1);
        let status = conversions::order_status(&conn, "11111111-1111-4111-8111-111111111111", "o1")
            .unwrap()
            .unwrap();
        assert_eq!(status.fx.value.as_deref(), Some("499.00"));
        assert!(status.by_api && status.by_pixel);
    }

    #[test]
    fn a_parked_item_says_which_rate_it_waits_for() {
        let dir = tempfile::tempdir().unwrap();
        let (conn, now) = one_usd_conversion(dir.path());
        assert_eq!(drain_at(dir.path(), &conn, now).fx_pending, 1);
        let status = conversions::order_status(&conn, "11111111-1111-4111-8111-111111111111", "o1")
            .unwrap()
            .unwrap();
        let day = chrono::DateTime::from_timestamp_millis(now)
            .unwrap()
            .date_naive();
        assert_eq!(
            status.parked_reason,
            Some(format!(
                "no EUR→USD rate on or before {day}: get ECB rates with `convapi rates fetch` (or `rates import FILE`, or `serve --rates-fetch daily`)"
            ))
        );
        assert_eq!((status.attempts, status.last_error), (0, None));
    }

    #[test]
    fn backoff_doubles_within_its_jitter_and_is_capped() {
        assert_eq!(backoff_ms(1, 1.0), 1_000);
        assert_eq!(backoff_ms(1, 0.5), 500);
        assert_eq!(backoff_ms(2, 1.0), 2_000);
        assert_eq!(backoff_ms(9, 1.0), 256_000);
        assert_eq!(backoff_ms(11, 1.0), BACKOFF_CAP_MS);
        assert_eq!(backoff_ms(60, 1.0), BACKOFF_CAP_MS);
        // Out-of-range jitter is clamped, never zero or growing.
        assert_eq!(backoff_ms(3, 0.0), 2_000);
        assert_eq!(backoff_ms(3, 7.0), 4_000);
        for _ in 0..100 {
            let j = jitter();
            assert!((0.5..=1.0).contains(&j), "{j}");
        }
    }
}
