//! The one-sided layer's messages: atomics, puts and gets executed by
//! the target (for routes without RDMA), their answers, the barrier's
//! notices, and what each process publishes about its symmetric heap.
//!
//! Addresses on the wire are offsets into the target's heap, so that the
//! protocol holds whether or not the heaps sit at the same address.
//!
//! Layouts (little-endian, sizes in bytes): [`AmoRequest`] 40 (`kind, op,
//! width, 0u8, 0u32, request u64, offset u64, operand u64, compare u64`);
//! [`AmoReply`] 24 (`kind, status, 0u16, 0u32, request u64, value u64`);
//! [`BarrierNotice`] 24 (`kind, round, 0u16, 0u32, epoch u64, flags u64`);
//! [`BarrierAbort`] 8 (`kind, 0u8, 0u16, failed u32`);
//! [`PutRequest`] 24 (`kind, 0u8, 0u16, 0u32, request u64, offset u64`)
//! with the data as payload, answered by an [`AmoReply`];
//! [`GetRequest`] 32 (`kind, 0u8, 0u16, 0u32, request u64, offset u64,
//! len u64`); [`GetReply`] 16 (`kind, status, 0u16, 0u32, request u64`)
//! with the data as payload; [`PutBatch`] 16 (`kind, 0u8, 0u16, 0u32,
//! request u64`) with a run of put records as payload (`offset u64, len
//! u32, 0u32`, then the data, zero-padded to a multiple of 8: see
//! [`PutRecords`]), answered by one [`AmoReply`];
//! [`HeapEntry`] 32 plus the key (`version, flags, 0u16, 0u32, base u64,
//! len u64, key_len u32, 0u32, key`). Reserved bytes must be zero.

use alloc::vec::Vec;
use core::fmt;

use crate::wire::codec::{fixed, Fields, Reader, Writer};

code_enum! {
    /// What a one-sided message is.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Kind: u8 {
        /// [`AmoRequest`].
        AmoRequest = 1,
        /// [`AmoReply`].
        AmoReply = 2,
        /// [`BarrierNotice`].
        Barrier = 3,
        /// [`PutRequest`].
        PutRequest = 4,
        /// [`GetRequest`].
        GetRequest = 5,
        /// [`GetReply`].
        GetReply = 6,
        /// [`PutBatch`].
        PutBatch = 7,
        /// [`BarrierAbort`].
        BarrierAbort = 8,
    }
}

code_enum! {
    /// An atomic operation on one word of the target's heap.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum AmoOp: u8 {
        /// Reads the word.
        Fetch = 1,
        /// Writes `operand`.
        Set = 2,
        /// Writes `operand`, answers the old value.
        Swap = 3,
        /// Writes `operand` if the word equals `compare`; answers the old
        /// value.
        CompareSwap = 4,
        /// Adds `operand` (wrapping), answers the old value.
        FetchAdd = 5,
        /// Ands `operand` in, answers the old value.
        FetchAnd = 6,
        /// Ors `operand` in, answers the old value.
        FetchOr = 7,
        /// Xors `operand` in, answers the old value.
        FetchXor = 8,
    }
}

impl AmoOp {
    /// The word after the operation, from the word before it: the model
    /// every path (a CPU atomic through a mapping, or the target's own)
    /// must agree with. Values are `width` bytes wide, in the low bits.
    pub fn apply(self, width: Width, old: u64, operand: u64, compare: u64) -> u64 {
        let new = match self {
            Self::Fetch => old,
            Self::Set | Self::Swap => operand,
            Self::CompareSwap if old == compare & width.mask() => operand,
            Self::CompareSwap => old,
            Self::FetchAdd => old.wrapping_add(operand),
            Self::FetchAnd => old & operand,
            Self::FetchOr => old | operand,
            Self::FetchXor => old ^ operand,
        };
        new & width.mask()
    }
}

code_enum! {
    /// Width of an atomic's word.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Width: u8 {
        /// 32 bits.
        W32 = 4,
        /// 64 bits.
        W64 = 8,
    }
}

impl Width {
    /// Bytes of the word.
    pub const fn bytes(self) -> u64 {
        self as u64
    }

    /// The bits a value of this width keeps.
    pub const fn mask(self) -> u64 {
        match self {
            Self::W32 => u32::MAX as u64,
            Self::W64 => u64::MAX,
        }
    }
}

