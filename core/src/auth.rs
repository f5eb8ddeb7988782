//! Message authentication for transports that accept connections: SHA-256
//! (FIPS 180-4) and HMAC-SHA256 (RFC 2104), plus a comparison of tags that
//! takes the same time wherever the first difference is.
//!
//! Transports use these to prove, without sending it, that a connecting
//! process holds the job key: each side answers the other's random nonce
//! with an HMAC under the key (see [`crate::wire::tcp::handshake`]).
//!
//! ```
//! use fireopal_core::auth::{hmac_sha256, sha256, tags_equal};
//!
//! let digest = sha256(b"abc");
//! assert_eq!(digest[0], 0xba);
//! let tag = hmac_sha256(b"key", b"message");
//! assert!(tags_equal(&tag, &hmac_sha256(b"key", b"message")));
//! ```

/// Length of a SHA-256 digest in bytes.
pub const DIGEST_LEN: usize = 32;
/// Length of a SHA-256 message block in bytes.
pub const BLOCK_LEN: usize = 64;

/// Initial hash value H(0) (FIPS 180-4, 5.3.3): the first 32 bits of the
/// fractional parts of the square roots of the first eight primes.
const H0: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// Round constants K (FIPS 180-4, 4.2.2): the first 32 bits of the
/// fractional parts of the cube roots of the first 64 primes.
const K: [u32; 64] = [
    0x428a_2f98,
    0x7137_4491,
    0xb5c0_fbcf,
    0xe9b5_dba5,
    0x3956_c25b,
    0x59f1_11f1,
    0x923f_82a4,
    0xab1c_5ed5,
    0xd807_aa98,
    0x1283_5b01,
    0x2431_85be,
    0x550c_7dc3,
    0x72be_5d74,
    0x80de_b1fe,
    0x9bdc_06a7,
    0xc19b_f174,
    0xe49b_69c1,
    0xefbe_4786,
    0x0fc1_9dc6,
    0x240c_a1cc,
    0x2de9_2c6f,
    0x4a74_84aa,
    0x5cb0_a9dc,
    0x76f9_88da,
    0x983e_5152,
    0xa831_c66d,
    0xb003_27c8,
    0xbf59_7fc7,
    0xc6e0_0bf3,
    0xd5a7_9147,
    0x06ca_6351,
    0x1429_2967,
    0x27b7_0a85,
    0x2e1b_2138,
    0x4d2c_6dfc,
    0x5338_0d13,
    0x650a_7354,
    0x766a_0abb,
    0x81c2_c92e,
    0x9272_2c85,
    0xa2bf_e8a1,
    0xa81a_664b,
    0xc24b_8b70,
    0xc76c_51a3,
    0xd192_e819,
    0xd699_0624,
    0xf40e_3585,
    0x106a_a070,
    0x19a4_c116,
    0x1e37_6c08,
    0x2748_774c,
    0x34b0_bcb5,
    0x391c_0cb3,
    0x4ed8_aa4a,
    0x5b9c_ca4f,
    0x682e_6ff3,
    0x748f_82ee,
    0x78a5_636f,
    0x84c8_7814,
    0x8cc7_0208,
    0x90be_fffa,
    0xa450_6ceb,
    0xbef9_a3f7,
    0xc671_78f2,
];

/// Incremental SHA-256.
#[derive(Clone)]
pub struct Sha256 {
    state: [u32; 8],
    block: [u8; BLOCK_LEN],
    /// Bytes held in `block`.
    filled: usize,
    /// Message length so far, in bytes.
    length: u64,
}

impl core::fmt::Debug for Sha256 {
    // The buffered bytes may be key material: show only the length.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sha256")
            .field("length", &self.length)
            .finish_non_exhaustive()
    }
}

impl Default for Sha256 {
    fn default() -> Self {
        Self::new()
    }
}

impl Sha256 {
    /// A hasher over the empty message.
    pub const fn new() -> Self {
        Self {
            state: H0,
            block: [0; BLOCK_LEN],
            filled: 0,
            length: 0,
        }
    }

