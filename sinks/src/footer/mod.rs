//! [`RowGroupFile`]: a Parquet file of row groups encoded elsewhere, whose footer waits
//! on disk, not in memory, until the file is closed.
//!
//! arrow-rs's `SerializedFileWriter` keeps every row group's metadata, column index and
//! offset index as Rust structs until it writes the footer: 424 bytes per column chunk
//! before its statistics, lists and page entries. A `branches` table of 12.1 G rows
//! (23,130 row groups of 16 columns, from 4 GB of Intel PT) held 326 MiB that way, which
//! serialized to 33 MiB of footer and 44 MiB of page indexes: the one part of a decode's
//! memory that grew with the trace.
//!
//! This writer produces the same file, byte for byte (the crate's `tests.rs` compares it
//! with arrow-rs's on every table), and serializes each row group's part of the footer as soon
//! as the row group is written: the row group and its column chunks, its column indexes
//! and its offset indexes each go to an unnamed temporary file beside the table, and the
//! footer is assembled from them at the end. Its memory is one row group's, whatever the
//! number of row groups.
//!
//! No crate writes Parquet footers piece by piece, so the serializing is still arrow-rs's:
//! each row group's metadata is written by `ParquetMetaDataWriter` as a one-row-group
//! file's footer, and [`thrift`] cuts that into the pieces the final footer is made of.
//! What only the end knows (where the page indexes land, the number of rows and row
//! groups, whether row groups carry their ordinal) is written here, in Thrift's compact
//! encoding, following `ThriftMetadataWriter`.

mod thrift;

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

use ::parquet::bloom_filter::Sbbf;
use ::parquet::errors::ParquetError;
use ::parquet::file::metadata::page_index::PageIndexProvider;
use ::parquet::file::metadata::{
    FileMetaData, KeyValue, ParquetMetaData, ParquetMetaDataBuilder, ParquetMetaDataWriter,
    RowGroupMetaData,
};
use ::parquet::file::page_index::column_index::ColumnIndexMetaData;
use ::parquet::file::page_index::offset_index::OffsetIndexMetaData;
use ::parquet::file::properties::{BloomFilterPosition, WriterPropertiesPtr};
use ::parquet::file::writer::{SerializedRowGroupWriter, TrackedWrite};
use ::parquet::schema::types::SchemaDescPtr;

use thrift::{Cursor, I16, I32, I64, LIST, STRUCT};

type Result<T> = std::result::Result<T, ParquetError>;

const MAGIC: &[u8; 4] = b"PAR1";

/// Marks a column chunk without a column index (or offset index) in the spilled records.
const NONE: u32 = u32::MAX;

/// A Parquet file written row group by row group, its footer kept in temporary files.
pub(crate) struct RowGroupFile {
    buf: TrackedWrite<File>,
    schema: SchemaDescPtr,
    props: WriterPropertiesPtr,
    /// Per row group: the record `spill` writes (its thrift pieces, and the lengths of its
    /// page indexes).
    row_groups: Spill,
    /// The column indexes, in the order the footer puts them (row group by row group).
    column_indexes: Spill,
    offset_indexes: Spill,
    count: usize,
    rows: i64,
}

/// What `on_close` hands over for one row group.
struct Closed {
    metadata: RowGroupMetaData,
    column_indexes: Vec<Option<ColumnIndexMetaData>>,
    offset_indexes: Vec<Option<OffsetIndexMetaData>>,
}

impl RowGroupFile {
    /// Starts a file in `file` (which must be empty), its temporary files in `dir`.
    pub(crate) fn new(
        file: File,
        dir: &Path,
        schema: SchemaDescPtr,
        props: WriterPropertiesPtr,
    ) -> Result<Self> {
        if props.bloom_filter_position() != BloomFilterPosition::AfterRowGroup {
            return Err(ParquetError::General(
                "the row-group writer writes bloom filters after each row group".into(),
            ));
        }
        let mut buf = TrackedWrite::new(file);
        buf.write_all(MAGIC)?;
        Ok(RowGroupFile {
            buf,
            schema,
            props,
            row_groups: Spill::new(dir)?,
            column_indexes: Spill::new(dir)?,
            offset_indexes: Spill::new(dir)?,
            count: 0,
            rows: 0,
        })
    }

