//! The point-to-point protocol's messages: what a sender and a receiver of
//! tagged messages tell each other, carried as active-message headers.
//!
//! Every message starts with a kind byte. The ones that carry a user
//! message also carry its [`Envelope`] (context id, source rank in the
//! communicator, tag) and the sender's sequence number on that context,
//! from which the receiver restores the order the sender issued them in.
//!
//! - [`Eager`]: the whole user message follows as the payload;
//! - [`Rts`]: a rendezvous request; the receiver, once it has matched it,
//!   reads the data straight into the user's buffer with the transport's
//!   `get` (protocol [`RndvProtocol::Get`]) or asks for it with a [`Cts`]
//!   (protocol [`RndvProtocol::Pipeline`]);
//! - [`Cts`]: clear to send, naming the receive that takes the fragments;
//! - [`Data`]: one fragment of a pipelined message, at an offset;
//! - [`Fin`]: the receiver is done with a rendezvous (read, refused or
//!   failed), so the sender may complete its request;
//! - [`Credit`]: eager credits returned to a sender (flow control of the
//!   receiver's unexpected-message memory), when no eager message of the
//!   receiver's own carries them back.
//!
//! Layouts (little-endian, sizes in bytes): `Eager` 24 (`kind, flags,
//! 0u16, context u32, source u32, tag i32, seq u32, credits u32`); `Rts` 48 plus
//! the remote key (`kind, protocol, key_len u16, envelope 16, length u64,
//! sender request u64, address u64, 0u32, key`); `Cts` 24 (`kind, 0u8,
//! 0u16, 0u32, sender request u64, receiver request u64`); `Data` 24
//! (`kind, 0u8, 0u16, 0u32, receiver request u64, offset u64`); `Fin` 16
//! (`kind, status, 0u16, 0u32, sender request u64`); `Credit` 8 (`kind,
//! 0u8, 0u16, credits u32`). Reserved bytes must be zero.

use alloc::vec::Vec;
use core::fmt;

use crate::wire::codec::{fixed, Fields, Reader};

/// The longest remote key an [`Rts`] carries.
pub const MAX_KEY_LEN: usize = 256;

code_enum! {
    /// What a point-to-point message is.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Kind: u8 {
        /// [`Eager`].
        Eager = 1,
        /// [`Rts`].
        Rts = 2,
        /// [`Cts`].
        Cts = 3,
        /// [`Data`].
        Data = 4,
        /// [`Fin`].
        Fin = 5,
        /// [`Credit`].
        Credit = 6,
        /// [`Ack`].
        Ack = 7,
        /// [`PutDone`].
        PutDone = 8,
        /// [`Cancel`].
        Cancel = 9,
    }
}

code_enum! {
    /// How the receiver of an [`Rts`] fetches the data.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum RndvProtocol: u8 {
        /// The receiver reads the sender's registered buffer with `get`.
        Get = 1,
        /// The receiver answers with a [`Cts`] and the sender sends
        /// [`Data`] fragments.
        Pipeline = 2,
    }
}

code_enum! {
    /// How a rendezvous ended at the receiver.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum FinStatus: u8 {
        /// The data was read.
        Done = 1,
        /// The receiver could not read it (its `get` failed); the sender's
        /// request fails.
        Failed = 2,
        /// In a [`PutDone`]: the sender gave the send up (a blocking send
        /// that stalled returned its buffer) and wrote nothing.
        GivenUp = 3,
    }
}

