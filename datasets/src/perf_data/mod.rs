//! A perf.data writer: Intel PT byte streams (one per CPU) wrapped the way `perf record -e
//! intel_pt//u` stores them, with the sideband a decoder needs (AUXTRACE_INFO, TIME_CONV,
//! COMM, FORK, MMAP2 with build-id, ITRACE_START, AUX, SWITCH_CPU_WIDE, EXIT) and the
//! HEADER_BUILD_ID and HEADER_AUXTRACE features. This machine cannot record Intel PT; files
//! made here are what the reader (`tracemill-perfdata`) and Debian's `perf` are tested on.
//!
//! [`PerfDataWriter`] lays records out byte for byte from the reader's record types (its
//! own encoder: the round trip through the reader, and perf reading the same files, check
//! both sides). [`intel_pt_two_threads`] makes the standard file: two threads of one
//! process, each on its own CPU, each CPU with its own AUX stream.
//!
//! The parts: [`writer`] (the records and features, byte for byte), [`recording`] (what a
//! recording holds: CPUs' stretches, processes, execs, modules, the recording's options)
//! and [`intel_pt`] (such a recording laid out as `perf record` lays it out).

pub mod intel_pt;
pub mod recording;
pub mod writer;

pub use intel_pt::*;
pub use recording::*;
pub use writer::*;
