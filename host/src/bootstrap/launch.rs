//! The launcher behind `fireopal run`: starts the ranks of a job on this
//! node, serves their key-value store, forwards their output and
//! supervises them.
//!
//! - Each rank gets one end of its own socketpair as `PMI_FD` (with
//!   `PMI_RANK` and `PMI_SIZE`), so the store is private to the job and the
//!   ranks use the same PMI-1 client as under Hydra or Slurm.
//! - Each rank leads its own process group; stopping the job signals the
//!   groups, so helper processes a rank started stop too.
//! - A rank that exits non-zero, dies by a signal, aborts or breaks the
//!   protocol stops the job: the key-value connections are closed (ranks
//!   blocked in a fence get an error at once), every rank gets SIGTERM, and
//!   SIGKILL after [`JobSpec::grace`]. SIGINT, SIGTERM and SIGHUP to the
//!   launcher do the same. Every child is reaped before [`run_job`] returns.
//! - A launcher killed outright (SIGKILL) takes its ranks with it: each
//!   rank asks the kernel for SIGKILL when its parent dies.
//!
//! [`run_job`] installs process-wide handlers for SIGINT, SIGTERM, SIGHUP
//! and SIGCHLD while it runs (restored on return), so only one job runs per
//! process at a time.

use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::server::{Notice, PmiServer};
use super::sys;

/// Largest job `fireopal run` starts on one node.
pub const MAX_RANKS: u32 = 4096;

/// The conventional name of a signal (`SIGKILL`), if it has one.
pub fn signal_name(signal: i32) -> Option<&'static str> {
    sys::signal_name(signal)
}

/// What to start.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// Number of ranks.
    pub size: u32,
    /// The program every rank runs.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Variables added to every rank's environment.
    pub env: Vec<(OsString, OsString)>,
    /// Prefix every line of output with `[rank] `.
    pub tag_output: bool,
    /// Pin rank r to the r-th allowed CPU (wrapping), as `mpirun
    /// --bind-to core` does, so benchmarks compare with MPI's.
    pub bind_to_core: bool,
    /// How long ranks get between SIGTERM and SIGKILL when the job stops.
    pub grace: Duration,
    /// How long to keep forwarding output after every rank exited, for
    /// helper processes that still hold the output pipes.
    pub drain: Duration,
}

impl JobSpec {
    /// `size` ranks of `program` with no arguments, untagged output, a 2 s
    /// grace period and a 1 s drain period.
    pub fn new(size: u32, program: impl Into<OsString>) -> JobSpec {
        JobSpec {
            size,
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            tag_output: false,
            bind_to_core: false,
            grace: Duration::from_secs(2),
            drain: Duration::from_secs(1),
        }
    }
}

/// How a rank failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureKind {
    /// It exited with this non-zero code.
    Exited(i32),
    /// A signal killed it.
    Signaled(i32),
    /// It asked the launcher to abort the job (PMI `cmd=abort`).
    Aborted(i32),
    /// It sent the key-value server something that is not PMI-1.
    Protocol(String),
}

/// The rank whose failure stopped the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The rank.
    pub rank: u32,
    /// How it failed.
    pub kind: FailureKind,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rank = self.rank;
        match &self.kind {
            FailureKind::Exited(code) => write!(f, "rank {rank} exited with code {code}"),
            FailureKind::Signaled(signal) => {
                write!(f, "rank {rank} was killed by signal {signal}")?;
                if let Some(name) = sys::signal_name(*signal) {
                    write!(f, " ({name})")?;
                }
                Ok(())
            }
            FailureKind::Aborted(code) => {
                write!(f, "rank {rank} aborted the job (exit code {code})")
            }
            FailureKind::Protocol(reason) => {
                write!(f, "rank {rank} broke the bootstrap protocol: {reason}")
            }
        }
    }
}

/// Something the launcher reports while the job runs.
#[derive(Debug)]
pub enum JobEvent<'a> {
    /// The first failure; the job is being stopped.
    Failed(&'a Failure),
    /// The launcher caught this signal; the job is being stopped.
    Interrupted(i32),
    /// A barrier could not complete because rank `left` finalized or exited
    /// while `waiting` ranks were in it; they got an error.
    BarrierBroken {
        /// The rank that left.
        left: u32,
        /// How many ranks were waiting.
        waiting: usize,
    },
    /// The grace period ended; these ranks get SIGKILL.
    Killing(Vec<u32>),
}

/// How a job ended.
#[derive(Debug)]
pub struct JobReport {
    /// Each rank's exit status, by rank.
    pub statuses: Vec<ExitStatus>,
    /// The failure that stopped the job, if one did.
    pub failure: Option<Failure>,
    /// The signal that interrupted the launcher, if one did.
    pub interrupted: Option<i32>,
}

