//! The TCP frame: a fixed 16-byte header, then a kind-specific header
//! (the active message's header, or an RDMA sub-header), then `pad` zero
//! bytes, then the payload.
//!
//! ```text
//! offset  size  field
//!      0     1  kind         (FrameKind)
//!      1     1  tag          (active-message tag; 0 for other kinds)
//!      2     2  header_len   (bytes after the fixed header, before the padding)
//!      4     3  marker       b"fot", catches a stream out of step
//!      7     1  pad          (zero bytes before the payload, below PAYLOAD_ALIGN)
//!      8     8  payload_len
//! ```
//!
//! The padding lets a sender choose where a large payload falls relative
//! to a 64-byte boundary of what it writes: the kernel copies it with
//! `rep movsb`, which on some processors is several times slower when
//! source and destination are misaligned to each other by a few words.
//!
//! [`FrameHeader::parse`] checks every field against [`FrameLimits`] before
//! the receiver sizes a buffer or reads a payload: an unknown kind, a
//! header or payload longer than the receiver accepts, or an RDMA
//! sub-header of the wrong size is refused.
//!
//! `put` and `get` are emulated with four frame kinds; their sub-headers are
//! [`PutHeader`], [`PutAck`], [`GetRequest`] and [`GetResponse`], and the
//! peer names its memory with a [`RemoteKey`].

use core::fmt;

use crate::wire::{Fields, Reader, Writer};

/// Length of the fixed frame header.
pub const FRAME_HEADER_LEN: usize = 16;
/// Marker in every frame header.
pub const FRAME_MARKER: [u8; 3] = *b"fot";
/// Padding before a payload is shorter than this.
pub const PAYLOAD_ALIGN: usize = 64;

code_enum! {
    /// What a frame carries.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum FrameKind: u8 {
        /// An active message: the header is the sender's, then the payload.
        Active = 1,
        /// A piece of a `put`: [`PutHeader`], then the bytes to write.
        Put = 2,
        /// The target's answer to one [`FrameKind::Put`]: [`PutAck`], no payload.
        PutAck = 3,
        /// A `get`: [`GetRequest`], no payload.
        GetRequest = 4,
        /// A piece of the answer to a `get`: [`GetResponse`], then the bytes read.
        GetResponse = 5,
    }
}

impl FrameKind {
    /// Exact sub-header length of the RDMA kinds; `None` for active
    /// messages, whose header length is the sender's choice.
    pub const fn fixed_header_len(self) -> Option<usize> {
        match self {
            Self::Active => None,
            Self::Put => Some(PutHeader::LEN),
            Self::PutAck => Some(PutAck::LEN),
            Self::GetRequest => Some(GetRequest::LEN),
            Self::GetResponse => Some(GetResponse::LEN),
        }
    }

    /// Whether frames of this kind may carry a payload.
    pub const fn has_payload(self) -> bool {
        matches!(self, Self::Active | Self::Put | Self::GetResponse)
    }
}

/// What a receiver accepts; frames beyond these are refused before any of
/// their bytes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLimits {
    /// Longest active-message header.
    pub max_header_len: u16,
    /// Longest payload of one frame.
    pub max_payload_len: u64,
}

/// The checked fixed header of one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// What the frame carries.
    pub kind: FrameKind,
    /// Active-message tag (0 for the other kinds).
    pub tag: u8,
    /// Bytes of the kind-specific header that follows.
    pub header_len: u16,
    /// Zero bytes between that header and the payload.
    pub pad: u8,
    /// Bytes of payload after the padding.
    pub payload_len: u64,
}

