//! Operating-system calls, through libc directly: non-blocking TCP sockets,
//! interface enumeration and random bytes here; epoll in `epoll`; the
//! gathers for `sendmsg` and the copies to and from memory the host
//! handed in as [`MemRegion`]s in `memory`.
//!
//! This is the only module of the crate with `unsafe` code (with its two
//! submodules, which it allows for). Everything it
//! exports is safe to call: sockets own their descriptors, buffers are
//! borrowed slices, and memory regions are bounds-checked here; what stays
//! the caller's duty is the lifetime rule of [`MemRegion::new`] (use a
//! region only while its operation or registration is live).

#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use fireopal_abi::btl::MemRegion;

mod epoll;
mod memory;

pub(crate) use epoll::{Epoll, Readiness};
use memory::check_range;
pub(crate) use memory::{copy_from_region, copy_to_region, Gather, MAX_IOV};

/// Result of a libc call that returns -1 and sets errno on failure.
fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Same for calls returning `ssize_t`.
fn check_size(r: libc::ssize_t) -> io::Result<usize> {
    usize::try_from(r).map_err(|_| io::Error::last_os_error())
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EAGAIN) | Some(libc::EINPROGRESS)
    ) || e.kind() == io::ErrorKind::WouldBlock
}

/// A socket address in the C layout.
struct RawAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl RawAddr {
    fn empty() -> Self {
        Self {
            // SAFETY: sockaddr_storage is plain old data; all zeroes is a
            // valid (AF_UNSPEC) value.
            storage: unsafe { std::mem::zeroed() },
            len: size_of::<libc::sockaddr_storage>() as libc::socklen_t,
        }
    }

    fn from_std(addr: &SocketAddr) -> Self {
        let mut raw = Self::empty();
        match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for
                // every sockaddr type.
                unsafe {
                    std::ptr::write(
                        std::ptr::addr_of_mut!(raw.storage).cast::<libc::sockaddr_in>(),
                        sin,
                    );
                }
                raw.len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: as above.
                unsafe {
                    std::ptr::write(
                        std::ptr::addr_of_mut!(raw.storage).cast::<libc::sockaddr_in6>(),
                        sin6,
                    );
                }
                raw.len = size_of::<libc::sockaddr_in6>() as libc::socklen_t;
            }
        }
        raw
    }

    fn ptr(&self) -> *const libc::sockaddr {
        std::ptr::addr_of!(self.storage).cast()
    }

    fn ptr_mut(&mut self) -> *mut libc::sockaddr {
        std::ptr::addr_of_mut!(self.storage).cast()
    }

    fn to_std(&self) -> Option<SocketAddr> {
        // SAFETY: `self.storage` is an initialised sockaddr_storage, so
        // reading `sockaddr` fields through `read_sockaddr` is sound.
        unsafe { read_sockaddr(self.ptr()) }.map(|(ip, port)| match ip {
            IpAddr::V4(v4) => SocketAddr::V4(SocketAddrV4::new(v4, port)),
            IpAddr::V6(v6) => SocketAddr::V6(SocketAddrV6::new(v6, port, 0, 0)),
        })
    }
}

/// The address and port of an IPv4 or IPv6 sockaddr.
///
/// # Safety
///
/// `sa` must be null or point to a sockaddr whose storage is at least as
/// large as the type its family names.
unsafe fn read_sockaddr(sa: *const libc::sockaddr) -> Option<(IpAddr, u16)> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: non-null and valid per the contract.
    let family = i32::from(unsafe { (*sa).sa_family });
    match family {
        libc::AF_INET => {
            // SAFETY: AF_INET means the storage holds a sockaddr_in;
            // read_unaligned copes with the byte-aligned ifaddrs storage.
            let sin = unsafe { std::ptr::read_unaligned(sa.cast::<libc::sockaddr_in>()) };
            Some((
                IpAddr::V4(Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes())),
                u16::from_be(sin.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: AF_INET6 means the storage holds a sockaddr_in6.
            let sin6 = unsafe { std::ptr::read_unaligned(sa.cast::<libc::sockaddr_in6>()) };
            Some((
                IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)),
                u16::from_be(sin6.sin6_port),
            ))
        }
        _ => None,
    }
}

/// Socket buffer sizes to ask for; 0 leaves the kernel's autotuning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BufferSizes {
    pub(crate) send: usize,
    pub(crate) recv: usize,
}

