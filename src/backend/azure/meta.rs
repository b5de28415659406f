//! What fencegate stores beside a blob's bytes. Azure metadata names must be C# identifiers
//! (no `-`, which S3 clients use freely), so fencegate keeps the whole [`ObjectMeta`] as JSON
//! in one entry, `x-ms-meta-fencegate`, with the ETag its client was answered and the id of
//! the commit that wrote it (read back after a commit whose answer was lost). Characters a
//! header value cannot carry are percent-encoded.

use crate::backend::{ObjectInfo, ObjectMeta};
use base64::Engine;
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, CONTROLS};
use reqwest::header::HeaderMap;
use serde::{Deserialize, Serialize};

/// The metadata entry (`x-ms-meta-fencegate`).
pub const META_HEADER: &str = "x-ms-meta-fencegate";

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
}

pub fn encode(stored: &Stored) -> String {
    let json = serde_json::to_string(stored).expect("metadata serializes");
    utf8_percent_encode(&json, VALUE).to_string()
}

pub fn decode(value: &str) -> Option<Stored> {
    let json = percent_decode_str(value).decode_utf8().ok()?;
    serde_json::from_str(&json).ok()
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `Content-MD5` (base64) as a quoted hex ETag.
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
    let (meta, etag) = match stored(headers) {
        Some(s) => (s.meta, s.etag),
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
            (meta, md5.unwrap_or_else(|| version.clone()))
        }
    };
    ObjectInfo {
        key: key.to_string(),
        size,
        etag,
        version,
        last_modified_ms,
        meta,
        parts: Vec::new(),
    }
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
        };
        let value = encode(&stored);
        assert!(value.bytes().all(|b| (0x20..0x7f).contains(&b)), "{value}");
        assert_eq!(decode(&value), Some(stored));
    }

    #[test]
    fn md5_round_trips_between_base64_and_hex() {
        let etag = "\"9e107d9d372bb6826bd81d3542a419d6\"";
        assert_eq!(md5_etag(&content_md5(etag).unwrap()).as_deref(), Some(etag));
    }
}
