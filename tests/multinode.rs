//! Several `convapi serve` nodes on one PostgreSQL database, as behind a load balancer: each test
//! starts two nodes (`TestApp::another_node`) on a database of its own on the throwaway cluster of
//! `scripts/test.sh`, and checks what must hold across them: one conversion per order, each outbox
//! item processed once with exact report totals, each order sent once to an ad platform both nodes
//! send to, migrations applied once by nodes starting at once,
//! no acknowledged order lost when a node is killed, and a PostgreSQL restart (on a cluster of the
//! test's own) costing 503s while it is down and nothing more.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::postgres::{fresh_database, Cluster};
use crate::common::{heavy_load, TestApp};

/// Epoch ms of the visitor's session: within the default 30-day window of now.
fn recently() -> i64 {
    chrono::Utc::now().timestamp_millis() - 60_000
}

/// Two nodes on a fresh database, the second started once the first has set it up; the visitor
/// `v1` identified as `client-1` in a session on the first.
fn two_nodes(serve_args: &[&str]) -> (TestApp, TestApp) {
    let a = TestApp::builder()
        .db(&fresh_database())
        .serve_args(serve_args)
        .start();
    let b = a.another_node();
    a.identify("v1", "client-1", recently());
    (a, b)
}

fn psql(app: &TestApp) -> ::postgres::Client {
    ::postgres::Client::connect(app.db.to_str().unwrap(), ::postgres::NoTls)
        .expect("connect to the test database")
}

fn one_i64(c: &mut ::postgres::Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).unwrap().get(0)
}

#[test]
fn the_same_order_sent_to_both_nodes_at_once_is_one_conversion() {
    let (a, b) = two_nodes(&["--pipeline", "off"]);
    for round in 0..50 {
        let body = json!({"clientId": "client-1", "orderId": format!("race-{round}"),
                          "value": 10, "currency": "EUR"});
        let answers: Vec<(u16, Value)> = std::thread::scope(|s| {
            let sent: Vec<_> = [&a, &b]
                .into_iter()
                .map(|node| {
                    let body = &body;
                    s.spawn(move || {
                        let r = node.post_conversion(body);
                        (r.status, r.json())
                    })
                })
                .collect();
            sent.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let statuses: Vec<u16> = answers.iter().map(|(s, _)| *s).collect();
        // One is taken (202), the other is the same order again (200 or 202, never a second
        // conversion); both name the same event.
        assert!(
            statuses.iter().all(|s| *s == 200 || *s == 202) && statuses.contains(&202),
            "round {round}: {answers:?}"
        );
        assert_eq!(
            answers[0].1["eventId"], answers[1].1["eventId"],
            "round {round}: {answers:?}"
        );
    }
    let mut c = psql(&a);
    assert_eq!(
        one_i64(&mut c, "SELECT COUNT(*) FROM conversions"),
        50,
        "one conversion per order"
    );
    assert_eq!(
        one_i64(&mut c, "SELECT COUNT(*) FROM outbox"),
        50,
        "one outbox item per order"
    );
}

#[test]
fn ten_thousand_conversions_over_two_nodes_are_each_processed_once_with_exact_totals() {
    let _heavy = heavy_load();
    let (a, b) = two_nodes(&[]);
    const N: usize = 10_000;
    const SENDERS: usize = 8;
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..SENDERS {
            let node = if t % 2 == 0 { &a } else { &b };
            s.spawn(move || {
                for i in (t..N).step_by(SENDERS) {
                    // Values 0.01 to 100.00: the sum is known exactly.
                    let cents = i % 10_000 + 1;
                    let body: Value = serde_json::from_str(&format!(
                        r#"{{"clientId": "client-1", "orderId": "o-{i}", "value": {}.{:02},
                            "currency": "EUR"}}"#,
                        cents / 100,
                        cents % 100
                    ))
                    .unwrap();
                    let r = node.post_conversion(&body);
                    assert_eq!(r.status, 202, "order {i}: {}", r.text());
                }
            });
        }
    });
    let sent_in = started.elapsed();
    let mut c = psql(&a);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = one_i64(&mut c, "SELECT COUNT(*) FROM outbox");
        if left == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left} items still in the outbox"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        one_i64(
            &mut c,
            "SELECT COUNT(*) FROM conversions WHERE status = 'processed'"
        ),
        N as i64
    );
    // Each item processed by exactly one node: the nodes' counts add up to N, no more.
    let (on_a, on_b) = (
        a.metric("convapi_pipeline_processed_total"),
        b.metric("convapi_pipeline_processed_total"),
    );
    assert_eq!(
        on_a + on_b,
        N as u64,
        "processed on a: {on_a}, on b: {on_b}"
    );
    // The rollup, written by both nodes' writers at once, is exact.
    let expected_minor: i64 = (0..N).map(|i| (i % 10_000 + 1) as i64).sum();
    // The report's groups (one channel here) add up to every order and its exact revenue.
    let report = a.cli_json(&["report", "--site", &a.site.id, "--json"]);
    let groups: Vec<&serde_json::Value> = report["rows"]
        .as_array()
        .expect("report groups")
        .iter()
        .filter(|g| g["conversions"] != 0)
        .collect();
    let conversions: u64 = groups
        .iter()
        .map(|g| g["conversions"].as_u64().unwrap())
        .sum();
    let revenue: Vec<&str> = groups
        .iter()
        .map(|g| g["revenue"].as_str().unwrap())
        .collect();
    assert_eq!(conversions, N as u64, "{report}");
    assert_eq!(
        revenue,
        [format!(
            "{}.{:02}",
            expected_minor / 100,
            expected_minor % 100
        )],
        "{report}"
    );
    assert_eq!(
        one_i64(
            &mut c,
            "SELECT CAST(SUM(revenue_minor) AS BIGINT) FROM report_daily"
        ),
        expected_minor
    );
    eprintln!("{N} conversions over two nodes: sent in {sent_in:?}; processed a {on_a}, b {on_b}");
}

