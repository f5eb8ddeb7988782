//! Tagged point-to-point messaging between the ranks of a job, with
//! communicators: what an MPI-like runtime programs against, in the
//! spirit of Open MPI's ob1 and UCX's ucp.
//!
//! [`P2p`] owns the [`Messenger`](crate::btl::Messenger) and adds, above
//! its active messages:
//!
//! - **Communicators** ([`Communicator`]): the world, and [`P2p::dup`],
//!   [`P2p::split`] and [`P2p::create`], collective over their parent,
//!   with context ids agreed among the members (a bitmask of free ids
//!   and-ed over the parent, the lowest common id taken, as MPICH does).
//!   Ranks translate through `fireopal-core`'s groups, so a communicator
//!   over a strided or sparse subset costs what its group costs.
//!   [`P2p::free`], collective too, gives the id back.
//! - **Tagged messages**: [`P2p::send`]/[`P2p::recv`] (blocking, borrowed
//!   buffers), [`P2p::isend`]/[`P2p::irecv`] (requests that own their
//!   buffer until [`P2p::wait`] or [`P2p::test`] hands it back),
//!   [`P2p::iprobe`]/[`P2p::probe`]. Matching follows MPI: a receive names
//!   a source or [`Source::Any`] and a tag or [`Tag::Any`], on one
//!   communicator; messages of one sender on one communicator are matched
//!   in the order sent, whatever protocol carried them (a sequence number
//!   per sender and context, restored by `core::p2p`'s engine).
//! - **Protocols**, chosen per message: *eager* up to the eager limit (the
//!   route's `eager_limit`, or `p2p_eager_limit` when smaller), copied
//!   once into the receive buffer; above it a *rendezvous*: the sender
//!   announces the message, and once a receive matches it the receiver
//!   reads the data straight into the receive buffer with the transport's
//!   `get` (**RGET**; shm reads with `process_vm_readv` or through a
//!   mapped segment, tcp with a get request its peer serves), or, where
//!   the route has no `get`, asks for it and the sender sends it in
//!   fragments (**pipeline**; `p2p_rendezvous=pipeline` takes it on every
//!   route). Where the peer's own progress serves the read over the
//!   stream its sends take (tcp), a receiver with `p2p_rget_reads` reads
//!   from that peer in flight has the sender move the message instead: a
//!   lone message is read, a window of them is written by the sender,
//!   with `put` straight into the receive buffer from `p2p_put_min`
//!   bytes on (**RPUT**), else sent in fragments. The sender's request
//!   completes when the receiver answers FIN. On routes whose `put` and
//!   `get` are copies by the caller's processor (shm), a message of at
//!   least `p2p_split_min` bytes is *split*: the receiver reads its head
//!   while the sender, asked by an ACK, writes its tail, so two
//!   processors copy it.
//! - **Flow control**: a sender may have `p2p_eager_credits` eager
//!   messages unconsumed at each receiver; the receiver credits them back
//!   as receives take them, on its next eager message to that sender, or
//!   in a credit message once a batch is owed. Without credits a message goes by
//!   rendezvous, which leaves its data at the sender. So the unexpected
//!   messages a receiver stores are bounded by `credits × eager limit`
//!   bytes per sender, plus one announcement per rendezvous.
//! - **Failures**: a peer that fails completes every request that waits
//!   on it with [`P2pError::PeerFailed`] naming it; a receive from
//!   [`Source::Any`] stays posted (MPI without the fault-tolerance
//!   extensions). A peer that breaks the protocol is treated as failed.
//!
//! The I/O-free parts live in `fireopal-core`: the matching engine
//! (`core::p2p`) and the messages as checked views (`core::wire::p2p`).
//! Everything here is single-threaded: requests progress inside the calls
//! of this type ([`P2p::progress`] and every wait).
//!
//! ```no_run
//! use fireopal::p2p::{Source, Tag};
//! use fireopal::Runtime;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut rt = Runtime::init()?;
//! let world = rt.world();
//! let (rank, size) = (world.rank(), world.size());
//! let p2p = rt.p2p();
//! if rank == 0 {
//!     for peer in 1..size {
//!         p2p.send(&world, peer, 7, b"hello")?;
//!     }
//! } else {
//!     let mut buf = [0u8; 16];
//!     let status = p2p.recv(&world, Source::Rank(0), Tag::Tag(7), &mut buf)?;
//!     assert_eq!(&buf[..status.count], b"hello");
//! }
//! rt.finalize()?;
//! # Ok(())
//! # }
//! ```

mod comm;
mod endpoint;
mod error;
mod protocol;
mod rendezvous;
mod request;
mod split;
mod table;

pub use comm::Communicator;
pub use endpoint::P2p;
pub use error::{P2pError, Violation};
pub use fireopal_core::p2p::{Counts, Source, Tag};
pub use request::{Failure, Request};

use fireopal_abi::param::{ParamSpec, ParamValue};

/// What a completed receive (or a probe) learned about its message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Status {
    /// The sender's rank in the communicator.
    pub source: u32,
    /// The message's tag.
    pub tag: i32,
    /// Bytes received (for a probe: the message's length).
    pub count: usize,
}

/// The parameters of the point-to-point layer, for the registry.
pub(crate) fn param_specs() -> Vec<ParamSpec> {
    vec![
        ParamSpec::new(
            "p2p_eager_limit",
            ParamValue::Size(0),
            "largest message sent eagerly; 0 takes each route's transport eager limit, a larger value is capped by it",
        ),
        ParamSpec::new(
            "p2p_eager_credits",
            ParamValue::UInt(64),
            "eager messages a sender may have unconsumed at one receiver (bounds the unexpected-message memory)",
        ),
        ParamSpec::new(
            "p2p_pipeline_fragment",
            ParamValue::Size(0),
            "fragment size of pipelined rendezvous data (routes without get, messages under the route's min_rdma_pipeline_size, or p2p_rendezvous=pipeline); 0 takes the route's eager limit for a message under its min_rdma_pipeline_size, else its largest send",
        ),
        ParamSpec::new(
            "p2p_rendezvous",
            ParamValue::Str("get".into()),
            "how a rendezvous moves its data: get (the receiver reads it where the route offers get and the message is at least the route's min_rdma_pipeline_size, else the pipeline) or pipeline (the sender sends it once the receiver is ready)",
        ),
        ParamSpec::new(
            "p2p_rget_reads",
            ParamValue::UInt(1),
            "on routes whose get the peer's own progress serves (tcp): rendezvous reads in flight from one peer beyond which its further rendezvous are moved by the sender (put from p2p_put_min bytes, else the pipeline); 0 never",
        ),
        ParamSpec::new(
            "p2p_put_min",
            ParamValue::Size(512 << 10),
            "smallest rendezvous message that a receiver at its p2p_rget_reads bound asks the sender to put straight into the receive buffer, on routes with put; smaller ones are sent in fragments; 0 never",
        ),
        ParamSpec::new(
            "p2p_split_min",
            ParamValue::Size(64 << 10),
            "smallest rendezvous message whose tail the sender writes while the receiver reads its head, on routes whose put and get are copies by the caller (shm); 0 never splits",
        ),
        ParamSpec::new(
            "p2p_stall_limit",
            ParamValue::UInt(0),
            "seconds a blocking call waits with nothing arriving or completing before it fails; 0 waits for ever",
        ),
    ]
}
