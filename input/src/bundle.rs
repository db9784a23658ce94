//! Opening a trace bundle or a bare trace: its manifest, the trace and the images,
//! memory-mapped (a collected form assembled in memory).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::collected;
use crate::manifest::{open_regular, read_manifest_text, ImageEntry, ImageKind, Manifest};
use anyhow::{bail, Context, Result};
use memmap2::Mmap;
use tracemill_decode::image::{ImageError, ImageSet};
use tracemill_decode::rtit::clock::TimingConfig;
use tracemill_decode::rtit::config::TraceConfig;
use tracemill_decode::stream::{Break, Span, TraceStream};

/// A file's bytes: memory-mapped when it has any (an empty file cannot be mapped), or
/// assembled in memory (a trace collected as a ToPA dump or a trace-hub capture), or bytes
/// another owner holds (a trace already in memory: the Python package's `bytes`, borrowed
/// without a copy). A mapping is shared by every bundle that reads it (a perf.data's AUX
/// areas all read the recording's one mapping).
pub enum Bytes {
    Mapped(Arc<Mmap>),
    Empty,
    Owned(Vec<u8>),
    Shared(std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Empty => &[],
            Bytes::Owned(v) => v,
            Bytes::Shared(b) => (**b).as_ref(),
        }
    }
}

impl Bytes {
    /// Another handle on the same bytes (no copy, no new mapping), unless they are owned
    /// here.
    pub fn share(&self) -> Option<Bytes> {
        match self {
            Bytes::Mapped(m) => Some(Bytes::Mapped(m.clone())),
            Bytes::Shared(b) => Some(Bytes::Shared(b.clone())),
            Bytes::Empty => Some(Bytes::Empty),
            Bytes::Owned(_) => None,
        }
    }

    /// Let the kernel drop the resident pages of `range` (a part the decode has finished
    /// with): a memory-mapped trace would otherwise count every page read so far in the
    /// process's memory, growing with the trace. Pages are read from the file again if
    /// touched. Only whole pages inside `range` are released.
    #[allow(unsafe_code)]
    pub fn release(&self, range: std::ops::Range<usize>) {
        let Bytes::Mapped(m) = self else { return };
        let start = range.start.div_ceil(PAGE) * PAGE;
        let end = range.end.min(m.len()) / PAGE * PAGE;
        if end > start {
            // SAFETY: the map is private and read-only, so nothing was written to it:
            // MADV_DONTNEED only drops clean page-cache mappings, and a later read of the
            // range sees the file's bytes again, exactly as before. No reference into the
            // map is invalidated (the addresses stay mapped).
            let _ = unsafe {
                m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
            };
        }
    }
}

/// The page size [`Bytes::release`] rounds to (x86-64's).
const PAGE: usize = 4096;

/// Map a file read-only.
///
/// The decoder reads traces and images in place, never copying them; mapping is the one
/// `unsafe` operation in tracemill (with the reports mapping the `branches` table they walk).
#[allow(unsafe_code)]
pub fn map_file(path: &Path) -> Result<Bytes> {
    // Regular files only: mapping a FIFO or a device fails, and opening a FIFO blocks.
    let f = match open_regular(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("{}: no such file or directory", path.display())
        }
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
            bail!("{}: {e}", path.display())
        }
        Err(e) => return Err(e).with_context(|| format!("{}: cannot open", path.display())),
    };
    let len = f
        .metadata()
        .with_context(|| format!("{}: cannot stat", path.display()))?
        .len();
    if len == 0 {
        return Ok(Bytes::Empty);
    }
    // SAFETY: the map is read-only and private to this process. If another process
    // truncates or rewrites the file while we decode, reads may see the new bytes or
    // fault (SIGBUS); tracemill treats its inputs as immutable, as every trace tool does.
    let m = unsafe { Mmap::map(&f) }.with_context(|| format!("{}: cannot map", path.display()))?;
    Ok(Bytes::Mapped(Arc::new(m)))
}

/// One image as loaded.
pub struct LoadedImage {
    pub entry: ImageEntry,
    pub path: PathBuf,
    pub bytes: Bytes,
}

