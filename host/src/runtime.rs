//! [`Runtime`]: the front door. One value that joins the job and owns, in
//! the order they are made and closed in reverse, the bootstrap, the
//! component registry, the messenger with its point-to-point layer, the
//! symmetric heap, and the one-sided layer on it.

use std::fmt;

use crate::bootstrap::{self, Bootstrap, WireError};
use crate::btl::{self, Messenger, SegmentHandle, SendError};
use crate::memheap::{self, SymmetricHeap};
use crate::p2p::{Communicator, P2p, P2pError};
use crate::plugin::{DiscoveryError, Options, Registry};
use crate::shmem::{self, Shmem, ShmemError};

/// Why [`Runtime::init`] or [`Runtime::finalize`] failed, by step.
#[derive(Debug)]
pub enum RuntimeError {
    /// Joining the job.
    Bootstrap(bootstrap::InitError),
    /// Discovering and selecting components.
    Components(DiscoveryError),
    /// Opening the transports and exchanging their addresses.
    Messenger(btl::InitError),
    /// Making the symmetric heap.
    Heap(memheap::InitError),
    /// Handing the symmetric heap to the transports.
    HeapRegistration(SendError),
    /// Starting or finishing the one-sided layer.
    Shmem(ShmemError),
    /// Finishing the point-to-point traffic before closing.
    P2p(P2pError),
    /// The barrier or leaving the job at finalize.
    Finalize(WireError),
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bootstrap(e) => write!(f, "joining the job: {e}"),
            Self::Components(e) => write!(f, "selecting components: {e}"),
            Self::Messenger(e) => write!(f, "starting the transports: {e}"),
            Self::Heap(e) => write!(f, "making the symmetric heap: {e}"),
            Self::HeapRegistration(e) => write!(f, "registering the symmetric heap: {e}"),
            Self::Shmem(e) => write!(f, "one-sided layer: {e}"),
            Self::P2p(e) => write!(f, "finishing point-to-point traffic: {e}"),
            Self::Finalize(e) => write!(f, "leaving the job: {e}"),
        }
    }
}

impl std::error::Error for RuntimeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Bootstrap(e) => Some(e),
            Self::Components(e) => Some(e),
            Self::Messenger(e) => Some(e),
            Self::Heap(e) => Some(e),
            Self::HeapRegistration(e) => Some(e),
            Self::Shmem(e) => Some(e),
            Self::P2p(e) => Some(e),
            Self::Finalize(e) => Some(e),
        }
    }
}

