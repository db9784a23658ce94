//! Parquet column chunks of string columns whose rows already carry dictionary keys.
//!
//! `branches.kind`, `timing.kind` and ingest's constant `bundle` column are Arrow
//! dictionary arrays: each row is a small integer key into a handful of names. arrow-rs
//! writes such an array as if it were plain strings: it looks every row's string up again
//! in a hash table (its `Interner`) to find the Parquet dictionary index. That hash and
//! the `memcmp` behind it cost 17.5 ns per row and column (`encode-bench`), as much as
//! all the numeric columns of a row together, and ingest's `bundle` column paid it a
//! second time per row. Here the keys are remapped through a table as long as the
//! Arrow dictionary (a load per row), and the chunk is written as arrow-rs would write
//! it: a PLAIN dictionary page, then RLE_DICTIONARY data pages of at most the
//! properties' row count, each compressed with the column's codec, with the offset
//! index. Statistics and bloom filters are not written, so only columns configured
//! without them take this path ([`applies`]).

use std::collections::HashMap;

use ::parquet::basic::{Compression, Encoding};
use ::parquet::column::page::{CompressedPage, Page, PageWriter};
use ::parquet::column::writer::ColumnCloseResult;
use ::parquet::errors::ParquetError;
use ::parquet::file::metadata::ColumnChunkMetaData;
use ::parquet::file::page_index::offset_index::{OffsetIndexMetaData, PageLocation};
use ::parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};
use ::parquet::file::writer::{SerializedPageWriter, TrackedWrite};
use ::parquet::schema::types::{ColumnDescPtr, ColumnPath};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int8Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::{DataType, Field};
use bytes::Bytes;

/// Whether `field` (leaf column `path`) is written by [`encode`] under `props`: a
/// non-null dictionary of strings with `Int8` or `Int32` keys, dictionary encoding on,
/// no statistics and no bloom filter, version 1 data pages (the default), compressed
/// with ZSTD or not at all.
pub(crate) fn applies(field: &Field, path: &ColumnPath, props: &WriterProperties) -> bool {
    let keyed_strings = match field.data_type() {
        DataType::Dictionary(k, v) => {
            matches!(**k, DataType::Int8 | DataType::Int32) && **v == DataType::Utf8
        }
        _ => false,
    };
    keyed_strings
        && !field.is_nullable()
        && props.dictionary_enabled(path)
        && props.statistics_enabled(path) == EnabledStatistics::None
        && props.bloom_filter_properties(path).is_none()
        && props.writer_version() == WriterVersion::PARQUET_1_0
        && matches!(
            props.compression(path),
            Compression::ZSTD(_) | Compression::UNCOMPRESSED
        )
}

