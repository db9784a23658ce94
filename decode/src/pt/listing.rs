//! libipt ptdump's packet listing, line for line, so that the two tools can be diffed
//! (`tracemill dump --ptdump`), and libipt's own test suite can check our packet layer
//! (`decode/tests/ptdump_suite.rs`).
//!
//! A line is the offset, optionally the raw bytes, the packet name, its payload, and for
//! some packets a tracked value (`ip` with `--lastip`, `cr3`, `vmcs`, `em` with
//! `--exec-mode`, `tsc` with `--time`, `fcr` with `--tcal`, `type` for CFE and EVD).
//! Problems are lines of their own in brackets, `[offset: what: why]`, printed before
//! the line of the packet they concern, with libipt's error texts.
//!
//! What makes this ptdump's listing rather than tracemill's (`tracemill dump`), all as
//! libipt does it:
//!
//! - Packets are not bounded by PSBs: a packet whose payload runs into a PSB takes those
//!   bytes. After a packet that does not decode, the listing resynchronises at the first
//!   PSB that starts no more than 15 bytes before the failing packet (the PSB may have
//!   been swallowed by the packet before), and forgets what it tracked.
//! - A packet cut off by the end of the trace ends the listing without a word.
//! - Last IP is not reset at a PSB (the hardware resets it; ptdump only tracks what
//!   the payloads say).
//! - PWRE's HW flag is bit 3 of its first payload byte (the SDM says bit 7).
//! - Time comes from [`super::time`], which computes what libipt's `pt_time.c` does.
//!
//! The listing is a pure function of the bytes and the options, written to any
//! [`fmt::Write`] a line at a time: memory does not grow with the trace.

use std::fmt::{self, Write};

use super::config::PtConfig;
use super::cpu::{parse_c_number, Cpu, Errata};
use super::last_ip::{LastIp, NoIp};
use super::packet::{
    parse, AddressMode, IpCompression, IpPayload, Packet, PacketErrorKind, Tnt, MAX_PACKET_LEN,
    PSB_LEN,
};
use super::sync::next_psb;
use super::time::{Calibration, Clock, TimeError, FCR_SHIFT};
use crate::stream::TraceStream;

/// ptdump's options (its command line, less the trace file). The recording facts
/// (`--cpu`, `--mtc-freq`, `--nom-freq`, `--cpuid-0x15.*`) go to a [`PtConfig`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListingOptions {
    /// `--no-sync`: start at offset 0, not at the first PSB.
    pub no_sync: bool,
    /// `--quiet`: only the bracketed problem lines.
    pub quiet: bool,
    /// `--no-pad`.
    pub no_pad: bool,
    /// `--no-timing`: no TSC, CBR, TMA, MTC or CYC lines.
    pub no_timing: bool,
    /// `--no-cyc`: no CYC lines, and CYCs left out of the time.
    pub no_cyc: bool,
    /// Not `--no-offset`.
    pub show_offset: bool,
    /// `--raw`: the packet's bytes in hex.
    pub raw: bool,
    /// `--lastip`: the IP each TIP/FUP stands for.
    pub last_ip: bool,
    /// `--exec-mode`: the addressing mode of each MODE.Exec.
    pub exec_mode: bool,
    /// `--time`: the estimated TSC at each timing packet.
    pub time: bool,
    /// `--tcal`: the calibration (FCR) at each timing packet.
    pub tcal: bool,
    /// `--time-delta`: time and calibration as the change since the last line.
    pub time_delta: bool,
    /// `--no-tcal`: no calibration (CYCs then cannot be timed).
    pub no_tcal: bool,
    /// `--no-wall-clock`: time without a TSC packet is relative, not an error.
    pub no_wall_clock: bool,
    /// `--keep-tcal-on-ovf`: an OVF keeps the calibration.
    pub keep_tcal_on_ovf: bool,
}

impl Default for ListingOptions {
    fn default() -> Self {
        ListingOptions {
            no_sync: false,
            quiet: false,
            no_pad: false,
            no_timing: false,
            no_cyc: false,
            show_offset: true,
            raw: false,
            last_ip: false,
            exec_mode: false,
            time: false,
            tcal: false,
            time_delta: false,
            no_tcal: false,
            no_wall_clock: false,
            keep_tcal_on_ovf: false,
        }
    }
}

/// A number as ptdump takes it (`strtoull(_, _, 0)`), at most `max`.
fn option_number(opt: &str, v: Option<&str>, max: u64) -> Result<u64, String> {
    let v = match v {
        Some(v) if !v.is_empty() && !v.starts_with("--") => v,
        _ => return Err(format!("{opt}: missing argument")),
    };
    match parse_c_number(v) {
        Some(n) if n <= max => Ok(n),
        Some(_) => Err(format!("{opt}: value too big: {v}")),
        None => Err(format!("{opt}: bad argument: {v}")),
    }
}

