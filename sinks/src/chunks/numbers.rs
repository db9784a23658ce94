//! `UInt64` and `UInt32` columns (`ip`, `target`, `insns`, `cr3`): dictionary codes from an
//! open-addressed table of codes ([`Lookup`]).
//!
//! A row whose value sits in its first slot costs a multiply, two loads and a compare; the
//! table is four bytes a slot and at most half full, so with the dictionary's values it
//! stays in L1 for the few thousand distinct branch addresses of a `branches` row group.
//! The statistics follow the codes rather than the rows where they can: the chunk's
//! minimum and maximum are the dictionary's, the bloom filter holds the dictionary's
//! values (as arrow-rs's does for a dictionary chunk), and only the page minimum and
//! maximum read the rows' values (in order, from the arrays). Values are compared
//! unsigned, as the columns' logical type says.

use ::parquet::basic::Type;
use ::parquet::bloom_filter::Sbbf;
use ::parquet::column::writer::ColumnCloseResult;
use ::parquet::errors::ParquetError;
use ::parquet::file::properties::{EnabledStatistics, WriterProperties};
use ::parquet::schema::types::ColumnDescPtr;
use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Field};
use bytes::Bytes;

use super::stats::{chunk_statistics, definition_levels, min_max, PageIndex};
use super::{bit_width, page_rows, rle_hybrid, Chunk};

/// An unsigned integer column, nullable or not.
pub(super) fn accepts(field: &Field) -> bool {
    matches!(field.data_type(), DataType::UInt64 | DataType::UInt32)
}

