//! S3 datasets (`s3://bucket/prefix`) through the `object_store` crate, and the claim
//! objects of S3 runs (`claim.rs` says how claims work). Compiled with the `s3` feature
//! only: the client (object_store with reqwest, rustls and tokio) is about 100 crates, a
//! sixth of a first build, which a user who ingests into local directories never needs.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload, UpdateVersion, WriteMultipart};

use super::claim::{unix_now, Owner, HEARTBEAT, LEASE};

/// Files up to this size are uploaded with one PUT; larger ones in parts of this size.
const PART: usize = 16 << 20;

pub struct S3Dest {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: String,
    rt: tokio::runtime::Runtime,
    staging: PathBuf,
}

impl S3Dest {
    /// `dest` is `s3://bucket/prefix`; `rest` what follows `s3://`.
    pub fn new(dest: &str, rest: &str, staging: Option<PathBuf>) -> Result<S3Dest> {
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
        Ok(S3Dest {
            url: dest.trim_end_matches('/').to_string(),
            store: Arc::new(store),
            prefix: prefix.trim_matches('/').to_string(),
            rt,
            staging,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn staging(&self) -> &Path {
        &self.staging
    }

    fn key(&self, rel: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(rel)
        } else {
            ObjectPath::from(format!("{}/{rel}", self.prefix))
        }
    }

    /// Bundle `id`'s claim (`_claims/<id>.json`): taken, or `Err(owner)` when a live run
    /// holds it.
    pub fn claim(&self, id: &str) -> Result<std::result::Result<S3Claim, String>> {
        S3Claim::take(
            self.store.clone(),
            self.rt.handle().clone(),
            self.key(&format!("_claims/{id}.json")),
        )
    }

    /// The dataset's description `name` as it is, or `None` after creating it with `text`
    /// (created only if absent: of several runs starting at once, one writes it and every
    /// other one reads what it wrote).
    pub fn read_or_create(&self, name: &str, text: &str) -> Result<Option<Vec<u8>>> {
        std::fs::create_dir_all(&self.staging)
            .with_context(|| format!("creating {}", self.staging.display()))?;
        let key = self.key(name);
        match self.rt.block_on(self.store.get(&key)) {
            Ok(r) => Ok(Some(self.rt.block_on(r.bytes())?.to_vec())),
            Err(object_store::Error::NotFound { .. }) => {
                let created = self.rt.block_on(self.store.put_opts(
                    &key,
                    PutPayload::from(text.to_string().into_bytes()),
                    PutOptions {
                        mode: PutMode::Create,
                        ..Default::default()
                    },
                ));
                match created {
                    Ok(_) => Ok(None),
                    Err(object_store::Error::AlreadyExists { .. }) => {
                        let r = self.rt.block_on(self.store.get(&key))?;
                        Ok(Some(self.rt.block_on(r.bytes())?.to_vec()))
                    }
                    Err(e) => Err(e).with_context(|| format!("writing {}/{name}", self.url)),
                }
            }
            Err(e) => Err(e).with_context(|| format!("reading {}/{name}", self.url)),
        }
    }

    /// The object `rel`, or `None` when absent.
    pub fn read(&self, rel: &str) -> Result<Option<bytes::Bytes>> {
        match self.rt.block_on(self.store.get(&self.key(rel))) {
            Ok(r) => Ok(Some(self.rt.block_on(r.bytes())?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}/{rel}", self.url)),
        }
    }

    /// Write `bytes` as `rel` with one PUT.
    pub fn put(&self, bytes: Vec<u8>, rel: &str) -> Result<()> {
        self.rt
            .block_on(self.store.put(&self.key(rel), PutPayload::from(bytes)))
            .map(|_| ())
            .with_context(|| format!("writing {}/{rel}", self.url))
    }

    /// Remove `rel`; absent is fine.
    pub fn remove(&self, rel: &str) -> Result<()> {
        match self.rt.block_on(self.store.delete(&self.key(rel))) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e).with_context(|| format!("removing {}/{rel}", self.url)),
        }
    }

    /// One PUT for small files; a multipart upload for large ones, which the store makes
    /// visible only when it completes.
    pub fn upload(&self, file: &Path, rel: &str) -> Result<()> {
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

/// What the S3 claim's owner shares with its renewal thread.
struct S3State {
    etag: Mutex<Option<String>>,
    lost: AtomicBool,
    stop: (Mutex<bool>, Condvar),
}

pub struct S3Claim {
    store: Arc<dyn ObjectStore>,
    rt: tokio::runtime::Handle,
    key: ObjectPath,
    owner: Owner,
    state: Arc<S3State>,
    renewer: Option<std::thread::JoinHandle<()>>,
}

impl S3Claim {
    /// Create the claim object, or take over a dead owner's. `Err(owner)` when a live run
    /// holds it.
    fn take(
        store: Arc<dyn ObjectStore>,
        rt: tokio::runtime::Handle,
        key: ObjectPath,
    ) -> Result<std::result::Result<S3Claim, String>> {
        let me = Owner::me();
        let body = || PutPayload::from(serde_json::to_vec(&me).expect("an owner serializes"));
        let created = rt.block_on(store.put_opts(
            &key,
            body(),
            PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            },
        ));
        let etag = match created {
            Ok(r) => r.e_tag,
            Err(object_store::Error::AlreadyExists { .. }) => {
                let got = match rt.block_on(store.get(&key)) {
                    Ok(g) => g,
                    // Released between our PUT and this GET: try again later.
                    Err(object_store::Error::NotFound { .. }) => {
                        return Ok(Err("another run".to_string()))
                    }
                    Err(e) => return Err(e).with_context(|| format!("reading claim {key}")),
                };
                let their_etag = got.meta.e_tag.clone();
                let bytes = rt.block_on(got.bytes())?;
                let theirs = serde_json::from_slice::<Owner>(&bytes).ok();
                let stale = theirs.as_ref().is_none_or(|o| {
                    o.dead_here() || unix_now().saturating_sub(o.renewed) > LEASE.as_secs()
                });
                let who = theirs.map_or_else(|| "another run".to_string(), |o| o.describe());
                if !stale {
                    return Ok(Err(who));
                }
                let taken = rt.block_on(store.put_opts(
                    &key,
                    body(),
                    PutOptions {
                        mode: PutMode::Update(UpdateVersion {
                            e_tag: their_etag,
                            version: None,
                        }),
                        ..Default::default()
                    },
                ));
                match taken {
                    Ok(r) => r.e_tag,
                    // Another run took it over first.
                    Err(object_store::Error::Precondition { .. }) => return Ok(Err(who)),
                    Err(e) => return Err(e).with_context(|| format!("taking over claim {key}")),
                }
            }
            Err(e) => return Err(e).with_context(|| format!("writing claim {key}")),
        };
        let state = Arc::new(S3State {
            etag: Mutex::new(etag),
            lost: AtomicBool::new(false),
            stop: (Mutex::new(false), Condvar::new()),
        });
        let mut claim = S3Claim {
            store,
            rt,
            key,
            owner: me,
            state,
            renewer: None,
        };
        claim.renewer = Some(claim.start_renewing());
        Ok(Ok(claim))
    }

    /// True once another run took the claim over (a renewal failed).
    pub fn lost(&self) -> bool {
        self.state.lost.load(Ordering::SeqCst)
    }

    /// Renew the claim every HEARTBEAT until released; a failed conditional renewal means
    /// it was taken over.
    fn start_renewing(&self) -> std::thread::JoinHandle<()> {
        let (store, rt, key, state) = (
            self.store.clone(),
            self.rt.clone(),
            self.key.clone(),
            self.state.clone(),
        );
        let mut owner = self.owner.clone();
        std::thread::spawn(move || {
            let (stopped, cv) = &state.stop;
            let mut next = Instant::now() + HEARTBEAT;
            loop {
                let mut s = stopped.lock().unwrap_or_else(|e| e.into_inner());
                while !*s && Instant::now() < next {
                    let wait = next.saturating_duration_since(Instant::now());
                    s = cv
                        .wait_timeout(s, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                if *s {
                    return;
                }
                drop(s);
                next = Instant::now() + HEARTBEAT;
                owner.renewed = unix_now();
                let etag = state.etag.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let r = rt.block_on(store.put_opts(
                    &key,
                    PutPayload::from(serde_json::to_vec(&owner).expect("an owner serializes")),
                    PutOptions {
                        mode: PutMode::Update(UpdateVersion {
                            e_tag: etag,
                            version: None,
                        }),
                        ..Default::default()
                    },
                ));
                match r {
                    Ok(r) => *state.etag.lock().unwrap_or_else(|e| e.into_inner()) = r.e_tag,
                    Err(object_store::Error::Precondition { .. }) => {
                        state.lost.store(true, Ordering::SeqCst);
                        return;
                    }
                    // A passing fault: the lease leaves room for several more tries.
                    Err(_) => {}
                }
            }
        })
    }

    /// Stop renewing and delete the claim object, if it is still ours.
    pub fn release(mut self) {
        {
            let (stopped, cv) = &self.state.stop;
            *stopped.lock().unwrap_or_else(|e| e.into_inner()) = true;
            cv.notify_all();
        }
        if let Some(h) = self.renewer.take() {
            let _ = h.join();
        }
        if self.state.lost.load(Ordering::SeqCst) {
            return;
        }
        // S3 has no conditional delete: check that the object is still ours first. (Between
        // the check and the delete another run could take it over only if it thought us
        // dead, which a run that is releasing its claim was not for LEASE.)
        let ours = self
            .state
            .etag
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Ok(meta) = self.rt.block_on(self.store.head(&self.key)) {
            if meta.e_tag == ours {
                let _ = self.rt.block_on(self.store.delete(&self.key));
            }
        }
    }
}
