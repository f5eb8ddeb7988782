//! The point-to-point cases of the messenger suite: tagged messages and
//! communicators through [`P2p`], on every rank of a job started with
//! [`Runtime`], over whatever transports the job selected.
//!
//! Every case checks the bytes each receive delivered, byte for byte, and
//! its [`Status`] (source, tag, count) against what was sent; sizes span
//! both protocols (eager up to the route's eager limit, rendezvous above
//! it). A case ends at a barrier of the suite's own, on a duplicate of the
//! world, so that the wildcard receives of the next case on the world
//! never see its messages; every message a case sends is received within
//! it. Blocking calls have a stall limit (`p2p_stall_limit`, 60 s when it
//! is not set), so a broken transport or protocol fails a case instead of
//! hanging the job.
//!
//! `communicators` holds the case of dup, split, create and free;
//! [`random`] the seeded random-traffic case and its model of MPI
//! matching.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Display;
use std::time::Duration;

use fireopal::p2p::{Communicator, P2p, P2pError, Request, Source, Status, Tag};
use fireopal::plugin::Options;
use fireopal::Runtime;
use fireopal_abi::param::ParamValue;

use super::{run_cases, CaseOf, Outcome, SetupError, Tally};

mod communicators;
mod death;
pub(crate) use death::meet;
mod flow;
mod given_up;
mod protocols;
pub mod random;
mod registration;

/// How long a blocking call may wait with nothing happening, unless
/// `p2p_stall_limit` says otherwise.
const STALL: Duration = Duration::from_secs(60);
/// The environment variable that seeds the `random` case.
pub const SEED_VAR: &str = "FIREOPAL_P2P_SEED";
/// The seed of the `random` case when [`SEED_VAR`] is not set.
pub const DEFAULT_SEED: u64 = 0x0F1E_0BA1_2024;

/// The tag of the suite's barrier, on its own communicator.
const TAG_BARRIER: i32 = 0;

/// Message sizes of the all-pairs case: around the shared-memory (32 KiB)
/// and tcp (64 KiB) eager limits, around the size from which shm's
/// receiver reads a rendezvous (128 KiB), and well above them.
const SIZES: [usize; 12] = [
    0,
    1,
    8,
    4096,
    8192,
    32_768,
    32_769,
    65_536,
    65_537,
    131_071,
    131_072,
    1 << 20,
];
/// Bytes after each receive's expected count that must stay untouched.
const GUARD: usize = 16;
const GUARD_BYTE: u8 = 0xEE;

/// What every point-to-point case works with on one rank.
pub struct Ctx {
    rt: Runtime,
    world: Communicator,
    /// A duplicate of the world for the suite's barrier.
    sync: Communicator,
    rank: u32,
    size: u32,
    /// The eager limit of the route to each world rank, as the layer
    /// computes it (the transport's, capped by `p2p_eager_limit`).
    eager: Vec<u64>,
    /// The seed of the `random` case, or why the variable is unusable.
    seed: Result<u64, String>,
    /// This rank is the one that dies in the `peer-death` case.
    leave: bool,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("eager", &self.eager)
            .finish_non_exhaustive()
    }
}

/// One point-to-point case.
pub type Case = CaseOf<Ctx>;

/// Every case, in the order it runs (`peer-death` leaves the job one
/// rank short, so it is last).
pub const CASES: [(&str, Case); 16] = [
    ("eager-and-rendezvous", case_eager_and_rendezvous),
    ("wildcards", case_wildcards),
    ("ordering", case_ordering),
    ("truncation", case_truncation),
    ("zero-bytes", case_zero_bytes),
    ("self", case_self),
    ("many-requests", case_many_requests),
    ("flow-control", flow::case_flow_control),
    ("communicators", communicators::case_communicators),
    ("random", random::case_random),
    ("reregistration", registration::case_reregistration),
    ("rendezvous-by-size", protocols::case_rendezvous_by_size),
    ("rendezvous-put", protocols::case_rendezvous_put),
    ("given-up-send", given_up::case_given_up_send),
    ("given-up-recv", given_up::case_given_up_recv),
    ("peer-death", death::case_peer_death),
];

/// The options to join the job with for this suite: `command_line`'s
/// `--param` settings, and the environment without [`SEED_VAR`], which
/// seeds the suite and is no parameter of the runtime's (it would be
/// reported as an unknown one).
pub fn runtime_options(command_line: Vec<(String, String)>) -> Options {
    Options {
        command_line,
        environment: Some(std::env::vars().filter(|(k, _)| k != SEED_VAR).collect()),
        ..Options::default()
    }
}