/// The chunk of `arrays` (`UInt64` arrays for an INT64 column, `UInt32` for INT32), or
/// `None` once the dictionary would outgrow the properties' dictionary page limit.
pub(super) fn encode(
    descr: ColumnDescPtr,
    props: &WriterProperties,
    arrays: &[ArrayRef],
) -> Result<Option<(Bytes, ColumnCloseResult)>, ParquetError> {
    let path = descr.path().clone();
    let wide = match descr.physical_type() {
        Type::INT64 => true,
        Type::INT32 => false,
        other => {
            return Err(ParquetError::General(format!(
                "{path}: {other} is not written by the dictionary chunk encoder"
            )))
        }
    };
    let value_bytes = if wide { 8 } else { 4 };
    let limit = props.column_dictionary_page_size_limit(&path) / value_bytes;
    let nullable = descr.max_def_level() > 0;
    let rows: usize = arrays.iter().map(|a| a.len()).sum();

    let statistics = props.statistics_enabled(&path);
    // Where pages end depends on the final bit width only through the byte limit; when
    // the row limit binds at any width the dictionary can reach, pages are known before
    // the codes, and each page's minimum and maximum are taken as its rows are coded,
    // while their values are still in cache (a second pass over the chunk's values read
    // them from memory again).
    let fixed_page = {
        let rows_at = |w| page_rows(props, &path, w);
        let widest = bit_width(limit.max(1));
        (statistics == EnabledStatistics::Page && rows_at(1) == rows_at(widest)).then(|| rows_at(1))
    };
    let mut page_lo_hi: Vec<(u64, u64)> = Vec::new();
    let mut lo_hi = (u64::MAX, 0);
    let mut row = 0;

    let mut d = Dictionary::new(rows, nullable);
    for a in arrays {
        if !nullable && a.null_count() > 0 {
            return Err(ParquetError::General(format!(
                "{path}: nulls in a column declared non-null"
            )));
        }
        // A window at a time, so that a column of mostly distinct values (timing's `raw`
        // on a trace of TSC packets) is handed to arrow-rs after a few thousand rows, not
        // after a pass over the whole chunk. (Only the dictionary's final size decides
        // that, so windows may end anywhere: at page ends too.)
        let mut at = 0;
        while at < a.len() {
            let mut len = WINDOW.min(a.len() - at);
            if let Some(page) = fixed_page {
                len = len.min(page - row % page);
            }
            let part = a.slice(at, len);
            let levels_from = d.levels.len();
            match (part.data_type(), wide) {
                (DataType::UInt64, true) => {
                    let values = part.as_primitive::<UInt64Type>().values();
                    d.add(values, part.nulls());
                    if fixed_page.is_some() {
                        let levels = nullable.then(|| &d.levels[levels_from..]);
                        lo_hi = min_max(values, levels, lo_hi);
                    }
                }
                (DataType::UInt32, false) => {
                    let values = part.as_primitive::<UInt32Type>().values();
                    d.add(values, part.nulls());
                    if fixed_page.is_some() {
                        let levels = nullable.then(|| &d.levels[levels_from..]);
                        lo_hi = min_max(values, levels, lo_hi);
                    }
                }
                (other, _) => {
                    return Err(ParquetError::General(format!(
                        "{path}: {other} arrays for a {} column",
                        descr.physical_type()
                    )))
                }
            }
            at += len;
            row += len;
            if let Some(page) = fixed_page {
                if row % page == 0 || row == rows {
                    page_lo_hi.push(std::mem::replace(&mut lo_hi, (u64::MAX, 0)));
                }
            }
            // As arrow-rs decides it: a dictionary at the limit is already too large.
            if d.values().len() >= limit {
                return Ok(None);
            }
        }
    }

    let width = bit_width(d.values().len());
    let mut chunk = Chunk::new(&path, props)?;
    let mut plain = Vec::with_capacity(d.values().len() * value_bytes);
    for &v in d.values() {
        if wide {
            plain.extend_from_slice(&v.to_le_bytes());
        } else {
            plain.extend_from_slice(&(v as u32).to_le_bytes());
        }
    }
    chunk.dictionary(&plain, d.values().len())?;

    let mut pages = (statistics == EnabledStatistics::Page).then(|| PageIndex::new(&descr));
    let mut buf = Vec::new();
    let mut next_code = 0;
    let mut start = 0;
    let page = page_rows(props, &path, width);
    debug_assert!(fixed_page.is_none_or(|p| p == page));
    let mut page_lo_hi = page_lo_hi.into_iter();
    while start < rows {
        let end = (start + page).min(rows);
        buf.clear();
        // Version 1 page: the definition levels, then the bit width and the codes of the
        // rows that have a value.
        let valid = if nullable {
            let levels = &d.levels[start..end];
            definition_levels(levels, &mut buf);
            levels.iter().map(|&l| usize::from(l)).sum()
        } else {
            end - start
        };
        let codes = &d.codes[next_code..next_code + valid];
        next_code += valid;
        // Each page is written at the width of the dictionary as it stood at the page's
        // end, as arrow-rs writes it: early pages of a chunk whose dictionary keeps
        // growing take fewer bits (5% smaller `target` chunks than the final width).
        let seen = d
            .lookup
            .first
            .partition_point(|&at| (at as usize) < next_code);
        let page_width = bit_width(seen);
        buf.push(page_width);
        rle_hybrid(codes, page_width, &mut buf);
        chunk.data(&buf, end - start)?;
        if let Some(p) = pages.as_mut() {
            let levels = nullable.then(|| &d.levels[..]);
            let lo_hi = match page_lo_hi.next() {
                Some(lo_hi) => lo_hi,
                None => page_min_max(arrays, wide, levels, start, end),
            };
            let lo_hi = (valid > 0).then_some(lo_hi);
            p.page(lo_hi, end - start, valid);
        }
        start = end;
    }

    let nulls = d.nulls as usize;
    let (bytes, mut close) = chunk.finish(descr.clone(), props, |b| {
        if statistics == EnabledStatistics::None {
            return b;
        }
        chunk_statistics(b, &descr, min_max_all(d.values()), rows, nulls)
    })?;
    if let Some(p) = pages {
        close.column_index = p.build()?;
    }
    if let Some(bp) = props.bloom_filter_properties(&path) {
        if props.bloom_filter_for_dictionary_encoded_chunks() {
            let mut filter = Sbbf::new_with_ndv_fpp(bp.ndv(), bp.fpp())?;
            for &v in d.values() {
                // As arrow-rs hashes them: the physical type's little-endian bytes.
                if wide {
                    filter.insert(&(v as i64));
                } else {
                    filter.insert(&(v as u32 as i32));
                }
            }
            filter.fold_to_target_fpp(bp.fpp());
            close.bloom_filter = Some(filter);
        }
    }
    Ok(Some((bytes, close)))
}

/// The smallest and largest value, unsigned, of rows `start..end` of the chunk (`arrays`
/// one after the other) that have one (`levels`: the chunk's definition levels, for a
/// nullable column). Read from the rows' values in order, not through their codes: a
/// dictionary lookup per row was the costliest part of a page's statistics.
fn page_min_max(
    arrays: &[ArrayRef],
    wide: bool,
    levels: Option<&[u8]>,
    start: usize,
    end: usize,
) -> (u64, u64) {
    let mut lo_hi = (u64::MAX, 0);
    let mut at = 0;
    for a in arrays {
        let (s, e) = (start.max(at), end.min(at + a.len()));
        if s < e {
            let l = levels.map(|l| &l[s..e]);
            if wide {
                lo_hi = min_max(
                    &a.as_primitive::<UInt64Type>().values()[s - at..e - at],
                    l,
                    lo_hi,
                );
            } else {
                lo_hi = min_max(
                    &a.as_primitive::<UInt32Type>().values()[s - at..e - at],
                    l,
                    lo_hi,
                );
            }
        }
        at += a.len();
    }
    lo_hi
}

