//! The btl cases of the messenger suite: each rank sends to the next
//! rank and receives from the previous one (a ring; one rank talks to
//! itself), through the framework's active-message API.

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;
use std::time::{Duration, Instant};

use fireopal::bootstrap::Bootstrap;
use fireopal::btl::{Messenger, SendId, SendTicket};
use fireopal::memheap::SymmetricHeap;
use fireopal::plugin::Registry;
use fireopal_abi::btl::{Access, BtlFlags, MemRegion};

use super::{run_cases, CaseOf, Outcome, SetupError, Tally};

mod registration;

const STALL: Duration = Duration::from_secs(60);
const SIZES: [usize; 16] = [
    0,
    1,
    8,
    63,
    64,
    1000,
    4096,
    8192,
    32_768,
    32_769,
    65_535,
    65_536,
    300_000,
    1 << 20,
    3 << 20,
    4 << 20,
];
const MANY: u64 = 100_000;

const TAG_SIZES: u8 = 10;
const TAG_MANY: u8 = 11;
const TAG_COMPLETE: u8 = 12;
const TAG_SENDI: u8 = 13;
const TAG_SUMMARY: u8 = 14;
const TAG_DEATH: u8 = 15;
const TAG_FLOOD: u8 = 16;
const TAG_RDMA_DONE: u8 = 17;
const TAG_IN_PLACE: u8 = 18;
const TAG_HEAP: u8 = 19;
const TAG_BURST_DONE: u8 = 20;
const TAG_REG_DONE: u8 = 21;

type Inbox = Rc<RefCell<Vec<(u32, Vec<u8>, Vec<u8>)>>>;

