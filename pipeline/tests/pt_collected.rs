//! Intel PT bundles of real program executions through the command line, and in the
//! collected forms.
//!
//! busybox `sort` run under qemu, encoded as Intel PT by the generator: `tracemill decode`
//! with one thread and with two and the smallest chunks writes byte-identical tables, and
//! its branches are the truth row for row (as `pipeline/tests/samples.rs` checks the RTIT
//! samples).
//!
//! The collected forms: a ToPA dump (SDM 36.2.6.2, Table of Physical
//! Addresses: output regions in chain order, a STOP or a circular END) and a trace-hub
//! capture (64-byte line writes, partial and some out of order). The stream views are
//! the format's business only in name: a PT trace laid out through either decodes to the
//! same rows as the linear file (or, for a ToPA buffer that wrapped, to a suffix of them),
//! and those rows are the truth of the execution the generator encoded.

use std::path::Path;
use std::process::Command;

use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::Array;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tracemill_datasets::exec::qemu;

use tracemill_datasets::collected::{write_topa, write_trace_hub, HubPlan, TopaPlan};
use tracemill_datasets::exec::synthetic::{Code, WalkConfig};
use tracemill_datasets::pt_encode::{encode_execution, PtOptions};
use tracemill_decode::chunk::{decode_all, Input};
use tracemill_decode::image::ImageSet;
use tracemill_decode::rows::BranchColumns;
use tracemill_input::bundle::Bundle;
use tracemill_input::manifest::{ImageEntry, ImageKind, Manifest, PtFacts, TraceFormat};

fn busybox() -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../datasets/samples/busybox-sort/images/busybox");
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A PT bundle of `file` as its trace, laid out as `m` says.
fn bundle(dir: &Path, mut m: Manifest, file: &[u8], elf: &[u8]) -> Bundle {
    std::fs::create_dir_all(dir.join("images")).unwrap();
    std::fs::write(dir.join("images/busybox"), elf).unwrap();
    m.format = TraceFormat::Pt;
    m.images = vec![ImageEntry {
        path: "images/busybox".into(),
        base: None,
        cr3: None,
        space: None,
        kind: ImageKind::Elf,
        symbols: None,
    }];
    m.pt = Some(PtFacts {
        ret_compression: Some(true),
        ..PtFacts::default()
    });
    std::fs::write(m.trace_path(dir), file).unwrap();
    std::fs::write(dir.join("bundle.toml"), m.to_toml()).unwrap();
    Bundle::open(dir, None, &[]).unwrap()
}

/// Decode a bundle's stream (sequentially, and in 4 KiB chunks: the same rows).
fn decode(b: &Bundle) -> BranchColumns {
    let stream = b.stream();
    let (images, _) = b.image_set();
    let cfg = b.pt_config().unwrap();
    let input = Input::pt(&stream, &images, cfg);
    let seq = decode_all(&input, u64::MAX);
    let par = decode_all(&input, 4096);
    assert_eq!(
        seq.rows,
        par.rows,
        "{}: chunked decode differs",
        b.dir.display()
    );
    seq.rows
}

/// (ip, kind, taken, target) of every row: what does not depend on where in the file the
/// packets lie.
fn flow(r: &BranchColumns) -> Vec<(u64, u8, bool, Option<u64>)> {
    (0..r.len())
        .map(|i| (r.ip[i], r.kind[i], r.taken[i], r.target.get(i)))
        .collect()
}

/// The rows of `trace` written through ToPA as `plan` sets it up (a bundle in `dir`), and
/// how stream offsets moved (`bundle = linear + shift`).
fn decode_topa(dir: &Path, trace: &[u8], plan: &TopaPlan, elf: &[u8]) -> (BranchColumns, i64) {
    let laid = write_topa(trace, plan);
    let mut m = Manifest::new(CTL);
    m.topa = Some(laid.form);
    m.trace = "trace.topa".into();
    (decode(&bundle(dir, m, &laid.file, elf)), laid.shift)
}

