//! Coverage exports: drcov (version 2, as Lighthouse and bncov read it), lcov tracefiles
//! (line and function hit counts from DWARF), and a per-function summary.
//!
//! Everything comes from the `coverage` table (one row per distinct block with its
//! execution count); the images give block sizes (the last instruction's length) and,
//! through DWARF, lines.
//!
//! drcov layout (DynamoRIO's `drcov` tool, log version 2):
//!
//! ```text
//! DRCOV VERSION: 2
//! DRCOV FLAVOR: tracemill
//! Module Table: version 2, count N
//! Columns: id, base, end, entry, checksum, timestamp, path
//!   0, 0x0000000000400000, 0x00000000004c6000, 0x0000000000000000, 0x00000000, 0x00000000, /path/prog
//! BB Table: M bbs
//! <M records of 8 bytes, little-endian: u32 start (offset from the module's base),
//!  u16 size (bytes), u16 module id>
//! ```
//!
//! drcov lists each block once (no counts). A block longer than 65535 bytes is written as
//! several records. Blocks of no image are left out (counted in a warning).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::Path;

use anyhow::{Context as _, Result};

use crate::hotspots::{read_blocks, Block};
use crate::input::Input;
use crate::source::Source;
use crate::symbols::{ImageSymbols, Symbolizer};
use crate::util::{block_insns, group, AddrMap};

/// One module of the drcov table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    pub name: String,
    pub path: String,
    pub base: u64,
    pub end: u64,
}

/// Every executed instruction of the blocks, with its execution count and length: the
/// common ground of lcov and the summaries.
pub struct Executed {
    /// Per image name: address -> (executions, length).
    pub by_image: HashMap<String, AddrMap<u64, (u64, u8)>>,
    /// Blocks that could not be disassembled (image missing or damaged).
    pub undecoded: u64,
}

fn image_of_block<'a>(syms: &'a Symbolizer, b: &Block) -> Option<&'a ImageSymbols> {
    match &b.image {
        Some(n) => syms.by_name(n),
        None => syms.image_of(b.start, None),
    }
}

/// Disassemble every block.
pub fn executed(syms: &Symbolizer, blocks: &[Block]) -> Executed {
    let mut by_image: HashMap<String, AddrMap<u64, (u64, u8)>> = HashMap::new();
    let mut undecoded = 0;
    for b in blocks {
        let Some(im) = image_of_block(syms, b) else {
            undecoded += 1;
            continue;
        };
        let insns = im
            .code_at(b.start)
            .and_then(|c| block_insns(c, b.start, b.end, b.insns as usize + 1));
        let Some(insns) = insns else {
            undecoded += 1;
            continue;
        };
        let m = by_image.entry(im.spec.name.clone()).or_default();
        for (a, len) in insns {
            let e = m.entry(a).or_insert((0, len));
            e.0 += b.count;
        }
    }
    Executed {
        by_image,
        undecoded,
    }
}

/// The drcov module table: one module per image named in the coverage table, in order of
/// first appearance, at the image's load base.
pub fn modules(syms: &Symbolizer, blocks: &[Block]) -> (Vec<Module>, HashMap<String, u16>) {
    let mut mods: Vec<Module> = Vec::new();
    let mut ids = HashMap::new();
    let mut seen_end: HashMap<String, u64> = HashMap::new();
    for b in blocks {
        let Some(name) = b
            .image
            .clone()
            .or_else(|| syms.image_of(b.start, None).map(|i| i.spec.name.clone()))
        else {
            continue;
        };
        let e = seen_end.entry(name.clone()).or_insert(0);
        *e = (*e).max(b.end + 16);
        if ids.contains_key(&name) {
            continue;
        }
        let (base, end, path) = match syms.by_name(&name) {
            Some(im) => {
                let (_, hi) = im.code_range();
                (im.base, hi, im.spec.path.display().to_string())
            }
            // No file: the load base from the table itself, the end from the blocks.
            None => (
                b.image_offset
                    .map_or(b.start & !0xfff, |o| b.start.wrapping_sub(o)),
                0,
                name.clone(),
            ),
        };
        ids.insert(name.clone(), mods.len() as u16);
        mods.push(Module {
            name,
            path,
            base,
            end,
        });
    }
    for m in &mut mods {
        if m.end == 0 {
            m.end = seen_end[&m.name];
        }
    }
    (mods, ids)
}

