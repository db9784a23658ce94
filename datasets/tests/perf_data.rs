//! perf.data: the writer (`tracemill_datasets::perf_data`) against the reader
//! (`tracemill-perfdata`): the same records back, AUX data byte for byte; every cut and
//! every flipped byte of a small file gives errors with offsets, never a panic; and
//! Debian's `perf` (linux-perf) reads the same files: `perf script -D` finds every record
//! and the AUX data, `perf script --show-*-events` lists the same COMM, FORK, EXIT, MMAP2
//! and SWITCH events, `perf report` accepts them. TRACEMILL_KEEP_PERF_DATA=DIR keeps them.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use tracemill_datasets::perf_data::{
    intel_pt_info, intel_pt_two_threads, intel_pt_two_threads_pipe, CpuStream, PtRecording,
    Written, PT_IDS, SIDEBAND_IDS,
};
use tracemill_decode::pt::encode::encode;
use tracemill_decode::pt::packet::{IpCompression, IpPayload, Packet, Tnt};
use tracemill_perfdata::header::feature;
use tracemill_perfdata::record::{kind, misc};
use tracemill_perfdata::{PerfData, Record, SampleId};

pub fn jumptable() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("samples/jumptable/images/jumptable")
}

/// A PSB+ with a TSC, then the code at `ip` enabled, three conditional branches, a
/// disable: the smallest Intel PT a decoder has something to say about.
pub fn small_pt(tsc: u64, ip: u64) -> Vec<u8> {
    let full = |ip| IpPayload {
        compression: IpCompression::Sext48,
        bits: ip & 0xffff_ffff_ffff,
    };
    let mut v = Vec::new();
    for p in [
        Packet::Psb,
        Packet::Tsc(tsc),
        Packet::PsbEnd,
        Packet::TipPge(full(ip)),
        Packet::Tnt8(Tnt {
            bits: 0b101,
            len: 3,
        }),
        Packet::TipPgd(IpPayload {
            compression: IpCompression::Suppressed,
            bits: 0,
        }),
    ] {
        encode(&p, &mut v).unwrap();
    }
    v
}

/// Two threads of the jumptable binary, 4242 on CPU 0 then 4243 on CPU 1, each CPU's
/// stream at least `pt_len` bytes, its TSCs inside its thread's time on the CPU.
pub fn recording(pt_len: usize) -> PtRecording {
    let mut r = PtRecording::for_elf(&jumptable(), 4242, Vec::new()).unwrap();
    for (cpu, tid) in [(0u32, 4242u32), (1, 4243)] {
        let switch_in = r.start_time + 20_000 + cpu as u64 * 20_000;
        let switch_out = switch_in + 10_000;
        let tsc = r.clock.perf_time_to_tsc(switch_in + 2_000).unwrap();
        let mut pt = small_pt(tsc, r.addr + cpu as u64 * 0x40);
        while pt.len() < pt_len {
            let again = small_pt(tsc + pt.len() as u64 / 64, r.addr);
            pt.extend(again);
        }
        r.cpus.push(CpuStream {
            cpu,
            tid,
            pt,
            switch_in,
            switch_out,
        });
    }
    r
}

fn small() -> (PtRecording, Written) {
    let r = recording(0);
    let w = intel_pt_two_threads(&r).unwrap();
    (r, w)
}

