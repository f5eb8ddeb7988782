//! Byte transfer layers living in the host: the built-in `self` BTL.
//!
//! The BTL framework proper (endpoint exchange, per-peer module lists,
//! the active-message API) builds on these and on plugin modules alike.

pub mod self_btl;
