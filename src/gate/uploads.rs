//! The registry of multipart uploads in progress: for each upload id handed to a client, the
//! bucket, key, the token given at CreateMultipartUpload and the backend's handle. The token is
//! fixed for the upload's life: every part and the completion are judged by it.
//!
//! On disk (`<data_dir>/uploads/`) an upload is two files: `<id>`, its record, written once
//! (fsynced, renamed) when the upload is created, and `<id>.parts`, one JSON line appended and
//! synced per part. So a part costs the same at part 1 and at part 10,000, and survives a
//! restart. Each upload has its own lock, and every write runs on the blocking pool: uploads do
//! not wait for each other, and no fsync runs on a runtime worker. Without a directory (unit
//! tests) uploads live in memory only. On a shared fence table (etcd) they are its records
//! instead, so that every instance serves every upload, and the bounds on open uploads are
//! counted there, for every instance together (`uploads_shared.rs`).

use super::parts_log::{self, blocking, log_path, part_line, read_log, sync_dir};
use super::uploads_shared as shared;
use super::GateError;
use crate::backend::{BackendError, ObjectMeta, PartInfo};
use crate::fence::{FenceStore, Records};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Upload {
    pub id: String,
    pub bucket: String,
    pub key: String,
    pub scope_header: Option<Vec<u8>>,
    /// What the object will carry, the token given at creation included (`meta.token`).
    pub meta: ObjectMeta,
    /// The backend's own handle for it (the store's upload id, or a directory name).
    pub handle: String,
    pub initiated_ms: u64,
    /// The principal that created it: open uploads are bounded per key.
    #[serde(default)]
    pub owner: Option<String>,
    /// The parts uploaded so far, by number: what a completion's part list is checked against.
    /// Empty in an upload read with [`UploadRegistry::head`].
    #[serde(default)]
    pub parts: BTreeMap<i32, PartInfo>,
    /// Shared tables: the upload is in its key's and its bucket's counts of open uploads, which
    /// its removal lowers (`uploads_shared.rs`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub counted: bool,
}

impl Upload {
    /// The token the upload was created with; every part and the completion are judged by it.
    pub fn token(&self) -> Option<u64> {
        self.meta.token
    }
}

/// One upload and its parts, behind its own lock.
struct Entry {
    state: Mutex<State>,
}

impl Entry {
    /// The upload without its parts.
    fn head(&self) -> Upload {
        let state = self.state.lock();
        let u = &state.upload;
        Upload {
            id: u.id.clone(),
            bucket: u.bucket.clone(),
            key: u.key.clone(),
            scope_header: u.scope_header.clone(),
            meta: u.meta.clone(),
            handle: u.handle.clone(),
            initiated_ms: u.initiated_ms,
            owner: u.owner.clone(),
            parts: BTreeMap::new(),
            counted: u.counted,
        }
    }
}

struct State {
    upload: Upload,
    /// Lines in the parts log (a part sent again adds a line): rewritten when it holds twice
    /// as many lines as parts.
    log_lines: usize,
    /// Bytes of the parts recorded, for the gauge.
    bytes: u64,
    /// Completed or aborted: a part that arrives now is refused.
    removed: bool,
}

#[derive(Default)]
pub struct UploadRegistry {
    dir: Option<PathBuf>,
    uploads: Mutex<BTreeMap<String, Arc<Entry>>>,
    /// Bytes of every upload's parts, for the gauge.
    bytes_held: Arc<std::sync::atomic::AtomicU64>,
    /// Uploads being created (bucket, owner): counted against the bounds with those open, so
    /// that creates at once cannot all pass one check.
    reserved: Arc<Mutex<Vec<(String, String)>>>,
    /// A shared fence table whose records hold the uploads, for every instance.
    shared: Option<Arc<dyn FenceStore>>,
    /// Shared tables: this instance's changes of one count (`open:key/..`, `open:bucket/..`)
    /// wait for each other here instead of failing each other's swaps; only other instances'
    /// changes make one read the counts again.
    counting: super::ScopeLocks,
}

/// Ids are ours: 32 hex digits. Anything else cannot name an upload.
pub(super) fn valid_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

