//! Synthetic executions: deterministic seeded walks over the code of a real binary.
//!
//! A real program's run is bounded by what the program does; a walk is bounded by nothing,
//! so it makes GiB-scale traces with realistic code: real instruction lengths, real block
//! sizes, real branch targets. The walk is an [`Iterator`] of [`Step`]s and never holds
//! more than its block table, so traces of any length stream.
//!
//! How it moves:
//! - it starts at a **function entry**: from the ELF's `STT_FUNC` symbols when it has them;
//!   in a stripped binary (busybox), from a linear sweep of each executable segment that
//!   keeps every direct `CALL` target that is also an instruction start of the sweep (a
//!   call decoded out of data rarely lands on one). Every candidate must decode to a
//!   block that ends in a branch;
//! - **conditional branches** are taken with a probability fixed per branch by the seed
//!   and the branch address (sticky): back edges are taken 75–97% of the time, like loops;
//!   forward branches are mostly taken, mostly not, or balanced. A side whose code cannot
//!   be decoded is never chosen;
//! - **direct calls** push the return block on a shadow stack (bounded; the oldest frames
//!   are forgotten), **returns** pop it, except with probability `wild_ret_rate` (or an
//!   empty stack) when they go to a random function entry — an uncompressed return;
//! - **indirect jumps and calls** go to a random function entry;
//! - **SYSCALL and far transfers** resume at their NLIP, as if the kernel returned;
//! - with probability `interrupt_rate` per step, an **interrupt** stops execution at a
//!   random instruction boundary of the current block (possibly its first instruction or
//!   its branch) and resumes at the same address;
//! - code that cannot run on (invalid bytes, the end of a segment, or `HLT`/`UD2`, which
//!   fault in user mode; busybox reaches `exit` → `_exit` → `hlt` through every error
//!   path) ends in an interrupt before it that resumes in the innermost caller, at its
//!   call's NLIP, as if an exception unwound one frame (at a random function entry when
//!   the shadow stack is empty). So do traps the walk cannot leave by chance: 4096 steps
//!   in a row without a random choice (`for (;;) pause();`), or 65536 steps without a
//!   call, return or indirect branch (a loop whose conditional branches are random but
//!   lead nowhere else, like `_exit`'s `for (;;) { exit_group; exit; }`). The stream stays
//!   consistent throughout: each step starts where the previous one said.
//!
//! Calls outnumber returns (about 2:1 over busybox): a random path through a function
//! that calls inside a loop makes many calls per return, so the walk drifts deeper; the
//! bounded shadow stack only means the oldest frames are never returned to.
//!
//! Blocks are decoded once (with [`tracemill_decode::block::build_block`]) into a table
//! whose successors are resolved to table indices on first use, so the steady state is a
//! tight loop over an array: no hashing, no decoding.
//!
//! ```no_run
//! use tracemill_datasets::exec::synthetic::{Code, WalkConfig};
//!
//! let elf = std::fs::read("/usr/bin/busybox")?;
//! let code = Code::from_elf("busybox", &elf)?;
//! let walk = code.walk(&WalkConfig::new(42, 1_000_000_000));
//! let entry = walk.entry();
//! let insns: u64 = walk.map(|s| s.insns() as u64).sum(); // streams: nothing is kept
//! # let _ = (entry, insns);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::VecDeque;

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction};
use object::read::elf::ElfFile64;
use object::{Endianness, Object, ObjectSymbol, SymbolKind};
use tracemill_decode::block::{build_block, AddrMap, BlockEnd};
use tracemill_decode::image::ImageSet;
use tracemill_decode::insn::InsnClass;

use super::{Execution, Step};
use crate::rng::Rng;

/// Why a binary cannot be walked.
#[derive(Debug, thiserror::Error)]
pub enum SyntheticError {
    #[error("{name}: {source}")]
    Image {
        name: String,
        #[source]
        source: tracemill_decode::image::ImageError,
    },
    #[error("{name}: not a 64-bit ELF file: {source}")]
    Elf {
        name: String,
        #[source]
        source: object::Error,
    },
    #[error("{name}: no function entry found to start from")]
    NoEntries { name: String },
}

