//! What a walk over one stretch of the trace produces — a *piece* — and the facts it
//! carries for the stages after it. Kept apart from the walker ([`crate::flow`]), the
//! chunking ([`crate::chunk`]) and the clock ([`crate::timing`]) so that each of those
//! depends on these types and none on another's internals.

use tracemill_schemas::TimingKind;

use crate::coverage::Coverage;
use crate::rows::{BranchColumns, EventRow};

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

/// Counts over a piece's rows, taken where the piece was decoded (so that the thread
/// putting pieces in order does as little per row as possible).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PieceStats {
    /// Rows (the piece's rows may be counted, not kept: [`crate::tally`]).
    pub rows: u64,
    pub insns: u64,
    pub by_kind: [u64; 8],
}

impl PieceStats {
    /// Add `o`'s counts.
    pub fn add(&mut self, o: &PieceStats) {
        self.rows += o.rows;
        self.insns += o.insns;
        for (a, b) in self.by_kind.iter_mut().zip(o.by_kind) {
            *a += b;
        }
    }

    pub fn of(rows: &BranchColumns) -> Self {
        let mut s = PieceStats {
            rows: rows.len() as u64,
            insns: rows.insns.iter().map(|&i| i as u64).sum(),
            ..PieceStats::default()
        };
        for &k in &rows.kind {
            s.by_kind[k as usize & 7] += 1;
        }
        s
    }
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
    pub prepared: Option<Box<crate::timing::Prepared>>,
}
