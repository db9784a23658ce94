//! Timing: `tsc` and `cycles` of every row, and the `timing` table, for any format.
//!
//! Two parts. A format's [`Clock`] turns its timing packets into time in stream order
//! (RTIT: CYC, STS, MTC with E6 and E7, [`crate::rtit::clock`]; Intel PT: TSC, TMA, MTC,
//! CYC, CBR, [`crate::pt::clock`]). The [`Timeline`] places that time on rows by the same
//! rules whatever the format:
//!
//! Rows: in cycle-accurate mode a row whose own packet carries a CYC (a TIP, a FUP, the
//! last bit of a full TNT) gets the exact cumulative cycles at that CYC, except RTIT's
//! 4.2.5 case (a full TNT followed by a FUP.BuffOvf whose CYC is 0 carries the overflow's
//! time, [`Clock::OVERFLOW_CYC_RULE`]). Those rows (with cycle-accurate timing) or the
//! TSC-bearing packets the clock names (without, [`Clock::dates_rows`]) are *anchors*;
//! rows between anchors are interpolated by instruction count, so values never leave the
//! bounds of their neighbours; rows after the last anchor take its value. `tsc` stays null
//! until the clock knows the TSC; both columns never decrease.
//!
//! Nothing is interpolated across a gap (an overflow, an error, a disabled stretch, a
//! TraceSTOP): rows before it hold the last anchor before it; rows after it start from the
//! resume point (its CYC, or without cycle-accurate timing a TSC sent during the gap)
//! or take the first anchor after it. Time spent in the gap belongs to no row.

use std::collections::VecDeque;

use tracemill_schemas::{BranchKind, EventKind, TimingKind};

mod fill;
mod table;

pub use fill::Fills;
use fill::{interpolate, Col, Fill, How};
pub use table::TimingTable;

use crate::piece::{Mark, Piece, Prepared, TimingFact};
use crate::rows::{BranchColumns, EventRow, TimingColumns, TimingRow};

/// A format's clock: what each timing packet means, in stream order. The [`Timeline`]
/// asks it for each packet's `timing` row and time, and places that time on rows by the
/// same rules for every format.
pub trait Clock: Clone + Send {
    /// The bundle facts the clock needs.
    type Config: Clone + std::fmt::Debug + Send + Sync;
    fn new(c: &Self::Config) -> Self;
    /// Cycle-accurate: a row decided by a packet gets the clock at that packet's CYC
    /// (exact rows) and `cycles` is filled.
    fn cycle_acc(&self) -> bool;
    /// Cumulative core cycles so far.
    fn cycles(&self) -> u64;
    /// Take one timing packet; returns its row of the `timing` table.
    fn fact(&mut self, f: &TimingFact) -> TimingRow;
    /// Tracing was enabled again after a TraceStop.
    fn enabled(&mut self);
    /// The clock ignores this packet (it dates nothing; RTIT's E7).
    fn ignores(&self, f: &TimingFact) -> bool;
    /// Without cycle-accurate timing, the TSC of these packets anchors the rows around
    /// them (RTIT: MTC and STS; Intel PT: TSC, MTC and calibrated CYC).
    fn dates_rows(&self, kind: TimingKind) -> bool;
    /// RTIT 4.2.5: a full TNT followed by an overflow whose CYC is 0 carries the
    /// overflow's time, not its last branch's.
    const OVERFLOW_CYC_RULE: bool;
}

/// One column's interpolation state.
#[derive(Clone, Debug, Default)]
struct Stream {
    /// Last anchor since the last gap: (cumulative instructions, value).
    last: Option<(u64, u64)>,
    /// The value of the last anchor before the last gap (None while no anchor has been
    /// seen): what rows after a gap take when no anchor follows them before the next gap.
    floor: Option<u64>,
    /// The rows after the last anchor wait for the next one; they are contiguous, so the
    /// first of them is enough: (piece number, row, cumulative instructions before it).
    pending: Option<(u64, usize, u64)>,
    /// How many rows wait.
    waiting: usize,
    /// The stream offset of the first waiting row's packet (how far back the wait began).
    since: u64,
}

impl Stream {
    /// Row `row` of piece `id`, after `x_before` instructions, placed at stream offset
    /// `offset`, waits for an anchor.
    #[inline]
    fn wait(&mut self, id: u64, row: usize, x_before: u64, offset: u64) {
        if self.pending.is_none() {
            self.pending = Some((id, row, x_before));
            self.since = offset;
        }
        self.waiting += 1;
    }

    /// Rows wait that began to before stream offset `o - MAX_WAIT_BYTES`.
    #[inline]
    fn waited_past(&self, o: u64) -> bool {
        self.pending.is_some() && o.saturating_sub(self.since) > MAX_WAIT_BYTES
    }
}

/// How far (in bytes of trace) rows wait for their next anchor. Past it they take the last
/// anchor's value (as before a gap), so that the pieces held for them are released: a
/// stretch of timing packets with no branch (tracing on, nothing in scope branching, or a
/// hostile trace) would otherwise hold every piece after them, growing with the stretch.
/// Decided in stream order, so the answer is the same however the trace was cut. Real
/// traces never wait this long: a TNT leaves every six branches, a TIP or FUP at every
/// indirect one, and an MTC period is a few hundred bytes of trace at most.
pub const MAX_WAIT_BYTES: u64 = 1 << 20;

/// The TSCs of MTC/STS packets sent while tracing, since the last row: they are spread
/// over the instructions of the rows the next packet places. At most `2 × HALF` are kept
/// (the first and the last `HALF`): a stretch of thousands of MTCs with no branch between
/// them says nothing more about those rows than its two ends do, and keeping every one
/// would let memory follow the stretch.
#[derive(Clone, Debug, Default)]
struct TscGroup {
    head: Vec<u64>,
    tail: VecDeque<u64>,
    /// `head[0]` is already an anchor (applied as soon as a second value came: with two or
    /// more values the first always lands at the current instruction count).
    head_anchored: bool,
}

impl TscGroup {
    const HALF: usize = 256;

