//! What fencegate stores beside an object's bytes, in one entry `x-goog-meta-fencegate`
//! ([`crate::backend::stored_meta`]), and an object as an XML API answer's headers or a JSON
//! listing's item describe it. The version the gate conditions on is the object's generation.

pub use crate::backend::stored_meta::{
    check_fits, content_md5, decode, encode, md5_etag, metadata_size, part_runs, parts_of, Stored,
    METADATA_LIMIT,
};
use crate::backend::{ObjectInfo, ObjectMeta};
use reqwest::header::HeaderMap;

/// The metadata entry as a request header; a JSON listing names it `fencegate`.
pub const META_HEADER: &str = "x-goog-meta-fencegate";

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The `md5=` of the `x-goog-hash` headers (one per hash, or comma-joined), as a quoted hex
/// ETag; a composite object has none.
pub fn md5_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all("x-goog-hash")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|h| h.trim().strip_prefix("md5="))
        .and_then(md5_etag)
}

/// What fencegate wrote with the object, if it was fencegate (one written around it has none).
pub fn stored(headers: &HeaderMap) -> Option<Stored> {
    header(headers, META_HEADER).and_then(decode)
}

/// The object as a GET or HEAD answer describes it; `size` is the whole object's (a ranged
/// answer's Content-Length is not).
pub fn info(key: &str, headers: &HeaderMap, size: u64) -> ObjectInfo {
    let version = header(headers, "x-goog-generation")
        .unwrap_or_default()
        .to_string();
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
                    let name = n.as_str().strip_prefix("x-goog-meta-")?;
                    Some((name.to_string(), v.to_str().ok()?.to_string()))
                })
                .collect();
            let meta = ObjectMeta {
                content_type: header(headers, "content-type").map(str::to_string),
                user_meta,
                ..ObjectMeta::default()
            };
            let etag = md5_of(headers).unwrap_or_else(|| format!("\"{version}\""));
            (meta, etag, Vec::new())
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

/// The object as a JSON API listing's item describes it (`key` already has the store prefix
/// taken off).
pub fn listed(key: &str, item: &serde_json::Value) -> ObjectInfo {
    let text = |name: &str| item[name].as_str().unwrap_or_default();
    let version = text("generation").to_string();
    let last_modified_ms = time::OffsetDateTime::parse(
        text("updated"),
        &time::format_description::well_known::Rfc3339,
    )
    .map_or(0, |t| (t.unix_timestamp_nanos() / 1_000_000).max(0) as u64);
    let stored = item["metadata"]["fencegate"].as_str().and_then(decode);
    let (meta, etag) = match stored {
        Some(s) => (s.meta, s.etag),
        None => (
            ObjectMeta::default(),
            md5_etag(text("md5Hash")).unwrap_or_else(|| format!("\"{version}\"")),
        ),
    };
    ObjectInfo {
        key: key.to_string(),
        size: text("size").parse().unwrap_or(0),
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
    fn the_md5_is_found_among_the_hashes() {
        let mut h = HeaderMap::new();
        h.append("x-goog-hash", "crc32c=n03x6A==".parse().unwrap());
        h.append(
            "x-goog-hash",
            "md5=nhB9nTcrtoJr2B01QqQZ1g==".parse().unwrap(),
        );
        assert_eq!(
            md5_of(&h).as_deref(),
            Some("\"9e107d9d372bb6826bd81d3542a419d6\"")
        );
        let mut joined = HeaderMap::new();
        joined.append(
            "x-goog-hash",
            "crc32c=n03x6A==, md5=nhB9nTcrtoJr2B01QqQZ1g=="
                .parse()
                .unwrap(),
        );
        assert_eq!(md5_of(&joined), md5_of(&h));
        let mut composite = HeaderMap::new();
        composite.append("x-goog-hash", "crc32c=n03x6A==".parse().unwrap());
        assert_eq!(md5_of(&composite), None);
    }

    #[test]
    fn a_listed_item_gives_generation_size_and_the_stored_etag() {
        let item = serde_json::json!({
            "name": "p/a", "generation": "1765000000000001", "size": "5",
            "md5Hash": "nhB9nTcrtoJr2B01QqQZ1g==", "updated": "2026-12-06T16:00:00.123Z",
        });
        let info = listed("a", &item);
        assert_eq!(info.version, "1765000000000001");
        assert_eq!(info.size, 5);
        assert_eq!(info.etag, "\"9e107d9d372bb6826bd81d3542a419d6\"");
        assert_eq!(info.last_modified_ms, 1_796_572_800_123);
    }
}
