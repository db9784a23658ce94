//! Packet bytes, written the way the hardware writes them (spec chapter 4, Figure 2).
//!
//! This is deliberately a separate implementation from the decoder's parser, so that the
//! round-trip tests check one against the other. It also holds the hardware's side of LIP
//! compression: which CNT/Zext a LIP is sent with, given RTIT_LAST_LIP (Table 18).

use tracemill_decode::rtit::packet::{FupKind, IpPayload, Packet, Tnt};

/// Choose the payload for `ip` (48 bits significant) against RTIT_LAST_LIP `last`
/// (`None` when its valid bit is clear), following Table 18:
///
/// | CNT | Zext | match 47:32 | match 31:16 | 47:32 zero | 31:16 zero |
/// |-----|------|-------------|-------------|------------|------------|
/// | 0   | 0    | 1           | 1           | 0          | X          |
/// | 0   | 0    | 1           | 1           | 1          | 0          |
/// | 0   | 1    | X           | X           | 1          | 1          |
/// | 1   | 0    | 1           | 0           | 0          | X          |
/// | 1   | 1    | X           | 0           | 1          | 0          |
/// | 1   | 1    | 0           | X           | 1          | 0          |
/// | 2   | 0    | 0           | X           | 0          | X          |
///
/// Zero extension is preferred where both apply ("easier for software").
pub fn compress_ip(ip: u64, last: Option<u64>) -> IpPayload {
    let ip = ip & 0xFFFF_FFFF_FFFF;
    let hi = (ip >> 32) & 0xFFFF;
    let mid = (ip >> 16) & 0xFFFF;
    let (mh, mm) = match last {
        Some(l) => (((l >> 32) & 0xFFFF) == hi, ((l >> 16) & 0xFFFF) == mid),
        None => (false, false),
    };
    let (size, zext) = if hi == 0 && mid == 0 {
        (2, true)
    } else if mh && mm {
        (2, false)
    } else if hi == 0 {
        (4, true)
    } else if mh {
        (4, false)
    } else {
        (6, false)
    };
    let mask = if size == 6 {
        0xFFFF_FFFF_FFFF
    } else {
        (1u64 << (8 * size)) - 1
    };
    IpPayload {
        size,
        zext,
        bits: ip & mask,
    }
}

/// Append the bytes of `p` to `out`.
pub fn write_packet(out: &mut Vec<u8>, p: &Packet) {
    match *p {
        Packet::Tnt(Tnt { bits, len }) => {
            assert!((1..=6).contains(&len), "TNT holds 1..=6 bits");
            out.push((1 << len) | (bits & ((1 << len) - 1)));
        }
        Packet::Tip(ip) => write_ip(out, 0b110, ip),
        Packet::Fup(k, ip) => write_ip(out, k.event_bits(), ip),
        Packet::Psb => out.extend_from_slice(&[0xC0, 0, 0, 0, 0, 0, 0, 0, 0]),
        Packet::TraceStop => out.push(0xC1),
        Packet::Pip { cr3, pg } => {
            out.push(0xC2 | pg as u8);
            out.extend_from_slice(&cr3.to_le_bytes()[..5]);
        }
        Packet::Mtc { rng, tsc } => {
            out.push(0xC4 | (rng & 3));
            out.push(tsc);
        }
        Packet::Sts { acbr, ecbr, tsc } => {
            out.push(0xD0 | ((acbr >> 2) & 0x0F));
            out.push(((acbr & 3) << 6) | (ecbr & 0x3F));
            out.extend_from_slice(&tsc.to_le_bytes()[..5]);
        }
        Packet::Cyc { value, len } => {
            let len = if len == 0 { cyc_len(value) } else { len };
            out.push((((value & 0x3F) as u8) << 2) | len);
            if len >= 2 {
                out.push((value >> 6) as u8);
            }
            if len == 3 {
                out.push((value >> 14) as u8);
            }
        }
    }
}

/// Bytes a CYC packet needs for `value` (4.2.14): 1 while CNTP[21:6] is zero, 2 while
/// CNTP[21:14] is zero, else 3.
pub fn cyc_len(value: u32) -> u8 {
    if value < 1 << 6 {
        1
    } else if value < 1 << 14 {
        2
    } else {
        3
    }
}

