//! Criterion micro-benchmarks of the hot loops, one thread each, on a synthetic trace
//! made in the setup (never committed): a walk over the committed `jumptable` sample's
//! code, 8 MB of trace by default (`TRACEMILL_BENCH_MB` to change it), once without and
//! once with cycle-accurate mode.
//!
//! - `packets`: the packet parser over the whole trace (PSB-bounded reader);
//! - `flow_count`: the instruction-flow walk into a counting sink (no rows stored);
//! - `flow_rows`: the walk into branch columns, with coverage aggregation (what a decode
//!   thread does per chunk);
//! - `flow_rows_nocov`: the same without coverage (the difference is coverage's cost);
//! - `timeline`: timing reconstruction (`tsc`, `cycles` and the `timing` table) over the
//!   decoded rows, the serial stage of the pipeline;
//! - `decode_all`: the sequential decode with stitching, timing and coverage (what one
//!   thread of `tracemill decode` does before writing).
//!
//! - `generate`: the dataset generator (a synthetic walk fed through the hardware model),
//!   in bytes of trace produced per second.
//!
//! Every benchmark checks its counts against the generator's summary before it is timed,
//! so a fast wrong answer cannot pass for a result.
//!
//! ```sh
//! cargo bench -p tracemill-benches --bench decode
//! ```

use std::path::{Path, PathBuf};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tracemill_datasets::samples::synth_big;
use tracemill_decode::block::BlockCache;
use tracemill_decode::chunk::{decode_all, decode_body, plan_chunks, Body, Input, Piece, Stitcher};
use tracemill_decode::coverage::Coverage;
use tracemill_decode::flow::{CountSink, RowSink};
use tracemill_decode::rows::{BranchColumns, BranchRow};
use tracemill_decode::rtit::packet::PacketReader;
use tracemill_decode::rtit::sync::next_psb;
use tracemill_decode::timing::Timeline;
use tracemill_input::bundle::Bundle;

/// Branch columns without the coverage aggregation.
#[derive(Default)]
struct NoCoverage(BranchColumns);

impl RowSink for NoCoverage {
    fn push(&mut self, r: &BranchRow, _block: (u64, u32)) {
        self.0.push_flow(r);
    }
    fn reserve(&mut self, n: usize) {
        self.0.reserve(n)
    }
    fn finish(&mut self) -> (tracemill_decode::chunk::PieceStats, Coverage) {
        (
            tracemill_decode::chunk::PieceStats::of(&self.0),
            Coverage::default(),
        )
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn truncate(&mut self, n: usize) {
        self.0.truncate(n)
    }
    fn add_insns(&mut self, i: usize, n: u32) {
        self.0.insns[i] += n;
    }
}

/// RTIT_CTL values: user and kernel tracing, MTC and STS, return compression, without
/// and with Cycle_Acc (`tracemill synth synthetic`'s default is the latter).
const CTLS: [(&str, u64); 2] = [("mtc", 0xef09), ("cyc", 0xef0b)];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("benches/ lives in the workspace")
        .to_path_buf()
}

