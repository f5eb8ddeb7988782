//! Segments this process owns: memfd files mapped here, described to peers
//! by a [`SegmentRef`]. Four uses: the queue segment, staging buffers for
//! rendezvous sends, transfer buffers handed to the caller
//! ([`TransferBuffer`]), and memory files the host made itself and
//! registered (the symmetric heap); peers read the last two with a single
//! copy.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};

use fireopal_core::shmq::layout::PAGE;
use fireopal_core::shmq::ranges::RangeAllocator;
use fireopal_core::shmq::LINE;
use fireopal_core::wire::shm::SegmentRef;

use crate::mem::{Mapping, View};
use crate::sys;

/// A memfd segment of this process, mapped here.
#[derive(Debug)]
pub(crate) struct LocalSegment {
    /// Kept open so that peers can fetch it by number.
    pub(crate) fd: OwnedFd,
    pub(crate) map: Mapping,
    pub(crate) sref: SegmentRef,
}

impl LocalSegment {
    /// A new sealed segment of at least `len` bytes (whole pages), mapped
    /// and populated.
    pub(crate) fn create(name: &std::ffi::CStr, id: u64, len: usize) -> io::Result<LocalSegment> {
        let len = round_to_page(len).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let fd = sys::memfd(name, len)?;
        let facts = sys::facts(&fd)?;
        let map = Mapping::map(&fd, len, true)?;
        let sref = SegmentRef {
            id,
            file_id: facts.ino,
            fd: u32::try_from(fd.as_raw_fd())
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?,
            base: map.addr() as u64,
            len: len as u64,
        };
        Ok(LocalSegment { fd, map, sref })
    }
}

/// `len` rounded up to whole pages (at least one).
pub(crate) fn round_to_page(len: usize) -> Option<usize> {
    Some(len.max(1).checked_add(PAGE - 1)? / PAGE * PAGE)
}

/// Memory in a memfd segment of this process, created by
/// [`ShmTransport::alloc_transfer_buffer`](crate::ShmTransport::alloc_transfer_buffer).
///
/// A peer that receives a rendezvous or an RDMA operation on this memory
/// maps the segment once and copies with one `memcpy`, keeping the mapping
/// cached. Dropping the buffer unmaps it; the transport then tells every
/// peer (at its next call), and they drop their mappings.
#[derive(Debug)]
pub struct TransferBuffer {
    map: Mapping,
    id: u64,
    releases: Arc<Mutex<Vec<u64>>>,
}

impl TransferBuffer {
    /// Bytes of the buffer (the requested length rounded up to pages).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false: a buffer has at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Start of the buffer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    /// The buffer's bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.map.as_slice()
    }

    /// The buffer's bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.map.as_mut_slice()
    }

    /// The transport's id of the buffer's segment.
    pub fn segment_id(&self) -> u64 {
        self.id
    }
}

impl Drop for TransferBuffer {
    fn drop(&mut self) {
        // The mapping goes with `self.map` right after this; the transport
        // closes the file and notifies peers when it next runs.
        if let Ok(mut r) = self.releases.lock() {
            r.push(self.id);
        }
    }
}

/// Why a host's memory file was not adopted.
#[derive(Debug)]
pub(crate) enum AdoptError {
    /// The descriptor could not be duplicated or inspected.
    Io(io::Error),
    /// The file does not qualify; the text says why.
    Refused(&'static str),
}

/// The single-copy segments of a transport: transfer buffers and adopted
/// host files, with their files (kept open for peers to fetch) and
/// descriptions, by address.
#[derive(Debug, Default)]
pub(crate) struct Buffers {
    by_base: BTreeMap<u64, (OwnedFd, SegmentRef)>,
    releases: Arc<Mutex<Vec<u64>>>,
}

impl Buffers {
    /// A new transfer buffer of at least `len` bytes.
    pub(crate) fn create(&mut self, id: u64, len: usize) -> io::Result<TransferBuffer> {
        let seg = LocalSegment::create(c"fireopal-shm-buffer", id, len)?;
        self.by_base.insert(seg.sref.base, (seg.fd, seg.sref));
        Ok(TransferBuffer {
            map: seg.map,
            id,
            releases: Arc::clone(&self.releases),
        })
    }

    /// Adopts a memory file of the host mapped at `base` (`len` bytes from
    /// offset 0) as segment `id`: keeps a duplicate of `fd` for peers to
    /// fetch. The file must carry the seals every segment carries, since
    /// peers refuse a file whose size could change under their mapping,
    /// be whole pages long, and be at least `len` bytes long; peers map
    /// the whole file.
    pub(crate) fn adopt(
        &mut self,
        id: u64,
        fd: BorrowedFd<'_>,
        base: u64,
        len: u64,
    ) -> Result<SegmentRef, AdoptError> {
        if len == 0 {
            return Err(AdoptError::Refused("the region is empty"));
        }
        let own = fd.try_clone_to_owned().map_err(AdoptError::Io)?;
        let facts = sys::facts(&own).map_err(AdoptError::Io)?;
        if facts.seals & sys::SEALS != sys::SEALS {
            return Err(AdoptError::Refused(
                "the file is not sealed against resizing (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL)",
            ));
        }
        if facts.size < len {
            return Err(AdoptError::Refused("the file is shorter than the region"));
        }
        // Peers map whole files at page granularity.
        if facts.size % PAGE as u64 != 0 || base % PAGE as u64 != 0 {
            return Err(AdoptError::Refused(
                "the file is not whole pages long, or the region does not start on a page",
            ));
        }
        let end = base.checked_add(facts.size);
        let overlaps = self
            .by_base
            .range(..end.unwrap_or(u64::MAX))
            .next_back()
            .is_some_and(|(_, (_, s))| s.base.saturating_add(s.len) > base);
        if end.is_none() || overlaps {
            return Err(AdoptError::Refused(
                "the region overlaps a segment the transport already has",
            ));
        }
        let sref = SegmentRef {
            id,
            file_id: facts.ino,
            fd: u32::try_from(own.as_raw_fd())
                .map_err(|_| AdoptError::Refused("descriptor number out of range"))?,
            base,
            len: facts.size,
        };
        self.by_base.insert(base, (own, sref));
        Ok(sref)
    }

