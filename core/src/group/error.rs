//! The error values of the group operations: one type per family of
//! operations, each naming the offending input (its position and value)
//! so a caller can report it as MPI's error classes do.

use core::fmt;

use super::MAX_WORLD_SIZE;

/// Why [`Group::world`](super::Group::world) refused a size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorldError {
    /// More processes than [`MAX_WORLD_SIZE`].
    TooLarge {
        /// The size asked for.
        size: u32,
    },
}

impl fmt::Display for WorldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge { size } => {
                write!(f, "world of {size} processes exceeds {MAX_WORLD_SIZE}")
            }
        }
    }
}

impl core::error::Error for WorldError {}

/// Why [`Group::incl`](super::Group::incl) or
/// [`Group::excl`](super::Group::excl) refused a rank list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankListError {
    /// `ranks[index]` is not a rank of the group.
    OutOfRange {
        /// Position in the list.
        index: usize,
        /// The rank.
        rank: u32,
        /// Size of the group.
        size: u32,
    },
    /// `ranks[index]` already appeared earlier in the list.
    Duplicate {
        /// Position of the repeat.
        index: usize,
        /// The rank.
        rank: u32,
    },
}

impl fmt::Display for RankListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfRange { index, rank, size } => {
                write!(
                    f,
                    "rank {rank} at position {index} is not in a group of {size}"
                )
            }
            Self::Duplicate { index, rank } => {
                write!(f, "rank {rank} at position {index} is listed twice")
            }
        }
    }
}

impl core::error::Error for RankListError {}

/// Why [`Group::range_incl`](super::Group::range_incl) or
/// [`Group::range_excl`](super::Group::range_excl) refused triplets. The
/// triplets are expanded in order, each into its ranks in order, and the
/// first problem met is the one reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeError {
    /// Triplet `triplet` has a zero stride.
    ZeroStride {
        /// Position of the triplet.
        triplet: usize,
    },
    /// Triplet `triplet` runs away from its `last`: `first` lies beyond
    /// `last` in the stride's direction (MPICH refuses it too).
    WrongDirection {
        /// Position of the triplet.
        triplet: usize,
    },
    /// Triplet `triplet` computes `rank`, which is not a rank of the group
    /// (negative, or at least its size).
    OutOfRange {
        /// Position of the triplet.
        triplet: usize,
        /// The computed rank (it lies between the triplet's `first` and
        /// `last`, so it fits their type).
        rank: i32,
        /// Size of the group.
        size: u32,
    },
    /// Triplet `triplet` computes `rank`, which an earlier triplet, or an
    /// earlier step of the same one, already computed (overlapping
    /// triplets are erroneous in MPI).
    Duplicate {
        /// Position of the triplet.
        triplet: usize,
        /// The rank.
        rank: u32,
    },
}

impl fmt::Display for RangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroStride { triplet } => write!(f, "triplet {triplet} has a zero stride"),
            Self::WrongDirection { triplet } => write!(
                f,
                "triplet {triplet} runs away from its last rank (first beyond last in the stride's direction)"
            ),
            Self::OutOfRange {
                triplet,
                rank,
                size,
            } => write!(
                f,
                "triplet {triplet} computes rank {rank}, not in a group of {size}"
            ),
            Self::Duplicate { triplet, rank } => {
                write!(f, "triplet {triplet} repeats rank {rank}")
            }
        }
    }
}

impl core::error::Error for RangeError {}

/// Why [`Group::union`](super::Group::union),
/// [`Group::intersection`](super::Group::intersection) or
/// [`Group::difference`](super::Group::difference) refused two groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetOpError {
    /// The groups, both non-empty, come from worlds of different sizes.
    DifferentWorlds {
        /// World size of the first group.
        left: u32,
        /// World size of the second group.
        right: u32,
    },
}

impl fmt::Display for SetOpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DifferentWorlds { left, right } => {
                write!(
                    f,
                    "groups of different worlds ({left} and {right} processes)"
                )
            }
        }
    }
}

impl core::error::Error for SetOpError {}

/// Why [`Group::translate_ranks`](super::Group::translate_ranks) or
/// [`Group::translate_ranks_into`](super::Group::translate_ranks_into)
/// refused its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TranslateError {
    /// `ranks[index]` is neither a rank of the group nor
    /// [`PROC_NULL`](super::PROC_NULL).
    OutOfRange {
        /// Position in the list.
        index: usize,
        /// The rank.
        rank: u32,
        /// Size of the group.
        size: u32,
    },
    /// The groups, both non-empty, come from worlds of different sizes.
    DifferentWorlds {
        /// World size of the first group.
        left: u32,
        /// World size of the second group.
        right: u32,
    },
    /// The output slice does not have one entry per input rank.
    OutputLength {
        /// Entries needed: the number of input ranks.
        expected: usize,
        /// Entries given.
        given: usize,
    },
}

impl fmt::Display for TranslateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfRange { index, rank, size } => {
                write!(
                    f,
                    "rank {rank} at position {index} is not in a group of {size}"
                )
            }
            Self::DifferentWorlds { left, right } => {
                write!(
                    f,
                    "groups of different worlds ({left} and {right} processes)"
                )
            }
            Self::OutputLength { expected, given } => {
                write!(
                    f,
                    "output of {given} entries for {expected} ranks to translate"
                )
            }
        }
    }
}

impl core::error::Error for TranslateError {}

/// Why [`Group::world_ranks`](super::Group::world_ranks) refused its output
/// slice: it must hold exactly one entry per member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LengthError {
    /// Entries needed: the group's size.
    pub expected: usize,
    /// Entries given.
    pub given: usize,
}

impl fmt::Display for LengthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "output of {} entries for a group of {}",
            self.given, self.expected
        )
    }
}

impl core::error::Error for LengthError {}
