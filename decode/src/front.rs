//! The boundary between a trace format and the shared core.
//!
//! A *front end* ([`Front`]) reads one format's packets and hands the walker
//! ([`crate::flow::Walker`]) format-neutral *flow items* ([`Raw`]): TNT bits, TIPs, FUPs
//! waiting for their TIP, enables, disables, overflows, the state a PSB+ gives, and events
//! bound to an IP. Everything else it reads on the way (PSBs, timing packets, paging) it
//! reports as facts ([`Facts`]). The walker, the block cache, the stitcher, the timeline
//! and the row builder see only these, and the few ways the formats' rules differ are
//! named once in [`Rules`]. A [`Format`] ties a front end to its configuration, its clock
//! and its PSB search; the pipeline picks one per bundle, once, at the top.
//!
//! | rule | RTIT (`crate::rtit`) | Intel PT (`crate::pt`) |
//! |---|---|---|
//! | compressed RET | reads RTIT_LAST_CALL_NLIP ([`RetModel::LastCall`]) | pops a 64-entry stack ([`RetModel::Stack64`]) |
//! | far branch | FUP.FAR (at its NLIP) + TIP ([`FarRule::FupAndTip`]) | TIP alone ([`FarRule::TipOnly`]) |
//! | asynchronous far transfer | FUP.FAR + TIP | FUP + TIP |
//! | disable | FUP.PGD at the IP (+ TIP) | FUP + TIP.PGD, or TIP.PGD alone ([`Raw::TipPgd`]) |
//! | overflow | FUP.BuffOvf with the resume IP | OVF + FUP (resume IP), or OVF alone (disabled) |
//! | deferred TIPs | no | yes ([`Rules::deferred_tips`], SDM 36.4.2.3) |
//! | execution mode | always 64-bit | MODE.Exec ([`Bound::ExecMode`]) |

use std::fmt::{Debug, Display};

use tracemill_schemas::{EventKind, TimingKind};

pub use crate::insn::{BindsTo, Bits};
use crate::piece::TimingFact;
pub use crate::retstack::RetModel;
use crate::rows::EventRow;
use crate::stream::TraceStream;

/// Taken/not-taken bits of one TNT packet: `len` bits, the oldest in bit `len - 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TntBits {
    pub bits: u64,
    pub len: u8,
}

impl TntBits {
    /// A full packet carries a CYC after it in RTIT's cycle-accurate mode (4.2.15).
    pub fn len(&self) -> u8 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// What a FUP pairs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FupRole {
    /// A far transfer from the FUP's IP; a TIP with the destination follows (RTIT
    /// FUP.FAR).
    Far,
    /// Tracing stops at the FUP's IP; a TIP may follow with where execution went (RTIT
    /// FUP.PGD).
    Pgd,
    /// An asynchronous event at the FUP's IP: the next packet says which. A TIP makes it
    /// an interrupt (a far transfer), a TIP.PGD a disable (Intel PT's unbound FUP).
    Async,
}

