//! An input opened once: [`Source::open`] decides its format, refuses what does not fit,
//! and says what is wrong with it before anything is decoded.
//!
//! Every face of tracemill (the command line's `decode`, `dump` and `ingest`, and the
//! Python package's `decode` and `dump`) opens its input here and makes its checks here
//! ([`check_format`], [`part_warnings`]); the decode reports the same warnings, made by the
//! same functions. An error about an option the user gave is an [`InputError`] that
//! carries the option's identity ([`Opt`]), so that each face names the option its own
//! way ([`Face`]: `--ctl` on the command line, `ctl=` in Python).
//!
//! The format is decided once, in this order: the format given (`--format`), a bundle's
//! `bundle.toml`, perf's magic (a perf.data is Intel PT), the file's extension (`.pt`,
//! `.rtit`), the first PSB found (its format's), else RTIT. Whatever decided it, a trace
//! whose first PSB is the other format's is refused by name: it would decode into
//! garbage.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use tracemill_decode::pt::cpu::Errata;
use tracemill_decode::sniff;
use tracemill_decode::stream::TraceStream;

use crate::bundle::{map_file, Bundle, Bytes, Reach};
use crate::manifest::{ImageEntry, Manifest, PtFacts, TraceFormat};
use crate::perf::{self, Lookup, Recording};

/// An option a user gives about an input, whichever face it is given in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Opt {
    /// RTIT_CTL / IA32_RTIT_CTL.
    Ctl,
    /// A code image.
    Image,
    /// The trace format.
    Format,
    /// A `bundle.toml`'s text for a trace given as bytes (Python only).
    Config,
    /// Intel PT: the processor (errata).
    Cpu,
    /// Intel PT: IA32_RTIT_CTL.MTCFreq.
    MtcFreq,
    /// Intel PT: the maximum non-turbo ratio.
    NomFreq,
    /// Intel PT: CPUID.15H:EAX.
    Cpuid15Eax,
    /// Intel PT: CPUID.15H:EBX.
    Cpuid15Ebx,
    /// perf.data: where the recorded binaries are (perf's --symfs).
    Symfs,
    /// perf.data: the build-id cache.
    BuildidDir,
    /// perf.data: the kernel's ELF image.
    Vmlinux,
    /// perf.data: a copy of /proc/kcore.
    Kcore,
}

/// Where a message is shown: the command line, or the Python package.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Face {
    #[default]
    Cli,
    Python,
}

impl Opt {
    /// How `face` names the option: `--ctl` on the command line, `ctl=` in Python.
    pub fn name(self, face: Face) -> &'static str {
        use Opt::*;
        match face {
            Face::Cli => match self {
                Ctl => "--ctl",
                Image => "--image",
                Format => "--trace-format",
                // The command line has no such option: a bundle directory's bundle.toml.
                Config => "bundle.toml",
                Cpu => "--cpu",
                MtcFreq => "--mtc-freq",
                NomFreq => "--nom-freq",
                Cpuid15Eax => "--cpuid-0x15.eax",
                Cpuid15Ebx => "--cpuid-0x15.ebx",
                Symfs => "--symfs",
                BuildidDir => "--buildid-dir",
                Vmlinux => "--vmlinux",
                Kcore => "--kcore",
            },
            Face::Python => match self {
                Ctl => "ctl=",
                Image => "images=",
                Format => "format=",
                Config => "config=",
                Cpu => "cpu=",
                MtcFreq => "mtc_freq=",
                NomFreq => "nom_freq=",
                Cpuid15Eax => "cpuid_0x15_eax=",
                Cpuid15Ebx => "cpuid_0x15_ebx=",
                Symfs => "symfs=",
                BuildidDir => "buildid_dir=",
                Vmlinux => "vmlinux=",
                Kcore => "kcore=",
            },
        }
    }
}

impl Opt {
    /// The option set to `value` as `face` writes it: `--format pt`, `format="pt"`.
    pub fn set(self, face: Face, value: &str) -> String {
        match face {
            Face::Cli => format!("{} {value}", self.name(face)),
            Face::Python => format!("{}{value:?}", self.name(face)),
        }
    }
}

