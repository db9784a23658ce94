//! RTIT packets (spec chapter 4, Figure 2) and a zero-copy parser over a trace stream.
//!
//! Header byte layout (Figure 2):
//!
//! ```text
//! 0xxxxxxx  TNT: a leading 1 marks how many of the bits below it are T/NT (1..=6)
//! 10eeezcc  FUP/TIP: eee = event (000 PGE, 001 PGD, 010 BuffOvf, 011 PCC, 110 TIP,
//!           111 FAR; 10x reserved), z = Zext, cc = CNT (2, 4 or 6 payload bytes; 11 reserved)
//! 11000000  PSB, followed by eight 0x00
//! 11000001  TraceSTOP
//! 1100001p  PIP, p = CR0.PG, then CR3[39:0] in 5 bytes
//! 110001rr  MTC, rr = MTC_Range, then one byte of TSC
//! 11001xxx  reserved
//! 1101aaaa  STS: aaaa = actual core/bus ratio [5:2]; then aa eeeeee (ACBR[1:0], effective
//!           ratio), then TSC[39:0] in 5 bytes
//! 111xxxxx  reserved
//! ```
//!
//! A CYC packet has no header: with `Cycle_Acc` set it follows every full TNT, TIP, FUP, PIP,
//! MTC and STS (4.2.15). Its first byte holds CNTP[5:0] in bits 7:2 and the length in bits
//! 1:0 (01, 10, 11 = 1, 2, 3 bytes; 00 reserved). A partial TNT carries no CYC ("it is not
//! needed"), nor do PSB and TraceSTOP.

use std::fmt;

use crate::psb_ahead::PsbAhead;
use crate::stream::TraceStream;

/// The longest packet: a PSB (9 bytes). A packet plus its CYC never exceeds 7 + 3.
pub const MAX_PACKET_LEN: usize = 10;
/// Bytes of a PSB packet: the header 0xC0 and eight zero bytes (4.2.1).
pub const PSB_BYTES: [u8; 9] = [0xC0, 0, 0, 0, 0, 0, 0, 0, 0];

/// The event field of a FUP header (4.2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FupKind {
    /// Packet generation enabled: tracing resumes at the payload IP (4.2.7).
    Pge,
    /// Packet generation disabled at the payload IP (4.2.8).
    Pgd,
    /// The buffer overflow has cleared; execution continues at the payload IP (4.2.5).
    BuffOvf,
    /// Periodic cycle count (4.2.6); the payload is the NLIP of an instruction.
    Pcc,
    /// Far transfer from the payload IP (4.2.9); a TIP with the destination follows.
    Far,
}

impl FupKind {
    pub fn event_bits(self) -> u8 {
        match self {
            FupKind::Pge => 0b000,
            FupKind::Pgd => 0b001,
            FupKind::BuffOvf => 0b010,
            FupKind::Pcc => 0b011,
            FupKind::Far => 0b111,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            FupKind::Pge => "fup.pge",
            FupKind::Pgd => "fup.pgd",
            FupKind::BuffOvf => "fup.buffovf",
            FupKind::Pcc => "fup.pcc",
            FupKind::Far => "fup.far",
        }
    }
}

/// The IP payload of a TIP or FUP: 2, 4 or 6 bytes, either zero-extended or compressed
/// against LAST_LIP (Table 18). Decompression is [`super::last_ip::LastIp`]'s job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpPayload {
    /// Payload bytes: 2, 4 or 6.
    pub size: u8,
    /// Zext: the bytes above the payload are zero rather than taken from LAST_LIP.
    pub zext: bool,
    /// The payload, little-endian, in the low `size` bytes.
    pub bits: u64,
}

impl IpPayload {
    /// CNT field value for this size (0, 1, 2).
    pub fn cnt(&self) -> u8 {
        self.size / 2 - 1
    }
    /// True when the payload alone determines the IP (zero-extended, or all 6 bytes).
    pub fn is_self_contained(&self) -> bool {
        self.zext || self.size == 6
    }
}

/// Up to six taken/not-taken bits (4.2.2). `bits` holds them oldest-first from bit `len-1`
/// down to bit 0, exactly as they sit below the marker bit in the packet byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tnt {
    pub bits: u8,
    pub len: u8,
}

