//! Hotspots: where the instructions (and cycles) went, by function, source line or block.
//!
//! - **Instructions** are exact: `coverage.insns × count` per block. By function, a block
//!   counts for the function holding its first instruction (blocks end at the first
//!   branch, so only a fall-through from one symbol into the next splits a block). By
//!   line, every instruction of a block counts for its own line (the block is
//!   disassembled from the image).
//! - **Branches** are block executions (`coverage.count`): one branch row ends each one,
//!   but for blocks left early by an interrupt or a disable.
//! - **Calls** are the executed `call`/`call_ind` edges into the function (or line, or
//!   block start): `edges.count`.
//! - **Cycles** come from `branches.cycles`: the cycles between a row and the previous
//!   row are the block that ended at that row's `ip`. Blocks that share their last
//!   instruction split those cycles by instruction count; a block's cycles are spread
//!   evenly over its instructions for the by-line view. Cycles spent while tracing was
//!   off (syscalls under user-only tracing) fall on the first block after.

use std::collections::HashMap;

use anyhow::Result;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::Array;
use tracemill_schemas::BranchKind;

use crate::input::Input;
use crate::source::Source;
use crate::symbols::{Line, Symbolizer};
use crate::util::{block_insns, col, group, kind_codes, strings, AddrMap};

/// What one row of the report is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum By {
    Function,
    Line,
    Block,
}

/// What to rank by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weight {
    Instructions,
    Cycles,
    Branches,
}

/// One distinct executed block: a row of the coverage table, as the decoder makes it.
pub use tracemill_decode::rows::CoverageRow as Block;

/// Read the coverage table.
pub fn read_blocks(input: &Input) -> Result<Vec<Block>> {
    let t = input.table("coverage")?;
    let mut out = Vec::new();
    for b in t.batches(&["image", "image_offset", "start", "end", "insns", "count"])? {
        let b = b?;
        let image = strings(&b, "image")?;
        let image_offset = col::<UInt64Type>(&b, "image_offset")?;
        let start = col::<UInt64Type>(&b, "start")?;
        let end = col::<UInt64Type>(&b, "end")?;
        let insns = col::<UInt32Type>(&b, "insns")?;
        let count = col::<UInt64Type>(&b, "count")?;
        for i in 0..b.num_rows() {
            out.push(Block {
                image: (!image.is_null(i)).then(|| image.value(i).to_string()),
                image_offset: (!image_offset.is_null(i)).then(|| image_offset.value(i)),
                start: start.value(i),
                end: end.value(i),
                insns: insns.value(i),
                count: count.value(i),
            });
        }
    }
    Ok(out)
}

/// Executed call edges: call count per target address.
pub fn read_calls(input: &Input) -> Result<AddrMap<u64, u64>> {
    let t = input.table("edges")?;
    let mut out = AddrMap::default();
    for b in t.batches(&["dst", "kind", "count"])? {
        let b = b?;
        let dst = col::<UInt64Type>(&b, "dst")?;
        let count = col::<UInt64Type>(&b, "count")?;
        let kinds = kind_codes(&b, "kind", BranchKind::from_name, |k| k as u8)?;
        for (i, &k) in kinds.iter().enumerate() {
            if k == BranchKind::Call as u8 || k == BranchKind::CallInd as u8 {
                *out.entry(dst.value(i)).or_default() += count.value(i);
            }
        }
    }
    Ok(out)
}

/// Cycles per last-instruction address (`branches.ip`), from the deltas between rows.
/// `None` when the table has no cycles (the trace was not cycle-accurate).
pub fn read_cycles_by_end(input: &Input) -> Result<Option<AddrMap<u64, u64>>> {
    let t = input.table("branches")?;
    let mut out: AddrMap<u64, u64> = AddrMap::default();
    let mut prev: Option<u64> = None;
    let mut any = false;
    for b in t.batches(&["ip", "cycles"])? {
        let b = b?;
        let ip = col::<UInt64Type>(&b, "ip")?;
        let cycles = col::<UInt64Type>(&b, "cycles")?;
        if cycles.null_count() == cycles.len() {
            continue;
        }
        let ips = ip.values();
        for i in 0..b.num_rows() {
            if cycles.is_null(i) {
                continue;
            }
            let c = cycles.value(i);
            any = true;
            if let Some(p) = prev {
                *out.entry(ips[i]).or_default() += c.saturating_sub(p);
            }
            prev = Some(c);
        }
    }
    Ok(any.then_some(out))
}