/// The Intel PT facts a trace does not carry, given over a bundle's `[pt]` (ptdump's and
/// ptxed's `--cpu`, `--mtc-freq`, `--nom-freq`, `--cpuid-0x15.*`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PtOverrides {
    /// `Some(None)`: the processor is unknown (`--cpu none`).
    pub cpu: Option<Option<String>>,
    pub mtc_freq: Option<u8>,
    pub nom_freq: Option<u8>,
    pub tsc_ctc_ratio_d: Option<u32>,
    pub tsc_ctc_ratio_n: Option<u32>,
}

impl PtOverrides {
    /// The options given, in the order help lists them.
    pub fn given(&self) -> Vec<Opt> {
        [
            (self.cpu.is_some(), Opt::Cpu),
            (self.mtc_freq.is_some(), Opt::MtcFreq),
            (self.nom_freq.is_some(), Opt::NomFreq),
            (self.tsc_ctc_ratio_d.is_some(), Opt::Cpuid15Eax),
            (self.tsc_ctc_ratio_n.is_some(), Opt::Cpuid15Ebx),
        ]
        .into_iter()
        .filter_map(|(on, o)| on.then_some(o))
        .collect()
    }

    /// `facts` with the ones given here set.
    pub fn apply_to(&self, facts: &mut PtFacts) {
        if let Some(c) = &self.cpu {
            facts.cpu = c.clone();
        }
        facts.mtc_freq = self.mtc_freq.or(facts.mtc_freq);
        facts.nom_freq = self.nom_freq.or(facts.nom_freq);
        facts.tsc_ctc_ratio_d = self.tsc_ctc_ratio_d.or(facts.tsc_ctc_ratio_d);
        facts.tsc_ctc_ratio_n = self.tsc_ctc_ratio_n.or(facts.tsc_ctc_ratio_n);
    }
}

/// What the caller says about an input besides where it is.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// The trace format (`--format`); checked against a bundle's and a perf.data's.
    pub format: Option<TraceFormat>,
    /// RTIT_CTL (`--ctl`), over a bundle's; a bare RTIT trace needs it.
    pub ctl: Option<u64>,
    /// Code images besides a bundle's (`--image`), paths as the caller means them.
    pub images: Vec<ImageEntry>,
    /// Intel PT facts over a bundle's `[pt]`.
    pub pt: PtOverrides,
    /// A trace given as bytes: its description (a `bundle.toml`'s text, parsed).
    pub config: Option<Manifest>,
    /// perf.data: where its binaries are.
    pub lookup: Lookup,
    /// Where the files a `bundle.toml` names may be.
    pub reach: Reach,
}

impl Overrides {
    /// The perf.data-only options given (`--symfs`, `--buildid-dir`, `--vmlinux`,
    /// `--kcore`).
    fn perf_only(&self) -> Vec<Opt> {
        let l = &self.lookup;
        [
            (l.symfs.is_some(), Opt::Symfs),
            (l.buildid_dir.is_some(), Opt::BuildidDir),
            (!l.vmlinux.is_empty(), Opt::Vmlinux),
            (!l.kcore.is_empty(), Opt::Kcore),
        ]
        .into_iter()
        .filter_map(|(on, o)| on.then_some(o))
        .collect()
    }

    /// The options a perf.data decides itself, given.
    fn not_for_perf(&self) -> Vec<Opt> {
        let mut v: Vec<Opt> = [
            (self.ctl.is_some(), Opt::Ctl),
            (!self.images.is_empty(), Opt::Image),
            (self.config.is_some(), Opt::Config),
        ]
        .into_iter()
        .filter_map(|(on, o)| on.then_some(o))
        .collect();
        v.extend(self.pt.given());
        v
    }
}

/// What kind of input a [`Source`] was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A bundle directory (`bundle.toml`).
    Bundle,
    /// A trace file on its own.
    Bare,
    /// A trace given as bytes.
    Memory,
    /// A perf.data recording.
    PerfData,
}

/// The input's traces, opened.
// One per input, moved rather than copied: a bundle's inline size does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Opened {
    /// A bundle, a bare trace, or a trace in memory: one trace.
    Bundle(Bundle),
    /// A perf.data: a trace per AUX area, with its threads and address spaces.
    Recording(Recording),
}