impl LoadedImage {
    /// Each image of `entries` (paths as given, relative ones under `dir`) mapped once
    /// and shareable ([`LoadedImage::share`]); and why the others could not be.
    pub fn load_shared(entries: &[ImageEntry], dir: &Path) -> (Vec<LoadedImage>, Vec<String>) {
        let mut out = Vec::new();
        let mut problems = Vec::new();
        for e in entries {
            match Self::load(e, image_path(dir, e)) {
                Ok(im) => out.push(im),
                Err(why) => problems.push(why),
            }
        }
        (out, problems)
    }

    /// The image `e` names, mapped from `path`; why not, as a message naming the path.
    fn load(e: &ImageEntry, path: PathBuf) -> Result<LoadedImage, String> {
        match map_file(&path) {
            Ok(bytes) => Ok(LoadedImage {
                entry: e.clone(),
                path,
                bytes,
            }),
            Err(err) => Err(format!("{err:#}")),
        }
    }

    /// Another handle on the same bytes (no copy, no new mapping) where they are shared.
    pub fn share(&self) -> Option<LoadedImage> {
        let bytes = self.bytes.share()?;
        Some(LoadedImage {
            entry: self.entry.clone(),
            path: self.path.clone(),
            bytes,
        })
    }
}

/// Where image `e` is: its path as given, a relative one under the bundle's `dir`.
fn image_path(dir: &Path, e: &ImageEntry) -> PathBuf {
    let p = Path::new(&e.path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

/// What a file given without `--ctl` is, when that is not "a bare trace missing its
/// RTIT_CTL": a FIFO or a device, an empty file, a perf.data (which
/// [`Source::open`](crate::Source::open) reads; one perf cannot have written for this
/// machine, its older or byte-swapped magic, is refused). Each gets its own message; the
/// rest `Ok` (then it needs --ctl).
pub(crate) fn not_a_bare_trace(path: &Path) -> Result<()> {
    let mut f = match open_regular(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
            bail!("{}: {e}", path.display())
        }
        Err(e) => return Err(e).with_context(|| format!("{}: cannot open", path.display())),
    };
    let mut magic = [0u8; 8];
    let mut n = 0;
    while n < magic.len() {
        match std::io::Read::read(&mut f, &mut magic[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).with_context(|| format!("{}: cannot read", path.display())),
        }
    }
    match &magic[..n] {
        [] => bail!("{}: an empty file: nothing to decode", path.display()),
        b"PERFILE2" => bail!(
            "{}: a perf.data, not a bare trace (open it as a source: \
             tracemill_input::Source::open)",
            path.display()
        ),
        b"PERFFILE" => bail!(
            "{}: a perf.data of perf's first format (PERFFILE magic): not read (tracemill \
             reads PERFILE2, what perf has written since Linux 2.6.35)",
            path.display()
        ),
        [b'P', b'E', b'R', b'F', b'I', b'L', b'E', v] => bail!(
            "{}: a perf.data of a format tracemill does not know (magic PERFILE{}): not \
             read (tracemill reads PERFILE2)",
            path.display(),
            char::from(*v).escape_default()
        ),
        b"2ELIFREP" => bail!(
            "{}: a perf.data written on a big-endian machine (byte-swapped PERFILE2 magic): \
             not read (Intel PT is little-endian only)",
            path.display()
        ),
        _ => Ok(()),
    }
}

/// A bundle, ready to decode.
pub struct Bundle {
    pub dir: PathBuf,
    pub manifest: Manifest,
    pub trace_path: PathBuf,
    /// The trace bytes in time order (for a ring dump, as in the file; see [`Bundle::stream`]).
    pub trace: Bytes,
    /// Size of the trace file as collected (for a ToPA dump or a trace-hub capture, not
    /// the length of the stream assembled from it).
    pub trace_file_size: u64,
    /// The trace starts where tracing was enabled (erratum E7 applies to its first MTC):
    /// a linear trace, a ToPA dump that did not wrap, a trace-hub capture.
    pub starts_at_enable: bool,
    /// Problems assembling a collected form that left bytes out (a warning each).
    pub trace_problems: Vec<String>,
    pub images: Vec<LoadedImage>,
    /// Images listed but not loadable (missing file, not an ELF...): decoding goes on
    /// without them and reports the addresses it could not follow.
    pub image_problems: Vec<String>,
    /// Files `bundle.toml` names outside the bundle directory, read anyway
    /// ([`Reach::Anywhere`]): a warning each.
    pub path_warnings: Vec<String>,
    /// The trace was given in memory ([`Bundle::from_memory`]), not read from `dir`.
    pub in_memory: bool,
    /// When not empty, the trace is these ranges of `trace`, one after the other: a
    /// perf.data AUX area, its AUXTRACE buffers where they lie in the recording
    /// ([`Bundle::with_spans`]).
    pub spans: Vec<Span>,
    /// Where bytes of the trace were lost, in stream order ([`Bundle::with_spans`]).
    pub breaks: Vec<Break>,
    /// How many of `spans` the last release covered whole: the next release starts there.
    /// [`Bundle::release_trace`], which ends each reader (planning, the decode), sets it
    /// back to none for the next, which reads the pages again.
    spans_released: AtomicUsize,
}

/// Where the files a `bundle.toml` names may be.
///
/// A bundle is a directory, and what it names (`trace`, `[[image]] path`) normally sits
/// inside it. A bundle from elsewhere could name any file of the machine that reads it
/// (`trace = "/etc/shadow"`, an image `../../etc/passwd`), and through symbolic links too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reach {
    /// Anywhere the user who runs tracemill may read (`decode`, `dump`, `report`: the user
    /// chose the bundle). Each file outside the bundle directory is a warning.
    #[default]
    Anywhere,
    /// Inside the bundle directory only, symbolic links resolved (`ingest`, which reads
    /// bundles from many hosts unattended, unless `--allow-outside-paths`): a trace
    /// outside is an error, an image outside is not loaded.
    InsideOnly,
}

