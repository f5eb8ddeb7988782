//! One-sided operations through the messenger, striped over a route's
//! lanes when the remote key names several modules' registrations.

use abi_stable::std_types::RSlice;
use fireopal_abi::btl::{BtlFlags, Completion, MemRegion, Rank, RdmaOp};
use fireopal_abi::PluginError;
use fireopal_core::wire::am::{decode_lane_keys, DirectoryEntry};

use std::rc::Rc;

use super::lanes::stripe;
use super::{
    complete_part, Class, MemoryHandle, Messenger, SendError, SendId, SendTicket,
    FIRST_RESERVED_TAG,
};

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
        if tag >= FIRST_RESERVED_TAG {
            return Err(SendError::ReservedTag(tag));
        }
        self.sendi_layer(peer, tag, header, payload)
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
        let op = Rdma {
            write,
            peer,
            local,
            local_handle,
            remote_addr,
        };
        let started = self.rdma_on_route(class, &op, remote_key);
        self.fail_peer_on_refusal(peer, started)
    }

    /// [`rdma`](Self::rdma) on the route to `op`'s peer, as its modules
    /// answer.
    fn rdma_on_route(
        &mut self,
        class: Class,
        op: &Rdma<'_>,
        remote_key: &[u8],
    ) -> Result<SendTicket, SendError> {
        let Rdma {
            write,
            peer,
            local,
            local_handle,
            remote_addr,
        } = *op;
        let i = self.module_for(peer)?;
        if self.shared.routes[peer as usize].sequenced {
            if let Some(keys) = decode_lane_keys(remote_key) {
                let lanes = self.lanes_of(peer, &keys);
                return self.rdma_striped(class, op, &lanes);
            }
        }
        if local.len() > frag_limit(self.slots[i].attrs.rdma_pipeline_frag_size) {
            // Larger than the module moves in one operation: in fragments.
            return self.rdma_striped(class, op, &[(i, remote_key.to_vec())]);
        }
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

    /// This process's modules to `peer` that a lane key set names: the
    /// module of the same component and index as each of the peer's, with
    /// the peer's key, in the route's order.
    fn lanes_of(&self, peer: Rank, keys: &[DirectoryEntry<'_>]) -> Vec<(usize, Vec<u8>)> {
        self.shared.routes[peer as usize]
            .modules
            .iter()
            .filter_map(|&m| {
                let slot = self.slots.get(m)?;
                let key = keys.iter().find(|k| {
                    k.component == slot.component && usize::from(k.index) == slot.index
                })?;
                Some((m, key.address.to_vec()))
            })
            .collect()
    }

    /// One RDMA operation striped over `lanes` (module, the peer's key
    /// there): each lane's share of the bytes in proportion to its
    /// bandwidth, no share under `bml_stripe_min`, over the lanes that
    /// allow striping (`BtlFlags::STRIPE`; the first lane alone if fewer
    /// than two do), and no piece larger than a lane's
    /// `rdma_pipeline_frag_size`.
    fn rdma_striped(
        &mut self,
        class: Class,
        op: &Rdma<'_>,
        lanes: &[(usize, Vec<u8>)],
    ) -> Result<SendTicket, SendError> {
        if lanes.is_empty() {
            return Err(SendError::Module(PluginError::invalid(
                "remote key names no module that reaches the peer",
            )));
        }
        let striping: Vec<(usize, Vec<u8>)> = lanes
            .iter()
            .filter(|(m, _)| self.slots[*m].attrs.flags.contains(BtlFlags::STRIPE))
            .cloned()
            .collect();
        let lanes = if striping.len() >= 2 {
            &striping[..]
        } else {
            &lanes[..1]
        };
        let len = op.local.len();
        let weights: Vec<u64> = lanes
            .iter()
            .map(|&(m, _)| u64::from(self.slots[m].attrs.bandwidth_mbps.max(1)))
            .collect();
        let room = lanes
            .iter()
            .map(|&(m, _)| frag_limit(self.slots[m].attrs.rdma_pipeline_frag_size))
            .min()
            .unwrap_or(usize::MAX);
        let pieces = if lanes.len() < 2 || self.stripe_min == 0 || len < 2 * self.stripe_min {
            stripe(len, &weights[..1], 1, room)
        } else {
            stripe(len, &weights, self.stripe_min, room)
        };
        let id = self.next_id(class);
        // On a route of several lanes, a piece whose lane is lost goes
        // again on another (`replay`): every lane's key is kept with it.
        let retry: Option<Rc<[PieceLane]>> =
            (self.shared.routes[op.peer as usize].sequenced && lanes.len() >= 2).then(|| {
                lanes
                    .iter()
                    .map(|(m, key)| PieceLane {
                        module: *m,
                        key: key.clone(),
                        local_registration: op.local_handle.map_or(u64::MAX, |h| h.id_on(*m)),
                    })
                    .collect()
            });
        let mut parts = 0usize;
        let mut offset = 0usize;
        for (k, &(lane, n)) in pieces.iter().enumerate() {
            let (m, key) = &lanes[lane];
            // SAFETY: `offset + n <= len`: a part of the caller's region,
            // which is valid as `MemRegion`'s contract says.
            #[allow(unsafe_code)]
            let local = unsafe { MemRegion::new(op.local.as_ptr().add(offset), n) };
            let cookie = self.next_cookie;
            let rdma = RdmaOp {
                peer: op.peer,
                local,
                local_registration: op.local_handle.map_or(u64::MAX, |h| h.id_on(*m)),
                remote_addr: op.remote_addr + offset as u64,
                remote_key: RSlice::from_slice(key),
                cookie,
            };
            let slot = self.slot_mut(*m)?;
            slot.active = true;
            let started = if op.write {
                slot.module.put(rdma)
            } else {
                slot.module.get(rdma)
            };
            match started.into_result() {
                Ok(Completion::Done) => {}
                Ok(Completion::Pending) => {
                    self.next_cookie += 1;
                    self.shared.cookies.insert(cookie, (id, *m));
                    if let Some(lanes) = &retry {
                        self.shared.lane_state.rdma_pieces.insert(
                            cookie,
                            RdmaPiece {
                                id,
                                write: op.write,
                                peer: op.peer,
                                local,
                                remote_addr: op.remote_addr + offset as u64,
                                lanes: Rc::clone(lanes),
                            },
                        );
                    }
                    parts += 1;
                }
                Err(e) if k == 0 => return Err(SendError::Module(e)),
                Err(e) => {
                    // The pieces already started complete on their own;
                    // the operation fails with this error once they have.
                    let error = SendError::Module(e);
                    if parts == 0 {
                        return Err(error);
                    }
                    return Ok(self.await_parts(id, parts, Some(error)));
                }
            }
            offset += n;
        }
        Ok(self.await_parts(id, parts, None))
    }
}

/// The most bytes a module moves in one RDMA operation, from its
/// `rdma_pipeline_frag_size` (0: no limit).
fn frag_limit(frag_size: u64) -> usize {
    match frag_size {
        0 => usize::MAX,
        n => usize::try_from(n).unwrap_or(usize::MAX),
    }
}

/// A lane a piece of a striped RDMA operation may go on.
#[derive(Debug)]
pub(super) struct PieceLane {
    module: usize,
    /// The peer's key of the registration there.
    key: Vec<u8>,
    /// This process's registration of the local bytes there.
    local_registration: u64,
}

/// A piece of a striped RDMA operation in flight, kept so that it can go
/// again on another lane if its own is lost.
#[derive(Debug)]
pub(super) struct RdmaPiece {
    /// The operation it is part of.
    id: SendId,
    write: bool,
    pub(super) peer: Rank,
    local: MemRegion,
    remote_addr: u64,
    lanes: Rc<[PieceLane]>,
}

impl Messenger {
    /// Starts `piece` again on a lane still open to its peer, other than
    /// `lost`; if none is, or the lane refuses, the operation it belongs
    /// to ends with `error`.
    pub(super) fn retry_piece(&mut self, piece: RdmaPiece, lost: usize, error: SendError) {
        let open = &self.shared.routes[piece.peer as usize].modules;
        let failed = self.shared.routes[piece.peer as usize].failed.is_some();
        let lane = piece
            .lanes
            .iter()
            .find(|l| l.module != lost && open.contains(&l.module));
        let Some(lane) = lane.filter(|_| !failed) else {
            return complete_part(
                &mut self.shared.outstanding,
                &mut self.shared.completions,
                piece.id,
                Err(error),
            );
        };
        let (m, cookie) = (lane.module, self.next_cookie);
        let rdma = RdmaOp {
            peer: piece.peer,
            local: piece.local,
            local_registration: lane.local_registration,
            remote_addr: piece.remote_addr,
            remote_key: RSlice::from_slice(&lane.key),
            cookie,
        };
        let started = match self.slot_mut(m) {
            Ok(slot) => {
                slot.active = true;
                let started = if piece.write {
                    slot.module.put(rdma)
                } else {
                    slot.module.get(rdma)
                };
                started.into_result().map_err(SendError::Module)
            }
            Err(e) => Err(e),
        };
        match started {
            Ok(Completion::Done) => {
                complete_part(
                    &mut self.shared.outstanding,
                    &mut self.shared.completions,
                    piece.id,
                    Ok(()),
                );
            }
            Ok(Completion::Pending) => {
                self.next_cookie += 1;
                self.shared.cookies.insert(cookie, (piece.id, m));
                self.shared.lane_state.rdma_pieces.insert(cookie, piece);
            }
            Err(e) => complete_part(
                &mut self.shared.outstanding,
                &mut self.shared.completions,
                piece.id,
                Err(e),
            ),
        }
    }
}

/// What an RDMA operation does, whichever modules carry it.
struct Rdma<'a> {
    write: bool,
    peer: Rank,
    local: MemRegion,
    local_handle: Option<&'a MemoryHandle>,
    remote_addr: u64,
}
