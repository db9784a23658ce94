//! `tracemill.decode`: a decode running on the pipeline's threads, its tables handed to
//! Python as streams of record batches while they are decoded.
//!
//! The decode runs `tracemill::run::decode` on a thread of its own with a
//! `tracemill::stream::BatchSink`: the pipeline sends each piece's rows, in trace order,
//! on a bounded channel ([`CAPACITY`] pieces), and waits when the consumer falls behind,
//! so memory stays bounded however long the trace (the decode window and that channel).
//!
//! One decode feeds every table asked for. [`Shared`] takes the pieces off the channel
//! for whichever table's stream asks, and keeps the pieces of the other tables until their
//! streams ask for them: those wait in memory, so a consumer that reads one table to its
//! end before the next holds the others whole. Reading all the tables at once (iterating
//! the [`Decoding`], or `read_all()`) or asking only for the tables read keeps memory
//! bounded.
//!
//! The consumer may pull a stream on any thread (DuckDB does from its own), without the
//! GIL: a stream only takes a mutex and waits on the channel. Ctrl-C is seen by whichever
//! wait runs on the thread that called `decode` (Python runs signal handlers there): it
//! stops the decode (the channel's receiver is dropped, the pipeline's next send fails and
//! it winds down, then its thread is joined) and raises `KeyboardInterrupt`. Progress is
//! reported on that thread too, so that a callback never runs on a foreign one.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{JoinHandle, ThreadId};
use std::time::Duration;

use anyhow::Context;
use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};
use crossbeam_channel::{Receiver, RecvTimeoutError};
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyDict};
use tracemill::run::{self, Tables};
use tracemill::stream::Output;
use tracemill_input::bundle::Bytes;
use tracemill_input::perf::Lookup;
use tracemill_input::source::{Given, Kind, Overrides};
use tracemill_input::Source;
use tracemill_schemas::TABLES;

use crate::arrow_export::{
    pyarrow_batch, pyarrow_schema, schema_capsule, stream_capsule, ArrowStream,
};
use crate::{error, error_from, warn, Class};

/// Pieces that may wait on the channel for the consumer. Each is one table's rows of one
/// chunk (at most `--chunk-size`, 128 KiB by default, of trace: some 100,000 rows). With
/// the pipeline's window of `2 × jobs + 2` chunks, this bounds what a slow consumer makes
/// the decode hold.
const CAPACITY: usize = 8;

/// How long a wait for the next piece lasts before signals are checked again.
const WAIT: Duration = Duration::from_millis(100);

fn table_index(name: &str) -> usize {
    TABLES
        .iter()
        .position(|t| *t == name)
        .expect("the pipeline sends only its tables")
}

/// The decode's outcome, once its thread has ended.
enum Outcome {
    Running,
    Done(Box<run::Report>),
    /// The exception class and the CLI's message.
    Failed(Class, String),
    /// Stopped by the consumer (Ctrl-C, or `close()`).
    Stopped,
}

/// What a wait for the next piece gave.
// Returned once per piece, by value: boxing the piece would add an allocation per piece.
#[allow(clippy::large_enum_variant)]
enum Next {
    Piece(Output),
    /// Nothing yet: check signals and wait again.
    Wait,
    /// The table (or every table) is finished.
    End,
}

/// The decode's end of things, shared by its streams: the channel, the pieces kept for
/// tables not being read, and the decode's thread.
pub(crate) struct Shared {
    rx: Option<Receiver<Output>>,
    pending: [VecDeque<Output>; 5],
    thread: Option<JoinHandle<anyhow::Result<run::Report>>>,
    outcome: Outcome,
    /// How far into the trace the pieces handed out so far reach.
    position: u64,
    /// The end-of-decode warnings were issued.
    warned: bool,
}

