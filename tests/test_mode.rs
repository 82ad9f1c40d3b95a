//! Test mode through the front door (docs/decisions/api.md, "Test mode"): `key create --test` and
//! its listing; a test key's orders as a namespace of their own, both ways, for single calls,
//! batches, adjustments and the status lookup; test data absent from the report, its rollups, the
//! export and the dashboard's figures; `test purge` and the 7-day expiry. Here: a rule of what a
//! test key's data is and is not.

use crate::common::pipeline_support::*;
use crate::common::*;
use serde_json::{json, Value};

/// A visitor seen an hour ago; its id.
fn visitor(app: &TestApp) -> String {
    let v = unique("v");
    app.pageview(&v, "https://shop.example/", now_ms() - HOUR);
    v
}

fn report_body(visitor: &str, order: &str, value: i64) -> Value {
    json!({"visitorId": visitor, "orderId": order, "value": value, "currency": "EUR"})
}

fn post_batch(app: &TestApp, key: &str, items: &[Value]) -> Resp {
    app.send(
        "POST",
        &format!("/api/sites/{}/conversions/batch", app.site.id),
        &[
            ("Authorization", &format!("Bearer {key}")),
            ("Content-Type", "application/json"),
        ],
        Some(&serde_json::to_vec(&json!({ "conversions": items })).unwrap()),
    )
}

fn adjust(app: &TestApp, key: &str, order: &str, body: &Value) -> Resp {
    app.post_adjustment_raw(
        key,
        &app.site.id,
        order,
        Some("application/json"),
        &serde_json::to_vec(body).unwrap(),
    )
}

#[test]
fn a_test_key_is_made_with_its_prefix_and_listed_as_test() {
    let app = TestApp::start();
    let v = app.cli_json(&[
        "key",
        "create",
        "--tenant",
        &app.tenant.id,
        "--test",
        "--name",
        "staging",
        "--json",
    ]);
    let key = v["key"].as_str().unwrap();
    assert!(key.starts_with("ask_test_"), "{v}");
    assert_eq!(key.len(), "ask_test_".len() + 40, "{v}");
    assert!(key["ask_test_".len()..]
        .bytes()
        .all(|b| b.is_ascii_alphanumeric()));
    assert_eq!(v["test"], json!(true), "{v}");
    assert!(key.starts_with(v["prefix"].as_str().unwrap()), "{v}");

    let list = app.cli_json(&["key", "list", "--tenant", &app.tenant.id, "--json"]);
    let entry = |id: &str| -> Value {
        list.as_array()
            .unwrap()
            .iter()
            .find(|k| k["id"] == json!(id))
            .cloned()
            .unwrap_or_else(|| panic!("key {id} in {list}"))
    };
    assert_eq!(entry(v["id"].as_str().unwrap())["test"], json!(true));
    assert_eq!(entry(&app.key.id)["test"], json!(false));
    let text = app.cli(&["key", "list", "--tenant", &app.tenant.id]).stdout;
    let line = text
        .lines()
        .find(|l| l.starts_with(v["id"].as_str().unwrap()))
        .expect("the test key's line");
    assert!(line.contains(" test "), "{text}");
    // A test key answers as a live one: it works at once.
    let visitor = visitor(&app);
    app.post_conversion_as(key, &app.site.id, &report_body(&visitor, "t-1", 10))
        .accepted();
}