code_enum! {
    /// How the target answered an [`AmoRequest`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum AmoStatus: u8 {
        /// Done; the value is the word before the operation.
        Done = 0,
        /// The word is not inside the target's heap.
        OutOfRange = 1,
        /// The word is not aligned to its width.
        Misaligned = 2,
    }
}

/// Why bytes are not a valid one-sided message or heap entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Shorter than its kind's layout.
    Short,
    /// Longer than its kind's layout.
    Trailing,
    /// A kind byte no message has.
    UnknownKind(u8),
    /// An atomic operation no request names.
    UnknownOp(u8),
    /// A width other than 4 or 8.
    UnknownWidth(u8),
    /// A status no reply has.
    UnknownStatus(u8),
    /// A heap entry of another version.
    UnknownVersion(u8),
    /// A reserved byte is not zero.
    Reserved,
    /// An answer to no request of this process's to that peer.
    Unsolicited,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Short => f.write_str("message is shorter than its layout"),
            Self::Trailing => f.write_str("message is longer than its layout"),
            Self::UnknownKind(k) => write!(f, "unknown one-sided message kind {k}"),
            Self::UnknownOp(op) => write!(f, "unknown atomic operation {op}"),
            Self::UnknownWidth(w) => write!(f, "atomic width {w} is neither 4 nor 8"),
            Self::UnknownStatus(s) => write!(f, "unknown atomic status {s}"),
            Self::UnknownVersion(v) => write!(f, "heap entry of unknown version {v}"),
            Self::Reserved => f.write_str("a reserved byte is not zero"),
            Self::Unsolicited => f.write_str("an answer to no request made to that PE"),
        }
    }
}

impl core::error::Error for Malformed {}

/// A decoded one-sided message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// An atomic for the target to execute.
    AmoRequest(AmoRequest),
    /// The target's answer.
    AmoReply(AmoReply),
    /// A barrier notice.
    Barrier(BarrierNotice),
    /// Data for the target to write (the payload).
    PutRequest(PutRequest),
    /// A read for the target to answer.
    GetRequest(GetRequest),
    /// The answer to a read (the data is the payload).
    GetReply(GetReply),
    /// Puts for the target to write (the records are the payload).
    PutBatch(PutBatch),
    /// A barrier that cannot complete.
    BarrierAbort(BarrierAbort),
}

impl Message {
    /// Reads a message header; exactly its layout's bytes. Only puts and
    /// get replies carry a payload ([`Message::carries_payload`]).
    pub fn decode(bytes: &[u8]) -> Result<Message, Malformed> {
        let mut f = Fields::new(Reader::new(bytes), Malformed::Short);
        let kind = f.u8()?;
        let msg = match Kind::from_code(kind).ok_or(Malformed::UnknownKind(kind))? {
            Kind::AmoRequest => {
                let op = f.u8()?;
                let op = AmoOp::from_code(op).ok_or(Malformed::UnknownOp(op))?;
                let width = f.u8()?;
                let width = Width::from_code(width).ok_or(Malformed::UnknownWidth(width))?;
                f.reserved::<5>(Malformed::Reserved)?;
                Message::AmoRequest(AmoRequest {
                    op,
                    width,
                    request: f.u64()?,
                    offset: f.u64()?,
                    operand: f.u64()?,
                    compare: f.u64()?,
                })
            }
            Kind::AmoReply => {
                let status = f.u8()?;
                let status =
                    AmoStatus::from_code(status).ok_or(Malformed::UnknownStatus(status))?;
                f.reserved::<6>(Malformed::Reserved)?;
                Message::AmoReply(AmoReply {
                    status,
                    request: f.u64()?,
                    value: f.u64()?,
                })
            }
            Kind::Barrier => {
                let round = f.u8()?;
                f.reserved::<6>(Malformed::Reserved)?;
                Message::Barrier(BarrierNotice {
                    round,
                    epoch: f.u64()?,
                    flags: f.u64()?,
                })
            }
            Kind::PutRequest => {
                f.reserved::<7>(Malformed::Reserved)?;
                Message::PutRequest(PutRequest {
                    request: f.u64()?,
                    offset: f.u64()?,
                })
            }
            Kind::GetRequest => {
                f.reserved::<7>(Malformed::Reserved)?;
                Message::GetRequest(GetRequest {
                    request: f.u64()?,
                    offset: f.u64()?,
                    len: f.u64()?,
                })
            }
            Kind::GetReply => {
                let status = f.u8()?;
                let status =
                    AmoStatus::from_code(status).ok_or(Malformed::UnknownStatus(status))?;
                f.reserved::<6>(Malformed::Reserved)?;
                Message::GetReply(GetReply {
                    status,
                    request: f.u64()?,
                })
            }
            Kind::PutBatch => {
                f.reserved::<7>(Malformed::Reserved)?;
                Message::PutBatch(PutBatch { request: f.u64()? })
            }
            Kind::BarrierAbort => {
                f.reserved::<3>(Malformed::Reserved)?;
                Message::BarrierAbort(BarrierAbort { failed: f.u32()? })
            }
        };
        if f.remaining() != 0 {
            return Err(Malformed::Trailing);
        }
        Ok(msg)
    }
}

