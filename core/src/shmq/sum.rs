//! The optional checksums of the `shm` transport (`btl_shm_checksum`):
//! what they cover and how a reader checks them.
//!
//! When both ends agreed on them (a flag of the published
//! [`Address`](crate::wire::shm::Address)), every fragment's data, in a fast
//! box or a queue slot, ends with a [`TRAILER`]: the [`Fletcher64`] of
//! its sequence number, kind, tag, header length and data length, then the
//! data. A rendezvous request carries the checksum of its payload
//! ([`Rts::sum`](crate::wire::shm::Rts::sum)), which the receiver checks where
//! it reads the payload (the sender's staging segment, transfer buffer or
//! memory). A reader that finds a difference has bytes that changed in
//! shared memory after their writer put them there.

use super::{Kind, Malformed, SEQ_MASK};
use crate::checksum::{fletcher64, Fletcher64};

/// Bytes of the checksum that ends a fragment's data.
pub const TRAILER: usize = 8;

/// The checksum of a fragment whose data is `parts` back to back.
#[inline]
pub fn fragment(seq: u32, kind: Kind, tag: u8, hdr_len: u8, parts: &[&[u8]]) -> u64 {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut f = Fletcher64::new();
    f.update_u64(
        u64::from(seq & SEQ_MASK)
            | u64::from(kind as u8) << 24
            | u64::from(tag) << 32
            | u64::from(hdr_len) << 40,
    );
    f.update_u64(len as u64);
    for part in parts {
        f.update(part);
    }
    f.finish()
}

/// The trailer of a fragment whose data is `parts`.
#[inline]
pub fn trailer(seq: u32, kind: Kind, tag: u8, hdr_len: u8, parts: &[&[u8]]) -> [u8; TRAILER] {
    fragment(seq, kind, tag, hdr_len, parts).to_le_bytes()
}

/// Checks the trailer at the end of a fragment's `data` and returns the
/// data before it; the active-message header must lie in that part.
pub fn open_fragment(
    seq: u32,
    kind: Kind,
    tag: u8,
    hdr_len: u8,
    data: &[u8],
) -> Result<&[u8], Malformed> {
    let body_len = data
        .len()
        .checked_sub(TRAILER)
        .ok_or(Malformed::Truncated {
            need: TRAILER,
            have: data.len(),
        })?;
    let (body, end) = data.split_at(body_len);
    let mut written = [0u8; TRAILER];
    written.copy_from_slice(end);
    let written = u64::from_le_bytes(written);
    let read = fragment(seq, kind, tag, hdr_len, &[body]);
    if written != read {
        return Err(Malformed::Checksum {
            what: "fragment",
            written,
            read,
        });
    }
    if usize::from(hdr_len) > body.len() {
        return Err(Malformed::OutOfRange("active-message header length"));
    }
    Ok(body)
}

/// The checksum of a rendezvous payload.
pub fn payload(bytes: &[u8]) -> u64 {
    fletcher64(bytes)
}

/// Checks a rendezvous payload against the checksum its request carried.
pub fn check_payload(written: u64, bytes: &[u8]) -> Result<(), Malformed> {
    let read = payload(bytes);
    if read != written {
        return Err(Malformed::Checksum {
            what: "rendezvous payload",
            written,
            read,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_open_only_as_written() {
        let t = trailer(5, Kind::Active, 9, 2, &[b"hd", b"payload"]);
        let mut data = b"hdpayload".to_vec();
        data.extend_from_slice(&t);
        assert_eq!(
            open_fragment(5, Kind::Active, 9, 2, &data),
            Ok(&b"hdpayload"[..])
        );
        // Any byte of the data or the trailer, or any field, changed.
        for i in 0..data.len() {
            let mut bad = data.clone();
            bad[i] ^= 0x10;
            assert!(matches!(
                open_fragment(5, Kind::Active, 9, 2, &bad),
                Err(Malformed::Checksum { .. })
            ));
        }
        assert!(open_fragment(6, Kind::Active, 9, 2, &data).is_err());
        assert!(open_fragment(5, Kind::Rts, 9, 2, &data).is_err());
        assert!(open_fragment(5, Kind::Active, 8, 2, &data).is_err());
        assert!(open_fragment(5, Kind::Active, 9, 3, &data).is_err());
        assert!(open_fragment(5, Kind::Active, 9, 2, &data[1..]).is_err());
        assert_eq!(
            open_fragment(5, Kind::Active, 9, 0, &[1, 2, 3]),
            Err(Malformed::Truncated { need: 8, have: 3 })
        );
    }

    #[test]
    fn a_header_past_the_body_is_refused_even_with_a_good_trailer() {
        let t = trailer(1, Kind::Active, 0, 4, &[b"ab"]);
        let mut data = b"ab".to_vec();
        data.extend_from_slice(&t);
        assert!(matches!(
            open_fragment(1, Kind::Active, 0, 4, &data),
            Err(Malformed::OutOfRange(_))
        ));
    }

    #[test]
    fn payloads_are_checked() {
        let bytes = [7u8; 100];
        let sum = payload(&bytes);
        assert_eq!(check_payload(sum, &bytes), Ok(()));
        let e = check_payload(sum ^ 1, &bytes).unwrap_err();
        assert!(alloc::format!("{e}").contains("rendezvous payload does not match its checksum"));
    }
}
