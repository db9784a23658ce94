//! Instruction flow: walk the code images along the trace and emit one row per executed
//! branch (spec 2.2, Table 19).
//!
//! The walker keeps the small decoding states — LAST_LIP ([`LastIp`]), queued TNT bits
//! ([`TntQueue`]), the last call's return address ([`LastCall`]) — and consumes *flow items*
//! (TNT, TIP, FUP.FAR+TIP, FUP.PGD[+TIP], FUP.PGE, FUP.BuffOvf, TraceSTOP) as the code
//! needs them. Timing packets, PSB and PIP are taken in stream order along the way.
//!
//! Rules that decide where a packet applies:
//! - a cond branch takes the next TNT bit; a RET takes a bit when one is queued or the next
//!   flow packet is a TNT (return compression), else a TIP; indirect JMP/CALL take a TIP;
//!   far transfers take FUP.FAR + TIP, or FUP.PGD (leaving the traced context);
//! - when no TNT bit is queued, the next flow packet is read at once. A FUP.FAR or FUP.PGD
//!   with IP X then applies at the first instruction boundary where IP == X (interrupts,
//!   walking out of the filter region), or right after the branch whose sequential NLIP
//!   is X (the other reading of "NLIP" for a jump out of the region); FUP.PGE,
//!   FUP.BuffOvf and TraceSTOP apply at once;
//! - E1: a FUP.FAR pointing inside the far transfer instruction counts as its NLIP;
//!   E2: a FUP.PGD after a FUP.PGD with no FUP.PGE between is ignored;
//!   E5: a TIP right after a FUP.BuffOvf with the same IP is ignored;
//!   E8 and any other inconsistency (a TIP where a TNT bit is due, code no image covers):
//!   an `error` event, the rows since the last decided one dropped, and a resync.
//!
//! Resync (at the start, after an error, at a chunk start): tracing resumes at a FUP.PGE,
//! a FUP.BuffOvf, or a TIP whose previous flow packet is known and not a FUP.PGD (a TIP
//! after a PGD is the target of a far transfer out of the traced region, 4.2.9).

use tracemill_schemas::{BranchKind, EventKind, TimingKind};

use crate::block::{BlockCache, BlockEnd};
use crate::config::TraceConfig;
use crate::image::ImageSet;
use crate::insn::InsnClass;
use crate::last_ip::LastIp;
use crate::loop_guard::LoopGuard;
use crate::packet::{FupKind, Packet, PacketError, PacketReader, Tnt};
use crate::piece::PieceStats;
pub use crate::piece::TimingFact;
use crate::rows::{BranchColumns, BranchRow, EventRow, PartialBlock};
use crate::stream::TraceStream;
use crate::tnt::TntQueue;

/// What the decoder knows of RTIT_LAST_CALL_NLIP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LastCall {
    /// The NLIP of the last traced near call.
    Known(u64),
    /// Cleared (after FUP.BuffOvf): no RET can be compressed.
    None,
    /// Unknown because a parallel chunk started here: the true value is in the previous
    /// chunk. A compressed RET now means this chunk's body started too early.
    FromChunkStart,
    /// Unknown after a gap (start of the trace, an error): a compressed RET cannot be
    /// resolved.
    AfterGap,
}

/// Tracing state of the walker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Position unknown: waiting for a resume point.
    Unsynced,
    /// Packet generation disabled (after FUP.PGD).
    Disabled,
    /// TraceSTOP seen: waiting for a new enable.
    Stopped,
    /// Walking instructions at `ip`.
    Tracing,
}

/// The previous flow packet (what a TIP after it means; E2 and E5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrevFlow {
    Unknown,
    Tnt,
    Tip,
    Pge,
    Pgd,
    BuffOvf(Option<u64>),
    Far,
    TraceStop,
}

/// Everything the walk depends on: a chunk's exit state is the next stitch's start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowState {
    pub mode: Mode,
    pub ip: u64,
    pub tnt: TntQueue,
    /// Offset of the TNT packet the queued bits came from.
    pub tnt_off: u64,
    pub last_ip: LastIp,
    pub last_call: LastCall,
    pub cr3: Option<u64>,
    /// CR3 as of the last packet consumed: what rows are stamped with (a row's CR3 is the
    /// one from the last PIP before the packet that decided it).
    pub cr3_row: Option<u64>,
    /// Instructions retired since the last row.
    pub open_insns: u32,
    /// Where the current basic block began, and the open count when it did.
    pub block_start: u64,
    pub block_base: u32,
    /// Address of the last instruction walked when the walk stopped inside a block (at a
    /// pending FUP's IP) or crossed a block split: where a partial block ends.
    pub last_insn: u64,
    /// Partial blocks since the last row: their instructions are in `open_insns` and go
    /// into the next row, with which they count in coverage.
    pub partials: Partials,
    /// Offset of the packet that decided the last decided row (or resumed tracing).
    pub decision: u64,
    pub prev: PrevFlow,
    /// Sequential NLIP of the last branch walked (for FUP.PGD's second reading).
    pub prev_nlip: u64,
    /// Tracing resumed here and no instruction has been walked since.
    pub resumed_at: Option<u64>,
    /// The last thing walked was a branch (for FUP.PGD's second reading).
    pub after_branch: bool,
    /// Reader position (a packet boundary) and whether a CYC is due there.
    pub cursor: u64,
    pub want_cyc: bool,
}

impl FlowState {
    /// State at the start of a trace or of a parallel chunk at `cursor`.
    pub fn start(cursor: u64, chunk_start: bool) -> Self {
        FlowState {
            mode: Mode::Unsynced,
            ip: 0,
            tnt: TntQueue::new(),
            tnt_off: 0,
            last_ip: LastIp::unknown(),
            last_call: if chunk_start {
                LastCall::FromChunkStart
            } else {
                LastCall::AfterGap
            },
            cr3: None,
            cr3_row: None,
            open_insns: 0,
            block_start: 0,
            block_base: 0,
            last_insn: 0,
            partials: Partials::default(),
            decision: cursor,
            prev: PrevFlow::Unknown,
            prev_nlip: 0,
            resumed_at: None,
            after_branch: false,
            cursor,
            want_cyc: false,
        }
    }
}

/// Partial blocks waiting for the row that carries their instructions (usually none or
/// one). The same block left again before a row adds to its count instead of taking a
/// place: a stretch of enables and disables at one address with no branch between them
/// (fuzz finding partials-without-rows) is one item. Any number of distinct blocks wait
/// (up to [`Partials::CAP`]), and they travel with the state across chunk seams, so that
/// a stitch hands on exactly what the sequential decode holds (fuzz finding
/// five-distinct-partials).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Partials {
    items: Vec<Partial>,
}

/// A partial block: (start, last instruction, instructions, times left).
pub type Partial = (u64, u64, u32, u32);

impl Partials {
    /// Distinct blocks that can wait at once. Each needs an enable and a disable (or an
    /// interrupt) inside code, so a trace cannot reach this without megabytes of exactly
    /// that; past it, further distinct blocks are not counted, in every decode alike.
    pub const CAP: usize = 4096;

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = Partial> + '_ {
        self.items.iter().copied()
    }

    /// Add one (or add to the count of the same block); false when it cannot wait (a new
    /// block past [`Partials::CAP`]).
    pub fn push(&mut self, p: Partial) -> bool {
        if let Some(q) = self
            .items
            .iter_mut()
            .find(|q| (q.0, q.1, q.2) == (p.0, p.1, p.2))
        {
            q.3 = q.3.saturating_add(p.3);
            return true;
        }
        if self.items.len() == Self::CAP {
            return false;
        }
        self.items.push(p);
        true
    }

    pub fn clear(&mut self) {
        self.items.clear();
    }
}

