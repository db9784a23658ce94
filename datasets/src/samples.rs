//! Sample bundles: recipes, and the code that turns a recipe into a bundle with its ground
//! truth. `tracemill synth sample NAME` (or `all`) runs them; the small ones are committed
//! under `datasets/samples/`, each reproducible byte for byte from its recipe.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use arrow_array::{ArrayRef, BooleanArray, RecordBatch, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use tracemill_decode::image::ImageSet;
use tracemill_decode::rtit::config::ctl;
use tracemill_sinks::{FileMeta, TableWriter};

use crate::collected::{write_topa, write_trace_hub, HubPlan, TopaPlan};
use crate::exec::synthetic::{Code, WalkConfig};
use crate::exec::{qemu, Execution};
use crate::kernel::{Kernel, KERNEL_BASE};
use crate::model::{Model, ModelOptions, Output, OverflowPlan, Process, Summary};
use crate::rng::Rng;
use crate::scenarios;
use tracemill_input::manifest::{ImageEntry, ImageKind, Manifest};

/// Where a sample's execution comes from.
#[derive(Clone, Debug)]
pub enum Source {
    /// A C program of `datasets/programs/`, compiled with gcc -static and run under qemu.
    C {
        program: &'static str,
        args: Vec<String>,
        stdin: Vec<u8>,
    },
    /// Debian's busybox-static, run under qemu.
    Busybox { args: Vec<String>, stdin: Vec<u8> },
    /// A seeded synthetic walk over the code of a C program of `datasets/programs/`.
    Synthetic {
        program: &'static str,
        steps: u64,
        seed: u64,
    },
    /// A hand-made spec scenario.
    Scenario(&'static str),
    /// Several processes on one CPU with the kernel traced (context switches send PIPs).
    Processes(Vec<Source>),
}

/// How the bytes are laid out in the file.
#[derive(Clone, Debug, PartialEq)]
pub enum Layout {
    /// As written, from the first packet.
    Linear,
    /// Preceded by this many bytes of junk (as a dump that starts mid-packet would be).
    Junk(usize),
    /// A dump of a circular output buffer of this size (a power of two) that wrapped:
    /// only the last `size` bytes survive, rotated by `ring_offset` (spec 2.3).
    Ring(usize),
    /// Written through ToPA output regions and dumped as collected (`[topa]`).
    Topa(TopaPlan),
    /// Written to a trace hub's range and captured line by line (`[trace_hub]`).
    TraceHub(HubPlan),
}

/// A sample: a source, the model's configuration, and a layout.
#[derive(Clone, Debug)]
pub struct Recipe {
    pub name: &'static str,
    pub about: &'static str,
    pub source: Source,
    pub options: ModelOptions,
    /// Trace the kernel stub too (needs RTIT_CTL.OS).
    pub kernel: bool,
    pub layout: Layout,
}

/// Overflows of the gap samples: every 10k–30k steps, lasting tens of MTC periods.
const LONG_OVERFLOWS: OverflowPlan = OverflowPlan {
    every_steps: (10_000, 30_000),
    duration_steps: (500, 1_500),
    e5: 0.5,
};

fn ctl_user(extra: u64) -> u64 {
    ctl::TRACE_EN | ctl::TRACE_ACTIVE | ctl::DEST | ctl::USER | extra
}

fn text_input(seed: u64, lines: usize) -> Vec<u8> {
    let mut r = Rng::new(seed);
    let words = [
        "atom",
        "silvermont",
        "airmont",
        "trace",
        "packet",
        "branch",
        "cycle",
        "overflow",
        "stitch",
        "decode",
        "parquet",
        "duckdb",
        "tnt",
        "tip",
        "fup",
        "psb",
        "mtc",
    ];
    let mut s = String::new();
    for i in 0..lines {
        let n = 2 + r.below(6) as usize;
        let line: Vec<&str> = (0..n)
            .map(|_| words[r.below(words.len() as u64) as usize])
            .collect();
        s.push_str(&format!("{} {} {}\n", line.join(" "), r.below(1000), i));
    }
    s.into_bytes()
}

/// Every committed sample, and what it covers.
pub fn recipes() -> Vec<Recipe> {
    let d = ModelOptions::default();
    vec![
        Recipe {
            name: "recursion",
            about: "C recursion (fib, ackermann, tree walk): return compression, cycle-accurate \
                    timing with MTC and STS, frequency changes, E6 and E7",
            source: Source::C {
                program: "recursion",
                args: vec![],
                stdin: vec![],
            },
            options: ModelOptions {
                ctl: ctl_user(
                    ctl::CMPRS_RET | ctl::CYCLE_ACC | ctl::MTC_EN | ctl::STS_EN | (1 << 14),
                ),
                seed: 11,
                freq_change_every: Some((200_000, 600_000)),
                ..d.clone()
            },
            kernel: false,
            layout: Layout::Linear,
        },
        Recipe {
            name: "callbacks",
            about: "qsort comparators and dispatch tables through function pointers: a PSB every \
                    ~2 KiB (Pkt_Mask 0), E3 (PSB one packet late), lazy clearing of compression \
                    state up to 4 packets after each PSB, no return compression",
            source: Source::C {
                program: "callbacks",
                args: vec![],
                stdin: vec![],
            },
            options: ModelOptions {
                ctl: ctl_user(ctl::MTC_EN),
                pkt_mask: 0,
                e3: 0.5,
                lazy_clear_max: 4,
                seed: 12,
                ..d.clone()
            },
            kernel: false,
            layout: Layout::Linear,
        },
        Recipe {
            name: "jumptable",
            about: "switch statements compiled to jump tables: buffer overflows (TNT held, FUP.BuffOvf, \
                    E5's spurious TIP), long stalls that fire FUP.PCC, cycle-accurate mode",
            source: Source::C {
                program: "jumptable",
                args: vec![],
                stdin: vec![],
            },
            options: ModelOptions {
                ctl: ctl_user(ctl::CMPRS_RET | ctl::CYCLE_ACC | ctl::MTC_EN | (3 << 14)),
                seed: 13,
                overflow: Some(OverflowPlan {
                    every_steps: (3_000, 15_000),
                    duration_steps: (3, 300),
                    e5: 0.5,
                }),
                stall: Some((0.00003, 2_200_000)),
                ..d.clone()
            },
            kernel: false,
            layout: Layout::Linear,
        },
        Recipe {
            name: "strings",
            about: "string work (tokenize, reverse, hash, printf): LESS_PKTS, MTC_Range 3, sleeps \
                    with STS on wake, Pkt_Mask 2, and 333 bytes of junk before the first PSB",
            source: Source::C {
                program: "strings",
                args: vec![],
                stdin: vec![],
            },
            options: ModelOptions {
                ctl: ctl_user(
                    ctl::CMPRS_RET | ctl::MTC_EN | ctl::STS_EN | ctl::LESS_PKTS | (3 << 14),
                ),
                pkt_mask: 2,
                seed: 14,
                sleep_every: Some((300_000, 900_000)),
                ..d.clone()
            },
            kernel: false,
            layout: Layout::Junk(333),
        },
        Recipe {
            name: "busybox-sort",
            about: "busybox sort on 400 lines: syscalls under user-only tracing (FUP.PGD/FUP.PGE), \
                    cycle-accurate timing, and a TraceStop before the end",
            source: Source::Busybox {
                args: vec!["sort".into()],
                stdin: text_input(1, 400),
            },
            options: ModelOptions {
                ctl: ctl_user(ctl::CMPRS_RET | ctl::CYCLE_ACC | ctl::MTC_EN | ctl::STS_EN),
                seed: 15,
                trace_stop_at: Some(60_000),
                ..d.clone()
            },
            kernel: false,
            layout: Layout::Linear,
        },
        Recipe {
            name: "busybox-gzip-ring",
            about: "busybox gzip: a dump of a 64 KiB circular output buffer that wrapped, with \
                    ring_offset, starting mid-packet",
            source: Source::Busybox {
                args: vec!["gzip".into(), "-c".into()],
                stdin: text_input(2, 300),
            },
            options: ModelOptions {
                ctl: ctl_user(ctl::CMPRS_RET | ctl::MTC_EN),
                seed: 16,
                ..d.clone()
            },
            kernel: false,
            layout: Layout::Ring(64 << 10),
        },
        Recipe {
            name: "kernel-processes",
            about: "two busybox processes (sha256sum, awk) on one CPU with the kernel traced: \
                    FUP.FAR+TIP on syscalls and timer interrupts, PIP on context switches, \
                    CR3-tagged images, STS on CR3 writes, E1 on the kernel's prefixed SYSRET",
            source: Source::Processes(vec![
                Source::Busybox {
                    args: vec!["sha256sum".into()],
                    stdin: text_input(3, 200),
                },
                Source::Busybox {
                    args: vec!["awk".into(), "{ n += $3 } END { print n }".into()],
                    stdin: text_input(4, 150),
                },
            ]),
            options: ModelOptions {
                ctl: ctl::TRACE_EN
                    | ctl::TRACE_ACTIVE
                    | ctl::DEST
                    | ctl::USER
                    | ctl::OS
                    | ctl::CMPRS_RET
                    | ctl::MTC_EN
                    | ctl::STS_EN
                    | ctl::STS_ON_CR3,
                seed: 17,
                ..d.clone()
            },
            kernel: true,
            layout: Layout::Linear,
        },
        Recipe {
            name: "synthetic",
            about: "a seeded synthetic walk over the jumptable program's code: interrupts \
                    inside blocks, wild returns, all timing packets",
            source: Source::Synthetic {
                program: "jumptable",
                steps: 150_000,
                seed: 7,
            },
            options: ModelOptions {
                ctl: ctl_user(
                    ctl::CMPRS_RET | ctl::CYCLE_ACC | ctl::MTC_EN | ctl::STS_EN | (2 << 14),
                ),
                seed: 18,
                ..d.clone()
            },
            kernel: false,
            layout: Layout::Linear,
        },
        Recipe {
            name: "gaps-mtc",
            about: "timing across gaps without cycle-accurate mode (STS, MTC every 128 TSC \
                    ticks): syscalls under user-only tracing (FUP.PGD/FUP.PGE, MTCs in the \
                    disabled stretches) and overflows lasting tens of MTC periods",
            source: Source::C {
                program: "strings",
                args: vec![],
                stdin: vec![],
            },
            options: ModelOptions {
                ctl: ctl_user(ctl::CMPRS_RET | ctl::MTC_EN | ctl::STS_EN),
                seed: 19,
                overflow: Some(LONG_OVERFLOWS),
                ..d.clone()
            },
            kernel: false,
            layout: Layout::Linear,
        },
        Recipe {
            name: "gaps-cyc",
            about: "timing across gaps in cycle-accurate mode with STS and MTC: syscalls under \
                    user-only tracing (FUP.PGD/FUP.PGE) and overflows lasting tens of MTC \
                    periods",
            source: Source::C {
                program: "strings",
                args: vec![],
                stdin: vec![],
            },
            options: ModelOptions {
                ctl: ctl_user(ctl::CMPRS_RET | ctl::CYCLE_ACC | ctl::MTC_EN | ctl::STS_EN),
                seed: 20,
                overflow: Some(LONG_OVERFLOWS),
                ..d.clone()
            },
            kernel: false,
            layout: Layout::Linear,
        },
        Recipe {
            name: "topa-wrapped",
            about: "a ToPA dump: two tables of 4-16 KiB output regions (INT on some), the \
                    second's END entry back to the first, wrapped; regions dumped out of \
                    order with the output-pointer MSRs",
            source: Source::Synthetic {
                program: FREESTANDING,
                steps: 120_000,
                seed: 21,
            },
            options: ModelOptions {
                ctl: ctl_user(ctl::CMPRS_RET | ctl::CYCLE_ACC | ctl::MTC_EN | ctl::STS_EN),
                seed: 21,
                ..d.clone()
            },
            kernel: false,
            layout: Layout::Topa(TopaPlan {
                sizes: vec![1, 0, 2, 0, 1, 0],
                first_table: 3,
                circular: true,
                int_every: 2,
                seed: 21,
            }),
        },
        Recipe {
            name: "trace-hub",
            about: "a trace-hub capture: 64-byte line writes to a 4 KiB range, tracing \
                    enabled at an unaligned offset, lines flushed early (partial, invalid \
                    bytes at the ends), some received out of order within spec 2.3.2",
            source: Source::Synthetic {
                program: FREESTANDING,
                steps: 150_000,
                seed: 22,
            },
            options: ModelOptions {
                ctl: ctl_user(ctl::CMPRS_RET | ctl::MTC_EN | ctl::STS_EN | (1 << 14)),
                seed: 22,
                ..d.clone()
            },
            kernel: false,
            layout: Layout::TraceHub(HubPlan {
                size: 4096,
                start_offset: 0x2C5,
                flush_every: 2048,
                reorder: 0.2,
                seed: 22,
            }),
        },
        scenario_recipe("table3", "spec Table 3: the IP-filtered trace example"),
        scenario_recipe("figure6", "spec Figure 6: return compression without nested calls"),
        scenario_recipe("figure7", "spec Figure 7: return compression with nested calls"),
    ]
}

fn scenario_recipe(name: &'static str, about: &'static str) -> Recipe {
    let s = scenarios::all()
        .into_iter()
        .find(|s| s.name == name)
        .expect("scenario");
    Recipe {
        name: match name {
            "table3" => "scenario-table3",
            "figure6" => "scenario-figure6",
            _ => "scenario-figure7",
        },
        about,
        source: Source::Scenario(name),
        options: s.options,
        kernel: false,
        layout: Layout::Linear,
    }
}

/// Find a recipe by name.
pub fn recipe(name: &str) -> Option<Recipe> {
    recipes().into_iter().find(|r| r.name == name)
}

/// An image a bundle ships: (file name in images/, bytes, kind, load base for raw
/// images, CR3 tag).
type ShippedImage = (String, Vec<u8>, ImageKind, Option<u64>, Option<u64>);

/// Programs and images an execution needs.
struct Prepared {
    images: Vec<ShippedImage>,
    execs: Vec<Execution>,
}

fn busybox_path() -> PathBuf {
    PathBuf::from("/bin/busybox")
        .canonicalize()
        .unwrap_or_else(|_| PathBuf::from("/usr/bin/busybox"))
}

fn capture(src: &Source) -> Result<Execution> {
    match src {
        Source::C {
            program,
            args,
            stdin,
        } => {
            let path = qemu::programs_dir().join(format!("{program}.c"));
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let c = qemu::trace_c(&path, &a, stdin)
                .with_context(|| format!("tracing {}", path.display()))?;
            let mut e = c.execution;
            e.name = program.to_string();
            // The image keeps its symbols and debug info (the program's own, ~80 KiB):
            // reports name functions and lines from them.
            Ok(e)
        }
        Source::Busybox { args, stdin } => {
            let a: Vec<&str> = args.iter().map(String::as_str).collect();
            let c = qemu::trace(&busybox_path(), &a, stdin).context("tracing busybox")?;
            let mut e = c.execution;
            e.name = format!("busybox {}", args.join(" "));
            Ok(e)
        }
        Source::Synthetic {
            program,
            steps,
            seed,
        } => {
            // The walk starts from the stripped ELF's call targets (as it always has, so
            // the trace stays the same); the bundle ships the ELF with its symbols and
            // debug info, whose code is the same.
            let elf = compile(program)?;
            let stripped = strip(&elf).unwrap_or_else(|| elf.clone());
            let code = Code::from_elf(program, &stripped)?;
            let mut e = code.execution(&WalkConfig::new(*seed, *steps));
            for (_, bytes) in &mut e.images {
                *bytes = elf.clone();
            }
            Ok(e)
        }
        Source::Scenario(_) | Source::Processes(_) => unreachable!("handled by the caller"),
    }
}

/// The program of `datasets/programs/` built without libc (`-nostdlib`): a code image of
/// a few KiB, for small samples whose execution is a synthetic walk.
const FREESTANDING: &str = "freestanding";

/// Compile a program of `datasets/programs/` and return its ELF bytes (with symbols and
/// debug info, which `tracemill report` reads; the freestanding program is stripped, as
/// its samples were made).
fn compile(program: &str) -> Result<Vec<u8>> {
    let src = qemu::programs_dir().join(format!("{program}.c"));
    let dir = std::env::temp_dir().join(format!("tracemill-synth-{}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let exe = dir.join(program);
    if program == FREESTANDING {
        let out = std::process::Command::new("gcc")
            .args(["-static", "-nostdlib", "-O2", "-fno-pie", "-no-pie"])
            .args(["-fno-stack-protector", "-fcf-protection=none", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .context("running gcc")?;
        if !out.status.success() {
            bail!(
                "gcc {}: {}",
                src.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    } else {
        qemu::compile_c(&src, &exe)?;
    }
    let bytes = fs::read(&exe)?;
    let _ = fs::remove_dir_all(&dir);
    if program == FREESTANDING {
        return Ok(strip(&bytes).unwrap_or(bytes));
    }
    Ok(bytes)
}

/// `strip` an ELF (symbols and debug sections only; code stays where it is).
fn strip(elf: &[u8]) -> Option<Vec<u8>> {
    let dir = std::env::temp_dir().join(format!("tracemill-strip-{}", std::process::id()));
    fs::create_dir_all(&dir).ok()?;
    let (i, o) = (dir.join("in"), dir.join("out"));
    fs::write(&i, elf).ok()?;
    let ok = std::process::Command::new("strip")
        .arg("-o")
        .arg(&o)
        .arg(&i)
        .status()
        .ok()?
        .success();
    let out = if ok { fs::read(&o).ok() } else { None };
    let _ = fs::remove_dir_all(&dir);
    out
}

/// The bundle files of a generated sample.
pub struct Generated {
    pub manifest: Manifest,
    pub output: Output,
    /// Offset shift between the model's stream and the bundle's stream (junk, ring).
    pub shift: i64,
    pub file_bytes: Vec<u8>,
    pub images: Vec<(String, Vec<u8>)>,
    /// The executions the trace records (one, or one per process), for encoding them
    /// again in another form (the Intel PT benchmark encodes the same execution as PT).
    pub execs: Vec<Execution>,
}

/// Run a recipe: capture or build its execution and run the model.
pub fn generate(r: &Recipe) -> Result<Generated> {
    let mut o = r.options.clone();
    let kernel = Kernel::new(KERNEL_BASE, true);
    let prepared = match &r.source {
        Source::Scenario(name) => {
            let s = scenarios::all()
                .into_iter()
                .find(|s| s.name == *name)
                .expect("known scenario");
            Prepared {
                images: vec![(
                    format!("{name}.bin"),
                    s.code.clone(),
                    ImageKind::Raw,
                    Some(s.base),
                    None,
                )],
                execs: vec![Execution {
                    name: s.name.to_string(),
                    images: vec![],
                    entry: s.entry,
                    steps: s.steps.clone(),
                }],
            }
        }
        Source::Processes(list) => {
            let mut execs = Vec::new();
            let mut images = Vec::new();
            for (i, src) in list.iter().enumerate() {
                let e = capture(src)?;
                let cr3 = 0x1000 * (i as u64 + 1);
                for (n, bytes) in &e.images {
                    images.push((n.clone(), bytes.clone(), ImageKind::Elf, None, Some(cr3)));
                }
                execs.push(e);
            }
            images.push((
                "kernel.bin".to_string(),
                kernel.code.clone(),
                ImageKind::Raw,
                Some(kernel.base),
                None,
            ));
            Prepared { images, execs }
        }
        src => {
            let e = capture(src)?;
            let mut images: Vec<_> = e
                .images
                .iter()
                .map(|(n, b)| (n.clone(), b.clone(), ImageKind::Elf, None, None))
                .collect();
            if r.kernel {
                images.push((
                    "kernel.bin".to_string(),
                    kernel.code.clone(),
                    ImageKind::Raw,
                    Some(kernel.base),
                    None,
                ));
            }
            Prepared {
                images,
                execs: vec![e],
            }
        }
    };
    // The model's view of the code.
    let mut set = ImageSet::new();
    for (name, bytes, kind, base, cr3) in &prepared.images {
        match kind {
            ImageKind::Raw => {
                set.add_raw(name, bytes, base.unwrap_or(0), *cr3);
            }
            ImageKind::Elf => {
                set.add_elf(name, bytes, *base, *cr3)?;
            }
        }
    }
    o.record_packets = false;
    let output = if let Source::Processes(_) = r.source {
        let procs: Vec<Process<_>> = prepared
            .execs
            .iter()
            .enumerate()
            .map(|(i, e)| Process {
                cr3: 0x1000 * (i as u64 + 1),
                entry: e.entry,
                steps: e.steps.iter().copied(),
            })
            .collect();
        Model::new(o.clone(), &set)
            .with_kernel(&kernel)
            .run_processes(procs, (2_000, 8_000))
    } else {
        let e = &prepared.execs[0];
        let m = Model::new(o.clone(), &set);
        let m = if r.kernel { m.with_kernel(&kernel) } else { m };
        m.run(e.entry, e.steps.iter().copied())
    };

    let mut manifest = Manifest::new(o.ctl);
    let (file_bytes, shift) = layout(&output.bytes, &r.layout, o.seed, &mut manifest);
    manifest.guaranteed_ratio = Some(o.guaranteed_ratio);
    let mut images = Vec::new();
    let mut seen = BTreeMap::new();
    for (name, bytes, kind, base, cr3) in &prepared.images {
        let file = name.replace(' ', "_");
        if !seen.contains_key(&file) {
            seen.insert(file.clone(), ());
            images.push((file.clone(), bytes.clone()));
        }
        manifest.images.push(ImageEntry {
            path: format!("images/{file}"),
            base: *base,
            cr3: *cr3,
            space: None,
            kind: *kind,
            symbols: None,
        });
    }
    manifest.labels.insert("sample".into(), r.name.into());
    manifest.labels.insert(
        "program".into(),
        prepared
            .execs
            .iter()
            .map(|e| e.name.clone())
            .collect::<Vec<_>>()
            .join(" + "),
    );
    let mut gen = toml::Table::new();
    gen.insert("recipe".into(), r.name.into());
    gen.insert("about".into(), r.about.into());
    gen.insert(
        "model".into(),
        toml::Value::try_from(&o).context("model options to TOML")?,
    );
    manifest.generator = Some(gen);
    Ok(Generated {
        manifest,
        output,
        shift,
        file_bytes,
        images,
        execs: prepared.execs,
    })
}

/// Lay the stream out as a file, setting the manifest's facts about the form. Returns the
/// file bytes and how stream offsets in the bundle relate to the model's
/// (`bundle_stream_offset = model_offset + shift`).
pub fn layout(bytes: &[u8], l: &Layout, seed: u64, manifest: &mut Manifest) -> (Vec<u8>, i64) {
    let (file, ring_offset, shift) = match l {
        Layout::Topa(plan) => {
            let laid = write_topa(bytes, plan);
            manifest.topa = Some(laid.form);
            manifest.trace = "trace.topa".into();
            return (laid.file, laid.shift);
        }
        Layout::TraceHub(plan) => {
            let laid = write_trace_hub(bytes, plan);
            manifest.trace_hub = Some(laid.form);
            manifest.trace = "trace.hub".into();
            return (laid.file, laid.shift);
        }
        l => layout_plain(bytes, l, seed),
    };
    manifest.ring_offset = ring_offset;
    (file, shift)
}

fn layout_plain(bytes: &[u8], l: &Layout, seed: u64) -> (Vec<u8>, Option<u64>, i64) {
    match *l {
        Layout::Linear | Layout::Topa(_) | Layout::TraceHub(_) => (bytes.to_vec(), None, 0),
        Layout::Junk(n) => {
            // Bytes that look like the tail of packets, but never a PSB.
            let mut r = Rng::new(seed ^ 0x5EED);
            let mut out: Vec<u8> = (0..n).map(|_| r.below(256) as u8 | 1).collect();
            out.extend_from_slice(bytes);
            (out, None, n as i64)
        }
        Layout::Ring(size) => {
            if bytes.len() <= size {
                return (bytes.to_vec(), None, 0);
            }
            let n = bytes.len();
            let mut file = vec![0u8; size];
            for (k, &b) in bytes.iter().enumerate().skip(n - size) {
                file[k % size] = b;
            }
            (file, Some((n % size) as u64), -((n - size) as i64))
        }
    }
}

/// Write a generated sample as a bundle directory (replacing its files).
pub fn write_bundle(dir: &Path, g: &Generated) -> Result<()> {
    fs::create_dir_all(dir.join("images"))?;
    fs::create_dir_all(dir.join("truth"))?;
    fs::write(g.manifest.trace_path(dir), &g.file_bytes)?;
    for (name, bytes) in &g.images {
        fs::write(dir.join("images").join(name), bytes)?;
    }
    fs::write(dir.join("bundle.toml"), g.manifest.to_toml())?;
    write_truth(&dir.join("truth"), g)?;
    Ok(())
}

/// `truth/summary.json` as written.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TruthSummary {
    #[serde(flatten)]
    pub model: crate::model::Summary,
    /// `bundle stream offset = model offset + shift` (junk before the trace, ring dumps).
    pub shift: i64,
    /// The file is a dump of a ring (or a ToPA chain) that wrapped: only a suffix of the
    /// truth is decodable.
    pub ring: bool,
    /// Basic blocks executed (distinct), and block executions, over rows that are not lost.
    pub blocks: u64,
    pub block_executions: u64,
}

fn write_truth(dir: &Path, g: &Generated) -> Result<()> {
    let t = &g.output.truth;
    let mut rows = t.rows.clone();
    for o in &mut rows.offset {
        *o = (*o as i64 + g.shift).max(0) as u64;
    }
    let meta = FileMeta {
        source: "truth (tracemill hardware model)".into(),
        source_size: g.file_bytes.len() as u64,
        rtit_ctl: g.manifest.rtit_ctl,
        extra: vec![],
    };
    let mut w = TableWriter::create(dir.join("branches.parquet"), "branches", &meta)?;
    w.write_branches(rows)?;
    w.finish()?;

    // Truth-only columns, by row.
    let extra = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("lost", DataType::Boolean, false),
            Field::new("cyc_exact", DataType::Boolean, false),
            Field::new("e6_zero_before", DataType::UInt32, false),
            Field::new("block_start", DataType::UInt64, false),
            Field::new("block_insns", DataType::UInt32, false),
        ])),
        vec![
            Arc::new(BooleanArray::from(t.lost.clone())) as ArrayRef,
            Arc::new(BooleanArray::from(t.cyc_exact.clone())),
            Arc::new(UInt32Array::from(t.e6_zero_before.clone())),
            Arc::new(UInt64Array::from(t.block_start.clone())),
            Arc::new(UInt32Array::from(t.block_insns.clone())),
        ],
    )?;
    write_parquet(&dir.join("rows.parquet"), &extra)?;

    // Partial blocks (left before their branch), by the row that carries them.
    let p = &t.partials;
    let partials = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("row", DataType::UInt64, false),
            Field::new("start", DataType::UInt64, false),
            Field::new("end", DataType::UInt64, false),
            Field::new("insns", DataType::UInt32, false),
        ])),
        vec![
            Arc::new(UInt64Array::from_iter_values(p.iter().map(|p| p.row))) as ArrayRef,
            Arc::new(UInt64Array::from_iter_values(p.iter().map(|p| p.start))),
            Arc::new(UInt64Array::from_iter_values(p.iter().map(|p| p.end))),
            Arc::new(UInt32Array::from_iter_values(p.iter().map(|p| p.insns))),
        ],
    )?;
    write_parquet(&dir.join("partial_blocks.parquet"), &partials)?;
    let (blocks, block_executions) = count_blocks(g);
    let summary = TruthSummary {
        model: g.output.summary.clone(),
        shift: g.shift,
        ring: g.manifest.ring_offset.is_some()
            || g.manifest.topa.as_ref().is_some_and(|t| t.wrapped),
        blocks,
        block_executions,
    };
    fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&summary)? + "\n",
    )?;
    Ok(())
}

