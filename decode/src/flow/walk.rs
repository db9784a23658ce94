//! The general walk while tracing: what the next item says at each instruction
//! boundary, a block at a time, and each branch class's packet.

use tracemill_schemas::{BranchKind, EventKind};

use super::output::went_to;
use super::{Below, Item, NoTarget, Role, Stop, Walker};
use crate::block::BlockEnd;
use crate::front::{Bound, FarRule, Format, Front};
use crate::insn::{binds_to, BindsTo, InsnClass};
use crate::sink::RowSink;

impl<'a, 'c, F: Format, S: RowSink> Walker<'a, 'c, F, S> {
    /// Walk instructions while tracing.
    pub(super) fn walk(&mut self) -> Option<Stop> {
        loop {
            if self.stuck {
                self.stuck = false;
                self.stuck_in_cycle();
                return None;
            }
            if let Some(s) = self.at_target() {
                return Some(s);
            }
            if self.full() {
                return Some(Stop::Split);
            }
            let queued = self.st.tnt.is_empty() && self.tnt_for_cond();
            if queued && self.full_at_fresh_tnt() {
                return Some(Stop::Split);
            }
            // (A TNT just queued is not empty.)
            if self.st.tnt.is_empty() {
                // Nothing queued: the next flow item says what happens next.
                match self.peek() {
                    Item::Tnt { .. } | Item::Tip { .. } | Item::FupNext | Item::NoneNear => {}
                    Item::End => return Some(Stop::End),
                    // A TIP or TNT cut short: the walk goes on to the branch that would
                    // take it, which stops there (`inconsistent`, with this error).
                    Item::Error { off, e } if self.front.cut_before_branch(off, &e) => {}
                    Item::Error { off, e } => {
                        self.consume();
                        self.gap(off, e.to_string());
                        return None;
                    }
                    Item::Pge { .. } | Item::BuffOvf { .. } | Item::TraceStop { .. } => {
                        // Apply at once: tracing stopped, overflowed or restarted here.
                        self.close_block();
                        return self.idle();
                    }
                    Item::Far {
                        ip: Some(x),
                        off,
                        tip,
                    } => {
                        if x == self.st.ip && !self.far_ahead(x) {
                            // An asynchronous far transfer (interrupt, exception) before
                            // the instruction at X.
                            self.consume();
                            match tip {
                                Some((Some(t), _)) => {
                                    self.event(off, EventKind::Interrupt, Some(x), went_to(tip));
                                    self.close_block();
                                    self.st.ip = t;
                                    self.enter_block(t);
                                    self.decided(off);
                                    self.st.after_branch = false;
                                    continue;
                                }
                                _ => {
                                    self.event(off, EventKind::Interrupt, Some(x), String::new());
                                    self.gap(off, "FUP.FAR without a TIP".to_string());
                                    return None;
                                }
                            }
                        }
                    }
                    Item::Pgd {
                        ip: Some(x),
                        off,
                        tip,
                    } => {
                        if x == self.st.ip && !self.far_ahead(x) {
                            if self.skd022(x, off, tip) {
                                continue;
                            }
                            self.consume();
                            self.close_block();
                            self.event(off, EventKind::Disable, Some(x), went_to(tip));
                            self.decided(off);
                            self.disabled_at(Some(x));
                            return None;
                        }
                        if self.st.after_branch && self.rules.far == FarRule::FupAndTip {
                            // If the walk cannot reach X, the PGD may name the sequential
                            // NLIP of this branch (a jump out of the region): remember it.
                            self.alt_pgd = Some((self.rows.len(), self.st.prev_nlip));
                        }
                    }
                    Item::SyncPgd { ip: Some(x), off } => {
                        if x == self.st.ip {
                            // Tracing stopped on reaching X (a direct branch out of the
                            // region, SDM 36.4.2.5).
                            self.consume();
                            self.close_block();
                            self.event(off, EventKind::Disable, Some(x), String::new());
                            self.decided(off);
                            self.disabled_at(Some(x));
                            return None;
                        }
                    }
                    // Binds to the next branch that needs trace (below).
                    Item::SyncPgd { ip: None, .. } => {}
                    Item::Status {
                        ip: Some(x),
                        bits,
                        off,
                    } => {
                        if x == self.st.ip {
                            // A PSB+ while tracing: the walk is where it says.
                            self.consume();
                            if let (FarRule::TipOnly, Some(b)) = (self.rules.far, bits) {
                                if b != self.st.bits {
                                    // Intel PT: its MODE.EXEC disagrees with the walk's
                                    // mode (libipt: a bad status update, and no resync at
                                    // this PSB+): the walk went wrong before it.
                                    self.close_block();
                                    self.gap(
                                        off,
                                        format!(
                                            "a PSB+ disagrees with the walk's execution mode \
                                             at {x:#x}"
                                        ),
                                    );
                                    return None;
                                }
                            }
                            // Its events follow the rows walked since it was read: they
                            // retired before the PSB went out.
                            if let Some(k) = self.status_events.take() {
                                let n = self.rows.len() as u64;
                                for e in self.facts.events.iter_mut().skip(k) {
                                    e.seq = n;
                                }
                            }
                            if let Some(b) = bits {
                                self.set_bits(b);
                            }
                            // Its FUP may name an instruction inside a block (SDM
                            // 36.4.2.17: the IP when the PSB was sent). A chunk's body
                            // starting at this PSB+ cannot know where that block began,
                            // so every decode splits the block here: the instructions
                            // before X are a partial block (none at a block's entry).
                            self.close_block();
                            self.enter_block(x);
                            self.decided(off);
                            continue;
                        }
                    }
                    Item::Status { ip: None, off, .. } => {
                        self.consume();
                        self.close_block();
                        self.gap(off, "a PSB+ says tracing is off while tracing".to_string());
                        return None;
                    }
                    Item::At {
                        ip: Some(x),
                        off,
                        what,
                    } => {
                        if x == self.st.ip {
                            self.consume();
                            self.bound_event(Some(x), off, what);
                            continue;
                        }
                        if self.bdm64(x, what) {
                            continue;
                        }
                    }
                    Item::At {
                        ip: None,
                        off,
                        what,
                    } => {
                        // One that binds to the next instruction of a kind waits for the
                        // walk to find it (below); the others apply where the walk is.
                        if what.binds_to().is_none() {
                            let what = match what {
                                Bound::Trig {
                                    trbv,
                                    mult,
                                    icnt: Some(n),
                                } => Bound::Trig {
                                    trbv,
                                    mult,
                                    icnt: Some(self.st.trig.trig(n)),
                                },
                                w => w,
                            };
                            self.consume();
                            self.bound_event(None, off, what);
                            continue;
                        }
                    }
                    Item::Far { ip: None, .. } | Item::Pgd { ip: None, .. } => {
                        self.inconsistent("a FUP whose IP is unknown");
                        return None;
                    }
                }
            }
            if !self.st.tnt.is_empty()
                && if self.memo {
                    self.memo_walk()
                } else {
                    self.fast_walk()
                }
            {
                continue;
            }
            self.st.after_branch = false;
            self.st.resumed_at = None;
            // Walk one block: the successor link of the last one, or a lookup.
            let bi = match self.hint {
                Some((ip, bi)) if ip == self.st.ip => bi,
                _ => self
                    .cache
                    .index(self.images, self.st.ip, self.key(), self.st.bits),
            };
            self.hint = None;
            let h = self.cache.hot(bi);
            let (start, n, end, class, last_ip, target, next) = (
                self.st.ip, h.insns, h.end, h.class, h.last_ip, h.target, h.next,
            );
            // An item pending at an address inside this block applies there.
            if self.st.tnt.is_empty() {
                if let Some(x) = self.la.and_then(|it| it.applies_at()) {
                    if x > start && x <= last_ip {
                        let b = self.cache.block(bi);
                        if let Some(k) = b.index_of(x) {
                            // x > start: at least one instruction ran before it.
                            let before: u64 =
                                b.lens[..k as usize - 1].iter().map(|&l| l as u64).sum();
                            self.st.last_insn = start + before;
                            self.st.open_insns += k;
                            self.st.ip = x;
                            continue;
                        }
                    }
                }
            }
            // An item that binds to the next instruction of a kind (a PIP to a MOV CR3,
            // a PTW to a PTWRITE, a TIP.PGD without IP to a MOV CR3): the first such
            // instruction in this block, short of its branch, is where it applies.
            if self.st.tnt.is_empty() {
                if let Some(to) = self.la.and_then(|it| it.binds_to()) {
                    if let Some((k, x, len)) = self.binding_insn(bi, to) {
                        return self.bound_at_insn(k, x, len);
                    }
                    // Walked on through this block to find it.
                    self.st.trig.walked(n);
                }
            }
            match end {
                BlockEnd::Branch => {}
                BlockEnd::Split => {
                    self.st.open_insns += n;
                    self.st.last_insn = last_ip;
                    self.st.ip = next;
                    self.stuck = self.moved_without_packet(next);
                    continue;
                }
                BlockEnd::Ambiguous if self.role == Role::Body => return Some(Stop::Failed),
                BlockEnd::NoImage | BlockEnd::Invalid | BlockEnd::Ambiguous => {
                    if self.st.tnt.is_empty() && self.pgd_second_reading() {
                        return None;
                    }
                    self.st.open_insns += n;
                    let why = match end {
                        BlockEnd::NoImage => "no code image covers",
                        BlockEnd::Invalid => "undecodable instruction",
                        _ => "several address spaces map (CR3 unknown)",
                    };
                    // Where the decode stands: at a packet read ahead, if any (it is
                    // still to be used, e.g. as the resume point), else the reader.
                    let off = self.la_offset().unwrap_or(self.front.pos());
                    self.st.ip = next;
                    if end == BlockEnd::NoImage && self.rules.far == FarRule::TipOnly {
                        // Intel PT: the direct branches walked up to here ran (the code
                        // says so); only what follows the address without code is lost
                        // (libipt lists them too).
                        self.tail_start = self.rows.len();
                    }
                    self.gap(off, format!("{why} {next:#x}"));
                    return None;
                }
            }
            self.st.open_insns += n;
            self.st.prev_nlip = next;
            // PIP and VMCS packets waiting bind to a far branch (36.4.2.7, 36.4.2.15): held
            // for its row, they come before its TIP.
            if self.st.tnt.is_empty() && class.is_far() {
                self.hold_for_branch(last_ip);
            }
            // A TIP.PGD waiting binds to this branch if it needs trace (SKL014: or, without
            // IP, if it is a direct JMP or CALL out of the IP ranges).
            if self.st.tnt.is_empty() && (class.needs_trace() || self.rules.errata.skl014.is_some())
            {
                if let Some(Item::SyncPgd { ip, off }) = self.la {
                    let direct = !class.needs_trace();
                    if !direct || (ip.is_none() && self.skl014_binds(class, target)) {
                        self.consume();
                        let kind = class.branch_kind().expect("a branch");
                        let taken = class != InsnClass::Cond || ip == Some(target);
                        // A direct branch's target is known, though not traced.
                        let to = if direct { Some(target) } else { ip };
                        self.row(last_ip, to, kind, taken, off);
                        self.decided(off);
                        if class.is_near_call() {
                            self.st.ret.call(next, direct && target == next);
                        }
                        self.emit_held();
                        self.event(off, EventKind::Disable, ip, String::new());
                        // libipt's IP after the branch: a direct one's target, else the
                        // next instruction.
                        let taken_to = if taken { target } else { next };
                        self.disabled_at(Some(if direct { taken_to } else { next }));
                        return None;
                    }
                }
            }
            match class {
                InsnClass::Cond => {
                    if let Err(stop) = self.need_bit() {
                        if stop.is_some() {
                            self.st.open_insns -= n;
                            return stop;
                        }
                        self.st.open_insns -= n;
                        self.inconsistent("expected a TNT bit for the conditional branch");
                        return None;
                    }
                    let taken = self.st.tnt.pop().unwrap_or(false);
                    let to = if taken { target } else { next };
                    let off = self.st.tnt_off;
                    self.row(last_ip, Some(to), BranchKind::Cond, taken, off);
                    self.decided(off);
                    self.st.ip = to;
                    self.link(bi, taken as usize, to);
                }
                InsnClass::Jmp => {
                    let off = self.st.decision;
                    self.row(last_ip, Some(target), BranchKind::Jmp, true, off);
                    self.st.ip = target;
                    self.link(bi, 1, target);
                    self.stuck = self.moved_without_packet(target);
                }
                InsnClass::Call => {
                    let off = self.st.decision;
                    self.row(last_ip, Some(target), BranchKind::Call, true, off);
                    self.st.ret.call(next, target == next);
                    self.st.ip = target;
                    self.link(bi, 1, target);
                    self.stuck = self.moved_without_packet(target);
                }
                InsnClass::Ret => {
                    // Compressed (a taken bit) when a bit is queued or a TNT comes next.
                    let compressed = match self.need_bit() {
                        Ok(()) => true,
                        Err(Some(stop)) => {
                            self.st.open_insns -= n;
                            return Some(stop);
                        }
                        Err(None) => false,
                    };
                    if compressed {
                        let bit = self.st.tnt.pop().unwrap_or(false);
                        let off = self.st.tnt_off;
                        if !bit {
                            self.st.open_insns -= n;
                            self.gap(
                                off,
                                format!("not-taken TNT bit for the RET at {last_ip:#x}"),
                            );
                            return None;
                        }
                        match self.st.ret.ret() {
                            Ok(to) => {
                                self.push_row(last_ip, Some(to), BranchKind::Ret, true, true, off);
                                self.decided(off);
                                self.st.ip = to;
                            }
                            Err(NoTarget::Below(Below::FromChunkStart))
                                if self.role == Role::Body =>
                            {
                                // The return address is in an earlier chunk: this body
                                // started too early. Start over after this TNT packet.
                                self.restart();
                                return None;
                            }
                            Err(_) => {
                                self.st.open_insns -= n;
                                self.gap(
                                    off,
                                    format!(
                                        "compressed RET at {last_ip:#x}, but the last call is unknown"
                                    ),
                                );
                                return None;
                            }
                        }
                    } else {
                        match self.peek() {
                            Item::Tip {
                                ip: Some(to), off, ..
                            } => {
                                self.consume();
                                self.row(last_ip, Some(to), BranchKind::Ret, true, off);
                                self.decided(off);
                                self.st.ip = to;
                            }
                            _ => {
                                self.st.open_insns -= n;
                                self.inconsistent("expected a TIP or TNT bit for the RET");
                                return None;
                            }
                        }
                    }
                }
                // Far transfers under RTIT's rule: FUP.FAR + TIP, or FUP.PGD.
                InsnClass::Far | InsnClass::Syscall if self.rules.far == FarRule::FupAndTip => {
                    let kind = class.branch_kind().expect("far");
                    if !self.st.tnt.is_empty() {
                        self.st.open_insns -= n;
                        let off = self.st.tnt_off;
                        self.gap(
                            off,
                            format!("TNT bits left at the far transfer at {last_ip:#x}"),
                        );
                        return None;
                    }
                    // The FUP names the far transfer's NLIP; E1: or an address inside it.
                    let ours = |x: u64| x == next || (x > last_ip && x < next);
                    match self.peek() {
                        Item::Far {
                            ip: Some(x),
                            tip: Some((Some(to), toff)),
                            ..
                        } if ours(x) => {
                            self.consume();
                            self.row(last_ip, Some(to), kind, true, toff);
                            self.decided(toff);
                            self.st.ip = to;
                        }
                        Item::Pgd {
                            ip: Some(x),
                            off,
                            tip,
                        } if ours(x) => {
                            self.consume();
                            let to = tip.and_then(|t| t.0);
                            self.row(last_ip, to, kind, true, off);
                            self.decided(off);
                            self.event(off, EventKind::Disable, Some(x), String::new());
                            self.disabled_at(Some(x));
                            return None;
                        }
                        Item::End => {
                            self.st.open_insns -= n;
                            return Some(Stop::End);
                        }
                        _ => {
                            self.st.open_insns -= n;
                            self.inconsistent(
                                "expected FUP.FAR+TIP or FUP.PGD for the far transfer",
                            );
                            return None;
                        }
                    }
                }
                // Indirect branches, and far transfers under Intel PT's rule: the TIP says
                // where they went.
                InsnClass::JmpInd | InsnClass::CallInd | InsnClass::Far | InsnClass::Syscall => {
                    let kind = class.branch_kind().expect("a branch");
                    let what = if class.is_indirect() {
                        "indirect branch"
                    } else {
                        "far transfer"
                    };
                    let Ok(it) = self.tip_for_indirect() else {
                        self.st.open_insns -= n;
                        let off = self.st.tnt_off;
                        self.gap(off, format!("TNT bits left at the {what} at {last_ip:#x}"));
                        return None;
                    };
                    match it {
                        Item::Tip {
                            ip: Some(to), off, ..
                        } => {
                            self.consume();
                            self.row(last_ip, Some(to), kind, true, off);
                            self.decided(off);
                            if class == InsnClass::CallInd {
                                self.st.ret.call(next, false);
                            }
                            self.st.ip = to;
                            self.emit_held();
                        }
                        Item::End => {
                            self.st.open_insns -= n;
                            if self.front.ends_at_stream_end() {
                                // No TIP will come: the events bound to the branch are
                                // reported without its row. (At a chunk's end they wait
                                // in the state for the next walker, which reads the TIP.)
                                self.emit_held();
                            }
                            return Some(Stop::End);
                        }
                        _ => {
                            self.st.open_insns -= n;
                            self.inconsistent(&format!("expected a TIP for the {what}"));
                            return None;
                        }
                    }
                }
                InsnClass::Other => unreachable!("blocks end with a branch"),
            }
            self.st.after_branch = true;
        }
    }