/// IA32_RTIT_CTL: TraceEn, User, BranchEn, ToPA (bit 8) as a ToPA recording sets it.
const CTL: u64 = 1 | 1 << 3 | 1 << 8 | 1 << 13;

#[test]
fn pt_through_topa_and_a_trace_hub_decodes_as_the_linear_trace() {
    let elf = busybox();
    let exec = Code::from_elf("busybox", &elf)
        .unwrap()
        .execution(&WalkConfig::new(31, 100_000));
    let mut images = ImageSet::new();
    images.add_elf("busybox", &elf, None, None).unwrap();
    let pt = encode_execution(
        &images,
        &PtOptions::default(),
        exec.entry,
        exec.steps.iter().copied(),
    );
    let truth = flow(&pt.truth.provable());
    assert!(truth.len() > 10_000, "{} rows", truth.len());
    let tmp = tempfile::tempdir().unwrap();

    let mut m = Manifest::new(CTL);
    m.trace = "trace.pt".into();
    let linear = decode(&bundle(&tmp.path().join("linear"), m, &pt.bytes, &elf));
    assert_eq!(flow(&linear), truth, "the linear file");

    // Regions of 4 KiB to 64 KiB in two tables, a STOP at the end of a chain long
    // enough for the whole trace: every row, at its offset moved by the layout's shift.
    let len = pt.bytes.len() as u64;
    let mut sizes = vec![2u8, 0, 4, 1, 3];
    while sizes.iter().map(|&c| 4096u64 << c).sum::<u64>() < len {
        sizes.push(4);
    }
    let plan = TopaPlan {
        sizes,
        first_table: 3,
        circular: false,
        int_every: 2,
        seed: 5,
    };
    let (topa, shift) = decode_topa(&tmp.path().join("topa"), &pt.bytes, &plan, &elf);
    assert_eq!(flow(&topa), truth, "the ToPA dump");
    let moved: Vec<u64> = linear
        .offset
        .iter()
        .map(|&o| (o as i64 + shift) as u64)
        .collect();
    assert_eq!(topa.offset, moved, "ToPA rows' offsets");

    // A circular ToPA buffer of a third of the trace: what survives is the last bytes,
    // and their rows are the truth's last rows from the first PSB on.
    assert!(len > 3 * 8192, "a {len}-byte trace");
    let plan = TopaPlan {
        sizes: vec![0, 0],
        first_table: 2,
        circular: true,
        int_every: 0,
        seed: 6,
    };
    let wrapped = flow(&decode_topa(&tmp.path().join("topa-wrapped"), &pt.bytes, &plan, &elf).0);
    assert!(
        !wrapped.is_empty() && wrapped.len() < truth.len(),
        "{} rows of {}",
        wrapped.len(),
        truth.len()
    );
    assert_eq!(
        wrapped[..],
        truth[truth.len() - wrapped.len()..],
        "the wrapped ToPA buffer decodes to the truth's last rows"
    );

    // A trace hub: lines flushed early, some received out of order (within 2.3.2).
    let laid = write_trace_hub(
        &pt.bytes,
        &HubPlan {
            size: 4096,
            start_offset: 0x2C5,
            flush_every: 2048,
            reorder: 0.2,
            seed: 7,
        },
    );
    let mut m = Manifest::new(CTL);
    m.trace_hub = Some(laid.form);
    m.trace = "trace.hub".into();
    let hub = decode(&bundle(&tmp.path().join("hub"), m, &laid.file, &elf));
    assert_eq!(flow(&hub), truth, "the trace-hub capture");
}

