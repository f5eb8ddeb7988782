//! One-sided operations on the symmetric heap, with OpenSHMEM 1.5
//! semantics: put, get and atomics addressed by (PE, symmetric address),
//! `quiet`, `fence`, `barrier_all`, signals, and the collective heap
//! calls.
//!
//! [`Runtime::shmem`](crate::Runtime::shmem) gives a [`Shmem`] view; a PE
//! is a rank of the job. This module owns:
//! - the choice of a path per PE (`path`): this process's own heap; a
//!   node-local PE's heap mapped here by the transport
//!   ([`Messenger::map_remote`]), reached with loads, stores and CPU
//!   atomics; or the transport's RDMA and active messages for the others;
//! - transfers (`rma`): blocking and non-blocking put and get, typed or
//!   bytes, `put_signal` and `wait_until`;
//! - atomics (`atomic`) on 32- and 64-bit words;
//! - completion and synchronisation (`sync`): `quiet`, `fence`, the
//!   barrier, and the handler that serves other PEs' atomics here.
//!
//! # Atomicity across paths
//!
//! Every atomic, whatever its path, is one CPU atomic instruction on the
//! word in the target's memory: a node-local PE runs it through its
//! mapping of the target's heap, and for any other PE the target runs it
//! itself, in its handler, when it makes progress. The target's own
//! atomics are the same instructions on the same word. So updates of one
//! word from any mix of paths are never lost, and a non-atomic access
//! (a put) racing with an atomic on the same word is as undefined as
//! OpenSHMEM says. No transport's own (NIC) atomics are used: they are
//! atomic only against each other.
//!
//! # Progress
//!
//! Atomics from PEs that cannot map this heap, and the barrier, need this
//! process to make progress: every call of this module that waits does,
//! every [`LOCAL_POLL`]th put, get or atomic done by this process alone
//! (on its own heap or a mapped one) does, so that a loop of them (a
//! spin on a lock word) still serves the PEs that reach this heap through
//! messages, and so do the point-to-point layer's waits and
//! [`Messenger::progress`]. A PE that computes for long without calling
//! any of them delays those atomics, as in OpenSHMEM implementations
//! without a progress thread.
//!
//! # Heap
//!
//! Every process maps its heap at [`AGREED_BASE`](crate::memheap::AGREED_BASE)
//! if it can; [`Shmem::symmetric_addresses`] says whether all of the job
//! did. Either way the wire carries offsets.

mod atomic;
mod path;
mod rma;
mod sync;

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::rc::Rc;
use std::time::Duration;

use fireopal_abi::btl::{Access, MemRegion, Rank};
use fireopal_abi::param::ParamValue;
use fireopal_core::id_hash::IdHash;
use fireopal_core::wire::shmem::{AmoStatus, HeapEntry, Malformed};

use crate::bootstrap::{Bootstrap, BootstrapError, Exchange};
use crate::btl::{Messenger, PeerFailure, ProgressError, SendError, SendId};
use crate::memheap::{AllocError, FreeError, SymmetricHeap};
use crate::param::ParamSpec;

pub use atomic::AtomicWord;
pub use path::PathKind;
pub use rma::{Element, SignalOp, WaitCmp};

use path::Path;
use sync::Inbox;

/// The reserved active-message tag of the one-sided layer.
pub(crate) const TAG_SHMEM: u8 = 0xFB;
/// The exchange key under which each process publishes its heap.
const HEAP_KEY: &str = "fireopal-shmem-heap";
/// The barrier's flag: this process's heap is at the agreed address.
const FLAG_AGREED: u64 = 1;
/// Default of `shmem_put_batch`: small puts to one PE gathered into one
/// message of at most this many bytes of records.
pub const DEFAULT_PUT_BATCH: usize = 16 << 10;
/// Operations this process completes alone between two calls to
/// [`Messenger::progress`].
pub const LOCAL_POLL: u32 = 64;

