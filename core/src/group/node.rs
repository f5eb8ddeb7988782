//! The stored form of one group and the walk from a rank to a world rank
//! (and back) through its parent chain.

use alloc::sync::Arc;
use core::mem::size_of;

use super::bitmap::Bitmap;
use super::dense::Dense;
use super::ranges::Runs;
use super::Representation;

/// Bytes every node costs besides the heap it owns: the node and the
/// `Arc` counters around it.
pub(super) const HEADER_BYTES: usize = size_of::<Node>() + 2 * size_of::<usize>();

/// One group's storage; shared through `Arc` by handles and children.
pub(super) struct Node {
    /// Members.
    pub(super) size: u32,
    /// Parent links down to an absolute node (world or dense).
    pub(super) depth: u8,
    pub(super) store: Store,
}

/// How the members are stored.
pub(super) enum Store {
    /// Rank `i` is world rank `i`.
    World,
    /// A table of world ranks.
    Dense(Dense),
    /// Member `i` is parent rank `first + i * step`.
    Stride {
        parent: Arc<Node>,
        first: u32,
        step: i32,
    },
    /// Runs of consecutive parent ranks.
    Ranges { parent: Arc<Node>, runs: Runs },
    /// Set bits over the parent's ranks, in parent order.
    Bitmap { parent: Arc<Node>, bits: Bitmap },
}

impl Node {
    /// The world group of `size` processes.
    pub(super) fn world(size: u32) -> Self {
        Node {
            size,
            depth: 0,
            store: Store::World,
        }
    }

    pub(super) fn is_world(&self) -> bool {
        matches!(self.store, Store::World)
    }

    pub(super) fn representation(&self) -> Representation {
        match self.store {
            Store::World => Representation::World,
            Store::Dense(_) => Representation::Dense,
            Store::Stride { .. } => Representation::Stride,
            Store::Ranges { .. } => Representation::Ranges,
            Store::Bitmap { .. } => Representation::Bitmap,
        }
    }

    /// Bytes of this node's allocation (with the `Arc` counters) and of the
    /// heap it owns; parents are shared and not counted.
    pub(super) fn memory_bytes(&self) -> usize {
        let heap = match &self.store {
            Store::World | Store::Stride { .. } => 0,
            Store::Dense(dense) => dense.heap_bytes(),
            Store::Ranges { runs, .. } => runs.heap_bytes(),
            Store::Bitmap { bits, .. } => bits.heap_bytes(),
        };
        HEADER_BYTES + heap
    }

    /// The group this node is stored relative to; `None` for the world and
    /// dense groups, which are absolute.
    pub(super) fn base(&self) -> Option<&Arc<Node>> {
        match &self.store {
            Store::World | Store::Dense(_) => None,
            Store::Stride { parent, .. }
            | Store::Ranges { parent, .. }
            | Store::Bitmap { parent, .. } => Some(parent),
        }
    }

    /// Rank in [`Node::base`] of member `rank`: one step of the walk
    /// (`None` for absolute nodes and ranks past the group).
    pub(super) fn base_rank(&self, rank: u32) -> Option<u32> {
        if rank >= self.size {
            return None;
        }
        match &self.store {
            Store::World | Store::Dense(_) => None,
            Store::Stride { first, step, .. } => stride_parent_rank(*first, *step, rank),
            Store::Ranges { runs, .. } => runs.parent_rank(rank),
            Store::Bitmap { bits, .. } => bits.select(rank),
        }
    }

    /// World rank of member `rank`, walking up the parents.
    #[inline]
    pub(super) fn world_rank(&self, rank: u32) -> Option<u32> {
        if rank >= self.size {
            return None;
        }
        let mut node = self;
        let mut r = rank;
        loop {
            match &node.store {
                Store::World => return Some(r),
                Store::Dense(dense) => return dense.world_rank(r),
                Store::Stride {
                    parent,
                    first,
                    step,
                } => {
                    r = stride_parent_rank(*first, *step, r)?;
                    node = parent;
                }
                Store::Ranges { parent, runs } => {
                    r = runs.parent_rank(r)?;
                    node = parent;
                }
                Store::Bitmap { parent, bits } => {
                    r = bits.select(r)?;
                    node = parent;
                }
            }
        }
    }

