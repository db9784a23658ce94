//! What changed between two runs: `report diff A B`.
//!
//! Each side is a [`Source`] (a decode, or the bundles of a dataset a `--where` selects),
//! reported on its own, then the two are joined:
//!
//! - **Hotspots**: the [`hotspots`](crate::hotspots) rows of A and B (by function, line or
//!   block) joined on (image, function, location). A row's `change` is B's instructions
//!   minus A's; its `share` is that change as a share of A's total (the baseline's), and
//!   `delta` is the row's share of B's total minus its share of A's (`perf diff`'s
//!   "Delta"): a function can run more instructions and still take a smaller part of a
//!   run that grew more. Rows are sorted by the size of the change.
//! - **Coverage**: the distinct blocks (coverage table) and edges (edges table) executed
//!   in one and not the other. Code is compared by place, not address: (image name,
//!   offset in the image), so a program loaded elsewhere (ASLR) is the same code; code of
//!   no image keeps its address. Blocks and edges gained (in B only) and lost (in A only)
//!   are counted per function and source line of their first instruction (a block's start,
//!   an edge's branch), each side named with its own images.
//!
//! Bundles of a dataset add up: a block executed by any selected bundle of a side is
//! executed on that side.

use std::collections::HashMap;

use anyhow::Result;
use arrow_array::types::UInt64Type;
use tracemill_schemas::BranchKind;

use crate::hotspots::{csv_field, hotspots_of, read_blocks, By, Hotspot, Weight};
use crate::input::Input;
use crate::source::{warn_once, Source};
use crate::symbols::Symbolizer;
use crate::util::{col, group, kind_codes};

/// One row of the hotspot comparison.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Change {
    pub function: String,
    pub image: String,
    /// `file:line` (by line), `0xstart-0xend` (by block); empty by function.
    pub location: String,
    pub instructions_a: u64,
    pub instructions_b: u64,
    /// `instructions_b - instructions_a`.
    pub change: i64,
    /// The change as a share of A's total instructions.
    pub share: f64,
    /// Share of B's total minus share of A's total, in shares (0.01 is a point).
    pub delta: f64,
    /// Present when both sides have cycles.
    pub cycles_a: Option<u64>,
    pub cycles_b: Option<u64>,
    pub cycles_change: Option<i64>,
}

/// Coverage gained and lost at one function and source line.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CoverageChange {
    pub image: String,
    pub function: String,
    /// `file:line` of the first instruction, `image+0xoffset` without line information.
    pub line: String,
    pub blocks_gained: u64,
    pub blocks_lost: u64,
    /// Instructions of the blocks gained (lost), each block once.
    pub instructions_gained: u64,
    pub instructions_lost: u64,
    pub edges_gained: u64,
    pub edges_lost: u64,
}

/// The report.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Diff {
    pub a: String,
    pub b: String,
    pub by: String,
    pub total_instructions_a: u64,
    pub total_instructions_b: u64,
    pub total_cycles_a: Option<u64>,
    pub total_cycles_b: Option<u64>,
    /// Sorted by the size of the change, then by function and location.
    pub rows: Vec<Change>,
    /// Distinct blocks and edges executed on each side.
    pub blocks_a: u64,
    pub blocks_b: u64,
    pub edges_a: u64,
    pub edges_b: u64,
    pub blocks_gained: u64,
    pub blocks_lost: u64,
    pub edges_gained: u64,
    pub edges_lost: u64,
    /// Per function and line, the most blocks gained or lost first.
    pub coverage: Vec<CoverageChange>,
    pub warnings: Vec<String>,
}

/// Where code is, alike in two runs: (image name, offset in it), or (None, the address)
/// for code of no image.
type Place = (Option<String>, u64);

/// The blocks and edges one side executed, by place.
#[derive(Default)]
pub struct Covered {
    /// (start, length in bytes) -> (instructions, label).
    blocks: HashMap<(Place, u64), (u32, u32)>,
    /// (branch, destination, kind) -> label of the branch.
    edges: HashMap<(Place, Place, u8), u32>,
    /// (image, function, line), interned: a function's blocks share a few labels.
    labels: Vec<(String, String, String)>,
    label_ids: HashMap<(String, String, String), u32>,
    pub warnings: Vec<String>,
}