/// An input, opened: its traces, format and configuration, and what is wrong with it.
pub struct Source {
    /// How messages and the tables name it: the path as given, or `<memory>`.
    pub name: String,
    pub kind: Kind,
    pub format: TraceFormat,
    pub opened: Opened,
    /// Everything a decode of it will warn about before decoding, in the order its
    /// summary shows them ([`check_format`], then [`part_warnings`] of each trace).
    pub warnings: Vec<String>,
    /// Some code image is loaded (without one no branch can be followed).
    pub has_code: bool,
    /// Where standard input was spooled ([`Given::Stdin`]), removed with the source.
    _spool: Option<tempfile::TempDir>,
}

/// Where an input is.
pub enum Given<'a> {
    /// A bundle directory, a bare trace file, or a perf.data.
    Path(&'a Path),
    /// A trace already in memory, named `name` in messages; relative image paths are
    /// taken from `dir`.
    Bytes {
        bytes: Bytes,
        name: String,
        dir: PathBuf,
    },
    /// Standard input (`-` on the command line: `perf record -o - ... | tracemill decode
    /// -`), read to its end into a temporary file first (under `TMPDIR`): the decoder maps
    /// its trace and its chunks are read out of order, which a pipe cannot give, and
    /// spooled the input costs disk, not memory. Named `<stdin>`; a perf.data's relative
    /// binary names are not looked for beside it (there is no beside).
    Stdin,
}

/// The name of standard input in messages and the tables.
pub const STDIN_NAME: &str = "<stdin>";

impl Source {
    /// Open `given` with the caller's `overrides`: decide the format (given → bundle.toml
    /// → perf.data magic → extension → first PSB), refuse a trace of the other format and
    /// options that do not apply, open the traces and images, and make the checks a
    /// decode makes before decoding.
    pub fn open(given: Given<'_>, overrides: &Overrides) -> Result<Source> {
        let mut spool = None;
        let (name, kind, opened) = match given {
            Given::Path(path) => open_path(path, overrides)?,
            Given::Bytes { bytes, name, dir } => {
                let b = open_bytes(bytes, &name, &dir, overrides)?;
                (name, Kind::Memory, Opened::Bundle(b))
            }
            Given::Stdin => {
                let dir = spool_stdin()?;
                let copy = dir.path().join("stdin");
                // The tables and every message name the input, not its copy (gone after):
                // the copy's path is a fresh temporary one, so no other text holds it.
                let copy_name = copy.display().to_string();
                let named = |s: &str| s.replace(&copy_name, STDIN_NAME);
                let (_, kind, mut opened) = open_path(&copy, overrides)
                    .map_err(|e| anyhow::anyhow!(named(&format!("{e:#}"))))?;
                let rename = |b: &mut Bundle, as_: String| {
                    b.trace_path = as_.into();
                    let lists = [
                        &mut b.path_warnings,
                        &mut b.trace_problems,
                        &mut b.image_problems,
                    ];
                    for w in lists.into_iter().flatten() {
                        *w = named(w);
                    }
                };
                match &mut opened {
                    Opened::Bundle(b) => rename(b, STDIN_NAME.into()),
                    Opened::Recording(r) => {
                        r.path = STDIN_NAME.into();
                        for w in &mut r.warnings {
                            *w = named(w);
                        }
                        for t in &mut r.traces {
                            rename(&mut t.bundle, format!("{STDIN_NAME} ({})", t.name));
                        }
                    }
                }
                spool = Some(dir);
                (STDIN_NAME.to_string(), kind, opened)
            }
        };
        let (format, warnings, has_code) = {
            let bundles = opened.bundles();
            let (format, mut warnings) = check_format(&bundles)?;
            let mut has_code = false;
            for (i, b) in bundles.iter().enumerate() {
                let (set, problems) = b.image_set();
                let code = !set.segments().is_empty();
                has_code |= code;
                // The traces of one recording share their images: their problems once.
                let problems = if i == 0 { problems } else { Vec::new() };
                warnings.extend(part_warnings(b, problems, code));
            }
            (format, warnings, has_code)
        };
        let mut warnings = warnings;
        if let Opened::Recording(r) = &opened {
            let mut w = r.warnings.clone();
            w.append(&mut warnings);
            warnings = w;
        }
        Ok(Source {
            name,
            kind,
            format,
            opened,
            warnings,
            has_code,
            _spool: spool,
        })
    }

