//! Endpoints: the peers on this node, how one is added and found, and
//! whether process_vm_readv works with it.
//!
//! A peer is added from its published address ([`State::add_peer`]): the
//! address must be a node-local peer's (same boot id) and agree on
//! checksums; its queue segment's descriptor is fetched through a pidfd,
//! checked (inode, size, seals), mapped, and its header checked against
//! the job key before this process writes to it. `add_peers` answers why
//! a peer it cannot reach is unreachable.
//!
//! process_vm_readv is probed three ways: on this process's own memory
//! ([`probe_cma_self`], when the module is made), against Yama's ptrace
//! policy for siblings ([`probe_cma_siblings`], for the component's note
//! in `fireopal info`), and on each peer ([`probe_cma_peer`], reading the
//! magic word of its segment). A process publishes in its own segment,
//! per sender, whether it reads that sender's memory
//! ([`Own::set_cma_flag`]); the sender reads the flag
//! ([`State::reads_me`]) to decide whether an in-place payload may stay
//! where it is.

use std::collections::VecDeque;

use fireopal_abi::btl::{PeerAddress, Rank};
use fireopal_abi::host::LogLevel;
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::shmq::layout::{HeaderExpect, Layout, CMA_READS, CMA_WORD, MAGIC};
use fireopal_core::wire::shm::{Address, FIN_LEN, RTS_LEN};

use super::{checksum, Own, Pending, State, MAX_HEADER};
use crate::mem::Mapping;
use crate::queue::{FboxReader, FboxWriter};
use crate::sys;

/// A node-local peer.
#[derive(Debug)]
pub(super) struct Peer {
    pub(super) rank: Rank,
    pub(super) pid: u32,
    pub(super) process: sys::ProcessHandle,
    /// The peer's queue segment, mapped here.
    pub(super) seg: Mapping,
    pub(super) layout: Layout,
    pub(super) fbox_tx: FboxWriter,
    pub(super) tx_seq: u32,
    pub(super) pending: VecDeque<Pending>,
    pub(super) fbox_rx: FboxReader,
    pub(super) rx_seq: u32,
    /// Whether process_vm_readv works on this peer, or why not.
    pub(super) cma: Result<(), String>,
    pub(super) failed: Option<String>,
    /// Whether fragments to this peer carry checksums.
    pub(super) checksum: bool,
}

impl State {
    pub(super) fn peer_of(&self, rank: Rank) -> Result<u32, PluginError> {
        self.local_of_rank.get(&rank).copied().ok_or_else(|| {
            PluginError::new(
                ErrorKind::UNREACHABLE,
                format!("shm has no endpoint for rank {rank}"),
            )
        })
    }

    /// The local index of a peer that can be sent to.
    #[inline]
    pub(super) fn usable_peer(&self, rank: Rank) -> Result<u32, PluginError> {
        let p = self.peer_of(rank)?;
        match self.peers.get(p as usize).and_then(Option::as_ref) {
            Some(peer) if peer.failed.is_none() => Ok(p),
            Some(peer) => Err(PluginError::new(
                ErrorKind::PEER_FAILED,
                format!(
                    "rank {rank} failed: {}",
                    peer.failed.as_deref().unwrap_or("")
                ),
            )),
            None => Err(PluginError::new(
                ErrorKind::UNREACHABLE,
                format!("rank {rank} was removed"),
            )),
        }
    }

    /// Whether peer `p` said it reads this process's memory with
    /// process_vm_readv (the flag it keeps in its segment for this
    /// process), so an in-place send may leave the payload where it is.
    pub(super) fn reads_me(&self, p: u32) -> bool {
        let Some(peer) = self.peers.get(p as usize).and_then(Option::as_ref) else {
            return false;
        };
        peer.layout
            .fbox_ctl(self.local)
            .and_then(|ctl| peer.seg.view().word(ctl + CMA_WORD))
            .is_some_and(|w| w.load(std::sync::atomic::Ordering::Relaxed) == CMA_READS)
    }

    /// Whether this process reads and writes peer `p`'s memory with
    /// process_vm_readv/writev.
    pub(super) fn peer_cma(&self, p: u32) -> bool {
        self.cma.is_ok()
            && self
                .peers
                .get(p as usize)
                .and_then(Option::as_ref)
                .is_some_and(|peer| peer.cma.is_ok())
    }

