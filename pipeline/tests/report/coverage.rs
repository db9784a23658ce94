//! `report coverage`: drcov (read by a reader written here from the published format) and
//! lcov (read back by genhtml).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

use crate::common::*;
use crate::setup::*;

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
