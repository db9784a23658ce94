//! `report flamegraph` and the call stacks: the total is the instruction count, and the
//! stacks do not depend on the row groups or on how the columns are read.

use std::path::Path;

use crate::common::*;
use crate::setup::*;

#[test]
fn flame_graph_total_equals_the_instruction_count() {
    for sample in ["recursion", "callbacks", "synthetic", "kernel-processes"] {
        let (tmp, out) = decoded(sample);
        let svg = tmp.path().join("f.svg");
        let folded = tmp.path().join("f.folded");
        ok(&[
            "report",
            "flamegraph",
            s(&out),
            "--out",
            s(&svg),
            "--folded",
            s(&folded),
        ]);
        let text = std::fs::read_to_string(&folded).unwrap();
        let total: u64 = text
            .lines()
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum();
        let branches = read_branches(&out.join("branches.parquet"));
        let want: u64 = branches.insns.iter().map(|&n| n as u64).sum();
        assert_eq!(total, want, "{sample}: folded total");
        let svg_text = std::fs::read_to_string(&svg).unwrap();
        assert!(
            svg_text.contains("<svg") && svg_text.contains("</svg>"),
            "{sample}"
        );
        if sample == "recursion" {
            // Whole stacks from the entry point, recursion included.
            for stack in [
                "_start;__libc_start_main;__libc_start_call_main;main;fib;fib ",
                "main;insert;insert;insert;insert;insert;insert;insert;insert ",
                "main;queens;queens;queens ",
            ] {
                assert!(
                    text.lines().any(|l| l.contains(stack)),
                    "no stack {stack:?}"
                );
            }
            assert!(svg_text.contains("fib"), "fib not in the SVG");
        }
    }
}

/// Rewrite `dir`'s Parquet `table` in row groups of `rows` rows (same rows, same schema).
fn regroup(dir: &Path, table: &str, rows: usize) {
    rewrite(
        dir,
        table,
        parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(rows)),
    );
}

/// Write a table again with other writer properties (and the same metadata).
fn rewrite(dir: &Path, table: &str, props: parquet::file::properties::WriterPropertiesBuilder) {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let path = dir.join(format!("{table}.parquet"));
    let b = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&path).unwrap()).unwrap();
    // The tracemill metadata (bundle, images) stays with the file.
    let kv: Vec<_> = b
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .into_iter()
        .flatten()
        .filter(|k| k.key != "ARROW:schema")
        .cloned()
        .collect();
    let r = b.build().unwrap();
    let schema = arrow_array::RecordBatchReader::schema(&r);
    let batches: Vec<_> = r.map(Result::unwrap).collect();
    let props = props.set_key_value_metadata(Some(kv)).build();
    let tmp = dir.join(format!("{table}.regrouped"));
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&tmp).unwrap(),
        schema,
        Some(props),
    )
    .unwrap();
    for b in &batches {
        w.write(b).unwrap();
    }
    w.close().unwrap();
    std::fs::rename(tmp, path).unwrap();
}

#[test]
fn stacks_are_the_same_whatever_the_row_groups() {
    // Row groups are read side by side and walked in order, with the events between
    // their rows: in groups of 997 rows (several per reader) the folded stacks, the flame
    // graph and the timeline are the same as from one row group.
    for sample in ["recursion", "kernel-processes"] {
        let (tmp, out) = decoded(sample);
        let report = |dir: &Path, name: &str| {
            let (svg, folded, tl) = (
                tmp.path().join(format!("{name}.svg")),
                tmp.path().join(format!("{name}.folded")),
                tmp.path().join(format!("{name}.json")),
            );
            ok(&[
                "report",
                "flamegraph",
                s(dir),
                "--out",
                s(&svg),
                "--folded",
                s(&folded),
            ]);
            ok(&["report", "timeline", s(dir), "--out", s(&tl)]);
            [svg, folded, tl].map(|p| std::fs::read(p).unwrap())
        };
        let one = report(&out, "one");
        let n = read_branches(&out.join("branches.parquet")).insns.len();
        assert!(n > 5 * 997, "{sample}: {n} rows make several row groups");
        regroup(&out, "branches", 997);
        regroup(&out, "events", 13);
        let groups = parquet::file::reader::FileReader::metadata(
            &parquet::file::serialized_reader::SerializedFileReader::new(
                std::fs::File::open(out.join("branches.parquet")).unwrap(),
            )
            .unwrap(),
        )
        .num_row_groups();
        assert_eq!(groups, n.div_ceil(997), "{sample}");
        let many = report(&out, "many");
        for (what, (a, b)) in ["svg", "folded", "timeline"]
            .iter()
            .zip(one.iter().zip(&many))
        {
            assert!(a == b, "{sample}: {what} differs with {groups} row groups");
        }
    }
}

