//! Bad input is normal input: bit flips, truncation, a missing image, a wrong rtit_ctl,
//! junk. The decoder goes on to the end, names each problem with its offset, keeps the rows
//! it can prove (they equal the truth outside the damaged stretches), never panics, and
//! decodes damaged input the same way for any chunk size.

mod common;

use std::path::Path;

use common::*;
use tracemill::run;
use tracemill_datasets::rng::Rng;
use tracemill_decode::chunk::{decode_all, Decoded, Input};
use tracemill_decode::image::ImageSet;
use tracemill_decode::rows::BranchColumns;
use tracemill_decode::rtit::config::TraceConfig;
use tracemill_decode::rtit::sync::find_psbs;
use tracemill_decode::stream::TraceStream;
use tracemill_input::bundle::Bundle;
use tracemill_input::manifest::{ImageEntry, ImageKind};
use tracemill_schemas::EventKind;

fn sample(name: &str) -> (Bundle, Truth) {
    let dir = samples_dir().join(name);
    (Bundle::open(&dir, None, &[]).unwrap(), truth(&dir))
}

fn decode_bytes(b: &Bundle, bytes: &[u8], ctl: u64, chunk: u64) -> Decoded {
    let (images, _) = b.image_set();
    decode_with(&images, bytes, ctl, chunk)
}

fn decode_with(images: &ImageSet<'_>, bytes: &[u8], ctl: u64, chunk: u64) -> Decoded {
    let stream = TraceStream::linear(bytes);
    let input = Input::<tracemill_decode::Rtit> {
        spaces: None,
        stream: &stream,
        images,
        cfg: TraceConfig::from_ctl(ctl),
        timing: tracemill_decode::rtit::clock::TimingConfig::new(
            &TraceConfig::from_ctl(ctl),
            Some(20),
            true,
        ),
    };
    decode_all(&input, chunk)
}

/// Truth rows a decoder can prove.
fn provable(t: &Truth) -> BranchColumns {
    let mut b = BranchColumns::default();
    for (i, r) in t.rows.rows().enumerate() {
        if !t.lost[i] {
            b.push(&flow_row(&r));
        }
    }
    b
}

fn errors(d: &Decoded) -> Vec<&tracemill_decode::rows::EventRow> {
    d.events
        .iter()
        .filter(|e| e.kind == EventKind::Error)
        .collect()
}

/// Decoded rows decided before `clean_before` equal the truth's first rows; the decoded
/// rows decided at or after `clean_from` equal the truth's last rows; and how many rows
/// in all match the truth in order (a longest-run alignment by deciding offset).
fn check_outside_damage(
    name: &str,
    want: &BranchColumns,
    got: &Decoded,
    clean_before: u64,
    clean_from: u64,
) -> usize {
    // Before the damage: identical prefix.
    let mut i = 0;
    while i < got.rows.len() && got.rows.offset[i] < clean_before {
        assert_eq!(
            flow_row(&got.rows.row(i)),
            want.row(i),
            "{name}: row {i} before the damage"
        );
        i += 1;
    }
    // After it: identical suffix, from the first row decided past `clean_from` (its
    // `insns` counts from a resume point, so it is compared without them).
    let first_after = (0..got.rows.len()).find(|&k| got.rows.offset[k] >= clean_from);
    if let Some(k) = first_after {
        let n = got.rows.len() - k;
        assert!(
            n <= want.len(),
            "{name}: more rows after the damage than exist"
        );
        let w0 = want.len() - n;
        for j in 1..n {
            assert_eq!(
                flow_row(&got.rows.row(k + j)),
                want.row(w0 + j),
                "{name}: row {} after the damage",
                k + j
            );
        }
        let (g, w) = (flow_row(&got.rows.row(k)), want.row(w0));
        assert_eq!((g.ip, g.kind, g.offset), (w.ip, w.kind, w.offset), "{name}");
        i + n
    } else {
        i
    }
}

