//! Fuzz findings, replayed: every input a fuzz target (`fuzz/`) found a problem with is
//! kept in `tests/fuzz-regressions/<target>/` and run here through the very checks of that
//! target (`fuzz/src/targets.rs`, included below), as are the committed seed corpora
//! (`fuzz/corpus/<target>/`). `cargo test` needs neither libFuzzer nor cargo-fuzz.

use std::path::{Path, PathBuf};

#[allow(dead_code)]
mod encode {
    pub use tracemill_datasets::encode::*;
}
#[allow(dead_code)]
mod bundle {
    pub use tracemill_input::manifest::*;
}
#[allow(dead_code)]
mod collected {
    pub use tracemill_input::collected::*;
}
#[allow(dead_code)]
mod perf_data {
    pub use tracemill_datasets::perf_data::*;
}
#[allow(dead_code)]
#[path = "../../fuzz/src/targets.rs"]
mod targets;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn run(target: &str, data: &[u8]) {
    match target {
        "packets" => targets::packets(data),
        "sync_ring" => targets::sync_ring(data),
        "walk" => targets::walk(data),
        "stitch_diff" => targets::stitch_diff(data),
        "bundle_toml" => targets::bundle_toml(data),
        "elf" => targets::elf(data),
        "stretch" => targets::stretch(data),
        "pt_packets" => targets::pt_packets(data),
        "perf_data" => targets::perf_data(data),
        "pt_walk" => targets::pt_walk(data),
        "pt_stitch_diff" => targets::pt_stitch_diff(data),
        "pt_stretch" => targets::pt_stretch(data),
        t => panic!("no fuzz target {t}"),
    }
}

/// Replay `tests/fuzz-regressions/<target>/<name>`.
fn replay(target: &str, name: &str) {
    let p = root()
        .join("datasets/tests/fuzz-regressions")
        .join(target)
        .join(name);
    let data = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    run(target, &data);
}

#[test]
fn seed_corpora_pass_every_check() {
    for t in [
        "packets",
        "sync_ring",
        "walk",
        "stitch_diff",
        "bundle_toml",
        "elf",
        "stretch",
        "pt_packets",
        "perf_data",
        "pt_walk",
        "pt_stitch_diff",
        "pt_stretch",
    ] {
        let dir = root().join("fuzz/corpus").join(t);
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.unwrap().path();
            eprintln!("{}", p.display());
            run(t, &std::fs::read(&p).unwrap());
            n += 1;
        }
        assert!(n > 0, "{t}: no seeds");
    }
}

// ----- findings ---------------------------------------------------------------------------

/// `elf`: an ELF whose executable PT_LOAD ends beyond 2^64 - 1 (here with the load base
/// 0xffff_ffff_ffff_f000) made `Segment::end` overflow. Fixed in `decode/src/image.rs`:
/// segments are cut at the top of the address space.
#[test]
fn elf_segment_past_the_top_of_the_address_space() {
    replay("elf", "segment-end-overflow");
}

/// `walk` (the `kernel-processes` seed: CR3 unknown, so the busybox code is ambiguous):
/// a gap found while walking code before a packet already read ahead was reported at the
/// reader's position, after that packet, which then became the resume point, so
/// `events.offset` went backwards (28 -> 23). Fixed in `decode/src/flow.rs`: the gap is
/// reported at the read-ahead packet's offset.
#[test]
fn walk_gap_before_a_read_ahead_packet_keeps_event_offsets_ordered() {
    replay("walk", "kernel-seed-event-offsets-decrease");
}

/// Replay a `walk` input with every contract checked, at one chunk and chunks of 1 byte.
fn walk_strict(name: &str) {
    let p = root()
        .join("datasets/tests/fuzz-regressions/walk")
        .join(name);
    let data = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let case = targets::Case::parse(&data).expect("a walk input");
    for chunk in [u64::MAX, 1] {
        targets::check_contracts(&case.decode(chunk), case.trace.len() as u64);
    }
}

/// `walk`, finding `tsc-backwards`, STS case: STS packets whose TSC[39:0] goes from
/// 961533698015 back to 751805137631 (less than 2^39 below, so not a wrap) gave
/// `timing.tsc` (and `branches.tsc`) that decrease, against the contract that they never
/// do. No hardware sends this, but a damaged trace can. Fixed in `Clock::fact`
/// (`decode/src/timing.rs`): the reported TSC holds at its highest value until the clock,
/// which follows the packets, passes it again.
#[test]
fn walk_backward_sts_keeps_tsc_non_decreasing() {
    walk_strict("sts-backwards");
}

