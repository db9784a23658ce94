//! Every committed bundle against its ground truth, through every path: one-chunk
//! sequential decode, chunks down to a single PSB interval, and the threaded pipeline
//! writing Parquet; and `tracemill dump --stats` against the truth's packet counts.

mod common;

use common::*;
use tracemill::run::{self, Tables};
use tracemill_decode::rows::BranchColumns;
use tracemill_decode::rtit::config::TraceConfig;
use tracemill_input::bundle::Bundle;

fn open(dir: &std::path::Path) -> Bundle {
    Bundle::open(dir, None, &[]).unwrap()
}

/// Truth rows a decoder can prove, flow columns only.
fn expected(t: &Truth) -> BranchColumns {
    let mut b = BranchColumns::default();
    for (i, r) in t.rows.rows().enumerate() {
        if !t.lost[i] {
            b.push(&flow_row(&r));
        }
    }
    b
}

fn assert_rows_equal(name: &str, want: &BranchColumns, got: &BranchColumns) {
    for i in 0..want.len().min(got.len()) {
        let (w, g) = (want.row(i), flow_row(&got.row(i)));
        assert_eq!(w, g, "{name}: row {i} differs");
    }
    assert_eq!(want.len(), got.len(), "{name}: row counts differ");
}

#[test]
fn every_bundle_decodes_to_its_truth() {
    for dir in bundles() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let t = truth(&dir);
        let b = open(&dir);
        let d = decode(&b, u64::MAX);
        let want = expected(&t);
        if t.summary.ring {
            // Only the newest part of the trace survives in a wrapped ring. Every stretch
            // the decoder resynced into must be exactly a run of the truth (its first row
            // counts instructions from the resume point), and the last runs to the end.
            assert!(d.rows.len() > 1000, "{name}: only {} rows", d.rows.len());
            let mut cuts: Vec<usize> = d
                .events
                .iter()
                .filter(|e| e.kind == tracemill_schemas::EventKind::Error)
                .map(|e| e.seq as usize)
                .collect();
            cuts.push(0);
            cuts.push(d.rows.len());
            cuts.sort_unstable();
            cuts.dedup();
            let mut end_at = 0;
            for w in cuts.windows(2) {
                let (a, b) = (w[0], w[1]);
                if a == b {
                    continue;
                }
                let first = flow_row(&d.rows.row(a));
                let p = (end_at..want.len())
                    .find(|&i| {
                        let w = want.row(i);
                        w.offset == first.offset
                            && w.ip == first.ip
                            && w.kind == first.kind
                            && i + (b - a) <= want.len()
                            && (1..(b - a).min(65))
                                .all(|j| want.row(i + j) == flow_row(&d.rows.row(a + j)))
                    })
                    .unwrap_or_else(|| panic!("{name}: decoded row {a} {first:x?} not in truth"));
                for j in 1..b - a {
                    assert_eq!(
                        want.row(p + j),
                        flow_row(&d.rows.row(a + j)),
                        "{name}: row {}",
                        a + j
                    );
                }
                end_at = p + (b - a);
            }
            assert_eq!(
                end_at,
                want.len(),
                "{name}: the decode does not reach the end"
            );
        } else {
            assert_rows_equal(&name, &want, &d.rows);
        }
        let errors: Vec<_> = d
            .events
            .iter()
            .filter(|e| e.kind == tracemill_schemas::EventKind::Error)
            .collect();
        assert!(
            errors.is_empty() || t.summary.ring,
            "{name}: unexpected errors {errors:#?}"
        );
        eprintln!(
            "{name}: {} rows decoded, {} lost in truth",
            d.rows.len(),
            t.summary.model.lost_rows
        );
    }
}

