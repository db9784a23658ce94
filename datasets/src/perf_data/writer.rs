//! [`PerfDataWriter`]: perf.data records and header features laid out byte for byte.

use tracemill_perfdata::attr::ATTR_SIZE_VER0;
use tracemill_perfdata::features::{BUILD_ID_ENTRY_FIXED, BUILD_ID_SIZE};
use tracemill_perfdata::header::{feature, FileHeader, Section, FILE_HEADER_SIZE};
use tracemill_perfdata::record::{kind, misc, Mmap2File, AUXTRACE_HEADER_SIZE};
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

#[cfg(test)]
mod tests {
    use super::*;
    use tracemill_perfdata::attr::{flag, sample};
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
