//! # tracemill-schemas
//!
//! The contract with DuckDB, Python and Spark users: the enums of every output table with
//! their stable string names, and (feature `arrow`, on by default) the Arrow schema of each
//! table with every column documented in its field metadata.
//!
//! Addresses are `UInt64`. Enum columns are dictionary-encoded strings (`Dictionary(Int8,
//! Utf8)`), so a query writes `kind = 'ret'`. Every file also carries key-value metadata
//! ([`meta`]): schema version, tracemill version, source trace and size, rtit_ctl.
//!
//! The decoder depends on this crate without the `arrow` feature, for the enums only.

#[cfg(feature = "arrow")]
pub mod arrow;

/// Version of the table layouts; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// Names of the key-value metadata every output file carries.
pub mod meta {
    pub const SCHEMA_VERSION: &str = "tracemill.schema_version";
    pub const TRACEMILL_VERSION: &str = "tracemill.version";
    pub const SOURCE: &str = "tracemill.source";
    pub const SOURCE_SIZE: &str = "tracemill.source_size";
    pub const RTIT_CTL: &str = "tracemill.rtit_ctl";
    pub const TABLE: &str = "tracemill.table";
}

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $var:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum $name { $($(#[$vm])* $var),+ }

        impl $name {
            /// Every value, in code order (the code is the dictionary key).
            pub const ALL: &'static [$name] = &[$($name::$var),+];
            /// Stable string name, as stored in the tables.
            pub const fn name(self) -> &'static str {
                match self { $($name::$var => $s),+ }
            }
            /// The value with this dictionary key.
            pub fn from_code(c: u8) -> Option<Self> {
                Self::ALL.get(c as usize).copied()
            }
            pub fn from_name(s: &str) -> Option<Self> {
                match s { $($s => Some($name::$var),)+ _ => None }
            }
            /// Every string name, in code order (the dictionary values).
            pub fn names() -> Vec<&'static str> {
                Self::ALL.iter().map(|v| v.name()).collect()
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

string_enum! {
    /// What kind of branch a `branches` row is (spec Table 2).
    BranchKind {
        /// Conditional direct branch (Jcc, LOOPcc, JrCXZ): one TNT bit.
        Cond = "cond",
        /// Unconditional direct JMP: no packet.
        Jmp = "jmp",
        /// Direct near CALL: no packet.
        Call = "call",
        /// Indirect near JMP: TIP.
        JmpInd = "jmp_ind",
        /// Indirect near CALL: TIP.
        CallInd = "call_ind",
        /// Near RET: TIP, or a taken TNT bit when return compression applies.
        Ret = "ret",
        /// Far transfer (far JMP/CALL/RET, IRET, INT n, SYSRET, SYSEXIT): FUP.FAR + TIP.
        Far = "far",
        /// SYSCALL or SYSENTER: FUP.FAR + TIP, or FUP.PGD when it leaves the traced context.
        Syscall = "syscall",
    }
}

string_enum! {
    /// What an `events` row records.
    EventKind {
        /// A PSB packet (a synchronisation point).
        Psb = "psb",
        /// Packet generation enabled (FUP.PGE): tracing resumes at `ip`.
        Enable = "enable",
        /// Packet generation disabled (FUP.PGD) at `ip`.
        Disable = "disable",
        /// Internal buffer overflow (FUP.BuffOvf): packets were lost; resumes at `ip`.
        Overflow = "overflow",
        /// TraceSTOP packet: tracing stopped.
        TraceStop = "trace_stop",
        /// PIP: CR3 (in `detail`) changed.
        Paging = "paging",
        /// STS with a new core/bus ratio.
        FreqChange = "freq_change",
        /// Something in the trace or the images could not be decoded; `detail` says what.
        Error = "error",
        /// Decoding found its place again after an error or at the start of the trace.
        Resync = "resync",
        /// An asynchronous far transfer (interrupt, exception) at `ip` (FUP.FAR not caused
        /// by a branch instruction; Intel PT's FUP + TIP); `detail` says where it went.
        Interrupt = "interrupt",
        /// The execution mode changed at `ip` (Intel PT MODE.Exec): `detail` is `16-bit`,
        /// `32-bit` or `64-bit`.
        ExecMode = "exec_mode",
        /// Transactional execution (Intel PT MODE.TSX) at `ip`: `detail` is `begin`,
        /// `commit` or `abort`.
        Tsx = "tsx",
        /// A PTWRITE instruction at `ip` (Intel PT PTW): `detail` is its operand.
        Ptwrite = "ptwrite",
        /// Power events (Intel PT EXSTOP, MWAIT, PWRE, PWRX): `detail` says which.
        Power = "power",
        /// Intel PT MNT (maintenance) packet: `detail` is its payload (`0x…`).
        Maintenance = "maintenance",
        /// Intel PT TRIG (trigger tracing): `detail` is `trbv 0x…`, then `, icnt N` (the
        /// trigger struck N instructions after the row or event before it) and `, mult`
        /// (more than one hit); `ip` when the TRIG came with a FUP.
        Trigger = "trigger",
        /// Event Trace (CFE INTR with its EVD): an interrupt or exception was delivered;
        /// `detail` is `vector 0x…`, then `, cr2 0x…` for a page fault.
        Intr = "intr",
        /// Event Trace (CFE IRET): an IRET (or ERETS/ERETU) returned from an interrupt.
        Iret = "iret",
        /// Event Trace (CFE SMI): a system management interrupt.
        Smi = "smi",
        /// Event Trace (CFE RSM): return from system management mode.
        Rsm = "rsm",
        /// Event Trace (CFE SIPI): a startup IPI; `detail` is `vector 0x…`.
        Sipi = "sipi",
        /// Event Trace (CFE INIT): an INIT signal.
        Init = "init",
        /// Event Trace (CFE VMENTRY): a VM entry (VMLAUNCH, VMRESUME).
        Vmentry = "vmentry",
        /// Event Trace (CFE VMEXIT, VMEXIT_INTR with the EVDs before it): a VM exit;
        /// `detail` is `vector 0x…` (an interrupt caused it), `vmxr 0x…` (exit reason),
        /// `vmxq 0x…` (exit qualification), those present, comma-separated.
        Vmexit = "vmexit",
        /// Event Trace (CFE SHUTDOWN): the processor shut down (triple fault).
        Shutdown = "shutdown",
        /// Event Trace (CFE UINTR): a user interrupt was delivered; `detail` is `vector 0x…`.
        Uintr = "uintr",
        /// Event Trace (CFE UIRET): return from a user interrupt handler.
        Uiret = "uiret",
        /// Event Trace (CFE SWINTR): a software interrupt (INT n, INT3, INTO); `detail` is
        /// `vector 0x…`.
        Swintr = "swintr",
        /// Event Trace (CFE SYSCALL): a SYSCALL or SYSENTER.
        Syscall = "syscall",
        /// Event Trace on, MODE.Exec's IF changed at `ip`: `detail` is `interrupts enabled`
        /// or `interrupts disabled`.
        Iflags = "iflags",
        /// The end of the trace, with instructions that ran after the last `branches` row
        /// and that no row carries (before a disable, an interrupt, an overflow, or an
        /// event's IP, when no branch row follows): `detail` is their number. At most
        /// one, the last event, at the trace's length. The trace's instructions are
        /// `SUM(branches.insns)` plus this count.
        Tail = "tail",
    }
}

string_enum! {
    /// Which timing packet a `timing` row comes from (RTIT 4.2.6, 4.2.12–4.2.15; Intel PT
    /// SDM 36.4.2.10–36.4.2.14).
    TimingKind {
        /// Mini time counter: eight TSC bits.
        Mtc = "mtc",
        /// Super time sync: TSC[39:0] and core/bus ratios.
        Sts = "sts",
        /// Cycle count packet.
        Cyc = "cyc",
        /// Periodic cycle count (FUP.PCC).
        Pcc = "pcc",
        /// Intel PT TSC: the time stamp counter's bits 55:0.
        Tsc = "tsc",
        /// Intel PT TMA: the core crystal clock and fast counter at the last TSC.
        Tma = "tma",
        /// Intel PT CBR: the core:bus ratio.
        Cbr = "cbr",
    }
}

/// Names of the output tables, in the order `decode` writes them.
pub const TABLES: [&str; 5] = ["branches", "events", "timing", "coverage", "edges"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_codes_are_stable() {
        for k in BranchKind::ALL {
            assert_eq!(BranchKind::from_name(k.name()), Some(*k));
            assert_eq!(BranchKind::from_code(*k as u8), Some(*k));
        }
        assert_eq!(BranchKind::Ret as u8, 5);
        assert_eq!(
            EventKind::from_name("trace_stop"),
            Some(EventKind::TraceStop)
        );
        assert_eq!(
            TimingKind::names(),
            vec!["mtc", "sts", "cyc", "pcc", "tsc", "tma", "cbr"]
        );
    }
}
