//! `progress`: polls the completion queue and handles each completion:
//! fragments received on the shared receive queue (credits, delivery,
//! reposting the buffer), connection messages on the datagram queue pair,
//! and send completions, which release what selective signalling left
//! outstanding. Then it posts credit updates and backlogs that can go,
//! repeats unanswered connection requests, and reports the events.

use fireopal_abi::btl::{EventSink, Rank};
use fireopal_abi::host::LogLevel;
use fireopal_abi::{ErrorKind, PluginError};
use fireopal_core::wire::verbs::{Connect, FragmentHeader, FragmentKind};

use crate::completion::{classify, WC_SUCCESS};
use crate::conn::{Conn, Item};
use crate::ffi::types::{ibv_wc, GRH_LEN, IBV_WC_RECV};
use crate::module::{Event, VerbsModule};

/// Polls per `progress` call at most, so one call returns even while
/// completions keep coming.
const MAX_POLLS: usize = 8;

fn malformed(rank: Rank, what: impl std::fmt::Display) -> PluginError {
    PluginError::new(
        ErrorKind::MALFORMED,
        format!("rank {rank} broke the verbs protocol: {what}"),
    )
}

impl VerbsModule {
    pub(crate) fn progress_impl(&mut self, sink: &mut dyn EventSink) -> Result<usize, PluginError> {
        let mut work = 0;
        let mut wc = std::mem::take(&mut self.wc);
        let result = (|| {
            for _ in 0..MAX_POLLS {
                let n = self.cq.poll(&mut wc).map_err(|e| {
                    PluginError::new(ErrorKind::IO, format!("polling the completion queue: {e}"))
                })?;
                for c in wc.iter().take(n) {
                    work += self.handle(c, sink)?;
                }
                if n < wc.len() {
                    break;
                }
            }
            Ok::<(), PluginError>(())
        })();
        self.wc = wc;
        result?;
        // Every peer with work waiting, not only those whose completions
        // came: buffers and room freed by one peer's completions let
        // another's backlog and credit update go. Peers with nothing
        // waiting cost nothing here.
        let mut ranks = std::mem::take(&mut self.waiting);
        for &rank in &ranks {
            if let Some(p) = self.peers.get_mut(&rank) {
                p.in_waiting = false;
            }
            self.post_credit_update(rank);
            self.pump(rank);
            self.post_flush(rank);
            self.mark_waiting(rank);
        }
        ranks.clear();
        if self.waiting.is_empty() {
            // Keep the allocation.
            self.waiting = ranks;
        }
        self.retry_connects();
        while let Some(e) = self.events.pop_front() {
            match e {
                Event::Send(cookie, status) => sink.send_complete(cookie, status),
                Event::Rdma(cookie, status) => sink.rdma_complete(cookie, status),
                Event::PeerFailed(rank, error) => sink.peer_failed(rank, error),
            }
            work += 1;
        }
        Ok(work)
    }

    /// Handles one completion; the events it delivered.
    fn handle(&mut self, c: &ibv_wc, sink: &mut dyn EventSink) -> Result<usize, PluginError> {
        if c.qp_num == self.ud.qpn {
            self.handle_datagram(c)?;
            return Ok(0);
        }
        let rank = self.by_qpn.get(&c.qp_num).copied();
        if c.opcode & IBV_WC_RECV != 0 {
            self.handle_receive(c, rank, sink)
        } else {
            if let Some(rank) = rank {
                self.handle_send(c, rank);
            }
            Ok(0)
        }
    }

