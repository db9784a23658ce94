//! Records of the data section: the 8-byte `perf_event_header`, then a body whose layout
//! the type fixes (include/uapi/linux/perf_event.h for the kernel's, types below 64;
//! tools/lib/perf/include/perf/event.h for those perf itself writes, 64 and up).
//!
//! Bodies are parsed here without their `sample_id_all` trailer, which `file` cuts off
//! first (it needs the attribute). Strings and AUX data borrow the file's bytes.

use crate::cursor::{c_string, Cursor};
use crate::error::Error;

/// `perf_event_header.type` values read here.
pub mod kind {
    pub const MMAP: u32 = 1;
    pub const LOST: u32 = 2;
    pub const COMM: u32 = 3;
    pub const EXIT: u32 = 4;
    pub const THROTTLE: u32 = 5;
    pub const UNTHROTTLE: u32 = 6;
    pub const FORK: u32 = 7;
    pub const READ: u32 = 8;
    pub const SAMPLE: u32 = 9;
    pub const MMAP2: u32 = 10;
    pub const AUX: u32 = 11;
    pub const ITRACE_START: u32 = 12;
    pub const LOST_SAMPLES: u32 = 13;
    pub const SWITCH: u32 = 14;
    pub const SWITCH_CPU_WIDE: u32 = 15;
    pub const NAMESPACES: u32 = 16;
    pub const KSYMBOL: u32 = 17;
    pub const BPF_EVENT: u32 = 18;
    pub const CGROUP: u32 = 19;
    pub const TEXT_POKE: u32 = 20;
    pub const AUX_OUTPUT_HW_ID: u32 = 21;
    /// Types from here on are perf's own (no `sample_id_all` trailer).
    pub const USER_TYPE_START: u32 = 64;
    pub const HEADER_ATTR: u32 = 64;
    pub const HEADER_EVENT_TYPE: u32 = 65;
    /// Pipe mode: tracepoint format data, which follows the record (`size`, padded to 8).
    pub const HEADER_TRACING_DATA: u32 = 66;
    /// The type in HEADER_BUILD_ID entries (the feature, not a data-section record).
    pub const HEADER_BUILD_ID: u32 = 67;
    pub const FINISHED_ROUND: u32 = 68;
    pub const ID_INDEX: u32 = 69;
    pub const AUXTRACE_INFO: u32 = 70;
    pub const AUXTRACE: u32 = 71;
    pub const AUXTRACE_ERROR: u32 = 72;
    pub const THREAD_MAP: u32 = 73;
    pub const CPU_MAP: u32 = 74;
    pub const TIME_CONV: u32 = 79;
    pub const HEADER_FEATURE: u32 = 80;
    pub const COMPRESSED: u32 = 81;
    pub const FINISHED_INIT: u32 = 82;
    pub const COMPRESSED2: u32 = 83;
}

/// `perf_event_header.misc` bits.
pub mod misc {
    pub const CPUMODE_MASK: u16 = 7;
    pub const KERNEL: u16 = 1;
    pub const USER: u16 = 2;
    /// COMM: the task exec'd (shares its bit with MMAP_DATA and SWITCH_OUT).
    pub const COMM_EXEC: u16 = 1 << 13;
    pub const SWITCH_OUT: u16 = 1 << 13;
    /// MMAP2: a build-id instead of device and inode (shares its bit with
    /// SWITCH_OUT_PREEMPT).
    pub const MMAP_BUILD_ID: u16 = 1 << 14;
    pub const SWITCH_OUT_PREEMPT: u16 = 1 << 14;
}

/// AUX record flags (`PERF_AUX_FLAG_*`).
pub mod aux_flag {
    /// The AUX buffer was full: data was lost after this record's data.
    pub const TRUNCATED: u64 = 0x01;
    /// Snapshot mode: the data overwrote older data.
    pub const OVERWRITE: u64 = 0x02;
    /// The record contains gaps (a PMU could not write some of it).
    pub const PARTIAL: u64 = 0x04;
    /// Sample collided with another.
    pub const COLLISION: u64 = 0x08;
    /// Bits 8..16: the PMU's format type.
    pub const PMU_FORMAT_TYPE_MASK: u64 = 0xff00;
}

/// `AUXTRACE_INFO.type` (`enum auxtrace_type`).
pub const AUXTRACE_INTEL_PT: u32 = 1;

