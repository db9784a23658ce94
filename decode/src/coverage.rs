//! Code coverage: basic blocks and edges with execution counts.
//!
//! A block is the straight run of instructions from an entry — the first traced
//! instruction, a branch's target, the fall-through of a not-taken branch, a point where
//! tracing resumes — through the next branch instruction, inclusive. Blocks may overlap
//! (two entries into one run), as in drcov. A block that execution leaves before its
//! branch (an interrupt, FUP.PGD, an overflow or TraceSTOP at an IP inside it) counts as
//! the partial block it ran, from its entry through the last instruction executed, so
//! that the blocks' instructions add up to the rows' `insns`. Each chunk aggregates its rows on the thread
//! that decoded it; the aggregates merge in any order (counts add).

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use tracemill_schemas::BranchKind;

use crate::block::AddrHasher;
use crate::image::ImageSet;
#[cfg(test)]
use crate::rows::BranchColumns;

/// A basic block that execution left before its branch: it ran from `start` through the
/// instruction at `end`, `times` times since the row before. Its instructions are counted
/// in the `insns` of row `row` (the next row), so it counts in coverage exactly when that
/// row does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartialBlock {
    pub row: u64,
    pub start: u64,
    pub end: u64,
    pub insns: u32,
    pub times: u32,
}

/// One coverage row (a basic block and how often it ran).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoverageRow {
    pub image: Option<String>,
    pub image_offset: Option<u64>,
    pub start: u64,
    pub end: u64,
    pub insns: u32,
    pub count: u64,
}

/// One edge row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeRow {
    pub src: u64,
    pub dst: u64,
    pub kind: BranchKind,
    pub count: u64,
}

type Map<K, V> = HashMap<K, V, BuildHasherDefault<AddrHasher>>;

/// Blocks and edges with their counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// (start, end, instructions) -> (instructions, executions). `end` is the branch's
    /// address. The instruction count is part of the key: the same bytes decoded in
    /// another execution mode (16/32/64-bit) are another block, and one key for both
    /// kept whichever count came first, which depended on the order pieces were counted
    /// and merged in (fuzz finding `memo-step-coverage`).
    pub blocks: Map<(u64, u64, u32), (u32, u64)>,
    /// (src, dst, kind) -> executions.
    pub edges: Map<(u64, u64, u8), u64>,
}

impl Coverage {
    /// Count `n` executions of block (start, end) of `insns` instructions.
    pub fn add_block(&mut self, start: u64, end: u64, insns: u32, n: u64) {
        self.blocks
            .entry((start, end, insns))
            .or_insert((insns, 0))
            .1 += n;
    }

    /// Count `n` executions of edge (src, dst, kind).
    pub fn add_edge(&mut self, src: u64, dst: u64, kind: u8, n: u64) {
        *self.edges.entry((src, dst, kind)).or_default() += n;
    }

    pub fn merge(&mut self, o: Coverage) {
        if self.blocks.is_empty() && self.edges.is_empty() {
            *self = o;
            return;
        }
        for (k, (insns, n)) in o.blocks {
            self.blocks.entry(k).or_insert((insns, 0)).1 += n;
        }
        for (k, n) in o.edges {
            *self.edges.entry(k).or_default() += n;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Rows of the `coverage` table, sorted by start address, with the image each block
    /// lies in (its offset from the image's load base).
    pub fn block_rows(&self, images: &ImageSet<'_>) -> Vec<CoverageRow> {
        let mut v: Vec<CoverageRow> = self
            .blocks
            .iter()
            .map(|(&(start, end, _), &(insns, count))| {
                let img = images.image_of(start, None).or_else(|| {
                    // Tagged images: any address space holding it.
                    images
                        .segments()
                        .iter()
                        .find(|s| s.contains(start))
                        .map(|s| (s.image, &images.images()[s.image as usize]))
                });
                CoverageRow {
                    image: img.map(|(_, i)| i.name.clone()),
                    image_offset: img.map(|(_, i)| start.wrapping_sub(i.base)),
                    start,
                    end,
                    insns,
                    count,
                }
            })
            .collect();
        v.sort_by_key(|r| (r.start, r.end, r.insns));
        v
    }

    /// Rows of the `edges` table, sorted.
    pub fn edge_rows(&self) -> Vec<EdgeRow> {
        let mut v: Vec<EdgeRow> = self
            .edges
            .iter()
            .map(|(&(src, dst, kind), &count)| EdgeRow {
                src,
                dst,
                kind: BranchKind::from_code(kind).unwrap_or(BranchKind::Jmp),
                count,
            })
            .collect();
        v.sort_by_key(|e| (e.src, e.dst, e.kind as u8));
        v
    }

    /// Block executions (the sum of counts).
    pub fn executions(&self) -> u64 {
        self.blocks.values().map(|v| v.1).sum()
    }
}

/// Counts blocks and edges into a [`Coverage`], first in small direct-mapped tables (a
/// real program's pieces run a few thousand blocks over and over), whose slots go to the
/// maps when another key takes them and at the end: two hash-map lookups per row were 13%
/// of a rows-mode decode of a real program's Intel PT trace.
pub struct Counter<'c> {
    cov: &'c mut Coverage,
    blocks: Front<(u64, u64, u32), (u32, u64)>,
    edges: Front<(u64, u64, u8), u64>,
}

impl<'c> Counter<'c> {
    /// A counter into `cov` for about `n` counts (as many slots, up to 2 Ki: a stitch's
    /// few rows need no large table).
    pub fn new(cov: &'c mut Coverage, n: usize) -> Self {
        let bits = (n.max(16).next_power_of_two().trailing_zeros()).min(11);
        Counter {
            cov,
            blocks: Front::new(bits),
            edges: Front::new(bits),
        }
    }

