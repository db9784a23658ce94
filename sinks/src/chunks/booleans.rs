//! Non-null `Boolean` columns (`branches.taken`, `compressed`, `in_tx`) as PLAIN pages.
//!
//! arrow-rs never dictionary-encodes a BOOLEAN column: it writes PLAIN values (version 1
//! pages) after copying the Arrow array into a `Vec<bool>` one `BooleanArray::value` at a
//! time and packing it back into bits, and it finds each page's minimum and maximum by
//! comparing every value. That per-value path cost 4.5% of `decode --out`'s CPU. PLAIN
//! BOOLEAN is bit-packed, least significant bit first: the layout of an Arrow bitmap. So a
//! page's values are the bitmap's bytes, copied 64 bits at a time (shifted when a slice
//! does not start on a byte boundary), and the copy counts the page's false values, which
//! is all its minimum and maximum need. The bits past a page's last row are zero, as
//! arrow-rs pads them.

use ::parquet::basic::{Encoding, Type};
use ::parquet::column::writer::ColumnCloseResult;
use ::parquet::errors::ParquetError;
use ::parquet::file::properties::{EnabledStatistics, WriterProperties};
use ::parquet::schema::types::{ColumnDescPtr, ColumnPath};
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, BooleanArray};
use arrow_buffer::bit_mask::set_bits;
use arrow_schema::{DataType, Field};
use bytes::Bytes;

use super::stats::{chunk_statistics, PageIndex};
use super::Chunk;

/// A non-null `Boolean` column written PLAIN (the only encoding arrow-rs gives BOOLEAN
/// under version 1 pages unless one is set), without a bloom filter. arrow-rs ignores
/// the dictionary setting for BOOLEAN, so this does too.
pub(super) fn accepts(field: &Field, path: &ColumnPath, props: &WriterProperties) -> bool {
    field.data_type() == &DataType::Boolean
        && !field.is_nullable()
        && matches!(props.encoding(path), None | Some(Encoding::PLAIN))
        && props.bloom_filter_properties(path).is_none()
}

/// The chunk of `arrays` (`Boolean` arrays of a required BOOLEAN column).
pub(super) fn encode(
    descr: ColumnDescPtr,
    props: &WriterProperties,
    arrays: &[ArrayRef],
) -> Result<(Bytes, ColumnCloseResult), ParquetError> {
    let path = descr.path().clone();
    if descr.physical_type() != Type::BOOLEAN || descr.max_def_level() > 0 {
        return Err(ParquetError::General(format!(
            "{path}: only required BOOLEAN columns are written by the boolean chunk encoder"
        )));
    }
    let mut columns = Vec::with_capacity(arrays.len());
    for a in arrays {
        if a.data_type() != &DataType::Boolean {
            return Err(ParquetError::General(format!(
                "{path}: {} arrays for a BOOLEAN column",
                a.data_type()
            )));
        }
        if a.null_count() > 0 {
            return Err(ParquetError::General(format!(
                "{path}: nulls in a column declared non-null"
            )));
        }
        columns.push(a.as_boolean());
    }
    let rows: usize = columns.iter().map(|c| c.len()).sum();

    let statistics = props.statistics_enabled(&path);
    let mut pages = (statistics == EnabledStatistics::Page).then(|| PageIndex::new(&descr));
    let mut chunk = Chunk::with_data_encoding(&path, props, Encoding::PLAIN)?;
    // The row limit, and the byte limit at one bit per value (arrow-rs estimates a PLAIN
    // boolean page by its packed bytes).
    let page_rows = props
        .column_data_page_row_count_limit(&path)
        .min(props.column_data_page_size_limit(&path).saturating_mul(8))
        .max(1);
    let mut buf = Vec::new();
    let mut cursor = Cursor::default();
    let (mut falses, mut trues) = (false, false);
    let mut start = 0;
    while start < rows {
        let n = page_rows.min(rows - start);
        let zeros = cursor.take(&columns, n, &mut buf);
        chunk.data(&buf, n)?;
        let min_max = page_min_max(n, zeros);
        falses |= zeros > 0;
        trues |= zeros < n;
        if let Some(p) = pages.as_mut() {
            p.page(Some(min_max), n, n);
        }
        start += n;
    }

    let all = (rows > 0).then_some((u64::from(!falses), u64::from(trues)));
    let (bytes, mut close) = chunk.finish(descr.clone(), props, |b| {
        if statistics == EnabledStatistics::None {
            return b;
        }
        chunk_statistics(b, &descr, all, rows, 0)
    })?;
    if let Some(p) = pages {
        close.column_index = p.build()?;
    }
    Ok((bytes, close))
}

