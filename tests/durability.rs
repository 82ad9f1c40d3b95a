//! Durability (docs/decisions.md §3 and §7: a 202 that does not survive `kill -9` of the server
//! one instant later is a bug): concurrent senders get conversions acknowledged, the server is
//! killed with SIGKILL while they are still sending, restarted on the same file, and every
//! acknowledged `eventId` must be there, with its outbox work, and the file must pass
//! `PRAGMA integrity_check`.
//!
//! The same for adjustments: refunds answered 202 while the server is killed are each stored
//! once, and each order's net value is its value less its stored refunds.
//!
//! Bounded: each sender stops after a fixed number of requests, at a deadline, or at the first
//! transport error (the kill); the whole test takes seconds. The load, the kill and the reading of
//! the file go through the crash harness, `common/crash.rs`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::crash::{assert_intact, kill_9_under_load, stored_conversions, Load};
use crate::common::*;
use serde_json::json;

const SENDERS: usize = 8;
/// Acknowledgements to collect before the kill.
const ACKS_BEFORE_KILL: usize = 240;
/// Most requests any one sender makes (so the run is bounded even if the kill came late).
const MAX_PER_SENDER: usize = 200;
const DEADLINE: Duration = Duration::from_secs(120);
const VISITOR: &str = "v-load";

/// Sends conversions from [`SENDERS`] threads until [`ACKS_BEFORE_KILL`] are acknowledged, then
/// kills the server with SIGKILL while they are still sending. Returns every `(orderId, eventId)`
/// acknowledged, including answers fully received before the kill.
fn load_then_kill_9(app: &mut TestApp, round: usize) -> Vec<(String, String)> {
    let load = Load {
        senders: SENDERS,
        max_per_sender: MAX_PER_SENDER,
        acks_before_kill: ACKS_BEFORE_KILL,
        deadline: DEADLINE,
        visitor: VISITOR,
        what: format!("round {round}"),
    };
    let killed = kill_9_under_load(app, &load, |s, i| (format!("D-{round}-{s}-{i}"), None));
    assert!(
        killed.acked_before_kill >= ACKS_BEFORE_KILL,
        "round {round}: only {} acknowledgements before the senders stopped; refusals: {:?}",
        killed.acked_before_kill,
        killed.refused
    );
    killed.acked
}

