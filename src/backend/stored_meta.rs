//! What the azure and gcs backends store beside an object's bytes as one metadata entry:
//! the whole [`ObjectMeta`] as JSON, with the ETag its client was answered, the id of the
//! commit that wrote it (read back after a commit whose answer was lost) and, for a completed
//! multipart upload, its parts' numbers and sizes (GetObject `partNumber` reads by them). One
//! entry, because Azure's metadata names must be C# identifiers (no `-`, which S3 clients use
//! freely); characters a header value cannot carry are percent-encoded. Both stores cap an
//! object's metadata at 8 KiB, which is checked before any byte of a body is stored.

use crate::backend::ObjectMeta;
use base64::Engine;
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};
use serde::{Deserialize, Serialize};

/// Bytes a header value cannot hold as they are: controls, non-ASCII (CONTROLS covers
/// both), and `%` itself.
const VALUE: &AsciiSet = &CONTROLS.add(b'%');

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Stored {
    pub meta: ObjectMeta,
    /// The ETag the writer was answered (quoted MD5, or an S3 multipart ETag).
    pub etag: String,
    /// Unique per staged body: shows whether a commit whose answer was lost landed.
    pub commit: String,
    /// A completed upload's parts as runs `[first number, count, size]` of consecutive
    /// numbers with one size (an upload of equal parts is two runs), so they fit in the 8 KiB of
    /// metadata Azure and GCS allow; empty for an object written whole, or one whose parts would take
    /// more than [`MAX_PART_RUNS`] runs (its parts are then not answered by number).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<[u64; 3]>,
}

/// Azure's cap on a blob's metadata, and GCS's on an object's custom metadata, names and values
/// together.
pub const METADATA_LIMIT: usize = 8 * 1024;

/// The bytes `stored` takes of a blob's metadata (the entry's name and its value).
pub fn metadata_size(stored: &Stored) -> usize {
    "fencegate".len() + encode(stored).len()
}

/// Refuses, before any byte of the body is stored, an object whose metadata, tags and system
/// headers would not fit in the 8 KiB of metadata Azure and GCS allow once fencegate keeps them as JSON (the
/// service's own refusal would come only at the commit, after the whole body was sent).
pub fn check_fits(meta: &ObjectMeta) -> Result<(), crate::backend::BackendError> {
    // The longest ETag and commit id fencegate stores beside them; parts are dropped first.
    let mut meta = meta.clone();
    if meta.checksum.is_none() {
        // A checksum the body carries in its trailer (or a completion's, of its parts) is
        // kept only once the body has ended, after this check: room is left for the widest.
        meta.checksum = Some(crate::backend::KeptChecksum {
            algorithm: "crc64nvme".into(),
            value: "0".repeat(44 + "-10000".len()),
            kind: "FULL_OBJECT".into(),
        });
    }
    let widest = Stored {
        meta,
        etag: format!("\"{}-10000\"", "0".repeat(32)),
        commit: "0".repeat(32),
        parts: Vec::new(),
    };
    let size = metadata_size(&widest);
    if size > METADATA_LIMIT {
        return Err(crate::backend::BackendError::Invalid {
            code: "MetadataTooLarge",
            message: format!(
                "the object's metadata, tags and system headers take {size} bytes as fencegate keeps them on this store (one metadata entry, JSON, non-ASCII percent-encoded), more than the {METADATA_LIMIT} the store allows an object: send shorter values"
            ),
        });
    }
    Ok(())
}

/// Runs of parts kept at most: about 3 KiB of the 8 KiB of metadata the store allows, the
/// rest left to the client's metadata and tags (2 KB) and fencegate's own entries.
pub const MAX_PART_RUNS: usize = 128;

/// `parts` (number, size) as runs, or none past [`MAX_PART_RUNS`].
pub fn part_runs(parts: &[(u32, u64)]) -> Vec<[u64; 3]> {
    let mut runs: Vec<[u64; 3]> = Vec::new();
    for &(number, size) in parts {
        match runs.last_mut() {
            Some([first, count, s]) if *s == size && *first + *count == u64::from(number) => {
                *count += 1
            }
            _ => runs.push([u64::from(number), 1, size]),
        }
    }
    if runs.len() > MAX_PART_RUNS {
        runs.clear();
    }
    runs
}

/// The parts (number, size) that `runs` stand for.
pub fn parts_of(runs: &[[u64; 3]]) -> Vec<(u32, u64)> {
    runs.iter()
        .flat_map(|&[first, count, size]| {
            (first..first.saturating_add(count).min(10_001)).map(move |n| (n as u32, size))
        })
        .collect()
}

