//! `fireopal-core`: the `no_std` heart of fireopal.
//!
//! Everything here is plain data structures and protocol logic with no I/O,
//! so that a runtime can embed it even without an operating system:
//!
//! - [`regcache`]: registration cache on an interval tree;
//! - [`group`]: process-group representations with MPI group semantics;
//! - [`buddy`]: the buddy allocator behind the symmetric heap;
//! - [`shmq`]: layout and checks of the shared-memory transport's queues
//!   and fast boxes;
//! - [`checksum`]: Fletcher-64, the shared-memory transport's optional
//!   check of what it writes;
//! - [`copy`]: bulk copies that keep their speed at any alignment;
//! - [`component`]: plain data shared by host and plugins (versions,
//!   component names);
//! - [`auth`]: SHA-256 and HMAC-SHA256, for transports that prove a peer
//!   holds the job key;
//! - [`wire`]: typed, checked views of the bytes processes exchange, one
//!   folder per protocol (`am`, `tcp`, `shm`) over one codec;
//! - [`p2p`]: the I/O-free matching engine of tagged point-to-point
//!   messages (MPI receive matching, per-sender order);
//! - [`id_hash`]: a cheap hasher for maps keyed by ids this process
//!   chooses.
#![no_std]
#![deny(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(test)]
extern crate std;

#[macro_use]
mod codes;

pub mod auth;
pub mod buddy;
pub mod checksum;
pub mod component;
pub mod copy;
mod cpu;
pub mod group;
pub mod id_hash;
pub mod p2p;
pub mod regcache;
pub mod shmq;
pub mod wire;
