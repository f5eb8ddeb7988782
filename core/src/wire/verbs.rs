//! Byte layouts of the `verbs` transport: the address a module publishes,
//! the connection messages its datagram queue pair exchanges, the header
//! of every fragment on a reliable connection, and the remote key of a
//! registration.
//!
//! ```text
//! address:  magic b"FOVB" | version u8 (1) | link_layer u8 | port u8 | mtu u8
//!           | lid u16 | gid_index u8 | reserved u8 | cm_qpn u32 | qkey u32
//!           | psn u32 | credits u16 | reserved u16 | fragment_size u32 | gid [16]
//! connect:  kind u8 | reserved [3] | src_rank u32 | dst_rank u32 | qpn u32
//!           | tag [32]: HMAC-SHA256 under the job key of the 16 bytes before
//! fragment: kind u8 | tag u8 | header_len u16 | payload_len u32 | credits u16
//!           | reserved u16 | header | payload
//! key:      addr u64 | len u64 | rkey u32 | access u8 | reserved [3]
//! ```
//!
//! Queue pair numbers and packet sequence numbers are 24-bit on the wire
//! of InfiniBand; values above that are refused. Every parser checks the
//! length first and returns a [`VerbsWireError`]; nothing here panics on
//! bytes from another process.
//!
//! Connection messages travel as datagrams anyone on the fabric may send
//! to a published queue pair; the tag proves the sender holds the job key,
//! so no process outside the job can have a rank's queue pair connected
//! to its own.

use core::fmt;

use crate::auth::{tags_equal, HmacSha256, DIGEST_LEN};
use crate::wire::codec::{fixed, Fields, Reader, Writer};

/// Why bytes of the verbs protocol do not parse or encode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerbsWireError {
    /// The bytes are shorter than the layout: `need` against `have`.
    Truncated {
        /// Bytes the layout needs.
        need: usize,
        /// Bytes there are.
        have: usize,
    },
    /// Bytes follow the end of the layout.
    TrailingBytes,
    /// The address does not start with the magic bytes.
    BadMagic,
    /// The address format version is unknown.
    UnknownVersion(u8),
    /// A field holds a value outside its range.
    OutOfRange(&'static str),
    /// A reserved field is not zero.
    Reserved,
    /// The fragment or connection message kind is unknown.
    UnknownKind(u8),
    /// A connection message's tag is not the job key's.
    BadTag,
}

impl fmt::Display for VerbsWireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { need, have } => write!(f, "truncated: {have} of {need} bytes"),
            Self::TrailingBytes => f.write_str("trailing bytes"),
            Self::BadMagic => f.write_str("not a verbs address"),
            Self::UnknownVersion(v) => write!(f, "unknown address version {v}"),
            Self::OutOfRange(what) => write!(f, "{what} out of range"),
            Self::Reserved => f.write_str("reserved field not zero"),
            Self::UnknownKind(k) => write!(f, "unknown message kind {k}"),
            Self::BadTag => f.write_str("not signed with the job key"),
        }
    }
}

impl core::error::Error for VerbsWireError {}

/// Largest queue pair number (24 bits).
pub const MAX_QPN: u32 = 0x00ff_ffff;
/// Largest packet sequence number (24 bits).
pub const MAX_PSN: u32 = 0x00ff_ffff;

/// Reads exactly `len` bytes from `bytes`: shorter is truncated, longer
/// has trailing bytes.
fn exact(bytes: &[u8], len: usize) -> Result<Fields<'_, VerbsWireError>, VerbsWireError> {
    if bytes.len() < len {
        return Err(VerbsWireError::Truncated {
            need: len,
            have: bytes.len(),
        });
    }
    if bytes.len() > len {
        return Err(VerbsWireError::TrailingBytes);
    }
    Ok(Fields::new(
        Reader::new(bytes),
        VerbsWireError::Truncated {
            need: len,
            have: bytes.len(),
        },
    ))
}

/// The link layer of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// InfiniBand: routed by LID inside a subnet, by GID across subnets.
    InfiniBand,
    /// Ethernet (RoCE): always routed by GID.
    Ethernet,
}

