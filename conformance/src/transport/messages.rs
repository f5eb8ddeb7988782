//! Cases on active messages: sizes, limits, order, volume, and removal.

use fireopal_abi::btl::{BtlComponentImpl, Completion, Rank, SendiOutcome, Transport};
use fireopal_abi::ErrorKind;

use super::Outcome;
use crate::job::{ensure, Failure, Job, Proc, Setup};
use crate::pattern::{matches, pattern, seed};

/// The largest message any case sends.
const CAP: u64 = 4 << 20;

/// Sends with `sendi` when the message fits it and the module takes it,
/// else with `send`. The cookie if a completion will follow.
pub(super) fn post<M: Transport>(
    p: &mut Proc<M>,
    to: Rank,
    tag: u8,
    header: &[u8],
    payload: &[u8],
    cookie: u64,
) -> Result<Option<u64>, Failure> {
    let len = (header.len() + payload.len()) as u64;
    if len <= p.attributes.max_sendi_size {
        let answer = p
            .module
            .sendi(to, tag, header, payload)
            .map_err(|e| Failure(format!("sendi {} -> {to} of {len} bytes: {e}", p.rank)))?;
        if answer == SendiOutcome::Sent {
            return Ok(None);
        }
    }
    send(p, to, tag, header, payload, cookie)
}

/// Sends with `send`; the cookie if a completion will follow.
pub(super) fn send<M: Transport>(
    p: &mut Proc<M>,
    to: Rank,
    tag: u8,
    header: &[u8],
    payload: &[u8],
    cookie: u64,
) -> Result<Option<u64>, Failure> {
    let len = header.len() + payload.len();
    match p.module.send(to, tag, header, payload, cookie) {
        Ok(Completion::Done) => Ok(None),
        Ok(Completion::Pending) => Ok(Some(cookie)),
        Err(e) => Err(Failure(format!(
            "send {} -> {to} of {len} bytes: {e}",
            p.rank
        ))),
    }
}

/// Waits until every cookie in `pending[r]` completed on rank `r`, and
/// checks each completed once and well; then until no module counts
/// bytes unsent, as a host does before it closes them (every message has
/// arrived by then, so progress alone must lead there).
fn complete_all<M: Transport>(job: &mut Job<M>, pending: &[Vec<u64>]) -> Result<(), Failure> {
    job.drive("send completions", |j| {
        j.procs
            .iter()
            .zip(pending)
            .all(|(p, cs)| cs.iter().all(|c| p.rec.sends.contains_key(c)))
    })?;
    for (p, cs) in job.procs.iter().zip(pending) {
        ensure(p.rec.sends.len() == cs.len(), || {
            format!(
                "rank {} got {} send completions for {} pending sends",
                p.rank,
                p.rec.sends.len(),
                cs.len()
            )
        })?;
        for c in cs {
            if let Some(Err(e)) = p.rec.send_status(*c) {
                return Err(Failure(format!("send {c} of rank {} failed: {e}", p.rank)));
            }
        }
    }
    job.drive("no byte unsent after delivery", |j| {
        j.procs.iter().all(|p| p.module.unsent() == 0)
    })?;
    job.check_clean()
}

/// The pairs a volume case runs on: rank 0 with every rank it reaches,
/// both ways.
fn pairs_with_rank_0<M: Transport>(job: &Job<M>) -> Vec<(usize, usize)> {
    job.pairs()
        .into_iter()
        .filter(|&(a, b)| a == 0 || b == 0)
        .collect()
}

/// Message sizes from 0 B to `max` (capped at 4 MiB), around the usual
/// protocol edges.
fn sizes_up_to(max: u64) -> Vec<usize> {
    let max = max.min(CAP) as usize;
    let mut sizes: Vec<usize> = [
        0,
        1,
        8,
        100,
        4095,
        4096,
        65_535,
        65_536,
        65_537,
        131_075,
        1 << 20,
        (1 << 20) + 3,
        4 << 20,
    ]
    .into_iter()
    .filter(|&s| s <= max)
    .collect();
    if sizes.last() != Some(&max) {
        sizes.push(max);
    }
    sizes
}

