//! A perf.data writer: Intel PT byte streams (one per CPU) wrapped the way `perf record -e
//! intel_pt//u` stores them, with the sideband a decoder needs (AUXTRACE_INFO, TIME_CONV,
//! COMM, FORK, MMAP2 with build-id, ITRACE_START, AUX, SWITCH_CPU_WIDE, EXIT) and the
//! HEADER_BUILD_ID and HEADER_AUXTRACE features. This machine cannot record Intel PT; files
//! made here are what the reader (`tracemill-perfdata`) and Debian's `perf` are tested on.
//!
//! [`PerfDataWriter`] lays records out byte for byte from the reader's record types (its
//! own encoder: the round trip through the reader, and perf reading the same files, check
//! both sides). [`intel_pt_two_threads`] makes the standard file: two threads of one
//! process, each on its own CPU, each CPU with its own AUX stream.

use tracemill_perfdata::attr::{attr_type, flag, sample, ATTR_SIZE_VER0};
use tracemill_perfdata::features::{BUILD_ID_ENTRY_FIXED, BUILD_ID_SIZE};
use tracemill_perfdata::header::{feature, FileHeader, Section, FILE_HEADER_SIZE};
use tracemill_perfdata::intel_pt::{IntelPtInfo, MtcInfo, PerfClock};
use tracemill_perfdata::record::{kind, misc, Mmap2File, AUXTRACE_HEADER_SIZE, AUXTRACE_INTEL_PT};
use tracemill_perfdata::{Attr, BuildId, EventAttr, Record, SampleId};

/// What the writer cannot write.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WriteError {
    #[error("a {0}-byte record does not fit perf_event_header.size (at most 65535)")]
    TooLarge(usize),
    #[error("attributes of different sizes ({0} and {1}): the attrs section has one")]
    AttrSizes(u32, u32),
    #[error("attribute size {0} is below {ATTR_SIZE_VER0}")]
    AttrSize(u32),
    #[error("no attribute to write a kernel record for")]
    NoAttr,
    #[error("raw records: no whole record at byte {0}, or an AUXTRACE record (whose data `push` writes)")]
    RawRecord(usize),
    #[error("no CPU stream to write")]
    NoStream,
    #[error("zstd: {0}")]
    Compress(String),
    #[error("CPU {0}'s switch times ({1}, {2}) are not after the process's sideband (at {3}) and in order")]
    SwitchTimes(u32, u64, u64, u64),
}

/// A perf.data file being built: attributes first, then records in the order given, then
/// features at [`PerfDataWriter::finish`].
pub struct PerfDataWriter {
    attrs: Vec<Attr>,
    data: Vec<u8>,
    /// `(offset in data, header.size)` of every AUXTRACE record.
    auxtrace_index: Vec<(u64, u64)>,
    build_ids: Vec<(u16, u32, BuildId, Vec<u8>)>,
    strings: Vec<(u32, Vec<u8>)>,
    /// HEADER_EVENT_DESC's names, one per attribute (none: no feature).
    names: Vec<String>,
    pmus: Vec<(u32, String)>,
    /// `perf record -z`: kernel records wait here to be compressed.
    compress: Option<Compress>,
}

/// `perf record -z`'s state: the zstd stream all compressed records are cut from, and
/// the kernel records not yet compressed.
struct Compress {
    level: i32,
    enc: zstd::stream::raw::Encoder<'static>,
    pending: Vec<u8>,
}

/// perf's `comp_mmap_len` with its default 512 KiB + 1 page ring buffers: the most a
/// compressed record decompresses to.
const COMP_MMAP_LEN: usize = 528_384;

/// `s` and at least one NUL, padded with NULs to a multiple of `align`.
fn padded(s: &[u8], align: usize) -> Vec<u8> {
    let mut v = s.to_vec();
    v.resize((s.len() + 1).next_multiple_of(align), 0);
    v
}

fn put32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}

fn put64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes());
}

impl PerfDataWriter {
    pub fn new(attrs: Vec<Attr>) -> Result<PerfDataWriter, WriteError> {
        let size = attrs.first().ok_or(WriteError::NoAttr)?.attr.size;
        if size < ATTR_SIZE_VER0 {
            return Err(WriteError::AttrSize(size));
        }
        if let Some(a) = attrs.iter().find(|a| a.attr.size != size) {
            return Err(WriteError::AttrSizes(size, a.attr.size));
        }
        Ok(PerfDataWriter {
            attrs,
            data: Vec::new(),
            auxtrace_index: Vec::new(),
            build_ids: Vec::new(),
            strings: Vec::new(),
            names: Vec::new(),
            pmus: Vec::new(),
            compress: None,
        })
    }

    /// Write as `perf record -z` does (zstd at `level`): the kernel records (what perf
    /// reads from the ring buffers) go into COMPRESSED records, one zstd stream flushed
    /// after each group, written before the next record of perf's own (AUXTRACE,
    /// FINISHED_ROUND...) and at the end; the file gets HEADER_COMPRESSED.
    pub fn compress(&mut self, level: i32) -> Result<(), WriteError> {
        let enc = zstd::stream::raw::Encoder::new(level)
            .map_err(|e| WriteError::Compress(e.to_string()))?;
        self.compress = Some(Compress {
            level,
            enc,
            pending: Vec::new(),
        });
        Ok(())
    }

    /// Write the kernel records waiting to be compressed, as COMPRESSED records of at
    /// most a record's size each (done before each record of perf's own; call it once
    /// after the last record, before `finish`).
    pub fn flush_compressed(&mut self) -> Result<(), WriteError> {
        use zstd::stream::raw::{InBuffer, Operation, OutBuffer};
        let Some(c) = &mut self.compress else {
            return Ok(());
        };
        if c.pending.is_empty() {
            return Ok(());
        }
        // Each group decompresses to at most perf's buffer.
        let mut z = Vec::new();
        for group in c.pending.chunks(COMP_MMAP_LEN) {
            let mut out = vec![0u8; zstd::zstd_safe::compress_bound(group.len()) + 1024];
            let mut input = InBuffer::around(group);
            let mut o = OutBuffer::around(&mut out[..]);
            while input.pos() < group.len() {
                c.enc
                    .run(&mut input, &mut o)
                    .map_err(|e| WriteError::Compress(e.to_string()))?;
            }
            c.enc
                .flush(&mut o)
                .map_err(|e| WriteError::Compress(e.to_string()))?;
            let n = o.pos();
            z.extend_from_slice(&out[..n]);
        }
        c.pending.clear();
        // perf cuts its output into records of at most a record's size.
        for part in z.chunks(u16::MAX as usize - 8) {
            put32(&mut self.data, kind::COMPRESSED);
            self.data.extend_from_slice(&0u16.to_le_bytes());
            self.data
                .extend_from_slice(&((8 + part.len()) as u16).to_le_bytes());
            self.data.extend_from_slice(part);
        }
        Ok(())
    }

    /// The attribute a kernel record with this sample id belongs to (by its id; the first
    /// attribute otherwise).
    fn attr_for(&self, sid: &SampleId) -> &EventAttr {
        sid.id
            .and_then(|id| self.attrs.iter().find(|a| a.ids.contains(&id)))
            .map_or(&self.attrs[0].attr, |a| &a.attr)
    }

