//! `bundle.toml` parsing (see `targets::bundle_toml`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tracemill_fuzz::targets::bundle_toml(data));
