//! The verbs module: one port of one device, the objects made on it, the
//! peers with their connections, and the [`Transport`] calls.
//!
//! Connections are made on first use ([`crate::conn`]); sends, RDMA and
//! credit updates are posted there too, and completions are handled in
//! [`crate::progress`]. The module never blocks: what cannot be posted now
//! waits in the peer's backlog, in order, and `progress` posts it.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};

use fireopal_abi::btl::{
    exclusivity, Access, BtlAttributes, BtlFlags, Completion, EventSink, MemRegion, PeerAddress,
    Rank, RdmaOp, Reachability, Registration, SendiOutcome, Transport,
};
use fireopal_abi::host::{Host, LogLevel};
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::wire::verbs::{
    FragmentHeader, FragmentKind, RemoteKey, VerbsAddress, CONNECT_LEN, FRAGMENT_HEADER_LEN,
    MAX_PSN, REMOTE_KEY_LEN,
};

use crate::buffers::Pool;
use crate::config::{Settings, MAX_HEADER};
use crate::conn::{Conn, Item, Peer, Queued, RdmaWork};
use crate::device::{Context, Cq, Mr, Pd, PortInfo, Srq};
use crate::ffi::types::{
    ibv_wc, GRH_LEN, IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE,
};
use crate::qp::{PathParams, Qp, QpSizes};
use crate::signal::SendQueue;
use crate::RankHash;

/// Queue key of every module's datagram queue pair (high bit clear: not
/// a privileged key).
const QKEY: u32 = 0x0f1e_0b7a;
/// Receive buffers of the datagram queue pair.
const UD_RECV_SLOTS: u32 = 64;
/// Send buffers of the datagram queue pair.
const UD_SEND_SLOTS: u32 = 16;
/// Completions taken from the queue per poll.
const POLL_BATCH: usize = 32;

/// Something to report at the next `progress`.
#[derive(Debug)]
pub(crate) enum Event {
    Send(u64, Result<(), PluginError>),
    Rdma(u64, Result<(), PluginError>),
    PeerFailed(Rank, PluginError),
}

/// A registration made by `register_mem`.
pub(crate) struct Registered {
    pub(crate) mr: Option<Mr>,
    pub(crate) addr: usize,
    pub(crate) len: usize,
}

/// One verbs module.
///
/// Field order is drop order: queue pairs and address handles (inside
/// `peers` and `ud`) go before the regions, queues, domain and context
/// they were made on.
pub struct VerbsModule {
    pub(crate) peers: HashMap<Rank, Peer, RankHash>,
    pub(crate) ud: Qp,
    pub(crate) registrations: HashMap<u64, Registered, RankHash>,
    pub(crate) recv: Pool,
    pub(crate) send_pool: Pool,
    pub(crate) ud_recv: Pool,
    pub(crate) ud_send: Pool,
    pub(crate) srq: Srq,
    pub(crate) cq: Cq,
    pub(crate) pd: Pd,
    pub(crate) ctx: Context,
    pub(crate) ud_sq: SendQueue<u32>,
    pub(crate) host: Host,
    pub(crate) settings: Settings,
    pub(crate) port: PortInfo,
    pub(crate) local: VerbsAddress,
    pub(crate) rank: Rank,
    /// Signs and checks connection messages.
    pub(crate) job_key: [u8; fireopal_abi::host::JOB_KEY_LEN],
    pub(crate) by_qpn: HashMap<u32, Rank, RankHash>,
    pub(crate) next_registration: u64,
    pub(crate) events: VecDeque<Event>,
    pub(crate) send_depth: u32,
    pub(crate) max_inline: u32,
    pub(crate) wc: Vec<ibv_wc>,
    /// Peers with work waiting (see `Peer::has_work_waiting`), each once.
    pub(crate) waiting: Vec<Rank>,
    /// Peers whose connection is being made.
    pub(crate) connecting: Vec<Rank>,
}

impl std::fmt::Debug for VerbsModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsModule")
            .field("device", &self.ctx.name)
            .field("port", &self.port.port)
            .field("rank", &self.rank)
            .field("peers", &self.peers.len())
            .finish_non_exhaustive()
    }
}

/// A random 24-bit starting packet sequence number.
fn random_psn() -> u32 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    (h.finish() as u32) & MAX_PSN
}

fn io_err(what: &str, e: std::io::Error) -> PluginError {
    PluginError::new(ErrorKind::RESOURCE_EXHAUSTED, format!("{what}: {e}"))
}

