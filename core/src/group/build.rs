//! Choosing and building the storage of a new group: the candidate forms
//! over every base on the parent chain and over the world, and the
//! flattening rule that picks one (stated in the module doc of
//! [`super`]).

use alloc::sync::Arc;
use alloc::vec::Vec;

use super::bitmap::{self, Bitmap};
use super::dense::Dense;
use super::node::{Node, Store, HEADER_BYTES};
use super::ranges::{self, Runs};
use super::{Group, Representation, StoragePolicy, FLATTEN_FACTOR, MAX_DEPTH};

/// Heap bytes of a stride: none, its first rank and step sit in the node.
const STRIDE_BYTES: usize = 0;

/// What the member list looks like relative to one base group.
struct Shape {
    /// Strictly increasing base ranks (base order).
    increasing: bool,
    /// Common difference of consecutive base ranks, if there is one.
    step: Option<i32>,
    /// Maximal runs of consecutive base ranks (either direction).
    runs: usize,
}

impl Shape {
    fn of(members: &[u32]) -> Self {
        let mut increasing = true;
        let mut step = None;
        let mut arithmetic = true;
        for pair in members.windows(2) {
            if let [a, b] = *pair {
                increasing &= a < b;
                // Both below 2^31, so the difference fits an i32.
                let d = (i64::from(b) - i64::from(a)) as i32;
                match step {
                    None => step = Some(d),
                    Some(s) => arithmetic &= s == d,
                }
            }
        }
        let mut runs = 0;
        ranges::for_each_run(members, |_, _, _| runs += 1);
        Shape {
            increasing,
            // One or no member: any step describes it.
            step: if arithmetic {
                Some(step.unwrap_or(1))
            } else {
                None
            },
            runs,
        }
    }
}

/// The members as ranks of one group on the parent chain.
struct Level {
    node: Arc<Node>,
    ranks: Vec<u32>,
}

/// Which group a candidate form is relative to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Base {
    /// The world (or nothing, for dense).
    World,
    /// `levels[i]`: 0 is the parent, then its base, and so on.
    Level(usize),
}

/// One way to store the new group.
#[derive(Clone, Copy, Debug)]
struct Choice {
    kind: Representation,
    base: Base,
    /// Heap bytes, by the formulas of the module doc.
    bytes: usize,
    depth: u8,
}

impl Choice {
    /// Among forms within the flattening bound: the shallowest first (a
    /// dense table counts as one level, like a form over the world), then
    /// the least memory, then the kind with the faster lookup.
    fn key(&self) -> (u8, usize, u8, u8) {
        let speed = match self.kind {
            Representation::World | Representation::Stride => 0,
            Representation::Dense => 1,
            Representation::Bitmap => 2,
            Representation::Ranges => 3,
        };
        (self.depth.max(1), self.bytes, self.depth, speed)
    }
}

fn policy_kind(policy: StoragePolicy) -> Option<Representation> {
    match policy {
        StoragePolicy::Automatic => None,
        StoragePolicy::Dense => Some(Representation::Dense),
        StoragePolicy::Stride => Some(Representation::Stride),
        StoragePolicy::Ranges => Some(Representation::Ranges),
        StoragePolicy::Bitmap => Some(Representation::Bitmap),
    }
}

/// The sparse forms that can hold `shape` over a base of `base_size` ranks.
fn sparse_choices(
    out: &mut Vec<Choice>,
    base: Base,
    shape: &Shape,
    base_size: u32,
    members: usize,
    depth: u8,
) {
    if shape.step.is_some() {
        out.push(Choice {
            kind: Representation::Stride,
            base,
            bytes: STRIDE_BYTES,
            depth,
        });
    }
    out.push(Choice {
        kind: Representation::Ranges,
        base,
        bytes: ranges::heap_bytes(shape.runs, shape.increasing),
        depth,
    });
    if shape.increasing {
        out.push(Choice {
            kind: Representation::Bitmap,
            base,
            bytes: bitmap::heap_bytes(base_size as usize, members),
            depth,
        });
    }
}