fn lock(s: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// The next piece of table `want` (any table: `None`), waiting up to [`WAIT`].
    fn next(&mut self, want: Option<usize>) -> Next {
        let mine = |i: usize| want.is_none_or(|w| w == i);
        if let Some(q) = self
            .pending
            .iter_mut()
            .enumerate()
            .find_map(|(i, q)| (mine(i) && !q.is_empty()).then_some(q))
        {
            return Next::Piece(q.pop_front().expect("not empty"));
        }
        let Some(rx) = &self.rx else {
            return Next::End;
        };
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            match rx.recv_deadline(deadline) {
                Ok(o) => {
                    self.position = self.position.max(o.position);
                    let i = table_index(o.table);
                    if mine(i) {
                        return Next::Piece(o);
                    }
                    self.pending[i].push_back(o);
                }
                Err(RecvTimeoutError::Timeout) => return Next::Wait,
                Err(RecvTimeoutError::Disconnected) => {
                    // The pipeline is done: its thread ends as it drops the last sender.
                    self.rx = None;
                    self.join();
                    return Next::End;
                }
            }
        }
    }

    fn join(&mut self) {
        if let Some(t) = self.thread.take() {
            let r = t.join();
            if matches!(self.outcome, Outcome::Stopped) {
                // Stopped on purpose: whatever it returned is not the decode's outcome.
                return;
            }
            self.outcome = match r {
                Ok(Ok(r)) => Outcome::Done(Box::new(r)),
                Ok(Err(e)) => {
                    let class = if e.chain().any(|c| c.is::<tracemill::errors::NoPsb>()) {
                        Class::NoPsb
                    } else {
                        Class::Decode
                    };
                    Outcome::Failed(class, tracemill::errors::error_text(&e))
                }
                Err(_) => Outcome::Failed(Class::Decode, "the decode thread panicked".into()),
            };
        }
    }

    /// Stop the decode: drop the receiver (the pipeline's next send fails, and it winds
    /// down) and wait for its thread. Call without the GIL.
    fn stop(&mut self) {
        if self.thread.is_some() {
            self.outcome = Outcome::Stopped;
        }
        self.rx = None;
        for q in &mut self.pending {
            q.clear();
        }
        self.join();
    }

    /// Raise the decode's failure, if it failed.
    fn failure(&self, py: Python<'_>) -> PyResult<()> {
        match &self.outcome {
            Outcome::Failed(class, msg) => Err(error(py, *class, msg.clone())),
            _ => Ok(()),
        }
    }
}

/// What the streams of one decode share besides [`Shared`]: the progress callback and
/// the warnings already issued.
struct Hooks {
    progress: Option<Py<PyAny>>,
    total: u64,
    /// The thread that called `decode`: progress and signals are handled there only.
    owner: ThreadId,
    /// Warnings issued when the decode started (the end repeats only new ones).
    early: Vec<String>,
    last: Mutex<u64>,
    /// The addresses of the buffers handed out (the first [`MAX_ADDRESSES`]), so that
    /// tests can see a consumer got them without a copy.
    addresses: Mutex<Vec<usize>>,
    /// Each table's schema as a `pyarrow.Schema`, imported once for all its batches
    /// (by table index).
    pyarrow_schemas: [PyOnceLock<Py<PyAny>>; 5],
}

/// Buffer addresses kept for `_exported_buffer_addresses` (8 MB at most).
const MAX_ADDRESSES: usize = 1 << 20;

impl Hooks {
    /// A batch of `table` as a `pyarrow.RecordBatch` (`schema`: the table's).
    fn pyarrow_batch(
        &self,
        py: Python<'_>,
        table: usize,
        schema: &SchemaRef,
        b: RecordBatch,
    ) -> PyResult<Py<PyAny>> {
        let s = self.pyarrow_schemas[table].get_or_try_init(py, || pyarrow_schema(py, schema))?;
        pyarrow_batch(py, b, s)
    }

    fn on_owner(&self) -> bool {
        std::thread::current().id() == self.owner
    }

    /// Tell the callback how far the decode is, when that changed.
    fn progress(&self, py: Python<'_>, done: u64) -> PyResult<()> {
        let Some(cb) = &self.progress else {
            return Ok(());
        };
        let done = done.min(self.total);
        {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            if *last >= done && done < self.total {
                return Ok(());
            }
            if *last == self.total && done == self.total {
                return Ok(());
            }
            *last = done;
        }
        cb.call1(py, (done, self.total)).map(|_| ())
    }

