//! Intel PT packets (SDM 36.4.2) and the parser of one packet from a byte slice.
//!
//! Opcodes (the first byte; `02` is the escape to the two-byte opcodes):
//!
//! ```text
//! 00000000  PAD                         xxxxxxx0  TNT-8 (not 00, 02): stop bit + up to 6 bits
//! iii01101  TIP       iii = IPBytes     iii10001  TIP.PGE
//! iii00001  TIP.PGD                     iii11101  FUP
//! 00011001  TSC (7 bytes)               01011001  MTC (CTC byte)
//! 10011001  MODE (leaf byte)            11011001  TRIG
//! xxxxxe11  CYC: e = another byte follows, each with its own e in bit 0
//! 00000010  escape, then:
//!   10000010 PSB (+ 7 x 02 82)  00100011 PSBEND   11110011 OVF     10000011 TraceStop
//!   10100011 TNT-64 (6 bytes)   01000011 PIP      00000011 CBR     01110011 TMA
//!   11001000 VMCS               01100010 EXSTOP   11100010 EXSTOP.IP
//!   11000010 MWAIT              00100010 PWRE     10100010 PWRX
//!   ipp10010 PTW (pp: 4 or 8 payload bytes)       00010011 CFE     01010011 EVD
//!   11000011 then 10001000: MNT
//! ```
//!
//! CFE, EVD and TRIG are newer than the SDM chapter in `shared/spec` (it ends at PWRX,
//! 36.4.2.25); their layouts follow libipt, whose test suite exercises them. Every other
//! byte is an unknown opcode.
//!
//! The parser reads one packet and says how long it is; it keeps no state. Where libipt
//! and the SDM disagree on a field, the packet keeps the raw bits so both readings are
//! possible (PWRE's HW bit).

use std::fmt;

use super::cpu::Errata;

/// The PSB: `02 82` eight times (36.4.2.17).
pub const PSB_BYTES: [u8; 16] = [
    0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82,
];
/// Bytes of a PSB.
pub const PSB_LEN: u64 = 16;
/// The longest packet (a PSB). A window of this many bytes always holds a whole packet.
pub const MAX_PACKET_LEN: usize = 16;

/// IPBytes of a TIP, TIP.PGE, TIP.PGD or FUP: how many payload bytes follow and how the
/// decoder fills in the rest (36.4.2.2, Table 36-18).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum IpCompression {
    /// 000: no payload; the IP is out of context. Last IP is unchanged.
    Suppressed = 0,
    /// 001: two bytes replace bits 15:0 of Last IP.
    Update16 = 1,
    /// 010: four bytes replace bits 31:0 of Last IP.
    Update32 = 2,
    /// 011: six bytes, sign-extended from bit 47.
    Sext48 = 3,
    /// 100: six bytes replace bits 47:0 of Last IP.
    Update48 = 4,
    /// 110: eight bytes, the full IP.
    Full = 6,
}

impl IpCompression {
    /// The IPBytes field value; `None` for the reserved 101 and 111.
    pub fn from_ip_bytes(v: u8) -> Option<Self> {
        Some(match v {
            0 => IpCompression::Suppressed,
            1 => IpCompression::Update16,
            2 => IpCompression::Update32,
            3 => IpCompression::Sext48,
            4 => IpCompression::Update48,
            6 => IpCompression::Full,
            _ => return None,
        })
    }
    /// The IPBytes field value.
    pub fn ip_bytes(self) -> u8 {
        self as u8
    }
    /// Payload bytes after the opcode.
    pub fn payload_len(self) -> usize {
        match self {
            IpCompression::Suppressed => 0,
            IpCompression::Update16 => 2,
            IpCompression::Update32 => 4,
            IpCompression::Sext48 | IpCompression::Update48 => 6,
            IpCompression::Full => 8,
        }
    }
}

/// The IP payload of a TIP, TIP.PGE, TIP.PGD or FUP. Reconstructing the IP against Last
/// IP is [`super::last_ip::LastIp`]'s job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpPayload {
    pub compression: IpCompression,
    /// The payload bytes, little-endian, in the low `payload_len` bytes (zero when
    /// suppressed).
    pub bits: u64,
}

/// Taken/not-taken bits (36.4.2.1): up to 6 in a TNT-8, up to 47 in a TNT-64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tnt {
    /// The bits, oldest in bit `len - 1`, youngest in bit 0 (as they sit below the stop
    /// bit in the packet).
    pub bits: u64,
    /// How many (1..=47).
    pub len: u8,
}