/// Where the function entries came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntrySource {
    /// `STT_FUNC` symbols.
    Symbols,
    /// Direct call targets of a linear sweep (stripped binary).
    CallTargets,
}

/// A binary's code and its function entries, ready to walk.
pub struct Code<'a> {
    name: String,
    elf: &'a [u8],
    images: ImageSet<'a>,
    entries: Vec<u64>,
    source: EntrySource,
}

impl<'a> Code<'a> {
    /// Load a non-PIE ELF at its own addresses and find its function entries.
    pub fn from_elf(name: &str, elf: &'a [u8]) -> Result<Self, SyntheticError> {
        let mut images = ImageSet::new();
        images
            .add_elf(name, elf, None, None)
            .map_err(|source| SyntheticError::Image {
                name: name.to_string(),
                source,
            })?;
        let file = ElfFile64::<Endianness>::parse(elf).map_err(|source| SyntheticError::Elf {
            name: name.to_string(),
            source,
        })?;
        let in_code = |a: u64| images.code_at(a, None).is_ok();
        let mut cands: Vec<u64> = file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.size() > 0)
            .map(|s| s.address())
            .filter(|&a| in_code(a))
            .collect();
        let source = if cands.is_empty() {
            cands = call_targets(&images);
            EntrySource::CallTargets
        } else {
            EntrySource::Symbols
        };
        cands.push(file.entry());
        cands.sort_unstable();
        cands.dedup();
        cands.retain(|&a| {
            let b = build_block(&images, a, None);
            b.end == BlockEnd::Branch || b.end == BlockEnd::Split
        });
        if cands.is_empty() {
            return Err(SyntheticError::NoEntries {
                name: name.to_string(),
            });
        }
        Ok(Code {
            name: name.to_string(),
            elf,
            images,
            entries: cands,
            source,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn elf(&self) -> &'a [u8] {
        self.elf
    }
    pub fn images(&self) -> &ImageSet<'a> {
        &self.images
    }
    /// Function entries, sorted.
    pub fn entries(&self) -> &[u64] {
        &self.entries
    }
    pub fn entry_source(&self) -> EntrySource {
        self.source
    }

    /// A walk over this code.
    pub fn walk(&self, config: &WalkConfig) -> Walk<'_, 'a> {
        Walk::new(self, config)
    }

    /// A walk collected into an [`Execution`] — for small walks only; large ones should
    /// stream from [`Code::walk`].
    pub fn execution(&self, config: &WalkConfig) -> Execution {
        let walk = self.walk(config);
        let entry = walk.entry();
        Execution {
            name: format!("synthetic {} seed {}", self.name, config.seed),
            images: vec![(self.name.clone(), self.elf.to_vec())],
            entry,
            steps: walk.collect(),
        }
    }
}

/// Direct call targets of a linear sweep that land on an instruction start of the sweep.
fn call_targets(images: &ImageSet<'_>) -> Vec<u64> {
    let segs = images.segments();
    let mut starts: Vec<Vec<u64>> = Vec::with_capacity(segs.len());
    let mut calls = Vec::new();
    let mut ins = Instruction::default();
    for s in segs {
        let mut bits = vec![0u64; s.data.len().div_ceil(64)];
        let mut dec = Decoder::with_ip(64, s.data, s.start, DecoderOptions::NONE);
        while dec.can_decode() {
            let off = (dec.ip() - s.start) as usize;
            bits[off / 64] |= 1 << (off % 64);
            dec.decode_out(&mut ins);
            if !ins.is_invalid() && ins.flow_control() == FlowControl::Call && ins.is_call_near() {
                calls.push(ins.near_branch_target());
            }
        }
        starts.push(bits);
    }
    calls.sort_unstable();
    calls.dedup();
    calls.retain(|&t| {
        segs.iter().zip(&starts).any(|(s, bits)| {
            s.contains(t) && {
                let off = (t - s.start) as usize;
                bits[off / 64] >> (off % 64) & 1 == 1
            }
        })
    });
    calls
}

