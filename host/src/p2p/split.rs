//! Split rendezvous: on routes whose `put` and `get` are copies made by
//! the caller's own processor (`BtlFlags::INITIATOR_COPIES`: shm), the
//! receiver of a large RGET message reads its head and asks the sender,
//! with an [`Ack`], to write its tail at the same time. Two processors
//! then copy one message, which takes about half the time; the sender is
//! blocked in or polling for that very send anyway.
//!
//! The receiver registers the tail of its buffer for the sender's writes
//! (a cache hit for a buffer used again), sends the `Ack`, and starts its
//! `get` of the head. The sender writes the tail with `put` and answers
//! [`PutDone`]. The receive completes, and its FIN goes out, once both its
//! read and the sender's answer are in; until then the receive buffer
//! stays (the sender may be writing it), and so do the sender's bytes
//! until its write is done. A message of fewer than `p2p_split_min` bytes
//! (or a truncated one, or one to oneself) is read whole by the receiver.
//!
//! The same exchange from offset 0 is the RPUT rendezvous: a receiver
//! that does not read a large message (tcp, beyond `p2p_rget_reads`)
//! asks the sender to write all of it, straight into the receive buffer.

use fireopal_abi::btl::{Access, BtlFlags, MemRegion, Rank};
use fireopal_core::wire::p2p::{Ack, FinStatus, PutDone};

use super::endpoint::{LayerOp, TAG_P2P};
use super::protocol::{ReqId, ReqState, Split};
use super::{P2p, P2pError, Violation};
use crate::btl::{Class, SendTicket};

/// The sender's part starts on a page, so that the two copies never write
/// one page.
const SPLIT_ALIGN: usize = 4096;

impl P2p {
    /// Offers the sender the tail of rendezvous `id` (`take` bytes at
    /// `ptr`, all of the message): the offset it starts at, once the `Ack`
    /// is sent, or `None` to read it whole.
    pub(super) fn offer_split(
        &mut self,
        id: ReqId,
        peer: Rank,
        ptr: *mut u8,
        take: usize,
    ) -> Option<usize> {
        let min = self.config.split_min;
        if min == 0 || (take as u64) < min {
            return None;
        }
        let flags = self.messenger.attributes(peer)?.flags;
        if !flags.contains(BtlFlags::INITIATOR_COPIES) {
            return None;
        }
        let offset = (take / 2) & !(SPLIT_ALIGN - 1);
        (offset > 0 && self.ask_to_write(id, peer, ptr, take, offset)).then_some(offset)
    }

    /// Asks the sender of rendezvous `id` (`take` bytes at `ptr`) to
    /// `put` the message from `offset` on straight into the receive
    /// buffer; `offset` 0 has it write the whole message. False, with
    /// nothing sent, where the route cannot take it: no `put`, a
    /// truncated message, a message to oneself, or no registration.
    #[allow(unsafe_code)]
    pub(super) fn ask_to_write(
        &mut self,
        id: ReqId,
        peer: Rank,
        ptr: *mut u8,
        take: usize,
        offset: usize,
    ) -> bool {
        if peer == self.messenger.rank()
            || !self
                .messenger
                .attributes(peer)
                .is_some_and(|a| a.flags.contains(BtlFlags::PUT))
        {
            return false;
        }
        let (sender_request, length) = {
            let proto = self.proto.borrow();
            match proto.reqs.get(&id).map(|q| &q.state) {
                Some(ReqState::Recv { rndv: Some(r), .. }) => (r.sender_request, r.length),
                _ => return false,
            }
        };
        if length != take as u64 || offset >= take {
            return false;
        }
        // SAFETY: `offset < take <= cap`: the part lies in the receive
        // buffer, which stays until the sender said it is done writing.
        let part = unsafe { MemRegion::new(ptr.add(offset), take - offset) };
        let Ok(handle) = self
            .messenger
            .register_memory(peer, part, Access::REMOTE_WRITE)
        else {
            return false;
        };
        let ack = Ack {
            sender_request,
            receiver_request: id,
            offset: offset as u64,
            address: part.addr() as u64,
            key: handle.remote_key(),
        }
        .encode();
        let sent = ack.is_some_and(|a| self.messenger.send_layer(peer, TAG_P2P, &a, &[]).is_ok());
        if !sent {
            let _ = self.messenger.deregister_memory(handle);
            return false;
        }
        if let Some(ReqState::Recv { rndv: Some(r), .. }) = self
            .proto
            .borrow_mut()
            .reqs
            .get_mut(&id)
            .map(|q| &mut q.state)
        {
            r.split = Some(Box::new(Split {
                writing: true,
                written: None,
                read: None,
                registration: Some(handle),
            }));
        }
        true
    }

