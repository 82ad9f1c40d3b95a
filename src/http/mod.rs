//! The HTTP front: the only module that touches `tiny_http`. A library: it serves whatever
//! [`Service`] it is handed and knows nothing of the handlers, the database or the pipeline.
//!
//! Accepting is `front.rs` (tiny_http servers on clones of one listener, whose connection threads
//! queue each request they read in its lane, `lanes.rs`); a fixed pool of request threads takes
//! requests from the lanes, turns each into a [`Ctx`], calls [`Service::handle`] inside
//! `catch_unwind`, and hands the [`Reply`] to the request's connection, whose own thread writes it
//! (one request per connection at a time: a request thread never waits on a client). Logging,
//! timing, metrics and panic catching happen once, in [`handle`], not in handlers; so do the
//! request id ([`request_id`]), sent back as `X-Request-Id` and in every log line about the
//! request, and the client's address behind trusted proxies ([`client_address`], `Ctx::client`).
//! `supervisor.rs` (with `registry.rs` and the system calls of `sys.rs`) enforces the connection
//! limits tiny_http lacks: from outside on Linux, through the vendored tiny_http's own bounds
//! elsewhere (see its module doc). Handlers never see `tiny_http` types.

mod front;
mod lanes;
mod registry;
mod supervisor;
mod sys;

use std::io::Read;
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::metrics::Metrics;
use front::Front;
pub use lanes::{reserved_threads, Lane};
use lanes::{Incoming, Lanes};
use registry::{Phase, Registry};
pub use supervisor::Limits;
use supervisor::Supervisor;

/// Largest request head (request line plus header lines) answered normally; more is 431.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Largest declared body any request may have, whatever its route: above this, the request is
/// answered `413` before it reaches the service, and its connection is closed (see [`handle`]).
/// No route takes bodies anywhere near this size; routes that ignore their body would otherwise
/// answer normally and leave tiny_http to discard it.
pub const MAX_DECLARED_BODY: usize = 16 * 1024 * 1024;

/// Largest unread body left for tiny_http to drain so the connection can stay open: the client
/// finishes sending and reads its answer (a client still writing a body that the server stopped
/// reading gets a broken pipe instead of the 413). Larger unread bodies close the connection.
pub const LINGER_BYTES: usize = 1024 * 1024;

/// Largest body read by tiny_http, on the connection's own thread, before the request is handed
/// to a request thread (`vendor/tiny_http/PATCHES.md`): the largest body any route takes, so that
/// no request thread waits on a client sending its body. A larger declared body is refused by its
/// length without being read; a chunked one is handed over with this much read.
pub const PREREAD_BODY_LIMIT: usize = 256 * 1024;

/// Longest `X-Request-Id` a client may choose (see [`request_id`]).
pub const MAX_REQUEST_ID: usize = 128;

/// What the application behind the front answers with.
pub trait Service: Send + Sync + 'static {
    /// The lane a request waits in for a request thread (see `lanes.rs`), from its method and
    /// path (without the query), before anything else of it is looked at.
    fn lane(&self, method: &str, path: &str) -> Lane;
    /// Answers one request.
    fn handle(&self, ctx: &mut Ctx) -> Handled;
    /// The answer to a request the front refuses or loses on its own, without the request (the
    /// supervisor writes it raw to a connection whose head never ends).
    fn refusal(&self, why: Refusal) -> Reply;
    /// The same answer to a request in hand, with what the access log says about it.
    fn refused(&self, why: Refusal) -> Handled;
}

/// A service's answer to one request.
pub struct Handled {
    pub reply: Reply,
    /// The route's name, for the access log and metrics (`"unknown"` when none matched).
    pub route: &'static str,
    /// The error code of an error answer, for the access log.
    pub code: Option<&'static str>,
}

/// Requests the front answers without the service's handlers.
#[derive(Debug)]
pub enum Refusal {
    /// The request head is over [`MAX_HEAD_BYTES`] (also written by the supervisor, raw, to a
    /// connection that never completes its head).
    HeadTooLarge,
    /// The declared body is over the given limit.
    BodyTooLarge(usize),
    /// The handler panicked; the message is for the log only.
    Panicked(String),
}

/// Why [`Ctx::body`] returned no body.
#[derive(Debug)]
pub enum BodyError {
    /// Over the given limit (declared, or found while reading).
    TooLarge(usize),
    /// The client sent less than it declared, or the connection failed.
    Unreadable(String),
}

