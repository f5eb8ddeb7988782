//! The `reregistration` case: a rendezvous sent again from the same
//! buffer registers nothing, one sent from memory that was unmapped and
//! mapped again at the same address is registered anew, and the receiver
//! gets the new contents.

use fireopal::memory::{LeavePinned, MonitorKind};
use fireopal::p2p::{Source, Tag};
use fireopal_abi::btl::BtlFlags;

use super::super::mapping::Mapping;
use super::{fail, key, pattern, Ctx, Outcome};

/// Large enough to take the rendezvous on every in-tree route to a peer.
const LEN: usize = 1 << 20;
const TAG: i32 = 950;

/// Each rank sends a rendezvous from a mapping to the next rank, sends
/// it again with other contents, then unmaps it, maps new memory at the
/// same address with other contents and sends again. The receives land in
/// one buffer. Where registrations stay cached after use, the second
/// round registers nothing on either side (the same buffers: cache hits
/// only); the third send must miss the cache (the first registration
/// went with the old memory); and each receive must hold what was sent.
pub(super) fn case_reregistration(c: &mut Ctx) -> Result<Outcome, String> {
    let world = c.world.clone();
    let (rank, size) = (c.rank, c.size);
    let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
    if c.eager.get(next as usize).is_none_or(|&e| LEN as u64 <= e) {
        c.barrier()?;
        return Ok(Outcome::NotApplicable(
            "the route to the next rank sends 1 MiB eagerly".into(),
        ));
    }
    // Only a rendezvous read with get registers the sender's memory, and
    // a route reads only from its `min_rdma_pipeline_size` up.
    let gets =
        c.rt.messenger().attributes(next).is_some_and(|a| {
            a.flags.contains(BtlFlags::GET) && LEN as u64 >= a.min_rdma_pipeline_size
        });
    let pipeline = c.rt.registry().params().str_value("p2p_rendezvous") == Some("pipeline");
    if !gets || pipeline {
        c.barrier()?;
        return Ok(Outcome::NotApplicable(
            "the rendezvous to the next rank is pipelined: nothing is registered".into(),
        ));
    }
    let data = |round: u64, who: u32| pattern(key(&[20, u64::from(who), round]), LEN);
    let mut map = Mapping::new(None, LEN)?;
    let mut landing = vec![0u8; LEN];
    let mut misses = Vec::new();
    for round in 0..3u64 {
        if round == 2 {
            let at = map.addr;
            drop(map);
            map = Mapping::new(Some(at), LEN)?;
        }
        map.fill(&data(round, rank));
        let p2p = c.rt.p2p();
        let recv = p2p.irecv(&world, Source::Rank(prev), Tag::Tag(TAG), landing);
        c.barrier()?;
        let before = c.rt.messenger().registration_stats().misses;
        let p2p = c.rt.p2p();
        p2p.send(&world, next, TAG, map.bytes())
            .map_err(fail(format_args!("round {round}: send to rank {next}")))?;
        let (got, status) = p2p
            .wait(recv)
            .map_err(|f| format!("round {round}: receive from rank {prev}: {}", f.error))?;
        if status.count != LEN || got != data(round, prev) {
            return Err(format!("round {round}: the receive holds other bytes"));
        }
        landing = got;
        c.barrier()?;
        misses.push(c.rt.messenger().registration_stats().misses - before);
    }
    let report = c.rt.messenger().memory_monitor();
    let cached = match report.leave_pinned {
        LeavePinned::Always => true,
        LeavePinned::Watched => report.active != MonitorKind::None,
        LeavePinned::Never => false,
    };
    if cached && misses[1] != 0 {
        return Err(format!(
            "sending again from the same buffer registered anew ({} misses; {report})",
            misses[1]
        ));
    }
    if misses[2] == 0 {
        return Err(format!(
            "the send from memory mapped again was served the registration of the unmapped memory ({report})"
        ));
    }
    Ok(Outcome::Passed)
}