impl Message {
    /// Whether a message of this kind carries data after its header.
    pub fn carries_payload(&self) -> bool {
        matches!(
            self,
            Self::PutRequest(_) | Self::GetReply(_) | Self::PutBatch(_)
        )
    }
}

/// Data the target writes into its heap (the message's payload), for a
/// route without RDMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutRequest {
    /// The requester's id, echoed in the [`AmoReply`] that acknowledges it.
    pub request: u64,
    /// Where the data goes in the target's heap.
    pub offset: u64,
}

impl PutRequest {
    /// Bytes of the encoded header.
    pub const LEN: usize = 24;

    /// The header bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        fixed(|w| {
            w.u8(Kind::PutRequest as u8);
            w.zeros(7);
            w.u64(self.request);
            w.u64(self.offset);
        })
    }
}

/// Small puts to one target gathered into one message, each a record of
/// the payload ([`PutRecords`]); acknowledged as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutBatch {
    /// The requester's id, echoed in the [`AmoReply`] that acknowledges
    /// every record.
    pub request: u64,
}

impl PutBatch {
    /// Bytes of the encoded header.
    pub const LEN: usize = 16;

    /// The header bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        fixed(|w| {
            w.u8(Kind::PutBatch as u8);
            w.zeros(7);
            w.u64(self.request);
        })
    }
}

/// Bytes of a put record's fixed part: offset, length, reserved.
pub const PUT_RECORD_HEADER: usize = 16;

/// Bytes a put record of `len` data bytes takes in a batch.
pub const fn put_record_len(len: usize) -> usize {
    PUT_RECORD_HEADER + len.next_multiple_of(8)
}

/// Appends to `batch` the record of `data` to write at `offset`.
///
/// # Panics
///
/// If `data` is 4 GiB or longer (a record's length is 32 bits; batches
/// hold small puts).
pub fn push_put_record(batch: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let len = u32::try_from(data.len()).expect("a put record holds less than 4 GiB");
    batch.extend_from_slice(&offset.to_le_bytes());
    batch.extend_from_slice(&len.to_le_bytes());
    batch.extend_from_slice(&[0; 4]);
    batch.extend_from_slice(data);
    let pad = data.len().next_multiple_of(8) - data.len();
    batch.extend_from_slice(&[0; 8][..pad]);
}

/// The records of a [`PutBatch`]'s payload, in order: `(offset, data)`.
/// A record that is cut short or has a reserved byte set ends the walk
/// with its error.
///
/// ```
/// use fireopal_core::wire::shmem::{push_put_record, PutRecords};
/// let mut batch = Vec::new();
/// push_put_record(&mut batch, 64, b"abc");
/// push_put_record(&mut batch, 8, &[]);
/// let records: Vec<_> = PutRecords::new(&batch).collect();
/// assert_eq!(records, [Ok((64, &b"abc"[..])), Ok((8, &b""[..]))]);
/// ```
#[derive(Debug, Clone)]
pub struct PutRecords<'a> {
    rest: &'a [u8],
}

impl<'a> PutRecords<'a> {
    /// The records of `payload`.
    pub fn new(payload: &'a [u8]) -> Self {
        Self { rest: payload }
    }
}