#[test]
fn dump_stats_agree_with_summary() {
    for dir in bundles() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let t = truth(&dir);
        if t.summary.ring {
            continue; // the oldest packets were overwritten
        }
        let b = open(&dir);
        let s = tracemill::dump::stats(&b.stream(), &TraceConfig::from_ctl(b.manifest.rtit_ctl));
        assert_eq!(s.errors, 0, "{name}");
        for (k, v) in &t.summary.model.packets_by_type {
            assert_eq!(
                s.by_type.get(k.as_str()).copied().unwrap_or(0),
                *v,
                "{name}: count of {k}"
            );
        }
        let total: u64 = s.by_type.values().sum();
        let want: u64 = t.summary.model.packets_by_type.values().sum();
        assert_eq!(total, want, "{name}: total packets");
    }
}

#[test]
fn chunked_decoding_equals_sequential_for_every_bundle() {
    for dir in bundles() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let b = open(&dir);
        let seq = decode(&b, u64::MAX);
        for chunk in [1, 2048, 16 << 10, 256 << 10] {
            let par = decode(&b, chunk);
            assert_eq!(seq.rows, par.rows, "{name}: rows at chunk size {chunk}");
            assert_eq!(
                seq.events, par.events,
                "{name}: events at chunk size {chunk}"
            );
            assert_eq!(
                seq.timing, par.timing,
                "{name}: timing at chunk size {chunk}"
            );
        }
    }
}

/// A chunk body given up past its limit, and the chunk walked by the stitcher in pieces
/// cut wherever the walk can hand its rows on (a limit of one: at every such point), must
/// give the sequential decode exactly: rows with their time, events, timing facts, the
/// `timing` table and coverage.
#[test]
fn bodies_given_up_and_walked_in_pieces_equal_sequential_for_every_bundle() {
    use tracemill_decode::chunk::{decode_all_bounded, Input};
    for dir in bundles() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let b = open(&dir);
        let seq = decode(&b, u64::MAX);
        let (images, _) = b.image_set();
        let stream = b.stream();
        let input = Input::<tracemill_decode::Rtit> {
            stream: &stream,
            images: &images,
            cfg: b.trace_config(),
            timing: b.timing_config(),
            spaces: None,
        };
        for (chunk, body, piece) in [
            (u64::MAX, 1, 1),
            (u64::MAX, 1000, 37),
            (2048, 50, 7),
            (16 << 10, 1 << 20, 1),
            (16 << 10, 400, 5000),
        ] {
            let par = decode_all_bounded(&input, chunk, body, piece);
            let what = format!("{name}: chunk {chunk}, body limit {body}, pieces of {piece}");
            for i in 0..seq.rows.len().min(par.rows.len()) {
                assert_eq!(seq.rows.row(i), par.rows.row(i), "{what}: row {i}");
            }
            assert_eq!(seq.rows.len(), par.rows.len(), "{what}: rows");
            assert!(seq.rows == par.rows, "{what}: rows");
            assert_eq!(seq.events, par.events, "{what}: events");
            assert_eq!(seq.timing, par.timing, "{what}: timing facts");
            assert_eq!(seq.timing_rows, par.timing_rows, "{what}: timing table");
            assert_eq!(seq.coverage, par.coverage, "{what}: coverage");
        }
    }
}

/// Columns offset, value, tsc and cycles of a `timing.parquet`.
type TimingCols = (Vec<u64>, Vec<u64>, Vec<Option<u64>>, Vec<Option<u64>>);

fn read_timing(path: &std::path::Path) -> TimingCols {
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt64Type;
    use arrow_array::Array;
    let f = std::fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .unwrap()
        .build()
        .unwrap();
    let mut out = TimingCols::default();
    for b in reader {
        let b = b.unwrap();
        let col = |n: &str| {
            b.column_by_name(n)
                .unwrap()
                .as_primitive::<UInt64Type>()
                .clone()
        };
        let (offset, value, tsc, cycles) = (col("offset"), col("value"), col("tsc"), col("cycles"));
        for i in 0..b.num_rows() {
            out.0.push(offset.value(i));
            out.1.push(value.value(i));
            out.2.push((!tsc.is_null(i)).then(|| tsc.value(i)));
            out.3.push((!cycles.is_null(i)).then(|| cycles.value(i)));
        }
    }
    out
}

