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
use crate::rows::{BranchColumns, CoverageRow, EdgeRow};

type Map<K, V> = HashMap<K, V, BuildHasherDefault<AddrHasher>>;

/// Blocks and edges with their counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// (start, end) -> (instructions, executions). `end` is the branch's address.
    pub blocks: Map<(u64, u64), (u32, u64)>,
    /// (src, dst, kind) -> executions.
    pub edges: Map<(u64, u64, u8), u64>,
}

impl Coverage {
    /// Count the blocks and edges of `rows` (whose `block_start`/`block_insns` are set),
    /// and the partial blocks recorded with them.
    pub fn add_rows(&mut self, rows: &BranchColumns) {
        let n = rows.len().min(rows.block_start.len());
        for i in 0..n {
            let e = self
                .blocks
                .entry((rows.block_start[i], rows.ip[i]))
                .or_insert((rows.block_insns[i], 0));
            e.1 += 1;
            if let Some(dst) = rows.target.get(i) {
                *self
                    .edges
                    .entry((rows.ip[i], dst, rows.kind[i]))
                    .or_default() += 1;
            }
        }
        // Blocks left before their branch (an interrupt, a disable, an overflow or
        // TraceSTOP inside them): their instructions are in a row's `insns` too.
        for p in &rows.partials {
            self.blocks
                .entry((p.start, p.end))
                .or_insert((p.insns, 0))
                .1 += p.times as u64;
        }
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
            .map(|(&(start, end), &(insns, count))| {
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
        v.sort_by_key(|r| (r.start, r.end));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::BranchRow;

    #[test]
    fn blocks_and_edges_count_and_merge() {
        let mut rows = BranchColumns::default();
        let mut push = |ip, target, start, n| {
            rows.push_flow(&BranchRow {
                ip,
                target,
                kind: BranchKind::Cond,
                taken: true,
                compressed: false,
                insns: n,
                tsc: None,
                cycles: None,
                cr3: None,
                offset: 0,
            });
            rows.block_start.push(start);
            rows.block_insns.push(n);
        };
        push(0x10, Some(0x20), 0x0, 4);
        push(0x28, Some(0x00), 0x20, 3);
        push(0x10, Some(0x20), 0x0, 4);
        let mut a = Coverage::default();
        a.add_rows(&rows);
        assert_eq!(a.blocks[&(0x0, 0x10)], (4, 2));
        assert_eq!(a.edges[&(0x10, 0x20, BranchKind::Cond as u8)], 2);
        let mut b = a.clone();
        b.merge(a);
        assert_eq!(b.blocks[&(0x0, 0x10)], (4, 4));
        assert_eq!(b.executions(), 6);
        assert_eq!(b.edge_rows().len(), 2);
    }

    #[test]
    fn partial_blocks_count_with_the_row_that_carries_them() {
        use crate::flow::RowSink;
        let mut rows = BranchColumns::default();
        let row = |ip, insns| BranchRow {
            ip,
            target: Some(0x40),
            kind: BranchKind::Jmp,
            taken: true,
            compressed: false,
            insns,
            tsc: None,
            cycles: None,
            cr3: None,
            offset: 0,
        };
        // Two instructions from 0x0, then an interrupt at 0x8: the next row carries them.
        RowSink::partial(&mut rows, (0x0, 0x4, 2, 1));
        RowSink::push(&mut rows, &row(0x48, 5), (0x40, 3));
        // Another one whose row is dropped (a gap): it goes with that row.
        RowSink::partial(&mut rows, (0x40, 0x44, 1, 1));
        RowSink::push(&mut rows, &row(0x48, 4), (0x40, 3));
        RowSink::truncate(&mut rows, 1);
        let mut c = Coverage::default();
        c.add_rows(&rows);
        assert_eq!(c.blocks[&(0x0, 0x4)], (2, 1));
        assert_eq!(c.blocks.len(), 2);
        let insns: u64 = c.blocks.values().map(|&(n, k)| n as u64 * k).sum();
        assert_eq!(insns, rows.insns.iter().map(|&n| n as u64).sum::<u64>());
    }
}
