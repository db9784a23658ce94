//! Intel PT recorded by real processors (`datasets/fixtures/pt-hardware/`, each with its
//! origin and licence), decoded by `tracemill decode` to the instructions the project
//! that recorded it expects.
//!
//! A decode's rows are turned back into instructions by walking the code: a row stands
//! for every instruction from where execution was (the IP of the last `enable`, or where
//! the previous row went) up to and including its branch, and its `insns` must be the
//! number of instructions that walk meets.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::Array;
use object::{Object, ObjectSegment};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tracemill_decode::insn::{decode_insn, InsnClass};
use tracemill_decode::rows::BranchColumns;
use tracemill_schemas::BranchKind;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/fixtures/pt-hardware")
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 paths in tests")
}

/// One `events` row: what the instruction walk needs of it.
struct Event {
    seq: u64,
    kind: String,
    ip: Option<u64>,
}

fn read_events(path: &Path) -> Vec<Event> {
    let r = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap())
        .unwrap()
        .build()
        .unwrap();
    let mut out = Vec::new();
    for b in r {
        let b = b.unwrap();
        let seq = b
            .column_by_name("seq")
            .unwrap()
            .as_primitive::<UInt64Type>();
        let ip = b.column_by_name("ip").unwrap().as_primitive::<UInt64Type>();
        let kind = b.column_by_name("kind").unwrap();
        let kind = tracemill_sinks::convert::strings(kind.as_ref()).unwrap();
        for i in 0..b.num_rows() {
            out.push(Event {
                seq: seq.value(i),
                kind: kind.value(i).to_string(),
                ip: ip.is_valid(i).then(|| ip.value(i)),
            });
        }
    }
    out
}

/// The loadable segments of an ELF at their own addresses, and its entry point.
struct Elf {
    segments: Vec<(u64, Vec<u8>)>,
    entry: u64,
}

impl Elf {
    fn open(path: &Path) -> Elf {
        let bytes = std::fs::read(path).unwrap();
        let elf = object::File::parse(&*bytes).unwrap();
        let segments = elf
            .segments()
            .map(|s| (s.address(), s.data().unwrap().to_vec()))
            .collect();
        Elf {
            segments,
            entry: elf.entry(),
        }
    }

    /// The bytes from `ip` to the end of its segment.
    fn at(&self, ip: u64) -> &[u8] {
        self.segments
            .iter()
            .find(|(a, d)| (*a..*a + d.len() as u64).contains(&ip))
            .map(|(a, d)| &d[(ip - a) as usize..])
            .unwrap_or_else(|| panic!("no code at {ip:#x}"))
    }

    fn class(&self, ip: u64) -> InsnClass {
        decode_insn(self.at(ip), ip).unwrap().class
    }
}

/// The instructions the rows and events of a decode stand for, in execution order (see
/// the module doc). Panics where a row's `insns` disagrees with the code, or a row comes
/// where the walk does not know where execution is.
fn instructions(rows: &BranchColumns, events: &[Event], code: &Elf) -> Vec<u64> {
    let mut out = Vec::new();
    let mut at: Option<u64> = None;
    let mut ev = events.iter().peekable();
    for i in 0..rows.len() {
        let row = rows.row(i);
        // Events with `seq` i come before row i.
        while let Some(e) = ev.next_if(|e| e.seq <= i as u64) {
            match e.kind.as_str() {
                "enable" => at = e.ip,
                "disable" => at = None,
                _ => {}
            }
        }
        let mut ip = at.unwrap_or_else(|| panic!("row {i} at {:#x}: no start", row.ip));
        let mut n = 0;
        loop {
            out.push(ip);
            n += 1;
            let insn = decode_insn(code.at(ip), ip).unwrap();
            if ip == row.ip {
                at = if row.taken {
                    row.target
                } else {
                    Some(insn.nlip())
                };
                break;
            }
            assert!(
                !insn.class.is_branch() && n < row.insns,
                "row {i} ({:#x}, {} instructions): the code from {:#x} branches at {ip:#x}",
                row.ip,
                row.insns,
                out[out.len() - n as usize]
            );
            ip = insn.nlip();
        }
        assert_eq!(n, row.insns, "row {i} at {:#x}", row.ip);
    }
    out
}

/// drpt2trace's expected output (`test_simple.templatex`): each instruction's offset from
/// the first, whether it is a `syscall`, and the count it states.
fn templatex(path: &Path) -> (Vec<(u64, bool)>, u64) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut insns = Vec::new();
    let mut count = None;
    for line in text.lines() {
        if let Some(rest) = line.trim_start().strip_prefix("\\+") {
            let off = rest.split_whitespace().next().unwrap().parse().unwrap();
            insns.push((off, line.contains(" syscall ")));
        } else if let Some(n) = line.strip_prefix("Number of Instructions: ") {
            count = Some(n.trim().parse().unwrap());
        }
    }
    (insns, count.expect("the template states its count"))
}

