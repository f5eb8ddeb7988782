//! Single copy between forked processes: put/get on registered memory
//! through each mechanism, in-place rendezvous sends, the mapping cache
//! (one mapping per segment, dropped when the owner unmaps), and a clean
//! decline of process_vm_readv where it is not permitted.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{progress_until, run, Ctx, Job};
use fireopal_abi::btl::{Access, Completion, MemRegion, RdmaOp, Transport};
use fireopal_abi::param::ParamValue;
use fireopal_abi::ErrorKind;
use fireopal_btl_shm::PARAM_SINGLE_COPY;
use fireopal_conformance::pattern::{fill, matches, seed};
use fireopal_conformance::Recorder;

const HEAP_LEN: usize = (1 << 20) + 123;
const BUF_LEN: usize = 1 << 20;

fn region(buf: &mut [u8]) -> MemRegion {
    // SAFETY: every buffer passed here outlives the operations and
    // registrations it is used for in these tests.
    unsafe { MemRegion::new(buf.as_mut_ptr(), buf.len()) }
}

fn u64_at(bytes: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
}

/// Rank 1 exposes heap memory, a transfer buffer and a read-only region;
/// rank 0 gets and puts through whatever mechanism the mode allows, and
/// checks the answers; rank 1 then checks what was put.
fn put_get(ctx: &mut Ctx) -> Result<String, String> {
    let mut sink = Recorder::default();
    let rw = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_READ | Access::LOCAL_WRITE;
    let mode = ctx.module.single_copy_status();
    if ctx.rank == 1 {
        let mut heap = vec![0u8; HEAP_LEN];
        fill(&mut heap, seed(1, 0, 100));
        let mut tb = ctx
            .module
            .alloc_transfer_buffer(BUF_LEN)
            .map_err(|e| e.to_string())?;
        fill(tb.as_mut_slice(), seed(1, 0, 200));
        let mut ro = vec![5u8; 4096];
        let mut gone = vec![6u8; 4096];
        let k_heap = ctx
            .module
            .register_mem(region(&mut heap), rw)
            .map_err(|e| e.to_string())?;
        let tb_region = region(tb.as_mut_slice());
        let k_tb = ctx
            .module
            .register_mem(tb_region, rw)
            .map_err(|e| e.to_string())?;
        let k_ro = ctx
            .module
            .register_mem(region(&mut ro), Access::REMOTE_READ)
            .map_err(|e| e.to_string())?;
        let k_gone = ctx
            .module
            .register_mem(region(&mut gone), rw)
            .map_err(|e| e.to_string())?;
        ctx.module
            .deregister_mem(k_gone.id)
            .map_err(|e| e.to_string())?;
        let mut addrs = Vec::new();
        for a in [
            heap.as_ptr() as u64,
            tb.as_ptr() as u64,
            ro.as_ptr() as u64,
            gone.as_ptr() as u64,
        ] {
            addrs.extend_from_slice(&a.to_le_bytes());
        }
        ctx.allgather(&addrs);
        for k in [&k_heap, &k_tb, &k_ro, &k_gone] {
            ctx.allgather(&k.remote_key);
        }
        // Serve emulated operations until rank 0 says it is done.
        progress_until(&mut ctx.module, &mut sink, Duration::from_secs(60), |s| {
            !s.delivered.is_empty()
        })?;
        let mut want = vec![0u8; HEAP_LEN];
        fill(&mut want, seed(1, 0, 100));
        fill(&mut want[77..77 + 300_000], seed(0, 1, 300));
        if heap != want {
            return Err("heap memory does not hold what was put".into());
        }
        if !matches(tb.as_slice(), seed(0, 1, 400)) {
            return Err("transfer buffer does not hold what was put".into());
        }
        if ro.iter().any(|&b| b != 5) {
            return Err("read-only memory changed".into());
        }
        ctx.barrier();
        return Ok(mode);
    }
    let addrs = ctx.allgather(&[]).swap_remove(1);
    let mut keys = Vec::new();
    for _ in 0..4 {
        keys.push(ctx.allgather(&[]).swap_remove(1));
    }
    let (a_heap, a_tb, a_ro, a_gone) = (
        u64_at(&addrs, 0),
        u64_at(&addrs, 1),
        u64_at(&addrs, 2),
        u64_at(&addrs, 3),
    );
    let mut pending = HashSet::new();
    let op = |pending: &mut HashSet<u64>,
              module: &mut fireopal_btl_shm::ShmTransport,
              put: bool,
              local: &mut [u8],
              remote: u64,
              key: &[u8],
              cookie: u64|
     -> Result<Completion, fireopal_abi::PluginError> {
        let op = RdmaOp {
            peer: 1,
            local: region(local),
            local_registration: u64::MAX,
            remote_addr: remote,
            remote_key: key.into(),
            cookie,
        };
        let c = if put {
            module.put(&op)
        } else {
            module.get(&op)
        }?;
        if c == Completion::Pending {
            pending.insert(cookie);
        }
        Ok(c)
    };
    let mut got_heap = vec![0u8; HEAP_LEN];
    let mut got_tb = vec![0u8; 100_000];
    let mut put_heap = vec![0u8; 300_000];
    fill(&mut put_heap, seed(0, 1, 300));
    let mut put_tb = vec![0u8; BUF_LEN];
    fill(&mut put_tb, seed(0, 1, 400));
    let m = &mut ctx.module;
    op(&mut pending, m, false, &mut got_heap, a_heap, &keys[0], 1).map_err(|e| e.to_string())?;
    op(
        &mut pending,
        m,
        false,
        &mut got_tb,
        a_tb + 4096 + 5,
        &keys[1],
        2,
    )
    .map_err(|e| e.to_string())?;
    // Gets and puts of overlapping memory have no order between them:
    // the puts start once the gets are done.
    let gets = pending.len();
    progress_until(m, &mut sink, Duration::from_secs(60), |s| {
        s.rdma.len() >= gets
    })?;
    op(
        &mut pending,
        m,
        true,
        &mut put_heap,
        a_heap + 77,
        &keys[0],
        3,
    )
    .map_err(|e| e.to_string())?;
    op(&mut pending, m, true, &mut put_tb, a_tb, &keys[1], 4).map_err(|e| e.to_string())?;
    // Refused at once: past the registration, or not granted.
    let mut small = vec![0u8; 16];
    match op(
        &mut pending,
        m,
        false,
        &mut small,
        a_heap + HEAP_LEN as u64 - 8,
        &keys[0],
        5,
    ) {
        Err(e) if e.kind == ErrorKind::INVALID_ARGUMENT => {}
        other => return Err(format!("get past the registration: {other:?}")),
    }
    match op(&mut pending, m, true, &mut small, a_ro, &keys[2], 6) {
        Err(e) if e.kind == ErrorKind::INVALID_ARGUMENT => {}
        other => return Err(format!("put to read-only memory: {other:?}")),
    }
    let mut ro_read = vec![0u8; 4096];
    op(&mut pending, m, false, &mut ro_read, a_ro, &keys[2], 7).map_err(|e| e.to_string())?;
    // A registration the owner dropped: only the emulated path asks the
    // owner, which refuses it.
    let emulated = !ctx
        .module
        .single_copy_status()
        .contains("process_vm_readv: on");
    let mut gone_read = vec![0u8; 64];
    if emulated {
        op(
            &mut pending,
            &mut ctx.module,
            false,
            &mut gone_read,
            a_gone,
            &keys[3],
            8,
        )
        .map_err(|e| e.to_string())?;
    }
    let want = pending.len();
    progress_until(&mut ctx.module, &mut sink, Duration::from_secs(60), |s| {
        s.rdma.len() >= want
    })?;
    for (cookie, statuses) in &sink.rdma {
        let [status] = statuses.as_slice() else {
            return Err(format!("{} completions of {cookie}", statuses.len()));
        };
        if !pending.contains(cookie) {
            return Err(format!("unexpected completion {cookie}"));
        }
        match (*cookie, status) {
            (8, Err(_)) => {}
            (8, Ok(())) => return Err("get from a dropped registration succeeded".into()),
            (_, Err(e)) => return Err(format!("operation {cookie} failed: {e}")),
            _ => {}
        }
    }
    if !matches(&got_heap, seed(1, 0, 100)) {
        return Err("get from heap memory returned wrong bytes".into());
    }
    let mut want_tb = vec![0u8; BUF_LEN];
    fill(&mut want_tb, seed(1, 0, 200));
    if got_tb != want_tb[4096 + 5..4096 + 5 + 100_000] {
        return Err("get from a transfer buffer returned wrong bytes".into());
    }
    if ro_read.iter().any(|&b| b != 5) {
        return Err("get of read-only memory returned wrong bytes".into());
    }
    ctx.module
        .send(1, 9, &[], b"done", 0)
        .map_err(|e| e.to_string())?;
    while !ctx.module.is_quiet() {
        ctx.module.progress(&mut sink).map_err(|e| e.to_string())?;
    }
    ctx.barrier();
    let c = ctx.module.counters();
    Ok(format!(
        "{mode}: mapped {}, cma {}, emulated {}",
        c.rdma_mapped, c.rdma_cma, c.rdma_emulated
    ))
}

