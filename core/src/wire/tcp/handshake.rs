//! The messages that open a TCP connection between two processes of a job.
//!
//! Neither side sends a frame until both have proved they hold the job key,
//! each over a nonce the *other* side chose (so a recorded handshake cannot
//! be replayed, and neither side can be used as an oracle for the other):
//!
//! ```text
//! connector                                   acceptor
//!   Hello { ranks, link, entries, nonce_c } ──►
//!                          ◄── Challenge { ranks, nonce_a, mac_a }
//!   (checks mac_a)
//!   Proof { mac_c }                         ──►
//!                                              (checks mac_c, decides)
//!                          ◄── Verdict { accept | duplicate }
//!   frames ◄──────────────────────────────────► frames
//! ```
//!
//! `mac_a` and `mac_c` are HMAC-SHA256 under the job key of the same
//! [`Transcript`] (version, link, both ranks and entries, both nonces),
//! each with its own role label so one side's tag is never valid as the
//! other's. The acceptor answers `Duplicate` when it keeps another
//! connection between the two processes (simultaneous connects: the one
//! opened by the lower rank wins, on both sides).
//!
//! Each message has a fixed length, so a reader takes exactly the bytes of
//! the message it expects and frames that follow stay in the socket.

use core::fmt;

use crate::auth::{tags_equal, HmacSha256, DIGEST_LEN};
use crate::wire::{Fields, Reader, Writer};

/// First bytes of every handshake message.
pub const HANDSHAKE_MAGIC: [u8; 4] = *b"FOTH";
/// Version of the TCP transport's wire protocol (handshake and frames).
pub const PROTOCOL_VERSION: u16 = 1;
/// Length of a nonce.
pub const NONCE_LEN: usize = 32;
/// Length of a proof (an HMAC-SHA256 tag).
pub const MAC_LEN: usize = DIGEST_LEN;

/// Kind codes of the handshake messages.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    /// [`Hello`].
    Hello = 1,
    /// [`Challenge`].
    Challenge = 2,
    /// [`Proof`].
    Proof = 3,
    /// [`Verdict`].
    Verdict = 4,
}

/// Why a handshake message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeError {
    /// Not exactly the message's length.
    BadLength {
        /// Bytes given.
        have: usize,
        /// Bytes expected.
        want: usize,
    },
    /// The magic is not [`HANDSHAKE_MAGIC`]: not a fireopal peer.
    BadMagic,
    /// The peer speaks another protocol version.
    VersionMismatch {
        /// Its version.
        theirs: u16,
    },
    /// Another message than the one expected at this step.
    UnexpectedKind {
        /// The kind expected.
        expected: MessageKind,
        /// The code found.
        found: u8,
    },
    /// A reserved byte is not zero.
    ReservedNotZero,
    /// The verdict code is not a [`Verdict`].
    UnknownVerdict(u8),
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadLength { have, want } => {
                write!(f, "handshake message of {have} bytes, expected {want}")
            }
            Self::BadMagic => f.write_str("not a fireopal tcp handshake (bad magic)"),
            Self::VersionMismatch { theirs } => write!(
                f,
                "peer speaks tcp protocol version {theirs}, this process {PROTOCOL_VERSION}"
            ),
            Self::UnexpectedKind { expected, found } => {
                write!(f, "expected a {expected:?} message, got kind {found}")
            }
            Self::ReservedNotZero => f.write_str("reserved handshake byte is not zero"),
            Self::UnknownVerdict(v) => write!(f, "unknown verdict {v}"),
        }
    }
}

impl core::error::Error for HandshakeError {}

/// A writer over `out` with the common prefix (magic, version, kind) of
/// every message written.
fn prefix(out: &mut [u8], kind: MessageKind) -> Writer<'_> {
    let mut w = Writer::new(out);
    w.bytes(&HANDSHAKE_MAGIC);
    w.u16(PROTOCOL_VERSION);
    w.u8(kind as u8);
    w
}

