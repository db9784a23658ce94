//! Benchmarks live in `benches/` (criterion) and `src/pipeline_bench.rs` (whole pipeline).
