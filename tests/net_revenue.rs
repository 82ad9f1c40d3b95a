//! Net revenue in `convapi report`: gross revenue (the values as first reported), refunds (gross
//! less net, in the site currency at each order's own rate) and net revenue per row and in total,
//! by the order's date or by the adjustment's (`--dated adjustment`), and the rollup that keeps them
//! (`report_refunds`) equal to an aggregation from scratch after every write path: adjustments,
//! the pipeline converting an order after its adjustments arrived, forget and retention deleting
//! orders, and random ledgers. Here: what the report counts of an order's adjustments.

use crate::common::pipeline_support::*;
use crate::common::*;
use serde_json::{json, Value};

/// One row of `convapi report --json`: key, conversions, and the money as its exact decimal text.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Net {
    key: String,
    conversions: i64,
    gross: String,
    refunds: String,
    net: String,
}

fn net(key: &str, conversions: i64, gross: &str, refunds: &str, net: &str) -> Net {
    Net {
        key: key.into(),
        conversions,
        gross: gross.into(),
        refunds: refunds.into(),
        net: net.into(),
    }
}

/// `convapi report --json` with `args`, as [`Net`] rows: those with conversions or refunds (a
/// row of visitors only has neither); the money as its exact decimal text.
fn net_report(app: &TestApp, args: &[&str]) -> Vec<Net> {
    let mut all = vec!["report", "--site", &app.site.id, "--json"];
    all.extend_from_slice(args);
    let run = app.cli(&all);
    assert_eq!(run.code, 0, "{run:?}");
    let report: Value = serde_json::from_str(&run.stdout).expect("a JSON report");
    let rows = report["rows"].as_array().expect("rows");
    let text = |r: &Value, field: &str| r[field].as_str().expect("money text").to_owned();
    rows.iter()
        .inspect(|r| {
            assert_eq!(
                r["revenue"], r["grossRevenue"],
                "revenue is the gross revenue"
            )
        })
        .filter(|r| {
            r["conversions"] != 0
                || text(r, "refunds")
                    .chars()
                    .any(|c| c.is_ascii_digit() && c != '0')
        })
        .map(|r| Net {
            key: r["key"].as_str().unwrap().to_owned(),
            conversions: r["conversions"].as_i64().unwrap(),
            gross: text(r, "grossRevenue"),
            refunds: text(r, "refunds"),
            net: text(r, "netRevenue"),
        })
        .collect()
}

/// The rollups' differences from an aggregation from scratch: on SQLite the library's whole
/// check (`report_daily` and `report_refunds`), on PostgreSQL the net revenue's part, which reads
/// either engine.
fn drift(app: &TestApp) -> Vec<String> {
    if app.is_postgres() {
        return convapi::store::report::check_refunds(&app.store()).expect("check");
    }
    let conn = convapi::store::open(&app.db).expect("open db");
    convapi::store::report::check_rollup(&conn).expect("check the rollup")
}

fn adjust(app: &TestApp, order: &str, body: Value) {
    let resp = app.post_adjustment(order, &body);
    resp.expect(202);
}

fn refund(id: &str, value: Value, at: i64) -> Value {
    json!({"adjustmentId": id, "type": "refund", "value": value, "occurredAt": iso(at)})
}

#[test]
fn a_partial_then_full_refund_nets_zero_and_counts_once() {
    let app = manual().start();
    let now = now_ms();
    let o = order_at(&app, "v1", json!(100), "EUR", now - 3 * HOUR);
    drain(&app);
    let by_type = ["--by", "type"];
    assert_eq!(
        net_report(&app, &by_type),
        [net("purchase", 1, "100.00", "0.00", "100.00")]
    );
    adjust(&app, &o, refund("r1", json!(30.1), now - 2 * HOUR));
    assert_eq!(
        net_report(&app, &by_type),
        [net("purchase", 1, "100.00", "30.10", "69.90")]
    );
    adjust(&app, &o, refund("r2", json!(69.9), now - HOUR));
    // A repeat changes nothing.
    adjust(&app, &o, refund("r2", json!(69.9), now - HOUR));
    assert_eq!(
        net_report(&app, &by_type),
        [net("purchase", 1, "100.00", "100.00", "0.00")]
    );
    assert_eq!(
        net_report(&app, &["--by", "type", "--dated", "adjustment"]),
        [net("purchase", 1, "100.00", "100.00", "0.00")]
    );
    assert_eq!(drift(&app), Vec::<String>::new());
    // The table shows the three figures and their total.
    let run = app.cli(&["report", "--site", &app.site.id, "--by", "type"]);
    assert_eq!(
        run.stdout,
        "TYPE      VISITORS  CONVERTING     RATE  CONVERSIONS  GROSS (EUR)  REFUNDS   NET   AOV  UNCONVERTED\n\
         purchase         1           1  100.00%            1       100.00   100.00  0.00  0.00            0\n\
         TOTAL            1           1  100.00%            1       100.00   100.00  0.00  0.00            0\n"
    );
}