impl<'a> Iterator for PutRecords<'a> {
    type Item = Result<(u64, &'a [u8]), Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let record = (|| {
            let mut f = Fields::new(Reader::new(self.rest), Malformed::Short);
            let offset = f.u64()?;
            let len = f.u32()? as usize;
            f.reserved::<4>(Malformed::Reserved)?;
            let end = PUT_RECORD_HEADER
                .checked_add(len.checked_next_multiple_of(8).ok_or(Malformed::Short)?)
                .filter(|&end| end <= self.rest.len())
                .ok_or(Malformed::Short)?;
            let data = &self.rest[PUT_RECORD_HEADER..PUT_RECORD_HEADER + len];
            Ok((offset, data, end))
        })();
        match record {
            Ok((offset, data, end)) => {
                self.rest = &self.rest[end..];
                Some(Ok((offset, data)))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

/// A read of the target's heap, for a route without RDMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetRequest {
    /// The requester's id, echoed in the [`GetReply`].
    pub request: u64,
    /// Where the data is in the target's heap.
    pub offset: u64,
    /// How many bytes.
    pub len: u64,
}

impl GetRequest {
    /// Bytes of the encoded message.
    pub const LEN: usize = 32;

    /// The message bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        fixed(|w| {
            w.u8(Kind::GetRequest as u8);
            w.zeros(7);
            w.u64(self.request);
            w.u64(self.offset);
            w.u64(self.len);
        })
    }
}

/// The target's answer to a [`GetRequest`]; the data is the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetReply {
    /// Whether the range was read.
    pub status: AmoStatus,
    /// The request answered.
    pub request: u64,
}

impl GetReply {
    /// Bytes of the encoded header.
    pub const LEN: usize = 16;

    /// The header bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        fixed(|w| {
            w.u8(Kind::GetReply as u8);
            w.u8(self.status as u8);
            w.zeros(6);
            w.u64(self.request);
        })
    }
}

/// An atomic the target executes on a word of its heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmoRequest {
    /// The operation.
    pub op: AmoOp,
    /// The word's width.
    pub width: Width,
    /// The requester's id, echoed in the reply.
    pub request: u64,
    /// The word's offset in the target's heap.
    pub offset: u64,
    /// The value written, added or combined.
    pub operand: u64,
    /// The value compared with ([`AmoOp::CompareSwap`]).
    pub compare: u64,
}

impl AmoRequest {
    /// Bytes of the encoded message.
    pub const LEN: usize = 40;

    /// The message bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        fixed(|w| {
            w.u8(Kind::AmoRequest as u8);
            w.u8(self.op as u8);
            w.u8(self.width as u8);
            w.zeros(5);
            w.u64(self.request);
            w.u64(self.offset);
            w.u64(self.operand);
            w.u64(self.compare);
        })
    }
}

/// The target's answer to an [`AmoRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmoReply {
    /// Whether it was done.
    pub status: AmoStatus,
    /// The request answered.
    pub request: u64,
    /// The word before the operation.
    pub value: u64,
}

impl AmoReply {
    /// Bytes of the encoded message.
    pub const LEN: usize = 24;

    /// The message bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        fixed(|w| {
            w.u8(Kind::AmoReply as u8);
            w.u8(self.status as u8);
            w.zeros(6);
            w.u64(self.request);
            w.u64(self.value);
        })
    }
}

/// One round's notice of a dissemination barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarrierNotice {
    /// The round (0 to log2 of the job's size).
    pub round: u8,
    /// Which barrier of the job, counted from 0.
    pub epoch: u64,
    /// Bits the barrier ands across every process.
    pub flags: u64,
}

impl BarrierNotice {
    /// Bytes of the encoded message.
    pub const LEN: usize = 24;

    /// The message bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        fixed(|w| {
            w.u8(Kind::Barrier as u8);
            w.u8(self.round);
            w.zeros(6);
            w.u64(self.epoch);
            w.u64(self.flags);
        })
    }
}

/// Tells every process that no barrier can complete any more because
/// process `failed` failed: the sender saw it fail while waiting for its
/// notice, and stops sending its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarrierAbort {
    /// The process that failed.
    pub failed: u32,
}

impl BarrierAbort {
    /// Bytes of the encoded message.
    pub const LEN: usize = 8;

    /// The message bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        fixed(|w| {
            w.u8(Kind::BarrierAbort as u8);
            w.zeros(3);
            w.u32(self.failed);
        })
    }
}

/// What a process publishes about its symmetric heap: where it is mapped
/// and the remote key of its registration on every module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapEntry<'a> {
    /// The heap sits at the address every process tried first.
    pub at_agreed_address: bool,
    /// Its address in the publishing process.
    pub base: u64,
    /// Its length.
    pub len: u64,
    /// The remote key (`wire::am::encode_lane_keys` of every module's).
    pub key: &'a [u8],
}

