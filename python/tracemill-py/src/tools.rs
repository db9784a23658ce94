//! `tracemill.dump` (the packet listing) and `tracemill.ingest` (bundles into a dataset),
//! as Arrow tables.

use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::types::Int32Type;
use arrow_array::{
    builder::BinaryBuilder, ArrayRef, DictionaryArray, Float64Array, RecordBatch, StringArray,
    UInt64Array,
};
use arrow_schema::{DataType, Field, Schema};
use pyo3::prelude::*;
use tracemill::dump::Entry;
use tracemill::ingest::{IngestOptions, Outcome, Status};
use tracemill_decode::rtit::config::TraceConfig;
use tracemill_input::bundle::Bundle;
use tracemill_input::manifest::TraceFormat;
use tracemill_input::perf::Lookup;
use tracemill_input::source::{Given, Opened, Overrides};
use tracemill_input::Source;

use crate::arrow_export::ArrowStream;
use crate::{error, error_from, warn, Class};

/// The listing's columns as they are gathered.
#[derive(Default)]
struct Listing {
    offset: Vec<u64>,
    bytes: BinaryBuilder,
    packet: Vec<String>,
    fields: Vec<String>,
    no_psb: bool,
}

impl Listing {
    /// A perf.data's next AUX area (`cpu 3`) starts: a row naming it.
    fn area(&mut self, name: &str) {
        self.offset.push(0);
        self.bytes.append_value([]);
        self.packet.push("trace".to_string());
        self.fields.push(name.to_string());
    }

    fn push(&mut self, e: Entry<'_>) -> std::io::Result<()> {
        let (offset, bytes, packet, fields): (u64, &[u8], &str, String) = match e {
            Entry::NoPsb => {
                self.no_psb = true;
                return Ok(());
            }
            Entry::Skipped(n) => (0, &[], "skipped", format!("{n} bytes before the first PSB")),
            Entry::Error { offset, message } => (offset, &[], "error", message.to_string()),
            Entry::Packet {
                offset,
                bytes,
                name,
                fields,
            } => (offset, bytes, name, fields.to_string()),
        };
        self.offset.push(offset);
        self.bytes.append_value(bytes);
        self.packet.push(packet.to_string());
        self.fields.push(fields);
        Ok(())
    }

    fn into_batch(mut self, format: &str) -> (Arc<Schema>, RecordBatch) {
        let packet: DictionaryArray<Int32Type> = self.packet.iter().map(String::as_str).collect();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt64Array::from(self.offset)),
            Arc::new(self.bytes.finish()),
            Arc::new(packet),
            Arc::new(StringArray::from(self.fields)),
        ];
        let schema = Arc::new(Schema::new_with_metadata(
            vec![
                Field::new("offset", DataType::UInt64, false),
                Field::new("bytes", DataType::Binary, false),
                Field::new(
                    "packet",
                    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
                    false,
                ),
                Field::new("fields", DataType::Utf8, false),
            ],
            [
                ("tracemill.report".to_string(), "dump".to_string()),
                ("tracemill.format".to_string(), format.to_string()),
            ]
            .into_iter()
            .collect::<std::collections::HashMap<_, _>>(),
        ));
        let b = RecordBatch::try_new(schema.clone(), columns).expect("the columns match");
        (schema, b)
    }
}

