//! The pipeline survives `kill -9` mid-drain: 1000 queued conversions, a server with its pipeline
//! on killed again and again while it drains, then restarted; every conversion ends processed
//! exactly once and the report counts each once with the exact revenue. The kills at a point and
//! the waits go through the crash harness, `common/crash.rs`.

use std::time::{Duration, Instant};

use crate::common::crash::{kill_9_when, wait_until};
use crate::common::pipeline_support::*;
use crate::common::*;
use serde_json::{json, Value};

// A pixel batch carries at most 10 purchases.
const BATCHES: i64 = 100;
const PER_BATCH: i64 = 10;
const N: i64 = BATCHES * PER_BATCH;

fn outbox(app: &TestApp) -> i64 {
    app.query_i64("SELECT COUNT(*) FROM outbox", &[])
}

#[test]
fn kill_9_mid_drain_loses_nothing_and_counts_nothing_twice() {
    let _load = heavy_load();
    // Load the queue with the pipeline off, so that the drain starts only once it is full.
    // The pixel's per-address rate limit is off while it is loaded from this one address.
    let mut app = manual().serve_args(&["--pixel-rate", "0"]).start();
    import_rates(&app, &fixture("eurofxref-hist-sample.csv"));
    let now = now_ms();
    app.pageview(
        "v",
        "https://shop.example/?utm_source=news&utm_medium=email",
        now - MINUTE,
    );
    for b in 0..BATCHES {
        // Half in EUR (0.10 each), half in USD (1.00 each, converted at the latest USD rate,
        // 1.06 from 2026-11-16: 0.943396... → 0.94).
        let events: Vec<Value> = (0..PER_BATCH)
            .map(|i| {
                let n = b * PER_BATCH + i;
                let (value, currency) = if n % 2 == 0 { (0.1, "EUR") } else { (1.0, "USD") };
                json!({"type": "purchase", "orderId": format!("o-{n}"), "value": value, "currency": currency, "ts": now - 30_000})
            })
            .collect();
        app.pixel("v", Value::Array(events));
    }
    assert_eq!(outbox(&app), N);
    app.stop();

    // Now with the pipeline on: start, let it make some progress, kill -9, again and again.
    app.options.serve_args.clear();
    let deadline = Instant::now() + Duration::from_secs(300);
    let (mut kills, mut mid_drain) = (0, 0);
    for _round in 0..200 {
        let before = outbox(&app);
        if before == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {before} queued after {kills} kills"
        );
        let target = before - (before / 4).max(1);
        kill_9_when(&mut app, deadline, "no progress", |app| match outbox(app) {
            left if left <= target => Ok(()),
            left => Err(format!("{left} queued")),
        });
        kills += 1;
        let after = outbox(&app);
        if after > 0 && after < before {
            mid_drain += 1;
        }
    }
    assert!(
        kills >= 3 && mid_drain >= 2,
        "kills {kills}, of them mid-drain {mid_drain}"
    );
    eprintln!("{kills} kills, {mid_drain} with work left behind");

    // A last start drains whatever is left (nothing, or the tail after the last kill).
    app.restart();
    let done = Instant::now() + Duration::from_secs(120);
    wait_until(
        &app,
        done,
        Duration::from_millis(20),
        "outbox not drained",
        |app| match outbox(app) {
            0 => Ok(()),
            left => Err(left.to_string()),
        },
    );
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), N);
    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM conversions WHERE status = 'processed' AND reporting_value IS NOT NULL AND processed_at IS NOT NULL", &[]),
        N
    );
    let usd = app.query_i64("SELECT COUNT(*) FROM conversions WHERE currency = 'USD' AND reporting_value = '0.94' AND fx_rate = '0.9433962264' AND fx_date = '2026-11-16'", &[]);
    let eur = app.query_i64(
        "SELECT COUNT(*) FROM conversions WHERE currency = 'EUR' AND reporting_value = '0.10'",
        &[],
    );
    assert_eq!((usd, eur), (N / 2, N / 2));

    // 500 × 0.10 + 500 × 0.94 = 50.00 + 470.00
    assert_one_report_row(&app, "news", N, "520.00");
    app.stop();
}
