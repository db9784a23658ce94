//! Where PIP, VMCS and PTW packets without an IP take effect: the instruction each binds
//! to (SDM 36.4.2.7 "Application", 36.4.2.15, 36.4.2.21), as libipt binds them, one test
//! a rule; the `events` row carries the place (`ip`: the instruction, `seq`: after its
//! row). libipt's own cases are in `ptxed_suite.rs` (`pip*`, `vmcs*`, `*ptw*`). Every
//! trace is decoded sequentially and cut at every PSB, with the same result.

use tracemill_decode::chunk::{decode_all, Decoded, Input};
use tracemill_decode::image::ImageSet;
use tracemill_decode::pt::encode::to_bytes;
use tracemill_decode::pt::packet::Packet;
use tracemill_decode::pt::PtConfig;
use tracemill_decode::stream::TraceStream;
use tracemill_schemas::{BranchKind, EventKind};

mod packets;
use packets::*;

const ORG: u64 = 0x1000;

/// 0x1000 nop; 0x1001 mov cr3, rax; 0x1004 nop; 0x1005 call far [rax]; 0x1007 hlt;
/// 0x1010 vmptrld [rax]; 0x1013 ptwrite eax; 0x1017 jmp 0x1020; 0x1020 nop; 0x1021 hlt.
fn code() -> Vec<u8> {
    let mut c = vec![0x90; 0x22];
    c[0x01..0x04].copy_from_slice(&[0x0F, 0x22, 0xD8]);
    c[0x05..0x07].copy_from_slice(&[0xFF, 0x18]);
    c[0x07] = 0xF4;
    c[0x10..0x13].copy_from_slice(&[0x0F, 0xC7, 0x30]);
    c[0x13..0x17].copy_from_slice(&[0xF3, 0x0F, 0xAE, 0xE0]);
    c[0x17..0x19].copy_from_slice(&[0xEB, 0x07]);
    c[0x21] = 0xF4;
    c
}

fn pip(cr3: u64) -> Packet {
    Packet::Pip { cr3, nr: false }
}

/// The end every trace here has: FUP + TIP.PGD() at 0x1020.
fn stop() -> Vec<Packet> {
    vec![Packet::Fup(full(0x1020)), Packet::TipPgd(none())]
}

fn bytes(packets: &[Packet]) -> Vec<u8> {
    packets
        .iter()
        .flat_map(|p| to_bytes(p).expect("encodable"))
        .collect()
}

fn decode_with(packets: &[Packet], images: &ImageSet<'_>) -> Decoded {
    let b = bytes(packets);
    let stream = TraceStream::linear(&b);
    let input = Input::pt(&stream, images, PtConfig::default());
    let seq = decode_all(&input, u64::MAX);
    let chunked = decode_all(&input, 1);
    assert_eq!(seq.rows, chunked.rows);
    assert_eq!(seq.events, chunked.events);
    seq
}

fn decode(packets: &[Packet]) -> Decoded {
    let c = code();
    let mut images = ImageSet::new();
    images.add_raw("code", &c, ORG, None);
    decode_with(packets, &images)
}

/// The events but PSBs, resyncs and the tail: seq, kind, IP, detail.
fn events(d: &Decoded) -> Vec<(u64, EventKind, Option<u64>, String)> {
    d.events
        .iter()
        .filter(|e| !matches!(e.kind, EventKind::Psb | EventKind::Resync | EventKind::Tail))
        .map(|e| (e.seq, e.kind, e.ip, e.detail.clone()))
        .collect()
}

fn ev(
    seq: u64,
    kind: EventKind,
    ip: Option<u64>,
    detail: &str,
) -> (u64, EventKind, Option<u64>, String) {
    (seq, kind, ip, detail.to_string())
}