/// The packet listing of a bundle, bare trace or perf.data (RTIT or Intel PT, as the
/// input layer decides it for every command): one row per packet (its offset, bytes, name
/// and fields), or with `stats` one row per packet type. A perf.data's AUX areas are listed
/// in turn, each after a row `trace` naming it (`cpu 3`); their stats are summed.
#[pyfunction]
#[pyo3(signature = (bundle, *, ctl=None, images=None, format=None, stats=false))]
pub(crate) fn dump(
    py: Python<'_>,
    bundle: &Bound<'_, PyAny>,
    ctl: Option<u64>,
    images: Option<Vec<String>>,
    format: Option<&str>,
    stats: bool,
) -> PyResult<Py<PyAny>> {
    let path: PathBuf = crate::path_arg(bundle)?;
    let overrides = Overrides {
        format: crate::format_arg(py, format)?,
        ctl,
        images: crate::image_args(py, images.as_deref().unwrap_or(&[]))?,
        ..Overrides::default()
    };
    let src = py
        .detach(|| Source::open(Given::Path(&path), &overrides))
        .map_err(|e| error_from(py, Class::Bundle, &e))?;
    let traces: Vec<(Option<&str>, &Bundle)> = match &src.opened {
        Opened::Bundle(b) => vec![(None, b)],
        Opened::Recording(r) => r
            .traces
            .iter()
            .map(|t| (Some(t.name.as_str()), &t.bundle))
            .collect(),
    };
    let mut listing = Listing::default();
    let name = match src.format {
        TraceFormat::Rtit => "rtit",
        TraceFormat::Pt => "pt",
    };
    let mut counts: Option<tracemill::dump::Stats> = None;
    for (area, b) in traces {
        let stream = b.stream();
        let one = match src.format {
            TraceFormat::Rtit => {
                let cfg = TraceConfig::from_ctl(b.manifest.rtit_ctl);
                if stats {
                    Some(tracemill::dump::stats(&stream, &cfg))
                } else {
                    if let Some(n) = area {
                        listing.area(n);
                    }
                    let _ = tracemill::dump::entries(&stream, &cfg, &mut |e| listing.push(e));
                    None
                }
            }
            TraceFormat::Pt => {
                let cfg = b
                    .pt_config()
                    .map_err(|e| error_from(py, Class::Bundle, &e))?;
                if stats {
                    Some(tracemill::dump::pt_stats(&stream, &cfg))
                } else {
                    if let Some(n) = area {
                        listing.area(n);
                    }
                    let _ = tracemill::dump::pt_entries(&stream, &cfg, &mut |e| listing.push(e));
                    None
                }
            }
        };
        if let Some(one) = one {
            let all = counts.get_or_insert_with(Default::default);
            all.bytes += one.bytes;
            all.skipped += one.skipped;
            all.errors += one.errors;
            for (k, n) in one.by_type {
                *all.by_type.entry(k).or_default() += n;
            }
        }
    }
    if let Some(s) = counts {
        let names: Vec<&str> = match src.format {
            TraceFormat::Rtit => tracemill_decode::rtit::packet::Packet::NAMES.to_vec(),
            TraceFormat::Pt => tracemill_decode::pt::Packet::NAMES.to_vec(),
        };
        let count: Vec<u64> = names
            .iter()
            .map(|n| s.by_type.get(n).copied().unwrap_or(0))
            .collect();
        let schema = Arc::new(Schema::new_with_metadata(
            vec![
                Field::new("packet", DataType::Utf8, false),
                Field::new("count", DataType::UInt64, false),
            ],
            [
                ("tracemill.report", "dump stats".to_string()),
                ("tracemill.format", name.to_string()),
                ("tracemill.bytes", s.bytes.to_string()),
                ("tracemill.skipped", s.skipped.to_string()),
                ("tracemill.errors", s.errors.to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect::<std::collections::HashMap<_, _>>(),
        ));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(names)),
                Arc::new(UInt64Array::from(count)),
            ],
        )
        .expect("the columns match");
        return ArrowStream::new(schema, vec![b]).into_table(py);
    }
    if listing.no_psb {
        let len = src.stream_len();
        warn(py, &format!("no PSB in {len} bytes: nothing to parse"))?;
    }
    let (schema, b) = listing.into_batch(name);
    ArrowStream::new(schema, vec![b]).into_table(py)
}

