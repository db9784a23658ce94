//! The `tracemill` command.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use tracemill::cli::{PtFactsFlags, TraceFormatArg};
use tracemill::errors::error_text;
use tracemill::run::{self, Tables};
use tracemill_decode::pt::listing::ListingOptions;
use tracemill_decode::rtit::config::TraceConfig;
use tracemill_input::bundle::parse_image_arg;
use tracemill_input::manifest::{parse_u64, TraceFormat};
use tracemill_input::perf::Lookup;
use tracemill_input::source::{Given, Opened, Overrides};
use tracemill_input::Source;
use tracemill_sinks::Format;

/// mimalloc rather than glibc's malloc, which kept the memory of rows freed on the writer
/// thread and grew with the trace (`tracemill::allocator` says why, and sets its options).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Decode Intel RTIT (Silvermont/Airmont Real Time Instruction Trace) and Intel PT traces
/// into Parquet tables of every executed branch, its timing, and code coverage. The
/// `about` line is the package's description (pipeline/Cargo.toml).
#[derive(Parser)]
#[command(name = "tracemill", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the packets of a trace (like ptdump): offset, bytes, packet, fields. RTIT or
    /// Intel PT; for Intel PT also libipt ptdump's own listing (--ptdump).
    Dump(DumpArgs),
    /// Decode a bundle (or an Intel PT perf.data) into tables: branches, events, timing,
    /// coverage, edges.
    Decode(DecodeArgs),
    /// Ingest many bundles into one partitioned dataset (a directory or S3), resumably.
    Ingest(tracemill::ingest::IngestArgs),
    /// Make trace bundles with ground truth from tracemill's model of the RTIT hardware.
    Synth(SynthArgs),
    /// Reports over decoded tables: hotspots, flame graph, coverage, diff, timeline, HTML.
    Report(tracemill::report::ReportArgs),
}

/// The trace and the facts about it (the command line's side of
/// `tracemill_input::source::Overrides`).
#[derive(Args)]
struct SourceArgs {
    /// A bundle directory (with bundle.toml), a bare trace file (an RTIT one needs
    /// --ctl), or a perf.data recorded with `perf record -e intel_pt//`; `-` reads a
    /// perf.data or a trace file from standard input (`perf record -o - ... | tracemill
    /// decode -`).
    bundle: PathBuf,
    /// RTIT_CTL value the trace was recorded with (hex like 0x2e0d, or decimal);
    /// overrides the bundle's.
    #[arg(long, value_name = "HEX", value_parser = parse_num)]
    ctl: Option<u64>,
    /// A code image: PATH (an ELF at its own addresses), PATH@ADDR, or PATH@ADDR@CR3.
    /// Files ending in .bin or .raw are raw bytes loaded at ADDR. A relative PATH is
    /// relative to the current directory. Repeatable.
    #[arg(long = "image", value_name = "PATH@ADDR")]
    images: Vec<String>,
    /// The trace format [default: the bundle's `format`; a perf.data is Intel PT; for a
    /// bare file, pt for a .pt name, rtit for .rtit, else the format of its first PSB].
    /// A trace whose first PSB is the other format's is refused. For Intel PT, --ctl
    /// (IA32_RTIT_CTL, perf's intel_pt config) is optional, as for ptxed.
    #[arg(long, value_enum, value_name = "FORMAT")]
    trace_format: Option<TraceFormatArg>,
}

#[derive(Args)]
struct DumpArgs {
    #[command(flatten)]
    src: SourceArgs,
    /// Print counts per packet type instead of the listing.
    #[arg(long)]
    stats: bool,
    /// The old spelling of --trace-format (dump has no output format).
    #[arg(long, value_enum, hide = true, conflicts_with = "trace_format")]
    format: Option<TraceFormatArg>,
    /// Intel PT: print libipt ptdump's listing, with ptdump's options below.
    #[arg(long, conflicts_with = "stats")]
    ptdump: bool,
    #[command(flatten)]
    pt: PtdumpFlags,
}