/// Why a frame header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// Fewer than [`FRAME_HEADER_LEN`] bytes were given.
    Truncated {
        /// Bytes given.
        have: usize,
    },
    /// The marker is not [`FRAME_MARKER`]: the stream is out of step or
    /// not ours.
    BadMarker,
    /// The kind code is not a [`FrameKind`].
    UnknownKind(u8),
    /// A frame other than an active message has a non-zero tag.
    UnexpectedTag {
        /// The frame's kind.
        kind: FrameKind,
        /// The tag it carried.
        tag: u8,
    },
    /// An active-message header longer than the receiver accepts.
    HeaderTooLong {
        /// Length announced.
        len: u16,
        /// Longest accepted.
        max: u16,
    },
    /// An RDMA sub-header whose length is not its kind's.
    BadHeaderLength {
        /// The frame's kind.
        kind: FrameKind,
        /// Length announced.
        len: u16,
    },
    /// A payload longer than the receiver accepts.
    PayloadTooLong {
        /// Length announced.
        len: u64,
        /// Longest accepted.
        max: u64,
    },
    /// A payload on a kind that carries none.
    UnexpectedPayload {
        /// The frame's kind.
        kind: FrameKind,
        /// Length announced.
        len: u64,
    },
    /// Padding of [`PAYLOAD_ALIGN`] bytes or more, or before no payload.
    BadPadding {
        /// The frame's kind.
        kind: FrameKind,
        /// Padding announced.
        pad: u8,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { have } => {
                write!(
                    f,
                    "frame header truncated: {have} of {FRAME_HEADER_LEN} bytes"
                )
            }
            Self::BadMarker => f.write_str("frame marker missing: stream out of step"),
            Self::UnknownKind(k) => write!(f, "unknown frame kind {k}"),
            Self::UnexpectedTag { kind, tag } => write!(f, "{kind:?} frame with tag {tag}"),
            Self::HeaderTooLong { len, max } => {
                write!(
                    f,
                    "message header of {len} bytes exceeds the limit of {max}"
                )
            }
            Self::BadHeaderLength { kind, len } => {
                write!(f, "{kind:?} frame with a {len}-byte sub-header")
            }
            Self::PayloadTooLong { len, max } => {
                write!(f, "payload of {len} bytes exceeds the limit of {max}")
            }
            Self::UnexpectedPayload { kind, len } => {
                write!(f, "{kind:?} frame with a {len}-byte payload")
            }
            Self::BadPadding { kind, pad } => {
                write!(f, "{kind:?} frame with {pad} bytes of padding")
            }
        }
    }
}

impl core::error::Error for FrameError {}

impl FrameHeader {
    /// Header of an active message.
    pub const fn active(tag: u8, header_len: u16, payload_len: u64) -> Self {
        Self {
            kind: FrameKind::Active,
            tag,
            header_len,
            pad: 0,
            payload_len,
        }
    }

    /// Header of an RDMA frame of `kind` (its sub-header length is implied).
    pub const fn rdma(kind: FrameKind, payload_len: u64) -> Self {
        let header_len = match kind.fixed_header_len() {
            Some(n) => n as u16,
            None => 0,
        };
        Self {
            kind,
            tag: 0,
            header_len,
            pad: 0,
            payload_len,
        }
    }

    /// The same header with `pad` bytes of padding before the payload
    /// (below [`PAYLOAD_ALIGN`]; only on kinds that carry a payload).
    pub const fn with_pad(mut self, pad: u8) -> Self {
        self.pad = pad;
        self
    }

    /// Offset of the payload from the start of the frame.
    pub fn payload_offset(&self) -> usize {
        FRAME_HEADER_LEN + usize::from(self.header_len) + usize::from(self.pad)
    }

    /// The wire form.
    pub fn encode(&self) -> [u8; FRAME_HEADER_LEN] {
        let mut out = [0u8; FRAME_HEADER_LEN];
        let mut w = Writer::new(&mut out);
        w.u8(self.kind as u8);
        w.u8(self.tag);
        w.u16(self.header_len);
        w.bytes(&FRAME_MARKER);
        w.u8(self.pad);
        w.u64(self.payload_len);
        out
    }

