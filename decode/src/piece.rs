//! What a walk over one stretch of the trace produces — a *piece* — and the facts it
//! carries for the stages after it. Kept apart from the walker ([`crate::flow`]), the
//! chunking ([`crate::chunk`]) and the clock ([`crate::timing`]) so that each of those
//! depends on these types and none on another's internals. That includes what the
//! timeline computes of a piece ahead ([`Prepared`]): the piece carries it, so it is
//! defined here, below the timeline, and only the timeline reads its fields.

use tracemill_schemas::{EventKind, TimingKind};

use crate::coverage::Coverage;
use crate::rows::EventRow;
pub use crate::rows::PieceStats;

/// A timing packet seen, and where it falls among the rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimingFact {
    pub offset: u64,
    pub kind: TimingKind,
    /// Raw payload: MTC bits, STS TSC[39:0], CYC count, PCC IP.
    pub raw: u64,
    /// STS actual core/bus ratio.
    pub ratio: Option<u8>,
    /// Rows emitted before it (by this walker).
    pub row: u64,
}

/// Output of one piece (a body, a stitch, or a whole sequential decode).
#[derive(Clone, Debug, Default)]
pub struct Piece<S> {
    pub rows: S,
    pub stats: PieceStats,
    /// Blocks and edges of these rows.
    pub coverage: Coverage,
    /// `seq` relative to this piece's first row.
    pub events: Vec<EventRow>,
    /// `row` relative to this piece's first row.
    pub timing: Vec<TimingFact>,
    /// What the timeline reads of the piece besides its rows, when computed ahead, on the
    /// thread that decoded it ([`crate::timing::prepare`]); None: the timeline computes it.
    /// Whoever changes the piece's rows' kinds or offsets, or its events, drops it.
    pub prepared: Option<Box<Prepared>>,
}

/// What the timeline reads of a piece besides its rows, computed from the piece alone:
/// each row's effective offset, its exact rows (cycle-accurate timing) and its lead bound
/// ([`crate::timing::prepare`], which the pipeline runs on the thread that decoded the
/// piece: on the ordered thread these were 3% of a decode of a cycle-accurate RTIT trace,
/// with the page faults of their fresh vectors), then its marks (computed by the timeline once, when
/// the piece is next in line; they copy the piece's timing packets, so the pieces in
/// flight do not carry them).
#[derive(Clone, Debug, Default)]
pub struct Prepared {
    /// None when not computed ahead: a piece without timing packets in a trace without
    /// cycle-accurate timing, which the timeline passes over while nothing is dated yet
    /// (`Timeline::untimed`), and otherwise computes it for.
    pub(crate) eff: Option<Vec<u64>>,
    pub(crate) exact: Vec<bool>,
    pub(crate) lead: u64,
    /// The highest offset of a row decided by a packet (not a `jmp` or `call`), 0 for
    /// none: what `Timeline::pass` needs of the rows, taken here on the thread that
    /// decoded them, not on the ordered one.
    pub(crate) decided: u64,
    pub(crate) marks: Option<Vec<Mark>>,
}

/// A timing packet or an event that matters to time, in stream order.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mark {
    Fact(TimingFact),
    Event(u64, EventKind),
}
