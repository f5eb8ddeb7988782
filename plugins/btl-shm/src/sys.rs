//! Operating-system calls of the transport: memfd segments, sealing,
//! fetching a peer's descriptor (pidfd_getfd, or its `/proc` entry), and
//! cross-memory reads and writes (process_vm_readv / writev).

// Every function here is a thin wrapper over one system call.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Seals every segment carries: its size never changes again, so a
/// mapping of it can never fault past a shrunk end (SIGBUS).
pub(crate) const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

fn check(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn owned(ret: libc::c_long) -> io::Result<OwnedFd> {
    let fd = check(ret)?;
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    // SAFETY: the call just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A new anonymous, sealable, close-on-exec memory file of `len` bytes,
/// sealed against any change of size.
pub(crate) fn memfd(name: &CStr, len: usize) -> io::Result<OwnedFd> {
    // SAFETY: `name` is a valid C string; the flags are plain bits.
    let fd = owned(unsafe {
        libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
    } as libc::c_long)?;
    let len =
        libc::off_t::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `fd` is an open descriptor owned here.
    check(unsafe { libc::ftruncate(fd.as_raw_fd(), len) } as libc::c_long)?;
    // SAFETY: as above; F_ADD_SEALS takes an int argument.
    check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) } as libc::c_long)?;
    Ok(fd)
}

/// Inode number, size and seals of an open file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileFacts {
    /// Inode number.
    pub(crate) ino: u64,
    /// Bytes.
    pub(crate) size: u64,
    /// Seals in force (`F_GET_SEALS`), 0 when the file cannot be sealed.
    pub(crate) seals: libc::c_int,
}

/// Facts of `fd`.
pub(crate) fn facts(fd: &OwnedFd) -> io::Result<FileFacts> {
    // SAFETY: an all-zero `stat` is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` is a valid out pointer.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } as libc::c_long)?;
    // SAFETY: F_GET_SEALS takes no argument.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    Ok(FileFacts {
        ino: st.st_ino,
        size: u64::try_from(st.st_size).unwrap_or(0),
        seals: seals.max(0),
    })
}

/// This process's id.
pub(crate) fn pid() -> u32 {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    u32::try_from(pid).unwrap_or(0)
}

/// A pidfd of process `pid`.
fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: pidfd_open takes a pid and flags and returns a descriptor.
    owned(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })
}

/// A handle on a peer's process that tells when it exits, whichever
/// process takes its pid later: a pidfd, or, on a kernel without
/// `pidfd_open` (before Linux 5.3, or a tool that does not pass it on),
/// the process's `/proc/<pid>` directory, whose lookups fail once the
/// process it was opened for is gone.
#[derive(Debug)]
pub(crate) enum ProcessHandle {
    Pidfd(OwnedFd),
    ProcDir(OwnedFd),
}

impl ProcessHandle {
    /// A handle on process `pid`.
    pub(crate) fn open(pid: u32) -> io::Result<Self> {
        match pidfd_open(pid) {
            Ok(fd) => Ok(Self::Pidfd(fd)),
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => Self::proc_dir(pid),
            Err(e) => Err(e),
        }
    }

    /// A handle on process `pid` through its `/proc` directory.
    fn proc_dir(pid: u32) -> io::Result<Self> {
        let path = format!("/proc/{pid}\0");
        let path = CStr::from_bytes_with_nul(path.as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `path` is a valid C string.
        let dir = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        owned(dir as libc::c_long).map(Self::ProcDir)
    }

    /// The pidfd, where the handle is one.
    pub(crate) fn pidfd(&self) -> Option<RawFd> {
        match self {
            Self::Pidfd(fd) => Some(fd.as_raw_fd()),
            Self::ProcDir(_) => None,
        }
    }

    /// Whether the process exited (a zombie counts as exited).
    pub(crate) fn exited(&self) -> bool {
        match self {
            Self::Pidfd(fd) => process_exited(fd.as_raw_fd()),
            Self::ProcDir(dir) => proc_dir_exited(dir.as_raw_fd()),
        }
    }
}

/// Whether the process whose `/proc` directory is `dir` exited: its
/// `stat` cannot be opened any more, or says it is a zombie.
fn proc_dir_exited(dir: RawFd) -> bool {
    // SAFETY: a valid C string, relative to a directory descriptor.
    let stat = unsafe { libc::openat(dir, c"stat".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    let Ok(stat) = owned(stat as libc::c_long) else {
        return true;
    };
    let mut buf = [0u8; 512];
    // SAFETY: `buf` is valid for writes of its length.
    let n = unsafe { libc::read(stat.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    let Ok(n) = usize::try_from(n) else {
        return true;
    };
    // "pid (comm) S ...": the state follows the last ')', which the
    // command name may itself contain.
    let text = &buf[..n.min(buf.len())];
    match text.iter().rposition(|&b| b == b')') {
        Some(i) => matches!(text.get(i + 2), Some(b'Z' | b'X')),
        None => false,
    }
}

/// A duplicate of descriptor `fd` of process `pid`: through `pidfd_getfd`
/// where `pidfd` is given (a raw descriptor number: a closed or wrong one
/// only makes the call fail), else, or when that is refused, by opening
/// `/proc/<pid>/fd/<fd>` (which needs only read access to the process,
/// where `pidfd_getfd` needs the right to attach to it).
pub(crate) fn fetch_fd(pidfd: Option<RawFd>, pid: u32, fd: u32) -> io::Result<OwnedFd> {
    let Ok(target) = libc::c_int::try_from(fd) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    let first = match pidfd {
        // SAFETY: pidfd_getfd takes a pidfd, a descriptor number and flags.
        Some(pidfd) => owned(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, target, 0) }),
        None => Err(io::Error::from_raw_os_error(libc::ENOSYS)),
    };
    match first {
        Ok(fd) => Ok(fd),
        Err(e) if e.raw_os_error() == Some(libc::EBADF) => Err(e),
        Err(first_error) => {
            let path = format!("/proc/{pid}/fd/{fd}\0");
            let Ok(path) = CStr::from_bytes_with_nul(path.as_bytes()) else {
                return Err(first_error);
            };
            // SAFETY: `path` is a valid C string.
            owned(
                unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) }
                    as libc::c_long,
            )
            .map_err(|_| first_error)
        }
    }
}

/// Whether the process behind `pidfd` exited (its pidfd is readable).
fn process_exited(pidfd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no waiting.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLIN | libc::POLLHUP) != 0
}

