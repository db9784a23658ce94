//! `tracemill report`, one file per report: hotspots against the truth, flame graph totals
//! and stacks, drcov and lcov read back (drcov by a reader written here from the published
//! format, lcov by genhtml), the timeline's JSON, the HTML page in headless Chromium, diff,
//! pprof, symbols, and bad input. `setup.rs` holds what they share.

#[path = "../common/mod.rs"]
mod common;
mod setup;

mod bad_input;
mod coverage;
mod diff;
mod flamegraph;
mod hotspots;
mod html;
mod pprof;
mod symbols;
mod timeline;
