//! `tracemill ingest`: many bundles into one partitioned dataset, exactly once.
//!
//! ```text
//!  discover ──► identify (hash) ──► shard, skip committed ──► decode side by side ──► publish ──► commit
//!  SOURCEs      bundle ids          catalog lookups            run::decode into         tables      catalog row
//!                                                              DEST/_staging/<id>/      renamed     written last
//! ```
//!
//! Layout (`DEST` a directory or `s3://bucket/prefix`):
//!
//! ```text
//! DEST/_tracemill.json                                 partition keys, checked by every run
//! DEST/<table>/<key>=<value>/.../<bundle-id>.parquet   branches, events, timing, coverage, edges
//! DEST/bundles/<bundle-id>.parquet                      the catalog: one row per bundle
//! DEST/_staging/<bundle-id>/                            work in progress (local DEST only)
//! DEST/_staging/<bundle-id>.lock                        the claim of the run working on it
//! DEST/_claims/<bundle-id>.json                         (S3) the claim, across machines
//! ```
//!
//! The commit protocol of one bundle: claim it (`claim.rs`: one run at a time per bundle,
//! a dead run's claim taken over), check under the claim that no other run committed it
//! meanwhile, then decode into its staging directory (each table written under a
//! temporary name and renamed by [`tracemill_sinks`]); remove whatever an earlier attempt
//! left there first. Publish each table at its final path (a rename on a
//! file system, a PUT or completed multipart upload on S3, both atomic; the same bytes
//! go to the same path whatever attempt writes them). Then publish the catalog row, last:
//! the catalog is the record of what is in the dataset. A crash before it leaves files a
//! re-run replaces; a crash after it leaves at most the staging directory, removed when
//! the bundle's shard next sees it. Releasing the claim removes the staging directory.
//! Bundles are split between shards by id, and two runs given the same bundles (a retry,
//! a run started twice) meet at the claim, so no two processes write the same bundle's
//! files at once, and no run removes another's.

#[cfg(feature = "cli")]
mod args;
mod catalog;
mod claim;
mod dest;
mod discover;
mod layout;
#[cfg(feature = "s3")]
mod s3;
mod shard;

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tracemill_schemas::TABLES;

use crate::errors::error_text;

#[cfg(feature = "cli")]
pub use args::{main, IngestArgs};
pub use catalog::{Row, Status};
pub use dest::Dest;
pub use discover::{discover, identify, Identity};
pub use layout::{parse_partition_keys, partition_dir, table_file, NULL_PARTITION};
pub use shard::Shard;

use tracemill_input::bundle::Reach;
use tracemill_input::manifest::TraceFormat;
use tracemill_input::perf::Lookup;
use tracemill_input::source::{Given, Opened, Overrides, PtOverrides};
use tracemill_input::Source;

use crate::run::{self, Tables};

/// What a user asks of `ingest`, typed: the command line (`IngestArgs`, read by clap) and
/// Python's `tracemill.ingest` fill it; [`plan`] checks it and resolves what it names.
#[derive(Clone, Debug)]
pub struct IngestOptions {
    /// A local directory, or s3://bucket/prefix.
    pub dataset: String,
    /// Bundle labels to partition the tables by.
    pub partition_by: Vec<String>,
    /// Partition keys no bundle has are accepted.
    pub allow_missing_keys: bool,
    /// Worker threads (1 ..= `cli::MAX_JOBS`).
    pub jobs: usize,
    /// Shard `I/N` of the bundles; from the scheduler's environment when not given.
    pub shard: Option<String>,
    /// The number of shards, for a Kubernetes Indexed Job.
    pub shards: Option<u64>,
    /// Bundles whose catalog row says `failed` are decoded again.
    pub retry_failed: bool,
    /// Where an S3 dataset's tables are decoded before they are uploaded.
    pub staging: Option<PathBuf>,
    pub zstd_level: i32,
    pub codec: tracemill_sinks::Codec,
    /// A progress bar on a terminal.
    pub progress: bool,
    /// Bundles and recordings may name files outside their directory.
    pub allow_outside_paths: bool,
    /// The trace format every source must have (a bundle's or a perf.data's is checked
    /// against it, and a source of the other format fails).
    pub format: Option<TraceFormat>,
    /// Intel PT facts over each bundle's `[pt]`.
    pub pt: PtOverrides,
    /// perf.data binaries: symfs, build-id cache, kernel images (the user's: read wherever
    /// they are; the recordings' own are confined as `allow_outside_paths` says).
    pub lookup: Lookup,
}