/// libipt ptdump's options, for `tracemill dump --ptdump`. The processor and timing
/// facts also set up the Intel PT listing without --ptdump (over the bundle's [pt]).
#[derive(Args)]
#[command(next_help_heading = "Intel PT: ptdump's options")]
struct PtdumpFlags {
    /// Start at offset 0, not at the first PSB.
    #[arg(long, requires = "ptdump")]
    no_sync: bool,
    /// Print only the problem lines.
    #[arg(long, requires = "ptdump")]
    quiet: bool,
    /// Leave out PAD packets.
    #[arg(long, requires = "ptdump")]
    no_pad: bool,
    /// Leave out timing packets.
    #[arg(long, requires = "ptdump")]
    no_timing: bool,
    /// Leave out CYC packets, and do not time with them.
    #[arg(long, requires = "ptdump")]
    no_cyc: bool,
    /// No offset column.
    #[arg(long, requires = "ptdump")]
    no_offset: bool,
    /// Show each packet's bytes.
    #[arg(long, requires = "ptdump")]
    raw: bool,
    /// Show the IP each TIP/FUP stands for (Last IP).
    #[arg(long, requires = "ptdump")]
    lastip: bool,
    /// Show the addressing mode of each MODE.Exec.
    #[arg(long, requires = "ptdump")]
    exec_mode: bool,
    /// Show the estimated TSC at timing packets.
    #[arg(long, requires = "ptdump", conflicts_with = "tcal")]
    time: bool,
    /// Show the time calibration (FCR) at timing packets.
    #[arg(long, requires = "ptdump")]
    tcal: bool,
    /// Show time and calibration as changes.
    #[arg(long, requires = "ptdump")]
    time_delta: bool,
    /// Do not calibrate (CYCs cannot be timed then).
    #[arg(long, requires = "ptdump")]
    no_tcal: bool,
    /// Without a TSC, show relative time rather than an error.
    #[arg(long, requires = "ptdump")]
    no_wall_clock: bool,
    /// An OVF keeps the time calibration.
    #[arg(long, requires = "ptdump")]
    keep_tcal_on_ovf: bool,
    #[command(flatten)]
    facts: PtFactsFlags,
}

impl PtdumpFlags {
    /// The flags as ptdump's option words.
    fn words(&self) -> Vec<String> {
        let mut w = Vec::new();
        for (on, word) in [
            (self.no_sync, "--no-sync"),
            (self.quiet, "--quiet"),
            (self.no_pad, "--no-pad"),
            (self.no_timing, "--no-timing"),
            (self.no_cyc, "--no-cyc"),
            (self.no_offset, "--no-offset"),
            (self.raw, "--raw"),
            (self.lastip, "--lastip"),
            (self.exec_mode, "--exec-mode"),
            (self.time, "--time"),
            (self.tcal, "--tcal"),
            (self.time_delta, "--time-delta"),
            (self.no_tcal, "--no-tcal"),
            (self.no_wall_clock, "--no-wall-clock"),
            (self.keep_tcal_on_ovf, "--keep-tcal-on-ovf"),
        ] {
            if on {
                w.push(word.to_string());
            }
        }
        w.extend(self.facts.words());
        w
    }

    /// ptdump's listing options (the processor's facts are the source's: its
    /// configuration has them, `tracemill_input::source::PtOverrides`).
    fn listing(&self) -> Result<ListingOptions> {
        let (opts, _) =
            ListingOptions::from_ptdump_args(&self.words()).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(opts)
    }
}

#[derive(Args)]
struct DecodeArgs {
    #[command(flatten)]
    src: SourceArgs,
    /// Directory for the tables, DIR/<table>.parquet (created if missing). Without it,
    /// decode and print the summary only.
    #[arg(long, short, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Decode threads, 1 to 256; 0 means all cores [default: all cores].
    #[arg(long, short, value_name = "N", value_parser = tracemill::cli::parse_jobs)]
    jobs: Option<usize>,
    /// Tables to write, comma-separated: branches, events, timing, coverage, edges, or all.
    #[arg(long, value_name = "LIST", default_value = "all")]
    tables: String,
    /// Table file format.
    #[arg(long, value_enum, default_value_t = OutFormat::Parquet)]
    format: OutFormat,
    /// Least bytes of trace per chunk decoded in parallel (chunks are cut at PSBs; 0: one
    /// PSB interval each). At most 4M: larger values are refused, as memory follows the
    /// chunk size. The tables do not depend on it [default: from the trace size, 32K to
    /// 128K].
    #[arg(long, value_name = "BYTES", value_parser = tracemill::cli::parse_chunk_size)]
    chunk_size: Option<u64>,
    /// ZSTD level of the Parquet tables: 1 (fastest) to 22 (smallest), 0 for zstd's
    /// default (3), negative for faster than 1.
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = tracemill::cli::parse_zstd_level,
          default_value_t = tracemill_sinks::parquet::DEFAULT_ZSTD_LEVEL)]
    zstd_level: i32,
    /// Page compression of the Parquet tables (benches/README.md, "Compression", compares
    /// them).
    #[arg(long, value_enum, value_name = "CODEC", default_value_t = tracemill::cli::Compression::Zstd)]
    compression: tracemill::cli::Compression,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    perf: tracemill::cli::PerfFlags,
    #[command(flatten)]
    pt: PtFactsFlags,
}