    /// Append a record. `cpumode` is `misc::USER` or `misc::KERNEL` (ORed into `misc`
    /// with the record's own bits); `sid` is the `sample_id_all` trailer of kernel
    /// records (ignored for perf's own). AUXTRACE writes its `data`, and its `size` field
    /// as the data's length.
    pub fn push(
        &mut self,
        cpumode: u16,
        record: &Record<'_>,
        sid: &SampleId,
    ) -> Result<(), WriteError> {
        let k = record.kind();
        let mut misc_ = cpumode;
        let mut body = Vec::new();
        match record {
            Record::Mmap(m) => {
                put32(&mut body, m.pid);
                put32(&mut body, m.tid);
                for x in [m.addr, m.len, m.pgoff] {
                    put64(&mut body, x);
                }
                body.extend(padded(m.filename, 8));
            }
            Record::Mmap2(m) => {
                put32(&mut body, m.pid);
                put32(&mut body, m.tid);
                for x in [m.addr, m.len, m.pgoff] {
                    put64(&mut body, x);
                }
                match m.file {
                    Mmap2File::Inode {
                        maj,
                        min,
                        ino,
                        ino_generation,
                    } => {
                        put32(&mut body, maj);
                        put32(&mut body, min);
                        put64(&mut body, ino);
                        put64(&mut body, ino_generation);
                    }
                    Mmap2File::BuildId(b) => {
                        misc_ |= misc::MMAP_BUILD_ID;
                        body.extend_from_slice(&[b.len, 0, 0, 0]);
                        body.extend_from_slice(&b.bytes);
                    }
                }
                put32(&mut body, m.prot);
                put32(&mut body, m.flags);
                body.extend(padded(m.filename, 8));
            }
            Record::Comm(c) => {
                if c.exec {
                    misc_ |= misc::COMM_EXEC;
                }
                put32(&mut body, c.pid);
                put32(&mut body, c.tid);
                body.extend(padded(c.comm, 8));
            }
            Record::Fork(t) | Record::Exit(t) => {
                for x in [t.pid, t.ppid, t.tid, t.ptid] {
                    put32(&mut body, x);
                }
                put64(&mut body, t.time);
            }
            Record::Lost { id, lost } => {
                put64(&mut body, *id);
                put64(&mut body, *lost);
            }
            Record::LostSamples { lost } => put64(&mut body, *lost),
            Record::Aux(a) => {
                for x in [a.aux_offset, a.aux_size, a.flags] {
                    put64(&mut body, x);
                }
            }
            Record::ItraceStart { pid, tid } => {
                put32(&mut body, *pid);
                put32(&mut body, *tid);
            }
            Record::Switch(s) => {
                if s.out {
                    misc_ |= misc::SWITCH_OUT;
                    if s.preempt {
                        misc_ |= misc::SWITCH_OUT_PREEMPT;
                    }
                }
                if let Some((pid, tid)) = s.next_prev {
                    put32(&mut body, pid);
                    put32(&mut body, tid);
                }
            }
            Record::Ksymbol(s) => {
                put64(&mut body, s.addr);
                put32(&mut body, s.len);
                body.extend_from_slice(&s.ksym_type.to_le_bytes());
                body.extend_from_slice(&s.flags.to_le_bytes());
                body.extend(padded(s.name, 8));
            }
            Record::Sample(b) => body.extend_from_slice(b),
            Record::AuxtraceInfo(i) => {
                put32(&mut body, i.kind);
                put32(&mut body, 0);
                body.extend_from_slice(i.private);
            }
            Record::Auxtrace(a) => {
                for x in [a.data.len() as u64, a.offset, a.reference] {
                    put64(&mut body, x);
                }
                for x in [a.idx, a.tid, a.cpu, 0] {
                    put32(&mut body, x);
                }
            }
            Record::AuxtraceError(e) => {
                for x in [e.kind, e.code, e.cpu, e.pid, e.tid, e.fmt] {
                    put32(&mut body, x);
                }
                put64(&mut body, e.ip);
                if e.fmt != 0 {
                    put64(&mut body, e.time);
                }
                let mut m = e.msg.to_vec();
                m.resize(64, 0);
                body.extend(m);
            }
            Record::TimeConv(t) => {
                for x in [t.time_shift, t.time_mult, t.time_zero] {
                    put64(&mut body, x);
                }
                if let Some(e) = t.ext {
                    put64(&mut body, e.time_cycles);
                    put64(&mut body, e.time_mask);
                    body.extend_from_slice(&[
                        e.cap_user_time_zero as u8,
                        e.cap_user_time_short as u8,
                        0,
                        0,
                        0,
                        0,
                        0,
                        0,
                    ]);
                }
            }
            Record::IdIndex(ix) => {
                put64(&mut body, ix.nr);
                body.extend_from_slice(ix.entries);
            }
            Record::FinishedRound | Record::FinishedInit => {}
            Record::Other { body: b, .. } => body.extend_from_slice(b),
        }
        if k < kind::USER_TYPE_START && k != kind::SAMPLE {
            let attr = self.attr_for(sid).clone();
            body.extend(sid.to_bytes(&attr));
        }
        let size = 8 + body.len();
        if size > u16::MAX as usize {
            return Err(WriteError::TooLarge(size));
        }
        if let Some(c) = &mut self.compress {
            if k < kind::USER_TYPE_START {
                put32(&mut c.pending, k);
                c.pending.extend_from_slice(&misc_.to_le_bytes());
                c.pending.extend_from_slice(&(size as u16).to_le_bytes());
                c.pending.extend(body);
                return Ok(());
            }
        }
        self.flush_compressed()?;
        let at = self.data.len() as u64;
        put32(&mut self.data, k);
        self.data.extend_from_slice(&misc_.to_le_bytes());
        self.data.extend_from_slice(&(size as u16).to_le_bytes());
        self.data.extend(body);
        if let Record::Auxtrace(a) = record {
            self.data.extend_from_slice(a.data);
            self.auxtrace_index.push((at, AUXTRACE_HEADER_SIZE));
        }
        Ok(())
    }

    /// Append records as the kernel and perf wrote them: each `perf_event_header` with
    /// its body and trailer, back to back (a recording's sideband as libipt's
    /// `perf-read-sideband.bash` cuts it out of a perf.data). Their trailers must be laid
    /// out as the attributes say; that is not checked. AUXTRACE records, whose data
    /// follows them, go through [`PerfDataWriter::push`]. At a record that is cut short
    /// (or an AUXTRACE) the error names its byte; the records before it are written.
    pub fn push_raw(&mut self, records: &[u8]) -> Result<(), WriteError> {
        let mut at = 0;
        while at < records.len() {
            let head = records.get(at..at + 8).ok_or(WriteError::RawRecord(at))?;
            let k = u32::from_le_bytes(head[..4].try_into().expect("4 bytes"));
            let size = u16::from_le_bytes([head[6], head[7]]) as usize;
            if size < 8 || at + size > records.len() || k == kind::AUXTRACE {
                return Err(WriteError::RawRecord(at));
            }
            let record = &records[at..at + size];
            at += size;
            if let Some(c) = &mut self.compress {
                if k < kind::USER_TYPE_START {
                    c.pending.extend_from_slice(record);
                    continue;
                }
            }
            self.flush_compressed()?;
            self.data.extend_from_slice(record);
        }
        Ok(())
    }

