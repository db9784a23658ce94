//! Whole-pipeline benchmark: decode bundles with 1..N threads, three ways, beside libipt
//! and libxdc, and the `tracemill` CLI as users call it; medians of MB/s of trace,
//! branches/s and instructions/s, as a markdown table.
//!
//! ```sh
//! cargo run --release -p tracemill -- synth synthetic --size 1G --out /tmp/tm-1g
//! cargo run --release -p tracemill-benches --bin pipeline-bench -- /tmp/tm-1g [--runs N] [--jobs MAX]
//! # Intel PT beside libipt, and the same execution as RTIT:
//! cargo run --release -p tracemill-benches --bin pt-bundle -- /tmp/ptb 50
//! benches/scripts/ipt-walk.sh /tmp/ipt-walk
//! cargo run --release -p tracemill-benches --bin pipeline-bench -- /tmp/ptb/pt /tmp/ptb/rtit --libipt /tmp/ipt-walk
//! # What users run, beside both peers, on one PT file without RET compression (libxdc's
//! # form) and on a perf.data of the same execution (peers built by hand: benches/README.md):
//! cargo run --release -p tracemill-benches --bin pt-bundle -- /tmp/ptx 92 --no-ret-compression
//! cargo run --release -p tracemill-benches --bin pipeline-bench -- /tmp/ptx/pt \
//!     --perf-data /tmp/ptx/perf.data --tracemill target/dist/tracemill \
//!     --libipt /work/peers/bin/ipt-walk-current --libxdc /work/peers/bin/xdc-walk --modes count
//! ```
//!
//! Modes (`--modes`, default `count,rows,write`; `none` for none), in this process, on every
//! bundle:
//! - `count`: chunk bodies decoded in parallel into a counting sink (the walk alone, no
//!   rows stored, no stitching);
//! - `rows`: the full parallel decode with stitching, rows built in columns, not written
//!   (`tracemill decode` without `--out`);
//! - `write`: the `tracemill decode` pipeline writing all five tables as Parquet.
//!
//! Lines beside them:
//! - `libipt` (with `--libipt IPT_WALK`, on Intel PT bundles that have `ipt-images.txt`):
//!   libipt's block decoder over the same trace, one thread (benches/libipt/ipt-walk.c);
//!   its time is the walk's wall time, image loading excluded.
//! - `libxdc` (with `--libxdc XDC_WALK`, on the same bundles; they must be without RET
//!   compression, `pt-bundle --no-ret-compression`): libxdc's fast mode over the trace, one
//!   thread, a fresh decoder (benches/libxdc/xdc-walk.c): a coverage bitmap of hashed
//!   edges, not an exact decode; its time is `libxdc_decode`'s wall time. And its trace
//!   mode (`xdc-walk --trace`): every edge it decodes passed to a callback, counted.
//! - the CLI (with `--tracemill BIN`, on every bundle and every `--perf-data FILE`): the
//!   process as a user runs it, timed from spawn to exit, output written to a temporary
//!   directory removed after each run: `decode -j1 --tables events`, `decode -j1 --tables
//!   coverage,edges`, and all tables with `-j1` and `-j2` (`--cli-jobs` to change 1,2).
//!
//! Runs are interleaved (run 1 of every line, then run 2, ...), so that the machine's moods
//! spread over all of them. `vs libipt` is a line's instructions/s over libipt's, where a
//! line's instructions are those of its input (the most any line on that input decoded;
//! libxdc counts none, so its ratio is libipt's time over its own on the same file).
//! `vs -j1` compares a line with the same line on one job. MB/s is of the input file (the
//! trace, or the whole perf.data). The machines are shared and noisy: compare ratios
//! within one run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use rayon::prelude::*;
use tracemill::run::{self, Tables};
use tracemill_decode::block::BlockCache;
use tracemill_decode::chunk::{decode_body, plan_chunks, Body, Input};
use tracemill_decode::flow::CountSink;
use tracemill_decode::{Format, Rtit};
use tracemill_input::bundle::Bundle;
use tracemill_input::manifest::TraceFormat;

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

