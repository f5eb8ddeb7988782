//! The `shm` module, [`ShmTransport`]: one process's end of the
//! shared-memory transport (the crate documentation describes the
//! segments, the paths by size and the failures it reports).
//!
//! The module owns this process's queue segment ([`Own`]: the fast boxes
//! and the receive queue its peers write into) and everything else it
//! keeps ([`State`]): its peers, the work waiting for them, the rendezvous
//! sends and emulated RDMA in flight, and the events the next
//! [`progress`](Transport::progress) reports. Here are its construction,
//! its statistics and the [`Transport`] methods. Most of those hand the
//! call to the part that does the work; `sendi` (the fast path: one
//! fragment now, or `Busy`), `register_mem` and `progress` are written
//! out here. `progress` first looks at one word per peer and at the
//! receive queue's head: when nothing arrived and nothing waits, it only
//! hands consumed fast-box lines back and returns, so that a process
//! polling for a message goes round its loop quickly; otherwise it writes
//! what waits, receives, writes again, now and then checks that peers
//! live, and reports the events. The parts:
//!
//! - [`send`]: writing fragments into a peer's fast box or receive queue,
//!   the work queued for a peer whose queues are full, staging and
//!   rendezvous requests, in-place sends;
//! - [`receive`]: the receive loop over the fast boxes and the receive
//!   queue, in each peer's order, and what each kind of fragment does
//!   (deliveries, rendezvous fetches and completions, unmap notices, the
//!   target's side of emulated RDMA);
//! - [`rdma`]: `put` and `get` (through a mapping, process_vm_readv/writev,
//!   or emulated through the queues) and the registrations they target;
//! - [`mapping`]: this process's segments that peers map (transfer buffers,
//!   registered segments, the notices when one goes away) and its cached
//!   mappings of peers' segments;
//! - [`endpoint`]: adding and finding peers, and whether process_vm_readv
//!   works with each;
//! - [`failure`]: failing a peer with everything that waits for it, and
//!   noticing a peer whose process exited;
//! - [`checksum`]: the optional checksums of `btl_shm_checksum`.

// Copies between shared mappings and memory handed over as `MemRegion`s,
// and process_vm_readv/writev into it.
#![allow(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fireopal_abi::btl::{
    Access, BtlAttributes, Completion, EventSink, MemRegion, PeerAddress, Rank, RdmaOp,
    Reachability, Registration, RemoteMapping, SendiOutcome, Transport,
};
use fireopal_abi::host::{Host, LogLevel};
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::regcache::{self, CacheStats, RegCache, RegCacheConfig, TransportId};
use fireopal_core::shmq::layout::{Header, Layout, LayoutParams, MAGIC, SLOT_DATA};
use fireopal_core::shmq::{Kind, Malformed, LINE};
use fireopal_core::wire::shm::{Address, RemoteKey};

use crate::buffer::{Buffers, LocalSegment, Staging, TransferBuffer};
use crate::mapcache::{MapRequest, PeerMapper};
use crate::queue::{fifo_init, FifoReader, Frag};
use crate::{attributes, sys, Config};

mod checksum;
mod endpoint;
mod failure;
mod mapping;
mod rdma;
mod receive;
mod send;

pub(crate) use endpoint::probe_cma_siblings;
use endpoint::{probe_cma_self, Peer};
use rdma::{LocalReg, RdmaOut};
use send::{Origin, OwnedFrag, Pending, RtsOut};

/// Largest active-message header.
const MAX_HEADER: usize = u8::MAX as usize;

/// `progress` calls between checks that the peers this process waits for
/// are still alive (and, when it waits for none, between looks at the
/// clock for [`IDLE_LIVENESS`]).
const LIVENESS_PERIOD: u32 = 1024;
/// How often the peers are checked while nothing waits for them, so that
/// one whose process ended is reported even to a process that only
/// receives (as a closed connection is over tcp).
const IDLE_LIVENESS: Duration = Duration::from_millis(250);