    /// A HEADER_BUILD_ID entry (file names padded to 64 bytes, as perf does).
    pub fn add_build_id(&mut self, cpumode: u16, pid: u32, id: BuildId, filename: &[u8]) {
        self.build_ids
            .push((cpumode | BUILD_ID_SIZE, pid, id, filename.to_vec()));
    }

    /// HEADER_EVENT_DESC: the events' names as perf shows them (`intel_pt//u`), one per
    /// attribute, in order (extra names are dropped, missing ones are empty).
    pub fn set_event_names(&mut self, names: &[&str]) {
        self.names = (0..self.attrs.len())
            .map(|i| names.get(i).copied().unwrap_or("").to_owned())
            .collect();
    }

    /// A HEADER_PMU_MAPPINGS entry: a PMU's `perf_event_attr.type` and name.
    pub fn add_pmu(&mut self, kind: u32, name: &str) {
        self.pmus.push((kind, name.to_owned()));
    }

    /// A string feature (`feature::HOSTNAME`, `OSRELEASE`, `VERSION`, `ARCH`, ...).
    pub fn add_string(&mut self, id: u32, s: &str) {
        self.strings.push((id, s.as_bytes().to_vec()));
    }

    /// The build-id and string features' bytes (the AUXTRACE index, file mode only, is
    /// added by `finish`).
    fn features(&self) -> Vec<(u32, Vec<u8>)> {
        let mut feats: Vec<(u32, Vec<u8>)> = Vec::new();
        if !self.build_ids.is_empty() {
            let mut f = Vec::new();
            for (m, pid, id, name) in &self.build_ids {
                let name = padded(name, 64);
                put32(&mut f, kind::HEADER_BUILD_ID);
                f.extend_from_slice(&m.to_le_bytes());
                f.extend_from_slice(&((BUILD_ID_ENTRY_FIXED + name.len()) as u16).to_le_bytes());
                put32(&mut f, *pid);
                let mut b = [0u8; 24];
                b[..20].copy_from_slice(&id.bytes);
                b[20] = id.len;
                f.extend_from_slice(&b);
                f.extend(name);
            }
            feats.push((feature::BUILD_ID, f));
        }
        let perf_string = |f: &mut Vec<u8>, s: &str| {
            let s = padded(s.as_bytes(), 64);
            put32(f, s.len() as u32);
            f.extend(s);
        };
        if !self.names.is_empty() {
            let size = self.attrs[0].attr.size;
            let mut f = Vec::new();
            put32(&mut f, self.attrs.len() as u32);
            put32(&mut f, size);
            for (a, name) in self.attrs.iter().zip(&self.names) {
                f.extend(a.attr.to_bytes());
                put32(&mut f, a.ids.len() as u32);
                perf_string(&mut f, name);
                for &id in &a.ids {
                    put64(&mut f, id);
                }
            }
            feats.push((feature::EVENT_DESC, f));
        }
        if let Some(c) = &self.compress {
            // perf's write_compressed: version 1, type 1 (zstd), level, ratio, mmap_len.
            let mut f = Vec::new();
            for x in [1, 1, c.level.max(0) as u32, 4, COMP_MMAP_LEN as u32] {
                put32(&mut f, x);
            }
            feats.push((feature::COMPRESSED, f));
        }
        if !self.pmus.is_empty() {
            let mut f = Vec::new();
            put32(&mut f, self.pmus.len() as u32);
            for (kind, name) in &self.pmus {
                put32(&mut f, *kind);
                perf_string(&mut f, name);
            }
            feats.push((feature::PMU_MAPPINGS, f));
        }
        for (id, s) in &self.strings {
            let s = padded(s, 64);
            let mut f = Vec::new();
            put32(&mut f, s.len() as u32);
            f.extend(s);
            feats.push((*id, f));
        }
        feats
    }

    /// The file in pipe mode (what `perf record -o -` writes): a 16-byte header, a
    /// HEADER_ATTR record per attribute (with its ids), a HEADER_FEATURE record per
    /// feature (no AUXTRACE index: pipe mode has none) and the end-of-features one, then
    /// the records.
    pub fn finish_pipe(self) -> Result<Vec<u8>, WriteError> {
        let mut out = Vec::new();
        put64(&mut out, u64::from_le_bytes(*b"PERFILE2"));
        put64(&mut out, 16);
        let record = |out: &mut Vec<u8>, k: u32, body: Vec<u8>| {
            let size = 8 + body.len();
            if size > u16::MAX as usize {
                return Err(WriteError::TooLarge(size));
            }
            put32(out, k);
            out.extend_from_slice(&0u16.to_le_bytes());
            out.extend_from_slice(&(size as u16).to_le_bytes());
            out.extend(body);
            Ok(())
        };
        for a in &self.attrs {
            let mut body = a.attr.to_bytes();
            for &id in &a.ids {
                put64(&mut body, id);
            }
            record(&mut out, kind::HEADER_ATTR, body)?;
        }
        let mut feats = self.features();
        feats.sort_by_key(|(id, _)| *id);
        // perf ends the features with HEADER_LAST_FEATURE (32 in perf 6.1).
        feats.push((32, Vec::new()));
        for (id, f) in feats {
            let mut body = Vec::new();
            put64(&mut body, id as u64);
            body.extend(f);
            record(&mut out, kind::HEADER_FEATURE, body)?;
        }
        out.extend(self.data);
        Ok(out)
    }

    /// The file's bytes: header, attrs, ids, data, feature table, features.
    pub fn finish(self) -> Vec<u8> {
        let attr_size = self.attrs[0].attr.size as u64 + 16;
        let attrs_at = FILE_HEADER_SIZE;
        let attrs_len = attr_size * self.attrs.len() as u64;
        let mut ids_at = attrs_at + attrs_len;
        let mut attrs = Vec::new();
        let mut ids = Vec::new();
        for a in &self.attrs {
            attrs.extend(a.attr.to_bytes());
            put64(&mut attrs, ids_at + ids.len() as u64);
            put64(&mut attrs, 8 * a.ids.len() as u64);
            for &id in &a.ids {
                put64(&mut ids, id);
            }
        }
        ids_at += ids.len() as u64;
        let data_at = ids_at;
        let data_len = self.data.len() as u64;

        // Features, in bit order.
        let mut feats = self.features();
        if !self.auxtrace_index.is_empty() {
            let mut f = Vec::new();
            put64(&mut f, self.auxtrace_index.len() as u64);
            for (o, sz) in &self.auxtrace_index {
                put64(&mut f, data_at + o);
                put64(&mut f, *sz);
            }
            feats.push((feature::AUXTRACE, f));
        }
        feats.sort_by_key(|(id, _)| *id);

        let mut header = FileHeader {
            attr_size,
            attrs: Section {
                offset: attrs_at,
                size: attrs_len,
            },
            data: Section {
                offset: data_at,
                size: data_len,
            },
            event_types: Section::default(),
            features: [0; 4],
        };
        let table_at = data_at + data_len;
        let mut table = Vec::new();
        let mut body = Vec::new();
        let mut at = table_at + 16 * feats.len() as u64;
        for (id, f) in &feats {
            header.set_feature(*id);
            put64(&mut table, at + body.len() as u64);
            put64(&mut table, f.len() as u64);
            body.extend_from_slice(f);
        }
        at += body.len() as u64;

        let mut out = header.to_bytes();
        out.extend(attrs);
        out.extend(ids);
        out.extend(self.data);
        out.extend(table);
        out.extend(body);
        debug_assert_eq!(out.len() as u64, at);
        out
    }
}

