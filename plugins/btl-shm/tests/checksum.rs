//! `btl_shm_checksum`: payload bytes changed in shared memory after their
//! sender wrote them (in a staging segment, a fast box or a queue slot, by
//! another process of the same user) are caught before delivery with the
//! checksum on, and reach the program without it; peers that disagree on
//! the parameter do not talk.

#![allow(unsafe_code)]

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{host, map_foreign, map_queue_segment, open, progress_until, run, word, Ctx, Job};
use fireopal_abi::btl::{PeerAddress, Reachability, Transport};
use fireopal_abi::param::ParamValue;
use fireopal_abi::ErrorKind;
use fireopal_btl_shm::PARAM_CHECKSUM;
use fireopal_conformance::host::fresh_job_key;
use fireopal_conformance::pattern::{fill, matches, seed};
use fireopal_conformance::Recorder;
use fireopal_core::shmq::fbox::{self, Found};
use fireopal_core::shmq::fifo::FragmentHeader;
use fireopal_core::shmq::layout::SLOT_DATA;
use fireopal_core::shmq::Kind;
use fireopal_core::wire::shm::{Address, Rts, Source};

const VICTIM: u32 = 1;
/// Sends a staged rendezvous message; its staging segment is changed.
const STAGED: u32 = 0;
/// Sends a fast-box message; the entry is changed.
const FBOX: u32 = 2;
/// Sends a queue-slot message; the slot is changed.
const FIFO: u32 = 3;
/// Changes the others' bytes, and sends a message nobody touches.
const MEDDLER: u32 = 4;

/// Payload bytes of each sender's message.
fn size_of(rank: u32) -> usize {
    match rank {
        STAGED | MEDDLER => 64 << 10, // above the eager limit: staged
        FBOX => 100,                  // a fast-box entry
        _ => 4000,                    // past a fast-box entry: a queue slot
    }
}

/// Flips one byte at `at` of a mapping.
fn flip(base: *mut u8, at: usize) {
    // SAFETY: `at` lies inside the mapping (the callers' offsets come from
    // checked layouts and requests), which is never unmapped.
    unsafe { *base.add(at) ^= 0x5a };
}

/// The meddler, after the messages are written and before the victim
/// reads any: one payload byte of each of the three messages changes
/// where it waits.
fn meddle(ctx: &Ctx) -> Result<(), String> {
    let (queue, layout) = map_queue_segment(ctx, VICTIM);
    // The rendezvous request is the first entry of STAGED's fast box.
    let ring = layout.fbox_ring(STAGED).ok_or("ring")?;
    let first = word(queue, ring).load(Ordering::Acquire);
    let Ok(Found::Entry(h)) = fbox::decode(first, 32 << 10, layout.fbox_lines()) else {
        return Err(format!("no fast-box entry from rank {STAGED}: {first:#x}"));
    };
    if h.kind != Kind::Rts {
        return Err(format!("first entry of rank {STAGED} is a {:?}", h.kind));
    }
    // SAFETY: the entry's data lies in the ring, inside the mapping.
    let data = unsafe { std::slice::from_raw_parts(queue.add(ring + 8), usize::from(h.len)) };
    let rts = Rts::decode(data).map_err(|e| e.to_string())?;
    let Source::Segment { seg, offset } = rts.source else {
        return Err("the request does not name a staging segment".into());
    };
    let pid = Address::decode(&ctx.addresses[STAGED as usize])
        .map_err(|e| e.to_string())?
        .pid;
    let staging = map_foreign(pid, seg.fd, seg.len as usize);
    flip(staging, offset as usize + 12_345);

    // The fast-box message: a byte of its payload in the ring.
    flip(queue, layout.fbox_ring(FBOX).ok_or("ring")? + 8 + 50);

    // The queue message: the only one in the queue, in slot 0.
    let slot = layout.fifo_slot(0);
    let words = [
        word(queue, slot + 8).load(Ordering::Acquire),
        word(queue, slot + 16).load(Ordering::Acquire),
    ];
    let h = FragmentHeader::decode(words, layout.fifo_data_capacity(), ctx.size)
        .map_err(|e| e.to_string())?;
    if u32::from(h.sender) != FIFO {
        return Err(format!(
            "queue slot 0 holds a fragment of rank {}",
            h.sender
        ));
    }
    flip(queue, slot + SLOT_DATA + 1000);
    Ok(())
}

/// Every sender writes one message to the victim; the meddler changes
/// three of them before the victim reads; the victim then reads.
fn corrupted(ctx: &mut Ctx, checksum: bool) -> Result<String, String> {
    let me = ctx.rank;
    if me != VICTIM {
        let mut payload = vec![0u8; size_of(me)];
        fill(&mut payload, seed(me, VICTIM, 0));
        // Written before `send` returns, with or without room to spare:
        // the victim has read nothing yet.
        ctx.module
            .send(VICTIM, 7, &[], &payload, 1)
            .map_err(|e| e.to_string())?;
    }
    ctx.barrier(); // 1: every message is in shared memory
    if me == MEDDLER {
        meddle(ctx)?;
    }
    ctx.barrier(); // 2: three of them changed
    if me != VICTIM {
        ctx.barrier(); // 3
        return Ok(String::new());
    }
    let mut sink = Recorder::default();
    let result = if checksum {
        caught(ctx, &mut sink)
    } else {
        missed(ctx, &mut sink)
    };
    ctx.barrier(); // 3: the senders stay until the victim is done
    result
}