impl Tnt {
    /// The `i`-th branch (0 = oldest) was taken.
    pub fn taken(&self, i: u8) -> bool {
        (self.bits >> (self.len - 1 - i)) & 1 == 1
    }
}

/// MODE.Exec bits (36.4.2.8, Table 36-26).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ExecMode {
    /// CS.L & IA32_EFER.LMA (bit 0).
    pub csl: bool,
    /// CS.D (bit 1).
    pub csd: bool,
    /// RFLAGS.IF (bit 2), sent by processors with event tracing; libipt names it `iflag`.
    pub iflag: bool,
}

/// The addressing mode MODE.Exec gives (Table 36-26).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddressMode {
    Bits16,
    Bits32,
    Bits64,
    /// CS.L and CS.D both set: "N/A" in the SDM.
    Invalid,
}

impl ExecMode {
    pub fn address_mode(&self) -> AddressMode {
        match (self.csl, self.csd) {
            (true, false) => AddressMode::Bits64,
            (true, true) => AddressMode::Invalid,
            (false, true) => AddressMode::Bits32,
            (false, false) => AddressMode::Bits16,
        }
    }
}

/// MODE.TSX bits (36.4.2.8, Table 36-27).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct TsxMode {
    /// InTX (bit 0): executing transactionally.
    pub intx: bool,
    /// TXAbort (bit 1): the transaction aborted.
    pub abort: bool,
}

/// PWRE (36.4.2.24): entry to a C-state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pwre {
    /// Resolved thread C-state (byte 3, bits 7:4), in MWAIT encoding.
    pub state: u8,
    /// Resolved thread sub C-state (byte 3, bits 3:0).
    pub sub_state: u8,
    /// Byte 2 as sent: the HW bit and reserved bits.
    pub flags: u8,
}

impl Pwre {
    /// HW: the C-state entry was initiated by hardware. Table 36-43 puts it in bit 7 of
    /// byte 2 (as Linux perf reads it); libipt reads bit 3 (`0x08`) instead.
    pub fn hw(&self) -> bool {
        self.flags & 0x80 != 0
    }
}

/// PWRX (36.4.2.25): return to C0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pwrx {
    /// Last core C-state (byte 2, bits 7:4).
    pub last: u8,
    /// Deepest core C-state (byte 2, bits 3:0).
    pub deepest: u8,
    /// Wake reason (byte 3, bits 3:0), one-hot: bit 0 interrupt, bit 2 store to a
    /// monitored address, bit 3 hardware.
    pub wake: u8,
}

impl Pwrx {
    pub fn interrupt(&self) -> bool {
        self.wake & 1 != 0
    }
    pub fn store(&self) -> bool {
        self.wake & 4 != 0
    }
    pub fn hw(&self) -> bool {
        self.wake & 8 != 0
    }
}

/// One Intel PT packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Packet {
    Pad,
    /// Packet stream boundary (36.4.2.17).
    Psb,
    /// End of the PSB+ status packets (36.4.2.18).
    PsbEnd,
    /// Internal buffer overflow: packets were lost (36.4.2.16).
    Ovf,
    /// TraceStop (36.4.2.9).
    Stop,
    /// Short TNT: 1 to 6 bits.
    Tnt8(Tnt),
    /// Long TNT: 1 to 47 bits.
    Tnt64(Tnt),
    Tip(IpPayload),
    TipPge(IpPayload),
    TipPgd(IpPayload),
    Fup(IpPayload),
    /// Paging information (36.4.2.7): the CR3 address bits (51:5) and the non-root bit.
    Pip {
        cr3: u64,
        nr: bool,
    },
    ModeExec(ExecMode),
    ModeTsx(TsxMode),
    /// TSC bits 55:0 (36.4.2.11).
    Tsc(u64),
    /// Core:bus ratio (36.4.2.10).
    Cbr(u8),
    /// TSC/MTC alignment (36.4.2.13): CTC bits 15:0 and the 9-bit FastCounter at the TSC.
    Tma {
        ctc: u16,
        fc: u16,
    },
    /// CTC[N+7:N] (36.4.2.12), N from MTCFreq.
    Mtc(u8),
    /// Core clocks since the last CYC (36.4.2.14).
    Cyc(u64),
    /// VMCS base address (36.4.2.15), bits 51:12.
    Vmcs(u64),
    /// Maintenance (36.4.2.19): a model-specific payload.
    Mnt(u64),
    /// Execution stopped (36.4.2.22); `ip`: a FUP follows.
    Exstop {
        ip: bool,
    },
    /// MWAIT hints and extensions (36.4.2.23), as the two little-endian words sent.
    Mwait {
        hints: u32,
        ext: u32,
    },
    Pwre(Pwre),
    Pwrx(Pwrx),
    /// PTWRITE's operand (36.4.2.21): 4 or 8 bytes; `ip`: a FUP follows.
    Ptw {
        payload: u64,
        /// Payload bytes: 4 or 8.
        len: u8,
        ip: bool,
    },
    /// Control flow event (libipt `pt_packet_cfe`): type, vector, a FUP follows.
    Cfe {
        kind: u8,
        vector: u8,
        ip: bool,
    },
    /// Event data (libipt `pt_packet_evd`): type and 8 payload bytes.
    Evd {
        kind: u8,
        payload: u64,
    },
    /// Trigger (libipt `pt_packet_trig`): trigger bits, IP and multiple-hit flags, and an
    /// instruction count when one is sent.
    Trig {
        trbv: u8,
        ip: bool,
        mult: bool,
        icnt: Option<u16>,
    },
    /// A packet a known erratum corrupted: its length is known, its content is not
    /// (SKZ84: a TMA with reserved bits set is one byte longer).
    Invalid,
}

