//! Intel PT time against the execution's clocks: walks over busybox encoded with the
//! timing packets of [`tracemill_datasets::pt_timing`] (TSC and TMA in every PSB+ with
//! CBR, MTC, CYC), decoded by tracemill; every row's `tsc` must be the TSC at which its
//! branch retired, within a bound that follows from what the packets tell
//! ([`bounds`]):
//!
//! - a row lies between the packets that decide the rows around it. Timing packets date
//!   the first row of the packet after them or earlier (a CYC dates the packet after it,
//!   a TNT's CYC its first branch, an MTC may go out while a TNT fills), and the decoder
//!   spreads them over the rows that packet decides (with the direct jumps and calls
//!   after them, which have no packet of their own), by instruction counts. So a row's
//!   time is known to lie between the start of the previous packet's rows and the first
//!   row of the next packet: that stretch of true time is the row's *window*;
//! - without CYC, the decoder knows the time only at TSC and MTC packets: one MTC period
//!   (P × 2^N TSC ticks) more; without MTC either, the time between the TSCs around the
//!   row (every PSB+ has one);
//! - cycles become TSC ticks at a ratio with 8 fraction bits (libipt's `pt_tcal`
//!   arithmetic, which tracemill's clock follows): up to 1/256 of a tick per cycle, so
//!   1/128 of the TSC ticks since the last TSC or MTC packet before the window's first
//!   row's packet (the core runs slower than the TSC here), plus a tick of rounding.
//!
//! Decoded sequentially and cut at every PSB, the times are the same.

use std::path::Path;

use tracemill_datasets::exec::synthetic::{Code, WalkConfig};
use tracemill_datasets::exec::Execution;
use tracemill_datasets::pt_encode::{encode_execution, PtOptions, PtOutput};
use tracemill_datasets::pt_timing::PtTiming;
use tracemill_decode::chunk::{decode_all, Decoded, Input};
use tracemill_decode::image::ImageSet;
use tracemill_decode::pt::PtConfig;
use tracemill_decode::rows::BranchColumns;
use tracemill_decode::stream::TraceStream;
use tracemill_schemas::{EventKind, TimingKind};

fn busybox() -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/busybox-sort/images/busybox");
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn images(elf: &[u8]) -> ImageSet<'_> {
    let mut images = ImageSet::new();
    images.add_elf("busybox", elf, None, None).unwrap();
    images
}

fn walk(elf: &[u8], seed: u64, steps: u64) -> Execution {
    let mut cfg = WalkConfig::new(seed, steps);
    cfg.interrupt_rate = 1.0 / 500.0;
    Code::from_elf("busybox", elf).unwrap().execution(&cfg)
}

fn decode(images: &ImageSet<'_>, out: &PtOutput, t: &PtTiming, chunk: u64) -> Decoded {
    let stream = TraceStream::linear(&out.bytes);
    let mut cfg = PtConfig::default();
    t.configure(&mut cfg);
    decode_all(&Input::pt(&stream, images, cfg), chunk)
}

/// A row's bounds, in TSC ticks: its `window` (the module doc) and the wider one that
/// holds today, `held`: up to the first row of the packet after the next. The timeline
/// spreads two or more timing packets that precede a packet from the end of the row
/// before that packet's rows (`timing::Timeline`, "m of them evenly from its start"), so
/// the first of them, which dates that packet's first row, lands on the row before: a
/// TIP's row then takes the time of the CYC and MTC before the next TNT.
struct Bound {
    window: u64,
    held: u64,
}

/// Each row's bound (see the module doc), from the truth's rows and the decode's
/// `timing` table (the TSC at each TSC and MTC packet, which those packets state).
fn bounds(t: &PtTiming, want: &BranchColumns, d: &Decoded) -> Vec<Bound> {
    let n = want.len();
    let tsc = |i: usize| want.row(i).tsc.expect("the truth has every row's TSC");
    // Where each packet's rows begin and end.
    let (mut run_start, mut run_end) = (vec![0; n], vec![0; n]);
    for i in 0..n {
        run_start[i] = if i > 0 && want.offset[i - 1] == want.offset[i] {
            run_start[i - 1]
        } else {
            i
        };
    }
    for i in (0..n).rev() {
        run_end[i] = if i + 1 < n && want.offset[i + 1] == want.offset[i] {
            run_end[i + 1]
        } else {
            i
        };
    }
    let anchors: Vec<(u64, u64)> = (0..d.timing_rows.len())
        .map(|k| d.timing_rows.row(k))
        .filter(|r| matches!(r.kind, TimingKind::Tsc | TimingKind::Mtc))
        .filter_map(|r| Some((r.offset, r.tsc?)))
        .collect();
    let (mut a, mut b) = (0, 0);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        // From the end of the packet before the previous one to the next packet's first row.
        let prev = run_start[i].checked_sub(1).map(|k| run_start[k]);
        let lo = prev.and_then(|k| k.checked_sub(1)).map_or(t.tsc_start, tsc);
        let next = (run_end[i] + 1).min(n - 1);
        let hi = tsc(next);
        let after_next = tsc((run_end[next] + 1).min(n - 1));
        // The ticks since the last TSC or MTC packet before the packet of the window's
        // first row (the rows the window spans are timed from either side).
        let from = want.offset[prev.and_then(|k| k.checked_sub(1)).unwrap_or(0)];
        while a + 1 < anchors.len() && anchors[a + 1].0 < from {
            a += 1;
        }
        let since = anchors
            .get(a)
            .filter(|x| x.0 < from)
            .map_or(after_next - t.tsc_start, |x| after_next.saturating_sub(x.1));
        while b < anchors.len() && anchors[b].0 <= want.offset[i] {
            b += 1;
        }
        let clock = match (t.cyc, t.mtc_period()) {
            (true, _) => 0,
            (false, Some(p)) => p,
            // Between the TSCs around the row (a stretch between disables with no TSC of
            // its own takes the next one's value, docs/timing.md).
            (false, None) => {
                let before = anchors.get(a).map_or(t.tsc_start, |x| x.1);
                let after = anchors.get(b).map_or(tsc(n - 1), |x| x.1);
                after - before
            }
        };
        let slack = clock + since / 128 + 1;
        out.push(Bound {
            window: hi - lo + slack,
            held: after_next - lo + slack,
        });
    }
    out
}

