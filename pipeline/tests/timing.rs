//! Timing against the truth: cycle counts exact where a row's own packet carries a CYC
//! (up to E6's documented lag), the TSC of every row (rows next to overflows and disabled
//! stretches included) within one MTC period with cycle-accurate timing and two without,
//! nothing going backwards, one timing row per timing packet, and the same answer for any
//! chunk size.

mod common;

use common::*;
use tracemill_decode::chunk::Decoded;
use tracemill_decode::rows::{BranchColumns, EventRow};
use tracemill_decode::rtit::config::{ctl, TraceConfig};
use tracemill_input::bundle::Bundle;
use tracemill_schemas::EventKind;

/// Truth row index of each decoded row (decoded rows are the truth's non-lost rows).
fn provable_index(t: &Truth) -> Vec<usize> {
    (0..t.rows.len()).filter(|&i| !t.lost[i]).collect()
}

fn never_backwards(name: &str, rows: &BranchColumns) {
    let mut c = 0;
    let mut t = 0;
    for i in 0..rows.len() {
        if let Some(v) = rows.cycles.get(i) {
            assert!(v >= c, "{name}: cycles go back at row {i}");
            c = v;
        }
        if let Some(v) = rows.tsc.get(i) {
            assert!(v >= t, "{name}: tsc goes back at row {i}");
            t = v;
        }
    }
}

/// Rows this close to a gap (in rows) count as next to it.
const NEAR: u64 = 8;

/// Events that start or end a gap or a disabled stretch.
fn is_gap(k: EventKind) -> bool {
    matches!(
        k,
        EventKind::Overflow
            | EventKind::Error
            | EventKind::Disable
            | EventKind::Enable
            | EventKind::Resync
            | EventKind::TraceStop
    )
}

/// Per-row TSC errors against the truth.
struct TscErrors {
    rows: u64,
    median: u64,
    /// (error, decoded row, where the row lies relative to gaps).
    worst: (u64, usize, String),
    worst_near_gap: u64,
}

fn tsc_errors(t: &Truth, idx: &[usize], d: &Decoded) -> TscErrors {
    let gaps: Vec<&EventRow> = d.events.iter().filter(|e| is_gap(e.kind)).collect();
    let mut errs = Vec::new();
    let mut worst = (0, 0, String::new());
    let mut worst_near_gap = 0;
    let mut g = 0;
    for (k, &i) in idx.iter().enumerate() {
        let (Some(got), Some(want)) = (d.rows.tsc.get(k), t.rows.tsc.get(i)) else {
            continue;
        };
        // Gap events with seq <= k are before row k.
        while g < gaps.len() && gaps[g].seq <= k as u64 {
            g += 1;
        }
        let before = g.checked_sub(1).map(|j| gaps[j]);
        let after = gaps.get(g).copied();
        let since = before.map(|e| k as u64 + 1 - e.seq);
        let until = after.map(|e| e.seq - k as u64);
        let err = got.abs_diff(want);
        errs.push(err);
        let near = since.is_some_and(|n| n <= NEAR) || until.is_some_and(|n| n <= NEAR);
        if near {
            worst_near_gap = worst_near_gap.max(err);
        }
        if err > worst.0 {
            let side = |e: Option<&EventRow>, n: Option<u64>, w: &str| match (e, n) {
                (Some(e), Some(n)) => format!("{n} rows {w} {:?}", e.kind),
                _ => format!("no gap {w}"),
            };
            worst = (
                err,
                k,
                format!(
                    "got {got:#x}, truth {want:#x}; {}, {}",
                    side(before, since, "after"),
                    side(after, until, "before")
                ),
            );
        }
    }
    let n = errs.len();
    let median = if n == 0 {
        0
    } else {
        *errs.select_nth_unstable(n / 2).1
    };
    TscErrors {
        rows: n as u64,
        median,
        worst,
        worst_near_gap,
    }
}

