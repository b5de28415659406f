//! Requests to the store signed here with aws-sigv4 and sent through one pooled HTTP client
//! (reqwest on hyper), without the SDK's per-call pipeline:
//! - the hot calls (PutObject with its condition, HeadObject, the conditional DeleteObject),
//!   signed in headers (`direct.rs` sends them and reads their answers);
//! - cluster mode's commit (PutObject, CompleteMultipartUpload) and delete, presigned so that
//!   the store itself refuses them after a deadline. An instance paused after its intent (GC,
//!   SIGSTOP, a buffering proxy) can then not land the request after the deadline its intent
//!   announced, so other instances may decide once it has passed (docs/design.md, "Bounded
//!   intents"). The SDK presigns neither CompleteMultipartUpload nor anything it sends itself.
//!
//! The payload is `UNSIGNED-PAYLOAD` either way; every body fencegate commits carries its
//! `Content-MD5`, which is signed, so the store refuses bytes that differ from those sent.

use super::errors::S3Failure;
use crate::backend::BackendError;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest,
    SignatureLocation, SigningSettings, UriPathNormalizationMode,
};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// S3's URI encoding of a key: everything but unreserved characters and `/`.
const KEY: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');
/// The same for query values (upload ids), where `/` is encoded too.
const QUERY: &AsciiSet = &KEY.add(b'/');

/// Signs and sends the requests of one store (one `[backends.NAME]`).
pub struct Signer {
    pub http: reqwest::Client,
    pub credentials: Option<SharedCredentialsProvider>,
    /// The credentials last provided, until shortly before they expire (the SDK's own
    /// identity cache does this for its calls; a provider such as IMDS or a profile file
    /// must not be asked on every request).
    pub cached: tokio::sync::Mutex<Option<(Credentials, SystemTime)>>,
    pub region: String,
    /// `scheme://host[:port]` of the store, whose clock is compared with this instance's.
    pub endpoint: String,
    /// What the SDK's endpoint rules are given: the endpoint the SDK's clients use (the
    /// configured one, or the environment's or profile's for S3), whether the bucket goes in
    /// the path, FIPS and dual-stack.
    pub sdk_endpoint: Option<String>,
    pub path_style: bool,
    pub use_fips: bool,
    pub use_dual_stack: bool,
    /// Each store bucket's resolved base URL.
    pub bases: std::sync::Mutex<std::collections::HashMap<String, String>>,
    /// A read's tries (`read_attempts`), all within `call_timeout_secs`.
    pub read_attempts: u32,
    pub call_timeout: Duration,
}

/// How long credentials without an expiry are used before they are asked for again, and how
/// long before an expiry they are renewed: the SDK's identity cache defaults.
const CREDENTIALS_REUSED: Duration = Duration::from_secs(15 * 60);
const CREDENTIALS_RENEWED_BEFORE: Duration = Duration::from_secs(10);

/// Where the signature goes: the query string, valid for a window (presigned), or the headers.
pub enum Signature {
    Presigned {
        start: SystemTime,
        expires: Duration,
    },
    Headers,
}

/// One request to sign: method, store bucket and key, an optional upload id, headers.
pub struct Request<'a> {
    pub method: &'a str,
    pub bucket: &'a str,
    pub key: &'a str,
    pub upload_id: Option<&'a str>,
    pub headers: Vec<(String, String)>,
    pub body: super::spool::Spooled,
}

/// The presigning window for a request that must not land after `not_after` (the store's
/// clock): whole seconds, because `X-Amz-Date` has second resolution and `X-Amz-Expires`
/// counts seconds, so the store's last second, `start + expires`, is at or before `not_after`.
pub fn window(not_after: SystemTime) -> Result<(SystemTime, Duration), S3Failure> {
    let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (start, end) = (secs(SystemTime::now()), secs(not_after));
    if end <= start {
        return Err(S3Failure::Fault(BackendError::Expired(
            "the intent's deadline passed before the request was sent".into(),
        )));
    }
    Ok((
        UNIX_EPOCH + Duration::from_secs(start),
        Duration::from_secs(end - start),
    ))
}

