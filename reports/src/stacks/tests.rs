use tracemill_schemas::{BranchKind, EventKind};

use super::events::*;
use super::functions::*;
use super::rows::*;
use super::trie::*;
use super::walker::*;
use super::*;
use crate::symbols::Symbolizer;

#[test]
fn the_events_reader_passes_on_only_gaps_and_enables_that_do_not_resume() {
    use EventKind::*;
    let ev = |seq, kind, ip| Ev {
        seq,
        kind,
        ip,
        disable: 0,
    };
    let mut events = vec![
        // Before any disable: kept, stopped nowhere known.
        ev(0, Enable, Some(0x900)),
        ev(1, Disable, Some(0x1000)),
        // Just after the disabling instruction (a syscall of 2 bytes): dropped.
        ev(2, Enable, Some(0x1002)),
        ev(3, Disable, Some(0x2000)),
        // Elsewhere (a signal handler): kept, with where tracing stopped.
        ev(4, Enable, Some(0x5000)),
        ev(5, Enable, None),
        // The note about bytes before the first PSB: no gap.
        ev(6, Resync, None),
        ev(7, Overflow, Some(0x10)),
        ev(8, Resync, Some(0x20)),
        ev(6, Error, None),
    ];
    let mut r = Resolver::default();
    events.retain_mut(|e| r.keep(e));
    let kept: Vec<(u64, EventKind, u64)> =
        events.iter().map(|e| (e.seq, e.kind, e.disable)).collect();
    assert_eq!(
        kept,
        [
            (0, Enable, 0),
            (4, Enable, 0x2000),
            (7, Overflow, 0),
            (8, Resync, 0),
            (6, Error, 0)
        ]
    );
    let warning = r.out_of_order.expect("seq 6 after 8");
    assert!(warning.contains("seq 6 after 8"), "{warning}");
}

/// One row of the walk, through the values' path.
fn step<F: FnMut(Span)>(w: &mut Walker<'_, '_, F>, kind: BranchKind, ip: u64, target: u64) {
    let mut pending = std::mem::take(&mut w.pending);
    let (func, known, _) = w.f.at(ip);
    let branch = ValueBranch {
        ip,
        target: Some(target),
    };
    w.row(&mut pending, (func, known), kind as u8, 1, 0, branch);
    w.pending = pending;
}

#[test]
fn an_asynchronous_entry_is_left_where_it_resumes_and_nowhere_else() {
    let syms = Symbolizer::new();
    let mut f = Functions::new(&syms);
    let mut w = Walker {
        f: &mut f,
        st: Stacks::new(false),
        stack: Vec::new(),
        far_frames: 0,
        rets: ReturnFilter::new(),
        on_span: |_| {},
        tsc: None,
        pending: Pending::default(),
        ip_at: Vec::new(),
        ip_ret: Vec::new(),
        target_at: Vec::new(),
    };
    step(&mut w, BranchKind::Cond, 0x1000, 0x1004);
    // An interrupt at 0x1004 into a handler: a frame entered asynchronously.
    step(&mut w, BranchKind::Far, 0x1004, 0x8000);
    assert_eq!((w.stack.len(), w.far_frames, w.st.async_entries), (2, 1, 1));
    // A far return that resumes nowhere on the stack is another entry...
    step(&mut w, BranchKind::Far, 0x8010, 0x9000);
    assert_eq!((w.stack.len(), w.far_frames, w.st.async_entries), (3, 2, 2));
    // ...and one back to where the first interrupted leaves both.
    step(&mut w, BranchKind::Far, 0x9010, 0x1004);
    assert_eq!((w.stack.len(), w.far_frames), (1, 0));
    // With no such frame left, a far transfer is an entry again.
    step(&mut w, BranchKind::Far, 0x1008, 0x8000);
    assert_eq!((w.stack.len(), w.far_frames, w.st.async_entries), (2, 1, 3));
}

#[test]
fn the_return_filter_is_sure_of_every_address_no_frame_returns_to() {
    let mut f = ReturnFilter::new();
    assert!(!f.may_hold(0x401000));
    // Two frames returning to one address, and addresses that share a bucket.
    let same = 0x401000 + (1 << 36);
    assert_eq!(ReturnFilter::bucket(same), ReturnFilter::bucket(0x401000));
    for r in [0x401000, 0x401000, same, 0x7fff_1234] {
        f.add(r);
    }
    for r in [0x401000, same, 0x7fff_1234] {
        assert!(f.may_hold(r));
    }
    f.remove(0x401000);
    assert!(f.may_hold(0x401000));
    f.remove(same);
    // `same` is gone, but shares its bucket with a frame still there.
    assert!(f.may_hold(same));
    f.remove(0x401000);
    assert!(!f.may_hold(0x401000) && !f.may_hold(same));
    assert!(f.may_hold(0x7fff_1234));
    // A full stack of frames: every one is still found.
    let rets: Vec<u64> = (0..MAX_DEPTH as u64).map(|i| 0x400000 + i * 37).collect();
    rets.iter().for_each(|&r| f.add(r));
    assert!(rets.iter().all(|&r| f.may_hold(r)));
}

