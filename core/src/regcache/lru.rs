//! The LRU list of the registration cache: a doubly linked list kept in a
//! slab, so that an item can be moved to the back or removed in `O(1)` by
//! the slot index its owner remembers.
//!
//! Items are linked by `u32` slot index; freed slots are reused. The list
//! only allocates when the slab grows (in [`LruList::push_back`]). A slot
//! index is only a claim: moving or removing an item names the slot *and*
//! checks that the item there is the one meant, so a stale index leaves the
//! list alone instead of unlinking a stranger.

use alloc::vec::Vec;

/// Slot index of "no item".
pub(crate) const NIL: u32 = u32::MAX;

#[derive(Debug)]
struct Link<T> {
    prev: u32,
    next: u32,
    /// `None` while the slot is free; `next` then links the free list.
    value: Option<T>,
}

/// Doubly linked list of `T` in a slab.
#[derive(Debug)]
pub(crate) struct LruList<T> {
    links: Vec<Link<T>>,
    head: u32,
    tail: u32,
    free: u32,
    len: usize,
}

impl<T> LruList<T> {
    /// An empty list.
    pub(crate) const fn new() -> Self {
        Self {
            links: Vec::new(),
            head: NIL,
            tail: NIL,
            free: NIL,
            len: 0,
        }
    }

    /// Items in the list.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn link(&self, slot: u32) -> Option<&Link<T>> {
        self.links.get(slot as usize).filter(|l| l.value.is_some())
    }

    fn set_prev(&mut self, slot: u32, prev: u32) {
        if let Some(l) = self.links.get_mut(slot as usize) {
            l.prev = prev;
        }
    }

    fn set_next(&mut self, slot: u32, next: u32) {
        if let Some(l) = self.links.get_mut(slot as usize) {
            l.next = next;
        }
    }

    /// Unlinks `slot` from its neighbours (it stays occupied).
    fn detach(&mut self, slot: u32) {
        let Some(l) = self.link(slot) else {
            return;
        };
        let (prev, next) = (l.prev, l.next);
        if prev == NIL {
            self.head = next;
        } else {
            self.set_next(prev, next);
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.set_prev(next, prev);
        }
    }

    /// Links an occupied, detached `slot` at the back.
    fn attach_back(&mut self, slot: u32) {
        let tail = self.tail;
        if let Some(l) = self.links.get_mut(slot as usize) {
            l.prev = tail;
            l.next = NIL;
        }
        if tail == NIL {
            self.head = slot;
        } else {
            self.set_next(tail, slot);
        }
        self.tail = slot;
    }

    /// Adds `value` at the back (most recently used) and returns its slot.
    /// `None` (and the value dropped) only if the slab is full (2^32 - 1
    /// items).
    pub(crate) fn push_back(&mut self, value: T) -> Option<u32> {
        let slot = if self.free != NIL {
            let slot = self.free;
            let l = self.links.get_mut(slot as usize)?;
            self.free = l.next;
            l.value = Some(value);
            slot
        } else {
            let slot = u32::try_from(self.links.len()).ok().filter(|&s| s != NIL)?;
            self.links.push(Link {
                prev: NIL,
                next: NIL,
                value: Some(value),
            });
            slot
        };
        self.attach_back(slot);
        self.len += 1;
        Some(slot)
    }

    /// Moves the item in `slot` to the back if `is_it` recognises it;
    /// false (and nothing moved) otherwise.
    pub(crate) fn move_to_back(&mut self, slot: u32, is_it: impl FnOnce(&T) -> bool) -> bool {
        if !self.holds(slot, is_it) {
            return false;
        }
        if self.tail != slot {
            self.detach(slot);
            self.attach_back(slot);
        }
        true
    }

    /// Whether `slot` holds an item that `is_it` recognises.
    fn holds(&self, slot: u32, is_it: impl FnOnce(&T) -> bool) -> bool {
        self.link(slot)
            .and_then(|l| l.value.as_ref())
            .is_some_and(is_it)
    }

    /// The front (least recently used) item and its slot.
    pub(crate) fn front(&self) -> Option<(u32, &T)> {
        let l = self.link(self.head)?;
        l.value.as_ref().map(|v| (self.head, v))
    }

    /// Removes the item in `slot` and hands it back, if `is_it` recognises
    /// it.
    pub(crate) fn remove(&mut self, slot: u32, is_it: impl FnOnce(&T) -> bool) -> Option<T> {
        if !self.holds(slot, is_it) {
            return None;
        }
        self.detach(slot);
        let free = self.free;
        let l = self.links.get_mut(slot as usize)?;
        l.next = free;
        l.prev = NIL;
        self.free = slot;
        self.len -= 1;
        l.value.take()
    }

    /// Moves every item for which `drop_it` is true into `out`, in list
    /// order.
    pub(crate) fn remove_where(&mut self, mut drop_it: impl FnMut(&T) -> bool, out: &mut Vec<T>) {
        let mut slot = self.head;
        // Bounded by the slab, so that even a broken link cannot loop.
        for _ in 0..self.links.len() {
            let Some(l) = self.link(slot) else {
                return;
            };
            let next = l.next;
            if l.value.as_ref().is_some_and(&mut drop_it) {
                if let Some(v) = self.remove(slot, |_| true) {
                    out.push(v);
                }
            }
            slot = next;
        }
    }

    /// Empties the list, handing back its storage (to be dropped by the
    /// caller, with no lock held).
    pub(crate) fn take_all(&mut self) -> Vec<T> {
        let links = core::mem::take(&mut self.links);
        *self = Self::new();
        links.into_iter().filter_map(|l| l.value).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;
    use std::vec::Vec;

    fn order(l: &LruList<u32>) -> Vec<u32> {
        let mut out = Vec::new();
        let mut slot = l.head;
        while let Some(link) = l.link(slot) {
            out.extend(link.value);
            slot = link.next;
        }
        out
    }

    #[test]
    fn push_move_remove() {
        let mut l = LruList::new();
        let s: Vec<u32> = (0..5).map(|v| l.push_back(v).expect("room")).collect();
        assert_eq!(order(&l), vec![0, 1, 2, 3, 4]);
        assert!(l.move_to_back(s[0], |&v| v == 0));
        assert!(l.move_to_back(s[2], |&v| v == 2));
        assert_eq!(order(&l), vec![1, 3, 4, 0, 2]);
        assert_eq!(l.front().map(|(_, v)| *v), Some(1));
        assert_eq!(l.remove(s[3], |&v| v == 3), Some(3));
        assert_eq!(l.remove(s[3], |_| true), None);
        assert_eq!(order(&l), vec![1, 4, 0, 2]);
        // A freed slot is reused.
        assert_eq!(l.push_back(9), Some(s[3]));
        let mut out = Vec::new();
        l.remove_where(|v| v % 2 == 0, &mut out);
        assert_eq!(out, vec![4, 0, 2]);
        assert_eq!(order(&l), vec![1, 9]);
        assert_eq!(l.len(), 2);
        // A slot index naming another item than the one meant changes
        // nothing.
        assert!(!l.move_to_back(s[1], |&v| v == 9));
        assert_eq!(l.remove(s[1], |&v| v == 9), None);
        assert_eq!(order(&l), vec![1, 9]);
        let mut all = l.take_all();
        all.sort_unstable();
        assert_eq!(all, vec![1, 9]);
        assert_eq!(l.len(), 0);
        assert!(l.front().is_none());
    }
}
