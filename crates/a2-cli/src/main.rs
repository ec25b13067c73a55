//! The `a2` command-line tool.
fn main() {}
