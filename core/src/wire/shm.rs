//! Control messages of the `shm` transport, remote keys and published
//! addresses: fixed little-endian layouts, decoded with checks.
//!
//! Control messages travel as fast-box entries or queue fragments of the
//! matching [`Kind`](crate::shmq::Kind); their data starts with the fixed part
//! below, followed (for rendezvous) by the active-message header or (for
//! emulated RDMA) by the bytes moved.

use crate::shmq::{exact, fields, Malformed, RESERVED};
use crate::wire::codec::{fixed, Fields, Reader, Writer};

/// A segment as its owner describes it to a peer: enough for the peer to
/// fetch the file (owner's descriptor number), check it is the right one
/// (inode number and length), and place the owner's addresses in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegmentRef {
    /// Owner's id of the segment, never reused by that owner.
    pub id: u64,
    /// Inode number of the segment's file.
    pub file_id: u64,
    /// The owner's file descriptor number of the segment.
    pub fd: u32,
    /// Where the owner mapped the segment.
    pub base: u64,
    /// Bytes of the segment.
    pub len: u64,
}

/// Encoded bytes of a [`SegmentRef`].
pub const SEGMENT_REF_LEN: usize = 40;

impl SegmentRef {
    fn write(&self, w: &mut Writer<'_>) {
        w.u64(self.id);
        w.u64(self.file_id);
        w.u32(self.fd);
        w.zeros(4);
        w.u64(self.base);
        w.u64(self.len);
    }

    /// Reads the [`SEGMENT_REF_LEN`] bytes of `bytes` (a length the caller
    /// checked).
    fn read(bytes: &[u8]) -> Result<Self, Malformed> {
        let mut f = Fields::new(
            Reader::new(bytes),
            Malformed::Truncated {
                need: SEGMENT_REF_LEN,
                have: bytes.len(),
            },
        );
        let id = f.u64()?;
        let file_id = f.u64()?;
        let fd = f.u32()?;
        f.reserved::<4>(RESERVED)?;
        let s = SegmentRef {
            id,
            file_id,
            fd,
            base: f.u64()?,
            len: f.u64()?,
        };
        if s.len == 0 || s.base.checked_add(s.len).is_none() {
            return Err(Malformed::OutOfRange("segment range"));
        }
        Ok(s)
    }

    /// Whether `[addr, addr + len)` (owner's addresses) lies inside the
    /// segment; the offset of `addr` in it if so.
    pub fn offset_of(&self, addr: u64, len: u64) -> Option<u64> {
        let off = addr.checked_sub(self.base)?;
        (off.checked_add(len)? <= self.len).then_some(off)
    }
}

/// Where the receiver of a rendezvous finds the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// At `offset` in a segment of the sender.
    Segment {
        /// The segment.
        seg: SegmentRef,
        /// Offset of the first byte.
        offset: u64,
    },
    /// At an address of the sender, to be read with
    /// `process_vm_readv`.
    Address(u64),
}

/// Rendezvous request: a payload of `len` bytes waits at `source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rts {
    /// Sender's id of the transfer, echoed in the [`Fin`].
    pub id: u64,
    /// Bytes of payload.
    pub len: u64,
    /// Where the payload is.
    pub source: Source,
    /// The payload's checksum ([`crate::shmq::sum::payload`]) when the two ends
    /// use checksums.
    pub sum: Option<u64>,
}

/// Encoded bytes of an [`Rts`] (before the active-message header).
pub const RTS_LEN: usize = 24 + SEGMENT_REF_LEN + 16;
/// Flag of an [`Rts`]: a payload checksum follows the source.
const RTS_SUM: u8 = 1;

impl Rts {
    /// Encodes the request.
    pub fn encode(&self) -> [u8; RTS_LEN] {
        fixed(|w| {
            w.u64(self.id);
            w.u64(self.len);
            let (kind, seg, at) = match self.source {
                Source::Segment { seg, offset } => (1, Some(seg), offset),
                Source::Address(addr) => (2, None, addr),
            };
            w.u8(kind);
            w.u8(if self.sum.is_some() { RTS_SUM } else { 0 });
            w.zeros(6);
            match seg {
                Some(seg) => seg.write(w),
                None => w.zeros(SEGMENT_REF_LEN),
            }
            w.u64(at);
            w.u64(self.sum.unwrap_or(0));
        })
    }

