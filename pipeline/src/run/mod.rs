//! `tracemill decode`: the parallel pipeline.
//!
//! ```text
//!   plan        produce (rayon pool)     order (calling thread)         writer thread
//!   PSBs,  ──►  chunk bodies, a    ──►  stitch, time, number,   ──►  append row groups,
//!   chunks      window of 2×jobs+2      count; row groups are        small tables;
//!               chunks ahead            encoded on the pool          temp + rename
//! ```
//!
//! Bodies ahead decode while the calling thread stitches and the writer thread writes;
//! every channel is bounded, so memory stays bounded whatever the trace size (consumed
//! pages of the memory-mapped trace are released behind the reader).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use crossbeam_channel::bounded;
use tracemill_decode::block::BlockCache;
use tracemill_decode::chunk::{plan_chunks_with, Chunk, Input, Piece, Sequencer};
use tracemill_decode::front::Format as TraceFormat;
use tracemill_decode::image::ImageSet;
use tracemill_decode::pt::clock::PtTiming;
use tracemill_decode::rows::{BranchColumns, EventRow};
use tracemill_decode::stream::TraceStream;
use tracemill_decode::tally::{Counted, Covered};
use tracemill_decode::timing::Clock;
use tracemill_decode::{Pt, Rtit};
use tracemill_schemas::{BranchKind, EventKind};
use tracemill_sinks::{FileMeta, Format, WriterOptions, Written};

use tracemill_input::bundle::Bundle;
use tracemill_input::manifest::TraceFormat as InputFormat;
use tracemill_input::perf::threads::{LastTimed, Threads};
use tracemill_input::source::{check_format, part_warnings, Opened};
use tracemill_input::Source;

mod emit;
mod meta;
mod order;
pub(crate) mod threads;
mod writers;

use emit::{Emitter, Grouped, RowGroups, ToWriter};
use order::{Ordered, RowsTimer, TallyTimer};
use writers::{Closed, Writers};

/// Which tables to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tables {
    pub branches: bool,
    pub events: bool,
    pub timing: bool,
    pub coverage: bool,
    pub edges: bool,
}

impl Tables {
    pub const ALL: Tables = Tables {
        branches: true,
        events: true,
        timing: true,
        coverage: true,
        edges: true,
    };
    pub const NONE: Tables = Tables {
        branches: false,
        events: false,
        timing: false,
        coverage: false,
        edges: false,
    };

    /// Parse `branches,events,...`.
    pub fn parse(s: &str) -> Result<Tables> {
        let mut t = Tables::NONE;
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "branches" => t.branches = true,
                "events" => t.events = true,
                "timing" => t.timing = true,
                "coverage" => t.coverage = true,
                "edges" => t.edges = true,
                "all" => t = Tables::ALL,
                other => bail!(
                    "unknown table {other:?}: choose from branches, events, timing, coverage, \
                     edges (or all)"
                ),
            }
        }
        // An empty list would decode and write nothing without a word.
        if !(t.branches || t.events || t.timing || t.coverage || t.edges) {
            bail!(
                "--tables {s:?} names no table: give some of branches, events, timing, \
                 coverage, edges, or all (to decode without writing, leave out --out)"
            );
        }
        Ok(t)
    }
}

/// How to decode.
#[derive(Clone, Debug)]
pub struct Options {
    /// Worker threads for chunk bodies.
    pub jobs: usize,
    /// Chunk size in bytes (at PSB boundaries); `None`: chosen from the trace size.
    pub chunk_bytes: Option<u64>,
    /// Where to write tables; `None`: decode only.
    pub out: Option<PathBuf>,
    pub tables: Tables,
    pub format: Format,
    pub writer: WriterOptions,
    /// Show a progress bar (on a terminal).
    pub progress: bool,
    /// Hand the tables asked for to a consumer as Arrow batches instead of writing files
    /// ([`crate::stream`]); not with `out`.
    pub batches: Option<crate::stream::BatchSink>,
    /// A run that decodes no branch row writes nothing (`Report::unpublished`): the
    /// caller fails it (no code could be loaded), and `out` keeps what it held.
    pub require_rows: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            chunk_bytes: None,
            out: None,
            tables: Tables::ALL,
            format: Format::Parquet,
            writer: WriterOptions::default(),
            progress: false,
            batches: None,
            require_rows: false,
        }
    }
}

