use crate::chunk::{decode_all, Input};
use crate::image::ImageSet;
use crate::rtit::clock::TimingConfig;
use crate::rtit::packet::PSB_BYTES;
use crate::rtit::{Rtit, TraceConfig};
use crate::stream::TraceStream;
use tracemill_schemas::EventKind;

/// `trace` over `images` decoded sequentially and in chunks of one PSB each (RTIT_CTL
/// 0, no timing): (chunk size, result) for both.
fn decode_sequential_and_chunked(
    images: &ImageSet<'_>,
    trace: &[u8],
) -> Vec<(u64, crate::chunk::Decoded)> {
    let stream = TraceStream::linear(trace);
    let cfg = TraceConfig::from_ctl(0);
    let input = Input::<Rtit> {
        spaces: None,
        stream: &stream,
        images,
        cfg,
        timing: TimingConfig::new(&cfg, None, true),
    };
    [u64::MAX, 1]
        .into_iter()
        .map(|chunk| (chunk, decode_all(&input, chunk)))
        .collect()
}

fn errors_of(d: &crate::chunk::Decoded) -> Vec<&str> {
    d.events
        .iter()
        .filter(|e| e.kind == EventKind::Error)
        .map(|e| e.detail.as_str())
        .collect()
}

/// 4.2.9 and 4.2.10: the PIP of a far transfer (an interrupt switching address spaces)
/// comes between its FUP.FAR and its TIP, and the new CR3 is the destination's. The code
/// the walk still has to cover up to the FUP's IP runs in the old address space, even
/// though the decoder has read the PIP to pair the FUP with its TIP.
#[test]
fn pip_between_fup_far_and_tip_applies_after_the_fup_4_2_10() {
    // Address space 1: 0x1000 jmp 0x1010; 0x1010..0x1014 nops, ret. Nothing at
    // 0x1010 in space 2. The kernel (every space) at 0x8000: nop, ret.
    let mut user = vec![0x90u8; 0x15];
    user[..2].copy_from_slice(&[0xEB, 0x0E]);
    user[0x14] = 0xC3;
    let kernel = [0x90u8, 0xC3];
    let mut images = ImageSet::new();
    images.add_raw("user", &user, 0x1000, Some(1));
    images.add_raw("kernel", &kernel, 0x8000, None);

    let mut trace = PSB_BYTES.to_vec();
    trace.extend_from_slice(&[0xC3, 1, 0, 0, 0, 0]); // PIP cr3=1
    trace.extend_from_slice(&[0x84, 0x00, 0x10]); // FUP.PGE 0x1000
    trace.extend_from_slice(&[0xBC, 0x12, 0x10]); // FUP.FAR 0x1012
    trace.extend_from_slice(&[0xC3, 2, 0, 0, 0, 0]); // PIP cr3=2
    trace.extend_from_slice(&[0xB4, 0x00, 0x80]); // TIP 0x8000
    trace.extend_from_slice(&[0xB4, 0x00, 0x80]); // TIP 0x8000 (the ret)
    for (chunk, d) in decode_sequential_and_chunked(&images, &trace) {
        let errors = errors_of(&d);
        assert!(errors.is_empty(), "chunk {chunk}: {errors:?}");
        let interrupt = d.events.iter().find(|e| e.kind == EventKind::Interrupt);
        assert_eq!(interrupt.and_then(|e| e.ip), Some(0x1012), "chunk {chunk}");
        // The jmp in space 1; then the kernel's ret, whose count holds the two user
        // instructions before the interrupt, and the CR3 the transfer switched to.
        let r = &d.rows;
        assert_eq!(r.ip, [0x1000, 0x8001], "chunk {chunk}");
        assert_eq!(r.insns, [1, 4], "chunk {chunk}");
        assert_eq!((r.cr3.get(0), r.cr3.get(1)), (Some(1), Some(2)));
    }
}

