//! Intel PT differential: chunked stitched decode against the sequential one (see `targets::pt_stitch_diff`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tracemill_fuzz::targets::pt_stitch_diff(data));
