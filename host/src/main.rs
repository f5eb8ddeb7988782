//! The `fireopal` command.
fn main() {}