impl Packet {
    /// Lower-case name, as ptdump prints it.
    pub fn name(&self) -> &'static str {
        match self {
            Packet::Pad => "pad",
            Packet::Psb => "psb",
            Packet::PsbEnd => "psbend",
            Packet::Ovf => "ovf",
            Packet::Stop => "stop",
            Packet::Tnt8(_) => "tnt.8",
            Packet::Tnt64(_) => "tnt.64",
            Packet::Tip(_) => "tip",
            Packet::TipPge(_) => "tip.pge",
            Packet::TipPgd(_) => "tip.pgd",
            Packet::Fup(_) => "fup",
            Packet::Pip { .. } => "pip",
            Packet::ModeExec(_) => "mode.exec",
            Packet::ModeTsx(_) => "mode.tsx",
            Packet::Tsc(_) => "tsc",
            Packet::Cbr(_) => "cbr",
            Packet::Tma { .. } => "tma",
            Packet::Mtc(_) => "mtc",
            Packet::Cyc(_) => "cyc",
            Packet::Vmcs(_) => "vmcs",
            Packet::Mnt(_) => "mnt",
            Packet::Exstop { .. } => "exstop",
            Packet::Mwait { .. } => "mwait",
            Packet::Pwre(_) => "pwre",
            Packet::Pwrx(_) => "pwrx",
            Packet::Ptw { .. } => "ptw",
            Packet::Cfe { .. } => "cfe",
            Packet::Evd { .. } => "evd",
            Packet::Trig { .. } => "trig",
            Packet::Invalid => "<invalid>",
        }
    }

    /// Every name, in the order `tracemill dump --stats` prints them.
    pub const NAMES: [&'static str; 30] = [
        "psb",
        "psbend",
        "pad",
        "ovf",
        "stop",
        "tnt.8",
        "tnt.64",
        "tip",
        "tip.pge",
        "tip.pgd",
        "fup",
        "pip",
        "mode.exec",
        "mode.tsx",
        "tsc",
        "cbr",
        "tma",
        "mtc",
        "cyc",
        "vmcs",
        "mnt",
        "exstop",
        "mwait",
        "pwre",
        "pwrx",
        "ptw",
        "cfe",
        "evd",
        "trig",
        "<invalid>",
    ];

    /// The IP payload of a TIP, TIP.PGE, TIP.PGD or FUP.
    pub fn ip(&self) -> Option<&IpPayload> {
        match self {
            Packet::Tip(p) | Packet::TipPge(p) | Packet::TipPgd(p) | Packet::Fup(p) => Some(p),
            _ => None,
        }
    }
}

/// A packet and where it sits in the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parsed {
    /// Stream offset of the first byte.
    pub offset: u64,
    /// Bytes the packet occupies.
    pub size: u8,
    pub packet: Packet,
}

