//! Process groups: ordered sets of processes named by their world rank,
//! stored compactly, with the MPI group operations (MPI 4.x, chapter
//! "Groups, Contexts, Communicators").
//!
//! # Storage
//!
//! The world group of `n` processes is stored in O(1): rank `i` is world
//! rank `i`. Every other group is stored in one of four forms; the sparse
//! ones are relative to a *base*, the world or a group on the chain it was
//! made from:
//!
//! | form | holds | heap bytes | `lookup` | `rank_of` |
//! |---|---|---|---|---|
//! | dense | world rank of each member | `4n` | O(1) | O(1) expected |
//! | stride | base ranks `first + i·step`, `step` may be negative | `0` (first and step sit in the node) | O(1) | O(1) |
//! | ranges | runs of base ranks stepping by +1 or -1, runs in any order | `8R` in base order, else `12R` | O(log R) | O(log R) |
//! | bitmap | a bit per base rank, members in base order | `80·⌈p/512⌉ + 4·(⌈n/2^s⌉ + 1)` | O(1) select | O(1) rank |
//!
//! with `n` members, `R` runs, `p` ranks in the base and
//! `s = clamp(⌊log2(512·n/p)⌋, 4, 8)` (one select sample per block's worth
//! of members); each sparse level adds the base's own cost to `lookup` and
//! `rank_of`. Every node also has a fixed header of `H` bytes (the
//! [`Group::memory_bytes`] of the world group, 96 on 64-bit targets).
//! Dense `rank_of` uses a hash index (`8·2^⌈log2 2n⌉` bytes) built on its
//! first call and reported by [`Group::memory_bytes`] from then on; it is
//! not part of the choice.
//!
//! The *candidates* for a new group are: dense; stride, ranges and bitmap
//! over the world; and the same three over each group of its parent
//! chain: the group `incl`, `excl`, `range_*`, `intersection` or
//! `difference` was called on, that group's base, and so on down to the
//! world or a dense group. A union need not lie inside either operand, so
//! its only base is the world. Bitmap needs members in base order, stride
//! an arithmetic progression; ranges hold any order (a reversed group is
//! one descending run, and a reversed stride has a negative step), so a
//! group ordered differently from its bases is stored as stride, ranges or
//! dense, never refused. A result equal to a group of its chain (or to the
//! world) shares that node instead of storing anything. Which candidate is
//! taken is the flattening rule below.
//!
//! A [`StoragePolicy`] other than `Automatic` keeps only the candidates of
//! its kind when some base can hold the group in that kind (dense always
//! can, ranges always can, stride needs an arithmetic progression, bitmap
//! base order), and all candidates otherwise; the same rule then picks
//! one. Results inherit the policy of the group the operation was called
//! on.
//!
//! # Chains and flattening
//!
//! Sparse groups keep their base alive through an [`Arc`] and resolve a
//! rank by walking bases down to the world or a dense group, one step per
//! link (a multiply-add, a binary search or a select); [`Group::depth`]
//! counts the links. Deep chains are slow, so each new group is placed by
//! this rule:
//!
//! 1. Give each candidate its full size, `H` + heap bytes, and its depth:
//!    0 for dense, 1 over the world, the base's depth + 1 over a base.
//! 2. With `S` the smallest full size, keep the candidates of full size at
//!    most [`FLATTEN_FACTOR`]` · S` (twice the smallest).
//! 3. Take the shallowest of those, dense counting as depth 1 (a table
//!    read costs about one level over the world); then the smaller; then
//!    the faster lookup (stride, dense, bitmap, ranges).
//!
//! A base already [`MAX_DEPTH`] links deep is not offered, so no chain
//! ever grows past that (the backstop when no flatter form is within the
//! bound).
//!
//! The candidates over each base are built from the members' actual ranks
//! in that base (the operation resolves every member anyway), so
//! compositions are found exactly rather than estimated:
//!
//! - stride `(f, s)` over stride `(f_b, s_b)` is stride `(f_b + f·s_b,
//!   s·s_b)` over the base's base, again 0 heap bytes: a chain of strides
//!   is one stride over the world (depth 1), or over the nearest base that
//!   is not a stride;
//! - ranges of `R` runs over ranges of `R_b` runs (or over a stride of step
//!   ±1) are at most `R + R_b` runs over the base's base, since a run only
//!   splits where it crosses a run boundary of the base; when the `8R`
//!   bytes over the parent are the smallest candidate, they flatten if
//!   those runs cost at most `2·(H + 8R) - H` bytes;
//! - a group in base order over a chain whose levels are all in order
//!   (bitmaps, ascending ranges, positive strides) is in world order, so a
//!   bitmap over the world of `N` ranks holds it, about `80N/512` bytes
//!   against `80p/512` over a parent of `p` ranks: a bitmap of a bitmap
//!   flattens while its parent holds more than about half of the world
//!   (at equal density of select samples);
//! - dense groups are absolute: one table read at any depth.
//!
//! What stays chained is a form far cheaper than any flatter one, such as
//! a stride (0 heap bytes) over a bitmap whose members over the world
//! would need a bitmap or a table; its lookups then pay the base's cost
//! too.
//!
//! Memory guarantees that follow (the tests check them):
//!
//! - a group made from the world, or from a dense group, has only
//!   one-level candidates and takes the smallest: never larger than any
//!   forced kind;
//! - a group made on a chain takes at most twice the full size of its
//!   smallest candidate, so at most [`FLATTEN_FACTOR`] times what any
//!   forced kind would take from the same parent; and never more than the
//!   same members built from the world (those candidates are always
//!   offered, at the shallowest depth);
//! - a chain of strides costs `H` at any length, and ranges cost O(runs)
//!   however they are chained.
//!
//! `rank_of` walks the same links (base first, then each level's
//! inverse), so flattening speeds it up as much as `lookup`.
//!
//! # Ranks
//!
//! Ranks and world ranks are `u32` below [`MAX_WORLD_SIZE`] (they fit an
//! MPI `int`); [`PROC_NULL`] and [`UNDEFINED`] lie above that range.
//! Invalid input (ranks out of range, duplicates, zero strides, triplets
//! past the group or running the wrong way, groups of different worlds) is
//! an error value, never a panic.
//!
//! ```
//! use fireopal_core::group::{Comparison, Group, RankRange, Representation};
//!
//! let world = Group::world(1_000_000)?;
//! let even = world.range_incl(&[RankRange::new(0, 999_998, 2)])?;
//! assert_eq!(even.representation(), Representation::Stride);
//! assert_eq!(even.lookup(3), Some(6));
//! assert_eq!(even.rank_of(7), None);
//!
//! // A stride of a stride is flattened into one stride over the world.
//! let fourth = even.range_incl(&[RankRange::new(0, 499_998, 2)])?;
//! assert_eq!((fourth.representation(), fourth.depth()), (Representation::Stride, 1));
//! assert_eq!(fourth.lookup(3), Some(12));
//!
//! let low = world.incl(&[0, 1, 2, 3])?;
//! let both = low.intersection(&even)?;
//! assert_eq!(both.size(), 2);
//! assert_eq!(low.translate_ranks(&[1, 2], &both)?, [fireopal_core::group::UNDEFINED, 1]);
//! assert_eq!(both.compare(&world.incl(&[2, 0])?), Comparison::Similar);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod bitmap;
mod build;
mod dense;
mod node;
mod ranges;

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use node::Node;

