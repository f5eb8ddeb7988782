//! The home table of the registration cache: an open-addressed hash table
//! that finds a registration from its first page and transport.
//!
//! This module owns the front index a hit goes through before the interval
//! tree, and the word in which an indexed registration keeps its reference
//! count. Every registration in the tree has exactly one slot here, its
//! *home*, keyed by (first page of its region, transport). A slot carries
//! what a hit checks (region, transport, access) and the count it
//! increments, next to the value, so that a hit on a registration looked up
//! at its first page reads and writes one slot and nothing else. The table
//! is exact (it holds every indexed registration), not a cache of guesses;
//! lookups at other pages of a registration miss here and go to the tree.
//!
//! A slot's word packs, from the low bits: the reference count
//! ([`REFS_MASK`]), the transport, the access rights and a hit counter
//! ([`HIT_ONE`]), so that a hit is one atomic add on the line it has just
//! read. Only the count and the hits change while the slot is in the table.
//!
//! Slots are 32 bytes, two to a cache line. Linear probing with
//! backward-shift deletion keeps the table free of tombstones. The slot of a
//! key is chosen per block of [`BLOCK_PAGES`] pages by a multiplicative hash
//! of the block, plus the page's offset in the block, so that neighbouring
//! pages have neighbouring slots (address-order lookups stream through
//! memory) while blocks scatter over the table (random addresses spread
//! evenly). Blocks are kept small because runs of consecutive slots that
//! land on each other lengthen probe sequences: with 2^16-page blocks, 10^6
//! side-by-side registrations took 10 µs a lookup; 16 to 64 pages keep
//! them short, and 64 streams best in address order.
//!
//! Like the tree, the table never allocates by itself: it grows only through
//! [`HomeTable::adopt`], with storage the caller allocated before taking its
//! lock, and hands the old storage back for the caller to free after
//! releasing it.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use super::{Access, TransportId};

/// Mask of the reference count in a slot's word.
pub(crate) const REFS_MASK: u64 = (1 << 24) - 1;
/// Where the transport sits in a slot's word.
const TRANSPORT_SHIFT: u32 = 24;
/// Where the access rights sit in a slot's word.
const ACCESS_SHIFT: u32 = 40;
/// One hit in a slot's word (the top 16 bits count hits).
pub(crate) const HIT_ONE: u64 = 1 << 48;

/// A slot's word for a registration of `transport` with `access` and
/// `refs` references.
fn pack(transport: TransportId, access: Access, refs: u64) -> u64 {
    (refs & REFS_MASK)
        | (u64::from(transport.0) << TRANSPORT_SHIFT)
        | (u64::from(access.bits()) << ACCESS_SHIFT)
}

/// Whether a word names `transport` and rights containing `access`.
#[inline]
fn serves(word: u64, transport: TransportId, access: Access) -> bool {
    let t = (word >> TRANSPORT_SHIFT) as u16;
    let a = Access::from_bits((word >> ACCESS_SHIFT) as u8);
    t == transport.0 && a.contains(access)
}

/// Pages per hash block: the pages of one block have consecutive slots.
const BLOCK_PAGES: usize = 64;

/// One slot: a registration's region, its word (count, transport, access,
/// hits) and the value. Empty when `value` is `None`.
#[derive(Debug)]
#[repr(align(32))]
pub(crate) struct HomeSlot<T> {
    first: usize,
    last: usize,
    word: AtomicU64,
    value: Option<T>,
}

impl<T> HomeSlot<T> {
    fn empty() -> Self {
        HomeSlot {
            first: 0,
            last: 0,
            word: AtomicU64::new(0),
            value: None,
        }
    }

    fn transport(&self) -> TransportId {
        TransportId((self.word.load(Ordering::Relaxed) >> TRANSPORT_SHIFT) as u16)
    }
}

/// A value found in the table with the word that counts its references.
pub(crate) struct Found<'a, T> {
    /// The slot's word; add `1 + HIT_ONE` for a hit.
    pub(crate) word: &'a AtomicU64,
    /// The value.
    pub(crate) value: &'a T,
}

/// Storage of a [`HomeTable`], allocated by the caller outside its lock.
pub(crate) type HomeStorage<T> = Vec<HomeSlot<T>>;

