//! The ordered thread's end: pieces numbered, dated and counted, their rows turned into
//! row groups encoded on the pool, and what the writer thread receives.

use std::sync::Arc;

use anyhow::Result;
use crossbeam_channel::bounded;
use tracemill_decode::chunk::{Piece, Sequencer};
use tracemill_decode::rows::{BranchColumns, TimingColumns};
use tracemill_sinks::{EncodedRowGroup, RowGroupEncoder};

use super::Report;
use tracemill_input::perf::threads::{Dates, LastTimed, Threads};

/// What the writer thread receives, in order (a few at a time: the size of a piece's
/// header does not matter).
#[allow(clippy::large_enum_variant)]
pub(super) enum ToWriter {
    /// A piece's events, timing rows and coverage (and its branch rows, unless row groups
    /// are encoded on the pool).
    Piece(Piece<BranchColumns>, TimingColumns, Option<Dated>),
    /// A row group of `branches` or `timing` being encoded on the pool.
    RowGroup(
        Grouped,
        crossbeam_channel::Receiver<Result<EncodedRowGroup, tracemill_sinks::Error>>,
    ),
}

/// The tables whose row groups are encoded on the pool.
#[derive(Clone, Copy, Debug)]
pub(super) enum Grouped {
    Branches,
    Timing,
}

/// The consumer's end of the pipeline: numbers timed pieces, counts them, and hands them
/// to the writer thread, with their rows as row groups encoded on the pool.
pub(super) struct Emitter {
    pub(super) seq: Sequencer,
    /// The consumer of the rows, instead of the writers.
    pub(super) batches: Option<crate::stream::BatchSink>,
    pub(super) branches: Option<RowGroups>,
    pub(super) timing: Option<RowGroups>,
    /// The part's threads (perf.data): rows gain the thread columns.
    pub(super) threads: Option<Arc<Threads>>,
    /// Where the part's trace is in time, for the thread lookup.
    pub(super) dated: LastTimed,
    /// The bytes of the parts before this one: a consumer's progress counts over all the
    /// parts of a recording (their offsets each start at 0).
    pub(super) part_base: u64,
}

impl Emitter {
    pub(super) fn emit(
        &mut self,
        mut p: Piece<BranchColumns>,
        mut t: TimingColumns,
        report: &mut Report,
        pool: &rayon::ThreadPool,
        tx: &crossbeam_channel::Sender<ToWriter>,
    ) -> Result<()> {
        let base = self.seq.rows();
        self.seq.sequence(&mut p);
        report.count(&p);
        // An event's time is the TSC of the last timing packet before it (perf's rule for
        // the samples it makes of the trace), and on perf.data, each row's and event's
        // thread is the one running then.
        // (No pass over the piece's timing packets without events or threads to date:
        // this runs on the ordered thread.)
        let tsc = |i: usize| t.tsc.get(i);
        let event_places: Vec<u64> = p.events.iter().map(|e| e.offset).collect();
        let events = self.dated.dates(&event_places, &t.offset, tsc);
        for (e, d) in p.events.iter_mut().zip(&events) {
            e.tsc = *d;
        }
        let dates = self.threads.clone().map(|threads| Dated {
            threads,
            rows: self.dated.date_runs(&p.rows.offset, &t.offset, tsc),
            events: Dates::of(&events),
            timing: Dates::of(&(0..t.len()).map(tsc).collect::<Vec<_>>()),
        });
        self.dated.advance(t.len(), tsc);
        if let Some(b) = &self.batches {
            let d = dates.as_ref();
            b.send_piece(
                &mut p,
                &mut t,
                base,
                self.part_base,
                d.map(|d| (&d.threads, d.rows(), d.events(), d.timing())),
            )?;
        }
        if let Some(g) = &mut self.branches {
            let rows = std::mem::take(&mut p.rows);
            if !rows.is_empty() {
                let b = tracemill_sinks::convert::branches(rows, base)?;
                g.add(with_threads(b, dates.as_ref(), Dated::rows)?, pool, tx)?;
            }
        }
        if let Some(g) = &mut self.timing {
            let rows = std::mem::take(&mut t);
            if !rows.is_empty() {
                let b = tracemill_sinks::convert::timing(rows)?;
                g.add(with_threads(b, dates.as_ref(), Dated::timing)?, pool, tx)?;
            }
        }
        tx.send(ToWriter::Piece(p, t, dates))
            .map_err(|_| anyhow::anyhow!("the writer stopped"))
    }
}

