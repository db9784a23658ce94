//! Bad input: a clear message, and what can be made is made.

use crate::common::*;
use crate::setup::*;

#[test]
fn bad_input_gives_a_clear_message_and_what_can_be_made() {
    let tmp = tempfile::tempdir().unwrap();
    // Not a decode output.
    let o = run(&["report", "hotspots", s(tmp.path())]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no tracemill table"), "{}", stderr(&o));

    // Tables decoded without coverage: hotspots say which table is missing.
    let out = tmp.path().join("nocov");
    let bundle = samples_dir().join("recursion");
    ok(&[
        "decode",
        s(&bundle),
        "--out",
        s(&out),
        "-q",
        "--tables",
        "branches,events",
    ]);
    let o = run(&["report", "hotspots", s(&out)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no coverage table"), "{}", stderr(&o));
    // ... but the flame graph, made of branches, is still made.
    let svg = tmp.path().join("f.svg");
    ok(&["report", "flamegraph", s(&out), "--out", s(&svg)]);

    // A bundle whose image is missing: a warning, code shown as image+0xoffset.
    let copy = tmp.path().join("bundle");
    std::fs::create_dir_all(copy.join("images")).unwrap();
    for f in ["bundle.toml", "trace.rtit"] {
        std::fs::copy(bundle.join(f), copy.join(f)).unwrap();
    }
    std::fs::copy(
        bundle.join("images/recursion"),
        copy.join("images/recursion"),
    )
    .unwrap();
    let out2 = tmp.path().join("out2");
    ok(&["decode", s(&copy), "--out", s(&out2), "-q"]);
    std::fs::remove_file(copy.join("images/recursion")).unwrap();
    let o = ok(&["report", "hotspots", s(&out2), "--format", "csv"]);
    assert!(stderr(&o).contains("cannot read image"), "{}", stderr(&o));
    assert!(stdout(&o).contains("recursion+0x"), "{}", stdout(&o));

    // An image whose build-id differs from the one decoded: its symbols are not used.
    std::fs::copy(
        samples_dir().join("callbacks/images/callbacks"),
        copy.join("images/recursion"),
    )
    .unwrap();
    let o = ok(&["report", "hotspots", s(&out2), "--format", "csv"]);
    assert!(stderr(&o).contains("build-id"), "{}", stderr(&o));
    assert!(!stdout(&o).contains("\nfib,"), "{}", stdout(&o));

    // A bundle other than the one the tables were decoded from: refused, with what
    // differs (every count would otherwise be 0), by every report.
    let other = samples_dir().join("callbacks");
    let written = tmp.path().join("not-written");
    for (report, out_arg) in [
        ("hotspots", None),
        ("flamegraph", Some("--out")),
        ("pprof", Some("--out")),
        ("perf-script", None),
        ("coverage", None),
        ("timeline", Some("--out")),
        ("html", Some("--out")),
    ] {
        let mut args = vec!["report", report, s(&out2), "--bundle", s(&other)];
        args.extend(out_arg.into_iter().chain(out_arg.map(|_| s(&written))));
        let o = run(&args);
        assert!(!written.exists(), "{report} wrote its output");
        assert_eq!(o.status.code(), Some(1), "{report}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains("not the bundle these tables were decoded from")
                && e.contains(s(&other))
                && e.contains("bytes, the tables' was"),
            "{report}: {e}"
        );
    }
    // The same bundle elsewhere (the sample the copy was made from): accepted.
    let o = ok(&["report", "hotspots", s(&out2), "--bundle", s(&bundle)]);
    assert!(stdout(&o).contains("fib"), "{}", stdout(&o));

    // No image: not one branch decoded: the decode fails and writes no table.
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    for f in ["bundle.toml", "trace.rtit"] {
        std::fs::copy(bundle.join(f), empty.join(f)).unwrap();
    }
    let out3 = tmp.path().join("out3");
    let o = run(&["decode", s(&empty), "--out", s(&out3), "-q"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let o = run(&["report", "hotspots", s(&out3)]);
    assert!(stderr(&o).contains("no tracemill table"), "{}", stderr(&o));
    // A trace with no branch in it (PSBs only), its image there: empty tables, empty
    // reports, no failure.
    let idle = tmp.path().join("idle");
    std::fs::create_dir_all(idle.join("images")).unwrap();
    std::fs::copy(bundle.join("bundle.toml"), idle.join("bundle.toml")).unwrap();
    std::fs::copy(
        bundle.join("images/recursion"),
        idle.join("images/recursion"),
    )
    .unwrap();
    std::fs::write(
        idle.join("trace.rtit"),
        [0xC0u8, 0, 0, 0, 0, 0, 0, 0, 0].repeat(4),
    )
    .unwrap();
    ok(&["decode", s(&idle), "--out", s(&out3), "-q"]);
    let o = ok(&["report", "hotspots", s(&out3)]);
    assert!(stdout(&o).starts_with("# 0 instructions"), "{}", stdout(&o));
    let svg3 = tmp.path().join("empty.svg");
    ok(&["report", "flamegraph", s(&out3), "--out", s(&svg3)]);
    assert!(std::fs::read_to_string(&svg3)
        .unwrap()
        .contains("no branch rows"));
    ok(&[
        "report",
        "html",
        s(&out3),
        "--out",
        s(&tmp.path().join("empty.html")),
    ]);

    // A column missing (a table from another version): named in the message.
    let cov = out2.join("coverage.parquet");
    {
        use arrow_array::RecordBatch;
        let f = std::fs::File::open(&cov).unwrap();
        let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
            .unwrap()
            .build()
            .unwrap();
        let batches: Vec<RecordBatch> = r.map(Result::unwrap).collect();
        let keep: Vec<usize> = (0..batches[0].num_columns())
            .filter(|&i| batches[0].schema().field(i).name() != "count")
            .collect();
        let schema = std::sync::Arc::new(batches[0].schema().project(&keep).unwrap());
        let f = std::fs::File::create(&cov).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(f, schema, None).unwrap();
        for b in &batches {
            w.write(&b.project(&keep).unwrap()).unwrap();
        }
        w.close().unwrap();
    }
    let o = run(&["report", "hotspots", s(&out2)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("missing column count"),
        "{}",
        stderr(&o)
    );
    let html = tmp.path().join("r.html");
    let o = ok(&["report", "html", s(&out2), "--out", s(&html)]);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("missing column count"), "{}", stderr(&o));
    assert!(page.contains("Flame graph"));
}
