//! The pipeline after the 202 (docs/decisions.md §5): each attribution model, each channel rule,
//! the person across devices, the window edge, the status view before and after, idempotent passes,
//! failure handling (backoff, dead letters, a slow item) and the worker inside a running server.
//! Currency lives in `currency.rs`, the report in `report.rs`, kill -9 mid-drain in `crash.rs`.
//!
//! Most tests run the server with `--pipeline off` and call `convapi::pipeline::drain_once` on its
//! database file, through a writer of their own, so every step is deterministic; the clock of a
//! pass is a parameter.

use std::time::{Duration, Instant};

use crate::common::pipeline_support::*;
use crate::common::*;
use convapi::metrics::Metrics;
use convapi::pipeline::{self, DrainStats, Options};
use serde_json::{json, Value};

/// One pageview with `url` and `referrer` on the site with `tracker`; returns its session.
fn visit(
    app: &TestApp,
    tracker: &str,
    visitor: &str,
    url: &str,
    referrer: Option<&str>,
    ts: i64,
) -> String {
    let r = app.collect(&json!({
        "trackerId": tracker, "visitorId": visitor,
        "events": [{"type": "pageview", "url": url, "referrer": referrer, "ts": ts}],
    }));
    r.expect(200);
    r.str("sessionId")
}

fn report_for(app: &TestApp, site: &str, visitor: &str) -> (String, String) {
    let order = unique("order");
    let (_, session) = app
        .post_conversion_as(
            &app.key.key,
            site,
            &json!({"visitorId": visitor, "orderId": order, "value": 10, "currency": "EUR"}),
        )
        .accepted();
    (order, session)
}

#[test]
fn last_non_direct_prefers_an_earlier_paid_session_over_a_later_direct_one() {
    let app = manual().start();
    let now = now_ms();
    let paid = app.pageview("v1", "https://shop.example/?gclid=abc", now - 3 * HOUR);
    let direct = app.pageview("v1", "https://shop.example/", now - HOUR);
    assert_ne!(paid, direct, "an hour of idleness starts a new session");
    let (order, attached) = report_for(&app, &app.site.id, "v1");
    assert_eq!(
        attached, direct,
        "the report attaches to the latest session"
    );

    let before = status(&app, &order);
    assert_eq!(before["status"], "queued", "{before}");
    assert_eq!(before["attribution"], Value::Null, "{before}");
    assert_eq!(before["reportingValue"], Value::Null, "{before}");

    let stats = drain(&app);
    assert_eq!(
        stats,
        DrainStats {
            processed: 1,
            ..Default::default()
        }
    );
    let v = status(&app, &order);
    assert_eq!(v["status"], "processed", "{v}");
    assert_eq!(v["attribution"]["model"], "last_non_direct", "{v}");
    assert_eq!(touch(&v), ("google".into(), "cpc".into(), None, Some(paid)));
    assert_eq!(
        v["sessionId"],
        json!(direct),
        "attachment is not changed by attribution"
    );
    assert_eq!(v["sources"], json!(["api"]));
    assert_eq!(v["reportingCurrency"], "EUR");
    assert_eq!(v["reportingValue"].as_f64(), Some(10.0));
    assert_eq!(v["fxRate"].as_f64(), Some(1.0));
    assert!(v["processedAt"].is_string(), "{v}");
}