/// Most parent links between a group and the world or dense group its
/// lookups end at: the backstop of the flattening rule.
pub const MAX_DEPTH: u32 = 4;

/// The flattening bound: a group is stored in the shallowest form whose
/// bytes, node header included, are at most this many times those of its
/// smallest form (see [Chains and flattening](self#chains-and-flattening)).
pub const FLATTEN_FACTOR: u32 = 2;

/// Largest world: ranks must fit an MPI `int`.
pub const MAX_WORLD_SIZE: u32 = i32::MAX as u32;

/// "No process" (`MPI_PROC_NULL`): accepted by
/// [`Group::translate_ranks`] and mapped to itself.
pub const PROC_NULL: u32 = u32::MAX;

/// "Not a member" (`MPI_UNDEFINED`): what [`Group::translate_ranks`] gives
/// for a process missing from the other group.
pub const UNDEFINED: u32 = u32::MAX - 1;

/// An ordered set of processes. Immutable; cloning is cheap and shares
/// the storage, and groups are `Send + Sync`, so communicators on any
/// thread can hold the same one.
#[derive(Clone)]
pub struct Group {
    node: Arc<Node>,
    world: Arc<Node>,
    policy: StoragePolicy,
}

/// How a group is stored; see the [module documentation](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Representation {
    /// The world itself: rank `i` is world rank `i`.
    World,
    /// A table of world ranks.
    Dense,
    /// `first + i * step` over a base group.
    Stride,
    /// Runs of consecutive ranks of a base group.
    Ranges,
    /// A bitmap over a base group, members in base order.
    Bitmap,
}

