//! RTIT's clock: time from timing packets in stream order (spec 4.2.12-4.2.15, E6, E7).
//!
//! - **CYC** counts core cycles since the previous CYC. Erratum E6: payloads are one less
//!   than the true count, so 1 is added to every non-zero payload (a 0 may have been a 1:
//!   the sum can lag by one per zero payload). `cycles` is the running sum.
//! - **STS** carries TSC[39:0] and the actual core/bus ratio. The 40-bit value is extended
//!   to 64 bits across wraps (the upper bits start at 0 at the first STS).
//! - **MTC** carries TSC[s+7:s] (s from MTC_Range) when those bits change: the TSC is the
//!   smallest value with those bits, at or after the previous TSC (a jump of several
//!   periods means MTCs were lost; with cycle-accurate timing the cycle count picks the
//!   right 2^(s+8) wrap). Erratum E7: the first MTC after tracing is enabled is ignored.
//! - Between TSC-bearing packets, cycles convert to TSC ticks as
//!   `cycles × guaranteed_ratio / core_bus_ratio` (the bundle's ratio, the last STS's).
//!
//! How rows get their time from it is the shared [`crate::timing::Timeline`]'s business;
//! this clock only says what each packet means ([`crate::timing::Clock`]).

use tracemill_schemas::TimingKind;

use super::config::TraceConfig;
use crate::piece::TimingFact;
use crate::rows::TimingRow;
use crate::timing::Clock;

/// What the timing reconstruction needs to know about the trace.
#[derive(Clone, Copy, Debug)]
pub struct TimingConfig {
    pub cycle_acc: bool,
    /// Lowest TSC bit an MTC carries.
    pub mtc_shift: u32,
    /// TSC/bus ratio (the bundle's `guaranteed_ratio`).
    pub guaranteed_ratio: Option<u8>,
    /// The trace begins where tracing was enabled (not a ring dump), so the first MTC is
    /// the one E7 concerns.
    pub starts_at_enable: bool,
}

impl TimingConfig {
    pub fn new(cfg: &TraceConfig, guaranteed_ratio: Option<u8>, starts_at_enable: bool) -> Self {
        TimingConfig {
            cycle_acc: cfg.cycle_acc,
            mtc_shift: cfg.mtc_shift(),
            guaranteed_ratio,
            starts_at_enable,
        }
    }
}

/// The corrected value of a CYC payload (E6).
pub fn cyc_value(raw: u64) -> u64 {
    if raw == 0 {
        0
    } else {
        raw + 1
    }
}

/// Extend a 40-bit TSC to 64 bits next to `prev` (the nearest value with these low bits
/// not before it, allowing for a little disorder).
pub fn extend_tsc40(prev: Option<u64>, tsc40: u64) -> u64 {
    const M: u64 = 1 << 40;
    match prev {
        None => tsc40,
        Some(p) => {
            let mut v = (p & !(M - 1)) | (tsc40 & (M - 1));
            // A value far below the previous one is a wrap of the 40-bit counter.
            if v + (M / 2) < p {
                v += M;
            }
            v
        }
    }
}

/// Time in stream order.
#[derive(Clone, Debug)]
pub struct RtitClock {
    c: TimingConfig,
    /// Cumulative cycles (E6-corrected).
    pub cycles: u64,
    /// TSC at the last TSC-bearing packet, and the cumulative cycles then.
    tsc: Option<u64>,
    tsc_cycles: u64,
    /// An MTC/STS just set `tsc`; its CYC, next, says when in cycles.
    anchor_pending: bool,
    pub ratio: Option<u8>,
    /// The next MTC is the first after an enable (E7).
    skip_mtc: bool,
    /// The largest TSC reported so far. The clock itself follows the packets (so an
    /// extrapolation that ran ahead does not drift on), but what it reports never goes
    /// back: a damaged STS, or an MTC below the cycle-extrapolated TSC, holds the reported
    /// value until the clock passes it again.
    shown: u64,
}

impl RtitClock {
    pub fn new(c: TimingConfig) -> Self {
        RtitClock {
            c,
            cycles: 0,
            tsc: None,
            tsc_cycles: 0,
            anchor_pending: false,
            ratio: None,
            skip_mtc: c.starts_at_enable,
            shown: 0,
        }
    }

