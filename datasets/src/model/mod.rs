//! The RTIT hardware model: from an execution (a stream of [`Step`]s), emit exactly the
//! bytes an RTIT unit would, and the ground truth a decoder must reproduce.
//!
//! What it follows (section numbers from the RTIT programming reference v1.05):
//! - Table 19 for which operation emits which packets, with the partial-TNT flush before
//!   FUP, TIP and PIP (4.2.2) and the full TNT after six bits;
//! - LIP compression against RTIT_LAST_LIP with Zext preferred (4.2.3.1, Table 18);
//! - return compression against the single RTIT_LAST_CALL_NLIP (4.2.3.2, Figures 6–7): a
//!   near CALL with PacketEn sets it, a RET to it adds a taken bit instead of a TIP, and the
//!   RET does not consume it;
//! - FUP.PGD / FUP.PGE around syscalls and interrupts under user-only tracing (rows 32–35),
//!   FUP.FAR + TIP when the kernel is traced too;
//! - PSB from Pkt_Cnt/Pkt_Mask with the ordering of the 3.3.9 worked example (the PSB goes
//!   out right after the packet that crossed the monitored bit, before the next one), and
//!   the lazy clearing of LAST_LIP and LAST_CALL_NLIP up to four packets after it;
//! - buffer overflow (4.2.5): packets dropped, cond branches stop filling the TNT buffer,
//!   a full TNT that caused the overflow is held, the pending TNT goes out first, then
//!   FUP.BuffOvf with the compression state cleared before it; MTCs dropped;
//! - timing: MTC on every change of the MTC_Range bits of the TSC, STS at enable, on
//!   frequency changes and on wake from sleep, CYC after full TNT/TIP/FUP/PIP/MTC/STS from
//!   a per-step cycle model, FUP.PCC when CNTP bit 21 is set;
//! - errata as the hardware shows them: E3 (PSB one packet late), E6 (CYC payload one less
//!   than the true count), E7 (first MTC after enable at the wrong time), E5 optional.
//!
//! Every random choice comes from the seed, so output is reproducible byte for byte.
//!
//! The ground truth has one row per retired branch with the columns of the `branches`
//! table, plus `lost` (the row lies in a stretch no decoder can prove: an overflow window,
//! branches whose TNT bits never left the chip, or the undecided tail before such a gap).

use tracemill_decode::block::BlockCache;
use tracemill_decode::image::ImageSet;
use tracemill_decode::insn::InsnClass;
use tracemill_decode::rows::{BranchRow, PartialBlock};
use tracemill_decode::rtit::config::{mtc_shift, TraceConfig};
use tracemill_decode::rtit::packet::{FupKind, IpPayload, Packet, Tnt};

use crate::encode::{compress_ip, cyc, write_packet};
use crate::exec::Step;
use crate::rng::Rng;

mod io;

pub use io::{ModelOptions, Output, OverflowPlan, Summary, Truth};

/// Where the decision for upcoming direct-branch rows comes from.
#[derive(Clone, Copy, Debug)]
enum Decision {
    /// A packet at this offset.
    Known(u64),
    /// The TNT bit of a row whose packet has not been written yet: direct rows inherit
    /// that row's offset once it is known.
    Pending,
}

/// Offset placeholder for rows that take the previous row's offset.
const INHERIT: u64 = u64::MAX;

struct Overflow {
    steps_left: u64,
    /// The last branch in the window was indirect (for E5's spurious TIP).
    last_was_indirect: bool,
}

/// A process for [`Model::run_processes`]: an address space and its execution.
pub struct Process<I> {
    pub cr3: u64,
    pub entry: u64,
    pub steps: I,
}

/// The model.
pub struct Model<'i> {
    cfg: TraceConfig,
    o: ModelOptions,
    rng: Rng,
    images: &'i ImageSet<'i>,
    blocks: BlockCache,
    kernel: Option<&'i Kernel>,

    out: Vec<u8>,
    packets: Vec<(u64, Packet)>,
    summary: Summary,
    truth: Truth,

    // Enables. Executions are user code (CPL 3); the kernel stub runs at CPL 0.
    trigger_en: bool,
    packet_en: bool,
    cpl: u8,
    stopped: bool,

    // Compression state.
    last_lip: Option<u64>,
    last_call: Option<u64>,
    /// Packets left before the lazy clear after a PSB (None: no clear pending).
    clear_in: Option<u8>,

    // PSB scheduling.
    pkt_cnt: u32,
    psb_due: bool,

    // TNT buffer: bits and the truth rows they decide.
    tnt_bits: u8,
    tnt_len: u8,
    tnt_rows: [usize; 6],

    // Overflow.
    ovf: Option<Overflow>,
    ovf_armed: bool,
    next_ovf_step: u64,

    // Time.
    cycles_total: u64,
    cntp: u64,
    /// TSC × core/bus ratio (+ the fraction of a tick): the TSC advances by
    /// `cycles × guaranteed_ratio / core_ratio`, kept in fixed point so that time costs no
    /// division per step.
    acc: u64,
    /// `acc` at the next MTC boundary.
    mtc_next_acc: u64,
    core_ratio: u8,
    eff_ratio: u8,
    mtc_last: Option<u8>,
    next_freq: u64,
    next_sleep: u64,
    e6_zero: u32,

    // Counters for the summary (by packet name index, by branch kind).
    packet_counts: [u64; 14],
    kind_counts: [u64; 8],

    // Truth bookkeeping.
    /// Rows so far (stored in `truth` only with `keep_truth`).
    nrows: usize,
    last_branch_ip: u64,
    /// Where the current basic block began, and its instructions so far.
    entry_ip: u64,
    block_acc: u32,
    /// A FUP.PGE went out at this address and no instruction has retired since.
    fresh_pge: Option<u64>,
    vis_insns: u32,
    decision: Decision,
    /// First row after the last decided one: lost if a gap comes before a decision.
    tail_start: usize,
    /// Where the undecided tail starts executing.
    tail_ip: u64,
    step_no: u64,
    /// Where the next step starts executing.
    cur_ip: u64,
    /// CR3 as the trace tells it (last PIP sent).
    pip_cr3: Option<u64>,
    /// CR3 of the running process.
    cr3: Option<u64>,
}

