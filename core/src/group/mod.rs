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
//! MPI `int`); [`PROC_NULL`] and [`UNDEFINED`] lie above that range, and
//! [`Group::translate_ranks_into`] maps them as `MPI_Group_translate_ranks`
//! does (`MPI_PROC_NULL` to itself, a process missing from the other group
//! to `MPI_UNDEFINED`). The triplets of [`Group::range_incl`] and
//! [`Group::range_excl`] are MPI's signed `int`s ([`RankRange`]), under
//! MPI's rule: only the ranks a triplet computes must be ranks of the
//! group. Invalid input (ranks out of range, duplicates, zero strides,
//! computed ranks outside the group, non-empty groups of different worlds,
//! output slices of the wrong length) is an error value naming the
//! offending entry, never a panic.
//!
//! [`Group::empty`] is `MPI_GROUP_EMPTY`: the world of no processes, which
//! every operation accepts next to a group of any world; all empty groups
//! compare identical.
//!
//! # Members
//!
//! [`Group::members`] iterates the members' world ranks in order and
//! [`Group::world_ranks`] writes them all into a slice (a communicator's
//! rank table). Both walk the storage instead of calling
//! [`Group::lookup`] for each rank: the group's own level steps through
//! its form (a stride adds its step, ranges go run after run, a bitmap
//! moves from set bit to set bit, a table is copied), and each base below
//! maps the batch of ranks in place, following its runs or bits from one
//! rank to the next; about one step per member and level, with one search
//! per batch of 64 members at most where `lookup` would search for each.
//!
//! ```
//! use fireopal_core::group::{
//!     Comparison, Group, RankRange, Representation, PROC_NULL, UNDEFINED,
//! };
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
//! assert_eq!(low.translate_ranks(&[1, 2], &both)?, [UNDEFINED, 1]);
//! assert_eq!(both.compare(&world.incl(&[2, 0])?), Comparison::Similar);
//!
//! // MPI's triplets: only computed ranks must be in the group, so `last`
//! // may lie past it (1, 3 of a group of 4); a negative stride counts down.
//! let odd = low.range_incl(&[RankRange::new(1, 4, 2)])?;
//! assert_eq!(odd.members().collect::<Vec<_>>(), [1, 3]);
//! let down = low.range_incl(&[RankRange::new(3, 0, -2)])?;
//! let mut table = [0; 2];
//! down.world_ranks(&mut table)?;
//! assert_eq!(table, [3, 1]);
//!
//! let mut out = [0; 3];
//! down.translate_ranks_into(&[1, PROC_NULL, 0], &odd, &mut out)?;
//! assert_eq!(out, [0, PROC_NULL, 1]);
//!
//! let empty = Group::empty();
//! assert_eq!(low.union(&empty)?.compare(&low), Comparison::Identical);
//! assert_eq!(empty.compare(&world.incl(&[])?), Comparison::Identical);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod bitmap;
mod build;
mod dense;
mod error;
mod members;
mod node;
mod range;
mod ranges;

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use node::Node;

pub use error::{LengthError, RangeError, RankListError, SetOpError, TranslateError, WorldError};
pub use members::Members;
pub use range::RankRange;

/// Most parent links between a group and the world or dense group its
/// lookups end at: the backstop of the flattening rule.
pub const MAX_DEPTH: u32 = 4;

/// The flattening bound: a group is stored in the shallowest form whose
/// bytes, node header included, are at most this many times those of its
/// smallest form (see [Chains and flattening](self#chains-and-flattening)).
pub const FLATTEN_FACTOR: u32 = 2;

/// Largest world: ranks must fit an MPI `int`.
pub const MAX_WORLD_SIZE: u32 = i32::MAX as u32;

/// `MPI_PROC_NULL` as this API writes it: "no process", `u32::MAX`, above
/// every rank. [`Group::translate_ranks_into`] (and
/// [`Group::translate_ranks`]) accept it among the input ranks and
/// translate it to itself, as MPI 4.0 says of `MPI_GROUP_TRANSLATE_RANKS`.
/// A binding to C's `MPI_PROC_NULL` (a negative `int` in MPICH and Open
/// MPI) maps it to and from this value.
pub const PROC_NULL: u32 = u32::MAX;

