//! What the model is asked ([`ModelOptions`], [`OverflowPlan`]) and what it answers
//! ([`Output`]: the trace, its [`Truth`] and [`Summary`]).

use std::collections::BTreeMap;

use tracemill_decode::rows::{BranchColumns, PartialBlock};
use tracemill_decode::rtit::packet::Packet;

/// Overflow windows: how often the internal buffer overflows and for how long.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OverflowPlan {
    /// Steps between overflows (uniform in this range).
    pub every_steps: (u64, u64),
    /// Steps an overflow lasts (uniform in this range).
    pub duration_steps: (u64, u64),
    /// Probability that a spurious TIP follows the FUP.BuffOvf (erratum E5) when the
    /// last branch in the window was indirect.
    pub e5: f64,
}

/// Everything the model can be asked to do.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ModelOptions {
    /// RTIT_CTL (spec 3.3.2).
    pub ctl: u64,
    /// RTIT_PKT_CNT.Pkt_Mask: a PSB every ~2 KiB (0) .. ~16 KiB (3) of packets.
    pub pkt_mask: u8,
    pub seed: u64,
    /// LAST_LIP / LAST_CALL_NLIP are cleared 0..=this many packets after a Pkt_Mask PSB
    /// (3.3.9 guarantees no more than 4).
    pub lazy_clear_max: u8,
    /// Probability that a PSB is delayed by one packet (erratum E3).
    pub e3: f64,
    /// CYC payloads one less than the true count (erratum E6).
    pub e6: bool,
    /// The first MTC after enable is sent at the wrong time (erratum E7).
    pub e7: bool,
    pub overflow: Option<OverflowPlan>,
    /// A TraceStop action before this step (0-based); nothing is traced after it.
    pub trace_stop_at: Option<u64>,
    /// Core frequency changes every so many core cycles (uniform range); each sends an STS.
    pub freq_change_every: Option<(u64, u64)>,
    /// Sleep (C1/C2) every so many cycles: the cycle counter stops, TSC runs on, no MTC,
    /// and an STS on wake.
    pub sleep_every: Option<(u64, u64)>,
    /// Probability per step of a long stall (cycles), long enough to fire FUP.PCC.
    pub stall: Option<(f64, u64)>,
    /// TSC/bus ratio (the bundle's `guaranteed_ratio`).
    pub guaranteed_ratio: u8,
    /// Initial actual core/bus ratio.
    pub core_ratio: u8,
    pub tsc_start: u64,
    /// Time spent in the kernel on a syscall or interrupt, in core cycles (uniform range).
    pub kernel_cycles: (u64, u64),
    /// IP filtering: FilterEn is set while the IP is in `[base, limit)` (RANGE0 with
    /// Filter_Event_ID 0, 2.4.3). FilterEn changes where a branch, far transfer or
    /// interrupt lands; walking across the range ends inside a block is not modelled.
    pub filter: Option<(u64, u64)>,
    /// Keep every packet with its offset (for scenario tests; costs memory).
    pub record_packets: bool,
    /// Keep the ground truth of every row. Off for benchmark traces of many GiB: the
    /// model then keeps only the rows it may still revise.
    #[serde(default = "yes")]
    pub keep_truth: bool,
}

fn yes() -> bool {
    true
}

impl Default for ModelOptions {
    fn default() -> Self {
        use tracemill_decode::rtit::config::ctl::*;
        ModelOptions {
            ctl: TRACE_EN | TRACE_ACTIVE | USER | CMPRS_RET | DEST,
            pkt_mask: 1,
            seed: 1,
            lazy_clear_max: 4,
            e3: 0.0,
            e6: true,
            e7: true,
            overflow: None,
            trace_stop_at: None,
            freq_change_every: None,
            sleep_every: None,
            stall: None,
            guaranteed_ratio: 20,
            core_ratio: 16,
            tsc_start: 0x12_3456_0000,
            kernel_cycles: (2_000, 20_000),
            filter: None,
            record_packets: false,
            keep_truth: true,
        }
    }
}

/// The ground truth of a trace.
#[derive(Clone, Debug, Default)]
pub struct Truth {
    /// Every retired branch while tracing was on, in order, with the `branches` columns.
    /// `tsc` is the true TSC at retirement; `cycles` the true count of cycles the cycle
    /// counter ran for; `offset` the packet that decided the row.
    pub rows: BranchColumns,
    /// Rows no decoder can prove (see the module docs).
    pub lost: Vec<bool>,
    /// Rows whose own packet carries a CYC (TIP, FUP, sixth bit of a full TNT), so a
    /// decoder knows their cycle count exactly.
    pub cyc_exact: Vec<bool>,
    /// Ground truth of each timing packet, by stream offset: (true TSC, true cycles).
    pub timing: Vec<(u64, u64, u64)>,
    /// Number of CYC packets whose payload was 0 while the true count was 1 (E6), before
    /// each row: the decoder's cumulative cycles may lag by this much.
    pub e6_zero_before: Vec<u32>,
    /// The basic block each row closes: its first instruction (an entry: the previous
    /// branch's target, or where tracing resumed) and its instruction count.
    pub block_start: Vec<u64>,
    pub block_insns: Vec<u32>,
    /// Blocks left before their branch (an interrupt or FUP.PGD at an IP inside them),
    /// each with the row whose `insns` carries its instructions: it counts in coverage
    /// when that row is not lost.
    pub partials: Vec<PartialBlock>,
}

/// Counts for `truth/summary.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// Instructions retired while tracing was on.
    pub instructions: u64,
    pub branches: u64,
    pub branches_by_kind: BTreeMap<String, u64>,
    pub packets_by_type: BTreeMap<String, u64>,
    pub psbs: u64,
    pub overflows: u64,
    pub lost_rows: u64,
    pub bytes: u64,
}

/// What the model produced.
pub struct Output {
    pub bytes: Vec<u8>,
    pub truth: Truth,
    pub summary: Summary,
    /// Every packet with its offset, when `record_packets` was set.
    pub packets: Vec<(u64, Packet)>,
}