/// Runs `cases` on this rank of the job `rt` joined (with
/// [`runtime_options`]), then finalizes it, unless a case failed: peers
/// may still wait on this rank, and leaving ends their waits.
pub fn run(mut rt: Runtime, cases: &[(&'static str, Case)]) -> Result<Tally, SetupError> {
    let (rank, size) = (rt.rank(), rt.size());
    let world = rt.world();
    if rt.p2p().stall_limit().is_none() {
        rt.p2p().set_stall_limit(Some(STALL));
    }
    let sync = rt.p2p().dup(&world).map_err(SetupError::P2p)?;
    let cap = match rt.registry().params().value("p2p_eager_limit") {
        Some(ParamValue::Size(v) | ParamValue::UInt(v)) if *v > 0 => *v,
        _ => u64::MAX,
    };
    let eager = (0..size)
        .map(|peer| {
            rt.messenger()
                .attributes(peer)
                .map_or(0, |a| a.eager_limit.min(cap))
        })
        .collect();
    let seed = parse_seed(std::env::var(SEED_VAR).ok().as_deref());
    let mut c = Ctx {
        rt,
        world,
        sync,
        rank,
        size,
        eager,
        seed,
        leave: false,
    };
    let tally = run_cases(rank, &mut c, cases);
    if c.leave {
        // Abruptly, as a crashed rank would: no finalize, no destructors.
        std::process::exit(0);
    }
    if tally.failed > 0 || cases.iter().any(|(name, _)| *name == "peer-death") {
        // Peers may still wait on this rank, or the job is one rank
        // short: no collective finalize, but what this rank sent leaves
        // before it does (a send completes once its bytes are copied).
        let stall = c.rt.p2p().stall_limit().unwrap_or(STALL);
        let drained = c.rt.messenger().wait_until(|m| m.drained(), stall);
        if let Err(e) = drained {
            println!("rank {rank}: note: sends still queued at the end: {e}");
        }
        return Ok(tally);
    }
    let Ctx { mut rt, sync, .. } = c;
    rt.p2p().free(sync).map_err(SetupError::P2p)?;
    rt.finalize().map_err(SetupError::Runtime)?;
    Ok(tally)
}

/// The seed in `value` (decimal, or hexadecimal after `0x`), or the
/// default when unset.
fn parse_seed(value: Option<&str>) -> Result<u64, String> {
    let Some(v) = value.map(str::trim) else {
        return Ok(DEFAULT_SEED);
    };
    let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    parsed.map_err(|e| format!("{SEED_VAR}={v:?} is not a number: {e}"))
}

/// A 64-bit mix of `parts` (splitmix64 steps).
pub(crate) fn key(parts: &[u64]) -> u64 {
    parts.iter().fold(0x9E37_79B9_7F4A_7C15, |h, &p| {
        let mut z = (h ^ p).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    })
}

/// `len` bytes that only the message named by `key` carries.
pub(crate) fn pattern(key: u64, len: usize) -> Vec<u8> {
    let mut x = key | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// A receive buffer for `len` bytes with a guard after them.
pub(crate) fn guarded(len: usize) -> Vec<u8> {
    vec![GUARD_BYTE; len + GUARD]
}

/// Checks a status against the expected source, tag and count.
pub(crate) fn check_status(
    what: &dyn Display,
    got: Status,
    source: u32,
    tag: i32,
    count: usize,
) -> Result<(), String> {
    if (got.source, got.tag, got.count) != (source, tag, count) {
        return Err(format!(
            "{what}: status (source {}, tag {}, count {}), expected (source {source}, tag {tag}, count {count})",
            got.source, got.tag, got.count
        ));
    }
    Ok(())
}

/// Checks that `buf` starts with `want` and that the guard after it (if
/// any) is untouched.
pub(crate) fn check_bytes(what: &dyn Display, buf: &[u8], want: &[u8]) -> Result<(), String> {
    let Some(head) = buf.get(..want.len()) else {
        return Err(format!(
            "{what}: buffer of {} bytes, expected {}",
            buf.len(),
            want.len()
        ));
    };
    if let Some(i) = head.iter().zip(want).position(|(a, b)| a != b) {
        return Err(format!(
            "{what}: byte {i} of {} differs (0x{:02x}, expected 0x{:02x})",
            want.len(),
            head[i],
            want[i]
        ));
    }
    if let Some(i) = buf[want.len()..].iter().position(|&b| b != GUARD_BYTE) {
        return Err(format!(
            "{what}: byte {} past the {} delivered was written",
            want.len() + i,
            want.len()
        ));
    }
    Ok(())
}

/// Waits for `req` and gives back its buffer and status.
pub(crate) fn wait_ok<B: 'static>(
    p2p: &mut P2p,
    req: Request<B>,
    what: &dyn Display,
) -> Result<(B, Status), String> {
    p2p.wait(req).map_err(|f| format!("{what}: {}", f.error))
}

/// Waits for every request of `reqs`, each named by `what(i)`.
pub(crate) fn wait_all_ok<B: 'static>(
    p2p: &mut P2p,
    reqs: Vec<Request<B>>,
    what: impl Fn(usize) -> String,
) -> Result<Vec<(B, Status)>, String> {
    p2p.waitall(reqs)
        .into_iter()
        .enumerate()
        .map(|(i, r)| r.map_err(|f| format!("{}: {}", what(i), f.error)))
        .collect()
}

/// Waits for sends and checks that each completed with its length.
fn wait_sends(p2p: &mut P2p, reqs: Vec<Request<Vec<u8>>>, what: &str) -> Result<(), String> {
    for (i, (buf, st)) in wait_all_ok(p2p, reqs, |i| format!("{what}: send {i}"))?
        .into_iter()
        .enumerate()
    {
        if st.count != buf.len() {
            return Err(format!(
                "{what}: send {i} of {} bytes completed with count {}",
                buf.len(),
                st.count
            ));
        }
    }
    Ok(())
}

/// The error text of a call that had to succeed.
pub(crate) fn fail(what: impl Display) -> impl FnOnce(P2pError) -> String {
    move |e| format!("{what}: {e}")
}

impl Ctx {
    /// Waits until every rank has called it: a dissemination barrier of
    /// zero-byte messages on the suite's own communicator, which keeps
    /// every rank progressing while it waits.
    pub(crate) fn barrier(&mut self) -> Result<(), String> {
        let (rank, size) = (self.sync.rank(), self.sync.size());
        let p2p = self.rt.p2p();
        let mut step = 1;
        while step < size {
            let to = (rank + step) % size;
            let from = (rank + size - step) % size;
            let req = p2p.isend(&self.sync, to, TAG_BARRIER, Vec::new());
            p2p.recv(
                &self.sync,
                Source::Rank(from),
                Tag::Tag(TAG_BARRIER),
                &mut [],
            )
            .map_err(fail(format_args!("barrier: receive from rank {from}")))?;
            wait_ok(p2p, req, &format_args!("barrier: send to rank {to}"))?;
            step *= 2;
        }
        Ok(())
    }

    fn next(&self) -> u32 {
        (self.rank + 1) % self.size
    }

    fn prev(&self) -> u32 {
        (self.rank + self.size - 1) % self.size
    }
}

/// All pairs, every size, with receives posted before the sends (round
/// 0) and after them (round 1).
fn case_eager_and_rendezvous(c: &mut Ctx) -> Result<Outcome, String> {
    let world = c.world.clone();
    let limits: BTreeSet<u64> = c.eager.iter().copied().collect();
    println!(
        "rank {}: note eager-and-rendezvous: eager limits of the routes: {limits:?}",
        c.rank
    );
    let (rank, size) = (c.rank, c.size);
    let tag = |i: usize| 100 + i as i32;
    let payload = |src: u32, dst: u32, i: usize, round: u64| {
        pattern(
            key(&[1, u64::from(src), u64::from(dst), i as u64, round]),
            SIZES[i],
        )
    };
    for round in 0..2u64 {
        let mut recvs = Vec::new();
        let mut sends = Vec::new();
        let post = |p2p: &mut P2p, recvs: &mut Vec<_>| {
            for src in 0..size {
                for (i, &len) in SIZES.iter().enumerate() {
                    let r = p2p.irecv(&world, Source::Rank(src), Tag::Tag(tag(i)), guarded(len));
                    recvs.push(((src, i), r));
                }
            }
        };
        if round == 0 {
            post(c.rt.p2p(), &mut recvs);
            c.barrier()?;
        }
        let p2p = c.rt.p2p();
        for k in 0..size {
            let dst = (rank + k) % size;
            for i in 0..SIZES.len() {
                sends.push(p2p.isend(&world, dst, tag(i), payload(rank, dst, i, round)));
            }
        }
        if round == 1 {
            c.barrier()?;
            post(c.rt.p2p(), &mut recvs);
        }
        let p2p = c.rt.p2p();
        let (keys, reqs): (Vec<_>, Vec<_>) = recvs.into_iter().unzip();
        let done = wait_all_ok(p2p, reqs, |j| {
            let (src, i) = keys[j];
            format!("round {round}: {} bytes from rank {src}", SIZES[i])
        })?;
        for (&(src, i), (buf, st)) in keys.iter().zip(done) {
            let what = format!("round {round}: {} bytes from rank {src}", SIZES[i]);
            check_status(&what, st, src, tag(i), SIZES[i])?;
            check_bytes(&what, &buf, &payload(src, rank, i, round))?;
        }
        wait_sends(p2p, sends, &format!("round {round}"))?;
        c.barrier()?;
    }
    Ok(Outcome::Passed)
}

/// The header wildcard messages carry: sender, index, tag.
fn wild_payload(src: u32, dst: u32, k: usize, tag: i32, len: usize) -> Vec<u8> {
    let mut p = pattern(key(&[2, u64::from(src), u64::from(dst), k as u64]), len);
    p[..4].copy_from_slice(&src.to_le_bytes());
    p[4..8].copy_from_slice(&(k as u32).to_le_bytes());
    p[8..12].copy_from_slice(&tag.to_le_bytes());
    p
}

/// Probes, then receives by source and tag, and `Source::Any`/`Tag::Any`
/// receives in three shapes: every status names the real sender and tag,
/// every message is received once, each sender's messages in send order.
fn case_wildcards(c: &mut Ctx) -> Result<Outcome, String> {
    let world = c.world.clone();
    probe_then_receive(c)?;
    const WILD_SIZES: [usize; 6] = [16, 40, 100_000, 24, 9000, 16];
    const K: usize = WILD_SIZES.len();
    let wtag = |src: u32, k: usize| 200 + ((src as usize + k) % 3) as i32;
    let (rank, size) = (c.rank, c.size);
    type Shape = fn(u32, i32) -> (Source, Tag);
    let shapes: [(&str, Shape); 3] = [
        ("any source and tag", |_, _| (Source::Any, Tag::Any)),
        ("any source", |_, t| (Source::Any, Tag::Tag(t))),
        ("any tag", |s, _| (Source::Rank(s), Tag::Any)),
    ];
    for (shape, spec) in shapes {
        // The receives this rank posts: one per message it will get, each
        // with the (source, tag) its shape leaves named.
        let mut specs: Vec<(Source, Tag)> = Vec::new();
        for src in 0..size {
            for k in 0..K {
                specs.push(spec(src, wtag(src, k)));
            }
        }
        let max = WILD_SIZES.iter().copied().max().unwrap_or(0);
        let (early, late) = specs.split_at(specs.len() / 2);
        let post = |p2p: &mut P2p, part: &[(Source, Tag)], out: &mut Vec<_>| {
            for &(s, t) in part {
                out.push(p2p.irecv(&world, s, t, vec![0u8; max]));
            }
        };
        let mut recvs = Vec::new();
        post(c.rt.p2p(), early, &mut recvs);
        c.barrier()?;
        let p2p = c.rt.p2p();
        let mut sends = Vec::new();
        for (k, &len) in WILD_SIZES.iter().enumerate() {
            for j in 0..size {
                let dst = (rank + j) % size;
                let msg = wild_payload(rank, dst, k, wtag(rank, k), len);
                sends.push(p2p.isend(&world, dst, wtag(rank, k), msg));
            }
        }
        post(p2p, late, &mut recvs);
        let done = wait_all_ok(p2p, recvs, |i| format!("{shape}: receive {i}"))?;
        let mut seen = HashSet::new();
        let mut last: BTreeMap<(u32, Option<i32>), usize> = BTreeMap::new();
        for (i, ((buf, st), &(s, t))) in done.iter().zip(&specs).enumerate() {
            let what = format!("{shape}: receive {i}");
            let src = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
            let k = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]) as usize;
            if src >= size || k >= K {
                return Err(format!("{what}: a message names sender {src}, index {k}"));
            }
            check_status(&what, *st, src, wtag(src, k), WILD_SIZES[k])?;
            let want = wild_payload(src, rank, k, wtag(src, k), WILD_SIZES[k]);
            if buf[..st.count] != want[..] {
                return Err(format!("{what}: message {k} of rank {src} corrupted"));
            }
            let source_ok = s == Source::Any || s == Source::Rank(src);
            let tag_ok = t == Tag::Any || t == Tag::Tag(st.tag);
            if !source_ok || !tag_ok {
                return Err(format!("{what}: took a message it does not match"));
            }
            if !seen.insert((src, k)) {
                return Err(format!("{what}: message {k} of rank {src} received twice"));
            }
            // Non-overtaking: among the receives of one shape that a
            // sender's messages (with one tag, where the tag is named)
            // match, the earlier gets the earlier.
            let stream = (src, matches!(t, Tag::Tag(_)).then_some(st.tag));
            if let Some(&before) = last.get(&stream) {
                if before > k {
                    return Err(format!(
                        "{what}: rank {src}'s message {k} matched after its message {before}"
                    ));
                }
            }
            last.insert(stream, k);
        }
        if seen.len() != (size as usize) * K {
            return Err(format!(
                "{shape}: {} of {} messages received",
                seen.len(),
                size as usize * K
            ));
        }
        wait_sends(p2p, sends, shape)?;
        c.barrier()?;
    }
    Ok(Outcome::Passed)
}

