//! Sending: fragments written into a peer's fast box or receive queue,
//! the work that waits in this process when neither has room, and the
//! requests of the rendezvous protocol.
//!
//! A fragment goes out at once when nothing waits for its peer and there
//! is room ([`State::emit`], [`Peer::try_write`]: the fast box first, else
//! a queue slot, each with the pair's next sequence number). Otherwise a
//! copy joins the peer's queue of [`Pending`] work, the peer joins the
//! backlog, and each `progress` writes what waits, in order, as far as
//! there is room ([`State::flush`]). The same queue carries work that is
//! not one fragment: a large send waiting for staging room, and the
//! chunks of emulated RDMA (answers to a get, the data of a put) that
//! [`State::step`] streams as the peer's queue takes them.
//!
//! A payload above the eager limit, or too large for one queue slot, goes
//! by rendezvous: a request ([`State::send_rts`]) tells the receiver where
//! to read it, and the send stays in `rts` ([`RtsOut`]) until the
//! receiver's completion comes back (handled in [`super::receive`]).
//! `send` copies the payload into the staging pool first ([`State::stage`],
//! [`Origin::Staged`]); [`ShmTransport::send_in_place`] leaves it where it
//! is when the receiver can read it there ([`Origin::InPlace`]), and stages
//! it after all if the receiver answers that it could not.

use fireopal_abi::btl::{Access, Completion, MemRegion, Rank};
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::shmq::{seq_next, Kind, Malformed};
use fireopal_core::wire::shm::{GetData, PutData, Rts, Source, Status};

use super::{
    checksum, io_error, malformed, Counters, Event, Peer, ShmTransport, State, MAX_HEADER,
};
use crate::buffer::StageSlot;
use crate::mem;
use crate::queue::{fifo_push, Frag};

/// A fragment with its data owned, waiting to be written.
#[derive(Debug)]
pub(super) struct OwnedFrag {
    pub(super) kind: Kind,
    pub(super) tag: u8,
    pub(super) hdr_len: u8,
    pub(super) data: Vec<u8>,
}

impl OwnedFrag {
    pub(super) fn of(frag: &Frag<'_>) -> Self {
        let mut data = Vec::with_capacity(frag.len());
        for p in frag.parts {
            data.extend_from_slice(p);
        }
        Self {
            kind: frag.kind,
            tag: frag.tag,
            hdr_len: frag.hdr_len,
            data,
        }
    }

    fn frag(&self) -> Frag<'_> {
        Frag {
            kind: self.kind,
            tag: self.tag,
            hdr_len: self.hdr_len,
            parts: [&self.data, &[], &[]],
        }
    }
}

/// Work waiting, in order, to be written to one peer.
#[derive(Debug)]
pub(super) enum Pending {
    /// A fragment; its send completes (if it has a cookie) once written.
    Frag(OwnedFrag, Option<u64>),
    /// A large send waiting for staging room.
    Stage {
        tag: u8,
        header: Vec<u8>,
        payload: Vec<u8>,
        cookie: u64,
    },
    /// Answers to an emulated get, chunk by chunk.
    GetStream {
        id: u64,
        reg: u64,
        addr: u64,
        len: u64,
        sent: u64,
    },
    /// Chunks of an emulated put.
    PutStream {
        id: u64,
        reg: u64,
        remote: u64,
        local: usize,
        len: u64,
        sent: u64,
    },
}

impl Pending {
    /// Bytes still to write into the peer's queue or to stream.
    pub(super) fn unsent(&self) -> u64 {
        match self {
            Pending::Frag(frag, _) => frag.data.len() as u64,
            Pending::Stage {
                header, payload, ..
            } => (header.len() + payload.len()) as u64,
            Pending::GetStream { len, sent, .. } | Pending::PutStream { len, sent, .. } => {
                len.saturating_sub(*sent)
            }
        }
    }
}

/// A rendezvous send waiting for its completion.
#[derive(Debug)]
pub(super) struct RtsOut {
    pub(super) peer: u32,
    pub(super) cookie: u64,
    pub(super) origin: Origin,
}

