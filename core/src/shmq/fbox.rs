//! Fast boxes: per-pair single-writer rings of cache lines.
//!
//! Each entry starts on a line with one 64-bit header word, followed by
//! its data (active-message header, then payload, or a control message);
//! it takes whole lines. The writer stores the data first and the header
//! word last, with release ordering; the reader loads the header word with
//! acquire ordering. A zero word means "nothing yet": before it hands
//! consumed lines back to the writer (by publishing its position), the
//! reader zeroes the first word of each, so every line start the reader can
//! reach holds either zero or a header written in the current lap, never
//! stale payload.
//!
//! Positions are counted in lines since the ring was made (`u64`, never
//! wrapping in practice); the offset in the ring is the position modulo the
//! ring's line count, a power of two. An entry never straddles the end of the ring: the
//! writer puts a [`Kind::Wrap`] marker in the remaining lines and starts
//! again at line 0.
//!
//! Header word, from bit 0: per-pair sequence number (24 bits), kind (8),
//! data length in bytes (16), tag (8), active-message header length (8).

use super::{Kind, Malformed, LINE, SEQ_MASK};

/// Bytes of the entry header word.
pub const WORD: usize = 8;

/// The header of one fast-box entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryHeader {
    /// Per-pair sequence number (24 bits).
    pub seq: u32,
    /// What the entry is.
    pub kind: Kind,
    /// Bytes of data after the header word.
    pub len: u16,
    /// Active-message tag.
    pub tag: u8,
    /// Bytes of the data that are the active-message header.
    pub hdr_len: u8,
}

impl EntryHeader {
    /// The header word.
    pub const fn encode(&self) -> u64 {
        (self.seq & SEQ_MASK) as u64
            | (self.kind as u64) << 24
            | (self.len as u64) << 32
            | (self.tag as u64) << 48
            | (self.hdr_len as u64) << 56
    }

    /// Lines the entry takes.
    pub const fn lines(&self) -> u64 {
        entry_lines(self.len as usize)
    }
}

/// Lines taken by an entry with `data_len` bytes of data.
pub const fn entry_lines(data_len: usize) -> u64 {
    (WORD + data_len).div_ceil(LINE) as u64
}

/// What a reader finds at its position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// Nothing written yet.
    Empty,
    /// The writer went back to the start of the ring; the marker carries
    /// the sequence number the next entry will have.
    Wrap {
        /// Sequence number of the entry at line 0.
        seq: u32,
    },
    /// An entry.
    Entry(EntryHeader),
}

/// Decodes and checks the header word at a reader's position: a known
/// kind, an entry no larger than `max_entry` bytes (word included) that
/// ends inside the ring (`lines_to_end` lines are left before its end), and
/// a header length inside the data.
pub fn decode(word: u64, max_entry: usize, lines_to_end: u64) -> Result<Found, Malformed> {
    if word == 0 {
        return Ok(Found::Empty);
    }
    let code = (word >> 24) as u8;
    let kind = Kind::from_code(code).ok_or(Malformed::BadKind(code))?;
    let h = EntryHeader {
        seq: (word as u32) & SEQ_MASK,
        kind,
        len: (word >> 32) as u16,
        tag: (word >> 48) as u8,
        hdr_len: (word >> 56) as u8,
    };
    if kind == Kind::Wrap {
        if h.len != 0 || h.tag != 0 || h.hdr_len != 0 {
            return Err(Malformed::Inconsistent("wrap marker with data"));
        }
        return Ok(Found::Wrap { seq: h.seq });
    }
    if WORD + h.len as usize > max_entry {
        return Err(Malformed::OutOfRange("fast-box entry length"));
    }
    if h.lines() > lines_to_end {
        return Err(Malformed::OutOfRange("fast-box entry past the ring's end"));
    }
    if h.hdr_len as u16 > h.len {
        return Err(Malformed::OutOfRange("active-message header length"));
    }
    Ok(Found::Entry(h))
}

/// Where a writer puts an entry of `lines` lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Line offset of a wrap marker to write first, if the entry does not
    /// fit before the ring's end.
    pub wrap_at: Option<u64>,
    /// Line offset of the entry.
    pub at: u64,
    /// The writer's position after the entry.
    pub next: u64,
}