/// Encodes, decodes, and checks every row's `tsc` against the truth within its bound.
fn check(what: &str, elf: &[u8], exec: &Execution, t: PtTiming) {
    let images = images(elf);
    let o = PtOptions {
        timing: Some(t),
        ..PtOptions::default()
    };
    let out = encode_execution(&images, &o, exec.entry, exec.steps.iter().copied());
    let d = decode(&images, &out, &t, u64::MAX);
    let errors: Vec<_> = d
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Error)
        .take(3)
        .collect();
    assert!(errors.is_empty(), "{what}: {errors:?}");
    let want = out.truth.provable();
    assert_eq!(want.len(), d.rows.len(), "{what}: rows");
    let bounds = bounds(&t, &want, &d);
    let (mut worst, mut sum, mut outside_window) = (0u64, 0u128, 0usize);
    for (i, bound) in bounds.iter().enumerate() {
        let (w, g) = (want.row(i), d.rows.row(i));
        let flow = |mut r: tracemill_decode::rows::BranchRow| {
            (r.tsc, r.cycles) = (None, None);
            r
        };
        assert_eq!(flow(w), flow(g), "{what}: row {i}");
        let truth = w.tsc.expect("the truth has every row's TSC");
        let got = g
            .tsc
            .unwrap_or_else(|| panic!("{what}: row {i} has no tsc"));
        let err = truth.abs_diff(got);
        assert!(
            err <= bound.held,
            "{what}: row {i} at {:#x} (offset {:#x}): tsc {got}, truth {truth}: {err} ticks \
             off, bound {}",
            w.ip,
            w.offset,
            bound.held
        );
        worst = worst.max(err);
        outside_window += (err > bound.window) as usize;
        sum += err as u128;
    }
    eprintln!(
        "{what}: {} rows, {} bytes; error worst {worst}, mean {:.1} ticks; {outside_window} \
         rows outside their window; {:?}",
        want.len(),
        out.bytes.len(),
        sum as f64 / want.len().max(1) as f64,
        out.summary.packets_by_type
    );
    // Cut at every PSB: the same times.
    let par = decode(&images, &out, &t, 1);
    assert_eq!(d.rows, par.rows, "{what}: chunked");
}

#[test]
fn every_row_is_timed_within_bounds_for_mtc_and_cyc_settings() {
    let elf = busybox();
    let exec = walk(&elf, 7, 60_000);
    let base = PtTiming::default();
    for (what, t) in [
        ("tsc, mtc 3, cyc", base),
        (
            "tsc, mtc 0, cyc",
            PtTiming {
                mtc_freq: Some(0),
                ..base
            },
        ),
        (
            "tsc, cyc, no mtc",
            PtTiming {
                mtc_freq: None,
                ..base
            },
        ),
        ("tsc, mtc 3, no cyc", PtTiming { cyc: false, ..base }),
        (
            "tsc, no mtc, no cyc",
            PtTiming {
                cyc: false,
                mtc_freq: None,
                ..base
            },
        ),
        (
            "core at the TSC's ratio, mtc 3, cyc",
            PtTiming {
                core_ratio: base.nom_ratio,
                ..base
            },
        ),
        (
            "tsc, mtc 6, no cyc",
            PtTiming {
                cyc: false,
                mtc_freq: Some(6),
                ..base
            },
        ),
    ] {
        check(what, &elf, &exec, t);
    }
}

/// The traces libipt's `ptxed --time` decoded (`datasets/fixtures/pt-timing/`, its
/// README says how): a walk over busybox with interrupts and syscalls, per setting.
fn ptxed_cases() -> Vec<(&'static str, PtTiming)> {
    let base = PtTiming::default();
    vec![
        ("mtc3-cyc", base),
        ("mtc3", PtTiming { cyc: false, ..base }),
        (
            "cyc",
            PtTiming {
                mtc_freq: None,
                ..base
            },
        ),
    ]
}

