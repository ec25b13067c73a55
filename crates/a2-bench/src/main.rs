//! a2 benchmarks.
fn main() {}