/// One row of the report.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Hotspot {
    pub function: String,
    pub image: String,
    /// `file:line` (by line), `0xstart-0xend` (by block); empty by function.
    pub location: String,
    pub instructions: u64,
    pub cycles: Option<u64>,
    pub branches: u64,
    pub calls: u64,
    /// Share of the total of the ranking weight, 0..=1.
    pub share: f64,
}

/// The report: rows sorted by weight, heaviest first, and the totals.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Hotspots {
    pub by: String,
    pub weight: String,
    pub total_instructions: u64,
    pub total_cycles: Option<u64>,
    pub total_branches: u64,
    pub rows: Vec<Hotspot>,
    pub warnings: Vec<String>,
}

fn image_name(syms: &Symbolizer, b: &Block) -> String {
    b.image
        .clone()
        .or_else(|| syms.image_of(b.start, None).map(|i| i.spec.name.clone()))
        .unwrap_or_else(|| "?".into())
}

/// Function name at `addr` of the block's image (by name, as the coverage table says),
/// falling back to address lookup, then to `image+0xoffset` (the image's base from the
/// coverage table when its file is not loaded) or `0xaddr`.
pub fn function_at(syms: &Symbolizer, b: &Block, addr: u64) -> String {
    if let Some(im) = b.image.as_deref().and_then(|n| syms.by_name(n)) {
        if im.contains(addr) || im.function_index(addr).is_some() {
            return im.function_name(addr).into_owned();
        }
    }
    if syms.image_of(addr, None).is_none() {
        if let (Some(name), Some(off)) = (&b.image, b.image_offset) {
            let base = b.start.wrapping_sub(off);
            return format!("{name}+{:#x}", addr.wrapping_sub(base));
        }
    }
    syms.function_name(addr, None)
}

