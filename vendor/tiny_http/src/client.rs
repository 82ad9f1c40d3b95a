use ascii::AsciiString;

use std::io::Error as IoError;
use std::io::Result as IoResult;
use std::io::{BufReader, BufWriter, ErrorKind, Read, Write};

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use crate::common::{HTTPVersion, Header, HeaderField, Method, StatusCode};
use crate::connections::{Cut, PaceClock, PacedReader};
use crate::util::{Answer, AnswerBuf, RefinedTcpStream};
use crate::util::{SequentialReader, SequentialReaderBuilder, SequentialWriterBuilder};
use crate::{Request, ServerOptions};

/// A ClientConnection is an object that will store a socket to a client
/// and return Request objects.
pub struct ClientConnection {
    // address of the client
    remote_addr: IoResult<Option<SocketAddr>>,

    // sequence of Readers to the stream, so that the data is not read in
    //  the wrong order
    source: SequentialReaderBuilder<BufReader<PacedReader<RefinedTcpStream>>>,

    // sequence of Writers to the stream, to avoid writing response #2 before
    //  response #1
    sink: SequentialWriterBuilder<BufWriter<RefinedTcpStream>>,

    // Reader to read the next header from
    next_header_source: SequentialReader<BufReader<PacedReader<RefinedTcpStream>>>,

    // set to true if we know that the previous request is the last one
    no_more_requests: bool,

    // true if the connection goes through SSL
    secure: bool,

    // convapi: set by a request's body reader when that body ended early or was malformed (the
    // stream is then not at the start of a request), or by `Request::respond_closing`: no further
    // request is read.
    framing_broken: Arc<AtomicBool>,

    // convapi: the server's pre-read limit and head hook.
    options: ServerOptions,

    // convapi: where the connection's current request is, and how fast it arrives.
    clock: Arc<PaceClock>,

    // convapi: bytes of the current request head so far (`ServerOptions::max_head_bytes`).
    head_bytes: usize,

    // convapi: where the answers of this connection's requests come back to be written on its
    // own thread (`ServerOptions::answers_on_connection`), and whether one is still out.
    answers: Option<(Sender<Answer>, Receiver<Answer>)>,
    answer_out: bool,
}

/// Error that can happen when reading a request.
#[derive(Debug)]
enum ReadError {
    /// convapi: the request cannot be trusted or served. Answered with this status, an
    /// explanation and `Connection: close`, then the connection is closed: where the next request
    /// would start is unknown.
    Refused(StatusCode, &'static str),
    /// the client sent an unrecognized `Expect` header
    ExpectationFailed(HTTPVersion),
    ReadIoError(IoError),
}

fn bad_request(why: &'static str) -> ReadError {
    ReadError::Refused(StatusCode(400), why)
}

/// Empty lines accepted before a request line (RFC 9112 §2.2: some clients send a CRLF after a
/// body).
const MAX_EMPTY_LINES: usize = 4;

impl ClientConnection {
    /// Creates a new `ClientConnection` that takes ownership of the `TcpStream`.
    pub fn new(
        write_socket: RefinedTcpStream,
        mut read_socket: RefinedTcpStream,
        options: ServerOptions,
        clock: Arc<PaceClock>,
    ) -> ClientConnection {
        let remote_addr = read_socket.peer_addr();
        let secure = read_socket.secure();

        let read_socket = PacedReader::new(read_socket, clock.clone(), options.min_rate);
        let mut source = SequentialReaderBuilder::new(BufReader::with_capacity(1024, read_socket));
        let first_header = source.next().unwrap();
        let answers = options.answers_on_connection.then(channel);

        ClientConnection {
            source,
            sink: SequentialWriterBuilder::new(BufWriter::with_capacity(1024, write_socket)),
            remote_addr,
            next_header_source: first_header,
            no_more_requests: false,
            secure,
            framing_broken: Arc::new(AtomicBool::new(false)),
            options,
            clock,
            head_bytes: 0,
            answers,
            answer_out: false,
        }
    }

    /// convapi: waits for the answer of the request that is out, if any, and writes it; false
    /// when the connection must end (nothing came, or writing failed). The
    /// write blocks this thread only: at the socket's write timeout, or when the application
    /// shuts the socket down, it fails and the connection ends.
    fn write_answer(&mut self) -> bool {
        if !std::mem::take(&mut self.answer_out) {
            return true;
        }
        let Some((_, answers)) = &self.answers else {
            return true;
        };
        let Ok(answer) = answers.recv() else {
            return false;
        };
        let written = !answer.bytes.is_empty() && {
            let mut writer = self.sink.next().unwrap();
            writer
                .write_all(&answer.bytes)
                .and_then(|()| writer.flush())
                .is_ok()
        };
        // Drains the rest of a body nobody read, here rather than on the application's thread.
        drop(answer.body);
        if let Some(on_answered) = &self.options.on_answered {
            on_answered();
        }
        written
    }

