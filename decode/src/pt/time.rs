//! Estimating the TSC between TSC packets (SDM 36.8.3), and calibrating CYC to it.
//!
//! [`Clock`] follows the timing packets: a TSC sets the time; the TMA after it says how
//! far into the current core-crystal-clock (CTC) period the TSC was; each MTC adds the
//! CTC ticks since the last one, times P = CPUID.15H:EBX / EAX (36.8.3.2); a CYC adds
//! core cycles converted to TSC ticks with the fast-counter:cycles ratio (FCR).
//! [`Calibration`] estimates that ratio: from the nominal frequency and a CBR
//! (P1 / CBR), or by counting cycles between two MTCs, or between two TSCs in PSB+.
//!
//! The arithmetic (including where it gives up, and the unsigned wrap-arounds) is the
//! one libipt's `pt_time.c` does, so that `tracemill dump --ptdump --time` prints what
//! ptdump prints; libipt's own decoders use the same estimate.

use std::fmt;

use super::config::PtConfig;

/// FCR values are fixed-point with this many fraction bits.
pub const FCR_SHIFT: u32 = 8;

/// Why a timing packet could not be applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeError {
    /// No TSC yet: there is no time (or no calibration for a CYC).
    NoTime,
    /// A value that cannot be (a CBR of 0; CTC moved back further than one wrap).
    BadPacket,
    /// A packet where it cannot be: a TMA without a TSC before it, or a second TMA.
    BadContext,
    /// No TSC:CTC ratio (CPUID.15H) to turn MTCs into TSC ticks.
    NoRatio,
    /// A state the estimate does not expect (a TMA after an MTC; a span too long to
    /// compute in 64 bits).
    Inconsistent,
}

impl fmt::Display for TimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimeError::NoTime => "no timing information",
            TimeError::BadPacket => "impossible timing packet value",
            TimeError::BadContext => "timing packet out of place",
            TimeError::NoRatio => "no TSC:CTC ratio (CPUID.15H) configured",
            TimeError::Inconsistent => "timing state inconsistent",
        })
    }
}

impl std::error::Error for TimeError {}

/// 1 << n in 32 bits, 0 when n is 32 or more.
fn bit32(n: u32) -> u32 {
    1u32.checked_shl(n).unwrap_or(0)
}

/// CTC ticks from `last` to `ctc`, allowing for one wrap of the bits MTCs carry.
fn ctc_delta(ctc: u32, last: u32, cfg: &PtConfig) -> Result<u32, TimeError> {
    let mut ctc = ctc;
    if ctc < last {
        ctc = ctc.wrapping_add(bit32(cfg.mtc_freq as u32 + 8));
        if ctc < last {
            return Err(TimeError::BadPacket);
        }
    }
    Ok(ctc - last)
}

fn ctc_to_fc(ctc: u32, cfg: &PtConfig) -> Result<u64, TimeError> {
    cfg.ctc_to_tsc(ctc as u64).ok_or(TimeError::NoRatio)
}

/// The CTC an MTC payload stands for: CTC[N+7:N] shifted back into place.
fn mtc_ctc(payload: u8, cfg: &PtConfig) -> u32 {
    (payload as u32)
        .checked_shl(cfg.mtc_freq as u32)
        .unwrap_or(0)
}

/// The running TSC estimate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Clock {
    /// The estimate.
    tsc: u64,
    /// The TSC at the last TSC or MTC (less the TMA's fast counter).
    base: u64,
    /// TSC ticks from CYCs since `base`.
    fc: u64,
    /// The last CTC (from an MTC, or a TMA's low bits).
    ctc: u32,
    /// The CTC when `fc` was last cleared.
    ctc_cyc: u32,
    lost_mtc: u32,
    lost_cyc: u32,
    cbr: u8,
    have_tsc: bool,
    have_cbr: bool,
    have_tma: bool,
    have_mtc: bool,
}

impl Clock {
    pub fn new() -> Self {
        Clock::default()
    }

