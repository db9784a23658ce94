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

pub mod targets;