#[derive(Clone, Copy, ValueEnum)]
enum OutFormat {
    /// DIR/<table>.parquet, ZSTD-compressed, for DuckDB, pyarrow, polars, Spark.
    Parquet,
    /// DIR/<table>.arrow, Arrow IPC files, uncompressed (memory-mappable).
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
    /// A small labelled fleet made of the samples, for trying `ingest` and `report
    /// --where`: 2 programs on 3 hosts over 2 nights, at OUT/<date>/<host>/<program>/ with
    /// the labels host, date and program.
    Fleet {
        /// Directory to write the bundles under.
        #[arg(long, short, value_name = "DIR")]
        out: PathBuf,
        /// Where the sample bundles are.
        #[arg(long, value_name = "DIR", default_value = "datasets/samples")]
        samples: PathBuf,
    },
    /// A large synthetic trace for benchmarks: a seeded walk over a program's code
    /// through the hardware model, until the trace has SIZE bytes.
    Synthetic {
        /// Trace size in bytes (suffixes K, M, G: 1G = 2^30).
        #[arg(long, value_name = "SIZE", value_parser = tracemill::cli::parse_size, default_value = "1G")]
        size: u64,
        /// The program whose code is walked (a static x86-64 ELF).
        #[arg(
            long,
            value_name = "PATH",
            default_value = "datasets/samples/busybox-sort/images/busybox"
        )]
        elf: PathBuf,
        /// Seed of the walk: the same seed, size and program give the same trace.
        #[arg(long, value_name = "N", default_value_t = 1)]
        seed: u64,
        /// RTIT_CTL (default 0xef0b: user-only, return compression, cycle-accurate, MTC with
        /// range 3, STS).
        #[arg(long, value_parser = parse_num, default_value = "0xef0b")]
        ctl: u64,
        /// One PSB at the start and none after: a stretch without PSBs as long as the
        /// trace (a hostile input; the decoder must get through it in bounded memory).
        #[arg(long)]
        no_psb: bool,
        /// Bundle directory to write.
        #[arg(long, short)]
        out: PathBuf,
    },
}

fn parse_num(s: &str) -> Result<u64, String> {
    parse_u64(s).ok_or_else(|| format!("not a number: {s:?} (use 0x... or decimal)"))
}

/// Open the input `src` names (`format`: dump's old spelling of `--trace-format`), with
/// the Intel PT facts `pt` and the perf.data look-up `lookup`:
/// `tracemill_input::Source::open` decides its format and checks it.
fn open_source(
    src: &SourceArgs,
    format: Option<TraceFormatArg>,
    pt: &PtFactsFlags,
    lookup: Lookup,
) -> Result<Source> {
    let overrides = Overrides {
        format: src.trace_format.or(format).map(TraceFormat::from),
        ctl: src.ctl,
        images: extra_images(src)?,
        pt: pt.overrides()?,
        lookup,
        ..Overrides::default()
    };
    let given = match src.bundle.as_os_str() == "-" {
        true => Given::Stdin,
        false => Given::Path(&src.bundle),
    };
    Source::open(given, &overrides)
}