/// How an idle connection notices a peer that went silent without closing
/// it (its machine died, the link was cut): TCP keepalive probes after
/// `idle_s` seconds without traffic, `probes` of them `interval_s` apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Keepalive {
    pub(crate) idle_s: u32,
    pub(crate) interval_s: u32,
    pub(crate) probes: u32,
}

impl Keepalive {
    /// Longest idle time the kernel takes (`TCP_KEEPIDLE`).
    pub(crate) const MAX_IDLE_S: u32 = 32_767;
    /// Longest interval the kernel takes (`TCP_KEEPINTVL`).
    pub(crate) const MAX_INTERVAL_S: u32 = 32_767;
    /// Most probes the kernel takes (`TCP_KEEPCNT`).
    pub(crate) const MAX_PROBES: u32 = 127;
}

/// What the kernel knows of the peer's acknowledgements on a connection
/// (from `TCP_INFO`): enough to tell a peer whose machine stopped
/// answering from one that only stopped reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AckState {
    /// Segments sent and not acknowledged.
    pub(crate) unacked: u32,
    /// Retransmissions of the oldest unacknowledged segment in a row
    /// (reset by an acknowledgement that moves forward).
    pub(crate) retransmits: u8,
    /// Zero-window probes in a row left unanswered.
    pub(crate) probes: u8,
    /// Milliseconds since the last acknowledgement arrived.
    pub(crate) since_ack_ms: u32,
}

impl AckState {
    /// Whether the peer's machine is not answering: data is being
    /// retransmitted, or two window probes in a row went unanswered. A
    /// peer that only stops reading answers its window probes, and the
    /// first probe after a quiet spell is outstanding for a round trip,
    /// hence two.
    pub(crate) fn stalled(&self) -> bool {
        (self.unacked > 0 && self.retransmits > 0) || self.probes >= 2
    }
}

/// What a receive found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recv {
    /// This many bytes arrived.
    Data(usize),
    /// The peer closed its side.
    Closed,
    /// Nothing to read now.
    WouldBlock,
}

/// A non-blocking, close-on-exec TCP socket.
#[derive(Debug)]
pub(crate) struct Socket {
    fd: OwnedFd,
}

impl Socket {
    fn new(addr: &SocketAddr) -> io::Result<Self> {
        let domain = match addr {
            SocketAddr::V4(_) => libc::AF_INET,
            SocketAddr::V6(_) => libc::AF_INET6,
        };
        // SAFETY: plain system call; the result is checked.
        let fd = check(unsafe {
            libc::socket(
                domain,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        })?;
        // SAFETY: `fd` was just returned by socket() and is owned by no one
        // else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd })
    }

    fn set_int(&self, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
        // SAFETY: the option value points to a live c_int of the size given.
        check(unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                std::ptr::addr_of!(value).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        })
        .map(drop)
    }

    fn set_buffers(&self, sizes: BufferSizes) -> io::Result<()> {
        // Set before connect/listen so the window scale is negotiated for
        // the larger buffers.
        if sizes.send > 0 {
            let v = libc::c_int::try_from(sizes.send).unwrap_or(libc::c_int::MAX);
            self.set_int(libc::SOL_SOCKET, libc::SO_SNDBUF, v)?;
        }
        if sizes.recv > 0 {
            let v = libc::c_int::try_from(sizes.recv).unwrap_or(libc::c_int::MAX);
            self.set_int(libc::SOL_SOCKET, libc::SO_RCVBUF, v)?;
        }
        Ok(())
    }

    /// A socket listening on `addr` (port 0: the kernel picks one).
    pub(crate) fn listen(addr: SocketAddr, sizes: BufferSizes) -> io::Result<Self> {
        let s = Self::new(&addr)?;
        // Accepted sockets inherit the buffer sizes.
        s.set_buffers(sizes)?;
        if addr.is_ipv6() {
            s.set_int(libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)?;
        }
        let raw = RawAddr::from_std(&addr);
        // SAFETY: `raw` holds a sockaddr of length `raw.len`.
        check(unsafe { libc::bind(s.fd.as_raw_fd(), raw.ptr(), raw.len) })?;
        // SAFETY: plain system call on an owned descriptor.
        check(unsafe { libc::listen(s.fd.as_raw_fd(), 128) })?;
        Ok(s)
    }

