//! `tracemill.report`: the reports of `tracemill report` (crate `tracemill-reports`) as
//! Arrow tables, over a `decode --out` directory or an ingested dataset (with `where`).
//! Each table's schema metadata says what it is (`tracemill.report`) and carries the
//! totals the CLI prints above its rows.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray, UInt32Array, UInt64Array,
};
use arrow_schema::{Field, Schema};
use pyo3::prelude::*;
use tracemill_reports::dataset::{parse_where, FilterError};
use tracemill_reports::hotspots::{By, Weight};
use tracemill_reports::Source;

use crate::arrow_export::ArrowStream;
use crate::{error, error_from, warn, Class};

/// Open what a report runs over; `where_` selects bundles of a dataset.
fn open(
    py: Python<'_>,
    source: PathBuf,
    bundle: Option<PathBuf>,
    where_: Option<String>,
) -> PyResult<Source> {
    let filter = match &where_ {
        Some(s) => Some(parse_where(s).map_err(|e| error(py, Class::Filter, e))?),
        None => None,
    };
    let (src, ws) = Source::open(
        &source,
        bundle.as_deref(),
        filter.as_ref().zip(where_.as_deref()),
    )
    .map_err(|e| report_error(py, &e))?;
    warn_all(py, &ws)?;
    Ok(src)
}

fn report_error(py: Python<'_>, e: &anyhow::Error) -> PyErr {
    if e.is::<FilterError>() {
        error_from(py, Class::Filter, e)
    } else {
        error_from(py, Class::Report, e)
    }
}

fn warn_all(py: Python<'_>, ws: &[String]) -> PyResult<()> {
    ws.iter().try_for_each(|w| warn(py, w))
}

/// A one-batch table with `meta` as schema metadata, as a `pyarrow.Table`.
fn table(
    py: Python<'_>,
    report: &str,
    columns: Vec<(&str, ArrayRef, bool)>,
    meta: Vec<(&str, String)>,
) -> PyResult<Py<PyAny>> {
    let mut md: HashMap<String, String> = meta
        .into_iter()
        .map(|(k, v)| (format!("tracemill.{k}"), v))
        .collect();
    md.insert("tracemill.report".into(), report.into());
    let fields: Vec<Field> = columns
        .iter()
        .map(|(n, a, nullable)| Field::new(*n, a.data_type().clone(), *nullable))
        .collect();
    let schema = Arc::new(Schema::new_with_metadata(fields, md));
    let batch = RecordBatch::try_new(schema.clone(), columns.into_iter().map(|c| c.1).collect())
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?;
    ArrowStream::new(schema, vec![batch]).into_table(py)
}

fn strings<'a>(v: impl Iterator<Item = &'a str>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(v))
}

fn u64s(v: impl Iterator<Item = u64>) -> ArrayRef {
    Arc::new(UInt64Array::from_iter_values(v))
}

fn weight_arg(py: Python<'_>, w: &str) -> PyResult<Weight> {
    match w {
        "instructions" => Ok(Weight::Instructions),
        "cycles" => Ok(Weight::Cycles),
        "branches" => Ok(Weight::Branches),
        _ => Err(error(
            py,
            Class::Option,
            format!("weight={w:?}: choose instructions, cycles or branches"),
        )),
    }
}

