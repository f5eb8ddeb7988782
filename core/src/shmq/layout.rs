//! Layout of a process's queue segment, and its header.
//!
//! Every process of a node owns one queue segment. Peers write into it;
//! only the owner reads what they write. From offset 0:
//!
//! | offset | what |
//! |---|---|
//! | `0` | header ([`HEADER_LEN`] bytes, then zero up to [`PAGE`]) |
//! | `PAGE + i·stride` | fast box of the sender with local index `i`: one control line (the owner's read position, and whether it reads the sender's memory directly), then the ring of `fbox_bytes` |
//! | `fifo_tail` | the receive queue's tail counter, on its own line |
//! | `fifo_tail + LINE + j·fifo_slot_bytes` | queue slot `j` |
//!
//! with `stride = LINE + fbox_bytes`; the length is rounded up to
//! [`PAGE`]. The owner's own fast box (index equal to its local index) is
//! never used; keeping it makes every offset a multiplication.

use super::siphash::job_tag;
use super::{fields, Malformed, LINE, RESERVED};
use crate::wire::codec::fixed;

/// Page size the layout rounds to.
pub const PAGE: usize = 4096;
/// Bytes of the header that carry fields.
pub const HEADER_LEN: usize = 72;
/// Magic number at offset 0 of a queue segment ("FOPSHMQ1").
pub const MAGIC: u64 = u64::from_le_bytes(*b"FOPSHMQ1");
/// Layout version.
pub const VERSION: u32 = 1;
/// Largest fast-box entry, header word included.
pub const MAX_FBOX_ENTRY: u32 = 32 << 10;
/// Largest fast-box ring.
pub const MAX_FBOX_BYTES: u32 = 16 << 20;
/// Most slots of a receive queue.
pub const MAX_FIFO_SLOTS: u32 = 1 << 16;
/// Largest queue segment accepted (64 GiB).
pub const MAX_SEGMENT: usize = 1 << 36;
/// Most processes on a node that share queue segments.
pub const MAX_LOCAL: u32 = 1 << 15;
/// Offset of a queue slot's fragment data (after the ring sequence word
/// and the two header words).
pub const SLOT_DATA: usize = 24;
/// Value of a fast box's control word 1 when the segment's owner reads the
/// sender's memory with `process_vm_readv` (anything else: it does not).
pub const CMA_READS: u64 = u64::from_le_bytes(*b"CMAREADS");
/// Offset of that word in the control line.
pub const CMA_WORD: usize = 8;
/// Domain string of the queue segment's job tag.
const TAG_DOMAIN: &[u8] = b"fireopal-shm queue segment";

/// Sizes chosen by a segment's owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutParams {
    /// Processes on the node (one fast box each).
    pub local_size: u32,
    /// Bytes of each fast-box ring: a power-of-two number of lines, at
    /// least twice `fbox_max_entry`.
    pub fbox_bytes: u32,
    /// Largest fast-box entry, its header word included; a multiple of
    /// [`LINE`] between one line and 32 KiB.
    pub fbox_max_entry: u32,
    /// Receive-queue slots; a power of two from 2 to 65536.
    pub fifo_slots: u32,
    /// Bytes of each slot; a multiple of [`LINE`], at least two lines, at
    /// most 16 MiB.
    pub fifo_slot_bytes: u32,
}

/// Where everything is in a queue segment with given [`LayoutParams`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    params: LayoutParams,
    stride: usize,
    fifo_tail: usize,
    total: usize,
}

/// What a reader of a header expects to find.
#[derive(Debug, Clone, Copy)]
pub struct HeaderExpect<'k> {
    /// The job key.
    pub job_key: &'k [u8; 32],
    /// Rank of the owner.
    pub owner_rank: u32,
    /// Local index of the owner.
    pub owner_local: u32,
    /// Process id of the owner.
    pub owner_pid: u32,
    /// Identity of the file (inode number) the reader opened.
    pub file_id: u64,
    /// Bytes of the file the reader opened.
    pub file_len: u64,
    /// Processes on the node, as the reader knows it.
    pub local_size: u32,
}