    /// `n` executions of block (start, end) of `insns` instructions.
    #[inline]
    pub fn block(&mut self, start: u64, end: u64, insns: u32, n: u64) {
        let h = self.blocks.slot(start ^ end.rotate_left(29));
        if let Some((k, v)) = self
            .blocks
            .bump(h, (start, end, insns), (insns, 0), |v| v.1 += n)
        {
            self.cov.add_block(k.0, k.1, k.2, v.1);
        }
    }

    /// `n` executions of edge (src, dst, kind).
    #[inline]
    pub fn edge(&mut self, src: u64, dst: u64, kind: u8, n: u64) {
        let h = self.edges.slot(src ^ dst.rotate_left(29) ^ kind as u64);
        if let Some((k, v)) = self.edges.bump(h, (src, dst, kind), 0, |v| *v += n) {
            self.cov.add_edge(k.0, k.1, k.2, v);
        }
    }

    /// Blocks left before their branch (an interrupt, a disable, an overflow or
    /// TraceSTOP inside them): their instructions are in a row's `insns` too.
    pub fn partials(&mut self, partials: &[PartialBlock]) {
        for p in partials {
            self.block(p.start, p.end, p.insns, p.times as u64);
        }
    }
}

impl Drop for Counter<'_> {
    fn drop(&mut self) {
        for (k, v) in std::mem::take(&mut self.blocks.slots).into_iter().flatten() {
            self.cov.add_block(k.0, k.1, k.2, v.1);
        }
        for (k, v) in std::mem::take(&mut self.edges.slots).into_iter().flatten() {
            self.cov.add_edge(k.0, k.1, k.2, v);
        }
    }
}

/// A direct-mapped table of counts in front of a hash map: a key found in its slot is
/// counted there; another key takes the slot and hands back what it held.
struct Front<K, V> {
    slots: Vec<Option<(K, V)>>,
    bits: u32,
}

impl<K: Copy + PartialEq, V: Copy> Front<K, V> {
    /// A table of `2^bits` slots.
    fn new(bits: u32) -> Self {
        Front {
            slots: vec![None; 1 << bits],
            bits,
        }
    }

