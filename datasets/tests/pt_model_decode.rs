//! The Intel PT decoder against the PT encoder of executions (`pt_encode`): on walks over
//! busybox's code and on busybox itself run under qemu, the decoded rows equal the truth
//! row for row (ip, kind, taken, target, compressed, insns, offset), with RET compression
//! on and off, and chunked decoding equals sequential decoding.

use std::path::Path;

use tracemill_datasets::exec::qemu;
use tracemill_datasets::exec::synthetic::{Code, WalkConfig};
use tracemill_datasets::exec::Execution;
use tracemill_datasets::pt_encode::{encode_execution, PtOptions, PtOutput, PtOverflow};
use tracemill_decode::chunk::{decode_all, decode_all_bounded, Decoded, Input};
use tracemill_decode::image::ImageSet;
use tracemill_decode::pt::PtConfig;
use tracemill_decode::rows::BranchColumns;
use tracemill_decode::stream::TraceStream;
use tracemill_schemas::EventKind;

mod common;

/// Debian's busybox-static, as committed with the samples.
fn busybox() -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples/busybox-sort/images/busybox");
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn walk(elf: &[u8], cfg: &WalkConfig) -> Execution {
    Code::from_elf("busybox", elf).unwrap().execution(cfg)
}

fn encode(elf: &[u8], exec: &Execution, o: &PtOptions) -> PtOutput {
    let mut images = ImageSet::new();
    images.add_elf("busybox", elf, None, None).unwrap();
    encode_execution(&images, o, exec.entry, exec.steps.iter().copied())
}

fn decode(elf: &[u8], bytes: &[u8], ret_compression: bool, chunk: u64) -> Decoded {
    let mut images = ImageSet::new();
    images.add_elf("busybox", elf, None, None).unwrap();
    decode_with(&images, bytes, ret_compression, chunk)
}

fn decode_with(images: &ImageSet<'_>, bytes: &[u8], ret_compression: bool, chunk: u64) -> Decoded {
    let stream = TraceStream::linear(bytes);
    let cfg = PtConfig {
        ret_compression,
        ..PtConfig::default()
    };
    let input = Input::pt(&stream, images, cfg);
    decode_all(&input, chunk)
}

fn errors(d: &Decoded) -> Vec<String> {
    d.events
        .iter()
        .filter(|e| e.kind == EventKind::Error)
        .take(5)
        .map(|e| format!("{:#x} @{} {}", e.ip.unwrap_or(0), e.offset, e.detail))
        .collect()
}

/// Row for row, every flow column (timing aside: the encoder sends no timing packets).
fn compare(what: &str, want: &BranchColumns, got: &BranchColumns) {
    let n = want.len().min(got.len());
    for i in 0..n {
        let (mut w, mut g) = (want.row(i), got.row(i));
        (w.tsc, w.cycles, g.tsc, g.cycles) = (None, None, None, None);
        assert_eq!(
            w,
            g,
            "{what}: row {i} differs (of {} wanted, {} decoded)",
            want.len(),
            got.len()
        );
    }
    assert_eq!(want.len(), got.len(), "{what}: row counts differ");
}