#[test]
fn each_model_picks_its_session() {
    let app = manual().start();
    let tenant = app.tenant.id.clone();
    let sites = [
        ("last_non_direct", app.site.clone()),
        (
            "last_touch",
            app.create_site(&tenant, "lt", &["--model", "last_touch"]),
        ),
        (
            "first_touch",
            app.create_site(&tenant, "ft", &["--model", "first_touch"]),
        ),
    ];
    let now = now_ms();
    let mut expected = Vec::new();
    for (model, site) in &sites {
        let v = unique("v");
        let t = &site.tracker_id;
        let referral = visit(
            &app,
            t,
            &v,
            "https://shop.example/",
            Some("https://blog.example/post"),
            now - 5 * HOUR,
        );
        let email = visit(
            &app,
            t,
            &v,
            "https://shop.example/?utm_source=newsletter&utm_medium=email&utm_campaign=bf",
            None,
            now - 3 * HOUR,
        );
        let direct = visit(&app, t, &v, "https://shop.example/", None, now - HOUR);
        let (order, _) = report_for(&app, &site.id, &v);
        let want = match *model {
            "last_non_direct" => ("newsletter", "email", Some("bf"), email),
            "last_touch" => ("(direct)", "(none)", None, direct),
            _ => ("blog.example", "referral", None, referral),
        };
        expected.push((model, site.id.clone(), order, want));
    }
    assert_eq!(drain(&app).processed, 3);
    for (model, site, order, (source, medium, campaign, session)) in expected {
        let v = app.order_status_as(&app.key.key, &site, &order).expect(200);
        assert_eq!(v["attribution"]["model"], json!(model), "{v}");
        assert_eq!(
            touch(&v),
            (
                source.into(),
                medium.into(),
                campaign.map(str::to_owned),
                Some(session)
            ),
            "{model}"
        );
    }
}

#[test]
fn the_window_edge_is_inclusive() {
    let app = manual().window_days(1).start();
    let t = now_ms() - 10 * MINUTE;
    let mut orders = Vec::new();
    // A paid session whose last activity is exactly one window before the conversion counts;
    // one millisecond earlier it does not, and the later direct session is all there is.
    for (offset, counts) in [(0, true), (1, false)] {
        let v = unique("v");
        let paid = app.pageview(
            &v,
            "https://shop.example/?utm_source=ads&utm_medium=cpc",
            t - DAY - offset,
        );
        let direct = app.pageview(&v, "https://shop.example/", t - HOUR);
        let order = unique("order");
        app.post_conversion(&json!({"visitorId": v, "orderId": order, "occurredAt": iso(t)}))
            .accepted();
        orders.push((order, if counts { paid } else { direct }, counts));
    }
    assert_eq!(drain(&app).processed, 2);
    for (order, session, counts) in orders {
        let v = status(&app, &order);
        let (source, medium, _, chosen) = touch(&v);
        assert_eq!(chosen, Some(session), "{v}");
        if counts {
            assert_eq!((source.as_str(), medium.as_str()), ("ads", "cpc"));
        } else {
            assert_eq!((source.as_str(), medium.as_str()), ("(direct)", "(none)"));
        }
    }
}

#[test]
fn channel_rules_through_the_pipeline() {
    let app = manual().domain("shop.example").start();
    let base = "https://shop.example/landing";
    /// (landing query, referrer, source, medium, campaign)
    type Row<'a> = (&'a str, Option<&'a str>, &'a str, &'a str, Option<&'a str>);
    let rows: [Row; 14] = [
        (
            "?utm_source=newsletter&utm_medium=email&utm_campaign=bf&gclid=x",
            Some("https://www.google.com/"),
            "newsletter",
            "email",
            Some("bf"),
        ),
        ("?gclid=x", None, "google", "cpc", None),
        ("?gbraid=x", None, "google", "cpc", None),
        (
            "?wbraid=x",
            Some("https://news.example/"),
            "google",
            "cpc",
            None,
        ),
        (
            "?fbclid=x&utm_campaign=spring",
            None,
            "facebook",
            "paid",
            Some("spring"),
        ),
        ("?msclkid=x", None, "bing", "cpc", None),
        ("?ttclid=x", None, "tiktok", "paid", None),
        (
            "",
            Some("https://www.google.co.uk/search?q=shoes"),
            "google",
            "organic",
            None,
        ),
        (
            "",
            Some("https://duckduckgo.com/"),
            "duckduckgo",
            "organic",
            None,
        ),
        (
            "",
            Some("https://www.bing.com/search?q=x"),
            "bing",
            "organic",
            None,
        ),
        (
            "",
            Some("https://news.example/article/1"),
            "news.example",
            "referral",
            None,
        ),
        (
            "",
            Some("https://www.shop.example/cart"),
            "(direct)",
            "(none)",
            None,
        ),
        (
            "",
            Some("https://blog.shop.example/post"),
            "(direct)",
            "(none)",
            None,
        ),
        ("", None, "(direct)", "(none)", None),
    ];
    let now = now_ms();
    let mut orders = Vec::new();
    for (query, referrer, ..) in &rows {
        let v = unique("v");
        visit(
            &app,
            &app.site.tracker_id,
            &v,
            &format!("{base}{query}"),
            *referrer,
            now - HOUR,
        );
        orders.push(report_for(&app, &app.site.id, &v).0);
    }
    assert_eq!(drain(&app).processed, rows.len());
    for ((query, referrer, source, medium, campaign), order) in rows.iter().zip(&orders) {
        let v = status(&app, order);
        let (s, m, c, _) = touch(&v);
        assert_eq!(
            (s.as_str(), m.as_str(), c.as_deref()),
            (*source, *medium, *campaign),
            "landing {query:?}, referrer {referrer:?}"
        );
    }
}

