//! Augmented AVL tree over closed address intervals `[first, last]`.
//!
//! This module owns the index behind the registration cache. Intervals may
//! overlap or be identical; each node is ordered by `(first, slot index)`, so
//! every key is unique, and carries the largest `last` of its subtree
//! (`max_last`), which lets a query skip every subtree that ends before the
//! query starts. A query therefore visits `O(log n + k)` nodes for `k`
//! results.
//!
//! Nodes live in one arena (`Vec`) and link by `u32` index, which keeps a
//! node small and lets a caller name a node by a stable [`NodeId`] (rotations
//! relink nodes, they never move them). Two properties matter to the cache,
//! which may run inside a memory hook:
//!
//! - nothing here allocates or frees unless the caller asks for it: an
//!   insert needs a spare slot ([`IntervalTree::has_spare_slot`]); the arena
//!   only grows through [`IntervalTree::adopt_storage`], with storage the
//!   caller allocated before it took its lock, and hands back the old storage
//!   for the caller to free after it released the lock;
//! - a node can be *retired*: unlinked from the tree while its value stays
//!   in the arena on a retired list, so that a caller can unlink any number
//!   of nodes under its lock without moving values anywhere, and collect
//!   them later a few at a time ([`IntervalTree::take_retired`]).
//!
//! Addresses are inclusive on both ends so that an interval may end at
//! `usize::MAX` without overflow.

use alloc::vec::Vec;

/// Index of "no node".
const NIL: u32 = u32::MAX;

/// Deepest AVL tree the arena can hold (`u32` indices give at most 2^32
/// nodes; an AVL tree of that many nodes is at most 46 levels deep).
const MAX_DEPTH: usize = 48;

/// Stable name of a node: valid from its insertion until it is removed or
/// retired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct NodeId(u32);

impl NodeId {
    /// The id from its raw index (as kept by a caller in an atomic).
    pub(crate) const fn from_raw(raw: u32) -> Self {
        NodeId(raw)
    }

    /// The raw index.
    pub(crate) const fn raw(self) -> u32 {
        self.0
    }
}

/// Where a slot of the arena stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    /// In the tree.
    Linked,
    /// Unlinked, value kept, on the retired list; carries the caller's tag.
    Retired(bool),
    /// Empty, on the free list.
    Free,
}

/// One arena slot. `left` doubles as the link of the free and retired lists.
#[derive(Debug)]
pub(crate) struct Node<T> {
    first: usize,
    last: usize,
    max_last: usize,
    left: u32,
    right: u32,
    height: u8,
    state: SlotState,
    value: Option<T>,
}

/// Arena storage, allocated by the caller outside its lock and handed in by
/// [`IntervalTree::adopt_storage`].
pub(crate) type Storage<T> = Vec<Node<T>>;

/// Interval tree of values `T` keyed by closed intervals.
#[derive(Debug)]
pub(crate) struct IntervalTree<T> {
    nodes: Vec<Node<T>>,
    root: u32,
    free: u32,
    retired: u32,
    len: usize,
    retired_len: usize,
}

impl<T> Default for IntervalTree<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> IntervalTree<T> {
    /// An empty tree with no storage.
    pub(crate) const fn new() -> Self {
        Self {
            nodes: Vec::new(),
            root: NIL,
            free: NIL,
            retired: NIL,
            len: 0,
            retired_len: 0,
        }
    }

    /// Intervals in the tree (retired ones not counted).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Retired nodes not yet taken.
    #[cfg(test)]
    pub(crate) fn retired_len(&self) -> usize {
        self.retired_len
    }

    /// Slots the arena holds without reallocating.
    pub(crate) fn capacity(&self) -> usize {
        self.nodes.capacity()
    }

    /// Whether one [`insert`](Self::insert) can proceed without allocating.
    pub(crate) fn has_spare_slot(&self) -> bool {
        self.free != NIL || self.nodes.len() < self.nodes.capacity()
    }

    /// Empty storage of the given capacity (this allocates: call it with no
    /// lock held).
    pub(crate) fn new_storage(capacity: usize) -> Storage<T> {
        Vec::with_capacity(capacity)
    }

    /// Moves the arena into `storage` if that is larger, and returns the
    /// storage that is no longer used (empty, for the caller to drop after
    /// releasing its lock). Does not allocate or free.
    pub(crate) fn adopt_storage(&mut self, mut storage: Storage<T>) -> Storage<T> {
        if storage.capacity() <= self.nodes.capacity() {
            return storage;
        }
        storage.clear();
        // The capacity suffices, so `append` moves without reallocating.
        storage.append(&mut self.nodes);
        core::mem::swap(&mut self.nodes, &mut storage);
        storage
    }

