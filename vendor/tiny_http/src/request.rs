use std::io::Error as IoError;
use std::io::{self, Cursor, ErrorKind, Read, Write};

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;

use crate::util::{Answer, AnswerBuf, ChunkedReader, EqualReader, FusedReader};
use crate::{HTTPVersion, Header, Method, Response, StatusCode};

/// Represents an HTTP request made by a client.
///
/// A `Request` object is what is produced by the server, and is your what
/// your code must analyse and answer.
///
/// This object implements the `Send` trait, therefore you can dispatch your requests to
/// worker threads.
///
/// # Pipelining
///
/// If a client sends multiple requests in a row (without waiting for the response), then you will
/// get multiple `Request` objects simultaneously. This is called *requests pipelining*.
/// Tiny-http automatically reorders the responses so that you don't need to worry about the order
/// in which you call `respond` or `into_writer`.
///
/// This mechanic is disabled if:
///
///  - The body of a request is large enough (handling requires pipelining requires storing the
///    body of the request in a buffer ; if the body is too big, tiny-http will avoid doing that)
///  - A request sends a `Expect: 100-continue` header (which means that the client waits to
///    know whether its body will be processed before sending it)
///  - A request sends a `Connection: close` header or `Connection: upgrade` header (used for
///    websockets), which indicates that this is the last request that will be received on this
///    connection
///
/// # Automatic cleanup
///
/// If a `Request` object is destroyed without `into_writer` or `respond` being called,
/// an empty response with a 500 status code (internal server error) will automatically be
/// sent back to the client.
/// This means that if your code fails during the handling of a request, this "internal server
/// error" response will automatically be sent during the stack unwinding.
///
/// # Testing
///
/// If you want to build fake requests to test your server, use [`TestRequest`](crate::test::TestRequest).
pub struct Request {
    // where to read the body from
    data_reader: Option<Box<dyn Read + Send + 'static>>,

    // if this writer is empty, then the request has been answered
    response_writer: Option<Box<dyn Write + Send + 'static>>,

    remote_addr: Option<SocketAddr>,

    // true if HTTPS, false if HTTP
    secure: bool,

    method: Method,

    path: String,

    http_version: HTTPVersion,

    headers: Vec<Header>,

    body_length: Option<usize>,

    // true if a `100 Continue` response must be sent when `as_reader()` is called
    must_send_continue: bool,

    // If Some, a message must be sent after responding
    notify_when_responded: Option<Sender<()>>,

    // convapi: set by the body reader when the body ended early or was malformed, or by
    // `respond_closing`; the response then says `Connection: close` and the connection reads no
    // further request.
    framing_broken: Arc<AtomicBool>,

    // convapi: the whole body was read before the request was handed over (or there is none).
    body_preread: bool,

    // convapi: with answers written on the connection's thread, the buffer the response is
    // written into and where it goes, with the body reader, when the request is dropped.
    hand_off: Option<(AnswerBuf, Sender<Answer>)>,
}

/// convapi: reads `r` into `out` until its end or until `out` holds `max` bytes, growing `out` as
/// bytes arrive (at most twice what was received is allocated). True if the end came first.
fn read_growing<R: Read + ?Sized>(r: &mut R, max: usize, out: &mut Vec<u8>) -> io::Result<bool> {
    let mut chunk = [0u8; 8 * 1024];
    while out.len() < max {
        let want = (max - out.len()).min(chunk.len());
        match r.read(&mut chunk[..want]) {
            Ok(0) => return Ok(true),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// convapi: a reader that fails with the error a pre-read body ended with.
struct Failed(ErrorKind, String);

impl Read for Failed {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        Err(IoError::new(self.0, self.1.clone()))
    }
}

struct NotifyOnDrop<R> {
    sender: Sender<()>,
    inner: R,
}

impl<R: Read> Read for NotifyOnDrop<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf)
    }
}
impl<R: Write> Write for NotifyOnDrop<R> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
impl<R> Drop for NotifyOnDrop<R> {
    fn drop(&mut self) {
        self.sender.send(()).unwrap();
    }
}

/// Error that can happen when building a `Request` object.
#[derive(Debug)]
pub enum RequestCreationError {
    /// The client sent an `Expect` header that was not recognized by tiny-http.
    ExpectationFailed,

    /// Error while reading data from the socket during the creation of the `Request`.
    CreationIoError(IoError),

