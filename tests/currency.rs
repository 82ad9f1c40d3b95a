//! Currency conversion (docs/decisions.md §5, step 2) through the front door: `convapi rates
//! import` with both ECB layouts, conversion into the site currency with the day's rate or the
//! latest earlier one (weekends, a currency missing that day), crossing through EUR, rounding to
//! minor units, `fx_pending` until rates arrive (in-process and in a running server), and exact
//! report sums.
//!
//! Rates come from `tests/data/eurofxref-hist-sample.csv`: 2026-11-12 (Thu), 11-13 (Fri),
//! 11-16 (Mon); USD 1.04 / 1.05 / 1.06, GBP 0.87 / 0.875 / 0.88, JPY 161.5 / 162 / 163.1,
//! ISK 150.5 / N/A / 151.2 per EUR. Every expected amount below is worked out from those by hand.

use crate::common::pipeline_support::*;
use crate::common::*;
use serde_json::{json, Value};

const FRIDAY_3PM: &str = "2026-11-13T15:00:00Z";

fn hist() -> std::path::PathBuf {
    fixture("eurofxref-hist-sample.csv")
}

/// A server (pipeline off) with the sample rates imported, its site in `currency`.
fn app_in(currency: &str) -> TestApp {
    let app = manual().currency(currency).start();
    assert_eq!(import_rates(&app, &hist())["imported"], 14);
    app
}

/// Reports `value currency` occurring at `at`, drains, returns the processed status.
#[track_caller]
fn converted(app: &TestApp, value: Value, currency: &str, at: &str) -> Value {
    let order = order_at(app, &unique("v"), value, currency, ms(at));
    drain(app);
    let v = status(app, &order);
    assert_eq!(v["status"], "processed", "{v}");
    v
}

#[track_caller]
fn assert_fx(v: &Value, reporting: f64, currency: &str, rate: f64, date: &str) {
    assert_eq!(
        (
            v["reportingValue"].as_f64(),
            v["reportingCurrency"].as_str(),
            v["fxRate"].as_f64(),
            v["fxDate"].as_str()
        ),
        (Some(reporting), Some(currency), Some(rate), Some(date)),
        "{v}"
    );
}

#[test]
fn usd_to_eur_uses_the_days_rate() {
    let app = app_in("EUR");
    // 100 / 1.05 = 95.238095... → 95.24
    let v = converted(&app, json!(100), "USD", FRIDAY_3PM);
    assert_fx(&v, 95.24, "EUR", 0.9523809524, "2026-11-13");
    assert_eq!(
        (v["value"].as_f64(), v["currency"].as_str()),
        (Some(100.0), Some("USD"))
    );
    // Thursday's order uses Thursday's rate: 100 / 1.04 = 96.153846... → 96.15
    let v = converted(&app, json!(100), "USD", "2026-11-12T08:00:00Z");
    assert_fx(&v, 96.15, "EUR", 0.9615384615, "2026-11-12");
    // Exactly on a midpoint: 0.00525 / 1.05 = 0.005 → 0.01 (half away from zero, not to even).
    let v = converted(&app, json!(0.00525), "USD", FRIDAY_3PM);
    assert_fx(&v, 0.01, "EUR", 0.9523809524, "2026-11-13");
}

#[test]
fn usd_to_gbp_crosses_through_eur() {
    let app = app_in("GBP");
    // 49.90 × 0.875 / 1.05 = 41.583333... → 41.58
    let v = converted(&app, json!(49.9), "USD", FRIDAY_3PM);
    assert_fx(&v, 41.58, "GBP", 0.8333333333, "2026-11-13");
    // EUR → GBP needs only GBP's rate: 10 × 0.875 = 8.75
    let v = converted(&app, json!(10), "EUR", FRIDAY_3PM);
    assert_fx(&v, 8.75, "GBP", 0.875, "2026-11-13");
    // GBP → GBP needs no rate at all, only rounding: 10.005 → 10.01
    let v = converted(&app, json!(10.005), "GBP", FRIDAY_3PM);
    assert_eq!(
        (v["reportingValue"].as_f64(), v["fxRate"].as_f64()),
        (Some(10.01), Some(1.0)),
        "{v}"
    );
}

