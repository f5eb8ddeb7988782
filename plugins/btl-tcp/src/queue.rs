//! Per-peer queue of bytes that could not be written yet.
//!
//! An item is an owned byte string (a frame's headers, kept inside the
//! item so that queueing an RDMA frame or a reply allocates nothing, or
//! what was left of a whole frame when the socket took only part of it),
//! optionally followed
//! by a range of memory the host lent us ([`RegionPart`]: the source of a
//! `put`, valid until its completion, or registered memory a `get` reads,
//! valid until deregistration). Items are written in order with gathered
//! `sendmsg` calls; the queue holds exactly the unsent bytes, so its memory
//! is bounded by what was sent.

use std::collections::VecDeque;
use std::io;

use fireopal_abi::btl::MemRegion;

use crate::sys::{copy_from_region, Gather, MAX_IOV};
#[cfg(doc)]
use fireopal_core::wire::tcp::frame::PAYLOAD_ALIGN;

/// A borrowed range of host memory at the end of an item.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RegionPart {
    pub(crate) region: MemRegion,
    pub(crate) offset: usize,
    pub(crate) len: usize,
    /// The registration the range lies in, when it is registered memory
    /// (so deregistration can copy it out first).
    pub(crate) registration: Option<u64>,
}

/// What to report when an item's last byte is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Done {
    /// Nothing (sendi remainders, RDMA frames, replies).
    Nothing,
    /// `send_complete(cookie)`.
    Send(u64),
}

/// Longest owned part kept inside an item: a frame header, the largest
/// RDMA sub-header and the padding before a payload fit.
const INLINE: usize = 128;

// Longer headers would still be queued, through the heap.
const _: () = {
    use fireopal_core::wire::tcp::frame::{GetRequest, GetResponse, PutAck, PutHeader};
    use fireopal_core::wire::tcp::frame::{FRAME_HEADER_LEN as F, PAYLOAD_ALIGN as P};
    assert!(F + PutHeader::LEN + P - 1 <= INLINE);
    assert!(F + GetRequest::LEN <= INLINE);
    assert!(F + GetResponse::LEN + P - 1 <= INLINE);
    assert!(F + PutAck::LEN <= INLINE);
};

/// The owned bytes of an item.
#[derive(Debug)]
enum Owned {
    /// A frame's headers, in place.
    Inline { buf: [u8; INLINE], len: u8 },
    /// Anything longer.
    Heap(Vec<u8>),
}

