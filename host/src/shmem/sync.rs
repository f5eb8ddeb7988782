//! Completion and synchronisation: the handler that serves other PEs'
//! atomics and records answers and barrier notices, the batches of small
//! puts, the wait every blocking call goes through, `quiet`, `fence` and
//! the barrier.
//!
//! On a route where the target's own progress moves put data anyway (tcp,
//! or no RDMA), small puts to a PE are gathered into one message of
//! records (`shmem_put_batch`), which the target writes in order and
//! acknowledges once, as a non-fetching atomic. The first put since this
//! process last made progress leaves at once, alone; a batch leaves when
//! it is full, before any other operation to its PE, and whenever this
//! process makes progress (every wait, `quiet`, `fence`, the barrier,
//! every 64th operation completed alone), so no put waits on a PE that
//! keeps calling the library.
//!
//! The barrier is a dissemination barrier over active messages: in round
//! `r` each PE tells PE `me + 2^r` and waits for PE `me - 2^r`, so
//! `ceil(log2 n)` rounds meet everyone. Each notice carries flags that
//! are anded on the way, which after the last round is the and of every
//! PE's flags (the and is idempotent, so reaching a PE twice is harmless).
//! A PE that sees the PE it waits for fail tells every other PE
//! ([`BarrierAbort`]), since the PEs that wait for its later notices, or
//! for a PE waiting on it, would otherwise wait until the stall limit;
//! from then on every barrier fails naming the dead PE.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use fireopal_core::id_hash::IdHash;
use fireopal_core::wire::shmem::{
    AmoReply, AmoStatus, BarrierAbort, BarrierNotice, GetReply, Malformed, Message, PutBatch,
    PutRecords,
};

use super::atomic::{execute, word_at};
use super::{rank, Shmem, ShmemError, State, TAG_SHMEM};
use crate::btl::{Class, Messenger, StallWatch};
use crate::memheap::SymmetricHeap;

/// The request-id bit of atomics whose value nobody waits for: their
/// answers are only counted.
pub(super) const NON_FETCHING: u64 = 1 << 63;

/// What the handler recorded for the layer.
#[derive(Debug, Default)]
pub(super) struct Inbox {
    /// Answers to fetching atomics, by request.
    pub(super) replies: HashMap<u64, (AmoStatus, u64), IdHash>,
    /// Answers to non-fetching atomics.
    pub(super) acked: u64,
    /// Non-fetching atomics the target refused.
    pub(super) refused: Vec<(u32, AmoStatus)>,
    /// Barrier notices: flags by (epoch, round).
    pub(super) notices: HashMap<(u64, u8), u64>,
    /// A PE another PE saw fail in a barrier, and which PE said so: no
    /// barrier completes any more.
    pub(super) aborted: Option<(u32, u32)>,
    /// Messages that were not one-sided messages, and their sender.
    pub(super) malformed: Vec<(u32, Malformed)>,
    /// Gets through messages waiting for their data: the PE, where the
    /// data goes and how long it is, by request.
    pub(super) gets: HashMap<u64, (u32, usize, usize), IdHash>,
    /// Gets through messages the target refused or answered wrongly.
    pub(super) failed_gets: HashMap<u64, (u32, AmoStatus), IdHash>,
}

