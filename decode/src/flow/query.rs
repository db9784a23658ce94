//! What the next packets say: flow items read from the front end, a FUP paired with the
//! TIP after it (a bounded look-ahead, undone when the range ends first), the item read
//! ahead (`la`) or kept for later (`pending`), and the TNT bit or TIP a branch needs.

use tracemill_schemas::EventKind;

use super::{FlowState, Stop, TrigAnchor, Walker, MAX_LOOKAHEAD_BYTES};
use crate::front::{BindsTo, Bits, Bound, Format, Front, FupRole, Raw, TntBits};
use crate::rows::EventRow;
use crate::sink::RowSink;

/// What an [`Item::Error`] is, in error messages.
pub(super) const PACKET_ERROR: &str = "a packet error";

/// One flow item, as the walker uses it: a front end's [`Raw`] item, with a FUP paired
/// with the TIP after it.
#[derive(Clone, Copy, Debug)]
pub(super) enum Item<E> {
    Tnt {
        tnt: TntBits,
        off: u64,
    },
    /// `anchor`: tracing can resume here.
    Tip {
        ip: Option<u64>,
        off: u64,
        anchor: bool,
    },
    /// A far transfer from `ip` (FUP) and the TIP after it (None: the next flow item was
    /// not a TIP).
    Far {
        ip: Option<u64>,
        off: u64,
        tip: Option<(Option<u64>, u64)>,
    },
    /// Tracing stops at `ip` (FUP); a TIP (RTIT) or the TIP.PGD (Intel PT) after it says
    /// where execution went.
    Pgd {
        ip: Option<u64>,
        off: u64,
        tip: Option<(Option<u64>, u64)>,
    },
    /// Tracing stops at the next branch that needs trace, or on reaching `ip` (TIP.PGD).
    SyncPgd {
        ip: Option<u64>,
        off: u64,
    },
    Pge {
        ip: Option<u64>,
        off: u64,
    },
    BuffOvf {
        ip: Option<u64>,
        off: u64,
    },
    TraceStop {
        off: u64,
    },
    /// A PSB+ says tracing is at `ip` (or off), in mode `bits`.
    Status {
        ip: Option<u64>,
        bits: Option<Bits>,
        off: u64,
    },
    /// An event at `ip`, or where the walk is.
    At {
        ip: Option<u64>,
        off: u64,
        what: Bound,
    },
    Error {
        off: u64,
        e: E,
    },
    /// (Look-ahead only) the next flow item is a FUP, left unread.
    FupNext,
    /// (Look-ahead only) no flow item within [`MAX_LOOKAHEAD_BYTES`] of the FUP.
    NoneNear,
    End,
}

impl<E> Item<E> {
    /// The stream offset of the packet this item came from.
    pub(super) fn offset(&self) -> Option<u64> {
        match *self {
            Item::Tnt { off, .. }
            | Item::Tip { off, .. }
            | Item::Far { off, .. }
            | Item::Pgd { off, .. }
            | Item::SyncPgd { off, .. }
            | Item::Pge { off, .. }
            | Item::BuffOvf { off, .. }
            | Item::TraceStop { off }
            | Item::Status { off, .. }
            | Item::At { off, .. }
            | Item::Error { off, .. } => Some(off),
            Item::FupNext | Item::NoneNear | Item::End => None,
        }
    }

