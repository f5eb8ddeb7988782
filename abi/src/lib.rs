//! `fireopal-abi`: the stable interface between the fireopal host and its
//! plugins.
//!
//! A plugin is a `cdylib` named `libfireopal_<framework>_<component>.so`
//! that exports one root module made with [`abi_stable`]:
//!
//! - [`btl::BtlComponent`] for byte transfer layers (tcp, shm, verbs, ...);
//! - [`memheap::MemheapComponent`] for symmetric-heap allocators.
//!
//! Both root modules carry the component's name and version, a function
//! that registers its parameters with the host ([`param::ParamRegistry`]),
//! `query` (is the component usable here, and at what priority) and `open`
//! (build the module trait object). The host hands its services in as a
//! trait object ([`host::HostServices`]), so plugins never link against the
//! host.
//!
//! Plugin authors do not touch the FFI types directly: they implement the
//! plain Rust traits [`btl::Transport`] / [`memheap::Allocator`] and
//! [`btl::BtlComponentImpl`] / [`memheap::MemheapComponentImpl`], and
//! export with [`export_btl_component!`] / [`export_memheap_component!`].
//! The adapters generated there wrap every entry point in
//! `catch_unwind`: a panic becomes a [`PluginError`] of kind
//! [`ErrorKind::PANICKED`] and poisons the module instead of aborting the
//! process.
//!
//! # What the host guarantees, and expects
//!
//! Each method's doc comment holds its contract; these points cut across
//! them:
//!
//! - **Peers.** [`btl::Transport::add_peers`] receives every rank that
//!   published an address for the module, the process's own rank
//!   included.
//! - **`sendi`.** `Sent` means the module took the whole message, not
//!   that every byte left: it may keep the rest and send it from
//!   `progress` ([`btl::Transport::sendi`]).
//! - **Lifetime.** There is no close call. Modules are dropped with the
//!   host object that owns them (the messenger, the symmetric heap), and
//!   plugin libraries are never unloaded ([`btl::Transport`],
//!   [`memheap::Allocator`]).
//! - **Removed peers.** [`btl::Transport::remove_peer`] has no event
//!   sink: the failed completions of the peer's pending operations are
//!   reported by the next `progress` calls.
//! - **Errors.** An error (or a panic) from `open` leaves the component
//!   out of the job, and one from `progress` closes the module: the host
//!   routes its peers over the next module that reaches them. Only a
//!   component the user named in an include list is required to open
//!   ([`btl::BtlComponentImpl::open`], [`btl::Transport`]).
//! - **The job key.** [`host::JobInfo::job_key`] is a random secret shared
//!   by the ranks of one job. A transport that accepts connections proves
//!   a peer holds it without sending it: HMAC-SHA256 over a nonce the
//!   other side chose. The helpers are in the `fireopal-core` crate (no
//!   dependency of this one): `fireopal_core::auth` (`hmac_sha256`,
//!   `HmacSha256`, `tags_equal`, which compares in constant time), and
//!   `fireopal_core::wire::tcp::handshake` is tcp's handshake built on them.
//!
//! # Evolution
//!
//! Root modules are `abi_stable` prefix types and the module traits are
//! `#[sabi_trait]`s: new fields and methods are only ever appended (after
//! `last_prefix_field`, with defaults). This crate stays on one `0.x` minor
//! per interface generation; a plugin built against another minor than
//! the host's is refused, an older one by abi_stable's version check, a
//! newer one by its layout check (the types' package versions differ). Within a generation, a plugin built
//! against a later release (with methods appended) loads into an earlier
//! host; a plugin built before an append is refused by a host that has it
//! ("incompatible interface: ... field counts differ (this host: 18, the
//! plugin: 16); rebuild the plugin against fireopal-abi 0.1.0").
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod btl;
mod error;
pub mod export;
pub mod host;
pub mod memheap;
pub mod param;

pub use error::{ErrorKind, PluginError};

/// Re-export for the export macros; plugin crates still need `abi_stable`
/// as a direct dependency because `#[export_root_module]` names it by its
/// absolute path.
pub use abi_stable;

/// Version of a component, reported by `fireopal info`.
#[repr(C)]
#[derive(abi_stable::StableAbi, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ComponentVersion {
    /// Incompatible changes.
    pub major: u16,
    /// Compatible additions.
    pub minor: u16,
    /// Fixes.
    pub patch: u16,
}

impl ComponentVersion {
    /// Builds a version from its three parts.
    pub const fn new(major: u16, minor: u16, patch: u16) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }
}

impl core::fmt::Display for ComponentVersion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Answer of a component's `query`: may it be used in this job, and how
/// much is it preferred.
#[repr(u8)]
#[derive(abi_stable::StableAbi, Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// Usable; higher priority wins (memheap) or ranks first (btl).
    Available {
        /// Priority, larger is preferred.
        priority: u32,
    },
    /// Not usable here, with the reason shown by `fireopal info`.
    Unavailable {
        /// Human-readable reason, e.g. "no InfiniBand device".
        reason: abi_stable::std_types::RString,
    },
    /// Usable, with a note `fireopal info` shows beside the priority (a
    /// path declined, a limit in force).
    AvailableWithNote {
        /// Priority, larger is preferred.
        priority: u32,
        /// What `fireopal info` shows.
        note: abi_stable::std_types::RString,
    },
}

/// The version of this interface crate, as abi_stable checks it.
pub const INTERFACE_VERSION: &str = env!("CARGO_PKG_VERSION");