impl VerbsModule {
    /// Makes the queues, buffers and datagram queue pair of a module on
    /// an open device port, for a job of `job_size` processes.
    pub(crate) fn new(
        host: Host,
        settings: Settings,
        ctx: Context,
        port: PortInfo,
    ) -> Result<Self, PluginError> {
        let job = host.job();
        let peers = job.size.saturating_sub(1).max(1);
        let pd = crate::device::Pd::new(&ctx).map_err(|e| io_err("ibv_alloc_pd", e))?;
        // Every posted receive and send may need a completion entry: size
        // the queue for them, and shrink the send depth of each
        // connection when the device's limit is lower.
        let fixed = settings.srq_size + UD_RECV_SLOTS + UD_SEND_SLOTS;
        let max_cqe = port.max_cqe.max(fixed + 2 * peers);
        let send_depth = settings.send_queue.min((max_cqe - fixed) / peers).max(2);
        let cqe = fixed
            .saturating_add(send_depth.saturating_mul(peers))
            .min(max_cqe);
        let cq = Cq::new(&ctx, cqe).map_err(|e| io_err("ibv_create_cq", e))?;
        let srq = Srq::new(&pd, settings.srq_size).map_err(|e| io_err("ibv_create_srq", e))?;
        let recv = Pool::new(&pd, settings.fragment_size as usize, settings.srq_size)
            .map_err(|e| io_err("registering receive buffers", e))?;
        let send_pool = Pool::new(
            &pd,
            settings.fragment_size as usize,
            settings.srq_size.min(1024),
        )
        .map_err(|e| io_err("registering send buffers", e))?;
        let ud_recv = Pool::new(&pd, GRH_LEN + CONNECT_LEN, UD_RECV_SLOTS)
            .map_err(|e| io_err("registering datagram buffers", e))?;
        let ud_send = Pool::new(&pd, CONNECT_LEN, UD_SEND_SLOTS)
            .map_err(|e| io_err("registering datagram buffers", e))?;
        let psn = random_psn();
        let ud = Qp::new_ud(
            &pd,
            &cq,
            port.port,
            QKEY,
            psn,
            QpSizes {
                send: UD_SEND_SLOTS,
                recv: UD_RECV_SLOTS,
                max_inline: 0,
            },
        )
        .map_err(|e| io_err("datagram queue pair", e))?;
        let local = VerbsAddress {
            link_layer: port.link_layer,
            port: port.port,
            mtu: u8::try_from(port.attr.active_mtu.clamp(1, 5)).unwrap_or(1),
            lid: port.attr.lid,
            gid_index: port.gid_index,
            cm_qpn: ud.qpn,
            qkey: QKEY,
            psn,
            credits: settings.credits,
            fragment_size: settings.fragment_size,
            gid: port.gid,
        };
        let mut m = Self {
            peers: HashMap::default(),
            ud,
            registrations: HashMap::default(),
            recv,
            send_pool,
            ud_recv,
            ud_send,
            srq,
            cq,
            pd,
            ctx,
            ud_sq: SendQueue::new(UD_SEND_SLOTS as usize, 1),
            host,
            max_inline: settings.max_inline,
            settings,
            port,
            local,
            rank: job.rank,
            job_key: job.job_key,
            by_qpn: HashMap::default(),
            next_registration: 0,
            events: VecDeque::new(),
            send_depth,
            wc: vec![ibv_wc::default(); POLL_BATCH],
            waiting: Vec::new(),
            connecting: Vec::new(),
        };
        m.post_initial_receives()?;
        Ok(m)
    }

    pub(crate) fn path_params(&self) -> PathParams {
        PathParams {
            timeout: self.settings.timeout,
            retry_count: self.settings.retry_count,
            service_level: self.settings.service_level,
            traffic_class: self.settings.traffic_class,
        }
    }

    pub(crate) fn qp_sizes(&self) -> QpSizes {
        QpSizes {
            send: self.send_depth,
            recv: 0,
            max_inline: self.settings.max_inline,
        }
    }

    pub(crate) fn log(&self, level: LogLevel, message: &str) {
        self.host
            .log(level, &format!("verbs {}: {message}", self.ctx.name));
    }

