//! `UInt64` columns that only grow (`seq`, `offset`, `tsc`, `cycles`, `time`), written as
//! DELTA_BINARY_PACKED pages.
//!
//! arrow-rs's encoder for these took 4.9% of `decode --out`'s samples and its per-batch
//! minimum and maximum another 0.7% (`perf record`, 50 MB synthetic trace, after the
//! dictionary columns left it, benches/README.md): it buffers every value through a
//! generic bit writer, one value at a time. Here each block of 256 values is delta-coded
//! and packed in one pass, and the page's minimum and maximum
//! come from the same pass. The layout is arrow-rs's: blocks of 256 values in four
//! miniblocks of 64, the page header (block size, miniblocks, value count, first value),
//! then per block the smallest delta and the four bit widths; version 1 data pages with
//! the definition levels before the values for nullable columns; chunk statistics and the
//! column index compared unsigned.

use ::parquet::basic::{Encoding, Type};
use ::parquet::column::writer::ColumnCloseResult;
use ::parquet::errors::ParquetError;
use ::parquet::file::properties::{EnabledStatistics, WriterProperties};
use ::parquet::schema::types::{ColumnDescPtr, ColumnPath};
use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{Array, ArrayRef, UInt64Array};
use arrow_schema::{DataType, Field};
use bytes::Bytes;

use super::stats::{chunk_statistics, definition_levels, min_i64, min_max, PageIndex};
use super::{varint, Chunk, Packer};

/// Values per block and per miniblock, as arrow-rs writes INT64 columns.
const BLOCK: usize = 256;
const MINIBLOCKS: usize = 4;
const MINIBLOCK: usize = BLOCK / MINIBLOCKS;

/// A `UInt64` column configured for DELTA_BINARY_PACKED, without a dictionary or a bloom
/// filter.
pub(super) fn accepts(field: &Field, path: &ColumnPath, props: &WriterProperties) -> bool {
    field.data_type() == &DataType::UInt64
        && !props.dictionary_enabled(path)
        && props.encoding(path) == Some(Encoding::DELTA_BINARY_PACKED)
        && props.bloom_filter_properties(path).is_none()
}

