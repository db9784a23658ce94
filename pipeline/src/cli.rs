//! Options shared by the subcommands, the command line's side of the library's typed
//! options (`tracemill_input::source::Overrides`), and checks of option values. The checks
//! run while clap reads the command line, so a bad value is a usage error (exit 2) before
//! any file is opened or any trace byte decoded: a night's `ingest` or an hour-long
//! `decode` must not fail at its end over a typo at its start.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use tracemill_decode::pt::listing::ListingOptions;
use tracemill_input::manifest::{parse_u64, TraceFormat};
use tracemill_input::perf::Lookup;
use tracemill_input::source::PtOverrides;

/// The most threads `-j` takes. Each decode thread keeps its own block cache and the
/// pipeline keeps `2 × jobs + 2` chunks in flight, so far more threads than cores only
/// costs memory; `-j 100000` used to spend minutes creating threads and appear hung.
pub const MAX_JOBS: usize = 256;

/// The largest `--chunk-size`. A chunk's rows are buffered whole (up to about one row of
/// some 70 bytes per trace byte, a quarter of that reserved up front) and `2 × jobs + 2`
/// chunks are in flight, so memory follows the chunk size; 4 MiB chunks already take some
/// hundreds of MiB on two jobs, against 128 KiB for the default.
pub const MAX_CHUNK_BYTES: u64 = 4 << 20;

/// All cores of this machine (1 when that cannot be known).
pub fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A directory to look in (`--symfs`, `--buildid-dir`): it must exist. A typo would
/// otherwise show only as every binary of a recording not found, one warning per mapping,
/// after the whole recording was read.
pub fn parse_existing_dir(s: &str) -> Result<std::path::PathBuf, String> {
    match std::fs::metadata(s) {
        Ok(m) if m.is_dir() => Ok(s.into()),
        Ok(_) => Err(format!("{s}: not a directory")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("{s}: no such directory"))
        }
        Err(e) => Err(format!("{s}: {e}")),
    }
}

/// `-j N`: 1 ..= [`MAX_JOBS`] threads; 0 means all cores, as in most tools.
pub fn parse_jobs(s: &str) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("not a thread count: {s:?} (a number; 0 means all cores)"))?;
    match n {
        0 => Ok(all_cores()),
        n if n > MAX_JOBS => Err(format!(
            "{n} threads is more than tracemill takes ({MAX_JOBS}); this machine has {} cores \
             (0 means all of them)",
            all_cores()
        )),
        n => Ok(n),
    }
}

/// A size in bytes: a number (`0x…` or decimal) with an optional `K`, `M` or `G` suffix
/// (powers of 2: 1G = 2^30).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    parse_u64(num)
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("not a size: {s:?} (bytes, like 131072, 0x20000, 128K or 1G)"))
}

/// `--chunk-size BYTES`: 0 ..= [`MAX_CHUNK_BYTES`] (a [`parse_size`]). Larger values are
/// refused, not clamped: a value the user chose is never silently replaced.
pub fn parse_chunk_size(s: &str) -> Result<u64, String> {
    let n = parse_size(s)?;
    if n > MAX_CHUNK_BYTES {
        return Err(format!(
            "{n} bytes is more than the largest chunk size, {MAX_CHUNK_BYTES} (4M): chunks in \
             flight hold their rows in memory, so larger chunks only cost memory"
        ));
    }
    Ok(n)
}

/// `--compression`: the page compression of the Parquet tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Compression {
    /// ZSTD at `--zstd-level`: the smallest tables, for about the CPU time of the others.
    Zstd,
    /// LZ4 (Parquet's LZ4_RAW): larger tables, the fastest to read back.
    Lz4,
    /// Snappy: what Spark and pyarrow wrote by default for years.
    Snappy,
    /// Uncompressed pages (still dictionary- and delta-encoded).
    None,
}

impl Compression {
    /// The codec named `name` as `--compression` names it (`zstd`, `lz4`, `snappy`,
    /// `none`): for faces other than clap (Python's `compression=`).
    pub fn by_name(name: &str) -> Option<Compression> {
        <Compression as clap::ValueEnum>::from_str(name, false).ok()
    }
}

