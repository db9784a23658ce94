//! [`TableWriter`]: one table, one file, written incrementally and published atomically.

use std::fmt;
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ::parquet::arrow::arrow_writer::{
    compute_leaves, ArrowColumnChunk, ArrowColumnWriter, ArrowRowGroupWriterFactory,
};
use ::parquet::arrow::ArrowWriter;
use ::parquet::column::writer::ColumnCloseResult;
use ::parquet::errors::ParquetError;
use ::parquet::file::properties::WriterPropertiesPtr;
use ::parquet::file::writer::SerializedRowGroupWriter;
use ::parquet::schema::types::ColumnDescPtr;
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, DictionaryArray, Int32Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, FieldRef, Schema, SchemaRef};
use bytes::Bytes;
use rayon::prelude::*;
use tracemill_decode::rows::{BranchColumns, CoverageRow, EdgeRow, EventRow, TimingColumns};
use tracemill_schemas::{meta, SCHEMA_VERSION, TABLES};

use crate::aligned::{aligned_arrays, Restager};
use crate::atomic::{PendingFile, Unpublished};
use crate::convert::ImageDictionary;
use crate::footer::RowGroupFile;
use crate::{chunks, convert, ipc, parquet, ConvertError, Error};

/// Output file format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Format {
    /// Parquet, compressed and indexed for queries (see [`crate::parquet`]).
    #[default]
    Parquet,
    /// Arrow IPC file, uncompressed and memory-mappable (see [`crate::ipc`]).
    ArrowIpc,
}

impl Format {
    /// File extension, without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Parquet => "parquet",
            Format::ArrowIpc => "arrow",
        }
    }

    /// Conventional file name of a table: `branches.parquet`, `events.arrow`, ...
    pub fn file_name(self, table: &str) -> String {
        format!("{table}.{}", self.extension())
    }
}

/// Facts about the trace that every output file records in its key-value metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileMeta {
    /// Path of the trace (or bundle) the table was decoded from.
    pub source: String,
    /// Its size in bytes.
    pub source_size: u64,
    /// The RTIT_CTL value the trace was collected with.
    pub rtit_ctl: u64,
    /// More pairs (bundle labels, tool options). A key equal to one of the standard keys
    /// ([`tracemill_schemas::meta`]) replaces the standard value, e.g. `tracemill.version`
    /// for a build-specific version string.
    pub extra: Vec<(String, String)>,
}

impl FileMeta {
    /// The key-value pairs of a `table` file: the standard keys in a fixed order, then
    /// `extra`.
    pub fn key_values(&self, table: &str) -> Vec<(String, String)> {
        let mut kv: Vec<(String, String)> = [
            (meta::SCHEMA_VERSION, SCHEMA_VERSION.to_string()),
            (
                meta::TRACEMILL_VERSION,
                env!("CARGO_PKG_VERSION").to_string(),
            ),
            (meta::SOURCE, self.source.clone()),
            (meta::SOURCE_SIZE, self.source_size.to_string()),
            (meta::RTIT_CTL, format!("{:#x}", self.rtit_ctl)),
            (meta::TABLE, table.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        for (k, v) in &self.extra {
            // Readers turn the pairs into a map; a duplicate key would be ambiguous.
            match kv.iter_mut().find(|(known, _)| known == k) {
                Some(slot) => slot.1 = v.clone(),
                None => kv.push((k.clone(), v.clone())),
            }
        }
        kv
    }

    /// The Arrow schema of a `table` file: the table's columns (with their documentation)
    /// and, as schema metadata, the table's own metadata and [`key_values`](Self::key_values),
    /// as every file embeds it. `None` for a name not in [`TABLES`].
    pub fn schema(&self, table: &str) -> Option<SchemaRef> {
        let schema = tracemill_schemas::arrow::by_name(table)?;
        let mut md = schema.metadata().clone();
        md.extend(self.key_values(table));
        Some(Arc::new(Schema::new_with_metadata(
            schema.fields().clone(),
            md,
        )))
    }
}

/// The compression of a Parquet file's pages. ZSTD is the default: the smallest tables
/// for about the CPU time of the others (benches/README.md, "Compression").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Codec {
    #[default]
    Zstd,
    /// LZ4 (Parquet's `LZ4_RAW`, the block format every current reader takes).
    Lz4,
    Snappy,
    /// No compression.
    None,
}

/// Knobs of a [`TableWriter`]; `Default` is what `tracemill decode` uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriterOptions {
    pub format: Format,
    /// Parquet: maximum rows per row group (0 is taken as 1).
    pub max_row_group_rows: usize,
    /// Parquet: the page compression.
    pub codec: Codec,
    /// Parquet: ZSTD level (1–22; negative levels are zstd's fast modes), when `codec` is
    /// [`Codec::Zstd`].
    pub zstd_level: i32,
    /// Parquet: maximum rows per data page (pages also stop at 1 MiB); 0 is taken as 1.
    pub data_page_rows: usize,
    /// Columns appended to every row of the table, each a name and one string value
    /// (`tracemill ingest` adds `bundle`). They are dictionary-encoded: a value costs a few
    /// bytes per row group, not per row. A name equal to one of the table's columns is an
    /// error.
    pub constant_columns: Vec<(String, String)>,
    /// The row tables (`branches`, `events`, `timing`) have the perf.data columns
    /// `cpu`, `pid`, `tid`, `time` after their own
    /// ([`tracemill_schemas::arrow::thread_fields`]); batches written must carry them.
    pub thread_columns: bool,
    /// Fsync the directory after renaming a finished file into place, so that the name
    /// survives a crash (the default). `tracemill ingest` turns it off for the files it
    /// writes in its staging directory: it renames them again into the dataset and syncs
    /// that directory, so syncing the staging one too only costs time.
    pub sync_directory: bool,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            format: Format::Parquet,
            max_row_group_rows: parquet::DEFAULT_MAX_ROW_GROUP_ROWS,
            codec: Codec::Zstd,
            zstd_level: parquet::DEFAULT_ZSTD_LEVEL,
            data_page_rows: parquet::DEFAULT_DATA_PAGE_ROWS,
            constant_columns: Vec::new(),
            thread_columns: false,
            sync_directory: true,
        }
    }
}

