//! What an Intel PT decoder must know about how a trace was recorded: the processor
//! (for its errata), the timing ratios, and the IA32_RTIT_CTL settings (SDM 36.2.7.2).
//!
//! perf records the same facts in `perf.data` (the `intel_pt//` event's config bits,
//! which are IA32_RTIT_CTL's, plus `tsc_ctc_ratio_n`/`_d`, `max_nonturbo_ratio`); libipt
//! takes them in `pt_config` (`cpu`, `mtc_freq`, `nom_freq`, `cpuid_0x15_eax/ebx`).

use super::cpu::{Cpu, Errata};

/// IA32_RTIT_CTL bits (SDM Table 36-6, Intel PT's layout; RTIT's differs).
pub mod ctl {
    pub const TRACE_EN: u64 = 1 << 0;
    pub const CYC_EN: u64 = 1 << 1;
    pub const OS: u64 = 1 << 2;
    pub const USER: u64 = 1 << 3;
    pub const PWR_EVT_EN: u64 = 1 << 4;
    pub const FUP_ON_PTW: u64 = 1 << 5;
    pub const CR3_FILTER: u64 = 1 << 7;
    pub const MTC_EN: u64 = 1 << 9;
    pub const TSC_EN: u64 = 1 << 10;
    pub const DIS_RETC: u64 = 1 << 11;
    pub const PTW_EN: u64 = 1 << 12;
    pub const BRANCH_EN: u64 = 1 << 13;
    pub const MTC_FREQ_SHIFT: u32 = 14;
    pub const MTC_FREQ_MASK: u64 = 0xF << MTC_FREQ_SHIFT;
    /// Event Trace (CFE and EVD packets, MODE.Exec's IF bit).
    pub const EVENT_EN: u64 = 1 << 31;
    /// ADDRn_CFG: four bits per range from bit 32.
    pub const ADDR_CFG_SHIFT: u32 = 32;
}

/// What an IP range (IA32_RTIT_ADDRn_A/B) does (ADDRn_CFG).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FilterKind {
    /// 1: trace only inside the ranges (FilterEn).
    Filter,
    /// 2: stop tracing on entering the range (TraceStop).
    Stop,
}

/// One IP range; both ends are inclusive (36.2.4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AddrRange {
    pub kind: FilterKind,
    pub from: u64,
    pub to: u64,
}

/// The recording facts an Intel PT decoder uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PtConfig {
    /// The processor, when known; its errata are in `errata`.
    pub cpu: Option<Cpu>,
    pub errata: Errata,
    /// IA32_RTIT_CTL.MTCFreq: an MTC carries CTC[N+7:N] for N = `mtc_freq`.
    pub mtc_freq: u8,
    /// The maximum non-turbo ratio, `MSR_PLATFORM_INFO[15:8]` (perf's
    /// `max_nonturbo_ratio`; 0 when unknown): with a CBR it calibrates CYC to TSC ticks.
    pub nom_freq: u8,
    /// TSC : core crystal clock ratio, numerator: CPUID.15H:EBX (perf's
    /// `tsc_ctc_ratio_n`). 0 when unknown: MTCs then cannot be turned into time.
    pub tsc_ctc_ratio_n: u32,
    /// Denominator: CPUID.15H:EAX (perf's `tsc_ctc_ratio_d`).
    pub tsc_ctc_ratio_d: u32,
    /// RET compression was on (IA32_RTIT_CTL.DisRETC clear).
    pub ret_compression: bool,
    /// CYC, MTC and TSC packets were enabled.
    pub cyc: bool,
    pub mtc: bool,
    pub tsc: bool,
    /// IP ranges (ADDRn_CFG 1 or 2).
    pub filters: Vec<AddrRange>,
    /// IA32_RTIT_CTL.EventEn: Event Trace was on, so MODE.Exec's IF bit says whether
    /// interrupts are enabled, and its changes are `iflags` events (libipt reports them
    /// when asked, ptxed's `--event:iflags`). CFE and EVD packets are events either way.
    pub event_trace: bool,
}

