//! The `rendezvous-by-size` case: on a route that reads rendezvous
//! messages with `get` only from its `min_rdma_pipeline_size` up, a
//! message between the eager limit and that size is pipelined through
//! the route's sends (nothing is registered), and one of that size is
//! read by the receiver (the sender's buffer is registered). Both arrive
//! whole. The `rendezvous-put` case: a rendezvous matched while a read
//! from the same peer is in flight is put into the receive buffer.

use fireopal::p2p::{Source, Tag};
use fireopal_abi::btl::BtlFlags;
use fireopal_abi::param::ParamValue;

use super::{check_bytes, check_status, fail, guarded, key, pattern, Ctx, Outcome};

const TAG_PLAN: i32 = 960;
const TAG: i32 = 961;
/// Largest message this case sends.
const MAX_LEN: u64 = 16 << 20;

/// Rank 0 picks the two sizes from its route to rank 1 and tells rank 1,
/// so that both act on one plan; then sends one message of each size,
/// counting the registration cache's lookups around each send.
pub(super) fn case_rendezvous_by_size(c: &mut Ctx) -> Result<Outcome, String> {
    if c.size < 2 {
        return Ok(Outcome::NotApplicable("needs 2 ranks".into()));
    }
    let world = c.world.clone();
    c.barrier()?;
    let outcome = match c.rank {
        0 => {
            let plan = plan(c);
            let mut words = [0u8; 16];
            if let Some((piped, read)) = plan {
                words[..8].copy_from_slice(&piped.to_le_bytes());
                words[8..].copy_from_slice(&read.to_le_bytes());
            }
            c.rt.p2p()
                .send(&world, 1, TAG_PLAN, &words)
                .map_err(fail("the plan"))?;
            match plan {
                Some((piped, read)) => {
                    send_counted(c, piped as usize, false)?;
                    send_counted(c, read as usize, true)?;
                    Outcome::Passed
                }
                None => not_applicable(),
            }
        }
        1 => {
            let mut words = [0u8; 16];
            let p2p = c.rt.p2p();
            p2p.recv(&world, Source::Rank(0), Tag::Tag(TAG_PLAN), &mut words)
                .map_err(fail("the plan"))?;
            let word = |i: usize| {
                let mut w = [0u8; 8];
                w.copy_from_slice(&words[i * 8..i * 8 + 8]);
                u64::from_le_bytes(w) as usize
            };
            if word(0) == 0 {
                not_applicable()
            } else {
                for len in [word(0), word(1)] {
                    let what = format!("{len} bytes from rank 0");
                    let mut buf = guarded(len);
                    let status = p2p
                        .recv(&world, Source::Rank(0), Tag::Tag(TAG), &mut buf)
                        .map_err(fail(&what))?;
                    check_status(&what, status, 0, TAG, len)?;
                    check_bytes(&what, &buf, &pattern(key(&[30, len as u64]), len))?;
                }
                Outcome::Passed
            }
        }
        _ => Outcome::Passed,
    };
    c.barrier()?;
    Ok(outcome)
}

fn not_applicable() -> Outcome {
    Outcome::NotApplicable("the route from rank 0 to rank 1 reads every rendezvous, or none".into())
}

/// A pipelined size and a read size on the route to rank 1, when it reads
/// only from a size above its eager limit.
fn plan(c: &mut Ctx) -> Option<(u64, u64)> {
    let pipeline = c.rt.registry().params().str_value("p2p_rendezvous") == Some("pipeline");
    let eager = c.eager.get(1).copied()?;
    let a = c.rt.messenger().attributes(1)?;
    let min = a.min_rdma_pipeline_size;
    let reads = a.flags.contains(BtlFlags::GET) && !pipeline;
    (reads && min > eager.saturating_add(1) && min <= MAX_LEN)
        .then(|| (eager + (min - eager).div_ceil(2), min))
}

/// Sends `len` bytes to rank 1 and checks that the registration cache was
/// looked up (`reads`) or not.
fn send_counted(c: &mut Ctx, len: usize, reads: bool) -> Result<(), String> {
    let world = c.world.clone();
    let data = pattern(key(&[30, len as u64]), len);
    let lookups = |c: &mut Ctx| {
        let s = c.rt.messenger().registration_stats();
        s.hits + s.misses
    };
    let before = lookups(c);
    c.rt.p2p()
        .send(&world, 1, TAG, &data)
        .map_err(fail(format_args!("{len} bytes to rank 1")))?;
    let looked = lookups(c) - before;
    match (reads, looked) {
        (true, 0) => Err(format!(
            "{len} bytes, at the route's min_rdma_pipeline_size, registered nothing: not read by the receiver"
        )),
        (false, n) if n > 0 => Err(format!(
            "{len} bytes, under the route's min_rdma_pipeline_size, were registered ({n} lookups): not pipelined"
        )),
        _ => Ok(()),
    }
}

/// First and second message of the `rendezvous-put` case.
const TAG_READ: i32 = 962;
const TAG_PUT: i32 = 963;

