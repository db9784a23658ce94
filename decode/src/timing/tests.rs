//! The timeline's tests.

use super::*;
use crate::rows::BranchRow;

use crate::rtit::clock::{RtitClock, TimingConfig};

type Timeline = super::Timeline<RtitClock>;

fn cfg(cycle_acc: bool) -> TimingConfig {
    TimingConfig {
        cycle_acc,
        mtc_shift: 7,
        guaranteed_ratio: Some(20),
        starts_at_enable: true,
    }
}

fn fact(offset: u64, kind: TimingKind, raw: u64, ratio: Option<u8>) -> TimingFact {
    TimingFact {
        offset,
        kind,
        raw,
        ratio,
        row: 0,
    }
}

/// 4.2.5: a full TNT's CYC is the overflow's time only when the FUP.BuffOvf right
/// after the TNT carries a CYC of 0; an overflow later in the trace changes nothing,
/// and the answer is the same whether the marks after the TNT's CYC are in this piece
/// or the next one.
#[test]
fn full_tnt_cyc_dates_the_overflow_only_right_before_a_zero_cyc_buffovf_4_2_5() {
    let cyc = |o, raw| Mark::Fact(fact(o, TimingKind::Cyc, raw, None));
    let ev = |o, k| Mark::Event(o, k);
    let cond = BranchKind::Cond as u8;
    let tnt_cyc = cyc(10, 166);
    let right_after = [tnt_cyc, ev(12, EventKind::Overflow), cyc(15, 0)];
    assert!(overflow_rule(&right_after, &[], cond));
    assert!(overflow_rule(&right_after[..1], &right_after[1..], cond));
    assert!(!overflow_rule(&right_after, &[], BranchKind::Jmp as u8));
    let non_zero = [tnt_cyc, ev(12, EventKind::Overflow), cyc(15, 3)];
    assert!(!overflow_rule(&non_zero, &[], cond));
    let later = [
        tnt_cyc,
        ev(13, EventKind::Error),
        ev(100, EventKind::Psb),
        ev(109, EventKind::Overflow),
        cyc(112, 0),
    ];
    assert!(!overflow_rule(&later, &[], cond));
    assert!(!overflow_rule(&later[..2], &later[2..], cond));
}

/// Pieces without rows (junk between PSBs, a long disabled stretch) do not pile up
/// their timing packets in the carry: what a gap cuts off from later rows is settled
/// at once, so memory stays flat however long the stretch (a 256 MiB trace of random
/// bytes with a PSB every 4 KiB took 8.4 s, quadratic, before; 0.5 s after).
#[test]
fn stretches_without_rows_are_not_carried_from_piece_to_piece() {
    for cycle_acc in [false, true] {
        let mut t = Timeline::new(&cfg(cycle_acc));
        let mut off = 0;
        let mut timing_rows = 0;
        let mut push = |t: &mut Timeline, kinds: &[Option<EventKind>]| {
            let mut p = Piece::<BranchColumns>::default();
            for k in kinds {
                match k {
                    Some(kind) => p.events.push(EventRow {
                        seq: 0,
                        offset: off,
                        kind: *kind,
                        ip: None,
                        tsc: None,
                        detail: String::new(),
                    }),
                    None => p.timing.push(fact(off, TimingKind::Cyc, 3, None)),
                }
                off += 1;
            }
            for (_, tc) in t.push(p) {
                timing_rows += tc.len();
            }
        };
        // Junk: every piece resyncs, reads a few CYCs and fails again.
        for _ in 0..1000 {
            use EventKind::{Error, Resync};
            push(&mut t, &[Some(Resync), None, None, Some(Error), None]);
            assert!(t.carry.len() <= 1, "carry grows: {}", t.carry.len());
        }
        // Disabled: one FUP.PGD, then only timing packets for many pieces.
        push(&mut t, &[None, Some(EventKind::Disable), None]);
        for _ in 0..1000 {
            push(&mut t, &[None, None, None]);
            assert!(t.carry.is_empty(), "carry grows: {}", t.carry.len());
        }
        let rest: usize = t.finish().iter().map(|(_, tc)| tc.len()).sum();
        assert_eq!(
            timing_rows + rest,
            3000 + 2 + 3000,
            "every packet has its row"
        );
    }
}

