//! An Intel PT encoder of executions: from a stream of [`Step`]s, the packets an Intel PT
//! unit would write for them, and the ground truth (one row per retired branch, with the
//! `branches` columns) a decoder must reproduce. It is to Intel PT what [`crate::model`]
//! is to RTIT: the flow packets, and with [`PtOptions::timing`] the timing packets of the
//! execution's clocks ([`crate::pt_timing`]: TSC and TMA in every PSB+ with CBR, MTC as
//! the crystal clock ticks, CYC before every CYC-eligible packet), each row's true TSC in
//! the truth.
//!
//! The rules it follows (SDM chapter 36, `intel-pt-sdm-ch36-processor-trace.txt`):
//!
//! - **Start** (Table 36-50 cases 2b, 2d): a PSB and PSBEND while PacketEn is still 0 (no
//!   FUP or MODE.Exec in that PSB+, 36.4.2.17), then MODE.Exec (64-bit) and TIP.PGE with
//!   the first IP. MODE.Exec goes out with a TIP.PGE only if none was sent since the last
//!   PSB (36.4.2.8, cases 6c/7b/9b/10b/11b): every PSB+ sent while tracing carries one,
//!   so only the first enable and one after a PSB+ sent while tracing was off have it.
//! - **Conditional branches** (36.4.2.1): one TNT bit each, oldest first, in TNT-8 packets
//!   of up to 6 bits ([`PtOptions::long_tnt`]: TNT-64 packets of up to 47 bits). Pending
//!   bits go out (a partial TNT) before any TIP, FUP, TIP.PGD or PSB (case 7f).
//! - **Deferred TIPs** (36.4.2.3, Table 36-19; [`PtOptions::deferred_tips`]): the TIPs of
//!   indirect jumps and calls may wait while the TNT accumulates the bits of the branches
//!   after them; a full TNT or any other packet (FUP, TIP.PGD, PSB, an uncompressed RET's
//!   TIP, which is never deferred) sends the TNT, then every waiting TIP, in order.
//! - **Direct jumps and calls** emit nothing (cases 6d; 36.2.1.1).
//! - **Indirect jumps and calls, uncompressed RETs** (case 9d): a TIP with the target,
//!   its IP compressed against Last IP ([`compress_ip`], 36.4.2.2, Table 36-18); every
//!   TIP, TIP.PGE and FUP with an IP updates Last IP, and a PSB resets it to 0.
//! - **RET compression** (36.4.2.2, "Indirect Transfer Compression for Returns"): near
//!   CALLs (direct and indirect) push their next IP on a 64-entry stack, the oldest entry
//!   falling off a full stack; a zero-length CALL (a direct call to its own next IP) is not
//!   pushed. A near RET whose target equals the top entry, with compression on
//!   ([`PtOptions::ret_compression`], DisRETC clear), pops it and adds a taken TNT bit
//!   instead of a TIP. Any other RET sends a TIP and leaves the stack alone (as libipt's
//!   decoder reads it: only a compressed RET pops). "The processor will never compress a
//!   RET across a PSB, a buffer overflow, or scenario where PacketEn=0": the stack is
//!   emptied at every PSB and whenever PacketEn goes to 0.
//! - **Far transfers** ([`PtOptions::user_only`]). With only CPL 3 traced, a SYSCALL or
//!   other far branch out of user code is case 10c: TIP.PGD with the IP suppressed (the
//!   destination is in a context not traced, 36.2.4.1); an interrupt or fault is case
//!   11c/13c: FUP with the address of the instruction that did not run (Table 36-23), then
//!   TIP.PGD(). Execution comes back to user code with TIP.PGE(resume address) (10b/11b).
//!   With every CPL traced (the kernel's own code is not part of these executions), a far
//!   branch is case 10e: a TIP alone with where user code resumed, and an interrupt case
//!   11e: FUP(interrupted address) + TIP(resume address).
//! - **PSB+** (36.4.2.17, 36.3.7): once [`PtOptions::psb_every`] bytes have gone out since
//!   the last PSB, at the next branch whose outcome a packet carries (not a direct jump or
//!   call, so that the walk is exactly at the PSB+'s FUP; [`PtOptions::psb_at_any_step`]:
//!   also after any step and between two instructions of a step): pending TNT bits and
//!   deferred TIPs, then PSB, MODE.Exec, FUP(current IP), PSBEND. Last IP and the RET
//!   stack are reset. With `psb_at_any_step`, also while tracing is off (between a
//!   TIP.PGD and the TIP.PGE): PSB, PSBEND only.
//! - **Overflows** (36.3.8, 36.4.2.16; [`PtOptions::overflow`]): right after a branch
//!   a packet decided, what is pending goes out and then nothing for a number of steps
//!   (their rows are lost); the overflow resolves at a step boundary with OVF and a FUP
//!   with the resume IP (a self-contained payload), and the RET stack is emptied.
//! - **End**: a program's exit syscall under user-only tracing ends it with its TIP.PGD;
//!   otherwise tracing is turned off where the execution stops (case 3b): pending TNT
//!   bits, FUP(current IP), TIP.PGD().
//!
//! The truth's `offset` is the packet that decided the row, as the decoder reports it:
//! the TNT packet for a conditional branch or compressed RET, the TIP (or TIP.PGD) for an
//! indirect or far branch; a direct jump or call takes the decision before it (the last
//! decided row's packet, or the TIP.PGE, PSBEND or FUP where the walk last resumed).
//! `lost` marks rows no decoder can prove: those of an overflow window, and the direct
//! branches of a loop without any packet that an interrupt or a PSB+ ended, after its
//! first pass through the address they name (the decoder stops at the first arrival; see
//! [`crate::model`]).

