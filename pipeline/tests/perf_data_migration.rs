//! A thread that migrates between CPUs in the middle of its calls: `tracemill report`
//! walks its rows in time order, not CPU by CPU as the `branches` table lists them.
//!
//! busybox `sort` runs under qemu and its execution is cut in three right after direct
//! calls, each part encoded as Intel PT on its own (with a TSC in every PSB+) and laid
//! out as `perf record -e intel_pt//u` does with per-CPU buffers: thread 4243 runs the
//! first part on CPU 0, the second on CPU 1, the third on CPU 0 again. The table has CPU
//! 0's rows first, so in table order the third part would come before the second: the
//! calls of the first part made there return on CPU 1, and those of the second on CPU 0.
//!
//! - With nothing run on CPU 0 between the first and the third part, their rows follow
//!   each other in the table (one run of rows with a hole in time where the thread ran on
//!   CPU 1).
//! - With another thread (4242) run on CPU 0 in between.
//!
//! Either way the thread's folded stacks are those of the whole execution decoded on one
//! CPU, with as many mismatched returns (none).

mod common;
use common::{real_program_tools, sort_input, BUSYBOX};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use tracemill_datasets::exec::{qemu, Step};
use tracemill_datasets::perf_data::{intel_pt_two_threads, CpuStream, PtRecording};
use tracemill_datasets::pt_encode::{encode_execution, PtOptions, PtTsc};
use tracemill_decode::image::ImageSet;
use tracemill_decode::insn::InsnClass;

const PID: u32 = 4242;
/// The thread that migrates.
const TID: u32 = PID + 1;

/// A part of the execution encoded: its trace, and its instructions.
struct Part {
    pt: Vec<u8>,
    instructions: u64,
}

/// The index just after the first direct call at or after `from`: a cut there leaves the
/// call on one side and the callee's return on the other.
fn after_a_call(steps: &[Step], from: usize) -> usize {
    (from..steps.len())
        .find(|&i| {
            matches!(
                steps[i],
                Step::Branch {
                    class: InsnClass::Call,
                    ..
                }
            )
        })
        .map(|i| i + 1)
        .expect("a call after the cut")
}

/// Where execution goes on after step `i`.
fn next_of(steps: &[Step], i: usize) -> u64 {
    match steps[i] {
        Step::Branch { next, .. } => next,
        ref s => panic!("a cut after {s:?}"),
    }
}

