//! The flame graph's stacks as a pprof profile (`profile.proto`, gzipped): what `go tool
//! pprof`, Pyroscope, Grafana and Cloud Profiler read.
//!
//! - **Samples** are the stacks of [`crate::stacks`] with a weight of their own, each with
//!   two values: `instructions` and, when the trace has them, `cycles` (both of type
//!   `count`; instructions are the default sample type). A stack's frames are functions,
//!   so pprof's flat and cumulative numbers are the flame graph's widths.
//! - **Locations** are one per function (the stacks know functions, not addresses): at the
//!   function's first byte, with one line naming the function.
//! - **Functions** carry their source file and the line of their first instruction (DWARF)
//!   when the image has them.
//! - **Mappings** are the images: code range, path, build-id (GNU build-id note, in hex as
//!   `perf` and pprof print it).
//!
//! Frames of no symbol (`image+0xoffset`, `[gap]`, a perf.data thread's root frame) are
//! functions with a name only.
//!
//! Protocol Buffers are written by hand ([`Pb`]): the profile needs five message types of
//! varints and length-delimited fields, a few dozen lines, where `prost` would bring a
//! build-time code generator (and `protoc`) into the workspace for them. The profile is
//! streamed: samples are encoded one by one into the gzip stream, and the tables they
//! refer to (strings, functions, locations, mappings) follow them, which protobuf allows
//! (a message's fields may come in any order; repeated fields keep theirs). gzip is flate2
//! with its pure-Rust backend, already in the lock file (png, which the tests read
//! screenshots with, uses it).

use std::collections::HashMap;
use std::io::Write;

use anyhow::{Context as _, Result};
use flate2::write::GzEncoder;
use flate2::Compression;

use crate::source::{warn_once, Source};
use crate::stacks::stacks_of;

/// A protobuf message being written: fields appended in wire format.
#[derive(Default)]
pub struct Pb {
    pub buf: Vec<u8>,
}

/// Wire types.
const VARINT: u8 = 0;
const LEN: u8 = 2;

impl Pb {
    pub fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.varint((field as u64) << 3 | wire as u64);
    }

    /// A `uint64`/`int64`/`bool` field; zero is left out (proto3's default).
    pub fn uint(&mut self, field: u32, v: u64) {
        if v != 0 {
            self.key(field, VARINT);
            self.varint(v);
        }
    }

    /// An `int64` field: negative values take ten bytes (two's complement), as protobuf
    /// encodes them.
    pub fn int(&mut self, field: u32, v: i64) {
        self.uint(field, v as u64);
    }

    /// A `bytes` or `string` field, written even when empty (a string table's first
    /// entry is the empty string, and its place counts).
    pub fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, LEN);
        self.varint(b.len() as u64);
        self.buf.extend_from_slice(b);
    }

    /// An embedded message.
    pub fn message(&mut self, field: u32, m: &Pb) {
        self.bytes(field, &m.buf);
    }

    /// A packed repeated varint field (left out when empty).
    pub fn packed(&mut self, field: u32, vs: impl IntoIterator<Item = u64>) {
        let mut p = Pb::default();
        for v in vs {
            p.varint(v);
        }
        if !p.buf.is_empty() {
            self.bytes(field, &p.buf);
        }
    }
}

/// The fields of `profile.proto` this writer uses.
mod field {
    pub const SAMPLE_TYPE: u32 = 1;
    pub const SAMPLE: u32 = 2;
    pub const MAPPING: u32 = 3;
    pub const LOCATION: u32 = 4;
    pub const FUNCTION: u32 = 5;
    pub const STRING_TABLE: u32 = 6;
    pub const PERIOD_TYPE: u32 = 11;
    pub const PERIOD: u32 = 12;
    pub const COMMENT: u32 = 13;
    pub const DEFAULT_SAMPLE_TYPE: u32 = 14;
}

/// Strings by index, the empty string first (`profile.proto` requires it).
struct Strings {
    list: Vec<String>,
    ids: HashMap<String, u64>,
}

impl Strings {
    fn new() -> Self {
        Strings {
            list: vec![String::new()],
            ids: [(String::new(), 0)].into(),
        }
    }

    fn id(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.ids.get(s) {
            return i;
        }
        let i = self.list.len() as u64;
        self.list.push(s.to_string());
        self.ids.insert(s.to_string(), i);
        i
    }
}

/// An image as a mapping.
struct Mapping {
    start: u64,
    limit: u64,
    file: String,
    build_id: String,
    lines: bool,
}

/// What the images say of a function: its mapping, first byte, file and line.
struct Place {
    mapping: usize,
    address: u64,
    file: String,
    line: u32,
}