/// Tracing on, nothing branching: rows, then a long stretch of PSBs and MTCs (with
/// their CYCs in cycle-accurate mode) and no row, in many pieces, then rows again.
/// Before, every PSB of the stretch was carried from piece to piece (quadratic time:
/// 32 MB of such a trace took 131.8 s) and every piece was held for the rows before
/// the stretch, still waiting for their next anchor (memory 500 times the stretch).
/// Now neither the carry nor the held pieces grow with the stretch, and the rows come
/// out the same however the pieces are cut.
#[test]
fn a_stretch_of_timing_packets_without_rows_is_neither_carried_nor_held() {
    for cycle_acc in [false, true] {
        // (offset step, marks per piece): 4 KiB between marks crosses MAX_WAIT_BYTES
        // within a few hundred marks.
        let build = |pieces: usize, per: usize| -> Vec<Piece<BranchColumns>> {
            let mut out = Vec::new();
            let mut off = 0u64;
            let mut mtc = 0u64;
            // Two full TNTs (six rows each, their CYC after them in cycle-accurate
            // mode: the sixth row is exact) and a partial one (no CYC: its row waits).
            let piece_with_rows = |out: &mut Vec<Piece<BranchColumns>>, off: &mut u64| {
                let mut p = Piece::<BranchColumns>::default();
                p.timing
                    .push(fact(*off, TimingKind::Sts, 0x1_0000, Some(16)));
                *off += 1;
                for bits in [6, 6, 1] {
                    for _ in 0..bits {
                        p.rows.push(&BranchRow {
                            ip: 0x1000,
                            target: None,
                            kind: BranchKind::Cond,
                            taken: true,
                            compressed: false,
                            insns: 3,
                            tsc: None,
                            cycles: None,
                            cr3: None,
                            offset: *off,
                        });
                    }
                    *off += 1;
                    if cycle_acc && bits == 6 {
                        p.timing.push(fact(*off, TimingKind::Cyc, 7, None));
                        *off += 1;
                    }
                }
                out.push(p);
            };
            piece_with_rows(&mut out, &mut off);
            for _ in 0..pieces {
                let mut p = Piece::<BranchColumns>::default();
                for _ in 0..per {
                    if mtc.is_multiple_of(50) {
                        p.events.push(EventRow {
                            seq: 0,
                            offset: off,
                            kind: EventKind::Psb,
                            ip: None,
                            tsc: None,
                            detail: String::new(),
                        });
                        off += 16;
                    }
                    mtc += 1;
                    p.timing.push(fact(off, TimingKind::Mtc, mtc & 0xff, None));
                    off += 4096;
                    if cycle_acc {
                        p.timing.push(fact(off, TimingKind::Cyc, 40, None));
                        off += 1;
                    }
                }
                out.push(p);
            }
            piece_with_rows(&mut out, &mut off);
            out
        };
        let run = |pieces: Vec<Piece<BranchColumns>>| {
            let mut t = Timeline::new(&cfg(cycle_acc));
            let (mut max_carry, mut max_held) = (0, 0);
            let mut out = Vec::new();
            for p in pieces {
                out.extend(t.push(p));
                max_carry = max_carry.max(t.carry.len());
                max_held = max_held.max(t.held.len());
            }
            out.extend(t.finish());
            let mut tsc = Vec::new();
            let mut timing = 0;
            for (p, tc) in &out {
                timing += tc.len();
                for i in 0..p.rows.len() {
                    tsc.push((p.rows.tsc.get(i), p.rows.cycles.get(i)));
                }
            }
            (tsc, timing, max_carry, max_held)
        };
        let (tsc, timing, carry, held) = run(build(2000, 100));
        assert!(carry <= 1, "cycle_acc {cycle_acc}: carry grew to {carry}");
        // 4 KiB per MTC: the wait is cut off within 256 MTCs, three pieces.
        assert!(held <= 8, "cycle_acc {cycle_acc}: {held} pieces held");
        assert_eq!(tsc.len(), 26);
        // From the first anchor on (before it, cycle-accurate `tsc` is null by rule),
        // the row that waited through the stretch included.
        assert!(tsc[5..].iter().all(|(t, _)| t.is_some()), "{tsc:?}");
        let per_mtc = if cycle_acc { 2 } else { 1 };
        assert_eq!(timing, 2 * (1 + 2 * (per_mtc - 1)) + 2000 * 100 * per_mtc);
        // Cut differently (one piece for the whole stretch, or ten marks a piece), the
        // rows come out the same.
        assert_eq!(
            run(build(1, 200_000)).0,
            tsc,
            "cycle_acc {cycle_acc}: one piece"
        );
        assert_eq!(
            run(build(20_000, 10)).0,
            tsc,
            "cycle_acc {cycle_acc}: small pieces"
        );
    }
}

