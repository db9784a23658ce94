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
