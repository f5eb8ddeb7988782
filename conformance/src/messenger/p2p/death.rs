//! The `peer-death` case: a rank dies in the middle of two rendezvous,
//! and every request waiting on it must end with an error naming it.

use fireopal::p2p::{Communicator, P2p, P2pError, Source, Tag};

use super::{fail, key, pattern, Ctx, Outcome};

/// Large enough to take the rendezvous on every in-tree route.
const LEN: usize = 1 << 20;
const TAG: i32 = 900;
/// The dying rank waits for this before it announces and leaves.
const TAG_GO: i32 = 901;
/// The ranks that stay meet with this at the end.
const TAG_MEET: i32 = 902;

/// The world rank an error blames, if it names one.
fn blamed(e: &P2pError) -> Option<u32> {
    match e {
        P2pError::PeerFailed { peer, .. }
        | P2pError::RemoteRead { peer, .. }
        | P2pError::ReadRefused { peer }
        | P2pError::Protocol { peer, .. } => Some(*peer),
        _ => None,
    }
}

/// The last rank, once rank 0 has read everything it needs from it,
/// announces a rendezvous to rank 0 and leaves at once, as a crashed rank
/// would (no finalize, no destructors), while rank 0 has a receive from
/// it and a rendezvous send to it outstanding. Rank 0's
/// send must fail naming it; its receive either read the data before
/// the death (then the bytes must be right) or fails naming it; a later
/// send to it fails at once. The job is one rank short afterwards, so
/// this case runs last.
pub(super) fn case_peer_death(c: &mut Ctx) -> Result<Outcome, String> {
    if c.size < 2 {
        return Ok(Outcome::NotApplicable("needs 2 ranks".into()));
    }
    let victim = c.size - 1;
    let world = c.world.clone();
    let data = pattern(key(&[9, u64::from(victim)]), LEN);
    // The ranks that stay meet again at the end, so that none leaves while
    // rank 0 still reads what it sent (a closed socket with unread bytes
    // is reset, and the reset drops what the peer had not read yet).
    let stay = (c.rank != victim).then_some(0);
    let survivors = c.rt.p2p().split(&world, stay, 0).map_err(fail("split"))?;
    c.barrier()?;
    if c.rank == victim {
        let p2p = c.rt.p2p();
        // Rank 0 says when it has read all it needs of this rank.
        p2p.recv(&world, Source::Rank(0), Tag::Tag(TAG_GO), &mut [])
            .map_err(fail("the go-ahead"))?;
        let announced = p2p.isend(&world, 0, TAG, data);
        // Leave with the rendezvous announced and never finished.
        std::mem::forget(announced);
        c.leave = true;
        return Ok(Outcome::Passed);
    }
    let survivors = survivors.ok_or("no communicator of the ranks that stay")?;
    if c.rank != 0 {
        return meet(c.rt.p2p(), &survivors).map(|()| Outcome::Passed);
    }
    let p2p = c.rt.p2p();
    p2p.send(&world, victim, TAG_GO, &[])
        .map_err(fail("the go-ahead"))?;
    let recv = p2p.irecv(&world, Source::Rank(victim), Tag::Tag(TAG), vec![0u8; LEN]);
    let send = p2p.isend(&world, victim, TAG, vec![7u8; LEN]);
    match p2p.wait(send) {
        Ok(_) => return Err("a rendezvous send to a rank that died completed".into()),
        Err(f) if blamed(&f.error) == Some(victim) => {}
        Err(f) => {
            return Err(format!(
                "the send to the dead rank failed without naming it: {}",
                f.error
            ))
        }
    }
    match p2p.wait(recv) {
        Ok((got, status)) => {
            if status.count != LEN || got != pattern(key(&[9, u64::from(victim)]), LEN) {
                return Err("a receive completed before the death with wrong bytes".into());
            }
        }
        Err(f) if blamed(&f.error) == Some(victim) => {}
        Err(f) => {
            return Err(format!(
                "the receive from the dead rank failed without naming it: {}",
                f.error
            ))
        }
    }
    match p2p.send(&world, victim, TAG, b"late") {
        Err(e) if blamed(&e) == Some(victim) => {}
        Err(e) => return Err(format!("a late send failed without naming the rank: {e}")),
        Ok(()) => return Err("a send to a rank known dead succeeded".into()),
    }
    if !p2p.failed_peers().iter().any(|(r, _)| *r == victim) {
        return Err("the dead rank is not among the failed peers".into());
    }
    meet(p2p, &survivors)?;
    Ok(Outcome::Passed)
}

/// Every member of `comm` waits for every other: its rank 0 hears from
/// each, then answers each.
pub(crate) fn meet(p2p: &mut P2p, comm: &Communicator) -> Result<(), String> {
    let tag = Tag::Tag(TAG_MEET);
    if comm.rank() == 0 {
        for r in 1..comm.size() {
            p2p.recv(comm, Source::Rank(r), tag, &mut [])
                .map_err(fail("meeting"))?;
        }
        for r in 1..comm.size() {
            p2p.send(comm, r, TAG_MEET, &[]).map_err(fail("meeting"))?;
        }
    } else {
        p2p.send(comm, 0, TAG_MEET, &[]).map_err(fail("meeting"))?;
        p2p.recv(comm, Source::Rank(0), tag, &mut [])
            .map_err(fail("meeting"))?;
    }
    Ok(())
}