/// One process of a job, ready to communicate. Every rank calls
/// [`Runtime::init`] (it is collective) and ends with
/// [`Runtime::finalize`].
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut rt = fireopal::Runtime::init()?;
/// let world = rt.world();
/// let next = (world.rank() + 1) % world.size();
/// let prev = (world.rank() + world.size() - 1) % world.size();
/// let p2p = rt.p2p();
/// let req = p2p.irecv(&world, fireopal::p2p::Source::Rank(prev), fireopal::p2p::Tag::Tag(0), vec![0u8; 4]);
/// p2p.send(&world, next, 0, &world.rank().to_le_bytes())?;
/// let (buf, status) = p2p.wait(req)?;
/// assert_eq!((status.source, buf), (prev, prev.to_le_bytes().to_vec()));
/// rt.finalize()?;
/// # Ok(())
/// # }
/// ```
pub struct Runtime {
    // Dropped in field order: the heap's registration before the
    // transports, the transports before the heap they may map, all of
    // them before the job is left.
    shmem: shmem::State,
    heap_registration: Option<SegmentHandle>,
    p2p: P2p,
    heap: SymmetricHeap,
    registry: Registry,
    boot: Bootstrap,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("rank", &self.boot.rank())
            .field("size", &self.boot.size())
            .field("heap", &self.heap)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Joins the job (PMI-1 under `fireopal run`, Hydra or Slurm, or a
    /// singleton), with parameters from the environment.
    pub fn init() -> Result<Runtime, RuntimeError> {
        Self::init_with(Options::default())
    }

    /// Like [`init`](Self::init), with `--param`-style settings in
    /// `options.command_line` (its `job` is filled from the bootstrap).
    pub fn init_with(options: Options) -> Result<Runtime, RuntimeError> {
        let boot = Bootstrap::init().map_err(RuntimeError::Bootstrap)?;
        Self::with_bootstrap(boot, options)
    }

    /// Like [`init_with`](Self::init_with), in a job this process has
    /// already joined with `boot` (collective as well).
    pub fn with_bootstrap(
        mut boot: Bootstrap,
        mut options: Options,
    ) -> Result<Runtime, RuntimeError> {
        options.job = boot.job_info();
        let registry = Registry::open(&options).map_err(RuntimeError::Components)?;
        let messenger = Messenger::init(&registry, &mut boot).map_err(RuntimeError::Messenger)?;
        let heap = SymmetricHeap::init(&registry, &options).map_err(RuntimeError::Heap)?;
        let mut p2p = P2p::new(messenger, registry.params());
        let heap_registration = Some(
            p2p.messenger()
                .register_symmetric_heap(&heap)
                .map_err(RuntimeError::HeapRegistration)?,
        );
        let off = |name| {
            matches!(
                registry.params().value(name),
                Some(fireopal_abi::param::ParamValue::Bool(false))
            )
        };
        let (direct, rdma) = (!off("shmem_direct"), !off("shmem_rdma"));
        let put_batch = match registry.params().value("shmem_put_batch") {
            Some(fireopal_abi::param::ParamValue::Size(n)) => {
                usize::try_from(*n).unwrap_or(usize::MAX)
            }
            _ => shmem::DEFAULT_PUT_BATCH,
        };
        let shmem = shmem::State::init(p2p.messenger(), &heap, &mut boot, direct, rdma, put_batch)
            .map_err(RuntimeError::Shmem)?;
        Ok(Runtime {
            shmem,
            heap_registration,
            p2p,
            heap,
            registry,
            boot,
        })
    }

    /// This process's rank in the job.
    pub fn rank(&self) -> u32 {
        self.boot.rank()
    }

    /// Number of processes in the job.
    pub fn size(&self) -> u32 {
        self.boot.size()
    }

    /// The communicator of the whole job.
    pub fn world(&self) -> Communicator {
        self.p2p.world()
    }

    /// Tagged point-to-point messaging and communicators.
    pub fn p2p(&mut self) -> &mut P2p {
        &mut self.p2p
    }

    /// Active messages and one-sided operations.
    pub fn messenger(&mut self) -> &mut Messenger {
        self.p2p.messenger()
    }

    /// The symmetric heap (registered with the transports).
    pub fn heap(&self) -> &SymmetricHeap {
        &self.heap
    }

    /// One-sided operations on the symmetric heap (OpenSHMEM semantics).
    /// Its waits use the point-to-point layer's stall limit.
    pub fn shmem(&mut self) -> Shmem<'_> {
        let stall = self.p2p.stall_limit();
        Shmem {
            m: self.p2p.messenger(),
            heap: &self.heap,
            boot: &mut self.boot,
            st: &mut self.shmem,
        }
        .with_stall(stall)
    }

    /// The components and parameters.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The job's key-value exchange and barrier.
    pub fn bootstrap(&mut self) -> &mut Bootstrap {
        &mut self.boot
    }

    /// Closes in order: waits until everything sent has left (see
    /// [`Messenger::drained`](crate::btl::Messenger::drained)), meets
    /// every rank at a barrier (so that no rank closes its transports while
    /// a peer still reads from it), unregisters the heap, closes the
    /// transports and the heap, and leaves the job. Collective.
    pub fn finalize(mut self) -> Result<(), RuntimeError> {
        let stall = self.p2p.stall_limit();
        self.shmem
            .finalize(self.p2p.messenger(), stall)
            .map_err(RuntimeError::Shmem)?;
        let drained = {
            let m = self.p2p.messenger();
            match stall {
                Some(limit) => m.wait_until(|m| m.drained(), limit),
                None => loop {
                    if m.drained() {
                        break Ok(());
                    }
                    if let Err(e) = m.progress() {
                        break Err(btl::WaitError::Progress(e));
                    }
                },
            }
        };
        drained.map_err(|e| match e {
            btl::WaitError::Stalled { limit } => RuntimeError::P2p(P2pError::Stalled { limit }),
            btl::WaitError::Progress(e) => RuntimeError::P2p(P2pError::Progress(Box::new(e))),
        })?;
        self.boot.barrier().map_err(RuntimeError::Finalize)?;
        if let Some(handle) = self.heap_registration.take() {
            // The transports are closed next; a refusal here changes nothing.
            let _ = self.p2p.messenger().unregister_segment(handle);
        }
        let Runtime {
            p2p,
            heap,
            registry,
            boot,
            ..
        } = self;
        drop(p2p);
        drop(heap);
        drop(registry);
        boot.finalize().map_err(RuntimeError::Finalize)
    }
}