/// One flow item.
#[derive(Clone, Copy, Debug)]
enum Item {
    Tnt {
        tnt: Tnt,
        off: u64,
    },
    /// `anchor`: the flow packet before it is known and is not a PGD, so tracing can
    /// resume here.
    Tip {
        ip: Option<u64>,
        off: u64,
        anchor: bool,
    },
    /// FUP.FAR and the TIP after it (None: the next flow packet was not a TIP).
    Far {
        ip: Option<u64>,
        off: u64,
        tip: Option<(Option<u64>, u64)>,
    },
    /// FUP.PGD and a TIP right after it (a far transfer out of the region, rows 30/31).
    Pgd {
        ip: Option<u64>,
        off: u64,
        tip: Option<(Option<u64>, u64)>,
    },
    Pge {
        ip: Option<u64>,
        off: u64,
    },
    BuffOvf {
        ip: Option<u64>,
        off: u64,
    },
    TraceStop {
        off: u64,
    },
    Error(PacketError),
    /// (Look-ahead only) the next flow packet is a FUP.FAR or FUP.PGD, left unread.
    FupNext,
    /// (Look-ahead only) no flow packet within [`MAX_LOOKAHEAD_BYTES`] of the FUP.
    NoneNear,
    End,
}

thread_local! {
    /// Bytes of trace read by the walkers of this thread, re-reads included (see
    /// [`bytes_read_on_this_thread`]).
    static READ: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Bytes of trace the walkers of this thread have read so far, counting every re-read (a
/// look-ahead undone at a chunk's end and read again by the next stitch). Sequential
/// decoding reads each byte once; a stitched decode reads a chunk's head twice and the
/// bytes of an undone look-ahead again. The fuzz target `stretch` checks that this stays
/// a small multiple of the trace, whatever its content: a quadratic re-read (a FUP's
/// look-ahead over megabytes, read again by every chunk's stitch) shows here first.
pub fn bytes_read_on_this_thread() -> u64 {
    READ.with(|r| r.get())
}

/// How far past a FUP.FAR or FUP.PGD the walker looks for its TIP. The hardware sends the
/// two for one instruction; only a PSB+ and timing packets can come between them (a few
/// dozen bytes). Without a bound, a FUP followed by megabytes of timing packets and PSBs
/// (tracing on, nothing branching; or a hostile trace) made every look-ahead read the whole
/// stretch and keep its packets, and every chunk's stitch read it again from the FUP:
/// quadratic time, memory of 500 times the stretch. Past the bound the FUP has no TIP.
/// Counted in stream bytes from the FUP, so every decode, however cut, agrees.
pub const MAX_LOOKAHEAD_BYTES: u64 = 4096;

/// Why a walk stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The reader's range is exhausted (end of trace, or end of chunk).
    End,
    /// (Stitch) the state equals the next body's initial state.
    Converged,
    /// (Stitch) passed the body's start without meeting its state.
    Diverged,
    /// (Body) a compressed RET before any call: the body started too early; it restarts
    /// at the cursor in its state.
    Restart,
    /// (Body) something needs state from before the chunk (e.g. an unknown CR3 with
    /// several address spaces at this address): decode this chunk sequentially.
    Failed,
}

/// What the walker is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Decoding a whole trace: everything is output; at the end, rows not decided by a
    /// packet are dropped.
    Sequential,
    /// Decoding to the end of a range that is not the end of the trace (the first chunk,
    /// or a chunk a stitch decodes alone): everything is output.
    Chain,
    /// A parallel chunk body: output starts after its first resume point (the stitch
    /// covers what comes before).
    Body,
    /// A stitch: walks until its state equals `Target`'s.
    Stitch(Target),
}

/// A body's initial state, which the stitch must meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    pub cursor: u64,
    pub ip: u64,
}

/// Receives branch rows. The columns builder is the normal sink; a counting sink measures
/// the walk alone.
pub trait RowSink {
    /// Append a row (the walker leaves `tsc` and `cycles` to the timing pass) and the
    /// basic block it closes: (first instruction, instructions in the block).
    fn push(&mut self, r: &BranchRow, block: (u64, u32));
    /// A partial block (start, last instruction, instructions, times) whose instructions
    /// the next row pushed carries; `truncate` drops it with that row.
    fn partial(&mut self, _p: Partial) {}
    /// Room for about `n` more rows.
    fn reserve(&mut self, _n: usize) {}
    /// The walk is over: complete the rows, count them, aggregate their coverage.
    fn finish(&mut self) -> (PieceStats, crate::coverage::Coverage) {
        Default::default()
    }
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn truncate(&mut self, n: usize);
    /// Add `n` instructions to row `i` (a stitch's open count onto a body's first row).
    fn add_insns(&mut self, i: usize, n: u32);
}

impl RowSink for BranchColumns {
    #[inline]
    fn push(&mut self, r: &BranchRow, block: (u64, u32)) {
        BranchColumns::push_flow(self, r);
        self.block_start.push(block.0);
        self.block_insns.push(block.1);
    }
    fn partial(&mut self, p: Partial) {
        self.partials.push(PartialBlock {
            row: self.len() as u64,
            start: p.0,
            end: p.1,
            insns: p.2,
            times: p.3,
        });
    }
    fn reserve(&mut self, n: usize) {
        BranchColumns::reserve(self, n)
    }
    fn finish(&mut self) -> (PieceStats, crate::coverage::Coverage) {
        self.pad_timing();
        let mut cov = crate::coverage::Coverage::default();
        cov.add_rows(self);
        // The block columns have served; free them before the rows travel on.
        self.block_start = Vec::new();
        self.block_insns = Vec::new();
        self.partials = Vec::new();
        self.shrink_to_fit();
        (PieceStats::of(self), cov)
    }
    fn len(&self) -> usize {
        BranchColumns::len(self)
    }
    fn truncate(&mut self, n: usize) {
        BranchColumns::truncate(self, n)
    }
    fn add_insns(&mut self, i: usize, n: u32) {
        self.insns[i] += n;
    }
}

/// Counts rows and instructions without storing them.
#[derive(Clone, Copy, Debug, Default)]
pub struct CountSink {
    pub rows: usize,
    pub insns: u64,
}

impl RowSink for CountSink {
    #[inline]
    fn push(&mut self, r: &BranchRow, _block: (u64, u32)) {
        self.rows += 1;
        self.insns += r.insns as u64;
    }
    fn len(&self) -> usize {
        self.rows
    }
    fn truncate(&mut self, n: usize) {
        self.rows = n;
    }
    fn add_insns(&mut self, _i: usize, n: u32) {
        self.insns += n as u64;
    }
    fn finish(&mut self) -> (PieceStats, crate::coverage::Coverage) {
        let stats = PieceStats {
            insns: self.insns,
            by_kind: [0; 8],
        };
        (stats, Default::default())
    }
}

