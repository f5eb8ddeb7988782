//! The component's parameters and the choice of interfaces.
//!
//! Interfaces are chosen by `btl_tcp_if_include` or `btl_tcp_if_exclude`
//! (not both): comma-separated interface names (`lo`, `eth0`) or address
//! ranges in CIDR form (`192.0.2.0/24`, `fd00::/8`, or a single address).
//! Interfaces that are down, and IPv6 link-local addresses (which need a
//! scope to be dialled), are never used; IPv6 is used only when
//! `btl_tcp_ipv6` is set.

use std::net::IpAddr;
use std::time::Duration;

use fireopal_abi::host::Host;
use fireopal_abi::param::{ParamRegistrar, ParamValue};
use fireopal_abi::PluginError;
use fireopal_core::wire::tcp::address::{prefix_mask_v4, prefix_mask_v6, MAX_ENTRIES};

use crate::sys::{BufferSizes, InterfaceAddress, Keepalive};

/// Parameter names.
pub(crate) mod names {
    pub(crate) const IF_INCLUDE: &str = "btl_tcp_if_include";
    pub(crate) const IF_EXCLUDE: &str = "btl_tcp_if_exclude";
    pub(crate) const IPV6: &str = "btl_tcp_ipv6";
    pub(crate) const LINKS: &str = "btl_tcp_links";
    pub(crate) const EAGER_LIMIT: &str = "btl_tcp_eager_limit";
    pub(crate) const MAX_SEND_SIZE: &str = "btl_tcp_max_send_size";
    pub(crate) const SNDBUF: &str = "btl_tcp_sndbuf";
    pub(crate) const RCVBUF: &str = "btl_tcp_rcvbuf";
    pub(crate) const RECV_STAGING: &str = "btl_tcp_recv_staging";
    pub(crate) const WRITE_CHUNK: &str = "btl_tcp_write_chunk";
    pub(crate) const SENDI_BATCH: &str = "btl_tcp_sendi_batch";
    pub(crate) const HANDSHAKE_TIMEOUT: &str = "btl_tcp_handshake_timeout_ms";
    pub(crate) const MAX_UNAUTHENTICATED: &str = "btl_tcp_max_unauthenticated";
    pub(crate) const KEEPALIVE_TIME: &str = "btl_tcp_keepalive_time";
    pub(crate) const KEEPALIVE_INTVL: &str = "btl_tcp_keepalive_intvl";
    pub(crate) const KEEPALIVE_PROBES: &str = "btl_tcp_keepalive_probes";
    pub(crate) const USER_TIMEOUT: &str = "btl_tcp_user_timeout_ms";
    pub(crate) const ACK_TIMEOUT: &str = "btl_tcp_ack_timeout_ms";
    pub(crate) const PRIORITY: &str = "btl_tcp_priority";
    pub(crate) const LATENCY: &str = "btl_tcp_latency_ns";
    pub(crate) const BANDWIDTH: &str = "btl_tcp_bandwidth_mbps";
    pub(crate) const CONGESTION: &str = "btl_tcp_congestion";
}

/// Longest active-message header.
pub(crate) const MAX_HEADER: usize = 256;
/// Most links per interface.
pub(crate) const MAX_LINKS: u64 = 16;