/// `walk`, finding `tsc-backwards`, MTC case (Cycle_Acc, guaranteed ratio 20, an STS with
/// core/bus ratio 6): `tsc_now()` extrapolates the last TSC by cycles × 20 / 6 to
/// 130845803913 at a CYC; the next MTC gives 130845749248, and `timing.tsc` decreased.
/// Fixed as the STS case (the reported value holds; the clock is not pushed ahead, so an
/// extrapolation that overshoots does not accumulate).
#[test]
fn walk_mtc_below_extrapolated_tsc_keeps_tsc_non_decreasing() {
    walk_strict("mtc-below-extrapolation");
}

/// `walk`, finding `lookahead-events`: PSB FUP.PGD(0xf5f50028) STS. The walker read the
/// STS while the FUP.PGD waited in its look-ahead, so the `freq_change` event (offset 14)
/// came out before the `disable` event of the FUP.PGD (offset 9): `events.offset`
/// decreased, and its `seq` did not count the rows walked up to the FUP's IP. Fixed in
/// `decode/src/flow.rs`: events read during a look-ahead wait until the FUP is applied.
#[test]
fn walk_events_read_during_look_ahead_stay_in_offset_order() {
    walk_strict("lookahead-events");
}

/// `stitch_diff`, finding `stitch-timing`: a `jumptable` stretch (Cycle_Acc, ratio 20)
/// with junk before it and PSBs at 394 and 504. Row 16 (a TIP at 426) is exact, but its
/// CYC is damaged (an error at 429, "reserved cycle count length"). The sequential decode
/// dated it, and interpolated rows 13..15 towards it, with the first CYC after the gap
/// (at 519, after the resync at 514), so time crossed the gap; the chunked decode, whose
/// next piece did not hold that CYC, held them at the last anchor, as the gap rule says.
/// Fixed in `decode/src/timing.rs` (`Timeline::time_after`): a packet's CYC is looked for
/// only up to the next error, enable, disable, resync or TraceStop.
#[test]
fn stitch_interpolated_cycles_match_sequential() {
    replay("stitch_diff", "interpolated-cycles-at-boundary");
}

#[test]
fn bundle_ring_offset_inside_the_probe_psb() {
    replay("bundle_toml", "ring-offset-cuts-psb");
}

/// `stitch_diff`: a `jumptable`-image trace with PSBs at 0, 197, 764 and 882.
/// Sequentially, the compressed RET decided at offset 851 (after the PSB at 764) is an
/// error, "compressed RET at 0x453893, but the last call is unknown"; with chunks of 1
/// byte the same RET was resolved (a `ret` row to 0x4012b0): 137 rows against 136. The
/// body of the chunk at 197 met a gap before any call, and kept LAST_CALL_NLIP as
/// "unknown from the chunk start"; the stitch, converging before the gap, then filled in
/// its own value, which the sequential decode had lost at the gap. Fixed in
/// `decode/src/flow.rs` (`gap`): after a gap the last call is unknown in every role.
#[test]
fn stitch_compressed_ret_after_gap_matches_sequential() {
    replay("stitch_diff", "compressed-ret-last-call");
}

/// `stitch_diff`: a `jumptable`-image trace with PSBs at 0 and 355. A FUP.PGD at 88 left
/// one instruction open (a partial block, counted with the next row); tracing resumed at
/// 370 at a kernel address no image covers, which is a gap that discards the open count,
/// and again at 403. Sequentially, the first row after 403 has `insns` 1. In the chunked
/// decode the body of the chunk at 355 started at 370 and met the same gap, but the
/// stitch, converging at 370 with one instruction open, added it to the body's first row
/// (`insns` 2, and every later interpolated `cycles` off by one or two). Fixed in
/// `decode/src/chunk.rs` (`stitch`): when the body discarded its open count before its
/// first row (`Body::open_forgotten`), the stitch's open count and partial blocks are
/// discarded too.
#[test]
fn stitch_open_count_lost_in_a_body_gap_matches_sequential() {
    replay("stitch_diff", "open-count-after-body-gap");
}

/// `stitch_diff`: a `jumptable`-image trace with PSBs at 0 and 150. Row 95, a TIP at 147,
/// is exact, but a PSB follows before any CYC, then a FUP.BuffOvf with its CYC. The
/// sequential decode took that CYC (after the PSB) as the TIP's and interpolated rows
/// 92..95 towards it; the chunked decode, whose next piece did not hold it, held them. A
/// PSB ends any wait for a CYC (as the packet reader already knew): fixed in
/// `decode/src/timing.rs` (`Mark::ends_cyc_search`, PSB events among the marks).
#[test]
fn stitch_cyc_after_a_psb_is_not_the_packets_before_it() {
    replay("stitch_diff", "cyc-after-psb");
}

