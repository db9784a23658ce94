//! perf.data: the reader, and the writer as its round-trip oracle (see `targets::perf_data`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tracemill_fuzz::targets::perf_data(data));