/// Where the instructions (or cycles) went, by function, source line or block.
#[pyfunction]
#[pyo3(signature = (source, *, by="function", weight="instructions", r#where=None, bundle=None))]
pub(crate) fn hotspots(
    py: Python<'_>,
    source: PathBuf,
    by: &str,
    weight: &str,
    r#where: Option<String>,
    bundle: Option<PathBuf>,
) -> PyResult<Py<PyAny>> {
    let by = by_arg(py, by)?;
    let weight = weight_arg(py, weight)?;
    let mut src = open(py, source, bundle, r#where)?;
    let h = tracemill_reports::hotspots::hotspots_of(&mut src, by, weight)
        .map_err(|e| report_error(py, &e))?;
    warn_all(py, &h.warnings)?;
    let rows = &h.rows;
    let mut columns = vec![
        (
            "function",
            strings(rows.iter().map(|r| r.function.as_str())),
            false,
        ),
        (
            "image",
            strings(rows.iter().map(|r| r.image.as_str())),
            false,
        ),
    ];
    match by {
        By::Function => {}
        By::Line => columns.push((
            "line",
            strings(rows.iter().map(|r| r.location.as_str())),
            false,
        )),
        By::Block => columns.push((
            "block",
            strings(rows.iter().map(|r| r.location.as_str())),
            false,
        )),
    }
    columns.extend([
        (
            "instructions",
            u64s(rows.iter().map(|r| r.instructions)),
            false,
        ),
        (
            "cycles",
            Arc::new(rows.iter().map(|r| r.cycles).collect::<UInt64Array>()) as ArrayRef,
            true,
        ),
        ("branches", u64s(rows.iter().map(|r| r.branches)), false),
        ("calls", u64s(rows.iter().map(|r| r.calls)), false),
        (
            "share",
            Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.share))) as ArrayRef,
            false,
        ),
    ]);
    table(
        py,
        "hotspots",
        columns,
        vec![
            ("by", h.by.clone()),
            ("weight", h.weight.clone()),
            ("total_instructions", h.total_instructions.to_string()),
            ("total_branches", h.total_branches.to_string()),
            (
                "total_cycles",
                h.total_cycles.map_or(String::new(), |c| c.to_string()),
            ),
        ],
    )
}

fn cycles_arg(py: Python<'_>, weight: &str) -> PyResult<bool> {
    match weight {
        "instructions" => Ok(false),
        "cycles" => Ok(true),
        _ => Err(error(
            py,
            Class::Option,
            format!("weight={weight:?}: flame graphs weigh instructions or cycles"),
        )),
    }
}

