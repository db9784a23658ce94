//! Symbolizing: tracemill's symbols (object + addr2line, `tracemill_reports::symbols`)
//! against blazesym, on the same ELF images and the same addresses. Prints load time,
//! nanoseconds per address for function names and for file:line with inlined frames
//! (medians of the runs), and how often the two agree.
//!
//! ```sh
//! cargo build --release -p tracemill-benches --bin symbolize-bench
//! target/release/symbolize-bench ELF [ELF...] [--runs N] [--examples K] [--only WHICH]
//! ```
//!
//! Addresses: every instruction start of the image's executable sections (`SHF_EXECINSTR`),
//! found by a linear sweep with iced-x86 from each section's start, at the ELF's own
//! addresses (tracemill's image loaded without a base, blazesym's `Input::VirtOffset`).
//!
//! Each run loads every symbolizer afresh. "load" is opening the image and answering the
//! first address (with file:line and inlined frames): both libraries parse lazily, and
//! this much must be done before any answer. Then passes over the addresses, each timed
//! and divided by its number of addresses: names (all addresses), lines with inlined
//! frames (all addresses: the first pass, which parses what was left lazy) and lines
//! again over the addresses DWARF has a line for (a second pass: warm).
//!
//! - tracemill: `ImageSymbols::load`, `function_name` (ELF symbol table) and `frames`
//!   (DWARF, innermost first), one call per address, as the reports call them.
//! - blazesym: `Symbolizer` with `Source::Elf`; names from the ELF symbol table only
//!   (`debug_syms: false`, no code info: the cheapest way to ask it for a name, and the
//!   same source tracemill names from); lines with `debug_syms: true`, code info and
//!   inlined functions. Two ways to call it: one `symbolize_single` per address, and one
//!   `symbolize` call with all the addresses (batch). Each with blazesym's defaults and
//!   tuned (`Config`: no `stat` of the file per call, no demangling).
//!
//! Agreement compares, per address, tracemill's answers with blazesym's (tuned: names as
//! they are in the file, as tracemill gives them): the function name, and where DWARF
//! gives a line, the outermost frame's file:line and function and the number of inlined
//! frames. Disagreements are counted by kind and a few shown.
//!
//! `--only addr2line|blazesym|none`: no timing; one implementation (blazesym tuned, one
//! call per address; none: the address sweep alone) loads the image and answers names
//! and lines for every address, and the process's memory is printed while the symbolizer
//! is still held (VmRSS, RssAnon, RssFile, VmHWM; or run it under `/usr/bin/time -v`).
//! Nothing is asserted: this is a measurement.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Sym, Symbolizer};
use iced_x86::{Decoder, DecoderOptions};
use object::{Object, ObjectSection, SectionFlags};
use tracemill_reports::symbols::{ImageSpec, ImageSymbols};

// The allocator of the `tracemill` binary, whose reports use these symbols.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Only {
    All,
    Addr2line,
    Blazesym,
    None,
}

struct Args {
    images: Vec<PathBuf>,
    runs: usize,
    examples: usize,
    only: Only,
}

fn args() -> Result<Args> {
    let mut a = Args {
        images: Vec::new(),
        runs: 5,
        examples: 4,
        only: Only::All,
    };
    let mut it = std::env::args().skip(1);
    while let Some(s) = it.next() {
        match s.as_str() {
            "--runs" => a.runs = it.next().context("--runs N")?.parse()?,
            "--examples" => a.examples = it.next().context("--examples K")?.parse()?,
            "--only" => {
                a.only = match it.next().as_deref() {
                    Some("addr2line") => Only::Addr2line,
                    Some("blazesym") => Only::Blazesym,
                    Some("none") => Only::None,
                    _ => bail!("--only addr2line|blazesym|none"),
                }
            }
            _ if s.starts_with("--") => bail!("unknown option {s}"),
            _ => a.images.push(PathBuf::from(s)),
        }
    }
    if a.images.is_empty() || a.runs == 0 {
        bail!("usage: symbolize-bench ELF [ELF...] [--runs N] [--examples K] [--only addr2line|blazesym|none]");
    }
    Ok(a)
}

