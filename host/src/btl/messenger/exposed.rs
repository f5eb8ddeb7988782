//! Memory exposed to every peer at once, and peers' memory mapped into
//! this process.
//!
//! A one-sided layer publishes one remote key for its heap, whatever
//! module each peer reaches it through: [`Messenger::expose_memory`]
//! registers the memory on every module and names each registration in
//! one key (a lane-key directory). A peer picks from it the key of the
//! module its route uses ([`Messenger::remote_key_for`]), and where that
//! module shares memory with the owner, maps the registration to load,
//! store and run CPU atomics on it ([`Messenger::map_remote`]).

use abi_stable::std_types::{RResult, RSlice};
use fireopal_abi::btl::{Access, MemRegion, Rank, RemoteMapping};
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::wire::am::{decode_lane_keys, encode_lane_keys, DirectoryEntry};

use super::registrations::Held;
use super::{MemoryHandle, Messenger, SendError};

/// A peer's registration mapped into this process by
/// [`Messenger::map_remote`]; give it back with
/// [`Messenger::unmap_remote`].
#[derive(Debug)]
pub struct RemoteMap {
    module: usize,
    mapping: RemoteMapping,
}

impl RemoteMap {
    /// Where the mapped range starts in the peer's address space.
    pub fn remote_addr(&self) -> u64 {
        self.mapping.remote_addr
    }

    /// Where it is in this process.
    pub fn local(&self) -> MemRegion {
        self.mapping.local
    }
}

impl Messenger {
    /// Registers `region` on every open module, for RDMA by any peer, and
    /// returns a handle whose [`remote_key`](MemoryHandle::remote_key)
    /// names each module's registration. Peers turn it into the key of
    /// their route with [`remote_key_for`](Self::remote_key_for). A module
    /// that cannot register the memory (one without RDMA) is left out of
    /// the key, which may then name none: peers reach such memory by
    /// other means.
    pub fn expose_memory(
        &mut self,
        region: MemRegion,
        access: Access,
    ) -> Result<MemoryHandle, SendError> {
        let me = self.rank;
        let mut regs = Vec::new();
        for m in 0..self.slots.len() {
            if self.slots[m].closed.is_some() {
                continue;
            }
            if let Ok(reg) = self.register_on(m, me, region, access) {
                regs.push((m, reg));
            }
        }
        let key = encode_lane_keys(&self.key_entries(&regs)).map_err(|e| {
            SendError::Module(PluginError::invalid(format!(
                "the modules' remote keys do not fit one key: {e}"
            )))
        })?;
        self.registrations.exposed_change(&regs, true);
        Ok(MemoryHandle {
            held: Held::Lanes {
                regs,
                key,
                exposed: true,
            },
        })
    }

    /// The remote key to pass to [`put`](Self::put) and
    /// [`get`](Self::get) for `peer`'s memory, from the key `peer`
    /// published for it with [`expose_memory`](Self::expose_memory): the
    /// registration on the module this process's route to `peer` uses, or
    /// on each of its lanes. `None` if the key names none of them (or is
    /// not such a key).
    pub fn remote_key_for(&self, peer: Rank, exposed: &[u8]) -> Option<Vec<u8>> {
        let keys = decode_lane_keys(exposed)?;
        let route = self.shared.routes.get(peer as usize)?;
        let matching = |m: usize| {
            let slot = self.slots.get(m)?;
            keys.iter()
                .find(|k| k.component == slot.component && usize::from(k.index) == slot.index)
                .copied()
        };
        if route.sequenced {
            let lanes: Vec<DirectoryEntry<'_>> =
                route.modules.iter().filter_map(|&m| matching(m)).collect();
            match lanes.len() {
                0 => None,
                1 => Some(lanes[0].address.to_vec()),
                _ => encode_lane_keys(&lanes).ok(),
            }
        } else {
            matching(*route.modules.first()?).map(|k| k.address.to_vec())
        }
    }

    /// Maps `peer`'s registration named by `remote_key` (a key for this
    /// route, from [`remote_key_for`](Self::remote_key_for)) into this
    /// process, when the module of the route shares memory with the peer.
    /// `Ok(None)`: it does not (the caller goes through `put` and `get`).
    pub fn map_remote(
        &mut self,
        peer: Rank,
        remote_key: &[u8],
    ) -> Result<Option<RemoteMap>, SendError> {
        let m = self.module_for(peer)?;
        if decode_lane_keys(remote_key).is_some() {
            // Several lanes: none of them maps memory that another reaches
            // by messages.
            return Ok(None);
        }
        let slot = self.slot_mut(m)?;
        slot.active = true;
        match slot.module.map_remote(peer, RSlice::from_slice(remote_key)) {
            RResult::ROk(mapping) => Ok(Some(RemoteMap { module: m, mapping })),
            RResult::RErr(e) if e.kind == ErrorKind::UNSUPPORTED => Ok(None),
            RResult::RErr(e) => Err(SendError::Module(e)),
        }
    }

    /// Drops a mapping from [`map_remote`](Self::map_remote).
    pub fn unmap_remote(&mut self, map: RemoteMap) -> Result<(), SendError> {
        let slot = self.slot_mut(map.module)?;
        slot.module
            .unmap_remote(map.mapping.id)
            .into_result()
            .map_err(SendError::Module)
    }
}