impl ListingOptions {
    /// Read ptdump's option words (`--lastip`, `--cpu 6/78`, ...), the trace file left
    /// out, into the listing options and the recording facts.
    pub fn from_ptdump_args<S: AsRef<str>>(
        args: &[S],
    ) -> Result<(ListingOptions, PtConfig), String> {
        let mut o = ListingOptions::default();
        let mut cfg = PtConfig::default();
        let mut it = args.iter().map(|s| s.as_ref());
        while let Some(a) = it.next() {
            match a {
                "--no-sync" => o.no_sync = true,
                "--quiet" => o.quiet = true,
                "--no-pad" => o.no_pad = true,
                "--no-timing" => o.no_timing = true,
                "--no-cyc" => o.no_cyc = true,
                "--no-offset" => o.show_offset = false,
                "--raw" => o.raw = true,
                "--lastip" => o.last_ip = true,
                "--exec-mode" => o.exec_mode = true,
                "--time" | "--tcal" => {
                    if o.time || o.tcal {
                        return Err("specify either --time or --tcal".into());
                    }
                    o.time = a == "--time";
                    o.tcal = a == "--tcal";
                }
                "--time-delta" => o.time_delta = true,
                "--no-tcal" => o.no_tcal = true,
                "--no-wall-clock" => o.no_wall_clock = true,
                "--keep-tcal-on-ovf" => o.keep_tcal_on_ovf = true,
                "--cpu" => match it.next() {
                    None => return Err("--cpu: missing argument".into()),
                    Some("none") => {
                        cfg.cpu = None;
                        cfg.errata = Errata::default();
                    }
                    Some(v) => {
                        let cpu: Cpu = v.parse().map_err(|e: super::cpu::BadCpu| e.to_string())?;
                        // An unknown processor is the listing's first line, as in ptdump.
                        let _ = cfg.set_cpu(cpu);
                    }
                },
                "--mtc-freq" => cfg.mtc_freq = option_number(a, it.next(), 0xFF)? as u8,
                "--nom-freq" => cfg.nom_freq = option_number(a, it.next(), 0xFF)? as u8,
                "--cpuid-0x15.eax" => {
                    cfg.tsc_ctc_ratio_d = option_number(a, it.next(), 0xFFFF_FFFF)? as u32
                }
                "--cpuid-0x15.ebx" => {
                    cfg.tsc_ctc_ratio_n = option_number(a, it.next(), 0xFFFF_FFFF)? as u32
                }
                _ => return Err(format!("unknown option: {a}")),
            }
        }
        Ok((o, cfg))
    }

    fn track_time(&self) -> bool {
        self.time || self.tcal
    }
}

/// libipt's error texts (`pt_errstr`) for what went wrong.
fn time_errstr(e: TimeError) -> &'static str {
    match e {
        TimeError::NoTime => "no timing information",
        TimeError::BadPacket => "unknown packet",
        TimeError::BadContext => "unexpected packet context",
        TimeError::NoRatio => "bad configuration",
        TimeError::Inconsistent => "internal error",
    }
}

fn decode_errstr(e: &PacketErrorKind) -> &'static str {
    match e {
        PacketErrorKind::UnknownOpcode { .. } => "unknown opcode",
        PacketErrorKind::Truncated { .. } => "reached end of trace stream",
        _ => "unknown packet",
    }
}

/// ptdump's columns hold at most this many characters (its buffers, less the NUL).
const OPCODE_MAX: usize = 9;
const PAYLOAD_MAX: usize = 24;
const EXT_PAYLOAD_MAX: usize = 47;
const ID_MAX: usize = 4;
const TRACKED_MAX: usize = 16;

/// One line being made (ptdump's `ptdump_buffer`); its strings are reused from packet
/// to packet.
#[derive(Default)]
struct Line {
    raw: String,
    opcode: &'static str,
    payload: String,
    id: &'static str,
    tracked: String,
    skip: bool,
    skip_time: bool,
    skip_tcal: bool,
}

impl Line {
    fn reset(&mut self, opcode: &'static str) {
        self.raw.clear();
        self.payload.clear();
        self.tracked.clear();
        self.opcode = opcode;
        self.id = "";
        self.skip = false;
        self.skip_time = false;
        self.skip_tcal = false;
    }
}

/// Replace `s` with formatted text (no allocation once `s` has grown).
fn set(s: &mut String, args: fmt::Arguments<'_>) {
    s.clear();
    let _ = s.write_fmt(args);
}

/// `s`, then spaces up to `width` (printf's `%-*s`).
fn push_padded(buf: &mut String, s: &str, width: usize) {
    buf.push_str(s);
    for _ in s.len()..width {
        buf.push(' ');
    }
}

