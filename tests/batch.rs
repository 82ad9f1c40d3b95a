//! `POST /api/sites/{siteId}/conversions/batch` (docs/decisions.md §3, "Batches"), line by line:
//! the request's own checks (1 to 6, then `conversions` as an array of 1 to 1,000 objects, 413 over
//! 1 MiB), each item answered in order exactly as the single call answers it alone (400 with its
//! field, 422, 202 with ids), repeats inside a batch and across batches answered with the original
//! ids, 503 for the whole batch with nothing accepted, and every item answered 202 surviving
//! `kill -9` (5 cycles, through `common/crash.rs`'s reading of the file).
//!
//! What belongs here: a rule of the batch endpoint. A rule every report follows, batch or not, is
//! in `conversions.rs`; unknown fields and their warnings are in `warnings.rs`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::crash::{assert_intact, stored_conversions};
use crate::common::*;

/// `POST …/conversions/batch` on the default site with the default key.
fn post_batch(app: &TestApp, body: &Value) -> Resp {
    post_batch_raw(
        app,
        &app.key.key,
        &app.site.id,
        "application/json",
        &serde_json::to_vec(body).unwrap(),
    )
}

fn post_batch_raw(app: &TestApp, key: &str, site: &str, content_type: &str, body: &[u8]) -> Resp {
    app.send(
        "POST",
        &format!("/api/sites/{site}/conversions/batch"),
        &[
            ("Authorization", &format!("Bearer {key}")),
            ("Content-Type", content_type),
        ],
        Some(body),
    )
}

fn batch_of(items: &[Value]) -> Value {
    json!({ "conversions": items })
}

/// A site with a visitor seen an hour ago; its id.
fn with_visitor(app: &TestApp) -> String {
    let visitor = unique("v");
    app.pageview(&visitor, "https://shop.example/", now_ms() - HOUR);
    visitor
}

/// The 200's results, checked for their counts and indexes.
fn results(r: &Resp) -> Vec<Value> {
    let body = r.expect(200);
    let results = body["results"].as_array().expect("results").clone();
    for (i, item) in results.iter().enumerate() {
        assert_eq!(item["index"], json!(i), "{body}");
    }
    let accepted = results.iter().filter(|r| r["status"] == 202).count();
    assert_eq!(body["accepted"], json!(accepted), "{body}");
    assert_eq!(body["rejected"], json!(results.len() - accepted), "{body}");
    results
}

#[test]
fn each_item_is_answered_in_order_as_the_single_call_answers_it_alone() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .start();
    let visitor = with_visitor(&app);
    let before = app
        .post_conversion(&json!({"visitorId": visitor, "orderId": "B-known", "value": 5}))
        .accepted();
    let r = post_batch(
        &app,
        &batch_of(&[
            json!({"visitorId": visitor, "orderId": "B-1", "value": 10, "currency": "EUR"}),
            json!({"visitorId": visitor, "orderId": "B-2", "value": -1}),
            json!({"visitorId": visitor, "value": 3}),
            json!({"visitorId": unique("nobody"), "orderId": "B-3"}),
            json!({"visitorId": visitor, "orderId": "B-known", "value": 99}),
            json!({"visitorId": visitor, "orderId": "B-1", "value": 11}),
            json!({"orderId": "B-4"}),
            json!({"visitorId": visitor, "type": "lead"}),
            json!({"visitorId": visitor, "orderId": "B-5", "currency": "eur"}),
        ]),
    );
    let res = results(&r);
    let status: Vec<u64> = res.iter().map(|r| r["status"].as_u64().unwrap()).collect();
    assert_eq!(status, [202, 400, 400, 422, 202, 202, 400, 202, 400]);
    // Each refusal is the single call's, body for body.
    let alone = |body: Value| {
        let single = app.post_conversion(&body);
        let mut v = single.json();
        v["status"] = json!(single.status);
        v
    };
    for (i, body) in [
        (
            1,
            json!({"visitorId": visitor, "orderId": "B-2", "value": -1}),
        ),
        (2, json!({"visitorId": visitor, "value": 3})),
        (3, json!({"visitorId": unique("nobody"), "orderId": "B-3"})),
        (6, json!({"orderId": "B-4"})),
        (
            8,
            json!({"visitorId": visitor, "orderId": "B-5", "currency": "eur"}),
        ),
    ] {
        let mut item = res[i].clone();
        item.as_object_mut().unwrap().remove("index");
        assert_eq!(item, alone(body), "item {i}");
    }
    assert_eq!(
        (res[1]["code"].as_str(), res[1]["field"].as_str()),
        (Some("VALIDATION_ERROR"), Some("value"))
    );
    assert_eq!(res[2]["field"], json!("orderId"));
    assert_eq!(res[3]["code"], json!("NO_SESSION"));
    assert_eq!(res[6]["field"], json!("clientId"));
    assert_eq!(res[8]["field"], json!("currency"));
    // A repeat of an order known before: the original ids.
    assert_eq!(
        (res[4]["eventId"].as_str(), res[4]["sessionId"].as_str()),
        (Some(before.0.as_str()), Some(before.1.as_str()))
    );
    // A repeat inside the batch: the ids its first item got.
    assert_eq!(res[5]["eventId"], res[0]["eventId"]);
    assert_eq!(res[5]["sessionId"], res[0]["sessionId"]);
    // Committed before the answer: each is there, with the first report's value.
    let stored = app.order_status("B-1").expect(200);
    assert_eq!(stored["eventId"], res[0]["eventId"]);
    assert_eq!(stored["value"], json!(10));
    assert_eq!(app.order_status("B-known").expect(200)["value"], json!(5));
    assert_eq!(
        app.query_i64(
            "SELECT COUNT(*) FROM conversions WHERE id = ?1",
            &[&res[7]["eventId"].as_str().unwrap()]
        ),
        1
    );
    // B-known, B-1, the lead: three conversions, each with its outbox row.
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 3);
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM outbox", &[]), 3);
}