#[test]
fn a_foreign_currency_full_refund_nets_exactly_zero_in_the_site_currency() {
    let app = manual().currency("EUR").start();
    import_rates(&app, &fixture("eurofxref-hist-sample.csv"));
    let at = ms("2026-11-13T15:00:00Z");
    let o = order_at(&app, "v1", json!(49.99), "USD", at);
    drain(&app);
    let r = |id: &str, v: Value| {
        json!({"adjustmentId": id, "type": "refund", "value": v, "currency": "USD",
               "occurredAt": iso(at + HOUR)})
    };
    adjust(&app, &o, r("a", json!(16.66)));
    // 49.99 USD is 47.61 EUR at the order's rate; 33.33 USD left is 31.74 EUR.
    assert_eq!(
        net_report(&app, &["--by", "type"]),
        [net("purchase", 1, "47.61", "15.87", "31.74")]
    );
    adjust(&app, &o, r("b", json!(16.66)));
    adjust(&app, &o, r("c", json!(16.67)));
    for dated in ["order", "adjustment"] {
        assert_eq!(
            net_report(&app, &["--by", "type", "--dated", dated]),
            [net("purchase", 1, "47.61", "47.61", "0.00")],
            "{dated}"
        );
    }
    assert_eq!(drift(&app), Vec::<String>::new());
}

#[test]
fn a_cancel_counts_in_conversions_and_gross_and_its_value_in_refunds() {
    let app = manual().start();
    let now = now_ms();
    let o = order_at(&app, "v1", json!(20), "EUR", now - 2 * HOUR);
    order_at(&app, "v2", json!(5), "EUR", now - 2 * HOUR);
    drain(&app);
    adjust(&app, &o, refund("r", json!(2), now - HOUR - 1));
    adjust(
        &app,
        &o,
        json!({"adjustmentId": "c", "type": "cancel", "occurredAt": iso(now - HOUR)}),
    );
    assert_eq!(
        net_report(&app, &["--by", "type"]),
        [net("purchase", 2, "25.00", "20.00", "5.00")]
    );
    assert_eq!(drift(&app), Vec::<String>::new());
}

#[test]
fn a_restate_upwards_makes_refunds_negative() {
    let app = manual().start();
    let now = now_ms();
    let o = order_at(&app, "v1", json!(50), "EUR", now - 2 * HOUR);
    drain(&app);
    adjust(
        &app,
        &o,
        json!({"adjustmentId": "s", "type": "restate", "value": 80, "occurredAt": iso(now - HOUR)}),
    );
    assert_eq!(
        net_report(&app, &["--by", "type"]),
        [net("purchase", 1, "50.00", "-30.00", "80.00")]
    );
    // A refund that arrives late but occurred before the restate changes nothing of the net
    // value: the restate sets it after. Its own change and the restate's are recomputed.
    adjust(&app, &o, refund("late", json!(10), now - 90 * MINUTE));
    assert_eq!(
        net_report(&app, &["--by", "type"]),
        [net("purchase", 1, "50.00", "-30.00", "80.00")]
    );
    assert_eq!(drift(&app), Vec::<String>::new());
}

/// The first midnight (UTC) of a month at least two hours ago.
fn month_start() -> i64 {
    use chrono::{Datelike, TimeZone, Utc};
    let now = Utc::now() - chrono::Duration::hours(2);
    Utc.with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .unwrap()
        .timestamp_millis()
}

fn day_of(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .date_naive()
        .to_string()
}

