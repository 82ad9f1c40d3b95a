use std::io::Result as IoResult;
use std::io::{Error as IoError, ErrorKind, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::channel;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

/// A `Reader` that reads exactly the number of bytes from a sub-reader.
///
/// If the limit is reached, it returns EOF. If the limit is not reached
/// when the destructor is called, the remaining bytes will be read and
/// thrown away.
///
/// convapi: a stream that ends before the limit is an error (`UnexpectedEof`), not the end of the
/// body, and any error marks the connection's framing as broken (`broken`) so that no further
/// request is read from it.
pub struct EqualReader<R>
where
    R: Read,
{
    reader: R,
    size: usize,
    last_read_signal: Sender<IoResult<()>>,
    broken: Arc<AtomicBool>,
}

impl<R> EqualReader<R>
where
    R: Read,
{
    pub fn new(
        reader: R,
        size: usize,
        broken: Arc<AtomicBool>,
    ) -> (EqualReader<R>, Receiver<IoResult<()>>) {
        let (tx, rx) = channel();

        let r = EqualReader {
            reader,
            size,
            last_read_signal: tx,
            broken,
        };

        (r, rx)
    }
}

impl<R> Read for EqualReader<R>
where
    R: Read,
{
    fn read(&mut self, buf: &mut [u8]) -> IoResult<usize> {
        if self.size == 0 {
            return Ok(0);
        }

        let buf = if buf.len() < self.size {
            buf
        } else {
            &mut buf[..self.size]
        };

        match self.reader.read(buf) {
            // convapi: upstream returned this EOF as the end of the body, so a request cut short
            // was handed to the application as if complete.
            Ok(0) if !buf.is_empty() => {
                self.broken.store(true, Ordering::SeqCst);
                Err(IoError::new(
                    ErrorKind::UnexpectedEof,
                    "the connection ended before the Content-Length of the body",
                ))
            }
            Ok(len) => {
                self.size -= len;
                Ok(len)
            }
            Err(e) => {
                if e.kind() != ErrorKind::Interrupted {
                    self.broken.store(true, Ordering::SeqCst);
                }
                Err(e)
            }
        }
    }
}

impl<R> Drop for EqualReader<R>
where
    R: Read,
{
    fn drop(&mut self) {
        let mut remaining_to_read = self.size;
        // convapi: read the rest in pieces of at most 64 KiB. Upstream allocated the whole declared
        // length at once, so a request claiming a huge body aborted the process when dropped.
        let mut buf = vec![0; remaining_to_read.min(64 * 1024)];

        while remaining_to_read > 0 {
            let want = remaining_to_read.min(buf.len());
            match self.reader.read(&mut buf[..want]) {
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    self.broken.store(true, Ordering::SeqCst);
                    self.last_read_signal.send(Err(e)).ok();
                    break;
                }
                Ok(0) => {
                    // convapi: the body ended early, so the stream is not at a request boundary.
                    self.broken.store(true, Ordering::SeqCst);
                    self.last_read_signal.send(Ok(())).ok();
                    break;
                }
                Ok(other) => {
                    remaining_to_read -= other;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::EqualReader;
    use std::io::Read;

    #[test]
    fn test_limit() {
        use std::io::Cursor;

        let mut org_reader = Cursor::new("hello world".to_string().into_bytes());

        {
            let (mut equal_reader, _) = EqualReader::new(org_reader.by_ref(), 5, Default::default());

            let mut string = String::new();
            equal_reader.read_to_string(&mut string).unwrap();
            assert_eq!(string, "hello");
        }

        let mut string = String::new();
        org_reader.read_to_string(&mut string).unwrap();
        assert_eq!(string, " world");
    }

    #[test]
    fn test_not_enough() {
        use std::io::Cursor;

        let mut org_reader = Cursor::new("hello world".to_string().into_bytes());

        {
            let (mut equal_reader, _) = EqualReader::new(org_reader.by_ref(), 5, Default::default());

            let mut vec = [0];
            equal_reader.read_exact(&mut vec).unwrap();
            assert_eq!(vec[0], b'h');
        }

        let mut string = String::new();
        org_reader.read_to_string(&mut string).unwrap();
        assert_eq!(string, " world");
    }
}