/// A build-id: up to 20 bytes (SHA-1 from `ld --build-id`; MD5 is 16).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BuildId {
    pub bytes: [u8; 20],
    pub len: u8,
}

impl BuildId {
    /// `None` past 20 bytes.
    pub fn new(id: &[u8]) -> Option<BuildId> {
        let mut bytes = [0; 20];
        bytes.get_mut(..id.len())?.copy_from_slice(id);
        Some(BuildId {
            bytes,
            len: id.len() as u8,
        })
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..(self.len as usize).min(20)]
    }

    /// Lower-case hex, as perf and `file` print it.
    pub fn to_hex(&self) -> String {
        self.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mmap<'a> {
    pub pid: u32,
    pub tid: u32,
    pub addr: u64,
    pub len: u64,
    pub pgoff: u64,
    pub filename: &'a [u8],
}

/// What identifies an MMAP2's file: device and inode, or (misc `MMAP_BUILD_ID`, perf
/// 5.12+ with `--buildid-mmap`) its build-id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mmap2File {
    Inode {
        maj: u32,
        min: u32,
        ino: u64,
        ino_generation: u64,
    },
    BuildId(BuildId),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mmap2<'a> {
    pub pid: u32,
    pub tid: u32,
    pub addr: u64,
    pub len: u64,
    pub pgoff: u64,
    pub file: Mmap2File,
    pub prot: u32,
    pub flags: u32,
    pub filename: &'a [u8],
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Comm<'a> {
    pub pid: u32,
    pub tid: u32,
    /// misc COMM_EXEC: the name changed by exec.
    pub exec: bool,
    pub comm: &'a [u8],
}

/// FORK and EXIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Task {
    pub pid: u32,
    pub ppid: u32,
    pub tid: u32,
    pub ptid: u32,
    pub time: u64,
}

/// New data in the AUX area: `aux_size` bytes at `aux_offset` of the (ever-growing)
/// AUX position; the bytes themselves arrive in AUXTRACE records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aux {
    pub aux_offset: u64,
    pub aux_size: u64,
    pub flags: u64,
}

impl Aux {
    pub fn truncated(&self) -> bool {
        self.flags & aux_flag::TRUNCATED != 0
    }
    pub fn overwrite(&self) -> bool {
        self.flags & aux_flag::OVERWRITE != 0
    }
    pub fn partial(&self) -> bool {
        self.flags & aux_flag::PARTIAL != 0
    }
    pub fn collision(&self) -> bool {
        self.flags & aux_flag::COLLISION != 0
    }
}

/// A context switch (SWITCH_CPU_WIDE names the other task; SWITCH does not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switch {
    /// Switched out (else in).
    pub out: bool,
    /// Out because preempted (still runnable).
    pub preempt: bool,
    /// CPU-wide only: the task switched to (out) or from (in).
    pub next_prev: Option<(u32, u32)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ksymbol<'a> {
    pub addr: u64,
    pub len: u32,
    pub ksym_type: u16,
    pub flags: u16,
    pub name: &'a [u8],
}

/// The AUX area's configuration as perf recorded it: `kind` (`AUXTRACE_INTEL_PT`, ...)
/// and the PMU's private `u64` array (see [`crate::intel_pt`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuxtraceInfo<'a> {
    pub kind: u32,
    /// The private array's bytes (a multiple of 8).
    pub private: &'a [u8],
}

/// A buffer of AUX data: `data` (`size` bytes) follows the record, outside its header's
/// size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Auxtrace<'a> {
    pub size: u64,
    /// Position of the data in this buffer's AUX stream.
    pub offset: u64,
    pub reference: u64,
    /// The mmap (queue) index: one per CPU, or per thread with `--per-thread`.
    pub idx: u32,
    /// `u32::MAX` (-1) with per-CPU buffers.
    pub tid: u32,
    /// `u32::MAX` (-1) with per-thread buffers.
    pub cpu: u32,
    /// The buffer's bytes: `size` of them, or fewer in a file that ends inside them
    /// ([`crate::PerfData::records`] gives the error after it).
    pub data: &'a [u8],
}

/// An error perf (or the decoder it ran) wrote into the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuxtraceError<'a> {
    pub kind: u32,
    pub code: u32,
    pub cpu: u32,
    pub pid: u32,
    pub tid: u32,
    pub fmt: u32,
    pub ip: u64,
    pub time: u64,
    pub msg: &'a [u8],
}

