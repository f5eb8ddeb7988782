//! The TCP module: one listening socket (one interface address, one link),
//! its connections to peers, and the [`Transport`] contract over them.
//!
//! Sending is in [`crate::send`], peers and dialling in [`crate::peers`],
//! failures and deadlines in [`crate::failure`].

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use fireopal_abi::btl::{
    exclusivity, Access, BtlAttributes, BtlFlags, Completion, EventSink, MemRegion, PeerAddress,
    Rank, RdmaOp, Reachability, Registration, SendiOutcome, Transport,
};
use fireopal_abi::host::{Host, LogLevel, JOB_KEY_LEN};
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::wire::tcp::address::AddressEntry;
use fireopal_core::wire::tcp::frame::{
    FrameHeader, FrameKind, FrameLimits, GetRequest, PutHeader, RemoteKey, FRAME_HEADER_LEN,
};

use crate::admission::StrangerReport;
use crate::align::payload_pad;
use crate::config::{Settings, MAX_HEADER};
use crate::conn::{ConnId, Dest, Finish, Phase, Slab};
use crate::failure::{ack_check_interval, sweep_interval};
use crate::queue::{Done, OutItem, RegionPart, SendQueue};
use crate::rdma::{OpKind, Ops, Registrations};
use crate::send::{remainder, write_pieces, WriteWhen, ZEROS};
use crate::sys::{Epoll, Readiness, Socket};
use crate::RankHash;

/// Where to dial a peer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target {
    pub(crate) addr: SocketAddr,
    /// The peer's entry index in its address list.
    pub(crate) entry: u8,
}

/// Connection state of one peer.
#[derive(Debug, Clone)]
pub(crate) enum PeerState {
    /// No connection yet.
    Idle,
    /// Our connection is being opened.
    Connecting(ConnId),
    /// The peer refused our connection as a duplicate and will use its
    /// own; waiting for it since then.
    AwaitingIncoming(Instant),
    /// Frames flow on this connection.
    Established(ConnId),
    /// Our connection was cut before its handshake ended; dial again at
    /// this time (see [`crate::admission`]).
    Redial(Instant),
    /// The peer failed; every call for it fails with this error.
    Failed(PluginError),
}

/// One peer of this module.
#[derive(Debug)]
pub(crate) struct Peer {
    /// Where to dial; `None` for a peer known only by its connection to us.
    pub(crate) target: Option<Target>,
    pub(crate) state: PeerState,
    pub(crate) queue: SendQueue,
    /// Dials after the first since the last established connection.
    pub(crate) redials: u32,
    /// The module's `progress` generation in which a `sendi` made outside
    /// `progress` last wrote to this peer (0: none): the next small
    /// messages to it in that generation are a burst (see `crate::send`).
    pub(crate) wrote_in: u64,
}

impl Peer {
    pub(crate) fn new(target: Option<Target>) -> Self {
        Self {
            target,
            state: PeerState::Idle,
            queue: SendQueue::default(),
            redials: 0,
            wrote_in: 0,
        }
    }
}

/// An event found outside `progress` (or while writing), reported at the
/// next `progress`.
#[derive(Debug)]
pub(crate) enum Notice {
    SendDone(u64, Result<(), PluginError>),
    RdmaDone(u64, Result<(), PluginError>),
    PeerFailed(Rank, PluginError),
}

/// Most `progress` calls in a row that read the hot connection without
/// asking epoll.
const MAX_EPOLL_SKIPS: u32 = 16;

/// Largest header + payload of a `sendi` a burst holds back (see
/// `crate::send`): above it one write per message costs little beside
/// the copy into the queue.
const BATCH_FRAME: usize = 16 << 10;

