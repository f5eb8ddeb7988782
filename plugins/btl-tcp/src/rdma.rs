//! Memory registrations (the target side of `put`/`get`) and the RDMA
//! operations this process started (the initiator side).
//!
//! A registration records a range with its access rights and a random
//! secret; its remote key is (id, secret), so a key from a stale or forged
//! registration names nothing. Every remote access is checked here against
//! the registration's range and rights before a byte is touched; a bad key
//! or range is answered with an [`RdmaStatus`] that the initiator turns
//! into an error, never a write.
//!
//! `put` and `get` are emulated with frames on the peer's connection, so
//! they stay in order with its active messages. A lone operation is
//! written at once; a small one started while others are in flight is
//! held until the next `progress`, which writes the burst together (one
//! system call instead of one per operation).

use std::collections::HashMap;

use fireopal_abi::btl::{Access, MemRegion, Rank, Registration};
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::wire::tcp::frame::{RdmaStatus, RemoteKey};

use crate::sys::random_bytes;
use crate::RankHash;

#[derive(Debug, Clone, Copy)]
struct Registered {
    region: MemRegion,
    access: Access,
    secret: u64,
}

/// This module's registrations.
#[derive(Debug)]
pub(crate) struct Registrations {
    map: HashMap<u64, Registered, RankHash>,
    next_id: u64,
}

impl Default for Registrations {
    fn default() -> Self {
        Self {
            map: HashMap::default(),
            next_id: 1,
        }
    }
}

impl Registrations {
    /// Records `region` with `access`.
    pub(crate) fn register(
        &mut self,
        region: MemRegion,
        access: Access,
    ) -> Result<Registration, PluginError> {
        if region.is_empty() {
            return Err(PluginError::invalid("cannot register an empty region"));
        }
        if region.addr().checked_add(region.len()).is_none() {
            return Err(PluginError::invalid(
                "region wraps around the address space",
            ));
        }
        let mut secret = [0u8; 8];
        random_bytes(&mut secret)
            .map_err(|e| PluginError::new(ErrorKind::IO, format!("no random bytes: {e}")))?;
        let id = self.next_id;
        self.next_id += 1;
        let reg = Registered {
            region,
            access,
            secret: u64::from_le_bytes(secret),
        };
        self.map.insert(id, reg);
        let key = RemoteKey {
            id,
            secret: reg.secret,
        };
        Ok(Registration {
            id,
            remote_key: key.encode().to_vec().into(),
        })
    }

    /// Forgets registration `id`.
    pub(crate) fn deregister(&mut self, id: u64) -> Result<(), PluginError> {
        self.map
            .remove(&id)
            .map(drop)
            .ok_or_else(|| PluginError::invalid(format!("no registration {id}")))
    }

    /// The registered memory a peer may access with `key` at
    /// `[addr, addr + len)` for `need`: the registration's region, the
    /// offset of `addr` in it, and its id.
    pub(crate) fn resolve(
        &self,
        key: RemoteKey,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<(MemRegion, usize, u64), RdmaStatus> {
        let reg = self
            .map
            .get(&key.id)
            .filter(|r| r.secret == key.secret)
            .ok_or(RdmaStatus::UnknownKey)?;
        if !reg.access.contains(need) {
            return Err(RdmaStatus::AccessDenied);
        }
        let start = reg.region.addr() as u64;
        let end = start + reg.region.len() as u64;
        let op_end = addr.checked_add(len).ok_or(RdmaStatus::OutOfRange)?;
        if addr < start || op_end > end {
            return Err(RdmaStatus::OutOfRange);
        }
        let offset = usize::try_from(addr - start).map_err(|_| RdmaStatus::OutOfRange)?;
        Ok((reg.region, offset, key.id))
    }
}

/// What an RDMA operation still waits for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OpKind {
    /// A put: acknowledgements of its chunks.
    Put { acks_left: u64 },
    /// A get: the bytes of its answer, written into `local`.
    Get { local: MemRegion, received: u64 },
}

