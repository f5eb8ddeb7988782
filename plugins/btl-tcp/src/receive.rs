//! Receiving frames on an established connection.
//!
//! Bytes are read into the connection's staging buffer, as much as has
//! arrived in one `recv`, and every complete frame in it is handled in
//! place: an active message is delivered straight from the buffer, so a
//! small message costs one `recv` and no allocation. A frame larger than
//! the staging buffer is read straight into its final place once its
//! headers are in: a put's target range, a get's local buffer, or the
//! connection's reusable message buffer. While the answer to a get larger
//! than the staging buffer is due from the peer, an empty staging buffer
//! takes at most [`AHEAD_OF_ANSWER`] bytes a read, so that the answer's
//! payload goes to the get's buffer with no copy, not through staging.
//!
//! Each fixed header is checked ([`FrameHeader::parse`]) before anything
//! is sized or stored from it. A frame that fails its checks, or an RDMA
//! answer for an operation this module did not start, means the peer is
//! broken or not speaking our protocol: the peer fails.

use fireopal_abi::btl::{Access, EventSink, Rank};
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::wire::tcp::frame::{
    FrameHeader, FrameKind, GetRequest, GetResponse, PutAck, PutHeader, RdmaStatus,
    FRAME_HEADER_LEN,
};

use crate::align::{payload_pad, AlignedBuf};
use crate::conn::{ConnId, Dest, Finish, Large, Rx};
use crate::module::TcpModule;
use crate::queue::{Done, OutItem, RegionPart};
use crate::rdma::{status_error, OpKind};
use crate::send::ZEROS;
use crate::sys::{copy_to_region, Recv, Socket};
use fireopal_core::copy::copy_bytes;

/// Most `recv` calls on one connection per `progress`, so one busy peer
/// cannot starve the others (epoll reports the rest next time).
const READS_PER_PROGRESS: usize = 16;

/// Bytes read into the staging buffer at a time while a get's answer
/// larger than that buffer is due: the answer's headers and a little of
/// its payload, or the small frames that come before it.
const AHEAD_OF_ANSWER: usize = 4096;

/// Buffers for large active messages kept per module.
const BIG_POOL: usize = 2;

/// A frame the peer should not have sent.
fn malformed(rank: Rank, what: impl std::fmt::Display) -> PluginError {
    PluginError::new(
        ErrorKind::MALFORMED,
        format!("rank {rank} sent a bad frame: {what}"),
    )
}

fn closed(rank: Rank) -> PluginError {
    PluginError::new(
        ErrorKind::CONNECTION_CLOSED,
        format!("rank {rank} closed its connection"),
    )
}

fn read_failed(rank: Rank, e: &std::io::Error) -> PluginError {
    PluginError::new(
        crate::failure::broken_connection_kind(e),
        format!("connection to rank {rank} lost: {e}"),
    )
}

/// What parsing the staging buffer found.
enum Parsed {
    /// A frame was handled; this many events reported.
    Frame(usize),
    /// A large frame is now being read straight into place.
    Large,
    /// More bytes are needed.
    NeedMore,
}

impl TcpModule {
    /// Reads and handles what arrived on established connection `id`.
    pub(crate) fn read_frames(&mut self, id: ConnId, sink: &mut dyn EventSink) -> usize {
        let Some(mut conn) = self.conns.take(id) else {
            return 0;
        };
        let (Some(rank), Some(mut rx)) = (conn.peer, conn.rx.take()) else {
            self.conns.put_back(id, conn);
            return 0;
        };
        let (events, failure) = self.read_into(&conn.sock, &mut rx, rank, sink);
        conn.rx = Some(rx);
        let draining = conn.draining.clone();
        self.conns.put_back(id, conn);
        match (failure, draining) {
            (Some(_), Some(first)) => self.drained(rank, id, first),
            (Some(e), None) => self.fail_peer(rank, e),
            (None, _) => {}
        }
        // Answers to RDMA requests queued while reading.
        while let Some(r) = self.to_flush.pop() {
            self.flush(r);
        }
        events
    }

