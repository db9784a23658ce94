//! The input of the Intel PT side-by-side benchmark: one real-program execution encoded
//! both as Intel PT and as RTIT, each trace repeated the same number of times, so that
//! libipt and tracemill (on PT) and tracemill (on RTIT) all walk the same instructions.
//!
//! ```sh
//! cargo run --release -p tracemill-benches --bin pt-bundle -- OUT [SIZE_MB] [RECIPE] [--no-ret-compression]
//! ```
//!
//! The execution is a recipe of the samples (`busybox-sort` by default: Debian's
//! busybox-static sorting 400 lines under qemu), captured once. It is encoded as RTIT by
//! the sample's hardware model and as Intel PT by `datasets::pt_encode`, both user-only,
//! with RET compression, and with no timing packets (the PT encoder makes none yet, so the
//! RTIT side makes none either: the two walks do the same work). With `--no-ret-compression`
//! every trace (RTIT, PT, perf.data) is made without RET compression (DisRETC set; RTIT's
//! CmprsRet clear; perf's `noretcomp`): the form libxdc requires (`benches/libxdc/`), so
//! that libipt, libxdc and tracemill decode the same file. The recipe's TraceStop is
//! dropped so that both traces hold the whole run. Each copy starts at a PSB, so the
//! repeated trace decodes like the program run over and over.
//!
//! Writes `OUT/pt` (`format = "pt"`, `trace.pt`), `OUT/rtit` (`trace.rtit`), both with the
//! program's ELF under `images/`, and `OUT/pt/ipt-images.txt`: the ELF's loadable segments
//! (file, offset, size, address; hex) for libipt (`benches/libipt/ipt-walk.c`). Prints the
//! copies, bytes, branches and instructions of each.
//!
//! And `OUT/perf.data`: the same copies as `perf record -e intel_pt//u` would store them
//! (`datasets::perf_data`), each copy one thread's turn on a CPU (threads 4242 and 4243 of
//! one process, CPUs 0 and 1 in turn), its PT encoded with a TSC in every PSB+ (one tick
//! per instruction, the copies one after another in time) and the ELF mapped from
//! `OUT/pt/images/`: for `perf script --itrace=b` against `tracemill decode` on one file
//! (`benches/scripts/perf-script-bench.sh`). `--cpus=N` spreads the turns over N CPUs
//! (N AUX areas; 2 by default); `--perf-only` writes only `OUT/perf.data` at SIZE_MB (the
//! bundles hold one copy, for their images): the large recordings of the memory aims. `OUT/perf-two.data` is the same with the
//! second thread's turns in another process (5151) that maps a copy of the ELF: two
//! programs at the same addresses, decoded with address spaces.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use object::{Object, ObjectSegment};
use tracemill_datasets::perf_data::{
    intel_pt_two_threads, CpuStream, PtImage, PtProcess, PtRecording,
};
use tracemill_datasets::pt_encode::{encode_execution, PtOptions, PtTsc};
use tracemill_datasets::samples;
use tracemill_decode::image::ImageSet;
use tracemill_decode::rtit::config::ctl;
use tracemill_input::manifest::{ImageKind, Manifest, PtFacts, TraceFormat};

/// IA32_RTIT_CTL of the PT trace: TraceEn, User, BranchEn (SDM 36.2.7.2); DisRETC clear.
const PT_CTL: u64 = 1 | 1 << 3 | 1 << 13;
/// IA32_RTIT_CTL.DisRETC, and perf's `noretcomp` config bit (the same bit).
const DIS_RETC: u64 = 1 << 11;

