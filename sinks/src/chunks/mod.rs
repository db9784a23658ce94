//! Parquet column chunks tracemill encodes itself, for the columns that cost most to
//! encode through arrow-rs's general paths.
//!
//! arrow-rs finds each row's dictionary index by hashing its value in a general hash
//! table (its `Interner`). For the columns tracemill writes most, that lookup was most of
//! the encoding (`encode-bench`, benches/README.md): a `branches` row's `ip` cost 27.5 ns,
//! `target` 30, `insns` 17.5 and `kind` 25 of a row's 175 ns, while the values come from
//! small sets (a program's branch addresses, eight kind names). And its delta encoder
//! for the columns that only grow buffers every value through a generic bit writer, and
//! it copies a Boolean column out of its bitmap one value at a time to pack it into bits
//! again. Four kinds of chunk:
//!
//! - [`strings`]: string columns that are already Arrow dictionaries (`kind`, ingest's
//!   constant `bundle`): the Arrow keys remapped through a table as long as the Arrow
//!   dictionary, a load per row.
//! - [`numbers`]: `UInt64`/`UInt32` dictionary columns (`ip`, `target`, `insns`, `cr3`):
//!   an open-addressed table of codes small enough to stay in L1, so a row (a program
//!   runs the same branches again and again) costs a multiply, two loads and a compare,
//!   with no hash map behind it. Statistics, the column index and the
//!   bloom filter are built from the dictionary and from each page's codes.
//! - [`delta`]: `UInt64` columns that only grow (`seq`, `offset`, `tsc`, `cycles`) as
//!   DELTA_BINARY_PACKED, a block of 256 values at a time.
//! - [`booleans`]: non-null `Boolean` columns (`taken`, `compressed`, `in_tx`) as PLAIN
//!   pages, whose bit-packed values are the Arrow bitmap's bytes.
//!
//! Each is laid out as arrow-rs lays out the same chunk ([`Chunk`]): for dictionaries a
//! PLAIN dictionary page, then RLE_DICTIONARY data pages; version 1 data pages of at most
//! the properties' row count, each compressed with the column's codec (ZSTD or none), with
//! the offset index and the page encoding statistics. A reader cannot tell the difference
//! but for the time saved: the writer's tests read both back and compare rows, statistics,
//! page indexes and bloom filters.

mod booleans;
mod delta;
mod numbers;
mod stats;
mod strings;

use ::parquet::basic::{Compression, Encoding, PageType};
use ::parquet::column::page::{CompressedPage, Page, PageWriter};
use ::parquet::column::writer::ColumnCloseResult;
use ::parquet::errors::ParquetError;
use ::parquet::file::metadata::{
    ColumnChunkMetaData, ColumnChunkMetaDataBuilder, PageEncodingStats,
};
use ::parquet::file::page_index::offset_index::{OffsetIndexMetaData, PageLocation};
use ::parquet::file::properties::{WriterProperties, WriterVersion};
use ::parquet::file::writer::{SerializedPageWriter, TrackedWrite};
use ::parquet::schema::types::{ColumnDescPtr, ColumnPath};
use arrow_array::ArrayRef;
use arrow_schema::Field;
use bytes::Bytes;

/// Which of tracemill's chunks writes a column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Strings,
    Numbers,
    Delta,
    Booleans,
}

/// The chunk that writes `field` (leaf column `path`) under `props`, if any: a string
/// dictionary ([`strings::accepts`]) or an unsigned integer column ([`numbers::accepts`])
/// with dictionary encoding on, a delta column ([`delta::accepts`]), or a non-null
/// boolean column ([`booleans::accepts`], whatever the dictionary setting: arrow-rs has
/// no dictionary for BOOLEAN); version 1 data pages (the default), compressed with ZSTD or
/// not at all.
pub(crate) fn kind(field: &Field, path: &ColumnPath, props: &WriterProperties) -> Option<Kind> {
    let supported = props.writer_version() == WriterVersion::PARQUET_1_0
        // What these chunks do not write: left to arrow-rs.
        && !props.write_page_header_statistics(path)
        && props.content_defined_chunking().is_none()
        && !props.write_row_group_number_distinct_values()
        && matches!(
            props.compression(path),
            Compression::ZSTD(_) | Compression::UNCOMPRESSED
        );
    let dictionary = props.dictionary_enabled(path);
    if !supported {
        None
    } else if dictionary && strings::accepts(field, path, props) {
        Some(Kind::Strings)
    } else if dictionary && numbers::accepts(field) {
        Some(Kind::Numbers)
    } else if delta::accepts(field, path, props) {
        Some(Kind::Delta)
    } else if booleans::accepts(field, path, props) {
        Some(Kind::Booleans)
    } else {
        None
    }
}