/// The fields of a queue segment's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The sizes it was laid out with.
    pub params: LayoutParams,
    /// Rank of the owner.
    pub owner_rank: u32,
    /// Local index of the owner.
    pub owner_local: u32,
    /// Process id of the owner.
    pub owner_pid: u32,
    /// Inode number of the segment's file.
    pub file_id: u64,
}

impl Layout {
    /// Checks `params` and computes the offsets.
    pub fn new(params: LayoutParams) -> Result<Layout, Malformed> {
        let p = params;
        if p.local_size == 0 || p.local_size > MAX_LOCAL {
            return Err(Malformed::OutOfRange("local size"));
        }
        let line = LINE as u32;
        if p.fbox_max_entry < line
            || p.fbox_max_entry > MAX_FBOX_ENTRY
            || p.fbox_max_entry % line != 0
        {
            return Err(Malformed::OutOfRange("fast-box entry size"));
        }
        if p.fbox_bytes % line != 0
            || !(p.fbox_bytes / line).is_power_of_two()
            || (p.fbox_bytes as u64) < 2 * p.fbox_max_entry as u64
            || p.fbox_bytes > MAX_FBOX_BYTES
        {
            return Err(Malformed::OutOfRange("fast-box size"));
        }
        if !p.fifo_slots.is_power_of_two() || p.fifo_slots < 2 || p.fifo_slots > MAX_FIFO_SLOTS {
            return Err(Malformed::OutOfRange("queue slot count"));
        }
        if p.fifo_slot_bytes % line != 0
            || p.fifo_slot_bytes < 2 * line
            || p.fifo_slot_bytes > 1 << 24
        {
            return Err(Malformed::OutOfRange("queue slot size"));
        }
        let stride = LINE + p.fbox_bytes as usize;
        let fifo_tail = (p.local_size as usize)
            .checked_mul(stride)
            .and_then(|b| b.checked_add(PAGE))
            .ok_or(Malformed::OutOfRange("segment size"))?;
        let end = (p.fifo_slots as usize)
            .checked_mul(p.fifo_slot_bytes as usize)
            .and_then(|s| s.checked_add(fifo_tail + LINE))
            .and_then(|e| e.checked_add(PAGE - 1))
            .ok_or(Malformed::OutOfRange("segment size"))?;
        let total = end / PAGE * PAGE;
        if total > MAX_SEGMENT {
            return Err(Malformed::OutOfRange("segment size"));
        }
        Ok(Layout {
            params,
            stride,
            fifo_tail,
            total,
        })
    }

    /// The sizes.
    pub fn params(&self) -> LayoutParams {
        self.params
    }

    /// Total bytes of the segment (whole pages).
    pub fn total_len(&self) -> usize {
        self.total
    }

    /// Offset of the control line of sender `local`'s fast box, `None`
    /// past the local size. The owner writes it, the sender reads it: word
    /// 0 is the owner's read position (lines consumed), word 1 says
    /// whether the owner reads the sender's memory with
    /// `process_vm_readv` ([`CMA_READS`] when it does).
    pub fn fbox_ctl(&self, local: u32) -> Option<usize> {
        (local < self.params.local_size).then(|| PAGE + local as usize * self.stride)
    }

    /// Offset of the first byte of sender `local`'s fast-box ring.
    pub fn fbox_ring(&self, local: u32) -> Option<usize> {
        self.fbox_ctl(local).map(|c| c + LINE)
    }

    /// Lines in each fast-box ring.
    pub fn fbox_lines(&self) -> u64 {
        u64::from(self.params.fbox_bytes) / LINE as u64
    }

    /// Offset of the receive queue's tail counter.
    pub fn fifo_tail(&self) -> usize {
        self.fifo_tail
    }