/// Traces of at least this many bytes decode alone, on all threads.
pub const LARGE_BUNDLE: u64 = 8 << 20;

/// Exit status: some bundles failed, the rest are committed.
pub const EXIT_SOME_FAILED: u8 = 3;

/// What happened to one bundle of this shard.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Decoded (or failed) and committed now.
    Committed(Row),
    /// Committed by an earlier run, with this status.
    Skipped(Status),
    /// Its catalog row could not be written: the bundle is not in the dataset.
    NotCommitted(String),
}

/// The result of a run.
#[derive(Debug, Default)]
pub struct Summary {
    pub found: usize,
    /// Same bytes as a bundle found before (same id): ingested once.
    pub duplicates: Vec<(PathBuf, PathBuf)>,
    pub shard: Option<Shard>,
    pub outcomes: Vec<(PathBuf, String, Outcome)>,
    pub elapsed: Duration,
    pub jobs: usize,
}

impl Summary {
    pub fn exit_code(&self) -> u8 {
        let mut code = 0;
        let (mut committed, mut lost) = (false, false);
        for (_, _, o) in &self.outcomes {
            match o {
                Outcome::NotCommitted(_) => lost = true,
                Outcome::Committed(r) => {
                    committed = true;
                    if r.status == Status::Failed {
                        code = EXIT_SOME_FAILED;
                    }
                }
                Outcome::Skipped(s) => {
                    committed = true;
                    if *s == Status::Failed {
                        code = EXIT_SOME_FAILED;
                    }
                }
            }
        }
        // A bundle that could not be committed is a failure of that bundle: the run says
        // "nothing could be done" only when no bundle is in the dataset at all.
        match (lost, committed) {
            (true, false) => 1,
            (true, true) => EXIT_SOME_FAILED,
            _ => code,
        }
    }

    /// The closing report.
    pub fn text(&self, dest: &str) -> String {
        let (mut ok, mut failed, mut skipped_ok, mut skipped_failed, mut lost) = (0, 0, 0, 0, 0);
        let (mut bytes, mut branches) = (0u64, 0u64);
        let mut lines = String::new();
        for (path, _, o) in &self.outcomes {
            match o {
                Outcome::Committed(r) => {
                    bytes += r.trace_bytes.unwrap_or(0);
                    branches += r.branches.unwrap_or(0);
                    if r.status == Status::Ok {
                        ok += 1;
                    } else {
                        failed += 1;
                        lines.push_str(&format!(
                            "  failed  {}: {}\n",
                            path.display(),
                            r.error.as_deref().unwrap_or("")
                        ));
                    }
                }
                Outcome::Skipped(Status::Ok) => skipped_ok += 1,
                Outcome::Skipped(Status::Failed) => {
                    skipped_failed += 1;
                    lines.push_str(&format!(
                        "  failed earlier, not retried  {}\n",
                        path.display()
                    ));
                }
                Outcome::NotCommitted(e) => {
                    lost += 1;
                    lines.push_str(&format!("  NOT COMMITTED  {}: {e}\n", path.display()));
                }
            }
        }
        for (dup, first) in &self.duplicates {
            lines.push_str(&format!(
                "  duplicate  {} has the bytes of {}: ingested once\n",
                dup.display(),
                first.display()
            ));
        }
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        let shard = match self.shard {
            Some(s) if s.count > 1 => format!(", {} in shard {s}", self.outcomes.len()),
            _ => String::new(),
        };
        let mut s = format!(
            "ingest into {dest}: {} bundle{} found{shard}\n  {} ok, {} failed now; {} already committed ({} ok, {} failed{})\n",
            self.found,
            if self.found == 1 { "" } else { "s" },
            ok,
            failed,
            skipped_ok + skipped_failed,
            skipped_ok,
            skipped_failed,
            if skipped_failed > 0 { "; --retry-failed tries them again" } else { "" },
        );
        if lost > 0 {
            s.push_str(&format!(
                "  {lost} not committed (the catalog could not be written): run again\n"
            ));
        }
        s.push_str(&format!(
            "  {:.1} MB of trace, {} branches in {:.1} s on {} job{}: {:.1} MB/s, {:.1} bundles/s\n",
            bytes as f64 / 1e6,
            run::group(branches),
            secs,
            self.jobs,
            if self.jobs == 1 { "" } else { "s" },
            bytes as f64 / 1e6 / secs,
            (ok + failed) as f64 / secs
        ));
        s.push_str(&lines);
        s
    }
}

