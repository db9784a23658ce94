//! # tracemill-decode
//!
//! Pure decoding of Intel RTIT traces (Real Time Instruction Trace, the Silvermont/Airmont
//! Atom trace) over byte slices. No files, no Arrow: bytes in, packets and rows out.
//! Intel PT's packet layer sits beside RTIT's in [`pt`] (packets, PSB search, Last IP,
//! timing, and a ptdump-compatible listing); [`sniff`] tells the two formats apart.
//!
//! Layers, bottom up (each a module with its own tests):
//! - [`packet`]: the packet codec (spec chapter 4) and a zero-copy [`packet::PacketReader`];
//! - [`sync`]: PSB search, the only way to find packet boundaries in raw bytes;
//! - [`stream`]: the trace bytes in time order (plain file or rotated ring dump);
//! - [`last_ip`], [`tnt`]: the small decoding states (LAST_LIP, queued TNT bits);
//! - [`image`], [`insn`], [`block`]: code images, instruction classes, the basic-block cache;
//! - [`rows`]: output columns.
//!
//! ```
//! use tracemill_decode::{packet::Packet, stream::TraceStream};
//! use tracemill_decode::packet::PacketReader;
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
pub mod config;
pub mod coverage;
pub mod flow;
pub mod image;
pub mod insn;
pub mod last_ip;
pub mod loop_guard;
pub mod packet;
pub mod piece;
pub mod pt;
pub mod rows;
pub mod sniff;
pub mod stream;
pub mod sync;
pub mod timing;
pub mod tnt;

pub use config::TraceConfig;
pub use packet::{FupKind, IpPayload, Packet, PacketError, Parsed, Tnt};
pub use stream::TraceStream;
