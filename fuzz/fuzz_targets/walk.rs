//! The flow walker over fixed real code images (see `targets::walk`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tracemill_fuzz::targets::walk(data));