/// An event bound to an IP (or, with no IP, to where the walk is): it is applied when the
/// walk reaches the IP, in stream order with the flow items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// The execution mode changes (PT MODE.Exec): instructions from the IP on decode so.
    ExecMode(Bits),
    /// Transactional execution began (`intx`), committed (neither) or aborted (PT
    /// MODE.TSX).
    Tsx { intx: bool, abort: bool },
    /// A PSB+'s MODE.TSX: execution is (or is not) inside a transaction at the PSB, a
    /// state rather than a change (an event only when inside: "in transaction").
    InTx(bool),
    /// A PTWRITE instruction at the IP wrote `payload` (`bytes` of it).
    Ptwrite { payload: u64, bytes: u8 },
    /// Execution stopped (PT EXSTOP): a C-state, a VMX transition, ...
    Exstop,
    /// An MWAIT's hints and extensions (PT MWAIT).
    Mwait { hints: u32, ext: u32 },
    /// Entry to a C-state (PT PWRE): resolved state and sub-state, hardware-initiated.
    Pwre { state: u8, sub_state: u8, hw: bool },
    /// Back to C0 (PT PWRX): last and deepest core C-state, the wake reasons.
    Pwrx { last: u8, deepest: u8, wake: u8 },
    /// A trigger (PT TRIG): trigger bits, several hits (`mult`), and, when sent, the
    /// number of instructions between the last flow packet's IP (or the previous TRIG)
    /// and the trigger.
    Trig {
        trbv: u8,
        mult: bool,
        icnt: Option<u16>,
    },
    /// An interrupt or exception was delivered (PT Event Trace: CFE INTR, with the CR2
    /// of a page fault from the EVD before it, when `has_cr2`).
    Intr { vector: u8, has_cr2: bool, cr2: u64 },
    /// A VM exit (CFE VMEXIT or VMEXIT_INTR, with the EVDs before it): the vector of the
    /// interrupt that caused it, the exit reason and qualification, those sent (`has`,
    /// [`Vmexit::VECTOR`] ...: flags rather than options keep `Bound`, which every queue
    /// slot of the front end holds, at 24 bytes).
    Vmexit {
        vector: u8,
        has: u8,
        vmxr: u64,
        vmxq: u64,
    },
    /// Interrupts were enabled (`true`) or disabled from the IP on (PT MODE.Exec's IF,
    /// with Event Trace on).
    Iflags(bool),
    /// Any other control flow event (PT CFE): its type and vector (see
    /// [`cfe_kind`]).
    Cfe { kind: u8, vector: u8 },
    /// CR3 became `cr3` (`nr`: in VMX non-root operation), PT PIP. Sent without an IP: it
    /// binds to the next MOV CR3 or far branch ([`BindsTo::Paging`]) and takes effect
    /// after it.
    Paging { cr3: u64, nr: bool },
    /// The current VMCS is at `base`, PT VMCS. It binds to the next VMPTRLD or far branch
    /// ([`BindsTo::Vmcs`]).
    Vmcs { base: u64 },
}

/// Which fields of a [`Bound::Vmexit`] were sent.
pub struct Vmexit;

impl Vmexit {
    pub const VECTOR: u8 = 1;
    pub const VMXR: u8 = 2;
    pub const VMXQ: u8 = 4;
}

impl Bound {
    /// Sent without an IP, while tracing the event binds to the next instruction of this
    /// kind and is reported after it, with its IP (PT PIP, VMCS and PTW without IP);
    /// `None`: at its IP, or where the walk is.
    #[inline]
    pub fn binds_to(&self) -> Option<BindsTo> {
        match self {
            Bound::Paging { .. } => Some(BindsTo::Paging),
            Bound::Vmcs { .. } => Some(BindsTo::Vmcs),
            Bound::Ptwrite { .. } => Some(BindsTo::Ptwrite),
            _ => None,
        }
    }

