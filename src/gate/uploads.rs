//! The registry of multipart uploads in progress: for each upload id handed to a client, the
//! bucket, key, the token given at CreateMultipartUpload and the backend's handle. The token is
//! fixed for the upload's life: every part and the completion are judged by it.
//!
//! Records are small JSON files under `<data_dir>/uploads/` (written, fsynced, renamed), so an
//! upload survives a restart; without a directory (unit tests) they live in memory only.

use crate::backend::{ObjectMeta, PartInfo};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

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
    /// The parts uploaded so far, by number: what a completion's part list is checked against.
    #[serde(default)]
    pub parts: BTreeMap<i32, PartInfo>,
}

impl Upload {
    /// The token the upload was created with; every part and the completion are judged by it.
    pub fn token(&self) -> Option<u64> {
        self.meta.token
    }
}

#[derive(Default)]
pub struct UploadRegistry {
    dir: Option<PathBuf>,
    uploads: Mutex<BTreeMap<String, Upload>>,
}

/// Ids are ours: 32 hex digits. Anything else cannot name an upload.
fn valid_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

impl UploadRegistry {
    /// Opens (creating) the directory and loads the uploads recorded there.
    pub fn open(dir: PathBuf) -> std::io::Result<UploadRegistry> {
        std::fs::create_dir_all(&dir)?;
        let mut uploads = BTreeMap::new();
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "tmp") {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            match std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Upload>(&b).ok())
            {
                Some(u) if valid_id(&u.id) => {
                    uploads.insert(u.id.clone(), u);
                }
                _ => tracing::warn!(path = %path.display(), "ignoring an unreadable upload record"),
            }
        }
        Ok(UploadRegistry {
            dir: Some(dir),
            uploads: Mutex::new(uploads),
        })
    }

    pub fn new_id() -> String {
        format!("{:032x}", rand::random::<u128>())
    }

    pub fn insert(&self, upload: Upload) -> std::io::Result<()> {
        let mut uploads = self.uploads.lock();
        self.write(&upload)?;
        uploads.insert(upload.id.clone(), upload);
        Ok(())
    }

    /// Records a part (replacing one with the same number); false if the upload is gone.
    pub fn add_part(&self, id: &str, part: PartInfo) -> std::io::Result<bool> {
        let mut uploads = self.uploads.lock();
        let Some(upload) = uploads.get_mut(id) else {
            return Ok(false);
        };
        upload.parts.insert(part.number, part);
        self.write(upload)?;
        Ok(true)
    }

    /// Durably writes one record (the caller holds the lock, so writes never interleave).
    fn write(&self, upload: &Upload) -> std::io::Result<()> {
        if let Some(dir) = &self.dir {
            let temp = dir.join(format!("{}.tmp", upload.id));
            let mut f = std::fs::File::create(&temp)?;
            f.write_all(&serde_json::to_vec(&upload).expect("an upload serializes"))?;
            f.sync_all()?;
            std::fs::rename(&temp, dir.join(&upload.id))?;
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }

    pub fn get(&self, id: &str) -> Option<Upload> {
        if !valid_id(id) {
            return None;
        }
        self.uploads.lock().get(id).cloned()
    }

    pub fn remove(&self, id: &str) {
        if !valid_id(id) {
            return;
        }
        self.uploads.lock().remove(id);
        if let Some(dir) = &self.dir {
            if let Err(e) = std::fs::remove_file(dir.join(id)) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(id, error = %e, "could not remove an upload record");
                }
            }
        }
    }

    /// Uploads in a bucket whose key starts with `prefix`, by key then id.
    pub fn list(&self, bucket: &str, prefix: &str) -> Vec<Upload> {
        let mut out: Vec<Upload> = self
            .uploads
            .lock()
            .values()
            .filter(|u| u.bucket == bucket && u.key.starts_with(prefix))
            .cloned()
            .collect();
        out.sort_by(|a, b| (&a.key, a.initiated_ms, &a.id).cmp(&(&b.key, b.initiated_ms, &b.id)));
        out
    }
}
