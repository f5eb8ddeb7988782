//! Property tests of the parts of the verbs transport that need no
//! device: credit-based flow control between two ends, selective
//! signalling of a send queue, and the mapping of work-completion status
//! to the BTL's errors.

use std::collections::VecDeque;

use fireopal_abi::ErrorKind;
use fireopal_btl_verbs::completion::{
    classify, kind_of, status_name, Outcome, WC_SUCCESS, WC_WR_FLUSH_ERR,
};
use fireopal_btl_verbs::credit::{CreditError, Credits};
use fireopal_btl_verbs::signal::{SendQueue, SignalError};
use proptest::prelude::*;

/// A fragment in flight on one direction of a reliable connection.
#[derive(Debug, Clone, Copy)]
struct Frag {
    message: bool,
    credits: u16,
}

/// Two ends of a connection, each direction in order, as RC delivers.
struct Pair {
    ends: [Credits; 2],
    wire: [VecDeque<Frag>; 2],
    grants: [u16; 2],
}

#[derive(Debug, Clone, Copy)]
enum Op {
    /// End `0`/`1` sends a message if it has a credit.
    Send(usize),
    /// The oldest fragment toward end `i` arrives.
    Deliver(usize),
    /// End `i` sends a credit update if one is wanted.
    Update(usize),
    /// End `i`'s credit update completed.
    UpdateDone(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0usize..2).prop_map(Op::Send),
        4 => (0usize..2).prop_map(Op::Deliver),
        1 => (0usize..2).prop_map(Op::Update),
        1 => (0usize..2).prop_map(Op::UpdateDone),
    ]
}

impl Pair {
    /// `grants[i]`: what end `i` grants its peer.
    fn new(grants: [u16; 2]) -> Self {
        Self {
            ends: [
                Credits::new(grants[1], grants[0]),
                Credits::new(grants[0], grants[1]),
            ],
            wire: [VecDeque::new(), VecDeque::new()],
            grants,
        }
    }

    /// Applies `op`; `true` if it moved anything.
    fn apply(&mut self, op: Op) -> Result<bool, CreditError> {
        match op {
            Op::Send(i) => {
                if !self.ends[i].try_take() {
                    return Ok(false);
                }
                let credits = self.ends[i].piggyback();
                self.wire[1 - i].push_back(Frag {
                    message: true,
                    credits,
                });
                Ok(true)
            }
            Op::Deliver(i) => {
                let Some(f) = self.wire[i].pop_front() else {
                    return Ok(false);
                };
                self.ends[i].returned(f.credits)?;
                if f.message {
                    self.ends[i].consumed()?;
                }
                Ok(true)
            }
            Op::Update(i) => {
                if !self.ends[i].wants_update() {
                    return Ok(false);
                }
                let credits = self.ends[i].start_update();
                self.wire[1 - i].push_back(Frag {
                    message: false,
                    credits,
                });
                Ok(true)
            }
            Op::UpdateDone(i) => {
                let was = self.ends[i].update_in_flight();
                self.ends[i].update_done();
                Ok(was)
            }
        }
    }

    /// For the direction from end `i`: every credit of the grant is in
    /// exactly one place.
    fn conserved(&self, i: usize) -> bool {
        let to = 1 - i;
        let messages = self.wire[to].iter().filter(|f| f.message).count() as u32;
        let returning: u32 = self.wire[i].iter().map(|f| u32::from(f.credits)).sum();
        self.ends[i].available() + messages + self.ends[to].owed() + returning
            == u32::from(self.grants[to])
    }
}

