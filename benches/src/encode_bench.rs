//! Where Parquet encoding time goes: re-encodes the first rows of a table written by
//! `tracemill decode` (read back into memory once) with the writer properties tracemill
//! uses and with variations of them, each column alone and all together, into memory, and
//! once through the writer's row-group encoder as `tracemill decode` runs it.
//! Prints CPU nanoseconds per row and bytes per row of each variant, medians of the runs
//! given, variants interleaved so that a busy machine slows them alike.
//!
//!     encode-bench OUT_DIR/branches.parquet [rows=4000000] [runs=3]
//!
//! Nothing is asserted: this is a measurement.

use std::fs::File;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use arrow_array::{Array, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterPropertiesBuilder};
use tracemill_sinks::WriterOptions;

type Variant = (
    &'static str,
    fn(WriterPropertiesBuilder) -> WriterPropertiesBuilder,
);

fn variants() -> Vec<Variant> {
    vec![
        ("tracemill default", |b| b),
        ("statistics per chunk, not page", |b| {
            b.set_statistics_enabled(EnabledStatistics::Chunk)
        }),
        ("no statistics", |b| {
            b.set_statistics_enabled(EnabledStatistics::None)
        }),
        ("no bloom filter", |b| b.set_bloom_filter_enabled(false)),
        ("write batch 8192", |b| b.set_write_batch_size(8192)),
        ("batch 8192, page stats on delta only", |b| {
            b.set_write_batch_size(8192)
                .set_statistics_enabled(EnabledStatistics::Chunk)
                .set_column_statistics_enabled("seq".into(), EnabledStatistics::Page)
                .set_column_statistics_enabled("offset".into(), EnabledStatistics::Page)
                .set_column_statistics_enabled("tsc".into(), EnabledStatistics::Page)
                .set_column_statistics_enabled("cycles".into(), EnabledStatistics::Page)
                .set_column_statistics_enabled("kind".into(), EnabledStatistics::None)
        }),
        ("uncompressed", |b| {
            b.set_compression(Compression::UNCOMPRESSED)
        }),
        ("zstd 1", |b| {
            b.set_compression(Compression::ZSTD(ZstdLevel::try_new(1).expect("level")))
        }),
        ("zstd 2", |b| {
            b.set_compression(Compression::ZSTD(ZstdLevel::try_new(2).expect("level")))
        }),
        ("snappy", |b| b.set_compression(Compression::SNAPPY)),
    ]
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .context("usage: encode-bench TABLE.parquet [rows] [runs]")?;
    let rows: usize = args.get(1).map_or(Ok(4_000_000), |s| s.parse())?;
    let runs: usize = args.get(2).map_or(Ok(3), |s| s.parse())?;

    let file = File::open(path).with_context(|| format!("{path}: cannot open"))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)?;
    let table = builder
        .schema()
        .metadata()
        .get(tracemill_schemas::meta::TABLE)
        .cloned()
        .context("not a tracemill table (no tracemill.table metadata)")?;
    let schema = builder.schema().clone();
    // A perf.data decode's row tables carry the thread columns (`cpu`, `pid`, `tid`,
    // `time`) after their own: encoded as its writer does.
    let options = WriterOptions {
        thread_columns: tracemill_schemas::arrow::with_thread_fields(&table)
            .is_some_and(|t| t.fields().len() == schema.fields().len()),
        ..WriterOptions::default()
    };
    let mut batches: Vec<RecordBatch> = Vec::new();
    let mut have = 0;
    for b in builder.with_batch_size(65536).build()? {
        let b = b?;
        have += b.num_rows();
        batches.push(b);
        if have >= rows {
            break;
        }
    }
    let batch = arrow_select::concat::concat_batches(&schema, &batches)?;
    let batch = batch.slice(0, rows.min(batch.num_rows()));
    drop(batches);
    let n = batch.num_rows();
    println!("{table}: {n} rows from {path}, median of {runs} runs, CPU of one thread");

    let base = tracemill_sinks::parquet::writer_properties(&table, vec![], &options)?;
    let mut targets: Vec<(String, Option<usize>)> = vec![("all columns".into(), None)];
    // What `tracemill ingest` adds: a constant `bundle` column (dictionary of one string).
    let with_bundle = {
        let keys = arrow_array::Int32Array::from(vec![0; n]);
        let values = Arc::new(arrow_array::StringArray::from(vec!["0123456789abcdef"; 1]));
        let col =
            arrow_array::DictionaryArray::<arrow_array::types::Int32Type>::try_new(keys, values)?;
        let mut fields: Vec<_> = batch.schema().fields().iter().cloned().collect();
        fields.push(Arc::new(arrow_schema::Field::new(
            "bundle",
            col.data_type().clone(),
            false,
        )));
        let mut cols = batch.columns().to_vec();
        cols.push(Arc::new(col));
        RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), cols)?
    };
    for (i, f) in schema.fields().iter().enumerate() {
        targets.push((f.name().clone(), Some(i)));
    }
    targets.push(("+ bundle (ingest)".into(), Some(0)));

    println!(
        "{:<32} {:<14} {:>9} {:>9}",
        "variant", "columns", "ns/row", "B/row"
    );
    for (target, col) in &targets {
        let b = match col {
            None => batch.clone(),
            Some(i) => batch.project(&[*i])?,
        };
        let b = if target == "+ bundle (ingest)" {
            with_bundle.clone()
        } else {
            b
        };
        let list: Vec<Variant> = if col.is_none() {
            variants()
        } else if target == "+ bundle (ingest)" {
            vec![
                variants()[0],
                ("bundle without statistics", |b| {
                    b.set_column_statistics_enabled("bundle".into(), EnabledStatistics::None)
                }),
            ]
        } else {
            variants()[..1].to_vec()
        };
        // All columns: also what `tracemill decode` runs, the writer's row-group encoder,
        // in the same runs.
        let with_encoder = col.is_none();
        let mut names: Vec<&str> = list.iter().map(|(name, _)| *name).collect();
        if with_encoder {
            names.insert(0, "row-group encoder (decode)");
        }
        let mut times = vec![Vec::new(); names.len()];
        let mut sizes = vec![0usize; names.len()];
        for _ in 0..runs {
            if with_encoder {
                let (t, size) = encode_row_groups(&b, &table, path, &options)?;
                times[0].push(t);
                sizes[0] = size;
            }
            let first = usize::from(with_encoder);
            for (k, (_, tweak)) in list.iter().enumerate() {
                let props = tweak(base.clone().into_builder()).build();
                let (t, size) = encode(&b, props)?;
                times[first + k].push(t);
                sizes[first + k] = size;
            }
        }
        for (k, name) in names.iter().enumerate() {
            times[k].sort_by(f64::total_cmp);
            let med = times[k][times[k].len() / 2];
            println!(
                "{:<32} {:<14} {:>9.1} {:>9.3}",
                name,
                target,
                med * 1e9 / n as f64,
                sizes[k] as f64 / n as f64
            );
        }
    }
    Ok(())
}

