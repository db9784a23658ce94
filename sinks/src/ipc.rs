//! Arrow IPC file ("Feather v2") layout: the batches as they are in memory, uncompressed,
//! so a reader can memory-map the file and use it without decoding. The file metadata
//! ([`crate::FileMeta`]) goes into the schema's metadata, where pyarrow
//! (`reader.schema.metadata`) and polars find it.
//!
//! An IPC file may not replace a dictionary between batches, only extend it (a delta), so
//! the writer asks for delta dictionaries: the enum columns never change, and
//! `coverage.image` only grows (see [`crate::convert::coverage_with_images`]).

use std::fs::File;
use std::io::BufWriter;

use arrow::ipc::writer::{DictionaryHandling, FileWriter, IpcWriteOptions};
use arrow_schema::{ArrowError, Schema};

pub(crate) type IpcWriter = FileWriter<BufWriter<File>>;

pub(crate) fn open(file: File, schema: &Schema) -> Result<IpcWriter, ArrowError> {
    // The IPC writer emits many small writes (message headers, padding) per batch.
    let options = IpcWriteOptions::default().with_dictionary_handling(DictionaryHandling::Delta);
    FileWriter::try_new_with_options(BufWriter::with_capacity(1 << 20, file), schema, options)
}

/// Writes the footer and hands back the file, flushed.
pub(crate) fn close(writer: IpcWriter) -> Result<File, ArrowError> {
    writer
        .into_inner()?
        .into_inner()
        .map_err(|e| ArrowError::from(e.into_error()))
}