/// The PSB at or before `off`, and the `n`-th PSB after it.
fn psb_window(bytes: &[u8], off: u64, n: usize) -> (u64, u64) {
    let s = TraceStream::linear(bytes);
    let psbs = find_psbs(&s);
    let before = psbs.iter().copied().rfind(|&p| p <= off).unwrap_or(0);
    let after = psbs
        .iter()
        .copied()
        .filter(|&p| p > off)
        .nth(n.saturating_sub(1))
        .unwrap_or(bytes.len() as u64);
    (before, after)
}

#[test]
fn bit_flips_are_reported_and_rows_outside_the_damage_stay_right() {
    // callbacks has a PSB every ~2 KiB: damage stays local.
    let (b, t) = sample("callbacks");
    let want = provable(&t);
    let clean: Vec<u8> = b.trace.to_vec();
    let mut total_matched = 0;
    for seed in 0..16u64 {
        let mut r = Rng::new(seed);
        let mut bytes = clean.clone();
        // One burst of 1-8 flipped bits in a 64-byte window (a bad line, as a trace hub
        // might deliver), somewhere in the middle half of the trace.
        let at = clean.len() / 4 + r.below(clean.len() as u64 / 2) as usize;
        for _ in 0..1 + r.below(8) {
            let p = at + r.below(64) as usize;
            bytes[p] ^= 1 << r.below(8);
        }
        let d = decode_bytes(&b, &bytes, b.manifest.rtit_ctl, u64::MAX);
        for e in errors(&d) {
            assert!(e.offset < bytes.len() as u64, "seed {seed}: {e:?}");
            assert!(!e.detail.is_empty());
        }
        let (psb_before, psb_after) = psb_window(&bytes, at as u64, 3);
        let matched =
            check_outside_damage(&format!("seed {seed}"), &want, &d, psb_before, psb_after);
        total_matched += matched;
        // Damaged input decodes the same whatever the chunking.
        for chunk in [1, 4096] {
            let p = decode_bytes(&b, &bytes, b.manifest.rtit_ctl, chunk);
            assert_eq!(d.rows, p.rows, "seed {seed}: rows at chunk size {chunk}");
            assert_eq!(
                d.events, p.events,
                "seed {seed}: events at chunk size {chunk}"
            );
        }
    }
    // Nearly every row survives a local burst.
    assert!(
        total_matched as f64 >= 0.95 * 16.0 * want.len() as f64,
        "{total_matched} of {}",
        16 * want.len()
    );
}

#[test]
fn truncated_traces_give_a_prefix_of_the_truth() {
    let (b, t) = sample("recursion");
    let want = provable(&t);
    let clean: Vec<u8> = b.trace.to_vec();
    let mut r = Rng::new(5);
    for _ in 0..12 {
        let cut = 10 + r.below(clean.len() as u64 - 10) as usize;
        let d = decode_bytes(&b, &clean[..cut], b.manifest.rtit_ctl, u64::MAX);
        assert!(d.rows.len() <= want.len());
        for i in 0..d.rows.len() {
            assert_eq!(
                flow_row(&d.rows.row(i)),
                want.row(i),
                "cut at {cut}: row {i}"
            );
        }
        // Only the last packet can be cut: at most one error, at the end.
        let e = errors(&d);
        assert!(e.len() <= 1, "cut at {cut}: {e:?}");
        if let Some(e) = e.first() {
            assert!(e.detail.contains("truncated"), "{e:?}");
        }
        let p = decode_bytes(&b, &clean[..cut], b.manifest.rtit_ctl, 2048);
        assert_eq!(d.rows, p.rows, "cut at {cut}");
    }
}

