//! Rows counted, not kept: what a decode needs when the `branches` table is not asked for.
//!
//! `--tables events`, `--tables coverage,edges` and the like need of the rows only their
//! number (events' `seq`), their instructions and kinds (the summary) and, for coverage,
//! their blocks and edges. [`Tally`] is a [`RowSink`] that keeps exactly that, as a
//! [`RowLog`] (`rows/log.rs`): which memoized segments ([`crate::block::memo`]) were
//! replayed in which order, and the rows the step walk pushed one by one. A segment's rows
//! are copied once per piece; each replay costs one entry. At the end of the piece the log
//! is expanded once per distinct segment, multiplied by its replays, into the piece's
//! counts and coverage, so counting costs nothing per replayed row.
//!
//! The log can be cut back to any row ([`RowSink::truncate`]: the walker drops rows no
//! packet has decided, or a body's rows before its resume point): entries past the cut go,
//! and an entry straddling it keeps its first rows.

use tracemill_schemas::BranchKind;

use crate::block::memo::Replay;
use crate::coverage::Coverage;
use crate::rows::{BranchRow, Partial, PieceStats, RowLog};
use crate::sink::RowSink;

/// The sink of a decode that keeps no row: counts, and coverage when `COVER`.
#[derive(Clone, Debug, Default)]
pub struct Tally<const COVER: bool> {
    log: RowLog,
}

/// Counts rows only (`--tables events`, `timing`).
pub type Counted = Tally<false>;
/// Counts rows and their blocks and edges (`--tables coverage,edges`).
pub type Covered = Tally<true>;

impl<const COVER: bool> RowSink for Tally<COVER> {
    #[inline]
    fn push(&mut self, r: &BranchRow, block: (u64, u32)) {
        self.log.push(r, block);
    }
    #[inline]
    fn replay(&mut self, r: &Replay<'_>) {
        self.log.replay(r);
    }
    fn partial(&mut self, p: Partial) {
        self.log.partial(p);
    }
    fn finish(&mut self) -> (PieceStats, Coverage) {
        // The piece keeps only its count.
        self.log.finish(COVER)
    }
    fn set_last_target(&mut self, to: u64) {
        self.log.set_last_target(to);
    }
    fn len(&self) -> usize {
        self.log.len()
    }
    fn truncate(&mut self, n: usize) {
        self.log.truncate(n);
    }
    fn add_insns(&mut self, _i: usize, _n: u32) {
        // Instructions are counted from the log at `finish`; the stitch adds its carry to
        // the piece's counts.
    }
    fn ends_in_direct(&self) -> bool {
        matches!(self.log.last_kind(), Some(k) if k == BranchKind::Jmp as u8 || k == BranchKind::Call as u8)
    }
}