impl UploadRegistry {
    /// Opens (creating) the directory and loads the uploads recorded there.
    pub fn open(dir: PathBuf) -> std::io::Result<UploadRegistry> {
        std::fs::create_dir_all(&dir)?;
        let mut uploads = BTreeMap::new();
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            match path.extension().and_then(|e| e.to_str()) {
                Some("tmp") => {
                    let _ = std::fs::remove_file(&path);
                    continue;
                }
                Some("parts") => continue,
                _ => {}
            }
            match std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Upload>(&b).ok())
            {
                Some(mut u) if valid_id(&u.id) => {
                    // Records written before the parts log kept their parts inline.
                    let (logged, log_lines) = read_log(&log_path(&dir, &u.id));
                    u.parts.extend(logged);
                    let bytes = u.parts.values().map(|p| p.size).sum();
                    let state = State {
                        upload: u,
                        log_lines,
                        bytes,
                        removed: false,
                    };
                    uploads.insert(
                        state.upload.id.clone(),
                        Arc::new(Entry {
                            state: Mutex::new(state),
                        }),
                    );
                }
                _ => tracing::warn!(path = %path.display(), "ignoring an unreadable upload record"),
            }
        }
        // Every record has its log (records written before the log had none).
        for id in uploads.keys() {
            let log = log_path(&dir, id);
            if !log.exists() {
                std::fs::File::create(&log)?.sync_all()?;
            }
        }
        sync_dir(&dir)?;
        // Parts logs whose record is gone (a crash between the two removals).
        for entry in std::fs::read_dir(&dir)?.flatten() {
            let path = entry.path();
            let id = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            if path.extension().is_some_and(|e| e == "parts") && !uploads.contains_key(id) {
                let _ = std::fs::remove_file(&path);
            }
        }
        let bytes: u64 = uploads.values().map(|e| e.state.lock().bytes).sum();
        let registry = UploadRegistry {
            dir: Some(dir),
            uploads: Mutex::new(uploads),
            bytes_held: Arc::new(bytes.into()),
            reserved: Default::default(),
            shared: None,
            counting: Default::default(),
        };
        registry.census();
        Ok(registry)
    }

    pub fn new_id() -> String {
        format!("{:032x}", rand::random::<u128>())
    }

    /// Uploads kept as the records of a shared fence table (etcd), for every instance.
    pub fn shared(store: Arc<dyn FenceStore>) -> UploadRegistry {
        UploadRegistry {
            shared: Some(store),
            ..UploadRegistry::default()
        }
    }

    fn records(&self) -> Option<&dyn Records> {
        self.shared.as_deref().and_then(|s| s.records())
    }

    /// Records a new upload durably (its record, and an empty parts log) in the place
    /// [`UploadRegistry::reserve`] gave it. On a shared table the bounds are checked again
    /// as the record is made, against every instance's uploads: `Ok(Err(bound))` when creates
    /// through other instances took the last places meanwhile (nothing was recorded).
    pub async fn insert(
        &self,
        upload: Upload,
        place: Reservation,
    ) -> Result<Result<(), &'static str>, GateError> {
        match (self.records(), place.0) {
            (Some(records), Place::Shared(counts, bounds)) => {
                let owner = upload.owner.as_deref().unwrap_or_default();
                let _counting = self.lock_counts(&upload.bucket, owner).await;
                let mut counts = counts;
                let mut attempt = 0;
                loop {
                    let made = shared::insert_counted(records, &upload, &counts, bounds)
                        .await
                        .map_err(GateError::from);
                    match made {
                        Err(e) if super::again(&e, &mut attempt).await => {
                            counts = shared::Counts::read(records, &upload.bucket, owner).await?;
                        }
                        other => return other,
                    }
                }
            }
            (Some(records), Place::Local { .. }) => {
                shared::insert(records, &upload).await?;
                Ok(Ok(()))
            }
            // The place is released after the record is made, as `reserve` counts on.
            (None, _place) => self
                .insert_local(upload)
                .await
                .map(Ok)
                .map_err(|e| failing("cannot record the upload", e)),
        }
    }

    /// This instance's lock on the counts an upload of `owner`'s in `bucket` is in, taken in
    /// one order (the key's first) so that two creates never wait for each other's second.
    async fn lock_counts(
        &self,
        bucket: &str,
        owner: &str,
    ) -> (super::locks::ScopeGuard<'_>, super::locks::ScopeGuard<'_>) {
        let key = self.counting.lock(&format!("key/{owner}")).await;
        let bucket = self.counting.lock(&format!("bucket/{bucket}")).await;
        (key, bucket)
    }

    async fn insert_local(&self, mut upload: Upload) -> std::io::Result<()> {
        upload.parts.clear();
        if let Some(dir) = self.dir.clone() {
            let record = upload.clone();
            blocking(move || {
                let temp = dir.join(format!("{}.tmp", record.id));
                let mut f = std::fs::File::create(&temp)?;
                f.write_all(&serde_json::to_vec(&record).expect("an upload serializes"))?;
                f.sync_all()?;
                std::fs::File::create(log_path(&dir, &record.id))?.sync_all()?;
                std::fs::rename(&temp, dir.join(&record.id))?;
                sync_dir(&dir)
            })
            .await?;
        }
        let state = State {
            upload,
            log_lines: 0,
            bytes: 0,
            removed: false,
        };
        self.uploads.lock().insert(
            state.upload.id.clone(),
            Arc::new(Entry {
                state: Mutex::new(state),
            }),
        );
        self.census();
        Ok(())
    }

    /// Records a part (replacing one with the same number); false if the upload is gone.
    pub async fn add_part(&self, id: &str, part: PartInfo) -> Result<bool, GateError> {
        if let Some(records) = self.records() {
            return Ok(valid_id(id) && shared::add_part(records, id, &part).await?);
        }
        self.add_part_local(id, part)
            .await
            .map_err(|e| failing("cannot record the part", e))
    }

    async fn add_part_local(&self, id: &str, part: PartInfo) -> std::io::Result<bool> {
        let Some(entry) = self.entry(id) else {
            return Ok(false);
        };
        let dir = self.dir.clone();
        let id = id.to_string();
        let held = Arc::clone(&self.bytes_held);
        let added = blocking(move || {
            let mut state = entry.state.lock();
            if state.removed {
                return Ok(false);
            }
            if let Some(dir) = &dir {
                let path = log_path(dir, &id);
                let mut log = std::fs::OpenOptions::new().append(true).open(&path)?;
                log.write_all(&part_line(&part))?;
                log.sync_data()?;
                state.log_lines += 1;
            }
            let size = part.size;
            let replaced = state
                .upload
                .parts
                .insert(part.number, part)
                .map_or(0, |p| p.size);
            state.bytes = state.bytes - replaced + size;
            // Under the upload's lock, as a removal's subtraction is.
            held.fetch_add(size, std::sync::atomic::Ordering::Relaxed);
            held.fetch_sub(replaced, std::sync::atomic::Ordering::Relaxed);
            if let Some(dir) = dir
                .as_ref()
                .filter(|_| state.log_lines > 2 * state.upload.parts.len() + 16)
            {
                // The part is recorded already; a log that stays long only costs space.
                if let Err(e) = compact(dir, &id, &mut state) {
                    tracing::warn!(id, error = %e, "could not compact an upload's parts log");
                }
            }
            Ok(true)
        })
        .await?;
        self.census();
        Ok(added)
    }

    fn entry(&self, id: &str) -> Option<Arc<Entry>> {
        if !valid_id(id) {
            return None;
        }
        self.uploads.lock().get(id).cloned()
    }

    /// The upload with its parts.
    pub async fn get(&self, id: &str) -> Result<Option<Upload>, GateError> {
        match self.records() {
            Some(records) if valid_id(id) => Ok(shared::get(records, id).await?),
            _ => Ok(self
                .entry(id)
                .map(|entry| entry.state.lock().upload.clone())),
        }
    }

    /// The upload without its parts (`parts` empty): what a part or an abort is judged by,
    /// at a cost that does not grow with the parts uploaded.
    pub async fn head(&self, id: &str) -> Result<Option<Upload>, GateError> {
        match self.records() {
            Some(records) if valid_id(id) => Ok(shared::head(records, id).await?),
            _ => Ok(self.entry(id).map(|entry| entry.head())),
        }
    }

    /// Every upload without its parts: this instance's, or on a shared table every instance's.
    async fn heads(&self) -> Result<Vec<Upload>, GateError> {
        match self.records() {
            Some(records) => Ok(shared::all(records).await?),
            None => Ok(self.entries().iter().map(|e| e.head()).collect()),
        }
    }

    /// Every upload's entry, taken from the map at once (each is then read under its own lock).
    fn entries(&self) -> Vec<Arc<Entry>> {
        self.uploads.lock().values().cloned().collect()
    }

    /// Forgets an upload (completed or aborted) and removes its files; on a shared table it
    /// leaves the counts of open uploads it was in.
    pub async fn remove(&self, upload: &Upload) {
        let id = upload.id.as_str();
        if let Some(records) = self.records() {
            // Left behind, it is expired by the sweep (upload_expiry_secs).
            if let Err(e) = self.remove_shared(records, upload).await {
                tracing::warn!(id, error = %e, "could not remove an upload record");
            }
            return;
        }
        let Some(entry) = self.uploads.lock().remove(id) else {
            return;
        };
        let held = Arc::clone(&self.bytes_held);
        let dir = self.dir.clone();
        let id_owned = id.to_string();
        let removed = blocking(move || {
            // Under the upload's lock: a part being recorded finishes first, and one that
            // comes after finds the upload gone.
            let mut state = entry.state.lock();
            state.removed = true;
            held.fetch_sub(state.bytes, std::sync::atomic::Ordering::Relaxed);
            if let Some(dir) = &dir {
                for path in [dir.join(&id_owned), log_path(dir, &id_owned)] {
                    if let Err(e) = std::fs::remove_file(&path) {
                        if e.kind() != std::io::ErrorKind::NotFound {
                            return Err(e);
                        }
                    }
                }
            }
            Ok(())
        })
        .await;
        if let Err(e) = removed {
            tracing::warn!(id, error = %e, "could not remove an upload record");
        }
        self.census();
    }

    async fn remove_shared(&self, records: &dyn Records, upload: &Upload) -> Result<(), GateError> {
        if !upload.counted {
            shared::remove(records, &upload.id).await?;
            return Ok(());
        }
        let owner = upload.owner.as_deref().unwrap_or_default();
        let _counting = self.lock_counts(&upload.bucket, owner).await;
        let mut attempt = 0;
        loop {
            let counts = shared::Counts::read(records, &upload.bucket, owner).await?;
            let removed = shared::remove_counted(records, &upload.id, &counts)
                .await
                .map_err(GateError::from);
            match removed {
                Err(e) if super::again(&e, &mut attempt).await => continue,
                other => return other.map(drop),
            }
        }
    }

    /// Uploads in a bucket whose key starts with `prefix`, by key then id, without their parts.
    pub async fn list(&self, bucket: &str, prefix: &str) -> Result<Vec<Upload>, GateError> {
        let mut out: Vec<Upload> = self
            .heads()
            .await?
            .into_iter()
            .filter(|u| u.bucket == bucket && u.key.starts_with(prefix))
            .collect();
        out.sort_by(|a, b| (&a.key, a.initiated_ms, &a.id).cmp(&(&b.key, b.initiated_ms, &b.id)));
        Ok(out)
    }

    /// Every backend handle recorded (the store uploads that are clients', not leftovers).
    pub fn handles(&self) -> std::collections::HashSet<String> {
        self.entries()
            .iter()
            .map(|e| e.state.lock().upload.handle.clone())
            .collect()
    }

    /// A place for one more upload of `owner`'s in `bucket`, if `owner` has fewer than
    /// `per_key` open (in every bucket) and `bucket` fewer than `per_bucket`, uploads being
    /// created counted. The inner `Err` names the bound reached: `per_key` or `per_bucket`.
    /// Uploads created before `before_ms` (Unix), without their parts.
    pub async fn older_than(&self, before_ms: u64) -> Result<Vec<Upload>, GateError> {
        let mut old = self.heads().await?;
        if let Some(records) = self.records() {
            // The sweep's pass sets the gauges of every instance's uploads.
            crate::metrics::uploads_open(old.len(), shared::bytes(records).await?);
        }
        old.retain(|u| u.initiated_ms < before_ms);
        Ok(old)
    }

    /// Sets the gauges of open uploads and the bytes their parts hold.
    fn census(&self) {
        let open = self.uploads.lock().len();
        let bytes = self.bytes_held.load(std::sync::atomic::Ordering::Relaxed);
        crate::metrics::uploads_open(open, bytes);
    }
}

fn failing(what: &str, e: std::io::Error) -> GateError {
    GateError::Backend(BackendError::Failing(format!("{what}: {e}")))
}

/// Rewrites an upload's parts log with one line per part (a client that sends the same part
/// again and again would otherwise grow it without end).
fn compact(dir: &Path, id: &str, state: &mut State) -> std::io::Result<()> {
    state.log_lines = parts_log::rewrite(dir, id, &state.upload.parts)?;
    Ok(())
}

#[path = "upload_places.rs"]
mod places;
use places::Place;
pub use places::Reservation;

#[cfg(test)]
#[path = "uploads_tests.rs"]
mod tests;