impl<'i> Model<'i> {
    pub fn new(o: ModelOptions, images: &'i ImageSet<'i>) -> Self {
        let cfg = TraceConfig::from_ctl(o.ctl);
        let mut rng = Rng::new(o.seed);
        let next_ovf_step = o
            .overflow
            .map_or(u64::MAX, |p| rng.range(p.every_steps.0, p.every_steps.1));
        let next_freq = o
            .freq_change_every
            .map_or(u64::MAX, |(a, b)| rng.range(a, b));
        let next_sleep = o.sleep_every.map_or(u64::MAX, |(a, b)| rng.range(a, b));
        Model {
            cfg,
            core_ratio: o.core_ratio,
            eff_ratio: o.core_ratio,
            acc: o.tsc_start * o.core_ratio as u64,
            mtc_next_acc: 0,
            rng,
            images,
            blocks: BlockCache::new(),
            kernel: None,
            out: Vec::new(),
            packets: Vec::new(),
            summary: Summary::default(),
            truth: Truth::default(),
            trigger_en: false,
            packet_en: false,
            cpl: 3,
            stopped: false,
            last_lip: None,
            last_call: None,
            clear_in: None,
            pkt_cnt: 0,
            psb_due: false,
            tnt_bits: 0,
            tnt_len: 0,
            tnt_rows: [0; 6],
            ovf: None,
            ovf_armed: false,
            next_ovf_step,
            cycles_total: 0,
            cntp: 0,
            mtc_last: None,
            next_freq,
            next_sleep,
            e6_zero: 0,
            packet_counts: [0; 14],
            kind_counts: [0; 8],
            nrows: 0,
            last_branch_ip: 0,
            entry_ip: 0,
            block_acc: 0,
            fresh_pge: None,
            vis_insns: 0,
            decision: Decision::Known(0),
            tail_start: 0,
            tail_ip: 0,
            step_no: 0,
            cur_ip: 0,
            pip_cr3: None,
            cr3: None,
            o,
        }
    }

    /// Trace the kernel too: syscalls and interrupts run `kernel`'s code with packets
    /// (FUP.FAR + TIP), and context switches send PIP. Needs RTIT_CTL.OS set.
    pub fn with_kernel(mut self, kernel: &'i Kernel) -> Self {
        self.kernel = Some(kernel);
        self
    }

    /// Run a whole execution that starts at `entry`.
    pub fn run(mut self, entry: u64, steps: impl IntoIterator<Item = Step>) -> Output {
        self.enable(entry);
        let mut it = steps.into_iter().peekable();
        while let Some(s) = it.next() {
            if self.stopped {
                break;
            }
            let exit = if it.peek().is_none() {
                Exit::End
            } else {
                Exit::No
            };
            self.step(&s, exit);
        }
        self.finish()
    }

    /// Run several processes on one traced CPU, switching every `slice` steps (uniform
    /// range) through the kernel's timer interrupt; each switch loads the next process's
    /// CR3 (a PIP) and IRETs into it. A process's exit syscall switches too. Needs a
    /// kernel ([`Model::with_kernel`]) and RTIT_CTL.OS.
    pub fn run_processes<I: Iterator<Item = Step>>(
        mut self,
        procs: Vec<Process<I>>,
        slice: (u64, u64),
    ) -> Output {
        assert!(self.kernel.is_some(), "run_processes needs a kernel");
        assert!(!procs.is_empty());
        let cr3s: Vec<u64> = procs.iter().map(|p| p.cr3).collect();
        let mut resume: Vec<u64> = procs.iter().map(|p| p.entry).collect();
        let mut steps: Vec<_> = procs.into_iter().map(|p| p.steps.peekable()).collect();
        // The trace starts in the kernel, which IRETs into the first process.
        self.enable_in_kernel();
        self.cr3 = Some(cr3s[0]);
        self.switch_to(cr3s[0], resume[0], None);
        let mut cur = 0usize;
        let mut left = self.rng.range(slice.0, slice.1);
        while !self.stopped {
            let Some(s) = steps[cur].next() else {
                // Ran out without an exit syscall: the trace ends here.
                break;
            };
            let last = steps[cur].peek().is_none();
            if last {
                resume[cur] = u64::MAX;
            }
            let next = next_alive(&resume, cur);
            let exit = match (last, next == cur) {
                (false, _) => Exit::No,
                (true, true) => Exit::End,
                (true, false) => Exit::SwitchTo(cr3s[next], resume[next]),
            };
            self.step(&s, exit);
            if last {
                cur = next;
                left = self.rng.range(slice.0, slice.1);
                continue;
            }
            left = left.saturating_sub(1);
            if left == 0 && next != cur {
                left = self.rng.range(slice.0, slice.1);
                resume[cur] = self.cur_ip;
                let from = self.cur_ip;
                cur = next;
                self.switch_to(cr3s[cur], resume[cur], Some(from));
            }
        }
        self.finish()
    }

    // ----- packet output ----------------------------------------------------------------

    /// Emit one packet unit (the packet and, in cycle-accurate mode, its CYC). Returns
    /// false when the packet was dropped by an overflow.
    fn emit(&mut self, p: Packet) -> bool {
        if self.ovf_armed {
            // This packet finds the internal buffer full: the overflow starts now.
            self.start_overflow();
        }
        if self.ovf.is_some() {
            return false;
        }
        self.emit_raw(p);
        true
    }

    /// Write a packet unit with no overflow check.
    fn emit_raw(&mut self, p: Packet) {
        // Lazy clearing of compression state after a PSB (3.3.9).
        if let Some(n) = self.clear_in {
            if n == 0 {
                self.last_lip = None;
                self.last_call = None;
                self.clear_in = None;
            } else {
                self.clear_in = Some(n - 1);
            }
        }
        // IP packets compress against LAST_LIP and update it with the full IP.
        let p = match p {
            Packet::Tip(pl) => {
                let c = compress_ip(pl.bits, self.last_lip);
                self.last_lip = Some(pl.bits);
                Packet::Tip(c)
            }
            Packet::Fup(k, pl) => {
                let c = compress_ip(pl.bits, self.last_lip);
                self.last_lip = Some(pl.bits);
                Packet::Fup(k, c)
            }
            p => p,
        };
        let start = self.out.len();
        self.put(p);
        if self.cfg.cycle_acc && p.takes_cyc() {
            let c = self.take_cyc();
            self.put(c);
        }
        self.pkt_cnt += (self.out.len() - start) as u32;
        // PSB scheduling (3.3.9): the packet whose bytes set the monitored Pkt_Cnt bit is
        // followed by the PSB; Pkt_Cnt is zeroed, then counts the PSB. E3: one packet late.
        if self.psb_due {
            self.psb_due = false;
            self.put_psb();
        } else if self.pkt_cnt & (1 << (11 + self.o.pkt_mask as u32)) != 0 {
            self.pkt_cnt = 0;
            if self.o.e3 > 0.0 && self.rng.chance(self.o.e3) {
                self.psb_due = true;
            } else {
                self.put_psb();
            }
        }
    }