impl Signer {
    /// Where `bucket`'s objects are, as the SDK's endpoint rules resolve it (the same rules,
    /// so that these requests reach the store the SDK's GetObject and ListObjects reach:
    /// virtual-hosted or path style, dotted bucket names, partitions, FIPS and dual-stack),
    /// resolved once per bucket.
    async fn base(&self, bucket: &str) -> Result<String, String> {
        if let Some(base) = self
            .bases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(bucket)
        {
            return Ok(base.clone());
        }
        use aws_sdk_s3::config::endpoint::{DefaultResolver, Params, ResolveEndpoint};
        let mut params = Params::builder()
            .bucket(bucket)
            .region(&self.region)
            .use_fips(self.use_fips)
            .use_dual_stack(self.use_dual_stack)
            .force_path_style(self.path_style);
        if let Some(endpoint) = &self.sdk_endpoint {
            params = params.endpoint(endpoint);
        }
        let params = params.build().map_err(|e| e.to_string())?;
        let endpoint = DefaultResolver::new()
            .resolve_endpoint(&params)
            .await
            .map_err(|e| format!("the store's endpoint for bucket {bucket}: {e}"))?;
        let base = endpoint.url().trim_end_matches('/').to_string();
        self.bases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(bucket.to_string(), base.clone());
        Ok(base)
    }

    async fn url(
        &self,
        bucket: &str,
        key: &str,
        upload_id: Option<&str>,
    ) -> Result<String, String> {
        let mut url = format!(
            "{}/{}",
            self.base(bucket).await?,
            utf8_percent_encode(key, KEY)
        );
        if let Some(id) = upload_id {
            url.push_str(&format!("?uploadId={}", utf8_percent_encode(id, QUERY)));
        }
        Ok(url)
    }

    /// Signs `req` to be refused by the store after `not_after`, sends it, and reads the
    /// answer (see [`send`]).
    pub async fn send(
        &self,
        op: &str,
        req: Request<'_>,
        not_after: SystemTime,
    ) -> Result<Option<String>, S3Failure> {
        let (start, expires) = window(not_after)?;
        self.send_signed(op, req, (start, expires), not_after).await
    }

    /// Signs `req` for the window `(start, expires)` and sends it, waiting for the answer
    /// until `wait_until` (plus a second).
    pub async fn send_signed(
        &self,
        op: &str,
        req: Request<'_>,
        (start, expires): (SystemTime, Duration),
        wait_until: SystemTime,
    ) -> Result<Option<String>, S3Failure> {
        let builder = self
            .sign(op, req, Signature::Presigned { start, expires })
            .await?;
        send(op, builder, wait_until).await
    }

    /// The credentials to sign with, from the cache while they are fresh.
    async fn credentials(&self) -> Result<Credentials, String> {
        let provider = self
            .credentials
            .as_ref()
            .ok_or("no credentials are configured for this store")?;
        let mut cached = self.cached.lock().await;
        if let Some((credentials, until)) = &*cached {
            if SystemTime::now() + CREDENTIALS_RENEWED_BEFORE < *until {
                return Ok(credentials.clone());
            }
        }
        let fresh = provider
            .provide_credentials()
            .await
            .map_err(|e| e.to_string())?;
        let until = fresh
            .expiry()
            .unwrap_or_else(|| SystemTime::now() + CREDENTIALS_REUSED);
        *cached = Some((fresh.clone(), until));
        Ok(fresh)
    }

