//! Cases on memory a module reads or writes after the call returns:
//! `put`/`get` on registrations, their checks, and `send_in_place`.

// The cases lend buffers to modules through `MemRegion::new`, as the host
// does.
#![allow(unsafe_code)]

use fireopal_abi::btl::{
    Access, BtlComponentImpl, BtlFlags, Completion, MemRegion, Rank, RdmaOp, Transport,
};
use fireopal_abi::PluginError;

use super::Outcome;
use crate::job::{ensure, Failure, Job, Setup};
use crate::pattern::{fill, matches, pattern};

/// Bytes of the target window of the `put`/`get` cases.
const WINDOW: usize = 5 << 20;

fn region(buf: &mut [u8]) -> MemRegion {
    // SAFETY: every buffer lent here outlives the operations and
    // registrations that use it (each case waits for completions and
    // deregisters before its buffers drop), and the case does not touch it
    // while an operation on it is in flight.
    unsafe { MemRegion::new(buf.as_mut_ptr(), buf.len()) }
}

/// Which RDMA operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Put,
    Get,
}

/// Starts `op` and waits for it: the first completion's status, or the
/// call's own error. `Done` must not be followed by a completion.
fn rdma<M: Transport>(
    job: &mut Job<M>,
    from: usize,
    which: Op,
    op: &RdmaOp<'_>,
) -> Result<Result<(), PluginError>, Failure> {
    let m = &mut job.procs[from].module;
    let started = match which {
        Op::Put => m.put(op),
        Op::Get => m.get(op),
    };
    match started {
        Err(e) => Ok(Err(e)),
        Ok(Completion::Done) => {
            job.settle(8)?;
            ensure(!job.procs[from].rec.rdma.contains_key(&op.cookie), || {
                format!("{which:?} {} answered Done and then completed", op.cookie)
            })?;
            Ok(Ok(()))
        }
        Ok(Completion::Pending) => {
            job.drive("an rdma completion", |j| {
                j.procs[from].rec.rdma.contains_key(&op.cookie)
            })?;
            let rec = &job.procs[from].rec;
            ensure(rec.repeated_completion().is_none(), || {
                format!("{which:?} {} completed twice", op.cookie)
            })?;
            Ok(rec.rdma[&op.cookie][0].clone())
        }
    }
}

/// The local registration an operation on `buf` needs, if the module
/// wants one.
fn local_registration<M: Transport>(
    job: &mut Job<M>,
    rank: usize,
    buf: &mut [u8],
) -> Result<Option<u64>, Failure> {
    if !job.procs[rank]
        .attributes
        .flags
        .contains(BtlFlags::NEEDS_LOCAL_REGISTRATION)
    {
        return Ok(None);
    }
    let reg = job.procs[rank]
        .module
        .register_mem(region(buf), Access::LOCAL_READ | Access::LOCAL_WRITE)
        .map_err(|e| Failure(format!("local registration: {e}")))?;
    Ok(Some(reg.id))
}

/// Where an operation goes: the peer, the address in its memory, and
/// the remote key of the registration there.
#[derive(Debug, Clone, Copy)]
struct Remote<'k> {
    peer: usize,
    addr: u64,
    key: &'k [u8],
}

/// `which` between `local` and `remote`, with the local registration the
/// module wants made around it; the operation's status.
fn transfer<M: Transport>(
    job: &mut Job<M>,
    from: usize,
    which: Op,
    local: &mut [u8],
    remote: Remote<'_>,
    cookie: u64,
) -> Result<Result<(), PluginError>, Failure> {
    let reg = local_registration(job, from, local)?;
    let op = RdmaOp {
        peer: remote.peer as Rank,
        local: region(local),
        local_registration: reg.unwrap_or(u64::MAX),
        remote_addr: remote.addr,
        remote_key: remote.key.into(),
        cookie,
    };
    let status = rdma(job, from, which, &op)?;
    if let Some(id) = reg {
        let _ = job.procs[from].module.deregister_mem(id);
    }
    Ok(status)
}

