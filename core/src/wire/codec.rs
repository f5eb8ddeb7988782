//! The one checked little-endian byte codec of the crate.
//!
//! Every protocol (TCP frames and handshakes, `shm` control messages, the
//! active-message directory and fragment header) reads its bytes through
//! [`Reader`] / [`Fields`] and writes them through [`Writer`] (or
//! [`fixed`], for messages of a fixed size). A read that runs short
//! fails with the caller's own error value, so each protocol keeps its
//! typed errors; nothing here panics on bytes from another process.

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

/// A [`Reader`] over bytes whose length the codec has already checked:
/// every read that runs short fails with the codec's own length error.
#[derive(Debug)]
pub(crate) struct Fields<'a, E> {
    r: Reader<'a>,
    short: E,
}

impl<'a, E: Copy> Fields<'a, E> {
    /// Reads from `r`, failing with `short` at the end.
    pub(crate) fn new(r: Reader<'a>, short: E) -> Self {
        Self { r, short }
    }

    /// Bytes not consumed yet.
    pub(crate) fn remaining(&self) -> usize {
        self.r.remaining()
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], E> {
        self.r.take(n).ok_or(self.short)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], E> {
        self.r.array().ok_or(self.short)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, E> {
        self.r.u8().ok_or(self.short)
    }

    pub(crate) fn u16(&mut self) -> Result<u16, E> {
        self.r.u16().ok_or(self.short)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, E> {
        self.r.u32().ok_or(self.short)
    }

    pub(crate) fn u64(&mut self) -> Result<u64, E> {
        self.r.u64().ok_or(self.short)
    }

    /// A reserved field of `N` bytes: `not_zero` unless every byte is 0.
    pub(crate) fn reserved<const N: usize>(&mut self, not_zero: E) -> Result<(), E> {
        if self.array::<N>()? == [0; N] {
            Ok(())
        } else {
            Err(not_zero)
        }
    }
}

/// Little-endian writer that fills a buffer sized for the message from its
/// start. The codecs size their buffers exactly; a write that would run
/// past the end is dropped (and asserted against in debug builds) rather
/// than panicking.
#[derive(Debug)]
pub(crate) struct Writer<'a> {
    out: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(out: &'a mut [u8]) -> Self {
        Self { out, pos: 0 }
    }

    pub(crate) fn bytes(&mut self, bytes: &[u8]) {
        let end = self.pos.saturating_add(bytes.len());
        match self.out.get_mut(self.pos..end) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                self.pos = end;
            }
            None => debug_assert!(false, "message buffer too small"),
        }
    }

    /// `n` zero bytes (a reserved field; the buffer starts zeroed, so this
    /// only moves on).
    pub(crate) fn zeros(&mut self, n: usize) {
        let end = self.pos.saturating_add(n).min(self.out.len());
        debug_assert_eq!(end, self.pos + n, "message buffer too small");
        if let Some(z) = self.out.get_mut(self.pos..end) {
            z.fill(0);
        }
        self.pos = end;
    }

    pub(crate) fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }

    pub(crate) fn u16(&mut self, v: u16) {
        self.bytes(&v.to_le_bytes());
    }

    pub(crate) fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
}

/// A message of exactly `N` bytes, written from its start by `write` into
/// a zeroed array on the stack (no allocation: fragment headers and control
/// messages are encoded on the send path). Bytes `write` leaves alone stay
/// zero.
pub(crate) fn fixed<const N: usize>(write: impl FnOnce(&mut Writer<'_>)) -> [u8; N] {
    let mut out = [0u8; N];
    write(&mut Writer::new(&mut out));
    out
}

#[cfg(test)]
mod tests {
    use super::{fixed, Fields, Reader, Writer};

    #[test]
    fn fixed_writes_into_a_zeroed_array() {
        let out: [u8; 8] = fixed(|w| {
            w.u8(1);
            w.zeros(1);
            w.u16(0x0302);
        });
        assert_eq!(out, [1, 0, 2, 3, 0, 0, 0, 0]);
        let mut f = Fields::new(Reader::new(&out), "short");
        assert_eq!(f.take(2), Ok(&[1, 0][..]));
        assert_eq!(f.remaining(), 6);
        assert_eq!(f.take(7), Err("short"));
    }

    #[test]
    fn writer_fills_in_order_and_fields_read_it_back() {
        let mut out = [0xffu8; 16];
        let mut w = Writer::new(&mut out);
        w.u8(1);
        w.u16(0x0302);
        w.zeros(1);
        w.u32(0x0706_0504);
        w.u64(0x0f0e_0d0c_0b0a_0908);
        assert_eq!(out, [1, 2, 3, 0, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
        let mut f = Fields::new(Reader::new(&out), "short");
        assert_eq!(f.u8(), Ok(1));
        assert_eq!(f.u16(), Ok(0x0302));
        assert_eq!(f.reserved::<1>("not zero"), Ok(()));
        assert_eq!(f.reserved::<1>("not zero"), Err("not zero"));
        assert_eq!(f.array::<3>(), Ok([5, 6, 7]));
        assert_eq!(f.u64(), Ok(0x0f0e_0d0c_0b0a_0908));
        assert_eq!(f.u32(), Err("short"));
    }

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
