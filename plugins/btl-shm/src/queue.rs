//! Fast boxes and the receive queue on mapped segments: the writer and
//! reader halves of the protocols laid out in
//! [`fireopal_core::shmq::fbox`] and [`fireopal_core::shmq::fifo`].

use std::sync::atomic::Ordering;

use fireopal_core::shmq::fbox::{self, EntryHeader, Found};
use fireopal_core::shmq::fifo::{self, FragmentHeader, ReaderView, WriterView};
use fireopal_core::shmq::layout::{Layout, SLOT_DATA};
use fireopal_core::shmq::{Kind, Malformed, LINE};

use crate::mem::View;

/// One outgoing fragment: kind, tag, header length and up to three data
/// parts written back to back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frag<'a> {
    pub(crate) kind: Kind,
    pub(crate) tag: u8,
    pub(crate) hdr_len: u8,
    pub(crate) parts: [&'a [u8]; 3],
}

impl<'a> Frag<'a> {
    /// A control fragment of the transport itself: no tag, no host
    /// header, one encoded message as its only part.
    pub(crate) fn control(kind: Kind, body: &'a [u8]) -> Self {
        Frag {
            kind,
            tag: 0,
            hdr_len: 0,
            parts: [body, &[], &[]],
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.parts[0].len() + self.parts[1].len() + self.parts[2].len()
    }

    /// Writes the parts back to back at `off`; false if out of bounds.
    #[inline]
    fn write_parts(&self, view: &View<'_>, mut off: usize) -> bool {
        for part in self.parts {
            if !part.is_empty() {
                if !view.write(off, part) {
                    return false;
                }
                off += part.len();
            }
        }
        true
    }
}

/// Writer of one fast box (this process's box in a peer's segment).
#[derive(Debug)]
pub(crate) struct FboxWriter {
    ring: usize,
    ctl: usize,
    lines: u64,
    max_entry: usize,
    write: u64,
    read_seen: u64,
}

impl FboxWriter {
    pub(crate) fn new(layout: &Layout, local: u32) -> Option<Self> {
        Some(Self {
            ring: layout.fbox_ring(local)?,
            ctl: layout.fbox_ctl(local)?,
            lines: layout.fbox_lines(),
            max_entry: layout.params().fbox_max_entry as usize,
            write: 0,
            read_seen: 0,
        })
    }

    /// Largest fragment data an entry holds.
    pub(crate) fn capacity(&self) -> usize {
        self.max_entry - fbox::WORD
    }

    /// Writes `frag` with sequence number `seq`; false when it does not
    /// fit now (or ever).
    #[inline]
    pub(crate) fn try_write(&mut self, view: &View<'_>, seq: u32, frag: &Frag<'_>) -> bool {
        let len = frag.len();
        if len > self.capacity() {
            return false;
        }
        let lines = fbox::entry_lines(len);
        let placement = match fbox::place(self.write, self.read_seen, self.lines, lines) {
            Some(p) => p,
            None => {
                // Only now look at the reader's line: one remote read per
                // time the ring looks full, not one per message.
                let Some(read) = view.word(self.ctl).map(|w| w.load(Ordering::Acquire)) else {
                    return false;
                };
                self.read_seen = read;
                match fbox::place(self.write, read, self.lines, lines) {
                    Some(p) => p,
                    None => return false,
                }
            }
        };
        let entry = self.ring + placement.at as usize * LINE;
        let Some(word) = view.word(entry) else {
            return false;
        };
        if !frag.write_parts(view, entry + fbox::WORD) {
            return false;
        }
        if let Some(at) = placement.wrap_at {
            let marker = EntryHeader {
                seq,
                kind: Kind::Wrap,
                len: 0,
                tag: 0,
                hdr_len: 0,
            };
            if let Some(w) = view.word(self.ring + at as usize * LINE) {
                w.store(marker.encode(), Ordering::Release);
            }
        }
        let header = EntryHeader {
            seq,
            kind: frag.kind,
            len: len as u16,
            tag: frag.tag,
            hdr_len: frag.hdr_len,
        };
        // Data first, header word last: the reader's acquire load of the
        // word makes the data visible.
        word.store(header.encode(), Ordering::Release);
        self.write = placement.next;
        true
    }
}

/// What the reader of a fast box found.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FboxItem<'m> {
    /// Nothing.
    Empty,
    /// A wrap marker with its sequence number.
    Wrap(u32),
    /// An entry and its data.
    Entry(EntryHeader, &'m [u8]),
}

/// Reader of one fast box (a peer's box in this process's segment).
#[derive(Debug)]
pub(crate) struct FboxReader {
    ring: usize,
    ctl: usize,
    lines: u64,
    max_entry: usize,
    read: u64,
    /// Offset of the line at the reader's position, kept with `read`: the
    /// polling loop loads its first word and computes nothing.
    head: usize,
    published: u64,
    /// Lines consumed before a poll that found nothing tells the writer.
    batch: u64,
    /// Lines consumed before the reader tells the writer at once, on a
    /// message's path.
    pressed: u64,
}

impl FboxReader {
    pub(crate) fn new(layout: &Layout, local: u32) -> Option<Self> {
        // The layout checked that the ring is a power of two lines, at
        // least twice the largest entry.
        let lines = layout.fbox_lines();
        let max_entry = layout.params().fbox_max_entry as usize;
        let entry_lines = (max_entry / LINE) as u64;
        // Lines read but not yet handed back must leave the writer room
        // for its largest entry plus a wrap: at most `lines - 2·entry`.
        let most = lines.saturating_sub(2 * entry_lines) + 1;
        let batch = (lines / 4).min(most).max(1);
        let pressed = (2 * batch).min(most).max(batch);
        let ring = layout.fbox_ring(local)?;
        Some(Self {
            ring,
            ctl: layout.fbox_ctl(local)?,
            lines,
            max_entry,
            read: 0,
            head: ring,
            published: 0,
            batch,
            pressed,
        })
    }

