//! Linux `perf.data` (`PERFILE2`, file and pipe mode, little-endian), read from bytes: what a
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
//! - [`features`]: HEADER_BUILD_ID, HEADER_AUXTRACE (the AUXTRACE index),
//!   HEADER_EVENT_DESC, HEADER_PMU_MAPPINGS, strings;
//! - [`intel_pt`]: Intel PT's AUXTRACE_INFO array, the config masks, TSC ↔ perf time;
//! - [`file`](mod@file): [`PerfData`], which ties them together;
//! - [`aux`]: the AUXTRACE buffers per AUX area, their gaps, overlaps and conflicts, and
//!   the AUX records that report lost data.
//!
//! **Bounded and zero-copy.** Everything borrows the input (a memory map): AUX data,
//! strings, the build-id table. Records are read one at a time. No length field is used
//! to allocate before it is checked against the bytes that are there: the attrs (at most
//! one per `attr_size` bytes of a section inside the file), their ids (all together at
//! most one per 8 bytes of the file), the AUXTRACE index and the event descriptions
//! (counts against their sections), and an AUXTRACE record's data (against the data
//! section). Malformed input is an
//! [`Error`] naming its byte offset, never a panic (`fuzz/`'s `perf_data` target).
//!
//! **Why not `linux-perf-data`** (0.13, the crate samply uses; measured, see
//! docs/perf-data.md). It reads through `io::Read + Seek` and copies every record, AUX
//! buffers included, into a `Vec` resized to the record's size field unchecked: an
//! AUXTRACE record whose size was damaged to 2^40 aborted the process ("memory allocation
//! of 1099511627816 bytes failed", SIGABRT; this reader: an error at offset 0x4b0). It
//! leaves AUXTRACE_INFO, TIME_CONV, AUX, ITRACE_START and KSYMBOL unparsed, its errors
//! carry no offset, and it pulls in prost and byteorder. On a perf.data of 64 MiB of AUX
//! data (two 32 MiB AUXTRACE buffers, `datasets/examples/perf_data_file.rs`) it walked
//! the records in 76 ms (median of 7); this reader walks the same bytes in memory in
//! 0.014 ms (it borrows the buffers; 40 ms with a `fs::read` of the file first).
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
//! Pipe mode (`perf record -o -`, `perf inject -o -`) is read too: its attributes come
//! from HEADER_ATTR records, its features from HEADER_FEATURE records. Compressed records
//! (`perf record -z`) are `Record::Other` in [`PerfData::records`];
//! [`PerfData::for_each_record`] gives the records inside them in their place
//! ([`compressed`]). Not read: big-endian files, the other features.

pub mod attr;
pub mod aux;
pub mod compressed;
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
