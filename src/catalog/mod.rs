//! Which buckets exist: the configured ones, plus those created through the S3 API with the
//! `[bucket_defaults]` policy. Created buckets are recorded in `<data_dir>/buckets.json` so they
//! survive a restart. This module also builds backends for buckets (shared by start-up and
//! CreateBucket): one `fs` backend per configured name, one set of S3 clients per store, and
//! owns the start-up checks that run on every bucket (`startup.rs`). On a shared fence table
//! the created buckets are its records instead, for every instance (`shared.rs`).

#[cfg(any(feature = "s3", feature = "azure", feature = "gcs"))]
mod claim;
#[cfg(feature = "s3")]
mod s3;
mod shared;
mod startup;
#[cfg(any(feature = "s3", feature = "azure", feature = "gcs"))]
pub mod store_probe;
#[cfg(any(feature = "azure", feature = "gcs"))]
mod strict;

pub use startup::{build, build_gate, record_scope, StartupError};

use crate::backend::fs::FsBackend;
use crate::backend::Backend;
use crate::config::{bucket_name_problem, BackendConfig, BucketPolicy, Config};
use crate::fence::FenceStore;
use crate::gate::{BucketEntry, Gate};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("bucket {0} already exists")]
    Exists(String),
    #[error("bucket name {name:?} {why}")]
    InvalidName { name: String, why: String },
    #[error("buckets cannot be created here: the configuration has no [bucket_defaults]; add it, or add [buckets.{0}] and restart")]
    NoTemplate(String),
    #[error("bucket {0} comes from the configuration; remove it there and restart instead")]
    Configured(String),
    #[error("no bucket named {0:?}")]
    NoSuchBucket(String),
    #[error("bucket {0} is not empty (objects or multipart uploads remain); delete them first")]
    NotEmpty(String),
    #[error("{0}")]
    Busy(String),
    #[error("bucket {bucket} was deleted through the S3 API while its scope was {recorded}; [bucket_defaults] now gives it scope {configured}, under which the tokens and tombstones it kept would be forgotten and a stale writer accepted. Create it under another name, or set [bucket_defaults] scope (and prefix_segments) back to {recorded}, or, to change it, stop every writer of bucket {bucket}, make sure the tokens they use next are above every token they used before, and restart once with --accept-scope-change {bucket}")]
    ScopeChanged {
        bucket: String,
        recorded: String,
        configured: String,
    },
    #[error("{0}")]
    Failed(String),
}

/// Backends already built, so buckets on the same backend share it.
#[derive(Default)]
pub struct Backends {
    fs: BTreeMap<String, Arc<FsBackend>>,
    #[cfg(feature = "s3")]
    s3: BTreeMap<String, crate::backend::s3::S3Clients>,
    /// While starting: the store upload ids of client-driven multipart uploads (the upload
    /// registry), which the sweep of abandoned uploads keeps. `None`: no sweep.
    sweep_uploads: Option<HashSet<String>>,
    /// Staging files younger than this survive opening an fs backend (zero at start-up, when
    /// no request is live).
    staging_min_age: Duration,
    #[cfg_attr(
        not(any(feature = "s3", feature = "azure", feature = "gcs")),
        allow(dead_code)
    )]
    spooler: Option<Arc<crate::backend::spool::Spooler>>,
    #[cfg(feature = "azure")]
    azure: BTreeMap<String, Arc<crate::backend::azure::AzureClient>>,
    #[cfg(feature = "gcs")]
    gcs: BTreeMap<String, Arc<crate::backend::gcs::GcsClient>>,
    /// The fence table's id, which each s3 store place's claim must name before the place is
    /// served (`claim.rs`); `None` until the table is open, and then no place is served.
    #[cfg_attr(
        not(any(feature = "s3", feature = "azure", feature = "gcs")),
        allow(dead_code)
    )]
    table_id: Option<String>,
    /// `fences rebuild` of this bucket: another claim on its place is taken over, not refused.
    #[cfg_attr(
        not(any(feature = "s3", feature = "azure", feature = "gcs")),
        allow(dead_code)
    )]
    take_over_claim: Option<String>,
}

/// How old a staging file must be before a backend opened while serving removes it: older
/// than any request still streaming its body could be (the idle timeout cuts stalls off).
const LIVE_STAGING_AGE: Duration = Duration::from_secs(15 * 60);

