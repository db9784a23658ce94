//! Trace bundles: the unit of input (DESIGN.md "Trace bundle").
//!
//! ```text
//! BUNDLE/
//!   bundle.toml      format?, rtit_ctl, ring_offset?, guaranteed_ratio?, [pt]?, [[image]], [labels]
//!   trace.rtit       the raw bytes as collected
//!   images/          code images
//!   truth/           (generated bundles) branches.parquet, summary.json
//! ```
//!
//! In `bundle.toml`, addresses and CR3 values may be integers or strings such as
//! `"0x401000"` (TOML integers are signed 64-bit, too small for kernel addresses);
//! tracemill writes them as hex strings.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use tracemill_decode::pt::config::{AddrRange, FilterKind, PtConfig};
use tracemill_decode::pt::cpu::Cpu;

/// `bundle.toml`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The trace format: `"rtit"` (the default) or `"pt"` (Intel PT).
    #[serde(default, skip_serializing_if = "TraceFormat::is_rtit")]
    pub format: TraceFormat,
    /// RTIT_CTL (spec 3.3.2). For Intel PT, IA32_RTIT_CTL (SDM 36.2.7.2; its bits are
    /// also those of perf's `intel_pt//` config): MTCFreq, CYCEn, MTCEn, TSCEn and
    /// DisRETC come from it unless `[pt]` says otherwise.
    #[serde(with = "hex_u64")]
    pub rtit_ctl: u64,
    /// The trace file, relative to the bundle (default `trace.rtit`).
    #[serde(default = "default_trace", skip_serializing_if = "is_default_trace")]
    pub trace: String,
    /// Set when the trace is a dump of the circular output buffer: RTIT_OFFSET after
    /// tracing stopped. The bytes in time order are `data[ring_offset..] ++ data[..ring_offset]`.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_hex_u64")]
    pub ring_offset: Option<u64>,
    /// Set when the trace file is a ToPA dump (Intel PT 36.2.6.2): its output regions,
    /// laid out by the table(s) and the output-pointer MSRs given here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topa: Option<Topa>,
    /// Set when the trace file is a trace-hub capture of 64-byte line writes (spec 2.3.1,
    /// 2.3.2), which may arrive out of order and hold partial lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_hub: Option<TraceHub>,
    /// TSC/bus ratio, for converting core cycles to TSC ticks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guaranteed_ratio: Option<u8>,
    #[serde(default, rename = "image", skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageEntry>,
    /// Free-form facts (host, cpu, date...); `ingest` turns them into partition columns.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// How a generated bundle was made (model options, source), for reproducing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<toml::Table>,
    /// `[pt]`: what an Intel PT decoder needs beyond IA32_RTIT_CTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pt: Option<PtFacts>,
}

/// `format` in `bundle.toml`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceFormat {
    /// Intel RTIT (Silvermont/Airmont Atom).
    #[default]
    Rtit,
    /// Intel PT.
    Pt,
}

impl TraceFormat {
    fn is_rtit(&self) -> bool {
        *self == TraceFormat::Rtit
    }
    /// The decoder's name for it.
    pub fn decode_format(self) -> tracemill_decode::sniff::TraceFormat {
        match self {
            TraceFormat::Rtit => tracemill_decode::sniff::TraceFormat::Rtit,
            TraceFormat::Pt => tracemill_decode::sniff::TraceFormat::Pt,
        }
    }
}

/// `[pt]`: the Intel PT facts IA32_RTIT_CTL does not hold, named as perf names them
/// where it records them. Every key is optional.
///
/// ```toml
/// format = "pt"
/// rtit_ctl = "0x2e00"        # IA32_RTIT_CTL, or perf's intel_pt config
/// [pt]
/// cpu = "6/85/4"             # family/model[/stepping]: selects the errata
/// nom_freq = 24              # MSR_PLATFORM_INFO[15:8] (perf: max_nonturbo_ratio)
/// tsc_ctc_ratio_n = 168      # CPUID.15H:EBX
/// tsc_ctc_ratio_d = 2        # CPUID.15H:EAX
/// [[pt.filter]]              # IA32_RTIT_ADDRn_A/B, both ends inclusive
/// kind = "filter"            # or "stop"
/// from = "0x401000"
/// to = "0x401fff"
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtFacts {
    /// `"F/M[/S]"`, as CPUID reports them (decimal, or `0x` hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// MTCFreq; default: IA32_RTIT_CTL[17:14].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtc_freq: Option<u8>,
    /// The maximum non-turbo ratio (perf: `max_nonturbo_ratio`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nom_freq: Option<u8>,
    /// TSC : core crystal clock ratio, CPUID.15H:EBX / CPUID.15H:EAX.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tsc_ctc_ratio_n: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tsc_ctc_ratio_d: Option<u32>,
    /// RET compression on; default: IA32_RTIT_CTL.DisRETC clear.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ret_compression: Option<bool>,
    /// CYC, MTC, TSC packets enabled; default: CYCEn, MTCEn, TSCEn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cyc: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtc: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tsc: Option<bool>,
    /// IP ranges.
    #[serde(default, rename = "filter", skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<PtFilter>,
}

