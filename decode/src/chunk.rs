//! Parallel decoding: chunks of PSB intervals, decoded independently, then stitched.
//!
//! A PSB carries no IP and clears compression state only lazily, so a chunk cannot be
//! decoded alone from its first byte. Each chunk's *body* starts unsynced, with LAST_LIP,
//! LAST_CALL_NLIP and CR3 unknown, and outputs rows from its first resume point (FUP.PGE,
//! FUP.BuffOvf, or a TIP after a known non-PGD flow packet) on. A *stitch* then runs the
//! ordinary walker from the previous chunk's exit state into the chunk until its state
//! equals the body's initial state (same packet cursor, tracing, IP, empty TNT queue):
//! its rows are the chunk's prefix; the body's rows follow. If the stitch never meets the
//! body, it decodes the whole chunk itself: the safety net that keeps parallel output
//! identical to sequential output, for any chunk size.
//!
//! [`decode_all`] runs the pieces in order on one thread; the pipeline runs bodies on a
//! thread pool and stitches in order as they arrive.

use crate::block::BlockCache;
use crate::coverage::Coverage;
use crate::flow::{FlowState, RetStack, Role, RowSink, Stop, Target, TimingFact, Walker};
use crate::front::Format;
use crate::image::ImageSet;
pub use crate::piece::{Piece, PieceStats};
use crate::rows::TimingColumns;
use crate::rows::{BranchColumns, EventRow};
use crate::stream::TraceStream;
use crate::timing::{Clock, Timeline, TimingTable};
use tracemill_schemas::EventKind;

/// A range of the stream from one PSB to another (or the end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub index: usize,
    pub start: u64,
    pub end: u64,
}

/// Cut the stream into chunks of at least `target` bytes, at the format's PSBs: each chunk
/// ends at the first PSB `target` bytes or more past its start. The bytes before the first
/// PSB cannot be parsed (packet boundaries are unknown there) and belong to no chunk; with
/// no PSB at all there is nothing to decode. Only the bytes from each cut to the PSB after
/// it are searched, not the whole trace.
pub fn plan_chunks<F: Format>(stream: &TraceStream<'_>, target: u64) -> Vec<Chunk> {
    plan_chunks_with::<F>(stream, target, |_| {})
}

/// [`plan_chunks`], reporting progress: `searched(offset)` after each chunk is cut, with
/// the offset the search has reached, so that a caller reading a memory map can let the
/// pages the search touched go (the kernel maps pages around each fault, so even short
/// searches spread over the whole trace would make much of it resident).
pub fn plan_chunks_with<F: Format>(
    stream: &TraceStream<'_>,
    target: u64,
    mut searched: impl FnMut(u64),
) -> Vec<Chunk> {
    /// Long stretches without a PSB are searched in steps of this many bytes, reporting
    /// progress after each.
    const STEP: u64 = 16 << 20;
    let len = stream.len();
    let mut find = |from: u64| {
        let mut at = from;
        while at < len {
            let to = at.saturating_add(STEP);
            let hit = F::next_psb_before(stream, at, to);
            searched(hit.map_or(to.min(len), |p| p + F::PSB_LEN));
            if hit.is_some() {
                return hit;
            }
            at = to;
        }
        None
    };
    let mut out = Vec::new();
    let Some(mut start) = find(0) else {
        return out;
    };
    loop {
        let cut = start.saturating_add(target.max(1));
        let end = if cut < len { find(cut) } else { None };
        out.push(Chunk {
            index: out.len(),
            start,
            end: end.unwrap_or(len),
        });
        match end {
            Some(p) => start = p,
            None => return out,
        }
    }
}

/// Shared inputs of every piece of a decode in format `F`.
#[derive(Clone)]
pub struct Input<'a, F: Format> {
    pub stream: &'a TraceStream<'a>,
    pub images: &'a ImageSet<'a>,
    pub cfg: F::Config,
    /// How to turn timing packets into time (bundle facts beyond the recording settings).
    pub timing: <F::Clock as Clock>::Config,
    /// The address space of each place, from a recording's sideband (perf.data): image
    /// lookups use it instead of PIPs' CR3 ([`crate::spaces`]). `None`: the trace's own.
    pub spaces: Option<&'a crate::spaces::Spaces>,
}

