//! A hasher for maps keyed by small integers that this process chooses or
//! has already checked (ranks, operation ids, cookies): one rotate, xor
//! and multiply per word, where the standard library's SipHash costs tens
//! of nanoseconds on a send path. It has no per-process seed, so it must
//! not key maps by values a peer picks freely.
//!
//! ```
//! use std::collections::HashMap;
//! use fireopal_core::id_hash::IdHash;
//!
//! let mut in_flight: HashMap<u64, &str, IdHash> = HashMap::default();
//! in_flight.insert(7, "put");
//! assert_eq!(in_flight.get(&7), Some(&"put"));
//! ```

use core::hash::{BuildHasherDefault, Hasher};

/// An odd constant with well-spread bits (the golden ratio's).
const MIX: u64 = 0x9e37_79b9_7f4a_7c15;

/// The hasher; see the module documentation.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        // The multiply leaves its best bits high; fold them into the low
        // ones that pick a bucket.
        self.0 ^ (self.0 >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }

    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(MIX);
    }

    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

/// Builds [`IdHasher`]s, for `HashMap<K, V, IdHash>`.
pub type IdHash = BuildHasherDefault<IdHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use core::hash::{BuildHasher, Hash};
    use std::collections::HashSet;

    fn hash<T: Hash>(v: T) -> u64 {
        IdHash::default().hash_one(v)
    }

    #[test]
    fn sequential_ids_spread_over_the_low_bits() {
        // The buckets a table of 1024 would use for 1024 sequential ids.
        let buckets: HashSet<u64> = (0u64..1024).map(|i| hash(i) & 1023).collect();
        assert!(
            buckets.len() > 600,
            "only {} buckets of 1024",
            buckets.len()
        );
    }

    #[test]
    fn word_order_matters() {
        assert_ne!(hash((1u64, 2u32)), hash((2u64, 1u32)));
    }
}
