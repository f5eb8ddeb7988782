//! The triplets of `MPI_Group_range_incl` and `MPI_Group_range_excl`:
//! [`RankRange`], and the expansion of a list of triplets into the ranks
//! they compute, with the validity rules of MPI 4.0 §7.3.2.
//!
//! A triplet `(first, last, stride)` computes `first, first + stride, …,
//! first + ⌊(last - first) / stride⌋ · stride`: the ranks from `first`
//! towards `last` in the stride's direction, `last` included when reached.
//! MPI requires that every *computed* rank be a valid rank of the group
//! and that no rank be computed twice (by two triplets or one); the stride
//! must not be zero, and `first` may lie beyond `last` only for a negative
//! stride. So `(0, 1, 2)` in a group of one computes rank 0 and is
//! accepted, and `last` may be negative or past the group; `(5, 0, 1)`,
//! which runs away from its `last`, is refused, as MPICH refuses it.

use alloc::vec::Vec;

use super::{Marks, RangeError};

/// A triplet `(first, last, stride)` of [`Group::range_incl`] and
/// [`Group::range_excl`], in MPI's `int` fields (MPI 4.0 §7.3.2).
///
/// It computes the ranks `first, first + stride, …, first + ⌊(last -
/// first) / stride⌋ · stride`: from `first` towards `last` in the stride's
/// direction (down for a negative stride), `last` included when reached.
/// Only the computed ranks must be ranks of the group, and no rank may be
/// computed twice across the triplets of one call; `last` need not be a
/// rank nor be reached, and may be negative or past the group. A `first`
/// beyond `last` in the stride's direction and a zero stride are refused.
///
/// ```
/// use fireopal_core::group::{Group, RankRange};
///
/// let one = Group::world(1)?;
/// // Computes rank 0 only: accepted, though `last` is not a rank.
/// assert_eq!(one.range_incl(&[RankRange::new(0, 1, 2)])?.size(), 1);
/// // Computes 0, then -2: refused.
/// assert!(one.range_incl(&[RankRange::new(0, -3, -2)]).is_err());
/// // Runs away from its `last`: refused.
/// assert!(one.range_incl(&[RankRange::new(0, -1, 2)]).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`Group::range_incl`]: super::Group::range_incl
/// [`Group::range_excl`]: super::Group::range_excl
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RankRange {
    /// First rank computed (if any is).
    pub first: i32,
    /// Bound: no rank beyond it in the stride's direction is computed. It
    /// need not be a rank of the group, nor be reached.
    pub last: i32,
    /// Step between computed ranks; zero is refused.
    pub stride: i32,
}

impl RankRange {
    /// The triplet `(first, last, stride)`.
    pub const fn new(first: i32, last: i32, stride: i32) -> Self {
        RankRange {
            first,
            last,
            stride,
        }
    }

    /// How many ranks the triplet computes: 0 for a zero stride or a
    /// `first` beyond `last` in the stride's direction, at most 2^32.
    fn count(&self) -> u64 {
        let span = i64::from(self.last) - i64::from(self.first);
        let stride = i64::from(self.stride);
        if stride == 0 || (span != 0 && (span < 0) != (stride < 0)) {
            return 0;
        }
        // Same signs (or span 0): the quotient is ⌊span / stride⌋ >= 0.
        (span / stride).unsigned_abs() + 1
    }
}

/// Expands `ranges` over a group of `size` ranks, in triplet order and
/// each triplet in its own order: the computed ranks, and their marks.
/// The first zero stride, triplet running away from its `last`, computed
/// rank outside the group or repeated rank is the error. Each computed rank is checked as it is reached, so
/// the work is at most `size + 1` steps past the triplets, however far
/// their `last` lies.
pub(super) fn expand(ranges: &[RankRange], size: u32) -> Result<(Vec<u32>, Marks), RangeError> {
    let mut marks = Marks::new(size);
    let mut ranks = Vec::new();
    for (triplet, range) in ranges.iter().enumerate() {
        if range.stride == 0 {
            return Err(RangeError::ZeroStride { triplet });
        }
        if range.count() == 0 {
            return Err(RangeError::WrongDirection { triplet });
        }
        let (first, stride) = (i64::from(range.first), i64::from(range.stride));
        for k in 0..range.count() {
            // k < 2^32 and |stride| <= 2^31: no overflow in i64, and the
            // rank lies between `first` and `last`, so it fits an i32.
            let computed = first + k as i64 * stride;
            let rank = match u32::try_from(computed) {
                Ok(rank) if rank < size => rank,
                _ => {
                    return Err(RangeError::OutOfRange {
                        triplet,
                        rank: computed as i32,
                        size,
                    })
                }
            };
            if !marks.insert(rank) {
                return Err(RangeError::Duplicate { triplet, rank });
            }
            ranks.push(rank);
        }
    }
    Ok((ranks, marks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_follows_the_floor_formula_and_the_direction() {
        let count = |f, l, s| RankRange::new(f, l, s).count();
        assert_eq!(count(0, 9, 4), 3);
        assert_eq!(count(0, 8, 4), 3);
        assert_eq!(count(5, 5, 7), 1);
        assert_eq!(count(5, 5, -7), 1);
        assert_eq!(count(9, 0, -3), 4);
        assert_eq!(count(5, 0, 1), 0);
        assert_eq!(count(0, 5, -1), 0);
        assert_eq!(count(0, 5, 0), 0);
        assert_eq!(count(i32::MIN, i32::MAX, 1), 1 << 32);
        assert_eq!(count(i32::MAX, i32::MIN, -1), 1 << 32);
        assert_eq!(count(i32::MAX, i32::MIN, i32::MIN), 2);
        assert_eq!(count(0, i32::MAX, i32::MAX), 2);
    }

    #[test]
    fn huge_triplets_stop_at_the_first_bad_rank() {
        let err = expand(&[RankRange::new(0, i32::MAX, 1)], 3)
            .map(|(ranks, _)| ranks)
            .unwrap_err();
        assert_eq!(
            err,
            RangeError::OutOfRange {
                triplet: 0,
                rank: 3,
                size: 3
            }
        );
        let err = expand(&[RankRange::new(i32::MAX, i32::MIN, -1)], 3)
            .map(|(ranks, _)| ranks)
            .unwrap_err();
        assert_eq!(
            err,
            RangeError::OutOfRange {
                triplet: 0,
                rank: i32::MAX,
                size: 3
            }
        );
        // A stride past `last` computes `first` alone, `last` negative.
        let (ranks, _) = expand(&[RankRange::new(2, -5, i32::MIN)], 3).unwrap();
        assert_eq!(ranks, [2]);
        // The second step of this one lands on a negative rank.
        let err = expand(&[RankRange::new(2, i32::MIN, i32::MIN)], 3)
            .map(|(ranks, _)| ranks)
            .unwrap_err();
        assert_eq!(
            err,
            RangeError::OutOfRange {
                triplet: 0,
                rank: 2 + i32::MIN,
                size: 3
            }
        );
    }
}
