//! The address a TCP module publishes through the bootstrap: every
//! listening socket of the process, as (interface, IP address and prefix,
//! port, link).
//!
//! ```text
//! list:   magic b"FOTA" | version u8 (1) | count u8 | count × entry
//! entry:  family u8 (4 or 6) | prefix_len u8 | link u8 | flags u8
//!         | port u16 | name_len u8 | name (1..=15 bytes) | address (4 or 16 bytes)
//! flags:  bit 0 = loopback interface; other bits zero
//! ```
//!
//! [`parse_addresses`] checks every field (family, prefix length, name,
//! port, flags, trailing bytes) before any entry is handed out.
//!
//! ```
//! use core::net::{IpAddr, Ipv4Addr};
//! use fireopal_core::wire::tcp::address::{encode_addresses, parse_addresses, AddressEntry, InterfaceName};
//!
//! let lo = AddressEntry {
//!     name: InterfaceName::new("lo").unwrap(),
//!     ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
//!     prefix_len: 8,
//!     port: 4000,
//!     link: 0,
//!     loopback: true,
//! };
//! let bytes = encode_addresses(&[lo]).unwrap();
//! assert_eq!(parse_addresses(&bytes).unwrap(), [lo]);
//! ```

use alloc::vec::Vec;
use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::wire::Reader;

/// First bytes of an address list.
pub const ADDRESS_MAGIC: [u8; 4] = *b"FOTA";
/// Version of the address list format.
pub const ADDRESS_VERSION: u8 = 1;
/// Most entries in one list.
pub const MAX_ENTRIES: usize = 64;
/// Longest interface name (Linux's `IFNAMSIZ` less the NUL).
pub const MAX_NAME_LEN: usize = 15;

const FLAG_LOOPBACK: u8 = 1;

/// An interface name: 1 to [`MAX_NAME_LEN`] printable ASCII characters.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct InterfaceName {
    bytes: [u8; MAX_NAME_LEN],
    len: u8,
}

impl InterfaceName {
    /// Checks and stores `name`.
    pub fn new(name: &str) -> Result<Self, AddressError> {
        Self::from_bytes(name.as_bytes())
    }

    fn from_bytes(name: &[u8]) -> Result<Self, AddressError> {
        if name.is_empty() || name.len() > MAX_NAME_LEN {
            return Err(AddressError::BadNameLength(name.len()));
        }
        if !name.iter().all(u8::is_ascii_graphic) {
            return Err(AddressError::BadName);
        }
        let mut bytes = [0u8; MAX_NAME_LEN];
        bytes[..name.len()].copy_from_slice(name);
        Ok(Self {
            bytes,
            len: name.len() as u8,
        })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        let bytes = self.bytes.get(..usize::from(self.len)).unwrap_or(&[]);
        // Only printable ASCII is ever stored.
        core::str::from_utf8(bytes).unwrap_or("")
    }
}

impl fmt::Debug for InterfaceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for InterfaceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One listening socket of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AddressEntry {
    /// Interface the address belongs to.
    pub name: InterfaceName,
    /// The address the socket listens on.
    pub ip: IpAddr,
    /// Length of the network prefix (subnet) of `ip`.
    pub prefix_len: u8,
    /// Listening port (never 0).
    pub port: u16,
    /// Link index of the module behind the socket.
    pub link: u8,
    /// Whether the interface is a loopback interface.
    pub loopback: bool,
}

impl AddressEntry {
    /// Whether `self` and `other` are in the same IP subnet: same family,
    /// same prefix length, and equal network parts.
    pub fn same_subnet(&self, other: &Self) -> bool {
        if self.prefix_len != other.prefix_len {
            return false;
        }
        match (self.ip, other.ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let mask = prefix_mask_v4(self.prefix_len);
                u32::from(a) & mask == u32::from(b) & mask
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let mask = prefix_mask_v6(self.prefix_len);
                u128::from(a) & mask == u128::from(b) & mask
            }
            _ => false,
        }
    }
}

/// Netmask of an IPv4 prefix length (lengths over 32 are treated as 32).
pub fn prefix_mask_v4(prefix_len: u8) -> u32 {
    match u32::from(prefix_len.min(32)) {
        0 => 0,
        n => u32::MAX << (32 - n),
    }
}

