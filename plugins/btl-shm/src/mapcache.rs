//! Mappings of peers' segments, cached in the registration cache.
//!
//! A peer describes a segment by a [`SegmentRef`]; this process maps the
//! whole segment once and keeps the mapping in a
//! [`RegCache`](fireopal_core::regcache::RegCache) keyed by the peer's own
//! addresses (one key space per peer, see
//! [`fireopal_core::shmq::keyspace`]). The cache's "register" is: fetch the
//! peer's descriptor, check it is the segment described (inode number,
//! size, seals), map it; "deregister" is unmapping. An entry stays until
//! the owner says it unmapped the segment (an unmap notice invalidates the
//! key range), the peer goes, or the cache evicts it.

// Unmapping a cached mapping when the cache lets it go.
#![allow(unsafe_code)]

use std::fmt;
use std::sync::{Arc, Mutex};

use fireopal_core::regcache::{Access, Region, RegistrationBackend};
use fireopal_core::wire::shm::SegmentRef;

use crate::mem::{unmap_raw, Mapping};
use crate::sys;

/// A mapping of a peer's segment, as the cache holds it.
#[derive(Debug)]
pub(crate) struct PeerMapping {
    /// Where this process mapped it.
    pub(crate) addr: usize,
    /// Bytes mapped.
    pub(crate) len: usize,
    /// The owner's id of the segment.
    pub(crate) seg_id: u64,
    /// Inode number of its file.
    pub(crate) file_id: u64,
}

/// Why a peer's segment could not be mapped.
#[derive(Debug)]
pub(crate) enum MapError {
    /// The cache asked for a range other than the segment requested.
    NotRequested,
    /// The peer's descriptor could not be fetched.
    Fetch(std::io::Error),
    /// The descriptor is not the segment described.
    WrongFile(&'static str),
    /// mmap failed.
    Map(std::io::Error),
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotRequested => f.write_str("mapping range differs from the segment requested"),
            Self::Fetch(e) => write!(f, "cannot fetch the peer's segment descriptor: {e}"),
            Self::WrongFile(why) => {
                write!(f, "peer's descriptor is not the segment described: {why}")
            }
            Self::Map(e) => write!(f, "cannot map the peer's segment: {e}"),
        }
    }
}

impl std::error::Error for MapError {}

/// What the next miss must map.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MapRequest {
    /// The key range the cache will ask for.
    pub(crate) key: Region,
    /// Process id of the owner.
    pub(crate) pid: u32,
    /// A pidfd of the owner, where it has one (borrowed for the duration
    /// of the lookup).
    pub(crate) pidfd: Option<i32>,
    /// The segment.
    pub(crate) seg: SegmentRef,
}

/// The cache backend: maps what the transport asked for just before its
/// lookup.
#[derive(Debug, Default)]
pub(crate) struct PeerMapper {
    request: Arc<Mutex<Option<MapRequest>>>,
}

impl PeerMapper {
    /// The slot the transport fills before each lookup.
    pub(crate) fn request_slot(&self) -> Arc<Mutex<Option<MapRequest>>> {
        Arc::clone(&self.request)
    }
}

/// Access every peer mapping is made with (they are all read-write), so
/// that every lookup can hit every mapping.
pub(crate) const MAPPING_ACCESS: Access = Access::LOCAL_WRITE;

impl RegistrationBackend for PeerMapper {
    type Handle = PeerMapping;
    type Error = MapError;

    fn register(&self, region: Region, _access: Access) -> Result<PeerMapping, MapError> {
        let req = self
            .request
            .lock()
            .ok()
            .and_then(|r| *r)
            .filter(|r| r.key == region)
            .ok_or(MapError::NotRequested)?;
        // The transport keeps the pidfd open across the lookup that leads
        // here; were it closed, the call would just fail.
        let fd = sys::fetch_fd(req.pidfd, req.pid, req.seg.fd).map_err(MapError::Fetch)?;
        let facts = sys::facts(&fd).map_err(MapError::Fetch)?;
        if facts.ino != req.seg.file_id {
            return Err(MapError::WrongFile("inode number differs"));
        }
        if facts.size != req.seg.len {
            return Err(MapError::WrongFile("size differs"));
        }
        if facts.seals & sys::SEALS != sys::SEALS {
            return Err(MapError::WrongFile("not sealed against resizing"));
        }
        let len = usize::try_from(req.seg.len).map_err(|_| MapError::WrongFile("too large"))?;
        let map = Mapping::map(&fd, len, true).map_err(MapError::Map)?;
        let (addr, len) = map.into_raw();
        Ok(PeerMapping {
            addr,
            len,
            seg_id: req.seg.id,
            file_id: req.seg.file_id,
        })
    }

    fn deregister(&self, _region: Region, handle: &PeerMapping) {
        // SAFETY: the cache calls this exactly once per mapping made by
        // `register`, after its last user gave it back.
        unsafe { unmap_raw(handle.addr, handle.len) };
    }
}