/// `stitch_diff`: a busybox-image trace; CR3 is known from a PIP before the PSB at 551,
/// whose PSB+ carries none. At 560 a FUP.FAR is followed by a PIP (a new CR3) and its TIP.
/// The walker reads the PIP while pairing the FUP with its TIP, and applied the new CR3 at
/// once: the sequential decode still walked a block it had found before reading ahead,
/// the chunked one looked the block at 0x4eda3a up in the new address space and found no
/// image. The PIP now takes effect when the FUP is consumed (`decode/src/flow.rs`,
/// `cr3_after_fup`; unit test `pip_between_fup_far_and_tip_applies_after_the_fup_4_2_10`).
#[test]
fn stitch_cr3_known_before_a_psb_is_kept_across_it() {
    replay("stitch_diff", "cr3-across-psb");
}

/// `stitch_diff`: a busybox-image trace. A jmp back to 0x57a8b3 in address space 0x1000
/// left the walker's link to that block; a gap, PSBs and a PIP to CR3 0x10 followed, and
/// the walk resumed at 0x57a8b3. The sequential decode walked the linked block of the old
/// address space once more (a row at 460); the chunked decode, whose stitch had no link,
/// found no image. A CR3 change now drops the link (`decode/src/flow.rs`, `set_cr3`; unit
/// test `after_a_pip_the_next_block_is_looked_up_in_the_new_address_space_4_2_10`).
#[test]
fn stitch_block_link_does_not_outlive_a_cr3_change() {
    replay("stitch_diff", "hint-across-pip");
}

/// `stitch_diff`: a `jumptable` trace in cycle-accurate mode. Row 55 closes a full TNT at
/// 198 whose CYC follows; an error at 202, a PSB and, much later, an overflow at 303 with
/// a zero CYC. The sequential decode applied 4.2.5 to that later overflow and held rows
/// 45..65 at 638 cycles; the chunked one, whose pieces did not reach it, timed row 55 at
/// its own CYC. 4.2.5 needs the FUP.BuffOvf right after the TNT (`decode/src/timing.rs`,
/// `overflow_rule`; unit test
/// `full_tnt_cyc_dates_the_overflow_only_right_before_a_zero_cyc_buffovf_4_2_5`).
#[test]
fn stitch_overflow_rule_needs_the_overflow_right_after_the_tnt() {
    replay("stitch_diff", "overflow-far-after-tnt");
}

/// `stitch_diff`: a `jumptable` trace: seven PSBs, each followed by an enable at 0x4012b0,
/// a disable at the next instruction and an error while disabled; no branch row anywhere.
/// Each enable/disable leaves a one-instruction partial block waiting for a row. In the
/// chunked decode the stitches carried them on from chunk to chunk until they filled the
/// four inline places; the fifth went to a stitch's own rows and was counted there,
/// although the sequential decode lost them all at the final gap. The same block now adds
/// to one place's count (`decode/src/flow.rs`, `Partials::push`; unit test
/// `partials_of_the_same_block_share_one_place`).
#[test]
fn stitch_repeated_partial_blocks_without_rows_match_sequential() {
    replay("stitch_diff", "partials-without-rows");
}

/// `stitch_diff`: a busybox-image trace, chunks of 64 bytes. The second chunk's body met a
/// FUP.BuffOvf whose compressed IP it could not read (its LAST_IP was unknown) and cleared
/// LAST_CALL_NLIP while still unsynced; the sequential decode resumed there, traced a
/// call, and resolved the compressed RET at 0x409422 that the body, resuming later with
/// the cleared value, reported as an error. Before its first resume point a body leaves
/// LAST_CALL_NLIP unknown from the chunk start (`decode/src/flow.rs`, `Walker::idle`).
#[test]
fn stitch_unreadable_overflow_before_the_body_start_matches_sequential() {
    replay("stitch_diff", "buffovf-before-body-start");
}

/// `stitch_diff`: a `jumptable` trace of PSBs, each followed by an enable and a disable
/// inside the block at 0x40129e (entering at 0x4012ad, 0x4012ae or 0x4012b0, leaving at
/// 0x4012b0 or 0x4012b1) and an error, with no branch row: five distinct partial blocks
/// waited at once. Four fitted in the state's inline places; a stitch handed the fifth
/// to its own rows, where it counted, while the sequential decode dropped it at the next
/// gap. Waiting blocks now travel with the state, any number of them
/// (`decode/src/flow.rs`, `Partials`; unit test `partials_of_the_same_block_share_one_place`).
#[test]
fn stitch_five_distinct_partial_blocks_without_rows_match_sequential() {
    replay("stitch_diff", "five-distinct-partials");
}