    /// The `events` row kind and detail of this event.
    pub fn event(&self) -> (EventKind, String) {
        match *self {
            Bound::ExecMode(b) => (EventKind::ExecMode, b.name().to_string()),
            Bound::Tsx { intx, abort } => (
                EventKind::Tsx,
                if abort {
                    "abort"
                } else if intx {
                    "begin"
                } else {
                    "commit"
                }
                .to_string(),
            ),
            Bound::InTx(intx) => (
                EventKind::Tsx,
                if intx {
                    "in transaction"
                } else {
                    "not in transaction"
                }
                .to_string(),
            ),
            Bound::Ptwrite { payload, bytes } => {
                (EventKind::Ptwrite, format!("{payload:#x} ({bytes} bytes)"))
            }
            Bound::Exstop => (EventKind::Power, "exstop".to_string()),
            Bound::Mwait { hints, ext } => (
                EventKind::Power,
                format!("mwait hints={hints:#x} ext={ext:#x}"),
            ),
            Bound::Pwre {
                state,
                sub_state,
                hw,
            } => (
                EventKind::Power,
                format!(
                    "pwre c{}.{}{}",
                    (state + 1) & 0xf,
                    (sub_state + 1) & 0xf,
                    if hw { " hw" } else { "" }
                ),
            ),
            Bound::Pwrx {
                last,
                deepest,
                wake,
            } => {
                let mut s = format!("pwrx c{} (c{})", (last + 1) & 0xf, (deepest + 1) & 0xf);
                for (bit, name) in [(1, "interrupt"), (4, "store"), (8, "hw")] {
                    if wake & bit != 0 {
                        s.push(' ');
                        s.push_str(name);
                    }
                }
                (EventKind::Power, s)
            }
            Bound::Trig { trbv, mult, icnt } => {
                let mut s = format!("trbv {trbv:#04x}");
                if let Some(n) = icnt {
                    s += &format!(", icnt {n}");
                }
                if mult {
                    s += ", mult";
                }
                (EventKind::Trigger, s)
            }
            Bound::Iflags(on) => (
                EventKind::Iflags,
                if on {
                    "interrupts enabled"
                } else {
                    "interrupts disabled"
                }
                .to_string(),
            ),
            Bound::Intr {
                vector,
                has_cr2,
                cr2,
            } => {
                let mut s = format!("vector {vector:#04x}");
                if has_cr2 {
                    s += &format!(", cr2 {cr2:#x}");
                }
                (EventKind::Intr, s)
            }
            Bound::Vmexit {
                vector,
                has,
                vmxr,
                vmxq,
            } => {
                let mut parts = Vec::new();
                if has & Vmexit::VECTOR != 0 {
                    parts.push(format!("vector {vector:#04x}"));
                }
                if has & Vmexit::VMXR != 0 {
                    parts.push(format!("vmxr {vmxr:#x}"));
                }
                if has & Vmexit::VMXQ != 0 {
                    parts.push(format!("vmxq {vmxq:#x}"));
                }
                (EventKind::Vmexit, parts.join(", "))
            }
            Bound::Paging { cr3, nr } => {
                (EventKind::Paging, format!("cr3={cr3:#x} nr={}", nr as u8))
            }
            Bound::Vmcs { base } => (EventKind::Paging, format!("vmcs={base:#x}")),
            Bound::Cfe { kind, vector } => {
                let Some(k) = cfe_kind(kind) else {
                    return (EventKind::Error, format!("CFE of unknown type {kind}"));
                };
                let detail = match k {
                    EventKind::Sipi | EventKind::Uintr | EventKind::Swintr => {
                        format!("vector {vector:#04x}")
                    }
                    _ => String::new(),
                };
                (k, detail)
            }
        }
    }
}

/// The `events` kind of a CFE type other than INTR and VMEXIT (libipt `pt_cfe_type`);
/// `None` for types libipt does not know (ignored, as libipt ignores them).
pub fn cfe_kind(kind: u8) -> Option<EventKind> {
    Some(match kind {
        0x02 => EventKind::Iret,
        0x03 => EventKind::Smi,
        0x04 => EventKind::Rsm,
        0x05 => EventKind::Sipi,
        0x06 => EventKind::Init,
        0x07 => EventKind::Vmentry,
        0x0A => EventKind::Shutdown,
        0x0C => EventKind::Uintr,
        0x0D => EventKind::Uiret,
        0x0E => EventKind::Swintr,
        0x0F => EventKind::Syscall,
        _ => return None,
    })
}

/// One flow packet's meaning, as a front end reads it (the walker pairs FUPs with their
/// TIPs, see [`crate::flow`]).
#[derive(Clone, Copy, Debug)]
pub enum Raw<E> {
    /// Branch outcomes.
    Tnt { tnt: TntBits, off: u64 },
    /// A target IP. `anchor`: tracing may resume here after losing its place (what came
    /// before is known and does not make this the target of a jump out of the traced
    /// region).
    Tip {
        ip: Option<u64>,
        off: u64,
        anchor: bool,
    },
    /// A FUP; what it means depends on `role` and on the TIP after it.
    Fup {
        ip: Option<u64>,
        off: u64,
        role: FupRole,
    },
    /// Tracing stops at the next branch that needs trace, or at the direct branch to `ip`
    /// (PT TIP.PGD without a FUP, SDM 36.4.2.5).
    TipPgd { ip: Option<u64>, off: u64 },
    /// Tracing starts at `ip` (RTIT FUP.PGE, PT TIP.PGE).
    Pge { ip: Option<u64>, off: u64 },
    /// Packets were lost; tracing resumes at `ip` (RTIT FUP.BuffOvf, PT OVF + FUP), or is
    /// disabled when the overflow resolved (`None` from PT's OVF alone).
    Ovf { ip: Option<u64>, off: u64 },
    /// TraceStop.
    Stop { off: u64 },
    /// A PSB+ says where execution is: tracing on at `ip` (its FUP), or off (`None`),
    /// in mode `bits` (PT). The walk must be at `ip` when it reads this.
    Status {
        ip: Option<u64>,
        bits: Option<Bits>,
        off: u64,
    },
    /// An event at `ip` (when the walk gets there), or where the walk is.
    At {
        ip: Option<u64>,
        off: u64,
        what: Bound,
    },
    /// Bytes that do not parse; the reader has moved to the next PSB.
    Error { off: u64, e: E },
    /// (Look-ahead only) the next packet starts past [`Facts::limit`].
    Limit,
    /// The end of the reader's range.
    End,
}

