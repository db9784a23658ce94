//! Output rows as columns (struct of arrays), ready to hand to Arrow without copying.
//!
//! The decoder appends to these; the pipeline assigns `seq` when it emits them in order
//! and fills in the columns that need the whole trace (timing, CR3 before the first PIP).
//! The branch columns carry the log of how the walk produced them ([`RowLog`], `log.rs`),
//! from which their counts ([`PieceStats`]) and coverage are taken; the coverage rows are
//! [`crate::coverage`]'s.

use tracemill_schemas::{BranchKind, EventKind, TimingKind};

mod log;

pub use crate::coverage::{CoverageRow, EdgeRow, PartialBlock};
pub use log::RowLog;

/// A partial block: (start, last instruction, instructions, times left), waiting for the
/// row that carries its instructions ([`PartialBlock`] once that row is known).
pub type Partial = (u64, u64, u32, u32);

/// A nullable u64 column: values plus validity.
#[derive(Clone, Debug, Default)]
pub struct OptU64 {
    pub values: Vec<u64>,
    pub valid: Vec<bool>,
}

/// Compared by value: a column shorter than another is null past its end (the timing
/// columns of [`BranchColumns`] stay empty while no row has a value).
impl PartialEq for OptU64 {
    fn eq(&self, o: &Self) -> bool {
        let n = self.len().max(o.len());
        (0..n).all(|i| self.get(i) == o.get(i))
    }
}

impl Eq for OptU64 {}

impl OptU64 {
    /// Make the column `rows` long, null past its end, with room from the column pools.
    pub fn materialize(&mut self, rows: usize) {
        use crate::column_pool::{room, BOOL, U64};
        if let Some(more) = rows.checked_sub(self.len()).filter(|&m| m > 0) {
            room(&mut self.values, more, &U64);
            room(&mut self.valid, more, &BOOL);
            self.pad_to(rows);
        }
    }

    /// Set row `i` of a column that is either empty (all null) or `rows` long: an empty
    /// one is made whole only when a value is set.
    #[inline]
    pub fn set_row(&mut self, i: usize, v: Option<u64>, rows: usize) {
        if i >= self.len() {
            if v.is_none() {
                return;
            }
            self.materialize(rows);
        }
        self.set(i, v);
    }

    /// Append `n` rows of `v` to a column that is either empty (all null) or `rows` long:
    /// an empty one stays empty while the rows are null.
    #[inline]
    pub fn extend_row(&mut self, v: Option<u64>, n: usize, rows: usize) {
        if v.is_none() && self.is_empty() {
            return;
        }
        self.materialize(rows);
        self.values.extend(std::iter::repeat_n(v.unwrap_or(0), n));
        self.valid.extend(std::iter::repeat_n(v.is_some(), n));
    }

    /// Append `o` (`o_rows` rows) to this column of `rows` rows, where either may be empty
    /// (all null): the result is empty when both are.
    pub fn append(&mut self, rows: usize, o: &OptU64, o_rows: usize) {
        if self.is_empty() && o.is_empty() {
            return;
        }
        self.materialize(rows);
        self.extend_from(o);
        self.pad_to(rows + o_rows);
    }

    #[inline]
    pub fn push(&mut self, v: Option<u64>) {
        self.values.push(v.unwrap_or(0));
        self.valid.push(v.is_some());
    }
    /// Value `i`; rows past the end of the column are null (a column filled later, like
    /// `tsc`, may be shorter than the table until then).
    #[inline]
    pub fn get(&self, i: usize) -> Option<u64> {
        if i < self.valid.len() && self.valid[i] {
            Some(self.values[i])
        } else {
            None
        }
    }
    #[inline]
    pub fn set(&mut self, i: usize, v: Option<u64>) {
        self.values[i] = v.unwrap_or(0);
        self.valid[i] = v.is_some();
    }
    pub fn len(&self) -> usize {
        self.values.len()
    }
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
    pub fn truncate(&mut self, n: usize) {
        self.values.truncate(n);
        self.valid.truncate(n);
    }
    pub fn clear(&mut self) {
        self.values.clear();
        self.valid.clear();
    }
    pub fn all_null(&self) -> bool {
        !self.valid.iter().any(|&v| v)
    }
    pub fn extend_from(&mut self, o: &OptU64) {
        self.values.extend_from_slice(&o.values);
        self.valid.extend_from_slice(&o.valid);
    }
    /// Pad with nulls up to `n` rows.
    pub fn pad_to(&mut self, n: usize) {
        self.values.resize(n, 0);
        self.valid.resize(n, false);
    }
    pub fn reserve(&mut self, n: usize) {
        self.values.reserve(n);
        self.valid.reserve(n);
    }
}

