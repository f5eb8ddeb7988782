//! [`ReqTable`]: the requests of an endpoint, in a slab. A request's id
//! is its slot and the slot's generation, so an id that outlived its
//! request (a late FIN, a dropped handle) finds nothing rather than the
//! slot's next request, and no lookup hashes.
//!
//! The receive of a blocking `recv` is parked apart, under [`PARKED`]:
//! the commonest request takes no slot, and the wait for it looks in one
//! place. It moves into a slot, with an id of its own, when it meets a
//! rendezvous, whose messages name the receive on the wire; the waiter
//! follows it there ([`ReqTable::resolve`]). A parked receive never has a
//! rendezvous, so a peer's message that names id 0 finds nothing it
//! accepts.

use std::any::Any;

use super::protocol::{RecvTarget, Req, ReqId, ReqState};
use super::{P2pError, Status};

#[derive(Default)]
struct Slot {
    generation: u32,
    req: Option<Req>,
}

/// A completed request's result, as the table keeps it.
type Done = Result<Status, Box<P2pError>>;

/// The id of the parked receive; no slot's id (those are never 0).
pub(crate) const PARKED: ReqId = 0;

/// Requests by id.
#[derive(Default)]
pub(crate) struct ReqTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    parked: Option<Req>,
    /// The id the parked receive moved to, or `PARKED` while it has not.
    moved: ReqId,
}

fn split(id: ReqId) -> (usize, u32) {
    ((id & 0xFFFF_FFFF) as usize, (id >> 32) as u32)
}