    /// Whether anything is at the reader's position: one load, for the
    /// polling loop (the word is zero until the writer stores a header).
    #[inline]
    pub(crate) fn pending(&self, view: &View<'_>) -> bool {
        view.word(self.head)
            .is_some_and(|w| w.load(Ordering::Relaxed) != 0)
    }

    /// The item at the reader's position, checked.
    #[inline]
    pub(crate) fn peek<'m>(&self, view: &View<'m>) -> Result<FboxItem<'m>, Malformed> {
        let off = self.read & (self.lines - 1);
        let at = self.head;
        let word = view
            .word(at)
            .ok_or(Malformed::OutOfRange("fast-box position"))?
            .load(Ordering::Acquire);
        Ok(
            match fbox::decode(word, self.max_entry, self.lines - off)? {
                Found::Empty => FboxItem::Empty,
                Found::Wrap { seq } => FboxItem::Wrap(seq),
                Found::Entry(h) => {
                    let data = view
                        .bytes(at + fbox::WORD, usize::from(h.len))
                        .ok_or(Malformed::OutOfRange("fast-box entry"))?;
                    FboxItem::Entry(h, data)
                }
            },
        )
    }

    /// Consumes the entry at the reader's position (`lines` lines), or the
    /// wrap marker there (`lines == None`).
    #[inline]
    pub(crate) fn consume(&mut self, lines: Option<u64>) {
        let off = self.read & (self.lines - 1);
        self.read += lines.unwrap_or(self.lines - off);
        self.head = self.ring + (self.read & (self.lines - 1)) as usize * LINE;
    }

    /// Called after every `consume`, so that the reader never gets a ring
    /// ahead of the lines it zeroed: hands consumed lines back to the
    /// writer once twice a batch of them wait ([`publish_idle`] hands them
    /// back sooner, off the messages' path).
    ///
    /// [`publish_idle`]: Self::publish_idle
    #[inline]
    pub(crate) fn publish(&mut self, view: &View<'_>) {
        self.hand_back(view, self.pressed);
    }

    /// Hands consumed lines back to the writer once a batch of them
    /// waits: for a poll that found nothing to do, so that a process
    /// waiting for its next message does it, not one that has a message
    /// to answer.
    #[inline]
    pub(crate) fn publish_idle(&mut self, view: &View<'_>) {
        self.hand_back(view, self.batch);
    }

    /// Zeroes the first word of each consumed line, so that no stale word
    /// is ever taken for a header, then stores the read position
    /// (release: the zeroes are visible before the lines are reused),
    /// once at least `least` lines wait. Batching keeps these stores,
    /// which steal lines from the writer's cache, off the path of each
    /// message.
    #[inline]
    fn hand_back(&mut self, view: &View<'_>, least: u64) {
        if self.read - self.published >= least {
            self.hand_back_now(view);
        }
    }

    /// [`hand_back`](Self::hand_back) once it is due: out of line, so
    /// that the check on every message's path costs no call.
    #[inline(never)]
    fn hand_back_now(&mut self, view: &View<'_>) {
        for pos in self.published..self.read {
            let off = pos & (self.lines - 1);
            if let Some(w) = view.word(self.ring + off as usize * LINE) {
                w.store(0, Ordering::Relaxed);
            }
        }
        if let Some(w) = view.word(self.ctl) {
            w.store(self.read, Ordering::Release);
        }
        self.published = self.read;
    }
}

