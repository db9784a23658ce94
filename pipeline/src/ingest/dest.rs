//! The dataset's home: a local directory, or `s3://bucket/prefix` through the
//! `object_store` crate. Both offer the three operations the commit protocol needs:
//! publish a finished file under its final name at once (rename; single PUT or completed
//! multipart upload), read a catalog file, and remove a file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutPayload, WriteMultipart};
use serde::{Deserialize, Serialize};

use super::catalog::{self, Status};
use super::layout;

/// `DEST/_tracemill.json`: what every run into the dataset must agree on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetInfo {
    pub tracemill_dataset: u32,
    pub partition_by: Vec<String>,
}

pub const INFO_FILE: &str = "_tracemill.json";

/// Where the dataset lives.
pub enum Dest {
    Local { root: PathBuf },
    S3(S3Dest),
}

pub struct S3Dest {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: String,
    rt: tokio::runtime::Runtime,
    staging: PathBuf,
}

/// Files up to this size are uploaded with one PUT; larger ones in parts of this size.
const PART: usize = 16 << 20;

impl Dest {
    /// `s3://bucket/prefix` or a local directory. For S3, bundles are decoded into
    /// `staging` (default: a directory under the system's temporary directory) first.
    pub fn new(dest: &str, staging: Option<PathBuf>) -> Result<Dest> {
        if let Some(rest) = dest.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                bail!("{dest}: no bucket name");
            }
            let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
            // AWS_ENDPOINT_URL (the AWS CLI's name) as well as object_store's AWS_ENDPOINT.
            let endpoint = ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"]
                .iter()
                .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()));
            if let Some(ep) = endpoint {
                // Plain http only where the endpoint says so (a local S3 server).
                if ep.starts_with("http://") {
                    b = b.with_allow_http(true);
                }
                b = b.with_endpoint(ep);
            }
            let store = b
                .build()
                .with_context(|| format!("{dest}: configuring S3 from the AWS environment"))?;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("tracemill-s3")
                .enable_all()
                .build()
                .context("starting the S3 client")?;
            let staging = staging.unwrap_or_else(|| {
                let tag = blake3::hash(dest.as_bytes()).to_hex();
                std::env::temp_dir().join(format!("tracemill-ingest-{}", &tag[..16]))
            });
            Ok(Dest::S3(S3Dest {
                url: dest.trim_end_matches('/').to_string(),
                store: Arc::new(store),
                prefix: prefix.trim_matches('/').to_string(),
                rt,
                staging,
            }))
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
            Dest::S3(s) => s.url.clone(),
        }
    }

    /// The local path of the dataset, if it is local.
    pub fn local_root(&self) -> Option<&Path> {
        match self {
            Dest::Local { root } => Some(root),
            Dest::S3(_) => None,
        }
    }

    /// Where bundles are decoded before they are published: `DEST/_staging` (so that
    /// publishing is a rename), or a local directory for S3. Readers skip it: it is not
    /// under a table's directory, and pyarrow and Spark ignore names starting with `_`.
    pub fn staging_root(&self) -> PathBuf {
        match self {
            Dest::Local { root } => root.join("_staging"),
            Dest::S3(s) => s.staging.clone(),
        }
    }

    /// For an S3 dataset: the store, a handle of its runtime and the key of bundle `id`'s
    /// claim object (`_claims/<id>.json`, see `claim.rs`). `None` for a local dataset,
    /// whose claims are the staging directory's lock files alone.
    pub fn claims_store(
        &self,
        id: &str,
    ) -> Option<(Arc<dyn ObjectStore>, tokio::runtime::Handle, ObjectPath)> {
        match self {
            Dest::Local { .. } => None,
            Dest::S3(s) => Some((
                s.store.clone(),
                s.rt.handle().clone(),
                s.key(&format!("_claims/{id}.json")),
            )),
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
            Dest::S3(s) => {
                std::fs::create_dir_all(&s.staging)
                    .with_context(|| format!("creating {}", s.staging.display()))?;
                let key = s.key(INFO_FILE);
                match s.rt.block_on(s.store.get(&key)) {
                    Ok(r) => Some(s.rt.block_on(r.bytes())?.to_vec()),
                    Err(object_store::Error::NotFound { .. }) => {
                        // Created only if absent: of several runs starting at once, one
                        // writes it and every other one reads what it wrote.
                        let created = s.rt.block_on(s.store.put_opts(
                            &key,
                            PutPayload::from(text.clone().into_bytes()),
                            object_store::PutOptions {
                                mode: object_store::PutMode::Create,
                                ..Default::default()
                            },
                        ));
                        match created {
                            Ok(_) => None,
                            Err(object_store::Error::AlreadyExists { .. }) => {
                                let r = s.rt.block_on(s.store.get(&key))?;
                                Some(s.rt.block_on(r.bytes())?.to_vec())
                            }
                            Err(e) => {
                                return Err(e)
                                    .with_context(|| format!("writing {}/{INFO_FILE}", s.url))
                            }
                        }
                    }
                    Err(e) => {
                        return Err(e).with_context(|| format!("reading {}/{INFO_FILE}", s.url))
                    }
                }
            }
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
            Dest::S3(s) => match s.rt.block_on(s.store.get(&s.key(&rel))) {
                Ok(r) => s.rt.block_on(r.bytes())?,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(e).with_context(|| format!("reading {}/{rel}", s.url)),
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
            Dest::S3(s) => {
                s.rt.block_on(s.store.put(&s.key(rel), PutPayload::from(bytes)))
                    .map(|_| ())
                    .with_context(|| format!("writing {}/{rel}", s.url))
            }
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
            Dest::S3(s) => match s.rt.block_on(s.store.delete(&s.key(rel))) {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(e).with_context(|| format!("removing {}/{rel}", s.url)),
            },
        }
    }
}

impl S3Dest {
    fn key(&self, rel: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(rel)
        } else {
            ObjectPath::from(format!("{}/{rel}", self.prefix))
        }
    }

    /// One PUT for small files; a multipart upload for large ones, which the store makes
    /// visible only when it completes.
    fn upload(&self, file: &Path, rel: &str) -> Result<()> {
        let key = self.key(rel);
        let what = || format!("uploading {} to {}/{rel}", file.display(), self.url);
        let len = std::fs::metadata(file).with_context(what)?.len();
        if len <= PART as u64 {
            let bytes = std::fs::read(file).with_context(what)?;
            self.rt
                .block_on(self.store.put(&key, PutPayload::from(bytes)))
                .with_context(what)?;
            return Ok(());
        }
        self.rt
            .block_on(async {
                use std::io::Read;
                let upload = self.store.put_multipart(&key).await?;
                let mut w = WriteMultipart::new_with_chunk_size(upload, PART);
                let mut f =
                    std::fs::File::open(file).map_err(|e| object_store::Error::Generic {
                        store: "local",
                        source: Box::new(e),
                    })?;
                let mut buf = vec![0u8; PART];
                loop {
                    let n = f.read(&mut buf).map_err(|e| object_store::Error::Generic {
                        store: "local",
                        source: Box::new(e),
                    })?;
                    if n == 0 {
                        break;
                    }
                    w.wait_for_capacity(2).await?;
                    w.write(&buf[..n]);
                }
                w.finish().await.map(|_| ())
            })
            .with_context(what)
    }
}

/// Make a rename in `dir` durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))
}