impl Backends {
    /// One spooler for every store backend (s3, azure, gcs), its spill files under
    /// `<data_dir>/spool`.
    #[cfg_attr(
        not(any(feature = "s3", feature = "azure", feature = "gcs")),
        allow(dead_code)
    )]
    fn spooler(&mut self, config: &Config) -> Arc<crate::backend::spool::Spooler> {
        self.spooler
            .get_or_insert_with(|| {
                crate::backend::spool::Spooler::new(config.server.data_dir.join("spool"))
            })
            .clone()
    }

    /// Backends for start-up: each s3 bucket's abandoned multipart uploads are aborted, except
    /// those in `registered` (uploads clients started and may still complete).
    pub fn for_startup(registered: HashSet<String>) -> Backends {
        Backends {
            sweep_uploads: Some(registered),
            ..Backends::default()
        }
    }

    /// The fence table's id, for the claims of the s3 places built from now on.
    pub fn set_table_id(&mut self, id: String) {
        self.table_id = Some(id);
    }

    /// For `fences rebuild` of `bucket`, which makes its rows the fences of the bucket's place
    /// from the objects there: the place's claim passes to it.
    pub fn taking_over_claim(bucket: &str) -> Backends {
        Backends {
            take_over_claim: Some(bucket.to_string()),
            ..Backends::default()
        }
    }

    /// Serving now: no more sweeping of uploads, and only stale staging files.
    fn serving(&mut self) {
        self.sweep_uploads = None;
        self.staging_min_age = LIVE_STAGING_AGE;
    }

    /// The backend for `bucket` under `policy`, its calls timed and counted under the
    /// backend's name. An s3 bucket is probed before it is served.
    pub async fn for_bucket(
        &mut self,
        config: &Config,
        bucket: &str,
        policy: &BucketPolicy,
    ) -> Result<Arc<dyn Backend>, String> {
        let backend = self.build(config, bucket, policy).await?;
        // What a store that does not answer is told by: its name, where, and the deadline.
        let name = &policy.backend;
        let label = match config.backends.get(name.as_str()) {
            Some(BackendConfig::S3(s3)) => format!(
                "backend {name:?}{}, call_timeout_secs = {}",
                s3.endpoint
                    .as_deref()
                    .map(|e| format!(" at {e}"))
                    .unwrap_or_default(),
                s3.call_timeout_secs
            ),
            _ => format!("backend {name:?}"),
        };
        Ok(crate::backend::instrumented::Instrumented::wrap_labelled(
            name, label, backend,
        ))
    }

    async fn build(
        &mut self,
        config: &Config,
        bucket: &str,
        policy: &BucketPolicy,
    ) -> Result<Arc<dyn Backend>, String> {
        let name = policy.backend.as_str();
        // created_buckets refuses a start whose created buckets name a backend the
        // configuration lost; this is the backstop, not the operator's message.
        let Some(backend) = config.backends.get(name) else {
            return Err(format!(
                "bucket {bucket}: backend {name:?} is not configured"
            ));
        };
        match backend {
            BackendConfig::Fs { root } => {
                if let Some(fs) = self.fs.get(name) {
                    fs.ensure_bucket(bucket).map_err(|e| {
                        format!("cannot create the directory of bucket {bucket}: {e}")
                    })?;
                    return Ok(fs.clone());
                }
                let root = config.fs_root(root);
                let served: Vec<&str> = config
                    .buckets
                    .iter()
                    .filter(|(_, p)| p.backend == name)
                    .map(|(b, _)| b.as_str())
                    .chain([bucket])
                    .collect();
                let fs = FsBackend::open_sweeping(&root, &served, self.staging_min_age).map_err(|e| {
                    format!(
                        "cannot prepare the fs backend {name} at {}: {e}; check that the directory is writable",
                        root.display()
                    )
                })?;
                let fs = Arc::new(fs);
                self.fs.insert(name.to_string(), fs.clone());
                Ok(fs)
            }
            #[cfg(feature = "s3")]
            BackendConfig::S3(s3cfg) => self.build_s3(config, bucket, policy, s3cfg).await,
            #[cfg(feature = "azure")]
            BackendConfig::Azure(az) => self.build_azure(config, bucket, policy, az).await,
            #[cfg(feature = "gcs")]
            BackendConfig::Gcs(g) => self.build_gcs(config, bucket, policy, g).await,
            #[cfg(not(feature = "gcs"))]
            BackendConfig::Gcs(_) => Err(format!(
                "{}; {}",
                crate::config::not_built("gcs", &format!("backend {name}")),
                crate::config::rebuild_with("gcs")
            )),
            #[cfg(not(feature = "azure"))]
            BackendConfig::Azure(_) => Err(format!(
                "{}; {}",
                crate::config::not_built("azure", &format!("backend {name}")),
                crate::config::rebuild_with("azure")
            )),
            #[cfg(not(feature = "s3"))]
            BackendConfig::S3(_) => Err(format!(
                "{}; {}",
                crate::config::not_built("s3", &format!("backend {name}")),
                crate::config::rebuild_with("s3")
            )),
        }
    }
}

