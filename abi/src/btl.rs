//! The byte transfer layer (BTL) interface.
//!
//! A BTL module moves active messages between the processes of a job and,
//! when the hardware allows, does RDMA. The contract follows Open MPI's
//! `btl.h` and UCX's UCT:
//!
//! - **Attributes** ([`BtlAttributes`]) say how large messages may be on
//!   each path and how good the transport is (exclusivity, latency,
//!   bandwidth), so the host can rank modules per peer and stripe.
//! - **Endpoints**: the host publishes each module's [`Transport::address`]
//!   through the bootstrap key-value store and passes every peer's address
//!   to [`Transport::add_peers`], which answers reachability per peer
//!   (an unreachable peer is reported, not guessed).
//! - **Active messages** carry a `u8` tag, a small header and a payload.
//!   [`Transport::sendi`] is all-or-nothing and immediate;
//!   [`Transport::send`] may complete later. Received fragments and
//!   completions are handed to the host's [`EventSink`] during
//!   [`Transport::progress`]; the bytes are valid only during the call.
//! - **RDMA**: [`Transport::put`] / [`Transport::get`] on memory registered
//!   with [`Transport::register_mem`]; `UNSUPPORTED` is a normal answer.
//!
//! Plugin authors implement [`Transport`] and [`BtlComponentImpl`] and
//! export with [`crate::export_btl_component!`]. The FFI-level types
//! ([`BtlModule`], [`BtlComponent`]) are what crosses the boundary.

// `#[sabi_trait]` and `#[derive(StableAbi)]` expand to unsafe FFI glue.
#![allow(unsafe_code, non_local_definitions)]

use abi_stable::library::RootModule;
use abi_stable::sabi_trait;
use abi_stable::sabi_types::{RMut, VersionStrings};
use abi_stable::std_types::{RBox, RResult, RSlice, RStr, RString, RVec};
use abi_stable::StableAbi;

use crate::host::{Host, HostServicesArc};
use crate::param::{ParamRegistrar, ParamRegistryRef};
use crate::{Availability, ComponentVersion, PluginError};

/// A process's rank in the job.
pub type Rank = u32;

/// Capability flags of a BTL module.
#[repr(transparent)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BtlFlags(pub u32);

impl BtlFlags {
    /// Active messages with [`Transport::send`] / [`Transport::sendi`].
    pub const SEND: Self = Self(1);
    /// RDMA write with [`Transport::put`].
    pub const PUT: Self = Self(1 << 1);
    /// RDMA read with [`Transport::get`].
    pub const GET: Self = Self(1 << 2);
    /// `put`/`get` need the local buffer registered too (verbs); without
    /// it only the remote side needs a registration.
    pub const NEEDS_LOCAL_REGISTRATION: Self = Self(1 << 3);
    /// The module may be used to stripe one large message with others.
    pub const STRIPE: Self = Self(1 << 4);
    /// [`Transport::send_in_place`] reads the payload where it is.
    pub const SEND_IN_PLACE: Self = Self(1 << 5);
    /// [`Transport::alloc_transfer_buffer`] hands out memory peers read
    /// with a single copy (memfd segments a peer maps once).
    pub const TRANSFER_BUFFERS: Self = Self(1 << 6);
    /// [`Transport::register_segment`] accepts memory files of the host
    /// (the symmetric heap): payloads inside them are read by peers with a
    /// single copy, through a mapping of the file.
    pub const MAPPED_SEGMENTS: Self = Self(1 << 7);
    /// [`Transport::put`] and [`Transport::get`] are copies made by the
    /// calling process's own processor (cross-memory attach, a mapping of
    /// the peer's memory): a message read in part by the receiver and
    /// written in part by the sender moves with two processors at once.
    pub const INITIATOR_COPIES: Self = Self(1 << 8);
    /// [`Transport::put`] and [`Transport::get`] are carried out by the
    /// target process's own progress, over the stream that carries its
    /// messages (tcp): the data of a get goes the way a send's would, and
    /// a host may ask the sender to send instead of reading.
    pub const TARGET_SERVES_RDMA: Self = Self(1 << 9);

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for BtlFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// Usual exclusivity values: a peer reachable by a module of higher
/// exclusivity is not sent to through lower ones (as in Open MPI's BML).
pub mod exclusivity {
    /// Loopback to one's own rank.
    pub const SELF: u32 = 0x0001_0000;
    /// Node-local shared memory.
    pub const SHARED_MEMORY: u32 = 0x0000_8000;
    /// High-performance network (verbs).
    pub const HIGH_PERFORMANCE_NETWORK: u32 = 0x0000_0400;
    /// Commodity network (tcp).
    pub const DEFAULT: u32 = 0x0000_0100;
}

/// Limits and quality figures of a module; constant for its lifetime.
///
/// Attributes added by later interface versions arrive as new
/// [`BtlModule`] methods with defaults, so this struct never changes.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct BtlAttributes {
    /// Largest header + payload that [`Transport::sendi`] accepts.
    pub max_sendi_size: u64,
    /// Largest payload sent in one eager fragment; above it the host uses a
    /// rendezvous protocol (RDMA or pipelined fragments).
    pub eager_limit: u64,
    /// Largest header + payload of one [`Transport::send`] fragment.
    pub max_send_size: u64,
    /// Largest active-message header in bytes.
    pub max_header_size: u32,
    /// Number of bytes of a rendezvous message sent with send/recv before
    /// RDMA takes over.
    pub rdma_pipeline_send_length: u64,
    /// Size of each RDMA fragment of a pipelined transfer.
    pub rdma_pipeline_frag_size: u64,
    /// Messages smaller than this never use the RDMA pipeline.
    pub min_rdma_pipeline_size: u64,
    /// See [`exclusivity`].
    pub exclusivity: u32,
    /// Expected one-way latency of a small message, in nanoseconds.
    pub latency_ns: u32,
    /// Expected bandwidth, in MB/s.
    pub bandwidth_mbps: u32,
    /// Capabilities.
    pub flags: BtlFlags,
    /// Bytes of a packed remote key from [`Transport::register_mem`].
    pub registration_handle_size: u32,
}