#[test]
fn light_stacks_fold_into_their_caller_and_the_total_stays() {
    let mut st = Stacks::new(false);
    let a = st.child(0, 1);
    let b = st.child(a, 2);
    let c = st.child(b, 3);
    let d = st.child(0, 4);
    st.instructions[a as usize] = 10;
    st.instructions[b as usize] = 1;
    st.instructions[c as usize] = 1;
    st.instructions[d as usize] = 1;
    let names: Vec<String> = ["[gap]", "a", "b", "c", "d"].map(String::from).to_vec();
    let mut lines = |min| {
        st.folded(&names, false, min)
            .iter()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(lines(0), ["a 10", "a;b 1", "a;b;c 1", "d 1"]);
    assert_eq!(lines(5), ["[small stacks] 1", "a 12"]);
    // The subtree sums made in place of the weights are undone.
    let weights: Vec<u64> = st.instructions.iter().copied().collect();
    assert_eq!(weights, [0, 10, 1, 1, 1]);
    let mut out = Vec::new();
    assert_eq!(st.write_folded(&names, false, &mut out).unwrap(), 4);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "a 10\na;b 1\na;b;c 1\nd 1\n"
    );
}

/// The lines as a full sort of every kept node's line gives them: the reference.
fn sorted_lines(st: &Stacks, names: &[String], min: u64) -> Vec<String> {
    let n = st.len();
    let mut sub: Vec<u64> = st.instructions.iter().copied().collect();
    for i in (1..n).rev() {
        sub[st.node(i).0 as usize] += sub[i];
    }
    let mut into = vec![0usize; n];
    let mut own = vec![0u64; n];
    own[0] = st.instructions[0];
    for i in 1..n {
        into[i] = if sub[i] >= min.max(1) {
            i
        } else {
            into[st.node(i).0 as usize]
        };
        own[into[i]] += st.instructions[i];
    }
    let names = folded_names(names);
    let (mut parts, mut line) = (Vec::new(), String::new());
    let mut out = Vec::new();
    for (i, &w) in own.iter().enumerate() {
        if w > 0 {
            if i == 0 {
                out.push(format!("[small stacks] {w}"));
            } else {
                st.path(&names, i, &mut parts, &mut line);
                out.push(format!("{line} {w}"));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn folded_lines_come_sorted_whatever_the_names() {
    // Names that are others' prefixes followed by bytes below and above `;`, and two
    // that are one name once cleaned.
    let names: Vec<String> = [
        "[gap]", "f", "f.cold", "fa", "f+0x1", "f+0x12", "g", "a b", "a_b", "a;b", "!",
    ]
    .map(String::from)
    .to_vec();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rand = |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    };
    for round in 0..200 {
        let mut st = Stacks::new(false);
        let mut stack = vec![0u32];
        for _ in 0..60 {
            match rand(3) {
                0 if stack.len() > 1 => {
                    stack.pop();
                }
                _ => {
                    let f = 1 + rand(names.len() as u64 - 1) as u32;
                    let c = st.child(*stack.last().unwrap(), f);
                    stack.push(c);
                }
            }
            let top = *stack.last().unwrap() as usize;
            st.instructions[top] += rand(10);
        }
        let total = st.total(false);
        for min in [0, 1, 5, total / 10, total] {
            let got: Vec<String> = st
                .folded(&names, false, min)
                .iter()
                .map(String::from)
                .collect();
            let want = sorted_lines(&st, &names, min);
            assert_eq!(got, want, "round {round}, min {min}");
            let sum: u64 = got
                .iter()
                .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
                .sum();
            assert_eq!(sum, total);
        }
    }
}

#[test]
fn the_trie_finds_every_child_again_past_the_list_limit() {
    let mut st = Stacks::new(true);
    // More callees of one node than its list holds, asked for in turn and again.
    let kids: Vec<u32> = (1..=3 * FANOUT).map(|f| st.child(0, f)).collect();
    for round in 0..3 {
        for (i, f) in (1..3 * FANOUT + 1).enumerate().rev() {
            assert_eq!(st.child(0, f), kids[i], "round {round}, function {f}");
        }
    }
    // A short list, reordered by use.
    let a = st.child(kids[0], 7);
    let b = st.child(kids[0], 8);
    assert_eq!((st.child(kids[0], 7), st.child(kids[0], 8)), (a, b));
    assert_eq!(st.child(kids[0], 7), a);
    assert_eq!(st.len(), 1 + 3 * FANOUT as usize + 2);
    assert_eq!(st.node(b as usize), (kids[0], 8));
    assert_eq!(
        st.cycles.len(),
        st.len(),
        "cycles are counted per node when asked for"
    );
}

/// A row of a perf.data decode's `branches`: cpu, tid, time, ip, kind, target, insns.
type PerfRow<'a> = (u32, u32, u64, u64, &'a str, u64, u32);

/// A perf.data decode's `branches` and `events` written in `dir` (Parquet with row groups
/// of three rows, or Arrow IPC): its rows in table order; each event (seq, kind).
fn perf_tables(dir: &std::path::Path, ipc: bool, rows: &[PerfRow<'_>], events: &[(u64, &str)]) {
    use arrow_array::{ArrayRef, RecordBatch, StringArray, UInt32Array, UInt64Array};
    use std::sync::Arc;
    let u32s = |f: fn(&PerfRow<'_>) -> u32| -> ArrayRef {
        Arc::new(rows.iter().map(f).collect::<UInt32Array>())
    };
    let u64s = |f: fn(&PerfRow<'_>) -> u64| -> ArrayRef {
        Arc::new(rows.iter().map(f).collect::<UInt64Array>())
    };
    let branches = RecordBatch::try_from_iter([
        ("ip", u64s(|r| r.3)),
        ("target", u64s(|r| r.5)),
        (
            "kind",
            Arc::new(rows.iter().map(|r| Some(r.4)).collect::<StringArray>()) as ArrayRef,
        ),
        ("insns", u32s(|r| r.6)),
        ("cpu", u32s(|r| r.0)),
        ("tid", u32s(|r| r.1)),
        ("time", u64s(|r| r.2)),
    ])
    .unwrap();
    let events = RecordBatch::try_from_iter([
        (
            "seq",
            Arc::new(events.iter().map(|e| e.0).collect::<UInt64Array>()) as ArrayRef,
        ),
        (
            "kind",
            Arc::new(events.iter().map(|e| Some(e.1)).collect::<StringArray>()),
        ),
        (
            "ip",
            Arc::new(events.iter().map(|_| None::<u64>).collect::<UInt64Array>()),
        ),
    ])
    .unwrap();
    for (name, b) in [("branches", branches), ("events", events)] {
        let ext = if ipc { "arrow" } else { "parquet" };
        let f = std::fs::File::create(dir.join(format!("{name}.{ext}"))).unwrap();
        if ipc {
            let mut w = arrow_ipc::writer::FileWriter::try_new(f, &b.schema()).unwrap();
            // Batches of three rows, as the Parquet row groups.
            for at in (0..b.num_rows()).step_by(3) {
                w.write(&b.slice(at, 3.min(b.num_rows() - at))).unwrap();
            }
            w.finish().unwrap();
        } else {
            let props = parquet::file::properties::WriterProperties::builder()
                .set_max_row_group_row_count(Some(3))
                .build();
            let mut w = parquet::arrow::ArrowWriter::try_new(f, b.schema(), Some(props)).unwrap();
            w.write(&b).unwrap();
            w.close().unwrap();
        }
    }
}

/// The folded lines of thread `tid` in the flame graph of `rows` and `events`
/// ([`perf_tables`]), sorted; and the gaps of all threads.
fn thread_lines(
    ipc: bool,
    rows: &[PerfRow<'_>],
    events: &[(u64, &str)],
    tid: u32,
) -> (Vec<String>, u64) {
    let dir = tempfile::tempdir().unwrap();
    perf_tables(dir.path(), ipc, rows, events);
    let input = crate::input::Input::open(dir.path(), None).unwrap();
    let mut src = crate::source::Source::Decode(Box::new(input));
    let mut warnings = Vec::new();
    let (st, names) = stacks_of(&mut src, false, &mut warnings).unwrap();
    let mut out = Vec::new();
    st.write_folded(&names, false, &mut out).unwrap();
    let root = format!("thread_{tid};");
    let mut lines: Vec<String> = String::from_utf8(out)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with(&root))
        .map(String::from)
        .collect();
    lines.sort();
    (lines, st.gaps)
}

#[test]
fn a_thread_that_ran_on_two_cpus_is_walked_in_time_order() {
    use BranchKind::*;
    let (call, ret, cond) = (Call.name(), Ret.name(), Cond.name());
    // Thread 7 calls 0x2000 on CPU 0, which calls 0x3000 on CPU 1 and returns there, and
    // returns itself on CPU 0; CPU 1 runs it again after that. Thread 8 runs between, on
    // both, with an error (a gap) among its rows. Each of thread 7's rows has its own bit
    // of `insns`, to tell where it went.
    let rows = [
        // CPU 0
        (0, 7, 10, 0x1000, call, 0x2000, 1),
        (0, 8, 11, 0x5000, cond, 0x5004, 100),
        (0, 8, 12, 0x5004, cond, 0x5008, 200),
        (0, 7, 40, 0x2010, ret, 0x1005, 2),
        (0, 7, 41, 0x1010, cond, 0x1014, 4),
        // CPU 1: the last two rows are one stretch of thread 7 (CPU 1 ran nothing of the
        // trace between), with CPU 0's two rows above in its time.
        (1, 7, 20, 0x2000, call, 0x3000, 8),
        (1, 7, 21, 0x3000, cond, 0x3004, 16),
        (1, 8, 25, 0x5008, cond, 0x500c, 400),
        (1, 7, 30, 0x3010, ret, 0x2005, 32),
        (1, 7, 50, 0x1014, cond, 0x1018, 64),
    ];
    for ipc in [false, true] {
        let (lines, gaps) = thread_lines(ipc, &rows, &[(2, EventKind::Error.name())], 7);
        // Returns are all mismatched (no image: no return address is known), each
        // popping one frame.
        assert_eq!(
            lines,
            [
                "thread_7;0x1000 69",               // rows 1, 4, 64
                "thread_7;0x1000;0x2000 10",        // rows 8, 2
                "thread_7;0x1000;0x2000;0x3000 48", // rows 16, 32
            ],
            "ipc {ipc}"
        );
        // The error is thread 8's, not thread 7's.
        assert_eq!(gaps, 1, "ipc {ipc}");
    }
}

#[test]
fn a_thread_that_goes_back_and_forth_between_two_idle_cpus_is_walked_in_time_order() {
    use BranchKind::*;
    let (call, ret, cond) = (Call.name(), Ret.name(), Cond.name());
    // Thread 9 alone, from CPU 0 to CPU 1 and back, twice: each CPU's rows are one
    // stretch, with the other's rows within its time.
    let rows = [
        (0, 9, 10, 0x1000, call, 0x2000, 1),
        (0, 9, 30, 0x3000, cond, 0x3004, 4),
        (0, 9, 50, 0x2008, cond, 0x200c, 16),
        (1, 9, 20, 0x2000, call, 0x3000, 2),
        (1, 9, 40, 0x3010, ret, 0x2005, 8),
    ];
    for ipc in [false, true] {
        let (lines, _) = thread_lines(ipc, &rows, &[], 9);
        assert_eq!(
            lines,
            [
                "thread_9;0x1000 1",
                "thread_9;0x1000;0x2000 18",        // rows 2, 16
                "thread_9;0x1000;0x2000;0x3000 12", // rows 4, 8
            ],
            "ipc {ipc}"
        );
    }
}

#[test]
fn rows_timed_after_the_next_thread_on_their_cpu_stay_in_their_place() {
    use BranchKind::*;
    let (call, ret, cond) = (Call.name(), Ret.name(), Cond.name());
    // Thread 7's last row on CPU 0 came after a gap and took the next timing packet's
    // time: thread 8's, after thread 7 ran on CPU 1. It ran before that.
    let rows = [
        (0, 7, 10, 0x1000, call, 0x2000, 1),
        (0, 7, 20, 0x2000, cond, 0x2004, 2),
        (0, 7, 60, 0x2010, ret, 0x1005, 4),
        (0, 8, 60, 0x5000, cond, 0x5004, 100),
        (1, 7, 30, 0x1005, call, 0x3000, 8),
        (1, 7, 40, 0x3000, cond, 0x3004, 16),
    ];
    for ipc in [false, true] {
        let (lines, _) = thread_lines(ipc, &rows, &[], 7);
        assert_eq!(
            lines,
            [
                "thread_7;0x1000 9",         // rows 1, 8
                "thread_7;0x1000;0x2000 6",  // rows 2, 4
                "thread_7;0x1000;0x3000 16", // row 16
            ],
            "ipc {ipc}"
        );
    }
}