use std::collections::{BTreeMap, VecDeque};

use tracemill_decode::block::BlockCache;
use tracemill_decode::image::ImageSet;
use tracemill_decode::insn::InsnClass;
use tracemill_decode::pt::encode::{compress_ip, encode};
use tracemill_decode::pt::packet::{ExecMode, IpCompression, IpPayload, Packet, Tnt};
use tracemill_decode::rows::{BranchColumns, BranchRow};

use crate::exec::Step;
use crate::pt_timing::{Clocks, PtTiming};
use crate::rng::Rng;

/// What the encoder is asked to do.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PtOptions {
    /// RET compression on (IA32_RTIT_CTL.DisRETC clear).
    pub ret_compression: bool,
    /// A PSB+ after about this many bytes (PSBFreq; the SDM's choices are 2 KiB to 64 KiB).
    pub psb_every: u64,
    /// Only CPL 3 is traced: far transfers leave the traced context (TIP.PGD, TIP.PGE).
    /// Otherwise every CPL is traced: TIP, FUP + TIP.
    pub user_only: bool,
    /// TNT-64 packets (up to 47 bits) instead of TNT-8 (up to 6).
    pub long_tnt: bool,
    /// Deferred TIPs (36.4.2.3): the TIPs of indirect jumps and calls wait while the TNT
    /// fills; a full TNT, or any other packet, sends the TNT, then the waiting TIPs.
    #[serde(default)]
    pub deferred_tips: bool,
    /// A PSB+ may go out at any step boundary (after a direct jump or call, an interrupt),
    /// between two instructions of a step, or while tracing is off, not only right after a
    /// branch a packet decided: the decoder then walks to the PSB+'s FUP.
    #[serde(default)]
    pub psb_at_any_step: bool,
    /// Internal buffer overflows (36.3.8), if any.
    #[serde(default)]
    pub overflow: Option<PtOverflow>,
    /// TSC packets (IA32_RTIT_CTL.TSCEn): one in every PSB+, right after the PSB
    /// (36.4.2.11), with the time the clock says; none when `None`. A counter of
    /// instructions, without other timing packets; [`PtOptions::timing`] is the
    /// execution's clocks (the two are not used together).
    #[serde(default)]
    pub tsc: Option<PtTsc>,
    /// The execution's clocks and the timing packets they make (TSC, TMA, MTC, CYC, CBR;
    /// [`crate::pt_timing`]); the truth's rows carry their true TSC. `None`: no timing
    /// packets (the bytes are those of an encoder without this option).
    #[serde(default)]
    pub timing: Option<PtTiming>,
}

/// The time stamp counter of [`PtOptions::tsc`]: `start` when the execution begins, and
/// `per_insn` ticks for every instruction retired since (a core at a steady clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PtTsc {
    pub start: u64,
    pub per_insn: u64,
}

impl PtTsc {
    /// The counter after `instructions` retired.
    pub fn at(&self, instructions: u64) -> u64 {
        self.start + instructions * self.per_insn
    }
}

/// When the internal buffer overflows, and for how long (in steps of the execution).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PtOverflow {
    pub seed: u64,
    /// Steps between overflows (uniform in this range).
    pub every_steps: (u64, u64),
    /// Steps an overflow lasts (uniform in this range, at least 1).
    pub duration_steps: (u64, u64),
}

impl Default for PtOptions {
    fn default() -> Self {
        PtOptions {
            ret_compression: true,
            psb_every: 4096,
            user_only: true,
            long_tnt: false,
            deferred_tips: false,
            psb_at_any_step: false,
            overflow: None,
            tsc: None,
            timing: None,
        }
    }
}

/// The ground truth of a PT trace.
#[derive(Clone, Debug, Default)]
pub struct PtTruth {
    /// Every retired branch while tracing was on, in order (`cycles` and `cr3` null;
    /// `tsc` the TSC when it retired, with [`PtOptions::timing`], else null).
    pub rows: BranchColumns,
    /// Rows no decoder can prove (see the module docs).
    pub lost: Vec<bool>,
}

impl PtTruth {
    /// The rows a decoder can prove, in order.
    pub fn provable(&self) -> BranchColumns {
        let mut b = BranchColumns::default();
        for (i, r) in self.rows.rows().enumerate() {
            if !self.lost[i] {
                b.push(&r);
            }
        }
        b
    }
}

