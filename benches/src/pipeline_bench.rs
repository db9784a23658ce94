//! Whole-pipeline benchmark: decode bundles with 1..N threads, three ways, beside libipt,
//! and report medians of MB/s of trace, branches/s and instructions/s.
//!
//! ```sh
//! cargo run --release -p tracemill -- synth synthetic --size 1G --out /tmp/tm-1g
//! cargo run --release -p tracemill-benches --bin pipeline-bench -- /tmp/tm-1g [--runs N] [--jobs MAX]
//! # Intel PT beside libipt, and the same execution as RTIT:
//! cargo run --release -p tracemill-benches --bin pt-bundle -- /tmp/ptb 50
//! benches/scripts/ipt-walk.sh /tmp/ipt-walk
//! cargo run --release -p tracemill-benches --bin pipeline-bench -- /tmp/ptb/pt /tmp/ptb/rtit --libipt /tmp/ipt-walk
//! ```
//!
//! Modes (`--modes`, default all):
//! - `count`: chunk bodies decoded in parallel into a counting sink (the walk alone, no
//!   rows stored, no stitching);
//! - `rows`: the full parallel decode with stitching, rows built in columns, not written
//!   (`tracemill decode` without `--out`);
//! - `write`: the `tracemill decode` pipeline writing all five tables as Parquet;
//! - `libipt` (with `--libipt IPT_WALK`, on Intel PT bundles that have `ipt-images.txt`):
//!   libipt's block decoder over the same trace, one thread (benches/libipt/ipt-walk.c);
//!   its time is the walk's wall time, image loading excluded.
//!
//! Runs are interleaved (run 1 of every bundle, mode and thread count, then run 2, ...), so
//! that the machine's moods spread over all of them; the column `vs libipt` divides each
//! line's instructions/s by libipt's. The machines are shared and noisy: compare ratios
//! within one run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use rayon::prelude::*;
use tracemill::bundle::Bundle;
use tracemill::run::{self, Tables};
use tracemill_datasets::bundle::TraceFormat;
use tracemill_decode::block::BlockCache;
use tracemill_decode::chunk::{decode_body, plan_chunks, Body, Input};
use tracemill_decode::flow::CountSink;
use tracemill_decode::{Format, Rtit};

// The allocator of the `tracemill` binary, so that `write` measures what it runs.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[derive(Clone, Copy, Default)]
struct Counts {
    rows: u64,
    insns: u64,
}

fn count_mode(b: &Bundle, jobs: usize) -> Result<(f64, Counts)> {
    let stream = b.stream();
    let (images, _) = b.image_set();
    match b.manifest.format {
        TraceFormat::Rtit => count_walk(
            &Input::<Rtit> {
                spaces: None,
                stream: &stream,
                images: &images,
                cfg: b.trace_config(),
                timing: b.timing_config(),
            },
            jobs,
        ),
        TraceFormat::Pt => count_walk(&Input::pt(&stream, &images, b.pt_config()?), jobs),
    }
}

