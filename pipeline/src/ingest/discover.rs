//! Finding bundles and naming them.
//!
//! A SOURCE is a bundle directory (it has a `bundle.toml`), a perf.data file (Intel PT
//! recorded by `perf record`) or the directory `perf record --kcore` writes (its `data`
//! file beside `kcore_dir/`), a directory searched recursively for them, or a text file
//! listing their paths, one a line. A bundle's id is a hash of its `bundle.toml` and trace
//! bytes (a perf.data's: of its labels file and its bytes), so the same bundle gets the
//! same id wherever it is found and whoever finds it.
//!
//! A perf.data's labels are in a file beside it, its name with `.toml` added
//! (`host1/perf.data.toml`, also for a recording made as a directory `host1/perf.data/`),
//! as a bundle's are in `bundle.toml`: `[labels]` with string values.

use std::collections::HashSet;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use tracemill_input::bundle::{outside, toml_error_unquoted, Reach};
use tracemill_input::manifest::{open_regular, read_limited, read_manifest_text, Manifest};
use tracemill_input::source::perf_data_file;

/// The largest bundle list read (a million bundle paths of 60 bytes).
const MAX_LIST_BYTES: u64 = 64 << 20;

/// Bundle directories (or what a list file names as one) in the order found, each once.
/// A SOURCE that does not exist is an error (a bad argument); a list entry that does not
/// exist is a bundle, which will fail with that reason.
pub fn discover(sources: &[PathBuf], skip: Option<&Path>) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let skip = skip.and_then(|p| p.canonicalize().ok());
    let mut add = |p: PathBuf, out: &mut Vec<PathBuf>| {
        let key = p.canonicalize().unwrap_or_else(|_| p.clone());
        if seen.insert(key) {
            out.push(p);
        }
    };
    for src in sources {
        let meta = std::fs::metadata(src).with_context(|| format!("source {}", src.display()))?;
        if is_source(src) {
            add(src.clone(), &mut out);
        } else if meta.is_dir() {
            let mut found = Vec::new();
            let mut visited = HashSet::new();
            walk(src, skip.as_deref(), &mut visited, &mut found)
                .with_context(|| format!("searching {} for bundles", src.display()))?;
            found.sort();
            for p in found {
                add(p, &mut out);
            }
        } else {
            let text = open_regular(src)
                .and_then(|f| read_limited(f, MAX_LIST_BYTES))
                .with_context(|| format!("reading the bundle list {}", src.display()))?;
            let base = src.parent().unwrap_or(Path::new(""));
            for line in text.lines() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let mut p = PathBuf::from(line);
                if p.is_relative() {
                    p = base.join(p);
                }
                // `find -name bundle.toml` output works too.
                if p.file_name().is_some_and(|n| n == "bundle.toml") && p.is_file() {
                    p.pop();
                }
                add(p, &mut out);
            }
        }
    }
    Ok(out)
}

/// A bundle directory, a perf.data file, or a recording made as a directory.
fn is_source(p: &Path) -> bool {
    p.join("bundle.toml").exists() || perf_data_file(p).is_some()
}

/// Directories under `dir` with a `bundle.toml`, perf.data files, and recordings made as
/// directories; not below a bundle (its `images/` may be deep) or into a recording, not
/// into hidden directories, not into the dataset being written.
///
/// Symbolic links to directories are followed, each directory entered once (`visited`:
/// device and inode): two links to a parent would otherwise make the search exponential,
/// and a link to an ancestor endless.
fn walk(
    dir: &Path,
    skip: Option<&Path>,
    visited: &mut HashSet<(u64, u64)>,
    out: &mut Vec<PathBuf>,
) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir)?;
    if !visited.insert((m.dev(), m.ino())) {
        return Ok(());
    }
    let mut subdirs = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        // Follows symlinks to directories, as `find -L` would not loop: canonical paths
        // are compared with the dataset only.
        let path = e.path();
        if !path.is_dir() {
            // perf.data files by perf's names (perf.data, perf.data.old, run1.data):
            // not every file of a tree is opened.
            let n = name.to_string_lossy();
            if (n.starts_with("perf.data") || n.ends_with(".data"))
                && !n.ends_with(".toml")
                && tracemill_input::source::is_perf_data(&path)
            {
                out.push(path);
            }
            continue;
        }
        if skip.is_some_and(|s| path.canonicalize().is_ok_and(|c| c == s)) {
            continue;
        }
        subdirs.push(path);
    }
    subdirs.sort();
    for p in subdirs {
        if is_source(&p) {
            let Ok(m) = std::fs::metadata(&p) else {
                continue;
            };
            if visited.insert((m.dev(), m.ino())) {
                out.push(p);
            }
        } else {
            walk(&p, skip, visited, out)?;
        }
    }
    Ok(())
}

