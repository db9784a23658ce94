//! `tracemill._tracemill`: the native half of the `tracemill` Python package.
//!
//! The package's Python modules (`python/tracemill/`) give the API its shape (argument
//! defaults, progress bars, the exception classes); this module does the work with the
//! tracemill crates:
//!
//! - [`decode`]: a bundle (a directory, a bare trace, or a trace already in memory) decoded
//!   on the pipeline's threads, its tables handed over as Arrow record batches while they
//!   are decoded ([`stream`]; `tracemill::stream` in the pipeline);
//! - [`arrow_export`]: batches and streams handed to Python through the Arrow C data and
//!   stream interfaces, without a copy;
//! - [`reports`]: `tracemill report`'s reports as Arrow tables (and the flame graph's SVG,
//!   the HTML page);
//! - [`tools`]: `tracemill dump` and `tracemill ingest`.
//!
//! Errors are raised as the package's exception classes (`tracemill.errors`) with the
//! command line's message (the text after `tracemill: error:`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use pyo3::prelude::*;
use pyo3::types::PyType;

mod arrow_export;
mod reports;
mod stream;
mod tools;

/// The CLI's allocator (`pipeline/src/allocator.rs` says why); here it serves the Rust side of
/// the module: the decode's rows and the Arrow buffers handed to Python, which are freed
/// through the release callbacks of the C data interface, by this same allocator.
///
/// With mimalloc's own purge delay (1 s), not the CLI's 100 ms (`allocator::configure` is
/// not called here): the batches' buffers are freed on the consumer's thread, after the
/// consumer is done with them, so the decode threads keep needing fresh pages, and with
/// 100 ms mimalloc had returned the freed ones already: 190–250 k page faults per decode
/// of the 32 MB busybox-sort trace against 28–37 k, and the streaming decode 12–13% over
/// the CLI's CPU against 4–6% (benches/README.md, "Python streaming decode"). A Python
/// process holds its tables in memory anyway; the 50–70 MiB more the longer delay keeps
/// matter less there than in a night of CLI decodes.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The exception classes of `tracemill.errors` (python/tracemill/errors.py, where they
/// are defined with their docs and bases) that the module raises: named once here, and
/// listed as `_tracemill._ERROR_CLASSES`, whose every name a test finds in
/// `tracemill.errors` (a misspelt class would fall back to `RuntimeError` unnoticed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Option,
    Bundle,
    NoPsb,
    MissingImage,
    Decode,
    Report,
    Filter,
    Ingest,
}

impl Class {
    const ALL: [Class; 8] = [
        Class::Option,
        Class::Bundle,
        Class::NoPsb,
        Class::MissingImage,
        Class::Decode,
        Class::Report,
        Class::Filter,
        Class::Ingest,
    ];

    /// Its name in `tracemill.errors`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Class::Option => "OptionError",
            Class::Bundle => "BundleError",
            Class::NoPsb => "NoPsbError",
            Class::MissingImage => "MissingImageError",
            Class::Decode => "DecodeError",
            Class::Report => "ReportError",
            Class::Filter => "FilterError",
            Class::Ingest => "IngestError",
        }
    }
}

/// An exception of class `class` of `tracemill.errors`, raised with `msg`.
pub(crate) fn error(py: Python<'_>, class: Class, msg: impl Into<String>) -> PyErr {
    let msg = msg.into();
    match py
        .import("tracemill.errors")
        .and_then(|m| m.getattr(class.name()))
        .and_then(|c| c.cast_into::<PyType>().map_err(PyErr::from))
    {
        Ok(class) => PyErr::from_type(class, msg),
        // The package's Python half is missing (the module imported on its own).
        Err(_) => pyo3::exceptions::PyRuntimeError::new_err(msg),
    }
}

/// `error` with the CLI's one-line text of `e`; an input refused for an option given
/// with it (`tracemill_input::source::InputError`) names the option as Python does
/// (`ctl=`, not `--ctl`), and is an `OptionError` unless the input itself is at fault.
pub(crate) fn error_from(py: Python<'_>, class: Class, e: &anyhow::Error) -> PyErr {
    use tracemill_input::source::{ErrorKind, Face, InputError};
    if let Some(ie) = e.chain().find_map(|c| c.downcast_ref::<InputError>()) {
        let class = match ie.kind {
            ErrorKind::NeedsCtl | ErrorKind::NeedsCtlForBytes | ErrorKind::Mismatch { .. } => {
                Class::Bundle
            }
            _ => Class::Option,
        };
        return error(py, class, ie.message(Face::Python));
    }
    error(py, class, tracemill::errors::error_text(e))
}

/// `format=`: `"rtit"`, `"pt"`, or None (the input layer decides).
pub(crate) fn format_arg(
    py: Python<'_>,
    format: Option<&str>,
) -> PyResult<Option<tracemill_input::manifest::TraceFormat>> {
    use tracemill_input::manifest::TraceFormat;
    match format {
        None => Ok(None),
        Some("rtit") => Ok(Some(TraceFormat::Rtit)),
        Some("pt") => Ok(Some(TraceFormat::Pt)),
        Some(f) => Err(error(
            py,
            Class::Option,
            format!("format={f:?}: choose rtit or pt"),
        )),
    }
}