/// Counts of what the encoder wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PtSummary {
    pub instructions: u64,
    pub branches: u64,
    pub compressed_rets: u64,
    /// Calls pushed on a full RET stack (its oldest entry lost).
    pub stack_evictions: u64,
    pub packets_by_type: BTreeMap<String, u64>,
    pub psbs: u64,
    /// PSBs sent after a direct branch or an interrupt, inside a step, or with tracing off
    /// (`psb_at_any_step`).
    pub psbs_off_decision: u64,
    /// Of those, PSBs sent between two instructions of a step.
    pub psbs_inside: u64,
    pub overflows: u64,
    pub lost_rows: u64,
    pub bytes: u64,
}

/// What the encoder produced.
pub struct PtOutput {
    pub bytes: Vec<u8>,
    pub truth: PtTruth,
    pub summary: PtSummary,
}

/// A row's offset not known yet: it takes the previous row's (a direct branch after a
/// conditional whose TNT packet has not gone out).
const INHERIT: u64 = u64::MAX;

/// Entries of the RET-compression stack (36.4.2.2).
const STACK: usize = 64;

/// Encode an execution that starts at `entry`; `images` holds its code.
pub fn encode_execution(
    images: &ImageSet<'_>,
    o: &PtOptions,
    entry: u64,
    steps: impl IntoIterator<Item = Step>,
) -> PtOutput {
    let mut e = Encoder::new(images, o.clone());
    e.start(entry);
    let mut it = steps.into_iter().peekable();
    while let Some(s) = it.next() {
        if e.stopped {
            break;
        }
        let last = it.peek().is_none();
        e.step(&s, last);
    }
    e.finish()
}

struct Encoder<'i, 'a> {
    o: PtOptions,
    images: &'i ImageSet<'a>,
    blocks: BlockCache,
    out: Vec<u8>,
    counts: BTreeMap<&'static str, u64>,
    psbs: u64,
    last_psb: u64,
    /// Last IP as the decoder will reconstruct it (36.4.2.2).
    last_ip: u64,
    /// The hardware's RET-compression stack, youngest at the back.
    stack: VecDeque<u64>,
    tnt_bits: u64,
    tnt_len: u8,
    tnt_rows: Vec<usize>,
    /// Deferred TIPs (36.4.2.3): target and row.
    deferred: Vec<(u64, usize)>,
    packet_en: bool,
    stopped: bool,
    /// A MODE.Exec went out since the last PSB.
    mode_sent: bool,
    rows: Vec<BranchRow>,
    lost: Vec<bool>,
    /// The offset direct-branch rows take now (`None`: the last decision is a TNT bit not
    /// written yet).
    decision: Option<u64>,
    /// Instructions retired since the last row.
    vis_insns: u32,
    /// First row after the last decided one, and where that undecided stretch begins.
    tail_start: usize,
    tail_ip: u64,
    cur_ip: u64,
    instructions: u64,
    compressed: u64,
    rng: Rng,
    steps: u64,
    next_ovf: u64,
    /// The execution's clocks, with [`PtOptions::timing`].
    clocks: Option<Clocks>,
    /// Steps left in the overflow under way.
    ovf_left: Option<u64>,
    overflows: u64,
    psbs_off_decision: u64,
    evictions: u64,
    psbs_inside: u64,
}

impl<'i, 'a> Encoder<'i, 'a> {
    fn new(images: &'i ImageSet<'a>, o: PtOptions) -> Self {
        Encoder {
            images,
            blocks: BlockCache::new(),
            out: Vec::new(),
            counts: BTreeMap::new(),
            psbs: 0,
            last_psb: 0,
            last_ip: 0,
            stack: VecDeque::with_capacity(STACK),
            tnt_bits: 0,
            tnt_len: 0,
            tnt_rows: Vec::new(),
            deferred: Vec::new(),
            packet_en: false,
            stopped: false,
            mode_sent: false,
            rows: Vec::new(),
            lost: Vec::new(),
            decision: None,
            vis_insns: 0,
            tail_start: 0,
            tail_ip: 0,
            cur_ip: 0,
            instructions: 0,
            compressed: 0,
            rng: Rng::new(o.overflow.map_or(0, |p| p.seed)),
            steps: 0,
            next_ovf: u64::MAX,
            clocks: o.timing.map(|t| {
                assert!(o.tsc.is_none(), "PtOptions: `tsc` or `timing`, not both");
                Clocks::new(t)
            }),
            ovf_left: None,
            overflows: 0,
            psbs_off_decision: 0,
            evictions: 0,
            psbs_inside: 0,
            o,
        }
        .with_first_overflow()
    }

    fn with_first_overflow(mut self) -> Self {
        if let Some(p) = self.o.overflow {
            self.next_ovf = self.rng.range(p.every_steps.0, p.every_steps.1);
        }
        self
    }

    // ----- packets ----------------------------------------------------------------------

    /// Write one packet (after its CYC, when it takes one); its offset.
    fn put(&mut self, p: Packet) -> u64 {
        if let Some(cyc) = self.clocks.as_mut().and_then(|c| c.cyc_before(&p)) {
            self.put_cyc(cyc);
        }
        let off = self.out.len() as u64;
        encode(&p, &mut self.out).expect("the encoder makes only encodable packets");
        *self.counts.entry(p.name()).or_default() += 1;
        off
    }