    /// Offset of queue slot `index % fifo_slots`.
    pub fn fifo_slot(&self, index: u64) -> usize {
        let mask = u64::from(self.params.fifo_slots) - 1;
        self.fifo_tail + LINE + (index & mask) as usize * self.params.fifo_slot_bytes as usize
    }

    /// Bytes of fragment data a queue slot holds.
    pub fn fifo_data_capacity(&self) -> usize {
        self.params.fifo_slot_bytes as usize - SLOT_DATA
    }

    /// Largest data (header + payload, or control message) of one
    /// fast-box entry.
    pub fn fbox_data_capacity(&self) -> usize {
        self.params.fbox_max_entry as usize - 8
    }

    /// Encodes the header of a segment owned by `owner` and tagged for
    /// `job_key`.
    pub fn encode_header(&self, owner: &Header, job_key: &[u8; 32]) -> [u8; HEADER_LEN] {
        let p = self.params;
        fixed(|w| {
            w.u64(MAGIC);
            w.u32(VERSION);
            w.u32(p.local_size);
            w.u32(p.fbox_bytes);
            w.u32(p.fbox_max_entry);
            w.u32(p.fifo_slots);
            w.u32(p.fifo_slot_bytes);
            w.u32(owner.owner_rank);
            w.u32(owner.owner_local);
            w.u32(owner.owner_pid);
            w.zeros(4);
            w.u64(self.total as u64);
            w.u64(owner.file_id);
            w.u64(tag(job_key, owner, p, self.total as u64));
        })
    }

    /// Reads and checks a header: magic, version, sizes, the owner it
    /// should have, the file it was read from, and the job tag.
    pub fn decode_header(
        bytes: &[u8],
        expect: &HeaderExpect<'_>,
    ) -> Result<(Layout, Header), Malformed> {
        let mut f = fields(bytes, HEADER_LEN)?;
        if f.u64()? != MAGIC || f.u32()? != VERSION {
            return Err(Malformed::BadMagic);
        }
        let params = LayoutParams {
            local_size: f.u32()?,
            fbox_bytes: f.u32()?,
            fbox_max_entry: f.u32()?,
            fifo_slots: f.u32()?,
            fifo_slot_bytes: f.u32()?,
        };
        let owner_rank = f.u32()?;
        let owner_local = f.u32()?;
        let owner_pid = f.u32()?;
        f.reserved::<4>(RESERVED)?;
        let total = f.u64()?;
        let file_id = f.u64()?;
        let written_tag = f.u64()?;
        let layout = Layout::new(params)?;
        let header = Header {
            params,
            owner_rank,
            owner_local,
            owner_pid,
            file_id,
        };
        if total != layout.total as u64 || total > expect.file_len {
            return Err(Malformed::Inconsistent("segment length"));
        }
        if params.local_size != expect.local_size {
            return Err(Malformed::Inconsistent("local size"));
        }
        if header.owner_rank != expect.owner_rank
            || header.owner_local != expect.owner_local
            || header.owner_pid != expect.owner_pid
            || header.file_id != expect.file_id
        {
            return Err(Malformed::Inconsistent("owner or file of the segment"));
        }
        if written_tag != tag(expect.job_key, &header, params, total) {
            return Err(Malformed::BadTag);
        }
        Ok((layout, header))
    }
}