    fn handle_receive(
        &mut self,
        c: &ibv_wc,
        rank: Option<Rank>,
        sink: &mut dyn EventSink,
    ) -> Result<usize, PluginError> {
        let slot = match u32::try_from(c.wr_id) {
            Ok(s) if s < self.recv.slots() => s,
            _ => {
                return Err(PluginError::new(
                    ErrorKind::OTHER,
                    format!("receive completion with unknown id {}", c.wr_id),
                ))
            }
        };
        let mut delivered = 0;
        let mut failure = None;
        let mut owes = None;
        match rank {
            _ if c.status != WC_SUCCESS => {
                if let Some(rank) = rank {
                    failure = classify(c.status, c.vendor_err, rank)
                        .peer_failure()
                        .map(|e| (rank, e));
                }
            }
            None => self.log(
                LogLevel::Debug,
                &format!("fragment from unknown queue pair {:#x} dropped", c.qp_num),
            ),
            Some(rank) => {
                let bytes = self
                    .recv
                    .bytes(slot)
                    .get(..c.byte_len as usize)
                    .unwrap_or(&[]);
                let peer = self.peers.get_mut(&rank);
                match (peer, FragmentHeader::parse(bytes)) {
                    (None, _) => {}
                    (Some(p), _) if matches!(p.conn, Conn::Failed { .. }) => {}
                    (Some(_), Err(e)) => failure = Some((rank, malformed(rank, e))),
                    (Some(p), Ok(frag)) => {
                        let credited = p.credits.returned(frag.head.credits).and_then(|()| {
                            if frag.head.kind == FragmentKind::Message {
                                p.credits.consumed()
                            } else {
                                Ok(())
                            }
                        });
                        match credited {
                            Err(e) => failure = Some((rank, malformed(rank, e))),
                            Ok(()) if frag.head.kind == FragmentKind::Message => {
                                sink.deliver(rank, frag.head.tag, frag.header, frag.payload);
                                delivered = 1;
                                owes = Some(rank);
                            }
                            Ok(()) => {}
                        }
                    }
                }
            }
        }
        self.repost_recv(slot)?;
        if let Some(rank) = owes {
            self.mark_waiting(rank);
        }
        if let Some((rank, error)) = failure {
            self.fail_peer(rank, error, true);
        }
        Ok(delivered)
    }

    fn handle_send(&mut self, c: &ibv_wc, rank: Rank) {
        let outcome = classify(c.status, c.vendor_err, rank);
        let Some(peer) = self.peers.get_mut(&rank) else {
            return;
        };
        let items = if c.status == WC_SUCCESS {
            match peer.sq.complete(c.wr_id) {
                Ok(items) => items,
                Err(e) => {
                    self.host
                        .log(LogLevel::Warn, &format!("verbs: rank {rank}: {e}"));
                    return;
                }
            }
        } else {
            peer.sq.complete_failed(c.wr_id)
        };
        for item in items {
            match item {
                Item::Slot(s) => self.send_pool.give_back(s),
                Item::Inline | Item::Flush => {}
                Item::Credit(slot) => {
                    peer.credits.update_done();
                    if let Some(s) = slot {
                        self.send_pool.give_back(s);
                    }
                }
                Item::Rdma { cookie, reported } => {
                    if !reported {
                        self.events.push_back(Event::Rdma(cookie, outcome.result()));
                    }
                }
            }
        }
        if let Some(error) = outcome.peer_failure() {
            self.fail_peer(rank, error, true);
        }
    }

    fn handle_datagram(&mut self, c: &ibv_wc) -> Result<(), PluginError> {
        if c.opcode & IBV_WC_RECV == 0 {
            let slots = if c.status == WC_SUCCESS {
                self.ud_sq.complete(c.wr_id).unwrap_or_default()
            } else {
                self.log(
                    LogLevel::Debug,
                    &format!("connection message not sent: status {}", c.status),
                );
                self.ud_sq.complete_failed(c.wr_id)
            };
            for s in slots {
                self.ud_send.give_back(s);
            }
            return Ok(());
        }
        let slot = match u32::try_from(c.wr_id) {
            Ok(s) if s < self.ud_recv.slots() => s,
            _ => {
                return Err(PluginError::new(
                    ErrorKind::OTHER,
                    format!("datagram completion with unknown id {}", c.wr_id),
                ))
            }
        };
        let mut message = None;
        if c.status == WC_SUCCESS {
            // The first bytes of every datagram buffer hold the global
            // route header, present or not.
            let bytes = self
                .ud_recv
                .bytes(slot)
                .get(GRH_LEN..c.byte_len as usize)
                .unwrap_or(&[]);
            match Connect::parse(bytes, &self.job_key) {
                Ok(m) => message = Some(m),
                Err(e) => self.log(
                    LogLevel::Debug,
                    &format!("malformed connection message dropped: {e}"),
                ),
            }
        }
        self.repost_ud_recv(slot)?;
        if let Some(m) = message {
            self.handle_connect(m);
        }
        Ok(())
    }
}
