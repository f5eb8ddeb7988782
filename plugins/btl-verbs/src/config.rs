//! The component's parameters and their checked values.
//!
//! Every process of a job must use the same `fragment_size` and `credits`
//! only as far as each is published: a peer's receive buffers and its
//! grant come from its address, so the two ends may differ, but a sender
//! whose largest fragment exceeds a peer's buffers finds that peer
//! unreachable.

use fireopal_abi::host::Host;
use fireopal_abi::param::{ParamRegistrar, ParamValue};
use fireopal_abi::PluginError;
use fireopal_core::wire::verbs::FRAGMENT_HEADER_LEN;

/// Parameter names.
pub(crate) mod names {
    pub(crate) const LIBRARY: &str = "btl_verbs_library";
    pub(crate) const DEVICE: &str = "btl_verbs_device";
    pub(crate) const GID_INDEX: &str = "btl_verbs_gid_index";
    pub(crate) const FRAGMENT_SIZE: &str = "btl_verbs_fragment_size";
    pub(crate) const EAGER_LIMIT: &str = "btl_verbs_eager_limit";
    pub(crate) const MAX_INLINE: &str = "btl_verbs_max_inline";
    pub(crate) const CREDITS: &str = "btl_verbs_credits";
    pub(crate) const SRQ_SIZE: &str = "btl_verbs_srq_size";
    pub(crate) const SEND_QUEUE: &str = "btl_verbs_send_queue";
    pub(crate) const SIGNAL_INTERVAL: &str = "btl_verbs_signal_interval";
    pub(crate) const TIMEOUT: &str = "btl_verbs_timeout";
    pub(crate) const RETRY_COUNT: &str = "btl_verbs_retry_count";
    pub(crate) const SERVICE_LEVEL: &str = "btl_verbs_service_level";
    pub(crate) const TRAFFIC_CLASS: &str = "btl_verbs_traffic_class";
    pub(crate) const PRIORITY: &str = "btl_verbs_priority";
    pub(crate) const LATENCY: &str = "btl_verbs_latency_ns";
    pub(crate) const BANDWIDTH: &str = "btl_verbs_bandwidth_mbps";
}

/// Default library name, as `dlopen` searches it.
pub(crate) const DEFAULT_LIBRARY: &str = "libibverbs.so.1";
/// Longest active-message header.
pub(crate) const MAX_HEADER: usize = 256;

const DEFAULT_FRAGMENT_SIZE: u64 = 16 << 10;
const DEFAULT_EAGER_LIMIT: u64 = 12 << 10;
const DEFAULT_MAX_INLINE: u64 = 128;
const DEFAULT_CREDITS: u64 = 32;
const DEFAULT_SRQ_SIZE: u64 = 1024;
const DEFAULT_SEND_QUEUE: u64 = 128;
const DEFAULT_SIGNAL_INTERVAL: u64 = 16;
/// 4.096 µs × 2^20 ≈ 4.3 s per try, as Open MPI's default.
const DEFAULT_TIMEOUT: u64 = 20;
const DEFAULT_RETRY_COUNT: u64 = 7;
const DEFAULT_PRIORITY: u64 = 50;
const DEFAULT_LATENCY_NS: u64 = 2_000;
const DEFAULT_BANDWIDTH_MBPS: u64 = 12_000;

