//! How bootstrap keys and values are laid out in a launcher's key-value
//! store: per-rank key names, hex encoding, and splitting values longer than
//! the launcher's value limit over several keys.
//!
//! Layout of one value under key `K` of rank `R` (user keys use prefix `fo`,
//! fireopal's own keys `fi`, so the two never collide):
//! - `fo.R.K` holds `<byte length>x<hex>`, as much hex as fits;
//! - `fo.R.K.1`, `fo.R.K.2`, ... hold the rest of the hex, in order.

use std::fmt;

use super::{KeyError, MAX_KEY_LEN, MAX_VALUE_LEN};

/// Whose key space a key lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    /// Keys put by users of [`super::Bootstrap::put`].
    User,
    /// Keys fireopal itself puts during init (node identity, job key).
    Internal,
}

/// Longest key name [`store_key`] produces, for checking a launcher's limit.
pub(crate) const LONGEST_STORE_KEY: usize = 3 + 10 + 1 + MAX_KEY_LEN + 1 + 6;

/// Checks a user key: 1 to [`MAX_KEY_LEN`] bytes of `[A-Za-z0-9_-]`.
pub(crate) fn check_key(key: &str) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong {
            len: key.len(),
            max: MAX_KEY_LEN,
        });
    }
    match key
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        Some(c) => Err(KeyError::BadChar(c)),
        None => Ok(()),
    }
}

/// The store's name for chunk `chunk` of `key` put by `rank`.
pub(crate) fn store_key(space: Space, rank: u32, key: &str, chunk: usize) -> String {
    let prefix = match space {
        Space::User => "fo",
        Space::Internal => "fi",
    };
    if chunk == 0 {
        format!("{prefix}.{rank}.{key}")
    } else {
        format!("{prefix}.{rank}.{key}.{chunk}")
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex_encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// Bytes of a hex string (either case); `None` if it is not hex.
pub(crate) fn hex_decode(text: &str) -> Option<Vec<u8>> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let bytes = text.as_bytes();
    if bytes.len() % 2 != 0 {
        return None;
    }
    bytes
        .chunks_exact(2)
        .map(|pair| match pair {
            [hi, lo] => Some((nibble(*hi)? << 4) | nibble(*lo)?),
            _ => None,
        })
        .collect()
}

/// Splits `value` into the texts of its chunks, none longer than `cap`
/// characters. `cap` must be at least [`MIN_CHUNK_CAP`].
pub(crate) fn encode_value(value: &[u8], cap: usize) -> Vec<String> {
    let hex = hex_encode(value);
    let header = format!("{}x", value.len());
    // Chunk boundaries fall on whole bytes, so every chunk is valid hex.
    let first_room = cap.saturating_sub(header.len()) & !1;
    let room = cap & !1;
    let (first, mut rest) = hex.split_at(first_room.min(hex.len()));
    let mut chunks = vec![format!("{header}{first}")];
    while !rest.is_empty() {
        let (part, tail) = rest.split_at(room.min(rest.len()));
        chunks.push(part.to_owned());
        rest = tail;
    }
    chunks
}

/// Smallest launcher value limit (in characters) fireopal works with: the
/// first chunk must hold the longest header and some data.
pub(crate) const MIN_CHUNK_CAP: usize = 16;

/// Why a stored value cannot be read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CorruptValue {
    /// The first chunk has no `<length>x` header.
    NoHeader,
    /// The header's length is over [`MAX_VALUE_LEN`].
    TooLong(usize),
    /// A chunk is not hex.
    NotHex,
    /// The chunks hold more hex than the header announced.
    Overlong,
    /// A chunk is empty, so the value could never complete.
    EmptyChunk,
    /// The chunk of this number, which the header's length needs, is not
    /// in the store.
    MissingChunk(usize),
    /// The value has another length than its key's values have.
    WrongLength {
        /// Its length.
        len: usize,
        /// The length expected.
        expected: usize,
    },
}

impl fmt::Display for CorruptValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CorruptValue::NoHeader => f.write_str("first chunk has no <length>x header"),
            CorruptValue::TooLong(n) => {
                write!(f, "announced length {n} is over the limit {MAX_VALUE_LEN}")
            }
            CorruptValue::NotHex => f.write_str("chunk is not hex"),
            CorruptValue::Overlong => f.write_str("chunks hold more data than announced"),
            CorruptValue::EmptyChunk => f.write_str("empty continuation chunk"),
            CorruptValue::MissingChunk(n) => write!(f, "chunk {n} is missing"),
            CorruptValue::WrongLength { len, expected } => {
                write!(f, "{len} bytes, expected {expected}")
            }
        }
    }
}

impl std::error::Error for CorruptValue {}

/// Reassembles a value from its chunks, checking each one.
#[derive(Debug)]
pub(crate) struct Assembler {
    len: usize,
    bytes: Vec<u8>,
}