fn min_max_all(values: &[u64]) -> Option<(u64, u64)> {
    let lo = values.iter().copied().min()?;
    let hi = values.iter().copied().max()?;
    Some((lo, hi))
}

/// Rows added between two checks of the dictionary's size.
const WINDOW: usize = 8192;

/// log2 of the code table's slots when a chunk starts: 16 KiB of codes, room for 2 Ki
/// distinct values before it grows (a `branches` row group of a program holds a few
/// thousand branch addresses).
const TABLE_BITS: u32 = 12;
/// A slot that holds no code.
const EMPTY: u32 = u32::MAX;

/// The dictionary of a chunk: distinct values in order of first use, the code of every
/// row that has a value, and (nullable columns) every row's definition level.
struct Dictionary {
    codes: Vec<u32>,
    levels: Vec<u8>,
    nulls: u64,
    nullable: bool,
    lookup: Lookup,
}

/// The dictionary's values and the table that finds a value's code.
///
/// The table holds codes only, open-addressed by a multiplicative hash of the value with
/// linear probing, at most half full: a row whose value is in its first slot costs a
/// multiply, a load of the code, a load of the code's value and a compare, and both
/// loads hit L1 (the table is four bytes a slot, the values eight bytes each). It
/// replaced a direct-mapped table of (value, code) pairs in front of a hash map: that
/// table's 128 KiB sat in L2, and the compare waiting on its load was the costliest part
/// of encoding `ip`, `target` and `insns`.
struct Lookup {
    values: Vec<u64>,
    /// Where each value's code was first used (an index into `codes`), increasing: how
    /// many codes the rows up to a point use, by binary search, not by a pass over them.
    first: Vec<u32>,
    table: Vec<u32>,
    bits: u32,
}

impl Lookup {
    #[inline]
    fn slot(&self, v: u64) -> usize {
        (v.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - self.bits)) as usize
    }

    /// The code of `v` if it sits in its first slot.
    #[inline]
    fn hit(&self, v: u64) -> Option<u32> {
        let c = self.table[self.slot(v)];
        (self.values.get(c as usize) == Some(&v)).then_some(c)
    }

    /// The code of `v`, a new one (the next) if it has none; `at`: where in the codes
    /// this row's code goes.
    #[inline]
    fn code(&mut self, v: u64, at: usize) -> u32 {
        let mask = self.table.len() - 1;
        let mut slot = self.slot(v);
        loop {
            let c = self.table[slot];
            // An empty slot (EMPTY is past any code) ends the search.
            match self.values.get(c as usize) {
                Some(&seen) if seen == v => return c,
                Some(_) => slot = (slot + 1) & mask,
                None => return self.insert(v, slot, at),
            }
        }
    }

    #[inline(never)]
    fn insert(&mut self, v: u64, slot: usize, at: usize) -> u32 {
        let code = self.values.len() as u32;
        self.values.push(v);
        self.first.push(at as u32);
        self.table[slot] = code;
        if self.values.len() * 2 > self.table.len() {
            self.grow();
        }
        code
    }

    /// Twice the slots, every code placed again.
    #[cold]
    fn grow(&mut self) {
        self.bits += 1;
        self.table.clear();
        self.table.resize(1 << self.bits, EMPTY);
        let mask = self.table.len() - 1;
        for (code, &v) in self.values.iter().enumerate() {
            let mut slot = self.slot(v);
            while self.table[slot] != EMPTY {
                slot = (slot + 1) & mask;
            }
            self.table[slot] = code as u32;
        }
    }
}

