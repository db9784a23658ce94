//! The clocks of an execution traced by Intel PT, for [`crate::pt_encode`]: what its
//! TSC, TMA, MTC, CYC and CBR packets say (SDM 36.8.3, `intel-pt-sdm-ch36-processor-trace.txt`),
//! and the true time stamp counter each retired branch is compared with.
//!
//! Three clocks, as 36.8.3 relates them:
//!
//! - the **core clock** runs at the core:bus ratio (`core_ratio`, what CBR says); each
//!   step of the execution takes the cycles of the CPI model the RTIT model uses
//!   ([`crate::model`]), and a syscall or interrupt under user-only tracing spends
//!   `kernel_cycles` while tracing is off (the cycle counter runs on through them,
//!   36.3.6.1);
//! - the **time stamp counter** runs at the maximum non-turbo ratio (`nom_ratio`,
//!   MSR_PLATFORM_INFO[15:8]): a core cycle is `nom_ratio / core_ratio` ticks;
//! - the **core crystal clock** (CTC) runs `P = ctc_ratio.0 / ctc_ratio.1` times slower
//!   than the TSC (CPUID.15H EBX / EAX): CTC = TSC / P, with no software offset.
//!
//! The packets (each rule also in the encoder's module doc):
//!
//! - **TSC** (36.4.2.11, `tsc`): in every PSB+, right after the PSB, with the TSC then;
//!   **TMA** (36.4.2.13) right after it when MTC is on too: CTC[15:0] then and the TSC
//!   ticks since that CTC tick began (FastCounter), as libipt reads it (the TSC at the
//!   CTC edge is the TSC less FastCounter);
//! - **CBR** (36.4.2.10) in every PSB+: `core_ratio`;
//! - **MTC** (36.4.2.12, `mtc_freq = Some(N)`): whenever CTC[N+7:N] changes, at the
//!   moment it does, wherever the execution is (inside a step, while tracing is off);
//!   none while an overflow drops packets;
//! - **CYC** (36.3.6, `cyc`, CycThresh 0): the core cycles since the last CYC, before
//!   every CYC-eligible packet the encoder sends (TIP, TIP.PGE, TIP.PGD, MODE.Exec, OVF,
//!   MTC, TSC) unless no cycle passed since the last CYC (one CYC per cycle); a TNT's
//!   CYC goes out when its first branch retires (36.3.6.2: it dates the first branch in
//!   the packet), not when the TNT is written.

use tracemill_decode::pt::packet::Packet;
use tracemill_decode::pt::PtConfig;

use crate::rng::Rng;

/// The clocks and timing packets of [`crate::pt_encode::PtOptions::timing`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PtTiming {
    /// Seeds the cycles each step and each kernel stretch takes.
    pub seed: u64,
    /// The TSC when the execution begins.
    pub tsc_start: u64,
    /// The ratio the TSC runs at (MSR_PLATFORM_INFO[15:8], perf's `max_nonturbo_ratio`).
    pub nom_ratio: u8,
    /// The core:bus ratio the core runs at (CBR's payload).
    pub core_ratio: u8,
    /// CPUID.15H EBX and EAX: TSC ticks per core crystal clock tick, as a fraction.
    pub ctc_ratio: (u32, u32),
    /// TSC and TMA packets (IA32_RTIT_CTL.TSCEn).
    pub tsc: bool,
    /// MTC packets with MTCFreq N (IA32_RTIT_CTL.MTCEn, MTCFreq).
    pub mtc_freq: Option<u8>,
    /// CYC packets (IA32_RTIT_CTL.CYCEn, CycThresh 0).
    pub cyc: bool,
    /// Core cycles spent in the kernel on a syscall or an interrupt under user-only
    /// tracing (uniform in this range).
    pub kernel_cycles: (u64, u64),
}

impl Default for PtTiming {
    /// A Skylake server's figures (the DynamoRIO recording in
    /// datasets/fixtures/pt-hardware: nominal ratio 37, CPUID.15H 308/2), the core at
    /// ratio 30, every timing packet on, MTC every 2^3 crystal ticks.
    fn default() -> Self {
        PtTiming {
            seed: 1,
            tsc_start: 0x2f_a108_8fac_05e2,
            nom_ratio: 37,
            core_ratio: 30,
            ctc_ratio: (308, 2),
            tsc: true,
            mtc_freq: Some(3),
            cyc: true,
            kernel_cycles: (2_000, 20_000),
        }
    }
}

