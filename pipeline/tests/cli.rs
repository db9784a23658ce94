//! The `tracemill` command on bad arguments and damaged inputs: every message says what is
//! wrong and where, and the exit status is non-zero only when nothing could be decoded.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;

fn tracemill(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tracemill"))
        .args(args)
        .output()
        .expect("tracemill runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn sample(name: &str) -> PathBuf {
    common::samples_dir().join(name)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 paths in tests")
}

/// A bundle in a temporary directory: the sample's trace and images, and `toml` as its
/// bundle.toml.
fn bundle_with(sample_name: &str, toml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = sample(sample_name);
    std::fs::copy(src.join("trace.rtit"), dir.path().join("trace.rtit")).unwrap();
    std::fs::create_dir(dir.path().join("images")).unwrap();
    for e in std::fs::read_dir(src.join("images")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path().join("images").join(e.file_name())).unwrap();
    }
    std::fs::write(dir.path().join("bundle.toml"), toml).unwrap();
    dir
}

/// Rows in a Parquet file.
fn parquet_rows(path: &Path) -> i64 {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let r = parquet::file::reader::SerializedFileReader::new(f).unwrap();
    parquet::file::reader::FileReader::metadata(&r)
        .file_metadata()
        .num_rows()
}

#[test]
fn a_path_that_does_not_exist_is_named() {
    for args in [
        &["decode", "/nonexistent/bundle"][..],
        &["decode", "/nonexistent/bundle", "--ctl", "0x2e0d"],
        &["dump", "/nonexistent/bundle", "--stats"],
    ] {
        let o = tracemill(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = stderr(&o);
        assert_eq!(
            err, "tracemill: error: /nonexistent/bundle: no such file or directory\n",
            "{args:?}"
        );
    }
}

#[test]
fn a_directory_without_bundle_toml_and_a_bare_trace_without_ctl_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let o = tracemill(&["decode", s(dir.path())]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("a directory without bundle.toml"), "{err}");

    let trace = sample("recursion").join("trace.rtit");
    let o = tracemill(&["decode", s(&trace)]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("trace.rtit: a bare trace file needs --ctl"),
        "{err}"
    );
}