    /// The slot of a key's mixed bits.
    #[inline]
    fn slot(&self, x: u64) -> usize {
        (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - self.bits)) as usize
    }

    /// Count `key` in slot `h` (`first` is its value when new, then `add` for this row);
    /// returns the key and value the slot held before, if another.
    #[inline]
    fn bump(&mut self, h: usize, key: K, first: V, add: impl Fn(&mut V)) -> Option<(K, V)> {
        let slot = &mut self.slots[h];
        match slot {
            Some((k, v)) if *k == key => {
                add(v);
                None
            }
            _ => {
                let mut v = first;
                add(&mut v);
                slot.replace((key, v))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::BranchRow;
    use crate::sink::RowSink;

    fn row(ip: u64, target: Option<u64>, kind: BranchKind, insns: u32) -> BranchRow {
        BranchRow {
            ip,
            target,
            kind,
            taken: true,
            compressed: false,
            insns,
            tsc: None,
            cycles: None,
            cr3: None,
            offset: 0,
        }
    }

    #[test]
    fn blocks_and_edges_count_and_merge() {
        let mut rows = BranchColumns::default();
        let mut push = |ip, target, start, n| {
            RowSink::push(&mut rows, &row(ip, target, BranchKind::Cond, n), (start, n));
        };
        push(0x10, Some(0x20), 0x0, 4);
        push(0x28, Some(0x00), 0x20, 3);
        push(0x10, Some(0x20), 0x0, 4);
        let (_, a) = rows.finish();
        assert_eq!(a.blocks[&(0x0, 0x10, 4)], (4, 2));
        assert_eq!(a.edges[&(0x10, 0x20, BranchKind::Cond as u8)], 2);
        let mut b = a.clone();
        b.merge(a);
        assert_eq!(b.blocks[&(0x0, 0x10, 4)], (4, 4));
        assert_eq!(b.executions(), 6);
        assert_eq!(b.edge_rows().len(), 2);
    }

    #[test]
    fn one_range_decoded_in_two_modes_is_two_blocks_whatever_the_order() {
        // The same bytes as 6 instructions (32-bit: REX bytes are INC/DEC) and as 4
        // (64-bit): counted and merged in either order, the same two blocks.
        let mut a = Coverage::default();
        a.add_block(0x10, 0x1f, 6, 1);
        let mut b = Coverage::default();
        b.add_block(0x10, 0x1f, 4, 2);
        let (mut ab, mut ba) = (a.clone(), b.clone());
        ab.merge(b);
        ba.merge(a);
        assert_eq!(ab, ba);
        assert_eq!(ab.blocks.len(), 2);
        assert_eq!(ab.blocks[&(0x10, 0x1f, 4)], (4, 2));
    }

    #[test]
    fn partial_blocks_count_with_the_row_that_carries_them() {
        let mut rows = BranchColumns::default();
        let jmp = |ip, insns| row(ip, Some(0x40), BranchKind::Jmp, insns);
        // Two instructions from 0x0, then an interrupt at 0x8: the next row carries them.
        RowSink::partial(&mut rows, (0x0, 0x4, 2, 1));
        RowSink::push(&mut rows, &jmp(0x48, 5), (0x40, 3));
        // Another one whose row is dropped (a gap): it goes with that row.
        RowSink::partial(&mut rows, (0x40, 0x44, 1, 1));
        RowSink::push(&mut rows, &jmp(0x48, 4), (0x40, 3));
        RowSink::truncate(&mut rows, 1);
        let (_, c) = rows.finish();
        assert_eq!(c.blocks[&(0x0, 0x4, 2)], (2, 1));
        assert_eq!(c.blocks.len(), 2);
        let insns: u64 = c.blocks.values().map(|&(n, k)| n as u64 * k).sum();
        assert_eq!(insns, rows.insns.iter().map(|&n| n as u64).sum::<u64>());
    }

    #[test]
    fn the_direct_mapped_front_counts_as_the_maps_alone_would() {
        // More distinct blocks and edges than slots, one block's bytes seen with two
        // instruction counts (two execution modes): slots are taken and handed back over
        // and over, and the two are two blocks.
        let mut rows = BranchColumns::default();
        let mut blocks = Map::default();
        let mut edges = Map::default();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for i in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let ip = 0x1000 + (x % 3000) * 16;
            let insns = if ip == 0x1000 && i % 2 == 1 { 9 } else { 3 };
            let target = (!x.is_multiple_of(5)).then_some(ip + 0x100 + (x >> 40) % 7);
            let kind = BranchKind::from_code((x >> 20) as u8 % 6).expect("a kind");
            RowSink::push(&mut rows, &row(ip, target, kind, insns), (ip - 8, insns));
            let b: &mut (u32, u64) = blocks.entry((ip - 8, ip, insns)).or_insert((insns, 0));
            b.1 += 1;
            if let Some(dst) = target {
                *edges.entry((ip, dst, kind as u8)).or_default() += 1u64;
            }
        }
        let (_, c) = rows.finish();
        assert!(c.blocks.len() > 2048 && c.edges.len() > 2048);
        assert_eq!(c.blocks, blocks);
        assert_eq!(c.edges, edges);
    }
}