    /// Decodes a request; the payload must lie inside its segment, or
    /// its address range must not wrap.
    pub fn decode(bytes: &[u8]) -> Result<Rts, Malformed> {
        let mut f = fields(bytes, RTS_LEN)?;
        let id = f.u64()?;
        let len = f.u64()?;
        let kind = f.u8()?;
        let flags = f.u8()?;
        f.reserved::<6>(RESERVED)?;
        let seg = f.take(SEGMENT_REF_LEN)?;
        let at = f.u64()?;
        let sum_field = f.u64()?;
        let sum = match flags {
            0 => {
                if sum_field != 0 {
                    return Err(RESERVED);
                }
                None
            }
            RTS_SUM => Some(sum_field),
            _ => return Err(Malformed::Inconsistent("unknown rendezvous flags")),
        };
        let source = match kind {
            1 => {
                let seg = SegmentRef::read(seg)?;
                if at.checked_add(len).is_none_or(|end| end > seg.len) {
                    return Err(Malformed::OutOfRange("rendezvous payload in its segment"));
                }
                Source::Segment { seg, offset: at }
            }
            2 => {
                if seg.iter().any(|&b| b != 0) {
                    return Err(RESERVED);
                }
                if at.checked_add(len).is_none() {
                    return Err(Malformed::OutOfRange("rendezvous payload address"));
                }
                Source::Address(at)
            }
            k => return Err(Malformed::BadKind(k)),
        };
        Ok(Rts {
            id,
            len,
            source,
            sum,
        })
    }
}

/// A status code that is not a [`Status`].
const BAD_STATUS: Malformed = Malformed::OutOfRange("status code");

code_enum! {
    /// Outcome carried by completions of the control protocol.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Status: u32 {
        /// Done.
        Ok = 0,
        /// The target refused: no such registration, no such access, or the
        /// range is outside it.
        Refused = 1,
        /// The receiver could not fetch the data (mapping or read failed).
        FetchFailed = 2,
    }
}

/// Rendezvous done: the receiver read the payload of transfer `id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fin {
    /// The transfer, as in its [`Rts`].
    pub id: u64,
    /// Whether the receiver got the payload.
    pub status: Status,
}

/// Encoded bytes of a [`Fin`].
pub const FIN_LEN: usize = 16;

impl Fin {
    /// Encodes the message.
    pub fn encode(&self) -> [u8; FIN_LEN] {
        fixed(|w| {
            w.u64(self.id);
            w.u32(self.status as u32);
        })
    }

    /// Decodes the message.
    pub fn decode(bytes: &[u8]) -> Result<Fin, Malformed> {
        let mut f = exact(bytes, FIN_LEN)?;
        let id = f.u64()?;
        let status = f.u32()?;
        f.reserved::<4>(RESERVED)?;
        Ok(Fin {
            id,
            status: Status::from_code(status).ok_or(BAD_STATUS)?,
        })
    }
}

/// The owner unmapped segment `id` at `[base, base + len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unmap {
    /// Owner's id of the segment.
    pub id: u64,
    /// Where the owner had it mapped.
    pub base: u64,
    /// Bytes.
    pub len: u64,
}

/// Encoded bytes of an [`Unmap`].
pub const UNMAP_LEN: usize = 24;

impl Unmap {
    /// Encodes the notice.
    pub fn encode(&self) -> [u8; UNMAP_LEN] {
        fixed(|w| {
            w.u64(self.id);
            w.u64(self.base);
            w.u64(self.len);
        })
    }

    /// Decodes the notice.
    pub fn decode(bytes: &[u8]) -> Result<Unmap, Malformed> {
        let mut f = exact(bytes, UNMAP_LEN)?;
        let u = Unmap {
            id: f.u64()?,
            base: f.u64()?,
            len: f.u64()?,
        };
        if u.len == 0 || u.base.checked_add(u.len).is_none() {
            return Err(Malformed::OutOfRange("unmapped range"));
        }
        Ok(u)
    }
}

/// Emulated RDMA read: send `len` bytes at `addr` of registration `reg`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetRequest {
    /// Requester's id, echoed in the answers.
    pub id: u64,
    /// Target's address.
    pub addr: u64,
    /// Bytes wanted.
    pub len: u64,
    /// Target's registration id.
    pub reg: u64,
}

/// Encoded bytes of a [`GetRequest`].
pub const GET_REQUEST_LEN: usize = 32;

