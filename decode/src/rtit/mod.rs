//! Intel RTIT (Real Time Instruction Trace, the Silvermont/Airmont Atom trace): the packet
//! layer and the front end that turns its packets into flow items for the shared core
//! ([`crate::front`]). Section numbers are the *RTIT Programming Reference* v1.05's.
//!
//! - [`packet`]: the packet codec (chapter 4, Figure 2) and the zero-copy reader;
//! - [`sync`]: PSB search (4.2.1);
//! - [`last_ip`]: LAST_LIP, IP decompression (4.2.3.1, Table 18);
//! - [`config`]: RTIT_CTL (3.3.2, Table 4);
//! - [`clock`]: time from CYC, STS and MTC (4.2.12-4.2.15, E6, E7);
//! - [`Rtit`]: the [`Format`]: packets to flow items, with the rules RTIT sets.
//!
//! What is RTIT's own, and where it lives:
//!
//! | rule | here |
//! |---|---|
//! | FUP.FAR + TIP for every far transfer, FUP.PGD at the NLIP | [`FarRule::FupAndTip`] |
//! | RTIT_LAST_CALL_NLIP, read and not consumed by a compressed RET | [`RetModel::LastCall`] |
//! | LAST_LIP unknown at a chunk start, cleared lazily after a PSB | [`last_ip::LastIp`], [`State`] |
//! | a TIP resumes tracing only after a known flow packet that is not a PGD | [`RtitFront::next`] |
//! | E5: a TIP right after FUP.BuffOvf with its IP is spurious | [`RtitFront::next`] |
//! | CYC after full TNT, TIP, FUP, PIP, MTC, STS in cycle-accurate mode | [`packet::PacketReader`] |
//! | E6, E7, the 4.2.5 overflow rule | [`clock::RtitClock`] |

pub mod clock;
pub mod config;
pub mod last_ip;
pub mod packet;
pub mod sync;

use tracemill_schemas::{EventKind, TimingKind};

pub use config::TraceConfig;
use last_ip::LastIp;
pub use packet::{FupKind, IpPayload, Packet, PacketError, PacketErrorKind, Parsed, Tnt};
use packet::{PacketReader, PSB_BYTES};

use crate::front::{
    Facts, FarRule, FlowErrata, Format, Front, FupRole, Raw, RetModel, Rules, TntBits,
};
use crate::stream::TraceStream;

impl From<Tnt> for TntBits {
    #[inline]
    fn from(t: Tnt) -> Self {
        TntBits {
            bits: t.bits as u64,
            len: t.len,
        }
    }
}

/// The previous flow packet: what a TIP after it means (E2, E5, the resume rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrevFlow {
    Unknown,
    Tnt,
    Tip,
    Pge,
    Pgd,
    BuffOvf(Option<u64>),
    Far,
    TraceStop,
}

/// What the RTIT front end carries across chunk seams and look-aheads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    pub last_ip: LastIp,
    pub prev: PrevFlow,
    /// A CYC is due next (cycle-accurate mode, 4.2.15).
    pub want_cyc: bool,
}

/// The RTIT format.
#[derive(Clone, Copy, Debug)]
pub struct Rtit;

impl Format for Rtit {
    type Config = TraceConfig;
    type Front<'a> = RtitFront<'a>;
    type State = State;
    type Clock = clock::RtitClock;
    const NAME: &'static str = "rtit";
    const TITLE: &'static str = "RTIT";
    const PSB_LEN: u64 = PSB_BYTES.len() as u64;

    fn rules(_cfg: &TraceConfig) -> Rules {
        Rules {
            ret: RetModel::LastCall,
            far: FarRule::FupAndTip,
            deferred_tips: false,
            errata: FlowErrata::default(),
        }
    }

    fn start_state(_cfg: &TraceConfig, _chunk_start: bool) -> State {
        // LAST_LIP is unknown at a chunk start (the hardware clears it only lazily after a
        // PSB, 3.3.9), and so is the previous flow packet.
        State {
            last_ip: LastIp::unknown(),
            prev: PrevFlow::Unknown,
            want_cyc: false,
        }
    }

    fn front<'a>(
        stream: &'a TraceStream<'a>,
        cfg: &TraceConfig,
        start: u64,
        end: u64,
    ) -> RtitFront<'a> {
        RtitFront {
            reader: PacketReader::new(stream, start, end, cfg.cycle_acc),
        }
    }

    fn next_psb_before(stream: &TraceStream<'_>, from: u64, to: u64) -> Option<u64> {
        sync::next_psb_before(stream, from, to)
    }
}

/// RTIT packets to flow items.
pub struct RtitFront<'a> {
    reader: PacketReader<'a>,
}