/// Up to about 256 KiB one frame copied out of the receive buffer takes
/// less time than a rendezvous, whose announcement and read request each
/// cross the connection before the data (over loopback a 128 KiB tagged
/// message took 0.78× and a 256 KiB one 0.88× the time eager; from
/// 320 KiB the two are level). A network's longer round trip only
/// moves that point up.
const DEFAULT_EAGER_LIMIT: u64 = 256 << 10;
const DEFAULT_MAX_SEND_SIZE: u64 = 8 << 20;
const DEFAULT_SOCKET_BUFFER: u64 = 4 << 20;
const DEFAULT_RECV_STAGING: u64 = 128 << 10;
/// Just under one 64 KiB TCP segment (loopback MSS, GSO size). Under BBR,
/// frames queued behind each other are written in pieces of this size,
/// each pushed at once, so the acknowledgements that open BBR's small
/// window are taken in between (a window of 4 MiB gets ran at half the
/// speed written whole). Under Reno or CUBIC a burst goes whole: their
/// window lets the kernel push it as it copies, and pieces only cost
/// system calls (the same gets 1.16 times as fast whole). A lone frame
/// goes in one `sendmsg` under either.
const DEFAULT_WRITE_CHUNK: u64 = 60 << 10;
const DEFAULT_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
const DEFAULT_MAX_UNAUTHENTICATED: u64 = 64;
/// An idle connection to a peer silent for a minute (30 s, then 3 probes
/// 10 s apart) is failed: long enough for a busy machine, short enough that
/// a job whose node died does not hang. Probes are answered by the peer's
/// kernel, so a peer that computes without calling progress is not failed.
const DEFAULT_KEEPALIVE_TIME: u64 = 30;
const DEFAULT_KEEPALIVE_INTVL: u64 = 10;
const DEFAULT_KEEPALIVE_PROBES: u64 = 3;
/// A connection with data in flight to a peer whose machine answers
/// nothing for a minute is failed, the same bound keepalive sets for an
/// idle one (the kernel alone would retransmit for about fifteen minutes).
/// A peer that does not read still answers, so it is never failed by this.
const DEFAULT_ACK_TIMEOUT_MS: u64 = 60_000;
const DEFAULT_PRIORITY: u64 = 20;
const DEFAULT_LATENCY_NS: u64 = 10_000;
const DEFAULT_BANDWIDTH_MBPS: u64 = 10_000;

/// Declares every parameter.
pub(crate) fn register(r: &mut ParamRegistrar<'_>) -> Result<(), PluginError> {
    use names::*;
    let text = |s: &str| ParamValue::Str(s.into());
    r.register(
        IF_INCLUDE,
        text(""),
        "interfaces to use: comma-separated names or CIDR ranges (empty: all that are up)",
    )?;
    r.register(
        IF_EXCLUDE,
        text(""),
        "interfaces not to use: comma-separated names or CIDR ranges (exclusive with btl_tcp_if_include)",
    )?;
    r.register(IPV6, ParamValue::Bool(false), "also use IPv6 addresses")?;
    r.register(
        LINKS,
        ParamValue::UInt(1),
        "connections (modules) per interface, for striping large messages",
    )?;
    r.register(
        EAGER_LIMIT,
        ParamValue::Size(DEFAULT_EAGER_LIMIT),
        "largest header + payload of sendi and of one eager fragment",
    )?;
    r.register(
        MAX_SEND_SIZE,
        ParamValue::Size(DEFAULT_MAX_SEND_SIZE),
        "largest header + payload of one send; also the largest frame accepted from a peer",
    )?;
    r.register(
        SNDBUF,
        ParamValue::Size(DEFAULT_SOCKET_BUFFER),
        "socket send buffer size (0: kernel autotuning)",
    )?;
    r.register(
        RCVBUF,
        ParamValue::Size(DEFAULT_SOCKET_BUFFER),
        "socket receive buffer size (0: kernel autotuning)",
    )?;
    r.register(
        RECV_STAGING,
        ParamValue::Size(DEFAULT_RECV_STAGING),
        "per-connection receive buffer; larger frames are read straight into place",
    )?;
    r.register(
        WRITE_CHUNK,
        ParamValue::Size(DEFAULT_WRITE_CHUNK),
        "most bytes per sendmsg call while frames queue behind each other on a connection under BBR congestion control (0: no limit); each piece is pushed at once, so BBR's window opens while the sender still writes. Connections under other algorithms (Reno within the host, btl_tcp_congestion) and lone frames are written whole",
    )?;
    r.register(
        SENDI_BATCH,
        ParamValue::Bool(true),
        "a small message sent to a peer after a sendi wrote one to it, with no progress call between them, waits for the next progress and leaves with the others of its burst in one write (false: each is written at once)",
    )?;
    r.register(
        HANDSHAKE_TIMEOUT,
        ParamValue::UInt(DEFAULT_HANDSHAKE_TIMEOUT_MS),
        "milliseconds a connection may take to authenticate before it is dropped",
    )?;
    r.register(
        MAX_UNAUTHENTICATED,
        ParamValue::UInt(DEFAULT_MAX_UNAUTHENTICATED),
        "incoming connections held before they authenticate; beyond it, or beyond half of it from one address, the oldest is dropped to make room",
    )?;
    r.register(
        KEEPALIVE_TIME,
        ParamValue::UInt(DEFAULT_KEEPALIVE_TIME),
        "seconds a connection may be idle before keepalive probes start (0: no probes, so an idle connection to a peer whose machine died is never failed)",
    )?;
    r.register(
        KEEPALIVE_INTVL,
        ParamValue::UInt(DEFAULT_KEEPALIVE_INTVL),
        "seconds between keepalive probes",
    )?;
    r.register(
        KEEPALIVE_PROBES,
        ParamValue::UInt(DEFAULT_KEEPALIVE_PROBES),
        "unanswered probes after which the peer is failed",
    )?;
    r.register(
        USER_TIMEOUT,
        ParamValue::UInt(0),
        "milliseconds sent data may stay unacknowledged before the peer is failed (0: the kernel's limit, about fifteen minutes); also fails a peer that does not read for that long",
    )?;
    r.register(
        ACK_TIMEOUT,
        ParamValue::UInt(DEFAULT_ACK_TIMEOUT_MS),
        "milliseconds the peer's machine may leave data in flight unacknowledged (retransmitted, or its zero window unanswered) before the peer is failed (0: only the kernel's limit, about fifteen minutes); a peer that stops reading still acknowledges and is not failed",
    )?;
    r.register(
        CONGESTION,
        text("auto"),
        "congestion control of the connections: auto (reno between ranks of one host, the system's default to other hosts), system (the system's default everywhere), or an algorithm's name for every connection (unprivileged, one of net.ipv4.tcp_allowed_congestion_control)",
    )?;
    r.register(
        PRIORITY,
        ParamValue::UInt(DEFAULT_PRIORITY),
        "priority this component answers in query",
    )?;
    r.register(
        LATENCY,
        ParamValue::UInt(DEFAULT_LATENCY_NS),
        "one-way latency reported to the host, in nanoseconds",
    )?;
    r.register(
        BANDWIDTH,
        ParamValue::UInt(DEFAULT_BANDWIDTH_MBPS),
        "bandwidth of one link reported to the host, in MB/s",
    )
}

