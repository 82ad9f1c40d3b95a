//! Shared harness for the integration tests: they drive the real `convapi` binary through its
//! front door (the CLI and HTTP), never its library.
//!
//! [`TestApp::start`] creates a temp dir with its own database, a tenant, a site and an API key
//! (through `convapi ... --json`), starts `convapi serve --addr 127.0.0.1:0`, reads the chosen port
//! from the one stdout line, and kills the server on `Drop`. The server's stderr (its logs) goes to
//! `server.log` in the temp dir and is printed when a test fails, so failures explain themselves.
//!
//! Index of the test files (each starts with a comment saying what goes where):
//! - `conversions.rs`: every row of CONTRACT §3's table, every field rule, 404/405.
//! - `sessions.rs`: session resolution, sessionisation, attribution-window edges, `/api/collect`.
//! - `idempotency.rs`: repeats, pixel/API deduplication, concurrent sends of one order.
//! - `durability.rs`: acknowledged conversions survive `kill -9`.
//! - `keys.rs`: key storage, revocation, tenancy, `lastUsedAt`, CLI output and exit codes.
//! - `browser.rs`: the pixel end to end in headless Chromium (needs `chromium`; fails loudly without).
//! - `js.rs`: runs the pixel's Node tests, `node --test tests/js/` (needs `node`).
//! - `server.rs`: the server loop: a panicking handler is a 500, SIGTERM drains the request in flight.
//! - `pipeline.rs`, `currency.rs`, `report.rs`, `crash.rs`: the background pipeline (attribution,
//!   currency conversion, dead letters, the report, `kill -9` mid-drain); helpers in `pipeline_support/`.
//! - `hardening.rs`: tiny_http's gaps closed around it (timeouts, connection bound, accept restarts,
//!   body and head limits, deep JSON); `backpressure.rs`: 503 on a full disk, a busy database, a
//!   backlog or a full queue; `faults.rs`: 20 `kill -9` cycles under load; `security.rs`: keys, logs,
//!   SQL parameters, tenant isolation.
//!
//! Keep this API stable: other test files rely on it. Add, don't break.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The binary under test, built once by cargo for all integration tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_convapi");

/// The binary `serve` runs: [`BIN`], unless `CONVAPI_TEST_SERVER_BIN` names another build (to run
/// a suite against an older server, e.g. to show that a hardening test fails on plain tiny_http).
pub fn server_bin() -> String {
    std::env::var("CONVAPI_TEST_SERVER_BIN").unwrap_or_else(|_| BIN.to_owned())
}

/// Longest any single wait in the harness may take (server start, stop, one HTTP exchange).
pub const WAIT: Duration = Duration::from_secs(60);

/// An HTTP response, fully read.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the body text when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body is not JSON ({e}): {:?}",
                self.status,
                self.text()
            )
        })
    }

    /// A string member of the JSON body; panics when absent.
    pub fn str(&self, name: &str) -> String {
        match self.json().get(name) {
            Some(Value::String(s)) => s.clone(),
            other => panic!(
                "status {}: {name} is {other:?} in {}",
                self.status,
                self.text()
            ),
        }
    }

    /// Asserts the status, and returns the JSON body.
    pub fn expect(&self, status: u16) -> Value {
        assert_eq!(
            self.status,
            status,
            "unexpected status; body: {}",
            self.text()
        );
        self.json()
    }

    /// Asserts a 202 acceptance (`success: true`, non-empty `eventId` and `sessionId`) and returns
    /// `(eventId, sessionId)`.
    pub fn accepted(&self) -> (String, String) {
        let v = self.expect(202);
        assert_eq!(v["success"], json!(true), "{v}");
        let (e, s) = (self.str("eventId"), self.str("sessionId"));
        assert!(!e.is_empty() && !s.is_empty(), "{v}");
        (e, s)
    }
}

/// Asserts an error answer as the contract writes it: `status`, a JSON body with a non-empty
/// `error` text and `code == code`. Returns the body for further checks (e.g. `field`).
#[track_caller]
pub fn expect_error(resp: &Resp, status: u16, code: &str) -> Value {
    assert_eq!(
        (
            resp.status,
            resp.header("content-type")
                .map(|c| c.starts_with("application/json"))
        ),
        (status, Some(true)),
        "expected {status} {code} as JSON; got body {}",
        resp.text()
    );
    let v = resp.json();
    assert_eq!(v["code"], json!(code), "body: {v}");
    assert!(
        v["error"].as_str().is_some_and(|e| !e.trim().is_empty()),
        "error text missing: {v}"
    );
    v
}