/// The chunk of `arrays` (`UInt64` arrays of an INT64 column).
pub(super) fn encode(
    descr: ColumnDescPtr,
    props: &WriterProperties,
    arrays: &[ArrayRef],
) -> Result<(Bytes, ColumnCloseResult), ParquetError> {
    let path = descr.path().clone();
    if descr.physical_type() != Type::INT64 {
        return Err(ParquetError::General(format!(
            "{path}: {} is not written by the delta chunk encoder",
            descr.physical_type()
        )));
    }
    let nullable = descr.max_def_level() > 0;
    let mut columns = Vec::with_capacity(arrays.len());
    for a in arrays {
        if a.data_type() != &DataType::UInt64 {
            return Err(ParquetError::General(format!(
                "{path}: {} arrays for an INT64 column",
                a.data_type()
            )));
        }
        if !nullable && a.null_count() > 0 {
            return Err(ParquetError::General(format!(
                "{path}: nulls in a column declared non-null"
            )));
        }
        columns.push(a.as_primitive::<UInt64Type>());
    }
    let rows: usize = columns.iter().map(|c| c.len()).sum();
    // A page's values are read from the arrays in place when they lie in one array
    // without nulls, and gathered here otherwise: a page at a time, not the chunk (the
    // chunk's copy cost 4 MiB per column of a `branches` row group, several at once).
    let mut gathered: Vec<u64> = Vec::new();
    let mut levels: Vec<u8> = Vec::new();
    let mut cursor = Cursor::default();

    let statistics = props.statistics_enabled(&path);
    let mut pages = (statistics == EnabledStatistics::Page).then(|| PageIndex::new(&descr));
    let mut chunk = Chunk::with_data_encoding(&path, props, Encoding::DELTA_BINARY_PACKED)?;
    // The row limit, and the byte limit at the worst case of 64 bits per value.
    let page_rows = props
        .column_data_page_row_count_limit(&path)
        .min(props.column_data_page_size_limit(&path) / 8)
        .max(1);
    let mut buf = Vec::new();
    let mut all: Option<(u64, u64)> = None;
    let mut present_all = 0usize;
    let mut start = 0;
    while start < rows {
        let end = (start + page_rows).min(rows);
        buf.clear();
        let page = cursor.take(&columns, end - start, nullable, &mut gathered, &mut levels);
        let present = page.len();
        if nullable {
            definition_levels(&levels, &mut buf);
        }
        present_all += present;
        let min_max = delta_page(page, &mut buf);
        chunk.data(&buf, end - start)?;
        if let Some((lo, hi)) = min_max {
            all = Some(all.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
        }
        if let Some(p) = pages.as_mut() {
            p.page(min_max, end - start, present);
        }
        start = end;
    }

    let nulls = rows - present_all;
    let (bytes, mut close) = chunk.finish(descr.clone(), props, |b| {
        if statistics == EnabledStatistics::None {
            return b;
        }
        chunk_statistics(b, &descr, all, rows, nulls)
    })?;
    if let Some(p) = pages {
        close.column_index = p.build()?;
    }
    Ok((bytes, close))
}

/// Where the next page starts: an array, and a row in it.
#[derive(Default)]
struct Cursor {
    array: usize,
    row: usize,
}

impl Cursor {
    /// The present values of the next `rows` rows: borrowed from the array when they lie
    /// in one without nulls, else gathered into `gathered`. `levels` gets the rows'
    /// definition levels (nullable columns only).
    fn take<'a>(
        &mut self,
        columns: &[&'a UInt64Array],
        rows: usize,
        nullable: bool,
        gathered: &'a mut Vec<u64>,
        levels: &mut Vec<u8>,
    ) -> &'a [u64] {
        levels.clear();
        gathered.clear();
        while self.array < columns.len() && self.row == columns[self.array].len() {
            self.array += 1;
            self.row = 0;
        }
        if let Some(c) = columns.get(self.array) {
            if self.row + rows <= c.len() && c.null_count() == 0 {
                if nullable {
                    levels.resize(rows, 1);
                }
                let page = &c.values()[self.row..self.row + rows];
                self.row += rows;
                return page;
            }
        }
        let mut left = rows;
        while left > 0 {
            let c = columns[self.array];
            let n = left.min(c.len() - self.row);
            let values = &c.values()[self.row..self.row + n];
            match c.nulls().filter(|n| n.null_count() > 0) {
                None => {
                    gathered.extend_from_slice(values);
                    if nullable {
                        levels.resize(levels.len() + n, 1);
                    }
                }
                // All null (`tsc` and `cycles` of a trace without timing packets): levels
                // only, not a bit read per row.
                Some(nulls) if nulls.null_count() == c.len() => {
                    levels.resize(levels.len() + n, 0);
                }
                Some(nulls) => {
                    for (i, &v) in values.iter().enumerate() {
                        let valid = nulls.is_valid(self.row + i);
                        if valid {
                            gathered.push(v);
                        }
                        levels.push(u8::from(valid));
                    }
                }
            }
            left -= n;
            self.row += n;
            if self.row == c.len() {
                self.array += 1;
                self.row = 0;
            }
        }
        gathered
    }
}