/// Blocks per the coverage definition, over the rows a decoder can prove (and the partial
/// blocks those rows carry).
fn count_blocks(g: &Generated) -> (u64, u64) {
    let t = &g.output.truth;
    let mut seen = std::collections::HashSet::new();
    let mut execs = 0;
    for i in 0..t.rows.len() {
        if !t.lost[i] {
            seen.insert((t.block_start[i], t.rows.ip[i]));
            execs += 1;
        }
    }
    for p in &t.partials {
        if t.lost.get(p.row as usize) == Some(&false) {
            seen.insert((p.start, p.end));
            execs += 1;
        }
    }
    (seen.len() as u64, execs)
}

fn write_parquet(path: &Path, batch: &RecordBatch) -> Result<()> {
    let f = fs::File::create(path).with_context(|| format!("{}", path.display()))?;
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
        .build();
    let mut w = parquet::arrow::ArrowWriter::try_new(f, batch.schema(), Some(props))?;
    w.write(batch)?;
    w.close()?;
    Ok(())
}

/// Generate recipe `name` (or `all`) into `out/<name>/`.
pub fn synth_samples(names: &[String], out: &Path) -> Result<Vec<PathBuf>> {
    let all = recipes();
    let chosen: Vec<&Recipe> = if names.iter().any(|n| n == "all") {
        all.iter().collect()
    } else {
        let mut v = Vec::new();
        for n in names {
            match all.iter().find(|r| r.name == n) {
                Some(r) => v.push(r),
                None => bail!(
                    "no sample named {n:?}; known: {}",
                    all.iter().map(|r| r.name).collect::<Vec<_>>().join(", ")
                ),
            }
        }
        v
    };
    let mut dirs = Vec::new();
    for r in chosen {
        let g = generate(r).with_context(|| format!("sample {}", r.name))?;
        let dir = out.join(r.name);
        write_bundle(&dir, &g)?;
        dirs.push(dir);
    }
    Ok(dirs)
}