#[test]
fn dynamorio_hello_decodes_as_a_bundle_to_its_eight_instructions() {
    let dir = fixtures().join("dynamorio-hello");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    common::ok(&["decode", s(&dir), "--out", s(&out), "-j", "1"]);
    let rows = common::read_branches(&out.join("branches.parquet"));
    let events = read_events(&out.join("events.parquet"));
    let code = Elf::open(&dir.join("hello"));

    let (expected, count) = templatex(&dir.join("test_simple.templatex"));
    assert_eq!(expected.len() as u64, count);
    // The template's offsets are from the first instruction: `_start`, the ELF's entry,
    // where the trace's first TIP.PGE enables tracing.
    let expected_ips: Vec<u64> = expected.iter().map(|(o, _)| code.entry + o).collect();
    let got = instructions(&rows, &events, &code);
    assert_eq!(got, expected_ips, "the instructions the rows stand for");
    let total: u64 = (0..rows.len()).map(|i| rows.row(i).insns as u64).sum();
    assert_eq!(total, count, "SUM(insns)");

    // The template's `syscall`s are the code's, and they are the rows: user-only tracing
    // stops at each (TIP.PGD) and resumes after it.
    for (ip, (_, syscall)) in expected_ips.iter().zip(&expected) {
        assert_eq!(code.class(*ip) == InsnClass::Syscall, *syscall, "{ip:#x}");
    }
    let syscalls: Vec<u64> = expected_ips
        .iter()
        .zip(&expected)
        .filter(|(_, (_, sc))| *sc)
        .map(|(ip, _)| *ip)
        .collect();
    let row_ips: Vec<u64> = (0..rows.len()).map(|i| rows.row(i).ip).collect();
    assert_eq!(row_ips, syscalls);
    assert!((0..rows.len()).all(|i| rows.row(i).kind == BranchKind::Syscall));
    // The first enable is at `_start`, and an interrupt (the FUP + TIP.PGD at 0x557, a
    // page fault on the first fetch) stops tracing before it retires: it is enabled
    // again at `_start`.
    let enables: Vec<Option<u64>> = events
        .iter()
        .filter(|e| e.kind == "enable")
        .map(|e| e.ip)
        .collect();
    assert_eq!(
        enables,
        vec![Some(code.entry), Some(code.entry), Some(syscalls[0] + 2)]
    );
    assert!(!events.iter().any(|e| e.kind == "error"));

    // libipt's ptxed on the same trace (`ptxed.txt`, the command in the README): the same
    // instructions; each syscall's row has the time of ptxed's `disabled` event after it
    // (the CYC before its TIP.PGD), and ptxed's instructions, timed when tracing
    // resumed, are not later than their row.
    let ptxed = std::fs::read_to_string(dir.join("ptxed.txt")).unwrap();
    let hex = |w: &str| u64::from_str_radix(w, 16).unwrap();
    let mut insns: Vec<(u64, u64)> = Vec::new();
    let mut disabled: Vec<(usize, u64)> = Vec::new();
    for line in ptxed.lines() {
        if let Some(ev) = line.strip_prefix('[') {
            let mut w = ev.trim_end_matches(']').split_whitespace();
            let time = hex(w.next().unwrap());
            if w.next() == Some("disabled") {
                disabled.push((insns.len(), time));
            }
        } else {
            let mut w = line.split_whitespace();
            insns.push((hex(w.next().unwrap()), hex(w.next().unwrap())));
        }
    }
    assert_eq!(
        insns.iter().map(|i| i.1).collect::<Vec<_>>(),
        got,
        "ptxed's instructions"
    );
    let mut end = 0;
    for i in 0..rows.len() {
        let r = rows.row(i);
        end += r.insns as usize;
        let tsc = r.tsc.expect("the trace has timing packets");
        let after = disabled
            .iter()
            .find(|d| d.0 == end)
            .expect("a disable after it");
        assert_eq!(tsc, after.1, "row {i}: ptxed's disabled event");
        assert!(insns[end - r.insns as usize..end]
            .iter()
            .all(|x| x.0 <= tsc));
    }
}

