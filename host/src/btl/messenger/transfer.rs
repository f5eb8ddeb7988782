//! Transfer buffers: memory a transport lets peers read with one copy.

use abi_stable::std_types::RSlice;
use fireopal_abi::btl::{BtlFlags, MemRegion, Rank};
use fireopal_abi::PluginError;

use super::{Class, Messenger, SendError, SendTicket};

/// Memory from a transport that peers read with a single copy (see
/// [`Messenger::alloc_transfer_buffer`]). Valid until freed through the
/// messenger that made it.
#[derive(Debug, PartialEq, Eq)]
pub struct TransferBufferHandle {
    module: usize,
    id: u64,
    region: MemRegion,
}

impl TransferBufferHandle {
    /// Bytes of the buffer.
    pub fn len(&self) -> usize {
        self.region.len()
    }

    /// Whether it is empty (never: buffers have at least one page).
    pub fn is_empty(&self) -> bool {
        self.region.is_empty()
    }
}

impl Messenger {
    /// A buffer of at least `len` bytes that the module serving `peer`
    /// lets peers read with one copy (shared memory: a memfd segment the
    /// peer maps once). `Unsupported` when the module has none.
    pub fn alloc_transfer_buffer(
        &mut self,
        peer: Rank,
        len: usize,
    ) -> Result<TransferBufferHandle, SendError> {
        let i = self.module_for(peer)?;
        let b = self.call_module(i, |module| module.alloc_transfer_buffer(len))?;
        if b.region.len() < len {
            return Err(SendError::Module(PluginError::invalid(
                "transport returned a transfer buffer shorter than asked",
            )));
        }
        self.live_buffers.push((i, b.id));
        Ok(TransferBufferHandle {
            module: i,
            id: b.id,
            region: b.region,
        })
    }

    /// Frees a transfer buffer; sends from it must be complete.
    pub fn free_transfer_buffer(&mut self, buffer: TransferBufferHandle) -> Result<(), SendError> {
        self.live_buffers
            .retain(|&(m, id)| (m, id) != (buffer.module, buffer.id));
        self.call_module(buffer.module, |module| {
            module.free_transfer_buffer(buffer.id)
        })
    }

    fn check_buffer(&self, buffer: &TransferBufferHandle, end: usize) -> Result<(), SendError> {
        if !self.live_buffers.contains(&(buffer.module, buffer.id)) {
            return Err(SendError::Module(PluginError::invalid(
                "transfer buffer is not live in this messenger",
            )));
        }
        if end > buffer.region.len() {
            return Err(SendError::Module(PluginError::invalid(
                "range is past the end of the transfer buffer",
            )));
        }
        Ok(())
    }

    /// Copies `data` into `buffer` at `offset`. Writing bytes a pending
    /// send reads changes what the peer receives.
    #[allow(unsafe_code)]
    pub fn write_transfer_buffer(
        &mut self,
        buffer: &TransferBufferHandle,
        offset: usize,
        data: &[u8],
    ) -> Result<(), SendError> {
        let end = offset.saturating_add(data.len());
        self.check_buffer(buffer, end)?;
        // SAFETY: the buffer is live (its module keeps it mapped until it
        // is freed through this messenger, checked above) and
        // `offset..end` lies inside it; `data` is ordinary memory of ours,
        // so the ranges do not overlap.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(buffer.region.as_ptr().add(offset), data.len())
        };
        fireopal_core::copy::copy_bytes(dst, data);
        Ok(())
    }

    /// Sends the first `len` bytes of `buffer` to `peer`, read where they
    /// are (single copy). The buffer must not be freed before the send
    /// completes. Falls back to an ordinary send for messages the module
    /// sends eagerly anyway.
    #[allow(unsafe_code)]
    pub fn send_from_transfer_buffer(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        buffer: &TransferBufferHandle,
        len: usize,
    ) -> Result<SendTicket, SendError> {
        self.check_buffer(buffer, len)?;
        let i = self.user_route(peer, tag)?;
        if i != buffer.module {
            return Err(SendError::Module(PluginError::invalid(
                "transfer buffer belongs to another transport than the peer's",
            )));
        }
        // SAFETY: a sub-range of a live transfer buffer, which its module
        // keeps mapped until freed; the caller keeps it unfreed until the
        // send completes.
        let region = unsafe { MemRegion::new(buffer.region.as_ptr(), len) };
        self.send_in_place_on(i, peer, tag, header, region)
    }

    /// Whether module `i` sends a message of these sizes in place.
    pub(super) fn takes_in_place(&self, i: usize, header: usize, payload: usize) -> bool {
        let attrs = self.slots[i].attrs;
        attrs.flags.contains(BtlFlags::SEND_IN_PLACE)
            && header as u64 + payload as u64 <= attrs.max_send_size
            && header <= attrs.max_header_size as usize
    }

    /// `send_in_place` on module `i`, tracking the completion.
    pub(super) fn send_in_place_on(
        &mut self,
        i: usize,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: MemRegion,
    ) -> Result<SendTicket, SendError> {
        self.send_in_place_as(Class::User, i, peer, tag, header, payload)
    }

    /// `send_in_place` on module `i`, its completion going to `class`.
    pub(super) fn send_in_place_as(
        &mut self,
        class: Class,
        i: usize,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: MemRegion,
    ) -> Result<SendTicket, SendError> {
        let header = RSlice::from_slice(header);
        self.start_tracked(i, class, |module, cookie| {
            module.send_in_place(peer, tag, header, payload, cookie)
        })
    }
}
