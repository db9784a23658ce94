//! Gaps and resync: an error drops the unproven rows and waits for a resume point
//! (an enable, an overflow with its IP, a PSB+ that says where, an anchor TIP); a body
//! restarts when it began too early.

use tracemill_schemas::EventKind;

use super::output::went_to;
use super::query::PACKET_ERROR;
use super::{Below, Item, Mode, Role, Stop, Target, Walker};
use crate::front::{FarRule, Format, Front};
use crate::loop_guard::LoopGuard;
use crate::sink::RowSink;

impl<'a, 'c, F: Format, S: RowSink> Walker<'a, 'c, F, S> {
    /// A gap: report, drop what is unproven, and look for a resume point.
    pub(super) fn gap(&mut self, offset: u64, detail: String) {
        // Events bound to a far branch whose TIP did not come: reported at it, before the
        // error (libipt reports them with the branch, then finds the error).
        self.emit_held();
        self.event(offset, EventKind::Error, Some(self.st.ip), detail);
        self.drop_tail();
        self.st.mode = Mode::Unsynced;
        self.st.tnt.clear();
        self.forget_open();
        // Whatever it was, even unknown at a chunk's start: after a gap the sequential
        // decode has lost it too, and a stitch that converged before the gap must not
        // hand its own value on past it (fuzz finding stitch-last-call).
        self.st.ret.reset(Below::AfterGap);
    }

    /// Tracing resumes at `ip`, decided by the packet at `off`.
    pub(super) fn resume(&mut self, ip: u64, off: u64) {
        self.st.mode = Mode::Tracing;
        self.st.ip = ip;
        self.enter_block(ip);
        self.st.resumed_at = Some(ip);
        self.st.tnt.clear();
        self.decided(off);
        if !self.started {
            // A body's output starts here; the stitch covers everything before.
            self.started = true;
            self.rows.truncate(0);
            self.facts.events.clear();
            self.facts.deferred.clear();
            self.facts.timing.clear();
            self.tail_start = 0;
            self.forget_open();
            // That was the body's start, not a gap after it.
            self.open_forgotten = false;
            let mut fe = self.st.fe.clone();
            self.front.save(&mut fe);
            self.body_start = Some(Target {
                cursor: self.front.pos(),
                ip,
                bits: self.st.bits,
                space: self.st.space,
                fe,
                in_tx: self.st.in_tx,
            });
        }
    }

    /// Waiting for a resume point.
    pub(super) fn idle(&mut self) -> Option<Stop> {
        let it = self.peek();
        if let Some(x) = self.resume_at_bound(it) {
            // Left unread: the walk applies it at `x`, where it now is.
            let off = it.offset().unwrap_or(0);
            self.event(off, EventKind::Resync, Some(x), String::new());
            self.resume(x, off);
            return None;
        }
        self.consume();
        match it {
            Item::End => return Some(Stop::End),
            Item::Error { off, e } => {
                self.event(off, EventKind::Error, None, e.to_string());
                self.st.mode = Mode::Unsynced;
            }
            Item::Pge { ip, off } => match ip {
                Some(ip) => {
                    // libipt's `[resumed]`: tracing goes on where it stopped.
                    let resumed = self.st.mode == Mode::Disabled && self.st.stopped_at == Some(ip);
                    let detail = if resumed { "resumed" } else { "" };
                    self.event(off, EventKind::Enable, Some(ip), detail.to_string());
                    self.resume(ip, off);
                }
                None => self.st.mode = Mode::Unsynced,
            },
            Item::BuffOvf { ip, off } => {
                self.event(off, EventKind::Overflow, ip, String::new());
                // What ran in a transaction was lost with the packets (libipt: no longer
                // speculative); a PSB+ or MODE.TSX says so again if it still runs.
                self.st.in_tx = false;
                if ip.is_some() || self.started || self.role != Role::Body {
                    // No RET is compressed across an overflow (RTIT 4.2.5, SDM 36.4.2.16).
                    self.st.ret.reset(Below::Empty);
                } else {
                    // A body that cannot read this FUP's IP stays unsynced, and the
                    // sequential decode, which could, may trace calls before the body's
                    // first resume point: there the return state is still unknown, not
                    // cleared (fuzz finding buffovf-before-body-start).
                }
                match ip {
                    Some(ip) => self.resume(ip, off),
                    None => self.st.mode = Mode::Unsynced,
                }
            }
            Item::Tip { ip, off, anchor } => {
                if let (Mode::Unsynced, true, Some(ip)) = (self.st.mode, anchor, ip) {
                    self.event(off, EventKind::Resync, Some(ip), String::new());
                    self.resume(ip, off);
                }
            }
            Item::Far { tip, off, .. } => {
                if let (Mode::Unsynced, Some((Some(t), toff))) = (self.st.mode, tip) {
                    self.event(toff, EventKind::Resync, Some(t), String::new());
                    self.resume(t, toff);
                    if self.rules.far == FarRule::TipOnly {
                        // Intel PT: as where the walk takes the FUP + TIP as an interrupt
                        // (while tracing, or resuming at the FUP after an error), the FUP
                        // decided where the walk is: a chunk's body resuming here and the
                        // sequential decode give the rows after it one `offset`.
                        self.st.decision = off;
                    }
                }
            }
            Item::Pgd { ip, off, .. } | Item::SyncPgd { ip, off } => {
                if self.st.mode != Mode::Disabled {
                    self.event(off, EventKind::Disable, ip, String::new());
                }
                // E2: a second PGD with no PGE between is ignored.
                if self.st.mode != Mode::Stopped {
                    // (Not tracing: where it stopped is unknown.)
                    self.disabled_at(None);
                }
            }
            Item::Status { ip, bits, off } => {
                if let Some(b) = bits {
                    self.set_bits(b);
                }
                match ip {
                    // The PSB+ says where execution is: tracing was on all along.
                    Some(ip) => {
                        self.event(off, EventKind::Resync, Some(ip), String::new());
                        self.resume(ip, off);
                    }
                    None => {
                        if self.st.mode == Mode::Unsynced {
                            self.disabled_at(None);
                        }
                    }
                }
            }
            Item::At { ip, off, what } => self.bound_event(ip, off, what),
            Item::Tnt { tnt, off } => {
                if self.st.mode == Mode::Disabled {
                    self.event(
                        off,
                        EventKind::Error,
                        None,
                        format!("{} TNT bits while tracing is disabled", tnt.len),
                    );
                }
            }
            Item::TraceStop { off } => {
                self.event(off, EventKind::TraceStop, None, String::new());
                self.st.mode = Mode::Stopped;
            }
            // Only a look-ahead sees them; nothing to do.
            Item::FupNext | Item::NoneNear => {}
        }
        None
    }