/// Parameters of a walk.
#[derive(Clone, Debug)]
pub struct WalkConfig {
    pub seed: u64,
    /// Stop after this many steps.
    pub max_steps: u64,
    /// Stop once this many instructions have retired (the last step may pass it).
    pub max_insns: u64,
    /// Probability per step of an interrupt inside the current block.
    pub interrupt_rate: f64,
    /// Probability per return of going somewhere other than the caller.
    pub wild_ret_rate: f64,
    /// Deepest shadow stack; deeper calls forget the oldest frames.
    pub max_depth: usize,
}

impl WalkConfig {
    /// A walk of `max_steps` steps with the default rates.
    pub fn new(seed: u64, max_steps: u64) -> Self {
        WalkConfig {
            seed,
            max_steps,
            max_insns: u64::MAX,
            interrupt_rate: 1.0 / 4096.0,
            wild_ret_rate: 1.0 / 256.0,
            max_depth: 256,
        }
    }
}

/// Table index meaning "not resolved yet".
const UNRESOLVED: u32 = u32::MAX;
/// Steps in a row without a random choice before the walk gives up on the loop it is in.
const FORCED_LIMIT: u32 = 4096;
/// Steps in a row without a call, return or indirect branch, likewise.
const LOCAL_LIMIT: u32 = 1 << 16;
/// `p_taken` meaning "always".
const ALWAYS: u64 = 1 << 32;

/// A block of the walk: a straight run ending with a branch, or with undecodable code.
#[derive(Clone, Copy, Debug)]
struct Node {
    start: u64,
    /// The branch instruction; for a dead end, the first undecodable address.
    ip: u64,
    target: u64,
    nlip: u64,
    /// Instructions, the branch included.
    insns: u32,
    /// Offset of this block's instruction lengths in `Walk::lens`.
    lens_at: u32,
    taken: u32,
    fall: u32,
    /// Cond: taken when the low 32 bits of a draw are below this (0..=1<<32).
    p_taken: u64,
    len: u8,
    /// `Other` for a dead end.
    class: InsnClass,
}

impl Node {
    fn dead(&self) -> bool {
        self.class == InsnClass::Other
    }
}

/// A seeded walk; see the module docs.
pub struct Walk<'c, 'a> {
    code: &'c Code<'a>,
    rng: Rng,
    seed: u64,
    nodes: Vec<Node>,
    lens: Vec<u8>,
    index: AddrMap<u64, u32>,
    entry_ids: Vec<u32>,
    stack: VecDeque<u32>,
    max_depth: usize,
    /// Current block and how many of its instructions already retired.
    cur: u32,
    skip: u32,
    forced: u32,
    local: u32,
    int_threshold: u64,
    wild_threshold: u64,
    max_steps: u64,
    max_insns: u64,
    steps: u64,
    insns: u64,
    first: u64,
}

impl<'c, 'a> Walk<'c, 'a> {
    pub fn new(code: &'c Code<'a>, config: &WalkConfig) -> Self {
        let root = Rng::new(config.seed);
        let mut w = Walk {
            code,
            rng: root.fork(1),
            seed: config.seed,
            nodes: Vec::new(),
            lens: Vec::new(),
            index: AddrMap::default(),
            entry_ids: vec![UNRESOLVED; code.entries.len()],
            stack: VecDeque::with_capacity(config.max_depth.max(1)),
            max_depth: config.max_depth.max(1),
            cur: 0,
            skip: 0,
            forced: 0,
            local: 0,
            int_threshold: probability(config.interrupt_rate, 64),
            wild_threshold: probability(config.wild_ret_rate, 32),
            max_steps: config.max_steps,
            max_insns: config.max_insns,
            steps: 0,
            insns: 0,
            first: 0,
        };
        w.cur = w.random_entry();
        w.first = w.nodes[w.cur as usize].start;
        w
    }

    /// First executed address.
    pub fn entry(&self) -> u64 {
        self.first
    }
    /// Steps produced so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }
    /// Instructions retired so far.
    pub fn insns(&self) -> u64 {
        self.insns
    }
    /// Blocks decoded so far.
    pub fn blocks(&self) -> usize {
        self.nodes.len()
    }

