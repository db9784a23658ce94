//! Processor errata that change which instruction a packet binds to, applied when the
//! configuration's processor has them ([`crate::front::FlowErrata`], chosen by
//! [`crate::pt::cpu::Errata::for_cpu`] as libipt's `pt_cpu_errata` does). Those that
//! change how packets read (SKD007, SKZ84), how time calibrates (SKL168) or what follows
//! an overflow or a PSB+ (BDM70, SKD010, APL11, APL12) are the Intel PT front end's.

use super::{Item, Walker};
use crate::block::BlockEnd;
use crate::front::{Bound, Format};
use crate::insn::{is_vm_entry, InsnClass};
use crate::sink::RowSink;

/// How many blocks BDM64's check walks looking for the abort's IP (libipt: 256
/// instructions).
pub(super) const BDM64_STEPS: usize = 256;

impl<'a, 'c, F: Format, S: RowSink> Walker<'a, 'c, F, S> {
    /// SKD022: the FUP + TIP.PGD read ahead, whose FUP names `x` (the walk is there), is a
    /// VM entry's own disable when the instruction at `x` is a VMLAUNCH or VMRESUME: the
    /// erratum adds the FUP to the TIP.PGD the entry sends. It is then read ahead as that
    /// TIP.PGD alone, which binds to the entry (a far transfer, which needs trace); true
    /// when so.
    pub(super) fn skd022(&mut self, x: u64, off: u64, tip: Option<(Option<u64>, u64)>) -> bool {
        if !self.rules.errata.skd022 {
            return false;
        }
        let vm_entry = self
            .images
            .code_at(x, self.key())
            .is_ok_and(|b| is_vm_entry(b, x, self.st.bits));
        if !vm_entry {
            return false;
        }
        // The TIP.PGD decides the entry's row; its IP (none, usually) is where it went.
        let (ip, off) = match tip {
            Some((ip, toff)) => (ip, toff),
            None => (None, off),
        };
        self.la = Some(Item::SyncPgd { ip, off });
        true
    }

    /// BDM64: a TSX abort (`what`) bound to `x`, read right after a branch (the walk is
    /// at its target): if the walk cannot reach `x` from there without trace (within
    /// [`BDM64_STEPS`] blocks of straight-line code, direct jumps and calls), the branch's
    /// packet was the erratum's wrong one and the branch went to `x`, where the abort
    /// then applies (libipt assumes the same). True when so: the last row's target is
    /// `x`.
    pub(super) fn bdm64(&mut self, x: u64, what: Bound) -> bool {
        if !self.rules.errata.bdm64
            || !matches!(what, Bound::Tsx { abort: true, .. })
            || !self.st.after_branch
            || self.rows.is_empty()
            || self.reaches(x)
        {
            return false;
        }
        self.rows.set_last_target(x);
        self.st.ip = x;
        self.st.block_start = x;
        self.hint = None;
        true
    }

    /// Whether the walk reaches `x` from where it is without needing trace.
    fn reaches(&mut self, x: u64) -> bool {
        let mut ip = self.st.ip;
        for _ in 0..BDM64_STEPS {
            let bi = self.cache.index(self.images, ip, self.key(), self.st.bits);
            let b = self.cache.block(bi);
            if b.index_of(x).is_some() {
                return true;
            }
            ip = match (b.end, b.class) {
                (BlockEnd::Split, _) => b.next,
                (BlockEnd::Branch, InsnClass::Jmp | InsnClass::Call) => b.target,
                _ => return false,
            };
        }
        false
    }

    /// SKL014: with IP ranges configured, a TIP.PGD without IP read ahead binds to a
    /// direct JMP or CALL (`class`) whose `target` the ranges do not trace.
    #[inline]
    pub(super) fn skl014_binds(&self, class: InsnClass, target: u64) -> bool {
        match self.rules.errata.skl014 {
            Some(r) => matches!(class, InsnClass::Jmp | InsnClass::Call) && !r.traces(target),
            None => false,
        }
    }
}