    /// true if the connection is HTTPS
    pub fn secure(&self) -> bool {
        self.secure
    }

    /// Reads the next line of the request head from self.next_header_source, without its CRLF.
    ///
    /// convapi: CRLF is the only line terminator. Upstream ended lines only at CRLF but kept a bare
    /// LF or CR inside the line, so `X: a<LF>Y: b` was one header here and two for a proxy that
    /// ends lines at LF. A bare CR or LF, any other control character than HTAB, and a non-ASCII
    /// byte are refused (400) instead.
    fn read_next_line(&mut self) -> Result<Vec<u8>, ReadError> {
        let mut buf = Vec::new();

        loop {
            let byte = match self.next_header_source.by_ref().bytes().next() {
                Some(b) => b.map_err(ReadError::ReadIoError)?,
                None => {
                    return Err(ReadError::ReadIoError(IoError::new(
                        ErrorKind::ConnectionAborted,
                        "Unexpected EOF",
                    )))
                }
            };

            // convapi: a head that never ends is refused instead of growing in memory.
            self.head_bytes += 1;
            if self.options.max_head_bytes.is_some_and(|max| self.head_bytes > max) {
                return Err(ReadError::Refused(
                    StatusCode(431),
                    "request head too large",
                ));
            }

            match byte {
                b'\r' => {
                    let next = match self.next_header_source.by_ref().bytes().next() {
                        Some(b) => b.map_err(ReadError::ReadIoError)?,
                        None => {
                            return Err(ReadError::ReadIoError(IoError::new(
                                ErrorKind::ConnectionAborted,
                                "Unexpected EOF",
                            )))
                        }
                    };
                    return if next == b'\n' {
                        Ok(buf)
                    } else {
                        Err(bad_request("bare CR in the request head"))
                    };
                }
                b'\n' => return Err(bad_request("bare LF in the request head")),
                b'\t' => buf.push(byte),
                0..=31 | 127 => return Err(bad_request("control character in the request head")),
                128..=255 => return Err(bad_request("non-ASCII byte in the request head")),
                _ => buf.push(byte),
            }
        }
    }

    /// Reads a request from the stream.
    /// Blocks until the header has been read.
    fn read(&mut self) -> Result<Request, ReadError> {
        // convapi: the previous request's body must have ended where its framing said; otherwise
        // what follows is not a request head (and may be one the client smuggled in the body).
        self.next_header_source.wait_turn();
        if self.framing_broken.load(Ordering::SeqCst) {
            return Err(ReadError::ReadIoError(IoError::new(
                ErrorKind::InvalidData,
                "the previous request's body ended early or was malformed, or its answer closed",
            )));
        }

        // convapi: from here until the request is handed over, the client's time is measured.
        self.clock.arm();
        self.head_bytes = 0;
        let request = self.read_request();
        self.clock.disarm();
        request
    }

    fn read_request(&mut self) -> Result<Request, ReadError> {
        let mut line = self.read_next_line()?;
        let mut empty_lines = 0;
        while line.is_empty() {
            empty_lines += 1;
            if empty_lines > MAX_EMPTY_LINES {
                return Err(bad_request("empty lines instead of a request line"));
            }
            line = self.read_next_line()?;
        }
        let (method, path, version) = parse_request_line(&line)?;

        let mut headers = Vec::new();
        loop {
            let line = self.read_next_line()?;
            if line.is_empty() {
                break;
            }
            headers.push(parse_header_line(&line)?);
        }

        // RFC 9112 §3.2: a server MUST answer 400 to an HTTP/1.1 request without Host and to any
        // request with more than one, or with an invalid value.
        let mut hosts = headers.iter().filter(|h| h.field.equiv("Host"));
        match (hosts.next(), hosts.next()) {
            (None, _) if version >= HTTPVersion(1, 1) => {
                return Err(bad_request("HTTP/1.1 request without Host"))
            }
            (Some(_), Some(_)) => return Err(bad_request("more than one Host")),
            (Some(h), None) if !h.value.as_bytes().iter().all(|&b| is_host_byte(b)) => {
                return Err(bad_request("invalid Host"))
            }
            _ => {}
        }

        // convapi: the head is complete; what the client sends next is the body, read below.
        if let Some(on_head) = &self.options.on_head {
            on_head(self.remote_addr.as_ref().ok().copied().flatten());
        }

        // building the writer for the request (convapi: or the buffer handed to this thread)
        let answer_buf = AnswerBuf::for_connection();
        let writer: Box<dyn Write + Send> = match &self.answers {
            Some(_) => Box::new(answer_buf.clone()),
            None => Box::new(self.sink.next().unwrap()),
        };

        // follow-up for next potential request
        let mut data_source = self.source.next().unwrap();
        std::mem::swap(&mut self.next_header_source, &mut data_source);

        // building the next reader
        let request = crate::request::new_request(
            self.secure,
            method,
            path,
            version.clone(),
            headers,
            *self.remote_addr.as_ref().unwrap(),
            data_source,
            writer,
            self.framing_broken.clone(),
            self.options.preread_body_limit,
        )
        .map_err(|e| {
            use crate::request;
            match e {
                request::RequestCreationError::CreationIoError(e) => ReadError::ReadIoError(e),
                request::RequestCreationError::ExpectationFailed => {
                    ReadError::ExpectationFailed(version)
                }
                request::RequestCreationError::BadFraming(why) => bad_request(why),
                request::RequestCreationError::UnsupportedTransferCoding => ReadError::Refused(
                    StatusCode(501),
                    "the only transfer coding implemented is chunked",
                ),
            }
        })?;

        let request = match &self.answers {
            Some((to_connection, _)) => {
                self.answer_out = true;
                request.with_hand_off(answer_buf, to_connection.clone())
            }
            None => request,
        };
        // return the request
        Ok(request)
    }