#[test]
fn test_and_live_orders_of_one_order_id_are_kept_apart_both_ways() {
    let app = manual().start();
    let (_, test) = app.create_test_key();
    let live = app.key.key.clone();
    let site = app.site.id.clone();
    let v = visitor(&app);

    // Live first, then test with the same orderId: a new order, not a repeat.
    let (live_event, _) = app
        .post_conversion_as(&live, &site, &report_body(&v, "same", 100))
        .accepted();
    let (test_event, _) = app
        .post_conversion_as(&test, &site, &report_body(&v, "same", 7))
        .accepted();
    assert_ne!(live_event, test_event);
    // Test first, then live: the same the other way round.
    let (test_first, _) = app
        .post_conversion_as(&test, &site, &report_body(&v, "other", 3))
        .accepted();
    let (live_second, _) = app
        .post_conversion_as(&live, &site, &report_body(&v, "other", 30))
        .accepted();
    assert_ne!(test_first, live_second);
    // Each repeat finds its own mode's order.
    let (again, _) = app
        .post_conversion_as(&test, &site, &report_body(&v, "same", 7))
        .accepted();
    assert_eq!(again, test_event);
    let (again, _) = app
        .post_conversion_as(&live, &site, &report_body(&v, "same", 100))
        .accepted();
    assert_eq!(again, live_event);

    // The status lookup sees its own mode only.
    let seen = app.order_status_as(&live, &site, "same").expect(200);
    assert_eq!(
        (seen["eventId"].clone(), seen["value"].clone()),
        (json!(live_event), json!(100))
    );
    let seen = app.order_status_as(&test, &site, "same").expect(200);
    assert_eq!(
        (seen["eventId"].clone(), seen["value"].clone()),
        (json!(test_event), json!(7))
    );
    // An order of the other mode only is unknown: the same 404 as an order never sent.
    let (test_only, _) = app
        .post_conversion_as(&test, &site, &report_body(&v, "test-only", 5))
        .accepted();
    let (live_only, _) = app
        .post_conversion_as(&live, &site, &report_body(&v, "live-only", 5))
        .accepted();
    assert_ne!(test_only, live_only);
    let never = app.order_status_as(&live, &site, "never-sent");
    let want = expect_error(&never, 404, "ORDER_NOT_FOUND");
    assert_eq!(
        expect_error(
            &app.order_status_as(&live, &site, "test-only"),
            404,
            "ORDER_NOT_FOUND"
        ),
        want
    );
    assert_eq!(
        expect_error(
            &app.order_status_as(&test, &site, "live-only"),
            404,
            "ORDER_NOT_FOUND"
        ),
        want
    );

    // Batches: a test batch repeats test orders and makes new ones in the test namespace only.
    let answer = post_batch(
        &app,
        &test,
        &[report_body(&v, "same", 7), report_body(&v, "batch-new", 9)],
    )
    .expect(200);
    let results = answer["results"].as_array().expect("results");
    assert_eq!(results[0]["eventId"], json!(test_event), "{answer}");
    assert_eq!(results[1]["status"], json!(202), "{answer}");
    expect_error(
        &app.order_status_as(&live, &site, "batch-new"),
        404,
        "ORDER_NOT_FOUND",
    );
    app.order_status_as(&test, &site, "batch-new").expect(200);
    let answer = post_batch(&app, &live, &[report_body(&v, "same", 100)]).expect(200);
    assert_eq!(
        answer["results"][0]["eventId"],
        json!(live_event),
        "{answer}"
    );

    // Adjustments: one adjustmentId on both orders, each reaching its own mode's order only.
    let refund = |value: i64| json!({"adjustmentId": "r-1", "type": "refund", "value": value});
    let t = adjust(&app, &test, "same", &refund(2)).expect(202);
    assert_eq!(
        (t["eventId"].clone(), t["netValue"].clone()),
        (json!(test_event), json!(5))
    );
    let l = adjust(&app, &live, "same", &refund(40)).expect(202);
    assert_eq!(
        (l["eventId"].clone(), l["netValue"].clone()),
        (json!(live_event), json!(60))
    );
    expect_error(
        &adjust(&app, &live, "test-only", &refund(1)),
        404,
        "ORDER_NOT_FOUND",
    );
    expect_error(
        &adjust(&app, &test, "live-only", &refund(1)),
        404,
        "ORDER_NOT_FOUND",
    );
    let seen = app.order_status_as(&test, &site, "same").expect(200);
    assert_eq!(seen["netValue"], json!(5), "{seen}");
    assert_eq!(seen["adjustments"].as_array().unwrap().len(), 1, "{seen}");
    let seen = app.order_status_as(&live, &site, "same").expect(200);
    assert_eq!(seen["netValue"], json!(60), "{seen}");
    assert_eq!(seen["adjustments"].as_array().unwrap().len(), 1, "{seen}");

    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM conversions WHERE test = 1", &[]),
        4
    );
    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM conversions WHERE test = 0", &[]),
        3
    );
}