fn with_mode(mode: &'static [(&'static str, ParamValue)]) -> Vec<String> {
    run(
        Job {
            params: mode,
            ..Job::default()
        },
        put_get,
    )
}

fn counts(out: &str) -> (u64, u64, u64) {
    let n = |what: &str| -> u64 {
        let at = out.find(what).expect("counter in output") + what.len();
        out[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|d| d.parse().ok())
            .expect("number")
    };
    (n("mapped "), n("cma "), n("emulated "))
}

#[test]
fn put_and_get_through_mappings_and_cma() {
    static MODE: [(&str, ParamValue); 0] = [];
    let out = with_mode(&MODE);
    eprintln!("{out:?}");
    // Transfer-buffer operations map the segment; heap ones use CMA.
    assert_eq!(counts(&out[0]), (2, 3, 0), "{}", out[0]);
}

#[test]
fn put_and_get_through_cma_only() {
    static MODE: std::sync::LazyLock<[(&str, ParamValue); 1]> =
        std::sync::LazyLock::new(|| [(PARAM_SINGLE_COPY, ParamValue::Str("cma".into()))]);
    let out = with_mode(&*MODE);
    eprintln!("{out:?}");
    assert_eq!(counts(&out[0]), (0, 5, 0), "{}", out[0]);
}