    /// Parses and checks the first [`FRAME_HEADER_LEN`] bytes of `bytes`
    /// against `limits`.
    pub fn parse(bytes: &[u8], limits: &FrameLimits) -> Result<Self, FrameError> {
        let mut f = Fields::new(
            Reader::new(bytes),
            FrameError::Truncated { have: bytes.len() },
        );
        let code = f.u8()?;
        let tag = f.u8()?;
        let header_len = f.u16()?;
        let marker: [u8; 3] = f.array()?;
        let pad = f.u8()?;
        let payload_len = f.u64()?;
        if marker != FRAME_MARKER {
            return Err(FrameError::BadMarker);
        }
        let kind = FrameKind::from_code(code).ok_or(FrameError::UnknownKind(code))?;
        match kind.fixed_header_len() {
            None if header_len > limits.max_header_len => {
                return Err(FrameError::HeaderTooLong {
                    len: header_len,
                    max: limits.max_header_len,
                })
            }
            None => {}
            Some(n) => {
                if tag != 0 {
                    return Err(FrameError::UnexpectedTag { kind, tag });
                }
                if usize::from(header_len) != n {
                    return Err(FrameError::BadHeaderLength {
                        kind,
                        len: header_len,
                    });
                }
            }
        }
        if !kind.has_payload() && payload_len != 0 {
            return Err(FrameError::UnexpectedPayload {
                kind,
                len: payload_len,
            });
        }
        if payload_len > limits.max_payload_len {
            return Err(FrameError::PayloadTooLong {
                len: payload_len,
                max: limits.max_payload_len,
            });
        }
        if usize::from(pad) >= PAYLOAD_ALIGN || (pad != 0 && payload_len == 0) {
            return Err(FrameError::BadPadding { kind, pad });
        }
        Ok(Self {
            kind,
            tag,
            header_len,
            pad,
            payload_len,
        })
    }

    /// Bytes of the whole frame, fixed header included (saturating, though
    /// a parsed header's payload is already bounded by the limits).
    pub fn frame_len(&self) -> u64 {
        (FRAME_HEADER_LEN as u64)
            .saturating_add(u64::from(self.header_len))
            .saturating_add(u64::from(self.pad))
            .saturating_add(self.payload_len)
    }
}

/// The key a peer presents to reach a registration: the registration's id
/// and a random secret chosen when it was made, so ids cannot be guessed
/// or reused after deregistration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteKey {
    /// Registration id on the target.
    pub id: u64,
    /// Secret chosen by the target for this registration.
    pub secret: u64,
}

/// Why a remote key did not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteKeyError {
    /// The key is not [`RemoteKey::LEN`] bytes long.
    BadLength(usize),
}

impl fmt::Display for RemoteKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadLength(n) => write!(f, "remote key of {n} bytes, expected {}", RemoteKey::LEN),
        }
    }
}

impl core::error::Error for RemoteKeyError {}

impl RemoteKey {
    /// Packed length.
    pub const LEN: usize = 16;

    /// Packed form.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        self.write(&mut Writer::new(&mut out));
        out
    }

    fn write(&self, w: &mut Writer<'_>) {
        w.u64(self.id);
        w.u64(self.secret);
    }

    fn read<E: Copy>(f: &mut Fields<'_, E>) -> Result<Self, E> {
        Ok(Self {
            id: f.u64()?,
            secret: f.u64()?,
        })
    }

    /// Parses a packed key; it must be exactly [`RemoteKey::LEN`] bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, RemoteKeyError> {
        let bad = RemoteKeyError::BadLength(bytes.len());
        if bytes.len() != Self::LEN {
            return Err(bad);
        }
        Self::read(&mut Fields::new(Reader::new(bytes), bad))
    }
}

code_enum! {
    /// Outcome of an RDMA operation on the target.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum RdmaStatus: u32 {
        /// Done.
        Ok = 0,
        /// No registration has the key's id, or its secret differs.
        UnknownKey = 1,
        /// The registration does not grant the access asked for.
        AccessDenied = 2,
        /// The range is not inside the registration.
        OutOfRange = 3,
        /// The registration went away while the operation used it.
        Deregistered = 4,
    }
}

impl fmt::Display for RdmaStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Ok => "done",
            Self::UnknownKey => "remote key does not name a registration of the target",
            Self::AccessDenied => "registration does not grant this access",
            Self::OutOfRange => "range is outside the registration",
            Self::Deregistered => "registration was released during the operation",
        })
    }
}

/// Why an RDMA sub-header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmaHeaderError {
    /// Not exactly the sub-header's length.
    BadLength {
        /// Bytes given.
        have: usize,
        /// Bytes expected.
        want: usize,
    },
    /// The status code is not an [`RdmaStatus`].
    UnknownStatus(u32),
    /// A reserved field is not zero.
    ReservedNotZero,
}

impl fmt::Display for RdmaHeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadLength { have, want } => {
                write!(f, "RDMA sub-header of {have} bytes, expected {want}")
            }
            Self::UnknownStatus(c) => write!(f, "unknown RDMA status {c}"),
            Self::ReservedNotZero => f.write_str("reserved RDMA field is not zero"),
        }
    }
}