    /// At the end: the decode's warnings not issued at its start, the progress at 100%,
    /// or its failure raised.
    fn finish(&self, py: Python<'_>, shared: &Mutex<Shared>) -> PyResult<()> {
        let warnings: Vec<String> = {
            let mut s = lock(shared);
            s.failure(py)?;
            if s.warned {
                return Ok(());
            }
            s.warned = true;
            match &s.outcome {
                Outcome::Done(r) => r
                    .warnings
                    .iter()
                    .filter(|w| !self.early.contains(w))
                    .cloned()
                    .collect(),
                // Stopped: no end to report.
                _ => return Ok(()),
            }
        };
        for w in warnings {
            warn(py, &w)?;
        }
        self.progress(py, self.total)
    }
}

/// Wait for the next piece of `want` with the GIL released, checking for Ctrl-C between
/// waits (the caller holds the GIL: `__next__`, `read_all`).
fn next_with_gil(
    py: Python<'_>,
    shared: &Arc<Mutex<Shared>>,
    hooks: &Hooks,
    want: Option<usize>,
) -> PyResult<Option<Output>> {
    loop {
        let s = shared.clone();
        match py.detach(move || lock(&s).next(want)) {
            Next::Piece(o) => {
                // Signals between pieces too: a fast decode never waits.
                if let Err(e) = py
                    .check_signals()
                    .and_then(|()| hooks.progress(py, o.position))
                {
                    let s = shared.clone();
                    py.detach(move || lock(&s).stop());
                    return Err(e);
                }
                return Ok(Some(o));
            }
            Next::Wait => {
                if let Err(e) = py.check_signals() {
                    let s = shared.clone();
                    py.detach(move || lock(&s).stop());
                    return Err(e);
                }
            }
            Next::End => {
                hooks.finish(py, shared)?;
                return Ok(None);
            }
        }
    }
}

/// A batch made for the consumer in `__next__`, checked for Ctrl-C once more before it is
/// handed over: an interrupt that arrives while the batch is made would otherwise be
/// raised in the consumer's loop, outside any call of ours, and leave the decode waiting.
/// A batch that cannot be made stops the decode as well (its rows are lost to the stream).
fn handed<T>(py: Python<'_>, shared: &Arc<Mutex<Shared>>, made: PyResult<T>) -> PyResult<T> {
    match made.and_then(|b| py.check_signals().map(|()| b)) {
        Ok(b) => Ok(b),
        Err(e) => {
            let s = shared.clone();
            py.detach(move || lock(&s).stop());
            Err(e)
        }
    }
}

/// A piece's rows as a batch with the table's schema and the files' metadata; its
/// buffers' addresses noted.
fn batch(o: Output, schema: &SchemaRef, hooks: &Hooks) -> Result<RecordBatch, ArrowError> {
    let b = o
        .batch()
        .map_err(|e| ArrowError::ExternalError(Box::new(e)))?
        .with_schema(schema.clone())?;
    let mut a = hooks.addresses.lock().unwrap_or_else(|e| e.into_inner());
    if a.len() < MAX_ADDRESSES {
        fn walk(d: &arrow_data::ArrayData, a: &mut Vec<usize>) {
            a.extend(d.buffers().iter().map(|b| b.as_ptr() as usize));
            a.extend(d.nulls().map(|n| n.buffer().as_ptr() as usize));
            d.child_data().iter().for_each(|c| walk(c, a));
        }
        for c in b.columns() {
            walk(&c.to_data(), &mut a);
        }
    }
    Ok(b)
}

/// The consumer's side of one table's C stream: pulls pieces from [`Shared`] on whatever
/// thread the consumer calls from.
struct Reader {
    shared: Arc<Mutex<Shared>>,
    hooks: Arc<Hooks>,
    table: usize,
    schema: SchemaRef,
}

impl Iterator for Reader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let next = lock(&self.shared).next(Some(self.table));
            match next {
                Next::Piece(o) => {
                    if self.hooks.on_owner() {
                        let pos = o.position;
                        let r = Python::attach(|py| {
                            py.check_signals()?;
                            self.hooks.progress(py, pos)
                        });
                        if let Err(e) = r {
                            return Some(Err(self.stop_with(e)));
                        }
                    }
                    return Some(batch(o, &self.schema, &self.hooks));
                }
                Next::Wait => {
                    if self.hooks.on_owner() {
                        if let Err(e) = Python::attach(|py| py.check_signals()) {
                            return Some(Err(self.stop_with(e)));
                        }
                    }
                }
                Next::End => {
                    if self.hooks.on_owner() {
                        if let Err(e) = Python::attach(|py| self.hooks.finish(py, &self.shared)) {
                            return Some(Err(ArrowError::ExternalError(Box::new(
                                std::io::Error::other(e.to_string()),
                            ))));
                        }
                    } else if let Outcome::Failed(_, msg) = &lock(&self.shared).outcome {
                        return Some(Err(ArrowError::ExternalError(msg.clone().into())));
                    }
                    return None;
                }
            }
        }
    }
}