    /// Adds one peer; returns its local index and whether this process
    /// reads its memory with process_vm_readv.
    pub(super) fn add_peer(&mut self, addr: &PeerAddress<'_>) -> Result<(u32, bool), String> {
        if addr.rank == self.rank {
            return Err("own rank (the self transport serves it)".into());
        }
        if !addr.node_local {
            return Err("not on this node".into());
        }
        let a =
            Address::decode(addr.address.as_slice()).map_err(|e| format!("bad address: {e}"))?;
        if a.boot_id != self.boot_id {
            return Err("published from another node (boot id differs)".into());
        }
        self.agree(&a)?;
        if a.rank != addr.rank {
            return Err(format!("address belongs to rank {}", a.rank));
        }
        if a.local >= self.local_size || a.local == self.local {
            return Err(format!("local index {} is invalid", a.local));
        }
        if self
            .peers
            .get(a.local as usize)
            .and_then(Option::as_ref)
            .is_some()
        {
            return Err(format!("local index {} is taken by another rank", a.local));
        }
        let process = sys::ProcessHandle::open(a.pid)
            .map_err(|e| format!("cannot watch the process of pid {}: {e}", a.pid))?;
        let fd = sys::fetch_fd(process.pidfd(), a.pid, a.fd)
            .map_err(|e| format!("cannot fetch the queue segment of pid {}: {e}", a.pid))?;
        let facts = sys::facts(&fd).map_err(|e| format!("fstat: {e}"))?;
        if facts.ino != a.file_id || facts.size != a.seg_len {
            return Err("descriptor is not the published segment".into());
        }
        if facts.seals & sys::SEALS != sys::SEALS {
            return Err("segment is not sealed against resizing".into());
        }
        let len = usize::try_from(a.seg_len).map_err(|_| "segment too large".to_owned())?;
        if len > fireopal_core::shmq::layout::MAX_SEGMENT {
            return Err("segment too large".into());
        }
        let seg = Mapping::map(&fd, len, true).map_err(|e| format!("mmap: {e}"))?;
        drop(fd);
        let view = seg.view();
        let header = view
            .bytes(0, fireopal_core::shmq::layout::HEADER_LEN)
            .ok_or("segment shorter than its header")?;
        let (layout, _) = Layout::decode_header(
            header,
            &HeaderExpect {
                job_key: &self.job_key,
                owner_rank: a.rank,
                owner_local: a.local,
                owner_pid: a.pid,
                file_id: facts.ino,
                file_len: facts.size,
                local_size: self.local_size,
            },
        )
        .map_err(|e| format!("segment header: {e}"))?;
        let trailer = checksum::trailer_len(self.cfg.checksum);
        if layout.fifo_data_capacity() < RTS_LEN + MAX_HEADER + trailer
            || layout.fbox_data_capacity() < FIN_LEN + trailer
        {
            return Err("peer's queue slots are too small".into());
        }
        let fbox_tx = FboxWriter::new(&layout, self.local).ok_or("no fast box for this process")?;
        let fbox_rx =
            FboxReader::new(&self.own_layout, a.local).ok_or("no fast box for the peer")?;
        let cma = match &self.cma {
            Err(why) => Err(why.clone()),
            Ok(()) => probe_cma_peer(a.pid, a.probe),
        };
        if let Err(why) = &cma {
            self.log(
                LogLevel::Info,
                &format!("shm: process_vm_readv not used with rank {}: {why}", a.rank),
            );
        }
        let cma_ok = cma.is_ok();
        self.peers[a.local as usize] = Some(Peer {
            rank: a.rank,
            pid: a.pid,
            process,
            seg,
            layout,
            fbox_tx,
            tx_seq: 0,
            pending: VecDeque::new(),
            fbox_rx,
            rx_seq: 0,
            cma,
            failed: None,
            checksum: self.cfg.checksum,
        });
        self.active.push(a.local);
        self.local_of_rank.insert(a.rank, a.local);
        self.last_sent = None;
        Ok((a.local, cma_ok))
    }
}

impl Own {
    /// Publishes, in sender `local`'s control line, whether this process
    /// reads that sender's memory with process_vm_readv.
    pub(super) fn set_cma_flag(&self, local: u32, reads: bool) {
        let word = self
            .layout
            .fbox_ctl(local)
            .and_then(|ctl| self.seg.map.view().word(ctl + CMA_WORD));
        if let Some(w) = word {
            w.store(
                if reads { CMA_READS } else { 0 },
                std::sync::atomic::Ordering::Release,
            );
        }
    }
}

/// Whether process_vm_readv may read sibling processes (the ranks of a
/// job): it must work at all, and Yama's ptrace policy must let this
/// process read a non-descendant.
pub(crate) fn probe_cma_siblings() -> Result<(), String> {
    probe_cma_self()?;
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
        .unwrap_or(0);
    let cap_sys_ptrace = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << 19) != 0);
    match scope {
        0 => Ok(()),
        1 | 2 if cap_sys_ptrace => Ok(()),
        1 => {
            Err("Yama ptrace_scope 1 lets it read only descendants, and ranks are siblings".into())
        }
        2 => Err("Yama ptrace_scope 2 needs CAP_SYS_PTRACE".into()),
        n => Err(format!("Yama ptrace_scope {n} forbids it")),
    }
}

/// Checks that process_vm_readv works at all here (not filtered, not
/// missing) by reading this process's own memory.
pub(super) fn probe_cma_self() -> Result<(), String> {
    let probe: u64 = MAGIC;
    let mut out = 0u64;
    // SAFETY: `out` is a local valid for 8 bytes of writes.
    let r = unsafe {
        sys::vm_read(
            sys::pid(),
            std::ptr::addr_of!(probe) as u64,
            std::ptr::addr_of_mut!(out).cast(),
            8,
        )
    };
    match r {
        Ok(()) if out == MAGIC => Ok(()),
        Ok(()) => Err("process_vm_readv read wrong bytes".into()),
        Err(e) => Err(format!("process_vm_readv not permitted here: {e}")),
    }
}

/// Checks that process_vm_readv can read peer `pid`: its queue segment's
/// magic word at `probe`.
fn probe_cma_peer(pid: u32, probe: u64) -> Result<(), String> {
    let mut word = 0u64;
    // SAFETY: `word` is a local valid for 8 bytes of writes.
    let r = unsafe { sys::vm_read(pid, probe, std::ptr::addr_of_mut!(word).cast(), 8) };
    match r {
        Ok(()) if word == MAGIC => Ok(()),
        Ok(()) => Err("probe read wrong bytes".into()),
        Err(e) => Err(format!("process_vm_readv not permitted on pid {pid}: {e}")),
    }
}
