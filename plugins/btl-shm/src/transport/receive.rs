//! Receiving: the loop over what peers wrote into this process's queue
//! segment, and what each fragment does.
//!
//! A poll that finds nothing ([`ShmTransport::arrived`] false) only
//! hands consumed lines back ([`ShmTransport::idle`]). Otherwise
//! [`ShmTransport::receive`] first hands over queue fragments that
//! arrived before their sender was added (kept in `stash`), then takes up
//! to [`FBOX_BATCH`] entries from each fast box that has some (the first,
//! when it is an in-order active message, through [`State::take_active`]),
//! then goes once round the receive queue. Order per peer holds across
//! the two paths through the pair's sequence numbers: fast-box entries are
//! taken while their number is the next one ([`State::drain_fbox`]), and
//! a queue fragment first drains the fast box up to its own number
//! ([`State::take_fragment`]).
//!
//! [`State::handle`] acts on one fragment by kind: active messages go to
//! the host; a rendezvous request is fetched ([`State::receive_rts`]:
//! through a cached mapping of the sender's segment, or with
//! process_vm_readv into a bounce buffer) and answered with its
//! completion; a completion finishes a rendezvous send (or stages an
//! in-place payload the receiver could not read); an unmap notice drops
//! cached mappings; the rest are the two sides of emulated RDMA. A
//! fragment that is corrupt fails the peer that wrote it; a queue slot
//! that names no valid sender is counted in
//! [`Counters::corrupt_slots`](super::Counters::corrupt_slots) and
//! skipped.

use std::collections::VecDeque;

use fireopal_abi::btl::{Access, Completion, EventSink, Rank};
use fireopal_abi::host::LogLevel;
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::shmq::{keyspace, seq_distance, seq_next, Kind, Malformed};
use fireopal_core::wire::shm::{
    Fin, GetData, GetRequest, PutAck, PutData, Rts, Source, Status, Unmap, GET_DATA_LEN,
    PUT_DATA_LEN, RTS_LEN,
};

use super::{checksum, malformed, Origin, OwnedFrag, Pending, ShmTransport, State};
use crate::mem::{self, View};
use crate::queue::{FboxItem, FifoItem, Frag};
use crate::sys;

/// Entries taken from one fast box per `progress` call.
const FBOX_BATCH: usize = 64;

/// Largest bounce buffer kept between rendezvous read with
/// process_vm_readv.
const BOUNCE_KEEP: usize = 64 << 20;

fn status_result(status: Status, what: &str) -> Result<(), PluginError> {
    match status {
        Status::Ok => Ok(()),
        Status::Refused => Err(PluginError::invalid(format!(
            "{what}: the target refused the range"
        ))),
        Status::FetchFailed => Err(PluginError::new(
            ErrorKind::IO,
            format!("{what}: the receiver could not fetch the data"),
        )),
    }
}

impl ShmTransport {
    /// Whether a peer wrote anything to be received: a fast-box entry at
    /// a reader's position, or a fragment at the receive queue's head.
    /// One load each; an idle poll is this and [`idle`](Self::idle).
    #[inline]
    pub(super) fn arrived(&self) -> bool {
        let view = self.own.seg.map.view();
        let st = &self.st;
        st.active.iter().any(|&p| {
            st.peers
                .get(p as usize)
                .and_then(Option::as_ref)
                .is_some_and(|peer| peer.fbox_rx.pending(&view))
        }) || self.own.fifo.pending(&view)
    }

    /// What a poll that found nothing does: hands consumed fast-box lines
    /// back to their writers, and counts the call for the liveness check.
    #[inline]
    pub(super) fn idle(&mut self) {
        let view = self.own.seg.map.view();
        self.st.publish_idle(&view);
        self.st.tick_liveness();
    }

