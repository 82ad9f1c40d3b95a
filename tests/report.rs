//! `convapi report`: grouping by source, medium, campaign and type; revenue in the site currency;
//! what counts as unconverted (queued, fx_pending, failed); inclusive UTC day ranges; an order
//! reported by both sources counted once; the table and `--json` outputs (the figures, visitors
//! beside the conversions); usage and lookup errors;
//! the daily rollup kept exact by every write path, and the same report when it is bypassed.
//! Exact decimal sums with converted currencies are in `currency.rs`.

use crate::common::pipeline_support::*;
use crate::common::*;
use serde_json::{json, Value};

/// Reports an order on the latest session of `visitor`.
fn order(app: &TestApp, visitor: &str, body: Value) -> String {
    let order = unique("order");
    let mut b = body.as_object().unwrap().clone();
    b.insert("visitorId".into(), json!(visitor));
    b.insert("orderId".into(), json!(order));
    app.post_conversion(&Value::Object(b)).accepted();
    order
}

fn keyed(rows: &[Value], revenues: &[String]) -> Vec<(String, i64, String, i64)> {
    rows.iter()
        .zip(revenues)
        .map(|(r, rev)| {
            (
                r["key"].as_str().unwrap().to_owned(),
                r["conversions"].as_i64().unwrap(),
                rev.clone(),
                r["unconverted"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn row(key: &str, conversions: i64, revenue: &str, unconverted: i64) -> (String, i64, String, i64) {
    (key.into(), conversions, revenue.into(), unconverted)
}

#[test]
fn groups_by_source_medium_campaign_and_type() {
    let app = manual().start();
    let now = now_ms();
    app.pageview(
        "news",
        "https://shop.example/?utm_source=newsletter&utm_medium=email&utm_campaign=bf",
        now - HOUR,
    );
    app.pageview("ads", "https://shop.example/?gclid=g1", now - HOUR);
    app.pageview("direct", "https://shop.example/", now - HOUR);
    order(&app, "news", json!({"value": 10, "currency": "EUR"}));
    order(&app, "news", json!({"value": 5, "currency": "EUR"}));
    order(&app, "ads", json!({"value": 20, "currency": "EUR"}));
    order(&app, "direct", json!({"value": 1, "currency": "EUR"}));
    order(&app, "direct", json!({"type": "signup"}));
    assert_eq!(drain(&app).processed, 5);

    let by = |g: &str| {
        let (rows, revenues) = report(&app, &app.site.id, &["--by", g]);
        keyed(&rows, &revenues)
    };
    assert_eq!(
        by("source"),
        [
            row("google", 1, "20.00", 0),
            row("newsletter", 2, "15.00", 0),
            row("(direct)", 2, "1.00", 0)
        ]
    );
    assert_eq!(
        by("medium"),
        [
            row("cpc", 1, "20.00", 0),
            row("email", 2, "15.00", 0),
            row("(none)", 2, "1.00", 0)
        ]
    );
    assert_eq!(
        by("campaign"),
        [row("(not set)", 3, "21.00", 0), row("bf", 2, "15.00", 0)]
    );
    assert_eq!(
        by("type"),
        [row("purchase", 4, "36.00", 0), row("signup", 1, "0.00", 0)]
    );
    // --by defaults to source.
    let (rows, revenues) = report(&app, &app.site.id, &[]);
    assert_eq!(keyed(&rows, &revenues), by("source"));
}

#[test]
fn unconverted_counts_queued_fx_pending_and_failed_orders() {
    let app = manual().start();
    let now = now_ms();
    app.pageview(
        "v",
        "https://shop.example/?utm_source=news&utm_medium=email",
        now - HOUR,
    );
    order(&app, "v", json!({"value": 3, "currency": "EUR"}));
    order(&app, "v", json!({"value": 7, "currency": "USD"})); // no USD rate: fx_pending
    let poison = order(&app, "v", json!({"value": 9, "currency": "EUR"}));
    app.execute(
        "UPDATE conversions SET value = 'nine' WHERE order_id = ?1",
        &[&poison],
    );

    // Before any pass nothing is attributed yet.
    let (rows, revenues) = report(&app, &app.site.id, &[]);
    assert_eq!(
        keyed(&rows, &revenues),
        [row("(unattributed)", 3, "0.00", 3)]
    );

    // Enough passes, each a day apart (longer than any backoff), for the poison to die.
    for day in 0..10 {
        drain_at(&app, now_ms() + day * DAY);
    }
    assert_eq!(status(&app, &poison)["status"], "failed");
    // The dead poison was never attributed; the fx_pending one was.
    let (rows, revenues) = report(&app, &app.site.id, &[]);
    assert_eq!(
        keyed(&rows, &revenues),
        [
            row("news", 2, "3.00", 1),
            row("(unattributed)", 1, "0.00", 1)
        ]
    );
    let (rows, revenues) = report(&app, &app.site.id, &["--by", "type"]);
    assert_eq!(keyed(&rows, &revenues), [row("purchase", 3, "3.00", 2)]);
}

#[test]
fn from_and_to_are_inclusive_utc_days() {
    let app = manual().start();
    for (i, at) in [
        "2026-11-12T23:59:59.999Z",
        "2026-11-13T00:00:00Z",
        "2026-11-13T23:59:59.999Z",
        "2026-11-14T00:00:00Z",
    ]
    .iter()
    .enumerate()
    {
        order_at(&app, &format!("v{i}"), json!(i + 1), "EUR", ms(at));
    }
    drain(&app);
    let count = |args: &[&str]| {
        let (rows, revenues) = report(&app, &app.site.id, args);
        keyed(&rows, &revenues)
            .into_iter()
            .map(|(_, n, rev, _)| (n, rev))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        count(&["--from", "2026-11-13", "--to", "2026-11-13"]),
        [(2, "5.00".to_string())]
    );
    assert_eq!(count(&["--from", "2026-11-13"]), [(3, "9.00".to_string())]);
    assert_eq!(count(&["--to", "2026-11-12"]), [(1, "1.00".to_string())]);
    assert_eq!(count(&[]), [(4, "10.00".to_string())]);
    assert_eq!(count(&["--from", "2026-11-15"]), []);
}

#[test]
fn an_order_from_the_pixel_and_the_api_is_counted_once() {
    let app = manual().start();
    order_from_pixel_and_api(&app, "A-1001", 2);
    drain(&app);
    let (rows, revenues) = report(&app, &app.site.id, &[]);
    assert_eq!(keyed(&rows, &revenues), [row("news", 1, "49.90", 0)]);
}

#[test]
fn the_table_is_aligned_and_totalled() {
    let app = manual().start();
    let now = now_ms();
    app.pageview(
        "a",
        "https://shop.example/?utm_source=newsletter&utm_medium=email",
        now - HOUR,
    );
    app.pageview("b", "https://shop.example/?gclid=x", now - HOUR);
    order(&app, "a", json!({"value": 1045.2, "currency": "EUR"}));
    order(&app, "b", json!({"value": 99.9, "currency": "EUR"}));
    order(&app, "b", json!({"value": 0.5, "currency": "EUR"}));
    drain(&app);
    let run = app.cli(&["report", "--site", &app.site.id]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        run.stdout,
        "SOURCE      VISITORS  CONVERTING     RATE  CONVERSIONS  GROSS (EUR)  REFUNDS      NET      AOV  UNCONVERTED\n\
         newsletter         1           1  100.00%            1      1045.20     0.00  1045.20  1045.20            0\n\
         google             1           1  100.00%            2       100.40     0.00   100.40    50.20            0\n\
         TOTAL              2           2  100.00%            3      1145.60     0.00  1145.60   381.87            0\n"
    );
}

/// Regression: the tracker id (the one in the snippet) given as `--site` got only "not a site
/// id", where the API names the mix-up; so does every command that takes `--site`.
#[test]
fn a_tracker_id_given_as_the_site_is_named_as_such() {
    let app = manual().start();
    let tracker = app.site.tracker_id.clone();
    for args in [
        vec!["report", "--site", &tracker],
        vec!["destination", "list", "--site", &tracker],
    ] {
        let run = app.cli(&args);
        assert_eq!(run.code, 1, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("tracker id") && run.stderr.contains("convapi site list"),
            "{args:?}: {}",
            run.stderr
        );
    }
}

#[test]
fn usage_and_lookup_errors() {
    let app = manual().start();
    let site = app.site.id.clone();
    // (args, exit code, stderr fragment)
    let cases: [(Vec<&str>, i32, &str); 8] = [
        (
            vec!["report", "--site", "6f1c2f9e-0000-4000-8000-000000000000"],
            1,
            "no site",
        ),
        (vec!["report", "--site", "not-a-uuid"], 1, "not a site id"),
        (
            vec!["report", "--site", &site, "--from", "13/11/2026"],
            2,
            "not a date",
        ),
        (
            vec![
                "report",
                "--site",
                &site,
                "--from",
                "2026-11-14",
                "--to",
                "2026-11-13",
            ],
            1,
            "after",
        ),
        (
            vec!["report", "--site", &site, "--by", "country"],
            2,
            "country",
        ),
        // Without --to: today, or the last day with data.
        (
            vec!["report", "--site", &site, "--from", "2999-01-01"],
            1,
            "give --to too",
        ),
        (
            vec!["report", "--site", &site, "--from", "1969-12-31"],
            1,
            "give 1970-01-01 or later",
        ),
        (vec!["report"], 2, "--site"),
    ];
    for (args, code, needle) in cases {
        let run = app.cli(&args);
        assert_eq!(run.code, code, "{args:?}: {run:?}");
        assert!(run.stdout.is_empty(), "{args:?}: {run:?}");
        assert!(run.stderr.contains(needle), "{args:?}: {}", run.stderr);
    }
    // A site without conversions: no rows, and the site id is accepted in upper case.
    let (rows, _) = report(&app, &site.to_uppercase(), &[]);
    assert!(rows.is_empty());
}

/// The rollup's differences from an aggregation of every conversion from scratch (none when the
/// triggers kept it exact): on SQLite the library's own check, on a connection of its own; on
/// PostgreSQL, which that check does not read, the same aggregation in SQL both dialects accept
/// (each condition 0/1 through `CASE`, as the PostgreSQL triggers compute it).
fn rollup_drift(app: &TestApp) -> Vec<String> {
    if !app.is_postgres() {
        let conn = convapi::store::open(&app.db).expect("open db");
        return convapi::store::report::check_rollup(&conn).expect("check the rollup");
    }
    let is = |cond: &str| format!("CASE WHEN {cond} THEN 1 ELSE 0 END");
    let sql = format!(
        "WITH scratch AS (
            SELECT c.site_id, c.occurred_at / 86400000 - {neg}, c.type, {attributed},
                COALESCE(c.attr_source, ''), COALESCE(c.attr_medium, ''),
                COALESCE(c.attr_campaign, ''), {s} + 2 * {m} + 4 * {c},
                COUNT(*),
                SUM(CASE WHEN c.status = 'processed' AND c.reporting_value IS NOT NULL
                    THEN COALESCE(c.reporting_minor, 0) ELSE 0 END),
                SUM({unconverted}), SUM({inexact})
            FROM conversions c GROUP BY 1, 2, 3, 4, 5, 6, 7, 8),
        kept AS (
            SELECT site_id, day, type, attributed, source, medium, campaign, nulls,
                SUM(conversions), SUM(revenue_minor), SUM(unconverted), SUM(inexact)
            FROM report_daily GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
            HAVING SUM(conversions) <> 0 OR SUM(revenue_minor) <> 0 OR SUM(unconverted) <> 0
                OR SUM(inexact) <> 0)
        SELECT 'missing', d.* FROM (SELECT * FROM scratch EXCEPT SELECT * FROM kept) d
        UNION ALL
        SELECT 'extra', d.* FROM (SELECT * FROM kept EXCEPT SELECT * FROM scratch) d",
        neg = is("c.occurred_at % 86400000 < 0"),
        attributed = is("c.attr_model IS NOT NULL"),
        s = is("c.attr_source IS NULL"),
        m = is("c.attr_medium IS NULL"),
        c = is("c.attr_campaign IS NULL"),
        unconverted = is("c.status <> 'processed'"),
        inexact = is(
            "c.status = 'processed' AND c.reporting_value IS NOT NULL AND c.reporting_minor IS NULL"
        ),
    );
    app.rows(&sql, &[])
        .iter()
        .map(|r| {
            let cells: Vec<String> = r[1..].iter().map(|v| v.to_string()).collect();
            format!("{}: {}", r[0].as_str().unwrap_or("?"), cells.join(" "))
        })
        .collect()
}

/// The report by every grouping, and the days of the chart, as the library builds them.
fn all_reports(app: &TestApp) -> Vec<String> {
    let conn = app.store();
    let site = convapi::store::sites::by_id(&conn, &app.site.id)
        .expect("read the site")
        .expect("the site");
    let mut out: Vec<String> = ["source", "medium", "campaign", "type"]
        .iter()
        .map(|by| app.cli(&["report", "--site", &site.id, "--by", by]).stdout)
        .collect();
    out.push(format!(
        "{:?}",
        convapi::report::daily(&conn, &site, None, None).expect("daily")
    ));
    out
}

#[test]
fn every_write_path_keeps_the_rollup_exact() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off", "--pixel-max-age-hours", "2400"])
        .start();
    let site = app.site.id.clone();
    let now = now_ms();
    let checked = |stage: &str| {
        let drift = rollup_drift(&app);
        assert!(drift.is_empty(), "after {stage}: {drift:#?}");
    };

    // API orders on attributed sessions, one without a value, one in another currency without
    // rates (fx_pending), and pixel purchases, one of them taken over by the API before and one
    // after its processing.
    app.pageview(
        "news",
        "https://shop.example/?utm_source=newsletter&utm_medium=email&utm_campaign=bf",
        now - HOUR,
    );
    app.pageview("ads", "https://shop.example/?gclid=g1", now - HOUR);
    app.identify("gone", "client-gone", now - HOUR);
    let kept = order(&app, "news", json!({"value": 10.5, "currency": "EUR"}));
    order(&app, "ads", json!({"value": 20, "currency": "EUR"}));
    order(&app, "news", json!({"type": "signup"}));
    order(&app, "ads", json!({"value": 12, "currency": "USD"}));
    order(&app, "gone", json!({"value": 3.3, "currency": "EUR"}));
    let (early, late) = (unique("order"), unique("order"));
    for (visitor, o) in [("px1", &early), ("px2", &late)] {
        app.pixel(
            visitor,
            json!([
                {"type": "pageview", "url": "https://shop.example/?utm_source=fb&utm_medium=cpc", "ts": now - HOUR},
                {"type": "purchase", "orderId": o, "value": 99.99, "currency": "EUR", "ts": now - HOUR},
            ]),
        );
    }
    checked("the first writes");
    app.post_conversion(
        &json!({"visitorId": "ads", "orderId": early, "value": 50, "currency": "EUR"}),
    )
    .accepted();
    checked("a takeover of a queued pixel order");
    drain(&app);
    assert_eq!(status(&app, &late)["status"], "processed");
    checked("processing");
    app.post_conversion(
        &json!({"visitorId": "news", "orderId": late, "value": 7.77, "currency": "EUR"}),
    )
    .accepted();
    checked("a takeover of a processed pixel order");
    drain(&app);
    checked("processing the takeovers");

    // An old order (for retention), then an order whose processing fails until it is dead, then
    // retried once fixed.
    let old = unique("order");
    app.pageview("old", "https://shop.example/", now - 40 * DAY);
    app.post_conversion(&json!({
        "visitorId": "old", "orderId": old, "value": 1, "currency": "EUR",
        "occurredAt": iso(now - 40 * DAY),
    }))
    .accepted();
    let broken = order(&app, "ads", json!({"value": 8, "currency": "EUR"}));
    let id = status(&app, &broken)["eventId"]
        .as_str()
        .unwrap()
        .to_owned();
    app.execute(
        "UPDATE conversions SET value = 'eight' WHERE id = ?1",
        &[&id],
    );
    let mut at = now;
    while status(&app, &broken)["status"] != "failed" {
        at += 365 * DAY;
        drain_at(&app, at);
    }
    checked("a dead letter");
    app.execute("UPDATE conversions SET value = '8' WHERE id = ?1", &[&id]);
    app.cli_json(&["outbox", "retry", &id, "--json"]);
    drain(&app);
    assert_eq!(status(&app, &broken)["status"], "processed");
    checked("a retry");

    // The same reports when the rollup is bypassed: marking a cell inexact sends the report back
    // to the conversions one by one.
    let fast = all_reports(&app);
    app.execute(
        "UPDATE report_daily SET inexact = inexact + 1 WHERE site_id = ?1",
        &[&site],
    );
    assert_eq!(all_reports(&app), fast);
    app.execute(
        "UPDATE report_daily SET inexact = inexact - 1 WHERE site_id = ?1",
        &[&site],
    );
    checked("the comparison");

    // Erasure keeping the conversion, then deleting them; retention's expiry.
    app.cli_json(&["forget", "--site", &site, "--visitor-id", "news", "--json"]);
    checked("an erasure");
    let erased = app.cli_json(&[
        "forget",
        "--site",
        &site,
        "--client-id",
        "client-gone",
        "--delete-conversions",
        "--json",
    ]);
    assert_eq!(erased["conversionsDeleted"], 1, "{erased}");
    checked("an erasure with the conversions");
    app.cli(&[
        "site",
        "update",
        &site,
        "--retain-days",
        "30",
        "--expire-conversions",
        "on",
    ]);
    let conn = app.store();
    let expired =
        with_writer(&app, |w| convapi::retention::prune_once(&conn, w, now_ms())).expect("prune");
    assert_eq!(expired.conversions, 1, "{expired:?}");
    expect_error(&app.order_status(&old), 404, "ORDER_NOT_FOUND");
    checked("retention");
    assert_eq!(status(&app, &kept)["status"], "processed");
    let counted = app.query_i64(
        "SELECT SUM(conversions) FROM report_daily WHERE site_id = ?1",
        &[&site],
    );
    let rows = app.query_i64(
        "SELECT COUNT(*) FROM conversions WHERE site_id = ?1",
        &[&site],
    );
    assert_eq!((counted, rows), (7, 7));
}