/// `--image` arguments as image entries, relative paths made absolute.
fn extra_images(src: &SourceArgs) -> Result<Vec<tracemill_input::manifest::ImageEntry>> {
    src.images
        .iter()
        .map(|s| {
            // A path on the command line is the user's, relative to where they are; a path
            // in bundle.toml is the bundle's, relative to it. Bundle::open joins relative
            // paths to the bundle directory, so those of --image are made absolute here.
            let mut e = parse_image_arg(s)?;
            if Path::new(&e.path).is_relative() {
                let abs = std::path::absolute(&e.path)
                    .with_context(|| format!("--image {s}: no current directory"))?;
                e.path = abs.to_string_lossy().into_owned();
            }
            Ok(e)
        })
        .collect::<Result<Vec<_>>>()
}

/// When most PSB intervals of the trace end in a decode error, the bytes were most likely
/// read with another RTIT_CTL than they were recorded with (some of its bits change how
/// packets parse and what a TNT bit means); the summary alone shows only error counts.
fn ctl_hint(r: &run::Report, ctl: u64, given: bool) -> Option<String> {
    let errors = r.errors();
    if r.psbs < 4 || errors * 2 < r.psbs as u64 {
        return None;
    }
    Some(format!(
        "{} decode errors in {} PSB intervals: most of the trace did not decode. Is RTIT_CTL \
         {ctl:#x} ({}) the value the trace was recorded with? Cycle_Acc (bit 1), CmprsRet \
         (bit 11) and MTC_Range (bits 15:14) change how it decodes; {}. Also check that \
         the images are the code that ran.",
        run::group(errors),
        run::group(r.psbs as u64),
        if given {
            "from --ctl"
        } else {
            "from bundle.toml"
        },
        if given {
            "without --ctl the bundle's own value is used"
        } else {
            "--ctl overrides it"
        }
    ))
}

/// `--out DIR` must be a directory or not exist yet (it is then created).
fn check_out_dir(out: &Path) -> Result<()> {
    match std::fs::metadata(out) {
        Ok(m) if !m.is_dir() => anyhow::bail!(
            "--out {}: is a file, not a directory (--out names the directory the tables are \
             written into; it is created when missing)",
            out.display()
        ),
        _ => Ok(()),
    }
}

