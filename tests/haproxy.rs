//! `packaging/haproxy.cfg` in front of two nodes on one PostgreSQL database, as README's "Beyond one
//! box" and `packaging/compose.yaml` run them: the shipped file, with only its addresses changed to
//! the test's (its nodes and its listening port). Needs `haproxy` (scripts/install-test-deps.sh).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::postgres::fresh_database;
use crate::common::{heavy_load, TestApp};

struct Proxy(Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `haproxy` binary: Debian puts it in /usr/sbin, which a user's PATH may lack.
fn haproxy() -> &'static str {
    if std::path::Path::new("/usr/sbin/haproxy").exists() {
        "/usr/sbin/haproxy"
    } else {
        "haproxy"
    }
}

fn port_of(base: &str) -> &str {
    base.rsplit(':').next().unwrap()
}

/// One order through the proxy: its status (0: no answer).
fn order(agent: &ureq::Agent, proxy: &str, app: &TestApp, id: &str) -> u16 {
    let body = json!({"clientId": "client-1", "orderId": id, "value": 1, "currency": "EUR"});
    crate::common::try_send(
        agent,
        "POST",
        &format!("{proxy}/api/sites/{}/conversions", app.site.id),
        &[
            ("Authorization", &format!("Bearer {}", app.key.key)),
            ("Content-Type", "application/json"),
        ],
        Some(&serde_json::to_vec(&body).unwrap()),
    )
    .map_or(0, |r| r.status)
}

/// Orders served by a node so far: its access log's lines for the conversions route.
fn served(node: &TestApp) -> usize {
    node.log()
        .lines()
        .filter(|l| l.contains("POST /api/sites/") && l.contains(" 202 "))
        .count()
}

#[test]
fn the_shipped_haproxy_config_spreads_orders_over_both_nodes_and_routes_around_a_dead_one() {
    let _heavy = heavy_load();
    let a = TestApp::builder()
        .db(&fresh_database())
        .serve_args(&["--trusted-proxies", "127.0.0.1"])
        .start();
    let mut b = a.another_node();
    a.identify(
        "v1",
        "client-1",
        chrono::Utc::now().timestamp_millis() - 60_000,
    );
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/packaging/haproxy.cfg"
    ))
    .unwrap();
    for needle in ["bind :8080", "node1:8080", "node2:8080"] {
        assert!(shipped.contains(needle), "packaging/haproxy.cfg: {needle}");
    }
    let cfg = shipped
        .replace("bind :8080", &format!("bind 127.0.0.1:{listen}"))
        .replace("node1:8080", &format!("127.0.0.1:{}", port_of(&a.base)))
        .replace("node2:8080", &format!("127.0.0.1:{}", port_of(&b.base)));
    let file = a.dir.path().join("haproxy.cfg");
    std::fs::write(&file, cfg).unwrap();
    let check = Command::new(haproxy())
        .args(["-c", "-f", file.to_str().unwrap()])
        .output()
        .expect("haproxy (scripts/install-test-deps.sh installs it)");
    assert!(check.status.success(), "{check:?}");
    let _proxy = Proxy(
        Command::new(haproxy())
            .args(["-db", "-f", file.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let proxy = format!("http://127.0.0.1:{listen}");
    let agent = crate::common::agent();
    let up = Instant::now() + Duration::from_secs(20);
    while crate::common::try_send(&agent, "GET", &format!("{proxy}/healthz"), &[], None)
        .map_or(true, |r| r.status != 200)
    {
        assert!(Instant::now() < up, "the proxy never answered /healthz");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Round robin: both nodes take orders.
    for i in 0..20 {
        assert_eq!(
            order(&agent, &proxy, &a, &format!("p-{i}")),
            202,
            "order {i}"
        );
    }
    let (on_a, on_b) = (served(&a), served(&b));
    assert!(on_a >= 5 && on_b >= 5, "a served {on_a}, b {on_b}");
    // A node dies: every order still gets its 202 (a refused connection goes to the other node,
    // and the health check takes the dead one out).
    b.kill9();
    for i in 0..20 {
        assert_eq!(
            order(&agent, &proxy, &a, &format!("q-{i}")),
            202,
            "order {i}"
        );
    }
    // Forty orders, each once.
    let mut c = ::postgres::Client::connect(a.db.to_str().unwrap(), ::postgres::NoTls).unwrap();
    let n: i64 = c
        .query_one("SELECT COUNT(*) FROM conversions", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 40);
}