impl JobReport {
    /// Whether every rank exited 0 and nothing stopped the job.
    pub fn success(&self) -> bool {
        self.failure.is_none()
            && self.interrupted.is_none()
            && self.statuses.iter().all(ExitStatus::success)
    }

    /// The launcher's exit code: 0 on success, the failed rank's exit code,
    /// or 128 + the signal number (as shells report signals).
    pub fn exit_code(&self) -> u8 {
        let nonzero = |code: i32| u8::try_from(code).ok().filter(|&c| c != 0).unwrap_or(1);
        let signal = |s: i32| u8::try_from(128 + s).unwrap_or(1);
        if let Some(s) = self.interrupted {
            return signal(s);
        }
        match self.failure.as_ref().map(|f| &f.kind) {
            Some(FailureKind::Exited(code) | FailureKind::Aborted(code)) => nonzero(*code),
            Some(FailureKind::Signaled(s)) => signal(*s),
            Some(FailureKind::Protocol(_)) => 1,
            None if self.success() => 0,
            None => 1,
        }
    }
}

/// Why a job could not be run.
#[derive(Debug)]
pub enum LaunchError {
    /// The size is 0 or over [`MAX_RANKS`].
    BadSize(u32),
    /// Another job is running in this process.
    Busy,
    /// Setting up sockets, pipes or signal handlers failed.
    Setup(io::Error),
    /// A rank could not be started (the ranks already started were stopped
    /// and reaped).
    Spawn {
        /// The rank.
        rank: u32,
        /// The program.
        program: OsString,
        /// The system error.
        source: io::Error,
    },
    /// Waiting for events failed (every rank was killed and reaped).
    Supervise(io::Error),
}

impl fmt::Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchError::BadSize(n) => {
                write!(f, "cannot start {n} ranks (1 to {MAX_RANKS})")
            }
            LaunchError::Busy => f.write_str("another job is running in this process"),
            LaunchError::Setup(e) => write!(f, "cannot set up the job: {e}"),
            LaunchError::Spawn {
                rank,
                program,
                source,
            } => write!(
                f,
                "cannot start rank {rank} ({}): {source}",
                program.to_string_lossy()
            ),
            LaunchError::Supervise(e) => write!(f, "supervising the job failed: {e}"),
        }
    }
}

impl std::error::Error for LaunchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LaunchError::Setup(e) | LaunchError::Supervise(e) => Some(e),
            LaunchError::Spawn { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Out,
    Err,
}

/// One rank's stdout or stderr, read by the launcher.
#[derive(Debug)]
struct Output {
    pipe: File,
    stream: Stream,
    /// Partial line kept until its newline, so that lines of different
    /// ranks never mix, tagged or not.
    partial: Vec<u8>,
}

/// Longest partial line held back before it is printed anyway.
const MAX_PARTIAL: usize = 64 * 1024;

#[derive(Debug)]
struct Rank {
    child: Child,
    pmi: Option<UnixStream>,
    outputs: Vec<Output>,
    status: Option<ExitStatus>,
}

/// Sends `bytes` from `rank` to the launcher's stdout or stderr, with the
/// rank tag when asked. Write errors are ignored: the ranks must keep
/// running even when nobody reads the launcher's output.
fn emit(rank: u32, stream: Stream, tag: bool, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let mut buf = Vec::with_capacity(bytes.len() + 8);
    if tag {
        for line in bytes.split_inclusive(|&b| b == b'\n') {
            buf.extend_from_slice(format!("[{rank}] ").as_bytes());
            buf.extend_from_slice(line);
        }
    } else {
        buf.extend_from_slice(bytes);
    }
    let _ = match stream {
        Stream::Out => io::stdout().lock().write_all(&buf),
        Stream::Err => io::stderr().lock().write_all(&buf),
    };
}

impl Output {
    /// Reads once; returns false at end of file.
    fn pump(&mut self, rank: u32, tag: bool) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        let n = match self.pipe.read(&mut chunk) {
            Ok(0) => {
                self.flush(rank, tag);
                return false;
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return true,
            Err(_) => {
                self.flush(rank, tag);
                return false;
            }
        };
        let data = chunk.get(..n).unwrap_or_default();
        self.partial.extend_from_slice(data);
        let complete = match self.partial.iter().rposition(|&b| b == b'\n') {
            Some(pos) => pos + 1,
            None if self.partial.len() > MAX_PARTIAL => self.partial.len(),
            None => 0,
        };
        let lines: Vec<u8> = self.partial.drain(..complete).collect();
        emit(rank, self.stream, tag, &lines);
        true
    }

