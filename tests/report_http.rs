//! `GET /api/sites/{siteId}/report`: every figure of docs/decisions.md §11 on a hand-computed
//! fixture (a refund in another currency, a cancelled order, a conversion without a value, a
//! visitor without one, an order sent with a test key, an order kept unattributed), each
//! grouping, the previous period beside it, the parameters' and the key's errors, and
//! `convapi report --json` printing the same object. Here: what the report answers over HTTP.

use crate::common::pipeline_support::*;
use crate::common::*;
use serde_json::{json, Value};

const PASSWORD: &str = "correct horse battery";

/// The fixture's day: 2026-11-13 (a Friday), UTC.
const DAY: &str = "2026-11-13";

fn at(hh_mm: &str) -> i64 {
    ms(&format!("{DAY}T{hh_mm}:00Z"))
}

fn get_report(app: &TestApp, query: &str) -> Resp {
    let auth = format!("Bearer {}", app.key.key);
    app.send(
        "GET",
        &format!("/api/sites/{}/report?{query}", app.site.id),
        &[("Authorization", &auth)],
        None,
    )
}

fn report_ok(app: &TestApp, query: &str) -> Value {
    let r = get_report(app, query);
    r.expect(200)
}

/// A session of `visitor` from `url` at `ts`, then (with `order`) a conversion half an hour later.
fn visit(app: &TestApp, visitor: &str, url: &str, ts: i64, order: Option<Value>) -> Option<String> {
    app.pageview(visitor, url, ts);
    let mut body = order?;
    body["visitorId"] = json!(visitor);
    body["occurredAt"] = json!(iso(ts + 30 * MINUTE));
    app.post_conversion(&body).accepted();
    body["orderId"].as_str().map(str::to_owned)
}

/// The fixture, its figures computed by hand in the comments of [`each_figure_by_source`].
fn fixture() -> TestApp {
    let app = manual().currency("EUR").start();
    import_rates(&app, &fixture_file());
    let shop = "https://shop.example/";
    // v1: from the newsletter; 49.99 USD (47.61 EUR at the day's rate), 16.66 USD refunded
    // (15.87 EUR).
    let o1 = visit(
        &app,
        "v1",
        &format!("{shop}?utm_source=news&utm_medium=email"),
        at("10:00"),
        Some(json!({"orderId": "o1", "value": 49.99, "currency": "USD"})),
    )
    .unwrap();
    // v2: an ad click; 20 EUR, cancelled.
    let o2 = visit(
        &app,
        "v2",
        &format!("{shop}?gclid=ad2"),
        at("11:00"),
        Some(json!({"orderId": "o2", "value": 20, "currency": "EUR"})),
    )
    .unwrap();
    // v3: an ad click; 10.50 EUR, and a lead without a value.
    visit(
        &app,
        "v3",
        &format!("{shop}?gclid=ad3"),
        at("12:00"),
        Some(json!({"orderId": "o3", "value": 10.5, "currency": "EUR"})),
    );
    app.post_conversion(
        &json!({"visitorId": "v3", "type": "lead", "occurredAt": iso(at("12:40"))}),
    )
    .accepted();
    // v4: came, bought nothing.
    visit(&app, "v4", shop, at("13:00"), None);
    // v5: the day before, direct, 5 EUR.
    visit(
        &app,
        "v5",
        shop,
        ms("2026-11-12T09:00:00Z"),
        Some(json!({"orderId": "o5", "value": 5, "currency": "EUR"})),
    );
    // v4 again, 100 EUR sent with a test key: test data, never counted.
    let (_, test_key) = app.create_test_key();
    app.post_conversion_as(
        &test_key,
        &app.site.id,
        &json!({"visitorId": "v4", "orderId": "t4", "value": 100, "currency": "EUR",
                "occurredAt": iso(at("13:30"))}),
    )
    .accepted();
    // u7: never seen by the pixel; 8 EUR kept unattributed (the site keeps such orders).
    let run = app.cli(&[
        "site",
        "update",
        &app.site.id,
        "--keep-unattributed",
        "true",
    ]);
    assert_eq!(run.code, 0, "{run:?}");
    let kept = app
        .post_conversion(&json!({"visitorId": "u7", "orderId": "o7", "value": 8,
                                 "currency": "EUR", "occurredAt": iso(at("15:00"))}))
        .expect(202);
    assert_eq!(kept["attributed"], json!(false), "{kept}");
    drain(&app);
    app.post_adjustment(
        &o1,
        &json!({"adjustmentId": "r1", "type": "refund", "value": 16.66, "currency": "USD",
                "occurredAt": iso(at("16:00"))}),
    )
    .expect(202);
    app.post_adjustment(
        &o2,
        &json!({"adjustmentId": "c2", "type": "cancel", "occurredAt": iso(at("16:00"))}),
    )
    .expect(202);
    app
}