/// Instruction starts of the executable sections, by linear sweep; the number of bytes
/// swept; the file's bytes, for `--only` to keep (freed, the allocator would hand their
/// pages to the symbolizer measured and hide its memory).
fn instruction_starts(path: &Path) -> Result<(Vec<u64>, u64, Vec<u8>)> {
    let bytes = std::fs::read(path).with_context(|| format!("{}", path.display()))?;
    let file = object::File::parse(&*bytes)?;
    let sections: Vec<_> = file
        .sections()
        .filter(|s| {
            matches!(s.flags(), SectionFlags::Elf { sh_flags, .. }
                if sh_flags.0 & object::elf::SHF_EXECINSTR.0 != 0)
                && s.kind() != object::SectionKind::UninitializedData
        })
        .collect();
    let code_bytes: u64 = sections.iter().map(|s| s.size()).sum();
    // At most one instruction per byte: reserved once, never moved (pages not written
    // are not resident).
    let mut out = Vec::with_capacity(code_bytes as usize);
    for s in &sections {
        let mut d = Decoder::with_ip(64, s.data()?, s.address(), DecoderOptions::NONE);
        while d.can_decode() {
            let ip = d.ip();
            if !d.decode().is_invalid() {
                out.push(ip);
            }
        }
    }
    drop(sections);
    drop(file);
    Ok((out, code_bytes, bytes))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn ns_per(t: Instant, n: usize) -> f64 {
    t.elapsed().as_secs_f64() * 1e9 / n.max(1) as f64
}

/// A `KEY: N kB` line of /proc/self/status.
fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix(key)?
                    .trim_start_matches(':')
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
        })
        .unwrap_or(0)
}

fn tm_load(path: &Path) -> Result<ImageSymbols> {
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    ImageSymbols::load(ImageSpec {
        name,
        path: path.to_path_buf(),
        ..ImageSpec::default()
    })
}

/// blazesym's settings: its defaults, or tuned for a trace's images, which do not change
/// while they are symbolized (no `stat` of the file on every call) and are C (no attempt
/// to demangle each name as Rust, then C++; tracemill does not demangle).
#[derive(Clone, Copy)]
struct Config {
    auto_reload: bool,
    demangle: bool,
}

const DEFAULTS: Config = Config {
    auto_reload: true,
    demangle: true,
};
const TUNED: Config = Config {
    auto_reload: false,
    demangle: false,
};

fn bz_names(c: Config) -> Symbolizer {
    Symbolizer::builder()
        .enable_code_info(false)
        .enable_inlined_fns(false)
        .enable_auto_reload(c.auto_reload)
        .enable_demangling(c.demangle)
        .build()
}

fn bz_lines(c: Config) -> Symbolizer {
    Symbolizer::builder()
        .enable_code_info(true)
        .enable_inlined_fns(true)
        .enable_auto_reload(c.auto_reload)
        .enable_demangling(c.demangle)
        .build()
}

fn bz_source(path: &Path, debug_syms: bool) -> Source<'static> {
    let mut elf = Elf::new(path);
    elf.debug_syms = debug_syms;
    Source::Elf(elf)
}

/// Medians of one implementation's timings.
#[derive(Default)]
struct Timing {
    load_ms: Vec<f64>,
    names_ns: Vec<f64>,
    lines_ns: Vec<f64>,
    /// Lines over the addresses that have one (the code DWARF describes).
    dwarf_ns: Vec<f64>,
}

impl Timing {
    fn row(&self, name: &str, agree: &str) {
        println!(
            "| {name} | {:.2} | {:.1} | {:.1} | {} | {agree} |",
            median(self.load_ms.clone()),
            median(self.names_ns.clone()),
            median(self.lines_ns.clone()),
            if self.dwarf_ns.is_empty() {
                "–".to_string()
            } else {
                format!("{:.1}", median(self.dwarf_ns.clone()))
            },
        );
    }
}

