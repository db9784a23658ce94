//! Instruction flow: walk the code images along the trace and emit one row per executed
//! branch. This walker is shared by every format: it reads format-neutral flow items from
//! a front end ([`crate::front::Front`]) and follows the few rules in which the formats
//! differ as [`Rules`] set once per decode (see [`crate::front`] for the table).
//!
//! The walker keeps the small decoding states — queued TNT bits ([`TntQueue`]), the
//! return-compression state ([`RetStack`]), the execution mode, CR3 — and consumes flow
//! items as the code needs them. What the front end reads on the way (PSBs, timing
//! packets, paging) arrives as facts ([`Facts`]).
//!
//! Rules that decide where an item applies:
//! - a cond branch takes the next TNT bit; a RET takes a bit when one is queued or the next
//!   flow item is a TNT (return compression), else a TIP; indirect JMP/CALL take a TIP (with
//!   deferred TIPs, [`Rules::deferred_tips`], after the TNT bits of later branches); far
//!   branches take FUP.FAR + TIP or FUP.PGD ([`FarRule::FupAndTip`], RTIT) or a TIP or
//!   TIP.PGD ([`FarRule::TipOnly`], Intel PT);
//! - when no TNT bit is queued, the next flow item is read at once. A FUP-led item (an
//!   interrupt, a disable), a PSB+ state, an event bound to an IP or a TIP.PGD naming an
//!   IP then applies at the first instruction boundary where IP == X; with RTIT's far rule,
//!   a PGD may also apply right after the branch whose sequential NLIP is X (the other
//!   reading of "NLIP" for a jump out of the filter region); enables, overflows and
//!   TraceStop apply at once, and so do events bound to no IP;
//! - a TIP.PGD binds to the next branch that needs trace, if the walk does not reach its
//!   IP before (SDM 36.4.2.5);
//! - E1 (RTIT): a FUP.FAR pointing inside the far transfer instruction counts as its NLIP;
//!   E2 (RTIT): a PGD after a PGD with no PGE between is ignored; any inconsistency (a TIP
//!   where a TNT bit is due, code no image covers): an `error` event, the rows since the
//!   last decided one dropped, and a resync.
//!
//! Resync (at the start, after an error, at a chunk start): tracing resumes at an enable,
//! an overflow with its IP, a PSB+ that says where tracing is, or a TIP the front end
//! marks as an anchor (for RTIT: one whose previous flow packet is known and not a PGD,
//! since a TIP after a PGD is the target of a far transfer out of the traced region).

use tracemill_schemas::{BranchKind, EventKind};

use crate::block::{BlockCache, BlockEnd};
use crate::front::{Bits, Bound, Facts, FarRule, Format, Front, FupRole, Raw, Rules, TntBits};
use crate::image::ImageSet;
use crate::insn::InsnClass;
use crate::loop_guard::LoopGuard;
use crate::memo::{self, Replay, KEY_BITS};
pub use crate::piece::TimingFact;
pub use crate::retstack::{Below, NoTarget, RetModel, RetStack};
use crate::rows::{BranchRow, EventRow};
pub use crate::sink::{CountSink, RowSink};
use crate::spaces::Spaces;
use crate::stream::TraceStream;
use crate::tnt::TntQueue;

/// Tracing state of the walker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Position unknown: waiting for a resume point.
    Unsynced,
    /// Packet generation disabled (after a PGD).
    Disabled,
    /// TraceSTOP seen: waiting for a new enable.
    Stopped,
    /// Walking instructions at `ip`.
    Tracing,
}

/// Everything the walk depends on: a chunk's exit state is the next stitch's start.
/// `P` is the front end's own part (RTIT: LAST_LIP, the previous flow packet; Intel PT:
/// Last IP, the events waiting for the packet they bind to).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowState<P> {
    pub mode: Mode,
    pub ip: u64,
    pub tnt: TntQueue,
    /// Offset of the TNT packet the queued bits came from.
    pub tnt_off: u64,
    /// What compressed RETs return to.
    pub ret: RetStack,
    /// How instructions decode (the execution mode).
    pub bits: Bits,
    pub cr3: Option<u64>,
    /// The address space the sideband puts at the last place the walk selected one
    /// ([`crate::spaces`]; used for image lookups instead of `cr3` when the input has
    /// [`crate::chunk::Input::spaces`]).
    pub space: Option<u64>,
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
    /// Sequential NLIP of the last branch walked (for FUP.PGD's second reading).
    pub prev_nlip: u64,
    /// Tracing resumed here and no instruction has been walked since.
    pub resumed_at: Option<u64>,
    /// The last thing walked was a branch (for FUP.PGD's second reading).
    pub after_branch: bool,
    /// Reader position (a packet boundary).
    pub cursor: u64,
    /// The front end's state.
    pub fe: P,
}