/// Build the hotspot report.
pub fn hotspots(input: &Input, by: By, weight: Weight) -> Result<Hotspots> {
    let syms = &input.symbols;
    let mut warnings = Vec::new();
    let blocks = read_blocks(input)?;
    let calls = match read_calls(input) {
        Ok(c) => c,
        Err(e) => {
            warnings.push(format!("calls not counted: {e:#}"));
            AddrMap::default()
        }
    };
    let cycles_by_end = match read_cycles_by_end(input) {
        Ok(Some(c)) => Some(c),
        Ok(None) => {
            if weight == Weight::Cycles {
                warnings.push(
                    "no cycles in the branches table (trace not cycle-accurate): ranked by instructions"
                        .into(),
                );
            }
            None
        }
        Err(e) => {
            warnings.push(format!("cycles not counted: {e:#}"));
            None
        }
    };
    // Cycles of each block: the cycles of its last instruction, split by instructions
    // among the blocks that end there.
    let block_cycles: Option<Vec<u64>> = cycles_by_end.as_ref().map(|cy| {
        let mut insns_by_end: AddrMap<u64, u128> = AddrMap::default();
        for b in &blocks {
            *insns_by_end.entry(b.end).or_default() += b.insns as u128 * b.count as u128;
        }
        blocks
            .iter()
            .map(|b| {
                let total = insns_by_end[&b.end];
                let c = cy.get(&b.end).copied().unwrap_or(0) as u128;
                (c * (b.insns as u128 * b.count as u128))
                    .checked_div(total)
                    .unwrap_or(0) as u64
            })
            .collect()
    });

    #[derive(Default)]
    struct Acc {
        function: String,
        image: String,
        location: String,
        instructions: u64,
        cycles: u64,
        branches: u64,
        calls: u64,
    }
    let mut acc: HashMap<String, Acc> = HashMap::new();
    let mut line_cache: AddrMap<u64, Option<Line>> = AddrMap::default();
    let mut undecodable = 0u64;
    for (bi, b) in blocks.iter().enumerate() {
        let image = image_name(syms, b);
        let executed = b.insns as u64 * b.count;
        let bcycles = block_cycles.as_ref().map_or(0, |v| v[bi]);
        match by {
            By::Function | By::Block => {
                let function = function_at(syms, b, b.start);
                let (key, location) = match by {
                    By::Block => {
                        let l = format!("{:#x}-{:#x}", b.start, b.end);
                        (l.clone(), l)
                    }
                    _ => (format!("{image}\0{function}"), String::new()),
                };
                let a = acc.entry(key).or_insert_with(|| Acc {
                    function,
                    image,
                    location,
                    ..Acc::default()
                });
                a.instructions += executed;
                a.cycles += bcycles;
                a.branches += b.count;
            }
            By::Line => {
                let im = b.image.as_deref().and_then(|n| syms.by_name(n));
                let addrs = im
                    .and_then(|im| im.code_at(b.start))
                    .and_then(|code| block_insns(code, b.start, b.end, b.insns as usize + 1))
                    .filter(|v| v.len() == b.insns as usize);
                let addrs = match addrs {
                    Some(a) => a,
                    None => {
                        // No code to disassemble: the block's first instruction stands
                        // for all of it.
                        undecodable += 1;
                        vec![(b.start, 0); b.insns as usize]
                    }
                };
                let n = addrs.len().max(1) as u64;
                for (k, &(addr, _)) in addrs.iter().enumerate() {
                    let line = line_cache
                        .entry(addr)
                        .or_insert_with(|| im.and_then(|im| im.line(addr)))
                        .clone();
                    let function = function_at(syms, b, addr);
                    let location = match &line {
                        Some(l) => format!("{}:{}", l.file, l.line),
                        None => match im {
                            Some(im) => im.unknown(addr),
                            None => format!("{addr:#x}"),
                        },
                    };
                    let key = format!("{image}\0{function}\0{location}");
                    let a = acc.entry(key).or_insert_with(|| Acc {
                        function,
                        image: image.clone(),
                        location,
                        ..Acc::default()
                    });
                    a.instructions += b.count;
                    // Spread evenly; the first instructions take the remainder.
                    a.cycles += bcycles / n + u64::from((k as u64) < bcycles % n);
                    if k as u64 == n - 1 {
                        a.branches += b.count;
                    }
                }
            }
        }
    }
    if undecodable > 0 {
        warnings.push(format!(
            "{undecodable} blocks could not be disassembled (image missing): each counted at its first instruction's line"
        ));
    }
    // Calls: into the function / line / block that starts at the call target.
    for (&dst, &n) in &calls {
        let im = syms.image_of(dst, None);
        let image = im.map_or_else(
            || {
                blocks
                    .iter()
                    .find(|b| b.start == dst)
                    .map_or("?".into(), |b| image_name(syms, b))
            },
            |i| i.spec.name.clone(),
        );
        let function = match (im, blocks.iter().find(|b| b.start == dst)) {
            (Some(i), _) => i.function_name(dst).into_owned(),
            (None, Some(b)) => function_at(syms, b, dst),
            (None, None) => format!("{dst:#x}"),
        };
        let key = match by {
            By::Function => format!("{image}\0{function}"),
            By::Line => {
                let location = match im.and_then(|i| i.line(dst)) {
                    Some(l) => format!("{}:{}", l.file, l.line),
                    None => im.map_or(format!("{dst:#x}"), |i| i.unknown(dst)),
                };
                format!("{image}\0{function}\0{location}")
            }
            By::Block => match blocks.iter().find(|b| b.start == dst) {
                Some(b) => format!("{:#x}-{:#x}", b.start, b.end),
                None => continue,
            },
        };
        if let Some(a) = acc.get_mut(&key) {
            a.calls += n;
        }
    }

    let total_instructions: u64 = blocks.iter().map(|b| b.insns as u64 * b.count).sum();
    let total_branches: u64 = blocks.iter().map(|b| b.count).sum();
    let total_cycles = block_cycles.as_ref().map(|v| v.iter().sum::<u64>());
    let weight = if weight == Weight::Cycles && total_cycles.is_none() {
        Weight::Instructions
    } else {
        weight
    };
    let w = |a: &Acc| match weight {
        Weight::Instructions => a.instructions,
        Weight::Cycles => a.cycles,
        Weight::Branches => a.branches,
    };
    let total_w = match weight {
        Weight::Instructions => total_instructions,
        Weight::Cycles => total_cycles.unwrap_or(0),
        Weight::Branches => total_branches,
    };
    let mut rows: Vec<Acc> = acc.into_values().collect();
    rows.sort_by(|a, b| {
        w(b).cmp(&w(a))
            .then(b.instructions.cmp(&a.instructions))
            .then(a.function.cmp(&b.function))
            .then(a.location.cmp(&b.location))
    });
    let rows = rows
        .into_iter()
        .map(|a| Hotspot {
            share: if total_w == 0 {
                0.0
            } else {
                w(&a) as f64 / total_w as f64
            },
            function: a.function,
            image: a.image,
            location: a.location,
            instructions: a.instructions,
            cycles: total_cycles.map(|_| a.cycles),
            branches: a.branches,
            calls: a.calls,
        })
        .collect();
    Ok(Hotspots {
        by: by_name(by).into(),
        weight: weight_name(weight).into(),
        total_instructions,
        total_cycles,
        total_branches,
        rows,
        warnings,
    })
}