/// 36.4.2.7, "Application" 2: a PIP binds to the next MOV CR3, and is reported after it,
/// with its IP (not where the packet was read, before the walk got there).
#[test]
fn pip_binds_to_the_next_mov_cr3() {
    let mut p = psb_at(0x1000);
    p.push(pip(0xa000));
    p.extend([Packet::Fup(full(0x1004)), Packet::TipPgd(none())]);
    let d = decode(&p);
    assert_eq!(
        events(&d),
        vec![
            ev(0, EventKind::Paging, Some(0x1001), "cr3=0xa000 nr=0"),
            ev(0, EventKind::Disable, Some(0x1004), ""),
        ]
    );
}

/// 36.4.2.7: a PIP binds to a far branch (its TIP comes after the PIP): reported after
/// the branch's row, at the branch. The far branch ran in the old address space, the
/// rows after it in the new one (`branches.cr3`).
#[test]
fn pip_binds_to_a_far_branch_after_its_row() {
    let mut p = psb_at(0x1004);
    p.extend([pip(0xa000), Packet::Tip(full(0x1017))]);
    p.extend(stop());
    let d = decode(&p);
    assert_eq!(
        events(&d),
        vec![
            ev(1, EventKind::Paging, Some(0x1005), "cr3=0xa000 nr=0"),
            ev(2, EventKind::Disable, Some(0x1020), ""),
        ]
    );
    assert_eq!(d.rows.len(), 2);
    assert_eq!(d.rows.kind[0], BranchKind::Far as u8);
    assert_eq!(d.rows.cr3.get(0), None);
    assert_eq!((d.rows.ip[1], d.rows.cr3.get(1)), (0x1017, Some(0xa000)));
}

/// 36.4.2.15: a VMCS packet binds to the next VMPTRLD.
#[test]
fn vmcs_binds_to_the_next_vmptrld() {
    let mut p = psb_at(0x1010);
    p.push(Packet::Vmcs(0xcdcd_c000));
    p.extend(stop());
    let d = decode(&p);
    assert_eq!(
        events(&d)[0],
        ev(0, EventKind::Paging, Some(0x1010), "vmcs=0xcdcdc000")
    );
}

/// 36.4.2.7, 36.4.2.15: a VMCS and a PIP both bind to one far branch, reported after its
/// row in stream order; a second PIP does not bind to the same instruction (libipt binds
/// one of each), so the far branch, which needs a TIP, finds a PIP: an error.
#[test]
fn vmcs_and_pip_bind_to_one_far_branch_once_each() {
    let mut p = psb_at(0x1004);
    p.extend([
        Packet::Vmcs(0xcdcd_c000),
        pip(0xa000),
        Packet::Tip(full(0x1017)),
    ]);
    p.extend(stop());
    let d = decode(&p);
    assert_eq!(
        &events(&d)[..2],
        &[
            ev(1, EventKind::Paging, Some(0x1005), "vmcs=0xcdcdc000"),
            ev(1, EventKind::Paging, Some(0x1005), "cr3=0xa000 nr=0"),
        ]
    );

    let mut p = psb_at(0x1004);
    p.extend([pip(0xa000), pip(0xb000), Packet::Tip(full(0x1017))]);
    p.extend(stop());
    let e = events(&decode(&p));
    assert_eq!(
        e[0],
        ev(0, EventKind::Paging, Some(0x1005), "cr3=0xa000 nr=0")
    );
    assert_eq!(e[1].1, EventKind::Error);
}

/// 36.4.2.21: a PTW without IP binds to the next PTWRITE, and is reported after it, at
/// it.
#[test]
fn ptw_without_ip_binds_to_the_next_ptwrite() {
    let mut p = psb_at(0x1010);
    p.push(Packet::Ptw {
        payload: 0xabcd,
        len: 4,
        ip: false,
    });
    p.extend(stop());
    let d = decode(&p);
    assert_eq!(
        events(&d)[0],
        ev(0, EventKind::Ptwrite, Some(0x1013), "0xabcd (4 bytes)")
    );
}

