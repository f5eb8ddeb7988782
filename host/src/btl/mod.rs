//! The BTL framework: every selected transport module, the route to each
//! peer, and the active-message API runtimes use.
//!
//! [`Messenger::init`] opens every module of every selected BTL component
//! (select-many), publishes one directory of their addresses through the
//! bootstrap key-value store, reads every peer's directory after a fence,
//! adds the peers to each module, and orders the modules that reach a peer
//! by exclusivity, then latency, as Open MPI's BML r2 does: only modules of
//! the highest exclusivity that reaches a peer are used for it (a peer
//! reachable through shared memory never gets tcp traffic).
//!
//! Active messages carry a `u8` tag (tags [`FIRST_RESERVED_TAG`] and up are
//! the framework's own), a small header and a payload. [`Messenger::send`]
//! tries the module's immediate `sendi` and falls back to `send`; messages
//! larger than the module's `max_send_size` are split into fragments that
//! the receiver reassembles. Handlers run inside [`Messenger::progress`] and
//! see bytes valid only during the call; they cannot send (the module is
//! busy delivering): they record what arrived, and the caller acts after
//! `progress` returns. Messages between two processes over one module
//! arrive in the order they were sent.
//!
//! A large message sent with `send` arrives whole before its handler runs,
//! which then copies it where it belongs. Where the route offers `get`, a
//! runtime can move it once instead, by rendezvous: announce a buffer
//! registered with [`Messenger::register_memory`] in a small message, and
//! let the receiver [`Messenger::get`] it into its own (the bench's
//! `--from registered` is one, written on this API).
//!
//! The built-in `self` BTL lives in [`self_btl`].

mod messenger;
pub mod self_btl;

pub(crate) use messenger::Class;
pub use messenger::{
    ExchangeError, ExchangeFailure, FailureKind, Incoming, InitError, LaneInfo, MemoryHandle,
    Messenger, PeerFailure, ProgressError, RemoteMap, Replies, RouteInfo, SegmentHandle, SendError,
    SendId, SendTicket, SendiPolicy, StallWatch, TransferBufferHandle, WaitError,
    FIRST_RESERVED_TAG,
};