fn main() -> ExitCode {
    tracemill::allocator::configure();
    ignore_file_size_signal();
    let cli = Cli::parse();
    match real_main(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tracemill: error: {}", error_text(&e));
            if let Some(h) = tracemill::errors::hint(&e) {
                eprintln!("tracemill: hint: {h}");
            }
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

/// How a failed decode's message ends: what became of `--out`.
fn nothing_written(opts: &run::Options, report: &run::Report) -> String {
    match &opts.out {
        Some(out) if report.unpublished => {
            format!(" (nothing written: {} keeps what it held)", out.display())
        }
        _ => String::new(),
    }
}

fn real_main(cli: Cli) -> Result<ExitCode> {
    match cli.cmd {
        Cmd::Dump(a) => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            match dump(&a, &mut out) {
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
            // Options first: a bad one fails before the bundle is read.
            let mut tables = Tables::parse(&a.tables)?;
            if a.out.is_none() {
                // Nothing is written, so no row is built: the walk counts what the summary
                // shows, blocks and edges too when coverage or edges is asked for.
                tables = Tables {
                    coverage: tables.coverage,
                    edges: tables.edges,
                    ..Tables::NONE
                };
            }
            if let Some(out) = &a.out {
                check_out_dir(out)?;
            }
            let src = open_source(&a.src, None, &a.pt, a.perf.lookup())?;
            let mut opts = run::Options {
                out: a.out.clone(),
                tables,
                format: match a.format {
                    OutFormat::Parquet => Format::Parquet,
                    OutFormat::Arrow => Format::ArrowIpc,
                },
                chunk_bytes: a.chunk_size,
                progress: !a.quiet,
                writer: tracemill_sinks::WriterOptions {
                    codec: a.compression.into(),
                    zstd_level: a.zstd_level,
                    ..Default::default()
                },
                ..run::Options::default()
            };
            if let Some(j) = a.jobs {
                opts.jobs = j;
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
            // Without a code image not one branch can be decoded: when branches (or the
            // coverage made of them) were asked for, that is a failure, whatever events and
            // timing rows were decoded, and nothing is published over `--out`. A perf.data's
            // binaries are loaded as its traces need them: it fails when no row decoded.
            let t = opts.tables;
            let wants_code = t.branches || t.coverage || t.edges;
            let perf = matches!(src.opened, Opened::Recording(_));
            opts.require_rows = wants_code && (perf || !src.has_code);
            let report = run::decode_source(&src, &opts)
                .with_context(|| format!("decoding {}", src.name))?;
            eprint!("{}", run::summary(&src.name, &report));
            if let Opened::Bundle(b) = &src.opened {
                if let Some(h) = ctl_hint(&report, b.manifest.rtit_ctl, a.src.ctl.is_some()) {
                    eprintln!("tracemill: hint: {h}");
                }
            }
            if opts.require_rows && report.rows == 0 {
                let why = match &src.opened {
                    Opened::Recording(r) if r.traces[0].bundle.images.is_empty() => {
                        ": none of the recorded binaries could be loaded"
                    }
                    Opened::Recording(_) => "",
                    Opened::Bundle(_) => ": no code image could be loaded",
                };
                eprintln!(
                    "tracemill: error: no branch decoded{why}{}",
                    nothing_written(&opts, &report)
                );
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
            SynthCmd::Fleet { out, samples } => {
                let made = tracemill::synth::fleet(&samples, &out)?;
                eprintln!(
                    "wrote {} bundles under {} (labels host, date, program): try `tracemill ingest {} --dataset DIR --partition-by date,host`",
                    made.len(),
                    out.display(),
                    out.display()
                );
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
                no_psb,
                out,
            } => {
                let t = std::time::Instant::now();
                let sum = tracemill_datasets::samples::synth_big_with(
                    &elf, size, seed, ctl, !no_psb, &out,
                )?;
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

/// `tracemill dump`: open the input (its format is decided there), list each trace (a
/// perf.data's AUX areas in turn, each under a `# NAME` line).
fn dump(a: &DumpArgs, out: &mut dyn Write) -> Result<()> {
    let src = open_source(&a.src, a.format, &a.pt.facts, Lookup::default())?;
    if src.format == TraceFormat::Rtit && a.ptdump {
        bail!(
            "{}: --ptdump is for Intel PT traces; this one is read as RTIT (use \
             --trace-format pt)",
            src.name
        );
    }
    let traces: Vec<(Option<&str>, &tracemill_input::bundle::Bundle)> = match &src.opened {
        Opened::Bundle(b) => vec![(None, b)],
        Opened::Recording(r) => r
            .traces
            .iter()
            .map(|t| (Some(t.name.as_str()), &t.bundle))
            .collect(),
    };
    for (name, b) in traces {
        if let Some(n) = name {
            writeln!(out, "# {n}")?;
        }
        match src.format {
            TraceFormat::Rtit => {
                let cfg = TraceConfig::from_ctl(b.manifest.rtit_ctl);
                tracemill::dump::dump(&b.stream(), &cfg, a.stats, out)?;
            }
            TraceFormat::Pt => {
                let cfg = b.pt_config()?;
                if a.ptdump {
                    tracemill::dump::ptdump(&b.stream(), &a.pt.listing()?, &cfg, out)?;
                } else {
                    tracemill::dump::dump_pt(&b.stream(), &cfg, a.stats, out)?;
                }
            }
        }
    }
    Ok(())
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every option and argument of every command says what it is, and every value of
    /// an option with a fixed set of values says what it means (`--help` is the manual).
    #[test]
    fn help_describes_every_option_and_value() {
        let mut missing = Vec::new();
        fn walk(cmd: &clap::Command, path: String, missing: &mut Vec<String>) {
            if cmd.get_about().is_none() && !path.is_empty() {
                missing.push(format!("{path}: no description"));
            }
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path} {id}: no help"));
                }
                if !a.is_hide_possible_values_set() {
                    for v in a.get_possible_values() {
                        if v.get_help().is_none() && !matches!(v.get_name(), "true" | "false") {
                            missing.push(format!("{path} {id}={}: no help", v.get_name()));
                        }
                    }
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, format!("{path} {}", sub.get_name()), missing);
            }
        }
        let cmd = super::Cli::command();
        cmd.clone().debug_assert();
        walk(&cmd, String::new(), &mut missing);
        assert!(missing.is_empty(), "undocumented:\n{}", missing.join("\n"));
    }
}
