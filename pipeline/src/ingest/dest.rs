//! The dataset's home: a local directory, or `s3://bucket/prefix` through the
//! `object_store` crate (`s3.rs`, built with the `s3` feature). Both offer the three
//! operations the commit protocol needs: publish a finished file under its final name at
//! once (rename; single PUT or completed multipart upload), read a catalog file, and
//! remove a file.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::catalog::{self, Status};
use super::layout;
#[cfg(feature = "s3")]
use super::s3::S3Dest;

/// `DEST/_tracemill.json`: what every run into the dataset must agree on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetInfo {
    pub tracemill_dataset: u32,
    pub partition_by: Vec<String>,
}

pub const INFO_FILE: &str = "_tracemill.json";

/// Where the dataset lives.
pub enum Dest {
    Local {
        root: PathBuf,
    },
    #[cfg(feature = "s3")]
    S3(S3Dest),
}

/// What an `s3://` dataset gets from a tracemill built without the `s3` feature.
#[cfg_attr(feature = "s3", allow(dead_code))]
pub fn without_s3(dest: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{dest}: this tracemill was built without S3 support: cargo install --path pipeline \
         --locked --features s3 (from the repository root) builds one with it"
    )
}

impl Dest {
    /// `s3://bucket/prefix` or a local directory. For S3, bundles are decoded into
    /// `staging` (default: a directory under the system's temporary directory) first.
    pub fn new(dest: &str, staging: Option<PathBuf>) -> Result<Dest> {
        if let Some(rest) = dest.strip_prefix("s3://") {
            #[cfg(feature = "s3")]
            return Ok(Dest::S3(S3Dest::new(dest, rest, staging)?));
            #[cfg(not(feature = "s3"))]
            {
                let _ = (rest, staging);
                Err(without_s3(dest))
            }
        } else if dest.contains("://") {
            bail!("{dest}: only local directories and s3://bucket/prefix are supported")
        } else {
            Ok(Dest::Local {
                root: PathBuf::from(dest),
            })
        }
    }

    pub fn display(&self) -> String {
        match self {
            Dest::Local { root } => root.display().to_string(),
            #[cfg(feature = "s3")]
            Dest::S3(s) => s.url().to_string(),
        }
    }

    /// The local path of the dataset, if it is local.
    pub fn local_root(&self) -> Option<&Path> {
        match self {
            Dest::Local { root } => Some(root),
            #[cfg(feature = "s3")]
            Dest::S3(_) => None,
        }
    }

    /// Where bundles are decoded before they are published: `DEST/_staging` (so that
    /// publishing is a rename), or a local directory for S3. Readers skip it: it is not
    /// under a table's directory, and pyarrow and Spark ignore names starting with `_`.
    pub fn staging_root(&self) -> PathBuf {
        match self {
            Dest::Local { root } => root.join("_staging"),
            #[cfg(feature = "s3")]
            Dest::S3(s) => s.staging().to_path_buf(),
        }
    }

    /// The S3 dataset, if it is one.
    #[cfg(feature = "s3")]
    pub fn s3(&self) -> Option<&S3Dest> {
        match self {
            Dest::Local { .. } => None,
            Dest::S3(s) => Some(s),
        }
    }