/// Where the payload of a rendezvous send waits.
// The header is kept inline so that an in-place send allocates nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(super) enum Origin {
    /// Copied into the staging pool.
    Staged(StageSlot),
    /// Where the caller keeps it (an in-place send); remembered so that the
    /// send can fall back to staging when the receiver cannot read it.
    InPlace {
        tag: u8,
        header: [u8; MAX_HEADER],
        hdr_len: u8,
        addr: usize,
        len: usize,
    },
}

impl Peer {
    /// Most fragment data one write to this peer can carry.
    fn fifo_capacity(&self) -> usize {
        self.layout.fifo_data_capacity() - checksum::trailer_len(self.checksum)
    }

    /// Writes `frag` now (fast box, else queue slot), with the next
    /// sequence number. `Ok(false)`: no room.
    #[inline]
    pub(super) fn try_write(
        &mut self,
        sender: u16,
        frag: &Frag<'_>,
        counters: &mut Counters,
    ) -> Result<bool, Malformed> {
        let mut trailer = [0; fireopal_core::shmq::sum::TRAILER];
        let frag = &self.seal(self.tx_seq, frag, &mut trailer);
        let view = self.seg.view();
        if self.fbox_tx.try_write(&view, self.tx_seq, frag) {
            self.tx_seq = seq_next(self.tx_seq);
            counters.fbox_frags += 1;
            return Ok(true);
        }
        match fifo_push(&view, &self.layout, sender, self.tx_seq, frag) {
            Ok(true) => {
                self.tx_seq = seq_next(self.tx_seq);
                counters.fifo_frags += 1;
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(_) => Err(Malformed::Inconsistent(
                "peer's receive queue has an impossible slot",
            )),
        }
    }
}

impl ShmTransport {
    /// Sends like [`Transport::send`], but lets the receiver read the
    /// payload where it is, once: through a mapping when it lies in a
    /// [`TransferBuffer`], with process_vm_readv when that is permitted,
    /// and otherwise by staging it as `send` does. Payloads up to the eager
    /// limit are simply sent.
    ///
    /// # Safety
    ///
    /// `payload` must stay valid for reads, and unchanged, until this
    /// returns `Done` or, after `Pending`, until `send_complete(cookie)` is
    /// reported.
    ///
    /// [`Transport::send`]: fireopal_abi::btl::Transport::send
    /// [`TransferBuffer`]: crate::TransferBuffer
    pub unsafe fn send_in_place(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: MemRegion,
        cookie: u64,
    ) -> Result<Completion, PluginError> {
        let p = self.st.usable_peer(peer)?;
        let len = payload.len();
        // SAFETY: valid for reads until completion, per the contract.
        let bytes = unsafe { mem::local_bytes(payload.addr(), len) };
        if !self.st.is_rendezvous(p, header.len(), len) {
            return self.st.send(p, tag, header, bytes, cookie);
        }
        self.st.reap_buffers();
        let addr = payload.addr() as u64;
        let source = if let Some(seg) = self
            .st
            .buffers
            .find(addr, len as u64)
            .filter(|_| self.st.cfg.single_copy.memfd())
        {
            Some(Source::Segment {
                seg,
                offset: addr - seg.base,
            })
        } else if self.st.reads_me(p) {
            Some(Source::Address(addr))
        } else {
            None
        };
        match source {
            Some(source) => {
                self.st.check_send_size(header, len)?;
                let mut kept = [0u8; MAX_HEADER];
                kept[..header.len()].copy_from_slice(header);
                let origin = Origin::InPlace {
                    tag,
                    header: kept,
                    hdr_len: header.len() as u8,
                    addr: payload.addr(),
                    len,
                };
                self.st
                    .send_rts(p, tag, header, len as u64, source, cookie, origin)?;
                Ok(Completion::Pending)
            }
            None => self.st.send(p, tag, header, bytes, cookie),
        }
    }
}

impl State {
    /// Whether a message goes by rendezvous rather than in one fragment.
    fn is_rendezvous(&self, p: u32, header: usize, payload: usize) -> bool {
        let cap = self
            .peers
            .get(p as usize)
            .and_then(Option::as_ref)
            .map_or(0, Peer::fifo_capacity);
        payload > self.cfg.eager_limit || header + payload > cap
    }