impl Tnt {
    pub fn is_full(&self) -> bool {
        self.len == 6
    }
    /// The `i`-th branch (0 = oldest) was taken.
    pub fn taken(&self, i: u8) -> bool {
        (self.bits >> (self.len - 1 - i)) & 1 == 1
    }
}

/// One RTIT packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Packet {
    Tnt(Tnt),
    Tip(IpPayload),
    Fup(FupKind, IpPayload),
    Psb,
    TraceStop,
    /// Paging information: CR3[39:0] and CR0.PG (4.2.10).
    Pip {
        cr3: u64,
        pg: bool,
    },
    /// Mini time counter: eight TSC bits selected by `rng` (4.2.12).
    Mtc {
        rng: u8,
        tsc: u8,
    },
    /// Super time sync: actual and effective core/bus ratio, TSC[39:0] (4.2.13).
    Sts {
        acbr: u8,
        ecbr: u8,
        tsc: u64,
    },
    /// Cycle count: the raw payload (CNTP at the time it was sent, before the E6 fix) and
    /// its length in bytes (4.2.14).
    Cyc {
        value: u32,
        len: u8,
    },
}

impl Packet {
    /// A packet that a CYC follows in cycle-accurate mode (4.2.15).
    pub fn takes_cyc(&self) -> bool {
        match self {
            Packet::Tnt(t) => t.is_full(),
            Packet::Tip(_)
            | Packet::Fup(..)
            | Packet::Pip { .. }
            | Packet::Mtc { .. }
            | Packet::Sts { .. } => true,
            Packet::Psb | Packet::TraceStop | Packet::Cyc { .. } => false,
        }
    }

    /// Short lower-case name as used by `tracemill dump` and the `--stats` counts.
    pub fn name(&self) -> &'static str {
        match self {
            Packet::Tnt(t) if t.is_full() => "tnt.full",
            Packet::Tnt(_) => "tnt.partial",
            Packet::Tip(_) => "tip",
            Packet::Fup(k, _) => k.name(),
            Packet::Psb => "psb",
            Packet::TraceStop => "tracestop",
            Packet::Pip { .. } => "pip",
            Packet::Mtc { .. } => "mtc",
            Packet::Sts { .. } => "sts",
            Packet::Cyc { .. } => "cyc",
        }
    }

    /// Every packet name, in the order `--stats` prints them.
    pub const NAMES: [&'static str; 14] = [
        "psb",
        "tnt.partial",
        "tnt.full",
        "tip",
        "fup.pge",
        "fup.pgd",
        "fup.buffovf",
        "fup.pcc",
        "fup.far",
        "tracestop",
        "pip",
        "mtc",
        "sts",
        "cyc",
    ];
}

/// A packet and where it sits in the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parsed {
    /// Byte offset of the first byte in the (time-ordered) stream.
    pub offset: u64,
    /// Bytes the packet occupies.
    pub size: u8,
    pub packet: Packet,
}

/// Why bytes could not be read as a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PacketErrorKind {
    /// The packet needs `need` bytes but the stream, or the next PSB, comes first.
    Truncated { header: u8, need: u8 },
    /// A header the spec marks reserved (FUP event 10x, 11001xxx, 111xxxxx).
    ReservedHeader(u8),
    /// A TIP/FUP with CNT = 11.
    ReservedIpSize(u8),
    /// A CYC byte with CCNT = 00.
    ReservedCycSize(u8),
    /// 0x00 or 0x01: a TNT byte with no T/NT bits. Real hardware never sends one; in a
    /// dump it usually means unwritten buffer space.
    EmptyTnt(u8),
}

/// A byte sequence the parser rejected; parsing resumes at the next PSB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketError {
    pub offset: u64,
    pub kind: PacketErrorKind,
}

impl PacketError {
    #[cold]
    fn new(offset: u64, kind: PacketErrorKind) -> Self {
        PacketError { offset, kind }
    }
}

