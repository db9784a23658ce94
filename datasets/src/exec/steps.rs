//! From retired instruction addresses to [`Step`]s, and a checker that proves a step
//! stream consistent with the code it claims to have run.
//!
//! [`StepBuilder`] takes what a per-instruction source (qemu's exec log) knows: the
//! address of each instruction as it retires, plus the points where something
//! asynchronous stopped execution *before* an instruction. It classifies each address
//! once (iced-x86, cached per address) and groups instructions into steps:
//!
//! - a branch ends a [`Step::Branch`] whose `next` is the following retired address;
//! - a non-branch followed by anything but its NLIP means execution was diverted after it
//!   retired (a signal delivered at an instruction boundary): [`Step::Interrupt`] with
//!   `at` = its NLIP (what would have run next) and `resume` = the address that did run;
//! - a direct branch (`Cond`, `Jmp`, `Call`) followed by an address it cannot reach
//!   retired normally and was diverted just after: for `Jmp`/`Call` the branch went to
//!   its target; for `Cond` the outcome is unknowable, and we record it as **not taken**,
//!   then an interrupt at its NLIP resuming at the observed address;
//! - for `Syscall` (and the other far classes) `next` is simply the next retired address:
//!   the kernel is not part of the execution;
//! - the last instruction gets `next` = its NLIP (its target for a direct `Jmp`/`Call`),
//!   or, when it is not a branch, the stream closes with [`Step::End`].
//!
//! [`Checker`] is the naive reference for every source: it re-walks the image from the
//! entry, `insns` instructions per step, and demands that each branch step lands exactly
//! on its branch, each interrupt on an instruction boundary, and that direct branches go
//! where their encoding says. It also keeps a shadow call stack to count returns that
//! went back to their call site.
//!
//! ```
//! use tracemill_datasets::exec::steps::{steps_from_ips, Checker};
//! use tracemill_datasets::exec::Step;
//! use tracemill_decode::image::ImageSet;
//! use tracemill_decode::insn::InsnClass;
//!
//! // 1000: nop; 1001: je 1000 (74 fd); 1003: nop
//! let code = [0x90, 0x74, 0xFD, 0x90];
//! let mut images = ImageSet::new();
//! images.add_raw("demo", &code, 0x1000, None);
//! let (entry, steps) = steps_from_ips(&images, [0x1000, 0x1001, 0x1000, 0x1001, 0x1003])?;
//! assert_eq!(steps.len(), 3); // taken, not taken, then the nop ends the stream
//! assert!(matches!(steps[0], Step::Branch { class: InsnClass::Cond, next: 0x1000, insns: 2, .. }));
//! assert_eq!(steps[2], Step::End { insns: 1, at: 0x1004 });
//! let stats = Checker::check_all(&images, entry, steps)?;
//! assert_eq!(stats.insns, 5);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::VecDeque;

use tracemill_decode::block::{AddrMap, BlockCache, BlockEnd};
use tracemill_decode::image::ImageSet;
use tracemill_decode::insn::{decode_insn, InsnClass, InsnError, InsnInfo};

use super::Step;

/// Why an address could not become part of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// The execution ran code no image holds (a JIT, a vdso, a wrong image).
    #[error("retired instruction #{index} at {ip:#x} is outside every code image")]
    NoImage { ip: u64, index: u64 },
    /// The image bytes at the address do not decode.
    #[error("retired instruction #{index} at {ip:#x} does not decode (wrong image?)")]
    Invalid { ip: u64, index: u64 },
}

/// Builds steps from retired instruction addresses, one at a time.
pub struct StepBuilder<'i, 'a> {
    images: &'i ImageSet<'a>,
    cache: AddrMap<u64, InsnInfo>,
    /// The last retired instruction; its successor is not known yet.
    held: Option<InsnInfo>,
    /// Instructions of the open step retired before `held`.
    run: u32,
    /// An asynchronous event stopped execution before this address; the next retired
    /// address is where execution resumed.
    interrupted: Option<u64>,
    entry: Option<u64>,
    retired: u64,
    steps: Vec<Step>,
}

impl<'i, 'a> StepBuilder<'i, 'a> {
    pub fn new(images: &'i ImageSet<'a>) -> Self {
        StepBuilder {
            images,
            cache: AddrMap::default(),
            held: None,
            run: 0,
            interrupted: None,
            entry: None,
            retired: 0,
            steps: Vec::new(),
        }
    }