impl Owned {
    /// The concatenation of `parts`, in place when it fits.
    fn concat(parts: &[&[u8]]) -> Self {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > INLINE {
            return Self::Heap(parts.concat());
        }
        let mut buf = [0; INLINE];
        let mut at = 0;
        for p in parts {
            buf[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        Self::Inline {
            buf,
            len: len as u8,
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Self::Inline { buf, len } => &buf[..usize::from(*len)],
            Self::Heap(v) => v,
        }
    }
}

/// One queued frame (or the rest of one).
#[derive(Debug)]
pub(crate) struct OutItem {
    bytes: Owned,
    region: Option<RegionPart>,
    written: usize,
    done: Done,
}

impl OutItem {
    /// An item of owned bytes.
    pub(crate) fn owned(bytes: Vec<u8>, done: Done) -> Self {
        Self {
            bytes: Owned::Heap(bytes),
            region: None,
            written: 0,
            done,
        }
    }

    /// An item of a frame's headers (`parts`, concatenated), followed by
    /// borrowed memory when `region` is given.
    pub(crate) fn frame(parts: &[&[u8]], region: Option<RegionPart>, done: Done) -> Self {
        Self {
            bytes: Owned::concat(parts),
            region,
            written: 0,
            done,
        }
    }

    /// The item with its first `written` bytes already written.
    pub(crate) fn skipping(mut self, written: usize) -> Self {
        self.written = written.min(self.len());
        self
    }

    fn len(&self) -> usize {
        self.bytes.as_slice().len() + self.region.map_or(0, |r| r.len)
    }

    fn remaining(&self) -> usize {
        self.len() - self.written
    }

    /// Adds the unsent part to `g`; false when `g` filled up first.
    fn gather<'a>(&'a self, g: &mut Gather<'a, MAX_IOV>) -> bool {
        let bytes = self.bytes.as_slice();
        let owned = bytes.len();
        if self.written < owned && !g.push(&bytes[self.written..]) {
            return false;
        }
        if let Some(r) = &self.region {
            let skip = self.written.saturating_sub(owned);
            if skip < r.len && !g.push_region(&r.region, r.offset + skip, r.len - skip) {
                return false;
            }
        }
        true
    }

    /// Replaces the borrowed part by a copy of its unsent bytes.
    fn detach(&mut self) -> io::Result<()> {
        let Some(r) = self.region.take() else {
            return Ok(());
        };
        let bytes = self.bytes.as_slice();
        let owned = bytes.len();
        let skip = self.written.saturating_sub(owned);
        let mut rest = bytes[self.written.min(owned)..].to_vec();
        rest.extend_from_slice(&copy_from_region(&r.region, r.offset + skip, r.len - skip)?);
        self.bytes = Owned::Heap(rest);
        self.written = 0;
        Ok(())
    }
}

/// The unsent frames to one peer, in order.
#[derive(Debug, Default)]
pub(crate) struct SendQueue {
    items: VecDeque<OutItem>,
    bytes: usize,
    /// Where the queue's last byte falls in the write it belongs to,
    /// counted from the first frame queued behind an empty queue.
    burst: usize,
}

impl SendQueue {
    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Frames (or rests of frames) waiting.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Unsent bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Appends an item.
    pub(crate) fn push(&mut self, item: OutItem) {
        self.push_rest(item, 0);
    }

    /// Appends what is left of a frame whose first `written` bytes were
    /// written directly, so those still count in [`Self::next_position`].
    pub(crate) fn push_rest(&mut self, item: OutItem, written: usize) {
        if self.items.is_empty() {
            self.burst = written;
        }
        self.burst = self.burst.wrapping_add(item.remaining());
        self.bytes += item.remaining();
        self.items.push_back(item);
    }

    /// Where a frame queued now would start, counted from the start of
    /// the burst of writes it joins: 0 when nothing waits, so it begins a
    /// write of its own. Only its value modulo [`PAYLOAD_ALIGN`] is used
    /// (see [`crate::align`]).
    pub(crate) fn next_position(&self) -> usize {
        if self.items.is_empty() {
            0
        } else {
            self.burst
        }
    }

    /// Where the first unsent byte falls in its burst.
    pub(crate) fn front_position(&self) -> usize {
        self.next_position().wrapping_sub(self.bytes)
    }

    /// Gathers the front of the queue for one `sendmsg`.
    pub(crate) fn gather<'a>(&'a self, g: &mut Gather<'a, MAX_IOV>) {
        for item in &self.items {
            if !item.gather(g) || g.is_full() {
                break;
            }
        }
    }

    /// Accounts `n` written bytes; reports each finished item's [`Done`].
    pub(crate) fn advance(&mut self, mut n: usize, mut finished: impl FnMut(Done)) {
        self.bytes -= n.min(self.bytes);
        while n > 0 {
            let Some(front) = self.items.front_mut() else {
                break;
            };
            let take = n.min(front.remaining());
            front.written += take;
            n -= take;
            if front.remaining() == 0 {
                let done = front.done;
                self.items.pop_front();
                finished(done);
            }
        }
        // Empty items (a zero-length frame is never queued, but stay safe).
        while self.items.front().is_some_and(|f| f.remaining() == 0) {
            if let Some(f) = self.items.pop_front() {
                finished(f.done);
            }
        }
    }

    /// Empties the queue, returning the cookie of every unfinished `send`.
    pub(crate) fn clear(&mut self) -> Vec<u64> {
        self.bytes = 0;
        self.items
            .drain(..)
            .filter_map(|i| match i.done {
                Done::Send(c) => Some(c),
                Done::Nothing => None,
            })
            .collect()
    }

