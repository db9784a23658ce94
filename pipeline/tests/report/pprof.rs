//! `report pprof`, read by `go tool pprof`: what hotspots say.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

use crate::common::*;
use crate::setup::*;

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