pub fn encode(stored: &Stored) -> String {
    let json = serde_json::to_string(stored).expect("metadata serializes");
    utf8_percent_encode(&json, VALUE).to_string()
}

pub fn decode(value: &str) -> Option<Stored> {
    let json = percent_decode_str(value).decode_utf8().ok()?;
    serde_json::from_str(&json).ok()
}

/// GetObject / HeadObject `partNumber` on a store that keeps a completed upload's parts in
/// this entry: part `number` of the object one read returns. A multipart object read without
/// its parts (completed by an earlier fencegate, or in more runs than the entry holds) is
/// refused with `unrecorded` (501), never passed off as one part. Judged on the object that
/// read returns, not on an earlier HEAD: the object may be replaced in between.
pub async fn recorded_part(
    backend: &dyn crate::backend::Backend,
    bucket: &str,
    key: &str,
    number: u32,
    body: bool,
    unrecorded: &'static str,
) -> Result<Option<crate::backend::ObjectPart>, crate::backend::BackendError> {
    let Some((info, stream)) = backend.get(bucket, key).await? else {
        return Ok(None);
    };
    if info.parts.is_empty() && multipart_etag_count(&info.etag).is_some() {
        return Err(crate::backend::BackendError::Unsupported(unrecorded));
    }
    let span = crate::backend::PartSpan::of(&info.parts, info.size, number)?;
    Ok(Some(crate::backend::ObjectPart {
        info,
        span,
        body: body.then(|| span.slice(stream)),
    }))
}

/// The part count of an S3 multipart ETag (`"<hex>-N"`).
pub fn multipart_etag_count(etag: &str) -> Option<u32> {
    etag.trim_matches('"').split_once('-')?.1.parse().ok()
}

/// A base64 MD5 (`Content-MD5`, GCS's `md5Hash`) as a quoted hex ETag.
pub fn md5_etag(content_md5: &str) -> Option<String> {
    let digest = base64::engine::general_purpose::STANDARD
        .decode(content_md5)
        .ok()?;
    (digest.len() == 16).then(|| format!("\"{}\"", hex::encode(digest)))
}

/// A quoted hex MD5 ETag as `Content-MD5` (base64).
pub fn content_md5(etag: &str) -> Option<String> {
    let digest = hex::decode(etag.trim_matches('"')).ok()?;
    (digest.len() == 16).then(|| base64::engine::general_purpose::STANDARD.encode(digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_of_any_text_survives_a_header() {
        let mut meta = ObjectMeta {
            token: Some(u64::MAX),
            content_type: Some("text/plain; charset=utf-8".into()),
            ..Default::default()
        };
        meta.user_meta
            .insert("my-key".into(), "é 100% =?x?= \t ".into());
        meta.tags.insert("k".into(), "v&w".into());
        let stored = Stored {
            meta,
            etag: "\"0123\"".into(),
            commit: "c1".into(),
            parts: part_runs(&[(1, 5), (2, 5), (3, 1)]),
        };
        let value = encode(&stored);
        assert!(value.bytes().all(|b| (0x20..0x7f).contains(&b)), "{value}");
        assert_eq!(decode(&value), Some(stored));
    }

    #[test]
    fn parts_are_kept_as_runs_and_too_many_runs_as_none() {
        let parts = [(1, 8), (2, 8), (3, 8), (5, 8), (6, 3)];
        let runs = part_runs(&parts);
        assert_eq!(runs, vec![[1, 3, 8], [5, 1, 8], [6, 1, 3]]);
        assert_eq!(parts_of(&runs), parts);
        let equal: Vec<(u32, u64)> = (1..=10_000).map(|n| (n, 5 << 20)).collect();
        assert_eq!(part_runs(&equal).len(), 1);
        let ragged: Vec<(u32, u64)> = (1..=200).map(|n| (n, u64::from(n) + 5)).collect();
        assert!(part_runs(&ragged).is_empty());
    }

    #[test]
    fn metadata_past_the_stores_cap_is_refused_with_s3s_code() {
        let mut meta = ObjectMeta::default();
        meta.user_meta.insert("a".into(), "é".repeat(1000));
        check_fits(&meta).unwrap();
        meta.user_meta.insert("b".into(), "é".repeat(500));
        let Err(crate::backend::BackendError::Invalid { code, .. }) = check_fits(&meta) else {
            panic!("9 KiB of metadata fits")
        };
        assert_eq!(code, "MetadataTooLarge");
    }

    #[test]
    fn md5_round_trips_between_base64_and_hex() {
        let etag = "\"9e107d9d372bb6826bd81d3542a419d6\"";
        assert_eq!(md5_etag(&content_md5(etag).unwrap()).as_deref(), Some(etag));
    }
}