    /// convapi: reports a connection the server ends because of one of its bounds.
    fn cut(&self, why: Cut) {
        if let Some(on_cut) = &self.options.on_cut {
            on_cut(why);
        }
    }

    /// convapi: answers a request tiny_http refuses itself, saying the connection closes (the
    /// caller closes it). Upstream sent no `Connection: close`, so a client could pipeline more.
    fn refuse(&mut self, status: StatusCode, why: &str, version: HTTPVersion) {
        use crate::Response;
        let mut writer = self.sink.next().unwrap();
        let response = if why.is_empty() {
            Response::new_empty(status).boxed()
        } else {
            Response::from_string(format!("{}: {why}\n", status.default_reason_phrase()))
                .with_status_code(status)
                .boxed()
        };
        response
            .with_connection_close()
            .raw_print(writer.by_ref(), version, &[], false, None)
            .ok();
        writer.flush().ok();
    }
}

impl Iterator for ClientConnection {
    type Item = Request;

    /// Blocks until the next Request is available.
    /// Returns None when no new Requests will come from the client.
    fn next(&mut self) -> Option<Request> {
        // convapi: the previous request's answer is written before anything else is read.
        if !self.write_answer() {
            return None;
        }

        // the client sent a "connection: close" header in this previous request
        //  or is using HTTP 1.0, meaning that no new request will come
        if self.no_more_requests {
            return None;
        }

        let rq = match self.read() {
            Err(ReadError::Refused(status, why)) => {
                if status.0 == 431 {
                    self.cut(Cut::HeadTooLarge);
                }
                self.refuse(status, why, HTTPVersion(1, 1));
                return None; // we don't know where the next request would start,
                             // se we have to close
            }

            Err(ReadError::ReadIoError(ref err)) if err.kind() == ErrorKind::TimedOut => {
                self.cut(self.clock.cut_reason());
                // request timeout
                self.refuse(StatusCode(408), "", HTTPVersion(1, 1));
                return None; // closing the connection
            }

            Err(ReadError::ExpectationFailed(ver)) => {
                self.refuse(StatusCode(417), "", ver);
                return None; // TODO: should be recoverable, but needs handling in case of body
            }

            // convapi: a socket timeout (`ServerOptions::socket_timeout`; EAGAIN where
            // upstream's branch above expected TimedOut, as on Windows) or the minimum rate: the
            // connection closes without an answer, as when nothing at all was sent.
            Err(ReadError::ReadIoError(ref err))
                if err.kind() == ErrorKind::WouldBlock || self.clock.too_slow() =>
            {
                self.cut(self.clock.cut_reason());
                return None;
            }

            Err(ReadError::ReadIoError(_)) => return None,

            Ok(rq) => rq,
        };

        // updating the status of the connection
        let connection_header = rq
            .headers()
            .iter()
            .find(|h| h.field.equiv("Connection"))
            .map(|h| h.value.as_str());

        let lowercase = connection_header.map(|h| h.to_ascii_lowercase());

        match lowercase {
            Some(ref val) if val.contains("close") => self.no_more_requests = true,
            Some(ref val) if val.contains("upgrade") => self.no_more_requests = true,
            Some(ref val)
                if !val.contains("keep-alive") && *rq.http_version() == HTTPVersion(1, 0) =>
            {
                self.no_more_requests = true
            }
            None if *rq.http_version() == HTTPVersion(1, 0) => self.no_more_requests = true,
            _ => (),
        };

        // returning the request
        Some(rq)
    }
}

/// tchar of RFC 9110 §5.6.2: what a method and a field name are made of.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// What a Host value (uri-host [":" port], RFC 3986) is made of.
fn is_host_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:[]%".contains(&b)
}