/// What [`TableWriter::finish`] published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub path: PathBuf,
    pub table: &'static str,
    pub rows: u64,
    /// Size of the file.
    pub bytes: u64,
}

enum Sink {
    Parquet(ArrowWriter<File>),
    /// Parquet whose row groups are encoded elsewhere ([`RowGroupEncoder`]) and appended
    /// here in order, the footer held on disk until the end ([`crate::footer`]).
    ParquetRowGroups(RowGroupFile),
    Ipc(ipc::IpcWriter),
    /// Transient, while switching from `Parquet` to `ParquetRowGroups`.
    Switching,
}

/// Encodes Parquet row groups of one table on any thread (e.g. a pool of decoders), for
/// [`TableWriter::append_encoded`] to write in order. The columns and encodings are the
/// writer's; row groups are as large as what is passed in.
#[derive(Clone)]
pub struct RowGroupEncoder {
    factory: Arc<ArrowRowGroupWriterFactory>,
    /// The file's columns: the table's, then the constant ones.
    schema: SchemaRef,
    constants: Arc<Constants>,
    /// Per column of `schema`: the Parquet column and which of [`chunks`] writes it, for
    /// the columns tracemill encodes itself (string and integer dictionaries, deltas,
    /// booleans).
    keyed: Arc<Vec<Option<(ColumnDescPtr, chunks::Kind)>>>,
    props: WriterPropertiesPtr,
    path: PathBuf,
}

impl fmt::Debug for RowGroupEncoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RowGroupEncoder")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// A row group encoded by a [`RowGroupEncoder`], not yet in the file.
pub struct EncodedRowGroup {
    chunks: Vec<EncodedColumn>,
    rows: u64,
}

enum EncodedColumn {
    Arrow(ArrowColumnChunk),
    /// From [`chunks::encode`]: the chunk's bytes and its metadata.
    Keyed(Bytes, ColumnCloseResult),
}

impl EncodedRowGroup {
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Appends the columns, in order, to a row group of the file.
    fn append_to(self, rgw: &mut SerializedRowGroupWriter<'_, File>) -> Result<(), ParquetError> {
        for c in self.chunks {
            match c {
                EncodedColumn::Arrow(c) => c.append_to_row_group(rgw)?,
                EncodedColumn::Keyed(bytes, close) => rgw.append_column(&bytes, close)?,
            }
        }
        Ok(())
    }
}

