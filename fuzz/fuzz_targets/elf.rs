//! ELF loading and block building (see `targets::elf`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tracemill_fuzz::targets::elf(data));
