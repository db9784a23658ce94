//! Round trips: every packet the encoder writes parses back to the same packet, for every
//! packet type and every CNT/Zext row of Table 18; and the parser survives any bytes.

use proptest::prelude::*;
use tracemill_datasets::encode::{compress_ip, cyc, to_bytes, write_packet};
use tracemill_decode::rtit::last_ip::{resolve, LastIp};
use tracemill_decode::rtit::packet::{FupKind, IpPayload, Packet, PacketReader, Tnt};
use tracemill_decode::rtit::sync::find_psbs;
use tracemill_decode::stream::TraceStream;

fn ip48() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>().prop_map(|v| v & 0xFFFF),
        any::<u64>().prop_map(|v| v & 0xFFFF_FFFF),
        any::<u64>().prop_map(|v| v & 0xFFFF_FFFF_FFFF),
        any::<u64>().prop_map(|v| 0x7FFF_0000_0000 | (v & 0xFFFF_FFFF)),
    ]
}

fn payload() -> impl Strategy<Value = IpPayload> {
    (ip48(), proptest::option::of(ip48())).prop_map(|(ip, last)| compress_ip(ip, last))
}

fn fup_kind() -> impl Strategy<Value = FupKind> {
    prop_oneof![
        Just(FupKind::Pge),
        Just(FupKind::Pgd),
        Just(FupKind::BuffOvf),
        Just(FupKind::Pcc),
        Just(FupKind::Far),
    ]
}

/// Any packet except CYC (which only follows certain packets) and PSB.
fn packet() -> impl Strategy<Value = Packet> {
    prop_oneof![
        (1u8..=6, any::<u8>()).prop_map(|(len, b)| Packet::Tnt(Tnt {
            bits: b & ((1 << len) - 1),
            len
        })),
        payload().prop_map(Packet::Tip),
        (fup_kind(), payload()).prop_map(|(k, p)| Packet::Fup(k, p)),
        Just(Packet::TraceStop),
        (any::<u64>(), any::<bool>()).prop_map(|(c, pg)| Packet::Pip {
            cr3: c & 0xFF_FFFF_FFFF,
            pg
        }),
        (0u8..4, any::<u8>()).prop_map(|(rng, tsc)| Packet::Mtc { rng, tsc }),
        (0u8..64, 0u8..64, any::<u64>()).prop_map(|(a, e, t)| Packet::Sts {
            acbr: a,
            ecbr: e,
            tsc: t & 0xFF_FFFF_FFFF
        }),
    ]
}

/// A packet sequence as the hardware writes it: a PSB first, then packets, with a CYC
/// after every packet that takes one when `cycle_acc`.
fn sequence(packets: &[Packet], cycles: &[u32], cycle_acc: bool) -> Vec<Packet> {
    let mut out = vec![Packet::Psb];
    for (i, p) in packets.iter().enumerate() {
        out.push(*p);
        if cycle_acc && p.takes_cyc() {
            out.push(cyc(cycles[i % cycles.len()]));
        }
    }
    out
}

fn parse_all(bytes: &[u8], cycle_acc: bool) -> Vec<Packet> {
    let s = TraceStream::linear(bytes);
    PacketReader::new(&s, 0, s.len(), cycle_acc)
        .map(|r| r.expect("encoder output parses").packet)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn encoder_output_parses_back(
        packets in proptest::collection::vec(packet(), 0..64),
        cycles in proptest::collection::vec(0u32..(1 << 22), 1..8),
        cycle_acc in any::<bool>(),
    ) {
        let want = sequence(&packets, &cycles, cycle_acc);
        let got = parse_all(&to_bytes(&want), cycle_acc);
        prop_assert_eq!(got, want);
    }

    #[test]
    fn compressed_ips_decompress_to_the_original(ip in ip48(), last in proptest::option::of(ip48())) {
        let p = compress_ip(ip, last);
        prop_assert_eq!(resolve(&p, last), Some(ip));
        let mut l = match last { Some(v) => LastIp::known(v), None => LastIp::unknown() };
        let got = l.update(&p).unwrap();
        prop_assert_eq!(got & 0xFFFF_FFFF_FFFF, ip);
    }

    /// Random bytes, with PSBs sprinkled in, never panic the parser; every error names an
    /// offset inside the input, and parsing always goes on to the end.
    #[test]
    fn random_bytes_give_errors_with_offsets_not_panics(
        mut bytes in proptest::collection::vec(any::<u8>(), 0..2048),
        psb_at in proptest::collection::vec(any::<usize>(), 0..4),
        cycle_acc in any::<bool>(),
    ) {
        for p in psb_at {
            if !bytes.is_empty() {
                let at = p % bytes.len();
                let end = (at + 9).min(bytes.len());
                bytes[at..end].copy_from_slice(&[0xC0, 0, 0, 0, 0, 0, 0, 0, 0][..end - at]);
            }
        }
        let s = TraceStream::linear(&bytes);
        let psbs = find_psbs(&s);
        let start = psbs.first().copied().unwrap_or(0);
        let mut last_end = start;
        for r in PacketReader::new(&s, start, s.len(), cycle_acc) {
            match r {
                Ok(p) => {
                    prop_assert!(p.offset >= last_end);
                    last_end = p.offset + p.size as u64;
                    prop_assert!(last_end <= bytes.len() as u64);
                }
                Err(e) => {
                    prop_assert!(e.offset < bytes.len() as u64);
                    prop_assert!(!e.to_string().is_empty());
                }
            }
        }
    }
}

