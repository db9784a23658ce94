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
//! wrote it.

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
    /// durable and gives it its final name. Returns its size in bytes.
    pub(crate) fn commit(mut self, file: File) -> Result<u64, Error> {
        // Data before name: without this fsync a crash shortly after the rename can leave
        // the final name pointing at an empty or partial file (delayed allocation).
        file.sync_all()
            .map_err(|e| Error::io(&self.dest, "syncing", e))?;
        let size = file
            .metadata()
            .map_err(|e| Error::io(&self.dest, "syncing", e))?
            .len();
        drop(file);
        fs::rename(&self.tmp, &self.dest)
            .map_err(|e| Error::io(&self.dest, "renaming temporary file", e))?;
        self.committed = true;
        sync_dir(&self.dest);
        Ok(size)
    }
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

/// Makes the rename itself durable. Best effort: the file is complete and in place either
/// way, and some file systems (and all of Windows) cannot fsync a directory.
fn sync_dir(path: &Path) {
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
        assert_eq!(p.commit(f).unwrap(), 5);
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