impl LinkLayer {
    fn code(self) -> u8 {
        match self {
            Self::InfiniBand => 1,
            Self::Ethernet => 2,
        }
    }

    fn from_code(code: u8) -> Result<Self, VerbsWireError> {
        match code {
            1 => Ok(Self::InfiniBand),
            2 => Ok(Self::Ethernet),
            _ => Err(VerbsWireError::OutOfRange("link layer")),
        }
    }
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::InfiniBand => "InfiniBand",
            Self::Ethernet => "Ethernet",
        })
    }
}

/// First bytes of a verbs address.
pub const ADDRESS_MAGIC: [u8; 4] = *b"FOVB";
/// Version of the address format.
pub const ADDRESS_VERSION: u8 = 1;
/// Encoded bytes of a [`VerbsAddress`].
pub const ADDRESS_LEN: usize = 48;

/// What a verbs module publishes: where its port is on the fabric, the
/// datagram queue pair that sets up connections, and the parameters a
/// peer's reliable queue pair must agree with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VerbsAddress {
    /// Link layer of the port.
    pub link_layer: LinkLayer,
    /// Port number on the device (1-based).
    pub port: u8,
    /// Active MTU as the verbs `ibv_mtu` code (1 = 256 B .. 5 = 4096 B).
    pub mtu: u8,
    /// Local identifier (InfiniBand; 0 on Ethernet).
    pub lid: u16,
    /// Index of `gid` in the port's GID table.
    pub gid_index: u8,
    /// Queue pair number of the datagram queue pair for connection setup.
    pub cm_qpn: u32,
    /// Queue key of that datagram queue pair.
    pub qkey: u32,
    /// First packet sequence number of every reliable queue pair this
    /// module creates.
    pub psn: u32,
    /// Fragments each peer may have outstanding at this module's shared
    /// receive queue before it waits for credits.
    pub credits: u16,
    /// Bytes of each receive buffer (the largest fragment accepted).
    pub fragment_size: u32,
    /// Global identifier of the port (subnet prefix, interface id).
    pub gid: [u8; 16],
}

impl VerbsAddress {
    /// Encodes the address.
    pub fn encode(&self) -> [u8; ADDRESS_LEN] {
        fixed(|w| {
            w.bytes(&ADDRESS_MAGIC);
            w.u8(ADDRESS_VERSION);
            w.u8(self.link_layer.code());
            w.u8(self.port);
            w.u8(self.mtu);
            w.u16(self.lid);
            w.u8(self.gid_index);
            w.zeros(1);
            w.u32(self.cm_qpn);
            w.u32(self.qkey);
            w.u32(self.psn);
            w.u16(self.credits);
            w.zeros(2);
            w.u32(self.fragment_size);
            w.bytes(&self.gid);
        })
    }

    /// Parses and checks an address another process published.
    pub fn parse(bytes: &[u8]) -> Result<Self, VerbsWireError> {
        let mut f = exact(bytes, ADDRESS_LEN)?;
        if f.array::<4>()? != ADDRESS_MAGIC {
            return Err(VerbsWireError::BadMagic);
        }
        let version = f.u8()?;
        if version != ADDRESS_VERSION {
            return Err(VerbsWireError::UnknownVersion(version));
        }
        let link_layer = LinkLayer::from_code(f.u8()?)?;
        let port = f.u8()?;
        let mtu = f.u8()?;
        let lid = f.u16()?;
        let gid_index = f.u8()?;
        f.reserved::<1>(VerbsWireError::Reserved)?;
        let cm_qpn = f.u32()?;
        let qkey = f.u32()?;
        let psn = f.u32()?;
        let credits = f.u16()?;
        f.reserved::<2>(VerbsWireError::Reserved)?;
        let fragment_size = f.u32()?;
        let gid = f.array::<16>()?;
        let a = Self {
            link_layer,
            port,
            mtu,
            lid,
            gid_index,
            cm_qpn,
            qkey,
            psn,
            credits,
            fragment_size,
            gid,
        };
        a.check()?;
        Ok(a)
    }