    /// convapi: the body's framing cannot be trusted (RFC 9112 §6); answered 400, then closed.
    BadFraming(&'static str),

    /// convapi: a transfer coding other than chunked; answered 501, then closed.
    UnsupportedTransferCoding,
}

/// convapi: how the body of a request is delimited, decided strictly (RFC 9112 §6.3) because a
/// server and a proxy in front of it that disagree on it see different requests (smuggling).
enum Framing {
    None,
    Length(usize),
    Chunked,
}

fn framing_of(headers: &[Header], version: &HTTPVersion) -> Result<Framing, RequestCreationError> {
    use RequestCreationError::{BadFraming, UnsupportedTransferCoding};
    let values = |name: &'static str| {
        headers
            .iter()
            .filter(move |h| h.field.equiv(name))
            .map(|h| h.value.as_str())
    };
    let lengths: Vec<&str> = values("Content-Length").collect();
    let mut codings = values("Transfer-Encoding")
        .flat_map(|v| v.split(','))
        .map(|c| c.trim_matches([' ', '\t']))
        .filter(|c| !c.is_empty())
        .collect::<Vec<_>>();
    if values("Transfer-Encoding").next().is_some() {
        // Both: a proxy may have used the other one. RFC 9112 §6.1 allows processing with
        // chunked and closing after; refusing is as compliant and leaves nothing half-trusted.
        if !lengths.is_empty() {
            return Err(BadFraming("both Transfer-Encoding and Content-Length"));
        }
        if *version < HTTPVersion(1, 1) {
            return Err(BadFraming("Transfer-Encoding in an HTTP/1.0 request"));
        }
        let last = codings.pop();
        if !last.is_some_and(|c| c.eq_ignore_ascii_case("chunked")) {
            return Err(BadFraming("chunked is not the final transfer coding"));
        }
        if codings.iter().any(|c| c.eq_ignore_ascii_case("chunked")) {
            return Err(BadFraming("chunked applied more than once"));
        }
        if !codings.is_empty() {
            return Err(UnsupportedTransferCoding);
        }
        return Ok(Framing::Chunked);
    }
    match lengths.as_slice() {
        [] => Ok(Framing::None),
        // Content-Length = 1*DIGIT. A list, even of equal values, is refused (RFC 9110 §8.6
        // allows either); so are signs, spaces, hexadecimal and values that overflow.
        [v] if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => v
            .parse::<usize>()
            .map(Framing::Length)
            .map_err(|_| BadFraming("Content-Length out of range")),
        [_] => Err(BadFraming("invalid Content-Length")),
        _ => Err(BadFraming("more than one Content-Length")),
    }
}

impl From<IoError> for RequestCreationError {
    fn from(err: IoError) -> RequestCreationError {
        RequestCreationError::CreationIoError(err)
    }
}