    /// The TSC now, from the last TSC-bearing packet and the cycles since.
    pub fn tsc_now(&self) -> Option<u64> {
        let t = self.tsc?;
        match (self.c.guaranteed_ratio, self.ratio, self.c.cycle_acc) {
            (Some(g), Some(r), true) if r > 0 => {
                Some(t + (self.cycles - self.tsc_cycles) * g as u64 / r as u64)
            }
            _ => Some(t),
        }
    }

    /// Tracing was enabled again (after a TraceSTOP): E7 applies to the next MTC.
    pub fn enabled(&mut self) {
        self.skip_mtc = true;
    }

    /// Take one timing packet; returns its row of the `timing` table.
    pub fn fact(&mut self, f: &TimingFact) -> TimingRow {
        let mut value = f.raw;
        match f.kind {
            TimingKind::Cyc => {
                value = cyc_value(f.raw);
                // Saturating, as Intel PT's (`pt/clock.rs`): never decreases.
                self.cycles = self.cycles.saturating_add(value);
                if self.anchor_pending {
                    // The CYC after an MTC/STS dates it in cycles.
                    self.tsc_cycles = self.cycles;
                    self.anchor_pending = false;
                }
            }
            TimingKind::Sts => {
                let t = extend_tsc40(self.tsc_now().or(self.tsc), f.raw);
                self.set_tsc(t);
                self.ratio = f.ratio.or(self.ratio);
            }
            TimingKind::Mtc => {
                let s = self.c.mtc_shift;
                value = f.raw << s;
                if std::mem::take(&mut self.skip_mtc) {
                    // E7: sent at the wrong time; ignored.
                } else if let Some(prev) = self.tsc {
                    let period = 1u64 << (s + 8);
                    let est = self.tsc_now().unwrap_or(prev);
                    // Candidates k·2^(s+8) + bits·2^s: the first at or after `prev`,
                    // moved on by whole wraps when the cycle count says so.
                    let base = (prev & !(period - 1)) | value;
                    let mut t = if base < prev { base + period } else { base };
                    while t + period / 2 < est {
                        t += period;
                    }
                    self.set_tsc(t.max(prev));
                }
            }
            // FUP.PCC dates nothing by itself (its CYC does); the others are Intel PT's.
            TimingKind::Pcc | TimingKind::Tsc | TimingKind::Tma | TimingKind::Cbr => {}
        }
        TimingRow {
            offset: f.offset,
            kind: f.kind,
            raw: f.raw,
            value,
            tsc: self.tsc_now().map(|t| {
                self.shown = self.shown.max(t);
                self.shown
            }),
            cycles: self.c.cycle_acc.then_some(self.cycles),
            core_bus_ratio: self.ratio,
        }
    }

    fn set_tsc(&mut self, t: u64) {
        self.tsc = Some(t);
        self.tsc_cycles = self.cycles;
        self.anchor_pending = self.c.cycle_acc;
    }
}

impl Clock for RtitClock {
    type Config = TimingConfig;

    fn new(c: &TimingConfig) -> Self {
        RtitClock::new(*c)
    }
    fn cycle_acc(&self) -> bool {
        self.c.cycle_acc
    }
    fn cycles(&self) -> u64 {
        self.cycles
    }
    fn fact(&mut self, f: &TimingFact) -> TimingRow {
        RtitClock::fact(self, f)
    }
    fn enabled(&mut self) {
        RtitClock::enabled(self)
    }
    fn ignores(&self, f: &TimingFact) -> bool {
        // E7: the MTC the clock is about to skip dates nothing.
        f.kind == TimingKind::Mtc && self.skip_mtc
    }
    fn dates_rows(&self, kind: TimingKind) -> bool {
        matches!(kind, TimingKind::Mtc | TimingKind::Sts)
    }
    /// 4.2.5: a full TNT followed by a FUP.BuffOvf whose CYC is 0 carries the overflow's
    /// time.
    const OVERFLOW_CYC_RULE: bool = true;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(cycle_acc: bool) -> TimingConfig {
        TimingConfig {
            cycle_acc,
            mtc_shift: 7,
            guaranteed_ratio: Some(20),
            starts_at_enable: true,
        }
    }

    fn fact(offset: u64, kind: TimingKind, raw: u64, ratio: Option<u8>) -> TimingFact {
        TimingFact {
            offset,
            kind,
            raw,
            ratio,
            row: 0,
        }
    }