/// Why bytes do not parse as a point-to-point message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// No kind byte.
    Empty,
    /// A kind this protocol does not have.
    UnknownKind(u8),
    /// Not the length the kind has.
    BadLength {
        /// The kind.
        kind: Kind,
        /// Bytes the message has.
        have: usize,
        /// Bytes it must have.
        want: usize,
    },
    /// A reserved byte is not zero.
    ReservedNotZero(Kind),
    /// An [`Rts`] names a protocol this build does not have.
    UnknownProtocol(u8),
    /// A [`Fin`] has a status this build does not have.
    UnknownStatus(u8),
    /// An [`Eager`] has flags this build does not know.
    UnknownFlags(u8),
    /// An [`Rts`] or [`Ack`] key is longer than [`MAX_KEY_LEN`].
    KeyTooLong(usize),
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("empty point-to-point message"),
            Self::UnknownKind(k) => write!(f, "unknown point-to-point message kind {k}"),
            Self::BadLength { kind, have, want } => {
                write!(f, "{kind:?} message of {have} bytes, not {want}")
            }
            Self::ReservedNotZero(kind) => write!(f, "reserved bytes of a {kind:?} are not zero"),
            Self::UnknownProtocol(p) => write!(f, "unknown rendezvous protocol {p}"),
            Self::UnknownStatus(s) => write!(f, "unknown rendezvous status {s}"),
            Self::UnknownFlags(x) => write!(f, "unknown eager flags {x:#x}"),
            Self::KeyTooLong(n) => write!(f, "remote key of {n} bytes, over {MAX_KEY_LEN}"),
        }
    }
}

impl core::error::Error for Malformed {}

/// Which message a user's message is, as matching sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Envelope {
    /// The communicator's context id.
    pub context: u32,
    /// The sender's rank in the communicator.
    pub source: u32,
    /// The user's tag.
    pub tag: i32,
    /// The sender's sequence number on this context towards this receiver.
    pub seq: u32,
}

impl Envelope {
    fn read(f: &mut Fields<'_, Malformed>) -> Result<Self, Malformed> {
        Ok(Self {
            context: f.u32()?,
            source: f.u32()?,
            tag: f.u32()? as i32,
            seq: f.u32()?,
        })
    }

    fn write(&self, w: &mut crate::wire::Writer<'_>) {
        w.u32(self.context);
        w.u32(self.source);
        w.u32(self.tag as u32);
        w.u32(self.seq);
    }
}

/// Flags of an [`Eager`] message.
pub mod eager_flags {
    /// The sender waits for the receive to match (`MPI_Ssend`): the
    /// receiver answers with a [`super::Fin`] naming `seq` as the request.
    pub const SYNC: u8 = 1;
    /// Every flag this build knows.
    pub const ALL: u8 = SYNC;
}

/// A whole user message; the payload is its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eager {
    /// Which message it is.
    pub envelope: Envelope,
    /// [`eager_flags`].
    pub flags: u8,
    /// Eager credits given back with this message: eager messages of the
    /// receiver's that its sender has consumed (as a [`Credit`] would
    /// return them, without a message of its own).
    pub credits: u32,
}

impl Eager {
    /// Bytes of the encoded header.
    pub const LEN: usize = 24;

    /// Parses an eager message's header; `None` when `bytes` is another
    /// kind of message or malformed ([`Message::decode`] says why). The
    /// receive path of every eager message starts here.
    ///
    /// ```
    /// use fireopal_core::wire::p2p::{Eager, Envelope};
    /// let envelope = Envelope { context: 2, source: 1, tag: 7, seq: 0 };
    /// let eager = Eager { envelope, flags: 0, credits: 3 };
    /// assert_eq!(Eager::decode(&eager.encode()), Some(eager));
    /// assert_eq!(Eager::decode(&eager.encode()[..20]), None);
    /// ```
    #[inline]
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let b: &[u8; Self::LEN] = bytes.try_into().ok()?;
        if b[0] != Kind::Eager as u8 {
            return None;
        }
        Self::read(b).ok()
    }

    /// Reads the fixed-size header whose kind byte was checked: every
    /// eager message of a stream passes here, so the fields are read at
    /// their constant offsets rather than through a cursor.
    #[inline]
    fn read(b: &[u8; Self::LEN]) -> Result<Self, Malformed> {
        let flags = b[1];
        if flags & !eager_flags::ALL != 0 {
            return Err(Malformed::UnknownFlags(flags));
        }
        let word = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        if b[2] != 0 || b[3] != 0 {
            return Err(Malformed::ReservedNotZero(Kind::Eager));
        }
        Ok(Eager {
            envelope: Envelope {
                context: word(4),
                source: word(8),
                tag: word(12) as i32,
                seq: word(16),
            },
            flags,
            credits: word(20),
        })
    }

    /// The header bytes, at the constant offsets the parser
    /// takes them from: every eager message is encoded here, inline in
    /// the sender's path.
    #[inline]
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = Kind::Eager as u8;
        b[1] = self.flags;
        let mut word = |at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        word(4, self.envelope.context);
        word(8, self.envelope.source);
        word(12, self.envelope.tag as u32);
        word(16, self.envelope.seq);
        word(20, self.credits);
        b
    }
}

