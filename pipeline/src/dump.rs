//! `tracemill dump`: a packet listing like libipt's ptdump.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Result;
use tracemill_decode::config::{mtc_shift, TraceConfig};
use tracemill_decode::last_ip::LastIp;
use tracemill_decode::packet::{Packet, PacketReader};
use tracemill_decode::stream::TraceStream;
use tracemill_decode::sync::next_psb;

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
    let mut s = Stats {
        bytes: stream.len(),
        skipped: first.unwrap_or(stream.len()),
        ..Stats::default()
    };
    let Some(start) = first else {
        return s;
    };
    for p in PacketReader::new(stream, start, stream.len(), cfg.cycle_acc) {
        match p {
            Ok(p) => *s.by_type.entry(p.packet.name()).or_default() += 1,
            Err(_) => s.errors += 1,
        }
    }
    s
}

/// Write the listing (or the stats) to `out`.
pub fn dump(
    stream: &TraceStream<'_>,
    cfg: &TraceConfig,
    with_stats: bool,
    out: &mut dyn Write,
) -> Result<()> {
    if with_stats {
        let s = stats(stream, cfg);
        writeln!(out, "bytes          {}", s.bytes)?;
        if s.skipped > 0 {
            writeln!(out, "before PSB     {} (not parsed)", s.skipped)?;
        }
        for name in Packet::NAMES {
            let n = s.by_type.get(name).copied().unwrap_or(0);
            writeln!(out, "{name:<14} {n}")?;
        }
        writeln!(out, "errors         {}", s.errors)?;
        return Ok(());
    }
    let first = next_psb(stream, 0);
    let Some(start) = first else {
        writeln!(out, "no PSB in {} bytes: nothing to parse", stream.len())?;
        return Ok(());
    };
    if start > 0 {
        writeln!(
            out,
            "{:016x}  {:<30} skipped {start} bytes before the first PSB",
            0, ""
        )?;
    }
    let mut last = LastIp::unknown();
    let mut scratch = [0u8; 16];
    for p in PacketReader::new(stream, start, stream.len(), cfg.cycle_acc) {
        let p = match p {
            Ok(p) => p,
            Err(e) => {
                last.forget();
                writeln!(out, "{:016x}  {:<30} error: {}", e.offset, "", e.kind)?;
                continue;
            }
        };
        let raw = stream.window(p.offset, p.size as usize, &mut scratch);
        let hex: Vec<String> = raw.iter().map(|b| format!("{b:02x}")).collect();
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
        writeln!(
            out,
            "{:016x}  {:<30} {:<12} {}",
            p.offset,
            hex.join(" "),
            p.packet.name(),
            fields
        )?;
    }
    Ok(())
}
