//! The supervisor's system calls: the crate's `unsafe` code but for `malloc.rs`'s one setting, on file descriptors it does not own.
//!
//! Every function here inspects or acts on a descriptor in place (`fstat`, `getsockname`,
//! `getpeername`, `getsockopt`, `ioctl(FIONREAD)`, `shutdown`, `send`). None duplicates or closes one:
//! closing *any* descriptor of a file drops every POSIX lock the process holds on it, and SQLite's
//! locks on the database, `-wal` and `-shm` files are such locks. Working in place also needs no free
//! descriptor, so the supervisor keeps working when the process has run out of them.
//! Everything but `shutdown` is for the Linux supervisor (`/proc/self/fd`, `TCP_INFO`,
//! `MSG_NOSIGNAL`) and is compiled only with it; elsewhere, and with the `portable-supervision`
//! feature, only shutting the listener down is left (`shutdown(2)` exists on every Unix).

#[cfg(all(target_os = "linux", not(feature = "portable-supervision")))]
use std::ffi::CStr;
#[cfg(all(target_os = "linux", not(feature = "portable-supervision")))]
use std::io;
use std::net::Shutdown;
#[cfg(all(target_os = "linux", not(feature = "portable-supervision")))]
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};

#[cfg(all(target_os = "linux", not(feature = "portable-supervision")))]
/// The open `/proc/self/fd` directory.
pub(super) struct Fds {
    dir: *mut libc::DIR,
}

#[cfg(all(target_os = "linux", not(feature = "portable-supervision")))]
// SAFETY: the raw pointer is only used while the mutex around `Fds` is held.
unsafe impl Send for Fds {}

#[cfg(all(target_os = "linux", not(feature = "portable-supervision")))]
impl Drop for Fds {
    fn drop(&mut self) {
        // SAFETY: opened by `Fds::open` and owned by this struct alone.
        unsafe {
            libc::closedir(self.dir);
        }
    }
}

#[cfg(all(target_os = "linux", not(feature = "portable-supervision")))]
impl Fds {
    pub(super) fn open() -> io::Result<Fds> {
        // SAFETY: a plain libc call with a valid NUL-terminated path; the result is checked.
        let dir = unsafe { libc::opendir(c"/proc/self/fd".as_ptr()) };
        if dir.is_null() {
            return Err(io::Error::last_os_error());
        }
        Ok(Fds { dir })
    }

    /// Descriptor numbers open in this process (without the directory's own).
    pub(super) fn list(&mut self) -> Vec<libc::c_int> {
        let mut out = Vec::new();
        // SAFETY: `dir` is a valid DIR* owned by self; entries are read before the next readdir.
        unsafe {
            let own = libc::dirfd(self.dir);
            libc::rewinddir(self.dir);
            loop {
                let ent = libc::readdir(self.dir);
                if ent.is_null() {
                    break;
                }
                let name = CStr::from_ptr((*ent).d_name.as_ptr());
                if let Some(fd) = name
                    .to_str()
                    .ok()
                    .and_then(|s| s.parse::<libc::c_int>().ok())
                {
                    if fd != own {
                        out.push(fd);
                    }
                }
            }
        }
        out
    }

    /// Runs `f` on descriptor `fd` when it is a socket. Never duplicates or closes it.
    pub(super) fn with_socket<T>(
        &mut self,
        fd: libc::c_int,
        f: impl FnOnce(libc::c_int) -> T,
    ) -> Option<T> {
        // SAFETY: fstat on a descriptor number only reads its metadata (EBADF if it is gone).
        let is_socket = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            libc::fstat(fd, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFSOCK
        };
        is_socket.then(|| f(fd))
    }
}