/// `[[pt.filter]]`: one IP range.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtFilter {
    pub kind: PtFilterKind,
    #[serde(with = "hex_u64")]
    pub from: u64,
    #[serde(with = "hex_u64")]
    pub to: u64,
}

/// What a `[[pt.filter]]` range does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PtFilterKind {
    /// Trace only inside (ADDRn_CFG 1).
    Filter,
    /// Stop tracing on entering (ADDRn_CFG 2).
    Stop,
}

impl Manifest {
    /// The Intel PT decoder's configuration: IA32_RTIT_CTL (`rtit_ctl`), then `[pt]`.
    /// An unknown `cpu` is an error; a processor without an errata table entry is not
    /// (decoding goes on without errata; `Errata::for_cpu` tells).
    pub fn pt_config(&self) -> Result<PtConfig, String> {
        let mut c = PtConfig::from_rtit_ctl(self.rtit_ctl);
        let Some(f) = &self.pt else {
            return Ok(c);
        };
        if let Some(cpu) = &f.cpu {
            let cpu = cpu.parse::<Cpu>().map_err(|e| format!("[pt] cpu: {e}"))?;
            let _ = c.set_cpu(cpu);
        }
        c.mtc_freq = f.mtc_freq.unwrap_or(c.mtc_freq);
        c.nom_freq = f.nom_freq.unwrap_or(c.nom_freq);
        c.tsc_ctc_ratio_n = f.tsc_ctc_ratio_n.unwrap_or(c.tsc_ctc_ratio_n);
        c.tsc_ctc_ratio_d = f.tsc_ctc_ratio_d.unwrap_or(c.tsc_ctc_ratio_d);
        c.ret_compression = f.ret_compression.unwrap_or(c.ret_compression);
        c.cyc = f.cyc.unwrap_or(c.cyc);
        c.mtc = f.mtc.unwrap_or(c.mtc);
        c.tsc = f.tsc.unwrap_or(c.tsc);
        for r in &f.filters {
            if r.from > r.to {
                return Err(format!(
                    "[[pt.filter]] from {:#x} is above to {:#x}",
                    r.from, r.to
                ));
            }
            c.filters.push(AddrRange {
                kind: match r.kind {
                    PtFilterKind::Filter => FilterKind::Filter,
                    PtFilterKind::Stop => FilterKind::Stop,
                },
                from: r.from,
                to: r.to,
            });
        }
        Ok(c)
    }
}

fn default_trace() -> String {
    "trace.rtit".to_string()
}
fn is_default_trace(s: &str) -> bool {
    s == "trace.rtit"
}

/// `[topa]`: a dump of ToPA output (Intel PT 36.2.6.2). The trace file holds the output
/// regions' bytes (each at its `file_offset`); the tables and the MSR values read after
/// tracing stopped say in which order they were written. See `crate::collected`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topa {
    /// IA32_RTIT_OUTPUT_BASE after tracing stopped: the base of the current table.
    #[serde(with = "hex_u64")]
    pub output_base: u64,
    /// IA32_RTIT_OUTPUT_MASK_PTRS after tracing stopped: bits 31:7 the current entry of
    /// that table (MaskOrTableOffset), bits 63:32 the offset of the next write in its
    /// region (OutputOffset).
    #[serde(with = "hex_u64")]
    pub output_mask_ptrs: u64,
    /// IA32_RTIT_STATUS.Stopped was set: a STOP region filled (its offset then says
    /// size - 1, the region is full).
    #[serde(default, skip_serializing_if = "is_false")]
    pub stopped: bool,
    /// The output went round the circular table chain at least once: the oldest bytes
    /// sit at the output pointer. Otherwise the trace starts at entry 0 of the first table.
    #[serde(default, skip_serializing_if = "is_false")]
    pub wrapped: bool,
    /// The tables as read from memory. The first is the one tracing was enabled with.
    #[serde(rename = "table")]
    pub tables: Vec<TopaTable>,
    /// Where each output region's bytes are in the trace file.
    #[serde(default, rename = "region")]
    pub regions: Vec<TopaRegion>,
}

/// One ToPA table: its physical address and its 64-bit entries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopaTable {
    #[serde(with = "hex_u64")]
    pub base: u64,
    pub entries: Vec<Hex>,
}

/// One output region's bytes in the trace file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopaRegion {
    /// Physical address (the entry's base).
    #[serde(with = "hex_u64")]
    pub base: u64,
    /// Where its bytes start in the trace file; its length is the entry's size.
    #[serde(with = "hex_u64")]
    pub file_offset: u64,
}

