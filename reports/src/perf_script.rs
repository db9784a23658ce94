//! The taken branches as `perf script --itrace=b -F comm,tid,cpu,time,ip,sym,addr,symoff`
//! prints them, so that scripts written for perf's text (FlameGraph's stackcollapse,
//! magic-trace's parser, one-off awk) read tracemill's decode unchanged:
//!
//! ```text
//!        recursion  4242 [000]     1.001101:            4016db _start+0x1b =>           4042c0 __libc_start_main_impl+0x0
//! ```
//!
//! One line per sample perf makes with `--itrace=b`:
//!
//! - every **taken** branch row: `ip => target` (a not-taken conditional branch is no
//!   sample);
//! - a branch after which tracing stopped (a `syscall` under user-only tracing, the end of
//!   the trace: the row has no target): `ip => 0`;
//! - tracing (re)starting, an `enable` event with an address: `0 => ip`, before the rows
//!   that follow it.
//!
//! Columns are perf's, in perf's widths: `comm` (16, right-aligned), `tid` (5), `[cpu]`
//! (3 digits), `time` (seconds and microseconds of perf time), then `ip`, its symbol,
//! `=>`, the target and its symbol (`name+0xoffset` inside a symbol's range, else
//! `[unknown]`). `comm`, `tid`, `cpu` and `time` come from a perf.data decode's
//! columns; a bundle's decode has none of them and its lines start at `ip`. A row of no
//! known thread (before the first switch record) prints comm `:-1` and tid `-1`, a row
//! without a time (no TSC yet) the time of the row before it on its CPU, and a trace
//! start (the `enable` event has no time of its own) the time of the row after it.
//!
//! Lines come CPU by CPU as the tables hold them (perf interleaves CPUs by time): a
//! script that reads per thread or per CPU sees the same sequence. The time is the row's
//! (`time`: its TSC as perf time), which can differ from perf's by up to one interval of
//! timing packets: between them perf estimates its own way (see the test in
//! `pipeline/tests/perf_data.rs`).

use std::collections::HashMap;
use std::io::Write;

use anyhow::{Context as _, Result};
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::{Array, BooleanArray};
use tracemill_schemas::EventKind;

use crate::input::{Input, META_THREADS};
use crate::source::{warn_once, Source};
use crate::symbols::Symbolizer;
use crate::util::{col, kind_codes, AddrMap};

/// What [`write`] wrote.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub lines: u64,
    /// Taken branches among them (the others are trace starts and stops).
    pub branches: u64,
    pub warnings: Vec<String>,
}

/// An image's function symbols as perf keeps them: one per start address, chosen among
/// aliases by perf's rules (`choose_best_symbol` in perf's `util/symbol.c`), so that an
/// address gets perf's name (`__libc_start_main_impl`, not its alias `__libc_start_main`).
struct PerfSymbols {
    /// Run-time address minus the ELF's own.
    bias: u64,
    /// (start, end, name) in the ELF's addresses, sorted by start.
    syms: Vec<(u64, u64, String)>,
}