    /// `req` signed, as a request ready to send. A failure to sign is a fault of this
    /// instance's configuration, never the store's answer.
    pub async fn sign(
        &self,
        op: &str,
        req: Request<'_>,
        how: Signature,
    ) -> Result<reqwest::RequestBuilder, S3Failure> {
        let fail = |e: &dyn std::fmt::Display| {
            S3Failure::Fault(BackendError::Failing(format!("{op}: signing: {e}")))
        };
        // Bounded as the SDK's calls are: a credential source that hangs fails the request
        // (nothing was sent), rather than holding every write behind it.
        let identity = tokio::time::timeout(self.call_timeout, self.credentials())
            .await
            .map_err(|_| {
                fail(&"no credentials from the credential source within call_timeout_secs")
            })?
            .map_err(|e| fail(&e))?
            .into();
        let mut settings = SigningSettings::default();
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        let time = match how {
            Signature::Presigned { start, expires } => {
                settings.signature_location = SignatureLocation::QueryParams;
                settings.expires_in = Some(expires);
                start
            }
            Signature::Headers => {
                // S3 wants x-amz-content-sha256 on every header-signed request.
                settings.signature_location = SignatureLocation::Headers;
                settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
                SystemTime::now()
            }
        };
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("s3")
            .time(time)
            .settings(settings)
            .build()
            .map_err(|e| fail(&e))?
            .into();
        let url = self
            .url(req.bucket, req.key, req.upload_id)
            .await
            .map_err(|e| fail(&e))?;
        let signable = SignableRequest::new(
            req.method,
            url.as_str(),
            req.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            SignableBody::UnsignedPayload,
        )
        .map_err(|e| fail(&e))?;
        let (instructions, _) = sign(signable, &params).map_err(|e| fail(&e))?.into_parts();
        let mut url = reqwest::Url::parse(&url).map_err(|e| fail(&e))?;
        for (k, v) in instructions.params() {
            url.query_pairs_mut().append_pair(k, v);
        }
        let method = reqwest::Method::from_bytes(req.method.as_bytes()).map_err(|e| fail(&e))?;
        let mut builder = self.http.request(method, url);
        for (name, value) in &req.headers {
            builder = builder.header(name, value);
        }
        for (name, value) in instructions.headers() {
            builder = builder.header(name, value);
        }
        let body = match req.body.bytes() {
            Some(bytes) => reqwest::Body::from(bytes.clone()),
            None => reqwest::Body::wrap_stream(req.body.stream()),
        };
        Ok(builder.header("content-length", req.body.len()).body(body))
    }
}

impl Signer {
    /// How far this instance's clock runs ahead of the store's (ms; negative: behind), as a
    /// range: the store's `Date` header has whole seconds, and the answer takes a round trip.
    pub async fn clock_offset(&self) -> Result<(i64, i64), String> {
        let before = crate::wall_clock::now_ms() as i64;
        let response = self
            .http
            .head(&self.endpoint)
            .send()
            .await
            .map_err(|e| format!("cannot reach the store to compare clocks: {e}"))?;
        let after = crate::wall_clock::now_ms() as i64;
        let date = response
            .headers()
            .get("date")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| httpdate::parse_http_date(v).ok())
            .ok_or("the store's answer has no Date header to compare clocks with")?;
        let store = date
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        Ok((before - store - 999, after - store))
    }
}