/// The buckets created through the S3 API before, as `<data_dir>/buckets.json` records them.
pub fn created_buckets(config: &Config) -> Result<BTreeMap<String, BucketPolicy>, CatalogError> {
    let path = config.server.data_dir.join("buckets.json");
    let created = read_created(&path)?;
    // A bucket keeps the backend it was created on; the configuration may since have lost it.
    // A configured bucket of the same name overrides the record, so its backend is not needed.
    if let Some((bucket, policy)) = created.iter().find(|(b, p)| {
        !config.buckets.contains_key(*b) && !config.backends.contains_key(&p.backend)
    }) {
        return Err(CatalogError::Failed(format!(
            "bucket {bucket} was created through S3 on backend {:?}, which the configuration does not define ({} records the bucket): add [backends.{}] back, or start with the old configuration and delete the bucket through S3 first",
            policy.backend,
            path.display(),
            policy.backend
        )));
    }
    Ok(created)
}

fn read_created(path: &std::path::Path) -> Result<BTreeMap<String, BucketPolicy>, CatalogError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            CatalogError::Failed(format!(
                "{} is unreadable: {e}; restore it from a backup, or fix the JSON by hand",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(CatalogError::Failed(format!(
            "cannot read {}: {e}; check its permissions",
            path.display()
        ))),
    }
}

/// Creates and deletes buckets at run time.
pub struct Catalog {
    config: Config,
    gate: Arc<Gate>,
    store: Arc<dyn FenceStore>,
    backends: tokio::sync::Mutex<Backends>,
    path: PathBuf,
}

impl Catalog {
    pub fn new(
        config: Config,
        gate: Arc<Gate>,
        store: Arc<dyn FenceStore>,
        backends: Backends,
    ) -> Catalog {
        let path = config.server.data_dir.join("buckets.json");
        Catalog {
            config,
            gate,
            store,
            backends: tokio::sync::Mutex::new(backends),
            path,
        }
    }

    /// The buckets created through the S3 API: on a shared table, by any instance.
    async fn created(&self) -> Result<BTreeMap<String, BucketPolicy>, CatalogError> {
        match self.store.records() {
            Some(records) => shared::created(records).await,
            None => read_created(&self.path),
        }
    }

    fn save(&self, created: &BTreeMap<String, BucketPolicy>) -> Result<(), CatalogError> {
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let temp = self.path.with_extension("json.tmp");
            let mut f = std::fs::File::create(&temp)?;
            f.write_all(&serde_json::to_vec_pretty(created).expect("policies serialize"))?;
            f.sync_all()?;
            std::fs::rename(&temp, &self.path)?;
            if let Some(dir) = self.path.parent() {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        };
        write().map_err(|e| CatalogError::Failed(format!("cannot record buckets: {e}")))
    }

    /// Serves again the buckets created before a restart (on a shared table, by any instance).
    pub async fn load(&self) -> Result<usize, CatalogError> {
        if let Some(records) = self.store.records() {
            // Buckets this instance created before its table was shared stay served: their
            // records are written for every instance (one that exists already is kept).
            for (name, policy) in read_created(&self.path)? {
                if !shared::create(records, &name, &policy).await? {
                    tracing::info!(bucket = %name, "a bucket of buckets.json is already recorded for the cluster; keeping that record");
                }
            }
        }
        let created = self.created().await?;
        let mut backends = self.backends.lock().await;
        for (name, policy) in &created {
            match self.serve_created(&mut backends, name, policy).await {
                Ok(()) => {}
                // Another instance created it: its problem is not this instance's to refuse
                // a start over, and the next pass tries again.
                Err(e) if self.store.records().is_some() => {
                    tracing::error!(bucket = %name, error = %e, "cannot serve a bucket created through another instance; trying again at the next pass")
                }
                Err(e) => return Err(e),
            }
        }
        backends.serving();
        Ok(created.len())
    }