/// Whether `file` (which exists) lies outside directory `dir`, symbolic links resolved.
pub fn outside(dir: &Path, file: &Path) -> bool {
    match (dir.canonicalize(), file.canonicalize()) {
        (Ok(d), Ok(f)) => !f.starts_with(d),
        // A file that does not exist is reported as missing where it is opened.
        _ => false,
    }
}

impl Bundle {
    /// Load `dir` (a bundle directory) or a bare trace file with the facts given; the
    /// bundle's files may be anywhere ([`Reach::Anywhere`]).
    pub fn open(path: &Path, ctl: Option<u64>, extra_images: &[ImageEntry]) -> Result<Bundle> {
        Self::open_with(path, ctl, extra_images, Reach::Anywhere)
    }

    /// [`Bundle::open`], with the files `bundle.toml` names confined as `reach` says.
    /// Images given on the command line (`extra_images`) are the user's and never
    /// confined; nor is a bare trace file.
    pub fn open_with(
        path: &Path,
        ctl: Option<u64>,
        extra_images: &[ImageEntry],
        reach: Reach,
    ) -> Result<Bundle> {
        Self::open_inner(path, ctl, extra_images, reach, None)
    }

    /// A bare trace file described by `manifest` (its format, IA32_RTIT_CTL, `[pt]`
    /// facts; `trace` and `images` are ignored), with the images given.
    pub fn open_bare(
        path: &Path,
        manifest: Manifest,
        extra_images: &[ImageEntry],
    ) -> Result<Bundle> {
        Self::open_inner(path, None, extra_images, Reach::Anywhere, Some(manifest))
    }

