//! Options mean what a user expects, are checked before any work starts, and messages say
//! what to do: issue 26 ("the first hour") and the option items of issue 23.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;

fn tracemill_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tracemill"))
        .current_dir(dir)
        .args(args)
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .expect("tracemill runs")
}

fn tracemill(args: &[&str]) -> Output {
    tracemill_in(&repo(), args)
}

fn repo() -> PathBuf {
    std::path::absolute(Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 paths in tests")
}

fn recursion() -> String {
    s(&common::samples_dir().join("recursion")).to_string()
}

/// A usage error: exit 2, the message naming `what`, and nothing created at `out`.
fn refused(o: &Output, what: &str, out: &Path) {
    assert_eq!(o.status.code(), Some(2), "{}", stderr(o));
    assert!(stderr(o).contains(what), "{}", stderr(o));
    assert!(!out.exists(), "{} was created", out.display());
}

#[test]
fn image_paths_are_relative_to_the_current_directory() {
    // The command, from the repository root: the image is found where the user
    // said, not under the trace's directory.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = tracemill(&[
        "decode",
        "datasets/samples/recursion/trace.rtit",
        "--ctl",
        "0x6f0b",
        "--image",
        "datasets/samples/recursion/images/recursion",
        "--out",
        s(&out),
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
    assert!(stderr(&o).contains("coverage "), "{}", stderr(&o));
    assert!(out.join("branches.parquet").exists());
}

#[test]
fn jobs_zero_is_all_cores_and_too_many_is_refused_before_work() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let o = tracemill(&["decode", &recursion(), "-j", "0", "-q"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(" on {cores} threads")),
        "{}",
        stderr(&o)
    );
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let t = Instant::now();
    let o = tracemill(&["decode", &recursion(), "-j", "100000", "--out", s(&out)]);
    refused(&o, "256", &out);
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    let ds = tmp.path().join("ds");
    let o = tracemill(&["ingest", &recursion(), "--dataset", s(&ds), "-j", "100000"]);
    refused(&o, "256", &ds);
}

#[test]
fn chunk_size_is_bounded_and_zstd_level_checked_before_decoding() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = tracemill(&[
        "decode",
        &recursion(),
        "--chunk-size",
        "1000000000",
        "--out",
        s(&out),
    ]);
    refused(&o, "largest chunk size", &out);
    // The largest accepted one decodes (the bound is not below what is useful).
    let o = tracemill(&["decode", &recursion(), "--chunk-size", "4M", "-q"]);
    assert!(o.status.success(), "{}", stderr(&o));

    let o = tracemill(&[
        "decode",
        &recursion(),
        "--zstd-level",
        "99",
        "--out",
        s(&out),
    ]);
    refused(&o, "1 (fastest) to 22", &out);
    let o = tracemill(&[
        "decode",
        &recursion(),
        "--zstd-level",
        "-5",
        "-q",
        "--out",
        s(&out),
    ]);
    assert!(
        o.status.success(),
        "negative levels are zstd's: {}",
        stderr(&o)
    );
    let ds = tmp.path().join("ds");
    let o = tracemill(&[
        "ingest",
        &recursion(),
        "--dataset",
        s(&ds),
        "--zstd-level",
        "99",
    ]);
    refused(&o, "1 (fastest) to 22", &ds);
}