/// Checks length and the common prefix; returns the fields after the
/// kind byte.
fn open(
    bytes: &[u8],
    want: usize,
    kind: MessageKind,
) -> Result<Fields<'_, HandshakeError>, HandshakeError> {
    // The magic is checked first, even on a short message, so that a
    // stranger is told apart from a truncated peer.
    let mut r = Reader::new(bytes);
    let short = HandshakeError::BadLength {
        have: bytes.len(),
        want,
    };
    match r.array::<4>() {
        Some(m) if m == HANDSHAKE_MAGIC => {}
        Some(_) => return Err(HandshakeError::BadMagic),
        None if HANDSHAKE_MAGIC.starts_with(bytes) => return Err(short),
        None => return Err(HandshakeError::BadMagic),
    }
    let version = r.u16().ok_or(short)?;
    if version != PROTOCOL_VERSION {
        return Err(HandshakeError::VersionMismatch { theirs: version });
    }
    let found = r.u8().ok_or(short)?;
    if found != kind as u8 {
        return Err(HandshakeError::UnexpectedKind {
            expected: kind,
            found,
        });
    }
    if bytes.len() != want {
        return Err(short);
    }
    Ok(Fields::new(r, short))
}

/// First message, connector to acceptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Link index (both ends use the same link).
    pub link: u8,
    /// Connector's rank.
    pub from_rank: u32,
    /// The rank the connector means to reach.
    pub to_rank: u32,
    /// Index of the connector's entry in its published address list.
    pub from_entry: u8,
    /// Index of the acceptor's entry the connector dialled.
    pub to_entry: u8,
    /// Connector's nonce.
    pub nonce: [u8; NONCE_LEN],
}

impl Hello {
    /// Wire length.
    pub const LEN: usize = 52;

    /// Wire form.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        let mut w = prefix(&mut out, MessageKind::Hello);
        w.u8(self.link);
        w.u32(self.from_rank);
        w.u32(self.to_rank);
        w.u8(self.from_entry);
        w.u8(self.to_entry);
        w.zeros(2);
        w.bytes(&self.nonce);
        out
    }

    /// Parses exactly [`Hello::LEN`] bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, HandshakeError> {
        let mut f = open(bytes, Self::LEN, MessageKind::Hello)?;
        let link = f.u8()?;
        let from_rank = f.u32()?;
        let to_rank = f.u32()?;
        let from_entry = f.u8()?;
        let to_entry = f.u8()?;
        f.reserved::<2>(HandshakeError::ReservedNotZero)?;
        let nonce = f.array()?;
        Ok(Self {
            link,
            from_rank,
            to_rank,
            from_entry,
            to_entry,
            nonce,
        })
    }
}

/// Second message, acceptor to connector: its nonce and its proof.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Challenge {
    /// Acceptor's rank.
    pub from_rank: u32,
    /// The connector's rank, as the acceptor understood it.
    pub to_rank: u32,
    /// Acceptor's nonce.
    pub nonce: [u8; NONCE_LEN],
    /// [`Transcript::mac`] with [`Role::Acceptor`].
    pub mac: [u8; MAC_LEN],
}

impl Challenge {
    /// Wire length.
    pub const LEN: usize = 80;

    /// Wire form.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        let mut w = prefix(&mut out, MessageKind::Challenge);
        w.zeros(1);
        w.u32(self.from_rank);
        w.u32(self.to_rank);
        w.bytes(&self.nonce);
        w.bytes(&self.mac);
        out
    }

    /// Parses exactly [`Challenge::LEN`] bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, HandshakeError> {
        let mut f = open(bytes, Self::LEN, MessageKind::Challenge)?;
        f.reserved::<1>(HandshakeError::ReservedNotZero)?;
        Ok(Self {
            from_rank: f.u32()?,
            to_rank: f.u32()?,
            nonce: f.array()?,
            mac: f.array()?,
        })
    }
}

/// Third message, connector to acceptor: the connector's proof.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proof {
    /// [`Transcript::mac`] with [`Role::Connector`].
    pub mac: [u8; MAC_LEN],
}

impl Proof {
    /// Wire length.
    pub const LEN: usize = 40;

    /// Wire form.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        let mut w = prefix(&mut out, MessageKind::Proof);
        w.zeros(1);
        w.bytes(&self.mac);
        out
    }

    /// Parses exactly [`Proof::LEN`] bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, HandshakeError> {
        let mut f = open(bytes, Self::LEN, MessageKind::Proof)?;
        f.reserved::<1>(HandshakeError::ReservedNotZero)?;
        Ok(Self { mac: f.array()? })
    }
}