impl Front for RtitFront<'_> {
    type State = State;
    type Error = PacketErrorKind;

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
    fn seek(&mut self, pos: u64, st: &State) {
        self.reader.seek(pos, st.want_cyc);
    }
    fn save(&self, st: &mut State) {
        st.want_cyc = self.reader.wants_cyc();
    }
    fn settled(&self) -> bool {
        // The CYC after a full TNT, TIP, FUP, ... dates the row that packet decided
        // (4.2.15): it goes in that row's piece.
        !self.reader.wants_cyc()
    }

    #[inline]
    fn try_tnt(&mut self, st: &mut State) -> Option<(TntBits, u64)> {
        let (t, off) = self.reader.try_tnt()?;
        st.prev = PrevFlow::Tnt;
        Some((t.into(), off))
    }

    /// The next flow item. PSB (a `psb` event), PIP (CR3 and a `paging` event), MTC, CYC,
    /// STS (timing facts; an STS also a `freq_change` candidate) and FUP.PCC (a timing
    /// fact) are taken on the way.
    fn next(&mut self, st: &mut State, facts: &mut Facts) -> Raw<PacketErrorKind> {
        loop {
            if self.reader.pos() > facts.limit {
                return Raw::Limit;
            }
            let p = match self.reader.next_packet() {
                None => return Raw::End,
                Some(Err(e)) => {
                    st.last_ip.forget();
                    st.prev = PrevFlow::Unknown;
                    return Raw::Error {
                        off: e.offset,
                        e: e.kind,
                    };
                }
                Some(Ok(p)) => p,
            };
            let off = p.offset;
            match p.packet {
                Packet::Psb => facts.event(off, EventKind::Psb, None, String::new()),
                Packet::Mtc { tsc, .. } => facts.timing(off, TimingKind::Mtc, tsc as u64, None),
                Packet::Cyc { value, .. } => facts.timing(off, TimingKind::Cyc, value as u64, None),
                Packet::Sts { acbr, tsc, .. } => {
                    // Whether the ratio changed is known only in stream order, which a
                    // chunk does not have: every STS is reported here and the emitter
                    // keeps those that change it (see `chunk::Decoded::append`).
                    facts.timing(off, TimingKind::Sts, tsc, Some(acbr));
                    facts.event(off, EventKind::FreqChange, None, acbr.to_string());
                }
                Packet::Pip { cr3, pg } => {
                    facts.cr3(Some(cr3));
                    let detail = format!("cr3={cr3:#x} pg={}", pg as u8);
                    facts.event(off, EventKind::Paging, None, detail);
                }
                Packet::Fup(FupKind::Pcc, pl) => {
                    let ip = st.last_ip.update(&pl);
                    facts.timing(off, TimingKind::Pcc, ip.unwrap_or(0), None);
                }
                Packet::Tnt(tnt) => {
                    st.prev = PrevFlow::Tnt;
                    return Raw::Tnt {
                        tnt: tnt.into(),
                        off,
                    };
                }
                Packet::Tip(pl) => {
                    let ip = st.last_ip.update(&pl);
                    if let PrevFlow::BuffOvf(Some(x)) = st.prev {
                        if ip == Some(x) {
                            // E5: a spurious TIP after FUP.BuffOvf, with its IP: ignored.
                            st.prev = PrevFlow::Tip;
                            continue;
                        }
                    }
                    // A TIP after a PGD is the target of a far transfer out of the traced
                    // region (4.2.9), not where tracing continues.
                    let anchor = !matches!(st.prev, PrevFlow::Unknown | PrevFlow::Pgd);
                    st.prev = PrevFlow::Tip;
                    return Raw::Tip { ip, off, anchor };
                }
                Packet::Fup(FupKind::Far, pl) => {
                    let ip = st.last_ip.update(&pl);
                    st.prev = PrevFlow::Far;
                    return Raw::Fup {
                        ip,
                        off,
                        role: FupRole::Far,
                    };
                }
                Packet::Fup(FupKind::Pgd, pl) => {
                    let ip = st.last_ip.update(&pl);
                    st.prev = PrevFlow::Pgd;
                    return Raw::Fup {
                        ip,
                        off,
                        role: FupRole::Pgd,
                    };
                }
                Packet::Fup(FupKind::Pge, pl) => {
                    let ip = st.last_ip.update(&pl);
                    st.prev = PrevFlow::Pge;
                    return Raw::Pge { ip, off };
                }
                Packet::Fup(FupKind::BuffOvf, pl) => {
                    let ip = st.last_ip.update(&pl);
                    st.prev = PrevFlow::BuffOvf(ip);
                    return Raw::Ovf { ip, off };
                }
                Packet::TraceStop => {
                    st.prev = PrevFlow::TraceStop;
                    return Raw::Stop { off };
                }
            }
        }
    }
}