#[test]
fn an_empty_table_list_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = tracemill(&["decode", &recursion(), "--tables", "", "--out", s(&out)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("names no table"), "{}", stderr(&o));
    assert!(!out.exists());
    let o = tracemill(&["decode", &recursion(), "--tables", " , ", "-q"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

#[test]
fn a_file_as_out_or_dataset_is_named_as_such() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let o = tracemill(&["decode", &recursion(), "--out", s(&file)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("is a file, not a directory"),
        "{}",
        stderr(&o)
    );
    let o = tracemill(&["ingest", &recursion(), "--dataset", s(&file)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("is a file, not a directory"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
}

/// `--symfs` and `--buildid-dir` name directories to look for binaries in: one that does
/// not exist (or is a file) is refused with its path, by every command that takes them,
/// before anything is read or created.
#[test]
fn a_missing_symfs_or_buildid_dir_is_refused_with_its_path() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let missing = tmp.path().join("no-such-dir");
    let file = tmp.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    for flag in ["--symfs", "--buildid-dir"] {
        for (dir, why) in [(&missing, "no such directory"), (&file, "not a directory")] {
            let what = format!("{}: {why}", dir.display());
            let o = tracemill(&["decode", &recursion(), "--out", s(&out), flag, s(dir)]);
            refused(&o, &what, &out);
            assert!(stderr(&o).contains(flag), "{}", stderr(&o));
            let o = tracemill(&["ingest", &recursion(), "--dataset", s(&out), flag, s(dir)]);
            refused(&o, &what, &out);
        }
    }
}

/// The flame graph offers the weights it can draw, and no other: `--help` lists
/// instructions and cycles, and `--weight branches` is a usage error naming those two.
#[test]
fn flamegraph_offers_only_the_weights_it_draws() {
    let o = tracemill(&["report", "flamegraph", "--help"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let help = stdout(&o);
    let weight = &help[help.find("--weight").expect("--weight in the help")..];
    let weight = &weight[..weight.find("\n  -").unwrap_or(weight.len())];
    assert!(
        weight.contains("instructions") && weight.contains("cycles"),
        "{weight}"
    );
    assert!(!weight.contains("branches"), "{weight}");
    let tmp = tempfile::tempdir().unwrap();
    let svg = tmp.path().join("f.svg");
    let o = tracemill(&[
        "report",
        "flamegraph",
        s(tmp.path()),
        "--weight",
        "branches",
        "--out",
        s(&svg),
    ]);
    refused(&o, "[possible values: instructions, cycles]", &svg);
    // hotspots still rank by branches.
    let o = tracemill(&["report", "hotspots", "--help"]);
    assert!(stdout(&o).contains("branches"), "{}", stdout(&o));
}

/// Decode the recursion sample into `dir/out`.
fn decoded(dir: &Path) -> PathBuf {
    let out = dir.join("out");
    let o = tracemill(&["decode", &recursion(), "--out", s(&out), "-q", "-j", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    out
}

#[test]
fn top_zero_is_every_row_in_hotspots_and_html() {
    let tmp = tempfile::tempdir().unwrap();
    let out = decoded(tmp.path());
    let o = tracemill(&[
        "report",
        "hotspots",
        s(&out),
        "--format",
        "csv",
        "--top",
        "0",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let functions = stdout(&o).lines().count() - 1;
    assert!(
        functions > 50,
        "{functions} functions: --top 0 would not differ from 50"
    );
    let html = tmp.path().join("r.html");
    let o = tracemill(&["report", "html", s(&out), "--out", s(&html), "--top", "0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(&html).unwrap();
    let hot = page
        .split("<section id=\"hotspots\">")
        .nth(1)
        .unwrap()
        .split("</section>")
        .next()
        .unwrap();
    assert_eq!(hot.matches("<tr><td").count(), functions);
    let o = tracemill(&["report", "html", s(&out), "--out", s(&html), "--top", "3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = std::fs::read_to_string(&html).unwrap();
    let hot = page.split("<section id=\"hotspots\">").nth(1).unwrap();
    assert_eq!(
        hot.split("</section>")
            .next()
            .unwrap()
            .matches("<tr><td")
            .count(),
        3
    );
}

#[test]
fn html_fails_when_no_table_can_be_read() {
    let tmp = tempfile::tempdir().unwrap();
    let out = decoded(tmp.path());
    // Every table replaced by bytes that are not Parquet.
    for e in std::fs::read_dir(&out).unwrap() {
        std::fs::write(e.unwrap().path(), b"not parquet").unwrap();
    }
    let html = tmp.path().join("r.html");
    let o = tracemill(&["report", "html", s(&out), "--out", s(&html)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("tracemill: error: "), "{}", stderr(&o));
    assert!(!html.exists());
    let o = tracemill(&["report", "flamegraph", s(&out), "--out", s(&html)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

#[test]
fn partition_keys_no_bundle_has_are_refused_unless_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = tmp.path().join("ds");
    // The samples are labelled program and sample.
    let o = tracemill(&[
        "ingest",
        &recursion(),
        "--dataset",
        s(&ds),
        "--partition-by",
        "program,datee",
        "-q",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("\"datee\"") || e.contains("datee:"),
        "names the key: {e}"
    );
    assert!(e.contains("program, sample"), "names the labels: {e}");
    assert!(e.contains("--allow-missing-keys"), "{e}");
    assert!(
        !ds.join("_tracemill.json").exists(),
        "the dataset was locked to the misspelt key"
    );
    let o = tracemill(&[
        "ingest",
        &recursion(),
        "--dataset",
        s(&ds),
        "--partition-by",
        "program,datee",
        "--allow-missing-keys",
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(ds
        .join("branches/program=recursion/datee=__HIVE_DEFAULT_PARTITION__")
        .is_dir());
}

#[test]
fn a_wrong_ctl_gets_a_hint_and_the_right_one_none() {
    // The recursion sample was recorded with 0x6f0b (return compression, cycle-accurate):
    // read as 0x2e0d, most of it fails to decode.
    let o = tracemill(&["decode", &recursion(), "--ctl", "0x2e0d", "-q"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("tracemill: hint: "), "{e}");
    assert!(
        e.contains("RTIT_CTL 0x2e0d") && e.contains("from --ctl"),
        "{e}"
    );
    let o = tracemill(&["decode", &recursion(), "-q"]);
    assert!(!stderr(&o).contains("hint"), "{}", stderr(&o));
}

#[test]
fn reports_group_digits_and_function_sizes_are_their_symbols() {
    let tmp = tempfile::tempdir().unwrap();
    let out = decoded(tmp.path());
    let o = tracemill(&["report", "hotspots", s(&out), "--top", "3"]);
    let first = stdout(&o).lines().next().unwrap_or("").to_string();
    // "# 1,447,668 instructions, 322,876 branches, ..."
    let n = first.trim_start_matches("# ").split(' ').next().unwrap();
    assert!(
        n.contains(',') && n.split(',').skip(1).all(|g| g.len() == 3),
        "{first}"
    );

    // Every function's size fits in the image's code: the last symbol, `_fini`, has no
    // size and used to run to the end of the address space (18446744073704741943).
    let o = tracemill(&["report", "coverage", s(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let mut lines = text.lines();
    lines.next();
    let image = lines.next().unwrap();
    let code_bytes: u64 = image
        .split('/')
        .nth(2)
        .unwrap()
        .trim()
        .replace(',', "")
        .parse()
        .unwrap();
    let mut seen_fini = false;
    for l in text
        .lines()
        .skip_while(|l| !l.ends_with("  function"))
        .skip(1)
    {
        let f: Vec<&str> = l.split_whitespace().collect();
        let size: u64 = f[2].replace(',', "").parse().unwrap();
        assert!(size <= code_bytes, "{l}");
        if f.last() == Some(&"_fini") {
            seen_fini = true;
            assert!(size < 64, "_fini: {l}");
        }
    }
    assert!(seen_fini, "_fini ran (at exit) and is listed:\n{text}");
}

#[test]
fn a_single_bundles_timeline_names_its_process() {
    let tmp = tempfile::tempdir().unwrap();
    let out = decoded(tmp.path());
    let json = tmp.path().join("t.json");
    let o = tracemill(&["report", "timeline", s(&out), "--out", s(&json)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let names: Vec<&serde_json::Value> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
        .collect();
    assert_eq!(names.len(), 1);
    let name = names[0]["args"]["name"].as_str().unwrap();
    assert!(name.starts_with("recursion"), "{name}");
    assert!(name.contains("program=recursion"), "{name}");
}

/// A local HTTP server answering 403 to everything, as the EC2 metadata service answers
/// where there is no instance role; it serves until the test ends.
#[cfg(feature = "s3")]
fn forbidding_server() -> u16 {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming().take(200) {
            let Ok(mut c) = c else { continue };
            let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ = c.write_all(
                b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    port
}

/// A build without the `s3` feature (the default install) refuses an S3 dataset before
/// any work, with the command that builds one with S3.
#[cfg(not(feature = "s3"))]
#[test]
fn s3_in_a_build_without_s3_says_how_to_build_one_with_it() {
    let o = tracemill(&[
        "ingest",
        &recursion(),
        "--dataset",
        "s3://night/fleet",
        "-q",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("s3://night/fleet: this tracemill was built without S3 support")
            && e.contains("cargo install --path pipeline --locked --features s3"),
        "{e}"
    );
}

#[cfg(feature = "s3")]
#[test]
fn s3_without_credentials_names_the_aws_variables() {
    let port = forbidding_server();
    let url = format!("http://127.0.0.1:{port}");
    let mut c = Command::new(env!("CARGO_BIN_EXE_tracemill"));
    c.args([
        "ingest",
        &recursion(),
        "--dataset",
        "s3://night/fleet",
        "-q",
    ]);
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") {
            c.env_remove(k);
        }
    }
    // The metadata service is asked at the local server (never the real address).
    c.env("AWS_ENDPOINT_URL", &url)
        .env("AWS_METADATA_ENDPOINT", &url)
        .env("AWS_REGION", "us-east-1")
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX");
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("tracemill: hint: no S3 credentials"), "{e}");
    assert!(
        e.contains("AWS_ACCESS_KEY_ID") && e.contains("AWS_SECRET_ACCESS_KEY"),
        "{e}"
    );
}

#[test]
fn the_readme_fleet_ingests_and_filters_by_its_labels() {
    let tmp = tempfile::tempdir().unwrap();
    let fleet = tmp.path().join("fleet");
    let ds = tmp.path().join("ds");
    let o = tracemill(&["synth", "fleet", "--out", s(&fleet)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = tracemill(&[
        "ingest",
        s(&fleet),
        "--dataset",
        s(&ds),
        "--partition-by",
        "date,host",
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("12 ok, 0 failed"), "{}", stderr(&o));
    assert!(ds.join("branches/date=2026-11-24/host=h3").is_dir());
    // Two hosts' recursion bundles: twice one bundle's instructions, function by function.
    let csv = |args: &[&str]| {
        let mut a = vec!["report", "hotspots"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["--format", "csv", "--top", "0"]);
        let o = tracemill(&a);
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o)
    };
    let one = csv(&[
        s(&ds),
        "--where",
        "host = 'h1' AND date = '2026-11-23' AND program = 'recursion'",
    ]);
    let four = csv(&[
        s(&ds),
        "--where",
        "host IN ('h1', 'h2') AND program = 'recursion'",
    ]);
    let insns = |t: &str| -> u64 {
        let mut l = t.lines();
        let h: Vec<&str> = l.next().unwrap().split(',').collect();
        let i = h.iter().position(|c| *c == "instructions").unwrap();
        l.map(|r| r.split(',').nth(i).unwrap().parse::<u64>().unwrap())
            .sum()
    };
    assert!(insns(&one) > 1_000_000);
    assert_eq!(insns(&four), 4 * insns(&one));
}

/// The page codec of every column chunk of a Parquet file.
fn codecs(path: &Path) -> std::collections::BTreeSet<String> {
    let r = parquet::file::reader::SerializedFileReader::new(std::fs::File::open(path).unwrap())
        .unwrap();
    use parquet::file::reader::FileReader;
    r.metadata()
        .row_groups()
        .iter()
        .flat_map(|rg| rg.columns().iter())
        .map(|c| match c.compression() {
            parquet::basic::Compression::ZSTD(_) => "ZSTD".to_string(),
            other => other.to_string(),
        })
        .collect()
}

#[test]
fn compression_chooses_the_codec_of_every_table_in_decode_and_ingest() {
    let tmp = tempfile::tempdir().unwrap();
    for (value, codec) in [
        ("zstd", "ZSTD"),
        ("lz4", "LZ4_RAW"),
        ("snappy", "SNAPPY"),
        ("none", "UNCOMPRESSED"),
    ] {
        let out = tmp.path().join(value);
        let o = tracemill(&[
            "decode",
            &recursion(),
            "-q",
            "--compression",
            value,
            "--out",
            s(&out),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        for table in ["branches", "events", "timing", "coverage", "edges"] {
            let f = out.join(format!("{table}.parquet"));
            assert_eq!(codecs(&f), [codec.to_string()].into(), "{value}: {table}");
        }
    }
    // The default is ZSTD.
    let out = tmp.path().join("default");
    let o = tracemill(&["decode", &recursion(), "-q", "--out", s(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        codecs(&out.join("branches.parquet")),
        ["ZSTD".to_string()].into()
    );
    // A value that is none of them is a usage error naming them, before any work.
    let bad = tmp.path().join("bad");
    let o = tracemill(&[
        "decode",
        &recursion(),
        "--compression",
        "gzip",
        "--out",
        s(&bad),
    ]);
    refused(&o, "zstd, lz4, snappy, none", &bad);
    // ingest writes its tables with the codec asked for.
    let ds = tmp.path().join("ds");
    let o = tracemill(&[
        "ingest",
        &recursion(),
        "--dataset",
        s(&ds),
        "-q",
        "--compression",
        "lz4",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut files = Vec::new();
    let mut dirs = vec![ds.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.to_string_lossy().contains("branches")
                && p.extension().is_some_and(|x| x == "parquet")
            {
                files.push(p);
            }
        }
    }
    assert!(!files.is_empty(), "no branches file under {}", ds.display());
    for f in files {
        assert_eq!(
            codecs(&f),
            ["LZ4_RAW".to_string()].into(),
            "{}",
            f.display()
        );
    }
}

/// `tracemill::allocator` sets mimalloc's option by its index (libmimalloc-sys does not
/// name it): mimalloc itself, asked to be verbose, lists its options in index order, and
/// `purge_delay` and `allow_thp` must be the ones at those indexes.
#[test]
fn the_allocator_options_set_are_the_purge_delay_and_allow_thp() {
    let o = Command::new(env!("CARGO_BIN_EXE_tracemill"))
        .arg("--version")
        .env("MIMALLOC_VERBOSE", "1")
        .env_remove("MIMALLOC_PURGE_DELAY")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let names: Vec<String> = stderr(&o)
        .lines()
        .filter_map(|l| l.strip_prefix("option '"))
        .filter_map(|l| l.split('\'').next())
        .map(str::to_string)
        .collect();
    for (i, name) in [
        (tracemill::allocator::MI_OPTION_PURGE_DELAY, "purge_delay"),
        (tracemill::allocator::MI_OPTION_ALLOW_THP, "allow_thp"),
    ] {
        assert_eq!(
            names.get(i as usize).map(String::as_str),
            Some(name),
            "mimalloc's options: {names:?}"
        );
    }
}
