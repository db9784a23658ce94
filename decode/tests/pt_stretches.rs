//! Long Intel PT stretches without a PSB, where every packet makes the front end look
//! ahead: the work stays proportional to the trace. Each OVF looks ahead for its FUP
//! (SDM 36.4.2.16, libipt's `pt_evt_find_ovf_fup`); a look-ahead reader that searched
//! from its start on to the next PSB made OVFs back to back quadratic (1 MiB took 25 s,
//! 4 MiB 353 s). Counted, not timed: the bytes the PSB searches scan
//! (`stream::bytes_searched_on_this_thread`).

use tracemill_decode::chunk::{decode_all, Input};
use tracemill_decode::image::ImageSet;
use tracemill_decode::pt::packet::PSB_BYTES;
use tracemill_decode::pt::PtConfig;
use tracemill_decode::stream::{bytes_searched_on_this_thread, TraceStream};
use tracemill_schemas::EventKind;

/// A PSB+ (PSB, PSBEND), then `n` copies of `unit`.
fn stretch(unit: &[u8], n: usize) -> Vec<u8> {
    let mut t = PSB_BYTES.to_vec();
    t.extend_from_slice(&[0x02, 0x23]);
    for _ in 0..n {
        t.extend_from_slice(unit);
    }
    t
}

fn check(what: &str, trace: &[u8], events: EventKind, want: usize) {
    let stream = TraceStream::linear(trace);
    let images = ImageSet::new();
    let cfg = PtConfig::default();
    let input = Input::pt(&stream, &images, cfg);
    let len = trace.len() as u64;
    for chunk in [u64::MAX, 4096] {
        let before = bytes_searched_on_this_thread();
        let d = decode_all(&input, chunk);
        let searched = bytes_searched_on_this_thread() - before;
        let n = d.events.iter().filter(|e| e.kind == events).count();
        assert_eq!(n, want, "{what}, chunks of {chunk}: {events:?} events");
        assert!(
            searched <= 4 * len + (64 << 10),
            "{what}, chunks of {chunk}: PSB searches scanned {searched} bytes of a {len}-byte trace"
        );
    }
}

#[test]
fn sdm_36_4_2_16_ovf_back_to_back_without_psb_searches_each_byte_a_few_times() {
    let n = 50_000;
    check("OVFs", &stretch(&[0x02, 0xF3], n), EventKind::Overflow, n);
}

#[test]
fn ovf_fup_pairs_and_pads_without_psb_search_each_byte_a_few_times() {
    // OVF, a PAD, then its FUP (IPBytes 011: a whole IP, so the look-ahead finds it),
    // over and over.
    let n = 20_000;
    let unit = [0x02, 0xF3, 0x00, 0x7D, 0x00, 0x10, 0x40, 0x00, 0x00, 0x00];
    check("OVF+FUP", &stretch(&unit, n), EventKind::Overflow, n);
}