/// A chunk body's result.
#[derive(Clone, Debug)]
pub struct Body<F: Format, S> {
    pub chunk: Chunk,
    pub out: Piece<S>,
    /// Where its output starts (None: no resume point in the chunk, or failed).
    pub start: Option<Target<F::State>>,
    /// State at the end of the chunk.
    pub exit: FlowState<F::State>,
    /// Decode this chunk sequentially (the body met something it cannot do alone).
    pub failed: bool,
    /// A gap after the body's start, before its first row, discarded the open count
    /// (`Walker::open_forgotten`).
    pub open_forgotten: bool,
    /// The body held more than its limit ([`decode_body_bounded`]) and was given up (with
    /// `failed`): the [`Stitcher`] walks the chunk itself, handing on pieces of bounded
    /// size as it goes.
    pub gave_up: bool,
}

thread_local! {
    /// Rows per KiB of trace (with an eighth to spare) in the last body this thread
    /// decoded; a quarter of a row per byte before the first.
    static ROWS_PER_KIB: std::cell::Cell<u64> = const { std::cell::Cell::new(256) };
}

/// The state a decode of chunk `chunk` starts in: the start of a sequential decode for
/// the first chunk, a body's unknowns for the others.
fn start_state<F: Format>(input: &Input<'_, F>, chunk: Chunk) -> FlowState<F::State> {
    let first = chunk.index == 0;
    FlowState::start(
        chunk.start,
        !first,
        F::rules(&input.cfg).ret,
        F::start_state(&input.cfg, !first),
    )
}

/// Decode a chunk's body. The first chunk is decoded like a sequential decode.
pub fn decode_body<F: Format, S: RowSink + Default>(
    input: &Input<'_, F>,
    cache: &mut BlockCache,
    chunk: Chunk,
) -> Body<F, S> {
    decode_body_bounded(input, cache, chunk, usize::MAX)
}

/// [`decode_body`], giving the body up (`gave_up`, `failed`, no output) once it holds
/// `limit` rows, events and timing facts: a body cannot hand rows on before its stitch
/// has met it (it may still restart or fail, or the stitch diverge, and throw them all
/// away), so a stretch without PSBs, one chunk however long, is left to the [`Stitcher`],
/// which walks it in order in pieces of bounded size.
pub fn decode_body_bounded<F: Format, S: RowSink + Default>(
    input: &Input<'_, F>,
    cache: &mut BlockCache,
    chunk: Chunk,
    limit: usize,
) -> Body<F, S> {
    cache.trim(crate::block::CACHE_BUDGET);
    let first = chunk.index == 0;
    let role = if first { Role::Chain } else { Role::Body };
    let mut w = Walker::<F, S>::new(
        input.images,
        cache,
        input.stream,
        &input.cfg,
        chunk.end,
        start_state(input, chunk),
        role,
        S::default(),
    );
    w.spaces = input.spaces;
    if limit != usize::MAX {
        w = w.with_piece_limit(limit, true);
    }
    // Room for as many rows as this thread's last body had per byte of trace (a trace's
    // density hardly changes from chunk to chunk): growing the columns by doubling from a
    // fixed guess cost 8% of a decode in copies and page faults on a real program's PT
    // trace (3 rows a byte), and reserving the worst case (six a byte) would make every
    // chunk fault in pages it never uses, which Arrow keeps alive until written.
    let bytes = chunk.end - chunk.start;
    // At most 1 M rows: chunks are 32-128 KiB, but a stretch without PSBs is one chunk
    // however long (its rows grow from there).
    let expect = ROWS_PER_KIB.get().saturating_mul(bytes) / 1024;
    w.rows
        .reserve(expect.min(1 << 20).min(limit as u64) as usize);
    let stop = w.run();
    if stop == Stop::Split {
        return Body {
            chunk,
            out: Piece::default(),
            start: None,
            exit: w.exit_state(),
            failed: true,
            open_forgotten: false,
            gave_up: true,
        };
    }
    if bytes >= 4096 {
        let density = (w.rows.len() as u64 * 1024 / bytes) * 9 / 8 + 16;
        ROWS_PER_KIB.set(density.min(6 * 1024));
    }
    let failed = stop == Stop::Failed;

    let start = if first {
        Some(Target {
            cursor: chunk.start,
            ip: 0,
            bits: Default::default(),
            space: None,
            fe: F::start_state(&input.cfg, false),
            in_tx: false,
        })
    } else {
        w.body_start.take()
    };
    Body {
        chunk,
        start: if failed { None } else { start },
        exit: w.exit_state(),
        failed,
        open_forgotten: w.open_forgotten,
        gave_up: false,
        out: finish_piece(&mut w),
    }
}