/// Table 18, row by row: each (CNT, Zext) the encoder picks, and the decoder's answer.
#[test]
fn every_table18_row_round_trips() {
    let last = 0x7FFF_1234_5678u64;
    let cases: [(u64, Option<u64>, u8, bool); 7] = [
        (0x7FFF_1234_ABCD, Some(last), 2, false), // match 47:32 and 31:16, upper not 0
        (0x0000_0040_1234, Some(0x40_0000), 2, false), // both match, upper 0, middle not 0
        (0x0000_0000_1234, Some(last), 2, true),  // upper and middle 0
        (0x7FFF_4321_0000, Some(last), 4, false), // match 47:32 only
        (0x0000_4321_0000, Some(last), 4, true),  // upper 0, 31:16 differ
        (0x0000_4321_0000, None, 4, true),        // upper 0, nothing to match
        (0x7FFE_0000_0000, Some(last), 6, false), // 47:32 differ
    ];
    for (ip, l, size, zext) in cases {
        let p = compress_ip(ip, l);
        assert_eq!((p.size, p.zext), (size, zext), "{ip:#x}");
        let mut b = Vec::new();
        write_packet(&mut b, &Packet::Tip(p));
        let got = parse_all(&[vec![0xC0, 0, 0, 0, 0, 0, 0, 0, 0], b].concat(), false);
        assert_eq!(got[1], Packet::Tip(p));
        assert_eq!(resolve(&p, l), Some(ip));
    }
}

#[test]
fn truncated_packet_at_end_of_file_is_an_error_with_offset() {
    let mut b = to_bytes(&[
        Packet::Psb,
        Packet::Tip(compress_ip(0x7FFF_0000_1000, None)),
    ]);
    b.truncate(b.len() - 2);
    let s = TraceStream::linear(&b);
    let r: Vec<_> = PacketReader::new(&s, 0, s.len(), false).collect();
    assert_eq!(r.len(), 2);
    let e = r[1].unwrap_err();
    assert_eq!(e.offset, 9);
    assert!(e.to_string().contains("truncated"), "{e}");
    assert!(e.to_string().contains("offset 0x9"), "{e}");
}

#[test]
fn junk_then_psb_resyncs_and_reserved_headers_are_errors() {
    let mut b = vec![0xE5u8, 0x00, 0x17];
    b.extend(to_bytes(&[Packet::Psb, Packet::TraceStop]));
    b.push(0xC9); // reserved 11001xxx
    b.extend(to_bytes(&[
        Packet::Psb,
        Packet::Tnt(Tnt { bits: 1, len: 1 }),
    ]));
    let s = TraceStream::linear(&b);
    let psbs = find_psbs(&s);
    assert_eq!(psbs, vec![3, 14]);
    let r: Vec<_> = PacketReader::new(&s, psbs[0], s.len(), false).collect();
    let kinds: Vec<String> = r
        .iter()
        .map(|x| match x {
            Ok(p) => p.packet.name().to_string(),
            Err(e) => format!("err@{}", e.offset),
        })
        .collect();
    assert_eq!(
        kinds,
        vec!["psb", "tracestop", "err@13", "psb", "tnt.partial"]
    );
}
