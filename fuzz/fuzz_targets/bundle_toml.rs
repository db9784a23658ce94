//! `bundle.toml`: arbitrary text parsed as a `Manifest` the way `Manifest::load` does
//! (`toml::from_str`). No panic; a manifest that parses serializes (`to_toml` must not hit
//! its `expect`), reads back to the same text, and its facts turn into a trace
//! configuration, timing configuration and stream view as `pipeline/src/bundle.rs` does.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tracemill_fuzz::bundle::{parse_u64, Manifest};
use tracemill_decode::stream::TraceStream;
use tracemill_decode::sync::find_psbs;
use tracemill_decode::timing::TimingConfig;
use tracemill_decode::TraceConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = parse_u64(text);
    let Ok(m) = toml::from_str::<Manifest>(text) else { return };
    let t1 = m.to_toml();
    let m2: Manifest = toml::from_str(&t1).unwrap_or_else(|e| panic!("{t1}\ndoes not read back: {e}"));
    assert_eq!(m2.to_toml(), t1, "manifest text is not stable");
    let cfg = TraceConfig::from_ctl(m.rtit_ctl);
    let _ = cfg.reserved_bits();
    let _ = TimingConfig::new(&cfg, m.guaranteed_ratio, m.ring_offset.is_none());
    let _ = m.trace_path(std::path::Path::new("bundle"));
    let trace = [0xC0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0x55];
    let stream = match m.ring_offset {
        Some(r) => TraceStream::ring(&trace, r as usize),
        None => TraceStream::linear(&trace),
    };
    assert_eq!(find_psbs(&stream).len(), 1);
});
