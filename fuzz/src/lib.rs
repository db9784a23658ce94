//! tracemill's fuzz targets (cargo-fuzz, libFuzzer): one per layer, their checks in
//! [`targets`]. See `fuzz/README.md`.

/// `tracemill_datasets::encode`, the hardware model's packet writer (an implementation
/// independent of the parser, hence the round-trip oracle), compiled from its source so
/// that the fuzz build does not pull in Arrow and Parquet through `tracemill-datasets`.
#[path = "../../datasets/src/encode.rs"]
pub mod encode;

/// `tracemill_input::manifest`: `Manifest`, the `bundle.toml` reader, likewise (the
/// input crate maps files and reads perf.data, which the targets do not need). Named
/// `bundle` here, as the targets name it.
#[path = "../../input/src/manifest.rs"]
pub mod bundle;
/// For `collected`, which names the manifest by its own crate's path.
pub use bundle as manifest;

/// `tracemill_input::collected`, the readers of ToPA dumps and trace-hub captures,
/// likewise.
#[path = "../../input/src/collected.rs"]
pub mod collected;

/// `tracemill_datasets::perf_data`, the perf.data writer (the round-trip oracle of the
/// `perf_data` target), likewise.
#[path = "../../datasets/src/perf_data/mod.rs"]
pub mod perf_data;

pub mod targets;

#[cfg(test)]
mod tests;
