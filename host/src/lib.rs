//! `fireopal`: the std host runtime.
//!
//! - [`param`]: typed parameters (command line > environment > default);
//! - [`plugin`]: plugin discovery, loading and component selection;
//! - [`bootstrap`]: rank, size and key-value exchange for a job;
//! - [`cli`]: the `fireopal` command.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod bootstrap;
pub mod btl;
pub mod cli;
pub mod param;
pub mod plugin;