/// 4.2.10: after a PIP, code is found in the new address space. The walker's link
/// to the next block (found in the old one) must not outlive the change, even when the
/// walk resumes at that very address after a gap.
#[test]
fn after_a_pip_the_next_block_is_looked_up_in_the_new_address_space_4_2_10() {
    // Space 1: 0x1000 jz 0x1010; 0x1010 nop, ret. Nothing in space 2.
    let mut user = vec![0x90u8; 0x12];
    user[..2].copy_from_slice(&[0x74, 0x0E]);
    user[0x11] = 0xC3;
    let mut images = ImageSet::new();
    images.add_raw("user", &user, 0x1000, Some(1));

    let mut trace = PSB_BYTES.to_vec();
    trace.extend_from_slice(&[0xC3, 1, 0, 0, 0, 0]); // PIP cr3=1
    trace.extend_from_slice(&[0x84, 0x00, 0x10]); // FUP.PGE 0x1000
    trace.push(0b11); // TNT: the jz taken; the walk links its target block
    trace.extend_from_slice(&[0xBF]); // reserved IP size: a gap to the next PSB
    trace.extend_from_slice(&PSB_BYTES);
    trace.extend_from_slice(&[0xC3, 2, 0, 0, 0, 0]); // PIP cr3=2
    trace.extend_from_slice(&[0x84, 0x10, 0x10]); // FUP.PGE 0x1010
    trace.extend_from_slice(&[0xB4, 0x00, 0x10]); // TIP 0x1000 (the ret, in space 1)
    for (chunk, d) in decode_sequential_and_chunked(&images, &trace) {
        let errors = errors_of(&d);
        assert_eq!(errors.len(), 2, "chunk {chunk}: {errors:?}");
        assert_eq!(errors[1], "no code image covers 0x1010", "chunk {chunk}");
        // The jz; no ret (its block is not in space 2).
        assert_eq!(d.rows.ip, [0x1000], "chunk {chunk}");
    }
}

/// A block left again and again before any row (enables and disables at one address)
/// takes one place with a count; distinct blocks each take one, up to the cap.
#[test]
fn partials_of_the_same_block_share_one_place() {
    let mut p = super::Partials::default();
    for _ in 0..1000 {
        assert!(p.push((0x10, 0x10, 1, 1)));
    }
    assert_eq!(p.iter().collect::<Vec<_>>(), [(0x10, 0x10, 1, 1000)]);
    // Distinct blocks each take a place, up to the cap (five-distinct-partials).
    for k in 1..super::Partials::CAP as u64 {
        assert!(p.push((0x20 * k, 0x20 * k, 1, 2)));
    }
    assert!(
        !p.push((0x1, 0x4, 2, 1)),
        "past the cap a new block cannot wait"
    );
    assert!(
        p.push((0x20, 0x20, 1, 1)),
        "a waiting one still counts again"
    );
    assert_eq!(p.len(), super::Partials::CAP);
    assert_eq!(p.iter().nth(1), Some((0x20, 0x20, 1, 3)));
}

