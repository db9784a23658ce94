//! Differential: the stitched chunked decode against the sequential one. For any input,
//! `decode_all` with one chunk and with chunks of 1, 64 and 4096 bytes (cut at PSBs) must
//! give identical branches, events, timing and coverage. Any difference is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracemill_fuzz::{check_contracts, Case};

fuzz_target!(|data: &[u8]| {
    let Some(case) = Case::parse(data) else { return };
    let seq = case.decode(u64::MAX);
    check_contracts(&seq, case.trace.len() as u64);
    for chunk in [1, 64, 4096] {
        let par = case.decode(chunk);
        assert_eq!(seq.rows, par.rows, "branches differ at chunk size {chunk}");
        assert_eq!(seq.events, par.events, "events differ at chunk size {chunk}");
        assert_eq!(seq.timing_rows, par.timing_rows, "timing differs at chunk size {chunk}");
        assert_eq!(seq.coverage, par.coverage, "coverage differs at chunk size {chunk}");
    }
});