impl PtConfig {
    /// The settings IA32_RTIT_CTL holds (perf's `intel_pt//` config has the same bits).
    /// The IP ranges' addresses are not in it: add them to `filters`.
    pub fn from_rtit_ctl(v: u64) -> PtConfig {
        PtConfig {
            mtc_freq: ((v & ctl::MTC_FREQ_MASK) >> ctl::MTC_FREQ_SHIFT) as u8,
            ret_compression: v & ctl::DIS_RETC == 0,
            cyc: v & ctl::CYC_EN != 0,
            mtc: v & ctl::MTC_EN != 0,
            tsc: v & ctl::TSC_EN != 0,
            event_trace: v & ctl::EVENT_EN != 0,
            ..PtConfig::default()
        }
    }

    /// ADDRn_CFG of IA32_RTIT_CTL for range `n` (0..4): 0 off, 1 filter, 2 stop.
    pub fn addr_cfg(rtit_ctl: u64, n: u32) -> u8 {
        ((rtit_ctl >> (ctl::ADDR_CFG_SHIFT + 4 * n)) & 0xF) as u8
    }

    /// Set the processor, and its errata from the table (an unknown processor gets
    /// none, and the error says so).
    pub fn set_cpu(&mut self, cpu: Cpu) -> Result<(), super::cpu::UnknownCpu> {
        self.cpu = Some(cpu);
        let e = Errata::for_cpu(&cpu);
        self.errata = e.unwrap_or_default();
        e.map(|_| ())
    }

    /// TSC ticks for `ctc` core crystal clock ticks: `ctc * n / d` (36.8.3.1, P =
    /// CPUID.15H:EBX / EAX). `None` without the ratio.
    pub fn ctc_to_tsc(&self, ctc: u64) -> Option<u64> {
        if self.tsc_ctc_ratio_n == 0 || self.tsc_ctc_ratio_d == 0 {
            return None;
        }
        Some(ctc.wrapping_mul(self.tsc_ctc_ratio_n as u64) / self.tsc_ctc_ratio_d as u64)
    }

    /// Whether an address is traced by the IP ranges (36.2.4.3): not in a stop range,
    /// and in a filter range when there is any.
    pub fn ip_in_filter(&self, ip: u64) -> bool {
        let inside = |k: FilterKind| {
            self.filters
                .iter()
                .any(|r| r.kind == k && r.from <= ip && ip <= r.to)
        };
        if inside(FilterKind::Stop) {
            return false;
        }
        !self.filters.iter().any(|r| r.kind == FilterKind::Filter) || inside(FilterKind::Filter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdm_36_2_7_2_rtit_ctl_fields() {
        // perf's default intel_pt// config: branch, tsc, mtc (period 3), no cyc.
        let v = ctl::BRANCH_EN | ctl::TSC_EN | ctl::MTC_EN | (3 << ctl::MTC_FREQ_SHIFT);
        let c = PtConfig::from_rtit_ctl(v);
        assert_eq!(c.mtc_freq, 3);
        assert!(c.tsc && c.mtc && !c.cyc && c.ret_compression);
        assert!(!PtConfig::from_rtit_ctl(ctl::DIS_RETC).ret_compression);
        assert_eq!(PtConfig::addr_cfg(0x21 << 32, 0), 1);
        assert_eq!(PtConfig::addr_cfg(0x21 << 32, 1), 2);
    }

    #[test]
    fn sdm_36_2_4_3_ip_ranges_are_inclusive() {
        let mut c = PtConfig::default();
        assert!(c.ip_in_filter(5));
        c.filters.push(AddrRange {
            kind: FilterKind::Filter,
            from: 0x1000,
            to: 0x1fff,
        });
        c.filters.push(AddrRange {
            kind: FilterKind::Stop,
            from: 0x1800,
            to: 0x1800,
        });
        assert!(c.ip_in_filter(0x1000) && c.ip_in_filter(0x1fff));
        assert!(!c.ip_in_filter(0x2000) && !c.ip_in_filter(0x1800));
    }

    #[test]
    fn sdm_36_8_3_1_ctc_to_tsc_uses_cpuid_15h() {
        let mut c = PtConfig::default();
        assert_eq!(c.ctc_to_tsc(10), None);
        c.tsc_ctc_ratio_n = 4;
        c.tsc_ctc_ratio_d = 1;
        assert_eq!(c.ctc_to_tsc(10), Some(40));
    }
}
