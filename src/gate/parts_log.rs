//! The files of one multipart upload on disk (`<data_dir>/uploads/`): its parts log,
//! `<id>.parts`, one JSON line per part, read back with the last line for a number winning, and
//! rewritten whole when it has grown; and the blocking file work the registry (`uploads.rs`)
//! runs off the runtime's workers.

use crate::backend::PartInfo;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

pub(super) fn log_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.parts"))
}

/// The parts a log records, the last line for a number winning. A torn last line (a crash
/// mid-append, before its part was acknowledged) is skipped.
pub(super) fn read_log(path: &Path) -> (BTreeMap<i32, PartInfo>, usize) {
    let Ok(bytes) = std::fs::read(path) else {
        return Default::default();
    };
    let mut parts = BTreeMap::new();
    let mut lines = 0;
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        if let Ok(part) = serde_json::from_slice::<PartInfo>(line) {
            parts.insert(part.number, part);
            lines += 1;
        }
    }
    (parts, lines)
}

pub(super) fn part_line(part: &PartInfo) -> Vec<u8> {
    let mut line = serde_json::to_vec(part).expect("a part serializes");
    line.push(b'\n');
    line
}

pub(super) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Runs blocking file work off the runtime's workers.
pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| std::io::Error::other(format!("the upload record's task failed: {e}")))?
}

/// Rewrites the parts log of upload `id` with one line per part, atomically (a temporary file
/// renamed over it, the directory synced). Returns the lines it now has.
pub(super) fn rewrite(
    dir: &Path,
    id: &str,
    parts: &BTreeMap<i32, PartInfo>,
) -> std::io::Result<usize> {
    let temp = dir.join(format!("{id}.parts.tmp"));
    let mut f = std::fs::File::create(&temp)?;
    for part in parts.values() {
        f.write_all(&part_line(part))?;
    }
    f.sync_all()?;
    std::fs::rename(&temp, log_path(dir, id))?;
    sync_dir(dir)?;
    Ok(parts.len())
}
