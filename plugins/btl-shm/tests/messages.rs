//! Active messages between forked processes: sizes from 0 B to 4 MiB in
//! order with 2, 4 and 8 processes, `sendi`'s all-or-nothing contract,
//! completions exactly once, and 10^5 small messages each way; the first
//! two again with `btl_shm_checksum` on.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{fill, matches, progress_until, run, Ctx, Job, Sink};
use fireopal_abi::btl::{Completion, SendiOutcome, Transport};
use fireopal_abi::param::ParamValue;
use fireopal_abi::ErrorKind;
use fireopal_btl_shm::PARAM_CHECKSUM;

const SIZES: [usize; 18] = [
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
    let mut sink = Sink::keeping();
    let mut pending: HashSet<u64> = HashSet::new();
    let mut payload = Vec::new();
    let mut sendi_used = 0;
    for (index, &size) in SIZES.iter().enumerate() {
        for &dst in &others {
            payload.resize(size, 0);
            fill(&mut payload, me, dst, index as u32);
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
        s.messages.len() >= expected && s.sends.len() >= pending_count
    })?;
    // Let the completions this process owes its peers leave.
    let mut extra = Sink::default();
    while !ctx.module.is_quiet() {
        ctx.module.progress(&mut extra).map_err(|e| e.to_string())?;
        std::thread::yield_now();
    }
    if !extra.messages.is_empty() || extra.delivered != 0 || !extra.sends.is_empty() {
        return Err("events after everything arrived".into());
    }
    if !sink.failed.is_empty() {
        return Err(format!("peer failures: {:?}", sink.failed));
    }
    if sink.messages.len() != expected {
        return Err(format!(
            "{} messages, expected {expected}",
            sink.messages.len()
        ));
    }
    let mut next = vec![0u32; ctx.size as usize];
    for (src, tag, h, p) in &sink.messages {
        let index = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let claimed = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        if *tag != TAG || claimed != *src || h.len() != 8 {
            return Err(format!("bad header from {src}"));
        }
        if index != next[*src as usize] {
            return Err(format!(
                "from {src}: got message {index}, expected {}",
                next[*src as usize]
            ));
        }
        next[*src as usize] += 1;
        if p.len() != SIZES[index as usize] || !matches(p, *src, me, index) {
            return Err(format!(
                "from {src}: message {index} ({} bytes) corrupt",
                p.len()
            ));
        }
    }
    let mut seen = HashSet::new();
    for (cookie, status) in &sink.sends {
        if !pending.contains(cookie) {
            return Err(format!(
                "completion for cookie {cookie:#x} that was not pending"
            ));
        }
        if !seen.insert(*cookie) {
            return Err(format!("second completion for cookie {cookie:#x}"));
        }
        status
            .as_ref()
            .map_err(|e| format!("send {cookie:#x} failed: {e}"))?;
    }
    if seen.len() != pending.len() {
        return Err(format!("{} of {} completions", seen.len(), pending.len()));
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

fn job(size: u32) -> Job<'static> {
    Job {
        size,
        timeout: Duration::from_secs(240),
        ..Job::default()
    }
}

#[test]
fn every_size_in_order_with_2_processes() {
    let out = run(job(2), all_sizes);
    eprintln!("{out:?}");
}

#[test]
fn every_size_in_order_with_4_processes() {
    run(job(4), all_sizes);
}

#[test]
fn every_size_in_order_with_8_processes() {
    run(job(8), all_sizes);
}

const CHECKSUMS: [(&str, ParamValue); 1] = [(PARAM_CHECKSUM, ParamValue::Bool(true))];

#[test]
fn every_size_in_order_with_4_processes_and_checksums() {
    run(
        Job {
            params: &CHECKSUMS,
            ..job(4)
        },
        all_sizes,
    );
}

/// `sendi` fills the fast box and the queue until `Busy`; a `send` then
/// waits in the process; `sendi` stays `Busy` while it waits even after
/// the receiver drained everything; once progress writes it, the send
/// completes exactly once and `sendi` goes again; order holds throughout.
fn sendi_contract(ctx: &mut Ctx) -> Result<String, String> {
    let mut sink = Sink::keeping();
    if ctx.rank == 0 {
        let max = ctx
            .module
            .attributes()
            .map_err(|e| e.to_string())?
            .max_sendi_size as usize;
        let too_big = vec![0u8; max + 1];
        if ctx
            .module
            .sendi(1, 1, &[], &too_big)
            .map_err(|e| e.to_string())?
            != SendiOutcome::Busy
        {
            return Err("sendi larger than max_sendi_size was not Busy".into());
        }
        let long_header = [0u8; 256];
        match ctx.module.sendi(1, 1, &long_header, &[]) {
            Err(e) if e.kind == ErrorKind::INVALID_ARGUMENT => {}
            other => return Err(format!("a 256-byte header gave {other:?}")),
        }
        let mut n: u32 = 0;
        while ctx
            .module
            .sendi(1, 1, &[], &n.to_le_bytes())
            .map_err(|e| e.to_string())?
            == SendiOutcome::Sent
        {
            n += 1;
            if n > 1_000_000 {
                return Err("sendi never became Busy with a silent receiver".into());
            }
        }
        // The queues are full: this send waits in this process.
        let c = ctx
            .module
            .send(1, 1, &[], &n.to_le_bytes(), 99)
            .map_err(|e| e.to_string())?;
        if c != Completion::Pending {
            return Err("send into full queues did not answer Pending".into());
        }
        ctx.barrier(); // 1: receiver drains everything sent so far
        ctx.barrier(); // 2: drained
        if ctx
            .module
            .sendi(1, 1, &[], &(n + 1).to_le_bytes())
            .map_err(|e| e.to_string())?
            != SendiOutcome::Busy
        {
            return Err("sendi went ahead of a queued send".into());
        }
        progress_until(&mut ctx.module, &mut sink, Duration::from_secs(20), |s| {
            !s.sends.is_empty()
        })?;
        if ctx
            .module
            .sendi(1, 1, &[], &(n + 1).to_le_bytes())
            .map_err(|e| e.to_string())?
            != SendiOutcome::Sent
        {
            return Err("sendi still Busy after the queue drained".into());
        }
        // Any late duplicate completion would show here.
        for _ in 0..1000 {
            ctx.module.progress(&mut sink).map_err(|e| e.to_string())?;
        }
        if sink.sends.len() != 1 || sink.sends[0].0 != 99 || sink.sends[0].1.is_err() {
            return Err(format!("completions: {:?}", sink.sends));
        }
        ctx.barrier(); // 3: receiver takes the last two
        ctx.barrier(); // 4
        Ok(format!("{n} sendi before Busy"))
    } else {
        ctx.barrier(); // 1
        let mut got = 0;
        // Everything rank 0 wrote, and nothing more: the queued send is
        // not written until rank 0 progresses.
        for _ in 0..200 {
            ctx.module.progress(&mut sink).map_err(|e| e.to_string())?;
            std::thread::sleep(Duration::from_millis(1));
            got = sink.messages.len();
        }
        ctx.barrier(); // 2
        ctx.barrier(); // 3
        progress_until(&mut ctx.module, &mut sink, Duration::from_secs(20), |s| {
            s.messages.len() >= got + 2
        })?;
        for (i, (src, tag, _, p)) in sink.messages.iter().enumerate() {
            let v = u32::from_le_bytes(p.as_slice().try_into().map_err(|_| "payload size")?);
            if *src != 0 || *tag != 1 || v != i as u32 {
                return Err(format!("message {i} is {v} from {src}"));
            }
        }
        ctx.barrier(); // 4
        Ok(format!("{} received", sink.messages.len()))
    }
}

#[test]
fn sendi_is_all_or_nothing_and_busy_behind_queued_sends() {
    let out = run(Job::default(), sendi_contract);
    eprintln!("{out:?}");
}

#[test]
fn sendi_contract_holds_with_checksums() {
    let job = Job {
        params: &CHECKSUMS,
        ..Job::default()
    };
    let out = run(job, sendi_contract);
    eprintln!("{out:?}");
}

const MANY: u32 = 100_000;

fn check_counter(src: u32, _tag: u8, _h: &[u8], p: &[u8]) -> bool {
    let _ = src;
    p.len() == 8
}

/// 10^5 8-byte messages each way, sent while receiving; each side checks
/// it got every number once, in order.
fn many_small(ctx: &mut Ctx) -> Result<String, String> {
    let peer = 1 - ctx.rank;
    let mut sink = Sink::keeping();
    sink.check = Some(check_counter);
    let mut sent: u32 = 0;
    let mut pending = 0usize;
    let mut busy = 0u64;
    let deadline = std::time::Instant::now() + Duration::from_secs(100);
    while sent < MANY || sink.messages.len() < MANY as usize || sink.sends.len() < pending {
        if std::time::Instant::now() > deadline {
            return Err(format!("stuck: sent {sent}, got {}", sink.messages.len()));
        }
        if sent < MANY {
            let bytes = u64::from(sent).to_le_bytes();
            match ctx
                .module
                .sendi(peer, 3, &[], &bytes)
                .map_err(|e| e.to_string())?
            {
                SendiOutcome::Sent => sent += 1,
                SendiOutcome::Busy => {
                    busy += 1;
                    // Every 8th busy answer falls back to send, which
                    // never refuses.
                    if busy % 8 == 0 {
                        if ctx
                            .module
                            .send(peer, 3, &[], &bytes, u64::from(sent))
                            .map_err(|e| e.to_string())?
                            == Completion::Pending
                        {
                            pending += 1;
                        }
                        sent += 1;
                    }
                }
            }
        }
        if ctx.module.progress(&mut sink).map_err(|e| e.to_string())? == 0 && sent >= MANY {
            std::thread::yield_now();
        }
    }
    while !ctx.module.is_quiet() {
        ctx.module.progress(&mut sink).map_err(|e| e.to_string())?;
    }
    if sink.bad != 0 {
        return Err(format!("{} malformed messages", sink.bad));
    }
    for (i, (src, _, _, p)) in sink.messages.iter().enumerate() {
        let v = u64::from_le_bytes(p.as_slice().try_into().map_err(|_| "size")?);
        if *src != peer || v != i as u64 {
            return Err(format!("message {i} carried {v}"));
        }
    }
    if sink.messages.len() != MANY as usize || sink.sends.len() != pending {
        return Err(format!(
            "{} messages, {} of {pending} completions",
            sink.messages.len(),
            sink.sends.len()
        ));
    }
    let cookies: HashSet<u64> = sink.sends.iter().map(|s| s.0).collect();
    if cookies.len() != pending {
        return Err("a send completed twice".into());
    }
    ctx.barrier();
    let c = ctx.module.counters();
    Ok(format!(
        "busy {busy}, pending {pending}, fbox {}, fifo {}",
        c.fbox_frags, c.fifo_frags
    ))
}

#[test]
fn hundred_thousand_small_messages_each_way() {
    let out = run(Job::default(), many_small);
    eprintln!("{out:?}");
}
