//! # Simple usage
//!
//! ## Creating the server
//!
//! The easiest way to create a server is to call `Server::http()`.
//!
//! The `http()` function returns an `IoResult<Server>` which will return an error
//! in the case where the server creation fails (for example if the listening port is already
//! occupied).
//!
//! ```no_run
//! let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! ```
//!
//! A newly-created `Server` will immediately start listening for incoming connections and HTTP
//! requests.
//!
//! ## Receiving requests
//!
//! Calling `server.recv()` will block until the next request is available.
//! This function returns an `IoResult<Request>`, so you need to handle the possible errors.
//!
//! ```no_run
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//!
//! loop {
//!     // blocks until the next request is received
//!     let request = match server.recv() {
//!         Ok(rq) => rq,
//!         Err(e) => { println!("error: {}", e); break }
//!     };
//!
//!     // do something with the request
//!     // ...
//! }
//! ```
//!
//! In a real-case scenario, you will probably want to spawn multiple worker tasks and call
//! `server.recv()` on all of them. Like this:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use std::thread;
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! let server = Arc::new(server);
//! let mut guards = Vec::with_capacity(4);
//!
//! for _ in (0 .. 4) {
//!     let server = server.clone();
//!
//!     let guard = thread::spawn(move || {
//!         loop {
//!             let rq = server.recv().unwrap();
//!
//!             // ...
//!         }
//!     });
//!
//!     guards.push(guard);
//! }
//! ```
//!
//! If you don't want to block, you can call `server.try_recv()` instead.
//!
//! ## Handling requests
//!
//! The `Request` object returned by `server.recv()` contains informations about the client's request.
//! The most useful methods are probably `request.method()` and `request.url()` which return
//! the requested method (`GET`, `POST`, etc.) and url.
//!
//! To handle a request, you need to create a `Response` object. See the docs of this object for
//! more infos. Here is an example of creating a `Response` from a file:
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::path::Path;
//! let response = tiny_http::Response::from_file(File::open(&Path::new("image.png")).unwrap());
//! ```
//!
//! All that remains to do is call `request.respond()`:
//!
//! ```no_run
//! # use std::fs::File;
//! # use std::path::Path;
//! # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
//! # let request = server.recv().unwrap();
//! # let response = tiny_http::Response::from_file(File::open(&Path::new("image.png")).unwrap());
//! let _ = request.respond(response);
//! ```
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]
#![allow(clippy::match_like_matches_macro)]

#[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
use zeroize::Zeroizing;

use std::error::Error;
use std::io::Error as IoError;
use std::io::ErrorKind as IoErrorKind;
use std::io::Result as IoResult;
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use client::ClientConnection;
use connection::Connection;
use util::MessagesQueue;

pub use common::{HTTPVersion, Header, HeaderField, Method, StatusCode};
pub use connection::{ConfigListenAddr, ListenAddr, Listener};
pub use connections::{Connections, Cut, MinRate};
pub use request::{ReadWrite, Request};
pub use response::{Response, ResponseBox};
pub use test::TestRequest;

mod client;
mod common;
mod connection;
mod connections;
mod request;
mod response;
mod ssl;
mod test;
mod util;

/// The main class of this library.
///
/// Destroying this object will immediately close the listening socket and the reading
///  part of all the client's connections. Requests that have already been returned by
///  the `recv()` function will not close and the responses will be transferred to the client.
pub struct Server {
    // should be false as long as the server exists
    // when set to true, all the subtasks will close within a few hundreds ms
    close: Arc<AtomicBool>,

    // queue for messages received by child threads
    messages: Arc<MessagesQueue<Message>>,

    // result of TcpListener::local_addr()
    listening_addr: ListenAddr,
}

enum Message {
    Error(IoError),
    NewRequest(Request),
}

impl From<IoError> for Message {
    fn from(e: IoError) -> Message {
        Message::Error(e)
    }
}

impl From<Request> for Message {
    fn from(rq: Request) -> Message {
        Message::NewRequest(rq)
    }
}