impl RowGroupEncoder {
    /// Encode `batches` (the table's columns) as row group number `index` of the file
    /// (row groups are numbered 0, 1, ... in the order they are appended).
    pub fn encode(&self, index: usize, batches: &[RecordBatch]) -> Result<EncodedRowGroup, Error> {
        let perr = |source| Error::Parquet {
            path: self.path.clone(),
            source,
        };
        let writers = self.factory.create_column_writers(index).map_err(perr)?;
        let mut extended = Vec::with_capacity(batches.len());
        for b in batches {
            let b = self
                .constants
                .extend(b)
                .map_err(|e| perr(::parquet::errors::ParquetError::from(e)))?;
            if b.num_columns() != self.schema.fields().len() {
                return Err(Error::SchemaMismatch {
                    path: self.path.clone(),
                    table: "",
                    detail: format!(
                        "{} columns, the table has {}",
                        b.num_columns(),
                        self.schema.fields().len()
                    ),
                });
            }
            extended.push(b);
        }
        let rows = extended.iter().map(|b| b.num_rows() as u64).sum();
        // Flat schemas (`row_group_encoder` checks): one writer per field, so column i is
        // field i. The columns are independent, so they are encoded in parallel on the
        // calling pool: one row group is 50+ ms of work on one thread, and the pipeline
        // waits for row groups in order.
        debug_assert_eq!(writers.len(), self.schema.fields().len());
        // An empty chunk has no data page for its metadata to point at: arrow-rs writes
        // those.
        let keyed_ok = rows > 0;
        let encode_column = |(i, mut w): (usize, ArrowColumnWriter)| {
            let column: Vec<ArrayRef> = extended.iter().map(|b| b.column(i).clone()).collect();
            if let Some((descr, kind)) = self.keyed[i].as_ref().filter(|_| keyed_ok) {
                // None: a dictionary too large for one page, which arrow-rs writes (it
                // falls back to plain pages).
                if let Some((bytes, close)) =
                    chunks::encode(*kind, descr.clone(), &self.props, &column).map_err(perr)?
                {
                    return Ok(EncodedColumn::Keyed(bytes, close));
                }
            }
            let field = &self.schema.fields()[i];
            let step = self.props.write_batch_size();
            for a in aligned_arrays(&column, step).map_err(|e| perr(e.into()))? {
                for leaf in compute_leaves(field, &a).map_err(perr)? {
                    w.write(&leaf).map_err(perr)?;
                }
            }
            Ok(EncodedColumn::Arrow(w.close().map_err(perr)?))
        };
        let chunks = writers
            .into_par_iter()
            .enumerate()
            .map(encode_column)
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(EncodedRowGroup { chunks, rows })
    }
}

/// Writes one table to one file, batch by batch, and publishes it on [`finish`].
///
/// Until `finish` returns, the data lives in a hidden temporary file next to the final
/// path; dropping the writer (an error elsewhere, a panic) deletes it, and a file of the
/// same name from an earlier run stays as it was. See the [crate docs](crate).
///
/// [`finish`]: TableWriter::finish
pub struct TableWriter {
    // Declared before `pending`: fields drop in order, so the file is closed before the
    // temporary is removed.
    sink: Sink,
    pending: PendingFile,
    table: &'static str,
    format: Format,
    schema: SchemaRef,
    /// Constant columns appended to every batch ([`WriterOptions::constant_columns`]).
    constants: Arc<Constants>,
    rows: u64,
    /// [`WriterOptions::sync_directory`].
    sync_directory: bool,
    /// `coverage` only: every image name of the file so far (see [`ImageDictionary`]).
    images: Option<ImageDictionary>,
    /// Arrow IPC `coverage` only: the batches, held until `finish` can give them one
    /// dictionary covering every image of the file. Coverage is one row per basic block,
    /// so this stays small.
    held: Option<Vec<RecordBatch>>,
    /// Parquet: rows handed to arrow-rs in runs of `write_batch_size` (see `aligned.rs`).
    restage: Restager,
    poisoned: bool,
}

impl fmt::Debug for TableWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableWriter")
            .field("path", &self.pending.dest())
            .field("table", &self.table)
            .field("format", &self.format)
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

impl TableWriter {
    /// A Parquet writer with the default options.
    pub fn create(path: impl AsRef<Path>, table: &str, meta: &FileMeta) -> Result<Self, Error> {
        Self::create_with(path, table, meta, &WriterOptions::default())
    }