    /// Starts connecting to `addr`; completion shows as writability.
    pub(crate) fn connect(addr: SocketAddr, sizes: BufferSizes) -> io::Result<Self> {
        let s = Self::new(&addr)?;
        s.set_buffers(sizes)?;
        s.set_nodelay()?;
        let raw = RawAddr::from_std(&addr);
        // SAFETY: `raw` holds a sockaddr of length `raw.len`.
        let r = check(unsafe { libc::connect(s.fd.as_raw_fd(), raw.ptr(), raw.len) });
        match r {
            Ok(_) => Ok(s),
            Err(e) if would_block(&e) => Ok(s),
            Err(e) => Err(e),
        }
    }

    /// The next pending connection, if any.
    pub(crate) fn accept(&self) -> io::Result<Option<(Self, Option<SocketAddr>)>> {
        let mut raw = RawAddr::empty();
        // SAFETY: `raw` has room for any sockaddr and `len` says so.
        let r = check(unsafe {
            libc::accept4(
                self.fd.as_raw_fd(),
                raw.ptr_mut(),
                &mut raw.len,
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        });
        match r {
            Ok(fd) => {
                // SAFETY: accept4 returned a new descriptor nobody else owns.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                Ok(Some((Self { fd }, raw.to_std())))
            }
            Err(e) if would_block(&e) => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sets how the connection notices a silent peer: keepalive probes
    /// when idle, and a bound on unacknowledged data (see
    /// [`set_keepalive`](Self::set_keepalive) and
    /// [`set_user_timeout`](Self::set_user_timeout)).
    pub(crate) fn set_liveness(
        &self,
        keepalive: Option<Keepalive>,
        user_timeout_ms: u32,
    ) -> io::Result<()> {
        self.set_keepalive(keepalive)?;
        self.set_user_timeout(user_timeout_ms)
    }

    /// Turns keepalive probing on with these settings (`None`: leaves the
    /// kernel's default, no probes).
    pub(crate) fn set_keepalive(&self, keepalive: Option<Keepalive>) -> io::Result<()> {
        let Some(k) = keepalive else {
            return Ok(());
        };
        let int = |v: u32| libc::c_int::try_from(v).unwrap_or(libc::c_int::MAX);
        self.set_int(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, int(k.idle_s.max(1)))?;
        self.set_int(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, int(k.interval_s))?;
        self.set_int(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, int(k.probes))?;
        self.set_int(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)
    }

    /// Fails the connection when sent data stays unacknowledged for
    /// `ms` milliseconds (`TCP_USER_TIMEOUT`; 0 leaves the kernel's
    /// retransmission limit, about fifteen minutes). The kernel applies it
    /// to a zero receive window too, so a peer that does not read for that
    /// long is failed as well.
    pub(crate) fn set_user_timeout(&self, ms: u32) -> io::Result<()> {
        if ms == 0 {
            return Ok(());
        }
        let v = libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX);
        self.set_int(libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, v)
    }

    /// Sets the connection's congestion control algorithm
    /// (`TCP_CONGESTION`). An unprivileged process may choose only those
    /// in [`allowed_congestion`].
    pub(crate) fn set_congestion(&self, name: &str) -> io::Result<()> {
        let len = libc::socklen_t::try_from(name.len())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: the option value points to `len` live bytes of `name`;
        // the kernel reads at most that many.
        check(unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_CONGESTION,
                name.as_ptr().cast(),
                len,
            )
        })
        .map(drop)
    }