/// Write the drcov file; returns (modules, records, blocks left out).
pub fn write_drcov(
    syms: &Symbolizer,
    blocks: &[Block],
    out: impl Write,
) -> Result<(usize, u64, u64)> {
    let (mods, ids) = modules(syms, blocks);
    // Records first (their count goes in the header).
    let mut recs: Vec<(u32, u16, u16)> = Vec::with_capacity(blocks.len());
    let mut left_out = 0u64;
    for b in blocks {
        let name = b
            .image
            .clone()
            .or_else(|| syms.image_of(b.start, None).map(|i| i.spec.name.clone()));
        let Some(id) = name.as_ref().and_then(|n| ids.get(n)).copied() else {
            left_out += 1;
            continue;
        };
        let m = &mods[id as usize];
        let last_len = image_of_block(syms, b)
            .and_then(|im| im.code_at(b.end))
            .map_or(1, |c| crate::util::insn_len(c, b.end).max(1)) as u64;
        let (Some(off), true) = (b.start.checked_sub(m.base), b.end >= b.start) else {
            left_out += 1;
            continue;
        };
        let Ok(mut off) = u32::try_from(off) else {
            left_out += 1;
            continue;
        };
        let mut size = b.end - b.start + last_len;
        while size > 0 {
            let s = size.min(u16::MAX as u64);
            recs.push((off, s as u16, id));
            off = off.saturating_add(s as u32);
            size -= s;
        }
    }
    let mut w = std::io::BufWriter::new(out);
    writeln!(w, "DRCOV VERSION: 2")?;
    writeln!(w, "DRCOV FLAVOR: tracemill")?;
    writeln!(w, "Module Table: version 2, count {}", mods.len())?;
    writeln!(
        w,
        "Columns: id, base, end, entry, checksum, timestamp, path"
    )?;
    for (i, m) in mods.iter().enumerate() {
        writeln!(
            w,
            "{i:3}, {:#018x}, {:#018x}, {:#018x}, 0x00000000, 0x00000000, {}",
            m.base, m.end, 0, m.path
        )?;
    }
    writeln!(w, "BB Table: {} bbs", recs.len())?;
    for (off, size, id) in &recs {
        w.write_all(&off.to_le_bytes())?;
        w.write_all(&size.to_le_bytes())?;
        w.write_all(&id.to_le_bytes())?;
    }
    w.flush()?;
    Ok((mods.len(), recs.len() as u64, left_out))
}

/// Per-function coverage.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FunctionCoverage {
    pub image: String,
    pub function: String,
    /// Function size in bytes (from its symbol).
    pub size: u64,
    /// Bytes of instructions executed at least once.
    pub covered_bytes: u64,
    pub instructions: u64,
    /// Executions of its first instruction.
    pub entries: u64,
    pub lines_total: u64,
    pub lines_hit: u64,
}

/// Per-image coverage.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ImageCoverage {
    pub image: String,
    pub blocks: u64,
    pub instructions: u64,
    pub functions_total: u64,
    pub functions_hit: u64,
    pub code_bytes: u64,
    pub covered_bytes: u64,
}

/// Line hits per file, then per function: what lcov needs.
pub struct LineData {
    /// file -> line -> max executions of an instruction of the line (0: not executed).
    pub lines: BTreeMap<String, BTreeMap<u32, u64>>,
    /// file -> (function line, name, entries).
    pub functions: BTreeMap<String, Vec<(u32, String, u64)>>,
}

