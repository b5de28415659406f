//! What fencegate stores beside a blob's bytes, in one entry `x-ms-meta-fencegate`
//! ([`crate::backend::stored_meta`]: the object's metadata, ETag, commit id and a multipart
//! upload's parts), and a blob as a Get Blob answer describes it.

pub use crate::backend::stored_meta::{
    check_fits, content_md5, decode, encode, md5_etag, metadata_size, part_runs, parts_of, Stored,
    METADATA_LIMIT,
};
use crate::backend::{ObjectInfo, ObjectMeta};
use reqwest::header::HeaderMap;

/// The metadata entry (`x-ms-meta-fencegate`).
pub const META_HEADER: &str = "x-ms-meta-fencegate";

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// What fencegate wrote with the blob, if it was fencegate (a blob written around it has none).
pub fn stored(headers: &HeaderMap) -> Option<Stored> {
    header(headers, META_HEADER).and_then(decode)
}

/// The object as a Get Blob or Get Blob Properties answer describes it; `size` is the whole
/// blob's (a ranged answer's Content-Length is not).
pub fn info(key: &str, headers: &HeaderMap, size: u64) -> ObjectInfo {
    let version = header(headers, "etag").unwrap_or_default().to_string();
    let md5 = header(headers, "content-md5").and_then(md5_etag);
    let last_modified_ms = header(headers, "last-modified")
        .and_then(|t| httpdate::parse_http_date(t).ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64);
    let (meta, etag, parts) = match stored(headers) {
        Some(s) => (s.meta, s.etag, parts_of(&s.parts)),
        // Written around fencegate: its own metadata and content type, its MD5 if it has one.
        None => {
            let user_meta = headers
                .iter()
                .filter_map(|(n, v)| {
                    let name = n.as_str().strip_prefix("x-ms-meta-")?;
                    Some((name.to_string(), v.to_str().ok()?.to_string()))
                })
                .collect();
            let meta = ObjectMeta {
                content_type: header(headers, "content-type").map(str::to_string),
                user_meta,
                ..ObjectMeta::default()
            };
            (meta, md5.unwrap_or_else(|| version.clone()), Vec::new())
        }
    };
    ObjectInfo {
        key: key.to_string(),
        size,
        etag,
        version,
        last_modified_ms,
        meta,
        parts,
    }
}
