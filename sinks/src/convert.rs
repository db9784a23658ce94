//! Decoder columns → Arrow `RecordBatch`es with exactly the schemas of
//! [`tracemill_schemas::arrow`].
//!
//! The big tables (`branches`, `timing`) arrive as struct-of-arrays and are taken by value:
//! every `Vec<u64>` / `Vec<u32>` becomes the array's buffer as is (`ScalarBuffer::from(vec)`
//! keeps the allocation), and the `Vec<u8>` enum codes become the `Int8` dictionary keys in
//! place. Only the validity and the boolean columns (`Vec<bool>`, one byte per row) have to
//! be packed into bitmaps ([`pack`]: eight rows at a time; a validity bitmap with no null is
//! then dropped). The small tables (`events`, `coverage`, `edges`) arrive as rows and are
//! transposed.
//!
//! Enum columns carry the whole name list of their enum as the dictionary, in code order,
//! so the decoder's code *is* the key and every batch of a table has the same dictionary
//! (which also keeps Arrow IPC files, where dictionaries may not change, simple): one array
//! per enum, made once and shared by every batch.
//!
//! The conversion runs once per row of the big tables (on the decode threads before
//! Parquet encoding, on the consumer's thread for `tracemill.decode`), so its per-row work
//! is kept to what the columns need: arrow's own `From<Vec<bool>>` sets bits one by one
//! with a branch per row, which cost more than everything else here together
//! (benches/README.md, "Python streaming decode").

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arrow_array::cast::AsArray;
use arrow_array::types::Int8Type;
use arrow_array::{
    Array, ArrayRef, BooleanArray, DictionaryArray, Int8Array, RecordBatch, StringArray,
    UInt32Array, UInt64Array, UInt8Array,
};
use std::ptr::NonNull;

use arrow_buffer::{
    ArrowNativeType, BooleanBuffer, Buffer, MutableBuffer, NullBuffer, ScalarBuffer,
};
use arrow_schema::{DataType, SchemaRef};
use tracemill_decode::column_pool::{self, Pool};
use tracemill_decode::rows::{
    BranchColumns, CoverageRow, EdgeRow, EventRow, OptU64, TimingColumns,
};
use tracemill_schemas::arrow as schema;
use tracemill_schemas::{BranchKind, EventKind, TimingKind};

use crate::ConvertError;

type Result<T> = std::result::Result<T, ConvertError>;

/// The `branches` batch. When `cols.seq` is empty (the decoder leaves it to whoever knows
/// the global order), `seq` is `first_seq, first_seq + 1, ...`.
pub fn branches(cols: BranchColumns, first_seq: u64) -> Result<RecordBatch> {
    const T: &str = "branches";
    let n = cols.len();
    let seq = if cols.seq.is_empty() {
        let mut seq = column_pool::U64.take(n);
        seq.extend(first_seq..first_seq + n as u64);
        seq
    } else {
        cols.seq
    };
    check_len(T, "seq", seq.len(), n)?;
    check_len(T, "kind", cols.kind.len(), n)?;
    check_len(T, "taken", cols.taken.len(), n)?;
    check_len(T, "compressed", cols.compressed.len(), n)?;
    check_len(T, "insns", cols.insns.len(), n)?;
    check_len(T, "offset", cols.offset.len(), n)?;
    check_opt_len(T, "target", &cols.target, n)?;
    // Empty while no row has a value (all null): the timing columns, and `cr3`.
    for (name, c) in [
        ("tsc", &cols.tsc),
        ("cycles", &cols.cycles),
        ("cr3", &cols.cr3),
    ] {
        if !c.is_empty() {
            check_opt_len(T, name, c, n)?;
        }
    }
    if !cols.in_tx.is_empty() {
        check_len(T, "in_tx", cols.in_tx.len(), n)?;
    }
    // Empty while no row ran in a transaction: an all-false column without a pass.
    let in_tx = if cols.in_tx.is_empty() {
        BooleanBuffer::new_unset(n)
    } else {
        pack(&cols.in_tx)
    };
    let kind = enum_column(T, "kind", cols.kind, &BRANCH_KINDS, "BranchKind")?;
    let (taken, compressed) = (pack(&cols.taken), pack(&cols.compressed));
    column_pool::BOOL.give(cols.taken);
    column_pool::BOOL.give(cols.compressed);
    batch(
        T,
        schema::branches(),
        vec![
            u64_array(seq),
            u64_array(cols.ip),
            opt_u64_array(cols.target),
            kind,
            Arc::new(BooleanArray::new(taken, None)),
            Arc::new(BooleanArray::new(compressed, None)),
            Arc::new(UInt32Array::new(
                pooled(cols.insns, &column_pool::U32),
                None,
            )),
            sparse_array(cols.tsc, n),
            sparse_array(cols.cycles, n),
            sparse_array(cols.cr3, n),
            u64_array(cols.offset),
            Arc::new(BooleanArray::new(in_tx, None)),
        ],
    )
}