/// A trace without PIPs of two processes with different code at the same address
/// (`crate::spaces`): the space is chosen at each enable by the time of the last
/// timing packet before it, the same in every decode; rows keep a null CR3.
#[test]
fn sideband_spaces_choose_the_code_at_each_enable_for_every_chunk_size() {
    use crate::pt::encode::{compress_ip, encode};
    use crate::pt::packet::{ExecMode, IpCompression, IpPayload, Packet};
    use crate::pt::PtConfig;
    // Space 1 has `ret` at 0x1000, space 2 `jmp *%rax`.
    let (ret, jmp) = ([0xC3u8], [0xFFu8, 0xE0]);
    let mut images = ImageSet::new();
    images.add_raw("one", &ret, 0x1000, Some(1));
    images.add_raw("two", &jmp, 0x1000, Some(2));
    let mode = Packet::ModeExec(ExecMode {
        csl: true,
        csd: false,
        iflag: false,
    });
    let mut t = Vec::new();
    let mut put = |p: Packet| encode(&p, &mut t).unwrap();
    for tsc in [1000, 2000, 3000] {
        put(Packet::Psb);
        put(Packet::Tsc(tsc));
        put(Packet::PsbEnd);
        put(mode);
        put(Packet::TipPge(compress_ip(0x1000, 0)));
        // The branch leaves the traced region.
        put(Packet::TipPgd(IpPayload {
            compression: IpCompression::Suppressed,
            bits: 0,
        }));
    }
    let stream = TraceStream::linear(&t);
    let cfg = PtConfig {
        tsc: true,
        ..PtConfig::default()
    };
    let mut input = Input::pt(&stream, &images, cfg);
    // The sideband: process 1 until TSC 2000, 2 until 3000, then 1 again.
    let key = |d: Option<u64>| d.map(|t| if (2000..3000).contains(&t) { 2 } else { 1 });
    let spaces = crate::spaces::schedule::<crate::Pt>(&stream, &input.cfg, &input.timing, key);
    // The first PSB has no time before it; the rest follow the enables.
    assert_eq!(spaces.len(), 3, "{spaces:?}");
    input.spaces = Some(&spaces);
    let seq = decode_all(&input, u64::MAX);
    assert!(errors_of(&seq).is_empty(), "{:?}", errors_of(&seq));
    let kinds: Vec<_> = seq.rows.rows().map(|r| (r.ip, r.kind, r.cr3)).collect();
    assert_eq!(
        kinds,
        [
            (0x1000, tracemill_schemas::BranchKind::Ret, None),
            (0x1000, tracemill_schemas::BranchKind::JmpInd, None),
            (0x1000, tracemill_schemas::BranchKind::Ret, None)
        ]
    );
    let chunked = decode_all(&input, 1);
    assert_eq!(chunked.fallbacks, 0);
    assert_eq!(seq.rows, chunked.rows);
    assert_eq!(seq.events, chunked.events);
    assert_eq!(seq.coverage, chunked.coverage);
    // Without the sideband the code at 0x1000 is ambiguous: nothing is decoded there.
    input.spaces = None;
    assert_eq!(decode_all(&input, u64::MAX).rows.len(), 0);
}

/// SDM 36.4.2.17: a PSB+ gives the state "at the time of the PSB", so its FUP may name
/// an instruction inside a basic block. A chunk starting at that PSB+ resumes there
/// and cannot know where the block began: every decode splits the block at the FUP
/// (the instructions before it a partial block), so that coverage is the same for any
/// chunk size. (It used to count the whole block sequentially and only its tail in a
/// chunk's body.)
#[test]
fn psb_plus_inside_a_block_splits_it_for_every_chunk_size_36_4_2_17() {
    use crate::pt::encode::{compress_ip, encode};
    use crate::pt::packet::{ExecMode, IpCompression, IpPayload, Packet, Tnt};
    use crate::pt::PtConfig;
    // 0x1000: nop; nop; nop; jne 0x1000 (75 fb)
    let code = [0x90, 0x90, 0x90, 0x75, 0xFB];
    let mut images = ImageSet::new();
    images.add_raw("loop", &code, 0x1000, None);
    let mode = Packet::ModeExec(ExecMode {
        csl: true,
        csd: false,
        iflag: false,
    });
    let mut t = Vec::new();
    let mut put = |p: Packet| encode(&p, &mut t).unwrap();
    put(Packet::Psb);
    put(Packet::PsbEnd);
    put(mode);
    put(Packet::TipPge(compress_ip(0x1000, 0)));
    // Two nops ran: the PSB+ names the third.
    put(Packet::Psb);
    put(mode);
    put(Packet::Fup(compress_ip(0x1002, 0)));
    put(Packet::PsbEnd);
    // jne taken, then not taken; tracing off at 0x1005.
    put(Packet::Tnt8(Tnt { bits: 0b10, len: 2 }));
    put(Packet::Fup(compress_ip(0x1005, 0x1002)));
    put(Packet::TipPgd(IpPayload {
        compression: IpCompression::Suppressed,
        bits: 0,
    }));
    let stream = TraceStream::linear(&t);
    let cfg = PtConfig::default();
    let input = Input::pt(&stream, &images, cfg);
    let seq = decode_all(&input, u64::MAX);
    assert!(errors_of(&seq).is_empty(), "{:?}", errors_of(&seq));
    assert_eq!(seq.rows.insns, [4, 4]);
    let mut blocks: Vec<_> = seq.coverage.blocks.iter().map(|(k, v)| (*k, *v)).collect();
    blocks.sort_unstable();
    // 0x1000-0x1001 (2 instructions, the partial before the PSB+), 0x1002-0x1003 (2),
    // 0x1000-0x1003 (4, the second pass).
    assert_eq!(
        blocks,
        [
            ((0x1000, 0x1001, 2), (2, 1)),
            ((0x1000, 0x1003, 4), (4, 1)),
            ((0x1002, 0x1003, 2), (2, 1))
        ]
    );
    let chunked = decode_all(&input, 1);
    assert_eq!(chunked.fallbacks, 0);
    assert_eq!(seq.rows, chunked.rows);
    assert_eq!(seq.events, chunked.events);
    assert_eq!(seq.coverage, chunked.coverage);
}

