//! Failures of peers: what happens when one is found failed, and how a
//! peer whose process ended is noticed.
//!
//! A peer fails when something it wrote is corrupt, when its queues are
//! found broken while writing to it, or when its process exits
//! ([`State::check_liveness`], through its pidfd; `progress` checks every
//! [`LIVENESS_PERIOD`](super::LIVENESS_PERIOD) calls while something
//! waits for a peer, else every
//! [`IDLE_LIVENESS`](super::IDLE_LIVENESS)). [`State::fail_peer`] marks it:
//! it is not read again and sends to it fail; it is reported once; and
//! everything that waits for it fails, each completion once
//! ([`State::drop_peer_work`]: queued sends, rendezvous sends, emulated
//! RDMA), and its cached mappings go. `remove_peer` drops a peer's work
//! the same way.

use std::collections::{HashMap, VecDeque};

use fireopal_abi::btl::Rank;
use fireopal_abi::host::LogLevel;
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::shmq::keyspace;

use super::{Event, Origin, Pending, State};

impl State {
    /// Marks peer `p` failed: it is not read again, its pending work and
    /// outstanding operations fail (reported at the next `progress`), and
    /// its mappings go.
    pub(super) fn fail_peer(&mut self, p: u32, error: PluginError) {
        let Some(peer) = self.peers.get_mut(p as usize).and_then(Option::as_mut) else {
            return;
        };
        if peer.failed.is_some() {
            return;
        }
        peer.failed = Some(error.message.to_string());
        let rank = peer.rank;
        let pending = std::mem::take(&mut peer.pending);
        self.active.retain(|&a| a != p);
        self.log(LogLevel::Warn, &format!("shm: rank {rank} failed: {error}"));
        self.events.push_back(Event::PeerFailed(rank, error));
        self.drop_peer_work(p, rank, pending);
    }

    /// Fails everything outstanding with peer `p`.
    pub(super) fn drop_peer_work(&mut self, p: u32, rank: Rank, pending: VecDeque<Pending>) {
        let gone = || PluginError::new(ErrorKind::PEER_FAILED, format!("rank {rank} is gone"));
        for work in pending {
            match work {
                Pending::Frag(_, Some(cookie)) | Pending::Stage { cookie, .. } => {
                    self.events.push_back(Event::Send(cookie, Err(gone())));
                }
                _ => {}
            }
        }
        for r in take_where(&mut self.rts, |r| r.peer == p) {
            if let Origin::Staged(slot) = r.origin {
                self.free_stage(&slot);
            }
            self.events.push_back(Event::Send(r.cookie, Err(gone())));
        }
        for r in take_where(&mut self.rdma, |r| r.peer == p) {
            self.events.push_back(Event::Rdma(r.cookie, Err(gone())));
        }
        if let Some((start, len)) = keyspace::peer_space(p) {
            self.cache.invalidate(start, len);
        }
    }

    /// Fails the peers whose process exited: what waits for them would
    /// otherwise wait forever (a dead peer never drains its queues nor
    /// answers a rendezvous).
    pub(super) fn check_liveness(&mut self) {
        for p in self.active.clone() {
            let exited = self
                .peers
                .get(p as usize)
                .and_then(Option::as_ref)
                .map(|peer| (peer.rank, peer.process.exited()));
            if let Some((rank, true)) = exited {
                let error = PluginError::new(
                    ErrorKind::PROCESS_ENDED,
                    format!("the process of rank {rank} exited"),
                );
                self.fail_peer(p, error);
            }
        }
    }
}

/// Takes out of `map` every value `pick` chooses.
fn take_where<K: Copy + Eq + std::hash::Hash, V, S: std::hash::BuildHasher>(
    map: &mut HashMap<K, V, S>,
    mut pick: impl FnMut(&V) -> bool,
) -> Vec<V> {
    let keys: Vec<K> = map
        .iter()
        .filter(|(_, v)| pick(v))
        .map(|(&k, _)| k)
        .collect();
    keys.iter().filter_map(|k| map.remove(k)).collect()
}