#[test]
fn an_own_domain_referrer_does_not_hide_the_search_visit_before_it() {
    let app = manual().domain("www.shop.example").start();
    let now = now_ms();
    let search = visit(
        &app,
        &app.site.tracker_id,
        "v",
        "https://shop.example/",
        Some("https://www.google.de/"),
        now - 3 * HOUR,
    );
    // Back later from one of the shop's own pages (say, a link in its order e-mail's web view).
    let own = visit(
        &app,
        &app.site.tracker_id,
        "v",
        "https://shop.example/",
        Some("https://shop.example/account"),
        now - HOUR,
    );
    assert_ne!(search, own);
    let (order, attached) = report_for(&app, &app.site.id, "v");
    assert_eq!(attached, own);
    drain(&app);
    assert_eq!(
        touch(&status(&app, &order)),
        ("google".into(), "organic".into(), None, Some(search))
    );
}

#[test]
fn the_person_spans_every_device_linked_to_the_client_id() {
    let app = manual().start();
    let now = now_ms();
    let phone = app.pixel(
        "phone",
        json!([
            {"type": "pageview", "url": "https://shop.example/?fbclid=f1", "ts": now - 4 * HOUR},
            {"type": "identify", "userId": "user-7", "ts": now - 4 * HOUR},
        ]),
    );
    let desktop = app.identify("desktop", "user-7", now - HOUR);
    let order = unique("order");
    let (_, attached) = app
        .post_conversion(
            &json!({"clientId": "user-7", "orderId": order, "value": 5, "currency": "EUR"}),
        )
        .accepted();
    assert_eq!(attached, desktop);
    drain(&app);
    assert_eq!(
        touch(&status(&app, &order)),
        ("facebook".into(), "paid".into(), None, Some(phone))
    );
}

#[test]
fn a_conversion_without_a_value_is_processed_without_money() {
    let app = manual().start();
    app.pageview(
        "v",
        "https://shop.example/?utm_source=x&utm_medium=y",
        now_ms() - HOUR,
    );
    app.post_conversion(&json!({"visitorId": "v", "type": "signup", "orderId": "lead-1"}))
        .accepted();
    assert_eq!(drain(&app).processed, 1);
    let v = status(&app, "lead-1");
    assert_eq!(v["status"], "processed", "{v}");
    assert_eq!(v["type"], "signup");
    for field in ["value", "reportingValue", "reportingCurrency", "fxRate"] {
        assert_eq!(v[field], Value::Null, "{field} in {v}");
    }
    assert_eq!(touch(&v).0, "x");
}