    fn len(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    fn is_empty(&self) -> bool {
        self.head.is_empty()
    }

    fn push(&mut self, t: u64) {
        if self.head.len() < Self::HALF {
            self.head.push(t);
        } else {
            if self.tail.len() == Self::HALF {
                self.tail.pop_front();
            }
            self.tail.push_back(t);
        }
    }

    /// The values in order with their index, and how many there are; empties the group.
    fn drain(&mut self) -> (Vec<(usize, u64)>, usize, bool) {
        let m = self.len();
        let anchored = std::mem::take(&mut self.head_anchored);
        let all = self
            .head
            .drain(..)
            .chain(self.tail.drain(..))
            .enumerate()
            .collect();
        (all, m, anchored)
    }
}

impl Mark {
    fn offset(&self) -> u64 {
        match self {
            Mark::Fact(f) => f.offset,
            Mark::Event(o, _) => *o,
        }
    }
    fn is_cyc(&self) -> bool {
        matches!(self, Mark::Fact(f) if f.kind == TimingKind::Cyc)
    }
    /// A packet's CYC comes before these: a CYC after one of them belongs to something
    /// else (the time tracing resumed, a later FUP), never to a packet before it. A PSB
    /// ends any wait for a CYC (the packet reader's rule too). (An
    /// overflow's CYC is the 4.2.5 rule's business, `overflow_rule`.)
    fn ends_cyc_search(&self) -> bool {
        matches!(
            self,
            Mark::Event(
                _,
                EventKind::Psb
                    | EventKind::Error
                    | EventKind::TraceStop
                    | EventKind::Disable
                    | EventKind::Enable
                    | EventKind::Resync
            )
        )
    }
}

/// The timing packets and time-relevant events of a piece, merged in stream order.
fn marks_of<S>(p: &Piece<S>) -> Vec<Mark> {
    let events = p.events.iter().filter(|e| {
        matches!(
            e.kind,
            EventKind::Psb
                | EventKind::TraceStop
                | EventKind::Error
                | EventKind::Enable
                | EventKind::Disable
                | EventKind::Overflow
                | EventKind::Resync
                | EventKind::Interrupt
        )
    });
    let mut out = Vec::with_capacity(p.timing.len());
    let mut ev = events.peekable();
    for f in &p.timing {
        while let Some(e) = ev.next_if(|e| e.offset < f.offset) {
            out.push(Mark::Event(e.offset, e.kind));
        }
        out.push(Mark::Fact(*f));
    }
    out.extend(ev.map(|e| Mark::Event(e.offset, e.kind)));
    out
}

/// Compute what the timeline reads of `p`'s rows ([`Prepared`]) and keep it with the piece;
/// `cycle_acc`: the trace's timing is cycle-accurate ([`Clock::cycle_acc`]; without it no
/// row is exact).
pub fn prepare(p: &mut Piece<BranchColumns>, cycle_acc: bool) {
    p.prepared = Some(Box::new(Prepared {
        // Not needed while nothing is dated yet ([`Timeline::untimed`]): a trace without
        // timing packets never computes it.
        eff: (cycle_acc || !p.timing.is_empty()).then(|| effective_offsets(&p.rows, &p.events)),
        exact: if cycle_acc {
            exact_rows(&p.rows)
        } else {
            Vec::new()
        },
        lead: lead_bound(p),
        decided: highest_decided(&p.rows),
        marks: None,
    }));
}

/// `p`'s [`Prepared`], marks included.
fn prepared(p: &mut Piece<BranchColumns>, cycle_acc: bool) -> &mut Prepared {
    // Prepared by a caller that judged cycle-accurate timing otherwise (its exact rows
    // would not match the rows): prepared again.
    let rows = p.rows.len();
    if p.prepared
        .as_ref()
        .is_none_or(|q| q.exact.len() != if cycle_acc { rows } else { 0 })
    {
        prepare(p, cycle_acc);
    }
    if p.prepared.as_ref().is_some_and(|q| q.marks.is_none()) {
        let marks = marks_of(p);
        p.prepared.as_mut().expect("prepared above").marks = Some(marks);
    }
    p.prepared.as_mut().expect("prepared above")
}

/// Fills `tsc` and `cycles` of rows and computes the `timing` table, piece by piece in
/// trace order. A piece comes back once none of its rows waits for an anchor.
///
/// A timing packet sits among the rows before the first row placed by a later packet
/// (rows are placed by the packet that decided them; direct jumps and calls, which no
/// packet decides, by the next decided row's). `cycles` anchors are the rows whose own
/// packet carries a CYC and the points where tracing resumes, each dated by its CYC;
/// `tsc` anchors are the same in cycle-accurate mode, else every MTC and STS, spread
/// over the rows of the packet that follows them (a TNT packet leaves only when full or
/// forced out, an MTC at once, so the branches it covers may straddle several MTCs).
///
/// Gap events (overflow, error, disable, TraceStop) cut the interpolation: rows waiting
/// when one comes hold the last anchor's value, and the rows after it start from the
/// resume point's CYC, an MTC/STS sent during the gap, or the first anchor after it
/// (`cut`, `resume`; docs/timing.md, "Gaps and disabled stretches").
///
/// The answer does not depend on how the trace was cut into pieces: a piece is
/// processed once the next one is here (its rows' CYCs may be read by the next piece),
/// and timing packets after a piece's last row are carried into the next piece.
pub struct Timeline<C: Clock> {
    /// The clock is cycle-accurate (fixed for the decode).
    cycle_acc: bool,
    clock: C,
    /// Cumulative instructions of the rows so far.
    insns: u64,
    cycles: Stream,
    tsc: Stream,
    /// TSC anchors placed among rows not seen yet: (cumulative instructions, TSC).
    scheduled: VecDeque<(u64, u64)>,
    /// Without cycle-accurate timing: MTC/STS TSCs since the last row, for the next rows.
    group: TscGroup,
    held: VecDeque<Held>,
    /// The fills and highest values of the piece being processed (not yet held).
    cur_fills: Vec<Fill>,
    cur_max: [u64; 2],
    queue: VecDeque<Piece<BranchColumns>>,
    /// Marks after the last row of the previous piece.
    carry: Vec<Mark>,
    /// Between a gap's start (overflow, error, disable, TraceStop, or the start of the
    /// trace) and the point where tracing resumes: timing packets date the gap, not rows.
    in_gap: bool,
    /// Without cycle-accurate timing: the TSC of the last MTC/STS inside the current gap
    /// (the time tracing resumed, to within one MTC period below).
    gap_tsc: Option<u64>,
    next_piece: u64,
    /// Marks at the head of the next piece already handled with this piece's trailing
    /// `jmp`/`call` rows (`process`).
    skip_marks: usize,
    /// The highest `cycles` and `tsc` of the pieces released so far ([`Col`] order).
    max: [u64; 2],
    /// Past this many waiting rows, rows take the last anchor's value (bounded memory for
    /// traces whose anchors are far apart).
    pub max_pending: usize,
    /// Marks (timing packets and events) handled so far, counting those carried from one
    /// piece to the next again: the fuzz target `stretch` checks that it stays a small
    /// multiple of the marks of the trace (carrying a stretch from piece to piece made it
    /// quadratic).
    pub marks_handled: u64,
    /// Pieces are passed over while nothing is dated yet ([`Timeline::untimed`]); off
    /// only in tests, which compare the two paths.
    pub(crate) pass_untimed: bool,
    /// Pieces passed over so far.
    pub passed: u64,
}

impl<C: Clock> Timeline<C> {
    pub fn new(c: &C::Config) -> Self {
        let clock = C::new(c);
        Timeline {
            cycle_acc: clock.cycle_acc(),
            clock,
            insns: 0,
            cycles: Stream::default(),
            tsc: Stream::default(),
            scheduled: VecDeque::new(),
            group: TscGroup::default(),
            held: VecDeque::new(),
            cur_fills: Vec::new(),
            cur_max: [0; 2],
            queue: VecDeque::new(),
            carry: Vec::new(),
            in_gap: true,
            gap_tsc: None,
            next_piece: 0,
            skip_marks: 0,
            max: [0; 2],
            max_pending: 4 << 20,
            marks_handled: 0,
            pass_untimed: true,
            passed: 0,
        }
    }

