//! The decoded tables handed to a consumer as Arrow batches, in trace order, instead of
//! being written to files (the Python package's `tracemill.decode`).
//!
//! [`channel`] makes a [`BatchSink`] to put in [`run::Options::batches`](crate::run::Options)
//! and the [`Output`] receiver the consumer reads. The decode's emitter (the thread that
//! stitches, times and numbers pieces in order) sends each piece's rows of the tables asked
//! for; the coverage aggregates (`coverage`, `edges`) follow when the trace is done. The
//! channel is bounded: when the consumer falls behind, the emitter waits, the decode
//! window fills and the decode threads stop taking chunks, so memory stays bounded
//! whatever the trace size. When the consumer drops the receiver, the next send fails and
//! the decode stops (its report gets a warning saying so).
//!
//! The rows travel as the decoder's columns and become a `RecordBatch` only in
//! [`Output::batch`], on the consumer's thread: the conversion (row numbers, validity
//! bitmaps) then runs beside the emitter, which is the pipeline's serial stage, rather
//! than on it. The batches are the ones the files are made of: the same schemas (with
//! [`tracemill_sinks::FileMeta::schema`], the same metadata), rows and order.

use arrow_array::RecordBatch;
use crossbeam_channel::{bounded, Receiver, Sender};
use tracemill_decode::chunk::Piece;
use tracemill_decode::coverage::Coverage;
use tracemill_decode::image::ImageSet;
use tracemill_decode::rows::{BranchColumns, CoverageRow, EdgeRow, EventRow, TimingColumns};
use tracemill_sinks::ConvertError;

use std::sync::Arc;

use tracemill_input::perf::threads::{Dates, Threads};

use crate::run::Tables;

/// A perf.data piece's threads, and the time each of its rows, events and timing rows is
/// looked up at (what its rows' thread columns are made of).
pub(crate) type PieceDates<'a> = (&'a Arc<Threads>, &'a Dates, &'a Dates, &'a Dates);

/// The sending end, for [`run::Options::batches`](crate::run::Options): which tables to
/// send, and where.
#[derive(Clone, Debug)]
pub struct BatchSink {
    tx: Sender<Output>,
    tables: Tables,
}

impl BatchSink {
    /// The tables the consumer asked for.
    pub(crate) fn tables(&self) -> Tables {
        self.tables
    }
}

/// A bounded channel of decoded batches: at most `capacity` pieces' rows wait for the
/// consumer (each piece holds the rows of one chunk, at most `--chunk-size` bytes of trace).
pub fn channel(tables: Tables, capacity: usize) -> (BatchSink, Receiver<Output>) {
    let (tx, rx) = bounded(capacity.max(1));
    (BatchSink { tx, tables }, rx)
}

/// The consumer stopped reading (it dropped the receiver).
#[derive(Debug, thiserror::Error)]
#[error("the consumer of the decoded batches stopped reading: decoding stopped")]
pub struct ConsumerGone;

/// Rows of one table, in trace order, ready to become a `RecordBatch`.
#[derive(Debug)]
pub struct Output {
    /// `branches`, `events`, `timing`, `coverage` or `edges`.
    pub table: &'static str,
    /// How far into the trace (a stream offset) decoding had got: the last offset of the
    /// piece's rows (for `coverage` and `edges`, the trace's end). For progress.
    pub position: u64,
    rows: Rows,
    /// A perf.data's rows: their threads, and the time each row's is looked up at.
    threads: Option<(Arc<Threads>, Dates)>,
}

// One value per piece and table, moved through a channel: boxing the large variants would
// add an allocation per piece and save nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Rows {
    /// The rows, and the `seq` of the first.
    Branches(BranchColumns, u64),
    Events(Vec<EventRow>),
    Timing(TimingColumns),
    Coverage(Vec<CoverageRow>),
    Edges(Vec<EdgeRow>),
}

impl Output {
    /// Rows in this batch.
    pub fn rows(&self) -> usize {
        match &self.rows {
            Rows::Branches(c, _) => c.len(),
            Rows::Events(e) => e.len(),
            Rows::Timing(t) => t.len(),
            Rows::Coverage(c) => c.len(),
            Rows::Edges(e) => e.len(),
        }
    }

