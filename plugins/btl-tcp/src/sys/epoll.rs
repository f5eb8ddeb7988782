//! An epoll instance: which of the module's sockets can be read or
//! written.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::check;

/// One readiness report from [`Epoll::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Readiness {
    /// The token given at registration.
    pub(crate) token: u64,
    /// Data (or end of stream, or an error) can be read.
    pub(crate) readable: bool,
    /// Bytes can be written (or a connect finished).
    pub(crate) writable: bool,
}

/// An epoll instance (level-triggered).
#[derive(Debug)]
pub(crate) struct Epoll {
    fd: OwnedFd,
    buf: Vec<libc::epoll_event>,
}

impl Epoll {
    /// An instance that reports at most `capacity` descriptors per wait.
    pub(crate) fn new(capacity: usize) -> io::Result<Self> {
        // SAFETY: plain system call; the result is checked.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        Ok(Self {
            // SAFETY: a new descriptor nobody else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            buf: vec![libc::epoll_event { events: 0, u64: 0 }; capacity.max(1)],
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, token: u64, write: bool) -> io::Result<()> {
        let mut events = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
        if write {
            events |= libc::EPOLLOUT as u32;
        }
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a live epoll_event; both descriptors are open.
        check(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) }).map(drop)
    }

    /// Watches `fd` for reading, and for writing when `write`.
    pub(crate) fn add(&self, fd: &impl AsRawFd, token: u64, write: bool) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd.as_raw_fd(), token, write)
    }

    /// Changes what `fd` is watched for.
    pub(crate) fn modify(&self, fd: &impl AsRawFd, token: u64, write: bool) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd.as_raw_fd(), token, write)
    }

    /// Reports ready descriptors into `out` (cleared first), waiting at
    /// most `timeout_ms` (0: not at all).
    pub(crate) fn wait(&mut self, out: &mut Vec<Readiness>, timeout_ms: i32) -> io::Result<()> {
        out.clear();
        let cap = libc::c_int::try_from(self.buf.len()).unwrap_or(libc::c_int::MAX);
        // SAFETY: `buf` has room for `cap` events.
        let r = unsafe {
            libc::epoll_wait(self.fd.as_raw_fd(), self.buf.as_mut_ptr(), cap, timeout_ms)
        };
        let n = match check(r) {
            Ok(n) => usize::try_from(n).unwrap_or(0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) => return Err(e),
        };
        let error_bits =
            (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32;
        for ev in self.buf.iter().take(n) {
            // Copies out of the (packed on x86-64) struct.
            let events = ev.events;
            let token = ev.u64;
            out.push(Readiness {
                token,
                readable: events & error_bits != 0,
                writable: events & (libc::EPOLLOUT as u32 | libc::EPOLLERR as u32) != 0,
            });
        }
        Ok(())
    }
}
