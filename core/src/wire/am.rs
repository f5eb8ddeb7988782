//! Active-message protocol logic shared by every transport: the directory
//! of endpoint addresses a process publishes, the header of messages
//! split into several fragments, and the notices the two ends of a route
//! of several modules exchange about its lanes.
//!
//! Both are read from bytes another process wrote, so parsing checks every
//! length before it trusts it and never panics.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use crate::wire::codec::{fixed, Fields, Reader};

/// Why published or received bytes do not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// The bytes end before a field does.
    Truncated,
    /// A count or length is beyond the protocol's limits.
    TooLarge,
    /// Bytes remain after the last entry.
    TrailingBytes,
    /// A name is not UTF-8.
    BadName,
    /// The format version is unknown.
    UnknownVersion(u8),
    /// A kind byte names nothing this protocol defines.
    UnknownKind(u8),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("truncated"),
            Self::TooLarge => f.write_str("length beyond the protocol's limit"),
            Self::TrailingBytes => f.write_str("trailing bytes"),
            Self::BadName => f.write_str("name is not UTF-8"),
            Self::UnknownVersion(v) => write!(f, "unknown format version {v}"),
            Self::UnknownKind(k) => write!(f, "unknown kind {k}"),
        }
    }
}

impl core::error::Error for ParseError {}

/// The fields of untrusted `bytes`, read with the crate's one codec; a
/// read past the end is [`ParseError::Truncated`].
fn fields(bytes: &[u8]) -> Fields<'_, ParseError> {
    Fields::new(Reader::new(bytes), ParseError::Truncated)
}

/// Version of the directory format.
pub const DIRECTORY_VERSION: u8 = 1;
/// Most modules one process may publish.
pub const MAX_DIRECTORY_ENTRIES: usize = 256;
/// Longest address one module may publish.
pub const MAX_ADDRESS_LEN: usize = 4096;

/// One module's published address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectoryEntry<'a> {
    /// Component name, e.g. `tcp`.
    pub component: &'a str,
    /// Module index within the component (interface, device or link).
    pub index: u16,
    /// The module's address bytes.
    pub address: &'a [u8],
}

/// Why a directory cannot be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodeError {
    /// More than [`MAX_DIRECTORY_ENTRIES`] entries.
    TooManyEntries,
    /// A component name longer than 255 bytes.
    NameTooLong,
    /// An address longer than [`MAX_ADDRESS_LEN`].
    AddressTooLong,
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooManyEntries => write!(f, "more than {MAX_DIRECTORY_ENTRIES} modules"),
            Self::NameTooLong => f.write_str("component name longer than 255 bytes"),
            Self::AddressTooLong => write!(f, "address longer than {MAX_ADDRESS_LEN} bytes"),
        }
    }
}

impl core::error::Error for EncodeError {}

/// Encodes the directory a process publishes:
/// `version u8, count u16, { name_len u8, name, index u16, addr_len u16, addr }*`.
pub fn encode_directory(entries: &[DirectoryEntry<'_>]) -> Result<Vec<u8>, EncodeError> {
    if entries.len() > MAX_DIRECTORY_ENTRIES {
        return Err(EncodeError::TooManyEntries);
    }
    let mut out = Vec::new();
    out.push(DIRECTORY_VERSION);
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    for e in entries {
        let name_len = u8::try_from(e.component.len()).map_err(|_| EncodeError::NameTooLong)?;
        if e.address.len() > MAX_ADDRESS_LEN {
            return Err(EncodeError::AddressTooLong);
        }
        out.push(name_len);
        out.extend_from_slice(e.component.as_bytes());
        out.extend_from_slice(&e.index.to_le_bytes());
        out.extend_from_slice(&(e.address.len() as u16).to_le_bytes());
        out.extend_from_slice(e.address);
    }
    Ok(out)
}

/// Parses a directory published by a peer.
///
/// ```
/// use fireopal_core::wire::am::{decode_directory, encode_directory, DirectoryEntry};
/// let e = DirectoryEntry { component: "tcp", index: 1, address: b"10.0.0.1:5000" };
/// let bytes = encode_directory(&[e]).unwrap();
/// assert_eq!(decode_directory(&bytes).unwrap(), [e]);
/// assert!(decode_directory(&bytes[..bytes.len() - 1]).is_err());
/// ```
pub fn decode_directory(bytes: &[u8]) -> Result<Vec<DirectoryEntry<'_>>, ParseError> {
    let mut r = fields(bytes);
    let version = r.u8()?;
    if version != DIRECTORY_VERSION {
        return Err(ParseError::UnknownVersion(version));
    }
    let count = usize::from(r.u16()?);
    if count > MAX_DIRECTORY_ENTRIES {
        return Err(ParseError::TooLarge);
    }
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        let name_len = usize::from(r.u8()?);
        let component = core::str::from_utf8(r.take(name_len)?).map_err(|_| ParseError::BadName)?;
        let index = r.u16()?;
        let addr_len = usize::from(r.u16()?);
        if addr_len > MAX_ADDRESS_LEN {
            return Err(ParseError::TooLarge);
        }
        let address = r.take(addr_len)?;
        entries.push(DirectoryEntry {
            component,
            index,
            address,
        });
    }
    if r.remaining() != 0 {
        return Err(ParseError::TrailingBytes);
    }
    Ok(entries)
}