/// The instruction-flow walker over one range of the stream.
pub struct Walker<'a, 'c, S: RowSink> {
    images: &'a ImageSet<'a>,
    cache: &'c mut BlockCache,
    reader: PacketReader<'a>,
    #[allow(dead_code)]
    cfg: TraceConfig,
    pub st: FlowState,
    la: Option<Item>,
    pending: Option<Item>,
    /// The CR3 of PIPs read between a FUP.FAR or FUP.PGD and its TIP, while the FUP's item
    /// waits in `la`. Such a PIP belongs to the transfer: the code up to the FUP's IP still
    /// runs in the old address space, so it takes effect when the item is consumed
    /// (fuzz finding cr3-across-psb: a block looked up with the new CR3 found no image).
    cr3_after_fup: Option<Option<u64>>,
    role: Role,
    /// (Body) has resumed once; output before that is dropped.
    started: bool,
    /// Rows from here on are not decided by a packet yet.
    tail_start: usize,
    pub rows: S,
    pub events: Vec<EventRow>,
    pub timing: Vec<TimingFact>,
    /// (Body) cursor and IP right after the resume point its output starts from.
    pub body_start: Option<Target>,
    /// Rows and NLIP right after the last branch (for FUP.PGD's second reading).
    alt_pgd: Option<(usize, u64)>,
    /// The block at this address, from the last block's successor link.
    hint: Option<(u64, u32)>,
    /// Guards the walk against running on without consuming anything.
    spin: LoopGuard,
    /// The guard fired inside the hot loop: report it from the general walk.
    stuck: bool,
    /// Reading the packet after a FUP.FAR / FUP.PGD: a further FUP is left unread
    /// (look-ahead never nests, so a run of FUPs cannot exhaust the stack).
    looking_ahead: bool,
    /// While looking ahead: no packet starting past this offset is read for the FUP.
    la_limit: u64,
    /// Where the reader started, and the bytes read then undone (a look-ahead), for
    /// [`bytes_read_on_this_thread`].
    read_from: u64,
    undone: u64,
    /// Events of packets read during that look-ahead (PSB, STS, PIP). They follow the
    /// FUP in the stream, but the FUP's own event, and the rows walked up to its IP,
    /// come out only once the FUP is applied: these wait until then, so that `events`
    /// stays in stream order and their `seq` counts those rows.
    deferred: Vec<EventRow>,
    /// (Body) the open instruction count was discarded (a gap) after the body's start and
    /// before any row that is kept: the stitch's open count and partial blocks do not
    /// reach the body's first row (the sequential decode loses them at that gap too).
    pub open_forgotten: bool,
}

