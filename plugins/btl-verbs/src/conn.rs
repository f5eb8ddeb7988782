//! Connections and posting: one reliable queue pair per peer, made on
//! first use and connected through a request and reply over the datagram
//! queue pair; the peer's backlog of what waits for credits, send buffers
//! or room in the send queue; and the posting of fragments, credit updates
//! and RDMA requests.
//!
//! A connection starts when this process first has something for the
//! peer, or when the peer's request arrives. Requests and replies carry
//! an HMAC under the job key; one without it is dropped. Both ends may start at once:
//! each keeps one queue pair per peer and connects it to the queue pair
//! named in whichever message of the other arrives first, so they agree
//! without choosing a side. A lost request is sent again with growing
//! delays; after [`MAX_CONNECT_TRIES`] the peer is failed.

#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::io;
use std::ptr;
use std::time::{Duration, Instant};

use fireopal_abi::btl::{MemRegion, Rank};
use fireopal_abi::host::LogLevel;
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::wire::verbs::{
    Connect, ConnectKind, FragmentHeader, FragmentKind, VerbsAddress, FRAGMENT_HEADER_LEN,
};

use crate::credit::Credits;
use crate::device::{Ah, Mr, Pd};
use crate::ffi::types::*;
use crate::module::{fail_item, fail_queued, write_fragment, Event, VerbsModule};
use crate::qp::{ah_attr, Qp};
use crate::signal::SendQueue;

/// Where a fragment's `credits` field lies, filled in when a queued
/// fragment is posted.
pub(crate) const CREDITS_AT: std::ops::Range<usize> = 8..10;
/// Connection requests sent before the peer is failed.
pub(crate) const MAX_CONNECT_TRIES: u32 = 10;
/// Delay before the first repeat of a request; doubled up to 6.4 s.
const CONNECT_RETRY: Duration = Duration::from_millis(200);

/// The state of a peer's connection.
#[derive(Debug)]
pub(crate) enum Conn {
    /// Nothing made yet.
    Idle,
    /// The queue pair is in INIT and a request went out.
    Connecting { since: Instant, tries: u32 },
    /// Ready to send, to the peer's queue pair `remote_qpn`.
    Connected { remote_qpn: u32 },
    /// Failed or removed: later calls fail with `error`.
    Failed { error: PluginError },
}

/// What an outstanding send request holds until its completion.
#[derive(Debug)]
pub(crate) enum Item {
    /// A fragment in a send buffer.
    Slot(u32),
    /// A fragment the device copied at posting.
    Inline,
    /// A credit update (in a send buffer, or inline).
    Credit(Option<u32>),
    /// A put or get; `reported` once its completion was given to the host.
    Rdma { cookie: u64, reported: bool },
    /// A zero-length write that makes earlier unsignalled requests report.
    Flush,
}

/// An RDMA request waiting to be posted, checked already.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RdmaWork {
    pub(crate) write: bool,
    pub(crate) local: u64,
    pub(crate) len: u32,
    pub(crate) lkey: u32,
    pub(crate) remote: u64,
    pub(crate) rkey: u32,
    pub(crate) cookie: u64,
}

/// Work waiting in a peer's backlog, in order.
#[derive(Debug)]
pub(crate) enum Queued {
    /// A whole fragment (its credits field is filled in when posted).
    Message { bytes: Vec<u8>, cookie: Option<u64> },
    /// A put or get.
    Rdma(RdmaWork),
}

/// One peer of a module.
#[derive(Debug)]
pub(crate) struct Peer {
    pub(crate) addr: VerbsAddress,
    pub(crate) conn: Conn,
    pub(crate) qp: Option<Qp>,
    pub(crate) ah: Option<Ah>,
    pub(crate) sq: SendQueue<Item>,
    pub(crate) credits: Credits,
    pub(crate) backlog: VecDeque<Queued>,
    /// Whether the rank is in the module's list of peers with work
    /// waiting.
    pub(crate) in_waiting: bool,
}

impl Peer {
    pub(crate) fn new(addr: VerbsAddress, granted: u16, depth: u32, interval: u32) -> Self {
        Self {
            credits: Credits::new(addr.credits, granted),
            addr,
            conn: Conn::Idle,
            qp: None,
            ah: None,
            sq: SendQueue::new(depth as usize, interval as usize),
            backlog: VecDeque::new(),
            in_waiting: false,
        }
    }