    fn put_cyc(&mut self, cyc: Packet) {
        encode(&cyc, &mut self.out).expect("a CYC is encodable");
        *self.counts.entry(cyc.name()).or_default() += 1;
    }

    /// Let `cycles` core cycles pass: MTCs go out as the crystal clock ticks (none while
    /// an overflow drops packets).
    fn pass(&mut self, cycles: u64) {
        let mut left = cycles;
        while left > 0 {
            let Some(c) = &mut self.clocks else {
                return;
            };
            let (ran, mtc) = c.run(left);
            left -= ran;
            if let (Some(v), None) = (mtc, self.ovf_left) {
                self.put(Packet::Mtc(v));
            }
        }
    }

    /// A syscall's or interrupt's time in the kernel, tracing off (user-only tracing).
    fn kernel_time(&mut self) {
        if let Some(c) = &mut self.clocks {
            let k = c.kernel_cycles();
            self.pass(k);
        }
    }

    /// The TSC now, with the execution's clocks.
    fn now(&self) -> Option<u64> {
        self.clocks.as_ref().map(Clocks::tsc)
    }

    /// An IP packet (`make` wraps the payload) with `ip` compressed against Last IP.
    fn ip_packet(&mut self, make: fn(IpPayload) -> Packet, ip: u64) -> u64 {
        let pl = compress_ip(ip, self.last_ip);
        self.last_ip = ip;
        self.put(make(pl))
    }

    fn suppressed() -> IpPayload {
        IpPayload {
            compression: IpCompression::Suppressed,
            bits: 0,
        }
    }

    fn mode_exec(&mut self) {
        self.put(Packet::ModeExec(ExecMode {
            csl: true,
            csd: false,
            iflag: false,
        }));
        self.mode_sent = true;
    }

    /// Pending TNT bits go out as one packet (its rows are decided by it), then the
    /// deferred TIPs (36.4.2.3). Direct branches after this take the offset of the row
    /// before them, as the decoder walks them.
    fn flush(&mut self) {
        self.flush_tnt();
        for (ip, row) in std::mem::take(&mut self.deferred) {
            self.rows[row].offset = self.ip_packet(Packet::Tip, ip);
        }
        self.decision = None;
    }

    fn flush_tnt(&mut self) {
        if self.tnt_len == 0 {
            return;
        }
        let t = Tnt {
            bits: self.tnt_bits,
            len: self.tnt_len,
        };
        let off = self.put(if t.len > 6 {
            Packet::Tnt64(t)
        } else {
            Packet::Tnt8(t)
        });
        for &r in &self.tnt_rows {
            self.rows[r].offset = off;
        }
        self.tnt_rows.clear();
        self.tnt_bits = 0;
        self.tnt_len = 0;
    }

    fn push_bit(&mut self, taken: bool, row: usize) {
        // A TNT's CYC dates its first branch (36.3.6.2), sent as that branch retires.
        if self.tnt_len == 0 {
            if let Some(cyc) = self.clocks.as_mut().and_then(Clocks::cyc_now) {
                self.put_cyc(cyc);
            }
        }
        self.tnt_bits = (self.tnt_bits << 1) | taken as u64;
        self.tnt_len += 1;
        self.tnt_rows.push(row);
        let max = if self.o.long_tnt { 47 } else { 6 };
        if self.tnt_len == max {
            self.flush();
        }
    }

    /// The timing status of a PSB+ (36.4.2.11: TSC comes right after the PSB): the
    /// instruction counter's TSC, or the clocks' TSC, TMA and CBR.
    fn tsc(&mut self) {
        if let Some(c) = self.o.tsc {
            self.put(Packet::Tsc(c.at(self.instructions)));
        }
        if let Some(c) = &self.clocks {
            for p in c.psb_status() {
                self.put(p);
            }
        }
    }

    fn psb_due(&self) -> bool {
        self.out.len() as u64 - self.last_psb >= self.o.psb_every
    }

    /// A PSB is due, and (with `psb_at_any_step`, where every other PSB+ goes out inside
    /// a step) this is a place for it.
    fn psb_due_at(&self, inside: bool) -> bool {
        if !self.psb_due() {
            return false;
        }
        if self.o.psb_at_any_step {
            self.psbs.is_multiple_of(2) == inside
        } else {
            !inside
        }
    }

    /// A PSB+ between two instructions of the step about to run (`insns` of them from the
    /// current IP): its FUP names an instruction inside a block, where the decoder meets
    /// it, and the row's instruction count runs on across it. Not where the stretch of
    /// direct branches since the last decision passed that instruction before.
    fn psb_inside(&mut self, insns: u32) {
        let b = self.blocks.get(self.images, self.cur_ip, None);
        let m = (b.lens.len() as u32).min(insns);
        if m < 2 {
            return;
        }
        let k = m / 2;
        let at = self.cur_ip + b.lens[..k as usize].iter().map(|&l| l as u64).sum::<u64>();
        if self.arrival(at).is_some() {
            return;
        }
        let from = self.cur_ip;
        self.cur_ip = at;
        self.psb_plus();
        self.cur_ip = from;
        self.psbs_off_decision += 1;
        self.psbs_inside += 1;
    }

