//! The trace configuration, decoded from the RTIT_CTL value (spec 3.3.2, Table 4).
//!
//! Only two fields change how bytes parse: `Cycle_Acc` (a CYC packet, which has no header,
//! follows full TNT, TIP, FUP, PIP, MTC and STS) and `MTC_Range` (which TSC bits an MTC
//! carries). The rest describe what the hardware was allowed to emit and are reported.

/// RTIT_CTL bits (spec Table 4).
pub mod ctl {
    pub const TRACE_EN: u64 = 1 << 0;
    pub const CYCLE_ACC: u64 = 1 << 1;
    pub const OS: u64 = 1 << 2;
    pub const USER: u64 = 1 << 3;
    pub const STS_ON_CR3: u64 = 1 << 4;
    pub const CR3_EN: u64 = 1 << 7;
    pub const DEST: u64 = 1 << 8;
    pub const MTC_EN: u64 = 1 << 9;
    pub const STS_EN: u64 = 1 << 10;
    pub const CMPRS_RET: u64 = 1 << 11;
    pub const LESS_PKTS: u64 = 1 << 12;
    pub const TRACE_ACTIVE: u64 = 1 << 13;
    pub const MTC_RANGE_SHIFT: u32 = 14;
    pub const MTC_RANGE_MASK: u64 = 0b11 << MTC_RANGE_SHIFT;
    /// Bits 6:5 and 31:16 are reserved; a write that sets them faults (#GP).
    pub const RESERVED: u64 = (0b11 << 5) | !0xFFFF;
}

/// What the RTIT_CTL value says about the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceConfig {
    /// The raw RTIT_CTL value, as given.
    pub ctl: u64,
    pub cycle_acc: bool,
    pub os: bool,
    pub user: bool,
    pub sts_on_cr3: bool,
    pub cr3_en: bool,
    pub mtc_en: bool,
    pub sts_en: bool,
    pub cmprs_ret: bool,
    pub less_pkts: bool,
    /// MTC_Range (0..=3): an MTC carries TSC[14+2r : 7+2r].
    pub mtc_range: u8,
}

impl TraceConfig {
    pub fn from_ctl(ctl: u64) -> Self {
        let b = |m: u64| ctl & m != 0;
        TraceConfig {
            ctl,
            cycle_acc: b(ctl::CYCLE_ACC),
            os: b(ctl::OS),
            user: b(ctl::USER),
            sts_on_cr3: b(ctl::STS_ON_CR3),
            cr3_en: b(ctl::CR3_EN),
            mtc_en: b(ctl::MTC_EN),
            sts_en: b(ctl::STS_EN),
            cmprs_ret: b(ctl::CMPRS_RET),
            less_pkts: b(ctl::LESS_PKTS),
            mtc_range: ((ctl & ctl::MTC_RANGE_MASK) >> ctl::MTC_RANGE_SHIFT) as u8,
        }
    }

    /// Reserved bits that are set; real hardware would have refused this value.
    pub fn reserved_bits(&self) -> u64 {
        self.ctl & ctl::RESERVED
    }

    /// Lowest TSC bit carried by an MTC packet (7, 9, 11 or 13).
    pub fn mtc_shift(&self) -> u32 {
        mtc_shift(self.mtc_range)
    }
}

/// Lowest TSC bit carried by an MTC packet of range `rng` (spec 4.2.12).
pub fn mtc_shift(rng: u8) -> u32 {
    7 + 2 * (rng as u32 & 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table4_fields_decode() {
        let c = TraceConfig::from_ctl(
            ctl::TRACE_EN | ctl::CYCLE_ACC | ctl::USER | ctl::MTC_EN | ctl::CMPRS_RET | (2 << 14),
        );
        assert!(c.cycle_acc && c.user && c.mtc_en && c.cmprs_ret);
        assert!(!c.os && !c.sts_en && !c.less_pkts);
        assert_eq!(c.mtc_range, 2);
        assert_eq!(c.mtc_shift(), 11);
        assert_eq!(c.reserved_bits(), 0);
        assert_eq!(
            TraceConfig::from_ctl(1 << 5 | 1 << 20).reserved_bits(),
            1 << 5 | 1 << 20
        );
    }

    #[test]
    fn mtc_range_selects_tsc_bits_per_spec_4_2_12() {
        // 00: TSC[14:7], 01: TSC[16:9], 10: TSC[18:11], 11: TSC[20:13]
        assert_eq!([0, 1, 2, 3].map(mtc_shift), [7, 9, 11, 13]);
    }
}