    fn connected(&self) -> bool {
        matches!(self.conn, Conn::Connected { .. })
    }

    /// Whether `progress` has something to post for the peer: a backlog,
    /// a credit update owed, or unsignalled sends to make report.
    pub(crate) fn has_work_waiting(&self) -> bool {
        !matches!(self.conn, Conn::Failed { .. })
            && (!self.backlog.is_empty()
                || self.credits.wants_update()
                || self.sq.unsignalled_tail())
    }
}

/// Registers `region` on `pd` with `flags`.
pub(crate) fn register(pd: &Pd, region: MemRegion, flags: i32) -> Result<Mr, PluginError> {
    // SAFETY: `MemRegion`'s contract keeps the memory allocated, and away
    // from conflicting use, until it is deregistered.
    unsafe { Mr::new(pd, region.as_ptr(), region.len(), flags) }.map_err(|e| {
        PluginError::new(
            ErrorKind::RESOURCE_EXHAUSTED,
            format!("ibv_reg_mr of {} bytes: {e}", region.len()),
        )
    })
}

/// The scatter entries and opcode of one send request.
struct Request<'a> {
    id: u64,
    signalled: bool,
    opcode: u32,
    sges: &'a mut [ibv_sge],
    inline: bool,
    remote: Option<(u64, u32)>,
}

/// Posts one request on a reliable queue pair.
///
/// # Safety
///
/// Every scatter entry names memory that stays valid and registered (with
/// the entry's key) until the request completes, or for the call when
/// inline; a remote address and key were checked against the peer's
/// remote key.
unsafe fn post(qp: &Qp, r: Request<'_>) -> io::Result<()> {
    let mut wr = ibv_send_wr::zeroed();
    wr.wr_id = r.id;
    wr.sg_list = if r.sges.is_empty() {
        ptr::null_mut()
    } else {
        r.sges.as_mut_ptr()
    };
    wr.num_sge = r.sges.len() as i32;
    wr.opcode = r.opcode;
    wr.send_flags = if r.signalled { IBV_SEND_SIGNALED } else { 0 }
        | if r.inline { IBV_SEND_INLINE } else { 0 };
    if let Some((remote_addr, rkey)) = r.remote {
        wr.wr = ibv_send_wr_wr {
            rdma: ibv_send_wr_rdma { remote_addr, rkey },
        };
    }
    // SAFETY: the caller's contract covers the lists and the memory.
    unsafe { qp.post_send(&mut wr) }
}

impl VerbsModule {
    /// Puts `rank` on the list `progress` visits if it has work waiting.
    pub(crate) fn mark_waiting(&mut self, rank: Rank) {
        if let Some(p) = self.peers.get_mut(&rank) {
            if !p.in_waiting && p.has_work_waiting() {
                p.in_waiting = true;
                self.waiting.push(rank);
            }
        }
    }

    /// Posts every receive buffer at the start.
    pub(crate) fn post_initial_receives(&mut self) -> Result<(), PluginError> {
        for slot in 0..self.recv.slots() {
            self.repost_recv(slot)?;
        }
        for slot in 0..self.ud_recv.slots() {
            self.repost_ud_recv(slot)?;
        }
        Ok(())
    }

    /// Gives a receive buffer back to the shared receive queue.
    pub(crate) fn repost_recv(&mut self, slot: u32) -> Result<(), PluginError> {
        let sge = self.recv.sge(slot, self.recv.slot_len());
        // SAFETY: the slot is in the registered pool and nothing reads it
        // until its next completion.
        unsafe { self.srq.post(u64::from(slot), sge) }
            .map_err(|e| PluginError::new(ErrorKind::IO, format!("posting a receive buffer: {e}")))
    }

    /// Gives a receive buffer back to the datagram queue pair.
    pub(crate) fn repost_ud_recv(&mut self, slot: u32) -> Result<(), PluginError> {
        let sge = self.ud_recv.sge(slot, self.ud_recv.slot_len());
        // SAFETY: as in `repost_recv`.
        unsafe { self.ud.post_recv(u64::from(slot), sge) }
            .map_err(|e| PluginError::new(ErrorKind::IO, format!("posting a datagram buffer: {e}")))
    }

