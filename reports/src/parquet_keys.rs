//! Parquet column chunks read as dictionary keys, not as values.
//!
//! The flame graph names the function of every row's `ip` (and of a call's or jump's
//! `target`). Read through arrow-rs, each row's dictionary key is looked up in the column
//! chunk's dictionary to give a `u64` (and `target`'s nulls padded), and then the walk
//! looks that address up again in a cache of functions: on the 1 GiB synthetic trace the
//! first was nearly a fifth of the report's CPU time and the second, in a 1 MiB table,
//! missed the processor's caches on most rows. arrow-rs returns dictionaries only for string columns (apache/arrow-rs#8250), so
//! this module decodes the pages itself: each row is a key into the chunk's values, and
//! the walk names each distinct value once per row group.
//!
//! What is read: flat columns (no repetition), required or optional, of INT32, INT64 or
//! BYTE_ARRAY, in version 1 or 2 data pages whose values are dictionary keys
//! (`RLE_DICTIONARY`, `PLAIN_DICTIONARY`), `PLAIN` values (a writer falls back to these
//! when the dictionary grows too big) or `DELTA_BINARY_PACKED` integers (the events'
//! `seq`); values that are not keys are appended to the values, one key each. Anything
//! else is an error, and the caller reads that row group through arrow-rs instead, which
//! also gives the error of a damaged file its usual words.

use std::fs::File;
use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::Arc;

use anyhow::{anyhow, bail, ensure, Result};
use parquet::basic::{Encoding, Type as PhysicalType};
use parquet::column::page::{Page, PageReader};
use parquet::file::metadata::{ColumnChunkMetaData, RowGroupMetaData};
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::serialized_reader::SerializedPageReader;

/// The key of a null.
pub const NULL_KEY: u32 = u32::MAX;

/// The most rows a column chunk read here may have (its keys are held whole); larger row
/// groups are read through arrow-rs, in batches. The decode's hold about 524,288 rows (up
/// to 769,594 on the 1 GiB synthetic trace); arrow-rs writes up to 1,048,576 by default,
/// DuckDB 122,880.
pub const MAX_ROWS: usize = 1 << 21;

/// One column chunk: per row a key into `values`, or [`NULL_KEY`].
#[derive(Debug, Default)]
pub struct Keyed<T> {
    pub values: Vec<T>,
    pub keys: Vec<u32>,
}

/// A Parquet physical type read from PLAIN encoding.
pub trait Plain: Sized {
    const TYPE: PhysicalType;
    /// Append `n` values from the start of `buf`.
    fn read(buf: &[u8], n: usize, out: &mut Vec<Self>) -> Result<()>;
    /// Append `n` values in `DELTA_BINARY_PACKED` from the start of `buf` (integers only).
    fn read_delta(buf: &[u8], n: usize, out: &mut Vec<Self>) -> Result<()> {
        let _ = (buf, n, out);
        bail!("{} values in DELTA_BINARY_PACKED", Self::TYPE)
    }
}

fn plain_fixed<const W: usize, T>(
    buf: &[u8],
    n: usize,
    out: &mut Vec<T>,
    from: impl Fn([u8; W]) -> T,
) -> Result<()> {
    let bytes = n
        .checked_mul(W)
        .filter(|&b| b <= buf.len())
        .ok_or_else(|| anyhow!("{n} PLAIN values of {W} bytes past the page's end"))?;
    out.extend(
        buf[..bytes]
            .chunks_exact(W)
            .map(|c| from(c.try_into().expect("W bytes"))),
    );
    Ok(())
}

/// INT64, as the `u64` bits the tables store.
impl Plain for u64 {
    const TYPE: PhysicalType = PhysicalType::INT64;
    fn read(buf: &[u8], n: usize, out: &mut Vec<Self>) -> Result<()> {
        plain_fixed(buf, n, out, u64::from_le_bytes)
    }
    fn read_delta(buf: &[u8], n: usize, out: &mut Vec<Self>) -> Result<()> {
        delta_binary_packed(buf, n, 64, |v| out.push(v))
    }
}

/// INT32, as the `u32` bits the tables store.
impl Plain for u32 {
    const TYPE: PhysicalType = PhysicalType::INT32;
    fn read(buf: &[u8], n: usize, out: &mut Vec<Self>) -> Result<()> {
        plain_fixed(buf, n, out, u32::from_le_bytes)
    }
    fn read_delta(buf: &[u8], n: usize, out: &mut Vec<Self>) -> Result<()> {
        // INT32 deltas wrap at 32 bits: the low half of the 64-bit sums is the value.
        delta_binary_packed(buf, n, 32, |v| out.push(v as u32))
    }
}

/// BYTE_ARRAY: a 4-byte length, then the bytes, per value.
impl Plain for Vec<u8> {
    const TYPE: PhysicalType = PhysicalType::BYTE_ARRAY;
    fn read(mut buf: &[u8], n: usize, out: &mut Vec<Self>) -> Result<()> {
        for _ in 0..n {
            let (value, rest) = length_prefixed(buf, "a PLAIN byte array")?;
            out.push(value.to_vec());
            buf = rest;
        }
        Ok(())
    }
}

/// Give `n` values in Parquet's `DELTA_BINARY_PACKED` encoding (of INT32 or INT64, `bits`
/// wide): a header (values per block, miniblocks per block, value count, first value
/// zigzag-encoded), then blocks, each a minimum delta (zigzag), a bit width per miniblock
/// and the miniblocks, whose packed values are added to the minimum delta and the value
/// before. Sums wrap, as the encoding's do.
///
/// The events' `seq` column comes so (the decode's writer picks it for sorted integers);
/// arrow-rs reads it too, but the events read through arrow-rs took 1.45 s on the 1 GiB
/// synthetic trace's tables, a fifth of the time of a reader of `branches`.
fn delta_binary_packed(
    mut buf: &[u8],
    n: usize,
    bits: u32,
    mut out: impl FnMut(u64),
) -> Result<()> {
    let next = |buf: &mut &[u8]| -> Result<u64> {
        let (v, used) = uleb128(buf)?;
        *buf = &buf[used..];
        Ok(v)
    };
    let zigzag = |v: u64| (v >> 1) ^ (v & 1).wrapping_neg();
    let block = usize::try_from(next(&mut buf)?)?;
    let miniblocks = usize::try_from(next(&mut buf)?)?;
    let total = usize::try_from(next(&mut buf)?)?;
    let mut value = zigzag(next(&mut buf)?);
    ensure!(
        block > 0 && block % 128 == 0 && miniblocks > 0 && block % miniblocks == 0,
        "a delta block of {block} values in {miniblocks} miniblocks"
    );
    let per = block / miniblocks;
    ensure!(per % 32 == 0, "delta miniblocks of {per} values");
    ensure!(n <= total, "{n} delta values asked of {total}");
    if n == 0 {
        return Ok(());
    }
    out(value);
    let mut left = n - 1;
    // Sizes from the page are not trusted: a damaged header can say 2^60 values a block.
    let mut deltas = Vec::with_capacity(per.min(n));
    while left > 0 {
        let min = zigzag(next(&mut buf)?);
        let widths = buf
            .get(..miniblocks)
            .ok_or_else(|| anyhow!("delta bit widths past the page's end"))?;
        buf = &buf[miniblocks..];
        for &width in widths {
            if left == 0 {
                // The block's unused miniblocks have widths but no bytes.
                break;
            }
            ensure!(u32::from(width) <= bits, "delta miniblock of {width} bits");
            let packed = per
                .checked_mul(width as usize)
                .and_then(|bits| buf.get(..bits / 8))
                .ok_or_else(|| anyhow!("a delta miniblock past the page's end"))?;
            buf = &buf[packed.len()..];
            let count = per.min(left);
            deltas.clear();
            unpack64(packed, width, count, &mut deltas);
            for &d in &deltas {
                value = value.wrapping_add(min).wrapping_add(d);
                out(if bits == 32 {
                    value & 0xffff_ffff
                } else {
                    value
                });
            }
            left -= count;
        }
    }
    Ok(())
}