/// One branch row, as a value (tests and small tools; the decoder writes columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BranchRow {
    pub ip: u64,
    pub target: Option<u64>,
    pub kind: BranchKind,
    pub taken: bool,
    pub compressed: bool,
    pub insns: u32,
    pub tsc: Option<u64>,
    pub cycles: Option<u64>,
    pub cr3: Option<u64>,
    pub offset: u64,
}

/// Columns of the `branches` table.
#[derive(Clone, Debug, Default)]
pub struct BranchColumns {
    pub seq: Vec<u64>,
    pub ip: Vec<u64>,
    pub target: OptU64,
    /// `BranchKind as u8`.
    pub kind: Vec<u8>,
    pub taken: Vec<bool>,
    pub compressed: Vec<bool>,
    pub insns: Vec<u32>,
    pub tsc: OptU64,
    pub cycles: OptU64,
    pub cr3: OptU64,
    pub offset: Vec<u64>,
    /// Executed inside a TSX transaction. Empty while no row is (the column is all false
    /// then, at no cost per row); else one per row.
    pub in_tx: Vec<bool>,
    /// Not a table column: the rows as the walk produced them (memoized segments replayed,
    /// rows pushed one by one, blocks cut short), for their coverage
    /// ([`RowLog`]; emptied once aggregated, and never compared).
    pub log: RowLog,
}

/// The table's columns compared; the log (how the walk produced them) is not.
impl PartialEq for BranchColumns {
    fn eq(&self, o: &Self) -> bool {
        self.seq == o.seq
            && self.ip == o.ip
            && self.target == o.target
            && self.kind == o.kind
            && self.taken == o.taken
            && self.compressed == o.compressed
            && self.insns == o.insns
            && self.tsc == o.tsc
            && self.cycles == o.cycles
            && self.cr3 == o.cr3
            && self.offset == o.offset
            && self.in_tx_eq(o)
    }
}

impl Eq for BranchColumns {}

impl BranchColumns {
    /// The `in_tx` columns say the same: an empty one is all false.
    fn in_tx_eq(&self, o: &Self) -> bool {
        let n = self.len().max(o.len());
        (0..n).all(|i| self.in_tx(i) == o.in_tx(i))
    }
}

impl BranchColumns {
    pub fn len(&self) -> usize {
        self.ip.len()
    }
    pub fn is_empty(&self) -> bool {
        self.ip.is_empty()
    }

    /// Append a row without its timing columns (`tsc`, `cycles`), which are filled once
    /// the row's place in the whole trace is known (the timeline, [`crate::timing`]).
    #[inline]
    pub fn push_flow(&mut self, r: &BranchRow) {
        // Empty while every row's CR3 is unknown (no PIP yet): all null at no cost per row.
        self.cr3.extend_row(r.cr3, 1, self.ip.len());
        self.ip.push(r.ip);
        self.target.push(r.target);
        self.kind.push(r.kind as u8);
        self.taken.push(r.taken);
        self.compressed.push(r.compressed);
        self.insns.push(r.insns);
        self.offset.push(r.offset);
        if !self.in_tx.is_empty() {
            self.in_tx.push(false);
        }
    }

    /// Rows from `from` on ran inside a transaction.
    pub fn set_in_tx_from(&mut self, from: usize) {
        let n = self.len();
        self.in_tx.resize(from.min(n), false);
        self.in_tx.resize(n, true);
    }