/// Encodes `arrays` (one column of consecutive batches, of a field [`kind`] gave `kind`)
/// as one column chunk: its bytes, with offsets counted from their start, and what closing
/// a column writer would have said of them. `None` when arrow-rs must write the chunk
/// instead: a number column whose dictionary outgrows the properties' dictionary page
/// limit (arrow-rs then falls back to PLAIN pages part-way through the chunk).
pub(crate) fn encode(
    kind: Kind,
    descr: ColumnDescPtr,
    props: &WriterProperties,
    arrays: &[ArrayRef],
) -> Result<Option<(Bytes, ColumnCloseResult)>, ParquetError> {
    match kind {
        Kind::Strings => strings::encode(descr, props, arrays).map(Some),
        Kind::Numbers => numbers::encode(descr, props, arrays),
        Kind::Delta => delta::encode(descr, props, arrays).map(Some),
        Kind::Booleans => booleans::encode(descr, props, arrays).map(Some),
    }
}

/// One column chunk being written: the dictionary page, then the data pages, in memory.
struct Chunk {
    out: TrackedWrite<Vec<u8>>,
    compress: Compressor,
    dictionary_encoding: Encoding,
    data_encoding: Encoding,
    uncompressed: u64,
    dictionary_offset: Option<i64>,
    data_offset: Option<i64>,
    locations: Vec<PageLocation>,
    rows: u64,
}

impl Chunk {
    /// A chunk of dictionary-encoded pages.
    fn new(path: &ColumnPath, props: &WriterProperties) -> Result<Chunk, ParquetError> {
        Chunk::with_data_encoding(path, props, props.dictionary_data_page_encoding())
    }

    /// A chunk whose data pages are written in `data_encoding`.
    fn with_data_encoding(
        path: &ColumnPath,
        props: &WriterProperties,
        data_encoding: Encoding,
    ) -> Result<Chunk, ParquetError> {
        Ok(Chunk {
            out: TrackedWrite::new(Vec::new()),
            compress: Compressor::new(path, props.compression(path))?,
            dictionary_encoding: props.dictionary_page_encoding(),
            data_encoding,
            uncompressed: 0,
            dictionary_offset: None,
            data_offset: None,
            locations: Vec::new(),
            rows: 0,
        })
    }

    /// The dictionary page: `plain` holds `values` values, PLAIN-encoded.
    fn dictionary(&mut self, plain: &[u8], values: usize) -> Result<(), ParquetError> {
        let page = Page::DictionaryPage {
            buf: self.compress.page(plain)?,
            num_values: values as u32,
            encoding: self.dictionary_encoding,
            is_sorted: false,
        };
        let spec = SerializedPageWriter::new(&mut self.out)
            .write_page(CompressedPage::new(page, plain.len()))?;
        self.uncompressed += spec.uncompressed_size as u64;
        self.dictionary_offset = Some(spec.offset as i64);
        Ok(())
    }

    /// A version 1 data page of `rows` rows: `body` holds its levels (if any) and codes.
    fn data(&mut self, body: &[u8], rows: usize) -> Result<(), ParquetError> {
        let page = Page::DataPage {
            buf: self.compress.page(body)?,
            num_values: rows as u32,
            encoding: self.data_encoding,
            def_level_encoding: Encoding::RLE,
            rep_level_encoding: Encoding::RLE,
            statistics: None,
        };
        let spec = SerializedPageWriter::new(&mut self.out)
            .write_page(CompressedPage::new(page, body.len()))?;
        self.uncompressed += spec.uncompressed_size as u64;
        self.data_offset.get_or_insert(spec.offset as i64);
        self.locations.push(PageLocation {
            offset: spec.offset as i64,
            compressed_page_size: spec.bytes_written as i32,
            first_row_index: self.rows as i64,
        });
        self.rows += rows as u64;
        Ok(())
    }

