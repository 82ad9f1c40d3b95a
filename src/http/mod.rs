//! The HTTP front: the only module that touches `tiny_http`.
//!
//! A fixed pool of threads pulls requests from one `tiny_http::Server`; each request becomes a
//! [`Ctx`], goes through [`router::dispatch`] inside `catch_unwind`, and its [`Reply`] is written
//! back here. Logging, timing, metrics and panic catching happen once, in [`handle`], not in
//! handlers. Handlers never see `tiny_http` types.

pub mod conn;
pub mod error;
pub mod front;
pub mod router;

use std::collections::HashMap;
use std::io::Read;
use std::net::{Shutdown, SocketAddr, TcpListener};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use error::ApiError;

use crate::checkpoint::Checkpointer;
use crate::metrics::Metrics;
use crate::store::{self, DbPool};
use crate::writer::{Writer, WriterConfig};
use conn::{Limits, Phase, Registry, Supervisor};
use front::{Front, Incoming};

/// Largest request head (request line plus header lines) answered normally; more is 431.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Largest declared body any request may have, whatever its route: above this, the request is
/// answered `413 PAYLOAD_TOO_LARGE` before it reaches a handler, and its connection is closed (see
/// [`handle`]). No route takes bodies anywhere near this size; routes that ignore their body would
/// otherwise answer normally and leave tiny_http to discard it.
pub const MAX_DECLARED_BODY: usize = 16 * 1024 * 1024;

/// Largest unread body left for tiny_http to drain so the connection can stay open: the client
/// finishes sending and reads its answer (a client still writing a body that the server stopped
/// reading gets a broken pipe instead of the 413). Larger unread bodies close the connection.
pub const LINGER_BYTES: usize = 1024 * 1024;

/// Everything a handler may use: the read pool, the writer, metrics and limits.
pub struct App {
    pub pool: DbPool,
    pub writer: Writer,
    pub metrics: Metrics,
    /// Keys whose `lastUsedAt` we wrote recently (key id -> epoch ms), to write at most once a minute.
    pub key_touched: Mutex<HashMap<String, i64>>,
    /// Wakes the pipeline worker when new work is committed.
    pub pipeline: crate::pipeline::Waker,
}

/// What `convapi serve` runs with.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub addr: String,
    pub threads: usize,
    pub db: PathBuf,
    pub writer: WriterConfig,
    /// Run the background pipeline (tests switch it off to drive it by hand).
    pub pipeline: bool,
    /// Connection limits enforced around tiny_http.
    pub limits: Limits,
}

/// An HTTP response, built by handlers and written by the server loop.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(status: u16, body: &serde_json::Value) -> Reply {
        Reply {
            status,
            headers: vec![("Content-Type", "application/json".into())],
            body: serde_json::to_vec(body).expect("a JSON value serialises"),
        }
    }

    pub fn bytes(status: u16, content_type: &str, body: Vec<u8>) -> Reply {
        Reply {
            status,
            headers: vec![("Content-Type", content_type.into())],
            body,
        }
    }

    /// The tiny_http response for this reply, tagged with `X-Request-Id`.
    pub fn into_response(self, request_id: u64) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
        let mut response = tiny_http::Response::from_data(self.body).with_status_code(self.status);
        let request_id = request_id.to_string();
        let headers = self.headers.iter().map(|(n, v)| (*n, v.as_str()));
        for (name, value) in headers.chain([("X-Request-Id", request_id.as_str())]) {
            if let Ok(h) = tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()) {
                response.add_header(h);
            }
        }
        response
    }

    pub fn header(mut self, name: &'static str, value: &str) -> Reply {
        self.headers.push((name, value.to_owned()));
        self
    }
}

/// One request as handlers see it.
pub struct Ctx {
    req: tiny_http::Request,
    pub method: String,
    /// Percent-decoded path segments, without the leading empty one.
    pub segments: Vec<String>,
    pub query: String,
    pub request_id: u64,
    registry: Arc<Registry>,
    /// The body was read to its end (nothing left for tiny_http to drain).
    body_done: bool,
}

impl Ctx {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.req
            .headers()
            .iter()
            .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str())
    }

    /// Reads the body, refusing (413) without reading it when the declared length exceeds `limit`,
    /// and stopping at `limit + 1` bytes when no length is declared. A body that is not read to its
    /// end makes the server close the connection after the response instead of draining it.
    pub fn body(&mut self, limit: usize) -> Result<Vec<u8>, ApiError> {
        if let Some(len) = self.req.body_length() {
            if len > limit {
                return Err(ApiError::PayloadTooLarge(limit));
            }
        }
        self.registry.phase(self.request_id, Phase::Body);
        let mut buf = Vec::with_capacity(self.req.body_length().unwrap_or(0).min(limit));
        let read = self
            .req
            .as_reader()
            .take(limit as u64 + 1)
            .read_to_end(&mut buf);
        self.registry.phase(self.request_id, Phase::Handling);
        read.map_err(|e| ApiError::InvalidJson(format!("cannot read body: {e}")))?;
        if buf.len() > limit {
            return Err(ApiError::PayloadTooLarge(limit));
        }
        self.body_done = true;
        Ok(buf)
    }
}