/// What every btl case works with on one rank.
pub struct Ctx {
    boot: Bootstrap,
    m: Messenger,
    rank: u32,
    size: u32,
    next: u32,
    prev: u32,
    inbox: Inbox,
    many_seen: Rc<RefCell<(u64, u64)>>,
    /// RDMA completions collected so far: id -> succeeded.
    rdma_done: std::collections::HashMap<SendId, bool>,
    heap: SymmetricHeap,
    /// This rank is the one that leaves in the peer-death case.
    leave: bool,
    /// Gets of the registration cases finished so far (each one told to
    /// the target with [`TAG_REG_DONE`]).
    registration_gets: usize,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

fn pattern(rank: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut x = u64::from(rank) << 32 | u64::from(seq) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

impl Ctx {
    /// Whether the RDMA operation behind `ticket` finished, and how.
    fn rdma_status(&mut self, ticket: SendTicket) -> Option<bool> {
        for (id, status) in self.m.take_completions() {
            self.rdma_done.insert(id, status.is_ok());
        }
        match ticket {
            SendTicket::Done => Some(true),
            SendTicket::Pending(id) => self.rdma_done.get(&id).copied(),
        }
    }

    fn progress(&mut self) -> Result<usize, String> {
        let n = self.m.progress().map_err(|e| e.to_string())?;
        if let Some((peer, why)) = self.m.take_failures().into_iter().next() {
            return Err(format!("rank {peer} reported failed: {why}"));
        }
        Ok(n)
    }

    /// Progresses until `done` holds, failing after a stall.
    fn wait(&mut self, what: &str, mut done: impl FnMut(&mut Self) -> bool) -> Result<(), String> {
        let mut last = Instant::now();
        while !done(self) {
            if self.progress()? > 0 {
                last = Instant::now();
            } else if last.elapsed() > STALL {
                return Err(format!("stalled waiting for {what}"));
            }
        }
        Ok(())
    }

    fn inbox_count(&self, tag: u8) -> usize {
        self.inbox
            .borrow()
            .iter()
            .filter(|(_, h, _)| h.first() == Some(&tag))
            .count()
    }

    fn take_inbox(&self, tag: u8) -> Vec<(u32, Vec<u8>, Vec<u8>)> {
        let mut all = self.inbox.borrow_mut();
        let (mine, rest): (Vec<_>, Vec<_>) =
            all.drain(..).partition(|(_, h, _)| h.first() == Some(&tag));
        *all = rest;
        mine
    }

    fn send(&mut self, tag: u8, header: &[u8], payload: &[u8]) -> Result<SendTicket, String> {
        let mut h = vec![tag];
        h.extend_from_slice(header);
        self.m
            .send(self.next, tag, &h, payload)
            .map_err(|e| format!("send: {e}"))
    }

    fn drain_sends(&mut self) -> Result<Vec<(SendId, bool)>, String> {
        let mut done = Vec::new();
        let mut last = Instant::now();
        loop {
            for (id, status) in self.m.take_completions() {
                done.push((id, status.is_ok()));
                last = Instant::now();
            }
            if self.m.pending_sends() == 0 {
                return Ok(done);
            }
            if self.progress()? > 0 {
                last = Instant::now();
            } else if last.elapsed() > STALL {
                return Err("sends never completed".into());
            }
        }
    }

    fn barrier(&mut self) -> Result<(), String> {
        self.drain_sends()?;
        self.boot.barrier().map_err(|e| format!("barrier: {e}"))
    }
}

/// Every size from 0 B to 4 MiB arrives intact and in order.
fn case_sizes(c: &mut Ctx) -> Result<Outcome, String> {
    for (seq, &len) in SIZES.iter().enumerate() {
        let seq = seq as u32;
        c.send(TAG_SIZES, &seq.to_le_bytes(), &pattern(c.rank, seq, len))?;
        c.progress()?;
    }
    c.wait("all sizes", |c| c.inbox_count(TAG_SIZES) == SIZES.len())?;
    for (i, (peer, h, p)) in c.take_inbox(TAG_SIZES).into_iter().enumerate() {
        let seq = u32::from_le_bytes(
            h.get(1..5)
                .and_then(|b| b.try_into().ok())
                .unwrap_or([0xff; 4]),
        );
        if peer != c.prev || seq != i as u32 {
            return Err(format!(
                "message {i} came from rank {peer} with sequence {seq}"
            ));
        }
        if p != pattern(c.prev, seq, SIZES[i]) {
            return Err(format!("payload of {} bytes corrupted", SIZES[i]));
        }
    }
    c.barrier()?;
    Ok(Outcome::Passed)
}

/// 10^5 small messages each way, none lost, in order.
fn case_many(c: &mut Ctx) -> Result<Outcome, String> {
    for seq in 0..MANY {
        c.m.send(c.next, TAG_MANY, &[TAG_MANY], &seq.to_le_bytes())
            .map_err(|e| format!("send {seq}: {e}"))?;
        if seq % 32 == 0 {
            c.progress()?;
        }
    }
    let seen = Rc::clone(&c.many_seen);
    c.wait("10^5 messages", |_| seen.borrow().0 == MANY)?;
    let (count, bad) = *c.many_seen.borrow();
    if bad != 0 {
        return Err(format!(
            "{bad} of {count} messages out of order or corrupted"
        ));
    }
    let lanes = c.m.lanes(c.next);
    if lanes.len() > 1 {
        let counts: Vec<String> = lanes
            .iter()
            .map(|l| format!("{}[{}] {}", l.component, l.index, l.messages))
            .collect();
        println!("rank {}: note many: lanes {}", c.rank, counts.join(", "));
    }
    c.barrier()?;
    Ok(Outcome::Passed)
}

/// Every pending send completes exactly once.
fn case_completions(c: &mut Ctx) -> Result<Outcome, String> {
    let len = 256 << 10;
    let mut pending = HashSet::new();
    for seq in 0..64u32 {
        if let SendTicket::Pending(id) =
            c.send(TAG_COMPLETE, &seq.to_le_bytes(), &pattern(c.rank, seq, len))?
        {
            if !pending.insert(id) {
                return Err(format!("send id {id:?} given twice"));
            }
        }
    }
    let done = c.drain_sends()?;
    let mut seen = HashSet::new();
    for (id, ok) in done {
        if !ok {
            return Err(format!("send {id:?} completed with an error"));
        }
        if !pending.contains(&id) || !seen.insert(id) {
            return Err(format!("completion of {id:?} unexpected or repeated"));
        }
    }
    if seen.len() != pending.len() {
        return Err(format!(
            "{} of {} sends completed",
            seen.len(),
            pending.len()
        ));
    }
    c.wait("completion messages", |c| c.inbox_count(TAG_COMPLETE) == 64)?;
    c.take_inbox(TAG_COMPLETE);
    // More progress must not report anything again.
    for _ in 0..100 {
        c.progress()?;
    }
    if !c.m.take_completions().is_empty() {
        return Err("a completion was reported twice".into());
    }
    c.barrier()?;
    Ok(Outcome::Passed)
}

/// sendi is all or nothing, and Busy while sends to the peer are queued.
fn case_sendi(c: &mut Ctx) -> Result<Outcome, String> {
    let big =
        c.m.attributes(c.next)
            .map(|a| a.max_send_size.min(1 << 20) as usize)
            .unwrap_or(1 << 20);
    let mut queued_then_busy = None;
    // Flood without progressing until the module has to queue (or at least
    // finish later), then try an immediate send: it must answer Busy, or
    // arrive after everything sent before it.
    for seq in 0..64u32 {
        match c.send(TAG_FLOOD, &seq.to_le_bytes(), &vec![7u8; big])? {
            SendTicket::Done => {}
            SendTicket::Pending(_) => {
                let mut h = vec![TAG_FLOOD, 0xEE];
                h.extend_from_slice(&(seq + 1).to_le_bytes());
                let sent =
                    c.m.try_send_immediate(c.next, TAG_FLOOD, &h, b"x")
                        .map_err(|e| e.to_string())?;
                queued_then_busy = Some(!sent);
                break;
            }
        }
    }
    c.drain_sends()?;
    // Immediate sends with ids: exactly those answered Sent arrive, whole.
    let mut sent_ids = Vec::new();
    for id in 0..2000u32 {
        let mut h = vec![TAG_SENDI, 0x1D];
        h.extend_from_slice(&id.to_le_bytes());
        let payload = pattern(c.rank, id, (id as usize * 37) % 2048);
        if c.m
            .try_send_immediate(c.next, TAG_SENDI, &h, &payload)
            .map_err(|e| e.to_string())?
        {
            sent_ids.push(id);
        }
        if id % 16 == 0 {
            c.progress()?;
        }
    }
    let summary: Vec<u8> = sent_ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    c.m.send(c.next, TAG_SUMMARY, &[TAG_SUMMARY], &summary)
        .map_err(|e| e.to_string())?;
    c.wait("sendi summary", |c| c.inbox_count(TAG_SUMMARY) == 1)?;
    let summary = c.take_inbox(TAG_SUMMARY).remove(0).2;
    let expected: Vec<u32> = summary
        .chunks_exact(4)
        .filter_map(|b| b.try_into().ok().map(u32::from_le_bytes))
        .collect();
    let got: Vec<u32> = c
        .take_inbox(TAG_SENDI)
        .into_iter()
        .map(|(_, h, p)| {
            let id = h
                .get(2..6)
                .and_then(|b| b.try_into().ok())
                .map_or(u32::MAX, u32::from_le_bytes);
            if p == pattern(c.prev, id, (id as usize * 37) % 2048) {
                id
            } else {
                u32::MAX
            }
        })
        .collect();
    if got != expected {
        return Err(format!(
            "immediate sends: {} answered Sent, {} arrived intact and in order",
            expected.len(),
            got.iter().filter(|&&i| i != u32::MAX).count()
        ));
    }
    c.barrier()?;
    // A marker that went out must come after the floods sent before it.
    let mut floods = 0u32;
    for (_, h, _) in c.take_inbox(TAG_FLOOD) {
        if h.get(1) == Some(&0xEE) {
            let before = h
                .get(2..6)
                .and_then(|b| b.try_into().ok())
                .map_or(u32::MAX, u32::from_le_bytes);
            if floods < before {
                return Err(format!(
                    "an immediate send overtook queued sends ({floods} of {before} arrived first)"
                ));
            }
        } else {
            floods += 1;
        }
    }
    let note = match queued_then_busy {
        Some(true) => "busy after a pending send",
        Some(false) => "sent after a pending send, in order",
        None => "never pending",
    };
    println!("rank {}: note sendi: {note}", c.rank);
    Ok(Outcome::Passed)
}

/// put and get on registered memory, where the module offers them.
#[allow(unsafe_code)]
fn case_rdma(c: &mut Ctx) -> Result<Outcome, String> {
    let flags = c.m.attributes(c.next).map(|a| a.flags).unwrap_or_default();
    if !flags.contains(BtlFlags::PUT | BtlFlags::GET) {
        c.barrier()?;
        return Ok(Outcome::NotApplicable("put and get not offered".into()));
    }
    const LEN: usize = 64 << 10;
    let mut window = vec![0u8; LEN];
    let mut local = pattern(c.rank, 77, LEN);
    // SAFETY: `window` outlives its registration and every operation on
    // it, which all complete before it is dropped.
    let win_region = unsafe { MemRegion::new(window.as_mut_ptr(), LEN) };
    // SAFETY: as for `window`.
    let local_region = unsafe { MemRegion::new(local.as_mut_ptr(), LEN) };
    let win =
        c.m.register_memory(
            c.prev,
            win_region,
            Access::REMOTE_READ | Access::REMOTE_WRITE,
        )
        .map_err(|e| format!("register: {e}"))?;
    let mine =
        c.m.register_memory(
            c.next,
            local_region,
            Access::LOCAL_READ | Access::LOCAL_WRITE,
        )
        .map_err(|e| format!("register: {e}"))?;
    // The messenger registers whole pages: the registration ends where
    // the registered pages do, which may be past the window.
    let registered_end = win
        .registered_region()
        .map_or(window.as_ptr() as u64 + LEN as u64, |(base, len)| {
            (base + len) as u64
        });
    let mut published = (window.as_ptr() as u64).to_le_bytes().to_vec();
    published.extend_from_slice(&registered_end.to_le_bytes());
    published.extend_from_slice(win.remote_key());
    c.boot.put("rdma", &published).map_err(|e| e.to_string())?;
    c.boot.fence().map_err(|e| e.to_string())?;
    let theirs = c.boot.get(c.next, "rdma").map_err(|e| e.to_string())?;
    if theirs.len() < 16 {
        return Err("short rdma record".into());
    }
    let (addr, rest) = theirs.split_at(8);
    let (end, key) = rest.split_at(8);
    let addr = u64::from_le_bytes(addr.try_into().map_err(|_| "short rdma record")?);
    let end = u64::from_le_bytes(end.try_into().map_err(|_| "short rdma record")?);
    let put =
        c.m.put(c.next, local_region, Some(&mine), addr, key)
            .map_err(|e| format!("put: {e}"))?;
    // Out of range: must be refused, now or through its completion.
    let past_end = end - LEN as u64 + 1;
    let oob_refused = match c.m.put(c.next, local_region, Some(&mine), past_end, key) {
        Err(_) => true,
        Ok(SendTicket::Done) => false,
        Ok(ticket) => {
            c.wait("the out-of-range put", |c| c.rdma_status(ticket).is_some())?;
            c.rdma_status(ticket) == Some(false)
        }
    };
    if !oob_refused {
        return Err("a put past the end of the registration was accepted".into());
    }
    // The target serves RDMA only while it progresses, so every rank
    // progresses until its own operations are done, its window holds the
    // previous rank's bytes, and the previous rank said it is done with it.
    let expected = pattern(c.prev, 77, LEN);
    let win_ptr = window.as_ptr();
    c.wait("the put and the incoming put", |c| {
        // SAFETY: `window` is alive; the module writes it only inside
        // progress, never while this closure runs.
        let filled = unsafe { std::slice::from_raw_parts(win_ptr, LEN) } == expected.as_slice();
        c.rdma_status(put).is_some() && filled
    })?;
    if c.rdma_status(put) != Some(true) {
        return Err("the put completed with an error".into());
    }
    let mut back = vec![0u8; LEN];
    // SAFETY: `back` outlives the get, which completes in the loop below.
    let back_region = unsafe { MemRegion::new(back.as_mut_ptr(), LEN) };
    let get =
        c.m.get(c.next, back_region, None, addr, key)
            .map_err(|e| format!("get: {e}"))?;
    let mut told = false;
    c.wait("the get and the previous rank's", |c| {
        let get_done = c.rdma_status(get) == Some(true);
        if get_done && !told {
            told = c.send(TAG_RDMA_DONE, &[], &[]).is_ok();
        }
        told && c.inbox_count(TAG_RDMA_DONE) == 1
    })?;
    c.take_inbox(TAG_RDMA_DONE);
    if back != pattern(c.rank, 77, LEN) {
        return Err("get did not read the bytes back".into());
    }
    // SAFETY: as in the wait above; the previous rank's burst is complete
    // once it said so, and nothing writes the window after that.
    rdma_burst(c, addr, key, |slot, len| unsafe {
        std::slice::from_raw_parts(win_ptr.add(slot), len).to_vec()
    })?;
    c.m.deregister_memory(win).map_err(|e| e.to_string())?;
    c.m.deregister_memory(mine).map_err(|e| e.to_string())?;
    c.barrier()?;
    Ok(Outcome::Passed)
}

/// A burst: 256 puts of 64 bytes started back to back into the next
/// rank's window (256 bytes apart), then 256 gets of them. None may be
/// lost, doubled or left incomplete, and once the previous rank says its
/// burst completed, every piece of it is in this rank's window
/// (`window(offset, len)` reads it).
#[allow(unsafe_code)]
fn rdma_burst(
    c: &mut Ctx,
    addr: u64,
    key: &[u8],
    window: impl Fn(usize, usize) -> Vec<u8>,
) -> Result<(), String> {
    const PIECES: usize = 256;
    const STRIDE: usize = 256;
    const PIECE: usize = 64;
    let piece = |rank: u32, i: usize| pattern(rank, 1000 + i as u32, PIECE);
    // Every rank has checked its window before any burst overwrites it;
    // nothing is in flight, so blocking in the barrier starves no one.
    c.barrier()?;
    let mut puts: Vec<Vec<u8>> = (0..PIECES).map(|i| piece(c.rank, i)).collect();
    let mut gets: Vec<Vec<u8>> = vec![vec![0u8; PIECE]; PIECES];
    for (what, bufs) in [("put", &mut puts), ("get", &mut gets)] {
        let mut tickets = Vec::with_capacity(PIECES);
        for (i, buf) in bufs.iter_mut().enumerate() {
            // SAFETY: every buffer outlives its operation, which completes
            // in the wait below.
            let region = unsafe { MemRegion::new(buf.as_mut_ptr(), PIECE) };
            let at = addr + (i * STRIDE) as u64;
            let ticket = if what == "put" {
                c.m.put(c.next, region, None, at, key)
            } else {
                c.m.get(c.next, region, None, at, key)
            };
            tickets.push(ticket.map_err(|e| format!("{what} {i} of the burst: {e}"))?);
        }
        c.wait(&format!("the burst of {what}s"), |c| {
            tickets.iter().all(|&t| c.rdma_status(t).is_some())
        })?;
        if let Some(i) = tickets.iter().position(|&t| c.rdma_status(t) != Some(true)) {
            return Err(format!("{what} {i} of the burst completed with an error"));
        }
    }
    if gets != puts {
        return Err("a get of the burst read other bytes than the put wrote".into());
    }
    let mut told = false;
    c.wait("the previous rank's burst", |c| {
        if !told {
            told = c.send(TAG_BURST_DONE, &[], &[]).is_ok();
        }
        told && c.inbox_count(TAG_BURST_DONE) == 1
    })?;
    c.take_inbox(TAG_BURST_DONE);
    match (0..PIECES).find(|&i| window(i * STRIDE, PIECE) != piece(c.prev, i)) {
        None => Ok(()),
        Some(i) => Err(format!(
            "piece {i} of rank {}'s burst is not in the window",
            c.prev
        )),
    }
}

/// Single-copy sends from transfer buffers, where the module offers them:
/// intact, in order, each completion once, and the buffer reusable after.
fn case_in_place(c: &mut Ctx) -> Result<Outcome, String> {
    let flags = c.m.attributes(c.next).map(|a| a.flags).unwrap_or_default();
    if !flags.contains(BtlFlags::SEND_IN_PLACE | BtlFlags::TRANSFER_BUFFERS) {
        c.barrier()?;
        return Ok(Outcome::NotApplicable(
            "transfer buffers not offered".into(),
        ));
    }
    const LENS: [usize; 5] = [1, 100, 9000, 65_536, 1 << 20];
    let tb =
        c.m.alloc_transfer_buffer(c.next, 1 << 20)
            .map_err(|e| format!("alloc: {e}"))?;
    for round in 0..2u32 {
        // Round 1 rewrites the buffer: what was sent before must not change.
        c.drain_sends()?;
        let data = pattern(c.rank, 500 + round, 1 << 20);
        c.m.write_transfer_buffer(&tb, 0, &data)
            .map_err(|e| e.to_string())?;
        for (i, &len) in LENS.iter().enumerate() {
            let seq = round * 16 + i as u32;
            let mut h = vec![TAG_IN_PLACE];
            h.extend_from_slice(&seq.to_le_bytes());
            c.m.send_from_transfer_buffer(c.next, TAG_IN_PLACE, &h, &tb, len)
                .map_err(|e| format!("send in place: {e}"))?;
        }
    }
    c.wait("in-place messages", |c| {
        c.inbox_count(TAG_IN_PLACE) == 2 * LENS.len()
    })?;
    for (k, (_, h, p)) in c.take_inbox(TAG_IN_PLACE).into_iter().enumerate() {
        let (round, i) = ((k / LENS.len()) as u32, k % LENS.len());
        let seq = h
            .get(1..5)
            .and_then(|b| b.try_into().ok())
            .map_or(u32::MAX, u32::from_le_bytes);
        let want = pattern(c.prev, 500 + round, 1 << 20);
        if seq != round * 16 + i as u32 || p.as_slice() != want.get(..LENS[i]).unwrap_or(&[]) {
            return Err(format!(
                "in-place message {k} ({} bytes) arrived wrong",
                LENS[i]
            ));
        }
    }
    c.barrier()?;
    c.m.free_transfer_buffer(tb).map_err(|e| e.to_string())?;
    c.barrier()?;
    Ok(Outcome::Passed)
}

/// Sends read in place from the symmetric heap, registered with the
/// messenger: intact and in order on every transport; taken by the module
/// when it offers mapped segments (shared memory then reads them through
/// one mapping of the heap's file).
#[allow(unsafe_code)]
fn case_symmetric_heap(c: &mut Ctx) -> Result<Outcome, String> {
    const LENS: [usize; 4] = [1, 9000, 65_536, (1 << 20) + 5];
    let flags = c.m.attributes(c.next).map(|a| a.flags).unwrap_or_default();
    let handle =
        c.m.register_symmetric_heap(&c.heap)
            .map_err(|e| format!("register heap: {e}"))?;
    if flags.contains(BtlFlags::MAPPED_SEGMENTS) && handle.modules() == 0 {
        return Err("the transport offers mapped segments but took none".into());
    }
    println!(
        "rank {}: note symmetric-heap: registered with {} module(s)",
        c.rank,
        handle.modules()
    );
    let len = LENS[LENS.len() - 1];
    // The same call on every rank: the object has one offset job-wide.
    let obj = c.heap.malloc(len);
    if obj.is_null() {
        return Err("symmetric malloc failed".into());
    }
    let data = pattern(c.rank, 600, len);
    // SAFETY: `obj` is a fresh heap block of `len` bytes.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), obj, len) };
    for (i, &n) in LENS.iter().enumerate() {
        let mut h = vec![TAG_HEAP];
        h.extend_from_slice(&(i as u32).to_le_bytes());
        // SAFETY: the block stays allocated and unchanged until the
        // sends are drained below.
        let region = unsafe { MemRegion::new(obj, n) };
        c.m.send_in_place(c.next, TAG_HEAP, &h, region)
            .map_err(|e| format!("send in place from the heap: {e}"))?;
    }
    c.wait("heap messages", |c| c.inbox_count(TAG_HEAP) == LENS.len())?;
    let want = pattern(c.prev, 600, len);
    for (k, (_, h, p)) in c.take_inbox(TAG_HEAP).into_iter().enumerate() {
        let seq = h
            .get(1..5)
            .and_then(|b| b.try_into().ok())
            .map_or(u32::MAX, u32::from_le_bytes);
        if seq != k as u32 || p.as_slice() != &want[..LENS[k]] {
            return Err(format!(
                "heap message {k} ({} bytes) arrived wrong",
                LENS[k]
            ));
        }
    }
    c.barrier()?;
    c.m.unregister_segment(handle)
        .map_err(|e| format!("unregister heap: {e}"))?;
    c.heap.free(obj).map_err(|e| e.to_string())?;
    c.barrier()?;
    Ok(Outcome::Passed)
}

/// A peer that dies is reported as an error, not a hang. The last rank
/// leaves abruptly; rank 0 keeps sending to it.
fn case_peer_death(c: &mut Ctx) -> Result<Outcome, String> {
    if c.size < 2 {
        return Ok(Outcome::NotApplicable("needs 2 ranks".into()));
    }
    let victim = c.size - 1;
    c.barrier()?;
    if c.rank == victim {
        // `run` ends the process once the summary is out.
        c.leave = true;
        return Ok(Outcome::Passed);
    }
    if c.rank != 0 {
        return Ok(Outcome::Passed);
    }
    let start = Instant::now();
    loop {
        if c.m
            .send(victim, TAG_DEATH, &[TAG_DEATH], &[0u8; 1024])
            .is_err()
            || c.m.progress().is_err()
        {
            return Ok(Outcome::Passed);
        }
        // Other ranks leave too once their cases are done, and a transport
        // may report them: only the victim's report counts.
        let reported = c.m.take_failures().iter().any(|(r, _)| *r == victim);
        if reported || c.m.peer_failed(victim).is_some() {
            return Ok(Outcome::Passed);
        }
        for (_, status) in c.m.take_completions() {
            if status.is_err() {
                return Ok(Outcome::Passed);
            }
        }
        if start.elapsed() > Duration::from_secs(20) {
            return Err(format!(
                "rank {victim} left 20 s ago and nothing reported it"
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One btl case.
pub type Case = CaseOf<Ctx>;

/// Every case, in the order it runs (peer death ends the job's ring).
pub const CASES: [(&str, Case); 10] = [
    ("sizes", case_sizes),
    ("many", case_many),
    ("completions", case_completions),
    ("sendi", case_sendi),
    ("rdma", case_rdma),
    ("reregistration", registration::case_reregistration),
    ("unmapped-get", registration::case_unmapped_get),
    ("in-place", case_in_place),
    ("symmetric-heap", case_symmetric_heap),
    ("peer-death", case_peer_death),
];

/// Runs `cases` against btl `btl` on this rank, which must reach the next
/// rank through it. `registry` was opened with `btl` selected; the heap
/// for the symmetric-heap case is made here. The rank the peer-death case
/// picks to leave ends its process there, as a crashed rank would.
pub fn run(
    btl: &str,
    mut boot: Bootstrap,
    registry: &Registry,
    cases: &[(&'static str, Case)],
) -> Result<Tally, SetupError> {
    let mut m = Messenger::init(registry, &mut boot).map_err(SetupError::Messenger)?;
    let heap = SymmetricHeap::with_size(registry, 8 << 20).map_err(SetupError::Heap)?;
    let (rank, size) = (boot.rank(), boot.size());
    let next = (rank + 1) % size;
    let prev = (rank + size - 1) % size;
    match m.route(next) {
        Some(r) if r.component == btl => {}
        other => {
            return Err(SetupError::NotServed {
                wanted: btl.to_owned(),
                served_by: format!("rank {next} is reached through {other:?}"),
            })
        }
    }
    let inbox: Inbox = Rc::new(RefCell::new(Vec::new()));
    let many_seen = Rc::new(RefCell::new((0u64, 0u64)));
    for tag in [
        TAG_SIZES,
        TAG_COMPLETE,
        TAG_SENDI,
        TAG_SUMMARY,
        TAG_DEATH,
        TAG_FLOOD,
        TAG_RDMA_DONE,
        TAG_IN_PLACE,
        TAG_HEAP,
        TAG_BURST_DONE,
        TAG_REG_DONE,
    ] {
        let inbox = Rc::clone(&inbox);
        m.register(tag, move |msg| {
            inbox
                .borrow_mut()
                .push((msg.peer, msg.header.to_vec(), msg.payload.to_vec()));
        })
        .map_err(SetupError::Handler)?;
    }
    {
        let seen = Rc::clone(&many_seen);
        m.register(TAG_MANY, move |msg| {
            let mut s = seen.borrow_mut();
            let seq = msg
                .payload
                .try_into()
                .map(u64::from_le_bytes)
                .unwrap_or(u64::MAX);
            if seq != s.0 || msg.peer != prev {
                s.1 += 1;
            }
            s.0 += 1;
        })
        .map_err(SetupError::Handler)?;
    }
    let mut c = Ctx {
        boot,
        m,
        rank,
        size,
        next,
        prev,
        inbox,
        many_seen,
        rdma_done: std::collections::HashMap::new(),
        registration_gets: 0,
        heap,
        leave: false,
    };
    let tally = run_cases(rank, &mut c, cases);
    if c.leave {
        // Abruptly, as a crashed rank would: no finalize, no destructors.
        std::process::exit(0);
    }
    // After the peer-death case the job is short one rank: no collective
    // finalize.
    Ok(tally)
}