/// The one-sided layer's parameters.
pub(crate) fn param_specs() -> Vec<ParamSpec> {
    vec![
        ParamSpec::new(
            "shmem_direct",
            ParamValue::Bool(true),
            "reach node-local PEs' symmetric heaps through a mapping (loads, stores, CPU atomics); off sends every one-sided operation through the transports",
        ),
        ParamSpec::new(
            "shmem_rdma",
            ParamValue::Bool(true),
            "put and get through the transports' RDMA where the route offers it; off sends the data in messages the target copies",
        ),
        ParamSpec::new(
            "shmem_put_batch",
            ParamValue::Size(DEFAULT_PUT_BATCH as u64),
            "bytes of small puts to one PE gathered into one message where the target's own progress moves the data anyway (tcp, or no RDMA); puts up to a quarter of it are gathered; 0 sends each alone",
        ),
    ]
}

/// Why a one-sided operation failed.
#[derive(Debug)]
pub enum ShmemError {
    /// No such PE in the job.
    NoSuchPe(u32),
    /// The address range is not inside this process's symmetric heap.
    NotSymmetric {
        /// Start of the range.
        addr: usize,
        /// Its length.
        len: usize,
    },
    /// An atomic's word is not aligned to its size.
    Misaligned(usize),
    /// The PE's heap entry is missing or malformed, or its heap is not
    /// the size of this one.
    BadHeapEntry {
        /// The PE.
        pe: u32,
        /// What was wrong.
        reason: String,
    },
    /// The PE failed.
    PeerFailed {
        /// The PE.
        pe: u32,
        /// How.
        failure: PeerFailure,
    },
    /// A barrier cannot complete: another PE saw PE `failed` fail while it
    /// waited in one.
    BarrierAborted {
        /// The PE that failed.
        failed: u32,
        /// The PE that saw it.
        by: u32,
    },
    /// A PE sent bytes that are no one-sided message.
    Malformed {
        /// The sender.
        pe: u32,
        /// What was wrong.
        error: Malformed,
    },
    /// The target refused an atomic, or a put or get through messages
    /// (the range is not inside its heap).
    Refused {
        /// The target.
        pe: u32,
        /// Its answer.
        status: AmoStatus,
    },
    /// The messenger refused or failed an operation.
    Transport(SendError),
    /// Progress failed.
    Progress(ProgressError),
    /// Nothing happened for the stall limit while waiting.
    Stalled {
        /// The limit.
        limit: Duration,
    },
    /// The job's key-value exchange failed.
    Exchange(BootstrapError),
    /// A collective allocation failed on this PE.
    Alloc(AllocError),
    /// A collective free failed on this PE.
    Free(FreeError),
}

impl fmt::Display for ShmemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSuchPe(pe) => write!(f, "no PE {pe} in the job"),
            Self::NotSymmetric { addr, len } => write!(
                f,
                "{len} bytes at {addr:#x} are not inside the symmetric heap"
            ),
            Self::Misaligned(addr) => write!(f, "atomic word at {addr:#x} is not aligned"),
            Self::BadHeapEntry { pe, reason } => write!(f, "heap of PE {pe}: {reason}"),
            Self::PeerFailed { pe, failure } => write!(f, "PE {pe} failed: {failure}"),
            Self::BarrierAborted { failed, by } => {
                write!(f, "PE {failed} failed (PE {by} saw it in a barrier)")
            }
            Self::Malformed { pe, error } => {
                write!(f, "malformed one-sided message from PE {pe}: {error}")
            }
            Self::Refused { pe, status } => {
                write!(f, "PE {pe} refused the operation: {status:?}")
            }
            Self::Transport(e) => write!(f, "transport: {e}"),
            Self::Progress(e) => write!(f, "progress: {e}"),
            Self::Stalled { limit } => write!(f, "nothing happened for {limit:?} while waiting"),
            Self::Exchange(e) => write!(f, "key-value exchange: {e}"),
            Self::Alloc(e) => write!(f, "symmetric allocation: {e}"),
            Self::Free(e) => write!(f, "symmetric free: {e}"),
        }
    }
}

impl std::error::Error for ShmemError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::PeerFailed { failure, .. } => Some(failure),
            Self::Malformed { error, .. } => Some(error),
            Self::Transport(e) => Some(e),
            Self::Progress(e) => Some(e),
            Self::Exchange(e) => Some(e),
            Self::Alloc(e) => Some(e),
            Self::Free(e) => Some(e),
            _ => None,
        }
    }
}