    fn check(&self) -> Result<(), VerbsWireError> {
        if self.port == 0 {
            return Err(VerbsWireError::OutOfRange("port"));
        }
        if !(1..=5).contains(&self.mtu) {
            return Err(VerbsWireError::OutOfRange("mtu"));
        }
        if self.cm_qpn == 0 || self.cm_qpn > MAX_QPN {
            return Err(VerbsWireError::OutOfRange("queue pair number"));
        }
        if self.psn > MAX_PSN {
            return Err(VerbsWireError::OutOfRange("packet sequence number"));
        }
        if self.credits == 0 {
            return Err(VerbsWireError::OutOfRange("credits"));
        }
        if (self.fragment_size as usize) < FRAGMENT_HEADER_LEN {
            return Err(VerbsWireError::OutOfRange("fragment size"));
        }
        match self.link_layer {
            // RoCE has no LIDs: every packet carries a GRH built from the GID.
            LinkLayer::Ethernet if self.gid == [0; 16] => Err(VerbsWireError::OutOfRange("gid")),
            LinkLayer::InfiniBand if self.lid == 0 || self.lid >= 0xc000 => {
                Err(VerbsWireError::OutOfRange("lid"))
            }
            _ => Ok(()),
        }
    }

    /// The GID's subnet prefix (its first 8 bytes, as on the wire).
    pub fn subnet_prefix(&self) -> [u8; 8] {
        let mut p = [0u8; 8];
        p.copy_from_slice(&self.gid[..8]);
        p
    }

    /// Whether packets to `peer` need a global route header: always on
    /// Ethernet, and on InfiniBand when the peer is in another subnet.
    pub fn needs_global_route(&self, peer: &Self) -> bool {
        self.link_layer == LinkLayer::Ethernet || self.subnet_prefix() != peer.subnet_prefix()
    }
}

/// Encoded bytes of a [`Connect`] message, its tag included.
pub const CONNECT_LEN: usize = CONNECT_FIELDS_LEN + DIGEST_LEN;
/// Bytes of a [`Connect`] message the tag covers.
const CONNECT_FIELDS_LEN: usize = 16;
/// Label mixed into the tag, so it means nothing to other protocols that
/// use the job key.
const CONNECT_LABEL: &[u8] = b"fireopal verbs connect v1";

fn connect_tag(key: &[u8], fields: &[u8]) -> [u8; DIGEST_LEN] {
    let mut mac = HmacSha256::new(key);
    mac.update(CONNECT_LABEL);
    mac.update(fields);
    mac.finalize()
}

/// What a connection message asks of its receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectKind {
    /// "Here is my queue pair for you; make yours and connect it to mine."
    Request,
    /// "Here is my queue pair for you", the answer to a request.
    Reply,
}

/// A connection message, sent over the datagram queue pair: the sender's
/// reliable queue pair for the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Connect {
    /// Request or reply.
    pub kind: ConnectKind,
    /// Rank of the sender.
    pub src_rank: u32,
    /// Rank the sender means to reach (checked by the receiver).
    pub dst_rank: u32,
    /// The sender's reliable queue pair number for this pair of ranks.
    pub qpn: u32,
}

impl Connect {
    /// Encodes the message, signed with the job key `key`.
    pub fn encode(&self, key: &[u8]) -> [u8; CONNECT_LEN] {
        let fields: [u8; CONNECT_FIELDS_LEN] = fixed(|w| {
            w.u8(match self.kind {
                ConnectKind::Request => 1,
                ConnectKind::Reply => 2,
            });
            w.zeros(3);
            w.u32(self.src_rank);
            w.u32(self.dst_rank);
            w.u32(self.qpn);
        });
        let tag = connect_tag(key, &fields);
        fixed(|w| {
            w.bytes(&fields);
            w.bytes(&tag);
        })
    }