impl<'a, 'c, S: RowSink> Walker<'a, 'c, S> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        images: &'a ImageSet<'a>,
        cache: &'c mut BlockCache,
        stream: &'a TraceStream<'a>,
        cfg: TraceConfig,
        end: u64,
        st: FlowState,
        role: Role,
        rows: S,
    ) -> Self {
        let mut reader = PacketReader::new(stream, st.cursor, end, cfg.cycle_acc);
        reader.seek(st.cursor, st.want_cyc);
        let st_cursor = st.cursor;
        Walker {
            images,
            cache,
            reader,
            cfg,
            st,
            la: None,
            cr3_after_fup: None,
            pending: None,
            role,
            started: role != Role::Body,
            tail_start: 0,
            rows,
            events: Vec::new(),
            timing: Vec::new(),
            body_start: None,
            alt_pgd: None,
            hint: None,
            spin: LoopGuard::default(),
            stuck: false,
            looking_ahead: false,
            la_limit: u64::MAX,
            read_from: st_cursor,
            undone: 0,
            deferred: Vec::new(),
            open_forgotten: false,
        }
    }

    /// The state to hand on (valid after `Stop::End`, when nothing is looked ahead).
    pub fn exit_state(&self) -> FlowState {
        let mut s = self.st.clone();
        s.cursor = self.reader.pos();
        s.want_cyc = self.reader.wants_cyc();
        s
    }

    /// Let the stitch read further (into the next chunk).
    pub fn end(&self) -> u64 {
        self.reader.end()
    }

    pub fn extend(&mut self, end: u64, role: Role) {
        self.reader.set_end(end);
        self.role = role;
    }

    /// Walk until the range ends or the role says stop.
    pub fn run(&mut self) -> Stop {
        loop {
            let r = match self.st.mode {
                Mode::Tracing => self.walk(),
                _ => self.idle(),
            };
            if let Some(stop) = r {
                self.flush_deferred(u64::MAX);
                if stop == Stop::End && self.role == Role::Sequential {
                    // End of the trace: rows after the last decided one are unproven.
                    self.drop_tail();
                }
                return stop;
            }
        }
    }

    // ----- output -------------------------------------------------------------------

    fn event(&mut self, offset: u64, kind: EventKind, ip: Option<u64>, detail: String) {
        let e = EventRow {
            seq: self.rows.len() as u64,
            offset,
            kind,
            ip,
            tsc: None,
            detail,
        };
        if self.looking_ahead {
            self.deferred.push(e);
        } else {
            self.flush_deferred(offset);
            self.events.push(e);
        }
    }

    /// Emit the deferred look-ahead events that precede stream offset `before`, counting
    /// the rows walked since they were read.
    #[inline]
    fn flush_deferred(&mut self, before: u64) {
        if self.deferred.is_empty() {
            return;
        }
        let seq = self.rows.len() as u64;
        let k = self.deferred.partition_point(|e| e.offset < before);
        for mut e in self.deferred.drain(..k) {
            e.seq = seq;
            self.events.push(e);
        }
    }

    #[inline]
    fn row(&mut self, ip: u64, target: Option<u64>, kind: BranchKind, taken: bool, off: u64) {
        self.push_row(ip, target, kind, taken, false, off);
    }

    /// Emit a row for the branch at `ip`: it closes the open instruction count and the
    /// current basic block (which began at `block_start`, `block_base` instructions into
    /// the open count); the next block begins at `target`.
    #[inline]
    fn push_row(
        &mut self,
        ip: u64,
        target: Option<u64>,
        kind: BranchKind,
        taken: bool,
        compressed: bool,
        off: u64,
    ) {
        let r = BranchRow {
            ip,
            target,
            kind,
            taken,
            compressed,
            insns: self.st.open_insns,
            tsc: None,
            cycles: None,
            cr3: self.st.cr3_row,
            offset: off,
        };
        let block = (self.st.block_start, self.st.open_insns - self.st.block_base);
        if !self.st.partials.is_empty() {
            // Partial blocks since the last row: this row carries their instructions.
            for p in self.st.partials.iter() {
                self.rows.partial(p);
            }
            self.st.partials.clear();
        }
        self.st.open_insns = 0;
        self.st.block_base = 0;
        self.st.block_start = target.unwrap_or(0);
        self.rows.push(&r, block);
    }

    /// A new basic block begins at `ip` (tracing resumed, or an asynchronous transfer
    /// landed there); the current one was closed before (`close_block`).
    #[inline]
    fn enter_block(&mut self, ip: u64) {
        self.st.block_start = ip;
        self.st.block_base = self.st.open_insns;
    }

    /// Execution leaves the current block at `st.ip` without its branch (an interrupt,
    /// FUP.PGD, FUP.BuffOvf, TraceSTOP, a FUP.PGE while tracing): the instructions it ran
    /// make a partial block, from `block_start` through `last_insn`. It counts in
    /// coverage with the next row, which carries its instructions.
    fn close_block(&mut self) {
        let n = self.st.open_insns.saturating_sub(self.st.block_base);
        if n > 0 {
            let p = (self.st.block_start, self.st.last_insn, n, 1);
            // Past `Partials::CAP` distinct blocks it is not counted (see there).
            self.st.partials.push(p);
        }
        self.st.block_base = self.st.open_insns;
    }

    /// The open instruction count is discarded (a gap): so are the partial blocks it
    /// holds, including any the sink holds for the next row.
    fn forget_open(&mut self) {
        if self.started && self.rows.len() == 0 {
            self.open_forgotten = true;
        }
        self.st.open_insns = 0;
        self.st.block_base = 0;
        self.st.partials.clear();
        let n = self.rows.len();
        self.rows.truncate(n);
    }

    /// The rows so far are decided by packets.
    #[inline]
    fn decided(&mut self, off: u64) {
        self.st.decision = off;
        self.tail_start = self.rows.len();
        self.alt_pgd = None;
    }

    fn drop_tail(&mut self) {
        if self.rows.len() > self.tail_start {
            self.rows.truncate(self.tail_start);
            let n = self.tail_start as u64;
            for e in self.events.iter_mut().chain(&mut self.deferred) {
                e.seq = e.seq.min(n);
            }
            for t in &mut self.timing {
                t.row = t.row.min(n);
            }
        }
    }

    /// A gap: report, drop what is unproven, and look for a resume point.
    fn gap(&mut self, offset: u64, detail: String) {
        self.event(offset, EventKind::Error, Some(self.st.ip), detail);
        self.drop_tail();
        self.st.mode = Mode::Unsynced;
        self.st.tnt.clear();
        self.forget_open();
        // Whatever it was, even unknown at a chunk's start: after a gap the sequential
        // decode has lost it too, and a stitch that converged before the gap must not
        // hand its own value on past it (fuzz finding stitch-last-call).
        self.st.last_call = LastCall::AfterGap;
    }

    /// Tracing resumes at `ip`, decided by the packet at `off`.
    fn resume(&mut self, ip: u64, off: u64) {
        self.st.mode = Mode::Tracing;
        self.st.ip = ip;
        self.enter_block(ip);
        self.st.resumed_at = Some(ip);
        self.st.tnt.clear();
        self.decided(off);
        if !self.started {
            // A body's output starts here; the stitch covers everything before.
            self.started = true;
            self.rows.truncate(0);
            self.events.clear();
            self.deferred.clear();
            self.timing.clear();
            self.tail_start = 0;
            self.forget_open();
            // That was the body's start, not a gap after it.
            self.open_forgotten = false;
            self.body_start = Some(Target {
                cursor: self.reader.pos(),
                ip,
            });
        }
    }

    // ----- packets ----------------------------------------------------------------

    /// Next flow item; timing packets, PSB and PIP on the way are taken in order.
    fn next_item(&mut self) -> Item {
        if !self.looking_ahead {
            // The FUP whose look-ahead read them has been applied.
            self.flush_deferred(u64::MAX);
        }
        if let Some(it) = self.pending.take() {
            return it;
        }
        loop {
            let (pos, want_cyc) = (self.reader.pos(), self.reader.wants_cyc());
            if self.looking_ahead && pos > self.la_limit {
                return Item::NoneNear;
            }
            let p = match self.reader.next_packet() {
                None => return Item::End,
                Some(Err(e)) => {
                    self.st.last_ip.forget();
                    self.st.prev = PrevFlow::Unknown;
                    return Item::Error(e);
                }
                Some(Ok(p)) => p,
            };
            let off = p.offset;
            match p.packet {
                Packet::Psb => self.event(off, EventKind::Psb, None, String::new()),
                Packet::Mtc { tsc, .. } => self.timing_fact(off, TimingKind::Mtc, tsc as u64, None),
                Packet::Cyc { value, .. } => {
                    self.timing_fact(off, TimingKind::Cyc, value as u64, None)
                }
                Packet::Sts { acbr, tsc, .. } => {
                    // Whether the ratio changed is known only in stream order, which a
                    // chunk does not have: every STS is reported here and the emitter
                    // keeps those that change it (see `chunk::Decoded::append`).
                    self.timing_fact(off, TimingKind::Sts, tsc, Some(acbr));
                    self.event(off, EventKind::FreqChange, None, acbr.to_string());
                }
                Packet::Pip { cr3, pg } => {
                    self.set_cr3(Some(cr3));
                    let detail = format!("cr3={cr3:#x} pg={}", pg as u8);
                    self.event(off, EventKind::Paging, None, detail);
                }
                Packet::Fup(FupKind::Pcc, pl) => {
                    let ip = self.st.last_ip.update(&pl);
                    self.timing_fact(off, TimingKind::Pcc, ip.unwrap_or(0), None);
                }
                Packet::Tnt(tnt) => {
                    self.st.prev = PrevFlow::Tnt;
                    return Item::Tnt { tnt, off };
                }
                Packet::Tip(pl) => {
                    let ip = self.st.last_ip.update(&pl);
                    if let PrevFlow::BuffOvf(Some(x)) = self.st.prev {
                        if ip == Some(x) {
                            // E5: a spurious TIP after FUP.BuffOvf, with its IP: ignored.
                            self.st.prev = PrevFlow::Tip;
                            continue;
                        }
                    }
                    let anchor = !matches!(self.st.prev, PrevFlow::Unknown | PrevFlow::Pgd);
                    self.st.prev = PrevFlow::Tip;
                    return Item::Tip { ip, off, anchor };
                }
                Packet::Fup(FupKind::Far, pl) => {
                    let before = self.snapshot(pos, want_cyc);
                    if self.looking_ahead {
                        // Right after another FUP: leave it unread for the next item.
                        self.undo(&before);
                        return Item::FupNext;
                    }
                    let ip = self.st.last_ip.update(&pl);
                    self.st.prev = PrevFlow::Far;
                    return match self.tip_after(&before) {
                        Some(tip) => {
                            self.hold_cr3(before.st.cr3);
                            Item::Far { ip, off, tip }
                        }
                        None => Item::End,
                    };
                }
                Packet::Fup(FupKind::Pgd, pl) => {
                    let before = self.snapshot(pos, want_cyc);
                    if self.looking_ahead {
                        // Right after another FUP: leave it unread for the next item.
                        self.undo(&before);
                        return Item::FupNext;
                    }
                    let ip = self.st.last_ip.update(&pl);
                    self.st.prev = PrevFlow::Pgd;
                    return match self.tip_after(&before) {
                        Some(tip) => {
                            self.hold_cr3(before.st.cr3);
                            Item::Pgd { ip, off, tip }
                        }
                        None => Item::End,
                    };
                }
                Packet::Fup(FupKind::Pge, pl) => {
                    let ip = self.st.last_ip.update(&pl);
                    self.st.prev = PrevFlow::Pge;
                    return Item::Pge { ip, off };
                }
                Packet::Fup(FupKind::BuffOvf, pl) => {
                    let ip = self.st.last_ip.update(&pl);
                    self.st.prev = PrevFlow::BuffOvf(ip);
                    return Item::BuffOvf { ip, off };
                }
                Packet::TraceStop => {
                    self.st.prev = PrevFlow::TraceStop;
                    return Item::TraceStop { off };
                }
            }
        }
    }

    /// What to restore if the look-ahead after a FUP runs off the end of the range.
    fn snapshot(&self, pos: u64, want_cyc: bool) -> Snapshot {
        Snapshot {
            pos,
            want_cyc,
            st: self.st.clone(),
            events: self.events.len(),
            deferred: self.deferred.len(),
            timing: self.timing.len(),
        }
    }

    /// After a FUP.FAR or FUP.PGD: the TIP that follows, if the next flow packet is one
    /// (another item is kept for later). `None` when the range ends first: everything
    /// since `before` is undone, so the FUP is read again by whoever reads on.
    #[allow(clippy::option_option)]
    fn tip_after(&mut self, before: &Snapshot) -> Option<Option<(Option<u64>, u64)>> {
        self.looking_ahead = true;
        self.la_limit = before.pos.saturating_add(MAX_LOOKAHEAD_BYTES);
        let next = self.next_item();
        self.looking_ahead = false;
        self.la_limit = u64::MAX;
        match next {
            Item::Tip { ip, off, .. } => Some(Some((ip, off))),
            // At the end of the trace nothing follows: no TIP.
            Item::End if self.reader.ends_at_stream_end() => Some(None),
            Item::End => {
                self.undo(before);
                None
            }
            // Another FUP, left unread, or nothing near: no TIP.
            Item::FupNext | Item::NoneNear => Some(None),
            other => {
                self.pending = Some(other);
                Some(None)
            }
        }
    }

    /// A new CR3 for image lookups. The successor hint was found in the old address space:
    /// dropped, so that the next block is looked up in the new one whatever the walk did
    /// before (fuzz finding hint-across-pip: a hint kept across a gap and a PIP walked a
    /// block of the old address space in the sequential decode only).
    fn set_cr3(&mut self, cr3: Option<u64>) {
        if self.st.cr3 != cr3 {
            self.st.cr3 = cr3;
            self.hint = None;
        }
    }

    /// A FUP's look-ahead changed CR3 from `before`: keep walking in `before` until the
    /// FUP's item is consumed (`cr3_after_fup`).
    fn hold_cr3(&mut self, before: Option<u64>) {
        if self.st.cr3 != before {
            self.cr3_after_fup = Some(self.st.cr3);
            self.st.cr3 = before;
        }
    }

    /// Go back to `before`: the packets read since are read again by whoever reads on.
    fn undo(&mut self, before: &Snapshot) {
        self.events.truncate(before.events);
        self.deferred.truncate(before.deferred);
        self.timing.truncate(before.timing);
        self.st = before.st.clone();
        self.undone += self.reader.pos().saturating_sub(before.pos);
        self.reader.seek(before.pos, before.want_cyc);
    }

    fn timing_fact(&mut self, offset: u64, kind: TimingKind, raw: u64, ratio: Option<u8>) {
        self.timing.push(TimingFact {
            offset,
            kind,
            raw,
            ratio,
            row: self.rows.len() as u64,
        });
    }

    /// The next item without consuming it.
    fn peek(&mut self) -> Item {
        if let Some(it) = self.la {
            return it;
        }
        let it = self.next_item();
        self.la = Some(it);
        it
    }

    fn consume(&mut self) {
        self.la = None;
        if let Some(cr3) = self.cr3_after_fup.take() {
            self.set_cr3(cr3);
        }
        self.st.cr3_row = self.st.cr3;
    }

    // ----- not tracing ---------------------------------------------------------------

    /// Waiting for a resume point.
    fn idle(&mut self) -> Option<Stop> {
        let it = self.peek();
        self.consume();
        match it {
            Item::End => return Some(Stop::End),
            Item::Error(e) => {
                self.event(e.offset, EventKind::Error, None, e.kind.to_string());
                self.st.mode = Mode::Unsynced;
            }
            Item::Pge { ip, off } => match ip {
                Some(ip) => {
                    self.event(off, EventKind::Enable, Some(ip), String::new());
                    self.resume(ip, off);
                }
                None => self.st.mode = Mode::Unsynced,
            },
            Item::BuffOvf { ip, off } => {
                self.event(off, EventKind::Overflow, ip, String::new());
                if ip.is_some() || self.started || self.role != Role::Body {
                    self.st.last_call = LastCall::None;
                } else {
                    // A body that cannot read this FUP's IP stays unsynced, and the
                    // sequential decode, which could, may trace calls before the body's
                    // first resume point: there LAST_CALL_NLIP is still unknown, not
                    // cleared (fuzz finding buffovf-before-body-start).
                }
                match ip {
                    Some(ip) => self.resume(ip, off),
                    None => self.st.mode = Mode::Unsynced,
                }
            }
            Item::Tip { ip, off, anchor } => {
                if let (Mode::Unsynced, true, Some(ip)) = (self.st.mode, anchor, ip) {
                    self.event(off, EventKind::Resync, Some(ip), String::new());
                    self.resume(ip, off);
                }
            }
            Item::Far { tip, .. } => {
                if let (Mode::Unsynced, Some((Some(t), toff))) = (self.st.mode, tip) {
                    self.event(toff, EventKind::Resync, Some(t), String::new());
                    self.resume(t, toff);
                }
            }
            Item::Pgd { ip, off, .. } => {
                if self.st.mode != Mode::Disabled {
                    self.event(off, EventKind::Disable, ip, String::new());
                }
                // E2: a second PGD with no PGE between is ignored.
                if self.st.mode != Mode::Stopped {
                    self.st.mode = Mode::Disabled;
                }
            }
            Item::Tnt { tnt, off } => {
                if self.st.mode == Mode::Disabled {
                    self.event(
                        off,
                        EventKind::Error,
                        None,
                        format!("{} TNT bits while tracing is disabled", tnt.len),
                    );
                }
            }
            Item::TraceStop { off } => {
                self.event(off, EventKind::TraceStop, None, String::new());
                self.st.mode = Mode::Stopped;
            }
            // Only a look-ahead sees them; nothing to do.
            Item::FupNext | Item::NoneNear => {}
        }
        None
    }

    // ----- tracing -------------------------------------------------------------------

    /// For a stitch: has the walk met the body's initial state, or passed it?
    #[inline]
    fn at_target(&self) -> Option<Stop> {
        let Role::Stitch(t) = self.role else {
            return None;
        };
        let pos = self.reader.pos();
        if self.la.is_some() || self.pending.is_some() {
            return None;
        }
        if pos == t.cursor
            && self.st.mode == Mode::Tracing
            && self.st.tnt.is_empty()
            && self.st.ip == t.ip
        {
            return Some(Stop::Converged);
        }
        if pos > t.cursor {
            return Some(Stop::Diverged);
        }
        None
    }

    /// Something the trace and the code disagree on: report it with the offset of the
    /// packet involved and resync.
    /// Offset of the packet read ahead and not yet used.
    fn la_offset(&self) -> Option<u64> {
        match self.la {
            Some(
                Item::Tnt { off, .. }
                | Item::Tip { off, .. }
                | Item::Far { off, .. }
                | Item::Pgd { off, .. }
                | Item::Pge { off, .. }
                | Item::BuffOvf { off, .. }
                | Item::TraceStop { off },
            ) => Some(off),
            Some(Item::Error(e)) => Some(e.offset),
            Some(Item::FupNext | Item::NoneNear | Item::End) | None => None,
        }
    }

    fn inconsistent(&mut self, what: &str) {
        if self.pgd_second_reading() {
            return;
        }
        let (off, found) = match self.la {
            Some(Item::Tnt { off, .. }) => (off, "a TNT packet"),
            Some(Item::Tip { off, .. }) => (off, "a TIP"),
            Some(Item::Far { off, .. }) => (off, "a FUP.FAR"),
            Some(Item::Pgd { off, .. }) => (off, "a FUP.PGD"),
            Some(Item::Pge { off, .. }) => (off, "a FUP.PGE"),
            Some(Item::BuffOvf { off, .. }) => (off, "a FUP.BuffOvf"),
            Some(Item::TraceStop { off }) => (off, "TraceSTOP"),
            _ => (self.reader.pos(), "nothing usable"),
        };
        self.consume();
        let ip = self.st.ip;
        self.gap(off, format!("{what} at {ip:#x}, found {found}"));
    }

    /// Make sure a TNT bit is queued, reading the next flow packet if needed.
    #[inline]
    fn need_bit(&mut self) -> Result<(), Option<Stop>> {
        if !self.st.tnt.is_empty() {
            return Ok(());
        }
        if self.la.is_none() && self.pending.is_none() {
            // The common case, a TNT byte next: skip the general packet path.
            if let Some((tnt, off)) = self.reader.try_tnt() {
                self.st.prev = PrevFlow::Tnt;
                self.st.cr3_row = self.st.cr3;
                self.st.tnt.push(tnt);
                self.st.tnt_off = off;
                return Ok(());
            }
        }
        match self.peek() {
            Item::Tnt { tnt, off } => {
                self.consume();
                self.st.tnt.push(tnt);
                self.st.tnt_off = off;
                Ok(())
            }
            Item::End => Err(Some(Stop::End)),
            _ => Err(None),
        }
    }

    /// Walk instructions while tracing.
    fn walk(&mut self) -> Option<Stop> {
        loop {
            if self.stuck {
                self.stuck = false;
                self.stuck_in_cycle();
                return None;
            }
            if let Some(s) = self.at_target() {
                return Some(s);
            }
            if self.st.tnt.is_empty() {
                // Nothing queued: the next flow packet says what happens next.
                match self.peek() {
                    Item::Tnt { .. } | Item::Tip { .. } | Item::FupNext | Item::NoneNear => {}
                    Item::End => return Some(Stop::End),
                    Item::Error(e) => {
                        self.consume();
                        self.gap(e.offset, e.kind.to_string());
                        return None;
                    }
                    Item::Pge { .. } | Item::BuffOvf { .. } | Item::TraceStop { .. } => {
                        // Apply at once: tracing stopped, overflowed or restarted here.
                        self.close_block();
                        return self.idle();
                    }
                    Item::Far {
                        ip: Some(x),
                        off,
                        tip,
                    } => {
                        if x == self.st.ip && !self.far_ahead(x) {
                            // An asynchronous far transfer (interrupt, exception) before
                            // the instruction at X.
                            self.consume();
                            self.event(off, EventKind::Interrupt, Some(x), String::new());
                            match tip {
                                Some((Some(t), _)) => {
                                    self.close_block();
                                    self.st.ip = t;
                                    self.enter_block(t);
                                    self.decided(off);
                                    self.st.after_branch = false;
                                    continue;
                                }
                                _ => {
                                    self.gap(off, "FUP.FAR without a TIP".to_string());
                                    return None;
                                }
                            }
                        }
                    }
                    Item::Pgd {
                        ip: Some(x), off, ..
                    } => {
                        if x == self.st.ip && !self.far_ahead(x) {
                            self.consume();
                            self.close_block();
                            self.event(off, EventKind::Disable, Some(x), String::new());
                            self.decided(off);
                            self.st.mode = Mode::Disabled;
                            return None;
                        }
                        if self.st.after_branch {
                            // If the walk cannot reach X, the PGD may name the sequential
                            // NLIP of this branch (a jump out of the region): remember it.
                            self.alt_pgd = Some((self.rows.len(), self.st.prev_nlip));
                        }
                    }
                    Item::Far { ip: None, .. } | Item::Pgd { ip: None, .. } => {
                        self.inconsistent("a FUP whose IP is unknown");
                        return None;
                    }
                }
            }
            if !self.st.tnt.is_empty() && self.fast_walk() {
                continue;
            }
            self.st.after_branch = false;
            self.st.resumed_at = None;
            // Walk one block: the successor link of the last one, or a lookup.
            let bi = match self.hint {
                Some((ip, bi)) if ip == self.st.ip => bi,
                _ => self.cache.index(self.images, self.st.ip, self.st.cr3),
            };
            self.hint = None;
            let h = self.cache.hot(bi);
            let (start, n, end, class, last_ip, target, next) = (
                self.st.ip, h.insns, h.end, h.class, h.last_ip, h.target, h.next,
            );
            // A pending FUP.FAR / FUP.PGD inside this block applies at its address.
            if self.st.tnt.is_empty() {
                if let Some(Item::Far { ip: Some(x), .. } | Item::Pgd { ip: Some(x), .. }) = self.la
                {
                    if x > start && x <= last_ip {
                        let b = self.cache.block(bi);
                        if let Some(k) = b.index_of(x) {
                            // x > start: at least one instruction ran before it.
                            let before: u64 =
                                b.lens[..k as usize - 1].iter().map(|&l| l as u64).sum();
                            self.st.last_insn = start + before;
                            self.st.open_insns += k;
                            self.st.ip = x;
                            continue;
                        }
                    }
                }
            }
            match end {
                BlockEnd::Branch => {}
                BlockEnd::Split => {
                    self.st.open_insns += n;
                    self.st.last_insn = last_ip;
                    self.st.ip = next;
                    self.stuck = self.moved_without_packet(next);
                    continue;
                }
                BlockEnd::Ambiguous if self.role == Role::Body => return Some(Stop::Failed),
                BlockEnd::NoImage | BlockEnd::Invalid | BlockEnd::Ambiguous => {
                    if self.st.tnt.is_empty() && self.pgd_second_reading() {
                        return None;
                    }
                    self.st.open_insns += n;
                    let why = match end {
                        BlockEnd::NoImage => "no code image covers",
                        BlockEnd::Invalid => "undecodable instruction",
                        _ => "several address spaces map (CR3 unknown)",
                    };
                    // Where the decode stands: at a packet read ahead, if any (it is
                    // still to be used, e.g. as the resume point), else the reader.
                    let off = self.la_offset().unwrap_or(self.reader.pos());
                    self.st.ip = next;
                    self.gap(off, format!("{why} {next:#x}"));
                    return None;
                }
            }
            self.st.open_insns += n;
            self.st.prev_nlip = next;
            match class {
                InsnClass::Cond => {
                    if let Err(stop) = self.need_bit() {
                        if stop.is_some() {
                            self.st.open_insns -= n;
                            return stop;
                        }
                        self.st.open_insns -= n;
                        self.inconsistent("expected a TNT bit for the conditional branch");
                        return None;
                    }
                    let taken = self.st.tnt.pop().unwrap_or(false);
                    let to = if taken { target } else { next };
                    let off = self.st.tnt_off;
                    self.row(last_ip, Some(to), BranchKind::Cond, taken, off);
                    self.decided(off);
                    self.st.ip = to;
                    self.link(bi, taken as usize, to);
                }
                InsnClass::Jmp => {
                    let off = self.st.decision;
                    self.row(last_ip, Some(target), BranchKind::Jmp, true, off);
                    self.st.ip = target;
                    self.link(bi, 1, target);
                    self.stuck = self.moved_without_packet(target);
                }
                InsnClass::Call => {
                    let off = self.st.decision;
                    self.row(last_ip, Some(target), BranchKind::Call, true, off);
                    self.st.last_call = LastCall::Known(next);
                    self.st.ip = target;
                    self.link(bi, 1, target);
                    self.stuck = self.moved_without_packet(target);
                }
                InsnClass::Ret => {
                    // Compressed (a taken bit) when a bit is queued or a TNT comes next.
                    let compressed = match self.need_bit() {
                        Ok(()) => true,
                        Err(Some(stop)) => {
                            self.st.open_insns -= n;
                            return Some(stop);
                        }
                        Err(None) => false,
                    };
                    if compressed {
                        let bit = self.st.tnt.pop().unwrap_or(false);
                        let off = self.st.tnt_off;
                        if !bit {
                            self.st.open_insns -= n;
                            self.gap(
                                off,
                                format!("not-taken TNT bit for the RET at {last_ip:#x}"),
                            );
                            return None;
                        }
                        match self.st.last_call {
                            LastCall::Known(to) => {
                                self.push_row(last_ip, Some(to), BranchKind::Ret, true, true, off);
                                self.decided(off);
                                self.st.ip = to;
                            }
                            LastCall::FromChunkStart if self.role == Role::Body => {
                                // The return address is in an earlier chunk: this body
                                // started too early. Start over after this TNT packet.
                                self.restart();
                                return None;
                            }
                            _ => {
                                self.st.open_insns -= n;
                                self.gap(
                                    off,
                                    format!(
                                        "compressed RET at {last_ip:#x}, but the last call is unknown"
                                    ),
                                );
                                return None;
                            }
                        }
                    } else {
                        match self.peek() {
                            Item::Tip {
                                ip: Some(to), off, ..
                            } => {
                                self.consume();
                                self.row(last_ip, Some(to), BranchKind::Ret, true, off);
                                self.decided(off);
                                self.st.ip = to;
                            }
                            _ => {
                                self.st.open_insns -= n;
                                self.inconsistent("expected a TIP or TNT bit for the RET");
                                return None;
                            }
                        }
                    }
                }
                InsnClass::JmpInd | InsnClass::CallInd => {
                    let kind = if class == InsnClass::JmpInd {
                        BranchKind::JmpInd
                    } else {
                        BranchKind::CallInd
                    };
                    if !self.st.tnt.is_empty() {
                        self.st.open_insns -= n;
                        let off = self.st.tnt_off;
                        self.gap(
                            off,
                            format!("TNT bits left at the indirect branch at {last_ip:#x}"),
                        );
                        return None;
                    }
                    match self.peek() {
                        Item::Tip {
                            ip: Some(to), off, ..
                        } => {
                            self.consume();
                            self.row(last_ip, Some(to), kind, true, off);
                            self.decided(off);
                            if class == InsnClass::CallInd {
                                self.st.last_call = LastCall::Known(next);
                            }
                            self.st.ip = to;
                        }
                        Item::End => {
                            self.st.open_insns -= n;
                            return Some(Stop::End);
                        }
                        _ => {
                            self.st.open_insns -= n;
                            self.inconsistent("expected a TIP for the indirect branch");
                            return None;
                        }
                    }
                }
                InsnClass::Far | InsnClass::Syscall => {
                    let kind = class.branch_kind().expect("far");
                    if !self.st.tnt.is_empty() {
                        self.st.open_insns -= n;
                        let off = self.st.tnt_off;
                        self.gap(
                            off,
                            format!("TNT bits left at the far transfer at {last_ip:#x}"),
                        );
                        return None;
                    }
                    // The FUP names the far transfer's NLIP; E1: or an address inside it.
                    let ours = |x: u64| x == next || (x > last_ip && x < next);
                    match self.peek() {
                        Item::Far {
                            ip: Some(x),
                            tip: Some((Some(to), toff)),
                            ..
                        } if ours(x) => {
                            self.consume();
                            self.row(last_ip, Some(to), kind, true, toff);
                            self.decided(toff);
                            self.st.ip = to;
                        }
                        Item::Pgd {
                            ip: Some(x),
                            off,
                            tip,
                        } if ours(x) => {
                            self.consume();
                            let to = tip.and_then(|t| t.0);
                            self.row(last_ip, to, kind, true, off);
                            self.decided(off);
                            self.event(off, EventKind::Disable, Some(x), String::new());
                            self.st.mode = Mode::Disabled;
                            return None;
                        }
                        Item::End => {
                            self.st.open_insns -= n;
                            return Some(Stop::End);
                        }
                        _ => {
                            self.st.open_insns -= n;
                            self.inconsistent(
                                "expected FUP.FAR+TIP or FUP.PGD for the far transfer",
                            );
                            return None;
                        }
                    }
                }
                InsnClass::Other => unreachable!("blocks end with a branch"),
            }
            self.st.after_branch = true;
        }
    }

    /// Right after tracing resumed at `x`, a FUP.FAR/PGD naming `x` is either an interrupt
    /// before any instruction ran, or the far transfer that ends a loop back here with no
    /// packet on the way (a syscall whose NLIP is `x`, as in `_exit`'s `syscall; jmp`
    /// loop). The second reading wins when the code from `x` reaches such a far transfer
    /// through direct branches only.
    fn far_ahead(&mut self, x: u64) -> bool {
        if self.st.resumed_at != Some(x) {
            return false;
        }
        let mut ip = x;
        for _ in 0..64 {
            let bi = self.cache.index(self.images, ip, self.st.cr3);
            let b = self.cache.block(bi);
            if b.end != BlockEnd::Branch {
                return false;
            }
            match b.class {
                InsnClass::Far | InsnClass::Syscall => {
                    return b.next == x || (x > b.last_ip && x < b.next);
                }
                InsnClass::Jmp | InsnClass::Call => ip = b.target,
                _ => return false,
            }
            if ip == x {
                return false;
            }
        }
        false
    }

    /// The walk cannot reach the address of the pending FUP.PGD. If that address is the
    /// sequential NLIP of a branch walked since the last decided row (the other reading of
    /// "NLIP" for a jump out of the filter region, Table 1), tracing stopped right after
    /// that branch: undo the walk since and apply the PGD there.
    fn pgd_second_reading(&mut self) -> bool {
        let (
            Some((rows, nlip)),
            Some(Item::Pgd {
                ip: Some(x), off, ..
            }),
        ) = (self.alt_pgd, self.la)
        else {
            return false;
        };
        if x != nlip || rows < self.tail_start {
            return false;
        }
        self.consume();
        self.rows.truncate(rows);
        self.forget_open();
        self.event(off, EventKind::Disable, Some(x), String::new());
        self.decided(off);
        self.st.mode = Mode::Disabled;
        self.alt_pgd = None;
        true
    }

    /// The hot loop: while TNT bits are queued, walk blocks that end in a conditional
    /// branch, a direct jump or call, or a compressed return, without looking at packets
    /// (no asynchronous FUP can apply while bits are queued, and a stitch cannot meet its
    /// target). Returns whether it walked anything; anything else goes to the general
    /// walk.
    #[inline]
    fn fast_walk(&mut self) -> bool {
        let mut walked = false;
        while !self.st.tnt.is_empty() {
            let bi = match self.hint {
                Some((ip, bi)) if ip == self.st.ip => bi,
                _ => self.cache.index(self.images, self.st.ip, self.st.cr3),
            };
            let h = self.cache.hot(bi);
            if h.end != BlockEnd::Branch {
                self.hint = Some((self.st.ip, bi));
                break;
            }
            let (which, to, kind, taken, off) = match h.class {
                InsnClass::Cond => {
                    let taken = self.st.tnt.pop().unwrap_or(false);
                    let to = if taken { h.target } else { h.next };
                    let off = self.st.tnt_off;
                    self.st.decision = off;
                    (taken as usize, to, BranchKind::Cond, taken, off)
                }
                InsnClass::Jmp => (1, h.target, BranchKind::Jmp, true, self.st.decision),
                InsnClass::Call => {
                    self.st.last_call = LastCall::Known(h.next);
                    (1, h.target, BranchKind::Call, true, self.st.decision)
                }
                _ => {
                    self.hint = Some((self.st.ip, bi));
                    break;
                }
            };
            self.st.open_insns += h.insns;
            self.row(h.last_ip, Some(to), kind, taken, off);
            if kind == BranchKind::Cond {
                self.tail_start = self.rows.len();
                self.alt_pgd = None;
            }
            self.st.ip = to;
            self.st.prev_nlip = h.next;
            self.st.after_branch = true;
            self.st.resumed_at = None;
            let s = self.cache.successor(self.images, bi, which, self.st.cr3);
            self.hint = Some((to, s));
            walked = true;
            if kind != BranchKind::Cond && self.moved_without_packet(to) {
                self.stuck = true;
                break;
            }
        }
        walked
    }

    /// The walk went to `to` by a direct jump, call or block split, consuming nothing;
    /// true when that proves it is going round a cycle (see [`LoopGuard`]).
    #[inline]
    fn moved_without_packet(&mut self, to: u64) -> bool {
        self.spin.step(to, self.reader.pos(), self.st.tnt)
    }

    /// The walk is in a cycle of direct branches that never reaches the packet it waits
    /// for (a damaged IP led it there): an error at that packet, and a resync.
    fn stuck_in_cycle(&mut self) {
        let steps = self.spin.steps();
        self.spin = LoopGuard::default();
        if !self.st.tnt.is_empty() {
            let off = self.st.tnt_off;
            let ip = self.st.ip;
            self.gap(
                off,
                format!(
                    "direct branches loop back to {ip:#x} (after {steps} steps) with TNT bits \
                     still queued"
                ),
            );
            return;
        }
        self.peek();
        self.inconsistent(&format!(
            "direct branches loop back (after {steps} steps) without reaching the next packet"
        ));
    }

    /// Remember the block that follows block `bi` on side `which` (0: fall-through,
    /// 1: direct target), which starts at `to`.
    #[inline]
    fn link(&mut self, bi: u32, which: usize, to: u64) {
        let s = self.cache.successor(self.images, bi, which, self.st.cr3);
        self.hint = Some((to, s));
    }

    /// (Body) discard everything and look for a resume point again.
    fn restart(&mut self) {
        self.rows.truncate(0);
        self.events.clear();
        self.deferred.clear();
        self.timing.clear();
        self.tail_start = 0;
        self.started = false;
        self.body_start = None;
        self.st.mode = Mode::Unsynced;
        self.st.tnt.clear();
        self.forget_open();
        self.open_forgotten = false;
    }
}