/// `probe` with wildcards shows the message (eager and rendezvous) a
/// receive naming its source and tag then takes.
fn probe_then_receive(c: &mut Ctx) -> Result<(), String> {
    let world = c.world.clone();
    let (next, prev, rank) = (c.next(), c.prev(), c.rank);
    let p2p = c.rt.p2p();
    let lens = [10usize, 200_000];
    let mut sends = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        let data = pattern(key(&[3, u64::from(rank), i as u64]), len);
        sends.push(p2p.isend(&world, next, 77 + i as i32, data));
    }
    for (i, &len) in lens.iter().enumerate() {
        let what = format!("probe of message {i}");
        let st = p2p
            .probe(&world, Source::Any, Tag::Any)
            .map_err(fail(&what))?;
        check_status(&what, st, prev, 77 + i as i32, len)?;
        let mut buf = guarded(st.count);
        let got = p2p
            .recv(
                &world,
                Source::Rank(st.source),
                Tag::Tag(st.tag),
                &mut buf[..st.count],
            )
            .map_err(fail(&what))?;
        check_status(&format_args!("{what}: receive"), got, prev, st.tag, len)?;
        let want = pattern(key(&[3, u64::from(prev), i as u64]), len);
        check_bytes(&format_args!("{what}: receive"), &buf, &want)?;
    }
    if let Some(st) = p2p
        .iprobe(&world, Source::Any, Tag::Any)
        .map_err(fail("iprobe"))?
    {
        return Err(format!(
            "iprobe shows a message after all were received: {st:?}"
        ));
    }
    wait_sends(p2p, sends, "probe")?;
    c.barrier()
}