/// Parses the request line of the request.
/// eg. GET / HTTP/1.1
///
/// convapi: exactly `method SP request-target SP HTTP-version` (RFC 9112 §3). Upstream trimmed
/// the line and ignored anything after a third word. A well-formed version other than 1.0 and 1.1
/// is refused with 505 here, before any request exists: upstream answered it through a second
/// writer that waited for the request's own, forever, leaking the thread and the socket.
fn parse_request_line(line: &[u8]) -> Result<(Method, String, HTTPVersion), ReadError> {
    let mut parts = line.split(|&b| b == b' ');
    let (method, target, version) = match (parts.next(), parts.next(), parts.next(), parts.next())
    {
        (Some(m), Some(t), Some(v), None) => (m, t, v),
        _ => return Err(bad_request("malformed request line")),
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Err(bad_request("malformed method"));
    }
    if target.is_empty() || !target.iter().all(|b| b.is_ascii_graphic()) {
        return Err(bad_request("malformed request target"));
    }
    let version = match version {
        b"HTTP/1.1" => HTTPVersion(1, 1),
        b"HTTP/1.0" => HTTPVersion(1, 0),
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            return Err(ReadError::Refused(
                StatusCode(505),
                "this server only supports HTTP/1.0 and HTTP/1.1",
            ))
        }
        _ => return Err(bad_request("malformed HTTP version")),
    };
    // Both are ASCII, checked above.
    let method = std::str::from_utf8(method)
        .ok()
        .and_then(|m| m.parse().ok())
        .ok_or_else(|| bad_request("malformed method"))?;
    let target = String::from_utf8(target.to_vec()).map_err(|_| bad_request("malformed target"))?;
    Ok((method, target, version))
}

/// Parses one field line: `field-name ":" OWS field-value OWS` (RFC 9112 §5).
///
/// convapi: a line starting with whitespace (obs-fold) and whitespace before the colon are
/// refused (400), as RFC 9112 §5.1 and §5.2 require; upstream trimmed the line, so a folded line
/// became a header of its own.
fn parse_header_line(line: &[u8]) -> Result<Header, ReadError> {
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or_else(|| bad_request("header line without a colon"))?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(if line[0] == b' ' || line[0] == b'\t' {
            bad_request("obsolete line folding in the request head")
        } else {
            bad_request("malformed header name")
        });
    }
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = value.iter().position(|b| !is_ows(b)).unwrap_or(value.len());
    let end = value.iter().rposition(|b| !is_ows(b)).map_or(start, |i| i + 1);
    let value = &value[start..end];
    match (
        HeaderField::from_bytes(name.to_vec()),
        AsciiString::from_ascii(value.to_vec()),
    ) {
        (Ok(field), Ok(value)) => Ok(Header { field, value }),
        _ => Err(bad_request("malformed header")),
    }
}

#[cfg(test)]
mod test {
    use super::ReadError;

    #[test]
    fn test_parse_request_line() {
        let (method, path, ver) = super::parse_request_line(b"GET /hello HTTP/1.1").unwrap();

        assert!(method == crate::Method::Get);
        assert!(path == "/hello");
        assert!(ver == crate::common::HTTPVersion(1, 1));

        assert!(super::parse_request_line(b"GET /hello").is_err());
        assert!(super::parse_request_line(b"qsd qsd qsd").is_err());
        assert!(super::parse_request_line(b"GET /hello HTTP/1.1 x").is_err());
        assert!(super::parse_request_line(b"GET  /hello HTTP/1.1").is_err());
        assert!(matches!(
            super::parse_request_line(b"PRI * HTTP/2.0"),
            Err(ReadError::Refused(crate::StatusCode(505), _))
        ));
    }

    #[test]
    fn test_parse_header_line() {
        let h = super::parse_header_line(b"Content-Type: \ta/b \t").unwrap();
        assert!(h.field.equiv("content-type"));
        assert_eq!(h.value.as_str(), "a/b");
        assert!(super::parse_header_line(b" folded").is_err());
        assert!(super::parse_header_line(b"Host : x").is_err());
        assert!(super::parse_header_line(b": x").is_err());
    }
}