/// A running server: its address, and a way to stop it.
pub struct Running {
    pub addr: SocketAddr,
    front: Arc<Front>,
    supervisor: Arc<Supervisor>,
    supervisor_thread: Option<JoinHandle<()>>,
    threads: Vec<JoinHandle<()>>,
    app: Arc<App>,
    writer_thread: Option<JoinHandle<()>>,
    pipeline_thread: Option<JoinHandle<()>>,
    checkpointer: Checkpointer,
}

impl Running {
    /// Stops accepting, finishes the requests already received, commits what the writer holds,
    /// stops the pipeline, and returns once all of it is done.
    pub fn shutdown(mut self) {
        self.front.stop();
        // The channel is closed now: workers finish what it holds and end.
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.supervisor.stop();
        if let Some(t) = self.supervisor_thread.take() {
            let _ = t.join();
        }
        self.app.pipeline.stop();
        if let Some(t) = self.pipeline_thread.take() {
            let _ = t.join();
        }
        let Running {
            app,
            writer_thread,
            checkpointer,
            ..
        } = self;
        // The writer thread ends once the last handle (inside `app`) is gone and its queue is empty.
        drop(app);
        if let Some(t) = writer_thread {
            let _ = t.join();
        }
        // Last: one more checkpoint once nothing else writes.
        drop(checkpointer);
    }
}

/// What a worker needs besides the app.
struct Worker {
    app: Arc<App>,
    registry: Arc<Registry>,
    supervisor: Arc<Supervisor>,
    front: Arc<Front>,
}

/// Opens the database, starts the writer, the pipeline, the accept side and the request threads.
pub fn start(config: &ServeConfig) -> Result<Running, String> {
    let threads = config.threads.max(1);
    let pool = store::open_pool(&config.db, threads as u32 + 2).map_err(|e| e.to_string())?;
    let (writer, writer_thread) =
        Writer::start(&config.db, config.writer.clone()).map_err(|e| e.to_string())?;
    let checkpointer =
        Checkpointer::start(&config.db, writer.catch_up()).map_err(|e| e.to_string())?;
    let listener = TcpListener::bind(&config.addr)
        .map_err(|e| format!("cannot listen on {}: {e}", config.addr))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let metrics = Metrics::default();
    let (pipeline, pipeline_thread) = if config.pipeline {
        let (w, t) = crate::pipeline::spawn(&config.db, metrics.clone(), writer.clone())
            .map_err(|e| e.to_string())?;
        (w, Some(t))
    } else {
        (crate::pipeline::Waker::disabled(), None)
    };
    let app = Arc::new(App {
        pool,
        writer,
        metrics: metrics.clone(),
        key_touched: Mutex::new(HashMap::new()),
        pipeline,
    });
    let registry = Arc::new(Registry::default());
    let supervisor = Arc::new(
        Supervisor::new(
            addr,
            config.limits.clone(),
            registry.clone(),
            metrics.clone(),
        )
        .map_err(|e| format!("cannot supervise connections: {e}"))?,
    );
    let supervisor_thread = supervisor.spawn().map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel::<Incoming>();
    // A retired generation may end once nothing can arrive from it any more: every connection
    // quiet for the idle timeout has been shut down by then (plus a scan period, plus slack).
    let drain_quiet =
        config.limits.idle_timeout + config.limits.scan_every * 2 + Duration::from_secs(1);
    let front = Front::start(listener, tx, registry.clone(), metrics, drain_quiet)?;
    let rx = Arc::new(Mutex::new(rx));
    let mut handles = Vec::with_capacity(threads);
    for i in 0..threads {
        let w = Worker {
            app: app.clone(),
            registry: registry.clone(),
            supervisor: supervisor.clone(),
            front: front.clone(),
        };
        let rx = rx.clone();
        let t = std::thread::Builder::new()
            .name(format!("http-{i}"))
            .spawn(move || serve_loop(&w, &rx))
            .map_err(|e| e.to_string())?;
        handles.push(t);
    }
    Ok(Running {
        addr,
        front,
        supervisor,
        supervisor_thread: Some(supervisor_thread),
        threads: handles,
        app,
        writer_thread: Some(writer_thread),
        pipeline_thread,
        checkpointer,
    })
}

fn serve_loop(w: &Worker, rx: &Mutex<Receiver<Incoming>>) {
    loop {
        let next = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
        match next {
            Ok(inc) => {
                let id = inc.id;
                // `handle` catches panics itself; this one is the last line of defence so that a
                // worker never dies and a request never stays registered.
                let _ = catch_unwind(AssertUnwindSafe(|| handle(w, inc)));
                w.registry.end(id);
            }
            Err(_) => return,
        }
    }
}

