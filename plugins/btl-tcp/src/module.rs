//! The TCP module: one listening socket (one interface address, one link),
//! its connections to peers, and the [`Transport`] contract over them.
//!
//! # Sending
//!
//! Each peer has a queue of unsent bytes. A message goes straight to the
//! socket with one gathered `sendmsg` (frame header, message header,
//! payload; messages over `btl_tcp_write_chunk` bytes in pieces of that
//! size, each pushed to the peer at once) when the connection is up and
//! nothing is queued; otherwise,
//! or for what the socket did not take, the bytes are copied into the
//! queue, which `progress` drains when epoll reports the socket writable.
//!
//! - `sendi` answers `Busy` (sending nothing) when the message is larger
//!   than the eager limit, the connection is not up yet (it is started),
//!   bytes are queued, or the socket takes nothing. If the socket takes
//!   only part of the message, the module keeps the rest and answers
//!   `Sent`: the receiver still gets the whole message, in order, and
//!   since the peer now has queued bytes, following `sendi`s answer `Busy`
//!   until the queue drains.
//! - `send` first writes what is queued if the socket takes it, then
//!   answers `Done` when the socket took the whole message now;
//!   otherwise it copies what is left, answers `Pending`, and reports
//!   `send_complete` once when the last byte is handed to the kernel (or
//!   with an error if the peer fails first).
//! - `put` sends the local bytes straight from the caller's memory (valid
//!   until completion, so never copied) in chunks of at most
//!   `btl_tcp_max_send_size`; the target checks the key and range of each
//!   chunk, writes it in place and acknowledges it; the operation completes
//!   when every chunk is acknowledged, with the first error if any.
//!   `get` sends a request; the target checks it and answers with the
//!   bytes, which are read straight into the caller's buffer.
//!
//! # Failure
//!
//! A connection that closes, resets, or sends a frame that fails its
//! checks makes the peer failed: `peer_failed` is reported once, every
//! queued `send` and every `put`/`get` in flight to it completes with an
//! error (each once), and later calls for it fail at once. Connections
//! that never authenticated are dropped and logged without touching any
//! peer.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fireopal_abi::btl::{
    exclusivity, Access, BtlAttributes, BtlFlags, Completion, EventSink, MemRegion, PeerAddress,
    Rank, RdmaOp, Reachability, Registration, SendiOutcome, Transport,
};
use fireopal_abi::host::{Host, LogLevel, JOB_KEY_LEN};
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::wire::address::{parse_addresses, AddressEntry};
use fireopal_core::wire::frame::{
    FrameHeader, FrameKind, FrameLimits, GetRequest, PutHeader, RemoteKey, FRAME_HEADER_LEN,
    PAYLOAD_ALIGN,
};

use crate::admission::StrangerReport;
use crate::align::{payload_pad, piece_limit};
use crate::config::{Settings, MAX_HEADER};
use crate::conn::{ConnId, Dest, Finish, Phase, Slab};
use crate::queue::{Done, OutItem, RegionPart, SendQueue};
use crate::rdma::{OpKind, Ops, Registrations};
use crate::select::partner;
use crate::sys::{Epoll, Gather, Readiness, Socket, MAX_IOV};
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
}

impl Peer {
    pub(crate) fn new(target: Option<Target>) -> Self {
        Self {
            target,
            state: PeerState::Idle,
            queue: SendQueue::default(),
            redials: 0,
        }
    }
}

/// When a queued item is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteWhen {
    /// At once, as much as the socket takes.
    Now,
    /// At the start of the next `progress` (no system call until then).
    NextProgress,
    /// When epoll reports the socket writable (it was full).
    Writable,
}

/// An event found outside `progress` (or while writing), reported at the
/// next `progress`.
#[derive(Debug)]
pub(crate) enum Notice {
    SendDone(u64, Result<(), PluginError>),
    RdmaDone(u64, Result<(), PluginError>),
    PeerFailed(Rank, PluginError),
}

/// Padding bytes, sliced to a frame's `pad`.
pub(crate) const ZEROS: [u8; PAYLOAD_ALIGN] = [0; PAYLOAD_ALIGN];