/// What [`serve`] runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub addr: String,
    /// Request threads.
    pub threads: usize,
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
    fn into_response(self, request_id: &str) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
        let mut response = tiny_http::Response::from_data(self.body).with_status_code(self.status);
        let headers = self.headers.iter().map(|(n, v)| (*n, v.as_str()));
        for (name, value) in headers.chain([("X-Request-Id", request_id)]) {
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
    /// The path as the client sent it, without the query.
    pub path: String,
    /// Path segments as sent (see [`path_segments`]).
    pub segments: Vec<String>,
    pub query: String,
    /// The id in `X-Request-Id` and in every log line about the request (see [`request_id`]).
    pub request_id: String,
    /// The registry's number for the request (the supervisor's view of it).
    flight: u64,
    /// The connection's peer (a reverse proxy's address when there is one).
    pub peer: Option<SocketAddr>,
    /// The client behind the request: the peer, or behind a trusted proxy the address it
    /// forwarded ([`client_address`]). The pixel's rate limits, the login throttle and the access
    /// log all go by it.
    pub client: Option<IpAddr>,
    registry: Arc<Registry>,
    /// The body was read to its end (nothing left for tiny_http to drain).
    body_done: bool,
}

/// A file compiled into the binary, answered with a strong `ETag` (the first 8 bytes of its
/// SHA-256, computed on first use): `304` without a body when the request's `If-None-Match` names
/// the tag (or `*`), else `200` with the file; both with a public `Cache-Control` of `max_age`.
pub struct StaticFile {
    body: &'static str,
    content_type: &'static str,
    max_age: u32,
    tag: std::sync::OnceLock<String>,
}

impl StaticFile {
    pub const fn new(body: &'static str, content_type: &'static str, max_age: u32) -> StaticFile {
        StaticFile {
            body,
            content_type,
            max_age,
            tag: std::sync::OnceLock::new(),
        }
    }

    pub fn reply(&self, ctx: &Ctx) -> Reply {
        let tag = self.tag.get_or_init(|| {
            use sha2::{Digest, Sha256};
            let digest = Sha256::digest(self.body.as_bytes());
            let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
            format!("\"{hex}\"")
        });
        let fresh = ctx
            .header("If-None-Match")
            .is_some_and(|h| h.split(',').any(|t| t.trim() == tag || t.trim() == "*"));
        let reply = if fresh {
            Reply {
                status: 304,
                headers: Vec::new(),
                body: Vec::new(),
            }
        } else {
            Reply::bytes(200, self.content_type, self.body.as_bytes().to_vec())
        };
        reply.header("ETag", tag).header(
            "Cache-Control",
            &format!("public, max-age={}", self.max_age),
        )
    }
}

impl Ctx {
    /// `request ID: METHOD PATH`: how a handler's log line names the request it is about.
    pub fn label(&self) -> String {
        format!("request {}: {} {}", self.request_id, self.method, self.path)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.req
            .headers()
            .iter()
            .find(|h| h.field.as_str().as_str().eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str())
    }

    /// Reads the body, refusing without reading it when the declared length exceeds `limit`, and
    /// stopping at `limit + 1` bytes when no length is declared. A body that is not read to its
    /// end makes the server close the connection after the response instead of draining it.
    pub fn body(&mut self, limit: usize) -> Result<Vec<u8>, BodyError> {
        if let Some(len) = self.req.body_length() {
            if len > limit {
                return Err(BodyError::TooLarge(limit));
            }
        }
        self.registry.phase(self.flight, Phase::Body);
        let mut buf = Vec::with_capacity(self.req.body_length().unwrap_or(0).min(limit));
        let read = self
            .req
            .as_reader()
            .take(limit as u64 + 1)
            .read_to_end(&mut buf);
        self.registry.phase(self.flight, Phase::Handling);
        read.map_err(|e| BodyError::Unreadable(e.to_string()))?;
        if buf.len() > limit {
            return Err(BodyError::TooLarge(limit));
        }
        self.body_done = true;
        Ok(buf)
    }
}