fn fixture_file() -> std::path::PathBuf {
    crate::common::pipeline_support::fixture("eurofxref-hist-sample.csv")
}

/// The figures of one row or the totals, in the answer's order of fields that matter here.
fn figures(v: &Value) -> Value {
    json!([
        v["visitors"],
        v["convertingVisitors"],
        v["conversionRate"],
        v["conversions"],
        v["purchases"],
        v["grossRevenue"],
        v["refunds"],
        v["netRevenue"],
        v["averageOrderValue"],
    ])
}

fn rows(v: &Value) -> Vec<(String, Value)> {
    v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| (r["key"].as_str().unwrap().to_owned(), figures(r)))
        .collect()
}

#[test]
fn each_figure_by_source() {
    let app = fixture();
    let v = report_ok(&app, &format!("from={DAY}&to={DAY}&by=source"));
    assert_eq!(
        (&v["currency"], &v["from"], &v["to"], &v["by"]),
        (&json!("EUR"), &json!(DAY), &json!(DAY), &json!("source"))
    );
    assert!(v.get("previous").is_none(), "{v}");
    // news: v1; 47.61 gross, 15.87 refunded, 31.74 net over 1 purchase.
    // google: v2, v3; o2 20.00 (cancelled: all of it refunded), o3 10.50, the lead 0;
    //   net 10.50 over 2 purchases = 5.25.
    // (unattributed): o7, 8.00 over 1 purchase; no visit of u7 is known: no visitor, and no
    //   converting visitor either.
    // (direct): v4 only (v5's visit is the day before; v4's test order never counts).
    assert_eq!(
        rows(&v),
        [
            (
                "news".into(),
                json!([1, 1, 1.0, 1, 1, "47.61", "15.87", "31.74", "31.74"])
            ),
            (
                "google".into(),
                json!([2, 2, 1.0, 3, 2, "30.50", "20.00", "10.50", "5.25"])
            ),
            (
                "(unattributed)".into(),
                json!([0, 0, 0.0, 1, 1, "8.00", "0.00", "8.00", "8.00"])
            ),
            (
                "(direct)".into(),
                json!([1, 0, 0.0, 0, 0, "0.00", "0.00", "0.00", null])
            ),
        ],
        "{v}"
    );
    // 4 visitors (v1 to v4), 3 of them converting (v1, v2, v3); 5 conversions (o1, o2, o3, the
    // lead, o7), 4 purchases; gross 47.61 + 20.00 + 10.50 + 8.00 = 86.11, refunds 15.87 + 20.00 =
    // 35.87, net 86.11 - 35.87 = 50.24, over 4 purchases 12.56.
    assert_eq!(
        figures(&v["totals"]),
        json!([4, 3, 0.75, 5, 4, "86.11", "35.87", "50.24", "12.56"]),
        "{v}"
    );
    // The CLI prints the same object, and the same figures as a table.
    let cli = app.cli_json(&[
        "report",
        "--site",
        &app.site.id,
        "--figures",
        "--from",
        DAY,
        "--to",
        DAY,
        "--json",
    ]);
    assert_eq!(cli, v);
    let table = app.cli(&[
        "report",
        "--site",
        &app.site.id,
        "--figures",
        "--from",
        DAY,
        "--to",
        DAY,
        "--by",
        "channel",
        "--compare",
        "previous",
    ]);
    assert_eq!(table.code, 0, "{table:?}");
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert_eq!(
        lines
            .iter()
            .map(|l| l.split("  ").next().unwrap().trim())
            .collect::<Vec<_>>(),
        [
            "CHANNEL",
            "Email",
            "Paid Search",
            "Unattributed",
            "Direct",
            "TOTAL",
            "PREVIOUS 2026-11-12..2026-11-12"
        ],
        "{}",
        table.stdout
    );
    assert!(
        lines[5].contains("75.00%") && lines[5].contains("50.24"),
        "{}",
        table.stdout
    );
}

