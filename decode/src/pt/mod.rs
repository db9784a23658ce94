//! Intel PT (the trace of Intel's Core and Xeon processors, recorded by `perf record -e
//! intel_pt//`): the packet layer (SDM chapter 36.4), side by side with the RTIT one.
//!
//! - [`packet`]: every packet as a typed [`packet::Packet`], and [`packet::parse`];
//! - [`sync`]: PSB search and the PSB-bounded, zero-copy [`sync::PacketReader`];
//! - [`last_ip`]: IP decompression (36.4.2.2);
//! - [`cpu`], [`config`]: the processor and its errata, the recording settings;
//! - [`time`]: the TSC estimate from TSC, TMA, MTC, CBR and CYC (36.8.3);
//! - [`encode`]: packets to bytes (round trips, trace generators);
//! - [`listing`]: libipt ptdump's listing, line for line;
//! - [`front`]: packets to the flow items of the shared core (SDM 36.4's binding rules,
//!   the errata), and [`Pt`], the [`Format`];
//! - [`clock`]: the time the shared timeline places on rows.
//!
//! What is Intel PT's own, and where it lives:
//!
//! | rule | here |
//! |---|---|
//! | TIP alone for a far branch; FUP + TIP only for asynchronous events | [`FarRule::TipOnly`] |
//! | the 64-entry return stack a compressed RET pops (36.4.2.2) | [`RetModel::Stack64`] |
//! | deferred TIPs (36.4.2.3) | [`Rules::deferred_tips`] |
//! | Last IP reset at every PSB; PSB+ gives the IP, mode and CR3 | [`front::PtFront`] |
//! | which packet a MODE, OVF, PTW, EXSTOP, MWAIT, PWRE binds to | [`front`] |
//! | TIP.PGD alone: disable at the next branch that needs trace | [`crate::front::Raw::TipPgd`] |
//! | errata BDM70, SKD010, APL11, APL12 (flow); SKD007, SKZ84 (packets) | [`front`], [`packet`] |
//! | TSC, TMA, MTC, CYC, CBR | [`clock::PtClock`] |
//!
//! ```
//! use tracemill_decode::pt::{cpu::Errata, packet::Packet, sync::PacketReader};
//! use tracemill_decode::stream::TraceStream;
//!
//! // PSB, PSBEND, a TIP to 0x401000 (IPBytes 010: 4 bytes against Last IP 0).
//! let mut bytes = tracemill_decode::pt::packet::PSB_BYTES.to_vec();
//! bytes.extend_from_slice(&[0x02, 0x23, 0x4D, 0x00, 0x10, 0x40, 0x00]);
//! let stream = TraceStream::linear(&bytes);
//! let mut last_ip = tracemill_decode::pt::last_ip::LastIp::new();
//! let mut ips = Vec::new();
//! for p in PacketReader::new(&stream, 0, stream.len(), Errata::default()) {
//!     match p.unwrap().packet {
//!         Packet::Psb => last_ip.reset(),
//!         Packet::Tip(ip) => ips.push(last_ip.update(&ip)),
//!         _ => {}
//!     }
//! }
//! assert_eq!(ips, [Some(0x401000)]);
//! ```

pub mod clock;
pub mod config;
pub mod cpu;
pub mod encode;
pub mod front;
pub mod last_ip;
pub mod listing;
pub mod packet;
pub mod sync;
pub mod time;

pub use config::PtConfig;
pub use packet::{Packet, PacketError, PacketErrorKind, Parsed};
pub use sync::PacketReader;

use crate::front::{FarRule, FlowErrata, Format, IpRanges, RetModel, Rules};
use crate::stream::TraceStream;

/// The Intel PT format.
#[derive(Clone, Copy, Debug)]
pub struct Pt;

impl<'a> crate::chunk::Input<'a, Pt> {
    /// The input of an Intel PT decode: its timing configuration follows from `cfg`.
    pub fn pt(
        stream: &'a TraceStream<'a>,
        images: &'a crate::image::ImageSet<'a>,
        cfg: PtConfig,
    ) -> Self {
        crate::chunk::Input {
            stream,
            images,
            timing: clock::PtTiming::new(&cfg),
            cfg,
            spaces: None,
        }
    }
}

impl Format for Pt {
    type Config = PtConfig;
    type Front<'a> = front::PtFront<'a>;
    type State = front::State;
    type Clock = clock::PtClock;
    const NAME: &'static str = "pt";
    const TITLE: &'static str = "Intel PT";
    const PSB_LEN: u64 = packet::PSB_LEN;

    fn rules(cfg: &PtConfig) -> Rules {
        let e = &cfg.errata;
        // libipt applies SKL014 only when address ranges are configured: without them no
        // direct branch can leave a range.
        let ranges = IpRanges::new(
            cfg.filters
                .iter()
                .map(|r| (r.from, r.to, r.kind == config::FilterKind::Stop)),
        );
        Rules {
            // With DisRETC set no RET is compressed: the stack is kept but never popped.
            ret: RetModel::Stack64,
            far: FarRule::TipOnly,
            deferred_tips: true,
            errata: FlowErrata {
                skd022: e.skd022,
                skl014: (e.skl014 && !cfg.filters.is_empty()).then_some(ranges),
                bdm64: e.bdm64,
            },
        }
    }

    fn start_state(_cfg: &PtConfig, _chunk_start: bool) -> front::State {
        // At a PSB everything the front end keeps is reset (36.4.2.2, 36.4.2.17); at the
        // start of a trace too.
        front::State::default()
    }

    fn front<'a>(
        stream: &'a TraceStream<'a>,
        cfg: &PtConfig,
        start: u64,
        end: u64,
    ) -> front::PtFront<'a> {
        front::PtFront::new(stream, start, end, cfg.errata).with_iflags(cfg.event_trace)
    }

    fn next_psb_before(stream: &TraceStream<'_>, from: u64, to: u64) -> Option<u64> {
        sync::next_psb_before(stream, from, to)
    }
}