/// Reads `len` bytes at `remote` in process `pid` into `local`.
///
/// # Safety
///
/// `local` must be valid for writes of `len` bytes, and nothing else may
/// access them during the call.
pub(crate) unsafe fn vm_read(pid: u32, remote: u64, local: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: forwarded contract; direction "read remote into local".
    unsafe { vm_transfer(pid, remote, local, len, false) }
}

/// Writes `len` bytes from `local` to `remote` in process `pid`.
///
/// # Safety
///
/// `local` must be valid for reads of `len` bytes during the call.
pub(crate) unsafe fn vm_write(
    pid: u32,
    remote: u64,
    local: *const u8,
    len: usize,
) -> io::Result<()> {
    // SAFETY: forwarded contract; the kernel only reads `local` here.
    unsafe { vm_transfer(pid, remote, local.cast_mut(), len, true) }
}

/// One direction of a cross-memory copy, looping over partial transfers
/// (the kernel stops at 2 GiB or at a fault).
///
/// # Safety
///
/// `local` must be valid for `len` bytes of the access the direction
/// implies (writes for a read, reads for a write).
unsafe fn vm_transfer(
    pid: u32,
    remote: u64,
    local: *mut u8,
    len: usize,
    write: bool,
) -> io::Result<()> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut done = 0usize;
    while done < len {
        let remote_at = remote
            .checked_add(done as u64)
            .and_then(|a| usize::try_from(a).ok())
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let local_iov = libc::iovec {
            // SAFETY: `done < len`, inside the caller's range.
            iov_base: unsafe { local.add(done) }.cast(),
            iov_len: len - done,
        };
        let remote_iov = libc::iovec {
            iov_base: remote_at as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: both iovecs describe `len - done` bytes; the local one
        // is valid per the caller's contract; the remote one is checked by
        // the kernel against the target's address space.
        let n = unsafe {
            if write {
                libc::process_vm_writev(pid, &local_iov, 1, &remote_iov, 1, 0)
            } else {
                libc::process_vm_readv(pid, &local_iov, 1, &remote_iov, 1, 0)
            }
        };
        let n = check(n as libc::c_long)?;
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        done += n as usize;
    }
    Ok(())
}

/// The node's boot id (`/proc/sys/kernel/random/boot_id`), zero when it
/// cannot be read.
pub(crate) fn boot_id() -> [u8; 16] {
    let mut out = [0u8; 16];
    let Ok(text) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") else {
        return out;
    };
    let hex: Vec<u8> = text
        .bytes()
        .filter_map(|c| (c as char).to_digit(16).map(|d| d as u8))
        .collect();
    for (i, pair) in hex.chunks(2).take(16).enumerate() {
        if let ([hi, lo], Some(slot)) = (pair, out.get_mut(i)) {
            *slot = hi << 4 | lo;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::{Command, Stdio};

    /// Both kinds of handle see a child that runs, that exited and waits
    /// to be reaped, and that was reaped.
    #[test]
    fn a_process_handle_sees_its_process_exit_with_or_without_a_pidfd() {
        // `cat` runs until its input closes: the test decides when it
        // exits, whatever the scheduler does.
        let mut child = Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn cat");
        let pid = child.id();
        let handles = [
            ProcessHandle::open(pid).expect("a handle"),
            ProcessHandle::proc_dir(pid).expect("a /proc handle"),
        ];
        assert!(matches!(handles[1], ProcessHandle::ProcDir(_)));
        assert!(handles[1].pidfd().is_none());
        for h in &handles {
            assert!(!h.exited(), "{h:?} saw a running process exit");
        }
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"bye\n").expect("write");
        drop(stdin);
        // Wait for the exit without reaping: the child stays a zombie.
        // SAFETY: `info` is valid for writes; WNOWAIT leaves the child.
        let waited = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        assert_eq!(waited, 0, "waitid: {}", io::Error::last_os_error());
        for h in &handles {
            assert!(h.exited(), "{h:?} missed a zombie");
        }
        child.wait().expect("reap");
        for h in &handles {
            assert!(h.exited(), "{h:?} missed a reaped process");
        }
    }

    #[test]
    fn fetching_a_descriptor_without_a_pidfd_goes_through_proc() {
        // SAFETY: a valid C string and flags.
        let memfd = unsafe { libc::memfd_create(c"fetch-test".as_ptr(), libc::MFD_CLOEXEC) };
        let file = owned(memfd as libc::c_long).expect("memfd");
        let fd = u32::try_from(file.as_raw_fd()).expect("fd");
        let copy = fetch_fd(None, std::process::id(), fd).expect("fetched through /proc");
        assert_ne!(copy.as_raw_fd(), file.as_raw_fd());
        let (a, b) = (facts(&file).expect("fstat"), facts(&copy).expect("fstat"));
        assert_eq!(a.ino, b.ino, "the copy is another file");
    }
}
