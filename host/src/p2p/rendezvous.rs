//! The rendezvous between the two endpoints once a receive has matched an
//! RTS: the receiver reads the sender's buffer (RGET), asks with an ACK
//! for it to be written into the receive buffer (RPUT, in `split`), or
//! asks with a CTS for the data to be sent (the pipeline); the sender
//! answers a CTS, or a CANCEL if its caller gave the send up; the FIN
//! that ends both sides.

#![allow(unsafe_code)]

use fireopal_abi::btl::{Access, BtlAttributes, BtlFlags, MemRegion, Rank};
use fireopal_core::wire::p2p::{Cancel, Cts, Data, FinStatus};

use super::endpoint::{LayerOp, P2p, TAG_P2P};
use super::protocol::{fin_header, ReqId, ReqState};
use super::{P2pError, Status};
use crate::btl::{Class, SendTicket};

impl P2p {
    /// A protocol message with no data; a failure shows as the peer's.
    pub(super) fn control(&mut self, peer: Rank, header: &[u8]) {
        if self.failed.contains_key(&peer) {
            return;
        }
        let _ = self.messenger.send_layer(peer, TAG_P2P, header, &[]);
    }

    /// Asks the sender of a rendezvous to send its data (CTS): the
    /// pipeline.
    pub(super) fn ask_to_send(&mut self, peer: Rank, sender_request: u64, receiver_request: ReqId) {
        let header = Cts {
            sender_request,
            receiver_request,
        }
        .encode();
        self.control(peer, &header);
    }

    /// Reads a matched rendezvous into its receive buffer.
    pub(super) fn start_get(&mut self, id: ReqId) {
        let mut proto = self.proto.borrow_mut();
        let Some(ReqState::Recv {
            target,
            rndv: Some(r),
            ..
        }) = proto.reqs.get_mut(&id).map(|q| &mut q.state)
        else {
            return;
        };
        let (peer, ptr, take, address) = (r.peer, target.ptr, r.take, r.address);
        // Where the peer's own progress serves reads over the stream its
        // sends take (tcp), one read gives a lone message its lowest
        // latency, and a window of them streams faster moved by the
        // sender: a rendezvous beyond the bound asks the sender for it.
        let served = self
            .messenger
            .attributes(peer)
            .is_some_and(|a| a.flags.contains(BtlFlags::TARGET_SERVES_RDMA));
        let reads = self.reads.get(peer as usize).copied().unwrap_or(0);
        let sent = served && self.config.rget_reads > 0 && reads >= self.config.rget_reads;
        let (sender_request, key) = (
            r.sender_request,
            if sent { Vec::new() } else { r.key.clone() },
        );
        drop(proto);
        if let Some(e) = self.failed.get(&peer).cloned() {
            self.proto.borrow_mut().complete(id, Err(e));
            return;
        }
        if sent {
            // A large message is put straight into the receive buffer,
            // which saves the copy out of the transport's buffer; a
            // smaller one is sent, which takes two messages fewer.
            let put_min = self.config.put_min;
            if put_min > 0 && take as u64 >= put_min && self.ask_to_write(id, peer, ptr, take, 0) {
                return;
            }
            return self.ask_to_send(peer, sender_request, id);
        }
        // A split message's head only; the sender writes the rest.
        let read = self.offer_split(id, peer, ptr, take).unwrap_or(take);
        // SAFETY: the receive buffer holds `read <= take <= cap` bytes at
        // `ptr` and stays alive until the read completes: requests whose
        // read is in flight are never dropped or detached from their
        // buffer.
        let region = unsafe { MemRegion::new(ptr, read) };
        let needs_local = self
            .messenger
            .attributes(peer)
            .is_some_and(|a| a.flags.contains(BtlFlags::NEEDS_LOCAL_REGISTRATION));
        let local = if needs_local {
            match self
                .messenger
                .register_memory(peer, region, Access::LOCAL_WRITE)
            {
                Ok(h) => Some(h),
                Err(e) => return self.get_done(id, Err(P2pError::from(e))),
            }
        } else {
            None
        };
        let started = self.messenger.rdma_class(
            Class::Layer,
            false,
            peer,
            region,
            local.as_ref(),
            address,
            &key,
        );
        if let Some(ReqState::Recv { rndv: Some(r), .. }) = self
            .proto
            .borrow_mut()
            .reqs
            .get_mut(&id)
            .map(|q| &mut q.state)
        {
            r.registration = local;
            r.reading = matches!(started, Ok(SendTicket::Pending(_)));
            if r.reading {
                if let Some(n) = self.reads.get_mut(peer as usize) {
                    *n += 1;
                }
            }
        }
        match started {
            Ok(SendTicket::Done) => self.get_done(id, Ok(())),
            Ok(SendTicket::Pending(sid)) => {
                self.layer_ops.insert(sid, LayerOp::Get(id));
            }
            Err(e) => self.get_done(id, Err(P2pError::from(e))),
        }
    }