impl GetRequest {
    /// Encodes the request.
    pub fn encode(&self) -> [u8; GET_REQUEST_LEN] {
        fixed(|w| {
            w.u64(self.id);
            w.u64(self.addr);
            w.u64(self.len);
            w.u64(self.reg);
        })
    }

    /// Decodes the request.
    pub fn decode(bytes: &[u8]) -> Result<GetRequest, Malformed> {
        let mut f = exact(bytes, GET_REQUEST_LEN)?;
        let g = GetRequest {
            id: f.u64()?,
            addr: f.u64()?,
            len: f.u64()?,
            reg: f.u64()?,
        };
        if g.addr.checked_add(g.len).is_none() {
            return Err(Malformed::OutOfRange("requested range"));
        }
        Ok(g)
    }
}

/// Bytes (following the fixed part) answering a [`GetRequest`], placed at
/// `offset` of the requested range; or the refusal of the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetData {
    /// The request.
    pub id: u64,
    /// Offset of these bytes in the requested range.
    pub offset: u64,
    /// [`Status::Ok`], or why the request was refused (then no bytes
    /// follow and no more answers come).
    pub status: Status,
}

/// Encoded bytes of a [`GetData`]'s fixed part.
pub const GET_DATA_LEN: usize = 24;

impl GetData {
    /// Encodes the fixed part.
    pub fn encode(&self) -> [u8; GET_DATA_LEN] {
        fixed(|w| {
            w.u64(self.id);
            w.u64(self.offset);
            w.u32(self.status as u32);
        })
    }

    /// Decodes the fixed part.
    pub fn decode(bytes: &[u8]) -> Result<GetData, Malformed> {
        let mut f = fields(bytes, GET_DATA_LEN)?;
        let id = f.u64()?;
        let offset = f.u64()?;
        let status = f.u32()?;
        f.reserved::<4>(RESERVED)?;
        Ok(GetData {
            id,
            offset,
            status: Status::from_code(status).ok_or(BAD_STATUS)?,
        })
    }
}

/// Emulated RDMA write of the bytes that follow, at `offset` of the range
/// `[addr, addr + total)` of registration `reg`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutData {
    /// Requester's id, echoed in the [`PutAck`].
    pub id: u64,
    /// Target's address of the whole put.
    pub addr: u64,
    /// Bytes of the whole put.
    pub total: u64,
    /// Offset of these bytes in it.
    pub offset: u64,
    /// Target's registration id.
    pub reg: u64,
}

/// Encoded bytes of a [`PutData`]'s fixed part.
pub const PUT_DATA_LEN: usize = 40;

impl PutData {
    /// Encodes the fixed part.
    pub fn encode(&self) -> [u8; PUT_DATA_LEN] {
        fixed(|w| {
            w.u64(self.id);
            w.u64(self.addr);
            w.u64(self.total);
            w.u64(self.offset);
            w.u64(self.reg);
        })
    }

    /// Decodes the fixed part; `chunk` is the number of bytes that follow,
    /// which must lie inside the put.
    pub fn decode(bytes: &[u8], chunk: usize) -> Result<PutData, Malformed> {
        let mut f = fields(bytes, PUT_DATA_LEN)?;
        let p = PutData {
            id: f.u64()?,
            addr: f.u64()?,
            total: f.u64()?,
            offset: f.u64()?,
            reg: f.u64()?,
        };
        if p.addr.checked_add(p.total).is_none()
            || p.offset
                .checked_add(chunk as u64)
                .is_none_or(|e| e > p.total)
        {
            return Err(Malformed::OutOfRange("put range"));
        }
        Ok(p)
    }
}

/// The target of a put wrote all of it (or refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutAck {
    /// The put.
    pub id: u64,
    /// Outcome.
    pub status: Status,
}

/// Encoded bytes of a [`PutAck`].
pub const PUT_ACK_LEN: usize = 16;

impl PutAck {
    /// Encodes the acknowledgement.
    pub fn encode(&self) -> [u8; PUT_ACK_LEN] {
        fixed(|w| {
            w.u64(self.id);
            w.u32(self.status as u32);
        })
    }

    /// Decodes the acknowledgement.
    pub fn decode(bytes: &[u8]) -> Result<PutAck, Malformed> {
        let mut f = exact(bytes, PUT_ACK_LEN)?;
        let id = f.u64()?;
        let status = f.u32()?;
        f.reserved::<4>(RESERVED)?;
        Ok(PutAck {
            id,
            status: Status::from_code(status).ok_or(BAD_STATUS)?,
        })
    }
}