impl Assembler {
    /// Starts from the text of chunk 0.
    pub(crate) fn start(first: &str) -> Result<Assembler, CorruptValue> {
        let (len, hex) = first.split_once('x').ok_or(CorruptValue::NoHeader)?;
        if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
            return Err(CorruptValue::NoHeader);
        }
        let len: usize = len.parse().map_err(|_| CorruptValue::NoHeader)?;
        if len > MAX_VALUE_LEN {
            return Err(CorruptValue::TooLong(len));
        }
        let mut asm = Assembler {
            len,
            bytes: Vec::with_capacity(len),
        };
        asm.push_hex(hex)?;
        Ok(asm)
    }

    /// Whether more chunks are needed.
    pub(crate) fn needs_more(&self) -> bool {
        self.bytes.len() < self.len
    }

    /// Adds the text of the next chunk.
    pub(crate) fn push(&mut self, chunk: &str) -> Result<(), CorruptValue> {
        if chunk.is_empty() {
            return Err(CorruptValue::EmptyChunk);
        }
        self.push_hex(chunk)
    }

    fn push_hex(&mut self, hex: &str) -> Result<(), CorruptValue> {
        let bytes = hex_decode(hex).ok_or(CorruptValue::NotHex)?;
        if self.bytes.len() + bytes.len() > self.len {
            return Err(CorruptValue::Overlong);
        }
        self.bytes.extend_from_slice(&bytes);
        Ok(())
    }

    /// The value, once [`Self::needs_more`] is false.
    pub(crate) fn finish(self) -> Vec<u8> {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reassemble(chunks: &[String]) -> Result<Vec<u8>, CorruptValue> {
        let (first, rest) = chunks.split_first().ok_or(CorruptValue::NoHeader)?;
        let mut asm = Assembler::start(first)?;
        let mut rest = rest.iter();
        while asm.needs_more() {
            asm.push(rest.next().ok_or(CorruptValue::EmptyChunk)?)?;
        }
        Ok(asm.finish())
    }

    #[test]
    fn keys_are_checked() {
        assert_eq!(check_key("btl_tcp-addr0"), Ok(()));
        assert_eq!(check_key(""), Err(KeyError::Empty));
        assert_eq!(check_key("a.b"), Err(KeyError::BadChar('.')));
        assert_eq!(check_key("a b"), Err(KeyError::BadChar(' ')));
        let long = "k".repeat(MAX_KEY_LEN + 1);
        assert_eq!(
            check_key(&long),
            Err(KeyError::TooLong {
                len: MAX_KEY_LEN + 1,
                max: MAX_KEY_LEN
            })
        );
        let longest = "k".repeat(MAX_KEY_LEN);
        assert!(store_key(Space::User, u32::MAX, &longest, 999_999).len() <= LONGEST_STORE_KEY);
        assert_eq!(store_key(Space::Internal, 3, "node", 0), "fi.3.node");
        assert_eq!(store_key(Space::User, 3, "addr", 2), "fo.3.addr.2");
    }

    #[test]
    fn hex_round_trip_and_rejects() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(hex_decode(&hex_encode(&all)), Some(all));
        assert_eq!(hex_decode("abc"), None);
        assert_eq!(hex_decode("zz"), None);
        assert_eq!(hex_decode("AB"), Some(vec![0xab]));
    }

    #[test]
    fn chunking_respects_cap_and_round_trips() {
        for cap in [MIN_CHUNK_CAP, 17, 63, 1023] {
            for len in [0usize, 1, 5, 6, 7, 100, 511, 512, 3000] {
                let value: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
                let chunks = encode_value(&value, cap);
                assert!(chunks.iter().all(|c| c.len() <= cap), "cap {cap} len {len}");
                assert!(chunks.iter().skip(1).all(|c| !c.is_empty()));
                assert_eq!(reassemble(&chunks), Ok(value));
            }
        }
    }

    #[test]
    fn corrupt_values_are_errors() {
        assert_eq!(
            reassemble(&["0011".into()]).unwrap_err(),
            CorruptValue::NoHeader
        );
        assert_eq!(
            reassemble(&["x00".into()]).unwrap_err(),
            CorruptValue::NoHeader
        );
        assert_eq!(
            reassemble(&["-1x".into()]).unwrap_err(),
            CorruptValue::NoHeader
        );
        assert_eq!(
            reassemble(&["99999999999x".into()]).unwrap_err(),
            CorruptValue::TooLong(99_999_999_999)
        );
        assert_eq!(
            reassemble(&["1xzz".into()]).unwrap_err(),
            CorruptValue::NotHex
        );
        assert_eq!(
            reassemble(&["1x0011".into()]).unwrap_err(),
            CorruptValue::Overlong
        );
        assert_eq!(
            reassemble(&["2x00".into(), "".into()]).unwrap_err(),
            CorruptValue::EmptyChunk
        );
    }

    proptest::proptest! {
        /// Values of any bytes, chunked for any launcher limit, come back
        /// whole; chunks from a broken or hostile launcher are an error,
        /// never a panic or an allocation past the limit.
        #[test]
        fn values_survive_chunking_and_junk_is_refused(
            value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            cap in MIN_CHUNK_CAP..300,
            junk in proptest::collection::vec("[0-9a-fA-Fx ]{0,24}", 1..6),
        ) {
            let chunks = encode_value(&value, cap);
            proptest::prop_assert!(chunks.iter().all(|c| c.len() <= cap));
            proptest::prop_assert_eq!(reassemble(&chunks), Ok(value));
            if let Ok(v) = reassemble(&junk) {
                proptest::prop_assert!(v.len() <= MAX_VALUE_LEN);
            }
            for text in &junk {
                let _ = hex_decode(text);
            }
        }
    }
}