/// A perf.data piece's threads, and the time each of its rows, events and timing rows is
/// looked up at.
pub(super) struct Dated {
    pub(super) threads: Arc<Threads>,
    pub(super) rows: Dates,
    pub(super) events: Dates,
    pub(super) timing: Dates,
}

impl Dated {
    pub(super) fn rows(&self) -> &Dates {
        &self.rows
    }
    pub(super) fn events(&self) -> &Dates {
        &self.events
    }
    pub(super) fn timing(&self) -> &Dates {
        &self.timing
    }
}

/// `batch` with the thread columns appended, its rows dated by `which` (as it is without).
pub(super) fn with_threads(
    batch: arrow_array::RecordBatch,
    dated: Option<&Dated>,
    which: fn(&Dated) -> &Dates,
) -> Result<arrow_array::RecordBatch> {
    Ok(match dated {
        Some(d) => super::threads::append(&d.threads, &batch, which(d))?,
        None => batch,
    })
}

/// Gathers a table's rows into row groups of about `target` rows and encodes each on the
/// pool.
pub(super) struct RowGroups {
    pub(super) table: Grouped,
    pub(super) enc: RowGroupEncoder,
    pub(super) batches: Vec<arrow_array::RecordBatch>,
    pub(super) rows: usize,
    pub(super) next: usize,
    pub(super) target: usize,
    /// One token per row group in flight (shared by the tables; the writer hands it back).
    pub(super) tokens: crossbeam_channel::Sender<()>,
}

impl RowGroups {
    pub(super) fn new(
        table: Grouped,
        enc: RowGroupEncoder,
        target: usize,
        tokens: crossbeam_channel::Sender<()>,
    ) -> Self {
        RowGroups {
            table,
            enc,
            batches: Vec::new(),
            rows: 0,
            next: 0,
            target,
            tokens,
        }
    }

    /// Add rows; every `target` rows make a row group. Row groups are cut at exactly
    /// `target` rows (a batch is split where one fills), not at a piece's end: pieces
    /// follow the chunking, so cutting there made `-j1` and `-j2` write different row
    /// groups of the same rows. Cut by count, the files are the same bytes for any thread
    /// count and chunk size.
    pub(super) fn add(
        &mut self,
        mut batch: arrow_array::RecordBatch,
        pool: &rayon::ThreadPool,
        tx: &crossbeam_channel::Sender<ToWriter>,
    ) -> Result<()> {
        loop {
            let room = self.target - self.rows;
            let n = batch.num_rows();
            if n < room {
                if n > 0 {
                    self.rows += n;
                    self.batches.push(batch);
                }
                return Ok(());
            }
            // Slices share the batch's buffers: no copy.
            self.batches.push(batch.slice(0, room));
            self.rows += room;
            self.flush(pool, tx)?;
            batch = batch.slice(room, n - room);
        }
    }

    pub(super) fn flush(
        &mut self,
        pool: &rayon::ThreadPool,
        tx: &crossbeam_channel::Sender<ToWriter>,
    ) -> Result<()> {
        if self.batches.is_empty() {
            return Ok(());
        }
        // Wait for a row group in flight to be written (bounded memory).
        self.tokens
            .send(())
            .map_err(|_| anyhow::anyhow!("the writer stopped"))?;
        let batches = std::mem::take(&mut self.batches);
        self.rows = 0;
        let (rtx, rrx) = bounded(1);
        let enc = self.enc.clone();
        let index = self.next;
        self.next += 1;
        pool.spawn(move || {
            let _ = rtx.send(enc.encode(index, &batches));
        });
        tx.send(ToWriter::RowGroup(self.table, rrx))
            .map_err(|_| anyhow::anyhow!("the writer stopped"))
    }
}
