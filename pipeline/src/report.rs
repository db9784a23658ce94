//! `tracemill report`: the command line of the reports (`tracemill-reports` does the
//! work). The facts `decode` records for them in the tables' metadata: `run/meta.rs`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use tracemill_input::manifest::parse_u64;
use tracemill_reports::dataset::{parse_where, Filter, FilterError};
use tracemill_reports::hotspots::{By, Weight};
use tracemill_reports::util::group;
use tracemill_reports::Source;

#[derive(Args)]
pub struct ReportArgs {
    #[command(subcommand)]
    what: ReportCmd,
}

/// The decode output (or dataset) and where its code is.
#[derive(Args)]
struct Tables {
    /// Output directory of `tracemill decode --out`, or a dataset directory of `tracemill
    /// ingest` (local only: copy an s3:// dataset locally first). Over a dataset the
    /// report adds up the bundles with status ok, each symbolized with its own images.
    #[arg(value_name = "OUT")]
    dir: PathBuf,
    /// The bundle the tables were decoded from [default: the one recorded in the tables;
    /// not with a dataset].
    #[arg(long, value_name = "DIR")]
    bundle: Option<PathBuf>,
    /// Over a dataset, the bundles to report on, by catalog column (labels, source,
    /// bundle): `host = 'h1'`, `date != 'x'`, `host IN ('a', 'b')`, `NOT IN`, joined by
    /// AND. Values in single quotes.
    #[arg(long = "where", value_name = "FILTER", value_parser = parse_filter)]
    filter: Option<(Filter, String)>,
}

#[derive(Clone, Copy, ValueEnum)]
enum ByArg {
    /// One row per function (ELF symbols; `image+0xOFFSET` where none).
    Function,
    /// One row per source line (DWARF, inlined frames included), like file.c:32.
    Line,
    /// One row per basic block (its start address), within its function.
    Block,
}

#[derive(Clone, Copy, ValueEnum)]
enum WeightArg {
    /// Instructions executed (exact, from the coverage table).
    Instructions,
    /// Core cycles (from cycle-accurate traces; else none, and a warning).
    Cycles,
    /// Branches, i.e. executions of the blocks.
    Branches,
}

/// What a flame graph's frame widths measure: the stacks add up instructions and cycles,
/// not branches, so only those two are offered.
#[derive(Clone, Copy, ValueEnum)]
enum FlameWeightArg {
    /// Instructions executed.
    Instructions,
    /// Core cycles (from cycle-accurate traces; else instructions, and a warning).
    Cycles,
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    /// Aligned columns for reading, like perf report.
    Table,
    /// Comma-separated with a header row, plain numbers.
    Csv,
    /// One object: totals, rows, warnings.
    Json,
}