/// Like [`expect_error`] for `400 VALIDATION_ERROR`, also checking the `field` it names.
#[track_caller]
pub fn expect_invalid(resp: &Resp, field: &str) -> Value {
    let v = expect_error(resp, 400, "VALIDATION_ERROR");
    assert_eq!(v["field"], json!(field), "body: {v}");
    v
}

/// One CLI run, finished.
#[derive(Debug)]
pub struct CliRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl CliRun {
    /// Asserts exit 0 and that stdout is exactly one JSON value (whitespace around it allowed).
    #[track_caller]
    pub fn json(&self) -> Value {
        assert_eq!(self.code, 0, "exit status; stderr: {}", self.stderr);
        let mut values = serde_json::Deserializer::from_str(&self.stdout).into_iter::<Value>();
        let first = values
            .next()
            .unwrap_or_else(|| panic!("no JSON on stdout: {:?}", self.stdout))
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", self.stdout));
        assert!(
            values.next().is_none(),
            "more than one JSON value on stdout: {:?}",
            self.stdout
        );
        first
    }
}

/// What [`TestApp`] starts with. Build with [`TestApp::builder`].
#[derive(Debug, Clone)]
pub struct Options {
    /// `--window-days` of the default site.
    pub window_days: u32,
    /// `--currency` of the default site.
    pub currency: String,
    /// `--model` of the default site.
    pub model: String,
    /// `--domain` of the default site.
    pub domain: Option<String>,
    /// Extra arguments after `serve --addr 127.0.0.1:0` (e.g. `--threads 4`, `--pipeline off`).
    pub serve_args: Vec<String>,
    /// Extra environment for the server process.
    pub env: Vec<(String, String)>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            window_days: 30,
            currency: "EUR".into(),
            model: "last_non_direct".into(),
            domain: None,
            serve_args: Vec::new(),
            env: Vec::new(),
        }
    }
}

pub struct Builder(Options);

impl Builder {
    pub fn window_days(mut self, d: u32) -> Self {
        self.0.window_days = d;
        self
    }
    pub fn currency(mut self, c: &str) -> Self {
        self.0.currency = c.into();
        self
    }
    pub fn model(mut self, m: &str) -> Self {
        self.0.model = m.into();
        self
    }
    pub fn domain(mut self, d: &str) -> Self {
        self.0.domain = Some(d.into());
        self
    }
    /// Adds arguments to `serve` (e.g. `["--pipeline", "off"]`).
    pub fn serve_args(mut self, args: &[&str]) -> Self {
        self.0.serve_args.extend(args.iter().map(|s| s.to_string()));
        self
    }
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.0.env.push((k.into(), v.into()));
        self
    }
    pub fn start(self) -> TestApp {
        TestApp::start_with(self.0)
    }
}

/// A tenant created through the CLI.
#[derive(Debug, Clone)]
pub struct Tenant {
    pub id: String,
}

/// A site created through the CLI.
#[derive(Debug, Clone)]
pub struct Site {
    pub id: String,
    pub tracker_id: String,
    /// The whole `site create --json` output.
    pub json: Value,
}

/// An API key created through the CLI (the only time its secret is visible).
#[derive(Debug, Clone)]
pub struct Key {
    pub id: String,
    pub key: String,
    pub prefix: String,
}

/// A running `convapi serve` on a temp-dir database, with a default tenant, site and key.
pub struct TestApp {
    pub dir: tempfile::TempDir,
    pub db: PathBuf,
    /// `http://127.0.0.1:PORT`, without a trailing slash; changes on [`TestApp::restart`].
    pub base: String,
    pub tenant: Tenant,
    pub site: Site,
    pub key: Key,
    pub options: Options,
    child: Option<Child>,
    agent: ureq::Agent,
}

impl TestApp {
    /// A server with the default options.
    pub fn start() -> TestApp {
        TestApp::builder().start()
    }

    pub fn builder() -> Builder {
        Builder(Options::default())
    }