impl<S: RowSink> Drop for Walker<'_, '_, S> {
    fn drop(&mut self) {
        let read = self.reader.pos().saturating_sub(self.read_from) + self.undone;
        READ.with(|r| r.set(r.get() + read));
    }
}

/// What to restore when a look-ahead runs off the end of the range.
struct Snapshot {
    pos: u64,
    want_cyc: bool,
    st: FlowState,
    events: usize,
    deferred: usize,
    timing: usize,
}

#[cfg(test)]
mod tests {
    use crate::chunk::{decode_all, Input};
    use crate::config::TraceConfig;
    use crate::image::ImageSet;
    use crate::packet::PSB_BYTES;
    use crate::stream::TraceStream;
    use crate::timing::TimingConfig;
    use tracemill_schemas::EventKind;

    /// `trace` over `images` decoded sequentially and in chunks of one PSB each (RTIT_CTL
    /// 0, no timing): (chunk size, result) for both.
    fn decode_sequential_and_chunked(
        images: &ImageSet<'_>,
        trace: &[u8],
    ) -> Vec<(u64, crate::chunk::Decoded)> {
        let stream = TraceStream::linear(trace);
        let cfg = TraceConfig::from_ctl(0);
        let input = Input {
            stream: &stream,
            images,
            cfg,
            timing: TimingConfig::new(&cfg, None, true),
        };
        [u64::MAX, 1]
            .into_iter()
            .map(|chunk| (chunk, decode_all(&input, chunk)))
            .collect()
    }