/// A non-cycle-accurate trace: an STS, rows and MTCs, an `event` after row 5, more
/// rows and MTCs; `gap_mtcs` MTCs sent between the event and `resume` (when given).
fn gap_trace(event: EventKind, resume: Option<EventKind>, gap_mtcs: u64) -> Piece<BranchColumns> {
    let mut p = Piece::<BranchColumns>::default();
    let row = |p: &mut Piece<BranchColumns>, offset: u64| {
        p.rows.push(&BranchRow {
            ip: 0x1000,
            target: Some(0x2000),
            kind: BranchKind::JmpInd,
            taken: true,
            compressed: false,
            insns: 10,
            tsc: None,
            cycles: None,
            cr3: None,
            offset,
        })
    };
    let mut off = 0;
    let ev = |p: &mut Piece<BranchColumns>, off: u64, kind: EventKind| {
        let seq = p.rows.len() as u64;
        p.events.push(EventRow {
            seq,
            offset: off,
            kind,
            ip: None,
            tsc: None,
            detail: String::new(),
        })
    };
    let fact = |p: &mut Piece<BranchColumns>, off: u64, kind: TimingKind, raw: u64, ratio| {
        let row = p.rows.len() as u64;
        p.timing.push(TimingFact {
            offset: off,
            kind,
            raw,
            ratio,
            row,
        })
    };
    // TSC 0x10000 (MTC bits 0x00), the first MTC after enable is ignored (E7).
    fact(&mut p, off, TimingKind::Sts, 0x1_0000, Some(16));
    off += 1;
    fact(&mut p, off, TimingKind::Mtc, 0x00, None);
    off += 1;
    for k in 0..6u64 {
        if k == 3 {
            fact(&mut p, off, TimingKind::Mtc, 0x01, None);
            off += 1;
        }
        row(&mut p, off);
        off += 1;
    }
    ev(&mut p, off, event);
    off += 1;
    for k in 0..gap_mtcs {
        fact(&mut p, off, TimingKind::Mtc, 0x40 + k, None);
        off += 1;
    }
    if let Some(r) = resume {
        ev(&mut p, off, r);
        off += 1;
    }
    // The first MTC after the gap: 0x80 (TSC 0x14000), far later than the rows before.
    for k in 0..6u64 {
        if k == 3 {
            fact(&mut p, off, TimingKind::Mtc, 0x80, None);
            off += 1;
        }
        row(&mut p, off);
        off += 1;
    }
    fact(&mut p, off, TimingKind::Mtc, 0x81, None);
    p
}

/// Cut `p` into pieces of `n` rows (events and facts with them) and time them.
fn time_in_pieces(p: &Piece<BranchColumns>, n: usize) -> (Vec<Option<u64>>, Vec<Option<u64>>) {
    time_in_pieces_waiting(p, n, Timeline::new(&cfg(false)).max_pending)
}

/// [`time_in_pieces`] with at most `max_pending` rows waiting for an anchor.
fn time_in_pieces_waiting(
    p: &Piece<BranchColumns>,
    n: usize,
    max_pending: usize,
) -> (Vec<Option<u64>>, Vec<Option<u64>>) {
    let mut tl = Timeline::new(&cfg(false));
    tl.max_pending = max_pending;
    let mut out = Vec::new();
    let rows = p.rows.len();
    let mut start = 0;
    while start < rows {
        let end = (start + n).min(rows);
        let mut q = Piece::<BranchColumns>::default();
        for i in start..end {
            q.rows.push(&p.rows.row(i));
        }
        let last = end == rows;
        // What comes after a piece's last row goes with the next piece.
        let inside = |r: u64| r >= start as u64 && (r < end as u64 || (last && r == end as u64));
        q.events = p
            .events
            .iter()
            .filter(|e| inside(e.seq))
            .map(|e| EventRow {
                seq: e.seq - start as u64,
                ..e.clone()
            })
            .collect();
        q.timing = p
            .timing
            .iter()
            .filter(|f| inside(f.row))
            .map(|f| TimingFact {
                row: f.row - start as u64,
                ..*f
            })
            .collect();
        out.extend(tl.push(q));
        start = end;
    }
    out.extend(tl.finish());
    let mut tsc = Vec::new();
    let mut cyc = Vec::new();
    for (q, _) in &out {
        for i in 0..q.rows.len() {
            tsc.push(q.rows.tsc.get(i));
            cyc.push(q.rows.cycles.get(i));
        }
    }
    (tsc, cyc)
}