/// The first `count` values of `width` bits (up to 64) packed in `packed` (which holds
/// them all), low bits first.
fn unpack64(packed: &[u8], width: u8, count: usize, out: &mut Vec<u64>) {
    let w = width as usize;
    if w == 0 {
        out.resize(out.len() + count, 0);
        return;
    }
    out.extend((0..count).map(|i| {
        let (bit, mut v, mut got) = (i * w, 0u64, 0);
        // Byte by byte: a value of up to 64 bits spans up to 9 bytes.
        while got < w {
            let at = bit + got;
            let byte = u64::from(packed[at / 8]) >> (at % 8);
            v |= byte << got;
            got += 8 - at % 8;
        }
        if w < 64 {
            v & ((1u64 << w) - 1)
        } else {
            v
        }
    }));
}

/// The bytes after a 4-byte little-endian length, and the rest.
fn length_prefixed<'b>(buf: &'b [u8], what: &str) -> Result<(&'b [u8], &'b [u8])> {
    let len = buf
        .first_chunk::<4>()
        .map(|l| u32::from_le_bytes(*l) as usize)
        .filter(|&l| l <= buf.len() - 4)
        .ok_or_else(|| anyhow!("{what} past the page's end"))?;
    Ok(buf[4..].split_at(len))
}

/// A range of a file's bytes, mapped, read at the file's offsets: the walk maps the
/// column chunks of one row group at a time. Reading pages through a `File` copied each
/// (the kernel's copy was a seventh of a reader's time); a map of the whole table would
/// count every page read in the process's resident memory until the end.
pub struct MappedRange {
    start: u64,
    bytes: bytes::Bytes,
}

impl MappedRange {
    /// With the decode's map of its inputs, the `unsafe` operations of tracemill.
    #[allow(unsafe_code)]
    pub fn map(file: &File, range: Range<u64>) -> Result<Self> {
        let len = usize::try_from(range.end.saturating_sub(range.start))?;
        ensure!(len > 0, "nothing to map");
        // Pages past the file's end would be mapped too, and reading them is a fault
        // (SIGBUS), not an error: a damaged footer can point there.
        let size = file.metadata()?.len();
        ensure!(
            range.end <= size,
            "bytes to {} of a file of {size}",
            range.end
        );
        // SAFETY: the map is read-only and private to this process. If another process
        // truncates or rewrites the table while a report reads it, reads may see the new
        // bytes or fault (SIGBUS); tables are written once, to a temporary name, then
        // renamed.
        let m = unsafe {
            memmap2::MmapOptions::new()
                .offset(range.start)
                .len(len)
                .map(file)
        }?;
        Ok(MappedRange {
            start: range.start,
            bytes: bytes::Bytes::from_owner(m),
        })
    }

    /// `len` bytes (all when `None`) from file offset `at`.
    fn slice(&self, at: u64, len: Option<usize>) -> parquet::errors::Result<bytes::Bytes> {
        let from = at
            .checked_sub(self.start)
            .map(|f| f as usize)
            .filter(|&f| f <= self.bytes.len());
        let to = from.and_then(|f| len.map_or(Some(self.bytes.len()), |l| f.checked_add(l)));
        match (from, to) {
            (Some(f), Some(t)) if t <= self.bytes.len() => Ok(self.bytes.slice(f..t)),
            _ => Err(parquet::errors::ParquetError::EOF(format!(
                "{len:?} bytes at {at}: outside the mapped {}..{}",
                self.start,
                self.start + self.bytes.len() as u64
            ))),
        }
    }
}

impl Length for MappedRange {
    fn len(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }
}

impl ChunkReader for MappedRange {
    type T = bytes::buf::Reader<bytes::Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf as _;
        Ok(self.slice(start, None)?.reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        self.slice(start, Some(length))
    }
}

/// Read one column chunk of a row group of `rows` rows from `file` (a `File`, or a
/// [`MappedRange`] holding the chunk).
pub fn read_chunk<T: Plain, R: ChunkReader + 'static>(
    file: &Arc<R>,
    chunk: &ColumnChunkMetaData,
    rows: usize,
) -> Result<Keyed<T>> {
    let mut out = Keyed {
        values: Vec::new(),
        keys: Vec::new(),
    };
    read_chunk_into(file, chunk, rows, &mut out, &mut Scratch::default())?;
    Ok(out)
}

/// The column chunks named `names` of a row group (found by their paths), and one map of
/// them (and of any chunks between them) to read them from.
pub fn map_chunks<'g>(
    file: &File,
    group: &'g RowGroupMetaData,
    names: &[&str],
) -> Result<(Arc<MappedRange>, Vec<&'g ColumnChunkMetaData>)> {
    let chunks = names
        .iter()
        .map(|&name| {
            group
                .columns()
                .iter()
                .find(|c| c.column_descr().path().string() == name)
                .ok_or_else(|| anyhow!("no column {name}"))
        })
        .collect::<Result<Vec<_>>>()?;
    let (mut start, mut end) = (u64::MAX, 0);
    for c in &chunks {
        let (at, len) = c.byte_range();
        (start, end) = (start.min(at), end.max(at.saturating_add(len)));
    }
    Ok((Arc::new(MappedRange::map(file, start..end)?), chunks))
}

