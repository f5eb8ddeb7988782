//! Sending: the per-peer queues, direct writes in pieces, and when
//! queued bytes are written.
//!
//! Each peer has a queue of unsent bytes. A message goes straight to the
//! socket with one gathered `sendmsg` (frame header, message header,
//! padding, payload) when the connection is up and nothing is queued;
//! otherwise, or for what the socket did not take, the bytes are copied
//! into the queue, which `progress` drains when epoll reports the socket
//! writable, in pieces of `btl_tcp_write_chunk` bytes while more than one
//! frame waits on a connection under BBR (whole under other congestion
//! control; see `config::DEFAULT_WRITE_CHUNK`).
//!
//! - **Bursts.** A small message (header and payload up to 16 KiB) that
//!   the caller sends to a peer after a `sendi` wrote one to it, with no
//!   `progress` call between them, is held back: it waits in the queue
//!   for the next `progress` and leaves with the rest of its burst in one
//!   `sendmsg`. A window of small sends to a peer then costs two system
//!   calls, not one per message. The first message of a burst (so one
//!   message to each of several peers), and messages sent from within
//!   `progress` (a handler's answer), are written at once
//!   (`btl_tcp_sendi_batch` off: every message is).
//! - `sendi` answers `Busy` (sending nothing) when the message is larger
//!   than the eager limit, the connection is not up yet (it is started),
//!   bytes are queued, the message is held back for a burst (`send`
//!   queues it, and completes it once written), or the socket takes
//!   nothing. If the socket takes only part of the message, the module
//!   keeps the rest and answers `Sent`: the receiver still gets the whole
//!   message, in order, and since the peer now has queued bytes,
//!   following `sendi`s answer `Busy` until the queue drains.
//! - `send` first writes what is queued if the socket takes it, then
//!   answers `Done` when the socket took the whole message now;
//!   otherwise it copies what is left, answers `Pending`, and reports
//!   `send_complete` once when the last byte is handed to the kernel (or
//!   with an error if the peer fails first).
//! - `send_in_place` does the same without the copy: the queue borrows
//!   what is left of the payload where it is (valid and unchanged until
//!   the completion, by `MemRegion`'s contract).
//! - `put` sends the local bytes straight from the caller's memory (valid
//!   until completion, so never copied) in chunks of at most
//!   `btl_tcp_max_send_size`; the target checks the key and range of each
//!   chunk, writes it in place and acknowledges it; the operation completes
//!   when every chunk is acknowledged, with the first error if any.
//!   `get` sends a request; the target checks it and answers with the
//!   bytes, which are read straight into the caller's buffer.

use std::io;

use fireopal_abi::btl::Rank;
use fireopal_abi::PluginError;
use fireopal_core::wire::tcp::frame::PAYLOAD_ALIGN;

use crate::align::piece_limit;
use crate::conn::ConnId;
use crate::module::{Notice, PeerState, TcpModule};
use crate::queue::{Done, OutItem};
use crate::sys::{Gather, Socket, MAX_IOV};

/// RDMA operations of at least this many bytes are written at once even
/// while others are in flight (see `rdma_write_when`).
const LARGE_RDMA: usize = 64 << 10;

/// When a queued item is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteWhen {
    /// At once, as much as the socket takes.
    Now,
    /// At the start of the next `progress` (no system call until then).
    NextProgress,
    /// When epoll reports the socket writable (it was full).
    Writable,
}

/// Padding bytes, sliced to a frame's `pad`.
pub(crate) const ZEROS: [u8; PAYLOAD_ALIGN] = [0; PAYLOAD_ALIGN];

/// Gathers what is left of `parts` after the first `skip` bytes.
pub(crate) fn gather_from<'a, const N: usize>(
    g: &mut Gather<'a, N>,
    parts: &[&'a [u8]],
    mut skip: usize,
) {
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
/// The callers write a lone frame with `chunk` 0: one `sendmsg` while
/// the socket takes everything.
pub(crate) fn write_pieces(
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
pub(crate) fn remainder(parts: &[&[u8]], mut skip: usize) -> Vec<u8> {
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

impl TcpModule {
    /// Queues `item` for `rank` (starting the connection if needed), to
    /// be written `when` says. Once the connection check passed the item
    /// is always queued, so an error here means the item was not taken.
    pub(crate) fn enqueue(
        &mut self,
        rank: Rank,
        item: OutItem,
        when: WriteWhen,
    ) -> Result<(), PluginError> {
        self.enqueue_rest(rank, item, 0, when)
    }

    /// [`Self::enqueue`] for what is left of a frame whose first `written`
    /// bytes were written directly.
    pub(crate) fn enqueue_rest(
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
    pub(crate) fn rdma_write_when(&self, len: usize) -> WriteWhen {
        if self.ops.len() <= 1 || len >= self.settings.write_chunk.min(LARGE_RDMA) {
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
            // Pieces only while more frames wait, and only where the
            // connection asks for them (BBR): each piece is pushed at once
            // and the acknowledgements are taken between pieces. A lone
            // frame is pushed at its end anyway and goes whole.
            let limit = if peer.queue.len() > 1 {
                piece_limit(peer.queue.front_position(), conn.write_chunk)
            } else {
                0
            };
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