/// The sizes of the ordering sequence, cycled: eager and rendezvous mixed.
const ORDER_SIZES: [usize; 8] = [0, 16, 4096, 65_537, 300_000, 8, 9000, 1];

fn order_payload(src: u32, phase: u64, i: usize) -> Vec<u8> {
    pattern(
        key(&[4, u64::from(src), phase, i as u64]),
        ORDER_SIZES[i % ORDER_SIZES.len()],
    )
}

/// One sender's sequence on one tag arrives in send order, with receives
/// posted before the messages arrive (phase 0), after (phase 1: more
/// messages than the eager credits, so later small ones go by rendezvous
/// too), and both (phase 2).
fn case_ordering(c: &mut Ctx) -> Result<Outcome, String> {
    let world = c.world.clone();
    const TAG: i32 = 300;
    let (rank, next, prev) = (c.rank, c.next(), c.prev());
    let max = ORDER_SIZES.iter().copied().max().unwrap_or(0);
    for (phase, count) in [(0u64, 32usize), (1, 160), (2, 48)] {
        let spec = |i: usize| match i % 3 {
            0 => Tag::Tag(TAG),
            _ => Tag::Any,
        };
        let mut recvs = Vec::new();
        let before = match phase {
            0 => count,
            1 => 0,
            _ => count / 2,
        };
        let p2p = c.rt.p2p();
        for i in 0..before {
            recvs.push(p2p.irecv(&world, Source::Rank(prev), spec(i), guarded(max)));
        }
        c.barrier()?;
        let p2p = c.rt.p2p();
        let sends: Vec<_> = (0..count)
            .map(|i| p2p.isend(&world, next, TAG, order_payload(rank, phase, i)))
            .collect();
        if phase == 1 {
            c.barrier()?;
        }
        let p2p = c.rt.p2p();
        let mut got = Vec::new();
        if phase == 1 {
            // Blocking receives, one at a time, after the sends.
            for i in 0..count {
                let mut buf = guarded(max);
                let st = p2p
                    .recv(&world, Source::Rank(prev), spec(i), &mut buf)
                    .map_err(fail(format_args!("phase 1: receive {i}")))?;
                got.push((buf, st));
            }
        } else {
            for i in before..count {
                recvs.push(p2p.irecv(&world, Source::Rank(prev), spec(i), guarded(max)));
            }
            got = wait_all_ok(p2p, recvs, |i| format!("phase {phase}: receive {i}"))?;
        }
        for (i, (buf, st)) in got.iter().enumerate() {
            let what = format!("phase {phase}: receive {i}");
            let want = order_payload(prev, phase, i);
            check_status(&what, *st, prev, TAG, want.len())?;
            check_bytes(&what, &buf[..want.len() + GUARD], &want)
                .map_err(|e| format!("{e} (a message overtook another, or arrived corrupted)"))?;
        }
        wait_sends(p2p, sends, &format!("phase {phase}"))?;
        c.barrier()?;
    }
    Ok(Outcome::Passed)
}

