//! What the walk emits: rows (each closing the open instruction count and its basic
//! block), partial blocks, events, and which rows packets have decided.

use tracemill_schemas::{BranchKind, EventKind};

use super::{Mode, Walker};
use crate::front::{Bits, Bound, Format};
use crate::rows::BranchRow;
use crate::sink::RowSink;

impl<'a, 'c, F: Format, S: RowSink> Walker<'a, 'c, F, S> {
    pub(super) fn event(&mut self, offset: u64, kind: EventKind, ip: Option<u64>, detail: String) {
        self.facts.seq = self.rows.len() as u64;
        let at = self.facts.place(offset, kind, ip, detail);
        if let (Some(at), Some(k)) = (at, self.status_events.as_mut()) {
            // Put before the events of a PSB+ read ahead: they still start one later.
            if at <= *k {
                *k += 1;
            }
        }
    }

    #[inline]
    pub(super) fn row(
        &mut self,
        ip: u64,
        target: Option<u64>,
        kind: BranchKind,
        taken: bool,
        off: u64,
    ) {
        self.push_row(ip, target, kind, taken, false, off);
    }

    /// Emit a row for the branch at `ip`: it closes the open instruction count and the
    /// current basic block (which began at `block_start`, `block_base` instructions into
    /// the open count); the next block begins at `target`.
    #[inline]
    pub(super) fn push_row(
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
        if self.st.in_tx {
            self.rows.in_tx_from(self.rows.len() - 1);
        }
    }

    /// A new basic block begins at `ip` (tracing resumed, or an asynchronous transfer
    /// landed there); the current one was closed before (`close_block`).
    #[inline]
    pub(super) fn enter_block(&mut self, ip: u64) {
        self.st.block_start = ip;
        self.st.block_base = self.st.open_insns;
    }

    /// Execution leaves the current block at `st.ip` without its branch (an interrupt,
    /// a disable, an overflow, TraceSTOP, an enable while tracing): the instructions it ran
    /// make a partial block, from `block_start` through `last_insn`. It counts in coverage
    /// with the next row, which carries its instructions.
    pub(super) fn close_block(&mut self) {
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
    pub(super) fn forget_open(&mut self) {
        if self.started && self.rows.len() == 0 {
            self.open_forgotten = true;
        }
        self.st.open_insns = 0;
        self.st.block_base = 0;
        self.st.partials.clear();
        let n = self.rows.len();
        self.rows.truncate(n);
    }

    /// Tracing is disabled; it stopped before the instruction at `at` (see
    /// [`FlowState::stopped_at`](super::FlowState::stopped_at)).
    pub(super) fn disabled_at(&mut self, at: Option<u64>) {
        self.st.mode = Mode::Disabled;
        self.st.stopped_at = at;
    }

    /// The rows so far are decided by packets.
    #[inline]
    pub(super) fn decided(&mut self, off: u64) {
        self.st.decision = off;
        self.tail_start = self.rows.len();
        self.alt_pgd = None;
    }

    pub(super) fn drop_tail(&mut self) {
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

    /// The execution mode changes: blocks are looked up in the new mode from here on.
    pub(super) fn set_bits(&mut self, bits: Bits) {
        if self.st.bits != bits {
            self.st.bits = bits;
            self.hint = None;
        }
    }

    /// An event bound to an IP is applied (the walk is there, or not tracing).
    pub(super) fn bound_event(&mut self, ip: Option<u64>, off: u64, what: Bound) {
        match what {
            Bound::ExecMode(b) => self.set_bits(b),
            Bound::Paging { cr3, .. } => {
                // Code after the instruction it bound to is the new address space's, and
                // so are the rows from here on (a direct branch's too).
                self.set_cr3(Some(cr3));
                self.st.cr3_row = self.st.cr3;
            }
            Bound::Tsx { intx, abort } => self.st.in_tx = intx && !abort,
            Bound::InTx(intx) => {
                self.st.in_tx = intx;
                // A PSB+ restating that no transaction runs says nothing new.
                if !intx {
                    return;
                }
            }
            _ => {}
        }
        let (kind, detail) = what.event();
        self.event(off, kind, ip, detail);
    }
}

impl<'a, 'c, F: Format, S: RowSink> Walker<'a, 'c, F, S> {
    /// Report the events held for the far branch just walked ([`FlowState::held`]),
    /// after its row, at its address (they take effect after it: a PIP's CR3 is the
    /// branch target's).
    ///
    /// [`FlowState::held`]: super::FlowState::held
    pub(super) fn emit_held(&mut self) {
        if self.st.held.is_empty() {
            return;
        }
        let mut held = std::mem::take(&mut self.st.held);
        let at = held.at;
        for (off, what) in held.take() {
            self.bound_event(Some(at), off, what);
        }
    }
}

/// An `events` detail naming where a transfer went (the TIP after a FUP), if it says.
pub(super) fn went_to(tip: Option<(Option<u64>, u64)>) -> String {
    match tip.and_then(|t| t.0) {
        Some(t) => format!("to {t:#x}"),
        None => String::new(),
    }
}