/// What a front end reports besides flow items, collected by the walker: events, timing
/// packets and CR3 changes. Events read while the walker looks ahead for a FUP's TIP
/// wait (`deferred`) until the FUP is applied, so that `events` stays in stream order.
#[derive(Clone, Debug)]
pub struct Facts {
    pub events: Vec<EventRow>,
    pub deferred: Vec<EventRow>,
    pub timing: Vec<TimingFact>,
    /// Rows emitted so far: the `seq` of an event now.
    pub seq: u64,
    /// The walker is reading the packets after a FUP for its TIP.
    pub looking_ahead: bool,
    /// A PIP set this CR3 (the last one read since the walker last looked).
    pub cr3: Option<Option<u64>>,
    /// No packet starting past this offset is read ([`Raw::Limit`]): the walker's bound on
    /// how far it looks for a FUP's TIP (`u64::MAX` when it is not looking).
    pub limit: u64,
    /// The front end reached the PSB of a break ([`crate::stream::Break`]) and reports the
    /// loss before reading it: the rows walked before are final, as at any PSB (a chunk
    /// may start there, and its stitch gets them as final).
    pub lost_at_psb: bool,
}

impl Default for Facts {
    fn default() -> Self {
        Facts {
            events: Vec::new(),
            deferred: Vec::new(),
            timing: Vec::new(),
            seq: 0,
            looking_ahead: false,
            cr3: None,
            limit: u64::MAX,
            lost_at_psb: false,
        }
    }
}

impl Facts {
    /// Report an event (see [`Facts::place`]).
    pub fn event(&mut self, offset: u64, kind: EventKind, ip: Option<u64>, detail: String) {
        self.place(offset, kind, ip, detail);
    }

    /// Report an event; returns where in `events` it went (`None`: it waits in
    /// `deferred`).
    ///
    /// The events of packets read ahead of the walk (the item in the walker's look-ahead,
    /// or the packets after a TNT whose bits are still being used) are in `events`
    /// already. An event the walk finds later about an earlier packet (an error at the
    /// TNT packet whose bit does not fit the code) goes before them, so that `offset`
    /// never decreases (fuzz finding `events-out-of-order`); they then follow the rows
    /// walked up to it (`seq` at least its own), as the packets they came from follow
    /// every row of that TNT.
    pub fn place(
        &mut self,
        offset: u64,
        kind: EventKind,
        ip: Option<u64>,
        detail: String,
    ) -> Option<usize> {
        let e = EventRow {
            seq: self.seq,
            offset,
            kind,
            ip,
            tsc: None,
            detail,
        };
        if self.looking_ahead {
            self.deferred.push(e);
            return None;
        }
        self.flush_deferred(offset);
        let mut at = self.events.len();
        while at > 0 && self.events[at - 1].offset > offset {
            at -= 1;
            self.events[at].seq = self.events[at].seq.max(self.seq);
        }
        self.events.insert(at, e);
        Some(at)
    }

    /// Emit the deferred look-ahead events that precede stream offset `before`, with the
    /// current `seq` (they come after the rows walked since they were read).
    #[inline(always)]
    pub fn flush_deferred(&mut self, before: u64) {
        if !self.deferred.is_empty() {
            self.flush_deferred_from(before);
        }
    }

    #[inline(never)]
    fn flush_deferred_from(&mut self, before: u64) {
        let k = self.deferred.partition_point(|e| e.offset < before);
        let seq = self.seq;
        for mut e in self.deferred.drain(..k) {
            e.seq = seq;
            self.events.push(e);
        }
    }

    pub fn timing(&mut self, offset: u64, kind: TimingKind, raw: u64, ratio: Option<u8>) {
        self.timing.push(TimingFact {
            offset,
            kind,
            raw,
            ratio,
            row: self.seq,
        });
    }