#[test]
fn a_bundle_toml_syntax_error_names_file_line_column_and_key_once() {
    let toml = "rtit_ctl = \"0x6f0b\"\n\n[[image]]\npath = \"images/recursion\"\n\n\
                [[image]]\npath = \"images/other\"\nbase = 0x40 0000\n";
    let b = bundle_with("recursion", toml);
    let o = tracemill(&["decode", s(b.path())]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    let file = b.path().join("bundle.toml");
    // The first line says it all; the offending line follows, with a caret.
    let first = err.lines().next().unwrap();
    let want = format!(
        "tracemill: error: {}:8:8: key `base` of [[image]] 2: ",
        file.display()
    );
    assert!(first.starts_with(&want), "{err}");
    assert!(err.contains("\n8 | base = 0x40 0000\n"), "{err}");
    assert!(err.contains("\n  |        ^^^^^^^^^\n"), "{err}");
    // Said once: no second copy of the parser's message.
    assert_eq!(err.matches("8 | base").count(), 1, "{err}");
    assert_eq!(err.matches(s(&file)).count(), 1, "{err}");
    assert_eq!(err.lines().count(), 4, "{err}");
}

#[test]
fn an_rtit_ctl_that_is_not_a_number_is_named() {
    let b = bundle_with("recursion", "rtit_ctl = \"0x6g0b\"\n");
    let o = tracemill(&["decode", s(b.path())]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    let want = format!(
        "tracemill: error: {}:1:12: key `rtit_ctl`: not a number: \"0x6g0b\"\n",
        b.path().join("bundle.toml").display()
    );
    assert!(err.starts_with(&want), "{err}");

    let b = bundle_with("recursion", "guaranteed_ratio = 20\n");
    let o = tracemill(&["decode", s(b.path())]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("missing field `rtit_ctl`"), "{err}");
    assert!(err.contains("bundle.toml"), "{err}");

    // On the command line, clap's usage error (status 2).
    let o = tracemill(&["decode", s(&sample("recursion")), "--ctl", "ten"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("not a number: \"ten\""), "{err}");
}

#[test]
fn a_missing_image_is_a_warning_unless_no_image_is_left() {
    let out = tempfile::tempdir().unwrap();
    let rec = sample("recursion");
    let o = tracemill(&[
        "decode",
        s(&rec),
        "--image",
        "/nonexistent/libfoo.so",
        "--out",
        s(out.path()),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning       /nonexistent/libfoo.so: no such file or directory"),
        "{err}"
    );
    assert!(parquet_rows(&out.path().join("branches.parquet")) > 0);

    // The only image missing: nothing can be followed, the status says so.
    let trace = rec.join("trace.rtit");
    let o = tracemill(&[
        "decode",
        s(&trace),
        "--ctl",
        "0x6f0b",
        "--image",
        "/nonexistent/prog",
        "--out",
        s(out.path()),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("/nonexistent/prog: no such file or directory"),
        "{err}"
    );
    assert!(
        err.contains("tracemill: error: no branch decoded: no code image could be loaded")
            && err.ends_with("keeps what it held)\n"),
        "nothing published over the earlier tables: {err}"
    );
    assert!(
        parquet_rows(&out.path().join("branches.parquet")) > 0,
        "kept"
    );
    // Events and timing alone need no image.
    let o = tracemill(&[
        "decode",
        s(&trace),
        "--ctl",
        "0x6f0b",
        "--tables",
        "events,timing",
        "--out",
        s(out.path()),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn overlapping_images_are_named_and_the_first_is_kept() {
    let rec = sample("recursion");
    let image = rec.join("images/recursion");
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("recursion-copy");
    std::fs::copy(&image, &copy).unwrap();
    let o = tracemill(&["decode", s(&rec), "--image", s(&copy)]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let want = format!(
        "warning       {}: overlaps {} at 0x",
        copy.display(),
        image.display()
    );
    assert!(err.contains(&want), "{err}");
    assert!(
        err.contains("in the same address space: not loaded"),
        "{err}"
    );
    // Decoding is as without the copy: no errors.
    assert!(err.contains(" 0 errors,"), "{err}");

    // The same file twice.
    let o = tracemill(&["decode", s(&rec), "--image", s(&image)]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let want = format!(
        "warning       {}: listed twice, overlapping itself",
        image.display()
    );
    assert!(err.contains(&want), "{err}");
}

/// A valid ELF header with no program headers at all.
fn elf_without_code() -> Vec<u8> {
    let mut h = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
    h.resize(16, 0);
    h.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    h.extend_from_slice(&0x3eu16.to_le_bytes()); // x86-64
    h.extend_from_slice(&1u32.to_le_bytes());
    h.extend_from_slice(&[0; 24]); // entry, phoff, shoff
    h.extend_from_slice(&0u32.to_le_bytes()); // flags
    for v in [64u16, 56, 0, 64, 0, 0] {
        h.extend_from_slice(&v.to_le_bytes()); // ehsize, phentsize, phnum, shentsize, ...
    }
    assert_eq!(h.len(), 64);
    h
}

#[test]
fn an_elf_without_code_and_a_file_that_is_not_an_elf_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let nocode = dir.path().join("nocode.elf");
    std::fs::write(&nocode, elf_without_code()).unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not code\n").unwrap();
    let rec = sample("recursion");
    let o = tracemill(&[
        "decode",
        s(&rec),
        "--image",
        s(&nocode),
        "--image",
        s(&text),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let want = format!(
        "{}: an ELF file without executable code (no PT_LOAD segment with execute permission): not loaded",
        nocode.display()
    );
    assert!(err.contains(&want), "{err}");
    let want = format!("{}: not a 64-bit ELF file (", text.display());
    assert!(err.contains(&want), "{err}");
    assert!(err.contains("kind = \"raw\""), "{err}");
}

/// Offsets and sizes of the packets of a trace, from `tracemill dump`.
fn packets(trace: &Path, ctl: &str) -> Vec<(u64, usize)> {
    let o = tracemill(&["dump", s(trace), "--ctl", ctl]);
    assert!(o.status.success(), "{}", stderr(&o));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let off = u64::from_str_radix(f.next()?, 16).ok()?;
            let bytes = f.take_while(|t| t.len() == 2 && u8::from_str_radix(t, 16).is_ok());
            Some((off, bytes.count()))
        })
        .collect()
}

#[test]
fn a_trace_cut_inside_a_packet_keeps_the_rows_before_and_names_the_offset() {
    let rec = sample("recursion");
    let bytes = std::fs::read(rec.join("trace.rtit")).unwrap();
    let pk = packets(&rec.join("trace.rtit"), "0x6f0b");
    // A long packet in the second half: cut it after its first byte.
    let &(at, len) = pk[pk.len() / 2..]
        .iter()
        .find(|(_, n)| *n >= 3)
        .expect("a multi-byte packet");
    assert!(len >= 3);
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("cut.rtit");
    std::fs::write(&trace, &bytes[..at as usize + 1]).unwrap();
    let image = rec.join("images/recursion");
    let out = dir.path().join("out");
    let o = tracemill(&[
        "decode",
        s(&trace),
        "--ctl",
        "0x6f0b",
        "--image",
        s(&image),
        "--out",
        s(&out),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let want = format!("error at offset {at:#x}: ");
    let line = err
        .lines()
        .find(|l| l.contains(&want))
        .unwrap_or_else(|| panic!("no error at {at:#x}:\n{err}"));
    assert!(line.contains("truncated"), "{line}");
    // Every row before the cut is kept: as many as the whole trace has before that offset.
    let full_out = dir.path().join("full");
    let o = tracemill(&["decode", s(&rec), "--out", s(&full_out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cut_rows = parquet_rows(&out.join("branches.parquet"));
    let full = common::read_branches(&full_out.join("branches.parquet"));
    let before = full.offset.iter().filter(|&&off| off < at).count() as i64;
    assert!(cut_rows > 0);
    assert!(
        cut_rows >= before - 64 && cut_rows <= before,
        "{cut_rows} rows of {before} before the cut"
    );
}

#[test]
fn a_file_without_psb_fails_and_a_good_bundle_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.rtit");
    std::fs::write(&junk, vec![0x55u8; 4096]).unwrap();
    let o = tracemill(&["decode", s(&junk), "--ctl", "0x2e0d"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.starts_with(&format!(
            "tracemill: error: decoding {}: {}: no PSB packet in 4096 bytes",
            junk.display(),
            junk.display()
        )),
        "{err}"
    );
    let o = tracemill(&["decode", s(&sample("busybox-sort"))]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
}