impl<P> FlowState<P> {
    /// State at the start of a trace or of a parallel chunk at `cursor`, with the front
    /// end's state `fe` and return-compression model `ret`.
    pub fn start(cursor: u64, chunk_start: bool, ret: RetModel, fe: P) -> Self {
        FlowState {
            mode: Mode::Unsynced,
            ip: 0,
            tnt: TntQueue::new(),
            tnt_off: 0,
            ret: RetStack::new(
                ret,
                if chunk_start {
                    Below::FromChunkStart
                } else {
                    Below::AfterGap
                },
            ),
            bits: Bits::B64,
            cr3: None,
            space: None,
            cr3_row: None,
            open_insns: 0,
            block_start: 0,
            block_base: 0,
            last_insn: 0,
            partials: Partials::default(),
            decision: cursor,
            prev_nlip: 0,
            resumed_at: None,
            after_branch: false,
            cursor,
            fe,
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

/// One flow item, as the walker uses it: a front end's [`Raw`] item, with a FUP paired
/// with the TIP after it.
#[derive(Clone, Copy, Debug)]
enum Item<E> {
    Tnt {
        tnt: TntBits,
        off: u64,
    },
    /// `anchor`: tracing can resume here.
    Tip {
        ip: Option<u64>,
        off: u64,
        anchor: bool,
    },
    /// A far transfer from `ip` (FUP) and the TIP after it (None: the next flow item was
    /// not a TIP).
    Far {
        ip: Option<u64>,
        off: u64,
        tip: Option<(Option<u64>, u64)>,
    },
    /// Tracing stops at `ip` (FUP); a TIP (RTIT) or the TIP.PGD (Intel PT) after it says
    /// where execution went.
    Pgd {
        ip: Option<u64>,
        off: u64,
        tip: Option<(Option<u64>, u64)>,
    },
    /// Tracing stops at the next branch that needs trace, or on reaching `ip` (TIP.PGD).
    SyncPgd {
        ip: Option<u64>,
        off: u64,
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
    /// A PSB+ says tracing is at `ip` (or off), in mode `bits`.
    Status {
        ip: Option<u64>,
        bits: Option<Bits>,
        off: u64,
    },
    /// An event at `ip`, or where the walk is.
    At {
        ip: Option<u64>,
        off: u64,
        what: Bound,
    },
    Error {
        off: u64,
        e: E,
    },
    /// (Look-ahead only) the next flow item is a FUP, left unread.
    FupNext,
    /// (Look-ahead only) no flow item within [`MAX_LOOKAHEAD_BYTES`] of the FUP.
    NoneNear,
    End,
}

impl<E> Item<E> {
    /// The stream offset of the packet this item came from.
    fn offset(&self) -> Option<u64> {
        match *self {
            Item::Tnt { off, .. }
            | Item::Tip { off, .. }
            | Item::Far { off, .. }
            | Item::Pgd { off, .. }
            | Item::SyncPgd { off, .. }
            | Item::Pge { off, .. }
            | Item::BuffOvf { off, .. }
            | Item::TraceStop { off }
            | Item::Status { off, .. }
            | Item::At { off, .. }
            | Item::Error { off, .. } => Some(off),
            Item::FupNext | Item::NoneNear | Item::End => None,
        }
    }

    /// What it is, for error messages.
    fn name(&self) -> &'static str {
        match self {
            Item::Tnt { .. } => "a TNT packet",
            Item::Tip { .. } => "a TIP",
            Item::Far { .. } => "a FUP.FAR",
            Item::Pgd { .. } => "a FUP.PGD",
            Item::SyncPgd { .. } => "a TIP.PGD",
            Item::Pge { .. } => "an enable",
            Item::BuffOvf { .. } => "an overflow",
            Item::TraceStop { .. } => "TraceSTOP",
            Item::Status { .. } => "a PSB+",
            Item::At { .. } => "an event bound to an IP",
            Item::Error { .. } => "a packet error",
            Item::FupNext | Item::NoneNear | Item::End => "nothing usable",
        }
    }

    /// An item that applies where the walk reaches its IP (`x`): a FUP-led transfer or
    /// disable, a TIP.PGD naming its IP, a PSB+ state, an event bound to an IP.
    fn applies_at(&self) -> Option<u64> {
        match *self {
            Item::Far { ip: Some(x), .. }
            | Item::Pgd { ip: Some(x), .. }
            | Item::SyncPgd { ip: Some(x), .. }
            | Item::Status { ip: Some(x), .. }
            | Item::At { ip: Some(x), .. } => Some(x),
            _ => None,
        }
    }
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
    /// The output reached the walker's piece limit ([`Walker::with_piece_limit`]): take it
    /// ([`Walker::split_off`]) and call [`Walker::run`] again to go on.
    Split,
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
    /// A stitch: walks until its state equals the body's start ([`Walker::target`]).
    Stitch,
}

/// A body's initial state, which the stitch must meet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target<P> {
    pub cursor: u64,
    pub ip: u64,
    pub bits: Bits,
    /// The address space selected there ([`FlowState::space`]).
    pub space: Option<u64>,
    /// The front end's state there.
    pub fe: P,
}

/// The instruction-flow walker over one range of the stream.
pub struct Walker<'a, 'c, F: Format, S: RowSink> {
    images: &'a ImageSet<'a>,
    cache: &'c mut BlockCache,
    front: F::Front<'a>,
    rules: Rules,
    pub st: FlowState<F::State>,
    la: Option<Item<<F::Front<'a> as Front>::Error>>,
    pending: Option<Item<<F::Front<'a> as Front>::Error>>,
    /// The CR3 of PIPs read between a FUP.FAR or FUP.PGD and its TIP, while the FUP's item
    /// waits in `la`. Such a PIP belongs to the transfer: the code up to the FUP's IP still
    /// runs in the old address space, so it takes effect when the item is consumed
    /// (fuzz finding cr3-across-psb: a block looked up with the new CR3 found no image).
    cr3_after_fup: Option<Option<u64>>,
    /// The same for a space selected while looking for a FUP's TIP (a PSB or an enable
    /// read there comes after the FUP: the code up to its IP is the old space's).
    space_after_fup: Option<Option<u64>>,
    /// Address spaces by stream offset (a recording's sideband): set by the chunk driver.
    pub(crate) spaces: Option<&'a Spaces>,
    /// Where the events read with the last PSB+ (`Item::Status`) start in `facts.events`.
    /// Its FUP may name an instruction ahead of the walk (SDM 36.4.2.17: the IP when the
    /// PSB was sent); the rows walked up to it retired before the PSB, so its events
    /// follow them (`Item::Status` below; fuzz finding `psb-ahead-of-the-walk`).
    status_events: Option<usize>,
    role: Role,
    /// (Stitch) the body's initial state.
    target: Option<Target<F::State>>,
    /// (Body) has resumed once; output before that is dropped.
    started: bool,
    /// Rows from here on are not decided by a packet yet.
    tail_start: usize,
    pub rows: S,
    /// Events, timing facts, and what the front end reads on the way.
    pub facts: Facts,
    /// (Body) cursor, IP and state right after the resume point its output starts from.
    pub body_start: Option<Target<F::State>>,
    /// Rows and NLIP right after the last branch (for FUP.PGD's second reading).
    alt_pgd: Option<(usize, u64)>,
    /// The block at this address, from the last block's successor link.
    hint: Option<(u64, u32)>,
    /// Guards the walk against running on without consuming anything.
    spin: LoopGuard,
    /// The guard fired inside the hot loop: report it from the general walk.
    stuck: bool,
    /// Walk the hot loop by memoized segments ([`crate::memo`]); false: step by step.
    memo: bool,
    /// This block ends in a conditional branch (the last segment's end, so known).
    cond_next: Option<u32>,
    /// (Body) the open instruction count was discarded (a gap) after the body's start and
    /// before any row that is kept: the stitch's open count and partial blocks do not
    /// reach the body's first row (the sequential decode loses them at that gap too).
    pub open_forgotten: bool,
    /// Where the reader started, and the bytes read then undone (a look-ahead), for
    /// [`bytes_read_on_this_thread`].
    read_from: u64,
    undone: u64,
    /// Rows, events and timing facts held at which the walk stops with [`Stop::Split`]
    /// (`usize::MAX`: never). A stretch without PSBs is one chunk however long; without
    /// this its piece held every row of it (about 100 times the trace's bytes).
    piece_limit: usize,
    /// Stop at the limit wherever the walk is (the output will be thrown away), not only
    /// where it can be handed on.
    stop_anywhere: bool,
}

type ItemOf<'a, F> = Item<<<F as Format>::Front<'a> as Front>::Error>;

impl<'a, 'c, F: Format, S: RowSink> Walker<'a, 'c, F, S> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        images: &'a ImageSet<'a>,
        cache: &'c mut BlockCache,
        stream: &'a TraceStream<'a>,
        cfg: &F::Config,
        end: u64,
        st: FlowState<F::State>,
        role: Role,
        rows: S,
    ) -> Self {
        let mut front = F::front(stream, cfg, st.cursor, end);
        front.seek(st.cursor, &st.fe);
        let read_from = st.cursor;
        Walker {
            images,
            cache,
            front,
            rules: F::rules(cfg),
            st,
            la: None,
            cr3_after_fup: None,
            space_after_fup: None,
            spaces: None,
            status_events: None,
            pending: None,
            role,
            target: None,
            started: role != Role::Body,
            tail_start: 0,
            rows,
            facts: Facts::default(),
            body_start: None,
            alt_pgd: None,
            hint: None,
            spin: LoopGuard::default(),
            stuck: false,
            memo: memo::memo_enabled(),
            cond_next: None,
            open_forgotten: false,
            read_from,
            undone: 0,
            piece_limit: usize::MAX,
            stop_anywhere: false,
        }
    }

    /// Stop with [`Stop::Split`] once `limit` rows, events and timing facts are held: at
    /// the first point after it where they can be handed on as a finished piece, or
    /// (`anywhere`) at once, for a caller that gives the output up.
    pub fn with_piece_limit(mut self, limit: usize, anywhere: bool) -> Self {
        self.piece_limit = limit.max(1);
        self.stop_anywhere = anywhere;
        self
    }

    /// The output has reached the piece limit.
    #[inline]
    fn over_limit(&self) -> bool {
        self.rows.len() + self.facts.events.len() + self.facts.timing.len() >= self.piece_limit
    }