/// `v` as 16 lower-case hex digits.
fn push_hex16(buf: &mut String, v: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for i in (0..16).rev() {
        buf.push(DIGITS[(v >> (4 * i)) as usize & 0xF] as char);
    }
}

/// What ptdump tracks across packets (`ptdump_tracking`).
#[derive(Default)]
struct Tracking {
    last_ip: LastIp,
    cal: Calibration,
    clock: Clock,
    /// The last time and calibration printed (for `--time-delta`).
    tsc: u64,
    fcr: u64,
    /// Between a PSB and its PSBEND.
    in_header: bool,
}

struct Lister<'a, W: Write> {
    stream: &'a TraceStream<'a>,
    opts: &'a ListingOptions,
    cfg: &'a PtConfig,
    t: Tracking,
    out: &'a mut W,
    /// The line being made, and the text of the last one.
    line: Line,
    buf: String,
}

/// Write ptdump's listing of `stream` to `out`.
pub fn ptdump<W: Write>(
    stream: &TraceStream<'_>,
    opts: &ListingOptions,
    cfg: &PtConfig,
    out: &mut W,
) -> fmt::Result {
    if let Some(cpu) = cfg.cpu {
        if Errata::for_cpu(&cpu).is_err() {
            writeln!(out, "[0: failed to determine errata: unknown cpu]")?;
        }
    }
    let mut l = Lister {
        stream,
        opts,
        cfg,
        t: Tracking::default(),
        out,
        line: Line::default(),
        buf: String::with_capacity(128),
    };
    l.run()
}