    /// Starts the connection to `rank` if nothing has started it.
    pub(crate) fn ensure_connecting(&mut self, rank: Rank) {
        let sizes = self.qp_sizes();
        let Some(peer) = self.peers.get_mut(&rank) else {
            return;
        };
        if !matches!(peer.conn, Conn::Idle) {
            return;
        }
        match Qp::new_rc(&self.pd, &self.cq, &self.srq, self.port.port, sizes) {
            Ok(qp) => {
                self.max_inline = self.max_inline.min(qp.max_inline);
                self.by_qpn.insert(qp.qpn, rank);
                peer.qp = Some(qp);
                peer.conn = Conn::Connecting {
                    since: Instant::now(),
                    tries: 1,
                };
                self.connecting.push(rank);
                self.send_connect(rank, ConnectKind::Request);
            }
            Err(e) => {
                let error = PluginError::new(
                    ErrorKind::RESOURCE_EXHAUSTED,
                    format!("cannot make a queue pair for rank {rank}: {e}"),
                );
                self.fail_peer(rank, error, true);
            }
        }
    }

    /// Sends a connection message with this process's queue pair for
    /// `rank`. A message that cannot go now is repeated by the retry.
    pub(crate) fn send_connect(&mut self, rank: Rank, kind: ConnectKind) {
        let params = self.path_params();
        let local = self.local;
        let Some(peer) = self.peers.get_mut(&rank) else {
            return;
        };
        let Some(qpn) = peer.qp.as_ref().map(|q| q.qpn) else {
            return;
        };
        if peer.ah.is_none() {
            match Ah::new(&self.pd, &ah_attr(&local, &peer.addr, params)) {
                Ok(ah) => peer.ah = Some(ah),
                Err(e) => {
                    self.log(
                        LogLevel::Warn,
                        &format!("no address handle for rank {rank}: {e}"),
                    );
                    return;
                }
            }
        }
        let Some(ah) = peer.ah.as_ref().map(|a| a.raw) else {
            return;
        };
        let (remote_qpn, remote_qkey) = (peer.addr.cm_qpn, peer.addr.qkey);
        if !self.ud_sq.has_room() {
            return;
        }
        let Some(slot) = self.ud_send.take() else {
            return;
        };
        let msg = Connect {
            kind,
            src_rank: self.rank,
            dst_rank: rank,
            qpn,
        }
        .encode(&self.job_key);
        if let Some(dst) = self.ud_send.bytes_mut(slot).get_mut(..msg.len()) {
            dst.copy_from_slice(&msg);
        }
        let Ok(p) = self.ud_sq.post(slot, true) else {
            self.ud_send.give_back(slot);
            return;
        };
        let mut sge = self.ud_send.sge(slot, msg.len());
        let mut wr = ibv_send_wr::zeroed();
        wr.wr_id = p.id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr = ibv_send_wr_wr {
            ud: ibv_send_wr_ud {
                ah,
                remote_qpn,
                remote_qkey,
            },
        };
        // SAFETY: the slot is registered and held by `ud_sq` until the
        // completion; the address handle lives with the peer, which
        // outlives the module's polling of this request.
        if let Err(e) = unsafe { self.ud.post_send(&mut wr) } {
            self.ud_sq.unpost(p.id);
            self.ud_send.give_back(slot);
            self.log(
                LogLevel::Warn,
                &format!("connection message to rank {rank}: {e}"),
            );
        }
    }

    /// Handles a connection message from a peer.
    pub(crate) fn handle_connect(&mut self, msg: Connect) {
        if msg.dst_rank != self.rank {
            self.log(
                LogLevel::Debug,
                &format!("connection message for rank {} ignored", msg.dst_rank),
            );
            return;
        }
        let rank = msg.src_rank;
        let Some(peer) = self.peers.get(&rank) else {
            self.log(
                LogLevel::Debug,
                &format!("connection message from unknown rank {rank}"),
            );
            return;
        };
        match peer.conn {
            Conn::Failed { .. } => return,
            Conn::Connected { remote_qpn } => {
                if remote_qpn == msg.qpn && msg.kind == ConnectKind::Request {
                    self.send_connect(rank, ConnectKind::Reply);
                }
                return;
            }
            Conn::Idle => {
                self.ensure_connecting(rank);
            }
            Conn::Connecting { .. } => {}
        }
        let params = self.path_params();
        let local = self.local;
        let Some(peer) = self.peers.get_mut(&rank) else {
            return;
        };
        let Some(qp) = peer.qp.as_ref() else {
            return;
        };
        match qp.connect_rc(&local, &self.port, &peer.addr, msg.qpn, params) {
            Ok(()) => {
                peer.conn = Conn::Connected {
                    remote_qpn: msg.qpn,
                };
                self.log(
                    LogLevel::Debug,
                    &format!("connected to rank {rank} (queue pair {:#x})", msg.qpn),
                );
                if msg.kind == ConnectKind::Request {
                    self.send_connect(rank, ConnectKind::Reply);
                }
                self.pump(rank);
                self.mark_waiting(rank);
            }
            Err(e) => {
                let error = PluginError::new(
                    ErrorKind::PEER_FAILED,
                    format!("cannot connect to rank {rank}: {e}"),
                );
                self.fail_peer(rank, error, true);
            }
        }
    }