/// A peer's published address, as given to [`Transport::add_peers`].
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy)]
pub struct PeerAddress<'a> {
    /// The peer's rank.
    pub rank: Rank,
    /// Whether the host knows the peer is on this node.
    pub node_local: bool,
    /// The bytes the peer's module returned from [`Transport::address`].
    /// They come from another process: parse them with checks.
    pub address: RSlice<'a, u8>,
}

/// Whether a module can reach a peer.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub enum Reachability {
    /// Messages to the peer can go through this module.
    Reachable,
    /// They cannot, and why (shown in debug logs).
    Unreachable(RString),
}

/// Result of [`Transport::sendi`].
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendiOutcome {
    /// The whole message left; nothing more will be reported for it.
    Sent,
    /// Nothing was sent; try `send`, or later.
    Busy,
}

/// Result of [`Transport::send`] and of RDMA operations.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// Done now; no completion event will follow.
    Done,
    /// Under way; exactly one completion event with the cookie will follow.
    Pending,
}

/// Kinds of access a registration grants.
#[repr(transparent)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(pub u32);

impl Access {
    /// Local reads (source of `put`).
    pub const LOCAL_READ: Self = Self(1);
    /// Local writes (target of `get`).
    pub const LOCAL_WRITE: Self = Self(1 << 1);
    /// Peers may read it (target of their `get`).
    pub const REMOTE_READ: Self = Self(1 << 2);
    /// Peers may write it (target of their `put`).
    pub const REMOTE_WRITE: Self = Self(1 << 3);

    /// Whether every access of `other` is granted.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for Access {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// A range of this process's memory handed to a module that may read or
/// write it after the call returns.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemRegion {
    addr: usize,
    len: usize,
}

impl MemRegion {
    /// Describes `len` bytes at `ptr`.
    ///
    /// # Safety
    ///
    /// The bytes must stay allocated, and must not be accessed by the
    /// caller in a conflicting way (written while a module reads them, or
    /// touched at all while a module writes them), until the operation they
    /// are given to completes, or for a registration, until it is
    /// deregistered.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Self {
        Self {
            addr: ptr as usize,
            len,
        }
    }

    /// Start address.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start as a pointer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr as *mut u8
    }

    /// The bytes, for a reader of the operation the region was handed to.
    ///
    /// # Safety
    ///
    /// That operation (or registration) must not have ended, and nothing
    /// may write the bytes while the slice lives: [`new`](Self::new)'s
    /// contract, which the receiver of a region may rely on until then.
    ///
    /// ```
    /// use fireopal_abi::btl::MemRegion;
    /// let mut buf = *b"bytes";
    /// // SAFETY: `buf` outlives the region and is only read through it.
    /// let region = unsafe { MemRegion::new(buf.as_mut_ptr(), buf.len()) };
    /// assert_eq!(unsafe { region.as_bytes() }, b"bytes");
    /// let empty = unsafe { MemRegion::new(std::ptr::null_mut(), 0) };
    /// assert!(unsafe { empty.as_bytes() }.is_empty());
    /// ```
    pub unsafe fn as_bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: by this function's contract the `len` bytes at `addr`
        // are allocated and not written while the slice lives.
        unsafe { core::slice::from_raw_parts(self.as_ptr(), self.len) }
    }
}