#[test]
fn timing_matches_the_truth() {
    let mut checked_cycles = 0;
    let mut checked_tsc = 0;
    for dir in bundles() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let t = truth(&dir);
        if t.summary.ring {
            continue;
        }
        let b = Bundle::open(&dir, None, &[]).unwrap();
        let cfg = TraceConfig::from_ctl(b.manifest.rtit_ctl);
        let d = decode(&b, u64::MAX);
        never_backwards(&name, &d.rows);
        let idx = provable_index(&t);
        assert_eq!(idx.len(), d.rows.len(), "{name}");

        // One timing row per timing packet.
        let stats = tracemill::dump::stats(&b.stream(), &cfg);
        let packets: u64 = ["mtc", "sts", "cyc", "fup.pcc"]
            .iter()
            .map(|k| stats.by_type.get(k).copied().unwrap_or(0))
            .sum();
        assert_eq!(d.timing_rows.len() as u64, packets, "{name}: timing rows");

        if cfg.cycle_acc {
            // Every row's cycles, interpolated ones included (reported, not bounded: a
            // stall between two CYCs is spread over the rows between them).
            let (mut worst, mut at) = (0, 0);
            for (k, &i) in idx.iter().enumerate() {
                if let (Some(got), Some(want)) = (d.rows.cycles.get(k), t.rows.cycles.get(i)) {
                    if got.abs_diff(want) > worst {
                        (worst, at) = (got.abs_diff(want), k);
                    }
                }
            }
            let near: Vec<_> = d
                .events
                .iter()
                .filter(|e| {
                    is_gap(e.kind) && e.seq + NEAR >= at as u64 && e.seq <= at as u64 + NEAR
                })
                .map(|e| (e.kind, e.seq))
                .collect();
            let exact = t.cyc_exact[idx[at]];
            eprintln!("{name}: worst cycles error {worst} at row {at} (exact {exact}; gaps within {NEAR} rows: {near:?})");
            for (k, &i) in idx.iter().enumerate() {
                let got = d.rows.cycles.get(k).expect("cycles in cycle-accurate mode");
                let want = t.rows.cycles.get(i).unwrap();
                if t.cyc_exact[i] {
                    // E6: a zero payload may stand for 1, so the sum may lag by one per
                    // zero payload up to and including this row's own CYC.
                    let lag = t.e6_zero_before.get(i + 1).copied().unwrap_or(u32::MAX) as u64;
                    assert!(
                        got <= want && want - got <= lag,
                        "{name}: row {k} (truth {i}) cycles {got}, truth {want}, lag allowed {lag}"
                    );
                    checked_cycles += 1;
                }
            }
        } else {
            assert!(d.rows.cycles.all_null(), "{name}: cycles without Cycle_Acc");
        }

        if cfg.mtc_en && cfg.sts_en {
            // Every row, rows next to gaps included. With cycle-accurate timing, CYC dates
            // rows to the cycle and MTC/STS only keep the clock honest: within one MTC
            // period. With MTC alone, rows fall between MTCs by instruction count, and an
            // MTC can leave before the TNT packet of branches that retired before it (it
            // goes out at once, a TNT packet only when full): within two periods. Time
            // spent in an overflow or a disabled stretch belongs to no row, so it must not
            // show in the rows beside it.
            let period = if cfg.cycle_acc { 1u64 } else { 2 } << cfg.mtc_shift();
            let e = tsc_errors(&t, &idx, &d);
            eprintln!(
                "{name}: tsc error over {} rows: median {}, worst {} at row {} ({}); \
                 worst within {NEAR} rows of a gap {} (bound {period}, MTC period {}, \
                 cycle-accurate {})",
                e.rows,
                e.median,
                e.worst.0,
                e.worst.1,
                e.worst.2,
                e.worst_near_gap,
                1u64 << cfg.mtc_shift(),
                cfg.cycle_acc
            );
            assert!(
                e.worst.0 <= period,
                "{name}: worst tsc error {} ticks > {period} at row {} ({})",
                e.worst.0,
                e.worst.1,
                e.worst.2
            );
            checked_tsc += e.rows;
        }
        if b.manifest.rtit_ctl & ctl::MTC_EN == 0 && !cfg.sts_en {
            assert!(d.rows.tsc.all_null(), "{name}: tsc with no MTC or STS");
        }

        for chunk in [1, 4096] {
            let p = decode(&b, chunk);
            let first = |a: &BranchColumns, b: &BranchColumns| {
                (0..a.len())
                    .find(|&i| a.cycles.get(i) != b.cycles.get(i) || a.tsc.get(i) != b.tsc.get(i))
            };
            assert_eq!(
                first(&d.rows, &p.rows),
                None,
                "{name}: first row whose timing differs at chunk size {chunk}"
            );
            assert!(
                d.timing_rows == p.timing_rows,
                "{name}: timing table differs at chunk size {chunk}"
            );
        }
    }
    assert!(checked_cycles > 100_000, "{checked_cycles}");
    assert!(checked_tsc > 100_000, "{checked_tsc}");
}

/// Every event of a decode is timed as perf times the samples it makes of the trace: the
/// TSC of the last timing packet before it (null before the first), across pieces, for
/// every thread count and chunk size.
#[test]
fn events_carry_the_tsc_of_the_last_timing_packet_before_them() {
    for name in ["recursion", "gaps-mtc", "busybox-sort"] {
        let dir = samples_dir().join(name);
        let tmp = tempfile::tempdir().unwrap();
        for (k, args) in [
            ["-j", "1", "--chunk-size", "0"],
            ["-j", "2", "--chunk-size", "4096"],
        ]
        .iter()
        .enumerate()
        {
            let out = tmp.path().join(format!("o{k}"));
            let mut a = vec![
                "decode",
                dir.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
                "-q",
            ];
            a.extend(args);
            ok(&a);
            let timing = u64_pairs(&out.join("timing.parquet"), ["offset", "tsc"]);
            let events = u64_pairs(&out.join("events.parquet"), ["offset", "tsc"]);
            assert!(events.iter().filter(|e| e.1.is_some()).count() > events.len() / 2);
            for (i, &(offset, tsc)) in events.iter().enumerate() {
                let before = timing.partition_point(|t| t.0 < offset);
                let want = timing[..before].iter().rev().find_map(|t| t.1);
                assert_eq!(
                    tsc, want,
                    "{name} {args:?}: event {i} at offset {offset:#x}"
                );
            }
        }
    }
}