    /// The instruction at `ip`, decoded once per address.
    #[inline]
    pub fn insn(&mut self, ip: u64) -> Result<InsnInfo, StepError> {
        if let Some(i) = self.cache.get(&ip) {
            return Ok(*i);
        }
        let index = self.retired;
        let code = self
            .images
            .code_at(ip, None)
            .map_err(|_| StepError::NoImage { ip, index })?;
        let info = decode_insn(code, ip).map_err(|e| match e {
            InsnError::NoImage => StepError::NoImage { ip, index },
            InsnError::Invalid => StepError::Invalid { ip, index },
        })?;
        self.cache.insert(ip, info);
        Ok(info)
    }

    /// The instruction at `ip` retired.
    pub fn retire(&mut self, ip: u64) -> Result<(), StepError> {
        let info = self.insn(ip)?;
        self.entry.get_or_insert(ip);
        if let Some(at) = self.interrupted.take() {
            self.push(Step::Interrupt {
                insns: self.run,
                at,
                resume: ip,
            });
            self.run = 0;
        } else if let Some(prev) = self.held {
            self.resolve(prev, ip);
        }
        self.held = Some(info);
        self.retired += 1;
        Ok(())
    }

    /// Something asynchronous stopped execution before the instruction at `at` (which
    /// did not retire, and will be retired again if execution comes back to it). The next
    /// [`retire`](Self::retire) gives the address execution resumed at.
    pub fn interrupt(&mut self, at: u64) {
        self.entry.get_or_insert(at);
        if let Some(first) = self.interrupted.replace(at) {
            // A second event before anything retired: the first resumed at `at`.
            self.push(Step::Interrupt {
                insns: self.run,
                at: first,
                resume: at,
            });
            self.run = 0;
        } else if let Some(prev) = self.held.take() {
            self.resolve(prev, at);
        }
    }

    /// Instructions retired so far.
    pub fn retired(&self) -> u64 {
        self.retired
    }

    /// Close the stream: the entry (first address) and the steps.
    pub fn finish(mut self) -> (u64, Vec<Step>) {
        if let Some(at) = self.interrupted.take() {
            self.push(Step::End {
                insns: self.run,
                at,
            });
        } else if let Some(last) = self.held.take() {
            let next = match last.class {
                InsnClass::Jmp | InsnClass::Call => last.target,
                _ => last.nlip(),
            };
            if last.class.is_branch() {
                self.branch(last, next);
            } else {
                self.push(Step::End {
                    insns: self.run + 1,
                    at: next,
                });
            }
        }
        (self.entry.unwrap_or(0), self.steps)
    }

    /// `prev` retired and `next` ran after it.
    fn resolve(&mut self, prev: InsnInfo, next: u64) {
        let expected = match prev.class {
            InsnClass::Other => {
                if next == prev.nlip() {
                    self.run += 1;
                } else {
                    self.push(Step::Interrupt {
                        insns: self.run + 1,
                        at: prev.nlip(),
                        resume: next,
                    });
                    self.run = 0;
                }
                return;
            }
            InsnClass::Cond if next == prev.target => next,
            InsnClass::Cond => prev.nlip(),
            InsnClass::Jmp | InsnClass::Call => prev.target,
            _ => next,
        };
        self.branch(prev, expected);
        if expected != next {
            self.push(Step::Interrupt {
                insns: 0,
                at: expected,
                resume: next,
            });
        }
    }

    fn branch(&mut self, b: InsnInfo, next: u64) {
        self.push(Step::Branch {
            ip: b.ip,
            len: b.len,
            class: b.class,
            target: b.target,
            next,
            insns: self.run + 1,
        });
        self.run = 0;
    }

    #[inline]
    fn push(&mut self, s: Step) {
        self.steps.push(s);
    }
}

/// Steps of a whole sequence of retired addresses (no interrupts known beyond what the
/// addresses themselves show). Returns the entry and the steps.
pub fn steps_from_ips(
    images: &ImageSet<'_>,
    ips: impl IntoIterator<Item = u64>,
) -> Result<(u64, Vec<Step>), StepError> {
    let mut b = StepBuilder::new(images);
    for ip in ips {
        b.retire(ip)?;
    }
    Ok(b.finish())
}

/// A step stream that does not match its code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("step #{index} {step:?}: {what}")]
pub struct CheckError {
    pub index: u64,
    pub step: Step,
    pub what: String,
}