    /// A writer for `dir/<table>.<extension>`.
    pub fn create_in(
        dir: impl AsRef<Path>,
        table: &str,
        meta: &FileMeta,
        options: &WriterOptions,
    ) -> Result<Self, Error> {
        let path = dir.as_ref().join(options.format.file_name(table));
        Self::create_with(path, table, meta, options)
    }

    /// A writer of `table` (one of [`tracemill_schemas::TABLES`]) that will publish `path`.
    pub fn create_with(
        path: impl AsRef<Path>,
        table: &str,
        meta: &FileMeta,
        options: &WriterOptions,
    ) -> Result<Self, Error> {
        let path = path.as_ref();
        let table = TABLES
            .iter()
            .copied()
            .find(|t| *t == table)
            .ok_or_else(|| Error::UnknownTable(table.to_string()))?;
        let schema = if options.thread_columns {
            tracemill_schemas::arrow::with_thread_fields(table)
        } else {
            tracemill_schemas::arrow::by_name(table)
        }
        .expect("every table has a schema");
        // The file's Arrow schema carries the metadata too: pyarrow shows only the embedded
        // Arrow schema's metadata (not the Parquet footer's), and for IPC it is the only
        // place. Batches keep the bare table schema; the writers do not compare them.
        let with_meta = meta.schema(table).expect("every table has a schema");
        let kv = meta.key_values(table);
        let parquet_err = |source| Error::Parquet {
            path: path.to_path_buf(),
            source,
        };
        // Settle the properties before creating anything, so a bad option leaves no file.
        let props = match options.format {
            Format::Parquet => {
                Some(parquet::writer_properties(table, kv, options).map_err(parquet_err)?)
            }
            Format::ArrowIpc => None,
        };
        let constants = Constants::new(&options.constant_columns);
        let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
        for f in &constants.fields {
            if fields.iter().any(|known| known.name() == f.name()) {
                return Err(Error::SchemaMismatch {
                    path: path.to_path_buf(),
                    table,
                    detail: format!("constant column {:?} is a column of the table", f.name()),
                });
            }
            fields.push(f.clone());
        }
        let file_schema = Arc::new(Schema::new_with_metadata(
            fields,
            with_meta.metadata().clone(),
        ));
        let (pending, file) = PendingFile::create(path)?;
        let step = props.as_ref().map_or(1, |p| p.write_batch_size());
        let sink = match props {
            Some(props) => {
                Sink::Parquet(parquet::open(file, file_schema, props).map_err(parquet_err)?)
            }
            None => Sink::Ipc(
                ipc::open(file, &file_schema).map_err(|source| Error::Arrow {
                    path: path.to_path_buf(),
                    source,
                })?,
            ),
        };
        let coverage = table == "coverage";
        Ok(TableWriter {
            sink,
            pending,
            table,
            format: options.format,
            schema,
            constants: Arc::new(constants),
            rows: 0,
            sync_directory: options.sync_directory,
            images: coverage.then(ImageDictionary::default),
            held: (coverage && options.format == Format::ArrowIpc).then(Vec::new),
            restage: Restager::new(step),
            poisoned: false,
        })
    }

    /// The final path (where the file appears on `finish`).
    pub fn path(&self) -> &Path {
        self.pending.dest()
    }

    pub fn table(&self) -> &'static str {
        self.table
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// Rows accepted so far.
    pub fn rows_written(&self) -> u64 {
        self.rows
    }