/// One TCP module: one listening socket (an interface address and a link)
/// and at most one connection per peer, opened on first use.
///
/// - `sendi` sends nothing and answers `Busy` when the message exceeds the
///   eager limit, the connection is not up yet (it is started), bytes are
///   queued to the peer, or the socket takes nothing. If the socket takes
///   part of the message, the module keeps the rest and answers `Sent`;
///   the peer then has queued bytes, so following `sendi`s answer `Busy`
///   until they are written. The receiver never sees a partial message.
/// - `send` answers `Done` when the socket took the whole message, else
///   copies what is left and answers `Pending`; `send_complete` follows
///   once, when the last byte is handed to the kernel or the peer fails.
/// - `put`/`get` always answer `Pending`; the target checks key, rights and
///   range, and a refusal completes the operation with an error.
/// - A connection that closes, resets or breaks the framing fails its peer:
///   `peer_failed` once, every pending operation to it completes with an
///   error once, and later calls for it fail at once.
pub struct TcpModule {
    pub(crate) host: Host,
    pub(crate) me: Rank,
    pub(crate) size: u32,
    pub(crate) key: [u8; JOB_KEY_LEN],
    pub(crate) settings: Settings,
    /// This module's index in `entries`.
    pub(crate) entry: usize,
    pub(crate) entries: Vec<AddressEntry>,
    pub(crate) address: Vec<u8>,
    pub(crate) listener: Socket,
    pub(crate) epoll: Epoll,
    pub(crate) ready: Vec<Readiness>,
    pub(crate) conns: Slab,
    pub(crate) peers: HashMap<Rank, Peer, RankHash>,
    /// Ranks answered unreachable, with the reason (kept for repeats).
    pub(crate) unreachable: HashMap<Rank, String, RankHash>,
    pub(crate) regs: Registrations,
    pub(crate) ops: Ops,
    pub(crate) notices: VecDeque<Notice>,
    pub(crate) limits: FrameLimits,
    /// Peers whose queue got replies while a connection was being read.
    pub(crate) to_flush: Vec<Rank>,
    pub(crate) next_sweep: Instant,
    /// When connections' acknowledgements are next looked at.
    next_ack_check: Instant,
    /// Spare buffers for large active messages.
    pub(crate) big_pool: Vec<crate::align::AlignedBuf>,
    /// `progress` calls so far.
    pub(crate) calls: u32,
    /// The connection that delivered last: read first, before asking
    /// epoll, which saves a system call on the latency path.
    hot: Option<ConnId>,
    /// Calls in a row that skipped epoll because `hot` delivered.
    epoll_skips: u32,
    /// Inside `progress` (sends from the host's handlers).
    in_progress: bool,
    /// `progress` calls so far, from 1: what a burst is counted in.
    generation: u64,
    /// Dropped strangers, reported by address and rate-limited.
    pub(crate) strangers: StrangerReport,
    /// Peers in [`PeerState::Redial`] (an upper bound).
    pub(crate) redials_waiting: usize,
}

impl std::fmt::Debug for TcpModule {
    // The job key is a secret: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpModule")
            .field("rank", &self.me)
            .field("entry", &self.my_entry())
            .field("peers", &self.peers.len())
            .field("connections", &self.conns.len())
            .finish_non_exhaustive()
    }
}

/// Handshake deadlines are looked at every this many `progress` calls.
const SWEEP_EVERY: u32 = 64;

impl TcpModule {
    /// A module listening on `listener`, which is `entries[entry]`.
    pub(crate) fn new(
        host: Host,
        settings: Settings,
        entries: Vec<AddressEntry>,
        entry: usize,
        address: Vec<u8>,
        listener: Socket,
    ) -> Result<Self, PluginError> {
        let job = host.job();
        let epoll = Epoll::new(256).map_err(|e| io_error("cannot create an epoll instance", &e))?;
        epoll
            .add(&listener, crate::conn::LISTENER_TOKEN, false)
            .map_err(|e| io_error("cannot watch the listening socket", &e))?;
        let limits = FrameLimits {
            max_header_len: MAX_HEADER as u16,
            max_payload_len: settings.max_send_size as u64,
        };
        Ok(Self {
            host,
            me: job.rank,
            size: job.size,
            key: job.job_key,
            next_sweep: Instant::now(),
            next_ack_check: Instant::now(),
            settings,
            entry,
            entries,
            address,
            listener,
            epoll,
            ready: Vec::with_capacity(256),
            conns: Slab::default(),
            peers: HashMap::default(),
            unreachable: HashMap::default(),
            regs: Registrations::default(),
            ops: Ops::default(),
            notices: VecDeque::new(),
            limits,
            to_flush: Vec::new(),
            big_pool: Vec::new(),
            calls: 0,
            hot: None,
            epoll_skips: 0,
            in_progress: false,
            generation: 1,
            strangers: StrangerReport::default(),
            redials_waiting: 0,
        })
    }

