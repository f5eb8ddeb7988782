//! What a registration covers and allows: [`Region`], a range of
//! addresses, and [`Access`], the rights it was registered with.

use core::fmt;
use core::ops::BitOr;

/// Access rights of a registration. Every registration allows local reads;
/// the flags add to that. A registration serves a request when its rights
/// [`contain`](Access::contains) the requested ones.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// Local reads only (no flag set).
    pub const LOCAL_READ: Access = Access(0);
    /// The local process may write through the registration.
    pub const LOCAL_WRITE: Access = Access(1);
    /// Peers may read the memory (RDMA get).
    pub const REMOTE_READ: Access = Access(1 << 1);
    /// Peers may write the memory (RDMA put).
    pub const REMOTE_WRITE: Access = Access(1 << 2);
    /// Peers may perform atomics on the memory.
    pub const REMOTE_ATOMIC: Access = Access(1 << 3);
    const ALL: u8 = 0b1111;

    /// Rights from their bit pattern; unknown bits are dropped.
    pub const fn from_bits(bits: u8) -> Self {
        Access(bits & Self::ALL)
    }

    /// The bit pattern of these rights.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Both sets of rights.
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }

    /// Whether these rights include all of `other`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        self.union(rhs)
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(Access, &str); 4] = [
            (Access::LOCAL_WRITE, "LOCAL_WRITE"),
            (Access::REMOTE_READ, "REMOTE_READ"),
            (Access::REMOTE_WRITE, "REMOTE_WRITE"),
            (Access::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
        ];
        f.write_str("Access(LOCAL_READ")?;
        for (flag, name) in NAMES {
            if self.contains(flag) {
                write!(f, " | {name}")?;
            }
        }
        f.write_str(")")
    }
}

/// A non-empty address range, kept as first and last byte so that it can
/// end at the top of the address space. A registration's region is whole
/// pages.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Region {
    pub(super) first: usize,
    pub(super) last: usize,
}

impl Region {
    /// The region `[base, base + len)`; `None` if `len` is zero, the range
    /// runs past the top of the address space, or it covers the whole
    /// address space (its length would not fit a `usize`).
    pub const fn new(base: usize, len: usize) -> Option<Region> {
        if len == 0 {
            return None;
        }
        match base.checked_add(len - 1) {
            Some(last) => Some(Region { first: base, last }),
            None => None,
        }
    }

    /// First byte.
    pub const fn base(&self) -> usize {
        self.first
    }

    /// Last byte (inclusive), so that a region ending at the top of the
    /// address space has one.
    pub const fn last(&self) -> usize {
        self.last
    }

    /// Length in bytes.
    pub const fn len(&self) -> usize {
        // A region never covers the whole address space, so this fits.
        self.last - self.first + 1
    }

    /// Always false: a region holds at least one byte.
    pub const fn is_empty(&self) -> bool {
        false
    }

    /// Whether every byte of `other` lies in this region.
    pub const fn contains(&self, other: &Region) -> bool {
        self.first <= other.first && other.last <= self.last
    }

    /// Whether the two regions share at least one byte.
    pub const fn overlaps(&self, other: &Region) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Region({:#x}..={:#x})", self.first, self.last)
    }
}