#[derive(Subcommand)]
enum ReportCmd {
    /// Where the instructions (or cycles) went: by function, source line or block.
    Hotspots {
        #[command(flatten)]
        t: Tables,
        /// What a row is.
        #[arg(long, value_enum, default_value_t = ByArg::Function)]
        by: ByArg,
        /// What rows are ranked by.
        #[arg(long, value_enum, default_value_t = WeightArg::Instructions)]
        weight: WeightArg,
        /// Rows shown, the heaviest first; 0 for all.
        #[arg(long, value_name = "N", default_value_t = 30)]
        top: usize,
        /// Output format.
        #[arg(long, value_enum, default_value_t = FormatArg::Table)]
        format: FormatArg,
    },
    /// Call stacks rebuilt from the call and ret rows: folded stacks and a flame graph SVG.
    Flamegraph {
        #[command(flatten)]
        t: Tables,
        /// The SVG file to write (interactive in a browser: hover, click to zoom, search).
        #[arg(long, short, value_name = "FILE.svg")]
        out: Option<PathBuf>,
        /// Folded stacks file (`a;b;c weight`), the text format flame graph tools read.
        #[arg(long, value_name = "FILE")]
        folded: Option<PathBuf>,
        /// What frame widths measure.
        #[arg(long, value_enum, default_value_t = FlameWeightArg::Instructions)]
        weight: FlameWeightArg,
    },
    /// The flame graph's stacks as a pprof profile (gzipped profile.proto) with
    /// instructions and cycles, for go tool pprof, Pyroscope, Grafana.
    Pprof {
        #[command(flatten)]
        t: Tables,
        /// The profile to write.
        #[arg(long, short, value_name = "FILE.pb.gz")]
        out: PathBuf,
    },
    /// The taken branches as `perf script --itrace=b -F comm,tid,cpu,time,ip,sym,addr,symoff`
    /// prints them, for scripts that read perf's text.
    PerfScript {
        #[command(flatten)]
        t: Tables,
        /// The text file to write [default: standard output].
        #[arg(long, short, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Coverage by image and function; drcov and lcov files.
    Coverage {
        #[command(flatten)]
        t: Tables,
        /// drcov (version 2) file to write, for Lighthouse, bncov, ...
        #[arg(long, value_name = "FILE")]
        drcov: Option<PathBuf>,
        /// lcov tracefile to write (line and function hits from DWARF), for genhtml.
        #[arg(long, value_name = "FILE")]
        lcov: Option<PathBuf>,
        /// The directory relative source paths of the images' DWARF start from (the
        /// samples': the repository root). SF: paths in the lcov file are absolute, so
        /// genhtml runs from anywhere [default: the current directory].
        #[arg(long, value_name = "DIR")]
        source_root: Option<PathBuf>,
    },
    /// Function call spans in time as Chrome trace-event JSON (Perfetto UI).
    Timeline {
        #[command(flatten)]
        t: Tables,
        /// The JSON file to write (open it in ui.perfetto.dev or chrome://tracing).
        #[arg(long, short, value_name = "FILE.json")]
        out: PathBuf,
        /// Only spans that end at or after this TSC.
        #[arg(long, value_parser = parse_num)]
        from: Option<u64>,
        /// Only spans that begin at or before this TSC.
        #[arg(long, value_parser = parse_num)]
        to: Option<u64>,
        /// TSC ticks per microsecond [default: the bundle's guaranteed ratio x 100 MHz,
        /// else 1 GHz].
        #[arg(long, value_name = "MHZ")]
        tsc_mhz: Option<f64>,
        /// Spans written at most (the first ones): 1,000,000 is about 100 MB of JSON.
        #[arg(long, value_name = "N", default_value_t = 1_000_000)]
        max_spans: u64,
        /// Spans shorter than this many nanoseconds, which a viewer cannot show, are
        /// merged: a run of them at one depth becomes one span (args.calls), their callees
        /// in it (args.nested); 0 merges none.
        #[arg(long, value_name = "NS", default_value_t = 1.0)]
        min_ns: f64,
    },
    /// What changed from A to B: instructions (and cycles) by function, line or block,
    /// and the blocks and edges executed in one and not the other.
    Diff {
        /// The baseline: a decode output directory or a dataset.
        #[arg(value_name = "A")]
        a: PathBuf,
        /// The run compared with it (may be the same dataset as A, with another --where-b).
        #[arg(value_name = "B")]
        b: PathBuf,
        /// Over datasets, the bundles of both sides (as the other reports' --where).
        #[arg(long = "where", value_name = "FILTER", value_parser = parse_filter)]
        filter: Option<(Filter, String)>,
        /// Over a dataset, the bundles of A only (with --where, both must hold).
        #[arg(long = "where-a", value_name = "FILTER", value_parser = parse_filter)]
        filter_a: Option<(Filter, String)>,
        /// Over a dataset, the bundles of B only (with --where, both must hold).
        #[arg(long = "where-b", value_name = "FILTER", value_parser = parse_filter)]
        filter_b: Option<(Filter, String)>,
        /// What a row is.
        #[arg(long, value_enum, default_value_t = ByArg::Function)]
        by: ByArg,
        /// Rows shown, the largest changes first; 0 for all.
        #[arg(long, value_name = "N", default_value_t = 30)]
        top: usize,
        /// Output format (CSV: the change rows, or with --coverage the coverage rows; JSON:
        /// both).
        #[arg(long, value_enum, default_value_t = FormatArg::Table)]
        format: FormatArg,
        /// CSV of the coverage changes (blocks and edges gained and lost by function and
        /// line) instead of the instruction changes.
        #[arg(long)]
        coverage: bool,
    },
    /// One self-contained HTML page: summary, interactive flame graph, hotspots and
    /// coverage (sortable), timeline preview.
    Html {
        #[command(flatten)]
        t: Tables,
        /// The HTML file to write (one file; it loads nothing at view time).
        #[arg(long, short, value_name = "FILE.html")]
        out: PathBuf,
        /// Rows in the hotspot and function tables, the heaviest first; 0 for all.
        #[arg(long, value_name = "N", default_value_t = 50)]
        top: usize,
        /// A section of what changed against this baseline (a decode output or a
        /// dataset), as `report diff BASELINE OUT` reports it.
        #[arg(long, value_name = "A")]
        baseline: Option<PathBuf>,
        /// Over a dataset, the baseline's bundles.
        #[arg(long = "baseline-where", value_name = "FILTER", value_parser = parse_filter, requires = "baseline")]
        baseline_filter: Option<(Filter, String)>,
    },
}

fn parse_filter(s: &str) -> Result<(Filter, String), String> {
    parse_where(s).map(|f| (f, s.to_string()))
}

fn parse_num(s: &str) -> Result<u64, String> {
    parse_u64(s).ok_or_else(|| format!("not a number: {s:?} (use 0x... or decimal)"))
}

fn warn(ws: &[String]) {
    for w in ws {
        eprintln!("tracemill: warning: {w}");
    }
}

fn open(t: &Tables) -> Result<Source> {
    let (src, ws) = Source::open(
        &t.dir,
        t.bundle.as_deref(),
        t.filter.as_ref().map(|(f, s)| (f, s.as_str())),
    )?;
    warn(&ws);
    Ok(src)
}

/// Both filters must hold: their conditions joined by AND, as `--where` joins them.
fn both(a: Option<&(Filter, String)>, b: Option<&(Filter, String)>) -> Option<(Filter, String)> {
    match (a, b) {
        (Some((fa, sa)), Some((fb, sb))) => {
            let mut f = fa.clone();
            f.conds.extend(fb.conds.iter().cloned());
            Some((f, format!("{sa} AND {sb}")))
        }
        (x, y) => x.or(y).cloned(),
    }
}

fn by(b: ByArg) -> By {
    match b {
        ByArg::Function => By::Function,
        ByArg::Line => By::Line,
        ByArg::Block => By::Block,
    }
}

fn weight(w: WeightArg) -> Weight {
    match w {
        WeightArg::Instructions => Weight::Instructions,
        WeightArg::Cycles => Weight::Cycles,
        WeightArg::Branches => Weight::Branches,
    }
}

/// Run a report command. A `--where` naming a column no bundle has is a usage error
/// (exit 2, as clap's own), so that a typo is not taken for an empty selection.
pub fn run(a: ReportArgs) -> Result<ExitCode> {
    match run_report(a) {
        Err(e) if e.is::<FilterError>() => {
            eprintln!("tracemill: error: {e}");
            Ok(ExitCode::from(2))
        }
        r => r,
    }
}

fn run_report(a: ReportArgs) -> Result<ExitCode> {
    match a.what {
        ReportCmd::Hotspots {
            t,
            by: b,
            weight: w,
            top,
            format,
        } => {
            let mut src = open(&t)?;
            let h = tracemill_reports::hotspots::hotspots_of(&mut src, by(b), weight(w))?;
            warn(&h.warnings);
            let top = if top == 0 { usize::MAX } else { top };
            let text = match format {
                FormatArg::Table => h.to_table(top),
                FormatArg::Csv => h.to_csv(top),
                FormatArg::Json => h.to_json(top),
            };
            print_report(&text)?;
        }
        ReportCmd::Flamegraph {
            t,
            out,
            folded,
            weight: w,
        } => {
            if out.is_none() && folded.is_none() {
                anyhow::bail!("give --out FILE.svg, --folded FILE, or both");
            }
            let cycles = matches!(w, FlameWeightArg::Cycles);
            let mut src = open(&t)?;
            let s = tracemill_reports::stacks::flamegraph(
                &mut src,
                cycles,
                out.as_deref(),
                folded.as_deref(),
            )?;
            warn(&s.warnings);
            eprintln!(
                "{} {} in {} stacks{} ({} gaps, {} mismatched returns, {} longjmps, {} interrupt or signal entries)",
                group(s.total),
                if s.cycles { "cycles" } else { "instructions" },
                group(s.stacks as u64),
                s.drawn.map_or(String::new(), |d| format!(", {} drawn", group(d as u64))),
                group(s.gaps),
                group(s.mismatched_returns),
                group(s.longjmps),
                group(s.async_entries)
            );
        }
        ReportCmd::PerfScript { t, out } => {
            let mut src = open(&t)?;
            let s = match &out {
                Some(p) => {
                    let f = std::fs::File::create(p)
                        .with_context(|| format!("{}: cannot create", p.display()))?;
                    tracemill_reports::perf_script::write(&mut src, f)
                        .with_context(|| format!("{}: cannot write", p.display()))?
                }
                None => {
                    match tracemill_reports::perf_script::write(&mut src, std::io::stdout().lock())
                    {
                        // A reader that stops early (`| head`) is not an error.
                        Err(e)
                            if e.downcast_ref::<std::io::Error>()
                                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
                        {
                            return Ok(ExitCode::SUCCESS)
                        }
                        r => r?,
                    }
                }
            };
            warn(&s.warnings);
            if let Some(p) = &out {
                eprintln!(
                    "{}: {} lines, {} taken branches",
                    p.display(),
                    group(s.lines),
                    group(s.branches)
                );
            }
        }
        ReportCmd::Pprof { t, out } => {
            let mut src = open(&t)?;
            let f = std::fs::File::create(&out)
                .with_context(|| format!("{}: cannot create", out.display()))?;
            let s = tracemill_reports::pprof::write(&mut src, std::io::BufWriter::new(f))
                .with_context(|| format!("{}: cannot write the profile", out.display()))?;
            warn(&s.warnings);
            eprintln!(
                "{}: {} samples, {} functions, {} mappings; {} instructions{}",
                out.display(),
                group(s.samples),
                group(s.functions),
                group(s.mappings),
                group(s.instructions),
                s.cycles
                    .map_or(String::new(), |c| format!(", {} cycles", group(c)))
            );
        }
        ReportCmd::Coverage {
            t,
            drcov,
            lcov,
            source_root,
        } => {
            let mut src = open(&t)?;
            let (text, ws) = tracemill_reports::coverage::run(
                &mut src,
                drcov.as_deref(),
                lcov.as_deref(),
                source_root.as_deref(),
            )?;
            warn(&ws);
            print_report(&text)?;
        }
        ReportCmd::Timeline {
            t,
            out,
            from,
            to,
            tsc_mhz,
            max_spans,
            min_ns,
        } => {
            let mut src = open(&t)?;
            let f = std::fs::File::create(&out)
                .with_context(|| format!("{}: cannot create", out.display()))?;
            let opts = tracemill_reports::timeline::Options {
                from,
                to,
                tsc_mhz,
                max_spans,
                outermost: false,
                min_ns,
            };
            let s = tracemill_reports::timeline::write(&mut src, &opts, f)
                .with_context(|| format!("{}: cannot write the timeline", out.display()))?;
            warn(&s.warnings);
            eprintln!(
                "{}: {} spans ({} shorter than {min_ns} ns merged), TSC origin {:#x} at {} ticks/us",
                out.display(),
                group(s.spans),
                group(s.merged),
                s.first_tsc.unwrap_or(0),
                s.tsc_mhz
            );
        }
        ReportCmd::Diff {
            a,
            b,
            filter,
            filter_a,
            filter_b,
            by: b_arg,
            top,
            format,
            coverage,
        } => {
            let side = |dir: PathBuf, f: Option<(Filter, String)>| Tables {
                dir,
                bundle: None,
                filter: f,
            };
            let mut sa = open(&side(a, both(filter.as_ref(), filter_a.as_ref())))?;
            let mut sb = open(&side(b, both(filter.as_ref(), filter_b.as_ref())))?;
            let d = tracemill_reports::diff::diff(&mut sa, &mut sb, by(b_arg))?;
            warn(&d.warnings);
            let top = if top == 0 { usize::MAX } else { top };
            let text = match format {
                FormatArg::Table => d.to_table(top),
                FormatArg::Csv if coverage => d.coverage_csv(top),
                FormatArg::Csv => d.to_csv(top),
                FormatArg::Json => d.to_json(top),
            };
            print_report(&text)?;
        }
        ReportCmd::Html {
            t,
            out,
            top,
            baseline,
            baseline_filter,
        } => {
            let mut src = open(&t)?;
            let top = if top == 0 { usize::MAX } else { top };
            let diff = match baseline {
                Some(dir) => {
                    let mut base = open(&Tables {
                        dir,
                        bundle: None,
                        filter: baseline_filter,
                    })?;
                    Some(tracemill_reports::diff::diff(
                        &mut base,
                        &mut src,
                        By::Function,
                    )?)
                }
                None => None,
            };
            let page = tracemill_reports::html::render_with(&mut src, top, diff.as_ref())?;
            std::fs::write(&out, page)
                .with_context(|| format!("{}: cannot write", out.display()))?;
            eprintln!("{}: written", out.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A report on stdout. A reader that stops early (`| head`) is not an error.
fn print_report(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
