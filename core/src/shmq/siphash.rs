//! SipHash-2-4 (Aumasson and Bernstein), a keyed 64-bit hash.
//!
//! The `shm` transport tags each segment header with a hash keyed by the
//! job key, so that a process that opens a peer's segment can tell it was
//! made by a member of the job, for this rank and this file.

/// SipHash-2-4 state being fed bytes.
#[derive(Debug, Clone)]
pub struct SipHasher {
    v: [u64; 4],
    tail: [u8; 8],
    tail_len: usize,
    total: u64,
}

impl SipHasher {
    /// A hasher keyed by the 128-bit `key`.
    pub fn new(key: &[u8; 16]) -> Self {
        let mut k0 = [0u8; 8];
        let mut k1 = [0u8; 8];
        k0.copy_from_slice(&key[..8]);
        k1.copy_from_slice(&key[8..]);
        let k0 = u64::from_le_bytes(k0);
        let k1 = u64::from_le_bytes(k1);
        Self {
            v: [
                k0 ^ 0x736f_6d65_7073_6575,
                k1 ^ 0x646f_7261_6e64_6f6d,
                k0 ^ 0x6c79_6765_6e65_7261,
                k1 ^ 0x7465_6462_7974_6573,
            ],
            tail: [0; 8],
            tail_len: 0,
            total: 0,
        }
    }

    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }

    fn block(&mut self, m: u64) {
        self.v[3] ^= m;
        Self::round(&mut self.v);
        Self::round(&mut self.v);
        self.v[0] ^= m;
    }

    /// Feeds `bytes`.
    pub fn write(&mut self, bytes: &[u8]) {
        self.total = self.total.wrapping_add(bytes.len() as u64);
        for &b in bytes {
            self.tail[self.tail_len] = b;
            self.tail_len += 1;
            if self.tail_len == 8 {
                self.tail_len = 0;
                self.block(u64::from_le_bytes(self.tail));
            }
        }
    }

    /// The hash of everything fed so far.
    pub fn finish(&self) -> u64 {
        let mut last = [0u8; 8];
        last[..self.tail_len].copy_from_slice(&self.tail[..self.tail_len]);
        last[7] = self.total as u8;
        let mut s = self.clone();
        s.block(u64::from_le_bytes(last));
        s.v[2] ^= 0xff;
        for _ in 0..4 {
            Self::round(&mut s.v);
        }
        s.v[0] ^ s.v[1] ^ s.v[2] ^ s.v[3]
    }
}

/// The tag that binds a segment to a job: SipHash-2-4 keyed by the first
/// half of the 32-byte job key, over the second half, a domain string and
/// the given fields.
pub fn job_tag(job_key: &[u8; 32], domain: &[u8], fields: &[u64]) -> u64 {
    let mut key = [0u8; 16];
    key.copy_from_slice(&job_key[..16]);
    let mut h = SipHasher::new(&key);
    h.write(&job_key[16..]);
    h.write(&(domain.len() as u64).to_le_bytes());
    h.write(domain);
    for f in fields {
        h.write(&f.to_le_bytes());
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> [u8; 16] {
        core::array::from_fn(|i| i as u8)
    }

    #[test]
    fn matches_the_reference_vector() {
        // The worked example of the SipHash paper: key 00..0f, message
        // 00..0e.
        let msg: [u8; 15] = core::array::from_fn(|i| i as u8);
        let mut h = SipHasher::new(&key());
        h.write(&msg);
        assert_eq!(h.finish(), 0xa129_ca61_49be_45e5);
    }

    #[test]
    fn empty_message_vector() {
        // First entry of the reference implementation's vector table.
        let h = SipHasher::new(&key());
        assert_eq!(
            h.finish().to_le_bytes(),
            [0x31, 0x0e, 0x0e, 0xdd, 0x47, 0xdb, 0x6f, 0x72]
        );
    }

    #[test]
    fn split_writes_give_the_same_hash() {
        let msg: [u8; 40] = core::array::from_fn(|i| (i * 7) as u8);
        let mut a = SipHasher::new(&key());
        a.write(&msg);
        let mut b = SipHasher::new(&key());
        b.write(&msg[..3]);
        b.write(&msg[3..17]);
        b.write(&msg[17..]);
        assert_eq!(a.finish(), b.finish());
    }

    #[test]
    fn job_tags_depend_on_every_input() {
        let k1 = [7u8; 32];
        let mut k2 = k1;
        k2[31] ^= 1;
        let t = job_tag(&k1, b"queue", &[1, 2]);
        assert_ne!(t, job_tag(&k2, b"queue", &[1, 2]));
        assert_ne!(t, job_tag(&k1, b"queuf", &[1, 2]));
        assert_ne!(t, job_tag(&k1, b"queue", &[1, 3]));
        assert_eq!(t, job_tag(&k1, b"queue", &[1, 2]));
    }
}