    /// Right after tracing resumed at `x`, a FUP.FAR/PGD naming `x` is either an interrupt
    /// before any instruction ran, or the far transfer that ends a loop back here with no
    /// packet on the way (a syscall whose NLIP is `x`, as in `_exit`'s `syscall; jmp`
    /// loop). The second reading wins when the code from `x` reaches such a far transfer
    /// through direct branches only. Only where far branches send a FUP at their NLIP
    /// ([`FarRule::FupAndTip`]); elsewhere a FUP names where an event struck.
    pub(super) fn far_ahead(&mut self, x: u64) -> bool {
        if self.st.resumed_at != Some(x) || self.rules.far != FarRule::FupAndTip {
            return false;
        }
        let mut ip = x;
        for _ in 0..64 {
            let bi = self.cache.index(self.images, ip, self.key(), self.st.bits);
            let b = self.cache.block(bi);
            if b.end != BlockEnd::Branch {
                return false;
            }
            match b.class {
                InsnClass::Far | InsnClass::Syscall => {
                    return b.next == x || (x > b.last_ip && x < b.next);
                }
                InsnClass::Jmp | InsnClass::Call => ip = b.target,
                _ => return false,
            }
            if ip == x {
                return false;
            }
        }
        false
    }

    /// The first instruction of block `bi`, short of its branch, that `to` binds to: its
    /// index in the block, address and length. Decoded again here (rarely: only while
    /// such an item waits), so blocks carry nothing for it.
    fn binding_insn(&self, bi: u32, to: BindsTo) -> Option<(u32, u64, u8)> {
        let b = self.cache.block(bi);
        let before_branch = match b.end {
            BlockEnd::Branch => b.lens.len().saturating_sub(1),
            _ => b.lens.len(),
        };
        let mut x = b.start;
        for (k, &len) in b.lens[..before_branch].iter().enumerate() {
            let bytes = self.images.code_at(x, self.key()).ok()?;
            if binds_to(bytes, x, self.st.bits, to) {
                return Some((k as u32, x, len));
            }
            x = x.wrapping_add(len as u64);
        }
        None
    }