/// First byte of a remote key holding the keys of one registration on
/// several modules (the lanes of a route), which
/// [`encode_lane_keys`] writes.
pub const LANE_KEYS_MAGIC: u8 = 0xC5;

/// Encodes the remote keys of one registration on several modules:
/// [`LANE_KEYS_MAGIC`], then a directory whose entries' addresses are the
/// modules' keys, so that a peer finds the key of each of its modules by
/// component and index.
///
/// ```
/// use fireopal_core::wire::am::{decode_lane_keys, encode_lane_keys, DirectoryEntry};
/// let keys = [
///     DirectoryEntry { component: "tcp", index: 0, address: &[1; 16] },
///     DirectoryEntry { component: "tcp", index: 1, address: &[2; 16] },
/// ];
/// let bytes = encode_lane_keys(&keys).unwrap();
/// assert_eq!(decode_lane_keys(&bytes).unwrap(), keys);
/// assert_eq!(decode_lane_keys(&[7; 16]), None); // one module's own key
/// ```
pub fn encode_lane_keys(keys: &[DirectoryEntry<'_>]) -> Result<Vec<u8>, EncodeError> {
    let mut out = vec![LANE_KEYS_MAGIC];
    out.extend_from_slice(&encode_directory(keys)?);
    Ok(out)
}

/// The keys in a remote key written by [`encode_lane_keys`], or `None`
/// if the bytes are not exactly such a key (a single module's key).
pub fn decode_lane_keys(bytes: &[u8]) -> Option<Vec<DirectoryEntry<'_>>> {
    match bytes.split_first() {
        Some((&LANE_KEYS_MAGIC, rest)) => decode_directory(rest).ok(),
        _ => None,
    }
}

/// What one end of a route of several modules (lanes) tells the other,
/// in the header of an unsequenced message.
///
/// The receiver of sequenced messages says how far it has delivered, so
/// that the sender can drop the copies it keeps for replay; and when it
/// loses a lane, which one, and from which number the sender must send
/// again.
///
/// ```
/// use fireopal_core::wire::am::LaneNotice;
/// let lost = LaneNotice::LaneLost { next: 7, component: "tcp", index: 1 };
/// assert_eq!(LaneNotice::parse(&lost.encode()), Ok(lost));
/// assert!(LaneNotice::parse(&[9, 0, 0, 0, 0]).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaneNotice<'a> {
    /// Every message numbered before `next` was delivered.
    Delivered {
        /// The number the receiver waits for.
        next: u32,
    },
    /// The receiver's module `component`\[`index`\] lost its lane to the
    /// sender: messages may be lost on it, so the sender stops using that
    /// lane and sends again every message it keeps from `next` on.
    LaneLost {
        /// The number the receiver waits for.
        next: u32,
        /// Component of the lost lane's module (the same on both ends).
        component: &'a str,
        /// Its index within the component.
        index: u16,
    },
}

impl<'a> LaneNotice<'a> {
    const DELIVERED: u8 = 1;
    const LANE_LOST: u8 = 2;

    /// The notice's bytes.
    pub fn encode(&self) -> Vec<u8> {
        match *self {
            Self::Delivered { next } => {
                let mut out = vec![Self::DELIVERED];
                out.extend_from_slice(&next.to_le_bytes());
                out
            }
            Self::LaneLost {
                next,
                component,
                index,
            } => {
                // Component names are short; a longer one is cut, and then
                // names no lane of the peer's.
                let name = &component.as_bytes()[..component.len().min(usize::from(u8::MAX))];
                let mut out = vec![Self::LANE_LOST];
                out.extend_from_slice(&next.to_le_bytes());
                out.extend_from_slice(&index.to_le_bytes());
                out.push(name.len() as u8);
                out.extend_from_slice(name);
                out
            }
        }
    }