impl PtTiming {
    /// What a decoder must be told of these clocks (perf's AUXTRACE_INFO and config, a
    /// bundle's `[pt]` table, ptxed's `--mtc-freq`, `--nom-freq`, `--cpuid-0x15.*`).
    pub fn configure(&self, cfg: &mut PtConfig) {
        cfg.tsc = self.tsc;
        cfg.mtc = self.mtc_freq.is_some();
        cfg.mtc_freq = self.mtc_freq.unwrap_or(0);
        cfg.cyc = self.cyc;
        cfg.nom_freq = self.nom_ratio;
        cfg.tsc_ctc_ratio_n = self.ctc_ratio.0;
        cfg.tsc_ctc_ratio_d = self.ctc_ratio.1;
    }

    /// IA32_RTIT_CTL's timing bits: CYCEn, MTCEn, TSCEn, MTCFreq.
    pub fn rtit_ctl_bits(&self) -> u64 {
        use tracemill_decode::pt::config::ctl;
        let mut bits = 0;
        if self.cyc {
            bits |= ctl::CYC_EN;
        }
        if let Some(n) = self.mtc_freq {
            bits |= ctl::MTC_EN | ((n as u64) << ctl::MTC_FREQ_SHIFT & ctl::MTC_FREQ_MASK);
        }
        if self.tsc {
            bits |= ctl::TSC_EN;
        }
        bits
    }

    /// TSC ticks in one MTC period (2^N crystal ticks), rounded up; `None` without MTC.
    pub fn mtc_period(&self) -> Option<u64> {
        let (n, d) = (self.ctc_ratio.0 as u64, self.ctc_ratio.1.max(1) as u64);
        self.mtc_freq.map(|f| (n << f).div_ceil(d))
    }
}

/// The clocks as the execution runs.
pub(crate) struct Clocks {
    pub t: PtTiming,
    rng: Rng,
    /// TSC × `core_ratio`: a core cycle adds `nom_ratio` (exact, no rounding drift).
    acc: u128,
    /// Core cycles since the last CYC packet.
    since_cyc: u64,
    /// CTC[N+7:N] when it last changed (the MTC due when it changes again).
    mtc_bits: Option<u8>,
}

impl Clocks {
    pub fn new(t: PtTiming) -> Clocks {
        let mut c = Clocks {
            t,
            rng: Rng::new(t.seed),
            acc: t.tsc_start as u128 * t.core_ratio.max(1) as u128,
            since_cyc: 0,
            mtc_bits: None,
        };
        c.mtc_bits = c.ctc_bits();
        c
    }

    /// The TSC now.
    pub fn tsc(&self) -> u64 {
        (self.acc / self.t.core_ratio.max(1) as u128) as u64
    }

    /// The core crystal clock now (CTC = TSC / P).
    fn ctc(&self) -> u64 {
        let (n, d) = self.ratio();
        (self.tsc() as u128 * d / n) as u64
    }

    fn ratio(&self) -> (u128, u128) {
        (
            self.t.ctc_ratio.0.max(1) as u128,
            self.t.ctc_ratio.1.max(1) as u128,
        )
    }

    /// CTC[N+7:N], the bits an MTC carries.
    fn ctc_bits(&self) -> Option<u8> {
        self.t.mtc_freq.map(|n| (self.ctc() >> n) as u8)
    }

    /// Cycles a step of `insns` instructions ending in a branch (or not) takes.
    pub fn step_cycles(&mut self, insns: u32, branch: bool) -> u64 {
        crate::model::step_cycles(self.rng.next_u64(), insns, branch)
    }

    /// Cycles spent in the kernel on a syscall or an interrupt.
    pub fn kernel_cycles(&mut self) -> u64 {
        let (a, b) = self.t.kernel_cycles;
        self.rng.range(a, b)
    }

    /// Let up to `cycles` core cycles pass, stopping where CTC[N+7:N] changes: the
    /// cycles that passed, and the MTC payload due then (if one is).
    pub fn run(&mut self, cycles: u64) -> (u64, Option<u8>) {
        let nom = self.t.nom_ratio.max(1) as u128;
        let step = match self.t.mtc_freq {
            None => cycles,
            Some(f) => {
                // The TSC at the next change of CTC[N+7:N], and the cycles until it.
                let (n, d) = self.ratio();
                let next_ctc = ((self.ctc() >> f) + 1) << f;
                let edge_tsc = (next_ctc as u128 * n).div_ceil(d);
                let edge_acc = edge_tsc * self.t.core_ratio.max(1) as u128;
                let need = edge_acc.saturating_sub(self.acc).div_ceil(nom).max(1);
                cycles.min(need.min(u64::MAX as u128) as u64)
            }
        };
        self.acc += step as u128 * nom;
        self.since_cyc += step;
        let bits = self.ctc_bits();
        let mtc = if bits != self.mtc_bits {
            self.mtc_bits = bits;
            bits
        } else {
            None
        };
        (step, mtc)
    }