    /// Prints a held-back partial line at the end of the stream. A tagged
    /// one is ended with a newline so the next tag starts a line; an
    /// untagged one is printed as the rank wrote it.
    fn flush(&mut self, rank: u32, tag: bool) {
        if !self.partial.is_empty() {
            if tag {
                self.partial.push(b'\n');
            }
            let rest = std::mem::take(&mut self.partial);
            emit(rank, self.stream, tag, &rest);
        }
    }
}

/// What a descriptor in the poll set belongs to.
#[derive(Debug, Clone, Copy)]
enum Source {
    Signals,
    Pmi(usize),
    Output(usize, usize),
}

/// The running job.
#[derive(Debug)]
struct Job<'s> {
    spec: &'s JobSpec,
    ranks: Vec<Rank>,
    server: PmiServer,
    failure: Option<Failure>,
    interrupted: Option<i32>,
    /// When the job began stopping; SIGKILL follows after the grace period.
    stopping: Option<Instant>,
    killed: bool,
}

fn rank_u32(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// Starts the job described by `spec`, runs it to the end and reports how
/// it ended. `on_event` hears about failures and interruptions as they
/// happen (to print them, say).
pub fn run_job(
    spec: &JobSpec,
    on_event: &mut dyn FnMut(&JobEvent<'_>),
) -> Result<JobReport, LaunchError> {
    if spec.size == 0 || spec.size > MAX_RANKS {
        return Err(LaunchError::BadSize(spec.size));
    }
    let signals =
        sys::SignalPipe::install(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGCHLD])
            .map_err(LaunchError::Setup)?
            .ok_or(LaunchError::Busy)?;

    let kvsname = format!("fireopal_{}", std::process::id());
    let mut job = Job {
        spec,
        ranks: Vec::with_capacity(spec.size as usize),
        server: PmiServer::new(spec.size, kvsname),
        failure: None,
        interrupted: None,
        stopping: None,
        killed: false,
    };
    for rank in 0..spec.size {
        match spawn_rank(spec, rank) {
            Ok(r) => job.ranks.push(r),
            Err(source) => {
                job.kill_all(libc::SIGKILL);
                job.reap_all_blocking();
                return Err(match source {
                    SpawnError::Setup(e) => LaunchError::Setup(e),
                    SpawnError::Spawn(source) => LaunchError::Spawn {
                        rank,
                        program: spec.program.clone(),
                        source,
                    },
                });
            }
        }
    }
    match job.supervise(&signals, on_event) {
        Ok(()) => {}
        Err(e) => {
            job.kill_all(libc::SIGKILL);
            job.reap_all_blocking();
            return Err(LaunchError::Supervise(e));
        }
    }
    let statuses = job
        .ranks
        .iter()
        .map(|r| {
            r.status
                .unwrap_or_else(|| ExitStatus::from_raw(libc::SIGKILL))
        })
        .collect();
    Ok(JobReport {
        statuses,
        failure: job.failure,
        interrupted: job.interrupted,
    })
}

enum SpawnError {
    Setup(io::Error),
    Spawn(io::Error),
}

fn spawn_rank(spec: &JobSpec, rank: u32) -> Result<Rank, SpawnError> {
    let (ours, theirs) = UnixStream::pair().map_err(SpawnError::Setup)?;
    ours.set_nonblocking(true).map_err(SpawnError::Setup)?;
    let fd = theirs.as_raw_fd();
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        // A PMI_PORT or PMI_ID from an enclosing launcher would confuse
        // clients that prefer them.
        .env_remove("PMI_PORT")
        .env_remove("PMI_ID")
        .env("PMI_FD", fd.to_string())
        .env("PMI_RANK", rank.to_string())
        .env("PMI_SIZE", spec.size.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    sys::inherit_fd(&mut cmd, fd);
    sys::die_with_launcher(&mut cmd);
    let mut child = cmd.spawn().map_err(SpawnError::Spawn)?;
    // Our copy of the child's end must go, or we would never see it close.
    drop(theirs);
    if spec.bind_to_core {
        // Binding is a placement wish: a failure leaves the rank unbound.
        if let Ok(cpus) = sys::allowed_cpus() {
            if let Some(&cpu) = cpus.get(rank as usize % cpus.len().max(1)) {
                let _ = sys::bind_to_cpu(child.id(), cpu);
            }
        }
    }
    let mut outputs = Vec::with_capacity(2);
    if let Some(out) = child.stdout.take() {
        outputs.push(Output {
            pipe: File::from(OwnedFd::from(out)),
            stream: Stream::Out,
            partial: Vec::new(),
        });
    }
    if let Some(err) = child.stderr.take() {
        outputs.push(Output {
            pipe: File::from(OwnedFd::from(err)),
            stream: Stream::Err,
            partial: Vec::new(),
        });
    }
    Ok(Rank {
        child,
        pmi: Some(ours),
        outputs,
        status: None,
    })
}

impl Job<'_> {
    fn supervise(
        &mut self,
        signals: &sys::SignalPipe,
        on_event: &mut dyn FnMut(&JobEvent<'_>),
    ) -> io::Result<()> {
        let mut all_exited_at: Option<Instant> = None;
        loop {
            self.reap(on_event);
            if all_exited_at.is_none() && self.ranks.iter().all(|r| r.status.is_some()) {
                all_exited_at = Some(Instant::now());
                for r in &mut self.ranks {
                    r.pmi = None;
                }
            }
            let outputs_open = self.ranks.iter().any(|r| !r.outputs.is_empty());
            if let Some(t) = all_exited_at {
                if !outputs_open || t.elapsed() >= self.spec.drain {
                    return Ok(());
                }
            }
            if let Some(t) = self.stopping {
                if !self.killed && t.elapsed() >= self.spec.grace {
                    let running: Vec<u32> = self
                        .ranks
                        .iter()
                        .enumerate()
                        .filter(|(_, r)| r.status.is_none())
                        .map(|(i, _)| rank_u32(i))
                        .collect();
                    if !running.is_empty() {
                        on_event(&JobEvent::Killing(running));
                    }
                    self.kill_all(libc::SIGKILL);
                    self.killed = true;
                }
            }

            // Wake at the next deadline; 1 s at most, as a backstop for a
            // SIGCHLD lost to a full signal pipe.
            let mut timeout = Duration::from_secs(1);
            if let (Some(t), false) = (self.stopping, self.killed) {
                timeout = timeout.min(self.spec.grace.saturating_sub(t.elapsed()));
            }
            if let Some(t) = all_exited_at {
                timeout = timeout.min(self.spec.drain.saturating_sub(t.elapsed()));
            }
            let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(1000).max(1);

            let mut interests = vec![sys::Interest {
                fd: signals.fd(),
                write: false,
            }];
            let mut sources = vec![Source::Signals];
            for (i, r) in self.ranks.iter().enumerate() {
                if let Some(s) = &r.pmi {
                    interests.push(sys::Interest {
                        fd: s.as_raw_fd(),
                        write: self.server.has_output(rank_u32(i)),
                    });
                    sources.push(Source::Pmi(i));
                }
                for (j, o) in r.outputs.iter().enumerate() {
                    interests.push(sys::Interest {
                        fd: o.pipe.as_raw_fd(),
                        write: false,
                    });
                    sources.push(Source::Output(i, j));
                }
            }
            let ready = sys::poll(&interests, timeout_ms)?;

            let mut closed_outputs: Vec<(usize, usize)> = Vec::new();
            for (source, ready) in sources.iter().zip(&ready) {
                if !(ready.read || ready.write) {
                    continue;
                }
                match *source {
                    Source::Signals => {
                        for signal in signals.drain() {
                            if signal != libc::SIGCHLD && self.interrupted.is_none() {
                                self.interrupted = Some(signal);
                                on_event(&JobEvent::Interrupted(signal));
                                self.stop();
                            }
                        }
                    }
                    Source::Pmi(i) => self.serve(i, ready.read, on_event),
                    Source::Output(i, j) => {
                        let tag = self.spec.tag_output;
                        let open = self
                            .ranks
                            .get_mut(i)
                            .and_then(|r| r.outputs.get_mut(j))
                            .is_some_and(|o| o.pump(rank_u32(i), tag));
                        if !open {
                            closed_outputs.push((i, j));
                        }
                    }
                }
            }
            // Remove from the back so the indices stay valid.
            for (i, j) in closed_outputs.into_iter().rev() {
                if let Some(r) = self.ranks.get_mut(i) {
                    if j < r.outputs.len() {
                        r.outputs.remove(j);
                    }
                }
            }
        }
    }

    /// Reads from and writes to the key-value connection of rank `i`.
    fn serve(&mut self, i: usize, readable: bool, on_event: &mut dyn FnMut(&JobEvent<'_>)) {
        let rank = rank_u32(i);
        let mut notices = Vec::new();
        let mut hang_up = false;
        if readable {
            if let Some(stream) = self.ranks.get_mut(i).and_then(|r| r.pmi.as_mut()) {
                let mut buf = [0u8; 16 * 1024];
                match stream.read(&mut buf) {
                    Ok(0) => hang_up = true,
                    Ok(n) => notices = self.server.input(rank, buf.get(..n).unwrap_or_default()),
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                        ) => {}
                    Err(_) => hang_up = true,
                }
            }
        }
        if hang_up {
            self.server.disconnected(rank);
            if let Some(r) = self.ranks.get_mut(i) {
                r.pmi = None;
            }
        }
        self.handle_notices(notices, on_event);
        self.flush_replies();
    }

    /// Writes pending replies to every rank (a barrier answers all of them).
    fn flush_replies(&mut self) {
        for (i, r) in self.ranks.iter_mut().enumerate() {
            let rank = rank_u32(i);
            let Some(stream) = r.pmi.as_mut() else {
                continue;
            };
            let Some(out) = self.server.output(rank) else {
                continue;
            };
            while !out.is_empty() {
                match stream.write(out) {
                    Ok(0) => break,
                    Ok(n) => {
                        out.drain(..n.min(out.len()));
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        // The rank closed its end; its exit will be reaped.
                        out.clear();
                        r.pmi = None;
                        self.server.disconnected(rank);
                        break;
                    }
                }
            }
        }
    }

    fn handle_notices(&mut self, notices: Vec<Notice>, on_event: &mut dyn FnMut(&JobEvent<'_>)) {
        for notice in notices {
            match notice {
                Notice::Abort { rank, code } => {
                    self.fail(rank, FailureKind::Aborted(code), on_event)
                }
                Notice::Protocol { rank, reason } => {
                    if let Some(r) = self.ranks.get_mut(rank as usize) {
                        r.pmi = None;
                    }
                    self.fail(rank, FailureKind::Protocol(reason), on_event);
                }
                Notice::BarrierBroken { left, waiting } => {
                    on_event(&JobEvent::BarrierBroken { left, waiting });
                }
            }
        }
    }

    /// Records the first failure and stops the job; later ones are effects.
    fn fail(&mut self, rank: u32, kind: FailureKind, on_event: &mut dyn FnMut(&JobEvent<'_>)) {
        if self.failure.is_some() || self.stopping.is_some() {
            return;
        }
        let failure = Failure { rank, kind };
        on_event(&JobEvent::Failed(&failure));
        self.failure = Some(failure);
        self.stop();
    }

    /// Closes every key-value connection (releasing ranks blocked in a
    /// fence with an error) and sends SIGTERM to every rank.
    fn stop(&mut self) {
        if self.stopping.is_some() {
            return;
        }
        self.stopping = Some(Instant::now());
        for r in &mut self.ranks {
            r.pmi = None;
        }
        self.kill_all(libc::SIGTERM);
    }

    /// Sends `signal` to the process group of every rank not yet reaped.
    fn kill_all(&mut self, signal: i32) {
        for r in &mut self.ranks {
            if r.status.is_none() {
                // ESRCH (the group is already gone) is fine; so is failing to
                // reach a group: the leader is still signalled directly below.
                let _ = sys::kill_group(r.child.id(), signal);
                if signal == libc::SIGKILL {
                    let _ = r.child.kill();
                }
            }
        }
    }

    /// Collects the exit status of every rank that has ended.
    fn reap(&mut self, on_event: &mut dyn FnMut(&JobEvent<'_>)) {
        for i in 0..self.ranks.len() {
            let rank = rank_u32(i);
            let Some(r) = self.ranks.get_mut(i) else {
                continue;
            };
            if r.status.is_some() {
                continue;
            }
            let status = match r.child.try_wait() {
                Ok(Some(status)) => status,
                Ok(None) => continue,
                // ECHILD: someone else reaped it; nothing more to learn.
                Err(_) => ExitStatus::from_raw(0),
            };
            r.status = Some(status);
            if !status.success() {
                let kind = match (status.code(), status.signal()) {
                    (Some(code), _) => FailureKind::Exited(code),
                    (None, Some(signal)) => FailureKind::Signaled(signal),
                    (None, None) => FailureKind::Exited(-1),
                };
                self.fail(rank, kind, on_event);
            }
            // Once stopping, the connections are closed: nobody waits.
            if self.stopping.is_none() {
                let notices = self.server.exited(rank);
                self.handle_notices(notices, on_event);
                self.flush_replies();
            }
        }
    }

    /// Waits for every rank still running (after they were killed).
    fn reap_all_blocking(&mut self) {
        for r in &mut self.ranks {
            if r.status.is_none() {
                r.status = r.child.wait().ok();
            }
        }
    }
}