/// [`read_chunk`] into `out`, whose buffers are cleared and reused (as are `scratch`'s): a
/// reader of row group after row group then makes no new memory for the kernel to map
/// and clear.
pub fn read_chunk_into<T: Plain, R: ChunkReader + 'static>(
    file: &Arc<R>,
    chunk: &ColumnChunkMetaData,
    rows: usize,
    out: &mut Keyed<T>,
    scratch: &mut Scratch,
) -> Result<()> {
    let descr = chunk.column_descr();
    ensure!(
        descr.physical_type() == T::TYPE,
        "{}: {} values, not {}",
        descr.name(),
        descr.physical_type(),
        T::TYPE
    );
    ensure!(
        descr.max_rep_level() == 0 && descr.max_def_level() <= 1,
        "{}: not a flat column",
        descr.name()
    );
    let nullable = descr.max_def_level() == 1;
    // A chunk is read whole: a damaged footer's row count must not reserve terabytes.
    ensure!(rows <= MAX_ROWS, "{rows} rows in a column chunk");
    let mut pages = SerializedPageReader::new(file.clone(), chunk, rows, None)?;
    out.values.clear();
    out.keys.clear();
    out.keys.reserve(rows);
    // Keys below this are the dictionary's (PLAIN values go after it).
    let mut dictionary: Option<usize> = None;
    while let Some(page) = pages.get_next_page()? {
        match page {
            Page::DictionaryPage {
                buf,
                num_values,
                encoding,
                ..
            } => {
                ensure!(
                    matches!(encoding, Encoding::PLAIN | Encoding::PLAIN_DICTIONARY),
                    "dictionary page in {encoding}"
                );
                ensure!(
                    dictionary.is_none() && out.keys.is_empty(),
                    "a dictionary page after the first page"
                );
                T::read(&buf, num_values as usize, &mut out.values)?;
                dictionary = Some(out.values.len());
            }
            Page::DataPage {
                buf,
                num_values,
                encoding,
                def_level_encoding,
                ..
            } => {
                let n = page_rows(num_values, rows - out.keys.len())?;
                let (mut levels, mut values) = (None, &buf[..]);
                if nullable {
                    ensure!(
                        def_level_encoding == Encoding::RLE,
                        "definition levels in {def_level_encoding}"
                    );
                    let (def, rest) = length_prefixed(&buf, "definition levels")?;
                    (levels, values) = (Some(def), rest);
                }
                scratch.page(levels, values, encoding, n, dictionary, out)?;
            }
            Page::DataPageV2 {
                buf,
                num_values,
                encoding,
                def_levels_byte_len,
                rep_levels_byte_len,
                ..
            } => {
                let n = page_rows(num_values, rows - out.keys.len())?;
                let (rep, def) = (rep_levels_byte_len as usize, def_levels_byte_len as usize);
                ensure!(rep == 0, "repetition levels in a flat column");
                ensure!(def <= buf.len(), "definition levels past the page's end");
                let levels = nullable.then(|| &buf[..def]);
                scratch.page(levels, &buf[def..], encoding, n, dictionary, out)?;
            }
        }
    }
    ensure!(
        out.keys.len() == rows,
        "{} values for {rows} rows",
        out.keys.len()
    );
    Ok(())
}

/// A data page's rows, checked before anything is decoded: a damaged header could
/// otherwise have billions of keys written out of a few bytes of runs.
fn page_rows(num_values: u32, left: usize) -> Result<usize> {
    let n = num_values as usize;
    ensure!(
        n <= left,
        "a page of {n} values, {left} rows left in the row group"
    );
    Ok(n)
}

/// Buffers reused from page to page, and from chunk to chunk.
#[derive(Debug, Default)]
pub struct Scratch {
    /// The page's keys of its values (not of its nulls).
    keys: Vec<u32>,
}

impl Scratch {
    /// Append one data page's `n` rows: `levels` are its definition levels (a nullable
    /// column's), `values` the bytes after them.
    fn page<T: Plain>(
        &mut self,
        levels: Option<&[u8]>,
        values: &[u8],
        encoding: Encoding,
        n: usize,
        dictionary: Option<usize>,
        out: &mut Keyed<T>,
    ) -> Result<()> {
        let present = match levels {
            Some(levels) => {
                let mut present = 0;
                let mut runs = LevelRuns {
                    buf: levels,
                    left: n,
                };
                while let Some(run) = runs.next()? {
                    present += match run {
                        LevelRun::Same { count, set } => count * set as usize,
                        LevelRun::Packed { bits, count } => {
                            let (whole, last) = (count / 8, count % 8);
                            let ones: u32 = bits[..whole].iter().map(|b| b.count_ones()).sum();
                            let tail = bits.get(whole).map_or(0, |&b| b & ((1 << last) - 1));
                            ones as usize + tail.count_ones() as usize
                        }
                    };
                }
                present
            }
            None => n,
        };
        // Without nulls the keys go straight to the chunk's; with them, through `keys`.
        let nulls = present < n;
        let keys = if nulls {
            self.keys.clear();
            &mut self.keys
        } else {
            &mut out.keys
        };
        let start = keys.len();
        match encoding {
            Encoding::RLE_DICTIONARY | Encoding::PLAIN_DICTIONARY => {
                let len =
                    dictionary.ok_or_else(|| anyhow!("dictionary keys without a dictionary"))?;
                let (&width, packed) = values
                    .split_first()
                    .ok_or_else(|| anyhow!("a page of keys without their bit width"))?;
                decode_hybrid(packed, width, present, keys)?;
                // One check for the page, so the walk indexes without a doubt.
                let max = max_key(&keys[start..]);
                ensure!(
                    (max as usize) < len || present == 0,
                    "key {max} past a dictionary of {len}"
                );
            }
            Encoding::PLAIN | Encoding::DELTA_BINARY_PACKED => {
                let base = out.values.len();
                if encoding == Encoding::PLAIN {
                    T::read(values, present, &mut out.values)?;
                } else {
                    T::read_delta(values, present, &mut out.values)?;
                }
                ensure!(out.values.len() < NULL_KEY as usize, "too many values");
                keys.extend(base as u32..out.values.len() as u32);
            }
            e => bail!("values in {e}"),
        }
        if let (true, Some(levels)) = (nulls, levels) {
            spread_nulls(levels, n, &mut self.keys, &mut out.keys)?;
        }
        Ok(())
    }
}

/// A run of a nullable column's definition levels (1 bit each: 0 a null, 1 a value), as
/// Parquet's hybrid encoding has them: they are read from the runs, never one level a
/// `u32` (those were a pass of their own, and a stream to read back as large as the keys).
enum LevelRun<'a> {
    /// `count` nulls, or `count` values.
    Same { count: usize, set: bool },
    /// `count` levels, one bit each from the low bits up of `bits`.
    Packed { bits: &'a [u8], count: usize },
}

/// The runs of `left` levels encoded in `buf`.
struct LevelRuns<'a> {
    buf: &'a [u8],
    left: usize,
}