    fn read_into(
        &mut self,
        sock: &Socket,
        rx: &mut Rx,
        rank: Rank,
        sink: &mut dyn EventSink,
    ) -> (usize, Option<PluginError>) {
        let mut events = 0;
        let mut reads = 0;
        loop {
            if let Some(large) = rx.large.as_mut() {
                let total = large.payload_len();
                let want = total - large.filled;
                if want > 0 {
                    let got = match large.dest {
                        Dest::Big => match rx.big.get_mut(large.filled..total) {
                            Some(buf) => sock.recv(buf),
                            None => return (events, Some(malformed(rank, "buffer"))),
                        },
                        Dest::Memory { region, offset, .. } => {
                            sock.recv_into_region(&region, offset + large.filled, want)
                        }
                        Dest::Discard => {
                            let n = want.min(rx.stage.len());
                            sock.recv(&mut rx.stage[..n])
                        }
                    };
                    reads += 1;
                    match got {
                        Ok(Recv::Data(n)) => {
                            large.filled += n;
                            if n < want && large.filled < total {
                                // Short read: nothing more has arrived.
                                return (events, None);
                            }
                        }
                        Ok(Recv::WouldBlock) => return (events, None),
                        Ok(Recv::Closed) => return (events, Some(closed(rank))),
                        Err(e) => return (events, Some(read_failed(rank, &e))),
                    }
                }
                if large.filled < total {
                    if reads >= READS_PER_PROGRESS {
                        return (events, None);
                    }
                    continue;
                }
                if let Some(large) = rx.large.take() {
                    let finished = self.finish_large(rank, &large, &rx.big, sink);
                    self.return_big(std::mem::take(&mut rx.big));
                    // Nothing is staged behind a large frame, and whether
                    // more has arrived is left to the next call (epoll is
                    // level-triggered): its completion goes up now, without
                    // a `recv` that most often finds nothing.
                    return match finished {
                        Ok(n) => (events + n, None),
                        Err(e) => (events, Some(e)),
                    };
                }
            }

            // Every complete frame already staged.
            loop {
                match self.next_frame(rx, rank, sink) {
                    Ok(Parsed::Frame(n)) => events += n,
                    Ok(Parsed::Large) | Ok(Parsed::NeedMore) => break,
                    Err(e) => return (events, Some(e)),
                }
            }
            if rx.large.is_some() {
                continue;
            }
            if reads >= READS_PER_PROGRESS {
                return (events, None);
            }

            // Room for more: start over when empty, move a partial frame
            // to the front when the space behind it ran low.
            if rx.start == rx.end {
                rx.start = 0;
                rx.end = 0;
            } else if rx.start > 0 && rx.stage.len() - rx.end < rx.stage.len() / 2 {
                rx.stage.copy_within(rx.start..rx.end, 0);
                rx.end -= rx.start;
                rx.start = 0;
            }
            // A get's large answer is read in place once its headers are
            // in: while one is due, read little ahead of them, so that
            // its payload is not copied through the staging buffer.
            let space = if rx.start == rx.end && self.ops.large_answer_due(rank) {
                (rx.stage.len() - rx.end).min(AHEAD_OF_ANSWER)
            } else {
                rx.stage.len() - rx.end
            };
            let got = sock.recv(&mut rx.stage[rx.end..rx.end + space]);
            reads += 1;
            match got {
                Ok(Recv::Data(n)) => {
                    rx.end += n;
                    if n < space {
                        // Short read: the socket is drained. Handle what
                        // came, then stop without another (empty) recv.
                        loop {
                            match self.next_frame(rx, rank, sink) {
                                Ok(Parsed::Frame(k)) => events += k,
                                Ok(Parsed::NeedMore) => return (events, None),
                                Ok(Parsed::Large) => break,
                                Err(e) => return (events, Some(e)),
                            }
                        }
                    }
                }
                Ok(Recv::WouldBlock) => return (events, None),
                Ok(Recv::Closed) => return (events, Some(closed(rank))),
                Err(e) => return (events, Some(read_failed(rank, &e))),
            }
        }
    }