#[cfg(all(target_os = "linux", not(feature = "portable-supervision")))]
fn sockaddr_to_std(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match ss.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let a = unsafe { &*(ss as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                u32::from_be(a.sin_addr.s_addr).into(),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let a = unsafe { &*(ss as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                a.sin6_addr.s6_addr.into(),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(all(target_os = "linux", not(feature = "portable-supervision")))]
/// Local or peer address of a socket.
pub(super) fn address(fd: libc::c_int, peer: bool) -> Option<SocketAddr> {
    // SAFETY: the storage is large enough for any address and its length is passed along.
    unsafe {
        let mut ss: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let p = &mut ss as *mut _ as *mut libc::sockaddr;
        let rc = if peer {
            libc::getpeername(fd, p, &mut len)
        } else {
            libc::getsockname(fd, p, &mut len)
        };
        (rc == 0).then(|| sockaddr_to_std(&ss)).flatten()
    }
}

#[cfg(all(target_os = "linux", not(feature = "portable-supervision")))]
pub(super) fn is_listening(fd: libc::c_int) -> bool {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` describe a valid int buffer.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            &mut v as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    rc == 0 && v != 0
}

#[cfg(all(target_os = "linux", not(feature = "portable-supervision")))]
pub(super) fn bytes_received(fd: libc::c_int) -> u64 {
    // SAFETY: the kernel fills at most `len` bytes of the zeroed struct.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            &mut info as *mut _ as *mut libc::c_void,
            &mut len,
        );
        if rc == 0 {
            info.tcpi_bytes_received
        } else {
            0
        }
    }
}

#[cfg(all(target_os = "linux", not(feature = "portable-supervision")))]
/// Connections waiting in a listening socket's accept queue (Linux reports it for a listener in
/// `tcpi_unacked`). A healthy accept loop keeps it at zero; a queue that stays non-empty means
/// nobody accepts any more.
pub fn accept_queue_len(listener: &std::net::TcpListener) -> Option<u32> {
    listener_info(listener).map(|info| info.tcpi_unacked)
}

#[cfg(all(target_os = "linux", any(test, not(feature = "portable-supervision"))))]
/// `TCP_INFO` of a socket in `TCP_LISTEN`; `None` for any other socket, or when the call fails.
/// A listener's `tcpi_unacked` is its accept queue, `tcpi_sacked` its backlog.
fn listener_info(listener: &std::net::TcpListener) -> Option<libc::tcp_info> {
    use std::os::fd::AsRawFd;
    // SAFETY: the kernel fills at most `len` bytes of the zeroed struct; the fd is borrowed.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = libc::getsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            &mut info as *mut _ as *mut libc::c_void,
            &mut len,
        );
        (rc == 0 && info.tcpi_state == 10/* TCP_LISTEN */).then_some(info)
    }
}

#[cfg(all(target_os = "linux", not(feature = "portable-supervision")))]
pub(super) fn unread(fd: libc::c_int) -> u32 {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    let rc = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
    if rc == 0 {
        n.max(0) as u32
    } else {
        0
    }
}

#[cfg(all(target_os = "linux", not(feature = "portable-supervision")))]
pub(super) fn inode(fd: libc::c_int) -> u64 {
    // SAFETY: fstat fills the zeroed struct.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) == 0 {
            st.st_ino
        } else {
            0
        }
    }
}

pub(super) fn shutdown_fd(fd: libc::c_int, how: Shutdown) {
    let how = match how {
        Shutdown::Read => libc::SHUT_RD,
        Shutdown::Write => libc::SHUT_WR,
        Shutdown::Both => libc::SHUT_RDWR,
    };
    // SAFETY: shutdown(2) only changes the state of the socket; it closes no descriptor.
    unsafe {
        libc::shutdown(fd, how);
    }
}

/// How many finished handshakes the kernel may queue for `accept`. std's `bind` listens with 128: a
/// burst of a few hundred connections (a page view's pixel calls from many visitors at once, or
/// clients that open connections and send nothing) fills that while the accept thread starts
/// connection threads, and Linux then drops the next SYNs, so every client behind them, the
/// authenticated API's too, waits a full second for its SYN to be retransmitted. The kernel caps
/// the value at `net.core.somaxconn` (4096 on current kernels).
pub const LISTEN_BACKLOG: libc::c_int = 1024;

/// Sets the accept queue of an already listening socket to [`LISTEN_BACKLOG`]: `listen(2)` on a
/// socket that listens already only changes its backlog.
pub(super) fn widen_backlog(listener: &std::net::TcpListener) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: listen(2) on a borrowed descriptor; it closes nothing.
    if unsafe { libc::listen(listener.as_raw_fd(), LISTEN_BACKLOG) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Shuts the listening socket down: blocked and later `accept`s on it fail, and new connections
/// are refused. Its descriptors stay open (they are closed with their owners).
pub(super) fn shutdown_listener(listener: &std::net::TcpListener) {
    use std::os::fd::AsRawFd;
    shutdown_fd(listener.as_raw_fd(), Shutdown::Read);
}

#[cfg(all(target_os = "linux", not(feature = "portable-supervision")))]
/// Sends `bytes` on socket `fd` without blocking (`MSG_DONTWAIT`): a full send buffer drops the rest
/// rather than blocking the caller. Returns how many bytes went out.
pub(super) fn send_nonblocking(fd: libc::c_int, bytes: &[u8]) -> usize {
    let mut off = 0;
    while off < bytes.len() {
        // SAFETY: writes from a valid slice.
        let n = unsafe {
            libc::send(
                fd,
                bytes[off..].as_ptr() as *const libc::c_void,
                bytes.len() - off,
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if n <= 0 {
            break;
        }
        off += n as usize;
    }
    off
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The backlog Linux reports for a listener.
    fn backlog(listener: &std::net::TcpListener) -> u32 {
        listener_info(listener)
            .expect("a listening socket")
            .tcpi_sacked
    }

    #[test]
    fn the_listener_queues_a_burst_of_a_thousand_handshakes() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let before = backlog(&listener);
        widen_backlog(&listener).unwrap();
        let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
            .map(|s| s.trim().parse().unwrap())
            .unwrap_or(LISTEN_BACKLOG as u32);
        assert_eq!(backlog(&listener), (LISTEN_BACKLOG as u32).min(somaxconn));
        assert!(
            backlog(&listener) > before || somaxconn <= before,
            "{before}"
        );
    }
}
