//! The `random` case: a seeded random schedule of messages between all
//! ranks, received with random wildcards, checked against a model of MPI
//! matching.
//!
//! Every rank builds the same global schedule from the seed: messages
//! (sender, receiver, tag, size), whose order restricted to one sender is
//! its send order. For each receiver it builds an order of receives, each
//! naming a source or [`Source::Any`] and a tag or [`Tag::Any`]. The
//! [`model`] says which message each receive must match: receives taken in
//! their posting order, each matching, among the messages not matched
//! yet, the first one in its sender's send order that it accepts. That is
//! MPI's rule whatever the timing, as long as no [`Source::Any`] receive
//! has candidates from two senders (then arrival order decides), so the
//! generator only names a wildcard where the model can tell, and the model
//! refuses a schedule that breaks this. Then the ranks run it for real,
//! posting their sends and receives in a random interleaving of their own,
//! and every status and payload is compared with the model's prediction.

use std::fmt;

use fireopal::p2p::{P2pError, Source, Tag};

use super::{
    check_status, fail, key, pattern, wait_all_ok, Ctx, Outcome, GUARD, GUARD_BYTE, SEED_VAR,
};

/// The tags of the schedule: `TAG_BASE..TAG_BASE + TAGS`.
const TAG_BASE: i32 = 800;
const TAGS: u32 = 4;
/// Messages per rank in the schedule.
const PER_RANK: usize = 48;
/// Sizes just around the shared-memory and tcp eager limits.
const EDGES: [usize; 6] = [8191, 8192, 8193, 65_535, 65_536, 65_537];

