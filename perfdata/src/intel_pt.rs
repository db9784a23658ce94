//! Intel PT's AUXTRACE_INFO: the private `u64` array perf's `intel_pt` recorder fills
//! (tools/perf/util/intel-pt.h, the `INTEL_PT_*` indices; read the way
//! `intel_pt_process_auxtrace_info` reads it), and what it says about a config.
//!
//! The `*_bit` entries are masks of `perf_event_attr.config` bits (the PMU's `format/`
//! files: `tsc` is `config:10`, so `tsc_bit` is `1 << 10`), not bit numbers.

use crate::cursor::u64_at;
use crate::error::Error;
use crate::record::{AuxtraceInfo, AUXTRACE_INTEL_PT};

/// Indices of the private array.
pub mod index {
    pub const PMU_TYPE: usize = 0;
    pub const TIME_SHIFT: usize = 1;
    pub const TIME_MULT: usize = 2;
    pub const TIME_ZERO: usize = 3;
    pub const CAP_USER_TIME_ZERO: usize = 4;
    pub const TSC_BIT: usize = 5;
    pub const NORETCOMP_BIT: usize = 6;
    pub const HAVE_SCHED_SWITCH: usize = 7;
    pub const SNAPSHOT_MODE: usize = 8;
    pub const PER_CPU_MMAPS: usize = 9;
    pub const MTC_BIT: usize = 10;
    pub const MTC_FREQ_BITS: usize = 11;
    pub const TSC_CTC_N: usize = 12;
    pub const TSC_CTC_D: usize = 13;
    pub const CYC_BIT: usize = 14;
    pub const MAX_NONTURBO_RATIO: usize = 15;
    pub const FILTER_STR_LEN: usize = 16;
    /// Entries of the current layout (the filter string follows them).
    pub const COUNT: usize = 17;
}

/// The MTC and CYC entries (perf 4.3+).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MtcInfo {
    pub mtc_bit: u64,
    pub mtc_freq_bits: u64,
    /// CPUID.15H:EBX and EAX.
    pub tsc_ctc_ratio_n: u32,
    pub tsc_ctc_ratio_d: u32,
    pub cyc_bit: u64,
}

/// Intel PT's recording configuration as perf stored it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IntelPtInfo {
    /// The intel_pt PMU's type: the `perf_event_attr.type` of the traced event.
    pub pmu_type: u32,
    /// TSC to perf time (`perf_event_mmap_page`'s fields; see [`PerfClock`]).
    pub time_shift: u16,
    pub time_mult: u32,
    pub time_zero: u64,
    pub cap_user_time_zero: bool,
    pub tsc_bit: u64,
    pub noretcomp_bit: u64,
    /// 0 none, 1 the sched:sched_switch tracepoint, 2 `context_switch` records
    /// (SWITCH / SWITCH_CPU_WIDE).
    pub have_sched_switch: u64,
    pub snapshot_mode: bool,
    /// One AUX area per CPU (else per thread).
    pub per_cpu_mmaps: bool,
    /// Absent in files of perf before 4.3.
    pub mtc: Option<MtcInfo>,
    /// `MSR_PLATFORM_INFO[15:8]`; absent before perf 4.6.
    pub max_nonturbo_ratio: Option<u32>,
    /// The address filter string (`--filter`); `None` when the entry is absent, empty
    /// when no filter was set.
    pub filter: Option<Vec<u8>>,
}

/// What an `intel_pt` event's config turned on, by the masks AUXTRACE_INFO gives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PtSettings {
    pub tsc: bool,
    pub ret_compression: bool,
    /// `None` when the file does not say (no MTC entries).
    pub mtc: Option<bool>,
    pub cyc: Option<bool>,
    /// IA32_RTIT_CTL.MTCFreq.
    pub mtc_freq: Option<u8>,
}