/// Encode, decode sequentially and at chunk sizes 1, 4096 and 50,000 bytes: every decode
/// is the truth's provable rows, with the sequential decode's events. Returns the rows
/// checked.
fn check(what: &str, elf: &[u8], exec: &Execution, o: &PtOptions) -> PtOutput {
    let out = encode(elf, exec, o);
    let want = out.truth.provable();
    let seq = decode(elf, &out.bytes, o.ret_compression, u64::MAX);
    let errs = errors(&seq);
    assert!(errs.is_empty(), "{what}: {errs:#?}");
    compare(what, &want, &seq.rows);
    for chunk in [1, 4096, 50_000] {
        let par = decode(elf, &out.bytes, o.ret_compression, chunk);
        compare(&format!("{what}, chunk {chunk}"), &seq.rows, &par.rows);
        assert_eq!(
            seq.events, par.events,
            "{what}: events at chunk size {chunk}"
        );
        assert_eq!(
            seq.timing, par.timing,
            "{what}: timing at chunk size {chunk}"
        );
        assert_eq!(
            seq.coverage, par.coverage,
            "{what}: coverage at chunk size {chunk}"
        );
        // Every chunk's body starts at its PSB+ (or the TIP.PGE after a PSB+ sent while
        // tracing was off) and meets the stitch: every body is used.
        assert_eq!(par.fallbacks, 0, "{what}: chunk {chunk}");
    }
    // Bodies given up past a limit, their chunks walked in order in pieces cut wherever
    // the walk can hand rows on: the same decode.
    let mut images = ImageSet::new();
    images.add_elf("busybox", elf, None, None).unwrap();
    let stream = TraceStream::linear(&out.bytes);
    let cfg = PtConfig {
        ret_compression: o.ret_compression,
        ..PtConfig::default()
    };
    let input = Input::pt(&stream, &images, cfg);
    for (chunk, body, piece) in [(u64::MAX, 1, 1), (4096, 300, 1), (50_000, 5000, 999)] {
        let par = decode_all_bounded(&input, chunk, body, piece);
        let w = format!("{what}, chunk {chunk}, body limit {body}, pieces of {piece}");
        compare(&w, &seq.rows, &par.rows);
        assert_eq!(seq.rows, par.rows, "{w}: rows with their time");
        assert_eq!(seq.events, par.events, "{w}: events");
        assert_eq!(seq.timing, par.timing, "{w}: timing");
        assert_eq!(seq.timing_rows, par.timing_rows, "{w}: timing table");
        assert_eq!(seq.coverage, par.coverage, "{w}: coverage");
    }
    let s = &out.summary;
    eprintln!(
        "{what}: {} rows ({} lost), {} compressed RETs, {} RET stack evictions, {} bytes, \
         {} PSBs, {:?}",
        want.len(),
        s.lost_rows,
        s.compressed_rets,
        s.stack_evictions,
        s.bytes,
        s.psbs,
        s.packets_by_type
    );
    if o.ret_compression {
        assert!(s.compressed_rets > 100, "{what}: {s:?}");
    } else {
        assert_eq!(s.compressed_rets, 0, "{what}");
    }
    assert!(s.psbs > 10, "{what}: {s:?}");
    out
}

/// A trace with one PSB+ and none after (one chunk, however it is cut): its body is given
/// up and the chunk walked in pieces, which must be cut often (a PSB+ read before tracing
/// was on once kept an Intel PT walk from ever cutting: the whole trace in one piece) and
/// give the sequential decode exactly.
#[test]
fn a_trace_without_psbs_is_walked_in_pieces() {
    let elf = busybox();
    let exec = walk(&elf, &WalkConfig::new(3, 200_000));
    let o = PtOptions {
        psb_every: u64::MAX,
        ..options(true, true)
    };
    let out = encode(&elf, &exec, &o);
    assert_eq!(out.summary.psbs, 1, "{:?}", out.summary);
    let seq = decode(&elf, &out.bytes, true, u64::MAX);
    assert!(errors(&seq).is_empty(), "{:#?}", errors(&seq));
    compare("sequential", &out.truth.provable(), &seq.rows);
    let mut images = ImageSet::new();
    images.add_elf("busybox", &elf, None, None).unwrap();
    let stream = TraceStream::linear(&out.bytes);
    let cfg = PtConfig {
        ret_compression: true,
        ..PtConfig::default()
    };
    let input = Input::pt(&stream, &images, cfg);
    for (chunk, body, piece) in [(u64::MAX, 1000, 1000), (4096, 5000, 1)] {
        let par = decode_all_bounded(&input, chunk, body, piece);
        let w = format!("chunk {chunk}, body limit {body}, pieces of {piece}");
        assert_eq!(seq.rows, par.rows, "{w}: rows");
        assert_eq!(seq.events, par.events, "{w}: events");
        assert_eq!(seq.timing_rows, par.timing_rows, "{w}: timing table");
        assert_eq!(seq.coverage, par.coverage, "{w}: coverage");
        let rows = seq.rows.len() as u64;
        assert!(
            par.pieces * (piece as u64 + 200) >= rows,
            "{w}: {} pieces for {rows} rows",
            par.pieces
        );
    }
}

