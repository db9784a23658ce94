//! The checks of every fuzz target, as plain functions over the input bytes.
//!
//! Shared by the fuzz targets (`fuzz_targets/*.rs`, through `tracemill_fuzz::targets`) and
//! by the workspace's regression tests (`datasets/tests/fuzz_regressions.rs` includes this
//! file with `#[path]`), so that a saved finding replays through exactly the checks that
//! found it. `crate::encode` is `tracemill_datasets::encode`, `crate::bundle` is
//! `tracemill_input::manifest` and `crate::collected` `tracemill_input::collected`, in both
//! places.

use std::sync::OnceLock;

use tracemill_decode::block::{build_block, BlockCache, BlockEnd};
use tracemill_decode::chunk::{decode_all, tally_all, Decoded, Input, PieceStats, Tallied};
use tracemill_decode::image::ImageSet;
use tracemill_decode::rtit::clock::TimingConfig;
use tracemill_decode::rtit::packet::{
    parse_one, Packet, PacketError, PacketReader, Parsed, PSB_BYTES,
};
use tracemill_decode::rtit::sync::{find_psbs, next_psb};
use tracemill_decode::stream::{Break, Lost, Span, TraceStream};
use tracemill_decode::tally::{Counted, Covered};
use tracemill_decode::TraceConfig;

use tracemill_decode::pt;

use crate::bundle::{parse_u64, Manifest};
use crate::encode::write_packet;

// ---------------------------------------------------------------------------------------
// packets

type Item = Result<Parsed, PacketError>;

fn read_all(r: &mut PacketReader<'_>, fast: bool) -> Vec<Item> {
    let mut out = Vec::new();
    let mut last = r.pos();
    loop {
        let item = if fast {
            match r.try_tnt() {
                Some((t, off)) => Some(Ok(Parsed {
                    offset: off,
                    size: 1,
                    packet: Packet::Tnt(t),
                })),
                None => r.next_packet(),
            }
        } else {
            r.next_packet()
        };
        let Some(item) = item else { break };
        assert!(r.pos() > last, "reader did not advance at {last}");
        last = r.pos();
        out.push(item);
    }
    out
}

fn packets_from(data: &[u8], start: u64, cycle_acc: bool) {
    let stream = TraceStream::linear(data);
    let psbs = find_psbs(&stream);
    let len = stream.len();
    let items = read_all(
        &mut PacketReader::new(&stream, start, len, cycle_acc),
        false,
    );

    let mut pos = start;
    let mut want_cyc = false;
    let mut seen_psbs = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item {
            Ok(p) => {
                assert_eq!(
                    p.offset, pos,
                    "packet {i} does not start where the last ended"
                );
                assert!(p.size > 0);
                let end = p.offset + p.size as u64;
                assert!(end <= len, "packet {i} runs past the stream");
                let bytes = &data[p.offset as usize..end as usize];
                if p.packet == Packet::Psb {
                    assert_eq!(bytes, PSB_BYTES);
                    seen_psbs.push(p.offset);
                } else {
                    assert_eq!(
                        parse_one(bytes, want_cyc),
                        Ok((p.packet, p.size)),
                        "packet {i} reparses"
                    );
                    // No packet but a PSB may run into a PSB.
                    let next_psb = psbs.iter().copied().find(|&q| q >= p.offset);
                    assert!(
                        next_psb.is_none_or(|q| q >= end),
                        "packet {i} overlaps a PSB"
                    );
                }
                let mut enc = Vec::new();
                write_packet(&mut enc, &p.packet);
                assert_eq!(enc, bytes, "packet {i} {:?} does not round-trip", p.packet);
                want_cyc = cycle_acc && p.packet.takes_cyc();
                pos = end;
            }
            Err(e) => {
                assert_eq!(
                    e.offset, pos,
                    "error {i} is not where the last packet ended"
                );
                let _ = e.to_string();
                // Reading resumes at the next PSB after the error, or the end.
                pos = psbs.iter().copied().find(|&q| q > e.offset).unwrap_or(len);
                want_cyc = false;
                if let Some(Ok(n)) = items.get(i + 1) {
                    assert_eq!(n.offset, pos, "after error {i}: resumes at the next PSB");
                }
            }
        }
    }
    assert!(pos >= len, "reading stopped at {pos} of {len}");
    let expect: Vec<u64> = psbs.iter().copied().filter(|&q| q >= start).collect();
    assert_eq!(seen_psbs, expect, "every PSB is read as a PSB");

    // The TNT fast path reads the same packets.
    let fast = read_all(&mut PacketReader::new(&stream, start, len, cycle_acc), true);
    assert_eq!(fast, items, "try_tnt disagrees with next_packet");

    // Cut the range at a packet boundary: a second reader resumed with the first's cursor
    // state (as a walker snapshot does) reads the same packets.
    if items.len() > 1 {
        let cut = items.len() / 2;
        let mut r1 = PacketReader::new(&stream, start, len, cycle_acc);
        let mut got = Vec::new();
        for _ in 0..cut {
            got.push(r1.next_packet().expect("as many packets as before"));
        }
        let (at, wc) = (r1.pos(), r1.wants_cyc());
        let mut r2 = PacketReader::new(&stream, start, len, cycle_acc);
        r2.seek(at, wc);
        got.extend(read_all(&mut r2, false));
        assert_eq!(
            got, items,
            "a reader resumed by seek reads the same packets"
        );
    }
}

/// Packet layer: `PacketReader` over arbitrary bytes, with and without Cycle_Acc, from
/// offset 0 and from the first PSB.
///
/// - every packet read re-encodes (with the hardware model's encoder, an independent
///   implementation) to exactly the bytes it was read from, and `parse_one` agrees;
/// - the reader always advances, packets tile the stream, and after an error it resumes
///   at the next PSB (or the end);
/// - every PSB `find_psbs` reports is read as a PSB packet, wherever reading starts;
/// - the TNT fast path (`try_tnt`) agrees with `next_packet`;
/// - a reader resumed with `seek` reads what one reader reads.
pub fn packets(data: &[u8]) {
    let first_psb = find_psbs(&TraceStream::linear(data)).first().copied();
    for cycle_acc in [false, true] {
        packets_from(data, 0, cycle_acc);
        if let Some(p) = first_psb.filter(|&p| p != 0) {
            packets_from(data, p, cycle_acc);
        }
    }
}

// ---------------------------------------------------------------------------------------
// sync_ring