    #[test]
    fn e6_adds_one_to_non_zero_payloads() {
        assert_eq!([0, 1, 5].map(cyc_value), [0, 2, 6]);
    }

    #[test]
    fn tsc40_extends_across_wraps() {
        assert_eq!(extend_tsc40(None, 0x12_3456_7890), 0x12_3456_7890);
        let near_top = (1u64 << 40) - 10;
        assert_eq!(extend_tsc40(Some(near_top), 5), (1 << 40) + 5);
        assert_eq!(extend_tsc40(Some((3 << 40) + 100), 200), (3 << 40) + 200);
    }

    #[test]
    fn mtc_after_sts_advances_to_the_next_boundary_and_e7_skips_the_first() {
        let mut c = RtitClock::new(cfg(false));
        c.fact(&fact(0, TimingKind::Sts, 0x1000_0010, Some(16)));
        // E7: the first MTC after enable is ignored.
        c.fact(&fact(1, TimingKind::Mtc, 0x55, None));
        assert_eq!(c.tsc_now(), Some(0x1000_0010));
        // TSC[14:7] becomes 0x01: TSC = 0x1000_0080.
        c.fact(&fact(2, TimingKind::Mtc, 0x01, None));
        assert_eq!(c.tsc_now(), Some(0x1000_0080));
        // Two MTCs lost: 0x04 means 0x1000_0200.
        c.fact(&fact(3, TimingKind::Mtc, 0x04, None));
        assert_eq!(c.tsc_now(), Some(0x1000_0200));
        // The 8-bit field wraps: 0x00 after 0x04 is the next 2^15 boundary.
        c.fact(&fact(4, TimingKind::Mtc, 0x00, None));
        assert_eq!(c.tsc_now(), Some(0x1000_8000));
    }

    #[test]
    fn cycles_convert_to_tsc_through_the_ratios() {
        let mut c = RtitClock::new(cfg(true));
        c.fact(&fact(0, TimingKind::Sts, 1000, Some(10)));
        c.fact(&fact(1, TimingKind::Cyc, 4, None)); // dates the STS: cycles 5
        c.fact(&fact(2, TimingKind::Cyc, 9, None)); // +10 cycles
                                                    // 10 core cycles at ratio 10 are 20 TSC ticks at guaranteed ratio 20.
        assert_eq!(c.cycles, 15);
        assert_eq!(c.tsc_now(), Some(1020));
    }

    /// The `timing` table's `tsc` never decreases (docs/contracts.md), whatever the
    /// packets say: a damaged STS below the clock, or an MTC below the TSC extrapolated
    /// from cycles, hold the reported value; the clock itself follows the packets, so it
    /// does not drift ahead of them afterwards. (Fuzz finding `tsc-backwards`.)
    #[test]
    fn reported_tsc_never_decreases_but_the_clock_follows_the_packets() {
        let mut c = RtitClock::new(cfg(false));
        let a = c.fact(&fact(0, TimingKind::Sts, 5000, Some(10))).tsc;
        let b = c.fact(&fact(1, TimingKind::Sts, 3000, Some(10))).tsc;
        assert_eq!((a, b), (Some(5000), Some(5000)), "a backward STS holds");
        assert_eq!(c.tsc_now(), Some(3000), "the clock takes the packet");
        let d = c.fact(&fact(2, TimingKind::Sts, 6000, Some(10))).tsc;
        assert_eq!(d, Some(6000), "and reports again once past the hold");

        // Cycle-accurate: 100 cycles at ratio 10 extrapolate 200 ticks past 0x1000_0010;
        // an MTC for bits 0x01 (0x1000_0080) is below that.
        let mut c = RtitClock::new(TimingConfig {
            starts_at_enable: false,
            ..cfg(true)
        });
        c.fact(&fact(0, TimingKind::Sts, 0x1000_0010, Some(10)));
        c.fact(&fact(1, TimingKind::Cyc, 0, None));
        let before = c.fact(&fact(2, TimingKind::Cyc, 99, None)).tsc.unwrap();
        assert_eq!(before, 0x1000_0010 + 200);
        let at = c.fact(&fact(3, TimingKind::Mtc, 0x01, None)).tsc.unwrap();
        assert_eq!(at, before, "held, not moved back to 0x1000_0080");
        assert_eq!(c.tsc_now(), Some(0x1000_0080), "the clock takes the MTC");
    }
}