    pub(super) fn receive(&mut self, sink: &mut dyn EventSink) -> usize {
        let ShmTransport { own, st, .. } = self;
        let view = own.seg.map.view();
        let mut events = 0;
        // Fragments that arrived before their sender was added.
        if st.stashed > 0 {
            for p in st.active.clone() {
                while let Some((seq, frag)) =
                    st.stash.get_mut(p as usize).and_then(VecDeque::pop_front)
                {
                    st.stashed -= 1;
                    events += st.take_fragment(
                        &view,
                        p,
                        seq,
                        (frag.kind, frag.tag, frag.hdr_len),
                        &frag.data,
                        sink,
                    );
                }
            }
        }
        for i in 0..st.active.len() {
            let Some(&p) = st.active.get(i) else { break };
            let waiting = st
                .peers
                .get(p as usize)
                .and_then(Option::as_ref)
                .is_some_and(|peer| peer.fbox_rx.pending(&view));
            if !waiting {
                continue;
            }
            // The commonest arrival, one active message, taken without the
            // whole drain; the drain takes what follows it, and anything
            // else (a wrap, another kind, a corrupt entry).
            let more = match st.take_active(&view, p, sink) {
                Some(more) => {
                    events += 1;
                    more
                }
                None => true,
            };
            if more {
                events += st.drain_fbox(&view, p, None, sink).unwrap_or(0);
            }
        }
        if events == 0 {
            // Nothing arrived: hand consumed fast-box lines back now, while
            // no message waits for an answer.
            st.publish_idle(&view);
        }
        let layout = &own.layout;
        if !own.fifo.pending(&view) {
            return events;
        }
        for _ in 0..layout.params().fifo_slots {
            match own.fifo.peek(&view, layout) {
                FifoItem::Empty => break,
                FifoItem::BrokenSlot => {
                    // Nobody to blame: skip the slot so the queue goes on.
                    st.counters.corrupt_slots += 1;
                    st.log(
                        LogLevel::Error,
                        "shm: a receive-queue slot is corrupt; skipped",
                    );
                    own.fifo.release(&view, layout);
                }
                FifoItem::Corrupt(sender, e) => {
                    own.fifo.release(&view, layout);
                    let p = sender.map(u32::from).filter(|&s| s != st.local);
                    match p.and_then(|p| {
                        st.peers
                            .get(p as usize)
                            .and_then(Option::as_ref)
                            .map(|x| (p, x.rank))
                    }) {
                        Some((p, rank)) => {
                            st.fail_peer(p, malformed(rank, "corrupt queue fragment", e))
                        }
                        None => {
                            st.counters.corrupt_slots += 1;
                            st.log(
                                LogLevel::Error,
                                &format!("shm: corrupt queue fragment skipped: {e}"),
                            );
                        }
                    }
                }
                FifoItem::Fragment(h, data) => {
                    let p = u32::from(h.sender);
                    let known = st.peers.get(p as usize).and_then(Option::as_ref);
                    match known {
                        Some(peer) if peer.failed.is_none() => {
                            events += st.take_fragment(
                                &view,
                                p,
                                h.seq,
                                (h.kind, h.tag, h.hdr_len),
                                data,
                                sink,
                            );
                            if let Ok(n) = st.drain_fbox(&view, p, None, sink) {
                                events += n;
                            }
                        }
                        Some(_) => {}
                        None if p != st.local => {
                            if let Some(stash) = st.stash.get_mut(p as usize) {
                                let frag = Frag {
                                    kind: h.kind,
                                    tag: h.tag,
                                    hdr_len: h.hdr_len,
                                    parts: [data, &[], &[]],
                                };
                                stash.push_back((h.seq, OwnedFrag::of(&frag)));
                                st.stashed += 1;
                            }
                        }
                        None => {
                            st.counters.corrupt_slots += 1;
                        }
                    }
                    own.fifo.release(&view, layout);
                }
            }
        }
        events
    }
}

