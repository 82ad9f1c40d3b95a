//! Crash faults (docs/decisions.md §7): 20 cycles of `kill -9` under concurrent load, on one
//! database file. Afterwards every acknowledged conversion is there exactly once with the
//! `eventId` it was acknowledged with, every conversion has exactly one outbox row unless the
//! pipeline finished it (then none, and its status says so), repeats of acknowledged orders keep
//! answering the original `eventId`, and `PRAGMA integrity_check` is `ok`.
//!
//! Cycles alternate `--pipeline off` (every conversion must keep its outbox row) and `on` (the
//! pipeline deletes a row in the transaction that stores its result). Bounded: each cycle kills
//! after a few acknowledgements or at a deadline, senders stop at the first transport error. The
//! load, the kill and the reading of the file go through the crash harness, `common/crash.rs`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::common::crash::{assert_intact, kill_9_under_load, stored_conversions, Load};
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
    let repeats: Vec<(String, String)> = known
        .iter()
        .take(40)
        .map(|(o, e)| (o.clone(), e.clone()))
        .collect();
    let load = Load {
        senders: SENDERS,
        max_per_sender: 10_000,
        acks_before_kill: ACKS_PER_CYCLE,
        deadline: CYCLE_DEADLINE,
        visitor: VISITOR,
        what: format!("cycle {n}"),
    };
    let killed = kill_9_under_load(app, &load, |sender, i| {
        // Every fourth request repeats an order acknowledged in an earlier cycle.
        match repeats.get((i * SENDERS + sender) % 97) {
            Some((o, e)) if i % 4 == 3 => (o.clone(), Some(e.clone())),
            _ => (format!("F-{n}-{sender}-{i}"), None),
        }
    });
    (killed.acked, killed.mismatches)
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
    assert_intact(&app);
    let stored = stored_conversions(&app);
    let mut by_order: HashMap<&str, Vec<String>> = HashMap::new();
    for s in &stored {
        by_order.entry(&s.order).or_default().push(s.id.clone());
    }
    for (order, event) in &acked {
        let rows = by_order.get(order.as_str()).cloned().unwrap_or_default();
        assert_eq!(rows, vec![event.clone()], "order {order}");
    }
    // Every conversion, acknowledged or not (a commit whose answer the kill swallowed), has its
    // work exactly once: one outbox row, or none and a status that the pipeline set.
    let bad: Vec<(&str, &str, i64)> = stored
        .iter()
        .filter(|s| {
            let processed = s.status == "processed";
            !((s.outbox == 1 && !processed) || (s.outbox == 0 && processed))
        })
        .map(|s| (s.id.as_str(), s.status.as_str(), s.outbox))
        .collect();
    assert!(
        bad.is_empty(),
        "conversions with broken outbox work: {bad:?}"
    );
    // The pipeline cycles did work (else the "or processed" half above tested nothing).
    let total = stored.len() as i64;
    let processed = stored.iter().filter(|s| s.status == "processed").count() as i64;
    assert!(processed > 0, "nothing processed in {total} conversions");
    assert!(total >= acked.len() as i64);
    eprintln!(
        "{} acknowledged, {total} stored, {processed} processed, in {:?}",
        acked.len(),
        started.elapsed()
    );
    let orphans = app.query_i64(
        "SELECT COUNT(*) FROM outbox WHERE conversion_id NOT IN (SELECT id FROM conversions)",
        &[],
    );
    assert_eq!(orphans, 0);

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