    /// The output has reached the piece limit, and may be taken here.
    #[inline]
    fn full(&self) -> bool {
        self.over_limit() && self.may_stop_here()
    }

    /// Out of line: the walk's hot loop pays only for [`Walker::over_limit`].
    #[cold]
    #[inline(never)]
    fn may_stop_here(&self) -> bool {
        self.stop_anywhere || (self.output_final() && self.settled())
    }

    /// Right after `tnt_for_cond` queued a TNT packet read at a block's conditional
    /// branch: the output has reached the piece limit and may be taken here. Everything
    /// before the TNT has been read (the CYC after the last packet too), and the TNT's
    /// own bits, rows and CYC all go to the next piece. In a loop of conditional
    /// branches (full TNTs, each with its CYC) this is the only place a walk is settled.
    #[inline]
    fn full_at_fresh_tnt(&self) -> bool {
        self.over_limit() && self.may_stop_at_fresh_tnt()
    }

    #[cold]
    #[inline(never)]
    fn may_stop_at_fresh_tnt(&self) -> bool {
        !self.stop_anywhere && self.output_final()
    }

    /// Whether the output so far is final, so that the walk can hand it on and go on
    /// (where it is also [`Walker::settled`], or at a fresh TNT,
    /// [`Walker::full_at_fresh_tnt`]):
    /// - every row is decided (a gap drops the rows after the last decided one, which
    ///   must still be here to drop);
    /// - the last row is not a direct `jmp` or `call` (one made final by a PSB read): its
    ///   time is placed at the next decided row or stop, which the timeline looks for in
    ///   the next piece only;
    /// - no FUP's look-ahead holds events back, and nothing is read ahead (so no PSB+
    ///   waits to be applied, whose events, `status_events`, would be moved after rows
    ///   still to come);
    /// - the output is the walk's from its first byte (a body's is thrown away up to its
    ///   resume point, or all of it at a restart).
    fn output_final(&self) -> bool {
        self.rows.len() == self.tail_start
            && !self.rows.ends_in_direct()
            && self.facts.deferred.is_empty()
            && !self.facts.looking_ahead
            && self.role != Role::Body
            && self.la.is_none()
            && self.pending.is_none()
    }

    /// The TNT queue is empty (the rows of one TNT packet stay in one piece: the timeline
    /// finds a full TNT's exact row among them) and nothing read waits for a packet still
    /// to come ([`Front::settled`]: RTIT's CYC after the packet that decided the last
    /// row): the next packet read starts the next piece.
    fn settled(&self) -> bool {
        self.st.tnt.is_empty() && self.front.settled()
    }

    /// Take the output so far (after [`Stop::Split`]): the walk goes on from its state
    /// with empty output, exactly as if the range had ended here and a walker started
    /// over from its exit state, except that nothing is read twice. What points into the
    /// output is moved down with it.
    pub fn split_off(&mut self) -> (S, Vec<EventRow>, Vec<TimingFact>)
    where
        S: Default,
    {
        let n = self.rows.len();
        debug_assert_eq!(n, self.tail_start, "only decided rows are handed on");
        let rows = std::mem::take(&mut self.rows);
        self.tail_start = 0;
        // A second reading of a FUP.PGD may drop the rows after index `r`: still possible
        // only when `r` is the end (before it, the rows are decided and it cannot).
        self.alt_pgd = self
            .alt_pgd
            .and_then(|(r, nlip)| (r >= n).then_some((r - n, nlip)));
        self.facts.seq = self.facts.seq.saturating_sub(n as u64);
        // Nothing is read ahead, so the PSB+ those events came with has been applied or
        // passed over: the index is used only when it is applied. (It stays set after a
        // PSB+ read while not tracing, which kept an Intel PT walk from ever splitting.)
        self.status_events = None;
        (
            rows,
            std::mem::take(&mut self.facts.events),
            std::mem::take(&mut self.facts.timing),
        )
    }

    /// A stitch meeting `target` (a body's start).
    pub fn with_target(mut self, target: Target<F::State>) -> Self {
        self.role = Role::Stitch;
        self.target = Some(target);
        self
    }

    /// The state to hand on (valid after `Stop::End`, when nothing is looked ahead).
    pub fn exit_state(&self) -> FlowState<F::State> {
        let mut s = self.st.clone();
        s.cursor = self.front.pos();
        self.front.save(&mut s.fe);
        s
    }

    /// Let the stitch read further (into the next chunk).
    pub fn end(&self) -> u64 {
        self.front.end()
    }

    pub fn extend(&mut self, end: u64, role: Role) {
        self.front.set_end(end);
        self.role = role;
        if role != Role::Stitch {
            self.target = None;
        }
    }