/// Asserts `cli` and `http` are the same JSON, field by field (naming the first that differs).
#[track_caller]
fn same_fields(cli: &Value, http: &Value, path: &str) {
    match (cli, http) {
        (Value::Object(c), Value::Object(h)) => {
            let names = |m: &serde_json::Map<String, Value>| m.keys().cloned().collect::<Vec<_>>();
            assert_eq!(names(c), names(h), "{path}: the fields");
            for (name, value) in h {
                same_fields(&c[name], value, &format!("{path}.{name}"));
            }
        }
        (Value::Array(c), Value::Array(h)) => {
            assert_eq!(c.len(), h.len(), "{path}: how many");
            for (i, (c, h)) in c.iter().zip(h).enumerate() {
                same_fields(c, h, &format!("{path}[{i}]"));
            }
        }
        _ => assert_eq!(cli, http, "{path}"),
    }
}

/// `convapi report --json` (no other flag needed) prints the object the API answers for the same
/// site, period and grouping, with and without a comparison; without `--from`/`--to` it covers
/// every day with data, from the site's first (v5's, the day before) to today. Each row also
/// carries `revenue`, its gross revenue (the name the first `report`'s rows gave it).
#[test]
fn the_cli_prints_the_object_the_api_answers() {
    let app = fixture();
    let today = chrono::Utc::now().date_naive().to_string();
    let first = "2026-11-12";
    for by in ["source", "medium", "campaign", "channel", "type"] {
        for (args, query) in [
            (
                vec!["--from", DAY, "--to", DAY],
                format!("from={DAY}&to={DAY}"),
            ),
            (
                vec!["--from", first, "--to", DAY, "--compare", "weekday"],
                format!("from={first}&to={DAY}&compare=weekday"),
            ),
            (vec![], format!("from={first}&to={today}")),
        ] {
            let http = report_ok(&app, &format!("{query}&by={by}"));
            let mut all = vec!["report", "--site", &app.site.id, "--by", by];
            all.extend(args);
            all.push("--json");
            let run = app.cli(&all);
            assert_eq!(run.code, 0, "{run:?}");
            let cli: Value = serde_json::from_str(&run.stdout).expect("one JSON value");
            same_fields(&cli, &http, &format!("by={by} {query}"));
            for row in http["rows"].as_array().unwrap() {
                assert_eq!(row["revenue"], row["grossRevenue"], "{row}");
            }
        }
    }
    // The plain output is the same figures as a table.
    let table = app.cli(&["report", "--site", &app.site.id, "--from", DAY, "--to", DAY]);
    assert_eq!(table.code, 0, "{table:?}");
    let total = table.stdout.lines().find(|l| l.starts_with("TOTAL"));
    assert!(
        total.is_some_and(|l| l.contains("75.00%") && l.contains("86.11") && l.contains("50.24")),
        "{}",
        table.stdout
    );
}

#[test]
fn channels_medium_campaign_and_type() {
    let app = fixture();
    let q = |by: &str| report_ok(&app, &format!("from={DAY}&to={DAY}&by={by}"));
    let keys = |v: &Value| rows(v).into_iter().map(|(k, _)| k).collect::<Vec<_>>();
    let channel = q("channel");
    assert_eq!(
        keys(&channel),
        ["Email", "Paid Search", "Unattributed", "Direct"],
        "{channel}"
    );
    assert_eq!(
        rows(&channel)[1].1,
        json!([2, 2, 1.0, 3, 2, "30.50", "20.00", "10.50", "5.25"])
    );
    // The kept order: no visit, so no visitor and no converting visitor.
    assert_eq!(
        rows(&channel)[2].1,
        json!([0, 0, 0.0, 1, 1, "8.00", "0.00", "8.00", "8.00"])
    );
    assert_eq!(
        keys(&q("medium")),
        ["email", "cpc", "(unattributed)", "(none)"]
    );
    assert_eq!(keys(&q("campaign")), ["(not set)", "(unattributed)"]);
    // A visit has no type: each type's row has all the day's visitors. Purchases: o1, o2, o3, o7.
    let by_type = q("type");
    assert_eq!(
        rows(&by_type),
        [
            (
                "purchase".into(),
                json!([4, 3, 0.75, 4, 4, "86.11", "35.87", "50.24", "12.56"])
            ),
            (
                "lead".into(),
                json!([4, 1, 0.25, 1, 0, "0.00", "0.00", "0.00", null])
            ),
        ],
        "{by_type}"
    );
    assert_eq!(figures(&by_type["totals"]), figures(&q("source")["totals"]));
}

