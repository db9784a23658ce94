//! `tracemill report`: hotspots against the truth, flame graph totals, drcov and lcov read
//! back (drcov by a reader written here from the published format, lcov by genhtml), the
//! timeline's JSON, the HTML page in headless Chromium, and bad input.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use tracemill_reports::symbols::{ImageSpec, ImageSymbols};

/// `report hotspots DIR` as CSV, every row: (header, rows).
fn hotspots_csv(dir: &Path) -> (Vec<String>, Vec<Vec<String>>, Output) {
    let o = ok(&[
        "report",
        "hotspots",
        s(dir),
        "--format",
        "csv",
        "--top",
        "0",
    ]);
    let (header, rows) = parse_csv(&stdout(&o));
    (header, rows, o)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Decode a committed sample into a fresh directory.
fn decoded(sample: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let bundle = samples_dir().join(sample);
    ok(&[
        "decode",
        bundle.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "-q",
        "-j",
        "1",
    ]);
    (tmp, out)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The bundle's first image, symbolized as the reports do.
fn image(sample: &str) -> ImageSymbols {
    let dir = samples_dir().join(sample);
    let b = tracemill_input::bundle::Bundle::open(&dir, None, &[]).unwrap();
    let e = &b.manifest.images[0];
    ImageSymbols::load(ImageSpec {
        name: Path::new(&e.path)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned(),
        path: dir.join(&e.path),
        base: e.base,
        cr3: e.cr3,
        raw: false,
        symbols: None,
    })
    .unwrap()
}

/// Parse `report hotspots --format csv` into (image, function) -> instructions.
fn parse_csv(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut lines = text.lines();
    let header: Vec<String> = lines
        .next()
        .unwrap()
        .split(',')
        .map(str::to_string)
        .collect();
    let rows = lines
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    (header, rows)
}

#[test]
fn symbols_agree_with_nm_and_addr2line() {
    let im = image("recursion");
    let path = samples_dir().join("recursion/images/recursion");
    let nm = match Command::new("nm").arg(&path).output() {
        Ok(o) => o,
        Err(_) => return missing_tool("nm not found: install binutils"),
    };
    // Every defined text symbol that nm lists is named by the symbolizer (an alias may be
    // chosen, but at the same address).
    let mut checked = 0;
    for l in String::from_utf8_lossy(&nm.stdout).lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() != 3 || !matches!(f[1], "T" | "t") {
            continue;
        }
        let addr = u64::from_str_radix(f[0], 16).unwrap();
        let i = im
            .function_index(addr)
            .unwrap_or_else(|| panic!("{} at {addr:#x} not found", f[2]));
        assert_eq!(im.functions()[i].start, addr, "{}", f[2]);
        checked += 1;
    }
    assert!(checked > 500, "only {checked} text symbols in nm's output");
    // The program's functions have lines; addr2line agrees on them.
    let fib = im
        .functions()
        .iter()
        .find(|f| f.name == "fib")
        .expect("fib");
    let mut addrs: Vec<u64> = (fib.start..fib.end).step_by(7).collect();
    addrs.truncate(12);
    let hex: Vec<String> = addrs.iter().map(|a| format!("{a:#x}")).collect();
    let o = match Command::new("addr2line")
        .arg("-e")
        .arg(&path)
        .args(&hex)
        .output()
    {
        Ok(o) => o,
        Err(_) => return missing_tool("addr2line not found: install binutils"),
    };
    let theirs: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.split(" (").next().unwrap().to_string())
        .collect();
    let mut agreed = 0;
    for (a, t) in addrs.iter().zip(&theirs) {
        // addr2line prints the innermost location, as `line` does.
        let ours = im.line(*a).map(|l| format!("{}:{}", l.file, l.line));
        if let Some(o) = &ours {
            if t.ends_with(o.trim_start_matches("./")) || o.ends_with(t) {
                agreed += 1;
                continue;
            }
        }
        panic!("{a:#x}: ours {ours:?}, addr2line {t}");
    }
    assert!(agreed > 0);
    assert!(
        theirs[0].contains("datasets/programs/recursion.c"),
        "{theirs:?}"
    );
}

/// Truth instructions per (image, function of the block's first instruction).
fn truth_by_function(sample: &str, im: &ImageSymbols) -> BTreeMap<String, u64> {
    let dir = samples_dir().join(sample);
    let t = truth(&dir);
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for i in 0..t.rows.len() {
        if t.lost[i] {
            continue;
        }
        *want
            .entry(im.function_name(t.block_start[i]).into_owned())
            .or_default() += t.block_insns[i] as u64;
    }
    for p in &t.partials {
        if t.lost.get(p.row as usize) == Some(&false) {
            *want
                .entry(im.function_name(p.start).into_owned())
                .or_default() += p.insns as u64;
        }
    }
    want
}