/// What hashing a bundle found out.
#[derive(Clone, Debug)]
pub struct Identity {
    /// 32 hex digits: the first 128 bits of BLAKE3 over `bundle.toml` and the trace.
    pub id: String,
    /// Trace size, when the trace could be read.
    pub trace_bytes: Option<u64>,
    /// The manifest, when it parsed.
    pub manifest: Option<Manifest>,
}

const MISSING: u64 = u64::MAX;

/// The bundle id of `dir`: BLAKE3 of a version tag, then `bundle.toml` and the trace file
/// (each as its length and bytes; a file that cannot be read counts as absent). The trace
/// is the manifest's `trace` (`trace.rtit` when the manifest does not parse). Only
/// regular files are read. A bundle whose `bundle.toml` cannot be read (missing, a FIFO, a
/// device; with `reach` [`Reach::InsideOnly`], a link out of its directory) is also named
/// by its path.
pub fn identify(dir: &Path, reach: Reach) -> Identity {
    if let Some(data) = perf_data_file(dir) {
        return identify_perf_data(dir, &data, reach);
    }
    if dir.is_file() {
        // Not a perf.data (any more): its bytes and path name it, and opening it says why.
        return identify_perf_data(dir, dir, reach);
    }
    let mut h = blake3::Hasher::new();
    h.update(b"tracemill-bundle-1\0");
    // Bounded and regular files only: a FIFO or /dev/zero as bundle.toml must not hang or
    // exhaust the run (the bundle then fails to open, with the reason).
    let toml_path = dir.join("bundle.toml");
    // A link out of the bundle is not read: its labels would be published (the bundle
    // then fails to open, saying why).
    let refused = reach == Reach::InsideOnly && outside(dir, &toml_path);
    let toml = (!refused)
        .then(|| read_manifest_text(&toml_path).ok())
        .flatten();
    let toml_hashed = match &toml {
        Some(t) => {
            h.update(&(t.len() as u64).to_le_bytes());
            h.update(t.as_bytes());
            true
        }
        // Too large, or not text: its bytes still name it (streamed, bounded memory). A
        // FIFO or a device is not read at all (it could block, or never end).
        None if refused => false,
        None => hash_file(&mut h, &toml_path).is_some(),
    };
    if !toml_hashed {
        h.update(&MISSING.to_le_bytes());
    }
    let manifest = toml.as_ref().and_then(|_| Manifest::load(dir).ok());
    let trace_path = manifest
        .as_ref()
        .map_or_else(|| dir.join("trace.rtit"), |m| m.trace_path(dir));
    let trace_bytes = hash_file(&mut h, &trace_path);
    if trace_bytes.is_none() {
        h.update(&MISSING.to_le_bytes());
    }
    if !toml_hashed {
        // Without a manifest the bytes do not say which bundle this is (two bundles with a
        // FIFO for bundle.toml and the same trace are not one): its path does.
        h.update(dir.to_string_lossy().as_bytes());
    }
    let hex = h.finalize().to_hex();
    Identity {
        id: hex[..32].to_string(),
        trace_bytes,
        manifest,
    }
}

/// The labels file of a perf.data: its name with `.toml` added.
pub fn labels_file(perf_data: &Path) -> PathBuf {
    let mut n = perf_data.as_os_str().to_owned();
    n.push(".toml");
    PathBuf::from(n)
}

/// The labels of a perf.data (from [`labels_file`], none without one). With `reach`
/// [`Reach::InsideOnly`] a labels file that is a link out of the perf.data's directory is
/// an error, and not read; an error never quotes the file (it goes into the catalog).
pub fn perf_data_labels(
    perf_data: &Path,
    reach: Reach,
) -> Result<std::collections::BTreeMap<String, String>> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Labels {
        #[serde(default)]
        labels: std::collections::BTreeMap<String, String>,
    }
    let p = labels_file(perf_data);
    let dir = perf_data.parent().unwrap_or(Path::new("."));
    if reach == Reach::InsideOnly && outside(dir, &p) {
        bail!(
            "{}: a link to a file outside the recording's directory: not read \
             (--allow-outside-paths reads it)",
            p.display()
        );
    }
    let text = match read_manifest_text(&p) {
        Ok(t) => t,
        Err(_) if !p.exists() => return Ok(Default::default()),
        Err(e) => bail!("{}: {e}", p.display()),
    };
    let l: Labels =
        toml::from_str(&text).map_err(|e| anyhow::anyhow!(toml_error_unquoted(&p, &text, &e)))?;
    Ok(l.labels)
}