    /// The estimated TSC; `None` before any TSC packet.
    pub fn tsc(&self) -> Option<u64> {
        self.have_tsc.then_some(self.tsc)
    }

    /// The estimate whether or not a TSC packet has given it a base: without one it is
    /// the time since tracking started (ptdump's `--no-wall-clock`).
    pub fn tsc_relative(&self) -> u64 {
        self.tsc
    }

    /// The last core:bus ratio.
    pub fn cbr(&self) -> Option<u8> {
        self.have_cbr.then_some(self.cbr)
    }

    /// MTCs whose distance from the last could not be computed, and CYCs dropped for
    /// want of a calibration, since the last TSC.
    pub fn lost(&self) -> (u32, u32) {
        (self.lost_mtc, self.lost_cyc)
    }

    /// TSC (36.4.2.11): the time, exactly. The CBR, and the CTC at which the cycle
    /// count was last cleared, carry over.
    pub fn update_tsc(&mut self, tsc: u64) {
        *self = Clock {
            tsc,
            base: tsc,
            have_tsc: true,
            cbr: self.cbr,
            have_cbr: self.have_cbr,
            ctc_cyc: self.ctc_cyc,
            ..Clock::default()
        };
    }

    /// CBR (36.4.2.10).
    pub fn update_cbr(&mut self, ratio: u8) -> Result<(), TimeError> {
        if ratio == 0 {
            return Err(TimeError::BadPacket);
        }
        self.have_cbr = true;
        self.cbr = ratio;
        Ok(())
    }

    /// TMA (36.4.2.13): the CTC and fast counter at the TSC before it.
    pub fn update_tma(&mut self, ctc: u16, fc: u16, cfg: &PtConfig) -> Result<(), TimeError> {
        if !self.have_tsc || self.have_tma {
            return Err(TimeError::BadContext);
        }
        if self.have_mtc {
            return Err(TimeError::Inconsistent);
        }
        // The CTC bits an MTC can carry.
        let mtc_hi = cfg.mtc_freq as u32 + 8;
        let mask = bit32(mtc_hi).wrapping_sub(1);
        self.have_tma = true;
        self.base = self.base.wrapping_sub(fc as u64);
        self.fc = self.fc.wrapping_add(fc as u64);
        // When the TMA's 16 CTC bits cover all an MTC carries, it counts as an MTC;
        // otherwise the next MTC supplies the high bits.
        if mtc_hi <= 16 {
            self.have_mtc = true;
        }
        self.ctc = ctc as u32 & mask;
        self.ctc_cyc = self.ctc;
        Ok(())
    }

    /// MTC (36.4.2.12): CTC ticks since the last MTC (or TMA), times P.
    pub fn update_mtc(&mut self, payload: u8, cfg: &PtConfig) -> Result<(), TimeError> {
        let (had_tsc, had_tma, had_mtc) = (self.have_tsc, self.have_tma, self.have_mtc);
        // Between a TSC and its TMA an MTC would look like a CTC overflow.
        if had_tsc && !had_tma {
            return Ok(());
        }
        let mut last = self.ctc;
        let ctc = mtc_ctc(payload, cfg);
        if self.fc != 0 || self.lost_cyc != 0 || !had_mtc {
            self.ctc_cyc = ctc;
        }
        self.have_mtc = true;
        self.fc = 0;
        self.ctc = ctc;
        self.lost_cyc = 0;
        if !had_mtc {
            // The first MTC without a TMA before it: where in its period tracing started
            // is unknown, so it only sets the CTC.
            if !had_tma {
                return Ok(());
            }
            // The TMA gave CTC[15:0]; this MTC gives the high bits. If its low bits are
            // below the TMA's, the TSC was in the previous 64K period.
            if last & !0xFFFF != 0 {
                return Err(TimeError::Inconsistent);
            }
            let lo = ctc & 0xFFFF;
            let mut hi = ctc & !0xFFFF;
            if lo < last {
                hi = hi.wrapping_sub(1 << 16)
                    & (0xFFu32.checked_shl(cfg.mtc_freq as u32).unwrap_or(0));
            }
            last |= hi;
        }
        let delta = match ctc_delta(ctc, last, cfg) {
            Ok(d) => d,
            Err(e) => {
                self.lost_mtc = self.lost_mtc.saturating_add(1);
                return Err(e);
            }
        };
        let ticks = ctc_to_fc(delta, cfg)?;
        self.base = self.base.wrapping_add(ticks);
        self.tsc = self.base;
        Ok(())
    }

