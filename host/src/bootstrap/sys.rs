//! The system calls bootstrap needs that std does not offer: taking the
//! launcher's inherited socket, handing a socket to a child, `poll`,
//! signalling process groups, and turning signals into readable bytes.
//! Every `unsafe` block of the bootstrap lives here.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// Why the launcher's socket cannot be taken.
#[derive(Debug)]
pub(crate) enum TakeError {
    /// An earlier `init` in this process already owns it.
    AlreadyTaken,
    /// The descriptor is not open, or not a socket.
    Unusable(super::SocketError),
}

static SOCKET_TAKEN: AtomicBool = AtomicBool::new(false);

/// Takes ownership of the socket a launcher left open at `fd`, once per
/// process, and marks it close-on-exec so the rank's own children do not
/// inherit the job's connection.
pub(crate) fn take_inherited_socket(fd: RawFd) -> Result<UnixStream, TakeError> {
    if fd < 0 {
        return Err(TakeError::Unusable(super::SocketError::Negative));
    }
    // SAFETY: fstat only writes into the zeroed stat buffer we pass.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat buffer; a bad fd is an error
    // return, not undefined behaviour.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(TakeError::Unusable(super::SocketError::Os(
            io::Error::last_os_error(),
        )));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(TakeError::Unusable(super::SocketError::NotASocket));
    }
    if SOCKET_TAKEN.swap(true, Ordering::SeqCst) {
        return Err(TakeError::AlreadyTaken);
    }
    // SAFETY: F_SETFD on an open descriptor only changes its flags.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        return Err(TakeError::Unusable(super::SocketError::Os(
            io::Error::last_os_error(),
        )));
    }
    // SAFETY: the descriptor is open (fstat succeeded), is a socket, and the
    // launcher left it for this process; SOCKET_TAKEN makes this the only
    // owner the process ever creates, so it is closed exactly once.
    Ok(UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Makes `fd` survive the `exec` of `cmd` (it stays close-on-exec in the
/// launcher, so other children never inherit it).
pub(crate) fn inherit_fd(cmd: &mut Command, fd: RawFd) {
    // SAFETY: the closure runs between fork and exec and only calls fcntl,
    // which is async-signal-safe; it touches no memory of the parent.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        });
    }
}

/// Makes the child of `cmd` die (SIGKILL) when the launcher dies before
/// it, so no rank outlives a launcher that was killed outright and could
/// not stop its job. The kernel sends the signal when the thread that
/// forked ends: [`run_job`](super::launch::run_job) spawns and waits for
/// its ranks on one thread.
pub(crate) fn die_with_launcher(cmd: &mut Command) {
    let launcher = std::process::id();
    // SAFETY: the closure runs between fork and exec and only calls prctl
    // and getppid, which are async-signal-safe; it touches no memory of
    // the parent.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The launcher may have died before the request took effect.
            if u32::try_from(libc::getppid()).ok() != Some(launcher) {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Sends `signal` to the process group led by `pid` (each rank is started
/// as the leader of its own group, so this reaches its children too).
pub(crate) fn kill_group(pid: u32, signal: i32) -> io::Result<()> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(-pid, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The host name.
pub(crate) fn hostname() -> io::Result<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for `buf.len()` bytes.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(buf.get(..end).unwrap_or_default()).into_owned())
}

/// What to wait for on one descriptor.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Interest {
    pub(crate) fd: RawFd,
    pub(crate) write: bool,
}

/// What `poll` found on one descriptor.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Ready {
    /// Readable, or closed (read to find out which).
    pub(crate) read: bool,
    /// Writable, or closed.
    pub(crate) write: bool,
}

/// Waits until one of `fds` is ready or `timeout_ms` passes (-1: forever).
/// An interrupting signal returns all-not-ready.
pub(crate) fn poll(fds: &[Interest], timeout_ms: i32) -> io::Result<Vec<Ready>> {
    let mut raw: Vec<libc::pollfd> = fds
        .iter()
        .map(|i| libc::pollfd {
            fd: i.fd,
            events: if i.write {
                libc::POLLIN | libc::POLLOUT
            } else {
                libc::POLLIN
            },
            revents: 0,
        })
        .collect();
    let nfds = libc::nfds_t::try_from(raw.len())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `raw` is a valid array of `nfds` pollfd structures.
    let rc = unsafe { libc::poll(raw.as_mut_ptr(), nfds, timeout_ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![Ready::default(); raw.len()]);
        }
        return Err(e);
    }
    let gone = libc::POLLHUP | libc::POLLERR | libc::POLLNVAL;
    Ok(raw
        .iter()
        .map(|p| Ready {
            read: p.revents & (libc::POLLIN | gone) != 0,
            write: p.revents & (libc::POLLOUT | gone) != 0,
        })
        .collect())
}

