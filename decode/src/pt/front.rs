//! Intel PT packets to flow items: the packet-binding rules of SDM 36.4 (which packet an
//! event belongs to), as libipt's event decoder applies them, on a state small enough to
//! travel with every chunk.
//!
//! Most Intel PT packets bind to a later one. Packets that wait are queued (at most
//! [`QUEUE`], like libipt's event queue) with the packets they bind to:
//!
//! | waits | for | becomes |
//! |---|---|---|
//! | MODE.Exec (36.4.2.8) | the next TIP, TIP.PGE, TIP.PGD or bound FUP | [`Bound::ExecMode`] at its IP (none at a TIP.PGD) |
//! | MODE.TSX (36.4.2.8) | the next FUP (an abort's FUP is also an interrupt's) | [`Bound::Tsx`] at the FUP's IP |
//! | OVF (36.4.2.16) | its FUP, if tracing was on when it resolved | [`Raw::Ovf`] with the FUP's IP |
//! | PTW with IP (36.4.2.21) | the next FUP | [`Bound::Ptwrite`] at the PTWRITE instruction |
//! | EXSTOP with IP, MWAIT (36.4.2.22-23) | the next FUP | [`Bound::Exstop`], [`Bound::Mwait`] |
//! | PWRE (36.4.2.24) | the PWRX | [`Bound::Pwre`] (every one since the last PWRX, in order), then [`Bound::Pwrx`] |
//!
//! A PIP or VMCS outside a PSB+ (36.4.2.7, 36.4.2.15), and a PTW without IP, bind to an
//! instruction rather than a packet: they go to the walker at once as [`Raw::At`] without
//! IP ([`Bound::Paging`], [`Bound::Vmcs`], [`Bound::Ptwrite`]), which walks on to the next
//! MOV CR3 or far branch, VMPTRLD or far branch, PTWRITE ([`Bound::binds_to`]). Right
//! after an unbound FUP (`State::async_fup`) a PIP or VMCS is part of that asynchronous
//! transfer instead, a fact reported with it.
//!
//! A FUP that no queued packet binds ("bound") is an asynchronous event: the walker pairs
//! it with the TIP after it (an interrupt) or the TIP.PGD (a disable) ([`FupRole::Async`]).
//! A PSB+ (PSB .. PSBEND) gives the state at the PSB: Last IP is reset (36.4.2.2), its FUP
//! says where execution is when tracing is on, MODE.Exec the mode ([`Raw::Status`]). A
//! chunk cut at a PSB therefore knows everything but the return stack and CR3-dependent
//! images.
//!
//! Errata, applied when the processor has them ([`Errata`]): BDM70 (a FUP in PSB+ before a
//! TIP.PGE does not mean tracing is on), SKD010 (the FUP after an OVF may be lost: resume
//! at a later FUP, TIP or PSB+), APL11 (an OVF may be followed by a TIP.PGD), APL12 (an
//! OVF's FUP may come while tracing is off). Their look-aheads read at most
//! [`crate::flow::MAX_LOOKAHEAD_BYTES`] past the OVF or FUP, over the whole stream, so a
//! chunk and a sequential decode decide alike.

use std::fmt;

use tracemill_schemas::{EventKind, TimingKind};

use super::cpu::Errata;
use super::last_ip::LastIp;
use super::packet::{AddressMode, ExecMode, Packet, PacketErrorKind, Parsed};
use super::sync::PacketReader;
use crate::flow::MAX_LOOKAHEAD_BYTES;
use crate::front::{cfe_kind, Bits, Bound, Facts, Front, FupRole, Raw, TntBits, Vmexit};
use crate::stream::{Lost, TraceStream};

/// Packets that can wait for the packet they bind to at once (libipt's queue holds 14).
pub const QUEUE: usize = 8;

/// What a queued packet binds to (a bit set, as libipt's `evb_*`).
mod bind {
    /// The next TIP, TIP.PGE or TIP.PGD.
    pub const TIP: u8 = 1 << 0;
    /// The next FUP, which it does not consume: an abort's FUP is also an interrupt's.
    pub const FUP: u8 = 1 << 1;
    /// The next FUP, which it consumes.
    pub const FUP_BOUND: u8 = 1 << 2;
    /// The next EXSTOP (an MWAIT).
    pub const EXSTOP: u8 = 1 << 3;
    /// The next PWRX (a PWRE).
    pub const PWRX: u8 = 1 << 4;
    /// The next CFE (the EVDs of an Event Trace event: CR2, VMX exit reason and
    /// qualification).
    pub const CFE: u8 = 1 << 5;
    /// Bound already, with its IP: handed out next, in order.
    pub const READY: u8 = 1 << 7;
}

/// A queued packet's meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    /// An event at the binding packet's IP.
    At(Bound),
    /// A MODE.Exec that changed nothing: it still binds a FUP (libipt's "ignore" event).
    Ignore,
    /// An OVF waiting for its FUP.
    Ovf,
    /// (Ready only) an unbound FUP: an asynchronous event's source.
    Fup,
}

/// One queue slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    bind: u8,
    /// Bound to a packet with an IP, but reported without it (CFE RSM, SIPI).
    no_ip: bool,
    ev: Ev,
    /// The binding packet's IP (ready slots), and its offset (the item's).
    ip: Option<u64>,
    off: u64,
}

/// The Intel PT front end's state: it travels with the walker's state across chunk seams
/// and look-aheads (a few hundred bytes, copied, never allocated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    pub last_ip: LastIp,
    queue: [Option<Slot>; QUEUE],
    /// The last MODE.Exec's CS.L and CS.D (changes are events; repeats are not).
    exec: Option<(bool, bool)>,
    /// The last MODE.Exec's IF (with Event Trace on, changes are events).
    iflag: Option<bool>,
    /// Tracing is on as far as the packets say (TIP.PGE .. TIP.PGD, PSB+ with FUP).
    pub enabled: bool,
    /// An unbound FUP was handed out and the flow packet after it is not read yet: a PIP
    /// or VMCS now is part of that asynchronous transfer (36.4.2.7, "Application" 1) and
    /// applies at the TIP's IP.
    async_fup: bool,
    /// The stream's break ([`crate::stream::Break`]) at this offset was reported and its
    /// PSB is being read; `u64::MAX` otherwise.
    broken: u64,
}

