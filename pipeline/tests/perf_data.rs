//! perf.data recordings of Intel PT through `tracemill decode`, checked against the truth
//! of the executions and against perf itself.
//!
//! This machine cannot record Intel PT, so the recordings are made: busybox `sort` runs
//! under qemu, its executions are encoded as Intel PT by the generator (with a TSC in every
//! PSB+), and the perf.data writer lays them out as `perf record -e intel_pt//u` does with
//! per-CPU buffers: process 4242 with threads 4242 and 4243; CPU 0 runs thread 4242 (the
//! first execution) and then thread 4243 (the second), CPU 1 runs thread 4243 (the first
//! execution again), each between its context-switch records.
//!
//! - `tracemill decode` writes every CPU's rows in turn, each row with its CPU, process,
//!   thread and perf time: the rows are the truth of each execution in order, on the
//!   thread the switch records put there; `-j1` and `-j2` with the smallest chunks write
//!   the same bytes.
//! - Debian's `perf script --itrace=b` decodes the same file to the same taken branches
//!   (from, to, thread, CPU) as tracemill.
//! - Eight CPUs with a thread that migrates between them: each stretch on its CPU and
//!   thread, and perf agrees.
//! - Bad files: no AUX data, another PMU's AUX data, a file cut in the middle of a record,
//!   a binary missing: messages that name the record's offset or the path, and every row
//!   that can still be proved.

use std::path::Path;
use std::process::Command;

mod common;
use common::{real_program_tools, sort_input, BUSYBOX};

use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::Array;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use tracemill_datasets::exec::qemu;
use tracemill_datasets::perf_data::{
    intel_pt_two_threads, intel_pt_two_threads_pipe, kcore_copy, CpuStream, PtExec, PtImage,
    PtProcess, PtRecording,
};
use tracemill_datasets::pt_encode::{encode_execution, PtOptions, PtTsc};
use tracemill_decode::image::ImageSet;

const PID: u32 = 4242;

/// One execution's rows as the truth has them: (ip, taken, target, insns, offset).
type Row = (u64, bool, Option<u64>, u32, u64);

struct Encoded {
    pt: Vec<u8>,
    truth: Vec<Row>,
    instructions: u64,
}

/// busybox `sort ARGS` of `lines` numbers under qemu, encoded as Intel PT with TSC packets
/// from `tsc` on (one tick per instruction).
fn sort_execution(args: &[&str], lines: usize, seed: u32, tsc: u64) -> Encoded {
    timed_sort(args, lines, seed, Some(tsc))
}

/// [`sort_execution`], with TSC packets from `tsc` on, or none (`tsc=0`).
fn timed_sort(args: &[&str], lines: usize, seed: u32, tsc: Option<u64>) -> Encoded {
    let input = sort_input(lines, seed);
    let mut argv = vec!["sort"];
    argv.extend(args);
    timed_execution(Path::new(BUSYBOX), &argv, input.as_bytes(), tsc)
}

/// The static program `program` run with `argv` (its `argv[0]` included) and `stdin` under
/// qemu, encoded as Intel PT with TSC packets from `tsc` on (one tick per instruction).
fn execution(program: &Path, argv: &[&str], stdin: &[u8], tsc: u64) -> Encoded {
    timed_execution(program, argv, stdin, Some(tsc))
}

/// [`execution`], with TSC packets from `tsc` on, or none (`tsc=0`).
fn timed_execution(program: &Path, argv: &[&str], stdin: &[u8], tsc: Option<u64>) -> Encoded {
    let o = PtOptions {
        tsc: tsc.map(|start| PtTsc { start, per_insn: 1 }),
        ..PtOptions::default()
    };
    encoded_execution(program, argv, stdin, &o)
}

/// The static program `program` run with `argv` and `stdin` under qemu, encoded as Intel
/// PT with the options `o`.
fn encoded_execution(program: &Path, argv: &[&str], stdin: &[u8], o: &PtOptions) -> Encoded {
    let cap = qemu::trace(program, argv, stdin).unwrap();
    assert_eq!(cap.exit_code, Some(0));
    let exec = cap.execution;
    let elf = exec.images[0].1.clone();
    let mut images = ImageSet::new();
    images.add_elf("program", &elf, None, None).unwrap();
    let out = encode_execution(&images, o, exec.entry, exec.steps.iter().copied());
    let t = out.truth.provable();
    let truth = (0..t.len())
        .map(|i| {
            (
                t.ip[i],
                t.taken[i],
                t.target.get(i),
                t.insns[i],
                t.offset[i],
            )
        })
        .collect();
    Encoded {
        pt: out.bytes,
        truth,
        instructions: out.summary.instructions,
    }
}

/// The recording and, per CPU, its stretches with their truth.
struct Made {
    recording: PtRecording,
    file: Vec<u8>,
    /// Per CPU (0, 1): its stretches in order: thread, truth rows, AUX offset of the stretch.
    cpus: Vec<CpuTruth>,
}

/// A CPU's stretches in order: thread, truth rows, AUX offset of the stretch.
type CpuTruth = Vec<(u32, Vec<Row>, u64)>;

/// busybox `sort` per `plan` entry (cpu, thread, sort args, lines, seed), one after the
/// other in time on the CPU and thread given, added to `r` as TSC-timed stretches:
/// per CPU (of `cpus`), its stretches with their truth.
fn record_stretches(
    r: &mut PtRecording,
    cpus: usize,
    plan: &[(u32, u32, &[&str], usize, u32)],
) -> Vec<CpuTruth> {
    // TSC, MTC off, branches (perf's intel_pt//u with mtc=0): TSC packets in PSB+ only.
    r.config = 1 | 1 << 10 | 1 << 13;
    let clock = r.clock;
    let tsc_of = |perf_ns: u64| clock.perf_time_to_tsc(perf_ns).unwrap();
    let ns_of = |tsc: u64| clock.tsc_to_perf_time(tsc);
    let mut truth: Vec<CpuTruth> = vec![Vec::new(); cpus];
    let mut aux_end = vec![0u64; cpus];
    let mut at = r.start_time + 100_000;
    for &(cpu, tid, args, lines, seed) in plan {
        let switch_in = at;
        let e = sort_execution(args, lines, seed, tsc_of(switch_in + 1_000));
        let switch_out = ns_of(tsc_of(switch_in + 1_000) + e.instructions) + 1_000;
        let k = cpu as usize;
        truth[k].push((tid, e.truth, aux_end[k]));
        aux_end[k] += e.pt.len().next_multiple_of(8) as u64;
        r.cpus.push(CpuStream {
            cpu,
            tid,
            pt: e.pt,
            switch_in,
            switch_out,
        });
        at = switch_out + 10_000;
    }
    truth
}

fn recording() -> Made {
    let mut r = PtRecording::for_elf(Path::new(BUSYBOX), PID, Vec::new()).unwrap();
    let cpus = record_stretches(
        &mut r,
        2,
        &[
            (0, PID, &["-n"], 300, 11),
            (0, PID + 1, &["-r"], 200, 5),
            (1, PID + 1, &["-n"], 300, 11),
        ],
    );
    let w = intel_pt_two_threads(&r).unwrap();
    Made {
        recording: r,
        file: w.bytes,
        cpus,
    }
}

/// The recording, made once for all the tests (three qemu runs).
fn made() -> &'static Made {
    static MADE: std::sync::OnceLock<Made> = std::sync::OnceLock::new();
    MADE.get_or_init(recording)
}

/// `tracemill decode FILE --out DIR ARGS`, which must succeed: its stderr.
fn decode(file: &Path, out: &Path, extra: &[&str]) -> String {
    let (code, stderr) = try_decode(file, out, extra);
    assert_eq!(code, Some(0), "decode {extra:?}: {stderr}");
    stderr
}

/// A decoded row with its thread columns.
#[derive(Clone, Debug, PartialEq)]
struct Decoded {
    row: Row,
    cpu: Option<u32>,
    pid: Option<u32>,
    tid: Option<u32>,
    tsc: Option<u64>,
    time: Option<u64>,
}

fn read_branches(path: &Path) -> Vec<Decoded> {
    let mut out = Vec::new();
    let r = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap())
        .unwrap()
        .build()
        .unwrap();
    for b in r {
        let b = b.unwrap();
        let col = |n: &str| b.column_by_name(n).unwrap_or_else(|| panic!("{n}")).clone();
        let u64s = |n: &str| col(n).as_primitive::<UInt64Type>().clone();
        let u32s = |n: &str| col(n).as_primitive::<UInt32Type>().clone();
        let (ip, target, offset, tsc, time) = (
            u64s("ip"),
            u64s("target"),
            u64s("offset"),
            u64s("tsc"),
            u64s("time"),
        );
        let (insns, cpu, pid, tid) = (u32s("insns"), u32s("cpu"), u32s("pid"), u32s("tid"));
        let taken = col("taken").as_boolean().clone();
        let opt64 = |a: &arrow_array::UInt64Array, i| a.is_valid(i).then(|| a.value(i));
        let opt32 = |a: &arrow_array::UInt32Array, i| a.is_valid(i).then(|| a.value(i));
        for i in 0..b.num_rows() {
            out.push(Decoded {
                row: (
                    ip.value(i),
                    taken.value(i),
                    opt64(&target, i),
                    insns.value(i),
                    offset.value(i),
                ),
                cpu: opt32(&cpu, i),
                pid: opt32(&pid, i),
                tid: opt32(&tid, i),
                tsc: opt64(&tsc, i),
                time: opt64(&time, i),
            });
        }
    }
    out
}

/// A directory for a test's files: `TRACEMILL_KEEP_PERF_DATA=DIR` keeps the recording and
/// the tables there (`tmp` otherwise).
fn keep_dir(tmp: &tempfile::TempDir) -> std::path::PathBuf {
    let p = std::env::var_os("TRACEMILL_KEEP_PERF_DATA")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// A stretch of a CPU: process, thread, its truth rows, AUX offset where it starts.
type Stretch<'a> = (u32, u32, &'a [Row], u64);

/// `file` decoded into `NAME-j1` with one thread and into `NAME-j2` with two and the
/// smallest chunks, which must write the same bytes in every table: the first's stderr
/// and directory.
fn decode_alike(file: &Path, dir: &Path, name: &str) -> (String, std::path::PathBuf) {
    let (one, two) = (
        dir.join(format!("{name}-j1")),
        dir.join(format!("{name}-j2")),
    );
    let said = decode(file, &one, &["-j", "1"]);
    decode(file, &two, &["-j", "2", "--chunk-size", "0"]);
    for t in ["branches", "events", "timing", "coverage", "edges"] {
        let f = format!("{t}.parquet");
        assert!(
            std::fs::read(one.join(&f)).unwrap() == std::fs::read(two.join(&f)).unwrap(),
            "{t} differs between -j1 and -j2 with the smallest chunks"
        );
    }
    (said, one)
}