/// A registration made by [`Transport::register_mem`].
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// Module-local id, given back to `deregister_mem` and as
    /// [`RdmaOp::local_registration`].
    pub id: u64,
    /// Packed key a peer needs to access the memory
    /// ([`BtlAttributes::registration_handle_size`] bytes).
    pub remote_key: RVec<u8>,
}

/// A peer's registered memory mapped into this process by
/// [`Transport::map_remote`]: the bytes at `remote_addr` in the peer are
/// the bytes of `local` here, for loads, stores and CPU atomics.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteMapping {
    /// Module-local id, given back to `unmap_remote`.
    pub id: u64,
    /// Where the mapped range starts in the peer's address space.
    pub remote_addr: u64,
    /// Where it is in this process.
    pub local: MemRegion,
}

/// Memory from [`Transport::alloc_transfer_buffer`], valid until
/// [`Transport::free_transfer_buffer`] (or the module's end).
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferBuffer {
    /// Module-local id, given back to `free_transfer_buffer`.
    pub id: u64,
    /// The memory, writable by the owner.
    pub region: MemRegion,
}

/// One RDMA operation.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy)]
pub struct RdmaOp<'a> {
    /// Target peer.
    pub peer: Rank,
    /// Local source (`put`) or destination (`get`).
    pub local: MemRegion,
    /// Registration id of the local memory, or `u64::MAX` when the module
    /// does not need one.
    pub local_registration: u64,
    /// Address in the peer's memory.
    pub remote_addr: u64,
    /// The peer's packed remote key; bytes from another process.
    pub remote_key: RSlice<'a, u8>,
    /// Reported back with the completion.
    pub cookie: u64,
}

/// What a module reports back to the host during `progress`.
pub trait EventSink {
    /// A fragment arrived. `header` and `payload` are valid only during the
    /// call.
    fn deliver(&mut self, peer: Rank, tag: u8, header: &[u8], payload: &[u8]);
    /// A `send` that answered [`Completion::Pending`] finished.
    fn send_complete(&mut self, cookie: u64, status: Result<(), PluginError>);
    /// A `put`/`get` that answered [`Completion::Pending`] finished.
    fn rdma_complete(&mut self, cookie: u64, status: Result<(), PluginError>);
    /// A peer failed; later sends to it fail. The error's kind says how
    /// when the module knows: [`ErrorKind::CONNECTION_CLOSED`] for an
    /// orderly close, [`ErrorKind::CONNECTION_RESET`] for a connection
    /// that broke (the host then sends again on other modules what may
    /// have been lost), [`ErrorKind::PROCESS_ENDED`], [`ErrorKind::TIMED_OUT`],
    /// [`ErrorKind::AUTHENTICATION`], [`ErrorKind::MALFORMED`] for bytes
    /// that break the protocol, else [`ErrorKind::PEER_FAILED`]; the host
    /// reports the kind to the runtime.
    ///
    /// [`ErrorKind::CONNECTION_CLOSED`]: crate::ErrorKind::CONNECTION_CLOSED
    /// [`ErrorKind::CONNECTION_RESET`]: crate::ErrorKind::CONNECTION_RESET
    /// [`ErrorKind::PROCESS_ENDED`]: crate::ErrorKind::PROCESS_ENDED
    /// [`ErrorKind::TIMED_OUT`]: crate::ErrorKind::TIMED_OUT
    /// [`ErrorKind::AUTHENTICATION`]: crate::ErrorKind::AUTHENTICATION
    /// [`ErrorKind::MALFORMED`]: crate::ErrorKind::MALFORMED
    /// [`ErrorKind::PEER_FAILED`]: crate::ErrorKind::PEER_FAILED
    fn peer_failed(&mut self, peer: Rank, error: PluginError);
}