impl PerfSymbols {
    /// The ELF's function symbols (`STT_FUNC`, `STT_GNU_IFUNC`, defined). `None` when the
    /// file is not an ELF (a raw image: its symbol file's functions are used).
    fn load(path: &std::path::Path, bias: u64) -> Option<PerfSymbols> {
        use object::{Object, ObjectSymbol, SymbolKind};
        let bytes = std::fs::read(path).ok()?;
        let elf = object::File::parse(&*bytes).ok()?;
        // (start, size, weak, global, name)
        let mut all: Vec<(u64, u64, bool, bool, String)> = elf
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && !s.is_undefined() && s.address() != 0)
            .filter_map(|s| {
                let name = s.name().ok()?.to_string();
                Some((
                    s.address(),
                    s.size(),
                    s.is_weak(),
                    s.is_global() && !s.is_weak(),
                    name,
                ))
            })
            .collect();
        all.sort_by_key(|s| s.0);
        let mut syms: Vec<(u64, u64, String)> = Vec::new();
        let mut best: Option<(u64, u64, bool, bool, String)> = None;
        for s in all {
            best = match best {
                Some(b) if b.0 == s.0 => Some(if Self::prefer(&s, &b) { s } else { b }),
                Some(b) => {
                    syms.push((b.0, b.0 + b.1, b.4));
                    Some(s)
                }
                None => Some(s),
            };
        }
        if let Some(b) = best {
            syms.push((b.0, b.0 + b.1, b.4));
        }
        // A symbol without a size ends where the next one starts (perf's
        // `symbols__fixup_end`).
        for i in 0..syms.len() {
            if syms[i].1 == syms[i].0 {
                syms[i].1 = syms.get(i + 1).map_or(u64::MAX, |n| n.0);
            }
        }
        Some(PerfSymbols { bias, syms })
    }

    /// Does perf take `a` over `b` (same start)? A size over none, not weak over weak,
    /// global over local, fewer leading underscores, the longer name; else the first.
    fn prefer(a: &(u64, u64, bool, bool, String), b: &(u64, u64, bool, bool, String)) -> bool {
        if (a.1 > 0) != (b.1 > 0) {
            return a.1 > 0;
        }
        if a.2 != b.2 {
            return !a.2;
        }
        if a.3 != b.3 {
            return a.3;
        }
        let us = |n: &str| n.len() - n.trim_start_matches('_').len();
        if us(&a.4) != us(&b.4) {
            return us(&a.4) < us(&b.4);
        }
        a.4.len() > b.4.len()
    }

    fn name(&self, addr: u64) -> Option<String> {
        let a = addr.wrapping_sub(self.bias);
        let i = self.syms.partition_point(|s| s.0 <= a).checked_sub(1)?;
        let (start, end, name) = &self.syms[i];
        (a < *end).then(|| format!("{name}+{:#x}", a - start))
    }
}

/// Symbols of addresses as perf prints them, each address looked up once.
struct Names<'s> {
    syms: &'s Symbolizer,
    /// Per image of `syms`, its symbols as perf chooses them (`None`: not an ELF).
    perf: Vec<Option<PerfSymbols>>,
    cache: AddrMap<u64, Box<str>>,
}

impl<'s> Names<'s> {
    fn new(syms: &'s Symbolizer) -> Self {
        let perf = syms
            .images
            .iter()
            .map(|im| {
                if im.spec.raw {
                    None
                } else {
                    PerfSymbols::load(&im.spec.path, im.bias)
                }
            })
            .collect();
        Names {
            syms,
            perf,
            cache: AddrMap::default(),
        }
    }

    /// The address column and its symbol: `{addr:>16x} name+0xoff` (formatted once per
    /// address: the text is most of a line's cost).
    fn of(&mut self, addr: u64) -> &str {
        let (syms, perf) = (self.syms, &self.perf);
        self.cache.entry(addr).or_insert_with(|| {
            if addr == 0 {
                return format!("{addr:>16x} [unknown]").into_boxed_str();
            }
            let named = syms.image_of(addr, None).and_then(|im| {
                if let Some(p) = &perf[syms.index_of(im)] {
                    return p.name(addr);
                }
                let f = &im.functions()[im.function_index(addr)?];
                (addr >= f.start && addr < f.end)
                    .then(|| format!("{}+{:#x}", f.name, addr - f.start))
            });
            let name = named.unwrap_or_else(|| "[unknown]".into());
            format!("{addr:>16x} {name}").into_boxed_str()
        })
    }
}

/// The perf.data columns of a line: `tid` (outer `None`: the decode has no such column),
/// `cpu`, `time`.
#[derive(Clone, Copy)]
struct Who {
    tid: Option<Option<u32>>,
    cpu: Option<u32>,
    time: Option<Option<u64>>,
}