impl From<Compression> for tracemill_sinks::Codec {
    fn from(c: Compression) -> Self {
        match c {
            Compression::Zstd => tracemill_sinks::Codec::Zstd,
            Compression::Lz4 => tracemill_sinks::Codec::Lz4,
            Compression::Snappy => tracemill_sinks::Codec::Snappy,
            Compression::None => tracemill_sinks::Codec::None,
        }
    }
}

/// The ZSTD levels Parquet writers accept (zstd's own range).
pub const ZSTD_LEVELS: std::ops::RangeInclusive<i32> = -131072..=22;

/// `--zstd-level N`: zstd's range, -131072 ..= 22 (0 is zstd's default, 3).
pub fn parse_zstd_level(s: &str) -> Result<i32, String> {
    let n: i32 = s
        .trim()
        .parse()
        .map_err(|_| format!("not a zstd level: {s:?}"))?;
    if !ZSTD_LEVELS.contains(&n) {
        return Err(format!(
            "zstd level {n} is out of range: 1 (fastest) to 22 (smallest), 0 for zstd's \
             default (3), or negative for faster than 1 (down to {})",
            ZSTD_LEVELS.start()
        ));
    }
    Ok(n)
}

/// `--trace-format`: the command line's names of [`TraceFormat`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TraceFormatArg {
    /// Intel RTIT (Silvermont/Airmont Atom trace), the packets of chapter 4.
    Rtit,
    /// Intel PT (the SDM's Processor Trace), as recorded by perf on every Intel server.
    Pt,
}

impl From<TraceFormatArg> for TraceFormat {
    fn from(f: TraceFormatArg) -> TraceFormat {
        match f {
            TraceFormatArg::Rtit => TraceFormat::Rtit,
            TraceFormatArg::Pt => TraceFormat::Pt,
        }
    }
}

/// The Intel PT processor and timing facts a trace does not carry, named as libipt's
/// ptdump and ptxed name them (for `dump`, `decode` and `ingest`; over a bundle's `[pt]`).
#[derive(Args)]
#[command(next_help_heading = "Intel PT: the processor's facts (as ptxed's options)")]
pub struct PtFactsFlags {
    /// The processor, F/M[/S] (selects errata), or none.
    #[arg(long, value_name = "F/M[/S]")]
    pub cpu: Option<String>,
    /// IA32_RTIT_CTL.MTCFreq.
    #[arg(long, value_name = "N")]
    pub mtc_freq: Option<String>,
    /// The maximum non-turbo ratio (MSR_PLATFORM_INFO[15:8]).
    #[arg(long, value_name = "N")]
    pub nom_freq: Option<String>,
    /// CPUID.15H:EAX (TSC:CTC ratio denominator).
    #[arg(long = "cpuid-0x15.eax", value_name = "N")]
    pub cpuid_0x15_eax: Option<String>,
    /// CPUID.15H:EBX (TSC:CTC ratio numerator).
    #[arg(long = "cpuid-0x15.ebx", value_name = "N")]
    pub cpuid_0x15_ebx: Option<String>,
}

impl PtFactsFlags {
    /// The facts given, as ptdump's option words.
    pub fn words(&self) -> Vec<String> {
        let mut w = Vec::new();
        for (v, word) in [
            (&self.cpu, "--cpu"),
            (&self.mtc_freq, "--mtc-freq"),
            (&self.nom_freq, "--nom-freq"),
            (&self.cpuid_0x15_eax, "--cpuid-0x15.eax"),
            (&self.cpuid_0x15_ebx, "--cpuid-0x15.ebx"),
        ] {
            if let Some(v) = v {
                w.extend([word.to_string(), v.clone()]);
            }
        }
        w
    }

