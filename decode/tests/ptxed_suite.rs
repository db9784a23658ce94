//! libipt's test suite against tracemill's instruction flow: every expected ptxed output
//! in `datasets/libipt-ptt` (430, from 191 `.ptt` cases) is compared with what
//! tracemill's own decode of the case's trace says, turned into ptxed's `--no-inst` text
//! by a small adapter ([`Listing`]): one address per instruction, events in brackets.
//! The decode is `chunk::decode_all::<Pt>`, the same code `tracemill decode` runs; each
//! case is decoded sequentially and cut at every PSB, and the two must agree.
//!
//! libipt's script runs each case twice, with `--insn-decoder` and `--block-decoder`,
//! against one expected output; so does this test (the adapter prints the same for both,
//! apart from `--stat`'s block count, which only the block decoder has). A case passes
//! when `diff -b` finds nothing. The cases that do not pass must be exactly those listed,
//! with a reason, in `datasets/libipt-ptt/ptxed-known-failures.txt`: a new failure fails
//! the test, and so does a listed case that now passes (the list only shrinks).

mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

use tracemill_decode::chunk::{decode_all, tally_all, Decoded, Input};
use tracemill_decode::front::Bits;
use tracemill_decode::image::ImageSet;
use tracemill_decode::insn::{decode_insn_in, InsnClass};
use tracemill_decode::pt::clock::PtTiming;
use tracemill_decode::pt::config::{AddrRange, FilterKind};
use tracemill_decode::pt::cpu::Cpu;
use tracemill_decode::pt::packet::Packet;
use tracemill_decode::pt::{PacketReader, Pt, PtConfig};
use tracemill_decode::stream::TraceStream;
use tracemill_decode::tally::Covered;
use tracemill_schemas::{BranchKind, EventKind};

fn suite() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/libipt-ptt")
}

/// One expected output: its case, its file, the load address and ptxed's words for it.
struct Check {
    case: String,
    exp: String,
    org: u64,
    cpu: Option<String>,
    words: Vec<String>,
}

fn checks() -> Vec<Check> {
    let text = std::fs::read_to_string(suite().join("index.json")).expect("index.json");
    let index: serde_json::Value = serde_json::from_str(&text).expect("index.json parses");
    let words = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_str().unwrap().to_string())
            .collect()
    };
    let mut out = Vec::new();
    for c in index["cases"].as_array().unwrap() {
        if !c["has_ptxed"].as_bool().unwrap_or(false) {
            continue;
        }
        let name = c["name"].as_str().unwrap().to_string();
        let org = c["org"].as_str().unwrap();
        let org = u64::from_str_radix(org.trim_start_matches("0x"), 16).unwrap();
        let opts = words(&c["ptxed"]);
        let cpus = words(&c["cpus"]);
        if cpus.is_empty() {
            out.push(Check {
                exp: format!("{name}-ptxed.exp"),
                case: name.clone(),
                org,
                cpu: None,
                words: opts.clone(),
            });
        }
        for cpu in cpus {
            out.push(Check {
                exp: format!("{name}-ptxed-cpu_{}.exp", cpu.replace('/', "_")),
                case: name.clone(),
                org,
                cpu: Some(cpu),
                words: opts.clone(),
            });
        }
    }
    out
}

/// ptxed's options that change the output.
#[derive(Default)]
struct Opts {
    event_ip: bool,
    quiet: bool,
    stat: bool,
    stat_insn: bool,
    stat_blocks: bool,
    block_decoder: bool,
    /// `--cpu` named a processor without an errata table entry: ptxed says so in a
    /// configuration error line, then decodes without workarounds (as `tracemill decode`
    /// warns and goes on).
    unknown_cpu: bool,
}