#[test]
fn by_adjustment_date_a_refund_counts_in_its_own_month() {
    let app = manual().start();
    let boundary = month_start();
    let o = order_at(&app, "v1", json!(100), "EUR", boundary - 12 * HOUR);
    drain(&app);
    adjust(&app, &o, refund("r", json!(40), boundary + MINUTE));
    let (before, after) = (day_of(boundary - DAY), day_of(boundary));
    let range = |from: &str, to: &str, dated: &str| {
        net_report(
            &app,
            &["--by", "type", "--from", from, "--to", to, "--dated", dated],
        )
    };
    // By the order's date: the campaign earned 60 in the month of the order.
    assert_eq!(
        range(&before, &before, "order"),
        [net("purchase", 1, "100.00", "40.00", "60.00")]
    );
    assert_eq!(range(&after, &after, "order"), []);
    // By the adjustment's date: the money went back in the next month, in the order's row.
    assert_eq!(
        range(&before, &before, "adjustment"),
        [net("purchase", 1, "100.00", "0.00", "100.00")]
    );
    assert_eq!(
        range(&after, &after, "adjustment"),
        [net("purchase", 0, "0.00", "40.00", "-40.00")]
    );
    // Over both months, the same either way.
    assert_eq!(
        range(&before, &after, "adjustment"),
        range(&before, &after, "order")
    );
    assert_eq!(drift(&app), Vec::<String>::new());
}

#[test]
fn an_adjustment_before_the_pipeline_counts_once_the_order_is_converted() {
    let app = manual().start();
    let now = now_ms();
    let o = order_at(&app, "v1", json!(100), "EUR", now - 2 * HOUR);
    adjust(&app, &o, refund("early", json!(40), now - HOUR));
    // Not converted yet: neither its value nor its refund counts.
    let rows = net_report(&app, &["--by", "type"]);
    assert_eq!(rows, [net("purchase", 1, "0.00", "0.00", "0.00")]);
    assert_eq!(drift(&app), Vec::<String>::new());
    drain(&app);
    for dated in ["order", "adjustment"] {
        assert_eq!(
            net_report(&app, &["--by", "source", "--dated", dated]),
            [net("(direct)", 1, "100.00", "40.00", "60.00")],
            "{dated}"
        );
    }
    assert_eq!(drift(&app), Vec::<String>::new());
}

#[test]
fn forget_and_retention_take_deleted_orders_refunds_out_of_the_rollup() {
    let app = manual().start();
    let now = now_ms();
    let client = unique("client");
    app.identify("gone", &client, now - 3 * HOUR);
    let gone = order_at(&app, "gone", json!(30), "EUR", now - 2 * HOUR);
    let old = order_at(&app, "old", json!(12.5), "EUR", now - 40 * DAY);
    let kept = order_at(&app, "kept", json!(10), "EUR", now - 2 * HOUR);
    drain(&app);
    adjust(&app, &gone, refund("r", json!(5), now - HOUR));
    adjust(&app, &old, refund("r", json!(2.5), now - 39 * DAY));
    adjust(&app, &kept, refund("r", json!(1), now - HOUR));
    assert_eq!(
        net_report(&app, &["--by", "type"]),
        [net("purchase", 3, "52.50", "8.50", "44.00")]
    );
    let erased = app.cli_json(&[
        "forget",
        "--site",
        &app.site.id,
        "--client-id",
        &client,
        "--delete-conversions",
        "--json",
    ]);
    assert_eq!(drift(&app), Vec::<String>::new(), "{erased}");
    assert_eq!(
        net_report(&app, &["--by", "type"]),
        [net("purchase", 2, "22.50", "3.50", "19.00")]
    );
    app.cli(&[
        "site",
        "update",
        &app.site.id,
        "--retain-days",
        "30",
        "--expire-conversions",
        "on",
    ]);
    let expired = {
        let conn = app.store();
        with_writer(&app, |w| convapi::retention::prune_once(&conn, w, now_ms())).expect("prune")
    };
    assert_eq!(expired.conversions, 1, "{expired:?}");
    assert_eq!(drift(&app), Vec::<String>::new());
    for dated in ["order", "adjustment"] {
        assert_eq!(
            net_report(&app, &["--by", "type", "--dated", dated]),
            [net("purchase", 1, "10.00", "1.00", "9.00")]
        );
    }
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM report_refunds WHERE site_id = ?1",
            &[&app.site.id.as_str()]
        ),
        2,
        "one cell per date basis for the order left"
    );
}