    /// Parses a notice a peer sent.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ParseError> {
        let mut r = fields(bytes);
        let kind = r.u8()?;
        let next = r.u32()?;
        let notice = match kind {
            Self::DELIVERED => Self::Delivered { next },
            Self::LANE_LOST => {
                let index = r.u16()?;
                let len = r.u8()?;
                let name = r.take(usize::from(len))?;
                let component = core::str::from_utf8(name).map_err(|_| ParseError::BadName)?;
                Self::LaneLost {
                    next,
                    component,
                    index,
                }
            }
            other => return Err(ParseError::UnknownKind(other)),
        };
        if r.remaining() != 0 {
            return Err(ParseError::TrailingBytes);
        }
        Ok(notice)
    }
}

/// Header of the first fragment of a message too large for one fragment:
/// the message's own tag, its header length and its payload length. The
/// message's header follows, then the first part of the payload; later
/// fragments carry only payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstFragment {
    /// Tag of the whole message.
    pub tag: u8,
    /// Length of the message's header (carried in this fragment).
    pub header_len: u16,
    /// Length of the whole payload.
    pub payload_len: u64,
}

impl FirstFragment {
    /// Encoded size.
    pub const LEN: usize = 11;

    /// Encodes into the first [`Self::LEN`] bytes of the fragment header.
    pub fn encode(&self) -> [u8; Self::LEN] {
        fixed(|w| {
            w.u8(self.tag);
            w.u16(self.header_len);
            w.u64(self.payload_len);
        })
    }

    /// Parses a first-fragment header, checking the payload length against
    /// `max_payload` (the receiver's limit on message size) and that the
    /// message's header fits in what was received.
    pub fn parse(header: &[u8], max_payload: u64) -> Result<(Self, &[u8]), ParseError> {
        let mut r = fields(header);
        let tag = r.u8()?;
        let header_len = r.u16()?;
        let payload_len = r.u64()?;
        if payload_len > max_payload {
            return Err(ParseError::TooLarge);
        }
        let inner = r.take(usize::from(header_len))?;
        if r.remaining() != 0 {
            return Err(ParseError::TrailingBytes);
        }
        Ok((
            Self {
                tag,
                header_len,
                payload_len,
            },
            inner,
        ))
    }
}

/// Reassembles one peer's fragmented message; fragments of a message
/// arrive consecutively and in order on one module.
#[derive(Debug, Default)]
pub struct Reassembly {
    current: Option<(u8, Vec<u8>, Vec<u8>, u64)>,
}

/// What a fragment completed.
#[derive(Debug, PartialEq, Eq)]
pub enum Reassembled {
    /// More fragments are needed.
    Partial,
    /// The whole message: tag, header, payload.
    Complete(u8, Vec<u8>, Vec<u8>),
}

/// A fragment that does not fit the message being reassembled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReassemblyError {
    /// The first-fragment header is malformed.
    Header(ParseError),
    /// A first fragment arrived while another message was incomplete.
    Interleaved,
    /// A continuation arrived with no message in progress.
    Orphan,
    /// More payload arrived than announced.
    Overrun,
    /// No memory for the announced length (up to the receiver's limit).
    NoMemory(u64),
}

impl fmt::Display for ReassemblyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header(e) => write!(f, "bad first fragment: {e}"),
            Self::Interleaved => f.write_str("new message started before the last one ended"),
            Self::Orphan => f.write_str("continuation fragment without a first fragment"),
            Self::Overrun => f.write_str("more payload than announced"),
            Self::NoMemory(n) => write!(f, "no memory for a message of {n} bytes"),
        }
    }
}

impl core::error::Error for ReassemblyError {}

impl Reassembly {
    /// Whether a message is half received.
    pub fn in_progress(&self) -> bool {
        self.current.is_some()
    }

    /// Takes a first fragment.
    pub fn first(
        &mut self,
        header: &[u8],
        payload: &[u8],
        max_payload: u64,
    ) -> Result<Reassembled, ReassemblyError> {
        if self.current.is_some() {
            return Err(ReassemblyError::Interleaved);
        }
        let (first, inner) =
            FirstFragment::parse(header, max_payload).map_err(ReassemblyError::Header)?;
        if payload.len() as u64 > first.payload_len {
            return Err(ReassemblyError::Overrun);
        }
        let mut data = Vec::new();
        // The announced length is bounded by `max_payload`; reserve it once,
        // and refuse the message rather than abort when memory is short.
        usize::try_from(first.payload_len)
            .ok()
            .and_then(|n| data.try_reserve_exact(n).ok())
            .ok_or(ReassemblyError::NoMemory(first.payload_len))?;
        data.extend_from_slice(payload);
        self.current = Some((first.tag, inner.to_vec(), data, first.payload_len));
        Ok(self.finish_if_complete())
    }