#[test]
fn an_item_over_the_single_calls_body_limit_is_its_413_and_the_others_go_on() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .start();
    let visitor = with_visitor(&app);
    // An unknown field fills the item past 64 KiB; alone it is a 413.
    let big = json!({"visitorId": visitor, "orderId": "B-big", "value": 1,
                     "note": "x".repeat(64 * 1024)});
    let alone = app.post_conversion(&big);
    assert_eq!(alone.status, 413, "{}", alone.text());
    assert_eq!(alone.json()["code"], json!("PAYLOAD_TOO_LARGE"));
    // Just under the limit as a body of its own: accepted, alone or in a batch.
    let mut fits = json!({"visitorId": visitor, "orderId": "B-fits", "value": 1, "note": ""});
    let room = 64 * 1024 - serde_json::to_vec(&fits).unwrap().len();
    fits["note"] = json!("y".repeat(room));
    assert_eq!(serde_json::to_vec(&fits).unwrap().len(), 64 * 1024);
    let r = post_batch(
        &app,
        &batch_of(&[
            json!({"visitorId": visitor, "orderId": "B-before", "value": 2}),
            big,
            fits,
            json!({"visitorId": visitor, "orderId": "B-after", "value": 3}),
        ]),
    );
    let items = results(&r);
    let statuses: Vec<&Value> = items.iter().map(|i| &i["status"]).collect();
    assert_eq!(
        statuses,
        [&json!(202), &json!(413), &json!(202), &json!(202)],
        "{items:?}"
    );
    assert_eq!(items[1]["code"], json!("PAYLOAD_TOO_LARGE"), "{items:?}");
    assert_eq!(items[1]["error"], alone.json()["error"], "{items:?}");
    assert!(items[1].get("eventId").is_none(), "{items:?}");
    // Nothing of the refused item was stored; the others were.
    app.order_status("B-big").expect(404);
    for order in ["B-before", "B-fits", "B-after"] {
        app.order_status(order).expect(200);
    }
}

