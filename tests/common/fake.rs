//! A fake ad platform on 127.0.0.1 for the forwarding tests: an HTTP server in a thread of the
//! test that records every request it gets and answers each as the test's handler says — the
//! platform's documented answers, an error, a wait, or a dropped connection. The platform modules'
//! tests (`forward_*.rs`) put their platform's rules in the handler; nothing here knows one.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// Path and query, as sent.
    pub url: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn path(&self) -> &str {
        self.url.split('?').next().unwrap_or(&self.url)
    }

    /// A query parameter, percent-decoded.
    pub fn query(&self, key: &str) -> Option<String> {
        let q = self.url.split_once('?')?.1;
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    }

    /// The body as JSON (panics when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("request body is not JSON ({e}): {}", self.body))
    }

    /// The body's form fields (`application/x-www-form-urlencoded`).
    pub fn form(&self, key: &str) -> Option<String> {
        form_urlencoded::parse(self.body.as_bytes())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    }
}

/// How the fake answers one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Status, JSON body, extra headers.
    Json(u16, serde_json::Value, Vec<(String, String)>),
    /// Waits this long before answering 200 `{}` (a platform too slow to answer in time).
    Hang(Duration),
    /// Closes the connection without an answer.
    Drop,
}

impl Reply {
    pub fn ok(body: serde_json::Value) -> Reply {
        Reply::Json(200, body, Vec::new())
    }

    pub fn status(status: u16, body: serde_json::Value) -> Reply {
        Reply::Json(status, body, Vec::new())
    }
}

type Handler = Box<dyn FnMut(&Recorded) -> Reply + Send>;

/// A fake platform; stops when dropped.
pub struct FakePlatform {
    pub port: u16,
    requests: Arc<Mutex<Vec<Recorded>>>,
    handler: Arc<Mutex<Handler>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakePlatform {
    /// Starts a fake answering every request with `handler`.
    pub fn start(handler: impl FnMut(&Recorded) -> Reply + Send + 'static) -> FakePlatform {
        let server =
            Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind a fake platform"));
        let port = server.server_addr().to_ip().expect("an IP address").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Mutex<Handler>> = Arc::new(Mutex::new(Box::new(handler)));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, h, s) = (requests.clone(), handler.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                let Ok(Some(mut req)) = server.recv_timeout(Duration::from_millis(50)) else {
                    continue;
                };
                let mut body = String::new();
                let read = req.as_reader().take(16 << 20).read_to_string(&mut body);
                // A body cut short (the sender killed mid-write, as the crash tests do) never
                // reaches a real platform's handler either: neither recorded nor answered.
                let whole = req.body_length().is_none_or(|n| n == body.len());
                if read.is_err() || !whole {
                    continue;
                }
                let rec = Recorded {
                    method: req.method().to_string(),
                    url: req.url().to_string(),
                    headers: req
                        .headers()
                        .iter()
                        .map(|h| {
                            (
                                h.field.as_str().as_str().to_ascii_lowercase(),
                                h.value.as_str().to_string(),
                            )
                        })
                        .collect(),
                    body,
                };
                r.lock().unwrap().push(rec.clone());
                let reply = (h.lock().unwrap())(&rec);
                // Each answer in a thread of its own, so a hanging one does not hold up the next.
                std::thread::spawn(move || match reply {
                    Reply::Json(status, body, headers) => {
                        let mut resp = tiny_http::Response::from_string(body.to_string())
                            .with_status_code(status)
                            .with_header(
                                tiny_http::Header::from_bytes("Content-Type", "application/json")
                                    .unwrap(),
                            );
                        for (k, v) in headers {
                            resp.add_header(
                                tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()).unwrap(),
                            );
                        }
                        let _ = req.respond(resp);
                    }
                    Reply::Hang(d) => {
                        std::thread::sleep(d);
                        let _ = req.respond(tiny_http::Response::from_string("{}"));
                    }
                    Reply::Drop => drop(req.into_writer()),
                });
            }
        });
        FakePlatform {
            port,
            requests,
            handler,
            stop,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:<port>`: a destination's endpoint override.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Answers from now on with `handler`.
    pub fn set(&self, handler: impl FnMut(&Recorded) -> Reply + Send + 'static) {
        *self.handler.lock().unwrap() = Box::new(handler);
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    /// Waits until `pred` holds of the requests so far (at most `within`); returns them.
    pub fn wait_for(&self, within: Duration, pred: impl Fn(&[Recorded]) -> bool) -> Vec<Recorded> {
        let end = Instant::now() + within;
        loop {
            let reqs = self.requests();
            if pred(&reqs) {
                return reqs;
            }
            assert!(
                Instant::now() < end,
                "the fake platform did not get what the test waited for within {within:?}; it got {} requests: {:#?}",
                reqs.len(),
                reqs.iter().rev().take(3).collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for FakePlatform {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