/// A running front: its address, and a way to stop it.
pub struct Server {
    pub addr: SocketAddr,
    front: Arc<Front>,
    supervisor: Arc<Supervisor>,
    supervisor_thread: Option<JoinHandle<()>>,
    threads: Vec<JoinHandle<()>>,
    registry: Arc<Registry>,
    /// Longest wait, when stopping, for bodies tiny_http is still reading.
    body_drain: Duration,
}

impl Server {
    /// Stops accepting, waits (at most the idle timeout) for bodies tiny_http is still reading,
    /// finishes the requests received, and returns once every request thread has ended.
    pub fn stop(mut self) {
        self.front.stop_accepting();
        // A request whose body tiny_http is still reading was received as much as one a request
        // thread holds: it is served too. The supervisor cuts off clients below the minimum rate;
        // the wait is bounded for those above it.
        let deadline = Instant::now() + self.body_drain;
        while self.registry.bodies_in_transit() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.front.stop();
        // The lanes are closed now: workers finish what they hold and end.
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.supervisor.stop();
        if let Some(t) = self.supervisor_thread.take() {
            let _ = t.join();
        }
    }
}

/// What a request thread needs.
struct Worker {
    service: Arc<dyn Service>,
    /// `Limits::trusted_proxies`: whose `X-Forwarded-For` names the client.
    trusted_proxies: Arc<[ipnet::IpNet]>,
    metrics: Metrics,
    registry: Arc<Registry>,
    supervisor: Arc<Supervisor>,
    front: Arc<Front>,
}

/// Why the HTTP front did not start.
#[derive(Debug)]
pub enum StartError {
    /// The address cannot be listened on: taken, not an address of this machine, not permitted.
    Listen { addr: String, error: std::io::Error },
    /// A thread, the listener's clone or the connection supervision could not be set up.
    Setup(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Listen { addr, error } => write!(f, "cannot listen on {addr}: {error}"),
            StartError::Setup(why) => f.write_str(why),
        }
    }
}

/// Binds `config.addr` and serves `service` on it with `config.threads` request threads.
pub fn serve(
    config: &Config,
    service: Arc<dyn Service>,
    metrics: Metrics,
) -> Result<Server, StartError> {
    let threads = config.threads.max(1);
    let listener = TcpListener::bind(&config.addr).map_err(|error| StartError::Listen {
        addr: config.addr.clone(),
        error,
    })?;
    let setup = |what: &str| {
        let what = what.to_owned();
        move |e: std::io::Error| StartError::Setup(format!("{what}: {e}"))
    };
    sys::widen_backlog(&listener).map_err(setup("the listener's accept queue"))?;
    let addr = listener
        .local_addr()
        .map_err(setup("the listener's address"))?;
    let registry = Arc::new(Registry::default());
    let supervisor = Arc::new(
        Supervisor::new(
            addr,
            config.limits.clone(),
            registry.clone(),
            metrics.clone(),
            &service.refusal(Refusal::HeadTooLarge),
        )
        .map_err(setup("cannot supervise connections"))?,
    );
    let supervisor_thread = supervisor
        .spawn()
        .map_err(setup("cannot start the supervisor"))?;
    let lanes = Arc::new(Lanes::new(threads, metrics.clone()));
    let classifier = service.clone();
    let classify: front::Classify =
        Arc::new(move |method: &str, path: &str| classifier.lane(method, path));
    // A retired generation may end once nothing can arrive from it any more: every connection
    // quiet for the idle timeout has been shut down by then (plus a scan period, plus slack).
    let drain_quiet =
        config.limits.idle_timeout + config.limits.scan_every * 2 + Duration::from_secs(1);
    let on_head = registry.clone();
    let mut options = tiny_http::ServerOptions {
        preread_body_limit: PREREAD_BODY_LIMIT,
        // One request per connection in our hands at a time, its answer written by the
        // connection's own thread (vendor/tiny_http/PATCHES.md 19).
        answers_on_connection: true,
        on_head: Some(Arc::new(move |peer| on_head.head_read(peer))),
        ..tiny_http::ServerOptions::default()
    };
    // Off Linux (or with `portable-supervision`), tiny_http keeps the connection bounds itself.
    supervisor.configure(&mut options);
    let front = Front::start(
        listener,
        lanes.clone(),
        classify,
        registry.clone(),
        metrics.clone(),
        drain_quiet,
        options,
    )
    .map_err(setup("cannot start accepting"))?;
    let trusted_proxies: Arc<[ipnet::IpNet]> = config.limits.trusted_proxies.clone().into();
    let mut handles = Vec::with_capacity(threads);
    for i in 0..threads {
        let w = Worker {
            service: service.clone(),
            trusted_proxies: trusted_proxies.clone(),
            metrics: metrics.clone(),
            registry: registry.clone(),
            supervisor: supervisor.clone(),
            front: front.clone(),
        };
        let lanes = lanes.clone();
        let t = std::thread::Builder::new()
            .name(format!("http-{i}"))
            .spawn(move || serve_loop(&w, &lanes))
            .map_err(setup("cannot start a request thread"))?;
        handles.push(t);
    }
    Ok(Server {
        addr,
        front,
        supervisor,
        supervisor_thread: Some(supervisor_thread),
        threads: handles,
        registry,
        body_drain: config.limits.idle_timeout,
    })
}