    /// The CYC that goes out before `p` (36.3.6): for a CYC-eligible packet, when cycles
    /// passed since the last CYC. TNT is not here: its CYC is sent at its first branch
    /// ([`Clocks::cyc_now`]).
    pub fn cyc_before(&mut self, p: &Packet) -> Option<Packet> {
        let eligible = matches!(
            p,
            Packet::Tip(_)
                | Packet::TipPge(_)
                | Packet::TipPgd(_)
                | Packet::ModeExec(_)
                | Packet::ModeTsx(_)
                | Packet::Pip { .. }
                | Packet::Vmcs(_)
                | Packet::Ovf
                | Packet::Mtc(_)
                | Packet::Tsc(_)
        );
        if eligible {
            self.cyc_now()
        } else {
            None
        }
    }

    /// A CYC for the cycles since the last one, if any passed and CYC is on.
    pub fn cyc_now(&mut self) -> Option<Packet> {
        if !self.t.cyc || self.since_cyc == 0 {
            return None;
        }
        Some(Packet::Cyc(std::mem::take(&mut self.since_cyc)))
    }

    /// The status a PSB+ carries (36.3.7): TSC and TMA (when on), CBR.
    pub fn psb_status(&self) -> Vec<Packet> {
        let mut v = Vec::new();
        if self.t.tsc {
            let tsc = self.tsc();
            v.push(Packet::Tsc(tsc & 0xFF_FFFF_FFFF_FFFF));
            if self.t.mtc_freq.is_some() {
                // FastCounter: TSC ticks since the crystal tick began (libipt subtracts
                // it from the TSC to find the TSC at the CTC edge TMA names).
                let (n, d) = self.ratio();
                let ctc = self.ctc();
                let edge = (ctc as u128 * n / d) as u64;
                v.push(Packet::Tma {
                    ctc: ctc as u16,
                    fc: (tsc - edge).min(0x1FF) as u16,
                });
            }
        }
        v.push(Packet::Cbr(self.t.core_ratio));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> PtTiming {
        PtTiming {
            tsc_start: 1000,
            nom_ratio: 20,
            core_ratio: 10,
            ctc_ratio: (4, 1),
            mtc_freq: Some(0),
            ..PtTiming::default()
        }
    }

    /// 36.8.3: a core cycle is nom/core TSC ticks; CTC = TSC / P; an MTC is due whenever
    /// CTC[N+7:N] changes, and `run` stops exactly there.
    #[test]
    fn sdm_36_8_3_clocks_and_mtc_edges() {
        let mut c = Clocks::new(timing());
        assert_eq!((c.tsc(), c.ctc()), (1000, 250));
        // 2 TSC ticks a cycle, 4 ticks a CTC tick: the next CTC edge (251, TSC 1004) is 2
        // cycles away.
        assert_eq!(c.run(100), (2, Some(251)));
        assert_eq!(c.tsc(), 1004);
        assert_eq!(c.run(1), (1, None));
        assert_eq!(c.run(100), (1, Some(252)));
        // Without MTC the cycles pass at once.
        let mut c = Clocks::new(PtTiming {
            mtc_freq: None,
            ..timing()
        });
        assert_eq!(c.run(100), (100, None));
        assert_eq!(c.tsc(), 1200);
    }

    /// 36.3.6: one CYC with the cycles since the last before a CYC-eligible packet, none
    /// when no cycle passed or for packets that are not eligible (FUP, PSB, CBR).
    #[test]
    fn sdm_36_3_6_cyc_before_eligible_packets() {
        let mut c = Clocks::new(timing());
        c.run(1);
        c.run(1);
        let fup = Packet::Fup(tracemill_decode::pt::packet::IpPayload {
            compression: tracemill_decode::pt::packet::IpCompression::Suppressed,
            bits: 0,
        });
        assert_eq!(c.cyc_before(&fup), None);
        assert_eq!(c.cyc_before(&Packet::Mtc(0)), Some(Packet::Cyc(2)));
        assert_eq!(c.cyc_before(&Packet::Mtc(0)), None, "the same cycle");
    }

    /// 36.4.2.13: the TMA's CTC is CTC[15:0] at the TSC, and TSC - FastCounter is the TSC
    /// at that CTC tick's edge.
    #[test]
    fn sdm_36_4_2_13_tma_aligns_the_tsc_with_the_ctc() {
        let mut c = Clocks::new(PtTiming {
            tsc_start: 1001,
            ..timing()
        });
        c.run(0);
        assert_eq!(
            c.psb_status(),
            [
                Packet::Tsc(1001),
                Packet::Tma { ctc: 250, fc: 1 },
                Packet::Cbr(10)
            ]
        );
    }
}
