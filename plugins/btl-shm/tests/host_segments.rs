//! Memory files of the host (what the symmetric heap is) registered with
//! the transport: in-place sends and RDMA from inside them are read by the
//! peer through one cached mapping, a file that is unsealed or not whole
//! pages is refused, and unregistering tells the peer to drop its mapping.

mod common;

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use common::{progress_until, run, Ctx, Job};
use fireopal_abi::btl::{Access, Completion, MemRegion, RdmaOp, Transport};
use fireopal_abi::ErrorKind;
use fireopal_conformance::pattern::{fill, matches, seed};
use fireopal_conformance::Recorder;

const SEG_LEN: usize = (2 << 20) + 4096;
const MSG_LEN: usize = 600_000;

/// A memfd of `len` bytes mapped shared, unmapped on drop.
struct MemFile {
    fd: OwnedFd,
    base: *mut u8,
    len: usize,
}

impl MemFile {
    fn new(len: usize, sealed: bool) -> MemFile {
        // SAFETY: plain system calls on a descriptor created here; the
        // mapping is checked for failure before use.
        unsafe {
            let raw = libc::memfd_create(
                c"host-segment-test".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            );
            assert!(raw >= 0, "memfd_create");
            let fd = OwnedFd::from_raw_fd(raw);
            assert_eq!(libc::ftruncate(raw, len as libc::off_t), 0);
            if sealed {
                let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
                assert_eq!(libc::fcntl(raw, libc::F_ADD_SEALS, seals), 0);
            }
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            );
            assert_ne!(base, libc::MAP_FAILED, "mmap");
            MemFile {
                fd,
                base: base.cast(),
                len,
            }
        }
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `len` bytes, read-write, owned by `self`.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.len) }
    }

    fn region(&self, offset: usize, len: usize) -> MemRegion {
        assert!(offset + len <= self.len);
        // SAFETY: inside the mapping, which outlives every use in the test.
        unsafe { MemRegion::new(self.base.add(offset), len) }
    }
}