/// Installs the layer's handler: it runs other PEs' atomics on this heap
/// and answers them, and records answers and barrier notices.
pub(super) fn install_handler(m: &mut Messenger, heap: &SymmetricHeap, inbox: Rc<RefCell<Inbox>>) {
    let base = heap.base() as usize;
    let len = heap.len();
    m.register_layer(TAG_SHMEM, move |msg, replies| {
        let peer = msg.peer;
        let decoded = Message::decode(msg.header).and_then(|m| {
            if m.carries_payload() || msg.payload.is_empty() {
                Ok(m)
            } else {
                Err(Malformed::Trailing)
            }
        });
        let mut inbox = inbox.borrow_mut();
        let mut answer = |header: &[u8], payload: Vec<u8>| {
            replies.send_layer(Class::OneSided, peer, TAG_SHMEM, header, payload);
        };
        // The target's side: `range` checks a request against the heap.
        let range = |offset: u64, n: usize| {
            offset
                .checked_add(n as u64)
                .filter(|&end| end <= len)
                .map(|_| base + offset as usize)
        };
        // A put's data written at `offset` of the heap, if it fits there.
        let write = |offset: u64, data: &[u8]| match range(offset, data.len()) {
            Some(at) => {
                // SAFETY: the range lies inside this process's heap
                // (checked by `range`), which outlives the messenger; the
                // data is a separate buffer.
                #[allow(unsafe_code)]
                unsafe {
                    std::ptr::copy_nonoverlapping(data.as_ptr(), at as *mut u8, data.len())
                };
                AmoStatus::Done
            }
            None => AmoStatus::OutOfRange,
        };
        match decoded {
            Ok(Message::AmoRequest(req)) => {
                let (status, value) = match word_at(base, len, req.offset, req.width) {
                    // SAFETY: the word lies inside this process's heap,
                    // aligned (checked by `word_at`); the heap outlives
                    // the messenger that holds this handler.
                    #[allow(unsafe_code)]
                    Ok(word) => (AmoStatus::Done, unsafe {
                        execute(word as *mut u8, req.op, req.width, req.operand, req.compare)
                    }),
                    Err(status) => (status, 0),
                };
                let reply = AmoReply {
                    status,
                    request: req.request,
                    value,
                };
                answer(&reply.encode(), Vec::new());
            }
            Ok(Message::PutRequest(put)) => {
                let reply = AmoReply {
                    status: write(put.offset, msg.payload),
                    request: put.request,
                    value: 0,
                };
                answer(&reply.encode(), Vec::new());
            }
            Ok(Message::PutBatch(batch)) => {
                // Every record in range is written, in order; the answer
                // carries the first refusal.
                let mut status = AmoStatus::Done;
                for record in PutRecords::new(msg.payload) {
                    let wrote = match record {
                        Ok((offset, data)) => write(offset, data),
                        Err(error) => {
                            inbox.malformed.push((peer, error));
                            AmoStatus::OutOfRange
                        }
                    };
                    if status == AmoStatus::Done {
                        status = wrote;
                    }
                }
                let reply = AmoReply {
                    status,
                    request: batch.request,
                    value: 0,
                };
                answer(&reply.encode(), Vec::new());
            }
            Ok(Message::GetRequest(get)) => {
                let n = usize::try_from(get.len).unwrap_or(usize::MAX);
                let (status, data) = match range(get.offset, n) {
                    // SAFETY: as above, a range inside this heap.
                    #[allow(unsafe_code)]
                    Some(at) => (AmoStatus::Done, unsafe {
                        std::slice::from_raw_parts(at as *const u8, n).to_vec()
                    }),
                    None => (AmoStatus::OutOfRange, Vec::new()),
                };
                let reply = GetReply {
                    status,
                    request: get.request,
                };
                answer(&reply.encode(), data);
            }
            Ok(Message::GetReply(reply)) => match inbox.gets.remove(&reply.request) {
                Some((pe, dest, n)) if pe == peer => {
                    if reply.status == AmoStatus::Done && msg.payload.len() == n {
                        // SAFETY: `dest` is the requester's buffer of `n`
                        // bytes, valid and untouched by others until the
                        // get completes (the contract of `get_nbi`; a
                        // blocking get waits here).
                        #[allow(unsafe_code)]
                        unsafe {
                            std::ptr::copy_nonoverlapping(msg.payload.as_ptr(), dest as *mut u8, n)
                        };
                    } else {
                        let status = match reply.status {
                            AmoStatus::Done => AmoStatus::OutOfRange,
                            other => other,
                        };
                        inbox.failed_gets.insert(reply.request, (peer, status));
                    }
                }
                // An answer from another PE than asked, or to nothing
                // asked: the request stays, and the bytes are reported.
                Some(entry) => {
                    inbox.gets.insert(reply.request, entry);
                    inbox.malformed.push((peer, Malformed::Unsolicited));
                }
                None => inbox.malformed.push((peer, Malformed::Unsolicited)),
            },
            Ok(Message::AmoReply(reply)) if reply.request & NON_FETCHING != 0 => {
                inbox.acked += 1;
                if reply.status != AmoStatus::Done {
                    inbox.refused.push((peer, reply.status));
                }
            }
            Ok(Message::AmoReply(reply)) => {
                inbox
                    .replies
                    .insert(reply.request, (reply.status, reply.value));
            }
            Ok(Message::Barrier(notice)) => {
                *inbox
                    .notices
                    .entry((notice.epoch, notice.round))
                    .or_insert(u64::MAX) &= notice.flags;
            }
            Ok(Message::BarrierAbort(abort)) => {
                inbox.aborted.get_or_insert((abort.failed, peer));
            }
            Err(error) => inbox.malformed.push((peer, error)),
        }
    });
}

/// Takes the layer's RDMA completions: done operations leave `pending`,
/// failed ones keep their error for whoever waits on them, or `quiet`.
fn collect(m: &mut Messenger, st: &mut State) {
    for (id, result) in m.take_one_sided_completions() {
        let flight = st.pending.remove(&id);
        let pe = flight.as_ref().map(|f| f.pe);
        if let Some(local) = flight.and_then(|f| f.local) {
            // Only a module that needs local registrations made one;
            // releasing it can only fail there, and the cache keeps it.
            let _ = m.deregister_memory(local);
        }
        if let Err(e) = result {
            let error = match pe {
                Some(pe) => blame(m, pe, ShmemError::from(e)),
                None => ShmemError::from(e),
            };
            st.failed.insert(id, error);
        }
    }
}