fn ptxed_fixtures() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/pt-timing")
}

/// libipt's `ptxed --no-inst --time` output: each instruction's time and address, in
/// order (event lines in brackets left out).
fn ptxed_lines(text: &str) -> Vec<(u64, u64)> {
    text.lines()
        .filter(|l| !l.starts_with('['))
        .map(|l| {
            let mut w = l.split_whitespace();
            let mut hex = || u64::from_str_radix(w.next().expect("two words"), 16).unwrap();
            (hex(), hex())
        })
        .collect()
}

#[test]
fn every_row_agrees_with_ptxed_time_within_bounds() {
    let elf = busybox();
    let images = images(&elf);
    let exec = walk(&elf, 11, 3000);
    let write = std::env::var_os("TRACEMILL_WRITE_PT_TIMING_FIXTURES").is_some();
    for (name, t) in ptxed_cases() {
        let dir = ptxed_fixtures().join(name);
        let o = PtOptions {
            timing: Some(t),
            psb_every: 1024,
            ..PtOptions::default()
        };
        let out = encode_execution(&images, &o, exec.entry, exec.steps.iter().copied());
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("trace.pt"), &out.bytes).unwrap();
            continue;
        }
        let committed = std::fs::read(dir.join("trace.pt")).unwrap();
        assert!(
            committed == out.bytes,
            "{name}: the encoder no longer writes the committed trace; write it again and \
             run ptxed on it (datasets/fixtures/pt-timing/README.md)"
        );
        let text = zstd::decode_all(&*std::fs::read(dir.join("ptxed.txt.zst")).unwrap()).unwrap();
        let ptxed = ptxed_lines(std::str::from_utf8(&text).unwrap());
        let d = decode(&images, &out, &t, u64::MAX);
        let want = out.truth.provable();
        assert_eq!(want.len(), d.rows.len(), "{name}: rows");
        let bounds = bounds(&t, &want, &d);
        // libipt's arithmetic is tracemill's (pt/time.rs): each time ptxed shows is the
        // estimate at one of the trace's timing packets, as the `timing` table has it.
        let clock: std::collections::BTreeSet<u64> = (0..d.timing_rows.len())
            .filter_map(|k| d.timing_rows.row(k).tsc)
            .collect();
        for &(time, ip) in &ptxed {
            assert!(
                clock.contains(&time),
                "{name}: ptxed's time {time:#x} at {ip:#x} is no timing packet's estimate"
            );
        }
        let enables: Vec<u64> = d
            .events
            .iter()
            .filter(|e| e.kind == EventKind::Enable)
            .map(|e| e.seq)
            .collect();
        let mut at = 0usize;
        let (mut worst, mut sum, mut lag) = (0u64, 0u128, 0u64);
        for (i, bound) in bounds.iter().enumerate() {
            let r = d.rows.row(i);
            // The row's branch is the instruction its instruction count ends at.
            at += r.insns as usize;
            let (time, ip) = ptxed[at - 1];
            assert_eq!(
                ip,
                r.ip,
                "{name}: row {i} is ptxed's instruction {}",
                at - 1
            );
            // ptxed's time is libipt's estimate at the last packet its decoder read for
            // the instruction: not after the branch retired, not before tracing last
            // resumed (after the row before the enable).
            let truth = want.row(i).tsc.unwrap();
            let s = enables.iter().rev().find(|&&s| s <= i as u64).copied();
            let resumed = match s {
                Some(s) if s > 0 => want.row(s as usize - 1).tsc.unwrap(),
                _ => t.tsc_start,
            };
            let slack = bound.held;
            assert!(
                time + slack >= resumed && time <= truth + slack,
                "{name}: row {i} at {ip:#x}: ptxed {time} outside [{resumed}, {truth}] \
                 by more than {slack}"
            );
            lag = lag.max(truth.saturating_sub(time));
            // Ours is within its bound of the truth: the two differ by at most that and
            // ptxed's lag.
            let got = r.tsc.expect("every row is timed");
            let err = got.abs_diff(time);
            let bound = truth - resumed.min(truth) + 2 * slack;
            assert!(
                err <= bound,
                "{name}: row {i} at {ip:#x}: tsc {got}, ptxed {time}: {err} ticks apart, \
                 bound {bound}"
            );
            worst = worst.max(err);
            sum += err as u128;
        }
        eprintln!(
            "{name}: {} rows, {} distinct ptxed times; tsc from ptxed's: worst {worst}, \
             mean {:.1} ticks; ptxed behind the truth by up to {lag}",
            d.rows.len(),
            ptxed
                .iter()
                .map(|p| p.0)
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            sum as f64 / d.rows.len().max(1) as f64
        );
    }
    assert!(!write, "fixtures written: run ptxed on them");
}