    fn put_psb(&mut self) {
        self.put(Packet::Psb);
        self.pkt_cnt = 9;
        self.summary.psbs += 1;
        // Compression state clears lazily, no more than four packets later.
        let k = self.rng.range(0, self.o.lazy_clear_max.min(4) as u64) as u8;
        self.clear_in = Some(k);
    }

    fn put(&mut self, p: Packet) {
        let off = self.out.len() as u64;
        write_packet(&mut self.out, &p);
        self.packet_counts[packet_index(&p)] += 1;
        if self.o.record_packets {
            self.packets.push((off, p));
        }
        if self.o.keep_truth
            && matches!(
                p,
                Packet::Mtc { .. }
                    | Packet::Sts { .. }
                    | Packet::Cyc { .. }
                    | Packet::Fup(FupKind::Pcc, _)
            )
        {
            let tsc = self.tsc();
            self.truth.timing.push((off, tsc, self.cycles_total));
        }
    }

    /// The CYC for the packet just written: CNTP, then CNTP := 0 (4.2.15). E6: the payload
    /// is one less than the true count.
    fn take_cyc(&mut self) -> Packet {
        let true_count = self.cntp;
        self.cntp = 0;
        let payload = if self.o.e6 {
            if true_count == 1 {
                self.e6_zero += 1;
            }
            true_count.saturating_sub(1)
        } else {
            true_count
        };
        cyc(payload as u32)
    }

    /// Pending TNT bits go out as a (partial) TNT packet: before a FUP, TIP or PIP, or
    /// when six have gathered. During an overflow they are held for FUP.BuffOvf.
    fn flush_tnt(&mut self) {
        if self.tnt_len == 0 {
            return;
        }
        if self.ovf_armed {
            self.start_overflow();
        }
        if self.ovf.is_some() {
            return;
        }
        self.write_tnt();
    }

    fn write_tnt(&mut self) {
        let t = Tnt {
            bits: self.tnt_bits,
            len: self.tnt_len,
        };
        let n = self.tnt_len as usize;
        let rows = self.tnt_rows;
        self.tnt_bits = 0;
        self.tnt_len = 0;
        let off = self.out.len() as u64;
        self.emit_raw(Packet::Tnt(t));
        for &r in &rows[..n] {
            self.set_offset(r, off);
        }
        if rows[n - 1] + 1 > self.tail_start {
            self.tail_start = rows[n - 1] + 1;
            self.tail_ip = self.row_target(rows[n - 1]).unwrap_or(self.cur_ip);
        }
        if t.is_full() && self.cfg.cycle_acc {
            self.set_exact(rows[n - 1], true);
        }
    }

    fn push_tnt(&mut self, taken: bool, row: usize) {
        if self.ovf.is_some() {
            return; // 4.2.5 b): no cond branch updates the TNT buffer during an overflow.
        }
        self.tnt_rows[self.tnt_len as usize] = row;
        self.tnt_bits = (self.tnt_bits << 1) | taken as u8;
        self.tnt_len += 1;
        if self.tnt_len == 6 {
            // A full TNT that meets a full buffer is held, not dropped (4.2.5).
            self.flush_tnt();
        }
    }

    // ----- overflow -------------------------------------------------------------------

    fn start_overflow(&mut self) {
        self.ovf_armed = false;
        let plan = self.o.overflow.expect("overflow armed without a plan");
        let steps = self.rng.range(plan.duration_steps.0, plan.duration_steps.1);
        self.ovf = Some(Overflow {
            steps_left: steps,
            last_was_indirect: false,
        });
        self.summary.overflows += 1;
        // Held TNT bits will still go out: their rows are decided. Rows after them (or
        // after the last decided row) can no longer be proven.
        if self.tnt_len > 0 {
            let last = self.tnt_rows[self.tnt_len as usize - 1];
            self.tail_start = self.tail_start.max(last + 1);
        }
        self.lose_tail();
    }

    /// At an instruction boundary in the traced context: clear an overflow whose time is
    /// up, at `ip` (where execution continues).
    fn maybe_end_overflow(&mut self, ip: u64) {
        let Some(ov) = &self.ovf else { return };
        if ov.steps_left > 0 || !self.context_en(self.cpl) {
            return;
        }
        let e5 = ov.last_was_indirect;
        self.ovf = None;
        // Held TNT bits go out first (partial, or the full one that met the overflow: its
        // CYC is the drain time, not the sixth branch's, and FUP.BuffOvf's CYC is then 0).
        if self.tnt_len > 0 {
            let full = self.tnt_len == 6;
            let sixth = self.tnt_rows[self.tnt_len as usize - 1];
            self.write_tnt();
            if full {
                // write_tnt marked the sixth row exact; under 4.2.5 it is not: its CYC is
                // the time the overflow drained.
                self.set_exact(sixth, false);
            }
        }
        // Compression state is cleared before the overflow packet is sent.
        self.last_lip = None;
        self.last_call = None;
        let off = self.out.len() as u64;
        self.emit_raw(Packet::Fup(FupKind::BuffOvf, ip_payload(ip)));
        self.resume_at(off);
        self.packet_en = true;
        if e5 {
            let p = self.o.overflow.map_or(0.0, |p| p.e5);
            if p > 0.0 && self.rng.chance(p) {
                self.emit_raw(Packet::Tip(ip_payload(ip)));
            }
        }
    }