/// The `events` batch.
pub fn events(rows: &[EventRow]) -> Result<RecordBatch> {
    let codes = rows.iter().map(|r| r.kind as u8).collect();
    batch(
        "events",
        schema::events(),
        vec![
            u64_array(rows.iter().map(|r| r.seq).collect()),
            u64_array(rows.iter().map(|r| r.offset).collect()),
            enum_column("events", "kind", codes, &EVENT_KINDS, "EventKind")?,
            Arc::new(rows.iter().map(|r| r.ip).collect::<UInt64Array>()),
            Arc::new(rows.iter().map(|r| r.tsc).collect::<UInt64Array>()),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.detail.as_str()),
            )),
        ],
    )
}

/// The `timing` batch.
pub fn timing(cols: TimingColumns) -> Result<RecordBatch> {
    const T: &str = "timing";
    let n = cols.len();
    check_len(T, "kind", cols.kind.len(), n)?;
    check_len(T, "raw", cols.raw.len(), n)?;
    check_len(T, "value", cols.value.len(), n)?;
    check_len(T, "core_bus_ratio", cols.core_bus_ratio.len(), n)?;
    check_opt_len(T, "tsc", &cols.tsc, n)?;
    check_opt_len(T, "cycles", &cols.cycles, n)?;
    let kind = enum_column(T, "kind", cols.kind, &TIMING_KINDS, "TimingKind")?;
    batch(
        T,
        schema::timing(),
        vec![
            u64_array(cols.offset),
            kind,
            u64_array(cols.raw),
            u64_array(cols.value),
            opt_u64_array(cols.tsc),
            opt_u64_array(cols.cycles),
            opt_u8_array(&cols.core_bus_ratio),
        ],
    )
}

/// The `coverage` batch; the `image` dictionary holds the batch's distinct names in order
/// of first appearance.
pub fn coverage(rows: &[CoverageRow]) -> Result<RecordBatch> {
    // Image counts are small (tens), so a linear search beats hashing here.
    let mut names: Vec<&str> = Vec::new();
    let keys: Vec<Option<usize>> = rows
        .iter()
        .map(|r| {
            let name = r.image.as_deref()?;
            Some(match names.iter().position(|&known| known == name) {
                Some(i) => i,
                None => {
                    names.push(name);
                    names.len() - 1
                }
            })
        })
        .collect();
    if names.len() > MAX_IMAGES {
        return Err(ConvertError::TooManyImages { count: names.len() });
    }
    let keys: Int8Array = keys.into_iter().map(|k| k.map(|k| k as i8)).collect();
    let image = image_column(keys, Arc::new(StringArray::from(names)))?;
    batch(
        "coverage",
        schema::coverage(),
        vec![
            image,
            Arc::new(rows.iter().map(|r| r.image_offset).collect::<UInt64Array>()),
            u64_array(rows.iter().map(|r| r.start).collect()),
            u64_array(rows.iter().map(|r| r.end).collect()),
            Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.insns))),
            u64_array(rows.iter().map(|r| r.count).collect()),
        ],
    )
}

/// Most distinct image names a `coverage` file may hold. `coverage.image` has `Int8` keys,
/// and readers turn a Parquet column chunk's dictionary into the Arrow dictionary as is, so
/// the limit holds for a whole row group, not just a batch: past 128 names pyarrow, polars
/// and parquet-rs all fail to read the file (DuckDB, which ignores the Arrow schema, does
/// not), and parquet-rs already refuses a 128-entry dictionary for `Int8` keys, hence 127.
pub const MAX_IMAGES: usize = i8::MAX as usize;

fn image_column(keys: Int8Array, values: ArrayRef) -> Result<ArrayRef> {
    let dict = DictionaryArray::<Int8Type>::try_new(keys, values).map_err(|source| {
        ConvertError::Arrow {
            table: "coverage",
            source,
        }
    })?;
    Ok(Arc::new(dict))
}