    /// Serves a bucket created through the S3 API before (or by another instance).
    async fn serve_created(
        &self,
        backends: &mut Backends,
        name: &str,
        policy: &BucketPolicy,
    ) -> Result<(), CatalogError> {
        if self.config.buckets.contains_key(name) || self.gate.bucket(name).is_ok() {
            return Ok(()); // configured since (the configuration wins), or served already
        }
        let created_ms = startup::record_scope(self.store.as_ref(), &self.config, name, policy)
            .await
            .map_err(|e| CatalogError::Failed(e.to_string()))?;
        let backend = backends
            .for_bucket(&self.config, name, policy)
            .await
            .map_err(CatalogError::Failed)?;
        self.gate.add_bucket(
            name,
            BucketEntry::new(policy.clone(), backend).created_at(created_ms),
        );
        Ok(())
    }

    /// On a shared table, serves a bucket another instance created, if `name` is one: called
    /// before a request on a bucket this instance does not serve is refused NoSuchBucket.
    pub async fn discover(&self, name: &str) -> Result<(), CatalogError> {
        let Some(records) = self.store.records() else {
            return Ok(());
        };
        if self.gate.bucket(name).is_ok() || bucket_name_problem(name).is_some() {
            return Ok(());
        }
        if let Some(policy) = shared::one(records, name).await? {
            let mut backends = self.backends.lock().await;
            self.serve_created(&mut backends, name, &policy).await?;
        }
        Ok(())
    }

    /// On a shared table, serves the buckets other instances created and stops serving those
    /// they deleted (one still being written through this instance goes at a later pass).
    /// Runs every [`shared::SYNC_EVERY`] and before ListBuckets.
    pub async fn sync(&self) -> Result<(), CatalogError> {
        let Some(records) = self.store.records() else {
            return Ok(());
        };
        let created = shared::created(records).await?;
        let mut backends = self.backends.lock().await;
        for (name, policy) in &created {
            // One bucket this instance cannot serve must not hold back the others, nor the
            // deletions below.
            if let Err(e) = self.serve_created(&mut backends, name, policy).await {
                tracing::warn!(bucket = %name, error = %e, "cannot serve a bucket created through another instance; trying again at the next pass");
            }
        }
        for name in self.gate.bucket_names() {
            if self.config.buckets.contains_key(&name) || created.contains_key(&name) {
                continue;
            }
            if self.forget_deleted(&name).is_ok() {
                tracing::info!(bucket = %name, "bucket deleted through another instance; no longer served here");
            }
        }
        Ok(())
    }

    /// Stops serving a bucket another instance deleted; refused while a write to it is in
    /// flight here.
    fn forget_deleted(&self, name: &str) -> Result<(), CatalogError> {
        let closing = self
            .gate
            .close_bucket(name)
            .map_err(|e| CatalogError::Busy(e.to_string()))?;
        self.gate.remove_bucket(name, closing);
        Ok(())
    }

