//! Execution sources: what a program did, one retired branch at a time.
//!
//! The hardware model ([`crate::model`]) consumes a stream of [`Step`]s. A step is a run of
//! retired instructions ending either with a branch instruction (whose outcome is known:
//! the next executed address) or at an instruction boundary where something asynchronous
//! happens (an interrupt). Working per branch rather than per instruction keeps the model
//! fast enough for GiB-scale synthetic traces.
//!
//! Sources:
//! - [`qemu`]: real programs run under `qemu-x86_64 -singlestep -d exec,nochain`, every
//!   retired instruction logged and classified with iced-x86;
//! - [`synthetic`]: deterministic seeded walks over the code of a real binary;
//! - hand-written spec scenarios live in [`crate::scenarios`].

use tracemill_decode::insn::InsnClass;

pub mod qemu;
pub mod steps;
pub mod synthetic;

/// One step of an execution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `insns` instructions retired (this branch included, so `insns >= 1`); the last is
    /// the branch at `ip` (`class != Other`), and execution continued at `next`.
    ///
    /// For `Syscall` (and other far transfers into a kernel that is not part of the
    /// execution), `next` is where user code resumed after the kernel returned.
    Branch {
        ip: u64,
        len: u8,
        class: InsnClass,
        /// Direct target for `Cond`/`Jmp`/`Call`, else 0.
        target: u64,
        next: u64,
        insns: u32,
    },
    /// `insns` non-branch instructions retired, then an asynchronous event (interrupt,
    /// signal, fault handled by a kernel outside the execution) stopped execution before
    /// the instruction at `at`; user code resumed at `resume`.
    Interrupt { insns: u32, at: u64, resume: u64 },
    /// `insns` non-branch instructions retired and the execution ended before `at`
    /// (normally the program's last step is its exit syscall, a `Branch`).
    End { insns: u32, at: u64 },
}

impl Step {
    /// Instructions retired in this step.
    pub fn insns(&self) -> u32 {
        match *self {
            Step::Branch { insns, .. }
            | Step::Interrupt { insns, .. }
            | Step::End { insns, .. } => insns,
        }
    }
}

/// A whole execution: its code and its steps.
#[derive(Clone, Debug)]
pub struct Execution {
    /// Short name (program and arguments), for bundle labels.
    pub name: String,
    /// The program's code: (name, ELF bytes) — loaded at the ELF's own addresses.
    pub images: Vec<(String, Vec<u8>)>,
    /// First executed address.
    pub entry: u64,
    pub steps: Vec<Step>,
}