/// What a presigned request's answer means: the ETag for a commit (from the header, or from
/// a CompleteMultipartUpload's XML, which may also carry an error under status 200).
async fn send(
    op: &str,
    builder: reqwest::RequestBuilder,
    not_after: SystemTime,
) -> Result<Option<String>, S3Failure> {
    // After `not_after` the store refuses the request anyway; waiting longer only delays the
    // answer (a second more for the answer of a request the store took just in time).
    let wait = not_after
        .duration_since(SystemTime::now())
        .unwrap_or_default()
        + Duration::from_secs(1);
    let answer = tokio::time::timeout(wait, async {
        let response = builder.send().await?;
        let status = response.status().as_u16();
        let etag = response
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let text = response.text().await?;
        Ok::<_, reqwest::Error>((status, etag, text))
    })
    .await;
    let (status, etag, text) = match answer {
        Err(_) => {
            return Err(S3Failure::Fault(BackendError::Timeout(format!(
                "{op}: no answer before the request's deadline"
            ))))
        }
        Ok(Err(e)) if e.is_timeout() => {
            return Err(S3Failure::Fault(BackendError::Timeout(format!(
                "{op}: {e}"
            ))))
        }
        Ok(Err(e)) => {
            return Err(S3Failure::Fault(BackendError::Unreachable(format!(
                "{op}: {e}"
            ))))
        }
        Ok(Ok(answer)) => answer,
    };
    let code = element(&text, "Code");
    if (200..300).contains(&status) && code.is_none() {
        return Ok(etag.or_else(|| element(&text, "ETag")));
    }
    let message = element(&text, "Message").unwrap_or_default();
    let what = || format!("{op}: {status} {} {message}", code.as_deref().unwrap_or(""));
    Err(match (status, code.as_deref()) {
        (404, _) => S3Failure::NotFound,
        (412, _) => S3Failure::Precondition,
        // AccessDenied "Request has expired" (AWS and ministack word it alike).
        (403, Some("AccessDenied")) if message.to_ascii_lowercase().contains("expired") => {
            S3Failure::Fault(BackendError::Expired(what()))
        }
        (429 | 503, _) | (_, Some("SlowDown")) => S3Failure::Fault(BackendError::Throttled(what())),
        (408 | 504, _) => S3Failure::Fault(BackendError::Timeout(what())),
        _ => S3Failure::Fault(super::errors::refusal(status, code.as_deref(), what())),
    })
}

/// The text of the first `<name>` element of an S3 XML answer, unescaped.
pub(super) fn element(xml: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&format!("</{name}>"))?;
    Some(
        xml[start..end]
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&"),
    )
}

