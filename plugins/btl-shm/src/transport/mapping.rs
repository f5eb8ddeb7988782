//! Mappings: the segments of this process that peers map, and this
//! process's mappings of its peers' segments.
//!
//! Besides its queue segment, a process offers peers memfd segments to
//! read with a single copy: transfer buffers, the host's memory files
//! adopted with [`ShmTransport::register_segment`], and the staging pool's
//! segments. When one goes away every peer is told
//! ([`State::announce_unmap`]); a transfer buffer the caller dropped is
//! found at the module's next call ([`State::reap_buffers`]).
//!
//! A peer's segment is mapped on first use and kept in the module's
//! [`RegCache`](fireopal_core::regcache::RegCache), keyed by peer and
//! address ([`keyspace`]) until the owner's unmap notice, the peer's
//! failure or the cache's limit drops it ([`State::map_segment`]). The
//! cache's mapper ([`PeerMapper`]) learns which descriptor to map through a
//! request slot set around each lookup.

use std::os::fd::BorrowedFd;

use fireopal_abi::btl::MemRegion;
use fireopal_abi::PluginError;
use fireopal_core::regcache;
use fireopal_core::shmq::keyspace;
use fireopal_core::shmq::Kind;
use fireopal_core::wire::shm::{SegmentRef, Unmap};

use super::{io_error, ShmTransport, State};
use crate::buffer::{AdoptError, TransferBuffer};
use crate::mapcache::{MapRequest, PeerMapper, PeerMapping, MAPPING_ACCESS};
use crate::queue::Frag;

impl ShmTransport {
    /// A new transfer buffer of at least `len` bytes (rounded up to
    /// pages) in a memfd segment of its own. Peers read it with a single
    /// copy, mapping it once. Dropping it (or
    /// [`release_transfer_buffer`](Self::release_transfer_buffer)) unmaps
    /// it and tells the peers.
    pub fn alloc_transfer_buffer(&mut self, len: usize) -> Result<TransferBuffer, PluginError> {
        self.st.reap_buffers();
        let id = self.st.next_seg_id;
        self.st.next_seg_id += 1;
        self.st
            .buffers
            .create(id, len)
            .map_err(|e| io_error("cannot make a transfer buffer", e))
    }

    /// Unmaps a transfer buffer and tells the peers now (dropping it does
    /// the same, the peers being told at the module's next call).
    pub fn release_transfer_buffer(&mut self, buffer: TransferBuffer) {
        drop(buffer);
        self.st.reap_buffers();
    }

    /// Adopts a memory file of the caller (the symmetric heap's memfd),
    /// mapped shared at `region` from offset 0, as a single-copy segment:
    /// payloads and registrations inside `region` are then read by peers
    /// through a cached mapping of the file, as for a [`TransferBuffer`].
    /// The file must be whole pages long and sealed with `F_SEAL_SHRINK`,
    /// `F_SEAL_GROW` and `F_SEAL_SEAL` (create it with
    /// `MFD_ALLOW_SEALING`), because peers map whole pages and refuse a
    /// file whose size could change under their mapping. `fd` is
    /// duplicated; the caller keeps its own. `region` must stay mapped
    /// until [`unregister_segment`](Self::unregister_segment) or the
    /// module's end. Returns the segment's id.
    pub fn register_segment(
        &mut self,
        fd: BorrowedFd<'_>,
        region: MemRegion,
    ) -> Result<u64, PluginError> {
        if !self.st.cfg.single_copy.memfd() {
            return Err(PluginError::unsupported(&format!(
                "mapped segments (memfd mappings disabled by {})",
                crate::PARAM_SINGLE_COPY
            )));
        }
        self.st.reap_buffers();
        let id = self.st.next_seg_id;
        let base = region.addr() as u64;
        match self.st.buffers.adopt(id, fd, base, region.len() as u64) {
            Ok(_) => {
                self.st.next_seg_id += 1;
                Ok(id)
            }
            Err(AdoptError::Io(e)) => Err(io_error("cannot adopt the memory file", e)),
            Err(AdoptError::Refused(why)) => Err(PluginError::invalid(format!(
                "cannot adopt the memory file: {why}"
            ))),
        }
    }

    /// Forgets a segment of [`register_segment`](Self::register_segment)
    /// and tells every peer to drop its mapping. Sends from it must be
    /// complete.
    pub fn unregister_segment(&mut self, id: u64) -> Result<(), PluginError> {
        let seg = self
            .st
            .buffers
            .forget(id)
            .ok_or_else(|| PluginError::invalid(format!("no registered segment {id}")))?;
        self.st.announce_unmap(&seg);
        Ok(())
    }
}

impl State {
    /// Tells every peer that a segment of this process went away.
    pub(super) fn announce_unmap(&mut self, seg: &SegmentRef) {
        let notice = Unmap {
            id: seg.id,
            base: seg.base,
            len: seg.len,
        }
        .encode();
        let frag = Frag::control(Kind::Unmap, &notice);
        for p in self.active.clone() {
            // A failing peer is reported through the event queue.
            let _ = self.emit(p, &frag, None);
        }
    }

    pub(super) fn reap_buffers(&mut self) {
        for seg in self.buffers.reap() {
            self.announce_unmap(&seg);
        }
    }

    /// The cached mapping of peer `p`'s segment `seg`, mapping it on a
    /// miss. A cached mapping of an older segment at the same place (its
    /// unmap notice not seen yet) is dropped and the new one mapped.
    pub(super) fn map_segment(
        &mut self,
        p: u32,
        seg: &SegmentRef,
    ) -> Result<regcache::Registration<PeerMapper>, String> {
        let peer = self
            .peers
            .get(p as usize)
            .and_then(Option::as_ref)
            .ok_or("peer was removed")?;
        if seg.base % fireopal_core::shmq::layout::PAGE as u64 != 0
            || seg.len % fireopal_core::shmq::layout::PAGE as u64 != 0
        {
            return Err("segment is not whole pages".into());
        }
        let (start, len) = keyspace::peer_key(p, seg.base, seg.len)
            .ok_or("segment address outside the cacheable range")?;
        let key = regcache::Region::new(start, len).ok_or("empty segment")?;
        let request = MapRequest {
            key,
            pid: peer.pid,
            pidfd: peer.process.pidfd(),
            seg: *seg,
        };
        for _ in 0..2 {
            self.set_map_request(Some(request));
            let got = self.cache.get(start, len, MAPPING_ACCESS, self.cache_id);
            self.set_map_request(None);
            let reg = got.map_err(|e| e.to_string())?;
            let h: &PeerMapping = reg.handle();
            if h.seg_id == seg.id && h.file_id == seg.file_id && h.len as u64 == seg.len {
                return Ok(reg);
            }
            drop(reg);
            self.cache.invalidate(start, len);
        }
        Err("a stale mapping of the segment stayed in use".into())
    }

    fn set_map_request(&self, request: Option<MapRequest>) {
        if let Ok(mut slot) = self.mapper.lock() {
            *slot = request;
        }
    }
}