/// Open-addressed table of values keyed by (first page, transport).
#[derive(Debug)]
pub(crate) struct HomeTable<T> {
    slots: Vec<HomeSlot<T>>,
    len: usize,
    page_shift: u32,
}

impl<T> HomeTable<T> {
    /// An empty table with no storage, for pages of `1 << page_shift`
    /// bytes.
    pub(crate) const fn new(page_shift: u32) -> Self {
        Self {
            slots: Vec::new(),
            len: 0,
            page_shift,
        }
    }

    /// Empty storage of `slots` slots (rounded up to a power of two). This
    /// allocates: call it with no lock held.
    pub(crate) fn new_storage(slots: usize) -> HomeStorage<T> {
        let mut v = Vec::new();
        v.resize_with(slots.max(2).next_power_of_two(), HomeSlot::empty);
        v
    }

    /// Values in the table.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Slots of the storage.
    #[cfg(test)]
    pub(crate) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Whether `extra` more values fit while keeping the table at most half
    /// full (short probe sequences).
    pub(crate) fn has_room_for(&self, extra: usize) -> bool {
        self.len.saturating_add(extra).saturating_mul(2) <= self.slots.len()
    }

    /// Where probing for (`first`'s page, `transport`) starts.
    #[inline]
    fn start(&self, first: usize, transport: TransportId) -> usize {
        let page = first >> self.page_shift;
        let block = (page / BLOCK_PAGES) as u64 ^ (u64::from(transport.0) << 48);
        let mut h = block.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h ^= h >> 29;
        (h as usize).wrapping_add(page % BLOCK_PAGES) & self.slots.len().wrapping_sub(1)
    }

    /// Moves every value into `storage` if it is larger (and empty), and
    /// returns the storage no longer used, for the caller to drop with no
    /// lock held. Neither allocates nor frees.
    pub(crate) fn adopt(&mut self, storage: HomeStorage<T>) -> HomeStorage<T> {
        if storage.len() <= self.slots.len() || !storage.len().is_power_of_two() {
            return storage;
        }
        let old = core::mem::replace(&mut self.slots, storage);
        self.len = 0;
        let mut old = old;
        for slot in old.iter_mut() {
            if let Some(value) = slot.value.take() {
                // The new storage is larger than the old, so there is room.
                let _ = self.insert_word(slot.first, slot.last, *slot.word.get_mut(), value);
            }
        }
        old
    }

    /// Adds a value for a registration of `[first, last]` holding `refs`
    /// references. Gives the value back when the table is full (it never
    /// grows by itself).
    pub(crate) fn insert(
        &mut self,
        first: usize,
        last: usize,
        transport: TransportId,
        access: Access,
        refs: u64,
        value: T,
    ) -> Result<(), T> {
        if !self.has_room_for(1) {
            return Err(value);
        }
        self.insert_word(first, last, pack(transport, access, refs), value)
    }

    fn insert_word(&mut self, first: usize, last: usize, word: u64, value: T) -> Result<(), T> {
        let transport = TransportId((word >> TRANSPORT_SHIFT) as u16);
        let mask = self.slots.len().wrapping_sub(1);
        let mut i = self.start(first, transport);
        for _ in 0..self.slots.len() {
            match self.slots.get_mut(i) {
                Some(slot) if slot.value.is_none() => {
                    *slot = HomeSlot {
                        first,
                        last,
                        word: AtomicU64::new(word),
                        value: Some(value),
                    };
                    self.len += 1;
                    return Ok(());
                }
                _ => i = (i + 1) & mask,
            }
        }
        Err(value)
    }