#[test]
fn passes_are_idempotent_and_an_order_from_both_sources_is_processed_once() {
    let app = manual().start();
    order_from_pixel_and_api(&app, "A-1", 1);
    let metrics = Metrics::default();
    assert_eq!(drain_with(&app, now_ms(), &metrics).processed, 1);
    assert_eq!(drain_with(&app, now_ms(), &metrics), DrainStats::default());
    assert!(metrics
        .render(0, 0)
        .contains("convapi_pipeline_processed_total 1\n"));
    let v = status(&app, "A-1");
    assert_eq!(v["sources"], json!(["pixel", "api"]));
    assert_eq!(v["status"], "processed");
    assert_eq!(v["reportingValue"].as_f64(), Some(49.9));
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM outbox", &[]), 0);
}

/// Accepts an order, then corrupts its stored value in the file — what a bad hand edit or a broken
/// migration could leave behind. Its processing fails every time, for a reason the item carries.
fn poison(app: &TestApp) -> (String, String) {
    let order = unique("poison");
    let (event, _) = app
        .post_conversion(
            &json!({"visitorId": "v", "orderId": order, "value": 12, "currency": "EUR"}),
        )
        .accepted();
    let n = app.execute(
        "UPDATE conversions SET value = 'twelve' WHERE id = ?1",
        &[&event],
    );
    assert_eq!(n, 1);
    (order, event)
}

fn item(app: &TestApp, event: &str) -> Option<convapi::store::pipeline::ItemState> {
    convapi::store::pipeline::item_state(&app.store(), event).expect("outbox")
}

#[test]
fn a_poison_item_is_dead_lettered_after_ten_tries_without_holding_up_the_others() {
    let app = manual().start();
    app.pageview("v", "https://shop.example/", now_ms() - HOUR);
    let (poison_order, poison_id) = poison(&app);
    let behind: Vec<String> = (0..20)
        .map(|i| {
            let o = format!("behind-{i}");
            app.post_conversion(
                &json!({"visitorId": "v", "orderId": o, "value": i, "currency": "EUR"}),
            )
            .accepted();
            o
        })
        .collect();

    let metrics = Metrics::default();
    let t0 = now_ms();
    let first = drain_with(&app, t0, &metrics);
    assert_eq!(
        first,
        DrainStats {
            processed: 20,
            retried: 1,
            ..Default::default()
        }
    );
    // Everything queued behind the poison was finished in the same pass, at the same instant.
    for o in &behind {
        let v = status(&app, o);
        assert_eq!(
            (v["status"].as_str(), v["processedAt"].as_str()),
            (Some("processed"), Some(iso(t0).as_str())),
            "{v}"
        );
    }

    let mut now = t0;
    for attempt in 1..=pipeline::MAX_ATTEMPTS {
        let state = item(&app, &poison_id).expect("still in the outbox");
        assert_eq!(state.attempts, attempt);
        assert!(
            state
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains("twelve")),
            "{state:?}"
        );
        if attempt == pipeline::MAX_ATTEMPTS {
            assert_eq!(state.dead_at, Some(now));
            break;
        }
        assert_eq!(state.dead_at, None);
        // Exponential backoff with jitter: within [½, 1] × 2^(n-1) s of the failed try.
        let next = state.next_attempt_at.expect("scheduled");
        let delay = next - now;
        let (lo, hi) = (
            pipeline::backoff_ms(attempt, 0.5),
            pipeline::backoff_ms(attempt, 1.0),
        );
        assert!(
            (lo..=hi).contains(&delay),
            "try {attempt}: delay {delay} not in {lo}..={hi}"
        );
        assert_eq!(
            drain_with(&app, next - 1, &metrics),
            DrainStats::default(),
            "not due yet"
        );
        now = next;
        let stats = drain_with(&app, now, &metrics);
        let want = one_failure(attempt + 1 == pipeline::MAX_ATTEMPTS);
        assert_eq!(stats, want, "try {}", attempt + 1);
    }
    let v = status(&app, &poison_order);
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(v["attempts"], 10, "{v}");
    assert!(
        v["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("twelve")),
        "{v}"
    );
    // A dead letter is never picked up again, however late.
    assert_eq!(
        drain_with(&app, now + 365 * DAY, &metrics),
        DrainStats::default()
    );
    let text = metrics.render(0, 1);
    assert!(
        text.contains("convapi_pipeline_dead_lettered_total 1\n"),
        "{text}"
    );
    assert!(
        text.contains("convapi_pipeline_processed_total 20\n"),
        "{text}"
    );
    // The server's /metrics reads dead letters from the file.
    let m = app.get("/metrics").text();
    assert!(m.contains("convapi_outbox_dead_letters 1\n"), "{m}");
}

