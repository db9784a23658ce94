//! Event Trace (CFE and EVD), TRIG and MNT packets (and the power packets' order) as
//! `events` rows: each packet kind's binding rule (libipt's event decoder), one test a
//! rule. libipt's own cases for them are
//! in `ptxed_suite.rs` (`ptet-*`, `*trig*`, `*mnt*`). Every trace is decoded sequentially
//! and cut at every PSB, with the same result.

use tracemill_decode::chunk::{decode_all, Decoded, Input};
use tracemill_decode::image::ImageSet;
use tracemill_decode::pt::encode::to_bytes;
use tracemill_decode::pt::packet::{ExecMode, Packet, Pwre, Pwrx};
use tracemill_decode::pt::PtConfig;
use tracemill_decode::stream::TraceStream;
use tracemill_schemas::EventKind;

mod packets;
use packets::*;

const ORG: u64 = 0x1000;

/// 0x1000..0x1010: sixteen NOPs; 0x1010: hlt.
const NOPS: [u8; 17] = {
    let mut c = [0x90; 17];
    c[16] = 0xF4;
    c
};

fn cfe(kind: u8, vector: u8, ip: bool) -> Packet {
    Packet::Cfe { kind, vector, ip }
}

fn evd(kind: u8, payload: u64) -> Packet {
    Packet::Evd { kind, payload }
}

fn trig(trbv: u8, ip: bool, icnt: Option<u16>) -> Packet {
    Packet::Trig {
        trbv,
        ip,
        mult: false,
        icnt,
    }
}

fn decode(packets: &[Packet]) -> Decoded {
    let bytes: Vec<u8> = packets
        .iter()
        .flat_map(|p| to_bytes(p).expect("encodable"))
        .collect();
    let stream = TraceStream::linear(&bytes);
    let mut images = ImageSet::new();
    images.add_raw("code", &NOPS, ORG, None);
    let input = Input::pt(&stream, &images, PtConfig::default());
    let seq = decode_all(&input, u64::MAX);
    let chunked = decode_all(&input, 1);
    assert_eq!(seq.rows, chunked.rows);
    assert_eq!(seq.events, chunked.events);
    seq
}

/// The events but PSBs and resyncs: kind, IP, detail.
fn events(d: &Decoded) -> Vec<(EventKind, Option<u64>, String)> {
    d.events
        .iter()
        .filter(|e| !matches!(e.kind, EventKind::Psb | EventKind::Resync | EventKind::Tail))
        .map(|e| (e.kind, e.ip, e.detail.clone()))
        .collect()
}

fn ev(kind: EventKind, ip: Option<u64>, detail: &str) -> (EventKind, Option<u64>, String) {
    (kind, ip, detail.to_string())
}

/// MNT: an event where it is read, in a PSB+ and outside one.
#[test]
fn mnt_is_a_maintenance_event_where_it_is_read() {
    let p = vec![
        Packet::Psb,
        Packet::Mnt(0xa000),
        Packet::PsbEnd,
        Packet::Mnt(0xb),
    ];
    let d = decode(&p);
    assert_eq!(
        events(&d),
        vec![
            ev(EventKind::Maintenance, None, "0xa000"),
            ev(EventKind::Maintenance, None, "0xb"),
        ]
    );
}

/// TRIG without IP: reported where it is read, with its instruction count (counted from
/// the last flow packet's IP, which is where the walk is).
#[test]
fn trig_without_ip_is_reported_where_it_is_read_with_its_count() {
    let mut p = psb_at(ORG);
    p.extend([
        trig(0x1a, false, Some(3)),
        Packet::Fup(full(ORG + 5)),
        Packet::TipPgd(none()),
        trig(0x02, false, None),
    ]);
    let d = decode(&p);
    assert_eq!(
        events(&d),
        vec![
            ev(EventKind::Trigger, None, "trbv 0x1a, icnt 3"),
            ev(EventKind::Disable, Some(ORG + 5), ""),
            ev(EventKind::Trigger, None, "trbv 0x02"),
        ]
    );
}

/// TRIG with IP: the FUP after it is the trigger's IP, and is consumed (no asynchronous
/// event); a count other than 0 with it is a bad packet.
#[test]
fn trig_with_ip_binds_the_fup_after_it() {
    let mut p = psb_at(ORG);
    p.extend([
        trig(0x1a, true, Some(0)),
        Packet::Fup(full(ORG + 3)),
        Packet::Fup(full(ORG + 5)),
        Packet::TipPgd(none()),
    ]);
    let d = decode(&p);
    assert_eq!(
        events(&d),
        vec![
            ev(EventKind::Trigger, Some(ORG + 3), "trbv 0x1a, icnt 0"),
            ev(EventKind::Disable, Some(ORG + 5), ""),
        ]
    );
    let mut p = psb_at(ORG);
    p.extend([trig(0x1a, true, Some(2)), Packet::Fup(full(ORG + 3))]);
    let e = events(&decode(&p));
    assert_eq!(
        (e[0].0, e[0].2.as_str()),
        (EventKind::Error, "unknown packet")
    );
}