#[test]
fn threaded_pipeline_writes_the_same_tables_for_any_thread_count() {
    for dir in bundles() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let b = open(&dir);
        let seq = decode(&b, u64::MAX);
        // Small row groups make the pipeline encode branch row groups on the decode pool
        // while chunks are still being decoded (with one job, this once deadlocked).
        for (jobs, chunk, group_rows) in [
            (1, Some(4096), 5000),
            (1, None, 1 << 20),
            (2, Some(1), 3000),
            (3, Some(4096), 1 << 20),
        ] {
            let out = tempfile::tempdir().unwrap();
            let opts = run::Options {
                jobs,
                chunk_bytes: chunk,
                out: Some(out.path().to_path_buf()),
                tables: Tables::ALL,
                writer: tracemill_sinks::WriterOptions {
                    max_row_group_rows: group_rows,
                    ..Default::default()
                },
                ..run::Options::default()
            };
            let report = run::decode(&b, &opts).unwrap();
            assert_eq!(report.rows, seq.rows.len() as u64, "{name}");
            let got = read_branches(&out.path().join("branches.parquet"));
            let mut want = seq.rows.clone();
            want.seq = (0..want.len() as u64).collect();
            assert_eq!(
                got, want,
                "{name}: branches.parquet with {jobs} jobs, chunks {chunk:?}, groups {group_rows}"
            );
            let t = &seq.timing_rows;
            assert_eq!(
                read_timing(&out.path().join("timing.parquet")),
                (
                    t.offset.clone(),
                    t.value.clone(),
                    (0..t.len()).map(|i| t.tsc.get(i)).collect(),
                    (0..t.len()).map(|i| t.cycles.get(i)).collect()
                ),
                "{name}: timing.parquet with {jobs} jobs, chunks {chunk:?}, groups {group_rows}"
            );
        }
    }
}

/// The same bundle gives the same Parquet bytes whatever the thread count and chunk size
/// (docs/contracts.md, "The same rows, the same bytes"): row groups are cut at fixed row
/// counts and arrow-rs is given every column in runs of fixed length. Before, row groups
/// ended where a piece ended and pages where a batch did, so a fleet ingested on a 2-core
/// and an 8-core machine differed byte for byte (3 of 16 randomized cases).
#[test]
fn every_thread_count_and_chunk_size_writes_byte_identical_parquet() {
    let mut rng = tracemill_datasets::rng::Rng::new(0x5a3e);
    for dir in bundles() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let b = open(&dir);
        let write = |jobs: usize, chunk: Option<u64>, group_rows: usize| {
            let out = tempfile::tempdir().unwrap();
            let opts = run::Options {
                jobs,
                chunk_bytes: chunk,
                out: Some(out.path().to_path_buf()),
                tables: Tables::ALL,
                writer: tracemill_sinks::WriterOptions {
                    max_row_group_rows: group_rows,
                    ..Default::default()
                },
                ..run::Options::default()
            };
            run::decode(&b, &opts).unwrap();
            ["branches", "events", "timing", "coverage", "edges"].map(|t| {
                let p = out.path().join(format!("{t}.parquet"));
                (t, std::fs::read(&p).unwrap())
            })
        };
        // Row groups smaller than a piece and not a multiple of 1,024 rows, so that both
        // cuts are exercised on the samples.
        let group_rows = 20_000 + rng.below(10_000) as usize;
        let want = write(1, None, group_rows);
        for _ in 0..2 {
            let jobs = 1 + rng.below(3) as usize;
            let chunk = 512 + rng.below(64 << 10);
            let got = write(jobs, Some(chunk), group_rows);
            for ((t, w), (_, g)) in want.iter().zip(&got) {
                assert!(
                    w == g,
                    "{name}: {t}.parquet differs with {jobs} jobs and chunks of {chunk} bytes \
                     (row groups of {group_rows})"
                );
            }
        }
    }
}
