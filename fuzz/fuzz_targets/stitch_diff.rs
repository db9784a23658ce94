//! Differential: chunked stitched decode against the sequential one (see `targets::stitch_diff`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tracemill_fuzz::targets::stitch_diff(data));