    /// Add the next piece; returns the pieces, with their `timing` rows, that are done.
    pub fn push(&mut self, p: Piece<BranchColumns>) -> Vec<(Piece<BranchColumns>, TimingColumns)> {
        self.push_timed(p).into_iter().map(Timed::done).collect()
    }

    /// The end of the trace: the last rows take the last anchors' values.
    pub fn finish(&mut self) -> Vec<(Piece<BranchColumns>, TimingColumns)> {
        self.finish_timed().into_iter().map(Timed::done).collect()
    }

    /// [`Timeline::push`], leaving the rows' `cycles` and `tsc` to be written by the
    /// caller ([`Timed::fills`]), on any thread.
    pub fn push_timed(&mut self, p: Piece<BranchColumns>) -> Vec<Timed> {
        self.queue.push_back(p);
        let mut out = Vec::new();
        while self.queue.len() >= 2 {
            let p = self.queue.pop_front().expect("two pieces queued");
            // The next piece's marks: a FUP.BuffOvf there can undo an exact row here (4.2.5).
            let next = prepared(&mut self.queue[0], self.cycle_acc);
            let (marks, lead) = (next.marks.take().unwrap_or_default(), next.lead);
            out.extend(self.process(p, &marks, lead, false));
            self.queue[0]
                .prepared
                .as_mut()
                .expect("prepared above")
                .marks = Some(marks);
        }
        out
    }

    /// [`Timeline::finish`], leaving the rows' time to the caller as
    /// [`Timeline::push_timed`] does.
    pub fn finish_timed(&mut self) -> Vec<Timed> {
        let mut out = Vec::new();
        while let Some(p) = self.queue.pop_front() {
            let last = self.queue.is_empty();
            out.extend(self.process(p, &[], u64::MAX, last));
        }
        self.flush(None);
        out.extend(self.release(true));
        out
    }