#[test]
fn a_test_keys_repeats_and_no_session_items_are_counted_apart_in_metrics() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .start();
    let visitor = with_visitor(&app);
    let (_, test) = app.create_test_key();
    let body = json!({"visitorId": visitor, "orderId": "T-1", "value": 4});
    let lost = json!({"visitorId": "nobody-seen", "orderId": "T-2", "value": 4});
    let live = |name: &str| app.metric(name);
    let (dedup, no_session) = (
        live("convapi_conversions_deduplicated_total"),
        live("convapi_conversions_no_session_total"),
    );
    // A test order, its repeat alone and in a batch, and one that resolves no session.
    app.post_conversion_as(&test, &app.site.id, &body)
        .accepted();
    app.post_conversion_as(&test, &app.site.id, &body)
        .accepted();
    let r = post_batch_raw(
        &app,
        &test,
        &app.site.id,
        "application/json",
        &serde_json::to_vec(&batch_of(&[body.clone(), lost.clone()])).unwrap(),
    );
    let statuses: Vec<Value> = results(&r).iter().map(|i| i["status"].clone()).collect();
    assert_eq!(statuses, [json!(202), json!(422)]);
    let alone = app.post_conversion_as(&test, &app.site.id, &lost);
    assert_eq!(alone.status, 422, "{}", alone.text());
    // The live figures did not move; the test ones did.
    assert_eq!(live("convapi_conversions_deduplicated_total"), dedup);
    assert_eq!(live("convapi_conversions_no_session_total"), no_session);
    assert_eq!(live("convapi_test_conversions_deduplicated_total"), 2);
    assert_eq!(live("convapi_test_conversions_no_session_total"), 2);
    assert_eq!(live("convapi_test_conversions_accepted_total"), 1);
}

#[test]
fn a_repeat_in_a_later_batch_answers_the_original_ids_and_writes_nothing() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .start();
    let visitor = with_visitor(&app);
    let items: Vec<Value> = (0..20)
        .map(|i| json!({"visitorId": visitor, "orderId": format!("R-{i}"), "value": i}))
        .collect();
    let first = results(&post_batch(&app, &batch_of(&items)));
    assert!(first.iter().all(|r| r["status"] == 202));
    let ids: HashSet<&str> = first
        .iter()
        .map(|r| r["eventId"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 20);
    // Again, in another order, with another value: the same ids, nothing new.
    let again: Vec<Value> = items.iter().rev().cloned().collect();
    let second = results(&post_batch(&app, &batch_of(&again)));
    for (i, r) in second.iter().enumerate() {
        assert_eq!(r["status"], json!(202));
        assert_eq!(r["eventId"], first[19 - i]["eventId"], "item {i}");
        assert_eq!(r["sessionId"], first[19 - i]["sessionId"], "item {i}");
    }
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 20);
    // And single calls of the same orders too.
    let single = app
        .post_conversion(&json!({"visitorId": visitor, "orderId": "R-3"}))
        .accepted();
    assert_eq!(json!(single.0), first[3]["eventId"]);
}

/// The answer to a batch declaring 1 MiB and one byte, of which it sends a few: refused by its
/// length, unread (a client writing the rest would find the connection closed, as for any body
/// over `http::LINGER_BYTES`).
fn over_a_mebibyte(app: &TestApp) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(app.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "POST /api/sites/{}/conversions/batch HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{{\"conversions\":[",
        app.site.id,
        app.key.key,
        1024 * 1024 + 1
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    String::from_utf8_lossy(&raw).into_owned()
}