impl fmt::Display for PacketErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PacketErrorKind::Truncated { header, need } => write!(
                f,
                "packet with header {header:#04x} truncated: needs {need} bytes"
            ),
            PacketErrorKind::ReservedHeader(h) => write!(f, "reserved packet header {h:#04x}"),
            PacketErrorKind::ReservedIpSize(h) => {
                write!(f, "reserved IP size (CNT=3) in header {h:#04x}")
            }
            PacketErrorKind::ReservedCycSize(b) => {
                write!(f, "reserved cycle count length (CCNT=0) in byte {b:#04x}")
            }
            PacketErrorKind::EmptyTnt(b) => write!(f, "TNT byte {b:#04x} holds no branch bits"),
        }
    }
}

impl fmt::Display for PacketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at offset {:#x})", self.kind, self.offset)
    }
}

impl std::error::Error for PacketError {}

/// Parse one packet from the start of `b`. `want_cyc` says a CYC is expected here
/// (the previous packet takes one in cycle-accurate mode). Returns the packet and its size.
///
/// `b` may be shorter than the packet; the caller bounds it by the end of the stream or
/// the next PSB, so a short slice is a truncated packet.
#[inline]
pub fn parse_one(b: &[u8], want_cyc: bool) -> Result<(Packet, u8), PacketErrorKind> {
    let h = b[0];
    if want_cyc {
        return parse_cyc(b);
    }
    let need = |n: usize| -> Result<(), PacketErrorKind> {
        if b.len() < n {
            Err(PacketErrorKind::Truncated {
                header: h,
                need: n as u8,
            })
        } else {
            Ok(())
        }
    };
    if h & 0x80 == 0 {
        // TNT: the highest set bit in 1..=6 is the marker.
        if h < 2 {
            return Err(PacketErrorKind::EmptyTnt(h));
        }
        let len = 7 - h.leading_zeros() as u8; // marker position
        let bits = h & ((1u8 << len) - 1);
        return Ok((Packet::Tnt(Tnt { bits, len }), 1));
    }
    if h & 0xC0 == 0x80 {
        let event = (h >> 3) & 0b111;
        let kind = match event {
            0b000 => Some(FupKind::Pge),
            0b001 => Some(FupKind::Pgd),
            0b010 => Some(FupKind::BuffOvf),
            0b011 => Some(FupKind::Pcc),
            0b110 => None, // TIP
            0b111 => Some(FupKind::Far),
            _ => return Err(PacketErrorKind::ReservedHeader(h)),
        };
        let cnt = h & 0b11;
        if cnt == 3 {
            return Err(PacketErrorKind::ReservedIpSize(h));
        }
        let size = 2 * (cnt + 1);
        need(1 + size as usize)?;
        let mut raw = [0u8; 8];
        raw[..size as usize].copy_from_slice(&b[1..1 + size as usize]);
        let ip = IpPayload {
            size,
            zext: h & 0b100 != 0,
            bits: u64::from_le_bytes(raw),
        };
        let p = match kind {
            Some(k) => Packet::Fup(k, ip),
            None => Packet::Tip(ip),
        };
        return Ok((p, 1 + size));
    }
    // 11xxxxxx
    match h {
        0xC0 => {
            need(9)?;
            if b[1..9].iter().all(|&x| x == 0) {
                Ok((Packet::Psb, 9))
            } else {
                Err(PacketErrorKind::ReservedHeader(h))
            }
        }
        0xC1 => Ok((Packet::TraceStop, 1)),
        0xC2 | 0xC3 => {
            need(6)?;
            let mut raw = [0u8; 8];
            raw[..5].copy_from_slice(&b[1..6]);
            Ok((
                Packet::Pip {
                    cr3: u64::from_le_bytes(raw),
                    pg: h & 1 != 0,
                },
                6,
            ))
        }
        0xC4..=0xC7 => {
            need(2)?;
            Ok((
                Packet::Mtc {
                    rng: h & 0b11,
                    tsc: b[1],
                },
                2,
            ))
        }
        0xD0..=0xDF => {
            need(7)?;
            let acbr = ((h & 0x0F) << 2) | (b[1] >> 6);
            let ecbr = b[1] & 0x3F;
            let mut raw = [0u8; 8];
            raw[..5].copy_from_slice(&b[2..7]);
            Ok((
                Packet::Sts {
                    acbr,
                    ecbr,
                    tsc: u64::from_le_bytes(raw),
                },
                7,
            ))
        }
        _ => Err(PacketErrorKind::ReservedHeader(h)),
    }
}

