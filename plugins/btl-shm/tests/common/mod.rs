//! Test harness: jobs of forked processes, each with an `shm` module.
//!
//! The parent forks one child per rank, each holding one end of a
//! socketpair. A child opens its module with a test host (its rank, the
//! node layout, a job key shared by the job), sends its address to the
//! parent, receives everyone's, adds its peers and runs the test body.
//! The parent relays barriers and collects each child's result; every
//! child is killed and reaped when the job's time runs out or a child
//! fails, so no test leaves processes behind.

#![allow(unsafe_code, dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fireopal_abi::btl::{BtlComponentImpl, PeerAddress, Rank, Reachability, Transport};
use fireopal_abi::host::{Host, JobInfo, LogLevel, JOB_KEY_LEN};
use fireopal_abi::param::ParamValue;
use fireopal_btl_shm::{ShmComponent, ShmTransport, PARAM_CHECKSUM};
use fireopal_conformance::host::fresh_job_key;
use fireopal_conformance::{Recorder, TestHost};
use fireopal_core::shmq::layout::{HeaderExpect, Layout, HEADER_LEN};
use fireopal_core::wire::shm::Address;

/// A host for rank `rank` of `size` processes, all on one node. With
/// `SHM_TEST_CHECKSUM=yes` in the environment, `btl_shm_checksum` is on
/// unless `params` say otherwise, so that any test can be run with
/// checksums.
pub fn host(rank: u32, size: u32, key: [u8; JOB_KEY_LEN], params: &[(&str, ParamValue)]) -> Host {
    test_host(rank, size, key, params).into_host()
}

/// The [`TestHost`] behind [`host`], for a caller that reads its log.
pub fn test_host(
    rank: u32,
    size: u32,
    key: [u8; JOB_KEY_LEN],
    params: &[(&str, ParamValue)],
) -> TestHost {
    let mut all: Vec<(String, ParamValue)> = Vec::new();
    let checksum_env = std::env::var("SHM_TEST_CHECKSUM").is_ok_and(|v| v == "yes");
    if checksum_env && !params.iter().any(|(n, _)| *n == PARAM_CHECKSUM) {
        all.push((PARAM_CHECKSUM.to_owned(), ParamValue::Bool(true)));
    }
    all.extend(params.iter().map(|(n, v)| ((*n).to_owned(), v.clone())));
    let job = JobInfo {
        rank,
        size,
        local_rank: rank,
        local_size: size,
        job_key: key,
    };
    TestHost::new(job, &all)
}

/// Opens the one module of the component for `host`.
pub fn open(host: Host) -> ShmTransport {
    let mut modules = ShmComponent::open(host).expect("open");
    assert_eq!(modules.len(), 1);
    modules.pop().expect("one module")
}

/// Adds `addresses` (by rank) as node-local peers; all but `own` must be
/// reachable.
pub fn add_all(module: &mut ShmTransport, own: u32, addresses: &[Vec<u8>]) {
    let peers: Vec<PeerAddress<'_>> = addresses
        .iter()
        .enumerate()
        .map(|(r, a)| PeerAddress {
            rank: r as Rank,
            node_local: true,
            address: a.as_slice().into(),
        })
        .collect();
    let reach = module.add_peers(&peers).expect("add_peers");
    for (r, reach) in reach.iter().enumerate() {
        if r as u32 != own {
            assert_eq!(*reach, Reachability::Reachable, "rank {r} from {own}");
        }
    }
}

/// Calls `progress` until `done` holds, yielding the processor when
/// nothing happened (the job has more processes than cores).
pub fn progress_until(
    module: &mut ShmTransport,
    sink: &mut Recorder,
    timeout: Duration,
    mut done: impl FnMut(&Recorder) -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    while !done(sink) {
        let n = module
            .progress(sink)
            .map_err(|e| format!("progress: {e}"))?;
        if n == 0 {
            if Instant::now() > deadline {
                return Err("timed out waiting for progress".into());
            }
            std::thread::yield_now();
        }
    }
    Ok(())
}

/// A child's view of the job.
pub struct Ctx {
    pub rank: u32,
    pub size: u32,
    pub key: [u8; JOB_KEY_LEN],
    pub addresses: Vec<Vec<u8>>,
    pub module: ShmTransport,
    chan: UnixStream,
}

impl Ctx {
    /// Waits until every process of the job reached its barrier.
    pub fn barrier(&mut self) {
        write_frame(&mut self.chan, b'B', &[]).expect("barrier request");
        let (kind, _) = read_frame(&mut self.chan).expect("barrier release");
        assert_eq!(kind, b'B');
    }

    /// Sends bytes to every other process through the parent, and returns
    /// what every process sent (by rank).
    pub fn allgather(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        write_frame(&mut self.chan, b'G', bytes).expect("gather request");
        let (kind, all) = read_frame(&mut self.chan).expect("gather answer");
        assert_eq!(kind, b'G');
        decode_list(&all)
    }
}

