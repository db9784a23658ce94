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

use std::collections::{BTreeMap, VecDeque};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use crossbeam_channel::bounded;
use tracemill_decode::block::BlockCache;
use tracemill_decode::chunk::{
    decode_body_bounded, plan_chunks_with, Body, Chunk, Input, Piece, Sequencer, Stitcher,
};
use tracemill_decode::coverage::Coverage;
use tracemill_decode::front::Format as TraceFormat;
use tracemill_decode::image::ImageSet;
use tracemill_decode::pt::clock::PtTiming;
use tracemill_decode::pt::cpu::Errata;
use tracemill_decode::rows::{BranchColumns, EventRow, TimingColumns};
use tracemill_decode::sniff::{self, TraceFormat as SniffedFormat};
use tracemill_decode::stream::TraceStream;
use tracemill_decode::timing::{Clock, Timed, Timeline};
use tracemill_decode::{Pt, Rtit};
use tracemill_schemas::{BranchKind, EventKind, TABLES};
use tracemill_sinks::{
    EncodedRowGroup, FileMeta, Format, RowGroupEncoder, TableWriter, WriterOptions, Written,
};

use crate::bundle::Bundle;
use crate::perf::threads::{LastTimed, Threads};

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
        self.rows += p.rows.len() as u64;
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

/// One trace of a decode: a bundle's, or one AUX area's of a perf.data with the threads
/// that ran there (its rows gain `cpu`, `pid`, `tid` and `time`).
pub struct Part<'b> {
    pub bundle: &'b Bundle,
    pub threads: Option<Arc<Threads>>,
    /// The sideband's address spaces (perf.data whose processes have other code at the
    /// same addresses): code is looked up in the space of the process at each place.
    pub spaces: Option<&'b crate::perf::spaces::TraceSpaces>,
}

/// Decode the traces of a perf.data ([`crate::perf::open`]) into one set of tables: every
/// AUX area's rows in turn (the rows of each CPU in order), numbered on by `seq`, with the
/// thread columns; coverage and edges over all of them. An area with nothing to decode
/// (no PSB) is a warning.
pub fn decode_perf(rec: &crate::perf::Recording, opts: &Options) -> Result<Report> {
    if opts.batches.is_some() {
        bail!("a perf.data is decoded to files (--out) or without output, not to a consumer");
    }
    let parts: Vec<Part<'_>> = rec
        .traces
        .iter()
        .map(|t| Part {
            bundle: &t.bundle,
            threads: Some(Arc::new(t.threads.clone())),
            spaces: t.spaces.as_ref(),
        })
        .collect();
    let Some(first) = parts.first() else {
        bail!("{}: no Intel PT trace to decode", rec.path.display());
    };
    let mut meta = file_meta(first.bundle);
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
    let mut opts = opts.clone();
    opts.writer.thread_columns = true;
    let mut report = decode_parts(&parts, &meta, &opts)?;
    let mut warnings = rec.warnings.clone();
    warnings.append(&mut report.warnings);
    report.warnings = warnings;
    Ok(report)
}