/// Netmask of an IPv6 prefix length (lengths over 128 are treated as 128).
pub fn prefix_mask_v6(prefix_len: u8) -> u128 {
    match u32::from(prefix_len.min(128)) {
        0 => 0,
        n => u128::MAX << (128 - n),
    }
}

/// Why an address list did not encode or parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressError {
    /// The bytes end inside the list, at this offset.
    Truncated {
        /// Offset where more bytes were needed.
        at: usize,
    },
    /// The magic is not [`ADDRESS_MAGIC`].
    BadMagic,
    /// Another format version.
    UnsupportedVersion(u8),
    /// More than [`MAX_ENTRIES`] entries.
    TooManyEntries(usize),
    /// The family code is neither 4 nor 6.
    UnknownFamily(u8),
    /// A prefix length longer than the family's address.
    BadPrefix {
        /// Family (4 or 6).
        family: u8,
        /// Prefix length given.
        prefix_len: u8,
    },
    /// Flag bits that have no meaning are set.
    UnknownFlags(u8),
    /// Port 0 (not a listening socket).
    ZeroPort,
    /// An interface name of 0 or more than [`MAX_NAME_LEN`] bytes.
    BadNameLength(usize),
    /// An interface name with a byte that is not printable ASCII.
    BadName,
    /// Bytes after the last entry.
    TrailingBytes(usize),
}

impl fmt::Display for AddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { at } => write!(f, "address list truncated at byte {at}"),
            Self::BadMagic => f.write_str("not a fireopal tcp address list (bad magic)"),
            Self::UnsupportedVersion(v) => write!(f, "address list format version {v}"),
            Self::TooManyEntries(n) => {
                write!(f, "{n} address entries, at most {MAX_ENTRIES} allowed")
            }
            Self::UnknownFamily(c) => write!(f, "unknown address family {c}"),
            Self::BadPrefix { family, prefix_len } => {
                write!(f, "prefix length {prefix_len} for an IPv{family} address")
            }
            Self::UnknownFlags(b) => write!(f, "unknown address flags {b:#x}"),
            Self::ZeroPort => f.write_str("port 0 in an address entry"),
            Self::BadNameLength(n) => write!(
                f,
                "interface name of {n} bytes (1 to {MAX_NAME_LEN} allowed)"
            ),
            Self::BadName => f.write_str("interface name is not printable ASCII"),
            Self::TrailingBytes(n) => write!(f, "{n} bytes after the address list"),
        }
    }
}

impl core::error::Error for AddressError {}

/// Checks one entry's fields (shared by encoding and parsing).
fn check_entry(e: &AddressEntry) -> Result<(), AddressError> {
    let (family, max) = match e.ip {
        IpAddr::V4(_) => (4, 32),
        IpAddr::V6(_) => (6, 128),
    };
    if e.prefix_len > max {
        return Err(AddressError::BadPrefix {
            family,
            prefix_len: e.prefix_len,
        });
    }
    if e.port == 0 {
        return Err(AddressError::ZeroPort);
    }
    Ok(())
}

/// Encodes `entries` as a published address list.
pub fn encode_addresses(entries: &[AddressEntry]) -> Result<Vec<u8>, AddressError> {
    if entries.len() > MAX_ENTRIES {
        return Err(AddressError::TooManyEntries(entries.len()));
    }
    let mut out = Vec::with_capacity(6 + entries.len() * 40);
    out.extend_from_slice(&ADDRESS_MAGIC);
    out.push(ADDRESS_VERSION);
    out.push(entries.len() as u8);
    for e in entries {
        check_entry(e)?;
        out.push(match e.ip {
            IpAddr::V4(_) => 4,
            IpAddr::V6(_) => 6,
        });
        out.push(e.prefix_len);
        out.push(e.link);
        out.push(if e.loopback { FLAG_LOOPBACK } else { 0 });
        out.extend_from_slice(&e.port.to_le_bytes());
        out.push(e.name.len);
        out.extend_from_slice(e.name.as_str().as_bytes());
        match e.ip {
            IpAddr::V4(a) => out.extend_from_slice(&a.octets()),
            IpAddr::V6(a) => out.extend_from_slice(&a.octets()),
        }
    }
    Ok(out)
}

