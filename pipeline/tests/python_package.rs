//! The Python package (`python/tracemill-py`) as its users run it: pytest runs the
//! package's tests (`python/tracemill-py/tests`) against the package installed in the
//! repository's `.venv` (the README's install line), with this build's `tracemill` binary
//! to compare against (`TRACEMILL_BIN`): the streams against the CLI's Parquet files, the
//! reports, dump and ingest against the CLI's output, the exceptions' messages against the
//! CLI's errors, zero-copy hand-over to pyarrow, polars and DuckDB, a 100 M-row stream in
//! bounded memory, Ctrl-C.
//!
//! The tests first check that the installed package was built from the sources in this
//! tree (a fingerprint of them, `python/tracemill-py/build.rs`): a stale install fails
//! with the line that reinstalls it.
//!
//! `tests/test_sources.py` decodes every kind of source through both faces; the perf.data
//! among them is made here (`TRACEMILL_PERF_DATA`): busybox `sort` under qemu, encoded as
//! Intel PT and stored as `perf record -e intel_pt//u` stores it, on two CPUs.

use std::path::{Path, PathBuf};
use std::process::Command;

use tracemill_datasets::exec::qemu;
use tracemill_datasets::perf_data::{intel_pt_two_threads, CpuStream, PtRecording};
use tracemill_datasets::pt_encode::{encode_execution, PtOptions, PtTsc};
use tracemill_decode::image::ImageSet;

mod common;

const BUSYBOX: &str = "/usr/bin/busybox";

/// A perf.data of two threads running busybox `sort -n`, each on its own CPU, in `dir`;
/// `None` (the reason said) without qemu or busybox.
fn perf_data(dir: &Path) -> Option<PathBuf> {
    if let Some(why) = qemu::check_tools()
        .err()
        .map(|e| e.to_string())
        .or_else(|| (!Path::new(BUSYBOX).exists()).then(|| format!("{BUSYBOX} not installed")))
    {
        common::missing_tool(&format!("the perf.data source of test_sources.py: {why}"));
        return None;
    }
    let input: String = (0..200)
        .map(|i| format!("{}\n", (i * 7919) % 1000))
        .collect();
    let cap = qemu::trace(Path::new(BUSYBOX), &["sort", "-n"], input.as_bytes()).unwrap();
    let exec = cap.execution;
    let mut images = ImageSet::new();
    images
        .add_elf("busybox", &exec.images[0].1, None, None)
        .unwrap();
    let mut r = PtRecording::for_elf(Path::new(BUSYBOX), 4242, Vec::new()).unwrap();
    // TSC, branches (perf's intel_pt//u with mtc=0): TSC packets in PSB+ only.
    r.config = 1 | 1 << 10 | 1 << 13;
    let switch_in = r.start_time + 100_000;
    let o = PtOptions {
        tsc: Some(PtTsc {
            start: r.clock.perf_time_to_tsc(switch_in + 1_000).unwrap(),
            per_insn: 1,
        }),
        ..PtOptions::default()
    };
    let out = encode_execution(&images, &o, exec.entry, exec.steps.iter().copied());
    let end = r.clock.perf_time_to_tsc(switch_in + 1_000).unwrap() + out.summary.instructions;
    // Two threads of the process on two CPUs, running the same code at the same time: two
    // AUX areas, two parts of one decode (the progress test counts over both).
    for (cpu, tid) in [(0, 4242), (1, 4243)] {
        r.cpus.push(CpuStream {
            cpu,
            tid,
            pt: out.bytes.clone(),
            switch_in,
            switch_out: r.clock.tsc_to_perf_time(end) + 1_000,
        });
    }
    let path = dir.join("perf.data");
    std::fs::write(&path, intel_pt_two_threads(&r).unwrap().bytes).unwrap();
    Some(path)
}

#[test]
fn python_package_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let ready = Command::new(common::python())
        .args([
            "-c",
            "import tracemill, pytest, pyarrow, polars, duckdb, pandas",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !ready {
        common::missing_tool(
            "the Python package's tests need it installed, with pytest, polars, DuckDB and \
             pandas: .venv/bin/pip install -v -r python/requirements.txt ./python/tracemill-py",
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let perf = perf_data(tmp.path());
    let o = Command::new(common::python())
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "python/tracemill-py/tests",
        ])
        .current_dir(&root)
        .env("TRACEMILL_BIN", env!("CARGO_BIN_EXE_tracemill"))
        .env("TRACEMILL_PERF_DATA", perf.unwrap_or_default())
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&o.stdout));
    assert!(
        o.status.success(),
        "pytest failed:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}
