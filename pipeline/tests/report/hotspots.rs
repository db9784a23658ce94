//! `report hotspots`: instructions per function equal the truth; lines and blocks add up.

use std::collections::BTreeMap;

use crate::common::*;
use crate::setup::*;
use tracemill_reports::symbols::ImageSymbols;

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