/// The coverage summary and lcov data.
pub struct CoverageReport {
    pub images: Vec<ImageCoverage>,
    pub functions: Vec<FunctionCoverage>,
    pub lines: LineData,
    pub warnings: Vec<String>,
}

/// Build the per-image and per-function summaries and the line data.
pub fn coverage(syms: &Symbolizer, blocks: &[Block]) -> CoverageReport {
    let mut warnings = Vec::new();
    let ex = executed(syms, blocks);
    if ex.undecoded > 0 {
        warnings.push(format!(
            "{} blocks could not be disassembled (no image loaded for them): left out of the line and byte counts",
            ex.undecoded
        ));
    }
    let mut images: BTreeMap<String, ImageCoverage> = BTreeMap::new();
    for b in blocks {
        let name = b.image.clone().unwrap_or_else(|| "?".into());
        let ic = images.entry(name.clone()).or_insert_with(|| ImageCoverage {
            image: name,
            ..Default::default()
        });
        ic.blocks += 1;
        ic.instructions += b.insns as u64 * b.count;
    }
    let mut functions = Vec::new();
    let mut lines: BTreeMap<String, BTreeMap<u32, u64>> = BTreeMap::new();
    let mut fns: BTreeMap<String, Vec<(u32, String, u64)>> = BTreeMap::new();
    let empty = AddrMap::default();
    for im in &syms.images {
        let exec = ex.by_image.get(&im.spec.name).unwrap_or(&empty);
        let Some(ic) = images.get_mut(&im.spec.name) else {
            continue; // never executed: no coverage row names it
        };
        let (lo, hi) = im.code_range();
        ic.code_bytes = hi - lo;
        ic.covered_bytes = exec.values().map(|&(_, l)| l as u64).sum();
        // Instructions per function: the executed ones, sorted by address.
        let mut addrs: Vec<(u64, u64, u8)> = exec.iter().map(|(&a, &(n, l))| (a, n, l)).collect();
        addrs.sort_unstable();
        for f in im.functions() {
            let from = addrs.partition_point(|x| x.0 < f.start);
            let to = addrs.partition_point(|x| x.0 < f.end);
            let slice = &addrs[from..to];
            ic.functions_total += 1;
            let hit = !slice.is_empty();
            if hit {
                ic.functions_hit += 1;
            }
            // Line data for functions with DWARF lines.
            let rows = if im.has_lines() {
                im.line_rows(f.start, f.end)
            } else {
                Vec::new()
            };
            let mut fl: BTreeSet<(String, u32)> = BTreeSet::new();
            let mut fl_hit: BTreeSet<(String, u32)> = BTreeSet::new();
            if !rows.is_empty() {
                for (_, l) in &rows {
                    lines
                        .entry(l.file.clone())
                        .or_default()
                        .entry(l.line)
                        .or_insert(0);
                    fl.insert((l.file.clone(), l.line));
                }
                for &(a, n, _) in slice {
                    if let Some(l) = im.line(a) {
                        let e = lines
                            .entry(l.file.clone())
                            .or_default()
                            .entry(l.line)
                            .or_insert(0);
                        *e = (*e).max(n);
                        fl.insert((l.file.clone(), l.line));
                        fl_hit.insert((l.file, l.line));
                    }
                }
                if let Some(l) = im.line(f.start) {
                    let entries = exec.get(&f.start).map_or(0, |e| e.0);
                    fns.entry(l.file)
                        .or_default()
                        .push((l.line, f.name.clone(), entries));
                }
            }
            if !hit {
                continue;
            }
            functions.push(FunctionCoverage {
                image: im.spec.name.clone(),
                function: f.name.clone(),
                size: f.end - f.start,
                covered_bytes: slice.iter().map(|x| x.2 as u64).sum(),
                instructions: slice.iter().map(|x| x.1).sum(),
                entries: exec.get(&f.start).map_or(0, |e| e.0),
                lines_total: fl.len() as u64,
                lines_hit: fl_hit.len() as u64,
            });
        }
    }
    functions.sort_by(|a, b| {
        b.instructions
            .cmp(&a.instructions)
            .then(a.function.cmp(&b.function))
    });
    for v in fns.values_mut() {
        v.sort();
        v.dedup_by(|a, b| a.1 == b.1);
    }
    CoverageReport {
        images: images.into_values().collect(),
        functions,
        lines: LineData {
            lines,
            functions: fns,
        },
        warnings,
    }
}