    /// Repeats connection requests that went unanswered, and fails peers
    /// that never answer.
    pub(crate) fn retry_connects(&mut self) {
        if self.connecting.is_empty() {
            return;
        }
        let peers = &self.peers;
        self.connecting.retain(|r| {
            peers
                .get(r)
                .is_some_and(|p| matches!(p.conn, Conn::Connecting { .. }))
        });
        let now = Instant::now();
        let due: Vec<(Rank, u32)> = self
            .connecting
            .iter()
            .filter_map(|&rank| match self.peers.get(&rank)?.conn {
                Conn::Connecting { since, tries }
                    if now.duration_since(since) >= CONNECT_RETRY * (1 << tries.min(5)) =>
                {
                    Some((rank, tries))
                }
                _ => None,
            })
            .collect();
        for (rank, tries) in due {
            if tries >= MAX_CONNECT_TRIES {
                let error = PluginError::new(
                    ErrorKind::TIMED_OUT,
                    format!("rank {rank} did not answer {tries} connection requests"),
                );
                self.fail_peer(rank, error, true);
                continue;
            }
            if let Some(p) = self.peers.get_mut(&rank) {
                p.conn = Conn::Connecting {
                    since: now,
                    tries: tries + 1,
                };
            }
            self.send_connect(rank, ConnectKind::Request);
        }
    }

    /// Posts a message now if nothing is queued before it and credits,
    /// room and (unless inline) a send buffer are there. All or nothing.
    pub(crate) fn try_post_now(
        &mut self,
        rank: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
    ) -> bool {
        let max_inline = self.max_inline as usize;
        let interval_low = self.send_pool_low();
        let Some(peer) = self.peers.get_mut(&rank) else {
            return false;
        };
        if !peer.connected() || !peer.backlog.is_empty() || !peer.sq.has_room() {
            return false;
        }
        let total = FRAGMENT_HEADER_LEN + header.len() + payload.len();
        let inline = total <= max_inline;
        if !inline && !self.send_pool.has_free() {
            return false;
        }
        if peer.credits.available() == 0 {
            return false;
        }
        // Taken from the counts only once the fragment is posted.
        let credits = peer.credits.owed().min(u32::from(u16::MAX)) as u16;
        let Some(qp) = peer.qp.as_ref() else {
            return false;
        };
        let result = if inline {
            let head = FragmentHeader {
                kind: FragmentKind::Message,
                tag,
                header_len: header.len() as u16,
                payload_len: payload.len() as u32,
                credits,
            }
            .encode();
            let Ok(p) = peer.sq.post(Item::Inline, false) else {
                return false;
            };
            let mut sges = [
                ibv_sge {
                    addr: head.as_ptr() as u64,
                    length: head.len() as u32,
                    lkey: 0,
                },
                ibv_sge {
                    addr: header.as_ptr() as u64,
                    length: header.len() as u32,
                    lkey: 0,
                },
                ibv_sge {
                    addr: payload.as_ptr() as u64,
                    length: payload.len() as u32,
                    lkey: 0,
                },
            ];
            let used = if payload.is_empty() { 2 } else { 3 };
            let r = Request {
                id: p.id,
                signalled: p.signalled,
                opcode: IBV_WR_SEND,
                sges: &mut sges[..used],
                inline: true,
                remote: None,
            };
            // SAFETY: an inline send reads its lists during the call only.
            unsafe { post(qp, r) }
        } else {
            let Some(slot) = self.send_pool.take() else {
                return false;
            };
            let len = write_fragment(
                self.send_pool.bytes_mut(slot),
                tag,
                header,
                payload,
                credits,
            );
            let Ok(p) = peer.sq.post(Item::Slot(slot), interval_low) else {
                self.send_pool.give_back(slot);
                return false;
            };
            let mut sges = [self.send_pool.sge(slot, len)];
            let r = Request {
                id: p.id,
                signalled: p.signalled,
                opcode: IBV_WR_SEND,
                sges: &mut sges,
                inline: false,
                remote: None,
            };
            // SAFETY: the slot is registered and held by the send queue
            // until its completion releases it.
            unsafe { post(qp, r) }
        };
        if let Err(e) = result {
            let error = PluginError::new(ErrorKind::IO, format!("posting to rank {rank}: {e}"));
            self.fail_peer(rank, error, true);
            return false;
        }
        if let Some(peer) = self.peers.get_mut(&rank) {
            peer.credits.try_take();
            peer.credits.piggyback();
        }
        self.mark_waiting(rank);
        true
    }

