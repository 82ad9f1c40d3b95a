//! convapi: answers written by the connection's own thread (`ServerOptions::answers_on_connection`).
//!
//! A request's response writer is an [`AnswerBuf`]: the application's thread renders the whole
//! answer into memory, and dropping the request hands the bytes, with the rest of a body that was
//! not read before the request was handed over, to the connection's thread. That thread writes the
//! answer to the socket (bounded by the socket's write timeout, or until the application shuts the
//! socket down), drops the body reader there (which drains what is left of the body), and only
//! then reads the connection's next request. So the application's threads never wait on a client
//! that does not read its answers or sends a body nobody reads, and a connection has at most one
//! request in the application's hands: pipelined requests stay in the socket instead of queueing
//! in memory.

use std::io::{Read, Result as IoResult, Write};
use std::sync::{Arc, Mutex};

/// A request's answer on its way from the application's thread to the connection's.
pub struct Answer {
    /// The whole response as it goes on the wire.
    pub bytes: Vec<u8>,
    /// The body reader, when the body was not read before the request was handed over: dropped
    /// on the connection's thread, which drains what is left of it.
    pub body: Option<Box<dyn Read + Send + 'static>>,
}

/// The response writer of a request whose connection writes the answer itself: a buffer shared
/// with the request, which hands its bytes over when it is dropped.
#[derive(Clone)]
pub struct AnswerBuf(Arc<Mutex<Vec<u8>>>);

impl AnswerBuf {
    /// A buffer with room for a typical answer (a status line, a few headers and a small JSON
    /// body), allocated by the connection's thread, which also frees it: the application's
    /// thread writes into it without growing it, so no block crosses between threads' arenas.
    pub fn for_connection() -> AnswerBuf {
        AnswerBuf(Arc::new(Mutex::new(Vec::with_capacity(1024))))
    }

    /// The bytes written so far, leaving the buffer empty.
    pub fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Write for AnswerBuf {
    fn write(&mut self, buf: &[u8]) -> IoResult<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> IoResult<()> {
        Ok(())
    }
}