/// Declares every parameter.
pub(crate) fn register(r: &mut ParamRegistrar<'_>) -> Result<(), PluginError> {
    use names::*;
    r.register(
        LIBRARY,
        ParamValue::Str(DEFAULT_LIBRARY.into()),
        "libibverbs to open with dlopen: a file name searched as the dynamic loader does, or a path",
    )?;
    r.register(
        DEVICE,
        ParamValue::Str("".into()),
        "device and port to use, as name or name:port (empty: the first active port of any device)",
    )?;
    r.register(
        GID_INDEX,
        ParamValue::Int(-1),
        "GID table index (-1: index 0 on InfiniBand; on Ethernet the RoCE v2 IPv4 GID if there is one, else the first GID set)",
    )?;
    r.register(
        FRAGMENT_SIZE,
        ParamValue::Size(DEFAULT_FRAGMENT_SIZE),
        "bytes of each receive buffer; the largest send is this less the 12-byte fragment header",
    )?;
    r.register(
        EAGER_LIMIT,
        ParamValue::Size(DEFAULT_EAGER_LIMIT),
        "largest payload of one eager fragment; larger messages go by rendezvous (RDMA read)",
    )?;
    r.register(
        MAX_INLINE,
        ParamValue::Size(DEFAULT_MAX_INLINE),
        "bytes of a send the device copies from the request itself (sendi); the device may grant less",
    )?;
    r.register(
        CREDITS,
        ParamValue::UInt(DEFAULT_CREDITS),
        "fragments each peer may have in flight toward this process before it waits for credits",
    )?;
    r.register(
        SRQ_SIZE,
        ParamValue::UInt(DEFAULT_SRQ_SIZE),
        "receive buffers in the shared receive queue; above its share, a sender's packets are retried by the device until buffers return",
    )?;
    r.register(
        SEND_QUEUE,
        ParamValue::UInt(DEFAULT_SEND_QUEUE),
        "send requests in flight per connection; more wait in the module",
    )?;
    r.register(
        SIGNAL_INTERVAL,
        ParamValue::UInt(DEFAULT_SIGNAL_INTERVAL),
        "at least every this many sends asks for a completion (the others are released with it)",
    )?;
    r.register(
        TIMEOUT,
        ParamValue::UInt(DEFAULT_TIMEOUT),
        "local ACK timeout exponent: a packet is retried after 4.096 us * 2^timeout (1..=31)",
    )?;
    r.register(
        RETRY_COUNT,
        ParamValue::UInt(DEFAULT_RETRY_COUNT),
        "retries of an unacknowledged packet before the peer is failed (0..=7)",
    )?;
    r.register(
        SERVICE_LEVEL,
        ParamValue::UInt(0),
        "InfiniBand service level (0..=15) of every connection",
    )?;
    r.register(
        TRAFFIC_CLASS,
        ParamValue::UInt(0),
        "traffic class of the global route header (RoCE: the DSCP << 2)",
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
        "bandwidth of one port reported to the host, in MB/s",
    )
}

/// A bad parameter value.
pub(crate) use fireopal_abi::param::BadParam as ConfigError;

fn bad(param: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::new(param, reason)
}

/// Resolved settings of one process's modules.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) library: String,
    /// Device name and optional port.
    pub(crate) device: Option<(String, Option<u8>)>,
    pub(crate) gid_index: Option<u8>,
    pub(crate) fragment_size: u32,
    pub(crate) eager_limit: u32,
    pub(crate) max_inline: u32,
    pub(crate) credits: u16,
    pub(crate) srq_size: u32,
    pub(crate) send_queue: u32,
    pub(crate) signal_interval: u32,
    pub(crate) timeout: u8,
    pub(crate) retry_count: u8,
    pub(crate) service_level: u8,
    pub(crate) traffic_class: u8,
    pub(crate) priority: u32,
    pub(crate) latency_ns: u32,
    pub(crate) bandwidth_mbps: u32,
}

fn ranged(
    host: &Host,
    name: &'static str,
    default: u64,
    lo: u64,
    hi: u64,
) -> Result<u64, ConfigError> {
    let v = host.param_u64(name).unwrap_or(default);
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(bad(name, format!("{v} is not in {lo}..={hi}")))
    }
}