/// How many fragments and transfers went which way (for tests and
/// tuning).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Fragments written to peers' fast boxes.
    pub fbox_frags: u64,
    /// Fragments written to peers' receive queues.
    pub fifo_frags: u64,
    /// Fragments that waited in this process because neither had room.
    pub queued_frags: u64,
    /// Rendezvous payloads this process read through a segment mapping.
    pub rndv_mapped: u64,
    /// Rendezvous payloads this process read with process_vm_readv.
    pub rndv_cma: u64,
    /// Rendezvous sends this process staged (copied) first.
    pub rndv_staged: u64,
    /// In-place sends staged after the receiver could not read them.
    pub rndv_fallbacks: u64,
    /// RDMA operations done through a segment mapping.
    pub rdma_mapped: u64,
    /// RDMA operations done with process_vm_readv/writev.
    pub rdma_cma: u64,
    /// RDMA operations emulated with fragments.
    pub rdma_emulated: u64,
    /// Unmap notices received.
    pub unmaps_received: u64,
    /// Queue slots found corrupt that named no valid sender.
    pub corrupt_slots: u64,
    /// Fragments and rendezvous payloads that did not match their
    /// checksum (`btl_shm_checksum`); each failed the peer that wrote it.
    pub checksum_errors: u64,
}

/// An event waiting for the next `progress` to report it.
#[derive(Debug)]
enum Event {
    Send(u64, Result<(), PluginError>),
    Rdma(u64, Result<(), PluginError>),
    PeerFailed(Rank, PluginError),
}

/// This process's queue segment and the reader of its receive queue.
#[derive(Debug)]
struct Own {
    seg: LocalSegment,
    layout: Layout,
    fifo: FifoReader,
}

/// Everything but the own segment, so that data borrowed from the segment
/// can be handled while the rest changes.
#[derive(Debug)]
struct State {
    host: Host,
    cfg: Config,
    rank: Rank,
    local: u32,
    local_size: u32,
    job_key: [u8; 32],
    pid: u32,
    boot_id: [u8; 16],
    own_layout: Layout,
    peers: Vec<Option<Peer>>,
    /// Local indices of peers that are read from.
    active: Vec<u32>,
    local_of_rank: IdMap<Rank, u32>,
    /// The rank last sent to and its local index: a stream of messages to
    /// one peer does not look it up each time.
    last_sent: Option<(Rank, u32)>,
    /// Peers with pending work.
    backlog: Vec<u32>,
    /// Queue fragments from senders not added yet, by local index.
    stash: Vec<VecDeque<(u32, OwnedFrag)>>,
    /// Fragments in `stash`.
    stashed: usize,
    cache: RegCache<PeerMapper>,
    cache_id: TransportId,
    mapper: Arc<std::sync::Mutex<Option<MapRequest>>>,
    next_seg_id: u64,
    buffers: Buffers,
    staging: Staging,
    rts: IdMap<u64, RtsOut>,
    rdma: IdMap<u64, RdmaOut>,
    next_op: u64,
    regs: IdMap<u64, LocalReg>,
    next_reg: u64,
    /// Peers' registrations mapped for the caller (`map_remote`), each
    /// holding its cached mapping alive, by id.
    remote_maps: IdMap<u64, regcache::Registration<PeerMapper>>,
    next_remote_map: u64,
    /// Whether process_vm_readv works at all here, or why not.
    cma: Result<(), String>,
    events: VecDeque<Event>,
    /// Counts `progress` calls.
    liveness_tick: u32,
    /// When the peers are next checked if nothing waits for them.
    next_idle_liveness: Instant,
    bounce: Vec<u8>,
    counters: Counters,
}

/// The shared-memory transport module.
///
/// Besides the [`Transport`] methods it offers transfer buffers
/// ([`alloc_transfer_buffer`](Self::alloc_transfer_buffer)), in-place
/// sends ([`send_in_place`](Self::send_in_place)) and statistics.
#[derive(Debug)]
pub struct ShmTransport {
    own: Own,
    st: State,
    /// Transfer buffers handed out through the plugin interface, by id.
    host_buffers: HashMap<u64, TransferBuffer>,
}

/// Maps keyed by ranks and operation ids, which this process chooses.
type IdMap<K, V> = HashMap<K, V, fireopal_core::id_hash::IdHash>;

fn io_error(what: &str, e: std::io::Error) -> PluginError {
    PluginError::new(ErrorKind::IO, format!("{what}: {e}"))
}