    fn errors_of(d: &crate::chunk::Decoded) -> Vec<&str> {
        d.events
            .iter()
            .filter(|e| e.kind == EventKind::Error)
            .map(|e| e.detail.as_str())
            .collect()
    }

    /// 4.2.9 and 4.2.10: the PIP of a far transfer (an interrupt switching address spaces)
    /// comes between its FUP.FAR and its TIP, and the new CR3 is the destination's. The code
    /// the walk still has to cover up to the FUP's IP runs in the old address space, even
    /// though the decoder has read the PIP to pair the FUP with its TIP.
    #[test]
    fn pip_between_fup_far_and_tip_applies_after_the_fup_4_2_10() {
        // Address space 1: 0x1000 jmp 0x1010; 0x1010..0x1014 nops, ret. Nothing at
        // 0x1010 in space 2. The kernel (every space) at 0x8000: nop, ret.
        let mut user = vec![0x90u8; 0x15];
        user[..2].copy_from_slice(&[0xEB, 0x0E]);
        user[0x14] = 0xC3;
        let kernel = [0x90u8, 0xC3];
        let mut images = ImageSet::new();
        images.add_raw("user", &user, 0x1000, Some(1));
        images.add_raw("kernel", &kernel, 0x8000, None);

        let mut trace = PSB_BYTES.to_vec();
        trace.extend_from_slice(&[0xC3, 1, 0, 0, 0, 0]); // PIP cr3=1
        trace.extend_from_slice(&[0x84, 0x00, 0x10]); // FUP.PGE 0x1000
        trace.extend_from_slice(&[0xBC, 0x12, 0x10]); // FUP.FAR 0x1012
        trace.extend_from_slice(&[0xC3, 2, 0, 0, 0, 0]); // PIP cr3=2
        trace.extend_from_slice(&[0xB4, 0x00, 0x80]); // TIP 0x8000
        trace.extend_from_slice(&[0xB4, 0x00, 0x80]); // TIP 0x8000 (the ret)
        for (chunk, d) in decode_sequential_and_chunked(&images, &trace) {
            let errors = errors_of(&d);
            assert!(errors.is_empty(), "chunk {chunk}: {errors:?}");
            let interrupt = d.events.iter().find(|e| e.kind == EventKind::Interrupt);
            assert_eq!(interrupt.and_then(|e| e.ip), Some(0x1012), "chunk {chunk}");
            // The jmp in space 1; then the kernel's ret, whose count holds the two user
            // instructions before the interrupt, and the CR3 the transfer switched to.
            let r = &d.rows;
            assert_eq!(r.ip, [0x1000, 0x8001], "chunk {chunk}");
            assert_eq!(r.insns, [1, 4], "chunk {chunk}");
            assert_eq!((r.cr3.get(0), r.cr3.get(1)), (Some(1), Some(2)));
        }
    }

