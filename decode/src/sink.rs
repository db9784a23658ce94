//! Where the walker's rows go: the [`RowSink`] trait, the table's columns
//! ([`BranchColumns`]) as the normal sink, and a counting sink ([`CountSink`]) that
//! measures the walk alone.

use tracemill_schemas::BranchKind;

use crate::block::memo::Replay;
use crate::rows::{BranchColumns, BranchRow, Partial, PieceStats};

/// Receives branch rows. The columns builder is the normal sink; a counting sink measures
/// the walk alone.
pub trait RowSink {
    /// Append a row (the walker leaves `tsc` and `cycles` to the timing pass) and the
    /// basic block it closes: (first instruction, instructions in the block).
    fn push(&mut self, r: &BranchRow, block: (u64, u32));
    /// A partial block (start, last instruction, instructions, times) whose instructions
    /// the next row pushed carries; `truncate` drops it with that row.
    fn partial(&mut self, _p: Partial) {}
    /// Rows replayed from a memoized segment ([`crate::block::memo`]): the same as pushing them
    /// one by one, which is what it does unless a sink knows better.
    #[inline]
    fn replay(&mut self, r: &Replay<'_>) {
        let mut block_start = r.block_start;
        for (j, m) in r.rows.iter().enumerate() {
            let (insns, in_block) = if j == 0 {
                let insns = r.open + m.insns;
                (insns, insns - r.block_base)
            } else {
                (m.insns, m.insns)
            };
            let row = BranchRow {
                ip: m.ip,
                target: Some(m.target),
                kind: m.kind,
                taken: m.taken,
                compressed: false,
                insns,
                tsc: None,
                cycles: None,
                cr3: r.cr3,
                offset: if j < r.first_cond {
                    r.off_before
                } else {
                    r.off_after
                },
            };
            self.push(&row, (block_start, in_block));
            block_start = m.target;
        }
    }
    /// Rows from `from` on ran inside a TSX transaction (a sink that keeps no such
    /// column: nothing).
    fn in_tx_from(&mut self, _from: usize) {}
    /// The last row went to `to` after all (erratum BDM64; a sink that keeps no targets:
    /// nothing).
    fn set_last_target(&mut self, _to: u64) {}
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
    /// Rows before the first that knows its CR3 take `cr3` (a stitch's, for its body's
    /// rows before their first PIP). A sink that keeps no CR3 ignores it.
    fn set_leading_cr3(&mut self, _cr3: Option<u64>) {}
    /// The last row is a direct `jmp` or `call` (a sink that keeps no kinds: false).
    fn ends_in_direct(&self) -> bool {
        false
    }
}

impl RowSink for BranchColumns {
    #[inline]
    fn push(&mut self, r: &BranchRow, block: (u64, u32)) {
        self.ensure(1);
        BranchColumns::push_flow(self, r);
        self.log.push(r, block);
    }
    /// A segment's rows column by column: the same rows as the default (row by row through
    /// `push`), which checked the room of thirteen vectors for every row and was 17% of a
    /// rows-mode decode of a real program's Intel PT trace (the walk itself 25%).
    #[inline]
    fn replay(&mut self, r: &Replay<'_>) {
        let c = &r.cols;
        let Some(&first) = c.insns.first() else {
            return;
        };
        let n = c.ip.len();
        self.ensure(n);
        let at = self.ip.len();
        // The segment's columns as slices: copied, not gathered out of its rows one by
        // one.
        self.ip.extend_from_slice(c.ip);
        self.target.values.extend_from_slice(c.target);
        self.target.valid.extend(std::iter::repeat_n(true, n));
        self.kind.extend_from_slice(c.kind);
        self.taken.extend_from_slice(c.taken);
        self.compressed.extend(std::iter::repeat_n(false, n));
        self.insns.extend_from_slice(c.insns);
        self.insns[at] = r.open + first;
        self.cr3.extend_row(r.cr3, n, at);
        let before = r.first_cond.min(n);
        self.offset
            .extend(std::iter::repeat_n(r.off_before, before));
        self.offset
            .extend(std::iter::repeat_n(r.off_after, n - before));
        self.log.replay(r);
        if !self.in_tx.is_empty() {
            self.in_tx.extend(std::iter::repeat_n(false, n));
        }
    }
    fn in_tx_from(&mut self, from: usize) {
        self.set_in_tx_from(from);
    }
    fn set_last_target(&mut self, to: u64) {
        if let Some(i) = self.len().checked_sub(1) {
            self.target.set(i, Some(to));
        }
        self.log.set_last_target(to);
    }
    fn partial(&mut self, p: Partial) {
        self.log.partial(p);
    }
    fn reserve(&mut self, n: usize) {
        BranchColumns::reserve(self, n)
    }
    fn finish(&mut self) -> (PieceStats, crate::coverage::Coverage) {
        // Counts and coverage from the log; the log's buffers go back to this thread.
        let (_, cov) = self.log.finish(true);
        self.log = Default::default();
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
    fn set_leading_cr3(&mut self, cr3: Option<u64>) {
        if cr3.is_none() {
            return;
        }
        let n = self.len();
        for i in 0..n {
            if self.cr3.get(i).is_some() {
                break;
            }
            self.cr3.set_row(i, cr3, n);
        }
    }
    fn ends_in_direct(&self) -> bool {
        matches!(self.kind.last(), Some(&k) if k == BranchKind::Jmp as u8 || k == BranchKind::Call as u8)
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
    #[inline]
    fn replay(&mut self, r: &Replay<'_>) {
        self.rows += r.rows.len();
        self.insns += r.open as u64 + r.insns;
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
            rows: self.rows as u64,
            insns: self.insns,
            by_kind: [0; 8],
        };
        (stats, Default::default())
    }
}