/// Which storage new groups take; see the [module documentation](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum StoragePolicy {
    /// The form with the least memory.
    #[default]
    Automatic,
    /// Always dense tables (no parent chains).
    Dense,
    /// Stride where the members form an arithmetic progression.
    Stride,
    /// Ranges (every group can be held).
    Ranges,
    /// Bitmap where the members are in base order.
    Bitmap,
}

/// Result of [`Group::compare`] (`MPI_Group_compare`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Comparison {
    /// Same members in the same order (`MPI_IDENT`).
    Identical,
    /// Same members in another order (`MPI_SIMILAR`).
    Similar,
    /// Different members (`MPI_UNEQUAL`).
    Unequal,
}

/// A triplet of [`Group::range_incl`] and [`Group::range_excl`]: ranks
/// `first, first + stride, …` up to `last` (included when reached).
/// `stride` is negative when `first > last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RankRange {
    /// First rank.
    pub first: u32,
    /// Bound, a valid rank too.
    pub last: u32,
    /// Step, never zero.
    pub stride: i32,
}

impl RankRange {
    /// The triplet `(first, last, stride)`.
    pub const fn new(first: u32, last: u32, stride: i32) -> Self {
        RankRange {
            first,
            last,
            stride,
        }
    }
}

/// Why [`Group::world`] refused a size.
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

/// Why [`Group::incl`] or [`Group::excl`] refused a rank list.
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

/// Why [`Group::range_incl`] or [`Group::range_excl`] refused triplets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeError {
    /// Triplet `triplet` has a zero stride.
    ZeroStride {
        /// Position of the triplet.
        triplet: usize,
    },
    /// Triplet `triplet` starts or ends past the group.
    OutOfRange {
        /// Position of the triplet.
        triplet: usize,
        /// Its `first` or `last`.
        rank: u32,
        /// Size of the group.
        size: u32,
    },
    /// Triplet `triplet` steps away from its `last` (`first < last` with a
    /// negative stride or `first > last` with a positive one).
    WrongDirection {
        /// Position of the triplet.
        triplet: usize,
    },
    /// Triplet `triplet` reaches a rank already given.
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
            Self::OutOfRange {
                triplet,
                rank,
                size,
            } => write!(
                f,
                "triplet {triplet} names rank {rank}, not in a group of {size}"
            ),
            Self::WrongDirection { triplet } => {
                write!(f, "triplet {triplet} steps away from its last rank")
            }
            Self::Duplicate { triplet, rank } => {
                write!(f, "triplet {triplet} repeats rank {rank}")
            }
        }
    }
}

impl core::error::Error for RangeError {}

/// Why [`Group::union`], [`Group::intersection`] or [`Group::difference`]
/// refused two groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetOpError {
    /// The groups come from worlds of different sizes.
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

/// Why [`Group::translate_ranks`] refused its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TranslateError {
    /// `ranks[index]` is neither a rank of the group nor [`PROC_NULL`].
    OutOfRange {
        /// Position in the list.
        index: usize,
        /// The rank.
        rank: u32,
        /// Size of the group.
        size: u32,
    },
    /// The groups come from worlds of different sizes.
    DifferentWorlds {
        /// World size of the first group.
        left: u32,
        /// World size of the second group.
        right: u32,
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
        }
    }
}

impl core::error::Error for TranslateError {}

/// One bit per rank of a group, for duplicate checks and exclusions.
struct Marks(Vec<u64>);

impl Marks {
    fn new(size: u32) -> Self {
        Marks(vec![0; (size as usize).div_ceil(64)])
    }

    /// Marks `rank`; false if it was already marked (or out of range).
    fn insert(&mut self, rank: u32) -> bool {
        let bit = 1u64 << (rank % 64);
        match self.0.get_mut(rank as usize / 64) {
            Some(word) if *word & bit == 0 => {
                *word |= bit;
                true
            }
            _ => false,
        }
    }

    fn contains(&self, rank: u32) -> bool {
        self.0
            .get(rank as usize / 64)
            .is_some_and(|word| word >> (rank % 64) & 1 == 1)
    }
}

impl Group {
    /// The world group of `size` processes (`MPI_COMM_WORLD`'s group),
    /// stored in O(1), with the [`StoragePolicy::Automatic`] policy.
    pub fn world(size: u32) -> Result<Group, WorldError> {
        if size > MAX_WORLD_SIZE {
            return Err(WorldError::TooLarge { size });
        }
        let world = Arc::new(Node::world(size));
        Ok(Group {
            node: Arc::clone(&world),
            world,
            policy: StoragePolicy::Automatic,
        })
    }