/// Five orders (values 1 to 5 EUR, order ids made unique from `prefix`) of visitor `v`, who has a
/// session: one chunk for the pipeline.
fn five_orders_of_one_visitor(app: &TestApp, prefix: &str) -> Vec<String> {
    app.pageview("v", "https://shop.example/", now_ms() - HOUR);
    (0..5)
        .map(|i| {
            let o = unique(prefix);
            app.post_conversion(
                &json!({"visitorId": "v", "orderId": o, "value": i + 1, "currency": "EUR"}),
            )
            .accepted();
            o
        })
        .collect()
}

/// The pipeline reads a chunk's conversions in one query: a row that does not read at all (a
/// column of the wrong type, which only SQLite can hold) is that item's failure, not the chunk's.
#[test]
fn a_row_that_does_not_read_fails_alone_and_its_chunk_goes_on() {
    if sqlite_only("a column of the wrong type") {
        return;
    }
    let app = manual().start();
    let orders = five_orders_of_one_visitor(&app, "chunk");
    let broken = status(&app, &orders[2])["eventId"]
        .as_str()
        .unwrap()
        .to_owned();
    let n = app.execute(
        "UPDATE conversions SET occurred_at = 'not a time' WHERE id = ?1",
        &[&broken],
    );
    assert_eq!(n, 1);
    let stats = drain_with(&app, now_ms(), &Metrics::default());
    assert_eq!(
        stats,
        DrainStats {
            processed: 4,
            retried: 1,
            ..Default::default()
        }
    );
    let state = item(&app, &broken).expect("still in the outbox");
    assert_eq!(state.attempts, 1);
}

/// A chunk is written in one savepoint; when the database refuses one item's result (here a
/// trigger raising on its update), the chunk is written again item by item: that item alone is
/// rolled back and counted as a failed try, the others are processed.
#[test]
fn an_item_whose_result_the_database_refuses_fails_alone() {
    let app = manual().start();
    let orders = five_orders_of_one_visitor(&app, "refused");
    app.refuse_conversion("UPDATE", &orders[3], "refused");
    let stats = drain_with(&app, now_ms(), &Metrics::default());
    assert_eq!(
        stats,
        DrainStats {
            processed: 4,
            retried: 1,
            ..Default::default()
        }
    );
    for (i, order) in orders.iter().enumerate() {
        let s = status(&app, order);
        let event = s["eventId"].as_str().unwrap();
        if i == 3 {
            assert_eq!(s["status"], json!("queued"), "{s}");
            assert_eq!(s["attempts"], json!(1), "{s}");
            assert!(s["lastError"].as_str().unwrap().contains("refused"), "{s}");
            assert!(item(&app, event).is_some(), "{order} not in the outbox");
        } else {
            assert_eq!(s["status"], json!("processed"), "{s}");
            assert!(item(&app, event).is_none(), "{order} left in the outbox");
        }
    }
}