#[test]
fn a_missing_image_is_reported_with_addresses_and_decoding_goes_on() {
    let (b, _) = sample("busybox-sort");
    let empty = ImageSet::new();
    let d = decode_with(&empty, &b.trace, b.manifest.rtit_ctl, u64::MAX);
    let e = errors(&d);
    assert!(!e.is_empty());
    assert!(
        e.iter().all(|e| e.detail.contains("no code image covers")),
        "{e:?}"
    );
    // Every resume point was found and reported; no branch can be followed.
    assert!(d.rows.is_empty());
    let enables = d
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Enable)
        .count() as u64;
    let stats = tracemill::dump::stats(
        &TraceStream::linear(&b.trace),
        &TraceConfig::from_ctl(b.manifest.rtit_ctl),
    );
    assert_eq!(
        enables, stats.by_type["fup.pge"],
        "every FUP.PGE is a resume point"
    );

    // Through the CLI path: an image file that does not exist is a warning, not a failure.
    let dir = tempfile::tempdir().unwrap();
    let missing = ImageEntry {
        path: "/nonexistent/prog".into(),
        base: None,
        cr3: None,
        space: None,
        kind: ImageKind::Elf,
        symbols: None,
    };
    let trace = dir.path().join("t.rtit");
    std::fs::write(&trace, &b.trace[..]).unwrap();
    let b2 = Bundle::open(&trace, Some(b.manifest.rtit_ctl), &[missing]).unwrap();
    let opts = run::Options {
        out: Some(dir.path().join("out")),
        ..run::Options::default()
    };
    let report = run::decode(&b2, &opts).unwrap();
    assert!(report
        .warnings
        .iter()
        .any(|w| w.contains("/nonexistent/prog")));
    assert!(report.errors() > 0);
    assert!(dir.path().join("out/events.parquet").exists());
}

#[test]
fn a_wrong_rtit_ctl_still_decodes_to_the_end() {
    // recursion was traced cycle-accurate: without Cycle_Acc, CYC bytes read as packets.
    let (b, _) = sample("recursion");
    let ctl = b.manifest.rtit_ctl & !tracemill_decode::rtit::config::ctl::CYCLE_ACC;
    let d = decode_bytes(&b, &b.trace, ctl, u64::MAX);
    assert!(!errors(&d).is_empty());
    let psbs = d.events.iter().filter(|e| e.kind == EventKind::Psb).count();
    let all_psbs = find_psbs(&TraceStream::linear(&b.trace)).len();
    assert_eq!(psbs, all_psbs, "every PSB is still reached");
    let p = decode_bytes(&b, &b.trace, ctl, 1);
    assert_eq!(d.rows, p.rows);
    assert_eq!(d.events, p.events);
    // And the reverse: Cycle_Acc claimed for a trace without CYC packets.
    let (b, _) = sample("callbacks");
    let ctl = b.manifest.rtit_ctl | tracemill_decode::rtit::config::ctl::CYCLE_ACC;
    let d = decode_bytes(&b, &b.trace, ctl, u64::MAX);
    assert!(!errors(&d).is_empty());
    let p = decode_bytes(&b, &b.trace, ctl, 4096);
    assert_eq!(d.rows, p.rows);
}

#[test]
fn random_bytes_never_panic_and_junk_without_psb_is_an_error() {
    let (b, _) = sample("synthetic");
    let (images, _) = b.image_set();
    let mut r = Rng::new(99);
    for n in [0usize, 1, 9, 100, 5000, 70_000] {
        let mut bytes: Vec<u8> = (0..n).map(|_| r.below(256) as u8).collect();
        // Sprinkle PSBs so that the parser gets going.
        for _ in 0..n / 2000 {
            let at = r.below(n as u64 - 9) as usize;
            bytes[at..at + 9].copy_from_slice(&[0xC0, 0, 0, 0, 0, 0, 0, 0, 0]);
        }
        for chunk in [u64::MAX, 1] {
            let _ = decode_with(&images, &bytes, b.manifest.rtit_ctl, chunk);
        }
    }
    // A file with no PSB cannot be decoded at all: the pipeline says so.
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("junk.rtit");
    std::fs::write(&trace, vec![0x55u8; 4096]).unwrap();
    let b2 = Bundle::open(&trace, Some(b.manifest.rtit_ctl), &[]).unwrap();
    let err = run::decode(&b2, &run::Options::default()).unwrap_err();
    assert!(format!("{err:#}").contains("no PSB"), "{err:#}");
    let _ = Path::new("");
}