/// Parses and checks a published address list.
pub fn parse_addresses(bytes: &[u8]) -> Result<Vec<AddressEntry>, AddressError> {
    let mut r = Reader::new(bytes);
    let at = |r: &Reader<'_>| AddressError::Truncated { at: r.position() };
    let magic: [u8; 4] = r.array().ok_or_else(|| at(&r))?;
    if magic != ADDRESS_MAGIC {
        return Err(AddressError::BadMagic);
    }
    let version = r.u8().ok_or_else(|| at(&r))?;
    if version != ADDRESS_VERSION {
        return Err(AddressError::UnsupportedVersion(version));
    }
    let count = usize::from(r.u8().ok_or_else(|| at(&r))?);
    if count > MAX_ENTRIES {
        return Err(AddressError::TooManyEntries(count));
    }
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        let family = r.u8().ok_or_else(|| at(&r))?;
        let prefix_len = r.u8().ok_or_else(|| at(&r))?;
        let link = r.u8().ok_or_else(|| at(&r))?;
        let flags = r.u8().ok_or_else(|| at(&r))?;
        let port = r.u16().ok_or_else(|| at(&r))?;
        let name_len = usize::from(r.u8().ok_or_else(|| at(&r))?);
        if family != 4 && family != 6 {
            return Err(AddressError::UnknownFamily(family));
        }
        if flags & !FLAG_LOOPBACK != 0 {
            return Err(AddressError::UnknownFlags(flags));
        }
        if name_len == 0 || name_len > MAX_NAME_LEN {
            return Err(AddressError::BadNameLength(name_len));
        }
        let name = InterfaceName::from_bytes(r.take(name_len).ok_or_else(|| at(&r))?)?;
        let ip = if family == 4 {
            IpAddr::V4(Ipv4Addr::from(r.array::<4>().ok_or_else(|| at(&r))?))
        } else {
            IpAddr::V6(Ipv6Addr::from(r.array::<16>().ok_or_else(|| at(&r))?))
        };
        let entry = AddressEntry {
            name,
            ip,
            prefix_len,
            port,
            link,
            loopback: flags & FLAG_LOOPBACK != 0,
        };
        check_entry(&entry)?;
        entries.push(entry);
    }
    if r.remaining() != 0 {
        return Err(AddressError::TrailingBytes(r.remaining()));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn entry(name: &str, ip: IpAddr, prefix_len: u8, port: u16, link: u8) -> AddressEntry {
        AddressEntry {
            name: InterfaceName::new(name).unwrap(),
            ip,
            prefix_len,
            port,
            link,
            loopback: ip.is_loopback(),
        }
    }

    fn sample() -> Vec<AddressEntry> {
        vec![
            entry("lo", IpAddr::V4(Ipv4Addr::LOCALHOST), 8, 4000, 0),
            entry("eth0", IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)), 24, 4001, 1),
            entry(
                "eth0",
                IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
                64,
                65535,
                0,
            ),
        ]
    }

    #[test]
    fn lists_round_trip() {
        let bytes = encode_addresses(&sample()).unwrap();
        assert_eq!(parse_addresses(&bytes).unwrap(), sample());
        let empty = encode_addresses(&[]).unwrap();
        assert_eq!(empty, b"FOTA\x01\x00");
        assert!(parse_addresses(&empty).unwrap().is_empty());
    }

    #[test]
    fn every_truncation_is_refused() {
        let bytes = encode_addresses(&sample()).unwrap();
        for n in 0..bytes.len() {
            let e = parse_addresses(&bytes[..n]).unwrap_err();
            assert!(
                matches!(e, AddressError::Truncated { at } if at <= n),
                "{n}: {e:?}"
            );
        }
    }

    #[test]
    fn trailing_bytes_are_refused() {
        let mut bytes = encode_addresses(&sample()).unwrap();
        bytes.push(0);
        assert_eq!(parse_addresses(&bytes), Err(AddressError::TrailingBytes(1)));
    }

    #[test]
    fn header_fields_are_checked() {
        let good = encode_addresses(&sample()).unwrap();
        let mut b = good.clone();
        b[0] = b'X';
        assert_eq!(parse_addresses(&b), Err(AddressError::BadMagic));
        let mut b = good.clone();
        b[4] = 2;
        assert_eq!(
            parse_addresses(&b),
            Err(AddressError::UnsupportedVersion(2))
        );
        let mut b = good;
        b[5] = 65;
        assert_eq!(parse_addresses(&b), Err(AddressError::TooManyEntries(65)));
    }

    /// The offset of the first entry's field `i` (family = 0).
    const E0: usize = 6;

    #[test]
    fn entry_fields_are_checked() {
        let good = encode_addresses(&sample()[..1]).unwrap();
        let cases: [(usize, u8, AddressError); 7] = [
            (E0, 5, AddressError::UnknownFamily(5)),
            (
                E0 + 1,
                33,
                AddressError::BadPrefix {
                    family: 4,
                    prefix_len: 33,
                },
            ),
            (E0 + 3, 2, AddressError::UnknownFlags(2)),
            (E0 + 6, 0, AddressError::BadNameLength(0)),
            (E0 + 6, 16, AddressError::BadNameLength(16)),
            (E0 + 7, b' ', AddressError::BadName),
            (E0 + 7, 0x80, AddressError::BadName),
        ];
        for (offset, value, want) in cases {
            let mut b = good.clone();
            b[offset] = value;
            assert_eq!(parse_addresses(&b), Err(want), "offset {offset}");
        }
        let mut b = good;
        b[E0 + 4] = 0;
        b[E0 + 5] = 0;
        assert_eq!(parse_addresses(&b), Err(AddressError::ZeroPort));
    }

    #[test]
    fn ipv6_prefix_is_bounded_by_128() {
        let mut e = sample()[2];
        e.prefix_len = 128;
        assert!(encode_addresses(&[e]).is_ok());
        e.prefix_len = 129;
        assert_eq!(
            encode_addresses(&[e]),
            Err(AddressError::BadPrefix {
                family: 6,
                prefix_len: 129
            })
        );
    }

    #[test]
    fn encoding_checks_too() {
        let mut e = sample()[0];
        e.port = 0;
        assert_eq!(encode_addresses(&[e]), Err(AddressError::ZeroPort));
        let many = vec![sample()[0]; MAX_ENTRIES + 1];
        assert_eq!(
            encode_addresses(&many),
            Err(AddressError::TooManyEntries(65))
        );
        assert_eq!(encode_addresses(&many[..MAX_ENTRIES]).map(|_| ()), Ok(()));
    }

    #[test]
    fn interface_names() {
        assert_eq!(InterfaceName::new("eth0").unwrap().as_str(), "eth0");
        assert!(InterfaceName::new("abcdefghijklmno").is_ok());
        assert_eq!(
            InterfaceName::new("abcdefghijklmnop"),
            Err(AddressError::BadNameLength(16))
        );
        assert_eq!(InterfaceName::new(""), Err(AddressError::BadNameLength(0)));
        assert_eq!(InterfaceName::new("et h0"), Err(AddressError::BadName));
        assert_eq!(InterfaceName::new("é"), Err(AddressError::BadName));
    }

    #[test]
    fn subnets() {
        let a = entry("eth0", IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)), 24, 1, 0);
        let b = entry("eth0", IpAddr::V4(Ipv4Addr::new(10, 1, 2, 200)), 24, 1, 0);
        let c = entry("eth0", IpAddr::V4(Ipv4Addr::new(10, 1, 3, 3)), 24, 1, 0);
        let d = entry("eth0", IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)), 16, 1, 0);
        assert!(a.same_subnet(&b));
        assert!(!a.same_subnet(&c));
        assert!(!a.same_subnet(&d), "prefix lengths differ");
        let v6a = entry("e", "fd00::2".parse().unwrap(), 64, 1, 0);
        let v6b = entry("e", "fd00::1:2".parse().unwrap(), 64, 1, 0);
        let v6c = entry("e", "fd01::2".parse().unwrap(), 64, 1, 0);
        assert!(v6a.same_subnet(&v6b));
        assert!(!v6a.same_subnet(&v6c));
        assert!(!a.same_subnet(&v6a));
        assert_eq!(prefix_mask_v4(0), 0);
        assert_eq!(prefix_mask_v4(8), 0xff00_0000);
        assert_eq!(prefix_mask_v4(32), u32::MAX);
        assert_eq!(prefix_mask_v4(40), u32::MAX);
        assert_eq!(prefix_mask_v6(0), 0);
        assert_eq!(prefix_mask_v6(128), u128::MAX);
        assert_eq!(prefix_mask_v6(1), 1 << 127);
    }

    #[test]
    fn errors_display() {
        use alloc::string::ToString;
        assert!(AddressError::Truncated { at: 9 }.to_string().contains('9'));
        assert!(AddressError::ZeroPort.to_string().contains("port 0"));
    }
}