#[test]
fn round_trip_gives_back_every_record_and_the_aux_data_byte_for_byte() {
    let (r, w) = small();
    let p = PerfData::parse(&w.bytes).unwrap();
    assert_eq!(p.attrs().len(), 2);
    assert_eq!(p.attrs()[0].attr.kind, 8);
    assert_eq!(p.attrs()[0].attr.config, 0x300e601);
    let items: Vec<_> = p.records().collect::<Result<_, _>>().unwrap();
    let written = w.records();
    assert_eq!(items.len(), written.len());
    let mut aux = Vec::new();
    for (item, (cpumode, rec, sid)) in items.iter().zip(&written) {
        assert_eq!(&item.record, rec, "record at {:#x}", item.offset);
        assert_eq!(item.misc & misc::CPUMODE_MASK, *cpumode);
        if rec.kind() < kind::USER_TYPE_START {
            assert_eq!(&item.sample_id, sid, "trailer at {:#x}", item.offset);
            // ITRACE_START and AUX come from the intel_pt event, the rest from dummy.
            let want = if matches!(rec, Record::ItraceStart { .. } | Record::Aux(_)) {
                0
            } else {
                1
            };
            assert_eq!(item.attr, Some(want), "{rec:?}");
        }
        if let Record::Auxtrace(a) = &item.record {
            aux.push((item.offset, a.cpu, a.data));
        }
    }
    // The AUX data: each CPU's stream, padded to 8 bytes with PAD (0) packets.
    assert_eq!(aux.len(), 2);
    for ((_, cpu, data), c) in aux.iter().zip(&r.cpus) {
        assert_eq!(*cpu, c.cpu);
        assert_eq!(&data[..c.pt.len()], &c.pt[..]);
        assert!(data[c.pt.len()..].iter().all(|&b| b == 0));
        assert_eq!(data.len() % 8, 0);
    }
    // The index names the same records.
    let ix = p.auxtrace_index().unwrap();
    assert_eq!(
        ix.iter().map(|e| e.file_offset).collect::<Vec<_>>(),
        aux.iter().map(|a| a.0).collect::<Vec<_>>()
    );
    // Features.
    let b = p.build_ids().unwrap();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].build_id, r.build_id);
    assert_eq!(b[0].filename, &r.path[..]);
    assert_eq!(
        r.build_id.to_hex(),
        "3e9cd42b2288303e1629db1fc9405a843e2b4361"
    );
    assert_eq!(
        p.string_feature(feature::ARCH).unwrap(),
        Some(&b"x86_64"[..])
    );
    let names: Vec<_> = p
        .event_desc()
        .unwrap()
        .into_iter()
        .map(|d| (d.name, d.ids))
        .collect();
    assert_eq!(
        names,
        vec![
            (&b"intel_pt//u"[..], vec![PT_IDS, PT_IDS + 1]),
            (&b"dummy:u"[..], vec![SIDEBAND_IDS, SIDEBAND_IDS + 1])
        ]
    );
    assert!(p.pmu_mappings().unwrap().contains(&(8, &b"intel_pt"[..])));
    let (_, info) = p.intel_pt_info().unwrap().unwrap();
    assert_eq!(info, intel_pt_info(&r));
    let s = info.settings(p.attrs()[0].attr.config);
    assert!(s.tsc && s.ret_compression && s.mtc == Some(true) && s.cyc == Some(false));
    assert_eq!(s.mtc_freq, Some(3));
}

/// Record boundaries of the data section: `(start, end)` per record.
fn boundaries(bytes: &[u8]) -> (u64, Vec<(u64, u64)>) {
    let p = PerfData::parse(bytes).unwrap();
    let offsets: Vec<u64> = p.records().map(|i| i.unwrap().offset).collect();
    let end = p.header().data.offset + p.header().data.size;
    let mut v = Vec::new();
    for (i, &o) in offsets.iter().enumerate() {
        v.push((o, offsets.get(i + 1).copied().unwrap_or(end)));
    }
    (p.header().data.offset, v)
}

/// Everything the reader offers, run to its end; the errors met.
fn read_all(bytes: &[u8]) -> Vec<tracemill_perfdata::Error> {
    let mut errors = Vec::new();
    let p = match PerfData::parse(bytes) {
        Ok(p) => p,
        Err(e) => return vec![e],
    };
    for item in p.records() {
        match item {
            Ok(i) => {
                if let Record::AuxtraceInfo(a) = &i.record {
                    let _ = tracemill_perfdata::IntelPtInfo::parse(a, i.offset);
                }
            }
            Err(e) => errors.push(e),
        }
    }
    errors.extend(p.features().err());
    errors.extend(p.build_ids().err());
    errors.extend(p.auxtrace_index().err());
    errors.extend(p.string_feature(feature::HOSTNAME).err());
    errors.extend(p.event_desc().err());
    errors.extend(p.pmu_mappings().err());
    errors.extend(p.intel_pt_info().err());
    errors
}

/// When `n` cuts `record` (start, end) inside an AUXTRACE record's data: the data's bytes
/// before the cut.
fn cut_aux_data<'a>(bytes: &'a [u8], record: Option<&(u64, u64)>, n: usize) -> Option<&'a [u8]> {
    let &(start, _) = record?;
    let start = start as usize;
    let kind = u32::from_le_bytes(bytes[start..start + 4].try_into().unwrap());
    let head = u16::from_le_bytes([bytes[start + 6], bytes[start + 7]]) as usize;
    (kind == 71 && n > start + head).then(|| &bytes[start + head..n])
}

#[test]
fn every_cut_is_an_error_at_or_before_the_cut_after_the_whole_records() {
    let (_, w) = small();
    let bytes = &w.bytes;
    let (data_at, records) = boundaries(bytes);
    let data_end = records.last().unwrap().1;
    for n in 0..bytes.len() {
        let cut = &bytes[..n];
        let errors = read_all(cut);
        assert!(!errors.is_empty(), "a cut at {n} went unnoticed");
        for e in &errors {
            assert!(e.offset() <= n as u64, "cut at {n}: {e}");
        }
        if n as u64 >= data_at && (n as u64) < data_end {
            // The records wholly before the cut, then one error, at the cut record.
            let p = PerfData::parse(cut).unwrap();
            let got: Vec<_> = p.records().collect();
            let whole = records.iter().take_while(|r| r.1 <= n as u64).count();
            // A cut inside an AUXTRACE record's data gives that record with the bytes
            // up to the cut (the trace there is decoded), then the error.
            let partial = cut_aux_data(bytes, records.get(whole), n);
            assert_eq!(
                got.len(),
                whole + 1 + partial.is_some() as usize,
                "cut at {n}"
            );
            assert!(got[..whole].iter().all(|r| r.is_ok()));
            if let Some(data) = partial {
                match &got[whole].as_ref().unwrap().record {
                    Record::Auxtrace(a) => {
                        assert_eq!(a.data, data, "cut at {n}");
                        assert!((a.data.len() as u64) < a.size);
                    }
                    r => panic!("cut at {n}: {r:?}"),
                }
            }
            let e = got[whole + partial.is_some() as usize]
                .as_ref()
                .unwrap_err();
            assert!(e.is_truncated(), "cut at {n}: {e}");
            let cut_record = records.get(whole).map_or(data_end, |r| r.0);
            assert!(e.offset() >= cut_record.min(n as u64), "cut at {n}: {e}");
            assert!(e.to_string().contains("(at offset 0x"), "{e}");
        }
    }
}