/// The decoder's configuration and the output options from a case's words.
fn configure(c: &Check) -> Result<(PtConfig, Opts), String> {
    let mut cfg = PtConfig::default();
    let mut o = Opts::default();
    let mut addr0 = (0u8, 0u64, 0u64);
    if let Some(cpu) = &c.cpu {
        o.unknown_cpu = cfg
            .set_cpu(cpu.parse::<Cpu>().map_err(|e| e.to_string())?)
            .is_err();
    }
    let num = |s: &str| -> Result<u64, String> {
        let r = if let Some(h) = s.strip_prefix("0x") {
            u64::from_str_radix(h, 16)
        } else {
            s.parse()
        };
        r.map_err(|_| format!("not a number: {s}"))
    };
    let mut w = c.words.iter();
    while let Some(word) = w.next() {
        let mut arg = || w.next().ok_or(format!("{word} needs a value"));
        match word.as_str() {
            "--event:ip" => o.event_ip = true,
            // The traces were recorded with Event Trace on: MODE.Exec's IF is meaningful.
            "--event:iflags" => cfg.event_trace = true,
            "--quiet" => o.quiet = true,
            "--stat" => o.stat = true,
            "--stat:insn" => (o.stat, o.stat_insn) = (true, true),
            "--stat:blocks" => (o.stat, o.stat_blocks) = (true, true),
            "--block-decoder" => o.block_decoder = true,
            "--insn-decoder" => o.block_decoder = false,
            "--cpu" => {
                let v = arg()?;
                if v != "none" {
                    o.unknown_cpu = cfg
                        .set_cpu(v.parse::<Cpu>().map_err(|e| e.to_string())?)
                        .is_err();
                }
            }
            "--mtc-freq" => cfg.mtc_freq = num(arg()?)? as u8,
            "--nom-freq" => cfg.nom_freq = num(arg()?)? as u8,
            "--cpuid-0x15.eax" => cfg.tsc_ctc_ratio_d = num(arg()?)? as u32,
            "--cpuid-0x15.ebx" => cfg.tsc_ctc_ratio_n = num(arg()?)? as u32,
            "--filter:addr0_cfg" => addr0.0 = num(arg()?)? as u8,
            "--filter:addr0_a" => addr0.1 = num(arg()?)?,
            "--filter:addr0_b" => addr0.2 = num(arg()?)?,
            // Options that change nothing tracemill shows, or that it does not have.
            "--resync-on-error"
            | "--event:tick"
            | "--event:time"
            | "--insn:keep-tcal-on-ovf"
            | "--block:keep-tcal-on-ovf"
            | "--block:show-blocks"
            | "--block:end-on-call"
            | "--block:end-on-jump" => {}
            "--raw" => {
                arg()?;
            }
            other => return Err(format!("option {other} not understood")),
        }
    }
    if addr0.0 != 0 {
        cfg.filters.push(AddrRange {
            kind: if addr0.0 == 2 {
                FilterKind::Stop
            } else {
                FilterKind::Filter
            },
            from: addr0.1,
            to: addr0.2,
        });
    }
    Ok((cfg, o))
}

/// Offsets of the PIP, VMCS and CBR packets inside a PSB+: ptxed shows them as status,
/// that is not at all.
/// Also the offsets of the TIP.PGDs: a disable reported there is ptxed's synchronous
/// `[disabled]` (a FUP's is `async_disabled`, with `at:`).
fn status_offsets(stream: &TraceStream<'_>, cfg: &PtConfig) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let mut out = BTreeSet::new();
    let mut pgds = BTreeSet::new();
    let mut in_psb = false;
    for p in PacketReader::new(stream, 0, stream.len(), cfg.errata).flatten() {
        match p.packet {
            Packet::TipPgd(_) => {
                pgds.insert(p.offset);
            }
            Packet::Psb => in_psb = true,
            Packet::PsbEnd | Packet::Ovf => in_psb = false,
            _ if in_psb => {
                out.insert(p.offset);
            }
            _ => {}
        }
    }
    (out, pgds)
}

/// Turns tracemill's rows and events into ptxed's `--no-inst` lines, walking the code
/// between rows: a row stands for every instruction from where the last one went up to
/// and including its branch; events come before the row whose `seq` they carry.
struct Listing<'a> {
    images: &'a ImageSet<'a>,
    lines: Vec<String>,
    /// Where the next instruction is, while tracing.
    cur: Option<u64>,
    bits: Bits,
    /// In a transaction: ptxed marks instructions with `? `.
    speculative: bool,
    insns: u64,
    event_ip: bool,
    /// TRIGs waiting for their instruction count: instructions still to list, and the
    /// line without its closing bracket (each counts from the one before).
    trigs: VecDeque<(u64, String)>,
    /// Lines of TRIGs listed whose IP (ptxed's `--event:ip`) is the next instruction's.
    trig_ip: Vec<usize>,
    /// Lines that ptxed prints after the instruction of row `.0` (an IRET's, a VM
    /// entry's events: after the instruction that they report).
    after_row: Option<(usize, Vec<String>)>,
}