    /// The same group whose derived groups follow `policy`.
    pub fn with_policy(&self, policy: StoragePolicy) -> Group {
        Group {
            policy,
            ..self.clone()
        }
    }

    /// The policy derived groups follow.
    pub fn policy(&self) -> StoragePolicy {
        self.policy
    }

    /// Number of members (`MPI_Group_size`).
    pub fn size(&self) -> u32 {
        self.node.size
    }

    /// Number of processes in the world this group belongs to.
    pub fn world_size(&self) -> u32 {
        self.world.size
    }

    /// World rank of member `rank`, or `None` if `rank >= size()`.
    #[inline]
    pub fn lookup(&self, rank: u32) -> Option<u32> {
        self.node.world_rank(rank)
    }

    /// Rank in this group of the process with world rank `world_rank`, or
    /// `None` when it is not a member (`MPI_Group_rank` for the calling
    /// process, which answers `MPI_UNDEFINED` there).
    #[inline]
    pub fn rank_of(&self, world_rank: u32) -> Option<u32> {
        self.node.rank_of(world_rank)
    }

    /// How this group is stored.
    pub fn representation(&self) -> Representation {
        self.node.representation()
    }

    /// Parent links from this group to the world or dense group its
    /// lookups end at (0 for those two), at most [`MAX_DEPTH`].
    pub fn depth(&self) -> u32 {
        u32::from(self.node.depth)
    }

    /// Bytes this group's own storage uses: its node and the heap it owns.
    /// Bases it refers to are shared and not counted.
    pub fn memory_bytes(&self) -> usize {
        self.node.memory_bytes()
    }

    /// World ranks of all members, in order.
    fn world_ranks(&self) -> Vec<u32> {
        (0..self.size()).filter_map(|r| self.lookup(r)).collect()
    }

    /// Builds the group of `ranks` (ranks of `self`, all valid, in the new
    /// order).
    fn derive(&self, ranks: &[u32]) -> Group {
        build::from_ranks(self, ranks)
    }

    fn check_world(&self, other: &Group) -> Result<(), (u32, u32)> {
        if self.world_size() == other.world_size() {
            Ok(())
        } else {
            Err((self.world_size(), other.world_size()))
        }
    }

    /// Marks the listed ranks, refusing ranks out of range and repeats.
    fn mark_ranks(&self, ranks: &[u32]) -> Result<Marks, RankListError> {
        let size = self.size();
        let mut marks = Marks::new(size);
        for (index, &rank) in ranks.iter().enumerate() {
            if rank >= size {
                return Err(RankListError::OutOfRange { index, rank, size });
            }
            if !marks.insert(rank) {
                return Err(RankListError::Duplicate { index, rank });
            }
        }
        Ok(marks)
    }

    /// The members `ranks[0], ranks[1], …` of this group, in that order
    /// (`MPI_Group_incl`). An empty list gives the empty group.
    pub fn incl(&self, ranks: &[u32]) -> Result<Group, RankListError> {
        self.mark_ranks(ranks)?;
        Ok(self.derive(ranks))
    }

    /// This group without the listed ranks, in this group's order
    /// (`MPI_Group_excl`).
    pub fn excl(&self, ranks: &[u32]) -> Result<Group, RankListError> {
        let marks = self.mark_ranks(ranks)?;
        let kept: Vec<u32> = (0..self.size()).filter(|&r| !marks.contains(r)).collect();
        Ok(self.derive(&kept))
    }

    /// Expands triplets in order, refusing bad ones and repeats.
    fn expand(&self, ranges: &[RankRange]) -> Result<(Vec<u32>, Marks), RangeError> {
        let size = self.size();
        let mut marks = Marks::new(size);
        let mut ranks = Vec::new();
        for (triplet, range) in ranges.iter().enumerate() {
            if range.stride == 0 {
                return Err(RangeError::ZeroStride { triplet });
            }
            for rank in [range.first, range.last] {
                if rank >= size {
                    return Err(RangeError::OutOfRange {
                        triplet,
                        rank,
                        size,
                    });
                }
            }
            let (first, last, stride) = (
                i64::from(range.first),
                i64::from(range.last),
                i64::from(range.stride),
            );
            if (last - first) * stride.signum() < 0 {
                return Err(RangeError::WrongDirection { triplet });
            }
            let count = (last - first) / stride + 1;
            for k in 0..count {
                // Between first and last, both valid ranks.
                let rank = (first + k * stride) as u32;
                if !marks.insert(rank) {
                    return Err(RangeError::Duplicate { triplet, rank });
                }
                ranks.push(rank);
            }
        }
        Ok((ranks, marks))
    }

