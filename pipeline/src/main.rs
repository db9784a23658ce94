//! The `tracemill` command.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use tracemill::bundle::{parse_image_arg, Bundle};
use tracemill::errors::error_text;
use tracemill::run::{self, Tables};
use tracemill_datasets::bundle::parse_u64;
use tracemill_decode::config::TraceConfig;
use tracemill_sinks::Format;

/// jemalloc rather than glibc's malloc. Rows are allocated on the decode threads and
/// freed on the writer's, piece after piece, for hours: glibc kept the freed memory of
/// every arena and the heap grew with the trace (the 1 GiB synthetic trace, `-j2 --out`,
/// peaked at 912 MiB and was still growing at its end; the 200 MB one at 580 MiB), where
/// jemalloc returns it (peaks of 467 MiB for 1 GiB and 365 MiB for 200 MB; same CPU time).
/// See benches/README.md, "Memory on the 1 GiB trace".
#[cfg(all(target_os = "linux", not(target_env = "msvc")))]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Decode Intel RTIT traces (Silvermont/Airmont Real Time Instruction Trace) into
/// Parquet tables of every executed branch, its timing, and code coverage.
#[derive(Parser)]
#[command(name = "tracemill", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the packets of a trace (like ptdump): offset, bytes, packet, fields.
    Dump(DumpArgs),
    /// Decode a bundle into tables: branches, events, timing, coverage, edges.
    Decode(DecodeArgs),
    /// Ingest many bundles into one partitioned dataset (a directory or S3), resumably.
    Ingest(tracemill::ingest::IngestArgs),
    /// Make trace bundles with ground truth from tracemill's model of the RTIT hardware.
    Synth(SynthArgs),
    /// Reports over decoded tables: hotspots, flame graph, coverage, timeline, HTML.
    Report(tracemill::report::ReportArgs),
}

/// The trace and the facts about it.
#[derive(Args)]
struct Source {
    /// A bundle directory (with bundle.toml), or a bare trace file (then give --ctl).
    bundle: PathBuf,
    /// RTIT_CTL value the trace was recorded with (hex like 0x2e0d, or decimal);
    /// overrides the bundle's.
    #[arg(long, value_parser = parse_num)]
    ctl: Option<u64>,
    /// A code image: PATH (an ELF at its own addresses), PATH@ADDR, or PATH@ADDR@CR3.
    /// Files ending in .bin or .raw are raw bytes loaded at ADDR. Repeatable.
    #[arg(long = "image", value_name = "PATH@ADDR")]
    images: Vec<String>,
}

#[derive(Args)]
struct DumpArgs {
    #[command(flatten)]
    src: Source,
    /// Print counts per packet type instead of the listing.
    #[arg(long)]
    stats: bool,
}

#[derive(Args)]
struct DecodeArgs {
    #[command(flatten)]
    src: Source,
    /// Directory for the tables (created if missing). Without it, decode and summarize only.
    #[arg(long, short)]
    out: Option<PathBuf>,
    /// Worker threads (default: all cores).
    #[arg(long, short)]
    jobs: Option<usize>,
    /// Tables to write, comma-separated: branches, events, timing, coverage, edges
    /// (default: all).
    #[arg(long, default_value = "all")]
    tables: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutFormat::Parquet)]
    format: OutFormat,
    /// Chunk size for parallel decoding, in bytes (cut at PSBs; default: from trace size).
    #[arg(long, value_parser = parse_num)]
    chunk_size: Option<u64>,
    /// ZSTD level of the Parquet tables (1 fastest .. 22 smallest; 0 means zstd's default, 3).
    #[arg(long, default_value_t = tracemill_sinks::parquet::DEFAULT_ZSTD_LEVEL)]
    zstd_level: i32,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum OutFormat {
    Parquet,
    Arrow,
}

#[derive(Args)]
struct SynthArgs {
    #[command(subcommand)]
    what: SynthCmd,
}

#[derive(Subcommand)]
enum SynthCmd {
    /// Generate sample bundles by recipe name (see `synth list`), or `all`.
    Sample {
        /// Recipe names, or `all`.
        #[arg(required = true)]
        names: Vec<String>,
        /// Parent directory; each sample goes to OUT/<name>/.
        #[arg(long, short, default_value = "datasets/samples")]
        out: PathBuf,
    },
    /// List the sample recipes.
    List,
    /// A large synthetic trace for benchmarks: a seeded walk over a program's code
    /// through the hardware model, until the trace has SIZE bytes.
    Synthetic {
        /// Trace size in bytes (suffixes K, M, G: 1G = 2^30).
        #[arg(long, value_parser = parse_size, default_value = "1G")]
        size: u64,
        /// The program whose code is walked (a static x86-64 ELF).
        #[arg(long, default_value = "datasets/samples/busybox-sort/images/busybox")]
        elf: PathBuf,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// RTIT_CTL (default 0xef0b: user-only, return compression, cycle-accurate, MTC with
        /// range 3, STS).
        #[arg(long, value_parser = parse_num, default_value = "0xef0b")]
        ctl: u64,
        /// Bundle directory to write.
        #[arg(long, short)]
        out: PathBuf,
    },
}

fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    parse_u64(num)
        .map(|n| n * mult)
        .ok_or_else(|| format!("not a size: {s:?} (like 512M or 1G)"))
}

fn parse_num(s: &str) -> Result<u64, String> {
    parse_u64(s).ok_or_else(|| format!("not a number: {s:?} (use 0x... or decimal)"))
}

fn open(src: &Source) -> Result<Bundle> {
    let extra = src
        .images
        .iter()
        .map(|s| parse_image_arg(s))
        .collect::<Result<Vec<_>>>()?;
    Bundle::open(&src.bundle, src.ctl, &extra)
}

fn main() -> ExitCode {
    ignore_file_size_signal();
    let cli = Cli::parse();
    match real_main(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tracemill: error: {}", error_text(&e));
            ExitCode::from(1)
        }
    }
}

/// Under a file size limit (`ulimit -f`, a quota-like guard on batch nodes) a write past it
/// raises SIGXFSZ, whose default action kills the process with a core dump and no word
/// on stderr, leaving a temporary file behind. Ignored, the write fails with EFBIG instead,
/// and the decode ends with an error naming the file, removing its temporaries.
#[allow(unsafe_code)]
fn ignore_file_size_signal() {
    // SAFETY: sets the disposition of one signal to SIG_IGN, before any other thread
    // exists; no handler code is installed.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

fn real_main(cli: Cli) -> Result<ExitCode> {
    match cli.cmd {
        Cmd::Dump(a) => {
            let b = open(&a.src)?;
            let cfg = TraceConfig::from_ctl(b.manifest.rtit_ctl);
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            match tracemill::dump::dump(&b.stream(), &cfg, a.stats, &mut out) {
                Ok(()) => {}
                // `tracemill dump | head` closes the pipe early: not an error.
                Err(e) if is_broken_pipe(&e) => return Ok(ExitCode::SUCCESS),
                Err(e) => return Err(e),
            }
            if let Err(e) = out.flush() {
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    return Err(e.into());
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Decode(a) => {
            let b = open(&a.src)?;
            let mut opts = run::Options {
                out: a.out.clone(),
                tables: Tables::parse(&a.tables)?,
                format: match a.format {
                    OutFormat::Parquet => Format::Parquet,
                    OutFormat::Arrow => Format::ArrowIpc,
                },
                chunk_bytes: a.chunk_size,
                progress: !a.quiet,
                writer: tracemill_sinks::WriterOptions {
                    zstd_level: a.zstd_level,
                    ..Default::default()
                },
                ..run::Options::default()
            };
            if let Some(j) = a.jobs {
                opts.jobs = j.max(1);
            }
            if let Some(out) = &opts.out {
                // A run killed while writing left its temporaries here.
                let stale = tracemill_sinks::remove_stale_temporaries(out)?;
                if !stale.is_empty() {
                    let n = stale.len();
                    eprintln!(
                        "tracemill: removed {n} temporary file{} that an interrupted run left in {}",
                        if n == 1 { "" } else { "s" },
                        out.display()
                    );
                }
            }
            let report = run::decode(&b, &opts)
                .with_context(|| format!("decoding {}", a.src.bundle.display()))?;
            eprint!(
                "{}",
                run::summary(&a.src.bundle.display().to_string(), &report)
            );
            // Without a code image not one branch can be decoded: when branches (or the
            // coverage made of them) were asked for, that is a failure, whatever events and
            // timing rows were written.
            let t = opts.tables;
            let wants_code = t.branches || t.coverage || t.edges;
            if wants_code && report.rows == 0 && b.image_set().0.segments().is_empty() {
                eprintln!("tracemill: error: no branch decoded: no code image could be loaded");
                return Ok(ExitCode::from(1));
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Ingest(a) => tracemill::ingest::main(a),
        Cmd::Report(a) => tracemill::report::run(a),
        Cmd::Synth(s) => match s.what {
            SynthCmd::List => {
                print!("{}", tracemill::synth::list());
                Ok(ExitCode::SUCCESS)
            }
            SynthCmd::Sample { names, out } => {
                tracemill::synth::samples(&names, &out)?;
                Ok(ExitCode::SUCCESS)
            }
            SynthCmd::Synthetic {
                size,
                elf,
                seed,
                ctl,
                out,
            } => {
                let t = std::time::Instant::now();
                let sum = tracemill_datasets::samples::synth_big(&elf, size, seed, ctl, &out)?;
                let secs = t.elapsed().as_secs_f64();
                eprintln!(
                    "wrote {}: {} bytes of trace, {} branches, {} instructions in {:.1} s ({:.0} MB/s of trace)",
                    out.display(),
                    sum.bytes,
                    sum.branches,
                    sum.instructions,
                    secs,
                    sum.bytes as f64 / 1e6 / secs
                );
                Ok(ExitCode::SUCCESS)
            }
        },
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