impl Listing<'_> {
    fn insn(&mut self, ip: u64) {
        for k in std::mem::take(&mut self.trig_ip) {
            if self.event_ip {
                self.lines[k] = format!("{}, ip: {ip:016x}]", self.lines[k].trim_end_matches(']'));
            }
        }
        self.insns += 1;
        let mark = if self.speculative { "? " } else { "" };
        self.lines.push(format!("{mark}{ip:016x}"));
        if let Some(t) = self.trigs.front_mut() {
            t.0 = t.0.saturating_sub(1);
        }
        self.fire_trigs();
    }

    /// List the TRIGs whose count is up.
    fn fire_trigs(&mut self) {
        while self.trigs.front().is_some_and(|t| t.0 == 0) {
            let (_, line) = self.trigs.pop_front().unwrap();
            self.trig_ip.push(self.lines.len());
            self.lines.push(format!("{line}]"));
        }
    }

    /// List the instructions from `cur` up to `x` (`inclusive`: and the one at `x`).
    /// Only straight-line code is listed, each instruction at least a byte further, so
    /// the images' size bounds the walk (a sweep may be longer than any block: libipt's
    /// `linear-*` cases run 100,000 instructions between two packets).
    fn list_to(&mut self, x: u64, inclusive: bool) -> Result<(), String> {
        let Some(mut ip) = self.cur else {
            return Ok(());
        };
        let code: usize = self.images.segments().iter().map(|s| s.data.len()).sum();
        for _ in 0..=code {
            if ip == x && !inclusive {
                self.cur = Some(ip);
                return Ok(());
            }
            let bytes = self
                .images
                .code_at(ip, None)
                .map_err(|_| format!("no code at {ip:#x} on the way to {x:#x}"))?;
            let i = decode_insn_in(bytes, ip, self.bits)
                .map_err(|_| format!("undecodable at {ip:#x} on the way to {x:#x}"))?;
            self.insn(ip);
            if ip == x {
                self.cur = Some(i.nlip());
                return Ok(());
            }
            ip = match i.class {
                // Direct jumps and calls are rows of their own: none can be passed here.
                InsnClass::Other => i.nlip(),
                _ => return Err(format!("a branch at {ip:#x} before {x:#x}")),
            };
        }
        Err(format!("{x:#x} not reached"))
    }

    fn ip_suffix(&self, label: &str, ip: Option<u64>) -> String {
        match (self.event_ip, ip) {
            (true, Some(ip)) => format!(", {label}: {ip:016x}"),
            _ => String::new(),
        }
    }
}

/// A field `name 0x…` (or `name N`) of an event's comma-separated detail.
fn field(detail: &str, name: &str) -> Option<u64> {
    detail.split(", ").find_map(|p| {
        let v = p.strip_prefix(name)?.strip_prefix(' ')?;
        match v.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => v.parse().ok(),
        }
    })
}

fn target_of(detail: &str) -> Option<u64> {
    let t = detail.strip_prefix("to 0x")?;
    u64::from_str_radix(t, 16).ok()
}

/// Where libipt's event decoder stands when an error is found at the packet at `off`
/// (what ptxed's error line shows): it has read the packets of the next event (a PSB+ up
/// to its PSBEND, a FUP and the TIP paired with it, a MODE and its FUP) and, after a TNT
/// or a TIP.PGD, one packet more (the end of the trace if none).
fn ptxed_offset(packets: &[(u64, Packet)], end: u64, off: u64) -> u64 {
    let Some(i) = packets.iter().position(|(o, _)| *o >= off) else {
        return off;
    };
    let next = |k: usize| packets.get(k).map(|(o, _)| *o).unwrap_or(end);
    match &packets[i].1 {
        Packet::Psb => packets[i..]
            .iter()
            .find(|(_, p)| matches!(p, Packet::PsbEnd))
            .map(|(o, _)| *o)
            .unwrap_or(off),
        Packet::Tnt8(_) | Packet::Tnt64(_) | Packet::TipPgd(_) => next(i + 1),
        // (A PIP or VMCS: looking for the instruction it binds to.)
        Packet::ModeExec(_) | Packet::ModeTsx(_) | Packet::Pip { .. } | Packet::Vmcs(_) => {
            next(i + 1)
        }
        // A FUP a MODE binds: the event is the MODE's, read up to that FUP (even when the
        // FUP is also an interrupt's, as a TSX abort's is).
        Packet::Fup(_)
            if i > 0 && matches!(packets[i - 1].1, Packet::ModeTsx(_) | Packet::ModeExec(_)) =>
        {
            packets[i].0
        }
        Packet::Fup(_) => match packets.get(i + 1) {
            Some((o, Packet::Tip(_))) => *o,
            _ => packets[i].0,
        },
        _ => packets[i].0,
    }
}

/// Whether the packet at `off` comes right after a FUP (PIPs, VMCSs and timing packets
/// between): a PIP or VMCS there belongs to the FUP's asynchronous transfer.
fn after_fup(packets: &[(u64, Packet)], off: u64) -> bool {
    let Ok(k) = packets.binary_search_by_key(&off, |(o, _)| *o) else {
        return false;
    };
    packets[..k]
        .iter()
        .rev()
        .find(|(_, p)| {
            !matches!(
                p,
                Packet::Pip { .. }
                    | Packet::Vmcs(_)
                    | Packet::Pad
                    | Packet::Tsc(_)
                    | Packet::Tma { .. }
                    | Packet::Mtc(_)
                    | Packet::Cyc(_)
                    | Packet::Cbr(_)
            )
        })
        .is_some_and(|(_, p)| matches!(p, Packet::Fup(_)))
}