    /// Time one piece; `next_marks` are the timing packets and events of the piece after
    /// it, `next_bound` where that piece's first decided row or stop is ([`lead_bound`]);
    /// `last`: no piece follows.
    fn process(
        &mut self,
        p: Piece<BranchColumns>,
        next_marks: &[Mark],
        next_bound: u64,
        last: bool,
    ) -> Vec<Timed> {
        if self.untimed(&p, next_marks) {
            return self.pass(p, next_marks, next_bound, last);
        }
        let id = self.next_piece;
        self.next_piece += 1;
        let mut p = p;
        let mut timing = TimingColumns::default();
        prepared(&mut p, self.cycle_acc);
        let prep = *p.prepared.take().expect("prepared above");
        let own = prep.marks.unwrap_or_default();
        let mut marks = std::mem::take(&mut self.carry);
        let skip = std::mem::take(&mut self.skip_marks);
        if marks.is_empty() && skip == 0 {
            marks = own;
        } else {
            marks.extend_from_slice(&own[skip.min(own.len())..]);
        }
        let mut eff = prep
            .eff
            .unwrap_or_else(|| effective_offsets(&p.rows, &p.events));
        if !last && next_bound != u64::MAX && eff.last() == Some(&u64::MAX) {
            // The `jmp`/`call` rows that end the piece sit where the next piece's first
            // decided row or stop is, as in a decode not cut here: the next piece's marks
            // before that come before them, handled here and skipped there (fuzz finding
            // `mtc-before-undone-fup`).
            for e in eff.iter_mut().rev().take_while(|e| **e == u64::MAX) {
                *e = next_bound;
            }
            let k = next_marks
                .iter()
                .take_while(|m| m.offset() < next_bound)
                .count();
            marks.extend_from_slice(&next_marks[..k]);
            self.skip_marks = k;
        }
        self.marks_handled += marks.len() as u64;
        // Each timing packet is a row of the table (events among the marks are few).
        timing.reserve(marks.len());
        let exact = prep.exact;
        let n = p.rows.len();
        let mut mi = 0;
        let mut i = 0;
        while i <= n {
            // After the last row, what follows belongs with the next piece's first rows.
            // Everything that does not need them is settled now, in stream order, so that
            // a long stretch without rows (junk between PSBs, a disabled stretch, timing
            // packets while nothing branches) is never carried from piece to piece,
            // growing: timing packets go through the clock (their TSCs, while tracing,
            // wait in `group` for the next rows), PSBs and gap events take effect. What
            // stops it is an event whose CYC (cycle-accurate mode) is not in this piece or
            // the next: it waits, with what follows it, for the next piece, as it would
            // if the cut had fallen elsewhere.
            let carry = i == n && !last;
            let bound = if i < n { eff[i] } else { u64::MAX };
            while mi < marks.len() && marks[mi].offset() < bound {
                if carry && !self.settles_now(&marks, mi, next_marks) {
                    break;
                }
                let o = marks[mi].offset();
                if self.cycles.waited_past(o) || self.tsc.waited_past(o) {
                    self.flush(Some((&mut p.rows, id)));
                }
                match marks[mi] {
                    Mark::Event(o, kind) => {
                        mi += 1;
                        if kind == EventKind::TraceStop {
                            // The next enable starts with a PSB; E7 applies after it.
                            self.clock.enabled();
                        }
                        if self.cycle_acc
                            && matches!(kind, EventKind::Disable | EventKind::Interrupt)
                        {
                            // Tracing stops here (or an interrupt is taken): the rows
                            // before end at the FUP's own CYC.
                            self.anchor_at_cyc(&marks, mi, next_marks, o, &mut p.rows, id);
                        }
                        if gap_starts(kind) {
                            self.cut(&mut p.rows, id);
                        }
                        if gap_ends(kind) {
                            // Tracing resumes here: dated by the FUP's (TIP's) own CYC.
                            self.resume(&mut p.rows, id);
                            if self.cycle_acc {
                                self.anchor_at_cyc(&marks, mi, next_marks, o, &mut p.rows, id);
                            }
                        }
                    }
                    Mark::Fact(f) => {
                        mi += 1;
                        // E7: an MTC the clock ignores dates nothing.
                        let ignored = self.clock.ignores(&f);
                        let r = self.clock.fact(&f);
                        timing.push(&r);
                        if !self.cycle_acc && !ignored && self.clock.dates_rows(f.kind) {
                            if let Some(t) = r.tsc {
                                if self.in_gap {
                                    // Sent while nothing was traced: it dates the gap.
                                    // The first one after a stretch that had no anchor
                                    // of its own dates that stretch (from above).
                                    if self.tsc.pending.is_some() {
                                        let x = self.insns;
                                        self.resolve(
                                            Col::Tsc,
                                            Some((x, t)),
                                            Some((&mut p.rows, id)),
                                        );
                                    }
                                    self.gap_tsc = Some(t);
                                } else {
                                    self.group_push(t, &mut p.rows, id);
                                }
                            }
                        }
                    }
                }
            }
            if carry {
                self.carry = marks.split_off(mi);
                break;
            }
            if i < n && self.in_gap {
                // Rows follow, so tracing resumed (after a gap no event closed).
                self.resume(&mut p.rows, id);
            }
            if !self.group.is_empty() {
                // Spread over the rows the next packet places, one alone in their middle;
                // ahead of rows not seen yet, so applied when the rows get there.
                let run = run_insns(&p.rows, &eff, i);
                let (group, m, anchored) = self.group.drain();
                let m = m as u64;
                for (k, t) in group {
                    if k == 0 && anchored {
                        continue;
                    }
                    let x = if m == 1 {
                        self.insns + run / 2
                    } else {
                        self.insns + run * k as u64 / (m - 1)
                    };
                    self.scheduled.push_back((x, t));
                }
            }
            if i == n {
                break;
            }
            // Most rows only wait: no mark before them, no scheduled anchor, not exact.
            // Such a stretch is taken at once (a sum over its instructions) rather than
            // row by row through the state below, which is what it would do to each.
            let next_mark = marks.get(mi).map_or(u64::MAX, Mark::offset);
            if let Some(j) = self.waiting_stretch(&p.rows, &eff, &exact, i, next_mark) {
                let before = self.insns;
                self.insns += p.rows.insns[i..j].iter().map(|&k| k as u64).sum::<u64>();
                let (o, more) = (p.rows.offset[i], j - i - 1);
                if self.cycle_acc {
                    self.cycles.wait(id, i, before, o);
                    self.cycles.waiting += more;
                }
                self.tsc.wait(id, i, before, o);
                self.tsc.waiting += more;
                i = j;
                continue;
            }
            self.insns += p.rows.insns[i] as u64;
            while let Some(&(x, t)) = self.scheduled.front() {
                if x >= self.insns {
                    break;
                }
                self.scheduled.pop_front();
                self.anchor(Col::Tsc, x, t, &mut p.rows, id);
            }
            let x = self.insns;
            let exact_here = if self.cycle_acc && exact[i] {
                self.exact_time(&marks, mi, next_marks, &p.rows, i)
            } else {
                None
            };
            let o = p.rows.offset[i];
            match exact_here {
                Some((c, t)) => {
                    self.anchor(Col::Cycles, x, c, &mut p.rows, id);
                    p.rows.cycles.set_row(i, Some(c), n);
                    fill::raise(&mut self.cur_max, Col::Cycles, c);
                    match t {
                        Some(t) => {
                            self.anchor(Col::Tsc, x, t, &mut p.rows, id);
                            p.rows.tsc.set_row(i, Some(t), n);
                            fill::raise(&mut self.cur_max, Col::Tsc, t);
                        }
                        None => self.tsc.wait(id, i, x - p.rows.insns[i] as u64, o),
                    }
                }
                None => {
                    let before = x - p.rows.insns[i] as u64;
                    if self.cycle_acc {
                        self.cycles.wait(id, i, before, o);
                    }
                    self.tsc.wait(id, i, before, o);
                }
            }
            // Checked row by row (not once a piece), so that where the wait is cut off
            // does not depend on where pieces end.
            if self.cycles.waiting + self.tsc.waiting > self.max_pending {
                self.flush(Some((&mut p.rows, id)));
            }
            i += 1;
        }
        self.held.push_back(Held {
            id,
            piece: p,
            timing,
            fills: std::mem::take(&mut self.cur_fills),
            max: std::mem::take(&mut self.cur_max),
        });
        self.release(false)
    }

    /// Nothing is dated yet, and nothing in `p` or the marks it may take from the next
    /// piece dates anything: no timing packet has been seen (no anchor, nothing
    /// scheduled or waiting in a group, no TSC in a gap), none is in either piece, and
    /// the timing is not cycle-accurate (whose rows take the first CYC's value from
    /// before it). Then every row of `p` stays null whatever follows (the first anchor
    /// gives the rows before it no value: `resolve`), and `p` can be passed over
    /// ([`Timeline::pass`]) rather than walked row by row. So is every piece of a trace
    /// without timing packets.
    fn untimed(&self, p: &Piece<BranchColumns>, next_marks: &[Mark]) -> bool {
        let clear = |s: &Stream| s.last.is_none() && s.floor.is_none() && s.pending.is_none();
        self.pass_untimed
            && !self.cycle_acc
            && p.timing.is_empty()
            && !next_marks.iter().any(|m| matches!(m, Mark::Fact(_)))
            && clear(&self.tsc)
            && clear(&self.cycles)
            && self.scheduled.is_empty()
            && self.group.is_empty()
            && self.gap_tsc.is_none()
            && self.held.is_empty()
            && self.carry.is_empty()
            && self.cur_fills.is_empty()
    }