impl Hotspots {
    fn location_header(&self) -> Option<&'static str> {
        match self.by.as_str() {
            "line" => Some("line"),
            "block" => Some("block"),
            _ => None,
        }
    }

    /// Aligned for a terminal, like `perf report`: share, counts, symbol.
    pub fn to_table(&self, top: usize) -> String {
        let mut out = String::new();
        let cyc = self.total_cycles.is_some();
        out.push_str(&format!(
            "# {} instructions, {} branches{} | by {}, ranked by {}\n",
            group(self.total_instructions),
            group(self.total_branches),
            self.total_cycles
                .map_or(String::new(), |c| format!(", {} cycles", group(c))),
            self.by,
            self.weight
        ));
        let rows: Vec<&Hotspot> = self.rows.iter().take(top).collect();
        let iw = rows.iter().map(|r| r.image.len()).max().unwrap_or(0).max(5);
        let lw = rows
            .iter()
            .map(|r| r.location.len())
            .max()
            .unwrap_or(0)
            .max(5);
        let mut header = format!("{:>7}  {:>14}", "share", "instructions");
        if cyc {
            header.push_str(&format!("  {:>14}", "cycles"));
        }
        header.push_str(&format!(
            "  {:>10}  {:>8}  {:<iw$}  ",
            "branches", "calls", "image"
        ));
        if let Some(h) = self.location_header() {
            header.push_str(&format!("{h:<lw$}  "));
        }
        header.push_str("function");
        out.push_str(&header);
        out.push('\n');
        for r in rows {
            let mut line = format!("{:>6.2}%  {:>14}", r.share * 100.0, group(r.instructions));
            if cyc {
                line.push_str(&format!("  {:>14}", group(r.cycles.unwrap_or(0))));
            }
            line.push_str(&format!(
                "  {:>10}  {:>8}  {:<iw$}  ",
                group(r.branches),
                group(r.calls),
                r.image
            ));
            if self.location_header().is_some() {
                line.push_str(&format!("{:<lw$}  ", r.location));
            }
            line.push_str(&r.function);
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// CSV with a header row.
    pub fn to_csv(&self, top: usize) -> String {
        let mut out = String::from("function,image,");
        if let Some(h) = self.location_header() {
            out.push_str(h);
            out.push(',');
        }
        out.push_str("instructions,cycles,branches,calls,share\n");
        for r in self.rows.iter().take(top) {
            out.push_str(&csv_field(&r.function));
            out.push(',');
            out.push_str(&csv_field(&r.image));
            out.push(',');
            if self.location_header().is_some() {
                out.push_str(&csv_field(&r.location));
                out.push(',');
            }
            out.push_str(&format!(
                "{},{},{},{},{:.6}\n",
                r.instructions,
                r.cycles.map_or(String::new(), |c| c.to_string()),
                r.branches,
                r.calls,
                r.share
            ));
        }
        out
    }

    /// JSON: totals, warnings and the first `top` rows.
    pub fn to_json(&self, top: usize) -> String {
        let mut h = self.clone();
        h.rows.truncate(top);
        serde_json::to_string_pretty(&h).unwrap_or_default() + "\n"
    }
}

pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Hotspot reports of several bundles added up: rows of the same image, function and
/// location (line, block) sum their counts; totals add; shares and the order are made
/// again over the sum, as [`hotspots`] makes them for one bundle.
#[derive(Default)]
pub struct Sum {
    rows: HashMap<(String, String, String), Hotspot>,
    total_instructions: u64,
    total_cycles: Option<u64>,
    total_branches: u64,
    warnings: Vec<String>,
}

impl Sum {
    pub fn add(&mut self, h: Hotspots) {
        self.total_instructions += h.total_instructions;
        self.total_branches += h.total_branches;
        if let Some(c) = h.total_cycles {
            *self.total_cycles.get_or_insert(0) += c;
        }
        for w in h.warnings {
            crate::source::warn_once(&mut self.warnings, w);
        }
        for r in h.rows {
            let key = (r.image.clone(), r.function.clone(), r.location.clone());
            let a = self.rows.entry(key).or_insert_with(|| Hotspot {
                function: r.function.clone(),
                image: r.image.clone(),
                location: r.location.clone(),
                ..Hotspot::default()
            });
            a.instructions += r.instructions;
            if let Some(c) = r.cycles {
                *a.cycles.get_or_insert(0) += c;
            }
            a.branches += r.branches;
            a.calls += r.calls;
        }
    }

    pub fn finish(self, by: By, weight: Weight, mut warnings: Vec<String>) -> Hotspots {
        for w in self.warnings {
            crate::source::warn_once(&mut warnings, w);
        }
        let weight = if weight == Weight::Cycles && self.total_cycles.is_none() {
            Weight::Instructions
        } else {
            weight
        };
        let w = |a: &Hotspot| match weight {
            Weight::Instructions => a.instructions,
            Weight::Cycles => a.cycles.unwrap_or(0),
            Weight::Branches => a.branches,
        };
        let total_w = match weight {
            Weight::Instructions => self.total_instructions,
            Weight::Cycles => self.total_cycles.unwrap_or(0),
            Weight::Branches => self.total_branches,
        };
        let has_cycles = self.total_cycles.is_some();
        let mut rows: Vec<Hotspot> = self
            .rows
            .into_values()
            .map(|mut r| {
                r.share = if total_w == 0 {
                    0.0
                } else {
                    w(&r) as f64 / total_w as f64
                };
                // A bundle without cycles adds none; the column exists when one has them.
                if has_cycles {
                    r.cycles.get_or_insert(0);
                }
                r
            })
            .collect();
        rows.sort_by(|a, b| {
            w(b).cmp(&w(a))
                .then(b.instructions.cmp(&a.instructions))
                .then(a.function.cmp(&b.function))
                .then(a.location.cmp(&b.location))
                .then(a.image.cmp(&b.image))
        });
        Hotspots {
            by: by_name(by).into(),
            weight: weight_name(weight).into(),
            total_instructions: self.total_instructions,
            total_cycles: self.total_cycles,
            total_branches: self.total_branches,
            rows,
            warnings,
        }
    }
}

fn by_name(by: By) -> &'static str {
    match by {
        By::Function => "function",
        By::Line => "line",
        By::Block => "block",
    }
}

fn weight_name(w: Weight) -> &'static str {
    match w {
        Weight::Instructions => "instructions",
        Weight::Cycles => "cycles",
        Weight::Branches => "branches",
    }
}

/// The hotspot report of a decode, or of the selected bundles of a dataset added up
/// (each bundle symbolized with its own images).
pub fn hotspots_of(src: &mut Source, by: By, weight: Weight) -> Result<Hotspots> {
    if let Source::Decode(input) = src {
        return hotspots(input, by, weight);
    }
    let mut sum = Sum::default();
    let mut warnings = Vec::new();
    src.each(&mut warnings, |input, _| {
        sum.add(hotspots(input, by, weight)?);
        Ok(())
    })?;
    Ok(sum.finish(by, weight, warnings))
}