/// Write an lcov tracefile: one record per source file with FN/FNDA, DA lines, and the
/// LF/LH/FNF/FNH totals. `source_root` is put before relative source paths.
pub fn write_lcov(
    data: &LineData,
    source_root: Option<&Path>,
    out: impl Write,
) -> Result<(usize, u64, u64)> {
    let mut w = std::io::BufWriter::new(out);
    writeln!(w, "TN:")?;
    let (mut files, mut lf_all, mut lh_all) = (0usize, 0u64, 0u64);
    for (file, lines) in &data.lines {
        let path = match source_root {
            Some(r) if Path::new(file).is_relative() => r.join(file).display().to_string(),
            _ => file.clone(),
        };
        files += 1;
        writeln!(w, "SF:{path}")?;
        let fns = data.functions.get(file).map(Vec::as_slice).unwrap_or(&[]);
        for (line, name, _) in fns {
            writeln!(w, "FN:{line},{name}")?;
        }
        for (_, name, n) in fns {
            writeln!(w, "FNDA:{n},{name}")?;
        }
        writeln!(w, "FNF:{}", fns.len())?;
        writeln!(w, "FNH:{}", fns.iter().filter(|f| f.2 > 0).count())?;
        let mut lh = 0;
        for (line, n) in lines {
            writeln!(w, "DA:{line},{n}")?;
            lh += u64::from(*n > 0);
        }
        writeln!(w, "LF:{}", lines.len())?;
        writeln!(w, "LH:{lh}")?;
        writeln!(w, "end_of_record")?;
        lf_all += lines.len() as u64;
        lh_all += lh;
    }
    w.flush()?;
    Ok((files, lf_all, lh_all))
}

/// Call `f` with the coverage blocks of a decode and its images; over a dataset, with the
/// blocks of the selected bundles added up and their images (see [`merged`]).
pub fn with_blocks<R>(
    src: &mut Source,
    warnings: &mut Vec<String>,
    f: impl FnOnce(&Symbolizer, &[Block]) -> R,
) -> Result<R> {
    match src {
        Source::Decode(input) => {
            let blocks = read_blocks(input)?;
            Ok(f(&input.symbols, &blocks))
        }
        Source::Dataset(_) => {
            let (syms, blocks) = merged(src, warnings)?;
            Ok(f(&syms, &blocks))
        }
    }
}

/// The coverage of several bundles in one address space. An image is the same image in
/// every bundle when its name and build-id agree (else name and path); each such image
/// keeps the place and symbols of the first bundle that loaded it, and every bundle's
/// blocks of it move there by their `image_offset`. The same block from several bundles
/// is one block with the counts added. An image name used by two different images gets
/// `#2`, `#3`... for the later ones. Blocks of no image keep their addresses.
pub fn merged(src: &mut Source, warnings: &mut Vec<String>) -> Result<(Symbolizer, Vec<Block>)> {
    let mut m = Merge::default();
    src.each(warnings, |input, _| m.add(input))?;
    Ok(m.finish())
}

/// The coverage blocks of bundles added up one by one ([`merged`]).
#[derive(Default)]
pub struct Merge {
    /// (name, build-id or path) -> (name shown, base of the kept image if one loaded)
    identities: HashMap<(String, String), (String, Option<u64>)>,
    names_used: HashMap<String, u32>,
    syms: Symbolizer,
    sum: HashMap<(Option<String>, u64, u64), Block>,
}