    fn check_send_size(&self, header: &[u8], payload: usize) -> Result<(), PluginError> {
        if header.len() > MAX_HEADER {
            return Err(PluginError::invalid(format!(
                "header of {} bytes exceeds shm's {MAX_HEADER}",
                header.len()
            )));
        }
        if (header.len() + payload) as u64 > self.cfg.max_send {
            return Err(PluginError::invalid(format!(
                "message of {} bytes exceeds shm's max send size {}",
                header.len() + payload,
                self.cfg.max_send
            )));
        }
        Ok(())
    }

    /// Writes `frag` to peer `p` now, or queues a copy (with the send's
    /// cookie, completed once written). `Ok(true)`: written now.
    pub(super) fn emit(
        &mut self,
        p: u32,
        frag: &Frag<'_>,
        cookie: Option<u64>,
    ) -> Result<bool, PluginError> {
        let local = self.local as u16;
        let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) else {
            return Err(PluginError::new(ErrorKind::UNREACHABLE, "peer was removed"));
        };
        if peer.pending.is_empty() {
            match peer.try_write(local, frag, &mut self.counters) {
                Ok(true) => return Ok(true),
                Ok(false) => {}
                Err(e) => {
                    let err = malformed(peer.rank, "corrupt receive queue", e);
                    self.fail_peer(p, err.clone());
                    return Err(err);
                }
            }
            self.backlog.push(p);
        }
        peer.pending
            .push_back(Pending::Frag(OwnedFrag::of(frag), cookie));
        self.counters.queued_frags += 1;
        Ok(false)
    }

