//! `run::Options::batches`: the tables handed to a consumer as Arrow batches equal the
//! files the same decode writes; the channel's bound holds the decode back; a consumer
//! that stops reading stops the decode.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tracemill::run::{self, Tables};
use tracemill_input::bundle::Bundle;

mod common;

fn read_parquet(path: &Path) -> Vec<RecordBatch> {
    let f = File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let builder = ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    // The file's schema, its metadata included: arrow-rs's reader gives batches the
    // columns' schema alone.
    let schema = builder.schema().clone();
    builder
        .build()
        .unwrap()
        .map(|b| b.unwrap().with_schema(schema.clone()).unwrap())
        .collect()
}

/// The rows of batches as one batch, with `kind`-like dictionary columns as strings (a
/// Parquet reader rebuilds dictionaries from the values used).
fn plain(batches: &[RecordBatch]) -> RecordBatch {
    let schema = batches[0].schema();
    let all = arrow_select::concat::concat_batches(&schema, batches).unwrap();
    let cols = all
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            arrow_schema::DataType::Dictionary(_, _) => {
                std::sync::Arc::new(tracemill_sinks::convert::strings(c.as_ref()).unwrap())
                    as arrow_array::ArrayRef
            }
            _ => c.clone(),
        })
        .collect::<Vec<_>>();
    RecordBatch::try_from_iter(schema.fields().iter().map(|f| f.name().clone()).zip(cols)).unwrap()
}

/// Decode `b` into batches through a channel of `capacity`, reading them on another
/// thread; the report and every table's batches (with the files' schema).
fn decode_to_batches(
    b: &Bundle,
    jobs: usize,
    chunk_bytes: Option<u64>,
    capacity: usize,
) -> (run::Report, Vec<(&'static str, RecordBatch)>) {
    let (sink, rx) = tracemill::stream::channel(Tables::ALL, capacity);
    let opts = run::Options {
        jobs,
        chunk_bytes,
        batches: Some(sink),
        ..run::Options::default()
    };
    let meta = run::file_meta(b);
    std::thread::scope(|s| {
        let consumer = s.spawn(move || {
            rx.iter()
                .map(|o| {
                    let t = o.table;
                    let batch = o
                        .batch()
                        .unwrap()
                        .with_schema(meta.schema(t).unwrap())
                        .unwrap();
                    (t, batch)
                })
                .collect::<Vec<_>>()
        });
        let r = run::decode(b, &opts).unwrap();
        drop(opts);
        (r, consumer.join().unwrap())
    })
}

#[test]
fn batches_equal_the_files_for_every_sample_and_job_count() {
    for bundle in common::bundles() {
        let b = Bundle::open(&bundle, None, &[]).unwrap();
        let out = tempfile::tempdir().unwrap();
        run::decode(
            &b,
            &run::Options {
                jobs: 2,
                out: Some(out.path().to_path_buf()),
                ..run::Options::default()
            },
        )
        .unwrap();
        for (jobs, chunk) in [(1, None), (3, Some(0))] {
            let (report, outputs) = decode_to_batches(&b, jobs, chunk, 2);
            assert!(report
                .warnings
                .iter()
                .all(|w| !w.contains("stopped reading")));
            for table in tracemill_schemas::TABLES {
                let name = bundle.display();
                let want = read_parquet(&out.path().join(format!("{table}.parquet")));
                let got: Vec<RecordBatch> = outputs
                    .iter()
                    .filter(|(t, _)| *t == table)
                    .map(|(_, b)| b.clone())
                    .collect();
                let rows = |v: &[RecordBatch]| v.iter().map(|b| b.num_rows()).sum::<usize>();
                assert_eq!(rows(&got), rows(&want), "{name} {table} -j{jobs}");
                if rows(&want) == 0 {
                    continue;
                }
                // The same schema, metadata included, as the file's embedded one.
                assert_eq!(got[0].schema(), want[0].schema(), "{name} {table}");
                assert_eq!(plain(&got), plain(&want), "{name} {table} -j{jobs}");
            }
        }
    }
}

#[test]
fn a_consumer_that_stops_reading_stops_the_decode() {
    let b = Bundle::open(&common::samples_dir().join("busybox-sort"), None, &[]).unwrap();
    let (sink, rx) = tracemill::stream::channel(Tables::ALL, 1);
    let opts = run::Options {
        jobs: 2,
        chunk_bytes: Some(0),
        batches: Some(sink),
        ..run::Options::default()
    };
    let t0 = Instant::now();
    let r = std::thread::scope(|s| {
        let consumer = s.spawn(move || {
            let first = rx.recv().unwrap();
            // Nothing more is read: the channel (one piece) is full when it goes.
            std::thread::sleep(Duration::from_millis(200));
            drop(rx);
            first.rows()
        });
        let r = run::decode(&b, &opts);
        assert!(consumer.join().unwrap() > 0);
        r
    });
    // Ended by the failed send: as a warning of the emitter, or (when the aggregates
    // were being sent) an error saying why.
    match r {
        Ok(report) => assert!(
            report
                .warnings
                .iter()
                .any(|w| w.contains("stopped reading")),
            "{:?}",
            report.warnings
        ),
        Err(e) => assert!(format!("{e:#}").contains("stopped reading"), "{e:#}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(20));
}