    /// The connection's congestion control algorithm.
    pub(crate) fn congestion(&self) -> io::Result<String> {
        let mut buf = [0u8; CONGESTION_NAME_MAX];
        let mut len = buf.len() as libc::socklen_t;
        // SAFETY: `buf` has room for `len` bytes, which the kernel may
        // write and then sets `len` to what it wrote.
        check(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_CONGESTION,
                buf.as_mut_ptr().cast(),
                &mut len,
            )
        })?;
        let name = &buf[..(len as usize).min(buf.len())];
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        Ok(String::from_utf8_lossy(&name[..end]).into_owned())
    }

    /// Disables Nagle's algorithm: small messages leave at once.
    pub(crate) fn set_nodelay(&self) -> io::Result<()> {
        self.set_int(libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)
    }

    fn name(&self, peer: bool) -> io::Result<SocketAddr> {
        let mut raw = RawAddr::empty();
        // SAFETY: `raw` has room for any sockaddr and `len` says so.
        check(unsafe {
            if peer {
                libc::getpeername(self.fd.as_raw_fd(), raw.ptr_mut(), &mut raw.len)
            } else {
                libc::getsockname(self.fd.as_raw_fd(), raw.ptr_mut(), &mut raw.len)
            }
        })?;
        raw.to_std()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not an IP socket"))
    }

    /// The local address.
    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.name(false)
    }

    /// The remote address.
    pub(crate) fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.name(true)
    }

    fn get_int(&self, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
        let mut value: libc::c_int = 0;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `value` is a live c_int and `len` its size.
        check(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                std::ptr::addr_of_mut!(value).cast(),
                &mut len,
            )
        })?;
        Ok(value)
    }

    /// The connection's acknowledgement state (`TCP_INFO`).
    pub(crate) fn ack_state(&self) -> io::Result<AckState> {
        // SAFETY: tcp_info is plain old data; all zeroes is valid.
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: `info` is a live tcp_info and `len` its size; the kernel
        // writes at most `len` bytes.
        check(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                std::ptr::addr_of_mut!(info).cast(),
                &mut len,
            )
        })?;
        Ok(AckState {
            unacked: info.tcpi_unacked,
            retransmits: info.tcpi_retransmits,
            probes: info.tcpi_probes,
            since_ack_ms: info.tcpi_last_ack_recv,
        })
    }

    /// The pending error of a non-blocking connect, if any.
    pub(crate) fn take_error(&self) -> io::Result<Option<io::Error>> {
        let value = self.get_int(libc::SOL_SOCKET, libc::SO_ERROR)?;
        Ok((value != 0).then(|| io::Error::from_raw_os_error(value)))
    }

    /// Writes as much of `g` as the socket takes now, in one `sendmsg`
    /// (never raising SIGPIPE). `Ok(0)` means the socket is full.
    pub(crate) fn send_gather<const N: usize>(&self, g: &Gather<'_, N>) -> io::Result<usize> {
        let iov = g.iovecs();
        if iov.is_empty() {
            return Ok(0);
        }
        // SAFETY: msghdr is plain old data; all zeroes is a valid empty
        // header (glibc and musl both have private padding fields).
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_ptr().cast_mut();
        msg.msg_iovlen = iov.len() as _;
        loop {
            // SAFETY: each iovec points to memory valid for reads for the
            // lifetime `'a` of the gather (see `Gather::push*`).
            let r = unsafe { libc::sendmsg(self.fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
            match check_size(r) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if would_block(&e) => return Ok(0),
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes as much of `bytes` as the socket takes now.
    pub(crate) fn send(&self, bytes: &[u8]) -> io::Result<usize> {
        let mut g = Gather::<1>::new();
        g.push(bytes);
        self.send_gather(&g)
    }

    fn recv_raw(&self, ptr: *mut u8, len: usize) -> io::Result<Recv> {
        if len == 0 {
            return Ok(Recv::Data(0));
        }
        loop {
            // SAFETY: the callers guarantee `ptr..ptr+len` is valid for
            // writes and not aliased by a live reference.
            let r = unsafe { libc::recv(self.fd.as_raw_fd(), ptr.cast(), len, 0) };
            return match check_size(r) {
                Ok(0) => Ok(Recv::Closed),
                Ok(n) => Ok(Recv::Data(n)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if would_block(&e) => Ok(Recv::WouldBlock),
                Err(e) => Err(e),
            };
        }
    }

    /// Reads what has arrived into `buf`.
    pub(crate) fn recv(&self, buf: &mut [u8]) -> io::Result<Recv> {
        self.recv_raw(buf.as_mut_ptr(), buf.len())
    }

    /// Reads what has arrived, at most `len` bytes, straight into
    /// `region` at `offset`. The range is bounds-checked; the region must
    /// be live (see the module docs).
    pub(crate) fn recv_into_region(
        &self,
        region: &MemRegion,
        offset: usize,
        len: usize,
    ) -> io::Result<Recv> {
        check_range(region, offset, len)?;
        // In range per the check; writable per `MemRegion::new`'s
        // contract for as long as the region is live.
        self.recv_raw(region.as_ptr().wrapping_add(offset), len)
    }
}

impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// One address of one network interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InterfaceAddress {
    pub(crate) name: String,
    pub(crate) ip: IpAddr,
    pub(crate) prefix_len: u8,
    pub(crate) up: bool,
    pub(crate) loopback: bool,
}

/// Longest congestion control name the kernel keeps, with its NUL
/// (`TCP_CA_NAME_MAX`).
pub(crate) const CONGESTION_NAME_MAX: usize = 16;

/// Whether the kernel lets this process give a connection the congestion
/// control `name`: tried on a socket that never connects.
pub(crate) fn try_congestion(name: &str) -> io::Result<()> {
    let s = Socket::new(&SocketAddr::from(([127, 0, 0, 1], 0)))?;
    s.set_congestion(name)
}

/// The congestion control algorithms an unprivileged process may choose
/// (`net.ipv4.tcp_allowed_congestion_control`), for error messages.
pub(crate) fn allowed_congestion() -> Option<String> {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Every IPv4 and IPv6 address of every interface, in the kernel's order.
pub(crate) fn interface_addresses() -> io::Result<Vec<InterfaceAddress>> {
    let mut head = MaybeUninit::<*mut libc::ifaddrs>::uninit();
    // SAFETY: getifaddrs writes the list head on success.
    check(unsafe { libc::getifaddrs(head.as_mut_ptr()) })?;
    // SAFETY: initialised by the successful call above.
    let head = unsafe { head.assume_init() };
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, which
        // stays allocated until freeifaddrs below.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        // SAFETY: ifa_addr is null or a sockaddr sized for its family.
        let Some((ip, _)) = (unsafe { read_sockaddr(ifa.ifa_addr) }) else {
            continue;
        };
        // SAFETY: as above, for the netmask.
        let prefix_len = match unsafe { read_sockaddr(ifa.ifa_netmask) } {
            Some((IpAddr::V4(m), _)) => u32::from(m).count_ones() as u8,
            Some((IpAddr::V6(m), _)) => u128::from(m).count_ones() as u8,
            None => match ip {
                IpAddr::V4(_) => 32,
                IpAddr::V6(_) => 128,
            },
        };
        if ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_name is a NUL-terminated string owned by
        // the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let flags = ifa.ifa_flags;
        out.push(InterfaceAddress {
            name,
            ip,
            prefix_len,
            up: flags & libc::IFF_UP as libc::c_uint != 0,
            loopback: flags & libc::IFF_LOOPBACK as libc::c_uint != 0,
        });
    }
    // SAFETY: `head` came from getifaddrs and is freed once; no reference
    // into the list outlives this point (names were copied).
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Fills `buf` from the kernel's random source.
pub(crate) fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: `rest` is valid for writes of its length.
        let r = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        match check_size(r) {
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_is_retransmission_or_two_unanswered_window_probes() {
        let state = |unacked, retransmits, probes| AckState {
            unacked,
            retransmits,
            probes,
            since_ack_ms: 5000,
        };
        // What the kernel showed with the network cut under data in
        // flight, and under a shut window.
        assert!(state(1, 2, 0).stalled());
        assert!(state(0, 0, 2).stalled());
        // Idle; sent and not yet retransmitted; one probe out to a peer
        // that does not read (answered within a round trip).
        assert!(!state(0, 0, 0).stalled());
        assert!(!state(3, 0, 0).stalled());
        assert!(!state(0, 0, 1).stalled());
    }

    #[test]
    fn acknowledged_data_reads_as_answering() {
        let sizes = BufferSizes { send: 0, recv: 0 };
        let listener = Socket::listen("127.0.0.1:0".parse().unwrap(), sizes).unwrap();
        let client = Socket::connect(listener.local_addr().unwrap(), sizes).unwrap();
        let mut g = Gather::<1>::new();
        assert!(g.push(b"ping"));
        // Once connected, the bytes go out and the peer's kernel
        // acknowledges them (nobody reads them).
        let state = (0..2000)
            .find_map(|_| {
                std::thread::sleep(std::time::Duration::from_millis(1));
                if matches!(client.send_gather(&g), Ok(4)) {
                    g = Gather::<1>::new();
                }
                let s = client.ack_state().expect("TCP_INFO");
                (g.total() == 0 && s.unacked == 0).then_some(s)
            })
            .expect("the peer's kernel acknowledges");
        assert!(!state.stalled(), "{state:?}");
        assert!(state.since_ack_ms < 60_000, "{state:?}");
    }

    #[test]
    fn a_connection_takes_the_congestion_control_it_is_given() {
        let sizes = BufferSizes { send: 0, recv: 0 };
        let listener = Socket::listen("127.0.0.1:0".parse().unwrap(), sizes).unwrap();
        let client = Socket::connect(listener.local_addr().unwrap(), sizes).unwrap();
        // Every kernel has Reno and lets anyone choose it.
        client.set_congestion("reno").unwrap();
        assert_eq!(client.congestion().unwrap(), "reno");
        try_congestion("reno").unwrap();
        let e = client.set_congestion("no-such-cc").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
        assert_eq!(
            client.congestion().unwrap(),
            "reno",
            "unchanged by a refusal"
        );
        assert!(try_congestion("no-such-cc").is_err());
    }

    #[test]
    fn loopback_pair_moves_bytes_and_reports_close() {
        let sizes = BufferSizes { send: 0, recv: 0 };
        let l = Socket::listen("127.0.0.1:0".parse().unwrap(), sizes).unwrap();
        let addr = l.local_addr().unwrap();
        assert_ne!(addr.port(), 0);
        let c = Socket::connect(addr, sizes).unwrap();
        let mut server = None;
        for _ in 0..1000 {
            if let Some((s, from)) = l.accept().unwrap() {
                assert_eq!(from, Some(c.local_addr().unwrap()));
                server = Some(s);
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let server = server.expect("accepted");
        assert!(c.take_error().unwrap().is_none());
        assert_eq!(c.peer_addr().unwrap(), addr);
        let mut g = Gather::<4>::new();
        assert!(g.push(b"hello "));
        assert!(g.push(b""));
        assert!(g.push(b"world"));
        assert_eq!(g.total(), 11);
        assert_eq!(c.send_gather(&g).unwrap(), 11);
        let mut buf = [0u8; 32];
        let mut got = Vec::new();
        while got.len() < 11 {
            if let Recv::Data(n) = server.recv(&mut buf).unwrap() {
                got.extend_from_slice(&buf[..n]);
            }
        }
        assert_eq!(got, b"hello world");
        assert_eq!(server.recv(&mut buf).unwrap(), Recv::WouldBlock);
        drop(c);
        let mut closed = false;
        for _ in 0..1000 {
            if server.recv(&mut buf).unwrap() == Recv::Closed {
                closed = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(closed);
    }

    #[test]
    fn keepalive_settings_reach_the_socket() {
        let sizes = BufferSizes { send: 0, recv: 0 };
        let l = Socket::listen("127.0.0.1:0".parse().unwrap(), sizes).unwrap();
        let c = Socket::connect(l.local_addr().unwrap(), sizes).unwrap();
        let get = |level, name| c.get_int(level, name).unwrap();
        c.set_keepalive(None).unwrap();
        assert_eq!(get(libc::SOL_SOCKET, libc::SO_KEEPALIVE), 0);
        let k = Keepalive {
            idle_s: 7,
            interval_s: 3,
            probes: 5,
        };
        c.set_keepalive(Some(k)).unwrap();
        assert_eq!(get(libc::SOL_SOCKET, libc::SO_KEEPALIVE), 1);
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE), 7);
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL), 3);
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPCNT), 5);
        // The largest values the parameters allow are taken.
        let most = Keepalive {
            idle_s: Keepalive::MAX_IDLE_S,
            interval_s: Keepalive::MAX_INTERVAL_S,
            probes: Keepalive::MAX_PROBES,
        };
        c.set_keepalive(Some(most)).unwrap();
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPCNT), 127);
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT), 0);
        c.set_user_timeout(0).unwrap();
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT), 0);
        c.set_user_timeout(2500).unwrap();
        assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT), 2500);
    }

    #[test]
    fn loopback_interface_is_listed() {
        let list = interface_addresses().unwrap();
        assert!(
            list.iter().any(|a| a.loopback
                && a.ip == IpAddr::V4(Ipv4Addr::LOCALHOST)
                && a.prefix_len == 8),
            "{list:?}"
        );
    }

    #[test]
    fn random_bytes_differ() {
        let mut a = [0u8; 32];
        let mut b = [0u8; 32];
        random_bytes(&mut a).unwrap();
        random_bytes(&mut b).unwrap();
        assert_ne!(a, b);
    }
}
