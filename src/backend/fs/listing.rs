//! Listing a bucket: its directory tree walked in key order from a start key.

use super::*;

pub(super) fn list_dir(
    bucket_dir: &Path,
    prefix: &str,
    start_after: Option<&str>,
    max: usize,
) -> Result<ListPage, BackendError> {
    // (key, file) pairs; names fencegate did not make are ignored.
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    walk(bucket_dir, "", prefix, &mut found)?;
    let long = bucket_dir.join(keymap::LONG_DIR);
    if long.is_dir() {
        for entry in std::fs::read_dir(&long)? {
            let path = entry?.path();
            let file = std::fs::File::open(&path)?;
            if let Ok(info) = read_info(&file, None) {
                if info.key.starts_with(prefix) {
                    found.push((info.key, path));
                }
            }
        }
    }
    found.retain(|(k, _)| start_after.is_none_or(|s| k.as_str() > s));
    found.sort_by(|a, b| a.0.cmp(&b.0));
    let truncated = found.len() > max;
    found.truncate(max);
    let mut page = ListPage::default();
    for (key, path) in found {
        // A file deleted since the walk is simply left out.
        if let Some((_, info)) = open_info(&path, &key)? {
            page.objects.push(info);
        }
    }
    if truncated {
        page.next_start_after = page.objects.last().map(|o| o.key.clone());
    }
    Ok(page)
}

pub(super) fn walk(
    dir: &Path,
    key_prefix: &str,
    want: &str,
    out: &mut Vec<(String, PathBuf)>,
) -> Result<(), BackendError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for entry in entries {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let Some((segment, is_dir)) = keymap::decode_name(&name) else {
            continue;
        };
        let key = format!("{key_prefix}{segment}");
        if is_dir {
            let sub = format!("{key}/");
            // Descend only where keys matching the prefix can be.
            if sub.starts_with(want) || want.starts_with(&sub) {
                walk(&entry.path(), &sub, want, out)?;
            }
        } else if key.starts_with(want) {
            out.push((key, entry.path()));
        }
    }
    Ok(())
}