    fn open_inner(
        path: &Path,
        ctl: Option<u64>,
        extra_images: &[ImageEntry],
        reach: Reach,
        bare: Option<Manifest>,
    ) -> Result<Bundle> {
        match std::fs::metadata(path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                bail!("{}: no such file or directory", path.display())
            }
            Err(e) => return Err(e).with_context(|| format!("{}: cannot open", path.display())),
        }
        let (dir, mut manifest, trace_path) = if path.is_dir() {
            let m = load_manifest(path, reach)?;
            let t = m.trace_path(path);
            (path.to_path_buf(), m, t)
        } else {
            let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
            if let Some(mut m) = bare {
                m.images.clear();
                (dir, m, path.to_path_buf())
            } else {
                if ctl.is_none() {
                    not_a_bare_trace(path)?;
                }
                let ctl = ctl.ok_or_else(|| crate::source::InputError {
                    path: path.display().to_string(),
                    kind: crate::source::ErrorKind::NeedsCtl,
                })?;
                (dir, Manifest::new(ctl), path.to_path_buf())
            }
        };
        if let Some(c) = ctl {
            manifest.rtit_ctl = c;
        }
        let is_bundle = path.is_dir();
        let named_images = manifest.images.len();
        manifest.images.extend(extra_images.iter().cloned());
        let mut path_warnings = Vec::new();
        let toml = dir.join("bundle.toml");
        if is_bundle && outside(&dir, &trace_path) {
            if reach == Reach::InsideOnly {
                bail!(
                    "{}: names the trace {}, outside the bundle directory (refused; \
                     --allow-outside-paths reads it)",
                    toml.display(),
                    trace_path.display()
                );
            }
            path_warnings.push(format!(
                "{}: names the trace {}, outside the bundle directory",
                toml.display(),
                trace_path.display()
            ));
        }
        let mapped = map_file(&trace_path)?;
        Self::assemble(
            dir,
            manifest,
            trace_path,
            mapped,
            Confine {
                bundle: is_bundle,
                named_images,
                reach,
            },
            path_warnings,
        )
    }

    /// A bundle whose trace is already in memory (`trace`, named `name` in messages and
    /// in the tables' `tracemill.source`), described by `manifest` (a `bundle.toml`'s
    /// facts: RTIT_CTL, images, a ring offset or a collected form...), its relative image
    /// paths taken from `dir`. The images are the caller's and not confined.
    pub fn from_memory(trace: Bytes, name: &str, manifest: Manifest, dir: &Path) -> Result<Bundle> {
        let named_images = manifest.images.len();
        let mut b = Self::assemble(
            dir.to_path_buf(),
            manifest,
            PathBuf::from(name),
            trace,
            Confine {
                bundle: false,
                named_images,
                reach: Reach::Anywhere,
            },
            Vec::new(),
        )?;
        b.in_memory = true;
        Ok(b)
    }

    /// [`Bundle::from_memory`] with its images already loaded (`images`, and why others
    /// could not be): a perf.data's AUX areas share one mapping of each binary instead of
    /// each mapping them again (thousands of areas would each hold the whole set of
    /// binaries' address space). `manifest.images` must be the entries `images` loaded.
    pub fn from_memory_with_images(
        trace: Bytes,
        name: &str,
        manifest: Manifest,
        dir: &Path,
        images: Vec<LoadedImage>,
        image_problems: Vec<String>,
    ) -> Result<Bundle> {
        let mut m = manifest;
        let named = std::mem::take(&mut m.images);
        let mut b = Self::from_memory(trace, name, m, dir)?;
        b.manifest.images = named;
        b.images = images;
        b.image_problems = image_problems;
        Ok(b)
    }

    /// This bundle with its trace the ranges `spans` of its bytes, one after the other
    /// (see [`TraceStream::spans`]; `spans` must join, in `trace`'s bounds), with bytes
    /// lost before each of `breaks` ([`TraceStream::with_breaks`]: in order, inside the
    /// stream, none at its start).
    pub fn with_spans(mut self, spans: Vec<Span>, breaks: Vec<Break>) -> Result<Bundle> {
        let len: u64 = spans.iter().map(|s| s.len as u64).sum();
        if !TraceStream::check_spans(self.trace.len(), &spans)
            || !breaks.windows(2).all(|w| w[0].at < w[1].at)
            || breaks.iter().any(|b| b.at == 0 || b.at >= len)
        {
            bail!(
                "{}: the trace's parts do not join in its bytes",
                self.trace_path.display()
            );
        }
        self.trace_file_size = len;
        self.spans = spans;
        self.breaks = breaks;
        Ok(self)
    }

    /// The rest of opening, once the trace's bytes are at hand: put them in time order
    /// (collected forms) and load the images.
    fn assemble(
        dir: PathBuf,
        manifest: Manifest,
        trace_path: PathBuf,
        mapped: Bytes,
        confine: Confine,
        mut path_warnings: Vec<String>,
    ) -> Result<Bundle> {
        let Confine {
            bundle: is_bundle,
            named_images,
            reach,
        } = confine;
        let toml = dir.join("bundle.toml");
        let trace_file_size = mapped.len() as u64;
        let mut starts_at_enable = manifest.ring_offset.is_none();
        let mut trace_problems = Vec::new();
        let forms = [
            manifest.ring_offset.is_some(),
            manifest.topa.is_some(),
            manifest.trace_hub.is_some(),
        ];
        if forms.iter().filter(|&&f| f).count() > 1 {
            bail!(
                "{}: ring_offset, [topa] and [trace_hub] each say how the trace was collected; \
                 give one",
                dir.join("bundle.toml").display()
            );
        }
        let assembled = if let Some(t) = &manifest.topa {
            Some(collected::assemble_topa(t, &mapped))
        } else {
            manifest
                .trace_hub
                .as_ref()
                .map(|h| collected::assemble_trace_hub(h, &mapped))
        };
        let trace = match assembled {
            None => mapped,
            Some(Err(e)) => bail!("{}: {e}", trace_path.display()),
            Some(Ok(a)) => {
                starts_at_enable = a.starts_at_enable;
                trace_problems = a
                    .warnings
                    .into_iter()
                    .map(|w| format!("{}: {w}", trace_path.display()))
                    .collect();
                Bytes::Owned(a.bytes)
            }
        };
        let mut images = Vec::new();
        let mut image_problems = Vec::new();
        for (i, e) in manifest.images.iter().enumerate() {
            let p = image_path(&dir, e);
            if is_bundle && i < named_images && outside(&dir, &p) {
                if reach == Reach::InsideOnly {
                    image_problems.push(format!(
                        "{}: names the image {}, outside the bundle directory: not loaded \
                         (--allow-outside-paths reads it)",
                        toml.display(),
                        p.display()
                    ));
                    continue;
                }
                path_warnings.push(format!(
                    "{}: names the image {}, outside the bundle directory",
                    toml.display(),
                    p.display()
                ));
            }
            match LoadedImage::load(e, p) {
                Ok(im) => images.push(im),
                Err(why) => image_problems.push(why),
            }
        }
        Ok(Bundle {
            dir,
            manifest,
            trace_path,
            trace,
            trace_file_size,
            starts_at_enable,
            trace_problems,
            images,
            image_problems,
            path_warnings,
            in_memory: false,
            spans: Vec::new(),
            breaks: Vec::new(),
            spans_released: AtomicUsize::new(0),
        })
    }

    /// The Intel PT configuration (`format = "pt"`): IA32_RTIT_CTL and `[pt]`.
    pub fn pt_config(&self) -> Result<tracemill_decode::pt::PtConfig> {
        self.manifest
            .pt_config()
            .map_err(|e| anyhow::anyhow!("{}: {e}", self.dir.join("bundle.toml").display()))
    }

    /// The trace configuration from the bundle's RTIT_CTL.
    pub fn trace_config(&self) -> TraceConfig {
        TraceConfig::from_ctl(self.manifest.rtit_ctl)
    }

    /// How to turn the trace's timing packets into time: RTIT_CTL plus the bundle's
    /// guaranteed ratio; a linear trace starts at an enable (E7), a ring dump does not.
    pub fn timing_config(&self) -> TimingConfig {
        TimingConfig::new(
            &self.trace_config(),
            self.manifest.guaranteed_ratio,
            self.starts_at_enable,
        )
    }

    /// The decode is done with the stream's bytes before `offset`: release their pages
    /// (mapped linear traces and spans only; a ring dump is one small buffer, an assembled
    /// trace is in memory).
    pub fn release_trace_before(&self, offset: u64) {
        if !self.spans.is_empty() {
            // Spans wholly before `offset` not released since, then the part of the one
            // it is in.
            let done = self
                .spans
                .partition_point(|s| s.at + s.len as u64 <= offset);
            // (A reader that reads the trace again starts from a count of none:
            // `release_trace` ends each reader.)
            let last = self.spans_released.swap(done, Ordering::Relaxed);
            for k in last.min(done)..done {
                let s = &self.spans[k];
                // From the page the span starts in to where the next span starts: the
                // bytes between (AUXTRACE headers, other CPUs' buffers, decoded in their
                // own turn) are mapped in too, by the kernel's fault-around on our reads,
                // and would stay until their own turn. Dropping a clean page of this
                // read-only map costs at most a fault when it is read again.
                let end = match self.spans.get(k + 1) {
                    Some(n) if n.from > s.from => n.from,
                    _ => s.from + s.len,
                };
                self.trace.release(s.from / PAGE * PAGE..end);
            }
            if let Some(s) = self.spans.get(done).filter(|s| s.at < offset) {
                self.trace
                    .release(s.from..s.from + (offset - s.at) as usize);
            }
        } else if self.manifest.ring_offset.is_none() {
            self.trace.release(0..offset as usize);
        }
    }

    /// A reader is done with the whole trace (planning's search, or the decode): release
    /// every page of the mapping it lies in, and start the count of released spans
    /// again, for the next reader reads it from the start (with only
    /// [`Self::release_trace_before`] at the end, the decode after planning found every
    /// span counted as released already and kept the pages of any part too small to
    /// reach a release step).
    ///
    /// The whole mapping, not only this trace's spans: a perf.data's AUX areas share one
    /// mapping, and the kernel maps more than the page read on a fault (the 64 KiB
    /// around it, or the whole of a large page-cache folio), so reading one area maps
    /// pages of others, decoded before or after. Called between parts, when no other
    /// part of the mapping is being read.
    pub fn release_trace(&self) {
        self.trace.release(0..self.trace.len());
        self.spans_released.store(0, Ordering::Relaxed);
    }

    /// The trace bytes in time order.
    pub fn stream(&self) -> TraceStream<'_> {
        if !self.spans.is_empty() {
            return TraceStream::spans(&self.trace, &self.spans).with_breaks(&self.breaks);
        }
        match self.manifest.ring_offset {
            Some(r) => TraceStream::ring(&self.trace, r as usize),
            None => TraceStream::linear(&self.trace),
        }
    }

    /// The images as the decoder wants them; problems are added to `image_problems`.
    ///
    /// An image that cannot be used (not an ELF, no executable code) or that overlaps an
    /// image listed before it in the same address space is left out, with a problem that
    /// says why: code at an address must come from one image.
    pub fn image_set<'s>(&'s self) -> (ImageSet<'s>, Vec<String>) {
        let mut set = ImageSet::new();
        let mut problems = self.image_problems.clone();
        // Code ranges loaded so far: start, end, cr3, file.
        let mut taken: Vec<(u64, u64, Option<u64>, &Path)> = Vec::new();
        for im in &self.images {
            let name = Path::new(&im.entry.path).file_name().map_or_else(
                || im.entry.path.clone(),
                |n| n.to_string_lossy().into_owned(),
            );
            // The key its code is looked up by: a CR3 (bundles), or a sideband address
            // space (perf.data, which has no CR3 tags).
            let (base, cr3) = (im.entry.base, im.entry.space.or(im.entry.cr3));
            let add = |set: &mut ImageSet<'s>| -> Result<(), ImageError> {
                match im.entry.kind {
                    ImageKind::Raw => {
                        set.add_raw(&name, &im.bytes, base.unwrap_or(0), cr3);
                    }
                    ImageKind::Elf => {
                        set.add_elf(&name, &im.bytes, base, cr3)?;
                    }
                }
                Ok(())
            };
            // The image alone first: its code ranges, or why it has none.
            let mut alone = ImageSet::new();
            if let Err(e) = add(&mut alone) {
                problems.push(image_problem(&im.path, &e));
                continue;
            }
            if im.bytes.is_empty() {
                problems.push(format!("{}: empty file: not loaded", im.path.display()));
                continue;
            }
            let ranges: Vec<(u64, u64)> = alone
                .segments()
                .iter()
                .map(|s| (s.start, s.end()))
                .collect();
            let clash = ranges.iter().find_map(|&(start, end)| {
                taken.iter().find_map(|&(s, e, c, other)| {
                    let same_space = c.is_none() || cr3.is_none() || c == cr3;
                    (same_space && start < e && s < end).then(|| (start.max(s), end.min(e), other))
                })
            });
            if let Some((from, to, other)) = clash {
                if other == im.path {
                    problems.push(format!(
                        "{}: listed twice, overlapping itself at {from:#x}..{to:#x}: the \
                         second is not loaded",
                        im.path.display()
                    ));
                    continue;
                }
                problems.push(format!(
                    "{}: overlaps {} at {from:#x}..{to:#x} in the same address space: not loaded \
                     (images of different processes need different cr3 values)",
                    im.path.display(),
                    other.display()
                ));
                continue;
            }
            taken.extend(ranges.iter().map(|&(s, e)| (s, e, cr3, im.path.as_path())));
            add(&mut set).expect("the image loaded alone");
        }
        (set, problems)
    }
}