/// What a decode did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub trace_bytes: u64,
    pub psbs: usize,
    pub chunks: usize,
    pub jobs: usize,
    pub rows: u64,
    pub instructions: u64,
    pub by_kind: [u64; 8],
    pub events_by_kind: BTreeMap<&'static str, u64>,
    /// The first few problems, for the summary.
    pub first_errors: Vec<EventRow>,
    /// Chunks whose stitch decoded them alone (the safety net).
    pub fallbacks: usize,
    pub elapsed: Duration,
    pub written: Vec<Written>,
    /// No branch was decoded and `Options::require_rows` held: the tables were not
    /// published.
    pub unpublished: bool,
    /// Distinct basic blocks and edges executed (coverage; lost stretches excluded).
    pub blocks: u64,
    pub edges: u64,
    /// Warnings about the inputs (images that could not be loaded, reserved bits).
    pub warnings: Vec<String>,
}

impl Report {
    fn count(&mut self, p: &Piece<BranchColumns>) {
        self.rows += p.stats.rows;
        self.instructions += p.stats.insns;
        for (k, n) in p.stats.by_kind.iter().enumerate() {
            self.by_kind[k] += n;
        }
        for e in &p.events {
            *self.events_by_kind.entry(e.kind.name()).or_default() += 1;
            if e.kind == EventKind::Error && self.first_errors.len() < 5 {
                self.first_errors.push(e.clone());
            }
        }
    }

    pub fn errors(&self) -> u64 {
        self.events_by_kind.get("error").copied().unwrap_or(0)
    }
}

/// Pick a chunk size: at most 128 KiB, and many more chunks than threads.
pub fn default_chunk_bytes(len: u64, jobs: usize) -> u64 {
    // Small chunks keep the rows in flight (a window of 2×jobs+2 chunks, up to one row per
    // byte) small and their buffers reused by the allocator instead of fresh pages the
    // kernel must zero. Measured on a 50 MB synthetic trace, one job, no output: 256 KiB
    // chunks 7.4 s and a 350 MB peak, 2 MiB chunks 9.3 s and 1 GB; with all tables written
    // on two jobs, 128 KiB chunks peak at 450 MB and 256 KiB at 630 MB. Stitches, one per
    // chunk, stay a small share of the rows.
    (len / (jobs as u64 * 16).max(1)).clamp(32 << 10, 128 << 10)
}

/// Release consumed trace pages in steps of this many bytes (one madvise call each).
const RELEASE_STEP: u64 = 16 << 20;

/// Rows, events and timing facts a chunk body may hold before it is given up and its
/// chunk walked in order, in pieces ([`PIECE_LIMIT`]): a chunk runs to the first PSB past
/// `chunk_bytes`, so only a stretch without PSBs (one chunk however long) gets there. A
/// chunk of `chunk_bytes` holds up to a few rows per byte; eight leaves room for dense
/// code, so that ordinary chunks stay on the pool. At most 2 Mi (about 150 MB of columns
/// while the body walks, twice that in address space as they grow): past 256 KiB chunks
/// a dense chunk is walked in order too, so that a body's memory stays bounded whatever
/// chunk size is asked for.
pub fn body_limit(chunk_bytes: u64) -> usize {
    let rows = chunk_bytes.saturating_mul(8).clamp(1 << 20, 2 << 20);
    usize::try_from(rows).unwrap_or(2 << 20)
}

/// Rows, events and timing facts per piece when a chunk is walked in order: about what a
/// default chunk's body holds, so that the stages after see pieces of the usual size.
pub const PIECE_LIMIT: usize = 1 << 17;

/// Decode a bundle; write the tables asked for.
///
/// The stages, each a function below: [`plan`] (find PSBs, cut chunks), [`produce`]
/// (decode chunk bodies on the pool, a bounded window ahead), [`order`] (stitch, time,
/// number and count pieces in trace order, hand row groups to the pool for encoding), and
/// the writer thread ([`Writers`]: append encoded row groups and small tables, rename
/// into place at the end).
pub fn decode(bundle: &Bundle, opts: &Options) -> Result<Report> {
    decode_parts(
        &[Part {
            bundle,
            threads: None,
            spaces: None,
        }],
        &file_meta(bundle),
        opts,
    )
}