    /// This module's own published entry.
    pub fn my_entry(&self) -> Option<&AddressEntry> {
        self.entries.get(self.entry)
    }

    /// The link index of this module.
    pub fn link(&self) -> u8 {
        self.my_entry().map_or(0, |e| e.link)
    }

    /// Bytes queued to `peer` and not yet handed to the kernel.
    pub fn queued_bytes(&self, peer: Rank) -> usize {
        self.peers.get(&peer).map_or(0, |p| p.queue.bytes())
    }

    /// The (local, remote) socket addresses of the established connection
    /// to `peer`, if any.
    pub fn connection_addresses(&self, peer: Rank) -> Option<(SocketAddr, SocketAddr)> {
        let PeerState::Established(id) = self.peers.get(&peer)?.state else {
            return None;
        };
        let sock = &self.conns.get(id)?.sock;
        Some((sock.local_addr().ok()?, sock.peer_addr().ok()?))
    }

    /// Open connections, in any phase (handshakes included).
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    /// `put`/`get` operations this module started that have not completed.
    pub fn rdma_in_flight(&self) -> usize {
        self.ops.len()
    }

    pub(crate) fn log(&self, level: LogLevel, message: &str) {
        self.host
            .log(level, &format!("tcp[{}]: {message}", self.entry));
    }

    // ---- sending ----------------------------------------------------

    /// Checks a `put`/`get`, starts the connection if needed, and
    /// returns the target key. After it passes, queueing the operation's
    /// frames cannot fail, so the operation's one completion is always
    /// reported through the sink.
    fn rdma_checks(&mut self, op: &RdmaOp<'_>) -> Result<RemoteKey, PluginError> {
        let key = RemoteKey::parse(op.remote_key.as_slice())
            .map_err(|e| PluginError::invalid(e.to_string()))?;
        op.remote_addr
            .checked_add(op.local.len() as u64)
            .ok_or_else(|| PluginError::invalid("remote range overflows"))?;
        self.ensure_connection(op.peer)?;
        Ok(key)
    }

    /// Largest payload of one frame.
    fn chunk_len(&self) -> usize {
        self.settings.max_send_size.max(1)
    }

    /// Copies out queued get answers that point into registration `id`,
    /// and refuses in-progress puts into it.
    fn release_registration(&mut self, id: u64) -> Result<(), PluginError> {
        for peer in self.peers.values_mut() {
            peer.queue
                .detach_registration(id)
                .map_err(|e| io_error("cannot copy queued bytes", &e))?;
        }
        for cid in self.conns.ids() {
            let Some(conn) = self.conns.get_mut(cid) else {
                continue;
            };
            let Some(large) = conn.rx.as_mut().and_then(|rx| rx.large.as_mut()) else {
                continue;
            };
            if let Dest::Memory {
                registration: Some(r),
                ..
            } = large.dest
            {
                if r == id {
                    large.dest = Dest::Discard;
                    if let Finish::PutAck { op_id, .. } = large.finish {
                        large.finish = Finish::PutAck {
                            op_id,
                            status: fireopal_core::wire::tcp::frame::RdmaStatus::Deregistered,
                        };
                    }
                }
            }
        }
        Ok(())
    }
}

/// An I/O error as a plugin error.
pub(crate) fn io_error(what: &str, e: &io::Error) -> PluginError {
    PluginError::new(ErrorKind::IO, format!("{what}: {e}"))
}

/// Refuses a message header longer than frames carry.
fn check_header(header: &[u8]) -> Result<(), PluginError> {
    if header.len() > MAX_HEADER {
        return Err(PluginError::invalid(format!(
            "header of {} bytes exceeds {MAX_HEADER}",
            header.len()
        )));
    }
    Ok(())
}

/// A send the socket took only the first `written` bytes of: its frame
/// header and the padding before its payload.
struct Rest {
    frame: [u8; FRAME_HEADER_LEN],
    pad: usize,
    written: usize,
}

