//! `tracemill ingest`'s command line (feature `cli`): clap's reader of
//! [`IngestOptions`], and the command.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use super::{ingest, plan, IngestOptions};
use crate::cli::{
    all_cores, parse_existing_dir, parse_jobs, parse_zstd_level, Compression, PtFactsFlags,
    TraceFormatArg,
};
use tracemill_input::perf::Lookup;

/// `tracemill ingest` arguments.
#[derive(clap::Args, Debug)]
pub struct IngestArgs {
    /// Bundle directories, perf.data files (Intel PT; labels in FILE.toml beside them),
    /// directories searched recursively for both, or text files listing their paths (one
    /// a line; relative to the list file; `#` comments).
    #[arg(required = true, value_name = "SOURCE")]
    pub sources: Vec<PathBuf>,
    /// The dataset: a local directory, or s3://bucket/prefix (endpoint, region and
    /// credentials from the AWS environment variables).
    #[arg(long, value_name = "DEST")]
    pub dataset: String,
    /// Bundle labels to partition the tables by, comma-separated (e.g. date,host). Every
    /// run into a dataset must give the same keys. A key that no bundle found has as a
    /// label is refused (a misspelling), unless --allow-missing-keys.
    #[arg(long, value_name = "KEYS", default_value = "")]
    pub partition_by: String,
    /// Accept --partition-by keys that no bundle of this run has: their bundles go under
    /// <key>=__HIVE_DEFAULT_PARTITION__.
    #[arg(long)]
    pub allow_missing_keys: bool,
    /// Worker threads, 1 to 256; 0 means all cores [default: all cores]. Small bundles
    /// decode side by side, one thread each; large ones (8 MiB of trace and more) one at
    /// a time on all threads.
    #[arg(long, short, value_name = "N", value_parser = parse_jobs)]
    pub jobs: Option<usize>,
    /// Take shard I of N (0-based) of the bundles, chosen by bundle id. Read from
    /// SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT, or JOB_COMPLETION_INDEX with --shards,
    /// when not given.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// The number of shards, for a Kubernetes Indexed Job (JOB_COMPLETION_INDEX).
    #[arg(long, value_name = "N")]
    pub shards: Option<u64>,
    /// Decode bundles whose catalog row says `failed` again.
    #[arg(long)]
    pub retry_failed: bool,
    /// Local directory to decode into before uploading (S3 only; default: under $TMPDIR).
    #[arg(long, value_name = "DIR")]
    pub staging: Option<PathBuf>,
    /// ZSTD level of the Parquet tables: 1 (fastest) to 22 (smallest), 0 for zstd's
    /// default (3), negative for faster than 1.
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = parse_zstd_level,
          default_value_t = tracemill_sinks::parquet::DEFAULT_ZSTD_LEVEL)]
    pub zstd_level: i32,
    /// Page compression of the Parquet tables.
    #[arg(long, value_enum, value_name = "CODEC", default_value_t = Compression::Zstd)]
    pub compression: Compression,
    /// No progress bar (the bar only shows on a terminal anyway).
    #[arg(long, short)]
    pub quiet: bool,
    /// Read the files a bundle.toml names outside its bundle directory (an absolute path,
    /// `..`, a symbolic link out). By default they are refused: a bundle from another
    /// host must not make this run read any file of this machine.
    #[arg(long)]
    pub allow_outside_paths: bool,
    /// perf.data: look for the recorded binaries under DIR (DIR + the recorded path), as
    /// perf's --symfs. Without it, and without --allow-outside-paths, they are looked for
    /// only inside each recording's directory (its `.debug` build-id cache).
    #[arg(long, value_name = "DIR", value_parser = parse_existing_dir)]
    pub symfs: Option<PathBuf>,
    /// perf.data: perf's build-id cache to look for binaries in [default: `.debug` beside
    /// each recording; ~/.debug with --allow-outside-paths], as perf's --buildid-dir.
    #[arg(long, value_name = "DIR", value_parser = parse_existing_dir)]
    pub buildid_dir: Option<PathBuf>,
    /// perf.data: the kernel's ELF image (its code at its own addresses), for traces of
    /// kernel code, as perf's --vmlinux (the user's: read wherever it is).
    #[arg(long, value_name = "FILE")]
    pub vmlinux: Option<PathBuf>,
    /// perf.data: a copy of /proc/kcore taken with the recordings (the kernel's text as
    /// it ran, modules included), or the kcore_dir `perf record --kcore` writes.
    #[arg(long, value_name = "FILE|DIR")]
    pub kcore: Option<PathBuf>,
    /// The trace format every source must have [default: each bundle's `format`; a
    /// perf.data is Intel PT]: a source of the other format fails (its catalog row says
    /// why).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub trace_format: Option<TraceFormatArg>,
    #[command(flatten)]
    pub pt: PtFactsFlags,
}

impl IngestArgs {
    /// The typed options these arguments give (`--cpu` and the other Intel PT facts read
    /// as ptdump reads them).
    pub fn options(&self) -> Result<IngestOptions> {
        Ok(IngestOptions {
            dataset: self.dataset.clone(),
            partition_by: self.partition_by.split(',').map(str::to_string).collect(),
            allow_missing_keys: self.allow_missing_keys,
            jobs: self.jobs.unwrap_or_else(all_cores),
            shard: self.shard.clone(),
            shards: self.shards,
            retry_failed: self.retry_failed,
            staging: self.staging.clone(),
            zstd_level: self.zstd_level,
            codec: self.compression.into(),
            progress: !self.quiet,
            allow_outside_paths: self.allow_outside_paths,
            format: self.trace_format.map(Into::into),
            pt: self.pt.overrides()?,
            lookup: Lookup {
                symfs: self.symfs.clone(),
                buildid_dir: self.buildid_dir.clone(),
                vmlinux: self.vmlinux.iter().cloned().collect(),
                kcore: self.kcore.iter().cloned().collect(),
                confine: None,
            },
        })
    }
}

/// `tracemill ingest`: the exit status, or an error when nothing could be done (bad
/// arguments, a dataset that cannot be written).
pub fn main(a: IngestArgs) -> Result<ExitCode> {
    let opts = plan(&a.options()?)?;
    let summary = ingest(&a.sources, &opts)?;
    eprint!("{}", summary.text(&opts.dest.display()));
    Ok(ExitCode::from(summary.exit_code()))
}
