//! A job of several ranks in one process: one host and one module per
//! rank, every module driven from the calling thread. Nothing runs
//! unless a case calls `progress`, so a case decides every interleaving
//! it needs; every wait is bounded by the stall limit.

use std::fmt;
use std::time::{Duration, Instant};

use fireopal_abi::btl::{
    BtlAttributes, BtlComponentImpl, PeerAddress, Rank, Reachability, Transport,
};
use fireopal_abi::host::JobInfo;
use fireopal_abi::param::ParamValue;

use crate::host::{fresh_job_key, Logs, TestHost};
use crate::recorder::Recorder;

/// How one component is instantiated for the suite.
#[derive(Debug, Clone)]
pub struct Setup {
    ranks: u32,
    params: Vec<(String, ParamValue)>,
    stall_limit: Duration,
}

impl Setup {
    /// Jobs of `ranks` processes, all on one node (at least one).
    pub fn ranks(ranks: u32) -> Self {
        Self {
            ranks: ranks.max(1),
            params: Vec::new(),
            stall_limit: Duration::from_secs(60),
        }
    }

    /// Every rank's host answers `name` with `value`.
    pub fn param(mut self, name: &str, value: ParamValue) -> Self {
        self.params.retain(|(n, _)| n != name);
        self.params.push((name.to_owned(), value));
        self
    }

    /// How long one wait may go on before the case fails (60 s unless
    /// set).
    pub fn stall_limit(mut self, limit: Duration) -> Self {
        self.stall_limit = limit;
        self
    }

    /// Number of ranks of each job.
    pub fn size(&self) -> u32 {
        self.ranks
    }
}

/// Why a case failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure(pub String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}

/// Fails with the message `why` unless `condition` holds.
pub fn ensure(condition: bool, why: impl FnOnce() -> String) -> Result<(), Failure> {
    if condition {
        Ok(())
    } else {
        Err(Failure(why()))
    }
}

/// One rank: its module and everything the module reported.
#[derive(Debug)]
pub struct Proc<M> {
    /// Rank in the job.
    pub rank: Rank,
    /// The component's first module.
    pub module: M,
    /// Its events.
    pub rec: Recorder,
    /// Its log lines.
    pub logs: Logs,
    /// Its attributes, read once after opening.
    pub attributes: BtlAttributes,
}

/// The ranks of a job and which of them reach which.
#[derive(Debug)]
pub struct Job<M> {
    /// The ranks, by rank.
    pub procs: Vec<Proc<M>>,
    reach: Vec<Vec<bool>>,
    stall_limit: Duration,
}

impl<M: Transport> Job<M> {
    /// Opens component `C` once per rank of `setup`, each with its own
    /// host, and keeps each rank's first module. Peers are not added yet.
    pub fn open<C>(setup: &Setup) -> Result<Self, Failure>
    where
        C: BtlComponentImpl<Module = M>,
    {
        let key = fresh_job_key();
        let mut procs = Vec::new();
        for rank in 0..setup.ranks {
            let job = JobInfo {
                rank,
                size: setup.ranks,
                local_rank: rank,
                local_size: setup.ranks,
                job_key: key,
            };
            let host = TestHost::new(job, &setup.params);
            let logs = host.logs();
            let modules = C::open(host.into_host())
                .map_err(|e| Failure(format!("open on rank {rank}: {e}")))?;
            let module = modules
                .into_iter()
                .next()
                .ok_or_else(|| Failure(format!("open on rank {rank} gave no module")))?;
            let attributes = module
                .attributes()
                .map_err(|e| Failure(format!("attributes on rank {rank}: {e}")))?;
            procs.push(Proc {
                rank,
                module,
                rec: Recorder::default(),
                logs,
                attributes,
            });
        }
        let n = procs.len();
        Ok(Self {
            procs,
            reach: vec![vec![false; n]; n],
            stall_limit: setup.stall_limit,
        })
    }

