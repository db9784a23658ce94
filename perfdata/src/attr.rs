//! Event attributes (`struct perf_event_attr`, include/uapi/linux/perf_event.h) and the
//! `sample_id_all` trailer they define for every kernel record but samples.

use crate::cursor::{u64_at, Cursor};
use crate::error::Error;

/// `perf_event_attr.size` of the first version (`PERF_ATTR_SIZE_VER0`): the smallest
/// attribute a reader accepts.
pub const ATTR_SIZE_VER0: u32 = 64;
/// The size this reader knows every field of (`PERF_ATTR_SIZE_VER8`, config3). perf 6.1
/// writes 128 (VER7); later fields read as zero when absent.
pub const ATTR_SIZE_KNOWN: u32 = 136;

/// `perf_event_attr.type` values used here.
pub mod attr_type {
    pub const HARDWARE: u32 = 0;
    pub const SOFTWARE: u32 = 1;
    pub const TRACEPOINT: u32 = 2;
    /// PERF_COUNT_SW_DUMMY: the `config` of perf's sideband-only event.
    pub const SW_DUMMY: u64 = 9;
}

/// `sample_type` bits (`enum perf_event_sample_format`).
pub mod sample {
    pub const IP: u64 = 1 << 0;
    pub const TID: u64 = 1 << 1;
    pub const TIME: u64 = 1 << 2;
    pub const ADDR: u64 = 1 << 3;
    pub const READ: u64 = 1 << 4;
    pub const CALLCHAIN: u64 = 1 << 5;
    pub const ID: u64 = 1 << 6;
    pub const CPU: u64 = 1 << 7;
    pub const PERIOD: u64 = 1 << 8;
    pub const STREAM_ID: u64 = 1 << 9;
    pub const RAW: u64 = 1 << 10;
    pub const BRANCH_STACK: u64 = 1 << 11;
    pub const IDENTIFIER: u64 = 1 << 16;
    pub const AUX: u64 = 1 << 20;
}

/// `perf_event_attr` flag bits (the bitfield after `read_format`).
pub mod flag {
    pub const DISABLED: u64 = 1 << 0;
    pub const INHERIT: u64 = 1 << 1;
    pub const EXCLUDE_USER: u64 = 1 << 4;
    pub const EXCLUDE_KERNEL: u64 = 1 << 5;
    pub const EXCLUDE_HV: u64 = 1 << 6;
    pub const MMAP: u64 = 1 << 8;
    pub const COMM: u64 = 1 << 9;
    pub const FREQ: u64 = 1 << 10;
    pub const ENABLE_ON_EXEC: u64 = 1 << 12;
    pub const TASK: u64 = 1 << 13;
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    pub const EXCLUDE_GUEST: u64 = 1 << 20;
    pub const MMAP2: u64 = 1 << 23;
    pub const COMM_EXEC: u64 = 1 << 24;
    pub const USE_CLOCKID: u64 = 1 << 25;
    pub const CONTEXT_SWITCH: u64 = 1 << 26;
    pub const KSYMBOL: u64 = 1 << 29;
    pub const BUILD_ID: u64 = 1 << 34;
}

/// One event's attributes: the fields a trace reader uses, the rest kept as read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventAttr {
    /// The PMU: `attr_type::*`, or a dynamic PMU's number (intel_pt's is in
    /// `/sys/bus/event_source/devices/intel_pt/type` and in AUXTRACE_INFO).
    pub kind: u32,
    /// `size` as the file has it.
    pub size: u32,
    /// For intel_pt, IA32_RTIT_CTL's bits (the PMU's `format/` directory).
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    /// The bitfield (`flag::*`).
    pub flags: u64,
    pub wakeup_events: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub aux_sample_size: u32,
    pub sig_data: u64,
    pub config3: u64,
}

impl EventAttr {
    pub fn has(&self, flag: u64) -> bool {
        self.flags & flag != 0
    }

    pub fn sample_id_all(&self) -> bool {
        self.has(flag::SAMPLE_ID_ALL)
    }