/// The adapter: ptxed's lines for a decode.
fn ptxed_lines(
    d: &Decoded,
    packets: &[(u64, Packet)],
    end: u64,
    images: &ImageSet<'_>,
    (status, pgds): (&BTreeSet<u64>, &BTreeSet<u64>),
    o: &Opts,
) -> Result<Vec<String>, String> {
    let mut l = Listing {
        images,
        lines: Vec::new(),
        cur: None,
        bits: Bits::B64,
        speculative: false,
        insns: 0,
        event_ip: o.event_ip,
        trigs: VecDeque::new(),
        trig_ip: Vec::new(),
        after_row: None,
    };
    let rows = &d.rows;
    let mut ev = d.events.iter().peekable();
    let mut tracing = false;
    let mut after_error = false;
    // The offset of the last error event.
    let mut last_error: Option<u64> = None;
    // The line of the last PIP of an asynchronous transfer, and its event's `seq`.
    let mut async_pip: Option<(u64, usize)> = None;
    for i in 0..=rows.len() {
        while let Some(e) = ev.next_if(|e| e.seq as usize <= i) {
            match e.kind {
                // The tail's instructions are listed already (the adapter walks the code
                // up to each event's IP); `instruction_totals_equal_libipts` checks its
                // count.
                EventKind::Psb | EventKind::Tail => {}
                EventKind::FreqChange => {
                    // A CBR outside a PSB+ is ptxed's `[cbr: N]` (one in a PSB+ is status).
                    // The event is kept when the ratio changes ("core/bus ratio A -> B").
                    if !status.contains(&e.offset) {
                        let r: u64 = e
                            .detail
                            .rsplit(' ')
                            .next()
                            .and_then(|r| r.parse().ok())
                            .ok_or("a freq_change without its ratio")?;
                        l.lines.push(format!("[cbr: {r:x}]"));
                    }
                }
                EventKind::Resync => {
                    if let Some(ip) = e.ip {
                        l.cur = Some(ip);
                        tracing = true;
                    }
                }
                EventKind::Enable => {
                    if std::mem::take(&mut after_error) {
                        // ptxed resyncs at the enable with tracing disabled.
                        l.lines.push("[disabled]".to_string());
                    }
                    let what = if e.detail == "resumed" {
                        "resumed"
                    } else {
                        "enabled"
                    };
                    let s = l.ip_suffix("ip", e.ip);
                    l.lines.push(format!("[{what}{s}]"));
                    l.cur = e.ip;
                    tracing = true;
                }
                EventKind::Disable => {
                    // After its branch's row (a TIP.PGD bound to a branch), or where the
                    // walk stopped (a FUP + TIP.PGD: the instruction at the IP did not run).
                    let sync = i > 0
                        && (rows.offset[i - 1] == e.offset
                            // A TIP.PGD alone, at a direct branch out of the region.
                            || (pgds.contains(&e.offset) && rows.target.get(i - 1) == e.ip));
                    let s = if sync {
                        l.ip_suffix("ip", e.ip)
                    } else {
                        if let (true, Some(x)) = (tracing, e.ip) {
                            l.list_to(x, false)?;
                        }
                        match (l.event_ip, e.ip) {
                            (true, Some(x)) => {
                                let mut s = format!(", at: {x:016x}");
                                if let Some(t) = target_of(&e.detail) {
                                    s += &format!(", ip: {t:016x}");
                                }
                                s
                            }
                            _ => String::new(),
                        }
                    };
                    l.lines.push(format!("[disabled{s}]"));
                    l.cur = None;
                    tracing = false;
                }
                EventKind::Overflow => {
                    let s = l.ip_suffix("ip", e.ip);
                    l.lines.push(format!("[overflow{s}]"));
                    l.cur = e.ip;
                    tracing = e.ip.is_some();
                    l.speculative = false;
                }
                EventKind::TraceStop => l.lines.push("[stopped]".to_string()),
                EventKind::Interrupt => {
                    let x = e.ip.ok_or("an interrupt without IP")?;
                    l.list_to(x, false)?;
                    let to = target_of(&e.detail);
                    let s = if l.event_ip {
                        let mut s = format!(", from: {x:016x}");
                        if let Some(t) = to {
                            s += &format!(", to: {t:016x}");
                        }
                        s
                    } else {
                        String::new()
                    };
                    l.lines.push(format!("[interrupt{s}]"));
                    l.cur = to;
                }
                EventKind::Paging => {
                    // A PIP or VMCS whose instruction the walk did not reach (an error on
                    // the way, at that packet): libipt gives the event up.
                    let lost = e.ip.is_none() && last_error == Some(e.offset);
                    if !status.contains(&e.offset) && !lost {
                        if let (true, Some(x)) = (tracing, e.ip) {
                            // After the instruction it bound to: a MOV CR3 (listed here),
                            // or the far branch of the row just listed.
                            if !(i > 0 && rows.ip[i - 1] == x) {
                                l.list_to(x, true)?;
                            }
                        }
                        let line = if let Some(v) = e.detail.strip_prefix("vmcs=0x") {
                            let v = u64::from_str_radix(v, 16).unwrap_or(0);
                            format!("[vmcs, base: {v:016x}]")
                        } else {
                            let cr3 = e
                                .detail
                                .strip_prefix("cr3=0x")
                                .and_then(|d| d.split(' ').next())
                                .and_then(|v| u64::from_str_radix(v, 16).ok())
                                .unwrap_or(0);
                            let nr = if e.detail.ends_with("nr=1") {
                                ", nr"
                            } else {
                                ""
                            };
                            format!("[paging, cr3: {cr3:016x}{nr}]")
                        };
                        // A PIP and a VMCS of one asynchronous transfer (after its FUP,
                        // both at its TIP's IP): libipt reports the VMCS first.
                        let vmcs = line.starts_with("[vmcs");
                        match async_pip {
                            Some((seq, k)) if vmcs && seq == e.seq && k + 1 == l.lines.len() => {
                                l.lines.insert(k, line)
                            }
                            _ => l.lines.push(line),
                        }
                        async_pip = (!vmcs && e.ip.is_none() && after_fup(packets, e.offset))
                            .then(|| (e.seq, l.lines.len() - 1));
                    }
                }
                EventKind::ExecMode => {
                    if let (true, Some(x)) = (tracing, e.ip) {
                        l.list_to(x, false)?;
                    }
                    l.bits = match e.detail.as_str() {
                        "16-bit" => Bits::B16,
                        "32-bit" => Bits::B32,
                        _ => Bits::B64,
                    };
                    let s = l.ip_suffix("ip", e.ip);
                    l.lines.push(format!("[exec mode: {}{s}]", e.detail));
                }
                EventKind::Tsx if e.detail == "in transaction" => {
                    // A PSB+'s state, which ptxed does not show: only the marks.
                    if let (true, Some(x)) = (tracing, e.ip) {
                        l.list_to(x, false)?;
                    }
                    l.speculative = true;
                }
                EventKind::Tsx => {
                    if let (true, Some(x)) = (tracing, e.ip) {
                        l.list_to(x, false)?;
                    }
                    let what = match e.detail.as_str() {
                        "begin" => "begin transaction",
                        "commit" => "committed",
                        _ => "aborted",
                    };
                    l.speculative = e.detail == "begin";
                    let s = l.ip_suffix("ip", e.ip);
                    l.lines.push(format!("[{what}{s}]"));
                }
                EventKind::Ptwrite => {
                    // ptxed shows it after the PTWRITE instruction.
                    if let (true, Some(x)) = (tracing, e.ip) {
                        l.list_to(x, true)?;
                    }
                    let v = e.detail.split(' ').next().unwrap_or("");
                    let v = v.trim_start_matches("0x");
                    // Its IP is ptxed's only when the PTW sent one (a FUP after it); one
                    // bound to the next PTWRITE has it in the table, not in ptxed's line.
                    // (The event of one with IP is at its FUP.)
                    let sent = !packets
                        .binary_search_by_key(&e.offset, |(o, _)| *o)
                        .is_ok_and(|k| matches!(packets[k].1, Packet::Ptw { ip: false, .. }));
                    let s = l.ip_suffix("ip", e.ip.filter(|_| sent));
                    l.lines.push(format!("[ptwrite: {v}{s}]"));
                }
                EventKind::Power => {
                    if let (true, Some(x)) = (tracing, e.ip) {
                        l.list_to(x, false)?;
                    }
                    let s = l.ip_suffix("ip", e.ip);
                    let d = &e.detail;
                    let line = if let Some(rest) = d.strip_prefix("pwrx ") {
                        // "c1 (c1) interrupt store hw" -> "int: st: hw: c1 (c1)"
                        let mut parts: Vec<&str> = rest.split(' ').collect();
                        let cs = parts.drain(..2.min(parts.len())).collect::<Vec<_>>();
                        let mut w = String::new();
                        for p in parts {
                            w += match p {
                                "interrupt" => "int: ",
                                "store" => "st: ",
                                _ => "hw: ",
                            };
                        }
                        format!("[pwrx {w}{}{s}]", cs.join(" "))
                    } else if let Some(rest) = d.strip_prefix("mwait hints=0x") {
                        let (h, x) = rest.split_once(" ext=0x").unwrap_or((rest, "0"));
                        format!("[mwait {h} {x}{s}]")
                    } else {
                        format!("[{d}{s}]")
                    };
                    l.lines.push(line);
                }
                EventKind::Error
                    if ["unexpected packet context", "unknown packet"]
                        .contains(&e.detail.as_str()) =>
                {
                    // A packet that does not bind (an Event Trace EVD or CFE out of
                    // place): libipt finds it while it looks for events between two
                    // instructions, where ptxed's instruction is still cleared (IP 0).
                    l.lines
                        .push(format!("[{:x}, 0: error: {}]", e.offset, e.detail));
                    l.cur = None;
                    tracing = false;
                }
                EventKind::Error => {
                    // ptxed's error line: libipt's words for the kind of error, the
                    // offset its event decoder stands at, and the IP.
                    let what = if e.detail.starts_with("no code image covers") {
                        "no memory mapped at this address"
                    } else if e.detail.starts_with("expected a") {
                        "trace stream does not match query"
                    } else if e.detail.starts_with("a PSB+ disagrees") {
                        "bad status update"
                    } else {
                        return Err(format!("decode error: {}", e.detail));
                    };
                    let ip = e.ip.unwrap_or(0);
                    let off = if what == "bad status update" {
                        // Found at the PSB+'s MODE.EXEC.
                        packets
                            .iter()
                            .rev()
                            .find(|(o, p)| *o <= e.offset && matches!(p, Packet::ModeExec(_)))
                            .map(|(o, _)| *o)
                            .unwrap_or(e.offset)
                    } else {
                        ptxed_offset(packets, end, e.offset)
                    };
                    match (tracing, what) {
                        // ptxed lists the branch whose query failed.
                        (true, "trace stream does not match query") => l.list_to(ip, true)?,
                        // And the instructions up to the address without code.
                        (true, "no memory mapped at this address") => l.list_to(ip, false)?,
                        _ => {}
                    }
                    l.lines.push(format!("[{off:x}, {ip:x}: error: {what}]"));
                    last_error = Some(e.offset);
                    if what == "bad status update" {
                        l.lines
                            .push(format!("[{off:x}, {ip:x}: resync error: {what}]"));
                    }
                    l.cur = None;
                    tracing = false;
                    after_error = true;
                }
                EventKind::Iflags => {
                    if let (true, Some(x)) = (tracing, e.ip) {
                        l.list_to(x, false)?;
                    }
                    let s = l.ip_suffix("ip", e.ip);
                    l.lines.push(format!("[{}{s}]", e.detail));
                }
                EventKind::Maintenance => {
                    let v = e.detail.trim_start_matches("0x");
                    l.lines.push(format!("[mnt: {v}]"));
                }
                EventKind::Trigger => {
                    if let (true, Some(x)) = (tracing, e.ip) {
                        l.list_to(x, false)?;
                    }
                    let trbv = field(&e.detail, "trbv").unwrap_or(0);
                    let mult = if e.detail.ends_with("mult") {
                        ", mult"
                    } else {
                        ""
                    };
                    let line = format!("[trig {trbv:02x}{mult}");
                    match field(&e.detail, "icnt") {
                        Some(n) if tracing && e.ip.is_none() => {
                            l.trigs.push_back((n, line));
                            l.fire_trigs();
                        }
                        _ => {
                            let s = l.ip_suffix("ip", e.ip);
                            l.lines.push(format!("{line}{s}]"));
                        }
                    }
                }
                EventKind::Intr
                | EventKind::Iret
                | EventKind::Smi
                | EventKind::Rsm
                | EventKind::Sipi
                | EventKind::Init
                | EventKind::Vmentry
                | EventKind::Vmexit
                | EventKind::Shutdown
                | EventKind::Uintr
                | EventKind::Uiret
                | EventKind::Swintr
                | EventKind::Syscall => {
                    if let (true, Some(x)) = (tracing, e.ip) {
                        l.list_to(x, false)?;
                    }
                    let d = &e.detail;
                    let vector = field(d, "vector");
                    let s = l.ip_suffix("ip", e.ip);
                    let line = match e.kind {
                        EventKind::Intr => {
                            let cr2 = field(d, "cr2")
                                .map(|c| format!(", cr2: {c:016x}"))
                                .unwrap_or_default();
                            format!("[interrupt {}{cr2}{s}]", vector.unwrap_or(0))
                        }
                        EventKind::Vmexit => {
                            let mut f = String::new();
                            if let Some(v) = vector {
                                f += &format!(", intr: {v}");
                            }
                            for name in ["vmxr", "vmxq"] {
                                if let Some(v) = field(d, name) {
                                    f += &format!(", {name}: {v:016x}");
                                }
                            }
                            format!("[vmexit{f}{s}]")
                        }
                        EventKind::Sipi => format!("[sipi: {:x}{s}]", vector.unwrap_or(0)),
                        EventKind::Uintr | EventKind::Swintr => {
                            format!("[{} {}{s}]", e.kind.name(), vector.unwrap_or(0))
                        }
                        k => format!("[{}{s}]", k.name()),
                    };
                    // An IRET's, a VM entry's event: ptxed lists it after the instruction
                    // at its IP, or (no IP) after the far transfer that libipt needed the
                    // packets after it for: the next row's.
                    let after = matches!(
                        e.kind,
                        EventKind::Iret | EventKind::Uiret | EventKind::Vmentry
                    ) && tracing
                        && i < rows.len()
                        && match e.ip {
                            Some(x) => rows.ip[i] == x,
                            // A transfer that needs a TIP.
                            None => ![BranchKind::Cond, BranchKind::Jmp, BranchKind::Call]
                                .map(|k| k as u8)
                                .contains(&rows.kind[i]),
                        };
                    if after {
                        l.after_row.get_or_insert((i, Vec::new())).1.push(line);
                    } else {
                        l.lines.push(line);
                    }
                }
            }
        }
        if i == rows.len() {
            break;
        }
        l.list_to(rows.ip[i], true)?;
        if let Some((k, lines)) = l.after_row.take() {
            if k == i {
                l.lines.extend(lines);
            } else {
                l.after_row = Some((k, lines));
            }
        }
        if rows.in_tx(i) != l.speculative {
            return Err(format!(
                "row {i}: in_tx is {}, the events say otherwise",
                rows.in_tx(i)
            ));
        }
        l.cur = rows.target.get(i);
    }
    if tracing {
        l.lines.push("[end of trace]".to_string());
    }
    let mut lines = if o.quiet { Vec::new() } else { l.lines };
    if o.unknown_cpu {
        lines.insert(0, "[0, 0: config error: unknown cpu]".to_string());
    }
    if o.stat {
        let (insn, blocks) = if o.stat_insn || o.stat_blocks {
            (o.stat_insn, o.stat_blocks)
        } else {
            (true, o.block_decoder)
        };
        if insn {
            lines.push(format!("insn: {}.", l.insns));
        }
        if blocks {
            return Err("libipt's block count is not reproduced".to_string());
        }
    }
    Ok(lines)
}