/// PSB+ after direct jumps and inside steps. In a loop of direct jumps (`1000: nop; 1001:
/// jmp 1000`) two PSB+s naming the loop's head do not say how many passes ran between
/// them: the decoder meets the second at its first arrival, and the truth has the passes
/// before it lost; a PSB+ inside a pass (naming the jump) tells passes apart. With a
/// conditional branch closing the loop (`1003: jne 1000`), each pass is proved, the jump
/// decided by the PSB+ before it.
#[test]
fn psb_after_direct_jumps_in_loops() {
    use tracemill_datasets::exec::Step;
    use tracemill_decode::insn::InsnClass;
    let run = |code: &[u8], steps: &[Step]| {
        let mut images = ImageSet::new();
        images.add_raw("loop", code, 0x1000, None);
        let o = PtOptions {
            psb_every: 1,
            psb_at_any_step: true,
            ..PtOptions::default()
        };
        let out = encode_execution(&images, &o, 0x1000, steps.iter().copied());
        let want = out.truth.provable();
        for chunk in [u64::MAX, 1, 40] {
            let d = decode_with(&images, &out.bytes, true, chunk);
            assert!(errors(&d).is_empty(), "{:#?}", errors(&d));
            compare(&format!("chunk {chunk}"), &want, &d.rows);
        }
        out
    };
    let jmp = |ip: u64, target: u64, insns: u32| Step::Branch {
        ip,
        len: 2,
        class: InsnClass::Jmp,
        target,
        next: target,
        insns,
    };
    let end = [
        Step::Interrupt {
            insns: 1,
            at: 0x1001,
            resume: 0x1000,
        },
        Step::End {
            insns: 0,
            at: 0x1000,
        },
    ];
    let j = jmp(0x1001, 0x1000, 2);
    let out = run(&[0x90, 0xEB, 0xFD], &[&[j, j, j][..], &end].concat());
    // The first pass is lost (the PSB+ after it names the head, where the walk resumed);
    // the next passes each have a PSB+ inside them (at the jump), which tells them apart.
    assert_eq!(out.truth.lost, [true, false, false]);
    assert!(out.summary.psbs_inside >= 2, "{:?}", out.summary);

    let j = jmp(0x1001, 0x1003, 2);
    let jne = Step::Branch {
        ip: 0x1003,
        len: 2,
        class: InsnClass::Cond,
        target: 0x1000,
        next: 0x1000,
        insns: 1,
    };
    let out = run(
        &[0x90, 0xEB, 0x00, 0x75, 0xFB],
        &[&[j, jne, j, jne, j, jne][..], &end].concat(),
    );
    assert_eq!(out.truth.lost, [false; 6]);
    let r = &out.truth.rows;
    // Each jump is decided by the PSB+ after the conditional branch before it (the first
    // by the TIP.PGE), each conditional branch by its TNT, which is after the jump's PSB+.
    assert!(r.offset[0] < r.offset[1] && r.offset[1] < r.offset[2]);
    assert!(r.offset[2] < r.offset[3] && r.offset[3] < r.offset[4]);
}

fn options(ret_compression: bool, user_only: bool) -> PtOptions {
    PtOptions {
        ret_compression,
        user_only,
        ..PtOptions::default()
    }
}

#[test]
fn walks_over_busybox_decode_to_truth_with_and_without_ret_compression() {
    let elf = busybox();
    let exec = walk(&elf, &WalkConfig::new(1, 200_000));
    for retc in [true, false] {
        let out = check(&format!("retc {retc}"), &elf, &exec, &options(retc, true));
        assert!(out.truth.rows.len() > 150_000, "{}", out.truth.rows.len());
    }
}