/// The call stacks, folded: one row per distinct stack (`outer;...;inner`) with its
/// weight, in the order `--folded` writes them.
#[pyfunction]
#[pyo3(signature = (source, *, weight="instructions", r#where=None, bundle=None))]
pub(crate) fn flamegraph(
    py: Python<'_>,
    source: PathBuf,
    weight: &str,
    r#where: Option<String>,
    bundle: Option<PathBuf>,
) -> PyResult<Py<PyAny>> {
    let cycles = cycles_arg(py, weight)?;
    let mut src = open(py, source, bundle, r#where)?;
    let mut warnings = Vec::new();
    let (st, names) = tracemill_reports::stacks::stacks_of(&mut src, cycles, &mut warnings)
        .map_err(|e| report_error(py, &e))?;
    let use_cycles = if cycles && !st.has_cycles {
        warnings.push("no cycles in the branches table: weighted by instructions".into());
        false
    } else {
        cycles
    };
    warn_all(py, &warnings)?;
    let mut text = Vec::new();
    st.write_folded(&names, use_cycles, &mut text)
        .map_err(|e| error(py, Class::Report, format!("folding the stacks: {e}")))?;
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<(&str, u64)> = text
        .lines()
        .filter_map(|l| {
            let (stack, w) = l.rsplit_once(' ')?;
            Some((stack, w.parse().ok()?))
        })
        .collect();
    table(
        py,
        "flamegraph",
        vec![
            ("stack", strings(lines.iter().map(|l| l.0)), false),
            ("weight", u64s(lines.iter().map(|l| l.1)), false),
        ],
        vec![
            (
                "weight",
                if use_cycles { "cycles" } else { "instructions" }.into(),
            ),
            ("total", st.total(use_cycles).to_string()),
            ("gaps", st.gaps.to_string()),
            ("mismatched_returns", st.mismatched_returns.to_string()),
            ("longjmps", st.longjmps.to_string()),
            ("async_entries", st.async_entries.to_string()),
        ],
    )
}

/// The flame graph as SVG text (inferno's, interactive in a browser or a notebook).
#[pyfunction]
#[pyo3(signature = (source, *, weight="instructions", r#where=None, bundle=None))]
pub(crate) fn flamegraph_svg(
    py: Python<'_>,
    source: PathBuf,
    weight: &str,
    r#where: Option<String>,
    bundle: Option<PathBuf>,
) -> PyResult<String> {
    use tracemill_reports::stacks::{stacks_of, svg_min_weight, write_svg};
    let cycles = cycles_arg(py, weight)?;
    let mut src = open(py, source, bundle, r#where)?;
    let mut warnings = Vec::new();
    let (mut st, names) =
        stacks_of(&mut src, cycles, &mut warnings).map_err(|e| report_error(py, &e))?;
    let use_cycles = cycles && st.has_cycles;
    if cycles && !use_cycles {
        warnings.push("no cycles in the branches table: weighted by instructions".into());
    }
    warn_all(py, &warnings)?;
    let total = st.total(use_cycles);
    let lines = st.folded(&names, use_cycles, svg_min_weight(total));
    let mut svg = Vec::new();
    write_svg(
        &lines,
        &format!("tracemill: {}", src.title()),
        use_cycles,
        &mut svg,
    )
    .map_err(|e| report_error(py, &e))?;
    String::from_utf8(svg).map_err(|e| error(py, Class::Report, e.to_string()))
}

/// Coverage per function or per image.
#[pyfunction]
#[pyo3(signature = (source, *, by="function", r#where=None, bundle=None))]
pub(crate) fn coverage(
    py: Python<'_>,
    source: PathBuf,
    by: &str,
    r#where: Option<String>,
    bundle: Option<PathBuf>,
) -> PyResult<Py<PyAny>> {
    if by != "function" && by != "image" {
        return Err(error(
            py,
            Class::Option,
            format!("by={by:?}: choose function or image"),
        ));
    }
    let mut src = open(py, source, bundle, r#where)?;
    let mut warnings = Vec::new();
    let rep = tracemill_reports::coverage::with_blocks(&mut src, &mut warnings, |syms, blocks| {
        tracemill_reports::coverage::coverage(syms, blocks)
    })
    .map_err(|e| report_error(py, &e))?;
    warnings.extend(rep.warnings.iter().cloned());
    warn_all(py, &warnings)?;
    if by == "image" {
        let r = &rep.images;
        return table(
            py,
            "coverage",
            vec![
                ("image", strings(r.iter().map(|i| i.image.as_str())), false),
                ("blocks", u64s(r.iter().map(|i| i.blocks)), false),
                (
                    "instructions",
                    u64s(r.iter().map(|i| i.instructions)),
                    false,
                ),
                (
                    "functions_total",
                    u64s(r.iter().map(|i| i.functions_total)),
                    false,
                ),
                (
                    "functions_hit",
                    u64s(r.iter().map(|i| i.functions_hit)),
                    false,
                ),
                ("code_bytes", u64s(r.iter().map(|i| i.code_bytes)), false),
                (
                    "covered_bytes",
                    u64s(r.iter().map(|i| i.covered_bytes)),
                    false,
                ),
            ],
            vec![("by", "image".into())],
        );
    }
    let r = &rep.functions;
    table(
        py,
        "coverage",
        vec![
            ("image", strings(r.iter().map(|f| f.image.as_str())), false),
            (
                "function",
                strings(r.iter().map(|f| f.function.as_str())),
                false,
            ),
            ("size", u64s(r.iter().map(|f| f.size)), false),
            (
                "covered_bytes",
                u64s(r.iter().map(|f| f.covered_bytes)),
                false,
            ),
            (
                "instructions",
                u64s(r.iter().map(|f| f.instructions)),
                false,
            ),
            ("entries", u64s(r.iter().map(|f| f.entries)), false),
            ("lines_total", u64s(r.iter().map(|f| f.lines_total)), false),
            ("lines_hit", u64s(r.iter().map(|f| f.lines_hit)), false),
        ],
        vec![("by", "function".into())],
    )
}

/// Call spans in time: one row per frame, from the timeline `tracemill report timeline`
/// writes as Chrome trace JSON.
#[pyfunction]
#[pyo3(signature = (source, *, r#where=None, bundle=None, start=None, end=None, tsc_mhz=None, max_spans=1_000_000, min_ns=1.0))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn timeline(
    py: Python<'_>,
    source: PathBuf,
    r#where: Option<String>,
    bundle: Option<PathBuf>,
    start: Option<u64>,
    end: Option<u64>,
    tsc_mhz: Option<f64>,
    max_spans: u64,
    min_ns: f64,
) -> PyResult<Py<PyAny>> {
    let mut src = open(py, source, bundle, r#where)?;
    let opts = tracemill_reports::timeline::Options {
        from: start,
        to: end,
        tsc_mhz,
        max_spans,
        outermost: false,
        min_ns,
    };
    let mut json = Vec::new();
    let s = tracemill_reports::timeline::write(&mut src, &opts, &mut json)
        .map_err(|e| report_error(py, &e))?;
    warn_all(py, &s.warnings)?;
    let doc: serde_json::Value = serde_json::from_slice(&json)
        .map_err(|e| error(py, Class::Report, format!("reading the timeline back: {e}")))?;
    let mut processes: HashMap<u64, String> = HashMap::new();
    let (mut pid, mut name, mut depth, mut ts, mut dur) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // A span of merged calls says how many (`args.calls`, `args.nested`); a frame is one.
    let (mut calls, mut nested) = (Vec::new(), Vec::new());
    for ev in doc["traceEvents"].as_array().into_iter().flatten() {
        let p = ev["pid"].as_u64().unwrap_or(0);
        match ev["ph"].as_str() {
            Some("M") => {
                processes.insert(p, ev["args"]["name"].as_str().unwrap_or("").to_string());
            }
            Some("X") => {
                pid.push(p as u32);
                name.push(ev["name"].as_str().unwrap_or("").to_string());
                depth.push(ev["args"]["depth"].as_u64().unwrap_or(0) as u32);
                ts.push(ev["ts"].as_f64().unwrap_or(0.0));
                dur.push(ev["dur"].as_f64().unwrap_or(0.0));
                calls.push(ev["args"]["calls"].as_u64().unwrap_or(1) as u32);
                nested.push(ev["args"]["nested"].as_u64().unwrap_or(0) as u32);
            }
            _ => {}
        }
    }
    let process: Vec<&str> = pid
        .iter()
        .map(|p| processes.get(&(*p as u64)).map_or("", String::as_str))
        .collect();
    table(
        py,
        "timeline",
        vec![
            ("pid", Arc::new(UInt32Array::from(pid)) as ArrayRef, false),
            ("process", strings(process.into_iter()), false),
            ("function", strings(name.iter().map(String::as_str)), false),
            (
                "depth",
                Arc::new(UInt32Array::from(depth)) as ArrayRef,
                false,
            ),
            (
                "start_us",
                Arc::new(Float64Array::from(ts)) as ArrayRef,
                false,
            ),
            (
                "duration_us",
                Arc::new(Float64Array::from(dur)) as ArrayRef,
                false,
            ),
            (
                "calls",
                Arc::new(UInt32Array::from(calls)) as ArrayRef,
                false,
            ),
            (
                "nested",
                Arc::new(UInt32Array::from(nested)) as ArrayRef,
                false,
            ),
        ],
        vec![
            (
                "tsc_origin",
                s.first_tsc.map_or(String::new(), |t| format!("{t:#x}")),
            ),
            ("tsc_mhz", s.tsc_mhz.to_string()),
            ("dropped", s.dropped.to_string()),
            ("merged", s.merged.to_string()),
        ],
    )
}

/// The one-page HTML report (self-contained); with `baseline`, a section of what changed
/// against it.
#[pyfunction]
#[pyo3(signature = (source, *, top=50, r#where=None, bundle=None, baseline=None, baseline_where=None))]
pub(crate) fn html(
    py: Python<'_>,
    source: PathBuf,
    top: usize,
    r#where: Option<String>,
    bundle: Option<PathBuf>,
    baseline: Option<PathBuf>,
    baseline_where: Option<String>,
) -> PyResult<String> {
    let mut src = open(py, source, bundle, r#where)?;
    let top = if top == 0 { usize::MAX } else { top };
    let diff = match baseline {
        Some(b) => {
            let mut base = open(py, b, None, baseline_where)?;
            Some(
                tracemill_reports::diff::diff(&mut base, &mut src, By::Function)
                    .map_err(|e| report_error(py, &e))?,
            )
        }
        None => None,
    };
    tracemill_reports::html::render_with(&mut src, top, diff.as_ref())
        .map_err(|e| report_error(py, &e))
}

/// Both `where`s must hold: joined by AND, as the CLI's `--where` with `--where-a`.
fn both(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(format!("{a} AND {b}")),
        (a, b) => a.or(b),
    }
}

fn by_arg(py: Python<'_>, by: &str) -> PyResult<By> {
    match by {
        "function" => Ok(By::Function),
        "line" => Ok(By::Line),
        "block" => Ok(By::Block),
        _ => Err(error(
            py,
            Class::Option,
            format!("by={by:?}: choose function, line or block"),
        )),
    }
}

/// What changed from `a` to `b`: one row per function (line, block) with instructions
/// and cycles on each side, the change, its share of A's total and the change of share
/// (`delta`); or with `coverage=True` one row per function and line with the blocks,
/// instructions and edges gained and lost.
#[pyfunction]
#[pyo3(signature = (a, b, *, by="function", r#where=None, where_a=None, where_b=None, coverage=false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn diff(
    py: Python<'_>,
    a: PathBuf,
    b: PathBuf,
    by: &str,
    r#where: Option<String>,
    where_a: Option<String>,
    where_b: Option<String>,
    coverage: bool,
) -> PyResult<Py<PyAny>> {
    let by = by_arg(py, by)?;
    let mut sa = open(py, a, None, both(r#where.clone(), where_a))?;
    let mut sb = open(py, b, None, both(r#where, where_b))?;
    let d =
        tracemill_reports::diff::diff(&mut sa, &mut sb, by).map_err(|e| report_error(py, &e))?;
    warn_all(py, &d.warnings)?;
    let opt = |v: Option<u64>| v.map_or(String::new(), |c| c.to_string());
    let meta = vec![
        ("a", d.a.clone()),
        ("b", d.b.clone()),
        ("by", d.by.clone()),
        ("total_instructions_a", d.total_instructions_a.to_string()),
        ("total_instructions_b", d.total_instructions_b.to_string()),
        ("total_cycles_a", opt(d.total_cycles_a)),
        ("total_cycles_b", opt(d.total_cycles_b)),
        ("blocks_a", d.blocks_a.to_string()),
        ("blocks_b", d.blocks_b.to_string()),
        ("edges_a", d.edges_a.to_string()),
        ("edges_b", d.edges_b.to_string()),
    ];
    if coverage {
        let c = &d.coverage;
        return table(
            py,
            "diff_coverage",
            vec![
                ("image", strings(c.iter().map(|r| r.image.as_str())), false),
                (
                    "function",
                    strings(c.iter().map(|r| r.function.as_str())),
                    false,
                ),
                ("line", strings(c.iter().map(|r| r.line.as_str())), false),
                (
                    "blocks_gained",
                    u64s(c.iter().map(|r| r.blocks_gained)),
                    false,
                ),
                ("blocks_lost", u64s(c.iter().map(|r| r.blocks_lost)), false),
                (
                    "instructions_gained",
                    u64s(c.iter().map(|r| r.instructions_gained)),
                    false,
                ),
                (
                    "instructions_lost",
                    u64s(c.iter().map(|r| r.instructions_lost)),
                    false,
                ),
                (
                    "edges_gained",
                    u64s(c.iter().map(|r| r.edges_gained)),
                    false,
                ),
                ("edges_lost", u64s(c.iter().map(|r| r.edges_lost)), false),
            ],
            meta,
        );
    }
    let rows = &d.rows;
    let mut columns = vec![
        (
            "function",
            strings(rows.iter().map(|r| r.function.as_str())),
            false,
        ),
        (
            "image",
            strings(rows.iter().map(|r| r.image.as_str())),
            false,
        ),
    ];
    match by {
        By::Function => {}
        By::Line => columns.push((
            "line",
            strings(rows.iter().map(|r| r.location.as_str())),
            false,
        )),
        By::Block => columns.push((
            "block",
            strings(rows.iter().map(|r| r.location.as_str())),
            false,
        )),
    }
    let opt_u64 = |f: fn(&tracemill_reports::diff::Change) -> Option<u64>| {
        Arc::new(rows.iter().map(f).collect::<UInt64Array>()) as ArrayRef
    };
    columns.extend([
        (
            "instructions_a",
            u64s(rows.iter().map(|r| r.instructions_a)),
            false,
        ),
        (
            "instructions_b",
            u64s(rows.iter().map(|r| r.instructions_b)),
            false,
        ),
        (
            "change",
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.change))) as ArrayRef,
            false,
        ),
        (
            "share",
            Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.share))) as ArrayRef,
            false,
        ),
        (
            "delta",
            Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.delta))) as ArrayRef,
            false,
        ),
        ("cycles_a", opt_u64(|r| r.cycles_a), true),
        ("cycles_b", opt_u64(|r| r.cycles_b), true),
        (
            "cycles_change",
            Arc::new(rows.iter().map(|r| r.cycles_change).collect::<Int64Array>()) as ArrayRef,
            true,
        ),
    ]);
    table(py, "diff", columns, meta)
}

