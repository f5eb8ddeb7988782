//! Choosing and building the storage of a new group (the rules are in the
//! module doc of [`super`]).

use alloc::sync::Arc;
use alloc::vec::Vec;

use super::bitmap::{self, Bitmap};
use super::dense::Dense;
use super::node::{Node, Store};
use super::ranges::{self, Runs};
use super::{Group, Representation, StoragePolicy, MAX_DEPTH};

/// Heap bytes of a stride: first parent rank and step.
const STRIDE_BYTES: usize = 8;

/// What the member list looks like relative to one base group.
struct Shape {
    /// Strictly increasing parent ranks (parent order).
    increasing: bool,
    /// Common difference of consecutive parent ranks, if there is one.
    step: Option<i32>,
    /// Maximal runs of consecutive parent ranks (either direction).
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

/// Which group the sparse forms are relative to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Base {
    World,
    Parent,
}

/// One way to store the new group.
#[derive(Clone, Copy)]
struct Choice {
    kind: Representation,
    base: Base,
    bytes: usize,
    depth: u8,
}

impl Choice {
    /// Least memory first; on a tie, the shorter chain, then the kind with
    /// the faster lookup.
    fn key(&self) -> (usize, u8, u8) {
        let speed = match self.kind {
            Representation::World | Representation::Stride => 0,
            Representation::Dense => 1,
            Representation::Bitmap => 2,
            Representation::Ranges => 3,
        };
        (self.bytes, self.depth, speed)
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

fn is_identity(members: &[u32], size: u32) -> bool {
    members.len() == size as usize && members.iter().zip(0..).all(|(&m, i)| m == i)
}

/// Builds the group whose members are `world` (world ranks, group order).
/// `parent`, when given, holds the same members as ranks of `base`, which
/// lets the sparse forms be relative to `base` rather than to the world.
/// The new group inherits `base`'s policy.
pub(super) fn build(base: &Group, parent: Option<&[u32]>, world: &[u32]) -> Group {
    let parent = parent.filter(|m| m.len() == world.len());
    if parent.is_some_and(|m| is_identity(m, base.node.size)) {
        return base.clone();
    }
    if is_identity(world, base.world.size) {
        return Group {
            node: Arc::clone(&base.world),
            world: Arc::clone(&base.world),
            policy: base.policy,
        };
    }
    let members = world.len();
    let mut choices = Vec::with_capacity(7);
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
    // Relative to the parent only while the chain stays within the bound;
    // past it, the group is resolved against the world (flattening).
    let parent_shape = parent
        .filter(|_| !base.node.is_world() && u32::from(base.node.depth) < MAX_DEPTH)
        .map(|m| (m, Shape::of(m)));
    if let Some((_, shape)) = &parent_shape {
        sparse_choices(
            &mut choices,
            Base::Parent,
            shape,
            base.node.size,
            members,
            base.node.depth + 1,
        );
    }
    let forced = policy_kind(base.policy);
    let best = choices
        .iter()
        .filter(|c| Some(c.kind) == forced)
        .min_by_key(|c| c.key())
        .or_else(|| choices.iter().min_by_key(|c| c.key()))
        .copied();
    let node = match (best, &parent_shape) {
        (Some(c), Some((m, shape))) if c.base == Base::Parent => {
            sparse_node(c, &base.node, m, shape)
        }
        (Some(c), _) if c.kind != Representation::Dense => {
            sparse_node(c, &base.world, world, &world_shape)
        }
        _ => Node {
            size: members as u32,
            depth: 0,
            store: Store::Dense(Dense::new(world.into())),
        },
    };
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