fn malformed(rank: Rank, what: &str, e: Malformed) -> PluginError {
    let what = checksum::describe(what, &e);
    PluginError::new(
        ErrorKind::MALFORMED,
        format!("{what} from rank {rank}: {e}"),
    )
}

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

impl ShmTransport {
    /// A module for the job the host describes: makes the queue segment
    /// and probes process_vm_readv.
    pub fn new(host: Host, cfg: Config) -> Result<ShmTransport, PluginError> {
        let job = host.job();
        if job.local_rank >= job.local_size {
            return Err(PluginError::invalid(
                "local rank is not below the local size",
            ));
        }
        let fbox_max = round_up(cfg.fbox_max.max(LINE), LINE);
        let params = LayoutParams {
            local_size: job.local_size,
            fbox_bytes: u32::try_from(
                (cfg.fbox_bytes(job.local_size)
                    .max(2 * fbox_max)
                    .div_ceil(LINE))
                .next_power_of_two()
                    * LINE,
            )
            .map_err(|_| PluginError::invalid("fast-box size too large"))?,
            fbox_max_entry: u32::try_from(fbox_max)
                .map_err(|_| PluginError::invalid("fast-box entry size too large"))?,
            fifo_slots: cfg.fifo_slots,
            fifo_slot_bytes: u32::try_from(round_up(
                SLOT_DATA + cfg.eager_limit + MAX_HEADER + checksum::trailer_len(cfg.checksum),
                LINE,
            ))
            .map_err(|_| PluginError::invalid("eager limit too large"))?,
        };
        let layout = Layout::new(params)
            .map_err(|e| PluginError::invalid(format!("shared-memory layout: {e}")))?;
        let seg = LocalSegment::create(c"fireopal-shm-queue", 0, layout.total_len())
            .map_err(|e| io_error("cannot make the queue segment", e))?;
        let pid = sys::pid();
        let header = Header {
            params,
            owner_rank: job.rank,
            owner_local: job.local_rank,
            owner_pid: pid,
            file_id: seg.sref.file_id,
        };
        let view = seg.map.view();
        fifo_init(&view, &layout);
        // The magic word goes last: a peer probing it sees a whole header.
        let bytes = layout.encode_header(&header, &job.job_key);
        view.write(8, bytes.get(8..).unwrap_or(&[]));
        if let Some(w) = view.word(0) {
            w.store(MAGIC, std::sync::atomic::Ordering::Release);
        }
        let cma = if cfg.single_copy.cma() {
            probe_cma_self()
        } else {
            Err(format!("disabled by {}", crate::PARAM_SINGLE_COPY))
        };
        let cache = RegCache::new(RegCacheConfig {
            merge: false,
            max_count: cfg.map_cache_max.max(1),
            ..RegCacheConfig::default()
        })
        .map_err(|e| PluginError::invalid(format!("mapping cache: {e}")))?;
        let mapper = PeerMapper::default();
        let request = mapper.request_slot();
        let cache_id = cache
            .add_transport(mapper)
            .map_err(|e| PluginError::new(ErrorKind::RESOURCE_EXHAUSTED, e.to_string()))?;
        let local_size = job.local_size as usize;
        Ok(ShmTransport {
            host_buffers: HashMap::new(),
            own: Own {
                seg,
                layout,
                fifo: FifoReader::new(&layout),
            },
            st: State {
                host,
                rank: job.rank,
                local: job.local_rank,
                local_size: job.local_size,
                job_key: job.job_key,
                pid,
                boot_id: sys::boot_id(),
                own_layout: layout,
                peers: (0..local_size).map(|_| None).collect(),
                active: Vec::new(),
                local_of_rank: IdMap::default(),
                last_sent: None,
                backlog: Vec::new(),
                stash: (0..local_size).map(|_| VecDeque::new()).collect(),
                stashed: 0,
                cache,
                cache_id,
                mapper: request,
                next_seg_id: 1,
                buffers: Buffers::default(),
                staging: Staging::new(cfg.staging_chunk, cfg.staging_limit),
                rts: IdMap::default(),
                rdma: IdMap::default(),
                next_op: 1,
                regs: IdMap::default(),
                next_reg: 1,
                remote_maps: IdMap::default(),
                next_remote_map: 1,
                cma,
                events: VecDeque::new(),
                liveness_tick: 0,
                next_idle_liveness: Instant::now() + IDLE_LIVENESS,
                bounce: Vec::new(),
                counters: Counters::default(),
                cfg,
            },
        })
    }