/// The stacks of a decode's tables (by cycles: every row group read through arrow-rs;
/// by instructions: as dictionary keys), their folded lines by instructions, and the
/// walk's warnings.
fn walk_stacks(
    out: &Path,
    cycles: bool,
) -> (tracemill_reports::stacks::Stacks, Vec<String>, Vec<String>) {
    use tracemill_reports::stacks::{build, Functions};
    let input = tracemill_reports::Input::open(out, None).unwrap();
    let (mut f, mut warnings) = (Functions::new(&input.symbols), vec![]);
    let mut st = build(&input, &mut f, &mut warnings, false, cycles, |_| {}).unwrap();
    let lines: Vec<String> = st
        .folded(&f.names, false, 0)
        .iter()
        .map(str::to_string)
        .collect();
    (st, lines, warnings)
}

#[test]
fn stacks_read_as_dictionary_keys_are_those_read_as_values() {
    // By instructions the walk reads `branches` as dictionary keys (its own page decoder);
    // by cycles, as values through arrow-rs. Both give every stack the same instructions,
    // in one row group per reader or in groups of 997 rows.
    for sample in [
        "recursion",
        "kernel-processes",
        "busybox-gzip-ring",
        "synthetic",
    ] {
        let (_tmp, out) = decoded(sample);
        for regrouped in [false, true] {
            if regrouped {
                regroup(&out, "branches", 997);
            }
            let walk = |cycles| {
                let (st, lines, _) = walk_stacks(&out, cycles);
                (st, lines)
            };
            let ((keys, by_keys), (values, by_values)) = (walk(false), walk(true));
            let what = format!("{sample}, regrouped: {regrouped}");
            assert!(keys.rows > 1000, "{what}: {} rows", keys.rows);
            assert_eq!(keys.rows_by_keys, keys.rows, "{what}: all rows by keys");
            assert_eq!(values.rows_by_keys, 0, "{what}: by values");
            assert_eq!(keys.rows, values.rows, "{what}");
            assert_eq!(
                (keys.mismatched_returns, keys.longjmps, keys.async_entries),
                (
                    values.mismatched_returns,
                    values.longjmps,
                    values.async_entries
                ),
                "{what}"
            );
            assert!(by_keys.len() > 3, "{what}: {} stacks", by_keys.len());
            assert_eq!(by_keys, by_values, "{what}");
        }
    }
}

#[test]
fn events_read_as_dictionary_keys_are_those_read_as_values() {
    // The walk reads the events table as dictionary keys (the decode writes `seq` in
    // DELTA_BINARY_PACKED, the rest with dictionaries). Written again as version 2 pages
    // without dictionaries, its `kind` column is in DELTA_BYTE_ARRAY, which only arrow-rs
    // reads: the stacks are the same, and so are the gaps and entries the events made.
    use parquet::file::properties::{WriterProperties, WriterVersion};
    let mut total = 0;
    for sample in ["kernel-processes", "busybox-gzip-ring", "synthetic"] {
        let (_tmp, out) = decoded(sample);
        let (keys, by_keys, keys_warnings) = walk_stacks(&out, false);
        rewrite(
            &out,
            "events",
            WriterProperties::builder()
                .set_dictionary_enabled(false)
                .set_writer_version(WriterVersion::PARQUET_2_0)
                .set_max_row_group_row_count(Some(1000)),
        );
        let (values, by_values, values_warnings) = walk_stacks(&out, false);
        assert!(keys.events_read > 0, "{sample}: no events");
        total += keys.events_read;
        assert_eq!(
            keys.events_by_keys, keys.events_read,
            "{sample}: all by keys"
        );
        assert_eq!(values.events_by_keys, 0, "{sample}: by values");
        assert_eq!(
            (keys.events, keys.events_read),
            (values.events, values.events_read),
            "{sample}"
        );
        let effects = |s: &tracemill_reports::stacks::Stacks| {
            (s.gaps, s.mismatched_returns, s.longjmps, s.async_entries)
        };
        assert_eq!(effects(&keys), effects(&values), "{sample}");
        assert_eq!(by_keys, by_values, "{sample}");
        assert_eq!(keys_warnings, values_warnings, "{sample}");
        eprintln!(
            "{sample}: {} events, {} taken",
            keys.events_read, keys.events
        );
    }
    assert!(total > 1000, "{total} events");
}
