//! Durability (docs/decisions.md §3 and §7: a 202 that does not survive `kill -9` of the server
//! one instant later is a bug): concurrent senders get conversions acknowledged, the server is
//! killed with SIGKILL while they are still sending, restarted on the same file, and every
//! acknowledged `eventId` must be there, with its outbox work, and the file must pass
//! `PRAGMA integrity_check`.
//!
//! Bounded: each sender stops after a fixed number of requests, at a deadline, or at the first
//! transport error (the kill); the whole test takes seconds. The load, the kill and the reading of
//! the file go through the crash harness, `common/crash.rs`.

use std::collections::HashMap;
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