/// A small deterministic generator (xorshift64), so that a failing ledger can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Random ledgers (refunds, restates and cancels on a few days, arriving out of order, some before
/// the pipeline converted their order, in two currencies), several seeds: the rollup equals its
/// aggregation from scratch after every adjustment, and the report's refunds are each order's
/// reporting value less its net value in the site currency as the status lookup shows it, by
/// either date basis.
#[test]
fn random_ledgers_keep_the_rollup_equal_to_an_aggregation_from_scratch() {
    for seed in [
        0x9e37_79b9_7f4a_7c15,
        0x2545_f491_4f6c_dd1d,
        0x0123_4567_89ab_cdef,
        0x5851_f42d_4c95_7f2d,
    ] {
        random_ledgers(seed);
    }
}

fn random_ledgers(seed: u64) {
    let app = manual().currency("EUR").start();
    import_rates(&app, &fixture("eurofxref-hist-sample.csv"));
    let mut rng = Rng(seed);
    let base = ms("2026-11-13T10:00:00Z");
    let mut orders = Vec::new();
    for i in 0..4 {
        let currency = if i % 3 == 0 { "USD" } else { "EUR" };
        let value = format!("{}.{:02}", 1 + rng.below(60), rng.below(100));
        let at = base + (rng.below(8) as i64) * HOUR;
        let v: Value = serde_json::from_str(&value).unwrap();
        orders.push((
            order_at(&app, &format!("v{i}"), v.clone(), currency, at),
            at,
            v,
        ));
        // The last orders wait for the pipeline until every adjustment is in.
        if i < 3 && rng.below(2) == 0 {
            drain(&app);
        }
    }
    let mut accepted = 0;
    for n in 0..36 {
        let (order, at, value) = orders[rng.below(orders.len() as u64) as usize].clone();
        // A few days, so that changes share cells.
        let when = at + (rng.below(4) as i64) * DAY + (rng.below(6) as i64) * HOUR;
        let money = |rng: &mut Rng, whole: u64| -> Value {
            serde_json::from_str(&format!("{}.{:02}", rng.below(whole), 5 * rng.below(20))).unwrap()
        };
        let id = format!("a{n}");
        let body = match rng.below(10) {
            0 => json!({"adjustmentId": id, "type": "cancel", "occurredAt": iso(when)}),
            // Half the restates put the order back at its value: cells whose changes sum to 0.
            1..=3 => json!({"adjustmentId": id, "type": "restate",
                "value": if rng.below(2) == 0 { value } else { money(&mut rng, 60) },
                "occurredAt": iso(when)}),
            _ => {
                let mut v = money(&mut rng, 15);
                if v == json!(0.0) {
                    v = json!(1);
                }
                json!({"adjustmentId": id, "type": "refund", "value": v, "occurredAt": iso(when)})
            }
        };
        let resp = app.post_adjustment(&order, &body);
        assert!(
            resp.status == 202 || resp.status == 422,
            "{body}: {}",
            resp.status
        );
        accepted += usize::from(resp.status == 202);
        assert_eq!(
            drift(&app),
            Vec::<String>::new(),
            "seed {seed:#x}, after {body}"
        );
    }
    drain(&app);
    assert_eq!(drift(&app), Vec::<String>::new(), "seed {seed:#x}");
    let cents = |s: &str| -> i64 {
        let d = rust_decimal::Decimal::from_str_exact(s).unwrap();
        (d * rust_decimal::Decimal::ONE_HUNDRED)
            .try_into()
            .expect("whole cents")
    };
    let mut expected = 0i64;
    for (order, _, _) in &orders {
        let v = status(&app, order);
        let reporting = v["reportingValue"].to_string();
        let net = v["netReportingValue"].to_string();
        expected += cents(&reporting) - cents(&net);
    }
    assert!(
        accepted >= 10 && expected != 0,
        "seed {seed:#x}: {accepted} accepted, {expected}"
    );
    for dated in ["order", "adjustment"] {
        let rows = net_report(&app, &["--by", "source", "--dated", dated]);
        let refunds: i64 = rows.iter().map(|r| cents(&r.refunds)).sum();
        assert_eq!(refunds, expected, "seed {seed:#x}, {dated}: {rows:?}");
        for r in &rows {
            assert_eq!(cents(&r.gross) - cents(&r.refunds), cents(&r.net), "{r:?}");
        }
    }
}