/// The percent-decoded segments of a request path, without the leading empty one. Public so that
/// the benchmark's no-op server (`examples/noop_server.rs`) splits paths exactly this way.
pub fn path_segments(path: &str) -> Vec<String> {
    path.trim_start_matches('/')
        .split('/')
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect()
}

/// Size of the request head as the client sent it (request line and header lines).
fn head_bytes(rq: &tiny_http::Request) -> usize {
    let line = rq.method().as_str().len() + rq.url().len() + 12;
    rq.headers()
        .iter()
        .map(|h| h.field.as_str().as_str().len() + h.value.as_str().len() + 4)
        .sum::<usize>()
        + line
}

/// Runs one request through the router, with the access log, metrics and panic catching, and
/// decides whether the connection stays open afterwards.
fn handle(w: &Worker, inc: Incoming) {
    let started = Instant::now();
    let app = &*w.app;
    let Incoming {
        rq,
        id: request_id,
        generation,
    } = inc;
    w.registry.phase(request_id, Phase::Handling);
    let _in_flight = app.metrics.in_flight();
    let peer = rq.remote_addr().copied();
    let method = rq.method().as_str().to_owned();
    let raw_url = rq.url().to_owned();
    let (path, query) = match raw_url.split_once('?') {
        Some((p, q)) => (p.to_owned(), q.to_owned()),
        None => (raw_url.clone(), String::new()),
    };
    let segments = path_segments(&path);
    // Bodies of up to 1 KiB are read by tiny_http before we see the request: nothing to drain.
    let small_body = rq.body_length().is_some_and(|n| n <= 1024);
    let head_too_large = head_bytes(&rq) > MAX_HEAD_BYTES;
    // Refused on every route, even one that never reads its body: the body is left unread, so the
    // connection is closed below (`unread_large`).
    let body_too_large = rq.body_length().is_some_and(|n| n > MAX_DECLARED_BODY);
    let mut ctx = Ctx {
        req: rq,
        method,
        segments,
        query,
        request_id,
        registry: w.registry.clone(),
        body_done: small_body,
    };
    let mut route = "unknown";
    let outcome = if head_too_large {
        Ok(Err(ApiError::HeadersTooLarge))
    } else if body_too_large {
        Ok(Err(ApiError::PayloadTooLarge(MAX_DECLARED_BODY)))
    } else {
        catch_unwind(AssertUnwindSafe(|| {
            router::dispatch(app, &mut ctx, &mut route)
        }))
    };
    let reply = match outcome {
        Ok(Ok(reply)) => reply,
        Ok(Err(err)) => {
            if let Some(detail) = err.detail() {
                log::warn!("request {request_id}: {} {}: {detail}", ctx.method, path);
            }
            err.to_reply()
        }
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            log::error!(
                "request {request_id}: {} {}: handler panicked: {msg}",
                ctx.method,
                path
            );
            ApiError::Internal(msg).to_reply()
        }
    };
    let status = reply.status;
    // Close instead of keeping the connection when a large or chunked body was left unread
    // (tiny_http would read and discard all of it first; a small one is drained, bounded by the
    // supervisor's transfer timeout), when the head was refused, and when the request came through
    // a retired accept generation (so that the generation drains).
    let unread_large = !ctx.body_done
        && match ctx.req.body_length() {
            Some(n) => n > LINGER_BYTES,
            None => ctx.header("Transfer-Encoding").is_some(),
        };
    let retired = generation != w.front.current_generation();
    let close = unread_large || head_too_large || retired;
    if close {
        log::debug!(
            "request {request_id}: closing the connection (unread body: {unread_large}, \
             head too large: {head_too_large}, retired accept generation: {retired})"
        );
    }
    let response = reply.into_response(request_id);
    let Ctx { req, method, .. } = ctx;
    w.registry.phase(request_id, Phase::Writing);
    if close {
        if let Some(peer) = peer {
            // Reads now end at what already arrived, so tiny_http's drain stops there.
            w.supervisor.shutdown_peer(peer, Shutdown::Read);
        }
    }
    // Responding drops the request, which drains the unread body (through a bounded buffer in the
    // vendored tiny_http, vendor/tiny_http/PATCHES.md); a panic there must not take the worker.
    match catch_unwind(AssertUnwindSafe(|| req.respond(response))) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => log::debug!("request {request_id}: cannot write response: {e}"),
        Err(_) => log::warn!("request {request_id}: tiny_http panicked finishing the request"),
    }
    if close {
        if let Some(peer) = peer {
            w.supervisor.shutdown_peer(peer, Shutdown::Both);
        }
    }
    let elapsed = started.elapsed();
    app.metrics.observe_request(route, status, elapsed);
    log::info!(
        target: "access",
        "{request_id} {method} {path} {status} {:.3}ms",
        elapsed.as_secs_f64() * 1000.0
    );
}
