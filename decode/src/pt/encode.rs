//! The Intel PT packet encoder: a [`Packet`] to its bytes (SDM 36.4.2), the inverse of
//! [`super::packet::parse`]. Round-trip tests use it for every packet; trace generators
//! (a PT hardware model in `tracemill-datasets`) use it to write traces.
//!
//! Each packet has one encoding here: reserved bits are written as zero, a CYC takes as
//! few bytes as its value needs, an IP payload as many as its [`IpCompression`] says.
//! [`Packet::Invalid`] has no encoding (its bytes are unknown), nor has a [`Tnt`] that
//! does not fit its packet; [`encode`] reports those as [`Unencodable`].

use super::packet::{IpCompression, IpPayload, Packet, Tnt, PSB_BYTES};

/// A packet value that no bytes represent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unencodable(pub Packet);

impl std::fmt::Display for Unencodable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no encoding for {:?}", self.0)
    }
}

impl std::error::Error for Unencodable {}

fn push_le(out: &mut Vec<u8>, v: u64, n: usize) {
    out.extend_from_slice(&v.to_le_bytes()[..n]);
}

fn ip(out: &mut Vec<u8>, opcode: u8, p: &IpPayload) {
    out.push((p.compression.ip_bytes() << 5) | opcode);
    push_le(out, p.bits, p.compression.payload_len());
}

/// The stop bit above `len` TNT bits; `None` when they do not fit `max` bits.
fn tnt_payload(t: &Tnt, max: u8) -> Option<u64> {
    if t.len == 0 || t.len > max || (t.bits >> t.len) != 0 {
        return None;
    }
    Some(t.bits | (1 << t.len))
}

/// The packet's values fit its fields (so that parsing its bytes gives it back).
fn fits(p: &Packet) -> bool {
    let below = |v: u64, bits: u32| v >> bits == 0;
    match *p {
        Packet::Tip(a) | Packet::TipPge(a) | Packet::TipPgd(a) | Packet::Fup(a) => {
            let n = a.compression.payload_len() as u32;
            n == 8 || below(a.bits, 8 * n)
        }
        Packet::Pip { cr3, .. } => cr3 & 0x1F == 0 && below(cr3, 52),
        Packet::Vmcs(base) => base & 0xFFF == 0 && below(base, 52),
        Packet::Tsc(v) => below(v, 56),
        // A tenth byte would carry bits past 63; the parser refuses it.
        Packet::Cyc(v) => below(v, 61),
        Packet::Ptw { payload, len, .. } => len == 8 || (len == 4 && below(payload, 32)),
        _ => true,
    }
}