/// What a run needs besides the bundles: its [`IngestOptions`] checked and resolved.
pub struct Plan {
    pub dest: Dest,
    pub partition_by: Vec<String>,
    /// Partition keys no bundle has are accepted (else an error before anything is written).
    pub allow_missing_keys: bool,
    pub jobs: usize,
    pub shard: Shard,
    pub retry_failed: bool,
    pub codec: tracemill_sinks::Codec,
    pub zstd_level: i32,
    pub progress: bool,
    /// Bundles may name files outside their directory (`--allow-outside-paths`).
    pub allow_outside_paths: bool,
    /// perf.data binaries: `--symfs`, `--buildid-dir`, `--vmlinux`, `--kcore` (the user's:
    /// read wherever they are; the recordings' own are confined as `reach` says).
    pub lookup: Lookup,
    /// The trace format every source must have.
    pub format: Option<TraceFormat>,
    /// Intel PT facts over each bundle's `[pt]`.
    pub pt: PtOverrides,
}

impl Plan {
    /// How far the files a bundle or a recording names may be read from.
    fn reach(&self) -> Reach {
        if self.allow_outside_paths {
            Reach::Anywhere
        } else {
            Reach::InsideOnly
        }
    }
}

/// The run's plan from its options, checked before anything is read (a bad value fails
/// here, with the reason).
pub fn plan(a: &IngestOptions) -> Result<Plan> {
    let partition_by = parse_partition_keys(&a.partition_by.join(","))?;
    let shard = Shard::from_args_and_env(a.shard.as_deref(), a.shards, |k| std::env::var(k).ok())?;
    tracemill_sinks::parquet::writer_properties(
        "branches",
        Vec::new(),
        &tracemill_sinks::WriterOptions {
            zstd_level: a.zstd_level,
            ..Default::default()
        },
    )
    .with_context(|| format!("--zstd-level {}", a.zstd_level))?;
    if !a.dataset.contains("://") && Path::new(&a.dataset).is_file() {
        bail!(
            "--dataset {}: is a file, not a directory (the dataset is a directory, created \
             when missing, or s3://bucket/prefix)",
            a.dataset
        );
    }
    let dest = Dest::new(&a.dataset, a.staging.clone())?;
    let opts = Plan {
        dest,
        partition_by,
        allow_missing_keys: a.allow_missing_keys,
        jobs: a.jobs,
        shard,
        retry_failed: a.retry_failed,
        codec: a.codec,
        zstd_level: a.zstd_level,
        progress: a.progress,
        allow_outside_paths: a.allow_outside_paths,
        lookup: a.lookup.clone(),
        format: a.format,
        pt: a.pt.clone(),
    };
    Ok(opts)
}