    /// [`Timeline::process`] of a piece that dates nothing ([`Timeline::untimed`]): its
    /// rows stay null and it is released at once. What `process` would leave for later
    /// pieces is kept: the instruction count, the marks taken from the next piece (for
    /// the `jmp`/`call` rows that end this one), the clock's enables, and whether the
    /// trace is in a gap, which only the marks after the last row decide (a row
    /// resumes tracing). Mark `j` comes after every row when the highest offset of the
    /// marks up to it is at least every row's effective offset (`process` takes the
    /// marks in order, each before the first row whose offset is above it).
    fn pass(
        &mut self,
        mut p: Piece<BranchColumns>,
        next_marks: &[Mark],
        next_bound: u64,
        last: bool,
    ) -> Vec<Timed> {
        self.next_piece += 1;
        self.passed += 1;
        let prepared = p.prepared.take();
        let decided = prepared.as_ref().map(|q| q.decided);
        let own = prepared
            .and_then(|q| q.marks)
            .unwrap_or_else(|| marks_of(&p));
        let skip = std::mem::take(&mut self.skip_marks);
        let own = &own[skip.min(own.len())..];
        let rows = &p.rows;
        let n = rows.len();
        let direct = |k: u8| k == BranchKind::Jmp as u8 || k == BranchKind::Call as u8;
        // The highest effective offset: that of a decided row, or of a `jmp`/`call` row
        // after the last decided one (the first stop after it, else the next piece's
        // first decided row or stop; `effective_offsets` and `process`).
        let decided = decided.unwrap_or_else(|| highest_decided(rows));
        let tail = rows.kind.iter().rev().take_while(|&&k| direct(k)).count();
        let mut highest = decided;
        let mut taken = 0;
        if tail > 0 {
            let i = n - 1;
            let stop = p
                .events
                .iter()
                .find(|e| is_stop(e.kind) && e.seq as usize > i)
                .map_or(u64::MAX, |e| e.offset);
            let mut eff = stop;
            if !last && next_bound != u64::MAX && eff == u64::MAX {
                eff = next_bound;
                taken = next_marks
                    .iter()
                    .take_while(|m| m.offset() < next_bound)
                    .count();
                self.skip_marks = taken;
            }
            // The last row's is the highest of the tail's: the stops after it come no
            // earlier than those after the rows before it.
            highest = highest.max(eff);
        }
        let marks = own.iter().chain(&next_marks[..taken]);
        self.marks_handled += (own.len() + taken) as u64;
        let mut rows_done = n == 0;
        let mut top = 0;
        for m in marks {
            top = top.max(m.offset());
            if !rows_done && top >= highest {
                rows_done = true;
                self.in_gap = false;
            }
            if let Mark::Event(_, kind) = *m {
                if kind == EventKind::TraceStop {
                    self.clock.enabled();
                }
                if gap_starts(kind) {
                    self.in_gap = true;
                }
                if gap_ends(kind) {
                    self.in_gap = false;
                }
            }
        }
        if !rows_done {
            self.in_gap = false;
        }
        self.insns += p.rows.insns.iter().map(|&k| u64::from(k)).sum::<u64>();
        vec![Timed {
            piece: p,
            timing: TimingColumns::default(),
            fills: Fills {
                ops: Vec::new(),
                carry: self.max,
            },
        }]
    }

    /// The end of the stretch of rows from `i` that only wait for an anchor (`i` itself
    /// included), or None when row `i` does more: in each, no mark comes first (the next
    /// is at `next_mark`), no scheduled anchor falls, the row is not exact, and the wait
    /// stays within `max_pending` (the row past it is taken alone, and flushes).
    fn waiting_stretch(
        &self,
        rows: &BranchColumns,
        eff: &[u64],
        exact: &[bool],
        i: usize,
        next_mark: u64,
    ) -> Option<usize> {
        if !self.scheduled.is_empty() {
            return None;
        }
        let per = 1 + usize::from(self.cycle_acc);
        let room = self
            .max_pending
            .saturating_sub(self.cycles.waiting + self.tsc.waiting)
            / per;
        let end = rows.len().min(i.saturating_add(room));
        let quiet = |k: usize| eff[k] <= next_mark && !(self.cycle_acc && exact[k]);
        if i >= end || (self.cycle_acc && exact[i]) {
            return None;
        }
        let mut j = i + 1;
        while j < end && quiet(j) {
            j += 1;
        }
        Some(j)
    }

    /// After a piece's last row: can mark `mi` be settled before the rows that follow it
    /// are known? Everything can, except an event whose time is its CYC (cycle-accurate
    /// mode: disable, interrupt, the resume points) when neither this piece nor the next
    /// says which CYC that is.
    fn settles_now(&self, marks: &[Mark], mi: usize, next_marks: &[Mark]) -> bool {
        match marks[mi] {
            Mark::Fact(_) => true,
            Mark::Event(o, kind) => {
                let dated_by_cyc = matches!(
                    kind,
                    EventKind::Disable
                        | EventKind::Interrupt
                        | EventKind::Overflow
                        | EventKind::Enable
                        | EventKind::Resync
                );
                !(self.cycle_acc && dated_by_cyc) || cyc_search_ends(marks, mi + 1, next_marks, o)
            }
        }
    }

    /// The TSC of an MTC/STS sent while tracing, for the next rows. With two or more in
    /// the group the first lands at the current instruction count whatever the next rows
    /// are, so it anchors at once: the rows waiting before it are settled now, not when
    /// the next row comes (which, after a long stretch without branches, may be far off).
    fn group_push(&mut self, t: u64, rows: &mut BranchColumns, id: u64) {
        self.group.push(t);
        if self.group.len() == 2 && !self.group.head_anchored {
            let x = self.insns;
            // Anchors already scheduled up to here come first, as they would when the
            // next row passes them.
            while let Some(&(xs, ts)) = self.scheduled.front() {
                if xs > x {
                    break;
                }
                self.scheduled.pop_front();
                self.anchor(Col::Tsc, xs, ts, rows, id);
            }
            let first = self.group.head[0];
            self.anchor(Col::Tsc, x, first, rows, id);
            self.group.head_anchored = true;
        }
    }