    /// Appends `data` to the message.
    pub fn update(&mut self, mut data: &[u8]) {
        self.length = self.length.wrapping_add(data.len() as u64);
        if self.filled > 0 {
            let take = (BLOCK_LEN - self.filled).min(data.len());
            let (head, rest) = data.split_at(take);
            self.block[self.filled..self.filled + take].copy_from_slice(head);
            self.filled += take;
            data = rest;
            if self.filled < BLOCK_LEN {
                return;
            }
            compress(&mut self.state, &self.block);
            self.filled = 0;
        }
        let mut blocks = data.chunks_exact(BLOCK_LEN);
        for block in &mut blocks {
            // `chunks_exact` yields exactly BLOCK_LEN bytes.
            let mut b = [0u8; BLOCK_LEN];
            b.copy_from_slice(block);
            compress(&mut self.state, &b);
        }
        let rest = blocks.remainder();
        self.block[..rest.len()].copy_from_slice(rest);
        self.filled = rest.len();
    }

    /// Pads the message (FIPS 180-4, 5.1.1) and returns its digest.
    pub fn finalize(mut self) -> [u8; DIGEST_LEN] {
        let bit_length = self.length.wrapping_mul(8);
        self.block[self.filled] = 0x80;
        self.block[self.filled + 1..].fill(0);
        if self.filled + 1 > BLOCK_LEN - 8 {
            // No room for the length: it goes in one more block.
            compress(&mut self.state, &self.block);
            self.block = [0; BLOCK_LEN];
        }
        self.block[BLOCK_LEN - 8..].copy_from_slice(&bit_length.to_be_bytes());
        compress(&mut self.state, &self.block);
        let mut out = [0u8; DIGEST_LEN];
        for (chunk, word) in out.chunks_exact_mut(4).zip(self.state) {
            chunk.copy_from_slice(&word.to_be_bytes());
        }
        out
    }
}

/// The SHA-256 compression function on one block (FIPS 180-4, 6.2.2).
fn compress(state: &mut [u32; 8], block: &[u8; BLOCK_LEN]) {
    let mut w = [0u32; 64];
    for (t, bytes) in block.chunks_exact(4).enumerate() {
        w[t] = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    }
    for t in 16..64 {
        let s0 = w[t - 15].rotate_right(7) ^ w[t - 15].rotate_right(18) ^ (w[t - 15] >> 3);
        let s1 = w[t - 2].rotate_right(17) ^ w[t - 2].rotate_right(19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16]
            .wrapping_add(s0)
            .wrapping_add(w[t - 7])
            .wrapping_add(s1);
    }
    let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = *state;
    for t in 0..64 {
        let big_s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
        let ch = (e & f) ^ (!e & g);
        let t1 = h
            .wrapping_add(big_s1)
            .wrapping_add(ch)
            .wrapping_add(K[t])
            .wrapping_add(w[t]);
        let big_s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
        let maj = (a & b) ^ (a & c) ^ (b & c);
        let t2 = big_s0.wrapping_add(maj);
        h = g;
        g = f;
        f = e;
        e = d.wrapping_add(t1);
        d = c;
        c = b;
        b = a;
        a = t1.wrapping_add(t2);
    }
    for (s, v) in state.iter_mut().zip([a, b, c, d, e, f, g, h]) {
        *s = s.wrapping_add(v);
    }
}

/// SHA-256 digest of `data`.
pub fn sha256(data: &[u8]) -> [u8; DIGEST_LEN] {
    let mut h = Sha256::new();
    h.update(data);
    h.finalize()
}

/// Incremental HMAC-SHA256 (RFC 2104 with H = SHA-256, B = 64, L = 32).
#[derive(Clone)]
pub struct HmacSha256 {
    inner: Sha256,
    /// The key XOR opad, kept for the outer hash.
    outer_key: [u8; BLOCK_LEN],
}

