//! `tracemill dump`: a packet listing like libipt's ptdump, of RTIT or Intel PT traces;
//! for Intel PT also libipt ptdump's own listing (`--ptdump`).

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Result;
use tracemill_decode::pt::{
    self,
    last_ip::LastIp as PtLastIp,
    listing,
    listing::ListingOptions,
    packet::{AddressMode, IpCompression},
    PtConfig,
};
use tracemill_decode::rtit::config::{mtc_shift, TraceConfig};
use tracemill_decode::rtit::last_ip::LastIp;
use tracemill_decode::rtit::packet::{Packet, PacketReader};
use tracemill_decode::rtit::sync::next_psb;
use tracemill_decode::stream::TraceStream;

/// Counts for `--stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub bytes: u64,
    /// Bytes before the first PSB (not parsed).
    pub skipped: u64,
    pub by_type: BTreeMap<&'static str, u64>,
    pub errors: u64,
}

/// Count packets by type.
pub fn stats(stream: &TraceStream<'_>, cfg: &TraceConfig) -> Stats {
    let first = next_psb(stream, 0);
    let packets = first
        .map(|start| PacketReader::new(stream, start, stream.len(), cfg.cycle_acc))
        .into_iter()
        .flatten()
        .map(|p| p.map(|p| p.packet.name()));
    Stats::tally(stream.len(), first, packets)
}

impl Stats {
    /// The counts of `packets` (their names, or errors), read from the first PSB `first`
    /// of a trace of `len` bytes (none: nothing parsed).
    fn tally<E>(
        len: u64,
        first: Option<u64>,
        packets: impl Iterator<Item = std::result::Result<&'static str, E>>,
    ) -> Stats {
        let mut s = Stats {
            bytes: len,
            skipped: first.unwrap_or(len),
            ..Stats::default()
        };
        for p in packets {
            match p {
                Ok(name) => *s.by_type.entry(name).or_default() += 1,
                Err(_) => s.errors += 1,
            }
        }
        s
    }

    /// `--stats`' lines: bytes, bytes before the first PSB, a count per name of `names`
    /// (the format's packets, in its order), errors.
    fn write(&self, names: &[&str], out: &mut dyn Write) -> Result<()> {
        writeln!(out, "bytes          {}", self.bytes)?;
        if self.skipped > 0 {
            writeln!(out, "before PSB     {} (not parsed)", self.skipped)?;
        }
        for name in names {
            let n = self.by_type.get(name).copied().unwrap_or(0);
            writeln!(out, "{name:<14} {n}")?;
        }
        writeln!(out, "errors         {}", self.errors)?;
        Ok(())
    }
}

/// Write the listing (or the stats) to `out`.
pub fn dump(
    stream: &TraceStream<'_>,
    cfg: &TraceConfig,
    with_stats: bool,
    out: &mut dyn Write,
) -> Result<()> {
    if with_stats {
        return stats(stream, cfg).write(&Packet::NAMES, out);
    }
    let columns = Columns {
        bytes: 30,
        name: 12,
        trim: false,
    };
    entries(stream, cfg, &mut |e| columns.write(out, stream.len(), e))?;
    Ok(())
}

/// The widths of a listing's columns: the packet's bytes and its name (RTIT's listing
/// keeps the blanks a line ends with; Intel PT's, like ptdump's, drops them).
struct Columns {
    bytes: usize,
    name: usize,
    trim: bool,
}

impl Columns {
    /// `e` as the listing's line (`len`: the trace's length).
    fn write(&self, out: &mut dyn Write, len: u64, e: Entry<'_>) -> std::io::Result<()> {
        let w = self.bytes;
        match e {
            Entry::NoPsb => writeln!(out, "no PSB in {len} bytes: nothing to parse"),
            Entry::Skipped(n) => writeln!(
                out,
                "{:016x}  {:<w$} skipped {n} bytes before the first PSB",
                0, ""
            ),
            Entry::Error { offset, message } => {
                writeln!(out, "{offset:016x}  {:<w$} error: {message}", "")
            }
            Entry::Packet {
                offset,
                bytes,
                name,
                fields,
            } => {
                let hex: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
                let line = format!(
                    "{offset:016x}  {:<w$} {name:<n$} {fields}",
                    hex.join(" "),
                    n = self.name
                );
                let line = if self.trim { line.trim_end() } else { &line };
                writeln!(out, "{line}")
            }
        }
    }
}

/// One line of a packet listing, as [`entries`] and [`pt_entries`] give them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry<'a> {
    /// The trace has no PSB: nothing is parsed (the only entry).
    NoPsb,
    /// This many bytes before the first PSB, not parsed (offset 0).
    Skipped(u64),
    /// Bytes at `offset` that do not parse; parsing resumes at the next PSB.
    Error { offset: u64, message: &'a str },
    /// A packet: its bytes, name and fields (IPs decompressed).
    Packet {
        offset: u64,
        bytes: &'a [u8],
        name: &'static str,
        fields: &'a str,
    },
}