/// A large synthetic bundle for benchmarks: a seeded walk over `elf`'s code, run through the
/// model until the trace reaches `size` bytes. No per-row truth is kept (it would not fit);
/// `truth/summary.json` has the counts.
pub fn synth_big(elf_path: &Path, size: u64, seed: u64, ctl: u64, out: &Path) -> Result<Summary> {
    synth_big_with(elf_path, size, seed, ctl, true, out)
}

/// [`synth_big`]; `psbs` false: one PSB at the start and none after (the model's PSB
/// period set past any trace it makes), a stretch without PSBs of `size` bytes, which the
/// decoder must get through in bounded memory.
pub fn synth_big_with(
    elf_path: &Path,
    size: u64,
    seed: u64,
    ctl: u64,
    psbs: bool,
    out: &Path,
) -> Result<Summary> {
    let elf = fs::read(elf_path).with_context(|| format!("reading {}", elf_path.display()))?;
    let name = elf_path
        .file_name()
        .map_or("program".into(), |n| n.to_string_lossy().into_owned());
    let code = Code::from_elf(&name, &elf)?;
    let mut cfg = WalkConfig::new(seed, u64::MAX);
    cfg.interrupt_rate = 1.0 / 65536.0;
    let mut walk = code.walk(&cfg);
    let o = ModelOptions {
        ctl,
        seed,
        keep_truth: false,
        // A PSB once 2^(11 + pkt_mask) bytes have gone out: 2 GiB, past what this makes.
        pkt_mask: if psbs {
            ModelOptions::default().pkt_mask
        } else {
            20
        },
        ..ModelOptions::default()
    };
    if !psbs && size >= 1 << 31 {
        bail!("a trace without PSBs is made up to 2 GiB");
    }
    let mut m = Model::new(o.clone(), code.images());
    m.start(walk.entry());
    while (m.bytes_written() as u64) < size {
        match walk.next() {
            Some(s) => m.feed(&s),
            None => break,
        }
    }
    let output = m.end();
    fs::create_dir_all(out.join("images"))?;
    fs::create_dir_all(out.join("truth"))?;
    fs::write(out.join("trace.rtit"), &output.bytes)?;
    fs::write(out.join("images").join(&name), &elf)?;
    let mut manifest = Manifest::new(ctl);
    manifest.guaranteed_ratio = Some(o.guaranteed_ratio);
    manifest.images.push(ImageEntry {
        path: format!("images/{name}"),
        base: None,
        cr3: None,
        space: None,
        kind: ImageKind::Elf,
        symbols: None,
    });
    manifest
        .labels
        .insert("sample".into(), "synthetic-big".into());
    let mut gen = toml::Table::new();
    gen.insert("recipe".into(), "synth_big".into());
    gen.insert("walk_seed".into(), (seed as i64).into());
    gen.insert("model".into(), toml::Value::try_from(&o)?);
    manifest.generator = Some(gen);
    fs::write(out.join("bundle.toml"), manifest.to_toml())?;
    fs::write(
        out.join("truth/summary.json"),
        serde_json::to_string_pretty(&output.summary)? + "\n",
    )?;
    Ok(output.summary)
}
