//! Corrupt headers in a receiver's segment are reported for the peer that
//! wrote them; the receiver neither crashes nor reads outside its segment,
//! and keeps serving its healthy peers.

#![allow(unsafe_code)]

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{map_queue_segment, progress_until, run, word, Ctx, Job};
use fireopal_abi::btl::{SendiOutcome, Transport};
use fireopal_abi::ErrorKind;
use fireopal_conformance::Recorder;
use fireopal_core::shmq::fbox::EntryHeader;
use fireopal_core::shmq::fifo::FragmentHeader;
use fireopal_core::shmq::layout::SLOT_DATA;
use fireopal_core::shmq::{Kind, LINE};
use fireopal_core::wire::shm::{Rts, SegmentRef, Source};

const VICTIM: u32 = 2;
const HEALTHY: u32 = 4;

/// Three peers each corrupt something in the victim's segment after a
/// few good messages: rank 0 a fast-box header (length past any entry),
/// rank 1 a queue fragment header (length past the slot), rank 3 a
/// rendezvous request (payload outside its segment). Rank 4 keeps
/// talking to the victim.
fn corrupt(ctx: &mut Ctx) -> Result<String, String> {
    let mut sink = Recorder::default();
    let me = ctx.rank;
    if me != VICTIM {
        for i in 0..3u8 {
            if ctx
                .module
                .sendi(VICTIM, 1, &[], &[i])
                .map_err(|e| e.to_string())?
                != SendiOutcome::Sent
            {
                return Err("first messages did not go".into());
            }
        }
    }
    if me == VICTIM {
        progress_until(&mut ctx.module, &mut sink, Duration::from_secs(30), |s| {
            s.delivered.len() >= 12
        })?;
    }
    ctx.barrier(); // 1: the good messages arrived
    let (base, layout) = map_queue_segment(ctx, VICTIM);
    match me {
        0 => {
            // Next entry of rank 0's fast box: line 3, sequence 3.
            let ring = layout.fbox_ring(0).ok_or("ring")?;
            let bad = EntryHeader {
                seq: 3,
                kind: Kind::Active,
                len: 0x7fff,
                tag: 1,
                hdr_len: 0,
            };
            word(base, ring + 3 * LINE).store(bad.encode(), Ordering::Release);
        }
        1 => {
            // Claim a queue slot as a writer does, then write a length
            // larger than the slot.
            let tail = word(base, layout.fifo_tail());
            let t = tail.fetch_add(1, Ordering::Relaxed);
            let slot = layout.fifo_slot(t);
            let bad = FragmentHeader {
                seq: 3,
                kind: Kind::Active,
                sender: 1,
                tag: 1,
                hdr_len: 0,
                len: layout.fifo_data_capacity() as u32 + 1,
            };
            let [w1, w2] = bad.encode();
            word(base, slot + 8).store(w1, Ordering::Relaxed);
            word(base, slot + 16).store(w2, Ordering::Relaxed);
            word(base, slot).store(t + 1, Ordering::Release);
            let _ = SLOT_DATA;
        }
        3 => {
            // A well-formed fast-box entry whose rendezvous request
            // points past the end of its segment.
            let ring = layout.fbox_ring(3).ok_or("ring")?;
            let rts = Rts {
                id: 1,
                len: 4096,
                source: Source::Segment {
                    seg: SegmentRef {
                        id: 1,
                        file_id: 1,
                        fd: 3,
                        base: 1 << 30,
                        len: 4096,
                    },
                    offset: 4096,
                },
                sum: None,
            }
            .encode();
            let at = ring + 3 * LINE;
            // SAFETY: inside the ring of rank 3's fast box.
            unsafe { std::ptr::copy_nonoverlapping(rts.as_ptr(), base.add(at + 8), rts.len()) };
            let h = EntryHeader {
                seq: 3,
                kind: Kind::Rts,
                len: rts.len() as u16,
                tag: 1,
                hdr_len: 0,
            };
            word(base, at).store(h.encode(), Ordering::Release);
        }
        _ => {}
    }
    ctx.barrier(); // 2: corrupted
    match me {
        VICTIM => {
            progress_until(&mut ctx.module, &mut sink, Duration::from_secs(30), |s| {
                s.failed.len() >= 3 && s.delivered.len() >= 12 + 2
            })?;
            let mut blamed: Vec<u32> = sink.failed.iter().map(|f| f.0).collect();
            blamed.sort_unstable();
            if blamed != [0, 1, 3] {
                return Err(format!(
                    "failures reported for {blamed:?}: {:?}",
                    sink.failed
                ));
            }
            if let Some(f) = sink
                .failed
                .iter()
                .find(|f| f.1.kind != ErrorKind::MALFORMED)
            {
                return Err(format!("failure of kind {}: {}", f.1.kind, f.1));
            }
            match ctx.module.sendi(0, 1, &[], &[1]) {
                Err(e) if e.kind.is_peer_failure() => {}
                other => return Err(format!("sendi to a failed peer gave {other:?}")),
            }
            // The healthy peer's messages after the corruption (one in
            // a queue slot, one in the fast box) arrived intact.
            let late: Vec<&Vec<u8>> = sink.delivered[12..].iter().map(|m| &m.payload).collect();
            if late.len() != 2
                || late[0].len() != 2000
                || late[1] != &[9]
                || sink.delivered[12..].iter().any(|m| m.peer != HEALTHY)
            {
                return Err("healthy peer's late messages are wrong".into());
            }
            if late[0].iter().any(|&b| b != 0xab) {
                return Err("healthy peer's queue message is corrupt".into());
            }
            ctx.barrier(); // 3
            Ok(sink
                .failed
                .iter()
                .map(|f| format!("{}: {}", f.0, f.1))
                .collect::<Vec<_>>()
                .join(" | "))
        }
        HEALTHY => {
            ctx.module
                .send(VICTIM, 1, &[], &[0xab; 2000], 1)
                .map_err(|e| e.to_string())?;
            ctx.module
                .send(VICTIM, 1, &[], &[9], 2)
                .map_err(|e| e.to_string())?;
            while !ctx.module.is_quiet() {
                ctx.module.progress(&mut sink).map_err(|e| e.to_string())?;
            }
            ctx.barrier(); // 3
            Ok(String::new())
        }
        _ => {
            ctx.barrier(); // 3
            Ok(String::new())
        }
    }
}