/// Settings of a job.
pub struct Job<'a> {
    pub size: u32,
    pub params: &'a [(&'a str, ParamValue)],
    pub timeout: Duration,
    /// Runs in each child before its module is opened.
    pub setup: Option<fn(u32)>,
}

impl Default for Job<'_> {
    fn default() -> Self {
        Self {
            size: 2,
            params: &[],
            timeout: Duration::from_secs(120),
            setup: None,
        }
    }
}

/// Forking tests run one at a time: a fork while another test thread
/// holds a lock (of stdout, say) could hang the child.
static FORK_LOCK: Mutex<()> = Mutex::new(());

fn write_frame(s: &mut UnixStream, kind: u8, bytes: &[u8]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(5 + bytes.len());
    buf.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    buf.push(kind);
    buf.extend_from_slice(bytes);
    s.write_all(&buf)
}

fn read_frame(s: &mut UnixStream) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
    s.read_exact(&mut head)?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let mut bytes = vec![0u8; len];
    s.read_exact(&mut bytes)?;
    Ok((head[4], bytes))
}

fn encode_list(items: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for i in items {
        out.extend_from_slice(&(i.len() as u32).to_le_bytes());
        out.extend_from_slice(i);
    }
    out
}

fn decode_list(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while bytes.len() >= 4 {
        let n = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        out.push(bytes[4..4 + n].to_vec());
        bytes = &bytes[4 + n..];
    }
    out
}

/// Runs `body` in `job.size` forked processes; returns each rank's
/// output text. Panics (after killing and reaping every child) if a child
/// fails, crashes or runs out of time.
pub fn run(job: Job<'_>, body: fn(&mut Ctx) -> Result<String, String>) -> Vec<String> {
    let _serial = FORK_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let key = fresh_job_key();
    let mut children: Vec<(libc::pid_t, UnixStream)> = Vec::new();
    for rank in 0..job.size {
        let mut fds = [0; 2];
        // SAFETY: `fds` is valid for two descriptors.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0, "socketpair");
        // SAFETY: both descriptors were just made and are owned here.
        let (parent_end, child_end) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: the child only runs the test body and then `_exit`s; it
        // never returns into the test harness.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            drop(parent_end);
            for (_, s) in children.drain(..) {
                drop(s);
            }
            child(rank, &job, key, UnixStream::from(child_end), body);
        }
        drop(child_end);
        children.push((pid, UnixStream::from(parent_end)));
    }
    let outcome = catch_unwind(AssertUnwindSafe(|| serve(&job, &mut children)));
    // Whatever happened, no child outlives the test.
    for (pid, _) in &children {
        // SAFETY: plain signal to our own child.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    let mut statuses = Vec::new();
    for (pid, _) in &children {
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(*pid, &mut status, 0) };
        statuses.push(status);
    }
    match outcome {
        Ok(Ok(outputs)) => outputs,
        Ok(Err(e)) => panic!("job failed: {e}"),
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// The parent's side: relays addresses, barriers and gathers, collects
/// results.
fn serve(job: &Job<'_>, children: &mut [(libc::pid_t, UnixStream)]) -> Result<Vec<String>, String> {
    let deadline = Instant::now() + job.timeout;
    let n = children.len();
    let mut results: Vec<Option<String>> = vec![None; n];
    let mut barrier: Vec<bool> = vec![false; n];
    let mut gather: Vec<Option<Vec<u8>>> = vec![None; n];
    let mut addresses: Vec<Option<Vec<u8>>> = vec![None; n];
    let mut failure: Option<String> = None;
    while results.iter().any(Option::is_none) && failure.is_none() {
        let mut polls: Vec<libc::pollfd> = children
            .iter()
            .map(|(_, s)| libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "timed out after {:?}; results so far: {results:?}",
                job.timeout
            ));
        }
        // SAFETY: `polls` is a valid array of `n` pollfds.
        let r = unsafe {
            libc::poll(
                polls.as_mut_ptr(),
                n as libc::nfds_t,
                left.as_millis().min(1000) as i32,
            )
        };
        if r < 0 {
            continue;
        }
        for (i, p) in polls.iter().enumerate() {
            if p.revents == 0 || results[i].is_some() {
                continue;
            }
            let frame = read_frame(&mut children[i].1);
            let (kind, bytes) = match frame {
                Ok(f) => f,
                Err(e) => {
                    failure = Some(format!("rank {i} died without a result ({e})"));
                    break;
                }
            };
            match kind {
                b'A' => addresses[i] = Some(bytes),
                b'B' => barrier[i] = true,
                b'G' => gather[i] = Some(bytes),
                b'R' => results[i] = Some(String::from_utf8_lossy(&bytes).into_owned()),
                b'F' => {
                    failure = Some(format!(
                        "rank {i} failed: {}",
                        String::from_utf8_lossy(&bytes)
                    ));
                }
                _ => failure = Some(format!("rank {i} sent frame kind {kind}")),
            }
        }
        if addresses.iter().all(Option::is_some) {
            let all: Vec<Vec<u8>> = addresses
                .iter_mut()
                .map(|a| a.take().unwrap_or_default())
                .collect();
            let list = encode_list(&all);
            for (_, s) in children.iter_mut() {
                write_frame(s, b'A', &list).map_err(|e| e.to_string())?;
            }
        }
        if barrier.iter().zip(&results).all(|(b, r)| *b || r.is_some())
            && barrier.iter().any(|b| *b)
        {
            for (i, (_, s)) in children.iter_mut().enumerate() {
                if barrier[i] {
                    write_frame(s, b'B', &[]).map_err(|e| e.to_string())?;
                }
            }
            barrier.iter_mut().for_each(|b| *b = false);
        }
        if gather.iter().all(Option::is_some) {
            let all: Vec<Vec<u8>> = gather
                .iter_mut()
                .map(|g| g.take().unwrap_or_default())
                .collect();
            let list = encode_list(&all);
            for (_, s) in children.iter_mut() {
                write_frame(s, b'G', &list).map_err(|e| e.to_string())?;
            }
        }
    }
    match failure {
        Some(f) => Err(f),
        None => Ok(results.into_iter().map(Option::unwrap_or_default).collect()),
    }
}