    fn node(&self, i: u32) -> &Node<T> {
        &self.nodes[i as usize]
    }

    fn node_mut(&mut self, i: u32) -> &mut Node<T> {
        &mut self.nodes[i as usize]
    }

    fn height(&self, i: u32) -> u8 {
        if i == NIL {
            0
        } else {
            self.node(i).height
        }
    }

    fn max_last_of(&self, i: u32) -> Option<usize> {
        if i == NIL {
            None
        } else {
            Some(self.node(i).max_last)
        }
    }

    /// Recomputes height and `max_last` of `i` from its children.
    fn update(&mut self, i: u32) {
        let (l, r) = {
            let n = self.node(i);
            (n.left, n.right)
        };
        let h = 1 + self.height(l).max(self.height(r));
        let mut m = self.node(i).last;
        if let Some(x) = self.max_last_of(l) {
            m = m.max(x);
        }
        if let Some(x) = self.max_last_of(r) {
            m = m.max(x);
        }
        let n = self.node_mut(i);
        n.height = h;
        n.max_last = m;
    }

    fn rotate_right(&mut self, i: u32) -> u32 {
        let l = self.node(i).left;
        let lr = self.node(l).right;
        self.node_mut(i).left = lr;
        self.node_mut(l).right = i;
        self.update(i);
        self.update(l);
        l
    }

    fn rotate_left(&mut self, i: u32) -> u32 {
        let r = self.node(i).right;
        let rl = self.node(r).left;
        self.node_mut(i).right = rl;
        self.node_mut(r).left = i;
        self.update(i);
        self.update(r);
        r
    }

    /// Restores the AVL balance at `i` (children already balanced) and
    /// returns the new subtree root.
    fn rebalance(&mut self, i: u32) -> u32 {
        self.update(i);
        let (l, r) = {
            let n = self.node(i);
            (n.left, n.right)
        };
        let (hl, hr) = (self.height(l), self.height(r));
        if hl > hr + 1 {
            let (ll, lr) = {
                let n = self.node(l);
                (n.left, n.right)
            };
            if self.height(lr) > self.height(ll) {
                let nl = self.rotate_left(l);
                self.node_mut(i).left = nl;
            }
            self.rotate_right(i)
        } else if hr > hl + 1 {
            let (rl, rr) = {
                let n = self.node(r);
                (n.left, n.right)
            };
            if self.height(rl) > self.height(rr) {
                let nr = self.rotate_right(r);
                self.node_mut(i).right = nr;
            }
            self.rotate_left(i)
        } else {
            i
        }
    }

    /// Key order: by `first`, then by slot index.
    fn key_less(&self, a: u32, b: u32) -> bool {
        let (fa, fb) = (self.node(a).first, self.node(b).first);
        fa < fb || (fa == fb && a < b)
    }

    fn insert_at(&mut self, root: u32, new: u32) -> u32 {
        if root == NIL {
            return new;
        }
        if self.key_less(new, root) {
            let l = self.node(root).left;
            let nl = self.insert_at(l, new);
            self.node_mut(root).left = nl;
        } else {
            let r = self.node(root).right;
            let nr = self.insert_at(r, new);
            self.node_mut(root).right = nr;
        }
        self.rebalance(root)
    }

    /// Adds `[first, last]` with `value`. Returns `None` (and gives the value
    /// back) when there is no spare slot: the tree never grows its arena by
    /// itself. `first <= last` is the caller's promise.
    pub(crate) fn insert(&mut self, first: usize, last: usize, value: T) -> Result<NodeId, T> {
        debug_assert!(first <= last);
        let reuse = self.free != NIL;
        let idx = if reuse {
            self.free
        } else if self.nodes.len() < self.nodes.capacity() {
            match u32::try_from(self.nodes.len()) {
                Ok(idx) if idx != NIL => idx,
                _ => return Err(value),
            }
        } else {
            return Err(value);
        };
        let fresh = Node {
            first,
            last,
            max_last: last,
            left: NIL,
            right: NIL,
            height: 1,
            state: SlotState::Linked,
            value: Some(value),
        };
        if reuse {
            self.free = self.node(idx).left;
            *self.node_mut(idx) = fresh;
        } else {
            self.nodes.push(fresh);
        }
        self.root = self.insert_at(self.root, idx);
        self.len += 1;
        Ok(NodeId(idx))
    }