#[test]
fn the_request_is_checked_before_its_items() {
    let app = TestApp::start();
    let visitor = with_visitor(&app);
    let one = batch_of(&[json!({"visitorId": visitor, "orderId": "C-1"})]);
    let bytes = serde_json::to_vec(&one).unwrap();
    // Checks 1 to 3.
    let r = post_batch_raw(&app, "ask_nope", &app.site.id, "application/json", &bytes);
    expect_error(&r, 401, "UNAUTHORIZED");
    let r = post_batch_raw(
        &app,
        &app.key.key,
        "00000000-0000-4000-8000-000000000000",
        "application/json",
        &bytes,
    );
    expect_error(&r, 404, "SITE_NOT_FOUND");
    let other = app.create_tenant("other");
    let theirs = app.create_site(&other.id, "theirs", &[]);
    let r = post_batch_raw(&app, &app.key.key, &theirs.id, "application/json", &bytes);
    expect_error(&r, 403, "FORBIDDEN");
    // 4 to 6.
    let answer = over_a_mebibyte(&app);
    assert!(
        answer.starts_with("HTTP/1.1 413") && answer.contains("PAYLOAD_TOO_LARGE"),
        "{answer}"
    );
    let r = post_batch_raw(&app, &app.key.key, &app.site.id, "text/plain", &bytes);
    expect_error(&r, 415, "UNSUPPORTED_MEDIA_TYPE");
    let r = post_batch_raw(&app, &app.key.key, &app.site.id, "application/json", b"[1]");
    expect_error(&r, 400, "INVALID_JSON");
    // Then `conversions`: an array of 1 to 1,000 objects.
    let too_many: Vec<Value> = (0..1001)
        .map(|i| json!({"visitorId": visitor, "orderId": format!("M-{i}")}))
        .collect();
    for (body, why) in [
        (json!({}), "missing"),
        (json!({"conversions": null}), "missing"),
        (
            json!({"conversions": {"visitorId": visitor}}),
            "not an array",
        ),
        (json!({"conversions": []}), "empty"),
        (json!({"conversions": too_many}), "1001 items"),
        (
            json!({"conversions": [{"visitorId": visitor}, 7]}),
            "item 1 is not an object",
        ),
    ] {
        let e = expect_invalid(&post_batch(&app, &body), "conversions");
        assert!(e["error"].as_str().unwrap().contains(why), "{why}: {e}");
    }
    // A body just under 1 MiB of valid items is taken: 1,000 items, padded.
    let pad = "x".repeat(900);
    let full: Vec<Value> = (0..1000)
        .map(|i| json!({"visitorId": visitor, "orderId": format!("F-{i}"), "note": pad}))
        .collect();
    let bytes = serde_json::to_vec(&batch_of(&full)).unwrap();
    assert!(bytes.len() > 900 * 1024 && bytes.len() <= 1024 * 1024);
    let r = post_batch_raw(&app, &app.key.key, &app.site.id, "application/json", &bytes);
    assert!(results(&r).iter().all(|r| r["status"] == 202));
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 1000);
    // No other method is taken; GET of `batch` is still the status of an order of that name.
    let path = format!("/api/sites/{}/conversions/batch", app.site.id);
    let r = app.send("PUT", &path, &[], Some(b"{}"));
    expect_error(&r, 405, "METHOD_NOT_ALLOWED");
    assert_eq!(r.header("allow"), Some("POST"));
    expect_error(&app.order_status("batch"), 404, "ORDER_NOT_FOUND");
}

#[test]
fn a_batch_the_queue_cannot_take_is_refused_whole_with_nothing_accepted() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .env("CONVAPI_MAX_BACKLOG", "3")
        .start();
    let visitor = with_visitor(&app);
    let items: Vec<Value> = (0..3)
        .map(|i| json!({"visitorId": visitor, "orderId": format!("Q-{i}")}))
        .collect();
    let first = results(&post_batch(&app, &batch_of(&items)));
    assert!(first.iter().all(|r| r["status"] == 202));
    // The backlog is at its limit: a batch with new work is refused whole, even with a repeat in it.
    let r = post_batch(
        &app,
        &batch_of(&[
            json!({"visitorId": visitor, "orderId": "Q-0"}),
            json!({"visitorId": visitor, "orderId": "Q-new"}),
        ]),
    );
    expect_error(&r, 503, "QUEUE_UNAVAILABLE");
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 3);
    expect_error(&app.order_status("Q-new"), 404, "ORDER_NOT_FOUND");
    // A batch of repeats only needs no write: answered.
    let again = results(&post_batch(&app, &batch_of(&items)));
    assert_eq!(again[2]["eventId"], first[2]["eventId"]);
}

#[test]
fn a_batch_the_database_cannot_take_is_refused_whole_with_nothing_accepted() {
    if sqlite_only("holds SQLite's write lock against --busy-timeout-ms") {
        return;
    }
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .env("CONVAPI_BUSY_TIMEOUT_MS", "300")
        .start();
    let visitor = with_visitor(&app);
    let lock = app.sqlite();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    let items: Vec<Value> = (0..50)
        .map(|i| json!({"visitorId": visitor, "orderId": format!("L-{i}")}))
        .collect();
    expect_error(
        &post_batch(&app, &batch_of(&items)),
        503,
        "QUEUE_UNAVAILABLE",
    );
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 0);
    let r = results(&post_batch(&app, &batch_of(&items)));
    assert!(r.iter().all(|r| r["status"] == 202));
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 50);
}

const CYCLES: usize = 5;
const SENDERS: usize = 4;
const ITEMS: usize = 50;