/// The transport as a plugin author writes it.
///
/// Every method is called by one thread at a time (the module is `Send`,
/// not `Sync`). The adapter made by [`crate::export_btl_component!`] turns
/// a panic in any method into an error and poisons the module.
///
/// # Lifetime
///
/// There is no close call. A module lives until the host drops the object
/// that owns it: the messenger (`fireopal::btl::Messenger`) holds every
/// module it opened until it is itself dropped, which a runtime does at
/// its end or never (a process that exits without unwinding drops
/// nothing). `Drop` then runs in the plugin, on the dropping thread, with
/// operations possibly still pending: none of them is reported, and a
/// panic in `Drop` aborts the process (abi_stable's destructor is not
/// behind the panic firewall). The plugin library itself is never
/// unloaded, so its code and statics outlive every module.
///
/// # Errors
///
/// An `Err` (or a panic) from [`progress`](Transport::progress) closes
/// the module: the host never calls it again, completes its pending
/// operations with the error, and routes its peers over the next module
/// that reaches them; a peer no other module reaches fails. Report one
/// peer's trouble with [`EventSink::peer_failed`] and one operation's
/// with its completion; return `Err` only when the module as a whole
/// cannot go on. An `Err` from `attributes` or `address` during setup
/// drops the module, and one from `add_peers` closes it, the same way.
pub trait Transport: Send + 'static {
    /// The module's limits and figures; called once after `open`.
    fn attributes(&self) -> Result<BtlAttributes, PluginError>;

    /// The bytes peers need to reach this module (published by the host).
    fn address(&self) -> Result<Vec<u8>, PluginError>;

    /// Adds peers; answers one [`Reachability`] per entry, in order. May be
    /// called several times; a rank added twice keeps the first address.
    ///
    /// The messenger calls it once, at setup, with every rank that
    /// published an address for this module, **this process's own rank
    /// included** (its own [`address`](Transport::address)): a module that
    /// does not loop back to its own process answers `Unreachable` for it
    /// (the built-in `self` transport serves that rank). An answer list of
    /// the wrong length is refused by the adapter as an error.
    fn add_peers(&mut self, peers: &[PeerAddress<'_>]) -> Result<Vec<Reachability>, PluginError>;

    /// Forgets a peer: later calls naming it fail, and every pending
    /// `send`, `send_in_place`, `put` and `get` to it fails with its cookie.
    /// This method has no [`EventSink`], so those completions are kept and
    /// reported, each once and with an error, by the following
    /// [`progress`](Transport::progress) calls (as tcp and shm do); no
    /// `peer_failed` is reported for a removed peer. The messenger does not
    /// call it yet.
    fn remove_peer(&mut self, _peer: Rank) -> Result<(), PluginError> {
        Ok(())
    }

    /// Immediate send of `header` + `payload` with `tag`.
    ///
    /// All or nothing, as the caller sees it: `Sent` means the module has
    /// taken the whole message, `Busy` that it took none of it. No
    /// completion follows either answer, and the caller's buffers are free
    /// when it returns. It must answer `Busy` when earlier sends to `peer`
    /// are still queued, so order per peer holds. Messages larger than
    /// [`BtlAttributes::max_sendi_size`] are `Busy`.
    ///
    /// `Sent` does not require every byte to be on the wire: when the
    /// device takes only the start of the message, a module may copy the
    /// rest, queue it to go out whole and in order from `progress`, and
    /// answer `Sent` (tcp does this when a socket takes part of a frame).
    /// The peer then has queued bytes, so following `sendi`s to it answer
    /// `Busy` until they are written; if the peer fails first, its
    /// `peer_failed` is the only report, since a `sendi` has no cookie.
    /// `Busy` must mean nothing of the message reached the peer or stayed
    /// in the module. A module may also answer `Busy` to hold a message
    /// back, so that `send` queues it to leave with others in one write
    /// from the next `progress` (tcp does this for bursts of small
    /// messages, `btl_tcp_sendi_batch`).
    fn sendi(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
    ) -> Result<SendiOutcome, PluginError>;

    /// Sends `header` + `payload` with `tag`, copying whatever it cannot
    /// send now before it returns. `Done` means no event follows;
    /// `Pending` means exactly one `send_complete(cookie, ..)` follows.
    /// Messages to one peer arrive in the order they were sent (counting
    /// both `sendi` and `send`). Larger than
    /// [`BtlAttributes::max_send_size`] is an `INVALID_ARGUMENT` error.
    fn send(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        cookie: u64,
    ) -> Result<Completion, PluginError>;

    /// Registers memory for RDMA.
    fn register_mem(
        &mut self,
        _region: MemRegion,
        _access: Access,
    ) -> Result<Registration, PluginError> {
        Err(PluginError::unsupported("memory registration"))
    }

    /// Releases a registration. Operations using it must be complete.
    fn deregister_mem(&mut self, _id: u64) -> Result<(), PluginError> {
        Err(PluginError::unsupported("memory registration"))
    }

    /// Writes `op.local` into the peer's memory at `op.remote_addr`.
    fn put(&mut self, _op: &RdmaOp<'_>) -> Result<Completion, PluginError> {
        Err(PluginError::unsupported("put"))
    }

    /// Reads the peer's memory at `op.remote_addr` into `op.local`.
    fn get(&mut self, _op: &RdmaOp<'_>) -> Result<Completion, PluginError> {
        Err(PluginError::unsupported("get"))
    }

    /// Makes progress: sends what is queued, receives what arrived, and
    /// reports each event to `sink`. Returns how much work it did: the
    /// events it reported plus the peers' remote operations it served
    /// (a put written into a registration, a get answered), so that a
    /// module that only serves a peer's puts is seen at work, not idle. A
    /// transport whose `put`/`get` reach the target's memory without the
    /// target's help serves nothing there.
    fn progress(&mut self, sink: &mut dyn EventSink) -> Result<usize, PluginError>;

    /// Sends like [`Transport::send`], except that the module may read
    /// `payload` after returning (the receiver may copy it straight from
    /// there): `Done` means it was read already; `Pending` means exactly one
    /// `send_complete(cookie)` follows, and only then may the caller reuse
    /// the memory. Offered with [`BtlFlags::SEND_IN_PLACE`].
    fn send_in_place(
        &mut self,
        _peer: Rank,
        _tag: u8,
        _header: &[u8],
        _payload: MemRegion,
        _cookie: u64,
    ) -> Result<Completion, PluginError> {
        Err(PluginError::unsupported("send in place"))
    }

    /// At least `len` bytes that peers read with a single copy when sent
    /// with `send_in_place`. Offered with [`BtlFlags::TRANSFER_BUFFERS`].
    fn alloc_transfer_buffer(&mut self, _len: usize) -> Result<TransferBuffer, PluginError> {
        Err(PluginError::unsupported("transfer buffers"))
    }

    /// Releases a transfer buffer; sends from it must be complete. Peers
    /// drop their mappings of it.
    fn free_transfer_buffer(&mut self, _id: u64) -> Result<(), PluginError> {
        Err(PluginError::unsupported("transfer buffers"))
    }

    /// Makes memory the host already has in a memory file (a memfd) known
    /// to the module, so that payloads and registrations inside `region`
    /// are read by peers through a mapping of the file, with one copy.
    /// `fd` is borrowed for the call only: a module that keeps the file
    /// duplicates the descriptor. `region` must be a shared mapping of the
    /// file from offset 0, and stay mapped until
    /// [`unregister_segment`](Transport::unregister_segment). Returns the
    /// module's id of the segment. Offered with
    /// [`BtlFlags::MAPPED_SEGMENTS`]; a module may refuse a file it cannot
    /// hand to peers safely (for shared memory: one not sealed against
    /// resizing).
    fn register_segment(&mut self, _fd: i32, _region: MemRegion) -> Result<u64, PluginError> {
        Err(PluginError::unsupported("mapped segments"))
    }

    /// Forgets a segment from
    /// [`register_segment`](Transport::register_segment); sends from it
    /// must be complete. Peers drop their mappings of it.
    fn unregister_segment(&mut self, _id: u64) -> Result<(), PluginError> {
        Err(PluginError::unsupported("mapped segments"))
    }

    /// Maps the whole of a peer's registration (`remote_key`, from the
    /// peer's `register_mem`) into this process, where loads, stores and
    /// CPU atomics reach the peer's memory directly: what a node-local
    /// one-sided layer uses instead of `put`, `get` and atomics through
    /// messages. The mapping stays valid until
    /// [`unmap_remote`](Transport::unmap_remote), even if the peer
    /// deregisters or exits meanwhile. Offered by modules whose peers
    /// share memory (shared memory: a registration inside a mapped
    /// segment); others refuse with `UNSUPPORTED`.
    fn map_remote(
        &mut self,
        _peer: Rank,
        _remote_key: &[u8],
    ) -> Result<RemoteMapping, PluginError> {
        Err(PluginError::unsupported("remote mappings"))
    }

    /// Drops a mapping from [`map_remote`](Transport::map_remote); the
    /// caller no longer touches its memory.
    fn unmap_remote(&mut self, _id: u64) -> Result<(), PluginError> {
        Err(PluginError::unsupported("remote mappings"))
    }

    /// Bytes the module has taken and not yet handed to the device. The
    /// part that matters is the one no completion is owed for, which the
    /// host cannot see otherwise: the rest of a `sendi` the device took
    /// only in part, and frames of the module's own (RDMA requests,
    /// answers to a peer's `get` or `put`); `progress` sends them. Before
    /// it closes its modules the host makes progress until every module
    /// answers 0, so that such bytes are not lost at close. A module that
    /// holds nothing without a cookie may keep the default, 0.
    fn unsent(&self) -> u64 {
        0
    }
}

/// Host-side receiver of events, as it crosses the boundary.
#[sabi_trait]
pub trait BtlEventSink {
    /// See [`EventSink::deliver`].
    fn deliver(&mut self, peer: Rank, tag: u8, header: RSlice<'_, u8>, payload: RSlice<'_, u8>);
    /// See [`EventSink::send_complete`].
    fn send_complete(&mut self, cookie: u64, status: RResult<(), PluginError>);
    /// See [`EventSink::rdma_complete`].
    fn rdma_complete(&mut self, cookie: u64, status: RResult<(), PluginError>);
    /// See [`EventSink::peer_failed`].
    #[sabi(last_prefix_field)]
    fn peer_failed(&mut self, peer: Rank, error: PluginError);
}

/// Borrowed event sink as passed to `progress`.
pub type BtlEventSinkRef<'a> = BtlEventSink_TO<'a, RMut<'a, ()>>;

/// The module trait object as it crosses the boundary; each method has the
/// contract of the [`Transport`] method of the same name.
#[sabi_trait]
pub trait BtlModule: Send {
    /// See [`Transport::attributes`].
    fn attributes(&self) -> RResult<BtlAttributes, PluginError>;
    /// See [`Transport::address`].
    fn address(&self) -> RResult<RVec<u8>, PluginError>;
    /// See [`Transport::add_peers`].
    fn add_peers(
        &mut self,
        peers: RSlice<'_, PeerAddress<'_>>,
    ) -> RResult<RVec<Reachability>, PluginError>;
    /// See [`Transport::remove_peer`].
    fn remove_peer(&mut self, peer: Rank) -> RResult<(), PluginError>;
    /// See [`Transport::sendi`].
    fn sendi(
        &mut self,
        peer: Rank,
        tag: u8,
        header: RSlice<'_, u8>,
        payload: RSlice<'_, u8>,
    ) -> RResult<SendiOutcome, PluginError>;
    /// See [`Transport::send`].
    fn send(
        &mut self,
        peer: Rank,
        tag: u8,
        header: RSlice<'_, u8>,
        payload: RSlice<'_, u8>,
        cookie: u64,
    ) -> RResult<Completion, PluginError>;
    /// See [`Transport::register_mem`].
    fn register_mem(
        &mut self,
        region: MemRegion,
        access: Access,
    ) -> RResult<Registration, PluginError>;
    /// See [`Transport::deregister_mem`].
    fn deregister_mem(&mut self, id: u64) -> RResult<(), PluginError>;
    /// See [`Transport::put`].
    fn put(&mut self, op: RdmaOp<'_>) -> RResult<Completion, PluginError>;
    /// See [`Transport::get`].
    fn get(&mut self, op: RdmaOp<'_>) -> RResult<Completion, PluginError>;
    /// See [`Transport::progress`].
    fn progress(&mut self, sink: BtlEventSinkRef<'_>) -> RResult<u32, PluginError>;
    /// See [`Transport::send_in_place`].
    fn send_in_place(
        &mut self,
        peer: Rank,
        tag: u8,
        header: RSlice<'_, u8>,
        payload: MemRegion,
        cookie: u64,
    ) -> RResult<Completion, PluginError>;
    /// See [`Transport::alloc_transfer_buffer`].
    fn alloc_transfer_buffer(&mut self, len: usize) -> RResult<TransferBuffer, PluginError>;
    /// See [`Transport::free_transfer_buffer`].
    #[sabi(last_prefix_field)]
    fn free_transfer_buffer(&mut self, id: u64) -> RResult<(), PluginError>;

    // Appended after the first release of this interface generation, with
    // defaults, as abi_stable wants additions: a plugin built against a
    // later release (more methods) passes this host's layout check; one
    // built before these methods does not and must be rebuilt
    // (tests/tests/plugins.rs builds both).

    /// See [`Transport::register_segment`].
    fn register_segment(&mut self, _fd: i32, _region: MemRegion) -> RResult<u64, PluginError> {
        RResult::RErr(PluginError::unsupported("mapped segments"))
    }
    /// See [`Transport::unregister_segment`].
    fn unregister_segment(&mut self, _id: u64) -> RResult<(), PluginError> {
        RResult::RErr(PluginError::unsupported("mapped segments"))
    }
    /// See [`Transport::map_remote`].
    fn map_remote(
        &mut self,
        _peer: Rank,
        _remote_key: RSlice<'_, u8>,
    ) -> RResult<RemoteMapping, PluginError> {
        RResult::RErr(PluginError::unsupported("remote mappings"))
    }
    /// See [`Transport::unmap_remote`].
    fn unmap_remote(&mut self, _id: u64) -> RResult<(), PluginError> {
        RResult::RErr(PluginError::unsupported("remote mappings"))
    }
    /// See [`Transport::unsent`].
    fn unsent(&self) -> RResult<u64, PluginError> {
        RResult::ROk(0)
    }
}

/// Owned module trait object, as returned by `open`.
pub type BtlModuleBox = BtlModule_TO<'static, RBox<()>>;

/// What a plugin author implements to describe a BTL component.
pub trait BtlComponentImpl: 'static {
    /// Component name; must equal the `<component>` part of the file name.
    const NAME: &'static str;
    /// Component version.
    const VERSION: ComponentVersion;
    /// The module type `open` builds.
    type Module: Transport;

    /// Declares the component's parameters (prefix `btl_<name>_`).
    fn register_params(_registry: &mut ParamRegistrar<'_>) -> Result<(), PluginError> {
        Ok(())
    }

    /// Whether the component can run in this job, and its priority.
    fn query(host: &Host) -> Availability;

    /// Builds the component's modules: one per device, interface or link
    /// (as Open MPI's component init returns an array of modules), so the
    /// host can rank and stripe across them. Called only after `query`
    /// answered `Available`; an empty list means nothing usable was found.
    ///
    /// An `Err` (or a panic) leaves the component out of the job with the
    /// reason logged and shown by `fireopal info`; the job goes on over the
    /// other transports. It is an error of the job only when the user
    /// named the component in an include list (`FIREOPAL_BTL=name`). A
    /// component that finds nothing usable should rather answer
    /// `Unavailable` from `query`, or return an empty list.
    fn open(host: Host) -> Result<Vec<Self::Module>, PluginError>;
}

/// Root module of a BTL plugin.
#[repr(C)]
#[derive(StableAbi, Debug)]
#[sabi(kind(Prefix(prefix_ref = BtlComponentRef)))]
pub struct BtlComponent {
    /// Component name (equal to the file name's component part).
    pub name: RStr<'static>,
    /// Component version.
    pub version: ComponentVersion,
    /// Declares the component's parameters.
    pub register_params: extern "C" fn(ParamRegistryRef<'_>) -> RResult<(), PluginError>,
    /// See [`BtlComponentImpl::query`].
    pub query: extern "C" fn(HostServicesArc) -> RResult<Availability, PluginError>,
    /// See [`BtlComponentImpl::open`].
    #[sabi(last_prefix_field)]
    pub open: extern "C" fn(HostServicesArc) -> RResult<RVec<BtlModuleBox>, PluginError>,
}

impl RootModule for BtlComponentRef {
    abi_stable::declare_root_module_statics! {BtlComponentRef}
    const BASE_NAME: &'static str = "fireopal_btl";
    const NAME: &'static str = "fireopal btl component";
    const VERSION_STRINGS: VersionStrings = abi_stable::package_version_strings!();
}
