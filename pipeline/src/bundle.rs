//! Loading a trace bundle: its manifest, the trace and the images, memory-mapped.

use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use memmap2::Mmap;
use tracemill_datasets::bundle::{ImageEntry, ImageKind, Manifest};
use tracemill_decode::config::TraceConfig;
use tracemill_decode::image::ImageSet;
use tracemill_decode::stream::TraceStream;
use tracemill_decode::timing::TimingConfig;

/// A file's bytes: memory-mapped when it has any (an empty file cannot be mapped).
pub enum Bytes {
    Mapped(Mmap),
    Empty,
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Empty => &[],
        }
    }
}

impl Bytes {
    /// Let the kernel drop the resident pages of `range` (a part the decode has finished
    /// with): a memory-mapped trace would otherwise count every page read so far in the
    /// process's memory, growing with the trace. Pages are read from the file again if
    /// touched. Only whole pages inside `range` are released.
    #[allow(unsafe_code)]
    pub fn release(&self, range: std::ops::Range<usize>) {
        const PAGE: usize = 4096;
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

/// Map a file read-only.
///
/// The decoder reads traces and images in place, never copying them; mapping is the one
/// `unsafe` operation in tracemill.
#[allow(unsafe_code)]
pub fn map_file(path: &Path) -> Result<Bytes> {
    let f = File::open(path).with_context(|| format!("{}: cannot open", path.display()))?;
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
    Ok(Bytes::Mapped(m))
}

/// One image as loaded.
pub struct LoadedImage {
    pub entry: ImageEntry,
    pub path: PathBuf,
    pub bytes: Bytes,
}

/// A bundle, ready to decode.
pub struct Bundle {
    pub dir: PathBuf,
    pub manifest: Manifest,
    pub trace_path: PathBuf,
    pub trace: Bytes,
    pub images: Vec<LoadedImage>,
    /// Images listed but not loadable (missing file, not an ELF...): decoding goes on
    /// without them and reports the addresses it could not follow.
    pub image_problems: Vec<String>,
}

impl Bundle {
    /// Load `dir` (a bundle directory) or a bare trace file with the facts given.
    pub fn open(path: &Path, ctl: Option<u64>, extra_images: &[ImageEntry]) -> Result<Bundle> {
        let (dir, mut manifest, trace_path) = if path.is_dir() {
            let m = Manifest::load(path)?;
            let t = m.trace_path(path);
            (path.to_path_buf(), m, t)
        } else {
            let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
            let ctl = ctl.with_context(|| {
                format!(
                    "{}: a bare trace file needs --ctl (the RTIT_CTL value it was recorded with)",
                    path.display()
                )
            })?;
            (dir, Manifest::new(ctl), path.to_path_buf())
        };
        if let Some(c) = ctl {
            manifest.rtit_ctl = c;
        }
        manifest.images.extend(extra_images.iter().cloned());
        let trace = map_file(&trace_path)?;
        let mut images = Vec::new();
        let mut image_problems = Vec::new();
        for e in &manifest.images {
            let p = Path::new(&e.path);
            let p = if p.is_absolute() {
                p.to_path_buf()
            } else {
                dir.join(p)
            };
            match map_file(&p) {
                Ok(bytes) => images.push(LoadedImage {
                    entry: e.clone(),
                    path: p,
                    bytes,
                }),
                Err(err) => image_problems.push(format!("{err:#}")),
            }
        }
        Ok(Bundle {
            dir,
            manifest,
            trace_path,
            trace,
            images,
            image_problems,
        })
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
            self.manifest.ring_offset.is_none(),
        )
    }

    /// The decode is done with the stream's bytes before `offset`: release their pages
    /// (linear traces only; a ring dump is one small buffer).
    pub fn release_trace_before(&self, offset: u64) {
        if self.manifest.ring_offset.is_none() {
            self.trace.release(0..offset as usize);
        }
    }

    /// The trace bytes in time order.
    pub fn stream(&self) -> TraceStream<'_> {
        match self.manifest.ring_offset {
            Some(r) => TraceStream::ring(&self.trace, r as usize),
            None => TraceStream::linear(&self.trace),
        }
    }

    /// The images as the decoder wants them; problems are added to `image_problems`.
    pub fn image_set(&self) -> (ImageSet<'_>, Vec<String>) {
        let mut set = ImageSet::new();
        let mut problems = self.image_problems.clone();
        for im in &self.images {
            let name = Path::new(&im.entry.path).file_name().map_or_else(
                || im.entry.path.clone(),
                |n| n.to_string_lossy().into_owned(),
            );
            match im.entry.kind {
                ImageKind::Raw => {
                    set.add_raw(&name, &im.bytes, im.entry.base.unwrap_or(0), im.entry.cr3);
                }
                ImageKind::Elf => {
                    if let Err(e) = set.add_elf(&name, &im.bytes, im.entry.base, im.entry.cr3) {
                        problems.push(format!("{}: {e}", im.path.display()));
                    }
                }
            }
        }
        (set, problems)
    }
}

/// Parse `PATH@ADDR` (or `PATH@ADDR@CR3`, or `PATH` for an ELF at its own addresses);
/// files ending in `.bin` or `.raw` are raw images.
pub fn parse_image_arg(s: &str) -> Result<ImageEntry> {
    let mut parts = s.split('@');
    let path = parts.next().unwrap_or_default().to_string();
    let num = |t: Option<&str>, what: &str| -> Result<Option<u64>> {
        match t {
            None | Some("") => Ok(None),
            Some(v) => tracemill_datasets::bundle::parse_u64(v)
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
        kind,
    })
}