/// EVD CR2 + CFE INTR without IP, tracing on: bound to the next FUP, which stays the
/// interrupt's (FUP + TIP): the `intr` event comes before the `interrupt` at its IP.
#[test]
fn cfe_intr_without_ip_binds_the_interrupts_fup_with_the_evds_cr2() {
    let mut p = psb_at(ORG);
    p.extend([
        evd(0, 0xf00baa),
        cfe(1, 14, false),
        Packet::Fup(full(ORG + 2)),
        Packet::Tip(full(ORG + 8)),
        Packet::Fup(full(ORG + 9)),
        Packet::TipPgd(none()),
    ]);
    let d = decode(&p);
    let e = events(&d);
    assert_eq!(
        e[0],
        ev(EventKind::Intr, Some(ORG + 2), "vector 0x0e, cr2 0xf00baa")
    );
    assert_eq!(e[1].0, EventKind::Interrupt);
    assert_eq!(e[1].1, Some(ORG + 2));
}

/// CFE with IP (IRET, VMENTRY, SWINTR, ...): the FUP after it is the event's IP and is
/// consumed, so no asynchronous event follows.
#[test]
fn cfe_with_ip_consumes_its_fup() {
    let mut p = psb_at(ORG);
    p.extend([
        cfe(2, 0, true),
        Packet::Fup(full(ORG + 4)),
        cfe(14, 3, true),
        Packet::Fup(full(ORG + 6)),
        Packet::Fup(full(ORG + 7)),
        Packet::TipPgd(none()),
    ]);
    assert_eq!(
        events(&decode(&p)),
        vec![
            ev(EventKind::Iret, Some(ORG + 4), ""),
            ev(EventKind::Swintr, Some(ORG + 6), "vector 0x03"),
            ev(EventKind::Disable, Some(ORG + 7), ""),
        ]
    );
}

/// CFE while tracing is off: reported at once, without IP (SMI, RSM, INIT, SIPI with its
/// vector); RSM and SIPI while tracing bind the next FUP but say no IP.
#[test]
fn cfe_while_tracing_is_off_is_reported_at_once() {
    let mut p = psb_off();
    p.extend([
        cfe(3, 0, false),
        cfe(4, 0, false),
        cfe(6, 0, false),
        cfe(5, 0xce, false),
    ]);
    assert_eq!(
        events(&decode(&p)),
        vec![
            ev(EventKind::Smi, None, ""),
            ev(EventKind::Rsm, None, ""),
            ev(EventKind::Init, None, ""),
            ev(EventKind::Sipi, None, "vector 0xce"),
        ]
    );
    let mut p = psb_at(ORG);
    p.extend([
        cfe(4, 0, false),
        Packet::Fup(full(ORG + 3)),
        Packet::TipPgd(none()),
    ]);
    assert_eq!(
        events(&decode(&p)),
        vec![
            ev(EventKind::Rsm, None, ""),
            ev(EventKind::Disable, Some(ORG + 3), ""),
        ]
    );
}

/// EVD VMXQ and VMXR, then CFE VMEXIT_INTR: one `vmexit` event with every field.
#[test]
fn evds_and_cfe_vmexit_make_one_vmexit_event() {
    let mut p = psb_off();
    p.extend([
        evd(1, 0xf00baa),
        evd(2, 0x30),
        cfe(9, 14, false),
        cfe(8, 0, false),
    ]);
    assert_eq!(
        events(&decode(&p)),
        vec![
            ev(
                EventKind::Vmexit,
                None,
                "vector 0x0e, vmxr 0x30, vmxq 0xf00baa"
            ),
            ev(EventKind::Vmexit, None, ""),
        ]
    );
}

/// An EVD that belongs to another event than the CFE (or EVD) after it: libipt's
/// "unexpected packet context"; decoding goes on at the next PSB.
#[test]
fn evd_out_of_place_is_a_bad_context_and_decoding_resumes_at_the_next_psb() {
    let mut p = psb_at(ORG);
    p.extend([evd(0, 0xf00), cfe(2, 0, false), Packet::Fup(full(ORG))]);
    p.extend(psb_off());
    p.push(Packet::Mnt(1));
    let e = events(&decode(&p));
    assert_eq!(
        e,
        vec![
            ev(EventKind::Error, Some(ORG), "unexpected packet context"),
            ev(EventKind::Maintenance, None, "0x1"),
        ]
    );
    for pair in [
        [evd(2, 0), evd(0, 1)],
        [evd(1, 0), evd(1, 1)],
        [evd(1, 0), cfe(1, 14, false)],
    ] {
        let mut p = psb_off();
        p.extend(pair);
        let e = events(&decode(&p));
        assert_eq!(
            (e[0].0, e[0].2.as_str()),
            (EventKind::Error, "unexpected packet context")
        );
    }
}

