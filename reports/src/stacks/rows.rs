//! The `branches` rows as the walk reads them: through arrow-rs, or as dictionary keys.

use std::fs::File;

use anyhow::Result;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::{Array, PrimitiveArray};
use tracemill_schemas::BranchKind;

use crate::parquet_keys::{self, Keyed, NULL_KEY};
use crate::util::{col, kind_codes};

use super::functions::*;

/// What a row's branch says beyond its `ip`'s function and its kind, asked only by the
/// kinds of branch that need it: most rows (conditional branches) need none of it, and
/// loading a row group's addresses for every row was a sixth of the walk.
pub(super) trait Branch<'s> {
    /// Is the target known (not null)? When not, nothing else is asked.
    fn has_target(&self) -> bool;
    fn ip(&self) -> u64;
    fn target(&self) -> u64;
    fn target_at(&mut self, f: &mut Functions<'s>) -> FunctionAt;
    /// The address after the call instruction at `ip` (0 when unknown).
    fn return_address(&mut self, f: &mut Functions<'s>) -> u64;
}

/// A row read through arrow-rs: its values at hand, functions looked up by address.
pub(super) struct ValueBranch {
    pub(super) ip: u64,
    pub(super) target: Option<u64>,
}

impl<'s> Branch<'s> for ValueBranch {
    fn has_target(&self) -> bool {
        self.target.is_some()
    }
    fn ip(&self) -> u64 {
        self.ip
    }
    fn target(&self) -> u64 {
        self.target.unwrap_or(0)
    }
    fn target_at(&mut self, f: &mut Functions<'s>) -> FunctionAt {
        f.at(self.target())
    }
    fn return_address(&mut self, f: &mut Functions<'s>) -> u64 {
        f.return_address(self.ip)
    }
}

/// A row read as dictionary keys: everything by key from the walk's per-value tables.
pub(super) struct KeyedBranch<'a> {
    pub(super) rows: &'a KeyedRows,
    pub(super) ip_key: usize,
    pub(super) target_key: u32,
    /// Per `target` value, its function.
    pub(super) target_at: &'a [FunctionAt],
    /// Per `ip` value, the return address of a call there (0: unknown).
    pub(super) ip_ret: &'a [u64],
}

impl<'s> Branch<'s> for KeyedBranch<'_> {
    fn has_target(&self) -> bool {
        self.target_key != NULL_KEY
    }
    fn ip(&self) -> u64 {
        self.rows.ip.values[self.ip_key]
    }
    fn target(&self) -> u64 {
        self.rows.target.values[self.target_key as usize]
    }
    fn target_at(&mut self, _: &mut Functions<'s>) -> FunctionAt {
        self.target_at[self.target_key as usize]
    }
    fn return_address(&mut self, _: &mut Functions<'s>) -> u64 {
        self.ip_ret[self.ip_key]
    }
}

/// What a reader thread sends the walk.
pub(super) enum Batch {
    Arrow(Box<Rows>),
    Keyed(Box<KeyedRows>),
}

/// One row group of `branches` as dictionary keys: the flame graph by instructions.
///
/// `kind` and `insns` stay keys too: the walk finds a row's kind and instructions in
/// small tables of the row group's values. A pass of the readers over every row that
/// made them values took 5% of the flame graph's time, and the walk's lookups, in tables
/// that stay in the processor's first cache, are hidden behind its other work.
#[derive(Default)]
pub(super) struct KeyedRows {
    pub(super) ip: Keyed<u64>,
    pub(super) target: Keyed<u64>,
    pub(super) kind: Keyed<Vec<u8>>,
    /// Per `kind` value, its `BranchKind` code; u8::MAX for an unknown name.
    pub(super) codes: Vec<u8>,
    pub(super) insns: Keyed<u32>,
}

impl KeyedRows {
    /// Read one row group into these rows' buffers (those of rows the walk is done with:
    /// new ones each time, 21 bytes a row, showed in the readers' profile as `realloc`,
    /// `memset` and the kernel clearing pages, about 3% of the flame graph's time).
    pub(super) fn read(
        &mut self,
        file: &File,
        group: &parquet::file::metadata::RowGroupMetaData,
        pages: &mut parquet_keys::Scratch,
    ) -> Result<()> {
        // Up to `parquet_keys::MAX_ROWS` (checked there), 16 bytes a row (a key of four
        // bytes per column), plus the dictionaries.
        let rows = group.num_rows() as usize;
        let (map, chunks) =
            parquet_keys::map_chunks(file, group, &["ip", "target", "insns", "kind"])?;
        parquet_keys::read_chunk_into(&map, chunks[0], rows, &mut self.ip, pages)?;
        anyhow::ensure!(!self.ip.keys.contains(&NULL_KEY), "an ip is null");
        parquet_keys::read_chunk_into(&map, chunks[1], rows, &mut self.target, pages)?;
        parquet_keys::read_chunk_into(&map, chunks[2], rows, &mut self.insns, pages)?;
        parquet_keys::read_chunk_into(&map, chunks[3], rows, &mut self.kind, pages)?;
        // As `kind_codes`: u8::MAX for an unknown name (and, in the walk, a null).
        self.codes.clear();
        self.codes.extend(self.kind.values.iter().map(|v| {
            std::str::from_utf8(v)
                .ok()
                .and_then(BranchKind::from_name)
                .map_or(u8::MAX, |k| k as u8)
        }));
        Ok(())
    }

    pub(super) fn len(&self) -> usize {
        self.ip.keys.len()
    }
}

/// One batch of `branches` rows as the walk reads them, made by the reader thread.
pub(super) struct Rows {
    pub(super) ip: arrow_buffer::ScalarBuffer<u64>,
    pub(super) target: PrimitiveArray<UInt64Type>,
    pub(super) insns: arrow_buffer::ScalarBuffer<u32>,
    pub(super) kinds: Vec<u8>,
    pub(super) cycles: Option<PrimitiveArray<UInt64Type>>,
    pub(super) tsc: Option<PrimitiveArray<UInt64Type>>,
    /// A perf.data thread's walk: `time`, which orders its rows on different CPUs.
    pub(super) time: Option<PrimitiveArray<UInt64Type>>,
}

impl Rows {
    pub(super) fn of(
        b: &arrow_array::RecordBatch,
        cycles: bool,
        tsc: bool,
        time: bool,
    ) -> Result<Rows> {
        // A column of nulls only is no column: the walk then keeps its last value.
        let opt = |read: bool, name: &str| -> Result<Option<PrimitiveArray<UInt64Type>>> {
            Ok(if read {
                Some(col::<UInt64Type>(b, name)?.clone()).filter(|c| c.null_count() < c.len())
            } else {
                None
            })
        };
        Ok(Rows {
            ip: col::<UInt64Type>(b, "ip")?.values().clone(),
            target: col::<UInt64Type>(b, "target")?.clone(),
            insns: col::<UInt32Type>(b, "insns")?.values().clone(),
            kinds: kind_codes(b, "kind", BranchKind::from_name, |k| k as u8)?,
            cycles: opt(cycles, "cycles")?,
            tsc: opt(tsc, "tsc")?,
            time: opt(time, "time")?,
        })
    }

    pub(super) fn len(&self) -> usize {
        self.ip.len()
    }

    /// Row `i`'s `time` (`None`: null, or not read).
    #[inline]
    pub(super) fn time(&self, i: usize) -> Option<u64> {
        let t = self.time.as_ref()?;
        t.is_valid(i).then(|| t.value(i))
    }
}