/// Make (or reuse) the bench bundle for `ctl`; returns its directory and expected counts.
fn bundle(tag: &str, ctl: u64) -> (PathBuf, tracemill_datasets::model::Summary) {
    let mb: u64 = std::env::var("TRACEMILL_BENCH_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let dir = workspace()
        .join("target")
        .join("bench-data")
        .join(format!("synthetic-{tag}-{mb}m"));
    let elf = workspace().join("datasets/samples/synthetic/images/jumptable");
    let summary = synth_big(&elf, mb << 20, 7, ctl, &dir).expect("generating the bench trace");
    (dir, summary)
}

fn bench_bundle(c: &mut Criterion, tag: &str, ctl: u64) {
    let (dir, summary) = bundle(tag, ctl);
    let b = Bundle::open(&dir, None, &[]).expect("opening the bench bundle");
    let stream = b.stream();
    let first_psb = next_psb(&stream, 0).expect("a PSB");
    let (images, _) = b.image_set();
    let cfg = b.trace_config();
    let input = Input::<tracemill_decode::Rtit> {
        spaces: None,
        stream: &stream,
        images: &images,
        cfg,
        timing: b.timing_config(),
    };
    let whole = plan_chunks::<tracemill_decode::Rtit>(&stream, u64::MAX)[0];
    let packets_expected: u64 = summary.packets_by_type.values().sum();

    let count_packets = || {
        let mut r = PacketReader::new(&stream, first_psb, stream.len(), cfg.cycle_acc);
        let mut n = 0u64;
        while let Some(p) = r.next_packet() {
            n += u64::from(p.is_ok());
        }
        n
    };
    // CYC packets count as packets in the summary and in the reader alike.
    assert_eq!(count_packets(), packets_expected, "packet count");

    let count_flow = |cache: &mut BlockCache| {
        let body: Body<tracemill_decode::Rtit, CountSink> = decode_body(&input, cache, whole);
        (body.out.rows.rows as u64, body.out.rows.insns)
    };
    let mut warm = BlockCache::new();
    let (rows, _) = count_flow(&mut warm);
    assert_eq!(rows, summary.branches, "branch rows (count sink)");

    // Criterion reports bytes/s; these turn its times into branches/s and insns/s.
    eprintln!(
        "decode-{tag}: {:.1} MB of trace, {} packets, {} branches, {} instructions",
        stream.len() as f64 / 1e6,
        packets_expected,
        summary.branches,
        summary.instructions
    );
    let mut g = c.benchmark_group(format!("decode-{tag}"));
    g.sample_size(10);
    g.throughput(Throughput::Bytes(stream.len()));
    g.bench_function("packets", |bn| bn.iter(count_packets));
    // The block cache persists across iterations as it does across a worker's chunks.
    g.bench_function("flow_count", |bn| bn.iter(|| count_flow(&mut warm)));
    g.bench_function("flow_rows", |bn| {
        bn.iter_batched(
            BlockCache::new,
            |mut cache| {
                let body: Body<tracemill_decode::Rtit, BranchColumns> =
                    decode_body(&input, &mut cache, whole);
                assert_eq!(body.out.rows.len() as u64, summary.branches);
                body
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("flow_rows_nocov", |bn| {
        bn.iter_batched(
            BlockCache::new,
            |mut cache| {
                let body: Body<tracemill_decode::Rtit, NoCoverage> =
                    decode_body(&input, &mut cache, whole);
                assert_eq!(body.out.rows.len() as u64, summary.branches);
                body
            },
            BatchSize::PerIteration,
        )
    });
    let mut pieces: Vec<Piece<BranchColumns>> = Vec::new();
    let mut stitcher = Stitcher::new(&input);
    stitcher.push(decode_body(&input, &mut warm, whole), |p| pieces.push(p));
    g.bench_function("timeline", |bn| {
        bn.iter_batched(
            || pieces.clone(),
            |pieces| {
                let mut tl =
                    Timeline::<tracemill_decode::rtit::clock::RtitClock>::new(&input.timing);
                let mut out = Vec::new();
                for p in pieces {
                    out.extend(tl.push(p));
                }
                out.extend(tl.finish());
                let rows: usize = out.iter().map(|(p, _)| p.rows.len()).sum();
                assert_eq!(rows as u64, summary.branches);
                out
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("decode_all", |bn| {
        bn.iter(|| {
            let d = decode_all(&input, u64::MAX);
            assert_eq!(d.rows.len() as u64, summary.branches);
            assert_eq!(d.coverage.executions(), summary.branches);
            d
        })
    });
    g.finish();
}

/// The generator: walk steps through the hardware model until `size` bytes of trace.
fn bench_generator(c: &mut Criterion) {
    use tracemill_datasets::exec::synthetic::{Code, WalkConfig};
    use tracemill_datasets::model::{Model, ModelOptions};
    let elf = std::fs::read(workspace().join("datasets/samples/synthetic/images/jumptable"))
        .expect("the committed sample image");
    let code = Code::from_elf("jumptable", &elf).expect("a static ELF");
    let size = 4usize << 20;
    let generate = || {
        let mut walk = code.walk(&WalkConfig::new(3, u64::MAX));
        let o = ModelOptions {
            ctl: 0xef0b,
            seed: 3,
            keep_truth: false,
            ..ModelOptions::default()
        };
        let mut m = Model::new(o, code.images());
        m.start(walk.entry());
        while m.bytes_written() < size {
            match walk.next() {
                Some(s) => m.feed(&s),
                None => break,
            }
        }
        m.end()
    };
    let out = generate();
    assert!(out.bytes.len() >= size && out.summary.branches > 0);
    assert_eq!(
        generate().bytes,
        out.bytes,
        "the generator is deterministic"
    );
    let mut g = c.benchmark_group("generate");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(out.bytes.len() as u64));
    g.bench_function("synthetic_walk_through_model", |bn| bn.iter(generate));
    g.finish();
}

fn benches(c: &mut Criterion) {
    for (tag, ctl) in CTLS {
        bench_bundle(c, tag, ctl);
    }
    bench_generator(c);
}

criterion_group!(decode, benches);
criterion_main!(decode);
