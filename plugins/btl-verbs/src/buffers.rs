//! Registered buffers the module owns: receive buffers of the shared
//! receive queue and of the datagram queue pair, and send buffers that
//! fragments are copied into. One allocation and one memory region per
//! pool, cut into slots of one size.

#![allow(unsafe_code)]

use std::io;

use crate::device::{Mr, Pd};
use crate::ffi::types::{ibv_sge, IBV_ACCESS_LOCAL_WRITE};

/// A pool of equal registered slots.
pub(crate) struct Pool {
    // Declared before `mem`: deregistered before the memory is freed.
    mr: Mr,
    mem: Box<[u8]>,
    slot: usize,
    free: Vec<u32>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("slot", &self.slot)
            .field("slots", &self.slots())
            .field("free", &self.free.len())
            .finish()
    }
}

impl Pool {
    /// `count` slots of `slot` bytes, registered for local writes (the
    /// device writes received bytes into them).
    pub(crate) fn new(pd: &Pd, slot: usize, count: u32) -> io::Result<Self> {
        let len = slot
            .checked_mul(count as usize)
            .filter(|&l| l > 0)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "buffer pool size"))?;
        let mut mem = vec![0u8; len].into_boxed_slice();
        // SAFETY: `mem` is owned by the pool and freed only after `mr` is
        // dropped (field order); the device writes into a slot only while
        // it is posted, and the module reads it only after its completion.
        let mr = unsafe { Mr::new(pd, mem.as_mut_ptr(), len, IBV_ACCESS_LOCAL_WRITE)? };
        Ok(Self {
            mr,
            mem,
            slot,
            free: (0..count).rev().collect(),
        })
    }

    /// Bytes of each slot.
    pub(crate) fn slot_len(&self) -> usize {
        self.slot
    }

    /// Number of slots.
    pub(crate) fn slots(&self) -> u32 {
        (self.mem.len() / self.slot) as u32
    }

    /// Takes a free slot.
    pub(crate) fn take(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// Returns a slot taken with [`Pool::take`].
    pub(crate) fn give_back(&mut self, slot: u32) {
        debug_assert!(!self.free.contains(&slot));
        self.free.push(slot);
    }

    /// Free slots.
    pub(crate) fn free(&self) -> usize {
        self.free.len()
    }

    /// Whether a slot is free.
    pub(crate) fn has_free(&self) -> bool {
        !self.free.is_empty()
    }

    /// The bytes of `slot` (empty for a slot out of range).
    pub(crate) fn bytes(&self, slot: u32) -> &[u8] {
        let start = slot as usize * self.slot;
        self.mem.get(start..start + self.slot).unwrap_or(&[])
    }

    /// The bytes of `slot`, to fill before posting it.
    pub(crate) fn bytes_mut(&mut self, slot: u32) -> &mut [u8] {
        let start = slot as usize * self.slot;
        self.mem
            .get_mut(start..start + self.slot)
            .unwrap_or(&mut [])
    }

    /// A scatter entry of the first `len` bytes of `slot`.
    pub(crate) fn sge(&self, slot: u32, len: usize) -> ibv_sge {
        let start = slot as usize * self.slot;
        ibv_sge {
            addr: self.mem.as_ptr() as u64 + start as u64,
            length: len.min(self.slot) as u32,
            lkey: self.mr.lkey,
        }
    }
}
