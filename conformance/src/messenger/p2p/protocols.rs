//! The `rendezvous-by-size` case: on a route that reads rendezvous
//! messages with `get` only from its `min_rdma_pipeline_size` up, a
//! message between the eager limit and that size is pipelined through
//! the route's sends (nothing is registered), and one of that size is
//! read by the receiver (the sender's buffer is registered). Both arrive
//! whole.

use fireopal::p2p::{Source, Tag};
use fireopal_abi::btl::BtlFlags;

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