    /// Handles the next staged frame if it is complete, or sets up a
    /// large one to be read in place.
    fn next_frame(
        &mut self,
        rx: &mut Rx,
        rank: Rank,
        sink: &mut dyn EventSink,
    ) -> Result<Parsed, PluginError> {
        let avail = rx.stage.get(rx.start..rx.end).unwrap_or(&[]);
        if avail.len() < FRAME_HEADER_LEN {
            return Ok(Parsed::NeedMore);
        }
        let header = FrameHeader::parse(avail, &self.limits).map_err(|e| malformed(rank, e))?;
        let head_len = usize::from(header.header_len);
        // Bounded by the limits, so this fits.
        let payload_len =
            usize::try_from(header.payload_len).map_err(|_| malformed(rank, "length"))?;
        let head_end = FRAME_HEADER_LEN + head_len;
        let payload_start = header.payload_offset();
        let frame_len = payload_start + payload_len;
        if let (Some(head), Some(payload)) = (
            avail.get(FRAME_HEADER_LEN..head_end),
            avail.get(payload_start..frame_len),
        ) {
            let n = self.dispatch(rank, &header, head, payload, sink)?;
            rx.start += frame_len;
            return Ok(Parsed::Frame(n));
        }
        if frame_len <= rx.stage.len() {
            return Ok(Parsed::NeedMore);
        }
        // Headers and padding first: they always fit the staging buffer.
        let (Some(head), Some(staged)) = (
            avail.get(FRAME_HEADER_LEN..head_end),
            avail.get(payload_start..),
        ) else {
            return Ok(Parsed::NeedMore);
        };
        // A frame larger than the staging buffer: read it in place.
        let (dest, finish) = self.large_dest(rank, &header, head)?;
        match dest {
            Dest::Big => {
                rx.big = self.take_big(payload_len);
                copy_bytes(&mut rx.big[..staged.len()], staged);
            }
            Dest::Memory { region, offset, .. } => {
                copy_to_region(&region, offset, staged).map_err(|e| malformed(rank, e))?;
            }
            Dest::Discard => {}
        }
        rx.large = Some(Large {
            header,
            head: head.to_vec(),
            dest,
            finish,
            filled: staged.len(),
        });
        rx.start = 0;
        rx.end = 0;
        Ok(Parsed::Large)
    }

    /// A buffer of at least `len` bytes for a large active message. Kept
    /// buffers are reused so a stream of large messages does not fault in
    /// fresh pages for each one.
    fn take_big(&mut self, len: usize) -> AlignedBuf {
        let mut buf = match self.big_pool.iter().position(|b| b.len() >= len) {
            Some(i) => self.big_pool.swap_remove(i),
            None => self.big_pool.pop().unwrap_or_default(),
        };
        buf.resize(len);
        buf
    }

    /// Keeps `buf` for the next large message, or frees it: at most
    /// [`BIG_POOL`] buffers are kept per module, so memory for large
    /// messages is bounded by the ones being read plus these.
    fn return_big(&mut self, buf: AlignedBuf) {
        if buf.capacity() > 0 && self.big_pool.len() < BIG_POOL {
            self.big_pool.push(buf);
        }
    }

    /// Handles one complete frame; returns the events reported and the
    /// remote operations served.
    fn dispatch(
        &mut self,
        rank: Rank,
        header: &FrameHeader,
        head: &[u8],
        payload: &[u8],
        sink: &mut dyn EventSink,
    ) -> Result<usize, PluginError> {
        match header.kind {
            FrameKind::Active => {
                sink.deliver(rank, header.tag, head, payload);
                Ok(1)
            }
            FrameKind::Put => {
                let put = PutHeader::parse(head).map_err(|e| malformed(rank, e))?;
                let status = match self.regs.resolve(
                    put.key,
                    put.remote_addr,
                    payload.len() as u64,
                    Access::REMOTE_WRITE,
                ) {
                    Ok((region, offset, _)) => match copy_to_region(&region, offset, payload) {
                        Ok(()) => RdmaStatus::Ok,
                        Err(_) => RdmaStatus::OutOfRange,
                    },
                    Err(status) => status,
                };
                self.put_ack(rank, put.op_id, status);
                // A served operation counts as work done (see `progress`).
                Ok(1)
            }
            FrameKind::PutAck => {
                let ack = PutAck::parse(head).map_err(|e| malformed(rank, e))?;
                self.on_put_ack(rank, ack, sink)
            }
            FrameKind::GetRequest => {
                let req = GetRequest::parse(head).map_err(|e| malformed(rank, e))?;
                self.answer_get(rank, &req);
                Ok(1)
            }
            FrameKind::GetResponse => {
                let resp = GetResponse::parse(head).map_err(|e| malformed(rank, e))?;
                self.get_chunk(rank, &resp, payload.len(), Some(payload), sink)
            }
        }
    }