/// Lines as `diff -b` compares them.
fn normalized(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split_ascii_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// Decode a case sequentially and cut at every PSB; the two must agree.
fn decode_both(trace: &[u8], code: &[u8], org: u64, cfg: &PtConfig) -> Result<Decoded, String> {
    let mut images = ImageSet::new();
    images.add_raw("code", code, org, None);
    let stream = TraceStream::linear(trace);
    let input = Input::<Pt> {
        spaces: None,
        stream: &stream,
        images: &images,
        cfg: cfg.clone(),
        timing: PtTiming::new(cfg),
    };
    let seq = decode_all(&input, u64::MAX);
    let chunked = decode_all(&input, 1);
    if (&seq.rows.ip, &seq.rows.insns, &seq.events)
        != (&chunked.rows.ip, &chunked.rows.insns, &chunked.events)
    {
        return Err("cut at every PSB, the decode differs from the sequential one".into());
    }
    Ok(seq)
}

/// `None` when the adapter's text matches, else why not.
fn run(c: &Check) -> Option<String> {
    let (cfg, opts) = match configure(c) {
        Ok(x) => x,
        Err(e) => return Some(e),
    };
    let dir = suite().join(&c.case);
    let expected = std::fs::read_to_string(dir.join(&c.exp)).expect("expected output");
    let trace = std::fs::read(dir.join(format!("{}.pt", c.case))).expect("trace");
    let code = std::fs::read(dir.join(format!("{}.bin", c.case))).expect("code");
    let d = match decode_both(&trace, &code, c.org, &cfg) {
        Ok(d) => d,
        Err(e) => return Some(e),
    };
    let mut images = ImageSet::new();
    images.add_raw("code", &code, c.org, None);
    let stream = TraceStream::linear(&trace);
    let (status, pgds) = status_offsets(&stream, &cfg);
    let packets: Vec<(u64, Packet)> = PacketReader::new(&stream, 0, stream.len(), cfg.errata)
        .flatten()
        .map(|p| (p.offset, p.packet))
        .collect();
    let end = trace.len() as u64;
    let got = match ptxed_lines(&d, &packets, end, &images, (&status, &pgds), &opts) {
        Ok(l) => l.join("\n"),
        Err(e) => return Some(e),
    };
    if std::env::var("PTXED_SHOW").is_ok_and(|v| v == c.exp) {
        println!("{}:\n{got}\n---\nevents: {:#?}", c.exp, d.events);
    }
    let (want, have) = (normalized(&expected), normalized(&got));
    common::first_difference(&want, &have)
}

/// libipt's instruction count in an expected output: its instruction lines (16 hex
/// digits, `? ` before a speculative one), or its `--stat` line `insn: N.`; `None` when
/// it reports an error (its count then depends on where libipt gave up).
fn libipt_insns(expected: &str) -> Option<u64> {
    let mut n = 0;
    for line in expected.lines().map(str::trim) {
        if line.contains("error") {
            return None;
        }
        if let Some(v) = line.strip_prefix("insn:") {
            return v.trim().trim_end_matches('.').parse().ok();
        }
        let a = line.trim_start_matches("? ");
        if a.len() == 16 && a.bytes().all(|b| b.is_ascii_hexdigit()) {
            n += 1;
        }
    }
    Some(n)
}

/// The trace's instructions by the tables: `SUM(branches.insns)` plus the `tail` event's
/// count (docs/pt.md, "Every instruction counted").
fn decoded_insns(d: &Decoded) -> u64 {
    let rows: u64 = d.rows.insns.iter().map(|&i| i as u64).sum();
    let tail: u64 = d
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Tail)
        .map(|e| {
            e.detail
                .parse::<u64>()
                .expect("a tail's detail is its count")
        })
        .sum();
    rows + tail
}