    /// Walk until the range ends or the role says stop.
    pub fn run(&mut self) -> Stop {
        loop {
            let r = match self.st.mode {
                Mode::Tracing => self.walk(),
                _ => self.idle(),
            };
            let r = match r {
                None if self.full() => Some(Stop::Split),
                r => r,
            };
            if let Some(stop) = r {
                self.facts.seq = self.rows.len() as u64;
                self.facts.flush_deferred(u64::MAX);
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
        self.facts.seq = self.rows.len() as u64;
        self.facts.event(offset, kind, ip, detail);
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
    /// a disable, an overflow, TraceSTOP, an enable while tracing): the instructions it ran
    /// make a partial block, from `block_start` through `last_insn`. It counts in coverage
    /// with the next row, which carries its instructions.
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
            for e in self.facts.events.iter_mut().chain(&mut self.facts.deferred) {
                e.seq = e.seq.min(n);
            }
            for t in &mut self.facts.timing {
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
        self.st.ret.reset(Below::AfterGap);
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
            self.facts.events.clear();
            self.facts.deferred.clear();
            self.facts.timing.clear();
            self.tail_start = 0;
            self.forget_open();
            // That was the body's start, not a gap after it.
            self.open_forgotten = false;
            let mut fe = self.st.fe.clone();
            self.front.save(&mut fe);
            self.body_start = Some(Target {
                cursor: self.front.pos(),
                ip,
                bits: self.st.bits,
                space: self.st.space,
                fe,
            });
        }
    }

    /// The execution mode changes: blocks are looked up in the new mode from here on.
    fn set_bits(&mut self, bits: Bits) {
        if self.st.bits != bits {
            self.st.bits = bits;
            self.hint = None;
        }
    }

    // ----- packets ----------------------------------------------------------------

    /// Next flow item; what the front end reads on the way goes to `facts`.
    #[inline(always)]
    fn next_item(&mut self) -> ItemOf<'a, F> {
        self.facts.seq = self.rows.len() as u64;
        if !self.facts.looking_ahead {
            // The FUP whose look-ahead read them has been applied.
            self.facts.flush_deferred(u64::MAX);
        }
        if let Some(it) = self.pending.take() {
            return it;
        }
        if self.memo && !self.facts.looking_ahead {
            // A plain TNT next (the front end says so, or leaves it to `next`): what
            // `next` would return for it, without the general path's snapshot. (Not while
            // looking ahead: `next` stops at the look-ahead's limit, this would not.)
            if let Some((tnt, off)) = self.front.try_tnt(&mut self.st.fe) {
                return Item::Tnt { tnt, off };
            }
        }
        self.next_item_read()
    }

    /// [`Walker::next_item`] from the front end's general path.
    #[inline(never)]
    fn next_item_read(&mut self) -> ItemOf<'a, F> {
        // What to restore if this is a FUP whose look-ahead runs off the range: the state
        // before this call (the packets before the FUP are read again, with the same
        // result).
        let before_pos = self.front.pos();
        // The reader's own part (RTIT: whether a CYC is due) lives in the reader until
        // saved: take it now, or an undo would seek back with a stale one and read the
        // packets again differently (a CYC read as a TNT).
        let mut before_fe = self.st.fe.clone();
        self.front.save(&mut before_fe);
        let before_cr3 = self.st.cr3;
        let before_space = self.st.space;
        let (ne, nd, nt) = (
            self.facts.events.len(),
            self.facts.deferred.len(),
            self.facts.timing.len(),
        );
        let raw = self.front.next(&mut self.st.fe, &mut self.facts);
        let read = |v: &[EventRow], from: usize| {
            v[from.min(v.len())..]
                .iter()
                .any(|e| e.kind == EventKind::Psb)
        };
        if read(&self.facts.events, ne) || read(&self.facts.deferred, nd) {
            // Every PSB may start a chunk, whose stitch gets the rows walked before it as
            // final: a gap met after the PSB does not take them back in any decode, even
            // when a FUP's look-ahead read it (fuzz findings `tail-across-psb`,
            // `tail-across-psb-in-look-ahead`).
            self.tail_start = self.rows.len();
        }
        if let Some(cr3) = self.facts.cr3.take() {
            self.set_cr3(cr3);
        }
        if let Some(spaces) = self.spaces {
            self.select_space(spaces, &raw, ne, nd);
        }
        match raw {
            Raw::Tnt { tnt, off } => Item::Tnt { tnt, off },
            Raw::Tip { ip, off, anchor } => Item::Tip { ip, off, anchor },
            Raw::TipPgd { ip, off } => Item::SyncPgd { ip, off },
            Raw::Pge { ip, off } => Item::Pge { ip, off },
            Raw::Ovf { ip, off } => Item::BuffOvf { ip, off },
            Raw::Stop { off } => Item::TraceStop { off },
            Raw::Status { ip, bits, off } => {
                // (Read looking for a FUP's TIP, its events wait in `deferred`.)
                self.status_events = (!self.facts.looking_ahead).then_some(ne);
                Item::Status { ip, bits, off }
            }
            Raw::At { ip, off, what } => Item::At { ip, off, what },
            Raw::Error { off, e } => Item::Error { off, e },
            Raw::Limit => Item::NoneNear,
            Raw::End => Item::End,
            Raw::Fup { ip, off, role } => {
                let mut st = self.st.clone();
                st.fe = before_fe;
                st.cr3 = before_cr3;
                st.space = before_space;
                let before = Snapshot {
                    pos: before_pos,
                    st,
                    events: ne,
                    deferred: nd,
                    timing: nt,
                };
                if self.facts.looking_ahead {
                    // Right after another FUP: leave it unread for the next item.
                    self.undo(&before);
                    return Item::FupNext;
                }
                // PIPs read with the FUP came before it; those read looking for its TIP
                // belong to the transfer.
                let cr3_at_fup = self.st.cr3;
                let space_at_fup = self.st.space;
                match self.tip_after(&before, off) {
                    None => Item::End,
                    Some(tip) => {
                        self.hold_cr3(cr3_at_fup);
                        self.hold_space(space_at_fup);
                        match (role, tip) {
                            (FupRole::Pgd, t) => Item::Pgd {
                                ip,
                                off,
                                tip: t.map(|t| (t.0, t.1)),
                            },
                            (FupRole::Async, Some((t, toff, true))) => Item::Pgd {
                                ip,
                                off,
                                tip: Some((t, toff)),
                            },
                            (FupRole::Far | FupRole::Async, t) => Item::Far {
                                ip,
                                off,
                                tip: t.filter(|t| !t.2).map(|t| (t.0, t.1)),
                            },
                        }
                    }
                }
            }
        }
    }