/// Regression guard for §7 with batches: senders post batches of new orders (each batch repeats
/// one order of its previous batch), the server is killed with SIGKILL while they send, and every
/// item ever answered 202 must be in the file once, with its outbox work, after each of 5 cycles.
#[test]
fn every_item_answered_202_survives_kill_9() {
    let _load = heavy_load();
    let mut app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .start();
    let visitor = with_visitor(&app);
    let acked: Mutex<HashMap<String, String>> = Mutex::new(HashMap::new());
    for cycle in 0..CYCLES {
        let url = format!("{}/api/sites/{}/conversions/batch", app.base, app.site.id);
        let auth = format!("Bearer {}", app.key.key);
        let stop = AtomicBool::new(false);
        let batches = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for sender in 0..SENDERS {
                let (url, auth, stop, acked, visitor, batches) =
                    (&url, &auth, &stop, &acked, &visitor, &batches);
                s.spawn(move || {
                    let agent = agent();
                    for n in 0..200 {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let order = |i: usize| format!("K-{cycle}-{sender}-{n}-{i}");
                        let mut items: Vec<Value> = (0..ITEMS)
                            .map(|i| json!({"visitorId": visitor, "orderId": order(i)}))
                            .collect();
                        if n > 0 {
                            items.push(json!({"visitorId": visitor, "orderId": format!("K-{cycle}-{sender}-{}-0", n - 1)}));
                        }
                        let body = serde_json::to_vec(&batch_of(&items)).unwrap();
                        let Ok(r) = try_send(
                            &agent,
                            "POST",
                            url,
                            &[("Authorization", auth), ("Content-Type", "application/json")],
                            Some(&body),
                        ) else {
                            return; // the server is gone
                        };
                        if r.status == 503 {
                            continue;
                        }
                        assert_eq!(r.status, 200, "{}", r.text());
                        let res = r.json()["results"].as_array().unwrap().clone();
                        let mut acked = acked.lock().unwrap();
                        for (item, sent) in res.iter().zip(&items) {
                            assert_eq!(item["status"], json!(202), "{item}");
                            let (o, e) = (sent["orderId"].as_str().unwrap(), item["eventId"].as_str().unwrap());
                            if let Some(before) = acked.insert(o.to_owned(), e.to_owned()) {
                                assert_eq!(before, e, "order {o} answered two event ids");
                            }
                        }
                        batches.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            // Killed with batches in flight, after a few were answered.
            let deadline = Instant::now() + Duration::from_secs(60);
            while batches.load(Ordering::Relaxed) < 3 * SENDERS && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            app.kill9();
            stop.store(true, Ordering::Relaxed);
        });
        assert!(
            batches.into_inner() >= 3 * SENDERS,
            "cycle {cycle}: too few batches"
        );
        assert_intact(&app);
        let stored = stored_conversions(&app);
        let by_id: HashMap<&str, _> = stored.iter().map(|c| (c.id.as_str(), c)).collect();
        let acked = acked.lock().unwrap();
        for (order, event) in acked.iter() {
            let c = by_id
                .get(event.as_str())
                .unwrap_or_else(|| panic!("cycle {cycle}: {order} ({event}) lost after kill -9"));
            assert_eq!(c.order, *order);
            assert!(c.outbox >= 1, "cycle {cycle}: {order} has no outbox row");
        }
        let orders: HashSet<&str> = stored.iter().map(|c| c.order.as_str()).collect();
        assert_eq!(
            orders.len(),
            stored.len(),
            "cycle {cycle}: an order stored twice"
        );
        drop(acked);
        app.restart();
    }
}

/// One batch is one writer job with a savepoint per item: an item the database refuses (here a
/// trigger raising for one order) is rolled back alone and answered 500, and the items around it
/// are committed.
#[test]
fn an_item_the_database_refuses_does_not_sink_the_others() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .start();
    let visitor = with_visitor(&app);
    app.refuse_conversion("INSERT", "P-poison", "poisoned");
    let res = results(&post_batch(
        &app,
        &batch_of(&[
            json!({"visitorId": visitor, "orderId": "P-1"}),
            json!({"visitorId": visitor, "orderId": "P-poison"}),
            json!({"visitorId": visitor, "orderId": "P-2"}),
        ]),
    ));
    let status: Vec<u64> = res.iter().map(|r| r["status"].as_u64().unwrap()).collect();
    assert_eq!(status, [202, 500, 202]);
    assert_eq!(res[1]["code"], json!("INTERNAL"));
    assert_eq!(
        res[1]["error"],
        json!("internal error"),
        "no detail to the client"
    );
    for (i, order) in [(0, "P-1"), (2, "P-2")] {
        assert_eq!(
            app.order_status(order).expect(200)["eventId"],
            res[i]["eventId"]
        );
    }
    expect_error(&app.order_status("P-poison"), 404, "ORDER_NOT_FOUND");
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM outbox", &[]), 2);
}