/// The perf.data columns of a batch (none for a bundle's decode).
struct ThreadColumns<'a>(
    Option<(
        &'a arrow_array::PrimitiveArray<UInt32Type>,
        &'a arrow_array::PrimitiveArray<UInt32Type>,
        &'a arrow_array::PrimitiveArray<UInt64Type>,
    )>,
);

impl<'a> ThreadColumns<'a> {
    fn of(b: &'a arrow_array::RecordBatch, threads: bool) -> Result<Self> {
        Ok(ThreadColumns(if threads {
            Some((
                col::<UInt32Type>(b, "cpu")?,
                col::<UInt32Type>(b, "tid")?,
                col::<UInt64Type>(b, "time")?,
            ))
        } else {
            None
        }))
    }

    fn who(&self, i: usize) -> Who {
        let v32 = |c: &arrow_array::PrimitiveArray<UInt32Type>| c.is_valid(i).then(|| c.value(i));
        match self.0 {
            None => Who {
                tid: None,
                cpu: None,
                time: None,
            },
            Some((cpu, tid, time)) => Who {
                tid: Some(v32(tid)),
                cpu: v32(cpu),
                time: Some(time.is_valid(i).then(|| time.value(i))),
            },
        }
    }
}

/// What a line's start is made of: tid (outer `None`: no such column), cpu, time.
type PrefixKey = (Option<Option<u32>>, Option<u32>, Option<u64>);

/// The line's start up to the `ip` column: `comm tid [cpu] time: `. A line without a
/// time takes the last one of its CPU. Consecutive lines mostly share their start (a
/// timing packet every few thousand branches): it is made again only when it changes.
struct Prefixer {
    comms: HashMap<u32, String>,
    last_time: HashMap<Option<u32>, u64>,
    /// What the last start was made of.
    key: Option<PrefixKey>,
    text: Vec<u8>,
}

impl Prefixer {
    fn put(&mut self, line: &mut Vec<u8>, w: Who) {
        let time = w.time.map(|t| match t {
            Some(v) => {
                self.last_time.insert(w.cpu, v);
                v
            }
            None => self.last_time.get(&w.cpu).copied().unwrap_or(0),
        });
        let key = (w.tid, w.cpu, time);
        if self.key != Some(key) {
            self.key = Some(key);
            let t = &mut self.text;
            t.clear();
            if let Some(tid) = w.tid {
                let comm = tid
                    .and_then(|t| self.comms.get(&t))
                    .map_or(":-1", String::as_str);
                let _ = write!(t, "{comm:>16} ");
                match tid {
                    Some(tid) => {
                        let _ = write!(t, "{tid:>5} ");
                    }
                    None => t.extend_from_slice(b"   -1 "),
                }
            }
            if let Some(c) = w.cpu {
                let _ = write!(t, "[{c:03}] ");
            }
            if let Some(ns) = time {
                let _ = write!(
                    t,
                    "{:>5}.{:06}: ",
                    ns / 1_000_000_000,
                    ns % 1_000_000_000 / 1000
                );
            }
        }
        line.extend_from_slice(&self.text);
    }
}