/// A transport's error on an operation with `pe` as the failure of `pe`,
/// once the messenger knows it failed: the error of a write to a dead
/// peer's connection names no peer.
fn blame(m: &Messenger, pe: u32, error: ShmemError) -> ShmemError {
    match (&error, m.peer_failed(rank(pe))) {
        (ShmemError::Transport(_), Some(failure)) => ShmemError::PeerFailed {
            pe,
            failure: failure.clone(),
        },
        _ => error,
    }
}

/// The first PE the messenger knows failed, as an error.
fn first_failed(m: &Messenger, st: &State) -> Option<ShmemError> {
    if m.failure_epoch() == 0 {
        return None;
    }
    (0..st.size).find_map(|pe| {
        m.peer_failed(rank(pe)).map(|f| ShmemError::PeerFailed {
            pe,
            failure: f.clone(),
        })
    })
}

/// Sends the puts gathered for `pe`, if any, as one message acknowledged
/// like a non-fetching atomic.
pub(super) fn flush_batch(m: &mut Messenger, st: &mut State, pe: u32) -> Result<(), ShmemError> {
    let Some(mut batch) = st.batches.remove(&pe) else {
        return Ok(());
    };
    let header = PutBatch {
        request: st.next_request() | NON_FETCHING,
    }
    .encode();
    let sent = m.send_class(Class::OneSided, rank(pe), TAG_SHMEM, &header, &batch);
    batch.clear();
    st.spare_batches.push(batch);
    sent?;
    st.amo_sent += 1;
    st.amo_targets.insert(pe);
    Ok(())
}

/// Sends every PE's gathered puts.
pub(super) fn flush_batches(m: &mut Messenger, st: &mut State) -> Result<(), ShmemError> {
    while let Some(&pe) = st.batches.keys().next() {
        flush_batch(m, st, pe)?;
    }
    Ok(())
}

/// Whose failure ends a [`wait`] with an error.
#[derive(Clone, Copy, Debug)]
pub(super) enum Watch {
    /// The PE the wait is for.
    Pe(u32),
    /// The PEs this process has operations outstanding with.
    Pending,
}

/// Makes progress until `done` holds. Fails on a malformed message, on the
/// failure of a PE `watch` names, or after the stall limit with nothing
/// happening.
pub(super) fn wait(
    m: &mut Messenger,
    st: &mut State,
    watch: Watch,
    mut done: impl FnMut(&mut State) -> bool,
) -> Result<(), ShmemError> {
    // Whatever this process waits for may need the puts it gathered.
    flush_batches(m, st)?;
    let mut stall = st.stall.map(StallWatch::new);
    loop {
        collect(m, st);
        if let Some((pe, error)) = st.inbox.borrow_mut().malformed.pop() {
            return Err(ShmemError::Malformed { pe, error });
        }
        if done(st) {
            return Ok(());
        }
        let failed = match watch {
            Watch::Pe(pe) => m.peer_failed(rank(pe)).map(|f| (pe, f.clone())),
            Watch::Pending => st
                .pending
                .values()
                .map(|f| f.pe)
                .chain(st.amo_targets.iter().copied())
                .find_map(|pe| m.peer_failed(rank(pe)).map(|f| (pe, f.clone()))),
        };
        if let Some((pe, failure)) = failed {
            return Err(ShmemError::PeerFailed { pe, failure });
        }
        st.put_since_progress = false;
        let work = m.progress().map_err(ShmemError::Progress)?;
        if let Some(w) = stall.as_mut() {
            if w.stalled(work) {
                return Err(ShmemError::Stalled { limit: w.limit() });
            }
        }
    }
}

/// Waits for every operation this process started: RDMA, and the answers
/// of non-fetching atomics. Reports the first failure among them.
pub(super) fn quiet(m: &mut Messenger, st: &mut State) -> Result<(), ShmemError> {
    if st.pending.is_empty()
        && st.amo_targets.is_empty()
        && st.failed.is_empty()
        && st.batches.is_empty()
    {
        // Everything since the last quiet went through mappings and is
        // complete; with nothing recorded to report, there is nothing to
        // wait for.
        let inbox = st.inbox.borrow();
        if inbox.acked >= st.amo_sent
            && inbox.gets.is_empty()
            && inbox.malformed.is_empty()
            && inbox.refused.is_empty()
            && inbox.failed_gets.is_empty()
        {
            return Ok(());
        }
    }
    let inbox = Rc::clone(&st.inbox);
    wait(m, st, Watch::Pending, |st| {
        let inbox = inbox.borrow();
        st.pending.is_empty() && inbox.acked >= st.amo_sent && inbox.gets.is_empty()
    })?;
    st.amo_targets.clear();
    let refused = {
        let mut inbox = inbox.borrow_mut();
        let get = inbox.failed_gets.drain().map(|(_, f)| f).next();
        inbox.failed_gets.clear();
        inbox.refused.pop().or(get)
    };
    if let Some((pe, status)) = refused {
        return Err(ShmemError::Refused { pe, status });
    }
    let first = st.failed.keys().min().copied();
    match first.and_then(|id| st.failed.remove(&id)) {
        Some(e) => {
            st.failed.clear();
            Err(e)
        }
        None => Ok(()),
    }
}