/// The distinct image names of all `coverage` batches of one file, in order of first
/// appearance: enforces [`MAX_IMAGES`] per file, and gives batches one shared dictionary
/// where the format needs it (an Arrow IPC file allows a single dictionary per column;
/// polars also rejects the "delta" extensions the format would allow).
#[derive(Debug, Default)]
pub(crate) struct ImageDictionary {
    names: Vec<String>,
    keys: HashMap<String, i8>,
}

impl ImageDictionary {
    /// Adds the names used by `batch` (a `coverage` batch). Fails, and adds nothing, if
    /// the file would exceed [`MAX_IMAGES`].
    pub(crate) fn add(&mut self, batch: &RecordBatch) -> Result<()> {
        let names = image_names(batch)?;
        let mut new: Vec<&str> = Vec::new();
        for name in names.iter().flatten() {
            if !self.keys.contains_key(name) && !new.contains(&name) {
                new.push(name);
            }
        }
        let count = self.names.len() + new.len();
        if count > MAX_IMAGES {
            return Err(ConvertError::TooManyImages { count });
        }
        for name in new {
            self.keys.insert(name.to_string(), self.names.len() as i8);
            self.names.push(name.to_string());
        }
        Ok(())
    }

    /// The dictionary values; pass the same array to every [`rekey`](Self::rekey) so the
    /// batches share it (the IPC writer then recognises it by pointer).
    pub(crate) fn values(&self) -> ArrayRef {
        Arc::new(StringArray::from_iter_values(self.names.iter()))
    }

    /// `batch` with its `image` column re-keyed against `values` (from
    /// [`values`](Self::values), after every batch was [`add`](Self::add)ed).
    pub(crate) fn rekey(&self, batch: &RecordBatch, values: &ArrayRef) -> Result<RecordBatch> {
        let names = image_names(batch)?;
        let keys: Int8Array = names.iter().map(|n| n.map(|n| self.keys[n])).collect();
        let mut columns = batch.columns().to_vec();
        columns[0] = image_column(keys, values.clone())?;
        self::batch("coverage", batch.schema(), columns)
    }
}

/// The `image` column of a coverage batch as plain strings.
fn image_names(batch: &RecordBatch) -> Result<StringArray> {
    let arrow = |source| ConvertError::Arrow {
        table: "coverage",
        source,
    };
    strings(batch.column(0).as_ref()).map_err(arrow)
}

/// A string column (`Utf8`, `LargeUtf8`, `Utf8View`, or a dictionary of one of them, with
/// any integer keys) as plain strings; nulls stay null. What arrow's `cast` to `Utf8` does
/// for these types, without the compute kernels' crates (arrow-cast and arrow-ord, 20% of a
/// first build): the readers of our own tables and of tables written by pyarrow, polars or
/// DuckDB need only this.
pub fn strings(column: &dyn Array) -> std::result::Result<StringArray, arrow_schema::ArrowError> {
    match column.data_type() {
        DataType::Utf8 => Ok(column.as_string::<i32>().clone()),
        DataType::LargeUtf8 => Ok(column.as_string::<i64>().iter().collect()),
        DataType::Utf8View => Ok(column.as_string_view().iter().collect()),
        DataType::Dictionary(_, _) => {
            let d = column.as_any_dictionary();
            // The keys pick values; a null key gives null, as in `cast`.
            let picked = arrow_select::take::take(d.values().as_ref(), d.keys(), None)?;
            strings(picked.as_ref())
        }
        other => Err(arrow_schema::ArrowError::CastError(format!(
            "{other} is not a string type"
        ))),
    }
}

/// The `edges` batch.
pub fn edges(rows: &[EdgeRow]) -> Result<RecordBatch> {
    let codes = rows.iter().map(|r| r.kind as u8).collect();
    batch(
        "edges",
        schema::edges(),
        vec![
            u64_array(rows.iter().map(|r| r.src).collect()),
            u64_array(rows.iter().map(|r| r.dst).collect()),
            enum_column("edges", "kind", codes, &BRANCH_KINDS, "BranchKind")?,
            u64_array(rows.iter().map(|r| r.count).collect()),
        ],
    )
}

fn batch(table: &'static str, schema: SchemaRef, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
    RecordBatch::try_new(schema, columns).map_err(|source| ConvertError::Arrow { table, source })
}