/// A stretch of one CPU in [`intel_pt_two_threads`]: the thread that runs there from
/// `switch_in` to `switch_out` and the Intel PT bytes the CPU wrote meanwhile. A CPU may
/// have several stretches (one thread after another, in time order): its AUX data is
/// theirs, one after the other.
#[derive(Clone, Debug)]
pub struct CpuStream {
    pub cpu: u32,
    pub tid: u32,
    pub pt: Vec<u8>,
    /// perf times (ns) of the switch in and out: the stream's TSC packets should fall
    /// between them (`PerfClock::perf_time_to_tsc`), after the process's sideband.
    pub switch_in: u64,
    pub switch_out: u64,
}

/// The program, its process and the recording settings of [`intel_pt_two_threads`].
#[derive(Clone, Debug)]
pub struct PtRecording {
    /// `/sys/bus/event_source/devices/intel_pt/type` of the recording machine.
    pub pmu_type: u32,
    /// The event's config: IA32_RTIT_CTL's bits (perf's default `intel_pt//` is
    /// 0x300e601: pt, mtc, tsc, branch, mtc_period 3, psb_period 3).
    pub config: u64,
    pub clock: PerfClock,
    /// TSC:CTC ratio and nominal ratio, as perf stores them.
    pub tsc_ctc_ratio: (u32, u32),
    pub max_nonturbo_ratio: u32,
    /// The binary: path as mapped, build-id, load address, mapped length, file offset.
    pub path: Vec<u8>,
    pub build_id: BuildId,
    pub addr: u64,
    pub len: u64,
    pub pgoff: u64,
    pub comm: Vec<u8>,
    pub pid: u32,
    /// perf time (ns) of the first record; the process's sideband follows 1 µs apart,
    /// each CPU's records at its `switch_in` and `switch_out`.
    pub start_time: u64,
    pub cpus: Vec<CpuStream>,
    /// `perf record -z` at this zstd level: the sideband in COMPRESSED records.
    pub compress: Option<i32>,
    /// Other processes, each one thread (its tid is its pid): a `CpuStream` whose `tid`
    /// is one of their pids runs in that process.
    pub processes: Vec<PtProcess>,
    /// Programs processes exec into during the recording.
    pub execs: Vec<PtExec>,
    /// Kernel modules loaded, as `perf record` synthesizes them when it starts: an MMAP2
    /// of the kernel (pid -1) naming the module's `.ko` file.
    pub modules: Vec<PtImage>,
    /// The most AUX data one AUXTRACE record holds: a stretch's trace cut into buffers of
    /// this many bytes at any byte, as perf cuts it (it reads the AUX ring where its head
    /// is when it wakes, inside a packet as often as not). `None`: one buffer a stretch.
    pub aux_buffer: Option<usize>,
    /// `perf record -S` (snapshot mode) with this snapshot size: the AUX area is
    /// overwritten in a ring, and a snapshot at the end of each `aux_buffer` bytes holds
    /// only its last this many bytes (perf writes them at their AUX offset, so the bytes
    /// before are a gap: overwritten). Needs `aux_buffer`.
    pub snapshot: Option<usize>,
    /// Sideband records (LOST) and samples (LOST_SAMPLES) perf dropped: one record of each
    /// with these counts, before the threads exit.
    pub lost: Option<(u64, u64)>,
    /// `perf record --per-thread`: an AUX area per thread (its stretches' data one after
    /// the other, whatever their CPU; AUXTRACE records name the thread, CPU -1), and no
    /// context switch recorded (`have_sched_switch` 0).
    pub per_thread: bool,
    /// `perf record -e intel_pt//` (not `//u`): the kernel is traced too (both events
    /// without `exclude_kernel`), and the streams are encoded with every CPL traced.
    pub kernel: bool,
}

/// A binary as mapped: path, build-id, load address, mapped length, file offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtImage {
    pub path: Vec<u8>,
    pub build_id: BuildId,
    pub addr: u64,
    pub len: u64,
    pub pgoff: u64,
}

impl PtImage {
    /// The static ELF at `path`: its build-id and first executable segment, mapped at its
    /// own address.
    pub fn for_elf(path: &std::path::Path) -> Result<PtImage, String> {
        use object::{Object, ObjectSegment, SegmentFlags};
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let elf = object::File::parse(&*bytes).map_err(|e| format!("{}: {e}", path.display()))?;
        let id = elf
            .build_id()
            .ok()
            .flatten()
            .and_then(BuildId::new)
            .ok_or_else(|| format!("{}: no build-id of at most 20 bytes", path.display()))?;
        let text = elf
            .segments()
            .find(|s| matches!(s.flags(), SegmentFlags::Elf { p_flags, .. } if p_flags.0 & object::elf::PF_X.0 != 0))
            .ok_or_else(|| format!("{}: no executable segment", path.display()))?;
        let (offset, _) = text.file_range();
        Ok(PtImage {
            path: path.as_os_str().as_encoded_bytes().to_vec(),
            build_id: id,
            addr: text.address(),
            len: text.size(),
            pgoff: offset,
        })
    }

    /// The name perf gives a process running it (COMM: the file name, 15 bytes at most).
    pub fn comm(&self) -> &[u8] {
        let name = self.path.rsplit(|&b| b == b'/').next().unwrap_or(&[]);
        &name[..name.len().min(15)]
    }
}

/// A process of [`PtRecording::processes`]: from perf time `start`, forked from `parent`
/// (a FORK record: it has the parent's mappings) and/or running `image` (COMM with the
/// exec flag and the image's MMAP2, after the FORK if any).
#[derive(Clone, Debug)]
pub struct PtProcess {
    pub pid: u32,
    pub parent: Option<u32>,
    pub image: Option<PtImage>,
    pub start: u64,
}

/// Process `pid` execs `image` at perf time `time` (COMM with the exec flag, then the
/// image's MMAP2 1 ns later): its earlier mappings are gone.
#[derive(Clone, Debug)]
pub struct PtExec {
    pub pid: u32,
    pub time: u64,
    pub image: PtImage,
}

/// IA32_RTIT_CTL bits perf's intel_pt PMU exposes in `format/` (the masks its
/// AUXTRACE_INFO carries).
pub mod pt_format {
    pub const CYC: u64 = 1 << 1;
    pub const MTC: u64 = 1 << 9;
    pub const TSC: u64 = 1 << 10;
    pub const NORETCOMP: u64 = 1 << 11;
    pub const BRANCH: u64 = 1 << 13;
    pub const MTC_PERIOD: u64 = 0xf << 14;
}

/// The ids of the intel_pt event (this plus the CPU) and of the sideband event: far
/// enough apart for any CPU number (a recording may have thousands of AUX areas).
pub const PT_IDS: u64 = 1000;
pub const SIDEBAND_IDS: u64 = 1 << 32;