fn count_walk<F: Format>(input: &Input<'_, F>, jobs: usize) -> Result<(f64, Counts)>
where
    F::Config: Sync,
    <F::Clock as tracemill_decode::timing::Clock>::Config: Sync,
{
    let chunks = plan_chunks::<F>(
        input.stream,
        run::default_chunk_bytes(input.stream.len(), jobs),
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
                let b: Body<F, CountSink> = decode_body(input, &mut cache, *c);
                (b.out.rows.rows as u64, b.out.rows.insns)
            })
            .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    let secs = t.elapsed().as_secs_f64();
    if std::env::var_os("TRACEMILL_MEMO_STATS").is_some() {
        for c in &caches {
            let c = c.lock().unwrap();
            eprintln!(
                "# block cache: {} blocks; memo: {} segments, {} KiB",
                c.len(),
                c.memo.len(),
                c.memo.bytes() >> 10
            );
        }
    }
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

/// libipt's block decoder (`ipt-walk`) over the bundle's trace, one run: the walk's wall
/// time and its instructions (libipt counts no branches: `rows` is left 0).
fn libipt_mode(ipt_walk: &Path, b: &Bundle, dir: &Path) -> Result<(f64, Counts)> {
    let out = Command::new(ipt_walk)
        .arg(&b.trace_path)
        .arg(dir.join("ipt-images.txt"))
        .arg("1")
        .output()
        .with_context(|| format!("running {}", ipt_walk.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            ipt_walk.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let words: Vec<&str> = line.split_whitespace().collect();
    let field = |name: &str| -> Result<&str> {
        let i = words
            .iter()
            .position(|w| *w == name)
            .with_context(|| format!("no {name} in ipt-walk's output {line:?}"))?;
        words
            .get(i + 1)
            .copied()
            .context("truncated ipt-walk output")
    };
    if field("errors")? != "0" {
        eprintln!("libipt: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok((
        field("wall_s")?.parse()?,
        Counts {
            rows: 0,
            insns: field("insns")?.parse()?,
        },
    ))
}

/// One line of the table: a bundle, a mode, a thread count, and its runs.
struct Line {
    bundle: usize,
    mode: String,
    jobs: usize,
    times: Vec<f64>,
    counts: Counts,
}

fn main() -> Result<()> {
    tracemill::allocator::configure();
    const USAGE: &str = "usage: pipeline-bench BUNDLE... [--runs N] [--jobs MAX] \
                         [--modes count,rows,write] [--libipt IPT_WALK]";
    let mut dirs = Vec::new();
    let (mut runs, mut max_jobs, mut libipt) = (3usize, 2usize, None::<PathBuf>);
    let mut modes = std::env::var("MODES").unwrap_or_else(|_| "count,rows,write".into());
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().context(USAGE);
        match a.as_str() {
            "--runs" => runs = value()?.parse()?,
            "--jobs" => max_jobs = value()?.parse()?,
            "--modes" => modes = value()?,
            "--libipt" => libipt = Some(PathBuf::from(value()?)),
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            _ if a.starts_with('-') => bail!("unknown option {a}\n{USAGE}"),
            _ => dirs.push(PathBuf::from(a)),
        }
    }
    if dirs.is_empty() || runs == 0 || max_jobs == 0 {
        bail!(USAGE);
    }
    let bundles = dirs
        .iter()
        .map(|d| Bundle::open(d, None, &[]).with_context(|| format!("{}", d.display())))
        .collect::<Result<Vec<_>>>()?;

    let mut lines = Vec::new();
    for (i, b) in bundles.iter().enumerate() {
        if libipt.is_some()
            && b.manifest.format == TraceFormat::Pt
            && dirs[i].join("ipt-images.txt").exists()
        {
            lines.push(Line {
                bundle: i,
                mode: "libipt".into(),
                jobs: 1,
                times: vec![],
                counts: Counts::default(),
            });
        }
        for mode in modes.split(',') {
            for jobs in 1..=max_jobs {
                lines.push(Line {
                    bundle: i,
                    mode: mode.to_string(),
                    jobs,
                    times: vec![],
                    counts: Counts::default(),
                });
            }
        }
    }
    for run in 0..runs {
        eprintln!("run {} of {runs}", run + 1);
        for l in &mut lines {
            let b = &bundles[l.bundle];
            let (s, c) = match l.mode.as_str() {
                "libipt" => libipt_mode(libipt.as_deref().expect("--libipt"), b, &dirs[l.bundle])?,
                "count" => count_mode(b, l.jobs)?,
                "rows" => pipeline_mode(b, l.jobs, false)?,
                "write" => pipeline_mode(b, l.jobs, true)?,
                m => bail!("unknown mode {m}\n{USAGE}"),
            };
            l.times.push(s);
            l.counts = c;
        }
    }

    // libipt's instructions/s, to which every line is compared.
    let peer = lines
        .iter()
        .find(|l| l.mode == "libipt")
        .map(|l| l.counts.insns as f64 / median(l.times.clone()));
    println!("median of {runs} runs, interleaved");
    println!(
        "{:<8} {:<7} {:>4} {:>9} {:>9} {:>12} {:>12} {:>8} {:>9}",
        "bundle", "mode", "jobs", "secs", "MB/s", "branches/s", "insns/s", "speedup", "vs libipt"
    );
    for (i, b) in bundles.iter().enumerate() {
        let mb = b.trace.len() as f64 / 1e6;
        let name = match b.manifest.format {
            TraceFormat::Rtit => "rtit",
            TraceFormat::Pt => "pt",
        };
        println!("# {name}: {} ({mb:.1} MB of trace)", dirs[i].display());
        let mut base = std::collections::HashMap::new();
        for l in lines.iter().filter(|l| l.bundle == i) {
            let s = median(l.times.clone());
            let base_s = *base.entry(l.mode.clone()).or_insert(s);
            let insns = l.counts.insns as f64 / s;
            let branches = if l.mode == "libipt" {
                "-".to_string()
            } else {
                format!("{:.3e}", l.counts.rows as f64 / s)
            };
            let vs = peer.map_or("-".to_string(), |p| format!("{:.2}x", insns / p));
            println!(
                "{:<8} {:<7} {:>4} {:>9.3} {:>9.1} {:>12} {:>12.3e} {:>7.2}x {:>9}",
                name,
                l.mode,
                l.jobs,
                s,
                mb / s,
                branches,
                insns,
                base_s / s,
                vs
            );
        }
        for l in lines.iter().filter(|l| l.bundle == i && l.jobs == 1) {
            println!(
                "#   {} counted {} instructions, {} branches",
                l.mode, l.counts.insns, l.counts.rows
            );
        }
    }
    Ok(())
}