#[inline]
fn parse_cyc(b: &[u8]) -> Result<(Packet, u8), PacketErrorKind> {
    let b0 = b[0];
    let len = b0 & 0b11;
    if len == 0 {
        return Err(PacketErrorKind::ReservedCycSize(b0));
    }
    if b.len() < len as usize {
        return Err(PacketErrorKind::Truncated {
            header: b0,
            need: len,
        });
    }
    let mut value = (b0 >> 2) as u32;
    if len >= 2 {
        value |= (b[1] as u32) << 6;
    }
    if len == 3 {
        value |= (b[2] as u32) << 14;
    }
    Ok((Packet::Cyc { value, len }, len))
}

/// Reads packets from a stream range, one at a time, without copying the stream.
///
/// PSBs (found as the reader goes, [`super::sync::next_psb`]) are hard boundaries: a
/// packet that would run into a PSB is reported truncated, and after any error parsing
/// resumes at the next PSB. This makes every reader over the same bytes agree, however
/// the stream is cut into chunks.
pub struct PacketReader<'s> {
    stream: &'s TraceStream<'s>,
    pos: u64,
    end: u64,
    /// Where the next PSB is, searched a window at a time.
    psb: PsbAhead,
    cycle_acc: bool,
    want_cyc: bool,
}

impl<'s> PacketReader<'s> {
    /// Read packets starting at `start` (a packet boundary, normally a PSB) up to `end`
    /// (exclusive: no packet starting at or after `end` is read).
    pub fn new(stream: &'s TraceStream<'s>, start: u64, end: u64, cycle_acc: bool) -> Self {
        PacketReader {
            stream,
            pos: start,
            end: end.min(stream.len()),
            psb: PsbAhead::new(),
            cycle_acc,
            want_cyc: false,
        }
    }

    /// Offset of the next byte to read.
    pub fn pos(&self) -> u64 {
        self.pos
    }
    pub fn end(&self) -> u64 {
        self.end
    }
    /// A CYC is expected next (cursor state that a walker snapshot must carry).
    pub fn wants_cyc(&self) -> bool {
        self.want_cyc
    }

    /// Move the cursor (to a packet boundary previously returned by `pos`).
    pub fn seek(&mut self, pos: u64, want_cyc: bool) {
        self.pos = pos;
        self.want_cyc = want_cyc;
    }

    /// The first PSB at or after `pos` if it starts within a packet's length or so
    /// ([`PsbAhead::near`]). Searches only what an earlier call did not prove, so a
    /// reader moving forward scans each byte once, and one seeking back (a look-ahead
    /// undone) scans only the bytes up to the known answer again, not on to the next PSB
    /// (which made long PSB-less stretches quadratic in the Intel PT reader).
    #[inline]
    fn psb_from(&mut self, pos: u64) -> Option<u64> {
        let s = self.stream;
        let first_in = |from, to| super::sync::next_psb_before(s, from, to);
        self.psb.near(pos, s.len(), first_in, first_in)
    }

    /// The range ends where the stream ends (not at a chunk boundary).
    pub fn ends_at_stream_end(&self) -> bool {
        self.end >= self.stream.len()
    }

    /// Extend the readable range (used when a stitch walks on into the next chunk).
    pub fn set_end(&mut self, end: u64) {
        self.end = end.min(self.stream.len());
    }

    /// The next packet if it is a TNT (the decoder's hot path): one byte, no CYC due, not
    /// at the end of the range. A PSB cannot start here (its header is 0xC0).
    #[inline]
    pub fn try_tnt(&mut self) -> Option<(Tnt, u64)> {
        if self.want_cyc || self.pos >= self.end {
            return None;
        }
        let h = self.stream.byte(self.pos)?;
        if h & 0x80 != 0 || h < 2 {
            return None;
        }
        let len = 7 - h.leading_zeros() as u8;
        let t = Tnt {
            bits: h & ((1u8 << len) - 1),
            len,
        };
        let off = self.pos;
        self.pos += 1;
        self.want_cyc = self.cycle_acc && t.is_full();
        Some((t, off))
    }