#[test]
fn a_weekend_uses_fridays_rate() {
    let app = app_in("EUR");
    for at in ["2026-11-14T12:00:00Z", "2026-11-15T23:59:59.999Z"] {
        let v = converted(&app, json!(100), "USD", at);
        assert_fx(&v, 95.24, "EUR", 0.9523809524, "2026-11-13");
    }
    // Monday has its own: 100 / 1.06 = 94.339622... → 94.34
    let v = converted(&app, json!(100), "USD", "2026-11-16T00:00:00Z");
    assert_fx(&v, 94.34, "EUR", 0.9433962264, "2026-11-16");
}

#[test]
fn a_currency_missing_on_that_date_uses_its_latest_earlier_rate() {
    let app = app_in("EUR");
    // ISK is N/A on Friday: Thursday's 150.5 applies. 1505 / 150.5 = 10.00
    let v = converted(&app, json!(1505), "ISK", FRIDAY_3PM);
    assert_fx(&v, 10.0, "EUR", 0.0066445183, "2026-11-12");
    // ISK → GBP on Friday: GBP's Friday rate, ISK's Thursday one; the older date is reported.
    // 1505 × 0.875 / 150.5 = 8.75
    let gbp = app.create_site(&app.tenant.id, "gbp", &["--currency", "GBP"]);
    let v = unique("v");
    let r = app.collect(&json!({"trackerId": gbp.tracker_id, "visitorId": v,
        "events": [{"type": "pageview", "url": "https://shop.example/", "ts": ms(FRIDAY_3PM) - HOUR}]}));
    r.expect(200);
    app.post_conversion_as(
        &app.key.key,
        &gbp.id,
        &json!({"visitorId": v, "orderId": "isk-gbp",
        "value": 1505, "currency": "ISK", "occurredAt": FRIDAY_3PM}),
    )
    .accepted();
    drain(&app);
    let s = app
        .order_status_as(&app.key.key, &gbp.id, "isk-gbp")
        .expect(200);
    assert_fx(&s, 8.75, "GBP", 0.0058139535, "2026-11-12");
}

#[test]
fn no_rate_yet_waits_as_fx_pending_and_is_processed_after_an_import() {
    let app = manual().start();
    let before_rates = order_at(&app, "v1", json!(100), "USD", ms(FRIDAY_3PM));
    let too_early = order_at(&app, "v2", json!(100), "USD", ms("2026-11-11T12:00:00Z"));
    let unknown = order_at(&app, "v3", json!(100), "AED", ms(FRIDAY_3PM));
    let stats = drain(&app);
    assert_eq!((stats.processed, stats.fx_pending), (0, 3), "{stats:?}");
    for order in [&before_rates, &too_early, &unknown] {
        let v = status(&app, order);
        assert_eq!(v["status"], "fx_pending", "{v}");
        // Attribution is done and shown; only the money waits.
        assert_eq!(touch(&v).0, "(direct)");
        assert_eq!(
            (v["reportingValue"].clone(), v["fxRate"].clone()),
            (Value::Null, Value::Null)
        );
        // Waiting for rates is not a failure: no try is counted, nothing is retried meanwhile.
        assert_eq!(
            (v["attempts"].as_i64(), v["lastError"].clone()),
            (Some(0), Value::Null),
            "{v}"
        );
    }
    assert_eq!(
        drain_at(&app, now_ms() + 365 * DAY),
        Default::default(),
        "parked items stay parked"
    );

    let out = import_rates(&app, &hist());
    assert_eq!(out["imported"], 14, "{out}");
    assert_eq!(out["released"], 3, "{out}");
    let stats = drain(&app);
    assert_eq!((stats.processed, stats.fx_pending), (1, 2), "{stats:?}");
    assert_fx(
        &status(&app, &before_rates),
        95.24,
        "EUR",
        0.9523809524,
        "2026-11-13",
    );
    // Still nothing on or before 11-11 for USD, and nothing ever for AED: they keep waiting.
    for order in [&too_early, &unknown] {
        assert_eq!(status(&app, order)["status"], "fx_pending");
    }
}

#[test]
fn a_running_server_picks_up_fx_pending_orders_after_an_import_by_another_process() {
    let app = TestApp::start();
    let order = order_at(&app, "v", json!(100), "USD", ms(FRIDAY_3PM));
    await_status(&app, &order, "fx_pending");
    // Another process (the CLI) writes the rates; nothing tells the server.
    import_rates(&app, &hist());
    let v = await_status(&app, &order, "processed");
    assert_fx(&v, 95.24, "EUR", 0.9523809524, "2026-11-13");
}