/// The fixed header of an active message whose frame starts `at` bytes
/// into its burst of writes, and its padding (see [`crate::align`]).
fn active_frame(
    at: usize,
    tag: u8,
    header: &[u8],
    payload: &[u8],
) -> ([u8; FRAME_HEADER_LEN], usize) {
    // The receiver lands a large payload in its own aligned buffer.
    let pad = payload_pad(
        at + FRAME_HEADER_LEN + header.len(),
        payload.len(),
        payload.as_ptr() as usize,
        0,
    );
    let frame = FrameHeader::active(tag, header.len() as u16, payload.len() as u64)
        .with_pad(pad)
        .encode();
    (frame, usize::from(pad))
}

impl Transport for TcpModule {
    fn attributes(&self) -> Result<BtlAttributes, PluginError> {
        let s = &self.settings;
        Ok(BtlAttributes {
            max_sendi_size: s.eager_limit as u64,
            eager_limit: s.eager_limit as u64,
            max_send_size: s.max_send_size as u64,
            max_header_size: MAX_HEADER as u32,
            rdma_pipeline_send_length: s.eager_limit as u64,
            rdma_pipeline_frag_size: s.max_send_size as u64,
            min_rdma_pipeline_size: 0,
            exclusivity: exclusivity::DEFAULT,
            latency_ns: s.latency_ns,
            bandwidth_mbps: s.bandwidth_mbps,
            flags: BtlFlags::SEND
                | BtlFlags::PUT
                | BtlFlags::GET
                | BtlFlags::STRIPE
                | BtlFlags::SEND_IN_PLACE
                | BtlFlags::TARGET_SERVES_RDMA,
            registration_handle_size: RemoteKey::LEN as u32,
        })
    }

    fn address(&self) -> Result<Vec<u8>, PluginError> {
        Ok(self.address.clone())
    }

