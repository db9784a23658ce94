//! PSB sync and ring streams against their rotated copy (see `targets::sync_ring`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tracemill_fuzz::targets::sync_ring(data));
