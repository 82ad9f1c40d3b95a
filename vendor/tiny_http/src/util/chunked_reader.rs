//! convapi: a strict decoder of a `Transfer-Encoding: chunked` request body (RFC 9112 §7.1),
//! replacing `chunked_transfer::Decoder` on the request side.
//!
//! That decoder returned the end of the stream in the middle of a chunk as the end of the body (a
//! truncated body looked complete), accepted a chunk size with a sign or surrounding spaces, and
//! rejected a trailer section. This one accepts exactly `1*HEXDIG [chunk-ext] CRLF`, chunk data
//! followed by CRLF, and a last chunk followed by a trailer section (read and discarded, bounded).
//! Anything else, and an end of stream before the last chunk's final CRLF, is an error; every error
//! marks the connection's framing as broken, so that no further request is read from it. Dropping
//! the reader before the end drains the rest of the body, as `EqualReader` does, so that the next
//! request starts where this body ends.

use std::convert::TryFrom;
use std::io::{Error as IoError, ErrorKind, Read, Result as IoResult};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Longest chunk-size line (size, extensions) accepted; real clients send a few bytes.
const MAX_SIZE_LINE: usize = 1024;
/// Most bytes of trailer section accepted (it is discarded).
const MAX_TRAILERS: usize = 8 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before a chunk-size line.
    Size,
    /// In the data of a chunk, this many bytes left.
    Data(u64),
    /// After the data of a chunk, before its CRLF.
    DataEnd,
    /// The last chunk and its trailer section have been read.
    Done,
    /// An error was returned; the stream position is unknown.
    Failed,
}

pub struct ChunkedReader<R: Read> {
    reader: R,
    state: State,
    broken: Arc<AtomicBool>,
}

fn malformed(what: &str) -> IoError {
    IoError::new(
        ErrorKind::InvalidData,
        format!("malformed chunked body: {what}"),
    )
}

impl<R: Read> ChunkedReader<R> {
    pub fn new(reader: R, broken: Arc<AtomicBool>) -> ChunkedReader<R> {
        ChunkedReader {
            reader,
            state: State::Size,
            broken,
        }
    }