/// One operation this process started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Op {
    pub(crate) peer: Rank,
    pub(crate) cookie: u64,
    pub(crate) kind: OpKind,
    /// First failure reported by the target.
    pub(crate) status: RdmaStatus,
    /// A get whose answer is larger than the staging buffer.
    large_answer: bool,
}

/// Operations in flight, by id.
#[derive(Debug)]
pub(crate) struct Ops {
    map: HashMap<u64, Op, RankHash>,
    next_id: u64,
    /// Per peer, gets in flight whose answers are larger than the staging
    /// buffer.
    large_answers: HashMap<Rank, u32, RankHash>,
}

impl Default for Ops {
    fn default() -> Self {
        Self {
            map: HashMap::default(),
            next_id: 1,
            large_answers: HashMap::default(),
        }
    }
}

impl Ops {
    /// Records a new operation; returns its id. `large_answer`: a get
    /// whose answer will not fit the staging buffer.
    pub(crate) fn start(
        &mut self,
        peer: Rank,
        cookie: u64,
        kind: OpKind,
        large_answer: bool,
    ) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.map.insert(
            id,
            Op {
                peer,
                cookie,
                kind,
                status: RdmaStatus::Ok,
                large_answer,
            },
        );
        if large_answer {
            *self.large_answers.entry(peer).or_default() += 1;
        }
        id
    }

    /// Whether a get answer larger than the staging buffer is on its way
    /// from `peer`.
    #[inline]
    pub(crate) fn large_answer_due(&self, peer: Rank) -> bool {
        !self.large_answers.is_empty() && self.large_answers.contains_key(&peer)
    }

    /// The operation `id`, if it is in flight to `peer`.
    pub(crate) fn get_mut(&mut self, id: u64, peer: Rank) -> Option<&mut Op> {
        self.map.get_mut(&id).filter(|op| op.peer == peer)
    }

    /// Ends operation `id`.
    pub(crate) fn finish(&mut self, id: u64) -> Option<Op> {
        let op = self.map.remove(&id)?;
        if op.large_answer {
            if let Some(n) = self.large_answers.get_mut(&op.peer) {
                *n -= 1;
                if *n == 0 {
                    self.large_answers.remove(&op.peer);
                }
            }
        }
        Some(op)
    }

    /// Ends every operation to `peer`, returning their cookies.
    pub(crate) fn drain_peer(&mut self, peer: Rank) -> Vec<u64> {
        self.large_answers.remove(&peer);
        let ids: Vec<u64> = self
            .map
            .iter()
            .filter(|(_, op)| op.peer == peer)
            .map(|(&id, _)| id)
            .collect();
        let mut cookies: Vec<(u64, u64)> = ids
            .into_iter()
            .filter_map(|id| self.map.remove(&id).map(|op| (id, op.cookie)))
            .collect();
        // Report in the order the operations started.
        cookies.sort_unstable();
        cookies.into_iter().map(|(_, c)| c).collect()
    }

    /// Operations in flight.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// The error an initiator sees for a target's status.
pub(crate) fn status_error(what: &str, peer: Rank, status: RdmaStatus) -> PluginError {
    PluginError::invalid(format!("{what} on rank {peer}: {status}"))
}

#[cfg(test)]
#[allow(unsafe_code)] // tests lend memory to the module as the host does
mod tests {
    use super::*;