    /// A rendezvous read ended. A split message also waits for the
    /// sender's write of its tail.
    pub(super) fn get_done(&mut self, id: ReqId, result: Result<(), P2pError>) {
        let mut proto = self.proto.borrow_mut();
        let Some(ReqState::Recv { rndv: Some(r), .. }) =
            proto.reqs.get_mut(&id).map(|q| &mut q.state)
        else {
            return;
        };
        if std::mem::take(&mut r.reading) {
            if let Some(n) = self.reads.get_mut(r.peer as usize) {
                *n = n.saturating_sub(1);
            }
        }
        // A failed sender writes no more and never answers.
        let sender_lives = !self.failed.contains_key(&r.peer);
        if let Some(split) = r.split.as_mut().filter(|s| s.writing && sender_lives) {
            split.read = Some(result);
            return;
        }
        drop(proto);
        self.finish_rendezvous(id, result);
    }

    /// Everything of a rendezvous receive arrived (or failed): release,
    /// tell the sender, complete.
    pub(super) fn finish_rendezvous(&mut self, id: ReqId, result: Result<(), P2pError>) {
        let mut proto = self.proto.borrow_mut();
        let Some(req) = proto.reqs.get_mut(&id) else {
            return;
        };
        let ReqState::Recv { rndv: Some(r), .. } = &mut req.state else {
            return;
        };
        let (peer, sender_request) = (r.peer, r.sender_request);
        let mut registrations: Vec<_> = r.registration.take().into_iter().collect();
        // For a split message: how the sender's write of the tail ended
        // (`None` if it never said: it failed).
        let written = r.split.as_mut().map(|split| {
            registrations.extend(split.registration.take());
            split.written
        });
        let finished = r.result();
        let result = match (result, written) {
            (Ok(()), None | Some(Some(FinStatus::Done))) => Ok(()),
            (Ok(()), Some(Some(FinStatus::GivenUp))) => Err(P2pError::SendGivenUp { peer }),
            (Ok(()), Some(_)) => Err(self
                .failed
                .get(&peer)
                .cloned()
                .unwrap_or(P2pError::WriteRefused { peer })),
            (Err(e), _) => Err(e),
        };
        let (fin, outcome) = match result {
            Ok(()) => (FinStatus::Done, finished),
            Err(P2pError::PeerFailed { peer, failure }) => (
                FinStatus::Failed,
                Err(P2pError::PeerFailed { peer, failure }),
            ),
            Err(P2pError::Send(error)) => {
                (FinStatus::Failed, Err(P2pError::RemoteRead { peer, error }))
            }
            Err(e) => (FinStatus::Failed, Err(e)),
        };
        proto.complete(id, outcome);
        drop(proto);
        for h in registrations {
            let _ = self.messenger.deregister_memory(h);
        }
        self.control(peer, &fin_header(sender_request, fin));
    }