/// `MPI_UNDEFINED` as this API writes it: "no rank", `u32::MAX - 1`, above
/// every rank and distinct from [`PROC_NULL`]. [`Group::translate_ranks_into`]
/// writes it for a process that is not in the other group; it is not a
/// valid input rank there. A binding maps it to and from C's
/// `MPI_UNDEFINED`.
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

    /// The empty group (`MPI_GROUP_EMPTY`): no members, stored as the
    /// world of no processes (equal to `Group::world(0)`). Empty groups
    /// belong to no particular world: every operation accepts one next to
    /// a group of any world (the union with it is the other group, the
    /// intersection is empty, translating into it gives [`UNDEFINED`]),
    /// and any two empty groups compare [`Comparison::Identical`].
    pub fn empty() -> Group {
        let world = Arc::new(Node::world(0));
        Group {
            node: Arc::clone(&world),
            world,
            policy: StoragePolicy::Automatic,
        }
    }

    /// Whether the group has no members (`MPI_GROUP_EMPTY` or any group
    /// equal to it).
    pub fn is_empty(&self) -> bool {
        self.size() == 0
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

    /// Builds the group of `ranks` (ranks of `self`, all valid, in the new
    /// order).
    fn derive(&self, ranks: &[u32]) -> Group {
        build::from_ranks(self, ranks)
    }

    /// Both groups name processes of the same world; an empty group, with
    /// no process to name, goes with any.
    fn check_world(&self, other: &Group) -> Result<(), (u32, u32)> {
        if self.world_size() == other.world_size() || self.is_empty() || other.is_empty() {
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

    /// The ranks the triplets compute, in triplet order
    /// (`MPI_Group_range_incl`), by the rule of MPI 4.0 §7.3.2: only the
    /// computed ranks must be ranks of the group, and distinct; `last`
    /// bounds a triplet without having to be a rank itself, and a triplet
    /// whose `first` lies beyond `last` computes nothing (see
    /// [`RankRange`]). The error names the first bad triplet and rank.
    pub fn range_incl(&self, ranges: &[RankRange]) -> Result<Group, RangeError> {
        let (ranks, _) = range::expand(ranges, self.size())?;
        Ok(self.derive(&ranks))
    }

    /// This group without the ranks the triplets compute, in this group's
    /// order (`MPI_Group_range_excl`); the triplets follow the rules of
    /// [`range_incl`](Group::range_incl).
    pub fn range_excl(&self, ranges: &[RankRange]) -> Result<Group, RangeError> {
        let (_, marks) = range::expand(ranges, self.size())?;
        let kept: Vec<u32> = (0..self.size()).filter(|&r| !marks.contains(r)).collect();
        Ok(self.derive(&kept))
    }

    /// All members of `self` in its order, then the members of `other`
    /// not in `self`, in `other`'s order (`MPI_Group_union`).
    pub fn union(&self, other: &Group) -> Result<Group, SetOpError> {
        self.check_world(other)
            .map_err(|(left, right)| SetOpError::DifferentWorlds { left, right })?;
        let mut world: Vec<u32> = self.members().collect();
        let own = world.len();
        world.extend(other.members().filter(|&w| self.rank_of(w).is_none()));
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
        let ranks: Vec<u32> = self
            .members()
            .zip(0..)
            .filter_map(|(world, rank)| keep(world).then_some(rank))
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
    /// in `other` (`MPI_Group_translate_ranks`); allocates the answer.
    /// [`translate_ranks_into`](Group::translate_ranks_into) writes it
    /// into a slice of the caller's instead.
    pub fn translate_ranks(
        &self,
        ranks: &[u32],
        other: &Group,
    ) -> Result<Vec<u32>, TranslateError> {
        let mut out = vec![UNDEFINED; ranks.len()];
        self.translate_ranks_into(ranks, other, &mut out)?;
        Ok(out)
    }

    /// For each of `ranks` (ranks of `self`), writes into the same place
    /// of `out` the rank of the same process in `other`
    /// (`MPI_Group_translate_ranks`, without allocating):
    ///
    /// - a rank whose process is in `other` becomes its rank there;
    /// - a rank whose process is not in `other` becomes [`UNDEFINED`]
    ///   (`MPI_UNDEFINED`);
    /// - [`PROC_NULL`] (`MPI_PROC_NULL`) becomes [`PROC_NULL`].
    ///
    /// `out` must be as long as `ranks`. Every other input, [`UNDEFINED`]
    /// included, must be a rank of `self`: the error names the first that
    /// is not, and `out` then holds the translations before it (the rest
    /// is left as it was). Either group may be empty, whatever the
    /// other's world.
    pub fn translate_ranks_into(
        &self,
        ranks: &[u32],
        other: &Group,
        out: &mut [u32],
    ) -> Result<(), TranslateError> {
        if out.len() != ranks.len() {
            return Err(TranslateError::OutputLength {
                expected: ranks.len(),
                given: out.len(),
            });
        }
        self.check_world(other)
            .map_err(|(left, right)| TranslateError::DifferentWorlds { left, right })?;
        let size = self.size();
        for (index, (&rank, slot)) in ranks.iter().zip(out.iter_mut()).enumerate() {
            *slot = if rank == PROC_NULL {
                PROC_NULL
            } else {
                let world =
                    self.lookup(rank)
                        .ok_or(TranslateError::OutOfRange { index, rank, size })?;
                other.rank_of(world).unwrap_or(UNDEFINED)
            };
        }
        Ok(())
    }

    /// Whether both groups have the same members in the same order, the
    /// same members in another order, or not (`MPI_Group_compare`). Two
    /// empty groups are identical, whatever their worlds; non-empty groups
    /// of different worlds are unequal.
    pub fn compare(&self, other: &Group) -> Comparison {
        if self.size() != other.size() {
            return Comparison::Unequal;
        }
        if self.is_empty() {
            return Comparison::Identical;
        }
        if self.world_size() != other.world_size() {
            return Comparison::Unequal;
        }
        if Arc::ptr_eq(&self.node, &other.node) || self.members().eq(other.members()) {
            return Comparison::Identical;
        }
        // Same size and distinct members: same set iff each is in the other.
        let same_members = self.members().all(|w| other.rank_of(w).is_some());
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