/// What a checked stream contained.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckStats {
    pub steps: u64,
    pub insns: u64,
    /// Branch steps per [`InsnClass`] (indexed by `class as usize`).
    pub branches: [u64; 9],
    pub interrupts: u64,
    /// Returns to the NLIP of the matching call.
    pub rets_to_caller: u64,
    /// Returns elsewhere (longjmp-like, or a synthetic wild return).
    pub rets_elsewhere: u64,
    /// Returns with nothing on the shadow stack (from frames entered before the start).
    pub rets_unmatched: u64,
    pub max_depth: usize,
    pub ended: bool,
}

impl CheckStats {
    pub fn count(&self, class: InsnClass) -> u64 {
        self.branches[class as usize]
    }
}

/// Re-walks an execution step by step against its code (see the module docs).
pub struct Checker<'i, 'a> {
    images: &'i ImageSet<'a>,
    cache: BlockCache,
    /// Where the next step starts executing.
    pos: u64,
    stack: VecDeque<u64>,
    stats: CheckStats,
}

/// Deepest shadow stack kept; older frames are forgotten.
const CHECK_DEPTH: usize = 1 << 16;

impl<'i, 'a> Checker<'i, 'a> {
    pub fn new(images: &'i ImageSet<'a>, entry: u64) -> Self {
        Checker {
            images,
            cache: BlockCache::new(),
            pos: entry,
            stack: VecDeque::new(),
            stats: CheckStats::default(),
        }
    }

    /// Check a whole stream.
    pub fn check_all(
        images: &'i ImageSet<'a>,
        entry: u64,
        steps: impl IntoIterator<Item = Step>,
    ) -> Result<CheckStats, CheckError> {
        let mut c = Checker::new(images, entry);
        for s in steps {
            c.step(&s)?;
        }
        Ok(c.stats)
    }

    pub fn stats(&self) -> &CheckStats {
        &self.stats
    }