impl core::error::Error for RdmaHeaderError {}

/// The fields of exactly `want` bytes.
fn exact(bytes: &[u8], want: usize) -> Result<Fields<'_, RdmaHeaderError>, RdmaHeaderError> {
    let short = RdmaHeaderError::BadLength {
        have: bytes.len(),
        want,
    };
    if bytes.len() == want {
        Ok(Fields::new(Reader::new(bytes), short))
    } else {
        Err(short)
    }
}

/// A field of an RDMA sub-header, with its wire form. The sub-headers
/// below are declared with [`rdma_sub_header!`] from these, so that each
/// is read in exactly the order and widths it is written.
trait SubHeaderField: Sized {
    /// Wire length.
    const LEN: usize;
    fn write(&self, w: &mut Writer<'_>);
    fn read(f: &mut Fields<'_, RdmaHeaderError>) -> Result<Self, RdmaHeaderError>;
}

impl SubHeaderField for u64 {
    const LEN: usize = 8;

    fn write(&self, w: &mut Writer<'_>) {
        w.u64(*self);
    }

    fn read(f: &mut Fields<'_, RdmaHeaderError>) -> Result<Self, RdmaHeaderError> {
        f.u64()
    }
}

impl SubHeaderField for RemoteKey {
    const LEN: usize = RemoteKey::LEN;

    fn write(&self, w: &mut Writer<'_>) {
        RemoteKey::write(self, w);
    }

    fn read(f: &mut Fields<'_, RdmaHeaderError>) -> Result<Self, RdmaHeaderError> {
        RemoteKey::read(f)
    }
}

/// A status is its code and a reserved zero word, so that the fields after
/// it stay 8-byte aligned.
impl SubHeaderField for RdmaStatus {
    const LEN: usize = 8;

    fn write(&self, w: &mut Writer<'_>) {
        w.u32(*self as u32);
        w.zeros(4);
    }

    fn read(f: &mut Fields<'_, RdmaHeaderError>) -> Result<Self, RdmaHeaderError> {
        let code = f.u32()?;
        let status = RdmaStatus::from_code(code).ok_or(RdmaHeaderError::UnknownStatus(code))?;
        f.reserved::<4>(RdmaHeaderError::ReservedNotZero)?;
        Ok(status)
    }
}

/// Declares an RDMA sub-header: the struct, its `LEN` (the sum of its
/// fields') and the `encode` / `parse` pair, fields in declaration order.
macro_rules! rdma_sub_header {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$field_meta:meta])* pub $field:ident: $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$field_meta])* pub $field: $ty, )*
        }

        impl $name {
            /// Wire length.
            pub const LEN: usize = 0 $( + <$ty as SubHeaderField>::LEN )*;

            /// Wire form.
            pub fn encode(&self) -> [u8; Self::LEN] {
                let mut out = [0u8; Self::LEN];
                let mut w = Writer::new(&mut out);
                $( SubHeaderField::write(&self.$field, &mut w); )*
                out
            }

            #[doc = concat!("Parses exactly [`", stringify!($name), "::LEN`] bytes.")]
            pub fn parse(bytes: &[u8]) -> Result<Self, RdmaHeaderError> {
                let mut f = exact(bytes, Self::LEN)?;
                // Struct fields are evaluated in the order written.
                Ok(Self {
                    $( $field: <$ty as SubHeaderField>::read(&mut f)?, )*
                })
            }
        }
    };
}

rdma_sub_header! {
    /// Sub-header of a [`FrameKind::Put`] frame: write the payload at
    /// `remote_addr` in the registration named by `key`.
    pub struct PutHeader {
        /// Initiator's operation id, echoed in the [`PutAck`].
        pub op_id: u64,
        /// Target address of the first payload byte.
        pub remote_addr: u64,
        /// The target registration.
        pub key: RemoteKey,
    }
}

rdma_sub_header! {
    /// Sub-header of a [`FrameKind::PutAck`] frame.
    pub struct PutAck {
        /// The [`PutHeader::op_id`] answered.
        pub op_id: u64,
        /// Whether the bytes were written.
        pub status: RdmaStatus,
    }
}

