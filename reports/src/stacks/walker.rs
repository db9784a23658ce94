//! The walk: frames pushed and popped by the rules of the module's doc, row by row.

use arrow_array::types::UInt64Type;
use arrow_array::{Array, PrimitiveArray};
use tracemill_schemas::{BranchKind, EventKind};

use super::{events::*, functions::*, rows::*, trie::*, MAX_DEPTH};

/// How many frames of the stack return to each bucket of addresses: a `ret` whose
/// target's bucket is empty matches no frame, without a look through the stack. The
/// synthetic trace's random walk makes millions of such returns with 256 frames on the
/// stack, and looking through them all was a tenth of the walk.
pub(super) struct ReturnFilter {
    pub(super) counts: Box<[u16]>,
}

impl ReturnFilter {
    /// 4,096 buckets (8 KiB): a stack of [`MAX_DEPTH`] frames fills about 6% of them.
    pub(super) const BUCKETS: usize = 1 << 12;

    pub(super) fn new() -> Self {
        ReturnFilter {
            counts: vec![0; Self::BUCKETS].into_boxed_slice(),
        }
    }

    #[inline]
    pub(super) fn bucket(ret: u64) -> usize {
        ((ret ^ (ret >> 12) ^ (ret >> 24)) as usize) & (Self::BUCKETS - 1)
    }

    pub(super) fn add(&mut self, ret: u64) {
        self.counts[Self::bucket(ret)] += 1;
    }

    pub(super) fn remove(&mut self, ret: u64) {
        self.counts[Self::bucket(ret)] -= 1;
    }

    /// Could a frame return to `ret`? `false` is sure; `true` asks for a look.
    #[inline]
    pub(super) fn may_hold(&self, ret: u64) -> bool {
        self.counts[Self::bucket(ret)] != 0
    }
}

/// The bit of a packed function id that says its symbol is known. Ids stay below it: 2 G
/// function names would take more than 64 GB.
pub(super) const KNOWN: u32 = 1 << 31;

pub(super) struct Walker<'a, 's, F: FnMut(Span)> {
    pub(super) f: &'a mut Functions<'s>,
    pub(super) st: Stacks,
    pub(super) stack: Vec<Frame>,
    /// Frames of `stack` entered asynchronously (`Frame::far`): without any, nothing can
    /// resume one, and no look through the stack is needed. The synthetic trace has 3 M
    /// enables that resume nowhere, each of which looked through 256 frames.
    pub(super) far_frames: usize,
    /// The `ret` of every frame of `stack`.
    pub(super) rets: ReturnFilter,
    pub(super) on_span: F,
    pub(super) tsc: Option<u64>,
    /// Weights not yet added to their node: most rows (conditional branches, jumps) leave
    /// the stack as it was, and an add per row to a trie of tens of millions of nodes was
    /// a cache miss per row.
    pub(super) pending: Pending,
    /// Per value of a keyed row group's dictionaries: its function, and for `ip` the
    /// return address of a call there (0: unknown). Kept to reuse the allocations. An
    /// `ip`'s function is its id with [`KNOWN`] set for a known symbol: four bytes, not
    /// eight, so more of the table every row reads stays in the processor's caches.
    pub(super) ip_at: Vec<u32>,
    pub(super) ip_ret: Vec<u64>,
    pub(super) target_at: Vec<FunctionAt>,
}

/// Instructions and cycles of consecutive rows at one node.
#[derive(Default)]
pub(super) struct Pending {
    pub(super) node: u32,
    pub(super) instructions: u64,
    pub(super) cycles: u64,
}