/// PSB sync over ring dumps. Bytes 0..2: the ring offset (RTIT_OFFSET; may exceed the
/// length); 2..4: where `window` is probed; the rest: the dump. A `TraceStream::ring` cut
/// there must behave exactly like the rotated bytes laid out linearly (`to_vec`): same
/// bytes through `byte` and `window`, same PSBs from `find_psbs` (including PSBs that
/// straddle the seam), `next_psb` from the probe offset and from each PSB's neighbours
/// agreeing with that list, same packets from a `PacketReader`, with and without Cycle_Acc.
/// And the rotated bytes as spans of a larger buffer (`TraceStream::spans`, a perf.data's
/// AUX area) read as the linear copy, by RTIT's and Intel PT's readers.
pub fn sync_ring(input: &[u8]) {
    if input.len() < 4 {
        return;
    }
    let off = u16::from_le_bytes([input[0], input[1]]) as usize;
    let probe = u16::from_le_bytes([input[2], input[3]]) as u64;
    let data = &input[4..];
    let ring = TraceStream::ring(data, off);
    let len = ring.len();
    assert_eq!(len, data.len() as u64);
    let rotated = ring.to_vec(0, len);
    let r = off.min(data.len());
    assert_eq!(&rotated[..data.len() - r], &data[r..]);
    assert_eq!(&rotated[data.len() - r..], &data[..r]);
    let linear = TraceStream::linear(&rotated);

    let psbs = find_psbs(&ring);
    assert_eq!(
        psbs,
        find_psbs(&linear),
        "PSBs of the ring and of its rotated copy"
    );
    let froms = psbs.iter().flat_map(|&p| [p.saturating_sub(1), p, p + 1]);
    for from in froms.chain([0, probe, len]) {
        let want = psbs.iter().copied().find(|&q| q >= from);
        assert_eq!(next_psb(&ring, from), want, "next_psb(ring, {from})");
        assert_eq!(next_psb(&linear, from), want, "next_psb(linear, {from})");
    }

    let mut scratch = [0u8; 16];
    for n in [0usize, 1, 2, 9, 16] {
        let p = probe % (len + 1);
        let got = ring.window(p, n, &mut scratch).to_vec();
        let end = (p + n as u64).min(len) as usize;
        assert_eq!(got, &rotated[p as usize..end], "window({p}, {n})");
    }

    for cycle_acc in [false, true] {
        let start = psbs.first().copied().unwrap_or(0);
        let a: Vec<_> = PacketReader::new(&ring, start, len, cycle_acc).collect();
        let b: Vec<_> = PacketReader::new(&linear, start, len, cycle_acc).collect();
        assert_eq!(a, b, "packets of the ring and of its rotated copy");
    }

    // The rotated bytes again as spans of a larger buffer (a perf.data's AUXTRACE buffers,
    // with record headers between them): cut every `off % 61 + 1` bytes, two bytes of a
    // PSB's pattern between spans (a PSB must not be made of them). The same bytes,
    // PSBs, windows and packets as the linear copy, for RTIT and Intel PT.
    let cut = off % 61 + 1;
    let mut buf = Vec::new();
    let mut spans = Vec::new();
    for (i, piece) in rotated.chunks(cut).enumerate() {
        buf.extend_from_slice(&[0x02, 0x82]);
        spans.push(Span {
            at: (i * cut) as u64,
            from: buf.len(),
            len: piece.len(),
        });
        buf.extend_from_slice(piece);
    }
    assert!(TraceStream::check_spans(buf.len(), &spans));
    let joined = TraceStream::spans(&buf, &spans);
    assert_eq!(joined.len(), len);
    assert_eq!(joined.to_vec(0, len), rotated, "the spans' bytes");
    assert_eq!(find_psbs(&joined), psbs, "PSBs of the spans");
    let pt_psbs = pt::sync::find_psbs(&linear);
    assert_eq!(
        pt::sync::find_psbs(&joined),
        pt_psbs,
        "PT PSBs of the spans"
    );
    for n in [0usize, 1, 2, 9, 16] {
        let p = probe % (len + 1);
        let got = joined.window(p, n, &mut scratch).to_vec();
        let end = (p + n as u64).min(len) as usize;
        assert_eq!(got, &rotated[p as usize..end], "spans: window({p}, {n})");
    }
    let start = psbs.first().copied().unwrap_or(0);
    let a: Vec<_> = PacketReader::new(&joined, start, len, false).collect();
    let b: Vec<_> = PacketReader::new(&linear, start, len, false).collect();
    assert_eq!(a, b, "packets of the spans");
    let start = pt_psbs.first().copied().unwrap_or(0);
    let errata = pt::cpu::Errata::default();
    let a: Vec<_> = pt::sync::PacketReader::new(&joined, start, len, errata).collect();
    let b: Vec<_> = pt::sync::PacketReader::new(&linear, start, len, errata).collect();
    assert_eq!(a, b, "Intel PT packets of the spans");
}

// ---------------------------------------------------------------------------------------
// walk and stitch_diff

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
        a.add_elf("jumptable", JUMPTABLE, None, None)
            .expect("jumptable ELF");
        let mut b = ImageSet::new();
        b.add_elf("busybox", BUSYBOX, None, Some(0x1000))
            .expect("busybox ELF");
        b.add_elf("busybox", BUSYBOX, None, Some(0x2000))
            .expect("busybox ELF");
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

impl Case {
    pub const HEADER: usize = 4;

    pub fn parse(data: &[u8]) -> Option<Case> {
        if data.len() < Self::HEADER {
            return None;
        }
        let mut trace = Vec::with_capacity(PSB_BYTES.len() + data.len() - Self::HEADER);
        trace.extend_from_slice(&PSB_BYTES);
        trace.extend_from_slice(&data[Self::HEADER..]);
        Some(Case {
            images: data[0] & 1,
            ratio: (data[0] & 2 != 0).then_some(data[1]),
            starts_at_enable: data[0] & 4 == 0,
            ctl: u16::from_le_bytes([data[2], data[3]]) as u64,
            trace,
        })
    }