    /// With `psb_at_any_step`, a PSB+ while PacketEn is 0 (between a TIP.PGD and the
    /// TIP.PGE): no FUP and no MODE.Exec in it (36.4.2.17), so the TIP.PGE after it comes
    /// with a MODE.Exec (36.4.2.8).
    fn psb_while_disabled(&mut self) {
        if !self.o.psb_at_any_step || !self.psb_due() {
            return;
        }
        self.last_psb = self.put(Packet::Psb);
        self.tsc();
        self.psbs += 1;
        self.psbs_off_decision += 1;
        self.last_ip = 0;
        self.mode_sent = false;
        self.put(Packet::PsbEnd);
    }

    /// PSB+ (36.4.2.17) while tracing: the state at the current IP.
    fn psb_plus(&mut self) {
        // After direct branches only, the decoder meets the FUP at its first arrival: a
        // stretch that passed this IP before is a cycle of direct branches, and how many
        // times it ran no packet says.
        self.first_arrival(self.cur_ip);
        self.flush();
        self.last_psb = self.put(Packet::Psb);
        self.tsc();
        self.psbs += 1;
        self.last_ip = 0;
        self.stack.clear();
        self.mode_exec();
        let ip = self.cur_ip;
        self.ip_packet(Packet::Fup, ip);
        let end = self.put(Packet::PsbEnd);
        self.resume_at(end);
    }

    // ----- enables ----------------------------------------------------------------------

    fn start(&mut self, entry: u64) {
        // TraceEn 0 -> 1 (cases 2b, 2d): a PSB+ with PacketEn still 0, then the enable.
        self.last_psb = self.put(Packet::Psb);
        self.tsc();
        self.psbs += 1;
        self.put(Packet::PsbEnd);
        self.cur_ip = entry;
        self.enable(entry);
    }

    /// PacketEn 0 -> 1 at `ip`: MODE.Exec if none since the last PSB, TIP.PGE.
    fn enable(&mut self, ip: u64) {
        if !self.mode_sent {
            self.mode_exec();
        }
        let off = self.ip_packet(Packet::TipPge, ip);
        self.packet_en = true;
        self.cur_ip = ip;
        self.resume_at(off);
    }

    /// PacketEn 1 -> 0 (TIP.PGD without an IP); the RET stack is not used across it.
    fn disable(&mut self) -> u64 {
        self.flush();
        let off = self.put(Packet::TipPgd(Self::suppressed()));
        self.packet_en = false;
        self.stack.clear();
        off
    }

    /// The walk knows exactly where execution is, from the packet at `off`.
    fn resume_at(&mut self, off: u64) {
        self.decision = Some(off);
        self.tail_start = self.rows.len();
        self.tail_ip = self.cur_ip;
    }

    /// Row `row` (going to `to`) was decided.
    fn decided(&mut self, row: usize, to: u64) {
        self.tail_start = row + 1;
        self.tail_ip = to;
    }

    // ----- steps ------------------------------------------------------------------------

    fn step(&mut self, s: &Step, last: bool) {
        self.steps += 1;
        if self.ovf_left == Some(0) {
            self.end_overflow();
        }
        if self.packet_en {
            self.instructions += s.insns() as u64;
        }
        // The step's cycles pass before its branch retires and sends its packets.
        if let Some(c) = &mut self.clocks {
            let cycles = c.step_cycles(s.insns(), matches!(s, Step::Branch { .. }));
            self.pass(cycles);
        }
        if let Some(left) = &mut self.ovf_left {
            *left -= 1;
            self.step_in_overflow(s, last);
            return;
        }
        if self.packet_en && self.psb_due_at(true) {
            self.psb_inside(s.insns());
        }
        match *s {
            Step::Branch {
                ip,
                len,
                class,
                target,
                next,
                insns,
            } => {
                if !self.packet_en {
                    self.cur_ip = next;
                    return;
                }
                self.vis_insns += insns;
                self.branch(ip, ip + len as u64, class, target, next, last);
                // Right after a branch a packet decided, the decoder stands exactly here.
                if self.packet_en && !self.stopped && class.needs_trace() {
                    if self.psb_due_at(false) {
                        self.psb_plus();
                    } else if self.steps >= self.next_ovf {
                        self.start_overflow();
                    }
                } else if self.o.psb_at_any_step
                    && self.packet_en
                    && !self.stopped
                    && self.psb_due_at(false)
                {
                    self.psbs_off_decision += 1;
                    self.psb_plus();
                }
            }
            Step::Interrupt { insns, at, resume } => {
                if !self.packet_en {
                    self.cur_ip = resume;
                    return;
                }
                self.vis_insns += insns;
                self.cur_ip = at;
                self.first_arrival(at);
                self.flush();
                let off = self.ip_packet(Packet::Fup, at);
                if self.o.user_only {
                    // Cases 11c/13c, then back to user code (11b).
                    self.disable();
                    self.kernel_time();
                    self.psb_while_disabled();
                    self.enable(resume);
                } else {
                    // Case 11e.
                    self.ip_packet(Packet::Tip, resume);
                    self.cur_ip = resume;
                    self.resume_at(off);
                }
                if self.o.psb_at_any_step && self.psb_due_at(false) {
                    self.psbs_off_decision += 1;
                    self.psb_plus();
                }
            }
            Step::End { insns, at } => {
                if self.packet_en {
                    self.vis_insns += insns;
                }
                self.cur_ip = at;
                self.stop_at_end();
                self.stopped = true;
            }
        }
    }

