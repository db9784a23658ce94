//! Coverage: block and edge counts of every bundle equal those derived from the truth, and
//! do not depend on how the trace was cut into chunks.

mod common;

use common::*;
use tracemill_decode::coverage::Coverage;
use tracemill_decode::stream::TraceStream;
use tracemill_input::bundle::Bundle;

/// Blocks and edges of the truth's provable rows.
fn truth_coverage(t: &Truth) -> Coverage {
    let mut c = Coverage::default();
    for i in 0..t.rows.len() {
        if t.lost[i] {
            continue;
        }
        c.blocks
            .entry((t.block_start[i], t.rows.ip[i], t.block_insns[i]))
            .or_insert((t.block_insns[i], 0))
            .1 += 1;
        if let Some(dst) = t.rows.target.get(i) {
            *c.edges
                .entry((t.rows.ip[i], dst, t.rows.kind[i]))
                .or_default() += 1;
        }
    }
    // Blocks left at an interrupt or a disable inside them count with the row that
    // carries their instructions.
    for p in &t.partials {
        if t.lost.get(p.row as usize) == Some(&false) {
            c.blocks
                .entry((p.start, p.end, p.insns))
                .or_insert((p.insns, 0))
                .1 += 1;
        }
    }
    c
}

#[test]
fn coverage_equals_the_truths_for_every_bundle() {
    for dir in bundles() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let t = truth(&dir);
        if t.summary.ring {
            continue; // only a suffix of the truth survives in the ring
        }
        let b = Bundle::open(&dir, None, &[]).unwrap();
        let d = decode(&b, u64::MAX);
        let want = truth_coverage(&t);
        let mut missing: Vec<_> = want
            .blocks
            .iter()
            .filter(|(k, v)| d.coverage.blocks.get(k) != Some(v))
            .take(5)
            .collect();
        missing.sort();
        assert!(
            missing.is_empty(),
            "{name}: blocks differ, e.g. {missing:x?}"
        );
        assert_eq!(
            d.coverage.blocks.len(),
            want.blocks.len(),
            "{name}: block count"
        );
        assert_eq!(d.coverage.edges, want.edges, "{name}: edges");
        assert_eq!(
            (want.blocks.len() as u64, want.executions()),
            (t.summary.blocks, t.summary.block_executions),
            "{name}: summary.json"
        );
        for chunk in [1, 4096] {
            let p = decode(&b, chunk);
            assert_eq!(
                d.coverage, p.coverage,
                "{name}: coverage at chunk size {chunk}"
            );
        }
    }
}

/// Instructions in the blocks (insns × count).
fn coverage_insns(c: &Coverage) -> u64 {
    c.blocks.values().map(|&(n, k)| n as u64 * k).sum()
}

fn row_insns(d: &tracemill_decode::chunk::Decoded) -> u64 {
    d.rows.insns.iter().map(|&n| n as u64).sum()
}

/// Coverage counts every instruction the walk proves: the blocks' instructions (partial
/// blocks before an interrupt, a disable, an overflow or TraceSTOP included) add up to the
/// decode's instruction count, on every sample and on damaged traces, at any chunk size.
#[test]
fn coverage_adds_up_to_the_instruction_count() {
    for dir in bundles() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let b = Bundle::open(&dir, None, &[]).unwrap();
        for chunk in [u64::MAX, 1, 4096] {
            let d = decode(&b, chunk);
            assert_eq!(
                coverage_insns(&d.coverage),
                row_insns(&d),
                "{name}: chunk size {chunk}"
            );
        }
        // Damaged: bit flips all over, and a truncated copy.
        let stream = b.stream();
        let bytes = stream.to_vec(0, stream.len());
        let mut rng = tracemill_datasets::rng::Rng::new(name.len() as u64 + 5);
        let mut bad = bytes.clone();
        for _ in 0..40 {
            let i = rng.below(bad.len() as u64) as usize;
            bad[i] ^= 1 << rng.below(8);
        }
        let cut = &bytes[..bytes.len() * 2 / 3];
        for (what, trace) in [("bit flips", &bad[..]), ("truncated", cut)] {
            let seq = common::decode_stream(&b, &TraceStream::linear(trace), u64::MAX);
            assert_eq!(
                coverage_insns(&seq.coverage),
                row_insns(&seq),
                "{name} ({what})"
            );
            for chunk in [1, 4096] {
                let d = common::decode_stream(&b, &TraceStream::linear(trace), chunk);
                assert_eq!(
                    coverage_insns(&d.coverage),
                    row_insns(&d),
                    "{name} ({what}): chunk size {chunk}"
                );
            }
        }
    }
}

#[test]
fn coverage_rows_name_the_image_and_offset() {
    let dir = samples_dir().join("recursion");
    let b = Bundle::open(&dir, None, &[]).unwrap();
    let d = decode(&b, u64::MAX);
    let (images, _) = b.image_set();
    let rows = d.coverage.block_rows(&images);
    assert!(!rows.is_empty());
    for r in &rows {
        assert_eq!(r.image.as_deref(), Some("recursion"));
        assert_eq!(r.image_offset, Some(r.start - 0x40_0000));
        assert!(r.end >= r.start && r.insns >= 1 && r.count >= 1);
    }
    assert_eq!(
        rows.iter().map(|r| r.count).sum::<u64>(),
        d.rows.len() as u64
    );
    // The pipeline's closing summary counts the same blocks and edges.
    let opts = tracemill::run::Options {
        jobs: 2,
        ..Default::default()
    };
    let report = tracemill::run::decode(&b, &opts).unwrap();
    assert_eq!(
        (report.blocks, report.edges),
        (rows.len() as u64, d.coverage.edges.len() as u64)
    );
    let summary = tracemill::run::summary("recursion", &report);
    assert!(summary.contains(" basic blocks, "), "{summary}");
}