    /// CreateBucket: a new bucket with the `[bucket_defaults]` policy.
    pub async fn create(&self, name: &str) -> Result<(), CatalogError> {
        if let Some(why) = bucket_name_problem(name) {
            return Err(CatalogError::InvalidName {
                name: name.to_string(),
                why: why.to_string(),
            });
        }
        let mut backends = self.backends.lock().await;
        if let Some(records) = self.store.records() {
            // Served here but deleted through another instance since: it is created afresh,
            // not answered as existing.
            let served = self.gate.bucket(name).is_ok();
            if served
                && !self.config.buckets.contains_key(name)
                && shared::one(records, name).await?.is_none()
            {
                self.forget_deleted(name)?;
            }
        }
        if self.gate.bucket(name).is_ok() {
            return Err(CatalogError::Exists(name.to_string()));
        }
        let Some(template) = &self.config.bucket_defaults else {
            return Err(CatalogError::NoTemplate(name.to_string()));
        };
        let mut policy = template.clone();
        if matches!(self.config.backends[&policy.backend], BackendConfig::S3(_)) {
            policy.backend_prefix = format!("{}{name}/", policy.backend_prefix);
        }
        let mut created = self.created().await?;
        // Two buckets on the same store keys would each keep a fence for one object.
        let mut existing = created.clone();
        existing.extend(self.config.buckets.clone());
        if let Some(why) = self.config.overlap_with(name, &policy, &existing) {
            return Err(CatalogError::InvalidName {
                name: name.to_string(),
                why,
            });
        }
        let backend = backends
            .for_bucket(&self.config, name, &policy)
            .await
            .map_err(CatalogError::Failed)?;
        let created_ms = startup::record_scope(self.store.as_ref(), &self.config, name, &policy)
            .await
            .map_err(|e| match e {
                // A client's request that can never succeed as it is: not a 503 to retry.
                StartupError::ScopeChanged {
                    bucket,
                    recorded,
                    configured,
                } => CatalogError::ScopeChanged {
                    bucket,
                    recorded,
                    configured,
                },
                e => CatalogError::Failed(e.to_string()),
            })?;
        match self.store.records() {
            // Of instances creating it at once, one writes the record; the others serve the
            // bucket it created.
            Some(records) => {
                if !shared::create(records, name, &policy).await? {
                    if let Some(theirs) = shared::one(records, name).await? {
                        self.serve_created(&mut backends, name, &theirs).await?;
                    }
                    return Err(CatalogError::Exists(name.to_string()));
                }
            }
            None => {
                created.insert(name.to_string(), policy.clone());
                self.save(&created)?;
            }
        }
        self.gate.add_bucket(
            name,
            BucketEntry::new(policy, backend).created_at(created_ms),
        );
        tracing::info!(target: "fencegate::audit", bucket = name, "bucket created through the S3 API");
        Ok(())
    }

    /// On a shared table, [`Self::sync`] every [`shared::SYNC_EVERY`] until `shutdown`.
    pub fn watch(self: &Arc<Self>, shutdown: &crate::shutdown::Shutdown) {
        if self.store.records().is_none() {
            return;
        }
        let catalog = Arc::clone(self);
        shutdown.spawn_background(async move {
            loop {
                tokio::time::sleep(shared::SYNC_EVERY).await;
                if let Err(e) = catalog.sync().await {
                    tracing::warn!(error = %e, "could not read the buckets created through other instances; trying again shortly");
                }
            }
        });
    }

    /// DeleteBucket: only a created bucket, and only when it holds nothing.
    pub async fn delete(&self, name: &str) -> Result<(), CatalogError> {
        let _backends = self.backends.lock().await;
        if self.config.buckets.contains_key(name) {
            return Err(CatalogError::Configured(name.to_string()));
        }
        let mut created = self.created().await?;
        if !created.contains_key(name) {
            return Err(CatalogError::NoSuchBucket(name.to_string()));
        }
        // Closed to new writes before the emptiness check, and refused while a write is in
        // flight: a PUT still streaming must not land in a bucket this answer says is gone.
        let closing = self
            .gate
            .close_bucket(name)
            .map_err(|e| CatalogError::Busy(e.to_string()))?;
        let page = self
            .gate
            .list(name, "", None, 1)
            .await
            .map_err(|e| CatalogError::Failed(e.to_string()))?;
        let uploads = self
            .gate
            .uploads(name, "")
            .await
            .map_err(|e| CatalogError::Failed(e.to_string()))?
            .len();
        if !page.objects.is_empty() || uploads > 0 {
            return Err(CatalogError::NotEmpty(name.to_string()));
        }
        self.gate
            .bucket_settled(name)
            .await
            .map_err(|e| CatalogError::Busy(e.to_string()))?;
        match self.store.records() {
            Some(records) => shared::delete(records, name).await?,
            None => {
                created.remove(name);
                self.save(&created)?;
            }
        }
        self.gate.remove_bucket(name, closing);
        tracing::info!(target: "fencegate::audit", bucket = name, "bucket deleted through the S3 API; its fence rows stay, so old tokens stay fenced if it is created again");
        Ok(())
    }
}