/// Appends `values` as one DELTA_BINARY_PACKED page; their smallest and largest (unsigned),
/// if any.
fn delta_page(values: &[u64], out: &mut Vec<u8>) -> Option<(u64, u64)> {
    varint(BLOCK as u64, out);
    varint(MINIBLOCKS as u64, out);
    varint(values.len() as u64, out);
    let Some(&first) = values.first() else {
        varint(0, out);
        return None;
    };
    varint(zigzag(first as i64), out);
    let mut lo_hi = (first, first);
    let mut deltas = [0i64; BLOCK];
    let mut previous = first;
    for block in values[1..].chunks(BLOCK) {
        // Each pass its own loop: the deltas vectorize, and the minima and maxima fold in
        // independent lanes (`min_max`).
        for (d, &v) in deltas.iter_mut().zip(block) {
            *d = v.wrapping_sub(previous) as i64;
            previous = v;
        }
        let min_delta = min_i64(&deltas[..block.len()]);
        lo_hi = min_max(block, None, lo_hi);
        varint(zigzag(min_delta), out);
        let widths_at = out.len();
        out.extend_from_slice(&[0; MINIBLOCKS]);
        for (m, mini) in deltas[..block.len()].chunks(MINIBLOCK).enumerate() {
            let mut max = 0u64;
            for &d in mini {
                max = max.max((d as u64).wrapping_sub(min_delta as u64));
            }
            let width = 64 - max.leading_zeros();
            out[widths_at + m] = width as u8;
            pack(mini, min_delta, width, out);
        }
    }
    Some(lo_hi)
}

/// A miniblock's deltas less `min_delta` at `width` bits each, least significant bit
/// first, padded with zeros to the miniblock's 64 values.
fn pack(deltas: &[i64], min_delta: i64, width: u32, out: &mut Vec<u8>) {
    if width == 0 {
        return;
    }
    out.reserve(MINIBLOCK * 8);
    let mut p = Packer::new(width);
    for &d in deltas {
        p.put((d as u64).wrapping_sub(min_delta as u64), out);
    }
    for _ in deltas.len()..MINIBLOCK {
        p.put(0, out);
    }
    // 64 values of `width` bits: a whole number of bytes.
    p.finish(out);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The present values and levels of rows `at..at + n` of `rows`, the plain way.
    fn expected(rows: &[Option<u64>], at: usize, n: usize) -> (Vec<u64>, Vec<u8>) {
        let page = &rows[at..at + n];
        (
            page.iter().flatten().copied().collect(),
            page.iter().map(|r| u8::from(r.is_some())).collect(),
        )
    }

    #[test]
    fn the_cursor_reads_pages_across_arrays_empty_arrays_slices_and_nulls() {
        let rows: Vec<Option<u64>> = (0..100u64)
            .map(|i| ((i % 7 != 3 || i < 20) && !(60..80).contains(&i)).then_some(i * 10))
            .collect();
        let whole = UInt64Array::from(rows.clone());
        // Arrays of 13, 0, 40, 7, 20 and 20 rows, sliced out of one (offsets into its
        // buffers); the first 20 rows have no nulls, rows 60 to 79 (an array) no values.
        let parts = [
            whole.slice(0, 13),
            whole.slice(13, 0),
            whole.slice(13, 40),
            whole.slice(53, 7),
            whole.slice(60, 20),
            whole.slice(80, 20),
        ];
        let columns: Vec<&UInt64Array> = parts.iter().collect();
        for page in [1, 5, 13, 20, 33, 100] {
            let mut cursor = Cursor::default();
            let (mut gathered, mut levels) = (Vec::new(), Vec::new());
            let mut at = 0;
            while at < rows.len() {
                let n = page.min(rows.len() - at);
                let got = cursor.take(&columns, n, true, &mut gathered, &mut levels);
                let (values, want_levels) = expected(&rows, at, n);
                assert_eq!(got, values.as_slice(), "page of {page} at {at}");
                assert_eq!(levels, want_levels, "page of {page} at {at}");
                at += n;
            }
        }
    }

    #[test]
    fn a_page_of_one_value_and_of_none_has_the_header_only() {
        let mut out = Vec::new();
        assert_eq!(delta_page(&[], &mut out), None);
        assert_eq!(out, [0x80, 0x02, 4, 0, 0]);
        out.clear();
        assert_eq!(delta_page(&[7], &mut out), Some((7, 7)));
        assert_eq!(out, [0x80, 0x02, 4, 1, 14]);
    }
}