    /// A new CR3 for image lookups.
    pub fn cr3(&mut self, cr3: Option<u64>) {
        self.cr3 = Some(cr3);
    }
}

/// A format's packet reader, turning packets into flow items.
pub trait Front {
    /// What the reader knows beyond its position (Last IP, the previous flow packet, a
    /// pending binding...). It travels in [`crate::flow::FlowState`]: a chunk's exit state
    /// is where the next stitch starts, and a look-ahead that runs off the chunk is undone
    /// by restoring it.
    type State: Clone + Debug + PartialEq + Eq;
    /// A packet that does not parse.
    type Error: Copy + Debug + Display;

    /// Offset of the next packet.
    fn pos(&self) -> u64;
    /// No packet starting at or after this offset is read.
    fn end(&self) -> u64;
    /// Extend the range (a stitch reading on into the next chunk).
    fn set_end(&mut self, end: u64);
    /// The range ends where the stream ends (not at a chunk boundary).
    fn ends_at_stream_end(&self) -> bool;
    /// Move to `pos` (a packet boundary this reader returned) with the reader's part of
    /// `st` (RTIT: whether a CYC is due).
    fn seek(&mut self, pos: u64, st: &Self::State);
    /// Put the reader's own state at its position into `st`.
    fn save(&self, st: &mut Self::State);
    /// Nothing read so far waits for a packet still to come that belongs with it (RTIT:
    /// no CYC is due after the last packet): a walk may hand its output on here
    /// ([`crate::flow::Walker::with_piece_limit`]) as if a PSB came next.
    fn settled(&self) -> bool {
        true
    }
    /// `e`, an error at `off`, is a packet cut short whose first bytes say it is a TIP
    /// or a TNT: the packet the next branch that needs trace would take. The walk up to
    /// that branch (direct branches, no event between) needs nothing from it, so it goes
    /// on and stops there, as libipt's does (its query decoder reads a packet's opcode
    /// ahead, and the packet only when a branch asks for it).
    fn cut_before_branch(&self, _off: u64, _e: &Self::Error) -> bool {
        false
    }
    /// The hot path: the next packet if it is a plain TNT that needs nothing else done.
    fn try_tnt(&mut self, st: &mut Self::State) -> Option<(TntBits, u64)>;
    /// The other hot path: the next packet if it is a plain TIP that needs nothing else
    /// done (nothing queued to bind to it): its IP (None: suppressed) and offset, as
    /// `next` would return it in a [`Raw::Tip`] with `anchor` set.
    fn try_tip(&mut self, _st: &mut Self::State) -> Option<(Option<u64>, u64)> {
        None
    }
    /// The next flow item; the packets before it are reported to `facts`.
    fn next(&mut self, st: &mut Self::State, facts: &mut Facts) -> Raw<Self::Error>;
}

/// How synchronous far branches (far JMP/CALL/RET, IRET, SYSCALL, ...) show in a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FarRule {
    /// RTIT (Table 1, 4.2.9): FUP.FAR with the branch's NLIP, then the TIP; or FUP.PGD at
    /// the NLIP when it leaves the traced context. A FUP therefore names the NLIP of what
    /// caused it, which two readings depend on (a FUP right after an enable may be the
    /// loop's own far branch; a PGD after a jump may name the jump's sequential NLIP).
    FupAndTip,
    /// Intel PT (SDM 36.4.2.2): the TIP (or TIP.PGD) alone. A FUP always names where an
    /// asynchronous event struck.
    TipOnly,
}

/// The rules in which the formats differ, set once per decode by the format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    pub ret: RetModel,
    pub far: FarRule,
    /// A TIP may come after the TNT bits of branches that followed its indirect branch
    /// (PT's deferred TIPs, SDM 36.4.2.3). Without it, TNT bits left at an indirect branch
    /// are an error.
    pub deferred_tips: bool,
    /// The processor's errata the walk works around (Intel PT; RTIT has none).
    pub errata: FlowErrata,
}

