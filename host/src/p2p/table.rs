//! [`ReqTable`]: the requests of an endpoint, in a slab. A request's id
//! is its slot and the slot's generation, so an id that outlived its
//! request (a late FIN, a dropped handle) finds nothing rather than the
//! slot's next request, and no lookup hashes.

use super::protocol::{Req, ReqId};
use super::{P2pError, Status};

#[derive(Default)]
struct Slot {
    generation: u32,
    req: Option<Req>,
}

/// Requests by id.
#[derive(Default)]
pub(crate) struct ReqTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

fn split(id: ReqId) -> (usize, u32) {
    ((id & 0xFFFF_FFFF) as usize, (id >> 32) as u32)
}

impl ReqTable {
    /// Stores `req` and returns its id (never 0).
    pub(crate) fn insert(&mut self, req: Req) -> ReqId {
        let id = self.reserve();
        self.fill(id, req);
        id
    }

    /// The id the next request will have, its slot taken but empty until
    /// [`fill`](Self::fill): for a request that must name its id before
    /// it is built (a receive posted to matching).
    pub(crate) fn reserve(&mut self) -> ReqId {
        let index = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                self.slots.push(Slot::default());
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[index];
        // Generations start at 1, so that no id is 0.
        slot.generation = slot.generation.wrapping_add(1).max(1);
        u64::from(slot.generation) << 32 | index as u64
    }

    /// Stores `req` under the id [`reserve`](Self::reserve) gave.
    pub(crate) fn fill(&mut self, id: ReqId, req: Req) {
        let (index, generation) = split(id);
        if let Some(slot) = self.slots.get_mut(index) {
            if slot.generation == generation {
                slot.req = Some(req);
            }
        }
    }

    pub(crate) fn get(&self, id: &ReqId) -> Option<&Req> {
        let (index, generation) = split(*id);
        let slot = self.slots.get(index)?;
        (slot.generation == generation).then_some(slot.req.as_ref()?)
    }

    pub(crate) fn get_mut(&mut self, id: &ReqId) -> Option<&mut Req> {
        let (index, generation) = split(*id);
        let slot = self.slots.get_mut(index)?;
        if slot.generation != generation {
            return None;
        }
        slot.req.as_mut()
    }

    /// Drops request `id` where it lies (a request is large: moving it
    /// out costs more than the few fields a caller wants from it).
    pub(crate) fn remove(&mut self, id: &ReqId) {
        let (index, generation) = split(*id);
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        if slot.generation == generation && slot.req.is_some() {
            slot.req = None;
            self.free.push(index as u32);
        }
    }

    /// Takes the result of request `id` out, and the request with it,
    /// if it has completed.
    pub(crate) fn take_done(&mut self, id: &ReqId) -> Option<Result<Status, Box<P2pError>>> {
        let (index, generation) = split(*id);
        let slot = self.slots.get_mut(index)?;
        if slot.generation != generation {
            return None;
        }
        let done = slot.req.as_mut()?.done.take()?;
        slot.req = None;
        self.free.push(index as u32);
        Some(done)
    }

    /// Every request with its id.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (ReqId, &Req)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            s.req
                .as_ref()
                .map(|r| (u64::from(s.generation) << 32 | i as u64, r))
        })
    }
}