/// (message length, receive buffer length) of the truncation case.
const TRUNCATIONS: [(usize, usize); 6] = [
    (100, 40),
    (4096, 0),
    (65_537, 65_536),
    (200_000, 199_999),
    (1 << 20, 1000),
    (1 << 20, 0),
];

/// A message longer than its receive buffer: `Truncated` with the
/// buffer's length as the count and the bytes that fit delivered, for
/// requests (the buffer comes back in the failure) and blocking receives;
/// the sender's request succeeds, and the sender's stream goes on.
fn case_truncation(c: &mut Ctx) -> Result<Outcome, String> {
    let world = c.world.clone();
    let (rank, next, prev) = (c.rank, c.next(), c.prev());
    let tag = |set: usize, j: usize| 400 + (set * 10 + j) as i32;
    let data = |src: u32, set: usize, j: usize| {
        pattern(
            key(&[5, u64::from(src), set as u64, j as u64]),
            TRUNCATIONS[j].0,
        )
    };
    let p2p = c.rt.p2p();
    let recvs: Vec<_> = (0..TRUNCATIONS.len())
        .map(|j| {
            let buf = vec![GUARD_BYTE; TRUNCATIONS[j].1];
            p2p.irecv(&world, Source::Rank(prev), Tag::Tag(tag(0, j)), buf)
        })
        .collect();
    c.barrier()?;
    let p2p = c.rt.p2p();
    let mut sends = Vec::new();
    for set in 0..2 {
        for j in 0..TRUNCATIONS.len() {
            sends.push(p2p.isend(&world, next, tag(set, j), data(rank, set, j)));
        }
    }
    let after = pattern(key(&[5, u64::from(rank), 9]), 70_000);
    sends.push(p2p.isend(&world, next, tag(2, 0), after));
    let truncated = |what: &str, e: &P2pError, j: usize, set: usize| -> Result<(), String> {
        let (len, cap) = TRUNCATIONS[j];
        match e {
            P2pError::Truncated { status, sent } => {
                check_status(&what, *status, prev, tag(set, j), cap)?;
                if *sent != len as u64 {
                    return Err(format!(
                        "{what}: truncation reports {sent} bytes sent, not {len}"
                    ));
                }
                Ok(())
            }
            e => Err(format!("{what}: {e}, expected a truncation")),
        }
    };
    // Blocking receives into short buffers.
    for (j, &(len, cap)) in TRUNCATIONS.iter().enumerate() {
        let what = format!("blocking receive of {len} bytes into {cap}");
        let mut buf = guarded(cap);
        match p2p.recv(
            &world,
            Source::Rank(prev),
            Tag::Tag(tag(1, j)),
            &mut buf[..cap],
        ) {
            Ok(st) => return Err(format!("{what}: succeeded with {st:?}")),
            Err(e) => truncated(&what, &e, j, 1)?,
        }
        check_bytes(&what, &buf, &data(prev, 1, j)[..cap])?;
    }
    // Requests: the failure hands the buffer back.
    for (j, r) in recvs.into_iter().enumerate() {
        let (len, cap) = TRUNCATIONS[j];
        let what = format!("request receiving {len} bytes into {cap}");
        match p2p.wait(r) {
            Ok((_, st)) => return Err(format!("{what}: succeeded with {st:?}")),
            Err(f) => {
                truncated(&what, &f.error, j, 0)?;
                let buf = f
                    .buffer
                    .ok_or_else(|| format!("{what}: the failure did not return the buffer"))?;
                if buf.len() != cap {
                    return Err(format!("{what}: {} bytes came back", buf.len()));
                }
                check_bytes(&what, &buf, &data(prev, 0, j)[..cap])?;
            }
        }
    }
    let mut buf = guarded(70_000);
    let what = "the message after the truncated ones";
    let st = p2p
        .recv(&world, Source::Rank(prev), Tag::Any, &mut buf)
        .map_err(fail(what))?;
    check_status(&what, st, prev, tag(2, 0), 70_000)?;
    check_bytes(
        &what,
        &buf[..70_000 + GUARD],
        &pattern(key(&[5, u64::from(prev), 9]), 70_000),
    )?;
    wait_sends(p2p, sends, "truncation (the sender sees no error)")?;
    c.barrier()?;
    Ok(Outcome::Passed)
}