/// Plans an entry of `lines` lines at writer position `write`, with the
/// reader known to have consumed up to `read`, in a ring of `ring` lines
/// (a power of two). `None` when there is not room now.
pub fn place(write: u64, read: u64, ring: u64, lines: u64) -> Option<Placement> {
    let used = write.checked_sub(read)?;
    if !ring.is_power_of_two() || used > ring || lines == 0 || lines > ring {
        return None;
    }
    let free = ring - used;
    let off = write & (ring - 1);
    let to_end = ring - off;
    if lines <= to_end {
        (lines <= free).then_some(Placement {
            wrap_at: None,
            at: off,
            next: write + lines,
        })
    } else {
        (to_end + lines <= free).then_some(Placement {
            wrap_at: Some(off),
            at: 0,
            next: write + to_end + lines,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_word_round_trips() {
        let h = EntryHeader {
            seq: 0xabcdef,
            kind: Kind::Active,
            len: 300,
            tag: 7,
            hdr_len: 12,
        };
        assert_eq!(decode(h.encode(), 512, 8), Ok(Found::Entry(h)));
        assert_eq!(h.lines(), 5);
        assert_eq!(decode(0, 512, 8), Ok(Found::Empty));
    }

    #[test]
    fn corrupt_words_are_refused() {
        let ok = EntryHeader {
            seq: 1,
            kind: Kind::Active,
            len: 100,
            tag: 1,
            hdr_len: 4,
        };
        // Unknown kind.
        assert!(decode(ok.encode() & !(0xff << 24), 512, 8).is_err());
        // Longer than an entry may be.
        assert!(decode(EntryHeader { len: 600, ..ok }.encode(), 512, 16).is_err());
        // Past the ring's end.
        assert!(decode(ok.encode(), 512, 1).is_err());
        // Header longer than the data.
        assert!(decode(EntryHeader { hdr_len: 101, ..ok }.encode(), 512, 8).is_err());
        // Wrap marker with data.
        let wrap = EntryHeader {
            kind: Kind::Wrap,
            len: 0,
            tag: 0,
            hdr_len: 0,
            ..ok
        };
        assert_eq!(decode(wrap.encode(), 512, 1), Ok(Found::Wrap { seq: 1 }));
        assert!(decode(EntryHeader { len: 8, ..wrap }.encode(), 512, 8).is_err());
    }

    #[test]
    fn placement_wraps_and_respects_the_reader() {
        // Empty ring of 8 lines.
        assert_eq!(
            place(0, 0, 8, 3),
            Some(Placement {
                wrap_at: None,
                at: 0,
                next: 3
            })
        );
        // 6 written, 6 read: 2 lines to the end, a 3-line entry wraps.
        assert_eq!(
            place(6, 6, 8, 3),
            Some(Placement {
                wrap_at: Some(6),
                at: 0,
                next: 11
            })
        );
        // Reader behind: 6 written, 2 read: free 4, but wrapping needs 5.
        assert_eq!(place(6, 2, 8, 3), None);
        assert_eq!(
            place(6, 3, 8, 3),
            Some(Placement {
                wrap_at: Some(6),
                at: 0,
                next: 11
            })
        );
        // Full.
        assert_eq!(place(8, 0, 8, 1), None);
        // A reader ahead of the writer is nonsense.
        assert_eq!(place(3, 4, 8, 1), None);
    }

    #[test]
    fn placements_never_overlap_unread_lines() {
        // Simulate a writer and a lagging reader; every placed entry must
        // lie in lines the reader has consumed or never seen.
        let ring = 16u64;
        let (mut w, mut r) = (0u64, 0u64);
        let mut live: std::collections::VecDeque<(u64, u64)> = Default::default();
        let mut x = 0x9e37_79b9u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x % 3 == 0 {
                if let Some((start, next)) = live.pop_front() {
                    assert_eq!(start, r.max(start));
                    r = next;
                }
                continue;
            }
            let lines = 1 + x % 5;
            if let Some(p) = place(w, r, ring, lines) {
                assert!(p.next - r <= ring);
                assert!(p.at + lines <= ring);
                live.push_back((w, p.next));
                w = p.next;
            }
        }
    }
}