/// Ingest the bundles of `sources` into `opts.dest`.
pub fn ingest(sources: &[PathBuf], opts: &Plan) -> Result<Summary> {
    let t0 = Instant::now();
    if let Some(root) = opts.dest.local_root() {
        discover::check_not_inside(sources, root)?;
    }
    let found = discover(sources, opts.dest.local_root())?;
    if found.is_empty() {
        bail!(
            "no bundle found in {} (a bundle is a directory with a bundle.toml)",
            sources
                .iter()
                .map(|s| s.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    // Identify every bundle (its id decides its shard), on all threads; their labels are
    // checked against the partition keys before the dataset is made and locked to them.
    let idents = parallel_map(&found, opts.jobs, |p| identify(p, opts.reach()));
    if !opts.allow_missing_keys {
        check_partition_keys(&opts.partition_by, &idents)?;
    }
    opts.dest
        .init(&opts.partition_by)
        .with_context(|| format!("dataset {} cannot be written", opts.dest.display()))?;
    let mut seen: HashMap<String, PathBuf> = HashMap::new();
    let mut summary = Summary {
        found: found.len(),
        shard: Some(opts.shard),
        jobs: opts.jobs,
        ..Summary::default()
    };
    let mut mine = Vec::new();
    for (path, ident) in found.into_iter().zip(idents) {
        if let Some(first) = seen.get(&ident.id) {
            summary.duplicates.push((path, first.clone()));
            continue;
        }
        seen.insert(ident.id.clone(), path.clone());
        if opts.shard.takes(&ident.id) {
            mine.push((path, ident));
        }
    }

    // What is committed already.
    let statuses = parallel_map(&mine, opts.jobs.max(4), |(_, ident)| {
        opts.dest.status(&ident.id)
    });
    let mut todo = Vec::new();
    for ((path, ident), status) in mine.into_iter().zip(statuses) {
        let status =
            status.with_context(|| format!("reading the catalog of {}", opts.dest.display()))?;
        match status {
            Some(Status::Ok) => {
                tidy_staging(opts, &ident.id);
                summary
                    .outcomes
                    .push((path, ident.id, Outcome::Skipped(Status::Ok)));
            }
            Some(Status::Failed) if !opts.retry_failed => {
                tidy_staging(opts, &ident.id);
                summary
                    .outcomes
                    .push((path, ident.id, Outcome::Skipped(Status::Failed)));
            }
            _ => todo.push((path, ident)),
        }
    }
    // Largest first: the big ones' threads are busy early, the small ones fill in.
    todo.sort_by_key(|(_, i)| std::cmp::Reverse(i.trace_bytes.unwrap_or(0)));

    let total: u64 = todo.iter().map(|(_, i)| i.trace_bytes.unwrap_or(0)).sum();
    let bar = progress_bar(opts.progress, total, todo.len());
    let done = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let lane = RwLock::new(());
    let finish = |ident: &Identity, outcome: Outcome| {
        if !matches!(&outcome, Outcome::Committed(r) if r.status == Status::Ok)
            && !matches!(outcome, Outcome::Skipped(Status::Ok))
        {
            failed.fetch_add(1, Ordering::Relaxed);
        }
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        bar.inc(ident.trace_bytes.unwrap_or(0));
        bar.set_message(format!(
            "{n}/{} bundles, {} failed",
            todo.len(),
            failed.load(Ordering::Relaxed)
        ));
        outcome
    };
    // Bundles another run holds are left for last (`None`): by then it has usually
    // committed them.
    let mut outcomes = parallel_map(&todo, opts.jobs, |(path, ident)| {
        match claim::try_claim(&opts.dest, &ident.id) {
            Err(e) => Some(finish(ident, Outcome::NotCommitted(error_text(&e)))),
            Ok(claim::Taken::Busy(who)) => {
                bar.set_message(format!(
                    "bundle {} is being ingested by {who}: later",
                    ident.id
                ));
                None
            }
            Ok(claim::Taken::Mine(c)) => Some(finish(ident, claimed(opts, path, ident, c, &lane))),
        }
    });
    let later: Vec<usize> = (0..todo.len()).filter(|&i| outcomes[i].is_none()).collect();
    let waited = parallel_map(&later, opts.jobs, |&i| {
        let (path, ident) = &todo[i];
        let outcome = match claim::claim_waiting(&opts.dest, &ident.id) {
            Err(e) => Outcome::NotCommitted(error_text(&e)),
            Ok(c) => claimed(opts, path, ident, c, &lane),
        };
        finish(ident, outcome)
    });
    for (i, o) in later.into_iter().zip(waited) {
        outcomes[i] = Some(o);
    }
    bar.finish_and_clear();
    for ((path, ident), o) in todo.into_iter().zip(outcomes) {
        summary
            .outcomes
            .push((path, ident.id, o.expect("every bundle was done")));
    }
    summary.elapsed = t0.elapsed();
    Ok(summary)
}

/// One bundle under its claim: skipped if another run committed it meanwhile, otherwise
/// decoded and committed (alone on all threads when large, side by side when small).
fn claimed(
    opts: &Plan,
    path: &Path,
    ident: &Identity,
    claim: claim::Claim,
    lane: &RwLock<()>,
) -> Outcome {
    match opts.dest.status(&ident.id) {
        Err(e) => return Outcome::NotCommitted(error_text(&e)),
        Ok(Some(Status::Ok)) => return Outcome::Skipped(Status::Ok),
        Ok(Some(Status::Failed)) if !opts.retry_failed => return Outcome::Skipped(Status::Failed),
        Ok(_) => {}
    }
    let large = ident.trace_bytes.unwrap_or(0) >= LARGE_BUNDLE && opts.jobs > 1;
    if large {
        let _alone = lane.write().unwrap_or_else(|e| e.into_inner());
        ingest_one(opts, path, ident, &claim, opts.jobs)
    } else {
        let _side_by_side = lane.read().unwrap_or_else(|e| e.into_inner());
        ingest_one(opts, path, ident, &claim, 1)
    }
}

/// Every partition key must be a label of at least one bundle: a key none has is almost
/// always a misspelling, and would put every bundle under `__HIVE_DEFAULT_PARTITION__` and
/// lock the dataset to that key.
fn check_partition_keys(keys: &[String], idents: &[Identity]) -> Result<()> {
    let has = |k: &str| {
        idents.iter().any(|i| {
            i.manifest
                .as_ref()
                .is_some_and(|m| m.labels.get(k).is_some_and(|v| !v.is_empty()))
        })
    };
    let missing: Vec<&str> = keys
        .iter()
        .map(String::as_str)
        .filter(|k| !has(k))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut labels: Vec<&str> = idents
        .iter()
        .filter_map(|i| i.manifest.as_ref())
        .flat_map(|m| m.labels.keys().map(String::as_str))
        .collect();
    labels.sort_unstable();
    labels.dedup();
    bail!(
        "--partition-by {}: no bundle of the {} found has {} (their labels: {}); check the \
         spelling, or give --allow-missing-keys to put them all under {NULL_PARTITION}",
        missing.join(","),
        idents.len(),
        if missing.len() == 1 {
            "this label"
        } else {
            "these labels"
        },
        if labels.is_empty() {
            "none".to_string()
        } else {
            labels.join(", ")
        }
    )
}

fn progress_bar(show: bool, bytes: u64, bundles: usize) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    // Draws on stderr, and only when it is a terminal.
    let b = indicatif::ProgressBar::new(bytes);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}, {eta}) {msg}",
    ) {
        b.set_style(style);
    }
    b.set_message(format!("0/{bundles} bundles"));
    b.enable_steady_tick(Duration::from_millis(200));
    b
}