/// The stretches of `cpus`, every thread one of process [`PID`].
fn of_process(cpus: &[CpuTruth]) -> Vec<Vec<Stretch<'_>>> {
    cpus.iter()
        .map(|c| {
            c.iter()
                .map(|(tid, t, sh)| (PID, *tid, &t[..], *sh))
                .collect()
        })
        .collect()
}

/// Each CPU's rows in turn, each stretch its execution's truth (offsets shifted to the
/// CPU's AUX stream) on its process and thread; `more` checks each row further. The
/// stretches: per CPU, (pid, tid, truth, AUX offset of the stretch).
fn assert_stretches(got: &[Decoded], cpus: &[Vec<Stretch<'_>>], more: impl Fn(usize, &Decoded)) {
    let mut i = 0;
    for (cpu, stretches) in cpus.iter().enumerate() {
        for &(pid, tid, truth, shift) in stretches {
            assert!(truth.len() > 10_000, "{} rows", truth.len());
            for (k, want) in truth.iter().enumerate() {
                let g = got.get(i).unwrap_or_else(|| {
                    panic!(
                        "{} rows decoded, cpu {cpu} thread {pid}/{tid} row {k} missing",
                        got.len()
                    )
                });
                let mut want = *want;
                want.4 += shift;
                assert_eq!(
                    g.row, want,
                    "row {i} (cpu {cpu}, thread {pid}/{tid}, its row {k})"
                );
                assert_eq!(
                    (g.cpu, g.pid, g.tid),
                    (Some(cpu as u32), Some(pid), Some(tid)),
                    "row {i}: {g:?}"
                );
                more(i, g);
                i += 1;
            }
        }
    }
    assert_eq!(got.len(), i, "rows beyond the truth");
}

#[test]
fn a_perf_data_of_two_threads_on_two_cpus_decodes_to_each_executions_truth_on_its_thread() {
    if !real_program_tools() {
        return;
    }
    let made = made();
    let tmp = tempfile::tempdir().unwrap();
    let tmp = &keep_dir(&tmp);
    let file = tmp.join("perf.data");
    std::fs::write(&file, &made.file).unwrap();
    let (said, one) = decode_alike(&file, tmp, "j");
    let got = read_branches(&one.join("branches.parquet"));
    // CPU 0's rows, then CPU 1's; each stretch is its execution's truth, its offsets in the
    // CPU's AUX stream, on the thread the switch records say, with perf time from its TSC.
    assert_stretches(&got, &of_process(&made.cpus), |i, g| {
        let tsc = g.tsc.expect("TSC packets: every row is timed");
        assert_eq!(g.time, Some(tsc / 2 + 1_000_000_000), "row {i}: perf time");
    });
    assert!(
        !said.contains("warning"),
        "a well-formed recording decodes without warnings:\n{said}"
    );

    // perf decodes the same file to the same taken branches on the same threads and CPUs.
    let Some(perf) = perf_branches(&file) else {
        return;
    };
    assert_taken_as_perf(&got, &perf);
}

#[test]
fn a_pipe_mode_recording_decodes_from_a_file_and_from_standard_input_as_the_file_mode_one() {
    // `perf record -o -` writes pipe mode (the attributes and features as records, no
    // section table). Read from a file or piped into `tracemill decode -`, it decodes to
    // the rows of the same recording in file mode, threads and times included.
    if !real_program_tools() {
        return;
    }
    let made = made();
    let tmp = tempfile::tempdir().unwrap();
    let tmp = &keep_dir(&tmp);
    let file = write(tmp, "perf.data", &made.file);
    let pipe = write(
        tmp,
        "pipe.data",
        &intel_pt_two_threads_pipe(&made.recording).unwrap().bytes,
    );
    decode(&file, &tmp.join("file"), &["-j", "2"]);
    let want = read_branches(&tmp.join("file/branches.parquet"));
    assert!(want.len() > 30_000, "{} rows", want.len());
    let said = decode(&pipe, &tmp.join("pipe"), &["-j", "2"]);
    assert!(!said.contains("warning"), "{said}");
    assert!(read_branches(&tmp.join("pipe/branches.parquet")) == want);

    // Spooled under TMPDIR, and removed after.
    let spool = tmp.join("spool");
    std::fs::create_dir(&spool).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tracemill"))
        .args(["decode", "-", "-j", "2", "--out"])
        .arg(tmp.join("stdin"))
        .env("TMPDIR", &spool)
        .stdin(std::fs::File::open(&pipe).unwrap())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{said}");
    assert!(
        said.contains("<stdin>") && !said.contains("warning"),
        "{said}"
    );
    let stdin_branches = tmp.join("stdin/branches.parquet");
    assert!(read_branches(&stdin_branches) == want);
    // The tables name the input as given, not the spooled copy.
    let f = std::fs::File::open(&stdin_branches).unwrap();
    let meta = ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
    let source = meta
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|e| e.key == "tracemill.source"))
        .and_then(|e| e.value.clone());
    assert_eq!(source.as_deref(), Some("<stdin>"));
    let left: Vec<_> = std::fs::read_dir(&spool).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    // Nothing on standard input says so by that name.
    let o = Command::new(env!("CARGO_BIN_EXE_tracemill"))
        .args(["decode", "-", "--out"])
        .arg(tmp.join("none"))
        .env("TMPDIR", &spool)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{said}");
    assert!(said.contains("<stdin>: empty"), "{said}");
    assert!(std::fs::read_dir(&spool).unwrap().next().is_none());
    // What is wrong with it is said by that name too, never by the spooled copy's: a
    // recording cut short (warnings from opening it), and one cut before its first
    // AUXTRACE record (an error).
    let bytes = std::fs::read(&file).unwrap();
    for (keep, code) in [(bytes.len() * 3 / 5, 0), (600, 1)] {
        let cut = write(tmp, "cut.data", &bytes[..keep]);
        let o = Command::new(env!("CARGO_BIN_EXE_tracemill"))
            .args(["decode", "-", "--out"])
            .arg(tmp.join(format!("cut-{keep}")))
            .env("TMPDIR", &spool)
            .stdin(std::fs::File::open(&cut).unwrap())
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{said}");
        let about = if code == 0 {
            "<stdin>: perf.data cut short"
        } else {
            "<stdin>: "
        };
        assert!(said.contains(about), "{said}");
        assert!(!said.contains("tracemill-stdin."), "{said}");
    }
}

#[test]
fn aux_buffers_cut_inside_packets_and_padded_as_perf_pads_them_join_to_the_truth() {
    // perf cuts an area's trace into AUXTRACE buffers wherever the AUX head was when it
    // read, and pads each to 8 bytes with zeros that the next buffer's offset does not
    // count. Cut here at every few bytes (inside PSBs, TIP payloads, TSC packets), the
    // buffers are read in place and join across every cut: each stretch is its truth, at
    // its offset in the unpadded AUX stream, alike with -j1 and -j2 in the smallest
    // chunks, and no warning (the padding is not an overlap).
    if !real_program_tools() {
        return;
    }
    let made = made();
    let tmp = tempfile::tempdir().unwrap();
    let tmp = &keep_dir(&tmp);
    // Per CPU, its stretches at the offsets of their unpadded bytes.
    let cpus: Vec<CpuTruth> = made
        .cpus
        .iter()
        .enumerate()
        .map(|(k, stretches)| {
            let lens = made.recording.cpus.iter().filter(|s| s.cpu == k as u32);
            let mut at = 0;
            stretches
                .iter()
                .zip(lens)
                .map(|((tid, truth, _), s)| {
                    at += s.pt.len() as u64;
                    (*tid, truth.clone(), at - s.pt.len() as u64)
                })
                .collect()
        })
        .collect();
    for n in [5, 997, 4099] {
        let mut r = made.recording.clone();
        r.aux_buffer = Some(n);
        let file = write(
            tmp,
            &format!("cut-{n}.data"),
            &intel_pt_two_threads(&r).unwrap().bytes,
        );
        let (said, one) = decode_alike(&file, tmp, &format!("cut-{n}"));
        assert!(!said.contains("warning"), "buffers of {n}: {said}");
        let got = read_branches(&one.join("branches.parquet"));
        assert_stretches(&got, &of_process(&cpus), |_, _| {});
    }
}

/// `(kind, offset, detail)` of each row of an `events` table.
fn events_of(path: &Path) -> Vec<(String, u64, String)> {
    seq_events(path)
        .into_iter()
        .map(|e| (e.kind, e.offset, e.detail))
        .collect()
}

#[test]
fn aux_bytes_perf_lost_are_an_error_row_where_the_trace_resumes() {
    // perf lost 300 bytes of CPU 0's AUX data before its tenth buffer (each later buffer
    // of the area starts 300 bytes later in the AUX stream). The loss is an `error` row of
    // `events` at the PSB where the trace resumes, naming the AUX bytes and the record;
    // no packet is read across it; -j1 and -j2 in the smallest chunks write the same
    // tables, and every row before it is the full recording's.
    if !real_program_tools() {
        return;
    }
    let made = made();
    let tmp = tempfile::tempdir().unwrap();
    let tmp = &keep_dir(&tmp);
    let mut r = made.recording.clone();
    r.aux_buffer = Some(4099);
    let full = intel_pt_two_threads(&r).unwrap().bytes;
    let p = tracemill_perfdata::PerfData::parse(&full).unwrap();
    let cpu0: Vec<(u64, u64)> = p
        .records()
        .map(Result::unwrap)
        .filter_map(|i| match i.record {
            tracemill_perfdata::Record::Auxtrace(a) if a.cpu == 0 => Some((i.offset, a.offset)),
            _ => None,
        })
        .collect();
    assert!(cpu0.len() > 12, "{} buffers", cpu0.len());
    let mut lossy = full.clone();
    for &(at, offset) in &cpu0[9..] {
        let at = at as usize + 16;
        lossy[at..at + 8].copy_from_slice(&(offset + 300).to_le_bytes());
    }
    let whole = write(tmp, "whole.data", &full);
    let lossy = write(tmp, "lossy.data", &lossy);
    let (_, whole) = decode_alike(&whole, tmp, "whole");
    let (said, one) = decode_alike(&lossy, tmp, "lossy");
    let (record, from) = cpu0[9];
    // (They start after the zeros perf padded the buffer before with, which the next
    // buffer no longer starts inside.)
    let named = format!("..{:#x} are in no AUXTRACE record", from + 300);
    assert!(said.contains(&named), "{said}");
    let named = format!("(the one at file offset {record:#x} starts after them)");
    let errors: Vec<_> = events_of(&one.join("events.parquet"))
        .into_iter()
        .filter(|e| e.0 == "error" && e.2.contains("trace lost before this PSB"))
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].2.contains(&named), "{errors:?}");
    // Where the trace resumes: after the bytes before the gap, at a PSB of the buffer.
    let at = errors[0].1;
    assert!(at >= from && at < from + 4099 + 300, "{at:#x}");
    // Every row decided before the loss is the whole recording's.
    let got = read_branches(&one.join("branches.parquet"));
    let want = read_branches(&whole.join("branches.parquet"));
    let before = |d: &&Decoded| d.row.4 < from && d.cpu == Some(0);
    let (g, w): (Vec<_>, Vec<_>) = (
        got.iter().filter(before).collect(),
        want.iter().filter(before).collect(),
    );
    assert!(
        g.len() > 1000 && g.len() <= w.len(),
        "{} of {}",
        g.len(),
        w.len()
    );
    assert!(g.iter().zip(&w).all(|(a, b)| a.row == b.row));
}

