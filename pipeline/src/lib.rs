//! # tracemill
//!
//! The tracemill pipeline and command line: load a trace bundle (memory-mapped), cut the
//! trace into chunks at PSBs, decode chunk bodies on a thread pool, stitch them in order,
//! and stream the rows to Parquet (or Arrow IPC) files.
//!
//! - [`allocator`]: the global allocator's settings (mimalloc), for every program of tracemill;
//! - [`cli`]: checks of option values, shared by the subcommands and Python, and the
//!   command line's flag groups (feature `cli`, on by default: clap; Python builds without it);
//! - [`run`]: the parallel decode and the closing summary;
//! - [`stream`]: the decoded tables handed to a consumer as Arrow batches (Python);
//! - [`dump`]: the packet listing;
//! - [`errors`]: error messages on one line;
//! - [`ingest`]: many bundles into one partitioned dataset (local or S3), exactly once;
//! - [`synth`]: making bundles (real programs, synthetic walks, spec scenarios);
//! - `report`: the `report` commands (feature `cli`; the work is in `tracemill-reports`).

pub mod allocator;
pub mod cli;
pub mod dump;
pub mod errors;
pub mod ingest;
#[cfg(feature = "cli")]
pub mod report;
pub mod run;
pub mod stream;
pub mod synth;