/// Append the bytes of `p` to `out`. On error `out` is unchanged.
pub fn encode(p: &Packet, out: &mut Vec<u8>) -> Result<(), Unencodable> {
    let bad = || Unencodable(*p);
    if !fits(p) {
        return Err(bad());
    }
    match *p {
        Packet::Pad => out.push(0x00),
        Packet::Psb => out.extend_from_slice(&PSB_BYTES),
        Packet::PsbEnd => out.extend_from_slice(&[0x02, 0x23]),
        Packet::Ovf => out.extend_from_slice(&[0x02, 0xF3]),
        Packet::Stop => out.extend_from_slice(&[0x02, 0x83]),
        Packet::Tnt8(t) => out.push((tnt_payload(&t, 6).ok_or_else(bad)? as u8) << 1),
        Packet::Tnt64(t) => {
            let payload = tnt_payload(&t, 47).ok_or_else(bad)?;
            out.extend_from_slice(&[0x02, 0xA3]);
            push_le(out, payload, 6);
        }
        Packet::Tip(ref a) => ip(out, 0x0D, a),
        Packet::TipPge(ref a) => ip(out, 0x11, a),
        Packet::TipPgd(ref a) => ip(out, 0x01, a),
        Packet::Fup(ref a) => ip(out, 0x1D, a),
        Packet::Pip { cr3, nr } => {
            out.extend_from_slice(&[0x02, 0x43]);
            push_le(out, ((cr3 >> 5) << 1) | nr as u64, 6);
        }
        Packet::ModeExec(m) => out.extend_from_slice(&[
            0x99,
            m.csl as u8 | (m.csd as u8) << 1 | (m.iflag as u8) << 2,
        ]),
        Packet::ModeTsx(m) => {
            out.extend_from_slice(&[0x99, 0x20 | m.intx as u8 | (m.abort as u8) << 1])
        }
        Packet::Tsc(v) => {
            out.push(0x19);
            push_le(out, v, 7);
        }
        Packet::Cbr(r) => out.extend_from_slice(&[0x02, 0x03, r, 0]),
        Packet::Tma { ctc, fc } => {
            if fc > 0x1FF {
                return Err(bad());
            }
            out.extend_from_slice(&[0x02, 0x73]);
            push_le(out, ctc as u64, 2);
            out.push(0);
            push_le(out, fc as u64, 2);
        }
        Packet::Mtc(c) => out.extend_from_slice(&[0x59, c]),
        Packet::Cyc(v) => {
            // Five value bits in the first byte, seven in each next; Exp (bit 2 of the
            // first byte, bit 0 of the others) says another byte follows.
            let mut rest = v >> 5;
            out.push(((v & 0x1F) as u8) << 3 | if rest != 0 { 0b111 } else { 0b011 });
            while rest != 0 {
                let chunk = (rest & 0x7F) as u8;
                rest >>= 7;
                out.push(chunk << 1 | (rest != 0) as u8);
            }
        }
        Packet::Vmcs(base) => {
            out.extend_from_slice(&[0x02, 0xC8]);
            push_le(out, base >> 12, 5);
        }
        Packet::Mnt(v) => {
            out.extend_from_slice(&[0x02, 0xC3, 0x88]);
            push_le(out, v, 8);
        }
        Packet::Exstop { ip } => out.extend_from_slice(&[0x02, if ip { 0xE2 } else { 0x62 }]),
        Packet::Mwait { hints, ext } => {
            out.extend_from_slice(&[0x02, 0xC2]);
            push_le(out, hints as u64, 4);
            push_le(out, ext as u64, 4);
        }
        Packet::Pwre(w) => {
            if w.state > 0xF || w.sub_state > 0xF {
                return Err(bad());
            }
            out.extend_from_slice(&[0x02, 0x22, w.flags, w.state << 4 | w.sub_state]);
        }
        Packet::Pwrx(x) => {
            if x.last > 0xF || x.deepest > 0xF || x.wake > 0xF {
                return Err(bad());
            }
            out.extend_from_slice(&[0x02, 0xA2, x.last << 4 | x.deepest, x.wake, 0, 0, 0]);
        }
        Packet::Ptw { payload, len, ip } => {
            let pb = (len == 8) as u8;
            out.extend_from_slice(&[0x02, (ip as u8) << 7 | pb << 5 | 0x12]);
            push_le(out, payload, len as usize);
        }
        Packet::Cfe { kind, vector, ip } => {
            if kind > 0x1F {
                return Err(bad());
            }
            out.extend_from_slice(&[0x02, 0x13, (ip as u8) << 7 | kind, vector]);
        }
        Packet::Evd { kind, payload } => {
            if kind > 0x1F {
                return Err(bad());
            }
            out.extend_from_slice(&[0x02, 0x53, kind]);
            push_le(out, payload, 8);
        }
        Packet::Trig {
            trbv,
            ip,
            mult,
            icnt,
        } => {
            let flags = (ip as u8) << 7 | (icnt.is_some() as u8) << 6 | (mult as u8) << 5;
            out.extend_from_slice(&[0xD9, flags, trbv]);
            if let Some(n) = icnt {
                push_le(out, n as u64, 2);
            }
        }
        Packet::Invalid => return Err(bad()),
    }
    Ok(())
}

/// The bytes of `p` (see [`encode`]).
pub fn to_bytes(p: &Packet) -> Result<Vec<u8>, Unencodable> {
    let mut v = Vec::with_capacity(16);
    encode(p, &mut v)?;
    Ok(v)
}