impl<'a> LevelRuns<'a> {
    fn next(&mut self) -> Result<Option<LevelRun<'a>>> {
        if self.left == 0 {
            return Ok(None);
        }
        let (header, used) = uleb128(self.buf)?;
        let buf = &self.buf[used..];
        let run = if header & 1 == 1 {
            let groups = usize::try_from(header >> 1)?;
            ensure!(groups <= buf.len(), "a bit-packed run past the page's end");
            let count = groups.saturating_mul(8).min(self.left);
            self.buf = &buf[groups..];
            LevelRun::Packed {
                bits: &buf[..count.div_ceil(8)],
                count,
            }
        } else {
            let count = usize::try_from(header >> 1)?.min(self.left);
            ensure!(count > 0, "an empty run");
            let (&v, rest) = buf
                .split_first()
                .ok_or_else(|| anyhow!("a run's value past the page's end"))?;
            ensure!(v <= 1, "a definition level of {v}");
            self.buf = rest;
            LevelRun::Same { count, set: v == 1 }
        };
        self.left -= match run {
            LevelRun::Same { count, .. } | LevelRun::Packed { count, .. } => count,
        };
        Ok(Some(run))
    }
}

/// Append to `out` one key per level of the `n` in `levels`: the next of `keys` for a
/// value, [`NULL_KEY`] for a null. `keys` has one per value (`Scratch::page` counted them
/// from the same levels).
///
/// Without a branch per row (nulls come at random: syscalls out of user-only tracing), a
/// packed run eight levels at a time, each row finding its key by its rank among the
/// eight: a running index made each row wait for the one before.
fn spread_nulls(levels: &[u8], n: usize, keys: &mut Vec<u32>, out: &mut Vec<u32>) -> Result<()> {
    /// Per mask of eight levels, how many of the levels before each are set.
    const RANK: [[u8; 8]; 256] = {
        let mut t = [[0u8; 8]; 256];
        let mut m = 0;
        while m < 256 {
            let mut r = 1;
            while r < 8 {
                t[m][r] = t[m][r - 1] + ((m >> (r - 1)) & 1) as u8;
                r += 1;
            }
            m += 1;
        }
        t
    };
    // Eight rows read eight keys from the next, whatever their levels: the keys end with
    // eight more (a null past the last key reads one, and gives NULL_KEY either way).
    let present = keys.len();
    keys.resize(present + 8, NULL_KEY);
    out.reserve(n);
    let mut j = 0;
    let mut runs = LevelRuns {
        buf: levels,
        left: n,
    };
    while let Some(run) = runs.next()? {
        match run {
            LevelRun::Same { count, set: false } => out.resize(out.len() + count, NULL_KEY),
            LevelRun::Same { count, set: true } => {
                let run = keys
                    .get(j..j + count)
                    .filter(|_| j + count <= present)
                    .ok_or_else(|| anyhow!("more values than keys"))?;
                out.extend_from_slice(run);
                j += count;
            }
            LevelRun::Packed { bits, count } => {
                for (b, &mask) in bits.iter().enumerate() {
                    // The last byte's levels past `count` are padding.
                    let take = (count - b * 8).min(8);
                    let mask = mask as usize & ((1 << take) - 1);
                    let rank = &RANK[mask];
                    let at: &[u32; 8] = keys
                        .get(j..j + 8)
                        .and_then(|k| k.try_into().ok())
                        .ok_or_else(|| anyhow!("more values than keys"))?;
                    let mut eight = [NULL_KEY; 8];
                    for (r, (e, &rank)) in eight.iter_mut().zip(rank).enumerate() {
                        let k = at[rank as usize & 7];
                        *e = if mask >> r & 1 != 0 { k } else { NULL_KEY };
                    }
                    // Eight at a time, a length the compiler knows: a slice of
                    // `take` was a call to `memcpy` per eight rows (2.6% of the flame
                    // graph's time on the synthetic trace).
                    if take == 8 {
                        out.extend_from_slice(&eight);
                    } else {
                        out.extend_from_slice(&eight[..take]);
                    }
                    j += mask.count_ones() as usize;
                }
            }
        }
    }
    Ok(())
}

/// Append `n` values of `width` bits from Parquet's RLE / bit-packed hybrid encoding
/// (runs, each a ULEB128 header: `count << 1` then one value of `ceil(width / 8)` bytes,
/// or `groups << 1 | 1` then `groups` groups of 8 values packed from the low bits up). A
/// last bit-packed run may hold more values than asked for: those are padding.
fn decode_hybrid(mut buf: &[u8], width: u8, n: usize, out: &mut Vec<u32>) -> Result<()> {
    ensure!(width <= 32, "values of {width} bits");
    let end = out.len() + n;
    out.reserve(n);
    while out.len() < end {
        let (header, used) = uleb128(buf)?;
        buf = &buf[used..];
        let want = end - out.len();
        if header & 1 == 1 {
            let groups = (header >> 1) as usize;
            let bytes = groups
                .checked_mul(width as usize)
                .filter(|&b| b <= buf.len())
                .ok_or_else(|| anyhow!("a bit-packed run past the page's end"))?;
            let count = groups.saturating_mul(8).min(want);
            // Blocks of 32 values at a time, while 16 bytes past each block are there
            // to read (the page's next runs are: 8 for the scalar unpacking, 16 for
            // AVX2's); the rest one by one.
            let w = width as usize;
            let blocks = (count / 32).min(buf.len().saturating_sub(16) / (4 * w).max(1));
            // Unpacked into the reserved capacity, not into zeros written first: filling
            // the keys with zeros was a pass of its own (`memset`, 3% of a flame graph).
            let start = out.len();
            unpack_blocks(buf, width, &mut out.spare_capacity_mut()[..blocks * 32]);
            // Safety: `unpack_blocks` wrote every one of these values.
            #[allow(unsafe_code)]
            unsafe {
                out.set_len(start + blocks * 32)
            };
            let (mut done, from) = (blocks * 32, blocks * 4 * w);
            // The run's last values, fewer than 32, as a block whose end is thrown away,
            // when the bytes past them are there to read: runs of the decode's writer
            // (arrow-rs) are 504 values long, so 24 of each went one by one.
            if count - done < 32 && buf.len() >= from + 4 * w + 8 {
                let mut block = [0u32; 32];
                unpack_blocks(&buf[from..], width, slots(&mut block));
                out.extend_from_slice(&block[..count - done]);
                done = count;
            }
            unpack(&buf[from..bytes], width, count - done, out);
            buf = &buf[bytes..];
        } else {
            let count = (header >> 1) as usize;
            ensure!(count > 0, "an empty run");
            let bytes = (width as usize).div_ceil(8);
            let v = buf
                .get(..bytes)
                .ok_or_else(|| anyhow!("a run's value past the page's end"))?;
            let mut value = [0u8; 4];
            value[..bytes].copy_from_slice(v);
            let value = u32::from_le_bytes(value);
            ensure!(
                width == 32 || value >> width == 0,
                "a run's value wider than {width} bits"
            );
            out.resize(out.len() + count.min(want), value);
            buf = &buf[bytes..];
        }
    }
    Ok(())
}