impl IntelPtInfo {
    /// Read the private array of `info` (found at file offset `at`), checking its type,
    /// its length and the filter string's length and terminator.
    pub fn parse(info: &AuxtraceInfo<'_>, at: u64) -> Result<IntelPtInfo, Error> {
        const W: &str = "Intel PT AUXTRACE_INFO";
        if info.kind != AUXTRACE_INTEL_PT {
            return Err(Error::invalid(
                at + 8,
                "AUXTRACE_INFO type",
                format!("{}, not Intel PT ({AUXTRACE_INTEL_PT})", info.kind),
            ));
        }
        let p = info.private;
        let n = p.len() / 8;
        if n <= index::PER_CPU_MMAPS {
            return Err(Error::truncated(
                at + 16,
                W,
                8 * (index::PER_CPU_MMAPS as u64 + 1),
                p.len() as u64,
            ));
        }
        let e = |i: usize| u64_at(p, 8 * i);
        let mut r = IntelPtInfo {
            pmu_type: e(index::PMU_TYPE) as u32,
            time_shift: e(index::TIME_SHIFT) as u16,
            time_mult: e(index::TIME_MULT) as u32,
            time_zero: e(index::TIME_ZERO),
            cap_user_time_zero: e(index::CAP_USER_TIME_ZERO) != 0,
            tsc_bit: e(index::TSC_BIT),
            noretcomp_bit: e(index::NORETCOMP_BIT),
            have_sched_switch: e(index::HAVE_SCHED_SWITCH),
            snapshot_mode: e(index::SNAPSHOT_MODE) != 0,
            per_cpu_mmaps: e(index::PER_CPU_MMAPS) != 0,
            ..IntelPtInfo::default()
        };
        if n > index::CYC_BIT {
            r.mtc = Some(MtcInfo {
                mtc_bit: e(index::MTC_BIT),
                mtc_freq_bits: e(index::MTC_FREQ_BITS),
                tsc_ctc_ratio_n: e(index::TSC_CTC_N) as u32,
                tsc_ctc_ratio_d: e(index::TSC_CTC_D) as u32,
                cyc_bit: e(index::CYC_BIT),
            });
        }
        if n > index::MAX_NONTURBO_RATIO {
            r.max_nonturbo_ratio = Some(e(index::MAX_NONTURBO_RATIO) as u32);
        }
        if n > index::FILTER_STR_LEN {
            let len = e(index::FILTER_STR_LEN);
            let len_at = at + 16 + 8 * index::FILTER_STR_LEN as u64;
            let room = (p.len() - 8 * index::COUNT) as u64;
            if len == 0 {
                r.filter = Some(Vec::new());
            } else {
                // The string and its NUL, padded to 8 bytes.
                let padded = len
                    .checked_add(1 + 7)
                    .map(|x| x & !7)
                    .filter(|&x| x <= room)
                    .ok_or_else(|| {
                        Error::invalid(
                            len_at,
                            "Intel PT filter string length",
                            format!("{len} bytes do not fit the {room} after the array"),
                        )
                    })?;
                let s = &p[8 * index::COUNT..8 * index::COUNT + padded as usize];
                if s[padded as usize - 1] != 0 || s[..len as usize].contains(&0) {
                    return Err(Error::invalid(
                        len_at,
                        "Intel PT filter string",
                        format!("not {len} bytes and a NUL"),
                    ));
                }
                r.filter = Some(s[..len as usize].to_vec());
            }
        }
        Ok(r)
    }