    /// After a FUP at `fup_off`: the TIP (or, last field true, TIP.PGD) that follows, if
    /// the next flow item is one (another item is kept for later). `None` when the range
    /// ends first: everything since `before` is undone, so the FUP is read again by
    /// whoever reads on.
    #[allow(clippy::option_option, clippy::type_complexity)]
    fn tip_after(
        &mut self,
        before: &Snapshot<F::State>,
        fup_off: u64,
    ) -> Option<Option<(Option<u64>, u64, bool)>> {
        self.facts.looking_ahead = true;
        self.facts.limit = fup_off.saturating_add(MAX_LOOKAHEAD_BYTES);
        let next = self.next_item();
        self.facts.looking_ahead = false;
        self.facts.limit = u64::MAX;
        match next {
            Item::Tip { ip, off, .. } => Some(Some((ip, off, false))),
            Item::SyncPgd { ip, off } => Some(Some((ip, off, true))),
            // At the end of the trace nothing follows: no TIP.
            Item::End if self.front.ends_at_stream_end() => Some(None),
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

    /// The lookup key of code: the sideband's space when the input has one, else the
    /// CR3 of the last PIP.
    #[inline(always)]
    fn key(&self) -> Option<u64> {
        if self.spaces.is_some() {
            self.st.space
        } else {
            self.st.cr3
        }
    }

    /// Select the space of the last place just read, if any: a PSB read for `raw` (events
    /// from `ne` and deferred events from `nd` on), or `raw` itself when it is an enable
    /// or an overflow's resume (where execution may be in another process).
    fn select_space(
        &mut self,
        spaces: &Spaces,
        raw: &Raw<<F::Front<'a> as Front>::Error>,
        ne: usize,
        nd: usize,
    ) {
        let psb = |v: &[EventRow], from: usize| {
            v[from.min(v.len())..]
                .iter()
                .rev()
                .find(|e| e.kind == EventKind::Psb)
                .map(|e| e.offset)
        };
        let item = match *raw {
            Raw::Pge { off, .. } | Raw::Ovf { off, .. } => Some(off),
            _ => None,
        };
        // The last place read wins: a chunk body starting at a PSB read here selects
        // there too.
        let at = item
            .max(psb(&self.facts.events, ne))
            .max(psb(&self.facts.deferred, nd));
        if let Some(o) = at {
            let space = spaces.at(o);
            if self.st.space != space {
                self.st.space = space;
                // The successor link was found in the old space.
                self.hint = None;
            }
        }
    }

    /// A FUP's look-ahead selected a space other than `before`: keep walking in `before`
    /// until the FUP's item is consumed (`space_after_fup`), as for a PIP.
    fn hold_space(&mut self, before: Option<u64>) {
        if self.st.space != before {
            self.space_after_fup = Some(self.st.space);
            self.st.space = before;
        }
    }

    /// Go back to `before`: the packets read since are read again by whoever reads on.
    fn undo(&mut self, before: &Snapshot<F::State>) {
        self.facts.events.truncate(before.events);
        self.facts.deferred.truncate(before.deferred);
        self.facts.timing.truncate(before.timing);
        self.st = before.st.clone();
        self.undone += self.front.pos().saturating_sub(before.pos);
        self.front.seek(before.pos, &self.st.fe);
        self.hint = None;
    }

    /// The next item without consuming it.
    fn peek(&mut self) -> ItemOf<'a, F> {
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
        if let Some(space) = self.space_after_fup.take() {
            if self.st.space != space {
                self.st.space = space;
                self.hint = None;
            }
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
            Item::Error { off, e } => {
                self.event(off, EventKind::Error, None, e.to_string());
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
                    // No RET is compressed across an overflow (RTIT 4.2.5, SDM 36.4.2.16).
                    self.st.ret.reset(Below::Empty);
                } else {
                    // A body that cannot read this FUP's IP stays unsynced, and the
                    // sequential decode, which could, may trace calls before the body's
                    // first resume point: there the return state is still unknown, not
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
            Item::Pgd { ip, off, .. } | Item::SyncPgd { ip, off } => {
                if self.st.mode != Mode::Disabled {
                    self.event(off, EventKind::Disable, ip, String::new());
                }
                // E2: a second PGD with no PGE between is ignored.
                if self.st.mode != Mode::Stopped {
                    self.st.mode = Mode::Disabled;
                }
            }
            Item::Status { ip, bits, off } => {
                if let Some(b) = bits {
                    self.set_bits(b);
                }
                match ip {
                    // The PSB+ says where execution is: tracing was on all along.
                    Some(ip) => {
                        self.event(off, EventKind::Resync, Some(ip), String::new());
                        self.resume(ip, off);
                    }
                    None => {
                        if self.st.mode == Mode::Unsynced {
                            self.st.mode = Mode::Disabled;
                        }
                    }
                }
            }
            Item::At { ip, off, what } => self.bound_event(ip, off, what),
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

    /// An event bound to an IP is applied (the walk is there, or not tracing).
    fn bound_event(&mut self, ip: Option<u64>, off: u64, what: Bound) {
        if let Bound::ExecMode(b) = what {
            self.set_bits(b);
        }
        let (kind, detail) = what.event();
        self.event(off, kind, ip, detail);
    }

    // ----- tracing -------------------------------------------------------------------

    /// For a stitch: has the walk met the body's initial state, or passed it?
    #[inline]
    fn at_target(&self) -> Option<Stop> {
        let t = self.target.as_ref()?;
        let pos = self.front.pos();
        if self.la.is_some() || self.pending.is_some() {
            return None;
        }
        if pos == t.cursor
            && self.st.mode == Mode::Tracing
            && self.st.tnt.is_empty()
            && self.st.ip == t.ip
            && self.st.bits == t.bits
            && self.st.space == t.space
        {
            let mut fe = self.st.fe.clone();
            self.front.save(&mut fe);
            if fe == t.fe {
                return Some(Stop::Converged);
            }
            return Some(Stop::Diverged);
        }
        if pos > t.cursor {
            return Some(Stop::Diverged);
        }
        None
    }

    /// Offset of the packet read ahead and not yet used.
    fn la_offset(&self) -> Option<u64> {
        self.la.and_then(|it| it.offset())
    }

    /// Something the trace and the code disagree on: report it with the offset of the
    /// packet involved and resync.
    fn inconsistent(&mut self, what: &str) {
        if self.pgd_second_reading() {
            return;
        }
        let (off, found) = match self.la {
            Some(it) if it.offset().is_some() => (it.offset().unwrap_or(0), it.name()),
            _ => (self.front.pos(), "nothing usable"),
        };
        self.consume();
        let ip = self.st.ip;
        self.gap(off, format!("{what} at {ip:#x}, found {found}"));
    }

    /// Make sure a TNT bit is queued, reading the next flow item if needed.
    #[inline]
    fn need_bit(&mut self) -> Result<(), Option<Stop>> {
        if !self.st.tnt.is_empty() {
            return Ok(());
        }
        if self.la.is_none() && self.pending.is_none() {
            // The common case, a TNT byte next: skip the general packet path.
            if let Some((tnt, off)) = self.front.try_tnt(&mut self.st.fe) {
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

    /// The TIP an indirect branch (or, with [`FarRule::TipOnly`], a far branch) needs.
    /// With deferred TIPs (SDM 36.4.2.3) it may come after the TNT bits of the branches
    /// that followed: queued already, or in the TNT packet next, whose bits are queued.
    /// Returns the next item, for the caller to match (not consumed).
    fn tip_for_indirect(&mut self) -> Result<ItemOf<'a, F>, ()> {
        if !self.st.tnt.is_empty() && !self.rules.deferred_tips {
            return Err(());
        }
        let it = self.peek();
        if let (Item::Tnt { tnt, off }, true) = (it, self.rules.deferred_tips) {
            if self.st.tnt.is_empty() {
                // The in-progress TNT, then the deferred TIP after it.
                self.consume();
                self.st.tnt.push(tnt);
                self.st.tnt_off = off;
                return Ok(self.peek());
            }
        }
        Ok(it)
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
            if self.full() {
                return Some(Stop::Split);
            }
            let queued = self.st.tnt.is_empty() && self.tnt_for_cond();
            if queued && self.full_at_fresh_tnt() {
                return Some(Stop::Split);
            }
            // (A TNT just queued is not empty.)
            if self.st.tnt.is_empty() {
                // Nothing queued: the next flow item says what happens next.
                match self.peek() {
                    Item::Tnt { .. } | Item::Tip { .. } | Item::FupNext | Item::NoneNear => {}
                    Item::End => return Some(Stop::End),
                    Item::Error { off, e } => {
                        self.consume();
                        self.gap(off, e.to_string());
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
                            match tip {
                                Some((Some(t), _)) => {
                                    self.event(off, EventKind::Interrupt, Some(x), went_to(tip));
                                    self.close_block();
                                    self.st.ip = t;
                                    self.enter_block(t);
                                    self.decided(off);
                                    self.st.after_branch = false;
                                    continue;
                                }
                                _ => {
                                    self.event(off, EventKind::Interrupt, Some(x), String::new());
                                    self.gap(off, "FUP.FAR without a TIP".to_string());
                                    return None;
                                }
                            }
                        }
                    }
                    Item::Pgd {
                        ip: Some(x),
                        off,
                        tip,
                    } => {
                        if x == self.st.ip && !self.far_ahead(x) {
                            self.consume();
                            self.close_block();
                            self.event(off, EventKind::Disable, Some(x), went_to(tip));
                            self.decided(off);
                            self.st.mode = Mode::Disabled;
                            return None;
                        }
                        if self.st.after_branch && self.rules.far == FarRule::FupAndTip {
                            // If the walk cannot reach X, the PGD may name the sequential
                            // NLIP of this branch (a jump out of the region): remember it.
                            self.alt_pgd = Some((self.rows.len(), self.st.prev_nlip));
                        }
                    }
                    Item::SyncPgd { ip: Some(x), off } => {
                        if x == self.st.ip {
                            // Tracing stopped on reaching X (a direct branch out of the
                            // region, SDM 36.4.2.5).
                            self.consume();
                            self.close_block();
                            self.event(off, EventKind::Disable, Some(x), String::new());
                            self.decided(off);
                            self.st.mode = Mode::Disabled;
                            return None;
                        }
                    }
                    // Binds to the next branch that needs trace (below).
                    Item::SyncPgd { ip: None, .. } => {}
                    Item::Status {
                        ip: Some(x),
                        bits,
                        off,
                    } => {
                        if x == self.st.ip {
                            // A PSB+ while tracing: the walk is where it says.
                            self.consume();
                            // Its events follow the rows walked since it was read: they
                            // retired before the PSB went out.
                            if let Some(k) = self.status_events.take() {
                                let n = self.rows.len() as u64;
                                for e in self.facts.events.iter_mut().skip(k) {
                                    e.seq = n;
                                }
                            }
                            if let Some(b) = bits {
                                self.set_bits(b);
                            }
                            // Its FUP may name an instruction inside a block (SDM
                            // 36.4.2.17: the IP when the PSB was sent). A chunk's body
                            // starting at this PSB+ cannot know where that block began,
                            // so every decode splits the block here: the instructions
                            // before X are a partial block (none at a block's entry).
                            self.close_block();
                            self.enter_block(x);
                            self.decided(off);
                            continue;
                        }
                    }
                    Item::Status { ip: None, off, .. } => {
                        self.consume();
                        self.close_block();
                        self.gap(off, "a PSB+ says tracing is off while tracing".to_string());
                        return None;
                    }
                    Item::At {
                        ip: Some(x),
                        off,
                        what,
                    } => {
                        if x == self.st.ip {
                            self.consume();
                            self.bound_event(Some(x), off, what);
                            continue;
                        }
                    }
                    Item::At {
                        ip: None,
                        off,
                        what,
                    } => {
                        self.consume();
                        self.bound_event(None, off, what);
                        continue;
                    }
                    Item::Far { ip: None, .. } | Item::Pgd { ip: None, .. } => {
                        self.inconsistent("a FUP whose IP is unknown");
                        return None;
                    }
                }
            }
            if !self.st.tnt.is_empty()
                && if self.memo {
                    self.memo_walk()
                } else {
                    self.fast_walk()
                }
            {
                continue;
            }
            self.st.after_branch = false;
            self.st.resumed_at = None;
            // Walk one block: the successor link of the last one, or a lookup.
            let bi = match self.hint {
                Some((ip, bi)) if ip == self.st.ip => bi,
                _ => self
                    .cache
                    .index(self.images, self.st.ip, self.key(), self.st.bits),
            };
            self.hint = None;
            let h = self.cache.hot(bi);
            let (start, n, end, class, last_ip, target, next) = (
                self.st.ip, h.insns, h.end, h.class, h.last_ip, h.target, h.next,
            );
            // An item pending at an address inside this block applies there.
            if self.st.tnt.is_empty() {
                if let Some(x) = self.la.and_then(|it| it.applies_at()) {
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
                    let off = self.la_offset().unwrap_or(self.front.pos());
                    self.st.ip = next;
                    self.gap(off, format!("{why} {next:#x}"));
                    return None;
                }
            }
            self.st.open_insns += n;
            self.st.prev_nlip = next;
            // A TIP.PGD waiting binds to this branch if it needs trace.
            if self.st.tnt.is_empty() && class.needs_trace() {
                if let Some(Item::SyncPgd { ip, off }) = self.la {
                    {
                        self.consume();
                        let kind = class.branch_kind().expect("a branch");
                        let taken = class != InsnClass::Cond || ip == Some(target);
                        self.row(last_ip, ip, kind, taken, off);
                        self.decided(off);
                        if class.is_near_call() {
                            self.st.ret.call(next, false);
                        }
                        self.event(off, EventKind::Disable, ip, String::new());
                        self.st.mode = Mode::Disabled;
                        return None;
                    }
                }
            }
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
                    self.st.ret.call(next, target == next);
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
                        match self.st.ret.ret() {
                            Ok(to) => {
                                self.push_row(last_ip, Some(to), BranchKind::Ret, true, true, off);
                                self.decided(off);
                                self.st.ip = to;
                            }
                            Err(NoTarget::Below(Below::FromChunkStart))
                                if self.role == Role::Body =>
                            {
                                // The return address is in an earlier chunk: this body
                                // started too early. Start over after this TNT packet.
                                self.restart();
                                return None;
                            }
                            Err(_) => {
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
                    let Ok(it) = self.tip_for_indirect() else {
                        self.st.open_insns -= n;
                        let off = self.st.tnt_off;
                        self.gap(
                            off,
                            format!("TNT bits left at the indirect branch at {last_ip:#x}"),
                        );
                        return None;
                    };
                    match it {
                        Item::Tip {
                            ip: Some(to), off, ..
                        } => {
                            self.consume();
                            self.row(last_ip, Some(to), kind, true, off);
                            self.decided(off);
                            if class == InsnClass::CallInd {
                                self.st.ret.call(next, false);
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
                InsnClass::Far | InsnClass::Syscall if self.rules.far == FarRule::TipOnly => {
                    let kind = class.branch_kind().expect("far");
                    let Ok(it) = self.tip_for_indirect() else {
                        self.st.open_insns -= n;
                        let off = self.st.tnt_off;
                        self.gap(
                            off,
                            format!("TNT bits left at the far transfer at {last_ip:#x}"),
                        );
                        return None;
                    };
                    match it {
                        Item::Tip {
                            ip: Some(to), off, ..
                        } => {
                            self.consume();
                            self.row(last_ip, Some(to), kind, true, off);
                            self.decided(off);
                            self.st.ip = to;
                        }
                        Item::End => {
                            self.st.open_insns -= n;
                            return Some(Stop::End);
                        }
                        _ => {
                            self.st.open_insns -= n;
                            self.inconsistent("expected a TIP for the far transfer");
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
    /// through direct branches only. Only where far branches send a FUP at their NLIP
    /// ([`FarRule::FupAndTip`]); elsewhere a FUP names where an event struck.
    fn far_ahead(&mut self, x: u64) -> bool {
        if self.st.resumed_at != Some(x) || self.rules.far != FarRule::FupAndTip {
            return false;
        }
        let mut ip = x;
        for _ in 0..64 {
            let bi = self.cache.index(self.images, ip, self.key(), self.st.bits);
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
                ip: Some(x),
                off,
                tip,
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
        self.event(off, EventKind::Disable, Some(x), went_to(tip));
        self.decided(off);
        self.st.mode = Mode::Disabled;
        self.alt_pgd = None;
        true
    }

    /// The hot loop: while TNT bits are queued, walk blocks that end in a conditional
    /// branch, a direct jump or call, without looking at packets (no asynchronous event
    /// can apply while bits are queued, and a stitch cannot meet its target). Returns
    /// whether it walked anything; anything else goes to the general walk.
    #[inline]
    fn fast_walk(&mut self) -> bool {
        let mut walked = false;
        while !self.st.tnt.is_empty() {
            let bi = match self.hint {
                Some((ip, bi)) if ip == self.st.ip => bi,
                _ => self
                    .cache
                    .index(self.images, self.st.ip, self.key(), self.st.bits),
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
                    self.st.ret.call(h.next, h.target == h.next);
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
            let s = self.cache.successor(self.images, bi, which, self.key());
            self.hint = Some((to, s));
            walked = true;
            if kind != BranchKind::Cond && self.moved_without_packet(to) {
                self.stuck = true;
                break;
            }
        }
        walked
    }

    /// (Memo walk) Nothing queued or read ahead, the walk is at a block ending in a
    /// conditional branch, and the next packet is a plain TNT: queue its bits, for
    /// [`Walker::memo_walk`] to walk from this block. The step walk reads the TNT as the
    /// next item (`peek`), finds nothing applies at the loop's head, walks the block and
    /// consumes the item for the branch's bit (`need_bit`): the same, since nothing but
    /// the branch depends on when the TNT is consumed. Not in a stitch, which checks its
    /// target between the first branch and the rest.
    #[inline]
    fn tnt_for_cond(&mut self) -> bool {
        if !self.memo
            || self.la.is_some()
            || self.pending.is_some()
            || self.target.is_some()
            || self.facts.looking_ahead
        {
            return false;
        }
        let bi = match self.hint {
            Some((ip, bi)) if ip == self.st.ip => bi,
            _ => return false,
        };
        if self.cond_next != Some(bi) {
            let h = self.cache.hot(bi);
            if h.end != BlockEnd::Branch || h.class != InsnClass::Cond {
                return false;
            }
        }
        let Some((tnt, off)) = self.front.try_tnt(&mut self.st.fe) else {
            return false;
        };
        // What reading it as the next item (`next_item`) and consuming it do.
        self.facts.seq = self.rows.len() as u64;
        self.facts.flush_deferred(u64::MAX);
        self.consume();
        self.st.tnt.push(tnt);
        self.st.tnt_off = off;
        true
    }

    /// The hot loop by memoized segments ([`crate::memo`]): what [`Walker::fast_walk`]
    /// does, a segment at a time. Each segment's effects are applied as the step walk
    /// would apply them row by row (the module doc says why that is exact); a segment in
    /// which the loop guard would fire is left to the step walk.
    #[inline]
    fn memo_walk(&mut self) -> bool {
        let mut walked = false;
        while !self.st.tnt.is_empty() {
            let bi = match self.hint {
                Some((ip, bi)) if ip == self.st.ip => bi,
                _ => self
                    .cache
                    .index(self.images, self.st.ip, self.key(), self.st.bits),
            };
            if !self.cache.keyed_for(self.images, bi, self.key()) {
                // (Not met: the walker drops its link on a CR3 change.) The step walk
                // looks the successors up itself.
                self.hint = Some((self.st.ip, bi));
                return self.fast_walk() || walked;
            }
            let (bits, n) = self.st.tnt.peek(KEY_BITS);
            let si = memo::segment(
                self.cache,
                self.images,
                bi,
                self.st.ip,
                bits as u8,
                n,
                self.key(),
            );
            let seg = self.cache.memo.seg(si);
            if seg.len == 0 {
                self.hint = Some((self.st.ip, bi));
                break;
            }
            let rows = self.cache.memo.rows(&seg);
            let mut spin = self.spin;
            if seg.has_direct {
                // The loop guard sees each direct jump and call with the queue as it was
                // then; if it fires, the step walk stops and reports where it does.
                let pos = self.front.pos();
                let tnt = self.st.tnt;
                let fires = rows.iter().any(|m| {
                    m.kind != BranchKind::Cond && spin.step(m.target, pos, tnt.after(m.used))
                });
                if fires {
                    self.hint = Some((self.st.ip, bi));
                    return self.fast_walk() || walked;
                }
            }
            self.spin = spin;
            if !self.st.partials.is_empty() {
                // Partial blocks since the last row: the first row carries them.
                for p in self.st.partials.iter() {
                    self.rows.partial(p);
                }
                self.st.partials.clear();
            }
            let has_cond = seg.end_cond > 0;
            let first = self.rows.len();
            self.rows.replay(&Replay {
                seg: si,
                rows,
                open: self.st.open_insns,
                block_base: self.st.block_base,
                block_start: self.st.block_start,
                insns: seg.insns,
                cr3: self.st.cr3_row,
                off_before: self.st.decision,
                off_after: self.st.tnt_off,
                first_cond: if has_cond {
                    seg.first_cond as usize
                } else {
                    rows.len()
                },
            });
            if seg.has_call {
                for m in rows.iter().filter(|m| m.kind == BranchKind::Call) {
                    self.st.ret.call(m.next, m.target == m.next);
                }
            }
            self.st.tnt = self.st.tnt.after(seg.used);
            if has_cond {
                self.st.decision = self.st.tnt_off;
                self.tail_start = first + seg.end_cond as usize;
                self.alt_pgd = None;
            }
            self.st.open_insns = 0;
            self.st.block_base = 0;
            self.st.block_start = seg.end_ip;
            self.st.ip = seg.end_ip;
            self.st.prev_nlip = seg.last_next;
            self.st.after_branch = true;
            self.st.resumed_at = None;
            self.hint = Some((seg.end_ip, seg.end_block));
            self.cond_next = if seg.cond_next {
                Some(seg.end_block)
            } else {
                None
            };
            walked = true;
            if seg.blocked {
                break;
            }
        }
        walked
    }

    /// The walk went to `to` by a direct jump, call or block split, consuming nothing;
    /// true when that proves it is going round a cycle (see [`LoopGuard`]).
    #[inline]
    fn moved_without_packet(&mut self, to: u64) -> bool {
        self.spin.step(to, self.front.pos(), self.st.tnt)
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
        let s = self.cache.successor(self.images, bi, which, self.key());
        self.hint = Some((to, s));
    }

    /// (Body) discard everything and look for a resume point again.
    fn restart(&mut self) {
        self.rows.truncate(0);
        self.facts.events.clear();
        self.facts.deferred.clear();
        self.facts.timing.clear();
        self.tail_start = 0;
        self.started = false;
        self.body_start = None;
        self.st.mode = Mode::Unsynced;
        self.st.tnt.clear();
        // What the next resume point's return state lies on is the stitch's again.
        self.st.ret.reset(Below::FromChunkStart);
        self.forget_open();
        self.open_forgotten = false;
    }
}

impl<F: Format, S: RowSink> Drop for Walker<'_, '_, F, S> {
    fn drop(&mut self) {
        let read = self.front.pos().saturating_sub(self.read_from) + self.undone;
        READ.with(|r| r.set(r.get() + read));
    }
}

/// An `events` detail naming where a transfer went (the TIP after a FUP), if it says.
fn went_to(tip: Option<(Option<u64>, u64)>) -> String {
    match tip.and_then(|t| t.0) {
        Some(t) => format!("to {t:#x}"),
        None => String::new(),
    }
}

/// What to restore when a look-ahead runs off the end of the range.
struct Snapshot<P> {
    pos: u64,
    st: FlowState<P>,
    events: usize,
    deferred: usize,
    timing: usize,
}

#[cfg(test)]
mod tests {
    use crate::chunk::{decode_all, Input};
    use crate::image::ImageSet;
    use crate::rtit::clock::TimingConfig;
    use crate::rtit::packet::PSB_BYTES;
    use crate::rtit::{Rtit, TraceConfig};
    use crate::stream::TraceStream;
    use tracemill_schemas::EventKind;

    /// `trace` over `images` decoded sequentially and in chunks of one PSB each (RTIT_CTL
    /// 0, no timing): (chunk size, result) for both.
    fn decode_sequential_and_chunked(
        images: &ImageSet<'_>,
        trace: &[u8],
    ) -> Vec<(u64, crate::chunk::Decoded)> {
        let stream = TraceStream::linear(trace);
        let cfg = TraceConfig::from_ctl(0);
        let input = Input::<Rtit> {
            spaces: None,
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

    /// A trace without PIPs of two processes with different code at the same address
    /// (`crate::spaces`): the space is chosen at each enable by the time of the last
    /// timing packet before it, the same in every decode; rows keep a null CR3.
    #[test]
    fn sideband_spaces_choose_the_code_at_each_enable_for_every_chunk_size() {
        use crate::pt::encode::{compress_ip, encode};
        use crate::pt::packet::{ExecMode, IpCompression, IpPayload, Packet};
        use crate::pt::PtConfig;
        // Space 1 has `ret` at 0x1000, space 2 `jmp *%rax`.
        let (ret, jmp) = ([0xC3u8], [0xFFu8, 0xE0]);
        let mut images = ImageSet::new();
        images.add_raw("one", &ret, 0x1000, Some(1));
        images.add_raw("two", &jmp, 0x1000, Some(2));
        let mode = Packet::ModeExec(ExecMode {
            csl: true,
            csd: false,
            iflag: false,
        });
        let mut t = Vec::new();
        let mut put = |p: Packet| encode(&p, &mut t).unwrap();
        for tsc in [1000, 2000, 3000] {
            put(Packet::Psb);
            put(Packet::Tsc(tsc));
            put(Packet::PsbEnd);
            put(mode);
            put(Packet::TipPge(compress_ip(0x1000, 0)));
            // The branch leaves the traced region.
            put(Packet::TipPgd(IpPayload {
                compression: IpCompression::Suppressed,
                bits: 0,
            }));
        }
        let stream = TraceStream::linear(&t);
        let cfg = PtConfig {
            tsc: true,
            ..PtConfig::default()
        };
        let mut input = Input::pt(&stream, &images, cfg);
        // The sideband: process 1 until TSC 2000, 2 until 3000, then 1 again.
        let key = |d: Option<u64>| d.map(|t| if (2000..3000).contains(&t) { 2 } else { 1 });
        let spaces = crate::spaces::schedule::<crate::Pt>(&stream, &input.cfg, &input.timing, key);
        // The first PSB has no time before it; the rest follow the enables.
        assert_eq!(spaces.len(), 3, "{spaces:?}");
        input.spaces = Some(&spaces);
        let seq = decode_all(&input, u64::MAX);
        assert!(errors_of(&seq).is_empty(), "{:?}", errors_of(&seq));
        let kinds: Vec<_> = seq.rows.rows().map(|r| (r.ip, r.kind, r.cr3)).collect();
        assert_eq!(
            kinds,
            [
                (0x1000, tracemill_schemas::BranchKind::Ret, None),
                (0x1000, tracemill_schemas::BranchKind::JmpInd, None),
                (0x1000, tracemill_schemas::BranchKind::Ret, None)
            ]
        );
        let chunked = decode_all(&input, 1);
        assert_eq!(chunked.fallbacks, 0);
        assert_eq!(seq.rows, chunked.rows);
        assert_eq!(seq.events, chunked.events);
        assert_eq!(seq.coverage, chunked.coverage);
        // Without the sideband the code at 0x1000 is ambiguous: nothing is decoded there.
        input.spaces = None;
        assert_eq!(decode_all(&input, u64::MAX).rows.len(), 0);
    }

    /// SDM 36.4.2.17: a PSB+ gives the state "at the time of the PSB", so its FUP may name
    /// an instruction inside a basic block. A chunk starting at that PSB+ resumes there
    /// and cannot know where the block began: every decode splits the block at the FUP
    /// (the instructions before it a partial block), so that coverage is the same for any
    /// chunk size. (It used to count the whole block sequentially and only its tail in a
    /// chunk's body.)
    #[test]
    fn psb_plus_inside_a_block_splits_it_for_every_chunk_size_36_4_2_17() {
        use crate::pt::encode::{compress_ip, encode};
        use crate::pt::packet::{ExecMode, IpCompression, IpPayload, Packet, Tnt};
        use crate::pt::PtConfig;
        // 0x1000: nop; nop; nop; jne 0x1000 (75 fb)
        let code = [0x90, 0x90, 0x90, 0x75, 0xFB];
        let mut images = ImageSet::new();
        images.add_raw("loop", &code, 0x1000, None);
        let mode = Packet::ModeExec(ExecMode {
            csl: true,
            csd: false,
            iflag: false,
        });
        let mut t = Vec::new();
        let mut put = |p: Packet| encode(&p, &mut t).unwrap();
        put(Packet::Psb);
        put(Packet::PsbEnd);
        put(mode);
        put(Packet::TipPge(compress_ip(0x1000, 0)));
        // Two nops ran: the PSB+ names the third.
        put(Packet::Psb);
        put(mode);
        put(Packet::Fup(compress_ip(0x1002, 0)));
        put(Packet::PsbEnd);
        // jne taken, then not taken; tracing off at 0x1005.
        put(Packet::Tnt8(Tnt { bits: 0b10, len: 2 }));
        put(Packet::Fup(compress_ip(0x1005, 0x1002)));
        put(Packet::TipPgd(IpPayload {
            compression: IpCompression::Suppressed,
            bits: 0,
        }));
        let stream = TraceStream::linear(&t);
        let cfg = PtConfig::default();
        let input = Input::pt(&stream, &images, cfg);
        let seq = decode_all(&input, u64::MAX);
        assert!(errors_of(&seq).is_empty(), "{:?}", errors_of(&seq));
        assert_eq!(seq.rows.insns, [4, 4]);
        let mut blocks: Vec<_> = seq.coverage.blocks.iter().map(|(k, v)| (*k, *v)).collect();
        blocks.sort_unstable();
        // 0x1000-0x1001 (2 instructions, the partial before the PSB+), 0x1002-0x1003 (2),
        // 0x1000-0x1003 (4, the second pass).
        assert_eq!(
            blocks,
            [
                ((0x1000, 0x1001), (2, 1)),
                ((0x1000, 0x1003), (4, 1)),
                ((0x1002, 0x1003), (2, 1))
            ]
        );
        let chunked = decode_all(&input, 1);
        assert_eq!(chunked.fallbacks, 0);
        assert_eq!(seq.rows, chunked.rows);
        assert_eq!(seq.events, chunked.events);
        assert_eq!(seq.coverage, chunked.coverage);
    }

    /// SDM 36.4.2.17 (no state retained across a PSB) and 36.4.2.8 (MODE.Exec goes out
    /// with a TIP.PGE when none was sent since the last PSB): a PSB+ sent while tracing is
    /// off has no MODE.Exec, and the one before the next TIP.PGE is news to every decode,
    /// so a chunk starting at that PSB+ meets the stitch (it used to fall back: the
    /// sequential decode still held the mode from before the PSB and read the MODE.Exec as
    /// a repeat).
    #[test]
    fn mode_exec_is_forgotten_at_a_psb_36_4_2_17() {
        use crate::pt::encode::{compress_ip, encode};
        use crate::pt::packet::{ExecMode, IpCompression, IpPayload, Packet, Tnt};
        use crate::pt::PtConfig;
        // 0x1000: nop; jne 0x1000 (75 fd)
        let code = [0x90, 0x75, 0xFD];
        let mut images = ImageSet::new();
        images.add_raw("loop", &code, 0x1000, None);
        let mode = Packet::ModeExec(ExecMode {
            csl: true,
            csd: false,
            iflag: false,
        });
        let off = IpPayload {
            compression: IpCompression::Suppressed,
            bits: 0,
        };
        let mut t = Vec::new();
        let mut put = |p: Packet| encode(&p, &mut t).unwrap();
        put(Packet::Psb);
        put(Packet::PsbEnd);
        for i in 0..2 {
            put(mode);
            put(Packet::TipPge(compress_ip(0x1000, 0)));
            put(Packet::Tnt8(Tnt { bits: 0b10, len: 2 }));
            put(Packet::Fup(compress_ip(0x1003, 0x1000)));
            put(Packet::TipPgd(off));
            if i == 0 {
                // Tracing is off: a PSB+ with neither FUP nor MODE.Exec.
                put(Packet::Psb);
                put(Packet::PsbEnd);
            }
        }
        let stream = TraceStream::linear(&t);
        let cfg = PtConfig::default();
        let input = Input::pt(&stream, &images, cfg);
        let seq = decode_all(&input, u64::MAX);
        assert!(errors_of(&seq).is_empty(), "{:?}", errors_of(&seq));
        assert_eq!(seq.rows.len(), 4);
        let modes = seq.events.iter().filter(|e| e.kind == EventKind::ExecMode);
        assert_eq!(modes.count(), 2);
        let chunked = decode_all(&input, 1);
        assert_eq!(chunked.fallbacks, 0);
        assert_eq!(seq.rows, chunked.rows);
        assert_eq!(seq.events, chunked.events);
    }
}
