//! Intel PT (the trace of Intel's Core and Xeon processors, recorded by `perf record -e
//! intel_pt//`): the packet layer (SDM chapter 36.4), side by side with the RTIT one.
//!
//! - [`packet`]: every packet as a typed [`packet::Packet`], and [`packet::parse`];
//! - [`sync`]: PSB search and the PSB-bounded, zero-copy [`sync::PacketReader`];
//! - [`last_ip`]: IP decompression (36.4.2.2);
//! - [`cpu`], [`config`]: the processor and its errata, the recording settings;
//! - [`time`]: the TSC estimate from TSC, TMA, MTC, CBR and CYC (36.8.3);
//! - [`encode`]: packets to bytes (round trips, trace generators);
//! - [`listing`]: libipt ptdump's listing, line for line.
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

pub mod config;
pub mod cpu;
pub mod encode;
pub mod last_ip;
pub mod listing;
pub mod packet;
pub mod sync;
pub mod time;

pub use config::PtConfig;
pub use packet::{Packet, PacketError, PacketErrorKind, Parsed};
pub use sync::PacketReader;