#[test]
fn the_pixel_reports_live_orders_only() {
    let app = manual().start();
    let (_, test) = app.create_test_key();
    let now = now_ms();
    app.pixel(
        "pv",
        json!([
            {"type": "pageview", "url": "https://shop.example/", "ts": now - MINUTE},
            {"type": "purchase", "orderId": "px-1", "value": 12, "currency": "EUR", "ts": now - 30_000},
        ]),
    );
    // The pixel's order is live: a test key neither sees nor takes it over.
    expect_error(
        &app.order_status_as(&test, &app.site.id, "px-1"),
        404,
        "ORDER_NOT_FOUND",
    );
    let (test_event, _) = app
        .post_conversion_as(&test, &app.site.id, &report_body("pv", "px-1", 99))
        .accepted();
    let live = app.order_status("px-1").expect(200);
    assert_ne!(live["eventId"], json!(test_event));
    assert_eq!(live["sources"], json!(["pixel"]), "{live}");
    assert_eq!(live["value"], json!(12), "{live}");
}

#[test]
fn test_data_never_counts_in_the_report_rollups_or_export() {
    let app = manual().start();
    let (_, test) = app.create_test_key();
    let site = app.site.id.clone();
    let v = visitor(&app);
    app.post_conversion_as(&app.key.key, &site, &report_body(&v, "live-1", 100))
        .accepted();
    app.post_adjustment(
        "live-1",
        &json!({"adjustmentId": "r", "type": "refund", "value": 10}),
    )
    .expect(202);
    drain(&app);
    let reports = |app: &TestApp| -> Vec<String> {
        ["source", "type"]
            .iter()
            .flat_map(|by| {
                ["order", "adjustment"].map(|dated| {
                    app.cli(&[
                        "report", "--site", &site, "--by", by, "--dated", dated, "--json",
                    ])
                    .stdout
                })
            })
            .collect()
    };
    let before = reports(&app);
    let export = |format: &str| {
        app.cli(&["export", "--site", &site, "--format", format])
            .stdout
    };
    let csv_before = export("csv");
    let ndjson_before = export("ndjson");

    // Test orders, one of them the same orderId as the live one, with refunds, processed.
    for (order, value) in [("live-1", 70), ("test-2", 500)] {
        app.post_conversion_as(&test, &site, &report_body(&v, order, value))
            .accepted();
        adjust(
            &app,
            &test,
            order,
            &json!({"adjustmentId": "r", "type": "refund", "value": 5}),
        )
        .expect(202);
    }
    drain(&app);
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM conversions WHERE test = 1 AND status = 'processed'",
            &[]
        ),
        2,
        "the test orders were processed"
    );
    assert_eq!(reports(&app), before, "the report did not change");
    assert_eq!(export("csv"), csv_before, "the CSV export did not change");
    assert_eq!(
        export("ndjson"),
        ndjson_before,
        "the NDJSON export did not change"
    );
    // The rollups hold no test row: both agree with their aggregation from scratch.
    if !app.is_postgres() {
        let conn = convapi::store::open(&app.db).expect("open db");
        assert_eq!(
            convapi::store::report::check_rollup(&conn).expect("check"),
            Vec::<String>::new()
        );
    }
    assert_eq!(
        app.query_i64(
            "SELECT COALESCE(SUM(conversions), 0) FROM report_daily",
            &[]
        ),
        1
    );
    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM adjustments WHERE counted <> 0", &[]),
        1,
        "only the live refund is counted"
    );
}

