//! A group as a plain table of world ranks.
//!
//! Dense groups are absolute (they never point at a parent), so their
//! lookup is one table read at any depth. `rank_of` uses a world-rank to
//! group-rank hash index (open addressing, linear probing, load at most
//! 1/2) built on first use: many groups only ever need `lookup`, and the
//! index would triple their size.

use alloc::boxed::Box;
use alloc::vec;
use spin::Once;

/// Dense table plus its lazily built reverse index.
pub(super) struct Dense {
    world: Box<[u32]>,
    index: Once<WorldIndex>,
}

impl Dense {
    /// Takes the world ranks of the members, in group order (distinct).
    pub(super) fn new(world: Box<[u32]>) -> Self {
        Dense {
            world,
            index: Once::new(),
        }
    }

    /// Heap bytes held, the reverse index included once built.
    pub(super) fn heap_bytes(&self) -> usize {
        self.world.len() * 4 + self.index.get().map_or(0, |index| index.slots.len() * 8)
    }

    /// World rank of member `rank`.
    #[inline]
    pub(super) fn world_rank(&self, rank: u32) -> Option<u32> {
        self.world.get(rank as usize).copied()
    }

    /// Copies the world ranks of members `start, start + 1, …` into `out`
    /// (left as it is if they are not all members).
    pub(super) fn copy_world_ranks(&self, start: u32, out: &mut [u32]) {
        let start = start as usize;
        if let Some(table) = self.world.get(start..start.saturating_add(out.len())) {
            out.copy_from_slice(table);
        }
    }

    /// Member index of `world_rank`, building the index on first use.
    pub(super) fn rank_of(&self, world_rank: u32) -> Option<u32> {
        self.index
            .call_once(|| WorldIndex::new(&self.world))
            .find(world_rank)
    }
}

/// A free slot; real entries have a world rank below 2^31 in the high half.
const FREE: u64 = u64::MAX;

/// Open-addressing table of `world_rank << 32 | rank` entries.
struct WorldIndex {
    slots: Box<[u64]>,
    /// 64 minus log2 of the slot count, for multiplicative hashing.
    shift: u32,
}

impl WorldIndex {
    fn new(world: &[u32]) -> Self {
        let capacity = world.len().saturating_mul(2).next_power_of_two().max(2);
        let shift = 64 - capacity.trailing_zeros();
        let mut slots = vec![FREE; capacity].into_boxed_slice();
        let mask = capacity - 1;
        for (rank, &w) in world.iter().enumerate() {
            let mut i = home(w, shift);
            // At least half the slots are free, so this stops.
            while let Some(slot) = slots.get_mut(i) {
                if *slot == FREE {
                    *slot = u64::from(w) << 32 | rank as u64;
                    break;
                }
                i = (i + 1) & mask;
            }
        }
        WorldIndex { slots, shift }
    }

    fn find(&self, world_rank: u32) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let mut i = home(world_rank, self.shift);
        for _ in 0..self.slots.len() {
            let slot = *self.slots.get(i)?;
            if slot == FREE {
                return None;
            }
            if (slot >> 32) as u32 == world_rank {
                return Some(slot as u32);
            }
            i = (i + 1) & mask;
        }
        None
    }
}

/// Fibonacci hashing: spreads runs of consecutive world ranks.
#[inline]
fn home(world_rank: u32, shift: u32) -> usize {
    (u64::from(world_rank).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn reverse_index_finds_members_only_and_is_counted_once_built() {
        let world: Vec<u32> = (0..1000u32).map(|i| (i * 7919) % 10_007).collect();
        let dense = Dense::new(world.clone().into_boxed_slice());
        assert_eq!(dense.heap_bytes(), 4000);
        for (rank, &w) in world.iter().enumerate() {
            assert_eq!(dense.world_rank(rank as u32), Some(w));
            assert_eq!(dense.rank_of(w), Some(rank as u32));
        }
        assert_eq!(dense.heap_bytes(), 4000 + 2048 * 8);
        let members: hashbrown::HashSet<u32> = world.iter().copied().collect();
        for w in 0..10_007 {
            if !members.contains(&w) {
                assert_eq!(dense.rank_of(w), None);
            }
        }
        assert_eq!(dense.world_rank(1000), None);
        let empty = Dense::new(Box::default());
        assert_eq!(empty.rank_of(0), None);
    }
}