    fn add_peers(&mut self, peers: &[PeerAddress<'_>]) -> Result<Vec<Reachability>, PluginError> {
        let mut answers = Vec::with_capacity(peers.len());
        for p in peers {
            let answer = self.add_peer(p);
            if let Reachability::Unreachable(reason) = &answer {
                self.log(
                    LogLevel::Debug,
                    &format!("rank {} is unreachable: {reason}", p.rank),
                );
            }
            answers.push(answer);
        }
        Ok(answers)
    }

    fn remove_peer(&mut self, rank: Rank) -> Result<(), PluginError> {
        self.unreachable.remove(&rank);
        let Some(mut peer) = self.peers.remove(&rank) else {
            return Ok(());
        };
        let error = PluginError::new(
            ErrorKind::UNREACHABLE,
            format!("rank {rank} was removed from this tcp module"),
        );
        if let PeerState::Connecting(id) | PeerState::Established(id) = peer.state {
            self.close_conn(id);
        }
        for cookie in peer.queue.clear() {
            self.notices
                .push_back(Notice::SendDone(cookie, Err(error.clone())));
        }
        for cookie in self.ops.drain_peer(rank) {
            self.notices
                .push_back(Notice::RdmaDone(cookie, Err(error.clone())));
        }
        Ok(())
    }

    fn sendi(
        &mut self,
        rank: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
    ) -> Result<SendiOutcome, PluginError> {
        check_header(header)?;
        if header.len() + payload.len() > self.settings.eager_limit {
            return Ok(SendiOutcome::Busy);
        }
        let (bursts, user, generation) = (
            self.bursts(header.len() + payload.len()),
            !self.in_progress,
            self.generation,
        );
        let Some(peer) = self.peers.get_mut(&rank) else {
            return Err(self.unknown_peer(rank));
        };
        let (id, queued) = match &peer.state {
            PeerState::Established(id) => (*id, !peer.queue.is_empty()),
            PeerState::Failed(e) => return Err(e.clone()),
            PeerState::Idle => {
                self.connect(rank)?;
                return Ok(SendiOutcome::Busy);
            }
            _ => return Ok(SendiOutcome::Busy),
        };
        let Some(conn) = self.conns.get(id) else {
            return Ok(SendiOutcome::Busy);
        };
        // Bytes are queued, or this message is held back for a burst
        // (which `send` then queues; `holds_back` with nothing queued).
        if queued || (bursts && !conn.want_write && peer.wrote_in == generation) {
            return Ok(SendiOutcome::Busy);
        }
        // Nothing is queued, so this frame starts a write.
        let (frame, pad) = active_frame(0, tag, header, payload);
        let parts: [&[u8]; 4] = [&frame, header, &ZEROS[..pad], payload];
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let written = write_pieces(&conn.sock, &parts, 0, 0);
        if user {
            peer.wrote_in = generation;
        }
        match written {
            Ok(0) => Ok(SendiOutcome::Busy),
            Ok(n) if n == total => Ok(SendiOutcome::Sent),
            Ok(n) => {
                // The socket took part of it: keep the rest (see the
                // module docs); the peer now has queued bytes.
                let rest = remainder(&parts, n);
                self.enqueue_rest(
                    rank,
                    OutItem::owned(rest, Done::Nothing),
                    n,
                    WriteWhen::Writable,
                )?;
                Ok(SendiOutcome::Sent)
            }
            Err(e) => Err(self.lost(rank, &e)),
        }
    }

    fn send(
        &mut self,
        rank: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
        cookie: u64,
    ) -> Result<Completion, PluginError> {
        if self.holds_back(rank, header.len() + payload.len()) {
            check_header(header)?;
            let at = self.next_position(rank);
            let (frame, pad) = active_frame(at, tag, header, payload);
            let bytes = remainder(&[&frame, header, &ZEROS[..pad], payload], 0);
            self.enqueue(
                rank,
                OutItem::owned(bytes, Done::Send(cookie)),
                WriteWhen::NextProgress,
            )?;
            return Ok(Completion::Pending);
        }
        let Some(Rest {
            frame,
            pad,
            written,
        }) = self.send_direct(rank, tag, header, payload)?
        else {
            return Ok(Completion::Done);
        };
        let rest = remainder(&[&frame, header, &ZEROS[..pad], payload], written);
        self.enqueue_rest(
            rank,
            OutItem::owned(rest, Done::Send(cookie)),
            written,
            WriteWhen::Writable,
        )?;
        Ok(Completion::Pending)
    }

    #[allow(unsafe_code)]
    fn send_in_place(
        &mut self,
        rank: Rank,
        tag: u8,
        header: &[u8],
        payload: MemRegion,
        cookie: u64,
    ) -> Result<Completion, PluginError> {
        // SAFETY: the send has just been handed the region, so it has not
        // completed; its bytes are read, not written, while `bytes` lives.
        let bytes = unsafe { payload.as_bytes() };
        let Some(Rest {
            frame,
            pad,
            written,
        }) = self.send_direct(rank, tag, header, bytes)?
        else {
            return Ok(Completion::Done);
        };
        // What the socket did not take stays where it is: the queue
        // borrows the payload, with no copy, until it is written.
        let part = RegionPart {
            region: payload,
            offset: 0,
            len: payload.len(),
            registration: None,
        };
        let item = OutItem::frame(
            &[&frame, header, &ZEROS[..pad]],
            Some(part),
            Done::Send(cookie),
        )
        .skipping(written);
        self.enqueue_rest(rank, item, written, WriteWhen::Writable)?;
        Ok(Completion::Pending)
    }

    fn register_mem(
        &mut self,
        region: MemRegion,
        access: Access,
    ) -> Result<Registration, PluginError> {
        self.regs.register(region, access)
    }

    fn deregister_mem(&mut self, id: u64) -> Result<(), PluginError> {
        self.regs.deregister(id)?;
        self.release_registration(id)
    }

    fn put(&mut self, op: &RdmaOp<'_>) -> Result<Completion, PluginError> {
        let key = self.rdma_checks(op)?;
        let len = op.local.len();
        let chunk = self.chunk_len();
        let chunks = len.div_ceil(chunk).max(1);
        let op_id = self.ops.start(
            op.peer,
            op.cookie,
            OpKind::Put {
                acks_left: chunks as u64,
            },
            false,
        );
        let last_write = self.rdma_write_when(len);
        for i in 0..chunks {
            let offset = i * chunk;
            let clen = chunk.min(len - offset);
            let remote_addr = op.remote_addr + offset as u64;
            let pad = payload_pad(
                self.next_position(op.peer) + FRAME_HEADER_LEN + PutHeader::LEN,
                clen,
                op.local.as_ptr() as usize + offset,
                remote_addr as usize,
            );
            let frame = FrameHeader::rdma(FrameKind::Put, clen as u64)
                .with_pad(pad)
                .encode();
            let put = PutHeader {
                op_id,
                remote_addr,
                key,
            }
            .encode();
            let part = RegionPart {
                region: op.local,
                offset,
                len: clen,
                registration: None,
            };
            let item = OutItem::frame(
                &[&frame, &put, &ZEROS[..usize::from(pad)]],
                Some(part),
                Done::Nothing,
            );
            // Every chunk but the last only queues: the last one's write
            // takes them all.
            let when = if i + 1 == chunks {
                last_write
            } else {
                WriteWhen::NextProgress
            };
            if self.enqueue(op.peer, item, when).is_err() {
                // Only a failure of the peer while writing an earlier
                // chunk gets here; it already completed this operation
                // with its error.
                break;
            }
        }
        Ok(Completion::Pending)
    }

    fn get(&mut self, op: &RdmaOp<'_>) -> Result<Completion, PluginError> {
        let key = self.rdma_checks(op)?;
        let op_id = self.ops.start(
            op.peer,
            op.cookie,
            OpKind::Get {
                local: op.local,
                received: 0,
            },
            op.local.len() > self.settings.recv_staging,
        );
        let frame = FrameHeader::rdma(FrameKind::GetRequest, 0).encode();
        let request = GetRequest {
            op_id,
            remote_addr: op.remote_addr,
            key,
            length: op.local.len() as u64,
            reply_addr: op.local.as_ptr() as u64,
        }
        .encode();
        // Cannot fail after `rdma_checks`; a failure while writing
        // completes the operation with the error.
        // The request is small whatever it asks for.
        let when = self.rdma_write_when(0);
        let item = OutItem::frame(&[&frame, &request], None, Done::Nothing);
        let _ = self.enqueue(op.peer, item, when);
        Ok(Completion::Pending)
    }

    fn progress(&mut self, sink: &mut dyn EventSink) -> Result<usize, PluginError> {
        self.in_progress = true;
        let done = self.progress_inner(sink);
        self.in_progress = false;
        done
    }

    /// Every queued byte: `sendi` rests, RDMA frames and replies are
    /// among them with no cookie.
    fn unsent(&self) -> u64 {
        self.peers.values().map(|p| p.queue.bytes() as u64).sum()
    }
}

impl TcpModule {
    /// The work of `progress`, which marks the time spent in it.
    fn progress_inner(&mut self, sink: &mut dyn EventSink) -> Result<usize, PluginError> {
        // What a burst of sends or RDMA operations held back goes out
        // first; the next message to each peer starts a burst.
        self.generation += 1;
        while let Some(rank) = self.to_flush.pop() {
            self.flush(rank);
        }
        let mut events = self.drain_notices(sink);
        // Deadlines are coarse: look at the clock now and then only.
        self.calls = self.calls.wrapping_add(1);
        if self.calls % SWEEP_EVERY == 0 {
            let now = Instant::now();
            if self.redials_waiting > 0 {
                self.redial_due(now);
            }
            if now >= self.next_sweep {
                self.sweep(now);
                self.next_sweep = now + sweep_interval(self.settings.handshake_timeout);
            }
            if let Some(timeout) = self.settings.ack_timeout {
                if now >= self.next_ack_check {
                    self.check_acks(now, timeout);
                    self.next_ack_check = now + ack_check_interval(timeout);
                }
            }
        }
        if let Some(hot) = self.hot {
            let established = self
                .conns
                .get(hot)
                .is_some_and(|c| matches!(c.phase, Phase::Established));
            if established && self.epoll_skips < MAX_EPOLL_SKIPS {
                let n = self.read_frames(hot, sink);
                if n > 0 {
                    // Others (and writability) are looked at within a few
                    // calls: skipping epoll is bounded.
                    self.epoll_skips += 1;
                    return Ok(events + n + self.drain_notices(sink));
                }
            } else if !established {
                self.hot = None;
            }
        }
        self.epoll_skips = 0;
        let mut ready = std::mem::take(&mut self.ready);
        if let Err(e) = self.epoll.wait(&mut ready, 0) {
            self.ready = ready;
            return Err(io_error("epoll_wait failed", &e));
        }
        for r in &ready {
            if r.token == crate::conn::LISTENER_TOKEN {
                self.accept_all();
                continue;
            }
            let id = ConnId::from_token(r.token);
            if r.writable {
                self.on_writable(id);
            }
            if r.readable {
                let n = self.on_readable(id, sink);
                if n > 0 {
                    self.hot = Some(id);
                }
                events += n;
            }
        }
        self.ready = ready;
        events += self.drain_notices(sink);
        Ok(events)
    }
}

impl TcpModule {
    /// Whether a message of `size` bytes to `rank` waits for the next
    /// `progress`, to leave with the rest of its burst in one write: a
    /// small message the caller (not a handler within `progress`) sends
    /// to a peer it already wrote to since the last `progress`, or behind
    /// messages already held back, on a connection whose socket takes
    /// more.
    fn holds_back(&self, rank: Rank, size: usize) -> bool {
        if !self.bursts(size) {
            return false;
        }
        let Some(peer) = self.peers.get(&rank) else {
            return false;
        };
        let PeerState::Established(id) = peer.state else {
            return false;
        };
        // Queued bytes wait either for the socket to drain (`want_write`,
        // and then nothing is held back) or for the next `progress`.
        self.conns.get(id).is_some_and(|c| !c.want_write)
            && (peer.wrote_in == self.generation || !peer.queue.is_empty())
    }

