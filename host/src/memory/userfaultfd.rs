//! The userfaultfd memory monitor: one descriptor and one thread per
//! process, reporting the ranges that leave the process or lose their
//! pages (`munmap`, `mremap`, `madvise(DONTNEED/FREE/REMOVE)`, `brk`
//! shrinking) through a ring that every subscriber reads.
//!
//! # Why a thread, and what it may do
//!
//! The kernel holds a thread that unmaps watched memory until the event is
//! *read* from the descriptor, so someone other than that thread must read
//! it: a thread of our own, blocked in `poll`. Since an unmapping thread
//! may be inside the allocator (a `free` that trims the heap holds the
//! arena lock), the monitor thread must never wait for anything an
//! allocation may hold: between its `poll` and its next one it only reads
//! the descriptor without blocking, writes fixed slots of a static ring and
//! stores atomics. It allocates nothing, takes no lock and never touches a
//! registration cache; subscribers apply the ranges on their own threads.
//!
//! # Why a reader can trust what it drained
//!
//! `munmap` returns once its event was read, possibly before the monitor
//! thread published it. The thread therefore raises `reading` before its
//! first `read` and lowers it only after publishing everything it read; a
//! subscriber waits for `reading` to be low before it drains. So a range
//! unmapped before the subscriber's call is always in what it drains: it
//! was read under `reading`, and published before `reading` fell.
//!
//! # Watching
//!
//! Events come only for memory registered with the descriptor. A range is
//! registered in write-protect mode and never write-protected, so no page
//! fault is ever reported for it: registration only subscribes the mapping
//! to the events. It stays registered until it is unmapped (a later
//! registration of the same mapping is a cheap no-op).

// The system calls and ioctls of userfaultfd.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

// <linux/userfaultfd.h>, checked against the installed header by a test.
const UFFD_API: u64 = 0xAA;
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
const UFFD_FEATURE_EVENT_REMAP: u64 = 1 << 2;
const UFFD_FEATURE_EVENT_REMOVE: u64 = 1 << 3;
const UFFD_FEATURE_EVENT_UNMAP: u64 = 1 << 6;
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
const UFFD_EVENT_REMAP: u8 = 0x14;
const UFFD_EVENT_REMOVE: u8 = 0x15;
const UFFD_EVENT_UNMAP: u8 = 0x16;
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
const UFFD_PAGEFAULT_FLAG_WP: u64 = 1 << 1;
const UFFDIO_API: libc::c_ulong = 0xC018_AA3F;
const UFFDIO_REGISTER: libc::c_ulong = 0xC020_AA00;
const UFFDIO_WAKE: libc::c_ulong = 0x8010_AA02;
const UFFDIO_WRITEPROTECT: libc::c_ulong = 0xC018_AA06;

/// The events the monitor asks for.
const FEATURES: u64 =
    UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

/// `struct uffd_msg`: an event byte, padding, then 24 bytes of arguments
/// read here as three words (`remove`/`unmap`: start, end; `remap`: from,
/// to, len; `pagefault`: flags, address).
#[repr(C)]
#[derive(Clone, Copy)]
struct UffdMsg {
    event: u8,
    reserved: [u8; 7],
    arg: [u64; 3],
}

/// Events kept for subscribers; one that falls this far behind is told to
/// drop everything.
const RING_SLOTS: usize = 1024;

struct Slot {
    /// Number of the event in this slot (from 1), 0 while being written.
    stamp: AtomicU64,
    start: AtomicUsize,
    len: AtomicUsize,
}

struct Ring {
    slots: [Slot; RING_SLOTS],
    /// Number of the last event published.
    published: AtomicU64,
    /// Set by the monitor thread from before its first read of a batch
    /// until everything read is published.
    reading: AtomicBool,
}

static RING: Ring = Ring {
    slots: [const {
        Slot {
            stamp: AtomicU64::new(0),
            start: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
        }
    }; RING_SLOTS],
    published: AtomicU64::new(0),
    reading: AtomicBool::new(false),
};

/// The process's userfaultfd monitor, once started.
pub(crate) struct Userfaultfd {
    fd: OwnedFd,
    /// The process that started the thread: a forked child has the state
    /// but neither the thread nor the registrations.
    pid: u32,
}

static MONITOR: OnceLock<Result<Userfaultfd, String>> = OnceLock::new();

impl Userfaultfd {
    /// The process's monitor, started on first use; the error says why
    /// there is none.
    pub(crate) fn get() -> Result<&'static Userfaultfd, &'static str> {
        let started = MONITOR.get_or_init(|| Userfaultfd::start().map_err(|e| e.to_string()));
        match started {
            Ok(m) if m.pid == std::process::id() => Ok(m),
            Ok(_) => Err("inherited from the parent process across fork, without its thread"),
            Err(e) => Err(e.as_str()),
        }
    }

