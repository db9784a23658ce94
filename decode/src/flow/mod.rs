//! Instruction flow: walk the code images along the trace and emit one row per executed
//! branch. This walker is shared by every format: it reads format-neutral flow items from
//! a front end ([`crate::front::Front`]) and follows the few rules in which the formats
//! differ as [`Rules`] set once per decode (see [`crate::front`] for the table).
//!
//! The walker keeps the small decoding states — queued TNT bits
//! ([`TntQueue`](crate::tnt::TntQueue)), the return-compression state ([`RetStack`]), the
//! execution mode, CR3 — and consumes flow items as the code needs them. What the front
//! end reads on the way (PSBs, timing packets, paging) arrives as facts ([`Facts`]).
//!
//! Rules that decide where an item applies:
//! - a cond branch takes the next TNT bit; a RET takes a bit when one is queued or the next
//!   flow item is a TNT (return compression), else a TIP; indirect JMP/CALL take a TIP (with
//!   deferred TIPs, [`Rules::deferred_tips`], after the TNT bits of later branches); far
//!   branches take FUP.FAR + TIP or FUP.PGD
//!   ([`FarRule::FupAndTip`](crate::front::FarRule::FupAndTip), RTIT) or a TIP or TIP.PGD
//!   ([`FarRule::TipOnly`](crate::front::FarRule::TipOnly), Intel PT);
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
//! Intel PT after an error also resumes as libipt 2.2 does: at the next TIP (the packet
//! that did not fit is itself one), a FUP + TIP at the FUP's IP, or an event bound to an
//! IP (docs/pt.md, "Resync after an error").
//!
//! An item without IP that binds to an instruction (Intel PT's PIP, VMCS, PTW without IP,
//! TIP.PGD without IP and a MOV CR3) waits while the walk goes on to that instruction
//! without trace; its event is reported after it, at its IP (a far branch's after its row:
//! [`FlowState::held`]). docs/pt.md, "Where PIP, VMCS and PTW without IP take effect".
//!
//! The walker's parts: `state` (what a chunk hands on), `query` (what the next packets
//! say: look-ahead, a FUP paired with its TIP, undo), `space` (CR3 and sideband spaces),
//! `walk` (the general walk), `hot` (the TNT-driven hot loops), `output` (rows, partial
//! blocks, events), `resync` (gaps, resume points, a body's restart).

use crate::block::memo;
use crate::block::BlockCache;
use crate::front::{Facts, Format, Front, Rules};
use crate::image::ImageSet;
use crate::loop_guard::LoopGuard;
pub use crate::piece::TimingFact;
pub use crate::retstack::{Below, NoTarget, RetModel, RetStack};
use crate::rows::EventRow;
pub use crate::sink::{CountSink, RowSink};
use crate::spaces::Spaces;
use crate::stream::TraceStream;

mod errata;
mod hot;
mod output;
mod query;
mod resync;
mod space;
mod state;
#[cfg(test)]
mod tests;
mod walk;

use query::Item;
pub use state::{FlowState, Held, Mode, Open, Partial, Partials, Target, TrigAnchor};

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
    /// Walk the hot loop by memoized segments ([`crate::block::memo`]); false: step by step.
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
            && self.st.held.is_empty()
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
            && self.st.held.is_empty()
        {
            let mut fe = self.st.fe.clone();
            self.front.save(&mut fe);
            if fe == t.fe && self.st.in_tx == t.in_tx {
                return Some(Stop::Converged);
            }
            return Some(Stop::Diverged);
        }
        if pos > t.cursor {
            return Some(Stop::Diverged);
        }
        None
    }
}

impl<F: Format, S: RowSink> Drop for Walker<'_, '_, F, S> {
    fn drop(&mut self) {
        let read = self.front.pos().saturating_sub(self.read_from) + self.undone;
        READ.with(|r| r.set(r.get() + read));
    }
}
