//! Intel PT flow walker: contracts, no panic or hang (see `targets::pt_walk`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tracemill_fuzz::targets::pt_walk(data));