#[test]
fn flipped_bytes_never_panic_and_errors_name_offsets_inside_the_file() {
    let (r, w) = small();
    let pipe = intel_pt_two_threads_pipe(&r).unwrap().bytes;
    let mut flagged = 0;
    for bytes in [&w.bytes, &pipe] {
        let len = bytes.len() as u64;
        for at in 0..bytes.len() {
            for x in [0xff, 0x01, 0x80] {
                let mut b = bytes.clone();
                b[at] ^= x;
                let errors = read_all(&b);
                for e in &errors {
                    assert!(e.offset() <= len, "flip {x:#x} at {at}: {e}");
                }
                flagged += !errors.is_empty() as usize;
            }
        }
    }
    // Headers, sizes, magic, the index: many flips are caught (payload bytes are not).
    assert!(flagged > 100, "{flagged}");
}

/// The records other than HEADER_ATTR and HEADER_FEATURE (pipe mode's), with their
/// trailers and events.
fn strip<'a>(d: &PerfData<'a>) -> Vec<(Record<'a>, SampleId, Option<usize>)> {
    d.records()
        .map(|i| i.unwrap())
        .filter(|i| !matches!(i.record, Record::Other { kind: 64 | 80, .. }))
        .map(|i| (i.record, i.sample_id, i.attr))
        .collect()
}

#[test]
fn pipe_mode_reads_the_same_records_as_file_mode() {
    let (r, w) = small();
    let pipe = intel_pt_two_threads_pipe(&r).unwrap();
    let p = PerfData::parse(&pipe.bytes).unwrap();
    let f = PerfData::parse(&w.bytes).unwrap();
    assert!(p.is_pipe() && !f.is_pipe());
    assert_eq!(p.attrs(), f.attrs());
    let from_pipe = strip(&p);
    assert_eq!(from_pipe, strip(&f));
    assert_eq!(from_pipe.len(), w.records().len());
    assert_eq!(p.build_ids().unwrap(), f.build_ids().unwrap());
    assert_eq!(
        p.string_feature(feature::HOSTNAME).unwrap(),
        Some(&b"tracemill"[..])
    );
    assert_eq!(p.auxtrace_index().unwrap(), vec![]);
    assert_eq!(p.intel_pt_info().unwrap().unwrap().1, intel_pt_info(&r));
}

#[test]
fn pipe_mode_cuts_give_the_records_before_them() {
    let (r, _) = small();
    let bytes = intel_pt_two_threads_pipe(&r).unwrap().bytes;
    let (_, records) = boundaries(&bytes);
    for n in 16..bytes.len() {
        let cut = &bytes[..n];
        let errors = read_all(cut);
        assert!(errors.iter().all(|e| e.offset() <= n as u64), "cut at {n}");
        let p = PerfData::parse(cut).unwrap();
        let got: Vec<_> = p.records().collect();
        let whole = records.iter().take_while(|r| r.1 <= n as u64).count();
        assert!(got[..whole].iter().all(|r| r.is_ok()), "cut at {n}");
        // A pipe has no length: a cut between records is the end of the stream.
        let at_boundary = n == 16 || records.iter().any(|r| r.1 == n as u64);
        let partial = cut_aux_data(&bytes, records.get(whole), n).is_some() as usize;
        assert_eq!(
            got.len(),
            whole + partial + !at_boundary as usize,
            "cut at {n}"
        );
        if !at_boundary {
            assert!(
                got[whole + partial].as_ref().unwrap_err().is_truncated(),
                "cut at {n}"
            );
        }
    }
}

