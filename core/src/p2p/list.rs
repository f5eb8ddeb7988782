//! Storage of the matching engine: a slab of nodes addressed by index, and
//! intrusive doubly linked FIFO lists threaded through those nodes, so that
//! a node sits in several lists at once and leaves any of them in O(1).
//!
//! A node carries `N` links; list `k` of a node uses its link `k`. The
//! lists hold indices only, never the nodes, so they can live in hash map
//! bins while the nodes live in one slab.

use alloc::vec::Vec;

/// The index no node has: the end of a list.
pub(super) const NIL: usize = usize::MAX;

/// One node's place in one list.
#[derive(Debug, Clone, Copy)]
pub(super) struct Link {
    prev: usize,
    next: usize,
}

impl Link {
    /// A link that is in no list.
    pub(super) const UNLINKED: Link = Link {
        prev: NIL,
        next: NIL,
    };
}

/// A node that can sit in `N` lists.
pub(super) trait Node<const N: usize> {
    /// The links of the node, one per list kind.
    fn links(&self) -> &[Link; N];
    /// The links of the node, to change.
    fn links_mut(&mut self) -> &mut [Link; N];
}

/// A FIFO list of slab indices, oldest at the head.
#[derive(Debug, Clone, Copy)]
pub(super) struct List {
    head: usize,
    tail: usize,
}

impl Default for List {
    fn default() -> Self {
        List {
            head: NIL,
            tail: NIL,
        }
    }
}

impl List {
    /// The oldest node, if any.
    pub(super) fn head(&self) -> Option<usize> {
        (self.head != NIL).then_some(self.head)
    }

    /// Whether the list holds no node.
    pub(super) fn is_empty(&self) -> bool {
        self.head == NIL
    }

    /// Appends node `idx` of `slab`, through its link `k`.
    pub(super) fn push_back<T: Node<N>, const N: usize>(
        &mut self,
        slab: &mut Slab<T>,
        idx: usize,
        k: usize,
    ) {
        let old_tail = self.tail;
        if let Some(link) = slab.link(idx, k) {
            *link = Link {
                prev: old_tail,
                next: NIL,
            };
        }
        if old_tail == NIL {
            self.head = idx;
        } else if let Some(link) = slab.link(old_tail, k) {
            link.next = idx;
        }
        self.tail = idx;
    }

    /// Takes node `idx` of `slab` out of this list, through its link `k`.
    /// The node must be in this list.
    pub(super) fn unlink<T: Node<N>, const N: usize>(
        &mut self,
        slab: &mut Slab<T>,
        idx: usize,
        k: usize,
    ) {
        let Some(link) = slab.link(idx, k) else {
            debug_assert!(false, "unlinking a free slot");
            return;
        };
        let link = core::mem::replace(link, Link::UNLINKED);
        self.detach(slab, link, k);
    }

    /// Takes a node out of this list whose link `k` was `link`: the node
    /// was in this list and has left `slab` already (its neighbours are
    /// still there).
    pub(super) fn detach<T: Node<N>, const N: usize>(
        &mut self,
        slab: &mut Slab<T>,
        link: Link,
        k: usize,
    ) {
        let Link { prev, next } = link;
        if prev == NIL {
            self.head = next;
        } else if let Some(l) = slab.link(prev, k) {
            l.next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else if let Some(l) = slab.link(next, k) {
            l.prev = prev;
        }
    }

    /// An iterator over the indices of the list, oldest first, through
    /// link `k`. The list must not change while it runs.
    pub(super) fn iter<'a, T: Node<N>, const N: usize>(
        &self,
        slab: &'a Slab<T>,
        k: usize,
    ) -> impl Iterator<Item = usize> + 'a {
        let mut cur = self.head;
        core::iter::from_fn(move || {
            if cur == NIL {
                return None;
            }
            let here = cur;
            cur = slab.next_of(here, k);
            Some(here)
        })
    }
}

/// Stores the node `make` builds from its links, appended to `lists[k]`
/// through its link `k`, and returns its index: one slab access for the
/// new node, however many lists it joins.
#[inline]
pub(super) fn push_new<T: Node<N>, const N: usize>(
    slab: &mut Slab<T>,
    mut lists: [&mut List; N],
    make: impl FnOnce([Link; N]) -> T,
) -> usize {
    let links = core::array::from_fn(|k| Link {
        prev: lists[k].tail,
        next: NIL,
    });
    let idx = slab.insert(make(links));
    for (k, list) in lists.iter_mut().enumerate() {
        if list.tail == NIL {
            list.head = idx;
        } else if let Some(l) = slab.link(list.tail, k) {
            l.next = idx;
        }
        list.tail = idx;
    }
    idx
}

/// Nodes addressed by index; freed indices are reused, last freed first.
/// The free slots form a list through the slots themselves, so that
/// storing and freeing touch one slot and no other vector.
#[derive(Debug)]
pub(super) struct Slab<T> {
    slots: Vec<Entry<T>>,
    /// The first free slot, or `NIL`.
    free: usize,
    len: usize,
}

#[derive(Debug)]
enum Entry<T> {
    Full(T),
    /// A free slot and the next free one (or `NIL`).
    Free(usize),
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: NIL,
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    /// Stores `value` and returns its index.
    #[inline]
    pub(super) fn insert(&mut self, value: T) -> usize {
        self.len += 1;
        let idx = self.free;
        if let Some(entry) = self.slots.get_mut(idx) {
            if let Entry::Free(next) = *entry {
                self.free = next;
                *entry = Entry::Full(value);
                return idx;
            }
        }
        self.slots.push(Entry::Full(value));
        self.slots.len() - 1
    }

    /// Takes the value at `idx` out, freeing the index.
    #[inline]
    pub(super) fn remove(&mut self, idx: usize) -> Option<T> {
        self.remove_if(idx, |_| true)
    }

    /// Takes the value at `idx` out, freeing the index, if that index is
    /// in use and `keep_out` accepts the value: one look at the slot.
    #[inline(always)]
    pub(super) fn remove_if(&mut self, idx: usize, keep_out: impl FnOnce(&T) -> bool) -> Option<T> {
        let entry = self.slots.get_mut(idx)?;
        match entry {
            Entry::Full(value) if keep_out(value) => {}
            _ => return None,
        }
        let Entry::Full(value) = core::mem::replace(entry, Entry::Free(self.free)) else {
            return None;
        };
        self.free = idx;
        self.len -= 1;
        Some(value)
    }

    /// The value at `idx`, if that index is in use.
    #[inline]
    pub(super) fn get(&self, idx: usize) -> Option<&T> {
        match self.slots.get(idx)? {
            Entry::Full(value) => Some(value),
            Entry::Free(_) => None,
        }
    }

    /// The value at `idx`, if that index is in use.
    #[inline]
    pub(super) fn get_mut(&mut self, idx: usize) -> Option<&mut T> {
        match self.slots.get_mut(idx)? {
            Entry::Full(value) => Some(value),
            Entry::Free(_) => None,
        }
    }

    /// How many values are stored.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    fn link<const N: usize>(&mut self, idx: usize, k: usize) -> Option<&mut Link>
    where
        T: Node<N>,
    {
        self.get_mut(idx)?.links_mut().get_mut(k)
    }

    fn next_of<const N: usize>(&self, idx: usize, k: usize) -> usize
    where
        T: Node<N>,
    {
        self.get(idx)
            .and_then(|node| node.links().get(k))
            .map_or(NIL, |l| l.next)
    }
}