    fn add_peer(&mut self, p: &PeerAddress<'_>) -> Reachability {
        if p.rank == self.rank {
            return Reachability::Unreachable("the self transport serves this process".into());
        }
        let addr = match VerbsAddress::parse(p.address.as_slice()) {
            Ok(a) => a,
            Err(e) => {
                return Reachability::Unreachable(format!("malformed verbs address: {e}").into())
            }
        };
        if addr.link_layer != self.local.link_layer {
            return Reachability::Unreachable(
                format!(
                    "peer's port is {}, this one {}",
                    addr.link_layer, self.local.link_layer
                )
                .into(),
            );
        }
        if (addr.fragment_size as usize) < self.settings.fragment_size as usize {
            return Reachability::Unreachable(
                format!(
                    "peer's receive buffers of {} bytes are smaller than this process's fragments of {}",
                    addr.fragment_size, self.settings.fragment_size
                )
                .into(),
            );
        }
        let (granted, depth, interval) = (
            self.settings.credits,
            self.send_depth,
            self.settings.signal_interval,
        );
        self.peers
            .entry(p.rank)
            .or_insert_with(|| Peer::new(addr, granted, depth, interval));
        Reachability::Reachable
    }

    /// The peer `rank`, ready for a new operation: known, not failed or
    /// removed; an error otherwise.
    pub(crate) fn usable(&mut self, rank: Rank) -> Result<&mut Peer, PluginError> {
        match self.peers.get_mut(&rank) {
            None => Err(PluginError::new(
                ErrorKind::UNREACHABLE,
                format!("rank {rank} is not a verbs peer"),
            )),
            Some(p) => match &p.conn {
                Conn::Failed { error, .. } => Err(error.clone()),
                _ => Ok(p),
            },
        }
    }

    fn check_message(&self, header: &[u8], payload: &[u8]) -> Result<(), PluginError> {
        if header.len() > MAX_HEADER {
            return Err(PluginError::invalid(format!(
                "header of {} bytes is above the limit of {MAX_HEADER}",
                header.len()
            )));
        }
        let total = header.len() + payload.len();
        if total > self.settings.max_send_size() {
            return Err(PluginError::invalid(format!(
                "message of {total} bytes is above max_send_size {}",
                self.settings.max_send_size()
            )));
        }
        Ok(())
    }

    fn rdma(&mut self, op: &RdmaOp<'_>, write: bool) -> Result<Completion, PluginError> {
        let key = RemoteKey::parse(op.remote_key.as_slice()).map_err(|e| {
            PluginError::invalid(format!("remote key ({REMOTE_KEY_LEN} bytes expected): {e}"))
        })?;
        let len = op.local.len() as u64;
        if !key.permits(op.remote_addr, len, write) {
            return Err(PluginError::invalid(format!(
                "{} of {len} bytes at {:#x} is outside what the remote key grants",
                if write { "put" } else { "get" },
                op.remote_addr
            )));
        }
        let lkey = match self.registrations.get(&op.local_registration) {
            Some(r)
                if op.local.addr() >= r.addr
                    && op.local.addr() + op.local.len() <= r.addr + r.len =>
            {
                r.mr.as_ref().map_or(0, |m| m.lkey)
            }
            Some(_) => {
                return Err(PluginError::invalid(
                    "the local range is outside its registration",
                ))
            }
            None if op.local.is_empty() => 0,
            None => {
                return Err(PluginError::invalid(
                    "verbs needs the local memory registered (local_registration)",
                ))
            }
        };
        if len > u64::from(self.port.attr.max_msg_sz) {
            return Err(PluginError::invalid(format!(
                "{len} bytes is above the port's largest message, {}",
                self.port.attr.max_msg_sz
            )));
        }
        self.usable(op.peer)?;
        if op.local.is_empty() {
            return Ok(Completion::Done);
        }
        let work = RdmaWork {
            write,
            local: op.local.addr() as u64,
            len: op.local.len() as u32,
            lkey,
            remote: op.remote_addr,
            rkey: key.rkey,
            cookie: op.cookie,
        };
        self.enqueue(op.peer, Queued::Rdma(work))?;
        Ok(Completion::Pending)
    }

    /// Queues `item` behind the peer's backlog and posts what can go.
    fn enqueue(&mut self, rank: Rank, item: Queued) -> Result<(), PluginError> {
        self.usable(rank)?.backlog.push_back(item);
        self.ensure_connecting(rank);
        self.pump(rank);
        self.mark_waiting(rank);
        Ok(())
    }
}

