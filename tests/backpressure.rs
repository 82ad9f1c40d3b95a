//! Backpressure (docs/decisions.md §3, check 9): when the write path cannot take a
//! conversion — disk full, database busy past its timeout, outbox backlog over its limit, writer
//! queue full — the answer is 503 `QUEUE_UNAVAILABLE` with `Retry-After`, never a 500 or a hang;
//! nothing acknowledged is lost, and the server serves normally once the cause is gone.
//! Also here: `/metrics` counts what happened (requests by route and status, latency histogram,
//! accepted, deduplicated, 422, 503, outbox depth, dead letters).

use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{json, Value};

const VISITOR: &str = "v-bp";

fn order(o: &str) -> Value {
    json!({"visitorId": VISITOR, "orderId": o, "value": 12.5, "currency": "EUR"})
}

#[track_caller]
fn expect_unavailable(r: &Resp) {
    expect_error(r, 503, "QUEUE_UNAVAILABLE");
    let retry: u64 = r
        .header("retry-after")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("503 without a numeric Retry-After: {:?}", r.headers));
    assert!(retry >= 1);
}

/// Every acknowledged `(orderId, eventId)` is stored once, with its outbox row (pipeline off).
#[track_caller]
fn assert_all_stored(app: &TestApp, acked: &[(String, String)]) {
    for (o, e) in acked {
        assert_eq!(
            app.query_i64(
                "SELECT COUNT(*) FROM conversions c JOIN outbox x ON x.conversion_id = c.id
                 WHERE c.order_id = ?1 AND c.id = ?2",
                &[o, e]
            ),
            1,
            "acknowledged order {o} is missing or lost its outbox row"
        );
    }
}

#[test]
fn a_full_disk_answers_503_and_the_server_writes_again_once_space_is_back() {
    if sqlite_only("fills the disk with SQLite's max_page_count, on a server in this process") {
        return;
    }
    let mut app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .start();
    app.pageview(VISITOR, "https://shop.example/", now_ms() - 60_000);
    // Ballast that the test can free later: 200 pages' worth of text in a row of our own.
    app.stop();
    let c = app.sqlite();
    c.execute_batch("CREATE TABLE ballast (b TEXT)").unwrap();
    c.execute("INSERT INTO ballast VALUES (?1)", ["x".repeat(200 * 4096)])
        .unwrap();
    c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
    let pages: i64 = c.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
    drop(c);
    // No room to grow: the server's connections may not add a single page. No option of the
    // binary caps the file, so this server runs in the test process, through the library.
    app.restart_in_process(|config| config.store.max_page_count = Some(pages as u64));

    let mut acked = Vec::new();
    let mut refused = 0;
    for i in 0..3000 {
        let o = format!("full-{i}");
        let r = app.post_conversion(&order(&o));
        match r.status {
            202 => acked.push((o, r.accepted().0)),
            503 => {
                expect_unavailable(&r);
                refused += 1;
                if refused == 3 {
                    break;
                }
            }
            other => panic!("unexpected {other}: {}", r.text()),
        }
    }
    assert_eq!(refused, 3, "the database never filled up");
    // Reads still work while writes cannot.
    app.order_status(&acked[0].0).expect(200);
    // Space comes back (another process frees it), and the same server writes again.
    app.sqlite().execute_batch("DELETE FROM ballast").unwrap();
    let r = app.post_conversion(&order("after-full"));
    acked.push(("after-full".into(), r.accepted().0));
    assert_eq!(app.get("/healthz").status, 200, "{}", app.log());
    assert_all_stored(&app, &acked);
    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM conversions", &[]),
        acked.len() as i64,
        "a refused conversion was stored"
    );
    // Its log goes nowhere; its metrics count every answer by route and status.
    let metrics = app.get("/metrics").text();
    assert!(
        !metrics.contains("status=\"500\""),
        "a 500 was answered:\n{metrics}"
    );
    assert!(
        metrics.contains("convapi_requests_total{route=\"conversions_report\",status=\"503\"} 3"),
        "{metrics}"
    );
}

