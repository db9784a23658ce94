//! The Intel PT packet layer and listing (see `targets::pt_packets`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tracemill_fuzz::targets::pt_packets(data));