fn run_addr2line(path: &Path, addrs: &[u64], dwarf: &[u64], t: &mut Timing) -> Result<()> {
    let start = Instant::now();
    let im = tm_load(path)?;
    black_box(im.frames(addrs[0]));
    t.load_ms.push(ms(start));

    let start = Instant::now();
    for &a in addrs {
        black_box(im.function_name(a));
    }
    t.names_ns.push(ns_per(start, addrs.len()));

    for (set, out) in [(addrs, &mut t.lines_ns), (dwarf, &mut t.dwarf_ns)] {
        if set.is_empty() {
            continue;
        }
        let start = Instant::now();
        for &a in set {
            black_box(im.frames(a));
        }
        out.push(ns_per(start, set.len()));
    }
    Ok(())
}

/// One configuration of blazesym, called once per address (`single`) and once with all
/// the addresses (`batch`), each on fresh symbolizers.
fn run_blazesym(
    path: &Path,
    addrs: &[u64],
    dwarf: &[u64],
    c: Config,
    single: &mut Timing,
    batch: &mut Timing,
) -> Result<()> {
    let names_src = bz_source(path, false);
    let lines_src = bz_source(path, true);
    let first = Input::VirtOffset(addrs[0]);

    let start = Instant::now();
    let lines = bz_lines(c);
    black_box(lines.symbolize_single(&lines_src, first)?);
    single.load_ms.push(ms(start));
    let names = bz_names(c);
    black_box(names.symbolize_single(&names_src, first)?);
    let start = Instant::now();
    for &a in addrs {
        black_box(names.symbolize_single(&names_src, Input::VirtOffset(a))?);
    }
    single.names_ns.push(ns_per(start, addrs.len()));
    for (set, out) in [(addrs, &mut single.lines_ns), (dwarf, &mut single.dwarf_ns)] {
        if set.is_empty() {
            continue;
        }
        let start = Instant::now();
        for &a in set {
            black_box(lines.symbolize_single(&lines_src, Input::VirtOffset(a))?);
        }
        out.push(ns_per(start, set.len()));
    }
    drop((names, lines));

    let start = Instant::now();
    let lines = bz_lines(c);
    black_box(lines.symbolize_single(&lines_src, first)?);
    batch.load_ms.push(ms(start));
    let names = bz_names(c);
    black_box(names.symbolize_single(&names_src, first)?);
    let start = Instant::now();
    black_box(names.symbolize(&names_src, Input::VirtOffset(addrs))?);
    batch.names_ns.push(ns_per(start, addrs.len()));
    for (set, out) in [(addrs, &mut batch.lines_ns), (dwarf, &mut batch.dwarf_ns)] {
        if set.is_empty() {
            continue;
        }
        let start = Instant::now();
        black_box(lines.symbolize(&lines_src, Input::VirtOffset(set))?);
        out.push(ns_per(start, set.len()));
    }
    Ok(())
}

/// What one implementation says about one address.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Answer {
    /// From the ELF symbol table, and where that symbol starts (not compared).
    name: Option<String>,
    start: Option<u64>,
    /// Outermost frame: the function the code is in (DWARF), and where in the source.
    outer_fn: Option<String>,
    outer_line: Option<(String, u32)>,
    inlined: usize,
}

fn tm_answers(im: &ImageSymbols, addrs: &[u64]) -> Vec<Answer> {
    addrs
        .iter()
        .map(|&a| {
            let frames = im.frames(a);
            let outer = frames.last();
            let f = im.function_index(a).map(|i| &im.functions()[i]);
            Answer {
                name: f.map(|f| f.name.clone()),
                start: f.map(|f| f.start),
                outer_fn: outer.and_then(|f| f.function.clone()),
                outer_line: outer
                    .and_then(|f| f.line.as_ref())
                    .map(|l| (l.file.clone(), l.line)),
                inlined: frames.len().saturating_sub(1),
            }
        })
        .collect()
}