/// Which of the files a bundle names are confined to its directory.
struct Confine {
    /// Read from a bundle directory (else a bare trace, or one in memory: nothing confined).
    bundle: bool,
    /// The images `bundle.toml` names (the first ones); the rest are the caller's.
    named_images: usize,
    reach: Reach,
}

/// Why an image is not used, naming its file once.
fn image_problem(path: &Path, e: &ImageError) -> String {
    match e {
        ImageError::Elf { source, .. } => format!(
            "{}: not a 64-bit ELF file ({source}): not loaded (raw code needs kind = \"raw\" \
             in bundle.toml, or a .bin or .raw name with --image PATH@ADDR)",
            path.display()
        ),
        ImageError::NoCode { .. } => format!(
            "{}: an ELF file without executable code (no PT_LOAD segment with execute \
             permission): not loaded",
            path.display()
        ),
    }
}

/// Read `DIR/bundle.toml`. A syntax or type error names the file, line, column and key,
/// and shows the line when the user chose the bundle ([`Reach::Anywhere`]). Read
/// unattended ([`Reach::InsideOnly`], `ingest`), a `bundle.toml` that is a link out of its
/// directory is not read at all (a link to `/etc/shadow` would otherwise be parsed, and its
/// first line quoted into the catalog's `error` column), and no error quotes the file.
fn load_manifest(dir: &Path, reach: Reach) -> Result<Manifest> {
    let path = dir.join("bundle.toml");
    if reach == Reach::InsideOnly && outside(dir, &path) {
        bail!(
            "{}: a link to a file outside the bundle directory: not read \
             (--allow-outside-paths reads it)",
            path.display()
        );
    }
    let text = match read_manifest_text(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "{}: a directory without bundle.toml (give a bundle directory, or a trace file \
             with --ctl)",
            dir.display()
        ),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData
            ) =>
        {
            bail!("{}: {e}", path.display())
        }
        Err(e) => return Err(e).with_context(|| format!("{}: cannot read", path.display())),
    };
    match reach {
        Reach::Anywhere => parse_manifest(&path, &text),
        Reach::InsideOnly => toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!(toml_error_unquoted(&path, &text, &e))),
    }
}