    /// Forgets adopted segment `id` and closes its duplicate descriptor;
    /// returns its description so that peers can be told.
    pub(crate) fn forget(&mut self, id: u64) -> Option<SegmentRef> {
        let base = self
            .by_base
            .iter()
            .find(|(_, (_, s))| s.id == id)
            .map(|(b, _)| *b)?;
        self.by_base.remove(&base).map(|(_, s)| s)
    }

    /// Closes the files of dropped buffers; returns their descriptions so
    /// that peers can be told.
    pub(crate) fn reap(&mut self) -> Vec<SegmentRef> {
        let ids: Vec<u64> = match self.releases.lock() {
            Ok(mut r) if !r.is_empty() => std::mem::take(&mut *r),
            _ => return Vec::new(),
        };
        let mut gone = Vec::with_capacity(ids.len());
        self.by_base.retain(|_, (_, sref)| {
            if ids.contains(&sref.id) {
                gone.push(*sref);
                false
            } else {
                true
            }
        });
        gone
    }

    /// The buffer holding `[addr, addr + len)`, if one does.
    pub(crate) fn find(&self, addr: u64, len: u64) -> Option<SegmentRef> {
        let (_, (_, sref)) = self.by_base.range(..=addr).next_back()?;
        sref.offset_of(addr, len).map(|_| *sref)
    }
}

/// A staged payload: where it sits in the staging pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StageSlot {
    seg: usize,
    pub(crate) offset: u64,
    len: u64,
    /// The payload's checksum, when checksums are on and it was written.
    pub(crate) sum: Option<u64>,
}

#[derive(Debug)]
struct StagingSegment {
    seg: LocalSegment,
    ranges: RangeAllocator,
    /// Made for one payload larger than a chunk; dropped when it is free.
    dedicated: bool,
}

/// Staging pool of rendezvous sends: payloads are copied here before
/// `send` returns, and the receiver maps the pool's segments once.
#[derive(Debug)]
pub(crate) struct Staging {
    segments: Vec<Option<StagingSegment>>,
    chunk: usize,
    limit: usize,
    total: usize,
}

impl Staging {
    pub(crate) fn new(chunk: usize, limit: usize) -> Self {
        Self {
            segments: Vec::new(),
            chunk: round_to_page(chunk).unwrap_or(PAGE),
            limit,
            total: 0,
        }
    }

    /// Room for `len` bytes, growing the pool by a segment (taking a new
    /// segment id from `next_id`) while under its limit. `Ok(None)`: full.
    pub(crate) fn alloc(&mut self, len: usize, next_id: &mut u64) -> io::Result<Option<StageSlot>> {
        for (i, s) in self.segments.iter_mut().enumerate() {
            if let Some(s) = s.as_mut().filter(|s| !s.dedicated) {
                if let Some((offset, len)) = s.ranges.alloc(len as u64) {
                    return Ok(Some(StageSlot {
                        seg: i,
                        offset,
                        len,
                        sum: None,
                    }));
                }
            }
        }
        let dedicated = len > self.chunk;
        let size = if dedicated {
            round_to_page(len).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?
        } else {
            self.chunk
        };
        // The first segment is always allowed, so that any send can go.
        if self.total != 0 && self.total.saturating_add(size) > self.limit {
            return Ok(None);
        }
        let id = *next_id;
        *next_id += 1;
        let seg = LocalSegment::create(c"fireopal-shm-staging", id, size)?;
        let mut ranges = RangeAllocator::new(seg.sref.len, LINE as u64)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let Some((offset, rounded)) = ranges.alloc(len as u64) else {
            return Ok(None);
        };
        self.total += size;
        let entry = StagingSegment {
            seg,
            ranges,
            dedicated,
        };
        let i = match self.segments.iter().position(Option::is_none) {
            Some(i) => {
                self.segments[i] = Some(entry);
                i
            }
            None => {
                self.segments.push(Some(entry));
                self.segments.len() - 1
            }
        };
        Ok(Some(StageSlot {
            seg: i,
            offset,
            len: rounded,
            sum: None,
        }))
    }

    /// The segment of a slot, and a view of it.
    pub(crate) fn segment(&self, slot: &StageSlot) -> Option<(SegmentRef, View<'_>)> {
        let s = self.segments.get(slot.seg)?.as_ref()?;
        Some((s.seg.sref, s.seg.map.view()))
    }

    /// Frees a slot; when that empties a dedicated segment, the segment is
    /// dropped and its description returned (peers must be told).
    pub(crate) fn free(&mut self, slot: &StageSlot) -> Option<SegmentRef> {
        let entry = self.segments.get_mut(slot.seg)?;
        let s = entry.as_mut()?;
        s.ranges.free(slot.offset, slot.len);
        if s.dedicated && s.ranges.is_idle() {
            let gone = entry.take()?;
            self.total -= gone.seg.map.len();
            return Some(gone.seg.sref);
        }
        None
    }
}