    #[inline]
    fn step(&mut self) -> Step {
        let id = self.cur;
        let n = self.nodes[id as usize];
        let left = n.insns - self.skip;
        let r = self.rng.next_u64();
        if n.dead() {
            return self.escape(left, n.ip);
        }
        if r < self.int_threshold {
            return self.interrupt(&n, left);
        }
        if self.forced >= FORCED_LIMIT || self.local >= LOCAL_LIMIT {
            let at = self.address_of(&n, self.skip);
            return self.escape(0, at);
        }
        self.forced += 1;
        self.local += 1;
        if matches!(
            n.class,
            InsnClass::Call | InsnClass::CallInd | InsnClass::Ret | InsnClass::JmpInd
        ) {
            self.local = 0;
        }
        let next = match n.class {
            InsnClass::Cond => {
                let take = (r as u32 as u64) < n.p_taken;
                if n.p_taken != 0 && n.p_taken != ALWAYS {
                    self.forced = 0;
                }
                self.cond_successor(id, take)
            }
            InsnClass::Jmp => self.taken(id),
            InsnClass::Call => {
                let ret = self.fall(id);
                self.push(ret);
                self.taken(id)
            }
            InsnClass::CallInd => {
                let ret = self.fall(id);
                self.push(ret);
                self.forced = 0;
                self.random_entry()
            }
            InsnClass::JmpInd => {
                self.forced = 0;
                self.random_entry()
            }
            InsnClass::Ret => match self.stack.pop_back() {
                Some(ret) if (r as u32 as u64) >= self.wild_threshold => ret,
                _ => {
                    self.forced = 0;
                    self.random_entry()
                }
            },
            // Syscall, far transfers: the kernel returns to the NLIP.
            _ => self.fall(id),
        };
        self.skip = 0;
        self.cur = next;
        Step::Branch {
            ip: n.ip,
            len: n.len,
            class: n.class,
            target: n.target,
            next: self.nodes[next as usize].start,
            insns: left,
        }
    }

    /// An interrupt at a random boundary of the rest of the block; resumes there.
    #[cold]
    fn interrupt(&mut self, n: &Node, left: u32) -> Step {
        // At least one instruction retires first: an interrupt at the very address where
        // tracing just resumed is indistinguishable in the trace from a far transfer that
        // ends a packet-free loop back to it (see the decoder's `far_ahead`).
        let k = 1 + self.rng.below(left.saturating_sub(1).max(1) as u64) as u32;
        let k = k.min(left.saturating_sub(1));
        if k == 0 {
            return Step::Interrupt {
                insns: 0,
                at: self.address_of(n, self.skip),
                resume: self.address_of(n, self.skip),
            };
        }
        let at = self.address_of(n, self.skip + k);
        self.skip += k;
        Step::Interrupt {
            insns: k,
            at,
            resume: at,
        }
    }

    /// `insns` more instructions retire, execution stops before `at` and resumes in the
    /// innermost caller, at its call's NLIP, as if an exception unwound one frame (or at a
    /// random function entry when no frame is known).
    #[cold]
    fn escape(&mut self, insns: u32, at: u64) -> Step {
        self.forced = 0;
        self.local = 0;
        self.skip = 0;
        self.cur = match self.stack.pop_back() {
            Some(ret) => ret,
            None => self.random_entry(),
        };
        Step::Interrupt {
            insns,
            at,
            resume: self.nodes[self.cur as usize].start,
        }
    }

    /// Address of instruction `k` of the block.
    fn address_of(&self, n: &Node, k: u32) -> u64 {
        let at = n.lens_at as usize;
        self.lens[at..at + k as usize]
            .iter()
            .fold(n.start, |a, &l| a + l as u64)
    }

    #[inline]
    fn push(&mut self, ret: u32) {
        if self.stack.len() == self.max_depth {
            self.stack.pop_front();
        }
        self.stack.push_back(ret);
    }