/// A `bundle.toml`'s text as a [`Manifest`]; `path` names it in errors (which show the
/// line, as for a file).
pub fn parse_manifest(path: &Path, text: &str) -> Result<Manifest> {
    toml::from_str(text).map_err(|e| anyhow::anyhow!(toml_error(path, text, &e)))
}

/// `PATH:LINE:COLUMN: key `KEY`: MESSAGE`, then the line with a caret under the place.
fn toml_error(path: &Path, text: &str, e: &toml::de::Error) -> String {
    toml_error_with(path, text, e, true)
}

/// [`toml_error`] without the line: for errors that are stored or published (ingest's
/// catalog), which must not carry what a file holds.
pub fn toml_error_unquoted(path: &Path, text: &str, e: &toml::de::Error) -> String {
    toml_error_with(path, text, e, false)
}

fn toml_error_with(path: &Path, text: &str, e: &toml::de::Error, quote: bool) -> String {
    let msg = e.message().trim_end();
    // No place, or the whole document (a missing top-level key, which the message names).
    let whole =
        |s: &std::ops::Range<usize>| s.start == 0 && (s.end == 0 || s.end >= text.trim_end().len());
    let Some(span) = e.span().filter(|s| !whole(s)) else {
        return format!("{}: {msg}", path.display());
    };
    let start = span.start.min(text.len());
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("");
    let line_no = text[..start].matches('\n').count() + 1;
    let col = text[line_start..start].chars().count() + 1;
    let mut out = format!("{}:{line_no}:{col}: ", path.display());
    // A span within one line is a value or a key; one across lines is a whole table
    // (a missing key), which the message names.
    if span.end <= line_start + line.len() + 1 {
        if let Some(key) = key_of_line(text, line_start, line, start - line_start) {
            out.push_str(&format!("{key}: "));
        }
    }
    out.push_str(msg);
    if !quote {
        return out;
    }
    let width = text[start..span.end.clamp(start, line_start + line.len())]
        .chars()
        .count()
        .max(1);
    let pad = " ".repeat(line_no.to_string().len());
    out.push_str(&format!(
        "\n{pad} |\n{line_no} | {line}\n{pad} | {}{}",
        " ".repeat(col - 1),
        "^".repeat(width)
    ));
    out
}