impl<'a> HeapEntry<'a> {
    /// The layout's version.
    pub const VERSION: u8 = 1;
    /// Bytes before the key.
    pub const FIXED_LEN: usize = 32;

    /// The entry's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = alloc::vec![0u8; Self::FIXED_LEN + self.key.len()];
        let mut w = Writer::new(&mut out);
        w.u8(Self::VERSION);
        w.u8(u8::from(self.at_agreed_address));
        w.zeros(6);
        w.u64(self.base);
        w.u64(self.len);
        w.u32(u32::try_from(self.key.len()).unwrap_or(u32::MAX));
        w.zeros(4);
        w.bytes(self.key);
        out
    }

    /// Reads an entry; exactly its bytes.
    pub fn decode(bytes: &'a [u8]) -> Result<HeapEntry<'a>, Malformed> {
        let mut f = Fields::new(Reader::new(bytes), Malformed::Short);
        let version = f.u8()?;
        if version != Self::VERSION {
            return Err(Malformed::UnknownVersion(version));
        }
        let at_agreed_address = match f.u8()? {
            0 => false,
            1 => true,
            _ => return Err(Malformed::Reserved),
        };
        f.reserved::<6>(Malformed::Reserved)?;
        let base = f.u64()?;
        let len = f.u64()?;
        let key_len = f.u32()? as usize;
        f.reserved::<4>(Malformed::Reserved)?;
        let key = f.take(key_len)?;
        if f.remaining() != 0 {
            return Err(Malformed::Trailing);
        }
        Ok(HeapEntry {
            at_agreed_address,
            base,
            len,
            key,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn op() -> impl Strategy<Value = AmoOp> {
        (1u8..=8).prop_map(|c| AmoOp::from_code(c).unwrap())
    }

    fn width() -> impl Strategy<Value = Width> {
        prop_oneof![Just(Width::W32), Just(Width::W64)]
    }

    proptest! {
        #[test]
        fn requests_replies_and_notices_round_trip(
            op in op(), width in width(), request: u64, offset: u64, operand: u64,
            compare: u64, value: u64, round: u8, epoch: u64, flags: u64,
        ) {
            let req = AmoRequest { op, width, request, offset, operand, compare };
            prop_assert_eq!(Message::decode(&req.encode()), Ok(Message::AmoRequest(req)));
            let rep = AmoReply { status: AmoStatus::Done, request, value };
            prop_assert_eq!(Message::decode(&rep.encode()), Ok(Message::AmoReply(rep)));
            let b = BarrierNotice { round, epoch, flags };
            prop_assert_eq!(Message::decode(&b.encode()), Ok(Message::Barrier(b)));
            let a = BarrierAbort { failed: offset as u32 };
            prop_assert_eq!(Message::decode(&a.encode()), Ok(Message::BarrierAbort(a)));
            let p = PutRequest { request, offset };
            prop_assert_eq!(Message::decode(&p.encode()), Ok(Message::PutRequest(p)));
            let g = GetRequest { request, offset, len: operand };
            prop_assert_eq!(Message::decode(&g.encode()), Ok(Message::GetRequest(g)));
            let r = GetReply { status: AmoStatus::OutOfRange, request };
            prop_assert_eq!(Message::decode(&r.encode()), Ok(Message::GetReply(r)));
            prop_assert!(Message::GetReply(r).carries_payload());
            let b = PutBatch { request };
            prop_assert_eq!(Message::decode(&b.encode()), Ok(Message::PutBatch(b)));
            prop_assert!(Message::PutBatch(b).carries_payload());
            prop_assert!(!Message::GetRequest(g).carries_payload());
        }

        #[test]
        fn heap_entries_round_trip(
            fixed: bool, base: u64, len: u64, key in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let e = HeapEntry { at_agreed_address: fixed, base, len, key: &key };
            let bytes = e.encode();
            prop_assert_eq!(HeapEntry::decode(&bytes), Ok(e));
        }

        #[test]
        fn any_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Message::decode(&bytes);
            let _ = HeapEntry::decode(&bytes);
        }

        #[test]
        fn every_cut_or_extension_is_refused(op in op(), width in width(), cut in 0usize..40) {
            let req = AmoRequest { op, width, request: 1, offset: 2, operand: 3, compare: 4 };
            let bytes = req.encode();
            prop_assert_eq!(Message::decode(&bytes[..cut]), Err(Malformed::Short));
            let mut long = bytes.to_vec();
            long.push(0);
            prop_assert_eq!(Message::decode(&long), Err(Malformed::Trailing));
        }

        #[test]
        fn operations_keep_their_width(op in op(), width in width(), old: u64, operand: u64) {
            let old = old & width.mask();
            let new = op.apply(width, old, operand, old);
            prop_assert_eq!(new & !width.mask(), 0);
        }
    }

    #[test]
    fn the_model_of_each_operation() {
        let w = Width::W64;
        assert_eq!(AmoOp::FetchAdd.apply(w, u64::MAX, 2, 0), 1);
        assert_eq!(
            AmoOp::FetchAdd.apply(Width::W32, u64::from(u32::MAX), 1, 0),
            0
        );
        assert_eq!(AmoOp::CompareSwap.apply(w, 5, 9, 5), 9);
        assert_eq!(AmoOp::CompareSwap.apply(w, 5, 9, 6), 5);
        assert_eq!(AmoOp::FetchAnd.apply(w, 0b1100, 0b1010, 0), 0b1000);
        assert_eq!(AmoOp::FetchOr.apply(w, 0b1100, 0b1010, 0), 0b1110);
        assert_eq!(AmoOp::FetchXor.apply(w, 0b1100, 0b1010, 0), 0b0110);
        assert_eq!(AmoOp::Swap.apply(w, 1, 2, 0), 2);
        assert_eq!(AmoOp::Fetch.apply(w, 1, 2, 0), 1);
    }

    #[test]
    fn reserved_bytes_and_unknown_codes_are_refused() {
        let req = AmoRequest {
            op: AmoOp::Fetch,
            width: Width::W64,
            request: 0,
            offset: 0,
            operand: 0,
            compare: 0,
        };
        let mut bytes = req.encode();
        bytes[4] = 1;
        assert_eq!(Message::decode(&bytes), Err(Malformed::Reserved));
        let mut bytes = req.encode();
        bytes[2] = 3;
        assert_eq!(Message::decode(&bytes), Err(Malformed::UnknownWidth(3)));
        assert_eq!(Message::decode(&[9]), Err(Malformed::UnknownKind(9)));
        assert_eq!(
            HeapEntry::decode(&[2; 40]),
            Err(Malformed::UnknownVersion(2))
        );
    }

    proptest! {
        #[test]
        fn put_records_round_trip_and_any_cut_is_an_error(
            puts in proptest::collection::vec((any::<u64>(), proptest::collection::vec(any::<u8>(), 0..40)), 0..8),
            cut: usize,
        ) {
            let mut batch = Vec::new();
            for (offset, data) in &puts {
                push_put_record(&mut batch, *offset, data);
            }
            let want: usize = puts.iter().map(|(_, d)| put_record_len(d.len())).sum();
            prop_assert_eq!(batch.len(), want);
            let got: Vec<(u64, Vec<u8>)> = PutRecords::new(&batch)
                .map(|r| r.map(|(o, d)| (o, d.to_vec())))
                .collect::<Result<_, _>>()
                .unwrap();
            prop_assert_eq!(&got, &puts);
            // A payload cut inside a record ends in an error, not a panic.
            if !batch.is_empty() {
                let cut = cut % batch.len();
                let ends: Vec<usize> = puts
                    .iter()
                    .scan(0, |at, (_, d)| { *at += put_record_len(d.len()); Some(*at) })
                    .collect();
                let walked: Vec<_> = PutRecords::new(&batch[..cut]).collect();
                if ends.contains(&cut) || cut == 0 {
                    prop_assert!(walked.iter().all(|r| r.is_ok()));
                } else {
                    prop_assert_eq!(walked.last(), Some(&Err(Malformed::Short)));
                }
            }
        }
    }

    #[test]
    fn a_put_record_with_a_reserved_byte_set_is_refused() {
        let mut batch = Vec::new();
        push_put_record(&mut batch, 16, b"data");
        batch[12] = 1;
        let walked: Vec<_> = PutRecords::new(&batch).collect();
        assert_eq!(walked, [Err(Malformed::Reserved)]);
    }
}