/// Zero-byte messages between all pairs: blocking and request sends,
/// into empty and non-empty buffers (left untouched), probed with count
/// 0, and received by `Source::Any`/`Tag::Any` from every rank once.
fn case_zero_bytes(c: &mut Ctx) -> Result<Outcome, String> {
    let world = c.world.clone();
    const TAG: i32 = 500;
    let (rank, size) = (c.rank, c.size);
    let p2p = c.rt.p2p();
    let mut recvs = Vec::new();
    for src in 0..size {
        recvs.push(p2p.irecv(&world, Source::Rank(src), Tag::Tag(TAG), Vec::new()));
        recvs.push(p2p.irecv(
            &world,
            Source::Rank(src),
            Tag::Tag(TAG + 1),
            vec![GUARD_BYTE; GUARD],
        ));
    }
    c.barrier()?;
    let p2p = c.rt.p2p();
    for k in 0..size {
        let dst = (rank + k) % size;
        // Matched receives are posted: a blocking send cannot wait on a
        // receive that is never posted.
        p2p.send(&world, dst, TAG, &[])
            .map_err(fail(format_args!("blocking send to rank {dst}")))?;
        p2p.send(&world, dst, TAG + 1, &[])
            .map_err(fail(format_args!("blocking send to rank {dst}")))?;
    }
    let done = wait_all_ok(p2p, recvs, |i| format!("zero bytes from rank {}", i / 2))?;
    for (i, (buf, st)) in done.iter().enumerate() {
        let (src, t) = (i as u32 / 2, TAG + (i % 2) as i32);
        let what = format!("zero bytes from rank {src}, tag {t}");
        check_status(&what, *st, src, t, 0)?;
        check_bytes(&what, buf, &[])?;
    }
    c.barrier()?;
    // Request sends; a probe shows count 0; wildcard receives take each
    // rank's once.
    let p2p = c.rt.p2p();
    let sends: Vec<_> = (0..size)
        .map(|k| p2p.isend(&world, (rank + k) % size, TAG + 2, Vec::new()))
        .collect();
    let st = p2p
        .probe(&world, Source::Any, Tag::Tag(TAG + 2))
        .map_err(fail("probe"))?;
    check_status(&"probe of a zero-byte message", st, st.source, TAG + 2, 0)?;
    let mut from = BTreeSet::new();
    for i in 0..size {
        let mut buf = guarded(0);
        let st = p2p
            .recv(&world, Source::Any, Tag::Any, &mut buf)
            .map_err(fail(format_args!("wildcard receive {i}")))?;
        let what = format!("wildcard receive {i}");
        check_status(&what, st, st.source, TAG + 2, 0)?;
        check_bytes(&what, &buf, &[])?;
        if st.source >= size || !from.insert(st.source) {
            return Err(format!("{what}: from rank {} again", st.source));
        }
    }
    wait_sends(p2p, sends, "zero bytes")?;
    c.barrier()?;
    Ok(Outcome::Passed)
}