/// The flame graph's stacks as a gzipped pprof profile written to `out`: what it holds.
#[pyfunction]
#[pyo3(signature = (source, out, *, r#where=None, bundle=None))]
pub(crate) fn pprof(
    py: Python<'_>,
    source: PathBuf,
    out: PathBuf,
    r#where: Option<String>,
    bundle: Option<PathBuf>,
) -> PyResult<HashMap<String, u64>> {
    let mut src = open(py, source, bundle, r#where)?;
    let f = std::fs::File::create(&out).map_err(|e| {
        error(
            py,
            Class::Report,
            format!("{}: cannot create: {e}", out.display()),
        )
    })?;
    let s = tracemill_reports::pprof::write(&mut src, std::io::BufWriter::new(f))
        .map_err(|e| report_error(py, &e))?;
    warn_all(py, &s.warnings)?;
    let mut m = HashMap::from([
        ("samples".to_string(), s.samples),
        ("functions".to_string(), s.functions),
        ("mappings".to_string(), s.mappings),
        ("instructions".to_string(), s.instructions),
    ]);
    if let Some(c) = s.cycles {
        m.insert("cycles".into(), c);
    }
    Ok(m)
}

/// The taken branches in `perf script --itrace=b`'s text, written to `out`: the number of
/// lines.
#[pyfunction]
#[pyo3(signature = (source, out, *, r#where=None, bundle=None))]
pub(crate) fn perf_script(
    py: Python<'_>,
    source: PathBuf,
    out: PathBuf,
    r#where: Option<String>,
    bundle: Option<PathBuf>,
) -> PyResult<u64> {
    let mut src = open(py, source, bundle, r#where)?;
    let f = std::fs::File::create(&out).map_err(|e| {
        error(
            py,
            Class::Report,
            format!("{}: cannot create: {e}", out.display()),
        )
    })?;
    let s = tracemill_reports::perf_script::write(&mut src, f).map_err(|e| report_error(py, &e))?;
    warn_all(py, &s.warnings)?;
    Ok(s.lines)
}
