//! Run with `cargo run -p example-quickstart`.
fn main() {}
