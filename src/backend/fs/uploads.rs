//! Multipart uploads for the `fs` backend. Each upload is a directory under
//! `<root>/.uploads/<handle>/` holding one file per part, named `<number>-<md5hex>`: the part's
//! ETag is in its name, so one rename publishes a part and its ETag together, and a part
//! uploaded again under the same number replaces the old one. A symlink named `<number>` points
//! at the number's current file, so the one it replaces is found without listing the
//! directory: a part costs the same at part 1 and at part 10,000. Completion copies the parts,
//! in order, into an ordinary staged body.

use super::{blocking, fsync_dir};
use crate::backend::{BackendError, ByteStream, PartInfo};
use md5::{Digest, Md5};
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub const UPLOADS: &str = ".uploads";
/// In an upload directory: its parts have `<number>` links (uploads begun before had none, and
/// a part sent again there is found by listing the directory).
const LINKED: &str = ".linked";

/// The directory of an upload; the handle is ours (32 hex digits), never a client's string.
pub fn upload_dir(root: &Path, handle: &str) -> Result<PathBuf, BackendError> {
    if handle.len() != 32 || !handle.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(BackendError::NoSuchUpload(handle.to_string()));
    }
    Ok(root.join(UPLOADS).join(handle))
}

pub async fn create(root: &Path) -> Result<String, BackendError> {
    let handle = format!("{:032x}", rand::random::<u128>());
    let dir = upload_dir(root, &handle)?;
    let base = root.join(UPLOADS);
    blocking(move || {
        std::fs::create_dir_all(&base)?;
        std::fs::create_dir(&dir)?;
        std::fs::File::create(dir.join(LINKED))?;
        fsync_dir(&dir)?;
        fsync_dir(&base)?;
        Ok(())
    })
    .await?;
    Ok(handle)
}

fn parse_name(name: &str) -> Option<(i32, &str)> {
    let (n, md5) = name.split_once('-')?;
    let n: i32 = n.parse().ok()?;
    (md5.len() == 32 && md5.bytes().all(|b| b.is_ascii_hexdigit())).then_some((n, md5))
}

pub async fn put_part(
    root: &Path,
    handle: &str,
    number: i32,
    mut body: ByteStream,
) -> Result<PartInfo, BackendError> {
    let dir = upload_dir(root, handle)?;
    if !tokio::fs::try_exists(&dir).await.unwrap_or(false) {
        return Err(BackendError::NoSuchUpload(handle.to_string()));
    }
    let temp = dir.join(format!("{number}.{:016x}.tmp", rand::random::<u64>()));
    // A client that hangs up mid-part drops this future: the file goes with it.
    let mut unfinished = RemoveOnDrop(Some(temp.clone()));
    let at = temp.clone();
    let file = blocking(move || Ok(std::fs::File::create(at)?)).await?;
    let written = super::writes::write_body(file, Vec::new(), Md5::new(), &mut body).await?;
    let (md5, size) = (hex::encode(written.md5.finalize()), written.size);
    let file = written.file;
    let name = format!("{number}-{md5}");
    // Two sends of one number at once take turns here, so that each finds the other's file
    // through the link and none is left behind.
    let stripe = stripe_of(handle, number);
    blocking(move || {
        // Durable before it is named: in the same trip to a blocking thread as the rename.
        file.sync_all()?;
        drop(file);
        let _turn = stripe.lock().unwrap_or_else(|p| p.into_inner());
        let link = dir.join(number.to_string());
        let previous = std::fs::read_link(&link).ok();
        std::fs::rename(&temp, dir.join(&name))?;
        let fresh = dir.join(format!("{number}.{:016x}.lnk", rand::random::<u64>()));
        std::os::unix::fs::symlink(&name, &fresh)?;
        std::fs::rename(&fresh, &link)?;
        // The same number uploaded before with other bytes: the newest upload wins, as in S3.
        match previous {
            Some(old) if old != Path::new(&name) => match std::fs::remove_file(dir.join(old)) {
                Err(e) if e.kind() != ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            },
            Some(_) => {}
            None if !dir.join(LINKED).exists() => {
                for entry in std::fs::read_dir(&dir)? {
                    let entry = entry?;
                    let other = entry.file_name().to_string_lossy().into_owned();
                    if other != name && parse_name(&other).is_some_and(|(n, _)| n == number) {
                        std::fs::remove_file(entry.path())?;
                    }
                }
            }
            None => {}
        }
        fsync_dir(&dir)?;
        Ok(())
    })
    .await?;
    // Renamed into place (or, after a failure there, removed by the guard).
    unfinished.0 = None;
    Ok(PartInfo {
        number,
        etag: format!("\"{md5}\""),
        size,
        last_modified_ms: crate::wall_clock::now_ms(),
        checksum: None,
    })
}

/// Removes a part's temporary file unless disarmed (set to `None`).
struct RemoveOnDrop(Option<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// One of a fixed set of locks, by upload and part number: sends of one number serialize,
/// others rarely meet.
fn stripe_of(handle: &str, number: i32) -> &'static std::sync::Mutex<()> {
    use std::hash::{Hash, Hasher};
    static STRIPES: std::sync::LazyLock<Vec<std::sync::Mutex<()>>> =
        std::sync::LazyLock::new(|| (0..64).map(|_| std::sync::Mutex::new(())).collect());
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (handle, number).hash(&mut h);
    &STRIPES[(h.finish() % STRIPES.len() as u64) as usize]
}

/// The parts on disk, by number, each with its file.
pub async fn parts(root: &Path, handle: &str) -> Result<Vec<(PartInfo, PathBuf)>, BackendError> {
    let dir = upload_dir(root, handle)?;
    let handle = handle.to_string();
    blocking(move || {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(BackendError::NoSuchUpload(handle))
            }
            Err(e) => return Err(e.into()),
        };
        let mut out: Vec<(PartInfo, PathBuf)> = Vec::new();
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((number, md5)) = parse_name(&name) else {
                continue;
            };
            // A crash between an upload's link and its clean-up can leave the number's older
            // file beside the newer: the `<number>` link names the one that counts.
            if let Ok(linked) = std::fs::read_link(dir.join(number.to_string())) {
                if linked != Path::new(&name) {
                    continue;
                }
            }
            let md = entry.metadata()?;
            out.push((
                PartInfo {
                    number,
                    etag: format!("\"{md5}\""),
                    size: md.len(),
                    last_modified_ms: (md.mtime().max(0) as u64) * 1000,
                    checksum: None,
                },
                entry.path(),
            ));
        }
        out.sort_by_key(|(p, _)| p.number);
        Ok(out)
    })
    .await
}

pub async fn remove(root: &Path, handle: &str) -> Result<(), BackendError> {
    let dir = upload_dir(root, handle)?;
    blocking(move || {
        // A part still streaming in may land its file while the directory is emptied: the
        // removal goes again, so the directory does not outlive its upload's record.
        let mut attempts = 0;
        loop {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
                Err(e) if e.kind() == ErrorKind::DirectoryNotEmpty && attempts < 5 => attempts += 1,
                Err(e) => return Err(e.into()),
            }
        }
    })
    .await
}