impl Reader {
    /// The consumer's wait was interrupted (Ctrl-C) or its callback failed: stop the
    /// decode and end the stream with an error. An interrupt is delivered again
    /// (`_thread.interrupt_main`), so that Python raises `KeyboardInterrupt` as soon as
    /// the consumer returns: the consumer itself only sees a failed stream.
    fn stop_with(&self, e: PyErr) -> ArrowError {
        lock(&self.shared).stop();
        let msg = Python::attach(|py| {
            if e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py) {
                let _ = py
                    .import("_thread")
                    .and_then(|t| t.call_method0("interrupt_main"));
                "interrupted (Ctrl-C): decoding stopped".to_string()
            } else {
                e.to_string()
            }
        });
        ArrowError::ExternalError(msg.into())
    }
}

impl RecordBatchReader for Reader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// The streams of one decode: one per table asked for (`d.branches`, `d["events"]`).
/// Iterating it gives `(table, pyarrow.RecordBatch)` pairs in the order they were decoded.
#[pyclass(module = "tracemill._tracemill")]
pub struct Decoding {
    shared: Arc<Mutex<Shared>>,
    hooks: Arc<Hooks>,
    tables: Vec<&'static str>,
    schemas: Vec<SchemaRef>,
    streams: Vec<Py<TableStream>>,
    source: String,
}

impl Decoding {
    fn stream(&self, py: Python<'_>, name: &str) -> PyResult<Py<TableStream>> {
        match self.tables.iter().position(|t| *t == name) {
            Some(i) => Ok(self.streams[i].clone_ref(py)),
            None if TABLES.contains(&name) => Err(PyTypeError::new_err(format!(
                "table {name:?} was not asked for: decode(..., tables=[...]) with it \
                 (this decode has {})",
                self.tables.join(", ")
            ))),
            None => Err(error(
                py,
                Class::Option,
                format!(
                    "unknown table {name:?}: choose from branches, events, timing, coverage, edges"
                ),
            )),
        }
    }
}