/// With checksums: the three changed messages fail their senders, with
/// the checksum named, and are not delivered; the untouched one is.
fn caught(ctx: &mut Ctx, sink: &mut Recorder) -> Result<String, String> {
    progress_until(&mut ctx.module, sink, Duration::from_secs(60), |s| {
        s.failed.len() >= 3 && !s.delivered.is_empty()
    })?;
    let mut blamed: Vec<u32> = sink.failed.iter().map(|f| f.0).collect();
    blamed.sort_unstable();
    if blamed != [STAGED, FBOX, FIFO] {
        return Err(format!("failures: {:?}", sink.failed));
    }
    for (rank, e) in &sink.failed {
        let text = e.to_string();
        if e.kind != ErrorKind::MALFORMED
            || !text.contains(PARAM_CHECKSUM)
            || !text.contains("does not match its checksum")
        {
            return Err(format!("rank {rank} failed with: {text}"));
        }
    }
    let from: Vec<u32> = sink.delivered.iter().map(|m| m.peer).collect();
    if from != [MEDDLER] {
        return Err(format!("delivered from {from:?}"));
    }
    if !matches(&sink.delivered[0].payload, seed(MEDDLER, VICTIM, 0)) {
        return Err("the untouched message arrived changed".into());
    }
    let errors = ctx.module.counters().checksum_errors;
    if errors != 3 {
        return Err(format!("{errors} checksum errors counted"));
    }
    Ok(sink
        .failed
        .iter()
        .map(|f| format!("{}: {}", f.0, f.1))
        .collect::<Vec<_>>()
        .join("\n"))
}

/// Without: every message is delivered, the three changed ones with the
/// changed byte, and nobody fails.
fn missed(ctx: &mut Ctx, sink: &mut Recorder) -> Result<String, String> {
    progress_until(&mut ctx.module, sink, Duration::from_secs(60), |s| {
        s.delivered.len() >= 4
    })?;
    if !sink.failed.is_empty() {
        return Err(format!("failures: {:?}", sink.failed));
    }
    for m in &sink.delivered {
        let rank = m.peer;
        let intact = matches(&m.payload, seed(rank, VICTIM, 0));
        if intact != (rank == MEDDLER) || m.payload.len() != size_of(rank) {
            return Err(format!("message of rank {rank}: intact {intact}"));
        }
    }
    Ok(format!("{} messages, 3 changed", sink.delivered.len()))
}

fn job<'a>(params: &'a [(&'a str, ParamValue)]) -> Job<'a> {
    Job {
        size: 5,
        params,
        timeout: Duration::from_secs(120),
        ..Job::default()
    }
}

#[test]
fn changed_payloads_are_caught_with_the_checksum() {
    let params = [(PARAM_CHECKSUM, ParamValue::Bool(true))];
    let out = run(job(&params), |ctx| corrupted(ctx, true));
    eprintln!("{}", out[VICTIM as usize]);
}

#[test]
fn changed_payloads_reach_the_program_without_it() {
    let params = [(PARAM_CHECKSUM, ParamValue::Bool(false))];
    let out = run(job(&params), |ctx| corrupted(ctx, false));
    eprintln!("{}", out[VICTIM as usize]);
}

#[test]
fn peers_that_disagree_on_checksums_do_not_talk() {
    let key = fresh_job_key();
    let on = [(PARAM_CHECKSUM, ParamValue::Bool(true))];
    let off = [(PARAM_CHECKSUM, ParamValue::Bool(false))];
    let mut a = open(host(0, 2, key, &on));
    let mut b = open(host(1, 2, key, &off));
    let (addr_a, addr_b) = (a.address().unwrap(), b.address().unwrap());
    assert!(Address::decode(&addr_a).unwrap().checksum);
    assert!(!Address::decode(&addr_b).unwrap().checksum);
    fn peer(rank: u32, address: &[u8]) -> PeerAddress<'_> {
        PeerAddress {
            rank,
            node_local: true,
            address: address.into(),
        }
    }
    for (module, other, expect) in [
        (
            &mut a,
            peer(1, &addr_b),
            "btl_shm_checksum is no on rank 1 and yes here",
        ),
        (
            &mut b,
            peer(0, &addr_a),
            "btl_shm_checksum is yes on rank 0 and no here",
        ),
    ] {
        match module.add_peers(&[other]).unwrap().as_slice() {
            [Reachability::Unreachable(why)] => assert_eq!(why.as_str(), expect),
            other => panic!("{other:?}"),
        }
    }
    let e = a.send(1, 0, &[], b"x", 1).unwrap_err();
    assert_eq!(e.kind, ErrorKind::UNREACHABLE);
}