    /// A CYC spanning MTCs: take off the cycles the earlier MTC periods account for.
    fn cycles_in_this_period(&self, cyc: u64, fcr: u64, cfg: &PtConfig) -> Result<u64, TimeError> {
        if self.ctc == self.ctc_cyc {
            return Ok(cyc);
        }
        let delta = ctc_delta(self.ctc, self.ctc_cyc, cfg)?;
        let fc = ctc_to_fc(delta, cfg)?;
        let before = (fc << FCR_SHIFT) / fcr;
        // Attribute all of it to earlier periods rather than run ahead.
        Ok(cyc.max(before) - before)
    }

    /// CYC (36.4.2.14) with the calibration `fcr` (0: none yet; the CYC is lost).
    pub fn update_cyc(&mut self, cyc: u64, fcr: u64, cfg: &PtConfig) -> Result<(), TimeError> {
        if fcr == 0 {
            self.lost_cyc = self.lost_cyc.saturating_add(1);
            return Ok(());
        }
        let cyc = if self.fc == 0 {
            self.cycles_in_this_period(cyc, fcr, cfg)?
        } else {
            cyc
        };
        self.fc = self.fc.wrapping_add(cyc.wrapping_mul(fcr) >> FCR_SHIFT);
        self.tsc = self.base.wrapping_add(self.fc);
        Ok(())
    }
}

/// The fast-counter:cycles ratio estimate (TSC ticks per core cycle, with
/// [`FCR_SHIFT`] fraction bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Calibration {
    fcr: u64,
    min_fcr: u64,
    max_fcr: u64,
    /// The last TSC and the cycles since (for calibrating at a TSC in PSB+).
    tsc: u64,
    cyc_tsc: u64,
    /// The last MTC's CTC and the cycles since.
    cyc_mtc: u64,
    ctc: u32,
    lost_mtc: u32,
    have_mtc: bool,
    /// The next MTC is the first after a PSB on a processor with SKL168.
    check_skl168: bool,
}

impl Default for Calibration {
    fn default() -> Self {
        Calibration {
            fcr: 0,
            min_fcr: u64::MAX,
            max_fcr: 0,
            tsc: 0,
            cyc_tsc: 0,
            cyc_mtc: 0,
            ctc: 0,
            lost_mtc: 0,
            have_mtc: false,
            check_skl168: false,
        }
    }
}

impl Calibration {
    pub fn new() -> Self {
        Calibration::default()
    }

    /// The current ratio; `None` before any estimate.
    pub fn fcr(&self) -> Option<u64> {
        (self.min_fcr <= self.max_fcr).then_some(self.fcr)
    }

    /// Set the ratio (an initial guess, or a new estimate).
    pub fn set_fcr(&mut self, fcr: u64) {
        self.fcr = fcr;
        self.min_fcr = self.min_fcr.min(fcr);
        self.max_fcr = self.max_fcr.max(fcr);
    }

    /// PSB: on SKL168 processors the CYCs before it may have been dropped.
    pub fn update_psb(&mut self, cfg: &PtConfig) {
        if cfg.errata.skl168 {
            self.check_skl168 = true;
        }
    }

    /// A TSC outside PSB+ may follow lost time: it is not used, only remembered for the
    /// next TSC in PSB+.
    pub fn update_tsc(&mut self, tsc: u64) {
        self.tsc = tsc;
        self.cyc_tsc = 0;
    }