/// The flattening rule: the forced kind if some base can hold it (else
/// every kind), then the best key among the forms whose full size (node
/// header included) is at most `FLATTEN_FACTOR` times the smallest one's.
fn pick(choices: &[Choice], forced: Option<Representation>) -> Option<Choice> {
    let forced = forced.filter(|&kind| choices.iter().any(|c| c.kind == kind));
    let pool = || {
        choices
            .iter()
            .filter(move |c| forced.is_none_or(|kind| c.kind == kind))
    };
    let least = pool().map(|c| c.bytes).min()?;
    let bound = least
        .saturating_add(HEADER_BYTES)
        .saturating_mul(FLATTEN_FACTOR as usize)
        - HEADER_BYTES;
    pool()
        .filter(|c| c.bytes <= bound)
        .min_by_key(|c| c.key())
        .copied()
}

fn is_identity(members: &[u32], size: u32) -> bool {
    members.len() == size as usize && members.iter().zip(0..).all(|(&m, i)| m == i)
}

/// The members' ranks in `from` and in each group below it on the chain,
/// down to the world or a dense group, and their world ranks. Ranks must
/// be valid in `from`.
fn walk(from: &Arc<Node>, ranks: &[u32]) -> (Vec<Level>, Vec<u32>) {
    let mut levels = Vec::new();
    let mut node = Arc::clone(from);
    let mut ranks = ranks.to_vec();
    while !node.is_world() {
        let next = node.base().map(Arc::clone);
        let mapped: Vec<u32> = match next {
            Some(_) => ranks.iter().filter_map(|&r| node.base_rank(r)).collect(),
            // Dense: the table holds world ranks.
            None => ranks.iter().filter_map(|&r| node.world_rank(r)).collect(),
        };
        levels.push(Level { node, ranks });
        match next {
            Some(below) => {
                node = below;
                ranks = mapped;
            }
            None => return (levels, mapped),
        }
    }
    (levels, ranks)
}

/// Builds the group of `ranks` (ranks of `base`, in the new order). The
/// new group inherits `base`'s policy.
pub(super) fn from_ranks(base: &Group, ranks: &[u32]) -> Group {
    let (levels, world) = walk(&base.node, ranks);
    choose(base, &levels, &world)
}

/// Builds the group whose members are `world` (world ranks, group order)
/// with no parent to be relative to (a union). The new group inherits
/// `base`'s policy.
pub(super) fn from_world(base: &Group, world: &[u32]) -> Group {
    choose(base, &[], world)
}

fn choose(base: &Group, levels: &[Level], world: &[u32]) -> Group {
    let share = |node: &Arc<Node>| Group {
        node: Arc::clone(node),
        world: Arc::clone(&base.world),
        policy: base.policy,
    };
    // Equal to a group on the chain or to the world: share that node.
    if let Some(level) = levels.iter().find(|l| is_identity(&l.ranks, l.node.size)) {
        return share(&level.node);
    }
    if is_identity(world, base.world.size) {
        return share(&base.world);
    }
    let members = world.len();
    let mut choices = Vec::with_capacity(4 + 3 * levels.len());
    choices.push(Choice {
        kind: Representation::Dense,
        base: Base::World,
        bytes: members * 4,
        depth: 0,
    });
    let world_shape = Shape::of(world);
    sparse_choices(
        &mut choices,
        Base::World,
        &world_shape,
        base.world.size,
        members,
        1,
    );
    // A base already at the depth bound is skipped (the backstop). Rank
    // lists always match in length, as every rank passed in is valid.
    let mut shapes = Vec::with_capacity(levels.len());
    for (i, level) in levels.iter().enumerate() {
        let usable = u32::from(level.node.depth) < MAX_DEPTH && level.ranks.len() == members;
        let shape = usable.then(|| Shape::of(&level.ranks));
        if let Some(shape) = &shape {
            sparse_choices(
                &mut choices,
                Base::Level(i),
                shape,
                level.node.size,
                members,
                level.node.depth + 1,
            );
        }
        shapes.push(shape);
    }
    let chosen = pick(&choices, policy_kind(base.policy));
    let level = |i: usize| Some((levels.get(i)?, shapes.get(i)?.as_ref()?));
    let node = match chosen {
        Some(c) if c.kind == Representation::Dense => None,
        Some(c) => match c.base {
            Base::World => Some(sparse_node(c, &base.world, world, &world_shape)),
            Base::Level(i) => level(i).map(|(l, shape)| sparse_node(c, &l.node, &l.ranks, shape)),
        },
        None => None,
    }
    .unwrap_or_else(|| Node {
        size: members as u32,
        depth: 0,
        store: Store::Dense(Dense::new(world.into())),
    });
    Group {
        node: Arc::new(node),
        world: Arc::clone(&base.world),
        policy: base.policy,
    }
}

