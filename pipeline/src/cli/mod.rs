//! Checks of option values, shared by the subcommands and by Python's arguments, and (with
//! the `cli` feature) the command line's flag groups over the library's typed options
//! (`flags.rs`). On the command line the checks run while clap reads it, so a bad value is
//! a usage error (exit 2) before any file is opened or any trace byte decoded: a night's
//! `ingest` or an hour-long `decode` must not fail at its end over a typo at its start.

use std::path::PathBuf;

use tracemill_input::manifest::parse_u64;

#[cfg(feature = "cli")]
mod flags;
#[cfg(feature = "cli")]
pub use flags::{PerfFlags, PtFactsFlags, TraceFormatArg};

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
pub fn parse_existing_dir(s: &str) -> Result<PathBuf, String> {
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
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
        Compression::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Every codec, in the order help lists them.
    pub const ALL: [Compression; 4] = [
        Compression::Zstd,
        Compression::Lz4,
        Compression::Snappy,
        Compression::None,
    ];

    /// The codec's name, as `--compression` and `compression=` take it.
    pub fn name(self) -> &'static str {
        match self {
            Compression::Zstd => "zstd",
            Compression::Lz4 => "lz4",
            Compression::Snappy => "snappy",
            Compression::None => "none",
        }
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