#[test]
fn no_row_takes_time_from_across_a_gap() {
    let before_max = 0x1_0080; // the last MTC before the gap
    let after_min = 0x1_4000; // the first MTC after it
    for (event, resume, gap_mtcs) in [
        (EventKind::Overflow, None, 0),
        (EventKind::Error, Some(EventKind::Resync), 0),
        (EventKind::Disable, Some(EventKind::Enable), 0),
        (EventKind::Disable, Some(EventKind::Enable), 3),
        (EventKind::TraceStop, Some(EventKind::Enable), 0),
    ] {
        let p = gap_trace(event, resume, gap_mtcs);
        let (tsc, _) = time_in_pieces(&p, usize::MAX);
        let what = format!("{event:?} {resume:?} with {gap_mtcs} MTCs in the gap: {tsc:x?}");
        for (i, t) in tsc.iter().enumerate() {
            let t = t.unwrap_or_else(|| panic!("row {i} has no tsc: {what}"));
            if i < 6 {
                assert!((0x1_0000..=before_max).contains(&t), "row {i}: {what}");
            } else if gap_mtcs > 0 {
                // From the last MTC of the gap (0x42: TSC 0x12100) on.
                assert!((0x1_2100..=0x1_4080).contains(&t), "row {i}: {what}");
            } else {
                assert!((after_min..=0x1_4080).contains(&t), "row {i}: {what}");
            }
        }
        for n in [1, 2, 5] {
            assert_eq!(time_in_pieces(&p, n).0, tsc, "pieces of {n} rows: {what}");
        }
    }
}

/// Rows that only wait are taken a stretch at a time; where the wait is cut off
/// (`max_pending`) still falls on the same row however the trace is cut into pieces,
/// and the time never decreases.
#[test]
fn the_wait_is_cut_off_at_the_same_row_whatever_the_pieces() {
    let p = gap_trace(EventKind::Disable, Some(EventKind::Enable), 2);
    for max_pending in [0, 1, 2, 3, 5, 100] {
        let (whole, _) = time_in_pieces_waiting(&p, usize::MAX, max_pending);
        assert_eq!(whole.len(), p.rows.len());
        let known: Vec<u64> = whole.iter().flatten().copied().collect();
        assert!(
            known.windows(2).all(|w| w[0] <= w[1]),
            "{max_pending}: {whole:x?}"
        );
        for n in [1, 2, 3, 4, 7] {
            assert_eq!(
                time_in_pieces_waiting(&p, n, max_pending).0,
                whole,
                "pieces of {n} rows, at most {max_pending} waiting"
            );
        }
    }
    // With a small limit the rows do not all wait for the MTC after them: the limit
    // changes the answer, so the test above sees where it falls.
    assert_ne!(
        time_in_pieces_waiting(&p, usize::MAX, 1).0,
        time_in_pieces_waiting(&p, usize::MAX, 100).0
    );
}

/// `p` timed in pieces of `n` rows (`rowless`: what follows each piece's last row in a
/// piece of its own, then an empty piece), passing over untimed pieces or not: each row's
/// `tsc` and `cycles`, and the `timing` table's `tsc` and `value`.
#[allow(clippy::type_complexity)]
fn timed_passing(
    p: &Piece<BranchColumns>,
    n: usize,
    rowless: bool,
    pass: bool,
) -> (Vec<Option<u64>>, Vec<Option<u64>>, Vec<(Option<u64>, u64)>) {
    let mut tl = Timeline::new(&cfg(false));
    tl.pass_untimed = pass;
    let mut out = Vec::new();
    let rows = p.rows.len();
    let mut start = 0;
    loop {
        let end = (start + n).min(rows);
        let last = end == rows;
        let inside = |r: u64| r >= start as u64 && (r < end as u64 || (last && r == end as u64));
        let mut q = Piece::<BranchColumns>::default();
        for i in start..end {
            q.rows.push(&p.rows.row(i));
        }
        q.events = (p.events.iter().filter(|e| inside(e.seq)))
            .map(|e| EventRow {
                seq: e.seq - start as u64,
                ..e.clone()
            })
            .collect();
        q.timing = (p.timing.iter().filter(|f| inside(f.row)))
            .map(|f| TimingFact {
                row: f.row - start as u64,
                ..*f
            })
            .collect();
        if rowless && !last {
            // What follows the last row as a piece of its own, without rows.
            let mut r = Piece::<BranchColumns>::default();
            let after = |x: u64| x == end as u64;
            r.events = (q.events.iter().filter(|e| after(e.seq + start as u64)))
                .map(|e| EventRow {
                    seq: 0,
                    ..e.clone()
                })
                .collect();
            q.events.retain(|e| !after(e.seq + start as u64));
            r.timing = (q.timing.iter().filter(|f| after(f.row + start as u64)))
                .map(|f| TimingFact { row: 0, ..*f })
                .collect();
            q.timing.retain(|f| !after(f.row + start as u64));
            out.extend(tl.push(q));
            out.extend(tl.push(r));
            // And an empty one: what the rowless piece leaves (a gap open or not) is
            // what the piece after the empty one starts from.
            out.extend(tl.push(Piece::default()));
        } else {
            out.extend(tl.push(q));
        }
        start = end;
        if last {
            break;
        }
    }
    out.extend(tl.finish());
    assert!(pass || tl.passed == 0);
    assert!(
        !pass || n >= 40 || tl.passed > 0,
        "pieces of {n} rows passed over"
    );
    let (mut tsc, mut cyc, mut table) = (Vec::new(), Vec::new(), Vec::new());
    for (q, t) in &out {
        for i in 0..q.rows.len() {
            tsc.push(q.rows.tsc.get(i));
            cyc.push(q.rows.cycles.get(i));
        }
        for i in 0..t.len() {
            table.push((t.tsc.get(i), t.value[i]));
        }
    }
    (tsc, cyc, table)
}