/// Every size from 0 B to the module's limit arrives intact and in order
/// with its tag and a header of varying length, both ways at once.
pub(super) fn sizes<C: BtlComponentImpl>(setup: &Setup) -> Result<Outcome, Failure> {
    let mut job = Job::<C::Module>::connected::<C>(setup)?;
    let pairs = pairs_with_rank_0(&job);
    let a = job.procs[0].attributes;
    let max_header = (a.max_header_size as usize).min(256);
    let header_len = |i: usize| (i * 37) % (max_header + 1);
    let sizes = sizes_up_to(a.max_send_size.saturating_sub(max_header as u64));
    let mut pending = vec![Vec::new(); job.procs.len()];
    for (i, &size) in sizes.iter().enumerate() {
        for &(from, to) in &pairs {
            let s = seed(from as u32, to as u32, i as u64);
            let header = pattern(!s, header_len(i));
            let cookie = (to * 1000 + i) as u64;
            let p = &mut job.procs[from];
            if let Some(c) = send(p, to as Rank, i as u8, &header, &pattern(s, size), cookie)? {
                pending[from].push(c);
            }
        }
    }
    job.drive("every size on every pair", |j| {
        pairs
            .iter()
            .all(|&(from, to)| j.procs[to].rec.count_from(from as Rank) >= sizes.len())
    })?;
    for &(from, to) in &pairs {
        let got: Vec<_> = job.procs[to].rec.from(from as Rank).collect();
        ensure(got.len() == sizes.len(), || {
            format!("{from} -> {to}: {} messages for {}", got.len(), sizes.len())
        })?;
        for (i, m) in got.iter().enumerate() {
            let s = seed(from as u32, to as u32, i as u64);
            ensure(m.tag == i as u8, || {
                format!(
                    "{from} -> {to}: message {i} arrived with tag {} (order)",
                    m.tag
                )
            })?;
            ensure(m.header == pattern(!s, header_len(i)), || {
                format!("{from} -> {to}: header of message {i} differs")
            })?;
            ensure(
                m.payload.len() == sizes[i] && matches(&m.payload, s),
                || {
                    format!(
                        "{from} -> {to}: payload of {} bytes arrived as {} bytes or corrupted",
                        sizes[i],
                        m.payload.len()
                    )
                },
            )?;
        }
    }
    complete_all(&mut job, &pending)?;
    Ok(Outcome::Passed)
}

/// A `send` over the size or header limit is refused as an invalid
/// argument, a `sendi` over its limit is `Busy`, a rank never added is an
/// error; none of them delivers anything.
pub(super) fn limits<C: BtlComponentImpl>(setup: &Setup) -> Result<Outcome, Failure> {
    let mut job = Job::<C::Module>::connected::<C>(setup)?;
    let (from, to) = job.pair()?;
    let a = job.procs[from].attributes;
    let p = &mut job.procs[from];
    if a.max_sendi_size < CAP {
        let over = vec![7u8; a.max_sendi_size as usize + 1];
        let answer = p
            .module
            .sendi(to as Rank, 1, &[], &over)
            .map_err(|e| Failure(format!("sendi over max_sendi_size: {e}")))?;
        ensure(answer == SendiOutcome::Busy, || {
            format!(
                "sendi of {} bytes over max_sendi_size answered Sent",
                over.len()
            )
        })?;
    }
    if a.max_send_size < 16 * CAP {
        let over = vec![7u8; a.max_send_size as usize + 1];
        match p.module.send(to as Rank, 2, &[], &over, 1) {
            Err(e) => ensure(e.kind == ErrorKind::INVALID_ARGUMENT, || {
                format!("send over max_send_size failed as {e}, not INVALID_ARGUMENT")
            })?,
            Ok(c) => {
                return Err(Failure(format!(
                    "send of {} bytes over max_send_size was taken ({c:?})",
                    over.len()
                )))
            }
        }
    }
    let long_header = vec![1u8; a.max_header_size as usize + 1];
    match p.module.send(to as Rank, 2, &long_header, b"", 2) {
        Err(e) => ensure(e.kind == ErrorKind::INVALID_ARGUMENT, || {
            format!("a header over max_header_size failed as {e}, not INVALID_ARGUMENT")
        })?,
        Ok(c) => {
            return Err(Failure(format!(
                "a header of {} bytes, over max_header_size, was taken ({c:?})",
                long_header.len()
            )))
        }
    }
    let stranger = job.procs.len() as Rank + 100;
    let p = &mut job.procs[from];
    ensure(p.module.send(stranger, 2, &[], b"x", 3).is_err(), || {
        format!("a send to rank {stranger}, never added, was taken")
    })?;
    ensure(p.module.sendi(stranger, 2, &[], b"x").is_err(), || {
        format!("a sendi to rank {stranger}, never added, did not fail")
    })?;
    let mut pending = vec![Vec::new(); job.procs.len()];
    if let Some(c) = post(&mut job.procs[from], to as Rank, 3, b"after", b"marker", 9)? {
        pending[from].push(c);
    }
    job.drive("the marker", |j| {
        j.procs[to].rec.count_from(from as Rank) >= 1
    })?;
    job.settle(64)?;
    let got: Vec<_> = job.procs[to].rec.from(from as Rank).collect();
    ensure(got.len() == 1 && got[0].tag == 3, || {
        format!(
            "refused messages were delivered: tags {:?}",
            got.iter().map(|m| m.tag).collect::<Vec<_>>()
        )
    })?;
    complete_all(&mut job, &pending)?;
    Ok(Outcome::Passed)
}