    /// Which single-copy mechanisms this module uses, and why not when it
    /// cannot: e.g. `"memfd mappings: on; process_vm_readv: off (…)"`.
    pub fn single_copy_status(&self) -> String {
        let memfd = if self.st.cfg.single_copy.memfd() {
            "on".to_owned()
        } else {
            format!("off (disabled by {})", crate::PARAM_SINGLE_COPY)
        };
        let cma = match &self.st.cma {
            Ok(()) => "on".to_owned(),
            Err(why) => format!("off ({why})"),
        };
        format!("memfd mappings: {memfd}; process_vm_readv: {cma}")
    }

    /// Whether process_vm_readv is used with `peer`, or why not.
    pub fn peer_cma_status(&self, peer: Rank) -> Result<(), String> {
        let p = self.st.peer_of(peer).map_err(|e| e.to_string())?;
        self.st.peers[p as usize]
            .as_ref()
            .map_or(Err("unknown peer".into()), |p| p.cma.clone())
    }

    /// Counters of the mapping cache of peers' segments.
    pub fn mapping_stats(&self) -> CacheStats {
        self.st.cache.stats()
    }

    /// Counters of the paths taken.
    pub fn counters(&self) -> Counters {
        self.st.counters
    }

    /// Whether nothing is left to do for this process's own operations:
    /// no fragment waits to be written, no rendezvous send or emulated RDMA
    /// waits for its peer, no event waits to be reported. A process that
    /// is about to stop calls `progress` until this holds, so that the
    /// completions its peers wait for have left.
    pub fn is_quiet(&self) -> bool {
        self.st.backlog.is_empty()
            && self.st.events.is_empty()
            && self.st.rts.is_empty()
            && self.st.rdma.is_empty()
    }
}

impl State {
    fn log(&self, level: LogLevel, msg: &str) {
        self.host.log(level, msg);
    }

    /// Counts a `progress` call; every [`LIVENESS_PERIOD`] calls, checks
    /// that the peers waited for live (or, when none is, looks at the
    /// clock for [`IDLE_LIVENESS`]).
    #[inline]
    pub(super) fn tick_liveness(&mut self) {
        self.liveness_tick = self.liveness_tick.wrapping_add(1);
        if self.liveness_tick % LIVENESS_PERIOD == 0 {
            self.liveness_due();
        }
    }

    #[cold]
    #[inline(never)]
    fn liveness_due(&mut self) {
        let waiting = !self.backlog.is_empty() || !self.rts.is_empty() || !self.rdma.is_empty();
        if waiting {
            self.check_liveness();
        } else {
            let now = Instant::now();
            if now >= self.next_idle_liveness {
                self.next_idle_liveness = now + IDLE_LIVENESS;
                self.check_liveness();
            }
        }
    }

    fn report(&mut self, sink: &mut dyn EventSink) -> usize {
        let n = self.events.len();
        while let Some(e) = self.events.pop_front() {
            match e {
                Event::Send(cookie, r) => sink.send_complete(cookie, r),
                Event::Rdma(cookie, r) => sink.rdma_complete(cookie, r),
                Event::PeerFailed(rank, err) => sink.peer_failed(rank, err),
            }
        }
        n
    }
}

impl Transport for ShmTransport {
    fn send_in_place(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: MemRegion,
        cookie: u64,
    ) -> Result<Completion, PluginError> {
        // SAFETY: the trait's contract is the inherent method's: `payload`
        // stays valid and unchanged until `Done` or `send_complete(cookie)`
        // (and `MemRegion::new`'s own contract made it valid to begin with).
        unsafe { ShmTransport::send_in_place(self, peer, tag, header, payload, cookie) }
    }

    fn alloc_transfer_buffer(
        &mut self,
        len: usize,
    ) -> Result<fireopal_abi::btl::TransferBuffer, PluginError> {
        let buffer = ShmTransport::alloc_transfer_buffer(self, len)?;
        let id = buffer.segment_id();
        // SAFETY: the mapping stays in `host_buffers` until
        // `free_transfer_buffer(id)` or the module's end, which is the
        // lifetime the interface promises for the region.
        let region = unsafe { MemRegion::new(buffer.as_ptr(), buffer.len()) };
        self.host_buffers.insert(id, buffer);
        Ok(fireopal_abi::btl::TransferBuffer { id, region })
    }