/// blazesym's answers, not demangled: tracemill does not demangle, so names are compared
/// as they are in the symbol table and DWARF (C images have no mangled names).
fn bz_answers(path: &Path, addrs: &[u64]) -> Result<Vec<Answer>> {
    let names = bz_names(TUNED);
    let lines = bz_lines(TUNED);
    let n = names.symbolize(&bz_source(path, false), Input::VirtOffset(addrs))?;
    let l = lines.symbolize(&bz_source(path, true), Input::VirtOffset(addrs))?;
    Ok(n.iter()
        .zip(&l)
        .map(|(n, l)| {
            let n: Option<&Sym<'_>> = n.as_sym();
            let l: Option<&Sym<'_>> = l.as_sym();
            let code = l.and_then(|s| s.code_info.as_deref());
            Answer {
                name: n.map(|s| s.name.to_string()),
                start: n.map(|s| s.addr),
                outer_fn: l.map(|s| s.name.to_string()),
                // DWARF line 0 is "no source line": addr2line reports no line, blazesym
                // line 0. The same answer; compared as no line.
                outer_line: code.and_then(|c| {
                    let line = c.line.filter(|&l| l != 0)?;
                    Some((c.to_path().to_string_lossy().into_owned(), line))
                }),
                inlined: l.map_or(0, |s| s.inlined.len()),
            }
        })
        .collect())
}

/// Agreement of the two answers, per question, with the most frequent disagreements.
/// Returns the percentages: names; file:line / inlined count / outer function.
fn agreement(addrs: &[u64], tm: &[Answer], bz: &[Answer], examples: usize) -> (String, String) {
    type Key = fn(&Answer) -> String;
    let checks: [(&str, Key); 4] = [
        ("function name (ELF symbols)", |a| format!("{:?}", a.name)),
        ("outermost frame's file:line", |a| {
            format!("{:?}", a.outer_line)
        }),
        ("number of inlined frames", |a| a.inlined.to_string()),
        ("outermost frame's function (DWARF)", |a| {
            format!("{:?}", a.outer_fn)
        }),
    ];
    let with_lines: Vec<usize> = (0..addrs.len())
        .filter(|&i| tm[i].outer_line.is_some() || bz[i].outer_line.is_some())
        .collect();
    let inlined = |x: &[Answer]| x.iter().filter(|a| a.inlined > 0).count();
    println!(
        "  agreement: {} addresses, {} with a line from either; with inlined frames: {} (addr2line), {} (blazesym)",
        addrs.len(),
        with_lines.len(),
        inlined(tm),
        inlined(bz)
    );
    let mut summary = Vec::new();
    for (n, (what, key)) in checks.into_iter().enumerate() {
        let names = n == 0;
        let idx: Vec<usize> = if names {
            (0..addrs.len()).collect()
        } else {
            with_lines.clone()
        };
        let mut same = 0usize;
        // Names: why they differ (another alias of the same start, or one has none).
        let mut why: BTreeMap<&str, usize> = BTreeMap::new();
        // Disagreements grouped by the pair of answers: count, first address.
        let mut kinds: BTreeMap<(String, String), (usize, u64)> = BTreeMap::new();
        for &i in &idx {
            let (a, b) = (key(&tm[i]), key(&bz[i]));
            if a == b {
                same += 1;
                continue;
            }
            if names {
                let w = match (tm[i].start, bz[i].start) {
                    (Some(x), Some(y)) if x == y => "another name of the same start (alias)",
                    (Some(_), Some(_)) => "symbols of different starts",
                    (Some(_), None) => "only addr2line names it",
                    (None, Some(_)) => "only blazesym names it",
                    (None, None) => unreachable!(),
                };
                *why.entry(w).or_default() += 1;
            }
            kinds.entry((a, b)).or_insert((0, addrs[i])).0 += 1;
        }
        let pct = 100.0 * same as f64 / idx.len().max(1) as f64;
        println!("    {what}: {same} of {} agree ({pct:.2}%)", idx.len());
        summary.push(format!("{pct:.2}%"));
        for (w, count) in &why {
            println!("      {count} differ: {w}");
        }
        let mut kinds: Vec<_> = kinds.into_iter().collect();
        kinds.sort_by(|x, y| y.1 .0.cmp(&x.1 .0).then(x.0.cmp(&y.0)));
        for ((a, b), (count, addr)) in kinds.iter().take(examples) {
            let i = addrs.partition_point(|x| x < addr);
            println!(
                "      {count}× e.g. {addr:#x}: addr2line {a}, blazesym {b} (symbol starts {:x?} / {:x?})",
                tm[i].start, bz[i].start
            );
        }
    }
    (
        summary[0].clone(),
        format!("{} / {} / {}", summary[1], summary[2], summary[3]),
    )
}