impl core::fmt::Debug for HmacSha256 {
    // Never print key material.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HmacSha256").finish_non_exhaustive()
    }
}

impl HmacSha256 {
    /// A MAC over the empty message under `key` (any length: keys longer
    /// than a block are hashed first, as RFC 2104 says).
    pub fn new(key: &[u8]) -> Self {
        let mut block_key = [0u8; BLOCK_LEN];
        if key.len() > BLOCK_LEN {
            block_key[..DIGEST_LEN].copy_from_slice(&sha256(key));
        } else {
            block_key[..key.len()].copy_from_slice(key);
        }
        let mut inner_key = [0u8; BLOCK_LEN];
        let mut outer_key = [0u8; BLOCK_LEN];
        for ((i, o), k) in inner_key.iter_mut().zip(&mut outer_key).zip(block_key) {
            *i = k ^ 0x36;
            *o = k ^ 0x5c;
        }
        let mut inner = Sha256::new();
        inner.update(&inner_key);
        Self { inner, outer_key }
    }

    /// Appends `data` to the message.
    pub fn update(&mut self, data: &[u8]) {
        self.inner.update(data);
    }

    /// The tag: H(K ^ opad || H(K ^ ipad || message)).
    pub fn finalize(self) -> [u8; DIGEST_LEN] {
        let inner = self.inner.finalize();
        let mut outer = Sha256::new();
        outer.update(&self.outer_key);
        outer.update(&inner);
        outer.finalize()
    }
}

/// HMAC-SHA256 of `data` under `key`.
pub fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; DIGEST_LEN] {
    let mut mac = HmacSha256::new(key);
    mac.update(data);
    mac.finalize()
}