    /// Parses and checks a connection message, which must be signed with
    /// the job key `key`.
    pub fn parse(bytes: &[u8], key: &[u8]) -> Result<Self, VerbsWireError> {
        let mut f = exact(bytes, CONNECT_LEN)?;
        let fields = f.take(CONNECT_FIELDS_LEN)?;
        if !tags_equal(&connect_tag(key, fields), f.take(DIGEST_LEN)?) {
            return Err(VerbsWireError::BadTag);
        }
        let mut f = exact(fields, CONNECT_FIELDS_LEN)?;
        let kind = match f.u8()? {
            1 => ConnectKind::Request,
            2 => ConnectKind::Reply,
            k => return Err(VerbsWireError::UnknownKind(k)),
        };
        f.reserved::<3>(VerbsWireError::Reserved)?;
        let m = Self {
            kind,
            src_rank: f.u32()?,
            dst_rank: f.u32()?,
            qpn: f.u32()?,
        };
        if m.qpn == 0 || m.qpn > MAX_QPN {
            return Err(VerbsWireError::OutOfRange("queue pair number"));
        }
        Ok(m)
    }
}

/// Bytes of a fragment header.
pub const FRAGMENT_HEADER_LEN: usize = 12;

/// What a fragment carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FragmentKind {
    /// An active message; it takes one of the sender's credits.
    Message,
    /// Only returned credits; it takes none.
    Credit,
}

/// The header of one fragment on a reliable connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragmentHeader {
    /// Message or credit update.
    pub kind: FragmentKind,
    /// The active message's tag (0 for credit updates).
    pub tag: u8,
    /// Bytes of the active-message header that follow.
    pub header_len: u16,
    /// Bytes of payload after the header.
    pub payload_len: u32,
    /// Credits the sender returns to the receiver.
    pub credits: u16,
}

/// A parsed fragment: its header and the bytes it carries, borrowed from
/// the receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment<'a> {
    /// The fixed header.
    pub head: FragmentHeader,
    /// The active-message header.
    pub header: &'a [u8],
    /// The payload.
    pub payload: &'a [u8],
}

impl FragmentHeader {
    /// Encodes the fixed header.
    pub fn encode(&self) -> [u8; FRAGMENT_HEADER_LEN] {
        fixed(|w| self.write(w))
    }

    fn write(&self, w: &mut Writer<'_>) {
        w.u8(match self.kind {
            FragmentKind::Message => 1,
            FragmentKind::Credit => 2,
        });
        w.u8(self.tag);
        w.u16(self.header_len);
        w.u32(self.payload_len);
        w.u16(self.credits);
        w.zeros(2);
    }

    /// Bytes of the whole fragment: fixed header, header, payload.
    pub fn total_len(&self) -> usize {
        FRAGMENT_HEADER_LEN + usize::from(self.header_len) + self.payload_len as usize
    }

    /// Parses a fragment of exactly `bytes` (the length the completion
    /// reported): the lengths inside must add up to it.
    pub fn parse(bytes: &[u8]) -> Result<Fragment<'_>, VerbsWireError> {
        let fixed_part = bytes
            .get(..FRAGMENT_HEADER_LEN)
            .ok_or(VerbsWireError::Truncated {
                need: FRAGMENT_HEADER_LEN,
                have: bytes.len(),
            })?;
        let mut f = exact(fixed_part, FRAGMENT_HEADER_LEN)?;
        let kind = match f.u8()? {
            1 => FragmentKind::Message,
            2 => FragmentKind::Credit,
            k => return Err(VerbsWireError::UnknownKind(k)),
        };
        let head = Self {
            kind,
            tag: f.u8()?,
            header_len: f.u16()?,
            payload_len: f.u32()?,
            credits: f.u16()?,
        };
        f.reserved::<2>(VerbsWireError::Reserved)?;
        if kind == FragmentKind::Credit && (head.header_len != 0 || head.payload_len != 0) {
            return Err(VerbsWireError::OutOfRange("credit update length"));
        }
        let mut rest = Reader::new(bytes.get(FRAGMENT_HEADER_LEN..).unwrap_or(&[]));
        let need = FRAGMENT_HEADER_LEN
            .saturating_add(usize::from(head.header_len))
            .saturating_add(head.payload_len as usize);
        let short = VerbsWireError::Truncated {
            need,
            have: bytes.len(),
        };
        let header = rest.take(usize::from(head.header_len)).ok_or(short)?;
        let payload = rest.take(head.payload_len as usize).ok_or(short)?;
        if rest.remaining() != 0 {
            return Err(VerbsWireError::TrailingBytes);
        }
        Ok(Fragment {
            head,
            header,
            payload,
        })
    }
}