/// The attrs of `perf record -e intel_pt//u` for `r` ([`perf_intel_pt_attrs`]): ids
/// [`PT_IDS`] + CPU and [`SIDEBAND_IDS`] + CPU, trailers with IDENTIFIER, IP, TID, TIME, CPU.
pub fn intel_pt_attrs(r: &PtRecording) -> Vec<Attr> {
    let ids = |base: u64| r.cpu_list().iter().map(|&c| base + c as u64).collect();
    let sample_type = sample::IDENTIFIER | sample::IP | sample::TID | sample::TIME | sample::CPU;
    let mut attrs = perf_intel_pt_attrs(
        r.pmu_type,
        r.config,
        sample_type,
        [ids(PT_IDS), ids(SIDEBAND_IDS)],
    );
    if r.per_thread {
        // perf record --per-thread records no context switches (without --switch-events).
        attrs[1].attr.flags &= !flag::CONTEXT_SWITCH;
    }
    if r.kernel {
        for a in &mut attrs {
            a.attr.flags &= !flag::EXCLUDE_KERNEL;
        }
    }
    attrs
}

/// The two events `perf record -e intel_pt//u` opens: the intel_pt event (`pmu_type`,
/// `config`: IA32_RTIT_CTL's bits) and perf's sideband event `dummy:u` with mmap2, comm,
/// task and context_switch; both with `sample_id_all`, their trailers laid out by
/// `sample_type`, and `ids` each one's ids.
pub fn perf_intel_pt_attrs(
    pmu_type: u32,
    config: u64,
    sample_type: u64,
    ids: [Vec<u64>; 2],
) -> Vec<Attr> {
    let common = flag::DISABLED
        | flag::EXCLUDE_KERNEL
        | flag::EXCLUDE_HV
        | flag::SAMPLE_ID_ALL
        | flag::EXCLUDE_GUEST;
    let pt = EventAttr {
        kind: pmu_type,
        size: 128,
        config,
        sample_period: 1,
        sample_type,
        flags: common | flag::ENABLE_ON_EXEC,
        clockid: 0,
        ..EventAttr::default()
    };
    let dummy = EventAttr {
        kind: attr_type::SOFTWARE,
        size: 128,
        config: attr_type::SW_DUMMY,
        sample_period: 1,
        sample_type,
        flags: common
            | flag::ENABLE_ON_EXEC
            | flag::MMAP
            | flag::COMM
            | flag::TASK
            | flag::MMAP2
            | flag::COMM_EXEC
            | flag::CONTEXT_SWITCH,
        ..EventAttr::default()
    };
    let [pt_ids, dummy_ids] = ids;
    vec![
        Attr {
            attr: pt,
            ids: pt_ids,
        },
        Attr {
            attr: dummy,
            ids: dummy_ids,
        },
    ]
}

/// The Intel PT AUXTRACE_INFO perf writes for `r` ([`perf_intel_pt_info`]).
pub fn intel_pt_info(r: &PtRecording) -> IntelPtInfo {
    IntelPtInfo {
        snapshot_mode: r.snapshot.is_some(),
        per_cpu_mmaps: !r.per_thread,
        have_sched_switch: if r.per_thread { 0 } else { 2 },
        ..perf_intel_pt_info(r.pmu_type, &r.clock, r.tsc_ctc_ratio, r.max_nonturbo_ratio)
    }
}

/// Of an interval of `len` AUX bytes, how many a snapshot keeps (its last ones).
fn kept(r: &PtRecording, len: usize) -> usize {
    r.snapshot.map_or(len, |s| len.min(s))
}

/// The Intel PT AUXTRACE_INFO perf writes with per-CPU buffers, context-switch sideband,
/// no snapshot and no filter: the PMU's type, perf's time conversion, CPUID.15H's TSC:CTC
/// ratio (EBX, EAX) and the maximum non-turbo ratio.
pub fn perf_intel_pt_info(
    pmu_type: u32,
    clock: &PerfClock,
    tsc_ctc_ratio: (u32, u32),
    max_nonturbo_ratio: u32,
) -> IntelPtInfo {
    IntelPtInfo {
        pmu_type,
        time_shift: clock.time_shift as u16,
        time_mult: clock.time_mult as u32,
        time_zero: clock.time_zero,
        cap_user_time_zero: true,
        tsc_bit: pt_format::TSC,
        noretcomp_bit: pt_format::NORETCOMP,
        have_sched_switch: 2,
        snapshot_mode: false,
        per_cpu_mmaps: true,
        mtc: Some(MtcInfo {
            mtc_bit: pt_format::MTC,
            mtc_freq_bits: pt_format::MTC_PERIOD,
            tsc_ctc_ratio_n: tsc_ctc_ratio.0,
            tsc_ctc_ratio_d: tsc_ctc_ratio.1,
            cyc_bit: pt_format::CYC,
        }),
        max_nonturbo_ratio: Some(max_nonturbo_ratio),
        filter: Some(Vec::new()),
    }
}

/// A recorded file: its bytes, and what [`Written::records`] rebuilds the records from.
pub struct Written {
    pub bytes: Vec<u8>,
    /// The recording without its streams' bytes (those are in `streams`, padded).
    recording: PtRecording,
    private: Vec<u8>,
    streams: Vec<Vec<u8>>,
    /// Per stretch, the unpadded length of each of its AUXTRACE buffers.
    cuts: Vec<Vec<usize>>,
}

impl Written {
    /// The records written, in order, with their CPU modes and trailers (AUXTRACE data
    /// padded to 8 bytes with PAD packets, as perf pads it).
    pub fn records(&self) -> Records<'_> {
        build(&self.recording, &self.private, &self.streams, &self.cuts)
            .expect("built once already")
    }
}

/// Two threads of one process on their own CPUs (`r.cpus`, usually two), recorded the way
/// `perf record -e intel_pt//u` does with per-CPU buffers: AUXTRACE_INFO, TIME_CONV; the
/// process's COMM (exec), its MMAP2 (with build-id), a FORK and COMM per further thread;
/// each of `r.processes` (`perf record -a`: a FORK from its parent, and/or its program's
/// COMM (exec) and MMAP2, at its `start`) and each of `r.execs` (COMM (exec) and the new
/// program's MMAP2); then per CPU: SWITCH_CPU_WIDE in (from the idle task), ITRACE_START, AUX, SWITCH_CPU_WIDE
/// out, AUXTRACE with the CPU's stream; the threads' EXITs; HEADER_BUILD_ID,
/// HEADER_EVENT_DESC (`intel_pt//u`, `dummy:u`), HEADER_PMU_MAPPINGS, strings, and
/// HEADER_AUXTRACE.
pub fn intel_pt_two_threads(r: &PtRecording) -> Result<Written, WriteError> {
    written(r, |w| Ok(w.finish()))
}