#[pymethods]
impl Decoding {
    /// The tables this decode streams, in the files' order.
    #[getter]
    fn tables(&self) -> Vec<&'static str> {
        self.tables.clone()
    }

    /// The bundle or trace decoded.
    #[getter]
    fn source(&self) -> &str {
        &self.source
    }

    /// The trace's length in bytes (the progress total).
    #[getter]
    fn total_bytes(&self) -> u64 {
        self.hooks.total
    }

    fn __getitem__(&self, py: Python<'_>, name: &str) -> PyResult<Py<TableStream>> {
        self.stream(py, name)
    }

    fn __contains__(&self, name: &str) -> bool {
        self.tables.contains(&name)
    }

    fn keys(&self) -> Vec<&'static str> {
        self.tables.clone()
    }

    fn __len__(&self) -> usize {
        self.tables.len()
    }

    #[getter]
    fn branches(&self, py: Python<'_>) -> PyResult<Py<TableStream>> {
        self.stream(py, "branches")
    }
    #[getter]
    fn events(&self, py: Python<'_>) -> PyResult<Py<TableStream>> {
        self.stream(py, "events")
    }
    #[getter]
    fn timing(&self, py: Python<'_>) -> PyResult<Py<TableStream>> {
        self.stream(py, "timing")
    }
    #[getter]
    fn coverage(&self, py: Python<'_>) -> PyResult<Py<TableStream>> {
        self.stream(py, "coverage")
    }
    #[getter]
    fn edges(&self, py: Python<'_>) -> PyResult<Py<TableStream>> {
        self.stream(py, "edges")
    }

    /// With one table asked for, the decode is that table's stream.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        if self.tables.len() != 1 {
            return Err(PyTypeError::new_err(format!(
                "this decode streams {} tables ({}): read one of them (d.branches, \
                 d[\"events\"]), or ask for one table only",
                self.tables.len(),
                self.tables.join(", ")
            )));
        }
        self.streams[0]
            .borrow(py)
            .__arrow_c_stream__(py, requested_schema)
    }

    /// Every table asked for, read to its end, as `{table: pyarrow.Table}`.
    fn read_all<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let mut batches: Vec<Vec<RecordBatch>> = vec![Vec::new(); self.tables.len()];
        let mut idx = [usize::MAX; 5];
        for (i, t) in self.tables.iter().enumerate() {
            idx[table_index(t)] = i;
            self.streams[i].borrow(py).claim()?;
        }
        while let Some(o) = next_with_gil(py, &self.shared, &self.hooks, None)? {
            let i = idx[table_index(o.table)];
            batches[i].push(batch(o, &self.schemas[i], &self.hooks).map_err(to_py)?);
        }
        let out = PyDict::new(py);
        for (i, b) in batches.into_iter().enumerate() {
            let t = ArrowStream::new(self.schemas[i].clone(), b).into_table(py)?;
            out.set_item(self.tables[i], t)?;
        }
        Ok(out)
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next `(table, pyarrow.RecordBatch)` decoded, whichever the table.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<(&'static str, Py<PyAny>)>> {
        let Some(o) = next_with_gil(py, &self.shared, &self.hooks, None)? else {
            return Ok(None);
        };
        let i = self
            .tables
            .iter()
            .position(|t| *t == o.table)
            .expect("only the tables asked for are sent");
        let t = table_index(o.table);
        let b = batch(o, &self.schemas[i], &self.hooks)
            .map_err(to_py)
            .and_then(|b| self.hooks.pyarrow_batch(py, t, &self.schemas[i], b));
        Ok(Some((self.tables[i], handed(py, &self.shared, b)?)))
    }

    /// The decode's report once it has finished (None before): counts, blocks, edges,
    /// warnings, the closing summary the CLI prints (`summary`).
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let s = lock(&self.shared);
        s.failure(py)?;
        let Outcome::Done(r) = &s.outcome else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("trace_bytes", r.trace_bytes)?;
        d.set_item("psbs", r.psbs)?;
        d.set_item("chunks", r.chunks)?;
        d.set_item("jobs", r.jobs)?;
        d.set_item("branches", r.rows)?;
        d.set_item("instructions", r.instructions)?;
        let kinds = PyDict::new(py);
        for k in tracemill_schemas::BranchKind::ALL {
            kinds.set_item(k.name(), r.by_kind[*k as usize])?;
        }
        d.set_item("by_kind", kinds)?;
        d.set_item("events", r.events_by_kind.clone())?;
        d.set_item("blocks", r.blocks)?;
        d.set_item("edges", r.edges)?;
        d.set_item("seconds", r.elapsed.as_secs_f64())?;
        d.set_item("warnings", r.warnings.clone())?;
        d.set_item("summary", run::summary(&self.source, r))?;
        Ok(Some(d))
    }

    /// The addresses of the buffers of the batches handed out so far (the first million),
    /// for tests that check a consumer took them without a copy.
    fn _exported_buffer_addresses(&self) -> Vec<usize> {
        self.hooks
            .addresses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stop the decode (what is not read yet is dropped). Also on leaving a `with` block.
    fn close(&self, py: Python<'_>) {
        let s = self.shared.clone();
        py.detach(move || lock(&s).stop());
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Option<Bound<'_, PyAny>>,
        _v: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) {
        self.close(py);
    }

    fn __repr__(&self) -> String {
        format!(
            "<tracemill.Decoding of {} ({} bytes): {}>",
            self.source,
            self.hooks.total,
            self.tables.join(", ")
        )
    }
}

fn to_py(e: ArrowError) -> PyErr {
    PyRuntimeError::new_err(e.to_string())
}