/// A bad parameter value.
pub(crate) use fireopal_abi::param::BadParam as ConfigError;

fn bad(param: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::new(param, reason)
}

/// One element of an include/exclude list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// An interface name.
    Name(String),
    /// An address range.
    Cidr { ip: IpAddr, prefix_len: u8 },
}

impl Pattern {
    fn parse(token: &str, param: &'static str) -> Result<Self, ConfigError> {
        let looks_like_address =
            token.contains('/') || token.contains(':') || token.parse::<IpAddr>().is_ok();
        if !looks_like_address {
            return Ok(Self::Name(token.to_owned()));
        }
        let (ip_text, prefix_text) = match token.split_once('/') {
            Some((ip, prefix)) => (ip, Some(prefix)),
            None => (token, None),
        };
        let ip: IpAddr = ip_text
            .parse()
            .map_err(|_| bad(param, format!("{token:?} is not an address or CIDR range")))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let prefix_len = match prefix_text {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= max)
                .ok_or_else(|| bad(param, format!("{token:?} has a bad prefix length")))?,
        };
        Ok(Self::Cidr { ip, prefix_len })
    }

    fn matches(&self, a: &InterfaceAddress) -> bool {
        match self {
            Self::Name(n) => *n == a.name,
            Self::Cidr { ip, prefix_len } => match (ip, a.ip) {
                (IpAddr::V4(net), IpAddr::V4(x)) => {
                    let m = prefix_mask_v4(*prefix_len);
                    u32::from(*net) & m == u32::from(x) & m
                }
                (IpAddr::V6(net), IpAddr::V6(x)) => {
                    let m = prefix_mask_v6(*prefix_len);
                    u128::from(*net) & m == u128::from(x) & m
                }
                _ => false,
            },
        }
    }
}

/// Which interfaces to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Selection {
    /// Every usable interface.
    All,
    /// Only the ones matching.
    Include(Vec<Pattern>),
    /// All but the ones matching.
    Exclude(Vec<Pattern>),
}

fn patterns(text: &str, param: &'static str) -> Result<Vec<Pattern>, ConfigError> {
    text.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| Pattern::parse(t, param))
        .collect()
}

impl Selection {
    /// Builds the selection from the two list parameters.
    pub(crate) fn from_params(include: &str, exclude: &str) -> Result<Self, ConfigError> {
        let inc = patterns(include, names::IF_INCLUDE)?;
        let exc = patterns(exclude, names::IF_EXCLUDE)?;
        match (inc.is_empty(), exc.is_empty()) {
            (true, true) => Ok(Self::All),
            (false, true) => Ok(Self::Include(inc)),
            (true, false) => Ok(Self::Exclude(exc)),
            (false, false) => Err(bad(
                names::IF_INCLUDE,
                "cannot be combined with btl_tcp_if_exclude",
            )),
        }
    }