/// `f` over `items` on `jobs` threads, results in order.
fn parallel_map<T: Sync, R: Send>(items: &[T], jobs: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, items.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = f(item);
                out.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
            });
        }
    });
    out.into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .map(|r| r.expect("every item was mapped"))
        .collect()
}

/// Remove what an interrupted attempt left in a committed bundle's staging directory, if
/// no other run holds the bundle (its claim is taken and released at once).
fn tidy_staging(opts: &Plan, id: &str) {
    let root = opts.dest.staging_root();
    // A run killed right after its commit leaves the lock file, or the directory too.
    if root.join(id).exists() || root.join(format!("{id}.lock")).exists() {
        if let Ok(claim::Taken::Mine(c)) = claim::try_claim(&opts.dest, id) {
            drop(c);
        }
    }
}

/// What a decoded and published bundle counted.
struct Counts {
    trace_bytes: u64,
    branches: u64,
    instructions: u64,
    gaps: u64,
    errors: u64,
}

/// Decode, publish and commit one bundle, under its claim; a failure of the bundle is a
/// `failed` row.
fn ingest_one(
    opts: &Plan,
    path: &Path,
    ident: &Identity,
    claim: &claim::Claim,
    jobs: usize,
) -> Outcome {
    let t0 = Instant::now();
    let id = &ident.id;
    let staging = claim.staging().to_path_buf();
    let labels = ident
        .manifest
        .as_ref()
        .map(|m| m.labels.clone())
        .unwrap_or_default();
    let label_problem = layout::check_labels(&opts.partition_by, &labels).err();
    let labels = if label_problem.is_some() {
        // The catalog row keeps the labels it can hold as columns.
        let mut counts: HashMap<String, usize> = HashMap::new();
        for k in labels.keys() {
            *counts.entry(k.to_lowercase()).or_default() += 1;
        }
        labels
            .into_iter()
            .filter(|(k, v)| {
                counts[&k.to_lowercase()] == 1
                    && (!opts.partition_by.contains(k) || layout::partition_value_ok(k, v))
            })
            .collect()
    } else {
        labels
    };
    let pdir = partition_dir(&opts.partition_by, &labels);
    let source = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    // What an earlier, interrupted attempt at this bundle left.
    if let Err(e) = std::fs::remove_dir_all(&staging) {
        if e.kind() != std::io::ErrorKind::NotFound {
            return Outcome::NotCommitted(format!("removing {}: {e}", staging.display()));
        }
    }
    if let Err(e) = std::fs::create_dir_all(&staging) {
        return Outcome::NotCommitted(format!("creating {}: {e}", staging.display()));
    }
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| match &label_problem {
        Some(why) => bail!("{why}"),
        None => decode_and_publish(opts, path, id, &pdir, claim, jobs),
    }));
    let result = match result {
        Ok(r) => r.map_err(|e| error_text(&e)),
        Err(panic) => Err(format!(
            "internal error (a bug in tracemill, please report it): {}",
            panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default()
        )),
    };
    let mut row = Row {
        bundle: id.clone(),
        source: source.display().to_string(),
        labels,
        status: Status::Ok,
        error: None,
        trace_bytes: ident.trace_bytes,
        branches: None,
        instructions: None,
        gaps: None,
        errors: None,
        seconds: 0.0,
        tracemill_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    match result {
        Ok(c) => {
            row.trace_bytes = Some(c.trace_bytes);
            row.branches = Some(c.branches);
            row.instructions = Some(c.instructions);
            row.gaps = Some(c.gaps);
            row.errors = Some(c.errors);
        }
        Err(e) => {
            if !claim.still_held() {
                return Outcome::NotCommitted(TAKEN_OVER.to_string());
            }
            row.status = Status::Failed;
            row.error = Some(e);
            // A failed bundle has no rows in the dataset: take back what was published
            // (this run's files: no other run works on the bundle while the claim is held).
            for t in TABLES {
                if let Err(e) = opts.dest.remove(&table_file(t, &pdir, id)) {
                    return Outcome::NotCommitted(error_text(&e));
                }
            }
        }
    }
    row.seconds = t0.elapsed().as_secs_f64();
    if !claim.still_held() {
        return Outcome::NotCommitted(TAKEN_OVER.to_string());
    }
    let committed = row.to_parquet().and_then(|bytes| {
        opts.dest
            .publish_bytes(bytes, &layout::catalog_file(id), &staging)
    });
    match committed {
        Ok(()) => Outcome::Committed(row),
        Err(e) => Outcome::NotCommitted(error_text(&e)),
    }
}