/// Encodes `b` as `tracemill decode` does: the writer's row-group encoder (its own
/// dictionary chunks for string and unsigned integer columns, arrow-rs for the rest), row
/// groups of the default size, on a pool of one thread, into a file in the temporary
/// directory (removed). (CPU seconds of the whole process while encoding, bytes written.)
fn encode_row_groups(
    b: &RecordBatch,
    table: &str,
    source: &str,
    options: &WriterOptions,
) -> Result<(f64, usize)> {
    let dir = std::env::temp_dir().join(format!("encode-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let meta = tracemill_sinks::FileMeta {
        source: source.to_string(),
        source_size: 0,
        rtit_ctl: 0,
        extra: vec![],
    };
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let group = tracemill_sinks::parquet::DEFAULT_MAX_ROW_GROUP_ROWS;
    let n = b.num_rows();
    let mut w = tracemill_sinks::TableWriter::create_in(&dir, table, &meta, options)?;
    let e = w.row_group_encoder()?;
    let t0 = process_cpu_time();
    let mut groups = Vec::new();
    pool.install(|| -> Result<()> {
        for (i, at) in (0..n).step_by(group).enumerate() {
            let part = b.slice(at, group.min(n - at));
            groups.push(e.encode(i, std::slice::from_ref(&part))?);
        }
        Ok(())
    })?;
    let secs = process_cpu_time() - t0;
    for g in groups {
        w.append_encoded(g)?;
    }
    let size = w.finish()?.bytes as usize;
    std::fs::remove_dir_all(&dir)?;
    Ok((secs, size))
}

/// Encodes `b` into memory: (CPU seconds of this thread, bytes written).
fn encode(b: &RecordBatch, props: WriterProperties) -> Result<(f64, usize)> {
    let mut out = Vec::with_capacity(64 << 20);
    let t0 = cpu_time();
    let start = Instant::now();
    let mut w = ArrowWriter::try_new(&mut out, b.schema(), Some(props))?;
    w.write(b)?;
    w.close()?;
    let cpu = cpu_time() - t0;
    // Without a thread clock, fall back to wall time.
    let secs = if cpu > 0.0 {
        cpu
    } else {
        start.elapsed().as_secs_f64()
    };
    Ok((secs, out.len()))
}

/// CPU time of the calling thread, from /proc (no unsafe, no libc call).
fn cpu_time() -> f64 {
    ticks_of("/proc/thread-self/stat")
}

/// CPU time of the whole process (all its threads).
fn process_cpu_time() -> f64 {
    ticks_of("/proc/self/stat")
}

fn ticks_of(file: &str) -> f64 {
    let stat = std::fs::read_to_string(file).unwrap_or_default();
    // Fields after the command name (in parentheses): utime is the 12th, stime the 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}
