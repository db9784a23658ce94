//! Reading `branches` as dictionary keys, as the flame graph's readers do: the four
//! columns the stack walk reads (`ip`, `target`, `insns`, `kind`) of every row group,
//! through `tracemill_reports::parquet_keys`, on one thread. Prints each run's time and
//! the median's rows per second. The readers' other work (the gathers of `insns` and
//! `kind`) is not in it: this times the Parquet side (zstd, pages, keys, levels).
//!
//! ```sh
//! cargo build --release -p tracemill-benches --bin keys-bench
//! taskset -c 1 target/release/keys-bench OUT/branches.parquet [--runs N]
//! ```
//!
//! One CPU (`taskset`) gives steadier figures on a shared machine than letting the
//! scheduler move the thread.
use anyhow::{Context, Result};
use parquet::file::reader::FileReader;
use std::fs::File;
use std::time::Instant;
use tracemill_reports::parquet_keys::{self, Keyed, Scratch};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .context("usage: keys-bench BRANCHES.parquet [--runs N]")?;
    let runs: usize = match args.iter().position(|a| a == "--runs") {
        Some(i) => args.get(i + 1).context("--runs N")?.parse()?,
        None => 3,
    };
    let file = File::open(path).with_context(|| format!("{path}: cannot open"))?;
    let reader = parquet::file::serialized_reader::SerializedFileReader::new(file.try_clone()?)?;
    let meta = reader.metadata();
    let rows = meta.file_metadata().num_rows() as f64;
    let (mut ip, mut target) = (Keyed::<u64>::default(), Keyed::<u64>::default());
    let (mut insns, mut kind) = (Keyed::<u32>::default(), Keyed::<Vec<u8>>::default());
    let mut scratch = Scratch::default();
    let mut times = Vec::new();
    for run in 0..runs {
        let start = Instant::now();
        // A sum of some keys, so that nothing read can be left out.
        let mut sum = 0u64;
        for g in 0..meta.num_row_groups() {
            let group = meta.row_group(g);
            let n = group.num_rows() as usize;
            let (map, chunks) =
                parquet_keys::map_chunks(&file, group, &["ip", "target", "insns", "kind"])?;
            parquet_keys::read_chunk_into(&map, chunks[0], n, &mut ip, &mut scratch)?;
            parquet_keys::read_chunk_into(&map, chunks[1], n, &mut target, &mut scratch)?;
            parquet_keys::read_chunk_into(&map, chunks[2], n, &mut insns, &mut scratch)?;
            parquet_keys::read_chunk_into(&map, chunks[3], n, &mut kind, &mut scratch)?;
            for keys in [&ip.keys, &target.keys, &insns.keys, &kind.keys] {
                sum = sum.wrapping_add(keys.get(n / 2).copied().unwrap_or(0) as u64);
            }
        }
        let t = start.elapsed().as_secs_f64();
        println!("run {run}: {t:.2} s (check {sum})");
        times.push(t);
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    println!(
        "median of {runs}: {median:.2} s, {:.1} M rows/s ({} rows)",
        rows / median / 1e6,
        rows
    );
    Ok(())
}