    #[test]
    fn resolve_checks_key_rights_and_range() {
        let mut mem = vec![0u8; 100];
        // SAFETY: `mem` outlives the registrations.
        let region = unsafe { MemRegion::new(mem.as_mut_ptr(), mem.len()) };
        let base = region.addr() as u64;
        let mut regs = Registrations::default();
        let r = regs
            .register(region, Access::REMOTE_WRITE | Access::LOCAL_READ)
            .unwrap();
        let key = RemoteKey::parse(&r.remote_key).unwrap();
        assert_eq!(key.id, r.id);

        let ok = regs
            .resolve(key, base + 10, 90, Access::REMOTE_WRITE)
            .unwrap();
        assert_eq!((ok.1, ok.2), (10, r.id));
        assert!(regs.resolve(key, base, 100, Access::REMOTE_WRITE).is_ok());
        assert!(regs
            .resolve(key, base + 100, 0, Access::REMOTE_WRITE)
            .is_ok());
        assert_eq!(
            regs.resolve(key, base + 10, 91, Access::REMOTE_WRITE)
                .unwrap_err(),
            RdmaStatus::OutOfRange
        );
        assert_eq!(
            regs.resolve(key, base - 1, 1, Access::REMOTE_WRITE)
                .unwrap_err(),
            RdmaStatus::OutOfRange
        );
        assert_eq!(
            regs.resolve(key, u64::MAX, 2, Access::REMOTE_WRITE)
                .unwrap_err(),
            RdmaStatus::OutOfRange
        );
        assert_eq!(
            regs.resolve(key, base, 1, Access::REMOTE_READ).unwrap_err(),
            RdmaStatus::AccessDenied
        );
        let forged = RemoteKey {
            id: key.id,
            secret: key.secret ^ 1,
        };
        assert_eq!(
            regs.resolve(forged, base, 1, Access::REMOTE_WRITE)
                .unwrap_err(),
            RdmaStatus::UnknownKey
        );
        regs.deregister(r.id).unwrap();
        assert_eq!(
            regs.resolve(key, base, 1, Access::REMOTE_WRITE)
                .unwrap_err(),
            RdmaStatus::UnknownKey
        );
        assert!(regs.deregister(r.id).is_err());
    }

    #[test]
    fn empty_regions_are_refused() {
        let mut regs = Registrations::default();
        let mut byte = 0u8;
        // SAFETY: zero-length region, never accessed.
        let empty = unsafe { MemRegion::new(&mut byte, 0) };
        assert!(regs.register(empty, Access::REMOTE_READ).is_err());
    }

    #[test]
    fn ops_are_ended_once() {
        let mut ops = Ops::default();
        let a = ops.start(1, 10, OpKind::Put { acks_left: 1 }, false);
        let b = ops.start(2, 20, OpKind::Put { acks_left: 1 }, false);
        let c = ops.start(1, 30, OpKind::Put { acks_left: 2 }, false);
        assert!(ops.get_mut(a, 2).is_none(), "wrong peer");
        assert!(ops.get_mut(a, 1).is_some());
        assert_eq!(ops.drain_peer(1), [10, 30]);
        assert!(ops.finish(a).is_none());
        assert!(ops.finish(c).is_none());
        assert_eq!(ops.finish(b).map(|o| o.cookie), Some(20));
        assert_eq!(ops.len(), 0);
    }

    #[test]
    fn large_answers_are_counted_until_their_gets_end() {
        let mut byte = 0u8;
        // SAFETY: never accessed: the operations are only bookkept.
        let local = unsafe { MemRegion::new(&mut byte, 1) };
        let get = OpKind::Get { local, received: 0 };
        let mut ops = Ops::default();
        assert!(!ops.large_answer_due(1));
        let small = ops.start(1, 1, get, false);
        assert!(!ops.large_answer_due(1), "an answer that fits the staging");
        let a = ops.start(1, 2, get, true);
        let b = ops.start(1, 3, get, true);
        let c = ops.start(2, 4, get, true);
        assert!(ops.large_answer_due(1) && ops.large_answer_due(2));
        ops.finish(small);
        ops.finish(a);
        assert!(ops.large_answer_due(1), "one of two left");
        ops.finish(b);
        assert!(!ops.large_answer_due(1));
        assert!(ops.large_answer_due(2));
        assert_eq!(ops.drain_peer(2), [4]);
        assert!(!ops.large_answer_due(2));
        assert!(ops.finish(c).is_none(), "drained");
    }
}
