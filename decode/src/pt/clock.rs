//! Intel PT's clock for the shared [`crate::timing::Timeline`]: what each timing packet
//! means in stream order (SDM 36.8.3), on the estimate of [`super::time`].
//!
//! | packet | `timing` row `value` | effect |
//! |---|---|---|
//! | TSC (36.4.2.11) | TSC[55:0] | the time, exactly |
//! | TMA (36.4.2.13) | CTC[15:0] | where in the crystal-clock period the TSC fell |
//! | MTC (36.4.2.12) | CTC[N+7:N] in place (N = `mtc_freq`) | CTC ticks since the last, × `tsc_ctc_ratio_n / _d` |
//! | CYC (36.4.2.14) | cycles | cycles since the last CYC, × the calibrated ratio |
//! | CBR (36.4.2.10) | the core:bus ratio | calibrates cycles to TSC ticks with `nom_freq` |
//!
//! Rows are timed from the TSC estimate at TSC, MTC and calibrated CYC packets
//! ([`Clock::dates_rows`]), each spread over the rows the next packet places, as RTIT's
//! MTC and STS are without cycle-accurate mode; `cycles` is the running sum of CYC
//! payloads in the `timing` table (an Intel PT CYC precedes the packet it times, so the
//! exact-row rule of RTIT's cycle-accurate mode, a CYC after its packet, does not apply:
//! `branches.cycles` stays null).

use tracemill_schemas::TimingKind;

use super::config::PtConfig;
use super::time::{Calibration, Clock as Estimate};
use crate::piece::TimingFact;
use crate::rows::TimingRow;
use crate::timing::Clock;

/// What the clock needs: the recording facts (ratios, MTC frequency, errata), without
/// the IP filters.
#[derive(Clone, Debug, Default)]
pub struct PtTiming {
    pub cfg: PtConfig,
}

impl PtTiming {
    pub fn new(cfg: &PtConfig) -> Self {
        let mut cfg = cfg.clone();
        cfg.filters.clear();
        PtTiming { cfg }
    }
}

/// The TSC estimate in stream order.
#[derive(Clone, Debug)]
pub struct PtClock {
    cfg: PtConfig,
    est: Estimate,
    cal: Calibration,
    /// Cumulative CYC payloads (cycles).
    cycles: u64,
    cbr: Option<u8>,
    /// The highest TSC reported (the `timing` table's `tsc` never decreases).
    shown: u64,
}

impl PtClock {
    /// The estimated TSC now, if a TSC packet has set it.
    pub fn tsc_now(&self) -> Option<u64> {
        self.est.tsc()
    }
}

impl Clock for PtClock {
    type Config = PtTiming;

    fn new(c: &PtTiming) -> Self {
        PtClock {
            cfg: c.cfg.clone(),
            est: Estimate::new(),
            cal: Calibration::new(),
            cycles: 0,
            cbr: None,
            shown: 0,
        }
    }
    fn cycle_acc(&self) -> bool {
        false
    }
    fn cycles(&self) -> u64 {
        self.cycles
    }

    fn fact(&mut self, f: &TimingFact) -> TimingRow {
        let cfg = &self.cfg;
        let mut value = f.raw;
        // Errors in the estimate (a packet out of place, no ratio) leave it where it was,
        // as libipt's decoders do; the `timing` row still shows the packet.
        match f.kind {
            TimingKind::Tsc => {
                self.cal.update_tsc(f.raw);
                self.est.update_tsc(f.raw);
            }
            TimingKind::Tma => {
                let (ctc, fc) = (f.raw as u16, (f.raw >> 16) as u16);
                value = ctc as u64;
                let _ = self.est.update_tma(ctc, fc, cfg);
            }
            TimingKind::Mtc => {
                value = (f.raw << cfg.mtc_freq.min(63)) & 0xFFFF_FFFF;
                let _ = self.cal.update_mtc(f.raw as u8, cfg);
                let _ = self.est.update_mtc(f.raw as u8, cfg);
            }
            TimingKind::Cyc => {
                // Saturating: a CYC of any width is read (extension bytes without end),
                // and the count a column shows never decreases (fuzz finding
                // `cycles-decrease`: a 64-bit CYC wrapped it).
                self.cycles = self.cycles.saturating_add(f.raw);
                self.cal.update_cyc(f.raw);
                let fcr = self.cal.fcr().unwrap_or(0);
                let _ = self.est.update_cyc(f.raw, fcr, cfg);
            }
            TimingKind::Cbr => {
                let r = f.raw as u8;
                self.cbr = Some(r);
                let _ = self.cal.update_cbr(r, cfg);
                let _ = self.est.update_cbr(r);
            }
            // RTIT's packets never come from an Intel PT trace.
            TimingKind::Sts | TimingKind::Pcc => {}
        }
        TimingRow {
            offset: f.offset,
            kind: f.kind,
            raw: f.raw,
            value,
            tsc: self.est.tsc().map(|t| {
                self.shown = self.shown.max(t);
                self.shown
            }),
            cycles: self.cfg.cyc.then_some(self.cycles),
            core_bus_ratio: self.cbr,
        }
    }

    fn enabled(&mut self) {}

    fn ignores(&self, _f: &TimingFact) -> bool {
        false
    }

    fn dates_rows(&self, kind: TimingKind) -> bool {
        matches!(kind, TimingKind::Tsc | TimingKind::Mtc | TimingKind::Cyc)
    }

    const OVERFLOW_CYC_RULE: bool = false;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(offset: u64, kind: TimingKind, raw: u64) -> TimingFact {
        TimingFact {
            offset,
            kind,
            raw,
            ratio: None,
            row: 0,
        }
    }

    /// SDM 36.8.3.2: the TSC estimate between TSC packets moves by MTCs, each the CTC ticks
    /// since the last (one wrap of the bits MTCs carry allowed) times CPUID.15H's ratio,
    /// from the CTC the TMA gave at the TSC.
    #[test]
    fn sdm_36_8_3_2_tsc_then_tma_then_mtcs_advance_the_estimate() {
        let cfg = PtConfig {
            mtc_freq: 3,
            tsc_ctc_ratio_n: 2,
            tsc_ctc_ratio_d: 1,
            ..PtConfig::default()
        };
        let mut c = PtClock::new(&PtTiming::new(&cfg));
        assert_eq!(c.fact(&fact(0, TimingKind::Mtc, 1)).tsc, None, "no TSC yet");
        assert_eq!(c.fact(&fact(1, TimingKind::Tsc, 0x1000)).tsc, Some(0x1000));
        // CTC 0x10 at the TSC, fast counter 0.
        c.fact(&fact(2, TimingKind::Tma, 0x10));
        // An MTC carries CTC[10:3]: 0x03 is CTC 0x18, 8 ticks on, 16 TSC ticks.
        let r = c.fact(&fact(3, TimingKind::Mtc, 0x03));
        assert_eq!(r.value, 0x18);
        assert_eq!(r.tsc, Some(0x1000 + 16));
    }

    /// The `timing` table's `tsc` never decreases, even when a TSC packet goes back.
    #[test]
    fn reported_tsc_never_decreases() {
        let mut c = PtClock::new(&PtTiming::default());
        assert_eq!(c.fact(&fact(0, TimingKind::Tsc, 500)).tsc, Some(500));
        assert_eq!(c.fact(&fact(1, TimingKind::Tsc, 300)).tsc, Some(500));
        assert_eq!(c.tsc_now(), Some(300), "the estimate follows the packets");
    }
}
