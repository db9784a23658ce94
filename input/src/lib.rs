//! # tracemill-input
//!
//! Everything tracemill reads a trace from, opened once into what the decoder takes: the
//! trace's bytes in time order, its format and configuration, the code images, and (for
//! a perf.data) the threads and address spaces. The command line, ingestion, the reports
//! and the Python package all open their inputs here, so that the format of an input is
//! decided, and the checks before a decode are made, in one place ([`source`]).
//!
//! - [`source`]: [`Source::open`], a path or bytes with the caller's overrides: the
//!   format decided (given → `bundle.toml` → perf.data magic → file extension → the first
//!   PSB), a mismatch refused, the pre-decode warnings and errors as typed values;
//! - [`manifest`]: `bundle.toml`, the bundle's description (also what the generator,
//!   `tracemill-datasets`, writes);
//! - [`bundle`]: a bundle or bare trace opened: files memory-mapped, a collected form
//!   assembled, images loaded;
//! - [`collected`]: ToPA dumps and trace-hub captures read into a stream;
//! - [`perf`]: perf.data recordings of Intel PT, as traces with their threads, images and
//!   processes' address spaces.

pub mod bundle;
pub mod collected;
pub mod manifest;
pub mod perf;
pub mod source;

pub use source::Source;