    /// The ranks the triplets name, in triplet order
    /// (`MPI_Group_range_incl`). Like MPICH and Open MPI, `first` and
    /// `last` must both be ranks of the group.
    pub fn range_incl(&self, ranges: &[RankRange]) -> Result<Group, RangeError> {
        let (ranks, _) = self.expand(ranges)?;
        Ok(self.derive(&ranks))
    }

    /// This group without the ranks the triplets name, in this group's
    /// order (`MPI_Group_range_excl`).
    pub fn range_excl(&self, ranges: &[RankRange]) -> Result<Group, RangeError> {
        let (_, marks) = self.expand(ranges)?;
        let kept: Vec<u32> = (0..self.size()).filter(|&r| !marks.contains(r)).collect();
        Ok(self.derive(&kept))
    }

    /// All members of `self` in its order, then the members of `other`
    /// not in `self`, in `other`'s order (`MPI_Group_union`).
    pub fn union(&self, other: &Group) -> Result<Group, SetOpError> {
        self.check_world(other)
            .map_err(|(left, right)| SetOpError::DifferentWorlds { left, right })?;
        let mut world = self.world_ranks();
        let own = world.len();
        world.extend(
            (0..other.size())
                .filter_map(|r| other.lookup(r))
                .filter(|&w| self.rank_of(w).is_none()),
        );
        if world.len() == own {
            return Ok(self.clone());
        }
        if own == 0 {
            // Exactly `other`: share it.
            return Ok(other.with_policy(self.policy));
        }
        Ok(build::from_world(self, &world))
    }

    /// Members of `self` that `keep` accepts, in `self`'s order.
    fn filter(&self, mut keep: impl FnMut(u32) -> bool) -> Group {
        let ranks: Vec<u32> = (0..self.size())
            .filter(|&rank| self.lookup(rank).is_some_and(&mut keep))
            .collect();
        self.derive(&ranks)
    }

    /// Members of `self` that are also in `other`, in `self`'s order
    /// (`MPI_Group_intersection`).
    pub fn intersection(&self, other: &Group) -> Result<Group, SetOpError> {
        self.check_world(other)
            .map_err(|(left, right)| SetOpError::DifferentWorlds { left, right })?;
        Ok(self.filter(|w| other.rank_of(w).is_some()))
    }

    /// Members of `self` that are not in `other`, in `self`'s order
    /// (`MPI_Group_difference`).
    pub fn difference(&self, other: &Group) -> Result<Group, SetOpError> {
        self.check_world(other)
            .map_err(|(left, right)| SetOpError::DifferentWorlds { left, right })?;
        Ok(self.filter(|w| other.rank_of(w).is_none()))
    }

    /// For each of `ranks` (ranks of `self`), the rank of the same process
    /// in `other`: [`UNDEFINED`] when it is not there, and [`PROC_NULL`]
    /// for [`PROC_NULL`] (`MPI_Group_translate_ranks`).
    pub fn translate_ranks(
        &self,
        ranks: &[u32],
        other: &Group,
    ) -> Result<Vec<u32>, TranslateError> {
        self.check_world(other)
            .map_err(|(left, right)| TranslateError::DifferentWorlds { left, right })?;
        let size = self.size();
        ranks
            .iter()
            .enumerate()
            .map(|(index, &rank)| {
                if rank == PROC_NULL {
                    return Ok(PROC_NULL);
                }
                let world =
                    self.lookup(rank)
                        .ok_or(TranslateError::OutOfRange { index, rank, size })?;
                Ok(other.rank_of(world).unwrap_or(UNDEFINED))
            })
            .collect()
    }

    /// Whether both groups have the same members in the same order, the
    /// same members in another order, or not (`MPI_Group_compare`). Two
    /// empty groups are identical; groups of different worlds are unequal.
    pub fn compare(&self, other: &Group) -> Comparison {
        if self.world_size() != other.world_size() || self.size() != other.size() {
            return Comparison::Unequal;
        }
        if Arc::ptr_eq(&self.node, &other.node)
            || (0..self.size()).all(|r| self.lookup(r) == other.lookup(r))
        {
            return Comparison::Identical;
        }
        // Same size and distinct members: same set iff each is in the other.
        let same_members =
            (0..self.size()).all(|r| self.lookup(r).is_some_and(|w| other.rank_of(w).is_some()));
        if same_members {
            Comparison::Similar
        } else {
            Comparison::Unequal
        }
    }
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("size", &self.size())
            .field("world_size", &self.world_size())
            .field("representation", &self.representation())
            .field("depth", &self.depth())
            .field("policy", &self.policy)
            .finish()
    }
}