/// A fragment of `tag`, `header` and `payload` written into `out` (at
/// least [`FragmentHeader::total_len`] bytes), returning `credits` to the
/// peer; its length.
pub(crate) fn write_fragment(
    out: &mut [u8],
    tag: u8,
    header: &[u8],
    payload: &[u8],
    credits: u16,
) -> usize {
    let head = FragmentHeader {
        kind: FragmentKind::Message,
        tag,
        header_len: header.len() as u16,
        payload_len: payload.len() as u32,
        credits,
    };
    let total = head.total_len();
    if let Some(dst) = out.get_mut(..total) {
        let (h, rest) = dst.split_at_mut(FRAGMENT_HEADER_LEN);
        h.copy_from_slice(&head.encode());
        let (hd, pl) = rest.split_at_mut(header.len());
        hd.copy_from_slice(header);
        pl.copy_from_slice(payload);
    }
    total
}

impl Transport for VerbsModule {
    fn attributes(&self) -> Result<BtlAttributes, PluginError> {
        let s = &self.settings;
        let max_send = s.max_send_size() as u64;
        Ok(BtlAttributes {
            max_sendi_size: max_send,
            eager_limit: u64::from(s.eager_limit),
            max_send_size: max_send,
            max_header_size: MAX_HEADER as u32,
            rdma_pipeline_send_length: u64::from(s.eager_limit),
            rdma_pipeline_frag_size: u64::from(self.port.attr.max_msg_sz),
            min_rdma_pipeline_size: 0,
            exclusivity: exclusivity::HIGH_PERFORMANCE_NETWORK,
            latency_ns: s.latency_ns,
            bandwidth_mbps: s.bandwidth_mbps,
            flags: BtlFlags::SEND
                | BtlFlags::PUT
                | BtlFlags::GET
                | BtlFlags::NEEDS_LOCAL_REGISTRATION
                | BtlFlags::STRIPE,
            registration_handle_size: REMOTE_KEY_LEN as u32,
        })
    }

    fn address(&self) -> Result<Vec<u8>, PluginError> {
        Ok(self.local.encode().to_vec())
    }