/// `tracemill ARGS`: exit code, stderr.
fn tracemill(args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_tracemill"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The recording decoded into `dir/NAME` and its flame graph: the folded stacks under
/// each thread's root (stack without the root, weight), and the mismatched returns.
fn flame(dir: &Path, name: &str, r: &PtRecording) -> (BTreeMap<String, Vec<String>>, u64) {
    let file = dir.join(format!("{name}.data"));
    std::fs::write(&file, intel_pt_two_threads(r).unwrap().bytes).unwrap();
    let out = dir.join(name);
    let (code, err) = tracemill(&[
        "decode",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "-q",
    ]);
    assert_eq!(code, Some(0), "{name}: decode: {err}");
    assert!(!err.contains("warning"), "{name}: decode: {err}");
    let folded = dir.join(format!("{name}.folded"));
    let (code, err) = tracemill(&[
        "report",
        "flamegraph",
        out.to_str().unwrap(),
        "--folded",
        folded.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{name}: flamegraph: {err}");
    // "... (N gaps, M mismatched returns, ...)"
    let mismatched = err
        .split(" mismatched returns")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.replace(',', "").parse().ok())
        .unwrap_or_else(|| panic!("{name}: no count of mismatched returns in {err}"));
    let mut by_root: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in std::fs::read_to_string(&folded).unwrap().lines() {
        let (root, rest) = line.split_once(';').unwrap_or((line, ""));
        let root = root.rsplit_once(' ').map_or(root, |(r, _)| r);
        by_root
            .entry(root.to_string())
            .or_default()
            .push(rest.to_string());
    }
    for lines in by_root.values_mut() {
        lines.sort();
    }
    (by_root, mismatched)
}

#[test]
fn a_thread_that_migrates_in_the_middle_of_its_calls_has_the_stacks_of_its_execution() {
    if !real_program_tools() {
        return;
    }
    let input = sort_input(300, 7);
    let cap = qemu::trace(Path::new(BUSYBOX), &["sort", "-n"], input.as_bytes()).unwrap();
    assert_eq!(cap.exit_code, Some(0));
    let exec = cap.execution;
    let mut images = ImageSet::new();
    images
        .add_elf("program", &exec.images[0].1, None, None)
        .unwrap();
    let steps = &exec.steps;
    let n = steps.len();
    let (k1, k2) = (after_a_call(steps, n / 3), after_a_call(steps, 2 * n / 3));
    assert!(k1 < k2 && k2 < n, "cuts {k1} {k2} of {n} steps");

    let mut r = PtRecording::for_elf(Path::new(BUSYBOX), PID, Vec::new()).unwrap();
    // TSC, MTC off, branches (perf's intel_pt//u with mtc=0): TSC packets in PSB+ only.
    r.config = 1 | 1 << 10 | 1 << 13;
    let clock = r.clock;
    let tsc_of = |perf_ns: u64| clock.perf_time_to_tsc(perf_ns).unwrap();
    let ns_of = |tsc: u64| clock.tsc_to_perf_time(tsc);
    // Steps `range` from `entry`, timed from perf time `at` on.
    let encode = |entry: u64, range: std::ops::Range<usize>, at: u64| -> Part {
        let o = PtOptions {
            tsc: Some(PtTsc {
                start: tsc_of(at + 1_000),
                per_insn: 1,
            }),
            ..PtOptions::default()
        };
        let out = encode_execution(&images, &o, entry, steps[range].iter().copied());
        Part {
            pt: out.bytes,
            instructions: out.summary.instructions,
        }
    };
    // A part run on `cpu` by `tid` from perf time `at`: its stream, and when it ends.
    let stream = |cpu: u32, tid: u32, part: &Part, at: u64| -> (CpuStream, u64) {
        let switch_out = ns_of(tsc_of(at + 1_000) + part.instructions) + 1_000;
        let s = CpuStream {
            cpu,
            tid,
            pt: part.pt.clone(),
            switch_in: at,
            switch_out,
        };
        (s, switch_out + 10_000)
    };
    let t0 = r.start_time + 100_000;

    // The whole execution on CPU 0.
    let whole = encode(exec.entry, 0..n, t0);
    let mut one = r.clone();
    one.cpus.push(stream(0, TID, &whole, t0).0);

    // Cut in three; each part timed where it runs, with a pause after it (as long as
    // the whole execution) in which CPU 0 can run another thread.
    let cuts = [
        (exec.entry, 0, k1),
        (next_of(steps, k1 - 1), k1, k2),
        (next_of(steps, k2 - 1), k2, n),
    ];
    let pause = whole.instructions;
    let mut at = t0;
    let mut parts = Vec::new();
    for &(entry, from, to) in &cuts {
        let p = encode(entry, from..to, at);
        let end = stream(0, TID, &p, at).1;
        parts.push((p, at));
        at = end + pause;
    }
    // CPU 0, CPU 1, CPU 0: nothing on CPU 0 in between.
    let mut hole = r.clone();
    for (cpu, (p, at)) in [0, 1, 0].into_iter().zip(&parts) {
        hole.cpus.push(stream(cpu, TID, p, *at).0);
    }
    // Thread 4242 on CPU 0 while 4243 runs on CPU 1 (the first part again, timed then).
    let mut between = hole.clone();
    let other = encode(exec.entry, 0..k1, parts[1].1);
    let (s, _) = stream(0, PID, &other, parts[1].1);
    assert!(
        s.switch_out < parts[2].1,
        "4242's turn ends before 4243 comes back"
    );
    between.cpus.insert(2, s);

    let tmp = tempfile::tempdir().unwrap();
    // `TRACEMILL_KEEP_PERF_DATA=DIR` keeps the recordings and their tables there.
    let dir = &std::env::var_os("TRACEMILL_KEEP_PERF_DATA")
        .map_or_else(|| tmp.path().to_path_buf(), std::path::PathBuf::from);
    std::fs::create_dir_all(dir).unwrap();
    let thread = format!("busybox_{PID}/{TID}");
    let (want, want_mismatched) = flame(dir, "one", &one);
    assert_eq!(want_mismatched, 0, "the whole execution on one CPU");
    let want = &want[&thread];
    assert!(want.len() > 50, "{} stacks", want.len());
    for (name, r) in [("hole", &hole), ("between", &between)] {
        let (got, mismatched) = flame(dir, name, r);
        assert_eq!(mismatched, 0, "{name}: mismatched returns");
        let got = &got[&thread];
        let (missing, extra): (Vec<_>, Vec<_>) = (
            want.iter().filter(|l| !got.contains(l)).take(5).collect(),
            got.iter().filter(|l| !want.contains(l)).take(5).collect(),
        );
        assert!(
            missing.is_empty() && extra.is_empty() && got.len() == want.len(),
            "{name}: thread {thread}'s stacks differ from the execution's on one CPU: \
             missing {missing:#?}, extra {extra:#?}"
        );
    }
}