    fn wants(&self, a: &InterfaceAddress) -> bool {
        match self {
            Self::All => true,
            Self::Include(p) => p.iter().any(|p| p.matches(a)),
            Self::Exclude(p) => !p.iter().any(|p| p.matches(a)),
        }
    }
}

/// Whether an IPv6 address is link-local (fe80::/10).
fn link_local_v6(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

/// The addresses to listen on, in the order given.
pub(crate) fn select_interfaces(
    all: &[InterfaceAddress],
    selection: &Selection,
    ipv6: bool,
) -> Vec<InterfaceAddress> {
    all.iter()
        .filter(|a| a.up)
        .filter(|a| ipv6 || a.ip.is_ipv4())
        .filter(|a| !link_local_v6(&a.ip) && !a.ip.is_multicast() && !a.ip.is_unspecified())
        .filter(|a| selection.wants(a))
        .cloned()
        .collect()
}

/// The congestion control algorithm of the module's connections
/// (`btl_tcp_congestion`).
///
/// Within a host the choice decides how fast a large write leaves: the
/// loopback device reorders segments written from both cores, so BBR (a
/// common system default) holds a window of about a megabyte and a 4 MiB
/// message waits on acknowledgements where Reno's window lets it go in
/// one write (a lone 4 MiB get takes nearly twice as long; the benchmark
/// document has the figures). Between hosts the network is the
/// administrator's to share, so the system's choice stays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Congestion {
    /// Reno to peers on this host, the system's default to others.
    Auto,
    /// The system's default everywhere.
    System,
    /// This algorithm on every connection.
    Named(String),
}

/// What `auto` chooses within a host: every kernel has it and lets
/// unprivileged processes choose it.
pub(crate) const HOST_CONGESTION: &str = "reno";

impl Congestion {
    /// Reads a value of `btl_tcp_congestion`.
    pub(crate) fn parse(value: &str) -> Result<Self, ConfigError> {
        match value.trim() {
            "" | "auto" => Ok(Self::Auto),
            "system" => Ok(Self::System),
            name if name.len() < crate::sys::CONGESTION_NAME_MAX
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') =>
            {
                Ok(Self::Named(name.to_owned()))
            }
            other => Err(bad(
                names::CONGESTION,
                format!(
                    "{other:?} is not auto, system or an algorithm's name (letters, digits, '_' or '-', at most {} bytes)",
                    crate::sys::CONGESTION_NAME_MAX - 1
                ),
            )),
        }
    }

    /// Fails, naming the parameter, when the kernel would refuse the
    /// algorithm this names (tried on a socket that never connects).
    pub(crate) fn check(&self) -> Result<(), PluginError> {
        let Self::Named(name) = self else {
            return Ok(());
        };
        crate::sys::try_congestion(name).map_err(|e| {
            let why = match e.raw_os_error() {
                Some(libc::ENOENT) => "this kernel has no such algorithm".to_owned(),
                Some(libc::EPERM) => "only a privileged process may choose it".to_owned(),
                _ => e.to_string(),
            };
            let allowed = crate::sys::allowed_congestion()
                .map(|a| format!("; allowed here: {a}"))
                .unwrap_or_default();
            PluginError::invalid(format!(
                "{}: cannot use {name:?}: {why}{allowed}",
                names::CONGESTION
            ))
        })
    }

    /// The algorithm for a connection to `peer`, where `host` lists this
    /// host's addresses; `None` leaves the system's default.
    pub(crate) fn for_peer(&self, peer: IpAddr, host: &[IpAddr]) -> Option<&str> {
        match self {
            Self::Auto if peer.is_loopback() || host.contains(&peer) => Some(HOST_CONGESTION),
            Self::Auto | Self::System => None,
            Self::Named(name) => Some(name),
        }
    }
}

/// `chunk` under BBR or an unknown algorithm, no limit under others.
fn chunk_under(chunk: usize, algorithm: Option<&str>) -> usize {
    match algorithm {
        Some("bbr") | None => chunk,
        Some(_) => usize::MAX,
    }
}

