//! The bins of the matching engine: a bin lists the receives of one
//! specification shape and key and the unexpected messages they would
//! match; a [`BinMap`] holds the bins of one shape by key.
//!
//! A bin that empties stays in its map, so that a key used over and over
//! (one tag of a ping-pong) costs no hash insertion and removal per
//! message. The empty bins are counted; once they outnumber the live ones,
//! [`MIN_KEPT`] and an eighth of the map's capacity, one pass drops them
//! all. The pass costs `O(capacity)` and comes after at least an eighth of
//! a capacity of emptyings, so it is `O(1)` amortized per operation; the
//! map holds at most about twice its live bins (or [`MIN_KEPT`]), and an
//! eighth of its capacity never makes the table grow.

use core::hash::Hash;

use hashbrown::HashMap;

use super::list::List;

/// The fewest empty bins a map keeps before it drops them.
pub(super) const MIN_KEPT: usize = 64;

/// The receives of one specification shape and key, and the unexpected
/// messages such receives would match.
#[derive(Debug, Default)]
pub(super) struct Bin {
    pub(super) posted: List,
    pub(super) unexpected: List,
}

impl Bin {
    pub(super) fn is_empty(&self) -> bool {
        self.posted.is_empty() && self.unexpected.is_empty()
    }
}

/// Bins by key, empty ones kept for reuse up to a bound.
#[derive(Debug)]
pub(super) struct BinMap<K> {
    pub(super) map: HashMap<K, Bin>,
    /// How many bins of `map` list nothing.
    pub(super) empty: usize,
}

impl<K> Default for BinMap<K> {
    fn default() -> Self {
        BinMap {
            map: HashMap::new(),
            empty: 0,
        }
    }
}

impl<K: Eq + Hash> BinMap<K> {
    /// The bin of `key`, if there is one (it may be empty).
    pub(super) fn get(&self, key: &K) -> Option<&Bin> {
        self.map.get(key)
    }

    /// How many bins list something.
    pub(super) fn live(&self) -> usize {
        self.map.len() - self.empty
    }

    /// Whether no bin lists anything.
    pub(super) fn is_empty(&self) -> bool {
        self.live() == 0
    }

    /// How many empty bins the map may keep.
    pub(super) fn limit(&self) -> usize {
        MIN_KEPT.max(self.live()).max(self.map.capacity() / 8)
    }

    /// The bin of `key`, made if missing, for the caller to list something
    /// in: it no longer counts as empty.
    #[inline]
    pub(super) fn filling(&mut self, key: K) -> &mut Bin {
        let bin = self.map.entry(key).or_insert_with(|| {
            // Counted empty here, uncounted below like a kept one.
            self.empty += 1;
            Bin::default()
        });
        if bin.is_empty() {
            self.empty -= 1;
        }
        bin
    }

    /// Runs `f`, which takes one thing out of the bin of `key`; false if
    /// there is no such bin.
    #[inline]
    pub(super) fn take_from(&mut self, key: &K, f: impl FnOnce(&mut Bin)) -> bool {
        let Some(bin) = self.map.get_mut(key) else {
            return false;
        };
        f(bin);
        if bin.is_empty() {
            self.emptied(1);
        }
        true
    }

    /// Counts `n` bins the caller has just emptied, and drops every empty
    /// bin if there are now too many.
    #[inline]
    pub(super) fn emptied(&mut self, n: usize) {
        self.empty += n;
        if self.empty > MIN_KEPT && self.empty > self.limit() {
            self.sweep();
        }
    }

    /// Drops every empty bin.
    #[cold]
    #[inline(never)]
    fn sweep(&mut self) {
        self.map.retain(|_, bin| !bin.is_empty());
        self.empty = 0;
    }
}
