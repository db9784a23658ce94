//! Inputs a hostile fleet sends: FIFOs and devices where files belong, symbolic-link loops,
//! a `bundle.toml` that never ends, files named outside the bundle, labels that cannot be
//! partitions or columns, idle stretches that made memory follow the trace, and a disk
//! that fills over an older decode. Each must end with a clear message (naming the path),
//! in bounded memory, and never hang.

#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

mod common;

const BIN: &str = env!("CARGO_BIN_EXE_tracemill");

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

fn copy_bundle(name: &str, to: &Path) -> PathBuf {
    let from = common::samples_dir().join(name);
    std::fs::create_dir_all(to.join("images")).unwrap();
    for f in ["bundle.toml", "trace.rtit"] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
    for e in std::fs::read_dir(from.join("images")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join("images").join(e.file_name())).unwrap();
    }
    to.to_path_buf()
}

fn mkfifo(p: &Path) {
    let st = Command::new("mkfifo").arg(p).status().expect("mkfifo");
    assert!(st.success());
}

/// Run tracemill; a run that has not ended after `limit` is killed and the test fails
/// (the inputs here used to hang it for ever).
fn run_within(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "tracemill {args:?} still running after {limit:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

const LIMIT: Duration = Duration::from_secs(120);

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_fifo_or_a_device_where_a_file_belongs_is_refused_by_name_without_hanging() {
    let tmp = tempfile::tempdir().unwrap();

    // The trace.
    let b = copy_bundle("recursion", &tmp.path().join("fifo-trace"));
    std::fs::remove_file(b.join("trace.rtit")).unwrap();
    mkfifo(&b.join("trace.rtit"));
    let o = run_within(&["decode", s(&b)], LIMIT);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("trace.rtit: is a FIFO (named pipe), not a regular file"),
        "{}",
        text(&o)
    );

    // bundle.toml: a FIFO, and a link to /dev/zero (read to 2.1 GB before, then out of
    // memory).
    let b = copy_bundle("recursion", &tmp.path().join("fifo-toml"));
    std::fs::remove_file(b.join("bundle.toml")).unwrap();
    mkfifo(&b.join("bundle.toml"));
    let o = run_within(&["decode", s(&b)], LIMIT);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("bundle.toml: is a FIFO"), "{}", text(&o));
    let z = copy_bundle("recursion", &tmp.path().join("zero-toml"));
    std::fs::remove_file(z.join("bundle.toml")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", z.join("bundle.toml")).unwrap();
    let o = run_within(&["decode", s(&z)], LIMIT);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("bundle.toml: is a character device, not a regular file"),
        "{}",
        text(&o)
    );
    // A regular bundle.toml too large to be a manifest.
    let big = copy_bundle("recursion", &tmp.path().join("big-toml"));
    let mut t = std::fs::read_to_string(big.join("bundle.toml")).unwrap();
    t.push_str(&format!("# {}\n", "x".repeat(2 << 20)));
    std::fs::write(big.join("bundle.toml"), t).unwrap();
    let o = run_within(&["decode", s(&big)], LIMIT);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("larger than 1024 KiB"), "{}", text(&o));

    // An image: a warning naming it; the trace is still decoded (nothing can be followed).
    let i = copy_bundle("recursion", &tmp.path().join("fifo-image"));
    let image = std::fs::read_dir(i.join("images"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::remove_file(&image).unwrap();
    mkfifo(&image);
    let o = run_within(&["decode", s(&i)], LIMIT);
    assert!(
        text(&o).contains(&format!(
            "{}: is a FIFO (named pipe), not a regular file",
            image.display()
        )),
        "{}",
        text(&o)
    );

    // The whole night goes on: the FIFO bundles fail with their reason, the good one is
    // committed (the FIFOs used to hang the whole ingest in `hash_file`).
    let good = copy_bundle("callbacks", &tmp.path().join("good"));
    let dest = tmp.path().join("dest");
    let o = run_within(
        &["ingest", s(tmp.path()), "--dataset", s(&dest), "-q"],
        LIMIT,
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let e = text(&o);
    for (bundle, why) in [
        ("fifo-trace", "is a FIFO"),
        ("fifo-toml", "is a FIFO"),
        // A link to /dev/zero leads out of the bundle: ingest does not open it at all
        // (`decode` above, the user's choice, finds it a device).
        (
            "zero-toml",
            "a link to a file outside the bundle directory: not read",
        ),
        ("big-toml", "larger than 1024 KiB"),
    ] {
        assert!(
            e.lines()
                .any(|l| l.contains("failed") && l.contains(bundle) && l.contains(why)),
            "{bundle}: {e}"
        );
    }
    assert!(!e.contains(&format!("failed  {}", good.display())), "{e}");
}

#[test]
fn discovery_follows_each_directory_once_through_symbolic_link_loops() {
    let tmp = tempfile::tempdir().unwrap();
    let night = tmp.path().join("night");
    copy_bundle("recursion", &night.join("a/bundle-1"));
    // Links to ancestors: before, each level doubled the search (killed after 60 s).
    for (at, to) in [
        ("a/up1", ".."),
        ("a/up2", ".."),
        ("a/bundle-1-again", "bundle-1"),
    ] {
        std::os::unix::fs::symlink(to, night.join(at)).unwrap();
    }
    std::os::unix::fs::symlink("../..", night.join("a/root")).unwrap();
    let dest = tmp.path().join("dest");
    let o = run_within(&["ingest", s(&night), "--dataset", s(&dest), "-q"], LIMIT);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains(": 1 bundle found"), "{}", text(&o));
}

#[test]
fn files_named_outside_the_bundle_are_refused_by_ingest_and_a_warning_in_decode() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    let sample = common::samples_dir().join("recursion");
    std::fs::copy(sample.join("trace.rtit"), outside.join("trace.rtit")).unwrap();

    let night = tmp.path().join("night");
    // The trace by an absolute path; an image through `..`.
    let b = copy_bundle("recursion", &night.join("abs-trace"));
    std::fs::remove_file(b.join("trace.rtit")).unwrap();
    let mut t = std::fs::read_to_string(b.join("bundle.toml")).unwrap();
    t = format!(
        "trace = {:?}\n{t}",
        outside.join("trace.rtit").display().to_string()
    );
    std::fs::write(b.join("bundle.toml"), t).unwrap();

    let dest = tmp.path().join("dest");
    let o = run_within(&["ingest", s(&night), "--dataset", s(&dest), "-q"], LIMIT);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        text(&o).contains("outside the bundle directory (refused; --allow-outside-paths reads it)"),
        "{}",
        text(&o)
    );
    let dest2 = tmp.path().join("dest2");
    let o = run_within(
        &[
            "ingest",
            s(&night),
            "--dataset",
            s(&dest2),
            "-q",
            "--allow-outside-paths",
        ],
        LIMIT,
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // `decode` reads it (the user chose the bundle) and says so.
    let o = run_within(&["decode", s(&b)], LIMIT);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "names the trace {}, outside the bundle directory",
            outside.join("trace.rtit").display()
        )),
        "{}",
        text(&o)
    );

    // An image through `..`: not loaded by ingest.
    let night2 = tmp.path().join("night2");
    let b = copy_bundle("recursion", &night2.join("dotdot-image"));
    let image = std::fs::read_dir(b.join("images"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let name = image.file_name().into_string().unwrap();
    std::fs::rename(image.path(), outside.join(&name)).unwrap();
    let t = std::fs::read_to_string(b.join("bundle.toml"))
        .unwrap()
        .replace(
            &format!("images/{name}"),
            &format!("../../elsewhere/{name}"),
        );
    std::fs::write(b.join("bundle.toml"), t).unwrap();
    let o = run_within(
        &[
            "ingest",
            s(&night2),
            "--dataset",
            s(&tmp.path().join("d3")),
            "-q",
        ],
        LIMIT,
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        text(&o).contains("outside the bundle directory: not loaded"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_bundle_toml_linked_out_of_its_bundle_is_not_read_by_ingest_nor_quoted() {
    let tmp = tempfile::tempdir().unwrap();
    // What /etc/shadow would be: a file outside the tree, whose first line must not reach
    // the catalog or stderr.
    let secret = tmp.path().join("shadow");
    std::fs::write(&secret, "root:$6$SECRET-HASH:19000:0:99999:7:::\n").unwrap();
    let night = tmp.path().join("night");
    let linked = copy_bundle("recursion", &night.join("linked"));
    std::fs::remove_file(linked.join("bundle.toml")).unwrap();
    std::os::unix::fs::symlink(&secret, linked.join("bundle.toml")).unwrap();
    // A bundle.toml of its own that does not parse, with a value that must not be quoted.
    let bad = copy_bundle("recursion", &night.join("bad"));
    let t = std::fs::read_to_string(bad.join("bundle.toml")).unwrap();
    std::fs::write(
        bad.join("bundle.toml"),
        format!("{t}\nowner = SECRET-VALUE\n"),
    )
    .unwrap();
    let dest = tmp.path().join("dest");
    let o = run_within(&["ingest", s(&night), "--dataset", s(&dest), "-q"], LIMIT);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(!text(&o).contains("SECRET"), "{}", text(&o));
    assert!(
        text(&o).contains("a link to a file outside the bundle directory: not read"),
        "{}",
        text(&o)
    );
    // Nothing of either file in the published catalog.
    let errors = common::catalog_errors(&dest);
    assert_eq!(errors.len(), 2, "{errors:?}");
    for e in &errors {
        assert!(!e.contains("SECRET"), "the catalog quotes a file: {e}");
    }
    assert!(
        errors
            .iter()
            .any(|e| e.contains("bundle.toml:") && e.contains("owner")),
        "the bad bundle's error names file, line and key: {errors:?}"
    );
    // `decode`, the user's own choice, shows the line of its own bundle.toml.
    let o = run_within(&["decode", s(&bad)], LIMIT);
    assert!(!o.status.success());
    assert!(text(&o).contains("SECRET-VALUE"), "{}", text(&o));
}

#[test]
fn labels_that_cannot_be_partitions_or_columns_fail_their_bundle_once() {
    let tmp = tempfile::tempdir().unwrap();
    let night = tmp.path().join("night");
    let label = |name: &str, extra: &str| {
        let b = copy_bundle("recursion", &night.join(name));
        let t = std::fs::read_to_string(b.join("bundle.toml")).unwrap();
        // Labels go at the end: the sample's [labels] table is the last but [generator].
        let t = t.replace("[labels]\n", &format!("[labels]\n{extra}\n"));
        std::fs::write(b.join("bundle.toml"), t).unwrap();
    };
    label("long", &format!("host = {:?}", "h".repeat(300)));
    label("hive-null", "host = \"__HIVE_DEFAULT_PARTITION__\"");
    label("two-cases", "host = \"a\"\nHOST = \"b\"");
    label("fine", "host = \"node-7\"");
    let dest = tmp.path().join("dest");
    let args = [
        "ingest",
        s(&night),
        "--dataset",
        s(&dest),
        "--partition-by",
        "host",
        "-q",
    ];
    let o = run_within(&args, LIMIT);
    // Some failed, the rest committed: 3, not 1 ("nothing could be done").
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let e = text(&o);
    assert!(e.contains("3 failed now"), "{e}");
    assert!(e.contains("300 bytes long"), "{e}");
    assert!(e.contains("read back as NULL"), "{e}");
    assert!(e.contains("differ only in case"), "{e}");
    let staging: Vec<_> = std::fs::read_dir(dest.join("_staging"))
        .map(|r| r.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(staging.is_empty(), "{staging:?}");
    // Committed as failed: the next run skips them instead of decoding them again.
    let o = run_within(&args, LIMIT);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        text(&o).contains("0 ok, 0 failed now; 4 already committed"),
        "{}",
        text(&o)
    );
}

/// A trace of the callbacks sample, then `idle` bytes of PSB + 400 MTCs over and over
/// (tracing on, nothing branching), then the sample again.
fn idle_bundle(dir: &Path, idle: usize) -> PathBuf {
    let b = copy_bundle("callbacks", dir);
    let base = std::fs::read(b.join("trace.rtit")).unwrap();
    let mut unit = vec![0xC0u8, 0, 0, 0, 0, 0, 0, 0, 0];
    for i in 0..400u32 {
        unit.extend_from_slice(&[0xC4, i as u8]);
    }
    let mut t = base.clone();
    while t.len() < base.len() + idle {
        t.extend_from_slice(&unit);
    }
    t.extend_from_slice(&base);
    std::fs::write(b.join("trace.rtit"), t).unwrap();
    b
}

/// Memory no longer follows an idle stretch: 8 MB of timing packets with no branch took
/// 4.15 GB (a look-ahead for a FUP's TIP kept every packet of the stretch, and every
/// chunk's stitch read it again; the timeline carried its PSBs from piece to piece). Here
/// the data segment of the process (heap and every private mapping, RLIMIT_DATA) is held
/// to 768 MiB, which the old decoder exceeded at 2 MB of stretch.
#[test]
fn an_idle_stretch_decodes_in_bounded_memory_and_its_rows_match_the_sample() {
    let tmp = tempfile::tempdir().unwrap();
    let b = idle_bundle(&tmp.path().join("idle"), 8 << 20);
    let out = tmp.path().join("out");
    let limited = |args: &[&str]| -> Output {
        Command::new("prlimit")
            .args(["--data=805306368", "--", BIN])
            .args(args)
            .output()
            .expect("prlimit (util-linux)")
    };
    let o = limited(&["decode", s(&b), "-j2", "--out", s(&out)]);
    assert!(o.status.success(), "{}", text(&o));
    // The rows are the sample's twice over.
    let sample = tmp.path().join("sample-out");
    common::ok(&[
        "decode",
        s(&common::samples_dir().join("callbacks")),
        "--out",
        s(&sample),
        "-q",
    ]);
    let once = common::read_branches(&sample.join("branches.parquet"));
    let twice = common::read_branches(&out.join("branches.parquet"));
    assert_eq!(twice.len(), 2 * once.len());
    assert_eq!(&twice.ip[..once.len()], &once.ip[..]);
    assert_eq!(&twice.ip[once.len()..], &once.ip[..]);
    // One thread and chunks of 1 MiB (each stitch walks a chunk of the stretch alone)
    // give the same files, byte for byte.
    let seq = tmp.path().join("seq");
    let o = limited(&[
        "decode",
        s(&b),
        "-j1",
        "--chunk-size",
        "1048576",
        "--out",
        s(&seq),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    for t in ["branches", "events", "timing", "coverage", "edges"] {
        let f = format!("{t}.parquet");
        assert_eq!(
            std::fs::read(out.join(&f)).unwrap(),
            std::fs::read(seq.join(&f)).unwrap(),
            "{f}: -j2 and one chunk differ"
        );
    }
}

/// A synthetic RTIT bundle (a walk over busybox's code through the hardware model,
/// cycle-accurate with MTC and STS) of `size` bytes; `psbs` false: one PSB at its start and
/// none after.
fn synthetic(dir: &Path, size: u64, seed: u64, psbs: bool) -> PathBuf {
    let elf = common::samples_dir().join("busybox-sort/images/busybox");
    tracemill_datasets::samples::synth_big_with(&elf, size, seed, 0xef0b, psbs, dir).unwrap();
    dir.to_path_buf()
}

/// `tracemill ARGS` with its data segment (heap and every private mapping) held to
/// `limit` bytes.
fn within_data(limit: u64, args: &[&str]) -> Output {
    Command::new("prlimit")
        .arg(format!("--data={limit}"))
        .arg("--")
        .arg(BIN)
        .args(args)
        .output()
        .expect("prlimit (util-linux)")
}

/// A stretch without PSBs is one chunk however long, and a chunk body holds all its rows:
/// a trace of one PSB and then megabytes of branches took about 100 times its size (5 MB:
/// 539 MB, 18 MB: 1.9 GB; 40 MB aborted on a failed allocation). Its body is now given up
/// past a bound and the chunk walked in order in pieces of bounded size. Here 12 MB without
/// a PSB at the start (the first chunk), 1 MB with PSBs, then 12 MB without again (a chunk
/// in the middle), decoded under a 1 GiB data limit (the old decoder needed 2.5 GB; this one 320-480 MiB
/// of RSS, by chunk size);
/// `-j1` and `-j2`, default and small chunks write the same bytes; and the rows of a
/// stretch without PSBs are those of the same walk with PSBs.
#[test]
fn a_stretch_without_psbs_decodes_in_bounded_memory_and_the_same_for_any_chunking() {
    let tmp = tempfile::tempdir().unwrap();
    let long = synthetic(&tmp.path().join("long"), 12 << 20, 1, false);
    let short = synthetic(&tmp.path().join("short"), 1 << 20, 2, true);
    let b = tmp.path().join("mixed");
    copy_dir(&long, &b);
    let (l, sh) = (
        std::fs::read(long.join("trace.rtit")).unwrap(),
        std::fs::read(short.join("trace.rtit")).unwrap(),
    );
    assert_eq!(
        l.windows(9)
            .filter(|w| *w == [0xC0, 0, 0, 0, 0, 0, 0, 0, 0])
            .count(),
        1,
        "the long trace has one PSB"
    );
    std::fs::write(b.join("trace.rtit"), [&l[..], &sh[..], &l[..]].concat()).unwrap();

    let limit = 1 << 30;
    let mut outs = Vec::new();
    for (name, args) in [
        ("j2", vec!["-j2"]),
        ("j1", vec!["-j1"]),
        ("j2-small", vec!["-j2", "--chunk-size", "32768"]),
        ("j1-big", vec!["-j1", "--chunk-size", "1048576"]),
    ] {
        let out = tmp.path().join(name);
        let mut a = vec!["decode", s(&b), "--out", s(&out)];
        a.extend(args);
        let o = within_data(limit, &a);
        assert!(o.status.success(), "{name}: {}", text(&o));
        outs.push((name, out));
    }
    let (first, rest) = outs.split_first().unwrap();
    for (name, out) in rest {
        for t in ["branches", "events", "timing", "coverage", "edges"] {
            let f = format!("{t}.parquet");
            assert!(
                std::fs::read(first.1.join(&f)).unwrap() == std::fs::read(out.join(&f)).unwrap(),
                "{f}: {} and {name} differ",
                first.0
            );
        }
    }
    let rows = common::read_branches(&first.1.join("branches.parquet"));
    assert!(rows.len() > 20_000_000, "{} rows", rows.len());

    // The same walk with PSBs: the stretch's rows are its rows (up to where the shorter
    // trace ends, less a margin for the last, undecided, ones).
    let with = synthetic(&tmp.path().join("with"), 4 << 20, 1, true);
    let without = synthetic(&tmp.path().join("without"), 4 << 20, 1, false);
    let mut got = Vec::new();
    for b in [&with, &without] {
        let out = b.join("out");
        common::ok(&["decode", s(b), "--out", s(&out), "-q"]);
        got.push(common::read_branches(&out.join("branches.parquet")));
    }
    let n = got[0].len().min(got[1].len()) - 1000;
    assert!(n > 2_000_000, "{n} rows");
    for (what, a, b) in [
        ("ip", &got[0].ip[..n], &got[1].ip[..n]),
        (
            "target",
            &got[0].target.values[..n],
            &got[1].target.values[..n],
        ),
    ] {
        assert!(a == b, "{what}: the rows with and without PSBs differ");
    }
    assert_eq!(&got[0].kind[..n], &got[1].kind[..n]);
    assert_eq!(&got[0].insns[..n], &got[1].insns[..n]);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}
