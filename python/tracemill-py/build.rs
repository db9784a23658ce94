//! Records a fingerprint of the sources this module is built from (its own, the Python
//! half it is packaged with, and the tracemill crates it uses), so that the test command
//! can tell a stale installed package from a current one
//! (`pipeline/tests/python_package.rs` computes the same fingerprint).

use std::path::{Path, PathBuf};

/// The directories whose files make the package, relative to the repository root.
const SOURCES: &[&str] = &[
    "python/tracemill-py/src",
    "python/tracemill-py/python",
    "pipeline/src",
    "input/src",
    "decode/src",
    "sinks/src",
    "schemas/src",
    "reports/src",
    "datasets/src",
    "perfdata/src",
];

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "__pycache__" || name.ends_with(".so") {
            continue;
        }
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// FNV-1a over each file's path (from the root) and bytes, in path order.
fn fingerprint(root: &Path) -> u64 {
    let mut all = Vec::new();
    for d in SOURCES {
        files(&root.join(d), &mut all);
    }
    all.sort();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for f in all {
        let rel = f.strip_prefix(root).unwrap_or(&f);
        eat(rel.to_string_lossy().as_bytes());
        eat(&[0]);
        eat(&std::fs::read(&f).unwrap_or_default());
        eat(&[0]);
    }
    h
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for d in SOURCES {
        println!("cargo:rerun-if-changed={}", root.join(d).display());
    }
    println!(
        "cargo:rustc-env=TRACEMILL_SOURCE_FINGERPRINT={:016x}",
        fingerprint(&root)
    );
}