    /// Row `i` ran inside a transaction.
    pub fn in_tx(&self, i: usize) -> bool {
        self.in_tx.get(i).copied().unwrap_or(false)
    }

    /// Room for `n` more rows, from the column pools ([`crate::column_pool`]) for columns
    /// without room yet. Not the timing columns': they stay empty (all null) until a row
    /// has a time ([`OptU64::set_row`]), which a trace without timing packets never has.
    pub fn reserve(&mut self, n: usize) {
        use crate::column_pool::{room, BOOL, U32, U64, U8};
        room(&mut self.ip, n, &U64);
        room(&mut self.kind, n, &U8);
        room(&mut self.taken, n, &BOOL);
        room(&mut self.compressed, n, &BOOL);
        room(&mut self.insns, n, &U32);
        room(&mut self.offset, n, &U64);
        room(&mut self.target.values, n, &U64);
        room(&mut self.target.valid, n, &BOOL);
        if !self.cr3.is_empty() {
            room(&mut self.cr3.values, n, &U64);
            room(&mut self.cr3.valid, n, &BOOL);
        }
    }

    /// Room for `n` more rows before a push or a replay. A column that runs out grows
    /// through the pools (doubling), not by `Vec`'s own growth: that one reallocates, and
    /// the allocator hands out fresh pages the kernel must clear, while the pools hold
    /// the rooms of pieces already written.
    #[inline]
    pub fn ensure(&mut self, n: usize) {
        if self.ip.len() + n > self.ip.capacity() {
            self.grow(n);
        }
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self, n: usize) {
        use crate::column_pool::{regrow, BOOL, U32, U64, U8};
        let need = self.ip.len() + n;
        regrow(&mut self.ip, need, &U64);
        regrow(&mut self.kind, need, &U8);
        regrow(&mut self.taken, need, &BOOL);
        regrow(&mut self.compressed, need, &BOOL);
        regrow(&mut self.insns, need, &U32);
        regrow(&mut self.offset, need, &U64);
        regrow(&mut self.target.values, need, &U64);
        regrow(&mut self.target.valid, need, &BOOL);
        // The columns kept empty while null, once they hold values (a trace with timing
        // packets: `tsc` and `cycles` from the first timed row on).
        for c in [&mut self.cr3, &mut self.tsc, &mut self.cycles] {
            if !c.is_empty() {
                regrow(&mut c.values, need, &U64);
                regrow(&mut c.valid, need, &BOOL);
            }
        }
    }

    /// Append a whole row, timing columns included.
    #[inline]
    pub fn push(&mut self, r: &BranchRow) {
        let n = self.len();
        self.push_flow(r);
        self.tsc.extend_row(r.tsc, 1, n);
        self.cycles.extend_row(r.cycles, 1, n);
    }

    pub fn row(&self, i: usize) -> BranchRow {
        BranchRow {
            ip: self.ip[i],
            target: self.target.get(i),
            kind: BranchKind::from_code(self.kind[i]).expect("valid kind code"),
            taken: self.taken[i],
            compressed: self.compressed[i],
            insns: self.insns[i],
            tsc: self.tsc.get(i),
            cycles: self.cycles.get(i),
            cr3: self.cr3.get(i),
            offset: self.offset[i],
        }
    }

