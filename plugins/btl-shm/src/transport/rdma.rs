//! RDMA: `put` and `get` on memory a peer registered, and the
//! registrations of this process's memory they target.
//!
//! An operation ([`ShmTransport::rdma`]) takes the first path that works:
//! one copy through a cached mapping when the remote key names a segment
//! of the peer's ([`super::mapping`]); process_vm_readv/writev when
//! permitted (a refusal turns it off for that peer, and the peer is told);
//! otherwise it is emulated through the queues ([`RdmaOut`]): a put
//! streams its data in fragments, a get sends a request the target answers
//! with data; the target checks each against its registrations
//! ([`LocalReg`]) and does the copy when it progresses (in
//! [`super::receive`]).

use fireopal_abi::btl::{Access, Completion, MemRegion, Rank, RdmaOp, RemoteMapping};
use fireopal_abi::host::LogLevel;
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::shmq::Kind;
use fireopal_core::wire::shm::{GetRequest, RemoteKey};

use super::{io_error, Pending, ShmTransport};
use crate::mem::View;
use crate::queue::Frag;
use crate::sys;

/// An emulated RDMA operation waiting for the target.
#[derive(Debug)]
pub(super) struct RdmaOut {
    pub(super) peer: u32,
    pub(super) cookie: u64,
    pub(super) local: usize,
    pub(super) len: u64,
    pub(super) received: u64,
    pub(super) is_put: bool,
}

/// A registration of this process's memory.
#[derive(Debug, Clone, Copy)]
pub(super) struct LocalReg {
    pub(super) base: u64,
    pub(super) len: u64,
    pub(super) access: Access,
}

impl LocalReg {
    pub(super) fn allows(&self, need: Access, addr: u64, len: u64) -> bool {
        self.access.contains(need)
            && addr >= self.base
            && addr
                .checked_add(len)
                .is_some_and(|e| e <= self.base + self.len)
    }
}

impl ShmTransport {
    /// Maps the whole registration `remote_key` of `peer` into this
    /// process, through the cached mapping of the segment it lies in. The
    /// mapping is held (never dropped from the cache's memory) until
    /// `unmap_remote`; a registration outside any segment of the peer's,
    /// or with memfd mappings turned off, is refused as unsupported, for
    /// the caller to go through `put` and `get` instead.
    pub fn map_remote(
        &mut self,
        peer: Rank,
        remote_key: &[u8],
    ) -> Result<RemoteMapping, PluginError> {
        let p = self.st.usable_peer(peer)?;
        let key = RemoteKey::decode(remote_key)
            .map_err(|e| PluginError::invalid(format!("map_remote: bad remote key: {e}")))?;
        let peer_pid = match self.st.peers.get(p as usize).and_then(Option::as_ref) {
            Some(peer) => peer.pid,
            None => return Err(PluginError::new(ErrorKind::UNREACHABLE, "peer was removed")),
        };
        if key.pid != peer_pid {
            return Err(PluginError::invalid(
                "map_remote: remote key of another process",
            ));
        }
        let Some(seg) = key.segment.filter(|_| self.st.cfg.single_copy.memfd()) else {
            return Err(PluginError::unsupported(
                "remote mappings of memory outside a mapped segment",
            ));
        };
        let off = seg
            .offset_of(key.base, key.len)
            .ok_or_else(|| PluginError::invalid("map_remote: registration outside its segment"))?;
        self.st.reap_buffers();
        let reg = self
            .st
            .map_segment(p, &seg)
            .map_err(|why| PluginError::new(ErrorKind::IO, format!("map_remote: {why}")))?;
        let h = reg.handle();
        if off
            .checked_add(key.len)
            .is_none_or(|end| end > h.len as u64)
        {
            return Err(PluginError::invalid(
                "map_remote: range outside the mapping",
            ));
        }
        // SAFETY: the range lies inside the mapping (checked above), which
        // `reg` keeps alive until `unmap_remote` drops it.
        let local = unsafe { MemRegion::new((h.addr + off as usize) as *mut u8, key.len as usize) };
        let id = self.st.next_remote_map;
        self.st.next_remote_map += 1;
        self.st.remote_maps.insert(id, reg);
        Ok(RemoteMapping {
            id,
            remote_addr: key.base,
            local,
        })
    }