    /// Tracing resumes after a gap or a disable, decided by the packet at `off`.
    fn resume_at(&mut self, off: u64) {
        self.decision = Decision::Known(off);
        self.tail_start = self.nrows;
        self.tail_ip = self.cur_ip;
        self.enter_block(self.cur_ip);
    }

    /// Mark the undecided tail lost.
    fn lose_tail(&mut self) {
        for r in self.tail_start..self.nrows {
            self.set_lost(r);
        }
        self.tail_start = self.nrows;
    }

    // ----- enables ----------------------------------------------------------------------

    fn context_en(&self, cpl: u8) -> bool {
        if cpl == 0 {
            self.cfg.os
        } else {
            self.cfg.user
        }
    }

    fn filter_en(&self, ip: u64) -> bool {
        self.o.filter.is_none_or(|(b, l)| ip >= b && ip < l)
    }

    fn enable_common(&mut self) {
        self.trigger_en = true;
        // TriggerEn 0->1 sends a PSB (3.3.2); compression state starts clear.
        self.put_psb();
        self.clear_in = None;
        self.emit_sts();
        if self.cfg.mtc_en {
            self.mtc_last = Some(self.mtc_bits());
            if self.o.e7 {
                // E7: the first MTC after enable goes out at the wrong time: here, at once,
                // with the value of the next period.
                let v = self.mtc_bits().wrapping_add(1);
                self.emit(Packet::Mtc {
                    rng: self.cfg.mtc_range,
                    tsc: v,
                });
            }
        }
    }

    fn enable(&mut self, entry: u64) {
        self.enable_common();
        self.cur_ip = entry;
        if self.context_en(self.cpl) && self.filter_en(entry) {
            let off = self.out.len() as u64;
            self.emit(Packet::Fup(FupKind::Pge, ip_payload(entry)));
            self.packet_en = true;
            self.resume_at(off);
        }
    }

    fn enable_in_kernel(&mut self) {
        self.cpl = 0;
        let k = self.kernel.expect("kernel");
        self.enable(k.boot);
    }

    // ----- time -------------------------------------------------------------------------

    /// The TSC now.
    #[inline]
    fn tsc(&self) -> u64 {
        self.acc / self.core_ratio as u64
    }

    fn mtc_bits(&self) -> u8 {
        (self.tsc() >> mtc_shift(self.cfg.mtc_range)) as u8
    }

    /// Where the next MTC boundary is, after the TSC or the ratio jumped.
    fn rebase_mtc(&mut self) {
        let shift = mtc_shift(self.cfg.mtc_range);
        let next = ((self.tsc() >> shift) + 1) << shift;
        self.mtc_next_acc = next * self.core_ratio as u64;
    }

    fn mtc_allowed(&self) -> bool {
        self.cfg.mtc_en && self.trigger_en && (!self.cfg.less_pkts || self.packet_en)
    }

    /// Let `cycles` core cycles pass. `counting`: the cycle counter runs (traced context).
    /// MTCs go out as the TSC bits they carry change (4.2.12).
    #[inline]
    fn advance(&mut self, cycles: u64, counting: bool) {
        let gr = self.o.guaranteed_ratio as u64;
        if !self.mtc_allowed() {
            self.tick(cycles, counting);
            return;
        }
        if self.mtc_next_acc == 0 {
            self.rebase_mtc();
        }
        let mut left = cycles;
        while left > 0 {
            if self.acc + left * gr < self.mtc_next_acc {
                self.tick(left, counting);
                return;
            }
            // Core cycles until the TSC reaches the next MTC boundary. A boundary already
            // behind (it passed while MTCs were off, which `tick` alone does not follow):
            // these cycles all pass, then one MTC goes out for the bits now current. (The
            // subtraction used to wrap here, which a debug build caught as an overflow; the
            // release build's behaviour, which made the samples, is kept.)
            let need = if self.acc > self.mtc_next_acc {
                left
            } else {
                (self.mtc_next_acc - self.acc).div_ceil(gr).clamp(1, left)
            };
            self.tick(need, counting);
            left -= need;
            self.rebase_mtc();
            let v = self.mtc_bits();
            if self.mtc_last != Some(v) {
                self.mtc_last = Some(v);
                self.emit(Packet::Mtc {
                    rng: self.cfg.mtc_range,
                    tsc: v,
                });
            }
        }
    }

    #[inline]
    fn tick(&mut self, cycles: u64, counting: bool) {
        if counting {
            self.cntp += cycles;
            self.cycles_total += cycles;
        }
        // The TSC runs at the guaranteed ratio, the core at its actual ratio.
        self.acc += cycles * self.o.guaranteed_ratio as u64;
    }

    fn emit_sts(&mut self) {
        if !self.cfg.sts_en || !self.trigger_en || (self.cfg.less_pkts && !self.packet_en) {
            return;
        }
        self.emit(Packet::Sts {
            acbr: self.core_ratio,
            ecbr: self.eff_ratio,
            tsc: self.tsc() & 0xFF_FFFF_FFFF,
        });
    }

    /// Frequency changes and sleeps due at this step boundary.
    fn time_events(&mut self) {
        if self.cycles_total >= self.next_freq {
            let (a, b) = self
                .o
                .freq_change_every
                .unwrap_or((u64::MAX / 2, u64::MAX / 2));
            self.next_freq = self.cycles_total + self.rng.range(a, b);
            let mut r = self.rng.range(8, 32) as u8;
            if r == self.core_ratio {
                r += 1;
            }
            let tsc = self.tsc();
            self.core_ratio = r;
            self.eff_ratio = if self.rng.chance(0.25) { r - 2 } else { r };
            self.acc = tsc * r as u64;
            self.rebase_mtc();
            self.emit_sts();
        }
        if self.cycles_total >= self.next_sleep {
            let (a, b) = self.o.sleep_every.unwrap_or((u64::MAX / 2, u64::MAX / 2));
            self.next_sleep = self.cycles_total + self.rng.range(a, b);
            // Asleep (C1/C2): the cycle counter stops, no MTC goes out, the TSC runs on;
            // an STS is sent on wake (Appendix B).
            let slept = self.rng.range(10_000, 2_000_000);
            self.acc += slept * self.core_ratio as u64;
            self.rebase_mtc();
            self.mtc_last = Some(self.mtc_bits());
            self.emit_sts();
        }
    }

