//! Properties of the verbs transport's byte layouts (`wire::verbs`):
//! every valid value round-trips, any bytes parse to `Ok` or `Err`
//! without a panic, what parses re-encodes to the same bytes, and the
//! range checks of a remote key agree with plain arithmetic.

use fireopal_core::wire::verbs::{
    Connect, ConnectKind, FragmentHeader, FragmentKind, LinkLayer, RemoteKey, VerbsAddress,
    VerbsWireError, ADDRESS_LEN, CONNECT_LEN, FRAGMENT_HEADER_LEN, MAX_PSN, MAX_QPN,
    REMOTE_KEY_LEN,
};
use proptest::prelude::*;

/// A job key.
const KEY: [u8; 32] = [0x5a; 32];

fn address() -> impl Strategy<Value = VerbsAddress> {
    (
        prop_oneof![Just(LinkLayer::InfiniBand), Just(LinkLayer::Ethernet)],
        1u8..=255,
        1u8..=5,
        1u16..0xc000,
        any::<u8>(),
        1..=MAX_QPN,
        any::<u32>(),
        0..=MAX_PSN,
        1u16..=u16::MAX,
        FRAGMENT_HEADER_LEN as u32..=u32::MAX,
        any::<[u8; 16]>(),
    )
        .prop_map(
            |(link_layer, port, mtu, lid, gid_index, cm_qpn, qkey, psn, credits, fs, mut gid)| {
                if gid == [0; 16] {
                    gid[0] = 0xfe;
                }
                VerbsAddress {
                    link_layer,
                    port,
                    mtu,
                    lid: if link_layer == LinkLayer::Ethernet {
                        0
                    } else {
                        lid
                    },
                    gid_index,
                    cm_qpn,
                    qkey,
                    psn,
                    credits,
                    fragment_size: fs,
                    gid,
                }
            },
        )
}

fn edited(seed: &[u8], edits: &[(usize, u8)]) -> Vec<u8> {
    let mut out = seed.to_vec();
    for &(at, byte) in edits {
        let i = at % out.len();
        out[i] = byte;
    }
    out
}

fn edits() -> impl Strategy<Value = Vec<(usize, u8)>> {
    proptest::collection::vec((any::<usize>(), any::<u8>()), 1..=4)
}