    pub(crate) fn schema_descr(&self) -> &SchemaDescPtr {
        &self.schema
    }

    /// This file's `FileMetaData` with no row group yet.
    fn file_metadata(
        &self,
        created_by: Option<String>,
        key_value: Option<Vec<KeyValue>>,
    ) -> FileMetaData {
        let version = self.props.writer_version().as_num();
        FileMetaData::new(version, 0, created_by, key_value, self.schema.clone(), None)
    }

    /// `metadata` as arrow-rs's file writer would end a file with it: its page indexes,
    /// then its `FileMetaData`, its length and the magic.
    fn serialized(&self, metadata: &ParquetMetaData) -> Result<Vec<u8>> {
        let mut bytes = Vec::new();
        ParquetMetaDataWriter::new(&mut bytes, metadata)
            .with_write_path_in_schema(self.props.write_path_in_schema())
            .with_preserve_page_index_locations(false)
            .finish()?;
        Ok(bytes)
    }

    /// Writes one row group: `fill` appends its columns, in order, to the row group writer.
    pub(crate) fn append(
        &mut self,
        fill: impl FnOnce(&mut SerializedRowGroupWriter<'_, File>) -> Result<()>,
    ) -> Result<()> {
        let ordinal = i32::try_from(self.count).map_err(|_| {
            ParquetError::General("Parquet does not support more than i32::MAX row groups".into())
        })?;
        let mut closed: Option<Closed> = None;
        {
            let slot = &mut closed;
            let on_close = move |buf: &mut TrackedWrite<File>,
                                 mut metadata: RowGroupMetaData,
                                 blooms: Vec<Option<Sbbf>>,
                                 column_indexes,
                                 offset_indexes| {
                write_bloom_filters(buf, blooms, &mut metadata)?;
                *slot = Some(Closed {
                    metadata,
                    column_indexes,
                    offset_indexes,
                });
                Ok(())
            };
            let mut w = SerializedRowGroupWriter::new(
                self.schema.clone(),
                self.props.clone(),
                &mut self.buf,
                ordinal,
                Some(Box::new(on_close)),
            );
            fill(&mut w)?;
            w.close()?;
        }
        let closed = closed.ok_or_else(|| ParquetError::General("row group not closed".into()))?;
        self.rows += closed.metadata.num_rows();
        self.count += 1;
        self.spill(closed)
    }

    /// Serializes one row group's part of the footer and appends it to the spills.
    fn spill(&mut self, closed: Closed) -> Result<()> {
        let columns = closed.metadata.num_columns();
        let offset_indexes = if self.props.offset_index_disabled() {
            vec![None; columns]
        } else {
            closed.offset_indexes
        };
        let index = OneRowGroup {
            column_indexes: closed.column_indexes,
            offset_indexes,
        };
        let metadata = ParquetMetaDataBuilder::new(self.file_metadata(None, None))
            .add_row_group(closed.metadata)
            .set_page_index(Some(Arc::new(index)))
            .build();
        let bytes = self.serialized(&metadata)?;
        let pieces = Pieces::of_one_row_group(&bytes, columns)?;
        // The record the footer is assembled from: the row group's tail, then each column
        // chunk's prefix and the lengths of its column index and offset index, whose
        // bytes go to their own spills (the footer puts all column indexes first).
        let mut record = Vec::with_capacity(bytes.len());
        record.extend(pieces.tail_last.to_le_bytes());
        record.extend((pieces.tail.len() as u32).to_le_bytes());
        record.extend(pieces.tail);
        for c in &pieces.columns {
            record.extend(c.prefix_last.to_le_bytes());
            record.extend((c.prefix.len() as u32).to_le_bytes());
            record.extend(c.prefix);
            for (range, spill) in [
                (c.column_index, &mut self.column_indexes),
                (c.offset_index, &mut self.offset_indexes),
            ] {
                let len = match range {
                    Some((at, len)) => {
                        spill.write(&bytes[at..at + len])?;
                        u32::try_from(len).map_err(|_| general("page index over 4 GiB"))?
                    }
                    None => NONE,
                };
                record.extend(len.to_le_bytes());
            }
        }
        self.row_groups.write(&record)
    }

    /// Writes the page indexes and the footer, and hands back the file (not yet synced).
    pub(crate) fn finish(mut self) -> Result<File> {
        let columns = self.schema.num_columns();

        // The footer of the same schema and key-value metadata with no row group: every
        // field but the row count and the row groups is the final footer's.
        let file_metadata = self.file_metadata(
            Some(self.props.created_by().to_string()),
            self.props.key_value_metadata().cloned(),
        );
        let frame = self.serialized(&ParquetMetaDataBuilder::new(file_metadata).build())?;
        let frame = Frame::of(&frame)?;

        let index_start = self.buf.bytes_written() as i64;
        let column_index_bytes = self.column_indexes.copy_to(&mut self.buf)? as i64;
        self.offset_indexes.copy_to(&mut self.buf)?;

        let start = self.buf.bytes_written();
        let mut out = Vec::with_capacity(1 << 16);
        out.extend(frame.head);
        thrift::write_field(&mut out, 2, 3, I64);
        thrift::write_zigzag(&mut out, self.rows);
        thrift::write_field(&mut out, 3, 4, LIST);
        thrift::write_list(&mut out, STRUCT, self.count);
        let ordinals = i16::try_from(self.count).is_ok();
        let mut records = self.row_groups.reader()?;
        let (mut ci_at, mut oi_at) = (index_start, index_start + column_index_bytes);
        let mut tail = Vec::new();
        for ordinal in 0..self.count {
            let tail_last = read_i16(&mut records)?;
            tail.clear();
            read_piece(&mut records, &mut tail)?;
            thrift::write_field(&mut out, 0, 1, LIST);
            thrift::write_list(&mut out, STRUCT, columns);
            for _ in 0..columns {
                let last = read_i16(&mut records)?;
                read_piece(&mut records, &mut out)?;
                let ci = read_u32(&mut records)?;
                let oi = read_u32(&mut records)?;
                // ColumnChunk 4 to 7: where its offset index and column index are.
                let last = index_location(&mut out, last, 4, oi, &mut oi_at);
                index_location(&mut out, last, 6, ci, &mut ci_at);
                out.push(0);
            }
            out.extend(&tail);
            if ordinals {
                thrift::write_field(&mut out, tail_last, 7, I16);
                thrift::write_zigzag(&mut out, ordinal as i64);
            }
            out.push(0);
            if out.len() >= 1 << 16 {
                self.buf.write_all(&out)?;
                out.clear();
            }
        }
        out.extend(frame.rest);
        self.buf.write_all(&out)?;
        let len = u32::try_from(self.buf.bytes_written() - start)
            .map_err(|_| ParquetError::General("footer larger than 4 GiB".into()))?;
        self.buf.write_all(&len.to_le_bytes())?;
        self.buf.write_all(MAGIC)?;
        self.buf.into_inner()
    }
}

/// A ColumnChunk's offset (field `id`, i64) and length (`id + 1`, i32) of a page index of
/// `len` bytes at `*at`, after field `last`, unless there is none (`len` is [`NONE`]);
/// moves `*at` past it. The id of the last field written.
fn index_location(out: &mut Vec<u8>, last: i16, id: i16, len: u32, at: &mut i64) -> i16 {
    if len == NONE {
        return last;
    }
    thrift::write_field(out, last, id, I64);
    thrift::write_zigzag(out, *at);
    thrift::write_field(out, id, id + 1, I32);
    thrift::write_zigzag(out, i64::from(len));
    *at += i64::from(len);
    id + 1
}

/// arrow-rs's `write_bloom_filters` for one row group (`BloomFilterPosition::AfterRowGroup`).
fn write_bloom_filters(
    buf: &mut TrackedWrite<File>,
    blooms: Vec<Option<Sbbf>>,
    metadata: &mut RowGroupMetaData,
) -> Result<()> {
    for (column, bloom) in metadata.columns_mut().iter_mut().zip(blooms) {
        if let Some(bloom) = bloom {
            let start = buf.bytes_written();
            bloom.write(&mut *buf)?;
            let end = buf.bytes_written();
            *column = column
                .clone()
                .into_builder()
                .set_bloom_filter_offset(Some(start as i64))
                .set_bloom_filter_length(Some((end - start) as i32))
                .build()?;
        }
    }
    Ok(())
}

/// One row group's page indexes, as `ParquetMetaDataWriter` takes them.
#[derive(Debug)]
struct OneRowGroup {
    column_indexes: Vec<Option<ColumnIndexMetaData>>,
    offset_indexes: Vec<Option<OffsetIndexMetaData>>,
}

impl PageIndexProvider for OneRowGroup {
    fn has_offset_indexes(&self) -> bool {
        true
    }