/// Builds a new request.
///
/// After the request line and headers have been read from the socket, a new `Request` object
/// is built.
///
/// You must pass a `Read` that will allow the `Request` object to read from the incoming data.
/// It is the responsibility of the `Request` to read only the data of the request and not further.
///
/// The `Write` object will be used by the `Request` to write the response.
#[allow(clippy::too_many_arguments)]
pub fn new_request<R, W>(
    secure: bool,
    method: Method,
    path: String,
    version: HTTPVersion,
    headers: Vec<Header>,
    remote_addr: Option<SocketAddr>,
    mut source_data: R,
    writer: W,
    framing_broken: Arc<AtomicBool>,
    preread_limit: usize,
) -> Result<Request, RequestCreationError>
where
    R: Read + Send + 'static,
    W: Write + Send + 'static,
{
    let framing = framing_of(&headers, &version)?;
    let content_length = match framing {
        Framing::Length(n) => Some(n),
        _ => None,
    };

    // true if the client sent a `Expect: 100-continue` header
    let expects_continue = {
        match headers
            .iter()
            .find(|h: &&Header| h.field.equiv("Expect"))
            .map(|h| h.value.as_str())
        {
            None => false,
            Some(v) if v.eq_ignore_ascii_case("100-continue") => true,
            _ => return Err(RequestCreationError::ExpectationFailed),
        }
    };

    // true if the client sent a `Connection: upgrade` header
    let connection_upgrade = {
        match headers
            .iter()
            .find(|h: &&Header| h.field.equiv("Connection"))
            .map(|h| h.value.as_str())
        {
            Some(v) if v.to_ascii_lowercase().contains("upgrade") => true,
            _ => false,
        }
    };

    // convapi: a body of at most `preread_limit` bytes is read here, on the connection's own
    // thread, before the request is handed to the application (upstream: a Content-Length of at
    // most 1 KiB, and never with `Expect: 100-continue`). The application's threads then never
    // wait on a client that sends its body slowly. The buffer grows as bytes arrive, so a declared
    // length costs nothing until it is sent.
    let preread = !connection_upgrade
        && match framing {
            Framing::Length(n) => n <= preread_limit,
            Framing::Chunked => true,
            Framing::None => false,
        };
    let mut writer = writer;
    let mut must_send_continue = expects_continue;
    if preread && expects_continue && content_length != Some(0) {
        // The client waits for this interim answer before it sends the body read below.
        Response::new_empty(StatusCode(100)).raw_print(
            &mut writer,
            version.clone(),
            &headers,
            true,
            None,
        )?;
        writer.flush()?;
        must_send_continue = false;
    }

    // we wrap `source_data` around a reading whose nature depends on the transfer-encoding and
    // content-length headers
    let mut body_preread = !connection_upgrade;
    let reader = if connection_upgrade {
        // if we have a `Connection: upgrade`, always keeping the whole reader
        Box::new(source_data) as Box<dyn Read + Send + 'static>
    } else if let Some(content_length) = content_length {
        if content_length == 0 {
            Box::new(io::empty()) as Box<dyn Read + Send + 'static>
        } else if preread {
            let mut buffer = Vec::new();
            if read_growing(&mut source_data, content_length, &mut buffer)? {
                // convapi: answered (400) rather than dropped: a client that half-closed
                // its side still reads, and learns its body was not taken.
                return Err(RequestCreationError::BadFraming(
                    "the connection ended before the Content-Length of the body",
                ));
            }
            Box::new(Cursor::new(buffer)) as Box<dyn Read + Send + 'static>
        } else {
            body_preread = false;
            let (data_reader, _) =
                EqualReader::new(source_data, content_length, framing_broken.clone()); // TODO:
            Box::new(FusedReader::new(data_reader)) as Box<dyn Read + Send + 'static>
        }
    } else if let Framing::Chunked = framing {
        // convapi: `framing_of` let through only exactly `chunked`; upstream decoded any
        // Transfer-Encoding as chunked, with a decoder that took a truncated body for a whole one.
        let mut chunked = ChunkedReader::new(source_data, framing_broken.clone());
        let mut buffer = Vec::new();
        // One byte past the limit tells a body over it from one exactly at it.
        match read_growing(&mut chunked, preread_limit.saturating_add(1), &mut buffer) {
            Ok(true) => Box::new(Cursor::new(buffer)) as Box<dyn Read + Send + 'static>,
            // Over the limit: handed over with what was read put back in front of the rest, which
            // the application reads (or drops, and the reader drains it) as before.
            Ok(false) => {
                body_preread = false;
                Box::new(Cursor::new(buffer).chain(FusedReader::new(chunked)))
                    as Box<dyn Read + Send + 'static>
            }
            // Malformed or cut short: the application reads what came, then this error, as it
            // did when it read the body itself; the reader has marked the framing broken.
            Err(e) => {
                body_preread = false;
                Box::new(Cursor::new(buffer).chain(Failed(e.kind(), e.to_string())))
                    as Box<dyn Read + Send + 'static>
            }
        }
    } else {
        // if we have neither a Content-Length nor a Transfer-Encoding,
        // assuming that we have no data
        // TODO: could also be multipart/byteranges
        Box::new(io::empty()) as Box<dyn Read + Send + 'static>
    };

    Ok(Request {
        data_reader: Some(reader),
        response_writer: Some(Box::new(writer) as Box<dyn Write + Send + 'static>),
        remote_addr,
        secure,
        method,
        path,
        http_version: version,
        headers,
        body_length: content_length,
        must_send_continue,
        body_preread,
        notify_when_responded: None,
        framing_broken,
        hand_off: None,
    })
}

impl Request {
    /// Returns true if the request was made through HTTPS.
    #[inline]
    pub fn secure(&self) -> bool {
        self.secure
    }

    /// Returns the method requested by the client (eg. `GET`, `POST`, etc.).
    #[inline]
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// Returns the resource requested by the client.
    #[inline]
    pub fn url(&self) -> &str {
        &self.path
    }

    /// Returns a list of all headers sent by the client.
    #[inline]
    pub fn headers(&self) -> &[Header] {
        &self.headers
    }

    /// Returns the HTTP version of the request.
    #[inline]
    pub fn http_version(&self) -> &HTTPVersion {
        &self.http_version
    }

    /// Returns the length of the body in bytes.
    ///
    /// Returns `None` if the length is unknown.
    #[inline]
    pub fn body_length(&self) -> Option<usize> {
        self.body_length
    }

    /// convapi: true when the whole body was read before the request was handed over (see
    /// `ServerOptions::preread_body_limit`), or there is none: reading it never waits on the
    /// client, and nothing of it is left on the connection.
    #[inline]
    pub fn body_preread(&self) -> bool {
        self.body_preread
    }

    /// Returns the address of the client that sent this request.
    ///
    /// The address is always `Some` for TCP listeners, but always `None` for UNIX listeners
    /// (as the remote address of a UNIX client is almost always unnamed).
    ///
    /// Note that this is gathered from the socket. If you receive the request from a proxy,
    /// this function will return the address of the proxy and not the address of the actual
    /// user.
    #[inline]
    pub fn remote_addr(&self) -> Option<&SocketAddr> {
        self.remote_addr.as_ref()
    }

    /// Sends a response with a `Connection: upgrade` header, then turns the `Request` into a `Stream`.
    ///
    /// The main purpose of this function is to support websockets.
    /// If you detect that the request wants to use some kind of protocol upgrade, you can
    ///  call this function to obtain full control of the socket stream.
    ///
    /// If you call this on a non-websocket request, tiny-http will wait until this `Stream` object
    ///  is destroyed before continuing to read or write on the socket. Therefore you should always
    ///  destroy it as soon as possible.
    pub fn upgrade<R: Read>(
        mut self,
        protocol: &str,
        response: Response<R>,
    ) -> Box<dyn ReadWrite + Send> {
        use crate::util::CustomStream;

        response
            .raw_print(
                self.response_writer.as_mut().unwrap().by_ref(),
                self.http_version.clone(),
                &self.headers,
                false,
                Some(protocol),
            )
            .ok(); // TODO: unused result

        self.response_writer.as_mut().unwrap().flush().ok(); // TODO: unused result

        let stream = CustomStream::new(self.extract_reader_impl(), self.extract_writer_impl());
        if let Some(sender) = self.notify_when_responded.take() {
            let stream = NotifyOnDrop {
                sender,
                inner: stream,
            };
            Box::new(stream) as Box<dyn ReadWrite + Send>
        } else {
            Box::new(stream) as Box<dyn ReadWrite + Send>
        }
    }

    /// Allows to read the body of the request.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # extern crate rustc_serialize;
    /// # extern crate tiny_http;
    /// # use rustc_serialize::json::Json;
    /// # use std::io::Read;
    /// # fn get_content_type(_: &tiny_http::Request) -> &'static str { "" }
    /// # fn main() {
    /// # let server = tiny_http::Server::http("0.0.0.0:0").unwrap();
    /// let mut request = server.recv().unwrap();
    ///
    /// if get_content_type(&request) == "application/json" {
    ///     let mut content = String::new();
    ///     request.as_reader().read_to_string(&mut content).unwrap();
    ///     let json: Json = content.parse().unwrap();
    /// }
    /// # }
    /// ```
    ///
    /// If the client sent a `Expect: 100-continue` header with the request, calling this
    ///  function will send back a `100 Continue` response.
    #[inline]
    pub fn as_reader(&mut self) -> &mut dyn Read {
        if self.must_send_continue {
            let msg = Response::new_empty(StatusCode(100));
            msg.raw_print(
                self.response_writer.as_mut().unwrap().by_ref(),
                self.http_version.clone(),
                &self.headers,
                true,
                None,
            )
            .ok();
            self.response_writer.as_mut().unwrap().flush().ok();
            self.must_send_continue = false;
        }

        self.data_reader.as_mut().unwrap()
    }

    /// Turns the `Request` into a writer.
    ///
    /// The writer has a raw access to the stream to the user.
    /// This function is useful for things like CGI.
    ///
    /// Note that the destruction of the `Writer` object may trigger
    /// some events. For exemple if a client has sent multiple requests and the requests
    /// have been processed in parallel, the destruction of a writer will trigger
    /// the writing of the next response.
    /// Therefore you should always destroy the `Writer` as soon as possible.
    #[inline]
    pub fn into_writer(mut self) -> Box<dyn Write + Send + 'static> {
        let writer = self.extract_writer_impl();
        if let Some(sender) = self.notify_when_responded.take() {
            let writer = NotifyOnDrop {
                sender,
                inner: writer,
            };
            Box::new(writer) as Box<dyn Write + Send + 'static>
        } else {
            writer
        }
    }

    /// Extract the response `Writer` object from the Request, dropping this `Writer` has the same side effects
    /// as the object returned by `into_writer` above.
    ///
    /// This may only be called once on a single request.
    fn extract_writer_impl(&mut self) -> Box<dyn Write + Send + 'static> {
        use std::mem;

        assert!(self.response_writer.is_some());

        let mut writer = None;
        mem::swap(&mut self.response_writer, &mut writer);
        writer.unwrap()
    }

    /// Extract the body `Reader` object from the Request.
    ///
    /// This may only be called once on a single request.
    fn extract_reader_impl(&mut self) -> Box<dyn Read + Send + 'static> {
        use std::mem;

        assert!(self.data_reader.is_some());

        let mut reader = None;
        mem::swap(&mut self.data_reader, &mut reader);
        reader.unwrap()
    }

    /// convapi: sends a response to this request saying `Connection: close`, and ends the
    /// connection after it: no further request of it is read. With answers written on the
    /// connection's thread (`ServerOptions::answers_on_connection`), that thread closes the
    /// connection once the answer is written; otherwise the caller shuts the socket down.
    pub fn respond_closing<R>(self, response: Response<R>) -> Result<(), IoError>
    where
        R: Read,
    {
        self.framing_broken.store(true, Ordering::SeqCst);
        self.respond(response)
    }

    /// Sends a response to this request.
    #[inline]
    pub fn respond<R>(mut self, response: Response<R>) -> Result<(), IoError>
    where
        R: Read,
    {
        let res = self.respond_impl(response);
        if let Some(sender) = self.notify_when_responded.take() {
            sender.send(()).unwrap();
        }
        res
    }

    fn respond_impl<R>(&mut self, response: Response<R>) -> Result<(), IoError>
    where
        R: Read,
    {
        let mut writer = self.extract_writer_impl();

        let do_not_send_body = self.method == Method::Head;

        // convapi: the body ended early or was malformed, so this connection will read no
        // further request (client.rs); the client is told so.
        let response = if self.framing_broken.load(Ordering::SeqCst) {
            response.with_connection_close()
        } else {
            response
        };

        Self::ignore_client_closing_errors(response.raw_print(
            writer.by_ref(),
            self.http_version.clone(),
            &self.headers,
            do_not_send_body,
            None,
        ))?;

        Self::ignore_client_closing_errors(writer.flush())
    }

    fn ignore_client_closing_errors(result: io::Result<()>) -> io::Result<()> {
        result.or_else(|err| match err.kind() {
            ErrorKind::BrokenPipe => Ok(()),
            ErrorKind::ConnectionAborted => Ok(()),
            ErrorKind::ConnectionRefused => Ok(()),
            ErrorKind::ConnectionReset => Ok(()),
            _ => Err(err),
        })
    }

    /// convapi: the response is written into `buf` and handed to the connection's thread through
    /// `to` when the request is dropped (`ServerOptions::answers_on_connection`).
    pub(crate) fn with_hand_off(mut self, buf: AnswerBuf, to: Sender<Answer>) -> Self {
        self.hand_off = Some((buf, to));
        self
    }

    pub(crate) fn with_notify_sender(mut self, sender: Sender<()>) -> Self {
        self.notify_when_responded = Some(sender);
        self
    }
}

