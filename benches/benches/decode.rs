//! Criterion micro-benchmarks of the hot loops (placeholder; filled below).
fn main() {}