#[test]
fn the_dashboard_shows_test_orders_only_under_the_test_data_switch() {
    let app = TestApp::start();
    let (test_id, test) = app.create_test_key();
    let v = visitor(&app);
    let (live_event, _) = app
        .post_conversion(&report_body(&v, "dash-live", 10))
        .accepted();
    let (test_event, _) = app
        .post_conversion_as(&test, &app.site.id, &report_body(&v, "dash-test", 20))
        .accepted();
    let email = format!("{}@example.com", unique("user"));
    create_user(&app, &app.tenant.id, &email, "correct horse battery");
    let d = DashClient::logged_in(&app, &email, "correct horse battery");
    let base = format!("/dashboard/sites/{}", app.site.id);

    // The overview's figures are live: a test order alone is no conversion received.
    let overview = d.page(&base);
    assert!(overview.contains("Last conversion received"), "{overview}");
    let fresh = app.create_site(&app.tenant.id, "Fresh", &[]);
    let fv = unique("v");
    app.collect(&json!({"trackerId": fresh.tracker_id, "visitorId": fv,
        "events": [{"type": "pageview", "url": "https://f.example/", "ts": now_ms() - HOUR}]}))
        .expect(200);
    app.post_conversion_as(&test, &fresh.id, &report_body(&fv, "only-test", 5))
        .accepted();
    let overview = d.page(&format!("/dashboard/sites/{}", fresh.id));
    assert!(
        overview.contains("No conversion received yet."),
        "{overview}"
    );
    let live = d.page(&format!("{base}/conversions"));
    assert!(
        live.contains("dash-live") && !live.contains("dash-test"),
        "{live}"
    );
    assert!(!live.contains("Test data: on"), "{live}");
    let on = d.page(&format!("{base}/conversions?test=1"));
    assert!(
        on.contains("dash-test") && !on.contains("dash-live"),
        "{on}"
    );
    assert!(on.contains("Test data: on"), "{on}");
    assert!(
        on.contains(&format!("/conversions/{test_event}?test=1")),
        "the order links keep the switch: {on}"
    );
    // The order page: a test order only under the switch, a live one only without it.
    let r = d.get(&format!("{base}/conversions/{test_event}"));
    assert_eq!(r.status, 404, "a test order without the switch");
    let page = d.page(&format!("{base}/conversions/{test_event}?test=1"));
    assert!(
        page.contains("Test data: on") && page.contains("dash-test"),
        "{page}"
    );
    let r = d.get(&format!("{base}/conversions/{live_event}?test=1"));
    assert_eq!(r.status, 404, "a live order under the switch");
    d.page(&format!("{base}/conversions/{live_event}"));
    // Test data is never exported, the CSV included.
    let csv = d.get(&format!("{base}/conversions.csv")).text();
    assert!(
        csv.contains("dash-live") && !csv.contains("dash-test"),
        "{csv}"
    );
    assert_eq!(d.get(&format!("{base}/conversions.csv?test=1")).status, 400);
    // Another tenant's user sees neither, switch or not.
    let other = app.create_tenant("Other");
    let email = format!("{}@example.com", unique("user"));
    create_user(&app, &other.id, &email, "correct horse battery");
    let stranger = DashClient::logged_in(&app, &email, "correct horse battery");
    let r = stranger.get(&format!("{base}/conversions/{test_event}?test=1"));
    assert!(r.status == 404 || r.status == 403, "{}", r.status);
    // The keys page marks the test key.
    let keys = d.page("/dashboard/settings/api-keys");
    let at = keys
        .find(&format!("/api-keys/{test_id}/revoke"))
        .expect("its row");
    let row_start = keys[..at].rfind("<tr>").expect("row start");
    assert!(
        keys[row_start..at].contains("test-key"),
        "{}",
        &keys[row_start..at]
    );
}

mod forwarding {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use convapi::forward::platform::Http;
    use convapi::forward::sender;
    use convapi::metrics::Metrics;
    use convapi::store::destinations::{self, Destination, Health};
    use serde_json::{json, Map, Value};

    use super::report_body;
    use crate::common::fake::{FakePlatform, Recorded, Reply};
    use crate::common::pipeline_support::*;
    use crate::common::*;

    fn add(app: &TestApp, kind: &str, name: &str, endpoint: &str, settings: Value) -> String {
        let secrets = match kind {
            "meta" => json!({"access_token": "EAAB-secret-token-0000"}),
            "ga4" => json!({"api_secret": "ga4-secret-0000000"}),
            _ => json!({"developer_token": "devtoken-0000", "client_secret": "cs-0000",
                        "refresh_token": "1//refresh-0000"}),
        };
        let event = match kind {
            "meta" => "Purchase",
            _ => "purchase",
        };
        let obj = |v: Value| -> Map<String, Value> { v.as_object().unwrap().clone() };
        let now = now_ms();
        let d = Destination {
            id: unique("dest"),
            site_id: app.site.id.clone(),
            kind: kind.into(),
            name: name.into(),
            settings: obj(settings),
            secrets: obj(secrets),
            endpoint: Some(endpoint.into()),
            api_version: None,
            events: BTreeMap::from([("purchase".to_string(), event.to_string())]),
            consent: if kind == "ga4" { "analytics" } else { "ads" }.into(),
            enabled: true,
            created_at: now,
            updated_at: now,
            health: Health::default(),
        };
        destinations::insert(&app.store(), &d).unwrap();
        d.id
    }