impl Default for State {
    fn default() -> Self {
        State {
            last_ip: LastIp::new(),
            queue: [None; QUEUE],
            exec: None,
            iflag: None,
            enabled: false,
            async_fup: false,
            broken: u64::MAX,
        }
    }
}

impl State {
    fn push(&mut self, bind: u8, ev: Ev, ip: Option<u64>, off: u64) -> Result<(), PtError> {
        match self.queue.iter_mut().find(|s| s.is_none()) {
            Some(s) => {
                *s = Some(Slot {
                    bind,
                    no_ip: false,
                    ev,
                    ip,
                    off,
                });
                Ok(())
            }
            None => Err(PtError::TooManyPending),
        }
    }

    /// Remove the oldest slot matching `mask` (slots stay in arrival order).
    fn take(&mut self, mask: u8) -> Option<Slot> {
        let i = self
            .queue
            .iter()
            .position(|s| s.is_some_and(|s| s.bind & mask != 0))?;
        let s = self.queue[i];
        self.queue.copy_within(i + 1.., i);
        self.queue[QUEUE - 1] = None;
        s
    }

    fn any(&self, mask: u8) -> bool {
        self.queue.iter().flatten().any(|s| s.bind & mask != 0)
    }

    /// Every slot matching `mask` is bound to a packet at `ip`, in order.
    fn ready_all(&mut self, mask: u8, ip: Option<u64>, off: u64) {
        for s in self.queue.iter_mut().flatten() {
            if s.bind & mask != 0 && s.bind & bind::READY == 0 {
                s.bind = bind::READY;
                s.ip = ip;
                s.off = off;
            }
        }
    }

    fn clear(&mut self) {
        self.queue = [None; QUEUE];
        self.async_fup = false;
    }

    /// Packets were lost (an overflow, bytes lost before a PSB): Last IP, whether tracing
    /// is on, the execution mode and IF are unknown until packets say them again.
    fn forget(&mut self) {
        self.last_ip = LastIp::new();
        self.enabled = false;
        self.exec = None;
        self.iflag = None;
    }

    /// The event the EVDs read so far wait to give their CFE (libipt's `evb_cfe`).
    fn cfe_slot(&mut self) -> Option<&mut Slot> {
        self.queue
            .iter_mut()
            .flatten()
            .find(|s| s.bind & bind::CFE != 0)
    }
}

/// CFE types (libipt `pt_cfe_type`).
mod cfe {
    pub const INTR: u8 = 0x01;
    pub const RSM: u8 = 0x04;
    pub const SIPI: u8 = 0x05;
    pub const VMEXIT: u8 = 0x08;
    pub const VMEXIT_INTR: u8 = 0x09;
}

/// How an Event Trace event binds (libipt's event decoder, by CFE type): to the FUP
/// after it, which it consumes (CFE.IP set); to the next FUP, which it leaves to an
/// asynchronous event (tracing on, for the types that come with one); or nowhere (tracing
/// off, or a type reported where it is read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CfeBind {
    /// With IP: the FUP it consumes; without: reported where it is read.
    IpOrHere,
    /// With IP: the FUP it consumes; without, tracing on: the next FUP; else here.
    IpOrFup,
    /// Never with IP (an error); tracing on: the next FUP, its IP not reported; else here.
    FupNoIp,
}

fn cfe_bind(kind: u8) -> CfeBind {
    match kind {
        cfe::RSM | cfe::SIPI => CfeBind::FupNoIp,
        // INTR, VMEXIT, SMI, INIT, UINTR, SWINTR
        0x01 | 0x03 | 0x06 | 0x08 | 0x09 | 0x0C | 0x0E => CfeBind::IpOrFup,
        // IRET, VMENTRY, SHUTDOWN, UIRET, SYSCALL
        _ => CfeBind::IpOrHere,
    }
}

/// Why the front end stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PtError {
    /// Bytes that are no packet (the reader resumes at the next PSB).
    Packet(PacketErrorKind),
    /// A PSB+ without its PSBEND, or with a packet that has no place in it.
    PsbPlus,
    /// More packets wait for the packet they bind to than [`QUEUE`].
    TooManyPending,
    /// A packet that cannot come where it is (libipt's `pte_bad_context`): an EVD or a
    /// CFE that does not fit the EVDs before it.
    BadContext,
    /// A packet whose fields contradict each other (libipt's `pte_bad_packet`): a CFE
    /// RSM or SIPI with IP, a TRIG with IP but an instruction count.
    BadPacket,
    /// Trace bytes were lost right before this PSB ([`crate::stream::Break`]).
    Lost(Lost),
}

impl fmt::Display for PtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PtError::Packet(k) => k.fmt(f),
            PtError::PsbPlus => f.write_str("a PSB+ without PSBEND, or with a packet out of place"),
            PtError::TooManyPending => write!(
                f,
                "more than {QUEUE} packets wait for the packet they bind to"
            ),
            PtError::BadContext => f.write_str("unexpected packet context"),
            PtError::BadPacket => f.write_str("unknown packet"),
            PtError::Lost(l) => l.fmt(f),
        }
    }
}

fn bits_of(m: &ExecMode) -> Bits {
    match m.address_mode() {
        AddressMode::Bits16 => Bits::B16,
        AddressMode::Bits32 => Bits::B32,
        // CS.L and CS.D both set is "N/A" (Table 36-26); libipt decodes it as 64-bit.
        AddressMode::Bits64 | AddressMode::Invalid => Bits::B64,
    }
}

/// Intel PT packets to flow items.
pub struct PtFront<'a> {
    stream: &'a TraceStream<'a>,
    reader: PacketReader<'a>,
    errata: Errata,
    /// MODE.Exec's IF changes are events (Event Trace on).
    iflags: bool,
}