impl From<SendError> for ShmemError {
    fn from(e: SendError) -> Self {
        match e {
            SendError::PeerFailed { peer, failure } => Self::PeerFailed { pe: peer, failure },
            e => Self::Transport(e),
        }
    }
}

/// An RDMA operation of the layer not complete yet: its PE, and the
/// registration of its local buffer on a route that needs one.
#[derive(Debug)]
pub(crate) struct InFlight {
    pe: u32,
    local: Option<crate::btl::MemoryHandle>,
}

/// The one-sided layer's state in a [`Runtime`](crate::Runtime).
pub(crate) struct State {
    me: u32,
    size: u32,
    /// The heap's registration on every module, which peers' RDMA uses.
    exposed: Option<crate::btl::MemoryHandle>,
    /// Every process's heap sits at the agreed address.
    agreed: bool,
    /// Node-local PEs through mappings (`shmem_direct`).
    direct: bool,
    /// Puts and gets through RDMA where offered (`shmem_rdma`).
    rdma: bool,
    /// The path to each PE used so far.
    paths: HashMap<u32, Path, IdHash>,
    /// What the handler recorded.
    inbox: Rc<RefCell<Inbox>>,
    /// RDMA operations not complete yet.
    pending: HashMap<SendId, InFlight, IdHash>,
    /// PEs with atomics not answered yet.
    amo_targets: HashSet<u32, IdHash>,
    /// Failed RDMA operations, for whoever waits on them or `quiet`.
    failed: HashMap<SendId, ShmemError, IdHash>,
    next_request: u64,
    /// Non-fetching atomics sent (their answers are counted by the inbox).
    amo_sent: u64,
    /// Barriers entered.
    epoch: u64,
    /// Operations completed alone since the last progress.
    local_ops: u32,
    /// Most bytes of records in one batch of puts (0: no batches).
    put_batch: usize,
    /// Puts gathered for each PE and not sent yet; only PEs with records
    /// have an entry.
    batches: HashMap<u32, Vec<u8>, IdHash>,
    /// Emptied batch buffers, kept for their capacity.
    spare_batches: Vec<Vec<u8>>,
    /// A batchable put was sent since this process last made progress:
    /// the next ones are gathered (the first leaves at once, so a lone
    /// put does not wait for the next call).
    put_since_progress: bool,
    /// Stall limit of waits.
    stall: Option<Duration>,
}

impl fmt::Debug for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("State")
            .field("me", &self.me)
            .field("size", &self.size)
            .field("agreed", &self.agreed)
            .field("direct", &self.direct)
            .field("paths", &self.paths.len())
            .finish_non_exhaustive()
    }
}

impl State {
    /// Exposes the heap on every module, publishes where it is and its
    /// key, and meets every process at a barrier that also tells whether
    /// all heaps sit at the agreed address. Collective.
    pub(crate) fn init(
        messenger: &mut Messenger,
        heap: &SymmetricHeap,
        boot: &mut Bootstrap,
        direct: bool,
        rdma: bool,
        put_batch: usize,
    ) -> Result<State, ShmemError> {
        let inbox = Rc::new(RefCell::new(Inbox::default()));
        sync::install_handler(messenger, heap, Rc::clone(&inbox));
        let exposed = if heap.is_empty() {
            None
        } else {
            let len = usize::try_from(heap.len()).unwrap_or(usize::MAX);
            // SAFETY: the heap's mapping is `len` bytes at its base and
            // outlives the registration, which `finalize` (or the
            // runtime's drop order) releases before the heap goes.
            #[allow(unsafe_code)]
            let region = unsafe { MemRegion::new(heap.base(), len) };
            let rights = Access(
                Access::LOCAL_READ.0
                    | Access::LOCAL_WRITE.0
                    | Access::REMOTE_READ.0
                    | Access::REMOTE_WRITE.0,
            );
            Some(messenger.expose_memory(region, rights)?)
        };
        let entry = HeapEntry {
            at_agreed_address: heap.at_agreed_address(),
            base: heap.base() as u64,
            len: heap.len(),
            key: exposed.as_ref().map_or(&[], |h| h.remote_key()),
        };
        Exchange::put(boot, HEAP_KEY, &entry.encode()).map_err(ShmemError::Exchange)?;
        Exchange::fence(boot).map_err(ShmemError::Exchange)?;
        let mut st = State {
            me: messenger.rank(),
            size: messenger.size(),
            exposed,
            agreed: false,
            direct,
            rdma,
            paths: HashMap::default(),
            inbox,
            pending: HashMap::default(),
            amo_targets: HashSet::default(),
            failed: HashMap::default(),
            next_request: 0,
            amo_sent: 0,
            epoch: 0,
            local_ops: 0,
            put_batch,
            batches: HashMap::default(),
            spare_batches: Vec::new(),
            put_since_progress: false,
            stall: None,
        };
        let flags = if heap.at_agreed_address() {
            FLAG_AGREED
        } else {
            0
        };
        let all = sync::barrier(messenger, &mut st, flags)?;
        st.agreed = all & FLAG_AGREED != 0;
        Ok(st)
    }