#[test]
fn put_and_get_emulated_through_the_queues() {
    static MODE: std::sync::LazyLock<[(&str, ParamValue); 1]> =
        std::sync::LazyLock::new(|| [(PARAM_SINGLE_COPY, ParamValue::Str("none".into()))]);
    let out = with_mode(&*MODE);
    eprintln!("{out:?}");
    assert_eq!(counts(&out[0]), (0, 0, 6), "{}", out[0]);
}

/// In-place sends: from a transfer buffer the receiver maps the segment;
/// from heap memory it reads with process_vm_readv (or, with `staged`,
/// the sender stages it); small payloads are sent eagerly. Each Pending
/// send completes once, after the receiver took the payload.
fn in_place(ctx: &mut Ctx) -> Result<String, String> {
    let mut sink = Recorder::default();
    if ctx.rank == 1 {
        progress_until(&mut ctx.module, &mut sink, Duration::from_secs(60), |s| {
            s.delivered.len() >= 3
        })?;
        for (i, m) in sink.delivered.iter().enumerate() {
            let size = [BUF_LEN, HEAP_LEN, 64][i];
            if m.peer != 0
                || m.tag != 4
                || m.header != [i as u8; 3]
                || m.payload.len() != size
                || !matches(&m.payload, seed(0, 1, i as u64))
            {
                return Err(format!("message {i} is wrong ({} bytes)", m.payload.len()));
            }
        }
        while !ctx.module.is_quiet() {
            ctx.module.progress(&mut sink).map_err(|e| e.to_string())?;
        }
        ctx.barrier();
        let c = ctx.module.counters();
        return Ok(format!(
            "received: mapped {}, cma {}",
            c.rndv_mapped, c.rndv_cma
        ));
    }
    let mut tb = ctx
        .module
        .alloc_transfer_buffer(BUF_LEN)
        .map_err(|e| e.to_string())?;
    fill(tb.as_mut_slice(), seed(0, 1, 0));
    let mut heap = vec![0u8; HEAP_LEN];
    fill(&mut heap, seed(0, 1, 1));
    let mut small = vec![0u8; 64];
    fill(&mut small, seed(0, 1, 2));
    let mut pending = Vec::new();
    let regions = [
        region(tb.as_mut_slice()),
        region(&mut heap),
        region(&mut small),
    ];
    for (i, r) in regions.iter().enumerate() {
        // SAFETY: the buffers stay untouched until the completions below.
        let c = unsafe {
            ctx.module
                .send_in_place(1, 4, &[i as u8; 3], *r, 10 + i as u64)
        }
        .map_err(|e| e.to_string())?;
        if c == Completion::Pending {
            pending.push(10 + i as u64);
        }
    }
    progress_until(&mut ctx.module, &mut sink, Duration::from_secs(60), |s| {
        s.sends.len() >= pending.len()
    })?;
    for _ in 0..100 {
        ctx.module.progress(&mut sink).map_err(|e| e.to_string())?;
    }
    let mut got: Vec<u64> = sink.sends.keys().copied().collect();
    got.sort_unstable();
    let once_and_well = |v: &Vec<Result<(), _>>| matches!(v.as_slice(), [Ok(())]);
    if got != pending || !sink.sends.values().all(once_and_well) {
        return Err(format!(
            "completions {:?} for pending {pending:?}",
            sink.sends
        ));
    }
    ctx.barrier();
    let c = ctx.module.counters();
    Ok(format!(
        "sent: pending {}, staged {}",
        pending.len(),
        c.rndv_staged
    ))
}