/// A `u64` written as a hex string, read from an integer or a string.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Hex(#[serde(with = "hex_u64")] pub u64);

/// `[trace_hub]`: the trace file is a sequence of 80-byte line-write records (line
/// address, byte-valid mask, 64 data bytes; `crate::collected`) captured at the debug
/// port the output was directed to (spec 2.3.1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceHub {
    /// RTIT_BASE_ADDR (the base used is `base & !limit_mask`).
    #[serde(with = "hex_u64")]
    pub base: u64,
    /// RTIT_LIMIT_MASK: the output range's size minus 1 (a power of two, >= 64).
    #[serde(with = "hex_u64")]
    pub limit_mask: u64,
    /// RTIT_OFFSET when tracing was enabled: where the first byte went.
    #[serde(default, with = "hex_u64", skip_serializing_if = "is_zero")]
    pub start_offset: u64,
}

fn is_false(b: &bool) -> bool {
    !*b
}
fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// How to read an image file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ImageKind {
    /// An ELF file: its executable PT_LOAD segments.
    #[default]
    Elf,
    /// Raw bytes loaded at `base`.
    Raw,
}

/// One `[[image]]` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageEntry {
    /// Path relative to the bundle directory (or absolute).
    pub path: String,
    /// Load address: for raw images where byte 0 goes; for ELF files where the lowest
    /// PT_LOAD segment goes (omit to use the ELF's own addresses).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_hex_u64")]
    pub base: Option<u64>,
    /// The address space (CR3) the image belongs to; omit for images shared by all.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_hex_u64")]
    pub cr3: Option<u64>,
    /// The address space of a recording's sideband the image belongs to (perf.data: a
    /// process's key, not a CR3: the decode selects it from the switch records, not from
    /// PIPs); `None` for images every space shares. Made by the perf.data reader, never
    /// read from or written to `bundle.toml`.
    #[serde(skip)]
    pub space: Option<u64>,
    #[serde(default)]
    pub kind: ImageKind,
    /// Raw images: a symbol file naming their functions for `tracemill report` (`nm`
    /// output at run-time addresses), relative to the bundle directory. Decoding does not
    /// read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbols: Option<String>,
}

/// Errors reading a bundle.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Toml {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
}

impl Manifest {
    pub fn new(rtit_ctl: u64) -> Self {
        Manifest {
            format: TraceFormat::Rtit,
            rtit_ctl,
            trace: default_trace(),
            ring_offset: None,
            topa: None,
            trace_hub: None,
            guaranteed_ratio: None,
            images: Vec::new(),
            labels: BTreeMap::new(),
            generator: None,
            pt: None,
        }
    }

    /// Read `DIR/bundle.toml` (a regular file of at most [`MAX_MANIFEST_BYTES`]).
    pub fn load(dir: &Path) -> Result<Self, BundleError> {
        let path = dir.join("bundle.toml");
        let text = read_manifest_text(&path).map_err(|source| BundleError::Io {
            path: path.clone(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| BundleError::Toml { path, source })
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a manifest serializes")
    }

    /// Path of the trace file.
    pub fn trace_path(&self, dir: &Path) -> PathBuf {
        dir.join(&self.trace)
    }
}

/// The largest `bundle.toml` read. A manifest is a few KiB (a ToPA table of thousands of
/// entries, or hundreds of images and labels, stay far below this); a `bundle.toml` that is
/// a link to `/dev/zero` or a huge file must not be read into memory until it runs out.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// Opens `path` for reading when it is a regular file (symbolic links followed). A FIFO,
/// a device, a socket or a directory is an error of kind `InvalidInput` that says which.
///
/// The open itself does not block: a FIFO that no process writes would otherwise hang the
/// open for ever (and with it a whole night's ingest), before its kind could be checked.
pub fn open_regular(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let t = f.metadata()?.file_type();
    if t.is_file() {
        return Ok(f);
    }
    let what = if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("is {what}, not a regular file"),
    ))
}

/// The text of a `bundle.toml`: a regular file of at most [`MAX_MANIFEST_BYTES`], UTF-8.
pub fn read_manifest_text(path: &Path) -> io::Result<String> {
    let f = open_regular(path)?;
    read_limited(f, MAX_MANIFEST_BYTES)
}

/// All of `f` as UTF-8 text, refused past `max` bytes (checked as read, so that a file
/// growing while it is read is refused too).
pub fn read_limited(f: File, max: u64) -> io::Result<String> {
    let mut buf = Vec::new();
    f.take(max + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("is larger than {} KiB, the most tracemill reads", max >> 10),
        ));
    }
    String::from_utf8(buf)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "is not UTF-8 text"))
}