/// Runs a peer's driver (`ipt-walk`, `xdc-walk`) once on the bundle's trace and its
/// `ipt-images.txt`, and returns its output line's `name value` pairs.
fn peer_run(bin: &Path, b: &Bundle, dir: &Path, extra: &[&str]) -> Result<Vec<(String, String)>> {
    let out = Command::new(bin)
        .arg(&b.trace_path)
        .arg(dir.join("ipt-images.txt"))
        .arg("1")
        .args(extra)
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            bin.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let words: Vec<&str> = line.split_whitespace().collect();
    if words.len() < 2 {
        bail!("{}: no output line", bin.display());
    }
    let pairs: Vec<(String, String)> = words
        .chunks(2)
        .filter(|p| p.len() == 2)
        .map(|p| (p[0].to_string(), p[1].to_string()))
        .collect();
    let err = String::from_utf8_lossy(&out.stderr);
    if !err.trim().is_empty() {
        eprintln!("{}: {}", bin.display(), err.trim());
    }
    Ok(pairs)
}

fn field<'a>(pairs: &'a [(String, String)], name: &str) -> Result<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .with_context(|| format!("no {name} in the peer's output {pairs:?}"))
}

/// libipt's block decoder (`ipt-walk`) over the bundle's trace, one run: the walk's wall
/// time and its instructions (libipt counts no branches: `rows` is left 0).
fn libipt_mode(ipt_walk: &Path, b: &Bundle, dir: &Path) -> Result<(f64, Counts, String)> {
    let p = peer_run(ipt_walk, b, dir, &[])?;
    let note = match field(&p, "errors")? {
        "0" => String::new(),
        e => format!("{e} decode errors"),
    };
    Ok((
        field(&p, "wall_s")?.parse()?,
        Counts {
            rows: 0,
            insns: field(&p, "insns")?.parse()?,
        },
        note,
    ))
}

/// libxdc (`xdc-walk`) over the bundle's trace, one run: `libxdc_decode`'s wall time. In
/// fast mode it counts no instructions or branches (a coverage bitmap only); in trace mode
/// (`trace`) it counts the edges it passes to its callback. The note says what it found.
fn libxdc_mode(
    xdc_walk: &Path,
    b: &Bundle,
    dir: &Path,
    trace: bool,
) -> Result<(f64, Counts, String)> {
    let p = peer_run(xdc_walk, b, dir, if trace { &["--trace"] } else { &[] })?;
    let result = field(&p, "result")?;
    let found = if trace {
        format!("{} edges passed to the callback", field(&p, "edges")?)
    } else {
        format!("bitmap: {} of 65536 entries hit", field(&p, "bitmap_hit")?)
    };
    let note = format!(
        "{found}; {} blocks disassembled{}",
        field(&p, "blocks")?,
        match result {
            "0" => String::new(),
            r => format!("; libxdc_decode returned {r} (not success)"),
        }
    );
    Ok((field(&p, "wall_s")?.parse()?, Counts::default(), note))
}