/// Run `w` to its range's end or its role's stop, handing each piece it splits off at its
/// limit to `emit`.
fn run_in_pieces<F: Format, S: RowSink + Default>(
    w: &mut Walker<'_, '_, F, S>,
    emit: &mut impl FnMut(Piece<S>),
) -> Stop {
    loop {
        let stop = w.run();
        if stop != Stop::Split {
            return stop;
        }
        let (mut rows, events, timing) = w.split_off();
        let (stats, coverage) = rows.finish();
        emit(Piece {
            rows,
            stats,
            coverage,
            events,
            timing,
            prepared: None,
        });
    }
}

fn finish_piece<F: Format, S: RowSink + Default>(w: &mut Walker<'_, '_, F, S>) -> Piece<S> {
    let mut rows = std::mem::take(&mut w.rows);
    let (stats, coverage) = rows.finish();
    Piece {
        rows,
        stats,
        coverage,
        events: std::mem::take(&mut w.facts.events),
        timing: std::mem::take(&mut w.facts.timing),
        prepared: None,
    }
}

/// The result of stitching chunk `i` onto the state chunk `i-1` left.
#[derive(Clone, Debug)]
pub struct Stitched<F: Format, S> {
    /// Rows, events and timing from the previous exit up to the body's start (or the
    /// whole chunk, when the stitch had to decode it alone).
    pub prefix: Piece<S>,
    /// Whether the body's output follows (false: the stitch decoded the chunk itself).
    pub use_body: bool,
    /// Instructions to add to the body's first row.
    pub carry_insns: u32,
    /// The return-compression state and CR3 at the body's start (for the body's
    /// unknowns).
    pub ret: RetStack,
    pub cr3: Option<u64>,
    /// State after this chunk.
    pub exit: FlowState<F::State>,
}

/// Stitch: walk from `prev_exit` (the previous chunk's exit, with its unknowns already
/// filled in) through `body.chunk` until meeting the body's initial state.
pub fn stitch<F: Format, S: RowSink + Default>(
    input: &Input<'_, F>,
    cache: &mut BlockCache,
    prev_exit: FlowState<F::State>,
    body: &Body<F, S>,
) -> Stitched<F, S> {
    // Without a piece limit the walk never splits: nothing is handed on before the end.
    let mut none = |_: Piece<S>| {};
    stitch_in_pieces(input, cache, Some(prev_exit), body, usize::MAX, &mut none)
}