impl Drop for MemFile {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

fn owner(ctx: &mut Ctx) -> Result<String, String> {
    let mut sink = Recorder::default();
    let unsealed = MemFile::new(SEG_LEN, false);
    match ctx
        .module
        .register_segment(unsealed.fd.as_fd(), unsealed.region(0, SEG_LEN))
    {
        Err(e) if e.kind == ErrorKind::INVALID_ARGUMENT && e.message.contains("sealed") => {}
        other => return Err(format!("unsealed file accepted or wrong error: {other:?}")),
    }
    let ragged = MemFile::new(SEG_LEN + 123, true);
    match ctx
        .module
        .register_segment(ragged.fd.as_fd(), ragged.region(0, SEG_LEN))
    {
        Err(e) if e.kind == ErrorKind::INVALID_ARGUMENT && e.message.contains("pages") => {}
        other => return Err(format!("file of part of a page accepted: {other:?}")),
    }
    let mut file = MemFile::new(SEG_LEN, true);
    let id = ctx
        .module
        .register_segment(file.fd.as_fd(), file.region(0, SEG_LEN))
        .map_err(|e| e.to_string())?;
    // Two in-place sends from different places of the file.
    for (round, offset) in [(0u32, 4096usize), (1, SEG_LEN - MSG_LEN)] {
        fill(
            &mut file.bytes()[offset..offset + MSG_LEN],
            seed(0, 1, round.into()),
        );
        let region = file.region(offset, MSG_LEN);
        // SAFETY: the bytes stay untouched until the completion below.
        let c = unsafe {
            ctx.module
                .send_in_place(1, 3, &[round as u8], region, u64::from(round))
        }
        .map_err(|e| e.to_string())?;
        if c != Completion::Pending {
            return Err("in-place send from the file was not a rendezvous".into());
        }
        progress_until(&mut ctx.module, &mut sink, Duration::from_secs(60), |s| {
            s.sends.contains_key(&u64::from(round))
        })?;
        ctx.barrier();
    }
    // A registration inside the file: the peer reads it with `get`.
    fill(&mut file.bytes()[100..100 + MSG_LEN], seed(0, 1, 7));
    let key = ctx
        .module
        .register_mem(file.region(100, MSG_LEN), Access::REMOTE_READ)
        .map_err(|e| e.to_string())?;
    let mut msg = (file.base as u64 + 100).to_le_bytes().to_vec();
    msg.extend_from_slice(&key.remote_key);
    ctx.allgather(&msg);
    ctx.barrier();
    ctx.module
        .unregister_segment(id)
        .map_err(|e| e.to_string())?;
    if ctx.module.unregister_segment(id).is_ok() {
        return Err("a segment was unregistered twice".into());
    }
    while !ctx.module.is_quiet() {
        ctx.module.progress(&mut sink).map_err(|e| e.to_string())?;
    }
    ctx.barrier();
    Ok(format!("staged {}", ctx.module.counters().rndv_staged))
}

fn reader(ctx: &mut Ctx) -> Result<String, String> {
    let mut sink = Recorder::default();
    for round in 0..2usize {
        progress_until(&mut ctx.module, &mut sink, Duration::from_secs(60), |s| {
            s.delivered.len() > round
        })?;
        let m = &sink.delivered[round];
        if (m.peer, m.tag, m.header.as_slice()) != (0, 3, &[round as u8][..])
            || m.payload.len() != MSG_LEN
            || !matches(&m.payload, seed(0, 1, round as u64))
        {
            return Err(format!("message {round} is wrong"));
        }
        while !ctx.module.is_quiet() {
            ctx.module.progress(&mut sink).map_err(|e| e.to_string())?;
        }
        ctx.barrier();
    }
    let all = ctx.allgather(&[]);
    let msg = &all[0];
    let addr = u64::from_le_bytes(msg[..8].try_into().map_err(|_| "short message")?);
    let mut got = vec![0u8; MSG_LEN];
    // SAFETY: `got` outlives the operation (waited for below).
    let local = unsafe { MemRegion::new(got.as_mut_ptr(), got.len()) };
    let op = RdmaOp {
        peer: 0,
        local,
        local_registration: u64::MAX,
        remote_addr: addr,
        remote_key: msg[8..].into(),
        cookie: 9,
    };
    let c = ctx.module.get(&op).map_err(|e| e.to_string())?;
    if c == Completion::Pending {
        progress_until(&mut ctx.module, &mut sink, Duration::from_secs(60), |s| {
            !s.rdma.is_empty()
        })?;
    }
    if !matches(&got, seed(0, 1, 7)) {
        return Err("get from the registered file returned wrong bytes".into());
    }
    let before = ctx.module.mapping_stats();
    ctx.barrier();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while ctx.module.counters().unmaps_received == 0 && std::time::Instant::now() < deadline {
        ctx.module.progress(&mut sink).map_err(|e| e.to_string())?;
    }
    let c = ctx.module.counters();
    let after = ctx.module.mapping_stats();
    ctx.barrier();
    Ok(format!(
        "mapped {} cma {} rdma mapped {}; misses {} hits {}; unmaps {} invalidations {}",
        c.rndv_mapped,
        c.rndv_cma,
        c.rdma_mapped,
        before.misses,
        before.hits,
        c.unmaps_received,
        after.invalidations
    ))
}

fn body(ctx: &mut Ctx) -> Result<String, String> {
    if ctx.rank == 0 {
        owner(ctx)
    } else {
        reader(ctx)
    }
}

#[test]
fn registered_memory_files_are_read_through_one_cached_mapping() {
    let out = run(Job::default(), body);
    eprintln!("{out:?}");
    assert_eq!(out[0], "staged 0");
    // Three transfers from one file: one mapping, then hits; the unmap
    // notice after unregistering drops it.
    assert_eq!(
        out[1],
        "mapped 2 cma 0 rdma mapped 1; misses 1 hits 2; unmaps 1 invalidations 1"
    );
}