    /// Intel PT, after a gap (libipt 2.2's resync): a FUP-led item that names an IP
    /// resumes the walk there, the item still to apply.
    fn resume_at_bound(&self, it: super::query::ItemOf<'a, F>) -> Option<u64> {
        if self.rules.far != FarRule::TipOnly || self.st.mode != Mode::Unsynced || !self.started {
            return None;
        }
        match it {
            Item::Far {
                ip: Some(x),
                tip: Some((Some(_), _)),
                ..
            } => Some(x),
            Item::At { ip: Some(x), .. } => Some(x),
            _ => None,
        }
    }

    /// Something the trace and the code disagree on: report it with the offset of the
    /// packet involved and resync.
    pub(super) fn inconsistent(&mut self, what: &str) {
        if self.pgd_second_reading() {
            return;
        }
        let (off, found) = match self.la {
            // A TIP or TNT cut short, walked up to: the rows since the last packet that
            // decided one are proven (no event could come between), and kept.
            Some(Item::Error { off, e }) if self.front.cut_before_branch(off, &e) => {
                self.decided(self.st.decision);
                (off, format!("{PACKET_ERROR} ({e})"))
            }
            // What the packet error was (bytes lost before a PSB, say).
            Some(Item::Error { off, e }) => (off, format!("{PACKET_ERROR} ({e})")),
            Some(it) if it.offset().is_some() => (it.offset().unwrap_or(0), it.name().into()),
            _ => (self.front.pos(), "nothing usable".into()),
        };
        // Intel PT (libipt 2.2): the packet that does not fit is where the walk resyncs
        // (a TIP, a FUP + TIP), unless the walk just resumed there.
        let keep = self.rules.far == FarRule::TipOnly
            && off != self.st.decision
            && matches!(
                self.la,
                Some(Item::Tip { ip: Some(_), .. })
                    | Some(Item::Far {
                        ip: Some(_),
                        tip: Some((Some(_), _)),
                        ..
                    })
            );
        if !keep {
            self.consume();
        }
        let ip = self.st.ip;
        self.gap(off, format!("{what} at {ip:#x}, found {found}"));
    }

    /// The walk cannot reach the address of the pending FUP.PGD. If that address is the
    /// sequential NLIP of a branch walked since the last decided row (the other reading of
    /// "NLIP" for a jump out of the filter region, Table 1), tracing stopped right after
    /// that branch: undo the walk since and apply the PGD there.
    pub(super) fn pgd_second_reading(&mut self) -> bool {
        let (
            Some((rows, nlip)),
            Some(Item::Pgd {
                ip: Some(x),
                off,
                tip,
            }),
        ) = (self.alt_pgd, self.la)
        else {
            return false;
        };
        if x != nlip || rows < self.tail_start {
            return false;
        }
        self.consume();
        self.rows.truncate(rows);
        self.forget_open();
        self.event(off, EventKind::Disable, Some(x), went_to(tip));
        self.decided(off);
        self.disabled_at(Some(x));
        self.alt_pgd = None;
        true
    }

    /// The walk is in a cycle of direct branches that never reaches the packet it waits
    /// for (a damaged IP led it there): an error at that packet, and a resync.
    pub(super) fn stuck_in_cycle(&mut self) {
        let steps = self.spin.steps();
        self.spin = LoopGuard::default();
        if !self.st.tnt.is_empty() {
            let off = self.st.tnt_off;
            let ip = self.st.ip;
            self.gap(
                off,
                format!(
                    "direct branches loop back to {ip:#x} (after {steps} steps) with TNT bits \
                     still queued"
                ),
            );
            return;
        }
        self.peek();
        self.inconsistent(&format!(
            "direct branches loop back (after {steps} steps) without reaching the next packet"
        ));
    }

    /// (Body) discard everything and look for a resume point again.
    pub(super) fn restart(&mut self) {
        self.rows.truncate(0);
        self.facts.events.clear();
        self.facts.deferred.clear();
        self.facts.timing.clear();
        self.tail_start = 0;
        self.started = false;
        self.body_start = None;
        self.st.mode = Mode::Unsynced;
        self.st.tnt.clear();
        // What the next resume point's return state lies on is the stitch's again.
        self.st.ret.reset(Below::FromChunkStart);
        self.forget_open();
        self.open_forgotten = false;
    }
}