    /// The input's traces in order (one, or a perf.data's AUX areas').
    pub fn bundles(&self) -> Vec<&Bundle> {
        self.opened.bundles()
    }

    /// The trace's bytes in all (of every AUX area, for a perf.data).
    pub fn stream_len(&self) -> u64 {
        self.bundles().iter().map(|b| b.stream().len()).sum()
    }

    /// Some trace has a PSB of its format (else nothing can be decoded).
    pub fn has_psb(&self) -> bool {
        self.bundles().iter().any(|b| {
            let s = b.stream();
            match self.format {
                TraceFormat::Rtit => tracemill_decode::rtit::sync::next_psb(&s, 0).is_some(),
                TraceFormat::Pt => tracemill_decode::pt::sync::next_psb(&s, 0).is_some(),
            }
        })
    }
}

impl Opened {
    fn bundles(&self) -> Vec<&Bundle> {
        match self {
            Opened::Bundle(b) => vec![b],
            Opened::Recording(r) => r.traces.iter().map(|t| &t.bundle).collect(),
        }
    }
}

/// A path: a bundle directory, a perf.data, or a bare trace file.
fn open_path(path: &Path, o: &Overrides) -> Result<(String, Kind, Opened)> {
    let name = path.display().to_string();
    let err = |kind| InputError {
        path: name.clone(),
        kind,
    };
    if o.config.is_some() {
        return Err(err(ErrorKind::ConfigForPath).into());
    }
    match std::fs::metadata(path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("{name}: no such file or directory")
        }
        Err(e) => return Err(e).with_context(|| format!("{name}: cannot open")),
    }
    if let Some(file) = perf_data_file(path) {
        let given = o.not_for_perf();
        if !given.is_empty() {
            return Err(err(ErrorKind::NotForPerf(given)).into());
        }
        if o.format == Some(TraceFormat::Rtit) {
            return Err(err(ErrorKind::PerfIsPt).into());
        }
        let mut lookup = o.lookup.clone();
        if o.reach == Reach::InsideOnly {
            // Unattended: the recording's binaries only from inside its directory (or
            // where the user said), never from wherever its MMAP records point.
            let dir = path.parent().unwrap_or(Path::new("."));
            lookup.confine = Some(
                dir.canonicalize()
                    .with_context(|| format!("{name}: its directory"))?,
            );
        }
        // `perf record --kcore` keeps its copy of the kernel's text beside the data, in
        // the recording's directory.
        let kcore_dir = path.join("kcore_dir");
        if path.is_dir() && lookup.kcore.is_empty() && kcore_dir.join("kcore").is_file() {
            lookup.kcore.push(kcore_dir);
        }
        let rec = perf::open(&file, &lookup)?;
        if rec.traces.is_empty() {
            bail!("{name}: no Intel PT trace to decode");
        }
        return Ok((name, Kind::PerfData, Opened::Recording(rec)));
    }
    let perf_only = o.perf_only();
    if !perf_only.is_empty() {
        return Err(err(ErrorKind::PerfOnly(perf_only)).into());
    }
    if path.is_dir() {
        let mut b = Bundle::open_with(path, o.ctl, &o.images, o.reach)?;
        let said = b.manifest.format;
        if let Some(f) = o.format.filter(|&f| f != said) {
            return Err(err(ErrorKind::FormatOfBundle { said, given: f }).into());
        }
        if said == TraceFormat::Pt {
            o.pt.apply_to(b.manifest.pt.get_or_insert_with(Default::default));
        } else if !o.pt.given().is_empty() {
            return Err(err(ErrorKind::PtOnly {
                given: o.pt.given(),
                bundle: true,
            })
            .into());
        }
        return Ok((name, Kind::Bundle, Opened::Bundle(b)));
    }
    let format = match o.format {
        Some(f) => f,
        None => bare_format(path),
    };
    let b = match format {
        TraceFormat::Rtit => {
            if !o.pt.given().is_empty() {
                return Err(err(ErrorKind::PtOnly {
                    given: o.pt.given(),
                    bundle: false,
                })
                .into());
            }
            if o.ctl.is_none() {
                // A file that is no trace at all says so before it is asked for --ctl.
                crate::bundle::not_a_bare_trace(path)?;
                // Nor is an Intel PT trace asked for one: it is refused by its format.
                if let Ok(bytes) = map_file(path) {
                    mismatch(&TraceStream::linear(&bytes), TraceFormat::Rtit, &name)?;
                }
                return Err(err(ErrorKind::NeedsCtl).into());
            }
            Bundle::open_with(path, o.ctl, &o.images, o.reach)?
        }
        TraceFormat::Pt => {
            // IA32_RTIT_CTL is optional for Intel PT, as for ptxed: its packets say
            // what is on.
            let mut m = Manifest::new(o.ctl.unwrap_or(0));
            m.format = TraceFormat::Pt;
            let mut facts = PtFacts::default();
            o.pt.apply_to(&mut facts);
            m.pt = Some(facts);
            Bundle::open_bare(path, m, &o.images)?
        }
    };
    Ok((name, Kind::Bare, Opened::Bundle(b)))
}