    /// Where a large frame's payload goes.
    fn large_dest(
        &mut self,
        rank: Rank,
        header: &FrameHeader,
        head: &[u8],
    ) -> Result<(Dest, Finish), PluginError> {
        match header.kind {
            FrameKind::Active => Ok((Dest::Big, Finish::Deliver)),
            FrameKind::Put => {
                let put = PutHeader::parse(head).map_err(|e| malformed(rank, e))?;
                Ok(
                    match self.regs.resolve(
                        put.key,
                        put.remote_addr,
                        header.payload_len,
                        Access::REMOTE_WRITE,
                    ) {
                        Ok((region, offset, id)) => (
                            Dest::Memory {
                                region,
                                offset,
                                registration: Some(id),
                            },
                            Finish::PutAck {
                                op_id: put.op_id,
                                status: RdmaStatus::Ok,
                            },
                        ),
                        Err(status) => (
                            Dest::Discard,
                            Finish::PutAck {
                                op_id: put.op_id,
                                status,
                            },
                        ),
                    },
                )
            }
            FrameKind::GetResponse => {
                let resp = GetResponse::parse(head).map_err(|e| malformed(rank, e))?;
                let region = self.get_target(rank, &resp, header.payload_len)?;
                Ok((
                    Dest::Memory {
                        region,
                        offset: resp.offset as usize,
                        registration: None,
                    },
                    Finish::GetChunk {
                        op_id: resp.op_id,
                        offset: resp.offset,
                    },
                ))
            }
            // These carry no payload, so they always fit the staging buffer.
            FrameKind::PutAck | FrameKind::GetRequest => {
                Err(malformed(rank, "large frame of a kind without payload"))
            }
        }
    }

    /// A large frame is complete.
    fn finish_large(
        &mut self,
        rank: Rank,
        large: &Large,
        big: &[u8],
        sink: &mut dyn EventSink,
    ) -> Result<usize, PluginError> {
        let len = large.payload_len();
        match large.finish {
            Finish::Deliver => {
                let payload = big.get(..len).ok_or_else(|| malformed(rank, "length"))?;
                sink.deliver(rank, large.header.tag, &large.head, payload);
                Ok(1)
            }
            Finish::PutAck { op_id, status } => {
                self.put_ack(rank, op_id, status);
                Ok(1)
            }
            Finish::GetChunk { op_id, offset } => {
                let resp = GetResponse {
                    op_id,
                    status: RdmaStatus::Ok,
                    offset,
                };
                self.get_chunk(rank, &resp, len, None, sink)
            }
        }
    }

    fn put_ack(&mut self, rank: Rank, op_id: u64, status: RdmaStatus) {
        let frame = FrameHeader::rdma(FrameKind::PutAck, 0).encode();
        let ack = PutAck { op_id, status }.encode();
        self.reply(rank, OutItem::frame(&[&frame, &ack], None, Done::Nothing));
    }

    fn on_put_ack(
        &mut self,
        rank: Rank,
        ack: PutAck,
        sink: &mut dyn EventSink,
    ) -> Result<usize, PluginError> {
        let op = self
            .ops
            .get_mut(ack.op_id, rank)
            .ok_or_else(|| malformed(rank, format!("ack of unknown put {}", ack.op_id)))?;
        let OpKind::Put { acks_left } = &mut op.kind else {
            return Err(malformed(rank, format!("put ack for get {}", ack.op_id)));
        };
        *acks_left = acks_left.saturating_sub(1);
        let last = *acks_left == 0;
        if op.status == RdmaStatus::Ok {
            op.status = ack.status;
        }
        if !last {
            return Ok(0);
        }
        let Some(op) = self.ops.finish(ack.op_id) else {
            return Ok(0);
        };
        let result = match op.status {
            RdmaStatus::Ok => Ok(()),
            s => Err(status_error("put", rank, s)),
        };
        sink.rdma_complete(op.cookie, result);
        Ok(1)
    }