    fn free_transfer_buffer(&mut self, id: u64) -> Result<(), PluginError> {
        let buffer = self
            .host_buffers
            .remove(&id)
            .ok_or_else(|| PluginError::invalid(format!("no transfer buffer {id}")))?;
        self.release_transfer_buffer(buffer);
        Ok(())
    }

    fn register_segment(&mut self, fd: i32, region: MemRegion) -> Result<u64, PluginError> {
        if fd < 0 {
            return Err(PluginError::invalid("negative descriptor"));
        }
        // SAFETY: the interface lends the descriptor for this call, and
        // `register_segment` only duplicates it before returning.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        ShmTransport::register_segment(self, fd, region)
    }

    fn unregister_segment(&mut self, id: u64) -> Result<(), PluginError> {
        ShmTransport::unregister_segment(self, id)
    }

    fn attributes(&self) -> Result<BtlAttributes, PluginError> {
        Ok(attributes(&self.st.cfg))
    }

    fn address(&self) -> Result<Vec<u8>, PluginError> {
        let sref = self.own.seg.sref;
        Ok(Address {
            rank: self.st.rank,
            local: self.st.local,
            pid: self.st.pid,
            fd: sref.fd,
            seg_len: sref.len,
            file_id: sref.file_id,
            probe: sref.base,
            boot_id: self.st.boot_id,
            checksum: self.st.cfg.checksum,
        }
        .encode()
        .to_vec())
    }