#[test]
fn a_snapshot_recording_decodes_what_is_there_and_names_what_was_overwritten() {
    // `perf record -S`: the AUX area is a ring written over, and each snapshot (here at
    // every 20,011 bytes of trace) holds only its last 12,000 bytes, at their AUX offset.
    // The bytes before each are gone: a warning each, and an error row where the trace
    // resumes (at the snapshot's first PSB); the rest decodes alike in any chunking, and
    // is the truth row for row.
    if !real_program_tools() {
        return;
    }
    let made = made();
    let tmp = tempfile::tempdir().unwrap();
    let tmp = &keep_dir(&tmp);
    let mut r = made.recording.clone();
    r.aux_buffer = Some(20_011);
    r.snapshot = Some(12_000);
    let file = write(
        tmp,
        "snapshot.data",
        &intel_pt_two_threads(&r).unwrap().bytes,
    );
    let (said, one) = decode_alike(&file, tmp, "snapshot");
    // Each stretch's intervals (an empty stretch is one); one longer than a snapshot
    // lost its first bytes, a gap after the area's first.
    let gaps: usize = r
        .cpu_list()
        .iter()
        .map(|&cpu| {
            let stretches = r.cpus.iter().filter(|c| c.cpu == cpu);
            let lens: Vec<usize> = stretches
                .flat_map(|c| {
                    let n = c.pt.len();
                    (0..n.div_ceil(20_011).max(1)).map(move |i| (n - i * 20_011).min(20_011))
                })
                .collect();
            lens[1..].iter().filter(|&&l| l > 12_000).count()
        })
        .sum();
    let told = said
        .lines()
        .filter(|l| l.contains("warning") && l.contains("were overwritten before the snapshot"))
        .count();
    assert!(
        gaps > 8 && told == gaps,
        "{told} of {gaps} gaps told: {said}"
    );
    let lost = events_of(&one.join("events.parquet"))
        .into_iter()
        .filter(|e| e.0 == "error" && e.2.contains("were overwritten before the snapshot"))
        .count();
    assert!(lost >= 1 && lost <= gaps, "{lost} of {gaps}");
    let got = read_branches(&one.join("branches.parquet"));
    let whole: usize = made.cpus.iter().flatten().map(|s| s.1.len()).sum();
    assert!(
        got.len() > whole / 4 && got.len() < whole,
        "{} of {whole} rows",
        got.len()
    );

    // Row for row against the whole recording (the same buffers, nothing overwritten),
    // which is the executions' truth.
    let mut w = r.clone();
    w.snapshot = None;
    let whole_file = write(tmp, "whole.data", &intel_pt_two_threads(&w).unwrap().bytes);
    let whole_dir = tmp.join("whole");
    decode(&whole_file, &whole_dir, &[]);
    let truth = read_branches(&whole_dir.join("branches.parquet"));
    // Its stretches one after the other in the CPU's AUX offsets (a buffer's padding is
    // not AUX data).
    let stretches: Vec<Vec<Stretch<'_>>> = made
        .cpus
        .iter()
        .enumerate()
        .map(|(cpu, truths)| {
            let mut at = 0;
            let lens = r.cpus.iter().filter(|c| c.cpu == cpu as u32);
            truths
                .iter()
                .zip(lens)
                .map(|((tid, t, _), c)| {
                    at += c.pt.len() as u64;
                    (PID, *tid, &t[..], at - c.pt.len() as u64)
                })
                .collect()
        })
        .collect();
    assert_stretches(&truth, &stretches, |_, _| {});
    let truth_psbs: Vec<(u32, u64)> = seq_events(&whole_dir.join("events.parquet"))
        .into_iter()
        .filter(|e| e.kind == "psb")
        .map(|e| (e.cpu, e.offset))
        .collect();
    let events = seq_events(&one.join("events.parquet"));
    let resumed = snapshot_rows_are_the_truths(&got, &truth, &events, &truth_psbs);
    assert_eq!(resumed, lost, "every loss is a gap in the rows");

    // perf's taken branches are tracemill's, but where perf leaves some out: on this file
    // 825 of CPU 0's (the truth's rows), without an error (docs/perf-data.md).
    let Some(perf) = perf_branches(&file) else {
        return;
    };
    let ours: Vec<(u64, u64, u32, u32)> = got
        .iter()
        .filter(|d| d.row.1)
        .filter_map(|d| Some((d.row.0, d.row.2?, d.tid?, d.cpu?)))
        .collect();
    let on = |v: &[(u64, u64, u32, u32)], cpu| v.iter().filter(|b| b.3 == cpu).count();
    assert_eq!(on(&perf, 1), on(&ours, 1), "CPU 1: perf's taken branches");
    let mut rest = ours.iter();
    assert!(
        perf.iter().all(|p| rest.any(|o| o == p)),
        "perf's taken branches are tracemill's, in order"
    );
}

/// An event with the row it comes before (`seq`) and its CPU.
struct SeqEvent {
    seq: u64,
    cpu: u32,
    kind: String,
    offset: u64,
    detail: String,
}

fn seq_events(path: &Path) -> Vec<SeqEvent> {
    let r = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path).unwrap())
        .unwrap()
        .build()
        .unwrap();
    let mut out = Vec::new();
    for b in r {
        let b = b.unwrap();
        let col = |n: &str| b.column_by_name(n).unwrap().clone();
        let strings = |n: &str| tracemill_sinks::convert::strings(col(n).as_ref()).unwrap();
        let (kind, detail) = (strings("kind"), strings("detail"));
        let (seq, offset) = (col("seq"), col("offset"));
        let (seq, offset) = (
            seq.as_primitive::<UInt64Type>(),
            offset.as_primitive::<UInt64Type>(),
        );
        let cpu = col("cpu");
        let cpu = cpu.as_primitive::<UInt32Type>();
        for i in 0..b.num_rows() {
            out.push(SeqEvent {
                seq: seq.value(i),
                cpu: cpu.value(i),
                kind: kind.value(i).to_string(),
                offset: offset.value(i),
                detail: detail.value(i).to_string(),
            });
        }
    }
    out
}

/// A snapshot recording's rows `got` against the truth's (a decode of the same recording
/// with nothing overwritten), CPU by CPU: the rows are the truth's, in its order, on its
/// threads, and its rows are missing only where an "overwritten" error row stands before
/// the row the trace resumes at: from the last packet before the bytes overwritten (AUX
/// `a..b`; a packet cut there is lost with them) to the first PSB at or after `b`, whose
/// first row is the next one. The number of such gaps.
fn snapshot_rows_are_the_truths(
    got: &[Decoded],
    truth: &[Decoded],
    events: &[SeqEvent],
    truth_psbs: &[(u32, u64)],
) -> usize {
    // The AUX bytes overwritten before the row at (cpu, seq).
    let mut losses = std::collections::BTreeMap::new();
    for e in events.iter().filter(|e| e.kind == "error") {
        if let Some(r) = e.detail.split("AUX bytes ").nth(1) {
            let r = r.split_whitespace().next().unwrap();
            let (a, b) = r.split_once("..").unwrap();
            let hex = |x: &str| u64::from_str_radix(x.trim_start_matches("0x"), 16).unwrap();
            losses.insert((e.cpu, e.seq), (hex(a), hex(b)));
        }
    }
    let same = |a: &Decoded, b: &Decoded| {
        let (r, s) = (a.row, b.row);
        (r.0, r.1, r.2, a.pid, a.tid) == (s.0, s.1, s.2, b.pid, b.tid)
    };
    let mut gaps = 0;
    for cpu in [0u32, 1] {
        let mine: Vec<(usize, &Decoded)> = got
            .iter()
            .enumerate()
            .filter(|(_, d)| d.cpu == Some(cpu))
            .collect();
        let theirs: Vec<&Decoded> = truth.iter().filter(|d| d.cpu == Some(cpu)).collect();
        // The first snapshot's first rows: where the truth has the next 200 rows.
        let window = |k: usize| (0..200).all(|j| same(mine[j].1, theirs[k + j]));
        let mut k = (0..theirs.len() - 200)
            .find(|&k| window(k))
            .expect("the first rows are the truth's");
        for (n, &(i, d)) in mine.iter().enumerate() {
            if n > 0 {
                if let Some(&(a, b)) = losses.get(&(cpu, i as u64)) {
                    // The truth's rows up to the bytes overwritten were all decoded.
                    let first = theirs[k].row.4;
                    assert!(
                        first + 16 >= a,
                        "cpu {cpu} row {i}: a row decided at {first:#x} lost, before the \
                         bytes overwritten ({a:#x}..{b:#x}) and a packet cut there"
                    );
                    let psb = truth_psbs
                        .iter()
                        .filter(|p| p.0 == cpu && p.1 >= b)
                        .map(|p| p.1)
                        .min()
                        .unwrap();
                    let resume = theirs.partition_point(|t| t.row.4 < psb);
                    assert!(
                        resume > k,
                        "cpu {cpu} row {i}: no row lost at {a:#x}..{b:#x}"
                    );
                    k = resume;
                    gaps += 1;
                }
            }
            let t = theirs
                .get(k)
                .unwrap_or_else(|| panic!("cpu {cpu} row {i}: past the truth"));
            assert!(same(d, t), "cpu {cpu} row {i}: {d:?}, the truth's is {t:?}");
            k += 1;
        }
        assert_eq!(
            k,
            theirs.len(),
            "cpu {cpu}: rows after the last snapshot's first PSB"
        );
    }
    gaps
}

