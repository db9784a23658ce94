//! The flow walker over fixed real code images (the `jumptable` and `kernel-processes`
//! samples): arbitrary trace bytes behind a PSB, RTIT_CTL and bundle facts from the
//! input's first bytes (see `tracemill_fuzz::Case`). No panic, no hang, memory bounded by
//! the trace, and the output keeps the table contracts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracemill_fuzz::{check_contracts, Case};

fuzz_target!(|data: &[u8]| {
    let Some(case) = Case::parse(data) else { return };
    let d = case.decode(u64::MAX);
    check_contracts(&d, case.trace.len() as u64);
});
