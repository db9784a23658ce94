//! The memoized walk (`decode/src/memo.rs`) against the step walk, its reference: every
//! committed sample (RTIT, real executions under qemu and synthetic ones), Intel PT
//! encodings of walks over busybox with every encoder option, and random traces (walks
//! with random settings, then random bytes damaged) decode to exactly the same branches,
//! events, timing facts, timing table, coverage and fallbacks both ways, sequentially and
//! in chunks.
//!
//! Decodes that keep no row ([`tracemill_decode::tally`]: `--tables events` or
//! `coverage,edges` without `branches`) are checked here too, on the same traces: their
//! counts, events, timing table and coverage equal the full decode's, both ways.

mod common;

use common::*;
use proptest::prelude::*;
use tracemill_datasets::exec::synthetic::{Code, WalkConfig};
use tracemill_datasets::model::{Model, ModelOptions};
use tracemill_datasets::pt_encode::{encode_execution, PtOptions, PtOverflow};
use tracemill_decode::block::memo::step_walk_only;
use tracemill_decode::chunk::{decode_all, tally_all, Decoded, Input, PieceStats, Tallied};
use tracemill_decode::front::Format;
use tracemill_decode::image::ImageSet;
use tracemill_decode::pt::PtConfig;
use tracemill_decode::rtit::clock::TimingConfig;
use tracemill_decode::rtit::config::{ctl, TraceConfig};
use tracemill_decode::stream::TraceStream;
use tracemill_decode::tally::{Counted, Covered};
use tracemill_input::bundle::Bundle;

/// Everything two decodes produce is the same (the first difference is named).
fn same(what: &str, memo: &Decoded, step: &Decoded) {
    let (a, b) = (&memo.rows, &step.rows);
    if a != b {
        let i = (0..a.len().min(b.len()))
            .find(|&i| a.row(i) != b.row(i))
            .unwrap_or(a.len().min(b.len()));
        panic!(
            "{what}: branches differ, {} rows (memo) against {} (step), first at row {i}: \
             {:x?} against {:x?}",
            a.len(),
            b.len(),
            (i < a.len()).then(|| a.row(i)),
            (i < b.len()).then(|| b.row(i)),
        );
    }
    if memo.events != step.events {
        let (a, b) = (&memo.events, &step.events);
        let i = (0..a.len().min(b.len()))
            .find(|&i| a[i] != b[i])
            .unwrap_or(a.len().min(b.len()));
        panic!(
            "{what}: events differ, first at {i}: {:?} against {:?}",
            a.get(i),
            b.get(i)
        );
    }
    assert_eq!(memo.timing, step.timing, "{what}: timing facts");
    assert_eq!(memo.timing_rows, step.timing_rows, "{what}: timing table");
    assert_eq!(memo.coverage, step.coverage, "{what}: coverage");
    assert_eq!(memo.fallbacks, step.fallbacks, "{what}: fallbacks");
    assert_eq!(memo.marks_handled, step.marks_handled, "{what}: marks");
}

/// A full decode, and the two that keep no row, of one trace.
struct Decodes {
    full: Decoded,
    counted: Tallied,
    covered: Tallied,
}

fn decodes<F: Format>(input: &Input<'_, F>, chunk: u64) -> Decodes {
    Decodes {
        full: decode_all(input, chunk),
        counted: tally_all::<F, Counted>(input, chunk),
        covered: tally_all::<F, Covered>(input, chunk),
    }
}