fn tag(job_key: &[u8; 32], owner: &Header, p: LayoutParams, total: u64) -> u64 {
    job_tag(
        job_key,
        TAG_DOMAIN,
        &[
            u64::from(owner.owner_rank),
            u64::from(owner.owner_local),
            u64::from(owner.owner_pid),
            owner.file_id,
            total,
            u64::from(p.local_size),
            u64::from(p.fbox_bytes) << 32 | u64::from(p.fbox_max_entry),
            u64::from(p.fifo_slots) << 32 | u64::from(p.fifo_slot_bytes),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> LayoutParams {
        LayoutParams {
            local_size: 4,
            fbox_bytes: 4096,
            fbox_max_entry: 256,
            fifo_slots: 64,
            fifo_slot_bytes: 8256,
        }
    }

    fn owner() -> Header {
        Header {
            params: params(),
            owner_rank: 9,
            owner_local: 2,
            owner_pid: 4242,
            file_id: 77,
        }
    }

    fn expect<'k>(key: &'k [u8; 32], layout: &Layout) -> HeaderExpect<'k> {
        HeaderExpect {
            job_key: key,
            owner_rank: 9,
            owner_local: 2,
            owner_pid: 4242,
            file_id: 77,
            file_len: layout.total_len() as u64,
            local_size: 4,
        }
    }

    #[test]
    fn offsets_are_disjoint_lines_inside_the_segment() {
        let l = Layout::new(params()).unwrap();
        let mut last_end = PAGE;
        for i in 0..4 {
            let ctl = l.fbox_ctl(i).unwrap();
            assert_eq!(ctl, last_end);
            assert_eq!(l.fbox_ring(i).unwrap(), ctl + LINE);
            last_end = ctl + LINE + 4096;
        }
        assert_eq!(l.fbox_ctl(4), None);
        assert_eq!(l.fifo_tail(), last_end);
        assert_eq!(l.fifo_slot(0), last_end + LINE);
        assert_eq!(l.fifo_slot(64), l.fifo_slot(0));
        let end = l.fifo_slot(63) + 8256;
        assert!(end <= l.total_len() && l.total_len() - end < PAGE);
        assert_eq!(l.total_len() % PAGE, 0);
        assert_eq!(l.fifo_data_capacity(), 8256 - SLOT_DATA);
        assert_eq!(l.fbox_lines(), 64);
    }

    #[test]
    fn bad_params_are_refused() {
        let bad = [
            LayoutParams {
                local_size: 0,
                ..params()
            },
            LayoutParams {
                fbox_max_entry: 100,
                ..params()
            },
            LayoutParams {
                fbox_bytes: 256,
                ..params()
            },
            LayoutParams {
                fifo_slots: 48,
                ..params()
            },
            LayoutParams {
                fifo_slot_bytes: 64,
                ..params()
            },
            LayoutParams {
                local_size: MAX_LOCAL,
                fbox_bytes: 1 << 24,
                ..params()
            },
        ];
        for p in bad {
            assert!(Layout::new(p).is_err(), "{p:?}");
        }
    }

    #[test]
    fn header_round_trips_and_checks_owner_file_and_tag() {
        let key = [3u8; 32];
        let l = Layout::new(params()).unwrap();
        let h = l.encode_header(&owner(), &key);
        let (l2, h2) = Layout::decode_header(&h, &expect(&key, &l)).unwrap();
        assert_eq!(l2, l);
        assert_eq!(h2, owner());

        let other_key = [4u8; 32];
        assert_eq!(
            Layout::decode_header(&h, &expect(&other_key, &l)).unwrap_err(),
            Malformed::BadTag
        );
        let mut e = expect(&key, &l);
        e.file_id = 78;
        assert!(Layout::decode_header(&h, &e).is_err());
        let mut e = expect(&key, &l);
        e.file_len = 4096;
        assert!(Layout::decode_header(&h, &e).is_err());
        let mut flipped = h;
        flipped[20] ^= 0x40; // fast-box entry size changes: the tag breaks
        assert!(Layout::decode_header(&flipped, &expect(&key, &l)).is_err());
        assert!(Layout::decode_header(&h[..40], &expect(&key, &l)).is_err());
        let mut magic = h;
        magic[0] ^= 1;
        assert_eq!(
            Layout::decode_header(&magic, &expect(&key, &l)).unwrap_err(),
            Malformed::BadMagic
        );
    }
}
