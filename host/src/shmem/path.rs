//! How operations reach each PE: this process's own heap, a node-local
//! PE's heap mapped here, or the transports. A PE's path is found on
//! first use, from the heap entry it published, and kept.

use std::rc::Rc;

use fireopal_abi::btl::BtlFlags;
use fireopal_core::wire::shmem::HeapEntry;

use super::{Shmem, ShmemError, HEAP_KEY};
use crate::btl::RemoteMap;

/// How operations on a PE travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// The PE is this process.
    Own,
    /// Loads, stores and CPU atomics through a mapping of its heap.
    Mapped,
    /// The transports: RDMA for put and get where the route offers it
    /// (and `shmem_rdma` is on), else messages the target copies; atomics
    /// are messages the target executes.
    Remote,
}

/// The path to one PE.
#[derive(Debug)]
pub(super) enum Path {
    Own,
    Mapped {
        /// Where the PE's heap starts in this process.
        base: *mut u8,
        map: RemoteMap,
    },
    Remote {
        /// Where its heap starts in its own address space.
        base: u64,
        /// The key of its heap's registration on this route, shared so
        /// that an operation takes it without copying.
        key: Rc<[u8]>,
        /// Puts and gets are the transport's RDMA; otherwise messages the
        /// target copies.
        rdma: bool,
        /// The target's own progress moves put data on this route (no
        /// RDMA, or RDMA the target serves): small puts go in batches.
        batch: bool,
        /// RDMA stays in order with messages (one lane): a batch sent
        /// before an RDMA operation lands before it.
        in_order: bool,
    },
}

impl Path {
    pub(super) fn kind(&self) -> PathKind {
        match self {
            Self::Own => PathKind::Own,
            Self::Mapped { .. } => PathKind::Mapped,
            Self::Remote { .. } => PathKind::Remote,
        }
    }
}

impl Shmem<'_> {
    /// The path to `pe`, found on first use.
    #[inline]
    pub(super) fn path(&mut self, pe: u32) -> Result<&Path, ShmemError> {
        if !self.st.paths.contains_key(&pe) {
            let path = self.resolve(pe)?;
            self.st.paths.insert(pe, path);
        }
        self.st
            .paths
            .get(&pe)
            .ok_or_else(|| ShmemError::NoSuchPe(pe))
    }

    /// `f` of the path to `pe`: one lookup for a PE reached before, the
    /// path found on first use.
    #[inline]
    pub(super) fn with_path<R>(
        &mut self,
        pe: u32,
        f: impl FnOnce(&Path) -> R,
    ) -> Result<R, ShmemError> {
        if let Some(path) = self.st.paths.get(&pe) {
            return Ok(f(path));
        }
        Ok(f(self.path(pe)?))
    }

    fn resolve(&mut self, pe: u32) -> Result<Path, ShmemError> {
        self.check_pe(pe)?;
        if pe == self.st.me {
            return Ok(Path::Own);
        }
        let bad = |reason: String| ShmemError::BadHeapEntry { pe, reason };
        let bytes = self
            .boot
            .get(pe, HEAP_KEY)
            .map_err(|e| bad(format!("not published: {e}")))?;
        let entry = HeapEntry::decode(&bytes).map_err(|e| bad(e.to_string()))?;
        if entry.len != self.heap.len() {
            return Err(bad(format!(
                "{} bytes, where this PE's is {}",
                entry.len,
                self.heap.len()
            )));
        }
        // No key for this route: the PE's heap is reached in messages.
        let Some(key) = self.m.remote_key_for(pe, entry.key) else {
            return Ok(Path::Remote {
                base: entry.base,
                key: Rc::from(&[][..]),
                rdma: false,
                batch: true,
                in_order: true,
            });
        };
        if self.st.direct {
            if let Some(map) = self.m.map_remote(pe, &key)? {
                let local = map.local();
                let start = entry.base.checked_sub(map.remote_addr());
                let fits = start.is_some_and(|s| {
                    s.checked_add(entry.len)
                        .is_some_and(|end| end <= local.len() as u64)
                });
                match start.filter(|_| fits) {
                    Some(s) => {
                        return Ok(Path::Mapped {
                            base: local.as_ptr().wrapping_add(s as usize),
                            map,
                        })
                    }
                    None => {
                        // The mapping does not cover the heap: go through
                        // the transport.
                        let _ = self.m.unmap_remote(map);
                    }
                }
            }
        }
        let flags = self.m.attributes(pe).map(|a| a.flags).unwrap_or_default();
        let rdma = self.st.rdma && flags.contains(BtlFlags::PUT) && flags.contains(BtlFlags::GET);
        Ok(Path::Remote {
            base: entry.base,
            key: Rc::from(key),
            rdma,
            batch: !rdma || flags.contains(BtlFlags::TARGET_SERVES_RDMA),
            in_order: self.m.lanes(pe).len() <= 1,
        })
    }
}
