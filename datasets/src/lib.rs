//! # tracemill-datasets
//!
//! tracemill's model of the RTIT hardware and the traces it makes. No RTIT hardware is at
//! hand and no public RTIT traces exist, so tracemill makes its own, faithfully, from real
//! program executions:
//! - [`exec`]: execution sources (qemu-user capture of real programs, synthetic walks);
//! - [`collected`]: streams laid out as collected (ToPA dumps, trace-hub captures; their
//!   readers are `tracemill_input::collected`);
//! - [`perf_data`]: Intel PT streams wrapped in perf.data, as `perf record` stores them;
//! - [`pt_encode`]: executions encoded as Intel PT, with their ground truth;
//! - [`pt_timing`]: the clocks of such an execution and the timing packets they make;
//! - [`rng`]: the seeded generator behind every random choice.

pub mod collected;
pub mod encode;
pub mod exec;
pub mod kernel;
pub mod model;
pub mod perf_data;
pub mod pt_encode;
pub mod pt_timing;
pub mod rng;
pub mod samples;
pub mod scenarios;