    fn add_peers(&mut self, peers: &[PeerAddress<'_>]) -> Result<Vec<Reachability>, PluginError> {
        let mut answers = Vec::with_capacity(peers.len());
        for p in peers {
            let answer = self.add_peer(p);
            if let Reachability::Unreachable(reason) = &answer {
                self.log(
                    LogLevel::Debug,
                    &format!("rank {} is unreachable: {reason}", p.rank),
                );
            }
            answers.push(answer);
        }
        Ok(answers)
    }

    fn remove_peer(&mut self, peer: Rank) -> Result<(), PluginError> {
        if !self.peers.contains_key(&peer) {
            return Err(PluginError::new(
                ErrorKind::UNREACHABLE,
                format!("rank {peer} is not a verbs peer"),
            ));
        }
        let error = PluginError::new(ErrorKind::UNREACHABLE, format!("rank {peer} was removed"));
        self.fail_peer(peer, error, false);
        Ok(())
    }

    fn sendi(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
    ) -> Result<SendiOutcome, PluginError> {
        if self.check_message(header, payload).is_err() {
            return Ok(SendiOutcome::Busy);
        }
        self.usable(peer)?;
        self.ensure_connecting(peer);
        Ok(if self.try_post_now(peer, tag, header, payload) {
            SendiOutcome::Sent
        } else {
            SendiOutcome::Busy
        })
    }

    fn send(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        cookie: u64,
    ) -> Result<Completion, PluginError> {
        self.check_message(header, payload)?;
        self.usable(peer)?;
        self.ensure_connecting(peer);
        if self.try_post_now(peer, tag, header, payload) {
            return Ok(Completion::Done);
        }
        let mut bytes = vec![0u8; FRAGMENT_HEADER_LEN + header.len() + payload.len()];
        write_fragment(&mut bytes, tag, header, payload, 0);
        self.enqueue(
            peer,
            Queued::Message {
                bytes,
                cookie: Some(cookie),
            },
        )?;
        Ok(Completion::Pending)
    }

    fn register_mem(
        &mut self,
        region: MemRegion,
        access: Access,
    ) -> Result<Registration, PluginError> {
        // Local write only where asked for (a get's target, or memory
        // peers write, which verbs requires to be locally writable too):
        // read-only memory cannot be registered with it.
        let mut flags = 0;
        if access.contains(Access::LOCAL_WRITE) || access.contains(Access::REMOTE_WRITE) {
            flags |= IBV_ACCESS_LOCAL_WRITE;
        }
        if access.contains(Access::REMOTE_READ) {
            flags |= IBV_ACCESS_REMOTE_READ;
        }
        if access.contains(Access::REMOTE_WRITE) {
            flags |= IBV_ACCESS_REMOTE_WRITE;
        }
        let mr = if region.is_empty() {
            None
        } else {
            Some(crate::conn::register(&self.pd, region, flags)?)
        };
        let key = RemoteKey {
            addr: region.addr() as u64,
            len: region.len() as u64,
            rkey: mr.as_ref().map_or(0, |m| m.rkey),
            read: access.contains(Access::REMOTE_READ),
            write: access.contains(Access::REMOTE_WRITE),
        };
        let id = self.next_registration;
        self.next_registration += 1;
        self.registrations.insert(
            id,
            Registered {
                mr,
                addr: region.addr(),
                len: region.len(),
            },
        );
        Ok(Registration {
            id,
            remote_key: key.encode().to_vec().into(),
        })
    }

    fn deregister_mem(&mut self, id: u64) -> Result<(), PluginError> {
        self.registrations
            .remove(&id)
            .map(drop)
            .ok_or_else(|| PluginError::invalid(format!("no registration {id}")))
    }

    fn put(&mut self, op: &RdmaOp<'_>) -> Result<Completion, PluginError> {
        self.rdma(op, true)
    }

    fn get(&mut self, op: &RdmaOp<'_>) -> Result<Completion, PluginError> {
        self.rdma(op, false)
    }

    fn progress(&mut self, sink: &mut dyn EventSink) -> Result<usize, PluginError> {
        self.progress_impl(sink)
    }

    /// The backlog's bytes, and one for each request posted and not yet
    /// seen complete: destroying the queue pair at close could drop it,
    /// and `progress` makes unsignalled ones report.
    fn unsent(&self) -> u64 {
        self.peers
            .values()
            .filter(|p| !matches!(p.conn, Conn::Failed { .. }))
            .map(|p| {
                let queued: u64 = p
                    .backlog
                    .iter()
                    .map(|q| match q {
                        Queued::Message { bytes, .. } => bytes.len() as u64,
                        Queued::Rdma(w) => u64::from(w.len),
                    })
                    .sum();
                queued + p.sq.outstanding() as u64
            })
            .sum()
    }
}

/// What a backlog item reports when it fails before posting.
pub(crate) fn fail_queued(item: Queued, error: &PluginError, events: &mut VecDeque<Event>) {
    match item {
        Queued::Message {
            cookie: Some(c), ..
        } => events.push_back(Event::Send(c, Err(error.clone()))),
        Queued::Message { cookie: None, .. } => {}
        Queued::Rdma(w) => events.push_back(Event::Rdma(w.cookie, Err(error.clone()))),
    }
}

/// What an outstanding request reports when its connection fails.
pub(crate) fn fail_item(item: &mut Item, error: &PluginError, events: &mut VecDeque<Event>) {
    if let Item::Rdma { cookie, reported } = item {
        if !*reported {
            *reported = true;
            events.push_back(Event::Rdma(*cookie, Err(error.clone())));
        }
    }
}

#[cfg(test)]
mod tests {
    use fireopal_core::wire::verbs::{FragmentHeader, FragmentKind, FRAGMENT_HEADER_LEN};
    use proptest::prelude::*;

    use super::write_fragment;
    use crate::conn::CREDITS_AT;

    proptest! {
        #[test]
        fn fragments_written_for_sending_parse_back_and_take_credits_in_place(
            tag in any::<u8>(),
            header in proptest::collection::vec(any::<u8>(), 0..64),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            credits in any::<u16>(),
            later in any::<u16>(),
        ) {
            let mut out = vec![0u8; FRAGMENT_HEADER_LEN + header.len() + payload.len() + 7];
            let len = write_fragment(&mut out, tag, &header, &payload, credits);
            prop_assert_eq!(len, FRAGMENT_HEADER_LEN + header.len() + payload.len());
            let f = FragmentHeader::parse(&out[..len]).unwrap();
            prop_assert_eq!(f.head.kind, FragmentKind::Message);
            prop_assert_eq!((f.head.tag, f.head.credits), (tag, credits));
            prop_assert_eq!(f.header, header.as_slice());
            prop_assert_eq!(f.payload, payload.as_slice());
            // A queued fragment gets its credits when it is posted.
            out[CREDITS_AT].copy_from_slice(&later.to_le_bytes());
            prop_assert_eq!(FragmentHeader::parse(&out[..len]).unwrap().head.credits, later);
        }
    }
}