proptest! {
    #[test]
    fn addresses_round_trip(a in address()) {
        let bytes = a.encode();
        prop_assert_eq!(bytes.len(), ADDRESS_LEN);
        prop_assert_eq!(VerbsAddress::parse(&bytes), Ok(a));
        // Both ends agree on whether a global route is needed.
        prop_assert_eq!(a.needs_global_route(&a), a.link_layer == LinkLayer::Ethernet);
    }

    #[test]
    fn edited_addresses_parse_to_errors_or_re_encode_exactly(a in address(), e in edits()) {
        let bytes = edited(&a.encode(), &e);
        if let Ok(parsed) = VerbsAddress::parse(&bytes) {
            prop_assert_eq!(parsed.encode().to_vec(), bytes.clone());
            prop_assert!(parsed.cm_qpn != 0 && parsed.cm_qpn <= MAX_QPN);
            prop_assert!(parsed.psn <= MAX_PSN);
            prop_assert!((1..=5).contains(&parsed.mtu));
        }
    }

    #[test]
    fn addresses_of_the_wrong_length_are_refused(a in address(), cut in 0usize..ADDRESS_LEN, extra in 1usize..8) {
        let bytes = a.encode();
        prop_assert_eq!(
            VerbsAddress::parse(&bytes[..cut]),
            Err(VerbsWireError::Truncated { need: ADDRESS_LEN, have: cut })
        );
        let mut long = bytes.to_vec();
        long.resize(ADDRESS_LEN + extra, 0);
        prop_assert_eq!(VerbsAddress::parse(&long), Err(VerbsWireError::TrailingBytes));
    }

    #[test]
    fn connect_messages_round_trip(
        request in any::<bool>(),
        src_rank in any::<u32>(),
        dst_rank in any::<u32>(),
        qpn in 1..=MAX_QPN,
    ) {
        let kind = if request { ConnectKind::Request } else { ConnectKind::Reply };
        let m = Connect { kind, src_rank, dst_rank, qpn };
        prop_assert_eq!(Connect::parse(&m.encode(&KEY), &KEY), Ok(m));
    }

    #[test]
    fn connect_messages_need_the_job_key_and_every_bit_counts(
        src_rank in any::<u32>(),
        qpn in 1..=MAX_QPN,
        other in any::<[u8; 32]>(),
        at in 0usize..CONNECT_LEN,
        flip in 1u8..=255,
    ) {
        let m = Connect { kind: ConnectKind::Request, src_rank, dst_rank: 1, qpn };
        let bytes = m.encode(&KEY);
        if other != KEY {
            prop_assert_eq!(Connect::parse(&bytes, &other), Err(VerbsWireError::BadTag));
        }
        let mut changed = bytes;
        changed[at] ^= flip;
        prop_assert_eq!(Connect::parse(&changed, &KEY), Err(VerbsWireError::BadTag));
    }

    #[test]
    fn any_bytes_parse_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
        if let Ok(a) = VerbsAddress::parse(&bytes) {
            prop_assert_eq!(a.encode().to_vec(), bytes.clone());
        }
        if let Ok(m) = Connect::parse(&bytes, &KEY) {
            prop_assert_eq!(bytes.len(), CONNECT_LEN);
            prop_assert_eq!(m.encode(&KEY).to_vec(), bytes.clone());
            prop_assert!(m.qpn != 0 && m.qpn <= MAX_QPN);
        }
        if let Ok(k) = RemoteKey::parse(&bytes) {
            prop_assert_eq!(k.encode().to_vec(), bytes.clone());
            prop_assert!(k.addr.checked_add(k.len).is_some());
        }
        if let Ok(f) = FragmentHeader::parse(&bytes) {
            prop_assert_eq!(f.head.total_len(), bytes.len());
            let mut again = f.head.encode().to_vec();
            again.extend_from_slice(f.header);
            again.extend_from_slice(f.payload);
            prop_assert_eq!(again, bytes);
        }
    }

    #[test]
    fn fragments_round_trip_and_lengths_must_add_up(
        tag in any::<u8>(),
        header in proptest::collection::vec(any::<u8>(), 0..64),
        payload in proptest::collection::vec(any::<u8>(), 0..256),
        credits in any::<u16>(),
        shift in 1usize..8,
    ) {
        let head = FragmentHeader {
            kind: FragmentKind::Message,
            tag,
            header_len: header.len() as u16,
            payload_len: payload.len() as u32,
            credits,
        };
        let mut bytes = head.encode().to_vec();
        bytes.extend_from_slice(&header);
        bytes.extend_from_slice(&payload);
        prop_assert_eq!(head.total_len(), bytes.len());
        let f = FragmentHeader::parse(&bytes).unwrap();
        prop_assert_eq!(f.head, head);
        prop_assert_eq!(f.header, header.as_slice());
        prop_assert_eq!(f.payload, payload.as_slice());
        // A completion shorter than the header says is refused, as is one
        // with bytes past the end.
        let short = bytes.len().saturating_sub(shift);
        prop_assert!(FragmentHeader::parse(&bytes[..short]).is_err());
        bytes.extend(std::iter::repeat_n(0u8, shift));
        prop_assert_eq!(FragmentHeader::parse(&bytes), Err(VerbsWireError::TrailingBytes));
    }

    #[test]
    fn remote_keys_round_trip_and_permit_only_inside_their_range(
        addr in any::<u64>(),
        len in any::<u64>(),
        rkey in any::<u32>(),
        read in any::<bool>(),
        write in any::<bool>(),
        at in any::<u64>(),
        n in any::<u64>(),
        op_write in any::<bool>(),
    ) {
        let len = len.min(u64::MAX - addr);
        let key = RemoteKey { addr, len, rkey, read, write };
        let bytes = key.encode();
        prop_assert_eq!(bytes.len(), REMOTE_KEY_LEN);
        prop_assert_eq!(RemoteKey::parse(&bytes), Ok(key));
        let inside = at >= addr && (at as u128 + n as u128) <= addr as u128 + len as u128;
        let right = if op_write { write } else { read };
        prop_assert_eq!(key.permits(at, n, op_write), inside && right);
        // The whole registration is always within reach of its rights.
        prop_assert_eq!(key.permits(addr, len, true), write);
    }
}

#[test]
fn keys_with_unknown_rights_or_wrapping_ranges_are_refused() {
    let mut bytes = RemoteKey {
        addr: 1,
        len: 2,
        rkey: 3,
        read: true,
        write: false,
    }
    .encode();
    bytes[20] = 4;
    assert_eq!(
        RemoteKey::parse(&bytes),
        Err(VerbsWireError::OutOfRange("access"))
    );
    let wraps = RemoteKey {
        addr: u64::MAX,
        len: 2,
        rkey: 3,
        read: true,
        write: true,
    }
    .encode();
    assert_eq!(
        RemoteKey::parse(&wraps),
        Err(VerbsWireError::OutOfRange("registered range"))
    );
}