fn place(syms: &Symbolizer, addr: u64) -> Place {
    match syms.image_of(addr, None) {
        Some(im) => (Some(im.spec.name.clone()), addr.wrapping_sub(im.base)),
        None => (None, addr),
    }
}

impl Covered {
    /// Add a bundle's (or a decode's) blocks and edges, named with its own images.
    pub fn add(&mut self, input: &Input) -> Result<()> {
        let syms = &input.symbols;
        for b in read_blocks(input)? {
            let at = match (&b.image, b.image_offset) {
                (Some(n), Some(off)) => (Some(n.clone()), off),
                (Some(n), None) => match syms.by_name(n) {
                    Some(im) => (Some(n.clone()), b.start.wrapping_sub(im.base)),
                    None => (Some(n.clone()), b.start),
                },
                (None, _) => place(syms, b.start),
            };
            let key = (at, b.end.wrapping_sub(b.start));
            if self.blocks.contains_key(&key) {
                continue;
            }
            let function = crate::hotspots::function_at(syms, &b, b.start);
            let image = b.image.clone().unwrap_or_else(|| "?".into());
            let label = self.label(syms, image, function, b.start);
            self.blocks.insert(key, (b.insns, label));
        }
        let t = match input.table("edges") {
            Ok(t) => t,
            Err(e) => {
                warn_once(
                    &mut self.warnings,
                    format!("edges: {e:#}: coverage compared by blocks only"),
                );
                return Ok(());
            }
        };
        let mut labels: HashMap<u64, u32> = HashMap::new();
        for batch in t.batches(&["src", "dst", "kind"])? {
            let batch = batch?;
            let src = col::<UInt64Type>(&batch, "src")?;
            let dst = col::<UInt64Type>(&batch, "dst")?;
            let kinds = kind_codes(&batch, "kind", BranchKind::from_name, |k| k as u8)?;
            for (i, &kind) in kinds.iter().enumerate() {
                let (s, d) = (src.value(i), dst.value(i));
                let key = (place(syms, s), place(syms, d), kind);
                if self.edges.contains_key(&key) {
                    continue;
                }
                let label = match labels.get(&s) {
                    Some(&l) => l,
                    None => {
                        let image = syms
                            .image_of(s, None)
                            .map_or_else(|| "?".into(), |im| im.spec.name.clone());
                        let l = self.label(syms, image, syms.function_name(s, None), s);
                        labels.insert(s, l);
                        l
                    }
                };
                self.edges.insert(key, label);
            }
        }
        Ok(())
    }

    fn label(&mut self, syms: &Symbolizer, image: String, function: String, addr: u64) -> u32 {
        let im = syms.image_of(addr, None);
        let line = match im.and_then(|im| im.line(addr)) {
            Some(l) => format!("{}:{}", l.file, l.line),
            None => match im {
                Some(im) => im.unknown(addr),
                None => format!("{addr:#x}"),
            },
        };
        let key = (image, function, line);
        if let Some(&id) = self.label_ids.get(&key) {
            return id;
        }
        let id = self.labels.len() as u32;
        self.labels.push(key.clone());
        self.label_ids.insert(key, id);
        id
    }
}

/// The blocks and edges of a decode, or of the selected bundles of a dataset together.
pub fn covered_of(src: &mut Source) -> Result<Covered> {
    let mut c = Covered::default();
    let mut ws = Vec::new();
    src.each(&mut ws, |input, _| c.add(input))?;
    for w in ws {
        warn_once(&mut c.warnings, w);
    }
    Ok(c)
}