/// The key that the line at `line_start` sets, when `at` (a column, in bytes) is in its
/// value: "key `rtit_ctl`", or "key `base` of [[image]] 2" inside the second image.
fn key_of_line(text: &str, line_start: usize, line: &str, at: usize) -> Option<String> {
    let eq = line.find('=')?;
    if at <= eq {
        return None;
    }
    let key = line[..eq].trim();
    if key.is_empty() || key.starts_with('[') {
        return None;
    }
    // The table the line is in: the last header above it.
    let above = &text[..line_start];
    let header = above
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['));
    Some(match header {
        None => format!("key `{key}`"),
        Some(h) if h.starts_with("[[") => {
            let n = above.lines().filter(|l| l.trim() == h).count();
            format!("key `{key}` of {h} {n}")
        }
        Some(h) => format!("key `{key}` of {h}"),
    })
}

/// Parse `PATH@ADDR` (or `PATH@ADDR@CR3`, or `PATH` for an ELF at its own addresses);
/// files ending in `.bin` or `.raw` are raw images.
pub fn parse_image_arg(s: &str) -> Result<ImageEntry> {
    let mut parts = s.split('@');
    let path = parts.next().unwrap_or_default().to_string();
    let num = |t: Option<&str>, what: &str| -> Result<Option<u64>> {
        match t {
            None | Some("") => Ok(None),
            Some(v) => crate::manifest::parse_u64(v)
                .map(Some)
                .with_context(|| format!("--image {s}: bad {what} {v:?} (use 0x... or decimal)")),
        }
    };
    let base = num(parts.next(), "address")?;
    let cr3 = num(parts.next(), "CR3")?;
    let kind = if path.ends_with(".bin") || path.ends_with(".raw") {
        ImageKind::Raw
    } else {
        ImageKind::Elf
    };
    Ok(ImageEntry {
        path,
        base,
        cr3,
        space: None,
        kind,
        symbols: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: usize = 1024;

    /// Resident KiB of this process's mapping that starts at `addr` (/proc/self/smaps).
    fn resident_kib(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut lines = smaps.lines();
        while let Some(l) = lines.next() {
            let start = l.split('-').next().unwrap_or("");
            if usize::from_str_radix(start, 16).ok() != Some(addr) {
                continue;
            }
            for l in lines.by_ref() {
                if let Some(kb) = l.strip_prefix("Rss:") {
                    return kb.trim().trim_end_matches("kB").trim().parse().unwrap();
                }
            }
        }
        panic!("no mapping at {addr:#x}");
    }

    fn touch(b: &[u8]) -> u64 {
        b.iter().step_by(PAGE).map(|&x| x as u64).sum()
    }

    /// An area's buffers with other bytes between them, as in a perf.data: the pages the
    /// decode has finished with go, the bytes between buffers with them, and again after
    /// planning released everything once.
    #[test]
    fn released_spans_give_back_their_pages_and_the_bytes_up_to_the_next_span() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("perf.data");
        std::fs::write(&path, vec![0x5a; 256 * KIB]).unwrap();
        let bytes = map_file(&path).unwrap();
        let addr = bytes.as_ptr() as usize;
        let span = |at: usize, from: usize| Span {
            at: at as u64,
            from,
            len: 32 * KIB,
        };
        let spans = vec![
            span(0, 0),
            span(32 * KIB, 64 * KIB),
            span(64 * KIB, 128 * KIB),
        ];
        let b = Bundle::from_memory(bytes, "perf.data", Manifest::new(0), dir.path())
            .unwrap()
            .with_spans(spans, Vec::new())
            .unwrap();
        assert!(touch(&b.trace) > 0);
        assert_eq!(resident_kib(addr), 256);
        // Planning's releases as it goes: the spans it passed, and what lies between.
        b.release_trace_before(96 * KIB as u64);
        assert!(resident_kib(addr) <= 96, "{} KiB", resident_kib(addr));
        // Planning is done with the trace.
        b.release_trace();
        // The decode reads the trace again and releases behind itself from the start.
        assert!(touch(&b.trace) > 0);
        b.release_trace_before(64 * KIB as u64);
        assert!(resident_kib(addr) <= 128, "{} KiB", resident_kib(addr));
        // Half of the last span.
        b.release_trace_before(80 * KIB as u64);
        assert!(resident_kib(addr) <= 112, "{} KiB", resident_kib(addr));
    }
}
