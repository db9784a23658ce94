//! Parquet layout choices, made for DuckDB, pyarrow and polars queries over traces with
//! hundreds of millions of rows.
//!
//! - **ZSTD** on every column by default: the smallest tables for about the same CPU time
//!   as LZ4 or Snappy, which `WriterOptions::codec` also offers (benches/README.md,
//!   "Compression"). In row groups encoded on the pool, the dictionary columns are
//!   written by `chunks` under ZSTD or none, by arrow-rs under the others.
//! - **Dictionary encoding** (the default) for everything except the monotone columns:
//!   enum and string columns have a handful of values, and `ip`, `target`, `cr3`, `insns`
//!   repeat a lot (the same loops run again and again).
//! - **DELTA_BINARY_PACKED, no dictionary** for columns that only grow (`seq`, `offset`,
//!   `tsc`, `cycles`): each value is unique, so a dictionary would only fail over, while
//!   deltas of a sorted column pack into a few bits each.
//! - **Bloom filter on `branches.ip`**: "where did this instruction branch" is the classic
//!   point query, and `ip` is not sorted, so min/max statistics cannot prune it.
//! - **Page-level statistics** plus the column and offset indexes, so readers prune row
//!   groups and pages on `seq`, `offset`, `tsc` ranges. Not on the string columns
//!   ([`text_columns`]): arrow-rs compares every value's bytes to keep their min and max,
//!   which cost more than all the rest of the `events` table's encoding (a trace of PSBs
//!   back to back spent 49% of its time there), and a `kind` or `detail` range prunes
//!   nothing (every row group holds most kinds). Nor on constant columns (ingest's
//!   `bundle`), for the same cost.
//! - **Data pages of at most [`DEFAULT_DATA_PAGE_ROWS`]** rows (and 1 MiB): each page is
//!   a zstd frame, and small frames cost their readers more than their bytes.
//! - **Row groups of at most [`DEFAULT_MAX_ROW_GROUP_ROWS`]** rows (configurable): the
//!   unit DuckDB prunes with statistics and hands to one thread, so a big trace file still
//!   scans in parallel, while each group stays large enough to compress well.
//! - The Arrow schema is embedded (`ARROW:schema`), so `UInt64` reads back unsigned and
//!   enum columns read back as dictionaries; the Parquet logical types alone already give
//!   DuckDB `UBIGINT` and `VARCHAR`.

use std::fs::File;

use ::parquet::arrow::ArrowWriter;
use ::parquet::basic::{Compression, Encoding, ZstdLevel};
use ::parquet::errors::ParquetError;
use ::parquet::file::metadata::KeyValue;
use ::parquet::file::properties::{EnabledStatistics, WriterProperties};
use ::parquet::schema::types::ColumnPath;
use arrow_schema::SchemaRef;

use crate::{Codec, WriterOptions};

/// Default row group size: about one million rows. A branches row group is then a few
/// MiB compressed; smaller groups mean more per-group overhead in the footer and in every
/// scan, larger ones coarser pruning and fewer units of parallel work.
pub const DEFAULT_MAX_ROW_GROUP_ROWS: usize = 1 << 19;

/// Default rows per data page, at most (pages also stop at arrow-rs's 1 MiB). arrow-rs's
/// own limit, 20,000 rows, cut a `branches` row group's `ip` column (600,000 rows from
/// `decode`) into 30 pages of 36 KB, each a zstd frame whose tables a reader builds again:
/// a sixth of the flame graph readers' zstd time. Pages still prune `seq`, `offset` and
/// `tsc` ranges a fifth of a row group at a time.
pub const DEFAULT_DATA_PAGE_ROWS: usize = 1 << 17;

/// Default ZSTD level: 3 is zstd's own default, several times faster than the high levels
/// for a few percent of size.
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;

/// False-positive rate of the `ip` bloom filter. The filter is folded down to the number of
/// distinct values actually seen, so a low rate costs little space (programs have
/// thousands, not millions, of distinct branch addresses per row group).
const BLOOM_FPP: f64 = 0.01;

/// Columns of each table that never decrease, which get DELTA_BINARY_PACKED (`time`, a
/// perf.data decode's perf time, decreases only where one CPU's rows end and the next's
/// begin). A dictionary of values that are all different is a hash per row for nothing:
/// `time` with the default dictionary was 7% of a perf.data decode's CPU.
pub fn delta_columns(table: &str) -> &'static [&'static str] {
    match table {
        "branches" => &["seq", "offset", "tsc", "cycles", "time"],
        "events" => &["seq", "offset"],
        "timing" => &["offset", "tsc", "cycles", "time"],
        _ => &[],
    }
}

/// String columns of each table, written without statistics (see the module notes).
pub fn text_columns(table: &str) -> &'static [&'static str] {
    match table {
        "branches" | "timing" | "edges" => &["kind"],
        "events" => &["kind", "detail"],
        "coverage" => &["image"],
        _ => &[],
    }
}

/// Columns of each table that get a bloom filter.
pub fn bloom_columns(table: &str) -> &'static [&'static str] {
    match table {
        "branches" => &["ip"],
        _ => &[],
    }
}

/// The writer properties of one table's file; `key_value` is the footer metadata.
pub fn writer_properties(
    table: &str,
    key_value: Vec<(String, String)>,
    options: &WriterOptions,
) -> Result<WriterProperties, ParquetError> {
    let mut b = WriterProperties::builder()
        .set_compression(match options.codec {
            Codec::Zstd => Compression::ZSTD(ZstdLevel::try_new(options.zstd_level)?),
            Codec::Lz4 => Compression::LZ4_RAW,
            Codec::Snappy => Compression::SNAPPY,
            Codec::None => Compression::UNCOMPRESSED,
        })
        .set_dictionary_enabled(true)
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_max_row_group_row_count(Some(options.max_row_group_rows.max(1)))
        .set_data_page_row_count_limit(options.data_page_rows.max(1))
        .set_key_value_metadata(Some(
            key_value
                .into_iter()
                .map(|(k, v)| KeyValue::new(k, v))
                .collect(),
        ));
    for &c in delta_columns(table) {
        b = b
            .set_column_dictionary_enabled(ColumnPath::from(c), false)
            .set_column_encoding(ColumnPath::from(c), Encoding::DELTA_BINARY_PACKED);
    }
    for &c in text_columns(table) {
        b = b.set_column_statistics_enabled(ColumnPath::from(c), EnabledStatistics::None);
    }
    // Constant columns (ingest's `bundle`) are strings too: their min and max cost a
    // comparison of every value's bytes, 40 ns per row measured by `encode-bench` (a third
    // of all the rest of a `branches` row's encoding), to say what the file name already
    // says.
    for (c, _) in &options.constant_columns {
        b = b.set_column_statistics_enabled(ColumnPath::from(c.as_str()), EnabledStatistics::None);
    }
    for &c in bloom_columns(table) {
        b = b
            .set_column_bloom_filter_enabled(ColumnPath::from(c), true)
            .set_column_bloom_filter_fpp(ColumnPath::from(c), BLOOM_FPP);
    }
    Ok(b.build())
}

pub(crate) fn open(
    file: File,
    schema: SchemaRef,
    props: WriterProperties,
) -> Result<ArrowWriter<File>, ParquetError> {
    // No BufWriter: the Parquet writer buffers its output itself, and writes whole pages.
    ArrowWriter::try_new(file, schema, Some(props))
}
