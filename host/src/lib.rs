//! `fireopal`: the std host runtime.
//!
//! - [`param`]: typed parameters (command line > environment > default);
//! - [`plugin`]: plugin discovery, loading and component selection;
//! - [`bootstrap`]: rank, size and key-value exchange for a job;
//! - [`memheap`]: the symmetric heap and its built-in `buddy` allocator;
//! - [`cli`]: the `fireopal` command.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod bootstrap;
pub mod btl;
pub mod cli;
pub mod memheap;
pub mod param;
pub mod plugin;