/// Resolved settings of one process's modules.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) selection: Selection,
    pub(crate) ipv6: bool,
    pub(crate) links: u8,
    pub(crate) eager_limit: usize,
    pub(crate) max_send_size: usize,
    pub(crate) buffers: BufferSizes,
    pub(crate) recv_staging: usize,
    /// Most bytes per `sendmsg` on a connection under BBR (`usize::MAX`:
    /// no limit); see [`Self::write_chunk_under`].
    pub(crate) write_chunk: usize,
    /// Whether bursts of small `sendi`s leave together (`btl_tcp_sendi_batch`).
    pub(crate) sendi_batch: bool,
    pub(crate) handshake_timeout: Duration,
    pub(crate) max_unauthenticated: usize,
    /// Probing of idle connections; `None` when `btl_tcp_keepalive_time`
    /// is 0.
    pub(crate) keepalive: Option<Keepalive>,
    /// `TCP_USER_TIMEOUT` in milliseconds (0: the kernel's default).
    pub(crate) user_timeout_ms: u32,
    /// How long a peer's machine may leave data in flight unacknowledged
    /// before the peer is failed; `None` when `btl_tcp_ack_timeout_ms`
    /// is 0.
    pub(crate) ack_timeout: Option<Duration>,
    pub(crate) priority: u32,
    pub(crate) latency_ns: u32,
    pub(crate) bandwidth_mbps: u32,
    /// Congestion control of the connections (`btl_tcp_congestion`).
    pub(crate) congestion: Congestion,
    /// Every address of this host's interfaces, which `auto` congestion
    /// control treats as this host (filled by [`Self::interfaces`]).
    pub(crate) host_ips: Vec<IpAddr>,
}

fn size(host: &Host, name: &'static str, default: u64) -> Result<usize, ConfigError> {
    let v = host.param_u64(name).unwrap_or(default);
    usize::try_from(v).map_err(|_| bad(name, "too large for this machine"))
}

fn small(host: &Host, name: &'static str, default: u64) -> Result<u32, ConfigError> {
    let v = host.param_u64(name).unwrap_or(default);
    u32::try_from(v).map_err(|_| bad(name, "must be below 2^32"))
}

/// A parameter that must lie in `low..=high`.
fn within(
    host: &Host,
    name: &'static str,
    default: u64,
    low: u32,
    high: u32,
) -> Result<u32, ConfigError> {
    let v = host.param_u64(name).unwrap_or(default);
    u32::try_from(v)
        .ok()
        .filter(|v| (low..=high).contains(v))
        .ok_or_else(|| bad(name, format!("must be between {low} and {high}")))
}

fn keepalive(host: &Host) -> Result<Option<Keepalive>, ConfigError> {
    use names::*;
    let idle_s = within(
        host,
        KEEPALIVE_TIME,
        DEFAULT_KEEPALIVE_TIME,
        0,
        Keepalive::MAX_IDLE_S,
    )?;
    let interval_s = within(
        host,
        KEEPALIVE_INTVL,
        DEFAULT_KEEPALIVE_INTVL,
        1,
        Keepalive::MAX_INTERVAL_S,
    )?;
    let probes = within(
        host,
        KEEPALIVE_PROBES,
        DEFAULT_KEEPALIVE_PROBES,
        1,
        Keepalive::MAX_PROBES,
    )?;
    Ok((idle_s > 0).then_some(Keepalive {
        idle_s,
        interval_s,
        probes,
    }))
}

impl Settings {
    /// The piece size of queued writes on a connection under the
    /// congestion control `algorithm` (`None`: unknown): the write chunk
    /// under BBR, none under others.
    pub(crate) fn write_chunk_under(&self, algorithm: Option<&str>) -> usize {
        chunk_under(self.write_chunk, algorithm)
    }

