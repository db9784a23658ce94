//! # tracemill-reports
//!
//! The questions users ask every morning, answered from the tables of a `tracemill decode`
//! output directory and the code images of its bundle:
//!
//! - [`symbols`]: function names (ELF symbol tables) and file:line with inlined frames
//!   (DWARF, through addr2line), one [`symbols::ImageSymbols`] per image;
//! - [`input`]: the output directory, its tables read in projected batches, and the bundle
//!   found through the tables' metadata (or given);
//! - [`parquet_keys`]: Parquet column chunks read as dictionary keys, so that the stack
//!   walk names each distinct address once per row group;
//! - [`dataset`], [`source`]: an ingested dataset's catalog, the `--where` filter, and
//!   the reports over the selected bundles (each with its own images, results added up);
//! - [`hotspots`]: instructions, cycles, branches and calls by function, line or block;
//! - [`stacks`]: call stacks rebuilt from the `call`/`ret` rows, folded stacks and the
//!   flame graph SVG;
//! - [`perf_script`]: the taken branches as `perf script --itrace=b` prints them;
//! - [`pprof`]: the flame graph's stacks as a gzipped pprof profile;
//! - [`coverage`]: drcov (version 2) and lcov exports and a per-function summary;
//! - [`diff`]: two runs compared: hotspots joined, coverage gained and lost;
//! - [`timeline`]: call spans in time as Chrome trace-event JSON;
//! - [`html`]: one self-contained page with all of it.
//!
//! Bad input never panics: a missing table, column or image leaves the part of a report
//! that needs it out, with a warning saying why.

pub mod coverage;
pub mod dataset;
pub mod diff;
pub mod hotspots;
pub mod html;
pub mod input;
pub mod parquet_keys;
pub mod perf_script;
pub mod pprof;
pub mod source;
pub mod stacks;
pub mod symbols;
pub mod timeline;
pub mod util;

pub use input::Input;
pub use source::Source;