impl Merge {
    /// Add a bundle's blocks. Its images move here (those of an identity not kept yet):
    /// the input has no symbols after.
    pub fn add(&mut self, input: &mut Input) -> Result<()> {
        let blocks = read_blocks(input)?;
        let recorded = input.recorded_images();
        let mut loaded: HashMap<String, ImageSymbols> = HashMap::new();
        for im in std::mem::take(&mut input.symbols).images {
            loaded.entry(im.spec.name.clone()).or_insert(im);
        }
        // This bundle's image name -> (name shown, base of the kept image).
        let mut place: HashMap<String, (String, Option<u64>)> = HashMap::new();
        for b in blocks {
            let image = match &b.image {
                None => None,
                Some(name) => {
                    if !place.contains_key(name) {
                        let rec = recorded.iter().find(|r| &r.name == name);
                        let im = loaded.get(name);
                        let who = im
                            .and_then(|i| i.build_id.clone())
                            .or_else(|| rec.and_then(|r| r.build_id.clone()))
                            .or_else(|| im.map(|i| i.spec.path.display().to_string()))
                            .or_else(|| rec.map(|r| r.path.clone()))
                            .unwrap_or_default();
                        let key = (name.clone(), who);
                        let p = match self.identities.get_mut(&key) {
                            // Kept without an image so far (missing in the bundles
                            // before): this bundle's takes the place.
                            Some((shown, base @ None)) if loaded.contains_key(name) => {
                                let mut im = loaded.remove(name).expect("checked");
                                im.spec.name = shown.clone();
                                *base = Some(im.base);
                                self.syms.push(im);
                                (shown.clone(), *base)
                            }
                            Some(p) => p.clone(),
                            None => {
                                let n = self.names_used.entry(name.clone()).or_insert(0);
                                *n += 1;
                                let shown = if *n == 1 {
                                    name.clone()
                                } else {
                                    format!("{name}#{n}")
                                };
                                let base = loaded.remove(name).map(|mut im| {
                                    im.spec.name = shown.clone();
                                    let base = im.base;
                                    self.syms.push(im);
                                    base
                                });
                                self.identities.insert(key, (shown.clone(), base));
                                (shown, base)
                            }
                        };
                        place.insert(name.clone(), p);
                    }
                    Some(&place[name])
                }
            };
            let (shown, start) = match (image, b.image_offset) {
                (Some((shown, Some(base))), Some(off)) => (Some(shown.clone()), base + off),
                (Some((shown, _)), _) => (Some(shown.clone()), b.start),
                (None, _) => (None, b.start),
            };
            let end = start + (b.end - b.start);
            let e = self
                .sum
                .entry((shown.clone(), start, end))
                .or_insert_with(|| Block {
                    image: shown,
                    image_offset: b.image_offset,
                    start,
                    end,
                    insns: b.insns,
                    count: 0,
                });
            e.count += b.count;
        }
        Ok(())
    }

    pub fn finish(self) -> (Symbolizer, Vec<Block>) {
        let mut blocks: Vec<Block> = self.sum.into_values().collect();
        blocks.sort_by(|a, b| (&a.image, a.start, a.end).cmp(&(&b.image, b.start, b.end)));
        (self.syms, blocks)
    }
}

/// `report coverage`: the summary text, and the files asked for.
pub fn run(
    src: &mut Source,
    drcov: Option<&Path>,
    lcov: Option<&Path>,
    source_root: Option<&Path>,
) -> Result<(String, Vec<String>)> {
    let mut warnings = Vec::new();
    let (text, more) = with_blocks(src, &mut warnings, |syms, blocks| {
        write_files(syms, blocks, drcov, lcov, source_root)
    })??;
    warnings.extend(more);
    Ok((text, warnings))
}