    /// Target side of a get: check, then answer with the bytes (borrowed
    /// from the registration until written) or with the refusal.
    fn answer_get(&mut self, rank: Rank, req: &GetRequest) {
        let resolved = self
            .regs
            .resolve(req.key, req.remote_addr, req.length, Access::REMOTE_READ);
        let (region, base, reg_id) = match resolved {
            Ok(r) => r,
            Err(status) => {
                let frame = FrameHeader::rdma(FrameKind::GetResponse, 0).encode();
                let refusal = GetResponse {
                    op_id: req.op_id,
                    status,
                    offset: 0,
                }
                .encode();
                self.reply(
                    rank,
                    OutItem::frame(&[&frame, &refusal], None, Done::Nothing),
                );
                return;
            }
        };
        // Inside a registration, so it fits in usize.
        let len = usize::try_from(req.length).unwrap_or(0);
        let chunk = self.settings.max_send_size.max(1);
        let mut offset = 0;
        loop {
            let clen = chunk.min(len - offset);
            let pad = payload_pad(
                self.next_position(rank) + FRAME_HEADER_LEN + GetResponse::LEN,
                clen,
                region.as_ptr() as usize + base + offset,
                (req.reply_addr as usize).wrapping_add(offset),
            );
            let frame = FrameHeader::rdma(FrameKind::GetResponse, clen as u64)
                .with_pad(pad)
                .encode();
            let answer = GetResponse {
                op_id: req.op_id,
                status: RdmaStatus::Ok,
                offset: offset as u64,
            }
            .encode();
            let part = RegionPart {
                region,
                offset: base + offset,
                len: clen,
                registration: Some(reg_id),
            };
            let item = OutItem::frame(
                &[&frame, &answer, &ZEROS[..usize::from(pad)]],
                Some(part),
                Done::Nothing,
            );
            self.reply(rank, item);
            offset += clen;
            if offset >= len {
                break;
            }
        }
    }

    /// The local buffer a get answer's payload goes to, checked.
    fn get_target(
        &mut self,
        rank: Rank,
        resp: &GetResponse,
        payload_len: u64,
    ) -> Result<fireopal_abi::btl::MemRegion, PluginError> {
        let op = self
            .ops
            .get_mut(resp.op_id, rank)
            .ok_or_else(|| malformed(rank, format!("answer to unknown get {}", resp.op_id)))?;
        let OpKind::Get { local, .. } = op.kind else {
            return Err(malformed(
                rank,
                format!("get answer for put {}", resp.op_id),
            ));
        };
        if resp.status != RdmaStatus::Ok && payload_len != 0 {
            return Err(malformed(rank, "refused get answer with bytes"));
        }
        let end = resp.offset.checked_add(payload_len);
        if end.is_none_or(|e| e > local.len() as u64) {
            return Err(malformed(
                rank,
                format!("get answer outside the {} requested bytes", local.len()),
            ));
        }
        Ok(local)
    }

    /// Accounts one chunk of a get answer (`data` is `None` when it was
    /// read in place already); completes the get when all bytes are in.
    fn get_chunk(
        &mut self,
        rank: Rank,
        resp: &GetResponse,
        len: usize,
        data: Option<&[u8]>,
        sink: &mut dyn EventSink,
    ) -> Result<usize, PluginError> {
        let local = self.get_target(rank, resp, len as u64)?;
        if resp.status != RdmaStatus::Ok {
            if let Some(op) = self.ops.finish(resp.op_id) {
                sink.rdma_complete(op.cookie, Err(status_error("get", rank, resp.status)));
                return Ok(1);
            }
            return Ok(0);
        }
        if let Some(data) = data {
            copy_to_region(&local, resp.offset as usize, data).map_err(|e| malformed(rank, e))?;
        }
        let Some(op) = self.ops.get_mut(resp.op_id, rank) else {
            return Ok(0);
        };
        let OpKind::Get { local, received } = &mut op.kind else {
            return Ok(0);
        };
        *received += len as u64;
        if *received < local.len() as u64 {
            return Ok(0);
        }
        if let Some(op) = self.ops.finish(resp.op_id) {
            sink.rdma_complete(op.cookie, Ok(()));
            return Ok(1);
        }
        Ok(0)
    }
}