/// The listing of an RTIT trace, entry by entry (what `tracemill dump` prints).
pub fn entries(
    stream: &TraceStream<'_>,
    cfg: &TraceConfig,
    f: &mut dyn FnMut(Entry<'_>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let first = next_psb(stream, 0);
    let Some(start) = first else {
        return f(Entry::NoPsb);
    };
    if start > 0 {
        f(Entry::Skipped(start))?;
    }
    let mut last = LastIp::unknown();
    let mut scratch = [0u8; 16];
    for p in PacketReader::new(stream, start, stream.len(), cfg.cycle_acc) {
        let p = match p {
            Ok(p) => p,
            Err(e) => {
                last.forget();
                f(Entry::Error {
                    offset: e.offset,
                    message: &e.kind.to_string(),
                })?;
                continue;
            }
        };
        let raw = stream.window(p.offset, p.size as usize, &mut scratch);
        let fields = match p.packet {
            Packet::Tnt(t) => (0..t.len)
                .map(|i| if t.taken(i) { '!' } else { '.' })
                .collect::<String>(),
            Packet::Tip(pl) | Packet::Fup(_, pl) => {
                let how = if pl.zext {
                    "zext"
                } else if pl.size == 6 {
                    "full"
                } else {
                    "upd"
                };
                match last.update(&pl) {
                    Some(ip) => format!("{ip:#x}  ({} bytes, {how})", pl.size),
                    None => format!(
                        "?{:0w$x}  ({} bytes, {how}, LAST_LIP unknown)",
                        pl.bits,
                        pl.size,
                        w = 2 * pl.size as usize
                    ),
                }
            }
            Packet::Pip { cr3, pg } => format!("cr3={cr3:#x} pg={}", pg as u8),
            Packet::Mtc { rng, tsc } => {
                format!("{tsc:#04x}  (tsc bits {}..)", mtc_shift(rng))
            }
            Packet::Sts { acbr, ecbr, tsc } => {
                format!("tsc={tsc:#x} ratio={acbr} effective={ecbr}")
            }
            Packet::Cyc { value, .. } => format!("{value}"),
            Packet::Psb | Packet::TraceStop => String::new(),
        };
        f(Entry::Packet {
            offset: p.offset,
            bytes: raw,
            name: p.packet.name(),
            fields: &fields,
        })?;
    }
    Ok(())
}

/// Adapts an `io::Write` to the `fmt::Write` the decoder's listing writes to, keeping
/// the I/O error (a closed pipe) that `fmt::Error` cannot carry.
struct IoFmt<'a> {
    out: &'a mut dyn Write,
    err: Option<std::io::Error>,
}

impl std::fmt::Write for IoFmt<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.out.write_all(s.as_bytes()).map_err(|e| {
            self.err = Some(e);
            std::fmt::Error
        })
    }
}

/// libipt ptdump's listing of an Intel PT trace (`tracemill dump --ptdump`).
pub fn ptdump(
    stream: &TraceStream<'_>,
    opts: &ListingOptions,
    cfg: &PtConfig,
    out: &mut dyn Write,
) -> Result<()> {
    let mut w = IoFmt { out, err: None };
    if listing::ptdump(stream, opts, cfg, &mut w).is_err() {
        return Err(w
            .err
            .unwrap_or_else(|| std::io::Error::other("formatting the listing failed"))
            .into());
    }
    Ok(())
}

/// Counts per Intel PT packet type (packets read PSB-bounded, as decoding reads them).
pub fn pt_stats(stream: &TraceStream<'_>, cfg: &PtConfig) -> Stats {
    let first = pt::sync::next_psb(stream, 0);
    let packets = first
        .map(|start| pt::PacketReader::new(stream, start, stream.len(), cfg.errata))
        .into_iter()
        .flatten()
        .map(|p| p.map(|p| p.packet.name()));
    Stats::tally(stream.len(), first, packets)
}

/// tracemill's listing of an Intel PT trace (or its stats): offset, bytes, packet, and
/// its fields with IPs decompressed (Last IP reset at each PSB, SDM 36.4.2.2). Packets
/// are read as the decoder reads them: from the first PSB, never across a PSB, and
/// after an error from the next PSB.
pub fn dump_pt(
    stream: &TraceStream<'_>,
    cfg: &PtConfig,
    with_stats: bool,
    out: &mut dyn Write,
) -> Result<()> {
    if with_stats {
        return pt_stats(stream, cfg).write(&pt::Packet::NAMES, out);
    }
    let columns = Columns {
        bytes: 47,
        name: 10,
        trim: true,
    };
    pt_entries(stream, cfg, &mut |e| columns.write(out, stream.len(), e))?;
    Ok(())
}