    /// Cycles a step of `insns` instructions takes (a simple seeded CPI model).
    fn step_cycles(&mut self, insns: u32, branch: bool) -> u64 {
        let mut c = step_cycles(self.rng.next_u64(), insns, branch);
        if let Some((p, stall)) = self.o.stall {
            if self.rng.chance(p) {
                c += stall;
            }
        }
        c
    }

    // ----- steps ------------------------------------------------------------------------

    /// Process one step; `exit` says what follows a final exit syscall.
    fn step(&mut self, s: &Step, exit: Exit) {
        if Some(self.step_no) == self.o.trace_stop_at && self.ovf.is_none() {
            self.trace_stop();
            return;
        }
        self.step_no += 1;
        if self.step_no >= self.next_ovf_step {
            if let Some(p) = self.o.overflow {
                self.next_ovf_step =
                    self.step_no + self.rng.range(p.every_steps.0, p.every_steps.1);
                if self.ovf.is_none() {
                    self.ovf_armed = true;
                }
            }
        }
        self.time_events();
        if s.insns() > 0 {
            self.fresh_pge = None;
        }
        let start = self.cur_ip;
        self.maybe_end_overflow(start);
        self.maybe_pcc(start);
        let counting = self.packet_en || self.ovf.is_some();
        match *s {
            Step::Branch {
                ip,
                len,
                class,
                target,
                next,
                insns,
            } => {
                let cycles = self.step_cycles(insns, true);
                self.advance(cycles, counting);
                if self.packet_en {
                    self.summary.instructions += insns as u64;
                }
                self.branch(ip, len, class, target, next, insns, exit);
            }
            Step::Interrupt { insns, at, resume } => {
                let cycles = self.step_cycles(insns, false);
                self.advance(cycles, counting);
                self.summary.instructions += insns as u64;
                self.vis_insns += insns;
                self.block_acc += insns;
                self.interrupt(at, resume);
            }
            Step::End { insns, at } => {
                let cycles = self.step_cycles(insns, false);
                self.advance(cycles, counting);
                self.summary.instructions += insns as u64;
                self.vis_insns += insns;
                self.cur_ip = at;
                self.stopped = true;
            }
        }
        if let Some(ov) = &mut self.ovf {
            ov.steps_left = ov.steps_left.saturating_sub(1);
        }
    }

    fn maybe_pcc(&mut self, ip: u64) {
        if !self.cfg.cycle_acc || self.cntp < 1 << 21 || self.ovf.is_some() || !self.packet_en {
            return;
        }
        // FUP.PCC carries the NLIP of the instruction at whose start it fires (4.2.6).
        let b = self.blocks.get(self.images, ip, self.cr3);
        let nlip = ip + b.lens.first().copied().unwrap_or(0) as u64;
        self.flush_tnt();
        self.emit(Packet::Fup(FupKind::Pcc, ip_payload(nlip)));
    }

    #[allow(clippy::too_many_arguments)]
    fn branch(
        &mut self,
        ip: u64,
        len: u8,
        class: InsnClass,
        target: u64,
        next: u64,
        insns: u32,
        exit: Exit,
    ) {
        let kind = class.branch_kind().expect("branch step has a branch class");
        let nlip = ip + len as u64;
        if !self.packet_en {
            // Not traced (outside the IP filter): no row, no TNT bit (4.3.2). Landing in
            // the region turns tracing on: FUP.PGE with the target (rows 10, 26, 34, 35).
            self.cur_ip = next;
            if class.is_far() {
                let cpl = self.cpl;
                self.far(nlip, next, cpl, None);
            } else if self.trigger_en && self.context_en(self.cpl) && self.filter_en(next) {
                self.far(nlip, next, self.cpl, None);
            }
            return;
        }
        let row = self.nrows;
        self.vis_insns += insns;
        self.block_acc += insns;
        let r = BranchRow {
            ip,
            target: Some(next),
            kind,
            taken: match class {
                InsnClass::Cond => next == target,
                _ => true,
            },
            compressed: class == InsnClass::Ret
                && self.cfg.cmprs_ret
                && self.last_call == Some(next)
                && self.ovf.is_none(),
            insns: self.vis_insns,
            tsc: self.o.keep_truth.then(|| self.tsc()),
            cycles: Some(self.cycles_total),
            cr3: self.pip_cr3,
            offset: INHERIT,
        };
        self.vis_insns = 0;
        self.kind_counts[kind as usize] += 1;
        self.summary.branches += 1;
        self.push_row(&r, self.ovf.is_some());
        self.cur_ip = next;
        if class.is_near_call() && self.cfg.cmprs_ret && self.ovf.is_none() {
            // A near CALL with PacketEn stores its NLIP (4.2.3.2).
            self.last_call = Some(nlip);
        }
        match class {
            InsnClass::Cond => {
                self.decision = Decision::Pending;
                self.push_tnt(r.taken, row);
            }
            InsnClass::Ret if r.compressed => {
                // A taken bit instead of a TIP; LAST_CALL_NLIP stays as it is.
                self.decision = Decision::Pending;
                self.push_tnt(true, row);
            }
            InsnClass::Jmp | InsnClass::Call => {
                if let Decision::Known(o) = self.decision {
                    self.set_offset(row, o);
                }
            }
            InsnClass::JmpInd | InsnClass::CallInd | InsnClass::Ret => {
                if let Some(ov) = &mut self.ovf {
                    ov.last_was_indirect = true;
                }
                self.flush_tnt();
                let off = self.out.len() as u64;
                if self.emit(Packet::Tip(ip_payload(next))) {
                    self.decided(row, off);
                }
            }
            InsnClass::Far | InsnClass::Syscall => {
                match self.kernel.filter(|_| self.cfg.os && self.cpl == 3) {
                    Some(k) => {
                        // Into the traced kernel stub (rows 27/28): FUP.FAR + TIP, the
                        // kernel's code, and SYSRET/IRET back.
                        self.far(nlip, k.syscall_entry, 0, Some(row));
                        match exit {
                            Exit::No => self.run_kernel(k.syscall_path(false), next, None),
                            Exit::End => self.run_kernel(k.syscall_path(true), next, None),
                            Exit::SwitchTo(cr3, ip) => {
                                self.run_kernel(k.exit_switch_path(), ip, Some(cr3))
                            }
                        }
                    }
                    None if self.cfg.os && self.cfg.user => {
                        // Every CPL is traced and the execution goes on at `next`.
                        let cpl = self.cpl;
                        self.far(nlip, next, cpl, Some(row));
                        if exit != Exit::No {
                            self.stopped_cleanly();
                        }
                    }
                    None => {
                        // Into an untraced kernel (rows 32/33): FUP.PGD with the NLIP;
                        // back with FUP.PGE (rows 34/35) unless the program has ended.
                        self.far(nlip, 0, 0, Some(row));
                        match exit {
                            Exit::No => {
                                self.kernel_time();
                                self.far(0, next, 3, None);
                            }
                            Exit::End => self.stopped_cleanly(),
                            Exit::SwitchTo(cr3, ip) => {
                                self.kernel_time();
                                self.cr3 = Some(cr3);
                                self.far(0, ip, 3, None);
                            }
                        }
                    }
                }
            }
            InsnClass::Other => unreachable!("not a branch"),
        }
        if !class.is_far() && self.packet_en && !self.filter_en(next) {
            // A near branch out of the filter region (rows 8/9, 15, 19, 24/25): pending
            // TNT bits (this one included), then FUP.PGD with the next address.
            self.flush_tnt();
            let off = self.out.len() as u64;
            if self.emit(Packet::Fup(FupKind::Pgd, ip_payload(next))) {
                if matches!(class, InsnClass::Jmp | InsnClass::Call) {
                    self.set_offset(row, off);
                }
                self.tail_start = self.nrows;
            }
            self.packet_en = false;
        }
    }