/// Encoded bytes of a [`RemoteKey`].
pub const REMOTE_KEY_LEN: usize = 24;

/// Rights a remote key grants.
const KEY_READ: u8 = 1;
const KEY_WRITE: u8 = 2;

/// What a peer needs to reach a registration with RDMA: the registered
/// range, the device's remote key, and the rights it was registered
/// with, so an initiator refuses an operation the target would fail
/// (which would break the connection) before posting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteKey {
    /// First registered address (the owner's).
    pub addr: u64,
    /// Registered bytes.
    pub len: u64,
    /// The device's remote key.
    pub rkey: u32,
    /// Peers may read.
    pub read: bool,
    /// Peers may write.
    pub write: bool,
}

impl RemoteKey {
    /// Encodes the key.
    pub fn encode(&self) -> [u8; REMOTE_KEY_LEN] {
        fixed(|w| {
            w.u64(self.addr);
            w.u64(self.len);
            w.u32(self.rkey);
            let mut access = 0;
            if self.read {
                access |= KEY_READ;
            }
            if self.write {
                access |= KEY_WRITE;
            }
            w.u8(access);
            w.zeros(3);
        })
    }

    /// Parses and checks a key a peer sent.
    pub fn parse(bytes: &[u8]) -> Result<Self, VerbsWireError> {
        let mut f = exact(bytes, REMOTE_KEY_LEN)?;
        let addr = f.u64()?;
        let len = f.u64()?;
        let rkey = f.u32()?;
        let access = f.u8()?;
        f.reserved::<3>(VerbsWireError::Reserved)?;
        if access & !(KEY_READ | KEY_WRITE) != 0 {
            return Err(VerbsWireError::OutOfRange("access"));
        }
        if addr.checked_add(len).is_none() {
            return Err(VerbsWireError::OutOfRange("registered range"));
        }
        Ok(Self {
            addr,
            len,
            rkey,
            read: access & KEY_READ != 0,
            write: access & KEY_WRITE != 0,
        })
    }

    /// Whether `[addr, addr + len)` lies inside the registration and the
    /// key grants the access (`write` for a put, else read for a get).
    pub fn permits(&self, addr: u64, len: u64, write: bool) -> bool {
        let allowed = if write { self.write } else { self.read };
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        allowed && addr >= self.addr && end <= self.addr.saturating_add(self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credit_update_carries_no_bytes() {
        let head = FragmentHeader {
            kind: FragmentKind::Credit,
            tag: 0,
            header_len: 0,
            payload_len: 0,
            credits: 7,
        };
        let bytes = head.encode();
        let frag = FragmentHeader::parse(&bytes).unwrap();
        assert_eq!(frag.head, head);
        let mut bad = bytes;
        bad[4] = 1;
        let mut long = [0u8; FRAGMENT_HEADER_LEN + 1];
        long[..FRAGMENT_HEADER_LEN].copy_from_slice(&bad);
        assert_eq!(
            FragmentHeader::parse(&long),
            Err(VerbsWireError::OutOfRange("credit update length"))
        );
    }

    #[test]
    fn roce_needs_a_gid_and_infiniband_a_lid() {
        let mut a = VerbsAddress {
            link_layer: LinkLayer::Ethernet,
            port: 1,
            mtu: 3,
            lid: 0,
            gid_index: 3,
            cm_qpn: 0x11,
            qkey: 0x1111_1111,
            psn: 5,
            credits: 32,
            fragment_size: 8192,
            gid: [0; 16],
        };
        assert_eq!(
            VerbsAddress::parse(&a.encode()),
            Err(VerbsWireError::OutOfRange("gid"))
        );
        a.gid[15] = 1;
        assert_eq!(VerbsAddress::parse(&a.encode()), Ok(a));
        a.link_layer = LinkLayer::InfiniBand;
        assert_eq!(
            VerbsAddress::parse(&a.encode()),
            Err(VerbsWireError::OutOfRange("lid"))
        );
        a.lid = 4;
        assert_eq!(VerbsAddress::parse(&a.encode()), Ok(a));
        assert!(!a.needs_global_route(&a));
    }
}
