//! The `communicators` case: communicators made by dup, split and
//! create, checked by their ranks, sizes and translations and by traffic
//! on them; the errors of bad ranks, bad tags and freed communicators; and
//! the reuse of context ids once every process freed them.

use std::collections::BTreeSet;

use fireopal::p2p::{Communicator, P2pError, Source, Tag};
use fireopal_core::group::RankRange;

use super::{
    check_bytes, check_status, fail, guarded, key, pattern, wait_ok, wait_sends, Ctx, Outcome,
};

/// A ring over `comm`, whose rank `q` must be world rank `members[q]`:
/// checks the communicator's rank, size and translation, then sends each
/// member's world rank to the next member (eager and rendezvous) and
/// receives with wildcards, checking who the status names.
fn ring_check(c: &mut Ctx, comm: &Communicator, members: &[u32], what: &str) -> Result<(), String> {
    let size = members.len() as u32;
    let me = members
        .iter()
        .position(|&w| w == c.rank)
        .ok_or_else(|| format!("{what}: this rank is not a member"))? as u32;
    if comm.size() != size || comm.rank() != me {
        return Err(format!(
            "{what}: rank {} of {}, expected rank {me} of {size}",
            comm.rank(),
            comm.size()
        ));
    }
    for (q, &w) in members.iter().enumerate() {
        if comm.world_rank(q as u32) != Some(w) {
            return Err(format!(
                "{what}: rank {q} is world rank {:?}, expected {w}",
                comm.world_rank(q as u32)
            ));
        }
    }
    let (next, prev) = ((me + 1) % size, (me + size - 1) % size);
    let p2p = c.rt.p2p();
    let mut sends = Vec::new();
    for (k, len) in [(0u64, 4usize), (1, 100_000)] {
        let mut m = pattern(key(&[8, u64::from(c.rank), k]), len);
        m[..4].copy_from_slice(&c.rank.to_le_bytes());
        sends.push(p2p.isend(comm, next, 11, m));
    }
    for (k, len) in [(0u64, 4usize), (1, 100_000)] {
        let mut buf = guarded(len);
        let st = p2p
            .recv(comm, Source::Any, Tag::Any, &mut buf)
            .map_err(fail(format_args!("{what}: receive {k}")))?;
        let from = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let mut want = pattern(key(&[8, u64::from(members[prev as usize]), k]), len);
        want[..4].copy_from_slice(&members[prev as usize].to_le_bytes());
        let w = format!("{what}: message {k} (from world rank {from})");
        check_status(&w, st, prev, 11, len)?;
        check_bytes(&w, &buf, &want)?;
    }
    wait_sends(p2p, sends, what)
}

/// The errors of bad arguments on `comm`, a communicator smaller than
/// the world when it has two ranks or more: ranks past its end and
/// negative tags in sends, receives and probes, and a group outside it;
/// requests hand their buffers back.
fn bad_arguments(c: &mut Ctx, comm: &Communicator) -> Result<(), String> {
    let world = c.world.clone();
    let p2p = c.rt.p2p();
    let past = P2pError::NoSuchRank {
        rank: comm.size(),
        size: comm.size(),
    };
    let expect = |what: &str, got: Option<P2pError>, want: &P2pError| match got {
        Some(e) if e == *want => Ok(()),
        Some(e) => Err(format!("{what}: {e}, expected: {want}")),
        None => Err(format!("{what}: accepted, expected: {want}")),
    };
    expect(
        "a blocking send past the last rank",
        p2p.send(comm, comm.size(), 1, &[]).err(),
        &past,
    )?;
    let req = p2p.isend(comm, comm.size(), 1, vec![7u8; 3]);
    match p2p.wait(req) {
        Err(f) if f.error == past && f.buffer.as_deref() == Some(&[7u8; 3][..]) => {}
        other => return Err(format!("a request sending past the last rank: {other:?}")),
    }
    let req = p2p.irecv(comm, Source::Rank(comm.size()), Tag::Any, vec![9u8; 2]);
    match p2p.wait(req) {
        Err(f) if f.error == past && f.buffer.as_deref() == Some(&[9u8; 2][..]) => {}
        other => return Err(format!("a request receiving past the last rank: {other:?}")),
    }
    expect(
        "a send with tag -1",
        p2p.send(comm, 0, -1, &[]).err(),
        &P2pError::InvalidTag(-1),
    )?;
    expect(
        "a receive with tag -3",
        p2p.recv(comm, Source::Any, Tag::Tag(-3), &mut []).err(),
        &P2pError::InvalidTag(-3),
    )?;
    expect(
        "a probe past the last rank",
        p2p.probe(comm, Source::Rank(comm.size()), Tag::Any).err(),
        &past,
    )?;
    expect(
        "an iprobe past the last rank",
        p2p.iprobe(comm, Source::Rank(comm.size()), Tag::Any).err(),
        &past,
    )?;
    expect(
        "a probe with tag -2",
        p2p.probe(comm, Source::Any, Tag::Tag(-2)).err(),
        &P2pError::InvalidTag(-2),
    )?;
    if comm.size() < world.size() {
        // Collective over `comm`: every member refuses before agreeing.
        expect(
            "create with the world's group from a split",
            p2p.create(comm, world.group()).err(),
            &P2pError::NotASubgroup,
        )?;
    }
    Ok(())
}

