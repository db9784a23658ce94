//! Helpers shared by the integration tests: the committed sample bundles and their truth.

#![allow(dead_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::Array;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tracemill_datasets::samples::TruthSummary;
use tracemill_decode::chunk::{decode_all, Decoded, Input};
use tracemill_decode::rows::{BranchColumns, BranchRow, PartialBlock};
use tracemill_decode::stream::TraceStream;
use tracemill_input::bundle::Bundle;
use tracemill_schemas::BranchKind;

/// The Python the tests run: the repository's virtual environment (`.venv`, made by the
/// README's install line) when there is one, else `python3` from PATH.
pub fn python() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python3");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

pub fn samples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/samples")
}

/// Every committed bundle (directories with a bundle.toml).
pub fn bundles() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(samples_dir())
        .expect("datasets/samples exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("bundle.toml").exists())
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no sample bundles found");
    v
}

/// Read a branches-schema Parquet file into columns.
pub fn read_branches(path: &Path) -> BranchColumns {
    let f = File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let reader = ParquetRecordBatchReaderBuilder::try_new(f)
        .unwrap()
        .build()
        .unwrap();
    let mut out = BranchColumns::default();
    for batch in reader {
        let b = batch.unwrap();
        let u64col = |n: &str| {
            b.column_by_name(n)
                .unwrap()
                .as_primitive::<UInt64Type>()
                .clone()
        };
        let seq = u64col("seq");
        let ip = u64col("ip");
        let target = u64col("target");
        let tsc = u64col("tsc");
        let cycles = u64col("cycles");
        let cr3 = u64col("cr3");
        let offset = u64col("offset");
        let insns = b
            .column_by_name("insns")
            .unwrap()
            .as_primitive::<UInt32Type>()
            .clone();
        let taken = b.column_by_name("taken").unwrap().as_boolean().clone();
        let compressed = b.column_by_name("compressed").unwrap().as_boolean().clone();
        let kind = b.column_by_name("kind").unwrap();
        let kind = tracemill_sinks::convert::strings(kind.as_ref()).unwrap();
        let opt = |a: &arrow_array::PrimitiveArray<UInt64Type>, i: usize| {
            if a.is_null(i) {
                None
            } else {
                Some(a.value(i))
            }
        };
        for i in 0..b.num_rows() {
            out.seq.push(seq.value(i));
            out.push(&BranchRow {
                ip: ip.value(i),
                target: opt(&target, i),
                kind: BranchKind::from_name(kind.value(i)).unwrap(),
                taken: taken.value(i),
                compressed: compressed.value(i),
                insns: insns.value(i),
                tsc: opt(&tsc, i),
                cycles: opt(&cycles, i),
                cr3: opt(&cr3, i),
                offset: offset.value(i),
            });
        }
    }
    out
}

/// The truth of a generated bundle.
pub struct Truth {
    pub rows: BranchColumns,
    pub lost: Vec<bool>,
    pub cyc_exact: Vec<bool>,
    pub e6_zero_before: Vec<u32>,
    pub block_start: Vec<u64>,
    pub block_insns: Vec<u32>,
    /// Partial blocks (`truth/partial_blocks.parquet`).
    pub partials: Vec<PartialBlock>,
    pub summary: TruthSummary,
}

pub fn truth(dir: &Path) -> Truth {
    let rows = read_branches(&dir.join("truth/branches.parquet"));
    let f = File::open(dir.join("truth/rows.parquet")).unwrap();
    let reader = ParquetRecordBatchReaderBuilder::try_new(f)
        .unwrap()
        .build()
        .unwrap();
    let (mut lost, mut cyc_exact, mut e6) = (Vec::new(), Vec::new(), Vec::new());
    let (mut bs, mut bi) = (Vec::new(), Vec::new());
    for b in reader {
        let b = b.unwrap();
        let l = b.column_by_name("lost").unwrap().as_boolean().clone();
        let c = b.column_by_name("cyc_exact").unwrap().as_boolean().clone();
        let z = b
            .column_by_name("e6_zero_before")
            .unwrap()
            .as_primitive::<UInt32Type>()
            .clone();
        let s = b
            .column_by_name("block_start")
            .unwrap()
            .as_primitive::<UInt64Type>()
            .clone();
        let n = b
            .column_by_name("block_insns")
            .unwrap()
            .as_primitive::<UInt32Type>()
            .clone();
        for i in 0..b.num_rows() {
            lost.push(l.value(i));
            cyc_exact.push(c.value(i));
            e6.push(z.value(i));
            bs.push(s.value(i));
            bi.push(n.value(i));
        }
    }
    // Partial blocks (bundles made before they were recorded have none).
    let mut partials = Vec::new();
    let batches = File::open(dir.join("truth/partial_blocks.parquet"))
        .ok()
        .map(|f| {
            ParquetRecordBatchReaderBuilder::try_new(f)
                .unwrap()
                .build()
                .unwrap()
        });
    for b in batches.into_iter().flatten() {
        let b = b.unwrap();
        let u64col = |n: &str| {
            b.column_by_name(n)
                .unwrap()
                .as_primitive::<UInt64Type>()
                .clone()
        };
        let (row, start, end) = (u64col("row"), u64col("start"), u64col("end"));
        let insns = b
            .column_by_name("insns")
            .unwrap()
            .as_primitive::<UInt32Type>()
            .clone();
        for i in 0..b.num_rows() {
            partials.push(PartialBlock {
                row: row.value(i),
                start: start.value(i),
                end: end.value(i),
                insns: insns.value(i),
                times: 1,
            });
        }
    }
    let summary: TruthSummary =
        serde_json::from_str(&std::fs::read_to_string(dir.join("truth/summary.json")).unwrap())
            .unwrap();
    Truth {
        rows,
        lost,
        cyc_exact,
        e6_zero_before: e6,
        block_start: bs,
        block_insns: bi,
        partials,
        summary,
    }
}