/// 36.4.2.7, "Application" 1: a PIP after an unbound FUP is part of that asynchronous
/// transfer: reported with it (after the interrupt, whose detail names the target), and
/// its CR3 is the target's.
#[test]
fn pip_after_an_unbound_fup_goes_with_the_transfer() {
    let mut p = psb_at(0x1000);
    p.extend([
        Packet::Fup(full(0x1000)),
        pip(0xa000),
        Packet::Tip(full(0x1017)),
    ]);
    p.extend(stop());
    let d = decode(&p);
    assert_eq!(
        &events(&d)[..2],
        &[
            ev(0, EventKind::Interrupt, Some(0x1000), "to 0x1017"),
            ev(0, EventKind::Paging, None, "cr3=0xa000 nr=0"),
        ]
    );
    assert_eq!((d.rows.ip[0], d.rows.cr3.get(0)), (0x1017, Some(0xa000)));
}

/// libipt: a PIP while tracing is off applies at once (SDM Table 36-50 5b: PIP before
/// the TIP.PGE of the MOV CR3 that enables tracing).
#[test]
fn pip_while_tracing_is_off_applies_at_once() {
    let mut p = vec![Packet::Psb, MODE64, Packet::PsbEnd];
    p.extend([pip(0xa000), Packet::TipPge(full(0x1017))]);
    p.extend(stop());
    let d = decode(&p);
    assert_eq!(
        &events(&d)[..2],
        &[
            ev(0, EventKind::Paging, None, "cr3=0xa000 nr=0"),
            ev(0, EventKind::Enable, Some(0x1017), ""),
        ]
    );
}

/// 36.4.2.5 (libipt): a TIP.PGD without IP binds to a MOV CR3 (the new CR3 leaves the
/// traced context) as well as to the next branch that needs trace: tracing stops after
/// the MOV CR3, whose instructions count.
#[test]
fn tip_pgd_without_ip_binds_to_a_mov_cr3() {
    let mut p = psb_at(0x1000);
    p.push(Packet::TipPgd(none()));
    let d = decode(&p);
    assert_eq!(
        events(&d),
        vec![ev(0, EventKind::Disable, Some(0x1004), "")]
    );
    let tail: u64 = d
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Tail)
        .map(|e| e.detail.parse::<u64>().unwrap())
        .sum();
    assert_eq!(tail, 2);
}

/// 36.4.2.7: the code up to the MOV CR3 is looked up in the old address space, the code
/// after it in the new one. With CR3-tagged images that differ at the same addresses, a
/// CR3 applied where the PIP is read would walk the new space's code from the start.
#[test]
fn a_pips_cr3_applies_after_its_instruction() {
    // Old space (0xb000): nop; mov cr3, rax; hlt.
    let old = [0x90, 0x0F, 0x22, 0xD8, 0xF4];
    // New space (0xa000): hlt x4, then at 0x1004 jmp 0x1010; 0x1010 nop.
    let mut new = vec![0xF4; 0x12];
    new[0x04..0x06].copy_from_slice(&[0xEB, 0x0A]);
    new[0x10] = 0x90;
    let mut images = ImageSet::new();
    images.add_raw("old", &old, ORG, Some(0xb000));
    images.add_raw("new", &new, ORG, Some(0xa000));
    let p = vec![
        Packet::Psb,
        pip(0xb000),
        MODE64,
        Packet::Fup(full(0x1000)),
        Packet::PsbEnd,
        pip(0xa000),
        Packet::Fup(full(0x1010)),
        Packet::TipPgd(none()),
    ];
    let d = decode_with(&p, &images);
    assert!(
        !d.events.iter().any(|e| e.kind == EventKind::Error),
        "{:?}",
        d.events
    );
    assert_eq!(d.rows.len(), 1);
    assert_eq!(
        (d.rows.ip[0], d.rows.target.get(0), d.rows.cr3.get(0)),
        (0x1004, Some(0x1010), Some(0xa000))
    );
}