/// `pt_packets`, findings `back-to-back-psbs` and `psb-run-from-offset-0`: two PSBs
/// back to back, and a 40-byte run of `02 82` read from offset 0. `next_psb` names the
/// last 16 bytes of a run, but a reader that is at an earlier PSB-shaped part of the run
/// reads a PSB there too (then another PSB, or a PSB cut short by the named one, and
/// resumes there). The target wrongly expected exactly the named PSBs. Not a decoder
/// fault: the check now allows a PSB read inside the run of a named one.
#[test]
fn pt_packets_psbs_read_early_in_a_run() {
    replay("pt_packets", "back-to-back-psbs");
    replay("pt_packets", "psb-run-from-offset-0");
}

/// `pt_packets`, finding `tnt64-stop-bit-only`: a TNT-64 whose payload is 1 (the stop bit
/// in bit 0, no TNT bits) parsed as a TNT of length 0, which has no encoding. Fixed in
/// `decode/src/pt/packet.rs`: it is `EmptyTnt`, as libipt has it (`pte_bad_packet`).
#[test]
fn pt_packets_tnt64_with_only_a_stop_bit_is_an_error() {
    replay("pt_packets", "tnt64-stop-bit-only");
}

/// `perf_data`, finding `pipe-trailing-length-overflow`: a pipe-mode file whose AUXTRACE
/// record claims a data size near 2^64 overflowed the HEADER_ATTR scan's next position
/// (`perfdata/src/file.rs`, `pipe_attrs`: the addition is checked, the scan stops there;
/// unit test `pipe_attr_scan_stops_at_a_trailing_length_past_the_end`).
#[test]
fn perf_data_pipe_trailing_length_near_2_64() {
    replay("perf_data", "pipe-trailing-length-overflow");
}

/// `perf_data`, finding `identifier-without-sample-id-all`: events that differ in
/// `sample_type` but all have IDENTIFIER, without `sample_id_all`. A LOST record read
/// (its last 8 bytes happened to be an event's id), but written again it did not: without
/// `sample_id_all` non-sample records have no trailer and no identifier
/// (`perfdata/src/file.rs`, `attr_for`: no trailer is read, the event is unknown unless
/// there is one; unit test `identifier_layout_without_sample_id_all_reads_no_trailer`).
#[test]
fn perf_data_identifier_without_sample_id_all() {
    replay("perf_data", "identifier-without-sample-id-all");
}

/// `pt_stitch_diff`, finding `psb-ahead-of-the-walk` (a seed: a `jumptable` walk with
/// PSB+ at any step, MTC and TSC): a PSB+ whose FUP names an instruction ahead of the walk
/// (SDM 36.4.2.17: the IP when the PSB was sent). The walker read it, then walked a direct
/// call (row 1828) to that IP; the PSB's event came before the row, and the row, which no
/// packet decides, was placed at the next decided row, after the PSB+ and two MTCs. The
/// chunked decode, whose stitch ended at that call, placed it before them: its `tsc`
/// differed. The rows walked up to a PSB+'s FUP retired before the PSB: its events follow
/// them (`decode/src/flow.rs`, `Walker::status_events`) and a PSB bounds where a `jmp` or
/// `call` row sits (`decode/src/timing.rs`, `effective_offsets`).
#[test]
fn pt_stitch_psb_plus_ahead_of_the_walk_36_4_2_17() {
    replay("pt_stitch_diff", "psb-ahead-of-the-walk");
}

/// `pt_walk`, finding `psb-plus-cut-off`: PSB, CBR and the end of the trace. The PSB+
/// without PSBEND was reported at its PSB (18), after the CBR's `freq_change` (34):
/// `events.offset` decreased (contract: it never does). Reported where the PSB+ is cut
/// off, the end of the range or trace (`decode/src/pt/front.rs`, `psb_plus`).
#[test]
fn pt_walk_psb_plus_cut_off_keeps_event_offsets_ordered() {
    replay("pt_walk", "psb-plus-cut-off");
    replay("pt_stitch_diff", "psb-plus-cut-off-stitched");
}

/// `pt_stitch_diff`, finding `psb-inside-psb-plus`: a busybox-image trace where a PSB+
/// holds a packet out of place and then a PSB (at 47). The sequential decode took the PSB
/// for the broken PSB+'s bad packet and read its PSB+ as ordinary packets (a PIP event at
/// 75); a chunk starting at that PSB read it as one (a `psb` event at 47). A PSB ends the
/// broken PSB+ and starts the next (SDM 36.4.2.17): it is read again
/// (`decode/src/pt/front.rs`, `psb_plus`).
#[test]
fn pt_stitch_psb_inside_a_psb_plus_starts_the_next_36_4_2_17() {
    replay("pt_stitch_diff", "psb-inside-psb-plus");
}