    /// Check the next step.
    pub fn step(&mut self, s: &Step) -> Result<(), CheckError> {
        let index = self.stats.steps;
        let fail = |what: String| CheckError {
            index,
            step: *s,
            what,
        };
        if self.stats.ended {
            return Err(fail("step after the end".into()));
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
                if insns == 0 {
                    return Err(fail("branch step with no instructions".into()));
                }
                let at = self.walk(insns - 1).map_err(&fail)?;
                if at != ip {
                    return Err(fail(format!(
                        "{} instructions from {:#x} end at {at:#x}, not at the branch",
                        insns - 1,
                        self.pos
                    )));
                }
                let b = self.cache.get(self.images, ip, None);
                if b.end != BlockEnd::Branch || b.insns() != 1 {
                    return Err(fail(format!("no branch instruction at {ip:#x}")));
                }
                if (b.class, b.lens[0], b.target) != (class, len, target) {
                    return Err(fail(format!(
                        "the code has {:?} len {} target {:#x} at {ip:#x}",
                        b.class, b.lens[0], b.target
                    )));
                }
                let nlip = b.next;
                match class {
                    InsnClass::Cond if next != target && next != nlip => {
                        return Err(fail("conditional branch to neither side".into()));
                    }
                    InsnClass::Jmp | InsnClass::Call if next != target => {
                        return Err(fail("direct branch not to its target".into()));
                    }
                    InsnClass::Call | InsnClass::CallInd => {
                        if self.stack.len() == CHECK_DEPTH {
                            self.stack.pop_front();
                        }
                        self.stack.push_back(nlip);
                        self.stats.max_depth = self.stats.max_depth.max(self.stack.len());
                    }
                    InsnClass::Ret => match self.stack.pop_back() {
                        Some(r) if r == next => self.stats.rets_to_caller += 1,
                        Some(_) => self.stats.rets_elsewhere += 1,
                        None => self.stats.rets_unmatched += 1,
                    },
                    _ => {}
                }
                self.stats.branches[class as usize] += 1;
                self.pos = next;
            }
            Step::Interrupt { insns, at, resume } => {
                let end = self.walk(insns).map_err(&fail)?;
                if end != at {
                    return Err(fail(format!(
                        "{insns} instructions from {:#x} end at {end:#x}",
                        self.pos
                    )));
                }
                self.stats.interrupts += 1;
                self.pos = resume;
            }
            Step::End { insns, at } => {
                let end = self.walk(insns).map_err(&fail)?;
                if end != at {
                    return Err(fail(format!(
                        "{insns} instructions from {:#x} end at {end:#x}",
                        self.pos
                    )));
                }
                self.stats.ended = true;
            }
        }
        self.stats.steps += 1;
        self.stats.insns += s.insns() as u64;
        Ok(())
    }

    /// Address reached after `n` non-branch instructions from `self.pos`.
    fn walk(&mut self, mut n: u32) -> Result<u64, String> {
        let mut pos = self.pos;
        loop {
            let b = self.cache.get(self.images, pos, None);
            let plain = b.insns() - u32::from(b.end == BlockEnd::Branch);
            if n <= plain {
                return Ok(b.lens[..n as usize].iter().fold(pos, |a, &l| a + l as u64));
            }
            match b.end {
                BlockEnd::Split => {
                    n -= plain;
                    pos = b.next;
                }
                BlockEnd::Branch => {
                    return Err(format!(
                        "runs through the {:?} branch at {:#x}",
                        b.class, b.last_ip
                    ))
                }
                end => return Err(format!("runs into {end:?} code at {:#x}", b.next)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny program at 0x1000:
    ///
    /// ```text
    /// 1000 nop
    /// 1001 je 1008            (74 05)
    /// 1003 call 100a          (e8 02 00 00 00)
    /// 1008 nop
    /// 1009 ret
    /// 100a nop
    /// 100b rep movsb          (f3 a4)
    /// 100d ret
    /// 100e syscall            (0f 05)
    /// 1010 jmp rax            (ff e0)
    /// 1012 nop
    /// ```
    const CODE: [u8; 19] = [
        0x90, 0x74, 0x05, 0xE8, 0x02, 0x00, 0x00, 0x00, 0x90, 0xC3, 0x90, 0xF3, 0xA4, 0xC3, 0x0F,
        0x05, 0xFF, 0xE0, 0x90,
    ];

    fn images() -> ImageSet<'static> {
        let mut set = ImageSet::new();
        set.add_raw("t", &CODE, 0x1000, None);
        set
    }

    fn br(ip: u64, len: u8, class: InsnClass, target: u64, next: u64, insns: u32) -> Step {
        Step::Branch {
            ip,
            len,
            class,
            target,
            next,
            insns,
        }
    }

    fn check(entry: u64, steps: &[Step]) -> CheckStats {
        Checker::check_all(&images(), entry, steps.iter().copied()).unwrap()
    }

    #[test]
    fn branches_carry_the_following_address() {
        let set = images();
        let ips = [
            0x1000, 0x1001, 0x1003, 0x100a, 0x100b, 0x100d, 0x1008, 0x1009, 0x100e, 0x1010, 0x1012,
        ];
        let (entry, steps) = steps_from_ips(&set, ips).unwrap();
        assert_eq!(entry, 0x1000);
        let want = [
            br(0x1001, 2, InsnClass::Cond, 0x1008, 0x1003, 2),
            br(0x1003, 5, InsnClass::Call, 0x100a, 0x100a, 1),
            br(0x100d, 1, InsnClass::Ret, 0, 0x1008, 3),
            br(0x1009, 1, InsnClass::Ret, 0, 0x100e, 2),
            br(0x100e, 2, InsnClass::Syscall, 0, 0x1010, 1),
            br(0x1010, 2, InsnClass::JmpInd, 0, 0x1012, 1),
            Step::End {
                insns: 1,
                at: 0x1013,
            },
        ];
        assert_eq!(steps, want);
        let stats = check(entry, &steps);
        assert_eq!((stats.rets_to_caller, stats.rets_elsewhere), (1, 0));
        assert_eq!(stats.rets_unmatched, 1);
        assert_eq!(stats.insns, ips.len() as u64);
        assert!(stats.ended);
    }

    #[test]
    fn a_non_branch_followed_by_a_stranger_is_an_interrupt_after_it() {
        let set = images();
        // nop at 100a retired, then execution went to 1012 (a signal handler, say).
        let (_, steps) = steps_from_ips(&set, [0x100a, 0x1012, 0x1012]).unwrap();
        assert_eq!(
            steps[0],
            Step::Interrupt {
                insns: 1,
                at: 0x100b,
                resume: 0x1012
            }
        );
        // A nop "followed by itself" also cannot be sequential: 1012's NLIP is 1013.
        assert_eq!(
            steps[1],
            Step::Interrupt {
                insns: 1,
                at: 0x1013,
                resume: 0x1012
            }
        );
        check(0x100a, &steps);
    }

    #[test]
    fn a_cond_to_neither_side_is_not_taken_then_interrupted() {
        let set = images();
        let (_, steps) = steps_from_ips(&set, [0x1000, 0x1001, 0x1012]).unwrap();
        assert_eq!(
            &steps[..2],
            &[
                br(0x1001, 2, InsnClass::Cond, 0x1008, 0x1003, 2),
                Step::Interrupt {
                    insns: 0,
                    at: 0x1003,
                    resume: 0x1012
                },
            ]
        );
        check(0x1000, &steps);
        // A direct call diverted: it reached its target first.
        let (_, steps) = steps_from_ips(&set, [0x1003, 0x1000]).unwrap();
        assert_eq!(
            steps[1],
            Step::Interrupt {
                insns: 0,
                at: 0x100a,
                resume: 0x1000
            }
        );
        check(0x1003, &steps);
    }

    #[test]
    fn explicit_interrupts_stop_before_the_instruction() {
        let set = images();
        let mut b = StepBuilder::new(&set);
        b.retire(0x1000).unwrap();
        b.retire(0x1001).unwrap(); // je, taken (we learn from the interrupt address)
        b.interrupt(0x1008); // stopped before the nop at the target
        b.retire(0x1012).unwrap(); // handler
        b.interrupt(0x1013); // the nop retired, stopped again before 0x1013
        b.interrupt(0x1000); // a second event before anything retired: resumed at 0x1000
        b.retire(0x1000).unwrap();
        let (entry, steps) = b.finish();
        assert_eq!(entry, 0x1000);
        assert_eq!(
            steps,
            [
                br(0x1001, 2, InsnClass::Cond, 0x1008, 0x1008, 2),
                Step::Interrupt {
                    insns: 0,
                    at: 0x1008,
                    resume: 0x1012
                },
                Step::Interrupt {
                    insns: 1,
                    at: 0x1013,
                    resume: 0x1000
                },
                Step::Interrupt {
                    insns: 0,
                    at: 0x1000,
                    resume: 0x1000
                },
                Step::End {
                    insns: 1,
                    at: 0x1001
                },
            ]
        );
        check(entry, &steps);
    }

    #[test]
    fn the_last_branch_continues_at_its_nlip_and_a_pending_interrupt_ends() {
        let set = images();
        let (_, steps) = steps_from_ips(&set, [0x100e]).unwrap();
        assert_eq!(steps, [br(0x100e, 2, InsnClass::Syscall, 0, 0x1010, 1)]);
        let mut b = StepBuilder::new(&set);
        b.retire(0x1000).unwrap();
        b.interrupt(0x1001); // killed before the je
        let (_, steps) = b.finish();
        assert_eq!(
            steps,
            [Step::End {
                insns: 1,
                at: 0x1001
            }]
        );
        assert_eq!(steps_from_ips(&set, []).unwrap(), (0, vec![]));
    }

    #[test]
    fn addresses_outside_the_image_are_named() {
        let set = images();
        let err = steps_from_ips(&set, [0x1000, 0x7000]).unwrap_err();
        assert_eq!(
            err,
            StepError::NoImage {
                ip: 0x7000,
                index: 1
            }
        );
        assert!(err.to_string().contains("0x7000"));
        let bad = [0x06u8]; // push es: invalid in 64-bit mode
        let mut set = ImageSet::new();
        set.add_raw("bad", &bad, 0x2000, None);
        assert!(matches!(
            steps_from_ips(&set, [0x2000]),
            Err(StepError::Invalid { ip: 0x2000, .. })
        ));
    }

    #[test]
    fn the_checker_rejects_inconsistent_streams() {
        let set = images();
        let bad = |steps: &[Step]| Checker::check_all(&set, 0x1000, steps.iter().copied());
        // Wrong instruction count: 1000 nop + je needs 2.
        assert!(bad(&[br(0x1001, 2, InsnClass::Cond, 0x1008, 0x1003, 3)]).is_err());
        // Cond to neither side.
        assert!(bad(&[br(0x1001, 2, InsnClass::Cond, 0x1008, 0x1004, 2)]).is_err());
        // Wrong class.
        assert!(bad(&[br(0x1001, 2, InsnClass::Jmp, 0x1008, 0x1008, 2)]).is_err());
        // Interrupt inside an instruction.
        let e = bad(&[Step::Interrupt {
            insns: 1,
            at: 0x1002,
            resume: 0x1000,
        }])
        .unwrap_err();
        assert_eq!(e.index, 0);
        // Walking through a branch.
        assert!(bad(&[Step::End {
            insns: 3,
            at: 0x1008
        }])
        .is_err());
        // Direct call not to its target.
        let e = Checker::check_all(
            &set,
            0x1003,
            [br(0x1003, 5, InsnClass::Call, 0x100a, 0x1000, 1)],
        );
        assert!(e.is_err());
    }
}
