//! Intel PT resync after an error, as libipt 2.2 does it (docs/pt.md, "Resync"), on
//! cases of libipt's suite (`datasets/libipt-ptt/ptxed-resync-*`): each rule, decoded
//! sequentially and cut at every PSB, with the same result; and an enable where tracing
//! stopped (libipt's `[resumed]`).

use std::path::{Path, PathBuf};

mod common;

use tracemill_decode::chunk::Decoded;
use tracemill_decode::image::ImageSet;
use tracemill_schemas::EventKind;

fn case_dir(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../datasets/libipt-ptt")
        .join(case)
}

/// The case decoded sequentially and cut at every PSB (which must agree).
fn decode(case: &str) -> Decoded {
    let dir = case_dir(case);
    let trace = std::fs::read(dir.join(format!("{case}.pt"))).unwrap();
    let code = std::fs::read(dir.join(format!("{case}.bin"))).unwrap();
    let mut images = ImageSet::new();
    images.add_raw("code", &code, 0x100000, None);
    common::decode_pt_both_ways(&images, &trace, case)
}

/// (kind, ip) of every event but PSBs and the tail (the instructions after the last row).
fn events(d: &Decoded) -> Vec<(EventKind, Option<u64>)> {
    d.events
        .iter()
        .filter(|e| e.kind != EventKind::Psb && e.kind != EventKind::Tail)
        .map(|e| (e.kind, e.ip))
        .collect()
}

#[test]
fn no_code_at_an_ip_resyncs_at_the_next_tip() {
    // call rax to 0x100100 (no code); TIP 0x100200 (no code); TIP back into the code.
    let d = decode("ptxed-resync-nomap-tip");
    let ev = events(&d);
    use EventKind::*;
    assert_eq!(
        ev,
        [
            (Resync, Some(0x100000)),
            (Error, Some(0x100100)),
            (Resync, Some(0x100200)),
            (Error, Some(0x100200)),
            (Resync, Some(0x100005)),
            (Disable, Some(0x100006)),
        ]
    );
}

#[test]
fn direct_branches_walked_before_an_address_without_code_are_kept() {
    // jmp 0x100100 (direct, no code there): the jmp ran, its row stays.
    let d = decode("ptxed-resync-nomap-fup-tip");
    assert_eq!(d.rows.ip.first(), Some(&0x100000));
}

/// libipt 2.2's resync: after an error, a FUP + TIP (an asynchronous transfer) is a
/// resume point: the walk resumes at the FUP's IP and reports the interrupt there.
#[test]
fn a_fup_tip_after_an_error_resumes_at_the_fup_and_reports_the_interrupt() {
    let d = decode("ptxed-resync-nomap-fup-tip");
    let interrupts: Vec<_> = d
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Interrupt)
        .map(|e| (e.ip, e.detail.clone()))
        .collect();
    assert_eq!(
        interrupts,
        [
            (Some(0x100200), "to 0x100300".to_string()),
            (Some(0x100400), "to 0x100006".to_string()),
        ]
    );
}

/// libipt 2.2's resync: an event bound to an IP (MODE.TSX + FUP, PTW + FUP) after an
/// error resumes the walk at that IP, where the event applies.
#[test]
fn an_event_bound_to_an_ip_after_an_error_resumes_there() {
    // MODE.TSX + FUP: the transaction's begin and commit, each after an error.
    let d = decode("ptxed-resync-nomap-mode_tsx-eos");
    let kinds: Vec<_> = events(&d).into_iter().map(|(k, _)| k).collect();
    use EventKind::*;
    assert_eq!(kinds, [Resync, Error, Resync, Tsx, Error, Resync, Tsx]);
    // PTWRITE with its FUP: the walk resumes at the PTWRITE and reports it.
    let d = decode("ptxed-resync-nomap-ptw-fup");
    let ptw = d.events.iter().find(|e| e.kind == EventKind::Ptwrite);
    assert_eq!(ptw.and_then(|e| e.ip), Some(0x100003));
}

#[test]
fn a_packet_that_does_not_fit_the_code_is_the_resync_point() {
    // jnz wants a TNT bit, a TIP comes: an error at the jnz, and the walk goes on at
    // the TIP's target.
    let d = decode("ptxed-resync-bad_query-tip");
    use EventKind::*;
    assert_eq!(
        events(&d),
        [
            (Resync, Some(0x100000)),
            (Error, Some(0x100000)),
            (Resync, Some(0x100005)),
            (Disable, Some(0x100006)),
        ]
    );
    // A FUP + TIP instead: the interrupt at the FUP.
    let d = decode("ptxed-resync-bad_query-fup-tip");
    assert!(events(&d).contains(&(Interrupt, Some(0x100003))));
}

#[test]
fn a_psb_whose_mode_disagrees_with_the_walk_is_an_error_and_no_resync_point() {
    // 32-bit code; the PSB+ at its FUP says 64-bit: an error there, and the walk goes
    // on only at the next PSB+.
    let d = decode("ptxed-resync-psb-bad_status-psb");
    use EventKind::*;
    assert_eq!(
        events(&d),
        [
            (Resync, Some(0x100000)),
            (Error, Some(0x100003)),
            (Resync, Some(0x100004)),
            (Disable, Some(0x100005)),
        ]
    );
}

/// An enable at the instruction where tracing stopped is `resumed` (libipt's `[resumed]`):
/// after a SYSCALL whose TIP.PGD disabled tracing, the instruction after it; an enable
/// anywhere else, or after a PSB (a chunk may start there), is not.
#[test]
fn an_enable_where_tracing_stopped_is_resumed() {
    for case in ["syscall-sysret-cpl_3", "sysenter-sysexit-cpl_3"] {
        let d = decode(case);
        let enables: Vec<_> = d
            .events
            .iter()
            .filter(|e| e.kind == EventKind::Enable)
            .map(|e| (e.ip, e.detail.as_str()))
            .collect();
        // syscall (or sysenter) at 0x100000, 2 bytes: tracing resumes at 0x100002.
        assert_eq!(enables, [(Some(0x100002), "resumed")], "{case}");
    }
    // After a FUP + TIP.PGD, an enable at the FUP's IP resumes; elsewhere it is a plain
    // enable.
    let d = decode("fup-tip_pgd-tip_pge");
    assert!(d
        .events
        .iter()
        .any(|e| e.kind == EventKind::Enable && e.detail == "resumed"));
    let d = decode("fup-tip_pgd-tip_pge_other_ip");
    assert!(d
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Enable)
        .all(|e| e.detail.is_empty()));
}
