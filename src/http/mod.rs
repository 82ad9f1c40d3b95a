//! The HTTP front: the only module that touches `tiny_http`.
//!
//! A fixed pool of threads pulls requests from one `tiny_http::Server`; each request becomes a
//! [`Ctx`], goes through [`router::dispatch`] inside `catch_unwind`, and its [`Reply`] is written
//! back here. Logging, timing, metrics and panic catching happen once, in [`handle`], not in
//! handlers. Handlers never see `tiny_http` types.

pub mod error;
pub mod router;

use std::collections::HashMap;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

pub use error::ApiError;

use crate::metrics::Metrics;
use crate::store::{self, DbPool};
use crate::writer::{Writer, WriterConfig};

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
    /// and stopping at `limit + 1` bytes when no length is declared.
    pub fn body(&mut self, limit: usize) -> Result<Vec<u8>, ApiError> {
        if let Some(len) = self.req.body_length() {
            if len > limit {
                return Err(ApiError::PayloadTooLarge(limit));
            }
        }
        let mut buf = Vec::with_capacity(self.req.body_length().unwrap_or(0).min(limit));
        self.req
            .as_reader()
            .take(limit as u64 + 1)
            .read_to_end(&mut buf)
            .map_err(|e| ApiError::InvalidJson(format!("cannot read body: {e}")))?;
        if buf.len() > limit {
            return Err(ApiError::PayloadTooLarge(limit));
        }
        Ok(buf)
    }
}

/// A running server: its address, and a way to stop it.
pub struct Running {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    server: Arc<tiny_http::Server>,
    threads: Vec<JoinHandle<()>>,
    app: Arc<App>,
    writer_thread: Option<JoinHandle<()>>,
    pipeline_thread: Option<JoinHandle<()>>,
}

impl Running {
    /// Stops accepting, finishes the requests already received, commits what the writer holds,
    /// stops the pipeline, and returns once all of it is done.
    pub fn shutdown(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for _ in 0..self.threads.len() {
            self.server.unblock();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.app.pipeline.stop();
        if let Some(t) = self.pipeline_thread.take() {
            let _ = t.join();
        }
        let Running {
            server,
            app,
            writer_thread,
            ..
        } = self;
        drop(server);
        // The writer thread ends once the last handle (inside `app`) is gone and its queue is empty.
        drop(app);
        if let Some(t) = writer_thread {
            let _ = t.join();
        }
    }
}

/// Opens the database, starts the writer, the pipeline and the request threads.
pub fn start(config: &ServeConfig) -> Result<Running, String> {
    let threads = config.threads.max(1);
    let pool = store::open_pool(&config.db, threads as u32 + 2).map_err(|e| e.to_string())?;
    let (writer, writer_thread) =
        Writer::start(&config.db, config.writer.clone()).map_err(|e| e.to_string())?;
    let listener = TcpListener::bind(&config.addr)
        .map_err(|e| format!("cannot listen on {}: {e}", config.addr))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server = Arc::new(
        tiny_http::Server::from_listener(listener, None)
            .map_err(|e| format!("cannot serve: {e}"))?,
    );
    let metrics = Metrics::default();
    let (pipeline, pipeline_thread) = if config.pipeline {
        let (w, t) =
            crate::pipeline::spawn(&config.db, metrics.clone()).map_err(|e| e.to_string())?;
        (w, Some(t))
    } else {
        (crate::pipeline::Waker::disabled(), None)
    };
    let app = Arc::new(App {
        pool,
        writer,
        metrics,
        key_touched: Mutex::new(HashMap::new()),
        pipeline,
    });
    let stop = Arc::new(AtomicBool::new(false));
    let next_id = Arc::new(AtomicU64::new(1));
    let mut handles = Vec::with_capacity(threads);
    for i in 0..threads {
        let (server, app, stop, next_id) =
            (server.clone(), app.clone(), stop.clone(), next_id.clone());
        let t = std::thread::Builder::new()
            .name(format!("http-{i}"))
            .spawn(move || serve_loop(&server, &app, &stop, &next_id))
            .map_err(|e| e.to_string())?;
        handles.push(t);
    }
    Ok(Running {
        addr,
        stop,
        server,
        threads: handles,
        app,
        writer_thread: Some(writer_thread),
        pipeline_thread,
    })
}

fn serve_loop(server: &tiny_http::Server, app: &App, stop: &AtomicBool, next_id: &AtomicU64) {
    loop {
        match server.recv() {
            Ok(rq) => handle(app, rq, next_id.fetch_add(1, Ordering::Relaxed)),
            Err(e) => {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                log::error!("accept loop failed: {e}");
                // tiny_http's accept thread has ended; without it nothing more arrives.
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}

/// Runs one request through the router, with the access log, metrics and panic catching.
fn handle(app: &App, rq: tiny_http::Request, request_id: u64) {
    let started = Instant::now();
    let method = rq.method().as_str().to_owned();
    let raw_url = rq.url().to_owned();
    let (path, query) = match raw_url.split_once('?') {
        Some((p, q)) => (p.to_owned(), q.to_owned()),
        None => (raw_url.clone(), String::new()),
    };
    let segments = path
        .trim_start_matches('/')
        .split('/')
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    let mut ctx = Ctx {
        req: rq,
        method,
        segments,
        query,
        request_id,
    };
    let mut route = "unknown";
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        router::dispatch(app, &mut ctx, &mut route)
    }));
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
    let mut response = tiny_http::Response::from_data(reply.body).with_status_code(status);
    for (name, value) in reply.headers {
        if let Ok(h) = tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            response.add_header(h);
        }
    }
    if let Ok(h) =
        tiny_http::Header::from_bytes(&b"X-Request-Id"[..], request_id.to_string().as_bytes())
    {
        response.add_header(h);
    }
    let Ctx { req, method, .. } = ctx;
    if let Err(e) = req.respond(response) {
        log::debug!("request {request_id}: cannot write response: {e}");
    }
    let elapsed = started.elapsed();
    app.metrics.observe_request(route, status, elapsed);
    log::info!(
        target: "access",
        "{request_id} {method} {path} {status} {:.3}ms",
        elapsed.as_secs_f64() * 1000.0
    );
}