impl fmt::Debug for Request {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> Result<(), fmt::Error> {
        write!(
            formatter,
            "Request({} {} from {:?})",
            self.method, self.path, self.remote_addr
        )
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if self.response_writer.is_some() {
            let response = Response::empty(500);
            let _ = self.respond_impl(response); // ignoring any potential error
            if let Some(sender) = self.notify_when_responded.take() {
                sender.send(()).unwrap();
            }
        }
        // convapi: the answer, and a body not read before the request was handed over, go to
        // the connection's thread, which writes the one and drains the other.
        if let Some((buf, to)) = self.hand_off.take() {
            let body = if self.body_preread {
                None
            } else {
                self.data_reader.take()
            };
            // The connection's thread waits for this answer, so it is there to take it.
            let _ = to.send(Answer {
                bytes: buf.take(),
                body,
            });
        }
    }
}

/// Dummy trait that regroups the `Read` and `Write` traits.
///
/// Automatically implemented on all types that implement both `Read` and `Write`.
pub trait ReadWrite: Read + Write {}
impl<T> ReadWrite for T where T: Read + Write {}

#[cfg(test)]
mod tests {
    use super::Request;

    #[test]
    fn must_be_send() {
        #![allow(dead_code)]
        fn f<T: Send>(_: &T) {}
        fn bar(rq: &Request) {
            f(rq);
        }
    }
}