/// A trace given as bytes: described by `config=` (a `bundle.toml`'s text), or by the
/// format and RTIT_CTL given, or the format of its first PSB.
fn open_bytes(bytes: Bytes, name: &str, dir: &Path, o: &Overrides) -> Result<Bundle> {
    let err = |kind| InputError {
        path: name.to_string(),
        kind,
    };
    let perf_only = o.perf_only();
    if !perf_only.is_empty() {
        return Err(err(ErrorKind::PerfOnly(perf_only)).into());
    }
    let mut m = match &o.config {
        Some(m) => {
            if let Some(f) = o.format.filter(|&f| f != m.format) {
                return Err(err(ErrorKind::FormatOfBundle {
                    said: m.format,
                    given: f,
                })
                .into());
            }
            m.clone()
        }
        None => {
            let format = o.format.unwrap_or_else(|| {
                sniff::sniff(&TraceStream::linear(&bytes))
                    .map_or(TraceFormat::Rtit, |s| from_sniffed(s.format))
            });
            if format == TraceFormat::Rtit && o.ctl.is_none() {
                mismatch(&TraceStream::linear(&bytes), TraceFormat::Rtit, name)?;
                return Err(err(ErrorKind::NeedsCtlForBytes).into());
            }
            let mut m = Manifest::new(o.ctl.unwrap_or(0));
            m.format = format;
            m
        }
    };
    if let Some(c) = o.ctl {
        m.rtit_ctl = c;
    }
    if m.format == TraceFormat::Pt {
        o.pt.apply_to(m.pt.get_or_insert_with(Default::default));
    } else if !o.pt.given().is_empty() {
        return Err(err(ErrorKind::PtOnly {
            given: o.pt.given(),
            bundle: o.config.is_some(),
        })
        .into());
    }
    m.images.extend(o.images.iter().cloned());
    Bundle::from_memory(bytes, name, m, dir)
}

/// Standard input copied to the file `stdin` of a new temporary directory.
fn spool_stdin() -> Result<tempfile::TempDir> {
    use std::io::IsTerminal;
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        bail!(
            "{STDIN_NAME}: standard input is a terminal: give `-` a recording or trace on \
             a pipe or a file (`perf record -o - ... | tracemill decode -`)"
        );
    }
    let dir = tempfile::Builder::new()
        .prefix("tracemill-stdin.")
        .tempdir()
        .context("standard input: cannot make a temporary directory to hold it (TMPDIR)")?;
    let path = dir.path().join("stdin");
    let mut file = std::fs::File::create(&path)
        .with_context(|| format!("{}: cannot create", path.display()))?;
    let n = std::io::copy(&mut stdin.lock(), &mut file)
        .with_context(|| format!("{STDIN_NAME}: cannot copy to {}", path.display()))?;
    if n == 0 {
        bail!("{STDIN_NAME}: empty: nothing to decode");
    }
    Ok(dir)
}

/// The perf.data file of the recording at `path`: `path` itself, or the `data` file of
/// the directory `perf record --kcore` writes (`data` beside `kcore_dir/`, the copy of
/// `/proc/kcore`); `None` when `path` is neither.
pub fn perf_data_file(path: &Path) -> Option<PathBuf> {
    if is_perf_data(path) {
        return Some(path.to_path_buf());
    }
    let data = path.join("data");
    (path.is_dir() && !path.join("bundle.toml").exists() && is_perf_data(&data)).then_some(data)
}