/// Last message, acceptor to connector: whether this connection is kept.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Kept: frames may flow.
    Accept = 0,
    /// Dropped because the acceptor keeps another connection between the
    /// two processes; the connector waits for that one.
    Duplicate = 1,
}

impl Verdict {
    /// Wire length.
    pub const LEN: usize = 8;

    /// Wire form.
    pub fn encode(self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        prefix(&mut out, MessageKind::Verdict).u8(self as u8);
        out
    }

    /// Parses exactly [`Verdict::LEN`] bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, HandshakeError> {
        match open(bytes, Self::LEN, MessageKind::Verdict)?.u8()? {
            0 => Ok(Self::Accept),
            1 => Ok(Self::Duplicate),
            v => Err(HandshakeError::UnknownVerdict(v)),
        }
    }
}

/// Which side computes a proof.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The side that called `connect`.
    Connector,
    /// The side that called `accept`.
    Acceptor,
}

impl Role {
    fn label(self) -> &'static [u8] {
        match self {
            Self::Connector => b"fireopal tcp connector proof\0",
            Self::Acceptor => b"fireopal tcp acceptor proof\0",
        }
    }
}

/// Everything both sides agreed on during one handshake; both proofs are
/// MACs of it, so a proof is valid for this connection only.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Transcript {
    /// Link index.
    pub link: u8,
    /// Connector's rank.
    pub connector_rank: u32,
    /// Connector's address entry.
    pub connector_entry: u8,
    /// Acceptor's rank.
    pub acceptor_rank: u32,
    /// Acceptor's address entry.
    pub acceptor_entry: u8,
    /// Connector's nonce.
    pub connector_nonce: [u8; NONCE_LEN],
    /// Acceptor's nonce.
    pub acceptor_nonce: [u8; NONCE_LEN],
}

impl fmt::Debug for Transcript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transcript")
            .field("link", &self.link)
            .field("connector_rank", &self.connector_rank)
            .field("acceptor_rank", &self.acceptor_rank)
            .finish_non_exhaustive()
    }
}

impl Transcript {
    /// The transcript of a handshake that started with `hello` and was
    /// answered with `acceptor_nonce`.
    pub fn new(hello: &Hello, acceptor_nonce: [u8; NONCE_LEN]) -> Self {
        Self {
            link: hello.link,
            connector_rank: hello.from_rank,
            connector_entry: hello.from_entry,
            acceptor_rank: hello.to_rank,
            acceptor_entry: hello.to_entry,
            connector_nonce: hello.nonce,
            acceptor_nonce,
        }
    }

    /// The proof `role` sends: HMAC-SHA256 under `key` of the role's label,
    /// the protocol version and every field.
    pub fn mac(&self, key: &[u8], role: Role) -> [u8; MAC_LEN] {
        let mut mac = HmacSha256::new(key);
        mac.update(role.label());
        mac.update(&PROTOCOL_VERSION.to_le_bytes());
        mac.update(&[self.link, self.connector_entry, self.acceptor_entry]);
        mac.update(&self.connector_rank.to_le_bytes());
        mac.update(&self.acceptor_rank.to_le_bytes());
        mac.update(&self.connector_nonce);
        mac.update(&self.acceptor_nonce);
        mac.finalize()
    }