/// `pt_stitch_diff`, finding `tail-across-psb`: TIP.PGE, a TNT, a direct call to a far
/// transfer, then a PSB+ cut off by the end of the trace. The sequential decode walked the
/// call, read the PSB, met the error and dropped the call's row as unproven; the chunked
/// decode ended the first chunk at the PSB with the row already handed on. A chunk may
/// start at every PSB: the rows walked before a PSB stay whatever follows it
/// (`decode/src/flow.rs`, `next_item`).
#[test]
fn pt_stitch_rows_walked_before_a_psb_stay() {
    replay("pt_stitch_diff", "tail-across-psb");
}

/// `pt_stitch_diff`, finding `tail-across-psb-in-look-ahead`: a TNT, a direct jump to a
/// far transfer, then a FUP.FAR whose look-ahead for its TIP read a PSB at the next
/// chunk's start and its broken PSB+. The sequential decode dropped the jump's row at the
/// error; the chunked one, whose first chunk ended at the PSB, had handed it on. The rule
/// of `tail-across-psb` holds for a PSB read in a look-ahead too.
#[test]
fn pt_stitch_rows_walked_before_a_psb_read_looking_ahead_stay() {
    replay("pt_stitch_diff", "tail-across-psb-in-look-ahead");
}

/// `pt_walk`, finding `mode-before-ovf`: PSB+, MODE.Exec (18), a TNT while tracing is
/// off (an error at 20), OVF (21). The MODE.Exec waited for the packet it binds to; the
/// OVF resolved it with tracing off, and its event came out at its own offset, 18, after
/// the error at 20: `events.offset` decreased (contract: it never does). Bound by the
/// OVF, it is reported at the OVF (`decode/src/pt/front.rs`, `overflow`; SDM 36.4.2.16).
#[test]
fn pt_walk_mode_resolved_by_an_overflow_keeps_event_offsets_ordered() {
    replay("pt_walk", "mode-before-ovf");
}

/// `pt_stitch_diff`, finding `mtc-before-undone-fup`: MTC mode, a TNT (row 0, a `cond`
/// at 0x37), a direct jump to a far transfer (row 1, no packet), an MTC (0x38), a FUP.FAR
/// (0x3a) and a PSB (0x3d) whose PSB+ is broken. Sequentially, row 1 sits at the error the
/// FUP.FAR without a TIP makes (offset 58), so the MTC comes before it and row 0 is
/// interpolated towards the MTC. With 1-byte chunks the first chunk ends at the PSB: the
/// FUP's look-ahead runs off the range and is undone back to before the MTC, so that piece
/// ends with row 1 and no mark after it; the MTC and the error came in the next piece,
/// after row 1, and row 0 was held at the TSC. The `jmp`/`call` rows that end a piece now
/// sit where the next piece's first decided row or stop is, and the next piece's marks
/// before that are handled with them (`decode/src/timing.rs`, `lead_bound`,
/// `Timeline::process`).
#[test]
fn pt_stitch_trailing_undecided_rows_and_the_next_pieces_marks() {
    replay("pt_stitch_diff", "mtc-before-undone-fup");
}

/// `pt_walk` (found by `pt_stitch_diff`'s contract check), finding `mwait-before-exstop`:
/// MWAIT (18), a TNT while tracing is off (an error at 28), EXSTOP without IP (29). The
/// MWAIT waits for the EXSTOP it binds to (SDM 36.4.2.22-23); bound, it came out at its own
/// offset, after the error: `events.offset` decreased. A bound MWAIT (and a PWRE bound by
/// its PWRX) is reported at the binding packet, as one bound to a FUP is at the FUP
/// (`decode/src/pt/front.rs`).
#[test]
fn pt_walk_mwait_bound_by_exstop_keeps_event_offsets_ordered() {
    replay("pt_walk", "mwait-before-exstop");
}

/// `pt_walk`, finding `skd010-timing-before-ovf` (Skylake, 6/78): OVF (18), CBR (20),
/// TIP.PGD (24). With SKD010 (the FUP after an OVF may be dropped) the front end moves to
/// the recovery point, the TIP.PGD, counting the timing packets on the way (the CBR's
/// `freq_change` at 20), and then reported the overflow at the OVF, 18: `events.offset`
/// decreased. It is reported at the recovery point (`decode/src/pt/front.rs`,
/// `skd010_at`).
#[test]
fn pt_walk_skd010_overflow_keeps_event_offsets_ordered() {
    replay("pt_walk", "skd010-timing-before-ovf");
}