/// Where the functions of `names` are, from the images of every input of `src` (a
/// dataset's bundles each with their own; the first to know a name wins), and the images.
fn places(
    src: &mut Source,
    names: &[String],
    warnings: &mut Vec<String>,
) -> Result<(Vec<Mapping>, HashMap<String, Place>)> {
    let wanted: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    let mut mappings: Vec<Mapping> = Vec::new();
    let mut by_image: HashMap<(String, String), usize> = HashMap::new();
    let mut out: HashMap<String, Place> = HashMap::new();
    let mut ws = Vec::new();
    src.each(&mut ws, |input, _| {
        for im in &input.symbols.images {
            let (start, limit) = im.code_range();
            let path = im.spec.path.display().to_string();
            let build_id = im.build_id.clone().unwrap_or_default();
            let key = (path.clone(), build_id.clone());
            let next = mappings.len();
            let m = *by_image.entry(key).or_insert(next);
            if m == next {
                mappings.push(Mapping {
                    start,
                    limit,
                    file: path,
                    build_id,
                    lines: im.has_lines(),
                });
            }
            for f in im.functions() {
                if !wanted.contains(f.name.as_str()) || out.contains_key(&f.name) {
                    continue;
                }
                let (file, line) = im
                    .line(f.start)
                    .map_or((String::new(), 0), |l| (l.file, l.line));
                out.insert(
                    f.name.clone(),
                    Place {
                        mapping: m,
                        address: f.start,
                        file,
                        line,
                    },
                );
            }
        }
        Ok(())
    })?;
    for w in ws {
        warn_once(warnings, w);
    }
    Ok((mappings, out))
}

/// What [`write`] made.
#[derive(Clone, Debug, Default)]
pub struct PprofSummary {
    pub samples: u64,
    pub functions: u64,
    pub mappings: u64,
    pub instructions: u64,
    pub cycles: Option<u64>,
    pub warnings: Vec<String>,
}

