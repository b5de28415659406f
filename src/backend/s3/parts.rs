//! GetObject and HeadObject `partNumber` on the s3 backend. A client's multipart upload streams
//! part for part into the store's own upload, so the store's parts are the client's and the
//! store serves them. An object fencegate split into store parts itself (a large single write,
//! marked with [`SPLIT_META`]) was written whole as far as its client knows, so it has the one
//! part 1, as has any object written in one PutObject. A store that ignores `partNumber` on a
//! multipart object is never passed off as serving the part: that read answers 501.

use super::errors::{classify, S3Failure};
use super::S3Backend;
use crate::backend::{BackendError, BodyError, ByteStream, ObjectInfo, ObjectPart, PartSpan};
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use std::collections::HashMap;

/// The metadata that marks an object fencegate staged in store parts of its own choosing (its
/// value is the part size): its store parts are not parts its client uploaded.
pub const SPLIT_META: &str = "fencegate-split";

/// What the store answered to a read with `partNumber`.
struct Answer {
    info: ObjectInfo,
    /// Whether fencegate split the object itself ([`SPLIT_META`]).
    split: bool,
    /// `Content-Range`: the bytes answered (first, last), when the store answered a part.
    range: Option<(u64, u64)>,
    /// `x-amz-mp-parts-count`.
    count: Option<u32>,
    body: Option<ByteStream>,
}

impl Answer {
    /// Where the part lies, when the store served one of a client's parts (a range and a part
    /// count).
    fn placed(&self) -> Option<PartSpan> {
        match (self.split, self.count, self.range) {
            (false, Some(count), Some((first, last))) => Some(PartSpan {
                offset: first,
                len: (last + 1).saturating_sub(first),
                count: Some(count),
            }),
            _ => None,
        }
    }

    fn part(self, span: PartSpan) -> ObjectPart {
        ObjectPart {
            info: self.info,
            span,
            body: self.body,
        }
    }
}

/// An [`Answer`] (without its bytes) from a GetObject or HeadObject answer, whose accessors
/// share their names.
macro_rules! answer_of {
    ($key:expr, $out:expr) => {{
        let range = content_range($out.content_range());
        Answer {
            info: S3Backend::info(
                $key,
                $out.e_tag(),
                range.map(|(_, _, t)| t as i64).or($out.content_length()),
                $out.last_modified(),
                S3Backend::object_meta($out.content_type(), $out.metadata(), system_of!($out)),
            ),
            split: is_split($out.metadata()),
            range: range.map(|(f, l, _)| (f, l)),
            count: $out.parts_count().and_then(|c| u32::try_from(c).ok()),
            body: None,
        }
    }};
}

/// What one read with `partNumber` found.
enum Asked {
    Answer(Box<Answer>),
    /// No such object.
    Absent,
    /// The store says the object has no such part.
    NoSuchPart,
}

/// Why [`S3Backend::no_part`] did not refuse.
enum Missing {
    Absent,
    Changed,
}

/// What [`S3Backend::judge`] made of one answer.
enum Judged {
    Part(Box<ObjectPart>),
    /// A HeadObject answer that does not place the part: ask by GetObject.
    AskByGet,
    /// The object changed between two reads: read again.
    Changed,
}

/// `bytes first-last/total` as (first, last, total).
fn content_range(header: Option<&str>) -> Option<(u64, u64, u64)> {
    let (span, total) = header?.strip_prefix("bytes ")?.split_once('/')?;
    let (first, last) = span.split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?, total.parse().ok()?))
}

/// The part count an S3 multipart ETag (`"md5-N"`) carries; `None` for any other ETag.
fn etag_part_count(etag: &str) -> Option<u32> {
    let (md5, count) = etag.trim_matches('"').rsplit_once('-')?;
    (md5.len() == 32 && md5.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| count.parse().ok())
        .flatten()
}

/// Did the store refuse a `partNumber` read because the object has no such part? AWS answers
/// 416 InvalidPartNumber; other stores 400 InvalidPart or InvalidRange.
fn no_such_part<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> bool {
    let status = err.raw_response().map(|r| r.status().as_u16());
    status == Some(416)
        || (status == Some(400) && matches!(err.code(), Some("InvalidPart" | "InvalidPartNumber")))
}

fn is_split(metadata: Option<&HashMap<String, String>>) -> bool {
    metadata.is_some_and(|m| m.keys().any(|k| k.eq_ignore_ascii_case(SPLIT_META)))
}

impl S3Backend {
    /// Part `number` of `key` (see the module's header). A HeadObject the store does not answer
    /// with the part's place (ministack and moto do not; moto answers 500 for a part it lacks)
    /// is asked again as a GetObject whose body is dropped unread.
    pub(super) async fn read_part(
        &self,
        key: &str,
        number: u32,
        body: bool,
    ) -> Result<Option<ObjectPart>, BackendError> {
        let mut by_get = body;
        // A write may land between two of the reads below; each attempt judges one version.
        for _ in 0..4 {
            let answer = match self.ask_part(key, number, by_get).await {
                Ok(Asked::Answer(answer)) => *answer,
                Ok(Asked::Absent) => return Ok(None),
                Ok(Asked::NoSuchPart) => match self.no_part(key, number).await? {
                    Missing::Absent => return Ok(None),
                    // Created whole since the store looked (part 1 exists): ask again.
                    Missing::Changed => continue,
                },
                Err(BackendError::Failing(_)) if !by_get => {
                    by_get = true;
                    continue;
                }
                Err(e) => return Err(e),
            };
            match self.judge(key, number, by_get, answer).await? {
                Judged::Part(part) if body => return Ok(Some(*part)),
                Judged::Part(part) => {
                    return Ok(Some(ObjectPart {
                        body: None,
                        ..*part
                    }))
                }
                Judged::AskByGet => by_get = true,
                Judged::Changed => {}
            }
        }
        Err(BackendError::Throttled(format!(
            "{key} changed while part {number} was read; retry"
        )))
    }

