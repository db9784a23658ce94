//! Errata that change where the instruction flow binds a packet, each applied only for
//! the processors libipt's `pt_cpu_errata` names (the suite's cases for each are in
//! `ptxed_suite.rs`; these check the rule and that it stays off for other processors).
//! Also the transaction state (TSX) that marks rows `in_tx`. Every trace is decoded
//! sequentially and cut at every PSB, with the same result.

use tracemill_decode::chunk::{decode_all, tally_all, Decoded, Input};
use tracemill_decode::image::ImageSet;
use tracemill_decode::pt::config::{AddrRange, FilterKind};
use tracemill_decode::pt::cpu::Cpu;
use tracemill_decode::pt::encode::to_bytes;
use tracemill_decode::pt::packet::Packet;
use tracemill_decode::pt::PtConfig;
use tracemill_decode::stream::TraceStream;
use tracemill_decode::tally::Covered;
use tracemill_decode::Pt;
use tracemill_schemas::{BranchKind, EventKind};

mod packets;
use packets::*;

const ORG: u64 = 0x1000;

fn trace(packets: &[Packet]) -> Vec<u8> {
    packets
        .iter()
        .flat_map(|p| to_bytes(p).expect("encodable"))
        .collect()
}

fn decode(packets: &[Packet], code: &[u8], cfg: PtConfig) -> Decoded {
    let bytes = trace(packets);
    let stream = TraceStream::linear(&bytes);
    let mut images = ImageSet::new();
    images.add_raw("code", code, ORG, None);
    let input = Input::pt(&stream, &images, cfg);
    let seq = decode_all(&input, u64::MAX);
    let chunked = decode_all(&input, 1);
    assert_eq!(seq.rows, chunked.rows);
    assert_eq!(seq.events, chunked.events);
    // A decode that keeps no row counts the same blocks and edges (an erratum that moves
    // a row's target after the fact moves its edge too).
    let tallied = tally_all::<Pt, Covered>(&input, u64::MAX);
    assert_eq!(tallied.coverage, seq.coverage);
    assert_eq!(tallied.stats.rows, seq.rows.len() as u64);
    seq
}

fn with_cpu(cpu: &str) -> PtConfig {
    let mut cfg = PtConfig::default();
    cfg.set_cpu(cpu.parse::<Cpu>().unwrap()).unwrap();
    cfg
}

fn rows(d: &Decoded) -> Vec<(u64, Option<u64>, u8)> {
    (0..d.rows.len())
        .map(|i| (d.rows.ip[i], d.rows.target.get(i), d.rows.kind[i]))
        .collect()
}

fn kinds(d: &Decoded) -> Vec<(EventKind, Option<u64>)> {
    d.events
        .iter()
        .filter(|e| !matches!(e.kind, EventKind::Psb | EventKind::Resync | EventKind::Tail))
        .map(|e| (e.kind, e.ip))
        .collect()
}

/// SKD022: a VM entry that clears TraceEn sends a FUP before its TIP.PGD. With the
/// erratum the pair at a VMLAUNCH is the entry's own disable (a `far` row, then the
/// disable); without it, the FUP says tracing stopped before the VMLAUNCH ran.
#[test]
fn skd022_fup_and_tip_pgd_at_a_vmlaunch_disable_after_it() {
    // 0x1000: vmlaunch; 0x1003: hlt
    let code = [0x0F, 0x01, 0xC2, 0xF4];
    let mut p = psb_at(ORG);
    p.extend([Packet::Fup(full(ORG)), Packet::TipPgd(none())]);
    for cpu in ["6/78", "6/85", "6/151", "18/1", "19/1"] {
        let d = decode(&p, &code, with_cpu(cpu));
        assert_eq!(
            rows(&d),
            vec![(ORG, None, BranchKind::Far as u8)],
            "cpu {cpu}"
        );
        assert_eq!(kinds(&d), vec![(EventKind::Disable, None)], "cpu {cpu}");
    }
    for cfg in [PtConfig::default(), with_cpu("6/61")] {
        let d = decode(&p, &code, cfg);
        assert!(d.rows.is_empty());
        assert_eq!(kinds(&d), vec![(EventKind::Disable, Some(ORG))]);
    }
    // Not a VM entry: the erratum does not apply.
    let nop = [0x90, 0xF4];
    let d = decode(&p, &nop, with_cpu("6/85"));
    assert!(d.rows.is_empty());
    assert_eq!(kinds(&d), vec![(EventKind::Disable, Some(ORG))]);
}

/// SKL014: a direct JMP or CALL out of the IP ranges may send a TIP.PGD without its
/// target. With the erratum and ranges configured it binds to that branch; without the
/// erratum, or without ranges, the walk follows the jump and finds no code after it.
#[test]
fn skl014_tip_pgd_without_ip_binds_to_a_direct_jmp_or_call_out_of_the_ranges() {
    // 0x1000: jmp 0x1100 (e9 rel32) / call 0x1100; 0x1005: hlt; 0x1100: hlt
    let mut jmp = vec![0xE9, 0xFB, 0x00, 0x00, 0x00, 0xF4];
    jmp.resize(0x101, 0xF4);
    let mut call = jmp.clone();
    call[0] = 0xE8;
    let mut p = psb_at(ORG);
    p.push(Packet::TipPgd(none()));
    let ranged = |cpu: Option<&str>| {
        let mut cfg = cpu.map(with_cpu).unwrap_or_default();
        cfg.filters.push(AddrRange {
            kind: FilterKind::Filter,
            from: 0x1000,
            to: 0x10ff,
        });
        cfg
    };
    for (code, kind) in [(&jmp, BranchKind::Jmp), (&call, BranchKind::Call)] {
        for cpu in ["6/78", "6/85", "6/142", "6/165"] {
            let d = decode(&p, code, ranged(Some(cpu)));
            assert_eq!(rows(&d), vec![(ORG, Some(0x1100), kind as u8)], "cpu {cpu}");
            assert_eq!(kinds(&d), vec![(EventKind::Disable, None)]);
        }
        for cfg in [ranged(None), ranged(Some("6/151")), with_cpu("6/85")] {
            let d = decode(&p, code, cfg);
            // The jump ran (the code says so) and stays, as libipt lists it; what
            // follows has no code: an error (docs/pt.md, "Resync after an error").
            assert_eq!(rows(&d), vec![(ORG, Some(0x1100), kind as u8)]);
            assert!(kinds(&d).iter().any(|e| e.0 == EventKind::Error));
        }
    }
    // A jump inside the ranges does not take it.
    let mut inside = ranged(Some("6/85"));
    inside.filters[0].to = 0x1fff;
    let d = decode(&p, &jmp, inside);
    assert!(kinds(&d).iter().any(|e| e.0 == EventKind::Error));
}