fn serve_loop(w: &Worker, lanes: &Lanes) {
    while let Some((lane, inc)) = lanes.pop() {
        // `handle` catches panics itself; this one is the last line of defence so that a
        // worker never dies and a lane slot is never lost. The request leaves the registry when
        // its connection has written the answer (even the 500 of a request dropped in a panic).
        let _ = catch_unwind(AssertUnwindSafe(|| handle(w, inc)));
        lanes.done(lane);
    }
}

/// The segments of a request path as sent, without the leading `/`: `/a//b` is `["a", "", "b"]`.
/// Routes match these literally, so `/%6detrics` and `//metrics` are not `/metrics` (a proxy in
/// front that guards one spelling must not be walked around by another); parameters are
/// percent-decoded with [`decode_segment`] by whoever takes them.
fn path_segments(path: &str) -> Vec<String> {
    path.strip_prefix('/')
        .unwrap_or(path)
        .split('/')
        .map(str::to_owned)
        .collect()
}

/// A path segment with its percent-encoding decoded, or `Err` when the bytes it decodes to are
/// not UTF-8. Never replaced: `x%FFy` is not `x\u{FFFD}y`, and `M%FCller` (Latin-1) is not
/// "Müller", so a parameter must be refused rather than used to look up, or erase, someone else.
pub fn decode_segment(segment: &str) -> Result<String, std::str::Utf8Error> {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .map(std::borrow::Cow::into_owned)
}