fn main() -> Result<()> {
    const USAGE: &str = "usage: pt-bundle OUT [SIZE_MB] [RECIPE] [--no-ret-compression] \
                         [--perf-only] [--cpus=N]";
    let all: Vec<String> = std::env::args().skip(1).collect();
    let retc = !all.iter().any(|a| a == "--no-ret-compression");
    let perf_only = all.iter().any(|a| a == "--perf-only");
    let cpus: u32 = match all.iter().find_map(|a| a.strip_prefix("--cpus=")) {
        Some(n) => n.parse().ok().filter(|&n| n > 0).context(USAGE)?,
        None => 2,
    };
    if let Some(a) = all.iter().find(|a| {
        a.starts_with('-')
            && !matches!(a.as_str(), "--no-ret-compression" | "--perf-only")
            && !a.starts_with("--cpus=")
    }) {
        bail!("unknown option {a}\n{USAGE}");
    }
    let mut args = all.into_iter().filter(|a| !a.starts_with('-'));
    let out = PathBuf::from(args.next().context(USAGE)?);
    let size_mb: u64 = args.next().map_or(Ok(50), |s| s.parse())?;
    let name = args.next().unwrap_or_else(|| "busybox-sort".into());
    let mut recipe =
        samples::recipe(&name).with_context(|| format!("no recipe {name} (synth list)"))?;
    recipe.options.ctl = ctl::TRACE_EN | ctl::TRACE_ACTIVE | ctl::DEST | ctl::USER;
    if retc {
        recipe.options.ctl |= ctl::CMPRS_RET;
    }
    recipe.options.trace_stop_at = None;
    recipe.options.overflow = None;
    recipe.options.freq_change_every = None;
    recipe.kernel = false;
    recipe.layout = samples::Layout::Linear;

    eprintln!("capturing {name} and encoding it as RTIT (the sample's model)...");
    let g = samples::generate(&recipe)?;
    if g.execs.len() != 1 {
        bail!(
            "recipe {name} has {} executions; the benchmark takes one",
            g.execs.len()
        );
    }
    let exec = &g.execs[0];
    let mut images = ImageSet::new();
    for (entry, (file, bytes)) in g.manifest.images.iter().zip(&g.images) {
        match entry.kind {
            ImageKind::Elf => images.add_elf(file, bytes, entry.base, entry.cr3)?,
            ImageKind::Raw => images.add_raw(file, bytes, entry.base.unwrap_or(0), entry.cr3),
        };
    }
    eprintln!("encoding it as Intel PT...");
    let pt = encode_execution(
        &images,
        &PtOptions {
            ret_compression: retc,
            user_only: true,
            ..PtOptions::default()
        },
        exec.entry,
        exec.steps.iter().copied(),
    );
    let rtit = &g.output.bytes;
    // With --perf-only the bundles hold one copy: they are there for the program's images.
    let copies = match perf_only {
        true => 1,
        false => (size_mb * 1_000_000).div_ceil(pt.bytes.len() as u64).max(1),
    };

    // The RTIT bundle: the sample's manifest with the trace as one linear file.
    let mut m = g.manifest.clone();
    m.trace = "trace.rtit".into();
    m.ring_offset = None;
    m.topa = None;
    m.trace_hub = None;
    m.generator = None;
    m.labels
        .insert("benchmark".into(), format!("{name} x {copies}"));
    write_bundle(&out.join("rtit"), &m, rtit, copies, &g.images)?;

    let mut p = Manifest::new(if retc { PT_CTL } else { PT_CTL | DIS_RETC });
    p.format = TraceFormat::Pt;
    p.trace = "trace.pt".into();
    p.images = g.manifest.images.clone();
    p.labels = m.labels.clone();
    p.pt = Some(PtFacts {
        ret_compression: Some(retc),
        ..PtFacts::default()
    });
    write_bundle(&out.join("pt"), &p, &pt.bytes, copies, &g.images)?;
    write_ipt_images(&out.join("pt"), &p)?;

    eprintln!("encoding it as Intel PT with TSC packets, for perf.data...");
    let timed = encode_execution(
        &images,
        &PtOptions {
            ret_compression: retc,
            user_only: true,
            tsc: Some(PtTsc {
                start: 0,
                per_insn: 1,
            }),
            ..PtOptions::default()
        },
        exec.entry,
        exec.steps.iter().copied(),
    );
    let elf = std::path::absolute(out.join("pt").join(&p.images[0].path))?;
    let perf_copies = (size_mb * 1_000_000)
        .div_ceil(timed.bytes.len() as u64)
        .max(1);
    write_perf_data(
        &out.join("perf.data"),
        &elf,
        &timed.bytes,
        timed.summary.instructions,
        Turns {
            copies: perf_copies,
            cpus,
        },
        None,
        retc,
    )?;
    if perf_only {
        return Ok(());
    }
    // The same turns with the second thread's as another process's, which maps a copy of
    // the program (another file at the same addresses): its code collides, and the decode
    // selects an address space at each place (`perf-two.data`).
    let copy = out.join("pt").join("program-copy");
    fs::copy(&elf, &copy).with_context(|| format!("{}", copy.display()))?;
    write_perf_data(
        &out.join("perf-two.data"),
        &elf,
        &timed.bytes,
        timed.summary.instructions,
        Turns {
            copies: perf_copies,
            cpus,
        },
        Some(&std::path::absolute(&copy)?),
        retc,
    )?;

    let rows = pt.truth.rows.len() as u64;
    println!(
        "{name}: {copies} copies of one execution{}",
        if retc { "" } else { " (no RET compression)" }
    );
    println!(
        "  per copy: {} instructions, {} branches; PT {} bytes, RTIT {} bytes",
        pt.summary.instructions,
        rows,
        pt.bytes.len(),
        rtit.len()
    );
    println!(
        "  in all: {} instructions, {} branches",
        pt.summary.instructions * copies,
        rows * copies
    );
    for (f, one) in [
        ("pt/trace.pt", pt.bytes.len()),
        ("rtit/trace.rtit", rtit.len()),
    ] {
        println!("  {}: {} bytes", out.join(f).display(), one as u64 * copies);
    }
    Ok(())
}

/// How many turns a recording has, and over how many CPUs they go in turn.
#[derive(Clone, Copy)]
struct Turns {
    copies: u64,
    cpus: u32,
}