/// TSX (SDM 36.4.2.8): rows between a MODE.TSX begin and its commit are `in_tx`, and so
/// are those after a PSB+ whose MODE.TSX says a transaction runs (an `in transaction`
/// event, no begin); the column stays empty while none is.
#[test]
fn tsx_rows_inside_a_transaction_are_in_tx() {
    use tracemill_decode::pt::packet::{Tnt, TsxMode};
    // 0x1000: je 0x1002; 0x1002: je 0x1004; 0x1004: je 0x1006; 0x1006: hlt
    let code = [0x74, 0x00, 0x74, 0x00, 0x74, 0x00, 0xF4];
    let tnt = Packet::Tnt8(Tnt { bits: 1, len: 1 });
    let tsx = |intx| Packet::ModeTsx(TsxMode { intx, abort: false });
    let mut p = psb_at(ORG);
    p.extend([tnt, tsx(true), Packet::Fup(full(0x1002)), tnt]);
    p.extend([tsx(false), Packet::Fup(full(0x1004)), tnt]);
    let d = decode(&p, &code, PtConfig::default());
    let in_tx: Vec<bool> = (0..d.rows.len()).map(|i| d.rows.in_tx(i)).collect();
    assert_eq!(in_tx, [false, true, false]);
    let tsx_events: Vec<_> = d
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Tsx)
        .map(|e| (e.detail.as_str(), e.ip, e.seq))
        .collect();
    assert_eq!(
        tsx_events,
        [("begin", Some(0x1002), 1), ("commit", Some(0x1004), 2)]
    );

    // Resuming at a PSB+ inside a transaction.
    let mut p = vec![Packet::Psb, MODE64, Packet::Fup(full(ORG)), tsx(true)];
    p.extend([Packet::PsbEnd, tnt, tnt]);
    let d = decode(&p, &code, PtConfig::default());
    assert_eq!(d.rows.in_tx, [true, true]);
    assert!(d
        .events
        .iter()
        .any(|e| e.kind == EventKind::Tsx && e.detail == "in transaction" && e.ip == Some(ORG)));

    // No transaction: no column to fill.
    let mut p = psb_at(ORG);
    p.extend([tnt, tnt]);
    let d = decode(&p, &code, PtConfig::default());
    assert_eq!(d.rows.len(), 2);
    assert!(d.rows.in_tx.is_empty());
}

/// BDM64: the branch right before a TSX abort may send a wrong packet. With the erratum,
/// an abort the walk cannot reach from where that branch led is taken to be where it
/// went (the row's target is the abort's IP); without it, the walk follows the packet and
/// fails at the next branch.
#[test]
fn bdm64_an_abort_out_of_reach_after_a_branch_is_where_the_branch_went() {
    use tracemill_decode::pt::packet::{Tnt, TsxMode};
    // 0x1000: test [rax], rbx; 0x1003: je 0x1008; 0x1005: nop; 0x1006: je 0x100c;
    // 0x1008: hlt; 0x1009: hlt; 0x100a: nop; 0x100b: nop; 0x100c: hlt
    let code = [
        0x48, 0x85, 0x18, 0x74, 0x03, 0x90, 0x74, 0x04, 0xF4, 0xF4, 0x90, 0x90, 0xF4,
    ];
    let tsx = |intx, abort| Packet::ModeTsx(TsxMode { intx, abort });
    let p = [
        Packet::Psb,
        MODE64,
        tsx(true, false),
        Packet::Fup(full(ORG)),
        Packet::PsbEnd,
        Packet::Tnt8(Tnt { bits: 0, len: 1 }),
        tsx(false, true),
        Packet::Fup(full(0x1008)),
        Packet::Tip(full(0x100a)),
        Packet::Fup(full(0x100b)),
        Packet::TipPgd(none()),
    ];
    for cpu in ["6/61", "6/71", "6/79", "6/86"] {
        let d = decode(&p, &code, with_cpu(cpu));
        assert_eq!(
            rows(&d),
            vec![(0x1003, Some(0x1008), BranchKind::Cond as u8)],
            "cpu {cpu}"
        );
        assert_eq!(d.rows.in_tx, [true]);
        assert_eq!(
            kinds(&d),
            vec![
                (EventKind::Tsx, Some(ORG)),
                (EventKind::Tsx, Some(0x1008)),
                (EventKind::Interrupt, Some(0x1008)),
                (EventKind::Disable, Some(0x100b)),
            ],
            "cpu {cpu}"
        );
    }
    for cfg in [PtConfig::default(), with_cpu("6/85")] {
        let d = decode(&p, &code, cfg);
        assert!(kinds(&d).iter().any(|e| e.0 == EventKind::Error));
    }
}