    /// The chunk's bytes and its close result; `more` adds to the metadata (statistics,
    /// level histograms), and the caller fills in the bloom filter and column index.
    fn finish(
        self,
        descr: ColumnDescPtr,
        props: &WriterProperties,
        more: impl FnOnce(ColumnChunkMetaDataBuilder) -> ColumnChunkMetaDataBuilder,
    ) -> Result<(Bytes, ColumnCloseResult), ParquetError> {
        let path = descr.path().clone();
        let bytes = self.out.bytes_written() as u64;
        let pages = self.locations.len();
        let out = self.out.into_inner()?;
        let mut encodings = Vec::new();
        let mut encoding_stats = Vec::new();
        if self.dictionary_offset.is_some() {
            encodings.push(self.dictionary_encoding);
            encoding_stats.push(PageEncodingStats {
                page_type: PageType::DICTIONARY_PAGE,
                encoding: self.dictionary_encoding,
                count: 1,
            });
        }
        encodings.extend([Encoding::RLE, self.data_encoding]);
        if pages > 0 {
            encoding_stats.push(PageEncodingStats {
                page_type: PageType::DATA_PAGE,
                encoding: self.data_encoding,
                count: pages as i32,
            });
        }
        let builder = ColumnChunkMetaData::builder(descr)
            .set_compression(props.compression(&path))
            .set_encodings(encodings)
            .set_page_encoding_stats(encoding_stats)
            .set_total_compressed_size(bytes as i64)
            .set_total_uncompressed_size(self.uncompressed as i64)
            .set_num_values(self.rows as i64)
            // An empty chunk has no data page; point at where one would start. (The writer
            // leaves empty row groups to arrow-rs, so this is only for other callers.)
            .set_data_page_offset(self.data_offset.unwrap_or(bytes as i64))
            .set_dictionary_page_offset(self.dictionary_offset);
        let metadata = more(builder).build()?;
        let offset_index = (!props.offset_index_disabled()).then_some(OffsetIndexMetaData {
            page_locations: self.locations,
            unencoded_byte_array_data_bytes: None,
        });
        Ok((
            Bytes::from(out),
            ColumnCloseResult {
                bytes_written: bytes,
                rows_written: self.rows,
                metadata,
                bloom_filter: None,
                column_index: None,
                offset_index,
            },
        ))
    }
}

/// Rows per data page of column `path`: its row limit, and no more than fits its byte
/// limit at `width` bits per row (at least 8 rows: one bit-packed group).
fn page_rows(props: &WriterProperties, path: &ColumnPath, width: u8) -> usize {
    let bytes = props.column_data_page_size_limit(path);
    let by_bytes = bytes.saturating_mul(8) / usize::from(width.max(1));
    props
        .column_data_page_row_count_limit(path)
        .min(by_bytes)
        .max(8)
}

/// Bits per code for a dictionary of `n` values (0 for one value: every code is 0).
fn bit_width(n: usize) -> u8 {
    (usize::BITS - n.saturating_sub(1).leading_zeros()) as u8
}

/// Appends `codes` in Parquet's RLE/bit-packed hybrid encoding at `width` bits each,
/// without the length prefix (dictionary indices in a data page carry none): a run of
/// eight or more equal codes becomes an RLE run, everything else bit-packed groups of
/// eight (the last group padded with zeros; the page's value count says where it ends).
/// A bit-packed run holds at most 63 groups, so its header is one byte, as other writers
/// do.
fn rle_hybrid<T: Copy + Eq + Into<u64>>(codes: &[T], width: u8, out: &mut Vec<u8>) {
    let n = codes.len();
    if width == 0 {
        // One value: a single RLE run with a value of no bytes.
        if n > 0 {
            varint((n as u64) << 1, out);
        }
        return;
    }
    let mut literal_start = 0;
    let mut i = 0;
    // Only runs of eight or more can become RLE runs: the codes between them are passed
    // over by `long_run`, a compare and a count per code, without a branch on every run's
    // end (a page of codes is mostly short runs).
    while let Some(start) = long_run(codes, i) {
        let v = codes[start];
        let mut end = start + 8;
        while end < n && codes[end] == v {
            end += 1;
        }
        let run = end - start;
        // A literal stretch must end on a group of eight: borrow the run's first codes
        // to fill the last group, and take the run only if eight or more remain.
        let fill = (8 - (start - literal_start) % 8) % 8;
        if run >= fill + 8 {
            bit_packed(&codes[literal_start..start + fill], width, out);
            varint(((run - fill) as u64) << 1, out);
            let bytes = usize::from(width).div_ceil(8);
            out.extend_from_slice(&v.into().to_le_bytes()[..bytes]);
            literal_start = end;
        }
        i = end;
    }
    bit_packed(&codes[literal_start..], width, out);
}