fn check_len(table: &'static str, column: &'static str, len: usize, expected: usize) -> Result<()> {
    if len == expected {
        Ok(())
    } else {
        Err(ConvertError::ColumnLength {
            table,
            column,
            len,
            expected,
        })
    }
}

fn check_opt_len(table: &'static str, column: &'static str, c: &OptU64, n: usize) -> Result<()> {
    check_len(table, column, c.values.len(), n)?;
    check_len(table, column, c.valid.len(), n)
}

/// Zero-copy: the vector's allocation becomes the array's buffer.
fn u64_array(v: Vec<u64>) -> ArrayRef {
    Arc::new(UInt64Array::new(pooled(v, &column_pool::U64), None))
}

fn opt_u64_array(c: OptU64) -> ArrayRef {
    let valid = nulls(pack(&c.valid));
    column_pool::BOOL.give(c.valid);
    Arc::new(UInt64Array::new(pooled(c.values, &column_pool::U64), valid))
}

/// A column of `n` rows that is empty while every row is null (`tsc` and `cycles` of a
/// trace without timing packets, `cr3` before any PIP): then `n` nulls whose values are a
/// slice of one buffer of zeros shared by every piece, so that it costs no memory per row.
fn sparse_array(c: OptU64, n: usize) -> ArrayRef {
    if !c.is_empty() {
        return opt_u64_array(c);
    }
    static ZEROS: std::sync::Mutex<Option<Buffer>> = std::sync::Mutex::new(None);
    let bytes = n * std::mem::size_of::<u64>();
    let zeros = {
        let mut z = ZEROS.lock().unwrap_or_else(|e| e.into_inner());
        if z.as_ref().is_none_or(|b| b.len() < bytes) {
            *z = Some(MutableBuffer::from_len_zeroed(bytes.next_power_of_two()).into());
        }
        z.clone().expect("set above")
    };
    Arc::new(UInt64Array::new(
        ScalarBuffer::new(zeros, 0, n),
        Some(NullBuffer::new_null(n)),
    ))
}

/// A vector's values as an Arrow buffer that gives the vector back to `pool` when Arrow
/// drops it ([`column_pool`]: fresh pages for every piece's columns cost the kernel's
/// page clearing each time).
fn pooled<T: ArrowNativeType + std::panic::RefUnwindSafe>(
    v: Vec<T>,
    pool: &'static Pool<T>,
) -> ScalarBuffer<T> {
    let n = v.len();
    let Some(ptr) = NonNull::new(v.as_ptr() as *mut u8).filter(|_| v.capacity() > 0) else {
        return ScalarBuffer::from(v);
    };
    let bytes = n * std::mem::size_of::<T>();
    let owner = Arc::new(GivenBack(Some(v), pool));
    // SAFETY: `ptr` is the start of the vector's allocation, which holds `bytes`
    // initialized bytes (its `n` values) and lives, unmoved and unchanged, as long as
    // `owner` does: the owner keeps the vector and only lets go of it when dropped, which
    // Arrow does once no buffer refers to it.
    #[allow(unsafe_code)]
    let buffer = unsafe { Buffer::from_custom_allocation(ptr, bytes, owner) };
    ScalarBuffer::new(buffer, 0, n)
}

/// Owns a column's vector while Arrow uses its values; gives it back to its pool after.
struct GivenBack<T: 'static>(Option<Vec<T>>, &'static Pool<T>);

impl<T> Drop for GivenBack<T> {
    fn drop(&mut self) {
        if let Some(v) = self.0.take() {
            self.1.give(v);
        }
    }
}

/// `Option<u8>`s as an array (a null's value is 0, as arrow's `From<Vec<Option<u8>>>`
/// makes it).
fn opt_u8_array(v: &[Option<u8>]) -> ArrayRef {
    let values: Vec<u8> = v.iter().map(|o| o.unwrap_or(0)).collect();
    let valid = BooleanBuffer::collect_bool(v.len(), |i| v[i].is_some());
    Arc::new(UInt8Array::new(ScalarBuffer::from(values), nulls(valid)))
}

/// A validity bitmap as the column's null buffer, or none when every row is valid. Many
/// nullable columns are all-valid or all-null for a whole trace (cycles without
/// cycle-accurate mode, cr3 after the first PIP); an absent null buffer is cheaper for
/// every reader than a bitmap of ones. (The count of set bits is a popcount of the
/// bitmap.)
fn nulls(valid: BooleanBuffer) -> Option<NullBuffer> {
    let n = NullBuffer::new(valid);
    (n.null_count() > 0).then_some(n)
}

