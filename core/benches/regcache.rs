//! Criterion bench (being written).
fn main() {}