/// Accepts an integer or a string ("0x1f", "31"); writes a hex string.
pub mod hex_u64 {
    use super::*;

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:#x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_any(HexVisitor)
    }

    pub(super) struct HexVisitor;

    impl Visitor<'_> for HexVisitor {
        type Value = u64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an integer or a string like \"0x401000\"")
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom("negative value"))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
            parse_u64(v).ok_or_else(|| E::custom(format!("not a number: {v:?}")))
        }
    }
}

/// Optional [`hex_u64`].
pub mod opt_hex_u64 {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_str(&format!("{v:#x}")),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        d.deserialize_any(hex_u64::HexVisitor).map(Some)
    }
}

/// Parse "0x1f", "1f" is not accepted (ambiguous); "31", "0b101", "0o17" are.
pub fn parse_u64(s: &str) -> Option<u64> {
    let t = s.trim().replace('_', "");
    let (digits, radix) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (h.to_string(), 16)
    } else if let Some(b) = t.strip_prefix("0b") {
        (b.to_string(), 2)
    } else if let Some(o) = t.strip_prefix("0o") {
        (o.to_string(), 8)
    } else {
        (t, 10)
    };
    u64::from_str_radix(&digits, radix).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trips_and_reads_hand_written_forms() {
        let mut m = Manifest::new(0x2E0D);
        m.ring_offset = Some(0x1234);
        m.guaranteed_ratio = Some(20);
        m.images.push(ImageEntry {
            path: "images/kernel".into(),
            base: Some(0xFFFF_FFFF_8100_0000),
            cr3: None,
            space: None,
            kind: ImageKind::Raw,
            symbols: None,
        });
        m.labels.insert("host".into(), "atom-7".into());
        let t = m.to_toml();
        assert!(t.contains("0xffffffff81000000"), "{t}");
        assert_eq!(toml::from_str::<Manifest>(&t).unwrap(), m);

        let hand = r#"
            rtit_ctl = 11789
            [[image]]
            path = "images/prog"
            base = 0x400000
        "#;
        let m: Manifest = toml::from_str(hand).unwrap();
        assert_eq!(m.rtit_ctl, 11789);
        assert_eq!(m.images[0].base, Some(0x40_0000));
        assert_eq!(m.images[0].kind, ImageKind::Elf);
        assert_eq!(m.trace, "trace.rtit");
    }

    #[test]
    fn pt_bundles_say_their_format_and_facts() {
        let hand = r#"
            format = "pt"
            rtit_ctl = "0x26e00"      # MTCEn, TSCEn, DisRETC, BranchEn, MTCFreq 9
            [pt]
            cpu = "6/85/4"
            nom_freq = 24
            tsc_ctc_ratio_n = 168
            tsc_ctc_ratio_d = 2
            [[pt.filter]]
            kind = "stop"
            from = "0x401000"
            to = 0x401fff
        "#;
        let m: Manifest = toml::from_str(hand).unwrap();
        assert_eq!(m.format, TraceFormat::Pt);
        let c = m.pt_config().unwrap();
        assert_eq!(c.mtc_freq, 9);
        assert!(c.tsc && c.mtc && !c.cyc && !c.ret_compression);
        assert!(c.errata.skz84);
        assert_eq!(
            (c.nom_freq, c.tsc_ctc_ratio_n, c.tsc_ctc_ratio_d),
            (24, 168, 2)
        );
        assert_eq!(c.filters.len(), 1);
        assert!(!c.ip_in_filter(0x401800));
        // It writes back the same.
        assert_eq!(toml::from_str::<Manifest>(&m.to_toml()).unwrap(), m);
        // RTIT bundles do not change: no format key, the default.
        let m = Manifest::new(0x2E0D);
        assert!(!m.to_toml().contains("format"));
        assert_eq!(
            toml::from_str::<Manifest>(&m.to_toml()).unwrap().format,
            TraceFormat::Rtit
        );
        // Mistakes are named (keys it does not know are ignored, as in all of bundle.toml).
        let bad: Manifest =
            toml::from_str("format = \"pt\"\nrtit_ctl = 0\n[pt]\ncpu = \"6\"\n").unwrap();
        assert!(bad.pt_config().unwrap_err().contains("cpu"));
        assert!(toml::from_str::<Manifest>("format = \"etm\"\nrtit_ctl = 0\n").is_err());
    }

    #[test]
    fn numbers_parse_in_several_radixes() {
        assert_eq!(parse_u64("0x2e0d"), Some(0x2E0D));
        assert_eq!(parse_u64("11789"), Some(11789));
        assert_eq!(parse_u64("0b101"), Some(5));
        assert_eq!(
            parse_u64("0xffff_ffff_8100_0000"),
            Some(0xFFFF_FFFF_8100_0000)
        );
        assert_eq!(parse_u64("zz"), None);
    }
}
