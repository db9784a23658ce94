//! Intel PT packets as the hand-written trace tests (pt_errata.rs, pt_event_trace.rs,
//! pt_paging.rs) build them: IP payloads, 64-bit mode, a PSB+ with tracing on or off.
#![allow(dead_code)] // each test file uses its own part

use tracemill_decode::pt::packet::{ExecMode, IpCompression, IpPayload, Packet};

/// An IP payload with compression `c`.
pub fn ip(compression: IpCompression, bits: u64) -> IpPayload {
    IpPayload { compression, bits }
}

/// A whole (sign-extended 48-bit) IP.
pub fn full(x: u64) -> IpPayload {
    ip(IpCompression::Sext48, x)
}

/// An IP suppressed.
pub fn none() -> IpPayload {
    ip(IpCompression::Suppressed, 0)
}

pub const MODE64: Packet = Packet::ModeExec(ExecMode {
    csl: true,
    csd: false,
    iflag: false,
});

/// A PSB+ saying tracing is on at `at`, in 64-bit mode.
pub fn psb_at(at: u64) -> Vec<Packet> {
    vec![Packet::Psb, MODE64, Packet::Fup(full(at)), Packet::PsbEnd]
}

/// A PSB+ saying tracing is off.
pub fn psb_off() -> Vec<Packet> {
    vec![Packet::Psb, Packet::PsbEnd]
}