/// The largest of `keys` (0 for none). One pass with AVX2's unsigned `max`, when the
/// processor has it: without SSE4.1 (x86-64's baseline) an unsigned `max` is several
/// instructions, and the check was two passes (an OR of the keys, which says nothing when
/// the dictionary's length is not a power of two, then the `max`): most of the 3% of a
/// flame graph spent in `Scratch::page`.
fn max_key(keys: &[u32]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        #[target_feature(enable = "avx2")]
        fn max_avx2(keys: &[u32]) -> u32 {
            keys.iter().fold(0, |m, &k| m.max(k))
        }
        // Safety: AVX2 is there (checked above).
        #[allow(unsafe_code)]
        return unsafe { max_avx2(keys) };
    }
    keys.iter().fold(0, |m, &k| m.max(k))
}

fn uleb128(buf: &[u8]) -> Result<(u64, usize)> {
    let mut v = 0u64;
    for (i, &b) in buf.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok((v, i + 1));
        }
    }
    bail!("a run header past the page's end")
}

/// Values as slots to write: what is written through them is always a value (the
/// functions that take slots never write `MaybeUninit::uninit()`).
fn slots(values: &mut [u32]) -> &mut [MaybeUninit<u32>] {
    // Safety: same layout; every write through the slots is an initialized `u32`.
    #[allow(unsafe_code)]
    unsafe {
        &mut *(values as *mut [u32] as *mut [MaybeUninit<u32>])
    }
}

/// Write every one of `out` (a multiple of 32 values) with values of `width` bits packed
/// in `packed`, which has 8 bytes more than they take.
fn unpack_blocks(packed: &[u8], width: u8, out: &mut [MaybeUninit<u32>]) {
    macro_rules! widths {
        ($($w:literal)*) => {
            match width {
                $($w => {
                    for (i, block) in out.chunks_exact_mut(32).enumerate() {
                        unpack32::<$w>(&packed[i * 4 * $w..], block);
                    }
                })*
                _ => unreachable!("widths are checked"),
            }
        };
    }
    if width == 0 {
        out.fill(MaybeUninit::new(0));
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if simd::unpack_blocks(packed, width, out) {
        return;
    }
    widths!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32)
}

/// Bit-packed blocks unpacked eight values at a time with AVX2, where the processor has
/// it: the scalar unpacking (a load, shift and mask per value) was a fifth of a
/// `branches` reader's time, on keys of 14 to 15 bits.
#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;

    /// Widths whose every value lies in the four bytes from the one it starts in.
    pub const MAX_WIDTH: u8 = 25;
    /// Bytes read past a run's blocks: the last group's sixteen from its middle byte.
    pub const PAST: usize = 16;

    /// Per width, eight values (`8 * W` bits, `W` bytes) from two loads of 16 bytes, one
    /// at the group's first byte (values 0 to 3) and one at its byte `W / 2` (values 4 to
    /// 7), each half of the register shuffled so that lane `i` holds the four bytes its
    /// value starts in, then shifted right by its first bit and masked.
    struct Group<const W: usize>;

    impl<const W: usize> Group<W> {
        /// Where lane `i`'s value starts, in bits from its half's first byte.
        const fn bit(i: usize) -> usize {
            if i < 4 {
                i * W
            } else {
                i * W - 8 * (W / 2)
            }
        }
        const SHUFFLE: [u8; 32] = {
            let mut m = [0u8; 32];
            let mut i = 0;
            while i < 8 {
                let byte = Self::bit(i) / 8;
                let mut b = 0;
                while b < 4 {
                    // Indices are within the lane's half (vpshufb shuffles per half).
                    m[i * 4 + b] = (byte + b) as u8;
                    b += 1;
                }
                i += 1;
            }
            m
        };
        const SHIFTS: [i32; 8] = {
            let mut s = [0i32; 8];
            let mut i = 0;
            while i < 8 {
                s[i] = (Self::bit(i) % 8) as i32;
                i += 1;
            }
            s
        };
    }

    /// As the scalar `unpack_blocks` (`out` a multiple of 8 values here), when the
    /// processor has AVX2, `width` is 1 to [`MAX_WIDTH`] and `packed` has [`PAST`] bytes
    /// past the blocks; `false` (and nothing done) when not.
    #[allow(unsafe_code)]
    pub fn unpack_blocks(packed: &[u8], width: u8, out: &mut [MaybeUninit<u32>]) -> bool {
        if !(1..=MAX_WIDTH).contains(&width)
            || !out.len().is_multiple_of(8)
            || packed.len() < out.len() / 8 * width as usize + PAST
            || !std::arch::is_x86_feature_detected!("avx2")
        {
            return false;
        }
        macro_rules! widths {
            ($($w:literal)*) => {
                match width {
                    // Safety: AVX2 is there (checked above).
                    $($w => unsafe { blocks::<$w>(packed, out) },)*
                    _ => unreachable!("widths are checked"),
                }
            };
        }
        widths!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25);
        true
    }

    #[target_feature(enable = "avx2")]
    #[allow(unsafe_code)]
    unsafe fn blocks<const W: usize>(packed: &[u8], out: &mut [MaybeUninit<u32>]) {
        let groups = out.len() / 8;
        // Every load below is within this slice: the last group's second load ends at
        // byte `(groups - 1) * W + W / 2 + 16`.
        let packed = &packed[..groups * W + PAST];
        let shuffle = _mm256_loadu_si256(Group::<W>::SHUFFLE.as_ptr().cast());
        let shifts = _mm256_loadu_si256(Group::<W>::SHIFTS.as_ptr().cast());
        let mask = _mm256_set1_epi32(((1u64 << W) - 1) as i32);
        for (g, eight) in out.chunks_exact_mut(8).enumerate() {
            let at = packed[g * W..].as_ptr();
            let low = _mm_loadu_si128(at.cast());
            let high = _mm_loadu_si128(at.add(W / 2).cast());
            let v = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(low), high);
            let v = _mm256_shuffle_epi8(v, shuffle);
            let v = _mm256_and_si256(_mm256_srlv_epi32(v, shifts), mask);
            _mm256_storeu_si256(eight.as_mut_ptr().cast(), v);
        }
    }
}

/// 32 values of `W` bits. Each is read as the 8 bytes from the one it starts in, so
/// `src` has 8 bytes past the block's `4 * W`. The 32 reads are written out one by one:
/// with `W` a constant they become loads at fixed offsets (the compiler left the loop
/// rolled, at 0.9 ns a value).
#[inline(always)]
fn unpack32<const W: usize>(src: &[u8], out: &mut [MaybeUninit<u32>]) {
    let src = &src[..4 * W + 8];
    let out: &mut [MaybeUninit<u32>; 32] = (&mut out[..32]).try_into().expect("32 values");
    let mask = if W == 32 {
        u32::MAX as u64
    } else {
        (1u64 << W) - 1
    };
    macro_rules! value {
        ($($i:literal)*) => {$(
            let bit = $i * W;
            let word = u64::from_le_bytes(src[bit / 8..bit / 8 + 8].try_into().expect("8 bytes"));
            out[$i] = MaybeUninit::new(((word >> (bit % 8)) & mask) as u32);
        )*};
    }
    value!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
}