    /// What it is, for error messages.
    pub(super) fn name(&self) -> &'static str {
        match self {
            Item::Tnt { .. } => "a TNT packet",
            Item::Tip { .. } => "a TIP",
            Item::Far { .. } => "a FUP.FAR",
            Item::Pgd { .. } => "a FUP.PGD",
            Item::SyncPgd { .. } => "a TIP.PGD",
            Item::Pge { .. } => "an enable",
            Item::BuffOvf { .. } => "an overflow",
            Item::TraceStop { .. } => "TraceSTOP",
            Item::Status { .. } => "a PSB+",
            Item::At { .. } => "an event bound to an IP",
            Item::Error { .. } => PACKET_ERROR,
            Item::FupNext | Item::NoneNear | Item::End => "nothing usable",
        }
    }

    /// An item without IP that binds to the next instruction of a kind: a PIP, VMCS or
    /// PTW (its event is reported after that instruction), a TIP.PGD (tracing stops
    /// after a MOV CR3, or at the next branch that needs trace).
    #[inline]
    pub(super) fn binds_to(&self) -> Option<BindsTo> {
        match *self {
            Item::At { ip: None, what, .. } => what.binds_to(),
            Item::SyncPgd { ip: None, .. } => Some(BindsTo::Cr3Write),
            _ => None,
        }
    }

    /// An item that applies where the walk reaches its IP (`x`): a FUP-led transfer or
    /// disable, a TIP.PGD naming its IP, a PSB+ state, an event bound to an IP.
    pub(super) fn applies_at(&self) -> Option<u64> {
        match *self {
            Item::Far { ip: Some(x), .. }
            | Item::Pgd { ip: Some(x), .. }
            | Item::SyncPgd { ip: Some(x), .. }
            | Item::Status { ip: Some(x), .. }
            | Item::At { ip: Some(x), .. } => Some(x),
            _ => None,
        }
    }
}

pub(super) type ItemOf<'a, F> = Item<<<F as Format>::Front<'a> as Front>::Error>;