/// The smallest and largest value (false 0, true 1) of `rows` rows of which `zeros` are
/// false.
fn page_min_max(rows: usize, zeros: usize) -> (u64, u64) {
    (u64::from(zeros == 0), u64::from(zeros < rows))
}

/// Where the next page starts: an array, and a row in it.
#[derive(Default)]
struct Cursor {
    array: usize,
    row: usize,
}

impl Cursor {
    /// Packs the next `rows` rows into `out` (replacing what it held), least significant
    /// bit first, the bits past the last row zero; the number of them that are false.
    fn take(&mut self, columns: &[&BooleanArray], rows: usize, out: &mut Vec<u8>) -> usize {
        out.clear();
        out.resize(rows.div_ceil(8), 0);
        let mut zeros = 0;
        let mut done = 0;
        while done < rows {
            let c = columns[self.array];
            let n = (rows - done).min(c.len() - self.row);
            let bits = c.values();
            // `set_bits` copies 64 bits at a time, a plain copy of words when both ends
            // start on a byte, and writes nothing outside the range (`out` is zeroed).
            zeros += set_bits(out, bits.values(), done, bits.offset() + self.row, n);
            done += n;
            self.row += n;
            if self.row == c.len() {
                self.array += 1;
                self.row = 0;
            }
        }
        zeros
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rows packed the plain way: bit i of byte i / 8, the rest zero.
    fn packed(rows: &[bool]) -> Vec<u8> {
        let mut out = vec![0u8; rows.len().div_ceil(8)];
        for (i, &v) in rows.iter().enumerate() {
            out[i / 8] |= u8::from(v) << (i % 8);
        }
        out
    }

    #[test]
    fn pages_pack_slices_at_any_bit_offset_across_arrays() {
        let rows: Vec<bool> = (0..1000u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(7) & 4 != 0)
            .collect();
        let whole = BooleanArray::from(rows.clone());
        // Arrays at offsets 0, 13 (not a byte), 13 (empty), 53, 64 and 901.
        let parts = [
            whole.slice(0, 13),
            whole.slice(13, 0),
            whole.slice(13, 40),
            whole.slice(53, 11),
            whole.slice(64, 837),
            whole.slice(901, 99),
        ];
        let columns: Vec<&BooleanArray> = parts.iter().collect();
        for page in [1, 5, 8, 13, 64, 65, 200, 1000] {
            let mut cursor = Cursor::default();
            let mut out = Vec::new();
            let mut at = 0;
            while at < rows.len() {
                let n = page.min(rows.len() - at);
                let zeros = cursor.take(&columns, n, &mut out);
                let want = &rows[at..at + n];
                assert_eq!(out, packed(want), "page of {page} at {at}");
                assert_eq!(zeros, want.iter().filter(|&&v| !v).count());
                at += n;
            }
        }
    }

    #[test]
    fn bits_past_a_slice_stay_out_of_the_page() {
        // All true, read 3 rows from bit 5: one byte, the upper five bits zero.
        let a = BooleanArray::from(vec![true; 64]).slice(5, 3);
        let mut out = Vec::new();
        assert_eq!(Cursor::default().take(&[&a], 3, &mut out), 0);
        assert_eq!(out, [0b111]);
    }

    #[test]
    fn page_minimum_and_maximum() {
        assert_eq!(page_min_max(10, 0), (1, 1));
        assert_eq!(page_min_max(10, 10), (0, 0));
        assert_eq!(page_min_max(10, 3), (0, 1));
    }
}