    /// A TSC in PSB+: calibrate by the cycles since the last TSC (unless MTCs do).
    pub fn header_tsc(&mut self, tsc: u64) -> Result<(), TimeError> {
        let (last, cyc) = (self.tsc, self.cyc_tsc);
        self.tsc = tsc;
        self.cyc_tsc = 0;
        if last == 0 || cyc == 0 || self.have_mtc {
            return Ok(());
        }
        let mut tsc = tsc;
        if tsc < last {
            // TSC packets carry 56 bits.
            tsc = tsc.wrapping_add(1 << 56);
            if tsc < last {
                return Err(TimeError::BadPacket);
            }
        }
        let delta = tsc - last;
        if delta >> (64 - FCR_SHIFT) != 0 {
            return Err(TimeError::Inconsistent);
        }
        self.set_fcr((delta << FCR_SHIFT) / cyc);
        Ok(())
    }

    /// A CBR outside PSB+ is a frequency change: start over from it.
    pub fn update_cbr(&mut self, ratio: u8, cfg: &PtConfig) -> Result<(), TimeError> {
        *self = Calibration::default();
        self.header_cbr(ratio, cfg)
    }

    /// A CBR in PSB+: with the nominal ratio P1, FCR = P1 / CBR (36.8.3.2).
    pub fn header_cbr(&mut self, ratio: u8, cfg: &PtConfig) -> Result<(), TimeError> {
        let p1 = cfg.nom_freq as u64;
        if p1 == 0 {
            return Ok(());
        }
        if ratio == 0 {
            return Err(TimeError::BadPacket);
        }
        self.set_fcr((p1 << FCR_SHIFT) / ratio as u64);
        Ok(())
    }

    /// MTC: FCR = TSC ticks of the CTC period / the cycles counted in it.
    pub fn update_mtc(&mut self, payload: u8, cfg: &PtConfig) -> Result<(), TimeError> {
        let (last, had_mtc, cyc, check) =
            (self.ctc, self.have_mtc, self.cyc_mtc, self.check_skl168);
        self.check_skl168 = false;
        let ctc = mtc_ctc(payload, cfg);
        if !had_mtc {
            self.cyc_mtc = 0;
            self.ctc = ctc;
            self.have_mtc = true;
            return Ok(());
        }
        // No cycles: spread the next ones over both periods.
        if cyc == 0 {
            return Ok(());
        }
        self.cyc_mtc = 0;
        self.ctc = ctc;
        // Counted lost unless the estimate below succeeds.
        self.lost_mtc = self.lost_mtc.saturating_add(1);
        let delta = ctc_delta(ctc, last, cfg)?;
        let fc = ctc_to_fc(delta, cfg)?;
        if fc >> (64 - FCR_SHIFT) != 0 {
            return Err(TimeError::Inconsistent);
        }
        let fcr = (fc << FCR_SHIFT) / cyc;
        // SKL168: a wrap CYC before the PSB may be lost. Skip this MTC if MTCs were lost
        // since the PSB, or (at MTC periods short enough to tell, with an estimate to
        // compare against) when there are far fewer cycles than the period needs.
        if check {
            if bit32(cfg.mtc_freq as u32) < delta {
                return Ok(());
            }
            if cfg.mtc_freq < 10 {
                if let Some(old) = self.fcr() {
                    let expected = old.wrapping_mul(cyc.wrapping_add(0xF00)) >> FCR_SHIFT;
                    if expected < fc {
                        return Ok(());
                    }
                }
            }
        }
        self.set_fcr(fcr);
        self.lost_mtc = 0;
        Ok(())
    }

    /// CYC: count the cycles.
    pub fn update_cyc(&mut self, cyc: u64) {
        self.cyc_mtc = self.cyc_mtc.wrapping_add(cyc);
        self.cyc_tsc = self.cyc_tsc.wrapping_add(cyc);
    }