/// One table of a decode, as a stream of record batches in trace order: give it to
/// anything that reads the Arrow PyCapsule stream interface (`pyarrow.table(s)`,
/// `polars.DataFrame(s)`, DuckDB's `FROM s`), iterate it for `pyarrow.RecordBatch`es, or
/// `read_all()`. It can be read once.
#[pyclass(module = "tracemill._tracemill")]
pub struct TableStream {
    shared: Arc<Mutex<Shared>>,
    hooks: Arc<Hooks>,
    table: &'static str,
    schema: SchemaRef,
    /// Handed out as a C stream, or being read by `read_all`.
    claimed: Mutex<bool>,
}

impl TableStream {
    fn claim(&self) -> PyResult<()> {
        let mut c = self.claimed.lock().unwrap_or_else(|e| e.into_inner());
        if *c {
            return Err(PyRuntimeError::new_err(format!(
                "the {} stream was handed out already: a stream is read once (decode \
                 again to read it again)",
                self.table
            )));
        }
        *c = true;
        Ok(())
    }
}

#[pymethods]
impl TableStream {
    /// The table's name.
    #[getter]
    fn table(&self) -> &'static str {
        self.table
    }

    /// The table's schema, with the metadata its Parquet file carries (a
    /// `pyarrow.Schema`).
    #[getter]
    fn schema(slf: PyRef<'_, Self>, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(py
            .import("pyarrow")?
            .call_method1("schema", (slf,))?
            .unbind())
    }

    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        schema_capsule(py, &self.schema)
    }

    /// The stream as an `ArrowArrayStream` capsule (the PyCapsule interface): the batches
    /// as decoded, not copied. A requested schema is not applied (the interface allows
    /// that); the table's own schema is the one given.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        self.claim()?;
        let reader = Reader {
            shared: self.shared.clone(),
            hooks: self.hooks.clone(),
            table: table_index(self.table),
            schema: self.schema.clone(),
        };
        stream_capsule(py, Box::new(reader))
    }

    /// The whole table, as a `pyarrow.Table` (the batches as decoded, not copied).
    fn read_all(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.claim()?;
        let t = table_index(self.table);
        let mut batches = Vec::new();
        while let Some(o) = next_with_gil(py, &self.shared, &self.hooks, Some(t))? {
            batches.push(batch(o, &self.schema, &self.hooks).map_err(to_py)?);
        }
        ArrowStream::new(self.schema.clone(), batches).into_table(py)
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The next `pyarrow.RecordBatch`.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let t = table_index(self.table);
        match next_with_gil(py, &self.shared, &self.hooks, Some(t))? {
            Some(o) => {
                let b = batch(o, &self.schema, &self.hooks)
                    .map_err(to_py)
                    .and_then(|b| self.hooks.pyarrow_batch(py, t, &self.schema, b));
                Ok(Some(handed(py, &self.shared, b)?))
            }
            None => Ok(None),
        }
    }

    fn __repr__(&self) -> String {
        format!("<tracemill.TableStream {}>", self.table)
    }
}

/// The trace argument: a path (a bundle directory or a bare trace file), or the trace's
/// bytes (`bytes` are read in place; other buffers are copied once).
enum Trace {
    Path(std::path::PathBuf),
    Memory(Bytes),
}

fn trace_arg(obj: &Bound<'_, PyAny>) -> PyResult<Trace> {
    if let Ok(b) = obj.extract::<pyo3::pybacked::PyBackedBytes>() {
        return Ok(Trace::Memory(Bytes::Shared(Arc::new(b))));
    }
    if let Ok(p) = crate::path_arg(obj) {
        return Ok(Trace::Path(p));
    }
    // Any other buffer (bytearray, memoryview, numpy array, mmap): its bytes, copied once.
    // Through `memoryview(obj).tobytes()`, not pyo3's `PyBuffer`, which the stable ABI of
    // Python 3.10 (this package's one wheel) does not offer; `memoryview` refuses what is
    // not a buffer (an int, say), where `bytes(obj)` would make zeros of it.
    if let Ok(view) = obj
        .py()
        .import("builtins")
        .and_then(|b| b.getattr("memoryview"))
        .and_then(|m| m.call1((obj,)))
    {
        let b: pyo3::pybacked::PyBackedBytes = view.call_method0("tobytes")?.extract()?;
        return Ok(Trace::Memory(Bytes::Shared(Arc::new(b))));
    }
    Err(PyTypeError::new_err(
        "bundle: a bundle directory or trace file (str or os.PathLike), or the trace's bytes",
    ))
}