impl<'s, F: FnMut(Span)> Walker<'_, 's, F> {
    /// Add the pending weights to their node.
    pub(super) fn flush(&mut self) {
        let p = std::mem::take(&mut self.pending);
        self.add(p);
    }

    #[inline(always)]
    pub(super) fn add(&mut self, p: Pending) {
        self.st.instructions[p.node as usize] += p.instructions;
        // Not 0 only when the stacks count cycles.
        if p.cycles != 0 {
            self.st.cycles[p.node as usize] += p.cycles;
        }
    }

    pub(super) fn pop_to(&mut self, len: usize) {
        while self.stack.len() > len {
            let fr = self.stack.pop().expect("non-empty");
            self.far_frames -= fr.far as usize;
            self.rets.remove(fr.ret);
            if let (Some(b), Some(e)) = (fr.begin, self.tsc) {
                (self.on_span)(Span {
                    func: fr.func,
                    depth: self.stack.len() as u32,
                    begin: b,
                    end: e,
                });
            }
        }
    }

    pub(super) fn push(&mut self, func: u32, ret: u64, far: bool) {
        if self.stack.len() >= MAX_DEPTH {
            self.st.max_depth_hit += 1;
            return;
        }
        let parent = self.stack.last().map_or(0, |f| f.node);
        let node = self.st.child(parent, func);
        self.rets.add(ret);
        self.far_frames += far as usize;
        self.stack.push(Frame {
            node,
            func,
            ret,
            far,
            begin: self.tsc,
        });
    }

    /// The innermost frame entered asynchronously that `at` resumes.
    pub(super) fn resumed(&self, at: u64) -> Option<usize> {
        if self.far_frames == 0 {
            return None;
        }
        self.stack.iter().rposition(|f| f.far && resumes(f.ret, at))
    }

    /// The top frame now runs `func` (tail call, fall-through).
    pub(super) fn replace_top(&mut self, func: u32) {
        let Some(top) = self.stack.last().copied() else {
            self.push(func, 0, false);
            return;
        };
        if top.func == func {
            return;
        }
        self.pop_to(self.stack.len() - 1);
        self.push(func, top.ret, top.far);
    }

    pub(super) fn gap(&mut self) {
        self.st.gaps += 1;
        self.pop_to(0);
        self.push(0, 0, false);
    }

    pub(super) fn event(&mut self, e: Ev) {
        self.st.events += 1;
        match e.kind {
            // Resyncs without an ip, disables and enables that resume where tracing
            // stopped are not here (`Resolver`).
            EventKind::Error | EventKind::Overflow | EventKind::Resync => self.gap(),
            EventKind::Enable => {
                let Some(ip) = e.ip else { return };
                if self.stack.is_empty() {
                    return;
                }
                if let Some(k) = self.resumed(ip) {
                    self.pop_to(k);
                    return;
                }
                let (func, known, _) = self.f.at(ip);
                let top = self.stack.last().map(|f| f.func);
                if known && top != Some(func) {
                    self.st.async_entries += 1;
                    self.push(func, e.disable, true);
                }
            }
            _ => {}
        }
    }

    /// Walk the rows `range` of a batch; `seq` is the first one's, `prev_cyc` the last
    /// `cycles` value seen.
    pub(super) fn batch(
        &mut self,
        rows: &Rows,
        range: std::ops::Range<usize>,
        events: &[Ev],
        seq: &mut u64,
        prev_cyc: &mut Option<u64>,
    ) {
        // Validity looked up once per batch, not through `Array::is_null` per row.
        let valid =
            |a: &PrimitiveArray<UInt64Type>, i: usize| a.nulls().is_none_or(|n| n.is_valid(i));
        let tvalues = rows.target.values();
        let tnull = rows.target.null_count() > 0;
        let mut evs = events.iter().copied().peekable();
        let mut pending = std::mem::take(&mut self.pending);
        self.st.rows += range.len() as u64;
        for i in range {
            while let Some(e) = evs.next_if(|e| e.seq <= *seq) {
                self.event(e);
            }
            let mut dcyc = 0;
            if let Some(c) = &rows.cycles {
                if valid(c, i) {
                    let v = c.values()[i];
                    if let Some(p) = *prev_cyc {
                        dcyc = v.saturating_sub(p);
                    }
                    *prev_cyc = Some(v);
                    self.st.has_cycles = true;
                }
            }
            if let Some(t) = &rows.tsc {
                if valid(t, i) {
                    self.tsc = Some(t.values()[i]);
                }
            }
            let tg = if tnull && !valid(&rows.target, i) {
                None
            } else {
                Some(tvalues[i])
            };
            let ip = rows.ip[i];
            let (func, known, _) = self.f.at(ip);
            let branch = ValueBranch { ip, target: tg };
            let (kind, insns) = (rows.kinds[i], rows.insns[i]);
            self.row(&mut pending, (func, known), kind, insns, dcyc, branch);
            *seq += 1;
        }
        self.pending = pending;
    }

    /// Walk one row group read as dictionary keys: each distinct `ip` and `target` is
    /// named once, and a row finds its functions by its keys.
    pub(super) fn keyed_batch(&mut self, rows: &KeyedRows, events: &[Ev], seq: &mut u64) {
        let (mut ip_at, mut ip_ret, mut target_at) = (
            std::mem::take(&mut self.ip_at),
            std::mem::take(&mut self.ip_ret),
            std::mem::take(&mut self.target_at),
        );
        ip_at.clear();
        ip_ret.clear();
        for (i, &a) in rows.ip.values.iter().enumerate() {
            if let Some(&next) = rows.ip.values.get(i + 8) {
                self.f.prefetch(next);
            }
            let Named {
                at: (func, known, _),
                len,
            } = self.f.named(a);
            ip_at.push(if known { func | KNOWN } else { func });
            ip_ret.push(Functions::after(a, len));
        }
        // Named when the row group comes: naming when a row first asks (most targets are
        // those of conditional branches, never asked) took longer.
        target_at.clear();
        let tv = &rows.target.values;
        target_at.extend(tv.iter().enumerate().map(|(i, &a)| {
            if let Some(&next) = tv.get(i + 8) {
                self.f.prefetch(next);
            }
            self.f.at(a)
        }));
        let mut evs = events.iter().copied().peekable();
        let (first, n) = (*seq, rows.len());
        // A local, so the compiler keeps it in registers: in `self`, its add per row was a
        // load and a store, each row's waiting for the last's.
        let mut pending = std::mem::take(&mut self.pending);
        let mut i = 0;
        while i < n {
            while let Some(e) = evs.next_if(|e| e.seq <= first + i as u64) {
                self.event(e);
            }
            // The rows before the next event's, without a look at the events per row.
            let stop = evs
                .peek()
                .map_or(n, |e| (e.seq - first).min(n as u64) as usize);
            // Slices zipped: no bounds check per row and column.
            let run = (rows.ip.keys[i..stop].iter())
                .zip(&rows.target.keys[i..stop])
                .zip(&rows.kind.keys[i..stop])
                .zip(&rows.insns.keys[i..stop]);
            for (((&k, &target_key), &kind), &insns) in run {
                let k = k as usize;
                // A null key (the only one past the values) gives u8::MAX, or 0.
                let kind = rows.codes.get(kind as usize).copied().unwrap_or(u8::MAX);
                let insns = rows.insns.values.get(insns as usize).copied().unwrap_or(0);
                let branch = KeyedBranch {
                    rows,
                    ip_key: k,
                    target_key,
                    target_at: &target_at,
                    ip_ret: &ip_ret,
                };
                let at = ip_at[k];
                let func = (at & !KNOWN, at & KNOWN != 0);
                self.row(&mut pending, func, kind, insns, 0, branch);
            }
            i = stop;
        }
        self.pending = pending;
        *seq = first + n as u64;
        self.st.rows += n as u64;
        self.st.rows_by_keys += n as u64;
        (self.ip_at, self.ip_ret, self.target_at) = (ip_at, ip_ret, target_at);
    }

    /// One row: its `ip`'s function (id, known symbol), kind, instructions and cycles;
    /// `branch` says the rest when the kind of branch needs it. `pending` is the batch's
    /// copy of `self.pending`.
    #[inline(always)]
    pub(super) fn row(
        &mut self,
        pending: &mut Pending,
        (func, known): (u32, bool),
        kind: u8,
        insns: u32,
        dcyc: u64,
        mut branch: impl Branch<'s>,
    ) {
        // Sync the leaf with the row's ip.
        match self.stack.last() {
            None => self.push(func, 0, false),
            Some(top) if known && top.func != func => self.replace_top(func),
            _ => {}
        }
        // Without a frame (cannot happen: MAX_DEPTH > 0) the root takes the weight.
        let n = self.stack.last().map_or(0, |top| top.node);
        if n != pending.node {
            self.add(std::mem::take(pending));
            pending.node = n;
        }
        pending.instructions += insns as u64;
        pending.cycles += dcyc;
        // A branch whose target is not traced changes no stack.
        if !branch.has_target() {
            return;
        }
        const CALL: u8 = BranchKind::Call as u8;
        const CALL_IND: u8 = BranchKind::CallInd as u8;
        const RET: u8 = BranchKind::Ret as u8;
        const JMP: u8 = BranchKind::Jmp as u8;
        const JMP_IND: u8 = BranchKind::JmpInd as u8;
        const FAR: u8 = BranchKind::Far as u8;
        const SYSCALL: u8 = BranchKind::Syscall as u8;
        match kind {
            CALL | CALL_IND => {
                let ret = branch.return_address(self.f);
                let (tf, _, _) = branch.target_at(self.f);
                self.push(tf, ret, false);
            }
            RET => {
                let target = branch.target();
                let found = if target != 0 && self.rets.may_hold(target) {
                    self.stack.iter().rposition(|f| f.ret == target)
                } else {
                    None
                };
                match found {
                    Some(k) => self.pop_to(k),
                    None => {
                        self.st.mismatched_returns += 1;
                        self.pop_to(self.stack.len().saturating_sub(1));
                    }
                }
            }
            JMP | JMP_IND => {
                let (tf, known, entry) = branch.target_at(self.f);
                let top = self.stack.last().map(|f| f.func);
                if !known || top == Some(tf) {
                    return;
                }
                if entry {
                    self.replace_top(tf);
                } else if let Some(k) = self.stack.iter().rposition(|f| f.func == tf) {
                    self.st.longjmps += 1;
                    self.pop_to(k + 1);
                } else {
                    self.replace_top(tf);
                }
            }
            FAR | SYSCALL => {
                let (ip, target) = (branch.ip(), branch.target());
                if resumes(ip, target) {
                    return;
                }
                if let Some(k) = self.resumed(target) {
                    self.pop_to(k);
                    return;
                }
                let (tf, _, _) = branch.target_at(self.f);
                self.st.async_entries += 1;
                self.push(tf, ip, true);
            }
            _ => {}
        }
    }
}