/// A rendezvous request: the user message of `length` bytes waits at the
/// sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rts<'a> {
    /// Which message it is.
    pub envelope: Envelope,
    /// How the receiver fetches it.
    pub protocol: RndvProtocol,
    /// Bytes of the message.
    pub length: u64,
    /// The sender's request, named again in [`Cts`] and [`Fin`].
    pub sender_request: u64,
    /// Where the data is in the sender's memory (for [`RndvProtocol::Get`]).
    pub address: u64,
    /// The transport's remote key of that memory (empty for
    /// [`RndvProtocol::Pipeline`]).
    pub key: &'a [u8],
}

impl Rts<'_> {
    /// Bytes of the encoded header without the key.
    pub const BASE_LEN: usize = 48;

    /// The header bytes, or `None` if the key is over [`MAX_KEY_LEN`].
    pub fn encode(&self) -> Option<Vec<u8>> {
        let key_len = u16::try_from(self.key.len())
            .ok()
            .filter(|&n| usize::from(n) <= MAX_KEY_LEN)?;
        let base: [u8; Rts::<'static>::BASE_LEN] = fixed(|w| {
            w.u8(Kind::Rts as u8);
            w.u8(self.protocol as u8);
            w.u16(key_len);
            self.envelope.write(w);
            w.u64(self.length);
            w.u64(self.sender_request);
            w.u64(self.address);
            w.zeros(4);
        });
        let mut out = Vec::with_capacity(Self::BASE_LEN + self.key.len());
        out.extend_from_slice(&base);
        out.extend_from_slice(self.key);
        Some(out)
    }
}

/// Clear to send: the receiver matched an [`Rts`] of the pipeline protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cts {
    /// The sender's request, from the [`Rts`].
    pub sender_request: u64,
    /// The receive that takes the [`Data`] fragments.
    pub receiver_request: u64,
}

impl Cts {
    /// Bytes of the encoded message.
    pub const LEN: usize = 24;

    /// The message bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        fixed(|w| {
            w.u8(Kind::Cts as u8);
            w.zeros(7);
            w.u64(self.sender_request);
            w.u64(self.receiver_request);
        })
    }
}

/// One fragment of a pipelined message; the payload is its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Data {
    /// The receive it belongs to, from the [`Cts`].
    pub receiver_request: u64,
    /// Where in the message the payload starts.
    pub offset: u64,
}

impl Data {
    /// Bytes of the encoded header.
    pub const LEN: usize = 24;

    /// The header bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        fixed(|w| {
            w.u8(Kind::Data as u8);
            w.zeros(7);
            w.u64(self.receiver_request);
            w.u64(self.offset);
        })
    }
}

/// The receiver is done with a rendezvous or a synchronous eager send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fin {
    /// The sender's request.
    pub sender_request: u64,
    /// How it ended.
    pub status: FinStatus,
}

impl Fin {
    /// Bytes of the encoded message.
    pub const LEN: usize = 16;

    /// The message bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        fixed(|w| {
            w.u8(Kind::Fin as u8);
            w.u8(self.status as u8);
            w.zeros(6);
            w.u64(self.sender_request);
        })
    }
}

/// Eager credits a receiver returns to a sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Credit {
    /// How many eager messages the sender may send again.
    pub credits: u32,
}

impl Credit {
    /// Bytes of the encoded message.
    pub const LEN: usize = 8;

