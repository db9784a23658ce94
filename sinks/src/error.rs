//! Errors of the sinks. Conversion errors are about the data and carry no path; every
//! writer error names the file it concerns, so a batch ingest of thousands of bundles can
//! print one line that says which output failed and why.

use std::io;
use std::path::PathBuf;

use arrow_schema::ArrowError;
use parquet::errors::ParquetError;

/// The decoder's columns could not become a `RecordBatch`. These are bugs in the producer
/// (columns of different lengths, an enum code out of range) or a limit of the schema.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConvertError {
    /// A column is shorter or longer than the table's other columns.
    #[error("{table}.{column}: {len} values, expected {expected}")]
    ColumnLength {
        table: &'static str,
        column: &'static str,
        len: usize,
        expected: usize,
    },
    /// An enum code has no name (the schema's dictionary cannot index it).
    #[error("{table}.{column}: code {code} at row {row} is not a valid {what}")]
    BadCode {
        table: &'static str,
        column: &'static str,
        row: usize,
        code: u8,
        what: &'static str,
    },
    /// `coverage.image` is `Dictionary(Int8, Utf8)`: at most
    /// [`MAX_IMAGES`](crate::convert::MAX_IMAGES) distinct names per file.
    #[error("coverage.image: {count} distinct image names, more than the 127 that Int8 dictionary keys allow readers to load")]
    TooManyImages { count: usize },
    /// Arrow rejected the assembled batch (should not happen once the checks above pass).
    #[error("{table}: {source}")]
    Arrow {
        table: &'static str,
        #[source]
        source: ArrowError,
    },
}

/// A table writer failed. Every variant except [`Error::UnknownTable`] names the final
/// path of the file being written (not the temporary name, which the user never sees).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("unknown table {0:?} (expected one of branches, events, timing, coverage, edges)")]
    UnknownTable(String),
    /// Reading or writing the file system failed; `op` says what we were doing.
    #[error("{}: {op}: {source}", path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: io::Error,
    },
    /// The rows could not be converted to the table's Arrow schema.
    #[error("{}: {source}", path.display())]
    Convert {
        path: PathBuf,
        #[source]
        source: ConvertError,
    },
    /// A batch given to [`TableWriter::write`](crate::TableWriter::write) does not have the
    /// table's columns.
    #[error("{}: batch does not match the {table} schema: {detail}", path.display())]
    SchemaMismatch {
        path: PathBuf,
        table: &'static str,
        detail: String,
    },
    #[error("{}: parquet: {source}", path.display())]
    Parquet {
        path: PathBuf,
        #[source]
        source: ParquetError,
    },
    #[error("{}: arrow ipc: {source}", path.display())]
    Arrow {
        path: PathBuf,
        #[source]
        source: ArrowError,
    },
    /// An earlier write failed half-way, so the file may be inconsistent; it will not be
    /// published.
    #[error("{}: an earlier write failed; the file was discarded", path.display())]
    Poisoned { path: PathBuf },
}

impl Error {
    #[cold]
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, source: io::Error) -> Self {
        Error::Io {
            path: path.into(),
            op,
            source,
        }
    }
}
