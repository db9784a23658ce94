//! Intel PT bundles through the whole command line: `decode` on every libipt case whose
//! instruction flow the decoder reproduces (decode/tests/ptxed_suite.rs), with one thread
//! and with two and the smallest chunks (byte-identical tables), every `report`, `dump`,
//! and `ingest` of several PT bundles into one dataset.
//!
//! The cases are libipt's own (datasets/libipt-ptt): each becomes a bundle with
//! `format = "pt"`, its trace as `trace.pt` and its code bytes as a raw image at the
//! case's load address. The branch rows are checked against libipt's expected ptxed
//! output: every row's `ip` is an instruction ptxed lists, the rows' instruction counts
//! never exceed ptxed's, and with the `tail` event's they equal them.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int8Type, UInt32Type, UInt64Type};
use arrow_array::{Array, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

fn tracemill(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tracemill"))
        .args(args)
        .output()
        .expect("tracemill runs")
}

fn ok(args: &[&str]) -> Output {
    let o = tracemill(args);
    assert!(
        o.status.success(),
        "tracemill {args:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn suite() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/libipt-ptt")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 paths in tests")
}

/// Cases that run without a CPU and whose ptxed output the flow reproduces: not listed
/// in ptxed-known-failures.txt. With their load address.
fn matching_cases() -> Vec<(String, u64)> {
    let known = std::fs::read_to_string(suite().join("ptxed-known-failures.txt")).unwrap();
    let failing: BTreeSet<&str> = known
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(suite().join("index.json")).unwrap())
            .unwrap();
    let mut out = Vec::new();
    for c in index["cases"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap().to_string();
        let exp = format!("{name}-ptxed.exp");
        let cpus = c["cpus"].as_array().map_or(0, |a| a.len());
        let opts = c["ptxed"].as_array().map_or(0, |a| a.len());
        if cpus != 0 || opts != 0 || failing.contains(exp.as_str()) {
            continue;
        }
        if !suite().join(&name).join(&exp).exists() {
            continue;
        }
        let load = c["org"].as_str().unwrap();
        let load = u64::from_str_radix(load.trim_start_matches("0x"), 16).unwrap();
        out.push((name, load));
    }
    out
}

/// A PT bundle of a libipt case under `dir`.
fn bundle(dir: &Path, case: &str, load: u64) -> PathBuf {
    let b = dir.join(case);
    std::fs::create_dir_all(b.join("images")).unwrap();
    let src = suite().join(case);
    std::fs::copy(src.join(format!("{case}.pt")), b.join("trace.pt")).unwrap();
    std::fs::copy(src.join(format!("{case}.bin")), b.join("images/code")).unwrap();
    std::fs::write(
        b.join("bundle.toml"),
        format!(
            "format = \"pt\"\ntrace = \"trace.pt\"\nrtit_ctl = \"0x2000\"\n\n\
             [[image]]\npath = \"images/code\"\nkind = \"raw\"\nbase = \"{load:#x}\"\n\n\
             [labels]\ncase = \"{case}\"\n"
        ),
    )
    .unwrap();
    b
}

fn read(path: &Path) -> Vec<RecordBatch> {
    ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap())
        .unwrap()
        .build()
        .unwrap()
        .map(|b| b.unwrap())
        .collect()
}

/// The count of the `tail` event in an `events` table (0 without one).
fn tail_insns(path: &Path) -> u64 {
    let mut n = 0;
    for batch in read(path) {
        let kind = batch
            .column_by_name("kind")
            .unwrap()
            .as_dictionary::<Int8Type>();
        let names = kind.values().as_string::<i32>();
        let detail = batch.column_by_name("detail").unwrap().as_string::<i32>();
        for i in 0..batch.num_rows() {
            if names.value(kind.keys().value(i) as usize) == "tail" {
                n += detail.value(i).parse::<u64>().expect("a tail's count");
            }
        }
    }
    n
}

/// The instruction addresses ptxed lists (lines that are a bare hex address).
fn ptxed_addresses(case: &str) -> Vec<u64> {
    let exp =
        std::fs::read_to_string(suite().join(case).join(format!("{case}-ptxed.exp"))).unwrap();
    exp.lines()
        .filter_map(|l| u64::from_str_radix(l.trim(), 16).ok())
        .collect()
}