/// The CompleteMultipartUpload body for `parts` (number, ETag).
pub fn completion_xml(parts: &[(i32, String)]) -> String {
    let mut xml = String::from(
        r#"<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">"#,
    );
    for (number, etag) in parts {
        let etag = etag
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;");
        xml.push_str(&format!(
            "<Part><PartNumber>{number}</PartNumber><ETag>{etag}</ETag></Part>"
        ));
    }
    xml.push_str("</CompleteMultipartUpload>");
    xml
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_ends_at_or_before_the_deadline() {
        let not_after = SystemTime::now() + Duration::from_millis(5_900);
        let (start, expires) = window(not_after).unwrap();
        assert!(start + expires <= not_after);
        assert!(expires >= Duration::from_secs(4));
        let past = SystemTime::now() - Duration::from_secs(1);
        assert!(matches!(
            window(past),
            Err(S3Failure::Fault(BackendError::Expired(_)))
        ));
    }

    fn signer(endpoint: Option<&str>, region: &str, path_style: bool) -> Signer {
        Signer {
            http: reqwest::Client::new(),
            credentials: None,
            cached: Default::default(),
            read_attempts: 3,
            call_timeout: Duration::from_secs(30),
            region: region.into(),
            endpoint: String::new(),
            sdk_endpoint: endpoint.map(str::to_string),
            path_style,
            use_fips: false,
            use_dual_stack: false,
            bases: Default::default(),
        }
    }

    #[tokio::test]
    async fn keys_and_upload_ids_are_encoded_as_s3_signs_them() {
        let p = signer(Some("http://127.0.0.1:9000/"), "us-east-1", true);
        assert_eq!(
            p.url("bkt", "a b/c+d~é", Some("x/y=")).await.unwrap(),
            "http://127.0.0.1:9000/bkt/a%20b/c%2Bd~%C3%A9?uploadId=x%2Fy%3D"
        );
    }

    /// The SDK's endpoint rules decide where a request goes, as for the SDK's own calls.
    #[tokio::test]
    async fn requests_go_where_the_sdk_sends_its_own() {
        let aws = signer(None, "eu-west-1", false);
        assert_eq!(
            aws.url("bkt", "k", None).await.unwrap(),
            "https://bkt.s3.eu-west-1.amazonaws.com/k"
        );
        // A dotted name is not a valid host label over https: path style, as the SDK does.
        let dotted = aws.url("my.bucket", "k", None).await.unwrap();
        assert!(dotted.ends_with("amazonaws.com/my.bucket/k"), "{dotted}");
        let china = signer(None, "cn-north-1", false);
        assert_eq!(
            china.url("bkt", "k", None).await.unwrap(),
            "https://bkt.s3.cn-north-1.amazonaws.com.cn/k"
        );
        let custom = signer(Some("http://store.internal:9000"), "us-east-1", false);
        assert_eq!(
            custom.url("bkt", "k", None).await.unwrap(),
            "http://bkt.store.internal:9000/k"
        );
    }

    /// A credential source that answers after `delay`, counting the times it is asked.
    #[derive(Debug)]
    struct Source {
        delay: Duration,
        asked: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    }

    impl ProvideCredentials for Source {
        fn provide_credentials<'a>(
            &'a self,
        ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            aws_credential_types::provider::future::ProvideCredentials::new(async move {
                tokio::time::sleep(self.delay).await;
                Ok(Credentials::new("AK", "SK", None, None, "test"))
            })
        }
    }

    fn put_of(key: &str) -> Request<'_> {
        Request {
            method: "PUT",
            bucket: "bkt",
            key,
            upload_id: None,
            headers: vec![("if-none-match".into(), "*".into())],
            body: bytes::Bytes::from_static(b"x").into(),
        }
    }

    #[tokio::test]
    async fn credentials_are_cached_and_a_hung_source_fails_within_the_call_deadline() {
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut p = signer(Some("http://127.0.0.1:9000"), "us-east-1", true);
        p.credentials = Some(SharedCredentialsProvider::new(Source {
            delay: Duration::ZERO,
            asked: asked.clone(),
        }));
        for key in ["a", "b", "c"] {
            let req = p.sign("PutObject", put_of(key), Signature::Headers).await;
            let req = req.unwrap().build().unwrap();
            assert!(req.headers()["authorization"]
                .to_str()
                .unwrap()
                .contains("SignedHeaders=host;if-none-match;x-amz-content-sha256;x-amz-date"));
            assert_eq!(req.headers()["x-amz-content-sha256"], "UNSIGNED-PAYLOAD");
        }
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);

        let mut hung = signer(Some("http://127.0.0.1:9000"), "us-east-1", true);
        hung.credentials = Some(SharedCredentialsProvider::new(Source {
            delay: Duration::from_secs(3600),
            asked: Default::default(),
        }));
        hung.call_timeout = Duration::from_millis(200);
        let started = std::time::Instant::now();
        let err = hung
            .sign("PutObject", put_of("k"), Signature::Headers)
            .await
            .err()
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        // Nothing was sent: a fault, never an outcome unknown (which would be read back).
        assert!(!err.outcome_unknown(), "{err:?}");
        assert!(format!("{err:?}").contains("call_timeout_secs"), "{err:?}");
    }

    #[test]
    fn xml_answers_are_read() {
        let ok = r#"<CompleteMultipartUploadResult><ETag>&quot;abc-2&quot;</ETag></CompleteMultipartUploadResult>"#;
        assert_eq!(element(ok, "ETag").as_deref(), Some("\"abc-2\""));
        assert_eq!(element(ok, "Code"), None);
        let xml = completion_xml(&[(1, "\"a\"".into()), (2, "\"b<\"".into())]);
        assert!(xml.contains("<Part><PartNumber>2</PartNumber><ETag>\"b&lt;\"</ETag></Part>"));
    }
}