#[test]
fn a_slow_item_is_interrupted_and_retried_later() {
    let app = manual().start();
    let now = now_ms();
    // A person with 200 sessions in the window: attribution reads them all.
    for batch in 0..2 {
        let events: Vec<Value> = (0..100)
            .map(|i| {
                let n = batch * 100 + i;
                json!({"type": "pageview", "url": format!("https://shop.example/?utm_source=s{n}&utm_medium=m"), "ts": now - 2 * HOUR + n * 1000})
            })
            .collect();
        app.pixel("busy", Value::Array(events));
    }
    let (order, _) = report_for(&app, &app.site.id, "busy");
    let event = status(&app, &order)["eventId"].as_str().unwrap().to_owned();

    let conn = app.store();
    let impatient = Options {
        item_deadline: Duration::ZERO,
        ..Options::default()
    };
    // SQLite interrupts the item within a few steps of its first statement. PostgreSQL gives each
    // statement the deadline (`statement_timeout`, 1 ms at least), which 200 sessions on a quiet
    // machine fit in: the sessions held by another client make the item slow for sure.
    let holder = app.is_postgres().then(|| {
        let mut c = ::postgres::Client::connect(&app.db.to_string_lossy(), ::postgres::NoTls)
            .expect("connect");
        c.batch_execute("BEGIN; LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE")
            .unwrap();
        c
    });
    let t0 = now_ms();
    let stats = with_writer(&app, |w| {
        pipeline::drain(&conn, w, &Metrics::default(), t0, &impatient, &|| false)
    })
    .unwrap();
    drop(holder);
    assert_eq!(
        stats,
        DrainStats {
            retried: 1,
            ..Default::default()
        }
    );
    let state = item(&app, &event).unwrap();
    assert!(
        state
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("took longer than")),
        "{state:?}"
    );
    assert_eq!(status(&app, &order)["status"], "queued");

    let at = state.next_attempt_at.unwrap();
    let stats = with_writer(&app, |w| {
        pipeline::drain_once(&conn, w, &Metrics::default(), at)
    })
    .unwrap();
    assert_eq!(stats.processed, 1);
    let v = status(&app, &order);
    assert_eq!(touch(&v).0, "s199", "the latest of the 200 sessions: {v}");
}

#[test]
fn the_server_processes_work_as_it_arrives_past_a_poison_item() {
    let app = TestApp::start();
    let now = now_ms();
    app.pageview(
        "v",
        "https://shop.example/?utm_source=news&utm_medium=email",
        now - HOUR,
    );
    // A poison item written straight into the file, first in the queue.
    let session = app
        .query_str("SELECT id FROM sessions LIMIT 1", &[])
        .unwrap();
    let poison_id = uuid::Uuid::new_v4().to_string();
    // The conversion first: the pipeline only looks at the outbox.
    app.execute(
        "INSERT INTO conversions (id, site_id, order_id, type, session_id, visitor_id, value, currency,
            occurred_at, created_at, source_api)
         VALUES (?1, ?2, 'poison', 'purchase', ?3, 'v', 'twelve', 'EUR', ?4, ?4, 1)",
        &[&poison_id, &app.site.id, &session, &now],
    );
    app.execute(
        "INSERT INTO outbox (conversion_id, next_attempt_at, created_at) VALUES (?1, ?2, ?2)",
        &[&poison_id, &now],
    );
    let orders: Vec<String> = (0..20)
        .map(|i| {
            let o = format!("live-{i}");
            app.post_conversion(
                &json!({"visitorId": "v", "orderId": o, "value": 1.5, "currency": "EUR"}),
            )
            .accepted();
            o
        })
        .collect();
    let sent = Instant::now();
    for o in &orders {
        let v = await_status(&app, o, "processed");
        assert_eq!(touch(&v).0, "news");
    }
    eprintln!(
        "20 orders behind a poison item processed {:?} after the last 202",
        sent.elapsed()
    );
    let p = status(&app, "poison");
    assert_eq!(p["status"], "queued", "{p}");
    assert!(p["attempts"].as_i64().is_some_and(|a| a >= 1), "{p}");
    assert!(
        p["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("twelve")),
        "{p}"
    );
}