    /// Create the dataset, or check that it was made with the same partition keys (a
    /// bundle written with other keys would sit at another path: a duplicate). An error
    /// here means nothing can be done.
    pub fn init(&self, partition_by: &[String]) -> Result<()> {
        let want = DatasetInfo {
            tracemill_dataset: 1,
            partition_by: partition_by.to_vec(),
        };
        let text = serde_json::to_string_pretty(&want)? + "\n";
        let found = match self {
            Dest::Local { root } => {
                let staging = self.staging_root();
                std::fs::create_dir_all(&staging)
                    .with_context(|| format!("creating {}", staging.display()))?;
                // A run killed while writing the description below left its temporary.
                tracemill_sinks::remove_stale_temporaries(&staging)?;
                let info = root.join(INFO_FILE);
                match std::fs::read(&info) {
                    Ok(b) => Some(b),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        // Written aside, then linked: several shards may start at once;
                        // one link wins and every other one reads what it wrote.
                        let tmp =
                            staging.join(format!(".{INFO_FILE}.tmp-{}-0", std::process::id()));
                        std::fs::write(&tmp, &text)
                            .with_context(|| format!("writing {}", tmp.display()))?;
                        let linked = std::fs::hard_link(&tmp, &info);
                        let _ = std::fs::remove_file(&tmp);
                        match linked {
                            Ok(()) => None,
                            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                                Some(std::fs::read(&info)?)
                            }
                            Err(e) => {
                                return Err(e)
                                    .with_context(|| format!("writing {}", info.display()))
                            }
                        }
                    }
                    Err(e) => return Err(e).with_context(|| format!("reading {}", info.display())),
                }
            }
            #[cfg(feature = "s3")]
            Dest::S3(s) => s.read_or_create(INFO_FILE, &text)?,
        };
        if let Some(bytes) = found {
            let have: DatasetInfo = serde_json::from_slice(&bytes).with_context(|| {
                format!(
                    "{}/{INFO_FILE} is not a tracemill dataset description",
                    self.display()
                )
            })?;
            if have.partition_by != want.partition_by {
                bail!(
                    "{} is partitioned by [{}], not [{}]: give --partition-by {}",
                    self.display(),
                    have.partition_by.join(","),
                    want.partition_by.join(","),
                    have.partition_by.join(",")
                );
            }
        }
        Ok(())
    }

    /// The committed status of bundle `id`, from its catalog file.
    pub fn status(&self, id: &str) -> Result<Option<Status>> {
        let rel = layout::catalog_file(id);
        let bytes = match self {
            Dest::Local { root } => match std::fs::read(root.join(&rel)) {
                Ok(b) => bytes::Bytes::from(b),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e).with_context(|| format!("reading {rel}")),
            },
            #[cfg(feature = "s3")]
            Dest::S3(s) => match s.read(&rel)? {
                Some(b) => b,
                None => return Ok(None),
            },
        };
        // A catalog file is published whole, so it cannot be partial; one that does not
        // read is not a commit of ours and the bundle is done again (and it replaced).
        Ok(catalog::read_status(bytes).ok())
    }

    /// Make the finished local file `file` visible as `rel` (replacing what is there).
    pub fn publish(&self, file: &Path, rel: &str) -> Result<()> {
        match self {
            Dest::Local { root } => {
                let to = root.join(rel);
                let dir = to.parent().expect("a table file has a directory");
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                std::fs::rename(file, &to)
                    .with_context(|| format!("renaming {} to {}", file.display(), to.display()))?;
                sync_dir(dir)
            }
            #[cfg(feature = "s3")]
            Dest::S3(s) => s.upload(file, rel),
        }
    }

    /// Publish `bytes` as `rel`, written aside in `staging` first.
    pub fn publish_bytes(&self, bytes: Vec<u8>, rel: &str, staging: &Path) -> Result<()> {
        match self {
            Dest::Local { .. } => {
                let tmp = staging.join("catalog.parquet");
                let mut f = std::fs::File::create(&tmp)
                    .with_context(|| format!("creating {}", tmp.display()))?;
                std::io::Write::write_all(&mut f, &bytes)
                    .and_then(|()| f.sync_all())
                    .with_context(|| format!("writing {}", tmp.display()))?;
                drop(f);
                self.publish(&tmp, rel)
            }
            #[cfg(feature = "s3")]
            Dest::S3(s) => s.put(bytes, rel),
        }
    }

    /// Remove `rel`; absent is fine.
    pub fn remove(&self, rel: &str) -> Result<()> {
        match self {
            Dest::Local { root } => match std::fs::remove_file(root.join(rel)) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e).with_context(|| format!("removing {rel}")),
            },
            #[cfg(feature = "s3")]
            Dest::S3(s) => s.remove(rel),
        }
    }
}

/// Make a rename in `dir` durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))
}

#[cfg(test)]
mod tests {
    /// The refusal of a build without S3 (tested end to end in `tests/options.rs`, in such
    /// a build) names the command that builds one with it.
    #[test]
    fn the_refusal_of_s3_names_the_command_that_builds_it_in() {
        let e = super::without_s3("s3://night/fleet").to_string();
        assert!(
            e.starts_with("s3://night/fleet: this tracemill was built without S3 support: ")
                && e.contains("cargo install --path pipeline --locked --features s3"),
            "{e}"
        );
    }
}