#[test]
fn in_place_sends_read_where_the_payload_is() {
    let out = run(Job::default(), in_place);
    eprintln!("{out:?}");
    assert_eq!(out[0], "sent: pending 2, staged 0");
    assert_eq!(out[1], "received: mapped 1, cma 1");
}

/// The mapping cache: a second transfer from the same segment maps
/// nothing new; after the owner frees the buffer and makes a new one at
/// the same address, the receiver maps again and gets the new bytes.
fn mapping_cache(ctx: &mut Ctx) -> Result<String, String> {
    let mut sink = Recorder::default();
    if ctx.rank == 1 {
        let mut report = Vec::new();
        for round in 0..3usize {
            progress_until(&mut ctx.module, &mut sink, Duration::from_secs(60), |s| {
                s.delivered.len() > round
            })?;
            let m = &sink.delivered[round];
            let index = m.header[0];
            if !matches(&m.payload, seed(0, 1, index.into())) {
                return Err(format!("round {round}: payload is not message {index}"));
            }
            let s = ctx.module.mapping_stats();
            report.push(format!(
                "misses {} hits {} invalidations {}",
                s.misses, s.hits, s.invalidations
            ));
            ctx.barrier();
        }
        let s = ctx.module.mapping_stats();
        // Round 0 mapped, round 1 hit, round 2 (new segment at the old
        // address, after the unmap notice) mapped again.
        if (s.misses, s.hits) != (2, 1) || s.invalidations != 1 {
            return Err(format!("cache counters: {report:?}"));
        }
        if ctx.module.counters().unmaps_received != 1 {
            return Err("no unmap notice".into());
        }
        return Ok(report.join("; "));
    }
    let mut send = |ctx: &mut Ctx,
                    buf: &mut fireopal_btl_shm::TransferBuffer,
                    index: u8|
     -> Result<(), String> {
        fill(buf.as_mut_slice(), seed(0, 1, index.into()));
        let r = region(buf.as_mut_slice());
        // SAFETY: the buffer stays untouched until the completion.
        unsafe {
            ctx.module
                .send_in_place(1, 1, &[index], r, u64::from(index))
        }
        .map_err(|e| e.to_string())?;
        progress_until(&mut ctx.module, &mut sink, Duration::from_secs(60), |s| {
            s.sends.contains_key(&u64::from(index))
        })?;
        ctx.barrier();
        Ok(())
    };
    let mut first = ctx
        .module
        .alloc_transfer_buffer(BUF_LEN)
        .map_err(|e| e.to_string())?;
    let old_addr = first.as_ptr() as usize;
    send(ctx, &mut first, 0)?;
    send(ctx, &mut first, 1)?;
    ctx.module.release_transfer_buffer(first);
    let mut second = ctx
        .module
        .alloc_transfer_buffer(BUF_LEN)
        .map_err(|e| e.to_string())?;
    if second.as_ptr() as usize != old_addr {
        return Err(
            "the new buffer did not land at the old address; the test needs it there".into(),
        );
    }
    send(ctx, &mut second, 2)?;
    Ok("sent 3".into())
}