    fn has_column_indexes(&self) -> bool {
        true
    }

    fn column_index(&self, row_group: usize, column: usize) -> Option<&ColumnIndexMetaData> {
        (row_group == 0).then(|| self.column_indexes.get(column)?.as_ref())?
    }

    fn offset_index(&self, row_group: usize, column: usize) -> Option<&OffsetIndexMetaData> {
        (row_group == 0).then(|| self.offset_indexes.get(column)?.as_ref())?
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

fn general(what: &str) -> ParquetError {
    ParquetError::General(format!("footer: {what}"))
}

/// The `FileMetaData` at the end of a serialized file (before its length and magic).
fn footer_of(file: &[u8]) -> Result<&[u8]> {
    let n = file.len();
    if n < 8 || &file[n - 4..] != MAGIC {
        return Err(general("no footer"));
    }
    let len = u32::from_le_bytes(file[n - 8..n - 4].try_into().expect("4 bytes")) as usize;
    file.get(n - 8 - len.min(n - 8)..n - 8)
        .filter(|m| m.len() == len)
        .ok_or_else(|| general("footer length"))
}

/// The pieces of a one-row-group file's metadata (page indexes, then `FileMetaData`).
struct Pieces<'a> {
    columns: Vec<ChunkPieces<'a>>,
    /// RowGroup's fields after its columns, without the ordinal and the stop byte.
    tail: &'a [u8],
    /// The id of the tail's last field (the ordinal's header is relative to it).
    tail_last: i16,
}

struct ChunkPieces<'a> {
    /// ColumnChunk's fields before its page index locations (its offset and
    /// `ColumnMetaData`), without the stop byte.
    prefix: &'a [u8],
    /// The id of the prefix's last field.
    prefix_last: i16,
    /// Where in the serialized output its column index and offset index are.
    column_index: Option<(usize, usize)>,
    offset_index: Option<(usize, usize)>,
}

impl<'a> Pieces<'a> {
    fn of_one_row_group(file: &'a [u8], columns: usize) -> Result<Self> {
        let meta = footer_of(file)?;
        let base = file.len() - 8 - meta.len();
        let mut c = Cursor::new(meta);
        let mut last = 0;
        // FileMetaData 1 to 3, then 4: the row groups.
        loop {
            let f = c.field(last)?.ok_or_else(|| general("no row groups"))?;
            last = f.id;
            if f.id == 4 {
                break;
            }
            c.skip_field_value(f.kind)?;
        }
        let (kind, n) = c.list()?;
        if kind != STRUCT || n != 1 {
            return Err(general("not one row group"));
        }
        // RowGroup 1: the column chunks.
        let f = c.field(0)?;
        if f.map(|f| (f.id, f.kind)) != Some((1, LIST)) {
            return Err(general("a row group without columns"));
        }
        let (kind, n) = c.list()?;
        if kind != STRUCT || n != columns {
            return Err(general("column count"));
        }
        let mut chunks = Vec::with_capacity(columns);
        for _ in 0..columns {
            let start = c.pos;
            let mut prefix = None;
            let (mut last, mut prefix_last) = (0, 0);
            let mut ints = [None::<i64>; 8];
            loop {
                let header = c.pos;
                let Some(f) = c.field(last)? else {
                    prefix.get_or_insert(header);
                    break;
                };
                if f.id >= 4 && prefix.is_none() {
                    prefix = Some(header);
                }
                if (4..=7).contains(&f.id) {
                    if !matches!(f.kind, I32 | I64) {
                        return Err(general("page index location type"));
                    }
                    ints[f.id as usize] = Some(c.zigzag()?);
                } else if f.id > 7 {
                    return Err(general("column chunk fields past 7"));
                } else {
                    c.skip_field_value(f.kind)?;
                    prefix_last = f.id;
                }
                last = f.id;
            }
            let prefix = prefix.expect("set at the stop byte at the latest");
            let range = |off: Option<i64>, len: Option<i64>| -> Result<Option<(usize, usize)>> {
                match (off, len) {
                    (None, None) => Ok(None),
                    (Some(o), Some(l)) => {
                        let o = usize::try_from(o).map_err(|_| general("index offset"))?;
                        let l = usize::try_from(l).map_err(|_| general("index length"))?;
                        match o.checked_add(l) {
                            Some(e) if e <= base => Ok(Some((o, l))),
                            _ => Err(general("page index out of range")),
                        }
                    }
                    _ => Err(general("half a page index location")),
                }
            };
            chunks.push(ChunkPieces {
                prefix: &meta[start..prefix],
                prefix_last,
                offset_index: range(ints[4], ints[5])?,
                column_index: range(ints[6], ints[7])?,
            });
        }
        // RowGroup 2 on, up to the ordinal (7), which the final footer writes only when
        // every row group's fits in an i16. They follow field 1 here as there.
        let start = c.pos;
        let (mut last, mut tail_last) = (1, 1);
        let mut end = None;
        loop {
            let header = c.pos;
            let Some(f) = c.field(last)? else {
                end.get_or_insert(header);
                break;
            };
            match f.id {
                ..=6 => tail_last = f.id,
                7 => {
                    end.get_or_insert(header);
                }
                _ => return Err(general("row group fields past 7")),
            }
            c.skip_field_value(f.kind)?;
            last = f.id;
        }
        let end = end.expect("set at the stop byte at the latest");
        Ok(Pieces {
            columns: chunks,
            tail: &meta[start..end],
            tail_last,
        })
    }
}

/// The footer of a file without row groups, cut where the row count and the row groups go.
struct Frame<'a> {
    /// FileMetaData 1 and 2 (version, schema).
    head: &'a [u8],
    /// FileMetaData 5 on (key-value metadata, created_by, column orders) and the stop byte.
    rest: &'a [u8],
}

