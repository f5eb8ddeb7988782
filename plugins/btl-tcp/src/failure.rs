//! Failure: a peer whose connection broke, handshakes past their
//! deadline, and machines that stopped acknowledging.
//!
//! A connection that closes, resets, or sends a frame that fails its
//! checks makes the peer failed: `peer_failed` is reported once, every
//! queued `send` and every `put`/`get` in flight to it completes with an
//! error (each once), and later calls for it fail at once. When a write
//! finds the peer gone (it closed or reset the connection), what it sent
//! before is still read and delivered, and `peer_failed` follows once
//! the connection has no more to read. Connections
//! that never authenticated are dropped and logged without touching any
//! peer.

use std::io;
use std::time::{Duration, Instant};

use fireopal_abi::btl::{EventSink, Rank};
use fireopal_abi::host::LogLevel;
use fireopal_abi::{ErrorKind, PluginError};

use crate::conn::{ConnId, Phase};
use crate::module::{Notice, PeerState, TcpModule};

/// How often handshake deadlines are checked, at most.
pub(crate) fn sweep_interval(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_millis(1), Duration::from_millis(250))
}

/// How often connections' acknowledgements are checked: a few times per
/// timeout, and at most once a second (one `getsockopt` per connection).
pub(crate) fn ack_check_interval(timeout: Duration) -> Duration {
    (timeout / 8).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

/// The kind of peer failure a connection that broke with `e` reports: the
/// kernel gives up on an unanswered connection (keepalive, retransmission)
/// with `ETIMEDOUT`; anything else reset or broke it. (A peer's orderly
/// close is `CONNECTION_CLOSED`, seen as the end of its stream.)
pub(crate) fn broken_connection_kind(e: &io::Error) -> ErrorKind {
    if e.kind() == io::ErrorKind::TimedOut {
        ErrorKind::TIMED_OUT
    } else {
        ErrorKind::CONNECTION_RESET
    }
}

impl TcpModule {
    /// The peer's connection broke with `e`: fails it.
    pub(crate) fn lost(&mut self, rank: Rank, e: &io::Error) -> PluginError {
        let err = PluginError::new(
            broken_connection_kind(e),
            format!("connection to rank {rank} lost: {e}"),
        );
        let peer_gone = matches!(
            e.kind(),
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
        );
        match self.peers.get(&rank).map(|p| &p.state) {
            Some(&PeerState::Established(id)) if peer_gone => {
                self.drain_then_fail(rank, id, err.clone())
            }
            _ => self.fail_peer(rank, err.clone()),
        }
        err
    }

    /// A write to `rank` on connection `id` found the peer gone: its sends
    /// fail now, and the connection is read to its end before
    /// `peer_failed` is reported (see the module docs).
    fn drain_then_fail(&mut self, rank: Rank, id: ConnId, error: PluginError) {
        let Some(conn) = self.conns.get_mut(id) else {
            return self.fail_peer(rank, error);
        };
        conn.draining = Some(error.clone());
        self.watch_writes(id, false);
        self.fail_pending(rank, &error);
    }

    /// Reports `rank` failed after its draining connection `id` ended.
    pub(crate) fn drained(&mut self, rank: Rank, id: ConnId, error: PluginError) {
        self.close_conn(id);
        self.notices
            .push_back(Notice::PeerFailed(rank, error.clone()));
        self.log(
            LogLevel::Warn,
            &format!("rank {rank} lost on this link: {error}"),
        );
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
        if let Some(PeerState::Connecting(id) | PeerState::Established(id)) =
            self.fail_pending(rank, &error)
        {
            self.close_conn(id);
        }
        self.notices
            .push_back(Notice::PeerFailed(rank, error.clone()));
        self.log(
            LogLevel::Warn,
            &format!("rank {rank} lost on this link: {error}"),
        );
    }

    /// Marks `rank` failed with `error` and fails its queued sends and
    /// RDMA operations; returns the state it was in (`None` if it was
    /// failed already or is unknown).
    fn fail_pending(&mut self, rank: Rank, error: &PluginError) -> Option<PeerState> {
        let peer = self.peers.get_mut(&rank)?;
        if matches!(peer.state, PeerState::Failed(_)) {
            return None;
        }
        let old = std::mem::replace(&mut peer.state, PeerState::Failed(error.clone()));
        let cookies = peer.queue.clear();
        for cookie in cookies {
            self.notices
                .push_back(Notice::SendDone(cookie, Err(error.clone())));
        }
        for cookie in self.ops.drain_peer(rank) {
            self.notices
                .push_back(Notice::RdmaDone(cookie, Err(error.clone())));
        }
        Some(old)
    }

    /// Reports the events found outside of `sink`'s reach.
    pub(crate) fn drain_notices(&mut self, sink: &mut dyn EventSink) -> usize {
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
    pub(crate) fn sweep(&mut self, now: Instant) {
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
                            ErrorKind::TIMED_OUT,
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
                    ErrorKind::TIMED_OUT,
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
    pub(crate) fn check_acks(&mut self, now: Instant, timeout: Duration) {
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
                    ErrorKind::TIMED_OUT,
                    format!(
                        "rank {rank}'s machine acknowledged nothing for {ms} ms with data in flight \
                         (machine down or network cut; limit btl_tcp_ack_timeout_ms)"
                    ),
                ),
            );
        }
    }
}