/// Compare two coverages: what B executed that A did not (gained) and the reverse (lost).
pub fn coverage_changes(a: &Covered, b: &Covered) -> Vec<CoverageChange> {
    let mut out: HashMap<&(String, String, String), CoverageChange> = HashMap::new();
    fn add<'a>(
        out: &mut HashMap<&'a (String, String, String), CoverageChange>,
        side: &'a Covered,
        id: u32,
        f: &dyn Fn(&mut CoverageChange),
    ) {
        let key = &side.labels[id as usize];
        let e = out.entry(key).or_insert_with(|| CoverageChange {
            image: key.0.clone(),
            function: key.1.clone(),
            line: key.2.clone(),
            ..CoverageChange::default()
        });
        f(e);
    }
    for (k, &(insns, id)) in &b.blocks {
        if !a.blocks.contains_key(k) {
            add(&mut out, b, id, &|e| {
                e.blocks_gained += 1;
                e.instructions_gained += insns as u64;
            });
        }
    }
    for (k, &(insns, id)) in &a.blocks {
        if !b.blocks.contains_key(k) {
            add(&mut out, a, id, &|e| {
                e.blocks_lost += 1;
                e.instructions_lost += insns as u64;
            });
        }
    }
    for (k, &id) in &b.edges {
        if !a.edges.contains_key(k) {
            add(&mut out, b, id, &|e| e.edges_gained += 1);
        }
    }
    for (k, &id) in &a.edges {
        if !b.edges.contains_key(k) {
            add(&mut out, a, id, &|e| e.edges_lost += 1);
        }
    }
    let mut rows: Vec<CoverageChange> = out.into_values().collect();
    rows.sort_by(|x, y| {
        let size = |c: &CoverageChange| c.blocks_gained + c.blocks_lost;
        let edges = |c: &CoverageChange| c.edges_gained + c.edges_lost;
        size(y)
            .cmp(&size(x))
            .then(edges(y).cmp(&edges(x)))
            .then(x.function.cmp(&y.function))
            .then(x.line.cmp(&y.line))
            .then(x.image.cmp(&y.image))
    });
    rows
}

/// Join two hotspot reports into change rows, the largest change first.
pub fn changes(
    a: &crate::hotspots::Hotspots,
    b: &crate::hotspots::Hotspots,
) -> (Vec<Change>, Option<u64>, Option<u64>) {
    let cycles = a.total_cycles.is_some() && b.total_cycles.is_some();
    let mut rows: HashMap<(String, String, String), Change> = HashMap::new();
    let mut side = |r: &Hotspot, is_b: bool| {
        let e = rows
            .entry((r.image.clone(), r.function.clone(), r.location.clone()))
            .or_insert_with(|| Change {
                function: r.function.clone(),
                image: r.image.clone(),
                location: r.location.clone(),
                ..Change::default()
            });
        let c = r.cycles.unwrap_or(0);
        if is_b {
            e.instructions_b += r.instructions;
            e.cycles_b = cycles.then(|| e.cycles_b.unwrap_or(0) + c);
        } else {
            e.instructions_a += r.instructions;
            e.cycles_a = cycles.then(|| e.cycles_a.unwrap_or(0) + c);
        }
    };
    for r in &a.rows {
        side(r, false);
    }
    for r in &b.rows {
        side(r, true);
    }
    let share = |n: u64, total: u64| {
        if total == 0 {
            0.0
        } else {
            n as f64 / total as f64
        }
    };
    let (ta, tb) = (a.total_instructions, b.total_instructions);
    let mut rows: Vec<Change> = rows
        .into_values()
        .map(|mut c| {
            c.change = c.instructions_b as i64 - c.instructions_a as i64;
            c.share = if ta == 0 {
                0.0
            } else {
                c.change as f64 / ta as f64
            };
            c.delta = share(c.instructions_b, tb) - share(c.instructions_a, ta);
            if cycles {
                let (x, y) = (c.cycles_a.unwrap_or(0), c.cycles_b.unwrap_or(0));
                c.cycles_a = Some(x);
                c.cycles_b = Some(y);
                c.cycles_change = Some(y as i64 - x as i64);
            }
            c
        })
        .collect();
    rows.sort_by(|x, y| {
        y.change
            .unsigned_abs()
            .cmp(&x.change.unsigned_abs())
            .then(y.change.cmp(&x.change))
            .then(x.function.cmp(&y.function))
            .then(x.location.cmp(&y.location))
            .then(x.image.cmp(&y.image))
    });
    let (ca, cb) = if cycles {
        (a.total_cycles, b.total_cycles)
    } else {
        (None, None)
    };
    (rows, ca, cb)
}