proptest! {
    #[test]
    fn credits_are_conserved_never_negative_and_never_above_the_grant(
        grants in (1u16..40, 1u16..40),
        ops in proptest::collection::vec(op(), 0..400),
    ) {
        let mut pair = Pair::new([grants.0, grants.1]);
        for op in ops {
            pair.apply(op).map_err(|e| TestCaseError::fail(format!("{op:?}: {e}")))?;
            for i in 0..2 {
                prop_assert!(pair.conserved(i), "after {:?}", op);
                prop_assert!(pair.ends[i].available() <= u32::from(pair.grants[1 - i]));
                prop_assert!(pair.ends[i].owed() <= u32::from(pair.grants[i]));
            }
        }
    }

    #[test]
    fn a_drained_connection_gets_its_credits_back(
        grants in (1u16..40, 1u16..40),
        ops in proptest::collection::vec(op(), 0..300),
    ) {
        let mut pair = Pair::new([grants.0, grants.1]);
        for op in ops {
            pair.apply(op).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        // Quiesce: deliver everything, finish updates, send what is wanted;
        // bounded, since each round only moves credits toward the sender.
        for _ in 0..1000 {
            let mut moved = false;
            for i in 0..2 {
                while pair.apply(Op::Deliver(i)).map_err(|e| TestCaseError::fail(e.to_string()))? {
                    moved = true;
                }
                moved |= pair.apply(Op::UpdateDone(i)).map_err(|e| TestCaseError::fail(e.to_string()))?;
                moved |= pair.apply(Op::Update(i)).map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            if !moved {
                break;
            }
        }
        // Less than half the grant may stay owed (it rides on the next
        // message); a sender never waits for more than that.
        for i in 0..2 {
            let grant = u32::from(pair.grants[1 - i]);
            let owed = pair.ends[1 - i].owed();
            prop_assert!(owed < grant.div_ceil(2).max(1));
            prop_assert_eq!(pair.ends[i].available() + owed, grant);
        }
    }

    #[test]
    fn a_peer_that_overruns_or_over_returns_is_an_error(grant in 1u16..50, extra in 1u16..50) {
        let mut c = Credits::new(grant, grant);
        for _ in 0..grant {
            prop_assert!(c.consumed().is_ok());
        }
        prop_assert_eq!(c.consumed(), Err(CreditError::Overrun { granted: u32::from(grant) }));
        prop_assert_eq!(c.owed(), u32::from(grant));
        let mut c = Credits::new(grant, grant);
        let spent = grant.saturating_sub(extra).max(1).min(grant);
        for _ in 0..spent {
            prop_assert!(c.try_take());
        }
        let too_many = spent.saturating_add(extra);
        prop_assert!(c.returned(too_many).is_err());
        prop_assert_eq!(c.available(), u32::from(grant - spent));
    }

    #[test]
    fn every_signalled_completion_releases_exactly_its_batch(
        depth in 1usize..64,
        interval in 1usize..80,
        steps in proptest::collection::vec((any::<bool>(), any::<bool>()), 1..300),
    ) {
        let mut q: SendQueue<u64> = SendQueue::new(depth, interval);
        let mut next_item = 0u64;
        // Posted requests in order: (id, signalled, item).
        let mut posted: VecDeque<(u64, bool, u64)> = VecDeque::new();
        let mut released = Vec::new();
        let mut run = 0usize;
        for (post, must) in steps {
            if post && q.has_room() {
                let p = q.post(next_item, must).unwrap();
                prop_assert!(!must || p.signalled);
                run = if p.signalled { 0 } else { run + 1 };
                prop_assert!(run < interval.clamp(1, depth));
                posted.push_back((p.id, p.signalled, next_item));
                next_item += 1;
                // A full queue always holds a signalled request.
                if !q.has_room() {
                    prop_assert!(posted.iter().any(|e| e.1));
                }
            } else if post {
                prop_assert_eq!(q.post(0, must), Err(SignalError::Full));
            } else if let Some(pos) = posted.iter().position(|e| e.1) {
                // The device reports the oldest signalled request.
                let (id, _, _) = posted[pos];
                let batch = q.complete(id).unwrap();
                let want: Vec<u64> = posted.drain(..=pos).map(|e| e.2).collect();
                prop_assert_eq!(&batch, &want);
                released.extend(batch);
            }
            prop_assert_eq!(q.outstanding(), posted.len());
            prop_assert!(q.outstanding() <= depth);
        }
        // Unsignalled ids are no completion to match.
        if let Some(&(id, false, _)) = posted.front() {
            prop_assert_eq!(q.complete(id), Err(SignalError::UnknownCompletion(id)));
        }
        released.extend(q.fail_all());
        // Every request released exactly once, in posting order.
        let want: Vec<u64> = (0..next_item).collect();
        prop_assert_eq!(released, want);
    }

    #[test]
    fn a_failed_post_is_taken_back(depth in 2usize..16, n in 0usize..16) {
        let mut q: SendQueue<usize> = SendQueue::new(depth, 4);
        for i in 0..n.min(depth - 1) {
            q.post(i, false).unwrap();
        }
        let before = q.outstanding();
        let p = q.post(99, false).unwrap();
        prop_assert_eq!(q.unpost(p.id), Some(99));
        prop_assert_eq!(q.outstanding(), before);
        // The next one is signalled, whatever the run was.
        prop_assert!(q.post(100, false).unwrap().signalled);
    }

    #[test]
    fn every_status_maps_without_panic(status in any::<u32>(), vendor in any::<u32>(), rank in any::<u32>()) {
        let outcome = classify(status, vendor, rank);
        match &outcome {
            Outcome::Success => prop_assert_eq!(status, WC_SUCCESS),
            Outcome::Flushed(e) => {
                prop_assert_eq!(status, WC_WR_FLUSH_ERR);
                prop_assert!(e.kind.is_peer_failure());
            }
            Outcome::Failed(e) => {
                prop_assert!(status != WC_SUCCESS && status != WC_WR_FLUSH_ERR);
                prop_assert_eq!(e.kind, kind_of(status));
                let rank_text = format!("rank {rank}");
                prop_assert!(e.message.contains(rank_text.as_str()));
                if let Some(name) = status_name(status) {
                    prop_assert!(e.message.contains(name));
                }
            }
        }
        // Only a success succeeds; only a non-flush error fails the peer,
        // and then always with a kind that reports a failed peer.
        prop_assert_eq!(outcome.result().is_ok(), status == WC_SUCCESS);
        match outcome.peer_failure() {
            Some(e) => {
                prop_assert!(e.kind.is_peer_failure());
                prop_assert!(status != WC_SUCCESS && status != WC_WR_FLUSH_ERR);
            }
            None => prop_assert!(status == WC_SUCCESS || status == WC_WR_FLUSH_ERR),
        }
    }
}

#[test]
fn statuses_that_name_a_cause_map_to_their_kinds() {
    assert_eq!(status_name(12), Some("IBV_WC_RETRY_EXC_ERR"));
    assert_eq!(kind_of(12), ErrorKind::TIMED_OUT);
    assert_eq!(kind_of(13), ErrorKind::TIMED_OUT, "receiver not ready");
    assert_eq!(kind_of(10), ErrorKind::PEER_FAILED, "remote access");
    assert_eq!(kind_of(16), ErrorKind::CONNECTION_RESET, "remote abort");
    assert_eq!(kind_of(4), ErrorKind::INVALID_ARGUMENT, "local protection");
    assert_eq!(status_name(24), None);
    assert_eq!(kind_of(24), ErrorKind::OTHER);
    // A local cause still fails the peer (the connection is gone), as a
    // peer failure.
    let failed = classify(4, 0, 3);
    assert_eq!(
        failed.result().unwrap_err().kind,
        ErrorKind::INVALID_ARGUMENT
    );
    assert_eq!(failed.peer_failure().unwrap().kind, ErrorKind::PEER_FAILED);
}