#[test]
fn corrupt_headers_are_reported_for_their_writer() {
    let out = run(
        Job {
            size: 5,
            timeout: Duration::from_secs(120),
            ..Job::default()
        },
        corrupt,
    );
    eprintln!("{}", out[VICTIM as usize]);
}

/// Rank 1 exits after the barrier. Rank 0 has a rendezvous send waiting
/// for it (`pending`), or has sent it nothing and only progresses: either
/// way rank 1 is reported failed once, the waiting send completes once
/// with an error, and a later send fails.
fn peer_exits(ctx: &mut Ctx, pending: bool) -> Result<String, String> {
    ctx.barrier();
    if ctx.rank == 1 {
        return Ok("exiting".into());
    }
    let mut sink = Recorder::default();
    if pending {
        let big = vec![1u8; 1 << 20];
        ctx.module
            .send(1, 1, &[], &big, 5)
            .map_err(|e| e.to_string())?;
    }
    progress_until(&mut ctx.module, &mut sink, Duration::from_secs(30), |s| {
        !s.failed.is_empty() && s.sends.len() == usize::from(pending)
    })?;
    for _ in 0..5000 {
        ctx.module.progress(&mut sink).map_err(|e| e.to_string())?;
    }
    if sink.failed.len() != 1
        || sink.failed[0].0 != 1
        || sink.failed[0].1.kind != ErrorKind::PROCESS_ENDED
    {
        return Err(format!("failures: {:?}", sink.failed));
    }
    let completions_ok = match sink.sends.get(&5).map(Vec::as_slice) {
        None => !pending && sink.sends.is_empty(),
        Some([Err(_)]) => pending && sink.sends.len() == 1,
        Some(_) => false,
    };
    if !completions_ok {
        return Err(format!("completions: {:?}", sink.sends));
    }
    match ctx.module.send(1, 1, &[], b"x", 6) {
        Err(e) if e.kind.is_peer_failure() => {}
        other => return Err(format!("send to an exited peer gave {other:?}")),
    }
    Ok(format!("{}", sink.failed[0].1))
}

#[test]
fn an_exited_peer_is_reported_and_its_sends_fail_once() {
    let out = run(Job::default(), |ctx| peer_exits(ctx, true));
    eprintln!("{}", out[0]);
}

#[test]
fn an_exited_peer_is_reported_while_nothing_waits_for_it() {
    let out = run(Job::default(), |ctx| peer_exits(ctx, false));
    eprintln!("{}", out[0]);
}
