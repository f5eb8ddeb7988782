//! Control messages of the `shm` transport, remote keys and published
//! addresses: fixed little-endian layouts, decoded with checks.
//!
//! Control messages travel as fast-box entries or queue fragments of the
//! matching [`Kind`](super::Kind); their data starts with the fixed part
//! below, followed (for rendezvous) by the active-message header or (for
//! emulated RDMA) by the bytes moved.

use super::{Malformed, Reader, Writer};

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
    fn write<const N: usize>(&self, w: &mut Writer<N>, at: usize) {
        w.u64(at, self.id);
        w.u64(at + 8, self.file_id);
        w.u32(at + 16, self.fd);
        w.u64(at + 24, self.base);
        w.u64(at + 32, self.len);
    }

    fn read(r: &Reader<'_>, at: usize) -> Result<Self, Malformed> {
        r.reserved(at + 20..at + 24)?;
        let s = SegmentRef {
            id: r.u64(at),
            file_id: r.u64(at + 8),
            fd: r.u32(at + 16),
            base: r.u64(at + 24),
            len: r.u64(at + 32),
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
    /// The payload's checksum ([`super::sum::payload`]) when the two ends
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
        let mut w = Writer::<RTS_LEN>::new();
        w.u64(0, self.id);
        w.u64(8, self.len);
        match self.source {
            Source::Segment { seg, offset } => {
                w.u8(16, 1);
                seg.write(&mut w, 24);
                w.u64(24 + SEGMENT_REF_LEN, offset);
            }
            Source::Address(addr) => {
                w.u8(16, 2);
                w.u64(24 + SEGMENT_REF_LEN, addr);
            }
        }
        if let Some(sum) = self.sum {
            w.u8(17, RTS_SUM);
            w.u64(32 + SEGMENT_REF_LEN, sum);
        }
        w.buf
    }

    /// Decodes a request; the payload must lie inside its segment, or
    /// its address range must not wrap.
    pub fn decode(bytes: &[u8]) -> Result<Rts, Malformed> {
        let r = Reader::new(bytes, RTS_LEN)?;
        let id = r.u64(0);
        let len = r.u64(8);
        let at = r.u64(24 + SEGMENT_REF_LEN);
        r.reserved(18..24)?;
        let sum = match r.u8(17) {
            0 => {
                r.reserved(32 + SEGMENT_REF_LEN..RTS_LEN)?;
                None
            }
            RTS_SUM => Some(r.u64(32 + SEGMENT_REF_LEN)),
            _ => return Err(Malformed::Inconsistent("unknown rendezvous flags")),
        };
        let source = match r.u8(16) {
            1 => {
                let seg = SegmentRef::read(&r, 24)?;
                if at.checked_add(len).is_none_or(|end| end > seg.len) {
                    return Err(Malformed::OutOfRange("rendezvous payload in its segment"));
                }
                Source::Segment { seg, offset: at }
            }
            2 => {
                r.reserved(24..24 + SEGMENT_REF_LEN)?;
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
        let mut w = Writer::<FIN_LEN>::new();
        w.u64(0, self.id);
        w.u32(8, self.status as u32);
        w.buf
    }

    /// Decodes the message.
    pub fn decode(bytes: &[u8]) -> Result<Fin, Malformed> {
        let r = Reader::exact(bytes, FIN_LEN)?;
        r.reserved(12..16)?;
        Ok(Fin {
            id: r.u64(0),
            status: Status::from_code(r.u32(8)).ok_or(BAD_STATUS)?,
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
        let mut w = Writer::<UNMAP_LEN>::new();
        w.u64(0, self.id);
        w.u64(8, self.base);
        w.u64(16, self.len);
        w.buf
    }

    /// Decodes the notice.
    pub fn decode(bytes: &[u8]) -> Result<Unmap, Malformed> {
        let r = Reader::exact(bytes, UNMAP_LEN)?;
        let u = Unmap {
            id: r.u64(0),
            base: r.u64(8),
            len: r.u64(16),
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
        let mut w = Writer::<GET_REQUEST_LEN>::new();
        w.u64(0, self.id);
        w.u64(8, self.addr);
        w.u64(16, self.len);
        w.u64(24, self.reg);
        w.buf
    }

    /// Decodes the request.
    pub fn decode(bytes: &[u8]) -> Result<GetRequest, Malformed> {
        let r = Reader::exact(bytes, GET_REQUEST_LEN)?;
        let g = GetRequest {
            id: r.u64(0),
            addr: r.u64(8),
            len: r.u64(16),
            reg: r.u64(24),
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
        let mut w = Writer::<GET_DATA_LEN>::new();
        w.u64(0, self.id);
        w.u64(8, self.offset);
        w.u32(16, self.status as u32);
        w.buf
    }

    /// Decodes the fixed part.
    pub fn decode(bytes: &[u8]) -> Result<GetData, Malformed> {
        let r = Reader::new(bytes, GET_DATA_LEN)?;
        r.reserved(20..24)?;
        Ok(GetData {
            id: r.u64(0),
            offset: r.u64(8),
            status: Status::from_code(r.u32(16)).ok_or(BAD_STATUS)?,
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
        let mut w = Writer::<PUT_DATA_LEN>::new();
        w.u64(0, self.id);
        w.u64(8, self.addr);
        w.u64(16, self.total);
        w.u64(24, self.offset);
        w.u64(32, self.reg);
        w.buf
    }

    /// Decodes the fixed part; `chunk` is the number of bytes that follow,
    /// which must lie inside the put.
    pub fn decode(bytes: &[u8], chunk: usize) -> Result<PutData, Malformed> {
        let r = Reader::new(bytes, PUT_DATA_LEN)?;
        let p = PutData {
            id: r.u64(0),
            addr: r.u64(8),
            total: r.u64(16),
            offset: r.u64(24),
            reg: r.u64(32),
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
        let mut w = Writer::<PUT_ACK_LEN>::new();
        w.u64(0, self.id);
        w.u32(8, self.status as u32);
        w.buf
    }

    /// Decodes the acknowledgement.
    pub fn decode(bytes: &[u8]) -> Result<PutAck, Malformed> {
        let r = Reader::exact(bytes, PUT_ACK_LEN)?;
        r.reserved(12..16)?;
        Ok(PutAck {
            id: r.u64(0),
            status: Status::from_code(r.u32(8)).ok_or(BAD_STATUS)?,
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
        let mut w = Writer::<REMOTE_KEY_LEN>::new();
        w.u8(0, KEY_VERSION);
        w.u8(1, self.access);
        w.u8(2, u8::from(self.segment.is_some()));
        w.u32(4, self.pid);
        w.u64(8, self.reg);
        w.u64(16, self.base);
        w.u64(24, self.len);
        if let Some(seg) = &self.segment {
            seg.write(&mut w, 32);
        }
        w.buf
    }

    /// Decodes a key: exactly [`REMOTE_KEY_LEN`] bytes, a non-empty range
    /// that, with a segment, lies inside it.
    pub fn decode(bytes: &[u8]) -> Result<RemoteKey, Malformed> {
        let r = Reader::exact(bytes, REMOTE_KEY_LEN)?;
        if r.u8(0) != KEY_VERSION {
            return Err(Malformed::BadMagic);
        }
        r.reserved(3..4)?;
        let segment = match r.u8(2) {
            0 => {
                r.reserved(32..REMOTE_KEY_LEN)?;
                None
            }
            1 => Some(SegmentRef::read(&r, 32)?),
            k => return Err(Malformed::BadKind(k)),
        };
        let key = RemoteKey {
            reg: r.u64(8),
            pid: r.u32(4),
            access: r.u8(1),
            base: r.u64(16),
            len: r.u64(24),
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
    /// them on what it reads ([`super::sum`]); peers that differ do not
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
        let mut w = Writer::<ADDRESS_LEN>::new();
        w.u64(0, ADDRESS_MAGIC);
        w.u32(8, self.rank);
        w.u32(12, self.local);
        w.u32(16, self.pid);
        w.u32(20, self.fd);
        w.u64(24, self.seg_len);
        w.u64(32, self.file_id);
        w.u64(40, self.probe);
        w.bytes(48, &self.boot_id);
        w.u8(64, if self.checksum { ADDRESS_CHECKSUM } else { 0 });
        w.buf
    }

    /// Decodes an address: exactly [`ADDRESS_LEN`] bytes with the magic.
    pub fn decode(bytes: &[u8]) -> Result<Address, Malformed> {
        if bytes.len() != ADDRESS_LEN {
            return Err(Malformed::Truncated {
                need: ADDRESS_LEN,
                have: bytes.len(),
            });
        }
        let r = Reader::exact(bytes, ADDRESS_LEN)?;
        if r.u64(0) != ADDRESS_MAGIC {
            return Err(Malformed::BadMagic);
        }
        r.reserved(65..ADDRESS_LEN)?;
        let checksum = match r.u8(64) {
            0 => false,
            ADDRESS_CHECKSUM => true,
            _ => return Err(Malformed::Inconsistent("unknown address flags")),
        };
        Ok(Address {
            rank: r.u32(8),
            local: r.u32(12),
            pid: r.u32(16),
            fd: r.u32(20),
            seg_len: r.u64(24),
            file_id: r.u64(32),
            probe: r.u64(40),
            boot_id: r.bytes(48),
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