/// Where the first run of eight or more equal codes from `from` on starts (`from` starts
/// a run: it differs from the code before it, if any).
#[inline]
fn long_run<T: Copy + Eq>(codes: &[T], from: usize) -> Option<usize> {
    let rest = codes.get(from..)?;
    // Codes equal to the one before them, in a row.
    let mut same = 0usize;
    for (k, w) in rest.windows(2).enumerate() {
        same = if w[1] == w[0] { same + 1 } else { 0 };
        if same == 7 {
            return Some(from + k - 6);
        }
    }
    None
}

/// [`rle_hybrid`] of definition levels (each 0 or 1, at width 1), the same bytes made
/// faster: runs are found eight levels at a time, and eight levels become a byte by one
/// multiplication rather than eight bits put one by one (the levels of `target`, whose
/// nulls alternate with values, are long literal stretches).
pub(super) fn rle_levels(levels: &[u8], out: &mut Vec<u8>) {
    debug_assert!(levels.iter().all(|&l| l <= 1));
    let n = levels.len();
    let run_from = |i: usize| {
        let v = levels[i];
        let splat = u64::from(v) * 0x0101_0101_0101_0101;
        let mut j = i + 1;
        while let Some(w) = levels.get(j..j + 8) {
            if u64::from_le_bytes(w.try_into().expect("eight bytes")) != splat {
                break;
            }
            j += 8;
        }
        while j < n && levels[j] == v {
            j += 1;
        }
        j - i
    };
    let mut literal_start = 0;
    let mut i = 0;
    while i < n {
        let run = run_from(i);
        // As in `rle_hybrid`: a literal stretch ends on a group of eight.
        let fill = (8 - (i - literal_start) % 8) % 8;
        if run >= fill + 8 {
            packed_levels(&levels[literal_start..i + fill], out);
            varint(((run - fill) as u64) << 1, out);
            out.push(levels[i]);
            literal_start = i + run;
        }
        i += run;
    }
    packed_levels(&levels[literal_start..], out);
}

/// [`bit_packed`] at width 1, for levels: the eight bytes of a group, each 0 or 1, times
/// 0x0102040810204080 put level k at bit 56 + k, with no carries between them.
fn packed_levels(levels: &[u8], out: &mut Vec<u8>) {
    const MAX_GROUPS: usize = 63;
    for run in levels.chunks(MAX_GROUPS * 8) {
        let groups = run.len().div_ceil(8);
        varint(((groups as u64) << 1) | 1, out);
        for g in run.chunks(8) {
            let mut w = [0u8; 8];
            w[..g.len()].copy_from_slice(g);
            let byte = u64::from_le_bytes(w).wrapping_mul(0x0102_0408_1020_4080) >> 56;
            out.push(byte as u8);
        }
    }
}

/// Bit-packed runs of `codes`, padded with zeros to whole groups of eight. Codes are
/// gathered in a 64-bit word written eight bytes at a time ([`Packer`]): byte by byte,
/// this was the writer's costliest loop after zstd.
fn bit_packed<T: Copy + Into<u64>>(codes: &[T], width: u8, out: &mut Vec<u8>) {
    const MAX_GROUPS: usize = 63;
    for run in codes.chunks(MAX_GROUPS * 8) {
        let groups = run.len().div_ceil(8);
        varint(((groups as u64) << 1) | 1, out);
        out.reserve(groups * usize::from(width) + 8);
        let mut p = Packer::new(u32::from(width));
        for &c in run {
            p.put(c.into(), out);
        }
        for _ in run.len()..groups * 8 {
            p.put(0, out);
        }
        p.finish(out);
    }
}

/// Values of `width` bits (at most 64) packed least significant bit first.
struct Packer {
    word: u64,
    bits: u32,
    width: u32,
}

impl Packer {
    fn new(width: u32) -> Packer {
        debug_assert!((1..=64).contains(&width));
        Packer {
            word: 0,
            bits: 0,
            width,
        }
    }

    /// Appends `v` (less than 2^width); a full word goes to `out`.
    #[inline]
    fn put(&mut self, v: u64, out: &mut Vec<u8>) {
        self.word |= v << self.bits;
        let end = self.bits + self.width;
        if end >= 64 {
            out.extend_from_slice(&self.word.to_le_bytes());
            // The bits of `v` that did not fit (none when the word started empty).
            self.word = if self.bits == 0 {
                0
            } else {
                v >> (64 - self.bits)
            };
            self.bits = end - 64;
        } else {
            self.bits = end;
        }
    }