    /// The next packet, `None` at the end of the range, or an error; after an error the
    /// cursor has moved to the next PSB.
    #[inline]
    pub fn next_packet(&mut self) -> Option<Result<Parsed, PacketError>> {
        if self.pos >= self.end {
            return None;
        }
        // The next PSB at or after pos bounds this packet.
        let next_psb = self.psb_from(self.pos);
        if next_psb == Some(self.pos) {
            // A PSB also ends any wait for a CYC.
            self.want_cyc = false;
            self.pos += 9;
            return Some(Ok(Parsed {
                offset: self.pos - 9,
                size: 9,
                packet: Packet::Psb,
            }));
        }
        let limit = next_psb.unwrap_or(self.stream.len());
        let mut scratch = [0u8; 16];
        let avail = (limit - self.pos).min(16) as usize;
        let bytes = self.stream.window(self.pos, avail, &mut scratch);
        let offset = self.pos;
        match parse_one(bytes, self.want_cyc) {
            Ok((packet, size)) => {
                self.pos += size as u64;
                self.want_cyc = self.cycle_acc && packet.takes_cyc();
                Some(Ok(Parsed {
                    offset,
                    size,
                    packet,
                }))
            }
            Err(kind) => {
                self.want_cyc = false;
                let (stream, len) = (self.stream, self.stream.len());
                self.pos = self
                    .psb
                    .resume_at(next_psb, len, || super::sync::next_psb(stream, offset));
                Some(Err(PacketError::new(offset, kind)))
            }
        }
    }
}