/// Regression: the read pool waited for every one of its connections within the busy timeout at
/// startup, so a short `--busy-timeout-ms` with many threads (or on a loaded machine) kept the
/// server from starting ("timed out waiting for connection").
#[test]
fn a_one_millisecond_busy_timeout_with_many_threads_still_starts() {
    if sqlite_only("SQLite's read pool (PostgreSQL's waits for its first connection only)") {
        return;
    }
    let app = TestApp::builder()
        .serve_args(&["--threads", "64"])
        .env("CONVAPI_BUSY_TIMEOUT_MS", "1")
        .start();
    app.get("/healthz").expect(200);
    app.pageview(VISITOR, "https://shop.example/", now_ms() - 60_000);
    app.post_conversion(&order("one-ms")).accepted();
}

#[test]
fn a_database_locked_past_the_busy_timeout_answers_503_then_serves_again() {
    if sqlite_only(
        "SQLite's write lock held against --busy-timeout-ms (on PostgreSQL: backpressure::a_lock_held_by_another_session_answers_503_in_time_and_healthz_at_once)",
    ) {
        return;
    }
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .env("CONVAPI_BUSY_TIMEOUT_MS", "300")
        .start();
    app.pageview(VISITOR, "https://shop.example/", now_ms() - 60_000);
    let first = app.post_conversion(&order("busy-0")).accepted().0;

    // Another process holds the write lock longer than the server's busy timeout.
    let lock = app.sqlite();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = Instant::now();
    let r = app.post_conversion(&order("busy-1"));
    let took = started.elapsed();
    expect_unavailable(&r);
    assert!(took < Duration::from_secs(10), "503 took {took:?}");
    // A repeat of a known order needs no write and is answered as usual.
    assert_eq!(app.post_conversion(&order("busy-0")).accepted().0, first);
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);

    let again = app.post_conversion(&order("busy-1")).accepted().0;
    assert_all_stored(&app, &[("busy-0".into(), first), ("busy-1".into(), again)]);
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 2);
}

#[test]
fn an_outbox_backlog_over_its_limit_answers_503_for_new_work_only() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .env("CONVAPI_MAX_BACKLOG", "3")
        .start();
    app.pageview(VISITOR, "https://shop.example/", now_ms() - 60_000);
    let mut acked = Vec::new();
    for i in 0..3 {
        let o = format!("bl-{i}");
        acked.push((o.clone(), app.post_conversion(&order(&o)).accepted().0));
    }
    expect_unavailable(&app.post_conversion(&order("bl-3")));
    // Repeats of known orders create no work: still answered.
    assert_eq!(app.post_conversion(&order("bl-1")).accepted().0, acked[1].1);
    // The pipeline (here: another process) works the backlog off; new work is taken again.
    app.execute(
        "DELETE FROM outbox WHERE conversion_id = ?1",
        &[&acked[0].1],
    );
    // The cached count is refreshed after the next commit; a pixel event commits one.
    app.pageview(VISITOR, "https://shop.example/again", now_ms() - 30_000);
    let r = app.post_conversion(&order("bl-3"));
    r.accepted();
    assert_all_stored(&app, &acked[1..]);
    let metrics = app.get("/metrics").text();
    assert!(
        metrics.contains("convapi_queue_unavailable_total 1"),
        "{metrics}"
    );
}

#[test]
fn a_full_writer_queue_answers_503_without_hanging() {
    if sqlite_only(
        "stalls the writer with SQLite's write lock and --busy-timeout-ms (on PostgreSQL: backpressure::a_lock_held_by_another_session_answers_503_in_time_and_healthz_at_once)",
    ) {
        return;
    }
    // Queue of one, and the writer stuck behind another process's lock for up to 2 s per batch:
    // most of 16 concurrent reports find the queue full.
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off", "--queue", "1", "--threads", "16"])
        .env("CONVAPI_BUSY_TIMEOUT_MS", "2000")
        .start();
    app.pageview(VISITOR, "https://shop.example/", now_ms() - 60_000);
    let lock = app.sqlite();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = Instant::now();
    let results: Vec<Resp> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let app = &app;
                s.spawn(move || app.post_conversion(&order(&format!("q-{i}"))))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let took = started.elapsed();
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);
    assert!(took < Duration::from_secs(30), "took {took:?}");
    for r in &results {
        expect_unavailable(r);
    }
    assert!(
        app.log().contains("write queue full"),
        "no request found the queue full:\n{}",
        app.log()
    );
    app.post_conversion(&order("q-after")).accepted();
}