    /// OVF, keeping the ratio: the counts since the last TSC and MTC are void.
    pub fn update_ovf(&mut self) {
        self.tsc = 0;
        self.cyc_tsc = 0;
        self.cyc_mtc = 0;
        self.ctc = 0;
        self.have_mtc = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(mtc_freq: u8, n: u32, d: u32) -> PtConfig {
        PtConfig {
            mtc_freq,
            tsc_ctc_ratio_n: n,
            tsc_ctc_ratio_d: d,
            ..PtConfig::default()
        }
    }

    #[test]
    fn sdm_36_8_3_2_mtc_adds_ctc_delta_times_p() {
        let c = cfg(4, 4, 1);
        let mut k = Clock::new();
        k.update_tsc(0xA0000);
        // TMA: CTC 0x18, FC 8: the TSC was 8 ticks into the period.
        k.update_tma(0x18, 8, &c).unwrap();
        assert_eq!(k.tsc(), Some(0xA0000));
        // MTC 2: CTC 0x20 = 8 CTC ticks after the TMA, times P = 4.
        k.update_mtc(2, &c).unwrap();
        assert_eq!(k.tsc(), Some(0xA0000 - 8 + 32));
        // The next: 16 CTC ticks.
        k.update_mtc(3, &c).unwrap();
        assert_eq!(k.tsc(), Some(0xA0000 - 8 + 32 + 64));
    }

    #[test]
    fn sdm_36_8_3_2_mtc_wraps_once() {
        let c = cfg(0, 1, 1);
        let mut k = Clock::new();
        k.update_tsc(1000);
        k.update_tma(0xFE, 0, &c).unwrap();
        k.update_mtc(0xFF, &c).unwrap();
        k.update_mtc(0x01, &c).unwrap();
        assert_eq!(k.tsc(), Some(1003));
    }

    #[test]
    fn sdm_36_8_3_2_mtc_without_ratio_is_an_error() {
        let c = cfg(0, 0, 0);
        let mut k = Clock::new();
        k.update_tsc(1000);
        k.update_tma(0x10, 0, &c).unwrap();
        assert_eq!(k.update_mtc(0x11, &c), Err(TimeError::NoRatio));
    }

    #[test]
    fn tma_needs_a_tsc_and_comes_once() {
        let c = cfg(0, 1, 1);
        let mut k = Clock::new();
        assert_eq!(k.update_tma(0, 0, &c), Err(TimeError::BadContext));
        k.update_tsc(5);
        k.update_tma(0, 0, &c).unwrap();
        assert_eq!(k.update_tma(0, 0, &c), Err(TimeError::BadContext));
    }

    #[test]
    fn sdm_36_8_3_2_cyc_scaled_by_p1_over_cbr() {
        // P1 = 4, CBR = 2: a core cycle is two TSC ticks.
        let c = PtConfig {
            nom_freq: 4,
            ..cfg(0, 1, 1)
        };
        let mut cal = Calibration::new();
        assert_eq!(cal.fcr(), None);
        cal.header_cbr(2, &c).unwrap();
        assert_eq!(cal.fcr(), Some(2 << FCR_SHIFT));
        let mut k = Clock::new();
        k.update_tsc(100);
        k.update_cyc(10, cal.fcr().unwrap(), &c).unwrap();
        assert_eq!(k.tsc(), Some(120));
        // Without calibration a CYC is lost, not guessed.
        k.update_cyc(10, 0, &c).unwrap();
        assert_eq!(k.lost(), (0, 1));
        assert_eq!(k.tsc(), Some(120));
    }

    #[test]
    fn sdm_36_8_3_4_calibration_from_cycles_between_mtcs() {
        let c = cfg(0, 3, 1);
        let mut cal = Calibration::new();
        cal.update_mtc(10, &c).unwrap();
        cal.update_cyc(6);
        // 2 CTC ticks x 3 = 6 TSC ticks over 6 cycles: FCR 1.0.
        cal.update_mtc(12, &c).unwrap();
        assert_eq!(cal.fcr(), Some(1 << FCR_SHIFT));
    }

    #[test]
    fn calibration_from_tscs_in_psb_plus() {
        let mut cal = Calibration::new();
        cal.update_tsc(1000);
        cal.update_cyc(250);
        cal.header_tsc(1500).unwrap();
        assert_eq!(cal.fcr(), Some(2 << FCR_SHIFT));
    }
}