impl Settings {
    /// Reads and checks every parameter.
    pub(crate) fn from_host(host: &Host) -> Result<Self, ConfigError> {
        use names::*;
        let library = host
            .param_str(LIBRARY)
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_LIBRARY.to_owned());
        let device = match host.param_str(DEVICE).unwrap_or_default().trim() {
            "" => None,
            text => Some(parse_device(text)?),
        };
        let gid_index = match host.param_i64(GID_INDEX).unwrap_or(-1) {
            -1 => None,
            i => Some(
                u8::try_from(i).map_err(|_| bad(GID_INDEX, format!("{i} is not -1 or 0..=255")))?,
            ),
        };
        let fragment_size = ranged(
            host,
            FRAGMENT_SIZE,
            DEFAULT_FRAGMENT_SIZE,
            (FRAGMENT_HEADER_LEN + MAX_HEADER) as u64 + 64,
            1 << 30,
        )? as u32;
        let eager_limit = ranged(host, EAGER_LIMIT, DEFAULT_EAGER_LIMIT, 1, 1 << 30)? as u32;
        let max_send = fragment_size - FRAGMENT_HEADER_LEN as u32;
        if eager_limit > max_send {
            return Err(bad(
                EAGER_LIMIT,
                format!("{eager_limit} is above the largest send, {max_send} bytes ({FRAGMENT_SIZE} less the fragment header)"),
            ));
        }
        let max_inline = ranged(host, MAX_INLINE, DEFAULT_MAX_INLINE, 0, 4096)? as u32;
        let credits = ranged(host, CREDITS, DEFAULT_CREDITS, 1, u64::from(u16::MAX))? as u16;
        let srq_size = ranged(host, SRQ_SIZE, DEFAULT_SRQ_SIZE, 2, 1 << 20)? as u32;
        let send_queue = ranged(host, SEND_QUEUE, DEFAULT_SEND_QUEUE, 2, 1 << 16)? as u32;
        let signal_interval =
            ranged(host, SIGNAL_INTERVAL, DEFAULT_SIGNAL_INTERVAL, 1, 1 << 16)? as u32;
        let priority = host.param_u64(PRIORITY).unwrap_or(DEFAULT_PRIORITY);
        Ok(Self {
            library,
            device,
            gid_index,
            fragment_size,
            eager_limit,
            max_inline,
            credits,
            srq_size,
            send_queue,
            signal_interval,
            timeout: ranged(host, TIMEOUT, DEFAULT_TIMEOUT, 1, 31)? as u8,
            retry_count: ranged(host, RETRY_COUNT, DEFAULT_RETRY_COUNT, 0, 7)? as u8,
            service_level: ranged(host, SERVICE_LEVEL, 0, 0, 15)? as u8,
            traffic_class: ranged(host, TRAFFIC_CLASS, 0, 0, 255)? as u8,
            priority: u32::try_from(priority)
                .map_err(|_| bad(PRIORITY, format!("{priority} does not fit in 32 bits")))?,
            latency_ns: ranged(host, LATENCY, DEFAULT_LATENCY_NS, 0, u64::from(u32::MAX))? as u32,
            bandwidth_mbps: ranged(
                host,
                BANDWIDTH,
                DEFAULT_BANDWIDTH_MBPS,
                0,
                u64::from(u32::MAX),
            )? as u32,
        })
    }

    /// Largest header + payload of one send.
    pub(crate) fn max_send_size(&self) -> usize {
        self.fragment_size as usize - FRAGMENT_HEADER_LEN
    }
}

fn parse_device(text: &str) -> Result<(String, Option<u8>), ConfigError> {
    let (name, port) = match text.split_once(':') {
        Some((n, p)) => {
            let port = p
                .parse::<u8>()
                .ok()
                .filter(|&p| p >= 1)
                .ok_or_else(|| bad(names::DEVICE, format!("{p:?} is not a port number")))?;
            (n, Some(port))
        }
        None => (text, None),
    };
    if name.is_empty() {
        return Err(bad(names::DEVICE, "no device name"));
    }
    Ok((name.to_owned(), port))
}
