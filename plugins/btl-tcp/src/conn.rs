//! Connections: their handshake phase, receive state, and the slab that
//! names them by epoll token.

use std::net::SocketAddr;
use std::time::Instant;

use fireopal_abi::btl::{MemRegion, Rank};
use fireopal_abi::PluginError;
use fireopal_core::wire::tcp::frame::{FrameHeader, RdmaStatus};
use fireopal_core::wire::tcp::handshake::{Hello, Transcript, NONCE_LEN};

use crate::align::AlignedBuf;
use crate::sys::Socket;

/// Where a connection is in its life.
#[derive(Debug)]
pub(crate) enum Phase {
    /// Connector: the non-blocking connect has not finished.
    Connecting,
    /// Connector: Hello sent, waiting for the acceptor's Challenge.
    AwaitChallenge { hello: Hello },
    /// Connector: Proof sent, waiting for the Verdict.
    AwaitVerdict,
    /// Acceptor: waiting for a Hello.
    AwaitHello,
    /// Acceptor: Challenge sent, waiting for the connector's Proof.
    AwaitProof { transcript: Transcript },
    /// Authenticated; frames flow.
    Established,
}

impl Phase {
    /// Whether this side accepted the connection.
    pub(crate) fn accepted(&self) -> bool {
        matches!(self, Self::AwaitHello | Self::AwaitProof { .. })
    }
}

/// Where the payload of a large frame goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dest {
    /// The connection's reusable buffer, for an active message.
    Big,
    /// Host memory: a put's target range, or a get's local buffer.
    Memory {
        region: MemRegion,
        offset: usize,
        /// Registration the range lies in (target of a put).
        registration: Option<u64>,
    },
    /// Nowhere: the frame is refused but the stream stays in step.
    Discard,
}

/// What to do once a large frame's payload is in.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Finish {
    /// Deliver the active message.
    Deliver,
    /// Acknowledge a put with this status.
    PutAck { op_id: u64, status: RdmaStatus },
    /// Account a chunk of a get's answer (at `offset` in its range).
    GetChunk { op_id: u64, offset: u64 },
}

/// A frame too large for the staging buffer, read straight into place.
#[derive(Debug)]
pub(crate) struct Large {
    pub(crate) header: FrameHeader,
    /// The kind-specific header (at most `MAX_HEADER` bytes).
    pub(crate) head: Vec<u8>,
    pub(crate) dest: Dest,
    pub(crate) finish: Finish,
    /// Payload bytes received so far.
    pub(crate) filled: usize,
}

impl Large {
    pub(crate) fn payload_len(&self) -> usize {
        // Bounded by the frame limits, which fit in usize.
        usize::try_from(self.header.payload_len).unwrap_or(usize::MAX)
    }
}

/// Receive state of an established connection.
#[derive(Debug)]
pub(crate) struct Rx {
    /// Bytes read ahead; `stage[start..end]` is not parsed yet.
    pub(crate) stage: AlignedBuf,
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) large: Option<Large>,
    /// Buffer of the large active message being read (from the module's
    /// pool, returned after delivery).
    pub(crate) big: AlignedBuf,
}

impl Rx {
    pub(crate) fn new(staging: usize) -> Self {
        Self {
            stage: AlignedBuf::zeroed(staging),
            start: 0,
            end: 0,
            large: None,
            big: AlignedBuf::default(),
        }
    }
}

/// One TCP connection.
#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) sock: Socket,
    pub(crate) phase: Phase,
    /// The peer: known from the start when we connect, claimed by the
    /// Hello (and proved by the Proof) when we accept.
    pub(crate) peer: Option<Rank>,
    /// Remote address, for log lines.
    pub(crate) remote: Option<SocketAddr>,
    /// When the handshake must be over.
    pub(crate) deadline: Option<Instant>,
    /// Handshake bytes received so far for the message expected now.
    pub(crate) hs_buf: [u8; 80],
    pub(crate) hs_have: usize,
    /// Our nonce in this handshake.
    pub(crate) nonce: [u8; NONCE_LEN],
    /// Receive state, once established.
    pub(crate) rx: Option<Box<Rx>>,
    /// Whether epoll watches for writability.
    pub(crate) want_write: bool,
    /// When the acknowledgement check first found the peer's machine not
    /// answering (`None`: it answered at the last check).
    pub(crate) stalled_since: Option<Instant>,
    /// A write failed because the peer closed or reset the connection:
    /// the peer's sends are failed, and what it sent before is still read;
    /// the failure is reported with this error once reading ends.
    pub(crate) draining: Option<PluginError>,
    /// Most bytes per `sendmsg` while frames queue behind each other, set
    /// when the connection is established (see
    /// [`Settings::write_chunk_under`](crate::config::Settings::write_chunk_under)).
    pub(crate) write_chunk: usize,
}

impl Conn {
    pub(crate) fn new(sock: Socket, phase: Phase, peer: Option<Rank>, deadline: Instant) -> Self {
        Self {
            sock,
            phase,
            peer,
            remote: None,
            deadline: Some(deadline),
            hs_buf: [0; 80],
            hs_have: 0,
            nonce: [0; NONCE_LEN],
            rx: None,
            want_write: false,
            write_chunk: usize::MAX,
            stalled_since: None,
            draining: None,
        }
    }

