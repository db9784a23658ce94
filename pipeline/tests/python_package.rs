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

use std::path::Path;
use std::process::Command;

mod common;

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