#[test]
fn the_previous_period_beside_it() {
    let app = fixture();
    let v = report_ok(&app, &format!("from={DAY}&to={DAY}&compare=previous"));
    let prev = &v["previous"];
    assert_eq!(
        (&prev["compare"], &prev["from"], &prev["to"]),
        (
            &json!("previous"),
            &json!("2026-11-12"),
            &json!("2026-11-12")
        ),
        "{v}"
    );
    assert_eq!(
        rows(prev),
        [(
            "(direct)".into(),
            json!([1, 1, 1.0, 1, 1, "5.00", "0.00", "5.00", "5.00"])
        )]
    );
    assert_eq!(
        figures(&v["totals"]),
        json!([4, 3, 0.75, 5, 4, "86.11", "35.87", "50.24", "12.56"])
    );
    // Two days back to back: the previous two days hold v5's day only.
    let v = report_ok(&app, "from=2026-11-13&to=2026-11-14&compare=previous");
    assert_eq!(
        (&v["previous"]["from"], &v["previous"]["to"]),
        (&json!("2026-11-11"), &json!("2026-11-12"))
    );
    // Same weekday: a Friday to Sunday compares with the Friday to Sunday a week before, empty.
    let v = report_ok(&app, "from=2026-11-13&to=2026-11-15&compare=weekday");
    let prev = &v["previous"];
    assert_eq!(
        (&prev["compare"], &prev["from"], &prev["to"]),
        (
            &json!("weekday"),
            &json!("2026-11-06"),
            &json!("2026-11-08")
        )
    );
    assert_eq!(rows(prev), []);
    assert_eq!(
        figures(&prev["totals"]),
        json!([0, 0, 0.0, 0, 0, "0.00", "0.00", "0.00", null])
    );
    // Eight days go back two weeks, so that no day is in both.
    let v = report_ok(&app, "from=2026-11-06&to=2026-11-13&compare=weekday");
    assert_eq!(
        (&v["previous"]["from"], &v["previous"]["to"]),
        (&json!("2026-10-23"), &json!("2026-10-30"))
    );
}

#[test]
fn parameter_and_key_errors() {
    let app = manual().start();
    for (query, field) in [
        ("by=country", "by"),
        ("from=13/11/2026", "from"),
        ("to=2026-02-30", "to"),
        ("from=2026-11-14&to=2026-11-13", "from"),
        ("from=2000-01-01&to=2026-11-13", "from"),
        ("compare=yesterday", "compare"),
        ("by=source&by=medium", "by"),
    ] {
        let v = expect_invalid(&get_report(&app, query), field);
        assert!(v["error"].as_str().unwrap().contains(field), "{query}: {v}");
    }
    // Defaults: the 30 days to today, by source, no comparison.
    let v = report_ok(&app, "");
    assert_eq!(v["by"], "source");
    let today = chrono::Utc::now().date_naive();
    assert_eq!(v["to"], json!(today.to_string()));
    assert_eq!(
        v["from"],
        json!((today - chrono::Duration::days(29)).to_string())
    );
    assert_eq!(v["totals"]["averageOrderValue"], Value::Null);
    // §3's checks, in order, before the parameters.
    let path = |site: &str| format!("/api/sites/{site}/report?by=country");
    expect_error(&app.get(&path(&app.site.id)), 401, "UNAUTHORIZED");
    let auth = format!("Bearer {}", app.key.key);
    let h = [("Authorization", auth.as_str())];
    expect_error(
        &app.send(
            "GET",
            &path("6f1c2f9e-0000-4000-8000-000000000000"),
            &h,
            None,
        ),
        404,
        "SITE_NOT_FOUND",
    );
    let other = app.create_tenant("other");
    let theirs = app.create_site(&other.id, "theirs", &[]);
    expect_error(
        &app.send("GET", &path(&theirs.id), &h, None),
        403,
        "FORBIDDEN",
    );
    let r = app.send("POST", &path(&app.site.id), &h, Some(b"{}"));
    expect_error(&r, 405, "METHOD_NOT_ALLOWED");
}