    /// Text naming the other end, for log lines.
    pub(crate) fn describe(&self) -> String {
        let addr = self
            .remote
            .map_or_else(|| "unknown address".to_owned(), |a| a.to_string());
        match self.peer {
            // Claimed in a Hello, not proved: name the address first.
            Some(r) if self.phase.accepted() => format!("{addr} (claiming rank {r})"),
            Some(r) => format!("rank {r} ({addr})"),
            None => addr,
        }
    }
}

/// Identity of a connection: slot and generation, so a token of a closed
/// connection never reaches the one that reused its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ConnId {
    index: u32,
    generation: u32,
}

/// Token of the listening socket.
pub(crate) const LISTENER_TOKEN: u64 = u64::MAX;

impl ConnId {
    pub(crate) fn token(self) -> u64 {
        u64::from(self.generation) << 32 | u64::from(self.index)
    }

    pub(crate) fn from_token(token: u64) -> Self {
        Self {
            index: token as u32,
            generation: (token >> 32) as u32,
        }
    }
}

#[derive(Debug)]
struct Slot {
    generation: u32,
    /// `None` while free, or while taken out for processing.
    conn: Option<Conn>,
    live: bool,
}

/// Connections by id.
#[derive(Debug, Default)]
pub(crate) struct Slab {
    slots: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
}

impl Slab {
    pub(crate) fn insert(&mut self, conn: Conn) -> ConnId {
        self.live += 1;
        if let Some(index) = self.free.pop() {
            if let Some(slot) = self.slots.get_mut(index as usize) {
                slot.conn = Some(conn);
                slot.live = true;
                return ConnId {
                    index,
                    generation: slot.generation,
                };
            }
        }
        let index = self.slots.len() as u32;
        self.slots.push(Slot {
            generation: 0,
            conn: Some(conn),
            live: true,
        });
        ConnId {
            index,
            generation: 0,
        }
    }

    fn slot(&self, id: ConnId) -> Option<&Slot> {
        self.slots
            .get(id.index as usize)
            .filter(|s| s.live && s.generation == id.generation)
    }

    fn slot_mut(&mut self, id: ConnId) -> Option<&mut Slot> {
        self.slots
            .get_mut(id.index as usize)
            .filter(|s| s.live && s.generation == id.generation)
    }

    pub(crate) fn get(&self, id: ConnId) -> Option<&Conn> {
        self.slot(id)?.conn.as_ref()
    }

    pub(crate) fn get_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        self.slot_mut(id)?.conn.as_mut()
    }

    /// Takes the connection out for processing; the id stays reserved
    /// until [`Slab::put_back`] or [`Slab::remove`].
    pub(crate) fn take(&mut self, id: ConnId) -> Option<Conn> {
        self.slot_mut(id)?.conn.take()
    }

    /// Returns a taken connection; if it was removed meanwhile, it is
    /// dropped (closed) instead.
    pub(crate) fn put_back(&mut self, id: ConnId, conn: Conn) {
        if let Some(slot) = self.slot_mut(id) {
            slot.conn = Some(conn);
        }
    }

    /// Frees the id; returns the connection unless it is taken out.
    pub(crate) fn remove(&mut self, id: ConnId) -> Option<Conn> {
        let slot = self.slot_mut(id)?;
        slot.live = false;
        slot.generation = slot.generation.wrapping_add(1);
        let conn = slot.conn.take();
        self.free.push(id.index);
        self.live -= 1;
        conn
    }

    /// Ids of every live connection.
    pub(crate) fn ids(&self) -> Vec<ConnId> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.live)
            .map(|(i, s)| ConnId {
                index: i as u32,
                generation: s.generation,
            })
            .collect()
    }

    /// Live connections.
    pub(crate) fn len(&self) -> usize {
        self.live
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::BufferSizes;

    fn conn() -> Conn {
        let sock = Socket::listen(
            "127.0.0.1:0".parse().unwrap(),
            BufferSizes { send: 0, recv: 0 },
        )
        .unwrap();
        Conn::new(sock, Phase::AwaitHello, None, Instant::now())
    }

    #[test]
    fn stale_ids_never_reach_a_reused_slot() {
        let mut slab = Slab::default();
        let a = slab.insert(conn());
        assert_eq!(ConnId::from_token(a.token()), a);
        assert!(slab.remove(a).is_some());
        let b = slab.insert(conn());
        assert_ne!(a, b);
        assert!(slab.get(a).is_none());
        assert!(slab.get(b).is_some());
        assert_eq!(slab.len(), 1);
        assert_eq!(slab.ids(), [b]);
    }

    #[test]
    fn a_connection_removed_while_taken_is_not_put_back() {
        let mut slab = Slab::default();
        let a = slab.insert(conn());
        let c = slab.take(a).unwrap();
        assert!(slab.get(a).is_none());
        assert!(slab.remove(a).is_none(), "taken: nothing to return");
        slab.put_back(a, c);
        assert!(slab.get(a).is_none());
        assert_eq!(slab.len(), 0);
        let b = slab.insert(conn());
        let c = slab.take(b).unwrap();
        slab.put_back(b, c);
        assert!(slab.get_mut(b).is_some());
    }
}