/// [`stitch`], handing the rows on to `emit` in pieces of about `piece_limit` rows, events
/// and timing facts as it walks (the last piece is the result's `prefix`): a chunk the
/// stitch decodes alone may be a stretch without PSBs of any length. `prev_exit` None:
/// `body` is the first chunk's, given up, and the stitch decodes it from the trace's
/// start.
pub fn stitch_in_pieces<F: Format, S: RowSink + Default>(
    input: &Input<'_, F>,
    cache: &mut BlockCache,
    prev_exit: Option<FlowState<F::State>>,
    body: &Body<F, S>,
    piece_limit: usize,
    emit: &mut impl FnMut(Piece<S>),
) -> Stitched<F, S> {
    let prev_exit = prev_exit.unwrap_or_else(|| start_state(input, body.chunk));
    let target = if body.failed {
        None
    } else {
        body.start.clone()
    };
    let mut w = Walker::<F, S>::new(
        input.images,
        cache,
        input.stream,
        &input.cfg,
        body.chunk.end,
        prev_exit,
        Role::Chain,
        S::default(),
    );
    w.spaces = input.spaces;
    if let Some(t) = target {
        w = w.with_target(t);
    }
    if piece_limit != usize::MAX {
        w = w.with_piece_limit(piece_limit, false);
    }
    let stop = run_in_pieces(&mut w, emit);
    let converged = stop == Stop::Converged;
    if !converged && stop != Stop::End {
        // Diverged: decode the rest of the chunk here.
        w.extend(body.chunk.end, Role::Chain);
        let s = run_in_pieces(&mut w, emit);
        debug_assert_eq!(s, Stop::End);
    }
    let at = w.st.clone();
    let mut exit = if converged {
        body.exit.clone()
    } else {
        w.exit_state()
    };
    if converged {
        // The body did not know these; at its start they were the stitch's. The body's
        // return entries lie on the stitch's (RTIT: its last call, if it saw one).
        exit.ret = exit.ret.over(&at.ret);
        if exit.cr3.is_none() {
            exit.cr3 = at.cr3;
        }
        if exit.cr3_row.is_none() {
            exit.cr3_row = at.cr3_row;
        }
        if body.open_forgotten {
            // A gap in the body, before any row of it, discarded the open count and its
            // partial blocks: the stitch's are lost there as well.
        } else if body.out.rows_len() == 0 {
            exit.open_insns += at.open_insns;
            exit.block_base += at.open_insns;
            // The stitch's partial blocks wait for a later row, before the body's.
            // (Past `Partials::CAP` distinct blocks, as in the sequential decode, the
            // later ones are not counted.)
            let mut p = at.partials.clone();
            for q in exit.partials.iter() {
                p.push(q);
            }
            exit.partials = p;
        } else {
            // The body's first row carries the stitch's open count, and so its partial
            // blocks: they count with the stitch's rows.
            for q in at.partials.iter() {
                w.rows.partial(q);
            }
        }
    }
    Stitched {
        use_body: converged,
        carry_insns: if converged && !body.open_forgotten {
            at.open_insns
        } else {
            0
        },
        ret: at.ret.clone(),
        cr3: at.cr3,
        exit,
        prefix: finish_piece(&mut w),
    }
}

impl<S: RowSink> Piece<S> {
    pub fn rows_len(&self) -> usize {
        self.rows.len()
    }
}

/// Puts pieces in trace order: numbers rows (`seq`), rebases events and timing facts onto
/// the global row count, and keeps only the STS events that change the core/bus ratio
/// (which only stream order can tell).
#[derive(Clone, Debug, Default)]
pub struct Sequencer {
    rows: u64,
    ratio: Option<String>,
}

impl Sequencer {
    /// Rows sequenced so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Make `p` the next piece of the trace.
    pub fn sequence<S: RowSink>(&mut self, p: &mut Piece<S>) {
        let base = self.rows;
        let n = p.stats.rows;
        debug_assert!(p.rows.is_empty() || p.rows.len() as u64 == n);
        // `seq` is base.. in order; writers number rows themselves, so it stays empty here.
        let events = std::mem::take(&mut p.events);
        for mut e in events {
            e.seq += base;
            if e.kind == tracemill_schemas::EventKind::FreqChange {
                // Walkers report every STS; keep those that change the ratio.
                if self.ratio.as_deref() == Some(e.detail.as_str()) {
                    continue;
                }
                let new = std::mem::take(&mut e.detail);
                e.detail = match &self.ratio {
                    Some(old) => format!("core/bus ratio {old} -> {new}"),
                    None => format!("core/bus ratio {new}"),
                };
                self.ratio = Some(new);
            }
            p.events.push(e);
        }
        for t in &mut p.timing {
            t.row += base;
        }
        self.rows += n;
    }
}

/// Everything a decode produced, in order.
#[derive(Clone, Debug, Default)]
pub struct Decoded {
    pub rows: BranchColumns,
    pub events: Vec<EventRow>,
    pub timing: Vec<TimingFact>,
    /// The `timing` table.
    pub timing_rows: TimingColumns,
    pub coverage: Coverage,
    /// The pieces' counts: the rows', and the tail's instructions ([`Stitcher::finish`]).
    pub stats: PieceStats,
    /// Chunks whose stitch had to decode them alone.
    pub fallbacks: usize,
    /// Marks the timeline handled ([`Timeline::marks_handled`]).
    pub marks_handled: u64,
    /// Pieces appended (tests: a walk in pieces did cut).
    pub pieces: u64,
    seq: Sequencer,
}