    /// Unlinks the smallest node of the subtree at `root`; returns the new
    /// subtree root and the unlinked node.
    fn unlink_min(&mut self, root: u32) -> (u32, u32) {
        let l = self.node(root).left;
        if l == NIL {
            return (self.node(root).right, root);
        }
        let (nl, min) = self.unlink_min(l);
        self.node_mut(root).left = nl;
        (self.rebalance(root), min)
    }

    fn unlink_at(&mut self, root: u32, target: u32) -> u32 {
        if root == NIL {
            // Not reached for a linked target: the key search finds it.
            return NIL;
        }
        if root == target {
            let (l, r) = {
                let n = self.node(root);
                (n.left, n.right)
            };
            if l == NIL {
                return r;
            }
            if r == NIL {
                return l;
            }
            let (nr, succ) = self.unlink_min(r);
            self.node_mut(succ).left = l;
            self.node_mut(succ).right = nr;
            return self.rebalance(succ);
        }
        if self.key_less(target, root) {
            let l = self.node(root).left;
            let nl = self.unlink_at(l, target);
            self.node_mut(root).left = nl;
        } else {
            let r = self.node(root).right;
            let nr = self.unlink_at(r, target);
            self.node_mut(root).right = nr;
        }
        self.rebalance(root)
    }

    fn is_linked(&self, id: NodeId) -> bool {
        self.nodes
            .get(id.0 as usize)
            .is_some_and(|n| n.state == SlotState::Linked)
    }

    fn unlink(&mut self, id: NodeId) -> bool {
        if !self.is_linked(id) {
            return false;
        }
        self.root = self.unlink_at(self.root, id.0);
        self.len -= 1;
        let n = self.node_mut(id.0);
        n.left = NIL;
        n.right = NIL;
        true
    }

    /// Removes a node and hands its value back (moved, not dropped: the
    /// caller decides where it is dropped). `None` if `id` is not linked.
    pub(crate) fn remove(&mut self, id: NodeId) -> Option<T> {
        if !self.unlink(id) {
            return None;
        }
        let free = self.free;
        let n = self.node_mut(id.0);
        n.state = SlotState::Free;
        n.left = free;
        let value = n.value.take();
        self.free = id.0;
        value
    }

    /// Unlinks a node but keeps its value in the arena, on the retired list
    /// with `tag`. Returns false if `id` is not linked.
    pub(crate) fn retire(&mut self, id: NodeId, tag: bool) -> bool {
        if !self.unlink(id) {
            return false;
        }
        let retired = self.retired;
        let n = self.node_mut(id.0);
        n.state = SlotState::Retired(tag);
        n.left = retired;
        self.retired = id.0;
        self.retired_len += 1;
        true
    }

    /// Takes one retired value with its tag, freeing its slot.
    pub(crate) fn take_retired(&mut self) -> Option<(T, bool)> {
        if self.retired == NIL {
            return None;
        }
        let idx = self.retired;
        let free = self.free;
        let n = self.node_mut(idx);
        let tag = matches!(n.state, SlotState::Retired(true));
        let next = n.left;
        n.state = SlotState::Free;
        n.left = free;
        let value = n.value.take();
        self.retired = next;
        self.free = idx;
        self.retired_len -= 1;
        value.map(|v| (v, tag))
    }

    /// The value of a linked node.
    pub(crate) fn get(&self, id: NodeId) -> Option<&T> {
        if self.is_linked(id) {
            self.node(id.0).value.as_ref()
        } else {
            None
        }
    }

    /// The value of node `raw` if it is linked and its interval contains
    /// `[first, last]`; for checking a remembered guess.
    #[inline]
    pub(crate) fn covering_at(&self, raw: u32, first: usize, last: usize) -> Option<&T> {
        let n = self.nodes.get(raw as usize)?;
        if n.state == SlotState::Linked && n.first <= first && n.last >= last {
            n.value.as_ref()
        } else {
            None
        }
    }

    /// First node found whose interval contains `[first, last]` and whose
    /// value `accept` takes. Visits `O(log n + k)` nodes, `k` being the
    /// intervals that contain `first`. Allocates nothing.
    #[inline]
    pub(crate) fn find_covering(
        &self,
        first: usize,
        last: usize,
        mut accept: impl FnMut(&T) -> bool,
    ) -> Option<(NodeId, &T)> {
        // Pending left subtrees; at most one per level of the current path.
        let mut stack = [NIL; MAX_DEPTH];
        let mut sp = 0usize;
        let mut i = self.root;
        loop {
            while i != NIL {
                let n = self.node(i);
                if n.max_last < last {
                    // Nothing below ends late enough.
                    break;
                }
                if n.first > first {
                    // This node and its right subtree start too late.
                    i = n.left;
                    continue;
                }
                if n.last >= last {
                    if let Some(v) = n.value.as_ref() {
                        if accept(v) {
                            return Some((NodeId(i), v));
                        }
                    }
                }
                // Right subtree starts are closer to `first`: try it first.
                if n.left != NIL {
                    if let Some(slot) = stack.get_mut(sp) {
                        *slot = n.left;
                        sp += 1;
                    }
                }
                i = n.right;
            }
            if sp == 0 {
                return None;
            }
            sp -= 1;
            i = stack[sp];
        }
    }

