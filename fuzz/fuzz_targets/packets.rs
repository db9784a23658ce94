//! Packet layer: `PacketReader` over arbitrary bytes (see `targets::packets`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tracemill_fuzz::targets::packets(data));
