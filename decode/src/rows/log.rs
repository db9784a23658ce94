//! The rows of a piece as the walk produced them ([`RowLog`]): which memoized segments
//! were replayed in which order, and the rows the step walk pushed one by one, so that
//! their counts and coverage cost nothing per replayed row (see [`crate::tally`], whose
//! sink keeps only this log, and [`super::BranchColumns::log`]).

use crate::block::memo::Replay;
use crate::coverage::{Counter, Coverage, PartialBlock};
use crate::rows::{BranchRow, Partial, PieceStats};

/// A row pushed alone (by the step walk), with the block it closes.
#[derive(Clone, Copy, Debug)]
struct Single {
    ip: u64,
    target: Option<u64>,
    block_start: u64,
    insns: u32,
    block_insns: u32,
    kind: u8,
}

/// A row of a segment, as copied from the memo.
#[derive(Clone, Copy, Debug)]
struct SegRow {
    ip: u64,
    target: u64,
    insns: u32,
    kind: u8,
}

/// A distinct segment replayed in this piece: its rows in `seg_rows`, where its first
/// row's block begins, and its index in the memo.
#[derive(Clone, Copy, Debug)]
struct Seg {
    first: u32,
    len: u16,
    start: u64,
    memo: u32,
}

/// Where a single's index is kept in an entry's `what`.
const SINGLE: u32 = 1 << 31;

/// Rows `at..at + take` of the piece: single `what & !SINGLE`, or rows `skip..skip + take`
/// of segment `what`.
#[derive(Clone, Copy, Debug)]
struct Entry {
    at: usize,
    what: u32,
    skip: u16,
    take: u16,
}

/// The rows of a piece as replays of segments and single rows, in order.
#[derive(Clone, Debug, Default)]
pub struct RowLog {
    bufs: Bufs,
    rows: usize,
}

/// A log's buffers, reused from piece to piece on a thread ([`POOL`]): fresh ones for
/// every piece cost a page fault per 4 KiB written, and their growth a copy at every
/// doubling.
#[derive(Clone, Debug, Default)]
struct Bufs {
    entries: Vec<Entry>,
    singles: Vec<Single>,
    segs: Vec<Seg>,
    seg_rows: Vec<SegRow>,
    /// The memo's segment index -> 1 + `segs` index (0: not seen in this piece). Reset
    /// through `segs` when the piece is done, so it is never cleared whole.
    local: Vec<u32>,
    partials: Vec<PartialBlock>,
}

impl Bufs {
    /// Empty again, keeping the room (`local` is all zeros afterwards).
    fn clear(&mut self) {
        for s in &self.segs {
            self.local[s.memo as usize] = 0;
        }
        self.entries.clear();
        self.singles.clear();
        self.segs.clear();
        self.seg_rows.clear();
        self.partials.clear();
    }
}

thread_local! {
    /// The buffers of the last log finished on this thread.
    static POOL: std::cell::RefCell<Option<Bufs>> = const { std::cell::RefCell::new(None) };
}

impl RowLog {
    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Buffers for a new piece: the pool's, when this thread finished one before.
    #[inline]
    fn ready(&mut self) {
        if self.bufs.entries.capacity() == 0 {
            self.take_pooled();
        }
    }

    #[cold]
    fn take_pooled(&mut self) {
        if let Some(b) = POOL.with(|p| p.borrow_mut().take()) {
            self.bufs = b;
        }
        self.bufs.entries.reserve(1024);
    }

    #[inline]
    fn single(&mut self, s: Single) {
        self.bufs.entries.push(Entry {
            at: self.rows,
            what: SINGLE | self.bufs.singles.len() as u32,
            skip: 0,
            take: 1,
        });
        self.bufs.singles.push(s);
        self.rows += 1;
    }

    /// Row `r` and the block it closes.
    #[inline]
    pub fn push(&mut self, r: &BranchRow, block: (u64, u32)) {
        self.ready();
        self.single(Single {
            ip: r.ip,
            target: r.target,
            block_start: block.0,
            insns: r.insns,
            block_insns: block.1,
            kind: r.kind as u8,
        });
    }

    /// A segment's rows (as [`crate::sink::RowSink::replay`] receives them).
    #[inline]
    pub fn replay(&mut self, r: &Replay<'_>) {
        let Some(first) = r.rows.first() else {
            return;
        };
        self.ready();
        let n = r.rows.len() as u16;
        let at = r.seg as usize;
        if at >= self.bufs.local.len() {
            self.bufs.local.resize(at + 1 + at / 2, 0);
        }
        let local = match self.bufs.local[at] {
            0 => {
                let l = self.bufs.segs.len() as u32;
                self.bufs.segs.push(Seg {
                    first: self.bufs.seg_rows.len() as u32,
                    len: n,
                    start: r.block_start,
                    memo: r.seg,
                });
                self.bufs.seg_rows.extend(r.rows.iter().map(|m| SegRow {
                    ip: m.ip,
                    target: m.target,
                    insns: m.insns,
                    kind: m.kind as u8,
                }));
                self.bufs.local[at] = l + 1;
                l
            }
            l => l - 1,
        };
        // The first row is the segment's own when nothing was open before it and its
        // block begins where the segment does; otherwise it carries what was open, and
        // is counted alone.
        let own = r.open == 0
            && r.block_base == 0
            && r.block_start == self.bufs.segs[local as usize].start;
        let skip = if own {
            0
        } else {
            self.single(Single {
                ip: first.ip,
                target: Some(first.target),
                block_start: r.block_start,
                insns: r.open + first.insns,
                block_insns: r.open + first.insns - r.block_base,
                kind: first.kind as u8,
            });
            1
        };
        if n > skip {
            self.bufs.entries.push(Entry {
                at: self.rows,
                what: local,
                skip,
                take: n - skip,
            });
            self.rows += (n - skip) as usize;
        }
    }