rdma_sub_header! {
    /// Sub-header of a [`FrameKind::GetRequest`] frame: send back `length`
    /// bytes from `remote_addr` in the registration named by `key`.
    pub struct GetRequest {
        /// Initiator's operation id, echoed in every [`GetResponse`].
        pub op_id: u64,
        /// Target address of the first byte to read.
        pub remote_addr: u64,
        /// The target registration.
        pub key: RemoteKey,
        /// Bytes to read.
        pub length: u64,
        /// Where the initiator stores the answer, in its own address
        /// space: the target only uses its alignment, to place the
        /// answers' payloads (see [`FrameHeader::pad`]).
        pub reply_addr: u64,
    }
}

rdma_sub_header! {
    /// Sub-header of a [`FrameKind::GetResponse`] frame: the payload holds
    /// the bytes read at `offset` within the request's range (none on
    /// error).
    pub struct GetResponse {
        /// The [`GetRequest::op_id`] answered.
        pub op_id: u64,
        /// Whether the bytes could be read.
        pub status: RdmaStatus,
        /// Where the payload goes within the requested range.
        pub offset: u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: FrameLimits = FrameLimits {
        max_header_len: 256,
        max_payload_len: 1 << 20,
    };

    #[test]
    fn active_header_round_trips() {
        let h = FrameHeader::active(7, 12, 4096);
        let bytes = h.encode();
        assert_eq!(&bytes[4..7], b"fot");
        assert_eq!(bytes[7], 0);
        assert_eq!(FrameHeader::parse(&bytes, &LIMITS), Ok(h));
        assert_eq!(h.frame_len(), 16 + 12 + 4096);
    }

    #[test]
    fn parse_ignores_bytes_after_the_fixed_header() {
        let mut bytes = [0xeeu8; 40];
        bytes[..16].copy_from_slice(&FrameHeader::active(1, 0, 0).encode());
        assert!(FrameHeader::parse(&bytes, &LIMITS).is_ok());
    }

    #[test]
    fn truncated_header_is_refused() {
        let bytes = FrameHeader::active(1, 0, 0).encode();
        for n in 0..FRAME_HEADER_LEN {
            assert_eq!(
                FrameHeader::parse(&bytes[..n], &LIMITS),
                Err(FrameError::Truncated { have: n })
            );
        }
    }

    #[test]
    fn bad_marker_is_refused_before_anything_else() {
        let mut bytes = FrameHeader::active(1, 0, 0).encode();
        bytes[0] = 99;
        bytes[6] = b'X';
        assert_eq!(
            FrameHeader::parse(&bytes, &LIMITS),
            Err(FrameError::BadMarker)
        );
    }

    #[test]
    fn unknown_kinds_are_refused() {
        for code in [0u8, 6, 7, 0x80, 0xff] {
            let mut bytes = FrameHeader::active(0, 0, 0).encode();
            bytes[0] = code;
            assert_eq!(
                FrameHeader::parse(&bytes, &LIMITS),
                Err(FrameError::UnknownKind(code))
            );
        }
        for code in 1..=5 {
            assert!(FrameKind::from_code(code).is_some());
        }
    }

    #[test]
    fn header_length_is_bounded() {
        let ok = FrameHeader::active(1, 256, 0).encode();
        assert!(FrameHeader::parse(&ok, &LIMITS).is_ok());
        let long = FrameHeader::active(1, 257, 0).encode();
        assert_eq!(
            FrameHeader::parse(&long, &LIMITS),
            Err(FrameError::HeaderTooLong { len: 257, max: 256 })
        );
    }

    #[test]
    fn payload_length_is_bounded_even_at_2_pow_40() {
        let ok = FrameHeader::active(1, 0, 1 << 20).encode();
        assert!(FrameHeader::parse(&ok, &LIMITS).is_ok());
        for len in [(1u64 << 20) + 1, 1 << 40, u64::MAX] {
            let bytes = FrameHeader::active(1, 0, len).encode();
            assert_eq!(
                FrameHeader::parse(&bytes, &LIMITS),
                Err(FrameError::PayloadTooLong { len, max: 1 << 20 })
            );
        }
        let put = FrameHeader::rdma(FrameKind::Put, 1 << 40).encode();
        assert!(matches!(
            FrameHeader::parse(&put, &LIMITS),
            Err(FrameError::PayloadTooLong { .. })
        ));
    }

    #[test]
    fn frame_len_saturates() {
        let h = FrameHeader {
            kind: FrameKind::Active,
            tag: 0,
            header_len: u16::MAX,
            pad: 63,
            payload_len: u64::MAX,
        };
        assert_eq!(h.frame_len(), u64::MAX);
    }

    #[test]
    fn padding_is_below_the_alignment_and_only_before_a_payload() {
        let h = FrameHeader::active(2, 10, 100).with_pad(63);
        assert_eq!(FrameHeader::parse(&h.encode(), &LIMITS), Ok(h));
        assert_eq!(h.payload_offset(), FRAME_HEADER_LEN + 10 + 63);
        assert_eq!(h.frame_len(), (FRAME_HEADER_LEN + 10 + 63 + 100) as u64);
        let wide = FrameHeader::active(2, 10, 100).with_pad(64);
        assert_eq!(
            FrameHeader::parse(&wide.encode(), &LIMITS),
            Err(FrameError::BadPadding {
                kind: FrameKind::Active,
                pad: 64
            })
        );
        let empty = FrameHeader::rdma(FrameKind::GetRequest, 0).with_pad(8);
        assert_eq!(
            FrameHeader::parse(&empty.encode(), &LIMITS),
            Err(FrameError::BadPadding {
                kind: FrameKind::GetRequest,
                pad: 8
            })
        );
    }

    #[test]
    fn rdma_kinds_need_their_exact_sub_header_and_no_tag() {
        let kinds = [
            (FrameKind::Put, PutHeader::LEN),
            (FrameKind::PutAck, PutAck::LEN),
            (FrameKind::GetRequest, GetRequest::LEN),
            (FrameKind::GetResponse, GetResponse::LEN),
        ];
        for (kind, len) in kinds {
            let h = FrameHeader::rdma(kind, 0);
            assert_eq!(usize::from(h.header_len), len);
            assert_eq!(FrameHeader::parse(&h.encode(), &LIMITS), Ok(h));

            let mut wrong = h;
            wrong.header_len += 1;
            assert_eq!(
                FrameHeader::parse(&wrong.encode(), &LIMITS),
                Err(FrameError::BadHeaderLength {
                    kind,
                    len: wrong.header_len
                })
            );
            let mut tagged = h;
            tagged.tag = 3;
            assert_eq!(
                FrameHeader::parse(&tagged.encode(), &LIMITS),
                Err(FrameError::UnexpectedTag { kind, tag: 3 })
            );
        }
    }

    #[test]
    fn payload_only_where_the_kind_has_one() {
        for kind in [FrameKind::PutAck, FrameKind::GetRequest] {
            let h = FrameHeader::rdma(kind, 1);
            assert_eq!(
                FrameHeader::parse(&h.encode(), &LIMITS),
                Err(FrameError::UnexpectedPayload { kind, len: 1 })
            );
        }
        for kind in [FrameKind::Put, FrameKind::GetResponse] {
            assert!(FrameHeader::parse(&FrameHeader::rdma(kind, 9).encode(), &LIMITS).is_ok());
        }
    }

    #[test]
    fn remote_key_round_trips_and_checks_length() {
        let k = RemoteKey {
            id: 42,
            secret: 0xdead_beef_0123_4567,
        };
        assert_eq!(RemoteKey::parse(&k.encode()), Ok(k));
        assert_eq!(
            RemoteKey::parse(&[0; 15]),
            Err(RemoteKeyError::BadLength(15))
        );
        assert_eq!(
            RemoteKey::parse(&[0; 17]),
            Err(RemoteKeyError::BadLength(17))
        );
        assert_eq!(RemoteKey::parse(&[]), Err(RemoteKeyError::BadLength(0)));
    }

    #[test]
    fn rdma_sub_headers_round_trip() {
        let key = RemoteKey { id: 1, secret: 2 };
        let put = PutHeader {
            op_id: 5,
            remote_addr: 0x1000,
            key,
        };
        assert_eq!(PutHeader::parse(&put.encode()), Ok(put));
        let ack = PutAck {
            op_id: 5,
            status: RdmaStatus::OutOfRange,
        };
        assert_eq!(PutAck::parse(&ack.encode()), Ok(ack));
        let get = GetRequest {
            op_id: 6,
            remote_addr: 0x2000,
            key,
            length: 99,
            reply_addr: 0x7000_0010,
        };
        assert_eq!(GetRequest::parse(&get.encode()), Ok(get));
        let resp = GetResponse {
            op_id: 6,
            status: RdmaStatus::Ok,
            offset: 64,
        };
        assert_eq!(GetResponse::parse(&resp.encode()), Ok(resp));
    }

    /// The wire layout itself, byte for byte: every field little-endian in
    /// declaration order, a status as its code then four zero bytes.
    #[test]
    fn rdma_sub_header_layouts_are_pinned() {
        fn le(words: &[u64]) -> alloc::vec::Vec<u8> {
            words.iter().flat_map(|w| w.to_le_bytes()).collect()
        }
        let key = RemoteKey {
            id: 0x1111_2222_3333_4444,
            secret: 0x5555_6666_7777_8888,
        };
        let (op, addr) = (0x0102_0304_0506_0708, 0x7fff_0000_1000);
        let put = PutHeader {
            op_id: op,
            remote_addr: addr,
            key,
        };
        assert_eq!(put.encode()[..], le(&[op, addr, key.id, key.secret])[..]);
        let ack = PutAck {
            op_id: op,
            status: RdmaStatus::AccessDenied,
        };
        assert_eq!(ack.encode()[..], le(&[op, 2])[..]);
        let get = GetRequest {
            op_id: op,
            remote_addr: addr,
            key,
            length: 4096,
            reply_addr: addr + 16,
        };
        assert_eq!(
            get.encode()[..],
            le(&[op, addr, key.id, key.secret, 4096, addr + 16])[..]
        );
        let resp = GetResponse {
            op_id: op,
            status: RdmaStatus::Deregistered,
            offset: 64,
        };
        assert_eq!(resp.encode()[..], le(&[op, 4, 64])[..]);
        assert_eq!(
            [
                PutHeader::LEN,
                PutAck::LEN,
                GetRequest::LEN,
                GetResponse::LEN
            ],
            [32, 16, 48, 24]
        );
    }

    #[test]
    fn rdma_sub_headers_check_length() {
        let long = [0u8; 64];
        for (len, parse) in [
            (
                PutHeader::LEN,
                (|b| PutHeader::parse(b).map(|_| ())) as fn(&[u8]) -> Result<(), RdmaHeaderError>,
            ),
            (PutAck::LEN, |b| PutAck::parse(b).map(|_| ())),
            (GetRequest::LEN, |b| GetRequest::parse(b).map(|_| ())),
            (GetResponse::LEN, |b| GetResponse::parse(b).map(|_| ())),
        ] {
            assert_eq!(parse(&long[..len]), Ok(()));
            for n in [0, len - 1, len + 1] {
                assert_eq!(
                    parse(&long[..n]),
                    Err(RdmaHeaderError::BadLength { have: n, want: len })
                );
            }
        }
    }

    #[test]
    fn statuses_and_reserved_words_are_checked() {
        let mut ack = PutAck {
            op_id: 1,
            status: RdmaStatus::Ok,
        }
        .encode();
        ack[8] = 9;
        assert_eq!(PutAck::parse(&ack), Err(RdmaHeaderError::UnknownStatus(9)));
        ack[8] = 0;
        ack[13] = 1;
        assert_eq!(PutAck::parse(&ack), Err(RdmaHeaderError::ReservedNotZero));

        let mut resp = GetResponse {
            op_id: 1,
            status: RdmaStatus::Ok,
            offset: 0,
        }
        .encode();
        resp[15] = 1;
        assert_eq!(
            GetResponse::parse(&resp),
            Err(RdmaHeaderError::ReservedNotZero)
        );
        for code in 0..=4 {
            assert_eq!(RdmaStatus::from_code(code).map(|s| s as u32), Some(code));
        }
        assert_eq!(RdmaStatus::from_code(5), None);
    }

    #[test]
    fn errors_display() {
        use alloc::string::ToString;
        let e = FrameError::PayloadTooLong {
            len: 1 << 40,
            max: 8,
        };
        assert!(e.to_string().contains("1099511627776"));
        assert!(FrameError::BadMarker.to_string().contains("out of step"));
        assert!(RdmaStatus::OutOfRange.to_string().contains("outside"));
    }
}