    /// The item read ahead applies at the instruction at `x` (the `k`th of the block the
    /// walk stands at, `len` bytes), which it binds to: walk through it, then apply.
    fn bound_at_insn(&mut self, k: u32, x: u64, len: u8) -> Option<Stop> {
        let it = self.la?;
        self.st.open_insns += k + 1;
        self.st.last_insn = x;
        self.st.ip = x.wrapping_add(len as u64);
        self.consume();
        match it {
            Item::At { off, what, .. } => {
                self.st.trig.walked_to_event(k + 1);
                self.bound_event(Some(x), off, what)
            }
            Item::SyncPgd { off, .. } => {
                // Tracing stopped with the MOV CR3 (its new CR3 is not traced): the
                // instruction after it did not run traced.
                let after = self.st.ip;
                self.close_block();
                self.event(off, EventKind::Disable, Some(after), String::new());
                self.decided(off);
                self.disabled_at(Some(after));
            }
            _ => {}
        }
        None
    }

    /// At the far branch at `at` (the block's last instruction): the PIP and VMCS items
    /// read ahead bind to it, at most one of each. They are held ([`FlowState::held`])
    /// and reported after its row; the TIP after them says where it went.
    ///
    /// [`FlowState::held`]: super::FlowState::held
    fn hold_for_branch(&mut self, at: u64) {
        while let Some(Item::At {
            ip: None,
            off,
            what,
        }) = self.la
        {
            match what.binds_to() {
                Some(to) if to.far_branch() && self.st.held.push(at, off, what) => {
                    self.consume();
                    self.peek();
                }
                _ => break,
            }
        }
    }

    /// The walk went to `to` by a direct jump, call or block split, consuming nothing;
    /// true when that proves it is going round a cycle (see [`LoopGuard`]).
    #[inline]
    pub(super) fn moved_without_packet(&mut self, to: u64) -> bool {
        self.spin.step(to, self.front.pos(), self.st.tnt)
    }

    /// Remember the block that follows block `bi` on side `which` (0: fall-through,
    /// 1: direct target), which starts at `to`.
    #[inline]
    pub(super) fn link(&mut self, bi: u32, which: usize, to: u64) {
        let s = self.cache.successor(self.images, bi, which, self.key());
        self.hint = Some((to, s));
    }
}