    /// Calls `visit` on every node whose interval touches `[first, last]`,
    /// in address order, until `visit` returns false. Visits
    /// `O(log n + k)` nodes. Allocates nothing.
    pub(crate) fn for_each_overlapping(
        &self,
        first: usize,
        last: usize,
        mut visit: impl FnMut(NodeId, usize, usize, &T) -> bool,
    ) {
        self.overlap_walk(self.root, first, last, &mut visit);
    }

    /// In-order walk with pruning; returns false once `visit` asked to stop.
    fn overlap_walk(
        &self,
        i: u32,
        first: usize,
        last: usize,
        visit: &mut impl FnMut(NodeId, usize, usize, &T) -> bool,
    ) -> bool {
        if i == NIL {
            return true;
        }
        let n = self.node(i);
        if n.max_last < first {
            return true;
        }
        if !self.overlap_walk(n.left, first, last, visit) {
            return false;
        }
        if n.first > last {
            // This node and everything right of it start after the range.
            return true;
        }
        if n.last >= first {
            if let Some(v) = n.value.as_ref() {
                if !visit(NodeId(i), n.first, n.last, v) {
                    return false;
                }
            }
        }
        self.overlap_walk(n.right, first, last, visit)
    }

    /// Some node touching `[first, last]`, if any. `O(log n)`.
    pub(crate) fn any_overlapping(&self, first: usize, last: usize) -> Option<NodeId> {
        let mut i = self.root;
        while i != NIL {
            let n = self.node(i);
            if n.first <= last && n.last >= first {
                return Some(NodeId(i));
            }
            // If the left subtree reaches `first`, an overlap is there or
            // nowhere (everything right of it starts later still).
            if self.max_last_of(n.left).is_some_and(|m| m >= first) {
                i = n.left;
            } else if n.first > last {
                return None;
            } else {
                i = n.right;
            }
        }
        None
    }