    fn meta_ok(r: &Recorded) -> Reply {
        let n = r.json()["data"].as_array().map_or(0, Vec::len);
        Reply::ok(json!({"events_received": n, "messages": [], "fbtrace_id": "AbC"}))
    }

    /// The `event_id`s (order ids) of Meta requests, with each request's test code.
    fn meta_sent(fake: &FakePlatform) -> Vec<(String, Option<String>)> {
        fake.requests()
            .iter()
            .flat_map(|r| {
                let v = r.json();
                let code = v["test_event_code"].as_str().map(str::to_owned);
                v["data"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(move |e| {
                        (
                            e["event_id"].as_str().unwrap_or("").to_owned(),
                            code.clone(),
                        )
                    })
            })
            .collect()
    }

    /// The deliveries of order `order` as the status lookup with `key` shows them, by destination.
    fn deliveries(app: &TestApp, key: &str, order: &str) -> BTreeMap<String, Value> {
        let v = app.order_status_as(key, &app.site.id, order).expect(200);
        v["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| (d["destinationId"].as_str().unwrap().to_owned(), d.clone()))
            .collect()
    }

    /// A destination's count of `outcome` in `/metrics` as `m` renders it (0 when it has none).
    fn deliveries_counted(m: &Metrics, dest: &str, outcome: &str) -> u64 {
        let name = format!(
            "convapi_deliveries_total{{destination=\"{dest}\",kind=\"meta\",outcome=\"{outcome}\"}}"
        );
        let text = m.render(0, 0);
        if text.lines().any(|l| l.starts_with(&format!("{name} "))) {
            metric_in(&text, &name) as u64
        } else {
            0
        }
    }

    #[test]
    fn a_test_send_is_counted_as_tested_not_as_a_live_delivery_in_metrics() {
        let meta = FakePlatform::start(meta_ok);
        let app = TestApp::builder()
            .serve_args(&["--pipeline", "off", "--forward-threads", "0"])
            .start();
        let (_, test) = app.create_test_key();
        let dest = add(
            &app,
            "meta",
            "Meta with a test code",
            &meta.url(),
            json!({"pixel_id": "1234567891", "test_event_code": "TEST4242"}),
        );
        let now = now_ms();
        app.identify("fm", "client-m", now - 60_000);
        app.pageview("fm", "https://shop.example/?fbclid=abc", now - 50_000);
        app.post_conversion_as(&test, &app.site.id, &report_body("fm", "test-only", 7))
            .accepted();
        drain(&app);
        let conn = app.store();
        let http = Http::new(Duration::from_secs(5));
        let m = Metrics::default();
        for _ in 0..2 {
            with_writer(&app, |w| {
                sender::drain_once(&conn, w, &m, &http, now_ms()).expect("send")
            });
        }
        // Sent to the test endpoint (with the test code), and stored as delivered with its verdict.
        assert_eq!(meta.requests().len(), 1);
        let t = deliveries(&app, &test, "test-only");
        assert_eq!(t[&dest]["status"], json!("delivered"), "{t:?}");
        // …but not a live delivery in /metrics: counted apart.
        assert_eq!(
            deliveries_counted(&m, &dest, "delivered"),
            0,
            "{}",
            m.render(0, 0)
        );
        assert_eq!(
            deliveries_counted(&m, &dest, "tested"),
            1,
            "{}",
            m.render(0, 0)
        );

        // A live order then moves the live count only.
        app.post_conversion(&report_body("fm", "live-one", 30))
            .accepted();
        drain(&app);
        for _ in 0..2 {
            with_writer(&app, |w| {
                sender::drain_once(&conn, w, &m, &http, now_ms()).expect("send")
            });
        }
        assert_eq!(
            deliveries_counted(&m, &dest, "delivered"),
            1,
            "{}",
            m.render(0, 0)
        );
        assert_eq!(
            deliveries_counted(&m, &dest, "tested"),
            1,
            "{}",
            m.render(0, 0)
        );
    }

    #[test]
    fn a_test_order_goes_only_to_the_platforms_test_endpoints_and_keeps_their_verdict() {
        let meta = FakePlatform::start(meta_ok);
        let meta_coded = FakePlatform::start(meta_ok);
        let ga4 = FakePlatform::start(|r| {
            if r.path().starts_with("/debug/") {
                Reply::ok(
                    json!({"validationMessages": [{"fieldPath": "events.params.currency",
                    "description": "fake: currency looks odd", "validationCode": "VALUE_INVALID"}]}),
                )
            } else {
                Reply::status(204, Value::Null)
            }
        });
        let ads = FakePlatform::start(|r| {
            if r.path() == "/token" {
                Reply::ok(
                    json!({"access_token": "tok-1", "expires_in": 3599, "token_type": "Bearer"}),
                )
            } else if r.json()["validateOnly"] == json!(true) {
                Reply::ok(json!({"jobId": "1"}))
            } else {
                let convs = r.json()["conversions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let results: Vec<Value> = convs
                    .iter()
                    .map(|c| {
                        json!({"gclid": c["gclid"], "conversionAction": c["conversionAction"],
                                    "conversionDateTime": c["conversionDateTime"]})
                    })
                    .collect();
                Reply::ok(json!({"jobId": "2", "results": results}))
            }
        });
        let app = TestApp::builder()
            .serve_args(&["--pipeline", "off", "--forward-threads", "0"])
            .start();
        let (_, test) = app.create_test_key();
        let live_meta = add(
            &app,
            "meta",
            "Meta",
            &meta.url(),
            json!({"pixel_id": "1234567890"}),
        );
        let coded_meta = add(
            &app,
            "meta",
            "Meta with a test code",
            &meta_coded.url(),
            json!({"pixel_id": "1234567891", "test_event_code": "TEST4242"}),
        );
        let ga4_dest = add(
            &app,
            "ga4",
            "GA4",
            &ga4.url(),
            json!({"measurement_id": "G-TEST123"}),
        );
        let ads_dest = add(
            &app,
            "google_ads",
            "Google Ads",
            &ads.url(),
            json!({"customer_id": "123-456-7890", "conversion_action": "987654321",
                   "client_id": "1234-abc.apps.googleusercontent.com"}),
        );
        let now = now_ms();
        app.identify("fv", "client-1", now - 60_000);
        app.pageview(
            "fv",
            "https://shop.example/?fbclid=abc&gclid=Cj0KCQ-live-click",
            now - 50_000,
        );
        app.post_conversion(&report_body("fv", "same-order", 30))
            .accepted();
        app.post_conversion_as(&test, &app.site.id, &report_body("fv", "same-order", 7))
            .accepted();
        drain(&app);
        let conn = app.store();
        let http = Http::new(Duration::from_secs(5));
        for _ in 0..3 {
            with_writer(&app, |w| {
                sender::drain_once(&conn, w, &Metrics::default(), &http, now_ms()).expect("send")
            });
        }

        // Meta without a test code: the live order only, never a test code; the test order is
        // skipped and says why.
        assert_eq!(meta_sent(&meta), [("same-order".to_owned(), None)]);
        let t = deliveries(&app, &test, "same-order");
        assert_eq!(t[&live_meta]["status"], json!("skipped"), "{t:?}");
        let why = t[&live_meta]["lastError"].as_str().unwrap();
        assert!(why.contains("test_event_code"), "{why}");
        // Meta with a test code: the live order without it, the test order with it, apart.
        let mut coded = meta_sent(&meta_coded);
        coded.sort();
        assert_eq!(
            coded,
            [
                ("same-order".to_owned(), None),
                ("same-order".to_owned(), Some("TEST4242".to_owned()))
            ]
        );
        assert!(meta_coded.requests().iter().all(|r| {
            let v = r.json();
            v["data"].as_array().map_or(0, Vec::len) == 1
        }));
        assert_eq!(t[&coded_meta]["status"], json!("delivered"), "{t:?}");
        let verdict = t[&coded_meta]["lastError"].as_str().unwrap();
        assert!(verdict.contains("TEST4242"), "{verdict}");
        // GA4: the live order to /mp/collect, the test order to the validation server only,
        // whose messages are kept on the delivery.
        let paths: Vec<(String, f64)> = ga4
            .requests()
            .iter()
            .map(|r| {
                let value = r.json()["events"][0]["params"]["value"]
                    .as_f64()
                    .unwrap_or(-1.0);
                (r.path().to_owned(), value)
            })
            .collect();
        assert_eq!(
            paths,
            [
                ("/mp/collect".to_owned(), 30.0),
                ("/debug/mp/collect".to_owned(), 7.0)
            ],
            "the live order live, the test order to the validation server"
        );
        assert_eq!(t[&ga4_dest]["status"], json!("delivered"), "{t:?}");
        let verdict = t[&ga4_dest]["lastError"].as_str().unwrap();
        assert!(verdict.contains("fake: currency looks odd"), "{verdict}");
        // Google Ads: the test order only with validateOnly, the live one never.
        let uploads: Vec<(bool, Vec<f64>)> = ads
            .requests()
            .iter()
            .filter(|r| r.path() != "/token")
            .map(|r| {
                let v = r.json();
                let values = v["conversions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c["conversionValue"].as_f64().unwrap_or(-1.0))
                    .collect();
                (v["validateOnly"] == json!(true), values)
            })
            .collect();
        assert_eq!(uploads.len(), 2, "{uploads:?}");
        for (validate_only, values) in &uploads {
            let want = if *validate_only { 7.0 } else { 30.0 };
            assert_eq!(values, &vec![want], "{uploads:?}");
        }
        assert_eq!(t[&ads_dest]["status"], json!("delivered"), "{t:?}");
        assert!(t[&ads_dest]["lastError"]
            .as_str()
            .unwrap()
            .contains("validateOnly"));
        // The live order's deliveries carry no test verdict.
        let l = deliveries(&app, &app.key.key, "same-order");
        for d in l.values() {
            if d["status"] == json!("delivered") {
                assert_eq!(d["lastError"], Value::Null, "{d}");
            }
        }
        assert_eq!(l[&live_meta]["status"], json!("delivered"));

        // A test order's refund goes to no live endpoint: skipped at every destination, saying why.
        let before = (ga4.requests().len(), ads.requests().len());
        let refund = json!({"adjustmentId": "r-1", "type": "refund", "value": 2});
        super::adjust(&app, &test, "same-order", &refund).expect(202);
        for _ in 0..2 {
            with_writer(&app, |w| {
                sender::drain_once(&conn, w, &Metrics::default(), &http, now_ms()).expect("send")
            });
        }
        assert_eq!((ga4.requests().len(), ads.requests().len()), before);
        let v = app
            .order_status_as(&test, &app.site.id, "same-order")
            .expect(200);
        let passed_on = v["adjustments"][0]["deliveries"].as_array().unwrap();
        assert_eq!(passed_on.len(), 4, "{v}");
        for d in passed_on {
            if d["destinationId"] == json!(live_meta) || d["destinationId"] == json!(coded_meta) {
                assert_eq!(d["status"], json!("not_supported"), "{d}");
            } else {
                assert_eq!(d["status"], json!("skipped"), "{d}");
                assert!(
                    d["lastError"].as_str().unwrap().starts_with("test order"),
                    "{d}"
                );
            }
        }
    }
}

/// Rows of each table that hang on the site's test conversions, and the test conversions.
fn test_rows(app: &TestApp) -> Vec<i64> {
    [
        "SELECT COUNT(*) FROM conversions WHERE test = 1",
        "SELECT COUNT(*) FROM adjustments a JOIN conversions c ON c.id = a.conversion_id WHERE c.test = 1",
        "SELECT COUNT(*) FROM outbox o JOIN conversions c ON c.id = o.conversion_id WHERE c.test = 1",
    ]
    .iter()
    .map(|q| app.query_i64(q, &[]))
    .collect()
}

#[test]
fn test_purge_deletes_a_sites_test_data_and_nothing_else() {
    let app = manual().start();
    let (_, test) = app.create_test_key();
    let site = app.site.id.clone();
    let v = visitor(&app);
    for order in ["p-1", "p-2"] {
        app.post_conversion_as(&test, &site, &report_body(&v, order, 10))
            .accepted();
    }
    app.post_conversion(&report_body(&v, "p-1", 50)).accepted();
    adjust(
        &app,
        &test,
        "p-1",
        &json!({"adjustmentId": "r", "type": "refund", "value": 1}),
    )
    .expect(202);
    app.post_adjustment(
        "p-1",
        &json!({"adjustmentId": "r", "type": "refund", "value": 5}),
    )
    .expect(202);
    // Another site's test data stays.
    let other = app.create_site(&app.tenant.id, "Other", &[]);
    let ov = unique("v");
    app.collect(&json!({"trackerId": other.tracker_id, "visitorId": ov,
        "events": [{"type": "pageview", "url": "https://o.example/", "ts": now_ms() - HOUR}]}))
        .expect(200);
    app.post_conversion_as(&test, &other.id, &report_body(&ov, "p-1", 3))
        .accepted();
    assert_eq!(test_rows(&app), [3, 1, 3]);

    let out = app.cli_json(&["test", "purge", "--site", &site, "--json"]);
    assert_eq!(out, json!({"siteId": site, "conversions": 2}));
    assert_eq!(
        test_rows(&app),
        [1, 0, 1],
        "the other site's test order stays"
    );
    expect_error(
        &app.order_status_as(&test, &site, "p-1"),
        404,
        "ORDER_NOT_FOUND",
    );
    let live = app.order_status("p-1").expect(200);
    assert_eq!(
        (live["value"].clone(), live["netValue"].clone()),
        (json!(50), json!(45)),
        "{live}"
    );
    app.order_status_as(&test, &other.id, "p-1").expect(200);
    // Again: nothing left to delete. An unknown site is refused and named.
    let again = app.cli_json(&["test", "purge", "--site", &site, "--json"]);
    assert_eq!(again["conversions"], json!(0));
    let unknown = app.cli(&[
        "test",
        "purge",
        "--site",
        "6f1c2f9e-0000-4000-8000-000000000000",
    ]);
    assert_ne!(unknown.code, 0);
    assert!(
        unknown.stderr.contains("no site with id"),
        "{}",
        unknown.stderr
    );
}

#[test]
fn test_data_expires_seven_days_after_it_was_received() {
    let app = manual().start();
    let (_, test) = app.create_test_key();
    let site = app.site.id.clone();
    let v = visitor(&app);
    app.post_conversion_as(&test, &site, &report_body(&v, "e-1", 10))
        .accepted();
    adjust(
        &app,
        &test,
        "e-1",
        &json!({"adjustmentId": "r", "type": "refund", "value": 1}),
    )
    .expect(202);
    app.post_conversion(&report_body(&v, "e-1", 20)).accepted();
    drain(&app);
    let received = app.query_i64(
        "SELECT MAX(created_at) FROM conversions WHERE test = 1",
        &[],
    );
    let conn = app.store();
    let prune = |at: i64| {
        with_writer(&app, |w| convapi::retention::prune_once(&conn, w, at)).expect("prune")
    };
    prune(received + 7 * 24 * HOUR - 1);
    assert_eq!(test_rows(&app)[0], 1, "kept until 7 days have passed");
    prune(received + 7 * 24 * HOUR + 1);
    assert_eq!(test_rows(&app), [0, 0, 0]);
    expect_error(
        &app.order_status_as(&test, &site, "e-1"),
        404,
        "ORDER_NOT_FOUND",
    );
    app.order_status("e-1").expect(200);
}

#[test]
fn metrics_count_test_conversions_apart_from_live_ones() {
    let app = manual().start();
    let (_, test) = app.create_test_key();
    let v = visitor(&app);
    app.post_conversion_as(&test, &app.site.id, &report_body(&v, "m-1", 10))
        .accepted();
    post_batch(&app, &test, &[report_body(&v, "m-2", 10)]).expect(200);
    assert_eq!(app.metric("convapi_conversions_accepted_total"), 0);
    assert_eq!(app.metric("convapi_test_conversions_accepted_total"), 2);
    app.post_conversion(&report_body(&v, "m-1", 10)).accepted();
    assert_eq!(app.metric("convapi_conversions_accepted_total"), 1);
    assert_eq!(app.metric("convapi_test_conversions_accepted_total"), 2);
}
