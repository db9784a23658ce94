//! # tracemill-decode
//!
//! Pure decoding of processor traces over byte slices: Intel RTIT (Real Time Instruction
//! Trace, the Silvermont/Airmont Atom trace) and Intel PT (Processor Trace, every Intel
//! core since Broadwell). No files, no Arrow: bytes in, packets and rows out.
//!
//! Two front ends over one core:
//!
//! ```text
//!   rtit/ (packet, sync, last_ip, config, clock)    pt/ (packet, sync, last_ip, cpu, config,
//!        Rtit: Format, RtitFront: Front                 time, clock, front) Pt: Format
//!                    \                                   /
//!                     `-- front: Raw flow items, Facts, Rules --'
//!                                      |
//!   flow (Walker, FlowState)  block (BlockCache, memo)  retstack  tnt  loop_guard
//!   chunk (plan, bodies, stitch, Stitcher)  timing (Timeline over a format's Clock)
//!   rows, piece, coverage: the output
//! ```
//!
//! The core is generic over [`front::Format`] and knows neither format by name: what
//! differs is a front end's business, or one of the few [`front::Rules`] it sets.
//!
//! Layers, bottom up (each a module with its own tests; each imports only the modules
//! listed before it, which `tests/layers.rs` checks, so the crate has no import circle):
//! - [`stream`], [`psb_ahead`]: the trace bytes in time order (plain file or rotated ring
//!   dump); where the next PSB is, for a packet reader, searched a window at a time;
//! - [`column_pool`], [`retstack`]: reused column buffers; return compression;
//! - [`image`], [`insn`], [`block`]: code images, instruction classes and modes, the
//!   basic-block cache with the memoized walk over it (`block::memo`);
//! - [`coverage`], [`rows`], [`piece`]: the output: blocks and edges, the rows as columns
//!   (with the log of how the walk produced them), what one walk produces;
//! - [`timing`]: a format's [`timing::Clock`] and the timeline that dates rows;
//! - [`front`]: the flow items and the traits a format implements;
//! - [`tnt`], [`loop_guard`], [`spaces`]: queued TNT bits, the direct-branch cycle guard,
//!   address spaces by stream offset from a recording's sideband (traces without PIPs);
//! - [`sink`], [`tally`]: where the walker's rows go, and rows counted without being kept;
//! - [`flow`], [`chunk`]: the walker; parallel chunks and stitching;
//! - [`rtit`], [`pt`]: each format's packets, PSB search, IP decompression, settings,
//!   clock and front end, over the core above; [`sniff`] tells the two apart.
//!
//! ```
//! use tracemill_decode::{rtit::packet::Packet, stream::TraceStream};
//! use tracemill_decode::rtit::packet::PacketReader;
//!
//! // PSB, then a one-bit TNT (taken).
//! let bytes = [0xC0, 0, 0, 0, 0, 0, 0, 0, 0, 0b11];
//! let stream = TraceStream::linear(&bytes);
//! let packets: Vec<_> = PacketReader::new(&stream, 0, stream.len(), false)
//!     .map(|p| p.unwrap().packet)
//!     .collect();
//! assert_eq!(packets[0], Packet::Psb);
//! assert_eq!(packets.len(), 2);
//! ```

pub mod block;
pub mod chunk;
pub mod column_pool;
pub mod coverage;
pub mod flow;
pub mod front;
pub mod image;
pub mod insn;
pub mod loop_guard;
pub mod piece;
pub mod psb_ahead;
pub mod pt;
pub mod retstack;
pub mod rows;
pub mod rtit;
pub mod sink;
pub mod sniff;
pub mod spaces;
pub mod stream;
pub mod tally;
pub mod timing;
pub mod tnt;

pub use front::Format;
pub use pt::Pt;
pub use rtit::{Rtit, TraceConfig};
pub use stream::TraceStream;
