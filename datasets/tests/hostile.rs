//! Hostile traces: byte sequences no hardware writes, built so that a decoder without the
//! right bound would run away (grow rows without end, or recurse until the stack is gone).
//! Each must decode in time and memory proportional to the trace, report the problem with
//! its offset, and keep the rows it can prove.

use tracemill_datasets::encode::{compress_ip, to_bytes};
use tracemill_decode::chunk::{decode_all, Decoded, Input};
use tracemill_decode::image::ImageSet;
use tracemill_decode::rtit::clock::TimingConfig;
use tracemill_decode::rtit::packet::{FupKind, Packet, Tnt};
use tracemill_decode::stream::TraceStream;
use tracemill_decode::TraceConfig;
use tracemill_schemas::EventKind;

/// RTIT_CTL: TraceEn, USER, no timing packets.
const CTL: u64 = 0x9;

fn decode(images: &ImageSet<'_>, bytes: &[u8], chunk: u64) -> Decoded {
    let stream = TraceStream::linear(bytes);
    let cfg = TraceConfig::from_ctl(CTL);
    let input = Input::<tracemill_decode::Rtit> {
        spaces: None,
        stream: &stream,
        images,
        cfg,
        timing: TimingConfig::new(&cfg, None, true),
    };
    decode_all(&input, chunk)
}

fn errors(d: &Decoded) -> Vec<(u64, String)> {
    d.events
        .iter()
        .filter(|e| e.kind == EventKind::Error)
        .map(|e| (e.offset, e.detail.clone()))
        .collect()
}

fn ip(x: u64) -> tracemill_decode::rtit::IpPayload {
    compress_ip(x, None)
}

/// Code at 0x1000: `jmp .` (a cycle of one direct jump); at 0x2000: `call 0x2000`.
fn cycle_images(code: &[u8]) -> ImageSet<'_> {
    let mut set = ImageSet::new();
    set.add_raw("cycles", code, 0x1000, None);
    set
}

fn cycle_code() -> Vec<u8> {
    let mut code = vec![0x90u8; 0x1010];
    code[0] = 0xEB; // jmp .
    code[1] = 0xFE;
    code[0x1000] = 0xE8; // call rel32 0 -> 0x2005 ... made a self-call below
    let rel: i32 = -5;
    code[0x1001..0x1005].copy_from_slice(&rel.to_le_bytes());
    code
}

/// Rule (4.2.2, Table 19): a TNT bit is for a conditional branch. A trace that queues one
/// and then sends the walk into `jmp .` can never use it: the walk must report the cycle
/// at the TNT packet, not walk the jump forever.
#[test]
fn direct_jump_cycle_with_bits_queued_is_an_error_not_a_runaway() {
    let code = cycle_code();
    let images = cycle_images(&code);
    let bytes = to_bytes(&[
        Packet::Psb,
        Packet::Fup(FupKind::Pge, ip(0x1000)),
        Packet::Tnt(Tnt { bits: 1, len: 1 }),
        Packet::Psb,
        Packet::Fup(FupKind::Pge, ip(0x1000)),
    ]);
    for chunk in [1, u64::MAX] {
        let d = decode(&images, &bytes, chunk);
        let errs = errors(&d);
        assert!(
            errs.iter().any(|(_, e)| e.contains("loop back")),
            "chunk {chunk}: {errs:?}"
        );
        assert_eq!(d.rows.len(), 0, "no row of the cycle is provable");
    }
}

/// The same with nothing queued and a TIP waiting: the cycle never reaches an indirect
/// branch to take it, so the TIP is reported and the decoder resyncs at the next PGE.
#[test]
fn direct_call_cycle_waiting_for_a_tip_is_an_error_not_a_runaway() {
    let code = cycle_code();
    let images = cycle_images(&code);
    let bytes = to_bytes(&[
        Packet::Psb,
        Packet::Fup(FupKind::Pge, ip(0x2000)),
        Packet::Tip(ip(0x1234)),
        Packet::Psb,
        Packet::Fup(FupKind::Pge, ip(0x1000)),
        Packet::Fup(FupKind::Pgd, ip(0x1000)),
    ]);
    let d = decode(&images, &bytes, u64::MAX);
    let errs = errors(&d);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0].1.contains("loop back"), "{errs:?}");
    // The TIP is at offset 9 + 3 (PSB, FUP.PGE with a 2-byte IP).
    assert_eq!(errs[0].0, 12, "{errs:?}");
    // After the resync, PGE then PGD at the same IP: tracing disabled there, no rows.
    assert!(d.events.iter().any(|e| e.kind == EventKind::Disable));
}