/// Write the gzipped profile of a decode, or of the selected bundles of a dataset.
pub fn write(src: &mut Source, out: impl Write) -> Result<PprofSummary> {
    let mut warnings = Vec::new();
    let (st, names) = stacks_of(src, true, &mut warnings)?;
    let cycles = st.has_cycles;
    let (mappings, places) = places(src, &names, &mut warnings)?;
    let mut strings = Strings::new();
    let mut gz = GzEncoder::new(out, Compression::default());
    let mut top = Pb::default();

    let value_type = |strings: &mut Strings, t: &str| {
        let mut v = Pb::default();
        v.uint(1, strings.id(t));
        v.uint(2, strings.id("count"));
        v
    };
    let instructions = value_type(&mut strings, "instructions");
    top.message(field::SAMPLE_TYPE, &instructions);
    if cycles {
        top.message(field::SAMPLE_TYPE, &value_type(&mut strings, "cycles"));
    }
    // One instruction per unit: pprof shows the period type in its header.
    top.message(field::PERIOD_TYPE, &instructions);
    top.uint(field::PERIOD, 1);
    top.uint(field::DEFAULT_SAMPLE_TYPE, strings.id("instructions"));
    top.int(
        field::COMMENT,
        strings.id(&format!("tracemill: {}", src.title())) as i64,
    );

    // Samples: location ids are function ids + 1 (one location per function).
    let mut summary = PprofSummary::default();
    let mut err = Ok(());
    let mut sample = Pb::default();
    let mut used = vec![false; names.len()];
    st.each_stack(|frames, ins, cyc| {
        if err.is_err() {
            return;
        }
        sample.buf.clear();
        sample.packed(1, frames.iter().map(|&f| f as u64 + 1));
        let values: &[u64] = if cycles { &[ins, cyc] } else { &[ins] };
        sample.packed(2, values.iter().copied());
        for &f in frames {
            used[f as usize] = true;
        }
        top.message(field::SAMPLE, &sample);
        summary.samples += 1;
        summary.instructions += ins;
        if cycles {
            *summary.cycles.get_or_insert(0) += cyc;
        }
        // Out in pieces: a large trace has millions of stacks.
        if top.buf.len() >= 1 << 20 {
            err = gz.write_all(&top.buf);
            top.buf.clear();
        }
    });
    err.context("writing the profile")?;

    for (i, m) in mappings.iter().enumerate() {
        let mut p = Pb::default();
        p.uint(1, i as u64 + 1);
        p.uint(2, m.start);
        p.uint(3, m.limit);
        p.uint(5, strings.id(&m.file));
        p.uint(6, strings.id(&m.build_id));
        p.uint(7, 1);
        p.uint(8, m.lines as u64);
        p.uint(9, m.lines as u64);
        top.message(field::MAPPING, &p);
    }
    for (i, name) in names.iter().enumerate() {
        if !used[i] {
            continue;
        }
        let id = i as u64 + 1;
        let place = places.get(name);
        let mut line = Pb::default();
        line.uint(1, id);
        line.int(2, place.map_or(0, |p| p.line as i64));
        let mut loc = Pb::default();
        loc.uint(1, id);
        if let Some(p) = place {
            loc.uint(2, p.mapping as u64 + 1);
            loc.uint(3, p.address);
        }
        loc.message(4, &line);
        top.message(field::LOCATION, &loc);
        let mut f = Pb::default();
        f.uint(1, id);
        f.uint(2, strings.id(name));
        f.uint(3, strings.id(name));
        if let Some(p) = place {
            f.uint(4, strings.id(&p.file));
            f.int(5, p.line as i64);
        }
        top.message(field::FUNCTION, &f);
        summary.functions += 1;
        if top.buf.len() >= 1 << 20 {
            gz.write_all(&top.buf).context("writing the profile")?;
            top.buf.clear();
        }
    }
    for s in &strings.list {
        top.bytes(field::STRING_TABLE, s.as_bytes());
    }
    gz.write_all(&top.buf).context("writing the profile")?;
    gz.finish()
        .and_then(|mut w| w.flush())
        .context("writing the profile")?;
    summary.mappings = mappings.len() as u64;
    summary.warnings = warnings;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal protobuf reader for the tests: (field, wire type, value or bytes).
    fn fields(mut b: &[u8]) -> Vec<(u32, u8, u64, Vec<u8>)> {
        fn varint(b: &mut &[u8]) -> u64 {
            let (mut v, mut shift) = (0u64, 0);
            loop {
                let x = b[0];
                *b = &b[1..];
                v |= ((x & 0x7f) as u64) << shift;
                if x < 0x80 {
                    return v;
                }
                shift += 7;
            }
        }
        let mut out = Vec::new();
        while !b.is_empty() {
            let k = varint(&mut b);
            let (f, w) = ((k >> 3) as u32, (k & 7) as u8);
            match w {
                VARINT => out.push((f, w, varint(&mut b), Vec::new())),
                LEN => {
                    let n = varint(&mut b) as usize;
                    out.push((f, w, n as u64, b[..n].to_vec()));
                    b = &b[n..];
                }
                _ => panic!("wire type {w}"),
            }
        }
        out
    }

    #[test]
    fn varints_are_base_128_little_endian() {
        for (v, want) in [
            (0u64, &[0u8][..]),
            (1, &[1]),
            (127, &[0x7f]),
            (128, &[0x80, 1]),
            (300, &[0xac, 2]),
            (
                u64::MAX,
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1],
            ),
        ] {
            let mut p = Pb::default();
            p.varint(v);
            assert_eq!(p.buf, want, "{v}");
        }
        // A negative int64 is its two's complement: ten bytes.
        let mut p = Pb::default();
        p.int(2, -1);
        assert_eq!(p.buf.len(), 11);
        assert_eq!(fields(&p.buf), [(2, VARINT, u64::MAX, vec![])]);
    }

    #[test]
    fn fields_read_back() {
        let mut inner = Pb::default();
        inner.uint(1, 150);
        inner.bytes(2, b"testing");
        let mut p = Pb::default();
        p.uint(1, 0); // left out
        p.message(3, &inner);
        p.packed(4, [3, 270, 86942]);
        p.packed(5, []);
        p.bytes(6, b"");
        // The example of the protobuf encoding guide: field 1 = 150 is 08 96 01.
        assert_eq!(&inner.buf[..3], &[0x08, 0x96, 0x01]);
        // And its packed example: 22 06 03 8e 02 9e a7 05 (field 4).
        assert_eq!(
            &p.buf[p.buf.len() - 10..p.buf.len() - 2],
            &[0x22, 0x06, 0x03, 0x8e, 0x02, 0x9e, 0xa7, 0x05]
        );
        let f = fields(&p.buf);
        assert_eq!(f.len(), 3);
        assert_eq!((f[0].0, f[0].1), (3, LEN));
        assert_eq!(
            fields(&f[0].3),
            [(1, VARINT, 150, vec![]), (2, LEN, 7, b"testing".to_vec())]
        );
        assert_eq!((f[2].0, f[2].2, f[2].3.len()), (6, 0, 0));
    }

    #[test]
    fn strings_start_empty_and_intern() {
        let mut s = Strings::new();
        assert_eq!(s.id(""), 0);
        assert_eq!(s.id("a"), 1);
        assert_eq!(s.id("b"), 2);
        assert_eq!(s.id("a"), 1);
        assert_eq!(s.list, ["", "a", "b"]);
    }
}