/// A copy of `/proc/kcore` as `perf record --kcore` keeps it (`kcore_dir/kcore`), holding
/// the executable segments of the ELF `elf` at their own addresses: an ELF core file
/// (`ET_CORE`) of `PT_LOAD` headers, readable and executable, each with its bytes (the
/// kernel's text as it ran; a real copy also has a `PT_NOTE` and the direct map, which
/// a decode does not read).
pub fn kcore_copy(elf: &[u8]) -> Result<Vec<u8>, String> {
    use object::read::elf::{ElfFile64, ProgramHeader};
    let file = ElfFile64::<object::Endianness>::parse(elf).map_err(|e| e.to_string())?;
    let e = file.endian();
    let text: Vec<(u64, &[u8])> = file
        .elf_program_headers()
        .iter()
        .filter(|ph| {
            ph.p_type(e) == object::elf::PT_LOAD && ph.p_flags(e).0 & object::elf::PF_X.0 != 0
        })
        .map(|ph| {
            let data = ph
                .data(e, elf)
                .map_err(|_| "a segment outside the file".to_string())?;
            Ok((ph.p_vaddr(e), data))
        })
        .collect::<Result<_, String>>()?;
    if text.is_empty() {
        return Err("no executable segment".into());
    }
    const EHDR: usize = 64;
    const PHDR: usize = 56;
    let mut out = Vec::new();
    // e_ident: ELF, 64-bit, little-endian, version 1, System V.
    out.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&object::elf::ET_CORE.0.to_le_bytes());
    out.extend_from_slice(&object::elf::EM_X86_64.0.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes()); // e_version
    out.extend_from_slice(&0u64.to_le_bytes()); // e_entry
    out.extend_from_slice(&(EHDR as u64).to_le_bytes()); // e_phoff
    out.extend_from_slice(&0u64.to_le_bytes()); // e_shoff
    out.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    out.extend_from_slice(&(EHDR as u16).to_le_bytes());
    out.extend_from_slice(&(PHDR as u16).to_le_bytes());
    out.extend_from_slice(&(text.len() as u16).to_le_bytes());
    out.extend_from_slice(&[0; 6]); // e_shentsize, e_shnum, e_shstrndx
    let mut at = (EHDR + PHDR * text.len()).next_multiple_of(4096) as u64;
    for (vaddr, data) in &text {
        out.extend_from_slice(&object::elf::PT_LOAD.0.to_le_bytes());
        out.extend_from_slice(&(object::elf::PF_R.0 | object::elf::PF_X.0).to_le_bytes());
        for v in [at, *vaddr, 0, data.len() as u64, data.len() as u64, 4096] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        at = (at + data.len() as u64).next_multiple_of(4096);
    }
    for (_, data) in &text {
        out.resize(out.len().next_multiple_of(4096), 0);
        out.extend_from_slice(data);
    }
    Ok(out)
}

/// [`intel_pt_two_threads`] in pipe mode (what `perf record -o -` writes): the same
/// records after HEADER_ATTR and HEADER_FEATURE records, no AUXTRACE index.
pub fn intel_pt_two_threads_pipe(r: &PtRecording) -> Result<Written, WriteError> {
    written(r, PerfDataWriter::finish_pipe)
}

/// A stretch's trace as its AUXTRACE buffers hold it ([`PtRecording::aux_buffer`]).
fn buffers<'p>(r: &PtRecording, pt: &'p [u8]) -> impl Iterator<Item = &'p [u8]> {
    let n = r.aux_buffer.unwrap_or(pt.len()).max(1);
    // An empty stretch is still one (empty) buffer.
    pt.chunks(n).chain(pt.is_empty().then_some(pt))
}

/// Records with their CPU modes and trailers, as [`PerfDataWriter::push`] takes them.
pub type Records<'a> = Vec<(u16, Record<'a>, SampleId)>;

fn written(
    r: &PtRecording,
    finish: impl FnOnce(PerfDataWriter) -> Result<Vec<u8>, WriteError>,
) -> Result<Written, WriteError> {
    let private = intel_pt_info(r).to_private();
    let streams: Vec<Vec<u8>> = r
        .cpus
        .iter()
        .map(|c| {
            // Each buffer's data padded to 8 bytes with zeros, as perf writes it.
            let mut pt = Vec::new();
            for piece in buffers(r, &c.pt) {
                pt.extend_from_slice(&piece[piece.len() - kept(r, piece.len())..]);
                pt.resize(pt.len().next_multiple_of(8), 0);
            }
            pt
        })
        .collect();
    let cuts: Vec<Vec<usize>> = r
        .cpus
        .iter()
        .map(|c| buffers(r, &c.pt).map(<[u8]>::len).collect())
        .collect();
    let recs = build(r, &private, &streams, &cuts)?;
    let mut w = PerfDataWriter::new(intel_pt_attrs(r))?;
    if let Some(level) = r.compress {
        w.compress(level)?;
    }
    for (cpumode, rec, sid) in &recs {
        w.push(*cpumode, rec, sid)?;
    }
    w.flush_compressed()?;
    w.add_build_id(misc::USER, u32::MAX, r.build_id, &r.path);
    let mut ids = vec![r.build_id];
    let others = r.processes.iter().filter_map(|p| p.image.as_ref());
    for im in others.chain(r.execs.iter().map(|e| &e.image)) {
        if !ids.contains(&im.build_id) {
            ids.push(im.build_id);
            w.add_build_id(misc::USER, u32::MAX, im.build_id, &im.path);
        }
    }
    w.set_event_names(&["intel_pt//u", "dummy:u"]);
    w.add_pmu(attr_type::SOFTWARE, "software");
    w.add_pmu(r.pmu_type, "intel_pt");
    w.add_string(feature::HOSTNAME, "tracemill");
    w.add_string(feature::OSRELEASE, "6.1.0-tracemill");
    w.add_string(feature::VERSION, "6.1");
    w.add_string(feature::ARCH, "x86_64");
    let bytes = finish(w)?;
    drop(recs);
    let mut recording = r.clone();
    for c in &mut recording.cpus {
        c.pt = Vec::new();
    }
    Ok(Written {
        bytes,
        recording,
        private,
        streams,
        cuts,
    })
}