/// Whether `path` is a perf.data file (its first bytes are perf's magic, file or pipe
/// mode). Not a perf.data: any read error, a directory, a short file.
pub fn is_perf_data(path: &Path) -> bool {
    if !path.is_file() {
        return false;
    }
    let mut magic = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == b"PERFILE2"
}

/// A bare trace file's format when none is given: its extension's (`.pt`, `.rtit`), else
/// its first PSB's, else RTIT (a file that cannot be read is reported when it is opened).
pub fn bare_format(path: &Path) -> TraceFormat {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    match ext.as_deref() {
        Some("pt") => return TraceFormat::Pt,
        Some("rtit") => return TraceFormat::Rtit,
        _ => {}
    }
    map_file(path)
        .ok()
        .and_then(|b| sniff::sniff(&TraceStream::linear(&b)).map(|s| from_sniffed(s.format)))
        .unwrap_or(TraceFormat::Rtit)
}

fn from_sniffed(f: sniff::TraceFormat) -> TraceFormat {
    match f {
        sniff::TraceFormat::Rtit => TraceFormat::Rtit,
        sniff::TraceFormat::Pt => TraceFormat::Pt,
    }
}

/// Refuse `stream` (named `name`) when its first PSB is not of `expected`'s format.
pub fn mismatch(stream: &TraceStream<'_>, expected: TraceFormat, name: &str) -> Result<()> {
    let Some(s) = sniff::sniff(stream) else {
        return Ok(());
    };
    let found = from_sniffed(s.format);
    if found == expected {
        return Ok(());
    }
    Err(InputError {
        path: name.to_string(),
        kind: ErrorKind::Mismatch {
            found,
            expected,
            psb: s.psb,
        },
    }
    .into())
}

/// The checks of the traces to be decoded together (a bundle's one, or a perf.data's):
/// their format (the first's; a trace of the other format is refused), and its
/// configuration's warnings (RTIT_CTL's reserved bits, a processor without known errata).
/// An Intel PT configuration that cannot be made (an unknown `[pt] cpu`) is an error.
pub fn check_format(parts: &[&Bundle]) -> Result<(TraceFormat, Vec<String>)> {
    let Some(first) = parts.first() else {
        bail!("nothing to decode");
    };
    let format = first.manifest.format;
    for p in parts {
        mismatch(&p.stream(), format, &p.trace_path.display().to_string())?;
        // The sniff read the trace's first bytes, and the kernel mapped the pages around
        // them: a perf.data's areas share one mapping, and thousands of them would have
        // all of it resident at once.
        p.release_trace();
    }
    let mut warnings = Vec::new();
    match format {
        TraceFormat::Rtit => {
            let cfg = first.trace_config();
            if cfg.reserved_bits() != 0 {
                warnings.push(format!(
                    "rtit_ctl {:#x} sets reserved bits {:#x}; decoding as given",
                    cfg.ctl,
                    cfg.reserved_bits()
                ));
            }
        }
        TraceFormat::Pt => {
            for p in parts {
                p.pt_config()?;
            }
            if let Some(cpu) = first.pt_config()?.cpu {
                if Errata::for_cpu(&cpu).is_err() {
                    warnings.push(format!(
                        "no Intel PT errata known for cpu {cpu}; decoding without workarounds"
                    ));
                }
            }
        }
    }
    Ok((format, warnings))
}

/// The warnings about one trace of a decode, before it is decoded: files a `bundle.toml`
/// names outside its directory, bytes a collected form left out, the images that could
/// not be used (`image_problems`, from [`Bundle::image_set`]), and no code at all
/// (`has_code` false).
pub fn part_warnings(b: &Bundle, image_problems: Vec<String>, has_code: bool) -> Vec<String> {
    let mut w: Vec<String> = b
        .path_warnings
        .iter()
        .chain(&b.trace_problems)
        .cloned()
        .chain(image_problems)
        .collect();
    if !has_code {
        w.push("no code image loaded: no branch can be followed".to_string());
    }
    w
}

/// An input refused for what was given with it; each face names the options its way
/// ([`InputError::message`]). `Display` is the command line's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputError {
    /// The input (or its trace file) as named in messages.
    pub path: String,
    pub kind: ErrorKind,
}