/// Interrupts inside blocks (FUP + TIP.PGD and TIP.PGE under user-only tracing, FUP + TIP
/// with every CPL traced), syscalls (TIP.PGD / TIP.PGE, or a TIP alone), TNT-64, deferred
/// TIPs, PSB+ after direct branches and interrupts.
#[test]
fn interrupts_syscalls_and_long_tnt_decode_to_truth() {
    let elf = busybox();
    let mut cfg = WalkConfig::new(21, 300_000);
    cfg.interrupt_rate = 1.0 / 300.0;
    let exec = walk(&elf, &cfg);
    for (retc, user_only, long_tnt, deferred_tips, psb_at_any_step) in [
        (true, true, false, false, false),
        (true, false, false, false, false),
        (false, false, true, false, false),
        (true, true, true, false, false),
        (true, true, false, true, false),
        (false, false, true, true, false),
        (true, true, false, true, true),
        (true, false, false, false, true),
    ] {
        let o = PtOptions {
            long_tnt,
            deferred_tips,
            psb_at_any_step,
            psb_every: 1024,
            ..options(retc, user_only)
        };
        let what = format!(
            "retc {retc} user_only {user_only} long_tnt {long_tnt} deferred {deferred_tips} \
             psb anywhere {psb_at_any_step}"
        );
        let out = encode(&elf, &exec, &o);
        let tnt64 = out.summary.packets_by_type.get("tnt.64").copied();
        assert_eq!(long_tnt, tnt64.is_some(), "{what}: {tnt64:?}");
        if retc {
            // Walks deeper than the stack: calls fall off it, their returns are TIPs.
            assert!(
                out.summary.stack_evictions > 1_000,
                "{what}: {:?}",
                out.summary
            );
        }
        assert_eq!(
            psb_at_any_step,
            out.summary.psbs_off_decision > 5,
            "{what}: {:?}",
            out.summary
        );
        check(&what, &elf, &exec, &o);
    }
}

/// Internal buffer overflows (OVF + FUP, rows in the window lost, no RET compressed
/// across them) with interrupts and syscalls: the rest decodes to truth, at every chunk
/// size.
#[test]
fn overflows_decode_to_truth_outside_lost_stretches() {
    let elf = busybox();
    let mut cfg = WalkConfig::new(22, 300_000);
    cfg.interrupt_rate = 1.0 / 1000.0;
    let exec = walk(&elf, &cfg);
    for (user_only, deferred_tips) in [(true, false), (false, true)] {
        let o = PtOptions {
            deferred_tips,
            overflow: Some(PtOverflow {
                seed: 5,
                every_steps: (1_000, 8_000),
                duration_steps: (1, 300),
            }),
            ..options(true, user_only)
        };
        let out = encode(&elf, &exec, &o);
        assert!(out.summary.overflows > 40, "{:?}", out.summary);
        assert!(out.summary.lost_rows > 1_000, "{:?}", out.summary);
        check(
            &format!("overflows: user_only {user_only} deferred {deferred_tips}"),
            &elf,
            &exec,
            &o,
        );
    }
}

/// busybox run under qemu (every retired instruction): syscalls, the C library's real
/// calls and returns, and a few signals' worth of diversions.
#[test]
fn busybox_under_qemu_decodes_to_truth() {
    const BUSYBOX: &str = "/usr/bin/busybox";
    if let Err(e) = qemu::check_tools() {
        common::missing_tool(&format!("PT on a qemu capture: {e}"));
        return;
    }
    if !Path::new(BUSYBOX).exists() {
        common::missing_tool(&format!(
            "{BUSYBOX} not installed (apt-get install busybox-static)"
        ));
        return;
    }
    let mut x = 7u32;
    let mut input = String::new();
    for _ in 0..200 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        input += &format!("{}\n", (x >> 8) % 10_000);
    }
    let cap = qemu::trace(Path::new(BUSYBOX), &["sort", "-n"], input.as_bytes()).unwrap();
    assert_eq!(cap.exit_code, Some(0));
    let exec = cap.execution;
    let elf = exec.images[0].1.clone();
    for retc in [true, false] {
        for user_only in [true, false] {
            let out = check(
                &format!("busybox sort: retc {retc} user_only {user_only}"),
                &elf,
                &exec,
                &options(retc, user_only),
            );
            assert!(out.truth.rows.len() > 10_000, "{}", out.truth.rows.len());
        }
    }
}