    /// What one answer says about part `number`. `by_get`: it answered a GetObject.
    async fn judge(
        &self,
        key: &str,
        number: u32,
        by_get: bool,
        answer: Answer,
    ) -> Result<Judged, BackendError> {
        if let Some(span) = answer.placed() {
            return Ok(Judged::Part(Box::new(answer.part(span))));
        }
        let size = answer.info.size;
        // A parts count without a range (moto's HeadObject answers the part's own size and
        // ETag so) or a multipart ETag: a multipart object the answer does not place.
        let multipart = answer.count.or(etag_part_count(&answer.info.etag));
        if let (false, Some(_)) = (answer.split, multipart) {
            if !by_get {
                return Ok(Judged::AskByGet);
            }
            // The store answered the whole object: it has no such part (ministack), or it
            // ignores part numbers (moto), and nothing says which; even past the count, since
            // part numbers may pass it (moto's part 5 of parts 1, 3, 5).
            return Err(BackendError::Unsupported(
                "GetObject and HeadObject by partNumber of this part on this store (it answered the whole object: it has no part by that number, or ignores part numbers); read the part by Range",
            ));
        }
        // Written whole, as its client sees it: part 1 is the object.
        let span = PartSpan::of(&[], size, number)?;
        let whole = !answer.split && answer.range.is_none_or(|(f, l)| f == 0 && l + 1 == size);
        if whole {
            return Ok(Judged::Part(Box::new(answer.part(span))));
        }
        // The store answered one of fencegate's own parts: read the whole of that version.
        let etag = answer.info.etag.clone();
        drop(answer);
        let again = if by_get {
            self.get_object(key, None)
                .await?
                .map(|(info, stream)| (info, Some(stream)))
        } else {
            use crate::backend::Backend;
            self.head("", key).await?.map(|info| (info, None))
        };
        Ok(match again {
            Some((info, body)) if info.etag == etag => Judged::Part(Box::new(ObjectPart {
                span: PartSpan::of(&[], info.size, number)?,
                info,
                body,
            })),
            _ => Judged::Changed,
        })
    }

    /// The store found no part `number`: how many parts the object has, for the refusal. An
    /// object written whole always has part 1, so one found now was written since the store
    /// looked (otherwise a read racing the key's creation would answer "no part 1").
    /// Past that, the store's word is taken: part numbers may pass the count (1, 3 and 5).
    async fn no_part(&self, key: &str, number: u32) -> Result<Missing, BackendError> {
        let out = match self
            .clients
            .reads
            .head_object()
            .bucket(&self.bucket)
            .key(self.store_key(key))
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) => {
                return match classify("HeadObject", e) {
                    S3Failure::NotFound => Ok(Missing::Absent),
                    other => Err(other.into_backend("HeadObject")),
                }
            }
        };
        let count = match etag_part_count(out.e_tag().unwrap_or_default()) {
            Some(n) if !is_split(out.metadata()) => n,
            _ if number == 1 => return Ok(Missing::Changed),
            _ => 1,
        };
        Err(BackendError::NoSuchPart { number, count })
    }

    /// One GetObject (`body`, its bytes in the answer) or HeadObject with `partNumber`.
    async fn ask_part(&self, key: &str, number: u32, body: bool) -> Result<Asked, BackendError> {
        let part =
            i32::try_from(number).map_err(|_| BackendError::NoSuchPart { number, count: 1 })?;
        let store_key = self.store_key(key);
        if body {
            let out = match self
                .clients
                .reads
                .get_object()
                .bucket(&self.bucket)
                .key(&store_key)
                .part_number(part)
                .send()
                .await
            {
                Ok(out) => out,
                Err(e) if no_such_part(&e) => return Ok(Asked::NoSuchPart),
                Err(e) => {
                    return match classify("GetObject", e) {
                        S3Failure::NotFound => Ok(Asked::Absent),
                        other => Err(other.into_backend("GetObject")),
                    }
                }
            };
            let mut answer = answer_of!(key, out);
            let stream = futures::stream::unfold(out.body, |mut body| async move {
                body.next()
                    .await
                    .map(|chunk| (chunk.map_err(|e| BodyError::Broken(e.to_string())), body))
            });
            answer.body = Some(Box::pin(stream));
            Ok(Asked::Answer(Box::new(answer)))
        } else {
            let out = match self
                .clients
                .reads
                .head_object()
                .bucket(&self.bucket)
                .key(&store_key)
                .part_number(part)
                .send()
                .await
            {
                Ok(out) => out,
                Err(e) if no_such_part(&e) => return Ok(Asked::NoSuchPart),
                Err(e) => {
                    return match classify("HeadObject", e) {
                        S3Failure::NotFound => Ok(Asked::Absent),
                        other => Err(other.into_backend("HeadObject")),
                    }
                }
            };
            Ok(Asked::Answer(Box::new(answer_of!(key, out))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_answers_headers() {
        assert_eq!(content_range(Some("bytes 5-9/20")), Some((5, 9, 20)));
        assert_eq!(content_range(Some("bytes */20")), None);
        assert_eq!(content_range(None), None);
        assert_eq!(
            etag_part_count("\"0cc175b9c0f1b6a831c399e269772661-12\""),
            Some(12)
        );
        assert_eq!(
            etag_part_count("\"0cc175b9c0f1b6a831c399e269772661\""),
            None
        );
        assert_eq!(etag_part_count("\"opaque-3\""), None);
    }
}
