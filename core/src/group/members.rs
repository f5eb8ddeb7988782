//! A group's members as world ranks, in order, by walking its storage:
//! [`Group::members`] (an iterator, for large groups) and
//! [`Group::world_ranks`] (a rank table in one call, for small ones).
//!
//! The group's own level produces its base ranks by walking its form: a
//! stride adds its step, ranges emit one run after another, a bitmap steps
//! from one set bit to the next, a table is copied, the world counts.
//! Each base below then maps the whole batch in place: a stride with a
//! multiply-add, ranges by following the run that held the previous rank
//! (a search only when the batch jumps to another run), a bitmap by
//! stepping over the set bits from the previous rank when the next lies
//! near it, either way (a select otherwise), a table with a read. So a batch costs about one step per
//! member and level, with no `lookup` per member; the iterator works in
//! batches of [`CHUNK`] members.

use core::fmt;
use core::iter::FusedIterator;

use super::node::{stride_parent_rank, Node, Store};
use super::{Group, LengthError};

/// Members the iterator resolves at a time.
const CHUNK: usize = 64;

impl Node {
    /// Writes the world ranks of members `start, start + 1, …` into `out`
    /// (all of them members: `start + out.len() <= size`).
    pub(super) fn fill_world_ranks(&self, start: u32, out: &mut [u32]) {
        match &self.store {
            Store::World => {
                for (slot, rank) in out.iter_mut().zip(start..) {
                    *slot = rank;
                }
            }
            Store::Dense(dense) => dense.copy_world_ranks(start, out),
            Store::Stride {
                parent,
                first,
                step,
            } => {
                let step = i64::from(*step);
                let mut rank = i64::from(*first) + i64::from(start) * step;
                for slot in out.iter_mut() {
                    // A member's base rank: below 2^31.
                    *slot = rank as u32;
                    rank += step;
                }
                parent.map_to_world(out);
            }
            Store::Ranges { parent, runs } => {
                runs.fill(start, out);
                parent.map_to_world(out);
            }
            Store::Bitmap { parent, bits } => {
                bits.fill(start, out);
                parent.map_to_world(out);
            }
        }
    }

    /// Replaces each of `ranks` (ranks of this group) by its world rank.
    /// Recursion is bounded by the depth limit ([`super::MAX_DEPTH`]).
    fn map_to_world(&self, ranks: &mut [u32]) {
        match &self.store {
            Store::World => {}
            Store::Dense(dense) => {
                for rank in ranks {
                    *rank = dense.world_rank(*rank).unwrap_or(*rank);
                }
            }
            Store::Stride {
                parent,
                first,
                step,
            } => {
                for rank in ranks.iter_mut() {
                    *rank = stride_parent_rank(*first, *step, *rank).unwrap_or(*rank);
                }
                parent.map_to_world(ranks);
            }
            Store::Ranges { parent, runs } => {
                runs.map_in_place(ranks);
                parent.map_to_world(ranks);
            }
            Store::Bitmap { parent, bits } => {
                bits.map_in_place(ranks);
                parent.map_to_world(ranks);
            }
        }
    }
}

impl Group {
    /// The world ranks of the members, in group order, walked through the
    /// storage (see [Members](super#members)) rather than
    /// looked up one by one: for a communicator too large for a table of
    /// its members, or to build one's own table. The iterator borrows the
    /// group; [`Iterator::nth`] (and so `skip`) jumps without resolving
    /// the members it passes.
    pub fn members(&self) -> Members<'_> {
        Members {
            node: &self.node,
            next: 0,
            buf: [0; CHUNK],
            at: 0,
            len: 0,
        }
    }

    /// Writes the world ranks of all members, in group order, into `out`,
    /// which must have exactly [`size`](Group::size) entries: the rank
    /// table of a small communicator (entry `i` is the world rank of rank
    /// `i`), filled by the same walk as [`members`](Group::members),
    /// without allocating.
    pub fn world_ranks(&self, out: &mut [u32]) -> Result<(), LengthError> {
        let expected = self.size() as usize;
        if out.len() != expected {
            return Err(LengthError {
                expected,
                given: out.len(),
            });
        }
        self.node.fill_world_ranks(0, out);
        Ok(())
    }
}

/// The world ranks of a group's members, in group order; from
/// [`Group::members`].
#[derive(Clone)]
pub struct Members<'a> {
    node: &'a Node,
    /// First member not yet resolved into `buf`.
    next: u32,
    /// Resolved world ranks; `buf[at..len]` are still to be given.
    buf: [u32; CHUNK],
    at: usize,
    len: usize,
}

impl Members<'_> {
    /// Members left, buffered or not.
    fn remaining(&self) -> usize {
        (self.len - self.at) + (self.node.size - self.next) as usize
    }
}

impl Iterator for Members<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        if self.at == self.len {
            let count = (self.node.size - self.next).min(CHUNK as u32);
            if count == 0 {
                return None;
            }
            let chunk = self.buf.get_mut(..count as usize)?;
            self.node.fill_world_ranks(self.next, chunk);
            self.next += count;
            self.at = 0;
            self.len = count as usize;
        }
        let rank = *self.buf.get(self.at)?;
        self.at += 1;
        Some(rank)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.remaining();
        (n, Some(n))
    }

    fn nth(&mut self, n: usize) -> Option<u32> {
        let buffered = self.len - self.at;
        if n < buffered {
            self.at += n;
        } else {
            // Drop the buffer and skip the rest unresolved.
            let skip = n - buffered;
            let left = (self.node.size - self.next) as usize;
            self.next += skip.min(left) as u32;
            self.at = self.len;
        }
        self.next()
    }
}

impl ExactSizeIterator for Members<'_> {}

impl FusedIterator for Members<'_> {}

impl fmt::Debug for Members<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Members")
            .field("remaining", &self.remaining())
            .finish()
    }
}