    /// Queues non-fragment work for peer `p`, after whatever waits.
    pub(super) fn enqueue(&mut self, p: u32, work: Pending) {
        if let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) {
            if peer.pending.is_empty() {
                self.backlog.push(p);
            }
            peer.pending.push_back(work);
        }
    }

    pub(super) fn send(
        &mut self,
        p: u32,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        cookie: u64,
    ) -> Result<Completion, PluginError> {
        self.check_send_size(header, payload.len())?;
        if !self.is_rendezvous(p, header.len(), payload.len()) {
            let frag = Frag {
                kind: Kind::Active,
                tag,
                hdr_len: header.len() as u8,
                parts: [header, payload, &[]],
            };
            return Ok(if self.emit(p, &frag, Some(cookie))? {
                Completion::Done
            } else {
                Completion::Pending
            });
        }
        // Rendezvous from a staging copy (the caller may reuse `payload`
        // as soon as this returns). Staging waits behind queued work.
        let queued = self
            .peers
            .get(p as usize)
            .and_then(Option::as_ref)
            .is_some_and(|peer| !peer.pending.is_empty());
        if !queued {
            if let Some(slot) = self.stage(payload)? {
                self.send_staged(p, tag, header, payload.len() as u64, slot, cookie)?;
                return Ok(Completion::Pending);
            }
        }
        self.enqueue(
            p,
            Pending::Stage {
                tag,
                header: header.to_vec(),
                payload: payload.to_vec(),
                cookie,
            },
        );
        Ok(Completion::Pending)
    }

    /// Copies `payload` into the staging pool; `None` when it is full.
    fn stage(&mut self, payload: &[u8]) -> Result<Option<StageSlot>, PluginError> {
        let Some(mut slot) = self
            .staging
            .alloc(payload.len(), &mut self.next_seg_id)
            .map_err(|e| io_error("cannot grow the staging pool", e))?
        else {
            return Ok(None);
        };
        if let Some((_, view)) = self.staging.segment(&slot) {
            slot.sum =
                checksum::write_staged(&view, slot.offset as usize, payload, self.cfg.checksum);
        }
        self.counters.rndv_staged += 1;
        Ok(Some(slot))
    }

    fn send_staged(
        &mut self,
        p: u32,
        tag: u8,
        header: &[u8],
        len: u64,
        slot: StageSlot,
        cookie: u64,
    ) -> Result<(), PluginError> {
        let Some((seg, _)) = self.staging.segment(&slot) else {
            return Err(PluginError::new(
                ErrorKind::OTHER,
                "staging slot without segment",
            ));
        };
        let source = Source::Segment {
            seg,
            offset: slot.offset,
        };
        self.send_rts(p, tag, header, len, source, cookie, Origin::Staged(slot))
    }

    #[allow(clippy::too_many_arguments)]
    fn send_rts(
        &mut self,
        p: u32,
        tag: u8,
        header: &[u8],
        len: u64,
        source: Source,
        cookie: u64,
        origin: Origin,
    ) -> Result<(), PluginError> {
        let id = self.next_op;
        self.next_op += 1;
        let sum = self.rts_sum(&origin);
        let rts = Rts {
            id,
            len,
            source,
            sum,
        }
        .encode();
        let frag = Frag {
            kind: Kind::Rts,
            tag,
            hdr_len: header.len() as u8,
            parts: [&rts, header, &[]],
        };
        // Recorded only once the request is out (or queued): if writing
        // fails, the caller gets the error and no completion ever follows.
        // Nothing can answer before this returns.
        if let Err(e) = self.emit(p, &frag, None) {
            if let Origin::Staged(slot) = origin {
                self.free_stage(&slot);
            }
            return Err(e);
        }
        self.rts.insert(
            id,
            RtsOut {
                peer: p,
                cookie,
                origin,
            },
        );
        Ok(())
    }

    pub(super) fn free_stage(&mut self, slot: &StageSlot) {
        if let Some(gone) = self.staging.free(slot) {
            self.announce_unmap(&gone);
        }
    }

    /// Writes what waits for each peer, in order, as far as there is room.
    pub(super) fn flush(&mut self) {
        let mut i = 0;
        while i < self.backlog.len() {
            let p = self.backlog[i];
            self.flush_peer(p);
            let done = self
                .peers
                .get(p as usize)
                .and_then(Option::as_ref)
                .is_none_or(|peer| peer.pending.is_empty() || peer.failed.is_some());
            if done {
                self.backlog.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    fn flush_peer(&mut self, p: u32) {
        let Some(mut queue) = self
            .peers
            .get_mut(p as usize)
            .and_then(Option::as_mut)
            .filter(|peer| peer.failed.is_none())
            .map(|peer| std::mem::take(&mut peer.pending))
        else {
            return;
        };
        let mut failure = None;
        while let Some(front) = queue.front_mut() {
            match self.step(p, front) {
                Ok(true) => {
                    queue.pop_front();
                }
                Ok(false) => break,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) {
            // `step` never queues to the peer it serves; were it to, that
            // work goes after.
            queue.append(&mut peer.pending);
            peer.pending = queue;
        }
        if let Some(e) = failure {
            // With the queue back in place, so that its sends fail too.
            self.fail_peer(p, e);
        }
    }

    /// Advances one piece of pending work; `Ok(true)` when it is done.
    fn step(&mut self, p: u32, work: &mut Pending) -> Result<bool, PluginError> {
        let local = self.local as u16;
        match work {
            Pending::Frag(frag, cookie) => {
                let written = self.write_now(p, local, &frag.frag())?;
                if written {
                    if let Some(c) = cookie {
                        self.events.push_back(Event::Send(*c, Ok(())));
                    }
                }
                Ok(written)
            }
            Pending::Stage {
                tag,
                header,
                payload,
                cookie,
            } => {
                let slot = match self.stage(payload) {
                    Ok(Some(slot)) => slot,
                    Ok(None) => return Ok(false),
                    // The staging pool could not grow: a local failure
                    // that ends this send, not the peer.
                    Err(e) => {
                        self.events.push_back(Event::Send(*cookie, Err(e)));
                        return Ok(true);
                    }
                };
                let id = self.next_op;
                self.next_op += 1;
                let Some((seg, _)) = self.staging.segment(&slot) else {
                    return Err(PluginError::new(
                        ErrorKind::OTHER,
                        "staging slot without segment",
                    ));
                };
                let rts = Rts {
                    id,
                    len: payload.len() as u64,
                    source: Source::Segment {
                        seg,
                        offset: slot.offset,
                    },
                    sum: slot.sum,
                }
                .encode();
                self.rts.insert(
                    id,
                    RtsOut {
                        peer: p,
                        cookie: *cookie,
                        origin: Origin::Staged(slot),
                    },
                );
                let mut data = rts.to_vec();
                data.extend_from_slice(header);
                *work = Pending::Frag(
                    OwnedFrag {
                        kind: Kind::Rts,
                        tag: *tag,
                        hdr_len: header.len() as u8,
                        data,
                    },
                    None,
                );
                self.step(p, work)
            }
            Pending::GetStream {
                id,
                reg,
                addr,
                len,
                sent,
            } => {
                let live = self
                    .regs
                    .get(reg)
                    .is_some_and(|r| r.allows(Access::REMOTE_READ, *addr, *len));
                if !live {
                    let refusal = GetData {
                        id: *id,
                        offset: *sent,
                        status: Status::Refused,
                    }
                    .encode();
                    let frag = Frag::control(Kind::GetData, &refusal);
                    return self.write_now(p, local, &frag);
                }
                let id = *id;
                let head = |offset| {
                    GetData {
                        id,
                        offset,
                        status: Status::Ok,
                    }
                    .encode()
                };
                // SAFETY: inside a live registration granting remote reads
                // (checked above), valid per `MemRegion`'s contract until
                // deregistered.
                unsafe { self.stream(p, local, Kind::GetData, *addr as usize, *len, sent, head) }
            }
            Pending::PutStream {
                id,
                reg,
                remote,
                local: src,
                len,
                sent,
            } => {
                let (id, addr, total, reg) = (*id, *remote, *len, *reg);
                let head = |offset| {
                    PutData {
                        id,
                        addr,
                        total,
                        offset,
                        reg,
                    }
                    .encode()
                };
                // SAFETY: the put's local region, valid for reads until its
                // completion per `MemRegion`'s contract.
                unsafe { self.stream(p, local, Kind::PutData, *src, *len, sent, head) }
            }
        }
    }

    /// Writes the bytes `sent..len` of the local memory at `src` to peer
    /// `p` in `kind` fragments as large as its queue takes, each behind the
    /// sub-header `head` makes for the fragment's offset, and moves `sent`
    /// on. False when the queue filled first (the rest goes later).
    ///
    /// # Safety
    ///
    /// `src..src + len` must be valid for reads during the call.
    #[allow(clippy::too_many_arguments)]
    unsafe fn stream<const H: usize>(
        &mut self,
        p: u32,
        local: u16,
        kind: Kind,
        src: usize,
        len: u64,
        sent: &mut u64,
        head: impl Fn(u64) -> [u8; H],
    ) -> Result<bool, PluginError> {
        while *sent < len {
            let cap = self.chunk_capacity(p, H);
            let n = (len - *sent).min(cap as u64);
            let head = head(*sent);
            // SAFETY: a sub-range of `src..src + len`, readable per the
            // caller's contract.
            let bytes = unsafe { mem::local_bytes(src + *sent as usize, n as usize) };
            let frag = Frag {
                kind,
                tag: 0,
                hdr_len: 0,
                parts: [&head, bytes, &[]],
            };
            if !self.write_now(p, local, &frag)? {
                return Ok(false);
            }
            *sent += n;
        }
        Ok(true)
    }

    /// Data bytes per chunk of emulated RDMA to peer `p`.
    fn chunk_capacity(&self, p: u32, fixed: usize) -> usize {
        let cap = self
            .peers
            .get(p as usize)
            .and_then(Option::as_ref)
            .map_or(0, Peer::fifo_capacity);
        cap.saturating_sub(fixed).max(1)
    }

    fn write_now(&mut self, p: u32, local: u16, frag: &Frag<'_>) -> Result<bool, PluginError> {
        let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) else {
            return Err(PluginError::new(ErrorKind::UNREACHABLE, "peer was removed"));
        };
        let rank = peer.rank;
        peer.try_write(local, frag, &mut self.counters)
            .map_err(|e| malformed(rank, "corrupt receive queue", e))
    }
}