    /// Parse an attribute from `bytes` (the attrs entry without its ids section). Fields
    /// past `size` are zero, as the kernel treats them.
    pub fn parse(bytes: &[u8], at: u64) -> Result<EventAttr, Error> {
        let mut head = Cursor::new(bytes, at);
        let kind = head.u32("perf_event_attr")?;
        let size = head.u32("perf_event_attr")?;
        if size < ATTR_SIZE_VER0 {
            return Err(Error::invalid(
                at + 4,
                "perf_event_attr.size",
                format!("{size}, below the first version's {ATTR_SIZE_VER0}"),
            ));
        }
        if size as usize > bytes.len() {
            return Err(Error::invalid(
                at + 4,
                "perf_event_attr.size",
                format!("{size}, more than the {} bytes it has", bytes.len()),
            ));
        }
        // Zero-extend to the known size: fields this version lacks read as 0.
        let mut full = [0u8; ATTR_SIZE_KNOWN as usize];
        let n = (size as usize).min(full.len());
        full[..n].copy_from_slice(&bytes[..n]);
        let u32_at =
            |o: usize| u32::from_le_bytes([full[o], full[o + 1], full[o + 2], full[o + 3]]);
        let u64_ = |o: usize| u64_at(&full, o);
        Ok(EventAttr {
            kind,
            size,
            config: u64_(8),
            sample_period: u64_(16),
            sample_type: u64_(24),
            read_format: u64_(32),
            flags: u64_(40),
            wakeup_events: u32_at(48),
            bp_type: u32_at(52),
            config1: u64_(56),
            config2: u64_(64),
            branch_sample_type: u64_(72),
            sample_regs_user: u64_(80),
            sample_stack_user: u32_at(88),
            clockid: u32_at(92) as i32,
            sample_regs_intr: u64_(96),
            aux_watermark: u32_at(104),
            sample_max_stack: u16::from_le_bytes([full[108], full[109]]),
            aux_sample_size: u32_at(112),
            sig_data: u64_(120),
            config3: u64_(128),
        })
    }

    /// The attribute's bytes, `size` long (for writers; fields past `size` are dropped).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(ATTR_SIZE_KNOWN as usize);
        let u32_ = |v: &mut Vec<u8>, x: u32| v.extend_from_slice(&x.to_le_bytes());
        u32_(&mut v, self.kind);
        u32_(&mut v, self.size);
        for x in [
            self.config,
            self.sample_period,
            self.sample_type,
            self.read_format,
            self.flags,
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        u32_(&mut v, self.wakeup_events);
        u32_(&mut v, self.bp_type);
        for x in [
            self.config1,
            self.config2,
            self.branch_sample_type,
            self.sample_regs_user,
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        u32_(&mut v, self.sample_stack_user);
        u32_(&mut v, self.clockid as u32);
        v.extend_from_slice(&self.sample_regs_intr.to_le_bytes());
        u32_(&mut v, self.aux_watermark);
        v.extend_from_slice(&self.sample_max_stack.to_le_bytes());
        v.extend_from_slice(&[0, 0]);
        u32_(&mut v, self.aux_sample_size);
        u32_(&mut v, 0);
        v.extend_from_slice(&self.sig_data.to_le_bytes());
        v.extend_from_slice(&self.config3.to_le_bytes());
        v.resize(self.size as usize, 0);
        v
    }

    /// Bytes of the `sample_id_all` trailer on this event's non-sample records (0 when
    /// `sample_id_all` is off).
    pub fn trailer_len(&self) -> usize {
        if !self.sample_id_all() {
            return 0;
        }
        8 * (self.sample_type
            & (sample::TID
                | sample::TIME
                | sample::ID
                | sample::STREAM_ID
                | sample::CPU
                | sample::IDENTIFIER))
            .count_ones() as usize
    }
}

/// The `struct sample_id` trailer of a non-sample record: which task, when, on which CPU,
/// for which event. A field the attribute does not ask for is `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleId {
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    /// perf time (ns, the kernel's perf clock; TIME_CONV turns TSC into it).
    pub time: Option<u64>,
    pub id: Option<u64>,
    pub stream_id: Option<u64>,
    pub cpu: Option<u32>,
}

impl SampleId {
    /// Read the trailer (exactly `attr.trailer_len()` bytes) of a record.
    pub fn parse(attr: &EventAttr, trailer: &[u8], at: u64) -> Result<SampleId, Error> {
        let t = attr.sample_type;
        let mut c = Cursor::new(trailer, at);
        let mut s = SampleId::default();
        if !attr.sample_id_all() {
            return Ok(s);
        }
        const W: &str = "sample_id trailer";
        if t & sample::TID != 0 {
            s.pid = Some(c.u32(W)?);
            s.tid = Some(c.u32(W)?);
        }
        if t & sample::TIME != 0 {
            s.time = Some(c.u64(W)?);
        }
        if t & sample::ID != 0 {
            s.id = Some(c.u64(W)?);
        }
        if t & sample::STREAM_ID != 0 {
            s.stream_id = Some(c.u64(W)?);
        }
        if t & sample::CPU != 0 {
            s.cpu = Some(c.u32(W)?);
            c.u32(W)?;
        }
        if t & sample::IDENTIFIER != 0 {
            let id = c.u64(W)?;
            s.id = Some(id);
        }
        Ok(s)
    }

