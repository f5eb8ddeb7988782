//! `fireopal`: the host runtime a communication library is built on.
//!
//! A runtime (an OpenSHMEM or MPI layer, a test program) starts with
//! [`Runtime::init`], which joins the job and owns everything below, and
//! programs against [`p2p`]: communicators and tagged point-to-point
//! messages (`send`/`recv`, `isend`/`irecv` with requests, probes,
//! `dup`/`split`/`create`). Underneath are six modules:
//!
//! - [`btl`]: the [`Messenger`](btl::Messenger), active messages and
//!   one-sided transfers between the ranks of a job over every selected
//!   transport. [`init`](btl::Messenger::init) it once on every rank (it is
//!   collective), [`register`](btl::Messenger::register) a handler per tag,
//!   [`send`](btl::Messenger::send), and call
//!   [`progress`](btl::Messenger::progress) until what you wait for has
//!   arrived: handlers run inside it. Memory registered with
//!   [`register_memory`](btl::Messenger::register_memory) can be the target
//!   of [`put`](btl::Messenger::put) and [`get`](btl::Messenger::get).
//! - [`bootstrap`]: [`Bootstrap::init`](bootstrap::Bootstrap::init) gives
//!   this process's rank, the job's size, the ranks on its node, the job key
//!   and a key-value store with fences and barriers, under `fireopal run`,
//!   Hydra or Slurm (PMI-1), or alone as a singleton. [`bootstrap::launch`]
//!   starts a job of local processes.
//! - [`memheap`]: the [`SymmetricHeap`](memheap::SymmetricHeap), a segment
//!   of the same size on every rank where the same calls give the same
//!   offsets.
//! - [`memory`]: the memory monitor that tells the messenger's
//!   registration cache when registered memory leaves the process
//!   (userfaultfd), and which monitor runs and why.
//! - [`param`]: typed parameters; a value comes from `--param name=value`,
//!   then `FIREOPAL_<NAME>`, then the default.
//! - [`shmem`]: one-sided operations on the symmetric heap with
//!   OpenSHMEM semantics (put, get, atomics, `quiet`, `fence`, barrier),
//!   from [`Runtime::shmem`].
//! - [`plugin`]: discovery, loading and selection of components (the
//!   transports, the heap allocators). [`Registry::open`](plugin::Registry::open)
//!   is a runtime's first call after the bootstrap; the messenger and the
//!   heap are made from the registry.
//!
//! Every rank of a job runs the same code:
//!
//! ```no_run
//! use std::cell::Cell;
//! use std::rc::Rc;
//!
//! use fireopal::bootstrap::Bootstrap;
//! use fireopal::btl::{Incoming, Messenger};
//! use fireopal::plugin::{Options, Registry};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! const HELLO: u8 = 1;
//!
//! let mut boot = Bootstrap::init()?;
//! let options = Options {
//!     job: boot.job_info(),
//!     ..Options::default()
//! };
//! let registry = Registry::open(&options)?;
//! let mut messenger = Messenger::init(&registry, &mut boot)?;
//!
//! // Handlers only record what arrived: they cannot send.
//! let arrived = Rc::new(Cell::new(0));
//! let count = Rc::clone(&arrived);
//! messenger.register(HELLO, move |m: &Incoming<'_>| {
//!     count.set(count.get() + m.payload.len());
//! })?;
//! // A message for a tag with no handler is dropped (and counted): every
//! // rank installs its handlers before anyone sends.
//! boot.barrier()?;
//!
//! let next = (messenger.rank() + 1) % messenger.size();
//! messenger.send(next, HELLO, &[], b"hello")?;
//! // Until our message has arrived and what we sent has left the
//! // transports (a socket may hold part of it).
//! while arrived.get() == 0 || !messenger.drained() {
//!     messenger.progress()?;
//! }
//!
//! boot.barrier()?;
//! drop(messenger);
//! boot.finalize()?;
//! # Ok(())
//! # }
//! ```
//!
//! The `fireopal` command (`fireopal run`, `info`, `bench`, `conformance`)
//! is a client of this library and is not part of it.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod bootstrap;
pub mod btl;
pub mod memheap;
pub mod memory;
pub mod p2p;
pub mod param;
pub mod plugin;
mod runtime;
pub mod shmem;

pub use runtime::{Runtime, RuntimeError};