/// Why a queue operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueError {
    /// A slot's sequence word is impossible: the queue is corrupt.
    CorruptSlot,
}

/// Pushes `frag` from sender `sender` into the receive queue of the
/// segment in `view`. `Ok(false)`: full (or too large), nothing written.
pub(crate) fn fifo_push(
    view: &View<'_>,
    layout: &Layout,
    sender: u16,
    seq: u32,
    frag: &Frag<'_>,
) -> Result<bool, QueueError> {
    let len = frag.len();
    if len > layout.fifo_data_capacity() {
        return Ok(false);
    }
    let slots = u64::from(layout.params().fifo_slots);
    let Some(tail) = view.word(layout.fifo_tail()) else {
        return Err(QueueError::CorruptSlot);
    };
    // Bounded: under contention another writer always made progress, and
    // after this many tries answering "busy" is fine.
    for _ in 0..64 {
        let t = tail.load(Ordering::Relaxed);
        let slot = layout.fifo_slot(t);
        let Some(seq_word) = view.word(slot) else {
            return Err(QueueError::CorruptSlot);
        };
        match fifo::writer_view(seq_word.load(Ordering::Acquire), t, slots) {
            WriterView::Free => {
                if tail
                    .compare_exchange_weak(
                        t,
                        t.wrapping_add(1),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .is_err()
                {
                    continue;
                }
                let header = FragmentHeader {
                    seq,
                    kind: frag.kind,
                    sender,
                    tag: frag.tag,
                    hdr_len: frag.hdr_len,
                    len: len as u32,
                };
                let [w1, w2] = header.encode();
                if let (Some(a), Some(b)) = (view.word(slot + 8), view.word(slot + 16)) {
                    a.store(w1, Ordering::Relaxed);
                    b.store(w2, Ordering::Relaxed);
                }
                // The slot is ours: even if the data did not fit (it
                // does, checked above), it must be published or the queue
                // would stop here.
                frag.write_parts(view, slot + SLOT_DATA);
                seq_word.store(t.wrapping_add(1), Ordering::Release);
                return Ok(true);
            }
            WriterView::Full => return Ok(false),
            WriterView::Stale => continue,
            // A writer descheduled between reading the tail and the slot
            // sees the slot laps ahead of its stale tail: only a slot out
            // of range of a tail that did not move meanwhile is corrupt.
            WriterView::Corrupt if tail.load(Ordering::Relaxed) != t => continue,
            WriterView::Corrupt => return Err(QueueError::CorruptSlot),
        }
    }
    Ok(false)
}

/// What the reader of the receive queue found at its head.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FifoItem<'m> {
    /// Nothing.
    Empty,
    /// A fragment and its data.
    Fragment(FragmentHeader, &'m [u8]),
    /// The fragment's header is corrupt; the sender it names, when that
    /// is a valid local index.
    Corrupt(Option<u16>, Malformed),
    /// The slot's sequence word is impossible.
    BrokenSlot,
}

/// The single reader of this process's receive queue.
#[derive(Debug)]
pub(crate) struct FifoReader {
    head: u64,
    /// Offset of the head slot, kept with `head`.
    slot: usize,
}

impl FifoReader {
    pub(crate) fn new(layout: &Layout) -> Self {
        Self {
            head: 0,
            slot: layout.fifo_slot(0),
        }
    }

    /// Whether the head slot changed since the reader freed it (a
    /// fragment, or a broken slot): one load, for the polling loop.
    #[inline]
    pub(crate) fn pending(&self, view: &View<'_>) -> bool {
        view.word(self.slot)
            .is_none_or(|w| w.load(Ordering::Relaxed) != self.head)
    }

    /// The fragment at the head, checked.
    #[inline]
    pub(crate) fn peek<'m>(&self, view: &View<'m>, layout: &Layout) -> FifoItem<'m> {
        let slot = self.slot;
        let Some(seq) = view.word(slot).map(|w| w.load(Ordering::Acquire)) else {
            return FifoItem::BrokenSlot;
        };
        match fifo::reader_view(seq, self.head) {
            ReaderView::Empty => FifoItem::Empty,
            ReaderView::Corrupt => FifoItem::BrokenSlot,
            ReaderView::Ready => {
                let (Some(a), Some(b)) = (view.word(slot + 8), view.word(slot + 16)) else {
                    return FifoItem::BrokenSlot;
                };
                let words = [a.load(Ordering::Relaxed), b.load(Ordering::Relaxed)];
                let local_size = layout.params().local_size;
                match FragmentHeader::decode(words, layout.fifo_data_capacity(), local_size) {
                    Ok(h) => match view.bytes(slot + SLOT_DATA, h.len as usize) {
                        Some(data) => FifoItem::Fragment(h, data),
                        None => FifoItem::BrokenSlot,
                    },
                    Err(e) => {
                        let s = FragmentHeader::claimed_sender(words);
                        FifoItem::Corrupt((u32::from(s) < local_size).then_some(s), e)
                    }
                }
            }
        }
    }

    /// Frees the slot at the head for writers and moves on.
    #[inline]
    pub(crate) fn release(&mut self, view: &View<'_>, layout: &Layout) {
        let slots = u64::from(layout.params().fifo_slots);
        if let Some(w) = view.word(self.slot) {
            w.store(self.head.wrapping_add(slots), Ordering::Release);
        }
        self.head = self.head.wrapping_add(1);
        self.slot = layout.fifo_slot(self.head);
    }
}