/// A dictionary's large buffers (codes, levels, the code table), kept on the thread that
/// encoded a chunk for its next chunk: made fresh for every column of every row group
/// (4 bytes of code and a level byte a row), they were new pages the kernel had to clear.
/// At most [`KEPT`] sets a thread.
type Scratch = (Vec<u32>, Vec<u8>, Vec<u32>);
const KEPT: usize = 2;

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<Scratch>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Dictionary {
    fn new(rows: usize, nullable: bool) -> Dictionary {
        let (mut codes, mut levels, mut table) =
            SCRATCH.with(|s| s.borrow_mut().pop()).unwrap_or_default();
        codes.clear();
        codes.reserve(rows);
        levels.clear();
        levels.reserve(if nullable { rows } else { 0 });
        table.clear();
        table.resize(1 << TABLE_BITS, EMPTY);
        Dictionary {
            codes,
            levels,
            nulls: 0,
            nullable,
            lookup: Lookup {
                values: Vec::new(),
                first: Vec::new(),
                table,
                bits: TABLE_BITS,
            },
        }
    }

    fn values(&self) -> &[u64] {
        &self.lookup.values
    }

    fn add<T: Copy + Into<u64>>(&mut self, values: &[T], nulls: Option<&NullBuffer>) {
        match nulls.filter(|n| n.null_count() > 0) {
            None => {
                let base = self.codes.len();
                let mut i = 0;
                while i < values.len() {
                    // Rows whose value is in its first slot, while they last: the table
                    // is only read, so its place and size stay in registers (a search
                    // that may insert made the loop reload them for every row).
                    let lookup = &self.lookup;
                    let hits = values[i..].iter().map_while(|&v| lookup.hit(v.into()));
                    self.codes.extend(hits);
                    i = self.codes.len() - base;
                    if let Some(&v) = values.get(i) {
                        let c = self.lookup.code(v.into(), base + i);
                        self.codes.push(c);
                        i += 1;
                    }
                }
                if self.nullable {
                    self.levels.resize(self.levels.len() + values.len(), 1);
                }
            }
            // All null (a timing column of a trace without timing): no value is read.
            Some(n) if n.null_count() == values.len() => {
                self.nulls += values.len() as u64;
                self.levels.resize(self.levels.len() + values.len(), 0);
            }
            Some(n) => {
                for (&v, valid) in values.iter().zip(n.iter()) {
                    if valid {
                        let c = self.lookup.code(v.into(), self.codes.len());
                        self.codes.push(c);
                    } else {
                        self.nulls += 1;
                    }
                    self.levels.push(u8::from(valid));
                }
            }
        }
    }
}

