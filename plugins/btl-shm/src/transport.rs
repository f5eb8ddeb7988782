//! The `shm` module: endpoints, the send paths, the receive loop, the
//! rendezvous and RDMA protocols (see the crate documentation).

// Copies between shared mappings and memory handed over as `MemRegion`s,
// and process_vm_readv/writev into it.
#![allow(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fireopal_abi::btl::{
    Access, BtlAttributes, Completion, EventSink, MemRegion, PeerAddress, Rank, RdmaOp,
    Reachability, Registration, SendiOutcome, Transport,
};
use fireopal_abi::host::{Host, LogLevel};
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::regcache::{self, CacheStats, RegCache, RegCacheConfig, TransportId};
use fireopal_core::shmq::layout::{
    Header, HeaderExpect, Layout, LayoutParams, CMA_READS, CMA_WORD, MAGIC, SLOT_DATA,
};
use fireopal_core::shmq::wire::{
    self, Address, Fin, GetData, GetRequest, PutAck, PutData, RemoteKey, Rts, SegmentRef, Source,
    Status, Unmap, GET_DATA_LEN, PUT_DATA_LEN, RTS_LEN,
};
use fireopal_core::shmq::{keyspace, seq_distance, seq_next, Kind, Malformed, LINE};

use crate::buffer::{AdoptError, Buffers, LocalSegment, StageSlot, Staging, TransferBuffer};
use crate::mapcache::{MapRequest, PeerMapper, PeerMapping, MAPPING_ACCESS};
use crate::mem::{self, Mapping, View};
use crate::queue::{
    fifo_init, fifo_push, FboxItem, FboxReader, FboxWriter, FifoItem, FifoReader, Frag,
};
use crate::{attributes, sys, Config};

mod checksum;

/// Largest active-message header.
const MAX_HEADER: usize = u8::MAX as usize;
/// Entries taken from one fast box per `progress` call.
const FBOX_BATCH: usize = 64;
/// Largest bounce buffer kept between rendezvous read with
/// process_vm_readv.
const BOUNCE_KEEP: usize = 64 << 20;
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

/// A fragment with its data owned, waiting to be written.
#[derive(Debug)]
struct OwnedFrag {
    kind: Kind,
    tag: u8,
    hdr_len: u8,
    data: Vec<u8>,
}

impl OwnedFrag {
    fn of(frag: &Frag<'_>) -> Self {
        let mut data = Vec::with_capacity(frag.len());
        for p in frag.parts {
            data.extend_from_slice(p);
        }
        Self {
            kind: frag.kind,
            tag: frag.tag,
            hdr_len: frag.hdr_len,
            data,
        }
    }

    fn frag(&self) -> Frag<'_> {
        Frag {
            kind: self.kind,
            tag: self.tag,
            hdr_len: self.hdr_len,
            parts: [&self.data, &[], &[]],
        }
    }
}

/// Work waiting, in order, to be written to one peer.
#[derive(Debug)]
enum Pending {
    /// A fragment; its send completes (if it has a cookie) once written.
    Frag(OwnedFrag, Option<u64>),
    /// A large send waiting for staging room.
    Stage {
        tag: u8,
        header: Vec<u8>,
        payload: Vec<u8>,
        cookie: u64,
    },
    /// Answers to an emulated get, chunk by chunk.
    GetStream {
        id: u64,
        reg: u64,
        addr: u64,
        len: u64,
        sent: u64,
    },
    /// Chunks of an emulated put.
    PutStream {
        id: u64,
        reg: u64,
        remote: u64,
        local: usize,
        len: u64,
        sent: u64,
    },
}

/// An event waiting for the next `progress` to report it.
#[derive(Debug)]
enum Event {
    Send(u64, Result<(), PluginError>),
    Rdma(u64, Result<(), PluginError>),
    PeerFailed(Rank, PluginError),
}

/// A rendezvous send waiting for its completion.
#[derive(Debug)]
struct RtsOut {
    peer: u32,
    cookie: u64,
    origin: Origin,
}

/// Where the payload of a rendezvous send waits.
// The header is kept inline so that an in-place send allocates nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Origin {
    /// Copied into the staging pool.
    Staged(StageSlot),
    /// Where the caller keeps it (an in-place send); remembered so that the
    /// send can fall back to staging when the receiver cannot read it.
    InPlace {
        tag: u8,
        header: [u8; MAX_HEADER],
        hdr_len: u8,
        addr: usize,
        len: usize,
    },
}

/// An emulated RDMA operation waiting for the target.
#[derive(Debug)]
struct RdmaOut {
    peer: u32,
    cookie: u64,
    local: usize,
    len: u64,
    received: u64,
    is_put: bool,
}

/// A registration of this process's memory.
#[derive(Debug, Clone, Copy)]
struct LocalReg {
    base: u64,
    len: u64,
    access: Access,
}

impl LocalReg {
    fn allows(&self, need: Access, addr: u64, len: u64) -> bool {
        self.access.contains(need)
            && addr >= self.base
            && addr
                .checked_add(len)
                .is_some_and(|e| e <= self.base + self.len)
    }
}

/// A node-local peer.
#[derive(Debug)]
struct Peer {
    rank: Rank,
    pid: u32,
    pidfd: OwnedFd,
    /// The peer's queue segment, mapped here.
    seg: Mapping,
    layout: Layout,
    fbox_tx: FboxWriter,
    tx_seq: u32,
    pending: VecDeque<Pending>,
    fbox_rx: FboxReader,
    rx_seq: u32,
    /// Whether process_vm_readv works on this peer, or why not.
    cma: Result<(), String>,
    failed: Option<String>,
    /// Whether fragments to this peer carry checksums.
    checksum: bool,
}

impl Peer {
    /// Most fragment data one write to this peer can carry.
    fn fifo_capacity(&self) -> usize {
        self.layout.fifo_data_capacity() - checksum::trailer_len(self.checksum)
    }