/// Messages to this rank: blocking sends of eager sizes before their
/// receive; requests for sizes above the eager limit of the route to
/// self, posted in both orders; a `Source::Any` receive; a communicator
/// of this rank alone.
fn case_self(c: &mut Ctx) -> Result<Outcome, String> {
    let world = c.world.clone();
    const TAG: i32 = 600;
    let me = c.rank;
    let limit = c.eager.get(me as usize).copied().unwrap_or(0);
    let data = |i: u64, len: usize| pattern(key(&[6, u64::from(me), i]), len);
    let p2p = c.rt.p2p();
    let eager: Vec<usize> = [0usize, 1, 4096, 65_536]
        .into_iter()
        .filter(|&n| n as u64 <= limit)
        .collect();
    for (i, &len) in eager.iter().enumerate() {
        let what = format!("blocking send of {len} bytes to self");
        p2p.send(&world, me, TAG, &data(i as u64, len))
            .map_err(fail(&what))?;
        let mut buf = guarded(len);
        let st = p2p
            .recv(&world, Source::Rank(me), Tag::Tag(TAG), &mut buf)
            .map_err(fail(&what))?;
        check_status(&what, st, me, TAG, len)?;
        check_bytes(&what, &buf[..len + GUARD], &data(i as u64, len))?;
    }
    // Above the eager limit (when it is small enough to allocate twice
    // over), and a large size in any case.
    let mut big: Vec<usize> = vec![1 << 20];
    if limit < 16 << 20 {
        big.extend([limit as usize + 1, 2 * limit as usize + 5]);
    } else {
        println!(
            "rank {me}: note self: the route to self is eager up to {limit} bytes; \
             set p2p_eager_limit to send rendezvous messages to self"
        );
    }
    for (i, &len) in big.iter().enumerate() {
        let i = 100 + i as u64;
        for order in ["send first", "receive first"] {
            let what = format!("{len} bytes to self, {order}");
            let (s, r);
            if order == "send first" {
                s = p2p.isend(&world, me, TAG + 1, data(i, len));
                r = p2p.irecv(&world, Source::Rank(me), Tag::Tag(TAG + 1), guarded(len));
            } else {
                r = p2p.irecv(&world, Source::Any, Tag::Any, guarded(len));
                s = p2p.isend(&world, me, TAG + 1, data(i, len));
            }
            let (buf, st) = wait_ok(p2p, r, &what)?;
            check_status(&what, st, me, TAG + 1, len)?;
            check_bytes(&what, &buf, &data(i, len))?;
            let (_, st) = wait_ok(p2p, s, &what)?;
            if st.count != len {
                return Err(format!(
                    "{what}: the send completed with count {}",
                    st.count
                ));
            }
        }
    }
    // A communicator of this rank alone: rank 0 is this process.
    let alone = p2p
        .split(&world, Some(me), 0)
        .map_err(fail("split by rank"))?
        .ok_or("split by rank gave no communicator")?;
    if (alone.rank(), alone.size(), alone.world_rank(0)) != (0, 1, Some(me)) {
        return Err(format!("split by rank: {alone:?}"));
    }
    let len = 100_000;
    let s = p2p.isend(&alone, 0, TAG + 2, data(200, len));
    let mut buf = guarded(len);
    let st = p2p
        .recv(&alone, Source::Any, Tag::Any, &mut buf)
        .map_err(fail("receive on a communicator of one"))?;
    check_status(&"receive on a communicator of one", st, 0, TAG + 2, len)?;
    check_bytes(&"receive on a communicator of one", &buf, &data(200, len))?;
    wait_ok(p2p, s, &"send on a communicator of one")?;
    p2p.free(alone)
        .map_err(fail("free a communicator of one"))?;
    c.barrier()?;
    Ok(Outcome::Passed)
}