#[test]
fn hotspot_instructions_per_function_equal_the_truths() {
    for sample in [
        "recursion",
        "callbacks",
        "jumptable",
        "strings",
        "busybox-sort",
    ] {
        let (_tmp, out) = decoded(sample);
        let (header, rows, _) = hotspots_csv(&out);
        for c in [
            "function",
            "image",
            "instructions",
            "cycles",
            "calls",
            "share",
        ] {
            assert!(
                header.iter().any(|h| h == c),
                "{sample}: no {c} in {header:?}"
            );
        }
        let col = |n: &str| header.iter().position(|h| h == n).unwrap();
        let mut got: BTreeMap<String, u64> = BTreeMap::new();
        let mut share = 0.0;
        for r in &rows {
            got.insert(
                r[col("function")].clone(),
                r[col("instructions")].parse().unwrap(),
            );
            share += r[col("share")].parse::<f64>().unwrap();
        }
        let im = image(sample);
        let want = truth_by_function(sample, &im);
        assert_eq!(got, want, "{sample}: instructions per function");
        assert!(
            (share - 1.0).abs() < 1e-3,
            "{sample}: shares add up to {share}"
        );
        if sample == "recursion" {
            // Symbols, not addresses, for a program built with -g.
            let top: Vec<&str> = rows
                .iter()
                .take(5)
                .map(|r| r[col("function")].as_str())
                .collect();
            assert!(top.contains(&"insert"), "{top:?}");
            let insert = rows
                .iter()
                .find(|r| r[col("function")] == "insert")
                .unwrap();
            // insert(tree, key) recurses once per level: calls from the edges table.
            assert!(
                insert[col("calls")].parse::<u64>().unwrap() > 10_000,
                "{insert:?}"
            );
            assert!(
                insert[col("cycles")].parse::<u64>().unwrap() > 0,
                "{insert:?}"
            );
        }
        if sample == "busybox-sort" {
            // A stripped image: its code as image+0xoffset, never hidden.
            assert!(got.keys().all(|k| k.starts_with("busybox+0x")), "{got:?}");
        }
    }
}

#[test]
fn hotspots_by_line_and_block_add_up() {
    let (_tmp, out) = decoded("recursion");
    let total: u64 = truth_by_function("recursion", &image("recursion"))
        .values()
        .sum();
    for by in ["line", "block"] {
        let o = ok(&[
            "report",
            "hotspots",
            s(&out),
            "--by",
            by,
            "--format",
            "csv",
            "--top",
            "0",
        ]);
        let (header, rows) = parse_csv(&stdout(&o));
        let ic = header.iter().position(|h| h == "instructions").unwrap();
        let lc = header.iter().position(|h| h == by).unwrap();
        let sum: u64 = rows.iter().map(|r| r[ic].parse::<u64>().unwrap()).sum();
        assert_eq!(sum, total, "--by {by}");
        if by == "line" {
            assert!(
                rows.iter()
                    .any(|r| r[lc].starts_with("datasets/programs/recursion.c:")),
                "no recursion.c line"
            );
        }
    }
    // The terminal table and JSON.
    let o = ok(&[
        "report",
        "hotspots",
        s(&out),
        "--weight",
        "cycles",
        "--top",
        "5",
    ]);
    let t = stdout(&o);
    assert!(t.lines().count() == 7 && t.contains("cycles"), "{t}");
    let o = ok(&[
        "report",
        "hotspots",
        s(&out),
        "--format",
        "json",
        "--top",
        "3",
    ]);
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["rows"].as_array().unwrap().len(), 3);
    assert_eq!(j["total_instructions"].as_u64().unwrap(), total);
}

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

/// A drcov file as the published format describes it (DynamoRIO drcov, log version 2).
struct Drcov {
    modules: Vec<(u64, u64, u64, String)>,
    blocks: Vec<(u32, u16, u16)>,
}

fn read_drcov(bytes: &[u8]) -> Drcov {
    let mut pos = 0;
    let mut line = || {
        let end = bytes[pos..].iter().position(|&b| b == b'\n').unwrap() + pos;
        let l = String::from_utf8(bytes[pos..end].to_vec()).unwrap();
        pos = end + 1;
        l
    };
    assert_eq!(line(), "DRCOV VERSION: 2");
    assert!(line().starts_with("DRCOV FLAVOR: "));
    let mt = line();
    let count: usize = mt
        .strip_prefix("Module Table: version 2, count ")
        .unwrap_or_else(|| panic!("{mt}"))
        .parse()
        .unwrap();
    let cols = line();
    assert_eq!(
        cols,
        "Columns: id, base, end, entry, checksum, timestamp, path"
    );
    let mut modules = Vec::new();
    for _ in 0..count {
        let l = line();
        let f: Vec<&str> = l.splitn(7, ',').map(str::trim).collect();
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        modules.push((
            f[0].parse().unwrap(),
            hex(f[1]),
            hex(f[2]),
            f[6].to_string(),
        ));
    }
    let bb = line();
    let n: usize = bb
        .strip_prefix("BB Table: ")
        .and_then(|r| r.strip_suffix(" bbs"))
        .unwrap()
        .parse()
        .unwrap();
    let rest = &bytes[pos..];
    assert_eq!(rest.len(), n * 8, "bb table size");
    let blocks = rest
        .chunks(8)
        .map(|c| {
            (
                u32::from_le_bytes(c[0..4].try_into().unwrap()),
                u16::from_le_bytes(c[4..6].try_into().unwrap()),
                u16::from_le_bytes(c[6..8].try_into().unwrap()),
            )
        })
        .collect();
    Drcov { modules, blocks }
}

fn coverage_rows(path: &Path) -> Vec<(String, u64, u64)> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt64Type;
    use arrow_array::Array;
    let f = std::fs::File::open(path).unwrap();
    let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .unwrap()
        .build()
        .unwrap();
    let mut out = Vec::new();
    for b in r {
        let b = b.unwrap();
        let img =
            tracemill_sinks::convert::strings(b.column_by_name("image").unwrap().as_ref()).unwrap();
        let st = b
            .column_by_name("start")
            .unwrap()
            .as_primitive::<UInt64Type>();
        let en = b
            .column_by_name("end")
            .unwrap()
            .as_primitive::<UInt64Type>();
        for i in 0..b.num_rows() {
            let name = if img.is_null(i) {
                String::new()
            } else {
                img.value(i).to_string()
            };
            out.push((name, st.value(i), en.value(i)));
        }
    }
    out
}