    /// Writes `frag` now (fast box, else queue slot), with the next
    /// sequence number. `Ok(false)`: no room.
    #[inline]
    fn try_write(
        &mut self,
        sender: u16,
        frag: &Frag<'_>,
        counters: &mut Counters,
    ) -> Result<bool, Malformed> {
        let mut trailer = [0; fireopal_core::shmq::sum::TRAILER];
        let frag = &self.seal(self.tx_seq, frag, &mut trailer);
        let view = self.seg.view();
        if self.fbox_tx.try_write(&view, self.tx_seq, frag) {
            self.tx_seq = seq_next(self.tx_seq);
            counters.fbox_frags += 1;
            return Ok(true);
        }
        match fifo_push(&view, &self.layout, sender, self.tx_seq, frag) {
            Ok(true) => {
                self.tx_seq = seq_next(self.tx_seq);
                counters.fifo_frags += 1;
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(_) => Err(Malformed::Inconsistent(
                "peer's receive queue has an impossible slot",
            )),
        }
    }
}

/// This process's queue segment and the reader of its receive queue.
#[derive(Debug)]
struct Own {
    seg: LocalSegment,
    layout: Layout,
    fifo: FifoReader,
}

impl Own {
    /// Publishes, in sender `local`'s control line, whether this process
    /// reads that sender's memory with process_vm_readv.
    fn set_cma_flag(&self, local: u32, reads: bool) {
        let word = self
            .layout
            .fbox_ctl(local)
            .and_then(|ctl| self.seg.map.view().word(ctl + CMA_WORD));
        if let Some(w) = word {
            w.store(
                if reads { CMA_READS } else { 0 },
                std::sync::atomic::Ordering::Release,
            );
        }
    }
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

fn status_result(status: Status, what: &str) -> Result<(), PluginError> {
    match status {
        Status::Ok => Ok(()),
        Status::Refused => Err(PluginError::invalid(format!(
            "{what}: the target refused the range"
        ))),
        Status::FetchFailed => Err(PluginError::new(
            ErrorKind::IO,
            format!("{what}: the receiver could not fetch the data"),
        )),
    }
}

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// Takes out of `map` every value `pick` chooses.
fn take_where<K: Copy + Eq + std::hash::Hash, V, S: std::hash::BuildHasher>(
    map: &mut HashMap<K, V, S>,
    mut pick: impl FnMut(&V) -> bool,
) -> Vec<V> {
    let keys: Vec<K> = map
        .iter()
        .filter(|(_, v)| pick(v))
        .map(|(&k, _)| k)
        .collect();
    keys.iter().filter_map(|k| map.remove(k)).collect()
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
                fifo: FifoReader::new(),
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

    /// A new transfer buffer of at least `len` bytes (rounded up to
    /// pages) in a memfd segment of its own. Peers read it with a single
    /// copy, mapping it once. Dropping it (or
    /// [`release_transfer_buffer`](Self::release_transfer_buffer)) unmaps
    /// it and tells the peers.
    pub fn alloc_transfer_buffer(&mut self, len: usize) -> Result<TransferBuffer, PluginError> {
        self.st.reap_buffers();
        let id = self.st.next_seg_id;
        self.st.next_seg_id += 1;
        self.st
            .buffers
            .create(id, len)
            .map_err(|e| io_error("cannot make a transfer buffer", e))
    }

    /// Unmaps a transfer buffer and tells the peers now (dropping it does
    /// the same, the peers being told at the module's next call).
    pub fn release_transfer_buffer(&mut self, buffer: TransferBuffer) {
        drop(buffer);
        self.st.reap_buffers();
    }

    /// Adopts a memory file of the caller (the symmetric heap's memfd),
    /// mapped shared at `region` from offset 0, as a single-copy segment:
    /// payloads and registrations inside `region` are then read by peers
    /// through a cached mapping of the file, as for a [`TransferBuffer`].
    /// The file must be whole pages long and sealed with `F_SEAL_SHRINK`,
    /// `F_SEAL_GROW` and `F_SEAL_SEAL` (create it with
    /// `MFD_ALLOW_SEALING`), because peers map whole pages and refuse a
    /// file whose size could change under their mapping. `fd` is
    /// duplicated; the caller keeps its own. `region` must stay mapped
    /// until [`unregister_segment`](Self::unregister_segment) or the
    /// module's end. Returns the segment's id.
    pub fn register_segment(
        &mut self,
        fd: BorrowedFd<'_>,
        region: MemRegion,
    ) -> Result<u64, PluginError> {
        if !self.st.cfg.single_copy.memfd() {
            return Err(PluginError::unsupported(&format!(
                "mapped segments (memfd mappings disabled by {})",
                crate::PARAM_SINGLE_COPY
            )));
        }
        self.st.reap_buffers();
        let id = self.st.next_seg_id;
        let base = region.addr() as u64;
        match self.st.buffers.adopt(id, fd, base, region.len() as u64) {
            Ok(_) => {
                self.st.next_seg_id += 1;
                Ok(id)
            }
            Err(AdoptError::Io(e)) => Err(io_error("cannot adopt the memory file", e)),
            Err(AdoptError::Refused(why)) => Err(PluginError::invalid(format!(
                "cannot adopt the memory file: {why}"
            ))),
        }
    }

    /// Forgets a segment of [`register_segment`](Self::register_segment)
    /// and tells every peer to drop its mapping. Sends from it must be
    /// complete.
    pub fn unregister_segment(&mut self, id: u64) -> Result<(), PluginError> {
        let seg = self
            .st
            .buffers
            .forget(id)
            .ok_or_else(|| PluginError::invalid(format!("no registered segment {id}")))?;
        self.st.announce_unmap(&seg);
        Ok(())
    }

    /// Sends like [`Transport::send`], but lets the receiver read the
    /// payload where it is, once: through a mapping when it lies in a
    /// [`TransferBuffer`], with process_vm_readv when that is permitted,
    /// and otherwise by staging it as `send` does. Payloads up to the eager
    /// limit are simply sent.
    ///
    /// # Safety
    ///
    /// `payload` must stay valid for reads, and unchanged, until this
    /// returns `Done` or, after `Pending`, until `send_complete(cookie)` is
    /// reported.
    pub unsafe fn send_in_place(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: MemRegion,
        cookie: u64,
    ) -> Result<Completion, PluginError> {
        let p = self.st.usable_peer(peer)?;
        let len = payload.len();
        // SAFETY: valid for reads until completion, per the contract.
        let bytes = unsafe { mem::local_bytes(payload.addr(), len) };
        if !self.st.is_rendezvous(p, header.len(), len) {
            return self.st.send(p, tag, header, bytes, cookie);
        }
        self.st.reap_buffers();
        let addr = payload.addr() as u64;
        let source = if let Some(seg) = self
            .st
            .buffers
            .find(addr, len as u64)
            .filter(|_| self.st.cfg.single_copy.memfd())
        {
            Some(Source::Segment {
                seg,
                offset: addr - seg.base,
            })
        } else if self.st.reads_me(p) {
            Some(Source::Address(addr))
        } else {
            None
        };
        match source {
            Some(source) => {
                self.st.check_send_size(header, len)?;
                let mut kept = [0u8; MAX_HEADER];
                kept[..header.len()].copy_from_slice(header);
                let origin = Origin::InPlace {
                    tag,
                    header: kept,
                    hdr_len: header.len() as u8,
                    addr: payload.addr(),
                    len,
                };
                self.st
                    .send_rts(p, tag, header, len as u64, source, cookie, origin)?;
                Ok(Completion::Pending)
            }
            None => self.st.send(p, tag, header, bytes, cookie),
        }
    }
}

/// Whether process_vm_readv may read sibling processes (the ranks of a
/// job): it must work at all, and Yama's ptrace policy must let this
/// process read a non-descendant.
pub(crate) fn probe_cma_siblings() -> Result<(), String> {
    probe_cma_self()?;
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
        .unwrap_or(0);
    let cap_sys_ptrace = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << 19) != 0);
    match scope {
        0 => Ok(()),
        1 | 2 if cap_sys_ptrace => Ok(()),
        1 => {
            Err("Yama ptrace_scope 1 lets it read only descendants, and ranks are siblings".into())
        }
        2 => Err("Yama ptrace_scope 2 needs CAP_SYS_PTRACE".into()),
        n => Err(format!("Yama ptrace_scope {n} forbids it")),
    }
}

/// Checks that process_vm_readv works at all here (not filtered, not
/// missing) by reading this process's own memory.
fn probe_cma_self() -> Result<(), String> {
    let probe: u64 = MAGIC;
    let mut out = 0u64;
    // SAFETY: `out` is a local valid for 8 bytes of writes.
    let r = unsafe {
        sys::vm_read(
            sys::pid(),
            std::ptr::addr_of!(probe) as u64,
            std::ptr::addr_of_mut!(out).cast(),
            8,
        )
    };
    match r {
        Ok(()) if out == MAGIC => Ok(()),
        Ok(()) => Err("process_vm_readv read wrong bytes".into()),
        Err(e) => Err(format!("process_vm_readv not permitted here: {e}")),
    }
}

impl State {
    fn peer_of(&self, rank: Rank) -> Result<u32, PluginError> {
        self.local_of_rank.get(&rank).copied().ok_or_else(|| {
            PluginError::new(
                ErrorKind::UNREACHABLE,
                format!("shm has no endpoint for rank {rank}"),
            )
        })
    }