/// Whether two tags are equal, looking at every byte whatever the first
/// difference, so the time taken does not tell a forger how much of a
/// guess was right.
pub fn tags_equal(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // `black_box` keeps the optimiser from turning the fold into an
    // early-exit comparison.
    core::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    fn hex(s: &str) -> Vec<u8> {
        let s: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        s.chunks(2)
            .map(|p| {
                let d = |c: u8| match c {
                    b'0'..=b'9' => c - b'0',
                    b'a'..=b'f' => c - b'a' + 10,
                    _ => panic!("not hex"),
                };
                d(p[0]) << 4 | d(p[1])
            })
            .collect()
    }

    // Examples of FIPS 180-4 as published by NIST (SHA256.pdf and the
    // SHAVS short/long message files).
    #[test]
    fn nist_one_block_abc() {
        assert_eq!(
            sha256(b"abc").to_vec(),
            hex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        );
    }

    #[test]
    fn nist_empty_message() {
        assert_eq!(
            sha256(b"").to_vec(),
            hex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        );
    }

    #[test]
    fn nist_two_block_448_bits() {
        assert_eq!(
            sha256(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq").to_vec(),
            hex("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        );
    }

    #[test]
    fn nist_896_bits() {
        let m = b"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
        assert_eq!(
            sha256(m).to_vec(),
            hex("cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1")
        );
    }

    #[test]
    fn nist_one_million_a_fed_in_odd_pieces() {
        let mut h = Sha256::new();
        let piece = [b'a'; 997];
        let mut left = 1_000_000usize;
        while left > 0 {
            let n = left.min(piece.len());
            h.update(&piece[..n]);
            left -= n;
        }
        assert_eq!(
            h.finalize().to_vec(),
            hex("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
        );
    }

    #[test]
    fn shavs_byte_vectors() {
        // SHAVS SHA256ShortMsg: Len = 8 and Len = 16.
        assert_eq!(
            sha256(&hex("d3")).to_vec(),
            hex("28969cdfa74a12c82f3bad960b0b000aca2ac329deea5c2328ebc6f2ba9802c1")
        );
        assert_eq!(
            sha256(&hex("11af")).to_vec(),
            hex("5ca7133fa735326081558ac312c620eeca9970d1e70a4b95533d956f072d1f98")
        );
    }

    #[test]
    fn padding_boundaries_agree_between_one_shot_and_split_updates() {
        // 55, 56, 63, 64 and 65 bytes cross the places where the length
        // does or does not fit in the last block.
        for len in [0usize, 1, 55, 56, 57, 63, 64, 65, 119, 120, 128, 200] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let whole = sha256(&data);
            for cut in [0, 1.min(len), len / 2, len] {
                let mut h = Sha256::new();
                h.update(&data[..cut]);
                h.update(&data[cut..]);
                assert_eq!(h.finalize(), whole, "len {len} cut {cut}");
            }
        }
    }

    struct HmacCase {
        key: Vec<u8>,
        data: Vec<u8>,
        tag: &'static str,
    }

    // RFC 4231, section 4 (test cases 1 to 7).
    fn rfc4231() -> Vec<HmacCase> {
        vec![
            HmacCase {
                key: vec![0x0b; 20],
                data: b"Hi There".to_vec(),
                tag: "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
            },
            HmacCase {
                key: b"Jefe".to_vec(),
                data: b"what do ya want for nothing?".to_vec(),
                tag: "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            },
            HmacCase {
                key: vec![0xaa; 20],
                data: vec![0xdd; 50],
                tag: "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
            },
            HmacCase {
                key: hex("0102030405060708090a0b0c0d0e0f10111213141516171819"),
                data: vec![0xcd; 50],
                tag: "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
            },
            HmacCase {
                key: vec![0x0c; 20],
                data: b"Test With Truncation".to_vec(),
                // Test case 5 publishes only the first 128 bits.
                tag: "a3b6167473100ee06e0c796c2955552b",
            },
            HmacCase {
                key: vec![0xaa; 131],
                data: b"Test Using Larger Than Block-Size Key - Hash Key First".to_vec(),
                tag: "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            },
            HmacCase {
                key: vec![0xaa; 131],
                data: b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.".to_vec(),
                tag: "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
            },
        ]
    }

    #[test]
    fn rfc4231_vectors() {
        for (i, case) in rfc4231().iter().enumerate() {
            let want = hex(case.tag);
            let got = hmac_sha256(&case.key, &case.data);
            assert_eq!(&got[..want.len()], &want[..], "RFC 4231 case {}", i + 1);
        }
    }

    #[test]
    fn rfc4231_vectors_incrementally() {
        for (i, case) in rfc4231().iter().enumerate() {
            let want = hex(case.tag);
            let mut mac = HmacSha256::new(&case.key);
            for byte in case.data.chunks(3) {
                mac.update(byte);
            }
            let got = mac.finalize();
            assert_eq!(&got[..want.len()], &want[..], "RFC 4231 case {}", i + 1);
        }
    }

    #[test]
    fn block_sized_key_is_used_as_is() {
        // A 64-byte key is not hashed; a 65-byte one is. Both must differ
        // from each other and from the hashed form of the 64-byte key.
        let k64 = [0x42u8; 64];
        let k65 = [0x42u8; 65];
        let a = hmac_sha256(&k64, b"m");
        let b = hmac_sha256(&k65, b"m");
        let c = hmac_sha256(&sha256(&k64), b"m");
        assert_ne!(a, b);
        assert_ne!(a, c);
        // The 65-byte key behaves exactly like its digest.
        assert_eq!(b, hmac_sha256(&sha256(&k65), b"m"));
    }

    #[test]
    fn tag_comparison() {
        let t = hmac_sha256(b"k", b"d");
        let mut u = t;
        assert!(tags_equal(&t, &u));
        u[31] ^= 1;
        assert!(!tags_equal(&t, &u));
        u = t;
        u[0] ^= 0x80;
        assert!(!tags_equal(&t, &u));
        assert!(!tags_equal(&t, &t[..31]));
        assert!(tags_equal(&[], &[]));
    }

    #[test]
    fn debug_never_shows_key_material() {
        let mac = HmacSha256::new(b"secret-key");
        assert_eq!(alloc::format!("{mac:?}"), "HmacSha256 { .. }");
    }
}