/// Encodes `arrays` (one column of consecutive batches, each a dictionary array that
/// [`applies`] accepted) as one column chunk: its bytes, with offsets counted from their
/// start, and what closing a column writer would have said of them.
pub(crate) fn encode(
    descr: ColumnDescPtr,
    props: &WriterProperties,
    arrays: &[ArrayRef],
) -> Result<(Bytes, ColumnCloseResult), ParquetError> {
    let path = descr.path().clone();
    let dict = Dictionary::of(arrays)?;
    let rows = dict.codes.len();
    let width = bit_width(dict.values.len());
    let mut compress = Compressor::new(&path, props.compression(&path))?;

    let mut out = TrackedWrite::new(Vec::new());
    let mut pages = SerializedPageWriter::new(&mut out);
    let mut uncompressed = 0u64;

    // The dictionary page: PLAIN byte arrays, a little-endian u32 length before each.
    let mut plain = Vec::new();
    for v in &dict.values {
        plain.extend_from_slice(&(v.len() as u32).to_le_bytes());
        plain.extend_from_slice(v);
    }
    let spec = pages.write_page(CompressedPage::new(
        Page::DictionaryPage {
            buf: compress.page(&plain)?,
            num_values: dict.values.len() as u32,
            encoding: props.dictionary_page_encoding(),
            is_sorted: false,
        },
        plain.len(),
    ))?;
    uncompressed += spec.uncompressed_size as u64;
    let dictionary_offset = spec.offset as i64;

    // Data pages: the bit width, then the codes in the RLE/bit-packed hybrid.
    let page_rows = page_rows(props, width);
    let mut locations = Vec::new();
    let mut data_offset = None;
    let mut first_row = 0usize;
    let mut buf = Vec::new();
    for codes in dict.codes.chunks(page_rows) {
        buf.clear();
        buf.push(width);
        rle_hybrid(codes, width, &mut buf);
        let n = codes.len() as u32;
        // Version 1 data pages ([`applies`]); a non-null flat column has no levels.
        let page = Page::DataPage {
            buf: compress.page(&buf)?,
            num_values: n,
            encoding: props.dictionary_data_page_encoding(),
            def_level_encoding: Encoding::RLE,
            rep_level_encoding: Encoding::RLE,
            statistics: None,
        };
        let spec = pages.write_page(CompressedPage::new(page, buf.len()))?;
        uncompressed += spec.uncompressed_size as u64;
        data_offset.get_or_insert(spec.offset as i64);
        locations.push(PageLocation {
            offset: spec.offset as i64,
            compressed_page_size: spec.bytes_written as i32,
            first_row_index: first_row as i64,
        });
        first_row += codes.len();
    }
    let bytes = out.bytes_written() as u64;
    let out = out.into_inner()?;

    let encodings = vec![
        props.dictionary_page_encoding(),
        Encoding::RLE,
        props.dictionary_data_page_encoding(),
    ];
    let metadata = ColumnChunkMetaData::builder(descr)
        .set_compression(props.compression(&path))
        .set_encodings(encodings)
        .set_total_compressed_size(bytes as i64)
        .set_total_uncompressed_size(uncompressed as i64)
        .set_num_values(rows as i64)
        // An empty chunk has no data page; point at where one would start. (The writer
        // leaves empty row groups to arrow-rs, so this is only for other callers.)
        .set_data_page_offset(data_offset.unwrap_or(bytes as i64))
        .set_dictionary_page_offset(Some(dictionary_offset))
        .build()?;
    let offset_index = (!props.offset_index_disabled()).then_some(OffsetIndexMetaData {
        page_locations: locations,
        unencoded_byte_array_data_bytes: None,
    });
    Ok((
        Bytes::from(out),
        ColumnCloseResult {
            bytes_written: bytes,
            rows_written: rows as u64,
            metadata,
            bloom_filter: None,
            column_index: None,
            offset_index,
        },
    ))
}

/// Rows per data page: the properties' row limit, and no more than fits their byte
/// limit at `width` bits per row.
fn page_rows(props: &WriterProperties, width: u8) -> usize {
    let by_bytes = props.data_page_size_limit().saturating_mul(8) / usize::from(width.max(1));
    props.data_page_row_count_limit().min(by_bytes).max(8)
}

/// The Parquet dictionary of a column: the distinct strings in order of first use, and
/// every row's index into them.
struct Dictionary {
    values: Vec<Vec<u8>>,
    codes: Vec<u32>,
}

/// Marks an Arrow key whose string has no Parquet index yet.
const UNSEEN: u32 = u32::MAX;

impl Dictionary {
    fn of(arrays: &[ArrayRef]) -> Result<Dictionary, ParquetError> {
        let mut d = Dictionary {
            values: Vec::new(),
            codes: Vec::with_capacity(arrays.iter().map(|a| a.len()).sum()),
        };
        let mut index: HashMap<Vec<u8>, u32> = HashMap::new();
        for a in arrays {
            if a.null_count() > 0 {
                return Err(ParquetError::General(
                    "nulls in a column declared non-null".into(),
                ));
            }
            match a.data_type() {
                DataType::Dictionary(k, _) if **k == DataType::Int8 => {
                    let a = a.as_dictionary::<Int8Type>();
                    let keys = a.keys().values().iter().map(|&k| k as i64);
                    d.add(keys, a.values(), &mut index)?;
                }
                DataType::Dictionary(k, _) if **k == DataType::Int32 => {
                    let a = a.as_dictionary::<Int32Type>();
                    let keys = a.keys().values().iter().map(|&k| k as i64);
                    d.add(keys, a.values(), &mut index)?;
                }
                other => {
                    return Err(ParquetError::General(format!(
                        "{other} is not a dictionary of strings with Int8 or Int32 keys"
                    )))
                }
            }
        }
        Ok(d)
    }