/// Errata that change which instruction a packet binds to (libipt applies the same in
/// its block and instruction decoders); chosen from the configured processor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowErrata {
    /// SKD022: a VM entry that clears TraceEn sends a FUP before its TIP.PGD, so the
    /// disable looks asynchronous (before the instruction at the FUP's IP). At a VMLAUNCH
    /// or VMRESUME it is taken as the synchronous disable of that instruction instead.
    pub skd022: bool,
    /// SKL014: with IP ranges configured, a direct JMP or CALL that leaves them may send a
    /// TIP.PGD without its target IP; such a TIP.PGD also binds to the first direct JMP
    /// or CALL whose target the ranges do not trace.
    pub skl014: Option<IpRanges>,
    /// BDM64: the branch right before a TSX abort may have sent a wrong packet. When the
    /// walk cannot reach the abort's IP from where that branch led, the branch is taken
    /// to have gone to the abort's IP.
    pub bdm64: bool,
}

/// Up to four IP ranges (IA32_RTIT_ADDRn_A/B, inclusive): `(from, to, stop)`; `stop`
/// ranges stop tracing, the others are where tracing is on (SDM 36.2.4.3). Copied into
/// [`Rules`], so a fixed array: the hardware has at most four.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IpRanges {
    ranges: [(u64, u64, bool); 4],
    len: u8,
}

impl IpRanges {
    /// The first four of `ranges`.
    pub fn new(ranges: impl IntoIterator<Item = (u64, u64, bool)>) -> IpRanges {
        let mut r = IpRanges::default();
        for x in ranges.into_iter().take(4) {
            r.ranges[r.len as usize] = x;
            r.len += 1;
        }
        r
    }

    /// Whether `ip` is traced: in no stop range, and in a filter range if there is one.
    pub fn traces(&self, ip: u64) -> bool {
        let rs = &self.ranges[..self.len as usize];
        let inside = |stop: bool| rs.iter().any(|r| r.2 == stop && r.0 <= ip && ip <= r.1);
        !inside(true) && (!rs.iter().any(|r| !r.2) || inside(false))
    }
}

/// A trace format: its front end, configuration, clock and PSB search. The pipeline
/// chooses one per bundle; everything below is generic over it.
pub trait Format: Sized + 'static {
    /// The recording facts the decode needs (RTIT_CTL for RTIT, [`crate::pt::PtConfig`]).
    type Config: Clone + Debug + Send + Sync;
    type Front<'a>: Front<State = Self::State>;
    type State: Clone + Debug + PartialEq + Eq + Send;
    /// Turns timing packets into time, in stream order.
    type Clock: crate::timing::Clock;

    /// A short name ("rtit", "pt").
    const NAME: &'static str;
    /// The name people use ("RTIT", "Intel PT").
    const TITLE: &'static str;

    fn rules(cfg: &Self::Config) -> Rules;
    /// The front-end state at the start of the trace (`chunk_start` false) or of a
    /// parallel chunk at a PSB.
    fn start_state(cfg: &Self::Config, chunk_start: bool) -> Self::State;
    /// A reader of `stream[start..end)`.
    fn front<'a>(
        stream: &'a TraceStream<'a>,
        cfg: &Self::Config,
        start: u64,
        end: u64,
    ) -> Self::Front<'a>;
    /// The first PSB starting in `from..to` (chunk planning).
    fn next_psb_before(stream: &TraceStream<'_>, from: u64, to: u64) -> Option<u64>;
    /// Bytes of a PSB.
    const PSB_LEN: u64;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event about an earlier packet than the events read ahead of the walk goes before
    /// them, and they follow the rows walked up to it: `offset` and `seq` never decrease.
    #[test]
    fn an_event_about_an_earlier_packet_goes_before_those_read_ahead() {
        let mut f = Facts {
            seq: 3,
            ..Facts::default()
        };
        f.event(0x100, EventKind::Psb, None, String::new());
        f.event(0x1ac, EventKind::Paging, None, "vmcs=0x1000000".into());
        f.seq = 7;
        assert_eq!(
            f.place(0x1a2, EventKind::Error, None, "bit".into()),
            Some(1)
        );
        let got: Vec<_> = f.events.iter().map(|e| (e.offset, e.seq, e.kind)).collect();
        assert_eq!(
            got,
            [
                (0x100, 3, EventKind::Psb),
                (0x1a2, 7, EventKind::Error),
                (0x1ac, 7, EventKind::Paging)
            ]
        );
        // In order: appended.
        assert_eq!(
            f.place(0x1b3, EventKind::Error, None, String::new()),
            Some(3)
        );
    }
}
