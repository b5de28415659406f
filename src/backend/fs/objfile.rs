//! The on-disk object file: the body, then a JSON trailer with the key and metadata, then the
//! trailer's length (u32 LE) and a magic. Body and metadata live in one file so that a single
//! rename publishes both atomically; the body starts at offset 0 so reads need no seek maths.

use crate::backend::{BackendError, ObjectInfo, ObjectMeta};
use serde::{Deserialize, Serialize};
use std::fs::{File, Metadata};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;

pub const MAGIC: &[u8; 8] = b"FGOBJ001";
const TAIL: u64 = 4 + 8;

#[derive(Debug, Serialize, Deserialize)]
pub struct Trailer {
    pub key: String,
    pub etag: String,
    pub size: u64,
    #[serde(flatten)]
    pub meta: ObjectMeta,
    /// The parts a multipart completion joined, in order, as (number, size) (absent otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<(u32, u64)>,
}

impl Trailer {
    /// The bytes appended after the body.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec(self).expect("a trailer always serializes");
        let len = out.len() as u32;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(MAGIC);
        out
    }
}

/// The identity of one version of a file: inode, size, mtime and ctime. A replacement changes
/// the inode; a rewrite in place changes the mtime and, even when the writer restores the mtime
/// (`touch -d`, `rsync -t`), the ctime, which no user can set. Our own rename changes the ctime
/// too, so a commit reads its file's version again after the rename (`FsBackend::commit`).
pub fn version_of(md: &Metadata) -> String {
    format!(
        "{}~{:x}.{:x}",
        staged_version_of(md),
        md.ctime(),
        md.ctime_nsec()
    )
}

/// A staged file's version before the rename that publishes it, without the ctime the rename
/// will change. Matched against the published version by `version::same_version`.
pub fn staged_version_of(md: &Metadata) -> String {
    format!(
        "{:x}-{:x}-{:x}.{:x}",
        md.ino(),
        md.size(),
        md.mtime(),
        md.mtime_nsec()
    )
}

fn corrupt(what: &str) -> BackendError {
    BackendError::Corrupt(format!(
        "object file {what}; it was probably changed outside fencegate"
    ))
}

/// Reads the trailer of an open object file, checking it belongs to `key`.
pub fn read_info(file: &File, key: Option<&str>) -> Result<ObjectInfo, BackendError> {
    let md = file.metadata()?;
    let mut file = file;
    let total = md.size();
    if total < TAIL {
        return Err(corrupt("is too short to hold a trailer"));
    }
    let mut tail = [0u8; TAIL as usize];
    file.seek(SeekFrom::Start(total - TAIL))?;
    file.read_exact(&mut tail)?;
    if &tail[4..] != MAGIC {
        return Err(corrupt("has no fencegate trailer"));
    }
    let len = u64::from(u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")));
    if len + TAIL > total {
        return Err(corrupt("has a trailer longer than the file"));
    }
    let mut json = vec![0u8; len as usize];
    file.seek(SeekFrom::Start(total - TAIL - len))?;
    file.read_exact(&mut json)?;
    let trailer: Trailer =
        serde_json::from_slice(&json).map_err(|_| corrupt("has an unreadable trailer"))?;
    if trailer.size != total - TAIL - len {
        return Err(corrupt("does not match its recorded size"));
    }
    if key.is_some_and(|k| k != trailer.key) {
        // Only possible for a sha256 collision or a file moved by hand.
        return Err(corrupt("belongs to another key"));
    }
    file.seek(SeekFrom::Start(0))?;
    let last_modified_ms = (md.mtime().max(0) as u64) * 1000 + (md.mtime_nsec() as u64) / 1_000_000;
    Ok(ObjectInfo {
        key: trailer.key,
        size: trailer.size,
        etag: trailer.etag,
        version: version_of(&md),
        last_modified_ms,
        meta: trailer.meta,
        parts: trailer.parts,
    })
}