#[test]
fn mapping_cache_maps_once_and_forgets_unmapped_segments() {
    let out = run(Job::default(), mapping_cache);
    eprintln!("{out:?}");
}

/// Makes process_vm_readv and process_vm_writev fail with EPERM in this
/// process, as a seccomp policy (or missing ptrace permission) would.
fn forbid_cma(_rank: u32) {
    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xC000_003E;
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xC000_00B7;
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |k: u32, jt: u8, jf: u8| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let ret = libc::BPF_RET | libc::BPF_K;
    let filter = [
        stmt(load, 4), // seccomp_data.arch
        jump(ARCH, 1, 0),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
        stmt(load, 0), // seccomp_data.nr
        jump(libc::SYS_process_vm_readv as u32, 2, 0),
        jump(libc::SYS_process_vm_writev as u32, 1, 0),
        stmt(ret, libc::SECCOMP_RET_ALLOW),
        stmt(ret, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: plain prctl calls; `prog` points at a filter that lives
    // across the call (the kernel copies it).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog
            ),
            0
        );
    }
}

/// Without permission for process_vm_readv the module says so and why,
/// and everything still works: RDMA on heap memory is emulated, in-place
/// sends of heap memory are staged, transfer buffers are still mapped.
fn without_cma(ctx: &mut Ctx) -> Result<String, String> {
    let status = ctx.module.single_copy_status();
    if !status.contains("process_vm_readv: off") || !status.contains("not permitted") {
        return Err(format!("status does not say why: {status}"));
    }
    if ctx.module.peer_cma_status(1 - ctx.rank).is_ok() {
        return Err("process_vm_readv claimed usable with the peer".into());
    }
    let mut sink = Recorder::default();
    if ctx.rank == 1 {
        let mut heap = vec![0u8; 100_000];
        fill(&mut heap, seed(1, 0, 7));
        let rw = Access::REMOTE_READ | Access::REMOTE_WRITE;
        let key = ctx
            .module
            .register_mem(region(&mut heap), rw)
            .map_err(|e| e.to_string())?;
        let mut addr = (heap.as_ptr() as u64).to_le_bytes().to_vec();
        addr.extend_from_slice(&key.remote_key);
        ctx.allgather(&addr);
        progress_until(&mut ctx.module, &mut sink, Duration::from_secs(60), |s| {
            s.delivered.len() >= 2
        })?;
        if !matches(&sink.delivered[0].payload, seed(0, 1, 3)) {
            return Err("staged in-place payload is wrong".into());
        }
        ctx.barrier();
        return Ok(status);
    }
    let all = ctx.allgather(&[]);
    let addr = u64_at(&all[1], 0);
    let key = &all[1][8..];
    let mut got = vec![0u8; 100_000];
    let op = RdmaOp {
        peer: 1,
        local: region(&mut got),
        local_registration: u64::MAX,
        remote_addr: addr,
        remote_key: key.into(),
        cookie: 1,
    };
    if ctx.module.get(&op).map_err(|e| e.to_string())? != Completion::Pending {
        return Err("get without CMA did not go the emulated way".into());
    }
    let mut heap = vec![0u8; HEAP_LEN];
    fill(&mut heap, seed(0, 1, 3));
    // SAFETY: `heap` stays untouched until the completion.
    unsafe { ctx.module.send_in_place(1, 1, &[], region(&mut heap), 2) }
        .map_err(|e| e.to_string())?;
    progress_until(&mut ctx.module, &mut sink, Duration::from_secs(60), |s| {
        s.rdma.len() == 1 && s.sends.len() == 1
    })?;
    let well = |v: Option<&Vec<Result<(), _>>>| matches!(v.map(Vec::as_slice), Some([Ok(())]));
    if !well(sink.rdma.get(&1)) || !well(sink.sends.get(&2)) || !matches(&got, seed(1, 0, 7)) {
        return Err(format!(
            "emulated get or staged send failed: {:?} {:?}",
            sink.rdma, sink.sends
        ));
    }
    ctx.module
        .send(1, 9, &[], b"done", 0)
        .map_err(|e| e.to_string())?;
    while !ctx.module.is_quiet() {
        ctx.module.progress(&mut sink).map_err(|e| e.to_string())?;
    }
    let c = ctx.module.counters();
    if c.rdma_emulated != 1 || c.rndv_staged != 1 || c.rdma_cma != 0 {
        return Err(format!("paths taken: {c:?}"));
    }
    ctx.barrier();
    Ok(status)
}