/// A `convapi serve` process on `db`, killed when dropped.
struct Node(std::process::Child);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `serve` on `db` and returns it with the first line it printed (or what went wrong).
fn serve(db: &str) -> (Node, String) {
    use std::io::BufRead;
    let mut cmd = std::process::Command::new(crate::common::BIN);
    crate::common::scrub_env(&mut cmd);
    let mut child = cmd
        .args(["--db", db, "serve", "--addr", "127.0.0.1:0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn serve");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| "nothing within 60 s".into());
    (Node(child), line)
}

#[test]
fn nodes_started_at_once_on_an_empty_database_each_apply_the_migrations_once() {
    let url = fresh_database();
    // Four servers started at once on the empty database, each migrating as it starts.
    let nodes: Vec<(Node, String)> = std::thread::scope(|s| {
        let url = &url;
        let started: Vec<_> = (0..4).map(|_| s.spawn(move || serve(url))).collect();
        started.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let agent = crate::common::agent();
    for (_, line) in &nodes {
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("a node did not start: {line:?}"));
        let r = crate::common::send(&agent, "GET", &format!("{base}/healthz"), &[], None);
        assert_eq!(r.status, 200, "{base}");
    }
    let mut c = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    let versions: Vec<i64> = c
        .query("SELECT version FROM schema_version", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        versions,
        [convapi::store::SCHEMA_VERSION],
        "one version row"
    );
    let tables: HashSet<String> = c
        .query(
            "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        tables.contains("conversions") && tables.contains("outbox"),
        "{tables:?}"
    );
}

/// One order to `node` (by its current address); `Some(eventId)` when it answered 202, `None` when
/// the node could not be reached (killed) or answered otherwise.
fn try_order(agent: &ureq::Agent, base: &str, node: &TestApp, order: &str) -> Option<String> {
    let body = json!({"clientId": "client-1", "orderId": order, "value": 1, "currency": "EUR"});
    let r = crate::common::try_send(
        agent,
        "POST",
        &format!("{base}/api/sites/{}/conversions", node.site.id),
        &[
            ("Authorization", &format!("Bearer {}", node.key.key)),
            ("Content-Type", "application/json"),
        ],
        Some(&serde_json::to_vec(&body).unwrap()),
    )
    .ok()?;
    (r.status == 202).then(|| r.json()["eventId"].as_str().unwrap().to_owned())
}

#[test]
fn killing_one_node_under_load_loses_no_acknowledged_order_and_the_other_finishes_its_work() {
    let _heavy = heavy_load();
    let (a, mut b) = two_nodes(&[]);
    let agent = crate::common::agent();
    let mut acked: Vec<(String, String)> = Vec::new();
    let mut next = 0usize;
    for cycle in 0..5 {
        let stop = std::sync::atomic::AtomicBool::new(false);
        let (base_a, base_b, pid_b) = (a.base.clone(), b.base.clone(), b.pid());
        let counter = std::sync::atomic::AtomicUsize::new(next);
        let got: Vec<Vec<(String, String)>> = std::thread::scope(|s| {
            let senders: Vec<_> = (0..4)
                .map(|t| {
                    let (node, base) = if t % 2 == 0 {
                        (&a, &base_a)
                    } else {
                        (&b, &base_b)
                    };
                    let (stop, counter, agent) = (&stop, &counter, &agent);
                    s.spawn(move || {
                        let mut mine = Vec::new();
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                            let i = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let order = format!("k-{i}");
                            if let Some(event) = try_order(agent, base, node, &order) {
                                mine.push((order, event));
                            }
                        }
                        mine
                    })
                })
                .collect();
            // Under load for a moment, then the second node dies without a word.
            std::thread::sleep(Duration::from_millis(400));
            let killed = std::process::Command::new("kill")
                .args(["-KILL", &pid_b.to_string()])
                .status()
                .unwrap();
            assert!(killed.success(), "cycle {cycle}: kill -9");
            std::thread::sleep(Duration::from_millis(300));
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            senders.into_iter().map(|h| h.join().unwrap()).collect()
        });
        next = counter.into_inner();
        acked.extend(got.into_iter().flatten());
        b.kill9();
        b.restart();
    }
    assert!(acked.len() > 50, "only {} orders acknowledged", acked.len());
    // Whatever the killed node had claimed, the nodes finish: the outbox empties.
    let mut c = psql(&a);
    let deadline = Instant::now() + Duration::from_secs(60);
    while one_i64(&mut c, "SELECT COUNT(*) FROM outbox") > 0 {
        assert!(Instant::now() < deadline, "the outbox did not drain");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Every acknowledged order is there, processed, under the eventId its 202 gave.
    for (order, event) in &acked {
        let row = c
            .query_opt(
                "SELECT id, status FROM conversions WHERE order_id = $1",
                &[order],
            )
            .unwrap()
            .unwrap_or_else(|| panic!("acknowledged order {order} is lost"));
        let (id, status): (String, String) = (row.get(0), row.get(1));
        assert_eq!((&id, status.as_str()), (event, "processed"), "{order}");
    }
    eprintln!("{} orders acknowledged over 5 kills", acked.len());
}

#[test]
fn postgresql_restarted_under_load_means_503s_while_it_is_down_then_202s_and_nothing_lost() {
    let _heavy = heavy_load();
    let (cluster, url) = Cluster::start();
    let app = TestApp::builder().db(&url).start();
    app.identify("v1", "client-1", recently());
    let stop = std::sync::atomic::AtomicBool::new(false);
    let down = std::sync::atomic::AtomicBool::new(false);
    let counter = std::sync::atomic::AtomicUsize::new(0);
    // (order, eventId, sent while the database was down, status)
    let seen: Vec<(String, Option<String>, bool, u16)> = std::thread::scope(|s| {
        let senders: Vec<_> = (0..2)
            .map(|_| {
                let (stop, down, counter, app) = (&stop, &down, &counter, &app);
                s.spawn(move || {
                    let mut mine = Vec::new();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let i = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let order = format!("r-{i}");
                        let was_down = down.load(std::sync::atomic::Ordering::Relaxed);
                        let body = json!({"clientId": "client-1", "orderId": order,
                                          "value": 1, "currency": "EUR"});
                        let r = app.post_conversion(&body);
                        let event = (r.status == 202)
                            .then(|| r.json()["eventId"].as_str().unwrap().to_owned());
                        mine.push((order, event, was_down, r.status));
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    mine
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(700));
        down.store(true, std::sync::atomic::Ordering::Relaxed);
        cluster.run("pause");
        let health_down = app.get("/healthz").status;
        std::thread::sleep(Duration::from_millis(1500));
        cluster.run("resume");
        down.store(false, std::sync::atomic::Ordering::Relaxed);
        // Back: within a few seconds the node answers 202 again by itself.
        let back = Instant::now() + Duration::from_secs(20);
        while app.get("/healthz").status != 200 {
            assert!(Instant::now() < back, "/healthz never came back");
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_millis(1000));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(health_down, 503, "/healthz while PostgreSQL is down");
        senders
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let statuses: HashSet<u16> = seen.iter().map(|(_, _, _, s)| *s).collect();
    assert!(
        statuses.iter().all(|s| *s == 202 || *s == 503),
        "only 202 and 503: {statuses:?}"
    );
    assert!(
        seen.iter()
            .any(|(_, _, was_down, s)| *was_down && *s == 503),
        "503s while down"
    );
    assert!(
        seen.iter().rev().take(20).any(|(_, _, _, s)| *s == 202),
        "202s again after: {:?}",
        &seen[seen.len().saturating_sub(5)..]
    );
    // Nothing acknowledged is lost; the outbox drains.
    let mut c = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while one_i64(&mut c, "SELECT COUNT(*) FROM outbox") > 0 {
        assert!(Instant::now() < deadline, "the outbox did not drain");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut acked = 0;
    for (order, event, _, _) in &seen {
        let Some(event) = event else { continue };
        acked += 1;
        let id: String = c
            .query_opt("SELECT id FROM conversions WHERE order_id = $1", &[order])
            .unwrap()
            .unwrap_or_else(|| panic!("acknowledged order {order} is lost"))
            .get(0);
        assert_eq!(&id, event, "{order}");
    }
    assert!(acked > 20, "{acked} acknowledged");
    drop(app);
    drop(cluster);
}

#[test]
fn pixel_batches_of_one_visitor_at_two_nodes_at_once_make_one_session() {
    let (a, b) = two_nodes(&["--pipeline", "off"]);
    let now = chrono::Utc::now().timestamp_millis();
    for round in 0..20 {
        let visitor = format!("vis-{round}");
        // A visitor seen before, whose last session ended (idle for more than 30 minutes) on odd
        // rounds; a new visitor on even ones.
        if round % 2 == 1 {
            a.pageview(&visitor, "https://shop.example/old", now - 2 * 3_600_000);
        }
        let sessions: Vec<String> = std::thread::scope(|s| {
            let sent: Vec<_> = [&a, &b]
                .into_iter()
                .enumerate()
                .map(|(i, node)| {
                    let visitor = &visitor;
                    s.spawn(move || {
                        node.pixel(
                            visitor,
                            json!([
                                {"type": "pageview", "url": format!("https://shop.example/{i}"),
                                 "ts": now + i as i64},
                                {"type": "identify", "userId": format!("user-{round}"),
                                 "ts": now + i as i64}
                            ]),
                        )
                    })
                })
                .collect();
            sent.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(sessions[0], sessions[1], "round {round}: one session");
    }
    // Each round's visitor: one new session (and its earlier one on odd rounds); v1's one.
    let mut c = psql(&a);
    assert_eq!(one_i64(&mut c, "SELECT COUNT(*) FROM sessions"), 31);
    assert_eq!(one_i64(&mut c, "SELECT COUNT(*) FROM visitors"), 21);
    assert_eq!(
        one_i64(&mut c, "SELECT COUNT(*) FROM visitor_clients"),
        21,
        "one identify link per visitor"
    );
}

#[test]
fn the_first_run_link_either_node_logged_works_on_both_and_makes_one_user() {
    use crate::common::{setup_fields, setup_token, DashClient};
    let a = TestApp::builder().db(&fresh_database()).start();
    let b = a.another_node();
    // Both nodes log the same link: the token lives in the database, not in one node's memory.
    let token = setup_token(&a);
    assert_eq!(setup_token(&b), token);
    let path = format!("/dashboard/setup?token={token}");
    // The form, opened on each node, sent to both at once: one first user, and the other answer
    // is the page that no longer exists.
    let barrier = std::sync::Barrier::new(2);
    let answers: Vec<u16> = std::thread::scope(|s| {
        let sent = [(&a, "a@shop.example"), (&b, "b@shop.example")].map(|(node, email)| {
            let (token, path, barrier) = (&token, &path, &barrier);
            s.spawn(move || {
                let client = DashClient::new(node);
                let csrf = DashClient::csrf_from(&client.page(path));
                barrier.wait();
                client
                    .post_form(
                        "/dashboard/setup",
                        &setup_fields(
                            token,
                            Some(&csrf),
                            "new",
                            "Shop",
                            email,
                            "a long passphrase",
                        ),
                    )
                    .status
            })
        });
        sent.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut sorted = answers.clone();
    sorted.sort();
    assert_eq!(sorted, [303, 404], "{answers:?}");
    let mut c = psql(&a);
    assert_eq!(one_i64(&mut c, "SELECT COUNT(*) FROM users"), 1);
    assert_eq!(one_i64(&mut c, "SELECT COUNT(*) FROM first_run"), 0);
    // Spent: the link is gone on both.
    assert_eq!(DashClient::new(&a).get(&path).status, 404);
    assert_eq!(DashClient::new(&b).get(&path).status, 404);
}

#[test]
fn both_nodes_send_to_one_destination_and_each_order_goes_once() {
    use crate::common::fake::{FakePlatform, Reply};
    // Meta's answer, a little slow, so both nodes' senders want the destination at once.
    let fake = FakePlatform::start(|r| {
        std::thread::sleep(Duration::from_millis(10));
        let n = r.json()["data"].as_array().map_or(0, Vec::len);
        Reply::ok(json!({"events_received": n}))
    });
    let (a, b) = two_nodes(&["--forward-threads", "4"]);
    a.cli_json(&[
        "destination",
        "add",
        "--site",
        &a.site.id,
        "--kind",
        "meta",
        "--name",
        "Meta",
        "--pixel-id",
        "1234567890",
        "--access-token",
        "EAAB-secret-token-0000",
        "--endpoint",
        &fake.url(),
        "--json",
    ]);
    let mut orders = HashSet::new();
    for i in 0..300 {
        let node = if i % 2 == 0 { &a } else { &b };
        let order = format!("fwd-{i}");
        node.post_conversion(
            &json!({"clientId": "client-1", "orderId": order, "value": 10, "currency": "EUR"}),
        )
        .accepted();
        orders.insert(order);
    }
    let ids = |reqs: &[crate::common::fake::Recorded]| -> Vec<String> {
        reqs.iter()
            .flat_map(|r| {
                r.json()["data"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| e["event_id"].as_str().unwrap().to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let reqs = fake.wait_for(Duration::from_secs(60), |r| {
        ids(r).into_iter().collect::<HashSet<_>>().len() >= orders.len()
    });
    std::thread::sleep(Duration::from_secs(2));
    let sent = ids(&fake.requests());
    let distinct: HashSet<String> = sent.iter().cloned().collect();
    assert_eq!(distinct, orders, "every order, under its id");
    assert_eq!(
        sent.len(),
        orders.len(),
        "no order sent twice by the two nodes ({} requests)",
        reqs.len()
    );
    let mut c = psql(&a);
    assert_eq!(
        one_i64(
            &mut c,
            "SELECT COUNT(*) FROM deliveries WHERE status = 'delivered'"
        ),
        300
    );
}