/// `sendi` and `send` interleaved at random, sizes on both sides of the
/// `sendi` limit, with progress now and then: order holds per peer, and a
/// `sendi` answered `Busy` (then sent again with `send`) arrives once.
pub(super) fn sendi_order<C: BtlComponentImpl>(setup: &Setup) -> Result<Outcome, Failure> {
    const N: u64 = 3000;
    let mut job = Job::<C::Module>::connected::<C>(setup)?;
    let (from, to) = job.pair()?;
    let a = job.procs[from].attributes;
    // Most lengths up to the sendi limit (at most 128 KiB), one in eight
    // just over it, so that sendi is tried both ways whatever the limit
    // without moving gigabytes.
    let largest = a.max_send_size.saturating_sub(8);
    let span = a.max_sendi_size.clamp(64, 128 << 10).min(largest);
    let over = a.max_sendi_size.saturating_sub(7).min(largest);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut pending = vec![Vec::new(); job.procs.len()];
    let mut busy_over_limit = 0;
    for i in 0..N {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = if (x >> 11) & 7 == 0 {
            (over + (x >> 20) % 4096).min(largest)
        } else {
            x % (span + 1)
        } as usize;
        let payload = pattern(seed(from as u32, to as u32, i), len);
        let header = i.to_le_bytes();
        let p = &mut job.procs[from];
        let use_sendi = x & 3 != 0;
        let cookie = if use_sendi {
            let answer = p
                .module
                .sendi(to as Rank, 5, &header, &payload)
                .map_err(|e| Failure(format!("sendi of {len} bytes: {e}")))?;
            if answer == SendiOutcome::Sent {
                ensure((len + 8) as u64 <= a.max_sendi_size, || {
                    format!("sendi took {} bytes, over max_sendi_size", len + 8)
                })?;
                None
            } else {
                if (len + 8) as u64 > a.max_sendi_size {
                    busy_over_limit += 1;
                }
                send(p, to as Rank, 5, &header, &payload, i)?
            }
        } else {
            send(p, to as Rank, 5, &header, &payload, i)?
        };
        pending[from].extend(cookie);
        if x % 7 == 0 {
            job.progress()?;
        }
    }
    job.drive("every message", |j| {
        j.procs[to].rec.count_from(from as Rank) >= N as usize
    })?;
    job.settle(32)?;
    let got: Vec<_> = job.procs[to].rec.from(from as Rank).collect();
    ensure(got.len() == N as usize, || {
        format!(
            "{} messages arrived for {N}: a Busy sendi left something",
            got.len()
        )
    })?;
    for (i, m) in got.iter().enumerate() {
        ensure(m.header == (i as u64).to_le_bytes(), || {
            format!("message {i} arrived with header {:?} (order)", m.header)
        })?;
        ensure(
            matches(&m.payload, seed(from as u32, to as u32, i as u64)),
            || format!("message {i} corrupted"),
        )?;
    }
    ensure(busy_over_limit > 0 || over + 8 <= a.max_sendi_size, || {
        "no sendi over the limit was tried".into()
    })?;
    complete_all(&mut job, &pending)?;
    Ok(Outcome::Passed)
}

/// 10^5 small messages each way, posted with a bounded number in flight:
/// none lost, duplicated or reordered.
pub(super) fn many_small<C: BtlComponentImpl>(setup: &Setup) -> Result<Outcome, Failure> {
    const N: u32 = 100_000;
    let mut job = Job::<C::Module>::connected::<C>(setup)?;
    let (a, b) = job.pair()?;
    let directions: Vec<(usize, usize)> = if a == b {
        vec![(a, b)]
    } else {
        vec![(a, b), (b, a)]
    };
    let mut next = vec![0u32; directions.len()];
    let mut pending = vec![Vec::new(); job.procs.len()];
    let mut rounds = 0u64;
    while next.iter().any(|&n| n < N) {
        for (d, &(from, to)) in directions.iter().enumerate() {
            for _ in 0..256 {
                if next[d] == N {
                    break;
                }
                let i = next[d];
                let payload = [(i % 251) as u8; 24];
                let p = &mut job.procs[from];
                if let Some(c) = post(p, to as Rank, 9, &i.to_le_bytes(), &payload, u64::from(i))? {
                    pending[from].push(c);
                }
                next[d] += 1;
            }
        }
        job.progress()?;
        rounds += 1;
        ensure(rounds < 10 * u64::from(N), || {
            "posting never finished".into()
        })?;
    }
    job.drive("every small message", |j| {
        directions
            .iter()
            .all(|&(from, to)| j.procs[to].rec.count_from(from as Rank) >= N as usize)
    })?;
    for &(from, to) in &directions {
        let got: Vec<_> = job.procs[to].rec.from(from as Rank).collect();
        ensure(got.len() == N as usize, || {
            format!("{from} -> {to}: {} messages for {N}", got.len())
        })?;
        for (i, m) in got.iter().enumerate() {
            ensure(m.header == (i as u32).to_le_bytes(), || {
                format!("{from} -> {to}: message {i} lost or reordered")
            })?;
            ensure(m.payload == [(i as u32 % 251) as u8; 24], || {
                format!("{from} -> {to}: message {i} corrupted")
            })?;
        }
    }
    complete_all(&mut job, &pending)?;
    Ok(Outcome::Passed)
}