/// Why bytes could not be read as a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PacketErrorKind {
    /// The packet needs `need` bytes (at least) but only `have` are left before the end
    /// of the stream, or before the next PSB.
    Truncated { need: u8, have: u8 },
    /// An opcode no packet has: the bytes (1 to 3) that were read to know.
    UnknownOpcode { bytes: [u8; 3], len: u8 },
    /// IPBytes 101 or 111 (Table 36-18): the opcode byte.
    ReservedIpBytes(u8),
    /// A MODE leaf other than Exec (000) and TSX (001): the mode byte.
    ReservedModeLeaf(u8),
    /// PTW PayloadBytes 10 or 11 (36.4.2.21): the second opcode byte.
    ReservedPtwSize(u8),
    /// A TMA whose bits that must be zero are not (byte 4, or FC bits above 8).
    ReservedTmaBits,
    /// `02 82` not followed by seven more `02 82`.
    BadPsb,
    /// A TNT-64 without TNT bits (no stop bit, or the stop bit alone in bit 0).
    EmptyTnt,
    /// A CYC whose value would need more than 64 bits.
    CycTooLong,
}

impl PacketErrorKind {
    /// The bytes of a valid packet may continue past the end: only reading further can
    /// tell (libipt's `pte_eos`).
    pub fn is_truncated(&self) -> bool {
        matches!(self, PacketErrorKind::Truncated { .. })
    }
}

impl fmt::Display for PacketErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PacketErrorKind::Truncated { need, have } => {
                write!(f, "packet truncated: needs {need} bytes, {have} left")
            }
            PacketErrorKind::UnknownOpcode { bytes, len } => {
                f.write_str("unknown opcode")?;
                for b in &bytes[..len as usize] {
                    write!(f, " {b:02x}")?;
                }
                Ok(())
            }
            PacketErrorKind::ReservedIpBytes(h) => {
                write!(f, "reserved IPBytes {} in opcode {h:#04x}", h >> 5)
            }
            PacketErrorKind::ReservedModeLeaf(m) => {
                write!(f, "reserved MODE leaf {} in mode byte {m:#04x}", m >> 5)
            }
            PacketErrorKind::ReservedPtwSize(b) => {
                write!(f, "reserved PTW PayloadBytes {} in {b:#04x}", (b >> 5) & 3)
            }
            PacketErrorKind::ReservedTmaBits => f.write_str("TMA with reserved bits set"),
            PacketErrorKind::BadPsb => f.write_str("PSB opcode without the PSB pattern"),
            PacketErrorKind::EmptyTnt => f.write_str("TNT-64 without TNT bits"),
            PacketErrorKind::CycTooLong => f.write_str("CYC longer than 64 bits"),
        }
    }
}

/// Bytes the parser rejected, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketError {
    pub offset: u64,
    pub kind: PacketErrorKind,
}

impl PacketError {
    #[cold]
    pub fn new(offset: u64, kind: PacketErrorKind) -> Self {
        PacketError { offset, kind }
    }
}

impl fmt::Display for PacketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at offset {:#x})", self.kind, self.offset)
    }
}

impl std::error::Error for PacketError {}