impl<'a> Frame<'a> {
    fn of(file: &'a [u8]) -> Result<Self> {
        let meta = footer_of(file)?;
        let mut c = Cursor::new(meta);
        let mut last = 0;
        let mut head = None;
        for want in 1..=4 {
            let at = c.pos;
            let f = c.field(last)?.ok_or_else(|| general("short frame"))?;
            if f.id != want {
                return Err(general("frame fields"));
            }
            if want == 3 {
                head = Some(at);
            }
            c.skip_field_value(f.kind)?;
            last = f.id;
        }
        Ok(Frame {
            head: &meta[..head.expect("field 3 seen")],
            rest: &meta[c.pos..],
        })
    }
}

/// An unnamed temporary file written in order, then read back once.
struct Spill {
    out: BufWriter<File>,
}

impl Spill {
    fn new(dir: &Path) -> Result<Self> {
        let file = tempfile::tempfile_in(dir).map_err(|e| {
            ParquetError::General(format!(
                "cannot create a temporary file in {}: {e}",
                dir.display()
            ))
        })?;
        Ok(Spill {
            out: BufWriter::with_capacity(1 << 16, file),
        })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.write_all(bytes)?;
        Ok(())
    }

    /// Everything written, from the start.
    fn reader(self) -> Result<BufReader<File>> {
        let mut file = self.out.into_inner().map_err(|e| e.into_error())?;
        file.seek(SeekFrom::Start(0))?;
        Ok(BufReader::with_capacity(1 << 16, file))
    }

    /// Copies everything written to `to`; the number of bytes.
    fn copy_to(self, to: &mut TrackedWrite<File>) -> Result<u64> {
        let mut r = self.reader()?;
        Ok(std::io::copy(&mut r, to)?)
    }
}

fn read_u32(r: &mut impl Read) -> Result<u32> {
    let mut b = [0; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn read_i16(r: &mut impl Read) -> Result<i16> {
    let mut b = [0; 2];
    r.read_exact(&mut b)?;
    Ok(i16::from_le_bytes(b))
}

/// A length-prefixed piece of a spilled record.
fn read_piece(r: &mut impl Read, into: &mut Vec<u8>) -> Result<()> {
    let n = read_u32(r)? as usize;
    let at = into.len();
    into.resize(at + n, 0);
    r.read_exact(&mut into[at..])?;
    Ok(())
}