#[test]
fn aux_queues_are_the_cpus_streams_and_name_gaps_overlaps_conflicts_and_losses() {
    use tracemill_datasets::perf_data::{intel_pt_attrs, PerfDataWriter};
    use tracemill_perfdata::aux::{aux_queues, AuxIssue};
    use tracemill_perfdata::record::{aux_flag, Aux, Auxtrace};

    let (r, w) = small();
    let p = PerfData::parse(&w.bytes).unwrap();
    let (queues, losses) = aux_queues(&p).unwrap();
    assert!(losses.is_empty());
    assert_eq!(queues.len(), 2);
    for (q, c) in queues.iter().zip(&r.cpus) {
        assert_eq!((q.cpu, q.tid, q.issues.len()), (Some(c.cpu), None, 0));
        assert_eq!(q.buffers.len(), 1);
        assert_eq!(&q.buffers[0].data[..c.pt.len()], &c.pt[..]);
    }

    // One queue: 0..16, then 32..48 (a gap), 40..56 (an overlap), then a buffer that
    // names CPU 1; and an AUX record reporting truncated, colliding data.
    let bytes = [0x55u8; 16];
    let mut wr = PerfDataWriter::new(intel_pt_attrs(&r)).unwrap();
    let none = SampleId::default();
    let buf = |offset, cpu| {
        Record::Auxtrace(Auxtrace {
            size: 16,
            offset,
            reference: 0,
            idx: 0,
            tid: u32::MAX,
            cpu,
            data: &bytes,
        })
    };
    for (offset, cpu) in [(0, 0), (32, 0), (40, 0), (56, 1)] {
        wr.push(0, &buf(offset, cpu), &none).unwrap();
    }
    let sid = SampleId {
        pid: Some(1),
        tid: Some(2),
        time: Some(99),
        id: Some(1000),
        stream_id: None,
        cpu: Some(0),
    };
    let lost = Aux {
        aux_offset: 0,
        aux_size: 64,
        flags: aux_flag::TRUNCATED | aux_flag::COLLISION,
    };
    wr.push(0, &Record::Aux(lost), &sid).unwrap();
    let file = wr.finish();
    let p = PerfData::parse(&file).unwrap();
    let offsets: Vec<u64> = p.records().map(|i| i.unwrap().offset).collect();
    let (queues, losses) = aux_queues(&p).unwrap();
    assert_eq!(queues.len(), 1);
    assert_eq!(queues[0].len(), 64);
    assert_eq!(
        queues[0].issues,
        [
            AuxIssue::Gap {
                record_offset: offsets[1],
                from: 16,
                to: 32
            },
            AuxIssue::Overlap {
                record_offset: offsets[2],
                offset: 40,
                prev_end: 48
            },
            AuxIssue::Conflict {
                record_offset: offsets[3],
                cpu: 1,
                tid: u32::MAX
            },
        ]
    );
    assert_eq!(losses.len(), 1);
    assert_eq!(
        (
            losses[0].record_offset,
            losses[0].cpu,
            losses[0].time,
            losses[0].aux
        ),
        (offsets[4], Some(0), Some(99), lost)
    );
}

#[test]
fn a_buffers_zero_padding_that_the_next_buffer_starts_inside_is_not_trace() {
    // perf pads an AUXTRACE buffer's data to 8 bytes with zeros and starts the next buffer
    // where the data ended: those zeros are dropped, silently. Bytes the next buffer
    // starts inside that are not such padding (not zeros, or 8 or more) stay an overlap.
    use tracemill_datasets::perf_data::{intel_pt_attrs, PerfDataWriter};
    use tracemill_perfdata::aux::{aux_queues, AuxIssue};
    use tracemill_perfdata::record::Auxtrace;

    let (r, _) = small();
    let mut padded = [0x55u8; 16];
    padded[13..].fill(0);
    let (b66, zeros) = ([0x66u8; 16], [0u8; 16]);
    let mut wr = PerfDataWriter::new(intel_pt_attrs(&r)).unwrap();
    // 13 bytes and 3 of padding; 16 at 13; 16 at 27 (inside the last one's own bytes);
    // 16 zeros at 43, then 16 at 51 (8 zeros inside: too many to be padding).
    for (offset, data) in [
        (0, &padded),
        (13, &b66),
        (27, &b66),
        (43, &zeros),
        (51, &b66),
    ] {
        let buf = Record::Auxtrace(Auxtrace {
            size: 16,
            offset,
            reference: 0,
            idx: 0,
            tid: u32::MAX,
            cpu: 0,
            data,
        });
        wr.push(0, &buf, &SampleId::default()).unwrap();
    }
    let file = wr.finish();
    let p = PerfData::parse(&file).unwrap();
    let offsets: Vec<u64> = p.records().map(|i| i.unwrap().offset).collect();
    let (queues, _) = aux_queues(&p).unwrap();
    let q = &queues[0];
    assert_eq!(q.buffers[0].data, &padded[..13]);
    assert_eq!(
        q.buffers.iter().map(|b| b.data.len()).collect::<Vec<_>>(),
        [13, 16, 16, 16, 16]
    );
    assert_eq!(
        q.issues,
        [
            AuxIssue::Overlap {
                record_offset: offsets[2],
                offset: 27,
                prev_end: 29
            },
            AuxIssue::Overlap {
                record_offset: offsets[4],
                offset: 51,
                prev_end: 59
            },
        ]
    );
}

