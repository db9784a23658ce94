//! Arrow data handed to Python without a copy, through the Arrow C data interface
//! (`FFI_ArrowSchema`, `FFI_ArrowArray`) and C stream interface (`FFI_ArrowArrayStream`)
//! of arrow-rs (`arrow_array::ffi`, `arrow_array::ffi_stream`), wrapped in PyCapsules as the Arrow
//! PyCapsule interface says (`__arrow_c_schema__`, `__arrow_c_array__`,
//! `__arrow_c_stream__`): the protocol pyarrow, polars, DuckDB and pandas all read.
//!
//! Why this way: the capsules are what every consumer takes, with no pyarrow needed to
//! hand them over; arrow-rs's own FFI structs do the exporting (each array keeps its
//! buffers alive until the consumer calls `release`, which drops them on this side), and
//! PyO3's `PyCapsule::new_with_value` owns the struct until the consumer moves it out, so this crate
//! needs no `unsafe`. The alternatives were weighed: arrow-rs's `pyarrow` feature
//! (`arrow-pyarrow`) converts through pyarrow's `_import_from_c` rather than giving out a
//! capsule, and is built for another PyO3 than the current one; `pyo3-arrow` is built on
//! an older arrow-rs (59) than the workspace's (60), which would compile a second arrow.
//!
//! A consumer moves the struct out of the capsule (and marks the original released); a
//! capsule never consumed frees its struct, and the data, when Python drops it.
//!
//! The batches a stream is iterated for ([`pyarrow_batch`]) go another way, for speed:
//! through `pyarrow.RecordBatch._import_from_c`, given the table's `pyarrow.Schema`
//! imported once per stream. A capsule pair (`pyarrow.record_batch(obj)`) makes pyarrow
//! import the schema again with every batch: its fields, their documentation and the
//! files' metadata, some 65 µs a batch, a tenth of the consumer's time in a whole decode
//! (benches/README.md, "Python streaming decode").

use std::sync::Mutex;

use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{Array, RecordBatch, RecordBatchReader, StructArray};
use arrow_schema::SchemaRef;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyCapsule;

fn arrow_err(e: arrow_schema::ArrowError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// A schema as an `arrow_schema` capsule (a struct type of the columns, with the schema's
/// metadata).
pub(crate) fn schema_capsule<'py>(
    py: Python<'py>,
    schema: &arrow_schema::Schema,
) -> PyResult<Bound<'py, PyCapsule>> {
    let s = FFI_ArrowSchema::try_from(schema).map_err(arrow_err)?;
    PyCapsule::new_with_value(py, s, c"arrow_schema")
}

/// A stream as an `arrow_array_stream` capsule. The consumer pulls the batches, on any
/// thread, through `reader`.
pub(crate) fn stream_capsule<'py>(
    py: Python<'py>,
    reader: Box<dyn RecordBatchReader + Send>,
) -> PyResult<Bound<'py, PyCapsule>> {
    PyCapsule::new_with_value(py, FFI_ArrowArrayStream::new(reader), c"arrow_array_stream")
}

/// A schema as a `pyarrow.Schema`, with its metadata.
pub(crate) fn pyarrow_schema(py: Python<'_>, schema: &arrow_schema::Schema) -> PyResult<Py<PyAny>> {
    static IMPORT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let import = IMPORT.get_or_try_init(py, || -> PyResult<_> {
        Ok(py
            .import("pyarrow")?
            .getattr("Schema")?
            .getattr("_import_from_c_capsule")?
            .unbind())
    })?;
    Ok(import
        .bind(py)
        .call1((schema_capsule(py, schema)?,))?
        .unbind())
}

/// One record batch as a `pyarrow.RecordBatch` whose schema is `schema` (the batch's own,
/// as a `pyarrow.Schema` from [`pyarrow_schema`]): its columns as they are, not copied.
/// Only the array crosses (an `FFI_ArrowArray`, by address: pyarrow moves it out and
/// marks ours released, or leaves it to be released here if it fails first).
pub(crate) fn pyarrow_batch(
    py: Python<'_>,
    batch: RecordBatch,
    schema: &Py<PyAny>,
) -> PyResult<Py<PyAny>> {
    static IMPORT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let import = IMPORT.get_or_try_init(py, || -> PyResult<_> {
        Ok(py
            .import("pyarrow")?
            .getattr("RecordBatch")?
            .getattr("_import_from_c")?
            .unbind())
    })?;
    let data = StructArray::from(batch).into_data();
    let array = Box::new(FFI_ArrowArray::new(&data));
    let address = &*array as *const FFI_ArrowArray as usize;
    let r = import.bind(py).call1((address, schema.bind(py)));
    // Moved out by pyarrow (nothing left to release), or released now.
    drop(array);
    Ok(r?.unbind())
}

/// Record batches already at hand (a table read whole, a report), as a stream for
/// `pyarrow.RecordBatchReader.from_stream(...)` or any reader of `__arrow_c_stream__`. It
/// can be read once.
#[pyclass(name = "_ArrowStream", module = "tracemill._tracemill")]
pub struct ArrowStream {
    schema: SchemaRef,
    batches: Mutex<Option<Vec<RecordBatch>>>,
}

impl ArrowStream {
    pub(crate) fn new(schema: SchemaRef, batches: Vec<RecordBatch>) -> Self {
        ArrowStream {
            schema,
            batches: Mutex::new(Some(batches)),
        }
    }

    /// As a `pyarrow.Table` (the buffers are shared, not copied).
    pub(crate) fn into_table(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let holder = Bound::new(py, self)?;
        Ok(py
            .import("pyarrow")?
            .getattr("RecordBatchReader")?
            .call_method1("from_stream", (holder,))?
            .call_method0("read_all")?
            .unbind())
    }
}

#[pymethods]
impl ArrowStream {
    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        schema_capsule(py, &self.schema)
    }

    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        let batches = self
            .batches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("this stream was read already"))?;
        let reader =
            arrow_array::RecordBatchIterator::new(batches.into_iter().map(Ok), self.schema.clone());
        stream_capsule(py, Box::new(reader))
    }
}