    pub(super) fn rdma(
        &mut self,
        op: &RdmaOp<'_>,
        is_put: bool,
    ) -> Result<Completion, PluginError> {
        let what = if is_put { "put" } else { "get" };
        let p = self.st.usable_peer(op.peer)?;
        let key = RemoteKey::decode(op.remote_key.as_slice())
            .map_err(|e| PluginError::invalid(format!("{what}: bad remote key: {e}")))?;
        let (peer_pid, peer_cma) = match self.st.peers.get(p as usize).and_then(Option::as_ref) {
            Some(peer) => (peer.pid, peer.cma.is_ok()),
            None => return Err(PluginError::new(ErrorKind::UNREACHABLE, "peer was removed")),
        };
        if key.pid != peer_pid {
            return Err(PluginError::invalid(format!(
                "{what}: remote key of another process"
            )));
        }
        let need = if is_put {
            Access::REMOTE_WRITE
        } else {
            Access::REMOTE_READ
        };
        if u32::from(key.access) & need.0 != need.0 {
            return Err(PluginError::invalid(format!(
                "{what}: registration does not grant it"
            )));
        }
        let len = op.local.len() as u64;
        if len == 0 {
            return Ok(Completion::Done);
        }
        if !key.covers(op.remote_addr, len) {
            return Err(PluginError::invalid(format!(
                "{what}: range outside the registration"
            )));
        }
        self.st.reap_buffers();
        if let Some(seg) = key.segment.filter(|_| self.st.cfg.single_copy.memfd()) {
            match self.st.map_segment(p, &seg) {
                Ok(reg) => {
                    let h = reg.handle();
                    let off = seg.offset_of(op.remote_addr, len).ok_or_else(|| {
                        PluginError::invalid(format!("{what}: range outside the segment"))
                    })?;
                    // SAFETY: the registration keeps the mapping alive
                    // while `reg` lives, across the copy below.
                    let view = unsafe { View::from_raw(h.addr, h.len) }
                        .ok_or_else(|| PluginError::new(ErrorKind::OTHER, "empty mapping"))?;
                    let ok = if is_put {
                        // SAFETY: `op.local` is valid for reads per
                        // `MemRegion`'s contract.
                        unsafe { view.write_raw(off as usize, op.local.as_ptr(), len as usize) }
                    } else {
                        // SAFETY: `op.local` is valid for writes per
                        // `MemRegion`'s contract.
                        unsafe { view.read_raw(off as usize, op.local.as_ptr(), len as usize) }
                    };
                    drop(reg);
                    if !ok {
                        return Err(PluginError::invalid(format!(
                            "{what}: range outside the mapping"
                        )));
                    }
                    self.st.counters.rdma_mapped += 1;
                    return Ok(Completion::Done);
                }
                Err(why) => self.st.log(
                    LogLevel::Debug,
                    &format!("shm: {what} cannot map rank {}'s segment: {why}", op.peer),
                ),
            }
        }
        if peer_cma && self.st.cma.is_ok() {
            let r = if is_put {
                // SAFETY: `op.local` is valid for reads per `MemRegion`.
                unsafe { sys::vm_write(peer_pid, op.remote_addr, op.local.as_ptr(), len as usize) }
            } else {
                // SAFETY: `op.local` is valid for writes per `MemRegion`.
                unsafe { sys::vm_read(peer_pid, op.remote_addr, op.local.as_ptr(), len as usize) }
            };
            match r {
                Ok(()) => {
                    self.st.counters.rdma_cma += 1;
                    return Ok(Completion::Done);
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOSYS)) => {
                    let why = format!(
                        "process_vm_{}v refused: {e}",
                        if is_put { "write" } else { "read" }
                    );
                    self.st
                        .log(LogLevel::Info, &format!("shm: rank {}: {why}", op.peer));
                    if let Some(peer) = self.st.peers.get_mut(p as usize).and_then(Option::as_mut) {
                        peer.cma = Err(why);
                    }
                    self.own.set_cma_flag(p, false);
                }
                Err(e) => return Err(io_error(what, e)),
            }
        }
        // Emulated through the queues; the target does the copy.
        let id = self.st.next_op;
        self.st.next_op += 1;
        self.st.rdma.insert(
            id,
            RdmaOut {
                peer: p,
                cookie: op.cookie,
                local: op.local.addr(),
                len,
                received: 0,
                is_put,
            },
        );
        self.st.counters.rdma_emulated += 1;
        if is_put {
            self.st.enqueue(
                p,
                Pending::PutStream {
                    id,
                    reg: key.reg,
                    remote: op.remote_addr,
                    local: op.local.addr(),
                    len,
                    sent: 0,
                },
            );
            self.st.flush();
        } else {
            let req = GetRequest {
                id,
                addr: op.remote_addr,
                len,
                reg: key.reg,
            }
            .encode();
            let frag = Frag::control(Kind::GetRequest, &req);
            if let Err(e) = self.st.emit(p, &frag, None) {
                self.st.rdma.remove(&id);
                return Err(e);
            }
        }
        Ok(Completion::Pending)
    }
}