    /// Checks every structural invariant; for tests.
    #[cfg(test)]
    pub(crate) fn check(&self) {
        fn walk<T>(t: &IntervalTree<T>, i: u32, count: &mut usize) -> (u8, Option<usize>) {
            if i == NIL {
                return (0, None);
            }
            *count += 1;
            let n = t.node(i);
            assert_eq!(n.state, SlotState::Linked);
            assert!(n.first <= n.last);
            if n.left != NIL {
                assert!(t.key_less(n.left, i));
            }
            if n.right != NIL {
                assert!(t.key_less(i, n.right));
            }
            let (hl, ml) = walk(t, n.left, count);
            let (hr, mr) = walk(t, n.right, count);
            assert!(hl.abs_diff(hr) <= 1, "unbalanced");
            assert_eq!(n.height, 1 + hl.max(hr));
            let m = [Some(n.last), ml, mr].into_iter().flatten().max();
            assert_eq!(Some(n.max_last), m);
            (n.height, m)
        }
        let mut count = 0;
        walk(self, self.root, &mut count);
        assert_eq!(count, self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    fn with_room<T>(t: &mut IntervalTree<T>) {
        if !t.has_spare_slot() {
            let s = IntervalTree::new_storage(t.capacity() * 2 + 4);
            drop(t.adopt_storage(s));
        }
    }

    fn put(t: &mut IntervalTree<u32>, first: usize, last: usize, v: u32) -> NodeId {
        with_room(t);
        t.insert(first, last, v).expect("room was made")
    }

    #[test]
    fn insert_without_room_gives_value_back() {
        let mut t: IntervalTree<u32> = IntervalTree::new();
        assert_eq!(t.insert(1, 2, 7), Err(7));
        let id = put(&mut t, 1, 2, 7);
        assert_eq!(t.get(id), Some(&7));
    }

    #[test]
    fn identical_and_overlapping_intervals_coexist() {
        let mut t = IntervalTree::new();
        let a = put(&mut t, 10, 20, 1);
        let b = put(&mut t, 10, 20, 2);
        let c = put(&mut t, 15, 30, 3);
        t.check();
        let mut seen = Vec::new();
        t.for_each_overlapping(20, 20, |_, _, _, v| {
            seen.push(*v);
            true
        });
        seen.sort_unstable();
        assert_eq!(seen, vec![1, 2, 3]);
        assert_eq!(t.find_covering(12, 19, |v| *v == 2).map(|x| x.0), Some(b));
        assert_eq!(t.find_covering(16, 25, |_| true).map(|x| x.0), Some(c));
        assert!(t.find_covering(12, 25, |_| true).is_none());
        assert_eq!(t.remove(a), Some(1));
        assert_eq!(t.remove(a), None);
        t.check();
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn top_of_address_space() {
        let mut t = IntervalTree::new();
        put(&mut t, usize::MAX - 4095, usize::MAX, 1);
        put(&mut t, 0, usize::MAX, 2);
        t.check();
        assert!(t
            .find_covering(usize::MAX, usize::MAX, |v| *v == 1)
            .is_some());
        assert!(t.find_covering(0, usize::MAX, |v| *v == 1).is_none());
        assert!(t.any_overlapping(usize::MAX, usize::MAX).is_some());
    }

    #[test]
    fn retire_keeps_value_until_taken() {
        let mut t = IntervalTree::new();
        let ids: Vec<_> = (0..10u32)
            .map(|i| put(&mut t, i as usize * 10, i as usize * 10 + 5, i))
            .collect();
        assert!(t.retire(ids[3], true));
        assert!(!t.retire(ids[3], true));
        assert!(t.retire(ids[4], false));
        t.check();
        assert_eq!(t.len(), 8);
        assert_eq!(t.retired_len(), 2);
        assert!(t.any_overlapping(30, 45).is_none());
        let mut got = vec![t.take_retired(), t.take_retired()];
        got.sort_unstable();
        assert_eq!(got, vec![Some((3, true)), Some((4, false))]);
        assert_eq!(t.take_retired(), None);
        // Freed slots are reused without growing.
        let cap = t.capacity();
        put(&mut t, 1, 1, 100);
        put(&mut t, 2, 2, 101);
        assert_eq!(t.capacity(), cap);
        t.check();
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(usize, usize),
        Remove(usize),
        Covering(usize, usize),
        Overlapping(usize, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let iv = (0usize..200, 0usize..40).prop_map(|(a, l)| (a, a + l));
        prop_oneof![
            3 => iv.clone().prop_map(|(a, b)| Op::Insert(a, b)),
            2 => any::<usize>().prop_map(Op::Remove),
            2 => iv.clone().prop_map(|(a, b)| Op::Covering(a, b)),
            2 => iv.prop_map(|(a, b)| Op::Overlapping(a, b)),
        ]
    }

    proptest! {
        #[test]
        fn matches_a_list(ops in proptest::collection::vec(op(), 1..200)) {
            let mut t = IntervalTree::new();
            let mut model: Vec<(NodeId, usize, usize, u32)> = Vec::new();
            let mut next = 0u32;
            for op in ops {
                match op {
                    Op::Insert(a, b) => {
                        let id = put(&mut t, a, b, next);
                        model.push((id, a, b, next));
                        next += 1;
                    }
                    Op::Remove(k) => {
                        if !model.is_empty() {
                            let (id, _, _, v) = model.swap_remove(k % model.len());
                            prop_assert_eq!(t.remove(id), Some(v));
                        }
                    }
                    Op::Covering(a, b) => {
                        // Ask for an odd value to exercise the filter.
                        let got = t.find_covering(a, b, |v| v % 2 == 1).map(|(_, v)| *v);
                        let any = model.iter().any(|m| m.1 <= a && m.2 >= b && m.3 % 2 == 1);
                        prop_assert_eq!(got.is_some(), any);
                        if let Some(v) = got {
                            let m = model.iter().find(|m| m.3 == v).expect("value in model");
                            prop_assert!(m.1 <= a && m.2 >= b);
                        }
                    }
                    Op::Overlapping(a, b) => {
                        let mut got = Vec::new();
                        t.for_each_overlapping(a, b, |_, f, l, v| { got.push((f, l, *v)); true });
                        let mut want: Vec<_> = model.iter()
                            .filter(|m| m.1 <= b && m.2 >= a)
                            .map(|m| (m.1, m.2, m.3)).collect();
                        // The walk is in address order.
                        prop_assert!(got.windows(2).all(|w| w[0].0 <= w[1].0));
                        got.sort_unstable();
                        want.sort_unstable();
                        prop_assert_eq!(&got, &want);
                        prop_assert_eq!(t.any_overlapping(a, b).is_some(), !want.is_empty());
                    }
                }
                t.check();
                prop_assert_eq!(t.len(), model.len());
            }
        }
    }
}
