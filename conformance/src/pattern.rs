//! Payload bytes a receiver can check without being told them: a
//! deterministic stream (xorshift64*) named by a seed.

/// `len` bytes of the stream named by `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    fill(&mut out, seed);
    out
}

/// Overwrites `buf` with the stream named by `seed`.
pub fn fill(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let word = x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
}

/// Whether `buf` holds the stream named by `seed`.
pub fn matches(buf: &[u8], seed: u64) -> bool {
    buf == pattern(seed, buf.len())
}

/// The seed of message `index` from `src` to `dst`, so that a message
/// delivered to the wrong rank or in the wrong place shows.
pub fn seed(src: u32, dst: u32, index: u64) -> u64 {
    (u64::from(src) << 48) ^ (u64::from(dst) << 32) ^ index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_differ_by_seed_and_repeat_by_seed() {
        assert_eq!(pattern(7, 100), pattern(7, 100));
        assert_ne!(pattern(7, 100), pattern(8, 100));
        assert_eq!(pattern(7, 13), pattern(7, 100)[..13]);
        assert!(matches(&pattern(3, 9), 3));
        assert!(!matches(&pattern(3, 9), 4));
    }
}