/// Outstanding requests per rank in the many-requests case.
const MANY: u32 = 10_000;

/// 10^4 receives and 10^4 sends outstanding on every rank at once (all
/// pairs, round robin): waited for together, each checked.
fn case_many_requests(c: &mut Ctx) -> Result<Outcome, String> {
    let world = c.world.clone();
    let (rank, size) = (c.rank, c.size);
    let tag = |i: u32| 700 + (i % 97) as i32;
    let msg = |src: u32, i: u32| {
        let mut m = pattern(key(&[7, u64::from(src), u64::from(i)]), 16);
        m[..4].copy_from_slice(&src.to_le_bytes());
        m[4..8].copy_from_slice(&i.to_le_bytes());
        m
    };
    // Message i of rank s goes to (s + i) % size: this rank receives the
    // i with i = rank - s (mod size) from each s.
    let mut expected: Vec<(u32, u32)> = Vec::new();
    for s in 0..size {
        let first = (rank + size - s) % size;
        expected.extend((first..MANY).step_by(size as usize).map(|i| (s, i)));
    }
    if expected.len() != MANY as usize {
        return Err(format!("{} receives planned, not {MANY}", expected.len()));
    }
    let p2p = c.rt.p2p();
    let half = expected.len() / 2;
    let mut recvs = Vec::with_capacity(expected.len());
    for &(s, i) in &expected[..half] {
        recvs.push(p2p.irecv(&world, Source::Rank(s), Tag::Tag(tag(i)), vec![0u8; 16]));
    }
    let sends: Vec<_> = (0..MANY)
        .map(|i| p2p.isend(&world, (rank + i) % size, tag(i), msg(rank, i)))
        .collect();
    for &(s, i) in &expected[half..] {
        recvs.push(p2p.irecv(&world, Source::Rank(s), Tag::Tag(tag(i)), vec![0u8; 16]));
    }
    let done = wait_all_ok(p2p, recvs, |j| {
        format!("message {} of rank {}", expected[j].1, expected[j].0)
    })?;
    for (&(s, i), (buf, st)) in expected.iter().zip(&done) {
        let what = format!("message {i} of rank {s}");
        check_status(&what, *st, s, tag(i), 16)?;
        if *buf != msg(s, i) {
            return Err(format!(
                "{what}: wrong bytes (another message's, or corrupted)"
            ));
        }
    }
    wait_sends(p2p, sends, "many requests")?;
    c.barrier()?;
    Ok(Outcome::Passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse_in_decimal_and_hex_and_default() {
        assert_eq!(parse_seed(None), Ok(DEFAULT_SEED));
        assert_eq!(parse_seed(Some("42")), Ok(42));
        assert_eq!(parse_seed(Some(" 0xff ")), Ok(255));
        assert!(parse_seed(Some("lots")).unwrap_err().contains(SEED_VAR));
    }

    #[test]
    fn patterns_differ_by_key() {
        assert_ne!(pattern(key(&[1, 2]), 64), pattern(key(&[2, 1]), 64));
        assert_eq!(pattern(key(&[1, 2]), 64), pattern(key(&[1, 2]), 64));
        assert!(pattern(1, 0).is_empty());
    }
}
