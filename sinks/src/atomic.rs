//! Publish a file all at once: write it under a hidden temporary name in the same
//! directory, make it durable, then rename it over the final name.
//!
//! A reader (or the next nightly run) therefore sees either the previous complete file or
//! the new complete file, never a half-written one: rename within a directory is atomic
//! on POSIX file systems. The temporary lives in the *same* directory because a rename
//! across file systems is a copy. Its name starts with a dot and does not end in the
//! table's extension, so globs such as `*.parquet` never pick it up.
//!
//! If the [`PendingFile`] is dropped before [`PendingFile::commit`] — an error, a panic
//! unwinding through the writer — the temporary is removed. Only a hard kill (SIGKILL,
//! power loss) can leave one behind; its name (`.<name>.tmp-<pid>-<n>`) says which process
//! wrote it, and [`remove_stale_temporaries`] removes those whose process is gone.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Error;

/// Distinguishes temporaries of the same process (two writers for one name, or a writer
/// re-created after a failure, must not share a file).
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A file being written under a temporary name; see the module docs.
#[derive(Debug)]
pub(crate) struct PendingFile {
    dest: PathBuf,
    tmp: PathBuf,
    committed: bool,
}

impl PendingFile {
    /// Creates the temporary file next to `dest`. `dest` itself is not touched.
    pub(crate) fn create(dest: &Path) -> Result<(PendingFile, File), Error> {
        let Some(name) = dest.file_name() else {
            return Err(Error::io(
                dest,
                "creating",
                io::Error::new(io::ErrorKind::InvalidInput, "not a file name"),
            ));
        };
        let tmp = dest.with_file_name(format!(
            ".{}.tmp-{}-{}",
            name.to_string_lossy(),
            std::process::id(),
            NEXT_ID.fetch_add(1, Ordering::Relaxed)
        ));
        // create_new: never truncate somebody else's file, however unlikely the name clash.
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| Error::io(dest, "creating temporary file", e))?;
        let pending = PendingFile {
            dest: dest.to_path_buf(),
            tmp,
            committed: false,
        };
        Ok((pending, file))
    }

    /// The name the file will have once committed.
    pub(crate) fn dest(&self) -> &Path {
        &self.dest
    }

    #[cfg(test)]
    pub(crate) fn tmp(&self) -> &Path {
        &self.tmp
    }

    /// Makes `file` (the one [`create`](Self::create) returned, fully written and flushed)
    /// durable and gives it its final name, made durable too when `sync_directory`.
    /// Returns its size in bytes.
    #[cfg(test)]
    pub(crate) fn commit(self, file: File, sync_directory: bool) -> Result<u64, Error> {
        let size = self.sync(file)?;
        let dest = self.dest.clone();
        self.rename()?;
        if sync_directory {
            sync_dir(&dest);
        }
        Ok(size)
    }

    /// Makes `file` durable under its temporary name; returns its size. Data before name:
    /// without this fsync a crash shortly after the rename can leave the final name
    /// pointing at an empty or partial file (delayed allocation).
    pub(crate) fn sync(&self, file: File) -> Result<u64, Error> {
        file.sync_all()
            .map_err(|e| Error::io(&self.dest, "syncing", e))?;
        let size = file
            .metadata()
            .map_err(|e| Error::io(&self.dest, "syncing", e))?
            .len();
        Ok(size)
    }

    /// Gives the (synced) temporary its final name.
    pub(crate) fn rename(mut self) -> Result<(), Error> {
        fs::rename(&self.tmp, &self.dest)
            .map_err(|e| Error::io(&self.dest, "renaming temporary file", e))?;
        self.committed = true;
        Ok(())
    }
}

/// Files written and synced under temporary names, published together by
/// [`publish_together`].
#[derive(Debug)]
pub struct Unpublished {
    pub(crate) pending: PendingFile,
}

impl Unpublished {
    /// The name the file will have.
    pub fn dest(&self) -> &Path {
        self.pending.dest()
    }
}