    /// Appends a batch. Its columns must be the table's (names, types, nullability, in
    /// order); field metadata is not compared.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), Error> {
        self.check_schema(batch)?;
        if self.poisoned {
            return Err(Error::Poisoned {
                path: self.path().to_path_buf(),
            });
        }
        if batch.num_rows() == 0 {
            return Ok(());
        }
        if let Some(images) = &mut self.images {
            // Before anything is written, so a rejected batch leaves the file usable.
            images.add(batch).map_err(|source| Error::Convert {
                path: self.pending.dest().to_path_buf(),
                source,
            })?;
        }
        if let Some(held) = &mut self.held {
            held.push(batch.clone());
            self.rows += batch.num_rows() as u64;
            return Ok(());
        }
        let batch = &self
            .constants
            .extend(batch)
            .map_err(|source| Error::Arrow {
                path: self.pending.dest().to_path_buf(),
                source,
            })?;
        let r = match &mut self.sink {
            Sink::Parquet(w) => {
                let path = self.pending.dest();
                self.restage
                    .push(batch.clone())
                    .map_err(|source| Error::Arrow {
                        path: path.to_path_buf(),
                        source,
                    })
                    .and_then(|runs| {
                        runs.iter().try_for_each(|run| {
                            w.write(run).map_err(|source| Error::Parquet {
                                path: path.to_path_buf(),
                                source,
                            })
                        })
                    })
            }
            Sink::Ipc(w) => w.write(batch).map_err(|source| Error::Arrow {
                path: self.pending.dest().to_path_buf(),
                source,
            }),
            Sink::ParquetRowGroups(_) | Sink::Switching => Err(Error::SchemaMismatch {
                path: self.pending.dest().to_path_buf(),
                table: self.table,
                detail: "this writer takes encoded row groups (append_encoded)".into(),
            }),
        };
        match r {
            Ok(()) => {
                self.rows += batch.num_rows() as u64;
                Ok(())
            }
            Err(e) => {
                // The writer may hold half a row group; never publish what follows.
                self.poisoned = true;
                Err(e)
            }
        }
    }

    /// From now on, row groups are encoded by the returned [`RowGroupEncoder`] (on any
    /// thread) and appended with [`TableWriter::append_encoded`]. Parquet only, and only
    /// before any row was written through [`TableWriter::write`].
    pub fn row_group_encoder(&mut self) -> Result<RowGroupEncoder, Error> {
        let path = self.pending.dest().to_path_buf();
        self.check_encodable()?;
        match std::mem::replace(&mut self.sink, Sink::Switching) {
            Sink::Parquet(w) => {
                let perr = |source| Error::Parquet {
                    path: path.clone(),
                    source,
                };
                let (mut writer, factory) = w.into_serialized_writer().map_err(perr)?;
                // Nothing but the magic is written yet: the file starts again under a
                // writer that keeps the footer on disk.
                let io = |e: std::io::Error| perr(e.into());
                writer.flush().map_err(io)?;
                let mut file = writer.inner().try_clone().map_err(io)?;
                let schema_descr = Arc::new(writer.schema_descr().clone());
                let props = writer.properties().clone();
                drop(writer);
                file.set_len(0).map_err(io)?;
                file.seek(SeekFrom::Start(0)).map_err(io)?;
                let dir = path.parent().unwrap_or(Path::new("."));
                let writer =
                    RowGroupFile::new(file, dir, schema_descr, props.clone()).map_err(perr)?;
                let encoder = self.encoder(factory, writer.schema_descr().columns(), props);
                self.sink = Sink::ParquetRowGroups(writer);
                Ok(encoder)
            }
            other => {
                self.sink = other;
                Err(Error::SchemaMismatch {
                    path,
                    table: self.table,
                    detail: "row groups can be encoded elsewhere for Parquet only".into(),
                })
            }
        }
    }

    /// Row groups can be encoded elsewhere only from the start, and for flat tables.
    fn check_encodable(&self) -> Result<(), Error> {
        let path = self.pending.dest().to_path_buf();
        if self.rows > 0 || self.images.is_some() {
            return Err(Error::SchemaMismatch {
                path,
                table: self.table,
                detail: "row groups can be encoded elsewhere only from the start".into(),
            });
        }
        let flat = self
            .schema
            .fields()
            .iter()
            .all(|f| !f.data_type().is_nested());
        if !flat {
            return Err(Error::SchemaMismatch {
                path,
                table: self.table,
                detail: "row groups are encoded elsewhere only for flat tables".into(),
            });
        }
        Ok(())
    }

    fn encoder(
        &self,
        factory: ArrowRowGroupWriterFactory,
        leaves: &[ColumnDescPtr],
        props: WriterPropertiesPtr,
    ) -> RowGroupEncoder {
        let mut fields: Vec<_> = self.schema.fields().iter().cloned().collect();
        fields.extend(self.constants.fields.iter().cloned());
        // Row groups are encoded column by column, field i as leaf column i: every table
        // is flat (`check_encodable`).
        let keyed = fields
            .iter()
            .zip(leaves)
            .map(|(f, leaf)| chunks::kind(f, leaf.path(), &props).map(|k| (leaf.clone(), k)))
            .collect();
        RowGroupEncoder {
            factory: Arc::new(factory),
            schema: Arc::new(Schema::new(fields)),
            constants: self.constants.clone(),
            keyed: Arc::new(keyed),
            props,
            path: self.pending.dest().to_path_buf(),
        }
    }

    /// The file arrow-rs's own `SerializedFileWriter` writes from these row groups, its
    /// footer held in memory: what [`crate::footer`] must write byte for byte.
    #[cfg(test)]
    pub(crate) fn bytes_with_arrow_rs_footer(mut self, row_groups: &[Vec<RecordBatch>]) -> Vec<u8> {
        self.check_encodable().unwrap();
        let Sink::Parquet(w) = std::mem::replace(&mut self.sink, Sink::Switching) else {
            panic!("a Parquet writer");
        };
        let (mut writer, factory) = w.into_serialized_writer().unwrap();
        let props = writer.properties().clone();
        let encoder = self.encoder(factory, writer.schema_descr().columns(), props);
        for (i, batches) in row_groups.iter().enumerate() {
            let rg = encoder.encode(i, batches).unwrap();
            let mut rgw = writer.next_row_group().unwrap();
            rg.append_to(&mut rgw).unwrap();
            rgw.close().unwrap();
        }
        drop(writer.into_inner().unwrap());
        std::fs::read(self.pending.tmp()).unwrap()
    }

    /// Append a row group from this writer's [`RowGroupEncoder`] (in the order of the
    /// indexes they were encoded with).
    pub fn append_encoded(&mut self, rg: EncodedRowGroup) -> Result<(), Error> {
        let path = self.pending.dest().to_path_buf();
        let Sink::ParquetRowGroups(w) = &mut self.sink else {
            return Err(Error::SchemaMismatch {
                path,
                table: self.table,
                detail: "append_encoded without row_group_encoder".into(),
            });
        };
        let perr = |source| Error::Parquet {
            path: path.clone(),
            source,
        };
        let rows = rg.rows;
        let r = w.append(|rgw| rg.append_to(rgw));
        match r {
            Ok(()) => {
                self.rows += rows;
                Ok(())
            }
            Err(e) => {
                self.poisoned = true;
                Err(perr(e))
            }
        }
    }

    /// Appends `branches` rows. An empty `cols.seq` is filled in from the rows already
    /// written, so a file written batch by batch is numbered 0, 1, 2, ... throughout.
    pub fn write_branches(&mut self, cols: BranchColumns) -> Result<(), Error> {
        let b = convert::branches(cols, self.rows).map_err(|e| self.convert_err(e))?;
        self.write(&b)
    }

    pub fn write_events(&mut self, rows: &[EventRow]) -> Result<(), Error> {
        let b = convert::events(rows).map_err(|e| self.convert_err(e))?;
        self.write(&b)
    }

    pub fn write_timing(&mut self, cols: TimingColumns) -> Result<(), Error> {
        let b = convert::timing(cols).map_err(|e| self.convert_err(e))?;
        self.write(&b)
    }

    /// Appends `coverage` rows. A file holds at most [`convert::MAX_IMAGES`] (127) distinct
    /// image names (the schema's Int8 dictionary keys); a batch that would exceed it is
    /// rejected, and the file stays usable.
    pub fn write_coverage(&mut self, rows: &[CoverageRow]) -> Result<(), Error> {
        let b = convert::coverage(rows).map_err(|e| self.convert_err(e))?;
        self.write(&b)
    }

    pub fn write_edges(&mut self, rows: &[EdgeRow]) -> Result<(), Error> {
        let b = convert::edges(rows).map_err(|e| self.convert_err(e))?;
        self.write(&b)
    }

    /// Writes the footer, makes the file durable and renames it to its final path.
    pub fn finish(self) -> Result<Written, Error> {
        let sync_directory = self.sync_directory;
        let (file, written) = self.finish_unpublished()?;
        let dest = written.path.clone();
        file.pending.rename()?;
        if sync_directory {
            crate::atomic::sync_dir(&dest);
        }
        Ok(written)
    }

    /// Writes the footer and makes the file durable under its temporary name, without
    /// publishing it: give it to [`crate::publish_together`] with the other tables of the
    /// same run, so that they appear together.
    pub fn finish_unpublished(self) -> Result<(Unpublished, Written), Error> {
        let TableWriter {
            mut sink,
            pending,
            table,
            rows,
            images,
            held,
            poisoned,
            constants,
            mut restage,
            ..
        } = self;
        let path = pending.dest().to_path_buf();
        if poisoned {
            return Err(Error::Poisoned { path });
        }
        if let (Some(held), Some(images), Sink::Ipc(w)) = (held, images, &mut sink) {
            let values = images.values();
            for b in held {
                let b = images.rekey(&b, &values).map_err(|source| Error::Convert {
                    path: path.clone(),
                    source,
                })?;
                let b = constants.extend(&b).map_err(|source| Error::Arrow {
                    path: path.clone(),
                    source,
                })?;
                w.write(&b).map_err(|source| Error::Arrow {
                    path: path.clone(),
                    source,
                })?;
            }
        }
        if let Sink::Parquet(w) = &mut sink {
            let rest = restage.finish().map_err(|source| Error::Arrow {
                path: path.clone(),
                source,
            })?;
            if let Some(rest) = rest {
                w.write(&rest).map_err(|source| Error::Parquet {
                    path: path.clone(),
                    source,
                })?;
            }
        }
        let file = match sink {
            // `into_inner` writes the footer and flushes (calling `finish` first would
            // write the footer twice).
            Sink::Parquet(w) => w.into_inner().map_err(|source| Error::Parquet {
                path: path.clone(),
                source,
            })?,
            Sink::ParquetRowGroups(w) => w.finish().map_err(|source| Error::Parquet {
                path: path.clone(),
                source,
            })?,
            Sink::Ipc(w) => ipc::close(w).map_err(|source| Error::Arrow {
                path: path.clone(),
                source,
            })?,
            Sink::Switching => unreachable!("a writer is never left switching"),
        };
        let bytes = pending.sync(file)?;
        Ok((
            Unpublished { pending },
            Written {
                path,
                table,
                rows,
                bytes,
            },
        ))
    }

    fn convert_err(&self, source: ConvertError) -> Error {
        Error::Convert {
            path: self.path().to_path_buf(),
            source,
        }
    }

    fn check_schema(&self, batch: &RecordBatch) -> Result<(), Error> {
        let want = self.schema.fields();
        let got = batch.schema_ref().fields();
        let detail = if want.len() != got.len() {
            Some(format!("{} columns, expected {}", got.len(), want.len()))
        } else {
            want.iter()
                .zip(got.iter())
                .enumerate()
                .find_map(|(i, (w, g))| {
                    let same = w.name() == g.name()
                        && w.data_type() == g.data_type()
                        && w.is_nullable() == g.is_nullable();
                    (!same).then(|| {
                        format!(
                            "column {i} is {} {}{}, expected {} {}{}",
                            g.name(),
                            g.data_type(),
                            if g.is_nullable() { "" } else { " not null" },
                            w.name(),
                            w.data_type(),
                            if w.is_nullable() { "" } else { " not null" },
                        )
                    })
                })
        };
        match detail {
            None => Ok(()),
            Some(detail) => Err(Error::SchemaMismatch {
                path: self.path().to_path_buf(),
                table: self.table,
                detail,
            }),
        }
    }
}