impl<'a, 'c, F: Format, S: RowSink> Walker<'a, 'c, F, S> {
    /// Next flow item; what the front end reads on the way goes to `facts`.
    #[inline(always)]
    pub(super) fn next_item(&mut self) -> ItemOf<'a, F> {
        self.facts.seq = self.rows.len() as u64;
        if !self.facts.looking_ahead {
            // The FUP whose look-ahead read them has been applied.
            self.facts.flush_deferred(u64::MAX);
        }
        if let Some(it) = self.pending.take() {
            return it;
        }
        if self.memo && !self.facts.looking_ahead {
            // A plain TNT next (the front end says so, or leaves it to `next`): what
            // `next` would return for it, without the general path's snapshot. (Not while
            // looking ahead: `next` stops at the look-ahead's limit, this would not.)
            if let Some((tnt, off)) = self.front.try_tnt(&mut self.st.fe) {
                return Item::Tnt { tnt, off };
            }
            // A plain TIP likewise: `next_item_read` would select no space (no PSB, no
            // enable read) and set no CR3 (no PIP read) for it.
            if let Some((ip, off)) = self.front.try_tip(&mut self.st.fe) {
                return Item::Tip {
                    ip,
                    off,
                    anchor: true,
                };
            }
        }
        self.next_item_read()
    }

    /// [`Walker::next_item`] from the front end's general path.
    #[inline(never)]
    pub(super) fn next_item_read(&mut self) -> ItemOf<'a, F> {
        // What to restore if this is a FUP whose look-ahead runs off the range: the state
        // before this call (the packets before the FUP are read again, with the same
        // result).
        let before_pos = self.front.pos();
        // The reader's own part (RTIT: whether a CYC is due) lives in the reader until
        // saved: take it now, or an undo would seek back with a stale one and read the
        // packets again differently (a CYC read as a TNT).
        let mut before_fe = self.st.fe.clone();
        self.front.save(&mut before_fe);
        let before_cr3 = self.st.cr3;
        let before_space = self.st.space;
        let (ne, nd, nt) = (
            self.facts.events.len(),
            self.facts.deferred.len(),
            self.facts.timing.len(),
        );
        let raw = self.front.next(&mut self.st.fe, &mut self.facts);
        let read = |v: &[EventRow], from: usize| {
            v[from.min(v.len())..]
                .iter()
                .any(|e| e.kind == EventKind::Psb)
        };
        let lost_at_psb = std::mem::take(&mut self.facts.lost_at_psb);
        if lost_at_psb || read(&self.facts.events, ne) || read(&self.facts.deferred, nd) {
            // Every PSB may start a chunk, whose stitch gets the rows walked before it as
            // final: a gap met after the PSB does not take them back in any decode, even
            // when a FUP's look-ahead read it (fuzz findings `tail-across-psb`,
            // `tail-across-psb-in-look-ahead`).
            self.tail_start = self.rows.len();
            // Nor does an enable after it resume where a disable before it stopped.
            self.st.stopped_at = None;
        }
        if let Some(cr3) = self.facts.cr3.take() {
            self.set_cr3(cr3);
        }
        if let Some(spaces) = self.spaces {
            self.select_space(spaces, &raw, ne, nd);
        }
        match raw {
            Raw::Tnt { tnt, off } => Item::Tnt { tnt, off },
            Raw::Tip { ip, off, anchor } => Item::Tip { ip, off, anchor },
            Raw::TipPgd { ip, off } => Item::SyncPgd { ip, off },
            Raw::Pge { ip, off } => Item::Pge { ip, off },
            Raw::Ovf { ip, off } => Item::BuffOvf { ip, off },
            Raw::Stop { off } => Item::TraceStop { off },
            Raw::Status { ip, bits, off } => {
                // (Read looking for a FUP's TIP, its events wait in `deferred`.)
                self.status_events = (!self.facts.looking_ahead).then_some(ne);
                Item::Status { ip, bits, off }
            }
            Raw::At { ip, off, what } => Item::At { ip, off, what },
            Raw::Error { off, e } => Item::Error { off, e },
            Raw::Limit => Item::NoneNear,
            Raw::End => Item::End,
            Raw::Fup { ip, off, role } => {
                let mut st = self.st.clone();
                st.fe = before_fe;
                st.cr3 = before_cr3;
                st.space = before_space;
                let before = Snapshot {
                    pos: before_pos,
                    st,
                    events: ne,
                    deferred: nd,
                    timing: nt,
                };
                if self.facts.looking_ahead {
                    // Right after another FUP: leave it unread for the next item.
                    self.undo(&before);
                    return Item::FupNext;
                }
                // PIPs read with the FUP came before it; those read looking for its TIP
                // belong to the transfer.
                let cr3_at_fup = self.st.cr3;
                let space_at_fup = self.st.space;
                match self.tip_after(&before, off) {
                    None => Item::End,
                    Some(tip) => {
                        self.hold_cr3(cr3_at_fup);
                        self.hold_space(space_at_fup);
                        match (role, tip) {
                            (FupRole::Pgd, t) => Item::Pgd {
                                ip,
                                off,
                                tip: t.map(|t| (t.0, t.1)),
                            },
                            (FupRole::Async, Some((t, toff, true))) => Item::Pgd {
                                ip,
                                off,
                                tip: Some((t, toff)),
                            },
                            (FupRole::Far | FupRole::Async, t) => Item::Far {
                                ip,
                                off,
                                tip: t.filter(|t| !t.2).map(|t| (t.0, t.1)),
                            },
                        }
                    }
                }
            }
        }
    }

    /// After a FUP at `fup_off`: the TIP (or, last field true, TIP.PGD) that follows, if
    /// the next flow item is one (another item is kept for later). `None` when the range
    /// ends first: everything since `before` is undone, so the FUP is read again by
    /// whoever reads on.
    #[allow(clippy::option_option, clippy::type_complexity)]
    fn tip_after(
        &mut self,
        before: &Snapshot<F::State>,
        fup_off: u64,
    ) -> Option<Option<(Option<u64>, u64, bool)>> {
        self.facts.looking_ahead = true;
        self.facts.limit = fup_off.saturating_add(MAX_LOOKAHEAD_BYTES);
        let next = self.next_item();
        self.facts.looking_ahead = false;
        self.facts.limit = u64::MAX;
        match next {
            Item::Tip { ip, off, .. } => Some(Some((ip, off, false))),
            Item::SyncPgd { ip, off } => Some(Some((ip, off, true))),
            // At the end of the trace nothing follows: no TIP.
            Item::End if self.front.ends_at_stream_end() => Some(None),
            Item::End => {
                self.undo(before);
                None
            }
            // Another FUP, left unread, or nothing near: no TIP.
            Item::FupNext | Item::NoneNear => Some(None),
            other => {
                self.pending = Some(other);
                Some(None)
            }
        }
    }

    /// Go back to `before`: the packets read since are read again by whoever reads on.
    fn undo(&mut self, before: &Snapshot<F::State>) {
        self.facts.events.truncate(before.events);
        self.facts.deferred.truncate(before.deferred);
        self.facts.timing.truncate(before.timing);
        self.st = before.st.clone();
        self.undone += self.front.pos().saturating_sub(before.pos);
        self.front.seek(before.pos, &self.st.fe);
        self.hint = None;
    }

    /// The next item without consuming it. Inlined: its caller then reads the item's
    /// fields where the front end left them; returned through memory, the item was
    /// written in parts and read back whole (a store-forwarding stall).
    #[inline(always)]
    pub(super) fn peek(&mut self) -> ItemOf<'a, F> {
        if let Some(it) = self.la {
            return it;
        }
        let it = self.next_item();
        self.la = Some(it);
        it
    }

    pub(super) fn consume(&mut self) {
        if !matches!(self.la, Some(Item::At { ip: None, .. })) {
            // A flow packet (or an event at an IP the walk stands at) is the anchor of the
            // next TRIG's count.
            self.st.trig = TrigAnchor::default();
        }
        self.la = None;
        if let Some(cr3) = self.cr3_after_fup.take() {
            self.set_cr3(cr3);
        }
        if let Some(space) = self.space_after_fup.take() {
            if self.st.space != space {
                self.st.space = space;
                self.hint = None;
            }
        }
        self.st.cr3_row = self.st.cr3;
    }

    /// Offset of the packet read ahead and not yet used.
    pub(super) fn la_offset(&self) -> Option<u64> {
        self.la.and_then(|it| it.offset())
    }

    /// Make sure a TNT bit is queued, reading the next flow item if needed.
    #[inline]
    pub(super) fn need_bit(&mut self) -> Result<(), Option<Stop>> {
        if !self.st.tnt.is_empty() {
            return Ok(());
        }
        if self.la.is_none() && self.pending.is_none() {
            // The common case, a TNT byte next: skip the general packet path.
            if let Some((tnt, off)) = self.front.try_tnt(&mut self.st.fe) {
                self.st.cr3_row = self.st.cr3;
                self.st.trig = TrigAnchor::default();
                self.st.tnt.push(tnt);
                self.st.tnt_off = off;
                return Ok(());
            }
        }
        match self.peek() {
            Item::Tnt { tnt, off } => {
                self.consume();
                self.st.tnt.push(tnt);
                self.st.tnt_off = off;
                Ok(())
            }
            Item::End => Err(Some(Stop::End)),
            _ => Err(None),
        }
    }

    /// The TIP an indirect branch (or, with [`FarRule::TipOnly`], a far branch) needs.
    /// With deferred TIPs (SDM 36.4.2.3) it may come after the TNT bits of the branches
    /// that followed: queued already, or in the TNT packet next, whose bits are queued.
    /// Returns the next item, for the caller to match (not consumed).
    pub(super) fn tip_for_indirect(&mut self) -> Result<ItemOf<'a, F>, ()> {
        if !self.st.tnt.is_empty() && !self.rules.deferred_tips {
            return Err(());
        }
        let it = self.peek();
        if let (Item::Tnt { tnt, off }, true) = (it, self.rules.deferred_tips) {
            if self.st.tnt.is_empty() {
                // The in-progress TNT, then the deferred TIP after it.
                self.consume();
                self.st.tnt.push(tnt);
                self.st.tnt_off = off;
                return Ok(self.peek());
            }
        }
        Ok(it)
    }
}

/// What to restore when a look-ahead runs off the end of the range.
struct Snapshot<P> {
    pos: u64,
    st: FlowState<P>,
    events: usize,
    deferred: usize,
    timing: usize,
}