impl<W: Write> Lister<'_, W> {
    fn diag(&mut self, offset: u64, what: &str, why: Option<&str>) -> fmt::Result {
        match why {
            Some(why) => writeln!(self.out, "[{offset:x}: {what}: {why}]"),
            None => writeln!(self.out, "[{offset:x}: {what}]"),
        }
    }

    fn run(&mut self) -> fmt::Result {
        let len = self.stream.len();
        // The decoder's position and the last PSB it passed (libipt's `pos` and `sync`).
        let (mut pos, mut sync) = if self.opts.no_sync {
            (0, 0)
        } else {
            match next_psb(self.stream, 0) {
                Some(p) => (p, p),
                None => return Ok(()),
            }
        };
        loop {
            // Packets until the end, or until one does not decode.
            loop {
                if pos >= len {
                    return Ok(());
                }
                let mut scratch = [0u8; MAX_PACKET_LEN];
                let avail = (len - pos).min(MAX_PACKET_LEN as u64) as usize;
                let bytes = self.stream.window(pos, avail, &mut scratch);
                match parse(bytes, &self.cfg.errata) {
                    Ok((packet, size)) => {
                        if packet == Packet::Psb {
                            sync = pos;
                        }
                        self.packet(pos, &packet, size)?;
                        pos += size as u64;
                    }
                    Err(_) if self.corrupt_tma_at_end(bytes) => {
                        // libipt reports the SKZ84 TMA as 8 bytes although 7 are left:
                        // `<invalid>`, then the end; with `--raw` its bytes cannot be
                        // shown, which is an error that ends in a resync finding nothing.
                        if !self.opts.raw {
                            self.packet(pos, &Packet::Invalid, 7)?;
                        } else {
                            self.diag(pos, "bad packet size", Some("unknown packet"))?;
                        }
                        return Ok(());
                    }
                    Err(e) if e.is_truncated() => return Ok(()),
                    Err(e) => {
                        self.diag(pos, "error decoding packet", Some(decode_errstr(&e)))?;
                        break;
                    }
                }
            }
            // Resynchronise: the PSB may start up to 15 bytes back (the failed packet,
            // or the one before it, may have swallowed its start); not the PSB the
            // decoder is at.
            let from = if pos == sync { pos + PSB_LEN } else { pos };
            match next_psb(self.stream, from - from.min(PSB_LEN - 1)) {
                Some(p) => {
                    pos = p;
                    sync = p;
                }
                None => return Ok(()),
            }
            self.t = Tracking::default();
        }
    }

    fn packet(&mut self, offset: u64, p: &Packet, size: u8) -> fmt::Result {
        let mut line = std::mem::take(&mut self.line);
        line.reset(p.name());
        let r = self.fill(offset, p, size, &mut line);
        let r = r.and_then(|()| self.print(offset, &line));
        self.line = line;
        r
    }

    /// The columns of packet `p` (ptdump's `print_packet`), and its tracking.
    fn fill(&mut self, offset: u64, p: &Packet, size: u8, line: &mut Line) -> fmt::Result {
        if self.opts.raw {
            let mut scratch = [0u8; MAX_PACKET_LEN];
            // An OVF that SKD007's CYC swallowed the escape of is 3 bytes here; libipt
            // counts 2 (from the CYC's offset).
            let n = if *p == Packet::Ovf && size == 3 {
                2
            } else {
                size
            };
            let bytes = self.stream.window(offset, n as usize, &mut scratch);
            for b in bytes {
                let _ = write!(line.raw, "{b:02x}");
            }
        }
        let time = self.opts.track_time();
        let cfg = self.cfg;
        let payload = &mut line.payload;
        match *p {
            Packet::Invalid | Packet::Stop | Packet::Pad | Packet::PsbEnd => {
                line.skip = *p == Packet::Pad && self.opts.no_pad;
                if *p == Packet::PsbEnd {
                    self.t.in_header = false;
                }
            }
            Packet::Psb => {
                if time {
                    self.t.cal.update_psb(cfg);
                }
                self.t.in_header = true;
            }
            Packet::Ovf => {
                if time {
                    if self.opts.keep_tcal_on_ovf {
                        self.t.cal.update_ovf();
                    } else {
                        self.t.cal = Calibration::new();
                    }
                }
            }
            Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip) => {
                ip_payload(&ip, payload);
                if self.opts.last_ip {
                    line.id = "ip";
                    self.t.last_ip.update(&ip);
                    match self.t.last_ip.current() {
                        Ok(ip) => set(&mut line.tracked, format_args!("{ip:016x}")),
                        Err(NoIp::Suppressed) => line.tracked.push_str("<suppressed>"),
                        Err(NoIp::None) => {
                            self.diag(offset, "error tracking last-ip", Some("no ip"))?;
                            line.tracked.push_str("<unavailable>");
                        }
                    }
                }
            }
            Packet::Pip { cr3, nr } => {
                set(
                    payload,
                    format_args!("{cr3:x}{}", if nr { ", nr" } else { "" }),
                );
                line.id = "cr3";
                set(&mut line.tracked, format_args!("{cr3:016x}"));
            }
            Packet::Vmcs(base) => {
                set(payload, format_args!("{base:x}"));
                line.id = "vmcs";
                set(&mut line.tracked, format_args!("{base:016x}"));
            }
            Packet::Tnt8(t) | Packet::Tnt64(t) => tnt_payload(&t, payload),
            Packet::ModeExec(m) => {
                let csd = if m.csd { "cs.d" } else { "" };
                let csl = if m.csl { "cs.l" } else { "" };
                payload.push_str(csd);
                payload.push_str(if m.csd && m.csl { ", " } else { "" });
                payload.push_str(csl);
                payload.push_str(if m.iflag && (m.csd || m.csl) {
                    ", "
                } else {
                    ""
                });
                payload.push_str(if m.iflag { "if" } else { "" });
                if self.opts.exec_mode {
                    line.id = "em";
                    line.tracked.push_str(match m.address_mode() {
                        AddressMode::Bits64 => "64-bit",
                        AddressMode::Bits32 => "32-bit",
                        AddressMode::Bits16 => "16-bit",
                        AddressMode::Invalid => "unknown",
                    });
                }
            }
            Packet::ModeTsx(m) => {
                payload.push_str(if m.intx { "intx" } else { "" });
                payload.push_str(if m.intx && m.abort { ", " } else { "" });
                payload.push_str(if m.abort { "abrt" } else { "" });
            }
            Packet::Tsc(v) => {
                set(payload, format_args!("{v:x}"));
                if time {
                    if !self.opts.no_tcal {
                        let r = if self.t.in_header {
                            self.t.cal.header_tsc(v)
                        } else {
                            self.t.cal.update_tsc(v);
                            Ok(())
                        };
                        self.check(offset, "error calibrating time", r)?;
                    }
                    self.t.clock.update_tsc(v);
                    self.show_time(offset, line)?;
                }
                line.skip |= self.opts.no_timing;
            }
            Packet::Cbr(r) => {
                set(payload, format_args!("{r:x}"));
                if time {
                    if !self.opts.no_tcal {
                        let e = if self.t.in_header {
                            self.t.cal.header_cbr(r, cfg)
                        } else {
                            self.t.cal.update_cbr(r, cfg)
                        };
                        self.check(offset, "error calibrating time", e)?;
                    }
                    let e = self.t.clock.update_cbr(r);
                    self.check(offset, "error updating time", e)?;
                    // A CBR says nothing about the time itself.
                    line.skip_time = true;
                    self.show_time(offset, line)?;
                }
                line.skip |= self.opts.no_timing;
            }
            Packet::Tma { ctc, fc } => {
                set(payload, format_args!("{ctc:x}, {fc:x}"));
                if time {
                    let e = self.t.clock.update_tma(ctc, fc, cfg);
                    self.check(offset, "error updating time", e)?;
                    line.skip_tcal = true;
                    self.show_time(offset, line)?;
                }
                line.skip |= self.opts.no_timing;
            }
            Packet::Mtc(c) => {
                set(payload, format_args!("{c:x}"));
                if time {
                    if !self.opts.no_tcal {
                        let e = self.t.cal.update_mtc(c, cfg);
                        self.check(offset, "error calibrating time", e)?;
                    }
                    let e = self.t.clock.update_mtc(c, cfg);
                    self.check(offset, "error updating time", e)?;
                    self.show_time(offset, line)?;
                }
                line.skip |= self.opts.no_timing;
            }
            Packet::Cyc(v) => {
                set(payload, format_args!("{v:x}"));
                if time && !self.opts.no_cyc {
                    let mut fcr = 0;
                    if !self.opts.no_tcal {
                        match self.t.cal.fcr() {
                            Some(f) => fcr = f,
                            None => self.diag(
                                offset,
                                "calibration error",
                                Some(time_errstr(TimeError::NoTime)),
                            )?,
                        }
                        self.t.cal.update_cyc(v);
                    }
                    match self.t.clock.update_cyc(v, fcr, cfg) {
                        Err(e) => self.diag(offset, "error updating time", Some(time_errstr(e)))?,
                        Ok(()) if fcr == 0 => {
                            self.diag(offset, "error updating time: no calibration", None)?
                        }
                        Ok(()) => {}
                    }
                    line.skip_tcal = true;
                    self.show_time(offset, line)?;
                }
                line.skip |= self.opts.no_timing || self.opts.no_cyc;
            }
            Packet::Mnt(v) => set(payload, format_args!("{v:x}")),
            Packet::Exstop { ip } => payload.push_str(if ip { "ip" } else { "" }),
            Packet::Mwait { hints, ext } => set(payload, format_args!("{hints:08x}, {ext:08x}")),
            Packet::Pwre(w) => set(
                payload,
                format_args!(
                    "c{}.{}{}",
                    (w.state + 1) & 0xF,
                    (w.sub_state + 1) & 0xF,
                    // libipt's HW bit.
                    if w.flags & 0x08 != 0 { ", hw" } else { "" }
                ),
            ),
            Packet::Pwrx(x) => {
                // One wake reason, or "bad" (none, or more than one).
                let wr = match (x.interrupt(), x.store(), x.hw()) {
                    (true, false, false) => "int",
                    (false, true, false) => " st",
                    (false, false, true) => " hw",
                    _ => "bad",
                };
                let (last, deepest) = ((x.last + 1) & 0xF, (x.deepest + 1) & 0xF);
                set(payload, format_args!("{wr}: c{last}, c{deepest}"));
            }
            Packet::Ptw {
                payload: v,
                len,
                ip,
            } => set(
                payload,
                format_args!(
                    "{}: {v:x}{}",
                    (len == 8) as u8,
                    if ip { ", ip" } else { "" }
                ),
            ),
            Packet::Cfe { kind, vector, ip } => {
                let ip = if ip { ", ip" } else { "" };
                line.id = "type";
                line.tracked.push_str(cfe_name(kind));
                match kind {
                    // Interrupts: the vector in decimal; SIPI: in hex.
                    0x01 | 0x09 | 0x0C | 0x0E => set(payload, format_args!("{kind}: {vector}{ip}")),
                    0x05 => set(payload, format_args!("{kind}: {vector:x}{ip}")),
                    _ => set(payload, format_args!("{kind}{ip}")),
                }
            }
            Packet::Evd { kind, payload: v } => {
                set(payload, format_args!("{kind}: {v:x}"));
                line.id = "type";
                line.tracked.push_str(match kind {
                    0 => "cr2",
                    1 => "vmxq",
                    2 => "vmxr",
                    _ => "unknown",
                });
            }
            Packet::Trig {
                trbv,
                ip,
                mult,
                icnt,
            } => {
                set(
                    payload,
                    format_args!(
                        "{trbv:02x}{}{}",
                        if ip { ", ip" } else { "" },
                        if mult { ", mult" } else { "" }
                    ),
                );
                if let Some(n) = icnt {
                    let _ = write!(payload, ", icnt: {n}");
                }
            }
        }
        // ptdump's buffers: TNT and TRIG use the longer one.
        let max = match p {
            Packet::Tnt8(_) | Packet::Tnt64(_) | Packet::Trig { .. } => EXT_PAYLOAD_MAX,
            _ => PAYLOAD_MAX,
        };
        line.payload.truncate(max);
        line.tracked.truncate(TRACKED_MAX);
        Ok(())
    }

    /// The last 7 bytes of the trace are a TMA with reserved bits set, on a processor
    /// with SKZ84 (which libipt takes for an 8-byte corrupt packet).
    fn corrupt_tma_at_end(&self, bytes: &[u8]) -> bool {
        self.cfg.errata.skz84
            && bytes.len() == 7
            && bytes[..2] == [0x02, 0x73]
            && parse(bytes, &Errata::default()) == Err(PacketErrorKind::ReservedTmaBits)
    }

    fn check(&mut self, offset: u64, what: &str, r: Result<(), TimeError>) -> fmt::Result {
        match r {
            Ok(()) => Ok(()),
            Err(e) => self.diag(offset, what, Some(time_errstr(e))),
        }
    }

    /// The time and calibration columns of a timing packet (ptdump's `track_time`).
    fn show_time(&mut self, offset: u64, line: &mut Line) -> fmt::Result {
        if self.opts.tcal && !line.skip_tcal {
            line.id = "fcr";
            line.tracked.clear();
            match self.t.cal.fcr() {
                None => {
                    line.tracked.push_str("<unavailable>");
                    self.diag(
                        offset,
                        "error printing time",
                        Some(time_errstr(TimeError::NoTime)),
                    )?;
                }
                Some(fcr) if self.opts.time_delta => {
                    fixed_point(fcr as i128 - self.t.fcr as i128, true, &mut line.tracked);
                    self.t.fcr = fcr;
                }
                Some(fcr) => fixed_point(fcr as i128, false, &mut line.tracked),
            }
        }
        if self.opts.time && !line.skip_time {
            line.id = "tsc";
            line.tracked.clear();
            let tsc = match self.t.clock.tsc() {
                Some(t) => Some(t),
                None if self.opts.no_wall_clock => Some(self.t.clock.tsc_relative()),
                None => None,
            };
            match tsc {
                None => {
                    self.diag(
                        offset,
                        "error printing time",
                        Some(time_errstr(TimeError::NoTime)),
                    )?;
                    line.tracked.push_str("<unavailable>");
                }
                Some(tsc) if self.opts.time_delta => {
                    let old = self.t.tsc;
                    if old <= tsc {
                        set(&mut line.tracked, format_args!("+{:x}", tsc - old));
                    } else {
                        set(&mut line.tracked, format_args!("-{:x}", old - tsc));
                    }
                    self.t.tsc = tsc;
                }
                Some(tsc) => push_hex16(&mut line.tracked, tsc),
            }
        }
        Ok(())
    }

    /// ptdump's `print_buffer`: the columns, padded as its printf widths pad them, made
    /// in one buffer and written at once.
    fn print(&mut self, offset: u64, line: &Line) -> fmt::Result {
        if line.skip || self.opts.quiet {
            return Ok(());
        }
        let b = &mut self.buf;
        b.clear();
        let mut sep = "";
        if self.opts.show_offset {
            push_hex16(b, offset);
            b.push(' ');
            sep = " ";
        }
        if !line.raw.is_empty() {
            b.push_str(sep);
            push_padded(b, &line.raw, 33);
            sep = " ";
        }
        b.push_str(sep);
        let opcode = &line.opcode[..line.opcode.len().min(OPCODE_MAX)];
        if line.payload.is_empty() {
            b.push_str(opcode);
        } else {
            push_padded(b, opcode, 10);
        }
        if !line.id.is_empty() {
            b.push(' ');
            push_padded(b, &line.payload, 25);
            b.push(' ');
            push_padded(b, &line.id[..line.id.len().min(ID_MAX)], 5);
            b.push_str(&line.tracked);
        } else if !line.payload.is_empty() {
            b.push(' ');
            b.push_str(&line.payload);
        }
        b.push('\n');
        self.out.write_str(b)
    }
}