    /// 4.2.10: after a PIP, code is found in the new address space. The walker's link
    /// to the next block (found in the old one) must not outlive the change, even when the
    /// walk resumes at that very address after a gap.
    #[test]
    fn after_a_pip_the_next_block_is_looked_up_in_the_new_address_space_4_2_10() {
        // Space 1: 0x1000 jz 0x1010; 0x1010 nop, ret. Nothing in space 2.
        let mut user = vec![0x90u8; 0x12];
        user[..2].copy_from_slice(&[0x74, 0x0E]);
        user[0x11] = 0xC3;
        let mut images = ImageSet::new();
        images.add_raw("user", &user, 0x1000, Some(1));

        let mut trace = PSB_BYTES.to_vec();
        trace.extend_from_slice(&[0xC3, 1, 0, 0, 0, 0]); // PIP cr3=1
        trace.extend_from_slice(&[0x84, 0x00, 0x10]); // FUP.PGE 0x1000
        trace.push(0b11); // TNT: the jz taken; the walk links its target block
        trace.extend_from_slice(&[0xBF]); // reserved IP size: a gap to the next PSB
        trace.extend_from_slice(&PSB_BYTES);
        trace.extend_from_slice(&[0xC3, 2, 0, 0, 0, 0]); // PIP cr3=2
        trace.extend_from_slice(&[0x84, 0x10, 0x10]); // FUP.PGE 0x1010
        trace.extend_from_slice(&[0xB4, 0x00, 0x10]); // TIP 0x1000 (the ret, in space 1)
        for (chunk, d) in decode_sequential_and_chunked(&images, &trace) {
            let errors = errors_of(&d);
            assert_eq!(errors.len(), 2, "chunk {chunk}: {errors:?}");
            assert_eq!(errors[1], "no code image covers 0x1010", "chunk {chunk}");
            // The jz; no ret (its block is not in space 2).
            assert_eq!(d.rows.ip, [0x1000], "chunk {chunk}");
        }
    }

    /// A block left again and again before any row (enables and disables at one address)
    /// takes one place with a count; distinct blocks each take one, up to the cap.
    #[test]
    fn partials_of_the_same_block_share_one_place() {
        let mut p = super::Partials::default();
        for _ in 0..1000 {
            assert!(p.push((0x10, 0x10, 1, 1)));
        }
        assert_eq!(p.iter().collect::<Vec<_>>(), [(0x10, 0x10, 1, 1000)]);
        // Distinct blocks each take a place, up to the cap (five-distinct-partials).
        for k in 1..super::Partials::CAP as u64 {
            assert!(p.push((0x20 * k, 0x20 * k, 1, 2)));
        }
        assert!(
            !p.push((0x1, 0x4, 2, 1)),
            "past the cap a new block cannot wait"
        );
        assert!(
            p.push((0x20, 0x20, 1, 1)),
            "a waiting one still counts again"
        );
        assert_eq!(p.len(), super::Partials::CAP);
        assert_eq!(p.iter().nth(1), Some((0x20, 0x20, 1, 3)));
    }
}