/// What a peer needs to read or write a registration: the owner's
/// registration id and range, the rights, and the segment holding it when
/// it lies in one (then the peer maps it; otherwise it uses
/// `process_vm_readv`/`writev` or asks the owner).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteKey {
    /// Owner's registration id.
    pub reg: u64,
    /// Owner's process id.
    pub pid: u32,
    /// Rights granted to peers, as [`crate::regcache::Access`] bits.
    pub access: u8,
    /// First byte registered.
    pub base: u64,
    /// Bytes registered.
    pub len: u64,
    /// The segment holding the registration, if any.
    pub segment: Option<SegmentRef>,
}

/// Encoded bytes of a [`RemoteKey`].
pub const REMOTE_KEY_LEN: usize = 32 + SEGMENT_REF_LEN;
const KEY_VERSION: u8 = 1;

impl RemoteKey {
    /// Encodes the key.
    pub fn encode(&self) -> [u8; REMOTE_KEY_LEN] {
        fixed(|w| {
            w.u8(KEY_VERSION);
            w.u8(self.access);
            w.u8(u8::from(self.segment.is_some()));
            w.zeros(1);
            w.u32(self.pid);
            w.u64(self.reg);
            w.u64(self.base);
            w.u64(self.len);
            if let Some(seg) = &self.segment {
                seg.write(w);
            }
        })
    }

    /// Decodes a key: exactly [`REMOTE_KEY_LEN`] bytes, a non-empty range
    /// that, with a segment, lies inside it.
    pub fn decode(bytes: &[u8]) -> Result<RemoteKey, Malformed> {
        let mut f = exact(bytes, REMOTE_KEY_LEN)?;
        if f.u8()? != KEY_VERSION {
            return Err(Malformed::BadMagic);
        }
        let access = f.u8()?;
        let has_segment = f.u8()?;
        f.reserved::<1>(RESERVED)?;
        let pid = f.u32()?;
        let reg = f.u64()?;
        let base = f.u64()?;
        let len = f.u64()?;
        let seg = f.take(SEGMENT_REF_LEN)?;
        let segment = match has_segment {
            0 => {
                if seg.iter().any(|&b| b != 0) {
                    return Err(RESERVED);
                }
                None
            }
            1 => Some(SegmentRef::read(seg)?),
            k => return Err(Malformed::BadKind(k)),
        };
        let key = RemoteKey {
            reg,
            pid,
            access,
            base,
            len,
            segment,
        };
        if key.len == 0 || key.base.checked_add(key.len).is_none() {
            return Err(Malformed::OutOfRange("registered range"));
        }
        if let Some(seg) = &key.segment {
            if seg.offset_of(key.base, key.len).is_none() {
                return Err(Malformed::Inconsistent("registration outside its segment"));
            }
        }
        Ok(key)
    }

    /// Whether `[addr, addr + len)` lies inside the registration.
    pub fn covers(&self, addr: u64, len: u64) -> bool {
        addr >= self.base
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.base + self.len)
    }
}

/// The address a module publishes: how node-local peers open its queue
/// segment, and how they check they opened the right one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Address {
    /// Rank of the publisher.
    pub rank: u32,
    /// Its local index on the node.
    pub local: u32,
    /// Its process id.
    pub pid: u32,
    /// Its descriptor number of the queue segment.
    pub fd: u32,
    /// Bytes of the queue segment.
    pub seg_len: u64,
    /// Inode number of the queue segment.
    pub file_id: u64,
    /// An address in the publisher holding the queue segment's magic
    /// number, read by peers to probe `process_vm_readv`.
    pub probe: u64,
    /// The node's boot id, so that processes of different nodes never
    /// take each other for neighbours.
    pub boot_id: [u8; 16],
    /// Whether the publisher puts checksums on what it writes and expects
    /// them on what it reads ([`crate::shmq::sum`]); peers that differ do not
    /// talk over shared memory.
    pub checksum: bool,
}

/// Encoded bytes of an [`Address`].
pub const ADDRESS_LEN: usize = 72;
const ADDRESS_MAGIC: u64 = u64::from_le_bytes(*b"FOSHMAD1");
/// Flag of an [`Address`]: checksums on.
const ADDRESS_CHECKSUM: u8 = 1;