/// A TIP/FUP payload as ptdump shows it: IPBytes, then the bytes sent, `?` for the
/// ones left out.
fn ip_payload(p: &IpPayload, out: &mut String) {
    let c = p.compression.ip_bytes();
    let _ = match p.compression {
        IpCompression::Suppressed => write!(out, "{c:x}: ????????????????"),
        IpCompression::Update16 => write!(out, "{c:x}: ????????????{:04x}", p.bits),
        IpCompression::Update32 => write!(out, "{c:x}: ????????{:08x}", p.bits),
        IpCompression::Update48 => write!(out, "{c:x}: ????{:012x}", p.bits),
        IpCompression::Sext48 => write!(out, "{c:x}: {:016x}", super::last_ip::sext48(p.bits)),
        IpCompression::Full => write!(out, "{c:x}: {:016x}", p.bits),
    };
}

/// TNT bits oldest first: `!` taken, `.` not taken.
fn tnt_payload(t: &Tnt, out: &mut String) {
    for i in 0..t.len.min(EXT_PAYLOAD_MAX as u8) {
        out.push(if t.taken(i) { '!' } else { '.' });
    }
}

fn cfe_name(kind: u8) -> &'static str {
    match kind {
        0x01 => "intr",
        0x02 => "iret",
        0x03 => "smi",
        0x04 => "rsm",
        0x05 => "sipi",
        0x06 => "init",
        0x07 => "vmentry",
        0x08 => "vmexit",
        0x09 => "vmexit_intr",
        0x0A => "shutdown",
        0x0C => "uintr",
        0x0D => "uiret",
        0x0E => "swintr",
        0x0F => "syscall",
        _ => "unknown",
    }
}