    /// The message bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        fixed(|w| {
            w.u8(Kind::Credit as u8);
            w.zeros(3);
            w.u32(self.credits);
        })
    }
}

/// The receiver of a [`RndvProtocol::Get`] rendezvous asks the sender to
/// write the tail of the message, from `offset` on, while it reads the
/// head itself: two processors copy one message at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack<'a> {
    /// The sender's request, from the [`Rts`].
    pub sender_request: u64,
    /// The receive, named again in [`PutDone`].
    pub receiver_request: u64,
    /// Where in the message the tail starts.
    pub offset: u64,
    /// Where the tail goes in the receiver's memory.
    pub address: u64,
    /// The transport's remote key of that memory.
    pub key: &'a [u8],
}

impl Ack<'_> {
    /// Bytes of the encoded header without the key.
    pub const BASE_LEN: usize = 40;

    /// The message bytes, or `None` if the key is over [`MAX_KEY_LEN`].
    pub fn encode(&self) -> Option<Vec<u8>> {
        let key_len = u16::try_from(self.key.len())
            .ok()
            .filter(|&n| usize::from(n) <= MAX_KEY_LEN)?;
        let base: [u8; Ack::<'static>::BASE_LEN] = fixed(|w| {
            w.u8(Kind::Ack as u8);
            w.zeros(1);
            w.u16(key_len);
            w.zeros(4);
            w.u64(self.sender_request);
            w.u64(self.receiver_request);
            w.u64(self.offset);
            w.u64(self.address);
        });
        let mut out = Vec::with_capacity(Self::BASE_LEN + self.key.len());
        out.extend_from_slice(&base);
        out.extend_from_slice(self.key);
        Some(out)
    }
}

/// The sender wrote the tail an [`Ack`] asked for (or could not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutDone {
    /// The receive, from the [`Ack`].
    pub receiver_request: u64,
    /// How the write ended.
    pub status: FinStatus,
}

impl PutDone {
    /// Bytes of the encoded message.
    pub const LEN: usize = 16;

    /// The message bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        fixed(|w| {
            w.u8(Kind::PutDone as u8);
            w.u8(self.status as u8);
            w.zeros(6);
            w.u64(self.receiver_request);
        })
    }
}

/// The sender of a rendezvous gave it up before the receiver asked for
/// its data (a blocking send that stalled returned, and its buffer went
/// back to its owner): the [`Cts`] that asked gets no [`Data`], and the
/// receive fails instead of waiting for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancel {
    /// The receive, from the [`Cts`].
    pub receiver_request: u64,
}

impl Cancel {
    /// Bytes of the encoded message.
    pub const LEN: usize = 16;

    /// The message bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        fixed(|w| {
            w.u8(Kind::Cancel as u8);
            w.zeros(7);
            w.u64(self.receiver_request);
        })
    }
}

/// The length of a key announced at bytes 2..4 of a message of `kind`,
/// checked against [`MAX_KEY_LEN`].
fn key_len(bytes: &[u8], kind: Kind, base: usize) -> Result<usize, Malformed> {
    let key_len = bytes
        .get(2..4)
        .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])))
        .ok_or(Malformed::BadLength {
            kind,
            have: bytes.len(),
            want: base,
        })?;
    if key_len > MAX_KEY_LEN {
        return Err(Malformed::KeyTooLong(key_len));
    }
    Ok(key_len)
}

/// A parsed point-to-point message, borrowing the bytes it came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    /// [`Eager`].
    Eager(Eager),
    /// [`Rts`].
    Rts(Rts<'a>),
    /// [`Cts`].
    Cts(Cts),
    /// [`Data`].
    Data(Data),
    /// [`Fin`].
    Fin(Fin),
    /// [`Credit`].
    Credit(Credit),
    /// [`Ack`].
    Ack(Ack<'a>),
    /// [`PutDone`].
    PutDone(PutDone),
    /// [`Cancel`].
    Cancel(Cancel),
}

/// The fields of `bytes`, which must be exactly `want` long for `kind`.
fn exact(bytes: &[u8], kind: Kind, want: usize) -> Result<Fields<'_, Malformed>, Malformed> {
    if bytes.len() != want {
        return Err(Malformed::BadLength {
            kind,
            have: bytes.len(),
            want,
        });
    }
    let short = Malformed::BadLength {
        kind,
        have: bytes.len(),
        want,
    };
    Ok(Fields::new(Reader::new(bytes), short))
}