    /// Whether a message of `size` bytes sent now may be held back at all:
    /// batching is on, the caller is not a handler within `progress`, and
    /// the message is small.
    fn bursts(&self, size: usize) -> bool {
        self.settings.sendi_batch && !self.in_progress && size <= BATCH_FRAME
    }

    /// Checks a send and writes what the socket takes of it now, if
    /// nothing waits before it: `None` once all of it left, else what is
    /// left to queue.
    fn send_direct(
        &mut self,
        rank: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
    ) -> Result<Option<Rest>, PluginError> {
        check_header(header)?;
        let size = header.len() + payload.len();
        if size > self.settings.max_send_size {
            return Err(PluginError::invalid(format!(
                "message of {size} bytes exceeds btl_tcp_max_send_size ({})",
                self.settings.max_send_size
            )));
        }
        let Some(peer) = self.peers.get(&rank) else {
            return Err(self.unknown_peer(rank));
        };
        match &peer.state {
            PeerState::Failed(e) => return Err(e.clone()),
            // Older bytes may fit now: writing them first lets this message
            // go straight from the caller's buffer instead of being queued.
            PeerState::Established(_) if !peer.queue.is_empty() => self.flush(rank),
            _ => {}
        }
        let Some(peer) = self.peers.get(&rank) else {
            return Err(self.unknown_peer(rank));
        };
        if let PeerState::Failed(e) = &peer.state {
            return Err(e.clone());
        }
        let (frame, pad) = active_frame(peer.queue.next_position(), tag, header, payload);
        let parts: [&[u8]; 4] = [&frame, header, &ZEROS[..pad], payload];
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut written = 0;
        if let PeerState::Established(id) = peer.state {
            if peer.queue.is_empty() {
                if let Some(conn) = self.conns.get(id) {
                    // In pieces, so the receiver copies the first while we
                    // copy the next.
                    match write_pieces(&conn.sock, &parts, 0, 0) {
                        Ok(n) if n == total => return Ok(None),
                        Ok(n) => written = n,
                        Err(e) => return Err(self.lost(rank, &e)),
                    }
                }
            }
        }
        Ok(Some(Rest {
            frame,
            pad,
            written,
        }))
    }

    fn on_writable(&mut self, id: ConnId) {
        let Some(conn) = self.conns.get(id) else {
            return;
        };
        match conn.phase {
            Phase::Connecting => self.connect_done(id),
            Phase::Established => {
                if let Some(rank) = conn.peer {
                    self.flush(rank);
                }
            }
            // Handshake messages are written whole; nothing to wait for.
            _ => self.watch_writes(id, false),
        }
    }

    fn on_readable(&mut self, id: ConnId, sink: &mut dyn EventSink) -> usize {
        let Some(conn) = self.conns.get(id) else {
            return 0;
        };
        match conn.phase {
            Phase::Established => self.read_frames(id, sink),
            Phase::Connecting => {
                self.connect_done(id);
                0
            }
            _ => {
                if self.read_handshake(id) {
                    self.read_frames(id, sink)
                } else {
                    0
                }
            }
        }
    }
}