/// A value with [`FCR_SHIFT`] fraction bits to three decimals, rounded half to even as
/// C's `printf("%.3f")` rounds the exact binary value; `signed` adds `+` to non-negative
/// values (`%+.3f`).
fn fixed_point(v: i128, signed: bool, out: &mut String) {
    let neg = v < 0;
    let m = v.unsigned_abs();
    let scale = 1u128 << FCR_SHIFT;
    // Thousandths, rounded half to even.
    let num = m * 1000;
    let (mut q, r) = (num / scale, num % scale);
    if r * 2 > scale || (r * 2 == scale && q % 2 == 1) {
        q += 1;
    }
    let sign = if neg {
        "-"
    } else if signed {
        "+"
    } else {
        ""
    };
    let _ = write!(out, "{sign}{}.{:03}", q / 1000, q % 1000);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pt::encode::to_bytes;
    use crate::pt::packet::PSB_BYTES;

    fn list(bytes: &[u8], args: &[&str]) -> String {
        let (o, c) = ListingOptions::from_ptdump_args(args).unwrap();
        let mut s = String::new();
        ptdump(&TraceStream::linear(bytes), &o, &c, &mut s).unwrap();
        s
    }

    #[test]
    fn fixed_point_rounds_like_printf() {
        let f = |v, signed| {
            let mut s = String::new();
            fixed_point(v, signed, &mut s);
            s
        };
        assert_eq!(f(256, false), "1.000");
        assert_eq!(f(256 + 16, false), "1.062"); // 1.0625: half to even
        assert_eq!(f(256 + 48, false), "1.188"); // 1.1875
        assert_eq!(f(1, false), "0.004");
        assert_eq!(f(0, true), "+0.000");
        assert_eq!(f(-128, true), "-0.500");
        assert_eq!(f(255, false), "0.996");
    }

    #[test]
    fn options_read_ptdump_words() {
        let (o, c) = ListingOptions::from_ptdump_args(&[
            "--time",
            "--time-delta",
            "--cpu",
            "6/142",
            "--mtc-freq",
            "4",
            "--cpuid-0x15.eax",
            "0x2",
            "--cpuid-0x15.ebx",
            "010",
        ])
        .unwrap();
        assert!(o.time && o.time_delta && !o.tcal);
        assert!(c.errata.skd007);
        assert_eq!(
            (c.mtc_freq, c.tsc_ctc_ratio_d, c.tsc_ctc_ratio_n),
            (4, 2, 8)
        );
        for bad in [
            &["--time", "--tcal"][..],
            &["--mtc-freq"],
            &["--mtc-freq", "256"],
            &["--mtc-freq", "--raw"],
            &["--nom-freq", "x"],
            &["--cpu", "6"],
            &["--frobnicate"],
        ] {
            assert!(ListingOptions::from_ptdump_args(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn columns_and_problem_lines() {
        let mut d = PSB_BYTES.to_vec();
        d.extend(
            to_bytes(&Packet::Pip {
                cr3: 0xAFAFA0,
                nr: true,
            })
            .unwrap(),
        );
        d.extend(to_bytes(&Packet::Pad).unwrap());
        d.push(0xC9);
        let got = list(&d, &["--no-pad"]);
        assert_eq!(
            got,
            format!(
                "0000000000000000  psb\n\
                 0000000000000010  {:<10} {:<25} {:<5}0000000000afafa0\n\
                 [19: error decoding packet: unknown opcode]\n",
                "pip", "afafa0, nr", "cr3"
            )
        );
        let got = list(&d[..17], &["--raw", "--no-offset"]);
        assert_eq!(got, format!("{:<33} psb\n", "0282".repeat(8)));
        assert_eq!(
            list(&d, &["--quiet"]),
            "[19: error decoding packet: unknown opcode]\n"
        );
        assert_eq!(
            list(&d, &["--cpu", "0/0", "--quiet"]),
            "[0: failed to determine errata: unknown cpu]\n\
             [19: error decoding packet: unknown opcode]\n"
        );
    }

    #[test]
    fn resync_finds_a_psb_the_failed_packet_swallowed() {
        // An MNT eats the first 8 bytes of the PSB after it; the next packet fails, and
        // the listing goes back to that PSB.
        let mut d = vec![0x00; 3];
        d.extend_from_slice(&PSB_BYTES);
        d.extend_from_slice(&[0x02, 0xC3, 0x88]);
        d.extend_from_slice(&PSB_BYTES);
        d.extend(to_bytes(&Packet::PsbEnd).unwrap());
        d.extend(
            to_bytes(&Packet::Fup(IpPayload {
                compression: IpCompression::Sext48,
                bits: 0xA000_1000,
            }))
            .unwrap(),
        );
        let got = list(&d, &[]);
        assert_eq!(
            got,
            "0000000000000003  psb\n\
             0000000000000013  mnt        8202820282028202\n\
             [1e: error decoding packet: unknown packet]\n\
             0000000000000016  psb\n\
             0000000000000026  psbend\n\
             0000000000000028  fup        3: 00000000a0001000\n"
        );
        // A packet cut off by the end ends the listing quietly.
        assert_eq!(list(&d[..d.len() - 1], &[]).lines().count(), 5);
    }

    #[test]
    fn erratum_corners_as_libipt_has_them() {
        // SKD007: a CYC that took an OVF's escape byte: one OVF at the CYC's offset,
        // whose raw bytes libipt counts as two.
        let mut d = PSB_BYTES.to_vec();
        d.extend_from_slice(&[0x07, 0x02, 0xF3, 0x00]);
        let got = list(&d, &["--cpu", "6/94", "--raw", "--no-offset"]);
        assert_eq!(
            got,
            format!(
                "{:<33} psb\n{:<33} ovf\n{:<33} pad\n",
                "0282".repeat(8),
                "0702",
                "00"
            )
        );
        // SKZ84: a TMA with reserved bits set is an 8-byte <invalid>, even as the
        // trace's last 7 bytes; with --raw that is a problem line.
        let mut d = PSB_BYTES.to_vec();
        d.extend_from_slice(&[0x02, 0x73, 0x01, 0x01, 0x01, 0x01, 0x00]);
        assert_eq!(
            list(&d, &["--cpu", "6/85"]),
            "0000000000000000  psb\n0000000000000010  <invalid>\n"
        );
        assert_eq!(
            list(&d, &["--cpu", "6/85", "--raw"]).lines().last(),
            Some("[10: bad packet size: unknown packet]")
        );
        // Without the erratum the reserved bits are an error and the end is quiet.
        assert_eq!(
            list(&d, &[]),
            "0000000000000000  psb\n[10: error decoding packet: unknown packet]\n"
        );
        d.push(0x00);
        assert_eq!(
            list(&d, &["--cpu", "6/85"]),
            "0000000000000000  psb\n0000000000000010  <invalid>\n"
        );
    }

    #[test]
    fn last_ip_column_and_its_problems() {
        let mut d = PSB_BYTES.to_vec();
        let tip = |c: IpCompression, bits| {
            to_bytes(&Packet::Tip(IpPayload {
                compression: c,
                bits,
            }))
            .unwrap()
        };
        d.extend(tip(IpCompression::Suppressed, 0));
        d.extend(tip(IpCompression::Update16, 0x1234));
        d.extend(tip(IpCompression::Suppressed, 0));
        let got = list(&d, &["--lastip", "--no-offset"]);
        let line = |payload: &str, tracked: &str| {
            format!("{:<10} {payload:<25} {:<5}{tracked}\n", "tip", "ip")
        };
        assert_eq!(
            got,
            format!(
                "psb\n[10: error tracking last-ip: no ip]\n{}{}{}",
                line("0: ????????????????", "<unavailable>"),
                line("1: ????????????1234", "0000000000001234"),
                line("0: ????????????????", "<suppressed>"),
            )
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        /// Any bytes, any options: the listing ends, and writes a bounded number of
        /// lines (a packet's line and its problem lines, or one problem per resync).
        #[test]
        fn any_bytes_any_options(
            d in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::prelude::Just(0x02u8),
                    proptest::prelude::Just(0x82u8),
                    proptest::prelude::any::<u8>()
                ],
                0..400,
            ),
            flags in proptest::prelude::any::<u16>(),
            cpu in 0usize..4,
        ) {
            let words = [
                "--no-sync", "--no-pad", "--no-cyc", "--no-offset", "--raw", "--lastip",
                "--exec-mode", "--time-delta", "--no-tcal", "--no-wall-clock",
                "--keep-tcal-on-ovf", "--quiet",
            ];
            let mut args: Vec<&str> = words
                .iter()
                .enumerate()
                .filter(|(i, _)| flags >> i & 1 == 1)
                .map(|(_, w)| *w)
                .collect();
            match flags >> 12 & 3 {
                1 => args.push("--time"),
                2 => args.push("--tcal"),
                _ => {}
            }
            args.extend(["--mtc-freq", "3", "--nom-freq", "4", "--cpuid-0x15.eax", "1"]);
            args.extend(["--cpuid-0x15.ebx", "3"]);
            args.extend(["--cpu", ["6/94", "6/85", "0/0", "none"][cpu]]);
            let out = list(&d, &args);
            proptest::prop_assert!(out.is_empty() || out.ends_with('\n'));
            proptest::prop_assert!(out.lines().count() <= 5 * d.len() + 1);
        }
    }
}