/// The `tracemill` CLI as a user runs it, once: wall time from spawn to exit, and the
/// branches and instructions of its summary (stderr: `decoded N branches, M instructions`).
fn cli_mode(bin: &Path, input: &Path, args: &[String]) -> Result<(f64, Counts, String)> {
    let dir = std::env::temp_dir().join(format!("tm-bench-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let t = Instant::now();
    let out = Command::new(bin)
        .arg("decode")
        .arg(input)
        .args(args)
        .arg("-q")
        .arg("--out")
        .arg(&dir)
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    let secs = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!(
            "{} decode {} {}: {}",
            bin.display(),
            input.display(),
            args.join(" "),
            err
        );
    }
    // "  decoded       1,234 branches, 5,678 instructions in ..."
    let number = |word: &str| -> u64 {
        let w: Vec<&str> = err.split_whitespace().collect();
        w.windows(2)
            .find(|p| p[1].trim_end_matches(',') == word)
            .and_then(|p| {
                let d: String = p[0].chars().filter(char::is_ascii_digit).collect();
                d.parse().ok()
            })
            .unwrap_or(0)
    };
    Ok((
        secs,
        Counts {
            rows: number("branches"),
            insns: number("instructions"),
        },
        String::new(),
    ))
}

/// What a line runs.
#[derive(Clone)]
enum What {
    Libipt,
    Libxdc,
    /// libxdc's trace mode: every edge passed to a callback, no caches.
    LibxdcTrace,
    /// `tracemill decode INPUT ARGS -q --out DIR`.
    Cli(Vec<String>),
    /// In this process: `count`, `rows` or `write`.
    Mode(String),
}

/// One line of the table: an input, what runs on it, a thread count, and its runs.
struct Line {
    input: usize,
    what: What,
    jobs: usize,
    times: Vec<f64>,
    counts: Counts,
    note: String,
}

impl Line {
    fn label(&self) -> String {
        match &self.what {
            What::Libipt => "libipt block decoder (ipt-walk)".into(),
            What::Libxdc => "libxdc fast mode: coverage bitmap, hashed edges (xdc-walk)".into(),
            What::LibxdcTrace => {
                "libxdc trace mode: every edge to a callback (xdc-walk --trace)".into()
            }
            What::Cli(a) => format!("`tracemill decode {}`", a.join(" ")),
            What::Mode(m) => match m.as_str() {
                "count" => "tracemill walk alone (`count`, in process)".into(),
                "rows" => "tracemill rows, nothing written (`rows`, in process)".into(),
                "write" => "tracemill all tables (`write`, in process)".into(),
                m => m.into(),
            },
        }
    }

    /// The label without the thread count: lines of one group differ only in jobs.
    fn group(&self) -> String {
        match &self.what {
            What::Cli(a) => a
                .iter()
                .filter(|w| !w.starts_with("-j"))
                .cloned()
                .collect::<Vec<_>>()
                .join(" "),
            _ => self.label(),
        }
    }

    /// Where the line goes in the table: the user's commands first, then the peers, the
    /// walk alone last.
    fn rank(&self) -> usize {
        match &self.what {
            What::Cli(_) => 0,
            What::Libxdc | What::LibxdcTrace => 1,
            What::Libipt => 2,
            What::Mode(m) if m == "count" => 4,
            What::Mode(_) => 3,
        }
    }
}

/// An input: a bundle (opened here, for the in-process modes) or a perf.data file.
struct Source {
    path: PathBuf,
    bundle: Option<Bundle>,
    bytes: u64,
    name: String,
}

fn main() -> Result<()> {
    tracemill::allocator::configure();
    const USAGE: &str = "usage: pipeline-bench BUNDLE... [--perf-data FILE]... [--runs N] \
                         [--jobs MAX] [--modes count,rows,write|none] [--libipt IPT_WALK] \
                         [--libxdc XDC_WALK] [--tracemill BIN] [--cli-jobs 1,2]";
    let mut dirs = Vec::new();
    let mut perf = Vec::new();
    let (mut runs, mut max_jobs) = (3usize, 2usize);
    let (mut libipt, mut libxdc, mut cli) = (None::<PathBuf>, None::<PathBuf>, None::<PathBuf>);
    let mut cli_jobs = "1,2".to_string();
    let mut modes = std::env::var("MODES").unwrap_or_else(|_| "count,rows,write".into());
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().context(USAGE);
        match a.as_str() {
            "--runs" => runs = value()?.parse()?,
            "--jobs" => max_jobs = value()?.parse()?,
            "--modes" => modes = value()?,
            "--libipt" => libipt = Some(PathBuf::from(value()?)),
            "--libxdc" => libxdc = Some(PathBuf::from(value()?)),
            "--tracemill" => cli = Some(PathBuf::from(value()?)),
            "--perf-data" => perf.push(PathBuf::from(value()?)),
            "--cli-jobs" => cli_jobs = value()?,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            _ if a.starts_with('-') => bail!("unknown option {a}\n{USAGE}"),
            _ => dirs.push(PathBuf::from(a)),
        }
    }
    if (dirs.is_empty() && perf.is_empty()) || runs == 0 || max_jobs == 0 {
        bail!(USAGE);
    }
    if !perf.is_empty() && cli.is_none() {
        bail!("--perf-data is decoded by the CLI only: give --tracemill BIN\n{USAGE}");
    }
    let modes: Vec<String> = modes
        .split(',')
        .filter(|m| !m.is_empty() && *m != "none")
        .map(String::from)
        .collect();
    for m in &modes {
        if !["count", "rows", "write"].contains(&m.as_str()) {
            bail!("unknown mode {m}\n{USAGE}");
        }
    }
    let cli_jobs: Vec<usize> = cli_jobs
        .split(',')
        .map(|j| j.parse().context("--cli-jobs: thread counts, e.g. 1,2"))
        .collect::<Result<_>>()?;

    let mut inputs = Vec::new();
    for d in &dirs {
        let b = Bundle::open(d, None, &[]).with_context(|| format!("{}", d.display()))?;
        let name = match b.manifest.format {
            TraceFormat::Rtit => "rtit",
            TraceFormat::Pt => "pt",
        };
        inputs.push(Source {
            path: d.clone(),
            bytes: b.trace.len() as u64,
            name: format!("{name} ({})", d.display()),
            bundle: Some(b),
        });
    }
    for p in &perf {
        let bytes = std::fs::metadata(p)
            .with_context(|| format!("{}", p.display()))?
            .len();
        inputs.push(Source {
            path: p.clone(),
            bundle: None,
            bytes,
            name: format!("perf.data ({})", p.display()),
        });
    }

    let mut lines = Vec::new();
    let line = |input, what, jobs| Line {
        input,
        what,
        jobs,
        times: vec![],
        counts: Counts::default(),
        note: String::new(),
    };
    for (i, inp) in inputs.iter().enumerate() {
        if let Some(b) = &inp.bundle {
            let peers_fit =
                b.manifest.format == TraceFormat::Pt && inp.path.join("ipt-images.txt").exists();
            if libipt.is_some() && peers_fit {
                lines.push(line(i, What::Libipt, 1));
            }
            if libxdc.is_some() && peers_fit {
                if b.pt_config()?.ret_compression {
                    bail!(
                        "{}: libxdc decodes traces without RET compression only: make the \
                         bundle with `pt-bundle OUT SIZE_MB --no-ret-compression`",
                        inp.path.display()
                    );
                }
                lines.push(line(i, What::Libxdc, 1));
                lines.push(line(i, What::LibxdcTrace, 1));
            }
        }
        if cli.is_some() {
            let s = |v: &[&str]| v.iter().map(|w| w.to_string()).collect::<Vec<_>>();
            lines.push(line(i, What::Cli(s(&["-j1", "--tables", "events"])), 1));
            lines.push(line(
                i,
                What::Cli(s(&["-j1", "--tables", "coverage,edges"])),
                1,
            ));
            for &j in &cli_jobs {
                lines.push(line(i, What::Cli(vec![format!("-j{j}")]), j));
            }
        }
        if inp.bundle.is_some() {
            for mode in &modes {
                for jobs in 1..=max_jobs {
                    lines.push(line(i, What::Mode(mode.clone()), jobs));
                }
            }
        }
    }
    for run in 0..runs {
        eprintln!("run {} of {runs}", run + 1);
        for l in &mut lines {
            let inp = &inputs[l.input];
            let (s, c, note) = match (&l.what, &inp.bundle) {
                (What::Libipt, Some(b)) => {
                    libipt_mode(libipt.as_deref().expect("--libipt"), b, &inp.path)?
                }
                (What::Libxdc, Some(b)) => {
                    libxdc_mode(libxdc.as_deref().expect("--libxdc"), b, &inp.path, false)?
                }
                (What::LibxdcTrace, Some(b)) => {
                    libxdc_mode(libxdc.as_deref().expect("--libxdc"), b, &inp.path, true)?
                }
                (What::Cli(a), _) => cli_mode(cli.as_deref().expect("--tracemill"), &inp.path, a)?,
                (What::Mode(m), Some(b)) => {
                    let (s, c) = match m.as_str() {
                        "count" => count_mode(b, l.jobs)?,
                        "rows" => pipeline_mode(b, l.jobs, false)?,
                        _ => pipeline_mode(b, l.jobs, true)?,
                    };
                    (s, c, String::new())
                }
                _ => unreachable!("peers and modes run on bundles only"),
            };
            eprintln!("  {:>8.3} s  {} on {}", s, l.label(), inp.name);
            l.times.push(s);
            l.counts = c;
            l.note = note;
        }
    }
    print_table(&inputs, &mut lines, runs);
    Ok(())
}