    /// Anchor both columns at the current row position with the clock at the first CYC
    /// after stream offset `o` (cycle-accurate mode).
    fn anchor_at_cyc(
        &mut self,
        marks: &[Mark],
        mi: usize,
        next_marks: &[Mark],
        o: u64,
        rows: &mut BranchColumns,
        id: u64,
    ) {
        if let Some((c, t)) = self.time_after(marks, mi, next_marks, o) {
            let x = self.insns;
            self.anchor(Col::Cycles, x, c, rows, id);
            if let Some(t) = t {
                self.anchor(Col::Tsc, x, t, rows, id);
            }
        }
    }

    /// A gap starts (overflow, error, disable, TraceStop): nothing after it may date the
    /// rows before it. Timing packets already read since the last row, and anchors
    /// scheduled among rows already seen, are applied first (they come before the gap);
    /// then the rows still waiting take the last anchor's value (hold), and the next rows
    /// start afresh.
    fn cut(&mut self, rows: &mut BranchColumns, id: u64) {
        if self.in_gap {
            return;
        }
        let x = self.insns;
        while let Some((xs, t)) = self.scheduled.pop_front() {
            self.anchor(Col::Tsc, xs.min(x), t, rows, id);
        }
        let (group, _, anchored) = self.group.drain();
        for (k, t) in group {
            if k == 0 && anchored {
                continue;
            }
            self.anchor(Col::Tsc, x, t, rows, id);
        }
        for col in [Col::Cycles, Col::Tsc] {
            let st = self.stream(col);
            if st.last.is_none() && st.floor.is_some() {
                // A stretch between two gaps with no anchor of its own: its rows wait for
                // the first value after it (an MTC/STS sent in this gap, or the next
                // anchor), the nearest to them.
                continue;
            }
            self.resolve(col, None, Some((&mut *rows, id)));
            let st = self.stream(col);
            if let Some((_, v)) = st.last.take() {
                st.floor = Some(v);
            }
        }
        self.in_gap = true;
        self.gap_tsc = None;
    }

    /// Tracing resumes after a gap. Without cycle-accurate timing, an MTC/STS sent during
    /// the gap (MTC and STS keep coming while TriggerEn is set, unless LESS_PKTS) dates the
    /// first row after it from below; with it, the caller anchors at the resume point's
    /// CYC.
    fn resume(&mut self, rows: &mut BranchColumns, id: u64) {
        if !std::mem::take(&mut self.in_gap) {
            return;
        }
        if let Some(t) = self.gap_tsc.take() {
            if !self.cycle_acc {
                let x = self.insns;
                self.anchor(Col::Tsc, x, t, rows, id);
            }
        }
    }

    /// Stop waiting: the anchors scheduled ahead are applied, then every waiting row
    /// takes the last anchor's value. `cur` is the piece being processed, if any.
    fn flush(&mut self, mut cur: Option<(&mut BranchColumns, u64)>) {
        while let Some((x, t)) = self.scheduled.pop_front() {
            self.resolve(
                Col::Tsc,
                Some((x, t)),
                cur.as_mut().map(|(r, id)| (&mut **r, *id)),
            );
            self.tsc.last = Some((x, t));
        }
        self.resolve(
            Col::Cycles,
            None,
            cur.as_mut().map(|(r, id)| (&mut **r, *id)),
        );
        self.resolve(Col::Tsc, None, cur);
    }

    /// (cycles, tsc) at exact row `i`: those of the first CYC after its packet (unless
    /// 4.2.5 says that CYC dates an overflow).
    fn exact_time(
        &self,
        marks: &[Mark],
        mi: usize,
        next_marks: &[Mark],
        rows: &BranchColumns,
        i: usize,
    ) -> Option<(u64, Option<u64>)> {
        let o = rows.offset[i];
        let from = first_after(marks, mi, o);
        let ovf = C::OVERFLOW_CYC_RULE
            && match marks[from..].iter().position(Mark::is_cyc) {
                Some(k) => overflow_rule(&marks[from + k..], next_marks, rows.kind[i]),
                None => match next_marks.iter().position(|m| m.is_cyc() && m.offset() > o) {
                    Some(k) => overflow_rule(&next_marks[k..], &[], rows.kind[i]),
                    None => false,
                },
            };
        if ovf {
            return None;
        }
        self.time_after(marks, mi, next_marks, o)
    }

    /// (cycles, tsc) at the first CYC after stream offset `o`: the clock run on to it.
    /// None when a gap or another enable/disable comes first (the packet's own CYC was
    /// lost, say to damage: the next CYC dates something after the gap).
    fn time_after(
        &self,
        marks: &[Mark],
        mi: usize,
        next_marks: &[Mark],
        o: u64,
    ) -> Option<(u64, Option<u64>)> {
        let from = first_after(marks, mi, o);
        let mut clk = self.clock.clone();
        let mut tsc = None;
        let found = |m: &Mark| m.is_cyc() || m.ends_cyc_search();
        match marks[from..].iter().position(found) {
            Some(k) => {
                if !marks[from + k].is_cyc() {
                    return None;
                }
                for f in facts(&marks[mi..=from + k]) {
                    tsc = clk.fact(&f).tsc;
                }
            }
            None => {
                // Read by the next piece.
                let k = next_marks.iter().position(|m| m.offset() > o && found(m))?;
                if !next_marks[k].is_cyc() {
                    return None;
                }
                for f in facts(&marks[mi..]).chain(facts(&next_marks[..=k])) {
                    tsc = clk.fact(&f).tsc;
                }
            }
        }
        Some((clk.cycles(), tsc))
    }

    /// A new anchor of column `col` at `x` instructions: waiting rows interpolate.
    fn anchor(&mut self, col: Col, x: u64, v: u64, cur: &mut BranchColumns, cur_id: u64) {
        self.resolve(col, Some((x, v)), Some((cur, cur_id)));
        self.stream(col).last = Some((x, v));
    }

