//! The server process: [`TestApp`] creates a temp dir with its own database (a file, or on a
//! PostgreSQL run a fresh database of the test cluster, dropped with the app), a tenant, a site and
//! an API key (through the CLI, see `cli.rs`), starts `convapi serve --addr 127.0.0.1:0`, reads the
//! chosen port from the one stdout line, and kills the server on `Drop`. The server's stderr (its
//! logs) goes to `server.log` in the temp dir and is printed when a test fails, so failures explain
//! themselves.
//!
//! Everything here is per app (its own temp dir, port and child process): tests run as threads of
//! one process, so nothing here may touch process-wide state (environment, current directory,
//! signal dispositions). A child's environment is set on its `Command`, never with `set_var`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::agent;
use super::postgres::{drop_database, fresh_database};
use super::sql::on_postgres;

/// The binary under test, built once by cargo for all integration tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_convapi");

/// The binary `serve` runs: [`BIN`], unless `CONVAPI_TEST_SERVER_BIN` names another build (to run
/// a suite against an older server, e.g. to show that a hardening test fails on plain tiny_http).
pub fn server_bin() -> String {
    std::env::var("CONVAPI_TEST_SERVER_BIN").unwrap_or_else(|_| BIN.to_owned())
}

/// The harness's `--forward-private-endpoints`: loopback, where the fake platforms listen.
pub(super) const FORWARD_PRIVATE_ENDPOINTS: &str = "127.0.0.1";
/// The bound on pixel event ages test servers run with (100 years): see `TestApp::spawn`.
pub(super) const PIXEL_MAX_AGE_HOURS: &str = "876000";