    #[inline]
    fn cond_successor(&mut self, id: u32, take: bool) -> u32 {
        let s = if take { self.taken(id) } else { self.fall(id) };
        let dead_start = {
            let d = &self.nodes[s as usize];
            d.dead() && d.insns == 0
        };
        if !dead_start {
            return s;
        }
        // Never walk into undecodable code by choice: pin the branch to its other side.
        self.nodes[id as usize].p_taken = if take { 0 } else { ALWAYS };
        if take {
            self.fall(id)
        } else {
            self.taken(id)
        }
    }

    #[inline]
    fn taken(&mut self, id: u32) -> u32 {
        let t = self.nodes[id as usize].taken;
        if t != UNRESOLVED {
            return t;
        }
        let addr = self.nodes[id as usize].target;
        let t = self.node_at(addr);
        self.nodes[id as usize].taken = t;
        t
    }

    #[inline]
    fn fall(&mut self, id: u32) -> u32 {
        let f = self.nodes[id as usize].fall;
        if f != UNRESOLVED {
            return f;
        }
        let addr = self.nodes[id as usize].nlip;
        let f = self.node_at(addr);
        self.nodes[id as usize].fall = f;
        f
    }

    fn random_entry(&mut self) -> u32 {
        let i = self.rng.below(self.entry_ids.len() as u64) as usize;
        let id = self.entry_ids[i];
        if id != UNRESOLVED {
            return id;
        }
        let id = self.node_at(self.code.entries[i]);
        self.entry_ids[i] = id;
        id
    }

    /// The block at `addr`, decoded on first use.
    #[cold]
    fn node_at(&mut self, addr: u64) -> u32 {
        if let Some(&id) = self.index.get(&addr) {
            return id;
        }
        let images = &self.code.images;
        let lens_at = self.lens.len() as u32;
        let mut b = build_block(images, addr, None);
        self.lens.extend_from_slice(&b.lens);
        while b.end == BlockEnd::Split {
            b = build_block(images, b.next, None);
            self.lens.extend_from_slice(&b.lens);
        }
        let mut insns = self.lens.len() as u32 - lens_at;
        let mut end = b.end;
        let mut stop = b.next;
        // HLT and UD2 decode fine but fault in user mode: the block ends before them.
        let mut a = addr;
        for (i, &l) in self.lens[lens_at as usize..].iter().enumerate() {
            let code = images.code_at(a, None).unwrap_or(&[]);
            if code.first() == Some(&0xF4) || code.starts_with(&[0x0F, 0x0B]) {
                insns = i as u32;
                end = BlockEnd::Invalid;
                stop = a;
                break;
            }
            a += l as u64;
        }
        self.lens.truncate((lens_at + insns) as usize);
        let node = if end == BlockEnd::Branch {
            let len = *b.lens.last().expect("a branch block has its branch");
            Node {
                start: addr,
                ip: b.last_ip,
                target: b.target,
                nlip: b.next,
                insns,
                lens_at,
                taken: UNRESOLVED,
                fall: UNRESOLVED,
                p_taken: if b.class == InsnClass::Cond {
                    sticky(self.seed, b.last_ip, b.target)
                } else {
                    0
                },
                len,
                class: b.class,
            }
        } else {
            Node {
                start: addr,
                ip: stop,
                target: 0,
                nlip: stop,
                insns,
                lens_at,
                taken: UNRESOLVED,
                fall: UNRESOLVED,
                p_taken: 0,
                len: 0,
                class: InsnClass::Other,
            }
        };
        let id = self.nodes.len() as u32;
        self.nodes.push(node);
        self.index.insert(addr, id);
        id
    }
}

impl Iterator for Walk<'_, '_> {
    type Item = Step;

    #[inline]
    fn next(&mut self) -> Option<Step> {
        if self.steps >= self.max_steps || self.insns >= self.max_insns {
            return None;
        }
        let s = self.step();
        self.steps += 1;
        self.insns += s.insns() as u64;
        Some(s)
    }
}

/// `p` as a threshold on a uniform `bits`-bit draw.
fn probability(p: f64, bits: u32) -> u64 {
    let scale = 2f64.powi(bits as i32);
    (p.clamp(0.0, 1.0) * scale).min(scale - 1.0) as u64
}