impl<'a> PtFront<'a> {
    pub fn new(stream: &'a TraceStream<'a>, start: u64, end: u64, errata: Errata) -> Self {
        PtFront {
            stream,
            reader: PacketReader::new(stream, start, end, errata),
            errata,
            iflags: false,
        }
    }

    /// Report MODE.Exec's IF changes ([`Bound::Iflags`]): the trace was recorded with
    /// Event Trace on, where the bit is meaningful.
    pub fn with_iflags(mut self, on: bool) -> Self {
        self.iflags = on;
        self
    }

    /// A reader for looking ahead from `pos`: over the whole stream (a look-ahead decides
    /// the same wherever the chunk ends), stopped by the caller at
    /// [`MAX_LOOKAHEAD_BYTES`] past `from`.
    ///
    /// A copy of the front's reader, so that it knows where the next PSB is as far as the
    /// reader proved it: a fresh reader searched from `pos` to the next PSB at its first
    /// packet, and an OVF looks ahead at every one, so OVFs back to back without a PSB
    /// were quadratic (1 MiB of them took 25 s, 4 MiB 353 s; `benches/scripts/hostile.sh`).
    fn peeker(&self, pos: u64) -> PacketReader<'a> {
        let mut r = self.reader.clone();
        r.seek(pos);
        // Not past bytes that were lost: what comes after them says nothing of before.
        r.set_end(self.stream.break_after(pos).unwrap_or(self.stream.len()));
        r
    }

    /// The timing packets go to `facts`; true when `p` was one.
    fn timing(p: &Parsed, facts: &mut Facts) -> bool {
        let off = p.offset;
        match p.packet {
            Packet::Tsc(v) => facts.timing(off, TimingKind::Tsc, v, None),
            Packet::Tma { ctc, fc } => {
                facts.timing(off, TimingKind::Tma, ctc as u64 | (fc as u64) << 16, None)
            }
            Packet::Mtc(v) => facts.timing(off, TimingKind::Mtc, v as u64, None),
            Packet::Cyc(v) => facts.timing(off, TimingKind::Cyc, v, None),
            Packet::Cbr(r) => {
                facts.timing(off, TimingKind::Cbr, r as u64, Some(r));
                // Kept by the emitter only when the ratio changes (as RTIT's STS).
                facts.event(off, EventKind::FreqChange, None, r.to_string());
            }
            _ => return false,
        }
        true
    }

    /// PIP and VMCS: the address space (CR3 for image lookups), as `paging` events.
    fn paging(p: &Parsed, facts: &mut Facts) -> bool {
        match p.packet {
            Packet::Pip { cr3, nr } => {
                facts.cr3(Some(cr3));
                let detail = format!("cr3={cr3:#x} nr={}", nr as u8);
                facts.event(p.offset, EventKind::Paging, None, detail);
            }
            Packet::Vmcs(base) => {
                facts.event(p.offset, EventKind::Paging, None, format!("vmcs={base:#x}"));
            }
            _ => return false,
        }
        true
    }

    /// MNT: a maintenance packet, an event where it is read (libipt reports it at once,
    /// in a PSB+ too).
    fn maintenance(off: u64, payload: u64, facts: &mut Facts) {
        facts.event(off, EventKind::Maintenance, None, format!("{payload:#x}"));
    }

    /// After a PSB: the PSB+ (36.4.2.17-18) up to its PSBEND, or an OVF in its place.
    fn psb_plus(&mut self, st: &mut State, facts: &mut Facts, psb: u64) -> Raw<PtError> {
        st.last_ip.reset();
        st.enabled = false;
        // Nothing binds across a PSB: whatever waited is lost (libipt: an error).
        st.clear();
        // Nor is the last MODE.Exec kept (36.4.2.17: no state is retained across a PSB;
        // 36.4.2.8: a MODE.Exec goes out when tracing resumes if none was sent since the
        // last PSB): a PSB+ without one (tracing off) leaves the mode unknown, as at a
        // chunk's start, so the sequential decode and a chunk starting here agree.
        st.exec = None;
        st.iflag = None;
        let mut fup: Option<Option<u64>> = None;
        let mut bits = None;
        let mut tsx = None;
        loop {
            let p = match self.reader.next_packet() {
                // Cut off by the end of the range (the next chunk's PSB) or of the trace:
                // reported there, after the PSB+'s packets read so far (events in offset
                // order; a sequential decode reports a PSB+ cut by the next PSB at that
                // PSB, below). Fuzz finding `psb-plus-cut-off`.
                None => {
                    return Raw::Error {
                        off: self.reader.pos().max(psb),
                        e: PtError::PsbPlus,
                    }
                }
                Some(Err(e)) => {
                    return Raw::Error {
                        off: e.offset,
                        e: PtError::Packet(e.kind),
                    }
                }
                Some(Ok(p)) => p,
            };
            if Self::timing(&p, facts) || Self::paging(&p, facts) {
                continue;
            }
            match p.packet {
                Packet::Pad | Packet::Invalid => {}
                Packet::Mnt(v) => Self::maintenance(p.offset, v, facts),
                Packet::Fup(pl) => {
                    // BDM70: a FUP (and MODE.Exec) in a PSB+ right before a TIP.PGE do not
                    // mean tracing is on.
                    let on = pl.compression != super::packet::IpCompression::Suppressed
                        && !(self.errata.bdm70 && self.tip_pge_follows());
                    let ip = st.last_ip.update(&pl);
                    fup = Some(if on { ip } else { None });
                }
                Packet::ModeExec(m) => {
                    st.exec = Some((m.csl, m.csd));
                    st.iflag = Some(m.iflag);
                    bits = Some(bits_of(&m));
                }
                Packet::ModeTsx(m) => {
                    // The transaction state at the PSB (36.4.2.17), applied with it.
                    tsx = Some(m.intx && !m.abort);
                }
                Packet::PsbEnd | Packet::Ovf => {
                    let ip = fup.flatten();
                    st.enabled = ip.is_some();
                    if p.packet == Packet::Ovf {
                        // An OVF ends a PSB+ as PSBEND does; the overflow comes next.
                        self.overflow(st, facts, p.offset);
                    } else if let Some(intx) = tsx {
                        // Where the PSB+ puts the walk (or at once, tracing off).
                        let _ = st.push(bind::READY, Ev::At(Bound::InTx(intx)), ip, p.offset);
                    }
                    return Raw::Status {
                        ip,
                        bits,
                        off: p.offset,
                    };
                }
                _ => {
                    if p.packet == Packet::Psb {
                        // A PSB ends the broken PSB+ and starts the next (36.4.2.17): read
                        // again, as a chunk starting there reads it (fuzz finding
                        // `psb-inside-psb-plus`).
                        self.reader.seek(p.offset);
                    }
                    return Raw::Error {
                        off: p.offset,
                        e: PtError::PsbPlus,
                    };
                }
            }
        }
    }

    /// BDM70: does a TIP.PGE follow the PSB+ with only PSB+ and timing packets between?
    fn tip_pge_follows(&self) -> bool {
        let from = self.reader.pos();
        let mut r = self.peeker(from);
        while let Some(Ok(p)) = r.next_packet() {
            if p.offset > from + MAX_LOOKAHEAD_BYTES {
                return false;
            }
            match p.packet {
                Packet::TipPge(_) => return true,
                Packet::Pad
                | Packet::Tsc(_)
                | Packet::Cbr(_)
                | Packet::PsbEnd
                | Packet::Pip { .. }
                | Packet::ModeExec(_)
                | Packet::ModeTsx(_)
                | Packet::Vmcs(_)
                | Packet::Tma { .. }
                | Packet::Mtc(_)
                | Packet::Cyc(_)
                | Packet::Mnt(_) => {}
                _ => return false,
            }
        }
        false
    }

    /// An OVF at `off` (36.4.2.16): packets were lost. If tracing was on when the
    /// overflow resolved, a FUP gives the IP (it binds the OVF); if off, a TIP.PGE comes
    /// later, and the overflow stands alone. Decides which by looking ahead, with the
    /// errata that break the rule; the result goes into the queue as ready items.
    fn overflow(&mut self, st: &mut State, facts: &mut Facts, off: u64) {
        // What waited is either reported without an IP (tracing was off) or lost.
        let was_enabled = st.enabled;
        let mut i = 0;
        while i < QUEUE {
            match st.queue[i] {
                Some(s) if s.bind & bind::READY == 0 => {
                    if !was_enabled && matches!(s.ev, Ev::At(_)) && s.bind & bind::CFE == 0 {
                        // Bound by the OVF: reported there, after whatever the walker
                        // made of the packets read since it waited (events in offset
                        // order; fuzz finding `mode-before-ovf`).
                        st.queue[i] = Some(Slot {
                            bind: bind::READY,
                            ip: None,
                            off,
                            ..s
                        });
                        i += 1;
                    } else {
                        st.queue.copy_within(i + 1.., i);
                        st.queue[QUEUE - 1] = None;
                    }
                }
                _ => i += 1,
            }
        }
        st.forget();
        match self.find_ovf_fup(off) {
            OvfNext::Fup => {
                if self.errata.apl12 && self.apl12(off) {
                    // The FUP came with tracing off: the overflow stands alone, and the
                    // FUP is skipped.
                    self.skip_to(facts, true, |p| matches!(p.packet, Packet::Fup(_)));
                    let _ = st.push(bind::READY, Ev::Ovf, None, off);
                    return;
                }
                let _ = st.push(bind::FUP_BOUND, Ev::Ovf, None, off);
            }
            next => {
                if self.errata.skd010 && self.skd010(st, facts, off) {
                    return;
                }
                if self.errata.apl11 && next == OvfNext::BadContext && self.apl11(facts, off) {
                    let _ = st.push(bind::READY, Ev::Ovf, None, off);
                    return;
                }
                // Tracing was off when the overflow resolved (or, with trace of a traced
                // context next and no FUP saying where, the walker finds its place again
                // at the next resume point): the overflow stands alone.
                let _ = st.push(bind::READY, Ev::Ovf, None, off);
            }
        }
    }

    /// What follows an OVF: its FUP, a packet of a disabled context, or one that needs
    /// tracing on (libipt's `pt_evt_find_ovf_fup`).
    fn find_ovf_fup(&self, off: u64) -> OvfNext {
        let mut r = self.peeker(self.reader.pos());
        loop {
            let p = match r.next_packet() {
                None => return OvfNext::Standalone,
                Some(Err(_)) => return OvfNext::Standalone,
                Some(Ok(p)) => p,
            };
            if p.offset > off + MAX_LOOKAHEAD_BYTES {
                return OvfNext::Standalone;
            }
            match p.packet {
                Packet::Fup(_) => return OvfNext::Fup,
                Packet::Pad
                | Packet::Mnt(_)
                | Packet::Cbr(_)
                | Packet::Tsc(_)
                | Packet::Tma { .. }
                | Packet::Mtc(_)
                | Packet::Cyc(_)
                | Packet::Invalid => {}
                Packet::PsbEnd
                | Packet::Tip(_)
                | Packet::TipPgd(_)
                | Packet::Tnt8(_)
                | Packet::Tnt64(_) => return OvfNext::BadContext,
                _ => return OvfNext::Standalone,
            }
        }
    }

    /// Move on to just past the first packet from here that `stop` accepts, reporting the
    /// timing packets on the way (the rest is lost with the overflow). The move may pass
    /// the end of the reader's range (a recovery point in the next chunk): the reader then
    /// reads nothing more, and the next stitch starts past it, as the sequential decode
    /// does. `inclusive`: the packet itself is skipped too.
    fn skip_to(&mut self, facts: &mut Facts, inclusive: bool, stop: impl Fn(&Parsed) -> bool) {
        let mut r = self.peeker(self.reader.pos());
        let from = self.reader.pos();
        while let Some(Ok(p)) = r.next_packet() {
            if p.offset > from + MAX_LOOKAHEAD_BYTES {
                break;
            }
            if stop(&p) {
                let to = if inclusive { r.pos() } else { p.offset };
                self.reader.seek(to);
                return;
            }
            Self::timing(&p, facts);
        }
    }

    /// APL12: after the OVF's FUP, does the trace say tracing is off (a TIP.PGE, a
    /// TraceStop, or a PSB+ without FUP before any packet of a traced context)?
    fn apl12(&self, off: u64) -> bool {
        let mut r = self.peeker(self.reader.pos());
        let mut past_fup = false;
        while let Some(Ok(p)) = r.next_packet() {
            if p.offset > off + MAX_LOOKAHEAD_BYTES {
                return false;
            }
            if !past_fup {
                past_fup = matches!(p.packet, Packet::Fup(_));
                continue;
            }
            match p.packet {
                Packet::Tnt8(_)
                | Packet::Tnt64(_)
                | Packet::Tip(_)
                | Packet::TipPgd(_)
                | Packet::PsbEnd
                | Packet::Ovf => return false,
                Packet::Psb => return !header_has_fup(&mut r),
                Packet::Stop | Packet::TipPge(_) => return true,
                _ => {}
            }
        }
        false
    }

    /// APL11: an OVF followed by a TIP.PGD (only timing packets between): tracing was
    /// off. Skip to after the TIP.PGD; true when found.
    fn apl11(&mut self, facts: &mut Facts, off: u64) -> bool {
        let mut r = self.peeker(self.reader.pos());
        while let Some(Ok(p)) = r.next_packet() {
            if p.offset > off + MAX_LOOKAHEAD_BYTES {
                return false;
            }
            match p.packet {
                Packet::TipPgd(_) => {
                    self.skip_to(facts, true, |p| matches!(p.packet, Packet::TipPgd(_)));
                    return true;
                }
                Packet::Tsc(_)
                | Packet::Cbr(_)
                | Packet::Tma { .. }
                | Packet::Mtc(_)
                | Packet::Cyc(_)
                | Packet::Pad
                | Packet::Mnt(_)
                | Packet::Cfe { .. }
                | Packet::Evd { .. }
                | Packet::Trig { .. } => {}
                _ => return false,
            }
        }
        false
    }

    /// SKD010: the FUP after an OVF may have been lost. If the packets that follow show
    /// tracing on, resume at the first that says where (a FUP, a TIP, a PSB+'s FUP); if a
    /// TIP.PGD comes first, tracing went off: resume after it. `None`: the erratum does
    /// not apply (the overflow stands alone).
    fn skd010(&mut self, st: &mut State, facts: &mut Facts, off: u64) -> bool {
        self.skd010_at(st, facts, off).is_some()
    }

    fn skd010_at(&mut self, st: &mut State, facts: &mut Facts, off: u64) -> Option<()> {
        let mut r = self.peeker(self.reader.pos());
        let mut tsx: Option<Bound> = None;
        let target = loop {
            let p = match r.next_packet() {
                Some(Ok(p)) => p,
                _ => return None,
            };
            if p.offset > off + MAX_LOOKAHEAD_BYTES {
                return None;
            }
            match p.packet {
                Packet::TipPge(_) | Packet::Tnt8(_) | Packet::Tnt64(_) => return None,
                Packet::TipPgd(_) => break (p, None),
                Packet::Fup(pl) | Packet::Tip(pl) => break (p, Some(pl)),
                Packet::Psb => {
                    // Tracing is on if and only if the PSB+ has a FUP: resume at it.
                    let mut h = r.clone();
                    let fup = header_fup(&mut h)?;
                    break (p, Some(fup));
                }
                Packet::ModeTsx(m) => {
                    if tsx.is_some() {
                        return None;
                    }
                    tsx = Some(Bound::Tsx {
                        intx: m.intx,
                        abort: m.abort,
                    });
                }
                Packet::Stop | Packet::Ovf | Packet::PsbEnd | Packet::Mwait { .. } => return None,
                Packet::Exstop { ip } | Packet::Ptw { ip, .. } | Packet::Cfe { ip, .. } if ip => {
                    return None
                }
                Packet::Invalid => return None,
                _ => {}
            }
        };
        let (p, pl) = target;
        // Move to the recovery point: timing packets on the way count, the rest is lost
        // with the overflow. A PSB is read again, normally; a FUP, TIP or TIP.PGD is
        // where tracing resumes (or stops) and is passed.
        let at = p.offset;
        self.skip_to(facts, p.packet != Packet::Psb, |q| q.offset == at);
        // The overflow is reported at the recovery point, after the timing packets counted
        // on the way (events in offset order; fuzz finding `skd010-timing-before-ovf`).
        match pl {
            None => {
                let _ = st.push(bind::READY, Ev::Ovf, None, at);
            }
            Some(pl) => {
                let ip = st.last_ip.update(&pl);
                st.enabled = true;
                let _ = st.push(bind::READY, Ev::Ovf, ip, at);
                if let (Some(t), Packet::Fup(_)) = (tsx, p.packet) {
                    let _ = st.push(bind::READY, Ev::At(t), ip, p.offset);
                }
                if p.packet == Packet::Psb {
                    st.last_ip = LastIp::new();
                }
            }
        }
        Some(())
    }

    /// One packet outside a PSB+ that is not a timing packet: a flow item, or nothing yet
    /// (it waits for the packet it binds to, or was only a fact).
    fn on_packet(
        &mut self,
        st: &mut State,
        facts: &mut Facts,
        p: Parsed,
    ) -> Result<Option<Raw<PtError>>, PtError> {
        let off = p.offset;
        if st.async_fup
            && matches!(
                p.packet,
                Packet::Tnt8(_)
                    | Packet::Tnt64(_)
                    | Packet::Tip(_)
                    | Packet::TipPge(_)
                    | Packet::TipPgd(_)
                    | Packet::Fup(_)
                    | Packet::Ovf
                    | Packet::Psb
                    | Packet::Stop
            )
        {
            // The transfer's flow packet (or one that ends its chance of having one).
            st.async_fup = false;
        }
        match p.packet {
            Packet::Pad | Packet::Invalid | Packet::PsbEnd => Ok(None),
            Packet::Mnt(v) => {
                Self::maintenance(off, v, facts);
                Ok(None)
            }
            Packet::Psb => {
                if let Some(b) = self.stream.break_at(off).filter(|_| st.broken != off) {
                    // Bytes were lost right before this PSB: what waited for a packet is
                    // lost with them, and the error comes first; then the PSB, again.
                    st.clear();
                    st.forget();
                    st.broken = off;
                    facts.lost_at_psb = true;
                    self.reader.seek(off);
                    return Ok(Some(Raw::Error {
                        off,
                        e: PtError::Lost(b.lost),
                    }));
                }
                st.broken = u64::MAX;
                facts.event(off, EventKind::Psb, None, String::new());
                Ok(Some(self.psb_plus(st, facts, off)))
            }
            Packet::Pip { .. } | Packet::Vmcs(_) if st.async_fup => {
                // Part of the asynchronous transfer whose FUP came before: reported with
                // it (the walker holds the CR3 back until the FUP's IP).
                Self::paging(&p, facts);
                Ok(None)
            }
            // Otherwise bound to the next MOV CR3, VMPTRLD or far branch (36.4.2.7,
            // 36.4.2.15), which the walker finds in the code; at once if tracing is off.
            Packet::Pip { cr3, nr } => Ok(Some(Raw::At {
                ip: None,
                off,
                what: Bound::Paging { cr3, nr },
            })),
            Packet::Vmcs(base) => Ok(Some(Raw::At {
                ip: None,
                off,
                what: Bound::Vmcs { base },
            })),
            Packet::Tnt8(t) | Packet::Tnt64(t) => Ok(Some(Raw::Tnt {
                tnt: TntBits {
                    bits: t.bits,
                    len: t.len,
                },
                off,
            })),
            Packet::Tip(pl) => {
                let ip = st.last_ip.update(&pl);
                st.ready_all(bind::TIP, ip, off);
                Ok(Some(Raw::Tip {
                    ip,
                    off,
                    anchor: true,
                }))
            }
            Packet::TipPge(pl) => {
                let ip = st.last_ip.update(&pl);
                st.enabled = true;
                // The enable first, then what binds to its IP (libipt's order).
                st.ready_all(bind::TIP, ip, off);
                Ok(Some(Raw::Pge { ip, off }))
            }
            Packet::TipPgd(pl) => {
                let ip = st.last_ip.update(&pl);
                st.enabled = false;
                // Tracing is off where they apply: no IP.
                st.ready_all(bind::TIP, None, off);
                Ok(Some(Raw::TipPgd { ip, off }))
            }
            Packet::Fup(pl) => {
                let ip = st.last_ip.update(&pl);
                if st.any(bind::FUP_BOUND) {
                    // Bound: the waiting packets take the FUP's IP and consume it.
                    st.ready_all(bind::FUP | bind::FUP_BOUND, ip, off);
                    if st
                        .queue
                        .iter()
                        .flatten()
                        .any(|s| s.ev == Ev::Ovf && s.bind == bind::READY)
                    {
                        st.enabled = true;
                    }
                    Ok(None)
                } else {
                    // An asynchronous event at the FUP's IP, after any abort that
                    // names it.
                    st.ready_all(bind::FUP, ip, off);
                    st.async_fup = true;
                    st.push(bind::READY, Ev::Fup, ip, off).map(|_| None)
                }
            }
            Packet::ModeExec(m) => {
                let changed = st.exec != Some((m.csl, m.csd));
                st.exec = Some((m.csl, m.csd));
                // With Event Trace on, an IF change is an event of its own, after the
                // mode's (libipt's order), bound alike.
                let if_changed = self.iflags && st.iflag != Some(m.iflag);
                st.iflag = Some(m.iflag);
                let b = bind::TIP | bind::FUP_BOUND;
                if changed {
                    st.push(b, Ev::At(Bound::ExecMode(bits_of(&m))), None, off)?;
                }
                if if_changed {
                    st.push(b, Ev::At(Bound::Iflags(m.iflag)), None, off)?;
                }
                if !changed && !if_changed {
                    st.push(b, Ev::Ignore, None, off)?;
                }
                Ok(None)
            }
            Packet::ModeTsx(m) => {
                let what = Bound::Tsx {
                    intx: m.intx,
                    abort: m.abort,
                };
                if st.enabled {
                    let b = if m.abort { bind::FUP } else { bind::FUP_BOUND };
                    st.push(b, Ev::At(what), None, off).map(|_| None)
                } else {
                    Ok(Some(Raw::At {
                        ip: None,
                        off,
                        what,
                    }))
                }
            }
            Packet::Ovf => {
                self.overflow(st, facts, off);
                Ok(None)
            }
            Packet::Stop => Ok(Some(Raw::Stop { off })),
            Packet::Ptw { payload, len, ip } => {
                let what = Bound::Ptwrite {
                    payload,
                    bytes: len,
                };
                if ip {
                    st.push(bind::FUP_BOUND, Ev::At(what), None, off)
                        .map(|_| None)
                } else {
                    Ok(Some(Raw::At {
                        ip: None,
                        off,
                        what,
                    }))
                }
            }
            Packet::Exstop { ip } => {
                // An MWAIT before it binds where it does.
                let mwait = st.take(bind::EXSTOP);
                let r = if ip {
                    if let Some(m) = mwait {
                        st.push(bind::FUP_BOUND, m.ev, None, m.off)?;
                    }
                    st.push(bind::FUP_BOUND, Ev::At(Bound::Exstop), None, off)
                } else {
                    // Bound here: reported at the EXSTOP, the binding packet, as a FUP-bound
                    // one is at its FUP (events in offset order whatever came between;
                    // fuzz finding `mwait-before-exstop`).
                    if let Some(m) = mwait {
                        st.push(bind::READY, m.ev, None, off)?;
                    }
                    st.push(bind::READY, Ev::At(Bound::Exstop), None, off)
                };
                r.map(|_| None)
            }
            Packet::Mwait { hints, ext } => st
                .push(bind::EXSTOP, Ev::At(Bound::Mwait { hints, ext }), None, off)
                .map(|_| None),
            Packet::Pwre(w) => st
                .push(
                    bind::PWRX,
                    Ev::At(Bound::Pwre {
                        state: w.state,
                        sub_state: w.sub_state,
                        hw: w.flags & 0x08 != 0,
                    }),
                    None,
                    off,
                )
                .map(|_| None),
            Packet::Pwrx(x) => {
                // The PWREs it binds are reported at it, likewise, in order: every PWRE
                // since the last PWRX (a C-state request the processor resolved to another
                // before it woke), as libipt lists them.
                while let Some(w) = st.take(bind::PWRX) {
                    st.push(bind::READY, w.ev, None, off)?;
                }
                st.push(
                    bind::READY,
                    Ev::At(Bound::Pwrx {
                        last: x.last,
                        deepest: x.deepest,
                        wake: x.wake,
                    }),
                    None,
                    off,
                )
                .map(|_| None)
            }
            Packet::Cfe { kind, vector, ip } => Self::cfe(st, off, kind, vector, ip),
            Packet::Evd { kind, payload } => Self::evd(st, off, kind, payload).map(|_| None),
            Packet::Trig {
                trbv,
                ip,
                mult,
                icnt,
            } => {
                let what = Bound::Trig { trbv, mult, icnt };
                if ip {
                    // The FUP after it is the trigger's IP: it needs no count.
                    if icnt != Some(0) {
                        return Err(PtError::BadPacket);
                    }
                    st.push(bind::FUP_BOUND, Ev::At(what), None, off)
                        .map(|_| None)
                } else {
                    // Reported where it is read: `icnt` instructions after the last flow
                    // packet's IP (or the TRIG before), which only tracing has.
                    if icnt.is_some_and(|n| n != 0) && !st.enabled {
                        return Err(PtError::BadPacket);
                    }
                    Ok(Some(Raw::At {
                        ip: None,
                        off,
                        what,
                    }))
                }
            }
            Packet::Cyc(_) => Ok(None),
            Packet::Tsc(_) | Packet::Tma { .. } | Packet::Mtc(_) | Packet::Cbr(_) => Ok(None),
        }
    }

    /// EVD (Event Trace's event data): waits, with the EVDs before it, for the CFE that
    /// it describes (CR2 for an interrupt, the exit reason and qualification for a VM
    /// exit). Two of a kind, or kinds of two events, are a bad context; unknown types
    /// are ignored (libipt `pt_evt_decode_evd`).
    fn evd(st: &mut State, off: u64, kind: u8, payload: u64) -> Result<(), PtError> {
        let waiting = st.cfe_slot().map(|s| s.ev);
        match kind {
            0 => {
                if waiting.is_some() {
                    return Err(PtError::BadContext);
                }
                let what = Bound::Intr {
                    vector: 0,
                    has_cr2: true,
                    cr2: payload,
                };
                st.push(bind::CFE, Ev::At(what), None, off)
            }
            1 | 2 => {
                let mut what = match waiting {
                    None => Bound::Vmexit {
                        vector: 0,
                        has: 0,
                        vmxr: 0,
                        vmxq: 0,
                    },
                    Some(Ev::At(b @ Bound::Vmexit { .. })) => b,
                    Some(_) => return Err(PtError::BadContext),
                };
                let Bound::Vmexit {
                    has, vmxr, vmxq, ..
                } = &mut what
                else {
                    unreachable!()
                };
                let (flag, field) = if kind == 1 {
                    (Vmexit::VMXQ, vmxq)
                } else {
                    (Vmexit::VMXR, vmxr)
                };
                if *has & flag != 0 {
                    return Err(PtError::BadContext);
                }
                *has |= flag;
                *field = payload;
                let what = Ev::At(what);
                match st.cfe_slot() {
                    Some(s) => {
                        s.ev = what;
                        Ok(())
                    }
                    None => st.push(bind::CFE, what, None, off),
                }
            }
            _ => Ok(()),
        }
    }

    /// CFE (Event Trace's control flow event), with the EVDs waiting for it: bound to
    /// the FUP after it, to the next FUP, or reported where it is read, by type
    /// ([`CfeBind`]; libipt `pt_evt_decode_cfe`).
    fn cfe(
        st: &mut State,
        off: u64,
        kind: u8,
        vector: u8,
        ip: bool,
    ) -> Result<Option<Raw<PtError>>, PtError> {
        let waiting = st.take(bind::CFE);
        let what = match (kind, waiting.map(|s| s.ev)) {
            (cfe::INTR, None) => Bound::Intr {
                vector,
                has_cr2: false,
                cr2: 0,
            },
            (cfe::INTR, Some(Ev::At(Bound::Intr { has_cr2, cr2, .. }))) => Bound::Intr {
                vector,
                has_cr2,
                cr2,
            },
            (cfe::VMEXIT | cfe::VMEXIT_INTR, w) => {
                let (has, vmxr, vmxq) = match w {
                    None => (0, 0, 0),
                    Some(Ev::At(Bound::Vmexit {
                        has, vmxr, vmxq, ..
                    })) => (has, vmxr, vmxq),
                    Some(_) => return Err(PtError::BadContext),
                };
                let intr = kind == cfe::VMEXIT_INTR;
                Bound::Vmexit {
                    vector: if intr { vector } else { 0 },
                    has: has | if intr { Vmexit::VECTOR } else { 0 },
                    vmxr,
                    vmxq,
                }
            }
            (_, Some(_)) => return Err(PtError::BadContext),
            (k, None) if cfe_kind(k).is_some() => Bound::Cfe { kind, vector },
            (_, None) => {
                // A type libipt does not know: ignored, but it still consumes its FUP.
                if ip {
                    st.push(bind::FUP_BOUND, Ev::Ignore, None, off)?;
                }
                return Ok(None);
            }
        };
        let here = Raw::At {
            ip: None,
            off,
            what,
        };
        match cfe_bind(kind) {
            CfeBind::FupNoIp if ip => Err(PtError::BadPacket),
            CfeBind::FupNoIp if st.enabled => {
                st.push(bind::FUP, Ev::At(what), None, off)?;
                if let Some(s) = st.queue.iter_mut().flatten().last() {
                    s.no_ip = true;
                }
                Ok(None)
            }
            _ if ip => st
                .push(bind::FUP_BOUND, Ev::At(what), None, off)
                .map(|_| None),
            CfeBind::IpOrFup if st.enabled => {
                st.push(bind::FUP, Ev::At(what), None, off).map(|_| None)
            }
            _ => Ok(Some(here)),
        }
    }

    /// The next ready item, if any.
    fn ready(&mut self, st: &mut State) -> Option<Raw<PtError>> {
        let s = st.take(bind::READY)?;
        Some(match s.ev {
            // Bound to a FUP but reported without its IP: where the walk is.
            Ev::At(what) => Raw::At {
                ip: if s.no_ip { None } else { s.ip },
                off: s.off,
                what,
            },
            Ev::Ovf => Raw::Ovf {
                ip: s.ip,
                off: s.off,
            },
            Ev::Fup => Raw::Fup {
                ip: s.ip,
                off: s.off,
                role: FupRole::Async,
            },
            // An unchanged mode binds a packet but says nothing.
            Ev::Ignore => return self.ready(st),
        })
    }
}

