//! What the azure and gcs backends store beside an object's bytes as one metadata entry:
//! the whole [`ObjectMeta`] as JSON, with the ETag its client was answered and the id of the
//! commit that wrote it (read back after a commit whose answer was lost). One entry, because
//! Azure's metadata names must be C# identifiers (no `-`, which S3 clients use freely), and
//! characters a header value cannot carry are percent-encoded.

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
}

pub fn encode(stored: &Stored) -> String {
    let json = serde_json::to_string(stored).expect("metadata serializes");
    utf8_percent_encode(&json, VALUE).to_string()
}

pub fn decode(value: &str) -> Option<Stored> {
    let json = percent_decode_str(value).decode_utf8().ok()?;
    serde_json::from_str(&json).ok()
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