/// Append the first `count` values of `width` bits packed in `packed`, low bits first.
fn unpack(packed: &[u8], width: u8, count: usize, out: &mut Vec<u32>) {
    if width == 0 {
        out.resize(out.len() + count, 0);
        return;
    }
    let w = width as usize;
    let mask = if width == 32 {
        u32::MAX as u64
    } else {
        (1u64 << width) - 1
    };
    // Each value is read as 8 bytes from the byte it starts in: with at most 32 bits it
    // never reaches past them. Values whose 8 bytes would pass the end of the run are
    // read from a copy padded with zeros.
    let fast = packed.len().saturating_sub(7).saturating_mul(8) / w;
    let fast = fast.min(count);
    out.extend((0..fast).map(|i| {
        let bit = i * w;
        let word = u64::from_le_bytes(packed[bit / 8..bit / 8 + 8].try_into().expect("8"));
        ((word >> (bit % 8)) & mask) as u32
    }));
    if fast < count {
        let from = fast * w / 8;
        let mut tail = packed[from..].to_vec();
        tail.resize(tail.len() + 8, 0);
        out.extend((fast..count).map(|i| {
            let bit = i * w - from * 8;
            let word = u64::from_le_bytes(tail[bit / 8..bit / 8 + 8].try_into().expect("8"));
            ((word >> (bit % 8)) & mask) as u32
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pack `values` as one bit-packed run (padded to a group of 8).
    fn packed_run(values: &[u32], width: u8) -> Vec<u8> {
        let groups = values.len().div_ceil(8);
        let mut out = vec![];
        let mut header = ((groups as u64) << 1) | 1;
        loop {
            let b = (header & 0x7f) as u8;
            header >>= 7;
            if header == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        }
        let mut bits = vec![0u8; groups * width as usize];
        for (i, &v) in values.iter().enumerate() {
            for b in 0..width as usize {
                if v >> b & 1 == 1 {
                    let at = i * width as usize + b;
                    bits[at / 8] |= 1 << (at % 8);
                }
            }
        }
        out.extend(bits);
        out
    }

    #[test]
    fn bit_packed_runs_of_every_width_read_back() {
        // Blocks of 32 and single values, with and without bytes after the run (which
        // blocks read past their values, never into them).
        for width in 0..=32u8 {
            let mask = if width == 32 {
                u32::MAX
            } else {
                (1u32 << width) - 1
            };
            for len in [1u32, 8, 31, 32, 33, 77, 256, 301] {
                let values: Vec<u32> = (0..len)
                    .map(|i| i.wrapping_mul(0x9e37_79b9) & mask)
                    .collect();
                // 140 bytes after: a run's last values, fewer than 32, read as a block.
                for after in [0, 3, 40, 140] {
                    let mut buf = packed_run(&values, width);
                    buf.resize(buf.len() + after, 0xa5);
                    let mut out = vec![7];
                    decode_hybrid(&buf, width, values.len(), &mut out).unwrap();
                    assert_eq!(
                        out[1..],
                        values,
                        "width {width}, {len} values, {after} after"
                    );
                }
            }
        }
    }

    /// The AVX2 unpacking against the scalar one, for every width it takes, where the
    /// processor has AVX2 (the test machines do; elsewhere it says it did nothing).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn blocks_unpacked_eight_at_a_time_are_those_unpacked_one_by_one() {
        let avx2 = std::arch::is_x86_feature_detected!("avx2");
        for width in 1..=simd::MAX_WIDTH {
            let values: Vec<u32> = (0..96u32)
                .map(|i| i.wrapping_mul(0x9e37_79b9) >> (32 - width))
                .collect();
            // The run's bits, without its header (one byte: 12 groups).
            let mut packed = packed_run(&values, width)[1..].to_vec();
            packed.resize(packed.len() + simd::PAST, 0xff);
            let mut out = vec![0; 96];
            assert_eq!(simd::unpack_blocks(&packed, width, slots(&mut out)), avx2);
            if avx2 {
                assert_eq!(out, values, "width {width}");
            }
            // Without the bytes past the blocks: not unpacked (nor read past the end).
            let short = &packed[..packed.len() - 1];
            assert!(!simd::unpack_blocks(short, width, slots(&mut out)));
        }
        assert!(!simd::unpack_blocks(
            &[0; 64],
            simd::MAX_WIDTH + 1,
            slots(&mut [0; 32])
        ));
    }

    #[test]
    fn a_key_past_the_dictionary_is_an_error() {
        // Keys of 2 bits into a dictionary of 3 values: one run of four 2s, then a 3.
        let page = |last: u8| {
            let mut scratch = Scratch::default();
            let mut out = Keyed::<u64>::default();
            let values = [2, 0x08, 2, 0x02, last];
            let r = scratch.page(
                None,
                &values,
                Encoding::RLE_DICTIONARY,
                5,
                Some(3),
                &mut out,
            );
            r.map(|_| out.keys)
        };
        assert_eq!(page(1).unwrap(), [2, 2, 2, 2, 1]);
        let e = page(3).unwrap_err();
        assert!(
            e.to_string().contains("key 3 past a dictionary of 3"),
            "{e}"
        );
    }

    /// Levels in the hybrid encoding: eight at a time, a run of eight alike as a repeated
    /// run every other time, others (and the last few) as a packed group, whose padding
    /// bits are set (readers must not count them).
    fn encode_levels(levels: &[u32]) -> Vec<u8> {
        let mut buf = vec![];
        for (i, eight) in levels.chunks(8).enumerate() {
            if eight.len() == 8 && eight.iter().all(|&l| l == eight[0]) && i % 2 == 0 {
                buf.extend([8 << 1, eight[0] as u8]);
            } else {
                let bits = (0..8).fold(0u8, |m, r| {
                    m | ((eight.get(r).map_or(1, |&l| l) as u8) << r)
                });
                buf.extend([1 << 1 | 1, bits]);
            }
        }
        buf
    }

    #[test]
    fn nulls_spread_between_the_keys_as_the_levels_say() {
        // Levels from a simple generator: runs of nulls, of values, and mixes, at lengths
        // that are and are not multiples of eight.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for len in [0usize, 1, 7, 8, 9, 64, 1000, 4099] {
            for density in [0u64, 1, 4, 7, 8] {
                let levels: Vec<u32> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        (x % 8 < density) as u32
                    })
                    .collect();
                let present = levels.iter().filter(|&&l| l != 0).count();
                let mut keys: Vec<u32> = (0..present as u32).map(|k| k * 3 + 1).collect();
                let mut next = keys.iter().copied();
                let want: Vec<u32> = levels
                    .iter()
                    .map(|&l| {
                        if l != 0 {
                            next.next().unwrap()
                        } else {
                            NULL_KEY
                        }
                    })
                    .collect();
                // A whole page: its values counted from the levels, its keys decoded.
                let mut page = vec![14];
                page.extend(packed_run(&keys, 14));
                let mut chunk = Keyed::<u64>::default();
                let levels_buf = encode_levels(&levels);
                let dictionary = Some(1 << 14);
                let encoding = Encoding::RLE_DICTIONARY;
                Scratch::default()
                    .page(
                        Some(&levels_buf),
                        &page,
                        encoding,
                        len,
                        dictionary,
                        &mut chunk,
                    )
                    .unwrap();
                assert_eq!(chunk.keys, want, "{len} levels, {density} in 8 set, a page");
                let mut out = vec![5];
                spread_nulls(&levels_buf, len, &mut keys, &mut out).unwrap();
                assert_eq!(out[0], 5);
                assert_eq!(out[1..], want, "{len} levels, {density} in 8 set");
            }
        }
        // Levels that say more values than there are keys: an error, not a panic.
        let levels = encode_levels(&[1; 20]);
        let mut keys = vec![1, 2, 3];
        assert!(spread_nulls(&levels, 20, &mut keys, &mut vec![]).is_err());
        let mut keys = vec![1, 2, 3];
        assert!(spread_nulls(&[40 << 1, 1], 40, &mut keys, &mut vec![]).is_err());
    }

    #[test]
    fn rle_runs_and_bit_packed_runs_mix() {
        // 300 times 5 (a header of two bytes), then 3 packed values, width 3.
        let mut buf = vec![0xd8, 0x04, 5];
        buf.extend(packed_run(&[1, 7, 2], 3));
        let mut out = vec![];
        decode_hybrid(&buf, 3, 303, &mut out).unwrap();
        assert_eq!(out.len(), 303);
        assert!(out[..300].iter().all(|&v| v == 5));
        assert_eq!(out[300..], [1, 7, 2]);
    }

    #[test]
    fn damaged_runs_are_errors_not_panics() {
        let mut out = vec![];
        // A packed run of 2 groups of 4 bits needs 8 bytes.
        assert!(decode_hybrid(&[0x05, 1, 2, 3], 4, 16, &mut out).is_err());
        // Runs end before the values asked for.
        assert!(decode_hybrid(&[0x04, 1], 4, 3, &mut out).is_err());
        // A header that never ends.
        assert!(decode_hybrid(&[0xff; 12], 4, 3, &mut out).is_err());
        // A run of billions of groups of 0 bits (no bytes to check them against).
        let mut buf = vec![0xff; 8];
        buf.push(0x7f);
        let mut zeros = vec![];
        decode_hybrid(&buf, 0, 5, &mut zeros).unwrap();
        assert_eq!(zeros, [0; 5]);
        // A run's value wider than the width.
        assert!(decode_hybrid(&[0x04, 0x1f], 4, 2, &mut out).is_err());
        assert!(decode_hybrid(&[0x00], 4, 2, &mut out).is_err());
        assert!(decode_hybrid(&[], 33, 1, &mut out).is_err());
    }
}

