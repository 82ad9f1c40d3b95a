//! The crash harness (docs/decisions.md §7): the one way the tests `kill -9` a server and read what
//! it left. [`kill_9_under_load`] has senders report conversions until enough are acknowledged,
//! then kills the server with SIGKILL while they are still sending; [`kill_9_when`] starts the
//! server on its database and kills it at a point the test watches for in the file;
//! [`TestApp::restart`] starts it again on the same database. [`assert_intact`] and
//! [`stored_conversions`] read the database as the kill left it, before any server opens it again
//! (on either engine: `sql.rs`).
//!
//! Every wait is bounded: senders stop at their request count, at the deadline, at the first
//! transport error (the kill) or once the kill came; the waits for a point panic at their deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::app::TestApp;
use super::client::{agent, try_send};

/// How [`kill_9_under_load`] loads the server.
pub struct Load<'a> {
    /// Sender threads, each with its own connection.
    pub senders: usize,
    /// Most requests any one sender makes (so the run is bounded even if the kill came late).
    pub max_per_sender: usize,
    /// New orders to see acknowledged before the kill.
    pub acks_before_kill: usize,
    /// Longest the load may go on before the kill comes anyway (senders stop then too).
    pub deadline: Duration,
    /// The `visitorId` of every conversion sent.
    pub visitor: &'a str,
    /// What a failure names, e.g. `round 1` or `cycle 7`.
    pub what: String,
}

/// What [`kill_9_under_load`] saw.
#[derive(Debug, Default)]
pub struct Killed {
    /// `(orderId, eventId)` of every new order acknowledged, including answers fully received
    /// after the kill was decided.
    pub acked: Vec<(String, String)>,
    /// How many of them were acknowledged before the kill.
    pub acked_before_kill: usize,
    /// `(status, body)` of every refusal (all 503: anything else fails the harness).
    pub refused: Vec<(u16, String)>,
    /// `(orderId, expected eventId, answered eventId)` for repeats answered with another eventId.
    pub mismatches: Vec<(String, String, String)>,
}

enum Event {
    Acked(String, String),
    Refused(u16, String),
    Mismatch(String, String, String),
}

impl Killed {
    fn add(&mut self, ev: Event) {
        match ev {
            Event::Acked(order, event) => self.acked.push((order, event)),
            Event::Refused(status, body) => self.refused.push((status, body)),
            Event::Mismatch(order, expected, got) => self.mismatches.push((order, expected, got)),
        }
    }
}

