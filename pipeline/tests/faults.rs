//! `tracemill decode` killed, or refused disk space, at any moment: every table in the
//! output directory is whole or absent, the next run cleans up what a killed one left, and
//! a failed write names the file and exits non-zero.

#![cfg(unix)]

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use tracemill_datasets::rng::Rng;

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_tracemill");

fn sample(name: &str) -> String {
    common::samples_dir()
        .join(name)
        .to_str()
        .expect("UTF-8 path")
        .to_string()
}

/// Read every row of every table in `dir` (Parquet or Arrow IPC), or panic saying which is
/// damaged. Returns the tables' file names, and the names of anything else.
fn check_tables(dir: &Path) -> (Vec<String>, Vec<String>) {
    let (mut tables, mut other) = (Vec::new(), Vec::new());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (tables, other);
    };
    for e in entries {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let f = File::open(&path).unwrap();
        if name.ends_with(".parquet") {
            let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .build()
                .unwrap();
            for b in reader {
                b.unwrap_or_else(|e| panic!("{name}: {e}"));
            }
            tables.push(name);
        } else if name.ends_with(".arrow") {
            let reader = arrow_ipc::reader::FileReader::try_new(f, None)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            for b in reader {
                b.unwrap_or_else(|e| panic!("{name}: {e}"));
            }
            tables.push(name);
        } else {
            other.push(name);
        }
    }
    tables.sort();
    other.sort();
    (tables, other)
}

fn decode_args<'a>(bundle: &'a str, out: &'a str, format: &'a str) -> Vec<&'a str> {
    vec![
        "decode",
        bundle,
        "--out",
        out,
        "--format",
        format,
        "--chunk-size",
        "512",
        "-j",
        "2",
        "-q",
    ]
}

#[test]
fn sigkill_at_any_moment_leaves_whole_tables_and_the_next_run_cleans_up() {
    let bundle = sample("busybox-sort");
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(2024);
    for format in ["parquet", "arrow"] {
        let out = dir.path().join(format);
        let out_s = out.to_str().unwrap();
        // How long a whole run takes here: kills land anywhere in it.
        let t = Instant::now();
        let st = Command::new(BIN)
            .args(decode_args(&bundle, out_s, format))
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
        let whole = t.elapsed();
        std::fs::remove_dir_all(&out).unwrap();

        let mut left_behind = 0;
        for _ in 0..20 {
            let mut child = Command::new(BIN)
                .args(decode_args(&bundle, out_s, format))
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let at = whole.mul_f64(rng.below(1000) as f64 / 1000.0 * 1.1);
            std::thread::sleep(at);
            let _ = child.kill(); // SIGKILL; it may have finished already
            child.wait().unwrap();
            let (_, other) = check_tables(&out);
            left_behind += other.iter().filter(|n| n.contains(".tmp-")).count();
            assert!(
                other
                    .iter()
                    .all(|n| n.starts_with('.') && n.contains(".tmp-")),
                "{other:?}"
            );
        }
        // The next run finishes, writes all five tables and removes every temporary.
        let o = Command::new(BIN)
            .args(decode_args(&bundle, out_s, format))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        let (tables, other) = check_tables(&out);
        assert_eq!(tables.len(), 5, "{tables:?}");
        assert!(other.is_empty(), "{format}: left behind: {other:?}");
        eprintln!(
            "{format}: whole run {whole:?}, {left_behind} temporaries seen after kills; {}",
            err.lines().find(|l| l.contains("removed")).unwrap_or("")
        );
    }
}

#[test]
fn a_decode_removes_the_temporaries_of_dead_processes_only() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let stale = out.join(format!(".branches.parquet.tmp-{dead}-0"));
    // This test's own process is alive: its temporaries are somebody's work in progress.
    let live = out.join(format!(".events.parquet.tmp-{}-7", std::process::id()));
    let mine = out.join("notes.txt");
    for p in [&stale, &live, &mine] {
        std::fs::write(p, b"x").unwrap();
    }
    let o = Command::new(BIN)
        .args(decode_args(
            &sample("callbacks"),
            out.to_str().unwrap(),
            "parquet",
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "tracemill: removed 1 temporary file that an interrupted run left in {}",
            out.display()
        )),
        "{err}"
    );
    assert!(!stale.exists());
    assert!(live.exists() && mine.exists());
}

#[test]
fn a_write_that_fails_names_the_file_and_leaves_no_partial_table() {
    let bundle = sample("recursion");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // A file size limit of 64 KiB, as a batch node might set. tracemill ignores SIGXFSZ
    // itself (the signal would otherwise kill it silently), so the write fails with EFBIG.
    let script = r#"ulimit -f 64; exec "$@""#;
    let o = Command::new("bash")
        .args(["-c", script, "tracemill", BIN])
        .args(decode_args(&bundle, out.to_str().unwrap(), "parquet"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    // "tracemill: error: decoding B: OUT/branches.parquet: ...: File too large (os error 27)"
    let line = err
        .lines()
        .find(|l| l.starts_with("tracemill: error: "))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains("File too large"), "{err}");
    let named = ["branches", "events", "timing", "coverage", "edges"]
        .iter()
        .any(|t| line.contains(&format!("{}/{t}.parquet: ", out.display())));
    assert!(named, "{err}");
    assert_eq!(err.matches("File too large").count(), 1, "{err}");
    // No table is published (they appear together or not at all), and no temporary is
    // left.
    let (tables, other) = check_tables(&out);
    assert!(other.is_empty(), "{other:?}");
    assert!(tables.is_empty(), "{tables:?}");
}

/// The tables of one run appear together or not at all (docs/contracts.md, "Publishing"):
/// a disk that fills during a decode over an older one leaves the older set whole and
/// untouched (before, some tables were new and others old: a mixed set); a decode of
/// fewer tables removes the older run's others, so no table of another run stays beside
/// the new ones.
#[test]
fn tables_of_one_run_appear_together_over_an_older_decode() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let out_s = out.to_str().unwrap();
    let o = Command::new(BIN)
        .args(decode_args(&sample("recursion"), out_s, "parquet"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (older, _) = check_tables(&out);
    assert_eq!(older.len(), 5, "{older:?}");
    let bytes = |names: &[String]| -> Vec<Vec<u8>> {
        names
            .iter()
            .map(|n| std::fs::read(out.join(n)).unwrap())
            .collect()
    };
    let before = bytes(&older);

    // Another bundle, with a file size limit that a table of it exceeds.
    let script = r#"ulimit -f 64; exec "$@""#;
    let o = Command::new("bash")
        .args(["-c", script, "tracemill", BIN])
        .args(decode_args(&sample("busybox-sort"), out_s, "parquet"))
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let (after, other) = check_tables(&out);
    assert!(other.is_empty(), "{other:?}");
    assert_eq!(after, older);
    assert!(
        bytes(&after) == before,
        "an older table was replaced by a failed run"
    );

    // Fewer tables, in the other format: the older set goes.
    let o = Command::new(BIN)
        .args(decode_args(&sample("callbacks"), out_s, "arrow"))
        .args(["--tables", "branches,edges"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (now, other) = check_tables(&out);
    assert!(other.is_empty(), "{other:?}");
    assert_eq!(now, ["branches.arrow", "edges.arrow"]);
}