    /// The private array's bytes (for writers): the full current layout, the filter
    /// string padded with NULs to 8 bytes.
    pub fn to_private(&self) -> Vec<u8> {
        let m = self.mtc.unwrap_or_default();
        let filter = self.filter.as_deref().unwrap_or(&[]);
        let mut v = Vec::new();
        for x in [
            self.pmu_type as u64,
            self.time_shift as u64,
            self.time_mult as u64,
            self.time_zero,
            self.cap_user_time_zero as u64,
            self.tsc_bit,
            self.noretcomp_bit,
            self.have_sched_switch,
            self.snapshot_mode as u64,
            self.per_cpu_mmaps as u64,
            m.mtc_bit,
            m.mtc_freq_bits,
            m.tsc_ctc_ratio_n as u64,
            m.tsc_ctc_ratio_d as u64,
            m.cyc_bit,
            self.max_nonturbo_ratio.unwrap_or(0) as u64,
            filter.len() as u64,
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        if !filter.is_empty() {
            v.extend_from_slice(filter);
            v.resize((v.len() + 1).next_multiple_of(8), 0);
        }
        v
    }

    /// What `config` (the intel_pt event's `perf_event_attr.config`) turned on.
    pub fn settings(&self, config: u64) -> PtSettings {
        let on = |mask: u64| mask != 0 && config & mask != 0;
        PtSettings {
            tsc: on(self.tsc_bit),
            ret_compression: !on(self.noretcomp_bit),
            mtc: self.mtc.map(|m| on(m.mtc_bit)),
            cyc: self.mtc.map(|m| on(m.cyc_bit)),
            mtc_freq: self.mtc.map(|m| {
                if m.mtc_freq_bits == 0 {
                    0
                } else {
                    ((config & m.mtc_freq_bits) >> m.mtc_freq_bits.trailing_zeros()) as u8
                }
            }),
        }
    }

    /// The TSC to perf time conversion this array carries.
    pub fn clock(&self) -> PerfClock {
        PerfClock {
            time_shift: self.time_shift as u32,
            time_mult: self.time_mult as u64,
            time_zero: self.time_zero,
            short: None,
        }
    }
}

/// TSC ticks to perf time (ns) and back, as perf's `tsc_to_perf_time` and
/// `perf_time_to_tsc` do it (from a TIME_CONV record or AUXTRACE_INFO).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerfClock {
    pub time_shift: u32,
    pub time_mult: u64,
    pub time_zero: u64,
    /// `cap_user_time_short`: `(time_cycles, time_mask)`; the counter is that short.
    pub short: Option<(u64, u64)>,
}

impl PerfClock {
    pub fn from_time_conv(t: &crate::record::TimeConv) -> PerfClock {
        PerfClock {
            time_shift: t.time_shift as u32,
            time_mult: t.time_mult,
            time_zero: t.time_zero,
            short: t
                .ext
                .filter(|e| e.cap_user_time_short)
                .map(|e| (e.time_cycles, e.time_mask)),
        }
    }

    /// perf time of a TSC value. Wrapping, as the kernel's arithmetic is.
    pub fn tsc_to_perf_time(&self, tsc: u64) -> u64 {
        let shift = self.time_shift.min(63);
        let tsc = match self.short {
            Some((cycles, mask)) => cycles.wrapping_add(tsc.wrapping_sub(cycles) & mask),
            None => tsc,
        };
        let quot = tsc >> shift;
        let rem = tsc & ((1u64 << shift) - 1);
        self.time_zero
            .wrapping_add(quot.wrapping_mul(self.time_mult))
            .wrapping_add(rem.wrapping_mul(self.time_mult) >> shift)
    }