/// A CYC packet for a 22-bit count.
pub fn cyc(value: u32) -> Packet {
    let value = value & ((1 << 22) - 1);
    Packet::Cyc {
        value,
        len: cyc_len(value),
    }
}

fn write_ip(out: &mut Vec<u8>, event: u8, ip: IpPayload) {
    let cnt = ip.size / 2 - 1;
    out.push(0x80 | (event << 3) | ((ip.zext as u8) << 2) | cnt);
    out.extend_from_slice(&ip.bits.to_le_bytes()[..ip.size as usize]);
}

/// Size in bytes of `p` as written.
pub fn packet_size(p: &Packet) -> usize {
    match p {
        Packet::Tnt(_) | Packet::TraceStop => 1,
        Packet::Tip(ip) | Packet::Fup(_, ip) => 1 + ip.size as usize,
        Packet::Psb => 9,
        Packet::Pip { .. } => 6,
        Packet::Mtc { .. } => 2,
        Packet::Sts { .. } => 7,
        Packet::Cyc { value, len } => {
            if *len == 0 {
                cyc_len(*value) as usize
            } else {
                *len as usize
            }
        }
    }
}

/// Bytes of a packet list.
pub fn to_bytes(packets: &[Packet]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in packets {
        write_packet(&mut out, p);
    }
    out
}

/// Convenience constructors for hand-written scenarios.
pub mod pk {
    use super::*;

    pub fn tnt(bits: &[bool]) -> Packet {
        let mut b = 0u8;
        for &t in bits {
            b = (b << 1) | t as u8;
        }
        Packet::Tnt(Tnt {
            bits: b,
            len: bits.len() as u8,
        })
    }
    pub fn tip(ip: u64, last: Option<u64>) -> Packet {
        Packet::Tip(compress_ip(ip, last))
    }
    pub fn fup(k: FupKind, ip: u64, last: Option<u64>) -> Packet {
        Packet::Fup(k, compress_ip(ip, last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table18_rows() {
        let last = Some(0x7FFF_1234_0000);
        // CNT=0 Zext=0: upper 32 match, upper not zero.
        assert_eq!(compress_ip(0x7FFF_1234_5678, last).size, 2);
        assert!(!compress_ip(0x7FFF_1234_5678, last).zext);
        // CNT=0 Zext=0: upper zero, middle non-zero, both match.
        let p = compress_ip(0x0000_0040_1000, Some(0x40_0000));
        assert_eq!((p.size, p.zext), (2, false));
        // CNT=0 Zext=1: upper 32 zero.
        let p = compress_ip(0x1234, last);
        assert_eq!((p.size, p.zext, p.bits), (2, true, 0x1234));
        // CNT=1 Zext=0: 47:32 match only.
        let p = compress_ip(0x7FFF_4321_0000, last);
        assert_eq!((p.size, p.zext), (4, false));
        // CNT=1 Zext=1: upper zero, middle not matching (or nothing to match).
        let p = compress_ip(0x0040_1000, None);
        assert_eq!((p.size, p.zext), (4, true));
        let p = compress_ip(0x0041_1000, Some(0x40_0000));
        assert_eq!((p.size, p.zext), (4, true));
        // CNT=2: upper 16 differ and are not zero.
        let p = compress_ip(0x7FFE_0000_0000, last);
        assert_eq!((p.size, p.zext), (6, false));
        let p = compress_ip(0x7FFE_0000_0000, None);
        assert_eq!((p.size, p.zext), (6, false));
    }

    #[test]
    fn sizes_match_written_bytes() {
        let ps = [
            pk::tnt(&[true, false, true]),
            pk::tip(0x40_1000, None),
            Packet::Psb,
            Packet::Pip {
                cr3: 0x1000,
                pg: true,
            },
            Packet::Mtc { rng: 1, tsc: 3 },
            Packet::Sts {
                acbr: 20,
                ecbr: 19,
                tsc: 1 << 39,
            },
            cyc(70_000),
            Packet::TraceStop,
        ];
        for p in &ps {
            let mut v = Vec::new();
            write_packet(&mut v, p);
            assert_eq!(v.len(), packet_size(p), "{p:?}");
        }
    }
}