/// Sets every slot of a fresh queue to its initial sequence number.
pub(crate) fn fifo_init(view: &View<'_>, layout: &Layout) {
    for i in 0..u64::from(layout.params().fifo_slots) {
        if let Some(w) = view.word(layout.fifo_slot(i)) {
            w.store(i, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use fireopal_core::shmq::layout::LayoutParams;

    use super::*;
    use crate::buffer::LocalSegment;

    /// A fast box of 64 lines (batch 16, pressed at 32) for sender 1.
    fn segment() -> (LocalSegment, Layout) {
        let layout = Layout::new(LayoutParams {
            local_size: 2,
            fbox_bytes: 4096,
            fbox_max_entry: 256,
            fifo_slots: 8,
            fifo_slot_bytes: 512,
        })
        .expect("layout");
        let seg =
            LocalSegment::create(c"fireopal-shm-test", 0, layout.total_len()).expect("segment");
        (seg, layout)
    }

    fn one_line() -> Frag<'static> {
        Frag {
            kind: Kind::Active,
            tag: 1,
            hdr_len: 0,
            parts: [b"payload", &[], &[]],
        }
    }

    /// Takes `n` one-line entries, handing lines back as on a message's
    /// path; returns the position the writer sees.
    fn take(reader: &mut FboxReader, view: &View<'_>, n: u32, ctl: usize) -> u64 {
        for _ in 0..n {
            match reader.peek(view) {
                Ok(FboxItem::Entry(h, _)) => reader.consume(Some(h.lines())),
                other => panic!("expected an entry, found {other:?}"),
            }
            reader.publish(view);
        }
        view.word(ctl)
            .map(|w| w.load(Ordering::Acquire))
            .expect("ctl")
    }

    #[test]
    fn consumed_lines_go_back_when_idle_or_when_pressed() {
        let (seg, layout) = segment();
        let view = seg.map.view();
        let ctl = layout.fbox_ctl(1).expect("ctl");
        let mut writer = FboxWriter::new(&layout, 1).expect("writer");
        let mut reader = FboxReader::new(&layout, 1).expect("reader");
        let mut seq = 0;
        let mut write = |writer: &mut FboxWriter, n: u32| {
            for _ in 0..n {
                assert!(writer.try_write(&view, seq, &one_line()), "entry {seq}");
                seq += 1;
            }
        };
        // A batch taken on the path stays with the reader...
        write(&mut writer, 20);
        assert_eq!(take(&mut reader, &view, 20, ctl), 0);
        // ...until a poll that found nothing hands it back.
        reader.publish_idle(&view);
        assert_eq!(view.word(ctl).map(|w| w.load(Ordering::Acquire)), Some(20));
        // A reader that is never idle hands back at twice the batch.
        write(&mut writer, 40);
        assert_eq!(take(&mut reader, &view, 31, ctl), 20);
        assert_eq!(take(&mut reader, &view, 1, ctl), 52);
        // The writer sees the lines handed back and fills the ring again,
        // and no further; every line start the reader reaches was zeroed,
        // so it finds only what was written in this lap.
        write(&mut writer, 56);
        assert!(
            !writer.try_write(&view, seq, &one_line()),
            "the ring is full"
        );
        assert_eq!(take(&mut reader, &view, 64, ctl), 116);
        assert!(!reader.pending(&view));
    }
}