    /// Reads and checks every parameter (missing ones take their default).
    pub(crate) fn from_host(host: &Host) -> Result<Self, ConfigError> {
        use names::*;
        let selection = Selection::from_params(
            &host.param_str(IF_INCLUDE).unwrap_or_default(),
            &host.param_str(IF_EXCLUDE).unwrap_or_default(),
        )?;
        let links = host.param_u64(LINKS).unwrap_or(1);
        if links == 0 || links > MAX_LINKS {
            return Err(bad(LINKS, format!("must be between 1 and {MAX_LINKS}")));
        }
        let eager_limit = size(host, EAGER_LIMIT, DEFAULT_EAGER_LIMIT)?;
        let max_send_size = size(host, MAX_SEND_SIZE, DEFAULT_MAX_SEND_SIZE)?;
        if eager_limit < MAX_HEADER {
            return Err(bad(
                EAGER_LIMIT,
                format!("must be at least {MAX_HEADER} bytes"),
            ));
        }
        if max_send_size < eager_limit {
            return Err(bad(MAX_SEND_SIZE, "must not be below btl_tcp_eager_limit"));
        }
        let recv_staging = size(host, RECV_STAGING, DEFAULT_RECV_STAGING)?;
        if recv_staging < 4096 {
            return Err(bad(RECV_STAGING, "must be at least 4096 bytes"));
        }
        let timeout = host
            .param_u64(HANDSHAKE_TIMEOUT)
            .unwrap_or(DEFAULT_HANDSHAKE_TIMEOUT_MS);
        if timeout == 0 {
            return Err(bad(HANDSHAKE_TIMEOUT, "must be positive"));
        }
        let max_unauthenticated = size(host, MAX_UNAUTHENTICATED, DEFAULT_MAX_UNAUTHENTICATED)?;
        if max_unauthenticated == 0 {
            return Err(bad(MAX_UNAUTHENTICATED, "must be positive"));
        }
        Ok(Self {
            selection,
            ipv6: host.param_bool(IPV6).unwrap_or(false),
            links: links as u8,
            eager_limit,
            max_send_size,
            buffers: BufferSizes {
                send: size(host, SNDBUF, DEFAULT_SOCKET_BUFFER)?,
                recv: size(host, RCVBUF, DEFAULT_SOCKET_BUFFER)?,
            },
            recv_staging,
            write_chunk: match size(host, WRITE_CHUNK, DEFAULT_WRITE_CHUNK)? {
                0 => usize::MAX,
                n => n,
            },
            sendi_batch: host.param_bool(SENDI_BATCH).unwrap_or(true),
            handshake_timeout: Duration::from_millis(timeout),
            max_unauthenticated,
            keepalive: keepalive(host)?,
            user_timeout_ms: small(host, USER_TIMEOUT, 0)?,
            ack_timeout: match small(host, ACK_TIMEOUT, DEFAULT_ACK_TIMEOUT_MS)? {
                0 => None,
                ms => Some(Duration::from_millis(ms.into())),
            },
            priority: small(host, PRIORITY, DEFAULT_PRIORITY)?,
            latency_ns: small(host, LATENCY, DEFAULT_LATENCY_NS)?,
            bandwidth_mbps: small(host, BANDWIDTH, DEFAULT_BANDWIDTH_MBPS)?,
            congestion: Congestion::parse(&host.param_str(CONGESTION).unwrap_or_default())?,
            host_ips: Vec::new(),
        })
    }