    /// The row was decided by the packet at `off`.
    fn decided(&mut self, row: usize, off: u64) {
        self.set_offset(row, off);
        self.set_exact(row, self.cfg.cycle_acc);
        self.decision = Decision::Known(off);
        self.tail_start = row + 1;
        self.tail_ip = self.row_target(row).unwrap_or(self.cur_ip);
    }

    fn push_row(&mut self, r: &BranchRow, lost: bool) {
        self.nrows += 1;
        self.last_branch_ip = r.ip;
        if self.o.keep_truth {
            self.truth.rows.push(r);
            self.truth.lost.push(lost);
            self.truth.cyc_exact.push(false);
            self.truth.e6_zero_before.push(self.e6_zero);
            self.truth.block_start.push(self.entry_ip);
            self.truth.block_insns.push(self.block_acc);
        }
        // The next block starts where the branch went (a far transfer that stops
        // tracing sets it again where tracing resumes).
        self.entry_ip = r.target.unwrap_or(0);
        self.block_acc = 0;
    }

    /// Execution leaves the current block at `x` (an interrupt) after some of its
    /// instructions: a partial block, carried by the next row.
    fn close_partial(&mut self, x: u64) {
        if self.block_acc > 0 && self.ovf.is_none() && self.o.keep_truth {
            let end = self
                .blocks
                .insn_before(self.images, self.entry_ip, x, self.cr3)
                .unwrap_or(x);
            self.truth.partials.push(PartialBlock {
                row: self.nrows as u64,
                start: self.entry_ip,
                end,
                insns: self.block_acc,
                times: 1,
            });
        }
        self.block_acc = 0;
    }

    /// A basic block begins at `ip` (tracing resumed there, or an interrupt landed).
    fn enter_block(&mut self, ip: u64) {
        self.entry_ip = ip;
        self.block_acc = 0;
    }

    /// Set a truth column of row `r` (a no-op without `keep_truth`).
    #[inline]
    fn set_offset(&mut self, r: usize, off: u64) {
        if self.o.keep_truth {
            self.truth.rows.offset[r] = off;
        }
    }
    #[inline]
    fn set_lost(&mut self, r: usize) {
        if self.o.keep_truth {
            self.truth.lost[r] = true;
        }
    }
    #[inline]
    fn set_exact(&mut self, r: usize, v: bool) {
        if self.o.keep_truth {
            self.truth.cyc_exact[r] = v;
        }
    }
    #[inline]
    fn set_target(&mut self, r: usize, t: Option<u64>) {
        if self.o.keep_truth {
            self.truth.rows.target.set(r, t);
        }
    }
    #[inline]
    fn row_target(&self, r: usize) -> Option<u64> {
        if self.o.keep_truth {
            self.truth.rows.target.get(r)
        } else {
            None
        }
    }

    /// A far transfer from the traced context's point of view (Table 19 rows 27–35):
    /// `saved` is the address the transfer saves (NLIP of a far branch, the interrupted
    /// instruction for an interrupt), `target` where it lands, at privilege `to_cpl`.
    /// `row` is the branch row of a far branch instruction (None for interrupts).
    fn far(&mut self, saved: u64, target: u64, to_cpl: u8, row: Option<usize>) {
        let before = self.packet_en;
        let context = self.trigger_en && self.context_en(to_cpl);
        let after = context && self.filter_en(target);
        self.cpl = to_cpl;
        self.cur_ip = target;
        if before && row.is_none() {
            // An asynchronous transfer at `saved`: its bits go out first.
            self.flush_tnt();
            self.first_arrival(saved);
            self.close_partial(saved);
        }
        match (before, after) {
            (true, true) => {
                self.flush_tnt();
                self.enter_block(target);
                let off = self.out.len() as u64;
                let saved = self.e1_address(saved, row);
                let a = self.emit(Packet::Fup(FupKind::Far, ip_payload(saved)));
                let tip = self.out.len() as u64;
                let b = self.emit(Packet::Tip(ip_payload(target)));
                if let Some(r) = row {
                    self.set_target(r, Some(target));
                }
                if a && b {
                    match row {
                        Some(r) => self.decided(r, tip),
                        None => self.resume_at(off),
                    }
                }
            }
            (true, false) => {
                // FUP.PGD replaces FUP.FAR (4.2.9); while ContextEn stays 1 (only the IP
                // filter turned tracing off) the TIP still goes out (rows 30/31).
                self.flush_tnt();
                let off = self.out.len() as u64;
                let sent = self.emit(Packet::Fup(FupKind::Pgd, ip_payload(saved)));
                let tip = context && self.emit(Packet::Tip(ip_payload(target)));
                if let Some(r) = row {
                    self.set_target(r, tip.then_some(target));
                }
                if sent {
                    match row {
                        Some(r) => self.decided(r, off),
                        None => self.tail_start = self.nrows,
                    }
                }
                self.packet_en = false;
            }
            (false, true) => {
                self.packet_en = true;
                if self.ovf.is_some() {
                    return; // lost with the overflow; FUP.BuffOvf will say where we are
                }
                let off = self.out.len() as u64;
                if self.emit(Packet::Fup(FupKind::Pge, ip_payload(target))) {
                    self.resume_at(off);
                    self.fresh_pge = Some(target);
                }
            }
            (false, false) => {}
        }
    }

