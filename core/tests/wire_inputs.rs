//! Every parser of bytes that come from another process, fed bytes an
//! attacker or a broken peer could send.
//!
//! Two properties, for each message format:
//!
//! - any bytes, of any length, give `Ok` or `Err` and never a panic;
//! - what a parser accepts re-encodes to exactly the bytes it was given, so
//!   no field is ignored on the way in (a reserved byte, a high bit) and
//!   one value has one encoding.
//!
//! Inputs are random bytes, and valid encodings with a few bytes replaced,
//! which reach the checks behind a format's magic number or marker that
//! random bytes seldom get past.

use fireopal_core::shmq::layout::{Header, HeaderExpect, Layout, LayoutParams, HEADER_LEN};
use fireopal_core::shmq::{fbox, fifo};
use fireopal_core::wire::am::{decode_directory, encode_directory, FirstFragment, LaneNotice};
use fireopal_core::wire::p2p;
use fireopal_core::wire::shm;
use fireopal_core::wire::tcp::address::{
    encode_addresses, parse_addresses, AddressEntry, InterfaceName,
};
use fireopal_core::wire::tcp::frame::{
    FrameHeader, FrameKind, FrameLimits, GetRequest, GetResponse, PutAck, PutHeader, RdmaStatus,
    RemoteKey,
};
use fireopal_core::wire::tcp::handshake::{Challenge, Hello, Proof, Verdict};
use proptest::prelude::*;

/// Up to `n` replaced bytes of `seed`: (position, new byte) pairs.
fn edits(n: usize) -> impl Strategy<Value = Vec<(usize, u8)>> {
    proptest::collection::vec((any::<usize>(), any::<u8>()), 1..=n)
}

fn edited(seed: &[u8], edits: &[(usize, u8)]) -> Vec<u8> {
    let mut out = seed.to_vec();
    for &(at, byte) in edits {
        if !out.is_empty() {
            let i = at % out.len();
            out[i] = byte;
        }
    }
    out
}

/// Arbitrary bytes, often of a length near `len`.
fn bytes_near(len: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..=len + 8),
        proptest::collection::vec(any::<u8>(), len..=len),
    ]
}

const LIMITS: FrameLimits = FrameLimits {
    max_header_len: 256,
    max_payload_len: 1 << 20,
};

fn segment() -> shm::SegmentRef {
    shm::SegmentRef {
        id: 3,
        file_id: 77,
        fd: 9,
        base: 0x7f00_0000_0000,
        len: 1 << 20,
    }
}

fn shm_address() -> shm::Address {
    shm::Address {
        rank: 1,
        local: 1,
        pid: 4242,
        fd: 5,
        seg_len: 1 << 22,
        file_id: 99,
        probe: 0x5555_0000_1000,
        boot_id: [7; 16],
        checksum: true,
    }
}

fn tcp_entries() -> Vec<AddressEntry> {
    let entry = |name: &str, ip: &str, port| AddressEntry {
        name: InterfaceName::new(name).expect("valid name"),
        ip: ip.parse().expect("valid ip"),
        prefix_len: 8,
        port,
        link: 0,
        loopback: name == "lo",
    };
    vec![entry("lo", "127.0.0.1", 4000), entry("eth0", "::1", 4001)]
}

/// Checks one fixed-length format: no panic on `bytes`, and canonical when
/// accepted.
macro_rules! canonical {
    ($bytes:expr, $parse:expr, $encode:expr) => {{
        let bytes: &[u8] = &$bytes;
        if let Ok(v) = $parse(bytes) {
            let again = $encode(&v);
            prop_assert_eq!(&again[..], bytes, "accepted {:?}", v);
        }
    }};
}