    fn start() -> Result<Self, StartError> {
        let fd = open_descriptor()?;
        let mut api = UffdioApi {
            api: UFFD_API,
            features: FEATURES,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_API reads and writes one `UffdioApi`, which lives
        // across the call.
        if unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_API, &mut api) } != 0 {
            return Err(StartError::Api(io::Error::last_os_error()));
        }
        if api.features & FEATURES != FEATURES {
            return Err(StartError::MissingEvents(api.features));
        }
        let raw = fd.as_raw_fd();
        std::thread::Builder::new()
            .name("fireopal-uffd".into())
            .spawn(move || monitor_thread(raw))
            .map_err(StartError::Thread)?;
        Ok(Self {
            fd,
            pid: std::process::id(),
        })
    }

    /// Registers the pages covering `[addr, addr + len)` for events.
    /// Fails for memory the kernel cannot watch (a file mapping that is not
    /// shared memory, a range with holes, memory another userfaultfd
    /// watches).
    pub(crate) fn watch(&self, addr: usize, len: usize) -> io::Result<()> {
        let page = page_size();
        let start = addr & !(page - 1);
        let end = addr
            .checked_add(len)
            .and_then(|e| e.checked_add(page - 1))
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?
            & !(page - 1);
        let mut reg = UffdioRegister {
            range: UffdioRange {
                start: start as u64,
                len: (end - start) as u64,
            },
            mode: UFFDIO_REGISTER_MODE_WP,
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER reads and writes one `UffdioRegister`,
        // which lives across the call; it changes no memory contents.
        if unsafe { libc::ioctl(self.fd.as_raw_fd(), UFFDIO_REGISTER, &mut reg) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Why the monitor did not start.
#[derive(Debug)]
enum StartError {
    Open {
        syscall: io::Error,
        device: io::Error,
    },
    Api(io::Error),
    MissingEvents(u64),
    Thread(io::Error),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Open { syscall, device } => write!(
                f,
                "userfaultfd refused ({syscall}) and /dev/userfaultfd unusable ({device}); \
                 allow it with vm.unprivileged_userfaultfd=1, access to /dev/userfaultfd or CAP_SYS_PTRACE"
            ),
            Self::Api(e) => write!(f, "UFFDIO_API failed: {e}"),
            Self::MissingEvents(have) => write!(
                f,
                "the kernel lacks the unmap/remove/remap events (features {have:#x})"
            ),
            Self::Thread(e) => write!(f, "cannot start the monitor thread: {e}"),
        }
    }
}

/// A userfaultfd descriptor: the system call in user-mode-only mode (all
/// the monitor needs, and what unprivileged processes may get), else
/// through `/dev/userfaultfd`.
fn open_descriptor() -> Result<OwnedFd, StartError> {
    let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: the system call takes only flags and returns a new
    // descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY) };
    if fd >= 0 {
        // SAFETY: a descriptor just returned to us and owned by no one else.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) });
    }
    let syscall = io::Error::last_os_error();
    // /dev/userfaultfd's USERFAULTFD_IOC_NEW, _IO(0xAA, 0x00).
    const USERFAULTFD_IOC_NEW: libc::c_ulong = 0xAA00;
    let device = match std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/userfaultfd")
    {
        Ok(dev) => {
            // SAFETY: the ioctl takes the flags by value and returns a new
            // descriptor or -1.
            let fd = unsafe {
                libc::ioctl(
                    dev.as_raw_fd(),
                    USERFAULTFD_IOC_NEW,
                    (flags | UFFD_USER_MODE_ONLY) as libc::c_ulong,
                )
            };
            if fd >= 0 {
                // SAFETY: a descriptor just returned to us.
                return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
            }
            io::Error::last_os_error()
        }
        Err(e) => e,
    };
    Err(StartError::Open { syscall, device })
}

/// The system's page size (4096 if it cannot be read as a power of two).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf only reads a configuration value.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// The monitor thread: waits for events, then reads and publishes every
/// one queued. Nothing between two polls allocates or locks.
fn monitor_thread(fd: libc::c_int) {
    let mut msgs = [UffdMsg {
        event: 0,
        reserved: [0; 7],
        arg: [0; 3],
    }; 32];
    let mut number = RING.published.load(Ordering::Relaxed);
    loop {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, alive across the call.
        let ready = unsafe { libc::poll(&mut pfd, 1, -1) };
        if ready < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        RING.reading.store(true, Ordering::SeqCst);
        loop {
            // SAFETY: reads whole messages into the array, which outlives
            // the call; the descriptor is non-blocking.
            let got =
                unsafe { libc::read(fd, msgs.as_mut_ptr().cast(), std::mem::size_of_val(&msgs)) };
            if got <= 0 {
                let err = io::Error::last_os_error();
                if got < 0 && err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                break;
            }
            let count = got as usize / std::mem::size_of::<UffdMsg>();
            for msg in &msgs[..count] {
                if let Some((start, len)) = handle(fd, msg) {
                    number += 1;
                    publish(number, start, len);
                }
            }
        }
        RING.reading.store(false, Ordering::Release);
    }
}

/// The range an event invalidates, if any. A write-protect fault cannot
/// happen (nothing is ever write-protected) but would hang its thread, so
/// one is answered by removing the protection.
fn handle(fd: libc::c_int, msg: &UffdMsg) -> Option<(usize, usize)> {
    let [a, b, c] = msg.arg;
    match msg.event {
        UFFD_EVENT_UNMAP | UFFD_EVENT_REMOVE => Some((a as usize, b.saturating_sub(a) as usize)),
        UFFD_EVENT_REMAP => Some((a as usize, c as usize)),
        UFFD_EVENT_PAGEFAULT => {
            let page = page_size() as u64;
            let range = UffdioRange {
                start: b & !(page - 1),
                len: page,
            };
            if a & UFFD_PAGEFAULT_FLAG_WP != 0 {
                let mut wp = UffdioWriteprotect { range, mode: 0 };
                // SAFETY: reads and writes one struct alive across the call.
                unsafe { libc::ioctl(fd, UFFDIO_WRITEPROTECT, &mut wp) };
            } else {
                let mut wake = range;
                // SAFETY: reads one struct alive across the call.
                unsafe { libc::ioctl(fd, UFFDIO_WAKE, &mut wake) };
            }
            None
        }
        _ => None,
    }
}

fn publish(number: u64, start: usize, len: usize) {
    let slot = &RING.slots[(number % RING_SLOTS as u64) as usize];
    slot.stamp.store(0, Ordering::Relaxed);
    std::sync::atomic::fence(Ordering::Release);
    slot.start.store(start, Ordering::Relaxed);
    slot.len.store(len, Ordering::Relaxed);
    slot.stamp.store(number, Ordering::Release);
    RING.published.store(number, Ordering::Release);
}

/// One reader of the ring, with its own position.
#[derive(Debug)]
pub(crate) struct Subscription {
    /// Number of the next event to read.
    next: u64,
}

impl Subscription {
    /// A reader that sees events published from now on.
    pub(crate) fn new() -> Self {
        Self {
            next: RING.published.load(Ordering::Acquire) + 1,
        }
    }

    /// Whether [`drain`](Self::drain) may have anything to report: two
    /// atomic loads.
    #[inline]
    pub(crate) fn pending(&self) -> bool {
        RING.reading.load(Ordering::SeqCst) || RING.published.load(Ordering::Acquire) >= self.next
    }

    /// Calls `invalidate` for every range reported since the last call,
    /// including every range whose unmapping returned before this call.
    /// A reader that fell a whole ring behind gets the whole address space.
    pub(crate) fn drain(&mut self, mut invalidate: impl FnMut(usize, usize)) {
        // The monitor thread publishes without blocking once it has read,
        // so this wait is short; yield in case it was preempted.
        while RING.reading.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let last = RING.published.load(Ordering::Acquire);
        while self.next <= last {
            let slot = &RING.slots[(self.next % RING_SLOTS as u64) as usize];
            let stamp = slot.stamp.load(Ordering::Acquire);
            let (start, len) = (
                slot.start.load(Ordering::Relaxed),
                slot.len.load(Ordering::Relaxed),
            );
            std::sync::atomic::fence(Ordering::Acquire);
            if stamp != self.next || slot.stamp.load(Ordering::Relaxed) != self.next {
                // Overwritten: this reader lost events.
                invalidate(0, usize::MAX);
                self.next = last + 1;
                return;
            }
            invalidate(start, len);
            self.next += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_structures_have_the_sizes_of_the_header() {
        assert_eq!(std::mem::size_of::<UffdMsg>(), 32);
        assert_eq!(std::mem::size_of::<UffdioApi>(), 24);
        assert_eq!(std::mem::size_of::<UffdioRegister>(), 32);
        assert_eq!(std::mem::size_of::<UffdioWriteprotect>(), 24);
    }
}
