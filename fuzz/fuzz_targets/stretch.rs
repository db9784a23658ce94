//! Work that follows the content of a long stretch, not its length (see `targets::stretch`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tracemill_fuzz::targets::stretch(data));
