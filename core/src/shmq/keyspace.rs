//! Keys of peer mappings in the registration cache.
//!
//! A process caches its mappings of peers' segments in one
//! [`RegCache`](crate::regcache::RegCache), indexed by the peer's own
//! addresses (as the owner mapped the segment). Addresses of different
//! peers overlap, and an invalidation removes every entry touching a
//! range, so each peer gets its own key space: the key of peer `p`'s
//! address `a` is `(p + 1) · 2^47 + a`. User addresses on 64-bit Linux
//! stay below 2^47 unless a program asks for more; ranges above are not
//! cached (the transport falls back to another path).

/// Bits of a peer address inside a key.
pub const ADDRESS_BITS: u32 = 47;
/// Most peers with a key space of their own.
pub const MAX_PEERS: u32 = (1 << (usize::BITS - ADDRESS_BITS)) - 1;

/// The key range `(start, len)` of `len` bytes at peer `peer`'s address
/// `addr`; `None` when the range does not fit a key space (or `usize` is
/// too narrow).
pub fn peer_key(peer: u32, addr: u64, len: u64) -> Option<(usize, usize)> {
    if peer >= MAX_PEERS || len == 0 {
        return None;
    }
    let end = addr.checked_add(len)?;
    if end > 1 << ADDRESS_BITS {
        return None;
    }
    let base = (u64::from(peer) + 1).checked_mul(1 << ADDRESS_BITS)?;
    let start = usize::try_from(base.checked_add(addr)?).ok()?;
    Some((start, usize::try_from(len).ok()?))
}

/// The whole key space of peer `peer`, to invalidate everything of it.
pub fn peer_space(peer: u32) -> Option<(usize, usize)> {
    peer_key(peer, 0, 1 << ADDRESS_BITS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_get_disjoint_spaces() {
        let (a, n) = peer_key(0, 0x7f00_0000_0000, 4096).unwrap();
        let (b, _) = peer_key(1, 0x7f00_0000_0000, 4096).unwrap();
        assert_eq!(b - a, 1 << ADDRESS_BITS);
        assert_eq!(n, 4096);
        let (s, l) = peer_space(1).unwrap();
        assert!(s <= b && b + 4096 <= s + l);
        assert!(a + 4096 <= s);
    }

    #[test]
    fn out_of_space_ranges_are_refused() {
        assert_eq!(peer_key(0, (1 << ADDRESS_BITS) - 10, 11), None);
        assert_eq!(peer_key(0, u64::MAX, 2), None);
        assert_eq!(peer_key(MAX_PEERS, 0, 1), None);
        assert_eq!(peer_key(0, 0, 0), None);
        assert!(peer_key(MAX_PEERS - 1, (1 << ADDRESS_BITS) - 1, 1).is_some());
    }
}
