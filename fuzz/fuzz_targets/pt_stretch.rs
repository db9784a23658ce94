//! Intel PT: one small input stretched to 256 KiB, bounded re-reads (see `targets::pt_stretch`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tracemill_fuzz::targets::pt_stretch(data));