    fn byte(&mut self) -> IoResult<u8> {
        let mut b = [0u8; 1];
        loop {
            match self.reader.read(&mut b) {
                Ok(0) => {
                    return Err(IoError::new(
                        ErrorKind::UnexpectedEof,
                        "the connection ended before the end of the chunked body",
                    ))
                }
                Ok(_) => return Ok(b[0]),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn crlf(&mut self) -> IoResult<()> {
        match (self.byte()?, self.byte()?) {
            (b'\r', b'\n') => Ok(()),
            _ => Err(malformed("chunk data not followed by CRLF")),
        }
    }

    /// Reads one line up to CRLF, handing each byte before it to `each`, counting against
    /// `budget`. A bare CR, a bare LF or another control character than HTAB is an error.
    fn line(&mut self, budget: &mut usize, mut each: impl FnMut(u8) -> IoResult<()>) -> IoResult<()> {
        loop {
            let b = self.byte()?;
            *budget = budget
                .checked_sub(1)
                .ok_or_else(|| malformed("line too long"))?;
            match b {
                b'\r' => {
                    return if self.byte()? == b'\n' {
                        Ok(())
                    } else {
                        Err(malformed("bare CR"))
                    }
                }
                b'\n' => return Err(malformed("bare LF")),
                b'\t' => each(b)?,
                0..=31 | 127 => return Err(malformed("control character")),
                _ => each(b)?,
            }
        }
    }

    fn size_line(&mut self) -> IoResult<u64> {
        #[derive(PartialEq)]
        enum Part {
            Size,
            /// Whitespace after the size: only more of it or ";" may follow.
            Bws,
            Ext,
        }
        let mut size: u64 = 0;
        let mut digits = 0usize;
        let mut part = Part::Size;
        let mut budget = MAX_SIZE_LINE;
        self.line(&mut budget, |b| {
            // chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS value ] ): read past, not interpreted.
            match (&part, b) {
                (Part::Ext, _) => Ok(()),
                (Part::Size, _) if b.is_ascii_hexdigit() => {
                    digits += 1;
                    let d = u64::from((b as char).to_digit(16).unwrap_or(0));
                    size = size
                        .checked_mul(16)
                        .and_then(|s| s.checked_add(d))
                        .ok_or_else(|| malformed("chunk size overflows"))?;
                    Ok(())
                }
                (Part::Size | Part::Bws, b';') if digits > 0 => {
                    part = Part::Ext;
                    Ok(())
                }
                (Part::Size | Part::Bws, b' ' | b'\t') if digits > 0 => {
                    part = Part::Bws;
                    Ok(())
                }
                _ => Err(malformed("chunk size is not hexadecimal")),
            }
        })?;
        if digits == 0 || part == Part::Bws {
            return Err(malformed("missing chunk size"));
        }
        Ok(size)
    }

    fn trailers(&mut self) -> IoResult<()> {
        let mut budget = MAX_TRAILERS;
        loop {
            let mut len = 0usize;
            self.line(&mut budget, |_| {
                len += 1;
                Ok(())
            })?;
            if len == 0 {
                return Ok(());
            }
        }
    }

    fn step(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        loop {
            match self.state {
                State::Done => return Ok(0),
                State::Failed => return Err(malformed("an earlier read failed")),
                State::Size => {
                    let size = self.size_line()?;
                    if size == 0 {
                        self.trailers()?;
                        self.state = State::Done;
                    } else {
                        self.state = State::Data(size);
                    }
                }
                State::DataEnd => {
                    self.crlf()?;
                    self.state = State::Size;
                }
                State::Data(left) => {
                    if buf.is_empty() {
                        return Ok(0);
                    }
                    let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    let n = loop {
                        match self.reader.read(&mut buf[..want]) {
                            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                            other => break other?,
                        }
                    };
                    if n == 0 {
                        return Err(IoError::new(
                            ErrorKind::UnexpectedEof,
                            "the connection ended in the middle of a chunk",
                        ));
                    }
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                    return Ok(n);
                }
            }
        }
    }
}

impl<R: Read> Read for ChunkedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        let result = self.step(buf);
        if result.is_err() {
            self.state = State::Failed;
            self.broken.store(true, Ordering::SeqCst);
        }
        result
    }
}

impl<R: Read> Drop for ChunkedReader<R> {
    fn drop(&mut self) {
        let mut buf = [0u8; 8 * 1024];
        while matches!(self.read(&mut buf), Ok(n) if n > 0) {}
    }
}

#[cfg(test)]
mod tests {
    use super::ChunkedReader;
    use std::io::{ErrorKind, Read};

    fn decode(input: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        ChunkedReader::new(input, Default::default())
            .read_to_end(&mut out)
            .map(|_| out)
    }

    #[test]
    fn valid_bodies() {
        assert_eq!(decode(b"3\r\nhel\r\nB\r\nlo world!!!\r\n0\r\n\r\n").unwrap(), b"hello world!!!");
        assert_eq!(decode(b"3;ext=1\r\nabc\r\n0\r\nX-T: y\r\n\r\n").unwrap(), b"abc");
        assert_eq!(decode(b"0\r\n\r\n").unwrap(), b"");
    }

    #[test]
    fn malformed_and_truncated_bodies_are_errors() {
        for bad in [
            &b"3\r\nhe"[..],
            b"3\r\nhel\r\n",
            b"3\r\nhel\r\n0\r\n",
            b"+3\r\nhel\r\n0\r\n\r\n",
            b" 3\r\nhel\r\n0\r\n\r\n",
            b"3\nhel\r\n0\r\n\r\n",
            b"3\r\nhelX\r\n0\r\n\r\n",
            b"g\r\n",
            b"\r\n",
            b"10000000000000000\r\n",
            b"3 x\r\nabc\r\n0\r\n\r\n",
        ] {
            let err = decode(bad).expect_err(&String::from_utf8_lossy(bad));
            assert!(
                matches!(err.kind(), ErrorKind::UnexpectedEof | ErrorKind::InvalidData),
                "{:?}",
                err
            );
        }
    }
}