/// A trace whose first stretch has no timing packets (rows direct and decided, PSBs,
/// gaps and a TraceStop, ending in one of several ways), then `gap_trace`'s timed
/// rows: passing over the untimed pieces gives every row and timing row what walking
/// them row by row gives, wherever the trace is cut.
#[test]
fn untimed_pieces_passed_over_are_timed_as_walked() {
    let jmp = |offset: u64, kind: BranchKind| BranchRow {
        ip: 0x1000,
        target: Some(0x2000),
        kind,
        taken: true,
        compressed: false,
        insns: 3,
        tsc: None,
        cycles: None,
        cr3: None,
        offset,
    };
    use EventKind::*;
    // How the untimed stretch ends: after its rows, a gap that stays open, one that
    // closes, a TraceStop; direct jumps whose place is the next decided row's.
    let endings: [&[EventKind]; 5] = [
        &[],
        &[Disable],
        &[Disable, Enable],
        &[TraceStop],
        &[Psb, Overflow, Error],
    ];
    for (e, ending) in endings.iter().enumerate() {
        for tail_jumps in [0, 3] {
            let mut p = Piece::<BranchColumns>::default();
            let mut off = 0u64;
            let ev = |p: &mut Piece<BranchColumns>, off: u64, kind: EventKind| {
                let seq = p.rows.len() as u64;
                p.events.push(EventRow {
                    seq,
                    offset: off,
                    kind,
                    ip: None,
                    tsc: None,
                    detail: String::new(),
                })
            };
            for k in 0..40u64 {
                if k % 9 == 4 {
                    ev(
                        &mut p,
                        off,
                        [Psb, Disable, Enable, Psb, TraceStop][(k / 9) as usize % 5],
                    );
                    off += 1;
                }
                let kind = [BranchKind::Cond, BranchKind::Jmp, BranchKind::JmpInd][k as usize % 3];
                p.rows.push(&jmp(off, kind));
                if kind != BranchKind::Jmp {
                    off += 1;
                }
            }
            for _ in 0..tail_jumps {
                p.rows.push(&jmp(off, BranchKind::Call));
            }
            for &kind in *ending {
                ev(&mut p, off, kind);
                off += 1;
            }
            // Then the timed trace, after these offsets and rows.
            let timed = gap_trace(Disable, Some(Enable), 2);
            let (rows, base) = (p.rows.len() as u64, off);
            for i in 0..timed.rows.len() {
                let mut r = timed.rows.row(i);
                r.offset += base;
                p.rows.push(&r);
            }
            p.events.extend(timed.events.iter().map(|x| EventRow {
                seq: x.seq + rows,
                offset: x.offset + base,
                ..x.clone()
            }));
            p.timing.extend(timed.timing.iter().map(|f| TimingFact {
                row: f.row + rows,
                offset: f.offset + base,
                ..*f
            }));
            for n in [1, 2, 3, 5, 8, 13, 40, 43, 44, 1000] {
                for rowless in [false, true] {
                    let walked = timed_passing(&p, n, rowless, false);
                    assert!(walked.0.iter().any(|t| t.is_some()), "some rows are dated");
                    assert_eq!(
                        timed_passing(&p, n, rowless, true),
                        walked,
                        "ending {e}, {tail_jumps} jumps at the end, pieces of {n}, {rowless}"
                    );
                }
            }
        }
    }
}