/// Empties `slot`. A receive that owns nothing (its buffer borrowed or
/// handed back, no rendezvous, no boxed error), the commonest request
/// once it is over, is let go without its drop glue, which would look
/// at every field on every message. The pattern names every field, so
/// that a field added to a request is considered here.
#[inline]
fn clear(slot: &mut Option<Req>) {
    let owns_nothing = matches!(
        slot,
        Some(Req {
            state: ReqState::Recv {
                target: RecvTarget {
                    ptr: _,
                    cap: _,
                    owned: None,
                },
                post: _,
                rndv: None,
            },
            done: None | Some(Ok(_)),
            detached: _,
        })
    );
    if owns_nothing {
        std::mem::forget(slot.take());
    } else {
        *slot = None;
    }
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

    /// [`PARKED`] if no receive is parked, for a blocking receive to
    /// [`fill`](Self::fill); else an id as [`reserve`](Self::reserve)
    /// gives.
    pub(crate) fn reserve_parked(&mut self) -> ReqId {
        if self.parked.is_some() {
            return self.reserve();
        }
        self.moved = PARKED;
        PARKED
    }

    /// Moves the parked receive into a slot and returns its new id, which
    /// [`resolve`](Self::resolve) gives for [`PARKED`] from now on; `None`
    /// if nothing is parked.
    pub(crate) fn unpark(&mut self) -> Option<ReqId> {
        let req = self.parked.take()?;
        let id = self.insert(req);
        self.moved = id;
        Some(id)
    }

    /// The id under which the request the caller knows as `id` is now:
    /// `id` itself, except for a parked receive that moved.
    pub(crate) fn resolve(&self, id: ReqId) -> ReqId {
        if id == PARKED && self.parked.is_none() && self.moved != PARKED {
            self.moved
        } else {
            id
        }
    }

    /// Stores `req` under the id [`reserve`](Self::reserve) or
    /// [`reserve_parked`](Self::reserve_parked) gave.
    pub(crate) fn fill(&mut self, id: ReqId, req: Req) {
        if id == PARKED {
            self.parked = Some(req);
            return;
        }
        let (index, generation) = split(id);
        if let Some(slot) = self.slots.get_mut(index) {
            if slot.generation == generation {
                slot.req = Some(req);
            }
        }
    }

    #[inline]
    pub(crate) fn get(&self, id: &ReqId) -> Option<&Req> {
        if *id == PARKED {
            return self.parked.as_ref();
        }
        let (index, generation) = split(*id);
        let slot = self.slots.get(index)?;
        (slot.generation == generation).then_some(slot.req.as_ref()?)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: &ReqId) -> Option<&mut Req> {
        if *id == PARKED {
            return self.parked.as_mut();
        }
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
        if *id == PARKED {
            clear(&mut self.parked);
            return;
        }
        if *id == self.moved {
            self.moved = PARKED;
        }
        let (index, generation) = split(*id);
        let Some(slot) = self.slots.get_mut(index) else {
            return;
        };
        if slot.generation == generation && slot.req.is_some() {
            clear(&mut slot.req);
            self.free.push(index as u32);
        }
    }

    /// Takes the result of request `id` out, and the request with it,
    /// if it has completed: the blocking wait's look, whose parked receive
    /// owns no buffer. (Through [`take_finished`](Self::take_finished)
    /// the blocking receive's path counts about 20 instructions more.)
    #[inline]
    pub(crate) fn take_done(&mut self, id: &ReqId) -> Option<Result<Status, Box<P2pError>>> {
        if *id == PARKED {
            let done = self.parked.as_mut()?.done.take()?;
            clear(&mut self.parked);
            return Some(done);
        }
        if *id == self.moved {
            self.moved = PARKED;
        }
        let (index, generation) = split(*id);
        let slot = self.slots.get_mut(index)?;
        if slot.generation != generation {
            return None;
        }
        let done = slot.req.as_mut()?.done.take()?;
        clear(&mut slot.req);
        self.free.push(index as u32);
        Some(done)
    }

    /// Takes a completed request out with one look at its slot: its
    /// result and the buffer it owned (a non-blocking call's).
    #[inline]
    pub(crate) fn take_finished(&mut self, id: &ReqId) -> Option<(Done, Option<Box<dyn Any>>)> {
        let (slot, index) = if *id == PARKED {
            (&mut self.parked, None)
        } else {
            let (index, generation) = split(*id);
            let slot = self.slots.get_mut(index)?;
            if slot.generation != generation {
                return None;
            }
            (&mut slot.req, Some(index))
        };
        let req = slot.as_mut()?;
        let done = req.done.take()?;
        let owned = match &mut req.state {
            ReqState::Recv { target, .. } => target.owned.take(),
            ReqState::Send(out) => out.owned.take(),
        };
        clear(slot);
        if let Some(index) = index {
            if *id == self.moved {
                self.moved = PARKED;
            }
            self.free.push(index as u32);
        }
        Some((done, owned))
    }

    /// Every request with its id.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (ReqId, &Req)> {
        let parked = self.parked.as_ref().map(|r| (PARKED, r));
        parked
            .into_iter()
            .chain(self.slots.iter().enumerate().filter_map(|(i, s)| {
                s.req
                    .as_ref()
                    .map(|r| (u64::from(s.generation) << 32 | i as u64, r))
            }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receive() -> Req {
        Req {
            state: ReqState::Recv {
                target: RecvTarget {
                    ptr: std::ptr::null_mut(),
                    cap: 0,
                    owned: None,
                },
                post: None,
                rndv: None,
            },
            done: None,
            detached: false,
        }
    }

    #[test]
    fn a_parked_receive_takes_no_slot_until_it_moves() {
        let mut table = ReqTable::default();
        let id = table.reserve_parked();
        assert_eq!(id, PARKED);
        table.fill(id, receive());
        assert!(table.slots.is_empty(), "no slot for the parked receive");
        assert_eq!(table.take_done(&id).map(|_| ()), None, "not done yet");
        assert!(table.get(&PARKED).is_some());
        // A second blocking receive while one is parked takes a slot.
        let other = table.reserve_parked();
        assert_ne!(other, PARKED);
        table.fill(other, receive());
        table.remove(&other);

        // It moves when it needs an id of its own; the waiter follows.
        let moved = table.unpark().expect("parked");
        assert_ne!(moved, PARKED);
        assert_eq!(table.resolve(PARKED), moved);
        assert!(table.get(&PARKED).is_none(), "id 0 names nothing now");
        if let Some(req) = table.get_mut(&moved) {
            req.done = Some(Ok(Status::default()));
        }
        assert!(table.take_done(&table.resolve(PARKED)).is_some());
        assert_eq!(table.resolve(PARKED), PARKED, "forgotten once taken");
        assert!(table.iter().next().is_none());

        // Parked and done, it is taken in place.
        let id = table.reserve_parked();
        table.fill(id, receive());
        assert_eq!(table.iter().map(|(i, _)| i).collect::<Vec<_>>(), [PARKED]);
        if let Some(req) = table.get_mut(&id) {
            req.done = Some(Ok(Status::default()));
        }
        assert!(table.take_done(&id).is_some());
        assert!(table.get(&PARKED).is_none());
    }

    #[test]
    fn clearing_a_request_drops_what_it_owns() {
        let buffer = std::rc::Rc::new(());
        let mut table = ReqTable::default();
        let mut owning = receive();
        if let ReqState::Recv { target, .. } = &mut owning.state {
            target.owned = Some(Box::new(std::rc::Rc::clone(&buffer)));
        }
        let id = table.insert(owning);
        table.remove(&id);
        assert_eq!(std::rc::Rc::strong_count(&buffer), 1, "removed, dropped");

        let mut owning = receive();
        if let ReqState::Recv { target, .. } = &mut owning.state {
            target.owned = Some(Box::new(std::rc::Rc::clone(&buffer)));
        }
        owning.done = Some(Ok(Status::default()));
        let id = table.reserve_parked();
        table.fill(id, owning);
        assert!(table.take_done(&id).is_some());
        assert_eq!(std::rc::Rc::strong_count(&buffer), 1, "taken, dropped");
        assert!(table.get(&PARKED).is_none());
    }

    #[test]
    fn take_finished_hands_out_the_result_and_the_owned_buffer_once() {
        let mut table = ReqTable::default();
        let mut req = receive();
        if let ReqState::Recv { target, .. } = &mut req.state {
            target.owned = Some(Box::new(7u32));
        }
        let id = table.insert(req);
        assert!(table.take_finished(&id).is_none(), "not done yet");
        if let Some(r) = table.get_mut(&id) {
            r.done = Some(Ok(Status::default()));
        }
        let (done, owned) = table.take_finished(&id).expect("done");
        assert!(done.is_ok());
        assert_eq!(
            owned.and_then(|b| b.downcast::<u32>().ok()).map(|b| *b),
            Some(7)
        );
        assert!(table.take_finished(&id).is_none(), "taken once");
        assert!(table.get(&id).is_none());
        // The slot is free again, under a new generation.
        let next = table.insert(receive());
        assert_ne!(next, id);
        assert_eq!(next & 0xFFFF_FFFF, id & 0xFFFF_FFFF);
    }
}