    /// The receiver asked for send `id` to be written from `offset` on
    /// (0: all of it).
    #[allow(unsafe_code, clippy::too_many_arguments)]
    pub(super) fn put_tail(
        &mut self,
        peer: Rank,
        id: ReqId,
        receiver_request: u64,
        offset: u64,
        address: u64,
        key: &[u8],
    ) {
        let mut proto = self.proto.borrow_mut();
        let Some(ReqState::Send(out)) = proto.reqs.get_mut(&id).map(|r| &mut r.state) else {
            drop(proto);
            return self.violation(peer, id);
        };
        if out.peer != peer || out.registration.is_none() || out.putting {
            drop(proto);
            return self.violation(peer, id);
        }
        let Some(start) = usize::try_from(offset).ok().filter(|&o| o < out.len) else {
            drop(proto);
            let violation = Violation::DataOutOfRange(id);
            return self.fail_peer(peer, P2pError::Protocol { peer, violation });
        };
        if out.ptr.is_null() {
            // The caller gave the send up and took its bytes back:
            // nothing to write.
            drop(proto);
            return self.tail_put(id, receiver_request, Err(P2pError::SendGivenUp { peer }));
        }
        out.putting = true;
        // SAFETY: `start < len`: the send's own bytes, kept alive and
        // unchanged until its request completes, which waits for this
        // write (`putting`).
        let local = unsafe { MemRegion::new(out.ptr.add(start).cast_mut(), out.len - start) };
        let registration = out.registration.take();
        drop(proto);
        let started = self.messenger.rdma_class(
            Class::Layer,
            true,
            peer,
            local,
            registration.as_ref(),
            address,
            key,
        );
        if let Some(ReqState::Send(out)) = self
            .proto
            .borrow_mut()
            .reqs
            .get_mut(&id)
            .map(|r| &mut r.state)
        {
            out.registration = registration;
        }
        match started {
            Ok(SendTicket::Done) => self.tail_put(id, receiver_request, Ok(())),
            Ok(SendTicket::Pending(sid)) => {
                self.layer_ops.insert(
                    sid,
                    LayerOp::Put {
                        req: id,
                        receiver_request,
                    },
                );
            }
            Err(e) => self.tail_put(id, receiver_request, Err(P2pError::from(e))),
        }
    }

    /// The sender's write of a tail ended: tell the receiver (or, if it
    /// failed meanwhile, fail the send, which no FIN will end).
    pub(super) fn tail_put(
        &mut self,
        id: ReqId,
        receiver_request: u64,
        result: Result<(), P2pError>,
    ) {
        let mut proto = self.proto.borrow_mut();
        let peer = match proto.reqs.get_mut(&id).map(|r| &mut r.state) {
            Some(ReqState::Send(out)) => {
                out.putting = false;
                out.peer
            }
            _ => return,
        };
        if let Some(e) = self.failed.get(&peer).cloned() {
            proto.complete(id, Err(e));
            return;
        }
        drop(proto);
        let status = match result {
            Ok(()) => FinStatus::Done,
            Err(P2pError::SendGivenUp { .. }) => FinStatus::GivenUp,
            Err(_) => FinStatus::Failed,
        };
        let done = PutDone {
            receiver_request,
            status,
        }
        .encode();
        self.control(peer, &done);
    }

    /// The sender of split receive `id` wrote its tail: finish the
    /// receive if its own read is done too.
    pub(super) fn tail_written(&mut self, peer: Rank, id: ReqId, status: FinStatus) {
        let mut proto = self.proto.borrow_mut();
        let Some(ReqState::Recv { rndv: Some(r), .. }) =
            proto.reqs.get_mut(&id).map(|q| &mut q.state)
        else {
            drop(proto);
            return self.violation(peer, id);
        };
        let reading = r.reading;
        let Some(split) = r.split.as_mut().filter(|s| s.writing && r.peer == peer) else {
            drop(proto);
            return self.violation(peer, id);
        };
        split.writing = false;
        split.written = Some(status);
        if reading {
            // The read's end finishes it.
            return;
        }
        let read = split.read.take().unwrap_or(Ok(()));
        drop(proto);
        self.finish_rendezvous(id, read);
    }
}
