//! The per-receiver multi-writer queue: a bounded ring of slots in the
//! receiver's segment (after Vyukov's bounded queue).
//!
//! Each slot starts with a sequence word. Slot `i` starts with sequence
//! `i`. A writer reads the tail counter `t`, finds slot `t % n` with
//! sequence `t` (free), claims it by compare-and-swap of the tail from `t`
//! to `t + 1`, writes the fragment, and stores sequence `t + 1` with
//! release ordering. The single reader, at head `h`, waits for sequence
//! `h + 1`, reads the fragment in place, and frees the slot by storing
//! `h + n`. Nothing is ever locked; a writer that finds the queue full
//! answers "busy" instead of waiting.
//!
//! After the sequence word come two header words: per-pair sequence
//! number (24 bits), kind (8), sender's local index (16), tag (8),
//! active-message header length (8); then the data length (32 bits) and 32
//! reserved bits. The data follows at [`super::layout::SLOT_DATA`].

use super::{Kind, Malformed, SEQ_MASK};

/// What a writer finds in the slot at the tail it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterView {
    /// The slot is free for this tail: claim it.
    Free,
    /// The reader has not freed the slot yet: the queue is full.
    Full,
    /// Another writer took this tail already: read the tail again.
    Stale,
    /// The sequence word cannot be right for this tail. A writer whose
    /// tail went stale while it was descheduled (the queue went round
    /// meanwhile) sees this too: it is corruption only if the tail has
    /// not moved since.
    Corrupt,
}

/// Classifies slot sequence `seq` for a writer at tail `tail`, in a queue
/// of `slots` slots.
pub const fn writer_view(seq: u64, tail: u64, slots: u64) -> WriterView {
    let d = seq.wrapping_sub(tail) as i64;
    if d == 0 {
        WriterView::Free
    } else if d < 0 && d >= -(slots as i64) {
        WriterView::Full
    } else if d > 0 && d <= slots as i64 {
        WriterView::Stale
    } else {
        WriterView::Corrupt
    }
}

/// What the reader finds in the slot at its head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReaderView {
    /// Nothing yet.
    Empty,
    /// A fragment is ready.
    Ready,
    /// The sequence word cannot be right.
    Corrupt,
}

/// Classifies slot sequence `seq` for the reader at head `head`.
pub const fn reader_view(seq: u64, head: u64) -> ReaderView {
    if seq == head {
        ReaderView::Empty
    } else if seq == head.wrapping_add(1) {
        ReaderView::Ready
    } else {
        ReaderView::Corrupt
    }
}

/// The header of a fragment in a queue slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentHeader {
    /// Per-pair sequence number (24 bits).
    pub seq: u32,
    /// What the fragment is (never [`Kind::Wrap`]).
    pub kind: Kind,
    /// Local index of the sender.
    pub sender: u16,
    /// Active-message tag.
    pub tag: u8,
    /// Bytes of the data that are the active-message header.
    pub hdr_len: u8,
    /// Bytes of data.
    pub len: u32,
}

impl FragmentHeader {
    /// The two header words.
    pub const fn encode(&self) -> [u64; 2] {
        [
            (self.seq & SEQ_MASK) as u64
                | (self.kind as u64) << 24
                | (self.sender as u64) << 32
                | (self.tag as u64) << 48
                | (self.hdr_len as u64) << 56,
            self.len as u64,
        ]
    }

    /// Decodes and checks the header words of a ready slot: a known kind
    /// other than wrap, a sender below `local_size`, data that fits
    /// `capacity`, and a header length inside the data.
    pub fn decode(words: [u64; 2], capacity: usize, local_size: u32) -> Result<Self, Malformed> {
        let [w1, w2] = words;
        let code = (w1 >> 24) as u8;
        let kind = match Kind::from_code(code) {
            Some(Kind::Wrap) | None => return Err(Malformed::BadKind(code)),
            Some(k) => k,
        };
        let h = FragmentHeader {
            seq: (w1 as u32) & SEQ_MASK,
            kind,
            sender: (w1 >> 32) as u16,
            tag: (w1 >> 48) as u8,
            hdr_len: (w1 >> 56) as u8,
            len: w2 as u32,
        };
        if w2 >> 32 != 0 {
            return Err(Malformed::Inconsistent("reserved bits of a queue slot"));
        }
        if u32::from(h.sender) >= local_size {
            return Err(Malformed::OutOfRange("sender of a queue fragment"));
        }
        if h.len as usize > capacity {
            return Err(Malformed::OutOfRange("queue fragment length"));
        }
        if u32::from(h.hdr_len) > h.len {
            return Err(Malformed::OutOfRange("active-message header length"));
        }
        Ok(h)
    }

    /// The sender's local index as written, before any check, so that a
    /// corrupt fragment can still be blamed on its sender when that index
    /// is valid.
    pub const fn claimed_sender(words: [u64; 2]) -> u16 {
        (words[0] >> 32) as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_views() {
        let n = 8;
        assert_eq!(writer_view(16, 16, n), WriterView::Free);
        // Slot still holds the fragment of tail 8 (sequence 9): full.
        assert_eq!(writer_view(9, 16, n), WriterView::Full);
        // Claimed by the writer of tail 8 but not written (sequence 8).
        assert_eq!(writer_view(8, 16, n), WriterView::Full);
        // Another writer wrote tail 16 (sequence 17), or it was read
        // (sequence 24).
        assert_eq!(writer_view(17, 16, n), WriterView::Stale);
        assert_eq!(writer_view(24, 16, n), WriterView::Stale);
        assert_eq!(writer_view(1000, 16, n), WriterView::Corrupt);
        assert_eq!(writer_view(0, 16, n), WriterView::Corrupt);
    }

    #[test]
    fn reader_views() {
        assert_eq!(reader_view(5, 5), ReaderView::Empty);
        assert_eq!(reader_view(6, 5), ReaderView::Ready);
        assert_eq!(reader_view(7, 5), ReaderView::Corrupt);
        assert_eq!(reader_view(u64::MAX, 0), ReaderView::Corrupt);
    }

    #[test]
    fn fragment_header_round_trips_and_is_checked() {
        let h = FragmentHeader {
            seq: 77,
            kind: Kind::Rts,
            sender: 3,
            tag: 200,
            hdr_len: 16,
            len: 4000,
        };
        assert_eq!(FragmentHeader::decode(h.encode(), 8000, 4), Ok(h));
        assert_eq!(FragmentHeader::claimed_sender(h.encode()), 3);
        assert!(FragmentHeader::decode(h.encode(), 8000, 3).is_err());
        assert!(FragmentHeader::decode(h.encode(), 3999, 4).is_err());
        let mut w = FragmentHeader {
            hdr_len: 255,
            len: 10,
            ..h
        }
        .encode();
        assert!(FragmentHeader::decode(w, 8000, 4).is_err());
        w = FragmentHeader {
            kind: Kind::Wrap,
            ..h
        }
        .encode();
        assert!(FragmentHeader::decode(w, 8000, 4).is_err());
        let mut w = h.encode();
        w[1] |= 1 << 40;
        assert!(FragmentHeader::decode(w, 8000, 4).is_err());
    }
}