/// Every acknowledged conversion is in the file with its outbox work (or already processed), the
/// file is intact, and the front door answers each order's original `eventId`.
fn verify(app: &TestApp, session: &str, acked: &[(String, String)]) {
    assert_intact(app);
    let stored = stored_conversions(app);
    let by_id: HashMap<&str, _> = stored.iter().map(|c| (c.id.as_str(), c)).collect();
    let mut missing = Vec::new();
    for (order, event_id) in acked {
        match by_id.get(event_id.as_str()) {
            Some(c) => {
                assert_eq!(
                    (c.order.as_str(), c.session.as_deref()),
                    (order.as_str(), Some(session)),
                    "event {event_id}"
                );
                assert!(
                    c.outbox + i64::from(c.status != "queued") >= 1,
                    "event {event_id}: no outbox row and not processed"
                );
            }
            None => missing.push(event_id.clone()),
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged conversions lost after kill -9: {missing:?}",
        missing.len(),
        acked.len()
    );
    assert_eq!(
        app.query_i64("SELECT COUNT(DISTINCT order_id) FROM conversions", &[]),
        app.query_i64("SELECT COUNT(*) FROM conversions", &[]),
        "no order twice"
    );
    for (order, event_id) in acked {
        assert_eq!(
            app.order_status(order).expect(200)["eventId"],
            json!(event_id),
            "order {order}"
        );
    }
}

#[test]
fn every_acknowledged_conversion_survives_kill_9() {
    let _load = heavy_load();
    let mut app = TestApp::start();
    let session = app.pageview(VISITOR, "https://shop.example/", now_ms() - HOUR);
    let mut acked = Vec::new();
    // Two crashes, the second on a file that already went through crash recovery once.
    for round in 0..2 {
        let got = load_then_kill_9(&mut app, round);
        assert!(got.len() >= ACKS_BEFORE_KILL);
        acked.extend(got);
        app.restart();
        assert_eq!(app.get("/healthz").expect(200), json!({"status": "ok"}));
        verify(&app, &session, &acked);
    }
    // A repeat after the crashes is still deduplicated.
    let (order, event_id) = &acked[0];
    let again = app
        .post_conversion(&json!({"visitorId": VISITOR, "orderId": order}))
        .accepted();
    assert_eq!(&again.0, event_id);
}

#[test]
fn a_running_server_checkpoints_its_wal_into_the_database_file() {
    if sqlite_only("SQLite's WAL and its checkpoints into the database file") {
        return;
    }
    // No connection checkpoints inside a commit (wal_autocheckpoint = 0); the server's checkpointer
    // thread copies committed frames into the database file. The main file alone, without its WAL,
    // must come to hold the acknowledged conversions while the server is still running.
    let mut app = TestApp::start();
    app.pageview("v-ckpt", "https://shop.example/", now_ms() - HOUR);
    for i in 0..20 {
        app.post_conversion(&json!({"visitorId": "v-ckpt", "orderId": format!("ckpt-{i}")}))
            .accepted();
    }
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("main-file-only.db");
    let started = Instant::now();
    let mut seen = None;
    while started.elapsed() < Duration::from_secs(10) {
        // A copy of the main file without its -wal: what a checkpoint has written so far. A copy
        // taken mid-checkpoint may be torn; it is simply taken again.
        std::fs::copy(&app.db, &copy).unwrap();
        seen = rusqlite::Connection::open(&copy)
            .and_then(|c| {
                c.query_row(
                    "SELECT COUNT(*) FROM conversions WHERE order_id LIKE 'ckpt-%'",
                    [],
                    |r| r.get::<_, i64>(0),
                )
            })
            .ok();
        if seen == Some(20) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        seen,
        Some(20),
        "the database file never received the WAL's frames while the server ran"
    );
    assert!(!app.has_exited());
}

/// Orders refunded in [`every_refund_answered_202_survives_kill_9`], each of [`ORDER_VALUE`].
const REFUNDED_ORDERS: usize = 12;
const ORDER_VALUE: i64 = 10_000;
/// Refunds to see answered 202 in a cycle before its kill.
const REFUNDS_BEFORE_KILL: usize = 60;
/// Most refunds any one sender sends in a cycle.
const MAX_REFUNDS_PER_SENDER: usize = 120;

/// What the refund senders of one cycle saw: `(orderId, adjustmentId)` sent and answered 202.
#[derive(Default)]
struct Refunds {
    sent: Vec<(String, String)>,
    acked: Vec<(String, String)>,
}

/// A refund sent (`false`) or answered 202 (`true`) with its order and adjustmentId, or a
/// refusal's status and body.
type Sent = Result<(bool, String, String), (u16, String)>;

impl Refunds {
    fn add(&mut self, ev: Sent, refused: &mut Vec<(u16, String)>) {
        match ev {
            Ok((false, order, id)) => self.sent.push((order, id)),
            Ok((true, order, id)) => self.acked.push((order, id)),
            Err(refusal) => refused.push(refusal),
        }
    }
}

/// Sends refunds of 1 from [`SENDERS`] threads, each a new adjustmentId, spread over `orders` (so
/// each gets several, from several senders at once), until [`REFUNDS_BEFORE_KILL`] are answered
/// 202; then kills the server with SIGKILL while they are still sending. Only 503 may refuse.
fn refunds_then_kill_9(app: &mut TestApp, orders: &[String], cycle: usize) -> Refunds {
    let auth = format!("Bearer {}", app.key.key);
    let (base, site) = (app.base.clone(), app.site.id.clone());
    let started = Instant::now();
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<Sent>();
    let mut out = Refunds::default();
    let mut refused = Vec::new();
    std::thread::scope(|s| {
        let (auth, stop, base, site) = (&auth, &stop, &base, &site);
        let senders: Vec<_> = (0..SENDERS)
            .map(|sender| {
                let tx = tx.clone();
                s.spawn(move || {
                    let agent = agent();
                    for i in 0..MAX_REFUNDS_PER_SENDER {
                        if stop.load(Ordering::Relaxed) || started.elapsed() > DEADLINE {
                            return;
                        }
                        let order = &orders[(sender * 5 + i) % orders.len()];
                        let id = format!("k{cycle}-{sender}-{i}");
                        let body = json!({"adjustmentId": id, "type": "refund", "value": 1});
                        let url =
                            format!("{base}/api/sites/{site}/conversions/{order}/adjustments");
                        if tx.send(Ok((false, order.clone(), id.clone()))).is_err() {
                            return;
                        }
                        let Ok(r) = try_send(
                            &agent,
                            "POST",
                            &url,
                            &[
                                ("Authorization", auth),
                                ("Content-Type", "application/json"),
                            ],
                            Some(&serde_json::to_vec(&body).unwrap()),
                        ) else {
                            return; // the server is gone: this sender is done
                        };
                        let ev = match r.status {
                            202 => Ok((true, order.clone(), id)),
                            status => Err((status, r.text())),
                        };
                        if tx.send(ev).is_err() {
                            return;
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        while out.acked.len() < REFUNDS_BEFORE_KILL {
            match rx.recv_timeout(DEADLINE.saturating_sub(started.elapsed())) {
                Ok(ev) => out.add(ev, &mut refused),
                // The deadline, or every sender stopped: the kill comes anyway.
                Err(_) => break,
            }
        }
        assert!(
            out.acked.len() >= REFUNDS_BEFORE_KILL,
            "cycle {cycle}: only {} refunds answered 202; refusals: {refused:?}",
            out.acked.len()
        );
        // Killed with refunds in flight: whatever was answered 202 must survive.
        app.kill9();
        stop.store(true, Ordering::Relaxed);
        for h in senders {
            h.join().expect("sender thread");
        }
        for ev in rx.try_iter() {
            out.add(ev, &mut refused);
        }
    });
    assert!(
        refused.iter().all(|(status, _)| *status == 503),
        "cycle {cycle}: only 503 may refuse a valid refund under load: {refused:?}"
    );
    out
}

#[test]
fn every_refund_answered_202_survives_kill_9() {
    let _load = heavy_load();
    let mut app = TestApp::start();
    app.pageview(VISITOR, "https://shop.example/", now_ms() - HOUR);
    let orders: Vec<String> = (0..REFUNDED_ORDERS).map(|i| format!("K-{i}")).collect();
    for o in &orders {
        app.post_conversion(
            &json!({"visitorId": VISITOR, "orderId": o, "value": ORDER_VALUE, "currency": "EUR"}),
        )
        .accepted();
    }
    // (orderId, adjustmentId) sent, and answered 202, over every cycle.
    let mut sent: HashSet<(String, String)> = HashSet::new();
    let mut acked: Vec<(String, String)> = Vec::new();
    for cycle in 0..5 {
        let got = refunds_then_kill_9(&mut app, &orders, cycle);
        sent.extend(got.sent);
        acked.extend(got.acked);
        app.restart();
        assert_intact(&app);
        // Every refund answered 202 is stored, once; what is stored was sent (an answer the kill
        // cut off may have been committed: allowed).
        let stored: Vec<(String, String)> = app
            .rows(
                "SELECT order_id, adjustment_id FROM adjustments ORDER BY id",
                &[],
            )
            .iter()
            .map(|r| {
                (
                    r[0].as_str().unwrap().to_owned(),
                    r[1].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let unique: HashSet<&(String, String)> = stored.iter().collect();
        assert_eq!(
            unique.len(),
            stored.len(),
            "cycle {cycle}: a refund stored twice"
        );
        let ids: HashSet<&str> = stored.iter().map(|(_, id)| id.as_str()).collect();
        assert_eq!(
            ids.len(),
            stored.len(),
            "cycle {cycle}: an adjustmentId twice"
        );
        let lost: Vec<&(String, String)> = acked.iter().filter(|a| !unique.contains(a)).collect();
        assert!(
            lost.is_empty(),
            "cycle {cycle}: {} of {} refunds answered 202 lost after kill -9: {lost:?}",
            lost.len(),
            acked.len()
        );
        assert!(
            stored.iter().all(|a| sent.contains(a)),
            "cycle {cycle}: a refund stored that was never sent"
        );
        // Each order's net value: its value less every refund stored (those answered 202, and
        // any the kill cut off after their commit).
        for o in &orders {
            let refunds = stored.iter().filter(|(order, _)| order == o).count() as i64;
            let v = app.order_status(o).expect(200);
            assert_eq!(
                v["netValue"],
                json!(ORDER_VALUE - refunds),
                "cycle {cycle}, order {o}: {v}"
            );
            assert_eq!(
                v["adjustments"].as_array().map(Vec::len),
                Some(refunds as usize),
                "cycle {cycle}, order {o}"
            );
        }
    }
    // A repeat after the crashes answers as the first time and changes nothing.
    let (order, id) = &acked[0];
    let before = app.order_status(order).expect(200)["netValue"].clone();
    let again = app.post_adjustment(
        order,
        &json!({"adjustmentId": id, "type": "refund", "value": 1}),
    );
    assert_eq!(again.status, 202, "{}", again.text());
    assert_eq!(app.order_status(order).expect(200)["netValue"], before);
    eprintln!(
        "{} refunds answered 202 over 5 kills, {} sent",
        acked.len(),
        sent.len()
    );
}
