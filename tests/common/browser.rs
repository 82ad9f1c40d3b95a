//! Headless Chromium for the browser tests (`tests/browser.rs`, `tests/dashboard_browser.rs`):
//! finding the binary, launching it on a temp profile, a minimal Chrome DevTools Protocol client
//! over a sync websocket (`tungstenite`), and bounded waits.
//!
//! Without a browser the tests that use it fail loudly, in CI and outside it: they never pass
//! without having run. `CONVAPI_CHROMIUM` overrides the browser path. Each [`Browser`] is its own
//! process with its own profile (tests run as threads of one process); `Drop` kills it, and prints
//! its log when the test is failing.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long the browser and the server get for anything to happen. Bounded polling, not sleeping.
pub const PATIENCE: Duration = Duration::from_secs(10);
/// Chromium's start-up on a busy CI machine is slower than anything else here.
pub const BROWSER_START: Duration = Duration::from_secs(60);

/// Polls `done` until it holds, for at most [`PATIENCE`].
#[track_caller]
pub fn poll(what: &str, done: impl FnMut() -> bool) {
    poll_for(PATIENCE, what, done)
}

/// Polls `done` until it holds, for at most `patience`.
#[track_caller]
pub fn poll_for(patience: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + patience;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "gave up after {patience:?} waiting for {what}"
        );
        thread::sleep(Duration::from_millis(25));
    }
}

/// `Runtime.evaluate` of `expr` in a page; its value (by value), `Null` when it has none. A thrown
/// exception fails the test.
pub fn cdp_eval(cdp: &mut Cdp, page: Option<&str>, expr: &str) -> Value {
    let r = cdp.call(
        "Runtime.evaluate",
        json!({"expression": expr, "returnByValue": true}),
        page,
    );
    if let Some(ex) = r.get("exceptionDetails") {
        panic!("evaluating {expr:?} threw: {ex}");
    }
    r["result"].get("value").cloned().unwrap_or(Value::Null)
}

/// The browser to drive: `CONVAPI_CHROMIUM` when set, else `chromium` (or a kin) on `PATH`.
/// None found is a loud failure, in CI and outside it.
pub fn chromium_path() -> PathBuf {
    let found = match std::env::var_os("CONVAPI_CHROMIUM") {
        Some(p) => Some(PathBuf::from(p)).filter(|p| p.is_file()),
        None => {
            let path = std::env::var_os("PATH").unwrap_or_default();
            std::env::split_paths(&path)
                .chain([PathBuf::from("/usr/bin")])
                .flat_map(|dir| {
                    ["chromium", "chromium-browser", "google-chrome"].map(|n| dir.join(n))
                })
                .find(|p| p.is_file())
        }
    };
    found.unwrap_or_else(|| {
        panic!(
            "\n\n********************************************************************\n\
             the browser tests need Chromium, and none was found{}.\n\
             Install it:    apt-get install -y chromium\n\
             or point CONVAPI_CHROMIUM at a Chrome or Chromium binary.\n\
             This test never passes without a browser.\n\
             ********************************************************************\n",
            if std::env::var_os("CI").is_some() {
                " (CI is set: .ci/run must install it)"
            } else {
                ""
            }
        )
    })
}

pub struct Browser {
    child: Child,
    profile: tempfile::TempDir,
}