    /// Appends what is left: whole bytes, as every run packs a multiple of eight values.
    fn finish(self, out: &mut Vec<u8>) {
        debug_assert_eq!(self.bits % 8, 0);
        out.extend_from_slice(&self.word.to_le_bytes()[..(self.bits / 8) as usize]);
    }
}

/// ULEB128, as run headers are written.
fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Page compression: ZSTD at the column's level (one context for the whole chunk), or
/// none.
struct Compressor(Option<zstd::bulk::Compressor<'static>>);

impl Compressor {
    /// The codecs [`kind`] accepts; any other is an error naming the column.
    fn new(path: &ColumnPath, codec: Compression) -> Result<Compressor, ParquetError> {
        match codec {
            Compression::UNCOMPRESSED => Ok(Compressor(None)),
            Compression::ZSTD(l) => zstd::bulk::Compressor::new(l.compression_level())
                .map(|c| Compressor(Some(c)))
                .map_err(|e| ParquetError::External(Box::new(e))),
            other => Err(ParquetError::General(format!(
                "{path}: {other} is not written by the dictionary chunk encoder"
            ))),
        }
    }

    fn page(&mut self, data: &[u8]) -> Result<Bytes, ParquetError> {
        match &mut self.0 {
            None => Ok(Bytes::copy_from_slice(data)),
            Some(c) => c
                .compress(data)
                .map(Bytes::from)
                .map_err(|e| ParquetError::External(Box::new(e))),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The hybrid encoding run by run, as it was written first: the reference that
    /// `rle_hybrid` (which passes over short runs without visiting each) must match.
    fn rle_hybrid_by_runs(codes: &[u32], width: u8, out: &mut Vec<u8>) {
        let n = codes.len();
        if width == 0 {
            if n > 0 {
                varint((n as u64) << 1, out);
            }
            return;
        }
        let mut literal_start = 0;
        let mut i = 0;
        while i < n {
            let v = codes[i];
            let mut run = 1;
            while i + run < n && codes[i + run] == v {
                run += 1;
            }
            let fill = (8 - (i - literal_start) % 8) % 8;
            if run >= fill + 8 {
                bit_packed(&codes[literal_start..i + fill], width, out);
                let start = i + fill;
                let len = run - fill;
                varint((len as u64) << 1, out);
                let bytes = usize::from(width).div_ceil(8);
                out.extend_from_slice(&u64::from(v).to_le_bytes()[..bytes]);
                i = start + len;
                literal_start = i;
            } else {
                i += run;
            }
        }
        bit_packed(&codes[literal_start..], width, out);
    }

    /// `rle_hybrid` writes what encoding run by run writes, for codes with runs of every
    /// length (around eight and the group seams especially) at several widths.
    #[test]
    fn rle_hybrid_is_the_run_by_run_encoding() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for case in 0..4000 {
            let width = [1u8, 2, 3, 7, 8, 13, 17][case % 7];
            let longest = [1, 3, 8, 9, 10, 17, 40, 600][case % 8];
            let n = (next() % 900) as usize;
            let mut codes = Vec::new();
            while codes.len() < n {
                let v = (next() % (1 << width.min(3))) as u32;
                let run = 1 + (next() % longest) as usize;
                codes.extend(std::iter::repeat_n(v, run.min(n - codes.len())));
            }
            let (mut a, mut b) = (Vec::new(), Vec::new());
            rle_hybrid_by_runs(&codes, width, &mut a);
            rle_hybrid(&codes, width, &mut b);
            assert_eq!(a, b, "case {case}, width {width}: {codes:?}");
        }
    }

    /// `rle_levels` writes the bytes `rle_hybrid` writes at width 1, for levels with runs
    /// of every length (none, short, around eight, long) and any length of input.
    #[test]
    fn rle_levels_is_rle_hybrid_at_width_one() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for case in 0..3000 {
            let mut levels = Vec::new();
            let n = (next() % 700) as usize;
            let longest = [1, 3, 9, 17, 70, 600][case % 6];
            while levels.len() < n {
                let v = (next() & 1) as u8;
                let run = 1 + (next() % longest) as usize;
                levels.extend(std::iter::repeat_n(v, run.min(n - levels.len())));
            }
            let (mut a, mut b) = (Vec::new(), Vec::new());
            rle_hybrid(&levels, 1, &mut a);
            rle_levels(&levels, &mut b);
            assert_eq!(a, b, "case {case}: {levels:?}");
        }
    }

    /// Decodes the hybrid encoding back (the reference reading of the format), for
    /// `n` values.
    pub(crate) fn read_hybrid(mut b: &[u8], width: u8, n: usize) -> Vec<u32> {
        let mut out = Vec::new();
        let read_varint = |b: &mut &[u8]| {
            let mut v = 0u64;
            let mut shift = 0;
            loop {
                let byte = b[0];
                *b = &b[1..];
                v |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    return v;
                }
                shift += 7;
            }
        };
        while out.len() < n {
            let h = read_varint(&mut b);
            if h & 1 == 1 {
                let count = (h >> 1) as usize * 8;
                let mut acc = 0u64;
                let mut bits = 0;
                for _ in 0..count {
                    while bits < u32::from(width) {
                        acc |= u64::from(b[0]) << bits;
                        b = &b[1..];
                        bits += 8;
                    }
                    out.push((acc & ((1u64 << width) - 1)) as u32);
                    acc >>= width;
                    bits -= u32::from(width);
                }
            } else {
                let bytes = usize::from(width).div_ceil(8);
                let mut v = [0u8; 4];
                v[..bytes].copy_from_slice(&b[..bytes]);
                b = &b[bytes..];
                out.extend(std::iter::repeat_n(
                    u32::from_le_bytes(v),
                    (h >> 1) as usize,
                ));
            }
        }
        assert!(b.is_empty(), "{} bytes left over", b.len());
        out.truncate(n);
        out
    }

    fn round_trip(codes: &[u32], width: u8) {
        let mut b = Vec::new();
        rle_hybrid(codes, width, &mut b);
        assert_eq!(read_hybrid(&b, width, codes.len()), codes, "width {width}");
    }

    #[test]
    fn hybrid_round_trips_runs_literals_and_their_seams() {
        round_trip(&[], 3);
        round_trip(&[0; 100], 0);
        round_trip(&[5; 7], 3);
        round_trip(&[5; 8], 3);
        // A literal stretch not a multiple of eight, then a run: the run lends codes.
        let mut v: Vec<u32> = (0..13).map(|i| i % 4).collect();
        v.extend([3; 9]);
        v.extend((0..5).map(|i| i % 2));
        round_trip(&v, 2);
        // Long literal stretches cross the 63-group limit of one run.
        let v: Vec<u32> = (0..5000u32)
            .map(|i| i.wrapping_mul(2654435761) % 200)
            .collect();
        round_trip(&v, 8);
        let v: Vec<u32> = (0..5000u32).map(|i| (i / 37) % 300).collect();
        round_trip(&v, 9);
        round_trip(&[1 << 20; 20], 21);
    }

    #[test]
    fn runs_become_rle_and_short_repeats_stay_packed() {
        let mut b = Vec::new();
        rle_hybrid(&[2u32; 1000], 2, &mut b);
        // One RLE run: header varint(2000) = 2 bytes, the value in 1 byte.
        assert_eq!(b, vec![0xd0, 0x0f, 2]);
        let mut b = Vec::new();
        rle_hybrid(&[1u32, 1, 1, 0, 0, 0, 1, 1], 1, &mut b);
        assert_eq!(b, vec![0b11, 0b1100_0111]);
    }

    #[test]
    fn the_packer_lays_values_out_bit_by_bit_at_every_width() {
        for width in 1..=64u32 {
            let mask = if width == 64 {
                u64::MAX
            } else {
                (1 << width) - 1
            };
            let values: Vec<u64> = (0..64u64)
                .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(i as u32) & mask)
                .collect();
            let mut out = Vec::new();
            let mut p = Packer::new(width);
            for &v in &values {
                p.put(v, &mut out);
            }
            p.finish(&mut out);
            let mut want = vec![0u8; 64 * width as usize / 8];
            for (i, &v) in values.iter().enumerate() {
                for b in 0..width as usize {
                    if v >> b & 1 == 1 {
                        let at = i * width as usize + b;
                        want[at / 8] |= 1 << (at % 8);
                    }
                }
            }
            assert_eq!(out, want, "width {width}");
        }
    }

    #[test]
    fn bit_width_of_dictionary_sizes() {
        assert_eq!(bit_width(0), 0);
        assert_eq!(bit_width(1), 0);
        assert_eq!(bit_width(2), 1);
        assert_eq!(bit_width(8), 3);
        assert_eq!(bit_width(9), 4);
        assert_eq!(bit_width(256), 8);
    }
}