fn write_files(
    syms: &Symbolizer,
    blocks: &[Block],
    drcov: Option<&Path>,
    lcov: Option<&Path>,
    source_root: Option<&Path>,
) -> Result<(String, Vec<String>)> {
    let mut warnings = Vec::new();
    let mut text = String::new();
    if let Some(p) = drcov {
        let f =
            std::fs::File::create(p).with_context(|| format!("{}: cannot create", p.display()))?;
        let (m, r, left) = write_drcov(syms, blocks, f)
            .with_context(|| format!("{}: cannot write", p.display()))?;
        text.push_str(&format!(
            "drcov: {} ({} modules, {} blocks)\n",
            p.display(),
            group(m as u64),
            group(r)
        ));
        if left > 0 {
            warnings.push(format!("drcov: {left} blocks of no image left out"));
        }
    }
    let rep = coverage(syms, blocks);
    warnings.extend(rep.warnings.iter().cloned());
    if let Some(p) = lcov {
        if rep.lines.lines.is_empty() {
            warnings
                .push("lcov: no image has DWARF line information: the tracefile is empty".into());
        }
        // Source paths relative in the DWARF (the samples': `datasets/programs/NAME.c`) are
        // made absolute, so that genhtml finds them from any directory: against
        // --source-root, else the current directory. Sources not found there are named.
        let root = match source_root {
            Some(r) => std::path::absolute(r),
            None => std::env::current_dir(),
        }
        .context("lcov: no directory to resolve relative source paths against")?;
        let missing: Vec<String> = rep
            .lines
            .lines
            .keys()
            .map(|f| root.join(f))
            .filter(|p| !p.exists())
            .map(|p| p.display().to_string())
            .collect();
        if !missing.is_empty() {
            warnings.push(format!(
                "lcov: {} source file{} not found ({}{}): genhtml needs them; give \
                 --source-root DIR, the directory the image's relative source paths start from",
                missing.len(),
                if missing.len() == 1 { "" } else { "s" },
                missing[..missing.len().min(3)].join(", "),
                if missing.len() > 3 { ", ..." } else { "" }
            ));
        }
        let f =
            std::fs::File::create(p).with_context(|| format!("{}: cannot create", p.display()))?;
        let (files, lf, lh) = write_lcov(&rep.lines, Some(&root), f)
            .with_context(|| format!("{}: cannot write", p.display()))?;
        text.push_str(&format!(
            "lcov: {} ({} source files, {} of {} lines hit)\n",
            p.display(),
            group(files as u64),
            group(lh),
            group(lf)
        ));
    }
    text.push_str(&summary_text(&rep));
    Ok((text, warnings))
}

/// The per-image and per-function tables as text.
pub fn summary_text(rep: &CoverageReport) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "{:<14} {:>8} {:>14} {:>12} {:>20}\n",
        "image", "blocks", "instructions", "functions", "bytes covered"
    ));
    for i in &rep.images {
        s.push_str(&format!(
            "{:<14} {:>8} {:>14} {:>5}/{:<6} {:>9}/{}\n",
            i.image,
            group(i.blocks),
            group(i.instructions),
            group(i.functions_hit),
            group(i.functions_total),
            group(i.covered_bytes),
            group(i.code_bytes)
        ));
    }
    s.push('\n');
    s.push_str(&format!(
        "{:<14} {:>10} {:>10} {:>14} {:>9} {:>7}  function\n",
        "image", "covered", "size", "instructions", "entries", "lines"
    ));
    for f in &rep.functions {
        s.push_str(&format!(
            "{:<14} {:>9.1}% {:>10} {:>14} {:>9} {:>7}  {}\n",
            f.image,
            if f.size == 0 {
                0.0
            } else {
                100.0 * f.covered_bytes as f64 / f.size as f64
            },
            group(f.size),
            group(f.instructions),
            group(f.entries),
            if f.lines_total == 0 {
                "-".to_string()
            } else {
                format!("{}/{}", group(f.lines_hit), group(f.lines_total))
            },
            f.function
        ));
    }
    s
}