/// `pt_walk`, `ovf-before-psb-plus-body` and, minimized, `ovf-cbr-mode` (Skylake 6/78):
/// an OVF, then timing packets (CBR) and what looks like a PSB+ without its PSB. The same
/// fault as `skd010-timing-before-ovf` (the overflow reported at the OVF, after the CBR's
/// `freq_change` that SKD010's move to the recovery point counted), found again by a
/// campaign that ran a binary built before that fix; kept as two more regressions.
#[test]
fn pt_walk_overflow_before_a_headless_psb_plus_keeps_event_offsets_ordered() {
    replay("pt_walk", "ovf-cbr-mode");
    replay("pt_walk", "ovf-before-psb-plus-body");
}

// ----- Intel PT seeds ---------------------------------------------------------------------

/// The seed corpora of `pt_walk`, `pt_stitch_diff` and `pt_stretch` (`fuzz/corpus/pt_*`):
/// synthetic walks over the code of the targets' two image sets (the `jumptable` ELF;
/// busybox, CR3-tagged 0x1000), encoded as Intel PT by `pt_encode` with RET compression
/// on and off, user-only or every CPL, TNT-64, deferred TIPs, PSB+ at any step and
/// overflows. Each PSB+ gains a PIP (busybox) and, as the case's header enables them,
/// TSC/TMA/CBR; CYCs go before the packets that decide branches, MTCs as a model CTC
/// crosses 2^MTCFreq. The whole trace must decode to the same branches as the encoder's
/// (no timing packets), then slices of about 2 KiB at and around PSBs become the seeds.
///
/// Writes the files (run from anywhere):
/// `cargo test --release -p tracemill-datasets --test fuzz_regressions -- --ignored write_pt_seed_corpora`
#[test]
#[ignore = "writes fuzz/corpus/pt_*; run by hand to regenerate the seeds"]
fn write_pt_seed_corpora() {
    use tracemill_datasets::exec::synthetic::{Code, WalkConfig};
    use tracemill_datasets::pt_encode::{encode_execution, PtOptions, PtOverflow};
    use tracemill_decode::pt::{self, Packet};
    use tracemill_decode::stream::TraceStream;

    struct Variant {
        name: &'static str,
        images: u8,
        seed: u64,
        opts: PtOptions,
        // cyc, mtc, tsc, cpu index, [byte 1, byte 2, byte 3]
        cyc: bool,
        mtc: bool,
        tsc: bool,
        cpu: u8,
        hdr: [u8; 3],
    }
    let base = PtOptions {
        psb_every: 512,
        ..PtOptions::default()
    };
    let ovf = Some(PtOverflow {
        seed: 3,
        every_steps: (300, 1_500),
        duration_steps: (1, 40),
    });
    let variants = [
        Variant {
            name: "jumptable-retc",
            images: 0,
            seed: 1,
            opts: base.clone(),
            cyc: false,
            mtc: false,
            tsc: false,
            cpu: 0,
            hdr: [0, 0, 0],
        },
        Variant {
            name: "jumptable-noretc-tnt64-timed",
            images: 0,
            seed: 2,
            opts: PtOptions {
                ret_compression: false,
                long_tnt: true,
                ..base.clone()
            },
            cyc: true,
            mtc: true,
            tsc: true,
            cpu: 1,
            hdr: [0x23, 168, 24],
        },
        Variant {
            name: "jumptable-allcpl-deferred-anystep",
            images: 0,
            seed: 3,
            opts: PtOptions {
                user_only: false,
                deferred_tips: true,
                psb_at_any_step: true,
                ..base.clone()
            },
            cyc: false,
            mtc: true,
            tsc: true,
            cpu: 2,
            hdr: [0x20, 200, 20],
        },
        Variant {
            name: "jumptable-overflows-cyc",
            images: 0,
            seed: 4,
            opts: PtOptions {
                overflow: ovf,
                ..base.clone()
            },
            cyc: true,
            mtc: false,
            tsc: true,
            cpu: 4,
            hdr: [0, 0, 16],
        },
        Variant {
            name: "busybox-retc-tsc",
            images: 1,
            seed: 5,
            opts: base.clone(),
            cyc: false,
            mtc: false,
            tsc: true,
            cpu: 5,
            hdr: [0, 0, 0],
        },
        Variant {
            name: "busybox-overflows-deferred-timed",
            images: 1,
            seed: 6,
            opts: PtOptions {
                overflow: ovf,
                deferred_tips: true,
                user_only: false,
                long_tnt: true,
                psb_at_any_step: true,
                ..base.clone()
            },
            cyc: true,
            mtc: true,
            tsc: true,
            cpu: 6,
            hdr: [0x19, 100, 30],
        },
    ];

    let elfs: [&[u8]; 2] = [
        &std::fs::read(root().join("datasets/samples/jumptable/images/jumptable")).unwrap(),
        &std::fs::read(root().join("datasets/samples/kernel-processes/images/busybox")).unwrap(),
    ];
    let put = |target: &str, name: &str, data: &[u8]| {
        let dir = root().join("fuzz/corpus").join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), data).unwrap();
    };
    let put_bytes = |p: &Packet, out: &mut Vec<u8>| pt::encode::encode(p, out).unwrap();
    let mut total = 0;
    for v in &variants {
        let elf = elfs[v.images as usize];
        let code = Code::from_elf("seed", elf).unwrap();
        let mut cfg = WalkConfig::new(v.seed, 20_000);
        cfg.interrupt_rate = 1.0 / 200.0;
        let exec = code.execution(&cfg);
        let mut img = tracemill_decode::image::ImageSet::new();
        img.add_elf("seed", elf, None, None).unwrap();
        let out = encode_execution(&img, &v.opts, exec.entry, exec.steps.iter().copied());

        // Timing packets and PIPs, put between the encoder's packets.
        let hdr = [
            targets::PtCase::flags(v.images, v.opts.ret_compression, v.cyc, v.mtc, v.tsc, v.cpu),
            v.hdr[0],
            v.hdr[1],
            v.hdr[2],
        ];
        let mtc_freq = hdr[1] & 0xF;
        let (mut cycles, mut x) = (0u64, v.seed);
        let ctc = |c: u64| c / 3;
        let tsc = |c: u64| 0x1_0000_0000 + c * 2;
        let stream = TraceStream::linear(&out.bytes);
        let mut bytes = Vec::new();
        for item in pt::PacketReader::new(&stream, 0, stream.len(), Default::default()) {
            let p = item.expect("the encoder's packets parse");
            let decides = matches!(
                p.packet,
                Packet::Tnt8(_)
                    | Packet::Tnt64(_)
                    | Packet::Tip(_)
                    | Packet::TipPge(_)
                    | Packet::TipPgd(_)
                    | Packet::Fup(_)
            );
            if decides {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let d = 1 + (x >> 58) * (1 + (x >> 40) % 7);
                let before = ctc(cycles) >> mtc_freq;
                cycles += d;
                if v.mtc && ctc(cycles) >> mtc_freq != before {
                    put_bytes(&Packet::Mtc((ctc(cycles) >> mtc_freq) as u8), &mut bytes);
                }
                if v.cyc {
                    put_bytes(&Packet::Cyc(d), &mut bytes);
                }
            }
            let at = p.offset as usize;
            bytes.extend_from_slice(&out.bytes[at..at + p.size as usize]);
            if p.packet == Packet::Psb {
                if v.tsc {
                    put_bytes(&Packet::Tsc(tsc(cycles)), &mut bytes);
                    if v.mtc {
                        let c = ctc(cycles);
                        put_bytes(
                            &Packet::Tma {
                                ctc: c as u16,
                                fc: 0,
                            },
                            &mut bytes,
                        );
                    }
                }
                put_bytes(&Packet::Cbr(24), &mut bytes);
                if v.images == 1 {
                    put_bytes(
                        &Packet::Pip {
                            cr3: 0x1000,
                            nr: false,
                        },
                        &mut bytes,
                    );
                }
            }
        }

        // The whole trace decodes to the encoder's rows, flow columns alone.
        let mut data = hdr.to_vec();
        data.extend_from_slice(&bytes);
        let case = targets::PtCase::parse(&data).unwrap();
        let d = case.decode(u64::MAX);
        let errors: Vec<_> = d
            .events
            .iter()
            .filter(|e| e.kind == tracemill_schemas::EventKind::Error)
            .take(3)
            .map(|e| format!("@{} {}", e.offset, e.detail))
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", v.name);
        let want = out.truth.provable();
        assert_eq!(want.len(), d.rows.len(), "{}: rows", v.name);
        for i in 0..want.len() {
            let (w, g) = (want.row(i), d.rows.row(i));
            assert_eq!(
                (w.ip, w.kind, w.taken, w.target, w.compressed, w.insns),
                (g.ip, g.kind, g.taken, g.target, g.compressed, g.insns),
                "{}: row {i}",
                v.name
            );
        }
        if v.tsc {
            assert!(d.rows.tsc.get(d.rows.len() - 1).is_some(), "{}", v.name);
        }

        // Slices: at a PSB (2 KiB), and from 100 bytes before another (1.5 KiB).
        let psbs = pt::sync::find_psbs(&TraceStream::linear(&bytes));
        assert!(psbs.len() > 8, "{}: {} PSBs", v.name, psbs.len());
        let cut = |from: usize, n: usize| {
            let mut s = hdr.to_vec();
            s.extend_from_slice(&bytes[from..(from + n).min(bytes.len())]);
            s
        };
        let a = cut(psbs[2] as usize, 2048);
        let b = cut(psbs[psbs.len() / 2] as usize - 100, 1536);
        for t in ["pt_walk", "pt_stitch_diff"] {
            put(t, &format!("{}-psb", v.name), &a);
            put(t, &format!("{}-mid", v.name), &b);
            total += a.len() + b.len();
        }

        // pt_stretch: [header, prefix length, prefix, unit]; the prefix is the PSB+ of
        // the third PSB, the unit the trace from there to the next PSB (a loop of PSB
        // segments), or the timing packets and PADs after it (a long idle stretch).
        let (p2, p3) = (psbs[2] as usize, psbs[3] as usize);
        let psbend = p2
            + bytes[p2..]
                .windows(2)
                .position(|w| w == [0x02, 0x23])
                .unwrap()
            + 2;
        let prefix = &bytes[p2..psbend];
        let mut s = hdr.to_vec();
        s.push(prefix.len() as u8);
        s.extend_from_slice(prefix);
        let mut loop_ = s.clone();
        loop_.extend_from_slice(&bytes[p2..p3.min(p2 + 1000 - s.len())]);
        put("pt_stretch", &format!("{}-loop", v.name), &loop_);
        let mut idle = s;
        let mut unit = Vec::new();
        for p in [
            Packet::Mtc(7),
            Packet::Cyc(300),
            Packet::Pad,
            Packet::Cbr(24),
        ] {
            put_bytes(&p, &mut unit);
        }
        idle.extend_from_slice(&unit);
        put("pt_stretch", &format!("{}-idle", v.name), &idle);
        total += loop_.len() + idle.len();
        eprintln!(
            "{}: {} bytes, {} PSBs, {} rows",
            v.name,
            bytes.len(),
            psbs.len(),
            want.len()
        );
    }
    eprintln!("{total} bytes of seeds");
}

