//! The walker's state: its tracing mode, everything a chunk hands the next stitch
//! ([`FlowState`]), the partial blocks waiting for a row, and a body's start a stitch
//! must meet ([`Target`]).

use crate::front::{BindsTo, Bits, Bound};
use crate::retstack::{Below, RetModel, RetStack};
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
    /// Where tracing stopped, while disabled: the instruction the walk would have run next
    /// (an asynchronous disable's IP; after a branch that disabled tracing, its target
    /// if direct, else the instruction after it). An enable there is libipt's
    /// `[resumed]`. Forgotten at every PSB (a chunk may start there).
    pub stopped_at: Option<u64>,
    /// Executing inside a TSX transaction (Intel PT MODE.TSX): rows walked now are marked
    /// so.
    pub in_tx: bool,
    /// Events read before the TIP of the far branch the walk stands at, and bound to it
    /// (Intel PT PIP, VMCS): reported after its row. Part of the state because the range
    /// may end between them and the TIP.
    pub held: Held,
    /// Where a TRIG's instruction count starts, against the walk ([`TrigAnchor`]).
    pub trig: TrigAnchor,
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
            stopped_at: None,
            in_tx: false,
            held: Held::default(),
            trig: TrigAnchor::default(),
            cursor,
            fe,
        }
    }
}

/// A TRIG without IP counts its instructions from its *anchor* (libipt): the IP of the
/// last flow packet, or where the TRIG before it struck. The walk stands at the anchor
/// when it reads the TRIG, unless an item that binds to an instruction (a PTW without
/// IP, a PIP) made it walk on to that instruction first; and a TRIG strikes ahead of the
/// walk (its instructions are not walked). The `trigger` event's count is from the row or
/// event before it (docs/contracts.md), so the difference is taken off: both distances
/// are kept here, in instructions past the anchor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrigAnchor {
    /// The walk's position.
    pub walk: i32,
    /// The position the last row or event stands for (a bound event: after its
    /// instruction; a TRIG: where it struck).
    pub reference: i32,
}

impl TrigAnchor {
    /// The walk went `n` instructions on to an instruction a packet binds to, whose event
    /// it reports there.
    pub fn walked_to_event(&mut self, n: u32) {
        self.walk = self.walk.saturating_add(n.min(i32::MAX as u32) as i32);
        self.reference = self.walk;
    }

    /// The walk went `n` instructions on without an event (a block on the way there).
    pub fn walked(&mut self, n: u32) {
        self.walk = self.walk.saturating_add(n.min(i32::MAX as u32) as i32);
    }

    /// A TRIG that struck `icnt` instructions past the anchor: the count from the row or
    /// event before it. It becomes the anchor.
    pub fn trig(&mut self, icnt: u16) -> u16 {
        let from_reference = (icnt as i32 - self.reference).clamp(0, u16::MAX as i32);
        self.walk = self.walk.saturating_sub(icnt as i32);
        self.reference = 0;
        from_reference as u16
    }
}

/// Events bound to one far branch, in stream order ([`FlowState::held`]): at most one of
/// each kind, as libipt binds at most one paging and one VMCS event to an instruction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// The branch's address.
    pub at: u64,
    items: [Option<(u64, Bound)>; 2],
}

impl Held {
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.items[0].is_none()
    }

    /// Hold the event `what` read at `off` for the branch at `at`; false when one of its
    /// kind is held already (it binds to a later instruction).
    pub fn push(&mut self, at: u64, off: u64, what: Bound) -> bool {
        let kind = what.binds_to();
        if self.items.iter().flatten().any(|h| h.1.binds_to() == kind) {
            return false;
        }
        match self.items.iter_mut().find(|h| h.is_none()) {
            Some(h) => {
                *h = Some((off, what));
                self.at = at;
                true
            }
            None => false,
        }
    }

    /// Whether `to`'s event is held.
    pub fn has(&self, to: BindsTo) -> bool {
        self.items
            .iter()
            .flatten()
            .any(|h| h.1.binds_to() == Some(to))
    }

    /// The events held, in order, leaving none.
    pub fn take(&mut self) -> impl Iterator<Item = (u64, Bound)> {
        std::mem::take(&mut self.items).into_iter().flatten()
    }
}

/// The instructions a state holds that no row carries yet (see [`FlowState::open`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Open {
    /// How many.
    pub insns: u32,
    /// The blocks they ran in: the partial blocks, then the block the walk stands inside,
    /// as partial blocks (start, last instruction, instructions, times).
    pub blocks: Vec<Partial>,
}

impl<P> FlowState<P> {
    /// The instructions walked since the last row, which the next row would carry (the
    /// partial blocks left by a disable, an interrupt or an overflow, and the start of
    /// the block the walk stands inside): at the end of the trace no row comes, and they
    /// are the trace's tail (`EventKind::Tail`).
    pub fn open(&self) -> Open {
        let mut blocks: Vec<Partial> = self.partials.iter().collect();
        let inside = self.open_insns.saturating_sub(self.block_base);
        if inside > 0 {
            blocks.push((self.block_start, self.last_insn, inside, 1));
        }
        Open {
            insns: self.open_insns,
            blocks,
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

pub use crate::rows::Partial;

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
    /// Inside a TSX transaction there (what the body assumed: a body cannot know it before
    /// a PSB+ says; a stitch that meets the body in another state does not converge).
    pub in_tx: bool,
}
