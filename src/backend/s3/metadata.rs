//! Object metadata between fencegate and the store: user metadata as the store takes it
//! (RFC 2047 encoded words where a value is not printable ASCII), read back from its answers,
//! and the object's description from the fields S3 answers with.

use super::*;
use crate::backend::{decode_tags, encode_tags, KeptChecksum, CHECKSUM_META, TAGS_META};

/// `value`, or its RFC 2047 encoded word ([`crate::backend::encoded_word_needed`]).
pub(super) fn encode_word(value: &str) -> String {
    if !crate::backend::encoded_word_needed(value) {
        value.to_string()
    } else {
        format!(
            "=?UTF-8?B?{}?=",
            aws_smithy_types::base64::encode(value.as_bytes())
        )
    }
}

/// The text of an RFC 2047 base64 UTF-8 encoded word ([`encode_word`]); any other value as it
/// is.
pub(super) fn decode_word(value: &str) -> String {
    let inner = value
        .strip_prefix("=?")
        .and_then(|v| v.strip_suffix("?="))
        .and_then(|v| v.split_once('?'))
        .filter(|(charset, _)| charset.eq_ignore_ascii_case("utf-8"))
        .and_then(|(_, rest)| rest.split_once('?'))
        .filter(|(encoding, _)| encoding.eq_ignore_ascii_case("b"));
    inner
        .and_then(|(_, text)| aws_smithy_types::base64::decode(text).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .unwrap_or_else(|| value.to_string())
}

/// The Expires header as an HTTP date, in any of HTTP's three forms (IMF-fixdate, RFC 850,
/// asctime; sent as IMF-fixdate); one that is not an HTTP date is not sent.
pub(super) fn expires(meta: &ObjectMeta) -> Option<aws_smithy_types::DateTime> {
    let text = meta.headers.get("expires")?;
    httpdate::parse_http_date(text)
        .ok()
        .map(aws_smithy_types::DateTime::from)
}

/// The Content-Type sent to the store: AWS's `binary/octet-stream` for an object written
/// without one, as AWS itself stores it (stores differ: ministack would keep
/// `application/octet-stream`).
pub(super) fn content_type(meta: &ObjectMeta) -> String {
    meta.content_type
        .clone()
        .unwrap_or_else(|| "binary/octet-stream".into())
}

/// The Content-MD5 header for a body whose ETag is its MD5 (`"hex"`), so the store checks
/// that it kept the bytes fencegate read.
pub(super) fn content_md5(etag: &str) -> Option<String> {
    let digest = hex::decode(etag.trim_matches('"')).ok()?;
    (digest.len() == 16).then(|| aws_smithy_types::base64::encode(digest))
}

impl S3Backend {
    /// User metadata as the store takes it. A value that is not printable ASCII goes RFC 2047
    /// encoded, as AWS answers such values: stores differ on raw UTF-8 (ministack keeps it and
    /// answers bytes the SDK cannot parse, so the object could no longer be read or deleted).
    pub(super) fn metadata(meta: &ObjectMeta) -> HashMap<String, String> {
        let mut m: HashMap<String, String> = meta
            .user_meta
            .iter()
            .filter(|(k, _)| {
                ![TOKEN_META, parts::SPLIT_META, CHECKSUM_META, TAGS_META].contains(&k.as_str())
            })
            .map(|(k, v)| (k.clone(), encode_word(v)))
            .collect();
        if let Some(t) = meta.token {
            m.insert(TOKEN_META.into(), t.to_string());
        }
        if let Some(c) = &meta.checksum {
            m.insert(CHECKSUM_META.into(), c.encode());
        }
        if !meta.tags.is_empty() {
            m.insert(TAGS_META.into(), encode_tags(&meta.tags));
        }
        m
    }

    pub(super) fn object_meta(
        content_type: Option<&str>,
        metadata: Option<&HashMap<String, String>>,
        headers: std::collections::BTreeMap<String, String>,
    ) -> ObjectMeta {
        let mut user_meta: std::collections::BTreeMap<String, String> = metadata
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.to_lowercase(), decode_word(v)))
                    .collect()
            })
            .unwrap_or_default();
        let token = user_meta.remove(TOKEN_META).and_then(|t| t.parse().ok());
        user_meta.remove(parts::SPLIT_META);
        let checksum = user_meta
            .remove(CHECKSUM_META)
            .and_then(|c| KeptChecksum::decode(&c));
        let tags = user_meta
            .remove(TAGS_META)
            .map(|t| decode_tags(&t).into_iter().collect())
            .unwrap_or_default();
        ObjectMeta {
            content_type: content_type.map(str::to_string),
            user_meta,
            token,
            headers,
            checksum,
            checksum_at_end: None,
            tags,
        }
    }

    /// An object's description from the fields S3 answers HEAD, GET and LIST with.
    pub(super) fn info(
        key: &str,
        etag: Option<&str>,
        size: Option<i64>,
        modified: Option<&aws_smithy_types::DateTime>,
        meta: ObjectMeta,
    ) -> ObjectInfo {
        let etag = etag.unwrap_or_default().to_string();
        ObjectInfo {
            key: key.to_string(),
            size: size.unwrap_or(0).max(0) as u64,
            version: etag.clone(),
            etag,
            last_modified_ms: modified
                .and_then(|t| t.to_millis().ok())
                .unwrap_or(0)
                .max(0) as u64,
            meta,
            parts: Vec::new(),
        }
    }
}