    fn stream(&mut self, col: Col) -> &mut Stream {
        match col {
            Col::Cycles => &mut self.cycles,
            Col::Tsc => &mut self.tsc,
        }
    }

    /// Fill the rows waiting in column `col` (every row after the last anchor up to now):
    /// between the last anchor and `next`, or with the last anchor's value when there is
    /// no next one. `cur` is the piece being processed (not yet held) and the row it is at.
    fn resolve(
        &mut self,
        col: Col,
        next: Option<(u64, u64)>,
        cur: Option<(&mut BranchColumns, u64)>,
    ) {
        let st = self.stream(col);
        let (last, floor) = (st.last, st.floor);
        let Some((start_id, start_row, mut x)) = st.pending.take() else {
            return;
        };
        let mut left = std::mem::take(&mut st.waiting);
        // Every waiting row gets the same value unless it lies between two anchors that
        // rise: decided once here, not per row.
        let how = match (col, last, floor) {
            // After a gap, before its first anchor: that anchor's value (held back); with
            // none before the next gap, the value before this gap.
            (_, None, Some(f)) => How::Same(Some(next.map_or(f, |n| n.1))),
            // No TSC before the first STS: the MTC bits alone cannot say which.
            (Col::Tsc, None, None) => How::Same(None),
            _ => match (last, next) {
                (Some(a), Some(b)) if b.0 > a.0 && b.1 >= a.1 => How::Between(a, b),
                // One anchor (or two that do not rise): `interpolate` takes the earlier.
                _ => How::Same(interpolate(last, next, 0)),
            },
        };
        // Long ranges are written later, on another thread ([`Fills::apply`]): here only
        // the range, and the highest value it will hold (its last row's) for the running
        // maximum of the pieces after it. Short ones (a few rows between two anchors, as
        // with cycle-accurate timing) cost less to write at once than to record.
        let fill = |rows: &mut BranchColumns,
                    fills: &mut Vec<Fill>,
                    max: &mut [u64; 2],
                    from: usize,
                    x: &mut u64,
                    left: &mut usize| {
            let to = rows.len().min(from + *left);
            if to <= from {
                return;
            }
            let x0 = *x;
            if to - from <= fill::WRITE_AT_ONCE {
                fill::write(rows, col, from, to, x, how);
            } else {
                if let How::Between(..) = how {
                    *x += rows.insns[from..to].iter().map(|&n| n as u64).sum::<u64>();
                }
                fills.push(Fill {
                    col,
                    from,
                    to,
                    x: x0,
                    how,
                });
            }
            if let Some(v) = how.at(*x) {
                fill::raise(max, col, v);
            }
            *left -= to - from;
        };
        for h in self.held.iter_mut() {
            if h.id < start_id || left == 0 {
                continue;
            }
            let from = if h.id == start_id { start_row } else { 0 };
            fill(
                &mut h.piece.rows,
                &mut h.fills,
                &mut h.max,
                from,
                &mut x,
                &mut left,
            );
        }
        if let Some((rows, id)) = cur {
            if left > 0 {
                let from = if id == start_id { start_row } else { 0 };
                fill(
                    rows,
                    &mut self.cur_fills,
                    &mut self.cur_max,
                    from,
                    &mut x,
                    &mut left,
                );
            }
        }
    }

    /// Hand back the pieces no waiting row belongs to (all of them at the end), each with
    /// what is left to write of its time ([`Fills`]).
    fn release(&mut self, all: bool) -> Vec<Timed> {
        let first_waiting = |s: &Stream| s.pending.map_or(u64::MAX, |p| p.0);
        let keep_from = if all {
            u64::MAX
        } else {
            first_waiting(&self.cycles).min(first_waiting(&self.tsc))
        };
        let mut out = Vec::new();
        while let Some(h) = self.held.front() {
            if !all && h.id >= keep_from {
                break;
            }
            let h = self.held.pop_front().expect("front exists");
            let carry = self.max;
            for (m, h) in self.max.iter_mut().zip(h.max) {
                *m = (*m).max(h);
            }
            out.push(Timed {
                piece: h.piece,
                timing: h.timing,
                fills: Fills {
                    ops: h.fills,
                    carry,
                },
            });
        }
        out
    }
}

/// A piece the timeline has processed, not yet released.
struct Held {
    id: u64,
    piece: Piece<BranchColumns>,
    timing: TimingColumns,
    fills: Vec<Fill>,
    /// The highest `cycles` and `tsc` its rows will hold.
    max: [u64; 2],
}

/// A piece whose time is decided: its `timing` rows, and its `cycles` and `tsc` once
/// `fills` are applied ([`Timed::done`], or [`Fills::apply`] on another thread).
#[derive(Debug)]
pub struct Timed {
    pub piece: Piece<BranchColumns>,
    pub timing: TimingColumns,
    pub fills: Fills,
}

impl Timed {
    /// The piece with its time written.
    pub fn done(mut self) -> (Piece<BranchColumns>, TimingColumns) {
        self.fills.apply(&mut self.piece.rows);
        (self.piece, self.timing)
    }
}

/// Events after which nothing dates the rows before them: the buffer overflowed (its
/// FUP.BuffOvf comes when it has cleared), the decode lost its place, tracing stopped.
/// Tracing resuming is one too (the start of a stretch after a gap).
fn gap_starts(k: EventKind) -> bool {
    matches!(
        k,
        EventKind::Overflow
            | EventKind::Error
            | EventKind::Disable
            | EventKind::TraceStop
            | EventKind::Enable
            | EventKind::Resync
    )
}

/// Events where tracing resumes after a gap.
fn gap_ends(k: EventKind) -> bool {
    matches!(
        k,
        EventKind::Overflow | EventKind::Enable | EventKind::Resync
    )
}

/// The timing packets among `ms`.
fn facts(ms: &[Mark]) -> impl Iterator<Item = TimingFact> + '_ {
    ms.iter().filter_map(|m| match m {
        Mark::Fact(f) => Some(*f),
        Mark::Event(..) => None,
    })
}

/// The first mark from `mi` on after stream offset `o` (marks are in stream order, and
/// those before `mi` are already behind the walk: a short forward scan, not a search).
#[inline]
fn first_after(marks: &[Mark], mi: usize, o: u64) -> usize {
    let mut k = mi;
    while k < marks.len() && marks[k].offset() <= o {
        k += 1;
    }
    k
}