    /// Copies out every borrowed range of registration `id`, which is
    /// about to be released.
    pub(crate) fn detach_registration(&mut self, id: u64) -> io::Result<()> {
        for item in &mut self.items {
            if item.region.is_some_and(|r| r.registration == Some(id)) {
                item.detach()?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(unsafe_code)] // tests lend memory to the module as the host does
mod tests {
    use super::*;

    fn flatten(q: &SendQueue) -> Vec<u8> {
        let mut g = Gather::<MAX_IOV>::new();
        q.gather(&mut g);
        // Reconstruct through a socket-free path: re-gather item by item.
        let mut out = Vec::new();
        for item in &q.items {
            let bytes = item.bytes.as_slice();
            let owned = bytes.len();
            if item.written < owned {
                out.extend_from_slice(&bytes[item.written..]);
            }
            if let Some(r) = &item.region {
                let skip = item.written.saturating_sub(owned);
                out.extend_from_slice(
                    &copy_from_region(&r.region, r.offset + skip, r.len - skip).unwrap(),
                );
            }
        }
        assert_eq!(g.total(), out.len().min(g.total()));
        out
    }

    #[test]
    fn advance_reports_each_finished_item_once() {
        let mut q = SendQueue::default();
        q.push(OutItem::owned(b"abc".to_vec(), Done::Send(1)));
        q.push(OutItem::owned(b"de".to_vec(), Done::Nothing));
        q.push(OutItem::owned(b"fghi".to_vec(), Done::Send(3)));
        assert_eq!(q.bytes(), 9);
        let mut done = Vec::new();
        q.advance(2, |d| done.push(d));
        assert!(done.is_empty());
        assert_eq!(flatten(&q), b"cdefghi");
        q.advance(4, |d| done.push(d));
        assert_eq!(done, [Done::Send(1), Done::Nothing]);
        assert_eq!(flatten(&q), b"ghi");
        assert_eq!(q.bytes(), 3);
        q.advance(3, |d| done.push(d));
        assert_eq!(done, [Done::Send(1), Done::Nothing, Done::Send(3)]);
        assert!(q.is_empty());
        assert_eq!(q.bytes(), 0);
    }

    #[test]
    fn clear_returns_unfinished_send_cookies() {
        let mut q = SendQueue::default();
        q.push(OutItem::owned(b"abc".to_vec(), Done::Send(1)));
        q.push(OutItem::owned(b"de".to_vec(), Done::Nothing));
        q.push(OutItem::owned(b"f".to_vec(), Done::Send(3)));
        q.advance(1, |_| {});
        assert_eq!(q.clear(), [1, 3]);
        assert!(q.is_empty());
        assert_eq!(q.bytes(), 0);
    }

    #[test]
    fn borrowed_ranges_are_written_in_place_and_detach_on_demand() {
        let mut mem = b"0123456789".to_vec();
        // SAFETY: `mem` outlives the queue's use of the region.
        let region = unsafe { MemRegion::new(mem.as_mut_ptr(), mem.len()) };
        let mut q = SendQueue::default();
        q.push(OutItem::frame(
            &[b"H", b"D"],
            Some(RegionPart {
                region,
                offset: 2,
                len: 5,
                registration: Some(7),
            }),
            Done::Nothing,
        ));
        assert_eq!(q.bytes(), 7);
        assert_eq!(flatten(&q), b"HD23456");
        q.advance(3, |_| {});
        assert_eq!(flatten(&q), b"3456");
        q.detach_registration(8).unwrap();
        assert!(q.items[0].region.is_some(), "other registrations stay");
        q.detach_registration(7).unwrap();
        assert!(q.items[0].region.is_none());
        mem[3] = b'X';
        assert_eq!(flatten(&q), b"3456", "the copy no longer sees the memory");
        assert_eq!(q.bytes(), 4);
    }
}
