//! Typed views of the bytes processes exchange, one folder per protocol.
//!
//! Everything here parses input that came from another process, so each
//! view checks lengths and fields before any value is trusted and reports
//! what was wrong as a small error enum; nothing panics or indexes
//! unchecked on peer bytes. All multi-byte fields are little-endian.
//!
//! - [`am`]: the active-message layer's address directory and fragment
//!   header, which every transport carries;
//! - [`p2p`]: the tagged point-to-point protocol's eager, rendezvous and
//!   flow-control messages;
//! - [`tcp`]: the tcp transport's handshake, frames and addresses;
//! - [`shmem`]: the one-sided layer's atomics executed by the target,
//!   barrier notices, and published heap entries;
//! - [`shm`]: the shm transport's published address and control messages
//!   (rendezvous, completion, unmap notices, mapped-segment keys), whose
//!   queue layout lives in [`crate::shmq`];
//! - [`verbs`]: the verbs transport's published address, connection
//!   messages, fragment header and remote key.
//!
//! All of them read and write their bytes through one checked codec (the
//! crate-private `codec` module: a bounds-checked `Reader`, a `Writer`,
//! and `Fields` for fixed-size messages); each protocol keeps its own
//! error enum.

pub mod am;
pub(crate) mod codec;
pub mod p2p;
pub mod shm;
pub mod shmem;
pub mod tcp;
pub mod verbs;

pub(crate) use codec::{Fields, Reader, Writer};