    /// Appends the codes of one array: `keys` into its Arrow dictionary `values`.
    fn add(
        &mut self,
        keys: impl Iterator<Item = i64>,
        values: &ArrayRef,
        index: &mut HashMap<Vec<u8>, u32>,
    ) -> Result<(), ParquetError> {
        let values = values.as_string_opt::<i32>().ok_or_else(|| {
            ParquetError::General("dictionary values are not Utf8 strings".into())
        })?;
        // The Parquet index of each Arrow key, found the first time the key is used.
        let mut remap = vec![UNSEEN; values.len()];
        for k in keys {
            let slot = usize::try_from(k)
                .ok()
                .and_then(|k| remap.get_mut(k))
                .ok_or_else(|| {
                    ParquetError::General(format!(
                        "dictionary key {k} out of range of {} values",
                        values.len()
                    ))
                })?;
            if *slot == UNSEEN {
                let s = values.value(k as usize).as_bytes();
                let next = self.values.len() as u32;
                *slot = *index.entry(s.to_vec()).or_insert_with(|| {
                    self.values.push(s.to_vec());
                    next
                });
            }
            self.codes.push(*slot);
        }
        Ok(())
    }
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
fn rle_hybrid(codes: &[u32], width: u8, out: &mut Vec<u8>) {
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
    while i < n {
        let v = codes[i];
        let mut run = 1;
        while i + run < n && codes[i + run] == v {
            run += 1;
        }
        // A literal stretch must end on a group of eight: borrow the run's first codes
        // to fill the last group, and take the run only if eight or more remain.
        let fill = (8 - (i - literal_start) % 8) % 8;
        if run >= fill + 8 {
            bit_packed(&codes[literal_start..i + fill], width, out);
            let start = i + fill;
            let len = run - fill;
            varint((len as u64) << 1, out);
            let bytes = usize::from(width).div_ceil(8);
            out.extend_from_slice(&v.to_le_bytes()[..bytes]);
            i = start + len;
            literal_start = i;
        } else {
            i += run;
        }
    }
    bit_packed(&codes[literal_start..], width, out);
}

/// Bit-packed runs of `codes`, padded with zeros to whole groups of eight.
fn bit_packed(codes: &[u32], width: u8, out: &mut Vec<u8>) {
    const MAX_GROUPS: usize = 63;
    for run in codes.chunks(MAX_GROUPS * 8) {
        let groups = run.len().div_ceil(8);
        varint(((groups as u64) << 1) | 1, out);
        let mut acc: u64 = 0;
        let mut bits = 0u32;
        for k in 0..groups * 8 {
            let c = run.get(k).copied().unwrap_or(0) as u64;
            acc |= c << bits;
            bits += u32::from(width);
            while bits >= 8 {
                out.push(acc as u8);
                acc >>= 8;
                bits -= 8;
            }
        }
        // groups * 8 * width bits is a whole number of bytes.
        debug_assert_eq!(bits, 0);
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
    /// The codecs [`applies`] accepts; any other is an error naming the column.
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

/// Shared by the tests of this module and of the writer.
#[cfg(test)]
pub(crate) fn dictionary_array(keys: &[i8], names: &[&str]) -> ArrayRef {
    use arrow_array::{DictionaryArray, Int8Array, StringArray};
    std::sync::Arc::new(
        DictionaryArray::<Int8Type>::try_new(
            Int8Array::from(keys.to_vec()),
            std::sync::Arc::new(StringArray::from(names.to_vec())),
        )
        .expect("valid keys"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes the hybrid encoding back (the reference reading of the format), for
    /// `n` values.
    fn decode(mut b: &[u8], width: u8, n: usize) -> Vec<u32> {
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
        assert_eq!(decode(&b, width, codes.len()), codes, "width {width}");
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
        rle_hybrid(&[2; 1000], 2, &mut b);
        // One RLE run: header varint(2000) = 2 bytes, the value in 1 byte.
        assert_eq!(b, vec![0xd0, 0x0f, 2]);
        let mut b = Vec::new();
        rle_hybrid(&[1, 1, 1, 0, 0, 0, 1, 1], 1, &mut b);
        assert_eq!(b, vec![0b11, 0b1100_0111]);
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

    #[test]
    fn codes_follow_first_use_across_batches_with_different_dictionaries() {
        let a = dictionary_array(&[2, 2, 0], &["x", "y", "z"]);
        let b = dictionary_array(&[0, 1, 1], &["y", "z"]);
        let d = Dictionary::of(&[a, b]).unwrap();
        let values: Vec<&[u8]> = d.values.iter().map(|v| v.as_slice()).collect();
        assert_eq!(values, [b"z".as_slice(), b"x", b"y"]);
        assert_eq!(d.codes, [0, 0, 1, 2, 0, 0]);
    }
}