    pub fn start_with(options: Options) -> TestApp {
        let dir = tempfile::Builder::new()
            .prefix("convapi-test-")
            .tempdir()
            .expect("temp dir");
        let db = dir.path().join("convapi.db");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(WAIT))
            .max_redirects(0)
            .build()
            .into();
        let mut app = TestApp {
            dir,
            db,
            base: String::new(),
            tenant: Tenant { id: String::new() },
            site: Site {
                id: String::new(),
                tracker_id: String::new(),
                json: Value::Null,
            },
            key: Key {
                id: String::new(),
                key: String::new(),
                prefix: String::new(),
            },
            options,
            child: None,
            agent,
        };
        app.tenant = app.create_tenant("Test tenant");
        let mut site_args: Vec<String> = vec![
            "--window-days".into(),
            app.options.window_days.to_string(),
            "--currency".into(),
            app.options.currency.clone(),
            "--model".into(),
            app.options.model.clone(),
        ];
        if let Some(d) = &app.options.domain {
            site_args.extend(["--domain".into(), d.clone()]);
        }
        let args: Vec<&str> = site_args.iter().map(String::as_str).collect();
        app.site = app.create_site(&app.tenant.id.clone(), "Test site", &args);
        app.key = app.create_key(&app.tenant.id.clone());
        app.spawn();
        app
    }

    // ---- the process ------------------------------------------------------------------------

    /// The server's log so far (its stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The server's process id; panics when it is not running.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server running").id()
    }

    /// `127.0.0.1:PORT` of the running server, for raw TCP clients.
    pub fn addr(&self) -> String {
        self.base.trim_start_matches("http://").to_owned()
    }

    /// Waits (bounded by [`WAIT`]) for the server to exit on its own; returns its exit code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let mut child = self.child.take().expect("server running");
        wait_bounded(&mut child).unwrap_or_else(|| {
            let _ = child.kill();
            let _ = child.wait();
            panic!("server did not exit within {WAIT:?}; log:\n{}", self.log())
        })
    }

    /// Whether the server process has exited (reaping it if so); for tests that try to crash it.
    pub fn has_exited(&mut self) -> bool {
        match self.child.as_mut().map(|c| c.try_wait().expect("try_wait")) {
            Some(Some(_)) => {
                self.child = None;
                true
            }
            Some(None) => false,
            None => true,
        }
    }

    fn spawn(&mut self) {
        assert!(self.child.is_none(), "server already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("server.log"))
            .expect("server log");
        let mut cmd = Command::new(server_bin());
        scrub_env(&mut cmd);
        cmd.arg("--db")
            .arg(&self.db)
            .args(["serve", "--addr", "127.0.0.1:0"])
            .args(&self.options.serve_args)
            .envs(self.options.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        let mut child = cmd.spawn().expect("spawn convapi serve");
        let stdout = child.stdout.take().expect("piped stdout");
        // Read the one line on a thread so that a server that never prints cannot hang the test;
        // the thread then keeps draining stdout so the server never blocks on a full pipe.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            let n = r.read_line(&mut line);
            let _ = tx.send(n.map(|_| line));
            let _ = std::io::copy(&mut r, &mut std::io::sink());
        });
        let line = match rx.recv_timeout(WAIT) {
            Ok(Ok(line)) => line,
            other => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("server did not start ({other:?}); log:\n{}", self.log());
            }
        };
        let Some(base) = line
            .trim_end()
            .strip_prefix("listening on ")
            .filter(|b| b.starts_with("http://127.0.0.1:"))
        else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "unexpected first stdout line {line:?}; log:\n{}",
                self.log()
            );
        };
        self.base = base.to_owned();
        self.child = Some(child);
    }

    /// Stops the server with SIGTERM and waits for it; asserts it exits 0 (graceful drain).
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
        let code = wait_bounded(&mut child).unwrap_or_else(|| {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "server did not stop within {WAIT:?} of SIGTERM; log:\n{}",
                self.log()
            )
        });
        assert_eq!(
            code,
            Some(0),
            "exit status after SIGTERM; log:\n{}",
            self.log()
        );
    }

    /// Kills the server with SIGKILL (no chance to drain or flush) and reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL");
            child.wait().expect("reap");
        }
    }

    /// Starts the server again on the same database (on a new port; `base` changes). Stops it
    /// gracefully first if it is running.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    // ---- the CLI ----------------------------------------------------------------------------

    /// Runs `convapi --db <this db> ARGS...` and returns its exit code and output.
    pub fn cli(&self, args: &[&str]) -> CliRun {
        cli_run(Some(&self.db), args)
    }

    /// Runs a CLI command that must succeed and print exactly one JSON value; returns it.
    #[track_caller]
    pub fn cli_json(&self, args: &[&str]) -> Value {
        let run = self.cli(args);
        assert_eq!(
            run.code, 0,
            "convapi {args:?} failed; stderr: {}",
            run.stderr
        );
        run.json()
    }

    pub fn create_tenant(&self, name: &str) -> Tenant {
        let v = self.cli_json(&["tenant", "create", name, "--json"]);
        Tenant {
            id: v["id"].as_str().expect("tenant id").to_owned(),
        }
    }

    /// `site create --tenant TENANT --name NAME EXTRA... --json`.
    pub fn create_site(&self, tenant: &str, name: &str, extra: &[&str]) -> Site {
        let mut args = vec!["site", "create", "--tenant", tenant, "--name", name];
        args.extend_from_slice(extra);
        args.push("--json");
        let v = self.cli_json(&args);
        Site {
            id: v["id"].as_str().expect("site id").to_owned(),
            tracker_id: v["trackerId"].as_str().expect("trackerId").to_owned(),
            json: v,
        }
    }

    pub fn create_key(&self, tenant: &str) -> Key {
        let v = self.cli_json(&["key", "create", "--tenant", tenant, "--json"]);
        Key {
            id: v["id"].as_str().expect("key id").to_owned(),
            key: v["key"].as_str().expect("key").to_owned(),
            prefix: v["prefix"].as_str().expect("prefix").to_owned(),
        }
    }

    pub fn revoke_key(&self, key_id: &str) -> Value {
        self.cli_json(&["key", "revoke", key_id, "--json"])
    }

    // ---- HTTP -------------------------------------------------------------------------------

    /// One request: `path` is appended to `base`. `body: None` sends no body at all.
    pub fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Resp {
        send(
            &self.agent,
            method,
            &format!("{}{path}", self.base),
            headers,
            body,
        )
    }

    pub fn get(&self, path: &str) -> Resp {
        self.send("GET", path, &[], None)
    }

    /// `POST /api/sites/{default site}/conversions` with the default key and a JSON body.
    pub fn post_conversion(&self, body: &Value) -> Resp {
        self.post_conversion_as(&self.key.key, &self.site.id, body)
    }

    /// `POST /api/sites/{site}/conversions` with `key` and a JSON body.
    pub fn post_conversion_as(&self, key: &str, site: &str, body: &Value) -> Resp {
        self.post_conversion_raw(
            &[
                ("Authorization", &format!("Bearer {key}")),
                ("Content-Type", "application/json"),
            ],
            site,
            &serde_json::to_vec(body).expect("serialise"),
        )
    }

    /// `POST /api/sites/{site}/conversions` with exactly these headers and bytes.
    pub fn post_conversion_raw(&self, headers: &[(&str, &str)], site: &str, body: &[u8]) -> Resp {
        self.send(
            "POST",
            &format!("/api/sites/{site}/conversions"),
            headers,
            Some(body),
        )
    }

    /// `GET /api/sites/{default site}/conversions/{orderId}` with the default key.
    pub fn order_status(&self, order_id: &str) -> Resp {
        self.order_status_as(&self.key.key, &self.site.id, order_id)
    }

    pub fn order_status_as(&self, key: &str, site: &str, order_id: &str) -> Resp {
        self.send(
            "GET",
            &format!("/api/sites/{site}/conversions/{}", encode_segment(order_id)),
            &[("Authorization", &format!("Bearer {key}"))],
            None,
        )
    }

    /// `POST /api/collect` with a JSON body as `application/json`.
    pub fn collect(&self, body: &Value) -> Resp {
        self.send(
            "POST",
            "/api/collect",
            &[("Content-Type", "application/json")],
            Some(&serde_json::to_vec(body).expect("serialise")),
        )
    }

    /// Sends `events` for `visitor_id` to the default site's tracker; asserts 200 and returns
    /// the `sessionId` the batch ended in.
    #[track_caller]
    pub fn pixel(&self, visitor_id: &str, events: Value) -> String {
        let r = self.collect(&json!({
            "trackerId": self.site.tracker_id,
            "visitorId": visitor_id,
            "events": events,
        }));
        let v = r.expect(200);
        assert_eq!(v["visitorId"], json!(visitor_id), "{v}");
        r.str("sessionId")
    }

    /// One pageview at `ts_ms` (epoch ms); returns the session it joined or started.
    #[track_caller]
    pub fn pageview(&self, visitor_id: &str, url: &str, ts_ms: i64) -> String {
        self.pixel(
            visitor_id,
            json!([{"type": "pageview", "url": url, "ts": ts_ms}]),
        )
    }

    /// A pageview then `identify(client_id)` at `ts_ms`; returns the session.
    #[track_caller]
    pub fn identify(&self, visitor_id: &str, client_id: &str, ts_ms: i64) -> String {
        self.pixel(
            visitor_id,
            json!([
                {"type": "pageview", "url": "https://shop.example/", "ts": ts_ms},
                {"type": "identify", "userId": client_id, "ts": ts_ms},
            ]),
        )
    }

    // ---- the database file ------------------------------------------------------------------

    /// A fresh connection to the database file (beside the server's; WAL lets both read).
    pub fn sqlite(&self) -> rusqlite::Connection {
        let c = rusqlite::Connection::open(&self.db).expect("open db");
        c.busy_timeout(WAIT).expect("busy timeout");
        c
    }

    /// One integer from a query (e.g. `SELECT COUNT(*) ...`).
    pub fn query_i64(&self, sql: &str, params: impl rusqlite::Params) -> i64 {
        self.sqlite()
            .query_row(sql, params, |r| r.get(0))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// One optional text value from a query.
    pub fn query_str(&self, sql: &str, params: impl rusqlite::Params) -> Option<String> {
        use rusqlite::OptionalExtension;
        self.sqlite()
            .query_row(sql, params, |r| r.get::<_, Option<String>>(0))
            .optional()
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .flatten()
    }

    /// The bytes of the database and its `-wal`/`-shm` companions, concatenated.
    pub fn db_bytes(&self) -> Vec<u8> {
        let mut all = Vec::new();
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let p = PathBuf::from(format!("{}{suffix}", self.db.display()));
            if let Ok(mut f) = std::fs::File::open(&p) {
                f.read_to_end(&mut all).expect("read db file");
            }
        }
        all
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("---- server log (last {} lines) ----", tail.len());
            for l in tail.iter().rev() {
                eprintln!("{l}");
            }
        }
    }
}

