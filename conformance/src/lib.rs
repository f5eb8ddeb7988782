//! The contract suites of fireopal, for the project's own components and
//! for anyone who writes one.
//!
//! - [`transport`] (feature `abi`, on by default) checks a BTL component
//!   at the level of [`fireopal_abi::btl::Transport`]: it opens one module
//!   per rank of a job in the calling process, each with a [`TestHost`],
//!   and drives them from one thread. A plugin crate runs it from its own
//!   `cargo test` with one line:
//!
//!   ```text
//!   fireopal_conformance::transport_suite!(
//!       MyComponent,
//!       fireopal_conformance::Setup::ranks(2)
//!           .param("btl_my_if_include", ParamValue::Str("lo".into()))
//!   );
//!   ```
//!
//!   Only the plugin interface is needed: an out-of-tree plugin adds
//!   `fireopal-conformance = { version = "...", default-features = false,
//!   features = ["abi"] }` to its dev-dependencies.
//! - `messenger` (feature `messenger`) checks a component through the host
//!   library's messenger on every rank of a `fireopal run` job, with the
//!   plugin loaded from its shared library as a runtime would load it;
//!   `fireopal conformance` runs it.

#[cfg(feature = "abi")]
pub mod host;
#[cfg(feature = "abi")]
pub mod job;
#[cfg(feature = "messenger")]
pub mod messenger;
#[cfg(feature = "abi")]
pub mod pattern;
#[cfg(feature = "abi")]
pub mod recorder;
#[cfg(feature = "abi")]
pub mod transport;

#[cfg(feature = "abi")]
pub use host::TestHost;
#[cfg(feature = "abi")]
pub use job::{Failure, Job, Proc, Setup};
#[cfg(feature = "abi")]
pub use recorder::Recorder;

/// How a case ended when it did not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every check held.
    Passed,
    /// The component does not offer what the case checks (the contract
    /// allows it); why.
    NotApplicable(String),
}