/// Decode an input opened by [`tracemill_input::Source::open`]: a bundle's trace (or a
/// bare one, or one in memory) with [`decode`], a perf.data's with [`decode_perf`].
pub fn decode_source(src: &Source, opts: &Options) -> Result<Report> {
    match &src.opened {
        Opened::Bundle(b) => decode(b, opts),
        Opened::Recording(r) => decode_perf(r, opts),
    }
}

/// One trace of a decode: a bundle's, or one AUX area's of a perf.data with the threads
/// that ran there (its rows gain `cpu`, `pid`, `tid` and `time`).
pub struct Part<'b> {
    pub bundle: &'b Bundle,
    pub threads: Option<Arc<Threads>>,
    /// The sideband's address spaces (perf.data whose processes have other code at the
    /// same addresses): code is looked up in the space of the process at each place.
    pub spaces: Option<&'b tracemill_input::perf::spaces::TraceSpaces>,
}

/// Decode the traces of a perf.data ([`tracemill_input::perf::open`]) into one set of tables: every
/// AUX area's rows in turn (the rows of each CPU in order), numbered on by `seq`, with the
/// thread columns; coverage and edges over all of them. An area with nothing to decode
/// (no PSB) is a warning.
pub fn decode_perf(rec: &tracemill_input::perf::Recording, opts: &Options) -> Result<Report> {
    let parts: Vec<Part<'_>> = rec
        .traces
        .iter()
        .map(|t| Part {
            bundle: &t.bundle,
            threads: Some(Arc::new(t.threads.clone())),
            spaces: t.spaces.as_ref(),
        })
        .collect();
    let meta = perf_meta(rec)?;
    let mut opts = opts.clone();
    opts.writer.thread_columns = true;
    let mut report = decode_parts(&parts, &meta, &opts)?;
    let mut warnings = rec.warnings.clone();
    warnings.append(&mut report.warnings);
    report.warnings = warnings;
    Ok(report)
}