/// A FUP.FAR looks ahead at the next flow packet for its TIP. A long run of FUPs must not
/// make that look-ahead nest (one stack frame per FUP would overflow the stack).
#[test]
fn a_long_run_of_fups_does_not_nest_look_aheads() {
    let mut packets = vec![Packet::Psb, Packet::Fup(FupKind::Pge, ip(0x1000))];
    for _ in 0..200_000 {
        packets.push(Packet::Fup(FupKind::Far, ip(0x1004)));
        packets.push(Packet::Fup(FupKind::Pgd, ip(0x1008)));
    }
    let bytes = to_bytes(&packets);
    // Run on a small stack: 200k nested look-aheads would need far more than this.
    let h = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || {
            let code = [0x90u8; 16];
            let mut images = ImageSet::new();
            images.add_raw("nops", &code, 0x1000, None);
            let d = decode(&images, &bytes, u64::MAX);
            (d.rows.len(), errors(&d).len())
        })
        .expect("thread");
    let (rows, errs) = h.join().expect("no stack overflow, no panic");
    assert_eq!(rows, 0);
    assert!(errs >= 1);
}

/// A FUP.PGD looks ahead for the TIP of a far transfer out of the region. Hardware sends
/// the two together; what may come between is a PSB+ and timing packets. A FUP followed by
/// megabytes of them (tracing on, nothing branching) made each look-ahead read, and keep,
/// the whole stretch, and each chunk's stitch read it again from the FUP: quadratic time,
/// memory of 500 times the stretch. The look-ahead now ends `MAX_LOOKAHEAD_BYTES` after
/// the FUP: a TIP beyond it is not the FUP's, and every cut of the trace agrees.
#[test]
fn a_fups_look_ahead_ends_a_bounded_distance_after_it() {
    use tracemill_decode::flow::MAX_LOOKAHEAD_BYTES;
    let code = [0x90u8; 64];
    let mut images = ImageSet::new();
    images.add_raw("nops", &code, 0x1000, None);
    for gap_psbs in [4usize, 2000] {
        let mut packets = vec![Packet::Psb, Packet::Fup(FupKind::Pge, ip(0x1000))];
        packets.push(Packet::Fup(FupKind::Pgd, ip(0x1004)));
        packets.extend(std::iter::repeat_n(Packet::Psb, gap_psbs));
        packets.push(Packet::Tip(ip(0x1020)));
        packets.push(Packet::Fup(FupKind::Pge, ip(0x1008)));
        let bytes = to_bytes(&packets);
        let seq = decode(&images, &bytes, u64::MAX);
        // Chunks of one PSB each: every stitch meets the pending FUP.
        let chunked = decode(&images, &bytes, 1);
        assert_eq!(seq.events, chunked.events, "{gap_psbs} PSBs");
        assert_eq!(seq.rows.len(), chunked.rows.len(), "{gap_psbs} PSBs");
        let disable = seq
            .events
            .iter()
            .find(|e| e.kind == EventKind::Disable)
            .expect("tracing disabled at the FUP.PGD");
        let psbs = seq
            .events
            .iter()
            .filter(|e| e.kind == EventKind::Psb)
            .count();
        assert_eq!(psbs, gap_psbs + 1, "every PSB reported once");
        // Near: the TIP is the far transfer's target; far: it is a TIP while disabled,
        // ignored (Table 19), and no error either way.
        assert!(errors(&seq).is_empty(), "{gap_psbs}: {:?}", errors(&seq));
        assert_eq!(disable.offset, 12, "{gap_psbs} PSBs");
        assert!(gap_psbs < 100 || (gap_psbs * 9) as u64 > MAX_LOOKAHEAD_BYTES);
    }
}
