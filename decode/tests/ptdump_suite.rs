//! libipt's test suite against our listing: every expected ptdump output in
//! `datasets/libipt-ptt` (479, from 230 `.ptt` cases) is compared with
//! `tracemill_decode::pt::listing::ptdump` run with that case's ptdump options, the way
//! libipt's test script compares (`diff -ub`: the amount of white space does not
//! matter). The cases that do not match must be exactly those listed, with a reason, in
//! `datasets/libipt-ptt/ptdump-known-failures.txt`: a new failure fails the test, and
//! so does a listed case that now passes (the list only shrinks).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tracemill_decode::pt::listing::{ptdump, ListingOptions};
use tracemill_decode::stream::TraceStream;

fn suite() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/libipt-ptt")
}

/// One expected output: its case, its file, and ptdump's option words for it.
struct Check {
    case: String,
    exp: String,
    args: Vec<String>,
}

/// The checks, rebuilt from index.json as libipt's script/test.bash builds the
/// command lines (`ptdump [--cpu F/M] <opt:ptdump words> <case>.pt`;
/// `datasets/libipt-ptt/import.py` checked this against every recorded command line).
fn checks() -> Vec<Check> {
    let text = std::fs::read_to_string(suite().join("index.json")).expect("index.json");
    let index: serde_json::Value = serde_json::from_str(&text).expect("index.json parses");
    let words = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap().to_string())
            .collect()
    };
    let mut out = Vec::new();
    for c in index["cases"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap().to_string();
        let opts = words(&c["ptdump"]);
        let cpus = words(&c["cpus"]);
        if cpus.is_empty() {
            out.push(Check {
                exp: format!("{name}-ptdump.exp"),
                case: name.clone(),
                args: opts.clone(),
            });
        }
        for cpu in cpus {
            let mut args = vec!["--cpu".to_string(), cpu.clone()];
            args.extend(opts.iter().cloned());
            out.push(Check {
                exp: format!("{name}-ptdump-cpu_{}.exp", cpu.replace('/', "_")),
                case: name.clone(),
                args,
            });
        }
    }
    out
}

/// Lines as `diff -b` compares them: a run of white space is one space, and white
/// space at the end of a line does not count (nor does a missing last newline).
fn normalized(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            let mut s = String::with_capacity(l.len());
            let mut space = false;
            for ch in l.chars() {
                if ch.is_ascii_whitespace() {
                    space = true;
                } else {
                    if space {
                        s.push(' ');
                    }
                    space = false;
                    s.push(ch);
                }
            }
            s
        })
        .collect()
}

/// `None` when the listing matches, else the first difference.
fn run(c: &Check) -> Option<String> {
    let dir = suite().join(&c.case);
    let trace = std::fs::read(dir.join(format!("{}.pt", c.case))).expect("trace");
    let expected = std::fs::read_to_string(dir.join(&c.exp)).expect("expected output");
    let (opts, cfg) = match ListingOptions::from_ptdump_args(&c.args) {
        Ok(x) => x,
        Err(e) => return Some(format!("options {:?}: {e}", c.args)),
    };
    let mut got = String::new();
    ptdump(&TraceStream::linear(&trace), &opts, &cfg, &mut got).unwrap();
    let (want, have) = (normalized(&expected), normalized(&got));
    common::first_difference(&want, &have)
}

fn known_failures() -> BTreeMap<String, String> {
    common::known_failures(&suite(), "ptdump-known-failures.txt")
}

#[test]
fn libipt_ptdump_suite() {
    let checks = checks();
    assert_eq!(checks.len(), 479, "expected ptdump outputs in the index");
    let known = known_failures();
    let mut failed = BTreeMap::new();
    for c in &checks {
        if let Some(why) = run(c) {
            failed.insert(c.exp.clone(), why);
        }
    }
    let passed = checks.len() - failed.len();
    println!(
        "libipt ptdump suite: {passed} of {} expected outputs match ({} known failures)",
        checks.len(),
        known.len()
    );
    let new: Vec<String> = failed
        .iter()
        .filter(|(f, _)| !known.contains_key(*f))
        .map(|(f, why)| format!("  {f}: {why}"))
        .collect();
    let fixed: Vec<&String> = known.keys().filter(|f| !failed.contains_key(*f)).collect();
    assert!(
        new.is_empty() && fixed.is_empty(),
        "failing but not listed in ptdump-known-failures.txt:\n{}\nlisted but now passing \
         (remove them from the list):\n  {fixed:?}",
        new.join("\n")
    );
}

/// The comparison itself can fail: a changed payload, a missing line, a line too many,
/// white space where there was none.
#[test]
fn the_comparison_sees_differences_but_not_white_space() {
    let a = "0000000000000000  psb\n0000000000000010  tnt.8      !.!\n";
    let same = "0000000000000000 psb   \n0000000000000010\ttnt.8 !.!";
    assert_eq!(normalized(a), normalized(same));
    let other = "0000000000000000  psb\n0000000000000010  tnt.8 !!!\n";
    assert_ne!(normalized(a), normalized(other));
    assert_ne!(normalized(a), normalized("0000000000000000  psb\n"));
    assert_ne!(normalized(a), normalized(&format!("{a}[0: x]\n")));
    assert_ne!(normalized(" psb"), normalized("psb"));
}
