//! Helpers shared by the pipeline's test files (`pipeline.rs`, `currency.rs`, `report.rs`,
//! `crash.rs`), on top of the rest of `common`: running the pipeline in-process on the test
//! server's database file (the server runs with `--pipeline off`), reading order status, rates
//! fixtures and reports; and dead letters made the way production makes them (`ops.rs`,
//! `dashboard_security.rs`).

use std::path::PathBuf;

use convapi::metrics::Metrics;
use convapi::pipeline::{self, DrainStats};
use convapi::writer::{Writer, WriterConfig};
use serde_json::{json, Value};

use crate::common::*;

/// A server whose own pipeline is off: the test drives it with [`drain`].
pub fn manual() -> Builder {
    TestApp::builder().serve_args(&["--pipeline", "off"])
}

/// One pipeline pass over everything due now, in this process, on the app's database.
pub fn drain(app: &TestApp) -> DrainStats {
    drain_at(app, now_ms())
}

/// One pipeline pass as if the clock read `now_ms` (for backoff schedules).
pub fn drain_at(app: &TestApp, now_ms: i64) -> DrainStats {
    drain_with(app, now_ms, &Metrics::default())
}

pub fn drain_with(app: &TestApp, now_ms: i64, metrics: &Metrics) -> DrainStats {
    let conn = app.store();
    with_writer(app, |writer| {
        pipeline::drain_once(&conn, writer, metrics, now_ms).expect("drain")
    })
}

/// Runs `f` with a writer of its own on the app's database (as the server's pipeline writes
/// through the server's writer), stopped once `f` returns.
pub fn with_writer<T>(app: &TestApp, f: impl FnOnce(&Writer) -> T) -> T {
    let (writer, thread) = Writer::start(
        &convapi::store::engine::Location::of(&app.db),
        &Default::default(),
        WriterConfig::default(),
    )
    .expect("start a writer");
    let out = f(&writer);
    drop(writer);
    thread.join().expect("writer thread");
    out
}

/// `GET .../conversions/{orderId}`, asserting 200.
#[track_caller]
pub fn status(app: &TestApp, order_id: &str) -> Value {
    app.order_status(order_id).expect(200)
}

/// Waits (bounded) until `order` shows `want`; returns its status. The worker is another process,
/// so there is no hook to call, only its result to watch.
pub fn await_status(app: &TestApp, order: &str, want: &str) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let v = status(app, order);
        if v["status"] == want {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{order} never became {want}: {v}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `(source, medium, campaign, sessionId)` of a processed order's attribution.
#[track_caller]
pub fn touch(v: &Value) -> (String, String, Option<String>, Option<String>) {
    let a = &v["attribution"];
    assert!(a.is_object(), "no attribution in {v}");
    (
        a["source"].as_str().expect("source").to_owned(),
        a["medium"].as_str().expect("medium").to_owned(),
        a["campaign"].as_str().map(str::to_owned),
        a["sessionId"].as_str().map(str::to_owned),
    )
}

/// A file under `tests/data/`.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// `convapi rates import FILE --json`, asserting success.
#[track_caller]
pub fn import_rates(app: &TestApp, file: &std::path::Path) -> Value {
    app.cli_json(&[
        "rates",
        "import",
        file.to_str().expect("utf-8 path"),
        "--json",
    ])
}

/// Epoch ms of an RFC 3339 time.
pub fn ms(rfc3339: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .expect("RFC 3339")
        .timestamp_millis()
}

/// Gives `visitor` a session that starts (one pageview) at `at_ms` on the default site and
/// reports an API conversion for it at `occurred_ms`; returns the order id.
#[track_caller]
pub fn order_at(
    app: &TestApp,
    visitor: &str,
    value: Value,
    currency: &str,
    occurred_ms: i64,
) -> String {
    app.pageview(visitor, "https://shop.example/", occurred_ms - HOUR);
    let order = unique("order");
    app.post_conversion(&json!({
        "visitorId": visitor, "orderId": order, "value": value, "currency": currency,
        "occurredAt": iso(occurred_ms),
    }))
    .accepted();
    order
}

/// One order, `order_id` for 49.90 EUR, from both sources: visitor `v`'s pixel sends a pageview
/// from `news` / `email` a minute ago and the purchase 30 s ago; then the API reports the same
/// order `api_sends` times, each answered 202.
#[track_caller]
pub fn order_from_pixel_and_api(app: &TestApp, order_id: &str, api_sends: usize) {
    let now = now_ms();
    app.pixel(
        "v",
        json!([
            {"type": "pageview", "url": "https://shop.example/?utm_source=news&utm_medium=email", "ts": now - MINUTE},
            {"type": "purchase", "orderId": order_id, "value": 49.9, "currency": "EUR", "ts": now - 30_000},
        ]),
    );
    for _ in 0..api_sends {
        app.post_conversion(
            &json!({"visitorId": "v", "orderId": order_id, "value": 49.9, "currency": "EUR"}),
        )
        .accepted();
    }
}

/// Asserts that the report of the default site over all days is exactly one row: `key`, with
/// `conversions` orders, none unconverted, and the revenue text `revenue`.
#[track_caller]
pub fn assert_one_report_row(app: &TestApp, key: &str, conversions: i64, revenue: &str) {
    let (rows, revenues) = report(app, &app.site.id, &[]);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (
            rows[0]["key"].as_str(),
            rows[0]["conversions"].as_i64(),
            rows[0]["unconverted"].as_i64()
        ),
        (Some(key), Some(conversions), Some(0))
    );
    assert_eq!(revenues, [revenue]);
}