/// DynamoRIO's `hello` recording as the perf.data it was cut from, as far as its files
/// allow: the sideband records as recorded (`secondary.sideband.pevent`, perf's own
/// TIME_CONV, ID_INDEX, THREAD_MAP, CPU_MAP and COMM; `primary.sideband.pevent`, CPU 9's
/// kernel records), the trace as CPU 9's AUXTRACE buffer. What the files do not hold is
/// made from what DynamoRIO's test says of the recording (README.md): the attributes
/// (`intel_pt//u` with the ids ID_INDEX gives it, perf's `dummy:u`, the trailer layout
/// of the records: TID, TIME, CPU, IDENTIFIER), AUXTRACE_INFO (TIME_CONV's conversion,
/// MTC frequency, CPUID.15H, nominal ratio, per-CPU buffers) and HEADER_CPUID.
fn hello_perf_data(dir: &Path) -> Vec<u8> {
    use tracemill_datasets::perf_data::{
        perf_intel_pt_attrs, perf_intel_pt_info, pt_format, PerfDataWriter,
    };
    use tracemill_perfdata::attr::sample;
    use tracemill_perfdata::header::feature;
    use tracemill_perfdata::intel_pt::PerfClock;
    use tracemill_perfdata::record::{Auxtrace, AuxtraceInfo, AUXTRACE_INTEL_PT};
    use tracemill_perfdata::{Record, SampleId};

    // Not in the files: the intel_pt PMU's type on the recording machine (any type
    // AUXTRACE_INFO names too will do).
    const PMU: u32 = 8;
    // The records' trailers: 32 bytes of TID, TIME, CPU, IDENTIFIER (the sideband's
    // sample_type, 0x10086); perf's samples have the IP too, which no trailer holds.
    let sample_type = sample::IP | sample::TID | sample::TIME | sample::CPU | sample::IDENTIFIER;
    // The trace has TSC, MTC (MTCFreq 3) and CYC packets.
    let config = 1
        | pt_format::CYC
        | pt_format::MTC
        | pt_format::TSC
        | pt_format::BRANCH
        | (3 << pt_format::MTC_PERIOD.trailing_zeros());
    // ID_INDEX: ids 0x35c.. for CPUs 0 to 11, then 0x368.. (CPU 9's ITRACE_START and AUX
    // carry 0x365: the first are intel_pt's).
    let ids = |first: u64| (first..first + 12).collect::<Vec<u64>>();
    let attrs = perf_intel_pt_attrs(PMU, config, sample_type, [ids(0x35c), ids(0x368)]);
    // TIME_CONV's conversion (as in secondary.sideband.pevent), CPUID.15H, nominal ratio.
    let clock = PerfClock {
        time_shift: 31,
        time_mult: 581_029_125,
        time_zero: 18_444_502_336_406_842_448,
        short: None,
    };
    let info = perf_intel_pt_info(PMU, &clock, (308, 2), 37);
    let private = info.to_private();
    let pt = std::fs::read(dir.join("pt.bin")).unwrap();
    let mut w = PerfDataWriter::new(attrs).unwrap();
    let none = SampleId::default();
    let auxtrace_info = Record::AuxtraceInfo(AuxtraceInfo {
        kind: AUXTRACE_INTEL_PT,
        private: &private,
    });
    w.push(0, &auxtrace_info, &none).unwrap();
    w.push_raw(&std::fs::read(dir.join("secondary.sideband.pevent")).unwrap())
        .unwrap();
    w.push_raw(&std::fs::read(dir.join("primary.sideband.pevent")).unwrap())
        .unwrap();
    let auxtrace = Record::Auxtrace(Auxtrace {
        size: pt.len() as u64,
        offset: 0,
        reference: 0,
        idx: 9,
        tid: u32::MAX,
        cpu: 9,
        data: &pt,
    });
    w.push(0, &auxtrace, &none).unwrap();
    w.set_event_names(&["intel_pt//u", "dummy:u"]);
    w.add_pmu(PMU, "intel_pt");
    w.add_string(feature::CPUID, "GenuineIntel,6,85,4");
    w.finish()
}

#[test]
fn dynamorio_hello_decodes_as_perf_data_to_the_bundles_rows_on_its_thread() {
    let dir = fixtures().join("dynamorio-hello");
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("perf.data");
    std::fs::write(&file, hello_perf_data(&dir)).unwrap();
    let bundle = tmp.path().join("bundle");
    common::ok(&["decode", s(&dir), "--out", s(&bundle), "-j", "1"]);
    // The MMAP2 names `/hello`: found under --symfs.
    let perf = tmp.path().join("perf");
    let o = common::ok(&[
        "decode",
        s(&file),
        "--out",
        s(&perf),
        "--symfs",
        s(&dir),
        "-j",
        "1",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("/hello"), "the binary was found: {err}");
    let want = common::read_branches(&bundle.join("branches.parquet"));
    let got = common::read_branches(&perf.join("branches.parquet"));
    assert_eq!(
        got, want,
        "the bundle's rows (its cpu, errata and clock facts)"
    );
    // Each row on the thread the sideband's switch records put on CPU 9: hello, 223991.
    let r = ParquetRecordBatchReaderBuilder::try_new(
        File::open(perf.join("branches.parquet")).unwrap(),
    )
    .unwrap()
    .build()
    .unwrap();
    let mut n = 0;
    for b in r {
        let b = b.unwrap();
        let col = |name: &str| {
            b.column_by_name(name)
                .unwrap()
                .as_primitive::<UInt32Type>()
                .clone()
        };
        let (cpu, pid, tid) = (col("cpu"), col("pid"), col("tid"));
        for i in 0..b.num_rows() {
            assert_eq!(
                (cpu.value(i), pid.value(i), tid.value(i)),
                (9, 223_991, 223_991)
            );
            n += 1;
        }
    }
    assert_eq!(n, 2);
}