    /// A fresh request id of this process.
    fn next_request(&mut self) -> u64 {
        self.next_request += 1;
        self.next_request
    }

    /// Completes everything, meets every PE, and drops the mappings and
    /// the heap's registration. Collective.
    pub(crate) fn finalize(
        &mut self,
        messenger: &mut Messenger,
        stall: Option<Duration>,
    ) -> Result<(), ShmemError> {
        self.stall = stall;
        sync::quiet(messenger, self)?;
        sync::barrier(messenger, self, 0)?;
        self.release(messenger);
        Ok(())
    }

    /// Drops the mappings and the registration without meeting anyone.
    pub(crate) fn release(&mut self, messenger: &mut Messenger) {
        for (_, path) in self.paths.drain() {
            if let Path::Mapped { map, .. } = path {
                let _ = messenger.unmap_remote(map);
            }
        }
        if let Some(handle) = self.exposed.take() {
            let _ = messenger.deregister_memory(handle);
        }
    }
}

/// The one-sided operations of one process, borrowed from its
/// [`Runtime`](crate::Runtime) by [`Runtime::shmem`](crate::Runtime::shmem).
///
/// Symmetric addresses are addresses inside this process's heap (what
/// [`malloc`](Self::malloc) returned, or inside it); an operation on PE
/// `pe` at such an address reaches the same offset in `pe`'s heap.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut rt = fireopal::Runtime::init()?;
/// let mut sh = rt.shmem();
/// let (me, n) = (sh.my_pe(), sh.n_pes());
/// let counter = sh.malloc(8)?.cast::<u64>();
/// let slot = sh.calloc(n as usize, 8)?.cast::<u64>();
/// // Every PE adds one to PE 0's counter and writes its rank into its
/// // slot on the next PE.
/// sh.atomic_add(0, counter, 1u64)?;
/// sh.put((me + 1) % n, slot.wrapping_add(me as usize), &[u64::from(me)])?;
/// sh.barrier_all()?;
/// sh.free(slot.cast())?;
/// sh.free(counter.cast())?;
/// rt.finalize()?;
/// # Ok(())
/// # }
/// ```
pub struct Shmem<'a> {
    pub(crate) m: &'a mut Messenger,
    pub(crate) heap: &'a SymmetricHeap,
    pub(crate) boot: &'a mut Bootstrap,
    pub(crate) st: &'a mut State,
}

impl fmt::Debug for Shmem<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shmem").field("state", &self.st).finish()
    }
}

impl<'a> Shmem<'a> {
    /// Waits give up after `stall` with nothing happening (`None`: never).
    pub(crate) fn with_stall(self, stall: Option<Duration>) -> Self {
        self.st.stall = stall;
        self
    }

    /// This PE's number.
    pub fn my_pe(&self) -> u32 {
        self.st.me
    }

    /// Number of PEs.
    pub fn n_pes(&self) -> u32 {
        self.st.size
    }

    /// Whether every PE's heap sits at the same address, so that a
    /// pointer into the heap means the same object on every PE.
    pub fn symmetric_addresses(&self) -> bool {
        self.st.agreed
    }

    /// How operations on `pe` travel (resolving its path if not done yet).
    pub fn path_kind(&mut self, pe: u32) -> Result<PathKind, ShmemError> {
        self.path(pe).map(Path::kind)
    }

    /// The heap.
    pub fn heap(&self) -> &SymmetricHeap {
        self.heap
    }