/// Migration 16 on PostgreSQL computes the changes of the ledgers there are in PL/pgSQL: the same
/// changes and cells as SQLite's Rust step (`store::report`'s unit test of the migration), which
/// the library's own arithmetic confirms (`check_refunds`).
#[cfg(feature = "postgres")]
#[test]
fn the_migration_computes_the_existing_ledgers_changes_on_postgresql() {
    use convapi::store::engine::postgres as pg;
    let url = crate::common::postgres::fresh_database();
    let mut c = pg::connect(&url).unwrap();
    pg::migrate_to(&mut c, 15).unwrap();
    c.batch_execute(
        "INSERT INTO tenants (id, name, created_at) VALUES ('t', 'T', 0);
         INSERT INTO sites (id, tenant_id, tracker_id, name, currency, window_days, model, created_at)
             VALUES ('s', 't', 'trk', 'S', 'EUR', 30, 'last_touch', 0);
         INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id, value,
                 currency, occurred_at, created_at, status, attr_model, attr_source,
                 attr_medium, attr_campaign, reporting_value, reporting_minor,
                 reporting_currency, fx_rate)
             VALUES ('usd', 's', 'o1', 'purchase', 'x', 'v', '49.99', 'USD', 86400000, 0,
                     'processed', 'last_touch', 'news', 'email', NULL, '47.61', 4761, 'EUR', '1.05'),
                    ('up', 's', 'o2', 'purchase', 'x', 'v', '50', 'EUR', 86400000, 0,
                     'processed', 'last_touch', 'news', 'email', NULL, '50.00', 5000, 'EUR', '1'),
                    ('gone', 's', 'o3', 'purchase', 'x', 'v', '20', 'EUR', 172800000, 0,
                     'processed', 'last_touch', 'ads', 'cpc', NULL, '20.00', 2000, 'EUR', '1'),
                    ('new', 's', 'o4', 'purchase', 'x', 'v', '10', 'EUR', 172800000, 0,
                     'queued', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
         INSERT INTO adjustments (conversion_id, site_id, order_id, adjustment_id, type, value,
                 currency, occurred_at, received_at, answer_net, answer_state)
             VALUES ('usd', 's', 'o1', 'a', 'refund', '16.66', 'USD', 259200000, 0, '', ''),
                    ('usd', 's', 'o1', 'b', 'refund', '33.33', 'USD', 259200001, 0, '', ''),
                    ('up', 's', 'o2', 's', 'restate', '80', 'EUR', 259200000, 0, '', ''),
                    ('gone', 's', 'o3', 'r', 'refund', '5', 'EUR', 172800001, 0, '', ''),
                    ('gone', 's', 'o3', 'c', 'cancel', NULL, 'EUR', 172800002, 0, '', ''),
                    ('new', 's', 'o4', 'r', 'refund', '4', 'EUR', 172800001, 0, '', '');",
    )
    .unwrap();
    pg::migrate(&mut c).unwrap();
    let changes: Vec<String> = c
        .query(
            "SELECT adjustment_id || ' ' || COALESCE(net_delta, 'NULL') || ' '
                || COALESCE(CAST(net_delta_minor AS TEXT), 'NULL') || ' ' || counted
             FROM adjustments ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        changes,
        [
            "a -15.87 -1587 1",
            "b -31.74 -3174 1",
            "s 30.00 3000 1",
            "r -5.00 -500 1",
            "c -15.00 -1500 1",
            "r NULL NULL 0",
        ]
    );
    let cells: Vec<String> = c
        .query(
            "SELECT dated || ' ' || day || ' ' || source || ' ' || net_change_minor || ' ' ||
                inexact FROM report_refunds ORDER BY dated, day, source",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        cells,
        [
            "0 1 news -1761 0",
            "0 2 ads -2000 0",
            "1 2 ads -2000 0",
            "1 3 news -1761 0"
        ]
    );
    let conn = convapi::store::engine::PgConn::new(c);
    assert_eq!(
        convapi::store::report::check_refunds(&conn).unwrap(),
        Vec::<String>::new()
    );
}