/// dup, split (by parity, by a reversing key, with undefined colors),
/// create (strided and irregular groups), errors on bad ranks and freed
/// communicators, and the reuse of context ids once freed everywhere.
pub(super) fn case_communicators(c: &mut Ctx) -> Result<Outcome, String> {
    let (rank, size) = (c.rank, c.size);
    let world = c.world.clone();
    let all: Vec<u32> = (0..size).collect();
    let mut made: Vec<Communicator> = Vec::new();

    // dup: same tag on both; each receive gets its own communicator's.
    let dup = c.rt.p2p().dup(&world).map_err(fail("dup"))?;
    let taken = [world.context_id(), c.sync.context_id()];
    if taken.contains(&dup.context_id()) {
        return Err(format!(
            "dup took context id {}, already in use",
            dup.context_id()
        ));
    }
    {
        let (next, prev) = (c.next(), c.prev());
        let p2p = c.rt.p2p();
        let on_world = p2p.isend(&world, next, 9, b"world".to_vec());
        let on_dup = p2p.isend(&dup, next, 9, b"dup".to_vec());
        let mut buf = [0u8; 8];
        let st = p2p
            .recv(&dup, Source::Any, Tag::Any, &mut buf)
            .map_err(fail("receive on the dup"))?;
        check_status(&"receive on the dup", st, prev, 9, 3)?;
        if &buf[..3] != b"dup" {
            return Err("a receive on the dup took the world's message".into());
        }
        let st = p2p
            .recv(&world, Source::Rank(prev), Tag::Tag(9), &mut buf)
            .map_err(fail("receive on the world"))?;
        check_status(&"receive on the world", st, prev, 9, 5)?;
        if &buf[..5] != b"world" {
            return Err("a receive on the world took the dup's message".into());
        }
        wait_ok(p2p, on_world, &"send on the world")?;
        wait_ok(p2p, on_dup, &"send on the dup")?;
    }
    ring_check(c, &dup, &all, "dup")?;
    made.push(dup.clone());

    // split by parity, ordered by world rank.
    let parity = rank % 2;
    let par =
        c.rt.p2p()
            .split(&world, Some(parity), rank as i32)
            .map_err(fail("split by parity"))?
            .ok_or("split by parity gave no communicator")?;
    let same: Vec<u32> = all.iter().copied().filter(|r| r % 2 == parity).collect();
    ring_check(c, &par, &same, "split by parity")?;
    bad_arguments(c, &par)?;
    made.push(par);

    // split with a key that reverses the order.
    let rev =
        c.rt.p2p()
            .split(&world, Some(0), -(rank as i32))
            .map_err(fail("split by reversed key"))?
            .ok_or("split by reversed key gave no communicator")?;
    let reversed: Vec<u32> = all.iter().rev().copied().collect();
    ring_check(c, &rev, &reversed, "split by reversed key")?;
    made.push(rev);

    // split where odd ranks give no color.
    let color = (rank % 2 == 0).then_some(3);
    let evens =
        c.rt.p2p()
            .split(&world, color, 0)
            .map_err(fail("split with undefined colors"))?;
    match (evens, color) {
        (Some(e), Some(_)) => {
            let members: Vec<u32> = all.iter().copied().filter(|r| r % 2 == 0).collect();
            ring_check(c, &e, &members, "split with undefined colors")?;
            made.push(e);
        }
        (None, None) => {}
        (got, _) => {
            return Err(format!(
                "split with undefined colors: {got:?} for color {color:?}"
            ))
        }
    }

    // create from a strided group (every other rank) and an irregular one.
    let strided = world
        .group()
        .range_incl(&[RankRange::new(0, size as i32 - 1, 2)])
        .map_err(|e| format!("strided group: {e}"))?;
    let irregular_members: Vec<u32> = (0..size).rev().filter(|r| ![1, 2, 5].contains(r)).collect();
    let irregular = world
        .group()
        .incl(&irregular_members)
        .map_err(|e| format!("irregular group: {e}"))?;
    let strided_members: Vec<u32> = (0..size).step_by(2).collect();
    for (name, group, members) in [
        ("create from a strided group", strided, strided_members),
        (
            "create from an irregular group",
            irregular,
            irregular_members,
        ),
    ] {
        let made_here = c.rt.p2p().create(&world, &group).map_err(fail(name))?;
        match (made_here, members.contains(&rank)) {
            (Some(comm), true) => {
                ring_check(c, &comm, &members, name)?;
                made.push(comm);
            }
            (None, false) => {}
            (got, member) => {
                return Err(format!(
                    "{name}: {got:?} on a rank that is a member: {member}"
                ))
            }
        }
        c.barrier()?;
    }

    // Six calls made communicators, each taking the lowest context id
    // free on every rank of the world: the dup's and the five after it.
    let first = dup.context_id();
    let ids: BTreeSet<u32> = (first..first + 6).collect();
    if let Some(comm) = made.iter().find(|m| !ids.contains(&m.context_id())) {
        return Err(format!(
            "a communicator made took context id {}, expected one of {ids:?}",
            comm.context_id()
        ));
    }
    // Free everything; a freed communicator refuses calls.
    for comm in made {
        c.rt.p2p().free(comm).map_err(fail("free"))?;
    }
    let p2p = c.rt.p2p();
    match p2p.send(&dup, 0, 1, b"x") {
        Err(P2pError::FreedCommunicator) => {}
        other => return Err(format!("send on a freed communicator: {other:?}")),
    }
    match p2p.recv(&dup, Source::Any, Tag::Any, &mut []) {
        Err(P2pError::FreedCommunicator) => {}
        other => return Err(format!("receive on a freed communicator: {other:?}")),
    }
    // Every rank freed (or never kept) every id this case took: as many
    // dups take the same ids again, lowest first.
    let mut again = Vec::new();
    for _ in 0..ids.len() {
        again.push(p2p.dup(&world).map_err(fail("dup after free"))?);
    }
    let reused: BTreeSet<u32> = again.iter().map(Communicator::context_id).collect();
    if reused != ids {
        return Err(format!(
            "after freeing communicators with context ids {ids:?}, dups took {reused:?}"
        ));
    }
    let first = again.first().cloned();
    for comm in again {
        p2p.free(comm).map_err(fail("free"))?;
    }
    let last = p2p.dup(&world).map_err(fail("dup after free"))?;
    if Some(last.context_id()) != first.map(|f| f.context_id()) {
        return Err(format!(
            "a dup after freeing every dup took context id {}, not the lowest free {:?}",
            last.context_id(),
            ids.first()
        ));
    }
    ring_check(c, &last, &all, "dup reusing a context id")?;
    c.rt.p2p().free(last).map_err(fail("free"))?;
    c.barrier()?;
    Ok(Outcome::Passed)
}