    /// A partial block whose instructions the next row carries.
    pub fn partial(&mut self, p: Partial) {
        self.ready();
        self.bufs.partials.push(PartialBlock {
            row: self.rows as u64,
            start: p.0,
            end: p.1,
            insns: p.2,
            times: p.3,
        });
    }

    /// Keep the first `n` rows.
    pub fn truncate(&mut self, n: usize) {
        while let Some(e) = self.bufs.entries.last_mut() {
            if e.at >= n {
                if e.what & SINGLE != 0 {
                    self.bufs.singles.pop();
                }
                self.bufs.entries.pop();
                continue;
            }
            if e.at + e.take as usize > n {
                e.take = (n - e.at) as u16;
            }
            break;
        }
        self.rows = self.rows.min(n);
        self.bufs.partials.retain(|p| p.row < n as u64);
    }

    /// The last row went to `to` after all (erratum BDM64): its edge is to `to`.
    pub fn set_last_target(&mut self, to: u64) {
        let Some(e) = self.bufs.entries.last_mut() else {
            return;
        };
        if e.what & SINGLE != 0 {
            self.bufs.singles[(e.what & !SINGLE) as usize].target = Some(to);
            return;
        }
        // A segment's last row: counted alone from now on, with its new target.
        let s = self.bufs.segs[e.what as usize];
        let j = e.skip as usize + e.take as usize - 1;
        let rows = &self.bufs.seg_rows[s.first as usize..][..s.len as usize];
        let m = rows[j];
        let block_start = if j == 0 { s.start } else { rows[j - 1].target };
        e.take -= 1;
        if e.take == 0 {
            self.bufs.entries.pop();
        }
        self.rows -= 1;
        self.single(Single {
            ip: m.ip,
            target: Some(to),
            block_start,
            insns: m.insns,
            block_insns: m.insns,
            kind: m.kind,
        });
    }

    /// The kind of the last row.
    pub fn last_kind(&self) -> Option<u8> {
        let e = self.bufs.entries.last()?;
        Some(if e.what & SINGLE != 0 {
            self.bufs.singles[(e.what & !SINGLE) as usize].kind
        } else {
            let s = self.bufs.segs[e.what as usize];
            self.bufs.seg_rows[(s.first + e.skip as u32 + e.take as u32 - 1) as usize].kind
        })
    }

    /// The rows' counts, and their blocks and edges when `cover`. Each distinct segment
    /// (and first row skipped, and length) is expanded once, with the number of its
    /// replays.
    pub fn finish(&mut self, cover: bool) -> (PieceStats, Coverage) {
        let mut stats = PieceStats {
            rows: self.rows as u64,
            ..PieceStats::default()
        };
        let mut cov = Coverage::default();
        // Replays of each segment whole (from its first row or its second), and the few
        // cut short by a truncation.
        let mut whole = vec![[0u64; 2]; self.bufs.segs.len()];
        let mut cut = Vec::new();
        for e in &self.bufs.entries {
            if e.what & SINGLE != 0 {
                continue;
            }
            let s = self.bufs.segs[e.what as usize];
            if e.skip as usize + e.take as usize == s.len as usize {
                whole[e.what as usize][e.skip as usize] += 1;
            } else {
                cut.push(*e);
            }
        }
        let singles = self.bufs.singles.len();
        let mut c = cover.then(|| Counter::new(&mut cov, singles.max(self.bufs.seg_rows.len())));
        for s in &self.bufs.singles {
            stats.insns += s.insns as u64;
            stats.by_kind[s.kind as usize & 7] += 1;
            if let Some(c) = &mut c {
                c.block(s.block_start, s.ip, s.block_insns, 1);
                if let Some(dst) = s.target {
                    c.edge(s.ip, dst, s.kind, 1);
                }
            }
        }
        let mut expand = |seg: Seg, skip: usize, take: usize, n: u64| {
            let rows = &self.bufs.seg_rows[seg.first as usize..][..seg.len as usize];
            for (j, m) in rows.iter().enumerate().skip(skip).take(take) {
                stats.insns += m.insns as u64 * n;
                stats.by_kind[m.kind as usize & 7] += n;
                if let Some(c) = &mut c {
                    let start = if j == 0 {
                        seg.start
                    } else {
                        rows[j - 1].target
                    };
                    c.block(start, m.ip, m.insns, n);
                    c.edge(m.ip, m.target, m.kind, n);
                }
            }
        };
        for (i, w) in whole.iter().enumerate() {
            let seg = self.bufs.segs[i];
            for (skip, &n) in w.iter().enumerate() {
                if n > 0 {
                    expand(seg, skip, seg.len as usize, n);
                }
            }
        }
        for e in cut {
            expand(
                self.bufs.segs[e.what as usize],
                e.skip as usize,
                e.take as usize,
                1,
            );
        }
        if let Some(c) = &mut c {
            c.partials(&self.bufs.partials);
        }
        drop(c);
        // The buffers go back to this thread's pool; the log keeps its count.
        let mut bufs = std::mem::take(&mut self.bufs);
        if bufs.entries.capacity() > 0 {
            bufs.clear();
            POOL.with(|p| *p.borrow_mut() = Some(bufs));
        }
        (stats, cov)
    }
}
