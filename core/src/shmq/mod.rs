//! Shared-memory queues: the pure logic of the `shm` transport.
//!
//! The transport itself (memfd segments, mappings, atomics on shared
//! memory) lives in the `fireopal-btl-shm` plugin; this module owns what
//! can be decided without touching memory or the operating system, so that
//! it can be tested on its own and checked by peers of any build:
//!
//! - [`layout`]: where the header, the fast boxes and the receive queue sit
//!   in a process's queue segment, and the checked header peers read
//!   before they trust a segment;
//! - [`fbox`]: the one-word entry header of a fast box (a per-pair,
//!   single-writer ring of cache lines) and the checks a reader applies;
//! - [`fifo`]: the slot header of the per-receiver multi-writer queue and
//!   the classification of a slot's sequence word;
//! - [`ranges`]: a first-fit allocator of byte ranges (staging buffers);
//! - [`keyspace`]: how a peer's address range becomes a key of the
//!   registration cache, one disjoint key space per peer;
//! - [`siphash`]: SipHash-2-4, the keyed hash that proves a segment was
//!   made by a member of the job;
//! - [`sum`]: what the optional checksums cover, and their checks.
//!
//! The control messages, remote keys and published addresses peers
//! exchange are in [`crate::wire::shm`], and report the same [`Malformed`].
//! Everything read from shared memory comes from another process, so every
//! decoder here returns an error rather than trusting a length, an offset
//! or a kind.

pub mod fbox;
pub mod fifo;
pub mod keyspace;
pub mod layout;
pub mod ranges;
pub mod siphash;
pub mod sum;

use core::fmt;

use crate::wire::{Fields, Reader};

/// Size of a cache line, the unit of fast-box entries and queue slots.
pub const LINE: usize = 64;

/// Bits of the per-pair sequence number carried by every fragment.
pub const SEQ_BITS: u32 = 24;
/// Mask of a per-pair sequence number.
pub const SEQ_MASK: u32 = (1 << SEQ_BITS) - 1;

/// The sequence number after `seq`, wrapping at [`SEQ_BITS`].
pub const fn seq_next(seq: u32) -> u32 {
    seq.wrapping_add(1) & SEQ_MASK
}

/// How far `later` is ahead of `earlier`, modulo 2^[`SEQ_BITS`].
pub const fn seq_distance(earlier: u32, later: u32) -> u32 {
    later.wrapping_sub(earlier) & SEQ_MASK
}

code_enum! {
    /// What a fragment is, in a fast-box entry or a queue slot.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Kind: u8 {
        /// An active message, handed to the host.
        Active = 1,
        /// Fast box only: the rest of the ring is unused, the next entry is at
        /// its start.
        Wrap = 2,
        /// Rendezvous: the payload is described, the receiver fetches it.
        Rts = 3,
        /// Rendezvous done; the sender may complete its send.
        Fin = 4,
        /// The owner unmapped a segment; mappings of it must go.
        Unmap = 5,
        /// Emulated RDMA read request.
        GetRequest = 6,
        /// Bytes answering a [`Kind::GetRequest`].
        GetData = 7,
        /// Emulated RDMA write of some bytes.
        PutData = 8,
        /// The target of a put wrote everything (or failed).
        PutAck = 9,
    }
}

/// Why bytes read from shared memory or a peer were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Fewer bytes than the structure needs.
    Truncated {
        /// Bytes the structure needs.
        need: usize,
        /// Bytes there were.
        have: usize,
    },
    /// More bytes than a message that nothing follows.
    TrailingBytes {
        /// Bytes of the message.
        len: usize,
        /// Bytes there were.
        have: usize,
    },
    /// A magic number or version did not match.
    BadMagic,
    /// A kind code that is not known, or not allowed here.
    BadKind(u8),
    /// A length, offset or count outside its allowed range.
    OutOfRange(&'static str),
    /// Fields that contradict each other.
    Inconsistent(&'static str),
    /// The keyed tag did not match: not made by a member of this job.
    BadTag,
    /// Bytes do not match the checksum their writer put beside them
    /// ([`sum`]): changed in shared memory after they were written.
    Checksum {
        /// What was checked: a fragment, or a rendezvous payload.
        what: &'static str,
        /// The checksum the writer put beside the bytes.
        written: u64,
        /// The checksum of the bytes as read.
        read: u64,
    },
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { need, have } => {
                write!(f, "truncated: need {need} bytes, have {have}")
            }
            Self::TrailingBytes { len, have } => {
                write!(f, "{have} bytes for a message of {len}")
            }
            Self::BadMagic => f.write_str("bad magic number or version"),
            Self::BadKind(k) => write!(f, "unknown or misplaced fragment kind {k}"),
            Self::OutOfRange(what) => write!(f, "{what} out of range"),
            Self::Inconsistent(what) => write!(f, "inconsistent fields: {what}"),
            Self::BadTag => f.write_str("job tag does not match (not made by a job member)"),
            Self::Checksum {
                what,
                written,
                read,
            } => write!(
                f,
                "{what} does not match its checksum: written {written:#018x}, read {read:#018x}"
            ),
        }
    }
}

impl core::error::Error for Malformed {}

/// A reserved field, or the room of an absent one, that is not zero: a
/// sender leaves them zero, so that no bits of a message go unread.
pub(crate) const RESERVED: Malformed = Malformed::Inconsistent("reserved bytes are not zero");

/// The fields of `bytes`, which must hold at least `need` bytes (read with
/// the crate's one codec, [`crate::wire`]'s `Fields`).
pub(crate) fn fields(bytes: &[u8], need: usize) -> Result<Fields<'_, Malformed>, Malformed> {
    let short = Malformed::Truncated {
        need,
        have: bytes.len(),
    };
    if bytes.len() < need {
        return Err(short);
    }
    Ok(Fields::new(Reader::new(bytes), short))
}

/// The fields of `bytes`, which must be exactly `len` bytes: a message
/// nothing follows, so that extra bytes are refused, not ignored.
pub(crate) fn exact(bytes: &[u8], len: usize) -> Result<Fields<'_, Malformed>, Malformed> {
    if bytes.len() > len {
        return Err(Malformed::TrailingBytes {
            len,
            have: bytes.len(),
        });
    }
    fields(bytes, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_wrap_at_24_bits() {
        assert_eq!(seq_next(SEQ_MASK), 0);
        assert_eq!(seq_distance(SEQ_MASK, 1), 2);
        assert_eq!(seq_distance(5, 5), 0);
    }

    #[test]
    fn kinds_round_trip_and_unknown_codes_are_refused() {
        for code in 0..=255u8 {
            match Kind::from_code(code) {
                Some(k) => assert_eq!(k as u8, code),
                None => assert!(code == 0 || code > 9),
            }
        }
    }

    #[test]
    fn reader_refuses_short_input() {
        assert_eq!(
            fields(&[1, 2, 3], 4).unwrap_err(),
            Malformed::Truncated { need: 4, have: 3 }
        );
        let mut r = fields(&[1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0], 12).unwrap();
        assert_eq!(r.u32(), Ok(1));
        assert_eq!(r.u64(), Ok(2));
    }
}