/// The Intel PT facts given as `cpu=`, `mtc_freq=`, `nom_freq=`, `cpuid_0x15_eax=` and
/// `cpuid_0x15_ebx=` (`decode` and `ingest`), over a bundle's `[pt]`.
pub(crate) fn pt_args(
    cpu: Option<String>,
    mtc_freq: Option<u8>,
    nom_freq: Option<u8>,
    cpuid_0x15_eax: Option<u32>,
    cpuid_0x15_ebx: Option<u32>,
) -> tracemill_input::source::PtOverrides {
    tracemill_input::source::PtOverrides {
        cpu: cpu.map(|c| (c != "none").then_some(c)),
        mtc_freq,
        nom_freq,
        tsc_ctc_ratio_d: cpuid_0x15_eax,
        tsc_ctc_ratio_n: cpuid_0x15_ebx,
    }
}

/// Issue `msg` as a `tracemill.errors.TracemillWarning`.
pub(crate) fn warn(py: Python<'_>, msg: &str) -> PyResult<()> {
    let class = py.import("tracemill.errors")?.getattr("TracemillWarning")?;
    py.import("warnings")?
        .call_method1("warn", (msg, class, 2))
        .map(|_| ())
}

/// A path argument: `str` or `os.PathLike`.
pub(crate) fn path_arg(obj: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    obj.extract::<PathBuf>()
}

/// `--image` specs (`PATH`, `PATH@ADDR`, `PATH@ADDR@CR3`), relative paths taken from the
/// current directory, as the command line does.
pub(crate) fn image_args(
    py: Python<'_>,
    specs: &[String],
) -> PyResult<Vec<tracemill_input::manifest::ImageEntry>> {
    specs
        .iter()
        .map(|s| {
            let mut e = tracemill_input::bundle::parse_image_arg(s)
                .map_err(|e| error_from(py, Class::Option, &e))?;
            if Path::new(&e.path).is_relative() {
                let abs = std::path::absolute(&e.path)
                    .with_context(|| format!("--image {s}: no current directory"))
                    .map_err(|e| error_from(py, Class::Option, &e))?;
                e.path = abs.to_string_lossy().into_owned();
            }
            Ok(e)
        })
        .collect()
}

/// The tracemill version this module was built from.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// A fingerprint of the sources this module was built from (build.rs): the test command
/// compares it with the working tree's, to refuse testing a stale installed package.
#[pyfunction]
fn _source_fingerprint() -> &'static str {
    env!("TRACEMILL_SOURCE_FINGERPRINT")
}

/// The schema of a table (`branches`, ...), with its columns' documentation, as an
/// `arrow_schema` capsule holder for `pyarrow.schema(...)`. (A decode's streams carry the
/// file metadata besides.)
#[pyfunction]
fn table_schema(py: Python<'_>, table: &str) -> PyResult<Py<arrow_export::ArrowStream>> {
    let schema = tracemill_schemas::arrow::by_name(table).ok_or_else(|| {
        error(
            py,
            Class::Option,
            format!(
                "unknown table {table:?}: choose from branches, events, timing, coverage, edges"
            ),
        )
    })?;
    Py::new(py, arrow_export::ArrowStream::new(schema, Vec::new()))
}

#[pymodule]
fn _tracemill(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("_ERROR_CLASSES", Class::ALL.map(Class::name))?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_function(wrap_pyfunction!(_source_fingerprint, m)?)?;
    m.add_function(wrap_pyfunction!(stream::decode, m)?)?;
    m.add_function(wrap_pyfunction!(table_schema, m)?)?;
    m.add_class::<stream::Decoding>()?;
    m.add_class::<stream::TableStream>()?;
    m.add_class::<arrow_export::ArrowStream>()?;
    m.add_function(wrap_pyfunction!(tools::dump, m)?)?;
    m.add_function(wrap_pyfunction!(tools::ingest, m)?)?;
    m.add_function(wrap_pyfunction!(reports::hotspots, m)?)?;
    m.add_function(wrap_pyfunction!(reports::flamegraph, m)?)?;
    m.add_function(wrap_pyfunction!(reports::flamegraph_svg, m)?)?;
    m.add_function(wrap_pyfunction!(reports::coverage, m)?)?;
    m.add_function(wrap_pyfunction!(reports::timeline, m)?)?;
    m.add_function(wrap_pyfunction!(reports::html, m)?)?;
    m.add_function(wrap_pyfunction!(reports::diff, m)?)?;
    m.add_function(wrap_pyfunction!(reports::pprof, m)?)?;
    m.add_function(wrap_pyfunction!(reports::perf_script, m)?)?;
    Ok(())
}