    fn add_peers(&mut self, peers: &[PeerAddress<'_>]) -> Result<Vec<Reachability>, PluginError> {
        Ok(peers
            .iter()
            .map(|addr| {
                if let Some(&p) = self.st.local_of_rank.get(&addr.rank) {
                    // Added before: the first address stays.
                    return match self.st.peers.get(p as usize).and_then(Option::as_ref) {
                        Some(peer) if peer.failed.is_none() => Reachability::Reachable,
                        _ => Reachability::Unreachable("peer failed".into()),
                    };
                }
                match self.st.add_peer(addr) {
                    Ok((local, cma)) => {
                        // Tell the peer whether it may leave in-place
                        // payloads where they are.
                        self.own.set_cma_flag(local, cma);
                        Reachability::Reachable
                    }
                    Err(why) => {
                        self.st.log(
                            LogLevel::Debug,
                            &format!("shm: rank {} unreachable: {why}", addr.rank),
                        );
                        Reachability::Unreachable(why.into())
                    }
                }
            })
            .collect())
    }

    fn remove_peer(&mut self, peer: Rank) -> Result<(), PluginError> {
        let p = self.st.peer_of(peer)?;
        self.st.local_of_rank.remove(&peer);
        self.st.last_sent = None;
        self.st.active.retain(|&a| a != p);
        self.st.backlog.retain(|&a| a != p);
        if let Some(gone) = self.st.peers.get_mut(p as usize).and_then(Option::take) {
            self.st.drop_peer_work(p, peer, gone.pending);
        }
        if let Some(stash) = self.st.stash.get_mut(p as usize) {
            self.st.stashed -= stash.len();
            stash.clear();
        }
        Ok(())
    }

    #[inline]
    fn sendi(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
    ) -> Result<SendiOutcome, PluginError> {
        if header.len() > MAX_HEADER {
            return Err(PluginError::invalid(format!(
                "header longer than {MAX_HEADER} bytes"
            )));
        }
        let st = &mut self.st;
        let local = st.local as u16;
        let too_big = header.len() + payload.len() > st.cfg.sendi_max();
        let p = match st.last_sent {
            Some((rank, p)) if rank == peer => Some(p),
            _ => {
                let p = st.local_of_rank.get(&peer).copied();
                st.last_sent = p.map(|p| (peer, p));
                p
            }
        };
        let target = p
            .and_then(|p| st.peers.get_mut(p as usize))
            .and_then(Option::as_mut);
        let (p, target) = match (p, target) {
            (Some(p), Some(t)) if t.failed.is_none() => (p, t),
            // Unknown, removed or failed: the same answers as `send`.
            _ => {
                return Err(st
                    .usable_peer(peer)
                    .err()
                    .unwrap_or_else(|| PluginError::invalid("peer")))
            }
        };
        if too_big || !target.pending.is_empty() {
            return Ok(SendiOutcome::Busy);
        }
        let frag = Frag {
            kind: Kind::Active,
            tag,
            hdr_len: header.len() as u8,
            parts: [header, payload, &[]],
        };
        match target.try_write(local, &frag, &mut st.counters) {
            Ok(true) => Ok(SendiOutcome::Sent),
            Ok(false) => Ok(SendiOutcome::Busy),
            Err(e) => {
                let err = malformed(peer, "corrupt receive queue", e);
                st.fail_peer(p, err.clone());
                Err(err)
            }
        }
    }

    fn send(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        cookie: u64,
    ) -> Result<Completion, PluginError> {
        let p = self.st.usable_peer(peer)?;
        self.st.send(p, tag, header, payload, cookie)
    }

    fn register_mem(
        &mut self,
        region: MemRegion,
        access: Access,
    ) -> Result<Registration, PluginError> {
        if region.is_empty() {
            return Err(PluginError::invalid("cannot register an empty region"));
        }
        self.st.reap_buffers();
        let id = self.st.next_reg;
        self.st.next_reg += 1;
        let base = region.addr() as u64;
        let len = region.len() as u64;
        let segment = self.st.buffers.find(base, len);
        self.st.regs.insert(id, LocalReg { base, len, access });
        let key = RemoteKey {
            reg: id,
            pid: self.st.pid,
            access: access.0 as u8,
            base,
            len,
            segment,
        };
        Ok(Registration {
            id,
            remote_key: key.encode().to_vec().into(),
        })
    }

    fn deregister_mem(&mut self, id: u64) -> Result<(), PluginError> {
        self.st
            .regs
            .remove(&id)
            .map(|_| ())
            .ok_or_else(|| PluginError::invalid(format!("no registration {id}")))
    }

    fn map_remote(&mut self, peer: Rank, remote_key: &[u8]) -> Result<RemoteMapping, PluginError> {
        ShmTransport::map_remote(self, peer, remote_key)
    }

    fn unmap_remote(&mut self, id: u64) -> Result<(), PluginError> {
        self.st
            .remote_maps
            .remove(&id)
            .map(drop)
            .ok_or_else(|| PluginError::invalid(format!("no remote mapping {id}")))
    }

    fn put(&mut self, op: &RdmaOp<'_>) -> Result<Completion, PluginError> {
        self.rdma(op, true)
    }

    fn get(&mut self, op: &RdmaOp<'_>) -> Result<Completion, PluginError> {
        self.rdma(op, false)
    }

    /// Work waiting behind a full queue; the module's own fragments
    /// (rendezvous control, answers to an emulated get) have no cookie.
    fn unsent(&self) -> u64 {
        self.st
            .peers
            .iter()
            .flatten()
            .flat_map(|p| &p.pending)
            .map(Pending::unsent)
            .sum()
    }

    #[inline]
    fn progress(&mut self, sink: &mut dyn EventSink) -> Result<usize, PluginError> {
        // Most calls find nothing: a process waiting for a message polls
        // here in a loop, and the shorter the loop, the sooner it sees the
        // message. Such a call looks at one word per peer and at the
        // queue's head, and leaves.
        if self.st.backlog.is_empty()
            && self.st.stashed == 0
            && self.st.events.is_empty()
            && !self.arrived()
        {
            self.idle();
            return Ok(0);
        }
        Ok(self.progress_busy(sink))
    }
}

impl ShmTransport {
    /// A `progress` call with something to do: write what waits, receive,
    /// write again, report.
    #[inline(never)]
    fn progress_busy(&mut self, sink: &mut dyn EventSink) -> usize {
        let mut events = 0;
        if !self.st.backlog.is_empty() {
            self.st.flush();
        }
        events += self.receive(sink);
        if !self.st.backlog.is_empty() {
            self.st.flush();
        }
        self.st.tick_liveness();
        if !self.st.events.is_empty() {
            events += self.st.report(sink);
        }
        events
    }
}