/// The same for the fixed part of a message that bytes follow (a
/// rendezvous request's header, emulated RDMA data): what was accepted is
/// the encoding of the first bytes.
macro_rules! canonical_prefix {
    ($bytes:expr, $parse:expr, $encode:expr) => {{
        let bytes: &[u8] = &$bytes;
        if let Ok(v) = $parse(bytes) {
            let again = $encode(&v);
            prop_assert_eq!(
                Some(&again[..]),
                bytes.get(..again.len()),
                "accepted {:?}",
                v
            );
        }
    }};
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn tcp_frame_headers(edits in edits(4), raw in bytes_near(16)) {
        let seeds = [
            FrameHeader::active(7, 12, 4096).encode(),
            FrameHeader::active(7, 12, 4096).with_pad(20).encode(),
            FrameHeader::rdma(FrameKind::Put, 1 << 16).encode(),
            FrameHeader::rdma(FrameKind::GetResponse, 0).encode(),
        ];
        for seed in seeds {
            prop_assert!(FrameHeader::parse(&seed, &LIMITS).is_ok());
            let input = edited(&seed, &edits);
            canonical!(input, |b| FrameHeader::parse(b, &LIMITS), |h: &FrameHeader| h.encode());
        }
        // Any length: the header is the first 16 bytes, the rest is not its.
        let _ = FrameHeader::parse(&raw, &LIMITS);
    }

    #[test]
    fn tcp_rdma_sub_headers_and_keys(edits in edits(4), raw in bytes_near(40)) {
        let key = RemoteKey { id: 5, secret: 0x1234_5678_9abc_def0 };
        let put = PutHeader { op_id: 1, remote_addr: 0x1000, key }.encode();
        let ack = PutAck { op_id: 1, status: RdmaStatus::AccessDenied }.encode();
        let get = GetRequest { op_id: 2, remote_addr: 0x2000, key, length: 64, reply_addr: 0x3010 }.encode();
        let resp = GetResponse { op_id: 2, status: RdmaStatus::Ok, offset: 8 }.encode();
        prop_assert!(PutHeader::parse(&put).is_ok() && PutAck::parse(&ack).is_ok());
        prop_assert!(GetRequest::parse(&get).is_ok() && GetResponse::parse(&resp).is_ok());
        for input in [edited(&put, &edits), raw.clone()] {
            canonical!(input, PutHeader::parse, |v: &PutHeader| v.encode());
        }
        for input in [edited(&ack, &edits), raw.clone()] {
            canonical!(input, PutAck::parse, |v: &PutAck| v.encode());
        }
        for input in [edited(&get, &edits), raw.clone()] {
            canonical!(input, GetRequest::parse, |v: &GetRequest| v.encode());
        }
        for input in [edited(&resp, &edits), raw.clone()] {
            canonical!(input, GetResponse::parse, |v: &GetResponse| v.encode());
        }
        for input in [edited(&key.encode(), &edits), raw] {
            canonical!(input, RemoteKey::parse, |v: &RemoteKey| v.encode());
        }
    }

    #[test]
    fn tcp_handshake_messages(edits in edits(4), raw in bytes_near(80)) {
        let hello = Hello {
            link: 0,
            from_rank: 3,
            to_rank: 4,
            from_entry: 1,
            to_entry: 0,
            nonce: [0x11; 32],
        };
        let challenge = Challenge { from_rank: 4, to_rank: 3, nonce: [0x22; 32], mac: [0x33; 32] };
        let proof = Proof { mac: [0x44; 32] };
        prop_assert!(Hello::parse(&hello.encode()).is_ok());
        prop_assert!(Challenge::parse(&challenge.encode()).is_ok());
        prop_assert!(Proof::parse(&proof.encode()).is_ok());
        for input in [edited(&hello.encode(), &edits), raw.clone()] {
            canonical!(input, Hello::parse, |v: &Hello| v.encode());
        }
        for input in [edited(&challenge.encode(), &edits), raw.clone()] {
            canonical!(input, Challenge::parse, |v: &Challenge| v.encode());
        }
        for input in [edited(&proof.encode(), &edits), raw.clone()] {
            canonical!(input, Proof::parse, |v: &Proof| v.encode());
        }
        for seed in [Verdict::Accept, Verdict::Duplicate] {
            for input in [edited(&seed.encode(), &edits), raw.clone()] {
                canonical!(input, Verdict::parse, |v: &Verdict| v.encode());
            }
        }
    }

    #[test]
    fn tcp_address_lists(edits in edits(6), raw in bytes_near(64)) {
        let seed = encode_addresses(&tcp_entries()).expect("valid list");
        prop_assert_eq!(parse_addresses(&seed), Ok(tcp_entries()));
        for input in [edited(&seed, &edits), raw] {
            if let Ok(entries) = parse_addresses(&input) {
                let again = encode_addresses(&entries).expect("parsed entries encode");
                prop_assert_eq!(again, input);
            }
        }
    }

    #[test]
    fn shm_control_messages(edits in edits(4), raw in bytes_near(shm::REMOTE_KEY_LEN)) {
        let seg = segment();
        let rts_seg = shm::Rts { id: 1, len: 4096, source: shm::Source::Segment { seg, offset: 64 }, sum: None };
        let rts_addr = shm::Rts { id: 2, len: 4096, source: shm::Source::Address(0x1000), sum: Some(7) };
        for seed in [rts_seg.encode(), rts_addr.encode()] {
            prop_assert!(shm::Rts::decode(&seed).is_ok());
            for input in [edited(&seed, &edits), raw.clone()] {
                canonical_prefix!(input, shm::Rts::decode, |v: &shm::Rts| v.encode());
            }
        }
        let fin = shm::Fin { id: 1, status: shm::Status::Ok };
        for input in [edited(&fin.encode(), &edits), raw.clone()] {
            canonical!(input, shm::Fin::decode, |v: &shm::Fin| v.encode());
        }
        let unmap = shm::Unmap { id: 3, base: 0x1000, len: 4096 };
        for input in [edited(&unmap.encode(), &edits), raw.clone()] {
            canonical!(input, shm::Unmap::decode, |v: &shm::Unmap| v.encode());
        }
        let get = shm::GetRequest { id: 4, addr: 0x2000, len: 100, reg: 8 };
        for input in [edited(&get.encode(), &edits), raw.clone()] {
            canonical!(input, shm::GetRequest::decode, |v: &shm::GetRequest| v.encode());
        }
        let data = shm::GetData { id: 4, offset: 0, status: shm::Status::Ok };
        for input in [edited(&data.encode(), &edits), raw.clone()] {
            canonical_prefix!(input, shm::GetData::decode, |v: &shm::GetData| v.encode());
        }
        let put = shm::PutData { id: 5, addr: 0x3000, total: 1000, offset: 500, reg: 9 };
        for input in [edited(&put.encode(), &edits), raw.clone()] {
            canonical_prefix!(input, |b| shm::PutData::decode(b, 500), |v: &shm::PutData| v.encode());
        }
        let ack = shm::PutAck { id: 5, status: shm::Status::Ok };
        for input in [edited(&ack.encode(), &edits), raw.clone()] {
            canonical!(input, shm::PutAck::decode, |v: &shm::PutAck| v.encode());
        }
        for segment in [None, Some(seg)] {
            let key = shm::RemoteKey { reg: 6, pid: 77, access: 3, base: 0x7f00_0000_0000, len: 4096, segment };
            prop_assert_eq!(shm::RemoteKey::decode(&key.encode()), Ok(key));
            for input in [edited(&key.encode(), &edits), raw.clone()] {
                canonical!(input, shm::RemoteKey::decode, |v: &shm::RemoteKey| v.encode());
            }
        }
        prop_assert_eq!(shm::Address::decode(&shm_address().encode()), Ok(shm_address()));
        for input in [edited(&shm_address().encode(), &edits), raw] {
            canonical!(input, shm::Address::decode, |v: &shm::Address| v.encode());
        }
    }

    #[test]
    fn shm_queue_words(word in any::<u64>(), words in any::<[u64; 2]>(), lines in 0u64..64) {
        if let Ok(fbox::Found::Entry(h)) = fbox::decode(word, 2048, lines) {
            prop_assert_eq!(h.encode(), word);
        }
        if let Ok(h) = fifo::FragmentHeader::decode(words, 8192, 4) {
            prop_assert_eq!(h.encode(), words);
        }
    }

    #[test]
    fn active_message_directories_and_fragments(edits in edits(6), raw in bytes_near(48)) {
        let first = FirstFragment { tag: 3, header_len: 4, payload_len: 1 << 20 };
        let mut header = first.encode().to_vec();
        header.extend_from_slice(b"abcd");
        prop_assert!(FirstFragment::parse(&header, 1 << 30).is_ok());
        for input in [edited(&header, &edits), raw.clone()] {
            if let Ok((f, inner)) = FirstFragment::parse(&input, 1 << 30) {
                let mut again = f.encode().to_vec();
                again.extend_from_slice(inner);
                prop_assert_eq!(again, input);
            }
        }
        if let Ok(entries) = decode_directory(&raw) {
            let again = encode_directory(&entries).expect("parsed entries encode");
            prop_assert_eq!(&again, &raw);
        }
        let lost = LaneNotice::LaneLost { next: 9, component: "tcp", index: 1 }.encode();
        for input in [edited(&lost, &edits), raw.clone()] {
            if let Ok(notice) = LaneNotice::parse(&input) {
                prop_assert_eq!(notice.encode(), input);
            }
        }
    }

    #[test]
    fn point_to_point_messages(edits in edits(4), raw in bytes_near(64)) {
        let envelope = p2p::Envelope { context: 3, source: 1, tag: 9, seq: 77 };
        let key = [7u8; 20];
        let rts = p2p::Rts {
            envelope,
            protocol: p2p::RndvProtocol::Get,
            length: 1 << 20,
            sender_request: 5,
            address: 0x1000,
            key: &key,
        };
        let seeds = [
            p2p::Eager { envelope, flags: 0, credits: 4 }.encode().to_vec(),
            rts.encode().expect("a short key encodes"),
            p2p::Cts { sender_request: 1, receiver_request: 2 }.encode().to_vec(),
            p2p::Data { receiver_request: 2, offset: 64 }.encode().to_vec(),
            p2p::Fin { sender_request: 1, status: p2p::FinStatus::Done }.encode().to_vec(),
            p2p::Credit { credits: 8 }.encode().to_vec(),
            p2p::Ack {
                sender_request: 1,
                receiver_request: 2,
                offset: 4096,
                address: 0x2000,
                key: &key,
            }
            .encode()
            .expect("a short key encodes"),
            p2p::PutDone { receiver_request: 2, status: p2p::FinStatus::Done }.encode().to_vec(),
            p2p::Cancel { receiver_request: 3 }.encode().to_vec(),
        ];
        for seed in &seeds {
            prop_assert!(p2p::Message::decode(seed).is_ok());
            for input in [edited(seed, &edits), raw.clone()] {
                // Every message is fixed by its kind and key length: what
                // parses re-encodes to exactly the bytes given.
                if let Ok(m) = p2p::Message::decode(&input) {
                    let again = match m {
                        p2p::Message::Eager(v) => v.encode().to_vec(),
                        p2p::Message::Rts(v) => v.encode().expect("a parsed key encodes"),
                        p2p::Message::Cts(v) => v.encode().to_vec(),
                        p2p::Message::Data(v) => v.encode().to_vec(),
                        p2p::Message::Fin(v) => v.encode().to_vec(),
                        p2p::Message::Credit(v) => v.encode().to_vec(),
                        p2p::Message::Ack(v) => v.encode().expect("a parsed key encodes"),
                        p2p::Message::PutDone(v) => v.encode().to_vec(),
                        p2p::Message::Cancel(v) => v.encode().to_vec(),
                    };
                    prop_assert_eq!(again, input);
                }
            }
        }
    }

    #[test]
    fn shm_segment_headers(edits in edits(4), raw in bytes_near(HEADER_LEN)) {
        let key = [0x5a; 32];
        let params = LayoutParams {
            local_size: 4,
            fbox_bytes: 32 << 10,
            fbox_max_entry: 2048,
            fifo_slots: 128,
            fifo_slot_bytes: 8448,
        };
        let layout = Layout::new(params).expect("valid parameters");
        let owner = Header { params, owner_rank: 2, owner_local: 2, owner_pid: 777, file_id: 31 };
        let expect = HeaderExpect {
            job_key: &key,
            owner_rank: 2,
            owner_local: 2,
            owner_pid: 777,
            file_id: 31,
            file_len: layout.total_len() as u64,
            local_size: 4,
        };
        let seed = layout.encode_header(&owner, &key);
        prop_assert!(Layout::decode_header(&seed, &expect).is_ok());
        for input in [edited(&seed, &edits), raw] {
            if let Ok((l, h)) = Layout::decode_header(&input, &expect) {
                prop_assert_eq!(&l.encode_header(&h, &key)[..], &input[..HEADER_LEN]);
            }
        }
    }
}