#[test]
fn metrics_count_what_happened() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .env("CONVAPI_MAX_BACKLOG", "2")
        .start();
    app.pageview(VISITOR, "https://shop.example/", now_ms() - 60_000);
    app.post_conversion(&order("m-1")).accepted(); // accepted
    app.post_conversion(&order("m-1")).accepted(); // deduplicated
    app.post_conversion(&order("m-2")).accepted(); // accepted; backlog now 2
    expect_unavailable(&app.post_conversion(&order("m-3"))); // 503
    expect_error(
        &app.post_conversion(&json!({"visitorId": "nobody", "orderId": "m-4"})),
        422,
        "NO_SESSION",
    );
    expect_error(&app.get("/nowhere"), 404, "NOT_FOUND");
    // One outbox row dead-lettered by hand, as the pipeline does after its last try.
    app.execute(
        "UPDATE outbox SET dead_at = 1 WHERE conversion_id =
         (SELECT id FROM conversions WHERE order_id = 'm-2')",
        &[],
    );
    let text = app.get("/metrics").text();
    let m = |name: &str| metric_in(&text, name);
    assert_eq!(m("convapi_conversions_accepted_total"), 2.0);
    assert_eq!(m("convapi_conversions_deduplicated_total"), 1.0);
    assert_eq!(m("convapi_conversions_no_session_total"), 1.0);
    assert_eq!(m("convapi_queue_unavailable_total"), 1.0);
    assert_eq!(m("convapi_outbox_depth"), 1.0);
    assert_eq!(m("convapi_outbox_dead_letters"), 1.0);
    let route = |status: u16| {
        m(&format!(
            "convapi_requests_total{{route=\"conversions_report\",status=\"{status}\"}}"
        ))
    };
    assert_eq!((route(202), route(503), route(422)), (3.0, 1.0, 1.0));
    assert_eq!(
        m("convapi_requests_total{route=\"collect\",status=\"200\"}"),
        1.0
    );
    assert_eq!(
        m("convapi_requests_total{route=\"unknown\",status=\"404\"}"),
        1.0
    );
    // The histogram saw every request answered before this one (the /metrics request itself is
    // counted after it answers), and its buckets are cumulative.
    let count = m("convapi_request_duration_seconds_count");
    assert_eq!(count, 7.0);
    assert_eq!(
        m("convapi_request_duration_seconds_bucket{le=\"+Inf\"}"),
        count
    );
    let buckets: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("convapi_request_duration_seconds_bucket"))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
        .collect();
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    assert!(m("convapi_request_duration_seconds_sum") > 0.0);
    assert!(text.contains("# TYPE convapi_request_duration_seconds histogram"));
    assert!(text.contains("# TYPE convapi_outbox_depth gauge"));
}

