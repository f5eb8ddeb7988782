//! Memory registrations and one-sided operations through the messenger.

use abi_stable::std_types::RSlice;
use fireopal_abi::btl::{MemRegion, Rank, RdmaOp};

use super::{Class, MemoryHandle, Messenger, SendError, SendTicket};

impl Messenger {
    /// Sends only if the module can do it immediately and completely
    /// (`sendi`); `Ok(false)` means nothing was sent, for instance because
    /// earlier sends to `peer` are still queued.
    pub fn try_send_immediate(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
    ) -> Result<bool, SendError> {
        let i = self.user_route(peer, tag)?;
        if self.routes[peer as usize].sequenced {
            return Ok(self
                .send_sequenced(peer, tag, header, payload, None)?
                .is_some());
        }
        self.sendi_on(i, peer, tag, header, payload)
    }

    /// Writes `local` into `peer`'s memory at `remote_addr`, inside the
    /// registration `remote_key` names.
    pub fn put(
        &mut self,
        peer: Rank,
        local: MemRegion,
        local_handle: Option<&MemoryHandle>,
        remote_addr: u64,
        remote_key: &[u8],
    ) -> Result<SendTicket, SendError> {
        self.rdma(
            true,
            Class::User,
            peer,
            local,
            local_handle,
            remote_addr,
            remote_key,
        )
    }

    /// Reads `peer`'s memory at `remote_addr` into `local`.
    pub fn get(
        &mut self,
        peer: Rank,
        local: MemRegion,
        local_handle: Option<&MemoryHandle>,
        remote_addr: u64,
        remote_key: &[u8],
    ) -> Result<SendTicket, SendError> {
        self.rdma(
            false,
            Class::User,
            peer,
            local,
            local_handle,
            remote_addr,
            remote_key,
        )
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn rdma(
        &mut self,
        write: bool,
        class: Class,
        peer: Rank,
        local: MemRegion,
        local_handle: Option<&MemoryHandle>,
        remote_addr: u64,
        remote_key: &[u8],
    ) -> Result<SendTicket, SendError> {
        let i = self.module_for(peer)?;
        self.start_tracked(i, class, |module, cookie| {
            let op = RdmaOp {
                peer,
                local,
                local_registration: local_handle.map_or(u64::MAX, MemoryHandle::module_id),
                remote_addr,
                remote_key: RSlice::from_slice(remote_key),
                cookie,
            };
            if write {
                module.put(op)
            } else {
                module.get(op)
            }
        })
    }
}