/// tracemill's listing of an Intel PT trace, entry by entry (what `tracemill dump`
/// prints for it).
pub fn pt_entries(
    stream: &TraceStream<'_>,
    cfg: &PtConfig,
    f: &mut dyn FnMut(Entry<'_>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let Some(start) = pt::sync::next_psb(stream, 0) else {
        return f(Entry::NoPsb);
    };
    if start > 0 {
        f(Entry::Skipped(start))?;
    }
    let mut last = PtLastIp::new();
    let mut scratch = [0u8; 16];
    for p in pt::PacketReader::new(stream, start, stream.len(), cfg.errata) {
        let p = match p {
            Ok(p) => p,
            Err(e) => {
                f(Entry::Error {
                    offset: e.offset,
                    message: &e.kind.to_string(),
                })?;
                continue;
            }
        };
        let raw = stream.window(p.offset, p.size as usize, &mut scratch);
        if p.packet == pt::Packet::Psb {
            last.reset();
        }
        let fields = pt_fields(&p.packet, &mut last);
        f(Entry::Packet {
            offset: p.offset,
            bytes: raw,
            name: p.packet.name(),
            fields: &fields,
        })?;
    }
    Ok(())
}

/// The fields of one Intel PT packet in tracemill's listing.
fn pt_fields(p: &pt::Packet, last: &mut PtLastIp) -> String {
    use pt::Packet as P;
    let flag = |b: bool, s: &str| if b { s.to_string() } else { String::new() };
    match *p {
        P::Tnt8(t) | P::Tnt64(t) => (0..t.len)
            .map(|i| if t.taken(i) { '!' } else { '.' })
            .collect(),
        P::Tip(ip) | P::TipPge(ip) | P::TipPgd(ip) | P::Fup(ip) => {
            let how = match ip.compression {
                IpCompression::Suppressed => "suppressed",
                IpCompression::Update16 => "update 16",
                IpCompression::Update32 => "update 32",
                IpCompression::Sext48 => "sext 48",
                IpCompression::Update48 => "update 48",
                IpCompression::Full => "full",
            };
            match last.update(&ip) {
                Some(v) => format!("{v:#x}  (IPBytes {}: {how})", ip.compression.ip_bytes()),
                None => "(IPBytes 0: suppressed)".to_string(),
            }
        }
        P::Pip { cr3, nr } => format!("cr3={cr3:#x}{}", flag(nr, " nr")),
        P::ModeExec(m) => {
            let mode = match m.address_mode() {
                AddressMode::Bits64 => "64-bit",
                AddressMode::Bits32 => "32-bit",
                AddressMode::Bits16 => "16-bit",
                AddressMode::Invalid => "cs.l and cs.d (invalid)",
            };
            format!("{mode}{}", flag(m.iflag, " if"))
        }
        P::ModeTsx(m) => match (m.intx, m.abort) {
            (true, false) => "in transaction",
            (false, true) => "aborted",
            (false, false) => "committed, or not transactional",
            (true, true) => "intx and abort (invalid)",
        }
        .to_string(),
        P::Tsc(v) => format!("{v:#x}"),
        P::Cbr(r) => format!("{r}"),
        P::Tma { ctc, fc } => format!("ctc={ctc:#x} fc={fc}"),
        P::Mtc(c) => format!("{c:#04x}"),
        P::Cyc(v) => format!("{v}"),
        P::Vmcs(b) => format!("{b:#x}"),
        P::Mnt(v) => format!("{v:#x}"),
        P::Exstop { ip } => flag(ip, "ip"),
        P::Mwait { hints, ext } => format!("hints={hints:#x} ext={ext:#x}"),
        // MWAIT encodings: C-state = value + 1.
        P::Pwre(w) => format!(
            "C{}.{}{}",
            (w.state + 1) & 0xF,
            (w.sub_state + 1) & 0xF,
            flag(w.hw(), " hw")
        ),
        P::Pwrx(x) => format!(
            "last C{} deepest C{} wake{}{}{}",
            (x.last + 1) & 0xF,
            (x.deepest + 1) & 0xF,
            flag(x.interrupt(), " interrupt"),
            flag(x.store(), " store"),
            flag(x.hw(), " hw")
        ),
        P::Ptw { payload, len, ip } => format!("{payload:#x} ({len} bytes){}", flag(ip, " ip")),
        P::Cfe { kind, vector, ip } => format!("type {kind} vector {vector}{}", flag(ip, " ip")),
        P::Evd { kind, payload } => format!("type {kind} {payload:#x}"),
        P::Trig {
            trbv,
            ip,
            mult,
            icnt,
        } => format!(
            "trbv={trbv:#04x}{}{}{}",
            flag(ip, " ip"),
            flag(mult, " mult"),
            icnt.map(|n| format!(" icnt={n}")).unwrap_or_default()
        ),
        P::Invalid => "(corrupt: erratum SKZ84)".to_string(),
        P::Pad | P::Psb | P::PsbEnd | P::Ovf | P::Stop => String::new(),
    }
}