// this trait is to make sure that Server implements Share and Send
#[doc(hidden)]
trait MustBeShareDummy: Sync + Send {}
#[doc(hidden)]
impl MustBeShareDummy for Server {}

pub struct IncomingRequests<'a> {
    server: &'a Server,
}

/// Represents the parameters required to create a server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The addresses to try to listen to.
    pub addr: ConfigListenAddr,

    /// If `Some`, then the server will use SSL to encode the communications.
    pub ssl: Option<SslConfig>,
}

/// convapi: how the server reads requests (see `PATCHES.md`).
#[derive(Clone)]
pub struct ServerOptions {
    /// Bodies of at most this many bytes (by `Content-Length`, or chunked bodies that end within
    /// it) are read on the connection's own thread before the request is handed over, so that
    /// the threads that take requests never wait on a client's body. Larger bodies are handed
    /// over unread, as upstream did for every body over 1 KiB (the default).
    pub preread_body_limit: usize,
    /// Called on the connection's thread with the client's address each time a request head has
    /// been read, before its body is: from then until the request is handed over, what the client
    /// sends is that body.
    pub on_head: Option<Arc<dyn Fn(Option<std::net::SocketAddr>) + Send + Sync>>,
    /// Read and write timeout of every accepted socket: a connection that sends nothing for this
    /// long while the server waits for a request head or a body, or that reads none of its answer
    /// for this long, is closed (`None`: upstream, no timeout).
    pub socket_timeout: Option<Duration>,
    /// Least rate at which a request head, and a body read before the request is handed over,
    /// must arrive (`None`: any rate).
    pub min_rate: Option<MinRate>,
    /// Largest request head, in bytes, read before refusing it with 431 and closing the
    /// connection (`None`: no limit, as upstream).
    pub max_head_bytes: Option<usize>,
    /// The table every accepted connection is registered in, with a handle to shut it down.
    pub connections: Option<Arc<Connections>>,
    /// Most connections in `connections`: a new one beyond it first shuts down the one that has
    /// waited longest for its next request; when every one has a request in the application's
    /// hands, the new connection is closed at once.
    pub max_connections: Option<usize>,
    /// Most connections in `connections` from one client address: a new one beyond it first
    /// shuts down that address's connection that has waited longest for its next request; when
    /// every one has a request in the application's hands, the new one is closed at once.
    pub max_per_address: Option<usize>,
    /// Client addresses not bounded by `max_per_address` (reverse proxies).
    pub shared_address: Option<Arc<dyn Fn(std::net::IpAddr) -> bool + Send + Sync>>,
    /// Called whenever the server ends a connection because of one of the bounds above.
    pub on_cut: Option<Arc<dyn Fn(Cut) + Send + Sync>>,
    /// Each connection writes its answers on its own thread: a request's response is rendered
    /// into memory by whoever responds and handed to the connection, which writes it, then reads
    /// its next request. At most one request per connection is out at a time (no read-ahead of
    /// pipelined requests), and nobody but the connection's thread waits on its socket (`false`:
    /// upstream, the responding thread writes to the socket and pipelined requests are read
    /// ahead without bound).
    pub answers_on_connection: bool,
    /// Called on the connection's thread with each request it reads, instead of queueing the
    /// request for `recv` (`None`: upstream; accept errors still go to `recv` either way). Saves
    /// the hand-off through the queue and a thread that pops it.
    pub deliver: Option<Arc<dyn Fn(Request) + Send + Sync>>,
    /// With `answers_on_connection`, called on the connection's thread once the answer of its
    /// request has been written (or writing it failed): the request is out of the server's hands.
    pub on_answered: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            preread_body_limit: 1024,
            on_head: None,
            socket_timeout: None,
            min_rate: None,
            max_head_bytes: None,
            connections: None,
            max_connections: None,
            max_per_address: None,
            shared_address: None,
            on_cut: None,
            answers_on_connection: false,
            deliver: None,
            on_answered: None,
        }
    }
}