impl State {
    /// Hands every active peer's consumed fast-box lines back to its
    /// writer, off the messages' path.
    #[inline]
    fn publish_idle(&mut self, view: &View<'_>) {
        for &p in &self.active {
            if let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) {
                peer.fbox_rx.publish_idle(view);
            }
        }
    }

    /// Takes the entry at peer `p`'s fast-box position if it is an active
    /// message next in order (and fragments carry no checksum) and hands
    /// it to the host; then whether another entry waits. `None`: nothing
    /// was taken, and [`drain_fbox`](Self::drain_fbox) is to look (it
    /// also reports a corrupt entry).
    #[inline]
    fn take_active(&mut self, view: &View<'_>, p: u32, sink: &mut dyn EventSink) -> Option<bool> {
        if self.cfg.checksum {
            return None;
        }
        let peer = self.peers.get_mut(p as usize)?.as_mut()?;
        if peer.failed.is_some() {
            return None;
        }
        let Ok(FboxItem::Entry(h, data)) = peer.fbox_rx.peek(view) else {
            return None;
        };
        if h.kind != Kind::Active || h.seq != peer.rx_seq {
            return None;
        }
        peer.rx_seq = seq_next(peer.rx_seq);
        let (header, payload) = data.split_at(usize::from(h.hdr_len).min(data.len()));
        sink.deliver(peer.rank, h.tag, header, payload);
        peer.fbox_rx.consume(Some(h.lines()));
        peer.fbox_rx.publish(view);
        Some(peer.fbox_rx.pending(view))
    }

    /// Takes entries from peer `p`'s fast box while they are next in
    /// order; with `until`, takes exactly those before sequence `until`
    /// (they must be there: a queue fragment with that number arrived).
    fn drain_fbox(
        &mut self,
        view: &View<'_>,
        p: u32,
        until: Option<u32>,
        sink: &mut dyn EventSink,
    ) -> Result<usize, PluginError> {
        let mut events = 0;
        let mut taken = 0usize;
        let fifo_slots = self.own_layout.params().fifo_slots;
        let limit = 2 * self.own_layout.fbox_lines() as usize;
        let result = loop {
            let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) else {
                break Ok(());
            };
            // Handling an entry may have failed the peer (a reply that
            // found its queue broken): nothing more of it is delivered.
            if peer.failed.is_some() {
                break Ok(());
            }
            if until == Some(peer.rx_seq) || (until.is_none() && taken >= FBOX_BATCH) {
                break Ok(());
            }
            if taken > limit {
                break Err(Malformed::Inconsistent(
                    "fast box never reaches the queue fragment",
                ));
            }
            let item = match peer.fbox_rx.peek(view) {
                Ok(item) => item,
                Err(e) => break Err(e),
            };
            match item {
                FboxItem::Empty => {
                    if until.is_some() {
                        break Err(Malformed::Inconsistent(
                            "queue fragment ahead of missing fast-box entries",
                        ));
                    }
                    break Ok(());
                }
                FboxItem::Wrap(seq) => {
                    // The marker carries the number of the entry after it.
                    if seq != peer.rx_seq {
                        if until.is_some() || seq_distance(peer.rx_seq, seq) > fifo_slots {
                            break Err(Malformed::Inconsistent("wrap marker out of sequence"));
                        }
                        // Earlier fragments are in the queue.
                        break Ok(());
                    }
                    peer.fbox_rx.consume(None);
                    peer.fbox_rx.publish(view);
                    taken += 1;
                }
                FboxItem::Entry(h, data) => {
                    if h.seq != peer.rx_seq {
                        if until.is_some() || seq_distance(peer.rx_seq, h.seq) > fifo_slots {
                            break Err(Malformed::Inconsistent("fast-box entry out of sequence"));
                        }
                        // Earlier fragments are in the queue.
                        break Ok(());
                    }
                    peer.rx_seq = seq_next(peer.rx_seq);
                    let lines = h.lines();
                    let frag = (h.kind, h.tag, h.hdr_len);
                    let data = match checksum::open(
                        self.cfg.checksum,
                        &mut self.counters,
                        h.seq,
                        frag,
                        data,
                    ) {
                        Ok(data) => data,
                        Err(e) => break Err(e),
                    };
                    let handled = if h.kind == Kind::Active {
                        // The common case, straight to the host.
                        let (header, payload) =
                            data.split_at(usize::from(h.hdr_len).min(data.len()));
                        sink.deliver(peer.rank, h.tag, header, payload);
                        Ok(1)
                    } else {
                        self.handle(p, h.kind, h.tag, h.hdr_len, data, sink)
                    };
                    if let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) {
                        peer.fbox_rx.consume(Some(lines));
                        peer.fbox_rx.publish(view);
                    }
                    taken += 1;
                    match handled {
                        Ok(n) => events += n,
                        Err(e) => break Err(e),
                    }
                }
            }
        };
        if let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) {
            if let Err(e) = result {
                let rank = peer.rank;
                self.fail_peer(p, malformed(rank, "corrupt fast-box entry", e));
            }
        }
        Ok(events)
    }

    /// Handles one queue fragment from peer `p` (live or stashed): first
    /// the fast-box entries numbered before it, then the fragment.
    fn take_fragment(
        &mut self,
        view: &View<'_>,
        p: u32,
        seq: u32,
        frag: (Kind, u8, u8),
        data: &[u8],
        sink: &mut dyn EventSink,
    ) -> usize {
        let mut events = match self.drain_fbox(view, p, Some(seq), sink) {
            Ok(n) => n,
            Err(_) => return 0,
        };
        let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) else {
            return events;
        };
        if peer.failed.is_some() {
            return events;
        }
        peer.rx_seq = seq_next(peer.rx_seq);
        let rank = peer.rank;
        let data = match checksum::open(self.cfg.checksum, &mut self.counters, seq, frag, data) {
            Ok(data) => data,
            Err(e) => {
                self.fail_peer(p, malformed(rank, "corrupt queue fragment", e));
                return events;
            }
        };
        match self.handle(p, frag.0, frag.1, frag.2, data, sink) {
            Ok(n) => events += n,
            Err(e) => self.fail_peer(p, malformed(rank, "corrupt queue fragment", e)),
        }
        events
    }

    /// Acts on one fragment from peer `p`; returns the events reported.
    fn handle(
        &mut self,
        p: u32,
        kind: Kind,
        tag: u8,
        hdr_len: u8,
        data: &[u8],
        sink: &mut dyn EventSink,
    ) -> Result<usize, Malformed> {
        let rank = match self.peers.get(p as usize).and_then(Option::as_ref) {
            Some(peer) => peer.rank,
            None => return Ok(0),
        };
        let hdr_len = usize::from(hdr_len);
        if !matches!(kind, Kind::Active | Kind::Rts) && hdr_len != 0 {
            return Err(Malformed::Inconsistent("header on a control fragment"));
        }
        match kind {
            Kind::Active => {
                let (header, payload) = data.split_at(hdr_len.min(data.len()));
                sink.deliver(rank, tag, header, payload);
                Ok(1)
            }
            Kind::Rts => {
                let rts = Rts::decode(data)?;
                let header = data
                    .get(RTS_LEN..)
                    .filter(|h| h.len() == hdr_len)
                    .ok_or(Malformed::Inconsistent("rendezvous header length"))?;
                let mut checked = checksum::Checked::new(sink, rts.sum, self.cfg.checksum);
                let status = self.receive_rts(p, rank, tag, header, &rts, &mut checked);
                checked.verdict(&mut self.counters)?;
                let fin = Fin { id: rts.id, status }.encode();
                let frag = Frag::control(Kind::Fin, &fin);
                let _ = self.emit(p, &frag, None);
                Ok(usize::from(status == Status::Ok))
            }
            Kind::Fin => {
                let fin = Fin::decode(data)?;
                let out = match self.rts.get(&fin.id) {
                    Some(out) if out.peer == p => self.rts.remove(&fin.id),
                    _ => None,
                }
                .ok_or(Malformed::Inconsistent(
                    "completion of an unknown rendezvous",
                ))?;
                match out.origin {
                    Origin::Staged(slot) => self.free_stage(&slot),
                    Origin::InPlace {
                        tag,
                        header,
                        hdr_len,
                        addr,
                        len,
                    } if fin.status == Status::FetchFailed => {
                        // The receiver could not read it where it is: send
                        // it again from a staging copy, same cookie.
                        self.log(
                            LogLevel::Info,
                            &format!(
                                "shm: rank {rank} could not read an in-place payload; staging it"
                            ),
                        );
                        self.counters.rndv_fallbacks += 1;
                        // SAFETY: an in-place payload stays valid until its
                        // completion, which has not been reported yet.
                        let bytes = unsafe { mem::local_bytes(addr, len) };
                        let header = header.get(..usize::from(hdr_len)).unwrap_or(&[]);
                        return Ok(match self.send(p, tag, header, bytes, out.cookie) {
                            Ok(Completion::Pending) => 0,
                            Ok(Completion::Done) => {
                                sink.send_complete(out.cookie, Ok(()));
                                1
                            }
                            Err(e) => {
                                sink.send_complete(out.cookie, Err(e));
                                1
                            }
                        });
                    }
                    Origin::InPlace { .. } => {}
                }
                sink.send_complete(out.cookie, status_result(fin.status, "rendezvous send"));
                Ok(1)
            }
            Kind::Unmap => {
                let u = Unmap::decode(data)?;
                self.counters.unmaps_received += 1;
                if let Some((start, len)) = keyspace::peer_key(p, u.base, u.len) {
                    self.cache.invalidate(start, len);
                }
                Ok(0)
            }
            Kind::GetRequest => {
                let g = GetRequest::decode(data)?;
                let ok = self
                    .regs
                    .get(&g.reg)
                    .is_some_and(|r| r.allows(Access::REMOTE_READ, g.addr, g.len));
                if ok && g.len > 0 {
                    self.enqueue(
                        p,
                        Pending::GetStream {
                            id: g.id,
                            reg: g.reg,
                            addr: g.addr,
                            len: g.len,
                            sent: 0,
                        },
                    );
                } else {
                    let refusal = GetData {
                        id: g.id,
                        offset: 0,
                        status: Status::Refused,
                    }
                    .encode();
                    let frag = Frag::control(Kind::GetData, &refusal);
                    let _ = self.emit(p, &frag, None);
                }
                Ok(0)
            }
            Kind::GetData => {
                let d = GetData::decode(data)?;
                let bytes = data.get(GET_DATA_LEN..).unwrap_or(&[]);
                let out = match self.rdma.get_mut(&d.id) {
                    Some(out) if out.peer == p && !out.is_put => out,
                    _ => return Err(Malformed::Inconsistent("data for an unknown get")),
                };
                if d.status != Status::Ok {
                    let cookie = out.cookie;
                    self.rdma.remove(&d.id);
                    sink.rdma_complete(cookie, status_result(d.status, "get"));
                    return Ok(1);
                }
                let end = d
                    .offset
                    .checked_add(bytes.len() as u64)
                    .filter(|&e| e <= out.len && out.received + bytes.len() as u64 <= out.len)
                    .ok_or(Malformed::OutOfRange("get data"))?;
                let _ = end;
                // SAFETY: inside the get's local region (checked above),
                // valid for writes until its completion per `MemRegion`'s
                // contract; `bytes` is in the receive queue, elsewhere.
                unsafe {
                    mem::copy(
                        bytes.as_ptr(),
                        (out.local + d.offset as usize) as *mut u8,
                        bytes.len(),
                    );
                }
                out.received += bytes.len() as u64;
                if out.received == out.len {
                    let cookie = out.cookie;
                    self.rdma.remove(&d.id);
                    sink.rdma_complete(cookie, Ok(()));
                    return Ok(1);
                }
                Ok(0)
            }
            Kind::PutData => {
                let bytes = data.get(PUT_DATA_LEN..).unwrap_or(&[]);
                let d = PutData::decode(data, bytes.len())?;
                let ok = self
                    .regs
                    .get(&d.reg)
                    .is_some_and(|r| r.allows(Access::REMOTE_WRITE, d.addr, d.total));
                if ok {
                    // SAFETY: inside a live registration granting remote
                    // writes (checked above, whole put range), valid per
                    // `MemRegion`'s contract until deregistered.
                    unsafe {
                        mem::copy(
                            bytes.as_ptr(),
                            (d.addr + d.offset) as usize as *mut u8,
                            bytes.len(),
                        );
                    }
                }
                if d.offset + bytes.len() as u64 == d.total {
                    let ack = PutAck {
                        id: d.id,
                        status: if ok { Status::Ok } else { Status::Refused },
                    }
                    .encode();
                    let frag = Frag::control(Kind::PutAck, &ack);
                    let _ = self.emit(p, &frag, None);
                }
                Ok(0)
            }
            Kind::PutAck => {
                let a = PutAck::decode(data)?;
                let out = match self.rdma.get(&a.id) {
                    Some(out) if out.peer == p && out.is_put => self.rdma.remove(&a.id),
                    _ => None,
                }
                .ok_or(Malformed::Inconsistent("acknowledgement of an unknown put"))?;
                sink.rdma_complete(out.cookie, status_result(a.status, "put"));
                Ok(1)
            }
            Kind::Wrap => Err(Malformed::BadKind(Kind::Wrap as u8)),
        }
    }

    /// Fetches a rendezvous payload and hands it to the host.
    fn receive_rts(
        &mut self,
        p: u32,
        rank: Rank,
        tag: u8,
        header: &[u8],
        rts: &Rts,
        sink: &mut dyn EventSink,
    ) -> Status {
        let Ok(len) = usize::try_from(rts.len) else {
            return Status::FetchFailed;
        };
        match rts.source {
            Source::Segment { seg, offset } => {
                let reg = match self.map_segment(p, &seg) {
                    Ok(reg) => reg,
                    Err(why) => {
                        self.log(
                            LogLevel::Warn,
                            &format!("shm: cannot map segment {} of rank {rank}: {why}", seg.id),
                        );
                        return Status::FetchFailed;
                    }
                };
                let h = reg.handle();
                // SAFETY: the registration keeps the mapping alive while
                // `reg` lives, which outlasts `view`'s uses below.
                let Some(view) = (unsafe { View::from_raw(h.addr, h.len) }) else {
                    return Status::FetchFailed;
                };
                // `offset + len <= seg.len == mapping length`, checked by
                // the decoder and the mapper; `bytes` checks again.
                let Some(payload) = view.bytes(offset as usize, len) else {
                    return Status::FetchFailed;
                };
                self.counters.rndv_mapped += 1;
                sink.deliver(rank, tag, header, payload);
                drop(reg);
                Status::Ok
            }
            Source::Address(addr) => {
                if !self.peer_cma(p) {
                    return Status::FetchFailed;
                }
                let pid = self
                    .peers
                    .get(p as usize)
                    .and_then(Option::as_ref)
                    .map_or(0, |peer| peer.pid);
                if self.bounce.len() < len {
                    self.bounce.resize(len, 0);
                }
                let dst = self.bounce.as_mut_ptr();
                // SAFETY: the bounce buffer holds at least `len` bytes.
                if let Err(e) = unsafe { sys::vm_read(pid, addr, dst, len) } {
                    self.log(
                        LogLevel::Warn,
                        &format!("shm: process_vm_readv from rank {rank} failed: {e}"),
                    );
                    return Status::FetchFailed;
                }
                self.counters.rndv_cma += 1;
                sink.deliver(rank, tag, header, self.bounce.get(..len).unwrap_or(&[]));
                if self.bounce.len() > BOUNCE_KEEP {
                    // Do not hold on to the memory of one huge message.
                    self.bounce = Vec::new();
                }
                Status::Ok
            }
        }
    }
}