/// The records of [`intel_pt_two_threads`], borrowing the AUXTRACE_INFO array and the
/// padded streams (one per `r.cpus`).
fn build<'a>(
    r: &'a PtRecording,
    private: &'a [u8],
    streams: &'a [Vec<u8>],
    cuts: &[Vec<usize>],
) -> Result<Records<'a>, WriteError> {
    let mut recs: Records<'a> = Vec::new();
    let mut t = r.start_time;
    let mut next_time = || {
        t += 1000;
        t
    };
    let user = misc::USER;
    let none = SampleId::default();
    use tracemill_perfdata::record::{
        Aux, Auxtrace, AuxtraceInfo, Comm, Mmap2, Switch, Task, TimeConv, TimeConvExt,
    };
    recs.push((
        0,
        Record::AuxtraceInfo(AuxtraceInfo {
            kind: AUXTRACE_INTEL_PT,
            private,
        }),
        none,
    ));
    recs.push((
        0,
        Record::TimeConv(TimeConv {
            time_shift: r.clock.time_shift as u64,
            time_mult: r.clock.time_mult,
            time_zero: r.clock.time_zero,
            ext: Some(TimeConvExt {
                time_cycles: 0,
                time_mask: 0,
                cap_user_time_zero: true,
                cap_user_time_short: false,
            }),
        }),
        none,
    ));
    // The main process's first thread (the file's first stream when no other is the main
    // process's).
    let first = r
        .cpus
        .iter()
        .find(|c| r.pid_of(c.tid) == r.pid)
        .or(r.cpus.first())
        .ok_or(WriteError::NoStream)?;
    let sid = |tid: u32, cpu: u32, time: u64, base: u64| SampleId {
        pid: Some(r.pid_of(tid)),
        tid: Some(tid),
        time: Some(time),
        id: Some(base + cpu as u64),
        stream_id: None,
        cpu: Some(cpu),
    };
    let comm = &r.comm[..];
    recs.push((
        user,
        Record::Comm(Comm {
            pid: r.pid,
            tid: first.tid,
            exec: true,
            comm,
        }),
        sid(first.tid, first.cpu, next_time(), SIDEBAND_IDS),
    ));
    recs.push((
        user,
        Record::Mmap2(Mmap2 {
            pid: r.pid,
            tid: first.tid,
            addr: r.addr,
            len: r.len,
            pgoff: r.pgoff,
            file: Mmap2File::BuildId(r.build_id),
            prot: 5,  // PROT_READ | PROT_EXEC
            flags: 2, // MAP_PRIVATE
            filename: &r.path,
        }),
        sid(first.tid, first.cpu, next_time(), SIDEBAND_IDS),
    ));
    let threads: Vec<u32> = r
        .tids()
        .into_iter()
        .filter(|&t| t != first.tid && r.pid_of(t) == r.pid)
        .collect();
    for &tid in &threads {
        let c = r
            .cpus
            .iter()
            .find(|c| c.tid == tid)
            .expect("a listed thread");
        let time = next_time();
        recs.push((
            user,
            Record::Fork(Task {
                pid: r.pid,
                ppid: r.pid,
                tid: c.tid,
                ptid: first.tid,
                time,
            }),
            sid(c.tid, first.cpu, time, SIDEBAND_IDS),
        ));
        recs.push((
            user,
            Record::Comm(Comm {
                pid: r.pid,
                tid: c.tid,
                exec: false,
                comm,
            }),
            sid(c.tid, c.cpu, next_time(), SIDEBAND_IDS),
        ));
    }
    // The other processes and the execs, at their own times (perf orders a round's
    // records by time).
    let cpu_of = |tid: u32| {
        r.cpus
            .iter()
            .find(|c| c.tid == tid)
            .map_or(first.cpu, |c| c.cpu)
    };
    let mmap2 = |pid: u32, im: &'a PtImage| {
        Record::Mmap2(Mmap2 {
            pid,
            tid: pid,
            addr: im.addr,
            len: im.len,
            pgoff: im.pgoff,
            file: Mmap2File::BuildId(im.build_id),
            prot: 5,  // PROT_READ | PROT_EXEC
            flags: 2, // MAP_PRIVATE
            filename: &im.path,
        })
    };
    for p in &r.processes {
        let cpu = cpu_of(p.pid);
        let mut t = p.start;
        if let Some(parent) = p.parent {
            recs.push((
                user,
                Record::Fork(Task {
                    pid: p.pid,
                    ppid: parent,
                    tid: p.pid,
                    ptid: parent,
                    time: t,
                }),
                sid(p.pid, cpu, t, SIDEBAND_IDS),
            ));
            t += 1;
        }
        if let Some(im) = &p.image {
            recs.push((
                user,
                Record::Comm(Comm {
                    pid: p.pid,
                    tid: p.pid,
                    exec: true,
                    comm: im.comm(),
                }),
                sid(p.pid, cpu, t, SIDEBAND_IDS),
            ));
            recs.push((user, mmap2(p.pid, im), sid(p.pid, cpu, t + 1, SIDEBAND_IDS)));
        }
    }
    for e in &r.execs {
        let cpu = cpu_of(e.pid);
        recs.push((
            user,
            Record::Comm(Comm {
                pid: e.pid,
                tid: e.pid,
                exec: true,
                comm: e.image.comm(),
            }),
            sid(e.pid, cpu, e.time, SIDEBAND_IDS),
        ));
        recs.push((
            user,
            mmap2(e.pid, &e.image),
            sid(e.pid, cpu, e.time + 1, SIDEBAND_IDS),
        ));
    }
    for m in &r.modules {
        recs.push((
            misc::KERNEL,
            mmap2(u32::MAX, m),
            sid(u32::MAX, first.cpu, r.start_time, SIDEBAND_IDS),
        ));
    }
    let sideband_end = next_time();
    let cpus = r.cpu_list();
    let areas = match r.per_thread {
        true => r.tids(),
        false => cpus.clone(),
    };
    // Per AUX area: where its next data goes in its buffer; per CPU: when its last thread
    // left.
    let mut aux_at = vec![0u64; areas.len()];
    let mut free_from = vec![sideband_end; cpus.len()];
    for (i, ((c, pt), cut)) in r.cpus.iter().zip(streams).zip(cuts).enumerate() {
        let on = cpus.iter().position(|&x| x == c.cpu).expect("a listed CPU");
        let area = if r.per_thread { c.tid } else { c.cpu };
        let k = areas
            .iter()
            .position(|&x| x == area)
            .expect("a listed area");
        let first_in_area = aux_at[k] == 0;
        if c.switch_in <= free_from[on] || c.switch_out <= c.switch_in + 1 {
            return Err(WriteError::SwitchTimes(
                c.cpu,
                c.switch_in,
                c.switch_out,
                free_from[on],
            ));
        }
        free_from[on] = c.switch_out + 1;

        // CPU-wide context switches (per thread, perf records none), naming the task
        // switched from or to: the idle task here.
        let switch = |out: bool, time| {
            let s = Record::Switch(Switch {
                out,
                preempt: false,
                next_prev: Some((0, 0)),
            });
            (user, s, sid(c.tid, c.cpu, time, SIDEBAND_IDS))
        };
        if !r.per_thread {
            recs.push(switch(false, c.switch_in));
        }
        // perf's AUX event is scheduled in once per area (per CPU when CPU-wide, per thread
        // with --per-thread): one ITRACE_START.
        if first_in_area {
            recs.push((
                user,
                Record::ItraceStart {
                    pid: r.pid_of(c.tid),
                    tid: c.tid,
                },
                sid(c.tid, c.cpu, c.switch_in + 1, PT_IDS),
            ));
        }
        if !r.per_thread {
            recs.push(switch(true, c.switch_out));
        }
        let mut at = 0;
        for (j, &len) in cut.iter().enumerate() {
            // The data and its padding; the next buffer starts where the data ends (without
            // `aux_buffer`, a stretch is one buffer that ends with its padding, as before).
            // A snapshot holds the interval's last bytes, at their AUX offset.
            let keep = kept(r, len);
            let padded = keep.next_multiple_of(8);
            let data = &pt[at..at + padded];
            at += padded;
            let size = match r.aux_buffer {
                Some(_) => len as u64,
                None => padded as u64,
            };
            recs.push((
                0,
                Record::Aux(Aux {
                    aux_offset: aux_at[k],
                    aux_size: size,
                    // The kernel's AUX records of an area written over in a ring.
                    flags: if r.snapshot.is_some() { 2 } else { 0 },
                }),
                sid(c.tid, c.cpu, c.switch_out + 1, PT_IDS),
            ));
            recs.push((
                0,
                Record::Auxtrace(Auxtrace {
                    size: padded as u64,
                    offset: aux_at[k] + (len - keep) as u64,
                    reference: 0x5eed_0000 + i as u64 + ((j as u64) << 32),
                    idx: k as u32,
                    tid: if r.per_thread { c.tid } else { u32::MAX },
                    cpu: if r.per_thread { u32::MAX } else { c.cpu },
                    data,
                }),
                none,
            ));
            aux_at[k] += size;
        }
    }
    let mut t = r.cpus.iter().map(|c| c.switch_out + 1).max().unwrap_or(0);
    let mut next_time = || {
        t += 1000;
        t
    };
    recs.push((0, Record::FinishedRound, none));
    if let Some((lost, samples)) = r.lost {
        let (cpu, tid) = (r.cpus[0].cpu, r.cpus[0].tid);
        let time = next_time();
        let id = SIDEBAND_IDS + cpu as u64;
        recs.push((
            0,
            Record::Lost { id, lost },
            sid(tid, cpu, time, SIDEBAND_IDS),
        ));
        let time = next_time();
        recs.push((
            0,
            Record::LostSamples { lost: samples },
            sid(tid, cpu, time, SIDEBAND_IDS),
        ));
    }
    for &tid in r.tids().iter().rev() {
        let c = r
            .cpus
            .iter()
            .rev()
            .find(|c| c.tid == tid)
            .expect("a listed thread");
        let time = next_time();
        recs.push((
            user,
            Record::Exit(Task {
                pid: r.pid_of(c.tid),
                ppid: r.pid_of(c.tid),
                tid: c.tid,
                ptid: c.tid,
                time,
            }),
            sid(c.tid, c.cpu, time, SIDEBAND_IDS),
        ));
    }
    recs.push((0, Record::FinishedRound, none));

    Ok(recs)
}