impl Drop for Dictionary {
    fn drop(&mut self) {
        let kept = (
            std::mem::take(&mut self.codes),
            std::mem::take(&mut self.levels),
            std::mem::take(&mut self.lookup.table),
        );
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < KEPT {
                s.push(kept);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ::parquet::arrow::ArrowSchemaConverter;
    use ::parquet::file::properties::WriterProperties;
    use ::parquet::schema::types::ColumnPath;
    use arrow_array::UInt64Array;
    use arrow_schema::Schema;

    use std::collections::HashMap;

    use super::*;

    fn descr(nullable: bool) -> ColumnDescPtr {
        let schema = Schema::new(vec![Field::new("ip", DataType::UInt64, nullable)]);
        let parquet = ArrowSchemaConverter::new().convert(&schema).unwrap();
        parquet.column(0)
    }

    #[test]
    fn codes_follow_first_use_when_values_share_a_slot() {
        // 20,000 distinct values, each used again and again in a shuffled order: the table
        // grows from 4 Ki slots to 64 Ki while rows come, and values collide on the way.
        let mut d = Dictionary::new(0, false);
        let values: Vec<u64> = (0..100_000u64)
            .map(|i| 0x40_0000 + (i.wrapping_mul(2_654_435_761) % 20_000) * 0x10)
            .collect();
        d.add(&values, None);
        let mut first: HashMap<u64, u32> = HashMap::new();
        let want: Vec<u32> = values
            .iter()
            .map(|&v| {
                let n = first.len() as u32;
                *first.entry(v).or_insert(n)
            })
            .collect();
        assert_eq!(d.codes, want);
        assert_eq!(d.values().len(), 20_000);
        for (code, &v) in d.values().iter().enumerate() {
            assert_eq!(first[&v], code as u32);
        }
    }

    /// Codes and first uses as a plain map gives them, for dictionaries of every size
    /// around the table's growth points, values spread or sharing their hash's high bits,
    /// with and without nulls, added in windows of any length.
    #[test]
    fn codes_are_a_plain_maps_at_every_size_and_growth() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for (case, distinct) in [1usize, 2, 2047, 2048, 2049, 4097, 70_000]
            .iter()
            .enumerate()
        {
            let pool: Vec<u64> = (0..*distinct as u64)
                .map(|i| match case % 3 {
                    0 => 0x40_0000 + i * 4,
                    // Multiples of 2^52: the product's high bits come from few of them.
                    1 => i << 52 | i,
                    _ => i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                })
                .collect();
            let rows: Vec<Option<u64>> = (0..3 * distinct + 1000)
                .map(|_| {
                    let v = pool[(next() % *distinct as u64) as usize];
                    (case % 2 == 0 || next() % 3 != 0).then_some(v)
                })
                .collect();
            let nullable = case % 2 == 1;
            let mut d = Dictionary::new(0, nullable);
            let mut at = 0;
            while at < rows.len() {
                let n = (1 + next() % 5000) as usize;
                let part = UInt64Array::from(rows[at..rows.len().min(at + n)].to_vec());
                d.add(part.values(), part.nulls());
                at += n;
            }
            let mut map: HashMap<u64, u32> = HashMap::new();
            let (mut codes, mut first) = (Vec::new(), Vec::new());
            for &v in rows.iter().flatten() {
                let n = map.len() as u32;
                let c = *map.entry(v).or_insert_with(|| {
                    first.push(codes.len() as u32);
                    n
                });
                codes.push(c);
            }
            assert_eq!(d.codes, codes, "{distinct} values");
            assert_eq!(d.lookup.first, first, "{distinct} values");
            assert_eq!(d.values().len(), map.len());
            for (code, &v) in d.values().iter().enumerate() {
                assert_eq!(map[&v], code as u32);
            }
            assert!(d.lookup.table.len() >= 2 * d.values().len());
        }
    }

    /// Page minima and maxima taken while coding (pages known ahead) and by a pass over
    /// the pages afterwards (a byte limit that a wide dictionary would make bind) agree:
    /// the same pages here, as the dictionary stays narrow.
    #[test]
    fn page_statistics_while_coding_are_those_of_a_pass_after() {
        let values: Vec<Option<u64>> = (0..1000u64)
            .map(|i| {
                let k = i % 90;
                (i % 5 != 2 && !(300..420).contains(&i)).then_some((k << 60) | (k * 0x1_2345))
            })
            .collect();
        let arrays: Vec<ArrayRef> = [0..130, 130..130, 130..777, 777..1000]
            .into_iter()
            .map(|r| Arc::new(UInt64Array::from(values[r].to_vec())) as ArrayRef)
            .collect();
        let props = |bytes| {
            WriterProperties::builder()
                .set_data_page_row_count_limit(100)
                .set_data_page_size_limit(bytes)
                .build()
        };
        // 100 rows a page at up to 8 bits (the 90 values here), fewer at 17 (the widest).
        let (while_coding, after) = (props(1 << 20), props(100));
        let page = |p: &WriterProperties, w| page_rows(p, &ColumnPath::from("ip"), w);
        assert_eq!(page(&while_coding, 17), 100);
        assert_eq!((page(&after, 7), page(&after, 17)), (100, 47));
        let (a, ca) = encode(descr(true), &while_coding, &arrays)
            .unwrap()
            .unwrap();
        let (b, cb) = encode(descr(true), &after, &arrays).unwrap().unwrap();
        assert!(a == b, "the same pages");
        assert!(ca.column_index.is_some());
        assert_eq!(
            format!("{:?}", ca.column_index),
            format!("{:?}", cb.column_index)
        );
    }

    #[test]
    fn nulls_take_no_code_and_level_zero() {
        let mut d = Dictionary::new(0, true);
        let a = UInt64Array::from(vec![Some(7), None, Some(7), Some(9), None]);
        d.add(a.values(), a.nulls());
        assert_eq!(d.codes, [0, 0, 1]);
        assert_eq!(d.levels, [1, 0, 1, 1, 0]);
        assert_eq!((d.nulls, d.values().to_vec()), (2, vec![7, 9]));
    }

    #[test]
    fn a_dictionary_past_the_page_limit_is_left_to_arrow_rs() {
        let props = WriterProperties::builder()
            .set_dictionary_page_size_limit(64)
            .build();
        // 64 bytes: eight u64 values reach the limit.
        let seven: ArrayRef = Arc::new(UInt64Array::from_iter_values((0..100).map(|i| i % 7)));
        let eight: ArrayRef = Arc::new(UInt64Array::from_iter_values((0..100).map(|i| i % 8)));
        assert!(encode(descr(false), &props, &[seven]).unwrap().is_some());
        assert!(encode(descr(false), &props, &[eight]).unwrap().is_none());
    }

    #[test]
    fn nulls_in_a_required_column_are_an_error() {
        let props = WriterProperties::builder().build();
        let a: ArrayRef = Arc::new(UInt64Array::from(vec![Some(1), None]));
        let e = encode(descr(false), &props, &[a]).unwrap_err();
        assert!(e.to_string().contains("non-null"), "{e}");
    }
}
