//! An [`EventSink`] that keeps every event a module reports, for a case to
//! check afterwards.

use std::collections::HashMap;

use fireopal_abi::btl::{EventSink, Rank};
use fireopal_abi::PluginError;

/// One delivered fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// Sender.
    pub peer: Rank,
    /// Active-message tag.
    pub tag: u8,
    /// Header bytes.
    pub header: Vec<u8>,
    /// Payload bytes.
    pub payload: Vec<u8>,
}

/// Every event of one module, in the order it reported them.
#[derive(Debug, Default)]
pub struct Recorder {
    /// Delivered fragments.
    pub delivered: Vec<Delivered>,
    /// `send_complete` reports by cookie, each report kept so that a
    /// second one for the same cookie shows.
    pub sends: HashMap<u64, Vec<Result<(), PluginError>>>,
    /// `rdma_complete` reports by cookie.
    pub rdma: HashMap<u64, Vec<Result<(), PluginError>>>,
    /// `peer_failed` reports.
    pub failed: Vec<(Rank, PluginError)>,
    /// Fragments delivered per sender, so that a wait on a count does not
    /// walk every fragment at each poll.
    counts: HashMap<Rank, usize>,
}

impl Recorder {
    /// The fragments `peer` sent, in arrival order.
    pub fn from(&self, peer: Rank) -> impl Iterator<Item = &Delivered> {
        self.delivered.iter().filter(move |m| m.peer == peer)
    }

    /// How many fragments `peer` sent.
    pub fn count_from(&self, peer: Rank) -> usize {
        self.counts.get(&peer).copied().unwrap_or(0)
    }

    /// How many times `peer` was reported failed.
    pub fn failures_of(&self, peer: Rank) -> usize {
        self.failed.iter().filter(|(r, _)| *r == peer).count()
    }

    /// The first completion of send `cookie`, if any came.
    pub fn send_status(&self, cookie: u64) -> Option<&Result<(), PluginError>> {
        self.sends.get(&cookie).and_then(|v| v.first())
    }

    /// The first completion of RDMA operation `cookie`, if any came.
    pub fn rdma_status(&self, cookie: u64) -> Option<&Result<(), PluginError>> {
        self.rdma.get(&cookie).and_then(|v| v.first())
    }

    /// The first cookie that completed more than once, if one did.
    pub fn repeated_completion(&self) -> Option<u64> {
        self.sends
            .iter()
            .chain(&self.rdma)
            .find(|(_, v)| v.len() > 1)
            .map(|(c, _)| *c)
    }
}

impl EventSink for Recorder {
    fn deliver(&mut self, peer: Rank, tag: u8, header: &[u8], payload: &[u8]) {
        *self.counts.entry(peer).or_default() += 1;
        self.delivered.push(Delivered {
            peer,
            tag,
            header: header.to_vec(),
            payload: payload.to_vec(),
        });
    }

    fn send_complete(&mut self, cookie: u64, status: Result<(), PluginError>) {
        self.sends.entry(cookie).or_default().push(status);
    }

    fn rdma_complete(&mut self, cookie: u64, status: Result<(), PluginError>) {
        self.rdma.entry(cookie).or_default().push(status);
    }

    fn peer_failed(&mut self, peer: Rank, error: PluginError) {
        self.failed.push((peer, error));
    }
}