    /// The trailer's bytes for `attr` (for writers); fields it asks for and `self` lacks
    /// are written as zero.
    pub fn to_bytes(&self, attr: &EventAttr) -> Vec<u8> {
        let t = attr.sample_type;
        let mut v = Vec::with_capacity(attr.trailer_len());
        if !attr.sample_id_all() {
            return v;
        }
        if t & sample::TID != 0 {
            v.extend_from_slice(&self.pid.unwrap_or(0).to_le_bytes());
            v.extend_from_slice(&self.tid.unwrap_or(0).to_le_bytes());
        }
        if t & sample::TIME != 0 {
            v.extend_from_slice(&self.time.unwrap_or(0).to_le_bytes());
        }
        if t & sample::ID != 0 {
            v.extend_from_slice(&self.id.unwrap_or(0).to_le_bytes());
        }
        if t & sample::STREAM_ID != 0 {
            v.extend_from_slice(&self.stream_id.unwrap_or(0).to_le_bytes());
        }
        if t & sample::CPU != 0 {
            v.extend_from_slice(&self.cpu.unwrap_or(0).to_le_bytes());
            v.extend_from_slice(&0u32.to_le_bytes());
        }
        if t & sample::IDENTIFIER != 0 {
            v.extend_from_slice(&self.id.unwrap_or(0).to_le_bytes());
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn pt_attr() -> EventAttr {
        EventAttr {
            kind: 8,
            size: 128,
            config: 0x2400,
            sample_period: 1,
            sample_type: sample::IP | sample::TID | sample::TIME | sample::CPU | sample::IDENTIFIER,
            flags: flag::DISABLED | flag::SAMPLE_ID_ALL | flag::EXCLUDE_KERNEL,
            clockid: -1,
            aux_watermark: 4096,
            ..EventAttr::default()
        }
    }

    #[test]
    fn attr_round_trips_at_its_size_and_zero_extends_older_versions() {
        let a = pt_attr();
        let b = a.to_bytes();
        assert_eq!(b.len(), 128);
        assert_eq!(EventAttr::parse(&b, 0).unwrap(), a);
        // A VER0 attribute: the fields past 64 bytes are zero.
        let mut old = a.clone();
        old.size = 64;
        let b = old.to_bytes();
        let back = EventAttr::parse(&b, 0).unwrap();
        assert_eq!(back.clockid, 0);
        assert_eq!(back.aux_watermark, 0);
        assert_eq!(back.sample_type, a.sample_type);
    }

    #[test]
    fn attr_sizes_that_cannot_be_are_errors_at_the_size_field() {
        let mut b = pt_attr().to_bytes();
        b[4] = 8;
        assert_eq!(EventAttr::parse(&b, 1000).unwrap_err().offset(), 1004);
        b[4] = 200;
        assert!(EventAttr::parse(&b, 0)
            .unwrap_err()
            .to_string()
            .contains("more than the 128 bytes"));
    }

    #[test]
    fn trailer_has_perf_event_h_order_and_round_trips() {
        let a = pt_attr();
        assert_eq!(a.trailer_len(), 32);
        let s = SampleId {
            pid: Some(10),
            tid: Some(11),
            time: Some(12345),
            id: Some(77),
            stream_id: None,
            cpu: Some(1),
        };
        let b = s.to_bytes(&a);
        assert_eq!(b.len(), 32);
        // { pid, tid } { time } { cpu, res } { identifier }
        assert_eq!(&b[..8], &[10, 0, 0, 0, 11, 0, 0, 0]);
        assert_eq!(u64_at(&b, 8), 12345);
        assert_eq!(&b[16..24], &[1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(u64_at(&b, 24), 77);
        assert_eq!(SampleId::parse(&a, &b, 0).unwrap(), s);
        assert_eq!(SampleId::parse(&a, &b[..20], 50).unwrap_err().offset(), 70);
        let mut off = a.clone();
        off.flags &= !flag::SAMPLE_ID_ALL;
        assert_eq!(off.trailer_len(), 0);
        assert_eq!(SampleId::parse(&off, &[], 0).unwrap(), SampleId::default());
    }
}