/// `convapi report --site SITE ARGS... --json`: the conversions' rows (those with conversions or
/// refunds; a row of visitors only has neither), each with its key, conversions, revenue,
/// unconverted, grossRevenue, refunds and netRevenue, and their `revenue` texts (the gross
/// revenue) in row order.
#[track_caller]
pub fn report(app: &TestApp, site: &str, args: &[&str]) -> (Vec<Value>, Vec<String>) {
    let mut all = vec!["report", "--site", site];
    all.extend_from_slice(args);
    all.push("--json");
    let run = app.cli(&all);
    let rows: Vec<Value> = run.json()["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("an object with rows: {}", run.stdout))
        .iter()
        .filter(|r| r["conversions"] != 0 || !is_zero(&r["refunds"]))
        .map(|r| {
            let fields = [
                "key",
                "conversions",
                "revenue",
                "unconverted",
                "grossRevenue",
                "refunds",
                "netRevenue",
            ];
            Value::Object(
                fields
                    .iter()
                    .map(|f| (f.to_string(), r[*f].clone()))
                    .collect(),
            )
        })
        .collect();
    let revenues = rows
        .iter()
        .map(|r| r["revenue"].as_str().expect("revenue text").to_owned())
        .collect();
    (rows, revenues)
}

/// Whether a money text of the report is zero (`0.00`, `-0.00`, `0`).
fn is_zero(money: &Value) -> bool {
    money
        .as_str()
        .is_some_and(|t| !t.chars().any(|c| c.is_ascii_digit() && c != '0'))
}

/// What one pass over a single failing item does: a retry, or on its last try a dead letter.
pub fn one_failure(last_try: bool) -> DrainStats {
    if last_try {
        DrainStats {
            dead_lettered: 1,
            ..Default::default()
        }
    } else {
        DrainStats {
            retried: 1,
            ..Default::default()
        }
    }
}

/// The outbox item of conversion `id`.
pub fn item(app: &TestApp, id: &str) -> convapi::store::pipeline::ItemState {
    convapi::store::pipeline::item_state(&app.store(), id)
        .expect("outbox")
        .unwrap_or_else(|| panic!("{id} is not in the outbox"))
}

/// A USD order for `visitor`, which waits as `fx_pending` (no rates yet); its conversion id.
pub fn parked_order(app: &TestApp, visitor: &str, order: &str) -> String {
    app.pageview(visitor, "https://shop.example/", now_ms() - MINUTE);
    let (event, _) = app
        .post_conversion(
            &json!({"visitorId": visitor, "orderId": order, "value": 12, "currency": "USD"}),
        )
        .accepted();
    await_status(app, order, "fx_pending");
    event
}

/// Turns the parked conversion `id` into a dead letter the way production does: its processing
/// fails `MAX_ATTEMPTS` times. The failing passes run in this process with a clock a year ahead,
/// so the server's own pipeline (on the real clock) never sees the item due meanwhile.
pub fn dead_letter(app: &TestApp, id: &str) {
    app.execute(
        "UPDATE conversions SET value = 'twelve' WHERE id = ?1",
        &[&id],
    );
    let mut at = now_ms() + 365 * DAY;
    app.execute(
        "UPDATE outbox SET next_attempt_at = ?2 WHERE conversion_id = ?1",
        &[&id, &at],
    );
    let conn = app.store();
    let metrics = Metrics::default();
    for attempt in 1..=pipeline::MAX_ATTEMPTS {
        let stats =
            with_writer(app, |w| pipeline::drain_once(&conn, w, &metrics, at)).expect("drain");
        let want = one_failure(attempt == pipeline::MAX_ATTEMPTS);
        assert_eq!(stats, want, "try {attempt}");
        if let Some(next) = item(app, id).next_attempt_at {
            at = at.max(next);
        }
    }
    let state = item(app, id);
    assert_eq!(
        (state.attempts, state.dead_at.is_some()),
        (pipeline::MAX_ATTEMPTS, true),
        "{state:?}"
    );
}