impl PtRecording {
    /// The CPUs of `cpus`, each once, in order of first appearance (their AUX areas).
    pub fn cpu_list(&self) -> Vec<u32> {
        let mut v: Vec<u32> = Vec::new();
        for c in &self.cpus {
            if !v.contains(&c.cpu) {
                v.push(c.cpu);
            }
        }
        v
    }

    /// The threads of `cpus`, each once, in order of first appearance (the first is the
    /// process's main thread).
    pub fn tids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = Vec::new();
        for c in &self.cpus {
            if !v.contains(&c.tid) {
                v.push(c.tid);
            }
        }
        v
    }

    /// The process of thread `tid`: one of `processes` (whose thread is its pid), or the
    /// recording's own.
    pub fn pid_of(&self, tid: u32) -> u32 {
        if self.processes.iter().any(|p| p.pid == tid) {
            tid
        } else {
            self.pid
        }
    }

    /// A recording of the static ELF at `path` (read for its build-id and its first
    /// executable segment, mapped at its own address), process `pid` named after the
    /// file, on a 2 GHz TSC (perf time = TSC / 2 + 1 s), with perf's default config.
    pub fn for_elf(
        path: &std::path::Path,
        pid: u32,
        cpus: Vec<CpuStream>,
    ) -> Result<PtRecording, String> {
        let im = PtImage::for_elf(path)?;
        let comm = im.comm().to_vec();
        let PtImage {
            path,
            build_id: id,
            addr,
            len,
            pgoff: offset,
        } = im;
        Ok(PtRecording {
            pmu_type: 8,
            config: 0x300e601,
            clock: PerfClock {
                time_shift: 10,
                time_mult: 512,
                time_zero: 1_000_000_000,
                short: None,
            },
            tsc_ctc_ratio: (84, 2),
            max_nonturbo_ratio: 20,
            path,
            build_id: id,
            addr,
            len,
            pgoff: offset,
            comm,
            pid,
            start_time: 1_000_000_000 + 1_000_000,
            cpus,
            compress: None,
            processes: Vec::new(),
            execs: Vec::new(),
            modules: Vec::new(),
            aux_buffer: None,
            snapshot: None,
            lost: None,
            per_thread: false,
            kernel: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracemill_perfdata::PerfData;

    #[test]
    fn writer_lays_out_one_record_of_each_kind_the_reader_reads_back() {
        let attrs = vec![Attr {
            attr: EventAttr {
                kind: 1,
                size: 64,
                sample_type: sample::TID | sample::TIME,
                flags: flag::SAMPLE_ID_ALL,
                ..EventAttr::default()
            },
            ids: vec![],
        }];
        let mut w = PerfDataWriter::new(attrs).unwrap();
        let sid = SampleId {
            pid: Some(1),
            tid: Some(2),
            time: Some(3),
            ..SampleId::default()
        };
        let ks = Record::Ksymbol(tracemill_perfdata::record::Ksymbol {
            addr: 0xffff_8000_0000_0000,
            len: 64,
            ksym_type: 1,
            flags: 0,
            name: b"bpf_prog_1",
        });
        w.push(misc::KERNEL, &ks, &sid).unwrap();
        let bytes = w.finish();
        let p = PerfData::parse(&bytes).unwrap();
        let items: Vec<_> = p.records().collect::<Result<_, _>>().unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].record, ks);
        assert_eq!(items[0].sample_id, sid);
        // 8 header + 16 fixed + "bpf_prog_1\0" padded to 16 + 16 trailer.
        assert_eq!(p.header().data.size, 8 + 16 + 16 + 16);
        assert_eq!(p.features().unwrap(), vec![]);
    }

    /// `push_raw` writes whole records as they are, and refuses a cut one (by its byte)
    /// and an AUXTRACE record.
    #[test]
    fn raw_records_are_written_whole_or_refused_at_their_byte() {
        let attrs = vec![Attr {
            attr: EventAttr {
                kind: 1,
                size: 64,
                ..EventAttr::default()
            },
            ids: vec![],
        }];
        let mut w = PerfDataWriter::new(attrs.clone()).unwrap();
        w.push(0, &Record::FinishedRound, &SampleId::default())
            .unwrap();
        let mut raw = w.data.clone();
        let mut w = PerfDataWriter::new(attrs).unwrap();
        w.push_raw(&raw).unwrap();
        let bytes = w.finish();
        let p = PerfData::parse(&bytes).unwrap();
        let items: Vec<_> = p.records().collect::<Result<_, _>>().unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].record, Record::FinishedRound);
        let mut w = PerfDataWriter::new(p.attrs().to_vec()).unwrap();
        raw.extend_from_slice(&[0; 4]);
        assert_eq!(w.push_raw(&raw), Err(WriteError::RawRecord(8)));
        let mut auxtrace = raw[..8].to_vec();
        auxtrace[..4].copy_from_slice(&kind::AUXTRACE.to_le_bytes());
        assert_eq!(w.push_raw(&auxtrace), Err(WriteError::RawRecord(0)));
    }

    #[test]
    fn attributes_must_share_one_size_and_records_fit_u16() {
        let a = |size| Attr {
            attr: EventAttr {
                size,
                ..EventAttr::default()
            },
            ids: vec![],
        };
        assert_eq!(PerfDataWriter::new(vec![]).err(), Some(WriteError::NoAttr));
        assert_eq!(
            PerfDataWriter::new(vec![a(64), a(128)]).err(),
            Some(WriteError::AttrSizes(64, 128))
        );
        assert_eq!(
            PerfDataWriter::new(vec![a(8)]).err(),
            Some(WriteError::AttrSize(8))
        );
        let mut w = PerfDataWriter::new(vec![a(64)]).unwrap();
        let big = vec![0u8; 70_000];
        let r = Record::Sample(&big);
        assert_eq!(
            w.push(0, &r, &SampleId::default()),
            Err(WriteError::TooLarge(70_008))
        );
    }
}