/// Why a bundle was left: its claim was taken over by another run, which thought this one
/// dead (an S3 claim not renewed within the lease).
const TAKEN_OVER: &str = "another run took over this bundle's claim (this run's renewals \
                          were late): left to it";

fn decode_and_publish(
    opts: &Plan,
    path: &Path,
    id: &str,
    pdir: &str,
    claim: &claim::Claim,
    jobs: usize,
) -> Result<Counts> {
    let staging = claim.staging();
    let reach = opts.reach();
    let perf = tracemill_input::source::perf_data_file(path).is_some();
    let ropts = run::Options {
        jobs,
        chunk_bytes: None,
        out: Some(staging.join("tables")),
        tables: Tables::ALL,
        format: tracemill_sinks::Format::Parquet,
        writer: tracemill_sinks::WriterOptions {
            codec: opts.codec,
            zstd_level: opts.zstd_level,
            constant_columns: vec![("bundle".to_string(), id.to_string())],
            // Published from staging by a second rename, whose directory is synced.
            sync_directory: false,
            ..Default::default()
        },
        progress: false,
        batches: None,
        // Decoded into staging; a bundle with no branch fails below, unpublished.
        require_rows: false,
    };
    if perf {
        // The labels file must read (its labels are the bundle's partition).
        discover::perf_data_labels(path, reach)?;
    }
    // Unattended (`reach`): a bundle's files, and a recording's binaries, only from inside
    // its directory (or where the user said), never from wherever it points.
    let overrides = Overrides {
        format: opts.format,
        pt: opts.pt.clone(),
        lookup: opts.lookup.clone(),
        reach,
        ..Overrides::default()
    };
    let src = Source::open(Given::Path(path), &overrides)?;
    let report = run::decode_source(&src, &ropts)?;
    match &src.opened {
        Opened::Recording(rec) => {
            if report.rows == 0 && rec.traces[0].bundle.images.is_empty() {
                let why = rec
                    .warnings
                    .iter()
                    .filter(|w| w.contains("not found") || w.contains("no executable mapping"))
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ");
                bail!("no branch decoded: none of the recorded binaries could be loaded ({why})");
            }
            publish(opts, claim, &report, pdir, id, rec.file_size)
        }
        Opened::Bundle(b) => {
            let (set, set_problems) = b.image_set();
            if report.rows == 0 && set.segments().is_empty() {
                // Files that could not be read, and files read but not usable as code (not
                // an ELF, no executable segment): `image_set` says why for both.
                let why = if !set_problems.is_empty() {
                    set_problems.join("; ")
                } else if b.manifest.images.is_empty() {
                    "the bundle names none".to_string()
                } else {
                    "the images it names hold no code".to_string()
                };
                bail!("no branch decoded: no code image could be loaded ({why})");
            }
            publish(opts, claim, &report, pdir, id, b.trace_file_size)
        }
    }
}

/// Publish a decode's tables into the dataset; its counts for the catalog.
fn publish(
    opts: &Plan,
    claim: &claim::Claim,
    report: &run::Report,
    pdir: &str,
    id: &str,
    trace_bytes: u64,
) -> Result<Counts> {
    for w in &report.written {
        if !claim.still_held() {
            bail!("{TAKEN_OVER}");
        }
        opts.dest.publish(&w.path, &table_file(w.table, pdir, id))?;
    }
    let ev = |k: &str| report.events_by_kind.get(k).copied().unwrap_or(0);
    Ok(Counts {
        trace_bytes,
        branches: report.rows,
        instructions: report.instructions,
        gaps: ev("overflow") + ev("resync"),
        errors: report.errors(),
    })
}