/// Booleans packed into an Arrow bitmap (least significant bit first), eight at a time:
/// the eight bytes (each 0 or 1) read as one little-endian `u64`, and one multiplication
/// moves byte `i`'s bit to bit `56 + i` (each byte's bit goes to distinct positions, so
/// nothing carries), the top byte being the eight bits in order.
fn pack(v: &[bool]) -> BooleanBuffer {
    const GATHER: u64 = 0x0102_0408_1020_4080;
    let mut bytes = Vec::with_capacity(v.len().div_ceil(8));
    let mut eights = v.chunks_exact(8);
    bytes.extend(eights.by_ref().map(|c| {
        let c: [bool; 8] = c.try_into().expect("chunks of 8");
        (u64::from_le_bytes(c.map(u8::from)).wrapping_mul(GATHER) >> 56) as u8
    }));
    let rest = eights.remainder();
    if !rest.is_empty() {
        bytes.push(
            rest.iter()
                .enumerate()
                .fold(0u8, |b, (i, &v)| b | (u8::from(v) << i)),
        );
    }
    BooleanBuffer::new(Buffer::from_vec(bytes), 0, v.len())
}

/// The dictionaries of the enum columns, made once: every batch shares its enum's.
static BRANCH_KINDS: Names = Names::new(BranchKind::names);
static EVENT_KINDS: Names = Names::new(EventKind::names);
static TIMING_KINDS: Names = Names::new(TimingKind::names);

/// An enum's names in code order, as a dictionary's values, made on first use.
struct Names {
    names: fn() -> Vec<&'static str>,
    values: OnceLock<ArrayRef>,
}

impl Names {
    const fn new(names: fn() -> Vec<&'static str>) -> Self {
        Names {
            names,
            values: OnceLock::new(),
        }
    }

    fn values(&self) -> &ArrayRef {
        self.values
            .get_or_init(|| Arc::new(StringArray::from((self.names)())))
    }
}