/// The taken probability of the conditional branch at `ip`, fixed by seed and address.
fn sticky(seed: u64, ip: u64, target: u64) -> u64 {
    let mut r = Rng::new(seed ^ ip.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let u = r.below(1 << 20) as f64 / (1u64 << 20) as f64;
    let p = if target <= ip {
        0.75 + 0.22 * u // a loop's back edge
    } else {
        match r.below(3) {
            0 => 0.02 + 0.18 * u,
            1 => 0.80 + 0.18 * u,
            _ => 0.20 + 0.60 * u,
        }
    };
    (p * ALWAYS as f64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::steps::Checker;

    /// A hand-made "binary" is not an ELF; test the walk on a raw image by building the
    /// `Code` directly.
    fn raw_code(bytes: &'static [u8], entries: Vec<u64>) -> Code<'static> {
        let mut images = ImageSet::new();
        images.add_raw("raw", bytes, 0x1000, None);
        Code {
            name: "raw".into(),
            elf: bytes,
            images,
            entries,
            source: EntrySource::Symbols,
        }
    }

    /// ```text
    /// 1000 f:  xor eax,eax        31 c0
    /// 1002 l:  inc eax            ff c0
    /// 1004     cmp eax,5          83 f8 05
    /// 1007     jne l              75 f9
    /// 1009     call g             e8 05 00 00 00
    /// 100e     syscall            0f 05
    /// 1010     jmp rax            ff e0
    /// 1012     (06: invalid)
    /// 1013 g:  nop                90
    /// 1014     je 1012            74 fc   (taken side undecodable)
    /// 1016     ret                c3
    /// ```
    const CODE: [u8; 23] = [
        0x31, 0xC0, 0xFF, 0xC0, 0x83, 0xF8, 0x05, 0x75, 0xF9, 0xE8, 0x05, 0x00, 0x00, 0x00, 0x0F,
        0x05, 0xFF, 0xE0, 0x06, 0x90, 0x74, 0xFC, 0xC3,
    ];

    #[test]
    fn walks_are_consistent_and_reproducible() {
        let code = raw_code(&CODE, vec![0x1000, 0x1013]);
        let mut cfg = WalkConfig::new(9, 20_000);
        cfg.interrupt_rate = 0.05;
        cfg.wild_ret_rate = 0.1;
        let a: Vec<Step> = code.walk(&cfg).collect();
        let b: Vec<Step> = code.walk(&cfg).collect();
        assert_eq!(a, b);
        assert_eq!(a.len(), 20_000);
        let entry = code.walk(&cfg).entry();
        let stats = Checker::check_all(code.images(), entry, a.iter().copied()).unwrap();
        assert!(stats.interrupts > 100, "{stats:?}");
        assert!(stats.count(InsnClass::Cond) > 1000);
        assert!(stats.rets_to_caller > 100);
        // The je at 1014 never takes its undecodable side.
        assert!(!a.iter().any(|s| matches!(
            s,
            Step::Branch {
                ip: 0x1014,
                next: 0x1012,
                ..
            }
        )));
        let c: Vec<Step> = code.walk(&WalkConfig::new(10, 20_000)).collect();
        assert_ne!(a, c);
    }

    #[test]
    fn instruction_budget_stops_the_walk() {
        let code = raw_code(&CODE, vec![0x1000]);
        let mut cfg = WalkConfig::new(1, u64::MAX);
        cfg.max_insns = 10_000;
        let mut w = code.walk(&cfg);
        let n: u64 = w.by_ref().map(|s| s.insns() as u64).sum();
        assert!((10_000..10_010).contains(&n));
        assert_eq!(w.insns(), n);
    }

    #[test]
    fn sticky_probabilities_favour_back_edges() {
        let p = sticky(3, 0x2000, 0x1000) as f64 / ALWAYS as f64;
        assert!((0.75..=0.97).contains(&p));
        assert_eq!(sticky(3, 0x2000, 0x1000), sticky(3, 0x2000, 0x1000));
        assert_eq!(probability(1.0, 32), (1 << 32) - 1);
        assert_eq!(probability(0.0, 64), 0);
    }
}
