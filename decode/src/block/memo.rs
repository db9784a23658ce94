//! The memoized walk (libxdc's idea): from a block and the TNT bits queued for it, the
//! walk's result — the rows it emits, the bits it consumes, the calls it makes, where it
//! ends — is computed once per thread and replayed afterwards.
//!
//! # Why a memo is exact
//!
//! The walker's hot loop ([`crate::flow`], `fast_walk`) runs only while TNT bits are
//! queued, and only through blocks that end in a conditional branch, a direct jump or a
//! direct call. While bits are queued no flow item can apply (every FUP-led item, PSB+
//! state and bound event waits for the queue to drain: TNT bits are only ever queued from
//! one packet, and the front end delivers the next item only after them), so along that
//! loop the walk reads no packet and its path is a pure function of
//!
//! - the block it starts in (a [`BlockCache`] index, which fixes the start address, the
//!   execution mode and the CR3 key the successors are looked up with), and
//! - the queued bits it consumes.
//!
//! A segment is keyed by the block and the next `n = min(queued, 8)` bits (their values
//! and `n`). It stops after the conditional branch that takes the `n`-th bit, at the
//! first block the hot loop does not walk (a RET, an indirect or far branch, a split or
//! undecodable block: the general walk takes over there exactly as it does after the
//! step walk), or after [`MAX_ROWS`] rows (a cycle of direct jumps). None of these depend
//! on anything but the key: with more than `n` bits queued, the bits past the `n`-th are
//! only read after the segment ends, by the next segment.
//!
//! What a segment does to the walker's state is either stored in it or follows from the
//! state at its start (see `Walker::memo_walk`):
//!
//! - rows: `ip`, `kind`, `taken`, `target` and the block's instruction count are stored;
//!   the first row also carries the instructions open before the segment (partial blocks
//!   included, which it flushes as the step walk does); a row's `offset` is the decision
//!   offset at the start until the first conditional branch and the TNT packet's offset
//!   from there on; `cr3` is the row CR3 at the start (no packet is read);
//! - the return-compression state: the direct calls' NLIPs, pushed in order;
//! - the loop guard ([`crate::loop_guard::LoopGuard`]) sees every direct jump and call
//!   with the queue as it was then; it is stepped on a copy first, and a segment in which
//!   it would fire is left to the step walk, which reports the cycle where it always did;
//! - the decided tail, the end IP, the next block (its successor link), the NLIP of the
//!   last branch.
//!
//! The step walk stays the reference: [`step_walk_only`] turns the memo off on this
//! thread, and the tests and the fuzz targets decode both ways and compare everything.

use tracemill_schemas::BranchKind;

use crate::block::{BlockCache, BlockEnd};
use crate::image::ImageSet;
use crate::insn::InsnClass;

/// Queued bits a segment is keyed by, at most.
pub const KEY_BITS: u8 = 8;

/// Rows a segment holds at most: bounds the work of building one over a cycle of direct
/// jumps that consumes no bit (the loop guard, not the memo, deals with those).
pub const MAX_ROWS: usize = 64;

/// One row of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoRow {
    pub ip: u64,
    pub target: u64,
    /// The branch's fall-through (what a direct call pushes).
    pub next: u64,
    /// Instructions of the block it closes.
    pub insns: u32,
    pub kind: BranchKind,
    pub taken: bool,
    /// TNT bits the segment consumed before this row.
    pub used: u8,
}

/// A memoized segment.
#[derive(Clone, Copy, Debug)]
pub struct Segment {
    /// Its rows: `rows[first..first + len]` of [`Memo`].
    first: u32,
    pub len: u16,
    /// Index (in the segment) of the first conditional branch, and one past the last
    /// (0, 0 when there is none).
    pub first_cond: u16,
    pub end_cond: u16,
    /// TNT bits consumed.
    pub used: u8,
    /// It ended at a block the hot loop does not walk.
    pub blocked: bool,
    /// Does it hold a direct jump or call (the loop guard steps)?
    pub has_direct: bool,
    /// Does it hold a direct call (the return state changes)?
    pub has_call: bool,
    /// Instructions of all its rows.
    pub insns: u64,
    /// The block where the walk goes on (the last row's target), and its index.
    pub end_ip: u64,
    pub end_block: u32,
    /// Fall-through of the last branch.
    pub last_next: u64,
    /// The block where the walk goes on ends in a conditional branch.
    pub cond_next: bool,
    /// Its bits' key ([`key`]), and the next segment from the same block.
    key: u16,
    next_same: u32,
}