    /// Gives every module every rank's address, its own included, as the
    /// messenger does. Every other rank must be reachable (they all run on
    /// this node); reaching its own rank is the module's choice.
    pub fn connect(&mut self) -> Result<(), Failure> {
        let mut addresses = Vec::new();
        for p in &self.procs {
            let a = p
                .module
                .address()
                .map_err(|e| Failure(format!("address of rank {}: {e}", p.rank)))?;
            addresses.push(a);
        }
        for (i, p) in self.procs.iter_mut().enumerate() {
            let peers: Vec<PeerAddress<'_>> = addresses
                .iter()
                .enumerate()
                .map(|(r, a)| PeerAddress {
                    rank: r as Rank,
                    node_local: true,
                    address: a.as_slice().into(),
                })
                .collect();
            let answers = p
                .module
                .add_peers(&peers)
                .map_err(|e| Failure(format!("add_peers on rank {i}: {e}")))?;
            ensure(answers.len() == peers.len(), || {
                format!(
                    "add_peers on rank {i} answered {} entries for {}",
                    answers.len(),
                    peers.len()
                )
            })?;
            for (r, answer) in answers.iter().enumerate() {
                let reachable = *answer == Reachability::Reachable;
                ensure(reachable || r == i, || {
                    format!("rank {i} cannot reach rank {r} on the same node: {answer:?}")
                })?;
                self.reach[i][r] = reachable;
            }
        }
        Ok(())
    }

    /// Opens and connects a job.
    pub fn connected<C>(setup: &Setup) -> Result<Self, Failure>
    where
        C: BtlComponentImpl<Module = M>,
    {
        let mut job = Self::open::<C>(setup)?;
        job.connect()?;
        Ok(job)
    }

    /// Every ordered pair (sender, receiver) that a message can take,
    /// a rank to itself included when its module reaches itself.
    pub fn pairs(&self) -> Vec<(usize, usize)> {
        let n = self.procs.len();
        (0..n)
            .flat_map(|a| (0..n).map(move |b| (a, b)))
            .filter(|&(a, b)| self.reach[a][b])
            .collect()
    }

    /// One pair to run a two-party case on: rank 0 and rank 1 if the job
    /// has two ranks, else rank 0 and itself.
    pub fn pair(&self) -> Result<(usize, usize), Failure> {
        let pairs = self.pairs();
        pairs
            .iter()
            .copied()
            .find(|&(a, b)| a == 0 && b == 1)
            .or_else(|| pairs.first().copied())
            .ok_or_else(|| Failure("no pair of ranks reach each other".into()))
    }

    /// Calls every module's `progress` once; the events it reported.
    pub fn progress(&mut self) -> Result<usize, Failure> {
        let mut work = 0;
        for p in &mut self.procs {
            work += p
                .module
                .progress(&mut p.rec)
                .map_err(|e| Failure(format!("progress on rank {}: {e}", p.rank)))?;
        }
        Ok(work)
    }

    /// Progresses every rank until `done` holds; fails after the stall
    /// limit.
    pub fn drive(
        &mut self,
        what: &str,
        mut done: impl FnMut(&Self) -> bool,
    ) -> Result<(), Failure> {
        let start = Instant::now();
        while !done(self) {
            let work = self.progress()?;
            ensure(start.elapsed() < self.stall_limit, || {
                format!("timed out waiting for {what}")
            })?;
            if work == 0 {
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// Progresses every rank `rounds` times, for what must *not* happen.
    pub fn settle(&mut self, rounds: usize) -> Result<(), Failure> {
        for _ in 0..rounds {
            if self.progress()? == 0 {
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// Fails if any module completed an operation twice or reported a
    /// failed peer.
    pub fn check_clean(&self) -> Result<(), Failure> {
        for p in &self.procs {
            if let Some(c) = p.rec.repeated_completion() {
                return Err(Failure(format!(
                    "rank {} completed cookie {c} twice",
                    p.rank
                )));
            }
            ensure(p.rec.failed.is_empty(), || {
                format!("rank {} reported failed peers: {:?}", p.rank, p.rec.failed)
            })?;
        }
        Ok(())
    }
}
