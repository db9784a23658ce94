//! A TIP or TNT cut short by the end of the trace (a snapshot's end, a truncated AUX
//! buffer): the walk goes on to the branch that would take it, and stops there, as
//! libipt's does (its query decoder reads a packet's opcode ahead, the packet itself
//! only when a branch asks for it). Direct branches on the way need nothing from the
//! trace and no event can come before a TIP or TNT, so their rows are proven. Any other
//! packet cut short (a FUP, an event) stops the walk after the last whole packet.

mod common;

use tracemill_decode::chunk::Decoded;
use tracemill_decode::image::ImageSet;
use tracemill_schemas::EventKind;

/// 0x1000: je 0x1004; nop; nop; 0x1004: call 0x1010; 0x1009: hlt ... 0x1010: jmp rax;
/// 0x1012: jne 0x1000.
fn code() -> Vec<u8> {
    let mut c = vec![0xF4u8; 0x20];
    c[..4].copy_from_slice(&[0x74, 0x02, 0x90, 0x90]);
    c[4..9].copy_from_slice(&[0xE8, 0x07, 0, 0, 0]);
    c[0x10..0x14].copy_from_slice(&[0xFF, 0xE0, 0x75, 0xEC]);
    c
}

/// PSB+ (MODE.Exec 64-bit), TIP.PGE 0x1000, a TNT of one taken bit (the je), then `cut`.
fn trace(cut: &[u8]) -> Vec<u8> {
    let mut t = [0x02u8, 0x82].repeat(8);
    t.extend_from_slice(&[0x99, 0x01, 0x02, 0x23]); // MODE.Exec cs.l, PSBEND
    t.extend_from_slice(&[0x71, 0x00, 0x10, 0, 0, 0, 0]); // TIP.PGE 0x1000
    t.push(0x06); // TNT-8: taken
    t.extend_from_slice(cut);
    t
}

/// `trace` decoded sequentially and cut at every PSB (which must agree).
fn decode(trace: &[u8]) -> Decoded {
    let code = code();
    let mut images = ImageSet::new();
    images.add_raw("code", &code, 0x1000, None);
    common::decode_pt_both_ways(&images, trace, "the cut trace")
}

fn errors(d: &Decoded) -> Vec<(Option<u64>, u64, &str)> {
    d.events
        .iter()
        .filter(|e| e.kind == EventKind::Error)
        .map(|e| (e.ip, e.offset, e.detail.as_str()))
        .collect()
}

#[test]
fn a_cut_tip_is_walked_up_to_its_indirect_branch_and_the_direct_call_on_the_way_kept() {
    // TIP with four IP bytes (0x4d), two of them there.
    let t = trace(&[0x4D, 0x00, 0x20]);
    let d = decode(&t);
    assert_eq!(d.rows.ip, [0x1000, 0x1004], "the je and the call");
    assert_eq!(
        (d.rows.target.get(0), d.rows.target.get(1)),
        (Some(0x1004), Some(0x1010))
    );
    let e = errors(&d);
    assert_eq!(e.len(), 1, "{e:?}");
    // At the jmp rax that needed it, naming the cut packet at its offset.
    assert_eq!(
        (e[0].0, e[0].1),
        (Some(0x1010), t.len() as u64 - 3),
        "{e:?}"
    );
    assert!(
        e[0].2.contains("packet truncated: needs 5 bytes, 3 left"),
        "{e:?}"
    );
}

#[test]
fn a_cut_tnt_64_is_walked_up_to_its_conditional_branch() {
    // The jmp rax takes a whole TIP (to 0x1012); then a TNT-64 (02 a3 + 6 bytes), cut.
    let t = trace(&[0x4D, 0x12, 0x10, 0, 0, 0x02, 0xA3, 0x01]);
    let d = decode(&t);
    assert_eq!(
        d.rows.ip,
        [0x1000, 0x1004, 0x1010],
        "the je, the call, the jmp rax"
    );
    let e = errors(&d);
    assert_eq!(e.len(), 1, "{e:?}");
    // At the jne, which needed a bit of it.
    assert_eq!(
        (e[0].0, e[0].1),
        (Some(0x1012), t.len() as u64 - 3),
        "{e:?}"
    );
}

#[test]
fn a_cut_fup_stops_the_walk_after_the_last_whole_packet() {
    // A FUP (an event: an interrupt may strike anywhere) cut short: nothing after the
    // TNT is proven, so the call is not a row.
    let t = trace(&[0x5D, 0x00, 0x20]);
    let d = decode(&t);
    assert_eq!(d.rows.ip, [0x1000], "the je alone");
    let e = errors(&d);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].1, t.len() as u64 - 3, "{e:?}");
}