/// What follows an OVF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OvfNext {
    Fup,
    Standalone,
    BadContext,
}

/// Right after a PSB (reader `r` there): the PSB+'s FUP payload, if it has one.
fn header_fup(r: &mut PacketReader<'_>) -> Option<super::packet::IpPayload> {
    while let Some(Ok(p)) = r.next_packet() {
        match p.packet {
            Packet::Fup(pl) => return Some(pl),
            Packet::PsbEnd | Packet::Ovf => return None,
            Packet::ModeExec(_)
            | Packet::ModeTsx(_)
            | Packet::Pip { .. }
            | Packet::Vmcs(_)
            | Packet::Mnt(_)
            | Packet::Tsc(_)
            | Packet::Cbr(_)
            | Packet::Tma { .. }
            | Packet::Mtc(_)
            | Packet::Cyc(_)
            | Packet::Pad
            | Packet::Invalid => {}
            _ => return None,
        }
    }
    None
}

fn header_has_fup(r: &mut PacketReader<'_>) -> bool {
    header_fup(r).is_some()
}

impl Front for PtFront<'_> {
    type State = State;
    type Error = PtError;

    #[inline]
    fn pos(&self) -> u64 {
        self.reader.pos()
    }
    fn end(&self) -> u64 {
        self.reader.end()
    }
    fn set_end(&mut self, end: u64) {
        self.reader.set_end(end)
    }
    fn ends_at_stream_end(&self) -> bool {
        self.reader.ends_at_stream_end()
    }
    fn seek(&mut self, pos: u64, _st: &State) {
        self.reader.seek(pos);
    }
    fn save(&self, _st: &mut State) {}

    fn cut_before_branch(&self, off: u64, e: &PtError) -> bool {
        // A TIP (opcode xxx01101; TIP.PGE, TIP.PGD and FUP are events, and the walk stops
        // at them) or a TNT-64 (02 A3), cut short.
        let cut = matches!(e, PtError::Packet(k) if k.is_truncated());
        let tip = self.stream.byte(off).is_some_and(|b| b & 0x1f == 0x0d);
        let tnt = self.stream.byte(off) == Some(0x02) && self.stream.byte(off + 1) == Some(0xa3);
        cut && (tip || tnt)
    }

    #[inline]
    fn try_tnt(&mut self, st: &mut State) -> Option<(TntBits, u64)> {
        if st.queue[0].is_some() {
            // Something is ready or waiting: the general path keeps the order.
            return None;
        }
        let (t, off) = self.reader.try_tnt()?;
        Some((
            TntBits {
                bits: t.bits,
                len: t.len,
            },
            off,
        ))
    }

    #[inline]
    fn try_tip(&mut self, st: &mut State) -> Option<(Option<u64>, u64)> {
        if st.queue[0].is_some() {
            // Something waits to bind to a TIP: the general path (`on_packet`) binds it.
            return None;
        }
        let (pl, off) = self.reader.try_tip()?;
        Some((st.last_ip.update(&pl), off))
    }

    fn next(&mut self, st: &mut State, facts: &mut Facts) -> Raw<PtError> {
        loop {
            if let Some(r) = self.ready(st) {
                return r;
            }
            if self.reader.pos() > facts.limit {
                return Raw::Limit;
            }
            let p = match self.reader.next_packet() {
                None => return Raw::End,
                Some(Err(e)) => {
                    // The reader resumes at the next PSB, whose PSB+ resets the rest.
                    st.clear();
                    return Raw::Error {
                        off: e.offset,
                        e: PtError::Packet(e.kind),
                    };
                }
                Some(Ok(p)) => p,
            };
            if Self::timing(&p, facts) {
                continue;
            }
            let off = p.offset;
            let r = self.on_packet(st, facts, p);
            match r {
                Ok(Some(raw)) => return raw,
                Ok(None) => {}
                Err(e) => {
                    st.clear();
                    if matches!(e, PtError::BadContext | PtError::BadPacket) {
                        // What the packets around it mean is lost: decoding goes on at the
                        // next PSB, as libipt's does.
                        let to = super::sync::next_psb(self.stream, self.reader.pos());
                        self.reader.seek(to.unwrap_or(self.stream.len()));
                    }
                    return Raw::Error { off, e };
                }
            }
        }
    }
}