/// Regression: on PostgreSQL a write blocked by another session's lock held its request for about
/// 24 s (no `lock_timeout`: `--busy-timeout-ms` bounded only the wait for a pooled connection)
/// and `/healthz` timed out meanwhile, so a load balancer would have dropped every node at once.
/// Now, on either engine, a conversion that finds the database locked past the busy timeout is a
/// 503 with `Retry-After`, and `/healthz` answers within a second all along.
#[test]
fn a_lock_held_by_another_session_answers_503_in_time_and_healthz_at_once() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off"])
        .env("CONVAPI_BUSY_TIMEOUT_MS", "300")
        .start();
    app.pageview(VISITOR, "https://shop.example/", now_ms() - 60_000);
    let first = app.post_conversion(&order("held-0")).accepted().0;
    // SQLite: the write lock. PostgreSQL: a lock that lets reads through and stops the writer's
    // insert, then one that stops the request's own read of the order too.
    let modes: &[&str] = if app.is_postgres() {
        &["EXCLUSIVE", "ACCESS EXCLUSIVE"]
    } else {
        &["IMMEDIATE"]
    };
    for (i, mode) in modes.iter().enumerate() {
        let holder = if app.is_postgres() {
            let mut c = ::postgres::Client::connect(&app.db.to_string_lossy(), ::postgres::NoTls)
                .expect("connect");
            c.batch_execute(&format!("BEGIN; LOCK TABLE conversions IN {mode} MODE"))
                .unwrap();
            Ok(c)
        } else {
            let lock = app.sqlite();
            lock.execute_batch("BEGIN IMMEDIATE").unwrap();
            Err(lock)
        };
        let o = format!("held-{}", i + 1);
        let (r, took, health) = std::thread::scope(|s| {
            let report = s.spawn(|| {
                let started = Instant::now();
                let r = app.post_conversion(&order(&o));
                (r, started.elapsed())
            });
            std::thread::sleep(Duration::from_millis(100));
            let started = Instant::now();
            let h = app.get("/healthz");
            let health = (h.status, started.elapsed());
            let (r, took) = report.join().unwrap();
            (r, took, health)
        });
        expect_unavailable(&r);
        assert!(took < Duration::from_secs(3), "{mode}: 503 took {took:?}");
        assert_eq!(health.0, 200, "{mode}: /healthz while the lock is held");
        assert!(
            health.1 < Duration::from_secs(1),
            "{mode}: /healthz took {:?}",
            health.1
        );
        match holder {
            Ok(mut c) => c.batch_execute("ROLLBACK").unwrap(),
            Err(lock) => lock.execute_batch("ROLLBACK").unwrap(),
        }
        app.post_conversion(&order(&o)).accepted();
    }
    assert_eq!(app.post_conversion(&order("held-0")).accepted().0, first);
    assert_eq!(
        app.query_i64("SELECT COUNT(*) FROM conversions", &[]),
        1 + modes.len() as i64
    );
}

/// Regression: on PostgreSQL each job of the writer's batch waited the whole lock timeout in turn
/// for a lock another session held, so sixteen reports queued behind one took sixteen timeouts.
/// Once one job meets the lock, the rest of its batch is answered busy at once, as SQLite's whole
/// batch is when its transaction cannot begin.
#[test]
fn reports_queued_behind_a_held_lock_are_all_answered_within_about_two_timeouts() {
    let app = TestApp::builder()
        .serve_args(&["--pipeline", "off", "--threads", "24"])
        .env("CONVAPI_BUSY_TIMEOUT_MS", "300")
        .start();
    app.pageview(VISITOR, "https://shop.example/", now_ms() - 60_000);
    app.post_conversion(&order("queued-0")).accepted();
    // A lock that lets the requests' reads through and stops the writer's inserts.
    let holder = if app.is_postgres() {
        let mut c = ::postgres::Client::connect(&app.db.to_string_lossy(), ::postgres::NoTls)
            .expect("connect");
        c.batch_execute("BEGIN; LOCK TABLE conversions IN EXCLUSIVE MODE")
            .unwrap();
        Ok(c)
    } else {
        let lock = app.sqlite();
        lock.execute_batch("BEGIN IMMEDIATE").unwrap();
        Err(lock)
    };
    let started = Instant::now();
    let results: Vec<(Resp, Duration)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let app = &app;
                s.spawn(move || {
                    let r = app.post_conversion(&order(&format!("queued-{}", i + 1)));
                    (r, started.elapsed())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    match holder {
        Ok(mut c) => c.batch_execute("ROLLBACK").unwrap(),
        Err(lock) => lock.execute_batch("ROLLBACK").unwrap(),
    }
    for (r, took) in &results {
        expect_unavailable(r);
        assert!(
            *took < Duration::from_millis(2000),
            "answered after {took:?}: {:?}",
            results.iter().map(|(_, t)| t).collect::<Vec<_>>()
        );
    }
    assert_eq!(app.query_i64("SELECT COUNT(*) FROM conversions", &[]), 1);
}