/// Why an input was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A bare RTIT trace file without RTIT_CTL.
    NeedsCtl,
    /// An RTIT trace given as bytes without RTIT_CTL or a description.
    NeedsCtlForBytes,
    /// A description given with a path (which is a bundle, or describes itself).
    ConfigForPath,
    /// Options a perf.data decides itself.
    NotForPerf(Vec<Opt>),
    /// RTIT asked of a perf.data (perf records Intel PT).
    PerfIsPt,
    /// perf.data options for something else.
    PerfOnly(Vec<Opt>),
    /// Intel PT facts for an RTIT trace (`bundle`: a bundle's format says so, else the
    /// trace is read as RTIT).
    PtOnly { given: Vec<Opt>, bundle: bool },
    /// A format given that is not the one `bundle.toml` says.
    FormatOfBundle {
        said: TraceFormat,
        given: TraceFormat,
    },
    /// The trace's first PSB is the other format's.
    Mismatch {
        found: TraceFormat,
        expected: TraceFormat,
        psb: u64,
    },
}

fn title(f: TraceFormat) -> &'static str {
    match f {
        TraceFormat::Rtit => "RTIT",
        TraceFormat::Pt => "Intel PT",
    }
}

fn word(f: TraceFormat) -> &'static str {
    match f {
        TraceFormat::Rtit => "rtit",
        TraceFormat::Pt => "pt",
    }
}

/// `a, b and c`.
fn listed(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => one.to_string(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

impl InputError {
    /// The message, naming the options as `face` does.
    pub fn message(&self, face: Face) -> String {
        let n = |o: Opt| o.name(face);
        let opts = |v: &[Opt]| listed(&v.iter().map(|&o| n(o)).collect::<Vec<_>>());
        let path = &self.path;
        match &self.kind {
            ErrorKind::NeedsCtl => format!(
                "{path}: a bare trace file needs {} (the RTIT_CTL value it was recorded \
                 with)",
                n(Opt::Ctl)
            ),
            ErrorKind::NeedsCtlForBytes => format!(
                "{path}: a trace given as bytes needs {} (the RTIT_CTL value it was \
                 recorded with) or {} (a bundle.toml's text)",
                n(Opt::Ctl),
                n(Opt::Config)
            ),
            ErrorKind::ConfigForPath => format!(
                "{path}: {} is only for a trace given as bytes (a bundle directory has its own \
                 bundle.toml)",
                n(Opt::Config)
            ),
            ErrorKind::NotForPerf(given) => format!(
                "{path}: a perf.data carries its configuration and the mappings of its \
                 binaries: {} do{} not apply ({} and {} say where the binaries are)",
                opts(given),
                if given.len() == 1 { "es" } else { "" },
                n(Opt::Symfs),
                n(Opt::BuildidDir)
            ),
            ErrorKind::PerfIsPt => format!(
                "{path}: a perf.data records Intel PT, not RTIT ({} does not apply)",
                Opt::Format.set(face, "rtit")
            ),
            ErrorKind::PerfOnly(given) => format!(
                "{path}: {} {} for perf.data files, and this is not one (no PERFILE2 magic)",
                opts(given),
                if given.len() == 1 { "is" } else { "are" }
            ),
            ErrorKind::PtOnly { given, bundle } => format!(
                "{path}: {} {} for Intel PT traces; {}",
                opts(given),
                if given.len() == 1 { "is" } else { "are" },
                if *bundle {
                    "this bundle is RTIT".to_string()
                } else {
                    format!(
                        "this trace is read as RTIT ({} says otherwise)",
                        Opt::Format.set(face, "pt")
                    )
                }
            ),
            ErrorKind::FormatOfBundle { said, given } => format!(
                "{path}: {} given, but its bundle.toml says format = \"{}\"",
                Opt::Format.set(face, word(*given)),
                word(*said)
            ),
            ErrorKind::Mismatch {
                found,
                expected,
                psb,
            } => format!(
                "{path}: this looks like an {} trace, not {} (its first PSB, at offset \
                 {psb:#x}, is {}'s); use {}",
                title(*found),
                title(*expected),
                title(*found),
                Opt::Format.set(face, word(*found))
            ),
        }
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message(Face::Cli))
    }
}

impl std::error::Error for InputError {}

#[cfg(test)]
mod tests;