    /// An interrupt at `x` ends a stretch of direct branches only (no packet since the
    /// last decided row). If that stretch passed `x` before — a loop with no conditional
    /// or indirect branch, spinning until the interrupt — no trace can tell how many
    /// times: a decoder stops at the first arrival. Rows after it are unprovable.
    fn first_arrival(&mut self, x: u64) {
        if !self.o.keep_truth {
            return;
        }
        let mut start = self.tail_ip;
        for r in self.tail_start..self.nrows {
            let ip = self.truth.rows.ip[r];
            if x >= start && x <= ip {
                let k = self.blocks.get(self.images, start, self.cr3).index_of(x);
                if let Some(k) = k {
                    for l in r..self.nrows {
                        self.set_lost(l);
                    }
                    self.vis_insns = k;
                    // A decoder's partial block is the first arrival's.
                    self.entry_ip = start;
                    self.block_acc = k;
                    self.tail_start = self.nrows;
                    return;
                }
            }
            match self.row_target(r) {
                Some(t) => start = t,
                None => return,
            }
        }
    }

    /// E1: a far transfer with more than three prefixes may report an address inside
    /// itself. The model shows it for the kernel's prefixed SYSRET when asked.
    fn e1_address(&mut self, saved: u64, row: Option<usize>) -> u64 {
        let (Some(k), Some(r)) = (self.kernel, row) else {
            return saved;
        };
        let _ = r;
        if k.e1 && self.last_branch_ip == k.sysret_ip && k.sysret_prefixes > 3 {
            return k.sysret_ip + 1 + self.rng.below(k.sysret_len as u64 - 2);
        }
        saved
    }

    fn interrupt(&mut self, at: u64, resume: u64) {
        if self.fresh_pge == Some(at) && at == resume && self.kernel.is_none() {
            // Nothing ran since tracing resumed here: the interrupt was taken in the kernel
            // before it returned to user code (the trace cannot tell the two apart, and a
            // FUP.PGD naming the address just resumed at reads as a loop back to it).
            self.kernel_time();
            return;
        }
        if let (Some(k), true) = (self.kernel, self.cfg.os) {
            // Into the traced kernel: FUP.FAR with the interrupted address, TIP to the
            // handler, the handler's code, IRET back.
            let entry = k.irq_entry;
            self.far(at, entry, 0, None);
            self.run_kernel(k.irq_path(false), resume, None);
        } else if self.cfg.os && self.cfg.user {
            // Every CPL is traced and the handler is part of the execution: the
            // interrupt is a far transfer to `resume` (a fault saves its own address).
            self.far(at, resume, self.cpl, None);
        } else {
            self.far(at, 0, 0, None);
            self.kernel_time();
            self.far(0, resume, 3, None);
        }
    }

    /// Context switch through the kernel's timer interrupt: from the current process
    /// (interrupted at `from`, or none at start) to `cr3`, resuming at `ip`.
    fn switch_to(&mut self, cr3: u64, ip: u64, from: Option<u64>) {
        let k = self.kernel.expect("kernel");
        if let Some(at) = from {
            self.far(at, k.irq_entry, 0, None);
            self.run_kernel(k.irq_path(true), ip, Some(cr3));
        } else {
            self.run_kernel(k.switch_path(), ip, Some(cr3));
        }
    }

    /// Run kernel steps (at CPL 0); the last is an IRET/SYSRET to `user_ip`; `new_cr3`
    /// is loaded at the path's MOV CR3.
    fn run_kernel(&mut self, path: Vec<KStep>, user_ip: u64, new_cr3: Option<u64>) {
        for ks in path {
            match ks {
                KStep::Run(mut s) => {
                    if let Step::Branch { class, next, .. } = &mut s {
                        if class.is_far() {
                            *next = user_ip;
                        }
                    }
                    self.kstep(&s);
                }
                KStep::MovCr3 => {
                    if let Some(c) = new_cr3 {
                        self.cr3 = Some(c);
                        self.pip(c);
                    }
                }
                KStep::Exit => {
                    self.stopped_cleanly();
                    return;
                }
            }
        }
    }

    fn kstep(&mut self, s: &Step) {
        let counting = self.packet_en;
        if let Step::Branch {
            ip,
            len,
            class,
            target,
            next,
            insns,
        } = *s
        {
            let cycles = self.step_cycles(insns, true);
            self.advance(cycles, counting);
            self.summary.instructions += insns as u64;
            if class.is_far() {
                // IRET/SYSRET back to user code.
                let row = self.nrows;
                self.vis_insns += insns;
                self.block_acc += insns;
                let r = BranchRow {
                    ip,
                    target: Some(next),
                    kind: class.branch_kind().expect("far"),
                    taken: true,
                    compressed: false,
                    insns: self.vis_insns,
                    tsc: self.o.keep_truth.then(|| self.tsc()),
                    cycles: Some(self.cycles_total),
                    cr3: self.pip_cr3,
                    offset: INHERIT,
                };
                self.vis_insns = 0;
                self.kind_counts[r.kind as usize] += 1;
                self.summary.branches += 1;
                self.push_row(&r, self.ovf.is_some());
                self.far(ip + len as u64, next, 3, Some(row));
            } else {
                self.branch(ip, len, class, target, next, insns, Exit::No);
            }
        }
    }