/// Builds a stride, ranges or bitmap node over `over` (anything else falls
/// back to ranges, which hold every member list).
fn sparse_node(choice: Choice, over: &Arc<Node>, members: &[u32], shape: &Shape) -> Node {
    let parent = Arc::clone(over);
    let store = match (choice.kind, shape.step) {
        (Representation::Stride, Some(step)) => Store::Stride {
            parent,
            first: members.first().copied().unwrap_or(0),
            step,
        },
        (Representation::Bitmap, _) if shape.increasing => Store::Bitmap {
            bits: Bitmap::new(over.size, members),
            parent,
        },
        _ => Store::Ranges {
            runs: Runs::new(members, shape.increasing),
            parent,
        },
    };
    Node {
        size: members.len() as u32,
        depth: over.depth + 1,
        store,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(kind: Representation, base: Base, bytes: usize, depth: u8) -> Choice {
        Choice {
            kind,
            base,
            bytes,
            depth,
        }
    }

    #[test]
    fn flatter_forms_win_only_within_the_bound() {
        use Representation::{Bitmap, Dense, Ranges, Stride};
        let h = HEADER_BYTES;
        let over_parent = choice(Bitmap, Base::Level(0), 1000, 3);
        // World form exactly at the bound: taken.
        let at_bound = choice(Bitmap, Base::World, 2 * (1000 + h) - h, 1);
        let picked = pick(&[over_parent, at_bound], None).map(|c| c.base);
        assert_eq!(picked, Some(Base::World));
        // One byte over: the chain is kept.
        let over = choice(Bitmap, Base::World, 2 * (1000 + h) - h + 1, 1);
        let picked = pick(&[over_parent, over], None).map(|c| c.base);
        assert_eq!(picked, Some(Base::Level(0)));
        // A grandparent within the bound beats the parent.
        let grandparent = choice(Ranges, Base::Level(1), 1500, 2);
        let picked = pick(&[over_parent, over, grandparent], None).map(|c| c.base);
        assert_eq!(picked, Some(Base::Level(1)));
        // Dense counts as one level: the smaller of dense and a form over
        // the world wins, as without any chain.
        let dense = choice(Dense, Base::World, 400, 0);
        let world_bitmap = choice(Bitmap, Base::World, 300, 1);
        let picked = pick(&[dense, world_bitmap], None).map(|c| c.kind);
        assert_eq!(picked, Some(Bitmap));
        // Equal bytes and depth: the faster lookup.
        let stride = choice(Stride, Base::World, 0, 1);
        let ranges = choice(Ranges, Base::World, 0, 1);
        assert_eq!(pick(&[ranges, stride], None).map(|c| c.kind), Some(Stride));
    }

    #[test]
    fn a_forced_kind_limits_the_candidates_when_some_base_holds_it() {
        use Representation::{Bitmap, Dense, Ranges, Stride};
        let choices = [
            choice(Dense, Base::World, 4000, 0),
            choice(Ranges, Base::World, 9000, 1),
            choice(Stride, Base::Level(0), 0, 2),
        ];
        let picked = pick(&choices, Some(Ranges)).map(|c| (c.kind, c.base));
        assert_eq!(picked, Some((Ranges, Base::World)));
        // Stride only over the parent: kept there, whatever the bound.
        let picked = pick(&choices, Some(Stride)).map(|c| (c.kind, c.base));
        assert_eq!(picked, Some((Stride, Base::Level(0))));
        // No base holds a bitmap: the automatic rule.
        let picked = pick(&choices, Some(Bitmap)).map(|c| c.kind);
        assert_eq!(picked, pick(&choices, None).map(|c| c.kind));
        assert_eq!(pick(&[], None).map(|c| c.kind), None);
    }
}