/// Most `progress` calls in a row that read the hot connection without
/// asking epoll.
const MAX_EPOLL_SKIPS: u32 = 16;

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

/// How often handshake deadlines are checked, at most.
fn sweep_interval(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_millis(1), Duration::from_millis(250))
}

/// How often connections' acknowledgements are checked: a few times per
/// timeout, and at most once a second (one `getsockopt` per connection).
fn ack_check_interval(timeout: Duration) -> Duration {
    (timeout / 8).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

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

    fn unknown_peer(&self, peer: Rank) -> PluginError {
        PluginError::new(
            ErrorKind::UNREACHABLE,
            format!("rank {peer} was not added to this tcp module"),
        )
    }

    // ---- sending ----------------------------------------------------

    /// Starts connecting to `rank` (which must be Idle).
    pub(crate) fn connect(&mut self, rank: Rank) -> Result<(), PluginError> {
        let Some(peer) = self.peers.get(&rank) else {
            return Err(self.unknown_peer(rank));
        };
        let Some(target) = peer.target else {
            let e = PluginError::new(
                ErrorKind::UNREACHABLE,
                format!("rank {rank} has no published tcp address to dial"),
            );
            self.fail_peer(rank, e.clone());
            return Err(e);
        };
        let sock = match Socket::connect(target.addr, self.settings.buffers) {
            Ok(s) => s,
            Err(e) => {
                let err = PluginError::new(
                    ErrorKind::PEER_FAILED,
                    format!("cannot connect to rank {rank} at {}: {e}", target.addr),
                );
                self.fail_peer(rank, err.clone());
                return Err(err);
            }
        };
        if let Err(e) = sock.set_liveness(self.settings.keepalive, self.settings.user_timeout_ms) {
            self.log(
                LogLevel::Warn,
                &format!("cannot set the dead-peer timeouts of the connection to rank {rank}: {e}"),
            );
        }
        let deadline = Instant::now() + self.settings.handshake_timeout;
        let mut conn = crate::conn::Conn::new(sock, Phase::Connecting, Some(rank), deadline);
        conn.remote = Some(target.addr);
        conn.want_write = true;
        let id = self.conns.insert(conn);
        let watched = self
            .conns
            .get(id)
            .map(|c| self.epoll.add(&c.sock, id.token(), true));
        if let Some(Err(e)) = watched {
            self.conns.remove(id);
            let err = io_error("cannot watch a socket", &e);
            self.fail_peer(rank, err.clone());
            return Err(err);
        }
        if let Some(p) = self.peers.get_mut(&rank) {
            p.state = PeerState::Connecting(id);
        }
        self.log(
            LogLevel::Debug,
            &format!("connecting to rank {rank} at {}", target.addr),
        );
        Ok(())
    }

    /// Makes sure a connection to `rank` is up or being made. Fails for
    /// unknown and failed peers, and when a new connection cannot be
    /// started (which fails the peer); nothing of the caller's is queued
    /// yet then, so no completion follows such an error.
    fn ensure_connection(&mut self, rank: Rank) -> Result<(), PluginError> {
        let Some(peer) = self.peers.get(&rank) else {
            return Err(self.unknown_peer(rank));
        };
        match &peer.state {
            PeerState::Failed(e) => Err(e.clone()),
            PeerState::Idle => self.connect(rank),
            // Queued; the next dial carries it.
            PeerState::Redial(_) => Ok(()),
            _ => Ok(()),
        }
    }

    /// Queues `item` for `rank` (starting the connection if needed), to
    /// be written `when` says. Once the connection check passed the item
    /// is always queued, so an error here means the item was not taken.
    fn enqueue(&mut self, rank: Rank, item: OutItem, when: WriteWhen) -> Result<(), PluginError> {
        self.enqueue_rest(rank, item, 0, when)
    }

    /// [`Self::enqueue`] for what is left of a frame whose first `written`
    /// bytes were written directly.
    fn enqueue_rest(
        &mut self,
        rank: Rank,
        item: OutItem,
        written: usize,
        when: WriteWhen,
    ) -> Result<(), PluginError> {
        self.ensure_connection(rank)?;
        let Some(peer) = self.peers.get_mut(&rank) else {
            return Err(self.unknown_peer(rank));
        };
        peer.queue.push_rest(item, written);
        if let PeerState::Established(id) = peer.state {
            match when {
                WriteWhen::Now => self.flush(rank),
                WriteWhen::NextProgress => {
                    if self.to_flush.last() != Some(&rank) {
                        self.to_flush.push(rank);
                    }
                }
                WriteWhen::Writable => self.watch_writes(id, true),
            }
        }
        Ok(())
    }

    /// When an RDMA operation just started, moving `len` bytes in its
    /// first frame, is written. A lone one leaves at once, so a caller
    /// that waits for it pays nothing; a small one started while others
    /// are in flight waits for the next `progress`, so a burst of small
    /// operations leaves in a few writes instead of one system call each.
    /// Large ones leave at once: their data amortises the call, and
    /// writing while the host issues more keeps the socket busy.
    fn rdma_write_when(&self, len: usize) -> WriteWhen {
        if self.ops.len() <= 1 || len >= self.settings.write_chunk {
            WriteWhen::Now
        } else {
            WriteWhen::NextProgress
        }
    }

    /// Turns epoll's write interest for `id` on or off.
    pub(crate) fn watch_writes(&mut self, id: ConnId, want: bool) {
        let Some(conn) = self.conns.get_mut(id) else {
            return;
        };
        if conn.want_write != want && self.epoll.modify(&conn.sock, id.token(), want).is_ok() {
            conn.want_write = want;
        }
    }

    /// Writes as much of `rank`'s queue as its socket takes.
    pub(crate) fn flush(&mut self, rank: Rank) {
        let Some(peer) = self.peers.get_mut(&rank) else {
            return;
        };
        let PeerState::Established(id) = peer.state else {
            return;
        };
        let Some(conn) = self.conns.get_mut(id) else {
            return;
        };
        let notices = &mut self.notices;
        let mut failure = None;
        while !peer.queue.is_empty() {
            let limit = piece_limit(peer.queue.front_position(), self.settings.write_chunk);
            let mut g = Gather::<MAX_IOV>::with_limit(limit);
            peer.queue.gather(&mut g);
            let total = g.total();
            match conn.sock.send_gather(&g) {
                Ok(0) => break,
                Ok(n) => {
                    peer.queue.advance(n, |done| {
                        if let Done::Send(cookie) = done {
                            notices.push_back(Notice::SendDone(cookie, Ok(())));
                        }
                    });
                    if n < total {
                        break;
                    }
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let want = !peer.queue.is_empty();
        if conn.want_write != want && self.epoll.modify(&conn.sock, id.token(), want).is_ok() {
            conn.want_write = want;
        }
        if let Some(e) = failure {
            self.lost(rank, &e);
        }
    }

    /// The peer's connection broke with `e`: fails it.
    pub(crate) fn lost(&mut self, rank: Rank, e: &io::Error) -> PluginError {
        let err = PluginError::new(
            ErrorKind::PEER_FAILED,
            format!("connection to rank {rank} lost: {e}"),
        );
        self.fail_peer(rank, err.clone());
        err
    }

    /// Closes connection `id` (if it is taken out for processing, its
    /// holder drops it when putting it back).
    pub(crate) fn close_conn(&mut self, id: ConnId) {
        // Closing the descriptor also removes it from epoll.
        drop(self.conns.remove(id));
    }

    /// Marks `rank` failed: closes its connection, fails its queued sends
    /// and RDMA operations, and reports `peer_failed` once.
    pub(crate) fn fail_peer(&mut self, rank: Rank, error: PluginError) {
        let Some(peer) = self.peers.get_mut(&rank) else {
            return;
        };
        if matches!(peer.state, PeerState::Failed(_)) {
            return;
        }
        let old = std::mem::replace(&mut peer.state, PeerState::Failed(error.clone()));
        let cookies = peer.queue.clear();
        if let PeerState::Connecting(id) | PeerState::Established(id) = old {
            self.close_conn(id);
        }
        for cookie in cookies {
            self.notices
                .push_back(Notice::SendDone(cookie, Err(error.clone())));
        }
        for cookie in self.ops.drain_peer(rank) {
            self.notices
                .push_back(Notice::RdmaDone(cookie, Err(error.clone())));
        }
        self.notices
            .push_back(Notice::PeerFailed(rank, error.clone()));
        self.log(LogLevel::Warn, &format!("rank {rank} failed: {error}"));
    }

    /// Queues a reply frame (RDMA answers) to be flushed after the read.
    pub(crate) fn reply(&mut self, rank: Rank, item: OutItem) {
        if let Some(peer) = self.peers.get_mut(&rank) {
            if !matches!(peer.state, PeerState::Failed(_)) {
                peer.queue.push(item);
                if self.to_flush.last() != Some(&rank) {
                    self.to_flush.push(rank);
                }
            }
        }
    }

    /// Where a frame queued to `rank` now would start in its burst of
    /// writes (see [`crate::align`]).
    pub(crate) fn next_position(&self, rank: Rank) -> usize {
        self.peers.get(&rank).map_or(0, |p| p.queue.next_position())
    }

    /// Reports the events found outside of `sink`'s reach.
    fn drain_notices(&mut self, sink: &mut dyn EventSink) -> usize {
        let n = self.notices.len();
        while let Some(notice) = self.notices.pop_front() {
            match notice {
                Notice::SendDone(cookie, r) => sink.send_complete(cookie, r),
                Notice::RdmaDone(cookie, r) => sink.rdma_complete(cookie, r),
                Notice::PeerFailed(rank, e) => sink.peer_failed(rank, e),
            }
        }
        n
    }

    /// Drops handshakes past their deadline.
    fn sweep(&mut self, now: Instant) {
        for id in self.conns.ids() {
            let Some(conn) = self.conns.get(id) else {
                continue;
            };
            if matches!(conn.phase, Phase::Established) || conn.deadline.is_none_or(|d| d > now) {
                continue;
            }
            let who = conn.describe();
            let ms = self.settings.handshake_timeout.as_millis();
            if conn.phase.accepted() {
                let addr = conn.remote.map(|a| a.ip());
                self.close_conn(id);
                self.report_stranger(addr, now, &format!("no handshake within {ms} ms"));
            } else if let Some(rank) = conn.peer {
                let ours = self
                    .peers
                    .get(&rank)
                    .is_some_and(|p| matches!(p.state, PeerState::Connecting(c) if c == id));
                if ours {
                    self.fail_peer(
                        rank,
                        PluginError::new(
                            ErrorKind::PEER_FAILED,
                            format!("handshake with {who} did not finish within {ms} ms"),
                        ),
                    );
                } else {
                    self.close_conn(id);
                }
            }
        }
        self.flush_stranger_report(now);
        let late: Vec<Rank> = self
            .peers
            .iter()
            .filter(|(_, p)| {
                matches!(p.state, PeerState::AwaitingIncoming(since)
                    if now.duration_since(since) > self.settings.handshake_timeout)
            })
            .map(|(&r, _)| r)
            .collect();
        for rank in late {
            self.fail_peer(
                rank,
                PluginError::new(
                    ErrorKind::PEER_FAILED,
                    format!("rank {rank} refused our connection and never opened its own"),
                ),
            );
        }
    }

    /// Fails the peers whose machine has left data in flight
    /// unacknowledged for `timeout`. The kernel would retransmit for about
    /// fifteen minutes before giving up, and keepalive only probes idle
    /// connections; `TCP_USER_TIMEOUT` would also fail a peer that merely
    /// stopped reading (its window stays shut), which this check does not,
    /// because that peer's kernel still answers.
    fn check_acks(&mut self, now: Instant, timeout: Duration) {
        let mut silent = Vec::new();
        for id in self.conns.ids() {
            let Some(conn) = self.conns.get_mut(id) else {
                continue;
            };
            let (Phase::Established, Some(rank)) = (&conn.phase, conn.peer) else {
                continue;
            };
            let state = match conn.sock.ack_state() {
                Ok(s) if s.stalled() => s,
                // Answering, or no answer to give: the socket's own error
                // reaches epoll.
                _ => {
                    conn.stalled_since = None;
                    continue;
                }
            };
            let since = *conn.stalled_since.get_or_insert(now);
            // Counted from the later of the last acknowledgement and the
            // first check that saw the stall, so a connection idle for
            // long is not failed by its first lost segment.
            let quiet = Duration::from_millis(state.since_ack_ms.into()).min(now - since);
            if quiet >= timeout {
                silent.push((rank, quiet));
            }
        }
        for (rank, quiet) in silent {
            let ms = quiet.as_millis();
            self.fail_peer(
                rank,
                PluginError::new(
                    ErrorKind::PEER_FAILED,
                    format!(
                        "rank {rank}'s machine acknowledged nothing for {ms} ms with data in flight \
                         (machine down or network cut; limit btl_tcp_ack_timeout_ms)"
                    ),
                ),
            );
        }
    }

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
                            status: fireopal_core::wire::frame::RdmaStatus::Deregistered,
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

/// Gathers what is left of `parts` after the first `skip` bytes.
fn gather_from<'a, const N: usize>(g: &mut Gather<'a, N>, parts: &[&'a [u8]], mut skip: usize) {
    for p in parts {
        if skip >= p.len() {
            skip -= p.len();
            continue;
        }
        if !g.push(&p[skip..]) {
            return;
        }
        skip = 0;
    }
}

/// Writes `parts` to `sock` from byte `written` on, in pieces of at most
/// `chunk` bytes (0: one piece) that end on 64-byte boundaries (see
/// [`crate::align`]), until all is written or the socket takes less than
/// a piece; returns the new `written`.
///
/// Pieces keep each `sendmsg` at or under one loopback segment: a single
/// `sendmsg` a little over it (a 64 KiB message and its frame header) is
/// cut by TCP into a full segment and a tiny one, and a stream of those
/// moved 64 KiB messages at a third of the bandwidth of pieces.
fn write_pieces(
    sock: &Socket,
    parts: &[&[u8]; 4],
    mut written: usize,
    chunk: usize,
) -> io::Result<usize> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    while written < total {
        let mut g = Gather::<4>::with_limit(piece_limit(written, chunk));
        gather_from(&mut g, parts, written);
        let want = g.total();
        let n = sock.send_gather(&g)?;
        written += n;
        if n < want {
            break;
        }
    }
    Ok(written)
}

/// What is left of `parts` after the first `skip` bytes, as one vector.
fn remainder(parts: &[&[u8]], mut skip: usize) -> Vec<u8> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut out = Vec::with_capacity(total.saturating_sub(skip));
    for p in parts {
        if skip >= p.len() {
            skip -= p.len();
            continue;
        }
        out.extend_from_slice(&p[skip..]);
        skip = 0;
    }
    out
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
            flags: BtlFlags::SEND | BtlFlags::PUT | BtlFlags::GET | BtlFlags::STRIPE,
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
        if header.len() > MAX_HEADER {
            return Err(PluginError::invalid(format!(
                "header of {} bytes exceeds {MAX_HEADER}",
                header.len()
            )));
        }
        if header.len() + payload.len() > self.settings.eager_limit {
            return Ok(SendiOutcome::Busy);
        }
        let Some(peer) = self.peers.get(&rank) else {
            return Err(self.unknown_peer(rank));
        };
        let id = match &peer.state {
            PeerState::Established(id) if peer.queue.is_empty() => *id,
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
        // Nothing is queued, so this frame starts a write.
        let pad = payload_pad(
            FRAME_HEADER_LEN + header.len(),
            payload.len(),
            payload.as_ptr() as usize,
            0,
        );
        let frame = FrameHeader::active(tag, header.len() as u16, payload.len() as u64)
            .with_pad(pad)
            .encode();
        let parts: [&[u8]; 4] = [&frame, header, &ZEROS[..usize::from(pad)], payload];
        let total: usize = parts.iter().map(|p| p.len()).sum();
        match write_pieces(&conn.sock, &parts, 0, self.settings.write_chunk) {
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
        if header.len() > MAX_HEADER {
            return Err(PluginError::invalid(format!(
                "header of {} bytes exceeds {MAX_HEADER}",
                header.len()
            )));
        }
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
            // go straight from the caller's buffer instead of being copied.
            PeerState::Established(_) if !peer.queue.is_empty() => self.flush(rank),
            _ => {}
        }
        let Some(peer) = self.peers.get(&rank) else {
            return Err(self.unknown_peer(rank));
        };
        if let PeerState::Failed(e) = &peer.state {
            return Err(e.clone());
        }
        let pad = payload_pad(
            peer.queue.next_position() + FRAME_HEADER_LEN + header.len(),
            payload.len(),
            payload.as_ptr() as usize,
            0,
        );
        let frame = FrameHeader::active(tag, header.len() as u16, payload.len() as u64)
            .with_pad(pad)
            .encode();
        let parts: [&[u8]; 4] = [&frame, header, &ZEROS[..usize::from(pad)], payload];
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut written = 0;
        if let PeerState::Established(id) = peer.state {
            if peer.queue.is_empty() {
                if let Some(conn) = self.conns.get(id) {
                    // In pieces, so the receiver copies the first while we
                    // copy the next.
                    match write_pieces(&conn.sock, &parts, 0, self.settings.write_chunk) {
                        Ok(n) if n == total => return Ok(Completion::Done),
                        Ok(n) => written = n,
                        Err(e) => return Err(self.lost(rank, &e)),
                    }
                }
            }
        }
        let rest = remainder(&parts, written);
        self.enqueue_rest(
            rank,
            OutItem::owned(rest, Done::Send(cookie)),
            written,
            WriteWhen::Writable,
        )?;
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
        // RDMA operations held back for a burst go out first.
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
    /// One entry of `add_peers`.
    fn add_peer(&mut self, p: &PeerAddress<'_>) -> Reachability {
        if p.rank == self.me {
            return Reachability::Unreachable("tcp does not carry messages to oneself".into());
        }
        if p.rank >= self.size {
            return Reachability::Unreachable(
                format!("rank {} is outside the job of {}", p.rank, self.size).into(),
            );
        }
        if let Some(reason) = self.unreachable.get(&p.rank) {
            return Reachability::Unreachable(reason.as_str().into());
        }
        if let Some(peer) = self.peers.get(&p.rank) {
            if peer.target.is_some() {
                return Reachability::Reachable;
            }
        }
        match self.choose_target(p) {
            Ok(target) => {
                self.peers
                    .entry(p.rank)
                    .or_insert_with(|| Peer::new(None))
                    .target
                    .get_or_insert(target);
                Reachability::Reachable
            }
            Err(reason) => {
                if self.peers.contains_key(&p.rank) {
                    // Connected to us already: usable, just not dialable.
                    return Reachability::Reachable;
                }
                self.unreachable.insert(p.rank, reason.clone());
                Reachability::Unreachable(reason.into())
            }
        }
    }

    /// The peer's socket our entry pairs with.
    fn choose_target(&self, p: &PeerAddress<'_>) -> Result<Target, String> {
        let theirs = match parse_addresses(p.address.as_slice()) {
            Ok(list) => list,
            Err(e) => {
                self.log(
                    LogLevel::Warn,
                    &format!("rank {} published a bad tcp address: {e}", p.rank),
                );
                return Err(format!("bad published address: {e}"));
            }
        };
        let j = partner(
            &self.entries,
            self.entry,
            &theirs,
            self.me < p.rank,
            p.node_local,
        )
        .ok_or_else(|| {
            let mine = self
                .my_entry()
                .map_or_else(String::new, |e| format!("{} {}", e.name, e.ip));
            format!(
                "no interface of rank {} pairs with {mine} link {}",
                p.rank,
                self.link()
            )
        })?;
        let e = theirs
            .get(j)
            .ok_or_else(|| "pairing out of range".to_owned())?;
        Ok(Target {
            addr: SocketAddr::new(e.ip, e.port),
            entry: j as u8,
        })
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

#[cfg(test)]
mod tests {
    use super::remainder;

    #[test]
    fn remainder_skips_across_parts() {
        let parts: [&[u8]; 3] = [b"abc", b"", b"defg"];
        assert_eq!(remainder(&parts, 0), b"abcdefg");
        assert_eq!(remainder(&parts, 2), b"cdefg");
        assert_eq!(remainder(&parts, 3), b"defg");
        assert_eq!(remainder(&parts, 5), b"fg");
        assert_eq!(remainder(&parts, 7), b"");
    }
}