    /// The facts given, each value read as ptdump reads it: the library's
    /// [`PtOverrides`].
    pub fn overrides(&self) -> anyhow::Result<PtOverrides> {
        let (_, given) =
            ListingOptions::from_ptdump_args(&self.words()).map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(PtOverrides {
            cpu: self.cpu.as_ref().map(|c| (c != "none").then(|| c.clone())),
            mtc_freq: self.mtc_freq.is_some().then_some(given.mtc_freq),
            nom_freq: self.nom_freq.is_some().then_some(given.nom_freq),
            tsc_ctc_ratio_d: self
                .cpuid_0x15_eax
                .is_some()
                .then_some(given.tsc_ctc_ratio_d),
            tsc_ctc_ratio_n: self
                .cpuid_0x15_ebx
                .is_some()
                .then_some(given.tsc_ctc_ratio_n),
        })
    }
}

/// Where a perf.data's binaries are, as perf's options name them (`decode`, `ingest`).
#[derive(Args, Clone, Debug, Default)]
#[command(next_help_heading = "perf.data: where its binaries are (as perf's options)")]
pub struct PerfFlags {
    /// perf.data: look for the recorded binaries under DIR first (DIR + the recorded
    /// path), as perf's --symfs.
    #[arg(long, value_name = "DIR", value_parser = parse_existing_dir)]
    pub symfs: Option<PathBuf>,
    /// perf.data: the build-id cache to look for binaries in by build-id [default:
    /// ~/.debug], as perf's --buildid-dir.
    #[arg(long, value_name = "DIR", value_parser = parse_existing_dir)]
    pub buildid_dir: Option<PathBuf>,
    /// perf.data: the kernel's ELF image (its code at its own addresses), for traces of
    /// kernel code, as perf's --vmlinux.
    #[arg(long, value_name = "FILE")]
    pub vmlinux: Option<PathBuf>,
    /// perf.data: a copy of /proc/kcore taken with the recording (the kernel's text as it
    /// ran, modules included), as perf's --kcore.
    #[arg(long, value_name = "FILE")]
    pub kcore: Option<PathBuf>,
}

impl PerfFlags {
    /// The library's [`Lookup`] (not confined: the caller's input).
    pub fn lookup(&self) -> Lookup {
        Lookup {
            symfs: self.symfs.clone(),
            buildid_dir: self.buildid_dir.clone(),
            vmlinux: self.vmlinux.iter().cloned().collect(),
            kcore: self.kcore.iter().cloned().collect(),
            confine: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_zero_is_all_cores_and_too_many_is_refused() {
        assert_eq!(parse_jobs("0"), Ok(all_cores()));
        assert_eq!(parse_jobs("3"), Ok(3));
        assert_eq!(parse_jobs(&MAX_JOBS.to_string()), Ok(MAX_JOBS));
        let e = parse_jobs("100000").unwrap_err();
        assert!(e.contains("256"), "{e}");
        assert!(parse_jobs("-1").is_err());
        assert!(parse_jobs("two").is_err());
    }

    #[test]
    fn chunk_sizes_take_suffixes_and_are_bounded() {
        assert_eq!(parse_chunk_size("0"), Ok(0));
        assert_eq!(parse_chunk_size("0x20000"), Ok(128 << 10));
        assert_eq!(parse_chunk_size("128K"), Ok(128 << 10));
        assert_eq!(parse_chunk_size("4M"), Ok(MAX_CHUNK_BYTES));
        let e = parse_chunk_size("1000000000").unwrap_err();
        assert!(e.contains("largest chunk size"), "{e}");
        assert!(parse_chunk_size("4097K").is_err());
        assert!(parse_chunk_size("18446744073709551615K").is_err());
        assert!(parse_chunk_size("big").is_err());
    }

    #[test]
    fn zstd_levels_are_zstds_range() {
        assert_eq!(parse_zstd_level("22"), Ok(22));
        assert_eq!(parse_zstd_level("0"), Ok(0));
        assert_eq!(parse_zstd_level("-5"), Ok(-5));
        let e = parse_zstd_level("99").unwrap_err();
        assert!(e.contains("1 (fastest) to 22"), "{e}");
        assert!(parse_zstd_level("-131073").is_err());
        // Every level this accepts, parquet accepts (it would otherwise fail after decoding).
        for l in [*ZSTD_LEVELS.start(), -1, 0, 1, 3, 22] {
            assert!(parquet::basic::ZstdLevel::try_new(l).is_ok(), "{l}");
        }
    }
}