/// The comm of each thread, from a perf.data decode's metadata (`pid/tid=comm`, perf's
/// COMM records).
fn comms(input: &Input) -> HashMap<u32, String> {
    input
        .meta
        .get(META_THREADS)
        .map(|v| {
            v.split(',')
                .filter_map(|e| {
                    let (ids, comm) = e.split_once('=')?;
                    let (_, tid) = ids.split_once('/')?;
                    Some((tid.parse().ok()?, comm.to_string()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The `enable` events with an address, in order: (seq, ip, tid and cpu). Events are few
/// (one per PSB, syscall and switch): read whole.
fn enables(input: &Input, threads: bool) -> Result<Vec<(u64, u64, Who)>> {
    let t = input.table("events")?;
    let mut cols = vec!["seq", "kind", "ip"];
    if threads {
        cols.extend(["cpu", "tid", "time"]);
    }
    let mut out = Vec::new();
    for b in t.batches(&cols)? {
        let b = b?;
        let seq = col::<UInt64Type>(&b, "seq")?;
        let ip = col::<UInt64Type>(&b, "ip")?;
        let kinds = kind_codes(&b, "kind", EventKind::from_name, |k| k as u8)?;
        let tc = ThreadColumns::of(&b, threads)?;
        for (i, &k) in kinds.iter().enumerate() {
            if k == EventKind::Enable as u8 && ip.is_valid(i) {
                out.push((seq.value(i), ip.value(i), tc.who(i)));
            }
        }
    }
    Ok(out)
}

/// Write one decode's lines.
fn write_input(input: &Input, out: &mut impl Write, s: &mut Summary) -> Result<()> {
    let t = input.table("branches")?;
    let threads = t.schema.field_with_name("tid").is_ok();
    let mut prefix = Prefixer {
        comms: comms(input),
        last_time: HashMap::new(),
        key: None,
        text: Vec::new(),
    };
    let mut names = Names::new(&input.symbols);
    let en = enables(input, threads).unwrap_or_else(|e| {
        warn_once(
            &mut s.warnings,
            format!("events: {e:#}: no trace start lines (0 => ip)"),
        );
        Vec::new()
    });
    let mut next = 0;
    let mut line = Vec::with_capacity(160);
    let mut cols = vec!["seq", "ip", "target", "taken"];
    if threads {
        cols.extend(["cpu", "tid", "time"]);
    }
    for b in t.batches(&cols)? {
        let b = b?;
        let seq = col::<UInt64Type>(&b, "seq")?;
        let ip = col::<UInt64Type>(&b, "ip")?;
        let target = col::<UInt64Type>(&b, "target")?;
        let taken = b
            .column_by_name("taken")
            .and_then(|c| c.as_any().downcast_ref::<BooleanArray>())
            .context("column taken missing or not boolean")?;
        let tc = ThreadColumns::of(&b, threads)?;
        for i in 0..b.num_rows() {
            let row = tc.who(i);
            // Tracing started before this row: `0 => ip`. The event has no time of its
            // own: the row's.
            while next < en.len() && en[next].0 <= seq.value(i) {
                let (_, to, who) = en[next];
                line.clear();
                prefix.put(
                    &mut line,
                    Who {
                        time: row.time,
                        ..who
                    },
                );
                line.push(b' ');
                line.extend_from_slice(names.of(0).as_bytes());
                line.extend_from_slice(b" => ");
                line.extend_from_slice(names.of(to).as_bytes());
                line.push(b'\n');
                out.write_all(&line)?;
                s.lines += 1;
                next += 1;
            }
            let has_target = target.is_valid(i);
            if !taken.value(i) && has_target {
                continue; // a not-taken conditional branch: no sample
            }
            let (from, to) = (ip.value(i), if has_target { target.value(i) } else { 0 });
            line.clear();
            prefix.put(&mut line, row);
            line.push(b' ');
            line.extend_from_slice(names.of(from).as_bytes());
            line.extend_from_slice(b" => ");
            line.extend_from_slice(names.of(to).as_bytes());
            line.push(b'\n');
            out.write_all(&line)?;
            s.lines += 1;
            s.branches += has_target as u64;
        }
    }
    Ok(())
}

/// Write the lines of a decode, or of each selected bundle of a dataset in turn.
pub fn write(src: &mut Source, out: impl Write) -> Result<Summary> {
    let mut out = std::io::BufWriter::with_capacity(1 << 20, out);
    let mut s = Summary::default();
    let mut ws = Vec::new();
    src.each(&mut ws, |input, _| write_input(input, &mut out, &mut s))?;
    out.flush()?;
    for w in ws {
        warn_once(&mut s.warnings, w);
    }
    Ok(s)
}