/// The same report when the rollup is bypassed: a cell marked inexact sends the whole report to
/// the row-by-row read (`each_line` and `each_change`), which must give what the rollups gave, by
/// either date basis and every grouping.
#[test]
fn the_row_by_row_read_gives_what_the_rollups_give() {
    let app = manual().start();
    let now = now_ms();
    app.pageview(
        "news",
        "https://shop.example/?utm_source=newsletter&utm_medium=email",
        now - 5 * HOUR,
    );
    let a = order_at(&app, "news", json!(40), "EUR", now - 4 * HOUR);
    let b = order_at(&app, "v2", json!(25.5), "EUR", now - 30 * HOUR);
    let c = order_at(&app, "v3", json!(9.99), "EUR", now - 3 * HOUR);
    drain(&app);
    adjust(&app, &a, refund("r", json!(12.25), now - 2 * HOUR));
    adjust(
        &app,
        &b,
        json!({"adjustmentId": "s", "type": "restate", "value": 30, "occurredAt": iso(now - HOUR)}),
    );
    adjust(
        &app,
        &c,
        json!({"adjustmentId": "c", "type": "cancel", "occurredAt": iso(now - HOUR)}),
    );
    let all = |app: &TestApp| {
        let mut out = Vec::new();
        for by in ["source", "medium", "campaign", "type"] {
            for dated in ["order", "adjustment"] {
                let today = day_of(now_ms());
                out.push(net_report(app, &["--by", by, "--dated", dated]));
                out.push(net_report(
                    app,
                    &[
                        "--by", by, "--dated", dated, "--from", &today, "--to", &today,
                    ],
                ));
            }
        }
        out
    };
    let summed = all(&app);
    assert!(summed.iter().flatten().any(|r| r.refunds != "0.00"));
    app.execute(
        "UPDATE report_refunds SET inexact = inexact + 1 WHERE site_id = ?1",
        &[&app.site.id.as_str()],
    );
    assert_eq!(all(&app), summed);
}

/// The dashboard's report page shows the same gross, refunds and net as `convapi report`, by the
/// date basis chosen.
#[test]
fn the_dashboard_report_shows_gross_refunds_and_net() {
    let app = manual().start();
    let now = now_ms();
    // Both on today's UTC day, also just after midnight.
    let midnight = now - now.rem_euclid(24 * HOUR);
    let ordered = (now - 3 * HOUR).max(midnight);
    let o = order_at(&app, "v1", json!(100), "EUR", ordered);
    drain(&app);
    adjust(
        &app,
        &o,
        refund("r", json!(30), (now - HOUR).max(ordered + 1)),
    );
    let email = format!("{}@example.com", unique("user"));
    create_user(&app, &app.tenant.id, &email, "correct horse battery");
    let d = DashClient::logged_in(&app, &email, "correct horse battery");
    let today = day_of(now);
    let base = format!("/dashboard/sites/{}", app.site.id);
    for dated in ["order", "adjustment"] {
        let page = d.page(&format!(
            "{base}/report?from={today}&to={today}&by=type&dated={dated}"
        ));
        assert!(
            page.contains(
                "<td>purchase</td><td class=\"num\">1</td><td class=\"num\">100.00</td>\
                 <td class=\"num\">0</td><td class=\"num\">30.00</td><td class=\"num\">70.00</td>"
            ),
            "{dated}: {page}"
        );
        assert!(
            page.contains(&format!("<option value=\"{dated}\" selected>")),
            "{dated}"
        );
    }
    assert_eq!(
        net_report(&app, &["--by", "type"]),
        [net("purchase", 1, "100.00", "30.00", "70.00")]
    );
}

/// Regression: a cell whose changes summed to 0 was deleted, and a later change of one of its
/// adjustments (a late refund recomputing the ledger) subtracted its old change from no row, so
/// the cell came back wrong. Refund 20, then restate to 50, on one day: that day's cell sums to 0;
/// a refund of 10 on the day before changes the restate's change from +20 to +30.
#[test]
fn a_cell_that_summed_to_zero_takes_later_changes_exactly() {
    let app = manual().start();
    let now = now_ms();
    let o = order_at(&app, "v1", json!(50), "EUR", now - 3 * DAY);
    drain(&app);
    adjust(&app, &o, refund("r20", json!(20), now - DAY - 2 * HOUR));
    adjust(
        &app,
        &o,
        json!({"adjustmentId": "s50", "type": "restate", "value": 50, "occurredAt": iso(now - DAY - HOUR)}),
    );
    assert_eq!(
        net_report(&app, &["--by", "type", "--dated", "adjustment"]),
        [net("purchase", 1, "50.00", "0.00", "50.00")]
    );
    adjust(&app, &o, refund("r10", json!(10), now - 2 * DAY));
    assert_eq!(drift(&app), Vec::<String>::new());
    for dated in ["order", "adjustment"] {
        assert_eq!(
            net_report(&app, &["--by", "type", "--dated", dated]),
            [net("purchase", 1, "50.00", "0.00", "50.00")],
            "{dated}"
        );
    }
}
