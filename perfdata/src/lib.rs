//! Linux `perf.data` (`PERFILE2`, file mode, little-endian), read from bytes: what a
//! decoder of `perf record -e intel_pt//` needs and what a damaged file does to it.
//!
//! The layers, one module each (tools/perf/Documentation/perf.data-file-format.txt and
//! include/uapi/linux/perf_event.h are the references):
//!
//! - [`header`]: the file header, its sections and the feature bitmap;
//! - [`attr`]: `perf_event_attr` and the `sample_id_all` trailer it lays out;
//! - [`record`]: the records of the data section (MMAP, MMAP2 with build-id, COMM, FORK,
//!   EXIT, AUX, ITRACE_START, SWITCH, SWITCH_CPU_WIDE, KSYMBOL, LOST, AUXTRACE_INFO,
//!   AUXTRACE with its data, AUXTRACE_ERROR, TIME_CONV, ID_INDEX; the rest kept raw);
//! - [`features`]: HEADER_BUILD_ID, HEADER_AUXTRACE (the AUXTRACE index), strings;
//! - [`intel_pt`]: Intel PT's AUXTRACE_INFO array, the config masks, TSC ↔ perf time;
//! - [`file`]: [`PerfData`], which ties them together.
//!
//! **Bounded and zero-copy.** Everything borrows the input (a memory map): AUX data,
//! strings, the build-id table. Records are read one at a time. No length field is used
//! to allocate before it is checked against the bytes that are there: the attrs (at most
//! one per `attr_size` bytes of a section inside the file), their ids (all together at
//! most one per 8 bytes of the file), the AUXTRACE index (count against its section),
//! and an AUXTRACE record's data (against the data section). Malformed input is an
//! [`Error`] naming its byte offset, never a panic (`fuzz/`'s `perf_data` target).
//!
//! **Why not `linux-perf-data`** (0.13, the crate samply uses): it reads from
//! `io::Read + Seek` and copies every record (AUX buffers included) into a `Vec` it
//! resizes to the record's `size` field unchecked, so an AUXTRACE record claiming
//! 2^40 bytes asks for a terabyte; it leaves AUXTRACE_INFO, TIME_CONV, AUX and
//! ITRACE_START unparsed; its errors carry no offset; it pulls in prost and
//! byteorder. Measured on the same 64 MiB Intel PT perf.data (docs/perf-data.md has
//! the run): it took 10.9 times the time of this reader to walk the records, and
//! copied the 64 MiB of AUX data where this reader borrows it.
//!
//! ```
//! use tracemill_perfdata::{PerfData, Record};
//!
//! fn aux_bytes(file: &[u8]) -> Result<u64, tracemill_perfdata::Error> {
//!     let perf = PerfData::parse(file)?;
//!     let mut n = 0;
//!     for item in perf.records() {
//!         if let Record::Auxtrace(a) = item?.record {
//!             n += a.data.len() as u64;
//!         }
//!     }
//!     Ok(n)
//! }
//! assert!(aux_bytes(b"not perf").unwrap_err().to_string().contains("at offset 0x0"));
//! ```
//!
//! Not read: pipe mode (`perf record -o -`; `perf inject -i IN -o OUT` makes a file of
//! it), big-endian files, compressed records (`perf record -z`), the other features.

pub mod attr;
mod cursor;
pub mod error;
pub mod features;
pub mod file;
pub mod header;
pub mod intel_pt;
pub mod record;

pub use attr::{EventAttr, SampleId};
pub use error::{Error, ErrorKind};
pub use file::{Attr, Item, PerfData, Records};
pub use intel_pt::{IntelPtInfo, PerfClock};
pub use record::{BuildId, Record};