impl<'a> Message<'a> {
    /// Parses a message a peer sent; nothing in `bytes` is trusted.
    ///
    /// ```
    /// use fireopal_core::wire::p2p::{Envelope, Fin, FinStatus, Message};
    /// let fin = Fin { sender_request: 7, status: FinStatus::Done };
    /// assert_eq!(Message::decode(&fin.encode()), Ok(Message::Fin(fin)));
    /// assert!(Message::decode(&fin.encode()[..15]).is_err());
    /// ```
    pub fn decode(bytes: &'a [u8]) -> Result<Self, Malformed> {
        let code = *bytes.first().ok_or(Malformed::Empty)?;
        let kind = Kind::from_code(code).ok_or(Malformed::UnknownKind(code))?;
        let zero = Malformed::ReservedNotZero(kind);
        match kind {
            Kind::Eager => {
                let b: &[u8; Eager::LEN] = bytes.try_into().map_err(|_| Malformed::BadLength {
                    kind,
                    have: bytes.len(),
                    want: Eager::LEN,
                })?;
                Eager::read(b).map(Self::Eager)
            }
            Kind::Rts => {
                let key_len = key_len(bytes, kind, Rts::BASE_LEN)?;
                let mut f = exact(bytes, kind, Rts::BASE_LEN + key_len)?;
                f.u8()?;
                let p = f.u8()?;
                let protocol = RndvProtocol::from_code(p).ok_or(Malformed::UnknownProtocol(p))?;
                f.u16()?;
                let envelope = Envelope::read(&mut f)?;
                let length = f.u64()?;
                let sender_request = f.u64()?;
                let address = f.u64()?;
                f.reserved::<4>(zero)?;
                let key = f.take(key_len)?;
                Ok(Self::Rts(Rts {
                    envelope,
                    protocol,
                    length,
                    sender_request,
                    address,
                    key,
                }))
            }
            Kind::Cts => {
                let mut f = exact(bytes, kind, Cts::LEN)?;
                f.u8()?;
                f.reserved::<7>(zero)?;
                Ok(Self::Cts(Cts {
                    sender_request: f.u64()?,
                    receiver_request: f.u64()?,
                }))
            }
            Kind::Data => {
                let mut f = exact(bytes, kind, Data::LEN)?;
                f.u8()?;
                f.reserved::<7>(zero)?;
                Ok(Self::Data(Data {
                    receiver_request: f.u64()?,
                    offset: f.u64()?,
                }))
            }
            Kind::Fin => {
                let mut f = exact(bytes, kind, Fin::LEN)?;
                f.u8()?;
                let s = f.u8()?;
                let status = FinStatus::from_code(s).ok_or(Malformed::UnknownStatus(s))?;
                f.reserved::<6>(zero)?;
                Ok(Self::Fin(Fin {
                    sender_request: f.u64()?,
                    status,
                }))
            }
            Kind::Credit => {
                let mut f = exact(bytes, kind, Credit::LEN)?;
                f.u8()?;
                f.reserved::<3>(zero)?;
                Ok(Self::Credit(Credit { credits: f.u32()? }))
            }
            Kind::Ack => {
                let key_len = key_len(bytes, kind, Ack::BASE_LEN)?;
                let mut f = exact(bytes, kind, Ack::BASE_LEN + key_len)?;
                f.u8()?;
                f.reserved::<1>(zero)?;
                f.u16()?;
                f.reserved::<4>(zero)?;
                let sender_request = f.u64()?;
                let receiver_request = f.u64()?;
                let offset = f.u64()?;
                let address = f.u64()?;
                let key = f.take(key_len)?;
                Ok(Self::Ack(Ack {
                    sender_request,
                    receiver_request,
                    offset,
                    address,
                    key,
                }))
            }
            Kind::PutDone => {
                let mut f = exact(bytes, kind, PutDone::LEN)?;
                f.u8()?;
                let s = f.u8()?;
                let status = FinStatus::from_code(s).ok_or(Malformed::UnknownStatus(s))?;
                f.reserved::<6>(zero)?;
                Ok(Self::PutDone(PutDone {
                    receiver_request: f.u64()?,
                    status,
                }))
            }
            Kind::Cancel => {
                let mut f = exact(bytes, kind, Cancel::LEN)?;
                f.u8()?;
                f.reserved::<7>(zero)?;
                Ok(Self::Cancel(Cancel {
                    receiver_request: f.u64()?,
                }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn envelope() -> Envelope {
        Envelope {
            context: 0x0102_0304,
            source: 77,
            tag: -5,
            seq: u32::MAX,
        }
    }

    #[test]
    fn every_kind_round_trips() {
        let eager = Eager {
            envelope: envelope(),
            flags: eager_flags::SYNC,
            credits: 0x0102_0304,
        };
        assert_eq!(Message::decode(&eager.encode()), Ok(Message::Eager(eager)));
        let key = [9u8; 40];
        let rts = Rts {
            envelope: envelope(),
            protocol: RndvProtocol::Get,
            length: 1 << 33,
            sender_request: 11,
            address: 0x7fff_0000_1000,
            key: &key,
        };
        let bytes = rts.encode().unwrap();
        assert_eq!(bytes.len(), Rts::BASE_LEN + 40);
        assert_eq!(Message::decode(&bytes), Ok(Message::Rts(rts)));
        let cts = Cts {
            sender_request: 3,
            receiver_request: u64::MAX,
        };
        assert_eq!(Message::decode(&cts.encode()), Ok(Message::Cts(cts)));
        let data = Data {
            receiver_request: 4,
            offset: 1 << 20,
        };
        assert_eq!(Message::decode(&data.encode()), Ok(Message::Data(data)));
        let fin = Fin {
            sender_request: 5,
            status: FinStatus::Failed,
        };
        assert_eq!(Message::decode(&fin.encode()), Ok(Message::Fin(fin)));
        let credit = Credit { credits: 64 };
        assert_eq!(
            Message::decode(&credit.encode()),
            Ok(Message::Credit(credit))
        );
        let key = [9u8; 24];
        let ack = Ack {
            sender_request: 6,
            receiver_request: 7,
            offset: 1 << 19,
            address: 0x7f00_0000_1000,
            key: &key,
        };
        let bytes = ack.encode().unwrap();
        assert_eq!(bytes.len(), Ack::BASE_LEN + key.len());
        assert_eq!(Message::decode(&bytes), Ok(Message::Ack(ack)));
        let done = PutDone {
            receiver_request: 8,
            status: FinStatus::Done,
        };
        assert_eq!(Message::decode(&done.encode()), Ok(Message::PutDone(done)));
        let cancel = Cancel {
            receiver_request: 9,
        };
        assert_eq!(
            Message::decode(&cancel.encode()),
            Ok(Message::Cancel(cancel))
        );
        let mut reserved = cancel.encode();
        reserved[3] = 1;
        assert_eq!(
            Message::decode(&reserved),
            Err(Malformed::ReservedNotZero(Kind::Cancel))
        );
        assert!(matches!(
            Message::decode(&cancel.encode()[..15]),
            Err(Malformed::BadLength { .. })
        ));
    }

    #[test]
    fn ack_keys_are_bounded_and_reserved_bytes_checked() {
        let key = vec![1u8; MAX_KEY_LEN + 1];
        let mut ack = Ack {
            sender_request: 1,
            receiver_request: 2,
            offset: 3,
            address: 4,
            key: &key,
        };
        assert_eq!(ack.encode(), None);
        ack.key = &key[..4];
        let bytes = ack.encode().unwrap();
        assert!(matches!(
            Message::decode(&bytes[..bytes.len() - 1]),
            Err(Malformed::BadLength { .. })
        ));
        let mut reserved = bytes.clone();
        reserved[1] = 1;
        assert_eq!(
            Message::decode(&reserved),
            Err(Malformed::ReservedNotZero(Kind::Ack))
        );
        let mut huge = bytes;
        huge[2..4].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(
            Message::decode(&huge),
            Err(Malformed::KeyTooLong(usize::from(u16::MAX)))
        );
        let mut status = PutDone {
            receiver_request: 1,
            status: FinStatus::Failed,
        }
        .encode();
        status[1] = 9;
        assert_eq!(Message::decode(&status), Err(Malformed::UnknownStatus(9)));
    }

    #[test]
    fn lengths_kinds_and_reserved_bytes_are_checked() {
        assert_eq!(Message::decode(&[]), Err(Malformed::Empty));
        assert_eq!(Message::decode(&[0]), Err(Malformed::UnknownKind(0)));
        assert_eq!(Message::decode(&[99; 24]), Err(Malformed::UnknownKind(99)));
        let eager = Eager {
            envelope: envelope(),
            flags: 0,
            credits: 0,
        }
        .encode();
        assert!(matches!(
            Message::decode(&eager[..23]),
            Err(Malformed::BadLength {
                have: 23,
                want: 24,
                ..
            })
        ));
        let mut longer = eager.to_vec();
        longer.push(0);
        assert!(matches!(
            Message::decode(&longer),
            Err(Malformed::BadLength { .. })
        ));
        let mut flagged = eager;
        flagged[1] = 0x80;
        assert_eq!(
            Message::decode(&flagged),
            Err(Malformed::UnknownFlags(0x80))
        );
        let mut reserved = eager;
        reserved[2] = 1;
        assert_eq!(
            Message::decode(&reserved),
            Err(Malformed::ReservedNotZero(Kind::Eager))
        );
        let mut fin = Fin {
            sender_request: 1,
            status: FinStatus::Done,
        }
        .encode();
        fin[1] = 9;
        assert_eq!(Message::decode(&fin), Err(Malformed::UnknownStatus(9)));
    }

    #[test]
    fn rts_keys_are_bounded_and_must_be_all_there() {
        let key = vec![1u8; MAX_KEY_LEN + 1];
        let mut rts = Rts {
            envelope: envelope(),
            protocol: RndvProtocol::Pipeline,
            length: 10,
            sender_request: 1,
            address: 0,
            key: &key,
        };
        assert_eq!(rts.encode(), None);
        rts.key = &key[..8];
        let bytes = rts.encode().unwrap();
        assert!(matches!(
            Message::decode(&bytes[..bytes.len() - 1]),
            Err(Malformed::BadLength { .. })
        ));
        let mut huge = bytes.clone();
        huge[2..4].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(
            Message::decode(&huge),
            Err(Malformed::KeyTooLong(usize::from(u16::MAX)))
        );
        let mut proto = bytes;
        proto[1] = 7;
        assert_eq!(Message::decode(&proto), Err(Malformed::UnknownProtocol(7)));
        assert!(matches!(
            Message::decode(&[Kind::Rts as u8, 1, 0]),
            Err(Malformed::BadLength { .. })
        ));
    }

    #[test]
    fn no_input_prefix_panics() {
        let key = [3u8; 16];
        let rts = Rts {
            envelope: envelope(),
            protocol: RndvProtocol::Get,
            length: 1,
            sender_request: 2,
            address: 3,
            key: &key,
        }
        .encode()
        .unwrap();
        for n in 0..=rts.len() {
            let _ = Message::decode(&rts[..n]);
        }
        let ack = Ack {
            sender_request: 1,
            receiver_request: 2,
            offset: 3,
            address: 4,
            key: &key,
        }
        .encode()
        .unwrap();
        for n in 0..=ack.len() {
            let _ = Message::decode(&ack[..n]);
        }
        for b in 0..=255u8 {
            let _ = Message::decode(&[b; 64]);
        }
    }
}