    /// Takes a continuation fragment.
    pub fn next(&mut self, payload: &[u8]) -> Result<Reassembled, ReassemblyError> {
        let Some((_, _, data, total)) = self.current.as_mut() else {
            return Err(ReassemblyError::Orphan);
        };
        if data.len() as u64 + payload.len() as u64 > *total {
            self.current = None;
            return Err(ReassemblyError::Overrun);
        }
        data.extend_from_slice(payload);
        Ok(self.finish_if_complete())
    }

    fn finish_if_complete(&mut self) -> Reassembled {
        match &self.current {
            Some((_, _, data, total)) if data.len() as u64 == *total => {
                let Some((tag, header, data, _)) = self.current.take() else {
                    return Reassembled::Partial;
                };
                Reassembled::Complete(tag, header, data)
            }
            _ => Reassembled::Partial,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_round_trip_and_rejects() {
        let entries = [
            DirectoryEntry {
                component: "self",
                index: 0,
                address: &[1, 0, 0, 0],
            },
            DirectoryEntry {
                component: "tcp",
                index: 3,
                address: b"",
            },
        ];
        let bytes = encode_directory(&entries).unwrap();
        assert_eq!(decode_directory(&bytes).unwrap(), entries);
        for cut in 0..bytes.len() {
            assert!(decode_directory(&bytes[..cut]).is_err(), "cut {cut}");
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert_eq!(decode_directory(&extra), Err(ParseError::TrailingBytes));
        let mut v2 = bytes.clone();
        v2[0] = 2;
        assert_eq!(decode_directory(&v2), Err(ParseError::UnknownVersion(2)));
        assert_eq!(
            decode_directory(&[1, 0xff, 0xff]),
            Err(ParseError::TooLarge)
        );
        let long = [0u8; MAX_ADDRESS_LEN + 1];
        let e = DirectoryEntry {
            component: "x",
            index: 0,
            address: &long,
        };
        assert_eq!(encode_directory(&[e]), Err(EncodeError::AddressTooLong));
    }

    #[test]
    fn lane_notices_round_trip_and_reject_what_is_not_one() {
        let notices = [
            LaneNotice::Delivered { next: u32::MAX },
            LaneNotice::LaneLost {
                next: 3,
                component: "tcp",
                index: 2,
            },
        ];
        for n in notices {
            let bytes = n.encode();
            assert_eq!(LaneNotice::parse(&bytes), Ok(n));
            for cut in 0..bytes.len() {
                assert!(LaneNotice::parse(&bytes[..cut]).is_err(), "cut {cut}");
            }
            let mut extra = bytes.clone();
            extra.push(0);
            assert_eq!(LaneNotice::parse(&extra), Err(ParseError::TrailingBytes));
        }
        assert_eq!(
            LaneNotice::parse(&[0, 1, 0, 0, 0]),
            Err(ParseError::UnknownKind(0))
        );
        let bad_name = [2, 0, 0, 0, 0, 0, 0, 1, 0xFF];
        assert_eq!(LaneNotice::parse(&bad_name), Err(ParseError::BadName));
    }

    #[test]
    fn reassembly() {
        let mut r = Reassembly::default();
        let mut h = FirstFragment {
            tag: 9,
            header_len: 2,
            payload_len: 5,
        }
        .encode()
        .to_vec();
        h.extend_from_slice(b"hd");
        assert_eq!(r.first(&h, b"ab", 100), Ok(Reassembled::Partial));
        assert_eq!(r.first(&h, b"ab", 100), Err(ReassemblyError::Interleaved));
        assert_eq!(r.next(b"cd"), Ok(Reassembled::Partial));
        assert_eq!(
            r.next(b"e"),
            Ok(Reassembled::Complete(9, b"hd".to_vec(), b"abcde".to_vec()))
        );
        assert_eq!(r.next(b"x"), Err(ReassemblyError::Orphan));
        assert_eq!(r.first(&h, b"abcdef", 100), Err(ReassemblyError::Overrun));
        assert!(matches!(
            r.first(&h, b"", 4),
            Err(ReassemblyError::Header(ParseError::TooLarge))
        ));
        assert!(matches!(
            r.first(&h[..5], b"", 100),
            Err(ReassemblyError::Header(ParseError::Truncated))
        ));
        r.first(&h, b"abc", 100).unwrap();
        assert_eq!(r.next(b"xyz"), Err(ReassemblyError::Overrun));
        assert!(!r.in_progress());
    }

    #[test]
    fn an_announced_length_memory_cannot_hold_is_an_error_not_an_abort() {
        let mut r = Reassembly::default();
        let huge = FirstFragment {
            tag: 1,
            header_len: 0,
            payload_len: u64::MAX / 2,
        }
        .encode();
        assert_eq!(
            r.first(&huge, b"", u64::MAX),
            Err(ReassemblyError::NoMemory(u64::MAX / 2))
        );
        assert!(!r.in_progress());
    }
}
