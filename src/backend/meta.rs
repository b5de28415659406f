//! What a write stores beside the bytes ([`ObjectMeta`]), and the rules its values follow on
//! every backend: printable header values, which user metadata an S3 store gets as RFC 2047
//! encoded words, and the checksum kept with an object.

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
    /// Object tags (`x-amz-tagging`, PutObjectTagging), by key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// The checksum the client sent and the body proved to have, kept to be given back
    /// (`x-amz-checksum-mode: ENABLED`, GetObjectAttributes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<KeptChecksum>,
    /// Where the body's checksum lands once its last byte has passed: a checksum sent in an
    /// aws-chunked trailer is known only then. [`ObjectMeta::settle`] moves it into `checksum`.
    #[serde(skip)]
    pub checksum_at_end: Option<BodyChecksums>,
}

/// A checksum S3 keeps with an object: the algorithm (`crc32`, `crc32c`, `crc64nvme`, `sha1`,
/// `sha256`), its base64 value, and whether it is of the whole object or of its parts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct KeptChecksum {
    pub algorithm: String,
    pub value: String,
    /// `FULL_OBJECT` or `COMPOSITE` (a checksum of the parts' checksums, `-N` suffixed).
    pub kind: String,
}

impl KeptChecksum {
    /// How it travels in an S3 store's user metadata: `crc32 FULL_OBJECT <base64>`.
    pub fn encode(&self) -> String {
        format!("{} {} {}", self.algorithm, self.kind, self.value)
    }

    pub fn decode(text: &str) -> Option<KeptChecksum> {
        let mut words = text.split(' ');
        let (algorithm, kind, value) = (words.next()?, words.next()?, words.next()?);
        let known = ["crc32", "crc32c", "crc64nvme", "sha1", "sha256"].contains(&algorithm)
            && ["FULL_OBJECT", "COMPOSITE"].contains(&kind);
        (known && words.next().is_none()).then(|| KeptChecksum {
            algorithm: algorithm.into(),
            value: value.into(),
            kind: kind.into(),
        })
    }
}

/// The checksums a body proved to have, by algorithm (base64), set once its last byte has
/// passed the check, shared between the check and whoever keeps them.
#[derive(Clone, Default)]
pub struct BodyChecksums(std::sync::Arc<std::sync::OnceLock<Vec<(&'static str, String)>>>);

impl BodyChecksums {
    /// Records what the body proved to have (once; later calls change nothing).
    pub fn set(&self, sums: Vec<(&'static str, String)>) {
        let _ = self.0.set(sums);
    }

    /// The first checksum verified (S3 takes one per request), as (algorithm, base64).
    pub fn checksum(&self) -> Option<(&'static str, String)> {
        self.0.get()?.first().cloned()
    }
}

impl std::fmt::Debug for BodyChecksums {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BodyChecksums").field(&self.0.get()).finish()
    }
}

/// Not part of what is stored: two metas are equal whatever their bodies will prove.
impl PartialEq for BodyChecksums {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for BodyChecksums {}

/// The metadata name that carries the object's tags on an S3 store.
pub const TAGS_META: &str = "fencegate-tags";

/// Tags as S3 writes them in `x-amz-tagging`: `k=v&k2=v2`, URL-encoded.
pub fn encode_tags(tags: &BTreeMap<String, String>) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    out.extend_pairs(tags);
    out.finish()
}

/// The tags of an `x-amz-tagging` value (its pairs as written; checked by the surface).
pub fn decode_tags(text: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(text.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// The metadata name that carries the kept checksum on an S3 store.
pub const CHECKSUM_META: &str = "fencegate-checksum";

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
        // A SHA-256, the longest, in its stored form (`KeptChecksum::encode`).
        let checksum = CHECKSUM_META.len() + "sha256 FULL_OBJECT ".len() + 44 + "-10000".len();
        let stored = |v: &str| match encoded_word_needed(v) {
            true => "=?UTF-8?B??=".len() + v.len().div_ceil(3) * 4,
            false => v.len(),
        };
        // Tags travel beside the metadata on an S3 store, so they share its 2 KB.
        let tags = match self.tags.is_empty() {
            true => 0,
            false => TAGS_META.len() + encode_tags(&self.tags).len(),
        };
        token
            + split
            + checksum
            + tags
            + self
                .user_meta
                .iter()
                .map(|(k, v)| k.len() + stored(v))
                .sum::<usize>()
    }

    /// Takes the checksum the body proved to have, once it has streamed, as the one kept.
    pub fn settle(&mut self) {
        if self.checksum.is_some() {
            return;
        }
        if let Some((algorithm, value)) = self.checksum_at_end.as_ref().and_then(|c| c.checksum()) {
            self.checksum = Some(KeptChecksum {
                algorithm: algorithm.into(),
                value,
                kind: "FULL_OBJECT".into(),
            });
        }
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).cloned()
    }
}