/// Write end of the signal pipe, for the handler; -1 when none installed.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(signal: libc::c_int) {
    let fd = WAKE_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        let byte = u8::try_from(signal).unwrap_or(u8::MAX);
        // SAFETY: write is async-signal-safe and `byte` lives for the call.
        // A full pipe drops the byte, which is fine: one is enough to wake.
        unsafe {
            libc::write(fd, std::ptr::addr_of!(byte).cast(), 1);
        }
    }
}

/// Signals turned into bytes on a pipe, so a `poll` loop sees them. While
/// it lives, the handled signals no longer have their default effect; the
/// previous handlers come back on drop. One per process at a time.
#[derive(Debug)]
pub(crate) struct SignalPipe {
    read: OwnedFd,
    write: OwnedFd,
    previous: Vec<(libc::c_int, libc::sigaction)>,
}

impl SignalPipe {
    /// Catches `signals`; `Ok(None)` when another `SignalPipe` is live.
    pub(crate) fn install(signals: &[libc::c_int]) -> io::Result<Option<SignalPipe>> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let [r, w] = fds;
        // SAFETY: pipe2 just created both descriptors; nothing else owns them.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(r), OwnedFd::from_raw_fd(w)) };
        if WAKE_FD
            .compare_exchange(-1, write.as_raw_fd(), Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Ok(None);
        }
        let mut pipe = SignalPipe {
            read,
            write,
            previous: Vec::new(),
        };
        for &signal in signals {
            // SAFETY: an all-zero sigaction is a valid value to fill in.
            let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            // SAFETY: `action.sa_mask` is a valid sigset_t to clear.
            unsafe { libc::sigemptyset(&mut action.sa_mask) };
            // SAFETY: as above, zeroed sigaction is valid for the old value.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: both pointers are valid; the handler only reads an
            // atomic and calls write, both async-signal-safe.
            if unsafe { libc::sigaction(signal, &action, &mut old) } != 0 {
                return Err(io::Error::last_os_error()); // drop restores the rest
            }
            pipe.previous.push((signal, old));
        }
        Ok(Some(pipe))
    }

    /// The descriptor to poll for readability.
    pub(crate) fn fd(&self) -> RawFd {
        self.read.as_raw_fd()
    }

    /// The signals caught since the last call, oldest first.
    pub(crate) fn drain(&self) -> Vec<i32> {
        let mut caught = Vec::new();
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: `buf` is valid for `buf.len()` bytes.
            let n =
                unsafe { libc::read(self.read.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            let Ok(n) = usize::try_from(n) else { break };
            if n == 0 {
                break;
            }
            caught.extend(
                buf.get(..n)
                    .unwrap_or_default()
                    .iter()
                    .map(|&b| i32::from(b)),
            );
        }
        caught
    }
}

impl Drop for SignalPipe {
    fn drop(&mut self) {
        for (signal, old) in self.previous.drain(..).rev() {
            // SAFETY: `old` is the action sigaction returned for `signal`.
            unsafe { libc::sigaction(signal, &old, std::ptr::null_mut()) };
        }
        let _ = WAKE_FD.compare_exchange(
            self.write.as_raw_fd(),
            -1,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
}

/// The conventional name of a signal, for messages.
pub(crate) fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        _ => return None,
    })
}

/// The CPUs this process may run on, in increasing order.
pub(crate) fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain bits; all-zero is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET reads the set within its size for cpu < max.
    Ok((0..max)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// Pins process `pid` to one CPU.
pub(crate) fn bind_to_cpu(pid: u32, cpu: usize) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::other("pid out of range"))?;
    // SAFETY: as in `allowed_cpus`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes inside the set for cpu below its bit count,
    // which the caller's CPU (from `allowed_cpus`) is.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