    /// Member index of `world_rank`, or `None` when it is not a member.
    /// Recursion is bounded by the depth limit ([`super::MAX_DEPTH`]).
    pub(super) fn rank_of(&self, world_rank: u32) -> Option<u32> {
        match &self.store {
            Store::World => (world_rank < self.size).then_some(world_rank),
            Store::Dense(dense) => dense.rank_of(world_rank),
            Store::Stride {
                parent,
                first,
                step,
            } => stride_rank(*first, *step, self.size, parent.base_rank_of(world_rank)?),
            Store::Ranges { parent, runs } => runs.rank_of(parent.base_rank_of(world_rank)?),
            Store::Bitmap { parent, bits } => bits.rank_if_set(parent.base_rank_of(world_rank)?),
        }
    }

    /// [`Node::rank_of`] of a base, with the world (the base of every
    /// flattened group) answered inline rather than by a recursive call.
    #[inline]
    fn base_rank_of(&self, world_rank: u32) -> Option<u32> {
        match self.store {
            Store::World => (world_rank < self.size).then_some(world_rank),
            _ => self.rank_of(world_rank),
        }
    }
}

/// Base rank of member `rank` of the stride `first + i·step`.
#[inline]
pub(super) fn stride_parent_rank(first: u32, step: i32, rank: u32) -> Option<u32> {
    u32::try_from(i64::from(first) + i64::from(rank) * i64::from(step)).ok()
}

/// Member index of `parent_rank` in the stride `first + i·step` of `size`
/// members. Unsigned 32-bit arithmetic (a 64-bit division costs several
/// times as much on common x86-64 parts), no division for steps of ±1, and
/// no branch on membership: `rank_of` queries mix members and others.
#[inline]
fn stride_rank(first: u32, step: i32, size: u32, parent_rank: u32) -> Option<u32> {
    // Both ranks are below 2^31: the distance is negative (wrapped past
    // 2^31) exactly when the rank lies before `first` in step order.
    let distance = if step > 0 {
        parent_rank.wrapping_sub(first)
    } else {
        first.wrapping_sub(parent_rank)
    };
    let step = step.unsigned_abs();
    let rank = if step == 1 {
        distance
    } else {
        distance.checked_div(step)?
    };
    // No overflow: rank * step <= distance.
    let member = (distance >> 31 == 0) & (rank * step == distance) & (rank < size);
    member.then_some(rank)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stride_rank_inverts_stride_parent_rank() {
        for step in [-7, -2, -1, 1, 2, 3, 1000] {
            for first in [0u32, 1, 5, 40, 2000] {
                for size in 0..12u32 {
                    let members: alloc::vec::Vec<Option<u32>> = (0..size)
                        .map(|i| stride_parent_rank(first, step, i))
                        .collect();
                    if members.iter().any(Option::is_none) {
                        continue;
                    }
                    for p in 0..2100u32 {
                        let expected = members.iter().position(|&m| m == Some(p));
                        assert_eq!(
                            stride_rank(first, step, size, p),
                            expected.map(|i| i as u32),
                            "first {first} step {step} size {size} rank {p}"
                        );
                    }
                }
            }
        }
        // Ranks near the top of the range, on either side of `first`.
        let top = i32::MAX as u32 - 1;
        assert_eq!(stride_rank(top, -1, 3, top - 2), Some(2));
        assert_eq!(stride_rank(top, -1, 3, top - 3), None);
        assert_eq!(stride_rank(0, 3, u32::MAX, top), Some(top / 3));
        assert_eq!(stride_rank(1, 3, u32::MAX, top), None);
    }
}