/// A small deterministic generator (splitmix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded by `parts`.
    pub fn new(parts: &[u64]) -> Self {
        Rng(key(parts))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `1/n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}

/// One message of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Msg {
    /// Its place in the schedule (names its payload).
    pub id: usize,
    /// Sender's rank.
    pub src: u32,
    /// Receiver's rank.
    pub dst: u32,
    /// Tag.
    pub tag: i32,
    /// Length in bytes.
    pub len: usize,
}

/// One receive of a receiver's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recv {
    /// The source it names.
    pub source: Source,
    /// The tag it names.
    pub tag: Tag,
    /// Its buffer's length (shorter than its message: a truncation).
    pub cap: usize,
}

impl Recv {
    fn accepts(&self, m: &Msg) -> bool {
        (self.source == Source::Any || self.source == Source::Rank(m.src))
            && (self.tag == Tag::Any || self.tag == Tag::Tag(m.tag))
    }
}

/// Why the model cannot predict a receive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelError {
    /// No message left matches receive `index`: it would never complete.
    Unmatched {
        /// The receive's place in the order.
        index: usize,
    },
    /// Receive `index` names any source and two senders have a message it
    /// accepts: which one it gets depends on arrival order.
    Ambiguous {
        /// The receive's place in the order.
        index: usize,
        /// Two senders with candidates.
        senders: (u32, u32),
    },
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unmatched { index } => write!(f, "receive {index} matches no message left"),
            Self::Ambiguous { index, senders } => write!(
                f,
                "receive {index} names any source and ranks {} and {} both have a candidate",
                senders.0, senders.1
            ),
        }
    }
}

/// The message (an index into `msgs`) each of `recvs` matches under MPI
/// matching, for one receiver: `msgs` are the messages sent to it in an
/// order that, restricted to each sender, is that sender's send order;
/// `recvs` its receives in posting order.
pub fn model(msgs: &[Msg], recvs: &[Recv]) -> Result<Vec<usize>, ModelError> {
    let mut matched = vec![false; msgs.len()];
    let mut out = Vec::with_capacity(recvs.len());
    for (index, r) in recvs.iter().enumerate() {
        // Each sender's first unmatched message this receive accepts.
        let mut first: Vec<(u32, usize)> = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            if !matched[i] && r.accepts(m) && !first.iter().any(|&(s, _)| s == m.src) {
                first.push((m.src, i));
            }
        }
        let pick = match first.as_slice() {
            [] => return Err(ModelError::Unmatched { index }),
            [(_, i)] => *i,
            [(a, _), (b, _), ..] => {
                return Err(ModelError::Ambiguous {
                    index,
                    senders: (*a, *b),
                })
            }
        };
        matched[pick] = true;
        out.push(pick);
    }
    Ok(out)
}

/// The global schedule of a job of `size` ranks for `seed`.
pub fn schedule(seed: u64, size: u32) -> Vec<Msg> {
    let mut rng = Rng::new(&[seed, u64::from(size), 1]);
    (0..PER_RANK * size as usize)
        .map(|id| {
            let src = rng.below(u64::from(size)) as u32;
            let dst = rng.below(u64::from(size)) as u32;
            let tag = TAG_BASE + rng.below(u64::from(TAGS)) as i32;
            let len = match rng.below(20) {
                0..=3 => 0,
                4..=9 => 1 + rng.below(64) as usize,
                10..=13 => 65 + rng.below(6000) as usize,
                14..=16 => EDGES[rng.below(EDGES.len() as u64) as usize],
                _ => 100_000 + rng.below(300_000) as usize,
            };
            Msg {
                id,
                src,
                dst,
                tag,
                len,
            }
        })
        .collect()
}

/// A receive order for the messages `msgs` sent to one receiver: each
/// receive aims at a message that is the first unmatched one of its
/// (sender, tag) pair, and names a wildcard only where the model can tell
/// that this message is the one it matches. Returns the receives and the
/// messages they aim at.
pub fn receives(seed: u64, dst: u32, msgs: &[Msg]) -> (Vec<Recv>, Vec<usize>) {
    let mut rng = Rng::new(&[seed, u64::from(dst), 2]);
    let mut matched = vec![false; msgs.len()];
    let mut recvs = Vec::with_capacity(msgs.len());
    let mut aims = Vec::with_capacity(msgs.len());
    let unmatched = |matched: &[bool], f: &dyn Fn(&Msg) -> bool| {
        msgs.iter()
            .enumerate()
            .filter(|&(i, m)| !matched[i] && f(m))
            .map(|(i, _)| i)
            .collect::<Vec<_>>()
    };
    for _ in 0..msgs.len() {
        // The heads of the (sender, tag) pairs.
        let heads: Vec<usize> = unmatched(&matched, &|_| true)
            .into_iter()
            .filter(|&i| {
                let m = &msgs[i];
                !msgs[..i]
                    .iter()
                    .enumerate()
                    .any(|(j, o)| !matched[j] && o.src == m.src && o.tag == m.tag)
            })
            .collect();
        let aim = heads[rng.below(heads.len() as u64) as usize];
        let m = msgs[aim];
        let head_of_sender = unmatched(&matched, &|o| o.src == m.src).first() == Some(&aim);
        let only_sender_of_tag = unmatched(&matched, &|o| o.tag == m.tag)
            .iter()
            .all(|&j| msgs[j].src == m.src);
        let only_sender = unmatched(&matched, &|_| true)
            .iter()
            .all(|&j| msgs[j].src == m.src);
        let mut shapes = vec![(Source::Rank(m.src), Tag::Tag(m.tag))];
        if head_of_sender {
            shapes.push((Source::Rank(m.src), Tag::Any));
        }
        if only_sender_of_tag {
            shapes.push((Source::Any, Tag::Tag(m.tag)));
        }
        if head_of_sender && only_sender {
            shapes.push((Source::Any, Tag::Any));
        }
        // Favour the wildcards: the exact shape is one choice of several.
        let (source, tag) = shapes[rng.below(shapes.len() as u64) as usize];
        let cap = if m.len > 0 && rng.one_in(8) {
            rng.below(m.len as u64) as usize
        } else {
            m.len + rng.below(3) as usize * rng.below(40) as usize
        };
        matched[aim] = true;
        recvs.push(Recv { source, tag, cap });
        aims.push(aim);
    }
    (recvs, aims)
}

/// The payload of schedule message `id`.
fn payload(seed: u64, m: &Msg) -> Vec<u8> {
    pattern(key(&[9, seed, m.id as u64]), m.len)
}

/// The random case: see the [module docs](self).
pub(crate) fn case_random(c: &mut Ctx) -> Result<Outcome, String> {
    let seed = c.seed.clone()?;
    let (rank, size) = (c.rank, c.size);
    let all = schedule(seed, size);
    let mine: Vec<Msg> = all.iter().filter(|m| m.dst == rank).copied().collect();
    let (recvs, aims) = receives(seed, rank, &mine);
    let predicted = model(&mine, &recvs).map_err(|e| format!("seed {seed}: the model: {e}"))?;
    if predicted != aims {
        return Err(format!(
            "seed {seed}: the model matches other messages than the generator aimed at"
        ));
    }
    let wild = recvs
        .iter()
        .filter(|r| r.source == Source::Any || r.tag == Tag::Any)
        .count();
    let truncated = recvs
        .iter()
        .zip(&predicted)
        .filter(|(r, &i)| r.cap < mine[i].len)
        .count();
    println!(
        "rank {rank}: note random: seed {seed} ({SEED_VAR}), {} messages; this rank receives {} ({wild} with a wildcard, {truncated} truncated)",
        all.len(),
        recvs.len()
    );
    let sends: Vec<Msg> = all.iter().filter(|m| m.src == rank).copied().collect();
    let world = c.world.clone();
    let p2p = c.rt.p2p();
    // This rank's own interleaving of its sends and receives; once every
    // send has started, some receives block (no rank blocks before its
    // sends have started, so every message it waits for is on its way).
    let mut rng = Rng::new(&[seed, u64::from(rank), 3]);
    let (mut next_send, mut next_recv) = (0, 0);
    let mut send_reqs = Vec::with_capacity(sends.len());
    let mut recv_reqs = Vec::with_capacity(recvs.len());
    // Receives finished before the final wait: blocking ones, and
    // requests a test found complete.
    let mut blocking = Vec::new();
    while next_send < sends.len() || next_recv < recvs.len() {
        let send_now = next_recv == recvs.len() || (next_send < sends.len() && rng.one_in(2));
        if send_now {
            let m = &sends[next_send];
            send_reqs.push(p2p.isend(&world, m.dst, m.tag, payload(seed, m)));
            next_send += 1;
        } else {
            let r = recvs[next_recv];
            // Past `cap`, a guard: a truncated request's buffer has none,
            // its length is the receive's capacity.
            let mut buf = vec![GUARD_BYTE; r.cap + GUARD];
            if next_send == sends.len() && rng.one_in(3) {
                let result = match p2p.recv(&world, r.source, r.tag, &mut buf[..r.cap]) {
                    Ok(st) => Ok((buf, st)),
                    Err(e) => Err((e, Some(buf))),
                };
                blocking.push((next_recv, result));
            } else {
                let expected = mine[predicted[next_recv]].len;
                if r.cap < expected {
                    buf.truncate(r.cap);
                }
                recv_reqs.push((next_recv, p2p.irecv(&world, r.source, r.tag, buf)));
            }
            next_recv += 1;
        }
        if rng.one_in(4) {
            p2p.progress().map_err(fail("progress"))?;
        }
        // Now and then, test a pending receive and finish it if done.
        if !recv_reqs.is_empty() && rng.one_in(5) {
            let k = rng.below(recv_reqs.len() as u64) as usize;
            if p2p.test(&recv_reqs[k].1).map_err(fail("test"))? {
                let (j, req) = recv_reqs.swap_remove(k);
                let result = p2p.wait(req).map_err(|f| (f.error, f.buffer));
                blocking.push((j, result));
            }
        }
    }
    let (indexes, reqs): (Vec<usize>, Vec<_>) = recv_reqs.into_iter().unzip();
    let waited = p2p
        .waitall(reqs)
        .into_iter()
        .map(|r| r.map_err(|f| (f.error, f.buffer)));
    let mut results: Vec<_> = indexes.into_iter().zip(waited).chain(blocking).collect();
    results.sort_by_key(|(j, _)| *j);
    for (j, result) in results {
        let (r, m) = (recvs[j], mine[predicted[j]]);
        let what = format!(
            "seed {seed}: receive {j} ({:?}, {:?}, {} bytes) expecting message {} of rank {} (tag {}, {} bytes)",
            r.source, r.tag, r.cap, m.id, m.src, m.tag, m.len
        );
        let want = payload(seed, &m);
        let buf = match result {
            Ok((buf, st)) if m.len <= r.cap => {
                check_status(&what, st, m.src, m.tag, m.len)?;
                buf
            }
            Ok((_, st)) => return Err(format!("{what}: not truncated: {st:?}")),
            Err((P2pError::Truncated { status, sent }, buf)) if m.len > r.cap => {
                check_status(&what, status, m.src, m.tag, r.cap)?;
                if sent != m.len as u64 {
                    return Err(format!("{what}: truncation reports {sent} bytes sent"));
                }
                buf.ok_or_else(|| format!("{what}: the buffer did not come back"))?
            }
            Err((e, _)) => return Err(format!("{what}: {e}")),
        };
        let n = m.len.min(r.cap);
        if buf.get(..n) != Some(&want[..n]) {
            return Err(format!("{what}: the bytes received are not the message's"));
        }
        if buf[n..].iter().any(|&b| b != GUARD_BYTE) {
            return Err(format!("{what}: bytes past the message's were written"));
        }
    }
    for (k, r) in wait_all_ok(p2p, send_reqs, |k| {
        format!("seed {seed}: send of message {}", sends[k].id)
    })?
    .into_iter()
    .enumerate()
    {
        if r.1.count != sends[k].len {
            return Err(format!(
                "seed {seed}: send of message {} completed with count {}",
                sends[k].id, r.1.count
            ));
        }
    }
    c.barrier()?;
    Ok(Outcome::Passed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: usize, src: u32, tag: i32) -> Msg {
        Msg {
            id,
            src,
            dst: 0,
            tag,
            len: 1,
        }
    }

    fn recv(source: Source, tag: Tag) -> Recv {
        Recv {
            source,
            tag,
            cap: 1,
        }
    }

    #[test]
    fn a_named_source_takes_its_first_message_with_the_tag() {
        let msgs = [msg(0, 1, 5), msg(1, 1, 3), msg(2, 2, 3)];
        let recvs = [
            recv(Source::Rank(1), Tag::Tag(3)),
            recv(Source::Rank(1), Tag::Any),
            recv(Source::Any, Tag::Tag(3)),
        ];
        assert_eq!(model(&msgs, &recvs), Ok(vec![1, 0, 2]));
    }

    #[test]
    fn any_source_with_two_candidate_senders_is_refused() {
        let msgs = [msg(0, 1, 5), msg(1, 2, 5)];
        let recvs = [recv(Source::Any, Tag::Any), recv(Source::Any, Tag::Any)];
        assert_eq!(
            model(&msgs, &recvs),
            Err(ModelError::Ambiguous {
                index: 0,
                senders: (1, 2)
            })
        );
        // Once one sender's message is taken by name, the other is the
        // only candidate.
        let recvs = [recv(Source::Rank(2), Tag::Any), recv(Source::Any, Tag::Any)];
        assert_eq!(model(&msgs, &recvs), Ok(vec![1, 0]));
        let recvs = [recv(Source::Rank(3), Tag::Any)];
        assert_eq!(
            model(&msgs, &recvs),
            Err(ModelError::Unmatched { index: 0 })
        );
    }

    #[test]
    fn generated_orders_are_predictable_and_take_every_message_once() {
        for seed in 0..50 {
            for size in [1, 2, 3, 8] {
                let all = schedule(seed, size);
                assert_eq!(all.len(), PER_RANK * size as usize);
                for dst in 0..size {
                    let mine: Vec<Msg> = all.iter().filter(|m| m.dst == dst).copied().collect();
                    let (recvs, aims) = receives(seed, dst, &mine);
                    let predicted = model(&mine, &recvs).unwrap();
                    assert_eq!(predicted, aims, "seed {seed}, size {size}, rank {dst}");
                    let mut sorted = predicted.clone();
                    sorted.sort_unstable();
                    assert_eq!(sorted, (0..mine.len()).collect::<Vec<_>>());
                }
            }
        }
    }

    #[test]
    fn wildcards_and_truncations_are_generated() {
        let all = schedule(7, 4);
        let mut wild = 0;
        let mut short = 0;
        for dst in 0..4 {
            let mine: Vec<Msg> = all.iter().filter(|m| m.dst == dst).copied().collect();
            let (recvs, aims) = receives(7, dst, &mine);
            wild += recvs
                .iter()
                .filter(|r| r.source == Source::Any || r.tag == Tag::Any)
                .count();
            short += recvs
                .iter()
                .zip(&aims)
                .filter(|(r, &i)| r.cap < mine[i].len)
                .count();
        }
        assert!(
            wild > 10 && short > 3,
            "{wild} wildcards, {short} truncations"
        );
    }
}