impl Address {
    /// Encodes the address.
    pub fn encode(&self) -> [u8; ADDRESS_LEN] {
        fixed(|w| {
            w.u64(ADDRESS_MAGIC);
            w.u32(self.rank);
            w.u32(self.local);
            w.u32(self.pid);
            w.u32(self.fd);
            w.u64(self.seg_len);
            w.u64(self.file_id);
            w.u64(self.probe);
            w.bytes(&self.boot_id);
            w.u8(if self.checksum { ADDRESS_CHECKSUM } else { 0 });
        })
    }

    /// Decodes an address: exactly [`ADDRESS_LEN`] bytes with the magic.
    pub fn decode(bytes: &[u8]) -> Result<Address, Malformed> {
        if bytes.len() != ADDRESS_LEN {
            return Err(Malformed::Truncated {
                need: ADDRESS_LEN,
                have: bytes.len(),
            });
        }
        let mut f = exact(bytes, ADDRESS_LEN)?;
        if f.u64()? != ADDRESS_MAGIC {
            return Err(Malformed::BadMagic);
        }
        let rank = f.u32()?;
        let local = f.u32()?;
        let pid = f.u32()?;
        let fd = f.u32()?;
        let seg_len = f.u64()?;
        let file_id = f.u64()?;
        let probe = f.u64()?;
        let boot_id = f.array()?;
        let flags = f.u8()?;
        f.reserved::<7>(RESERVED)?;
        let checksum = match flags {
            0 => false,
            ADDRESS_CHECKSUM => true,
            _ => return Err(Malformed::Inconsistent("unknown address flags")),
        };
        Ok(Address {
            rank,
            local,
            pid,
            fd,
            seg_len,
            file_id,
            probe,
            boot_id,
            checksum,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg() -> SegmentRef {
        SegmentRef {
            id: 5,
            file_id: 99,
            fd: 12,
            base: 0x7f00_0000_0000,
            len: 1 << 20,
        }
    }

    #[test]
    fn rts_round_trips_and_checks_its_range() {
        let a = Rts {
            id: 1,
            len: 4096,
            source: Source::Segment {
                seg: seg(),
                offset: 8192,
            },
            sum: None,
        };
        assert_eq!(Rts::decode(&a.encode()), Ok(a));
        let b = Rts {
            id: 2,
            len: 10,
            source: Source::Address(0x1000),
            sum: None,
        };
        assert_eq!(Rts::decode(&b.encode()), Ok(b));
        let past = Rts {
            len: (1 << 20) - 8191,
            ..a
        };
        assert!(Rts::decode(&past.encode()).is_err());
        let wrap = Rts {
            len: 2,
            source: Source::Address(u64::MAX),
            ..b
        };
        assert!(Rts::decode(&wrap.encode()).is_err());
        let mut bad_kind = a.encode();
        bad_kind[16] = 9;
        assert_eq!(Rts::decode(&bad_kind), Err(Malformed::BadKind(9)));
        assert!(Rts::decode(&a.encode()[..RTS_LEN - 1]).is_err());
    }

    #[test]
    fn rts_carries_a_payload_checksum_only_when_flagged() {
        let a = Rts {
            id: 1,
            len: 64,
            source: Source::Address(0x1000),
            sum: Some(0x0123_4567_89ab_cdef),
        };
        assert_eq!(Rts::decode(&a.encode()), Ok(a));
        let mut unflagged = a.encode();
        unflagged[17] = 0; // the sum left where none may be
        assert!(matches!(
            Rts::decode(&unflagged),
            Err(Malformed::Inconsistent(_))
        ));
        let mut unknown = a.encode();
        unknown[17] = 2;
        assert!(Rts::decode(&unknown).is_err());
        let zero = Rts { sum: Some(0), ..a };
        assert_eq!(Rts::decode(&zero.encode()), Ok(zero));
    }

    #[test]
    fn small_messages_round_trip() {
        let f = Fin {
            id: 9,
            status: Status::FetchFailed,
        };
        assert_eq!(Fin::decode(&f.encode()), Ok(f));
        let mut bad = f.encode();
        bad[8] = 7;
        assert!(Fin::decode(&bad).is_err());
        let u = Unmap {
            id: 3,
            base: 4096,
            len: 8192,
        };
        assert_eq!(Unmap::decode(&u.encode()), Ok(u));
        assert!(Unmap::decode(&Unmap { len: 0, ..u }.encode()).is_err());
        let g = GetRequest {
            id: 1,
            addr: 2,
            len: 3,
            reg: 4,
        };
        assert_eq!(GetRequest::decode(&g.encode()), Ok(g));
        let d = GetData {
            id: 1,
            offset: 64,
            status: Status::Ok,
        };
        assert_eq!(GetData::decode(&d.encode()), Ok(d));
        let p = PutData {
            id: 1,
            addr: 4096,
            total: 100,
            offset: 60,
            reg: 2,
        };
        assert_eq!(PutData::decode(&p.encode(), 40), Ok(p));
        assert!(PutData::decode(&p.encode(), 41).is_err());
        let a = PutAck {
            id: 4,
            status: Status::Refused,
        };
        assert_eq!(PutAck::decode(&a.encode()), Ok(a));
    }

    #[test]
    fn remote_keys_round_trip_and_stay_inside_their_segment() {
        let k = RemoteKey {
            reg: 7,
            pid: 100,
            access: 0b110,
            base: seg().base + 4096,
            len: 8192,
            segment: Some(seg()),
        };
        assert_eq!(RemoteKey::decode(&k.encode()), Ok(k));
        assert!(k.covers(k.base, 8192));
        assert!(!k.covers(k.base, 8193));
        assert!(!k.covers(k.base - 1, 1));
        let plain = RemoteKey { segment: None, ..k };
        assert_eq!(RemoteKey::decode(&plain.encode()), Ok(plain));
        let outside = RemoteKey {
            base: seg().base + (1 << 20),
            ..k
        };
        assert!(RemoteKey::decode(&outside.encode()).is_err());
        assert!(RemoteKey::decode(&k.encode()[..10]).is_err());
    }

    #[test]
    fn addresses_round_trip() {
        let a = Address {
            rank: 3,
            local: 1,
            pid: 77,
            fd: 9,
            seg_len: 1 << 21,
            file_id: 1234,
            probe: 0x7fff_0000,
            boot_id: [5; 16],
            checksum: false,
        };
        assert_eq!(Address::decode(&a.encode()), Ok(a));
        let mut bad = a.encode();
        bad[0] ^= 1;
        assert_eq!(Address::decode(&bad), Err(Malformed::BadMagic));
        assert!(Address::decode(&a.encode()[..71]).is_err());
        let summed = Address {
            checksum: true,
            ..a
        };
        assert_eq!(Address::decode(&summed.encode()), Ok(summed));
        let mut flags = a.encode();
        flags[64] = 2;
        assert!(Address::decode(&flags).is_err());
    }

    #[test]
    fn messages_nothing_follows_refuse_extra_bytes_and_reserved_bits() {
        let fin = Fin {
            id: 7,
            status: Status::Refused,
        }
        .encode();
        let mut long = fin.to_vec();
        long.push(0);
        assert_eq!(
            Fin::decode(&long),
            Err(Malformed::TrailingBytes {
                len: FIN_LEN,
                have: FIN_LEN + 1
            })
        );
        let mut padded = fin;
        padded[13] = 1;
        assert!(matches!(
            Fin::decode(&padded),
            Err(Malformed::Inconsistent(_))
        ));

        let key = RemoteKey {
            reg: 1,
            pid: 2,
            access: 3,
            base: 0x1000,
            len: 64,
            segment: None,
        }
        .encode();
        let mut stray = key;
        stray[40] = 9; // in the room of the absent segment
        assert!(matches!(
            RemoteKey::decode(&stray),
            Err(Malformed::Inconsistent(_))
        ));
        let mut long = key.to_vec();
        long.extend_from_slice(&[0; 8]);
        assert!(matches!(
            RemoteKey::decode(&long),
            Err(Malformed::TrailingBytes { .. })
        ));

        // A rendezvous request is followed by the message header: extra
        // bytes are that header, not an error.
        let rts = Rts {
            id: 1,
            len: 8,
            source: Source::Address(0x1000),
            sum: None,
        }
        .encode();
        let mut with_header = rts.to_vec();
        with_header.extend_from_slice(b"hdr");
        assert!(Rts::decode(&with_header).is_ok());
        let mut stray = rts;
        stray[30] = 1; // in the room of the absent segment
        assert!(matches!(
            Rts::decode(&stray),
            Err(Malformed::Inconsistent(_))
        ));
    }
}