#[test]
fn lengths_that_claim_more_than_the_file_are_refused_before_allocating() {
    let (_, w) = small();
    let p = PerfData::parse(&w.bytes).unwrap();
    let aux_at = p
        .records()
        .map(|i| i.unwrap())
        .find(|i| matches!(i.record, Record::Auxtrace(_)))
        .unwrap()
        .offset as usize;
    // AUXTRACE data of 1 TiB.
    let mut b = w.bytes.clone();
    b[aux_at + 8..aux_at + 16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let p = PerfData::parse(&b).unwrap();
    let e = p.records().find_map(|r| r.err()).unwrap();
    assert_eq!(e.offset(), aux_at as u64);
    assert!(
        e.to_string()
            .contains("AUXTRACE record's data needs 1099511627776 bytes"),
        "{e}"
    );
    // The header's data size was written: what follows is not its data, and no record
    // gives it as such.
    assert!(p.records().all(|r| match r {
        Ok(i) => !matches!(&i.record, Record::Auxtrace(a) if a.size == 1 << 40),
        Err(_) => true,
    }));
    // An attr's ids section of 2^60 bytes.
    let mut b = w.bytes.clone();
    let ids_size_at = 104 + 128 + 8;
    b[ids_size_at..ids_size_at + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let e = PerfData::parse(&b).unwrap_err();
    assert_eq!(e.offset(), 104 + 128);
    // A record size below its header ends the walk there.
    let mut b = w.bytes.clone();
    b[aux_at + 6] = 4;
    b[aux_at + 7] = 0;
    let p = PerfData::parse(&b).unwrap();
    let e = p.records().find_map(|r| r.err()).unwrap();
    assert_eq!(e.offset(), aux_at as u64 + 6);
    assert_eq!(p.records().filter(|r| r.is_err()).count(), 1);
}

fn perf() -> Option<PathBuf> {
    let ok = Command::new("perf")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then(|| PathBuf::from("perf"))
}

fn run(perf: &Path, args: &[&str], file: &Path) -> (String, String) {
    let out = Command::new(perf)
        .args(args)
        .arg("-i")
        .arg(file)
        .output()
        .expect("perf runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "perf {args:?} refused {}:\n{stderr}\n{stdout}",
        file.display()
    );
    (stdout, stderr)
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// The value at the end of the first line of `text` that contains `label`.
fn field<'t>(text: &'t str, label: &str) -> &'t str {
    let line = text
        .lines()
        .find(|l| l.contains(label))
        .unwrap_or_else(|| panic!("no {label:?} line"));
    line.split_whitespace().last().unwrap()
}

/// perf's `secs.usecs:` of a perf time.
fn perf_secs(ns: u64) -> String {
    format!("{}.{:06}:", ns / 1_000_000_000, ns % 1_000_000_000 / 1000)
}

/// What `perf script --show-task-events --show-switch-events --show-mmap-events` prints
/// for a sideband record (after the command, tid, [cpu] and time), `None` for the others.
fn perf_line(rec: &Record<'_>) -> Option<String> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Some(match rec {
        Record::Comm(c) => format!(
            "PERF_RECORD_COMM{}: {}:{}/{}",
            if c.exec { " exec" } else { "" },
            text(c.comm),
            c.pid,
            c.tid
        ),
        Record::Mmap2(m) => {
            let tracemill_perfdata::record::Mmap2File::BuildId(id) = m.file else {
                return None;
            };
            format!(
                "PERF_RECORD_MMAP2 {}/{}: [{:#x}({:#x}) @ {:#x} <{}>]: r-xp {}",
                m.pid,
                m.tid,
                m.addr,
                m.len,
                m.pgoff,
                id.to_hex(),
                text(m.filename)
            )
        }
        Record::Fork(t) => format!(
            "PERF_RECORD_FORK({}:{}):({}:{})",
            t.pid, t.tid, t.ppid, t.ptid
        ),
        Record::Exit(t) => format!(
            "PERF_RECORD_EXIT({}:{}):({}:{})",
            t.pid, t.tid, t.ppid, t.ptid
        ),
        Record::Switch(sw) => {
            let (pid, tid) = sw.next_prev?;
            let dir = if sw.out { "OUT next" } else { "IN prev" };
            format!("PERF_RECORD_SWITCH_CPU_WIDE {dir} pid/tid: {pid}/{tid}")
        }
        _ => return None,
    })
}