    fn push_row(&mut self, r: BranchRow) -> usize {
        self.rows.push(r);
        self.lost.push(false);
        self.vis_insns = 0;
        self.rows.len() - 1
    }

    fn branch(&mut self, ip: u64, nlip: u64, class: InsnClass, target: u64, next: u64, last: bool) {
        let kind = class
            .branch_kind()
            .expect("a branch step ends with a branch");
        let mut r = BranchRow {
            ip,
            target: Some(next),
            kind,
            taken: class != InsnClass::Cond || next == target,
            compressed: false,
            insns: self.vis_insns,
            tsc: self.now(),
            cycles: None,
            cr3: None,
            offset: INHERIT,
        };
        self.cur_ip = next;
        match class {
            InsnClass::Cond => {
                let row = self.push_row(r);
                self.decision = None;
                self.push_bit(next == target, row);
                self.decided(row, next);
            }
            InsnClass::Jmp | InsnClass::Call => {
                r.offset = self.decision.unwrap_or(INHERIT);
                self.push_row(r);
                if class == InsnClass::Call && target != nlip {
                    self.call(nlip);
                }
            }
            InsnClass::Ret if self.o.ret_compression && self.stack.back() == Some(&next) => {
                self.stack.pop_back();
                r.compressed = true;
                self.compressed += 1;
                let row = self.push_row(r);
                self.decision = None;
                self.push_bit(true, row);
                self.decided(row, next);
            }
            InsnClass::JmpInd | InsnClass::CallInd if self.o.deferred_tips => {
                // The TIP waits (36.4.2.3); the row's offset is its, once written.
                let row = self.push_row(r);
                self.deferred.push((next, row));
                self.decision = None;
                self.decided(row, next);
                if class == InsnClass::CallInd {
                    self.call(nlip);
                }
            }
            InsnClass::Ret | InsnClass::JmpInd | InsnClass::CallInd => {
                // An uncompressed RET is never deferred: it forces out what waits.
                self.flush();
                let off = self.ip_packet(Packet::Tip, next);
                r.offset = off;
                let row = self.push_row(r);
                self.decision = Some(off);
                self.decided(row, next);
                if class == InsnClass::CallInd {
                    self.call(nlip);
                }
            }
            InsnClass::Far | InsnClass::Syscall => {
                if self.o.user_only {
                    // Case 10c: into a context not traced; the destination is not shown.
                    let off = self.disable();
                    r.target = None;
                    r.offset = off;
                    let row = self.push_row(r);
                    self.decision = Some(off);
                    self.decided(row, next);
                    if last {
                        // The program's exit: nothing more is traced.
                        self.stopped = true;
                    } else {
                        self.kernel_time();
                        self.psb_while_disabled();
                        self.enable(next);
                    }
                } else {
                    // Case 10e: the TIP alone.
                    self.flush();
                    let off = self.ip_packet(Packet::Tip, next);
                    r.offset = off;
                    let row = self.push_row(r);
                    self.decision = Some(off);
                    self.decided(row, next);
                }
            }
            InsnClass::Other => unreachable!("not a branch"),
        }
    }

    /// A near call pushes its next IP; a full stack loses its oldest entry. (With DisRETC
    /// the stack is of no use and is not kept.)
    fn call(&mut self, nlip: u64) {
        if !self.o.ret_compression {
            return;
        }
        if self.stack.len() == STACK {
            self.stack.pop_front();
            self.evictions += 1;
        }
        self.stack.push_back(nlip);
    }

    /// The internal buffer is full (36.3.8): what is pending goes out, then nothing until
    /// the overflow resolves.
    fn start_overflow(&mut self) {
        let p = self.o.overflow.expect("an overflow plan");
        self.flush();
        self.ovf_left = Some(
            self.rng
                .range(p.duration_steps.0, p.duration_steps.1)
                .max(1),
        );
        self.overflows += 1;
        self.next_ovf = self.steps + self.rng.range(p.every_steps.0, p.every_steps.1);
    }

    /// A step while packets are dropped: its rows are lost, the RET stack is not used.
    fn step_in_overflow(&mut self, s: &Step, last: bool) {
        match *s {
            Step::Branch {
                ip,
                class,
                target,
                next,
                insns,
                ..
            } => {
                self.vis_insns += insns;
                let user_far = self.o.user_only && class.is_far();
                let r = BranchRow {
                    ip,
                    target: (!user_far).then_some(next),
                    kind: class.branch_kind().expect("a branch"),
                    taken: class != InsnClass::Cond || next == target,
                    compressed: false,
                    insns: self.vis_insns,
                    tsc: self.now(),
                    cycles: None,
                    cr3: None,
                    offset: 0,
                };
                let row = self.push_row(r);
                self.lost[row] = true;
                self.cur_ip = next;
                if user_far && last {
                    self.stopped = true;
                }
            }
            Step::Interrupt { insns, resume, .. } => {
                self.vis_insns += insns;
                self.cur_ip = resume;
            }
            Step::End { at, .. } => {
                self.cur_ip = at;
                self.stopped = true;
            }
        }
    }

