//! Segments (the symmetric heap, sealed memfds) registered with every
//! transport that can map them, and sends in place from them.

use std::os::fd::{AsRawFd, BorrowedFd};

use fireopal_abi::btl::{BtlFlags, MemRegion, Rank};
use fireopal_abi::{ErrorKind, PluginError};

use super::{Messenger, SendError, SendTicket};
use crate::memheap::SymmetricHeap;

/// Memory of this process in a memory file, registered with every
/// transport that lets peers read such memory with one copy (see
/// [`Messenger::register_segment`]).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "unregister the segment before its memory goes away"]
pub struct SegmentHandle {
    /// (module, the module's segment id) for each module that took it.
    parts: Vec<(usize, u64)>,
    region: MemRegion,
}

impl SegmentHandle {
    /// How many transport modules took the segment (0 when none offers
    /// [`BtlFlags::MAPPED_SEGMENTS`], e.g. a job with only tcp).
    pub fn modules(&self) -> usize {
        self.parts.len()
    }

    /// The registered memory.
    pub fn region(&self) -> MemRegion {
        self.region
    }
}

impl Messenger {
    /// Registers memory that this process has in a memory file (mapped
    /// shared from offset 0 at `region`) with every module offering
    /// [`BtlFlags::MAPPED_SEGMENTS`]. From then on payloads sent with
    /// [`send_in_place`](Self::send_in_place), and memory registered with
    /// [`register_memory`](Self::register_memory), inside the region are
    /// read by node-local peers through one cached mapping of the file:
    /// one copy, no staging. A module that declines (`Unsupported`, e.g.
    /// single copy turned off by a parameter) is skipped; any other refusal
    /// undoes the registrations already made and is returned.
    ///
    /// The region must stay mapped until
    /// [`unregister_segment`](Self::unregister_segment). The shared-memory
    /// transport requires the file to be whole pages and sealed against
    /// resizing, as the symmetric heap's is
    /// ([`register_symmetric_heap`](Self::register_symmetric_heap)).
    pub fn register_segment(
        &mut self,
        fd: BorrowedFd<'_>,
        region: MemRegion,
    ) -> Result<SegmentHandle, SendError> {
        let mut parts = Vec::new();
        for i in 0..self.slots.len() {
            let slot = &mut self.slots[i];
            if slot.closed.is_some() || !slot.attrs.flags.contains(BtlFlags::MAPPED_SEGMENTS) {
                continue;
            }
            match slot
                .module
                .register_segment(fd.as_raw_fd(), region)
                .into_result()
            {
                Ok(id) => parts.push((i, id)),
                Err(e) if e.kind == ErrorKind::UNSUPPORTED => {}
                Err(e) => {
                    for (m, id) in parts {
                        // Undoing a registration just made; a failure here
                        // leaves nothing the caller could act on.
                        let _ = self.slots[m].module.unregister_segment(id);
                    }
                    return Err(SendError::Module(e));
                }
            }
        }
        Ok(SegmentHandle { parts, region })
    }

    /// Registers the symmetric heap's segment (see
    /// [`register_segment`](Self::register_segment)), so that sends and
    /// RDMA from symmetric objects are single copy between node-local
    /// ranks. Unregister it before the heap is dropped.
    #[allow(unsafe_code)]
    pub fn register_symmetric_heap(
        &mut self,
        heap: &SymmetricHeap,
    ) -> Result<SegmentHandle, SendError> {
        let len = usize::try_from(heap.len()).unwrap_or(usize::MAX);
        if len == 0 {
            return Err(SendError::Module(PluginError::invalid(
                "the symmetric heap is empty",
            )));
        }
        // SAFETY: the heap's mapping is `len` bytes at `base`; the caller
        // keeps the heap until it unregisters, as documented above.
        let region = unsafe { MemRegion::new(heap.base(), len) };
        self.register_segment(heap.fd(), region)
    }

    /// Unregisters a segment; sends from it must be complete. Every module
    /// that took it tells its peers to drop their mappings. The first
    /// module error is returned after all modules were asked.
    pub fn unregister_segment(&mut self, handle: SegmentHandle) -> Result<(), SendError> {
        let mut result = Ok(());
        for (m, id) in handle.parts {
            let Some(slot) = self.slots.get_mut(m).filter(|s| s.closed.is_none()) else {
                continue;
            };
            slot.active = true;
            if let Err(e) = slot.module.unregister_segment(id).into_result() {
                result = result.and(Err(SendError::Module(e)));
            }
        }
        result
    }

    /// Sends an active message whose payload the transport may read where
    /// it is, after this returns: from a registered segment or a transfer
    /// buffer the peer copies it once through a mapping; otherwise the
    /// module reads it as it can (process_vm_readv, or a staging copy).
    /// Modules without [`BtlFlags::SEND_IN_PLACE`] send it like
    /// [`send`](Self::send). `MemRegion::new`'s contract applies: the bytes
    /// stay valid and unchanged until the ticket completes.
    #[allow(unsafe_code)]
    pub fn send_in_place(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: MemRegion,
    ) -> Result<SendTicket, SendError> {
        let i = self.user_route(peer, tag)?;
        if !self.takes_in_place(i, header.len(), payload.len()) {
            // SAFETY: valid for reads until the send completes, by the
            // region's contract; `send` is done with it when it returns.
            let bytes = unsafe { payload.as_bytes() };
            return self.send(peer, tag, header, bytes);
        }
        self.send_in_place_on(i, peer, tag, header, payload)
    }
}