#[test]
fn perf_accepts_the_files_and_lists_the_same_events() {
    let Some(perf) = perf() else {
        common::missing_tool("perf is not installed (Debian: apt-get install linux-perf)");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("TRACEMILL_KEEP_PERF_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir).unwrap();
    for (name, pt_len) in [("small.data", 0), ("64k.data", 64 << 10)] {
        let r = recording(pt_len);
        let w = intel_pt_two_threads(&r).unwrap();
        let file = write(&dir, name, &w.bytes);

        // The dump: AUXTRACE_INFO and TIME_CONV as perf reads them, every AUXTRACE record
        // with its size, and the AUX data where the record says (its packets).
        let (dump, _) = run(&perf, &["script", "-f", "-D"], &file);
        let info = intel_pt_info(&r);
        assert!(dump.contains("PERF_RECORD_AUXTRACE_INFO type: 1"));
        for (label, want) in [
            ("PMU Type", info.pmu_type.to_string()),
            ("Time Shift", info.time_shift.to_string()),
            ("Time Muliplier", info.time_mult.to_string()),
            ("Time Zero", info.time_zero.to_string()),
            ("TSC bit", format!("{:#x}", info.tsc_bit)),
            ("NoRETComp bit", format!("{:#x}", info.noretcomp_bit)),
            ("Have sched_switch", "2".into()),
            ("Per-cpu maps", "1".into()),
            (
                "MTC freq bits",
                format!("{:#x}", info.mtc.unwrap().mtc_freq_bits),
            ),
            ("TSC:CTC numerator", r.tsc_ctc_ratio.0.to_string()),
            ("TSC:CTC denominator", r.tsc_ctc_ratio.1.to_string()),
            ("Max non-turbo ratio", r.max_nonturbo_ratio.to_string()),
        ] {
            assert_eq!(field(&dump, label), want, "{name}: {label}");
        }
        assert!(dump.contains("PERF_RECORD_TIME_CONV"));
        let mut auxtraces = 0;
        let written = w.records();
        for (_, rec, _) in &written {
            let Record::Auxtrace(a) = rec else { continue };
            auxtraces += 1;
            let line = format!(
                "PERF_RECORD_AUXTRACE size: {:#x}  offset: {}  ref: {:#x}  idx: {}  tid: -1  cpu: {}",
                a.size, a.offset, a.reference, a.idx, a.cpu
            );
            assert!(dump.contains(&line), "{name}: no {line:?}");
            let data = format!("Intel Processor Trace data: size {} bytes", a.size);
            assert!(dump.contains(&data), "{name}: no {data:?}");
        }
        assert_eq!(
            dump.matches(": PERF_RECORD_AUXTRACE size:").count(),
            auxtraces
        );
        for c in &r.cpus {
            let pge = format!("TIP.PGE {:#x}", r.addr + c.cpu as u64 * 0x40);
            assert!(
                dump.contains(&pge),
                "{name}: no {pge:?} in perf's packet dump"
            );
        }

        // The sideband perf lists: the same events, in the same order, on the same
        // threads, CPUs and times.
        let (events, _) = run(
            &perf,
            &[
                "script",
                "-f",
                "--show-task-events",
                "--show-switch-events",
                "--show-mmap-events",
            ],
            &file,
        );
        let got: Vec<&str> = events
            .lines()
            .filter(|l| l.contains("PERF_RECORD_"))
            .collect();
        let want: Vec<(String, &SampleId)> = written
            .iter()
            .filter_map(|(_, rec, sid)| Some((perf_line(rec)?, sid)))
            .collect();
        assert_eq!(got.len(), want.len(), "{name}:\n{events}");
        assert_eq!(
            want.len(),
            10,
            "COMM, MMAP2, FORK, COMM, 4 SWITCH_CPU_WIDE, 2 EXIT"
        );
        for (line, (text, sid)) in got.iter().zip(&want) {
            let tokens: Vec<&str> = line.split_whitespace().collect();
            let prefix = [
                sid.tid.unwrap().to_string(),
                format!("[{:03}]", sid.cpu.unwrap()),
                perf_secs(sid.time.unwrap()),
            ];
            assert_eq!(tokens[1..4], prefix, "{name}: {line}");
            let rest = tokens[4..].join(" ");
            assert_eq!(rest, *text, "{name}: {line}");
        }

        // The trace itself: one `psb` sample per PSB, on the thread the switch records
        // put on that CPU at that TSC (TIME_CONV, ITRACE_START, SWITCH_CPU_WIDE agree).
        let psb_lines: Vec<&str> = events.lines().filter(|l| l.contains(" psb: ")).collect();
        for c in &r.cpus {
            let psbs = c.pt.windows(2).filter(|w| w == &[0x02, 0x82]).count() / 8;
            let here = format!("{} [{:03}]", c.tid, c.cpu);
            let n = psb_lines.iter().filter(|l| l.contains(&here)).count();
            assert_eq!(n, psbs, "{name}: psb samples on CPU {}", c.cpu);
        }
        assert_eq!(
            psb_lines.len(),
            r.cpus
                .iter()
                .map(|c| c.pt.windows(2).filter(|w| w == &[0x02, 0x82]).count() / 8)
                .sum::<usize>()
        );

        // The build-id table and the event names, as perf lists them.
        let (ids, _) = run(&perf, &["buildid-list", "-f"], &file);
        let want = format!(
            "{} {}",
            r.build_id.to_hex(),
            String::from_utf8_lossy(&r.path)
        );
        assert_eq!(ids.trim(), want, "{name}");
        let (evlist, _) = run(&perf, &["evlist", "-f"], &file);
        assert_eq!(
            evlist.lines().collect::<Vec<_>>(),
            ["intel_pt//u", "dummy:u"],
            "{name}"
        );

        let (report, _) = run(&perf, &["report", "-f", "--stdio"], &file);
        assert!(report.contains("of event 'psb'"), "{name}:\n{report}");

        // perf's own pipe mode (`perf inject -o -`): the same attributes, records and
        // AUX data, read through HEADER_ATTR and HEADER_FEATURE records.
        let out = Command::new(&perf)
            .args(["inject", "-f", "-i"])
            .arg(&file)
            .args(["-o", "-"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "perf inject: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let p = PerfData::parse(&out.stdout).unwrap();
        let f = PerfData::parse(&w.bytes).unwrap();
        assert!(p.is_pipe());
        assert_eq!(p.attrs().len(), 2);
        for (a, b) in p.attrs().iter().zip(f.attrs()) {
            assert_eq!(
                (a.attr.kind, a.attr.config, a.attr.sample_type, &a.ids),
                (b.attr.kind, b.attr.config, b.attr.sample_type, &b.ids)
            );
        }
        let keep = |i: &tracemill_perfdata::Item<'_>| {
            !matches!(i.record, Record::Other { kind: 64 | 80, .. })
        };
        let injected: Vec<_> = p
            .records()
            .map(|i| i.unwrap())
            .filter(keep)
            .map(|i| (i.record, i.sample_id))
            .collect();
        let ours: Vec<_> = f
            .records()
            .map(|i| i.unwrap())
            .map(|i| (i.record, i.sample_id))
            .collect();
        assert_eq!(injected, ours, "{name}: perf inject's pipe");
        // perf inject describes the machine it runs on (hostname, osrelease, version, arch,
        // PMUs) and writes the events' names itself (its own encoding of them).
        let ids: Vec<u32> = p.features().unwrap().iter().map(|f| f.id).collect();
        assert_eq!(
            ids,
            [
                feature::HOSTNAME,
                feature::OSRELEASE,
                feature::VERSION,
                feature::ARCH,
                feature::EVENT_DESC,
                feature::PMU_MAPPINGS
            ]
        );
        assert_eq!(p.event_desc().unwrap(), f.event_desc().unwrap(), "{name}");
        // (The PMUs are the local machine's, as its hostname is.)
        assert!(
            p.pmu_mappings().unwrap().contains(&(1, &b"software"[..])),
            "{name}"
        );
        assert!(p
            .string_feature(feature::VERSION)
            .unwrap()
            .is_some_and(|v| v.starts_with(b"6.")));
    }
}

/// perf's name of a record type in `perf script -D` (`PERF_RECORD_<name>`).
fn perf_record_name(kind: u32) -> Option<&'static str> {
    Some(match kind {
        1 => "MMAP",
        2 => "LOST",
        3 => "COMM",
        4 => "EXIT",
        7 => "FORK",
        9 => "SAMPLE",
        10 => "MMAP2",
        11 => "AUX",
        12 => "ITRACE_START",
        13 => "LOST_SAMPLES",
        14 => "SWITCH",
        15 => "SWITCH_CPU_WIDE",
        17 => "KSYMBOL",
        18 => "BPF_EVENT",
        68 => "FINISHED_ROUND",
        69 => "ID_INDEX",
        70 => "AUXTRACE_INFO",
        71 => "AUXTRACE",
        73 => "THREAD_MAP",
        74 => "CPU_MAP",
        78 => "EVENT_UPDATE",
        79 => "TIME_CONV",
        82 => "FINISHED_INIT",
        _ => return None,
    })
}

/// `(offset, size, name, time)` of every record `perf script -D` lists (time 0 for
/// perf's own records and records without a time).
fn perf_dump_records(dump: &str) -> Vec<(u64, u64, String, u64)> {
    let mut out = Vec::new();
    for line in dump.lines() {
        let t: Vec<&str> = line.split_whitespace().collect();
        let Some(i) = t.iter().position(|w| w.starts_with("PERF_RECORD_")) else {
            continue;
        };
        if i < 2 || !t[i - 2].starts_with("0x") || !t[i - 1].starts_with("[0x") {
            continue;
        }
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        let size = hex(t[i - 1].trim_start_matches('[').trim_end_matches("]:"));
        let name: String = t[i]["PERF_RECORD_".len()..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        let time = if i >= 3 {
            t[i - 3].parse().unwrap_or(0)
        } else {
            0
        };
        out.push((hex(t[i - 2]), size, name, time));
    }
    out.sort();
    out
}

/// `perf record` (with `extra` options) of a shell loop into `file`, with software events
/// (this machine has no Intel PT): false, said, where the kernel refuses it
/// (perf_event_paranoid, a container's seccomp: the machine's choice, not a tool missing).
fn perf_record(perf: &Path, file: &Path, extra: &[&str]) -> bool {
    let rec = Command::new(perf)
        .args(["record", "-q"])
        .args(extra)
        .args(["-e", "task-clock", "-c", "100000", "--switch-events", "-o"])
        .arg(file)
        .args([
            "--",
            "/bin/sh",
            "-c",
            "i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done; ls / >/dev/null",
        ])
        .output()
        .unwrap();
    if !rec.status.success() {
        eprintln!(
            "SKIPPED: perf record is refused here: {}",
            String::from_utf8_lossy(&rec.stderr)
        );
    }
    rec.status.success()
}

/// A perf.data that perf itself records here (software events: this machine has no Intel
/// PT): every record at the offset, size and type perf lists, with perf's times; the
/// build-ids, event names and string features as perf reports them.
#[test]
fn files_perf_records_read_as_perf_reads_them() {
    let Some(perf) = perf() else {
        common::missing_tool("perf is not installed (Debian: apt-get install linux-perf)");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("recorded.data");
    if !perf_record(&perf, &file, &[]) {
        return;
    }
    let bytes = std::fs::read(&file).unwrap();
    let p = PerfData::parse(&bytes).unwrap();
    let items: Vec<_> = p.records().collect::<Result<_, _>>().unwrap();
    let (dump, _) = run(&perf, &["script", "-f", "-D"], &file);
    let theirs = perf_dump_records(&dump);
    let mut ours: Vec<(u64, u64, String, u64)> = Vec::new();
    let mut sizes = items.iter().map(|i| i.offset).collect::<Vec<_>>();
    sizes.push(p.header().data.offset + p.header().data.size);
    for (n, i) in items.iter().enumerate() {
        let Some(name) = perf_record_name(i.record.kind()) else {
            continue;
        };
        let size = match &i.record {
            Record::Auxtrace(a) => sizes[n + 1] - i.offset - a.size,
            _ => sizes[n + 1] - i.offset,
        };
        ours.push((
            i.offset,
            size,
            name.to_owned(),
            i.sample_id.time.unwrap_or(0),
        ));
    }
    ours.sort();
    assert!(ours.iter().any(|r| r.2 == "SAMPLE"), "no samples recorded");
    assert!(ours.iter().any(|r| r.2 == "MMAP2"));
    assert_eq!(ours, theirs, "records as perf script -D lists them");

    let (ids, _) = run(&perf, &["buildid-list", "-f"], &file);
    let theirs: Vec<String> = ids.lines().map(str::to_owned).collect();
    let ours: Vec<String> = p
        .build_ids()
        .unwrap()
        .iter()
        .map(|b| {
            format!(
                "{} {}",
                b.build_id.to_hex(),
                String::from_utf8_lossy(b.filename)
            )
        })
        .collect();
    assert_eq!(ours, theirs);
    let (evlist, _) = run(&perf, &["evlist", "-f"], &file);
    let names: Vec<String> = p
        .event_desc()
        .unwrap()
        .iter()
        .map(|d| String::from_utf8_lossy(d.name).into_owned())
        .collect();
    assert_eq!(names, evlist.lines().collect::<Vec<_>>());
    let (header, _) = run(&perf, &["report", "-f", "--header-only"], &file);
    for (label, id) in [
        ("# hostname : ", feature::HOSTNAME),
        ("# os release : ", feature::OSRELEASE),
        ("# arch : ", feature::ARCH),
    ] {
        let theirs = header.lines().find_map(|l| l.strip_prefix(label)).unwrap();
        let ours = p.string_feature(id).unwrap().unwrap();
        assert_eq!(String::from_utf8_lossy(ours), theirs, "{label}");
    }
}

/// `perf record -z` here (software events): the records inside its COMPRESSED records are
/// those `perf script -D` lists, at the compressed record's offset, with perf's times.
#[test]
fn compressed_files_perf_records_read_as_perf_reads_them() {
    let Some(perf) = perf() else {
        common::missing_tool("perf is not installed (Debian: apt-get install linux-perf)");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("z.data");
    if !perf_record(&perf, &file, &["-z"]) {
        return;
    }
    let bytes = std::fs::read(&file).unwrap();
    let p = PerfData::parse(&bytes).unwrap();
    let mut ours: Vec<(u64, String, u64)> = Vec::new();
    let mut compressed = 0;
    p.for_each_record(|i| {
        let i = i.unwrap();
        if let Some(name) = perf_record_name(i.record.kind()) {
            ours.push((i.offset, name.to_owned(), i.sample_id.time.unwrap_or(0)));
        }
    });
    for i in p.records() {
        compressed += (i.unwrap().record.kind() == kind::COMPRESSED) as usize;
    }
    assert!(compressed > 0, "perf record -z wrote no COMPRESSED record");
    ours.sort();
    let (dump, _) = run(&perf, &["script", "-f", "-D"], &file);
    let mut theirs: Vec<(u64, String, u64)> = perf_dump_records(&dump)
        .into_iter()
        .map(|(o, _, n, t)| (o, n, t))
        .collect();
    theirs.sort();
    assert!(ours.iter().any(|r| r.1 == "MMAP2" || r.1 == "MMAP"));
    assert!(ours.iter().any(|r| r.1 == "SAMPLE"), "no samples recorded");
    assert!(
        ours == theirs,
        "records as perf script -D lists them: {} against {}",
        ours.len(),
        theirs.len()
    );
}