#[test]
fn process_vm_readv_declined_cleanly_without_permission() {
    let out = run(
        Job {
            setup: Some(forbid_cma),
            ..Job::default()
        },
        without_cma,
    );
    eprintln!("{out:?}");
}

/// The receiver loses process_vm_readv after telling the sender it reads
/// its memory: the in-place send falls back to a staging copy, delivers
/// the right bytes and completes once, without error.
fn in_place_fallback(ctx: &mut Ctx) -> Result<String, String> {
    let mut sink = Recorder::default();
    if ctx.rank == 1 {
        forbid_cma(1);
        ctx.barrier();
        progress_until(&mut ctx.module, &mut sink, Duration::from_secs(60), |s| {
            !s.delivered.is_empty()
        })?;
        let p = &sink.delivered[0].payload;
        if !matches(p, seed(0, 1, 8)) || p.len() != HEAP_LEN {
            return Err("fallback payload is wrong".into());
        }
        while !ctx.module.is_quiet() {
            ctx.module.progress(&mut sink).map_err(|e| e.to_string())?;
        }
        ctx.barrier();
        return Ok(String::new());
    }
    ctx.barrier();
    let mut heap = vec![0u8; HEAP_LEN];
    fill(&mut heap, seed(0, 1, 8));
    // SAFETY: `heap` stays untouched until the completion.
    let c = unsafe { ctx.module.send_in_place(1, 1, &[], region(&mut heap), 3) }
        .map_err(|e| e.to_string())?;
    if c != Completion::Pending {
        return Err("in-place send was not a rendezvous".into());
    }
    progress_until(&mut ctx.module, &mut sink, Duration::from_secs(60), |s| {
        !s.sends.is_empty()
    })?;
    for _ in 0..1000 {
        ctx.module.progress(&mut sink).map_err(|e| e.to_string())?;
    }
    let once_and_well = matches!(sink.sends.get(&3).map(Vec::as_slice), Some([Ok(())]));
    if sink.sends.len() != 1 || !once_and_well {
        return Err(format!("completions: {:?}", sink.sends));
    }
    let c = ctx.module.counters();
    if c.rndv_staged != 1 || c.rndv_fallbacks != 1 {
        return Err(format!("no fallback to staging: {c:?}"));
    }
    ctx.barrier();
    Ok("fell back".into())
}

#[test]
fn in_place_send_falls_back_to_staging_when_the_receiver_cannot_read() {
    run(Job::default(), in_place_fallback);
}