/// The decodes that keep no row find what the full decode finds.
fn tallies_agree(what: &str, d: &Decodes) {
    let f = &d.full;
    // The rows' counts, and the instructions after the last row (the `tail` event).
    let mut stats = PieceStats::of(&f.rows);
    stats.insns += f
        .events
        .iter()
        .filter(|e| e.kind == tracemill_schemas::EventKind::Tail)
        .map(|e| e.detail.parse::<u64>().expect("a count"))
        .sum::<u64>();
    assert_eq!(f.stats, stats, "{what}: counts of the full decode");
    for (name, t) in [("counted", &d.counted), ("covered", &d.covered)] {
        assert_eq!(t.stats, stats, "{what}: {name}: counts");
        assert_eq!(t.events, f.events, "{what}: {name}: events");
        assert_eq!(t.timing_rows, f.timing_rows, "{what}: {name}: timing table");
        assert_eq!(t.fallbacks, f.fallbacks, "{what}: {name}: fallbacks");
    }
    assert_eq!(
        d.covered.coverage, f.coverage,
        "{what}: coverage without rows"
    );
    assert!(
        d.counted.coverage.is_empty(),
        "{what}: coverage not asked for"
    );
}

/// `decode` both ways at each chunk size; the rows compared, summed.
fn both_ways(what: &str, chunks: &[u64], decode: impl Fn(u64) -> Decodes) -> usize {
    let mut rows = 0;
    for &chunk in chunks {
        let memo = decode(chunk);
        let step = step_walk_only(|| decode(chunk));
        let what = format!("{what}, chunk {chunk}");
        same(&what, &memo.full, &step.full);
        tallies_agree(&format!("{what} (memo)"), &memo);
        tallies_agree(&format!("{what} (step)"), &step);
        rows += memo.full.rows.len();
    }
    rows
}

fn busybox() -> Vec<u8> {
    std::fs::read(samples_dir().join("busybox-sort/images/busybox")).unwrap()
}

fn busybox_images(elf: &[u8]) -> ImageSet<'_> {
    let mut images = ImageSet::new();
    images.add_elf("busybox", elf, None, None).unwrap();
    images
}

fn decode_pt(images: &ImageSet<'_>, bytes: &[u8], ret_compression: bool, chunk: u64) -> Decodes {
    let stream = TraceStream::linear(bytes);
    let cfg = PtConfig {
        ret_compression,
        ..PtConfig::default()
    };
    decodes(&Input::pt(&stream, images, cfg), chunk)
}

fn decode_rtit(images: &ImageSet<'_>, bytes: &[u8], ctl: u64, chunk: u64) -> Decodes {
    let stream = TraceStream::linear(bytes);
    let cfg = TraceConfig::from_ctl(ctl);
    let input = Input::<tracemill_decode::Rtit> {
        spaces: None,
        stream: &stream,
        images,
        cfg,
        timing: TimingConfig::new(&cfg, Some(20), true),
    };
    decodes(&input, chunk)
}

fn decode_bundle(b: &Bundle, chunk: u64) -> Decodes {
    assert!(b.image_set().1.is_empty(), "{:?}", b.image_set().1);
    let (images, _) = b.image_set();
    let stream = b.stream();
    let input = Input::<tracemill_decode::Rtit> {
        spaces: None,
        stream: &stream,
        images: &images,
        cfg: b.trace_config(),
        timing: b.timing_config(),
    };
    decodes(&input, chunk)
}

/// Every committed sample bundle (RTIT), sequentially and in chunks down to one PSB
/// interval.
#[test]
fn every_sample_decodes_the_same_both_ways() {
    let mut total = 0;
    for dir in bundles() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let b = Bundle::open(&dir, None, &[]).unwrap();
        total += both_ways(&name, &[u64::MAX, 1, 4096], |chunk| {
            decode_bundle(&b, chunk)
        });
    }
    assert!(total > 100_000, "{total} rows");
}

