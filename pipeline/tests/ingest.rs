//! `tracemill ingest`: a fleet of bundles (the samples, labelled as hosts and nights, plus
//! broken ones) into one hive-partitioned dataset; the catalog; re-runs, retries, shards
//! and the environment of Slurm and Kubernetes; SIGKILL at any moment; DuckDB, pyarrow
//! and polars reading it back.

#![cfg(unix)]

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::RecordBatch;
use arrow_select::concat::concat_batches;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tracemill_datasets::rng::Rng;

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_tracemill");

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        let name = e.file_name();
        if name == "truth" {
            continue; // not part of a collected bundle
        }
        if p.is_dir() {
            copy_dir(&p, &to.join(&name));
        } else {
            std::fs::copy(&p, to.join(&name)).unwrap();
        }
    }
}

/// Rewrite `dir/bundle.toml` with these labels added (a value of `None` removes one).
fn set_labels(dir: &Path, labels: &[(&str, Option<&str>)]) {
    let path = dir.join("bundle.toml");
    let mut t: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
    let l = t
        .entry("labels")
        .or_insert_with(|| toml::Value::Table(Default::default()))
        .as_table_mut()
        .unwrap();
    for (k, v) in labels {
        match v {
            Some(v) => l.insert(k.to_string(), toml::Value::String(v.to_string())),
            None => l.remove(*k),
        };
    }
    std::fs::write(&path, toml::to_string(&t).unwrap()).unwrap();
}

/// The bad bundles of a night, with a word their failure reason must contain.
const BAD: [(&str, &str); 4] = [
    ("bad-missing-trace", "trace.rtit"),
    ("bad-toml", "bundle.toml"),
    ("bad-corrupt-trace", "PSB"),
    ("bad-missing-images", "no code image"),
];

/// `root/night/<host>/<sample>` for every sample (labels `date`, `host`; one without a
/// host label), and the bad bundles under `root/night/bad/`. Returns the good bundles.
fn fleet(root: &Path, with_bad: bool) -> Vec<PathBuf> {
    let mut good = Vec::new();
    for (i, sample) in common::bundles().iter().enumerate() {
        let name = sample.file_name().unwrap().to_str().unwrap();
        let host = format!("host-{}", i % 3);
        let dir = root.join("night").join(&host).join(name);
        copy_dir(sample, &dir);
        let date = if i % 2 == 0 {
            "2026-11-22"
        } else {
            "2026-11-23"
        };
        let host_label = (i != 4).then_some(host.as_str());
        set_labels(&dir, &[("date", Some(date)), ("host", host_label)]);
        good.push(dir);
    }
    if with_bad {
        let bad = root.join("night/bad");
        let src = common::samples_dir().join("strings");
        for (name, _) in BAD {
            let d = bad.join(name);
            copy_dir(&src, &d);
            set_labels(&d, &[("date", Some("2026-11-23")), ("host", Some("bad"))]);
            match name {
                "bad-missing-trace" => std::fs::remove_file(d.join("trace.rtit")).unwrap(),
                "bad-toml" => std::fs::write(d.join("bundle.toml"), "rtit_ctl = [oops\n").unwrap(),
                "bad-corrupt-trace" => {
                    let mut rng = Rng::new(7);
                    let junk: Vec<u8> = (0..20_000).map(|_| rng.below(256) as u8 & 0xfd).collect();
                    std::fs::write(d.join("trace.rtit"), junk).unwrap();
                }
                "bad-missing-images" => std::fs::remove_dir_all(d.join("images")).unwrap(),
                _ => unreachable!(),
            }
        }
    }
    good
}