    /// The overflow resolves with PacketEn 1 (36.3.8, 36.4.2.16): OVF, then a FUP with the
    /// IP where tracing resumes, compressed against nothing that was lost (a 6-byte
    /// sign-extended payload). No RET is compressed across it.
    fn end_overflow(&mut self) {
        self.ovf_left = None;
        self.put(Packet::Ovf);
        let ip = self.cur_ip;
        let off = self.put(Packet::Fup(IpPayload {
            compression: IpCompression::Sext48,
            bits: ip & 0xFFFF_FFFF_FFFF,
        }));
        self.last_ip = ip;
        self.stack.clear();
        // The instructions since the last row ran while packets were dropped.
        self.vis_insns = 0;
        self.resume_at(off);
    }

    /// Tracing turned off where the execution stops (case 3b).
    fn stop_at_end(&mut self) {
        if !self.packet_en || self.ovf_left.is_some() {
            return;
        }
        let at = self.cur_ip;
        self.first_arrival(at);
        self.flush();
        self.ip_packet(Packet::Fup, at);
        self.disable();
    }

    /// An asynchronous event or a PSB+ at `x` ends a stretch of direct branches (no packet
    /// since the last decided row). If that stretch passed `x` before (a loop of direct branches
    /// spinning until the event), no trace can tell how many times: a decoder stops at the
    /// first arrival, and the rows after it are unprovable.
    fn first_arrival(&mut self, x: u64) {
        if let Some((r, k)) = self.arrival(x) {
            for l in &mut self.lost[r..] {
                *l = true;
            }
            self.vis_insns = k;
            self.tail_start = self.rows.len();
        }
    }

    /// Whether the undecided stretch of direct branches passed `x` before: the first row
    /// after that first arrival, and the instructions before `x` in its block.
    fn arrival(&mut self, x: u64) -> Option<(usize, u32)> {
        let mut start = self.tail_ip;
        for r in self.tail_start..self.rows.len() {
            let ip = self.rows[r].ip;
            if x >= start && x <= ip {
                if let Some(k) = self.blocks.get(self.images, start, None).index_of(x) {
                    return Some((r, k));
                }
            }
            start = self.rows[r].target?;
        }
        None
    }