/// Memory of this process from /proc/self/status: VmRSS, RssAnon, RssFile, VmHWM (KiB).
fn mem() -> String {
    let [rss, anon, file, hwm] = ["VmRSS", "RssAnon", "RssFile", "VmHWM"].map(status_kib);
    format!("VmRSS {rss} KiB (anon {anon}, file {file}), VmHWM {hwm} KiB")
}

/// `--only`: one implementation loads the image and answers names and lines for every
/// address (one call per address, blazesym tuned); memory is read while it is still held.
fn memory(path: &Path, addrs: &[u64], only: Only) -> Result<()> {
    println!("{}: {} addresses", path.display(), addrs.len());
    println!("  before: {}", mem());
    match only {
        Only::Addr2line => {
            let im = tm_load(path)?;
            for &a in addrs {
                black_box(im.function_name(a));
                black_box(im.frames(a));
            }
            println!("  addr2line, loaded and asked: {}", mem());
        }
        Only::Blazesym => {
            let (names, lines) = (bz_names(TUNED), bz_lines(TUNED));
            let (names_src, lines_src) = (bz_source(path, false), bz_source(path, true));
            for &a in addrs {
                black_box(names.symbolize_single(&names_src, Input::VirtOffset(a))?);
                black_box(lines.symbolize_single(&lines_src, Input::VirtOffset(a))?);
            }
            println!("  blazesym, loaded and asked: {}", mem());
        }
        _ => {}
    }
    Ok(())
}

fn main() -> Result<()> {
    tracemill::allocator::configure();
    let args = args()?;
    for path in &args.images {
        let (addrs, code_bytes, bytes) = instruction_starts(path)?;
        if addrs.is_empty() {
            bail!("{}: no executable section", path.display());
        }
        if args.only != Only::All {
            memory(path, &addrs, args.only)?;
            drop(bytes);
            continue;
        }
        drop(bytes);
        let im = tm_load(path)?;
        // The addresses DWARF gives a line for (timed apart: the program's own code).
        let dwarf: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|&a| im.line(a).is_some())
            .collect();
        println!(
            "{}: {} instruction starts in {} bytes of executable sections, {} of them with a DWARF line; {} function symbols{}",
            path.display(),
            addrs.len(),
            code_bytes,
            dwarf.len(),
            im.functions().len(),
            if im.notes.is_empty() {
                String::new()
            } else {
                format!(" ({})", im.notes.join("; "))
            }
        );
        drop(im);

        let tm = tm_answers(&tm_load(path)?, &addrs);
        let bz = bz_answers(path, &addrs)?;
        let (agree_names, agree_lines) = agreement(&addrs, &tm, &bz, args.examples);

        let mut a2l = Timing::default();
        let mut bz_t: [Timing; 4] = Default::default();
        for _ in 0..args.runs {
            run_addr2line(path, &addrs, &dwarf, &mut a2l)?;
            let [d1, d2, t1, t2] = &mut bz_t;
            run_blazesym(path, &addrs, &dwarf, DEFAULTS, d1, d2)?;
            run_blazesym(path, &addrs, &dwarf, TUNED, t1, t2)?;
        }
        println!(
            "\n| implementation | load ms | ns/address: name | lines+inlined, all addresses | lines+inlined, addresses with a line | agreement: names; file:line / inlined count / outer function |"
        );
        println!("|---|---|---|---|---|---|");
        a2l.row("object + addr2line (tracemill)", "(reference)");
        let agree = format!("{agree_names}; {agree_lines}");
        let labels = [
            "blazesym defaults, one call per address",
            "blazesym defaults, one call for all",
            "blazesym tuned, one call per address",
            "blazesym tuned, one call for all",
        ];
        for (t, label) in bz_t.iter().zip(labels) {
            t.row(label, &agree);
        }
        println!();
    }
    Ok(())
}
