//! Active messages between forked processes, all at once: every size
//! from 0 B to 4 MiB from each of four processes to every other, in order.
//! The transport suite (`tests/conformance.rs`) checks sizes, order, the
//! `sendi` contract and volume with every module driven from one thread;
//! here the senders and receivers run at the same time on their own
//! cores, and each maps the others' segments from another process.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{progress_until, run, Ctx, Job};
use fireopal_abi::btl::{Completion, SendiOutcome, Transport};
use fireopal_conformance::pattern::{fill, matches, seed};
use fireopal_conformance::Recorder;

const SIZES: [usize; 21] = [
    0,
    1,
    7,
    8,
    63,
    64,
    200,
    496,
    497,
    1000,
    4096,
    8191,
    8192,
    8193,
    32767,
    32768,
    32769,
    65536,
    300_000,
    1 << 20,
    4 << 20,
];
const TAG: u8 = 7;

fn header(index: u32, src: u32) -> [u8; 8] {
    let mut h = [0u8; 8];
    h[..4].copy_from_slice(&index.to_le_bytes());
    h[4..].copy_from_slice(&src.to_le_bytes());
    h
}

/// Every rank sends every size to every other rank, interleaving
/// destinations, trying `sendi` first where it may fit; then checks what
/// it received (order per source, bytes) and its completions.
fn all_sizes(ctx: &mut Ctx) -> Result<String, String> {
    let me = ctx.rank;
    let others: Vec<u32> = (0..ctx.size).filter(|&r| r != me).collect();
    let max_sendi = ctx
        .module
        .attributes()
        .map_err(|e| e.to_string())?
        .max_sendi_size as usize;
    let mut sink = Recorder::default();
    let mut pending: HashSet<u64> = HashSet::new();
    let mut payload = Vec::new();
    let mut sendi_used = 0;
    for (index, &size) in SIZES.iter().enumerate() {
        for &dst in &others {
            payload.resize(size, 0);
            fill(&mut payload, seed(me, dst, index as u64));
            let h = header(index as u32, me);
            if size + h.len() <= max_sendi {
                match ctx
                    .module
                    .sendi(dst, TAG, &h, &payload)
                    .map_err(|e| e.to_string())?
                {
                    SendiOutcome::Sent => {
                        sendi_used += 1;
                        continue;
                    }
                    SendiOutcome::Busy => {}
                }
            }
            let cookie = u64::from(dst) << 32 | index as u64;
            match ctx
                .module
                .send(dst, TAG, &h, &payload, cookie)
                .map_err(|e| e.to_string())?
            {
                Completion::Done => {}
                Completion::Pending => {
                    pending.insert(cookie);
                }
            }
            // Keep the queues moving while sending.
            ctx.module.progress(&mut sink).map_err(|e| e.to_string())?;
        }
    }
    let expected = others.len() * SIZES.len();
    let pending_count = pending.len();
    progress_until(&mut ctx.module, &mut sink, Duration::from_secs(100), |s| {
        s.delivered.len() >= expected && s.sends.len() >= pending_count
    })?;
    // Let the completions this process owes its peers leave.
    let mut extra = Recorder::default();
    while !ctx.module.is_quiet() {
        ctx.module.progress(&mut extra).map_err(|e| e.to_string())?;
        std::thread::yield_now();
    }
    if !extra.delivered.is_empty() || !extra.sends.is_empty() || !extra.rdma.is_empty() {
        return Err("events after everything arrived".into());
    }
    if !sink.failed.is_empty() {
        return Err(format!("peer failures: {:?}", sink.failed));
    }
    if sink.delivered.len() != expected {
        return Err(format!(
            "{} messages, expected {expected}",
            sink.delivered.len()
        ));
    }
    let mut next = vec![0u32; ctx.size as usize];
    for m in &sink.delivered {
        let (src, h, p) = (m.peer, &m.header, &m.payload);
        if m.tag != TAG || h.len() != 8 || h[4..] != src.to_le_bytes() {
            return Err(format!("bad header from {src}"));
        }
        let index = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        if index != next[src as usize] {
            return Err(format!(
                "from {src}: got message {index}, expected {}",
                next[src as usize]
            ));
        }
        next[src as usize] += 1;
        if p.len() != SIZES[index as usize] || !matches(p, seed(src, me, index.into())) {
            return Err(format!(
                "from {src}: message {index} ({} bytes) corrupt",
                p.len()
            ));
        }
    }
    for (cookie, statuses) in &sink.sends {
        if !pending.contains(cookie) {
            return Err(format!(
                "completion for cookie {cookie:#x} that was not pending"
            ));
        }
        match statuses.as_slice() {
            [Ok(())] => {}
            [Err(e)] => return Err(format!("send {cookie:#x} failed: {e}")),
            _ => {
                return Err(format!(
                    "{} completions for cookie {cookie:#x}",
                    statuses.len()
                ))
            }
        }
    }
    if sink.sends.len() != pending.len() {
        return Err(format!(
            "{} of {} completions",
            sink.sends.len(),
            pending.len()
        ));
    }
    ctx.barrier();
    let c = ctx.module.counters();
    if c.checksum_errors != 0 {
        return Err(format!("{} checksum errors", c.checksum_errors));
    }
    Ok(format!(
        "sendi {sendi_used}, pending {}, fbox {}, fifo {}, queued {}, staged {}, mapped {}",
        pending.len(),
        c.fbox_frags,
        c.fifo_frags,
        c.queued_frags,
        c.rndv_staged,
        c.rndv_mapped
    ))
}

#[test]
fn every_size_in_order_with_4_processes() {
    let out = run(
        Job {
            size: 4,
            timeout: Duration::from_secs(240),
            ..Job::default()
        },
        all_sizes,
    );
    eprintln!("{out:?}");
}
