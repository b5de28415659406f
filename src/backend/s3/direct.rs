//! The hot calls on the store, signed here (`signer.rs`) and sent on the pooled client rather
//! than through the SDK's per-call pipeline, which took a third of fencegate's CPU on a fenced
//! PutObject: PutObject with its condition, HeadObject, and the conditional DeleteObject. The
//! rest (multipart, listings, GetObject) stays on the SDK.
//!
//! What they keep from the SDK path, exactly: the headers a PutObject carries
//! ([`put_headers`]), the meaning of each answer (`errors::answered`, the rule `classify`
//! applies to the SDK's), the timeouts (the same client settings), writes never re-sent, and
//! HeadObject retried as the SDK's reads are (the standard mode's attempts and backoff).

use super::errors::{answered, unanswered, S3Failure};
use super::signer::{Request, Signature};
use super::*;
use std::collections::BTreeMap;
use std::time::Duration;

/// The condition a write carries.
#[derive(Clone, Copy, Debug)]
pub(super) enum Condition<'a> {
    /// None: only the probe's first write of its scratch object.
    Always,
    /// `If-Match: <etag>`.
    IfMatch(&'a str),
    /// `If-None-Match: *`.
    IfAbsent,
}

impl Condition<'_> {
    /// The commit's condition: on the version the gate read, or on no object at all.
    pub(super) fn on(expected: Option<&str>) -> Condition<'_> {
        expected.map_or(Condition::IfAbsent, Condition::IfMatch)
    }

    fn header(self) -> Option<(String, String)> {
        match self {
            Condition::Always => None,
            Condition::IfMatch(etag) => Some(("if-match".into(), etag.to_string())),
            Condition::IfAbsent => Some(("if-none-match".into(), "*".into())),
        }
    }
}

/// The headers of a PutObject of an object described by `meta`, as the SDK sent them: its
/// Content-Type (AWS's default where it has none), the system headers it has, Expires only
/// where it is an HTTP date (re-written as one), the user metadata as the store takes it, and
/// the body's Content-MD5 where known.
pub(super) fn put_headers(meta: &ObjectMeta, md5: Option<String>) -> Vec<(String, String)> {
    let mut headers = vec![("content-type".to_string(), content_type(meta))];
    if let Some(md5) = md5 {
        headers.push(("content-md5".into(), md5));
    }
    for name in [
        "cache-control",
        "content-disposition",
        "content-encoding",
        "content-language",
    ] {
        if let Some(value) = meta.header(name) {
            headers.push((name.to_string(), value));
        }
    }
    if let Some(at) =
        expires(meta).and_then(|t| t.fmt(aws_smithy_types::date_time::Format::HttpDate).ok())
    {
        headers.push(("expires".into(), at));
    }
    let mut user: Vec<_> = S3Backend::metadata(meta).into_iter().collect();
    user.sort();
    for (k, v) in user {
        headers.push((format!("x-amz-meta-{k}"), v));
    }
    headers
}

/// The SDK's standard retry mode for reads: up to `attempts` tries, retried after a timeout
/// or a broken connection (no answer: `status` is `None`) or a 500, 502, 503 or 504, after a
/// backoff of up to 100 ms doubled per try (jittered, at most 20 s).
fn retried(failure: &S3Failure, status: Option<u16>) -> bool {
    match status {
        None => matches!(
            failure,
            S3Failure::Fault(BackendError::Timeout(_) | BackendError::Unreachable(_))
        ),
        Some(status) => matches!(status, 500 | 502 | 503 | 504),
    }
}

fn backoff(attempt: u32) -> Duration {
    let most = Duration::from_millis(100).saturating_mul(1 << attempt.min(16));
    most.min(Duration::from_secs(20))
        .mul_f64(rand::random::<f64>())
}

/// A store's answer read whole: status, headers and the XML error's code and message.
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    code: String,
    message: String,
}

/// The text of the first `<name>` element of an XML error, unescaped.
fn element(xml: &str, name: &str) -> String {
    super::signer::element(xml, name).unwrap_or_default()
}

impl S3Backend {
    /// Signs and sends `req` in its headers, and reads the whole answer.
    async fn send_now(&self, op: &str, req: Request<'_>) -> Result<Answer, S3Failure> {
        let builder = self
            .clients
            .signer
            .sign(op, req, Signature::Headers)
            .await?;
        let response = builder.send().await.map_err(|e| unanswered(op, &e))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        // Read to the end even on success, so the connection goes back to the pool.
        let text = response.text().await.map_err(|e| unanswered(op, &e))?;
        Ok(Answer {
            status,
            headers,
            code: element(&text, "Code"),
            message: element(&text, "Message"),
        })
    }

