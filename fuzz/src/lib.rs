//! tracemill's fuzz targets (cargo-fuzz, libFuzzer): one per layer, their checks in
//! [`targets`]. See `fuzz/README.md`.

/// `tracemill_datasets::encode`, the hardware model's packet writer (an implementation
/// independent of the parser, hence the round-trip oracle), compiled from its source so
/// that the fuzz build does not pull in Arrow and Parquet through `tracemill-datasets`.
#[path = "../../datasets/src/encode.rs"]
pub mod encode;

/// `tracemill_datasets::bundle`: `Manifest`, the `bundle.toml` reader, likewise.
#[path = "../../datasets/src/bundle.rs"]
pub mod bundle;

/// `tracemill_datasets::collected` (ToPA dumps and trace-hub captures) and the `rng`
/// its writers use, likewise.
#[path = "../../datasets/src/collected.rs"]
pub mod collected;
#[path = "../../datasets/src/rng.rs"]
pub mod rng;

/// `tracemill_datasets::perf_data`, the perf.data writer (the round-trip oracle of the
/// `perf_data` target), likewise.
#[path = "../../datasets/src/perf_data.rs"]
pub mod perf_data;

pub mod targets;