/// The table columns of the memo's rows, one vector each, in the order of its rows: a
/// replay appends a segment's as slices (a copy per column) instead of gathering each
/// column out of the rows one row at a time.
#[derive(Default)]
struct Columns {
    ip: Vec<u64>,
    target: Vec<u64>,
    kind: Vec<u8>,
    taken: Vec<bool>,
    insns: Vec<u32>,
}

impl Columns {
    /// Bytes a row takes in them.
    const ROW_BYTES: usize =
        2 * size_of::<u64>() + size_of::<u8>() + size_of::<bool>() + size_of::<u32>();
}

/// A segment's rows as columns ([`Memo::columns`]): `ip[i]` is `rows[i].ip`, and so on.
#[derive(Clone, Copy, Debug)]
pub struct RowColumns<'m> {
    pub ip: &'m [u64],
    pub target: &'m [u64],
    /// `BranchKind as u8`.
    pub kind: &'m [u8],
    pub taken: &'m [bool],
    pub insns: &'m [u32],
}

/// A segment's rows as a sink receives them ([`crate::flow::RowSink::replay`]).
#[derive(Clone, Copy, Debug)]
pub struct Replay<'m> {
    /// The segment's index in the memo (stable while the walker lives: the memo is only
    /// emptied with its cache, between walks).
    pub seg: u32,
    pub rows: &'m [MemoRow],
    /// The same rows' table columns.
    pub cols: RowColumns<'m>,
    /// Instructions open before the first row (they go into it), and where in them its
    /// block began (those before are partial blocks', flushed before).
    pub open: u32,
    pub block_base: u32,
    /// Where the first row's block began.
    pub block_start: u64,
    /// Instructions of all the rows, `open` not included.
    pub insns: u64,
    pub cr3: Option<u64>,
    /// `offset` of the rows before `first_cond`, and of the rest.
    pub off_before: u64,
    pub off_after: u64,
    pub first_cond: usize,
}

/// No segment (the end of a chain).
const NONE: u32 = u32::MAX;

/// The memo of one thread (held by its [`BlockCache`], whose block indices its keys and
/// segments use, and emptied with it). The segments from each block are chained from
/// `heads[block]`: a block starts a few (one per pattern of bits seen there), so a lookup
/// reads two small arrays, where a hash table spread over a large one cost a cache miss
/// per segment.
#[derive(Default)]
pub struct Memo {
    rows: Vec<MemoRow>,
    cols: Columns,
    segs: Vec<Segment>,
    heads: Vec<u32>,
    /// Segments built (memo misses), for statistics.
    pub built: u64,
}

/// The key of a segment's bits: the `n` next queued bits `bits` (the next one highest).
#[inline]
pub fn key(bits: u8, n: u8) -> u16 {
    ((n as u16) << 8) | bits as u16
}

impl Memo {
    /// Bytes it holds (about).
    pub fn bytes(&self) -> usize {
        self.rows.len() * (std::mem::size_of::<MemoRow>() + Columns::ROW_BYTES)
            + self.segs.len() * std::mem::size_of::<Segment>()
            + self.heads.len() * 4
    }

    pub fn len(&self) -> usize {
        self.segs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// The rows of `s`.
    #[inline]
    pub fn rows(&self, s: &Segment) -> &[MemoRow] {
        &self.rows[s.first as usize..s.first as usize + s.len as usize]
    }

    /// The rows of `s` as columns.
    #[inline]
    pub fn columns(&self, s: &Segment) -> RowColumns<'_> {
        let r = s.first as usize..s.first as usize + s.len as usize;
        let c = &self.cols;
        RowColumns {
            ip: &c.ip[r.clone()],
            target: &c.target[r.clone()],
            kind: &c.kind[r.clone()],
            taken: &c.taken[r.clone()],
            insns: &c.insns[r],
        }
    }

    /// The index of the segment from `block` for bits `key`, if built.
    #[inline]
    pub fn get(&self, block: u32, key: u16) -> Option<u32> {
        let mut i = *self.heads.get(block as usize)?;
        while i != NONE {
            let s = &self.segs[i as usize];
            if s.key == key {
                return Some(i);
            }
            i = s.next_same;
        }
        None
    }

    /// Segment `i`.
    #[inline]
    pub fn seg(&self, i: u32) -> Segment {
        self.segs[i as usize]
    }