    /// The addresses this process listens on, or why there are none.
    /// Also records every address of the host in `host_ips`.
    pub(crate) fn interfaces(&mut self) -> Result<Vec<InterfaceAddress>, PluginError> {
        let all = crate::sys::interface_addresses().map_err(|e| {
            PluginError::new(
                fireopal_abi::ErrorKind::IO,
                format!("cannot list interfaces: {e}"),
            )
        })?;
        self.host_ips = all.iter().map(|a| a.ip).collect();
        let chosen = select_interfaces(&all, &self.selection, self.ipv6);
        if chosen.len() * usize::from(self.links) > MAX_ENTRIES {
            return Err(PluginError::invalid(format!(
                "{} interface addresses × {} links exceed {MAX_ENTRIES} listening sockets",
                chosen.len(),
                self.links
            )));
        }
        Ok(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(name: &str, ip: &str, prefix_len: u8, up: bool) -> InterfaceAddress {
        let ip: IpAddr = ip.parse().unwrap();
        InterfaceAddress {
            name: name.into(),
            ip,
            prefix_len,
            up,
            loopback: ip.is_loopback(),
        }
    }

    fn machine() -> Vec<InterfaceAddress> {
        vec![
            iface("lo", "127.0.0.1", 8, true),
            iface("lo", "::1", 128, true),
            iface("eth0", "192.0.2.2", 24, true),
            iface("eth0", "fd00::2", 64, true),
            iface("eth0", "fe80::1", 64, true),
            iface("eth1", "198.51.100.7", 24, false),
        ]
    }

    fn names_of(v: &[InterfaceAddress]) -> Vec<String> {
        v.iter().map(|a| format!("{}={}", a.name, a.ip)).collect()
    }

    #[test]
    fn all_up_ipv4_by_default() {
        let s = Selection::from_params("", "").unwrap();
        assert_eq!(
            names_of(&select_interfaces(&machine(), &s, false)),
            ["lo=127.0.0.1", "eth0=192.0.2.2"]
        );
        assert_eq!(
            names_of(&select_interfaces(&machine(), &s, true)),
            ["lo=127.0.0.1", "lo=::1", "eth0=192.0.2.2", "eth0=fd00::2"],
            "link-local and down interfaces never"
        );
    }

    #[test]
    fn include_by_name_and_cidr() {
        let s = Selection::from_params("lo", "").unwrap();
        assert_eq!(
            names_of(&select_interfaces(&machine(), &s, false)),
            ["lo=127.0.0.1"]
        );
        let s = Selection::from_params(" 192.0.2.0/24 , fd00::/8", "").unwrap();
        assert_eq!(
            names_of(&select_interfaces(&machine(), &s, true)),
            ["eth0=192.0.2.2", "eth0=fd00::2"]
        );
        let s = Selection::from_params("127.0.0.1", "").unwrap();
        assert_eq!(
            names_of(&select_interfaces(&machine(), &s, false)),
            ["lo=127.0.0.1"]
        );
    }

    #[test]
    fn exclude_by_name_and_cidr() {
        let s = Selection::from_params("", "eth0").unwrap();
        assert_eq!(
            names_of(&select_interfaces(&machine(), &s, true)),
            ["lo=127.0.0.1", "lo=::1"]
        );
        let s = Selection::from_params("", "127.0.0.0/8").unwrap();
        assert_eq!(
            names_of(&select_interfaces(&machine(), &s, false)),
            ["eth0=192.0.2.2"]
        );
    }

    #[test]
    fn congestion_is_reno_within_the_host_under_auto() {
        let host: Vec<IpAddr> = vec!["192.0.2.2".parse().unwrap()];
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let lo6: IpAddr = "::1".parse().unwrap();
        let own: IpAddr = "192.0.2.2".parse().unwrap();
        let other: IpAddr = "192.0.2.3".parse().unwrap();
        for value in ["", "auto", " auto "] {
            let c = Congestion::parse(value).unwrap();
            assert_eq!(c, Congestion::Auto);
            for peer in [lo, lo6, own] {
                assert_eq!(c.for_peer(peer, &host), Some(HOST_CONGESTION), "{peer}");
            }
            assert_eq!(c.for_peer(other, &host), None);
        }
        let system = Congestion::parse("system").unwrap();
        assert_eq!(system.for_peer(lo, &host), None);
        let named = Congestion::parse("cubic").unwrap();
        assert_eq!(named.for_peer(lo, &host), Some("cubic"));
        assert_eq!(named.for_peer(other, &host), Some("cubic"));
    }

    #[test]
    fn queued_writes_go_in_pieces_only_under_bbr() {
        assert_eq!(chunk_under(61440, Some("bbr")), 61440);
        assert_eq!(chunk_under(61440, None), 61440, "unknown: as under BBR");
        assert_eq!(chunk_under(61440, Some("reno")), usize::MAX);
        assert_eq!(chunk_under(61440, Some("cubic")), usize::MAX);
    }

    #[test]
    fn a_congestion_value_that_cannot_be_a_name_is_refused_by_name() {
        for value in ["a b", "x;y", "sixteen-letters!", "abcdefghijklmnop"] {
            let e = Congestion::parse(value).unwrap_err();
            assert!(e.to_string().starts_with("btl_tcp_congestion"), "{e}");
        }
        assert!(Congestion::parse("abcdefghijklmno").is_ok(), "15 bytes fit");
    }

    #[test]
    fn bad_lists_name_the_parameter() {
        let e = Selection::from_params("lo", "eth0").unwrap_err();
        assert!(e.to_string().starts_with("btl_tcp_if_include"), "{e}");
        let e = Selection::from_params("10.0.0.0/33", "").unwrap_err();
        assert!(e.to_string().contains("bad prefix length"), "{e}");
        let e = Selection::from_params("", "10.0.0/8").unwrap_err();
        assert!(e.to_string().starts_with("btl_tcp_if_exclude"), "{e}");
        assert!(Selection::from_params("fd00::/129", "").is_err());
        assert_eq!(Selection::from_params(" , ", ""), Ok(Selection::All));
    }
}