    /// Whether send buffers are running short: every send then asks for a
    /// completion, so buffers come back without waiting for later sends.
    fn send_pool_low(&self) -> bool {
        self.send_pool.free() < self.send_pool.slots() as usize / 4
    }

    /// Posts what waits in `rank`'s backlog, in order, as far as credits,
    /// room and buffers allow.
    pub(crate) fn pump(&mut self, rank: Rank) {
        loop {
            let low = self.send_pool_low();
            let Some(peer) = self.peers.get_mut(&rank) else {
                return;
            };
            if !peer.connected() || !peer.sq.has_room() {
                return;
            }
            let queued = peer.backlog.len();
            let Some(front) = peer.backlog.front_mut() else {
                return;
            };
            let result = match front {
                Queued::Message { bytes, cookie } => {
                    if !self.send_pool.has_free() || peer.credits.available() == 0 {
                        return;
                    }
                    let Some(slot) = self.send_pool.take() else {
                        return;
                    };
                    let credits = peer.credits.owed().min(u32::from(u16::MAX)) as u16;
                    if let Some(c) = bytes.get_mut(CREDITS_AT) {
                        c.copy_from_slice(&credits.to_le_bytes());
                    }
                    let len = bytes.len();
                    if let Some(dst) = self.send_pool.bytes_mut(slot).get_mut(..len) {
                        dst.copy_from_slice(bytes);
                    }
                    let cookie = *cookie;
                    let signal = low || queued == 1;
                    let Ok(p) = peer.sq.post(Item::Slot(slot), signal) else {
                        self.send_pool.give_back(slot);
                        return;
                    };
                    let mut sges = [self.send_pool.sge(slot, len)];
                    let r = Request {
                        id: p.id,
                        signalled: p.signalled,
                        opcode: IBV_WR_SEND,
                        sges: &mut sges,
                        inline: false,
                        remote: None,
                    };
                    let Some(qp) = peer.qp.as_ref() else { return };
                    // SAFETY: the slot is registered and held by the send
                    // queue until its completion releases it.
                    let posted = unsafe { post(qp, r) };
                    if posted.is_ok() {
                        peer.credits.try_take();
                        peer.credits.piggyback();
                        if let Some(c) = cookie {
                            self.events.push_back(Event::Send(c, Ok(())));
                        }
                    }
                    posted
                }
                Queued::Rdma(w) => {
                    let w = *w;
                    let Ok(p) = peer.sq.post(
                        Item::Rdma {
                            cookie: w.cookie,
                            reported: false,
                        },
                        true,
                    ) else {
                        return;
                    };
                    let mut sges = [ibv_sge {
                        addr: w.local,
                        length: w.len,
                        lkey: w.lkey,
                    }];
                    let r = Request {
                        id: p.id,
                        signalled: true,
                        opcode: if w.write {
                            IBV_WR_RDMA_WRITE
                        } else {
                            IBV_WR_RDMA_READ
                        },
                        sges: &mut sges,
                        inline: false,
                        remote: Some((w.remote, w.rkey)),
                    };
                    let Some(qp) = peer.qp.as_ref() else { return };
                    // SAFETY: the local range lies in a live registration
                    // with this key (checked in `rdma`), the caller keeps
                    // it until the completion (`MemRegion`), and the remote
                    // range was checked against the peer's key.
                    unsafe { post(qp, r) }
                }
            };
            peer.backlog.pop_front();
            if let Err(e) = result {
                let error = PluginError::new(ErrorKind::IO, format!("posting to rank {rank}: {e}"));
                self.fail_peer(rank, error, true);
                return;
            }
        }
    }