/// TSC to perf time (`struct perf_record_time_conv`; the three fields of the first
/// version, perf 4.x, or all of them, perf 5.10+).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeConv {
    pub time_shift: u64,
    pub time_mult: u64,
    pub time_zero: u64,
    /// The rest: `None` in the short (32-byte) version.
    pub ext: Option<TimeConvExt>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeConvExt {
    pub time_cycles: u64,
    pub time_mask: u64,
    pub cap_user_time_zero: bool,
    pub cap_user_time_short: bool,
}

/// Which event, CPU and thread each sample id belongs to (perf writes it for AUX
/// sampling and pipe mode): `{id, idx, cpu, tid}` entries of 32 bytes (perf 6.x may
/// append `{machine_pid, vcpu}` for each after the array; left in `entries`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdIndex<'a> {
    pub nr: u64,
    /// The entries' bytes.
    pub entries: &'a [u8],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdIndexEntry {
    pub id: u64,
    pub idx: u64,
    pub cpu: u64,
    pub tid: u64,
}

impl IdIndex<'_> {
    pub fn iter(&self) -> impl Iterator<Item = IdIndexEntry> + '_ {
        self.entries
            .chunks_exact(32)
            .take(self.nr as usize)
            .map(|e| {
                let f = |i: usize| crate::cursor::u64_at(e, 8 * i);
                IdIndexEntry {
                    id: f(0),
                    idx: f(1),
                    cpu: f(2),
                    tid: f(3),
                }
            })
    }
}

