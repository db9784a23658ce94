//! The tables as users read them: a Python script (python/test_tables.py) queries a
//! decoded sample with DuckDB, pyarrow and polars.

use std::path::Path;
use std::process::Command;

use tracemill::run::{self, Tables};
use tracemill_input::bundle::Bundle;

mod common;

fn python_ready() -> bool {
    let ok = Command::new(common::python())
        .args(["-c", "import duckdb, pyarrow, polars"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        common::missing_tool(
            "the Python test needs python3 with duckdb, pyarrow and polars \
             (python3 -m venv .venv && .venv/bin/pip install -r python/requirements.txt)",
        );
    }
    ok
}

#[test]
fn duckdb_pyarrow_and_polars_read_the_tables() {
    if !python_ready() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let bundle = root.join("datasets/samples/recursion");
    let out = tempfile::tempdir().unwrap();
    let b = Bundle::open(&bundle, None, &[]).unwrap();
    let opts = run::Options {
        jobs: 2,
        out: Some(out.path().to_path_buf()),
        tables: Tables::ALL,
        ..run::Options::default()
    };
    run::decode(&b, &opts).unwrap();
    let o = Command::new(common::python())
        .arg(root.join("python/test_tables.py"))
        .arg(out.path())
        .arg(&bundle)
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&o.stdout));
    assert!(
        o.status.success(),
        "python test failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