/// A CFE type libipt does not know is ignored, but still consumes the FUP it announces.
#[test]
fn unknown_cfe_with_ip_consumes_its_fup_silently() {
    let mut p = psb_at(ORG);
    p.extend([
        cfe(31, 0, true),
        Packet::Fup(full(ORG + 2)),
        cfe(31, 0, false),
        Packet::Fup(full(ORG + 3)),
        Packet::TipPgd(none()),
    ]);
    assert_eq!(
        events(&decode(&p)),
        vec![ev(EventKind::Disable, Some(ORG + 3), "")]
    );
}

/// MODE.Exec's IF with Event Trace on (IA32_RTIT_CTL.EventEn): a change is an `iflags`
/// event bound as the mode is (the FUP or TIP after it), after the mode's own; a PSB+
/// states it without an event. Off, the bit says nothing and no event is made.
#[test]
fn mode_exec_if_changes_are_iflags_events_with_event_trace_on() {
    let mode = |iflag| {
        Packet::ModeExec(ExecMode {
            csl: true,
            csd: false,
            iflag,
        })
    };
    let mut p = psb_at(ORG);
    p.extend([
        mode(true),
        Packet::Fup(full(ORG + 2)),
        mode(true),
        Packet::Fup(full(ORG + 3)),
        mode(false),
        Packet::Fup(full(ORG + 4)),
        Packet::Fup(full(ORG + 5)),
        Packet::TipPgd(none()),
    ]);
    let bytes: Vec<u8> = p.iter().flat_map(|p| to_bytes(p).unwrap()).collect();
    let stream = TraceStream::linear(&bytes);
    let mut images = ImageSet::new();
    images.add_raw("code", &NOPS, ORG, None);
    let cfg = PtConfig::from_rtit_ctl(tracemill_decode::pt::config::ctl::EVENT_EN);
    assert!(cfg.event_trace);
    let input = Input::pt(&stream, &images, cfg);
    let seq = decode_all(&input, u64::MAX);
    assert_eq!(seq.events, decode_all(&input, 1).events);
    assert_eq!(
        events(&seq),
        vec![
            ev(EventKind::Iflags, Some(ORG + 2), "interrupts enabled"),
            ev(EventKind::Iflags, Some(ORG + 4), "interrupts disabled"),
            ev(EventKind::Disable, Some(ORG + 5), ""),
        ]
    );
    assert_eq!(
        events(&decode(&p)),
        vec![ev(EventKind::Disable, Some(ORG + 5), "")]
    );
}

/// Event Trace, TRIG and MNT packets anywhere, between PSBs, with flow packets: the
/// decode cut at every PSB equals the sequential one (`decode` checks), whatever binds
/// or fails to bind.
#[test]
fn event_trace_packets_anywhere_decode_alike_cut_at_every_psb() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    for _ in 0..300 {
        let mut p = Vec::new();
        for _ in 0..40 {
            let at = ORG + next(16);
            match next(14) {
                0 => p.extend(psb_at(at)),
                1 => p.extend(psb_off()),
                2 => p.push(Packet::Fup(full(at))),
                3 => p.push(Packet::Tip(full(at))),
                4 => p.push(Packet::TipPge(full(at))),
                5 => p.push(Packet::TipPgd(none())),
                6 => p.push(evd(next(3) as u8, next(1 << 20))),
                7 | 8 => p.push(cfe(next(16) as u8, next(256) as u8, next(2) == 0)),
                9 => p.push(trig(next(256) as u8, next(2) == 0, Some(next(3) as u16))),
                10 => p.push(Packet::Mnt(next(1 << 16))),
                11 => p.push(Packet::ModeExec(ExecMode {
                    csl: true,
                    csd: false,
                    iflag: next(2) == 0,
                })),
                12 => p.push(Packet::Ovf),
                _ => p.push(Packet::Pad),
            }
        }
        decode(&p);
    }
}

/// PWRE binds to the PWRX after it: every PWRE since the last PWRX is reported there, in
/// order, then the PWRX (libipt's order; one PWRE was lost when two waited).
#[test]
fn every_pwre_before_a_pwrx_is_reported_at_it_in_order() {
    let pwre = |state| {
        Packet::Pwre(Pwre {
            state,
            sub_state: 0xf,
            flags: 0,
        })
    };
    let mut p = psb_at(ORG);
    p.extend([
        pwre(0),
        pwre(5),
        Packet::Pwrx(Pwrx {
            last: 5,
            deepest: 5,
            wake: 1,
        }),
        Packet::Fup(full(ORG + 2)),
        Packet::TipPgd(none()),
    ]);
    let d = decode(&p);
    let power: Vec<_> = events(&d)
        .into_iter()
        .filter(|e| e.0 == EventKind::Power)
        .collect();
    assert_eq!(
        power,
        vec![
            ev(EventKind::Power, None, "pwre c1.0"),
            ev(EventKind::Power, None, "pwre c6.0"),
            ev(EventKind::Power, None, "pwrx c6 (c6) interrupt"),
        ]
    );
}