/// Longest any single wait in the harness may take (server start, stop, one HTTP exchange).
pub const WAIT: Duration = Duration::from_secs(60);

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
    /// `--db` (a PostgreSQL URL, say); `None`: the run's engine (`sql.rs`, `CONVAPI_TEST_ENGINE`),
    /// `convapi.db` in the app's temporary directory, or a fresh database on the test cluster.
    pub db: Option<PathBuf>,
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
            db: None,
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
    /// Serves `--db DB` instead of a file of its own (a PostgreSQL URL, say).
    pub fn db(mut self, db: &str) -> Self {
        self.0.db = Some(PathBuf::from(db));
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
    /// A server running inside this process instead (see [`TestApp::restart_in_process`]).
    in_process: Option<convapi::server::Running>,
    /// The HTTP client of this app's requests (`client.rs`).
    pub(super) agent: ureq::Agent,
    /// The plain PostgreSQL client of `sql.rs`'s peeks, connected on first use.
    pub(super) peek: std::sync::Mutex<Option<::postgres::Client>>,
    /// The database of the run's engine this app created (dropped with the app), if it did.
    owned_db: Option<String>,
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
        // The run's engine (sql.rs, `CONVAPI_TEST_ENGINE`) unless the test named a database.
        let owned_db = (options.db.is_none() && on_postgres()).then(fresh_database);
        let db = match (&options.db, &owned_db) {
            (Some(db), _) => db.clone(),
            (None, Some(url)) => PathBuf::from(url),
            (None, None) => dir.path().join("convapi.db"),
        };
        let agent = agent();
        let mut app = TestApp {
            dir,
            db,
            peek: Default::default(),
            owned_db,
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
            in_process: None,
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

    /// A second `serve` on this app's database (of PostgreSQL, where several may run), with the
    /// same tenant, site, key and options, a temporary directory and log of its own.
    pub fn another_node(&self) -> TestApp {
        self.node_on(&self.db)
    }

    /// A `serve` on `db` (a copy of this app's database, say) with this app's tenant, site, key
    /// and options, a temporary directory and log of its own.
    pub fn node_on(&self, db: &Path) -> TestApp {
        let dir = tempfile::Builder::new()
            .prefix("convapi-test-")
            .tempdir()
            .expect("temp dir");
        let mut node = TestApp {
            dir,
            db: db.to_path_buf(),
            peek: Default::default(),
            owned_db: None,
            base: String::new(),
            tenant: self.tenant.clone(),
            site: self.site.clone(),
            key: self.key.clone(),
            options: self.options.clone(),
            child: None,
            in_process: None,
            agent: agent(),
        };
        node.spawn();
        node
    }

    /// The server's log so far (its stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some() || self.in_process.is_some()
    }

    /// The server's process id; panics when it is not running.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server running").id()
    }

    /// A number of kB from the server process's `/proc/PID/status` line `field` (`VmRSS`: resident
    /// now, `VmHWM`: the peak since it started).
    pub fn server_kb(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
            .unwrap_or_else(|| panic!("no {field} in {status}"))
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
        // Tests build sessions at chosen times, days or months back, with pixel events dated
        // then; the server would clamp such `ts` to a day before receipt. The environment sets
        // the bound only as a default: a test's own `--pixel-max-age-hours` wins, and
        // tests/untrusted.rs checks the production default that way.
        cmd.env("CONVAPI_PIXEL_MAX_AGE_HOURS", PIXEL_MAX_AGE_HOURS);
        secret_key_env(&mut cmd, &self.db);
        // The fake platforms listen on 127.0.0.1: the operator's allowance of a private endpoint,
        // as a default a test's own `--forward-private-endpoints` replaces (tests/destinations.rs
        // checks what a server without it refuses).
        cmd.env(
            "CONVAPI_FORWARD_PRIVATE_ENDPOINTS",
            FORWARD_PRIVATE_ENDPOINTS,
        );
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

    /// Stops the server with SIGTERM and waits for it; asserts it exits 0 (graceful drain). A
    /// server in this process is shut down the same way (drained, then stopped).
    pub fn stop(&mut self) {
        if let Some(running) = self.in_process.take() {
            running.shutdown();
        }
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

    /// Like [`TestApp::restart`], but the new server runs inside this process, through the library
    /// (`inproc.rs`), with the app's serve arguments and then `adjust`'s changes to its
    /// configuration: for what the binary has no option for (e.g. `store.max_page_count`). It has
    /// no log and no process id; `stop`, `restart` and `Drop` end it.
    pub fn restart_in_process(&mut self, adjust: impl FnOnce(&mut convapi::server::ServeConfig)) {
        self.stop();
        let running = super::inproc::start(&self.db, &self.options.serve_args, adjust);
        self.base = format!("http://{}", running.addr);
        self.in_process = Some(running);
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(running) = self.in_process.take() {
            running.shutdown();
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(url) = self.owned_db.take() {
            // The peeking client first; the database may not be dropped while one is connected.
            if let Ok(mut peek) = self.peek.lock() {
                peek.take();
            }
            drop_database(&url);
        }
        if std::thread::panicking() {
            let log = self.log();
            // The warnings and errors first (a 5xx's cause scrolls out of a busy test's tail),
            // then the tail.
            let alarms: Vec<&str> = log
                .lines()
                .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
                .take(40)
                .collect();
            if !alarms.is_empty() {
                eprintln!(
                    "---- server log (first {} warnings and errors) ----",
                    alarms.len()
                );
                for l in &alarms {
                    eprintln!("{l}");
                }
            }
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("---- server log (last {} lines) ----", tail.len());
            for l in tail.iter().rev() {
                eprintln!("{l}");
            }
        }
    }
}

/// The key of destination credentials that every process of the tests gets on a PostgreSQL
/// database, which has no key file beside it (a SQLite database gets its own `convapi.db.key`).
pub const PG_SECRET_KEY: &str = "7e57000000000000000000000000000000000000000000000000000000007e57";

/// Gives `cmd` [`PG_SECRET_KEY`] when `db` is a PostgreSQL URL.
pub fn secret_key_env(cmd: &mut Command, db: &Path) {
    if db.to_string_lossy().starts_with("postgres") {
        cmd.env("CONVAPI_SECRET_KEY", PG_SECRET_KEY);
    }
}

/// The process must not pick up the developer's configuration.
pub fn scrub_env(cmd: &mut Command) {
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