/// The sample programs under qemu: `recursion` (calls and returns at many depths), `callbacks`
/// (indirect calls), `jumptable` (indirect jumps), `signals` (faults and signal handlers:
/// interrupts, syscalls that return elsewhere).
#[test]
fn sample_programs_under_qemu_decode_to_truth() {
    if let Err(e) = qemu::check_tools() {
        common::missing_tool(&format!("PT on qemu captures: {e}"));
        return;
    }
    for (name, stdin) in [
        ("recursion", &b"18 40 2000 7\n"[..]),
        ("callbacks", b"300 2 7\n"),
        ("jumptable", b"100 60\n"),
        ("signals", b"60000 8\n"),
    ] {
        let src = qemu::programs_dir().join(format!("{name}.c"));
        let cap = qemu::trace_c(&src, &[], stdin).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(cap.exit_code, Some(0), "{name}");
        let exec = cap.execution;
        let elf = exec.images[0].1.clone();
        for retc in [true, false] {
            let out = check(
                &format!("{name}: retc {retc}"),
                &elf,
                &exec,
                &options(retc, true),
            );
            assert!(out.truth.rows.len() > 100_000, "{name}");
        }
    }
}

/// Bytes lost before PSBs (a perf.data AUX area's gaps: `tracemill_decode::stream::Break`),
/// cut inside packets of every kind: the decode reports each loss once, at its PSB, and
/// decodes alike sequentially, in chunks of every size, and in bodies given up and walked
/// in pieces (the rows walked up to a break are final, as at any PSB: a chunk may start
/// there).
#[test]
fn bytes_lost_before_psbs_are_one_error_each_and_decode_alike_in_any_chunks() {
    use tracemill_decode::stream::{Break, Lost, Span};
    let elf = busybox();
    let mut cfg = WalkConfig::new(7, 400_000);
    cfg.interrupt_rate = 1.0 / 500.0;
    let exec = walk(&elf, &cfg);
    let o = PtOptions {
        psb_every: 1024,
        psb_at_any_step: true,
        deferred_tips: true,
        ..options(true, false)
    };
    let out = encode(&elf, &exec, &o);
    let bytes = &out.bytes;
    let psbs = tracemill_decode::pt::sync::find_psbs(&TraceStream::linear(bytes));
    assert!(psbs.len() > 40, "{} PSBs", psbs.len());
    // Every third PSB after the first has 1 to 300 bytes before it lost.
    let (mut spans, mut breaks) = (Vec::new(), Vec::new());
    let (mut from, mut at) = (0usize, 0u64);
    for (i, &p) in psbs.iter().enumerate().skip(1).step_by(3) {
        let p = p as usize;
        let lost = 1 + (i * 97) % 300;
        let end = p.saturating_sub(lost).max(from);
        spans.push(Span {
            at,
            from,
            len: end - from,
        });
        at += (end - from) as u64;
        breaks.push(Break {
            at,
            lost: Lost::Missing {
                from: end as u64,
                to: p as u64,
                record: i as u64,
            },
        });
        from = p;
    }
    spans.push(Span {
        at,
        from,
        len: bytes.len() - from,
    });
    assert!(TraceStream::check_spans(bytes.len(), &spans));
    let stream = TraceStream::spans(bytes, &spans).with_breaks(&breaks);
    let mut images = ImageSet::new();
    images.add_elf("busybox", &elf, None, None).unwrap();
    let input = Input::pt(&stream, &images, PtConfig::default());
    let seq = decode_all(&input, u64::MAX);
    let lost: Vec<u64> = seq
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Error && e.detail.contains("trace lost before this PSB"))
        .map(|e| e.offset)
        .collect();
    assert_eq!(lost, breaks.iter().map(|b| b.at).collect::<Vec<_>>());
    assert!(seq.rows.len() > 50_000, "{} rows", seq.rows.len());
    for chunk in [1, 4096, 50_000] {
        let par = decode_all(&input, chunk);
        let w = format!("chunk {chunk}");
        compare(&w, &seq.rows, &par.rows);
        assert_eq!(seq.events, par.events, "{w}: events");
        assert_eq!(seq.coverage, par.coverage, "{w}: coverage");
    }
    for (chunk, body, piece) in [(u64::MAX, 1, 1), (4096, 300, 1), (50_000, 5000, 999)] {
        let par = decode_all_bounded(&input, chunk, body, piece);
        let w = format!("chunk {chunk}, body limit {body}, pieces of {piece}");
        compare(&w, &seq.rows, &par.rows);
        assert_eq!(seq.events, par.events, "{w}: events");
        assert_eq!(seq.coverage, par.coverage, "{w}: coverage");
    }
}