#[cfg(test)]
mod against_arrow {
    //! Files written by arrow-rs in every layout a writer may choose read back to the
    //! values arrow-rs reads.

    use std::fs::File;
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use arrow_array::types::{UInt32Type, UInt64Type};
    use arrow_array::{ArrayRef, RecordBatch, StringArray, UInt32Array, UInt64Array};
    use arrow_schema::{DataType, Field, Schema};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ArrowWriter;
    use parquet::basic::Compression;
    use parquet::file::properties::{WriterProperties, WriterVersion};
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::schema::types::ColumnPath;

    use super::*;

    fn columns(rows: usize) -> RecordBatch {
        // 1,500 distinct addresses, each twice in a row; nulls now and then.
        let ip: UInt64Array = (0..rows as u64)
            .map(|i| 0xffff_8000_0000_0000 + (i / 2 * 7919 % 1500) * 13)
            .collect();
        let target: UInt64Array = (0..rows as u64)
            .map(|i| (i % 11 != 3).then_some(0x40_0000 + i * 104_729 % 900))
            .collect();
        let insns: UInt32Array = (0..rows as u32).map(|i| i % 37 + 1).collect();
        let kind: StringArray = (0..rows)
            .map(|i| Some(["cond", "call", "ret", "jmp"][i * 31 % 4]))
            .collect();
        let schema = Schema::new(vec![
            Field::new("ip", DataType::UInt64, false),
            Field::new("target", DataType::UInt64, true),
            Field::new("insns", DataType::UInt32, false),
            Field::new("kind", DataType::Utf8, false),
        ]);
        let cols: Vec<ArrayRef> = vec![
            Arc::new(ip),
            Arc::new(target),
            Arc::new(insns),
            Arc::new(kind),
        ];
        RecordBatch::try_new(Arc::new(schema), cols).unwrap()
    }

    fn resolve<T: Clone>(k: &Keyed<T>) -> Vec<Option<T>> {
        k.keys
            .iter()
            .map(|&key| (key != NULL_KEY).then(|| k.values[key as usize].clone()))
            .collect()
    }