/// Every instruction counted: on every case whose expected output lists instructions (or
/// counts them, `--stat`) and reports no error, the tables' total equals libipt's, for
/// the sequential decode and cut at every PSB. (Before the `tail` event, the
/// instructions before a trace's final FUP + TIP.PGD were in no row.)
#[test]
fn instruction_totals_equal_libipts() {
    let mut compared = 0;
    let mut differ = Vec::new();
    for c in &checks() {
        let Ok((cfg, opts)) = configure(c) else {
            continue;
        };
        let dir = suite().join(&c.case);
        let expected = std::fs::read_to_string(dir.join(&c.exp)).expect("expected output");
        let Some(want) = libipt_insns(&expected) else {
            continue;
        };
        if opts.quiet && !opts.stat {
            continue;
        }
        let trace = std::fs::read(dir.join(format!("{}.pt", c.case))).expect("trace");
        let code = std::fs::read(dir.join(format!("{}.bin", c.case))).expect("code");
        let mut images = ImageSet::new();
        images.add_raw("code", &code, c.org, None);
        let stream = TraceStream::linear(&trace);
        let input = Input::<Pt> {
            spaces: None,
            stream: &stream,
            images: &images,
            cfg: cfg.clone(),
            timing: PtTiming::new(&cfg),
        };
        for chunk in [u64::MAX, 1] {
            let d = decode_all(&input, chunk);
            let got = decoded_insns(&d);
            if got != want {
                differ.push(format!("  {} (chunk {chunk}): {got} against {want}", c.exp));
            }
            // The coverage's blocks hold the tail's too, and a decode that keeps no row
            // finds the same count and coverage.
            let covered: u64 = d.coverage.blocks.values().map(|&(i, n)| i as u64 * n).sum();
            assert_eq!(covered, got, "{}: coverage's instructions", c.exp);
            let t = tally_all::<Pt, Covered>(&input, chunk);
            assert_eq!(t.stats.insns, got, "{}: the tally's instructions", c.exp);
            assert_eq!(t.coverage, d.coverage, "{}: the tally's coverage", c.exp);
        }
        compared += 1;
    }
    println!("instruction totals compared with libipt's on {compared} expected outputs");
    let known = known_failures();
    let differ: Vec<String> = differ
        .into_iter()
        .filter(|l| !known.keys().any(|k| l.trim_start().starts_with(k.as_str())))
        .collect();
    assert!(
        differ.is_empty(),
        "instruction totals differ from libipt's:\n{}",
        differ.join("\n")
    );
}

