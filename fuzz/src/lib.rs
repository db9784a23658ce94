//! Shared pieces of the fuzz targets: the fixed code images the walker runs over, how a
//! fuzz input becomes a decode (RTIT_CTL and bundle facts from its first bytes, then the
//! trace), and the contracts every decode must keep whatever the bytes.

use std::sync::OnceLock;

/// `tracemill_datasets::encode`, the hardware model's packet writer (an implementation
/// independent of the parser, hence the round-trip oracle), compiled from its source.
#[path = "../../datasets/src/encode.rs"]
pub mod encode;

/// `tracemill_datasets::bundle`: `Manifest`, the `bundle.toml` reader, compiled from its
/// source.
#[path = "../../datasets/src/bundle.rs"]
pub mod bundle;

use tracemill_decode::chunk::{decode_all, Decoded, Input};
use tracemill_decode::image::ImageSet;
use tracemill_decode::packet::PSB_BYTES;
use tracemill_decode::stream::TraceStream;
use tracemill_decode::sync::find_psbs;
use tracemill_decode::timing::TimingConfig;
use tracemill_decode::TraceConfig;

static JUMPTABLE: &[u8] = include_bytes!("../../datasets/samples/jumptable/images/jumptable");
static BUSYBOX: &[u8] = include_bytes!("../../datasets/samples/kernel-processes/images/busybox");
static KERNEL: &[u8] = include_bytes!("../../datasets/samples/kernel-processes/images/kernel.bin");

/// The image sets of two sample bundles, loaded the way `pipeline/src/bundle.rs` loads
/// them: 0 = `jumptable` (one static ELF at its own addresses), 1 = `kernel-processes`
/// (the busybox ELF twice, CR3-tagged 0x1000 and 0x2000, and a raw kernel image).
pub fn images(which: u8) -> &'static ImageSet<'static> {
    static SETS: OnceLock<[ImageSet<'static>; 2]> = OnceLock::new();
    let sets = SETS.get_or_init(|| {
        let mut a = ImageSet::new();
        a.add_elf("jumptable", JUMPTABLE, None, None).expect("jumptable ELF");
        let mut b = ImageSet::new();
        b.add_elf("busybox", BUSYBOX, None, Some(0x1000)).expect("busybox ELF");
        b.add_elf("busybox", BUSYBOX, None, Some(0x2000)).expect("busybox ELF");
        b.add_raw("kernel.bin", KERNEL, 0xffff_ffff_8100_0000, None);
        [a, b]
    });
    &sets[(which & 1) as usize]
}

/// A fuzz input read as a decode:
///
/// | bytes | meaning |
/// |---|---|
/// | 0 | bit 0: image set (see [`images`]); bit 1: a guaranteed ratio is given; bit 2: a ring dump (no E7 at the start) |
/// | 1 | the guaranteed ratio |
/// | 2..4 | RTIT_CTL bits 15:0, little-endian (bits 31:16 are reserved) |
/// | 4.. | the trace; a PSB is put in front so that something decodes |
pub struct Case {
    pub images: u8,
    pub ctl: u64,
    pub ratio: Option<u8>,
    pub starts_at_enable: bool,
    pub trace: Vec<u8>,
}

pub const HEADER: usize = 4;

impl Case {
    pub fn parse(data: &[u8]) -> Option<Case> {
        if data.len() < HEADER {
            return None;
        }
        let mut trace = Vec::with_capacity(PSB_BYTES.len() + data.len() - HEADER);
        trace.extend_from_slice(&PSB_BYTES);
        trace.extend_from_slice(&data[HEADER..]);
        Some(Case {
            images: data[0] & 1,
            ratio: (data[0] & 2 != 0).then_some(data[1]),
            starts_at_enable: data[0] & 4 == 0,
            ctl: u16::from_le_bytes([data[2], data[3]]) as u64,
            trace,
        })
    }

    /// Decode with chunks of at least `chunk_bytes` (`u64::MAX`: sequential).
    pub fn decode(&self, chunk_bytes: u64) -> Decoded {
        let stream = TraceStream::linear(&self.trace);
        let psbs = find_psbs(&stream);
        let cfg = TraceConfig::from_ctl(self.ctl);
        let input = Input {
            stream: &stream,
            psbs: &psbs,
            images: images(self.images),
            cfg,
            timing: TimingConfig::new(&cfg, self.ratio, self.starts_at_enable),
        };
        decode_all(&input, chunk_bytes)
    }
}

fn non_decreasing(what: &str, v: impl Iterator<Item = u64>) {
    let mut prev: Option<u64> = None;
    for (i, x) in v.enumerate() {
        if let Some(p) = prev {
            assert!(x >= p, "{what} decreases at {i}: {p} -> {x}");
        }
        prev = Some(x);
    }
}

/// The table contracts of `docs/contracts.md` that hold for any input: every column is as
/// long as the table, the columns stored delta-encoded never decrease, rows and events
/// lie inside the trace.
pub fn check_contracts(d: &Decoded, trace_len: u64) {
    let r = &d.rows;
    let n = r.len();
    assert_eq!(r.target.len(), n, "target column length");
    assert_eq!(r.kind.len(), n, "kind column length");
    assert_eq!(r.taken.len(), n, "taken column length");
    assert_eq!(r.compressed.len(), n, "compressed column length");
    assert_eq!(r.insns.len(), n, "insns column length");
    assert_eq!(r.tsc.len(), n, "tsc column length");
    assert_eq!(r.cycles.len(), n, "cycles column length");
    assert_eq!(r.cr3.len(), n, "cr3 column length");
    assert_eq!(r.offset.len(), n, "offset column length");
    non_decreasing("branches.offset", r.offset.iter().copied());
    non_decreasing("branches.tsc", (0..n).filter_map(|i| r.tsc.get(i)));
    non_decreasing("branches.cycles", (0..n).filter_map(|i| r.cycles.get(i)));
    if let Some(&o) = r.offset.last() {
        assert!(o < trace_len, "row offset {o} past the trace ({trace_len})");
    }
    non_decreasing("events.seq", d.events.iter().map(|e| e.seq));
    non_decreasing("events.offset", d.events.iter().map(|e| e.offset));
    for e in &d.events {
        assert!(e.seq <= n as u64, "event seq {} past the rows ({n})", e.seq);
        assert!(e.offset <= trace_len, "event offset past the trace");
    }
    let t = &d.timing_rows;
    let m = t.len();
    non_decreasing("timing.offset", t.offset.iter().copied());
    non_decreasing("timing.tsc", (0..m).filter_map(|i| t.tsc.get(i)));
    non_decreasing("timing.cycles", (0..m).filter_map(|i| t.cycles.get(i)));
}