    /// Whether `tag` is `role`'s proof under `key` (constant-time compare).
    pub fn verify(&self, key: &[u8], role: Role, tag: &[u8; MAC_LEN]) -> bool {
        tags_equal(&self.mac(key, role), tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Hello {
        Hello {
            link: 2,
            from_rank: 7,
            to_rank: 3,
            from_entry: 1,
            to_entry: 0,
            nonce: [0x11; NONCE_LEN],
        }
    }

    #[test]
    fn messages_round_trip() {
        let h = hello();
        assert_eq!(Hello::parse(&h.encode()), Ok(h));
        let c = Challenge {
            from_rank: 3,
            to_rank: 7,
            nonce: [0x22; NONCE_LEN],
            mac: [0x33; MAC_LEN],
        };
        assert_eq!(Challenge::parse(&c.encode()), Ok(c));
        let p = Proof { mac: [0x44; 32] };
        assert_eq!(Proof::parse(&p.encode()), Ok(p));
        for v in [Verdict::Accept, Verdict::Duplicate] {
            assert_eq!(Verdict::parse(&v.encode()), Ok(v));
        }
    }

    #[test]
    fn every_length_but_the_right_one_is_refused() {
        let mut buf = [0u8; 128];
        let h = hello().encode();
        buf[..h.len()].copy_from_slice(&h);
        for n in 7..buf.len() {
            let r = Hello::parse(&buf[..n]);
            if n == Hello::LEN {
                assert!(r.is_ok());
            } else {
                assert_eq!(
                    r,
                    Err(HandshakeError::BadLength {
                        have: n,
                        want: Hello::LEN
                    })
                );
            }
        }
        let v = Verdict::Accept.encode();
        assert_eq!(
            Verdict::parse(&v[..7]),
            Err(HandshakeError::BadLength { have: 7, want: 8 })
        );
    }

    #[test]
    fn magic_is_checked_first() {
        assert_eq!(
            Hello::parse(b"GET / HTTP/1.1\r\n"),
            Err(HandshakeError::BadMagic)
        );
        assert_eq!(Hello::parse(b"X"), Err(HandshakeError::BadMagic));
        // A prefix of the magic is merely short.
        assert_eq!(
            Hello::parse(b"FO"),
            Err(HandshakeError::BadLength { have: 2, want: 52 })
        );
        assert_eq!(
            Hello::parse(b""),
            Err(HandshakeError::BadLength { have: 0, want: 52 })
        );
    }

    #[test]
    fn version_and_kind_are_checked() {
        let mut h = hello().encode();
        h[4] = 9;
        assert_eq!(
            Hello::parse(&h),
            Err(HandshakeError::VersionMismatch { theirs: 9 })
        );
        let p = Proof { mac: [0; 32] }.encode();
        assert_eq!(
            Challenge::parse(&p),
            Err(HandshakeError::UnexpectedKind {
                expected: MessageKind::Challenge,
                found: 3
            })
        );
        let v = Verdict::Accept.encode();
        assert_eq!(
            Hello::parse(&v),
            Err(HandshakeError::UnexpectedKind {
                expected: MessageKind::Hello,
                found: 4
            })
        );
    }

    #[test]
    fn reserved_bytes_and_verdicts_are_checked() {
        let mut h = hello().encode();
        h[18] = 1;
        assert_eq!(Hello::parse(&h), Err(HandshakeError::ReservedNotZero));
        let mut c = Challenge {
            from_rank: 0,
            to_rank: 0,
            nonce: [0; 32],
            mac: [0; 32],
        }
        .encode();
        c[7] = 1;
        assert_eq!(Challenge::parse(&c), Err(HandshakeError::ReservedNotZero));
        let mut p = Proof { mac: [0; 32] }.encode();
        p[7] = 1;
        assert_eq!(Proof::parse(&p), Err(HandshakeError::ReservedNotZero));
        let mut v = Verdict::Accept.encode();
        v[7] = 2;
        assert_eq!(Verdict::parse(&v), Err(HandshakeError::UnknownVerdict(2)));
    }

    #[test]
    fn proofs_bind_key_role_and_every_field() {
        let key = [0x5a; 32];
        let t = Transcript::new(&hello(), [0x66; NONCE_LEN]);
        let a = t.mac(&key, Role::Acceptor);
        let c = t.mac(&key, Role::Connector);
        assert_ne!(a, c, "one side's proof is never the other's");
        assert!(t.verify(&key, Role::Acceptor, &a));
        assert!(!t.verify(&key, Role::Connector, &a));
        assert!(!t.verify(&[0x5b; 32], Role::Acceptor, &a), "wrong key");

        let variants: [fn(&mut Transcript); 7] = [
            |t| t.link ^= 1,
            |t| t.connector_rank ^= 1,
            |t| t.connector_entry ^= 1,
            |t| t.acceptor_rank ^= 1,
            |t| t.acceptor_entry ^= 1,
            |t| t.connector_nonce[31] ^= 1,
            |t| t.acceptor_nonce[0] ^= 1,
        ];
        for change in variants {
            let mut u = t;
            change(&mut u);
            assert!(!u.verify(&key, Role::Acceptor, &a), "{u:?}");
        }
    }

    #[test]
    fn transcript_debug_hides_nonces() {
        let t = Transcript::new(&hello(), [0x66; NONCE_LEN]);
        let s = alloc::format!("{t:?}");
        assert!(s.contains("connector_rank: 7"));
        assert!(!s.contains("102"), "{s}");
    }
}