    /// Collective `shmem_malloc`: `size` bytes, the same offset on every
    /// PE, then a barrier. A zero size gives a null pointer.
    pub fn malloc(&mut self, size: usize) -> Result<*mut u8, ShmemError> {
        self.align(crate::memheap::DEFAULT_ALIGN as usize, size)
    }

    /// Collective `shmem_calloc`: `count` elements of `size` bytes,
    /// zeroed, then a barrier.
    pub fn calloc(&mut self, count: usize, size: usize) -> Result<*mut u8, ShmemError> {
        let got = match count.checked_mul(size) {
            Some(total) => self.alloc_here(crate::memheap::DEFAULT_ALIGN as usize, total),
            None => Err(ShmemError::Alloc(AllocError::Module(
                fireopal_abi::PluginError::invalid("count times size overflows"),
            ))),
        };
        if let Ok(p) = got.as_ref().copied() {
            if !p.is_null() {
                // SAFETY: a fresh block of `count * size` bytes of this
                // heap, zeroed before the barrier lets any PE write it.
                #[allow(unsafe_code)]
                unsafe {
                    std::ptr::write_bytes(p, 0, count * size)
                };
            }
        }
        self.barrier_all()?;
        got
    }

    /// Collective `shmem_align`: `size` bytes aligned to `alignment`, then
    /// a barrier. A zero size gives a null pointer.
    pub fn align(&mut self, alignment: usize, size: usize) -> Result<*mut u8, ShmemError> {
        let got = self.alloc_here(alignment, size);
        self.barrier_all()?;
        got
    }

    /// This PE's part of an allocation: null for a zero size.
    fn alloc_here(&mut self, alignment: usize, size: usize) -> Result<*mut u8, ShmemError> {
        if size == 0 {
            return Ok(std::ptr::null_mut());
        }
        self.heap
            .try_align(alignment, size)
            .map(|p| p.as_ptr())
            .map_err(ShmemError::Alloc)
    }

    /// Collective `shmem_realloc`: a barrier (no PE still uses the old
    /// block), the reallocation, a barrier. When the block cannot grow,
    /// the error says why and the old block is left as it was; a zero
    /// size frees it and gives a null pointer.
    pub fn realloc(&mut self, ptr: *mut u8, size: usize) -> Result<*mut u8, ShmemError> {
        self.barrier_all()?;
        let got = self.heap.try_realloc(ptr, size).map_err(ShmemError::Alloc);
        self.barrier_all()?;
        got
    }

    /// Collective `shmem_free`: a barrier, then the block is freed.
    pub fn free(&mut self, ptr: *mut u8) -> Result<(), ShmemError> {
        self.barrier_all()?;
        if ptr.is_null() {
            return Ok(());
        }
        self.heap.free(ptr).map_err(ShmemError::Free)
    }

    /// The offset of `len` bytes at `addr` in the heap.
    fn offset_of(&self, addr: usize, len: usize) -> Result<u64, ShmemError> {
        let base = self.heap.base() as usize;
        addr.checked_sub(base)
            .filter(|off| {
                off.checked_add(len)
                    .is_some_and(|end| end as u64 <= self.heap.len())
            })
            .map(|off| off as u64)
            .ok_or_else(|| ShmemError::NotSymmetric { addr, len })
    }

    fn check_pe(&self, pe: u32) -> Result<(), ShmemError> {
        if pe < self.st.size {
            Ok(())
        } else {
            Err(ShmemError::NoSuchPe(pe))
        }
    }

    /// Counts an operation this process completed alone, and makes
    /// progress every [`LOCAL_POLL`]th time.
    #[inline]
    fn done_alone(&mut self) -> Result<(), ShmemError> {
        self.st.local_ops += 1;
        if self.st.local_ops < LOCAL_POLL {
            return Ok(());
        }
        self.st.local_ops = 0;
        // Puts gathered for other PEs leave whenever this process makes
        // progress, so a loop of local operations does not hold them.
        sync::flush_batches(self.m, self.st)?;
        self.st.put_since_progress = false;
        self.m.progress().map(drop).map_err(ShmemError::Progress)
    }
}

/// The rank type PEs are carried as.
fn rank(pe: u32) -> Rank {
    pe
}