/// The `rendezvous-put` case: on a route whose target serves reads over
/// the stream its sends take (tcp), a receiver with `p2p_rget_reads`
/// reads in flight from a peer has a further rendezvous of at least
/// `p2p_put_min` bytes put into its buffer by the sender.
///
/// Rank 0 sends two such messages to the last rank, which waits until
/// both have arrived (a probe of the second), then posts the two
/// receives back to back: the first starts a read, which cannot end
/// before the receiver next reads its socket, so the second is matched
/// with that read in flight and must be written. The receiver's
/// registration cache is looked up only for that write (a read
/// registers nothing at the receiver on such a route), and both buffers
/// must hold what was sent.
pub(super) fn case_rendezvous_put(c: &mut Ctx) -> Result<Outcome, String> {
    if c.size < 2 {
        return Ok(Outcome::NotApplicable("needs 2 ranks".into()));
    }
    let world = c.world.clone();
    c.barrier()?;
    // Rank 0 sizes the messages from its route to the last rank (on
    // another node in a job of several) and tells it.
    let last = c.size - 1;
    let len = match c.rank {
        0 => {
            let len = put_len(c, last).unwrap_or(0);
            c.rt.p2p()
                .send(&world, last, TAG_PLAN, &(len as u64).to_le_bytes())
                .map_err(fail("the plan"))?;
            len
        }
        r if r == last => {
            let mut word = [0u8; 8];
            c.rt.p2p()
                .recv(&world, Source::Rank(0), Tag::Tag(TAG_PLAN), &mut word)
                .map_err(fail("the plan"))?;
            usize::try_from(u64::from_le_bytes(word)).map_err(|_| "the plan's size".to_string())?
        }
        _ => {
            c.barrier()?;
            return Ok(Outcome::Passed);
        }
    };
    let data = |which: u64| pattern(key(&[31, which, len as u64]), len);
    let outcome = match (c.rank, len) {
        (_, 0) => Outcome::NotApplicable(
            "no rendezvous from rank 0 to the last rank is put by the sender: the route reads every one, has no put, or p2p_put_min or p2p_rget_reads is 0".into(),
        ),
        (0, _) => {
            let p2p = c.rt.p2p();
            let sends = vec![
                p2p.isend(&world, last, TAG_READ, data(0)),
                p2p.isend(&world, last, TAG_PUT, data(1)),
            ];
            for (i, r) in p2p.waitall(sends).into_iter().enumerate() {
                r.map_err(|f| format!("send {i} of {len} bytes to rank {last}: {}", f.error))?;
            }
            Outcome::Passed
        }
        _ => {
            let p2p = c.rt.p2p();
            p2p.probe(&world, Source::Rank(0), Tag::Tag(TAG_PUT))
                .map_err(fail("probe of the second message"))?;
            let lookups = |c: &mut Ctx| {
                let s = c.rt.messenger().registration_stats();
                s.hits + s.misses
            };
            let before = lookups(c);
            let p2p = c.rt.p2p();
            let recvs = vec![
                p2p.irecv(&world, Source::Rank(0), Tag::Tag(TAG_READ), guarded(len)),
                p2p.irecv(&world, Source::Rank(0), Tag::Tag(TAG_PUT), guarded(len)),
            ];
            let done = p2p.waitall(recvs);
            let looked = lookups(c) - before;
            for ((i, r), tag) in done.into_iter().enumerate().zip([TAG_READ, TAG_PUT]) {
                let what = format!("message {i} of {len} bytes from rank 0");
                let (buf, status) = r.map_err(|f| format!("{what}: {}", f.error))?;
                check_status(&what, status, 0, tag, len)?;
                check_bytes(&what, &buf, &data(i as u64))?;
            }
            if looked == 0 {
                return Err(format!(
                    "{len} bytes matched while a read was in flight registered nothing at the receiver: not put by the sender"
                ));
            }
            Outcome::Passed
        }
    };
    c.barrier()?;
    Ok(outcome)
}

/// The size of the `rendezvous-put` case's messages on the route to
/// `peer`, when it puts some: a rendezvous the route reads, of at least
/// `p2p_put_min` bytes.
fn put_len(c: &mut Ctx, peer: u32) -> Option<usize> {
    let params = c.rt.registry().params();
    let uint = |name: &str| match params.value(name) {
        Some(ParamValue::UInt(v) | ParamValue::Size(v)) => Some(*v),
        _ => None,
    };
    let (reads, put_min) = (uint("p2p_rget_reads")?, uint("p2p_put_min")?);
    let pipeline = params.str_value("p2p_rendezvous") == Some("pipeline");
    let eager = c.eager.get(peer as usize).copied()?;
    let a = c.rt.messenger().attributes(peer)?;
    let served = a
        .flags
        .contains(BtlFlags::GET | BtlFlags::PUT | BtlFlags::TARGET_SERVES_RDMA)
        && !a.flags.contains(BtlFlags::NEEDS_LOCAL_REGISTRATION);
    let len = put_min
        .max(eager.saturating_add(1))
        .max(a.min_rdma_pipeline_size);
    (served && !pipeline && reads > 0 && put_min > 0 && len <= MAX_LEN)
        .then(|| usize::try_from(len).ok())
        .flatten()
}