/// Visitor `v` clicks an ad at 10:00, pays through PayPal and comes back from it at 11:00 (a new
/// session, its referrer PayPal's), and converts at 11:05. Returns the order id.
fn paypal_return(app: &TestApp) -> String {
    app.pageview("v", "https://shop.example/?gclid=ad", at("10:00"));
    app.pixel(
        "v",
        json!([{"type": "pageview", "url": "https://shop.example/thanks",
                "referrer": "https://www.paypal.com/checkoutnow?token=EC-1", "ts": at("11:00")}]),
    );
    app.post_conversion(&json!({"visitorId": "v", "orderId": "pp", "value": 30,
        "currency": "EUR", "occurredAt": iso(at("11:05"))}))
        .accepted();
    "pp".into()
}

fn sources(app: &TestApp) -> Vec<String> {
    rows(&report_ok(app, &format!("from={DAY}&to={DAY}&by=source")))
        .into_iter()
        .filter(|(_, f)| f[3] != json!(0))
        .map(|(k, _)| k)
        .collect()
}

fn edit_list(app: &TestApp, flag: &str, host: &str) -> CliRun {
    let run = app.cli(&["site", "update", &app.site.id, flag, host]);
    assert_eq!(run.code, 0, "{run:?}");
    run
}

fn reattribute(app: &TestApp) {
    let conn = app.store();
    with_writer(app, |w| {
        convapi::reattribute::run(&conn, w, now_ms()).expect("re-attribute")
    });
}

#[test]
fn a_paypal_return_leaves_the_credit_to_the_ad_and_the_list_re_attributes() {
    let app = manual().start();
    let order = paypal_return(&app);
    drain(&app);
    let (source, medium, _, _) = touch(&status(&app, &order));
    assert_eq!((source.as_str(), medium.as_str()), ("google", "cpc"));
    // The return from PayPal is a visit of its own, direct.
    let by_source = rows(&report_ok(&app, &format!("from={DAY}&to={DAY}&by=source")));
    assert_eq!(
        by_source
            .iter()
            .map(|(k, f)| (k.as_str(), f[0].clone()))
            .collect::<Vec<_>>(),
        [("google", json!(1)), ("(direct)", json!(1))]
    );

    // Taking PayPal off the list hands the order to it, once re-attributed.
    let run = edit_list(&app, "--include-referrer", "paypal.com");
    assert!(
        run.stdout.contains("re-attributed in the background"),
        "{run:?}"
    );
    assert_eq!(sources(&app), ["google"], "nothing moves before the run");
    reattribute(&app);
    assert_eq!(sources(&app), ["paypal.com"]);
    let (source, medium, _, _) = touch(&status(&app, &order));
    assert_eq!(
        (source.as_str(), medium.as_str()),
        ("paypal.com", "referral")
    );
    let progress = convapi::store::referrals::progress(&app.store(), &app.site.id)
        .unwrap()
        .unwrap();
    assert_eq!(
        (progress.running, progress.done, progress.changed),
        (false, 1, 1)
    );
    assert!(progress.finished_at.is_some());

    // Adding it back restores the ad's credit; adding it twice changes nothing.
    edit_list(&app, "--exclude-referrer", "https://www.PayPal.com/");
    reattribute(&app);
    assert_eq!(sources(&app), ["google"]);
    let run = edit_list(&app, "--exclude-referrer", "paypal.com");
    assert!(run.stdout.contains("(unchanged)"), "{run:?}");

    // A bad host is refused, naming the fix.
    let run = app.cli(&[
        "site",
        "update",
        &app.site.id,
        "--exclude-referrer",
        "pay pal",
    ]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("like paypal.com"), "{run:?}");
}

