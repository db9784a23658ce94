//! The hot loops: while TNT bits are queued, blocks ending in conditional branches and
//! direct jumps and calls are walked without looking at packets, a block at a time
//! ([`Walker::fast_walk`]) or by memoized segments ([`Walker::memo_walk`]).

use tracemill_schemas::BranchKind;

use super::Walker;
use crate::block::memo::{self, Replay, KEY_BITS};
use crate::block::BlockEnd;
use crate::front::{Format, Front};
use crate::insn::InsnClass;
use crate::sink::RowSink;

impl<'a, 'c, F: Format, S: RowSink> Walker<'a, 'c, F, S> {
    /// The hot loop: while TNT bits are queued, walk blocks that end in a conditional
    /// branch, a direct jump or call, without looking at packets (no asynchronous event
    /// can apply while bits are queued, and a stitch cannot meet its target). Returns
    /// whether it walked anything; anything else goes to the general walk.
    #[inline]
    pub(super) fn fast_walk(&mut self) -> bool {
        let mut walked = false;
        while !self.st.tnt.is_empty() {
            let bi = match self.hint {
                Some((ip, bi)) if ip == self.st.ip => bi,
                _ => self
                    .cache
                    .index(self.images, self.st.ip, self.key(), self.st.bits),
            };
            let h = self.cache.hot(bi);
            if h.end != BlockEnd::Branch {
                self.hint = Some((self.st.ip, bi));
                break;
            }
            let (which, to, kind, taken, off) = match h.class {
                InsnClass::Cond => {
                    let taken = self.st.tnt.pop().unwrap_or(false);
                    let to = if taken { h.target } else { h.next };
                    let off = self.st.tnt_off;
                    self.st.decision = off;
                    (taken as usize, to, BranchKind::Cond, taken, off)
                }
                InsnClass::Jmp => (1, h.target, BranchKind::Jmp, true, self.st.decision),
                InsnClass::Call => {
                    self.st.ret.call(h.next, h.target == h.next);
                    (1, h.target, BranchKind::Call, true, self.st.decision)
                }
                _ => {
                    self.hint = Some((self.st.ip, bi));
                    break;
                }
            };
            self.st.open_insns += h.insns;
            self.row(h.last_ip, Some(to), kind, taken, off);
            if kind == BranchKind::Cond {
                self.tail_start = self.rows.len();
                self.alt_pgd = None;
            }
            self.st.ip = to;
            self.st.prev_nlip = h.next;
            self.st.after_branch = true;
            self.st.resumed_at = None;
            let s = self.cache.successor(self.images, bi, which, self.key());
            self.hint = Some((to, s));
            walked = true;
            if kind != BranchKind::Cond && self.moved_without_packet(to) {
                self.stuck = true;
                break;
            }
        }
        walked
    }

    /// (Memo walk) Nothing queued or read ahead, the walk is at a block ending in a
    /// conditional branch, and the next packet is a plain TNT: queue its bits, for
    /// [`Walker::memo_walk`] to walk from this block. The step walk reads the TNT as the
    /// next item (`peek`), finds nothing applies at the loop's head, walks the block and
    /// consumes the item for the branch's bit (`need_bit`): the same, since nothing but
    /// the branch depends on when the TNT is consumed. Not in a stitch, which checks its
    /// target between the first branch and the rest.
    #[inline]
    pub(super) fn tnt_for_cond(&mut self) -> bool {
        if !self.memo
            || self.la.is_some()
            || self.pending.is_some()
            || self.target.is_some()
            || self.facts.looking_ahead
        {
            return false;
        }
        let bi = match self.hint {
            Some((ip, bi)) if ip == self.st.ip => bi,
            _ => return false,
        };
        if self.cond_next != Some(bi) {
            let h = self.cache.hot(bi);
            if h.end != BlockEnd::Branch || h.class != InsnClass::Cond {
                return false;
            }
        }
        let Some((tnt, off)) = self.front.try_tnt(&mut self.st.fe) else {
            return false;
        };
        // What reading it as the next item (`next_item`) and consuming it do.
        self.facts.seq = self.rows.len() as u64;
        self.facts.flush_deferred(u64::MAX);
        self.consume();
        self.st.tnt.push(tnt);
        self.st.tnt_off = off;
        true
    }