/// `put` and `get` of 0 B to 4 MiB at odd offsets of a registered window
/// move exactly the bytes asked for.
pub(super) fn put_get<C: BtlComponentImpl>(setup: &Setup) -> Result<Outcome, Failure> {
    let mut job = Job::<C::Module>::connected::<C>(setup)?;
    let (from, to) = job.pair()?;
    let flags = job.procs[from].attributes.flags;
    let (can_put, can_get) = (flags.contains(BtlFlags::PUT), flags.contains(BtlFlags::GET));
    if !can_put && !can_get {
        return Ok(Outcome::NotApplicable(
            "the module offers neither put nor get".into(),
        ));
    }
    let mut target = pattern(77, WINDOW);
    let mut model = target.clone();
    let base = target.as_ptr() as u64;
    let window = job.procs[to]
        .module
        .register_mem(
            region(&mut target),
            Access::REMOTE_READ | Access::REMOTE_WRITE,
        )
        .map_err(|e| Failure(format!("registering the target window: {e}")))?;
    let key = window.remote_key.to_vec();
    ensure(
        key.len() == job.procs[from].attributes.registration_handle_size as usize,
        || {
            format!(
                "remote key of {} bytes, attributes say {}",
                key.len(),
                job.procs[from].attributes.registration_handle_size
            )
        },
    )?;
    let at = |offset: usize| Remote {
        peer: to,
        addr: base + offset as u64,
        key: &key,
    };
    let mut cookie = 0;
    for (offset, len) in [
        (0usize, 0usize),
        (3, 1),
        (100, 4000),
        (5000, 200_000),
        (7, (1 << 20) + 5),
        (1 << 20, 4 << 20),
    ] {
        let mut src = pattern(1000 + cookie, len);
        if can_put {
            cookie += 1;
            transfer(&mut job, from, Op::Put, &mut src, at(offset), cookie)?
                .map_err(|e| Failure(format!("put of {len} bytes at {offset}: {e}")))?;
            model[offset..offset + len].copy_from_slice(&src);
            ensure(target == model, || {
                format!("put of {len} bytes at {offset} wrote other bytes, or outside its range")
            })?;
        }
        if can_get {
            cookie += 1;
            let mut back = vec![0u8; len];
            transfer(&mut job, from, Op::Get, &mut back, at(offset), cookie)?
                .map_err(|e| Failure(format!("get of {len} bytes at {offset}: {e}")))?;
            ensure(back[..] == target[offset..offset + len], || {
                format!("get of {len} bytes at {offset} read other bytes")
            })?;
        }
    }
    job.procs[to]
        .module
        .deregister_mem(window.id)
        .map_err(|e| Failure(format!("deregistering the window: {e}")))?;
    job.check_clean()?;
    Ok(Outcome::Passed)
}

/// A wrong key, a range past the registration and a write to memory
/// registered for reads only each fail the operation (at the call or in
/// its completion) and touch nothing.
///
/// A key used after its deregistration is not checked: a transport whose
/// `put` reaches the target's memory without the target's help (shm's
/// single copy) cannot know of it, and the host never uses one.
pub(super) fn checks<C: BtlComponentImpl>(setup: &Setup) -> Result<Outcome, Failure> {
    let mut job = Job::<C::Module>::connected::<C>(setup)?;
    let (from, to) = job.pair()?;
    let flags = job.procs[from].attributes.flags;
    if !flags.contains(BtlFlags::PUT) {
        return Ok(Outcome::NotApplicable("the module offers no put".into()));
    }
    const LEN: usize = 4096;
    let mut readable = vec![0xeeu8; LEN];
    let r_base = readable.as_ptr() as u64;
    let target = &mut job.procs[to].module;
    let read_only = target
        .register_mem(region(&mut readable), Access::REMOTE_READ)
        .map_err(|e| Failure(format!("registering: {e}")))?;
    let mut forged = read_only.remote_key.to_vec();
    for b in &mut forged {
        *b = b.wrapping_add(0x3b);
    }
    let mut src = vec![0x11u8; 256];
    let tries: [(&str, &[u8], u64, usize); 4] = [
        ("a forged key", &forged, r_base, 64),
        ("an empty key", &[], r_base, 64),
        (
            "a range past the registration",
            &read_only.remote_key,
            r_base + LEN as u64 - 100,
            256,
        ),
        (
            "a write to read-only memory",
            &read_only.remote_key,
            r_base,
            64,
        ),
    ];
    for (i, (what, key, addr, len)) in tries.into_iter().enumerate() {
        let remote = Remote {
            peer: to,
            addr,
            key,
        };
        let status = transfer(
            &mut job,
            from,
            Op::Put,
            &mut src[..len],
            remote,
            100 + i as u64,
        )?;
        ensure(status.is_err(), || format!("a put with {what} succeeded"))?;
        ensure(readable.iter().all(|&b| b == 0xee), || {
            format!("a put with {what} changed the target's memory")
        })?;
    }
    // The module is still usable after the refusals.
    if flags.contains(BtlFlags::GET) {
        let mut back = vec![0u8; 64];
        let remote = Remote {
            peer: to,
            addr: r_base,
            key: &read_only.remote_key,
        };
        transfer(&mut job, from, Op::Get, &mut back, remote, 200)?
            .map_err(|e| Failure(format!("a get after the refusals: {e}")))?;
        ensure(back.iter().all(|&b| b == 0xee), || {
            "a get read other bytes".into()
        })?;
    }
    let _ = job.procs[to].module.deregister_mem(read_only.id);
    Ok(Outcome::Passed)
}