/// Decode `parts` in turn into one set of tables with the metadata `meta`. All parts have
/// one format (the first's decides: `tracemill_input::source::check_format`, the checks
/// every face makes before a decode) and the same images.
pub fn decode_parts(parts: &[Part<'_>], meta: &FileMeta, opts: &Options) -> Result<Report> {
    let bundles: Vec<&Bundle> = parts.iter().map(|p| p.bundle).collect();
    let (format, warnings) = check_format(&bundles)?;
    match format {
        InputFormat::Rtit => {
            let configs = parts
                .iter()
                .map(|p| (p.bundle.trace_config(), p.bundle.timing_config()))
                .collect();
            decode_as::<Rtit>(parts, configs, meta, opts, warnings)
        }
        InputFormat::Pt => {
            let mut configs = Vec::new();
            for p in parts {
                let cfg = p.bundle.pt_config()?;
                let timing = PtTiming::new(&cfg);
                configs.push((cfg, timing));
            }
            decode_as::<Pt>(parts, configs, meta, opts, warnings)
        }
    }
}

/// What [`decode_as`] needs of each part: its configuration and timing configuration.
type Configs<F> = Vec<(
    <F as TraceFormat>::Config,
    <<F as TraceFormat>::Clock as Clock>::Config,
)>;

/// [`decode_parts`] in format `F`, with each part's configuration and the warnings
/// choosing it raised.
fn decode_as<F: TraceFormat>(
    parts: &[Part<'_>],
    configs: Configs<F>,
    meta: &FileMeta,
    opts: &Options,
    warnings: Vec<String>,
) -> Result<Report> {
    let t0 = Instant::now();
    if opts.out.is_some() && opts.batches.is_some() {
        bail!("decode writes files (out) or hands batches to a consumer (batches), not both");
    }
    let many = parts.len() > 1;
    // Each part's images and plan first: a bad input fails before any file is created.
    let mut prepared = Vec::new();
    let mut report = Report {
        jobs: opts.jobs.max(1),
        warnings,
        ..Report::default()
    };
    let mut no_psb = None;
    for (part, (cfg, timing)) in parts.iter().zip(configs) {
        let (images, problems) = part.bundle.image_set();
        // The parts of one recording share their images: say what is wrong with them once.
        let problems = if prepared.is_empty() {
            problems
        } else {
            Vec::new()
        };
        let stream = part.bundle.stream();
        match plan::<F>(part.bundle, &stream, &images, problems, opts) {
            Ok(plan) => {
                report.trace_bytes += plan.report.trace_bytes;
                report.chunks += plan.report.chunks;
                report.warnings.extend(plan.report.warnings.iter().cloned());
                prepared.push((part, images, plan, cfg, timing));
            }
            Err(e) if many && e.downcast_ref::<crate::errors::NoPsb>().is_some() => {
                report.trace_bytes += stream.len();
                report.warnings.push(format!("{e:#}"));
                no_psb.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    if prepared.is_empty() {
        return Err(no_psb.unwrap_or_else(|| anyhow::anyhow!("nothing to decode")));
    }

    let mut writers = Writers::create(opts, meta)?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(report.jobs)
        .thread_name(|i| format!("tracemill-decode-{i}"))
        .build()
        .context("starting the decode threads")?;

    // Branch and timing rows are encoded into Parquet row groups on the decode pool (the
    // writer thread only appends them): one thread cannot keep up with several decoding.
    let target = opts.writer.max_row_group_rows.max(1);
    // Row groups in flight (being encoded, or encoded and waiting for the writer), both
    // tables together: one per thread and one more. Each holds its rows (~35 MB for 512 Ki
    // branch rows) and its encoder's buffers; the piece channel alone let up to six per
    // table pile up when encoding fell behind (926 MiB peak on a 1 GiB trace).
    let (tokens, tokens_back) = bounded::<()>(report.jobs + 1);
    let mut emitter = Emitter {
        seq: Sequencer::default(),
        batches: opts.batches.clone(),
        branches: writers
            .branch_encoder
            .take()
            .map(|enc| RowGroups::new(Grouped::Branches, enc, target, tokens.clone())),
        timing: writers
            .timing_encoder
            .take()
            .map(|enc| RowGroups::new(Grouped::Timing, enc, target, tokens.clone())),
        threads: None,
        dated: LastTimed::default(),
        part_base: 0,
    };
    // Coverage names images by the first part's set (every part has the same images).
    let cov_images = &prepared[0].1;
    // The tables asked for (of the consumer, when there is one), and whether the timing
    // packets' time is needed without rows (the `timing` table, and the events' time).
    let asked = opts.batches.as_ref().map_or(opts.tables, |b| b.tables());
    let dated = asked.timing || asked.events;
    let trace_len: u64 = prepared.iter().map(|p| p.0.bundle.stream().len()).sum();
    let closed = std::thread::scope(|s| -> Result<Closed> {
        let (piece_tx, piece_rx) = bounded::<ToWriter>(4);
        let writer = s.spawn(move || -> Result<Closed> {
            for m in piece_rx {
                match m {
                    ToWriter::Piece(p, t, dated) => writers.write(p, t, dated.as_ref())?,
                    ToWriter::RowGroup(table, rx) => {
                        let rg = rx.recv().context("a row group encoder stopped")??;
                        writers.append_row_group(table, rg)?;
                        // Its memory is gone: let the next row group start.
                        let _ = tokens_back.recv();
                    }
                }
            }
            writers.finish(cov_images, trace_len)
        });
        let mut stopped = false;
        for (part, images, plan, cfg, timing) in &prepared {
            if stopped {
                break;
            }
            let stream = part.bundle.stream();
            // The address space of each place, from the sideband and the trace's own
            // timing packets: one pass over the packets before the walk, since a chunk's
            // body cannot know the time at its start.
            let spaces = part.spaces.map(|s| {
                tracemill_decode::spaces::schedule::<F>(&stream, cfg, timing, |d| s.key_at(d))
            });
            let input = Input::<F> {
                stream: &stream,
                images,
                cfg: cfg.clone(),
                timing: timing.clone(),
                spaces: spaces.as_ref(),
            };
            // Blocks are cached per thread by address: a new part may have other code.
            let caches: Vec<Mutex<BlockCache>> =
                (0..report.jobs).map(|_| Mutex::default()).collect();
            emitter.threads = part.threads.clone();
            emitter.dated = LastTimed::default();
            let ordered = Ordered {
                bundle: part.bundle,
                input: &input,
                plan,
                pool: &pool,
                tx: piece_tx.clone(),
                progress: opts.progress,
            };
            let (caches, timing) = (&caches, &input.timing);
            let (e, r) = (&mut emitter, &mut report);
            // Rows are built only for the `branches` table: other tables need only their
            // count, their coverage and the timing packets' time (`tracemill_decode::tally`).
            stopped = !match (asked.branches, asked.coverage || asked.edges) {
                (true, _) => ordered.run_with::<BranchColumns>(
                    RowsTimer::<F::Clock>::new(timing),
                    caches,
                    e,
                    r,
                ),
                (false, true) => ordered.run_with::<Covered>(
                    TallyTimer::<F::Clock>::new(timing, dated),
                    caches,
                    e,
                    r,
                ),
                (false, false) => ordered.run_with::<Counted>(
                    TallyTimer::<F::Clock>::new(timing, dated),
                    caches,
                    e,
                    r,
                ),
            };
            // The part's pages go as soon as it is done: the decode releases them in steps
            // of RELEASE_STEP as it goes, which a small part never reaches (a recording
            // of thousands of small AUX areas kept every page it had read).
            part.bundle.release_trace();
            emitter.part_base += stream.len();
        }
        if !stopped {
            for g in [&mut emitter.branches, &mut emitter.timing]
                .into_iter()
                .flatten()
            {
                if let Err(e) = g.flush(&pool, &piece_tx) {
                    report.warnings.push(format!("{e:#}"));
                }
            }
        }
        drop(piece_tx);
        drop(emitter);
        writer.join().expect("writer thread does not panic")
    })?;
    let Closed {
        files,
        stale,
        written,
        blocks,
        edges,
    } = closed;
    if opts.require_rows && report.rows == 0 {
        // A run that decoded no branch publishes nothing: the directory keeps the tables
        // an earlier run wrote there (dropping the files removes their temporaries).
        drop(files);
        report.unpublished = !written.is_empty();
    } else {
        if !files.is_empty() {
            tracemill_sinks::publish_together(files, &stale)?;
        }
        report.written = written;
    }
    // Every PSB from the first on is read as a packet (after an error the reader resumes
    // at the next one), so the decode's own count is the trace's.
    report.psbs = report.events_by_kind.get("psb").copied().unwrap_or(0) as usize;
    report.blocks = blocks;
    report.edges = edges;
    report.elapsed = t0.elapsed();
    Ok(report)
}

/// The metadata every table of a decode of `src` carries.
pub fn source_meta(src: &Source) -> Result<FileMeta> {
    match &src.opened {
        Opened::Bundle(b) => Ok(file_meta(b)),
        Opened::Recording(r) => perf_meta(r),
    }
}

/// The metadata every table of a decode of the perf.data `rec` carries: the first AUX
/// area's, named after the file, with the threads' names.
pub fn perf_meta(rec: &tracemill_input::perf::Recording) -> Result<FileMeta> {
    let Some(first) = rec.traces.first() else {
        bail!("{}: no Intel PT trace to decode", rec.path.display());
    };
    let mut meta = file_meta(&first.bundle);
    meta.source = rec.path.display().to_string();
    meta.source_size = rec.file_size;
    meta.extra
        .push(("tracemill.perf_data".into(), "true".into()));
    // The threads' names, for the reports (one flame graph root and timeline track each).
    let threads: Vec<String> = rec
        .pids
        .iter()
        .map(|(tid, pid)| {
            let comm = rec.comms.get(tid).map_or("", String::as_str);
            format!("{pid}/{tid}={}", comm.replace([',', '='], "_"))
        })
        .collect();
    meta.extra.push((
        tracemill_reports::input::META_THREADS.into(),
        threads.join(","),
    ));
    Ok(meta)
}

/// The metadata every table of a decode of `bundle` carries (files, and the schemas of
/// the batches handed to a consumer).
pub fn file_meta(bundle: &Bundle) -> FileMeta {
    FileMeta {
        source: bundle.trace_path.display().to_string(),
        source_size: bundle.trace_file_size,
        rtit_ctl: bundle.manifest.rtit_ctl,
        // Labels, and the bundle and images for `tracemill report`.
        extra: meta::decode_meta(bundle),
    }
}

/// The decode's plan: chunks, and the report's opening facts.
struct Plan {
    chunks: Vec<Chunk>,
    /// What a body may hold ([`body_limit`]).
    body_limit: usize,
    report: Report,
}

/// Stage 1: cut the trace into chunks at PSBs, and note what is wrong with the inputs.
/// Fails only when nothing can be decoded (no PSB at all). Only the bytes from each cut
/// to the next PSB are searched (the readers find the PSBs inside a chunk as they go), so
/// planning neither reads the whole trace nor holds a list that grows with it.
fn plan<F: TraceFormat>(
    bundle: &Bundle,
    stream: &TraceStream<'_>,
    images: &ImageSet<'_>,
    image_problems: Vec<String>,
    opts: &Options,
) -> Result<Plan> {
    let mut report = Report {
        trace_bytes: stream.len(),
        jobs: opts.jobs.max(1),
        warnings: part_warnings(bundle, image_problems, !images.segments().is_empty()),
        ..Report::default()
    };
    let chunk_bytes = opts
        .chunk_bytes
        .unwrap_or_else(|| default_chunk_bytes(stream.len(), report.jobs));
    let mut released = 0;
    let chunks = plan_chunks_with::<F>(stream, chunk_bytes, |done| {
        if done >= released + RELEASE_STEP {
            bundle.release_trace_before(done);
            released = done;
        }
    });
    // The pages the search touched (the kernel maps pages around every fault) go too:
    // they stay in the page cache, and the decode maps what it reads again.
    bundle.release_trace();
    if chunks.is_empty() {
        return Err(crate::errors::NoPsb {
            path: bundle.trace_path.display().to_string(),
            bytes: stream.len(),
        }
        .into());
    }
    report.chunks = chunks.len();
    Ok(Plan {
        chunks,
        body_limit: body_limit(chunk_bytes),
        report,
    })
}

/// The closing summary, one screen.
pub fn summary(name: &str, r: &Report) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let secs = r.elapsed.as_secs_f64().max(1e-9);
    let mb = r.trace_bytes as f64 / (1 << 20) as f64;
    let _ = writeln!(s, "tracemill decode: {name}");
    let _ = writeln!(
        s,
        "  trace         {:.2} MiB, {} PSBs, {} chunks on {} threads",
        mb, r.psbs, r.chunks, r.jobs
    );
    let _ = writeln!(
        s,
        "  decoded       {} branches, {} instructions in {:.3} s ({:.1} MB/s of trace, {:.2} M branches/s)",
        group(r.rows),
        group(r.instructions),
        secs,
        r.trace_bytes as f64 / 1e6 / secs,
        r.rows as f64 / 1e6 / secs
    );
    let kinds: Vec<String> = BranchKind::ALL
        .iter()
        .filter(|k| r.by_kind[**k as usize] > 0)
        .map(|k| format!("{} {}", k.name(), group(r.by_kind[*k as usize])))
        .collect();
    if !kinds.is_empty() {
        let _ = writeln!(s, "  by kind       {}", kinds.join(", "));
    }
    let g = |k: &str| r.events_by_kind.get(k).copied().unwrap_or(0);
    let _ = writeln!(
        s,
        "  gaps          {} overflows, {} errors, {} resyncs, {} trace stops; {} disables/{} enables",
        group(g("overflow")),
        group(g("error")),
        group(g("resync")),
        group(g("trace_stop")),
        group(g("disable")),
        group(g("enable"))
    );
    if r.blocks == 0 && r.rows > 0 {
        // Counted only when asked for (`--tables` with coverage or edges).
        let _ = writeln!(
            s,
            "  coverage      not counted (no coverage or edges table asked for)"
        );
    } else {
        let _ = writeln!(
            s,
            "  coverage      {} basic blocks, {} edges executed (lost stretches excluded)",
            group(r.blocks),
            group(r.edges)
        );
    }
    for e in &r.first_errors {
        let _ = writeln!(s, "    error at offset {:#x}: {}", e.offset, e.detail);
    }
    if r.errors() > r.first_errors.len() as u64 {
        let _ = writeln!(
            s,
            "    ... {} more in the events table",
            r.errors() - r.first_errors.len() as u64
        );
    }
    for w in &r.warnings {
        let _ = writeln!(s, "  warning       {w}");
    }
    for w in &r.written {
        let _ = writeln!(
            s,
            "  wrote         {} ({} rows)",
            w.path.display(),
            group(w.rows)
        );
    }
    s
}

/// 1234567 -> "1,234,567": the one number format of the summary, the reports and HTML.
pub use tracemill_reports::util::group;