#[test]
fn the_daily_file_imports_and_imports_are_idempotent() {
    let app = manual().currency("JPY").start();
    let daily = fixture("eurofxref-daily-sample.csv");
    for _ in 0..2 {
        let out = import_rates(&app, &daily);
        assert_eq!(
            (out["imported"].as_i64(), out["currencies"].as_i64()),
            (Some(28), Some(28)),
            "{out}"
        );
        assert_eq!(
            (out["from"].as_str(), out["to"].as_str()),
            (Some("2026-11-17"), Some("2026-11-17"))
        );
        assert_eq!(app.query_i64("SELECT COUNT(*) FROM fx_rates", &[]), 28);
    }
    import_rates(&app, &hist());
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM fx_rates", &[]), 28 + 14);
    // EUR → JPY: no minor unit. 10.50 × 163.40 = 1715.7 → 1716
    let v = converted(&app, json!(10.5), "EUR", "2026-11-17T10:00:00Z");
    assert_fx(&v, 1716.0, "JPY", 163.4, "2026-11-17");
    // USD → JPY: 25 × 163.40 / 1.0610 = 3850.141... → 3850
    let v = converted(&app, json!(25), "USD", "2026-11-18T10:00:00Z");
    assert_fx(&v, 3850.0, "JPY", 154.0056550424, "2026-11-17");
}

#[test]
fn a_bad_rates_file_is_refused_whole() {
    let app = manual().start();
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "broken.csv",
            "Date,USD,GBP,\n2026-11-13,1.05,0.875,\n2026-11-12,1.04,zero,\n",
            "line 3",
        ),
        ("foreign.csv", "day;usd\n2026-11-13;1.05\n", "line 1"),
    ];
    for (name, text, needle) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let run = app.cli(&["rates", "import", path.to_str().unwrap(), "--json"]);
        assert_eq!(run.code, 1, "{name}: {run:?}");
        assert!(run.stdout.is_empty(), "{run:?}");
        assert!(run.stderr.contains(needle), "{name}: {}", run.stderr);
    }
    let run = app.cli(&[
        "rates",
        "import",
        dir.path().join("absent.csv").to_str().unwrap(),
    ]);
    assert_eq!(run.code, 1, "{run:?}");
    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM fx_rates", &[]),
        0,
        "nothing half-imported"
    );
}

#[test]
fn the_report_sum_is_the_exact_decimal_sum() {
    let app = app_in("EUR");
    let mut orders = Vec::new();
    // Ten times 0.10 EUR: a float sum would say 0.9999999999999999.
    for _ in 0..10 {
        orders.push(order_at(
            &app,
            &unique("v"),
            json!(0.1),
            "EUR",
            ms(FRIDAY_3PM),
        ));
    }
    // 3 × 0.20 EUR = 0.60
    for _ in 0..3 {
        orders.push(order_at(
            &app,
            &unique("v"),
            json!(0.2),
            "EUR",
            ms(FRIDAY_3PM),
        ));
    }
    // 7 × (19.99 / 1.05 = 19.038095... → 19.04) = 133.28
    for _ in 0..7 {
        orders.push(order_at(
            &app,
            &unique("v"),
            json!(19.99),
            "USD",
            ms(FRIDAY_3PM),
        ));
    }
    // 100 USD → 95.24
    orders.push(order_at(
        &app,
        &unique("v"),
        json!(100),
        "USD",
        ms(FRIDAY_3PM),
    ));
    assert_eq!(drain(&app).processed, 21);
    // 1.00 + 0.60 + 133.28 + 95.24
    assert_one_report_row(&app, "(direct)", 21, "230.12");
    // The same total from the per-order values the status endpoint shows, summed exactly.
    let mut cents = 0i64;
    for o in &orders {
        let text = status(&app, o)["reportingValue"].to_string();
        let (units, frac) = text.split_once('.').unwrap_or((&text, "0"));
        cents +=
            units.parse::<i64>().unwrap() * 100 + format!("{frac:0<2}").parse::<i64>().unwrap();
    }
    assert_eq!(cents, 23012);
}