fn child(
    rank: u32,
    job: &Job<'_>,
    key: [u8; JOB_KEY_LEN],
    mut chan: UnixStream,
    body: fn(&mut Ctx) -> Result<String, String>,
) -> ! {
    // SAFETY: asks for SIGKILL when the parent dies; no memory involved.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let mut result_chan = chan.try_clone().expect("clone the parent channel");
    let test_host = test_host(rank, job.size, key, job.params);
    let logs = test_host.logs();
    let outcome = catch_unwind(AssertUnwindSafe(|| -> Result<String, String> {
        if let Some(setup) = job.setup {
            setup(rank);
        }
        let mut module = open(test_host.into_host());
        let address = module.address().map_err(|e| e.to_string())?;
        write_frame(&mut chan, b'A', &address).map_err(|e| e.to_string())?;
        let (_, all) = read_frame(&mut chan).map_err(|e| e.to_string())?;
        let addresses = decode_list(&all);
        add_all(&mut module, rank, &addresses);
        let mut ctx = Ctx {
            rank,
            size: job.size,
            key,
            addresses,
            module,
            chan,
        };
        body(&mut ctx)
    }));
    let (kind, text) = match outcome {
        Ok(Ok(text)) => (b'R', text),
        Ok(Err(e)) => (b'F', e),
        Err(p) => (
            b'F',
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panic".into()),
        ),
    };
    // A failure carries the module's warnings, which the test host keeps
    // instead of printing.
    let text = if kind == b'F' {
        let logs = logs.lock().unwrap_or_else(|e| e.into_inner());
        let warnings = logs.iter().filter(|(level, _)| *level <= LogLevel::Warn);
        warnings.fold(text, |t, (level, line)| {
            format!("{t}\n  [{level:?}] {line}")
        })
    } else {
        text
    };
    let _ = write_frame(&mut result_chan, kind, text.as_bytes());
    // SAFETY: leaves the child at once, without running the parent's
    // atexit handlers or unwinding into the test harness.
    unsafe { libc::_exit(0) }
}

/// Maps `len` bytes of the file that process `pid` holds as descriptor
/// `fd`, shared and writable, fetched with the test's own system calls as
/// any process of the same user could; never unmapped.
pub fn map_foreign(pid: u32, fd: u32, len: usize) -> *mut u8 {
    // SAFETY: plain system calls on numbers from a published address or
    // request; every result is checked.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0);
        assert!(pidfd >= 0, "pidfd_open");
        let fd = libc::syscall(libc::SYS_pidfd_getfd, pidfd as i32, fd as i32, 0);
        assert!(fd >= 0, "pidfd_getfd");
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd as i32,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED, "mmap");
        libc::close(fd as i32);
        libc::close(pidfd as i32);
        p.cast()
    }
}

/// Maps another process's queue segment the way a peer does; returns its
/// base and its checked layout.
pub fn map_queue_segment(ctx: &Ctx, rank: u32) -> (*mut u8, Layout) {
    let a = Address::decode(&ctx.addresses[rank as usize]).expect("address");
    let base = map_foreign(a.pid, a.fd, a.seg_len as usize);
    // SAFETY: the mapping holds the whole segment, longer than a header.
    let header = unsafe { std::slice::from_raw_parts(base, HEADER_LEN) };
    let (layout, _) = Layout::decode_header(
        header,
        &HeaderExpect {
            job_key: &ctx.key,
            owner_rank: a.rank,
            owner_local: a.local,
            owner_pid: a.pid,
            file_id: a.file_id,
            file_len: a.seg_len,
            local_size: ctx.size,
        },
    )
    .expect("header");
    (base, layout)
}

/// The shared word at `off` of a mapping made by [`map_foreign`].
pub fn word(base: *mut u8, off: usize) -> &'static AtomicU64 {
    assert_eq!(off % 8, 0, "words are aligned");
    // SAFETY: an aligned word inside a mapping that is never unmapped
    // (the callers' offsets come from a checked layout).
    unsafe { AtomicU64::from_ptr(base.add(off).cast()) }
}