/// Whether the search for the first CYC after stream offset `o` (what `time_after` looks
/// for: a CYC, or a mark that ends the search) ends among `marks[mi..]` or `next_marks`.
fn cyc_search_ends(marks: &[Mark], mi: usize, next_marks: &[Mark], o: u64) -> bool {
    let ends = |m: &Mark| m.offset() > o && (m.is_cyc() || m.ends_cyc_search());
    marks[mi.min(marks.len())..].iter().any(ends) || next_marks.iter().any(ends)
}

/// For each row, the offset of the packet that places it in time: its own for rows
/// decided by a packet; for a direct jump or call, which no packet decides, the first of
/// the next decided row's packet and a FUP.PGD or FUP.FAR the walk reached after it (it
/// retired after the previous packet went out, before that one). `u64::MAX` when
/// neither is in the piece.
/// Events a `jmp` or `call` row before them retired before: the walk reached them after
/// it. A PSB too: the rows walked before its PSB+ applied retired before it went out
/// (fuzz finding `psb-ahead-of-the-walk`).
fn is_stop(k: EventKind) -> bool {
    matches!(
        k,
        EventKind::Psb
            | EventKind::Disable
            | EventKind::Interrupt
            | EventKind::Overflow
            | EventKind::Error
            | EventKind::TraceStop
    )
}

/// Where a `jmp` or `call` row just before piece `p` sits: at `p`'s first decided row or
/// its first stop, whichever comes first (`u64::MAX`: neither).
fn lead_bound(p: &Piece<BranchColumns>) -> u64 {
    let r = &p.rows;
    let decided = (0..r.len())
        .find(|&i| r.kind[i] != BranchKind::Jmp as u8 && r.kind[i] != BranchKind::Call as u8)
        .map_or(u64::MAX, |i| r.offset[i]);
    let stop = p
        .events
        .iter()
        .find(|e| is_stop(e.kind))
        .map_or(u64::MAX, |e| e.offset);
    decided.min(stop)
}

fn effective_offsets(rows: &BranchColumns, events: &[EventRow]) -> Vec<u64> {
    let n = rows.len();
    let mut eff = vec![u64::MAX; n];
    let mut next = u64::MAX;
    // Stops the walk reached, by the row index they follow.
    let stops: Vec<(usize, u64)> = events
        .iter()
        .filter(|e| is_stop(e.kind))
        .map(|e| (e.seq as usize, e.offset))
        .collect();
    let mut si = stops.len();
    for i in (0..n).rev() {
        let k = rows.kind[i];
        if k != BranchKind::Jmp as u8 && k != BranchKind::Call as u8 {
            next = rows.offset[i];
            eff[i] = next;
            continue;
        }
        // The first stop after row i: events with seq > i, the earliest of them.
        while si > 0 && stops[si - 1].0 > i {
            si -= 1;
        }
        let stop = stops.get(si).map_or(u64::MAX, |s| s.1);
        eff[i] = next.min(stop);
    }
    eff
}

/// The highest offset of a row decided by its own packet (not a direct `jmp` or `call`),
/// 0 for none.
fn highest_decided(rows: &BranchColumns) -> u64 {
    let direct = |k: u8| k == BranchKind::Jmp as u8 || k == BranchKind::Call as u8;
    let mut hi = [0u64; 4];
    for (k, (&o, &kind)) in rows.offset.iter().zip(&rows.kind).enumerate() {
        // Branch-free: a direct row counts as offset 0.
        hi[k % 4] = hi[k % 4].max(o * u64::from(!direct(kind)));
    }
    hi.into_iter().max().unwrap_or(0)
}

/// Instructions of the rows placed by the same packet as row `i` (from row `i` on).
fn run_insns(rows: &BranchColumns, eff: &[u64], i: usize) -> u64 {
    if i >= rows.len() {
        return 0;
    }
    let e = eff[i];
    eff[i..]
        .iter()
        .zip(&rows.insns[i..])
        .take_while(|(&x, _)| x == e)
        .map(|(_, &n)| n as u64)
        .sum()
}

/// Rows decided by their own packet that carries a CYC (cycle-accurate mode): TIP and FUP
/// rows, and the last of six rows of one TNT packet.
fn exact_rows(rows: &BranchColumns) -> Vec<bool> {
    let n = rows.len();
    let mut exact = vec![false; n];
    let is_bit = |i: usize| {
        rows.kind[i] == BranchKind::Cond as u8
            || (rows.kind[i] == BranchKind::Ret as u8 && rows.compressed[i])
    };
    let mut i = 0;
    while i < n {
        let k = rows.kind[i];
        if k == BranchKind::Jmp as u8 || k == BranchKind::Call as u8 {
            i += 1;
            continue;
        }
        if !is_bit(i) {
            exact[i] = true; // decided by a TIP or a FUP
            i += 1;
            continue;
        }
        // The rows of one TNT packet share its offset (direct rows between them too).
        let o = rows.offset[i];
        let (mut bits, mut last, mut j) = (0, i, i);
        while j < n && rows.offset[j] == o {
            if is_bit(j) {
                bits += 1;
                last = j;
            }
            j += 1;
        }
        if bits == 6 {
            exact[last] = true;
        }
        i = j;
    }
    exact
}

/// 4.2.5: a full TNT followed by a FUP.BuffOvf whose CYC is 0 carries the overflow's time,
/// not its sixth branch's. `marks` starts at the TNT's CYC; `then` are the marks after
/// them (the next piece's), so the answer does not depend on where pieces end. "Followed"
/// means the very next packet: it was the TNT that overflowed the buffer, and nothing is
/// sent until the FUP.BuffOvf. An overflow further on (after an error, a PSB, other
/// packets) has nothing to do with this TNT (fuzz finding overflow-far-after-tnt: the
/// sequential decode, which saw a later overflow, and the chunked one, which did not,
/// disagreed).
fn overflow_rule(marks: &[Mark], then: &[Mark], kind: u8) -> bool {
    if kind != BranchKind::Cond as u8 && kind != BranchKind::Ret as u8 {
        return false;
    }
    let mut next = marks[1..].iter().chain(then);
    matches!(
        (next.next(), next.next()),
        (
            Some(Mark::Event(_, EventKind::Overflow)),
            Some(Mark::Fact(f)),
        ) if f.kind == TimingKind::Cyc && f.raw == 0
    )
}

#[cfg(test)]
mod tests;