    /// The TSC value of a perf time (the inverse, to within one tick); `None` without a
    /// multiplier.
    pub fn perf_time_to_tsc(&self, ns: u64) -> Option<u64> {
        if self.time_mult == 0 {
            return None;
        }
        let shift = self.time_shift.min(63);
        let t = ns.wrapping_sub(self.time_zero);
        let quot = t / self.time_mult;
        let rem = t % self.time_mult;
        Some((quot << shift).wrapping_add((rem << shift) / self.time_mult))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> IntelPtInfo {
        IntelPtInfo {
            pmu_type: 8,
            time_shift: 10,
            time_mult: 512,
            time_zero: 1_000_000,
            cap_user_time_zero: true,
            tsc_bit: 1 << 10,
            noretcomp_bit: 1 << 11,
            have_sched_switch: 2,
            snapshot_mode: false,
            per_cpu_mmaps: true,
            mtc: Some(MtcInfo {
                mtc_bit: 1 << 9,
                mtc_freq_bits: 0xf << 14,
                tsc_ctc_ratio_n: 84,
                tsc_ctc_ratio_d: 2,
                cyc_bit: 1 << 1,
            }),
            max_nonturbo_ratio: Some(21),
            filter: Some(Vec::new()),
        }
    }

    fn wrap(i: &IntelPtInfo) -> Vec<u8> {
        i.to_private()
    }

    #[test]
    fn round_trips_with_and_without_a_filter() {
        let i = info();
        let p = wrap(&i);
        assert_eq!(p.len(), 17 * 8);
        let a = AuxtraceInfo {
            kind: AUXTRACE_INTEL_PT,
            private: &p,
        };
        assert_eq!(IntelPtInfo::parse(&a, 0).unwrap(), i);
        let mut f = info();
        f.filter = Some(b"filter main @ /bin/ls".to_vec());
        let p = wrap(&f);
        assert_eq!(p.len(), 17 * 8 + 24, "21 bytes and a NUL, padded to 24");
        let a = AuxtraceInfo {
            kind: AUXTRACE_INTEL_PT,
            private: &p,
        };
        assert_eq!(IntelPtInfo::parse(&a, 0).unwrap(), f);
    }

    #[test]
    fn older_layouts_lack_the_later_entries() {
        let p = wrap(&info());
        let a = AuxtraceInfo {
            kind: AUXTRACE_INTEL_PT,
            private: &p[..10 * 8],
        };
        let r = IntelPtInfo::parse(&a, 0).unwrap();
        assert_eq!((r.mtc, r.max_nonturbo_ratio, r.filter), (None, None, None));
        assert!(r.per_cpu_mmaps);
        let a = AuxtraceInfo {
            kind: AUXTRACE_INTEL_PT,
            private: &p[..9 * 8],
        };
        assert_eq!(IntelPtInfo::parse(&a, 100).unwrap_err().offset(), 116);
    }

    #[test]
    fn bad_type_and_bad_filters_are_errors() {
        let mut p = wrap(&info());
        let a = AuxtraceInfo {
            kind: 3,
            private: &p,
        };
        assert!(IntelPtInfo::parse(&a, 0)
            .unwrap_err()
            .to_string()
            .contains("not Intel PT"));
        // A filter length past the record.
        p[16 * 8] = 9;
        let a = AuxtraceInfo {
            kind: AUXTRACE_INTEL_PT,
            private: &p,
        };
        let e = IntelPtInfo::parse(&a, 0).unwrap_err();
        assert_eq!(e.offset(), 16 + 16 * 8);
        p[16 * 8..16 * 8 + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        let a = AuxtraceInfo {
            kind: AUXTRACE_INTEL_PT,
            private: &p,
        };
        assert!(IntelPtInfo::parse(&a, 0).is_err());
        // Eight bytes of string with no NUL inside the padding.
        p[16 * 8..16 * 8 + 8].copy_from_slice(&8u64.to_le_bytes());
        p.extend_from_slice(&[b'x'; 16]);
        let a = AuxtraceInfo {
            kind: AUXTRACE_INTEL_PT,
            private: &p,
        };
        assert!(IntelPtInfo::parse(&a, 0)
            .unwrap_err()
            .to_string()
            .contains("NUL"));
    }

    #[test]
    fn settings_follow_the_masks() {
        let i = info();
        let s = i.settings((1 << 10) | (1 << 9) | (3 << 14) | (1 << 13));
        assert_eq!(
            s,
            PtSettings {
                tsc: true,
                ret_compression: true,
                mtc: Some(true),
                cyc: Some(false),
                mtc_freq: Some(3)
            }
        );
        assert!(!i.settings(1 << 11).ret_compression);
    }

    #[test]
    fn clock_matches_perf_arithmetic_and_inverts() {
        let c = info().clock();
        // 512 / 1024: half a nanosecond per tick.
        assert_eq!(c.tsc_to_perf_time(0), 1_000_000);
        assert_eq!(c.tsc_to_perf_time(2_000), 1_001_000);
        assert_eq!(c.tsc_to_perf_time(2_001), 1_001_000);
        for tsc in [0u64, 1, 2, 1023, 1024, 123_456_789, 1 << 40] {
            let t = c.perf_time_to_tsc(c.tsc_to_perf_time(tsc)).unwrap();
            assert!(tsc.abs_diff(t) <= 1, "{tsc} -> {t}");
        }
        // A short counter: only the low bits of the TSC count past time_cycles.
        let s = PerfClock {
            short: Some((0x1000, 0xff)),
            ..c
        };
        assert_eq!(s.tsc_to_perf_time(0x1010), s.tsc_to_perf_time(0x7710));
        assert_eq!(PerfClock::default().perf_time_to_tsc(5), None);
    }
}