impl Decoded {
    /// Append the next piece (already timed by a [`Timeline`]).
    pub fn append(&mut self, mut p: Piece<BranchColumns>, t: TimingColumns) {
        self.pieces += 1;
        self.seq.sequence(&mut p);
        self.stats.add(&p.stats);
        self.coverage.merge(std::mem::take(&mut p.coverage));
        self.events.append(&mut p.events);
        self.timing.append(&mut p.timing);
        self.rows.extend_from(&p.rows);
        self.timing_rows.extend_from(&t);
    }
}

/// Stitches chunk bodies in order and hands out pieces in trace order. Feed it bodies in
/// chunk order ([`Stitcher::push`]); it calls `emit` with each piece.
pub struct Stitcher<'i, 'a, F: Format, S = BranchColumns> {
    input: &'i Input<'a, F>,
    cache: BlockCache,
    prev_exit: Option<FlowState<F::State>>,
    /// Rows, events and timing facts per piece the stitch hands on
    /// ([`Stitcher::with_piece_limit`]).
    piece_limit: usize,
    /// Chunks whose stitch had to decode them alone.
    pub fallbacks: usize,
    /// Chunks whose body was given up for its size ([`Body::gave_up`]) and which the
    /// stitch walked in pieces (not counted in `fallbacks`).
    pub walked_in_pieces: usize,
    rows: std::marker::PhantomData<S>,
}

impl<'i, 'a, F: Format, S: RowSink + Default> Stitcher<'i, 'a, F, S> {
    pub fn new(input: &'i Input<'a, F>) -> Self {
        Stitcher {
            input,
            cache: BlockCache::new(),
            prev_exit: None,
            piece_limit: usize::MAX,
            fallbacks: 0,
            walked_in_pieces: 0,
            rows: std::marker::PhantomData,
        }
    }

    /// Hand the stitch's rows on in pieces of about `limit` rows, events and timing facts
    /// (a chunk it decodes alone may be a stretch without PSBs of any length).
    pub fn with_piece_limit(mut self, limit: usize) -> Self {
        self.piece_limit = limit;
        self
    }

    /// The next chunk's body; `emit` receives its stitch prefix and then its rows.
    pub fn push(&mut self, mut body: Body<F, S>, mut emit: impl FnMut(Piece<S>)) {
        match self.prev_exit.take() {
            None if !body.gave_up => {
                self.prev_exit = Some(body.exit);
                emit(body.out);
            }
            pe => {
                self.cache.trim(crate::block::CACHE_BUDGET);
                let s = stitch_in_pieces(
                    self.input,
                    &mut self.cache,
                    pe,
                    &body,
                    self.piece_limit,
                    &mut emit,
                );
                self.prev_exit = Some(s.exit.clone());
                if body.gave_up {
                    self.walked_in_pieces += 1;
                } else if !s.use_body {
                    self.fallbacks += 1;
                }
                fix_body(&mut body, &s);
                let use_body = s.use_body;
                emit(s.prefix);
                if use_body {
                    emit(body.out);
                }
            }
        }
    }
}

impl<F: Format, S: RowSink + Default> Stitcher<'_, '_, F, S> {
    /// After the last chunk: the trace's tail, the instructions the final state holds
    /// that no row carries ([`FlowState::open`]: they ran before a disable, an interrupt
    /// or an overflow with no branch row after it, or before an event's IP), as a piece
    /// of no rows, its count in `stats.insns`, its blocks in the coverage and a `tail`
    /// event at the end of the trace. Without it a trace's instruction count fell short of
    /// libipt's by the instructions before its final FUP + TIP.PGD. The state is the same
    /// however the trace was cut, so is the tail.
    pub fn finish(&mut self, mut emit: impl FnMut(Piece<S>)) {
        let Some(exit) = &self.prev_exit else {
            return;
        };
        let open = exit.open();
        if open.insns == 0 {
            return;
        }
        let mut rows = S::default();
        for b in &open.blocks {
            rows.partial(*b);
        }
        let (mut stats, coverage) = rows.finish();
        stats.insns += open.insns as u64;
        emit(Piece {
            rows,
            stats,
            coverage,
            events: vec![EventRow {
                seq: 0,
                offset: self.input.stream.len(),
                kind: EventKind::Tail,
                ip: None,
                tsc: None,
                detail: open.insns.to_string(),
            }],
            timing: Vec::new(),
            prepared: None,
        });
    }
}