    /// Returns the number of `ip` values read (the dictionaries' and the PLAIN ones).
    fn check(name: &str, props: WriterProperties) -> usize {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.parquet");
        let batch = columns(50_000);
        let mut w = ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), Some(props))
            .unwrap();
        for part in 0..5 {
            w.write(&batch.slice(part * 10_000, 10_000)).unwrap();
        }
        w.close().unwrap();
        let expected: Vec<RecordBatch> =
            ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap())
                .unwrap()
                .with_batch_size(1 << 20)
                .build()
                .unwrap()
                .map(|b| b.unwrap())
                .collect();
        let expected = arrow_select::concat::concat_batches(&batch.schema(), &expected).unwrap();
        let meta = SerializedFileReader::new(File::open(&path).unwrap())
            .unwrap()
            .metadata()
            .clone();
        let (mut ip, mut target, mut insns, mut kind) = (vec![], vec![], vec![], vec![]);
        let mut ip_values = 0;
        for g in meta.row_groups() {
            let rows = g.num_rows() as usize;
            // As the walk reads them: the row group's bytes mapped.
            let (start, end) = g.columns().iter().fold((u64::MAX, 0), |(s, e), c| {
                let (at, len) = c.byte_range();
                (s.min(at), e.max(at + len))
            });
            let file = Arc::new(MappedRange::map(&File::open(&path).unwrap(), start..end).unwrap());
            // Outside the range is an error, not a panic; so is a range past the file's
            // end (whose pages would fault).
            assert!(file.get_bytes(end, 1).is_err() && file.get_bytes(start - 1, 1).is_err());
            let size = std::fs::metadata(&path).unwrap().len();
            assert!(MappedRange::map(&File::open(&path).unwrap(), start..size + 1).is_err());
            let keyed = read_chunk::<u64, _>(&file, g.column(0), rows).unwrap();
            ip_values += keyed.values.len();
            ip.extend(resolve(&keyed));
            target.extend(resolve(
                &read_chunk::<u64, _>(&file, g.column(1), rows).unwrap(),
            ));
            insns.extend(resolve(
                &read_chunk::<u32, _>(&file, g.column(2), rows).unwrap(),
            ));
            kind.extend(resolve(
                &read_chunk::<Vec<u8>, _>(&file, g.column(3), rows).unwrap(),
            ));
            // A column of another type is refused, not misread.
            assert!(read_chunk::<u32, _>(&file, g.column(0), rows).is_err());
        }
        let col = |i: usize| expected.column(i);
        let ip_want: Vec<_> = col(0).as_primitive::<UInt64Type>().iter().collect();
        let target_want: Vec<_> = col(1).as_primitive::<UInt64Type>().iter().collect();
        let insns_want: Vec<_> = col(2).as_primitive::<UInt32Type>().iter().collect();
        let kind_want: Vec<_> = (col(3).as_string::<i32>().iter())
            .map(|s| s.map(|s| s.as_bytes().to_vec()))
            .collect();
        assert_eq!(ip, ip_want, "{name}: ip");
        assert_eq!(target, target_want, "{name}: target");
        assert!(target.iter().any(Option::is_none), "{name}: nulls");
        assert_eq!(insns, insns_want, "{name}: insns");
        assert_eq!(kind, kind_want, "{name}: kind");
        ip_values
    }

    fn props() -> parquet::file::properties::WriterPropertiesBuilder {
        WriterProperties::builder()
            .set_compression(Compression::ZSTD(Default::default()))
            .set_max_row_group_row_count(Some(20_000))
    }

    #[test]
    fn dictionary_pages_as_the_decode_writes_them() {
        // 1,500 distinct addresses in each of 3 row groups.
        assert!(check("dictionary", props().build()) <= 4_500);
    }

    #[test]
    fn small_pages_and_version_2_pages() {
        check(
            "small pages",
            props()
                .set_data_page_row_count_limit(333)
                .set_write_batch_size(100)
                .build(),
        );
        check(
            "v2",
            props()
                .set_writer_version(WriterVersion::PARQUET_2_0)
                .set_data_page_row_count_limit(1000)
                .set_write_batch_size(100)
                .build(),
        );
    }

    #[test]
    fn plain_values_after_a_full_dictionary_and_without_one() {
        // A dictionary page of 8 KiB holds 1,024 addresses: the writer falls back to PLAIN
        // within each row group, after four pages of keys.
        let read = check(
            "dictionary overflow",
            props()
                .set_dictionary_page_size_limit(8192)
                .set_data_page_row_count_limit(500)
                .set_write_batch_size(100)
                .build(),
        );
        assert!(read > 4_500 && read < 50_000, "{read}");
        assert_eq!(
            check("plain", props().set_dictionary_enabled(false).build()),
            50_000
        );
    }

    #[test]
    fn delta_binary_packed_integers_read_back_and_other_encodings_are_refused() {
        // Version 2 files without a dictionary keep integers in DELTA_BINARY_PACKED (as
        // the decode writes the events' `seq`): deltas of the test's addresses go up and
        // down, across pages of 1,000 rows (blocks of 128 values, one cut short).
        let v2 = || {
            props()
                .set_dictionary_enabled(false)
                .set_writer_version(WriterVersion::PARQUET_2_0)
        };
        let plain_kind = v2()
            .set_column_encoding(ColumnPath::from("kind"), Encoding::PLAIN)
            .set_data_page_row_count_limit(1000)
            .set_write_batch_size(100)
            .build();
        assert_eq!(check("delta", plain_kind), 50_000);
        // Byte arrays come as DELTA_BYTE_ARRAY then, which is refused: the walk reads such
        // row groups through arrow-rs.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.parquet");
        let batch = columns(5_000);
        let mut w = ArrowWriter::try_new(
            File::create(&path).unwrap(),
            batch.schema(),
            Some(v2().build()),
        )
        .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let meta = SerializedFileReader::new(File::open(&path).unwrap())
            .unwrap()
            .metadata()
            .clone();
        let g = meta.row_group(0);
        assert!(g
            .column(0)
            .encodings()
            .any(|e| e == Encoding::DELTA_BINARY_PACKED));
        let file = Arc::new(File::open(&path).unwrap());
        let ip = read_chunk::<u64, _>(&file, g.column(0), 5_000).unwrap();
        let want: Vec<_> = batch
            .column(0)
            .as_primitive::<UInt64Type>()
            .iter()
            .collect();
        assert_eq!(resolve(&ip), want);
        let e = read_chunk::<Vec<u8>, _>(&file, g.column(3), 5_000).unwrap_err();
        assert!(e.to_string().contains("DELTA"), "{e}");
    }

    #[test]
    fn damaged_delta_pages_are_errors_not_panics() {
        let read = |buf: &[u8], n| {
            let mut got = vec![];
            delta_binary_packed(buf, n, 64, |v| got.push(v)).map(|_| got)
        };
        // Blocks of 128 in 4 miniblocks, 3 values from 7: deltas -2 (zigzag 3) + 0, 1.
        let good = [128, 1, 4, 3, 14, 3, 1, 0, 0, 0, 0b10, 0, 0, 0, 0];
        assert!(read(&good[..11], 3).is_err(), "a miniblock cut short");
        assert_eq!(read(&good[..], 3).unwrap(), [7, 5, 4]);
        assert!(read(&good[..], 4).is_err(), "more values than the header's");
        assert!(read(&[100, 1, 4, 3, 14], 3).is_err(), "a block of 100");
        assert!(read(&[128, 1, 0, 3, 14], 3).is_err(), "no miniblocks");
        assert!(
            read(&[128, 1, 4, 3, 14, 3, 65, 0, 0, 0], 3).is_err(),
            "65 bits"
        );
        assert!(read(&[0xff; 12], 3).is_err(), "a header past the end");
        // Blocks of 2^40 and 2^59 values (one miniblock): no allocation of that size, no
        // overflow of the miniblock's bytes.
        let huge = [0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 1, 2, 0, 0, 1];
        assert!(read(&huge, 2).is_err(), "2^40 values of 1 bit");
        let huge = [
            0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x08, 1, 2, 0, 0, 64,
        ];
        assert!(read(&huge, 2).is_err(), "2^59 values of 64 bits");
    }
}
