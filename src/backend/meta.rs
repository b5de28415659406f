//! What a write stores beside the bytes ([`ObjectMeta`]), and the rules its values follow on
//! every backend: printable header values, and which user metadata an S3 store gets as RFC
//! 2047 encoded words.

use serde::Serialize;
use std::collections::BTreeMap;

/// What a write stores beside the bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ObjectMeta {
    pub content_type: Option<String>,
    /// User metadata (`x-amz-meta-*`), names lowercased.
    pub user_meta: BTreeMap<String, String>,
    /// The token that wrote the object, if any.
    pub token: Option<u64>,
    /// S3's system metadata sent with the write ([`SYSTEM_HEADERS`]), by lowercase header name,
    /// answered back on every read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// The headers a write may set that every read answers with, as S3 keeps them.
pub const SYSTEM_HEADERS: [&str; 5] = [
    "cache-control",
    "content-disposition",
    "content-encoding",
    "content-language",
    "expires",
];

/// A header or metadata value fencegate stores and forwards: printable ASCII and spaces only.
/// A tab or other control character is signed differently by different S3 implementations,
/// and a byte outside ASCII is not a header value every store returns intact.
pub fn printable(value: &str) -> bool {
    value.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// Whether a user metadata value goes to an S3 store as an RFC 2047 encoded word: one that is
/// not printable ASCII, or one that reads as an encoded word itself, so that reading back
/// decodes only what fencegate encoded.
pub fn encoded_word_needed(value: &str) -> bool {
    !printable(value)
        || (value.starts_with("=?") && value.ends_with("?="))
        // A header value loses its outer spaces on the way.
        || value.trim() != value
}

impl ObjectMeta {
    /// The bytes of user metadata as a store counts them (names and values as sent, encoded
    /// words included), fencegate's own entries included: the token, and the marker of a body
    /// it stores in parts of its own, whose room is kept for every write since a body's size is
    /// known only once it has streamed.
    pub fn user_meta_bytes(&self) -> usize {
        let token = self
            .token
            .map_or(0, |t| "fencing-token".len() + t.to_string().len());
        let split = "fencegate-split".len() + u64::MAX.to_string().len();
        let stored = |v: &str| match encoded_word_needed(v) {
            true => "=?UTF-8?B??=".len() + v.len().div_ceil(3) * 4,
            false => v.len(),
        };
        token
            + split
            + self
                .user_meta
                .iter()
                .map(|(k, v)| k.len() + stored(v))
                .sum::<usize>()
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).cloned()
    }
}