/// Apply a stitch's findings to its body's output.
pub fn fix_body<F: Format, S: RowSink>(body: &mut Body<F, S>, s: &Stitched<F, S>) {
    if !body.out.rows.is_empty() {
        body.out.rows.add_insns(0, s.carry_insns);
        body.out.stats.insns += s.carry_insns as u64;
    }
    if s.cr3.is_some() {
        // Rows before the body's first PIP did not know the CR3: it is the stitch's.
        body.out.rows.set_leading_cr3(s.cr3);
    }
}

/// Decode the whole trace one chunk after another on this thread, with chunks of at
/// least `chunk_bytes` (`u64::MAX`: one chunk, a plain sequential decode).
pub fn decode_all<F: Format>(input: &Input<'_, F>, chunk_bytes: u64) -> Decoded {
    decode_all_bounded(input, chunk_bytes, usize::MAX, usize::MAX)
}

/// [`decode_all`] as the pipeline decodes in bounded memory: bodies given up past
/// `body_limit` rows, events and timing facts ([`decode_body_bounded`]), and those chunks
/// walked by the stitcher in pieces of about `piece_limit`.
pub fn decode_all_bounded<F: Format>(
    input: &Input<'_, F>,
    chunk_bytes: u64,
    body_limit: usize,
    piece_limit: usize,
) -> Decoded {
    let mut out = Decoded::default();
    let mut timeline = Timeline::<F::Clock>::new(&input.timing);
    let fallbacks =
        decode_pieces::<F, BranchColumns>(input, chunk_bytes, body_limit, piece_limit, |p| {
            for (p, t) in timeline.push(p) {
                out.append(p, t);
            }
        });
    for (p, t) in timeline.finish() {
        out.append(p, t);
    }
    out.fallbacks = fallbacks;
    out.marks_handled = timeline.marks_handled;
    out
}

/// Decode the whole trace on this thread into pieces of sink `S`, in trace order (chunk
/// bodies and their stitches, as [`decode_all_bounded`]), each handed to `emit`; returns
/// the number of chunks whose stitch decoded them alone.
pub fn decode_pieces<F: Format, S: RowSink + Default>(
    input: &Input<'_, F>,
    chunk_bytes: u64,
    body_limit: usize,
    piece_limit: usize,
    mut emit: impl FnMut(Piece<S>),
) -> usize {
    let chunks = plan_chunks::<F>(input.stream, chunk_bytes);
    let mut cache = BlockCache::new();
    let mut st = Stitcher::<F, S>::new(input).with_piece_limit(piece_limit);
    for c in chunks {
        let body: Body<F, S> = decode_body_bounded(input, &mut cache, c, body_limit);
        st.push(body, &mut emit);
    }
    st.finish(&mut emit);
    st.fallbacks
}

/// What a decode that keeps no row produces ([`crate::tally`]), in order.
#[derive(Clone, Debug, Default)]
pub struct Tallied {
    pub stats: PieceStats,
    pub events: Vec<EventRow>,
    pub timing_rows: TimingColumns,
    pub coverage: Coverage,
    pub fallbacks: usize,
}

/// Decode the whole trace on this thread without keeping rows: sink `S` counts them (and
/// their coverage, [`crate::tally::Covered`]); the `timing` table comes from the clock
/// alone ([`TimingTable`]). Everything equals what [`decode_all`] finds.
pub fn tally_all<F: Format, S: RowSink + Default>(
    input: &Input<'_, F>,
    chunk_bytes: u64,
) -> Tallied {
    let mut out = Tallied::default();
    let mut seq = Sequencer::default();
    let mut table = TimingTable::<F::Clock>::new(&input.timing);
    out.fallbacks = decode_pieces::<F, S>(input, chunk_bytes, usize::MAX, usize::MAX, |mut p| {
        seq.sequence(&mut p);
        out.timing_rows.extend_from(&table.piece(&p));
        out.stats.add(&p.stats);
        out.coverage.merge(std::mem::take(&mut p.coverage));
        out.events.append(&mut p.events);
    });
    out
}