/// Decode a bundle in this thread with chunks of at least `chunk` bytes.
pub fn decode(b: &Bundle, chunk: u64) -> Decoded {
    assert!(b.image_set().1.is_empty(), "{:?}", b.image_set().1);
    decode_stream(b, &b.stream(), chunk)
}

/// Decode `stream` (the bundle's trace, or other bytes) with the bundle's images and
/// RTIT_CTL, in this thread, with chunks of at least `chunk` bytes.
pub fn decode_stream(b: &Bundle, stream: &TraceStream<'_>, chunk: u64) -> Decoded {
    let (images, _) = b.image_set();
    let input = Input::<tracemill_decode::Rtit> {
        spaces: None,
        stream,
        images: &images,
        cfg: b.trace_config(),
        timing: b.timing_config(),
    };
    decode_all(&input, chunk)
}

/// A row with the columns the flow decode decides (timing aside).
pub fn flow_row(r: &BranchRow) -> BranchRow {
    BranchRow {
        tsc: None,
        cycles: None,
        ..*r
    }
}

/// The datasets crate's test helpers (one `missing_tool` for every test of the workspace).
#[path = "../../../datasets/tests/common/mod.rs"]
mod shared;
#[allow(unused_imports)]
pub use shared::missing_tool;

/// Run the `tracemill` binary of this build, without the shard variables of Slurm and
/// Kubernetes that a CI runner may have set (ingest reads them).
pub fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tracemill"))
        .args(args)
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .expect("run tracemill")
}

/// [`run`], which must succeed.
pub fn ok(args: &[&str]) -> Output {
    let o = run(args);
    assert!(
        o.status.success(),
        "tracemill {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// The `error` column of a local dataset's catalog (`DEST/bundles/*.parquet`): the failed
/// bundles' reasons, as published.
pub fn catalog_errors(dest: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dest.join("bundles")).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "parquet") {
            continue;
        }
        let r = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap())
            .unwrap()
            .build()
            .unwrap();
        for b in r {
            let b = b.unwrap();
            let c = b.column_by_name("error").unwrap().as_string::<i32>();
            out.extend(c.iter().flatten().map(str::to_string));
        }
    }
    out
}

/// Two `UInt64` columns of a table file, row by row: `a`, and `b` where it is not null.
pub fn u64_pairs(path: &Path, [a, b]: [&str; 2]) -> Vec<(u64, Option<u64>)> {
    let r = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap())
        .unwrap()
        .build()
        .unwrap();
    let mut out = Vec::new();
    for batch in r {
        let batch = batch.unwrap();
        let x = batch
            .column_by_name(a)
            .unwrap()
            .as_primitive::<UInt64Type>();
        let y = batch
            .column_by_name(b)
            .unwrap()
            .as_primitive::<UInt64Type>();
        for i in 0..batch.num_rows() {
            out.push((x.value(i), y.is_valid(i).then(|| y.value(i))));
        }
    }
    out
}

/// Debian's busybox-static: the real program the tests run under qemu.
pub const BUSYBOX: &str = "/usr/bin/busybox";

/// Whether qemu and [`BUSYBOX`] are there for the tests that run a real program, or why
/// such a test is skipped (with `TRACEMILL_SKIP_MISSING=1` only, and never in CI).
pub fn real_program_tools() -> bool {
    let skip = std::env::var("TRACEMILL_SKIP_MISSING").is_ok_and(|v| v == "1")
        && std::env::var_os("CI").is_none();
    let missing = tracemill_datasets::exec::qemu::check_tools()
        .err()
        .map(|e| e.to_string())
        .or_else(|| (!Path::new(BUSYBOX).exists()).then(|| format!("{BUSYBOX} not installed")));
    if let Some(e) = missing {
        assert!(
            skip,
            "{e} (TRACEMILL_SKIP_MISSING=1 skips this test, except in CI)"
        );
        return false;
    }
    true
}

/// `lines` seeded pseudo-random numbers below 10,000, one a line: what the tests give
/// busybox `sort`.
pub fn sort_input(lines: usize, seed: u32) -> String {
    let mut x = seed;
    let mut input = String::new();
    for _ in 0..lines {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        input += &format!("{}\n", (x >> 8) % 10_000);
    }
    input
}