    /// A 2xx answer, or what the failure means.
    fn judged(op: &str, answer: Answer) -> Result<Answer, S3Failure> {
        if (200..300).contains(&answer.status) {
            return Ok(answer);
        }
        tracing::debug!(
            operation = op,
            status = answer.status,
            code = %answer.code,
            message = %answer.message,
            "the store's answer"
        );
        Err(answered(
            op,
            Some(answer.status),
            &answer.code,
            &answer.message,
        ))
    }

    /// PutObject of `body` at `store_key` with `headers` ([`put_headers`]) and `condition`;
    /// the ETag the store answered with, if any. Never re-sent.
    pub(super) async fn put_now(
        &self,
        store_key: &str,
        body: spool::Spooled,
        mut headers: Vec<(String, String)>,
        condition: Condition<'_>,
    ) -> Result<Option<String>, S3Failure> {
        headers.extend(condition.header());
        let req = Request {
            method: "PUT",
            bucket: &self.bucket,
            key: store_key,
            upload_id: None,
            headers,
            body,
        };
        let answer = Self::judged("PutObject", self.send_now("PutObject", req).await?)?;
        Ok(answer
            .headers
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string))
    }

    /// DeleteObject of `store_key`, with `If-Match` where given. Never re-sent.
    pub(super) async fn delete_now(
        &self,
        store_key: &str,
        if_match: Option<&str>,
    ) -> Result<(), S3Failure> {
        let req = Request {
            method: "DELETE",
            bucket: &self.bucket,
            key: store_key,
            upload_id: None,
            headers: Condition::header(if_match.map_or(Condition::Always, Condition::IfMatch))
                .into_iter()
                .collect(),
            body: Bytes::new().into(),
        };
        Self::judged("DeleteObject", self.send_now("DeleteObject", req).await?).map(|_| ())
    }

    /// HeadObject of fencegate's `key`: its description, or `None` where the store has no
    /// such object. Retried as the SDK's reads are, all tries within `call_timeout_secs`.
    pub(super) async fn head_now(&self, key: &str) -> Result<Option<ObjectInfo>, S3Failure> {
        let store_key = self.store_key(key);
        let signer = &self.clients.signer;
        let tries = async {
            let mut attempt = 0u32;
            loop {
                let req = Request {
                    method: "HEAD",
                    bucket: &self.bucket,
                    key: &store_key,
                    upload_id: None,
                    headers: Vec::new(),
                    body: Bytes::new().into(),
                };
                let (failure, status) = match self.send_now("HeadObject", req).await {
                    Ok(answer) => {
                        let status = answer.status;
                        match Self::judged("HeadObject", answer) {
                            Ok(answer) => return Ok(Some(Self::described(key, &answer.headers))),
                            Err(S3Failure::NotFound) => return Ok(None),
                            Err(failure) => (failure, Some(status)),
                        }
                    }
                    Err(failure) => (failure, None),
                };
                attempt += 1;
                if attempt >= signer.read_attempts.max(1) || !retried(&failure, status) {
                    return Err(failure);
                }
                tokio::time::sleep(backoff(attempt - 1)).await;
            }
        };
        match tokio::time::timeout(signer.call_timeout, tries).await {
            Ok(answer) => answer,
            Err(_) => Err(S3Failure::Fault(BackendError::Timeout(
                "HeadObject: no answer within the call's deadline".into(),
            ))),
        }
    }

    /// An object's description from a HeadObject answer's headers.
    fn described(key: &str, headers: &reqwest::header::HeaderMap) -> ObjectInfo {
        let text = |name: &str| {
            headers
                .get(name)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        };
        let mut user = HashMap::new();
        for (name, value) in headers {
            if let Some(k) = name.as_str().strip_prefix("x-amz-meta-") {
                user.insert(
                    k.to_string(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                );
            }
        }
        let system: BTreeMap<String, String> = [
            "cache-control",
            "content-disposition",
            "content-encoding",
            "content-language",
            "expires",
        ]
        .into_iter()
        .filter_map(|name| Some((name.to_string(), text(name).filter(|v| !v.is_empty())?)))
        .collect();
        let modified = text("last-modified")
            .and_then(|t| httpdate::parse_http_date(&t).ok())
            .map(aws_smithy_types::DateTime::from);
        Self::info(
            key,
            text("etag").as_deref(),
            text("content-length").and_then(|n| n.parse().ok()),
            modified.as_ref(),
            Self::object_meta(text("content-type").as_deref(), Some(&user), system),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_put_carries_what_the_sdk_sent() {
        let mut meta = ObjectMeta {
            content_type: None,
            token: Some(7),
            ..Default::default()
        };
        meta.user_meta.insert("owner".into(), "zoë".into());
        meta.headers
            .insert("expires".into(), "Wed, 21 Oct 2026 07:28:00 GMT".into());
        meta.headers
            .insert("cache-control".into(), "no-cache".into());
        let headers = put_headers(&meta, Some("bWQ1".into()));
        let get = |n: &str| {
            headers
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("content-type"), Some("binary/octet-stream"));
        assert_eq!(get("content-md5"), Some("bWQ1"));
        assert_eq!(get("cache-control"), Some("no-cache"));
        assert_eq!(get("expires"), Some("Wed, 21 Oct 2026 07:28:00 GMT"));
        assert_eq!(get("x-amz-meta-fencing-token"), Some("7"));
        assert_eq!(get("x-amz-meta-owner"), Some("=?UTF-8?B?em/Dqw==?="));
        // HTTP's other two date forms are taken too, and sent as IMF-fixdate.
        for older in [
            "Wednesday, 21-Oct-26 07:28:00 GMT",
            "Wed Oct 21 07:28:00 2026",
        ] {
            meta.headers.insert("expires".into(), older.into());
            let sent = put_headers(&meta, None);
            assert!(
                sent.contains(&("expires".into(), "Wed, 21 Oct 2026 07:28:00 GMT".into())),
                "{older}: {sent:?}"
            );
        }
        // An Expires that is not an HTTP date is not sent, as the SDK drops it.
        meta.headers.insert("expires".into(), "soon".into());
        assert!(put_headers(&meta, None).iter().all(|(k, _)| k != "expires"));
    }

    #[test]
    fn reads_are_retried_as_the_sdk_retries_them() {
        let timeout = S3Failure::Fault(BackendError::Timeout("t".into()));
        let broken = S3Failure::Fault(BackendError::Unreachable("u".into()));
        let failing = S3Failure::Fault(BackendError::Failing("500".into()));
        let throttled = S3Failure::Fault(BackendError::Throttled("503".into()));
        let refused = S3Failure::Fault(BackendError::Refused {
            status: 403,
            code: String::new(),
            message: String::new(),
        });
        assert!(retried(&timeout, None));
        assert!(retried(&broken, None));
        assert!(retried(&failing, Some(500)));
        assert!(retried(&throttled, Some(503)));
        assert!(retried(&timeout, Some(504)));
        assert!(!retried(&timeout, Some(408)));
        assert!(!retried(&throttled, Some(429)));
        assert!(!retried(&refused, Some(403)));
        assert!(!retried(&S3Failure::NotFound, Some(404)));
        assert!(!retried(&S3Failure::Precondition, Some(412)));
        for attempt in 0..40 {
            assert!(backoff(attempt) <= Duration::from_secs(20));
        }
    }

    #[test]
    fn a_head_answer_describes_the_object() {
        use reqwest::header::{HeaderMap, HeaderValue};
        let mut h = HeaderMap::new();
        h.insert("etag", HeaderValue::from_static("\"abc\""));
        h.insert("content-length", HeaderValue::from_static("12"));
        h.insert(
            "last-modified",
            HeaderValue::from_static("Wed, 21 Oct 2026 07:28:00 GMT"),
        );
        h.insert("content-type", HeaderValue::from_static("text/plain"));
        h.insert("x-amz-meta-fencing-token", HeaderValue::from_static("9"));
        h.insert(
            "x-amz-meta-owner",
            HeaderValue::from_static("=?UTF-8?B?em/Dqw==?="),
        );
        h.insert("cache-control", HeaderValue::from_static("no-cache"));
        let info = S3Backend::described("k", &h);
        assert_eq!(info.etag, "\"abc\"");
        assert_eq!(info.version, "\"abc\"");
        assert_eq!(info.size, 12);
        assert_eq!(info.last_modified_ms, 1_792_567_680_000);
        assert_eq!(info.meta.token, Some(9));
        assert_eq!(
            info.meta.user_meta.get("owner").map(String::as_str),
            Some("zoë")
        );
        assert_eq!(info.meta.content_type.as_deref(), Some("text/plain"));
        assert_eq!(
            info.meta.header("cache-control").as_deref(),
            Some("no-cache")
        );
    }
}