/// Decode `parts` in turn into one set of tables with the metadata `meta`. All parts have
/// one format (the first's decides) and the same images.
pub fn decode_parts(parts: &[Part<'_>], meta: &FileMeta, opts: &Options) -> Result<Report> {
    let Some(first) = parts.first() else {
        bail!("nothing to decode");
    };
    let format = first.bundle.manifest.format.decode_format();
    let mut warnings = Vec::new();
    for p in parts {
        // A trace of the other format would decode into garbage: refuse it by name.
        if let Some(msg) = sniff::mismatch(&p.bundle.stream(), format) {
            bail!("{}: {msg}", p.bundle.trace_path.display());
        }
    }
    let bundle = first.bundle;
    match format {
        SniffedFormat::Rtit => {
            let cfg = bundle.trace_config();
            if cfg.reserved_bits() != 0 {
                warnings.push(format!(
                    "rtit_ctl {:#x} sets reserved bits {:#x}; decoding as given",
                    cfg.ctl,
                    cfg.reserved_bits()
                ));
            }
            let configs = parts
                .iter()
                .map(|p| (p.bundle.trace_config(), p.bundle.timing_config()))
                .collect();
            decode_as::<Rtit>(parts, configs, meta, opts, warnings)
        }
        SniffedFormat::Pt => {
            let cfg = bundle.pt_config()?;
            if let Some(cpu) = cfg.cpu {
                if Errata::for_cpu(&cpu).is_err() {
                    warnings.push(format!(
                        "no Intel PT errata known for cpu {cpu}; decoding without workarounds"
                    ));
                }
            }
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
        match plan::<F>(part.bundle, &stream, &images, problems, Vec::new(), opts) {
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
    };
    // Coverage names images by the first part's set (every part has the same images).
    let cov_images = &prepared[0].1;
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
            // Chunks are decoded as pool tasks, at most `window` of them between being
            // handed out and being consumed in order: memory stays bounded whatever the
            // trace size, and no thread waits for a whole batch.
            let window = report.jobs * 2 + 2;
            let (slot_tx, slot_rx) = bounded::<()>(window);
            for _ in 0..window {
                slot_tx.send(()).expect("room for every slot");
            }
            let (body_tx, body_rx) =
                crossbeam_channel::unbounded::<(usize, Body<F, BranchColumns>)>();
            std::thread::scope(|ps| {
                let (input_ref, pool_ref, plan_ref, caches_ref) = (&input, &pool, &*plan, &caches);
                let producer = ps.spawn(move || {
                    produce(input_ref, pool_ref, plan_ref, caches_ref, slot_rx, body_tx)
                });
                let ordered = Ordered {
                    bundle: part.bundle,
                    input: &input,
                    plan,
                    pool: &pool,
                    tx: piece_tx.clone(),
                    progress: opts.progress,
                };
                stopped = !ordered.run(&mut emitter, body_rx, slot_tx, &mut report);
                producer.join().expect("decode threads do not panic");
            });
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

/// The metadata every table of a decode of `bundle` carries (files, and the schemas of
/// the batches handed to a consumer).
pub fn file_meta(bundle: &Bundle) -> FileMeta {
    FileMeta {
        source: bundle.trace_path.display().to_string(),
        source_size: bundle.trace_file_size,
        rtit_ctl: bundle.manifest.rtit_ctl,
        // Labels, and the bundle and images for `tracemill report`.
        extra: crate::report::decode_meta(bundle),
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
    format_warnings: Vec<String>,
    opts: &Options,
) -> Result<Plan> {
    let mut report = Report {
        trace_bytes: stream.len(),
        jobs: opts.jobs.max(1),
        warnings: bundle
            .path_warnings
            .iter()
            .chain(&bundle.trace_problems)
            .cloned()
            .chain(format_warnings)
            .chain(image_problems)
            .collect(),
        ..Report::default()
    };
    if images.segments().is_empty() {
        report
            .warnings
            .push("no code image loaded: no branch can be followed".to_string());
    }
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
    bundle.release_trace_before(stream.len());
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

/// Stage 2: decode chunk bodies as pool tasks, each once a window slot is free. The
/// producer waits for slots outside the pool, so no pool thread ever blocks on a channel:
/// the row-group encodings the consumer spawns on the same pool always find a thread
/// (with one job, blocking inside the pool would deadlock).
fn produce<F: TraceFormat>(
    input: &Input<'_, F>,
    pool: &rayon::ThreadPool,
    plan: &Plan,
    caches: &[Mutex<BlockCache>],
    slots: crossbeam_channel::Receiver<()>,
    bodies: crossbeam_channel::Sender<(usize, Body<F, BranchColumns>)>,
) {
    let cycle_acc = F::Clock::new(&input.timing).cycle_acc();
    let limit = plan.body_limit;
    pool.in_place_scope(|sc| {
        for (i, c) in plan.chunks.iter().enumerate() {
            if slots.recv().is_err() {
                return; // the consumer stopped (a write failed)
            }
            let tx = bodies.clone();
            sc.spawn(move |_| {
                let t = rayon::current_thread_index().unwrap_or(0);
                let mut cache = caches[t % caches.len()]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                let mut body = decode_body_bounded(input, &mut cache, *c, limit);
                drop(cache);
                // What the timeline reads of the piece, computed here rather than on
                // the ordered thread.
                tracemill_decode::timing::prepare(&mut body.out, cycle_acc);
                let _ = tx.send((i, body));
            });
        }
    })
}

/// Stage 3, on the calling thread: bodies in chunk order are stitched, timed, numbered,
/// counted, and sent on to the writer.
struct Ordered<'r, 'a, F: TraceFormat> {
    bundle: &'r Bundle,
    input: &'r Input<'a, F>,
    plan: &'r Plan,
    pool: &'r rayon::ThreadPool,
    tx: crossbeam_channel::Sender<ToWriter>,
    progress: bool,
}

impl<F: TraceFormat> Ordered<'_, '_, F> {
    /// Emit a timed piece; a failure (the writer stopped) becomes a warning and sets
    /// `failed`.
    fn emit(
        &self,
        out: &mut Emitter,
        p: Piece<BranchColumns>,
        t: TimingColumns,
        report: &mut Report,
        failed: &mut bool,
    ) {
        if let Err(e) = out.emit(p, t, report, self.pool, &self.tx) {
            *failed = true;
            report.warnings.push(format!("{e:#}"));
        }
    }

    /// Whether every body was emitted (not stopped by a writer's failure).
    fn run(
        self,
        out: &mut Emitter,
        bodies: crossbeam_channel::Receiver<(usize, Body<F, BranchColumns>)>,
        slots: crossbeam_channel::Sender<()>,
        report: &mut Report,
    ) -> bool {
        let chunks = &self.plan.chunks;
        let bar = (self.progress && std::io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new(self.input.stream.len());
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} decoding [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            b
        });
        let mut timeline = Timeline::<F::Clock>::new(&self.input.timing);
        let mut filling = Filling::default();
        let mut stitcher = Stitcher::new(self.input).with_piece_limit(PIECE_LIMIT);
        let first_psb = self.plan.chunks[0].start;
        let mut junk = (first_psb > 0).then(|| EventRow {
            seq: 0,
            offset: 0,
            kind: EventKind::Resync,
            ip: None,
            tsc: None,
            detail: format!(
                "skipped {first_psb} bytes before the first PSB (packet boundaries are unknown there)"
            ),
        });
        let mut send_err = false;
        let mut ready = BTreeMap::new();
        let mut next = 0;
        // Trace pages before this offset have been released.
        let mut released = 0u64;
        'bodies: for (i, b) in bodies.iter() {
            ready.insert(i, b);
            // Pieces filled since the last body go on now, not after the next stitch.
            filling.ready(false, |p, t| self.emit(out, p, t, report, &mut send_err));
            while let Some(b) = ready.remove(&next) {
                next += 1;
                let done = b.chunk.end - b.chunk.start;
                stitcher.push(b, |mut p| {
                    if let Some(j) = junk.take() {
                        p.events.insert(0, j);
                        p.prepared = None;
                    }
                    // A chunk walked here in pieces (a stretch without PSBs) may be the
                    // whole trace: let the pages behind the walk go as it goes. (A page
                    // read again, by a look-ahead undone, is only mapped in again.)
                    if let Some(&o) = p.rows.offset.last() {
                        let behind = o.saturating_sub(RELEASE_STEP);
                        if behind >= released + RELEASE_STEP {
                            self.bundle.release_trace_before(behind);
                            released = behind;
                        }
                    }
                    for t in timeline.push_timed(p) {
                        filling.start(t, self.pool);
                    }
                    filling.ready(false, |p, t| self.emit(out, p, t, report, &mut send_err));
                });
                if let Some(b) = &bar {
                    b.inc(done);
                }
                // The next stitch starts inside the chunk just done; bodies read later
                // chunks only. So the bytes before that chunk are finished with.
                let finished = chunks[next - 1].start;
                if finished >= released + RELEASE_STEP {
                    self.bundle.release_trace_before(finished);
                    released = finished;
                }
                if send_err {
                    break 'bodies;
                }
                let _ = slots.send(());
            }
            if next == chunks.len() {
                break;
            }
        }
        drop(slots);
        drop(bodies);
        if !send_err {
            for t in timeline.finish_timed() {
                filling.start(t, self.pool);
            }
            filling.ready(true, |p, t| {
                if !send_err {
                    self.emit(out, p, t, report, &mut send_err);
                }
            });
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        report.fallbacks += stitcher.fallbacks;
        !send_err
    }
}

/// Pieces whose rows' `cycles` and `tsc` are being written on the pool
/// ([`Timed::done`]): the timeline only decides them (a range of rows at a time), so that
/// the thread every piece goes through does a few words of work per range, not a
/// division per row. They come back to be emitted in trace order.
#[derive(Default)]
struct Filling {
    queue: VecDeque<Out>,
}

/// One piece out: its job (taken by whichever comes first, the pool task or the ordered
/// thread) and the pool task's result.
type Out = (
    Arc<Mutex<Option<Timed>>>,
    crossbeam_channel::Receiver<(Piece<BranchColumns>, TimingColumns)>,
);

impl Filling {
    /// Pieces out at once. Past it the ordered thread takes the oldest back and fills it
    /// itself, unless a pool thread already is (then it waits for that): the pool's
    /// queue is first in, first out, so a task spawned behind a window of chunks to
    /// decode may not start for a while, and each piece out is rows in memory (with four
    /// out and waiting, `decode -j2 --out` of the 1 GiB synthetic trace peaked at 613 MiB
    /// RssAnon against 556 MiB before the fills moved to the pool).
    const IN_FLIGHT: usize = 2;

    fn start(&mut self, t: Timed, pool: &rayon::ThreadPool) {
        let (tx, rx) = bounded(1);
        let job = Arc::new(Mutex::new(Some(t)));
        let mine = Arc::clone(&job);
        pool.spawn(move || {
            let t = mine.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(t) = t {
                let _ = tx.send(t.done());
            }
        });
        self.queue.push_back((job, rx));
    }

    /// Hand the pieces that are back, in order, to `emit`: those ready at the front, and
    /// more while too many are out (`all`: every one).
    fn ready(&mut self, all: bool, mut emit: impl FnMut(Piece<BranchColumns>, TimingColumns)) {
        while let Some((job, rx)) = self.queue.front() {
            let piece = match rx.try_recv() {
                Ok(p) => Some(p),
                Err(crossbeam_channel::TryRecvError::Empty) => {
                    if !all && self.queue.len() <= Self::IN_FLIGHT {
                        break;
                    }
                    let t = job.lock().unwrap_or_else(|e| e.into_inner()).take();
                    match t {
                        Some(t) => Some(t.done()),
                        // A pool thread is filling it. (A closed channel would mean a
                        // task that never ran: a panic aborts the process first.)
                        None => rx.recv().ok(),
                    }
                }
                Err(crossbeam_channel::TryRecvError::Disconnected) => None,
            };
            self.queue.pop_front();
            if let Some((p, t)) = piece {
                emit(p, t);
            }
        }
    }
}

/// What the writer thread receives, in order (a few at a time: the size of a piece's
/// header does not matter).
#[allow(clippy::large_enum_variant)]
enum ToWriter {
    /// A piece's events, timing rows and coverage (and its branch rows, unless row groups
    /// are encoded on the pool).
    Piece(Piece<BranchColumns>, TimingColumns, Option<Dated>),
    /// A row group of `branches` or `timing` being encoded on the pool.
    RowGroup(
        Grouped,
        crossbeam_channel::Receiver<Result<EncodedRowGroup, tracemill_sinks::Error>>,
    ),
}

/// The tables whose row groups are encoded on the pool.
#[derive(Clone, Copy, Debug)]
enum Grouped {
    Branches,
    Timing,
}

/// The consumer's end of the pipeline: numbers timed pieces, counts them, and hands them
/// to the writer thread, with their rows as row groups encoded on the pool.
struct Emitter {
    seq: Sequencer,
    /// The consumer of the rows, instead of the writers.
    batches: Option<crate::stream::BatchSink>,
    branches: Option<RowGroups>,
    timing: Option<RowGroups>,
    /// The part's threads (perf.data): rows gain the thread columns.
    threads: Option<Arc<Threads>>,
    /// Where the part's trace is in time, for the thread lookup.
    dated: LastTimed,
}

impl Emitter {
    fn emit(
        &mut self,
        mut p: Piece<BranchColumns>,
        mut t: TimingColumns,
        report: &mut Report,
        pool: &rayon::ThreadPool,
        tx: &crossbeam_channel::Sender<ToWriter>,
    ) -> Result<()> {
        let base = self.seq.rows();
        self.seq.sequence(&mut p);
        report.count(&p);
        // An event's time is the TSC of the last timing packet before it (perf's rule for
        // the samples it makes of the trace), and on perf.data, each row's and event's
        // thread is the one running then.
        // (No pass over the piece's timing packets without events or threads to date:
        // this runs on the ordered thread.)
        let tsc = |i: usize| t.tsc.get(i);
        let event_places: Vec<u64> = p.events.iter().map(|e| e.offset).collect();
        let events = self.dated.dates(&event_places, &t.offset, tsc);
        for (e, d) in p.events.iter_mut().zip(&events) {
            e.tsc = *d;
        }
        let dates = self.threads.clone().map(|threads| Dated {
            threads,
            rows: self.dated.dates(&p.rows.offset, &t.offset, tsc),
            events,
            timing: (0..t.len()).map(tsc).collect(),
        });
        self.dated.advance(t.len(), tsc);
        if let Some(b) = &self.batches {
            b.send_piece(&mut p, &mut t, base)?;
        }
        if let Some(g) = &mut self.branches {
            let rows = std::mem::take(&mut p.rows);
            if !rows.is_empty() {
                let b = tracemill_sinks::convert::branches(rows, base)?;
                g.add(with_threads(b, dates.as_ref(), Dated::rows)?, pool, tx)?;
            }
        }
        if let Some(g) = &mut self.timing {
            let rows = std::mem::take(&mut t);
            if !rows.is_empty() {
                let b = tracemill_sinks::convert::timing(rows)?;
                g.add(with_threads(b, dates.as_ref(), Dated::timing)?, pool, tx)?;
            }
        }
        tx.send(ToWriter::Piece(p, t, dates))
            .map_err(|_| anyhow::anyhow!("the writer stopped"))
    }
}

/// A perf.data piece's threads, and the time each of its rows, events and timing rows is
/// looked up at.
struct Dated {
    threads: Arc<Threads>,
    rows: Vec<Option<u64>>,
    events: Vec<Option<u64>>,
    timing: Vec<Option<u64>>,
}

impl Dated {
    fn rows(&self) -> &[Option<u64>] {
        &self.rows
    }
    fn events(&self) -> &[Option<u64>] {
        &self.events
    }
    fn timing(&self) -> &[Option<u64>] {
        &self.timing
    }
}

/// `batch` with the thread columns appended, its rows dated by `which` (as it is without).
fn with_threads(
    batch: arrow_array::RecordBatch,
    dated: Option<&Dated>,
    which: fn(&Dated) -> &[Option<u64>],
) -> Result<arrow_array::RecordBatch> {
    Ok(match dated {
        Some(d) => d.threads.extend(&batch, which(d))?,
        None => batch,
    })
}

/// Gathers a table's rows into row groups of about `target` rows and encodes each on the
/// pool.
struct RowGroups {
    table: Grouped,
    enc: RowGroupEncoder,
    batches: Vec<arrow_array::RecordBatch>,
    rows: usize,
    next: usize,
    target: usize,
    /// One token per row group in flight (shared by the tables; the writer hands it back).
    tokens: crossbeam_channel::Sender<()>,
}

impl RowGroups {
    fn new(
        table: Grouped,
        enc: RowGroupEncoder,
        target: usize,
        tokens: crossbeam_channel::Sender<()>,
    ) -> Self {
        RowGroups {
            table,
            enc,
            batches: Vec::new(),
            rows: 0,
            next: 0,
            target,
            tokens,
        }
    }

    /// Add rows; every `target` rows make a row group. Row groups are cut at exactly
    /// `target` rows (a batch is split where one fills), not at a piece's end: pieces
    /// follow the chunking, so cutting there made `-j1` and `-j2` write different row
    /// groups of the same rows. Cut by count, the files are the same bytes for any thread
    /// count and chunk size.
    fn add(
        &mut self,
        mut batch: arrow_array::RecordBatch,
        pool: &rayon::ThreadPool,
        tx: &crossbeam_channel::Sender<ToWriter>,
    ) -> Result<()> {
        loop {
            let room = self.target - self.rows;
            let n = batch.num_rows();
            if n < room {
                if n > 0 {
                    self.rows += n;
                    self.batches.push(batch);
                }
                return Ok(());
            }
            // Slices share the batch's buffers: no copy.
            self.batches.push(batch.slice(0, room));
            self.rows += room;
            self.flush(pool, tx)?;
            batch = batch.slice(room, n - room);
        }
    }

    fn flush(
        &mut self,
        pool: &rayon::ThreadPool,
        tx: &crossbeam_channel::Sender<ToWriter>,
    ) -> Result<()> {
        if self.batches.is_empty() {
            return Ok(());
        }
        // Wait for a row group in flight to be written (bounded memory).
        self.tokens
            .send(())
            .map_err(|_| anyhow::anyhow!("the writer stopped"))?;
        let batches = std::mem::take(&mut self.batches);
        self.rows = 0;
        let (rtx, rrx) = bounded(1);
        let enc = self.enc.clone();
        let index = self.next;
        self.next += 1;
        pool.spawn(move || {
            let _ = rtx.send(enc.encode(index, &batches));
        });
        tx.send(ToWriter::RowGroup(self.table, rrx))
            .map_err(|_| anyhow::anyhow!("the writer stopped"))
    }
}

/// The open table writers.
struct Writers {
    branches: Option<TableWriter>,
    events: Option<TableWriter>,
    timing: Option<TableWriter>,
    coverage: Option<TableWriter>,
    edges: Option<TableWriter>,
    /// Blocks and edges so far (written at the end: they are aggregates).
    cov: Coverage,
    /// Encode `branches` and `timing` row groups elsewhere (Parquet).
    branch_encoder: Option<RowGroupEncoder>,
    timing_encoder: Option<RowGroupEncoder>,
    /// The output directory (empty without `--out`).
    dir: PathBuf,
    /// The consumer of `coverage` and `edges`, instead of files.
    batches: Option<crate::stream::BatchSink>,
}

impl Writers {
    fn create(opts: &Options, meta: &FileMeta) -> Result<Writers> {
        let Some(dir) = &opts.out else {
            return Ok(Writers {
                branches: None,
                events: None,
                timing: None,
                coverage: None,
                edges: None,
                cov: Coverage::default(),
                branch_encoder: None,
                timing_encoder: None,
                dir: PathBuf::new(),
                batches: opts.batches.clone(),
            });
        };
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create the output directory", dir.display()))?;
        let open = |on: bool, table: &str| -> Result<Option<TableWriter>> {
            if !on {
                return Ok(None);
            }
            let mut wo = opts.writer.clone();
            wo.format = opts.format;
            Ok(Some(TableWriter::create_in(dir, table, meta, &wo)?))
        };
        let mut branches = open(opts.tables.branches, "branches")?;
        let mut timing = open(opts.tables.timing, "timing")?;
        let encoder = |w: &mut Option<TableWriter>| -> Result<Option<RowGroupEncoder>> {
            Ok(match (w, opts.format) {
                (Some(w), Format::Parquet) => Some(w.row_group_encoder()?),
                _ => None,
            })
        };
        let branch_encoder = encoder(&mut branches)?;
        let timing_encoder = encoder(&mut timing)?;
        Ok(Writers {
            branches,
            events: open(opts.tables.events, "events")?,
            timing,
            coverage: open(opts.tables.coverage, "coverage")?,
            edges: open(opts.tables.edges, "edges")?,
            cov: Coverage::default(),
            branch_encoder,
            timing_encoder,
            dir: dir.clone(),
            batches: None,
        })
    }

    fn append_row_group(&mut self, table: Grouped, rg: EncodedRowGroup) -> Result<()> {
        let w = match table {
            Grouped::Branches => &mut self.branches,
            Grouped::Timing => &mut self.timing,
        };
        if let Some(w) = w {
            w.append_encoded(rg)?;
        }
        Ok(())
    }

    fn write(
        &mut self,
        mut p: Piece<BranchColumns>,
        timing: TimingColumns,
        dated: Option<&Dated>,
    ) -> Result<()> {
        use tracemill_sinks::convert;
        self.cov.merge(std::mem::take(&mut p.coverage));
        if let Some(w) = &mut self.events {
            if !p.events.is_empty() {
                match dated {
                    None => w.write_events(&p.events)?,
                    Some(_) => {
                        let b = convert::events(&p.events)?;
                        w.write(&with_threads(b, dated, Dated::events)?)?
                    }
                }
            }
        }
        if let Some(w) = &mut self.timing {
            if !timing.is_empty() {
                match dated {
                    None => w.write_timing(timing)?,
                    Some(_) => {
                        let b = convert::timing(timing)?;
                        w.write(&with_threads(b, dated, Dated::timing)?)?
                    }
                }
            }
        }
        if let Some(w) = &mut self.branches {
            if !p.rows.is_empty() {
                match dated {
                    None => w.write_branches(p.rows)?,
                    Some(_) => {
                        // Numbered on from the rows written, as write_branches does.
                        let first = w.rows_written();
                        let b = convert::branches(p.rows, first)?;
                        w.write(&with_threads(b, dated, Dated::rows)?)?
                    }
                }
            }
        }
        Ok(())
    }

    /// Write the aggregates and close every table: what was written, and the numbers of
    /// distinct blocks and edges.
    ///
    /// The tables of a run appear together or not at all: each is finished and synced
    /// under its temporary name first (a full disk fails here, and every temporary is
    /// removed), then the tables an earlier decode left in the directory that this run
    /// does not replace are removed, and the new ones renamed into place.
    /// (With a consumer instead, `coverage` and `edges` go to it; `trace_len` is where
    /// decoding ended.)
    fn finish(mut self, images: &ImageSet<'_>, trace_len: u64) -> Result<Closed> {
        let (blocks, edges) = (self.cov.blocks.len() as u64, self.cov.edges.len() as u64);
        if let Some(b) = &self.batches {
            b.send_coverage(&self.cov, images, trace_len)?;
        }
        if let Some(w) = &mut self.coverage {
            w.write_coverage(&self.cov.block_rows(images))?;
        }
        if let Some(w) = &mut self.edges {
            w.write_edges(&self.cov.edge_rows())?;
        }
        let mut files = Vec::new();
        let mut out = Vec::new();
        for w in [
            self.branches,
            self.events,
            self.timing,
            self.coverage,
            self.edges,
        ]
        .into_iter()
        .flatten()
        {
            let (file, written) = w.finish_unpublished()?;
            files.push(file);
            out.push(written);
        }
        let stale: Vec<PathBuf> = TABLES
            .iter()
            .flat_map(|t| {
                [Format::Parquet, Format::ArrowIpc].map(|f| self.dir.join(f.file_name(t)))
            })
            .filter(|p| !files.is_empty() && !out.iter().any(|w| &w.path == p) && p.exists())
            .collect();
        Ok(Closed {
            files,
            stale,
            written: out,
            blocks,
            edges,
        })
    }
}

/// A run's tables, finished and synced under their temporary names, not yet published
/// (dropped, they are removed).
struct Closed {
    files: Vec<tracemill_sinks::Unpublished>,
    /// Tables an earlier decode left that this run does not replace.
    stale: Vec<PathBuf>,
    written: Vec<Written>,
    blocks: u64,
    edges: u64,
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
    let _ = writeln!(
        s,
        "  coverage      {} basic blocks, {} edges executed (lost stretches excluded)",
        group(r.blocks),
        group(r.edges)
    );
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
