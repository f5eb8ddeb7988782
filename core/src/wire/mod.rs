//! Typed views of the bytes transports exchange with peers.
//!
//! Everything here parses input that came from another process, so each
//! view checks lengths and fields before any value is trusted and reports
//! what was wrong as a small error enum; nothing panics or indexes
//! unchecked on peer bytes. All multi-byte fields are little-endian.
//!
//! - [`frame`]: the fixed header in front of every TCP message, and the
//!   sub-headers of the messages that emulate RDMA;
//! - [`handshake`]: the messages that open a TCP connection and prove both
//!   ends hold the job key;
//! - [`address`]: the list of (interface, address, port) a TCP module
//!   publishes through the bootstrap.

pub mod address;
pub mod frame;
pub mod handshake;

/// Checked little-endian reader over a byte slice.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    /// Bytes consumed so far.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not consumed yet.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let out = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(|[b]| b)
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::Reader;

    #[test]
    fn reader_stops_at_the_end() {
        let mut r = Reader::new(&[1, 2, 0, 3, 0, 0, 0]);
        assert_eq!(r.u8(), Some(1));
        assert_eq!(r.u16(), Some(2));
        assert_eq!(r.position(), 3);
        assert_eq!(r.u64(), None, "a failed read consumes nothing");
        assert_eq!(r.u32(), Some(3));
        assert_eq!(r.remaining(), 0);
        assert_eq!(r.u8(), None);
        assert_eq!(r.take(0), Some(&[][..]));
        assert_eq!(r.take(usize::MAX), None);
    }
}