/// SDM 36.4.2.17 (no state retained across a PSB) and 36.4.2.8 (MODE.Exec goes out
/// with a TIP.PGE when none was sent since the last PSB): a PSB+ sent while tracing is
/// off has no MODE.Exec, and the one before the next TIP.PGE is news to every decode,
/// so a chunk starting at that PSB+ meets the stitch (it used to fall back: the
/// sequential decode still held the mode from before the PSB and read the MODE.Exec as
/// a repeat).
#[test]
fn mode_exec_is_forgotten_at_a_psb_36_4_2_17() {
    use crate::pt::encode::{compress_ip, encode};
    use crate::pt::packet::{ExecMode, IpCompression, IpPayload, Packet, Tnt};
    use crate::pt::PtConfig;
    // 0x1000: nop; jne 0x1000 (75 fd)
    let code = [0x90, 0x75, 0xFD];
    let mut images = ImageSet::new();
    images.add_raw("loop", &code, 0x1000, None);
    let mode = Packet::ModeExec(ExecMode {
        csl: true,
        csd: false,
        iflag: false,
    });
    let off = IpPayload {
        compression: IpCompression::Suppressed,
        bits: 0,
    };
    let mut t = Vec::new();
    let mut put = |p: Packet| encode(&p, &mut t).unwrap();
    put(Packet::Psb);
    put(Packet::PsbEnd);
    for i in 0..2 {
        put(mode);
        put(Packet::TipPge(compress_ip(0x1000, 0)));
        put(Packet::Tnt8(Tnt { bits: 0b10, len: 2 }));
        put(Packet::Fup(compress_ip(0x1003, 0x1000)));
        put(Packet::TipPgd(off));
        if i == 0 {
            // Tracing is off: a PSB+ with neither FUP nor MODE.Exec.
            put(Packet::Psb);
            put(Packet::PsbEnd);
        }
    }
    let stream = TraceStream::linear(&t);
    let cfg = PtConfig::default();
    let input = Input::pt(&stream, &images, cfg);
    let seq = decode_all(&input, u64::MAX);
    assert!(errors_of(&seq).is_empty(), "{:?}", errors_of(&seq));
    assert_eq!(seq.rows.len(), 4);
    let modes = seq.events.iter().filter(|e| e.kind == EventKind::ExecMode);
    assert_eq!(modes.count(), 2);
    let chunked = decode_all(&input, 1);
    assert_eq!(chunked.fallbacks, 0);
    assert_eq!(seq.rows, chunked.rows);
    assert_eq!(seq.events, chunked.events);
}