/// Ingest bundles into a dataset, as `tracemill ingest` does; one row per bundle of this
/// run (its share): what happened to it, and its catalog facts.
#[pyfunction]
#[pyo3(signature = (sources, dataset, *, partition_by=None, allow_missing_keys=false, jobs=None, shard=None, retry_failed=false, staging=None, zstd_level=3, compression="zstd", allow_outside_paths=false, symfs=None, buildid_dir=None, vmlinux=None, kcore=None, format=None, cpu=None, mtc_freq=None, nom_freq=None, cpuid_0x15_eax=None, cpuid_0x15_ebx=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn ingest(
    py: Python<'_>,
    sources: Vec<PathBuf>,
    dataset: String,
    partition_by: Option<Vec<String>>,
    allow_missing_keys: bool,
    jobs: Option<i64>,
    shard: Option<String>,
    retry_failed: bool,
    staging: Option<PathBuf>,
    zstd_level: i32,
    compression: &str,
    allow_outside_paths: bool,
    symfs: Option<PathBuf>,
    buildid_dir: Option<PathBuf>,
    vmlinux: Option<PathBuf>,
    kcore: Option<PathBuf>,
    format: Option<&str>,
    cpu: Option<String>,
    mtc_freq: Option<u8>,
    nom_freq: Option<u8>,
    cpuid_0x15_eax: Option<u32>,
    cpuid_0x15_ebx: Option<u32>,
) -> PyResult<Py<PyAny>> {
    let jobs = crate::stream::jobs_arg(py, jobs)?;
    for (name, dir) in [("symfs", &symfs), ("buildid_dir", &buildid_dir)] {
        if let Some(d) = dir {
            tracemill::cli::parse_existing_dir(&d.to_string_lossy())
                .map_err(|e| error(py, Class::Option, format!("{name}={e}")))?;
        }
    }
    tracemill::cli::parse_zstd_level(&zstd_level.to_string())
        .map_err(|e| error(py, Class::Option, format!("zstd_level={zstd_level}: {e}")))?;
    let codecs = "one of \"zstd\", \"lz4\", \"snappy\", \"none\"";
    let compression = tracemill::cli::Compression::by_name(compression).ok_or_else(|| {
        let why = format!("compression={compression:?}: {codecs}");
        error(py, Class::Option, why)
    })?;
    let options = IngestOptions {
        dataset,
        partition_by: partition_by.unwrap_or_default(),
        allow_missing_keys,
        jobs,
        shard,
        shards: None,
        retry_failed,
        staging,
        zstd_level,
        codec: compression.into(),
        progress: false,
        allow_outside_paths,
        format: crate::format_arg(py, format)?,
        pt: crate::pt_args(cpu, mtc_freq, nom_freq, cpuid_0x15_eax, cpuid_0x15_ebx),
        lookup: Lookup {
            symfs,
            buildid_dir,
            vmlinux: vmlinux.into_iter().collect(),
            kcore: kcore.into_iter().collect(),
            confine: None,
        },
    };
    let opts = tracemill::ingest::plan(&options).map_err(|e| error_from(py, Class::Ingest, &e))?;
    let summary = py
        .detach(|| tracemill::ingest::ingest(&sources, &opts))
        .map_err(|e| error_from(py, Class::Ingest, &e))?;
    for (dup, first) in &summary.duplicates {
        warn(
            py,
            &format!(
                "duplicate: {} has the bytes of {}: ingested once",
                dup.display(),
                first.display()
            ),
        )?;
    }
    let n = summary.outcomes.len();
    let mut source = Vec::with_capacity(n);
    let mut bundle = Vec::with_capacity(n);
    let mut outcome = Vec::with_capacity(n);
    let mut status: Vec<Option<&str>> = Vec::with_capacity(n);
    let mut err: Vec<Option<String>> = Vec::with_capacity(n);
    let (mut tb, mut br, mut ins, mut gaps, mut errs, mut secs) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for (path, id, o) in &summary.outcomes {
        source.push(path.display().to_string());
        bundle.push(id.clone());
        let row = match o {
            Outcome::Committed(r) => {
                outcome.push("committed");
                status.push(Some(r.status.name()));
                err.push(r.error.clone());
                Some(r)
            }
            Outcome::Skipped(s) => {
                outcome.push("already committed");
                status.push(Some(s.name()));
                err.push(None);
                None
            }
            Outcome::NotCommitted(e) => {
                outcome.push("not committed");
                status.push(None);
                err.push(Some(e.clone()));
                None
            }
        };
        tb.push(row.and_then(|r| r.trace_bytes));
        br.push(row.and_then(|r| r.branches));
        ins.push(row.and_then(|r| r.instructions));
        gaps.push(row.and_then(|r| r.gaps));
        errs.push(row.and_then(|r| r.errors));
        secs.push(row.map(|r| r.seconds));
    }
    let failed = summary
        .outcomes
        .iter()
        .filter(|(_, _, o)| match o {
            Outcome::Committed(r) => r.status == Status::Failed,
            Outcome::Skipped(s) => *s == Status::Failed,
            Outcome::NotCommitted(_) => true,
        })
        .count();
    if failed > 0 {
        warn(
            py,
            &format!(
                "{failed} of {n} bundles failed or were not committed (tracemill ingest would \
                 exit {}): see the rows' status and error",
                summary.exit_code()
            ),
        )?;
    }
    let u64col = |v: Vec<Option<u64>>| Arc::new(UInt64Array::from(v)) as ArrayRef;
    let schema = Arc::new(Schema::new_with_metadata(
        vec![
            Field::new("source", DataType::Utf8, false),
            Field::new("bundle", DataType::Utf8, false),
            Field::new("outcome", DataType::Utf8, false),
            Field::new("status", DataType::Utf8, true),
            Field::new("error", DataType::Utf8, true),
            Field::new("trace_bytes", DataType::UInt64, true),
            Field::new("branches", DataType::UInt64, true),
            Field::new("instructions", DataType::UInt64, true),
            Field::new("gaps", DataType::UInt64, true),
            Field::new("errors", DataType::UInt64, true),
            Field::new("seconds", DataType::Float64, true),
        ],
        [
            ("tracemill.report".to_string(), "ingest".to_string()),
            ("tracemill.dataset".to_string(), opts.dest.display()),
            ("tracemill.found".to_string(), summary.found.to_string()),
            (
                "tracemill.exit_code".to_string(),
                summary.exit_code().to_string(),
            ),
            (
                "tracemill.summary".to_string(),
                summary.text(&opts.dest.display()),
            ),
        ]
        .into_iter()
        .collect::<std::collections::HashMap<_, _>>(),
    ));
    let b = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(source)),
            Arc::new(StringArray::from(bundle)),
            Arc::new(StringArray::from(outcome)),
            Arc::new(StringArray::from(status)),
            Arc::new(StringArray::from(err)),
            u64col(tb),
            u64col(br),
            u64col(ins),
            u64col(gaps),
            u64col(errs),
            Arc::new(Float64Array::from(secs)),
        ],
    )
    .expect("the columns match");
    ArrowStream::new(schema, vec![b]).into_table(py)
}
