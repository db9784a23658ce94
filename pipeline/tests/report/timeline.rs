//! `report timeline`: Chrome trace-event JSON.

use crate::common::*;
use crate::setup::*;

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