impl Browser {
    pub fn launch(exe: &Path) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(profile.path().join("chromium.log")).unwrap();
        let child = Command::new(exe)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-port=0",
                "--window-size=800,600",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", exe.display()));
        Browser { child, profile }
    }

    /// Connects to the browser endpoint named in `DevToolsActivePort` (port, then path).
    pub fn connect(&mut self) -> Cdp {
        let file = self.profile.path().join("DevToolsActivePort");
        let deadline = Instant::now() + BROWSER_START;
        let (port, path) = loop {
            if let Ok(text) = std::fs::read_to_string(&file) {
                let mut lines = text.lines();
                if let (Some(port), Some(path)) = (lines.next(), lines.next()) {
                    break (port.trim().to_owned(), path.trim().to_owned());
                }
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("Chromium exited at start-up ({status})");
            }
            assert!(
                Instant::now() < deadline,
                "Chromium wrote no DevToolsActivePort within {BROWSER_START:?}"
            );
            thread::sleep(Duration::from_millis(50));
        };
        let stream = TcpStream::connect(format!("127.0.0.1:{port}")).expect("connect to DevTools");
        stream.set_read_timeout(Some(BROWSER_START)).unwrap();
        let (ws, _) = tungstenite::client(format!("ws://127.0.0.1:{port}{path}"), stream)
            .expect("DevTools websocket handshake");
        Cdp { ws, next_id: 0 }
    }

    /// Asks Chromium to quit (it may drop the socket before answering), and waits for it a while;
    /// `Drop` kills it in any case.
    pub fn close(mut self, cdp: &mut Cdp) {
        cdp.send("Browser.close", json!({}), None);
        let deadline = Instant::now() + PATIENCE;
        while self.child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            let log = std::fs::read_to_string(self.profile.path().join("chromium.log"));
            eprintln!("--- chromium log ---\n{}", log.unwrap_or_default());
        }
    }
}

/// One websocket to the browser; pages are reached through flat `sessionId`s.
pub struct Cdp {
    ws: tungstenite::WebSocket<TcpStream>,
    next_id: u64,
}

impl Cdp {
    /// Sends a command; returns its id.
    pub fn send(&mut self, method: &str, params: Value, session: Option<&str>) -> u64 {
        self.next_id += 1;
        let mut msg = json!({"id": self.next_id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws
            .send(tungstenite::Message::text(msg.to_string()))
            .unwrap_or_else(|e| panic!("send {method}: {e}"));
        self.next_id
    }

    /// Sends a command and waits for its answer; events arriving meanwhile are not needed here.
    pub fn call(&mut self, method: &str, params: Value, session: Option<&str>) -> Value {
        self.try_call(method, params, session)
            .unwrap_or_else(|err| panic!("{method} failed: {err}"))
    }

    /// Like [`Cdp::call`], but an error answer is returned, not a failure: an evaluation that
    /// lands while a page is being replaced by the next one answers an error, and a wait retries.
    pub fn try_call(
        &mut self,
        method: &str,
        params: Value,
        session: Option<&str>,
    ) -> Result<Value, Value> {
        let id = self.send(method, params, session);
        loop {
            let m = self
                .ws
                .read()
                .unwrap_or_else(|e| panic!("no answer to {method}: {e}"));
            let tungstenite::Message::Text(text) = m else {
                continue;
            };
            let v: Value = serde_json::from_str(text.as_str()).expect("CDP speaks JSON");
            if v["id"] == json!(id) {
                if let Some(err) = v.get("error") {
                    return Err(err.clone());
                }
                return Ok(v["result"].clone());
            }
        }
    }
}

pub fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').map(val).collect();
    bytes
        .chunks(4)
        .flat_map(|c| {
            let n = c
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, &v)| n | (v as u32) << (18 - 6 * i));
            let out = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
            out.into_iter().take(c.len() - 1)
        })
        .collect()
}

/// A new blank tab, attached with a flat session; its `sessionId`, with `Page` events enabled.
pub fn open_page(cdp: &mut Cdp) -> String {
    let target = cdp.call("Target.createTarget", json!({"url": "about:blank"}), None);
    let attached = cdp.call(
        "Target.attachToTarget",
        json!({"targetId": target["targetId"], "flatten": true}),
        None,
    );
    let page = attached["sessionId"]
        .as_str()
        .expect("attachToTarget gives a sessionId")
        .to_owned();
    cdp.call("Page.enable", json!({}), Some(&page));
    page
}