/// A TIP/FUP payload for `ip`, compressed against `last` the way the hardware may:
/// the shortest update that reproduces `ip`, a sign-extended 48-bit one when `ip` is
/// canonical, else the full IP.
pub fn compress_ip(ip: u64, last: u64) -> IpPayload {
    let c = if ip >> 16 == last >> 16 {
        IpCompression::Update16
    } else if ip >> 32 == last >> 32 {
        IpCompression::Update32
    } else if super::last_ip::sext48(ip) == ip {
        IpCompression::Sext48
    } else if ip >> 48 == last >> 48 {
        IpCompression::Update48
    } else {
        IpCompression::Full
    };
    let mask = match c.payload_len() {
        8 => u64::MAX,
        n => (1u64 << (8 * n)) - 1,
    };
    IpPayload {
        compression: c,
        bits: ip & mask,
    }
}

#[cfg(test)]
mod tests {
    use super::super::cpu::Errata;
    use super::super::last_ip::LastIp;
    use super::super::packet::*;
    use super::*;
    use proptest::prelude::*;

    fn ipp() -> impl Strategy<Value = IpPayload> {
        (
            prop_oneof![Just(0u8), Just(1), Just(2), Just(3), Just(4), Just(6)],
            any::<u64>(),
        )
            .prop_map(|(ipb, bits)| {
                let c = IpCompression::from_ip_bytes(ipb).unwrap();
                let mask = match c.payload_len() {
                    8 => u64::MAX,
                    n => (1u64 << (8 * n)) - 1,
                };
                IpPayload {
                    compression: c,
                    bits: bits & mask,
                }
            })
    }

    fn tnt(max: u8) -> impl Strategy<Value = Tnt> {
        (1..=max, any::<u64>()).prop_map(|(len, b)| Tnt {
            bits: b & ((1u64 << len) - 1),
            len,
        })
    }