    /// The hot loop by memoized segments ([`crate::block::memo`]): what [`Walker::fast_walk`]
    /// does, a segment at a time. Each segment's effects are applied as the step walk
    /// would apply them row by row (the module doc says why that is exact); a segment in
    /// which the loop guard would fire is left to the step walk.
    #[inline]
    pub(super) fn memo_walk(&mut self) -> bool {
        let mut walked = false;
        while !self.st.tnt.is_empty() {
            let bi = match self.hint {
                Some((ip, bi)) if ip == self.st.ip => bi,
                _ => self
                    .cache
                    .index(self.images, self.st.ip, self.key(), self.st.bits),
            };
            if !self.cache.keyed_for(self.images, bi, self.key()) {
                // (Not met: the walker drops its link on a CR3 change.) The step walk
                // looks the successors up itself.
                self.hint = Some((self.st.ip, bi));
                return self.fast_walk() || walked;
            }
            let (bits, n) = self.st.tnt.peek(KEY_BITS);
            let si = memo::segment(
                self.cache,
                self.images,
                bi,
                self.st.ip,
                bits as u8,
                n,
                self.key(),
            );
            let seg = self.cache.memo.seg(si);
            if seg.len == 0 {
                self.hint = Some((self.st.ip, bi));
                break;
            }
            let rows = self.cache.memo.rows(&seg);
            let mut spin = self.spin;
            if seg.has_direct {
                // The loop guard sees each direct jump and call with the queue as it was
                // then; if it fires, the step walk stops and reports where it does.
                let pos = self.front.pos();
                let tnt = self.st.tnt;
                let fires = rows.iter().any(|m| {
                    m.kind != BranchKind::Cond && spin.step(m.target, pos, tnt.after(m.used))
                });
                if fires {
                    self.hint = Some((self.st.ip, bi));
                    return self.fast_walk() || walked;
                }
            }
            self.spin = spin;
            if !self.st.partials.is_empty() {
                // Partial blocks since the last row: the first row carries them.
                for p in self.st.partials.iter() {
                    self.rows.partial(p);
                }
                self.st.partials.clear();
            }
            let has_cond = seg.end_cond > 0;
            let first = self.rows.len();
            self.rows.replay(&Replay {
                seg: si,
                rows,
                cols: self.cache.memo.columns(&seg),
                open: self.st.open_insns,
                block_base: self.st.block_base,
                block_start: self.st.block_start,
                insns: seg.insns,
                cr3: self.st.cr3_row,
                off_before: self.st.decision,
                off_after: self.st.tnt_off,
                first_cond: if has_cond {
                    seg.first_cond as usize
                } else {
                    rows.len()
                },
            });
            if self.st.in_tx {
                // (No packet is read inside a segment: the transaction state holds.)
                self.rows.in_tx_from(first);
            }
            if seg.has_call {
                for m in rows.iter().filter(|m| m.kind == BranchKind::Call) {
                    self.st.ret.call(m.next, m.target == m.next);
                }
            }
            self.st.tnt = self.st.tnt.after(seg.used);
            if has_cond {
                self.st.decision = self.st.tnt_off;
                self.tail_start = first + seg.end_cond as usize;
                self.alt_pgd = None;
            }
            self.st.open_insns = 0;
            self.st.block_base = 0;
            self.st.block_start = seg.end_ip;
            self.st.ip = seg.end_ip;
            self.st.prev_nlip = seg.last_next;
            self.st.after_branch = true;
            self.st.resumed_at = None;
            self.hint = Some((seg.end_ip, seg.end_block));
            self.cond_next = if seg.cond_next {
                Some(seg.end_block)
            } else {
                None
            };
            walked = true;
            if seg.blocked {
                break;
            }
        }
        walked
    }
}