/// Parse `tables=`: None (all), "all", "branches,events", or a list of names.
pub(crate) fn tables_arg(py: Python<'_>, tables: Option<&Bound<'_, PyAny>>) -> PyResult<Tables> {
    let text = match tables {
        None => return Ok(Tables::ALL),
        Some(t) => match t.extract::<String>() {
            Ok(s) => s,
            Err(_) => t
                .extract::<Vec<String>>()
                .map_err(|_| {
                    PyTypeError::new_err(
                        "tables: a name, a comma-separated list or a list of names",
                    )
                })?
                .join(","),
        },
    };
    Tables::parse(&text).map_err(|e| error_from(py, Class::Option, &e))
}

pub(crate) fn jobs_arg(py: Python<'_>, jobs: Option<i64>) -> PyResult<usize> {
    match jobs {
        None => Ok(tracemill::cli::all_cores()),
        Some(j) => tracemill::cli::parse_jobs(&j.to_string())
            .map_err(|e| error(py, Class::Option, format!("jobs={j}: {e}"))),
    }
}

fn chunk_arg(py: Python<'_>, v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    let Some(v) = v else { return Ok(None) };
    let text = match v.extract::<u64>() {
        Ok(n) => n.to_string(),
        Err(_) => v.extract::<String>().map_err(|_| {
            PyTypeError::new_err("chunk_size: bytes, as an int or a string like \"128K\"")
        })?,
    };
    tracemill::cli::parse_chunk_size(&text)
        .map(Some)
        .map_err(|e| error(py, Class::Option, format!("chunk_size={text}: {e}")))
}

fn list(t: Tables) -> Vec<&'static str> {
    TABLES
        .iter()
        .copied()
        .filter(|n| match *n {
            "branches" => t.branches,
            "events" => t.events,
            "timing" => t.timing,
            "coverage" => t.coverage,
            _ => t.edges,
        })
        .collect()
}

/// Decode a bundle, a bare trace, a trace in memory or a perf.data; its tables as streams
/// of record batches, decoded while they are read.
#[pyfunction]
#[pyo3(signature = (bundle, *, tables=None, jobs=None, chunk_size=None, ctl=None, images=None, config=None, progress=None, format=None, cpu=None, mtc_freq=None, nom_freq=None, cpuid_0x15_eax=None, cpuid_0x15_ebx=None, symfs=None, buildid_dir=None, vmlinux=None, kcore=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn decode(
    py: Python<'_>,
    bundle: &Bound<'_, PyAny>,
    tables: Option<&Bound<'_, PyAny>>,
    jobs: Option<i64>,
    chunk_size: Option<&Bound<'_, PyAny>>,
    ctl: Option<u64>,
    images: Option<Vec<String>>,
    config: Option<String>,
    progress: Option<Py<PyAny>>,
    format: Option<&str>,
    cpu: Option<String>,
    mtc_freq: Option<u8>,
    nom_freq: Option<u8>,
    cpuid_0x15_eax: Option<u32>,
    cpuid_0x15_ebx: Option<u32>,
    symfs: Option<PathBuf>,
    buildid_dir: Option<PathBuf>,
    vmlinux: Option<PathBuf>,
    kcore: Option<PathBuf>,
) -> PyResult<Decoding> {
    // Options first, as the command line checks them: a bad one fails before the bundle
    // is read.
    let tables = tables_arg(py, tables)?;
    let jobs = jobs_arg(py, jobs)?;
    let chunk_bytes = chunk_arg(py, chunk_size)?;
    let config = match &config {
        Some(text) => Some(
            tracemill_input::bundle::parse_manifest(Path::new("<config>"), text)
                .map_err(|e| error_from(py, Class::Bundle, &e))?,
        ),
        None => None,
    };
    let overrides = Overrides {
        format: crate::format_arg(py, format)?,
        ctl,
        images: crate::image_args(py, images.as_deref().unwrap_or(&[]))?,
        pt: crate::pt_args(cpu, mtc_freq, nom_freq, cpuid_0x15_eax, cpuid_0x15_ebx),
        config,
        lookup: Lookup {
            symfs,
            buildid_dir,
            vmlinux: vmlinux.into_iter().collect(),
            kcore: kcore.into_iter().collect(),
            confine: None,
        },
        ..Overrides::default()
    };
    let given = trace_arg(bundle)?;
    let src = py
        .detach(|| match given {
            Trace::Path(p) => Source::open(Given::Path(&p), &overrides),
            Trace::Memory(bytes) => Source::open(
                Given::Bytes {
                    bytes,
                    name: "<memory>".into(),
                    dir: std::env::current_dir().unwrap_or_default(),
                },
                &overrides,
            ),
        })
        .map_err(|e| error_from(py, Class::Bundle, &e))?;
    start(py, src, tables, jobs, chunk_bytes, progress)
}