/// `pt_stitch_diff`, finding `call-offset-chunked` (the first clean-clone CI run after the
/// resync and Event Trace merges): at chunk size 1 a direct call's row had another `offset`
/// than in the sequential decode.
#[test]
fn pt_call_offset_the_same_in_chunks() {
    replay("pt_stitch_diff", "call-offset-chunked");
}

/// `pt_stitch_diff`, finding `in-tx-chunked` (a local run after the TSX merge): the
/// chunked and sequential decodes agreed on every row, but one held an `in_tx` column of
/// `false`s where the other held none (the same column); comparisons read it by row.
#[test]
fn pt_in_tx_the_same_in_chunks() {
    replay("pt_stitch_diff", "in-tx-chunked");
    // The same, found by the clean-clone CI run's fuzzing before the fix.
    replay("pt_stitch_diff", "in-tx-chunked-2");
}

/// `pt_walk`, finding `events-out-of-order` (a clean-clone CI run's fuzzing): a VMCS read
/// ahead at offset 0x1ac (looking for a deferred TIP while the bits of the TNT-64 at 0x1a2
/// were still in use) was reported before the error found at that TNT ("not-taken TNT bit
/// for the RET"), so `events.offset` decreased. An event about an earlier packet now goes
/// before the events read ahead of it (`Facts::place`).
#[test]
fn pt_events_stay_in_offset_order_around_an_error() {
    replay("pt_walk", "events-out-of-order");
}

/// `pt_stitch_diff`, finding `memo-step-coverage`: MODE.EXEC packets send the walk through
/// the same bytes in 32-bit and in 64-bit mode, as blocks with the same start and end and
/// other instruction counts (REX bytes are INC/DEC in 32-bit code). Coverage kept one
/// block for both with whichever count came first, and the memo walk (counts per segment)
/// and the step walk (per row) came to them in another order. A block's key holds its
/// instruction count (`decode/src/coverage.rs`).
#[test]
fn pt_stitch_memo_step_coverage_same_bytes_in_two_modes() {
    replay("pt_stitch_diff", "memo-step-coverage");
}

/// `pt_stretch`, finding `cycles-decrease`: a CYC packet with enough extension bytes to
/// carry a value near 2^64 wrapped the cycle count, and `timing.cycles` decreased
/// (contract: it never does). The count saturates (`decode/src/pt/clock.rs`).
#[test]
fn pt_stretch_a_huge_cyc_does_not_wrap_the_cycle_count() {
    replay("pt_stretch", "cycles-decrease");
}
