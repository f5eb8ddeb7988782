//! The tcp transport's protocol: the handshake that opens a connection
//! and proves both ends hold the job key, the frame header in front of
//! every message with the sub-headers of the messages that emulate RDMA,
//! and the address list a module publishes.

pub mod address;
pub mod frame;
pub mod handshake;