/// The writer claims each decided item again as it stores the result (in one statement on
/// PostgreSQL): an item that changed since it was listed — tried again meanwhile, rescheduled,
/// finished by someone else — is left alone and its conversion untouched; an unchanged one is
/// finished and leaves the outbox.
#[test]
fn an_item_changed_since_it_was_listed_is_left_alone() {
    use convapi::store::pipeline::{self as sp, Attribution, Item, Reported};
    let app = manual().start();
    app.pageview("v", "https://shop.example/", now_ms() - HOUR);
    let ids: Vec<String> = (0..4)
        .map(|i| {
            let o = unique("listed");
            app.post_conversion(
                &json!({"visitorId": "v", "orderId": o, "value": i + 1, "currency": "EUR"}),
            )
            .accepted()
            .0
        })
        .collect();
    let conn = app.store();
    let now = now_ms();
    let listed: Vec<Item> = sp::due(&conn, now, 10).expect("due");
    sp::release_claims(&conn).expect("release");
    assert_eq!(listed.len(), 4);
    let a = Attribution {
        model: "last_non_direct".into(),
        session_id: None,
        source: "(direct)".into(),
        medium: "(none)".into(),
        campaign: None,
    };
    let fx = Reported::default();
    let of = |id: &str| {
        listed
            .iter()
            .find(|i| i.conversion_id == id)
            .unwrap()
            .clone()
    };
    let status_of = |id: &str| -> String {
        app.query_str("SELECT status FROM conversions WHERE id = ?1", &[&id])
            .expect("a conversion")
    };

    // Tried again since it was listed.
    let retried = of(&ids[0]);
    sp::retry_later(&conn, retried.id, 1, now - 1, "meanwhile").expect("retry");
    // Rescheduled to later.
    let later = of(&ids[1]);
    sp::retry_later(&conn, later.id, 0, now + HOUR, "later").expect("reschedule");
    // Listed for another conversion than it is.
    let mut other = of(&ids[2]);
    other.conversion_id = ids[3].clone();
    for stale in [&retried, &later, &other] {
        assert_eq!(
            sp::claim_and_finish(&conn, stale, &a, &fx, now).expect("claim"),
            None,
            "{stale:?}"
        );
    }
    for id in &ids[..3] {
        assert_eq!(status_of(id), "queued", "{id}");
        assert!(sp::item_state(&conn, id).expect("state").is_some());
    }

    // Unchanged: finished once, then gone.
    let fresh = of(&ids[3]);
    assert_eq!(
        sp::claim_and_finish(&conn, &fresh, &a, &fx, now).expect("finish"),
        Some(false)
    );
    assert_eq!(status_of(&ids[3]), "processed");
    assert!(sp::item_state(&conn, &ids[3]).expect("state").is_none());
    assert_eq!(
        sp::claim_and_finish(&conn, &fresh, &a, &fx, now).expect("again"),
        None
    );
}

/// Where the pipeline writes: on SQLite its chunk is a job of the request writer and waits behind
/// the requests' jobs; on PostgreSQL it writes in a transaction of its own connection, beside the
/// writer, and does not wait for it (here a job that holds the writer for two seconds).
#[test]
fn the_pipeline_waits_for_the_request_writer_on_sqlite_alone() {
    let app = manual().start();
    app.pageview("v", "https://shop.example/", now_ms() - HOUR);
    let order = unique("beside");
    app.post_conversion(
        &json!({"visitorId": "v", "orderId": order, "value": 5, "currency": "EUR"}),
    )
    .accepted();
    let conn = app.store();
    let (took, stats) = with_writer(&app, |writer| {
        writer.submit_detached(|_| {
            std::thread::sleep(Duration::from_secs(2));
            Ok(())
        });
        let started = Instant::now();
        let stats =
            pipeline::drain_once(&conn, writer, &Metrics::default(), now_ms()).expect("drain");
        (started.elapsed(), stats)
    });
    assert_eq!(stats.processed, 1);
    if app.is_postgres() {
        assert!(
            took < Duration::from_millis(1500),
            "waited {took:?} for the writer"
        );
    } else {
        assert!(
            took >= Duration::from_millis(1500),
            "did not wait: {took:?}"
        );
    }
    assert_eq!(status(&app, &order)["status"], "processed");
}