/// Compare B against A (the baseline).
pub fn diff(a: &mut Source, b: &mut Source, by: By) -> Result<Diff> {
    let ha = hotspots_of(a, by, Weight::Instructions)?;
    let hb = hotspots_of(b, by, Weight::Instructions)?;
    let mut warnings = Vec::new();
    for (side, ws) in [("A", &ha.warnings), ("B", &hb.warnings)] {
        for w in ws {
            warn_once(&mut warnings, format!("{side}: {w}"));
        }
    }
    if ha.total_cycles.is_some() != hb.total_cycles.is_some() {
        warnings.push("cycles on one side only: cycles left out".into());
    }
    let (rows, total_cycles_a, total_cycles_b) = changes(&ha, &hb);
    let ca = covered_of(a)?;
    let cb = covered_of(b)?;
    for (side, ws) in [("A", &ca.warnings), ("B", &cb.warnings)] {
        for w in ws {
            warn_once(&mut warnings, format!("{side}: {w}"));
        }
    }
    let coverage = coverage_changes(&ca, &cb);
    let sum = |f: fn(&CoverageChange) -> u64| coverage.iter().map(f).sum::<u64>();
    Ok(Diff {
        a: a.title(),
        b: b.title(),
        by: ha.by.clone(),
        total_instructions_a: ha.total_instructions,
        total_instructions_b: hb.total_instructions,
        total_cycles_a,
        total_cycles_b,
        rows,
        blocks_a: ca.blocks.len() as u64,
        blocks_b: cb.blocks.len() as u64,
        edges_a: ca.edges.len() as u64,
        edges_b: cb.edges.len() as u64,
        blocks_gained: sum(|c| c.blocks_gained),
        blocks_lost: sum(|c| c.blocks_lost),
        edges_gained: sum(|c| c.edges_gained),
        edges_lost: sum(|c| c.edges_lost),
        coverage,
        warnings,
    })
}

fn signed(n: i64) -> String {
    if n > 0 {
        format!("+{}", group(n as u64))
    } else if n < 0 {
        format!("-{}", group(n.unsigned_abs()))
    } else {
        "0".into()
    }
}