#[test]
fn every_matching_libipt_case_decodes_as_a_pt_bundle_alike_on_any_thread_count() {
    let cases = matching_cases();
    assert!(cases.len() >= 50, "only {} cases", cases.len());
    let tmp = tempfile::tempdir().unwrap();
    let mut with_rows = 0;
    for (case, load) in &cases {
        let b = bundle(tmp.path(), case, *load);
        let one = tmp.path().join(format!("{case}.j1"));
        let two = tmp.path().join(format!("{case}.j2"));
        ok(&["decode", s(&b), "--out", s(&one), "-j", "1", "-q"]);
        ok(&[
            "decode",
            s(&b),
            "--out",
            s(&two),
            "-j",
            "2",
            "--chunk-size",
            "0",
            "-q",
        ]);
        for t in ["branches", "events", "timing", "coverage", "edges"] {
            let f = format!("{t}.parquet");
            assert!(
                std::fs::read(one.join(&f)).unwrap() == std::fs::read(two.join(&f)).unwrap(),
                "{case}: {t} differs between -j1 and -j2"
            );
        }
        let listed: BTreeSet<u64> = ptxed_addresses(case).into_iter().collect();
        let mut insns = 0u64;
        for batch in read(&one.join("branches.parquet")) {
            let ip = batch
                .column_by_name("ip")
                .unwrap()
                .as_primitive::<UInt64Type>();
            let n = batch
                .column_by_name("insns")
                .unwrap()
                .as_primitive::<UInt32Type>();
            for i in 0..batch.num_rows() {
                assert!(
                    listed.contains(&ip.value(i)),
                    "{case}: a branch row at {:#x}, an instruction ptxed does not list",
                    ip.value(i)
                );
                insns += n.value(i) as u64;
            }
            with_rows += usize::from(batch.num_rows() > 0 && ip.null_count() == 0);
        }
        assert!(
            insns <= ptxed_addresses(case).len() as u64,
            "{case}: rows count {insns} instructions, ptxed lists {}",
            ptxed_addresses(case).len()
        );
        // Every instruction counted: the rows' and the `tail` event's, as the documented
        // query adds them (docs/contracts.md), equal what ptxed lists when libipt reports
        // no error.
        let exp =
            std::fs::read_to_string(suite().join(case).join(format!("{case}-ptxed.exp"))).unwrap();
        if !exp.contains("error") {
            let listed = exp
                .lines()
                .filter(|l| u64::from_str_radix(l.trim().trim_start_matches("? "), 16).is_ok())
                .count() as u64;
            let tail = tail_insns(&one.join("events.parquet"));
            assert_eq!(insns + tail, listed, "{case}: instructions in the tables");
        }
    }
    println!(
        "{} libipt cases decoded as PT bundles, {with_rows} with branch rows",
        cases.len()
    );
    assert!(with_rows >= 20, "only {with_rows} cases gave branch rows");
}

#[test]
fn reports_dump_and_ingest_take_pt_bundles() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = tmp.path().join("fleet");
    let cases = ["call_indirect-ret_compressed", "call_direct-ret_compressed"];
    for case in cases {
        bundle(&fleet, case, 0x100000);
    }
    let b = fleet.join(cases[0]);
    let out = tmp.path().join("out");
    ok(&["decode", s(&b), "--out", s(&out), "-q"]);
    let dump = ok(&["dump", s(&b)]);
    assert!(String::from_utf8_lossy(&dump.stdout).contains("psb"));

    let hot = ok(&["report", "hotspots", s(&out), "--by", "block"]);
    assert!(
        String::from_utf8_lossy(&hot.stdout).contains("0x100000"),
        "{}",
        String::from_utf8_lossy(&hot.stdout)
    );
    let svg = tmp.path().join("fg.svg");
    ok(&["report", "flamegraph", s(&out), "--out", s(&svg)]);
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
    let lcov = tmp.path().join("cov.info");
    ok(&["report", "coverage", s(&out), "--lcov", s(&lcov)]);
    let json = tmp.path().join("calls.json");
    ok(&["report", "timeline", s(&out), "--out", s(&json)]);
    let html = tmp.path().join("report.html");
    ok(&["report", "html", s(&out), "--out", s(&html)]);
    assert!(std::fs::read_to_string(&html).unwrap().contains("<html"));

    let ds = tmp.path().join("ds");
    ok(&["ingest", s(&fleet), "--dataset", s(&ds), "-q"]);
    let hot = ok(&["report", "hotspots", s(&ds), "--by", "block"]);
    let text = String::from_utf8_lossy(&hot.stdout);
    assert!(text.contains("0x100000"), "{text}");
}

/// A libipt user's first move, ptxed's `--pt FILE --raw BIN:ADDR`: `tracemill decode
/// FILE.pt --image BIN@ADDR`, no --ctl, no bundle. The format comes from the trace's first
/// PSB, and the rows are those of the same case as a bundle.
#[test]
fn a_bare_intel_pt_trace_decodes_with_an_image_and_no_ctl_as_its_bundle_does() {
    let tmp = tempfile::tempdir().unwrap();
    let columns = |dir: &Path| -> Vec<arrow_array::ArrayRef> {
        read(&dir.join("branches.parquet"))
            .iter()
            .flat_map(|b| b.columns().to_vec())
            .collect()
    };
    for (case, load) in matching_cases().iter().take(25) {
        let b = bundle(tmp.path(), case, *load);
        let from_bundle = tmp.path().join(format!("{case}.bundle"));
        ok(&["decode", s(&b), "--out", s(&from_bundle), "-q"]);
        let src = suite().join(case);
        let bare = tmp.path().join(format!("{case}.bare"));
        let pt = src.join(format!("{case}.pt"));
        let image = format!("{}@{load:#x}", s(&src.join(format!("{case}.bin"))));
        ok(&["decode", s(&pt), "--image", &image, "--out", s(&bare), "-q"]);
        assert_eq!(columns(&bare), columns(&from_bundle), "{case}");
    }
    // Told it is RTIT, it is refused as the other format; PT facts on an RTIT sample are
    // refused by name.
    let (case, _) = &matching_cases()[0];
    let pt = suite().join(case).join(format!("{case}.pt"));
    let o = tracemill(&[
        "decode",
        s(&pt),
        "--trace-format",
        "rtit",
        "--ctl",
        "0x2000",
    ]);
    assert!(!o.status.success());
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/samples/recursion");
    let o = tracemill(&["decode", s(&sample), "--cpu", "6/85/4"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("this bundle is RTIT"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
