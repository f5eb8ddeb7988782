//! Typed parameters (being written).