    /// MOV CR3 in the traced kernel: a PIP (TNT flushed first) and, with STS_on_CR3, an
    /// STS (Table 19 rows 39–44).
    fn pip(&mut self, cr3: u64) {
        if !(self.trigger_en && self.context_en(self.cpl)) || self.cfg.cr3_en {
            return;
        }
        self.flush_tnt();
        if self.emit(Packet::Pip {
            cr3: cr3 & 0xFF_FFFF_FFFF,
            pg: true,
        }) {
            self.pip_cr3 = Some(cr3 & 0xFF_FFFF_FFFF);
        }
        if self.cfg.sts_on_cr3 {
            self.emit_sts();
        }
    }

    fn kernel_time(&mut self) {
        let (a, b) = self.o.kernel_cycles;
        let c = self.rng.range(a, b);
        self.advance(c, false);
    }

    /// An MSR write to RTIT_PKT_CNT (3.3.9: "unless an MSR write is used to change
    /// Pkt_Cnt"), as the spec's worked example assumes.
    pub fn wrmsr_pkt_cnt(&mut self, value: u32) {
        self.pkt_cnt = value & 0x3FFF;
    }

    /// RTIT_PKT_CNT.Pkt_Cnt now.
    pub fn pkt_cnt(&self) -> u32 {
        self.pkt_cnt
    }

    /// Bytes of trace written so far.
    pub fn bytes_written(&self) -> usize {
        self.out.len()
    }

    /// Begin tracing at `entry` (TriggerEn 0->1); then feed steps with [`Model::feed`]
    /// and end with [`Model::end`]. [`Model::run`] does all three.
    pub fn start(&mut self, entry: u64) {
        self.enable(entry);
    }

    /// Process one step (not the program's last).
    pub fn feed(&mut self, s: &Step) {
        if !self.stopped {
            self.step(s, Exit::No);
        }
    }

    /// Stop tracing (an MSR write clearing TraceActive) and hand back the output.
    pub fn end(self) -> Output {
        self.finish()
    }

    fn trace_stop(&mut self) {
        // TraceStop clears TraceActive and sends TraceSTOP; the TNT buffer is not drained
        // (4.2.11), so its bits never reach the trace.
        self.put(Packet::TraceStop);
        self.drop_tnt();
        self.lose_tail();
        self.stopped = true;
        self.trigger_en = false;
        self.packet_en = false;
    }

    /// The program ended with its exit syscall; nothing more is traced.
    fn stopped_cleanly(&mut self) {
        self.stopped = true;
        self.trigger_en = false;
    }

    fn drop_tnt(&mut self) {
        for i in 0..self.tnt_len as usize {
            self.set_lost(self.tnt_rows[i]);
        }
        self.tnt_len = 0;
        self.tnt_bits = 0;
    }

    fn finish(mut self) -> Output {
        if self.packet_en || self.ovf.is_some() {
            // Tracing ends by an MSR write clearing TriggerEn: no PGD, no TNT flush.
            self.drop_tnt();
            self.lose_tail();
        }
        // Direct rows inherit the offset of the previous decided row.
        let off = &mut self.truth.rows.offset;
        for i in 0..off.len() {
            if off[i] == INHERIT {
                off[i] = if i == 0 { 0 } else { off[i - 1] };
            }
        }
        self.summary.lost_rows = self.truth.lost.iter().filter(|&&l| l).count() as u64;
        for (i, &n) in self.packet_counts.iter().enumerate() {
            if n > 0 {
                self.summary
                    .packets_by_type
                    .insert(Packet::NAMES[i].to_string(), n);
            }
        }
        for (i, &n) in self.kind_counts.iter().enumerate() {
            if n > 0 {
                let k = tracemill_schemas::BranchKind::ALL[i];
                self.summary
                    .branches_by_kind
                    .insert(k.name().to_string(), n);
            }
        }
        self.summary.bytes = self.out.len() as u64;
        Output {
            bytes: self.out,
            truth: self.truth,
            summary: self.summary,
            packets: self.packets,
        }
    }
}

fn next_alive(resume: &[u64], cur: usize) -> usize {
    let n = resume.len();
    (1..=n)
        .map(|d| (cur + d) % n)
        .find(|&i| resume[i] != u64::MAX)
        .unwrap_or(cur)
}

/// What follows a process's final step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
    /// It is not the final step.
    No,
    /// Nothing: the trace ends.
    End,
    /// The kernel switches to the process with this CR3, resuming at this address.
    SwitchTo(u64, u64),
}

/// An uncompressed payload carrying `ip`; [`Model::emit_raw`] compresses it.
fn ip_payload(ip: u64) -> IpPayload {
    IpPayload {
        size: 6,
        zext: false,
        bits: ip & 0xFFFF_FFFF_FFFF,
    }
}

/// One step of a kernel path.
#[derive(Clone, Copy, Debug)]
pub enum KStep {
    Run(Step),
    /// MOV CR3 retires here (sends a PIP).
    MovCr3,
    /// The path ends the trace (exit of the last process).
    Exit,
}

pub use crate::kernel::Kernel;

/// Index of a packet's name in [`Packet::NAMES`].
fn packet_index(p: &Packet) -> usize {
    match p {
        Packet::Psb => 0,
        Packet::Tnt(t) if !t.is_full() => 1,
        Packet::Tnt(_) => 2,
        Packet::Tip(_) => 3,
        Packet::Fup(FupKind::Pge, _) => 4,
        Packet::Fup(FupKind::Pgd, _) => 5,
        Packet::Fup(FupKind::BuffOvf, _) => 6,
        Packet::Fup(FupKind::Pcc, _) => 7,
        Packet::Fup(FupKind::Far, _) => 8,
        Packet::TraceStop => 9,
        Packet::Pip { .. } => 10,
        Packet::Mtc { .. } => 11,
        Packet::Sts { .. } => 12,
        Packet::Cyc { .. } => 13,
    }
}

/// Cycles a step of `insns` instructions takes, from one random draw `r` (a simple CPI
/// model, shared by the RTIT model and the Intel PT encoder's clocks): 1..2 cycles per
/// instruction, and a mispredicted branch (12 cycles more) one time in ten.
pub(crate) fn step_cycles(r: u64, insns: u32, branch: bool) -> u64 {
    let i = insns as u64;
    let mut c = i + (((r & 0xFFFF_FFFF) * (i + 1)) >> 32);
    if branch && (r >> 54) < 102 {
        c += 12;
    }
    c
}
