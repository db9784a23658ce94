//! Arrow IPC file ("Feather v2") layout: the batches as they are in memory, uncompressed,
//! so a reader can memory-map the file and use it without decoding. The file metadata
//! ([`crate::FileMeta`]) goes into the schema's metadata, where pyarrow
//! (`reader.schema.metadata`) and polars find it.
//!
//! An IPC file has one dictionary per column for the whole file (the format allows
//! "delta" extensions, but polars cannot read them). The enum columns always carry their
//! enum's full name list, so they never change; `coverage` batches are held by the
//! [`TableWriter`](crate::TableWriter) and written at `finish` with one dictionary of
//! every image name in the file.

use std::fs::File;
use std::io::BufWriter;

use arrow_ipc::writer::FileWriter;
use arrow_schema::{ArrowError, Schema};

pub(crate) type IpcWriter = FileWriter<BufWriter<File>>;

pub(crate) fn open(file: File, schema: &Schema) -> Result<IpcWriter, ArrowError> {
    // The IPC writer emits many small writes (message headers, padding) per batch.
    FileWriter::try_new(BufWriter::with_capacity(1 << 20, file), schema)
}

/// Writes the footer and hands back the file, flushed.
pub(crate) fn close(writer: IpcWriter) -> Result<File, ArrowError> {
    writer
        .into_inner()?
        .into_inner()
        .map_err(|e| ArrowError::from(e.into_error()))
}