/// Every rank sends to every rank it reaches at the same time, sizes on
/// both sides of the eager limit: each receiver sees each sender's
/// messages in order.
pub(super) fn all_to_all<C: BtlComponentImpl>(setup: &Setup) -> Result<Outcome, Failure> {
    const PER_PAIR: u64 = 200;
    let mut job = Job::<C::Module>::connected::<C>(setup)?;
    let pairs = job.pairs();
    let a = job.procs[0].attributes;
    let eager = a.eager_limit.min(a.max_send_size.saturating_sub(16)) as usize;
    let big = (65_536u64).min(a.max_send_size.saturating_sub(16)) as usize;
    let sizes = [0, 100, eager, (eager + 1).min(big), big];
    let mut pending = vec![Vec::new(); job.procs.len()];
    for i in 0..PER_PAIR {
        for &(from, to) in &pairs {
            let len = sizes[(i as usize + from) % sizes.len()];
            let s = seed(from as u32, to as u32, i);
            let cookie = (to as u64) << 32 | i;
            let p = &mut job.procs[from];
            if let Some(c) = post(p, to as Rank, 4, &i.to_le_bytes(), &pattern(s, len), cookie)? {
                pending[from].push(c);
            }
        }
        if i % 16 == 0 {
            job.progress()?;
        }
    }
    job.drive("every message of every pair", |j| {
        pairs
            .iter()
            .all(|&(from, to)| j.procs[to].rec.count_from(from as Rank) >= PER_PAIR as usize)
    })?;
    for &(from, to) in &pairs {
        for (i, m) in job.procs[to].rec.from(from as Rank).enumerate() {
            let s = seed(from as u32, to as u32, i as u64);
            ensure(
                m.header == (i as u64).to_le_bytes() && matches(&m.payload, s),
                || format!("{from} -> {to}: message {i} out of order or corrupted"),
            )?;
        }
    }
    complete_all(&mut job, &pending)?;
    Ok(Outcome::Passed)
}

/// Sends still pending when their peer is removed complete exactly once
/// and with an error, later sends naming it fail, and the module reports
/// no failure for it.
pub(super) fn remove_peer<C: BtlComponentImpl>(setup: &Setup) -> Result<Outcome, Failure> {
    let mut job = Job::<C::Module>::connected::<C>(setup)?;
    let (from, to) = job.pair()?;
    let a = job.procs[from].attributes;
    let len = a.max_send_size.min(1 << 20) as usize;
    let payload = pattern(5, len);
    let mut pending = Vec::new();
    for cookie in 0..64 {
        if let Some(c) = send(&mut job.procs[from], to as Rank, 6, &[], &payload, cookie)? {
            pending.push(c);
        }
        if pending.len() >= 2 {
            break;
        }
    }
    let p = &mut job.procs[from];
    match p.module.remove_peer(to as Rank) {
        Err(e) if e.kind == ErrorKind::UNSUPPORTED => {
            return Ok(Outcome::NotApplicable(format!("remove_peer: {e}")))
        }
        Err(e) => return Err(Failure(format!("remove_peer: {e}"))),
        Ok(()) => {}
    }
    let sent = job.procs[from]
        .module
        .send(to as Rank, 6, &[], b"late", 999);
    ensure(sent.is_err(), || {
        format!("a send naming a removed peer answered {sent:?}")
    })?;
    job.drive("completions of the removed peer's sends", |j| {
        pending
            .iter()
            .all(|c| j.procs[from].rec.sends.contains_key(c))
    })?;
    job.settle(64)?;
    let rec = &job.procs[from].rec;
    ensure(rec.repeated_completion().is_none(), || {
        "a send completed twice".into()
    })?;
    ensure(!rec.sends.contains_key(&999), || {
        "the refused send completed".into()
    })?;
    ensure(!rec.failed.iter().any(|(r, _)| *r == to as Rank), || {
        "a removed peer was reported as failed".into()
    })?;
    Ok(Outcome::Passed)
}