/// Say the warnings the decode will report (the input layer's checks, made when it was
/// opened), refuse what cannot decode, and start the decode's thread.
fn start(
    py: Python<'_>,
    src: Source,
    tables: Tables,
    jobs: usize,
    chunk_bytes: Option<u64>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Decoding> {
    // The warnings the decode reports before it decodes, said now rather than at the end.
    let early = src.warnings.clone();
    for w in &early {
        warn(py, w)?;
    }
    // As `tracemill decode` exits 1: without a code image no branch can be decoded. A
    // trace with no PSB at all is reported as that first (NoPsbError, from the decode), as
    // the CLI does: its plan fails before the images matter.
    if !src.has_code && (tables.branches || tables.coverage || tables.edges) && src.has_psb() {
        return Err(error(
            py,
            Class::MissingImage,
            "no branch decoded: no code image could be loaded",
        ));
    }
    let meta = run::source_meta(&src).map_err(|e| error_from(py, Class::Bundle, &e))?;
    let perf = src.kind == Kind::PerfData;
    let source = src.name.clone();
    let names = list(tables);
    let schemas: Vec<SchemaRef> = names
        .iter()
        .map(|t| tracemill::stream::table_schema(&meta, t, perf).expect("a table"))
        .collect();
    let (sink, rx) = tracemill::stream::channel(tables, CAPACITY);
    let opts = run::Options {
        jobs,
        chunk_bytes,
        tables,
        batches: Some(sink),
        ..run::Options::default()
    };
    let total = src.stream_len();
    let context = source.clone();
    let thread = std::thread::Builder::new()
        .name("tracemill-decode".into())
        .spawn(move || {
            let r = run::decode_source(&src, &opts).with_context(|| format!("decoding {context}"));
            // The last sender goes with the options: the streams see the end.
            drop(opts);
            r
        })
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the decode thread: {e}")))?;
    let shared = Arc::new(Mutex::new(Shared {
        rx: Some(rx),
        pending: Default::default(),
        thread: Some(thread),
        outcome: Outcome::Running,
        position: 0,
        warned: false,
    }));
    let hooks = Arc::new(Hooks {
        progress,
        total,
        owner: std::thread::current().id(),
        early,
        last: Mutex::new(0),
        addresses: Mutex::new(Vec::new()),
        pyarrow_schemas: std::array::from_fn(|_| PyOnceLock::new()),
    });
    // Wait for the first piece (or the end), so that a decode that cannot start (no PSB)
    // raises here, not at the first read. Not longer than a second: a decode of only the
    // aggregates (coverage, edges) has its first piece at the end.
    let since = std::time::Instant::now();
    while since.elapsed() < Duration::from_secs(1) {
        let s = shared.clone();
        let first = py.detach(move || {
            let mut g = lock(&s);
            match g.next(None) {
                Next::Piece(o) => {
                    let i = table_index(o.table);
                    g.pending[i].push_front(o);
                    true
                }
                Next::End => true,
                Next::Wait => false,
            }
        });
        if first {
            break;
        }
        if let Err(e) = py.check_signals() {
            let s = shared.clone();
            py.detach(move || lock(&s).stop());
            return Err(e);
        }
    }
    lock(&shared).failure(py)?;
    let streams = names
        .iter()
        .zip(&schemas)
        .map(|(t, s)| {
            Py::new(
                py,
                TableStream {
                    shared: shared.clone(),
                    hooks: hooks.clone(),
                    table: t,
                    schema: s.clone(),
                    claimed: Mutex::new(false),
                },
            )
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(Decoding {
        shared,
        hooks,
        tables: names,
        schemas,
        streams,
        source,
    })
}