    /// `f` over the case's decode input.
    fn with_input<R>(&self, f: impl FnOnce(&Input<'_, tracemill_decode::Rtit>) -> R) -> R {
        let stream = TraceStream::linear(&self.trace);
        let cfg = TraceConfig::from_ctl(self.ctl);
        f(&Input {
            spaces: None,
            stream: &stream,
            images: images(self.images),
            cfg,
            timing: TimingConfig::new(&cfg, self.ratio, self.starts_at_enable),
        })
    }

    /// Decode with chunks of at least `chunk_bytes` (`u64::MAX`: sequential).
    pub fn decode(&self, chunk_bytes: u64) -> Decoded {
        self.with_input(|input| decode_all(input, chunk_bytes))
    }

    /// [`Case::decode`] keeping no row: counted, with coverage when `cover`.
    pub fn tally(&self, chunk_bytes: u64, cover: bool) -> Tallied {
        self.with_input(|input| tally_either(input, chunk_bytes, cover))
    }
}

/// A decode of `input` that keeps no row ([`tracemill_decode::tally`]).
fn tally_either<F: tracemill_decode::Format>(
    input: &Input<'_, F>,
    chunk_bytes: u64,
    cover: bool,
) -> Tallied {
    if cover {
        tally_all::<F, Covered>(input, chunk_bytes)
    } else {
        tally_all::<F, Counted>(input, chunk_bytes)
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
/// long as the table, the columns documented as never decreasing do not, rows and events
/// lie inside the trace.
pub fn check_contracts(d: &Decoded, trace_len: u64) {
    check_contracts_of(d, trace_len, false)
}

/// [`check_contracts`] for an Intel PT decode. Deferred TIPs (SDM 36.4.2.3) send the TIP
/// of an indirect branch after the TNT that holds the bits of the conditional branches
/// that followed it: such a `cond` (or compressed `ret`) row comes after the TIP's row with
/// its TNT's lower offset. `branches.offset` then never decreases among the rows TNT bits
/// decide, nor among the rows a TIP or FUP decides; `jmp` and `call` rows (no packet) are
/// left out of the order.
pub fn check_pt_contracts(d: &Decoded, trace_len: u64) {
    check_contracts_of(d, trace_len, true)
}

fn check_contracts_of(d: &Decoded, trace_len: u64, deferred_tips: bool) {
    let r = &d.rows;
    let n = r.len();
    assert_eq!(r.target.len(), n, "target column length");
    assert_eq!(r.kind.len(), n, "kind column length");
    assert_eq!(r.taken.len(), n, "taken column length");
    assert_eq!(r.compressed.len(), n, "compressed column length");
    assert_eq!(r.insns.len(), n, "insns column length");
    // A timing or CR3 column is empty while no row has a value (all null), else whole.
    assert!(r.tsc.is_empty() || r.tsc.len() == n, "tsc column length");
    assert!(
        r.cycles.is_empty() || r.cycles.len() == n,
        "cycles column length"
    );
    assert!(r.cr3.is_empty() || r.cr3.len() == n, "cr3 column length");
    assert_eq!(r.offset.len(), n, "offset column length");
    let t = &d.timing_rows;
    let m = t.len();
    if deferred_tips {
        use tracemill_schemas::BranchKind;
        let by_tnt = |i: usize| {
            r.kind[i] == BranchKind::Cond as u8
                || (r.kind[i] == BranchKind::Ret as u8 && r.compressed[i])
        };
        let no_packet =
            |i: usize| r.kind[i] == BranchKind::Jmp as u8 || r.kind[i] == BranchKind::Call as u8;
        non_decreasing(
            "branches.offset of rows TNT bits decide",
            (0..n).filter(|&i| by_tnt(i)).map(|i| r.offset[i]),
        );
        non_decreasing(
            "branches.offset of rows a TIP or FUP decides",
            (0..n)
                .filter(|&i| !by_tnt(i) && !no_packet(i))
                .map(|i| r.offset[i]),
        );
    } else {
        non_decreasing("branches.offset", r.offset.iter().copied());
    }
    non_decreasing("branches.tsc", (0..n).filter_map(|i| r.tsc.get(i)));
    non_decreasing("branches.cycles", (0..n).filter_map(|i| r.cycles.get(i)));
    if let Some(&o) = r.offset.iter().max() {
        assert!(o < trace_len, "row offset {o} past the trace ({trace_len})");
    }
    non_decreasing("events.seq", d.events.iter().map(|e| e.seq));
    non_decreasing("events.offset", d.events.iter().map(|e| e.offset));
    for e in &d.events {
        assert!(e.seq <= n as u64, "event seq {} past the rows ({n})", e.seq);
        assert!(e.offset <= trace_len, "event offset past the trace");
    }
    non_decreasing("timing.offset", t.offset.iter().copied());
    non_decreasing("timing.tsc", (0..m).filter_map(|i| t.tsc.get(i)));
    non_decreasing("timing.cycles", (0..m).filter_map(|i| t.cycles.get(i)));
}

/// The flow walker over fixed real code images: arbitrary trace bytes behind a PSB,
/// RTIT_CTL and bundle facts from the input's first bytes ([`Case`]). No panic, no hang,
/// memory bounded by the trace, and the output keeps the table contracts.
pub fn walk(data: &[u8]) {
    let Some(case) = Case::parse(data) else {
        return;
    };
    let d = case.decode(u64::MAX);
    check_contracts(&d, case.trace.len() as u64);
}

/// Differential: the stitched chunked decode against the sequential one. For any input,
/// `decode_all` with one chunk and with chunks of 1, 64 and 4096 bytes (cut at PSBs) gives
/// identical branches (timing columns included), events, timing and coverage.
pub fn stitch_diff(data: &[u8]) {
    let Some(case) = Case::parse(data) else {
        return;
    };
    chunks_agree(&case);
}

/// A decode of a trace by one of the two formats ([`Case`], [`PtCase`]).
pub trait Decodes {
    fn trace_len(&self) -> u64;
    /// The table contracts of the format ([`check_contracts`], [`check_pt_contracts`]).
    fn check(&self, d: &Decoded);
    /// Decode with chunks of at least `chunk_bytes` (`u64::MAX`: sequential).
    fn decode(&self, chunk_bytes: u64) -> Decoded;
    /// The same keeping no row: counted, with coverage when `cover`.
    fn tally(&self, chunk_bytes: u64, cover: bool) -> Tallied;
}

impl Decodes for Case {
    fn trace_len(&self) -> u64 {
        self.trace.len() as u64
    }
    fn check(&self, d: &Decoded) {
        check_contracts(d, self.trace_len())
    }
    fn decode(&self, chunk_bytes: u64) -> Decoded {
        Case::decode(self, chunk_bytes)
    }
    fn tally(&self, chunk_bytes: u64, cover: bool) -> Tallied {
        Case::tally(self, chunk_bytes, cover)
    }
}

/// The sequential decode keeps the contracts, and chunks of 1, 64 and 4096 bytes give
/// the same branches, events, timing table and coverage; the step walk, the memoized
/// walk's reference (`decode/src/memo.rs`), gives exactly the same, sequentially and in
/// chunks of 64 bytes; and a decode that keeps no row (`--tables events`, `coverage`)
/// finds the same counts, events, timing table and coverage. Returns the sequential
/// decode.
fn chunks_agree(case: &impl Decodes) -> Decoded {
    let seq = case.decode(u64::MAX);
    case.check(&seq);
    memo_agrees(case, u64::MAX, &seq);
    tally_agrees(case, u64::MAX, &seq);
    for chunk in [1, 64, 4096] {
        let par = case.decode(chunk);
        if chunk == 64 {
            memo_agrees(case, chunk, &par);
            tally_agrees(case, chunk, &par);
        }
        if seq.rows != par.rows {
            let (a, b) = (&seq.rows, &par.rows);
            let i = (0..a.len().min(b.len()))
                .find(|&i| a.row(i) != b.row(i) || a.in_tx(i) != b.in_tx(i))
                .unwrap_or(a.len().min(b.len()));
            panic!(
                "branches differ at chunk size {chunk}: {} rows against {}, first at row {i}: \
                 {:x?} (in_tx {}) against {:x?} (in_tx {})",
                a.len(),
                b.len(),
                (i < a.len()).then(|| a.row(i)),
                a.in_tx(i),
                (i < b.len()).then(|| b.row(i)),
                b.in_tx(i),
            );
        }
        if seq.events != par.events {
            let (a, b) = (&seq.events, &par.events);
            let i = (0..a.len().min(b.len()))
                .find(|&i| a[i] != b[i])
                .unwrap_or(a.len().min(b.len()));
            panic!(
                "events differ at chunk size {chunk}: {} events against {}, first at {i}: \
                 {:?} against {:?}",
                a.len(),
                b.len(),
                a.get(i),
                b.get(i),
            );
        }
        assert_eq!(
            seq.timing_rows, par.timing_rows,
            "timing differs at chunk size {chunk}"
        );
        assert_eq!(
            seq.coverage, par.coverage,
            "coverage differs at chunk size {chunk}"
        );
    }
    seq
}

/// The instructions of the `tail` event (none without one): those after the last row.
pub fn tail_insns(events: &[tracemill_decode::rows::EventRow]) -> u64 {
    let tails: Vec<_> = events
        .iter()
        .filter(|e| e.kind == tracemill_schemas::EventKind::Tail)
        .collect();
    assert!(tails.len() <= 1, "more than one tail event");
    if let Some(t) = tails.first() {
        assert!(
            std::ptr::eq(*t, events.last().unwrap()),
            "the tail event is not the last"
        );
    }
    tails.first().map_or(0, |t| {
        t.detail.parse().expect("a tail's detail is its count")
    })
}

/// Decodes of `case` that keep no row, with chunks of `chunk` bytes, find what the full
/// decode `full` did: the rows' counts, events, timing table, fallbacks and (when asked)
/// coverage.
fn tally_agrees(case: &impl Decodes, chunk: u64, full: &Decoded) {
    // The rows' counts, and the tail's instructions (`Stitcher::finish`).
    let mut stats = PieceStats::of(&full.rows);
    stats.insns += tail_insns(&full.events);
    assert_eq!(
        full.stats, stats,
        "counts of the full decode, chunk {chunk}"
    );
    for cover in [false, true] {
        let t = case.tally(chunk, cover);
        assert_eq!(t.stats, stats, "tally counts, chunk {chunk}, cover {cover}");
        assert_eq!(t.events, full.events, "tally events, chunk {chunk}");
        assert_eq!(
            t.timing_rows, full.timing_rows,
            "tally timing, chunk {chunk}"
        );
        assert_eq!(
            t.fallbacks, full.fallbacks,
            "tally fallbacks, chunk {chunk}"
        );
        if cover {
            assert_eq!(t.coverage, full.coverage, "tally coverage, chunk {chunk}");
        }
    }
}

/// The step walk decodes `case` with chunks of `chunk` bytes exactly as the memoized walk
/// did (`memo`): branches, events, timing facts and table, coverage, fallbacks.
fn memo_agrees(case: &impl Decodes, chunk: u64, memo: &Decoded) {
    let step = tracemill_decode::block::memo::step_walk_only(|| case.decode(chunk));
    let (a, b) = (&memo.rows, &step.rows);
    if a != b {
        let i = (0..a.len().min(b.len()))
            .find(|&i| a.row(i) != b.row(i))
            .unwrap_or(a.len().min(b.len()));
        panic!(
            "memo and step walks differ at chunk size {chunk}: {} rows against {}, first at \
             row {i}: {:x?} against {:x?}",
            a.len(),
            b.len(),
            (i < a.len()).then(|| a.row(i)),
            (i < b.len()).then(|| b.row(i)),
        );
    }
    if memo.events != step.events {
        let (a, b) = (&memo.events, &step.events);
        let i = (0..a.len().min(b.len()))
            .find(|&i| a[i] != b[i])
            .unwrap_or(a.len().min(b.len()));
        panic!(
            "memo and step walks: events differ at chunk size {chunk}, first at {i}: {:?} \
             against {:?}",
            a.get(i),
            b.get(i),
        );
    }
    assert_eq!(memo.timing, step.timing, "memo/step timing, chunk {chunk}");
    assert_eq!(
        memo.timing_rows, step.timing_rows,
        "memo/step timing table, chunk {chunk}"
    );
    if memo.coverage != step.coverage {
        panic!(
            "memo/step coverage, chunk {chunk}: {}",
            coverage_diff(&memo.coverage, &step.coverage)
        );
    }
    assert_eq!(
        memo.fallbacks, step.fallbacks,
        "memo/step fallbacks, chunk {chunk}"
    );
}

/// Where two coverages differ (the first few blocks and edges), for a failure message:
/// the maps whole run to pages.
fn coverage_diff(
    a: &tracemill_decode::coverage::Coverage,
    b: &tracemill_decode::coverage::Coverage,
) -> String {
    let mut out = Vec::new();
    for k in a.blocks.keys().chain(b.blocks.keys()) {
        let (x, y) = (a.blocks.get(k), b.blocks.get(k));
        if x != y && out.len() < 12 {
            out.push(format!(
                "block {:#x}..={:#x}: {x:?} against {y:?}",
                k.0, k.1
            ));
        }
    }
    for k in a.edges.keys().chain(b.edges.keys()) {
        let (x, y) = (a.edges.get(k), b.edges.get(k));
        if x != y && out.len() < 24 {
            out.push(format!(
                "edge {:#x} -> {:#x} ({}): {x:?} against {y:?}",
                k.0, k.1, k.2
            ));
        }
    }
    out.dedup();
    out.join("; ")
}

/// The size an input is stretched to by [`stretch`].
pub const STRETCH_BYTES: usize = 256 << 10;

/// Work that follows the trace's content, not its length: the input (a [`Case`] header,
/// then a prefix length byte, the prefix, and a unit) becomes a trace of the prefix, the
/// unit repeated to [`STRETCH_BYTES`], and the prefix again, so that one small input makes
/// a long stretch of whatever the unit is (megabytes of PSBs and MTCs after a FUP, in the
/// case that once took 4.15 GB for 8 MB). Decoded sequentially and in 4 KiB chunks, the
/// two must agree, and neither may read the trace more than a few times over
/// (`flow::bytes_read_on_this_thread`) nor time its marks more than a few times over
/// (`Decoded::marks_handled`): the quadratic re-reads and carries behind that memory show
/// there, at any size.
pub fn stretch(data: &[u8]) {
    if data.len() < Case::HEADER + 2 {
        return;
    }
    let (head, rest) = data.split_at(Case::HEADER);
    let k = (rest[0] as usize).min(rest.len() - 1);
    let (prefix, unit) = rest[1..].split_at(k);
    if unit.is_empty() {
        return;
    }
    let Some(case) = Case::parse(&stretched(head, prefix, unit)) else {
        return;
    };
    stretch_bounds(&case);
}

/// [`stretch`]'s checks: sequential and 4 KiB chunks agree and keep the contracts, the
/// walkers read the trace at most four times over and the timeline handles its marks at
/// most three times over.
fn stretch_bounds(case: &impl Decodes) {
    let len = case.trace_len();
    let mut runs = Vec::new();
    for chunk in [u64::MAX, 4096] {
        let before = tracemill_decode::flow::bytes_read_on_this_thread();
        let searched_before = tracemill_decode::stream::bytes_searched_on_this_thread();
        let d = case.decode(chunk);
        let read = tracemill_decode::flow::bytes_read_on_this_thread() - before;
        let searched = tracemill_decode::stream::bytes_searched_on_this_thread() - searched_before;
        case.check(&d);
        // The PSB searches (the planner's, each reader's, each look-ahead's) scan each
        // byte a few times, never again at every packet (Intel PT OVFs back to back).
        assert!(
            searched <= 8 * len + (256 << 10),
            "chunks of {chunk}: PSB searches scanned {searched} bytes of a {len}-byte trace"
        );
        // Bodies read their chunk, stitches a chunk's head again (or all of it), and an
        // undone look-ahead at most 4 KiB per chunk again: well under four times over.
        assert!(
            read <= 4 * len + (64 << 10),
            "chunks of {chunk}: the walkers read {read} bytes of a {len}-byte trace"
        );
        let marks = d.timing_rows.len() as u64 + d.events.len() as u64;
        assert!(
            d.marks_handled <= 3 * marks + 4096,
            "chunks of {chunk}: the timeline handled {} marks of {marks}",
            d.marks_handled
        );
        runs.push(d);
    }
    let (seq, par) = (&runs[0], &runs[1]);
    assert_eq!(seq.rows, par.rows, "branches differ in 4 KiB chunks");
    assert_eq!(seq.events, par.events, "events differ in 4 KiB chunks");
    assert_eq!(
        seq.timing_rows, par.timing_rows,
        "timing differs in 4 KiB chunks"
    );
}

/// Repeat `unit` after `head` and `prefix` up to [`STRETCH_BYTES`], then `prefix` again.
fn stretched(head: &[u8], prefix: &[u8], unit: &[u8]) -> Vec<u8> {
    let mut bytes = head.to_vec();
    bytes.extend_from_slice(prefix);
    while bytes.len() < STRETCH_BYTES {
        bytes.extend_from_slice(unit);
    }
    bytes.extend_from_slice(prefix);
    bytes
}

// ---------------------------------------------------------------------------------------
// pt_walk, pt_stitch_diff, pt_stretch

/// The processors a [`PtCase`] names (header byte 0, bits 7:5): none (no errata), then one
/// of each group of libipt's errata table (`decode/src/pt/cpu.rs`).
pub const PT_CPUS: [Option<(u16, u8)>; 8] = [
    None,
    Some((6, 0x4e)), // Skylake client: BDM70 SKD007 SKD010 SKD022 SKL014 SKL168
    Some((6, 0x55)), // Skylake server: BDM70 SKD022 SKL014 SKZ84
    Some((6, 0x3d)), // Broadwell: BDM70 BDM64
    Some((6, 0x5c)), // Apollo Lake: APL11 APL12
    Some((6, 0x97)), // Alder Lake: BDM70 SKD022 APL11
    Some((6, 0x8f)), // Sapphire Rapids: BDM70 SKD022 SKZ84
    Some((6, 0x7a)), // Goldmont Plus: APL11
];

/// A fuzz input read as an Intel PT decode over the images of [`images`]:
///
/// | bytes | meaning |
/// |---|---|
/// | 0 | bit 0: image set; bit 1: RET compression off (DisRETC); bits 2, 3, 4: CYC, MTC, TSC enabled; bits 7:5: the processor ([`PT_CPUS`]), whose errata apply |
/// | 1 | bits 3:0: MTCFreq; bits 7:4: CPUID.15H:EAX (TSC/CTC ratio denominator; 0: ratio unknown) |
/// | 2 | CPUID.15H:EBX (TSC/CTC ratio numerator) |
/// | 3 | the maximum non-turbo ratio (`nom_freq`; 0 unknown) |
/// | 4.. | the trace; a PSB and PSBEND are put in front so that something decodes |
pub struct PtCase {
    pub images: u8,
    pub cfg: pt::PtConfig,
    pub trace: Vec<u8>,
    /// Where trace bytes were lost ([`Break`]; [`PtCase::parse_with_breaks`]): none from
    /// [`PtCase::parse`].
    pub breaks: Vec<Break>,
}

/// The trailer that gives a [`PtCase`] breaks ([`PtCase::parse_with_breaks`]): an input
/// that ends with these three bytes and a selector byte.
pub const BREAKS_TAG: &[u8; 3] = b"BRK";

impl PtCase {
    pub const HEADER: usize = 4;

    /// What is put in front of the trace: PSB, PSBEND.
    pub fn prologue() -> Vec<u8> {
        let mut v = pt::packet::PSB_BYTES.to_vec();
        v.extend_from_slice(&[0x02, 0x23]);
        v
    }

    /// The header byte 0 for these settings (the seed generator writes headers with it).
    pub fn flags(
        images: u8,
        ret_compression: bool,
        cyc: bool,
        mtc: bool,
        tsc: bool,
        cpu: u8,
    ) -> u8 {
        (images & 1)
            | (!ret_compression as u8) << 1
            | (cyc as u8) << 2
            | (mtc as u8) << 3
            | (tsc as u8) << 4
            | (cpu & 7) << 5
    }

    pub fn parse(data: &[u8]) -> Option<PtCase> {
        if data.len() < Self::HEADER {
            return None;
        }
        let f = data[0];
        let mut cfg = pt::PtConfig {
            ret_compression: f & 2 == 0,
            cyc: f & 4 != 0,
            mtc: f & 8 != 0,
            tsc: f & 16 != 0,
            mtc_freq: data[1] & 0xF,
            tsc_ctc_ratio_d: (data[1] >> 4) as u32,
            tsc_ctc_ratio_n: data[2] as u32,
            nom_freq: data[3],
            ..pt::PtConfig::default()
        };
        if cfg.tsc_ctc_ratio_d == 0 {
            cfg.tsc_ctc_ratio_n = 0;
        }
        if let Some((family, model)) = PT_CPUS[(f >> 5) as usize] {
            cfg.set_cpu(pt::cpu::Cpu {
                family,
                model,
                stepping: 0,
            })
            .expect("a processor of the errata table");
        }
        let mut trace = Self::prologue();
        trace.extend_from_slice(&data[Self::HEADER..]);
        Some(PtCase {
            images: f & 1,
            cfg,
            trace,
            breaks: Vec::new(),
        })
    }

    /// [`PtCase::parse`], with bytes lost before some PSBs when `data` ends with
    /// [`BREAKS_TAG`] and a selector byte `s` (the four bytes are no part of the trace;
    /// any other input reads as [`PtCase::parse`] reads it, with no break). The breaks
    /// ([`Break`], as a perf.data AUX area's gaps make them) are at PSBs other than the
    /// prologue's, as [`pt::sync::next_psb`] finds them walking forward
    /// ([`pt::sync::find_psbs`]): from the `phase`-th on, every `k`-th, where
    ///
    /// | bits of `s` | meaning |
    /// |---|---|
    /// | 2:0 | `k - 1` (every PSB to every eighth) |
    /// | 4:3 | `phase` (0 to 3 PSBs passed over first) |
    /// | 7:5 | what was lost ([`Lost`]): 0 `Missing`, 1 `Overwritten`, 2 `Truncated`, else the three in turn |
    pub fn parse_with_breaks(data: &[u8]) -> Option<PtCase> {
        let n = data.len();
        let tagged = n > Self::HEADER + BREAKS_TAG.len()
            && data[n - 1 - BREAKS_TAG.len()..n - 1] == BREAKS_TAG[..];
        if !tagged {
            return Self::parse(data);
        }
        let s = data[n - 1];
        let mut case = Self::parse(&data[..n - 1 - BREAKS_TAG.len()])?;
        let (k, phase, kind) = ((s & 7) as usize + 1, ((s >> 3) & 3) as usize, s >> 5);
        let psbs = pt::sync::find_psbs(&TraceStream::linear(&case.trace));
        case.breaks = psbs
            .into_iter()
            .filter(|&p| p > 0)
            .skip(phase)
            .step_by(k)
            .enumerate()
            .map(|(i, at)| {
                let record = 0x1000 + 0x40 * i as u64;
                let from = at + 0x100 * i as u64;
                let to = from + 1 + (at & 0xff);
                let lost = match if kind < 3 { kind as usize } else { i % 3 } {
                    0 => Lost::Missing { from, to, record },
                    1 => Lost::Overwritten { from, to, record },
                    _ => Lost::Truncated { at: from, record },
                };
                Break { at, lost }
            })
            .collect();
        Some(case)
    }

    /// `f` over the case's decode input.
    fn with_input<R>(&self, f: impl FnOnce(&Input<'_, tracemill_decode::Pt>) -> R) -> R {
        let stream = TraceStream::linear(&self.trace).with_breaks(&self.breaks);
        f(&Input {
            spaces: None,
            stream: &stream,
            images: images(self.images),
            timing: pt::clock::PtTiming::new(&self.cfg),
            cfg: self.cfg.clone(),
        })
    }

    /// Decode with chunks of at least `chunk_bytes` (`u64::MAX`: sequential).
    pub fn decode(&self, chunk_bytes: u64) -> Decoded {
        self.with_input(|input| decode_all(input, chunk_bytes))
    }

    /// [`PtCase::decode`] keeping no row: counted, with coverage when `cover`.
    pub fn tally(&self, chunk_bytes: u64, cover: bool) -> Tallied {
        self.with_input(|input| tally_either(input, chunk_bytes, cover))
    }
}

impl Decodes for PtCase {
    fn trace_len(&self) -> u64 {
        self.trace.len() as u64
    }
    fn check(&self, d: &Decoded) {
        check_pt_contracts(d, self.trace_len())
    }
    fn decode(&self, chunk_bytes: u64) -> Decoded {
        PtCase::decode(self, chunk_bytes)
    }
    fn tally(&self, chunk_bytes: u64, cover: bool) -> Tallied {
        PtCase::tally(self, chunk_bytes, cover)
    }
}

/// The Intel PT flow walker over fixed real code images: arbitrary trace bytes behind a
/// PSB+, the recording settings and processor from the input's first bytes ([`PtCase`]).
/// No panic, no hang, memory bounded by the trace; the output keeps the table contracts,
/// and the walker reads the trace at most four times over.
pub fn pt_walk(data: &[u8]) {
    let Some(case) = PtCase::parse(data) else {
        return;
    };
    let len = case.trace_len();
    let before = tracemill_decode::flow::bytes_read_on_this_thread();
    let searched_before = tracemill_decode::stream::bytes_searched_on_this_thread();
    let d = case.decode(u64::MAX);
    let read = tracemill_decode::flow::bytes_read_on_this_thread() - before;
    let searched = tracemill_decode::stream::bytes_searched_on_this_thread() - searched_before;
    check_pt_contracts(&d, len);
    assert!(
        searched <= 8 * len + (256 << 10),
        "PSB searches scanned {searched} bytes of a {len}-byte trace"
    );
    assert!(
        read <= 4 * len + (64 << 10),
        "the walker read {read} bytes of a {len}-byte trace"
    );
}

/// Intel PT differential: `decode_all` with one chunk against chunks of 1, 64 and 4096
/// bytes (cut at PSBs): identical branches (timing columns included), events, timing and
/// coverage, as [`stitch_diff`] for RTIT.
///
/// An input that ends with [`BREAKS_TAG`] and a selector byte
/// ([`PtCase::parse_with_breaks`]) has bytes lost before some of its PSBs (perf.data AUX
/// gaps, [`Break`]): every decode, sequential, chunked, memoized or step walk, tallied,
/// reads the stream with those breaks, and must still agree; and the sequential decode
/// reports each break the decode synchronized before (all of them: the prologue's PSB is
/// at 0) as exactly one `error` event at its PSB, naming the loss ("trace lost before this
/// PSB"), and no other event names one.
pub fn pt_stitch_diff(data: &[u8]) {
    let Some(case) = PtCase::parse_with_breaks(data) else {
        return;
    };
    let seq = chunks_agree(&case);
    losses_reported(&case, &seq);
}

/// The `error` events of `d` that name lost trace bytes are one at each of `case`'s breaks
/// at or after the first PSB (where a decode synchronizes), in order.
pub fn losses_reported(case: &PtCase, d: &Decoded) {
    let stream = TraceStream::linear(&case.trace);
    let first = pt::sync::next_psb(&stream, 0).unwrap_or(u64::MAX);
    let want: Vec<u64> = case
        .breaks
        .iter()
        .map(|b| b.at)
        .filter(|&at| at >= first)
        .collect();
    let got: Vec<u64> = d
        .events
        .iter()
        .filter(|e| e.detail.contains("trace lost before this PSB"))
        .inspect(|e| {
            assert_eq!(
                e.kind,
                tracemill_schemas::EventKind::Error,
                "a loss reported as {:?} at {}",
                e.kind,
                e.offset
            )
        })
        .map(|e| e.offset)
        .collect();
    assert_eq!(
        got, want,
        "losses reported at these offsets, breaks at those (after the first PSB, {first})"
    );
}

/// Intel PT's [`stretch`]: a [`PtCase`] header, a prefix length byte, the prefix and a
/// unit; the unit repeated to [`STRETCH_BYTES`] between two copies of the prefix. Decoded
/// sequentially and in 4 KiB chunks, the two agree, keep the contracts, read the trace at
/// most four times over and handle its marks at most three times over.
pub fn pt_stretch(data: &[u8]) {
    if data.len() < PtCase::HEADER + 2 {
        return;
    }
    let (head, rest) = data.split_at(PtCase::HEADER);
    let k = (rest[0] as usize).min(rest.len() - 1);
    let (prefix, unit) = rest[1..].split_at(k);
    if unit.is_empty() {
        return;
    }
    let Some(case) = PtCase::parse(&stretched(head, prefix, unit)) else {
        return;
    };
    stretch_bounds(&case);
}

// ---------------------------------------------------------------------------------------
// bundle_toml

/// `bundle.toml`: arbitrary text parsed as a `Manifest` the way `Manifest::load` does
/// (`toml::from_str`). No panic; a manifest that parses serializes (`to_toml` must not hit
/// its `expect`), reads back to the same text, and its facts turn into a trace
/// configuration, timing configuration and stream view as `pipeline/src/bundle.rs` does.
pub fn bundle_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_u64(text);
    let Ok(m) = toml::from_str::<Manifest>(text) else {
        return;
    };
    let t1 = m.to_toml();
    let m2: Manifest =
        toml::from_str(&t1).unwrap_or_else(|e| panic!("{t1}\ndoes not read back: {e}"));
    assert_eq!(m2.to_toml(), t1, "manifest text is not stable");
    let cfg = TraceConfig::from_ctl(m.rtit_ctl);
    let _ = cfg.reserved_bits();
    let _ = TimingConfig::new(&cfg, m.guaranteed_ratio, m.ring_offset.is_none());
    // Intel PT facts give a configuration or a message, whatever the [pt] values.
    let _ = m.pt_config();
    let _ = m.trace_path(std::path::Path::new("bundle"));
    // The collected forms assemble (or refuse) any file without panicking.
    if let Some(t) = &m.topa {
        let _ = crate::collected::assemble_topa(t, data);
    }
    if let Some(h) = &m.trace_hub {
        let _ = crate::collected::assemble_trace_hub(h, data);
    }
    let trace = [0xC0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0x55];
    let stream = match m.ring_offset {
        Some(r) => TraceStream::ring(&trace, r as usize),
        None => TraceStream::linear(&trace),
    };
    // The ring offset applies to any trace; a PSB cut by the seam is no PSB.
    let rotated = stream.to_vec(0, stream.len());
    assert_eq!(
        find_psbs(&stream),
        find_psbs(&TraceStream::linear(&rotated))
    );
}

// ---------------------------------------------------------------------------------------
// pt_packets

type PtItem = Result<pt::Parsed, pt::PacketError>;

fn pt_read_all(r: &mut pt::PacketReader<'_>, fast: bool) -> Vec<PtItem> {
    let mut out = Vec::new();
    let mut last = r.pos();
    loop {
        let item = match fast.then(|| r.try_tnt()).flatten() {
            Some((t, off)) => Some(Ok(pt::Parsed {
                offset: off,
                size: 1,
                packet: pt::Packet::Tnt8(t),
            })),
            None => r.next_packet(),
        };
        let Some(item) = item else { break };
        assert!(r.pos() > last, "reader did not advance at {last}");
        last = r.pos();
        out.push(item);
    }
    out
}

fn pt_packets_from(data: &[u8], start: u64, errata: pt::cpu::Errata) {
    let stream = TraceStream::linear(data);
    let psbs = pt::sync::find_psbs(&stream);
    let len = stream.len();
    let items = pt_read_all(
        &mut pt::PacketReader::new(&stream, start, len, errata),
        false,
    );
    let mut pos = start;
    let mut seen_psbs = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item {
            Ok(p) => {
                assert_eq!(
                    p.offset, pos,
                    "packet {i} does not start where the last ended"
                );
                assert!(p.size > 0);
                let end = p.offset + p.size as u64;
                assert!(end <= len, "packet {i} runs past the stream");
                let bytes = &data[p.offset as usize..end as usize];
                assert_eq!(
                    pt::packet::parse(bytes, &errata),
                    Ok((p.packet, p.size)),
                    "packet {i} reparses from its own bytes"
                );
                if p.packet == pt::Packet::Psb {
                    seen_psbs.push(p.offset);
                } else {
                    assert!(
                        !psbs.iter().any(|&q| q > p.offset && q < end),
                        "packet {i} runs into a PSB"
                    );
                }
                // Its canonical bytes mean the same packet (reserved bits dropped).
                if p.packet != pt::Packet::Invalid {
                    let enc = pt::encode::to_bytes(&p.packet)
                        .unwrap_or_else(|e| panic!("packet {i}: {e}"));
                    assert!(
                        enc.len() <= bytes.len(),
                        "packet {i}: canonical bytes longer"
                    );
                    assert_eq!(
                        pt::packet::parse(&enc, &Default::default()),
                        Ok((p.packet, enc.len() as u8)),
                        "packet {i} {:?} does not round-trip",
                        p.packet
                    );
                }
                pos = end;
            }
            Err(e) => {
                assert_eq!(
                    e.offset, pos,
                    "error {i} is not where the last packet ended"
                );
                let _ = e.to_string();
                pos = psbs.iter().copied().find(|&q| q > e.offset).unwrap_or(len);
                if let Some(Ok(n)) = items.get(i + 1) {
                    assert_eq!(n.offset, pos, "after error {i}: resumes at the next PSB");
                }
            }
        }
    }
    assert!(pos >= len, "reading stopped at {pos} of {len}");
    // Every PSB `find_psbs` names is read as one. In a run of 02 82 longer than 16 bytes
    // the last 16 are named; a reader that happens to be at an earlier, PSB-shaped part
    // of the run (back-to-back PSBs, or reading from an arbitrary offset) reads a PSB
    // there too: the run must reach on to the named PSB.
    for q in psbs.iter().filter(|&&q| q >= start) {
        assert!(seen_psbs.contains(q), "the PSB at {q} is not read as a PSB");
    }
    for &q in seen_psbs.iter().filter(|q| !psbs.contains(q)) {
        let named = psbs.iter().copied().find(|&p| p > q);
        let in_run = named.is_some_and(|p| {
            (p - q) % 2 == 0
                && data[q as usize..p as usize + 16]
                    .chunks(2)
                    .all(|c| c == [0x02, 0x82])
        });
        assert!(in_run, "a PSB read at {q} is not in the run of a named PSB");
    }
    let fast = pt_read_all(
        &mut pt::PacketReader::new(&stream, start, len, errata),
        true,
    );
    assert_eq!(fast, items, "try_tnt disagrees with next_packet");
    if items.len() > 1 {
        let cut = items.len() / 2;
        let mut r1 = pt::PacketReader::new(&stream, start, len, errata);
        let mut got: Vec<PtItem> = (0..cut).map(|_| r1.next_packet().unwrap()).collect();
        let mut r2 = pt::PacketReader::new(&stream, start, len, errata);
        r2.seek(r1.pos());
        got.extend(pt_read_all(&mut r2, false));
        assert_eq!(
            got, items,
            "a reader resumed by seek reads the same packets"
        );
    }
}

/// Intel PT packet layer: `pt::PacketReader` over arbitrary bytes, from offset 0 and from
/// the first PSB, without errata and with every erratum that changes parsing:
///
/// - packets tile the stream, the reader always advances, no packet runs into a PSB,
///   after an error reading resumes at the next PSB, every PSB is read as one (and a
///   PSB read that `find_psbs` does not name is in the run of `02 82` of one it does);
/// - every packet reparses from its own bytes, and its canonical encoding (`pt::encode`)
///   parses back to it;
/// - `try_tnt` agrees with `next_packet`; a reader resumed with `seek` reads the same;
///
/// then the ptdump listing (two option sets, one with time) and `sniff` on the same bytes
/// end without a panic, with output bounded by the input.
pub fn pt_packets(data: &[u8]) {
    let first_psb = pt::sync::next_psb(&TraceStream::linear(data), 0);
    let all = pt::cpu::Errata {
        skd007: true,
        skz84: true,
        skl168: true,
        ..Default::default()
    };
    for errata in [pt::cpu::Errata::default(), all] {
        pt_packets_from(data, 0, errata);
        if let Some(p) = first_psb.filter(|&p| p != 0) {
            pt_packets_from(data, p, errata);
        }
    }
    let stream = TraceStream::linear(data);
    let _ = tracemill_decode::sniff::sniff(&stream);
    for args in [
        &[
            "--no-sync",
            "--lastip",
            "--exec-mode",
            "--raw",
            "--cpu",
            "6/94",
        ][..],
        &[
            "--time",
            "--time-delta",
            "--mtc-freq",
            "3",
            "--nom-freq",
            "4",
            "--cpuid-0x15.eax",
            "1",
            "--cpuid-0x15.ebx",
            "3",
            "--cpu",
            "6/85",
        ],
        &[
            "--tcal",
            "--no-wall-clock",
            "--keep-tcal-on-ovf",
            "--mtc-freq",
            "31",
        ],
    ] {
        let (opts, cfg) = pt::listing::ListingOptions::from_ptdump_args(args).unwrap();
        let mut out = String::new();
        pt::listing::ptdump(&stream, &opts, &cfg, &mut out).unwrap();
        assert!(
            out.lines().count() <= 5 * data.len() + 2,
            "listing too long"
        );
    }
}

// ---------------------------------------------------------------------------------------
// elf

/// ELF loading: arbitrary bytes through `ImageSet::add_elf` (with and without a load base
/// and CR3), then lookups and basic blocks built at the segment bounds and at addresses
/// taken from the input. No panic, and what is built stays inside what was loaded.
///
/// object's ELF reader wants aligned headers, as a memory map is; libFuzzer hands over a
/// fresh heap copy, which is.
pub fn elf(file: &[u8]) {
    let sel = file.first().copied().unwrap_or(0);
    // The file's last 16 bytes, read as addresses.
    let tail = &file[file.len().saturating_sub(16)..];
    let word = |i: usize| -> u64 {
        let mut w = [0u8; 8];
        for (j, b) in tail.iter().skip(i * 8).take(8).enumerate() {
            w[j] = *b;
        }
        u64::from_le_bytes(w)
    };
    for (base, cr3) in [
        (None, None),
        (Some(word(0)), Some(0x1000u64)),
        (Some(0xffff_ffff_ffff_f000), None),
    ] {
        let mut set = ImageSet::new();
        if set.add_elf("fuzz", file, base, cr3).is_err() {
            continue;
        }
        if sel & 1 == 1 {
            // A second, differently tagged copy: lookups with an unknown CR3 are ambiguous.
            let _ = set.add_elf("fuzz2", file, base, Some(0x2000));
        }
        let segs: Vec<_> = set.segments().iter().map(|s| (s.start, s.end())).collect();
        let mut cache = BlockCache::new();
        let mut probes: Vec<u64> = Vec::new();
        for &(s, e) in &segs {
            probes.extend([s, e.wrapping_sub(1), e, s.wrapping_add(word(1) % 4096)]);
        }
        probes.push(word(1));
        for a in probes {
            for c in [None, cr3, Some(0x2000)] {
                let b = build_block(&set, a, c);
                assert_eq!(b.start, a);
                assert!(b.lens.len() <= 4096, "block longer than the cap");
                if b.end == BlockEnd::Branch {
                    assert!(
                        set.code_at(b.last_ip, c).is_ok(),
                        "branch outside the image"
                    );
                }
                let _ = set.image_of(a, c);
                let i = cache.index(&set, a, c, tracemill_decode::front::Bits::B64);
                let _ = cache.block(i);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// perf_data

/// perf.data (`tracemill-perfdata`) from any bytes: no panic; every error names an offset
/// inside the input; records come in increasing file order inside the data section, at
/// most one per 8 bytes, and their AUX data lies inside the input; after an error that
/// breaks the framing nothing more is read. The features, the build-id table, the
/// AUXTRACE index, the string features and Intel PT's
/// AUXTRACE_INFO read without a panic. A file whose records all read is written again by
/// the generator's writer (`tracemill_datasets::perf_data`, its own encoder) from the
/// records read, and reads back to the same records, trailers and events.
pub fn perf_data(data: &[u8]) {
    use tracemill_perfdata::header::feature;
    use tracemill_perfdata::record::misc;
    use tracemill_perfdata::{IntelPtInfo, PerfData, Record};

    let len = data.len() as u64;
    let p = match PerfData::parse(data) {
        Ok(p) => p,
        Err(e) => {
            assert!(e.offset() <= len, "{e}");
            return;
        }
    };
    // The records inside compressed records (`perf record -z`): never a panic, offsets
    // inside the file.
    p.for_each_record(|i| {
        if let Err(e) = i {
            assert!(e.offset() <= len, "{e}");
        }
    });
    let range = data.as_ptr_range();
    let mut items = Vec::new();
    let mut last: Option<u64> = None;
    let mut all_ok = true;
    for (n, item) in p.records().enumerate() {
        assert!(n as u64 <= len / 8 + 1, "more records than 8-byte headers");
        match item {
            Ok(i) => {
                assert!(last.is_none_or(|l| i.offset > l), "records out of order");
                assert!(i.offset >= p.header().data.offset && i.offset + 8 <= len);
                last = Some(i.offset);
                match &i.record {
                    Record::Auxtrace(a) => {
                        let r = a.data.as_ptr_range();
                        assert!(r.start >= range.start && r.end <= range.end);
                        // Shorter only where the file ends inside the data (an error
                        // follows, and all_ok is false).
                        assert!(a.data.len() as u64 <= a.size);
                        if (a.data.len() as u64) < a.size {
                            assert_eq!(r.end, range.end, "a cut buffer ends the file");
                        }
                    }
                    Record::AuxtraceInfo(a) => {
                        if let Err(e) = IntelPtInfo::parse(a, i.offset) {
                            assert!(e.offset() <= len, "{e}");
                        }
                    }
                    _ => {}
                }
                items.push(i);
            }
            Err(e) => {
                all_ok = false;
                assert!(e.offset() <= len, "{e}");
            }
        }
    }
    let errs = [
        p.features().err(),
        p.build_ids().err(),
        p.auxtrace_index().err(),
        p.string_feature(feature::HOSTNAME).err(),
        p.event_desc().err(),
        p.pmu_mappings().err(),
        p.intel_pt_info().err(),
    ];
    for e in errs.into_iter().flatten() {
        assert!(e.offset() <= len, "{e}");
    }
    match tracemill_perfdata::aux::aux_queues(&p) {
        Ok((queues, _)) => {
            let total: u64 = queues.iter().map(|q| q.len()).sum();
            assert!(total <= len, "more AUX data than input");
        }
        Err(e) => assert!(e.offset() <= len, "{e}"),
    }
    if !all_ok {
        return;
    }
    // Write the records again and read them back.
    let Ok(mut w) = crate::perf_data::PerfDataWriter::new(p.attrs().to_vec()) else {
        return;
    };
    for i in &items {
        match w.push(i.misc & misc::CPUMODE_MASK, &i.record, &i.sample_id) {
            // A string that filled its record without a NUL gains one (and padding): a
            // record at the size limit may not fit again.
            Err(crate::perf_data::WriteError::TooLarge(_)) => return,
            r => r.expect("a record read can be written"),
        }
    }
    let again = w.finish();
    let q = PerfData::parse(&again).expect("the writer's file reads");
    assert_eq!(q.attrs(), p.attrs());
    let back: Vec<_> = q
        .records()
        .collect::<Result<_, _>>()
        .expect("the writer's records read");
    assert_eq!(back.len(), items.len());
    for (a, b) in items.iter().zip(&back) {
        assert_eq!(
            (&a.record, &a.sample_id, a.attr),
            (&b.record, &b.sample_id, b.attr)
        );
    }
}