    fn insert(&mut self, block: u32, rows: &[MemoRow], mut seg: Segment) -> u32 {
        seg.first = self.rows.len() as u32;
        self.rows.extend_from_slice(rows);
        let c = &mut self.cols;
        c.ip.extend(rows.iter().map(|m| m.ip));
        c.target.extend(rows.iter().map(|m| m.target));
        c.kind.extend(rows.iter().map(|m| m.kind as u8));
        c.taken.extend(rows.iter().map(|m| m.taken));
        c.insns.extend(rows.iter().map(|m| m.insns));
        if self.heads.len() <= block as usize {
            self.heads.resize(block as usize + 1, NONE);
        }
        seg.next_same = self.heads[block as usize];
        let i = self.segs.len() as u32;
        self.heads[block as usize] = i;
        self.segs.push(seg);
        self.built += 1;
        i
    }
}

/// The index of the segment from block `start` (at `ip`) with the `n` next queued bits
/// `bits`, built if needed. `cr3` is the walker's (block `start` was looked up with it,
/// so the successors are the step walk's).
#[inline]
pub fn segment(
    cache: &mut BlockCache,
    images: &ImageSet<'_>,
    start: u32,
    ip: u64,
    bits: u8,
    n: u8,
    cr3: Option<u64>,
) -> u32 {
    match cache.memo.get(start, key(bits, n)) {
        Some(i) => i,
        None => build(cache, images, start, ip, bits, n, cr3),
    }
}

/// Build a segment: the hot loop's walk, step by step, without a packet.
#[inline(never)]
fn build(
    cache: &mut BlockCache,
    images: &ImageSet<'_>,
    start: u32,
    ip: u64,
    bits: u8,
    n: u8,
    cr3: Option<u64>,
) -> u32 {
    let mut rows: Vec<MemoRow> = Vec::new();
    let mut seg = Segment {
        first: 0,
        len: 0,
        first_cond: 0,
        end_cond: 0,
        used: 0,
        blocked: false,
        has_direct: false,
        has_call: false,
        insns: 0,
        end_ip: ip,
        end_block: start,
        last_next: 0,
        cond_next: false,
        key: key(bits, n),
        next_same: NONE,
    };
    let mut bi = start;
    let mut used = 0u8;
    loop {
        if rows.len() == MAX_ROWS {
            break;
        }
        let h = cache.hot(bi);
        if h.end != BlockEnd::Branch {
            seg.blocked = true;
            break;
        }
        let (which, to, kind, taken) = match h.class {
            InsnClass::Cond => {
                let taken = (bits >> (n - 1 - used)) & 1 == 1;
                let to = if taken { h.target } else { h.next };
                (taken as usize, to, BranchKind::Cond, taken)
            }
            InsnClass::Jmp => (1, h.target, BranchKind::Jmp, true),
            InsnClass::Call => (1, h.target, BranchKind::Call, true),
            _ => {
                seg.blocked = true;
                break;
            }
        };
        rows.push(MemoRow {
            ip: h.last_ip,
            target: to,
            next: h.next,
            insns: h.insns,
            kind,
            taken,
            used,
        });
        seg.insns += h.insns as u64;
        seg.last_next = h.next;
        seg.end_ip = to;
        bi = cache.successor(images, bi, which, cr3);
        seg.end_block = bi;
        match kind {
            BranchKind::Cond => {
                if used == 0 {
                    seg.first_cond = rows.len() as u16 - 1;
                }
                seg.end_cond = rows.len() as u16;
                used += 1;
                if used == n {
                    break;
                }
            }
            BranchKind::Call => {
                seg.has_call = true;
                seg.has_direct = true;
            }
            _ => seg.has_direct = true,
        }
    }
    seg.len = rows.len() as u16;
    seg.used = used;
    let h = cache.hot(seg.end_block);
    seg.cond_next = h.end == BlockEnd::Branch && h.class == InsnClass::Cond;
    cache.memo.insert(start, &rows, seg)
}

thread_local! {
    /// Whether walkers created on this thread use the memo (see [`step_walk_only`]).
    static MEMO_ON: std::cell::Cell<bool> = std::cell::Cell::new(
        std::env::var_os("TRACEMILL_STEP_WALK").is_none_or(|v| v.is_empty() || v == "0"),
    );
}

/// Whether walkers created on this thread now use the memo.
pub fn memo_enabled() -> bool {
    MEMO_ON.with(|m| m.get())
}

/// Run `f` with the memo off on this thread: every walker it creates takes the step walk,
/// the reference the memo is compared with. (`TRACEMILL_STEP_WALK=1` turns it off for a
/// whole process, for measurements.)
pub fn step_walk_only<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            MEMO_ON.with(|m| m.set(self.0));
        }
    }
    let _restore = Restore(MEMO_ON.with(|m| m.replace(false)));
    f()
}