    fn finish(mut self) -> PtOutput {
        if !self.stopped {
            self.stop_at_end();
        }
        let mut truth = PtTruth::default();
        let mut prev = 0;
        for r in &mut self.rows {
            if r.offset == INHERIT {
                r.offset = prev;
            }
            prev = r.offset;
            truth.rows.push(r);
        }
        truth.lost = self.lost;
        let summary = PtSummary {
            instructions: self.instructions,
            branches: truth.rows.len() as u64,
            compressed_rets: self.compressed,
            stack_evictions: self.evictions,
            packets_by_type: self
                .counts
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            psbs: self.psbs,
            psbs_off_decision: self.psbs_off_decision,
            psbs_inside: self.psbs_inside,
            overflows: self.overflows,
            lost_rows: truth.lost.iter().filter(|&&l| l).count() as u64,
            bytes: self.out.len() as u64,
        };
        PtOutput {
            bytes: self.out,
            truth,
            summary,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracemill_decode::pt::cpu::Errata;
    use tracemill_decode::pt::last_ip::LastIp;
    use tracemill_decode::pt::sync::PacketReader;
    use tracemill_decode::stream::TraceStream;

    /// The packets of a trace after its start (PSB, PSBEND, MODE.Exec, TIP.PGE), with IPs
    /// decompressed.
    fn listing(bytes: &[u8]) -> Vec<String> {
        let stream = TraceStream::linear(bytes);
        let mut last = LastIp::new();
        let mut v = Vec::new();
        for p in PacketReader::new(&stream, 0, stream.len(), Errata::default()) {
            let p = p.unwrap().packet;
            let ip = |last: &mut LastIp, pl: &IpPayload| match last.update(pl) {
                Some(ip) => format!("{ip:#x}"),
                None => "-".to_string(),
            };
            v.push(match p {
                Packet::Psb => {
                    last.reset();
                    "psb".to_string()
                }
                Packet::Tnt8(t) | Packet::Tnt64(t) => {
                    format!("tnt {:0w$b}", t.bits, w = t.len as usize)
                }
                Packet::Tip(pl) => format!("tip {}", ip(&mut last, &pl)),
                Packet::Fup(pl) => format!("fup {}", ip(&mut last, &pl)),
                Packet::TipPge(pl) => format!("tip.pge {}", ip(&mut last, &pl)),
                Packet::TipPgd(pl) => format!("tip.pgd {}", ip(&mut last, &pl)),
                p => p.name().to_string(),
            });
        }
        v
    }

    fn branch(ip: u64, len: u8, class: InsnClass, target: u64, next: u64, insns: u32) -> Step {
        Step::Branch {
            ip,
            len,
            class,
            target,
            next,
            insns,
        }
    }

    /// SDM Table 36-19 (TNT examples with deferred TIPs): the code flow of its left
    /// column gives the packets of its middle column, and with deferred TIPs those of its
    /// right one.
    #[test]
    fn table_36_19_deferred_tips() {
        use InsnClass::*;
        let steps = [
            branch(0x1004, 4, Cond, 0x2000, 0x1008, 2), // jnz Foo, not taken
            branch(0x1008, 2, JmpInd, 0, 0x1308, 1),    // jmp %rdx
            branch(0x130c, 4, Cond, 0x3000, 0x1310, 2), // jnz Bar, not taken
            branch(0x1314, 4, Cond, 0x1500, 0x1500, 2), // jnz Baz, taken
            branch(0x1504, 4, Cond, 0x4000, 0x1508, 2), // jg Exit, not taken
            branch(0x1508, 3, JmpInd, 0, 0x1100, 1),    // jmp %r15
            branch(0x1104, 4, Cond, 0x1000, 0x1108, 2), // jg Start, not taken
            Step::Interrupt {
                insns: 1,
                at: 0x110c,
                resume: 0xcc00,
            },
            Step::End {
                insns: 1,
                at: 0xcc01,
            },
        ];
        let images = ImageSet::new();
        let run = |deferred_tips| {
            let o = PtOptions {
                deferred_tips,
                user_only: false,
                ..PtOptions::default()
            };
            let out = encode_execution(&images, &o, 0x1000, steps);
            let l = listing(&out.bytes);
            assert_eq!(l[..4], ["psb", "psbend", "mode.exec", "tip.pge 0x1000"]);
            assert_eq!(l[l.len() - 2..], ["fup 0xcc01", "tip.pgd -"]);
            l[4..l.len() - 2].to_vec()
        };
        assert_eq!(
            run(false),
            [
                "tnt 0",
                "tip 0x1308",
                "tnt 010",
                "tip 0x1100",
                "tnt 0",
                "fup 0x110c",
                "tip 0xcc00"
            ]
        );
        assert_eq!(
            run(true),
            [
                "tnt 00100",
                "tip 0x1308",
                "tip 0x1100",
                "fup 0x110c",
                "tip 0xcc00"
            ]
        );
    }

    /// SDM 36.4.2.2, "Indirect Transfer Compression for Returns": a RET to the top of the
    /// call stack is a taken TNT bit and pops it; a zero-length CALL is not pushed; a RET
    /// elsewhere is a TIP and pops nothing; nothing is compressed across a PSB, nor with
    /// DisRETC.
    #[test]
    fn ret_compression_follows_the_call_stack() {
        use InsnClass::*;
        let steps = [
            branch(0x1000, 5, Call, 0x2000, 0x2000, 1), // call f: push 0x1005
            branch(0x2000, 5, Call, 0x2005, 0x2005, 1), // zero-length call: not pushed
            branch(0x2005, 5, Call, 0x3000, 0x3000, 1), // call g: push 0x200a
            branch(0x3000, 1, Ret, 0, 0x200a, 1),       // ret to 0x200a: compressed
            branch(0x200a, 1, Ret, 0, 0x9000, 1),       // wild ret: TIP, pops nothing
            branch(0x9000, 1, Ret, 0, 0x1005, 1),       // ret to 0x1005: compressed
            branch(0x1005, 2, JmpInd, 0, 0x1005, 1),    // jmp to itself (a TIP)
        ];
        let images = ImageSet::new();
        let run = |ret_compression, psb_every| {
            let o = PtOptions {
                ret_compression,
                psb_every,
                ..PtOptions::default()
            };
            let out = encode_execution(&images, &o, 0x1000, steps);
            let compressed: Vec<bool> = out.truth.rows.compressed.clone();
            (listing(&out.bytes), compressed)
        };
        let (l, c) = run(true, 4096);
        assert_eq!(
            l[4..],
            [
                "tnt 1",
                "tip 0x9000",
                "tnt 1",
                "tip 0x1005",
                "fup 0x1005",
                "tip.pgd -"
            ]
        );
        assert_eq!(c, [false, false, false, true, false, true, false]);
        let (l, c) = run(false, 4096);
        assert_eq!(
            l[4..8],
            ["tip 0x200a", "tip 0x9000", "tip 0x1005", "tip 0x1005"]
        );
        assert!(c.iter().all(|&c| !c));
        // A PSB+ after every packet-decided branch: the first RET (no PSB since its call)
        // is compressed, the last (its call before three PSBs) is not.
        let (l, c) = run(true, 1);
        assert_eq!(c, [false, false, false, true, false, false, false], "{l:?}");
        assert_eq!(l[8..10], ["psbend", "tip 0x9000"]);
        assert_eq!(l[13..15], ["psbend", "tip 0x1005"]);
        assert_eq!(l.iter().filter(|p| *p == "psb").count(), 5, "{l:?}");
    }
}