/// Little-endian value of up to 8 bytes.
#[inline]
fn le(b: &[u8]) -> u64 {
    let mut raw = [0u8; 8];
    raw[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(raw)
}

#[cold]
fn truncated(need: usize, have: usize) -> PacketErrorKind {
    PacketErrorKind::Truncated {
        need: need as u8,
        have: have.min(255) as u8,
    }
}

#[cold]
fn unknown(b: &[u8], len: usize) -> PacketErrorKind {
    let mut bytes = [0u8; 3];
    bytes[..len].copy_from_slice(&b[..len]);
    PacketErrorKind::UnknownOpcode {
        bytes,
        len: len as u8,
    }
}

/// Parse the packet at the start of `b`. Returns it and its length.
///
/// `b` holds the bytes up to where reading must stop (the end of the stream, or the next
/// PSB); a packet that needs more is `Truncated`. A window of [`MAX_PACKET_LEN`] bytes
/// is always enough. The checks run in libipt's order (which matters only for which
/// error a broken packet gets): the opcode, then a reserved size field, then the length,
/// then reserved payload bits.
///
/// Two errata change what the bytes mean (`errata`): SKD007 (a 2-byte CYC whose second
/// byte is `02`, before `f3`, is an OVF whose escape byte the CYC swallowed: reported as
/// one 3-byte OVF) and SKZ84 (a TMA with reserved bits set is corrupt and one byte
/// longer: reported as an 8-byte [`Packet::Invalid`]).
pub fn parse(b: &[u8], errata: &Errata) -> Result<(Packet, u8), PacketErrorKind> {
    let Some(&opc) = b.first() else {
        return Err(truncated(1, 0));
    };
    let need = |n: usize| -> Result<(), PacketErrorKind> {
        if b.len() < n {
            Err(truncated(n, b.len()))
        } else {
            Ok(())
        }
    };
    match opc {
        0x00 => return Ok((Packet::Pad, 1)),
        0x02 => return parse_ext(b, errata),
        0x19 => {
            need(8)?;
            return Ok((Packet::Tsc(le(&b[1..8])), 8));
        }
        0x59 => {
            need(2)?;
            return Ok((Packet::Mtc(b[1]), 2));
        }
        0x99 => {
            need(2)?;
            let m = b[1];
            let p = match m >> 5 {
                0 => Packet::ModeExec(ExecMode {
                    csl: m & 1 != 0,
                    csd: m & 2 != 0,
                    iflag: m & 4 != 0,
                }),
                1 => Packet::ModeTsx(TsxMode {
                    intx: m & 1 != 0,
                    abort: m & 2 != 0,
                }),
                _ => return Err(PacketErrorKind::ReservedModeLeaf(m)),
            };
            return Ok((p, 2));
        }
        0xD9 => {
            need(3)?;
            let f = b[1];
            let (icnt, len) = if f & 0x40 != 0 {
                need(5)?;
                (Some(le(&b[3..5]) as u16), 5)
            } else {
                (None, 3)
            };
            return Ok((
                Packet::Trig {
                    trbv: b[2],
                    ip: f & 0x80 != 0,
                    mult: f & 0x20 != 0,
                    icnt,
                },
                len,
            ));
        }
        _ => {}
    }
    if opc & 0b11 == 0b11 {
        return parse_cyc(b, errata);
    }
    if opc & 1 == 0 {
        // TNT-8: the highest set bit of opc >> 1 is the stop bit (never 0: 00 is PAD).
        let payload = (opc >> 1) as u64;
        let len = 63 - payload.leading_zeros() as u8;
        return Ok((
            Packet::Tnt8(Tnt {
                bits: payload & !(1 << len),
                len,
            }),
            1,
        ));
    }
    let make: fn(IpPayload) -> Packet = match opc & 0x1F {
        0x0D => Packet::Tip,
        0x11 => Packet::TipPge,
        0x01 => Packet::TipPgd,
        0x1D => Packet::Fup,
        _ => return Err(unknown(b, 1)),
    };
    let compression =
        IpCompression::from_ip_bytes(opc >> 5).ok_or(PacketErrorKind::ReservedIpBytes(opc))?;
    let n = compression.payload_len();
    need(1 + n)?;
    Ok((
        make(IpPayload {
            compression,
            bits: le(&b[1..1 + n]),
        }),
        1 + n as u8,
    ))
}

#[inline]
fn parse_ext(b: &[u8], errata: &Errata) -> Result<(Packet, u8), PacketErrorKind> {
    let need = |n: usize| -> Result<(), PacketErrorKind> {
        if b.len() < n {
            Err(truncated(n, b.len()))
        } else {
            Ok(())
        }
    };
    need(2)?;
    let ext = b[1];
    let fixed = |p: Packet, n: usize| -> Result<(Packet, u8), PacketErrorKind> {
        need(n)?;
        Ok((p, n as u8))
    };
    match ext {
        0x82 => {
            need(16)?;
            if b[..16] == PSB_BYTES {
                Ok((Packet::Psb, 16))
            } else {
                Err(PacketErrorKind::BadPsb)
            }
        }
        0x23 => fixed(Packet::PsbEnd, 2),
        0xF3 => fixed(Packet::Ovf, 2),
        0x83 => fixed(Packet::Stop, 2),
        0xA3 => {
            need(8)?;
            let payload = le(&b[2..8]);
            // Only a stop bit (or none): no TNT bits.
            if payload < 2 {
                return Err(PacketErrorKind::EmptyTnt);
            }
            let len = 63 - payload.leading_zeros() as u8;
            Ok((
                Packet::Tnt64(Tnt {
                    bits: payload & !(1 << len),
                    len,
                }),
                8,
            ))
        }
        0x43 => {
            need(8)?;
            let payload = le(&b[2..8]);
            // Byte 2 holds CR3[11:5] above the NR bit.
            Ok((
                Packet::Pip {
                    cr3: (payload >> 1) << 5,
                    nr: payload & 1 != 0,
                },
                8,
            ))
        }
        0x03 => {
            need(4)?;
            Ok((Packet::Cbr(b[2]), 4))
        }
        0x73 => {
            need(7)?;
            let ctc = le(&b[2..4]) as u16;
            let fc = le(&b[5..7]) as u16;
            if fc & !0x1FF != 0 || b[4] != 0 {
                if errata.skz84 {
                    need(8)?;
                    return Ok((Packet::Invalid, 8));
                }
                return Err(PacketErrorKind::ReservedTmaBits);
            }
            Ok((Packet::Tma { ctc, fc }, 7))
        }
        0xC8 => {
            need(7)?;
            Ok((Packet::Vmcs(le(&b[2..7]) << 12), 7))
        }
        0x62 | 0xE2 => Ok((
            Packet::Exstop {
                ip: ext & 0x80 != 0,
            },
            2,
        )),
        0xC2 => {
            need(10)?;
            Ok((
                Packet::Mwait {
                    hints: le(&b[2..6]) as u32,
                    ext: le(&b[6..10]) as u32,
                },
                10,
            ))
        }
        0x22 => {
            need(4)?;
            Ok((
                Packet::Pwre(Pwre {
                    state: b[3] >> 4,
                    sub_state: b[3] & 0xF,
                    flags: b[2],
                }),
                4,
            ))
        }
        0xA2 => {
            need(7)?;
            Ok((
                Packet::Pwrx(Pwrx {
                    last: b[2] >> 4,
                    deepest: b[2] & 0xF,
                    wake: b[3] & 0xF,
                }),
                7,
            ))
        }
        0x13 => {
            need(4)?;
            Ok((
                Packet::Cfe {
                    kind: b[2] & 0x1F,
                    vector: b[3],
                    ip: b[2] & 0x80 != 0,
                },
                4,
            ))
        }
        0x53 => {
            need(11)?;
            Ok((
                Packet::Evd {
                    kind: b[2] & 0x1F,
                    payload: le(&b[3..11]),
                },
                11,
            ))
        }
        0xC3 => {
            need(3)?;
            if b[2] != 0x88 {
                return Err(unknown(b, 3));
            }
            need(11)?;
            Ok((Packet::Mnt(le(&b[3..11])), 11))
        }
        _ if ext & 0x1F == 0x12 => {
            let n = match (ext >> 5) & 0b11 {
                0 => 4,
                1 => 8,
                _ => return Err(PacketErrorKind::ReservedPtwSize(ext)),
            };
            need(2 + n)?;
            Ok((
                Packet::Ptw {
                    payload: le(&b[2..2 + n]),
                    len: n as u8,
                    ip: ext & 0x80 != 0,
                },
                2 + n as u8,
            ))
        }
        _ => Err(unknown(b, 2)),
    }
}

/// CYC (36.4.2.14): five value bits in the first byte above Exp (bit 2), seven in each
/// further byte above its own Exp (bit 0).
#[inline]
fn parse_cyc(b: &[u8], errata: &Errata) -> Result<(Packet, u8), PacketErrorKind> {
    let mut value = (b[0] >> 3) as u64;
    let mut more = b[0] & 0b100 != 0;
    let mut shift = 5u32;
    let mut len = 1usize;
    while more {
        let Some(&x) = b.get(len) else {
            return Err(truncated(len + 1, b.len()));
        };
        len += 1;
        more = x & 1 != 0;
        // A 10th byte would put bits past bit 63 (5 + 9 x 7 = 68).
        if shift + 7 > 64 {
            return Err(PacketErrorKind::CycTooLong);
        }
        value |= ((x >> 1) as u64) << shift;
        shift += 7;
    }
    // SKD007: an overflow may corrupt the OVF that follows a CYC: the CYC gets an Exp
    // bit it should not have and swallows the OVF's escape byte. A 2-byte CYC whose
    // second byte is 02 (value bits 11:5 = 1), followed by f3, is that.
    if errata.skd007 && len == 2 && b[1] == 0x02 && b.get(2) == Some(&0xF3) {
        return Ok((Packet::Ovf, 3));
    }
    Ok((Packet::Cyc(value), len as u8))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(b: &[u8]) -> (Packet, u8) {
        parse(b, &Errata::default()).unwrap()
    }
    fn err(b: &[u8]) -> PacketErrorKind {
        parse(b, &Errata::default()).unwrap_err()
    }

    #[test]
    fn sdm_36_4_2_1_tnt8_stop_bit_gives_length_oldest_first() {
        // 1 B1..B6 0: six bits, B1 oldest (here 1 0 1 1 0 0).
        let (p, n) = one(&[0b1101_1000]);
        assert_eq!(n, 1);
        let Packet::Tnt8(t) = p else { panic!("{p:?}") };
        assert_eq!(t.len, 6);
        let taken: Vec<bool> = (0..6).map(|i| t.taken(i)).collect();
        assert_eq!(taken, [true, false, true, true, false, false]);
        // 0 0 1 B1..B4 0: four bits.
        assert_eq!(
            one(&[0b0011_1010]).0,
            Packet::Tnt8(Tnt {
                bits: 0b1101,
                len: 4
            })
        );
        // The shortest: one bit.
        assert_eq!(one(&[0b100]).0, Packet::Tnt8(Tnt { bits: 0, len: 1 }));
    }

    #[test]
    fn sdm_36_4_2_1_tnt64_stop_bit_in_payload() {
        // 47 bits: stop bit is bit 47 of the 6-byte payload.
        let (p, n) = one(&[0x02, 0xA3, 0x01, 0, 0, 0, 0, 0x80]);
        assert_eq!(n, 8);
        assert_eq!(p, Packet::Tnt64(Tnt { bits: 1, len: 47 }));
        assert_eq!(
            err(&[0x02, 0xA3, 0, 0, 0, 0, 0, 0]),
            PacketErrorKind::EmptyTnt
        );
    }

    #[test]
    fn sdm_36_4_2_2_table_36_18_reserved_ipbytes_are_errors() {
        assert_eq!(err(&[0xAD]), PacketErrorKind::ReservedIpBytes(0xAD));
        assert_eq!(err(&[0xFD, 0, 0]), PacketErrorKind::ReservedIpBytes(0xFD));
        // Reserved before truncated: the size is unknown.
        assert_eq!(err(&[0xB1]), PacketErrorKind::ReservedIpBytes(0xB1));
    }

    #[test]
    fn sdm_36_4_2_2_ip_payload_sizes() {
        for (ipb, n) in [(0u8, 0usize), (1, 2), (2, 4), (3, 6), (4, 6), (6, 8)] {
            let mut b = vec![(ipb << 5) | 0x0D];
            b.extend((1..=n as u8).map(|i| i * 0x11));
            let (p, len) = one(&b);
            assert_eq!(len as usize, 1 + n);
            let ip = p.ip().unwrap();
            assert_eq!(ip.compression.ip_bytes(), ipb);
            assert_eq!(ip.bits, le(&b[1..]));
            if n > 0 {
                assert!(matches!(err(&b[..n]), PacketErrorKind::Truncated { .. }));
            }
        }
    }

    #[test]
    fn opcodes_without_a_packet_are_unknown_at_their_byte() {
        for b in [0x05u8, 0x09, 0x15, 0x39, 0x79, 0xB9, 0xF9, 0xC9] {
            assert!(
                matches!(err(&[b]), PacketErrorKind::UnknownOpcode { len: 1, .. }),
                "{b:#x}"
            );
        }
        assert!(matches!(
            err(&[0x02, 0x04]),
            PacketErrorKind::UnknownOpcode { len: 2, .. }
        ));
        assert!(matches!(
            err(&[0x02, 0xC3, 0x00]),
            PacketErrorKind::UnknownOpcode { len: 3, .. }
        ));
    }

    #[test]
    fn sdm_36_4_2_17_psb_needs_the_whole_pattern() {
        assert_eq!(one(&PSB_BYTES), (Packet::Psb, 16));
        let mut bad = PSB_BYTES;
        bad[9] = 0x83;
        assert_eq!(err(&bad), PacketErrorKind::BadPsb);
        assert_eq!(
            err(&PSB_BYTES[..10]),
            PacketErrorKind::Truncated { need: 16, have: 10 }
        );
    }

    #[test]
    fn sdm_36_4_2_13_tma_reserved_bits_and_skz84() {
        let ok = [0x02, 0x73, 0x34, 0x12, 0x00, 0xFF, 0x01];
        assert_eq!(
            one(&ok),
            (
                Packet::Tma {
                    ctc: 0x1234,
                    fc: 0x1FF
                },
                7
            )
        );
        let bad_fc = [0x02, 0x73, 0x34, 0x12, 0x00, 0xFF, 0x03, 0x00];
        let bad_ctc = [0x02, 0x73, 0x34, 0x12, 0x01, 0xFF, 0x01, 0x00];
        assert_eq!(err(&bad_fc), PacketErrorKind::ReservedTmaBits);
        assert_eq!(err(&bad_ctc), PacketErrorKind::ReservedTmaBits);
        let skz84 = Errata {
            skz84: true,
            ..Errata::default()
        };
        assert_eq!(parse(&bad_fc, &skz84), Ok((Packet::Invalid, 8)));
    }

    #[test]
    fn sdm_36_4_2_14_cyc_variable_length() {
        // Value bits 7:3, Exp bit 2, opcode bits 1:0.
        assert_eq!(one(&[0b1111_1011]), (Packet::Cyc(31), 1));
        // 32 needs two bytes: Exp in byte 0, no Exp in byte 1.
        assert_eq!(one(&[0b0000_0111, 0b0000_0010]), (Packet::Cyc(32), 2));
        assert_eq!(one(&[0xFF, 0xFF, 0xFE]), (Packet::Cyc((1 << 19) - 1), 3));
        assert_eq!(
            err(&[0x07, 0x01]),
            PacketErrorKind::Truncated { need: 3, have: 2 }
        );
        // Nine Exp bytes would need 68 bits.
        assert_eq!(err(&[0xFF; 12]), PacketErrorKind::CycTooLong);
        let mut max = [0xFFu8; 9];
        max[8] = 0xFE;
        assert_eq!(one(&max).1, 9);
    }

    #[test]
    fn skd007_cyc_swallowing_the_ovf_escape() {
        let b = [0x07, 0x02, 0xF3, 0x00];
        assert_eq!(one(&b), (Packet::Cyc(32), 2));
        let e = Errata {
            skd007: true,
            ..Errata::default()
        };
        assert_eq!(parse(&b, &e), Ok((Packet::Ovf, 3)));
        // Not at the end of the bytes, nor with another byte after.
        assert_eq!(parse(&b[..2], &e), Ok((Packet::Cyc(32), 2)));
        assert_eq!(parse(&[0x07, 0x02, 0x00], &e), Ok((Packet::Cyc(32), 2)));
    }

    #[test]
    fn sdm_36_4_2_21_ptw_payload_bytes() {
        assert_eq!(
            one(&[0x02, 0x92, 1, 2, 3, 4]),
            (
                Packet::Ptw {
                    payload: 0x0403_0201,
                    len: 4,
                    ip: true
                },
                6
            )
        );
        assert_eq!(one(&[0x02, 0x32, 1, 2, 3, 4, 5, 6, 7, 8]).1, 10);
        assert_eq!(err(&[0x02, 0x52]), PacketErrorKind::ReservedPtwSize(0x52));
        assert_eq!(err(&[0x02, 0x72]), PacketErrorKind::ReservedPtwSize(0x72));
    }

    #[test]
    fn sdm_36_4_2_8_mode_leaves() {
        assert_eq!(
            one(&[0x99, 0x01]).0,
            Packet::ModeExec(ExecMode {
                csl: true,
                csd: false,
                iflag: false
            })
        );
        assert_eq!(
            one(&[0x99, 0x23]).0,
            Packet::ModeTsx(TsxMode {
                intx: true,
                abort: true
            })
        );
        assert_eq!(err(&[0x99, 0x40]), PacketErrorKind::ReservedModeLeaf(0x40));
    }

    #[test]
    fn sdm_36_4_2_7_pip_cr3_and_nr() {
        // Byte 2: CR3[11:5] in bits 7:1, NR in bit 0.
        let (p, n) = one(&[0x02, 0x43, 0xE1, 0x12, 0x34, 0x56, 0x78, 0x9A]);
        assert_eq!(n, 8);
        assert_eq!(
            p,
            Packet::Pip {
                cr3: 0x9_A785_6341_2E00,
                nr: true
            }
        );
    }

    #[test]
    fn every_one_byte_and_escape_opcode_parses_or_fails_without_panic() {
        assert_eq!(
            parse(&[], &Errata::default()),
            Err(PacketErrorKind::Truncated { need: 1, have: 0 })
        );
        let e = Errata {
            skd007: true,
            skz84: true,
            ..Errata::default()
        };
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                for len in 1..=4 {
                    let bytes = [a, b, 0x88, 0xF3];
                    if let Ok((_, n)) = parse(&bytes[..len], &e) {
                        assert!(n as usize <= len, "{a:#x} {b:#x} {len}");
                    }
                }
            }
        }
    }
}