/// Loads the server with conversions from `load.senders` threads until `load.acks_before_kill` new
/// orders are acknowledged (or the deadline passes, or every sender stopped), then kills it with
/// SIGKILL while they are still sending. The `i`th request of sender `s` reports the order
/// `order(s, i)`: `(orderId, None)` for a new order, `(orderId, Some(eventId))` to repeat one
/// acknowledged earlier, which must be answered with that `eventId`. Only 503 may refuse a valid
/// report under load.
pub fn kill_9_under_load(
    app: &mut TestApp,
    load: &Load,
    order: impl Fn(usize, usize) -> (String, Option<String>) + Sync,
) -> Killed {
    let url = format!("{}/api/sites/{}/conversions", app.base, app.site.id);
    let auth = format!("Bearer {}", app.key.key);
    let started = Instant::now();
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<Event>();
    let mut out = Killed::default();
    std::thread::scope(|s| {
        let (url, auth, stop, order) = (&url, &auth, &stop, &order);
        let senders: Vec<_> = (0..load.senders)
            .map(|sender| {
                let tx = tx.clone();
                s.spawn(move || {
                    let agent = agent();
                    for i in 0..load.max_per_sender {
                        if stop.load(Ordering::Relaxed) || started.elapsed() > load.deadline {
                            return;
                        }
                        let (order, expect) = order(sender, i);
                        let body = json!({"visitorId": load.visitor, "orderId": order, "value": i, "currency": "EUR"});
                        let Ok(r) = try_send(
                            &agent,
                            "POST",
                            url,
                            &[("Authorization", auth), ("Content-Type", "application/json")],
                            Some(&serde_json::to_vec(&body).unwrap()),
                        ) else {
                            return; // the server is gone: this sender is done
                        };
                        let ev = match (r.status, expect) {
                            (202, None) => Event::Acked(order, r.str("eventId")),
                            (202, Some(expected)) => {
                                let got = r.str("eventId");
                                if got == expected {
                                    continue;
                                }
                                Event::Mismatch(order, expected, got)
                            }
                            (status, _) => Event::Refused(status, r.text()),
                        };
                        if tx.send(ev).is_err() {
                            return;
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        while out.acked.len() < load.acks_before_kill {
            let left = load.deadline.saturating_sub(started.elapsed());
            match rx.recv_timeout(left) {
                Ok(ev) => out.add(ev),
                // The deadline, or every sender stopped: the kill comes anyway.
                Err(_) => break,
            }
        }
        out.acked_before_kill = out.acked.len();
        // Killed with requests in flight: whatever was acknowledged must survive.
        app.kill9();
        stop.store(true, Ordering::Relaxed);
        for h in senders {
            h.join().expect("sender thread");
        }
    });
    for ev in rx.try_iter() {
        out.add(ev);
    }
    assert!(
        out.refused.iter().all(|(s, _)| *s == 503),
        "{}: only 503 may refuse a valid report under load: {:?}",
        load.what,
        out.refused
    );
    out
}

/// Starts the server on its database, waits (polling the file every 2 ms, the worker being
/// another process) until `point` holds, and kills it there with SIGKILL. `point` answers `Ok`
/// once reached, else `Err` with what it saw; at `deadline` that is the panic: `{what}: {seen}`.
pub fn kill_9_when(
    app: &mut TestApp,
    deadline: Instant,
    what: &str,
    point: impl FnMut(&TestApp) -> Result<(), String>,
) {
    app.restart();
    wait_until(app, deadline, Duration::from_millis(2), what, point);
    app.kill9();
}

/// Waits, polling every `step`, until `done` answers `Ok`; at `deadline` it panics with `what` and
/// what `done` last saw.
pub fn wait_until(
    app: &TestApp,
    deadline: Instant,
    step: Duration,
    what: &str,
    mut done: impl FnMut(&TestApp) -> Result<(), String>,
) {
    while let Err(seen) = done(app) {
        assert!(Instant::now() < deadline, "{what}: {seen}");
        std::thread::sleep(step);
    }
}

/// The database is intact: on SQLite the file passes `PRAGMA integrity_check`; PostgreSQL, which
/// has no such check of its own, answers a query over every table instead (a kill of convapi
/// leaves PostgreSQL itself running: what it keeps is its own business).
pub fn assert_intact(app: &TestApp) {
    if app.is_postgres() {
        let tables = app.query_i64(
            "SELECT (SELECT COUNT(*) FROM conversions) + (SELECT COUNT(*) FROM outbox)
                  + (SELECT COUNT(*) FROM sessions) + (SELECT COUNT(*) FROM events)",
            &[],
        );
        assert!(tables >= 0);
        return;
    }
    let integrity = app.query_str("PRAGMA integrity_check", &[]);
    assert_eq!(integrity.as_deref(), Some("ok"));
}

/// A conversion as the database holds it, with its outbox work.
#[derive(Debug, Clone)]
pub struct Stored {
    pub id: String,
    pub order: String,
    pub session: Option<String>,
    pub status: String,
    /// Its rows in the outbox.
    pub outbox: i64,
}

/// Every conversion in the database, with how many outbox rows it has.
pub fn stored_conversions(app: &TestApp) -> Vec<Stored> {
    let text = |v: &serde_json::Value| v.as_str().map(str::to_owned);
    app.rows(
        "SELECT c.id, c.order_id, c.session_id, c.status,
                (SELECT COUNT(*) FROM outbox o WHERE o.conversion_id = c.id)
         FROM conversions c",
        &[],
    )
    .iter()
    .map(|r| Stored {
        id: text(&r[0]).expect("id"),
        order: text(&r[1]).expect("order_id"),
        session: text(&r[2]),
        status: text(&r[3]).expect("status"),
        outbox: r[4].as_i64().expect("a count"),
    })
    .collect()
}