impl Diff {
    fn location_header(&self) -> Option<&'static str> {
        match self.by.as_str() {
            "line" => Some("line"),
            "block" => Some("block"),
            _ => None,
        }
    }

    /// Aligned for a terminal: the `top` largest changes, then the `top` places where
    /// coverage changed most.
    pub fn to_table(&self, top: usize) -> String {
        let mut out = format!(
            "# A: {}\n# B: {}\n# instructions {} -> {} ({}){}\n",
            self.a,
            self.b,
            group(self.total_instructions_a),
            group(self.total_instructions_b),
            signed(self.total_instructions_b as i64 - self.total_instructions_a as i64),
            match (self.total_cycles_a, self.total_cycles_b) {
                (Some(x), Some(y)) => format!(
                    ", cycles {} -> {} ({})",
                    group(x),
                    group(y),
                    signed(y as i64 - x as i64)
                ),
                _ => String::new(),
            }
        );
        let cyc = self.total_cycles_a.is_some();
        let rows: Vec<&Change> = self.rows.iter().take(top).collect();
        let lw = rows.iter().map(|r| r.location.len()).max().unwrap_or(0);
        let mut header = format!(
            "{:>14}  {:>14}  {:>14}  {:>8}  {:>7}",
            "A", "B", "change", "share", "delta"
        );
        if cyc {
            header.push_str(&format!("  {:>14}", "cycles change"));
        }
        header.push_str("  ");
        if let Some(h) = self.location_header() {
            header.push_str(&format!("{h:<lw$}  "));
        }
        header.push_str("function");
        out.push_str(&header);
        out.push('\n');
        for r in rows {
            let mut line = format!(
                "{:>14}  {:>14}  {:>14}  {:>+7.2}%  {:>+6.2}",
                group(r.instructions_a),
                group(r.instructions_b),
                signed(r.change),
                r.share * 100.0,
                r.delta * 100.0
            );
            if cyc {
                line.push_str(&format!("  {:>14}", signed(r.cycles_change.unwrap_or(0))));
            }
            line.push_str("  ");
            if self.location_header().is_some() {
                line.push_str(&format!("{:<lw$}  ", r.location));
            }
            line.push_str(&r.function);
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out.push_str(&format!(
            "# coverage: blocks {} -> {} ({} gained, {} lost), edges {} -> {} ({} gained, {} lost)\n",
            group(self.blocks_a),
            group(self.blocks_b),
            group(self.blocks_gained),
            group(self.blocks_lost),
            group(self.edges_a),
            group(self.edges_b),
            group(self.edges_gained),
            group(self.edges_lost)
        ));
        if !self.coverage.is_empty() {
            out.push_str(&format!(
                "{:>8}  {:>8}  {:>8}  {:>8}  line  function\n",
                "+blocks", "-blocks", "+edges", "-edges"
            ));
            for c in self.coverage.iter().take(top) {
                out.push_str(&format!(
                    "{:>8}  {:>8}  {:>8}  {:>8}  {}  {}\n",
                    group(c.blocks_gained),
                    group(c.blocks_lost),
                    group(c.edges_gained),
                    group(c.edges_lost),
                    c.line,
                    c.function
                ));
            }
        }
        out
    }

    /// The change rows as CSV with a header row.
    pub fn to_csv(&self, top: usize) -> String {
        let mut out = String::from("function,image,");
        if let Some(h) = self.location_header() {
            out.push_str(h);
            out.push(',');
        }
        out.push_str(
            "instructions_a,instructions_b,change,share,delta,cycles_a,cycles_b,cycles_change\n",
        );
        let opt = |v: Option<u64>| v.map_or(String::new(), |c| c.to_string());
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
                "{},{},{},{:.6},{:.6},{},{},{}\n",
                r.instructions_a,
                r.instructions_b,
                r.change,
                r.share,
                r.delta,
                opt(r.cycles_a),
                opt(r.cycles_b),
                r.cycles_change.map_or(String::new(), |c| c.to_string())
            ));
        }
        out
    }

    /// The coverage changes as CSV with a header row.
    pub fn coverage_csv(&self, top: usize) -> String {
        let mut out = String::from(
            "image,function,line,blocks_gained,blocks_lost,instructions_gained,instructions_lost,edges_gained,edges_lost\n",
        );
        for c in self.coverage.iter().take(top) {
            out.push_str(&format!(
                "{},{},{},{},{},{},{},{},{}\n",
                csv_field(&c.image),
                csv_field(&c.function),
                csv_field(&c.line),
                c.blocks_gained,
                c.blocks_lost,
                c.instructions_gained,
                c.instructions_lost,
                c.edges_gained,
                c.edges_lost
            ));
        }
        out
    }

    /// JSON: totals, the first `top` rows of each list, warnings.
    pub fn to_json(&self, top: usize) -> String {
        let mut d = self.clone();
        d.rows.truncate(top);
        d.coverage.truncate(top);
        serde_json::to_string_pretty(&d).unwrap_or_default() + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hotspots::Hotspots;

    fn row(function: &str, instructions: u64, cycles: Option<u64>) -> Hotspot {
        Hotspot {
            function: function.into(),
            image: "p".into(),
            instructions,
            cycles,
            ..Hotspot::default()
        }
    }

    fn report(rows: Vec<Hotspot>, cycles: bool) -> Hotspots {
        Hotspots {
            by: "function".into(),
            total_instructions: rows.iter().map(|r| r.instructions).sum(),
            total_cycles: cycles.then(|| rows.iter().map(|r| r.cycles.unwrap_or(0)).sum()),
            rows,
            ..Hotspots::default()
        }
    }

    #[test]
    fn changes_join_both_sides_and_sort_by_size() {
        let a = report(
            vec![
                row("f", 100, Some(10)),
                row("g", 300, Some(30)),
                row("gone", 50, Some(5)),
            ],
            true,
        );
        let b = report(
            vec![
                row("f", 400, Some(40)),
                row("g", 290, Some(31)),
                row("new", 10, Some(1)),
            ],
            true,
        );
        let (rows, ca, cb) = changes(&a, &b);
        let names: Vec<&str> = rows.iter().map(|r| r.function.as_str()).collect();
        // Equal sizes: the gain first.
        assert_eq!(names, ["f", "gone", "new", "g"]);
        assert_eq!((ca, cb), (Some(45), Some(72)));
        let f = &rows[0];
        assert_eq!(
            (f.instructions_a, f.instructions_b, f.change),
            (100, 400, 300)
        );
        assert!((f.share - 300.0 / 450.0).abs() < 1e-12);
        assert!((f.delta - (400.0 / 700.0 - 100.0 / 450.0)).abs() < 1e-12);
        assert_eq!(f.cycles_change, Some(30));
        let gone = &rows[1];
        assert_eq!((gone.instructions_b, gone.change), (0, -50));
        assert_eq!(gone.cycles_b, Some(0));
        // The changes add up to the change of the totals.
        let sum: i64 = rows.iter().map(|r| r.change).sum();
        assert_eq!(sum, 700 - 450);
    }

    #[test]
    fn cycles_on_one_side_only_are_left_out() {
        let a = report(vec![row("f", 1, Some(3))], true);
        let b = report(vec![row("f", 2, None)], false);
        let (rows, ca, cb) = changes(&a, &b);
        assert_eq!((ca, cb), (None, None));
        assert_eq!(rows[0].cycles_a, None);
        assert_eq!(rows[0].cycles_change, None);
    }

    fn covered(blocks: &[(&str, u64, u64, &str)], edges: &[(u64, u64, &str)]) -> Covered {
        let mut c = Covered::default();
        for &(image, off, len, function) in blocks {
            let l = c.labels.len() as u32;
            c.labels
                .push((image.into(), function.into(), format!("{function}.c:{off}")));
            c.blocks
                .insert(((Some(image.into()), off), len), (len as u32, l));
        }
        for &(s, d, function) in edges {
            let l = c.labels.len() as u32;
            c.labels
                .push(("p".into(), function.into(), format!("{function}.c:{s}")));
            c.edges
                .insert(((Some("p".into()), s), (Some("p".into()), d), 0), l);
        }
        c
    }

    #[test]
    fn coverage_gained_and_lost_by_place() {
        let a = covered(
            &[
                ("p", 0, 4, "main"),
                ("p", 8, 2, "old"),
                ("lib", 0, 4, "memcpy"),
            ],
            &[(3, 8, "main")],
        );
        // The same block of `lib` at the same offset is the same code; a block of the same
        // start and another length is another block.
        let b = covered(
            &[
                ("p", 0, 4, "main"),
                ("p", 16, 3, "new"),
                ("lib", 0, 4, "memcpy"),
                ("lib", 0, 6, "memcpy"),
            ],
            &[(3, 16, "main")],
        );
        let rows = coverage_changes(&a, &b);
        let get = |f: &str| rows.iter().filter(|r| r.function == f).collect::<Vec<_>>();
        let new = get("new");
        assert_eq!(new.len(), 1);
        assert_eq!((new[0].blocks_gained, new[0].instructions_gained), (1, 3));
        let old = get("old");
        assert_eq!((old[0].blocks_lost, old[0].instructions_lost), (1, 2));
        let mc = get("memcpy");
        assert_eq!((mc[0].blocks_gained, mc[0].blocks_lost), (1, 0));
        let main = get("main");
        assert_eq!(main.len(), 1, "{main:?}");
        assert_eq!((main[0].edges_gained, main[0].edges_lost), (1, 1));
        assert_eq!((main[0].blocks_gained, main[0].blocks_lost), (0, 0));
        // A run against itself changes nothing.
        assert!(coverage_changes(&a, &a).is_empty());
    }

    #[test]
    fn formats_carry_every_row() {
        let a = report(vec![row("f,1", 100, None), row("g", 300, None)], false);
        let b = report(vec![row("f,1", 400, None)], false);
        let (rows, ..) = changes(&a, &b);
        let d = Diff {
            by: "function".into(),
            total_instructions_a: 400,
            total_instructions_b: 400,
            rows,
            ..Diff::default()
        };
        let csv = d.to_csv(usize::MAX);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            "function,image,instructions_a,instructions_b,change,share,delta,cycles_a,cycles_b,cycles_change"
        );
        assert_eq!(lines[1], "\"f,1\",p,100,400,300,0.750000,0.750000,,,");
        assert_eq!(lines[2], "g,p,300,0,-300,-0.750000,-0.750000,,,");
        let t = d.to_table(1);
        assert!(t.contains("+300") && !t.contains("-300"), "{t}");
        let j: serde_json::Value = serde_json::from_str(&d.to_json(usize::MAX)).unwrap();
        assert_eq!(j["rows"][1]["change"], -300);
    }
}
