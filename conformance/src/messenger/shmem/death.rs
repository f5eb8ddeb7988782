//! The `pe-death` case: a PE dies in the middle of one-sided operations,
//! and every other PE must get an error naming it, not hang.

use std::time::Instant;

use fireopal::p2p::{Communicator, P2pError, Source, Tag};
use fireopal::shmem::{PathKind, ShmemError};

use super::{err, Ctx, Outcome, DEATH_LIMIT};
use crate::messenger::p2p::meet;

/// Bytes the dying PE leaves in flight to PE 0.
const IN_FLIGHT: usize = 1 << 20;
/// Each survivor tells the dying PE with this that it is ready.
const TAG_READY: i32 = 910;

/// The PE an error blames, if it names one: seen failed by this PE, or
/// by another that said so in a barrier.
fn blamed(e: &ShmemError) -> Option<u32> {
    match e {
        ShmemError::PeerFailed { pe, .. } => Some(*pe),
        ShmemError::BarrierAborted { failed, .. } => Some(*failed),
        _ => None,
    }
}

/// The last PE starts a megabyte's put to PE 0 and an atomic on every
/// other PE, and leaves at once, as a crashed PE would, while the others
/// keep fetching from it. Each survivor's fetching atomics on it (when
/// they go through the transports: a mapped heap outlives its process)
/// and its next barrier must fail naming it, and so must a put after
/// that. The job is one PE short afterwards, so this case runs last.
///
/// The survivors then meet through point-to-point messages on a
/// communicator of their own, so that none leaves (which its peers would
/// see as a second death) before every one has seen the first.
pub(super) fn case_pe_death(c: &mut Ctx) -> Result<Outcome, String> {
    let n = c.rt.size();
    if n < 2 {
        return Ok(Outcome::NotApplicable("needs 2 PEs".into()));
    }
    let victim = n - 1;
    let world = c.rt.world();
    let stay = (c.rt.rank() != victim).then_some(0);
    let survivors =
        c.rt.p2p()
            .split(&world, stay, 0)
            .map_err(|e: P2pError| format!("split: {e}"))?;
    survive(c, victim, &world)?;
    if let Some(survivors) = survivors {
        meet(c.rt.p2p(), &survivors)?;
    }
    Ok(Outcome::Passed)
}

/// The case on one PE, up to the survivors' meeting.
fn survive(c: &mut Ctx, victim: u32, world: &Communicator) -> Result<(), String> {
    let p2p_err = |what: &'static str| move |e: P2pError| format!("{what}: {e}");
    let (area, word) = {
        let mut sh = c.rt.shmem();
        let area = sh.calloc(IN_FLIGHT, 1).map_err(err("calloc"))?;
        let word = sh.calloc(1, 8).map_err(err("calloc"))?.cast::<u64>();
        (area, word)
    };
    // The victim dies only once every survivor is past the allocations'
    // barrier: a dead process's connections are reset, and a reset drops
    // what the peer had not read yet, such as its barrier notices.
    if c.rt.rank() == victim {
        for _ in 0..victim {
            c.rt.p2p()
                .recv(world, Source::Any, Tag::Tag(TAG_READY), &mut [])
                .map_err(p2p_err("ready"))?;
        }
    } else {
        c.rt.p2p()
            .send(world, victim, TAG_READY, &[])
            .map_err(p2p_err("ready"))?;
    }
    let mut sh = c.rt.shmem();
    if sh.my_pe() == victim {
        let bytes = vec![0x5Au8; IN_FLIGHT];
        // SAFETY: `bytes` outlives this process, which ends before any
        // quiet.
        #[allow(unsafe_code)]
        unsafe { sh.put_nbi(0, area, bytes.as_ptr(), IN_FLIGHT) }.map_err(err("put_nbi"))?;
        for pe in 0..victim {
            sh.atomic_add(pe, word, 1u64).map_err(err("add"))?;
        }
        std::mem::forget(bytes);
        c.leave = true;
        return Ok(());
    }
    let remote = sh.path_kind(victim).map_err(err("path"))? == PathKind::Remote;
    if remote {
        // Until the victim is gone its handler answers; bounded by the
        // stall limit once it is.
        let start = Instant::now();
        loop {
            match sh.atomic_fetch_add(victim, word, 1u64) {
                Ok(_) if start.elapsed() > DEATH_LIMIT => {
                    return Err(format!("PE {victim} still answers after {DEATH_LIMIT:?}"))
                }
                Ok(_) => continue,
                Err(e) if blamed(&e) == Some(victim) => break,
                Err(e) => {
                    return Err(format!(
                        "fetch_add on the dead PE failed without naming it: {e}"
                    ))
                }
            }
        }
    }
    // Survivors whose barrier partner is another survivor stop too: the
    // barrier fails on any dead PE.
    match sh.barrier_all() {
        Ok(()) => return Err("a barrier with a dead PE completed".into()),
        Err(e) if blamed(&e) == Some(victim) => {}
        Err(e) => {
            return Err(format!(
                "the barrier failed without naming the dead PE: {e}"
            ))
        }
    }
    if remote {
        match sh.put(victim, word, &[5u64]) {
            Err(e) if blamed(&e) == Some(victim) => {}
            other => return Err(format!("a put to the dead PE: {other:?}")),
        }
    }
    Ok(())
}