/// A barrier of every PE that ands `flags` across them; completes this
/// process's operations first, as `shmem_barrier_all` does.
pub(super) fn barrier(m: &mut Messenger, st: &mut State, flags: u64) -> Result<u64, ShmemError> {
    if let Err(e) = quiet(m, st) {
        // A notice or atomic sent to a dead PE fails with the transport's
        // error, which names no PE; a barrier cannot complete with any PE
        // dead, so that PE is the one to name.
        return Err(match e {
            ShmemError::Transport(_) => first_failed(m, st).unwrap_or(e),
            e => e,
        });
    }
    let (me, n) = (st.me, st.size);
    let epoch = st.epoch;
    st.epoch += 1;
    let mut acc = flags;
    let mut round = 0u8;
    let mut dist = 1u32;
    while dist < n {
        let to = (me + dist) % n;
        let from = (me + n - dist) % n;
        let notice = BarrierNotice {
            round,
            epoch,
            flags: acc,
        }
        .encode();
        let inbox = Rc::clone(&st.inbox);
        let waited = m
            .send_class(Class::OneSided, rank(to), TAG_SHMEM, &notice, &[])
            .map_err(ShmemError::from)
            .and_then(|_| {
                wait(m, st, Watch::Pe(from), |_| {
                    let inbox = inbox.borrow();
                    inbox.aborted.is_some() || inbox.notices.contains_key(&(epoch, round))
                })
            });
        if let Err(e) = waited {
            return Err(abort(m, st, e));
        }
        if let Some((failed, by)) = inbox.borrow().aborted {
            return Err(ShmemError::BarrierAborted { failed, by });
        }
        acc &= inbox
            .borrow_mut()
            .notices
            .remove(&(epoch, round))
            .unwrap_or(0);
        round += 1;
        dist = dist.saturating_mul(2);
    }
    Ok(acc)
}

/// A barrier this process leaves with `error`. When a PE failed, every
/// other PE is told: PEs waiting for this one's later notices, or for
/// PEs that wait for it, would otherwise wait for good. Only a PE that
/// saw the failure itself tells, so each failure costs one message per
/// PE from each of the few PEs waiting on the dead one.
fn abort(m: &mut Messenger, st: &mut State, error: ShmemError) -> ShmemError {
    let failed = match &error {
        ShmemError::PeerFailed { pe, .. } => *pe,
        ShmemError::Transport(_) => match first_failed(m, st) {
            Some(named) => return abort(m, st, named),
            None => return error,
        },
        _ => return error,
    };
    let notice = BarrierAbort { failed }.encode();
    for pe in (0..st.size).filter(|&pe| pe != st.me && pe != failed) {
        // A PE that cannot be told failed too, and is reported by others.
        let _ = m.send_class(Class::OneSided, rank(pe), TAG_SHMEM, &notice, &[]);
    }
    error
}

impl Shmem<'_> {
    /// Makes progress until `done` holds (see [`wait`]).
    pub(super) fn wait(
        &mut self,
        watch: Watch,
        done: impl FnMut(&mut State) -> bool,
    ) -> Result<(), ShmemError> {
        wait(self.m, self.st, watch, done)
    }

    /// `shmem_quiet`: every put, get, atomic and signal this PE issued is
    /// complete (delivered at its target) when this returns. Fails with
    /// the first error of a non-blocking operation since the last quiet.
    pub fn quiet(&mut self) -> Result<(), ShmemError> {
        quiet(self.m, self.st)
    }

    /// `shmem_fence`: puts, atomics and signals to each PE issued before
    /// are delivered before those issued after. Stores through a mapping
    /// are ordered by a store fence; operations through the transports are
    /// completed, as by [`quiet`](Self::quiet), since lanes may reorder
    /// them.
    pub fn fence(&mut self) -> Result<(), ShmemError> {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        if self.st.pending.is_empty()
            && self.st.amo_targets.is_empty()
            && self.st.batches.is_empty()
        {
            return Ok(());
        }
        self.quiet()
    }

    /// `shmem_barrier_all`: completes this PE's operations, then waits
    /// until every PE has entered the barrier.
    pub fn barrier_all(&mut self) -> Result<(), ShmemError> {
        barrier(self.m, self.st, 0).map(drop)
    }
}