/// `send_in_place` from ordinary memory, and from a transfer buffer where
/// the module offers them: the payload arrives intact and the send
/// completes once.
pub(super) fn in_place<C: BtlComponentImpl>(setup: &Setup) -> Result<Outcome, Failure> {
    let mut job = Job::<C::Module>::connected::<C>(setup)?;
    let (from, to) = job.pair()?;
    let a = job.procs[from].attributes;
    if !a.flags.contains(BtlFlags::SEND_IN_PLACE) {
        return Ok(Outcome::NotApplicable(
            "the module does not send in place".into(),
        ));
    }
    let len = a.max_send_size.saturating_sub(16).min(1 << 20) as usize;
    let mut payload = pattern(31, len);
    let mut expected = 1;
    let mut pending = Vec::new();
    let first = job.procs[from]
        .module
        .send_in_place(to as Rank, 7, b"user", region(&mut payload), 1)
        .map_err(|e| Failure(format!("send_in_place of {len} bytes: {e}")))?;
    if first == Completion::Pending {
        pending.push(1);
    }
    let mut buffer = None;
    if a.flags.contains(BtlFlags::TRANSFER_BUFFERS) {
        let m = &mut job.procs[from].module;
        let tb = m
            .alloc_transfer_buffer(len)
            .map_err(|e| Failure(format!("alloc_transfer_buffer({len}): {e}")))?;
        ensure(tb.region.len() >= len, || {
            format!("a transfer buffer of {} bytes for {len}", tb.region.len())
        })?;
        // SAFETY: the module lent `tb.region` to this process for writing
        // until it is freed; nothing else uses it yet.
        let bytes = unsafe { std::slice::from_raw_parts_mut(tb.region.as_ptr(), len) };
        fill(bytes, 32);
        // SAFETY: the first `len` bytes of a live transfer buffer.
        let from_buffer = unsafe { MemRegion::new(tb.region.as_ptr(), len) };
        let c = m
            .send_in_place(to as Rank, 7, b"buffer", from_buffer, 2)
            .map_err(|e| Failure(format!("send_in_place from a transfer buffer: {e}")))?;
        if c == Completion::Pending {
            pending.push(2);
        }
        buffer = Some(tb.id);
        expected += 1;
    }
    job.drive("the in-place messages", |j| {
        j.procs[to].rec.count_from(from as Rank) >= expected
    })?;
    job.drive("their completions", |j| {
        pending
            .iter()
            .all(|c| j.procs[from].rec.sends.contains_key(c))
    })?;
    let got: Vec<_> = job.procs[to].rec.from(from as Rank).collect();
    ensure(
        got[0].header == b"user" && got[0].payload.len() == len && matches(&got[0].payload, 31),
        || "the message sent in place from ordinary memory arrived changed".into(),
    )?;
    if expected == 2 {
        ensure(
            got[1].header == b"buffer" && matches(&got[1].payload, 32),
            || "the message sent from a transfer buffer arrived changed".into(),
        )?;
    }
    ensure(matches(&payload, 31), || {
        "send_in_place wrote into its payload".into()
    })?;
    if let Some(id) = buffer {
        job.procs[from]
            .module
            .free_transfer_buffer(id)
            .map_err(|e| Failure(format!("free_transfer_buffer: {e}")))?;
    }
    job.check_clean()?;
    for c in &pending {
        if let Some(Err(e)) = job.procs[from].rec.send_status(*c) {
            return Err(Failure(format!("in-place send {c} failed: {e}")));
        }
    }
    Ok(Outcome::Passed)
}