    /// Every packet the parser can produce (but Invalid).
    fn packet() -> impl Strategy<Value = Packet> {
        let simple = prop_oneof![
            Just(Packet::Pad),
            Just(Packet::Psb),
            Just(Packet::PsbEnd),
            Just(Packet::Ovf),
            Just(Packet::Stop),
            any::<bool>().prop_map(|ip| Packet::Exstop { ip }),
        ];
        let ips = prop_oneof![
            ipp().prop_map(Packet::Tip),
            ipp().prop_map(Packet::TipPge),
            ipp().prop_map(Packet::TipPgd),
            ipp().prop_map(Packet::Fup),
            tnt(6).prop_map(Packet::Tnt8),
            tnt(47).prop_map(Packet::Tnt64),
        ];
        let state = prop_oneof![
            (any::<u64>(), any::<bool>()).prop_map(|(c, nr)| Packet::Pip {
                cr3: (c & 0xF_FFFF_FFFF_FFFF) >> 5 << 5,
                nr
            }),
            (any::<bool>(), any::<bool>(), any::<bool>())
                .prop_map(|(csl, csd, iflag)| { Packet::ModeExec(ExecMode { csl, csd, iflag }) }),
            (any::<bool>(), any::<bool>())
                .prop_map(|(intx, abort)| Packet::ModeTsx(TsxMode { intx, abort })),
            any::<u64>().prop_map(|v| Packet::Vmcs((v & 0xF_FFFF_FFFF_FFFF) >> 12 << 12)),
            any::<u64>().prop_map(Packet::Mnt),
        ];
        let timing = prop_oneof![
            any::<u64>().prop_map(|v| Packet::Tsc(v & 0xFF_FFFF_FFFF_FFFF)),
            any::<u8>().prop_map(Packet::Cbr),
            (any::<u16>(), 0..=0x1FFu16).prop_map(|(ctc, fc)| Packet::Tma { ctc, fc }),
            any::<u8>().prop_map(Packet::Mtc),
            // Up to 61 bits fit a 9-byte CYC.
            (0..62u32, any::<u64>()).prop_map(|(n, v)| Packet::Cyc(v & ((1u64 << n) - 1))),
        ];
        let power = prop_oneof![
            (any::<u32>(), any::<u32>()).prop_map(|(hints, ext)| Packet::Mwait { hints, ext }),
            (0..16u8, 0..16u8, any::<u8>()).prop_map(|(state, sub_state, flags)| {
                Packet::Pwre(Pwre {
                    state,
                    sub_state,
                    flags,
                })
            }),
            (0..16u8, 0..16u8, 0..16u8).prop_map(|(last, deepest, wake)| Packet::Pwrx(Pwrx {
                last,
                deepest,
                wake
            })),
            (any::<u64>(), any::<bool>(), any::<bool>()).prop_map(|(v, wide, ip)| {
                Packet::Ptw {
                    payload: if wide { v } else { v & 0xFFFF_FFFF },
                    len: if wide { 8 } else { 4 },
                    ip,
                }
            }),
            (0..32u8, any::<u8>(), any::<bool>()).prop_map(|(kind, vector, ip)| Packet::Cfe {
                kind,
                vector,
                ip
            }),
            (0..32u8, any::<u64>()).prop_map(|(kind, payload)| Packet::Evd { kind, payload }),
            (
                any::<u8>(),
                any::<bool>(),
                any::<bool>(),
                proptest::option::of(any::<u16>())
            )
                .prop_map(|(trbv, ip, mult, icnt)| Packet::Trig {
                    trbv,
                    ip,
                    mult,
                    icnt
                }),
        ];
        prop_oneof![simple, ips, state, timing, power]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// Encode then parse gives the packet back, with the length written.
        #[test]
        fn every_packet_round_trips(p in packet()) {
            let b = to_bytes(&p).unwrap();
            prop_assert!(b.len() <= MAX_PACKET_LEN);
            prop_assert_eq!(parse(&b, &Errata::default()), Ok((p, b.len() as u8)));
            // One byte short is truncated, never another packet.
            if b.len() > 1 {
                let short = parse(&b[..b.len() - 1], &Errata::default());
                prop_assert!(matches!(short, Err(PacketErrorKind::Truncated { .. })), "{:?}", short);
            }
        }

        /// `compress_ip` gives a payload that Last IP turns back into the IP.
        #[test]
        fn compressed_ips_decompress(ip in any::<u64>(), last in any::<u64>(), near in any::<bool>()) {
            let ip = if near { (last & !0xFFFF_FFFF) | (ip & 0xFFFF_FFFF) } else { ip };
            let mut l = LastIp::new();
            l.update(&IpPayload { compression: IpCompression::Full, bits: last });
            let p = compress_ip(ip, last);
            prop_assert_eq!(l.update(&p), Some(ip));
        }
    }

    #[test]
    fn cyc_lengths_follow_the_value() {
        for (v, n) in [(0u64, 1usize), (31, 1), (32, 2), (4095, 2), (4096, 3)] {
            let b = to_bytes(&Packet::Cyc(v)).unwrap();
            assert_eq!(b.len(), n, "{v}");
            assert_eq!(parse(&b, &Errata::default()), Ok((Packet::Cyc(v), n as u8)));
        }
    }

    #[test]
    fn values_without_bytes_are_refused() {
        for p in [
            Packet::Invalid,
            Packet::Tnt8(Tnt { bits: 0, len: 7 }),
            Packet::Tnt64(Tnt { bits: 0, len: 0 }),
            Packet::Tnt8(Tnt { bits: 4, len: 2 }),
            Packet::Tma { ctc: 0, fc: 0x200 },
            Packet::Cyc(1 << 61),
            Packet::Tsc(1 << 56),
            Packet::Pip {
                cr3: 0x10,
                nr: false,
            },
            Packet::Vmcs(0x800),
            Packet::Tip(IpPayload {
                compression: IpCompression::Update16,
                bits: 0x1_0000,
            }),
            Packet::Ptw {
                payload: 1 << 32,
                len: 4,
                ip: false,
            },
            Packet::Ptw {
                payload: 0,
                len: 2,
                ip: false,
            },
        ] {
            let mut v = vec![1];
            assert_eq!(encode(&p, &mut v), Err(Unencodable(p)));
            assert_eq!(v, [1]);
        }
    }
}
