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