#[test]
fn eight_cpus_and_a_thread_that_migrates_decode_each_stretch_on_its_cpu_and_thread() {
    // `perf record -a` on a larger machine: eight CPUs, four threads of the process, and
    // thread 4243 moving from CPU 1 to CPU 5 and then to CPU 7 between its stretches.
    // Every stretch is its execution's truth on the CPU and thread the switch records put
    // it on, and perf decodes the same taken branches.
    if !real_program_tools() {
        return;
    }
    let mut r = PtRecording::for_elf(Path::new(BUSYBOX), PID, Vec::new()).unwrap();
    let (n, rev, uniq): (&[&str], &[&str], &[&str]) = (&["-n"], &["-r"], &["-u"]);
    let cpus = record_stretches(
        &mut r,
        8,
        &[
            (0, PID, n, 300, 11),
            (1, PID + 1, rev, 200, 5),
            (2, PID + 2, uniq, 250, 3),
            (3, PID + 3, n, 300, 11),
            (4, PID, rev, 200, 5),
            (5, PID + 1, uniq, 250, 3),
            (6, PID + 2, rev, 200, 5),
            (7, PID + 1, n, 300, 11),
        ],
    );
    let tmp = tempfile::tempdir().unwrap();
    let tmp = &keep_dir(&tmp);
    let file = write(tmp, "eight.data", &intel_pt_two_threads(&r).unwrap().bytes);
    let (said, one) = decode_alike(&file, tmp, "eight");
    assert!(!said.contains("warning"), "{said}");
    let got = read_branches(&one.join("branches.parquet"));
    assert_stretches(&got, &of_process(&cpus), |i, g| {
        let tsc = g.tsc.expect("TSC packets: every row is timed");
        assert_eq!(g.time, Some(tsc / 2 + 1_000_000_000), "row {i}: perf time");
    });
    let Some(perf) = perf_branches(&file) else {
        return;
    };
    assert_taken_as_perf(&got, &perf);
}

/// `got`'s taken branches (from, to, thread, CPU) are `perf`'s, in the same order.
fn assert_taken_as_perf(got: &[Decoded], perf: &[(u64, u64, u32, u32)]) {
    let ours: Vec<(u64, u64, u32, u32)> = got
        .iter()
        .filter(|d| d.row.1)
        .filter_map(|d| Some((d.row.0, d.row.2?, d.tid?, d.cpu?)))
        .collect();
    assert_eq!(
        perf.len(),
        ours.len(),
        "taken branches: perf against tracemill"
    );
    if let Some(k) = (0..ours.len()).find(|&k| perf[k] != ours[k]) {
        panic!(
            "taken branch {k}: perf {:x?}, tracemill {:x?}",
            perf[k], ours[k]
        );
    }
}

/// `perf script --itrace=b` of `file`: (from, to, tid, cpu) of every branch sample between
/// two traced addresses, in perf's order made CPU by CPU (perf interleaves CPUs by time).
/// `None` (the check skipped, except in CI) without perf.
fn perf_branches(file: &Path) -> Option<Vec<(u64, u64, u32, u32)>> {
    let text = perf_script(file, "tid,cpu,ip,addr")?;
    let mut by_cpu: std::collections::BTreeMap<u32, Vec<(u64, u64, u32, u32)>> = Default::default();
    for line in text.lines() {
        // "  4242 [000]           401a2b =>           401a40"
        let mut w = line.split_whitespace();
        let (Some(tid), Some(cpu), Some(from), Some("=>"), Some(to)) =
            (w.next(), w.next(), w.next(), w.next(), w.next())
        else {
            continue;
        };
        let (Ok(tid), Ok(cpu)) = (
            tid.parse::<u32>(),
            cpu.trim_matches(|c| c == '[' || c == ']').parse::<u32>(),
        ) else {
            continue;
        };
        let (Ok(from), Ok(to)) = (u64::from_str_radix(from, 16), u64::from_str_radix(to, 16))
        else {
            continue;
        };
        // Trace begin and end samples have 0 on the side outside the trace.
        if from != 0 && to != 0 {
            by_cpu.entry(cpu).or_default().push((from, to, tid, cpu));
        }
    }
    Some(by_cpu.into_values().flatten().collect())
}