fn ingest(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("ingest")
        .args(args)
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

fn read_parquet(path: &Path) -> RecordBatch {
    let f = File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let b = ParquetRecordBatchReaderBuilder::try_new(f)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let schema = b.schema().clone();
    let batches: Vec<_> = b.build().unwrap().map(Result::unwrap).collect();
    concat_batches(&schema, &batches).unwrap()
}

/// A column's values as strings: string and dictionary columns as they are, the catalog's
/// counts (UInt64) in decimal, as arrow's `cast` to `Utf8` gives them.
fn strings(b: &RecordBatch, name: &str) -> Vec<Option<String>> {
    let c = b
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"));
    if let Some(n) = c.as_primitive_opt::<UInt64Type>() {
        return n.iter().map(|v| v.map(|v| v.to_string())).collect();
    }
    tracemill_sinks::convert::strings(c.as_ref())
        .unwrap_or_else(|e| panic!("column {name}: {e}"))
        .iter()
        .map(|v| v.map(str::to_string))
        .collect()
}

/// The catalog, by source path: every column as text (`seconds` left out: it is a time).
fn catalog(dest: &Path) -> BTreeMap<String, BTreeMap<String, Option<String>>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dest.join("bundles")).unwrap() {
        let p = e.unwrap().path();
        assert!(
            p.extension().is_some_and(|x| x == "parquet"),
            "{}",
            p.display()
        );
        let b = read_parquet(&p);
        assert_eq!(b.num_rows(), 1, "{}", p.display());
        let mut row = BTreeMap::new();
        for f in b.schema().fields() {
            if f.name() == "seconds" {
                continue;
            }
            row.insert(f.name().clone(), strings(&b, f.name())[0].clone());
        }
        assert_eq!(
            p.file_stem().unwrap().to_str(),
            row["bundle"].as_deref(),
            "catalog file named by its bundle"
        );
        out.insert(row["source"].clone().unwrap(), row);
    }
    out
}

/// Every file under `dest` but the staging area, relative, with its rows (the catalog's
/// `seconds` left out).
fn dataset(dest: &Path) -> BTreeMap<String, RecordBatch> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dest.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dest).unwrap().to_str().unwrap().to_string();
            if rel == "_staging" {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else if rel == "_tracemill.json" {
                continue;
            } else {
                let mut b = read_parquet(&p);
                if let Ok(i) = b.schema().index_of("seconds") {
                    b.remove_column(i);
                }
                out.insert(rel, b);
            }
        }
    }
    out
}