    pub fn rows(&self) -> impl Iterator<Item = BranchRow> + '_ {
        (0..self.len()).map(|i| self.row(i))
    }

    pub fn truncate(&mut self, n: usize) {
        self.seq.truncate(n.min(self.seq.len()));
        self.ip.truncate(n);
        self.target.truncate(n);
        self.kind.truncate(n);
        self.taken.truncate(n);
        self.compressed.truncate(n);
        self.insns.truncate(n);
        self.tsc.truncate(n);
        self.cycles.truncate(n);
        self.cr3.truncate(n);
        self.offset.truncate(n);
        if self.in_tx.len() > n {
            self.in_tx.truncate(n);
            // None left: back to the empty form, as a decode that never had one.
            if !self.in_tx.contains(&true) {
                self.in_tx.clear();
            }
        }
        self.log.truncate(n);
    }

    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Append all rows of `o` (its `seq` too, if it has one per row). Their log is not
    /// carried: rows are appended once their coverage was taken.
    pub fn extend_from(&mut self, o: &BranchColumns) {
        self.seq.extend_from_slice(&o.seq);
        self.ip.extend_from_slice(&o.ip);
        self.target.extend_from(&o.target);
        self.kind.extend_from_slice(&o.kind);
        self.taken.extend_from_slice(&o.taken);
        self.compressed.extend_from_slice(&o.compressed);
        self.insns.extend_from_slice(&o.insns);
        let (n, m) = (self.ip.len() - o.ip.len(), o.ip.len());
        self.tsc.append(n, &o.tsc, m);
        self.cycles.append(n, &o.cycles, m);
        self.cr3.append(n, &o.cr3, m);
        self.offset.extend_from_slice(&o.offset);
        if !self.in_tx.is_empty() || !o.in_tx.is_empty() {
            let (n, m) = (self.ip.len(), o.ip.len());
            self.in_tx.resize(n - m, false);
            self.in_tx.extend_from_slice(&o.in_tx);
            self.in_tx.resize(n, false);
        }
    }
}

/// One event row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRow {
    /// Number of branch rows before the event.
    pub seq: u64,
    pub offset: u64,
    pub kind: EventKind,
    pub ip: Option<u64>,
    pub tsc: Option<u64>,
    pub detail: String,
}

/// Columns of the `events` table (events are few; a Vec of rows is enough).
pub type EventRows = Vec<EventRow>;

/// One timing packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimingRow {
    pub offset: u64,
    pub kind: TimingKind,
    pub raw: u64,
    pub value: u64,
    pub tsc: Option<u64>,
    pub cycles: Option<u64>,
    pub core_bus_ratio: Option<u8>,
}

/// Columns of the `timing` table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimingColumns {
    pub offset: Vec<u64>,
    pub kind: Vec<u8>,
    pub raw: Vec<u64>,
    pub value: Vec<u64>,
    pub tsc: OptU64,
    pub cycles: OptU64,
    pub core_bus_ratio: Vec<Option<u8>>,
}

impl TimingColumns {
    pub fn len(&self) -> usize {
        self.offset.len()
    }
    pub fn is_empty(&self) -> bool {
        self.offset.is_empty()
    }
    /// Room for `n` more rows.
    pub fn reserve(&mut self, n: usize) {
        self.offset.reserve(n);
        self.kind.reserve(n);
        self.raw.reserve(n);
        self.value.reserve(n);
        self.tsc.reserve(n);
        self.cycles.reserve(n);
        self.core_bus_ratio.reserve(n);
    }
    pub fn push(&mut self, r: &TimingRow) {
        self.offset.push(r.offset);
        self.kind.push(r.kind as u8);
        self.raw.push(r.raw);
        self.value.push(r.value);
        self.tsc.push(r.tsc);
        self.cycles.push(r.cycles);
        self.core_bus_ratio.push(r.core_bus_ratio);
    }
    pub fn extend_from(&mut self, o: &TimingColumns) {
        self.offset.extend_from_slice(&o.offset);
        self.kind.extend_from_slice(&o.kind);
        self.raw.extend_from_slice(&o.raw);
        self.value.extend_from_slice(&o.value);
        self.tsc.extend_from(&o.tsc);
        self.cycles.extend_from(&o.cycles);
        self.core_bus_ratio.extend_from_slice(&o.core_bus_ratio);
    }

    pub fn row(&self, i: usize) -> TimingRow {
        TimingRow {
            offset: self.offset[i],
            kind: TimingKind::from_code(self.kind[i]).expect("valid timing kind"),
            raw: self.raw[i],
            value: self.value[i],
            tsc: self.tsc.get(i),
            cycles: self.cycles.get(i),
            core_bus_ratio: self.core_bus_ratio[i],
        }
    }
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
