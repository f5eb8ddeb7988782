//! A keyed table, for the engine's contexts and each context's streams:
//! values in a vector, found through a hash map of their keys. The index
//! last found is remembered and checked against the key of the value it
//! holds, so a run of operations on one key (one communicator, one peer)
//! skips the hash map, and no removal has to invalidate it.

use alloc::vec::Vec;
use core::fmt::Debug;
use core::hash::Hash;
#[cfg(test)]
use core::slice;

use hashbrown::HashMap;

/// A value that carries its own key.
pub(super) trait Keyed {
    type Key: Copy + Eq + Hash + Debug;
    fn key(&self) -> Self::Key;
}

/// Values by key; see the module documentation.
#[derive(Debug)]
pub(super) struct Table<V: Keyed> {
    /// Each value's index in `values`.
    slots: HashMap<V::Key, usize>,
    values: Vec<V>,
    /// The index last found (maybe out of range, or another key's now).
    last: usize,
}

impl<V: Keyed> Default for Table<V> {
    fn default() -> Self {
        Table {
            slots: HashMap::new(),
            values: Vec::new(),
            last: 0,
        }
    }
}

impl<V: Keyed> Table<V> {
    /// How many values the table holds.
    pub(super) fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the table holds no value.
    pub(super) fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The values, in no particular order.
    #[cfg(test)]
    pub(super) fn iter(&self) -> slice::Iter<'_, V> {
        self.values.iter()
    }

    /// The value of `key`.
    #[inline]
    pub(super) fn get(&self, key: V::Key) -> Option<&V> {
        match self.values.get(self.last) {
            Some(v) if v.key() == key => Some(v),
            _ => self.values.get(self.lookup(key)?),
        }
    }

    /// The index of `key`'s value, remembered for the next call: the last
    /// one found is checked inline, the hash map out of line.
    #[inline]
    fn find(&mut self, key: V::Key) -> Option<usize> {
        if self.values.get(self.last).is_some_and(|v| v.key() == key) {
            return Some(self.last);
        }
        let idx = self.lookup(key)?;
        self.last = idx;
        Some(idx)
    }

    /// The index of `key`'s value, through the hash map.
    #[inline(never)]
    fn lookup(&self, key: V::Key) -> Option<usize> {
        self.slots.get(&key).copied()
    }

    /// The value of `key`, to change.
    #[inline]
    pub(super) fn get_mut(&mut self, key: V::Key) -> Option<&mut V> {
        let idx = self.find(key)?;
        self.values.get_mut(idx)
    }

    /// The value of `key`, made with `new` if missing.
    #[inline]
    pub(super) fn get_or_insert_with(&mut self, key: V::Key, new: impl FnOnce() -> V) -> &mut V {
        let idx = match self.find(key) {
            Some(idx) => idx,
            None => self.insert(key, new()),
        };
        // Every index in `slots` (and so every found one) is in range.
        &mut self.values[idx]
    }

    /// Adds `value` under `key` (absent) and returns its index.
    #[cold]
    #[inline(never)]
    fn insert(&mut self, key: V::Key, value: V) -> usize {
        let idx = self.values.len();
        self.values.push(value);
        self.slots.insert(key, idx);
        self.last = idx;
        idx
    }

    /// Takes the value of `key` out; the last value moves into its place.
    pub(super) fn remove(&mut self, key: V::Key) -> Option<V> {
        let idx = self.slots.remove(&key)?;
        let value = self.values.swap_remove(idx);
        if let Some(moved) = self.values.get(idx) {
            self.slots.insert(moved.key(), idx);
        }
        Some(value)
    }
}