/// An enum column: `Dictionary(Int8, Utf8)` whose values are all the enum's names in code
/// order, so the codes are the keys. The `u8` codes are reinterpreted as `i8` in place
/// (same size and alignment); a code past the name list is rejected first, which also
/// rules out codes >= 128 turning negative.
fn enum_column(
    table: &'static str,
    column: &'static str,
    codes: Vec<u8>,
    names: &Names,
    what: &'static str,
) -> Result<ArrayRef> {
    let values = names.values();
    let n = codes.len();
    let codes = pooled(codes, &column_pool::U8);
    let keys = Int8Array::new(ScalarBuffer::new(codes.into_inner(), 0, n), None);
    // `try_new` checks every key (a code of 128 or more is a negative key), so the codes
    // are read once here; which row is wrong is looked for only when one is.
    match DictionaryArray::<Int8Type>::try_new(keys.clone(), values.clone()) {
        Ok(dict) => Ok(Arc::new(dict)),
        Err(source) => Err(
            match keys
                .values()
                .iter()
                .position(|&k| k as u8 as usize >= values.len())
            {
                Some(row) => ConvertError::BadCode {
                    table,
                    column,
                    row,
                    code: keys.value(row) as u8,
                    what,
                },
                None => ConvertError::Arrow { table, source },
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::types::UInt64Type;
    use arrow_array::Array;
    use tracemill_decode::rows::{BranchRow, TimingRow};

    fn some_branches(n: usize) -> BranchColumns {
        let mut c = BranchColumns::default();
        for i in 0..n as u64 {
            c.push(&BranchRow {
                ip: 0x40_1000 + i * 7,
                target: (i % 5 != 4).then_some(0x40_2000 + i),
                kind: BranchKind::ALL[(i % 8) as usize],
                taken: i % 3 != 0,
                compressed: i % 8 == 5,
                insns: (i % 17) as u32 + 1,
                tsc: Some(1000 + i * 10),
                cycles: None,
                cr3: (i > 2).then_some(0x1234_5000),
                offset: 16 * i,
            });
        }
        c
    }

    #[test]
    fn branches_match_the_schema_and_keep_the_rows() {
        let cols = some_branches(50);
        let expected: Vec<_> = cols.rows().collect();
        let b = branches(cols, 100).unwrap();
        assert_eq!(b.schema(), schema::branches());
        assert_eq!(b.num_rows(), 50);
        let seq = b.column(0).as_primitive::<UInt64Type>();
        assert_eq!(seq.value(0), 100);
        assert_eq!(seq.value(49), 149);
        let target = b.column(2).as_primitive::<UInt64Type>();
        let kind = b.column(3).as_dictionary::<Int8Type>();
        let names = kind.values().as_string::<i32>();
        for (i, r) in expected.iter().enumerate() {
            assert_eq!(target.is_valid(i), r.target.is_some());
            assert_eq!(names.value(kind.keys().value(i) as usize), r.kind.name());
        }
        // All-valid and all-null columns carry no null buffer / a full one respectively.
        assert!(b.column(7).nulls().is_none(), "tsc is always valid");
        assert_eq!(b.column(8).null_count(), 50, "cycles is always null");
    }

    #[test]
    fn big_columns_are_not_copied() {
        let cols = some_branches(1000);
        let ip = cols.ip.as_ptr() as usize;
        let offset = cols.offset.as_ptr() as usize;
        let insns = cols.insns.as_ptr() as usize;
        let kind = cols.kind.as_ptr() as usize;
        let tsc = cols.tsc.values.as_ptr() as usize;
        let b = branches(cols, 0).unwrap();
        let ptr = |i: usize| b.column(i).to_data().buffers()[0].as_ptr() as usize;
        assert_eq!(ptr(1), ip);
        assert_eq!(ptr(10), offset);
        assert_eq!(ptr(6), insns);
        assert_eq!(ptr(7), tsc);
        let keys = b.column(3).as_dictionary::<Int8Type>().keys();
        assert_eq!(keys.values().as_ptr() as usize, kind);
    }

    #[test]
    fn packed_bools_are_arrows_bitmaps() {
        // Every byte pattern, at every length and offset into a byte.
        let all: Vec<bool> = (0..256 * 8).map(|i| (i / 8) >> (i % 8) & 1 == 1).collect();
        for len in [0, 1, 7, 8, 9, 63, 64, 65, 2047, 2048] {
            for start in [0, 1, 5] {
                let v = &all[start.min(len)..len];
                assert_eq!(pack(v), BooleanBuffer::from(v), "{start}..{len}");
            }
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let random: Vec<bool> = (0..100_003)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x & 1 == 1
            })
            .collect();
        assert_eq!(pack(&random), BooleanBuffer::from(random.as_slice()));
        // A validity bitmap: none when all valid, the count otherwise.
        assert!(nulls(pack(&[true; 70])).is_none());
        assert_eq!(nulls(pack(&[false; 70])).unwrap().null_count(), 70);
        assert_eq!(nulls(pack(&random)).map(|n| n.null_count()), {
            let n = random.iter().filter(|&&v| !v).count();
            (n > 0).then_some(n)
        });
    }

    #[test]
    fn optional_bytes_match_arrows_conversion() {
        let v = vec![None, Some(3), Some(0), None, Some(255)];
        let a = opt_u8_array(&v);
        assert_eq!(a.to_data(), UInt8Array::from(v).to_data());
        let all = vec![Some(1u8); 9];
        let a = opt_u8_array(&all);
        assert!(a.nulls().is_none());
        assert_eq!(a.to_data(), UInt8Array::from(all).to_data());
    }

    #[test]
    fn enum_dictionaries_are_shared() {
        let a = branches(some_branches(10), 0).unwrap();
        let b = branches(some_branches(20), 10).unwrap();
        let values = |b: &RecordBatch| b.column(3).as_dictionary::<Int8Type>().values().clone();
        assert!(Arc::ptr_eq(&values(&a), &values(&b)));
        assert_eq!(
            values(&a)
                .as_string::<i32>()
                .iter()
                .flatten()
                .collect::<Vec<_>>(),
            BranchKind::names()
        );
    }

    #[test]
    fn explicit_seq_is_kept() {
        let mut cols = some_branches(3);
        cols.seq = vec![7, 8, 9];
        let b = branches(cols, 0).unwrap();
        assert_eq!(
            b.column(0).as_primitive::<UInt64Type>().values(),
            &[7, 8, 9]
        );
    }

    #[test]
    fn malformed_columns_are_rejected() {
        let mut cols = some_branches(3);
        cols.kind[1] = 8;
        let e = branches(cols, 0).unwrap_err();
        assert!(
            matches!(
                e,
                ConvertError::BadCode {
                    row: 1,
                    code: 8,
                    ..
                }
            ),
            "{e}"
        );

        let mut cols = some_branches(3);
        cols.kind[2] = 200; // would be -56 as i8
        assert!(branches(cols, 0).is_err());

        let mut cols = some_branches(3);
        cols.tsc.valid.pop();
        let e = branches(cols, 0).unwrap_err();
        assert_eq!(e.to_string(), "branches.tsc: 2 values, expected 3");
    }

    #[test]
    fn empty_tables_convert() {
        assert_eq!(branches(BranchColumns::default(), 5).unwrap().num_rows(), 0);
        assert_eq!(events(&[]).unwrap().num_rows(), 0);
        assert_eq!(timing(TimingColumns::default()).unwrap().num_rows(), 0);
        assert_eq!(coverage(&[]).unwrap().num_rows(), 0);
        assert_eq!(edges(&[]).unwrap().num_rows(), 0);
    }

    #[test]
    fn timing_kinds_and_ratio() {
        let mut t = TimingColumns::default();
        for (i, k) in TimingKind::ALL.iter().enumerate() {
            t.push(&TimingRow {
                offset: i as u64,
                kind: *k,
                raw: 1,
                value: 2,
                tsc: None,
                cycles: Some(3),
                core_bus_ratio: (i == 1).then_some(30),
            });
        }
        let b = timing(t).unwrap();
        assert_eq!(b.schema(), schema::timing());
        let kind = b.column(1).as_dictionary::<Int8Type>();
        let keys: Vec<i8> = (0..TimingKind::ALL.len() as i8).collect();
        assert_eq!(kind.keys().values(), &keys[..]);
        assert_eq!(b.column(6).null_count(), TimingKind::ALL.len() - 1);
    }

    fn cov(image: Option<&str>) -> CoverageRow {
        CoverageRow {
            image: image.map(str::to_string),
            image_offset: image.map(|_| 0x10),
            start: 1,
            end: 2,
            insns: 3,
            count: 4,
        }
    }

    #[test]
    fn coverage_dictionary_is_in_first_seen_order() {
        let b = coverage(&[
            cov(Some("a.out")),
            cov(None),
            cov(Some("libc.so.6")),
            cov(Some("a.out")),
        ])
        .unwrap();
        let image = b.column(0).as_dictionary::<Int8Type>();
        assert_eq!(
            image.keys().iter().collect::<Vec<_>>(),
            [Some(0), None, Some(1), Some(0)]
        );
        assert_eq!(image.values().as_string::<i32>().value(1), "libc.so.6");

        let many: Vec<_> = (0..128).map(|i| cov(Some(&format!("lib{i}.so")))).collect();
        assert!(matches!(
            coverage(&many),
            Err(ConvertError::TooManyImages { count: 128 })
        ));
        assert!(coverage(&many[..127]).is_ok());
    }

    #[test]
    fn image_dictionary_spans_batches() {
        let b1 = coverage(&[cov(Some("a.out")), cov(None)]).unwrap();
        let b2 = coverage(&[cov(Some("ld.so")), cov(Some("a.out"))]).unwrap();
        let mut d = ImageDictionary::default();
        d.add(&b1).unwrap();
        d.add(&b2).unwrap();
        let values = d.values();
        let r2 = d.rekey(&b2, &values).unwrap();
        let image = r2.column(0).as_dictionary::<Int8Type>();
        assert_eq!(image.keys().iter().collect::<Vec<_>>(), [Some(1), Some(0)]);
        assert!(Arc::ptr_eq(image.values(), &values));
        assert_eq!(r2.column(2).as_primitive::<UInt64Type>().values(), &[1, 1]);

        // A file-wide limit: adding a batch that would overflow changes nothing.
        let many: Vec<_> = (0..126).map(|i| cov(Some(&format!("lib{i}.so")))).collect();
        let e = d.add(&coverage(&many).unwrap()).unwrap_err();
        assert!(
            matches!(e, ConvertError::TooManyImages { count: 128 }),
            "{e}"
        );
        d.add(&coverage(&many[..125]).unwrap()).unwrap();
        assert_eq!(d.names.len(), MAX_IMAGES);
    }
}