    /// The receiver of a pipelined send is ready: send the data.
    pub(super) fn send_pipeline(&mut self, peer: Rank, id: ReqId, receiver_request: u64) {
        let mut proto = self.proto.borrow_mut();
        let Some(ReqState::Send(out)) = proto.reqs.get_mut(&id).map(|r| &mut r.state) else {
            drop(proto);
            return self.violation(peer, id);
        };
        // A second CTS while the data of the first is in flight: the
        // request must not complete before every fragment has.
        if out.peer != peer || out.in_flight() {
            drop(proto);
            return self.violation(peer, id);
        }
        if out.ptr.is_null() && out.len > 0 {
            // The caller gave the send up and took its bytes back: the
            // receiver hears so rather than waiting for data.
            let registration = out.registration.take();
            proto.complete(id, Err(P2pError::SendGivenUp { peer }));
            drop(proto);
            if let Some(h) = registration {
                let _ = self.messenger.deregister_memory(h);
            }
            let cancel = Cancel { receiver_request }.encode();
            return self.control(peer, &cancel);
        }
        // A send announced for a read that its receiver asks to have sent
        // instead no longer needs its registration.
        let (ptr, len, registration) = (out.ptr, out.len, out.registration.take());
        drop(proto);
        if let Some(h) = registration {
            let _ = self.messenger.deregister_memory(h);
        }
        let fragment = match (
            self.config.pipeline_fragment,
            self.messenger.attributes(peer),
        ) {
            // A route that reads larger messages sends this one as eager
            // fragments (on shm, queue slots: each copied out while the
            // next is copied in); its `send` of more may be a rendezvous
            // of its own.
            (0, Some(a)) if a.flags.contains(BtlFlags::GET) && !route_reads(&a, len as u64) => {
                a.eager_limit.min(a.max_send_size)
            }
            (0, Some(a)) => a.max_send_size.saturating_sub(Data::LEN as u64),
            (f, _) => f,
        }
        .clamp(1024, 1 << 30) as usize;
        let mut sending = 0u32;
        let mut failure = None;
        let mut offset = 0;
        while offset < len {
            let n = fragment.min(len - offset);
            let header = Data {
                receiver_request,
                offset: offset as u64,
            }
            .encode();
            // SAFETY: `ptr..ptr + len` are the send's bytes (not null:
            // `len > 0`), which stay alive and unchanged until its request
            // completes: below once every fragment is handed over, or
            // when the last of those the transport reads in place
            // completes (`fragment_sent`).
            let region = unsafe { MemRegion::new(ptr.add(offset).cast_mut(), n) };
            match self
                .messenger
                .send_layer_in_place(peer, TAG_P2P, &header, region)
            {
                Ok(SendTicket::Done) => {}
                Ok(SendTicket::Pending(sid)) => {
                    self.layer_ops.insert(sid, LayerOp::Fragment(id));
                    sending += 1;
                }
                Err(e) => {
                    failure = Some(P2pError::from(e));
                    break;
                }
            }
            offset += n;
        }
        let mut proto = self.proto.borrow_mut();
        if sending == 0 {
            let result = match failure {
                Some(e) => Err(e),
                None => Ok(Status {
                    count: len,
                    ..Status::default()
                }),
            };
            proto.complete(id, result);
        } else if let Some(ReqState::Send(out)) = proto.reqs.get_mut(&id).map(|r| &mut r.state) {
            out.sending = sending;
            out.send_failure = failure.map(Box::new);
        }
    }

    /// A fragment of pipelined send `id` was sent from the send's bytes:
    /// the send completes with the last one, unless the receiver's FIN
    /// completed it first (it comes once every byte was received, so no
    /// transport still reads them).
    pub(super) fn fragment_sent(&mut self, id: ReqId, result: Result<(), P2pError>) {
        let mut proto = self.proto.borrow_mut();
        let Some(ReqState::Send(out)) = proto.reqs.get_mut(&id).map(|r| &mut r.state) else {
            return;
        };
        out.sending = out.sending.saturating_sub(1);
        if let Err(e) = result {
            out.send_failure.get_or_insert_with(|| Box::new(e));
        }
        if out.sending > 0 {
            return;
        }
        let result = match out.send_failure.take() {
            Some(e) => Err(*e),
            None => Ok(Status {
                count: out.len,
                ..Status::default()
            }),
        };
        proto.complete(id, result);
    }

    /// The receiver is done with a send's data.
    pub(super) fn finish_send(&mut self, peer: Rank, id: ReqId, status: FinStatus) {
        let mut proto = self.proto.borrow_mut();
        let (registration, len) = match proto.reqs.get_mut(&id).map(|r| &mut r.state) {
            Some(ReqState::Send(out)) if out.peer == peer => (out.registration.take(), out.len),
            _ => {
                drop(proto);
                return self.violation(peer, id);
            }
        };
        let result = match status {
            FinStatus::Done => Ok(Status {
                count: len,
                ..Status::default()
            }),
            FinStatus::Failed | FinStatus::GivenUp => Err(P2pError::ReadRefused { peer }),
        };
        proto.complete(id, result);
        drop(proto);
        if let Some(h) = registration {
            let _ = self.messenger.deregister_memory(h);
        }
    }
}

/// Whether a route reads a rendezvous of `len` bytes with `get` (RGET):
/// it offers `get` and the message is at least its
/// `min_rdma_pipeline_size`.
pub(super) fn route_reads(attrs: &BtlAttributes, len: u64) -> bool {
    attrs.flags.contains(BtlFlags::GET) && len >= attrs.min_rdma_pipeline_size
}