/// The markdown table: one row per line, the user's commands first, the walk alone last.
fn print_table(inputs: &[Source], lines: &mut [Line], runs: usize) {
    // An input's instructions and branches: the most any of its lines decoded.
    let reference = |i: usize| -> Counts {
        let on = lines.iter().filter(|l| l.input == i);
        Counts {
            rows: on.clone().map(|l| l.counts.rows).max().unwrap_or(0),
            insns: on.map(|l| l.counts.insns).max().unwrap_or(0),
        }
    };
    let refs: Vec<Counts> = (0..inputs.len()).map(reference).collect();
    let insns_per_s = |l: &Line| refs[l.input].insns as f64 / median(l.times.clone());
    // libipt's instructions/s, to which every line is compared.
    let peer = lines
        .iter()
        .find(|l| matches!(l.what, What::Libipt))
        .map(insns_per_s);
    lines.sort_by_key(|l| (l.rank(), l.input));

    println!();
    println!(
        "Medians of {runs} runs, interleaved; `vs libipt`: instructions/s over libipt's walk's."
    );
    println!();
    println!("| input | what | jobs | median | runs | MB/s | branches/s | instructions/s | vs libipt | vs -j1 |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for l in lines.iter() {
        let inp = &inputs[l.input];
        let s = median(l.times.clone());
        let r = refs[l.input];
        let branches = if r.rows == 0 {
            "-".to_string()
        } else {
            format!("{:.1} M", r.rows as f64 / s / 1e6)
        };
        let insns = insns_per_s(l);
        let vs = peer.map_or("-".to_string(), |p| format!("{:.2}x", insns / p));
        let one = lines
            .iter()
            .find(|o| o.input == l.input && o.jobs == 1 && o.group() == l.group());
        let vs_one = match one {
            Some(o) if l.jobs > 1 => format!("{:.2}x", median(o.times.clone()) / s),
            _ => String::new(),
        };
        let all: Vec<String> = l.times.iter().map(|t| format!("{t:.2}")).collect();
        println!(
            "| {} | {} | {} | {:.2} s | {} | {:.1} | {} | {:.0} M | {} | {} |",
            inp.name,
            l.label(),
            l.jobs,
            s,
            all.join(", "),
            inp.bytes as f64 / 1e6 / s,
            branches,
            insns / 1e6,
            vs,
            vs_one
        );
    }
    println!();
    for (i, inp) in inputs.iter().enumerate() {
        println!(
            "- {}: {:.1} MB; {} instructions, {} branches (the most any line decoded)",
            inp.name,
            inp.bytes as f64 / 1e6,
            refs[i].insns,
            refs[i].rows
        );
        for l in lines.iter().filter(|l| l.input == i) {
            let differs = (l.counts.insns != 0 && l.counts.insns != refs[i].insns)
                || (l.counts.rows != 0 && l.counts.rows != refs[i].rows);
            if differs || !l.note.is_empty() {
                println!(
                    "  - {} (-j{}): {} instructions, {} branches{}{}",
                    l.label(),
                    l.jobs,
                    l.counts.insns,
                    l.counts.rows,
                    if l.note.is_empty() { "" } else { "; " },
                    l.note
                );
            }
        }
    }
}