    /// The local index of a peer that can be sent to.
    #[inline]
    fn usable_peer(&self, rank: Rank) -> Result<u32, PluginError> {
        let p = self.peer_of(rank)?;
        match self.peers.get(p as usize).and_then(Option::as_ref) {
            Some(peer) if peer.failed.is_none() => Ok(p),
            Some(peer) => Err(PluginError::new(
                ErrorKind::PEER_FAILED,
                format!(
                    "rank {rank} failed: {}",
                    peer.failed.as_deref().unwrap_or("")
                ),
            )),
            None => Err(PluginError::new(
                ErrorKind::UNREACHABLE,
                format!("rank {rank} was removed"),
            )),
        }
    }

    /// Whether peer `p` said it reads this process's memory with
    /// process_vm_readv (the flag it keeps in its segment for this
    /// process), so an in-place send may leave the payload where it is.
    fn reads_me(&self, p: u32) -> bool {
        let Some(peer) = self.peers.get(p as usize).and_then(Option::as_ref) else {
            return false;
        };
        peer.layout
            .fbox_ctl(self.local)
            .and_then(|ctl| peer.seg.view().word(ctl + CMA_WORD))
            .is_some_and(|w| w.load(std::sync::atomic::Ordering::Relaxed) == CMA_READS)
    }

    /// Whether this process reads and writes peer `p`'s memory with
    /// process_vm_readv/writev.
    fn peer_cma(&self, p: u32) -> bool {
        self.cma.is_ok()
            && self
                .peers
                .get(p as usize)
                .and_then(Option::as_ref)
                .is_some_and(|peer| peer.cma.is_ok())
    }

    /// Whether a message goes by rendezvous rather than in one fragment.
    fn is_rendezvous(&self, p: u32, header: usize, payload: usize) -> bool {
        let cap = self
            .peers
            .get(p as usize)
            .and_then(Option::as_ref)
            .map_or(0, Peer::fifo_capacity);
        payload > self.cfg.eager_limit || header + payload > cap
    }

    fn check_send_size(&self, header: &[u8], payload: usize) -> Result<(), PluginError> {
        if header.len() > MAX_HEADER {
            return Err(PluginError::invalid(format!(
                "header of {} bytes exceeds shm's {MAX_HEADER}",
                header.len()
            )));
        }
        if (header.len() + payload) as u64 > self.cfg.max_send {
            return Err(PluginError::invalid(format!(
                "message of {} bytes exceeds shm's max send size {}",
                header.len() + payload,
                self.cfg.max_send
            )));
        }
        Ok(())
    }

    fn log(&self, level: LogLevel, msg: &str) {
        self.host.log(level, msg);
    }

    // ----- sending -------------------------------------------------------

