//! Typed views of the bytes transports exchange with peers.
//!
//! Everything here parses input that came from another process, so each
//! view checks lengths and fields before any value is trusted and reports
//! what was wrong as a small error enum; nothing panics or indexes
//! unchecked on peer bytes. All multi-byte fields are little-endian.
//!
//! - [`frame`]: the fixed header in front of every TCP message, and the
//!   sub-headers of the messages that emulate RDMA;
//! - [`handshake`]: the messages that open a TCP connection and prove both
//!   ends hold the job key;
//! - [`address`]: the list of (interface, address, port) a TCP module
//!   publishes through the bootstrap.
//!
//! They, the `shm` control messages ([`crate::shmq`]) and the active-message
//! directory and fragment header ([`crate::am`]) read and write their bytes
//! through one checked little-endian codec (the crate-private `codec`
//! module); each protocol keeps its own error enum.

pub mod address;
pub(crate) mod codec;
pub mod frame;
pub mod handshake;

pub(crate) use codec::{Fields, Reader, Writer};