/// `tracemill decode FILE --out DIR ARGS`: exit code, stderr.
fn try_decode(file: &Path, out: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_tracemill"))
        .arg("decode")
        .arg(file)
        .arg("--out")
        .arg(out)
        .arg("-q")
        .args(extra)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_perf_data_without_aux_data_or_with_another_pmus_is_refused_by_name() {
    if !real_program_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // No AUX data: every CPU's stream empty.
    let mut r = made().recording.clone();
    for c in &mut r.cpus {
        c.pt.clear();
    }
    let file = tmp.path().join("empty.data");
    std::fs::write(&file, intel_pt_two_threads(&r).unwrap().bytes).unwrap();
    let (code, err) = try_decode(&file, &tmp.path().join("o1"), &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no Intel PT data"), "{err}");

    // Another PMU's AUX data: the AUXTRACE_INFO's type is not Intel PT's (1).
    let mut bytes = made().file.clone();
    let at = {
        let p = tracemill_perfdata::PerfData::parse(&bytes).unwrap();
        p.records()
            .map(Result::unwrap)
            .find(|i| matches!(i.record, tracemill_perfdata::Record::AuxtraceInfo(_)))
            .unwrap()
            .offset as usize
    };
    bytes[at + 8..at + 12].copy_from_slice(&3u32.to_le_bytes()); // CoreSight ETM
    let file = tmp.path().join("etm.data");
    std::fs::write(&file, &bytes).unwrap();
    let (code, err) = try_decode(&file, &tmp.path().join("o2"), &[]);
    assert_eq!(code, Some(1), "{err}");
    let named = err
        .split("offset 0x")
        .nth(1)
        .and_then(|h| h.split(|c: char| !c.is_ascii_hexdigit()).next())
        .and_then(|h| u64::from_str_radix(h, 16).ok());
    assert!(
        named.is_some_and(|o| (at as u64..at as u64 + 16).contains(&o)),
        "names the offset of the AUXTRACE_INFO record ({at:#x}) or its field: {err}"
    );
    assert!(err.contains("not Intel PT"), "{err}");

    // Not a perf.data at all, given perf.data options.
    let (code, err) = try_decode(
        Path::new(BUSYBOX),
        &tmp.path().join("o3"),
        &["--symfs", "/"],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("this is not one (no PERFILE2 magic)"), "{err}");
}

#[test]
fn a_perf_data_cut_in_the_middle_of_a_record_decodes_what_came_before() {
    if !real_program_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let full = &made().file;
    // Inside the last AUXTRACE record's data (CPU 1's stream): CPU 0's are whole.
    let cut = full.len() - 40_000;
    let file = tmp.path().join("cut.data");
    std::fs::write(&file, &full[..cut]).unwrap();
    let out = tmp.path().join("o");
    let (code, err) = try_decode(&file, &out, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("warning") && err.contains("offset 0x"),
        "{err}"
    );
    let got = read_branches(&out.join("branches.parquet"));
    let cpu0: usize = made().cpus[0].iter().map(|s| s.1.len()).sum();
    assert!(
        got.len() >= cpu0,
        "CPU 0's rows are all there: {} of {cpu0}",
        got.len()
    );
    for (i, g) in got.iter().take(cpu0).enumerate() {
        assert_eq!(g.cpu, Some(0), "row {i}");
    }
}

#[test]
fn a_missing_binary_is_named_and_found_again_with_symfs_or_the_build_id_cache() {
    if !real_program_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // Recorded at a path that is not there any more.
    let gone = tmp.path().join("was/here/busybox");
    let mut r = made().recording.clone();
    r.path = gone.as_os_str().as_encoded_bytes().to_vec();
    let file = tmp.path().join("moved.data");
    std::fs::write(&file, intel_pt_two_threads(&r).unwrap().bytes).unwrap();
    let (code, err) = try_decode(&file, &tmp.path().join("o1"), &[]);
    assert_eq!(code, Some(1), "no code, no branch: {err}");
    let id = r.build_id.to_hex();
    assert!(
        err.contains(&gone.display().to_string()) && err.contains(&id),
        "names the path and build-id: {err}"
    );

    let want = read_branches(&{
        let o = tmp.path().join("o-ref");
        decode(&write(tmp.path(), "ref.data", &made().file), &o, &[]);
        o.join("branches.parquet")
    });
    // Under a --symfs root, at the recorded path.
    let root = tmp.path().join("symfs");
    let at = root.join(gone.strip_prefix("/").unwrap());
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::fs::copy(BUSYBOX, &at).unwrap();
    let o = tmp.path().join("o2");
    decode(&file, &o, &["--symfs", root.to_str().unwrap()]);
    assert_eq!(read_branches(&o.join("branches.parquet")), want, "--symfs");
    // In a build-id cache, perf's layout.
    let cache = tmp.path().join("debug");
    let elf = cache
        .join(".build-id")
        .join(&id[..2])
        .join(&id[2..])
        .join("elf");
    std::fs::create_dir_all(elf.parent().unwrap()).unwrap();
    std::fs::copy(BUSYBOX, &elf).unwrap();
    let o = tmp.path().join("o3");
    decode(&file, &o, &["--buildid-dir", cache.to_str().unwrap()]);
    assert_eq!(
        read_branches(&o.join("branches.parquet")),
        want,
        "--buildid-dir"
    );
}

#[test]
fn kernel_code_decodes_from_vmlinux_a_kcore_copy_and_the_directory_perf_record_kcore_writes() {
    // The code of the trace is given as the kernel's (its mapping's binary is gone): an ELF
    // at its own addresses (`--vmlinux`), a copy of /proc/kcore (an ELF core of the text's
    // segments, `--kcore FILE` or its `kcore_dir`), and the directory `perf record --kcore`
    // writes (`data` beside `kcore_dir/kcore`), which uses its own copy unasked. Each
    // decodes the rows of the recording with its binary.
    if !real_program_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut r = made().recording.clone();
    r.path = tmp
        .path()
        .join("gone/busybox")
        .as_os_str()
        .as_encoded_bytes()
        .to_vec();
    // A kernel module loaded, whose .ko file is there (busybox standing in): its code is
    // the kcore copy's, never the file's.
    let ko = tmp.path().join("fuse.ko");
    std::fs::copy(BUSYBOX, &ko).unwrap();
    let module = PtImage {
        path: ko.as_os_str().as_encoded_bytes().to_vec(),
        addr: 0xffff_ffff_c000_0000,
        ..PtImage::for_elf(Path::new(BUSYBOX)).unwrap()
    };
    r.modules.push(module);
    let bytes = intel_pt_two_threads(&r).unwrap().bytes;
    let want = read_branches(&{
        let o = tmp.path().join("o-ref");
        decode(&write(tmp.path(), "ref.data", &made().file), &o, &[]);
        o.join("branches.parquet")
    });
    let file = write(tmp.path(), "k.data", &bytes);
    let rec = tmp.path().join("perf.data");
    let kcore_dir = rec.join("kcore_dir");
    std::fs::create_dir_all(&kcore_dir).unwrap();
    std::fs::write(rec.join("data"), &bytes).unwrap();
    let core = kcore_copy(&std::fs::read(BUSYBOX).unwrap()).unwrap();
    std::fs::write(kcore_dir.join("kcore"), core).unwrap();
    for (name, input, extra) in [
        ("vmlinux", &file, vec!["--vmlinux", BUSYBOX]),
        (
            "kcore",
            &file,
            vec!["--kcore", kcore_dir.join("kcore").to_str().unwrap()],
        ),
        (
            "kcore-dir",
            &file,
            vec!["--kcore", kcore_dir.to_str().unwrap()],
        ),
        ("recording-dir", &rec, vec![]),
    ] {
        let o = tmp.path().join(name);
        let said = decode(input, &o, &extra);
        assert!(
            said.contains("busybox"),
            "{name}: the missing binary is named: {said}"
        );
        // Without a kcore copy the module is named, and why its code is not decoded.
        let named = said.contains("1 kernel module mapped (") && said.contains("fuse.ko at");
        assert_eq!(named, name == "vmlinux", "{name}: {said}");
        assert_eq!(read_branches(&o.join("branches.parquet")), want, "{name}");
    }
    // Without the kernel's code nothing decodes.
    let (code, err) = try_decode(&file, &tmp.path().join("none"), &[]);
    assert_eq!(code, Some(1), "{err}");
}

#[test]
fn a_trace_of_every_cpl_decodes_from_a_kcore_copy_to_its_truth() {
    // `perf record -e intel_pt//` (the kernel traced too): a far transfer is a TIP alone
    // (SDM 36.4.2, case 10e) and an interrupt a FUP + TIP, where `//u` has TIP.PGD and
    // TIP.PGE. The code is the kernel's, from a copy of kcore (busybox standing in: PT
    // packets carry no CPL), and the rows are the execution's truth.
    if !real_program_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let tmp = &keep_dir(&tmp);
    let mut r = PtRecording::for_elf(Path::new(BUSYBOX), PID, Vec::new()).unwrap();
    r.path = tmp
        .join("gone/busybox")
        .as_os_str()
        .as_encoded_bytes()
        .to_vec();
    r.config = 1 | 1 << 10 | 1 << 13;
    r.kernel = true;
    let switch_in = r.start_time + 100_000;
    let tsc = r.clock.perf_time_to_tsc(switch_in + 1_000).unwrap();
    let o = PtOptions {
        user_only: false,
        tsc: Some(PtTsc {
            start: tsc,
            per_insn: 1,
        }),
        ..PtOptions::default()
    };
    let input = sort_input(300, 11);
    let e = encoded_execution(Path::new(BUSYBOX), &["sort", "-n"], input.as_bytes(), &o);
    let switch_out = r.clock.tsc_to_perf_time(tsc + e.instructions) + 1_000;
    r.cpus.push(CpuStream {
        cpu: 0,
        tid: PID,
        pt: e.pt,
        switch_in,
        switch_out,
    });
    let file = write(tmp, "kernel.data", &intel_pt_two_threads(&r).unwrap().bytes);
    let kcore = tmp.join("kcore");
    let core = kcore_copy(&std::fs::read(BUSYBOX).unwrap()).unwrap();
    std::fs::write(&kcore, core).unwrap();
    let out = tmp.join("kernel");
    decode(&file, &out, &["--kcore", kcore.to_str().unwrap()]);
    let got = read_branches(&out.join("branches.parquet"));
    assert_stretches(&got, &[vec![(PID, PID, &e.truth[..], 0)]], |_, _| {});
    let kinds: Vec<String> = events_of(&out.join("events.parquet"))
        .into_iter()
        .map(|e| e.0)
        .collect();
    // Every CPL traced: no syscall stops tracing, only the end of the execution does.
    let disables = kinds.iter().filter(|k| *k == "disable").count();
    assert!(
        disables == 1 && kinds.last().is_some_and(|k| k == "disable"),
        "{kinds:?}"
    );
}

/// A copy of the recorded binary in perf's build-id cache layout under `cache`.
fn build_id_cache(cache: &Path) {
    let id = made().recording.build_id.to_hex();
    let elf = cache
        .join(".build-id")
        .join(&id[..2])
        .join(&id[2..])
        .join("elf");
    std::fs::create_dir_all(elf.parent().unwrap()).unwrap();
    std::fs::copy(BUSYBOX, &elf).unwrap();
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn tracemill(args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_tracemill"))
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    (o.status.code(), err)
}

#[test]
fn reports_of_a_perf_data_have_a_flame_graph_root_and_a_timeline_track_per_thread() {
    if !real_program_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = write(tmp.path(), "perf.data", &made().file);
    let out = tmp.path().join("out");
    decode(&file, &out, &[]);
    let folded = tmp.path().join("fg.folded");
    let (code, err) = tracemill(&[
        "report",
        "flamegraph",
        out.to_str().unwrap(),
        "--out",
        tmp.path().join("fg.svg").to_str().unwrap(),
        "--folded",
        folded.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    // Every stack starts at its thread; each thread's instructions are its rows'.
    let mut by_root: std::collections::BTreeMap<String, u64> = Default::default();
    for line in std::fs::read_to_string(&folded).unwrap().lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let root = stack.split(';').next().unwrap().to_string();
        *by_root.entry(root).or_default() += n.parse::<u64>().unwrap();
    }
    let rows = read_branches(&out.join("branches.parquet"));
    let insns = |tid: u32| -> u64 {
        rows.iter()
            .filter(|r| r.tid == Some(tid))
            .map(|r| r.row.3 as u64)
            .sum()
    };
    assert_eq!(
        by_root,
        [
            ("busybox_4242/4242".to_string(), insns(PID)),
            ("busybox_4242/4243".to_string(), insns(PID + 1)),
        ]
        .into(),
        "one root per thread (spaces become _ in folded lines), with its rows' instructions"
    );
    assert!(std::fs::read_to_string(tmp.path().join("fg.svg"))
        .unwrap()
        .contains("busybox_4242/4243"));

    let json = tmp.path().join("t.json");
    let (code, err) = tracemill(&[
        "report",
        "timeline",
        out.to_str().unwrap(),
        "--out",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let names: Vec<(u64, String)> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| {
            (
                e["tid"].as_u64().unwrap(),
                e["args"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            (1, "busybox 4242/4242".to_string()),
            (2, "busybox 4242/4243".to_string())
        ]
    );
    for tid in [1, 2] {
        assert!(
            events.iter().any(|e| e["ph"] == "X" && e["tid"] == tid),
            "spans on track {tid}"
        );
    }
    // TSC in PSB+ only: many calls last zero ticks. None is written as a span of zero
    // length below the outermost; every call is a span or counted in one.
    let spans: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert!(
        spans
            .iter()
            .all(|e| e["dur"].as_f64().unwrap() > 0.0 || e["args"]["depth"] == 0),
        "a zero-length span below depth 0"
    );
    let calls: u64 = spans
        .iter()
        .map(|e| {
            e["args"]["calls"].as_u64().unwrap_or(1) + e["args"]["nested"].as_u64().unwrap_or(0)
        })
        .sum();
    let (code, err) = tracemill(&[
        "report",
        "timeline",
        out.to_str().unwrap(),
        "--out",
        json.to_str().unwrap(),
        "--min-ns",
        "0",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let all: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let unmerged = all["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .count() as u64;
    assert_eq!(calls, unmerged, "calls merged and not");
    assert!((spans.len() as u64) < unmerged, "nothing merged");
    assert!(v["otherData"]["merged"]
        .as_str()
        .unwrap()
        .starts_with(&format!(
            "{} spans shorter than 1 ns merged",
            unmerged - spans.len() as u64
        )));
}

#[test]
fn ingest_takes_perf_data_files_and_recording_directories_with_labels_beside_them() {
    if !real_program_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let fleet = tmp.path().join("fleet");
    for host in ["h1", "h2", "h3"] {
        let d = fleet.join(host);
        std::fs::create_dir_all(&d).unwrap();
        if host == "h3" {
            // A recording made as a directory (`perf record --kcore`: `data` beside
            // `kcore_dir/`), its labels beside it as a file's are.
            std::fs::create_dir_all(d.join("perf.data/kcore_dir")).unwrap();
            write(&d.join("perf.data"), "data", &made().file);
        } else {
            write(&d, "perf.data", &made().file);
        }
        std::fs::write(
            d.join("perf.data.toml"),
            format!("[labels]\nhost = \"{host}\"\n"),
        )
        .unwrap();
        // The binary in perf's build-id cache beside the recording (what `perf archive`
        // packs): ingest reads nothing outside the recording's directory by default.
        build_id_cache(&d.join(".debug"));
    }
    let ds = tmp.path().join("ds");
    let (code, err) = tracemill(&[
        "ingest",
        fleet.to_str().unwrap(),
        "--dataset",
        ds.to_str().unwrap(),
        "--partition-by",
        "host",
        "-q",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let rows = made()
        .cpus
        .iter()
        .flatten()
        .map(|s| s.1.len())
        .sum::<usize>();
    for host in ["h1", "h2", "h3"] {
        let dir = ds.join("branches").join(format!("host={host}"));
        let files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        let got = read_branches(&files[0]);
        assert_eq!(got.len(), rows, "{host}");
        assert!(
            got.iter().all(|g| g.pid == Some(PID)),
            "{host}: thread columns"
        );
    }
    // Ingested again: nothing to do (the same ids).
    let (code, err) = tracemill(&[
        "ingest",
        fleet.to_str().unwrap(),
        "--dataset",
        ds.to_str().unwrap(),
        "--partition-by",
        "host",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("3 already"), "{err}");
    // The dataset's flame graph: per thread, over both hosts.
    let folded = tmp.path().join("ds.folded");
    let (code, err) = tracemill(&[
        "report",
        "flamegraph",
        ds.to_str().unwrap(),
        "--where",
        "host = 'h1'",
        "--out",
        tmp.path().join("ds.svg").to_str().unwrap(),
        "--folded",
        folded.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    let text = std::fs::read_to_string(&folded).unwrap();
    assert!(
        text.lines().all(|l| l.starts_with("busybox_4242/424")),
        "{}",
        &text[..200.min(text.len())]
    );
}

/// `tracemill ARGS`, killed (and the test failed) if it runs longer than `secs`.
fn tracemill_within(secs: u64, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tracemill"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            let o = child.wait_with_output().unwrap();
            return (
                o.status.code(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            );
        }
        if t0.elapsed().as_secs() >= secs {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tracemill {args:?} still running after {secs} s (it must not block)");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn files_a_recording_names_are_opened_as_regular_files_only_and_never_block() {
    if !real_program_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // An MMAP2 naming a FIFO, then /dev/zero: decode ends (no code, no branch) and says why.
    for (name, says) in [
        (fifo.to_str().unwrap(), "FIFO"),
        ("/dev/zero", "character device"),
    ] {
        let mut r = made().recording.clone();
        r.path = name.as_bytes().to_vec();
        let file = write(
            tmp.path(),
            "named.data",
            &intel_pt_two_threads(&r).unwrap().bytes,
        );
        let out = tmp.path().join("o");
        let (code, err) = tracemill_within(
            120,
            &[
                "decode",
                file.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
        );
        assert_eq!(code, Some(1), "no code, no branch: {err}");
        assert!(err.contains(name) && err.contains(says), "{name}: {err}");
    }
}

#[test]
fn ingest_reads_nothing_outside_the_recordings_directory_and_quotes_no_file() {
    if !real_program_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let fleet = tmp.path().join("fleet");
    let (a, b) = (fleet.join("a"), fleet.join("b"));
    for d in [&a, &b] {
        std::fs::create_dir_all(d).unwrap();
        write(d, "perf.data", &made().file);
    }
    // a: its labels file is a link to a secret outside the tree (as /etc/shadow would be).
    let secret = tmp.path().join("shadow");
    std::fs::write(&secret, "root:$6$SECRET-HASH:19000:0:99999:7:::\n").unwrap();
    std::os::unix::fs::symlink(&secret, a.join("perf.data.toml")).unwrap();
    // b: a labels file that does not parse, and no binary inside its directory (the
    // recording names /usr/bin/busybox).
    std::fs::write(b.join("perf.data.toml"), "[labels]\nhost = SECRET-VALUE\n").unwrap();
    let ds = tmp.path().join("ds");
    let (code, err) = tracemill_within(
        300,
        &[
            "ingest",
            fleet.to_str().unwrap(),
            "--dataset",
            ds.to_str().unwrap(),
            "-q",
        ],
    );
    assert_eq!(code, Some(3), "both fail, the run goes on: {err}");
    assert!(!err.contains("SECRET"), "stderr quotes no file: {err}");
    assert!(
        err.contains("outside the recording's directory"),
        "the link is refused by name: {err}"
    );
    let catalog = common::catalog_errors(&ds);
    assert_eq!(catalog.len(), 2, "{catalog:?}");
    for e in &catalog {
        assert!(!e.contains("SECRET"), "the catalog quotes no file: {e}");
    }
    assert!(
        catalog.iter().any(|e| e.contains("perf.data.toml:2:")),
        "{catalog:?}"
    );

    // With a labels file that parses, the binary outside the tree is not read: no branch.
    std::fs::remove_file(a.join("perf.data.toml")).unwrap();
    std::fs::write(b.join("perf.data.toml"), "[labels]\nhost = \"b\"\n").unwrap();
    let (code, err) = tracemill_within(
        300,
        &[
            "ingest",
            fleet.to_str().unwrap(),
            "--dataset",
            ds.to_str().unwrap(),
            "-q",
            "--retry-failed",
        ],
    );
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("/usr/bin/busybox is outside the recording's directory")
            && err.contains("--allow-outside-paths"),
        "{err}"
    );
    // --allow-outside-paths reads it, as --buildid-dir would find it elsewhere.
    let (code, err) = tracemill_within(
        300,
        &[
            "ingest",
            fleet.to_str().unwrap(),
            "--dataset",
            ds.to_str().unwrap(),
            "-q",
            "--retry-failed",
            "--allow-outside-paths",
        ],
    );
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn a_cut_or_lying_auxtrace_is_named_and_the_bytes_before_it_are_decoded() {
    if !real_program_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let full = &made().file;
    let p = tracemill_perfdata::PerfData::parse(full).unwrap();
    let first = p
        .records()
        .map(Result::unwrap)
        .find(|i| matches!(i.record, tracemill_perfdata::Record::Auxtrace(_)))
        .unwrap();
    let aux_at = first.offset as usize;
    let tracemill_perfdata::Record::Auxtrace(a) = first.record else {
        unreachable!()
    };
    // Cut in the middle of the first AUXTRACE record's data (CPU 0's stream): the rows of
    // the bytes that are there decode, each its execution's truth; the cut is named.
    let data_at = aux_at + u16::from_le_bytes([full[aux_at + 6], full[aux_at + 7]]) as usize;
    let cut = data_at + a.data.len() / 2;
    let file = write(tmp.path(), "cut.data", &full[..cut]);
    let out = tmp.path().join("o");
    let (code, err) = try_decode(&file, &out, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(&format!("AUXTRACE record's data needs {} bytes", a.size))
            && err.contains(&format!("offset {aux_at:#x}")),
        "names the cut record: {err}"
    );
    let got = read_branches(&out.join("branches.parquet"));
    let truth = &made().cpus[0][0].1;
    assert!(
        got.len() > truth.len() / 4 && got.len() < truth.len(),
        "about half of CPU 0's first stretch: {} of {}",
        got.len(),
        truth.len()
    );
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g.row, truth[i], "row {i}");
    }

    // The same record claiming 2^40 bytes in a whole file: that is the error, at its
    // offset (the records after it cannot be found).
    let mut b = full.clone();
    b[aux_at + 8..aux_at + 16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let file = write(tmp.path(), "lying.data", &b);
    let (code, err) = try_decode(&file, &tmp.path().join("o2"), &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("AUXTRACE record's data needs 1099511627776 bytes")
            && err.contains(&format!("offset {aux_at:#x}"))
            && !err.contains("was the recording stopped"),
        "{err}"
    );
}

#[test]
fn an_empty_file_a_foreign_magic_or_a_fifo_each_get_their_own_message() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("fifo.data");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let mut swapped = b"2ELIFREP".to_vec();
    swapped.resize(200, 0);
    let mut old = b"PERFFILE".to_vec();
    old.resize(200, 0);
    let cases: [(std::path::PathBuf, &str); 4] = [
        (write(tmp.path(), "empty.data", b""), "an empty file"),
        (write(tmp.path(), "be.data", &swapped), "big-endian"),
        (write(tmp.path(), "v1.data", &old), "perf's first format"),
        (fifo, "is a FIFO (named pipe), not a regular file"),
    ];
    for (file, says) in cases {
        let (code, err) = tracemill_within(60, &["decode", file.to_str().unwrap()]);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains(says) && !err.contains("--ctl"),
            "{}: {err}",
            file.display()
        );
    }
}

#[test]
fn a_decode_with_no_branch_publishes_nothing_and_keeps_what_out_held() {
    if !real_program_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    decode(&write(tmp.path(), "good.data", &made().file), &out, &[]);
    let before: Vec<_> = ["branches", "events", "timing", "coverage", "edges"]
        .iter()
        .map(|t| std::fs::read(out.join(format!("{t}.parquet"))).unwrap())
        .collect();
    // The same recording with its binary gone: no code, no branch.
    let mut r = made().recording.clone();
    r.path = tmp
        .path()
        .join("gone/busybox")
        .as_os_str()
        .as_encoded_bytes()
        .to_vec();
    let file = write(
        tmp.path(),
        "gone.data",
        &intel_pt_two_threads(&r).unwrap().bytes,
    );
    let (code, err) = try_decode(&file, &out, &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("nothing written"), "{err}");
    for (t, b) in ["branches", "events", "timing", "coverage", "edges"]
        .iter()
        .zip(&before)
    {
        assert!(
            &std::fs::read(out.join(format!("{t}.parquet"))).unwrap() == b,
            "{t} kept"
        );
    }
    let names: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 5, "no temporary left: {names:?}");
}

#[test]
fn a_recording_made_with_perf_record_z_decodes_as_the_same_recording_without() {
    if !real_program_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut r = made().recording.clone();
    r.compress = Some(3);
    let z = intel_pt_two_threads(&r).unwrap().bytes;
    // The sideband is inside COMPRESSED records: no MMAP2 or switch record outside them.
    let p = tracemill_perfdata::PerfData::parse(&z).unwrap();
    let kinds: Vec<u32> = p.records().map(|i| i.unwrap().record.kind()).collect();
    assert!(kinds.contains(&tracemill_perfdata::record::kind::COMPRESSED));
    assert!(!kinds.contains(&tracemill_perfdata::record::kind::MMAP2));
    let zfile = write(tmp.path(), "z.data", &z);
    let plain = write(tmp.path(), "plain.data", &made().file);
    let (zo, po) = (tmp.path().join("z"), tmp.path().join("p"));
    let said = decode(&zfile, &zo, &[]);
    decode(&plain, &po, &[]);
    assert!(!said.contains("warning"), "{said}");
    for t in ["branches", "events", "timing", "coverage", "edges"] {
        let f = format!("{t}.parquet");
        let (a, b) = (zo.join(&f), po.join(&f));
        if t == "branches" {
            assert_eq!(read_branches(&a), read_branches(&b), "{t}");
        }
        assert!(!std::fs::read(&a).unwrap().is_empty(), "{t}");
    }
    // perf reads the compressed file to the same taken branches as the plain one.
    if let (Some(pz), Some(pp)) = (perf_branches(&zfile), perf_branches(&plain)) {
        assert!(!pp.is_empty());
        assert_eq!(pz, pp, "perf script on the -z file");
    }
}

/// A `perf record -a` of two programs at the same addresses: process 4242 runs busybox and
/// process 5151 the sample program `recursion` (both static and non-PIE: their code starts
/// at 0x401000). CPU 0 runs 4242 (`sort -n`), 5151, then 4242 again (`sort -r`); CPU 1
/// runs 5151, its child 6161 (forked: `recursion` is in the mappings it inherited), then,
/// after 4242 exec'd `recursion`, 4242 running it.
struct TwoPrograms {
    /// Holds the compiled `recursion` the recording maps.
    _dir: tempfile::TempDir,
    file: Vec<u8>,
    /// Per CPU (0, 1): its stretches in order: process (= thread), truth rows, AUX offset.
    cpus: Vec<Vec<(u32, Vec<Row>, u64)>>,
}

const OTHER: u32 = 5151;
const FORKED: u32 = 6161;

/// Process 5151 running `image` (`recursion`), and 6161, a child of 5151 that runs its
/// parent's program: its code is in the mappings the fork copied (no MMAP of its own).
fn add_other_processes(r: &mut PtRecording, image: &PtImage) {
    r.processes.push(PtProcess {
        pid: OTHER,
        parent: None,
        image: Some(image.clone()),
        start: r.start_time + 50_000,
    });
    r.processes.push(PtProcess {
        pid: FORKED,
        parent: Some(OTHER),
        image: None,
        start: r.start_time + 60_000,
    });
}

fn two_programs() -> &'static TwoPrograms {
    static MADE: std::sync::OnceLock<TwoPrograms> = std::sync::OnceLock::new();
    MADE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let prog = dir.path().join("recursion");
        qemu::compile_c(&qemu::programs_dir().join("recursion.c"), &prog).unwrap();
        let mut r = PtRecording::for_elf(Path::new(BUSYBOX), PID, Vec::new()).unwrap();
        r.config = 1 | 1 << 10 | 1 << 13;
        let image = PtImage::for_elf(&prog).unwrap();
        assert!(
            image.addr < r.addr + r.len && r.addr < image.addr + image.len,
            "the two programs' code overlaps: {:#x} and {:#x}",
            image.addr,
            r.addr
        );
        add_other_processes(&mut r, &image);
        let tsc_of = |perf_ns: u64| r.clock.perf_time_to_tsc(perf_ns).unwrap();
        let ns_of = |tsc: u64| r.clock.tsc_to_perf_time(tsc);
        let recursion = |input: &str, tsc| execution(&prog, &["recursion"], input.as_bytes(), tsc);
        let mut cpus: Vec<Vec<(u32, Vec<Row>, u64)>> = vec![Vec::new(), Vec::new()];
        let mut aux_end = [0u64; 2];
        let mut at = r.start_time + 100_000;
        // (cpu, process, what it runs); `None`: 4242 execs `recursion` here.
        #[allow(clippy::type_complexity)]
        let plan: [Option<(u32, u32, &dyn Fn(u64) -> Encoded)>; 7] = [
            Some((0, PID, &|t| sort_execution(&["-n"], 300, 11, t))),
            Some((0, OTHER, &|t| recursion("12 8 300 5", t))),
            Some((1, OTHER, &|t| recursion("10 6 200 4", t))),
            Some((1, FORKED, &|t| recursion("11 7 250 5", t))),
            Some((0, PID, &|t| sort_execution(&["-r"], 200, 5, t))),
            None,
            Some((1, PID, &|t| recursion("14 5 100 6", t))),
        ];
        for step in plan {
            let Some((cpu, tid, run)) = step else {
                r.execs.push(PtExec {
                    pid: PID,
                    time: at,
                    image: image.clone(),
                });
                at += 10_000;
                continue;
            };
            let switch_in = at;
            let e = run(tsc_of(switch_in + 1_000));
            let switch_out = ns_of(tsc_of(switch_in + 1_000) + e.instructions) + 1_000;
            let k = cpu as usize;
            cpus[k].push((tid, e.truth, aux_end[k]));
            aux_end[k] += e.pt.len().next_multiple_of(8) as u64;
            r.cpus.push(CpuStream {
                cpu,
                tid,
                pt: e.pt,
                switch_in,
                switch_out,
            });
            at = switch_out + 10_000;
        }
        let file = intel_pt_two_threads(&r).unwrap().bytes;
        TwoPrograms {
            _dir: dir,
            file,
            cpus,
        }
    })
}

#[test]
fn processes_with_programs_at_the_same_addresses_decode_each_in_its_own_address_space() {
    if !real_program_tools() {
        return;
    }
    let made = two_programs();
    let tmp = tempfile::tempdir().unwrap();
    let tmp = &keep_dir(&tmp);
    let file = write(tmp, "two.data", &made.file);
    let (said, one) = decode_alike(&file, tmp, "two");
    assert!(
        !said.contains("warning"),
        "the images of both programs load, each in its own space:\n{said}"
    );
    let got = read_branches(&one.join("branches.parquet"));
    let cpus: Vec<Vec<Stretch<'_>>> = made
        .cpus
        .iter()
        .map(|c| {
            c.iter()
                .map(|(who, t, sh)| (*who, *who, &t[..], *sh))
                .collect()
        })
        .collect();
    assert_stretches(&got, &cpus, |_, _| {});
    // Every chunk's body is used: bodies select the space the sequential decode selects
    // at the same packet, so each stitch meets its body.
    let rec = tracemill_input::perf::open(&file, &Default::default()).unwrap();
    let opts = tracemill::run::Options {
        jobs: 2,
        chunk_bytes: Some(1),
        ..Default::default()
    };
    let report = tracemill::run::decode_perf(&rec, &opts).unwrap();
    assert_eq!(report.rows, got.len() as u64);
    assert_eq!(report.fallbacks, 0, "chunks decoded by their stitch alone");

    // perf, which looks code up in each thread's own maps, takes the same branches.
    let Some(perf) = perf_branches(&file) else {
        return;
    };
    assert_taken_as_perf(&got, &perf);
}

#[test]
fn a_per_thread_recording_without_timing_decodes_each_process_in_its_own_address_space() {
    // `perf record --per-thread -e intel_pt/tsc=0/u` of the two programs at the same
    // addresses: no timing packet dates a place, but each AUX area is one thread's, so
    // its code is its process's (4242 busybox; 5151 `recursion`; 6161, forked from 5151,
    // the mappings it inherited), wherever the thread ran. Each thread's stretches, on
    // either CPU, are one after the other in its area.
    if !real_program_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tmp = &keep_dir(&dir);
    let prog = tmp.join("recursion");
    qemu::compile_c(&qemu::programs_dir().join("recursion.c"), &prog).unwrap();
    let mut r = PtRecording::for_elf(Path::new(BUSYBOX), PID, Vec::new()).unwrap();
    // Branches only: no TSC, MTC or CYC.
    r.config = 1 | 1 << 13;
    r.per_thread = true;
    add_other_processes(&mut r, &PtImage::for_elf(&prog).unwrap());
    let sort = |args: &[&str], lines, seed| timed_sort(args, lines, seed, None);
    let recursion = |input: &str| timed_execution(&prog, &["recursion"], input.as_bytes(), None);
    let plan: [(u32, u32, Encoded); 5] = [
        (0, PID, sort(&["-n"], 300, 11)),
        (0, OTHER, recursion("12 8 300 5")),
        (1, OTHER, recursion("10 6 200 4")),
        (1, FORKED, recursion("11 7 250 5")),
        (1, PID, sort(&["-r"], 200, 5)),
    ];
    // Per thread (area): its stretches in order, truth and AUX offset.
    let threads = [PID, OTHER, FORKED];
    let mut areas: Vec<Vec<(u32, Vec<Row>, u64)>> = vec![Vec::new(); threads.len()];
    let mut aux_end = [0u64; 3];
    let mut at = r.start_time + 100_000;
    for (cpu, tid, e) in plan {
        let k = threads.iter().position(|&t| t == tid).unwrap();
        areas[k].push((tid, e.truth, aux_end[k]));
        aux_end[k] += e.pt.len().next_multiple_of(8) as u64;
        let switch_out = at + e.instructions + 1_000;
        r.cpus.push(CpuStream {
            cpu,
            tid,
            pt: e.pt,
            switch_in: at,
            switch_out,
        });
        at = switch_out + 10_000;
    }
    let file = write(
        tmp,
        "per-thread.data",
        &intel_pt_two_threads(&r).unwrap().bytes,
    );
    let (said, one) = decode_alike(&file, tmp, "per-thread");
    assert!(!said.contains("warning"), "{said}");
    let got = read_branches(&one.join("branches.parquet"));
    let mut i = 0;
    for stretches in &areas {
        for (tid, truth, shift) in stretches {
            for (k, want) in truth.iter().enumerate() {
                let g = got
                    .get(i)
                    .unwrap_or_else(|| panic!("thread {tid} row {k} missing"));
                let mut want = *want;
                want.4 += shift;
                assert_eq!(g.row, want, "row {i} (thread {tid}, its row {k})");
                assert_eq!(
                    (g.cpu, g.pid, g.tid, g.tsc, g.time),
                    (None, Some(*tid), Some(*tid), None, None),
                    "row {i}: a thread's area, no time"
                );
                i += 1;
            }
        }
    }
    assert_eq!(got.len(), i, "rows beyond the truth");

    // The same recording made per CPU: nothing dates a place in a CPU's trace, so its
    // process is not known where code collides. Said once, by cause.
    r.per_thread = false;
    let cpu_wide = write(
        tmp,
        "per-cpu.data",
        &intel_pt_two_threads(&r).unwrap().bytes,
    );
    let said = decode(&cpu_wide, &tmp.join("per-cpu"), &[]);
    assert!(
        said.contains("no timing packets (tsc=0)") && said.contains("--per-thread"),
        "{said}"
    );
    // Per thread again, with 6161 exec'ing busybox at the end: two programs, and no time
    // to say which ran where in its thread's trace.
    r.per_thread = true;
    r.execs.push(PtExec {
        pid: FORKED,
        time: at,
        image: PtImage::for_elf(Path::new(BUSYBOX)).unwrap(),
    });
    let exec = write(tmp, "exec.data", &intel_pt_two_threads(&r).unwrap().bytes);
    let said = decode(&exec, &tmp.join("exec"), &[]);
    assert!(
        said.contains("process [6161] exec'd during the recording"),
        "{said}"
    );

    // perf decodes each thread's area in its thread's maps to the same taken branches.
    let Some(perf) = perf_taken_by_thread(&file) else {
        return;
    };
    for tid in threads {
        let ours: Vec<(u64, u64)> = got
            .iter()
            .filter(|d| d.tid == Some(tid) && d.row.1)
            .filter_map(|d| Some((d.row.0, d.row.2?)))
            .collect();
        let theirs = perf.get(&tid).map_or(&[][..], |v| &v[..]);
        assert!(ours.len() > 10_000, "thread {tid}: {} taken", ours.len());
        assert!(ours == theirs, "thread {tid}: perf's taken branches differ");
    }
}

/// `perf script -f --itrace=b -F FIELDS -i FILE`'s output, which must succeed. `None` (the
/// check skipped, except in CI) without perf.
fn perf_script(file: &Path, fields: &str) -> Option<String> {
    let ok = Command::new("perf")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "perf is not installed (apt-get install linux-perf)"
        );
        return None;
    }
    let out = Command::new("perf")
        .args(["script", "-f", "--itrace=b", "-F", fields, "-i"])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "perf script: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `perf script --itrace=b` of a per-thread recording: each thread's taken branches
/// (from, to) between two traced addresses, in order. `None` (except in CI) without perf.
fn perf_taken_by_thread(file: &Path) -> Option<std::collections::BTreeMap<u32, Vec<(u64, u64)>>> {
    let text = perf_script(file, "tid,ip,addr")?;
    let mut out: std::collections::BTreeMap<u32, Vec<(u64, u64)>> = Default::default();
    for line in text.lines() {
        // "  4242           401a2b =>           401a40"
        let w: Vec<&str> = line.split_whitespace().collect();
        let [tid, from, "=>", to] = w[..] else {
            continue;
        };
        let hex = |x| u64::from_str_radix(x, 16).ok();
        if let (Ok(tid), Some(from @ 1..), Some(to @ 1..)) = (tid.parse(), hex(from), hex(to)) {
            out.entry(tid).or_default().push((from, to));
        }
    }
    Some(out)
}

#[test]
fn the_binaries_are_mapped_once_for_all_the_aux_areas() {
    if !real_program_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // A copy at a path of this test's own (other tests map busybox at the same time).
    let bin = tmp.path().join("busybox-once");
    std::fs::copy(BUSYBOX, &bin).unwrap();
    let mut r = made().recording.clone();
    r.path = bin.as_os_str().as_encoded_bytes().to_vec();
    let file = write(
        tmp.path(),
        "p.data",
        &intel_pt_two_threads(&r).unwrap().bytes,
    );
    let rec =
        tracemill_input::perf::open(&file, &tracemill_input::perf::Lookup::default()).unwrap();
    assert_eq!(rec.traces.len(), 2, "two AUX areas");
    assert!(rec.traces.iter().all(|t| t.bundle.images.len() == 1));
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let n = maps
        .lines()
        .filter(|l| l.ends_with(bin.to_str().unwrap()))
        .count();
    assert_eq!(n, 1, "one mapping of the binary for both areas:\n{maps}");
    drop(rec);
}

#[test]
fn each_areas_pages_of_the_recording_are_released_when_its_decode_is_done() {
    // The decode releases the pages it read in steps of megabytes; an area smaller than
    // a step is released when its decode ends, with the pages of other areas that
    // reading it mapped in (the kernel maps more than the page read), or a recording of
    // thousands of small areas keeps every page of them (RssFile the size of its AUX
    // data). Here two areas of about 160 KB, interleaved in the file.
    if !real_program_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = write(tmp.path(), "released.data", &made().file);
    let rec =
        tracemill_input::perf::open(&file, &tracemill_input::perf::Lookup::default()).unwrap();
    let aux: usize = rec
        .traces
        .iter()
        .map(|t| t.bundle.stream().len() as usize)
        .sum();
    assert!(aux > 64 << 10, "{aux} bytes of AUX data");
    let report = tracemill::run::decode_perf(&rec, &Default::default()).unwrap();
    assert!(report.rows > 0);
    let rss = resident_kib(&file);
    assert!(
        rss * 1024 < aux / 4,
        "{rss} KiB of the recording still resident after decoding {aux} bytes of AUX data"
    );
    drop(rec);
}

/// KiB of `file` resident in this process's mappings of it.
fn resident_kib(file: &Path) -> usize {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let name = file.to_str().unwrap();
    let mut rss = 0usize;
    let mut lines = smaps.lines();
    while lines.by_ref().any(|l| l.ends_with(name)) {
        rss += lines
            .find_map(|l| l.strip_prefix("Rss:"))
            .and_then(|kb| {
                kb.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<usize>()
                    .ok()
            })
            .expect("the mapping's Rss");
    }
    rss
}

/// `perf script --itrace=b -F comm,tid,cpu,time,ip,sym,addr,symoff` of `file`, or None
/// without perf (the check skipped, except in CI).
fn perf_script_text(file: &Path) -> Option<String> {
    let out = match Command::new("perf")
        .args(["script", "-f", "--itrace=b", "-F"])
        .arg("comm,tid,cpu,time,ip,sym,addr,symoff")
        .arg("-i")
        .arg(file)
        .output()
    {
        Ok(o) => o,
        Err(_) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "perf is not installed (apt-get install linux-perf)"
            );
            return None;
        }
    };
    assert!(
        out.status.success(),
        "perf script: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

/// The lines of one CPU (perf interleaves CPUs by time; tracemill writes them CPU by CPU).
fn cpu_lines(text: &str, cpu: u32) -> Vec<&str> {
    let tag = format!(" [{cpu:03}] ");
    text.lines().filter(|l| l.contains(&tag)).collect()
}

/// A line without its time: (up to `[cpu]`, after `time:`).
fn without_time(l: &str) -> (&str, &str) {
    let at = l.find(']').unwrap() + 1;
    let colon = l[at..].find(':').unwrap() + at + 1;
    (&l[..at], &l[colon..])
}

/// Compare perf's lines and tracemill's line for line: every column but the time equal,
/// byte for byte; the time within one interval of the timing packets (perf estimates the
/// time between them its way, tracemill's `time` is its row's TSC, interpolated its own).
fn same_lines(perf: &[&str], ours: &[&str], what: &str) {
    assert_eq!(perf.len(), ours.len(), "{what}: lines");
    assert!(!perf.is_empty(), "{what}: no lines");
    let time = |l: &str| -> f64 {
        let t = l.split_whitespace().nth(3).unwrap();
        t.trim_end_matches(':').parse().unwrap()
    };
    // The largest step of either's time: the interval of the timing packets (both move
    // at a TSC packet; in between perf estimates, tracemill interpolates).
    let step = [perf, ours]
        .iter()
        .flat_map(|ls| ls.windows(2).map(|w| time(w[1]) - time(w[0])))
        .fold(0.0f64, f64::max);
    for (i, (p, o)) in perf.iter().zip(ours).enumerate() {
        let (pa, pb) = without_time(p);
        let (oa, ob) = without_time(o);
        assert_eq!(
            (pa, pb),
            (oa, ob),
            "{what}: line {i}:\nperf:      {p}\ntracemill: {o}"
        );
        // Same width of the time column.
        assert_eq!(
            p.len(),
            o.len(),
            "{what}: line {i}:\nperf:      {p}\ntracemill: {o}"
        );
        assert!(
            (time(p) - time(o)).abs() <= step + 1e-6,
            "{what}: line {i}: time off by more than {step} s:\nperf:      {p}\ntracemill: {o}"
        );
    }
}

#[test]
fn perf_script_text_is_perfs_line_for_line() {
    if !real_program_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = write(tmp.path(), "perf.data", &made().file);
    let out = tmp.path().join("out");
    decode(&file, &out, &[]);
    let text = tmp.path().join("script.txt");
    let (code, err) = tracemill(&[
        "report",
        "perf-script",
        out.to_str().unwrap(),
        "-o",
        text.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    let ours = std::fs::read_to_string(&text).unwrap();
    let Some(perf) = perf_script_text(&file) else {
        return;
    };
    assert_eq!(perf.lines().count(), ours.lines().count(), "lines in all");
    for cpu in [0, 1] {
        same_lines(
            &cpu_lines(&perf, cpu),
            &cpu_lines(&ours, cpu),
            &format!("cpu {cpu}"),
        );
    }
    // Both threads, by their comm, and the trace starts and stops of the syscalls.
    assert!(ours
        .lines()
        .any(|l| l.starts_with("         busybox  4243 [001]")));
    assert!(ours.contains(" =>                0 [unknown]"));

    // A program with symbols: `name+0xoffset` on both sides of the arrow, as perf prints
    // them from the ELF the recording names.
    let cap = qemu::trace_c(
        &qemu::programs_dir().join("recursion.c"),
        &[],
        b"12 8 200 5\n",
    )
    .unwrap();
    let exec = cap.execution;
    let elf = exec.images[0].1.clone();
    let exe = write(tmp.path(), "recursion", &elf);
    let mut images = ImageSet::new();
    images.add_elf("recursion", &elf, None, None).unwrap();
    let mut r = PtRecording::for_elf(&exe, PID, Vec::new()).unwrap();
    r.config = 1 | 1 << 10 | 1 << 13;
    let switch_in = r.start_time + 100_000;
    let tsc = r.clock.perf_time_to_tsc(switch_in + 1_000).unwrap();
    let o = PtOptions {
        tsc: Some(PtTsc {
            start: tsc,
            per_insn: 1,
        }),
        ..PtOptions::default()
    };
    let pt = encode_execution(&images, &o, exec.entry, exec.steps.iter().copied());
    let switch_out = r.clock.tsc_to_perf_time(tsc + pt.summary.instructions) + 1_000;
    r.cpus.push(CpuStream {
        cpu: 0,
        tid: PID,
        pt: pt.bytes,
        switch_in,
        switch_out,
    });
    let file = write(
        tmp.path(),
        "rec.data",
        &intel_pt_two_threads(&r).unwrap().bytes,
    );
    let out = tmp.path().join("rec");
    decode(&file, &out, &[]);
    let (code, err) = tracemill(&[
        "report",
        "perf-script",
        out.to_str().unwrap(),
        "-o",
        text.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    let ours = std::fs::read_to_string(&text).unwrap();
    let perf = perf_script_text(&file).unwrap();
    same_lines(
        &perf.lines().collect::<Vec<_>>(),
        &ours.lines().collect::<Vec<_>>(),
        "recursion",
    );
    assert!(ours.contains(" fib+0x"), "symbols");
}

#[test]
fn sideband_records_and_samples_perf_lost_are_warnings_at_their_offsets_and_rows_stay() {
    // LOST and LOST_SAMPLES name no place in any AUX area's trace (perf dropped sideband
    // records or samples, not trace bytes): warnings with the record's offset, and the
    // trace decodes as it would without them.
    if !real_program_tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut r = made().recording.clone();
    r.lost = Some((3, 5));
    let lossy = intel_pt_two_threads(&r).unwrap().bytes;
    let file = write(tmp.path(), "lost.data", &lossy);
    let rec =
        tracemill_input::perf::open(&file, &tracemill_input::perf::Lookup::default()).unwrap();
    let p = tracemill_perfdata::PerfData::parse(&lossy).unwrap();
    let at = |want: u32| {
        p.records()
            .map(Result::unwrap)
            .find(|i| i.record.kind() == want)
            .expect("the record")
            .offset
    };
    use tracemill_perfdata::record::kind;
    let lost = format!(
        "3 sideband records lost (LOST at offset {:#x})",
        at(kind::LOST)
    );
    let samples = format!(
        "5 samples lost (LOST_SAMPLES at offset {:#x})",
        at(kind::LOST_SAMPLES)
    );
    for want in [&lost, &samples] {
        assert!(
            rec.warnings.iter().any(|w| w.contains(want.as_str())),
            "{want}: {:?}",
            rec.warnings
        );
    }
    let with = tracemill::run::decode_perf(&rec, &Default::default()).unwrap();
    let plain = write(tmp.path(), "plain.data", &made().file);
    let rec = tracemill_input::perf::open(&plain, &Default::default()).unwrap();
    let without = tracemill::run::decode_perf(&rec, &Default::default()).unwrap();
    assert_eq!(
        (with.rows, with.instructions),
        (without.rows, without.instructions)
    );
}