/// The constant columns of a writer ([`WriterOptions::constant_columns`]).
#[derive(Debug, Default)]
struct Constants {
    fields: Vec<FieldRef>,
    /// One single-value string array per column: the dictionary of its keys.
    values: Vec<ArrayRef>,
}

impl Constants {
    fn new(columns: &[(String, String)]) -> Constants {
        let dict = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
        Constants {
            fields: columns
                .iter()
                .map(|(name, _)| Arc::new(Field::new(name, dict.clone(), false)))
                .collect(),
            values: columns
                .iter()
                .map(|(_, v)| Arc::new(StringArray::from(vec![v.as_str()])) as ArrayRef)
                .collect(),
        }
    }

    /// `batch` with the constant columns appended (the same batch when there are none).
    fn extend(&self, batch: &RecordBatch) -> Result<RecordBatch, arrow_schema::ArrowError> {
        if self.fields.is_empty() {
            return Ok(batch.clone());
        }
        let keys = Int32Array::from(vec![0; batch.num_rows()]);
        let mut fields: Vec<_> = batch.schema_ref().fields().iter().cloned().collect();
        let mut columns = batch.columns().to_vec();
        for (f, v) in self.fields.iter().zip(&self.values) {
            let col = DictionaryArray::<Int32Type>::try_new(keys.clone(), v.clone())?;
            fields.push(f.clone());
            columns.push(Arc::new(col));
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
    }
}

// The pipeline hands each table's writer to its own thread: keep it `Send`.
const _: () = {
    const fn send<T: Send>() {}
    send::<TableWriter>()
};