impl std::fmt::Debug for ServerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerOptions")
            .field("preread_body_limit", &self.preread_body_limit)
            .field("on_head", &self.on_head.as_ref().map(|_| "Fn"))
            .field("socket_timeout", &self.socket_timeout)
            .field("min_rate", &self.min_rate)
            .field("max_head_bytes", &self.max_head_bytes)
            .field("connections", &self.connections.as_ref().map(|c| c.len()))
            .field("max_connections", &self.max_connections)
            .field("max_per_address", &self.max_per_address)
            .field("shared_address", &self.shared_address.as_ref().map(|_| "Fn"))
            .field("on_cut", &self.on_cut.as_ref().map(|_| "Fn"))
            .field("answers_on_connection", &self.answers_on_connection)
            .field("deliver", &self.deliver.as_ref().map(|_| "Fn"))
            .field("on_answered", &self.on_answered.as_ref().map(|_| "Fn"))
            .finish()
    }
}

/// Configuration of the server for SSL.
#[derive(Debug, Clone)]
pub struct SslConfig {
    /// Contains the public certificate to send to clients.
    pub certificate: Vec<u8>,
    /// Contains the ultra-secret private key used to decode communications.
    pub private_key: Vec<u8>,
}

impl Server {
    /// Shortcut for a simple server on a specific address.
    #[inline]
    pub fn http<A>(addr: A) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::from_socket_addrs(addr)?,
            ssl: None,
        })
    }

    /// Shortcut for an HTTPS server on a specific address.
    #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
    #[inline]
    pub fn https<A>(
        addr: A,
        config: SslConfig,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>>
    where
        A: ToSocketAddrs,
    {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::from_socket_addrs(addr)?,
            ssl: Some(config),
        })
    }

    #[cfg(unix)]
    #[inline]
    /// Shortcut for a UNIX socket server at a specific path
    pub fn http_unix(
        path: &std::path::Path,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Server::new(ServerConfig {
            addr: ConfigListenAddr::unix_from_path(path),
            ssl: None,
        })
    }

    /// Builds a new server that listens on the specified address.
    pub fn new(config: ServerConfig) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        let listener = config.addr.bind()?;
        Self::from_listener(listener, config.ssl)
    }

    /// Builds a new server using the specified TCP listener.
    ///
    /// This is useful if you've constructed TcpListener using some less usual method
    /// such as from systemd. For other cases, you probably want the `new()` function.
    pub fn from_listener<L: Into<Listener>>(
        listener: L,
        ssl_config: Option<SslConfig>,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        Self::from_listener_with_options(listener, ssl_config, ServerOptions::default())
    }

    /// convapi: `from_listener` with the given [`ServerOptions`].
    pub fn from_listener_with_options<L: Into<Listener>>(
        listener: L,
        ssl_config: Option<SslConfig>,
        options: ServerOptions,
    ) -> Result<Server, Box<dyn Error + Send + Sync + 'static>> {
        let listener = listener.into();
        // building the "close" variable
        let close_trigger = Arc::new(AtomicBool::new(false));

        // building the TcpListener
        let (server, local_addr) = {
            let local_addr = listener.local_addr()?;
            log::debug!("Server listening on {}", local_addr);
            (listener, local_addr)
        };

        // building the SSL capabilities
        #[cfg(all(feature = "ssl-openssl", feature = "ssl-rustls"))]
        compile_error!(
            "Features 'ssl-openssl' and 'ssl-rustls' must not be enabled at the same time"
        );
        #[cfg(not(any(feature = "ssl-openssl", feature = "ssl-rustls")))]
        type SslContext = ();
        #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
        type SslContext = crate::ssl::SslContextImpl;
        let ssl: Option<SslContext> = {
            match ssl_config {
                #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
                Some(config) => Some(SslContext::from_pem(
                    config.certificate,
                    Zeroizing::new(config.private_key),
                )?),
                #[cfg(not(any(feature = "ssl-openssl", feature = "ssl-rustls")))]
                Some(_) => return Err(
                    "Building a server with SSL requires enabling the `ssl` feature in tiny-http"
                        .into(),
                ),
                None => None,
            }
        };

        // creating a task where server.accept() is continuously called
        // and ClientConnection objects are pushed in the messages queue
        let messages = MessagesQueue::with_capacity(8);

        let inside_close_trigger = close_trigger.clone();
        let inside_messages = messages.clone();
        thread::spawn(move || {
            // a tasks pool is used to dispatch the connections into threads
            let tasks_pool = util::TaskPool::new();

            log::debug!("Running accept thread");
            while !inside_close_trigger.load(Relaxed) {
                let new_client = match server.accept() {
                    Ok((sock, peer)) => {
                        use util::RefinedTcpStream;
                        // convapi: bounds kept by the server itself (PATCHES.md, 15-17).
                        if options.socket_timeout.is_some() {
                            sock.set_timeouts(options.socket_timeout).ok();
                        }
                        let clock = Arc::new(connections::PaceClock::default());
                        let mut registered = None;
                        if let Some(table) = &options.connections {
                            if let Some(max) = options.max_connections {
                                match table.make_room(max) {
                                    None => {
                                        log::debug!("connection limit: closing a new one");
                                        continue;
                                    }
                                    Some(true) => {
                                        if let Some(on_cut) = &options.on_cut {
                                            on_cut(Cut::OverLimit);
                                        }
                                    }
                                    Some(false) => {}
                                }
                            }
                            let ip = peer.map(|p| p.ip());
                            let bounded = match (ip, &options.shared_address) {
                                (None, _) => false,
                                (Some(ip), Some(shared)) => !shared(ip),
                                (Some(_), None) => true,
                            };
                            if let (Some(max), true) = (options.max_per_address, bounded) {
                                let of_ip = |p: Option<std::net::SocketAddr>| {
                                    p.map(|p| p.ip()) == ip
                                };
                                match table.make_room_among(max, of_ip) {
                                    None => {
                                        log::debug!("address limit: closing a new one");
                                        if let Some(on_cut) = &options.on_cut {
                                            on_cut(Cut::AddressLimit);
                                        }
                                        continue;
                                    }
                                    Some(true) => {
                                        if let Some(on_cut) = &options.on_cut {
                                            on_cut(Cut::AddressLimit);
                                        }
                                    }
                                    Some(false) => {}
                                }
                            }
                            match table.register(&sock, peer, clock.clone()) {
                                Ok(r) => registered = Some(r),
                                // No descriptor left (EMFILE): handled as an accept error, which
                                // ends this accept thread; the application starts another
                                // (upstream's `try_clone().unwrap()` below would panic instead).
                                Err(e) => {
                                    log::error!("Error accepting new client: {}", e);
                                    inside_messages.push(e.into());
                                    break;
                                }
                            }
                        }
                        let (read_closable, write_closable) = match ssl {
                            // convapi: with a table of connections (the portable bounds), a
                            // socket that cannot be cloned is an accept error, as above.
                            None if options.connections.is_some() => {
                                match RefinedTcpStream::try_new(sock) {
                                    Ok(pair) => pair,
                                    Err(e) => {
                                        log::error!("Error accepting new client: {}", e);
                                        inside_messages.push(e.into());
                                        break;
                                    }
                                }
                            }
                            None => RefinedTcpStream::new(sock),
                            #[cfg(any(feature = "ssl-openssl", feature = "ssl-rustls"))]
                            Some(ref ssl) => {
                                // trying to apply SSL over the connection
                                // if an error occurs, we just close the socket and resume listening
                                let sock = match ssl.accept(sock) {
                                    Ok(s) => s,
                                    Err(_) => continue,
                                };

                                RefinedTcpStream::new(sock)
                            }
                            #[cfg(not(any(feature = "ssl-openssl", feature = "ssl-rustls")))]
                            Some(ref _ssl) => unreachable!(),
                        };

                        Ok((
                            ClientConnection::new(
                                write_closable,
                                read_closable,
                                options.clone(),
                                clock,
                            ),
                            registered,
                        ))
                    }
                    Err(e) => Err(e),
                };

                match new_client {
                    Ok((client, registered)) => {
                        let messages = inside_messages.clone();
                        let deliver = options.deliver.clone();
                        let mut client = Some(client);
                        let mut registered = registered;
                        tasks_pool.spawn(Box::new(move || {
                            // convapi: the connection leaves the table when its thread is done.
                            let _registered = registered.take();
                            if let Some(client) = client.take() {
                                // Synchronization is needed for HTTPS requests to avoid a deadlock
                                if client.secure() {
                                    let (sender, receiver) = mpsc::channel();
                                    for rq in client {
                                        messages.push(rq.with_notify_sender(sender.clone()).into());
                                        receiver.recv().unwrap();
                                    }
                                } else if let Some(deliver) = &deliver {
                                    // convapi: straight to the application, on this thread.
                                    for rq in client {
                                        deliver(rq);
                                    }
                                } else {
                                    for rq in client {
                                        messages.push(rq.into());
                                    }
                                }
                            }
                        }));
                    }

                    Err(e) => {
                        // convapi: a listener shut down for a graceful stop makes accept fail
                        // with EINVAL; that is the stop, not an error worth a log line.
                        if e.kind() == std::io::ErrorKind::InvalidInput {
                            log::debug!("accepting stopped: {}", e);
                        } else {
                            log::error!("Error accepting new client: {}", e);
                        }
                        inside_messages.push(e.into());
                        break;
                    }
                }
            }
            log::debug!("Terminating accept thread");
        });

        // result
        Ok(Server {
            messages,
            close: close_trigger,
            listening_addr: local_addr,
        })
    }

    /// Returns an iterator for all the incoming requests.
    ///
    /// The iterator will return `None` if the server socket is shutdown.
    #[inline]
    pub fn incoming_requests(&self) -> IncomingRequests<'_> {
        IncomingRequests { server: self }
    }

    /// Returns the address the server is listening to.
    #[inline]
    pub fn server_addr(&self) -> ListenAddr {
        self.listening_addr.clone()
    }

    /// Returns the number of clients currently connected to the server.
    pub fn num_connections(&self) -> usize {
        unimplemented!()
        //self.requests_receiver.lock().len()
    }

    /// Blocks until an HTTP request has been submitted and returns it.
    pub fn recv(&self) -> IoResult<Request> {
        match self.messages.pop() {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(rq),
            None => Err(IoError::new(IoErrorKind::Other, "thread unblocked")),
        }
    }

    /// Same as `recv()` but doesn't block longer than timeout
    pub fn recv_timeout(&self, timeout: Duration) -> IoResult<Option<Request>> {
        match self.messages.pop_timeout(timeout) {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(Some(rq)),
            None => Ok(None),
        }
    }

    /// Same as `recv()` but doesn't block.
    pub fn try_recv(&self) -> IoResult<Option<Request>> {
        match self.messages.try_pop() {
            Some(Message::Error(err)) => Err(err),
            Some(Message::NewRequest(rq)) => Ok(Some(rq)),
            None => Ok(None),
        }
    }

    /// Unblock thread stuck in recv() or incoming_requests().
    /// If there are several such threads, only one is unblocked.
    /// This method allows graceful shutdown of server.
    pub fn unblock(&self) {
        self.messages.unblock();
    }
}

impl Iterator for IncomingRequests<'_> {
    type Item = Request;
    fn next(&mut self) -> Option<Request> {
        self.server.recv().ok()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.close.store(true, Relaxed);
        // Connect briefly to ourselves to unblock the accept thread
        let maybe_stream = match &self.listening_addr {
            ListenAddr::IP(addr) => TcpStream::connect(addr).map(Connection::from),
            #[cfg(unix)]
            ListenAddr::Unix(addr) => {
                // TODO: use connect_addr when its stabilized.
                let path = addr.as_pathname().unwrap();
                std::os::unix::net::UnixStream::connect(path).map(Connection::from)
            }
        };
        if let Ok(stream) = maybe_stream {
            let _ = stream.shutdown(Shutdown::Both);
        }

        #[cfg(unix)]
        if let ListenAddr::Unix(addr) = &self.listening_addr {
            if let Some(path) = addr.as_pathname() {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}