impl Iterator for PacketReader<'_> {
    type Item = Result<Parsed, PacketError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_packet()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(b: &[u8]) -> Packet {
        parse_one(b, false).unwrap().0
    }

    #[test]
    fn tnt_marker_gives_length_and_order_4_2_2() {
        // 0b0000_0010 | t: one bit; 0b01tt_tttt: six bits, oldest highest.
        assert_eq!(one(&[0b10]), Packet::Tnt(Tnt { bits: 0, len: 1 }));
        assert_eq!(one(&[0b11]), Packet::Tnt(Tnt { bits: 1, len: 1 }));
        let t = match one(&[0b0110_0001]) {
            Packet::Tnt(t) => t,
            p => panic!("{p:?}"),
        };
        assert!(t.is_full());
        assert!(t.taken(0) && !t.taken(1) && t.taken(5));
        assert_eq!(parse_one(&[0], false), Err(PacketErrorKind::EmptyTnt(0)));
        assert_eq!(parse_one(&[1], false), Err(PacketErrorKind::EmptyTnt(1)));
    }

    #[test]
    fn fup_events_and_tip_from_header_figure_2() {
        let pl = [0x34, 0x12];
        for (ev, want) in [
            (0b000, Some(FupKind::Pge)),
            (0b001, Some(FupKind::Pgd)),
            (0b010, Some(FupKind::BuffOvf)),
            (0b011, Some(FupKind::Pcc)),
            (0b110, None),
            (0b111, Some(FupKind::Far)),
        ] {
            let h = 0x80 | ev << 3 | 0b100;
            let ip = IpPayload {
                size: 2,
                zext: true,
                bits: 0x1234,
            };
            let p = one(&[h, pl[0], pl[1]]);
            match want {
                Some(k) => assert_eq!(p, Packet::Fup(k, ip)),
                None => assert_eq!(p, Packet::Tip(ip)),
            }
        }
        for ev in [0b100, 0b101] {
            let h = 0x80 | ev << 3;
            assert_eq!(
                parse_one(&[h, 0, 0], false),
                Err(PacketErrorKind::ReservedHeader(h))
            );
        }
        assert_eq!(
            parse_one(&[0xB3, 0, 0, 0, 0, 0, 0, 0], false),
            Err(PacketErrorKind::ReservedIpSize(0xB3))
        );
    }

    #[test]
    fn ip_sizes_follow_cnt_4_2_3() {
        for (cnt, size) in [(0u8, 2u8), (1, 4), (2, 6)] {
            let mut b = vec![0xB0 | cnt];
            b.extend((1..=size).map(|i| i * 0x11));
            let (p, n) = parse_one(&b, false).unwrap();
            assert_eq!(n, 1 + size);
            match p {
                Packet::Tip(ip) => {
                    assert_eq!(ip.size, size);
                    assert_eq!(ip.cnt(), cnt);
                    assert_eq!(ip.bits.to_le_bytes()[size as usize - 1], size * 0x11);
                }
                p => panic!("{p:?}"),
            }
        }
    }

    #[test]
    fn extended_headers() {
        assert_eq!(one(&PSB_BYTES), Packet::Psb);
        assert_eq!(one(&[0xC1]), Packet::TraceStop);
        assert_eq!(
            one(&[0xC3, 0x00, 0x10, 0x20, 0x30, 0x40]),
            Packet::Pip {
                cr3: 0x40_3020_1000,
                pg: true
            }
        );
        assert_eq!(one(&[0xC6, 0x7F]), Packet::Mtc { rng: 2, tsc: 0x7F });
        // ACBR = 0b1011_01 = 45, ECBR = 0b10_1010 = 42
        assert_eq!(
            one(&[0xDB, 0b01_101010, 1, 2, 3, 4, 5]),
            Packet::Sts {
                acbr: 45,
                ecbr: 42,
                tsc: 0x05_0403_0201
            }
        );
        for h in [0xC8, 0xCF, 0xE0, 0xFF] {
            assert_eq!(
                parse_one(&[h, 0, 0, 0, 0, 0, 0, 0, 0], false),
                Err(PacketErrorKind::ReservedHeader(h))
            );
        }
    }

    #[test]
    #[allow(clippy::unusual_byte_groupings)] // payload bits _ header bits, as in 4.2.14
    fn cyc_lengths_4_2_14() {
        assert_eq!(
            parse_one(&[0b101010_01], true),
            Ok((Packet::Cyc { value: 42, len: 1 }, 1))
        );
        assert_eq!(
            parse_one(&[0b000001_10, 0x02], true),
            Ok((
                Packet::Cyc {
                    value: 1 | 2 << 6,
                    len: 2
                },
                2
            ))
        );
        assert_eq!(
            parse_one(&[0b111111_11, 0xFF, 0xFF], true),
            Ok((
                Packet::Cyc {
                    value: (1 << 22) - 1,
                    len: 3
                },
                3
            ))
        );
        assert_eq!(
            parse_one(&[0b1111_1100], true),
            Err(PacketErrorKind::ReservedCycSize(0xFC))
        );
    }

    /// The reader looks for the next PSB a window at a time (`psb_ahead`): PSBs on each
    /// side of the windows' edges are read where `find_psbs` finds them, and a reader over
    /// the whole stream reads what readers started at each PSB read.
    #[test]
    fn psbs_at_the_edges_of_the_readers_search_window_are_read_where_they_are() {
        use crate::psb_ahead::HORIZON;
        use crate::rtit::sync::find_psbs;
        let h = HORIZON as usize;
        // One-bit TNTs between the PSBs.
        let mut d = vec![0x02u8; 3 * h + 50];
        for at in [0, h - 20, h - 4, 2 * h - 30, 2 * h + 1, 3 * h + 20] {
            d[at..at + PSB_BYTES.len()].copy_from_slice(&PSB_BYTES);
        }
        let s = TraceStream::linear(&d);
        let psbs = find_psbs(&s);
        assert_eq!(psbs.len(), 6, "{psbs:?}");
        let whole: Vec<_> = PacketReader::new(&s, 0, s.len(), false).collect();
        let read: Vec<u64> = whole
            .iter()
            .filter_map(|p| {
                p.as_ref()
                    .ok()
                    .filter(|p| p.packet == Packet::Psb)
                    .map(|p| p.offset)
            })
            .collect();
        assert_eq!(read, psbs);
        let mut chunked = Vec::new();
        for (i, &p) in psbs.iter().enumerate() {
            let end = psbs.get(i + 1).copied().unwrap_or(s.len());
            chunked.extend(PacketReader::new(&s, p, end, false));
        }
        assert_eq!(whole, chunked);
    }
}