    /// Writes `frag` to peer `p` now, or queues a copy (with the send's
    /// cookie, completed once written). `Ok(true)`: written now.
    fn emit(&mut self, p: u32, frag: &Frag<'_>, cookie: Option<u64>) -> Result<bool, PluginError> {
        let local = self.local as u16;
        let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) else {
            return Err(PluginError::new(ErrorKind::UNREACHABLE, "peer was removed"));
        };
        if peer.pending.is_empty() {
            match peer.try_write(local, frag, &mut self.counters) {
                Ok(true) => return Ok(true),
                Ok(false) => {}
                Err(e) => {
                    let err = malformed(peer.rank, "corrupt receive queue", e);
                    self.fail_peer(p, err.clone());
                    return Err(err);
                }
            }
            self.backlog.push(p);
        }
        peer.pending
            .push_back(Pending::Frag(OwnedFrag::of(frag), cookie));
        self.counters.queued_frags += 1;
        Ok(false)
    }

    /// Queues non-fragment work for peer `p`, after whatever waits.
    fn enqueue(&mut self, p: u32, work: Pending) {
        if let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) {
            if peer.pending.is_empty() {
                self.backlog.push(p);
            }
            peer.pending.push_back(work);
        }
    }

    fn send(
        &mut self,
        p: u32,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        cookie: u64,
    ) -> Result<Completion, PluginError> {
        self.check_send_size(header, payload.len())?;
        if !self.is_rendezvous(p, header.len(), payload.len()) {
            let frag = Frag {
                kind: Kind::Active,
                tag,
                hdr_len: header.len() as u8,
                parts: [header, payload, &[]],
            };
            return Ok(if self.emit(p, &frag, Some(cookie))? {
                Completion::Done
            } else {
                Completion::Pending
            });
        }
        // Rendezvous from a staging copy (the caller may reuse `payload`
        // as soon as this returns). Staging waits behind queued work.
        let queued = self
            .peers
            .get(p as usize)
            .and_then(Option::as_ref)
            .is_some_and(|peer| !peer.pending.is_empty());
        if !queued {
            if let Some(slot) = self.stage(payload)? {
                self.send_staged(p, tag, header, payload.len() as u64, slot, cookie)?;
                return Ok(Completion::Pending);
            }
        }
        self.enqueue(
            p,
            Pending::Stage {
                tag,
                header: header.to_vec(),
                payload: payload.to_vec(),
                cookie,
            },
        );
        Ok(Completion::Pending)
    }

    /// Copies `payload` into the staging pool; `None` when it is full.
    fn stage(&mut self, payload: &[u8]) -> Result<Option<StageSlot>, PluginError> {
        let Some(mut slot) = self
            .staging
            .alloc(payload.len(), &mut self.next_seg_id)
            .map_err(|e| io_error("cannot grow the staging pool", e))?
        else {
            return Ok(None);
        };
        if let Some((_, view)) = self.staging.segment(&slot) {
            slot.sum =
                checksum::write_staged(&view, slot.offset as usize, payload, self.cfg.checksum);
        }
        self.counters.rndv_staged += 1;
        Ok(Some(slot))
    }

    fn send_staged(
        &mut self,
        p: u32,
        tag: u8,
        header: &[u8],
        len: u64,
        slot: StageSlot,
        cookie: u64,
    ) -> Result<(), PluginError> {
        let Some((seg, _)) = self.staging.segment(&slot) else {
            return Err(PluginError::new(
                ErrorKind::OTHER,
                "staging slot without segment",
            ));
        };
        let source = Source::Segment {
            seg,
            offset: slot.offset,
        };
        self.send_rts(p, tag, header, len, source, cookie, Origin::Staged(slot))
    }

    #[allow(clippy::too_many_arguments)]
    fn send_rts(
        &mut self,
        p: u32,
        tag: u8,
        header: &[u8],
        len: u64,
        source: Source,
        cookie: u64,
        origin: Origin,
    ) -> Result<(), PluginError> {
        let id = self.next_op;
        self.next_op += 1;
        let sum = self.rts_sum(&origin);
        let rts = Rts {
            id,
            len,
            source,
            sum,
        }
        .encode();
        let frag = Frag {
            kind: Kind::Rts,
            tag,
            hdr_len: header.len() as u8,
            parts: [&rts, header, &[]],
        };
        // Recorded only once the request is out (or queued): if writing
        // fails, the caller gets the error and no completion ever follows.
        // Nothing can answer before this returns.
        if let Err(e) = self.emit(p, &frag, None) {
            if let Origin::Staged(slot) = origin {
                self.free_stage(&slot);
            }
            return Err(e);
        }
        self.rts.insert(
            id,
            RtsOut {
                peer: p,
                cookie,
                origin,
            },
        );
        Ok(())
    }

    fn free_stage(&mut self, slot: &StageSlot) {
        if let Some(gone) = self.staging.free(slot) {
            self.announce_unmap(&gone);
        }
    }

    /// Tells every peer that a segment of this process went away.
    fn announce_unmap(&mut self, seg: &SegmentRef) {
        let notice = Unmap {
            id: seg.id,
            base: seg.base,
            len: seg.len,
        }
        .encode();
        let frag = Frag::control(Kind::Unmap, &notice);
        for p in self.active.clone() {
            // A failing peer is reported through the event queue.
            let _ = self.emit(p, &frag, None);
        }
    }

    fn reap_buffers(&mut self) {
        for seg in self.buffers.reap() {
            self.announce_unmap(&seg);
        }
    }

    /// Writes what waits for each peer, in order, as far as there is room.
    fn flush(&mut self) {
        let mut i = 0;
        while i < self.backlog.len() {
            let p = self.backlog[i];
            self.flush_peer(p);
            let done = self
                .peers
                .get(p as usize)
                .and_then(Option::as_ref)
                .is_none_or(|peer| peer.pending.is_empty() || peer.failed.is_some());
            if done {
                self.backlog.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    fn flush_peer(&mut self, p: u32) {
        let Some(mut queue) = self
            .peers
            .get_mut(p as usize)
            .and_then(Option::as_mut)
            .filter(|peer| peer.failed.is_none())
            .map(|peer| std::mem::take(&mut peer.pending))
        else {
            return;
        };
        let mut failure = None;
        while let Some(front) = queue.front_mut() {
            match self.step(p, front) {
                Ok(true) => {
                    queue.pop_front();
                }
                Ok(false) => break,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) {
            // `step` never queues to the peer it serves; were it to, that
            // work goes after.
            queue.append(&mut peer.pending);
            peer.pending = queue;
        }
        if let Some(e) = failure {
            // With the queue back in place, so that its sends fail too.
            self.fail_peer(p, e);
        }
    }

    /// Advances one piece of pending work; `Ok(true)` when it is done.
    fn step(&mut self, p: u32, work: &mut Pending) -> Result<bool, PluginError> {
        let local = self.local as u16;
        match work {
            Pending::Frag(frag, cookie) => {
                let written = self.write_now(p, local, &frag.frag())?;
                if written {
                    if let Some(c) = cookie {
                        self.events.push_back(Event::Send(*c, Ok(())));
                    }
                }
                Ok(written)
            }
            Pending::Stage {
                tag,
                header,
                payload,
                cookie,
            } => {
                let Some(slot) = self.stage(payload)? else {
                    return Ok(false);
                };
                let id = self.next_op;
                self.next_op += 1;
                let Some((seg, _)) = self.staging.segment(&slot) else {
                    return Err(PluginError::new(
                        ErrorKind::OTHER,
                        "staging slot without segment",
                    ));
                };
                let rts = Rts {
                    id,
                    len: payload.len() as u64,
                    source: Source::Segment {
                        seg,
                        offset: slot.offset,
                    },
                    sum: slot.sum,
                }
                .encode();
                self.rts.insert(
                    id,
                    RtsOut {
                        peer: p,
                        cookie: *cookie,
                        origin: Origin::Staged(slot),
                    },
                );
                let mut data = rts.to_vec();
                data.extend_from_slice(header);
                *work = Pending::Frag(
                    OwnedFrag {
                        kind: Kind::Rts,
                        tag: *tag,
                        hdr_len: header.len() as u8,
                        data,
                    },
                    None,
                );
                self.step(p, work)
            }
            Pending::GetStream {
                id,
                reg,
                addr,
                len,
                sent,
            } => {
                let live = self
                    .regs
                    .get(reg)
                    .is_some_and(|r| r.allows(Access::REMOTE_READ, *addr, *len));
                if !live {
                    let refusal = GetData {
                        id: *id,
                        offset: *sent,
                        status: Status::Refused,
                    }
                    .encode();
                    let frag = Frag::control(Kind::GetData, &refusal);
                    return self.write_now(p, local, &frag);
                }
                let id = *id;
                let head = |offset| {
                    GetData {
                        id,
                        offset,
                        status: Status::Ok,
                    }
                    .encode()
                };
                // SAFETY: inside a live registration granting remote reads
                // (checked above), valid per `MemRegion`'s contract until
                // deregistered.
                unsafe { self.stream(p, local, Kind::GetData, *addr as usize, *len, sent, head) }
            }
            Pending::PutStream {
                id,
                reg,
                remote,
                local: src,
                len,
                sent,
            } => {
                let (id, addr, total, reg) = (*id, *remote, *len, *reg);
                let head = |offset| {
                    PutData {
                        id,
                        addr,
                        total,
                        offset,
                        reg,
                    }
                    .encode()
                };
                // SAFETY: the put's local region, valid for reads until its
                // completion per `MemRegion`'s contract.
                unsafe { self.stream(p, local, Kind::PutData, *src, *len, sent, head) }
            }
        }
    }

    /// Writes the bytes `sent..len` of the local memory at `src` to peer
    /// `p` in `kind` fragments as large as its queue takes, each behind the
    /// sub-header `head` makes for the fragment's offset, and moves `sent`
    /// on. False when the queue filled first (the rest goes later).
    ///
    /// # Safety
    ///
    /// `src..src + len` must be valid for reads during the call.
    #[allow(clippy::too_many_arguments)]
    unsafe fn stream<const H: usize>(
        &mut self,
        p: u32,
        local: u16,
        kind: Kind,
        src: usize,
        len: u64,
        sent: &mut u64,
        head: impl Fn(u64) -> [u8; H],
    ) -> Result<bool, PluginError> {
        while *sent < len {
            let cap = self.chunk_capacity(p, H);
            let n = (len - *sent).min(cap as u64);
            let head = head(*sent);
            // SAFETY: a sub-range of `src..src + len`, readable per the
            // caller's contract.
            let bytes = unsafe { mem::local_bytes(src + *sent as usize, n as usize) };
            let frag = Frag {
                kind,
                tag: 0,
                hdr_len: 0,
                parts: [&head, bytes, &[]],
            };
            if !self.write_now(p, local, &frag)? {
                return Ok(false);
            }
            *sent += n;
        }
        Ok(true)
    }

    /// Data bytes per chunk of emulated RDMA to peer `p`.
    fn chunk_capacity(&self, p: u32, fixed: usize) -> usize {
        let cap = self
            .peers
            .get(p as usize)
            .and_then(Option::as_ref)
            .map_or(0, Peer::fifo_capacity);
        cap.saturating_sub(fixed).max(1)
    }

    fn write_now(&mut self, p: u32, local: u16, frag: &Frag<'_>) -> Result<bool, PluginError> {
        let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) else {
            return Err(PluginError::new(ErrorKind::UNREACHABLE, "peer was removed"));
        };
        let rank = peer.rank;
        peer.try_write(local, frag, &mut self.counters)
            .map_err(|e| malformed(rank, "corrupt receive queue", e))
    }

    // ----- failures --------------------------------------------------------

    /// Marks peer `p` failed: it is not read again, its pending work and
    /// outstanding operations fail (reported at the next `progress`), and
    /// its mappings go.
    fn fail_peer(&mut self, p: u32, error: PluginError) {
        let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) else {
            return;
        };
        if peer.failed.is_some() {
            return;
        }
        peer.failed = Some(error.message.to_string());
        let rank = peer.rank;
        let pending = std::mem::take(&mut peer.pending);
        self.active.retain(|&a| a != p);
        self.log(LogLevel::Warn, &format!("shm: rank {rank} failed: {error}"));
        self.events.push_back(Event::PeerFailed(rank, error));
        self.drop_peer_work(p, rank, pending);
    }

    /// Fails everything outstanding with peer `p`.
    fn drop_peer_work(&mut self, p: u32, rank: Rank, pending: VecDeque<Pending>) {
        let gone = || PluginError::new(ErrorKind::PEER_FAILED, format!("rank {rank} is gone"));
        for work in pending {
            match work {
                Pending::Frag(_, Some(cookie)) | Pending::Stage { cookie, .. } => {
                    self.events.push_back(Event::Send(cookie, Err(gone())));
                }
                _ => {}
            }
        }
        for r in take_where(&mut self.rts, |r| r.peer == p) {
            if let Origin::Staged(slot) = r.origin {
                self.free_stage(&slot);
            }
            self.events.push_back(Event::Send(r.cookie, Err(gone())));
        }
        for r in take_where(&mut self.rdma, |r| r.peer == p) {
            self.events.push_back(Event::Rdma(r.cookie, Err(gone())));
        }
        if let Some((start, len)) = keyspace::peer_space(p) {
            self.cache.invalidate(start, len);
        }
    }

    // ----- mappings of peers' segments -------------------------------------

    /// The cached mapping of peer `p`'s segment `seg`, mapping it on a
    /// miss. A cached mapping of an older segment at the same place (its
    /// unmap notice not seen yet) is dropped and the new one mapped.
    fn map_segment(
        &mut self,
        p: u32,
        seg: &SegmentRef,
    ) -> Result<regcache::Registration<PeerMapper>, String> {
        let peer = self
            .peers
            .get(p as usize)
            .and_then(Option::as_ref)
            .ok_or("peer was removed")?;
        if seg.base % fireopal_core::shmq::layout::PAGE as u64 != 0
            || seg.len % fireopal_core::shmq::layout::PAGE as u64 != 0
        {
            return Err("segment is not whole pages".into());
        }
        let (start, len) = keyspace::peer_key(p, seg.base, seg.len)
            .ok_or("segment address outside the cacheable range")?;
        let key = regcache::Region::new(start, len).ok_or("empty segment")?;
        let request = MapRequest {
            key,
            pid: peer.pid,
            pidfd: peer.pidfd.as_raw_fd(),
            seg: *seg,
        };
        for _ in 0..2 {
            self.set_map_request(Some(request));
            let got = self.cache.get(start, len, MAPPING_ACCESS, self.cache_id);
            self.set_map_request(None);
            let reg = got.map_err(|e| e.to_string())?;
            let h: &PeerMapping = reg.handle();
            if h.seg_id == seg.id && h.file_id == seg.file_id && h.len as u64 == seg.len {
                return Ok(reg);
            }
            drop(reg);
            self.cache.invalidate(start, len);
        }
        Err("a stale mapping of the segment stayed in use".into())
    }

    fn set_map_request(&self, request: Option<MapRequest>) {
        if let Ok(mut slot) = self.mapper.lock() {
            *slot = request;
        }
    }

    // ----- receiving ---------------------------------------------------------

    /// Takes entries from peer `p`'s fast box while they are next in
    /// order; with `until`, takes exactly those before sequence `until`
    /// (they must be there: a queue fragment with that number arrived).
    fn drain_fbox(
        &mut self,
        view: &View<'_>,
        p: u32,
        until: Option<u32>,
        sink: &mut dyn EventSink,
    ) -> Result<usize, PluginError> {
        let mut events = 0;
        let mut taken = 0usize;
        let fifo_slots = self.own_layout.params().fifo_slots;
        let limit = 2 * self.own_layout.fbox_lines() as usize;
        let result = loop {
            let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) else {
                break Ok(());
            };
            if until == Some(peer.rx_seq) || (until.is_none() && taken >= FBOX_BATCH) {
                break Ok(());
            }
            if taken > limit {
                break Err(Malformed::Inconsistent(
                    "fast box never reaches the queue fragment",
                ));
            }
            let item = match peer.fbox_rx.peek(view) {
                Ok(item) => item,
                Err(e) => break Err(e),
            };
            match item {
                FboxItem::Empty => {
                    if until.is_some() {
                        break Err(Malformed::Inconsistent(
                            "queue fragment ahead of missing fast-box entries",
                        ));
                    }
                    break Ok(());
                }
                FboxItem::Wrap(seq) => {
                    // The marker carries the number of the entry after it.
                    if seq != peer.rx_seq {
                        if until.is_some() || seq_distance(peer.rx_seq, seq) > fifo_slots {
                            break Err(Malformed::Inconsistent("wrap marker out of sequence"));
                        }
                        // Earlier fragments are in the queue.
                        break Ok(());
                    }
                    peer.fbox_rx.consume(None);
                    peer.fbox_rx.publish(view);
                    taken += 1;
                }
                FboxItem::Entry(h, data) => {
                    if h.seq != peer.rx_seq {
                        if until.is_some() || seq_distance(peer.rx_seq, h.seq) > fifo_slots {
                            break Err(Malformed::Inconsistent("fast-box entry out of sequence"));
                        }
                        // Earlier fragments are in the queue.
                        break Ok(());
                    }
                    peer.rx_seq = seq_next(peer.rx_seq);
                    let lines = h.lines();
                    let frag = (h.kind, h.tag, h.hdr_len);
                    let data = match checksum::open(
                        self.cfg.checksum,
                        &mut self.counters,
                        h.seq,
                        frag,
                        data,
                    ) {
                        Ok(data) => data,
                        Err(e) => break Err(e),
                    };
                    let handled = if h.kind == Kind::Active {
                        // The common case, straight to the host.
                        let (header, payload) =
                            data.split_at(usize::from(h.hdr_len).min(data.len()));
                        sink.deliver(peer.rank, h.tag, header, payload);
                        Ok(1)
                    } else {
                        self.handle(p, h.kind, h.tag, h.hdr_len, data, sink)
                    };
                    if let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) {
                        peer.fbox_rx.consume(Some(lines));
                        peer.fbox_rx.publish(view);
                    }
                    taken += 1;
                    match handled {
                        Ok(n) => events += n,
                        Err(e) => break Err(e),
                    }
                }
            }
        };
        if let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) {
            if let Err(e) = result {
                let rank = peer.rank;
                self.fail_peer(p, malformed(rank, "corrupt fast-box entry", e));
            }
        }
        Ok(events)
    }

    /// Handles one queue fragment from peer `p` (live or stashed): first
    /// the fast-box entries numbered before it, then the fragment.
    fn take_fragment(
        &mut self,
        view: &View<'_>,
        p: u32,
        seq: u32,
        frag: (Kind, u8, u8),
        data: &[u8],
        sink: &mut dyn EventSink,
    ) -> usize {
        let mut events = match self.drain_fbox(view, p, Some(seq), sink) {
            Ok(n) => n,
            Err(_) => return 0,
        };
        let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) else {
            return events;
        };
        if peer.failed.is_some() {
            return events;
        }
        peer.rx_seq = seq_next(peer.rx_seq);
        let rank = peer.rank;
        let data = match checksum::open(self.cfg.checksum, &mut self.counters, seq, frag, data) {
            Ok(data) => data,
            Err(e) => {
                self.fail_peer(p, malformed(rank, "corrupt queue fragment", e));
                return events;
            }
        };
        match self.handle(p, frag.0, frag.1, frag.2, data, sink) {
            Ok(n) => events += n,
            Err(e) => self.fail_peer(p, malformed(rank, "corrupt queue fragment", e)),
        }
        events
    }

    /// Acts on one fragment from peer `p`; returns the events reported.
    fn handle(
        &mut self,
        p: u32,
        kind: Kind,
        tag: u8,
        hdr_len: u8,
        data: &[u8],
        sink: &mut dyn EventSink,
    ) -> Result<usize, Malformed> {
        let rank = match self.peers.get(p as usize).and_then(Option::as_ref) {
            Some(peer) => peer.rank,
            None => return Ok(0),
        };
        let hdr_len = usize::from(hdr_len);
        if !matches!(kind, Kind::Active | Kind::Rts) && hdr_len != 0 {
            return Err(Malformed::Inconsistent("header on a control fragment"));
        }
        match kind {
            Kind::Active => {
                let (header, payload) = data.split_at(hdr_len.min(data.len()));
                sink.deliver(rank, tag, header, payload);
                Ok(1)
            }
            Kind::Rts => {
                let rts = Rts::decode(data)?;
                let header = data
                    .get(RTS_LEN..)
                    .filter(|h| h.len() == hdr_len)
                    .ok_or(Malformed::Inconsistent("rendezvous header length"))?;
                let mut checked = checksum::Checked::new(sink, rts.sum, self.cfg.checksum);
                let status = self.receive_rts(p, rank, tag, header, &rts, &mut checked);
                checked.verdict(&mut self.counters)?;
                let fin = Fin { id: rts.id, status }.encode();
                let frag = Frag::control(Kind::Fin, &fin);
                let _ = self.emit(p, &frag, None);
                Ok(usize::from(status == Status::Ok))
            }
            Kind::Fin => {
                let fin = Fin::decode(data)?;
                let out = match self.rts.get(&fin.id) {
                    Some(out) if out.peer == p => self.rts.remove(&fin.id),
                    _ => None,
                }
                .ok_or(Malformed::Inconsistent(
                    "completion of an unknown rendezvous",
                ))?;
                match out.origin {
                    Origin::Staged(slot) => self.free_stage(&slot),
                    Origin::InPlace {
                        tag,
                        header,
                        hdr_len,
                        addr,
                        len,
                    } if fin.status == Status::FetchFailed => {
                        // The receiver could not read it where it is: send
                        // it again from a staging copy, same cookie.
                        self.log(
                            LogLevel::Info,
                            &format!(
                                "shm: rank {rank} could not read an in-place payload; staging it"
                            ),
                        );
                        self.counters.rndv_fallbacks += 1;
                        // SAFETY: an in-place payload stays valid until its
                        // completion, which has not been reported yet.
                        let bytes = unsafe { mem::local_bytes(addr, len) };
                        let header = header.get(..usize::from(hdr_len)).unwrap_or(&[]);
                        return Ok(match self.send(p, tag, header, bytes, out.cookie) {
                            Ok(Completion::Pending) => 0,
                            Ok(Completion::Done) => {
                                sink.send_complete(out.cookie, Ok(()));
                                1
                            }
                            Err(e) => {
                                sink.send_complete(out.cookie, Err(e));
                                1
                            }
                        });
                    }
                    Origin::InPlace { .. } => {}
                }
                sink.send_complete(out.cookie, status_result(fin.status, "rendezvous send"));
                Ok(1)
            }
            Kind::Unmap => {
                let u = Unmap::decode(data)?;
                self.counters.unmaps_received += 1;
                if let Some((start, len)) = keyspace::peer_key(p, u.base, u.len) {
                    self.cache.invalidate(start, len);
                }
                Ok(0)
            }
            Kind::GetRequest => {
                let g = GetRequest::decode(data)?;
                let ok = self
                    .regs
                    .get(&g.reg)
                    .is_some_and(|r| r.allows(Access::REMOTE_READ, g.addr, g.len));
                if ok && g.len > 0 {
                    self.enqueue(
                        p,
                        Pending::GetStream {
                            id: g.id,
                            reg: g.reg,
                            addr: g.addr,
                            len: g.len,
                            sent: 0,
                        },
                    );
                } else {
                    let refusal = GetData {
                        id: g.id,
                        offset: 0,
                        status: Status::Refused,
                    }
                    .encode();
                    let frag = Frag::control(Kind::GetData, &refusal);
                    let _ = self.emit(p, &frag, None);
                }
                Ok(0)
            }
            Kind::GetData => {
                let d = GetData::decode(data)?;
                let bytes = data.get(GET_DATA_LEN..).unwrap_or(&[]);
                let out = match self.rdma.get_mut(&d.id) {
                    Some(out) if out.peer == p && !out.is_put => out,
                    _ => return Err(Malformed::Inconsistent("data for an unknown get")),
                };
                if d.status != Status::Ok {
                    let cookie = out.cookie;
                    self.rdma.remove(&d.id);
                    sink.rdma_complete(cookie, status_result(d.status, "get"));
                    return Ok(1);
                }
                let end = d
                    .offset
                    .checked_add(bytes.len() as u64)
                    .filter(|&e| e <= out.len && out.received + bytes.len() as u64 <= out.len)
                    .ok_or(Malformed::OutOfRange("get data"))?;
                let _ = end;
                // SAFETY: inside the get's local region (checked above),
                // valid for writes until its completion per `MemRegion`'s
                // contract; `bytes` is in the receive queue, elsewhere.
                unsafe {
                    mem::copy(
                        bytes.as_ptr(),
                        (out.local + d.offset as usize) as *mut u8,
                        bytes.len(),
                    );
                }
                out.received += bytes.len() as u64;
                if out.received == out.len {
                    let cookie = out.cookie;
                    self.rdma.remove(&d.id);
                    sink.rdma_complete(cookie, Ok(()));
                    return Ok(1);
                }
                Ok(0)
            }
            Kind::PutData => {
                let bytes = data.get(PUT_DATA_LEN..).unwrap_or(&[]);
                let d = PutData::decode(data, bytes.len())?;
                let ok = self
                    .regs
                    .get(&d.reg)
                    .is_some_and(|r| r.allows(Access::REMOTE_WRITE, d.addr, d.total));
                if ok {
                    // SAFETY: inside a live registration granting remote
                    // writes (checked above, whole put range), valid per
                    // `MemRegion`'s contract until deregistered.
                    unsafe {
                        mem::copy(
                            bytes.as_ptr(),
                            (d.addr + d.offset) as usize as *mut u8,
                            bytes.len(),
                        );
                    }
                }
                if d.offset + bytes.len() as u64 == d.total {
                    let ack = PutAck {
                        id: d.id,
                        status: if ok { Status::Ok } else { Status::Refused },
                    }
                    .encode();
                    let frag = Frag::control(Kind::PutAck, &ack);
                    let _ = self.emit(p, &frag, None);
                }
                Ok(0)
            }
            Kind::PutAck => {
                let a = PutAck::decode(data)?;
                let out = match self.rdma.get(&a.id) {
                    Some(out) if out.peer == p && out.is_put => self.rdma.remove(&a.id),
                    _ => None,
                }
                .ok_or(Malformed::Inconsistent("acknowledgement of an unknown put"))?;
                sink.rdma_complete(out.cookie, status_result(a.status, "put"));
                Ok(1)
            }
            Kind::Wrap => Err(Malformed::BadKind(Kind::Wrap as u8)),
        }
    }

    /// Fetches a rendezvous payload and hands it to the host.
    fn receive_rts(
        &mut self,
        p: u32,
        rank: Rank,
        tag: u8,
        header: &[u8],
        rts: &Rts,
        sink: &mut dyn EventSink,
    ) -> Status {
        let Ok(len) = usize::try_from(rts.len) else {
            return Status::FetchFailed;
        };
        match rts.source {
            Source::Segment { seg, offset } => {
                let reg = match self.map_segment(p, &seg) {
                    Ok(reg) => reg,
                    Err(why) => {
                        self.log(
                            LogLevel::Warn,
                            &format!("shm: cannot map segment {} of rank {rank}: {why}", seg.id),
                        );
                        return Status::FetchFailed;
                    }
                };
                let h = reg.handle();
                // SAFETY: the registration keeps the mapping alive while
                // `reg` lives, which outlasts `view`'s uses below.
                let Some(view) = (unsafe { View::from_raw(h.addr, h.len) }) else {
                    return Status::FetchFailed;
                };
                // `offset + len <= seg.len == mapping length`, checked by
                // the decoder and the mapper; `bytes` checks again.
                let Some(payload) = view.bytes(offset as usize, len) else {
                    return Status::FetchFailed;
                };
                self.counters.rndv_mapped += 1;
                sink.deliver(rank, tag, header, payload);
                drop(reg);
                Status::Ok
            }
            Source::Address(addr) => {
                if !self.peer_cma(p) {
                    return Status::FetchFailed;
                }
                let pid = self
                    .peers
                    .get(p as usize)
                    .and_then(Option::as_ref)
                    .map_or(0, |peer| peer.pid);
                if self.bounce.len() < len {
                    self.bounce.resize(len, 0);
                }
                let dst = self.bounce.as_mut_ptr();
                // SAFETY: the bounce buffer holds at least `len` bytes.
                if let Err(e) = unsafe { sys::vm_read(pid, addr, dst, len) } {
                    self.log(
                        LogLevel::Warn,
                        &format!("shm: process_vm_readv from rank {rank} failed: {e}"),
                    );
                    return Status::FetchFailed;
                }
                self.counters.rndv_cma += 1;
                sink.deliver(rank, tag, header, self.bounce.get(..len).unwrap_or(&[]));
                if self.bounce.len() > BOUNCE_KEEP {
                    // Do not hold on to the memory of one huge message.
                    self.bounce = Vec::new();
                }
                Status::Ok
            }
        }
    }

    /// Fails the peers whose process exited: what waits for them would
    /// otherwise wait forever (a dead peer never drains its queues nor
    /// answers a rendezvous).
    fn check_liveness(&mut self) {
        for p in self.active.clone() {
            let exited = self
                .peers
                .get(p as usize)
                .and_then(Option::as_ref)
                .map(|peer| (peer.rank, sys::process_exited(peer.pidfd.as_raw_fd())));
            if let Some((rank, true)) = exited {
                let error = PluginError::new(
                    ErrorKind::PEER_FAILED,
                    format!("the process of rank {rank} exited"),
                );
                self.fail_peer(p, error);
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

    // ----- endpoints -------------------------------------------------------

    /// Adds one peer; returns its local index and whether this process
    /// reads its memory with process_vm_readv.
    fn add_peer(&mut self, addr: &PeerAddress<'_>) -> Result<(u32, bool), String> {
        if addr.rank == self.rank {
            return Err("own rank (the self transport serves it)".into());
        }
        if !addr.node_local {
            return Err("not on this node".into());
        }
        let a =
            Address::decode(addr.address.as_slice()).map_err(|e| format!("bad address: {e}"))?;
        if a.boot_id != self.boot_id {
            return Err("published from another node (boot id differs)".into());
        }
        self.agree(&a)?;
        if a.rank != addr.rank {
            return Err(format!("address belongs to rank {}", a.rank));
        }
        if a.local >= self.local_size || a.local == self.local {
            return Err(format!("local index {} is invalid", a.local));
        }
        if self
            .peers
            .get(a.local as usize)
            .and_then(Option::as_ref)
            .is_some()
        {
            return Err(format!("local index {} is taken by another rank", a.local));
        }
        let pidfd = sys::pidfd_open(a.pid).map_err(|e| format!("pidfd_open({}): {e}", a.pid))?;
        let fd = sys::fetch_fd(pidfd.as_raw_fd(), a.pid, a.fd)
            .map_err(|e| format!("cannot fetch the queue segment of pid {}: {e}", a.pid))?;
        let facts = sys::facts(&fd).map_err(|e| format!("fstat: {e}"))?;
        if facts.ino != a.file_id || facts.size != a.seg_len {
            return Err("descriptor is not the published segment".into());
        }
        if facts.seals & sys::SEALS != sys::SEALS {
            return Err("segment is not sealed against resizing".into());
        }
        let len = usize::try_from(a.seg_len).map_err(|_| "segment too large".to_owned())?;
        if len > fireopal_core::shmq::layout::MAX_SEGMENT {
            return Err("segment too large".into());
        }
        let seg = Mapping::map(&fd, len, true).map_err(|e| format!("mmap: {e}"))?;
        drop(fd);
        let view = seg.view();
        let header = view
            .bytes(0, fireopal_core::shmq::layout::HEADER_LEN)
            .ok_or("segment shorter than its header")?;
        let (layout, _) = Layout::decode_header(
            header,
            &HeaderExpect {
                job_key: &self.job_key,
                owner_rank: a.rank,
                owner_local: a.local,
                owner_pid: a.pid,
                file_id: facts.ino,
                file_len: facts.size,
                local_size: self.local_size,
            },
        )
        .map_err(|e| format!("segment header: {e}"))?;
        let trailer = checksum::trailer_len(self.cfg.checksum);
        if layout.fifo_data_capacity() < RTS_LEN + MAX_HEADER + trailer
            || layout.fbox_data_capacity() < wire::FIN_LEN + trailer
        {
            return Err("peer's queue slots are too small".into());
        }
        let fbox_tx = FboxWriter::new(&layout, self.local).ok_or("no fast box for this process")?;
        let fbox_rx =
            FboxReader::new(&self.own_layout, a.local).ok_or("no fast box for the peer")?;
        let cma = match &self.cma {
            Err(why) => Err(why.clone()),
            Ok(()) => probe_cma_peer(a.pid, a.probe),
        };
        if let Err(why) = &cma {
            self.log(
                LogLevel::Info,
                &format!("shm: process_vm_readv not used with rank {}: {why}", a.rank),
            );
        }
        let cma_ok = cma.is_ok();
        self.peers[a.local as usize] = Some(Peer {
            rank: a.rank,
            pid: a.pid,
            pidfd,
            seg,
            layout,
            fbox_tx,
            tx_seq: 0,
            pending: VecDeque::new(),
            fbox_rx,
            rx_seq: 0,
            cma,
            failed: None,
            checksum: self.cfg.checksum,
        });
        self.active.push(a.local);
        self.local_of_rank.insert(a.rank, a.local);
        Ok((a.local, cma_ok))
    }
}

/// Checks that process_vm_readv can read peer `pid`: its queue segment's
/// magic word at `probe`.
fn probe_cma_peer(pid: u32, probe: u64) -> Result<(), String> {
    let mut word = 0u64;
    // SAFETY: `word` is a local valid for 8 bytes of writes.
    let r = unsafe { sys::vm_read(pid, probe, std::ptr::addr_of_mut!(word).cast(), 8) };
    match r {
        Ok(()) if word == MAGIC => Ok(()),
        Ok(()) => Err("probe read wrong bytes".into()),
        Err(e) => Err(format!("process_vm_readv not permitted on pid {pid}: {e}")),
    }
}

impl ShmTransport {
    fn receive(&mut self, sink: &mut dyn EventSink) -> usize {
        let ShmTransport { own, st, .. } = self;
        let view = own.seg.map.view();
        let mut events = 0;
        // Fragments that arrived before their sender was added.
        if st.stashed > 0 {
            for p in st.active.clone() {
                while let Some((seq, frag)) =
                    st.stash.get_mut(p as usize).and_then(VecDeque::pop_front)
                {
                    st.stashed -= 1;
                    events += st.take_fragment(
                        &view,
                        p,
                        seq,
                        (frag.kind, frag.tag, frag.hdr_len),
                        &frag.data,
                        sink,
                    );
                }
            }
        }
        for i in 0..st.active.len() {
            let Some(&p) = st.active.get(i) else { break };
            let waiting = st
                .peers
                .get(p as usize)
                .and_then(Option::as_ref)
                .is_some_and(|peer| peer.fbox_rx.pending(&view));
            if waiting {
                events += st.drain_fbox(&view, p, None, sink).unwrap_or(0);
            }
        }
        let layout = own.layout;
        if !own.fifo.pending(&view, &layout) {
            return events;
        }
        for _ in 0..layout.params().fifo_slots {
            match own.fifo.peek(&view, &layout) {
                FifoItem::Empty => break,
                FifoItem::BrokenSlot => {
                    // Nobody to blame: skip the slot so the queue goes on.
                    st.counters.corrupt_slots += 1;
                    st.log(
                        LogLevel::Error,
                        "shm: a receive-queue slot is corrupt; skipped",
                    );
                    own.fifo.release(&view, &layout);
                }
                FifoItem::Corrupt(sender, e) => {
                    own.fifo.release(&view, &layout);
                    let p = sender.map(u32::from).filter(|&s| s != st.local);
                    match p.and_then(|p| {
                        st.peers
                            .get(p as usize)
                            .and_then(Option::as_ref)
                            .map(|x| (p, x.rank))
                    }) {
                        Some((p, rank)) => {
                            st.fail_peer(p, malformed(rank, "corrupt queue fragment", e))
                        }
                        None => {
                            st.counters.corrupt_slots += 1;
                            st.log(
                                LogLevel::Error,
                                &format!("shm: corrupt queue fragment skipped: {e}"),
                            );
                        }
                    }
                }
                FifoItem::Fragment(h, data) => {
                    let p = u32::from(h.sender);
                    let known = st.peers.get(p as usize).and_then(Option::as_ref);
                    match known {
                        Some(peer) if peer.failed.is_none() => {
                            events += st.take_fragment(
                                &view,
                                p,
                                h.seq,
                                (h.kind, h.tag, h.hdr_len),
                                data,
                                sink,
                            );
                            if let Ok(n) = st.drain_fbox(&view, p, None, sink) {
                                events += n;
                            }
                        }
                        Some(_) => {}
                        None if p != st.local => {
                            if let Some(stash) = st.stash.get_mut(p as usize) {
                                let frag = Frag {
                                    kind: h.kind,
                                    tag: h.tag,
                                    hdr_len: h.hdr_len,
                                    parts: [data, &[], &[]],
                                };
                                stash.push_back((h.seq, OwnedFrag::of(&frag)));
                                st.stashed += 1;
                            }
                        }
                        None => {
                            st.counters.corrupt_slots += 1;
                        }
                    }
                    own.fifo.release(&view, &layout);
                }
            }
        }
        events
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
        let p = st.local_of_rank.get(&peer).copied();
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

    fn put(&mut self, op: &RdmaOp<'_>) -> Result<Completion, PluginError> {
        self.rdma(op, true)
    }

    fn get(&mut self, op: &RdmaOp<'_>) -> Result<Completion, PluginError> {
        self.rdma(op, false)
    }

    fn progress(&mut self, sink: &mut dyn EventSink) -> Result<usize, PluginError> {
        let mut events = 0;
        if !self.st.backlog.is_empty() {
            self.st.flush();
        }
        events += self.receive(sink);
        if !self.st.backlog.is_empty() {
            self.st.flush();
        }
        self.st.liveness_tick = self.st.liveness_tick.wrapping_add(1);
        if self.st.liveness_tick % LIVENESS_PERIOD == 0 {
            let waiting =
                !self.st.backlog.is_empty() || !self.st.rts.is_empty() || !self.st.rdma.is_empty();
            if waiting {
                self.st.check_liveness();
            } else {
                let now = Instant::now();
                if now >= self.st.next_idle_liveness {
                    self.st.next_idle_liveness = now + IDLE_LIVENESS;
                    self.st.check_liveness();
                }
            }
        }
        if !self.st.events.is_empty() {
            events += self.st.report(sink);
        }
        Ok(events)
    }
}

impl ShmTransport {
    fn rdma(&mut self, op: &RdmaOp<'_>, is_put: bool) -> Result<Completion, PluginError> {
        let what = if is_put { "put" } else { "get" };
        let p = self.st.usable_peer(op.peer)?;
        let key = RemoteKey::decode(op.remote_key.as_slice())
            .map_err(|e| PluginError::invalid(format!("{what}: bad remote key: {e}")))?;
        let (peer_pid, peer_cma) = match self.st.peers.get(p as usize).and_then(Option::as_ref) {
            Some(peer) => (peer.pid, peer.cma.is_ok()),
            None => return Err(PluginError::new(ErrorKind::UNREACHABLE, "peer was removed")),
        };
        if key.pid != peer_pid {
            return Err(PluginError::invalid(format!(
                "{what}: remote key of another process"
            )));
        }
        let need = if is_put {
            Access::REMOTE_WRITE
        } else {
            Access::REMOTE_READ
        };
        if u32::from(key.access) & need.0 != need.0 {
            return Err(PluginError::invalid(format!(
                "{what}: registration does not grant it"
            )));
        }
        let len = op.local.len() as u64;
        if len == 0 {
            return Ok(Completion::Done);
        }
        if !key.covers(op.remote_addr, len) {
            return Err(PluginError::invalid(format!(
                "{what}: range outside the registration"
            )));
        }
        self.st.reap_buffers();
        if let Some(seg) = key.segment.filter(|_| self.st.cfg.single_copy.memfd()) {
            match self.st.map_segment(p, &seg) {
                Ok(reg) => {
                    let h = reg.handle();
                    let off = seg.offset_of(op.remote_addr, len).ok_or_else(|| {
                        PluginError::invalid(format!("{what}: range outside the segment"))
                    })?;
                    // SAFETY: the registration keeps the mapping alive
                    // while `reg` lives, across the copy below.
                    let view = unsafe { View::from_raw(h.addr, h.len) }
                        .ok_or_else(|| PluginError::new(ErrorKind::OTHER, "empty mapping"))?;
                    let ok = if is_put {
                        // SAFETY: `op.local` is valid for reads per
                        // `MemRegion`'s contract.
                        unsafe { view.write_raw(off as usize, op.local.as_ptr(), len as usize) }
                    } else {
                        // SAFETY: `op.local` is valid for writes per
                        // `MemRegion`'s contract.
                        unsafe { view.read_raw(off as usize, op.local.as_ptr(), len as usize) }
                    };
                    drop(reg);
                    if !ok {
                        return Err(PluginError::invalid(format!(
                            "{what}: range outside the mapping"
                        )));
                    }
                    self.st.counters.rdma_mapped += 1;
                    return Ok(Completion::Done);
                }
                Err(why) => self.st.log(
                    LogLevel::Debug,
                    &format!("shm: {what} cannot map rank {}'s segment: {why}", op.peer),
                ),
            }
        }
        if peer_cma && self.st.cma.is_ok() {
            let r = if is_put {
                // SAFETY: `op.local` is valid for reads per `MemRegion`.
                unsafe { sys::vm_write(peer_pid, op.remote_addr, op.local.as_ptr(), len as usize) }
            } else {
                // SAFETY: `op.local` is valid for writes per `MemRegion`.
                unsafe { sys::vm_read(peer_pid, op.remote_addr, op.local.as_ptr(), len as usize) }
            };
            match r {
                Ok(()) => {
                    self.st.counters.rdma_cma += 1;
                    return Ok(Completion::Done);
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOSYS)) => {
                    let why = format!(
                        "process_vm_{}v refused: {e}",
                        if is_put { "write" } else { "read" }
                    );
                    self.st
                        .log(LogLevel::Info, &format!("shm: rank {}: {why}", op.peer));
                    if let Some(peer) = self.st.peers.get_mut(p as usize).and_then(Option::as_mut) {
                        peer.cma = Err(why);
                    }
                    self.own.set_cma_flag(p, false);
                }
                Err(e) => return Err(io_error(what, e)),
            }
        }
        // Emulated through the queues; the target does the copy.
        let id = self.st.next_op;
        self.st.next_op += 1;
        self.st.rdma.insert(
            id,
            RdmaOut {
                peer: p,
                cookie: op.cookie,
                local: op.local.addr(),
                len,
                received: 0,
                is_put,
            },
        );
        self.st.counters.rdma_emulated += 1;
        if is_put {
            self.st.enqueue(
                p,
                Pending::PutStream {
                    id,
                    reg: key.reg,
                    remote: op.remote_addr,
                    local: op.local.addr(),
                    len,
                    sent: 0,
                },
            );
            self.st.flush();
        } else {
            let req = GetRequest {
                id,
                addr: op.remote_addr,
                len,
                reg: key.reg,
            }
            .encode();
            let frag = Frag::control(Kind::GetRequest, &req);
            if let Err(e) = self.st.emit(p, &frag, None) {
                self.st.rdma.remove(&id);
                return Err(e);
            }
        }
        Ok(Completion::Pending)
    }
}