fn staging_left(dest: &Path) -> Vec<String> {
    match std::fs::read_dir(dest.join("_staging")) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn a_night_becomes_one_partitioned_dataset_with_a_catalog() {
    let tmp = tempfile::tempdir().unwrap();
    let good = fleet(tmp.path(), true);
    let dest = tmp.path().join("dataset");
    let night = tmp.path().join("night");
    let o = ingest(&[
        s(&night),
        "--dataset",
        s(&dest),
        "--partition-by",
        "date,host",
        "-j",
        "2",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!("{} ok, 4 failed now", good.len())),
        "{err}"
    );

    // The catalog: one row per bundle, ok or failed with the reason.
    let cat = catalog(&dest);
    assert_eq!(cat.len(), good.len() + BAD.len());
    for (name, why) in BAD {
        let row = cat
            .iter()
            .find(|(src, _)| src.ends_with(name))
            .unwrap_or_else(|| panic!("no row for {name}"))
            .1;
        assert_eq!(row["status"].as_deref(), Some("failed"), "{name}");
        let e = row["error"].as_deref().unwrap_or("");
        assert!(e.contains(why), "{name}: {e}");
        assert!(row["branches"].is_none(), "{name}");
        // Nothing of a failed bundle is in the tables.
        let id = row["bundle"].as_deref().unwrap();
        assert!(dataset(&dest)
            .keys()
            .all(|k| !k.starts_with("branches") || !k.contains(id)));
    }
    let version = env!("CARGO_PKG_VERSION");
    for dir in &good {
        let src = std::path::absolute(dir).unwrap().display().to_string();
        let row = &cat[&src];
        assert_eq!(row["status"].as_deref(), Some("ok"), "{src}: {row:?}");
        assert!(row["error"].is_none());
        assert_eq!(row["tracemill_version"].as_deref(), Some(version));
        assert_eq!(
            row["trace_bytes"].as_deref(),
            Some(
                // The file as collected (`trace.topa`, `trace.hub` for those forms).
                std::fs::metadata(
                    tracemill_input::manifest::Manifest::load(dir)
                        .unwrap()
                        .trace_path(dir)
                )
                .unwrap()
                .len()
                .to_string()
                .as_str()
            )
        );
        let id = row["bundle"].clone().unwrap();
        let date = row["date"].clone().unwrap();
        let host = row.get("host").cloned().flatten();
        let pdir = format!(
            "date={date}/host={}",
            host.as_deref().unwrap_or("__HIVE_DEFAULT_PARTITION__")
        );

        // Each table at its hive path, every row tagged with the bundle, the rows exactly
        // those of a plain decode of the bundle.
        let plain = tmp.path().join("plain").join(&id);
        let d = Command::new(BIN)
            .args(["decode", s(dir), "--out", s(&plain), "-j", "1", "-q"])
            .output()
            .unwrap();
        assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));
        for table in ["branches", "events", "timing", "coverage", "edges"] {
            let got = read_parquet(&dest.join(table).join(&pdir).join(format!("{id}.parquet")));
            let want = read_parquet(&plain.join(format!("{table}.parquet")));
            let n = got.num_columns();
            assert_eq!(got.schema().field(n - 1).name(), "bundle");
            assert!(strings(&got, "bundle")
                .iter()
                .all(|b| b.as_deref() == Some(id.as_str())));
            assert_eq!(got.num_rows(), want.num_rows(), "{src} {table}");
            assert_eq!(&got.columns()[..n - 1], want.columns(), "{src} {table}");
            if table == "branches" {
                assert_eq!(
                    row["branches"].as_deref(),
                    Some(got.num_rows().to_string().as_str())
                );
            }
        }
    }
    assert!(staging_left(&dest).is_empty(), "{:?}", staging_left(&dest));
    let before = dataset(&dest);

    // A re-run skips every committed bundle and changes nothing.
    let o = ingest(&[
        s(&night),
        "--dataset",
        s(&dest),
        "--partition-by",
        "date,host",
        "-j",
        "2",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("0 ok, 0 failed now"), "{err}");
    assert!(
        err.contains(&format!("{} already committed", cat.len())),
        "{err}"
    );
    assert_eq!(dataset(&dest), before);

    // Images put back: --retry-failed decodes the failed bundles again, and that one is
    // ok now (its id is unchanged: images are not part of it). The others fail again.
    let fixed = night.join("bad/bad-missing-images");
    copy_dir(
        &common::samples_dir().join("strings/images"),
        &fixed.join("images"),
    );
    let o = ingest(&[
        s(&night),
        "--dataset",
        s(&dest),
        "--partition-by",
        "date,host",
        "--retry-failed",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("1 ok, 3 failed now"), "{err}");
    let cat2 = catalog(&dest);
    let src = std::path::absolute(&fixed).unwrap().display().to_string();
    assert_eq!(cat2[&src]["status"].as_deref(), Some("ok"));
    assert_eq!(cat2[&src]["bundle"], cat.get(&src).unwrap()["bundle"]);
    let id = cat2[&src]["bundle"].clone().unwrap();
    assert!(dest
        .join(format!("branches/date=2026-11-23/host=bad/{id}.parquet"))
        .exists());

    // Only the good ones, from a list file: every bundle ok, exit 0.
    let list = tmp.path().join("good.txt");
    let lines: Vec<String> = good
        .iter()
        .map(|p| p.strip_prefix(tmp.path()).unwrap().display().to_string())
        .collect();
    std::fs::write(&list, lines.join("\n") + "\n").unwrap();
    let o = ingest(&[
        s(&list),
        "--dataset",
        s(&dest),
        "--partition-by",
        "date,host",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn bad_arguments_and_an_unwritable_dataset_exit_1() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("b");
    copy_dir(&common::samples_dir().join("scenario-figure6"), &bundle);
    let file = tmp.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let dest = tmp.path().join("d");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                s(&bundle).into(),
                "--dataset".into(),
                s(&file.join("sub")).into(),
            ],
            "cannot be written",
        ),
        (
            vec![
                s(&tmp.path().join("nope")).into(),
                "--dataset".into(),
                s(&dest).into(),
            ],
            "nope",
        ),
        (
            vec![
                s(&bundle).into(),
                "--dataset".into(),
                s(&dest).into(),
                "--partition-by".into(),
                "ip".into(),
            ],
            "column",
        ),
        (
            vec![
                s(&bundle).into(),
                "--dataset".into(),
                s(&dest).into(),
                "--shard".into(),
                "2/2".into(),
            ],
            "shard",
        ),
        (
            vec![s(&bundle).into(), "--dataset".into(), "gs://x/y".into()],
            "s3://",
        ),
        (
            vec![
                s(&tmp.path().join("empty-list")).into(),
                "--dataset".into(),
                s(&dest).into(),
            ],
            "no bundle found",
        ),
    ];
    std::fs::write(tmp.path().join("empty-list"), "# nothing tonight\n").unwrap();
    for (args, why) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = ingest(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("tracemill: error:") && err.contains(why),
            "{args:?}: {err}"
        );
    }
    // A dataset made with other partition keys is refused before anything is written.
    // (The sample has no host label: allowed explicitly.)
    let o = ingest(&[
        s(&bundle),
        "--dataset",
        s(&dest),
        "--partition-by",
        "host",
        "--allow-missing-keys",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = ingest(&[
        s(&bundle),
        "--dataset",
        s(&dest),
        "--partition-by",
        "date",
        "--allow-missing-keys",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("partitioned by [host]"), "{err}");
}

#[test]
fn shards_by_flag_slurm_and_kubernetes_make_the_single_process_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    fleet(tmp.path(), false);
    let night = tmp.path().join("night");
    let whole = tmp.path().join("whole");
    let o = ingest(&[
        s(&night),
        "--dataset",
        s(&whole),
        "--partition-by",
        "host",
        "-j",
        "2",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    let sharded = tmp.path().join("sharded");
    let run = |env: &[(&str, &str)], extra: &[&str]| {
        let mut c = Command::new(BIN);
        c.args([
            "ingest",
            s(&night),
            "--dataset",
            s(&sharded),
            "--partition-by",
            "host",
            "-j",
            "1",
        ])
        .args(extra)
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX");
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(0), "{env:?} {extra:?}: {err}");
        err
    };
    // Four shards: one by flag, one as a Slurm array task (array=1-4), one as a
    // Kubernetes Indexed Job pod, and the last as deploy/slurm-ingest.sh runs it in a task
    // of `sbatch --array=0-3` (no Slurm daemons here: the script with the variables Slurm
    // sets).
    let mut seen = 0;
    for err in [
        run(&[], &["--shard", "0/4"]),
        run(
            &[
                ("SLURM_ARRAY_TASK_ID", "2"),
                ("SLURM_ARRAY_TASK_MIN", "1"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
            ],
            &[],
        ),
        run(&[("JOB_COMPLETION_INDEX", "2")], &["--shards", "4"]),
        slurm_script_task(&night, &sharded, 3, 4),
    ] {
        let n: usize = err
            .split(" in shard ")
            .next()
            .and_then(|h| h.rsplit(", ").next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no shard count in {err}"));
        seen += n;
    }
    assert_eq!(seen, common::bundles().len());
    assert_same_dataset(&whole, &sharded);
}

/// The same files with the same rows (the catalog's `seconds` aside).
#[test]
fn ingest_takes_decodes_format_and_intel_pt_facts() {
    // `--trace-format` and the Intel PT facts are `decode`'s options on `ingest` too: a
    // bundle of the other format fails with its row, the facts are taken (and a bad one
    // is a usage error before anything is read).
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("recursion");
    copy_dir(&common::samples_dir().join("recursion"), &bundle);
    let dest = tmp.path().join("as-pt");
    let o = ingest(&[
        s(&bundle),
        "--dataset",
        s(&dest),
        "--trace-format",
        "pt",
        "-q",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    let row = &catalog(&dest)[s(&bundle)];
    assert_eq!(row["status"].as_deref(), Some("failed"));
    let why = row["error"].clone().unwrap_or_default();
    assert!(
        why.contains("--trace-format pt given") && why.contains("format = \"rtit\""),
        "{why}"
    );

    let dest = tmp.path().join("as-rtit");
    let o = ingest(&[
        s(&bundle),
        "--dataset",
        s(&dest),
        "--trace-format",
        "rtit",
        "-q",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(catalog(&dest)[s(&bundle)]["status"].as_deref(), Some("ok"));

    let o = ingest(&[s(&bundle), "--dataset", s(&dest), "--mtc-freq", "x", "-q"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("mtc-freq"));
}

fn assert_same_dataset(a: &Path, b: &Path) {
    let (a, b) = (dataset(a), dataset(b));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (k, v) in &a {
        if k.starts_with("bundles/") {
            // `source` and the counts; not `seconds` (left out).
            assert_eq!(v, &b[k], "{k}");
        } else {
            assert_eq!(v.columns(), b[k].columns(), "{k}");
        }
    }
}

fn on_path(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn a_real_slurm_array_of_4_tasks_makes_the_single_process_dataset() {
    let missing: Vec<_> = ["munged", "slurmctld", "slurmd", "sbatch", "sinfo"]
        .into_iter()
        .filter(|t| !on_path(t))
        .collect();
    if !missing.is_empty() {
        common::missing_tool(&format!(
            "the Slurm test needs {} (apt-get install slurmctld slurmd slurm-client munge)",
            missing.join(", ")
        ));
        return;
    }
    // slurmd needs root: as root run the script directly, else through passwordless sudo
    // (CI machines often give that instead).
    let uid = Command::new("id").arg("-u").output().unwrap();
    let root = String::from_utf8_lossy(&uid.stdout).trim() == "0";
    let sudo = !root
        && Command::new("sudo")
            .args(["-n", "true"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !root && !sudo {
        common::missing_tool("the Slurm test runs slurmd, which needs root (or passwordless sudo)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    fleet(tmp.path(), false);
    let night = tmp.path().join("night");
    let whole = tmp.path().join("whole");
    let o = ingest(&[
        s(&night),
        "--dataset",
        s(&whole),
        "--partition-by",
        "date,host",
        "-j",
        "2",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // munged, slurmctld and slurmd started in `work` and stopped by the script.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/test-slurm.sh");
    let sharded = tmp.path().join("sharded");
    let mut cmd = if root {
        Command::new("bash")
    } else {
        let mut c = Command::new("sudo");
        c.args(["-n", "bash"]);
        c
    };
    let o = cmd
        .arg(script)
        .args([
            BIN,
            s(&night),
            s(&sharded),
            s(&tmp.path().join("slurm")),
            "4",
            "date,host",
        ])
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    // Four tasks, each its own shard, together every bundle.
    for i in 0..4 {
        assert!(err.contains(&format!(" in shard {i}/4")), "{err}");
    }
    assert_same_dataset(&whole, &sharded);
}

/// `deploy/slurm-ingest.sh NIGHT DEST` as task `index` of an array of `count`.
fn slurm_script_task(night: &Path, dest: &Path, index: u32, count: u32) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/slurm-ingest.sh");
    let o = Command::new("bash")
        .arg(script)
        .args([s(night), s(dest)])
        .env("TRACEMILL", BIN)
        .env("PARTITION_BY", "host")
        .env("SLURM_ARRAY_TASK_ID", index.to_string())
        .env("SLURM_ARRAY_TASK_MIN", "0")
        .env("SLURM_ARRAY_TASK_COUNT", count.to_string())
        .env("SLURM_CPUS_PER_TASK", "1")
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "slurm task {index}: {err}");
    err
}

#[test]
fn sigkill_at_any_moment_then_a_rerun_gives_the_clean_runs_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    fleet(tmp.path(), true);
    let night = tmp.path().join("night");
    let args = |dest: &Path| -> Vec<String> {
        [
            s(&night),
            "--dataset",
            s(dest),
            "--partition-by",
            "date,host",
            "-j",
            "2",
            "-q",
        ]
        .map(String::from)
        .to_vec()
    };
    let clean = tmp.path().join("clean");
    let t = Instant::now();
    let o = Command::new(BIN)
        .arg("ingest")
        .args(args(&clean))
        .output()
        .unwrap();
    let whole = t.elapsed();
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let want = dataset(&clean);

    let mut rng = Rng::new(0x1c0ffee);
    for round in 0..3 {
        let dest = tmp.path().join(format!("killed-{round}"));
        let mut kills = 0;
        // Killed a few times at seeded moments, each run resuming what the last left.
        for _ in 0..4 {
            let mut child = Command::new(BIN)
                .arg("ingest")
                .args(args(&dest))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let at = whole.mul_f64(rng.below(1000) as f64 / 1000.0);
            std::thread::sleep(at);
            if child.try_wait().unwrap().is_none() {
                kills += 1;
            }
            let _ = child.kill(); // SIGKILL
            child.wait().unwrap();
            // Whatever is visible reads as whole files.
            if dest.exists() {
                dataset(&dest);
            }
        }
        let o = Command::new(BIN)
            .arg("ingest")
            .args(args(&dest))
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(3),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let got = dataset(&dest);
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "round {round}"
        );
        for (k, v) in &want {
            assert_eq!(v.columns(), got[k].columns(), "round {round}: {k}");
        }
        assert!(
            staging_left(&dest).is_empty(),
            "round {round}: {:?}",
            staging_left(&dest)
        );
        eprintln!("round {round}: {kills} runs killed before they finished (clean run {whole:?})");
    }
}

/// Operators start the same night twice (a scheduler's retry, a person by hand): two and
/// three runs at once into one dataset, some killed at random moments, must leave exactly
/// the dataset one clean run makes, bundle by bundle and table by table, with nothing left
/// in staging. (Before claims, most bundles ended `failed` with "renaming temporary file:
/// No such file or directory", and some `ok` in the catalog with no table file at all.)
#[test]
fn two_or_three_runs_at_once_and_random_kills_give_the_clean_runs_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    fleet(tmp.path(), true);
    let night = tmp.path().join("night");
    let args = |dest: &Path| -> Vec<String> {
        [
            s(&night),
            "--dataset",
            s(dest),
            "--partition-by",
            "date,host",
            "-j",
            "2",
            "-q",
        ]
        .map(String::from)
        .to_vec()
    };
    let clean = tmp.path().join("clean");
    let t = Instant::now();
    let o = Command::new(BIN)
        .arg("ingest")
        .args(args(&clean))
        .output()
        .unwrap();
    let whole = t.elapsed();
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    let mut rng = Rng::new(0xc1a1);
    for (round, runs, kill) in [(0, 2, false), (1, 3, false), (2, 3, true), (3, 2, true)] {
        let dest = tmp.path().join(format!("together-{round}"));
        let mut children: Vec<_> = (0..runs)
            .map(|_| {
                Command::new(BIN)
                    .arg("ingest")
                    .args(args(&dest))
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut killed = vec![false; runs];
        if kill {
            // All but the last run may be killed, each at its own moment.
            for (i, c) in children.iter_mut().enumerate().take(runs - 1) {
                std::thread::sleep(whole.mul_f64(rng.below(600) as f64 / 1000.0));
                if c.try_wait().unwrap().is_none() {
                    let _ = c.kill();
                    killed[i] = true;
                }
            }
        }
        for (i, c) in children.into_iter().enumerate() {
            let o = c.wait_with_output().unwrap();
            if !killed[i] {
                // Every bundle committed, by this run or another; the bad ones failed.
                assert_eq!(
                    o.status.code(),
                    Some(3),
                    "round {round}, run {i}: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
            }
        }
        assert_same_dataset(&clean, &dest);
        // And nothing left over but the lock files' directory itself.
        assert!(
            staging_left(&dest).is_empty(),
            "round {round}: {:?}",
            staging_left(&dest)
        );
        eprintln!("round {round}: {runs} runs at once, killed {killed:?}");
    }
}

fn python_has(modules: &str, install: &str) -> bool {
    let ok = Command::new(common::python())
        .args(["-c", &format!("import {modules}")])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        common::missing_tool(&format!(
            "this test needs python3 with {modules} ({install})"
        ));
    }
    ok
}

fn python_test(
    dest: &str,
    good: usize,
    failed: usize,
    plain: Option<&Path>,
    env: &[(&str, String)],
) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../python/test_ingest.py");
    let mut c = Command::new(common::python());
    c.arg(script)
        .args([dest, &good.to_string(), &failed.to_string()]);
    c.args(plain);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    eprintln!("{}", String::from_utf8_lossy(&o.stdout));
    assert!(
        o.status.success(),
        "python test failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn duckdb_pyarrow_and_polars_read_the_dataset_and_its_catalog() {
    if !python_has(
        "duckdb, pyarrow, polars",
        "python3 -m venv .venv && .venv/bin/pip install -r python/requirements.txt",
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let good = fleet(tmp.path(), true);
    let dest = tmp.path().join("dataset");
    let o = ingest(&[
        s(&tmp.path().join("night")),
        "--dataset",
        s(&dest),
        "--partition-by",
        "date,host",
    ]);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // A plain decode of every good bundle, for the script to compare with.
    let mut list = String::new();
    for (src, row) in catalog(&dest) {
        if row["status"].as_deref() != Some("ok") {
            continue;
        }
        let id = row["bundle"].clone().unwrap();
        let plain = tmp.path().join("plain").join(&id);
        let d = Command::new(BIN)
            .args(["decode", &src, "--out", s(&plain), "-j", "1", "-q"])
            .output()
            .unwrap();
        assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));
        list.push_str(&format!("{id}\t{}\n", plain.display()));
    }
    let list_file = tmp.path().join("plain.tsv");
    std::fs::write(&list_file, list).unwrap();
    python_test(s(&dest), good.len(), BAD.len(), Some(&list_file), &[]);
}

/// S3 datasets, in a build with the `s3` feature (the test command's `--all-features`);
/// a build without it refuses them (`tests/options.rs`).
#[cfg(feature = "s3")]
mod s3 {
    use super::*;

    /// A `moto` S3 server on 127.0.0.1, stopped when dropped.
    struct Moto {
        child: std::process::Child,
        endpoint: String,
    }

    impl Drop for Moto {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    impl Moto {
        fn start() -> Moto {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let child = Command::new(common::python())
                .args([
                    "-m",
                    "moto.server",
                    "-H",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let m = Moto {
                child,
                endpoint: format!("http://127.0.0.1:{port}"),
            };
            let t = Instant::now();
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    t.elapsed().as_secs() < 30,
                    "moto did not start on port {port}"
                );
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            m
        }

        fn env(&self) -> Vec<(&'static str, String)> {
            vec![
                ("AWS_ENDPOINT_URL", self.endpoint.clone()),
                ("AWS_ACCESS_KEY_ID", "test".into()),
                ("AWS_SECRET_ACCESS_KEY", "test".into()),
                ("AWS_REGION", "us-east-1".into()),
            ]
        }
    }

    #[test]
    fn an_s3_dataset_on_a_local_moto_server_survives_sigkill_and_reads_back_in_pyarrow_and_polars()
    {
        if !python_has(
            "moto.server, boto3, pyarrow, polars",
            "python3 -m venv .venv && .venv/bin/pip install -r python/requirements.txt",
        ) {
            return;
        }
        let moto = Moto::start();
        let env = moto.env();
        let mk = Command::new(common::python())
            .args([
                "-c",
                "import boto3, os; boto3.client('s3', endpoint_url=os.environ['AWS_ENDPOINT_URL']).create_bucket(Bucket='night')",
            ])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .unwrap();
        assert!(
            mk.status.success(),
            "{}",
            String::from_utf8_lossy(&mk.stderr)
        );

        let tmp = tempfile::tempdir().unwrap();
        let good = fleet(tmp.path(), true);
        let night = tmp.path().join("night");
        let staging = tmp.path().join("staging");
        let run = || {
            let o = Command::new(BIN)
                .args([
                    "ingest",
                    s(&night),
                    "--dataset",
                    "s3://night/fleet/v1",
                    "--partition-by",
                    "date,host",
                ])
                .args(["--staging", s(&staging), "-j", "2"])
                .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
                .env_remove("SLURM_ARRAY_TASK_ID")
                .env_remove("JOB_COMPLETION_INDEX")
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr).into_owned();
            assert_eq!(o.status.code(), Some(3), "{err}");
            err
        };
        let t = Instant::now();
        let err = run();
        let whole = t.elapsed();
        assert!(
            err.contains(&format!("{} ok, 4 failed now", good.len())),
            "{err}"
        );
        // Committed bundles are read from the bucket's catalog on a re-run.
        let err = run();
        assert!(err.contains("0 ok, 0 failed now"), "{err}");
        assert_eq!(
            std::fs::read_dir(&staging).unwrap().count(),
            0,
            "staging left behind"
        );
        python_test("s3://night/fleet/v1", good.len(), BAD.len(), None, &env);

        // Killed at seeded moments while uploading, then run again: the bucket holds exactly
        // what a clean local ingest of the same night writes, object for object.
        let mut rng = Rng::new(0x53);
        let killed_url = "s3://night/killed";
        let mut kills = 0;
        for _ in 0..3 {
            let mut child = Command::new(BIN)
                .args([
                    "ingest",
                    s(&night),
                    "--dataset",
                    killed_url,
                    "--partition-by",
                    "date,host",
                ])
                .args(["--staging", s(&staging), "-j", "2", "-q"])
                .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
                .env_remove("SLURM_ARRAY_TASK_ID")
                .env_remove("JOB_COMPLETION_INDEX")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(whole.mul_f64(rng.below(1000) as f64 / 1000.0));
            if child.try_wait().unwrap().is_none() {
                kills += 1;
            }
            let _ = child.kill(); // SIGKILL
            child.wait().unwrap();
        }
        let o = Command::new(BIN)
            .args([
                "ingest",
                s(&night),
                "--dataset",
                killed_url,
                "--partition-by",
                "date,host",
            ])
            .args(["--staging", s(&staging), "-j", "2", "-q"])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env_remove("SLURM_ARRAY_TASK_ID")
            .env_remove("JOB_COMPLETION_INDEX")
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(3),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let local = tmp.path().join("local");
        let o = ingest(&[
            s(&night),
            "--dataset",
            s(&local),
            "--partition-by",
            "date,host",
        ]);
        assert_eq!(
            o.status.code(),
            Some(3),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let fetched = tmp.path().join("fetched");
        let get = Command::new(common::python())
            .args([
                "-c",
                "import boto3, os, sys\n\
                 s3 = boto3.client('s3', endpoint_url=os.environ['AWS_ENDPOINT_URL'])\n\
                 for page in s3.get_paginator('list_objects_v2').paginate(Bucket='night', Prefix='killed/'):\n\
                 \x20   for o in page.get('Contents', []):\n\
                 \x20       p = os.path.join(sys.argv[1], o['Key'][len('killed/'):])\n\
                 \x20       os.makedirs(os.path.dirname(p), exist_ok=True)\n\
                 \x20       s3.download_file('night', o['Key'], p)\n",
                s(&fetched),
            ])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .unwrap();
        assert!(
            get.status.success(),
            "{}",
            String::from_utf8_lossy(&get.stderr)
        );
        assert_same_dataset(&local, &fetched);
        eprintln!("S3: {kills} of 3 runs killed before they finished (clean run {whole:?})");
        assert_eq!(
            std::fs::read_dir(&staging).unwrap().count(),
            0,
            "staging left behind"
        );

        // Two runs at once, each with its own staging directory (as on two machines): they
        // meet at the claim objects, and the bucket holds what one clean run writes.
        let together: Vec<_> = ["a", "b"]
            .iter()
            .map(|m| {
                Command::new(BIN)
                    .args([
                        "ingest",
                        s(&night),
                        "--dataset",
                        "s3://night/together",
                        "--partition-by",
                        "date,host",
                    ])
                    .args([
                        "--staging",
                        s(&tmp.path().join(format!("staging-{m}"))),
                        "-j",
                        "2",
                        "-q",
                    ])
                    .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
                    .env_remove("SLURM_ARRAY_TASK_ID")
                    .env_remove("JOB_COMPLETION_INDEX")
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in together {
            let o = c.wait_with_output().unwrap();
            assert_eq!(
                o.status.code(),
                Some(3),
                "{}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let fetched = tmp.path().join("fetched-together");
        let get = Command::new("python3")
            .args([
                "-c",
                "import boto3, os, sys\n\
                 s3 = boto3.client('s3', endpoint_url=os.environ['AWS_ENDPOINT_URL'])\n\
                 for page in s3.get_paginator('list_objects_v2').paginate(Bucket='night', Prefix='together/'):\n\
                 \x20   for o in page.get('Contents', []):\n\
                 \x20       p = os.path.join(sys.argv[1], o['Key'][len('together/'):])\n\
                 \x20       os.makedirs(os.path.dirname(p), exist_ok=True)\n\
                 \x20       s3.download_file('night', o['Key'], p)\n",
                s(&fetched),
            ])
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .unwrap();
        assert!(
            get.status.success(),
            "{}",
            String::from_utf8_lossy(&get.stderr)
        );
        // No claim object is left behind either (dataset() would fail to read one).
        assert_same_dataset(&local, &fetched);
    }
}