    /// The batch, with the table's schema ([`tracemill_schemas::arrow`]). The big columns
    /// are moved into Arrow buffers, not copied ([`tracemill_sinks::convert`]).
    pub fn batch(self) -> Result<RecordBatch, ConvertError> {
        use tracemill_sinks::convert;
        let table = self.table;
        let b = match self.rows {
            Rows::Branches(c, first) => convert::branches(c, first),
            Rows::Events(e) => convert::events(&e),
            Rows::Timing(t) => convert::timing(t),
            Rows::Coverage(c) => convert::coverage(&c),
            Rows::Edges(e) => convert::edges(&e),
        }?;
        match self.threads {
            None => Ok(b),
            Some((threads, dates)) => crate::run::threads::append(&threads, &b, &dates)
                .map_err(|source| ConvertError::Arrow { table, source }),
        }
    }
}

impl BatchSink {
    /// Send a sequenced piece's rows of the tables asked for (`first_seq`: its first row's
    /// `seq`), taking them out of the piece; its coverage stays for the aggregate. Waits
    /// while the channel is full. `part_base`: the bytes of the source's parts before this
    /// piece's, so that `position` grows over a whole recording.
    pub(crate) fn send_piece(
        &self,
        p: &mut Piece<BranchColumns>,
        timing: &mut TimingColumns,
        first_seq: u64,
        part_base: u64,
        dates: Option<PieceDates<'_>>,
    ) -> Result<(), ConsumerGone> {
        let position = part_base
            + [
                p.rows.offset.last(),
                p.events.last().map(|e| &e.offset),
                timing.offset.last(),
            ]
            .into_iter()
            .flatten()
            .copied()
            .max()
            .unwrap_or(0);
        let send = |table, rows, which: fn(PieceDates<'_>) -> &Dates| {
            let threads = dates.map(|d| (d.0.clone(), which(d).clone()));
            self.tx
                .send(Output {
                    table,
                    position,
                    rows,
                    threads,
                })
                .map_err(|_| ConsumerGone)
        };
        if self.tables.branches && !p.rows.is_empty() {
            let rows = std::mem::take(&mut p.rows);
            send("branches", Rows::Branches(rows, first_seq), |d| d.1)?;
        }
        if self.tables.events && !p.events.is_empty() {
            let events = std::mem::take(&mut p.events);
            send("events", Rows::Events(events), |d| d.2)?;
        }
        if self.tables.timing && !timing.is_empty() {
            send("timing", Rows::Timing(std::mem::take(timing)), |d| d.3)?;
        }
        Ok(())
    }

    /// Send the aggregates, once the whole trace is decoded (`end`: the trace's length).
    pub(crate) fn send_coverage(
        &self,
        cov: &Coverage,
        images: &ImageSet<'_>,
        end: u64,
    ) -> Result<(), ConsumerGone> {
        let send = |table, rows| {
            self.tx
                .send(Output {
                    table,
                    position: end,
                    rows,
                    threads: None,
                })
                .map_err(|_| ConsumerGone)
        };
        if self.tables.coverage {
            send("coverage", Rows::Coverage(cov.block_rows(images)))?;
        }
        if self.tables.edges {
            send("edges", Rows::Edges(cov.edge_rows()))?;
        }
        Ok(())
    }
}

/// The schema of `table` as a decode with metadata `meta` hands it over: with the thread
/// columns for a perf.data (`threads`), as its files have them.
pub fn table_schema(
    meta: &tracemill_sinks::FileMeta,
    table: &str,
    threads: bool,
) -> Option<arrow_schema::SchemaRef> {
    let with_meta = meta.schema(table)?;
    if !threads {
        return Some(with_meta);
    }
    let fields = tracemill_schemas::arrow::with_thread_fields(table)?
        .fields()
        .clone();
    Some(Arc::new(arrow_schema::Schema::new_with_metadata(
        fields,
        with_meta.metadata().clone(),
    )))
}