/// Publishes several finished files of one directory as one set: first removes `stale`
/// (files of an earlier run that this set does not replace), then renames every file into
/// place, then syncs the directory once.
///
/// Only written files reach this point (an error while writing any of them drops them
/// all, temporaries removed, and leaves the directory as it was), so a full disk never
/// leaves part of a new set beside part of an old one. The renames take microseconds; a
/// crash among them leaves some tables of the new set and none of the old.
pub fn publish_together(files: Vec<Unpublished>, stale: &[PathBuf]) -> Result<(), Error> {
    for p in stale {
        match fs::remove_file(p) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(p, "removing the older table", e)),
        }
    }
    let dir = files.first().map(|f| f.dest().to_path_buf());
    for f in files {
        f.pending.rename()?;
    }
    if let Some(d) = dir {
        sync_dir(&d);
    } else if let Some(p) = stale.first() {
        sync_dir(p);
    }
    Ok(())
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if !self.committed {
            // Nothing useful to do if this fails (we may be unwinding already); the name
            // says it is a temporary.
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Removes the temporaries that killed writers left in `dir`: files named
/// `.<name>.tmp-<pid>-<n>` whose process no longer runs. Returns their paths. A directory
/// that does not exist has none.
///
/// Whether a process runs is read from `/proc`; where it cannot be (no `/proc`), nothing is
/// removed: a live writer's temporary must never go.
pub fn remove_stale_temporaries(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(dir, "listing stale temporaries", e)),
    };
    let mut removed = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, "listing stale temporaries", e))?;
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(temporary_pid) else {
            continue;
        };
        if !process_gone(pid) {
            continue;
        }
        let path = entry.path();
        match fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            // Another run cleaning up at the same time.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(path, "removing stale temporary", e)),
        }
    }
    removed.sort();
    Ok(removed)
}

/// The writer's pid, if `name` is a temporary's name (`.<name>.tmp-<pid>-<n>`).
fn temporary_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?;
    let (dest, tail) = rest.rsplit_once(".tmp-")?;
    let (pid, n) = tail.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if dest.is_empty() || !digits(pid) || !digits(n) {
        return None;
    }
    pid.parse().ok()
}

/// True when process `pid` certainly does not run.
fn process_gone(pid: u32) -> bool {
    if pid == std::process::id() {
        return false;
    }
    let proc = Path::new("/proc");
    proc.join("self").exists() && !proc.join(pid.to_string()).exists()
}

/// Makes the rename itself durable. Best effort: the file is complete and in place either
/// way, and some file systems (and all of Windows) cannot fsync a directory.
pub(crate) fn sync_dir(path: &Path) {
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn commit_renames_and_drop_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("t.parquet");

        let (p, mut f) = PendingFile::create(&dest).unwrap();
        f.write_all(b"hello").unwrap();
        let tmp_name = p.tmp().file_name().unwrap().to_string_lossy().into_owned();
        assert!(tmp_name.starts_with(".t.parquet.tmp-"), "{tmp_name}");
        assert_eq!(names(dir.path()), [tmp_name]);
        assert_eq!(p.commit(f, true).unwrap(), 5);
        assert_eq!(names(dir.path()), ["t.parquet"]);

        // A second, abandoned attempt leaves the first file alone.
        let (p, mut f) = PendingFile::create(&dest).unwrap();
        f.write_all(b"partial").unwrap();
        drop(f);
        drop(p);
        assert_eq!(names(dir.path()), ["t.parquet"]);
        assert_eq!(fs::read(&dest).unwrap(), b"hello");
    }

    #[test]
    fn stale_temporaries_of_dead_processes_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        // A process that has exited: its pid is free (and, moments later, still unused).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        for name in [
            format!(".branches.parquet.tmp-{dead}-0"),
            format!(".events.arrow.tmp-{dead}-12"),
            format!(".timing.parquet.tmp-{me}-3"),
            format!("branches.parquet.tmp-{dead}-0"),
            format!(".x.tmp-{dead}-y"),
            "coverage.parquet".to_string(),
        ] {
            fs::write(dir.path().join(name), b"x").unwrap();
        }
        let removed = remove_stale_temporaries(dir.path()).unwrap();
        if !Path::new("/proc/self").exists() {
            assert!(removed.is_empty());
            return;
        }
        assert_eq!(removed.len(), 2, "{removed:?}");
        let mut want = vec![
            format!(".timing.parquet.tmp-{me}-3"),
            format!(".x.tmp-{dead}-y"),
            "branches.parquet.tmp-".to_string() + &format!("{dead}-0"),
            "coverage.parquet".to_string(),
        ];
        want.sort();
        assert_eq!(names(dir.path()), want);
        let gone = dir.path().join("no-such-dir");
        assert!(remove_stale_temporaries(&gone).unwrap().is_empty());
    }

    #[test]
    fn errors_name_the_destination() {
        let dest = Path::new("/nonexistent-dir-for-tracemill/branches.parquet");
        let e = PendingFile::create(dest).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("/nonexistent-dir-for-tracemill/branches.parquet: creating"),
            "{msg}"
        );
    }
}