/// `OUT/perf.data` of `copies` turns of one execution (`pt`, its TSCs counted from 0,
/// `instructions` long) alternating between two threads, the turns on `cpus` CPUs in
/// turn (each CPU one AUX area); with `other`, the
/// second thread is process 5151's, which maps that file instead; `retc`: the PT was
/// encoded with RET compression (else the recording says `noretcomp`).
fn write_perf_data(
    path: &Path,
    elf: &Path,
    pt: &[u8],
    instructions: u64,
    turns: Turns,
    other: Option<&Path>,
    retc: bool,
) -> Result<()> {
    use tracemill_decode::pt::cpu::Errata;
    use tracemill_decode::pt::packet::Packet;
    use tracemill_decode::pt::sync::PacketReader;
    use tracemill_decode::stream::TraceStream;
    let stream = TraceStream::linear(pt);
    let mut tscs = Vec::new();
    for p in PacketReader::new(&stream, 0, stream.len(), Errata::default()) {
        let p = p.map_err(|e| anyhow::anyhow!("the encoder's own trace: {e:?}"))?;
        if let Packet::Tsc(_) = p.packet {
            tscs.push(p.offset as usize + 1);
        }
    }
    const PID: u32 = 4242;
    let mut r = PtRecording::for_elf(elf, PID, Vec::new()).map_err(anyhow::Error::msg)?;
    r.config = 1 | 1 << 10 | 1 << 13; // pt, tsc, branch: TSC packets in PSB+ only
    if !retc {
        r.config |= DIS_RETC;
    }
    const OTHER: u32 = 5151;
    if let Some(other) = other {
        r.processes.push(PtProcess {
            pid: OTHER,
            parent: None,
            image: Some(PtImage::for_elf(other).map_err(anyhow::Error::msg)?),
            start: r.start_time + 50_000,
        });
    }
    let ns = |tsc: u64| r.clock.tsc_to_perf_time(tsc);
    let Turns { copies, cpus } = turns;
    for k in 0..copies {
        // Copy k runs from TSC `start` for `instructions` ticks, then 100,000 ticks idle.
        let start = 3_000_000 + k * (instructions + 100_000);
        let mut bytes = pt.to_vec();
        for &o in &tscs {
            let mut v = [0u8; 8];
            v[..7].copy_from_slice(&bytes[o..o + 7]);
            let t = u64::from_le_bytes(v) + start;
            bytes[o..o + 7].copy_from_slice(&t.to_le_bytes()[..7]);
        }
        r.cpus.push(CpuStream {
            cpu: (k % cpus as u64) as u32,
            tid: match ((k / 2) % 2, other) {
                (0, _) => PID,
                (_, None) => PID + 1,
                (_, Some(_)) => OTHER,
            },
            pt: bytes,
            switch_in: ns(start) - 1_000,
            switch_out: ns(start + instructions) + 1_000,
        });
    }
    let w = intel_pt_two_threads(&r).map_err(|e| anyhow::anyhow!("{e}"))?;
    fs::write(path, &w.bytes).with_context(|| format!("{}", path.display()))?;
    println!(
        "  {}: {} bytes, {} turns of {} bytes of PT (with TSC)",
        path.display(),
        w.bytes.len(),
        copies,
        pt.len()
    );
    Ok(())
}

/// A bundle directory with the trace repeated `copies` times and its images.
fn write_bundle(
    dir: &Path,
    m: &Manifest,
    trace: &[u8],
    copies: u64,
    images: &[(String, Vec<u8>)],
) -> Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    }
    fs::create_dir_all(dir.join("images"))?;
    let mut all = Vec::with_capacity(trace.len() * copies as usize);
    for _ in 0..copies {
        all.extend_from_slice(trace);
    }
    fs::write(m.trace_path(dir), all)?;
    for (name, bytes) in images {
        fs::write(dir.join("images").join(name), bytes)?;
    }
    fs::write(dir.join("bundle.toml"), m.to_toml())?;
    Ok(())
}

/// `ipt-images.txt`: every loadable segment of the bundle's ELF images, as libipt's
/// `pt_iscache_add_file` takes them (file, offset, size, virtual address).
fn write_ipt_images(dir: &Path, m: &Manifest) -> Result<()> {
    let mut list = String::new();
    for entry in &m.images {
        if entry.kind != ImageKind::Elf || entry.base.is_some() || entry.cr3.is_some() {
            bail!(
                "{}: ipt-walk takes ELF images at their own addresses",
                entry.path
            );
        }
        let bytes = fs::read(dir.join(&entry.path))?;
        let elf = object::File::parse(&*bytes)?;
        for seg in elf.segments() {
            let (offset, size) = seg.file_range();
            if size > 0 {
                list += &format!(
                    "{} {offset:#x} {size:#x} {:#x}\n",
                    entry.path,
                    seg.address()
                );
            }
        }
    }
    fs::write(dir.join("ipt-images.txt"), list)?;
    Ok(())
}
