//! A [`super::PtRecording`] laid out as `perf record -e intel_pt//` stores it: attrs,
//! AUXTRACE_INFO, the sideband records and the AUX data, in file or pipe mode.

use super::recording::{PtImage, PtRecording};
use super::writer::{PerfDataWriter, WriteError};
use tracemill_perfdata::attr::{attr_type, flag, sample};
use tracemill_perfdata::header::feature;
use tracemill_perfdata::intel_pt::{IntelPtInfo, MtcInfo, PerfClock};
use tracemill_perfdata::record::{misc, Mmap2File, AUXTRACE_INTEL_PT};
use tracemill_perfdata::{Attr, EventAttr, Record, SampleId};

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