    /// A value whose registration starts in `first`'s page, is of
    /// `transport`, covers `[first, last]` and has at least `access`.
    #[inline]
    pub(crate) fn find(
        &self,
        first: usize,
        last: usize,
        transport: TransportId,
        access: Access,
    ) -> Option<Found<'_, T>> {
        self.probe(first, transport, |slot, _| {
            slot.first <= first
                && last <= slot.last
                && serves(slot.word.load(Ordering::Relaxed), transport, access)
        })
    }

    /// The slot of the value `is_it` picks among those of registrations
    /// starting at `first` with `transport`.
    pub(crate) fn locate(
        &self,
        first: usize,
        transport: TransportId,
        mut is_it: impl FnMut(&T) -> bool,
    ) -> Option<Found<'_, T>> {
        self.probe(first, transport, |slot, value| {
            slot.first == first && slot.transport() == transport && is_it(value)
        })
    }

    /// The first slot `pick` accepts, probing from the home of (`first`,
    /// `transport`) up to the first empty slot.
    #[inline(always)]
    fn probe(
        &self,
        first: usize,
        transport: TransportId,
        mut pick: impl FnMut(&HomeSlot<T>, &T) -> bool,
    ) -> Option<Found<'_, T>> {
        let mask = self.slots.len().wrapping_sub(1);
        let mut i = self.start(first, transport);
        for _ in 0..self.slots.len() {
            let slot = self.slots.get(i)?;
            let value = slot.value.as_ref()?;
            if pick(slot, value) {
                return Some(Found {
                    word: &slot.word,
                    value,
                });
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// Takes out the value `is_it` picks among those of registrations
    /// starting at `first` with `transport`, with the last value of its
    /// word. Neither allocates nor frees (the value is handed back).
    pub(crate) fn remove(
        &mut self,
        first: usize,
        transport: TransportId,
        mut is_it: impl FnMut(&T) -> bool,
    ) -> Option<(u64, T)> {
        let mask = self.slots.len().wrapping_sub(1);
        let mut i = self.start(first, transport);
        let mut found = None;
        for _ in 0..self.slots.len() {
            let slot = self.slots.get(i)?;
            let value = slot.value.as_ref()?;
            if slot.first == first && slot.transport() == transport && is_it(value) {
                found = Some(i);
                break;
            }
            i = (i + 1) & mask;
        }
        let mut hole = found?;
        let emptied = self.slots.get_mut(hole)?;
        let word = *emptied.word.get_mut();
        let value = emptied.value.take()?;
        self.len -= 1;
        // Backward shift: pull later members of the probe run into the hole
        // when their start position allows it, so no tombstone is needed.
        let mut j = (hole + 1) & mask;
        for _ in 0..self.slots.len() {
            let Some(slot) = self.slots.get(j) else {
                break;
            };
            if slot.value.is_none() {
                break;
            }
            let home = self.start(slot.first, slot.transport());
            // Distance from the slot's start to `j` and to the hole.
            let to_j = j.wrapping_sub(home) & mask;
            let to_hole = hole.wrapping_sub(home) & mask;
            if to_hole < to_j {
                self.slots.swap(hole, j);
                hole = j;
            }
            j = (j + 1) & mask;
        }
        Some((word, value))
    }

    /// Calls `visit` on every value with the current value of its word
    /// (table order).
    pub(crate) fn for_each(&self, mut visit: impl FnMut(u64, &T)) {
        for slot in &self.slots {
            if let Some(v) = slot.value.as_ref() {
                visit(slot.word.load(Ordering::Relaxed), v);
            }
        }
    }
}

/// References counted in a slot's word.
pub(crate) const fn refs_of(word: u64) -> u64 {
    word & REFS_MASK
}

/// Hits counted in a slot's word.
pub(crate) const fn hits_of(word: u64) -> u64 {
    word / HIT_ONE
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    const T0: TransportId = TransportId(0);
    const T1: TransportId = TransportId(1);
    const RR: Access = Access::REMOTE_READ;

    fn table(slots: usize) -> HomeTable<u32> {
        let mut t = HomeTable::new(12);
        let old = t.adopt(HomeTable::new_storage(slots));
        assert!(old.is_empty());
        t
    }

    #[test]
    fn finds_by_first_page_transport_and_access() {
        let mut t = table(16);
        t.insert(0x1000, 0x2fff, T0, RR, 1, 1).expect("room");
        t.insert(0x1000, 0x1fff, T1, Access::LOCAL_READ, 0, 2)
            .expect("room");
        let found = t.find(0x1010, 0x2000, T0, RR).expect("hit");
        assert_eq!(*found.value, 1);
        assert_eq!(refs_of(found.word.load(Ordering::Relaxed)), 1);
        let found = t.find(0x1010, 0x1020, T1, Access::LOCAL_READ).expect("hit");
        assert_eq!(*found.value, 2);
        // A hit's add leaves transport and access as they were.
        found.word.fetch_add(1 + HIT_ONE, Ordering::Relaxed);
        assert!(t.find(0x1010, 0x1020, T1, Access::LOCAL_READ).is_some());
        // Other transport, too little access, not covered, other page.
        assert!(t.find(0x1010, 0x2000, T1, Access::LOCAL_READ).is_none());
        assert!(t.find(0x1010, 0x1020, T1, RR).is_none());
        assert!(t.find(0x1010, 0x3000, T0, RR).is_none());
        assert!(t.find(0x2010, 0x2020, T0, RR).is_none());
        let (word, value) = t.remove(0x1000, T1, |v| *v == 2).expect("there");
        assert_eq!((refs_of(word), hits_of(word), value), (1, 1, 2));
    }

    #[test]
    fn stays_at_most_half_full_and_grows_by_adoption() {
        let mut t = table(4);
        t.insert(0x1000, 0x1fff, T0, RR, 0, 1).expect("room");
        t.insert(0x2000, 0x2fff, T0, RR, 0, 2).expect("room");
        assert_eq!(t.insert(0x3000, 0x3fff, T0, RR, 0, 3), Err(3));
        let old = t.adopt(HomeTable::new_storage(8));
        assert_eq!(old.len(), 4);
        assert!(old.iter().all(|s| s.value.is_none()));
        t.insert(0x3000, 0x3fff, T0, RR, 0, 3).expect("room");
        assert_eq!(t.len(), 3);
        assert_eq!(t.find(0x1000, 0x1000, T0, RR).map(|f| *f.value), Some(1));
        assert_eq!(t.find(0x3000, 0x3000, T0, RR).map(|f| *f.value), Some(3));
    }

    #[test]
    fn top_of_address_space() {
        let mut t = table(8);
        t.insert(usize::MAX - 0xfff, usize::MAX, T0, RR, 0, 7)
            .expect("room");
        assert_eq!(
            t.find(usize::MAX, usize::MAX, T0, RR).map(|f| *f.value),
            Some(7)
        );
        assert_eq!(
            t.remove(usize::MAX - 0xfff, T0, |v| *v == 7).map(|x| x.1),
            Some(7)
        );
        assert_eq!(t.len(), 0);
    }

    proptest! {
        /// Against a list, with few pages so that probe runs collide and
        /// wrap around the end of the table.
        #[test]
        fn matches_a_list(ops in proptest::collection::vec((0usize..40, 0u16..2, any::<bool>()), 1..300)) {
            let mut t = table(8);
            let mut model: Vec<(usize, TransportId, u32)> = Vec::new();
            let mut next = 0u32;
            for (page, tr, add) in ops {
                let first = page << 12;
                let tr = TransportId(tr);
                if add {
                    if !t.has_room_for(1) {
                        let bigger = HomeTable::new_storage(t.slot_count() * 2);
                        drop(t.adopt(bigger));
                    }
                    t.insert(first, first + 0xfff, tr, RR, u64::from(next % 3), next).expect("room made");
                    model.push((first, tr, next));
                    next += 1;
                } else if let Some(k) = model.iter().position(|m| m.0 == first && m.1 == tr) {
                    let (_, _, v) = model.swap_remove(k);
                    prop_assert_eq!(t.remove(first, tr, |x| *x == v), Some((pack(tr, RR, u64::from(v % 3)), v)));
                } else {
                    prop_assert!(t.remove(first, tr, |_| true).is_none());
                }
                prop_assert_eq!(t.len(), model.len());
                for m in &model {
                    prop_assert!(t.find(m.0 + 8, m.0 + 16, m.1, RR).is_some());
                    let found = t.locate(m.0, m.1, |x| *x == m.2).map(|f| *f.value);
                    prop_assert_eq!(found, Some(m.2));
                }
                let mut all = Vec::new();
                t.for_each(|_, v| all.push(*v));
                all.sort_unstable();
                let mut want: Vec<u32> = model.iter().map(|m| m.2).collect();
                want.sort_unstable();
                prop_assert_eq!(all, want);
            }
        }
    }
}