fn known_failures() -> BTreeMap<String, String> {
    common::known_failures(&suite(), "ptxed-known-failures.txt")
}

#[test]
fn libipt_ptxed_suite() {
    let checks = checks();
    assert_eq!(checks.len(), 430, "expected ptxed outputs in the index");
    let known = known_failures();
    let mut failed = BTreeMap::new();
    for c in &checks {
        if let Some(why) = run(c) {
            failed.insert(c.exp.clone(), why);
        }
    }
    let passed = checks.len() - failed.len();
    println!(
        "libipt ptxed suite: {passed} of {} expected outputs match ({} known failures)",
        checks.len(),
        known.len()
    );
    if std::env::var_os("PTXED_DUMP_FAILURES").is_some() {
        for (f, why) in &failed {
            println!("{f} {why}");
        }
    }
    let new: Vec<String> = failed
        .iter()
        .filter(|(f, _)| !known.contains_key(*f))
        .map(|(f, why)| format!("  {f}: {why}"))
        .collect();
    let fixed: Vec<&String> = known.keys().filter(|f| !failed.contains_key(*f)).collect();
    assert!(
        new.is_empty() && fixed.is_empty(),
        "failing but not listed in ptxed-known-failures.txt:\n{}\nlisted but now passing \
         (remove them from the list):\n  {fixed:?}",
        new.join("\n")
    );
}