#[test]
fn drcov_and_lcov_read_back() {
    let (tmp, out) = decoded("recursion");
    let drcov = tmp.path().join("cov.drcov");
    let lcov = tmp.path().join("cov.info");
    // From the repository root, as the README runs it: relative DWARF paths resolve there.
    let root = std::fs::canonicalize(samples_dir().join("../..")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tracemill"))
        .current_dir(&root)
        .args([
            "report",
            "coverage",
            s(&out),
            "--drcov",
            s(&drcov),
            "--lcov",
            s(&lcov),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("not found"), "{}", stderr(&o));
    let summary = stdout(&o);
    assert!(summary.contains("fib"), "{summary}");

    // drcov: one record per coverage row, at its offset in its module, ending past `end`.
    let d = read_drcov(&std::fs::read(&drcov).unwrap());
    let rows = coverage_rows(&out.join("coverage.parquet"));
    assert_eq!(d.modules.len(), 1);
    assert!(
        d.modules[0].3.ends_with("images/recursion"),
        "{:?}",
        d.modules
    );
    assert_eq!(d.blocks.len(), rows.len());
    let base = d.modules[0].1;
    let mut got: Vec<(u64, u64)> = d
        .blocks
        .iter()
        .map(|&(off, size, id)| {
            assert_eq!(id, 0);
            (base + off as u64, base + off as u64 + size as u64)
        })
        .collect();
    got.sort();
    let mut want: Vec<(u64, u64)> = rows.iter().map(|r| (r.1, r.2)).collect();
    want.sort();
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.0, w.0);
        // The record covers the last instruction: 1..=15 bytes past its address.
        assert!(g.1 > w.1 && g.1 <= w.1 + 15, "block {w:x?} record {g:x?}");
    }

    // lcov: parse the records back.
    let text = std::fs::read_to_string(&lcov).unwrap();
    // Per source file: line -> hits, function -> entries.
    type Record = (BTreeMap<u32, u64>, HashMap<String, u64>);
    let mut files: HashMap<String, Record> = HashMap::new();
    let mut cur = String::new();
    for l in text.lines() {
        if let Some(f) = l.strip_prefix("SF:") {
            cur = f.to_string();
            files.entry(cur.clone()).or_default();
        } else if let Some(d) = l.strip_prefix("DA:") {
            let (ln, n) = d.split_once(',').unwrap();
            files
                .get_mut(&cur)
                .unwrap()
                .0
                .insert(ln.parse().unwrap(), n.parse().unwrap());
        } else if let Some(d) = l.strip_prefix("FNDA:") {
            let (n, name) = d.split_once(',').unwrap();
            files
                .get_mut(&cur)
                .unwrap()
                .1
                .insert(name.to_string(), n.parse().unwrap());
        }
    }
    // SF: paths are absolute (genhtml finds the sources from any directory).
    let source = root.join("datasets/programs/recursion.c");
    let (lines, fns) = files
        .get(source.to_str().unwrap())
        .unwrap_or_else(|| panic!("no recursion.c record in {:?}", files.keys()));
    assert!(lines.values().filter(|&&n| n > 0).count() > 20, "{lines:?}");
    assert!(fns["fib"] > 500 && fns["insert"] > 10_000, "{fns:?}");
    assert!(fns["main"] == 1, "{fns:?}");

    // genhtml renders it, run from elsewhere than the repository root.
    let html = tmp.path().join("html");
    match Command::new("genhtml")
        .current_dir(tmp.path())
        .arg("-q")
        .arg("-o")
        .arg(&html)
        .arg(&lcov)
        .output()
    {
        Ok(o) => {
            assert!(
                o.status.success(),
                "genhtml failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let index = std::fs::read_to_string(html.join("index.html")).unwrap();
            assert!(
                index.contains("recursion.c") || index.contains("programs"),
                "index.html names no source"
            );
        }
        Err(_) => missing_tool("genhtml not found: install lcov (apt-get install lcov)"),
    }

    // From a directory where the sources are not, the report says what to give.
    let o = Command::new(env!("CARGO_BIN_EXE_tracemill"))
        .current_dir(tmp.path())
        .args(["report", "coverage", s(&out), "--lcov", s(&lcov)])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("1 source file not found") && stderr(&o).contains("--source-root"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn timeline_is_chrome_trace_json() {
    let (tmp, out) = decoded("recursion");
    let json = tmp.path().join("t.json");
    ok(&["report", "timeline", s(&out), "--out", s(&json)]);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let all = v["traceEvents"].as_array().unwrap();
    // The process's name first (metadata), then the spans.
    assert_eq!(all[0]["ph"], "M");
    let ev = &all[1..];
    assert!(ev.len() > 1000, "{} spans", ev.len());
    let mut fib = 0;
    for e in ev {
        assert_eq!(e["ph"], "X");
        assert!(e["ts"].as_f64().unwrap() >= 0.0 && e["dur"].as_f64().unwrap() >= 0.0);
        fib += usize::from(e["name"] == "fib");
    }
    assert!(fib > 500, "{fib} fib spans");
    // A window keeps fewer spans, all inside it.
    let branches = read_branches(&out.join("branches.parquet"));
    let tscs: Vec<u64> = (0..branches.tsc.len())
        .filter_map(|i| branches.tsc.get(i))
        .collect();
    let (from, to) = (tscs[tscs.len() / 2], tscs[tscs.len() / 2 + 2000]);
    let json2 = tmp.path().join("t2.json");
    ok(&[
        "report",
        "timeline",
        s(&out),
        "--out",
        s(&json2),
        "--from",
        &from.to_string(),
        "--to",
        &to.to_string(),
    ]);
    let v2: serde_json::Value = serde_json::from_slice(&std::fs::read(&json2).unwrap()).unwrap();
    let ev2 = v2["traceEvents"].as_array().unwrap();
    assert!(!ev2.is_empty() && ev2.len() < ev.len());
}

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

/// The headless Chromium on PATH, if any.
fn chromium_exe() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// Headless Chromium driven through the DevTools protocol over a pipe
/// (`--remote-debugging-pipe`: commands in on fd 3, replies and events out on fd 4, each
/// a JSON text ending in a NUL byte), so that a test clicks, hovers and types as a person
/// would, with no WebSocket client. The browser runs under `timeout`: if it hangs, the
/// pipe closes and the test fails instead of waiting for ever.
struct Browser {
    child: std::process::Child,
    to: std::fs::File,
    from: std::io::BufReader<std::fs::File>,
    next: u64,
    session: Option<String>,
    events: Vec<serde_json::Value>,
}

impl Browser {
    fn launch(exe: &str, dir: &Path) -> Browser {
        let (cmd_in, cmd_out) = (dir.join("cdp-in"), dir.join("cdp-out"));
        for f in [&cmd_in, &cmd_out] {
            let st = Command::new("mkfifo").arg(f).status().expect("mkfifo");
            assert!(st.success(), "mkfifo {}", f.display());
        }
        let child = Command::new("bash")
            .args([
                "-c",
                r#"exec 3<"$1" 4>"$2"; exec timeout 120 "$3" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars --user-data-dir="$4" --remote-debugging-pipe about:blank"#,
                "chromium",
            ])
            .arg(&cmd_in)
            .arg(&cmd_out)
            .arg(exe)
            .arg(dir.join("profile"))
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start chromium");
        // Opened in the order the shell opens them (each open waits for the other end).
        let to = std::fs::OpenOptions::new()
            .write(true)
            .open(&cmd_in)
            .unwrap();
        let from = std::io::BufReader::new(std::fs::File::open(&cmd_out).unwrap());
        Browser {
            child,
            to,
            from,
            next: 0,
            session: None,
            events: Vec::new(),
        }
    }

    fn read(&mut self) -> serde_json::Value {
        use std::io::BufRead;
        let mut buf = Vec::new();
        let n = self.from.read_until(0, &mut buf).unwrap();
        assert!(n > 0 && buf.pop() == Some(0), "chromium closed the pipe");
        serde_json::from_slice(&buf).unwrap()
    }

    /// Send a command (to the attached page, once there is one) and wait for its reply.
    fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        use std::io::Write;
        self.next += 1;
        let mut msg = serde_json::json!({"id": self.next, "method": method, "params": params});
        if let Some(s) = &self.session {
            msg["sessionId"] = s.clone().into();
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).unwrap();
        loop {
            let m = self.read();
            if m["id"] == self.next {
                assert!(m.get("error").is_none(), "{method}: {}", m["error"]);
                return m["result"].clone();
            }
            self.events.push(m);
        }
    }

    fn wait_event(&mut self, method: &str) -> serde_json::Value {
        if let Some(i) = self.events.iter().position(|e| e["method"] == method) {
            return self.events.remove(i);
        }
        loop {
            let m = self.read();
            if m["method"] == method {
                return m;
            }
            self.events.push(m);
        }
    }

    /// The value of a JavaScript expression in the page.
    fn eval(&mut self, js: &str) -> serde_json::Value {
        let r = self.call(
            "Runtime.evaluate",
            serde_json::json!({"expression": js, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            r.get("exceptionDetails").is_none(),
            "{js}: {}",
            r["exceptionDetails"]
        );
        r["result"]["value"].clone()
    }

    /// The numbers of a JavaScript array expression.
    fn numbers(&mut self, js: &str) -> Vec<f64> {
        let v = self.eval(js);
        let a = v.as_array().unwrap_or_else(|| panic!("{js}: {v}"));
        a.iter().map(|x| x.as_f64().unwrap()).collect()
    }

    fn mouse(&mut self, kind: &str, x: f64, y: f64) {
        self.call(
            "Input.dispatchMouseEvent",
            serde_json::json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
        );
    }

    fn click(&mut self, x: f64, y: f64) {
        self.mouse("mouseMoved", x, y);
        self.mouse("mousePressed", x, y);
        self.mouse("mouseReleased", x, y);
    }

    /// Scroll the element `js` finds into the middle of the view; its centre.
    fn centre(&mut self, js: &str) -> (f64, f64) {
        let v = self.eval(&format!(
            "(() => {{ const e = {js}; e.scrollIntoView({{block: 'center'}}); \
             const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()"
        ));
        (v[0].as_f64().unwrap(), v[1].as_f64().unwrap())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Standard base64 (the screenshot Chromium sends).
fn unbase64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').map(val).collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for c in bytes.chunks(4) {
        let n = c
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &v)| n | (v as u32) << (18 - 6 * i));
        out.extend_from_slice(&n.to_be_bytes()[1..c.len()]);
    }
    out
}

/// The page as a person uses it, in headless Chromium: it loads nothing from outside;
/// hovering a flame graph frame names it, clicking it zooms in, the search box highlights
/// a function, a table sorts by the column clicked, the timeline is drawn; a screenshot
/// has text and colour (`TRACEMILL_SCREENSHOT=FILE` keeps it, to look at).
#[test]
fn html_report_works_in_chromium_as_clicked() {
    let (tmp, out) = decoded("recursion");
    let html = tmp.path().join("report.html");
    ok(&["report", "html", s(&out), "--out", s(&html)]);
    let page = std::fs::read_to_string(&html).unwrap();
    // Self-contained: no resource from elsewhere (the one outside address, Perfetto's,
    // is only opened by its button).
    for needle in [
        "src=\"http",
        "href=\"http",
        "src=\"//",
        "<link",
        "@import",
        "url(http",
    ] {
        assert!(!page.contains(needle), "the page fetches {needle}");
    }
    assert!(
        !page.contains("<img"),
        "the flame graph is inline, not a picture"
    );
    let Some(exe) = chromium_exe() else {
        return missing_tool("chromium not found: install chromium (apt-get install chromium)");
    };
    let mut b = Browser::launch(exe, tmp.path());
    let target = b.call(
        "Target.createTarget",
        serde_json::json!({"url": "about:blank"}),
    );
    let attached = b.call(
        "Target.attachToTarget",
        serde_json::json!({"targetId": target["targetId"], "flatten": true}),
    );
    b.session = Some(attached["sessionId"].as_str().unwrap().to_string());
    b.call(
        "Emulation.setDeviceMetricsOverride",
        serde_json::json!({"width": 1280, "height": 1000, "deviceScaleFactor": 1, "mobile": false}),
    );
    b.call("Network.enable", serde_json::json!({}));
    b.call("Page.enable", serde_json::json!({}));
    let url = format!("file://{}", html.display());
    b.call("Page.navigate", serde_json::json!({"url": url}));
    b.wait_event("Page.loadEventFired");
    let fetched: Vec<String> = b
        .events
        .iter()
        .filter(|e| e["method"] == "Network.requestWillBeSent")
        .map(|e| {
            e["params"]["request"]["url"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    for u in &fetched {
        assert!(
            u.starts_with("file://") || u.starts_with("data:") || u.starts_with("blob:"),
            "the page fetched {u}"
        );
    }

    // The sections, in the order of the navigation bar, the flame graph near the top.
    let nav = b.eval("[...document.querySelectorAll('nav a')].map(a => a.textContent).join('|')");
    assert!(
        nav.as_str()
            .unwrap()
            .starts_with("Summary|Flame graph|Hotspots|Coverage|Timeline"),
        "{nav}"
    );
    let tops = b.numbers(
        "['summary','flamegraph','hotspots'].map(id => document.getElementById(id).offsetTop)",
    );
    assert!(tops[0] < tops[1] && tops[1] < tops[2], "{tops:?}");

    // Hover: inferno's details line names the frame under the pointer.
    let widest_fib = "[...document.querySelectorAll('#frames > g')].filter(g => /^fib /.test(g.querySelector('title').textContent)).sort((a, b) => b.querySelector('rect').getBBox().width - a.querySelector('rect').getBBox().width)[0]";
    let frames = b.eval("document.querySelectorAll('#frames > g').length");
    assert!(frames.as_u64().unwrap() > 20, "{frames} frames drawn");
    let (x, y) = b.centre(widest_fib);
    let before = b.eval(&format!(
        "{widest_fib}.querySelector('rect').getBoundingClientRect().width"
    ));
    b.mouse("mouseMoved", x, y);
    let details = b.eval("document.getElementById('details').textContent");
    assert!(
        details.as_str().unwrap().contains("fib ("),
        "hovering fib shows {details}"
    );

    // Click: the frame fills the width, frames off its path are hidden, "Reset Zoom" shows.
    b.click(x, y);
    let after = b.eval("(() => { const g = [...document.querySelectorAll('#frames > g')].find(g => g.querySelector('rect').getAttribute('width').startsWith('100.0') && /^fib /.test(g.querySelector('title').textContent)); return g ? g.querySelector('rect').getBoundingClientRect().width : 0; })()");
    assert!(
        after.as_f64().unwrap() > before.as_f64().unwrap() * 1.5,
        "zoom: fib's frame was {before} px wide, is {after}"
    );
    let hidden = b.eval("document.querySelectorAll('#frames > g.hide').length");
    assert!(hidden.as_u64().unwrap() > 0, "zoom hid no frame");
    let unzoom = b.eval("document.getElementById('unzoom').classList.contains('hide')");
    assert_eq!(unzoom, false, "the Reset Zoom button stays hidden");

    // The page's reset button, then the search box: insert's frames, and only they, turn
    // inferno's search colour.
    let (rx, ry) = b.centre("document.getElementById('fg-reset')");
    b.click(rx, ry);
    let hidden = b.eval("document.querySelectorAll('#frames > g.hide').length");
    assert_eq!(hidden, 0, "reset left frames hidden");
    let (fx, fy) = b.centre("document.getElementById('fg-find')");
    b.click(fx, fy);
    b.call("Input.insertText", serde_json::json!({"text": "^insert$"}));
    let lit = b.eval("[...document.querySelectorAll('#frames > g')].filter(g => g.querySelector('rect').getAttribute('fill') === searchcolor).map(g => g.querySelector('title').textContent.split(' ')[0])");
    let lit: Vec<&str> = lit
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(!lit.is_empty(), "search highlighted nothing");
    assert!(
        lit.iter().all(|n| *n == "insert"),
        "search highlighted {lit:?}"
    );
    let matched = b.eval("document.getElementById('fg-matched').textContent");
    assert!(
        matched.as_str().unwrap().starts_with("Matched: "),
        "{matched}"
    );

    // Sorting: the hotspots by calls, most first, then fewest first.
    let calls =
        "[...document.querySelectorAll('#hotspots tbody tr')].map(r => +r.cells[5].dataset.v)";
    let (hx, hy) = b.centre("document.querySelectorAll('#hotspots th')[5]");
    b.click(hx, hy);
    let v = b.numbers(calls);
    assert!(v.len() > 3 && v.windows(2).all(|w| w[0] >= w[1]), "{v:?}");
    b.click(hx, hy);
    let v = b.numbers(calls);
    assert!(v.windows(2).all(|w| w[0] <= w[1]), "{v:?}");

    // The timeline preview has spans drawn on it.
    let inked = b.eval("(() => { const c = document.getElementById('tl-canvas'); const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 0) n++; return n; })()");
    assert!(
        inked.as_u64().unwrap() > 1000,
        "timeline preview: {inked} pixels drawn"
    );

    // A screenshot of the top of the page (after scrolling back): text and colour.
    b.eval("window.scrollTo(0, 0); document.getElementById('fg-find').value = ''; document.getElementById('fg-find').dispatchEvent(new Event('input'))");
    let shot = b.call(
        "Page.captureScreenshot",
        serde_json::json!({"format": "png"}),
    );
    let png_bytes = unbase64(shot["data"].as_str().unwrap());
    if let Ok(keep) = std::env::var("TRACEMILL_SCREENSHOT") {
        std::fs::write(keep, &png_bytes).unwrap();
    }
    let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let px = &buf[..info.buffer_size()];
    let step = info.color_type.samples();
    let mut colors = std::collections::HashSet::new();
    let mut dark = 0usize;
    for p in px.chunks(step) {
        colors.insert(p[..3.min(step)].to_vec());
        dark += usize::from(p[0] < 128);
    }
    assert!(
        colors.len() > 50,
        "screenshot has {} colours: blank?",
        colors.len()
    );
    assert!(dark > 1000, "screenshot has {dark} dark pixels: no text?");
}

/// A raw image with a symbol file names its functions as the ELF would: the recursion
/// sample's executable segment dumped as raw bytes at its address, with `nm`'s output of
/// the ELF as the symbol file, gives the same instructions per function as the ELF.
#[test]
fn raw_image_with_a_symbol_file_has_the_elfs_functions() {
    use object::{Object, ObjectSegment};
    let sample = samples_dir().join("recursion");
    let elf_path = sample.join("images/recursion");
    let nm = match Command::new("nm").arg(&elf_path).output() {
        Ok(o) if o.status.success() => o.stdout,
        Ok(o) => panic!("nm failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(_) => return missing_tool("nm not found: install binutils"),
    };
    let elf = std::fs::read(&elf_path).unwrap();
    let file = object::File::parse(&*elf).unwrap();
    let exec: Vec<_> = file
        .segments()
        .filter(|s| matches!(s.flags(), object::SegmentFlags::Elf { p_flags, .. } if p_flags.0 & object::elf::PF_X.0 != 0))
        .collect();
    assert_eq!(exec.len(), 1, "one executable segment in the static sample");
    let (addr, code) = (exec[0].address(), exec[0].data().unwrap());

    // The same trace, the code as a raw image plus a symbol file.
    let tmp = tempfile::tempdir().unwrap();
    let raw = tmp.path().join("raw");
    std::fs::create_dir_all(raw.join("images")).unwrap();
    std::fs::copy(sample.join("trace.rtit"), raw.join("trace.rtit")).unwrap();
    std::fs::write(raw.join("images/recursion.bin"), code).unwrap();
    std::fs::write(raw.join("images/recursion.sym"), &nm).unwrap();
    let toml = std::fs::read_to_string(sample.join("bundle.toml")).unwrap();
    let ctl = toml.lines().next().unwrap();
    std::fs::write(
        raw.join("bundle.toml"),
        format!(
            "{ctl}\n\n[[image]]\npath = \"images/recursion.bin\"\nbase = \"{addr:#x}\"\n\
             kind = \"raw\"\nsymbols = \"images/recursion.sym\"\n"
        ),
    )
    .unwrap();
    let out = tmp.path().join("out");
    ok(&["decode", s(&raw), "--out", s(&out), "-q", "-j", "1"]);

    let by_function = |dir: &Path| {
        let (header, rows, _) = hotspots_csv(dir);
        let col = |n: &str| header.iter().position(|h| h == n).unwrap();
        rows.iter()
            .map(|r| {
                (
                    r[col("function")].clone(),
                    r[col("instructions")].parse::<u64>().unwrap(),
                )
            })
            .collect::<BTreeMap<String, u64>>()
    };
    let (_elf_tmp, elf_out) = decoded("recursion");
    let want = by_function(&elf_out);
    let got = by_function(&out);
    assert!(want.contains_key("insert"), "{want:?}");
    assert_eq!(got, want, "raw image + symbol file against the ELF");

    // Without the symbol file the same code is shown by offset, never hidden.
    std::fs::remove_file(raw.join("images/recursion.sym")).unwrap();
    let (header, rows, o) = hotspots_csv(&out);
    assert!(stderr(&o).contains("recursion.sym"), "{}", stderr(&o));
    let f = header.iter().position(|h| h == "function").unwrap();
    assert!(
        rows.iter().all(|r| r[f].starts_with("recursion.bin+0x")),
        "{rows:?}"
    );
}

/// What an execution did, from its steps: instructions per function (of each block's
/// first instruction, as the hotspots count them), its distinct blocks (start, last
/// instruction) and edges (branch, next address).
struct Ran {
    instructions: BTreeMap<String, u64>,
    blocks: std::collections::HashSet<(u64, u64)>,
    edges: std::collections::HashSet<(u64, u64)>,
}

fn ran(exec: &tracemill_datasets::exec::Execution, im: &ImageSymbols) -> Ran {
    use tracemill_datasets::exec::Step;
    let mut r = Ran {
        instructions: BTreeMap::new(),
        blocks: Default::default(),
        edges: Default::default(),
    };
    let mut at = exec.entry;
    for s in &exec.steps {
        *r.instructions
            .entry(im.function_name(at).into_owned())
            .or_default() += s.insns() as u64;
        match *s {
            Step::Branch { ip, next, .. } => {
                r.blocks.insert((at, ip));
                r.edges.insert((ip, next));
                at = next;
            }
            Step::Interrupt { resume, .. } => at = resume,
            Step::End { .. } => {}
        }
    }
    r
}

/// Per function: the (start, last) blocks or (branch, next) edges of `of` not in `than`,
/// counted in the function of the first address.
fn only_in(
    of: &std::collections::HashSet<(u64, u64)>,
    than: &std::collections::HashSet<(u64, u64)>,
    im: &ImageSymbols,
) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for &(x, y) in of.difference(than) {
        *out.entry(im.function_name(x).into_owned()).or_default() += 1;
        let _ = y;
    }
    out
}

#[test]
fn diff_of_two_runs_of_one_program_is_what_the_runs_changed() {
    use tracemill_datasets::exec::qemu;
    use tracemill_datasets::samples;
    let skip = std::env::var("TRACEMILL_SKIP_MISSING").is_ok_and(|v| v == "1")
        && std::env::var_os("CI").is_none();
    if let Err(e) = qemu::check_tools() {
        assert!(
            skip,
            "{e} (TRACEMILL_SKIP_MISSING=1 skips this test, except in CI)"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // A: the sample's inputs; B: a deeper Fibonacci, no tree and no queens (queens(0)
    // returns before its loop): known changes of a known program.
    let mut outs = Vec::new();
    let mut runs = Vec::new();
    let mut im = None;
    for (name, stdin) in [("a", "18 40 2000 7\n"), ("b", "20 40 0 0\n")] {
        let mut r = samples::recipe("recursion").unwrap();
        r.source = samples::Source::C {
            program: "recursion",
            args: vec![],
            stdin: stdin.as_bytes().to_vec(),
        };
        let g = samples::generate(&r).unwrap();
        assert!(
            !g.output.truth.lost.iter().any(|&l| l),
            "{name}: rows lost: the decode is not the execution"
        );
        let dir = tmp.path().join(name);
        samples::write_bundle(&dir, &g).unwrap();
        let out = tmp.path().join(format!("{name}-out"));
        ok(&["decode", s(&dir), "--out", s(&out), "-q", "-j", "1"]);
        let (iname, elf) = &g.execs[0].images[0];
        let sym = ImageSymbols::from_elf(
            ImageSpec {
                name: iname.clone(),
                path: dir.join("images").join(iname),
                base: None,
                cr3: None,
                raw: false,
                symbols: None,
            },
            elf,
        )
        .unwrap();
        runs.push(ran(&g.execs[0], &sym));
        im = Some(sym);
        outs.push(out);
    }
    let im = im.unwrap();
    let (a, b) = (&runs[0], &runs[1]);

    // Instructions per function, both sides and the change, as the executions have them.
    let o = ok(&[
        "report",
        "diff",
        s(&outs[0]),
        s(&outs[1]),
        "--format",
        "csv",
        "--top",
        "0",
    ]);
    let (header, rows) = parse_csv(&stdout(&o));
    let col = |n: &str| header.iter().position(|h| h == n).unwrap();
    let mut got: BTreeMap<String, (u64, u64, i64)> = BTreeMap::new();
    let mut last = u64::MAX;
    for r in &rows {
        let change: i64 = r[col("change")].parse().unwrap();
        assert!(
            change.unsigned_abs() <= last,
            "not sorted by the change: {r:?}"
        );
        last = change.unsigned_abs();
        assert!(
            !r[col("cycles_change")].is_empty(),
            "both sides have cycles"
        );
        got.insert(
            r[col("function")].clone(),
            (
                r[col("instructions_a")].parse().unwrap(),
                r[col("instructions_b")].parse().unwrap(),
                change,
            ),
        );
    }
    let mut want: BTreeMap<String, (u64, u64, i64)> = BTreeMap::new();
    for f in a.instructions.keys().chain(b.instructions.keys()) {
        let x = a.instructions.get(f).copied().unwrap_or(0);
        let y = b.instructions.get(f).copied().unwrap_or(0);
        want.insert(f.clone(), (x, y, y as i64 - x as i64));
    }
    assert_eq!(got, want, "instructions per function in A and B");
    assert!(got["fib"].2 > 0, "fib(20) runs more than fib(18)");
    assert_eq!(got["insert"].1, 0, "no keys: insert never runs");

    // Coverage gained and lost, per function, as the executions' blocks and edges differ.
    let o = ok(&[
        "report",
        "diff",
        s(&outs[0]),
        s(&outs[1]),
        "--format",
        "csv",
        "--coverage",
        "--top",
        "0",
    ]);
    let (header, rows) = parse_csv(&stdout(&o));
    let col = |n: &str| header.iter().position(|h| h == n).unwrap();
    let sum = |what: &str| {
        let mut m: BTreeMap<String, u64> = BTreeMap::new();
        for r in &rows {
            let n: u64 = r[col(what)].parse().unwrap();
            if n > 0 {
                *m.entry(r[col("function")].clone()).or_default() += n;
            }
        }
        m
    };
    assert_eq!(
        sum("blocks_gained"),
        only_in(&b.blocks, &a.blocks, &im),
        "blocks gained"
    );
    assert_eq!(
        sum("blocks_lost"),
        only_in(&a.blocks, &b.blocks, &im),
        "blocks lost"
    );
    assert_eq!(
        sum("edges_gained"),
        only_in(&b.edges, &a.edges, &im),
        "edges gained"
    );
    assert_eq!(
        sum("edges_lost"),
        only_in(&a.edges, &b.edges, &im),
        "edges lost"
    );
    let lost = sum("blocks_lost");
    for f in ["insert", "queens"] {
        assert!(
            lost.get(f).is_some_and(|&n| n > 0),
            "{f}: no blocks lost: {lost:?}"
        );
    }
    // The lines are the program's own.
    assert!(
        rows.iter()
            .any(|r| r[col("function")] == "queens" && r[col("line")].contains("recursion.c:")),
        "queens' lines"
    );

    // A run against itself: no change at all.
    let o = ok(&[
        "report",
        "diff",
        s(&outs[0]),
        s(&outs[0]),
        "--format",
        "json",
    ]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["blocks_gained"], 0);
    assert_eq!(j["edges_lost"], 0);
    assert!(j["rows"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["change"] == 0));

    // The table, and the HTML page's section.
    let o = ok(&["report", "diff", s(&outs[0]), s(&outs[1])]);
    let t = stdout(&o);
    assert!(t.contains("# coverage: blocks"), "{t}");
    let html = tmp.path().join("r.html");
    ok(&[
        "report",
        "html",
        s(&outs[1]),
        "--baseline",
        s(&outs[0]),
        "-o",
        s(&html),
    ]);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("id=\"changes\"") && page.contains(">fib<"),
        "no changes section"
    );
}

/// `go tool pprof ARGS`, or None (after `missing_tool`) without Go.
fn go_pprof(args: &[&str]) -> Option<String> {
    match Command::new("go")
        .arg("tool")
        .arg("pprof")
        .args(args)
        .output()
    {
        Ok(o) => {
            assert!(
                o.status.success(),
                "go tool pprof {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            Some(String::from_utf8_lossy(&o.stdout).into_owned())
        }
        Err(_) => {
            missing_tool("go not found: install golang-go (apt-get install golang-go)");
            None
        }
    }
}

/// `go tool pprof -top` of every function: (the total, function -> flat).
fn pprof_top(profile: &Path, index: &str) -> Option<(u64, BTreeMap<String, u64>)> {
    let text = go_pprof(&[
        "-top",
        "-nodecount=1000000",
        "-nodefraction=0",
        &format!("-sample_index={index}"),
        s(profile),
    ])?;
    // "Showing nodes accounting for 1447668, 100% of 1447668 total"
    let total = text
        .lines()
        .find_map(|l| l.strip_prefix("Showing nodes accounting for "))
        .and_then(|l| l.split(" of ").nth(1))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no total in {text}"))
        .parse()
        .unwrap();
    let mut flat = BTreeMap::new();
    let rows = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"));
    for l in rows.skip(1) {
        let v: Vec<&str> = l.split_whitespace().collect();
        let n: u64 = v[0].parse().unwrap();
        if n > 0 {
            flat.insert(v[5..].join(" "), n);
        }
    }
    Some((total, flat))
}

#[test]
fn pprof_profile_read_by_go_tool_pprof_says_what_hotspots_say() {
    let (tmp, out) = decoded("recursion");
    let profile = tmp.path().join("p.pb.gz");
    ok(&["report", "pprof", s(&out), "-o", s(&profile)]);
    let gz = std::fs::read(&profile).unwrap();
    assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip");
    let Some((total, flat)) = pprof_top(&profile, "instructions") else {
        return;
    };
    // Every function's flat instructions, and the total, are the hotspots'.
    let (header, rows, _) = hotspots_csv(&out);
    let col = |n: &str| header.iter().position(|h| h == n).unwrap();
    let want: BTreeMap<String, u64> = rows
        .iter()
        .map(|r| {
            (
                r[col("function")].clone(),
                r[col("instructions")].parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(total, want.values().sum::<u64>());
    assert_eq!(flat, want, "flat instructions per function");
    // Cycles: the flame graph's by cycles (a stack's cycles are those of its rows).
    let (cycles_total, _) = pprof_top(&profile, "cycles").unwrap();
    let o = ok(&[
        "report",
        "flamegraph",
        s(&out),
        "--weight",
        "cycles",
        "--folded",
        s(&tmp.path().join("c.folded")),
    ]);
    assert!(
        stderr(&o).starts_with(&format!(
            "{} cycles",
            tracemill_reports::util::group(cycles_total)
        )),
        "{} against {}",
        stderr(&o),
        cycles_total
    );

    // -raw: one sample per folded stack, in the flame graph's order, and the tables.
    let raw = go_pprof(&["-raw", s(&profile)]).unwrap();
    let folded_file = tmp.path().join("i.folded");
    ok(&["report", "flamegraph", s(&out), "--folded", s(&folded_file)]);
    let folded: Vec<(String, u64)> = std::fs::read_to_string(&folded_file)
        .unwrap()
        .lines()
        .map(|l| {
            let (st, w) = l.rsplit_once(' ').unwrap();
            (st.to_string(), w.parse().unwrap())
        })
        .collect();
    let mut names: HashMap<u64, String> = HashMap::new();
    for l in raw.lines().skip_while(|l| *l != "Locations").skip(1) {
        if l == "Mappings" {
            break;
        }
        // "    86: 0x401520 M=1 main datasets/programs/recursion.c:87 s=87"
        let v: Vec<&str> = l.split_whitespace().collect();
        names.insert(
            v[0].trim_end_matches(':').parse().unwrap(),
            v[3].to_string(),
        );
    }
    let samples: Vec<(String, u64)> = raw
        .lines()
        .skip_while(|l| !l.starts_with("instructions/count"))
        .skip(1)
        .take_while(|l| l.contains(": "))
        .map(|l| {
            let (vals, locs) = l.split_once(": ").unwrap();
            let ins: u64 = vals.split_whitespace().next().unwrap().parse().unwrap();
            let mut frames: Vec<&str> = locs
                .split_whitespace()
                .map(|id| names[&id.parse::<u64>().unwrap()].as_str())
                .collect();
            frames.reverse();
            (frames.join(";"), ins)
        })
        .collect();
    assert_eq!(samples, folded, "samples against the folded stacks");
    // Functions have their file and first line (DWARF), the mapping the image's build-id.
    let im = image("recursion");
    let main = im.functions().iter().find(|f| f.name == "main").unwrap();
    let line = im.line(main.start).unwrap();
    assert!(
        raw.lines()
            .any(|l| l.contains(&format!("{:#x} M=1 main ", main.start))
                && l.contains(&format!("{}:{}", line.file, line.line))),
        "main's location: {raw}"
    );
    let build_id = im.build_id.clone().unwrap();
    assert!(
        raw.lines()
            .skip_while(|l| *l != "Mappings")
            .any(|l| l.contains(&build_id) && l.contains("[FN][FL][LN]")),
        "the mapping's build-id {build_id}"
    );
}