/// [`identify`] for a perf.data at `path` (a file, or a recording's directory) whose
/// records are the file `data`: BLAKE3 of another version tag, its labels file and the
/// bytes of `data`. Its manifest is one with those labels (the rest of a perf.data's
/// configuration is read when it is decoded).
fn identify_perf_data(path: &Path, data: &Path, reach: Reach) -> Identity {
    let mut h = blake3::Hasher::new();
    h.update(b"tracemill-perf-data-1\0");
    let labels = labels_file(path);
    let labels_outside =
        reach == Reach::InsideOnly && outside(path.parent().unwrap_or(Path::new(".")), &labels);
    if labels_outside || hash_file(&mut h, &labels).is_none() {
        h.update(&MISSING.to_le_bytes());
    }
    let trace_bytes = hash_file(&mut h, data);
    if trace_bytes.is_none() {
        h.update(&MISSING.to_le_bytes());
        h.update(path.to_string_lossy().as_bytes());
    }
    let manifest = perf_data_labels(path, reach).ok().map(|labels| {
        let mut m = Manifest::new(0);
        m.format = tracemill_input::manifest::TraceFormat::Pt;
        m.trace = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        m.labels = labels;
        m
    });
    let hex = h.finalize().to_hex();
    Identity {
        id: hex[..32].to_string(),
        trace_bytes,
        manifest,
    }
}

/// Feed the length and bytes of `path` to `h`; `None` (nothing fed) when it cannot be read.
fn hash_file(h: &mut blake3::Hasher, path: &Path) -> Option<u64> {
    // Not a plain open: a FIFO would block it for ever, before its kind could be seen.
    let mut f = open_regular(path).ok()?;
    let len = f.metadata().ok()?.len();
    h.update(&len.to_le_bytes());
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => {
                h.update(&buf[..k]);
                n += k as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // Unreadable half way: the bundle will fail to open with the reason; its id
            // only needs to be stable, and a hash of what was read so far is.
            Err(_) => break,
        }
    }
    // A file that changed size while being read is hashed as read.
    Some(n)
}

/// Refuse a SOURCE that is the dataset itself.
pub fn check_not_inside(sources: &[PathBuf], dest: &Path) -> Result<()> {
    let Ok(d) = dest.canonicalize() else {
        return Ok(());
    };
    for s in sources {
        if s.canonicalize().is_ok_and(|c| c == d) {
            bail!("source {} is the dataset itself", s.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_bytes_not_the_place() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        let b = d.path().join("nested/b");
        for p in [&a, &b] {
            std::fs::create_dir_all(p).unwrap();
            std::fs::write(p.join("bundle.toml"), "rtit_ctl = 1\n").unwrap();
            std::fs::write(p.join("trace.rtit"), b"\x02\x82").unwrap();
        }
        let ia = identify(&a, Reach::InsideOnly);
        assert_eq!(ia.id, identify(&b, Reach::InsideOnly).id);
        assert_eq!(ia.id.len(), 32);
        assert_eq!(ia.trace_bytes, Some(2));
        std::fs::write(b.join("trace.rtit"), b"\x02\x83").unwrap();
        assert_ne!(ia.id, identify(&b, Reach::InsideOnly).id);
        // Discovery: recursive, a bundle once however it is reached, list files.
        let list = d.path().join("list.txt");
        std::fs::write(&list, "# night 1\na\n\nnested/b/bundle.toml\nmissing\n").unwrap();
        let found = discover(&[d.path().to_path_buf(), list.clone()], None).unwrap();
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[2].ends_with("missing"));
        // Two missing bundles differ by path.
        assert_ne!(
            identify(&found[2], Reach::InsideOnly).id,
            identify(&d.path().join("other"), Reach::InsideOnly).id
        );
        assert!(discover(&[d.path().join("nope")], None).is_err());
    }
}