/// One record's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    Mmap(Mmap<'a>),
    Mmap2(Mmap2<'a>),
    Comm(Comm<'a>),
    Fork(Task),
    Exit(Task),
    Lost {
        id: u64,
        lost: u64,
    },
    LostSamples {
        lost: u64,
    },
    Aux(Aux),
    ItraceStart {
        pid: u32,
        tid: u32,
    },
    Switch(Switch),
    Ksymbol(Ksymbol<'a>),
    /// A sample: its bytes (their layout is the attribute's `sample_type`).
    Sample(&'a [u8]),
    AuxtraceInfo(AuxtraceInfo<'a>),
    Auxtrace(Auxtrace<'a>),
    AuxtraceError(AuxtraceError<'a>),
    TimeConv(TimeConv),
    IdIndex(IdIndex<'a>),
    FinishedRound,
    FinishedInit,
    /// Any other type: its body as read (kernel records without their trailer).
    Other {
        kind: u32,
        body: &'a [u8],
    },
}

impl Record<'_> {
    /// The `perf_event_header.type` this record has.
    pub fn kind(&self) -> u32 {
        match self {
            Record::Mmap(_) => kind::MMAP,
            Record::Mmap2(_) => kind::MMAP2,
            Record::Comm(_) => kind::COMM,
            Record::Fork(_) => kind::FORK,
            Record::Exit(_) => kind::EXIT,
            Record::Lost { .. } => kind::LOST,
            Record::LostSamples { .. } => kind::LOST_SAMPLES,
            Record::Aux(_) => kind::AUX,
            Record::ItraceStart { .. } => kind::ITRACE_START,
            Record::Switch(s) if s.next_prev.is_some() => kind::SWITCH_CPU_WIDE,
            Record::Switch(_) => kind::SWITCH,
            Record::Ksymbol(_) => kind::KSYMBOL,
            Record::Sample(_) => kind::SAMPLE,
            Record::AuxtraceInfo(_) => kind::AUXTRACE_INFO,
            Record::Auxtrace(_) => kind::AUXTRACE,
            Record::AuxtraceError(_) => kind::AUXTRACE_ERROR,
            Record::TimeConv(_) => kind::TIME_CONV,
            Record::IdIndex(_) => kind::ID_INDEX,
            Record::FinishedRound => kind::FINISHED_ROUND,
            Record::FinishedInit => kind::FINISHED_INIT,
            Record::Other { kind, .. } => *kind,
        }
    }
}

/// Bytes of an AUXTRACE record's header part (`perf_record_auxtrace` without the data).
pub const AUXTRACE_HEADER_SIZE: u64 = 48;

/// Parse the body of a record of type `kind` (`body` excludes the 8-byte header and, for
/// kernel records, the sample_id trailer; `at` is the body's file offset). `aux` is what
/// follows the record in the file, for AUXTRACE's data.
pub(crate) fn parse<'a>(
    kind: u32,
    misc: u16,
    body: &'a [u8],
    at: u64,
) -> Result<Record<'a>, Error> {
    let mut c = Cursor::new(body, at);
    let r = match kind {
        kind::MMAP => {
            const W: &str = "MMAP record";
            Record::Mmap(Mmap {
                pid: c.u32(W)?,
                tid: c.u32(W)?,
                addr: c.u64(W)?,
                len: c.u64(W)?,
                pgoff: c.u64(W)?,
                filename: c_string(c.rest()),
            })
        }
        kind::MMAP2 => {
            const W: &str = "MMAP2 record";
            let (pid, tid) = (c.u32(W)?, c.u32(W)?);
            let (addr, len, pgoff) = (c.u64(W)?, c.u64(W)?, c.u64(W)?);
            let file = if misc & misc::MMAP_BUILD_ID != 0 {
                let size_at = c.offset();
                let size = c.u8(W)?;
                c.bytes(3, W)?;
                let bytes: [u8; 20] = c.bytes(20, W)?.try_into().expect("20 bytes");
                if size > 20 {
                    return Err(Error::invalid(
                        size_at,
                        "MMAP2 build-id size",
                        format!("{size}, more than 20"),
                    ));
                }
                Mmap2File::BuildId(BuildId { bytes, len: size })
            } else {
                Mmap2File::Inode {
                    maj: c.u32(W)?,
                    min: c.u32(W)?,
                    ino: c.u64(W)?,
                    ino_generation: c.u64(W)?,
                }
            };
            Record::Mmap2(Mmap2 {
                pid,
                tid,
                addr,
                len,
                pgoff,
                file,
                prot: c.u32(W)?,
                flags: c.u32(W)?,
                filename: c_string(c.rest()),
            })
        }
        kind::COMM => {
            const W: &str = "COMM record";
            Record::Comm(Comm {
                pid: c.u32(W)?,
                tid: c.u32(W)?,
                exec: misc & misc::COMM_EXEC != 0,
                comm: c_string(c.rest()),
            })
        }
        kind::FORK | kind::EXIT => {
            const W: &str = "FORK/EXIT record";
            let t = Task {
                pid: c.u32(W)?,
                ppid: c.u32(W)?,
                tid: c.u32(W)?,
                ptid: c.u32(W)?,
                time: c.u64(W)?,
            };
            if kind == kind::FORK {
                Record::Fork(t)
            } else {
                Record::Exit(t)
            }
        }
        kind::LOST => Record::Lost {
            id: c.u64("LOST record")?,
            lost: c.u64("LOST record")?,
        },
        kind::LOST_SAMPLES => Record::LostSamples {
            lost: c.u64("LOST_SAMPLES record")?,
        },
        kind::AUX => {
            const W: &str = "AUX record";
            Record::Aux(Aux {
                aux_offset: c.u64(W)?,
                aux_size: c.u64(W)?,
                flags: c.u64(W)?,
            })
        }
        kind::ITRACE_START => Record::ItraceStart {
            pid: c.u32("ITRACE_START record")?,
            tid: c.u32("ITRACE_START record")?,
        },
        kind::SWITCH | kind::SWITCH_CPU_WIDE => {
            let next_prev = if kind == kind::SWITCH_CPU_WIDE {
                Some((
                    c.u32("SWITCH_CPU_WIDE record")?,
                    c.u32("SWITCH_CPU_WIDE record")?,
                ))
            } else {
                None
            };
            let out = misc & misc::SWITCH_OUT != 0;
            Record::Switch(Switch {
                out,
                preempt: out && misc & misc::SWITCH_OUT_PREEMPT != 0,
                next_prev,
            })
        }
        kind::KSYMBOL => {
            const W: &str = "KSYMBOL record";
            Record::Ksymbol(Ksymbol {
                addr: c.u64(W)?,
                len: c.u32(W)?,
                ksym_type: c.u16(W)?,
                flags: c.u16(W)?,
                name: c_string(c.rest()),
            })
        }
        kind::SAMPLE => Record::Sample(body),
        kind::AUXTRACE_INFO => {
            const W: &str = "AUXTRACE_INFO record";
            let kind = c.u32(W)?;
            c.u32(W)?;
            let private = c.rest();
            if !private.len().is_multiple_of(8) {
                return Err(Error::invalid(
                    at + 8,
                    "AUXTRACE_INFO record",
                    format!(
                        "its private array has {} bytes, not a multiple of 8",
                        private.len()
                    ),
                ));
            }
            Record::AuxtraceInfo(AuxtraceInfo { kind, private })
        }
        kind::AUXTRACE_ERROR => {
            const W: &str = "AUXTRACE_ERROR record";
            let mut r = AuxtraceError {
                kind: c.u32(W)?,
                code: c.u32(W)?,
                cpu: c.u32(W)?,
                pid: c.u32(W)?,
                tid: c.u32(W)?,
                fmt: c.u32(W)?,
                ip: c.u64(W)?,
                time: 0,
                msg: &[],
            };
            // Format 0 has no time: the message starts where it would be.
            if r.fmt != 0 {
                r.time = c.u64(W)?;
            }
            let n = c.remaining().min(64);
            r.msg = c_string(c.bytes(n, W)?);
            Record::AuxtraceError(r)
        }
        kind::TIME_CONV => {
            const W: &str = "TIME_CONV record";
            let mut t = TimeConv {
                time_shift: c.u64(W)?,
                time_mult: c.u64(W)?,
                time_zero: c.u64(W)?,
                ext: None,
            };
            if c.remaining() >= 24 {
                let time_cycles = c.u64(W)?;
                let time_mask = c.u64(W)?;
                let caps = c.bytes(8, W)?;
                t.ext = Some(TimeConvExt {
                    time_cycles,
                    time_mask,
                    cap_user_time_zero: caps[0] != 0,
                    cap_user_time_short: caps[1] != 0,
                });
            }
            Record::TimeConv(t)
        }
        kind::ID_INDEX => {
            let nr_at = c.offset();
            let nr = c.u64("ID_INDEX record")?;
            let entries = c.rest();
            if nr.checked_mul(32).is_none_or(|n| n > entries.len() as u64) {
                return Err(Error::invalid(
                    nr_at,
                    "ID_INDEX record",
                    format!("{nr} entries do not fit its {} bytes", entries.len()),
                ));
            }
            Record::IdIndex(IdIndex { nr, entries })
        }
        kind::FINISHED_ROUND => Record::FinishedRound,
        kind::FINISHED_INIT => Record::FinishedInit,
        _ => Record::Other { kind, body },
    };
    Ok(r)
}

/// The fixed part of an AUXTRACE record (the 40 bytes after its header); `data` is left
/// empty for the caller to fill.
pub(crate) fn parse_auxtrace(body: &[u8], at: u64) -> Result<Auxtrace<'static>, Error> {
    const W: &str = "AUXTRACE record";
    let mut c = Cursor::new(body, at);
    let a = Auxtrace {
        size: c.u64(W)?,
        offset: c.u64(W)?,
        reference: c.u64(W)?,
        idx: c.u32(W)?,
        tid: c.u32(W)?,
        cpu: c.u32(W)?,
        data: &[],
    };
    c.u32(W)?;
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le(fields: &[u64], widths: &[usize]) -> Vec<u8> {
        let mut v = Vec::new();
        for (&f, &w) in fields.iter().zip(widths) {
            v.extend_from_slice(&f.to_le_bytes()[..w]);
        }
        v
    }

    #[test]
    fn mmap2_with_build_id_and_with_inode() {
        let mut body = le(&[7, 8, 0x400000, 0x1000, 0], &[4, 4, 8, 8, 8]);
        body.extend_from_slice(&[20, 0, 0, 0]);
        body.extend_from_slice(&[0xab; 20]);
        body.extend(le(&[5, 2], &[4, 4]));
        body.extend_from_slice(b"/bin/ls\0");
        let r = parse(kind::MMAP2, misc::USER | misc::MMAP_BUILD_ID, &body, 0).unwrap();
        let Record::Mmap2(m) = r else { panic!("{r:?}") };
        assert_eq!((m.pid, m.tid, m.addr, m.len), (7, 8, 0x400000, 0x1000));
        assert_eq!(
            m.file,
            Mmap2File::BuildId(BuildId::new(&[0xab; 20]).unwrap())
        );
        assert_eq!((m.prot, m.flags, m.filename), (5, 2, &b"/bin/ls"[..]));
        // The same bytes without the misc bit: device, inode.
        let Record::Mmap2(m) = parse(kind::MMAP2, misc::USER, &body, 0).unwrap() else {
            panic!()
        };
        assert!(matches!(m.file, Mmap2File::Inode { maj: 20, .. }));
        // A build-id size over 20.
        body[32] = 21;
        let e = parse(kind::MMAP2, misc::MMAP_BUILD_ID, &body, 1000).unwrap_err();
        assert_eq!(e.offset(), 1032);
    }

    #[test]
    fn switch_flags_come_from_misc() {
        let body = le(&[3, 4], &[4, 4]);
        let r = parse(
            kind::SWITCH_CPU_WIDE,
            misc::SWITCH_OUT | misc::SWITCH_OUT_PREEMPT,
            &body,
            0,
        );
        assert_eq!(
            r.unwrap(),
            Record::Switch(Switch {
                out: true,
                preempt: true,
                next_prev: Some((3, 4))
            })
        );
        let r = parse(kind::SWITCH, 0, &[], 0).unwrap();
        assert_eq!(r.kind(), kind::SWITCH);
        assert_eq!(
            r,
            Record::Switch(Switch {
                out: false,
                preempt: false,
                next_prev: None
            })
        );
    }

    #[test]
    fn short_bodies_are_errors_at_the_missing_field() {
        let body = le(&[1, 2, 3], &[8, 8, 4]);
        let e = parse(kind::AUX, 0, &body, 200).unwrap_err();
        assert_eq!(e.offset(), 216);
        assert!(e.to_string().contains("AUX record needs 8 bytes, 4 left"));
        assert!(parse(kind::ITRACE_START, 0, &[1, 0, 0, 0], 0).is_err());
    }

    #[test]
    fn aux_flags() {
        let body = le(&[0x1000, 0x200, 0x0105], &[8, 8, 8]);
        let Record::Aux(a) = parse(kind::AUX, 0, &body, 0).unwrap() else {
            panic!()
        };
        assert!(a.truncated() && a.partial() && !a.overwrite() && !a.collision());
        assert_eq!(a.flags & aux_flag::PMU_FORMAT_TYPE_MASK, 0x100);
    }

    #[test]
    fn time_conv_short_and_long() {
        let short = le(&[10, 512, 99], &[8, 8, 8]);
        let Record::TimeConv(t) = parse(kind::TIME_CONV, 0, &short, 0).unwrap() else {
            panic!()
        };
        assert_eq!(
            (t.time_shift, t.time_mult, t.time_zero, t.ext),
            (10, 512, 99, None)
        );
        let mut long = short.clone();
        long.extend(le(&[5, u64::MAX], &[8, 8]));
        long.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
        let Record::TimeConv(t) = parse(kind::TIME_CONV, 0, &long, 0).unwrap() else {
            panic!()
        };
        let ext = t.ext.unwrap();
        assert!(ext.cap_user_time_zero && !ext.cap_user_time_short);
        assert_eq!((ext.time_cycles, ext.time_mask), (5, u64::MAX));
    }

    #[test]
    fn id_index_count_is_checked_against_its_bytes() {
        let mut body = le(&[2, 100, 0, 0, 77, 101, 1, 1, 78], &[8; 9]);
        let Record::IdIndex(ix) = parse(kind::ID_INDEX, 0, &body, 0).unwrap() else {
            panic!()
        };
        let e: Vec<_> = ix.iter().collect();
        assert_eq!(e.len(), 2);
        assert_eq!((e[1].id, e[1].idx, e[1].cpu, e[1].tid), (101, 1, 1, 78));
        body[0] = 3;
        assert!(parse(kind::ID_INDEX, 0, &body, 0).is_err());
        body[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(parse(kind::ID_INDEX, 0, &body, 0).is_err());
    }

    #[test]
    fn auxtrace_error_message_with_and_without_time() {
        let mut body = le(&[1, 2, 3, 4, 5, 1, 0x1234, 777], &[4, 4, 4, 4, 4, 4, 8, 8]);
        let mut msg = b"overflow packet".to_vec();
        msg.resize(64, 0);
        body.extend_from_slice(&msg);
        let Record::AuxtraceError(e) = parse(kind::AUXTRACE_ERROR, 0, &body, 0).unwrap() else {
            panic!()
        };
        assert_eq!((e.cpu, e.tid, e.ip, e.time), (3, 5, 0x1234, 777));
        assert_eq!(e.msg, b"overflow packet");
    }
}
