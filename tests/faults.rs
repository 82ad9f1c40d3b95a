//! Crash faults (docs/decisions.md §7): 20 cycles of `kill -9` under concurrent load, on one
//! database file. Afterwards every acknowledged conversion is there exactly once with the
//! `eventId` it was acknowledged with, every conversion has exactly one outbox row unless the
//! pipeline finished it (then none, and its status says so), repeats of acknowledged orders keep
//! answering the original `eventId`, and `PRAGMA integrity_check` is `ok`.
//!
//! Cycles alternate `--pipeline off` (every conversion must keep its outbox row) and `on` (the
//! pipeline deletes a row in the transaction that stores its result). Bounded: each cycle kills
//! after a few acknowledgements or at a deadline, senders stop at the first transport error.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::json;

const CYCLES: usize = 20;
const SENDERS: usize = 4;
/// Acknowledgements to see in a cycle before the kill.
const ACKS_PER_CYCLE: usize = 30;
/// Longest a cycle may load the server before the kill comes anyway.
const CYCLE_DEADLINE: Duration = Duration::from_secs(20);
const VISITOR: &str = "v-fault";

/// `(orderId, eventId)` pairs acknowledged in a cycle.
type Acks = Vec<(String, String)>;
/// `(orderId, expected eventId, answered eventId)` for repeats answered with another eventId.
type Mismatches = Vec<(String, String, String)>;

/// One cycle: senders report new orders and repeat acknowledged ones until the kill.
fn cycle(app: &mut TestApp, n: usize, known: &HashMap<String, String>) -> (Acks, Mismatches) {
    let url = format!("{}/api/sites/{}/conversions", app.base, app.site.id);
    let auth = format!("Bearer {}", app.key.key);
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<(String, String)>();
    let repeats: Vec<(String, String)> = known
        .iter()
        .take(40)
        .map(|(o, e)| (o.clone(), e.clone()))
        .collect();
    let mut mismatches = Vec::new();
    let mut acked = Vec::new();
    std::thread::scope(|s| {
        let (url, auth, stop, repeats) = (&url, &auth, &stop, &repeats);
        let handles: Vec<_> = (0..SENDERS)
            .map(|sender| {
                let tx = tx.clone();
                s.spawn(move || {
                    let agent = agent();
                    let mut seen = Vec::new();
                    for i in 0..10_000 {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        // Every fourth request repeats an order acknowledged in an earlier cycle.
                        let (order, expect) = match repeats.get((i * SENDERS + sender) % 97) {
                            Some((o, e)) if i % 4 == 3 => (o.clone(), Some(e.clone())),
                            _ => (format!("F-{n}-{sender}-{i}"), None),
                        };
                        let body = json!({"visitorId": VISITOR, "orderId": order, "value": i, "currency": "EUR"});
                        let Ok(r) = try_send(
                            &agent,
                            "POST",
                            url,
                            &[("Authorization", auth), ("Content-Type", "application/json")],
                            Some(&serde_json::to_vec(&body).unwrap()),
                        ) else {
                            break; // the server is gone
                        };
                        match r.status {
                            202 => {
                                let event = r.str("eventId");
                                if let Some(e) = expect {
                                    if e != event {
                                        seen.push((order.clone(), e, event.clone()));
                                    }
                                } else if tx.send((order, event)).is_err() {
                                    break;
                                }
                            }
                            503 => {} // allowed under load; not acknowledged
                            other => panic!("cycle {n}: unexpected {other}: {}", r.text()),
                        }
                    }
                    seen
                })
            })
            .collect();
        drop(tx);
        let started = Instant::now();
        while acked.len() < ACKS_PER_CYCLE && started.elapsed() < CYCLE_DEADLINE {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(a) => acked.push(a),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        // Killed with requests in flight: whatever was acknowledged must survive.
        app.kill9();
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            mismatches.extend(h.join().expect("sender"));
        }
        acked.extend(rx.try_iter());
    });
    (acked, mismatches)
}

#[test]
fn twenty_kill_9_cycles_under_load_lose_and_duplicate_nothing() {
    let _load = heavy_load();
    let started = Instant::now();
    let mut app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .start();
    app.pageview(
        VISITOR,
        "https://shop.example/?utm_source=news",
        now_ms() - 60_000,
    );
    let mut acked: HashMap<String, String> = HashMap::new();
    for n in 0..CYCLES {
        let pipeline = if n % 2 == 0 { "off" } else { "on" };
        app.options.serve_args = vec!["--pipeline".into(), pipeline.into()];
        if !app.is_running() {
            app.restart();
        }
        let (new, mismatches) = cycle(&mut app, n, &acked);
        assert!(
            mismatches.is_empty(),
            "cycle {n}: repeats answered another eventId: {mismatches:?}"
        );
        for (o, e) in new {
            if let Some(prev) = acked.insert(o.clone(), e.clone()) {
                assert_eq!(prev, e, "order {o} acknowledged with two eventIds");
            }
        }
    }
    assert!(
        acked.len() >= CYCLES * 2,
        "too little load to mean anything: {} acknowledgements",
        acked.len()
    );

    // Inspect the file as the last kill left it, before any server opens it again.
    let c = app.sqlite();
    let integrity: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    for (order, event) in &acked {
        let rows: Vec<String> = c
            .prepare("SELECT id FROM conversions WHERE order_id = ?1")
            .unwrap()
            .query_map([order], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(rows, vec![event.clone()], "order {order}");
    }
    // Every conversion, acknowledged or not (a commit whose answer the kill swallowed), has its
    // work exactly once: one outbox row, or none and a status that the pipeline set.
    let bad: Vec<(String, String, i64)> = c
        .prepare(
            "SELECT c.id, c.status, (SELECT COUNT(*) FROM outbox o WHERE o.conversion_id = c.id) AS n
             FROM conversions c
             WHERE NOT ((n = 1 AND c.status <> 'processed') OR (n = 0 AND c.status = 'processed'))",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        bad.is_empty(),
        "conversions with broken outbox work: {bad:?}"
    );
    // The pipeline cycles did work (else the "or processed" half above tested nothing).
    let (total, processed): (i64, i64) = c
        .query_row(
            "SELECT COUNT(*), COUNT(*) FILTER (WHERE status = 'processed') FROM conversions",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(processed > 0, "nothing processed in {total} conversions");
    assert!(total >= acked.len() as i64);
    eprintln!(
        "{} acknowledged, {total} stored, {processed} processed, in {:?}",
        acked.len(),
        started.elapsed()
    );
    let orphans: i64 = c
        .query_row(
            "SELECT COUNT(*) FROM outbox WHERE conversion_id NOT IN (SELECT id FROM conversions)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(orphans, 0);
    drop(c);

    // And the server still answers them all the same way.
    app.options.serve_args = vec!["--pipeline".into(), "off".into()];
    app.restart();
    for (order, event) in acked.iter().take(50) {
        let r = app.post_conversion(
            &json!({"visitorId": VISITOR, "orderId": order, "value": 1, "currency": "EUR"}),
        );
        assert_eq!(&r.accepted().0, event, "order {order}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(300),
        "took {:?}",
        started.elapsed()
    );
}
