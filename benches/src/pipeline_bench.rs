//! Whole-pipeline benchmark: decode a bundle with 1..N threads, three ways, and report
//! medians of MB/s of trace, branches/s and instructions/s.
//!
//! ```sh
//! cargo run --release -p tracemill -- synth synthetic --size 1G --out /tmp/tm-1g
//! cargo run --release -p tracemill-benches --bin pipeline-bench -- /tmp/tm-1g [runs] [max_jobs]
//! ```
//!
//! Modes:
//! - `count`: chunk bodies decoded in parallel into a counting sink (the walk alone, no
//!   rows stored, no stitching);
//! - `rows`: the full parallel decode with stitching, rows built in columns, not written;
//! - `write`: the `tracemill decode` pipeline writing all five tables as Parquet.
//!
//! The machines are shared and noisy: compare ratios within one run.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result};
use rayon::prelude::*;
use tracemill::bundle::Bundle;
use tracemill::run::{self, Tables};
use tracemill_decode::block::BlockCache;
use tracemill_decode::chunk::{decode_body, plan_chunks, Body, Input};
use tracemill_decode::flow::CountSink;

// The allocator of the `tracemill` binary, so that `write` measures what it runs.
#[cfg(all(target_os = "linux", not(target_env = "msvc")))]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

struct Counts {
    rows: u64,
    insns: u64,
}

fn count_mode(b: &Bundle, jobs: usize) -> Result<(f64, Counts)> {
    let stream = b.stream();
    let (images, _) = b.image_set();
    let input = Input::<tracemill_decode::Rtit> {
        stream: &stream,
        images: &images,
        cfg: b.trace_config(),
        timing: b.timing_config(),
    };
    let chunks = plan_chunks::<tracemill_decode::Rtit>(
        &stream,
        run::default_chunk_bytes(stream.len(), jobs),
    );
    let pool = rayon::ThreadPoolBuilder::new().num_threads(jobs).build()?;
    let caches: Vec<Mutex<BlockCache>> = (0..jobs).map(|_| Mutex::default()).collect();
    let t = Instant::now();
    // Each body is reduced to its counts at once (a body keeps its chunk's timing
    // packets: holding them all would take memory in proportion to the trace).
    let (rows, insns) = pool.install(|| {
        chunks
            .par_iter()
            .map(|c| {
                let i = rayon::current_thread_index().unwrap_or(0);
                let mut cache = caches[i].lock().unwrap();
                let b: Body<tracemill_decode::Rtit, CountSink> =
                    decode_body(&input, &mut cache, *c);
                (b.out.rows.rows as u64, b.out.rows.insns)
            })
            .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    let secs = t.elapsed().as_secs_f64();
    Ok((secs, Counts { rows, insns }))
}

fn pipeline_mode(b: &Bundle, jobs: usize, write: bool) -> Result<(f64, Counts)> {
    let dir = std::env::temp_dir().join(format!("tm-bench-{}", std::process::id()));
    let opts = run::Options {
        jobs,
        out: write.then(|| dir.clone()),
        tables: Tables::ALL,
        ..run::Options::default()
    };
    let t = Instant::now();
    let r = run::decode(b, &opts)?;
    let secs = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);
    Ok((
        secs,
        Counts {
            rows: r.rows,
            insns: r.instructions,
        },
    ))
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .context("usage: pipeline-bench BUNDLE [runs] [max_jobs]")?,
    );
    let runs: usize = args.next().map_or(Ok(3), |s| s.parse())?;
    let max_jobs: usize = args.next().map_or(Ok(2), |s| s.parse())?;
    let b = Bundle::open(&dir, None, &[])?;
    let mb = b.trace.len() as f64 / 1e6;
    println!(
        "bundle {} ({:.1} MB of trace), median of {runs} runs",
        dir.display(),
        mb
    );
    println!(
        "{:<6} {:>4} {:>9} {:>10} {:>14} {:>14} {:>8}",
        "mode", "jobs", "secs", "MB/s", "branches/s", "insns/s", "speedup"
    );
    let modes = std::env::var("MODES").unwrap_or_else(|_| "count,rows,write".into());
    for mode in modes.split(',') {
        let mut base = None;
        for jobs in 1..=max_jobs {
            let mut times = Vec::new();
            let mut last = None;
            for _ in 0..runs {
                let (s, c) = match mode {
                    "count" => count_mode(&b, jobs)?,
                    "rows" => pipeline_mode(&b, jobs, false)?,
                    _ => pipeline_mode(&b, jobs, true)?,
                };
                times.push(s);
                last = Some(c);
            }
            let s = median(times);
            let c = last.expect("at least one run");
            let base_s = *base.get_or_insert(s);
            println!(
                "{:<6} {:>4} {:>9.3} {:>10.1} {:>14.3e} {:>14.3e} {:>7.2}x",
                mode,
                jobs,
                s,
                mb / s,
                c.rows as f64 / s,
                c.insns as f64 / s,
                base_s / s
            );
        }
    }
    Ok(())
}
