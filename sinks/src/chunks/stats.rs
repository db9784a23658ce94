//! What the integer and boolean chunks ([`super::numbers`], [`super::delta`],
//! [`super::booleans`]) write beside their values, as arrow-rs writes it: the definition
//! levels of a version 1 page, the column index page by page, and the chunk's statistics.
//! Values are unsigned (the columns' logical type; false is 0 and true 1), stored in the
//! physical type's little-endian bytes (one byte for a boolean).

use ::parquet::basic::{BoundaryOrder, Type};
use ::parquet::errors::ParquetError;
use ::parquet::file::metadata::{ColumnChunkMetaDataBuilder, ColumnIndexBuilder, LevelHistogram};
use ::parquet::file::page_index::column_index::ColumnIndexMetaData;
use ::parquet::file::statistics::{Statistics, ValueStatistics};
use ::parquet::schema::types::ColumnDescPtr;

use super::rle_levels;

/// Appends a version 1 page's definition levels (0 or 1 per row): their length as a u32,
/// then the RLE/bit-packed hybrid at one bit.
pub(super) fn definition_levels(levels: &[u8], out: &mut Vec<u8>) {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    rle_levels(levels, out);
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// The bytes of `v` in an INT64, INT32 or BOOLEAN column.
fn bytes_of(v: u64, physical: Type) -> Vec<u8> {
    match physical {
        Type::INT64 => v.to_le_bytes().to_vec(),
        Type::BOOLEAN => vec![u8::from(v != 0)],
        _ => (v as u32).to_le_bytes().to_vec(),
    }
}

/// The column index of a chunk, page by page: minima and maxima, null pages and counts,
/// level histograms (nullable columns), and whether the pages' minima and maxima rise
/// (or fall) throughout.
pub(super) struct PageIndex {
    builder: ColumnIndexBuilder,
    physical: Type,
    nullable: bool,
    ascending: bool,
    descending: bool,
    last: Option<(u64, u64)>,
}

impl PageIndex {
    pub(super) fn new(descr: &ColumnDescPtr) -> PageIndex {
        PageIndex {
            builder: ColumnIndexBuilder::new(descr.physical_type()),
            physical: descr.physical_type(),
            nullable: descr.max_def_level() > 0,
            ascending: true,
            descending: true,
            last: None,
        }
    }

    /// The next page: `rows` rows of which `present` have a value, their smallest and
    /// largest if any.
    pub(super) fn page(&mut self, min_max: Option<(u64, u64)>, rows: usize, present: usize) {
        let nulls = (rows - present) as i64;
        match min_max {
            None => self
                .builder
                .append(true, Vec::new(), Vec::new(), nulls, None),
            Some((lo, hi)) => {
                if let Some((last_lo, last_hi)) = self.last {
                    self.ascending &= last_lo <= lo && last_hi <= hi;
                    self.descending &= last_lo >= lo && last_hi >= hi;
                }
                self.last = Some((lo, hi));
                let (lo, hi) = (bytes_of(lo, self.physical), bytes_of(hi, self.physical));
                self.builder.append(false, lo, hi, nulls, None);
            }
        }
        if self.nullable {
            let levels = LevelHistogram::from(vec![nulls, present as i64]);
            self.builder.append_histograms(&None, &Some(levels));
        }
    }

    pub(super) fn build(mut self) -> Result<Option<ColumnIndexMetaData>, ParquetError> {
        self.builder
            .set_boundary_order(match (self.ascending, self.descending) {
                (true, _) => BoundaryOrder::ASCENDING,
                (false, true) => BoundaryOrder::DESCENDING,
                (false, false) => BoundaryOrder::UNORDERED,
            });
        if self.builder.valid() {
            Ok(Some(self.builder.build()?))
        } else {
            Ok(None)
        }
    }
}

/// Adds the chunk's statistics to its metadata: the smallest and largest value (none if
/// every row is null), the null count, and (nullable columns) the level histogram.
pub(super) fn chunk_statistics(
    b: ColumnChunkMetaDataBuilder,
    descr: &ColumnDescPtr,
    min_max: Option<(u64, u64)>,
    rows: usize,
    nulls: usize,
) -> ColumnChunkMetaDataBuilder {
    let (lo, hi) = (min_max.map(|m| m.0), min_max.map(|m| m.1));
    // arrow-rs's choice: unsigned columns keep their minimum and maximum only in the
    // fields whose order the column's sort order defines.
    let signed = descr.sort_order().is_signed();
    let nulls = nulls as u64;
    let stats = match descr.physical_type() {
        Type::INT64 => Statistics::Int64(
            ValueStatistics::new(
                lo.map(|v| v as i64),
                hi.map(|v| v as i64),
                None,
                Some(nulls),
                false,
            )
            .with_backwards_compatible_min_max(signed),
        ),
        Type::BOOLEAN => Statistics::Boolean(
            ValueStatistics::new(
                lo.map(|v| v != 0),
                hi.map(|v| v != 0),
                None,
                Some(nulls),
                false,
            )
            .with_backwards_compatible_min_max(signed),
        ),
        _ => Statistics::Int32(
            ValueStatistics::new(
                lo.map(|v| v as u32 as i32),
                hi.map(|v| v as u32 as i32),
                None,
                Some(nulls),
                false,
            )
            .with_backwards_compatible_min_max(signed),
        ),
    };
    let b = b.set_statistics(stats);
    if descr.max_def_level() > 0 {
        let present = rows as i64 - nulls as i64;
        b.set_definition_level_histogram(Some(LevelHistogram::from(vec![nulls as i64, present])))
    } else {
        b
    }
}

/// Lanes of the minima and maxima below, folded independently: one running minimum and
/// maximum is a chain of compares and conditional moves that each wait for the last
/// (baseline x86-64 has no vector minimum of 64-bit lanes); a page's statistics were the
/// costliest part of its encoding.
const LANES: usize = 4;

/// `lo_hi` lowered and raised by the values of `v` (unsigned), of the rows whose level in
/// `levels` is 1 when `levels` is given (as long as `v`).
#[inline]
pub(super) fn min_max<T: Copy + Into<u64>>(
    v: &[T],
    levels: Option<&[u8]>,
    lo_hi: (u64, u64),
) -> (u64, u64) {
    let mut lo = [lo_hi.0; LANES];
    let mut hi = [lo_hi.1; LANES];
    match levels {
        None => {
            let mut chunks = v.chunks_exact(LANES);
            for c in &mut chunks {
                for k in 0..LANES {
                    lo[k] = lo[k].min(c[k].into());
                    hi[k] = hi[k].max(c[k].into());
                }
            }
            for &x in chunks.remainder() {
                lo[0] = lo[0].min(x.into());
                hi[0] = hi[0].max(x.into());
            }
        }
        Some(levels) => {
            // A row without a value counts as the largest value for the minimum and the
            // smallest for the maximum (no branch).
            let mut chunks = v.chunks_exact(LANES).zip(levels.chunks_exact(LANES));
            for (c, l) in &mut chunks {
                for k in 0..LANES {
                    let m = u64::from(l[k]).wrapping_neg();
                    lo[k] = lo[k].min(c[k].into() | !m);
                    hi[k] = hi[k].max(c[k].into() & m);
                }
            }
            let done = v.len() / LANES * LANES;
            for (&x, &l) in v[done..].iter().zip(&levels[done..]) {
                let m = u64::from(l).wrapping_neg();
                lo[0] = lo[0].min(x.into() | !m);
                hi[0] = hi[0].max(x.into() & m);
            }
        }
    }
    (
        lo.into_iter().min().unwrap_or(lo_hi.0),
        hi.into_iter().max().unwrap_or(lo_hi.1),
    )
}

/// The smallest of `v`, or `i64::MAX` for none.
#[inline]
pub(super) fn min_i64(v: &[i64]) -> i64 {
    let mut lo = [i64::MAX; LANES];
    let mut chunks = v.chunks_exact(LANES);
    for c in &mut chunks {
        for k in 0..LANES {
            lo[k] = lo[k].min(c[k]);
        }
    }
    for &x in chunks.remainder() {
        lo[0] = lo[0].min(x);
    }
    lo.into_iter().min().unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lanes give what one running minimum and maximum give, for every length around
    /// the lane count, with and without levels, from any starting pair.
    #[test]
    fn lanes_fold_as_one_running_minimum_and_maximum() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for n in 0..40 {
            let v: Vec<u64> = (0..n).map(|_| next() >> (next() % 64)).collect();
            let levels: Vec<u8> = (0..n).map(|_| (next() % 3 != 0) as u8).collect();
            let start = [(u64::MAX, 0), (next(), next() >> 1)][n % 2];
            let (mut lo, mut hi) = start;
            for &x in &v {
                lo = lo.min(x);
                hi = hi.max(x);
            }
            assert_eq!(min_max(&v, None, start), (lo, hi), "{v:?}");
            let (mut lo, mut hi) = start;
            for (&x, &l) in v.iter().zip(&levels) {
                if l == 1 {
                    lo = lo.min(x);
                    hi = hi.max(x);
                }
            }
            assert_eq!(
                min_max(&v, Some(&levels), start),
                (lo, hi),
                "{v:?} {levels:?}"
            );
            let d: Vec<i64> = v.iter().map(|&x| x as i64).collect();
            assert_eq!(min_i64(&d), d.iter().copied().min().unwrap_or(i64::MAX));
        }
    }
}
