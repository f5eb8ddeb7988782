//! A group as a list of runs of consecutive parent ranks.
//!
//! A run is a maximal stretch of members whose parent ranks step by +1
//! (ascending) or -1 (descending); runs may come in any order, so this
//! representation holds any group, and a reversed one as a single run.
//! Lookup binary-searches the group rank of each run's first member;
//! `rank_of` binary-searches the runs by their lowest parent rank, through a
//! permutation that is only stored when the runs are not already ascending
//! and in parent order.
//! Walks fill whole runs at a time, and map a batch of ranks by following
//! the run that held the previous one.

use alloc::boxed::Box;
use alloc::vec::Vec;

/// Marks a descending run in `starts`; parent ranks stay below 2^31.
const DESCENDING: u32 = 1 << 31;

/// Heap bytes of `runs` runs: starts and ranks, plus the parent-order
/// permutation unless the members are strictly increasing.
pub(super) const fn heap_bytes(runs: usize, increasing: bool) -> usize {
    if increasing {
        runs * 8
    } else {
        runs * 12
    }
}

/// Calls `f(index, first, descending)` for each maximal run of `members`
/// (parent ranks in group order), `index` being its first member's position.
pub(super) fn for_each_run(members: &[u32], mut f: impl FnMut(usize, u32, bool)) {
    let mut i = 0;
    while let Some(&first) = members.get(i) {
        let descending =
            first.checked_sub(1).is_some() && members.get(i + 1).copied() == first.checked_sub(1);
        let mut prev = first;
        let mut j = i + 1;
        while let Some(&next) = members.get(j) {
            let follows = if descending {
                prev.checked_sub(1) == Some(next)
            } else {
                prev.checked_add(1) == Some(next)
            };
            if !follows {
                break;
            }
            prev = next;
            j += 1;
        }
        f(i, first, descending);
        i = j;
    }
}

/// Runs of parent ranks, in group order.
pub(super) struct Runs {
    /// Parent rank of each run's first member; `DESCENDING` flags direction.
    starts: Box<[u32]>,
    /// Group rank of each run's first member (so `ranks[0] == 0`).
    ranks: Box<[u32]>,
    /// Run indices by lowest parent rank; empty when that is `0..runs`.
    by_low: Box<[u32]>,
    /// Members in all runs.
    size: u32,
}

impl Runs {
    /// Splits `members` (distinct parent ranks in group order) into runs;
    /// `increasing` says whether they are strictly increasing.
    pub(super) fn new(members: &[u32], increasing: bool) -> Self {
        let mut starts = Vec::new();
        let mut ranks = Vec::new();
        for_each_run(members, |index, first, descending| {
            starts.push(if descending {
                first | DESCENDING
            } else {
                first
            });
            ranks.push(index as u32);
        });
        let mut runs = Runs {
            starts: starts.into_boxed_slice(),
            ranks: ranks.into_boxed_slice(),
            by_low: Box::default(),
            size: members.len() as u32,
        };
        if !increasing {
            let mut order: Vec<u32> = (0..runs.starts.len() as u32).collect();
            order.sort_unstable_by_key(|&i| runs.low(i as usize));
            runs.by_low = order.into_boxed_slice();
        }
        runs
    }

    /// Heap bytes held.
    pub(super) fn heap_bytes(&self) -> usize {
        (self.starts.len() + self.ranks.len() + self.by_low.len()) * 4
    }

    /// Members in run `i`.
    fn len(&self, i: usize) -> Option<u32> {
        let next = match self.ranks.get(i + 1) {
            Some(&r) => r,
            None => self.size,
        };
        next.checked_sub(*self.ranks.get(i)?)
    }

    /// Lowest parent rank in run `i`.
    fn low(&self, i: usize) -> Option<u32> {
        let start = *self.starts.get(i)?;
        if start & DESCENDING == 0 {
            Some(start)
        } else {
            (start & !DESCENDING).checked_sub(self.len(i)?.checked_sub(1)?)
        }
    }

    /// Parent rank of member `rank` (`rank < size`).
    #[inline]
    pub(super) fn parent_rank(&self, rank: u32) -> Option<u32> {
        let i = self.ranks.partition_point(|&r| r <= rank).checked_sub(1)?;
        self.in_run(i, rank - *self.ranks.get(i)?)
    }

    /// Group ranks `ranks[i]..end` of the members of run `i`.
    fn bounds(&self, i: usize) -> Option<(u32, u32)> {
        let end = match self.ranks.get(i + 1) {
            Some(&r) => r,
            None => self.size,
        };
        Some((*self.ranks.get(i)?, end))
    }

    /// Parent rank of the member `offset` places into run `i`.
    #[inline]
    fn in_run(&self, i: usize, offset: u32) -> Option<u32> {
        let start = *self.starts.get(i)?;
        if start & DESCENDING == 0 {
            start.checked_add(offset)
        } else {
            (start & !DESCENDING).checked_sub(offset)
        }
    }

