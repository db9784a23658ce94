//! `report diff` of two runs of one program: what the runs changed.

use std::collections::BTreeMap;

use crate::common::*;
use crate::setup::*;
use tracemill_reports::symbols::{ImageSpec, ImageSymbols};

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