/// Runs the binary with `--db DB` (when given) and `args`, with no `CONVAPI_*` environment.
pub fn cli_run(db: Option<&Path>, args: &[&str]) -> CliRun {
    let mut cmd = Command::new(BIN);
    scrub_env(&mut cmd);
    if let Some(db) = db {
        cmd.arg("--db").arg(db);
    }
    cmd.args(args).stdin(Stdio::null());
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("run convapi");
    CliRun {
        code: status.code().expect("exited, not killed"),
        stdout: String::from_utf8(stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// The process must not pick up the developer's configuration.
fn scrub_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("CONVAPI_") {
            cmd.env_remove(k);
        }
    }
}

/// Waits for the child to exit, at most [`WAIT`]; `None` when it did not.
fn wait_bounded(child: &mut Child) -> Option<Option<i32>> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return Some(st.code());
        }
        if Instant::now() > deadline {
            return None;
        }
        // Polling a child's exit has no hook to call; keep the step short.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One HTTP exchange with `agent`; transport errors panic (a test never expects them).
pub fn send(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Resp {
    try_send(agent, method, url, headers, body)
        .unwrap_or_else(|e| panic!("{method} {url}: transport error: {e}"))
}

/// One HTTP exchange; a transport failure (refused, reset) is an `Err`.
pub fn try_send(
    agent: &ureq::Agent,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Result<Resp, ureq::Error> {
    let mut b = ureq::http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let mut resp = match body {
        Some(bytes) => agent.run(b.body(bytes.to_vec()).expect("request"))?,
        None => agent.run(b.body(()).expect("request"))?,
    };
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = if method == "HEAD" {
        Vec::new()
    } else {
        resp.body_mut()
            .with_config()
            .limit(16 * 1024 * 1024)
            .read_to_vec()?
    };
    Ok(Resp {
        status,
        headers,
        body,
    })
}

/// A new HTTP client configured like the harness's (non-2xx statuses are answers, not errors).
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(WAIT))
        .max_redirects(0)
        .build()
        .into()
}

/// Percent-encodes one path segment (everything but unreserved characters).
pub fn encode_segment(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Milliseconds since the Unix epoch, now (the test's clock; the server's is the same machine's).
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// An epoch-ms time as RFC 3339 UTC with milliseconds (what `occurredAt` takes).
pub fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("time in range")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub const MINUTE: i64 = 60_000;
pub const HOUR: i64 = 60 * MINUTE;
pub const DAY: i64 = 24 * HOUR;

/// A name unique within the test binary run (for order ids, visitor ids).
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