    /// Writes the parent ranks of members `start, start + 1, …` into `out`
    /// (all members), one run after another: one search for the first run,
    /// then a counting loop per run.
    pub(super) fn fill(&self, start: u32, out: &mut [u32]) {
        let Some(mut i) = self.ranks.partition_point(|&r| r <= start).checked_sub(1) else {
            return;
        };
        let mut rank = start;
        let mut out = out;
        while !out.is_empty() {
            let Some((first, end)) = self.bounds(i) else {
                return;
            };
            let Some(&run_start) = self.starts.get(i) else {
                return;
            };
            let take = (end.saturating_sub(rank) as usize).min(out.len());
            let (head, tail) = out.split_at_mut(take);
            // Base ranks of one run: below 2^31, no wrap.
            let offset = rank - first;
            if run_start & DESCENDING == 0 {
                for (slot, k) in head.iter_mut().zip(offset..) {
                    *slot = run_start.wrapping_add(k);
                }
            } else {
                let top = run_start & !DESCENDING;
                for (slot, k) in head.iter_mut().zip(offset..) {
                    *slot = top.wrapping_sub(k);
                }
            }
            out = tail;
            rank = end;
            i += 1;
        }
    }

    /// Replaces each of `ranks` (members) by its parent rank, following
    /// the run that held the previous one: a search only when the list
    /// leaves that run for another than the next.
    pub(super) fn map_in_place(&self, ranks: &mut [u32]) {
        let mut i = 0;
        let Some((mut first, mut end)) = self.bounds(0) else {
            return;
        };
        for rank in ranks {
            let r = *rank;
            if r < first || r >= end {
                let next = self.bounds(i + 1).filter(|&(f, e)| f <= r && r < e);
                i = match next {
                    Some(_) => i + 1,
                    None => match self.ranks.partition_point(|&f| f <= r).checked_sub(1) {
                        Some(i) => i,
                        None => continue,
                    },
                };
                match self.bounds(i) {
                    Some(b) => (first, end) = b,
                    None => continue,
                }
            }
            if let Some(parent) = self.in_run(i, r - first) {
                *rank = parent;
            }
        }
    }

    /// Member index of parent rank `parent`, if it is in a run.
    ///
    /// Kept out of line: inlined into [`super::node::Node::rank_of`] it
    /// makes every call there save three more registers, the world, dense
    /// and stride answers included (their queries take only a few
    /// nanoseconds, so that shows).
    #[inline(never)]
    pub(super) fn rank_of(&self, parent: u32) -> Option<u32> {
        let i = if self.by_low.is_empty() {
            // Ascending runs in parent order: starts are sorted lows.
            self.starts
                .partition_point(|&s| s <= parent)
                .checked_sub(1)?
        } else {
            let j = self
                .by_low
                .partition_point(|&i| self.low(i as usize).is_some_and(|low| low <= parent))
                .checked_sub(1)?;
            *self.by_low.get(j)? as usize
        };
        let start = *self.starts.get(i)?;
        let offset = if start & DESCENDING == 0 {
            parent.checked_sub(start)?
        } else {
            (start & !DESCENDING).checked_sub(parent)?
        };
        if offset < self.len(i)? {
            Some(*self.ranks.get(i)? + offset)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs_of(members: &[u32]) -> Vec<(usize, u32, bool)> {
        let mut out = Vec::new();
        for_each_run(members, |i, first, descending| {
            out.push((i, first, descending))
        });
        out
    }

    #[test]
    fn runs_split_at_every_break_in_either_direction() {
        assert_eq!(runs_of(&[]), []);
        assert_eq!(runs_of(&[7]), [(0, 7, false)]);
        assert_eq!(
            runs_of(&[3, 4, 5, 9, 8, 7, 0, 1, 20]),
            [(0, 3, false), (3, 9, true), (6, 0, false), (8, 20, false)]
        );
        // 1 then 0 is a descending run that stops at zero.
        assert_eq!(runs_of(&[1, 0, 5]), [(0, 1, true), (2, 5, false)]);
    }

    #[test]
    fn lookup_and_rank_of_follow_the_member_list() {
        let cases: [&[u32]; 5] = [
            &[],
            &[0, 1, 2, 3],
            &[10, 11, 12, 40, 41, 90],
            &[9, 8, 7, 6, 20, 21, 0, 3, 2],
            &[5, 4, 3, 2, 1, 0],
        ];
        for members in cases {
            let increasing = members.windows(2).all(|p| p[0] < p[1]);
            let runs = Runs::new(members, increasing);
            assert_eq!(
                runs.heap_bytes(),
                heap_bytes(runs_of(members).len(), increasing)
            );
            for (rank, &p) in members.iter().enumerate() {
                assert_eq!(runs.parent_rank(rank as u32), Some(p));
            }
            for p in 0..100 {
                let expected = members.iter().position(|&m| m == p).map(|i| i as u32);
                assert_eq!(runs.rank_of(p), expected, "parent rank {p} in {members:?}");
            }
        }
    }
}
