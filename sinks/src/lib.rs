//! # tracemill-sinks
//!
//! Writers for tracemill's output tables (`branches`, `events`, `timing`, `coverage`,
//! `edges`; schemas in [`tracemill_schemas::arrow`]).
//!
//! Two steps, usable separately:
//!
//! 1. [`convert`] turns the decoder's columns ([`tracemill_decode::rows`]) into Arrow
//!    `RecordBatch`es with exactly the tables' schemas. The big columns are moved, not
//!    copied, so this can run on the decoding threads.
//! 2. [`TableWriter`] appends batches to one file per table and publishes it on
//!    [`finish`](TableWriter::finish), as Parquet ([`parquet`], the default) or as an
//!    Arrow IPC file ([`ipc`]), chosen by [`Format`].
//!
//! ## What a writer guarantees
//!
//! - **All or nothing.** Rows go to a hidden temporary file in the destination directory
//!   (`.branches.parquet.tmp-<pid>-<n>`). `finish` writes the footer, fsyncs, and renames it
//!   to the final name; until then a file of that name from an earlier run is untouched.
//!   A writer dropped without `finish` (an error, a panic) deletes its temporary. A reader
//!   never sees a truncated table, even after a crash. After a failed write the writer
//!   refuses to publish ([`Error::Poisoned`]). Only a hard kill leaves a temporary behind;
//!   [`remove_stale_temporaries`] removes those of processes that are gone.
//! - **Bounded memory.** Parquet holds at most one row group (about 1M rows, see
//!   [`WriterOptions`]) before writing it out; Arrow IPC writes each batch immediately,
//!   except `coverage` (one row per basic block), which it holds until `finish` so that the
//!   file gets a single `image` dictionary.
//! - **The schema contract.** Batches must have the table's columns (checked on every
//!   write). `UInt64` stays unsigned for every reader (DuckDB `UBIGINT`), enum columns are
//!   dictionary-encoded strings (DuckDB `VARCHAR`), and every file carries the
//!   [`tracemill_schemas::meta`] key-value metadata: schema version, tracemill version,
//!   source trace and size, `rtit_ctl` (hex), table name, plus [`FileMeta::extra`] — in
//!   the Parquet footer and in the embedded Arrow schema (where pyarrow looks), or in the
//!   IPC file's schema. A `coverage` file names at most 127 images
//!   ([`convert::MAX_IMAGES`]), so that every reader can load its `Int8` dictionary.
//! - **Errors name the file** ([`Error`]); conversion problems say which column and row
//!   ([`ConvertError`]).
//!
//! ## Example
//!
//! ```
//! use tracemill_decode::rows::{BranchColumns, BranchRow};
//! use tracemill_schemas::BranchKind;
//! use tracemill_sinks::{FileMeta, TableWriter, WriterOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let meta = FileMeta {
//!     source: "bundle/trace.rtit".into(),
//!     source_size: 4096,
//!     rtit_ctl: 0x2e0d,
//!     extra: vec![("host".into(), "build-17".into())],
//! };
//! let mut w = TableWriter::create_in(dir.path(), "branches", &meta, &WriterOptions::default())?;
//!
//! let mut cols = BranchColumns::default(); // what the decoder hands over, chunk by chunk
//! cols.push(&BranchRow {
//!     ip: 0x401000, target: Some(0x401020), kind: BranchKind::Cond, taken: true,
//!     compressed: false, insns: 4, tsc: None, cycles: None, cr3: None, offset: 0x40,
//! });
//! w.write_branches(cols)?; // seq is numbered by the writer: 0, 1, ...
//!
//! let written = w.finish()?; // only now does branches.parquet appear
//! assert_eq!(written.rows, 1);
//! assert!(written.path.ends_with("branches.parquet"));
//! # Ok(()) }
//! ```

mod aligned;
mod atomic;
mod chunks;
pub mod convert;
mod error;
mod footer;
pub mod ipc;
pub mod parquet;
mod writer;

#[cfg(test)]
mod tests;

pub use atomic::{publish_together, remove_stale_temporaries, Unpublished};
pub use error::{ConvertError, Error};
pub use writer::{
    Codec, EncodedRowGroup, FileMeta, Format, RowGroupEncoder, TableWriter, WriterOptions, Written,
};