fn decode_cli(b: &Path, out: &Path, extra: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_tracemill"))
        .arg("decode")
        .arg(b)
        .arg("--out")
        .arg(out)
        .args(extra)
        .arg("-q")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "decode {extra:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// (ip, taken, target, insns, offset) of `branches.parquet`.
type Row = (u64, bool, Option<u64>, u32, u64);

fn read_branches(path: &Path) -> Vec<Row> {
    let mut out = Vec::new();
    let r = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap())
        .unwrap()
        .build()
        .unwrap();
    for b in r {
        let b = b.unwrap();
        let col = |n: &str| b.column_by_name(n).unwrap().clone();
        let (ip, taken, target, insns, offset) = (
            col("ip"),
            col("taken"),
            col("target"),
            col("insns"),
            col("offset"),
        );
        let (ip, taken, target) = (
            ip.as_primitive::<UInt64Type>(),
            taken.as_boolean(),
            target.as_primitive::<UInt64Type>(),
        );
        let (insns, offset) = (
            insns.as_primitive::<UInt32Type>(),
            offset.as_primitive::<UInt64Type>(),
        );
        for i in 0..b.num_rows() {
            out.push((
                ip.value(i),
                taken.value(i),
                target.is_valid(i).then(|| target.value(i)),
                insns.value(i),
                offset.value(i),
            ));
        }
    }
    out
}

#[test]
fn a_pt_bundle_of_busybox_under_qemu_decodes_to_its_truth_alike_on_any_thread_count() {
    const BUSYBOX: &str = "/usr/bin/busybox";
    let skip = std::env::var("TRACEMILL_SKIP_MISSING").is_ok_and(|v| v == "1")
        && std::env::var_os("CI").is_none();
    if let Err(e) = qemu::check_tools() {
        assert!(
            skip,
            "{e} (TRACEMILL_SKIP_MISSING=1 skips this test, except in CI)"
        );
        return;
    }
    assert!(
        skip || Path::new(BUSYBOX).exists(),
        "{BUSYBOX} not installed (apt-get install busybox-static)"
    );
    if !Path::new(BUSYBOX).exists() {
        return;
    }
    let mut x = 11u32;
    let mut input = String::new();
    for _ in 0..300 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        input += &format!("{}\n", (x >> 8) % 10_000);
    }
    let cap = qemu::trace(Path::new(BUSYBOX), &["sort", "-n"], input.as_bytes()).unwrap();
    assert_eq!(cap.exit_code, Some(0));
    let exec = cap.execution;
    let elf = exec.images[0].1.clone();
    let mut images = ImageSet::new();
    images.add_elf("busybox", &elf, None, None).unwrap();
    let pt = encode_execution(
        &images,
        &PtOptions::default(),
        exec.entry,
        exec.steps.iter().copied(),
    );
    let t = pt.truth.provable();
    let truth: Vec<Row> = (0..t.len())
        .map(|i| {
            (
                t.ip[i],
                t.taken[i],
                t.target.get(i),
                t.insns[i],
                t.offset[i],
            )
        })
        .collect();
    assert!(truth.len() > 100_000, "{} rows", truth.len());

    let tmp = tempfile::tempdir().unwrap();
    let mut m = Manifest::new(1 | 1 << 3 | 1 << 13);
    m.trace = "trace.pt".into();
    let b = bundle(&tmp.path().join("sort"), m, &pt.bytes, &elf);
    let (one, two) = (tmp.path().join("j1"), tmp.path().join("j2"));
    decode_cli(&b.dir, &one, &["-j", "1"]);
    decode_cli(&b.dir, &two, &["-j", "2", "--chunk-size", "0"]);
    for t in ["branches", "events", "timing", "coverage", "edges"] {
        let f = format!("{t}.parquet");
        assert!(
            std::fs::read(one.join(&f)).unwrap() == std::fs::read(two.join(&f)).unwrap(),
            "{t} differs between -j1 and -j2 with the smallest chunks"
        );
    }
    let got = read_branches(&one.join("branches.parquet"));
    assert_eq!(got.len(), truth.len(), "rows");
    if let Some(i) = (0..got.len()).find(|&i| got[i] != truth[i]) {
        panic!("row {i}: decoded {:x?}, truth {:x?}", got[i], truth[i]);
    }
}