/// Intel PT encodings of walks over busybox with each encoder option (TNT-8 and TNT-64,
/// RET compression on and off, deferred TIPs, PSB+ anywhere, overflows, every CPL).
#[test]
fn pt_walks_over_busybox_decode_the_same_both_ways() {
    let elf = busybox();
    let code = Code::from_elf("busybox", &elf).unwrap();
    let images = busybox_images(&elf);
    let base = PtOptions::default();
    let options = [
        base.clone(),
        PtOptions {
            ret_compression: false,
            ..base.clone()
        },
        PtOptions {
            long_tnt: true,
            deferred_tips: true,
            ..base.clone()
        },
        PtOptions {
            psb_every: 512,
            psb_at_any_step: true,
            user_only: false,
            ..base.clone()
        },
        PtOptions {
            long_tnt: true,
            overflow: Some(PtOverflow {
                seed: 3,
                every_steps: (2_000, 20_000),
                duration_steps: (1, 300),
            }),
            ..base.clone()
        },
    ];
    let mut total = 0;
    for (k, o) in options.iter().enumerate() {
        let exec = code.execution(&WalkConfig::new(100 + k as u64, 200_000));
        let out = encode_execution(&images, o, exec.entry, exec.steps.iter().copied());
        total += both_ways(&format!("PT options {k}"), &[u64::MAX, 1, 4096], |chunk| {
            decode_pt(&images, &out.bytes, o.ret_compression, chunk)
        });
    }
    assert!(total > 200_000, "{total} rows");
}

/// Flip `damage` bytes of `bytes` (positions and values from `seed`), past the first 64.
fn damaged(bytes: &[u8], seed: u64, damage: usize) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let mut x = seed | 1;
    for _ in 0..damage {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if out.len() > 64 {
            let at = 64 + (x as usize >> 8) % (out.len() - 64);
            out[at] = x as u8;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random Intel PT traces: a walk over busybox with random settings, encoded with
    /// random options, then damaged at random bytes.
    #[test]
    fn random_pt_traces_decode_the_same_both_ways(
        seed in any::<u64>(),
        steps in 1_000u64..30_000,
        ret_compression in any::<bool>(),
        long_tnt in any::<bool>(),
        deferred_tips in any::<bool>(),
        psb_at_any_step in any::<bool>(),
        user_only in any::<bool>(),
        psb_every in 256u64..8192,
        damage in 0usize..8,
    ) {
        let elf = busybox();
        let code = Code::from_elf("busybox", &elf).unwrap();
        let images = busybox_images(&elf);
        let mut walk = WalkConfig::new(seed, steps);
        walk.interrupt_rate = 1.0 / 512.0;
        let o = PtOptions {
            ret_compression,
            long_tnt,
            deferred_tips,
            psb_at_any_step,
            user_only,
            psb_every,
            ..PtOptions::default()
        };
        let exec = code.execution(&walk);
        let out = encode_execution(&images, &o, exec.entry, exec.steps.iter().copied());
        let bytes = damaged(&out.bytes, seed, damage);
        both_ways("random PT", &[u64::MAX, 1, 700], |chunk| {
            decode_pt(&images, &bytes, ret_compression, chunk)
        });
    }

    /// Random RTIT traces: the hardware model over a random walk with random settings,
    /// then damaged at random bytes.
    #[test]
    fn random_rtit_traces_decode_the_same_both_ways(
        seed in any::<u64>(),
        steps in 1_000u64..30_000,
        cmprs_ret in any::<bool>(),
        pkt_mask in 0u8..4,
        damage in 0usize..8,
    ) {
        let elf = busybox();
        let code = Code::from_elf("busybox", &elf).unwrap();
        let images = busybox_images(&elf);
        let mut ctl_bits = ctl::TRACE_EN | ctl::TRACE_ACTIVE | ctl::DEST | ctl::USER;
        if cmprs_ret {
            ctl_bits |= ctl::CMPRS_RET;
        }
        let o = ModelOptions {
            ctl: ctl_bits,
            pkt_mask,
            seed,
            ..ModelOptions::default()
        };
        let mut walk = WalkConfig::new(seed, steps);
        walk.interrupt_rate = 1.0 / 512.0;
        let exec = code.execution(&walk);
        let out = Model::new(o, code.images()).run(exec.entry, exec.steps.iter().copied());
        let bytes = damaged(&out.bytes, seed, damage);
        both_ways("random RTIT", &[u64::MAX, 1, 700], |chunk| {
            decode_rtit(&images, &bytes, ctl_bits, chunk)
        });
    }
}