/// The client's address: the peer's, unless the peer is a trusted proxy; then the right-most
/// address of `X-Forwarded-For` that is not itself a trusted proxy (each proxy appends the address
/// it received the request from, so entries left of the first untrusted one are the client's own
/// claims). An unparsable entry ends the walk at the last trusted hop.
pub fn client_address(
    peer: IpAddr,
    forwarded_for: Option<&str>,
    trusted: &[ipnet::IpNet],
) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let mut client = peer;
    for hop in forwarded_for.unwrap_or("").rsplit(',') {
        match hop.trim().parse::<IpAddr>() {
            Ok(ip) => {
                client = ip;
                if !is_trusted(&ip) {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    client
}

/// The id of a request: the client's `X-Request-Id` when it is well-formed, 1 to
/// [`MAX_REQUEST_ID`] characters of `A-Z a-z 0-9 . _ : -` (so that a proxy's or a client's id ties
/// its logs to ours), else a fresh UUIDv7 (time-ordered: ids sort by arrival). The id is echoed in
/// a header and written into log lines, so anything that could end either, or be taken for markup
/// or a field separator, is refused rather than escaped.
pub fn request_id(incoming: Option<&str>) -> String {
    match incoming {
        Some(id) if well_formed_request_id(id) => id.to_owned(),
        _ => uuid::Uuid::now_v7().hyphenated().to_string(),
    }
}

fn well_formed_request_id(id: &str) -> bool {
    (1..=MAX_REQUEST_ID).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
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

/// Runs one request through the service, with the access log, metrics and panic catching, and
/// decides whether the connection stays open afterwards.
fn handle(w: &Worker, inc: Incoming) {
    let started = Instant::now();
    let Incoming {
        rq,
        id: flight,
        generation,
    } = inc;
    w.registry.phase(flight, Phase::Handling);
    let _in_flight = w.metrics.in_flight();
    let (mut ctx, refusal) = context(w, rq, flight);
    let head_too_large = matches!(refusal, Some(Refusal::HeadTooLarge));
    let Handled { reply, route, code } = run_service(w, &mut ctx, refusal);
    let status = reply.status;
    let (peer, client) = (ctx.peer, ctx.client);
    let Answered {
        method,
        path,
        request_id,
    } = answer(w, ctx, reply, generation, head_too_large);
    let elapsed = started.elapsed();
    w.metrics.observe_request(route, status, elapsed);
    access_log(&Access {
        request_id: &request_id,
        client,
        peer: peer.map(|p| p.ip()),
        method: &method,
        path: &path,
        status,
        code,
        elapsed,
    });
}

/// The request's context for the service, and the refusal its head earns before any handler: a
/// head over `MAX_HEAD_BYTES`, or a declared body over `MAX_DECLARED_BODY` (refused on every
/// route, even one that never reads its body: the body is left unread, so the connection is
/// closed, see [`answer`]).
fn context(w: &Worker, rq: tiny_http::Request, flight: u64) -> (Ctx, Option<Refusal>) {
    let peer = rq.remote_addr().copied();
    let method = rq.method().as_str().to_owned();
    let raw_url = rq.url().to_owned();
    let (path, query) = match raw_url.split_once('?') {
        Some((p, q)) => (p.to_owned(), q.to_owned()),
        None => (raw_url.clone(), String::new()),
    };
    let segments = path_segments(&path);
    let request_id = request_id(
        rq.headers()
            .iter()
            .find(|h| h.field.equiv("X-Request-Id"))
            .map(|h| h.value.as_str()),
    );
    // Bodies up to `PREREAD_BODY_LIMIT` are read by tiny_http before we see the request: nothing
    // to drain.
    let preread = rq.body_preread();
    let refusal = if head_bytes(&rq) > MAX_HEAD_BYTES {
        Some(Refusal::HeadTooLarge)
    } else if rq.body_length().is_some_and(|n| n > MAX_DECLARED_BODY) {
        Some(Refusal::BodyTooLarge(MAX_DECLARED_BODY))
    } else {
        None
    };
    let client = peer.map(|p| {
        let forwarded_for = rq
            .headers()
            .iter()
            .find(|h| h.field.equiv("X-Forwarded-For"))
            .map(|h| h.value.as_str());
        client_address(p.ip(), forwarded_for, &w.trusted_proxies)
    });
    let ctx = Ctx {
        req: rq,
        method,
        path,
        segments,
        query,
        request_id,
        flight,
        peer,
        client,
        registry: w.registry.clone(),
        body_done: preread,
    };
    (ctx, refusal)
}

/// The service's answer: its rendering of the head's refusal, or its handler's answer, a panic
/// caught and rendered as [`Refusal::Panicked`].
fn run_service(w: &Worker, ctx: &mut Ctx, refusal: Option<Refusal>) -> Handled {
    let handled = match refusal {
        Some(refusal) => Ok(w.service.refused(refusal)),
        None => catch_unwind(AssertUnwindSafe(|| w.service.handle(ctx))),
    };
    handled.unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        log::error!(
            "request {}: {} {}: handler panicked: {msg}",
            ctx.request_id,
            ctx.method,
            ctx.path
        );
        w.service.refused(Refusal::Panicked(msg))
    })
}

/// What the access log still needs of a request once it is answered.
struct Answered {
    method: String,
    path: String,
    request_id: String,
}

/// Hands the answer to the connection's thread, closing the connection instead of keeping it
/// when a large or chunked body was left unread (tiny_http would read and discard all of it
/// first; a small one is drained, bounded by the supervisor's transfer timeout), when the head
/// was refused, and when the request came through a retired accept generation (so that the
/// generation drains).
fn answer(w: &Worker, ctx: Ctx, reply: Reply, generation: u64, head_too_large: bool) -> Answered {
    let unread_large = !ctx.body_done
        && match ctx.req.body_length() {
            Some(n) => n > LINGER_BYTES,
            None => ctx.header("Transfer-Encoding").is_some(),
        };
    let retired = generation != w.front.current_generation();
    let close = unread_large || head_too_large || retired;
    let Ctx {
        req,
        method,
        path,
        request_id,
        peer,
        flight,
        ..
    } = ctx;
    if close {
        log::debug!(
            "request {request_id}: closing the connection (unread body: {unread_large}, \
             head too large: {head_too_large}, retired accept generation: {retired})"
        );
    }
    let response = reply.into_response(&request_id);
    w.registry.phase(flight, Phase::Writing);
    if close {
        if let Some(peer) = peer {
            // Reads now end at what already arrived, so tiny_http's drain of an unread body (on
            // the connection's thread) stops there.
            w.supervisor.shutdown_peer(peer, Shutdown::Read);
        }
    }
    // The answer is rendered into memory here and written by the connection's own thread
    // (`answers_on_connection`), which then closes the connection if asked: this thread never
    // waits on the client's socket. A panic in tiny_http must not take the worker.
    let responded = catch_unwind(AssertUnwindSafe(|| {
        if close {
            req.respond_closing(response)
        } else {
            req.respond(response)
        }
    }));
    match responded {
        Ok(Ok(())) => {}
        Ok(Err(e)) => log::debug!("request {request_id}: cannot write response: {e}"),
        Err(_) => log::warn!("request {request_id}: tiny_http panicked finishing the request"),
    }
    Answered {
        method,
        path,
        request_id,
    }
}

/// What the access log says about one request.
struct Access<'a> {
    request_id: &'a str,
    client: Option<IpAddr>,
    peer: Option<IpAddr>,
    method: &'a str,
    path: &'a str,
    status: u16,
    code: Option<&'a str>,
    elapsed: Duration,
}

/// The one access line of a request (target `access`): its text is
/// `ID CLIENT METHOD PATH STATUS CODE MSms`, with `-` for an unknown client or a code-less answer
/// and ` via PEER` appended when the client is not the peer (a trusted proxy forwarded it); the
/// same fields ride along as key-values, for the JSON log format.
fn access_log(a: &Access) {
    // Microsecond precision is what the text shows; the JSON number matches it.
    let ms = (a.elapsed.as_secs_f64() * 1_000_000.0).round() / 1000.0;
    let client = a.client.map(|c| c.to_string());
    let peer = a.peer.map(|p| p.to_string());
    let via = match (&peer, a.client != a.peer) {
        (Some(p), true) => format!(" via {p}"),
        _ => String::new(),
    };
    log::info!(
        target: "access",
        requestId = a.request_id,
        client = client.as_deref(),
        peer = peer.as_deref(),
        method = a.method,
        path = a.path,
        status = a.status,
        code = a.code,
        ms = ms;
        "{} {} {} {} {} {} {ms:.3}ms{via}",
        a.request_id,
        client.as_deref().unwrap_or("-"),
        a.method,
        a.path,
        a.status,
        a.code.unwrap_or("-"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let trusted: Vec<ipnet::IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // Not a proxy: its header is ignored.
        assert_eq!(
            client_address(ip("198.51.100.9"), Some("1.2.3.4"), &trusted),
            ip("198.51.100.9")
        );
        // A proxy: the right-most untrusted hop; what the client wrote left of it is ignored.
        assert_eq!(
            client_address(
                ip("10.0.0.2"),
                Some("6.6.6.6, 203.0.113.5, 10.0.0.3"),
                &trusted
            ),
            ip("203.0.113.5")
        );
        // A proxy without the header, or with garbage: the last trusted hop.
        assert_eq!(
            client_address(ip("10.0.0.2"), None, &trusted),
            ip("10.0.0.2")
        );
        assert_eq!(
            client_address(ip("10.0.0.2"), Some("junk"), &trusted),
            ip("10.0.0.2")
        );
    }

    #[test]
    fn a_well_formed_request_id_is_kept() {
        for id in ["a", "req-1", "A.b_c:d-9", &"x".repeat(MAX_REQUEST_ID)] {
            assert_eq!(request_id(Some(id)), id);
        }
    }

    #[test]
    fn anything_else_gets_a_fresh_uuid_v7() {
        let long = "x".repeat(MAX_REQUEST_ID + 1);
        for id in [
            None,
            Some(""),
            Some(long.as_str()),
            Some("a b"),
            Some("<script>"),
            Some("a\tb"),
            Some("é"),
            Some("a,b"),
        ] {
            let got = request_id(id);
            let uuid = uuid::Uuid::parse_str(&got).unwrap_or_else(|e| panic!("{got:?}: {e}"));
            assert_eq!(uuid.get_version_num(), 7, "{id:?} -> {got}");
        }
        assert_ne!(request_id(None), request_id(None));
    }
}