    /// Sends a credit update to `rank` if it is owed one and it can go.
    pub(crate) fn post_credit_update(&mut self, rank: Rank) {
        let inline = self.max_inline as usize >= FRAGMENT_HEADER_LEN;
        let Some(peer) = self.peers.get_mut(&rank) else {
            return;
        };
        if !peer.connected() || !peer.credits.wants_update() || !peer.sq.has_room() {
            return;
        }
        let slot = if inline {
            None
        } else {
            match self.send_pool.take() {
                Some(s) => Some(s),
                None => return,
            }
        };
        let head = FragmentHeader {
            kind: FragmentKind::Credit,
            tag: 0,
            header_len: 0,
            payload_len: 0,
            credits: peer.credits.start_update(),
        }
        .encode();
        let Ok(p) = peer.sq.post(Item::Credit(slot), true) else {
            if let Some(s) = slot {
                self.send_pool.give_back(s);
            }
            return;
        };
        let mut sges = [match slot {
            Some(s) => {
                if let Some(dst) = self.send_pool.bytes_mut(s).get_mut(..head.len()) {
                    dst.copy_from_slice(&head);
                }
                self.send_pool.sge(s, head.len())
            }
            None => ibv_sge {
                addr: head.as_ptr() as u64,
                length: head.len() as u32,
                lkey: 0,
            },
        }];
        let r = Request {
            id: p.id,
            signalled: true,
            opcode: IBV_WR_SEND,
            sges: &mut sges,
            inline,
            remote: None,
        };
        let Some(qp) = peer.qp.as_ref() else { return };
        // SAFETY: inline, the header is read during the call; otherwise
        // the slot is held by the send queue until the completion.
        if let Err(e) = unsafe { post(qp, r) } {
            let error = PluginError::new(ErrorKind::IO, format!("posting to rank {rank}: {e}"));
            self.fail_peer(rank, error, true);
        }
    }

    /// Makes unsignalled sends of `rank` report, with a signalled write
    /// of no bytes, when send buffers run short and nothing else follows.
    pub(crate) fn post_flush(&mut self, rank: Rank) {
        if !self.send_pool_low() {
            return;
        }
        let Some(peer) = self.peers.get_mut(&rank) else {
            return;
        };
        if !peer.connected() || !peer.sq.unsignalled_tail() || !peer.sq.has_room() {
            return;
        }
        let Ok(p) = peer.sq.post(Item::Flush, true) else {
            return;
        };
        let r = Request {
            id: p.id,
            signalled: true,
            opcode: IBV_WR_RDMA_WRITE,
            sges: &mut [],
            inline: false,
            remote: Some((0, 0)),
        };
        let Some(qp) = peer.qp.as_ref() else { return };
        // SAFETY: a write of no bytes touches no memory on either side.
        if let Err(e) = unsafe { post(qp, r) } {
            let error = PluginError::new(ErrorKind::IO, format!("posting to rank {rank}: {e}"));
            self.fail_peer(rank, error, true);
        }
    }

    /// Fails `rank`: its queue pair is moved to the error state (the
    /// device flushes what is posted), everything queued and every RDMA
    /// request outstanding completes with `error`, and later calls fail.
    /// `report` says whether the host hears `peer_failed`.
    pub(crate) fn fail_peer(&mut self, rank: Rank, error: PluginError, report: bool) {
        let Some(peer) = self.peers.get_mut(&rank) else {
            return;
        };
        if matches!(peer.conn, Conn::Failed { .. }) {
            return;
        }
        if let Some(qp) = &peer.qp {
            if let Err(e) = qp.to_error() {
                self.host
                    .log(LogLevel::Debug, &format!("verbs: rank {rank}: {e}"));
            }
        }
        for item in peer.backlog.drain(..) {
            fail_queued(item, &error, &mut self.events);
        }
        for item in peer.sq.items_mut() {
            fail_item(item, &error, &mut self.events);
        }
        if report {
            self.events
                .push_back(Event::PeerFailed(rank, error.clone()));
        }
        peer.conn = Conn::Failed { error };
    }
}