#[test]
fn the_server_re_attributes_in_the_background() {
    let app = TestApp::start();
    let order = paypal_return(&app);
    await_status(&app, &order, "processed");
    assert_eq!(sources(&app), ["google"]);
    edit_list(&app, "--include-referrer", "www.paypal.com");
    let wait_for = |want: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while sources(&app) != [want] {
            assert!(std::time::Instant::now() < deadline, "never {want}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    wait_for("paypal.com");
    edit_list(&app, "--exclude-referrer", "paypal.com");
    wait_for("google");
}

#[test]
fn the_dashboard_shows_the_figures_with_the_comparison_and_their_csv() {
    let app = fixture();
    // A key that a spreadsheet would take for a formula.
    visit(
        &app,
        "v6",
        "https://shop.example/?utm_source=%3DHYPERLINK(1)&utm_medium=email",
        at("14:00"),
        Some(json!({"orderId": "o6", "value": 1, "currency": "EUR"})),
    );
    drain(&app);
    let email = format!("{}@example.com", unique("user"));
    create_user(&app, &app.tenant.id, &email, PASSWORD);
    let d = DashClient::logged_in(&app, &email, PASSWORD);
    let base = format!("/dashboard/sites/{}", app.site.id);
    let page = d.page(&format!("{base}/report?from={DAY}&to={DAY}&by=channel"));
    // The total row: 5 visitors, 4 converting (u7 has no visit), 6 conversions; 86.11 + 1.00 =
    // 87.11 gross, 51.24 net over 5 purchases = 10.248, 10.25.
    let total = page.split("<tr class=\"figures-row").last().expect("rows");
    let cells: Vec<&str> = total
        .split("<td")
        .skip(1)
        .map(|c| c.split('>').nth(1).unwrap().split('<').next().unwrap())
        .collect();
    assert_eq!(
        cells,
        ["Total", "5", "4", "80.00%", "6", "87.11", "35.87", "51.24", "10.25"],
        "{page}"
    );
    assert!(page.contains("<td>Paid Search</td>"), "{page}");
    // The tooltips are the glossary's.
    assert!(page.contains(&format!(
        "<abbr title=\"{}\">Visitors</abbr>",
        convapi::report::meaning("visitors")
    )));
    assert!(
        page.contains("Compared with 2026-11-12 to 2026-11-12 (the days before)"),
        "{page}"
    );
    assert!(
        page.contains("visitors <strong>5</strong> (before: 1, <span class=\"up\">+400.0%</span>)"),
        "{page}"
    );
    let weekday = d.page(&format!(
        "{base}/report?from={DAY}&to={DAY}&by=channel&compare=weekday"
    ));
    assert!(weekday.contains("Compared with 2026-11-06 to 2026-11-06 (same weekdays)"));
    assert!(!page.contains("id=\"reattribution\""));

    let csv = d.get(&format!(
        "{base}/report.csv?figures=1&from={DAY}&to={DAY}&by=source"
    ));
    assert_eq!(csv.status, 200);
    let text = csv.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "source,visitors,convertingVisitors,conversionRate,conversions,purchases,grossRevenue,refunds,netRevenue,averageOrderValue,currency"
    );
    assert!(
        lines.contains(&"news,1,1,1,1,1,47.61,15.87,31.74,31.74,EUR"),
        "{text}"
    );
    assert!(
        lines.contains(&"'=HYPERLINK(1),1,1,1,1,1,1.00,0.00,1.00,1.00,EUR"),
        "{text}"
    );
    assert_eq!(
        lines.last(),
        Some(&"Total,5,4,0.8,6,5,87.11,35.87,51.24,10.25,EUR")
    );

    // After a change of the exclusion list, the page says what the re-attribution did (the
    // site's 8 conversions, the day before's, the test order and the kept one included).
    edit_list(&app, "--exclude-referrer", "partner.example");
    let running = d.page(&format!("{base}/report?from={DAY}&to={DAY}"));
    assert!(
        running.contains("Re-attributing this site's conversions"),
        "{running}"
    );
    reattribute(&app);
    let done = d.page(&format!("{base}/report?from={DAY}&to={DAY}"));
    assert!(done.contains("8 looked at, 0 changed source."), "{done}");
}

#[test]
fn the_site_overview_edits_the_exclusion_list() {
    let app = manual().start();
    let order = paypal_return(&app);
    drain(&app);
    let email = format!("{}@example.com", unique("user"));
    create_user(&app, &app.tenant.id, &email, PASSWORD);
    let d = DashClient::logged_in(&app, &email, PASSWORD);
    let base = format!("/dashboard/sites/{}", app.site.id);
    let page = d.page(&base);
    assert!(page.contains("paypal.com\ncheckout.stripe.com\n"), "{page}");
    // A line that is not a host is refused, named, with what was typed kept.
    let bad = d.submit(
        &format!("{base}/referrers"),
        &[("referrers", "klarna.com\npay pal")],
    );
    assert_eq!(bad.status, 400);
    let text = bad.text();
    assert!(text.contains("&quot;pay pal&quot; is not a host"), "{text}");
    assert!(text.contains("klarna.com\npay pal</textarea>"), "{text}");
    // The list without PayPal: saved, and the order goes to PayPal once re-attributed.
    let saved = d.submit(
        &format!("{base}/referrers"),
        &[("referrers", "checkout.stripe.com\n\n  Klarna.com \n")],
    );
    assert_eq!(saved.status, 303, "{}", saved.text());
    assert!(d
        .page(&base)
        .contains(">checkout.stripe.com\nklarna.com</textarea>"));
    reattribute(&app);
    let (source, _, _, _) = touch(&status(&app, &order));
    assert_eq!(source, "paypal.com");
}

/// Every report of the fixture, by each grouping, with the previous period beside it.
fn all_reports(app: &TestApp) -> Vec<Value> {
    ["source", "medium", "campaign", "channel", "type"]
        .iter()
        .map(|by| {
            report_ok(
                app,
                &format!("from=2026-11-12&to={DAY}&by={by}&compare=previous"),
            )
        })
        .collect()
}

/// Builds every due day of the visitors rollup, as `serve`'s thread does; how many steps it took.
fn build_sketches(app: &TestApp) -> usize {
    let conn = app.store();
    with_writer(app, |writer| {
        convapi::sketches::run(&conn, writer, now_ms()).expect("build the sketches")
    })
}

fn current_days(app: &TestApp) -> i64 {
    app.query_i64(
        "SELECT COUNT(*) FROM sketch_days WHERE site_id = ?1 AND built = version",
        &[&app.site.id],
    )
}

#[test]
fn the_visitors_rollup_gives_what_the_rows_give_and_follows_later_changes() {
    let app = fixture();
    let from_rows = all_reports(&app);
    assert_eq!(current_days(&app), 0);
    // The site's days from its first (2026-11-12) to the day before yesterday, one step each.
    assert!(build_sketches(&app) >= 2);
    assert!(current_days(&app) >= 2, "the fixture's days are built");
    assert_eq!(
        all_reports(&app),
        from_rows,
        "the same figures from the sketches"
    );
    assert_eq!(build_sketches(&app), 0, "nothing is due once built");

    // An order backfilled on a built day, by a visitor seen that day: counted at once (the day is
    // counted from its rows until it is built again), and the same once built again.
    visit(
        &app,
        "v6",
        "https://shop.example/?utm_source=news&utm_medium=email",
        at("14:00"),
        Some(json!({"orderId": "o6", "value": 7, "currency": "EUR"})),
    );
    drain(&app);
    let v = report_ok(&app, &format!("from={DAY}&to={DAY}&by=source"));
    assert_eq!(
        (&v["totals"]["visitors"], &v["totals"]["convertingVisitors"]),
        (&json!(5), &json!(4)),
        "{v}"
    );
    let changed = all_reports(&app);
    assert_ne!(changed, from_rows);
    assert!(build_sketches(&app) >= 1, "the changed day is due again");
    assert_eq!(all_reports(&app), changed);

    // A new referral exclusion list changes what decides a visit's keys: every built day is due.
    let before = current_days(&app);
    app.cli(&[
        "site",
        "update",
        &app.site.id,
        "--exclude-referrer",
        "news.example",
    ]);
    assert_eq!(
        current_days(&app),
        0,
        "{before} built days, none current now"
    );
    assert_eq!(
        all_reports(&app),
        changed,
        "counted from the rows meanwhile"
    );
    build_sketches(&app);
    assert_eq!(current_days(&app), before);
    assert_eq!(all_reports(&app), changed);
}
