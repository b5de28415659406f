//! A small client for fencegate's lease API and native object API: take a lease, keep it alive
//! in the background, and write with its token attached.
//!
//! ```no_run
//! # async fn demo() -> Result<(), fencegate::client::ClientError> {
//! use fencegate::client::{AcquireOptions, Client};
//! use std::time::Duration;
//!
//! let fg = Client::new("http://127.0.0.1:8080");
//! // Bound to the object it guards: the grant fences out the previous holder at once.
//! let lease = fg
//!     .acquire(
//!         "nightly-report",
//!         "worker-7",
//!         Duration::from_secs(10),
//!         AcquireOptions::default().bind("default", "report.csv"),
//!     )
//!     .await?;
//! // Renewed every third of the TTL until released or dropped.
//! lease.put("default", "report.csv", "rows...").await?;
//! if lease.is_lost() {
//!     // A renewal failed: someone else may hold the lock now. Writes are still safe (the
//!     // fence refuses this token once a newer one is recorded), but stop working.
//! }
//! lease.release().await?;
//! # Ok(()) }
//! ```
//!
//! The client never decides safety by the clock: [`Lease::is_lost`] is advice for liveness; a
//! write with a superseded token fails with [`ClientError::Stale`] whatever the clock says.
//!
//! Against a fencegate with keys, give the client one ([`Client::with_key`]): every request is
//! then signed with SigV4 (aws-sigv4, the AWS SDKs' signer), the `Fencing-Token` included.

use serde::Deserialize;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The write's token is below the scope's highest: a newer holder exists; stop.
    #[error("stale fencing token {token}: the highest recorded is {highest}")]
    Stale { token: u64, highest: u64 },
    /// Someone else holds the lease; try again after `retry_after`.
    #[error("lease held by {holder}; retry after {retry_after:?}")]
    Held {
        holder: String,
        retry_after: Duration,
    },
    #[error("fencegate answered {status} {code}: {message}")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    #[error("cannot reach fencegate: {0}")]
    Http(#[from] reqwest::Error),
    #[error("cannot sign the request: {0}")]
    Signing(String),
}

/// Options of [`Client::acquire`].
#[derive(Debug, Clone, Default)]
pub struct AcquireOptions {
    wait: Duration,
    bind: Option<(String, String)>,
    s3_credentials: bool,
}

impl AcquireOptions {
    /// Wait up to `wait` (at most 60 s) for a held lease to free up.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Fence `bucket`/`key`'s scope with every grant.
    pub fn bind(mut self, bucket: &str, key: &str) -> Self {
        self.bind = Some((bucket.to_string(), key.to_string()));
        self
    }

    /// Also get S3 credentials that carry the token implicitly.
    pub fn s3_credentials(mut self) -> Self {
        self.s3_credentials = true;
        self
    }
}

/// Lease-bound S3 credentials.
#[derive(Debug, Clone, Deserialize)]
pub struct S3Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    /// The lease's bucket; the credentials change only objects in the lease's scope.
    pub bucket: String,
    pub scope: String,
}

#[derive(Debug, Clone, Deserialize)]
struct GrantBody {
    token: u64,
    ttl_ms: u64,
    scope: Option<String>,
    s3_credentials: Option<S3Credentials>,
    lease_secret: String,
}

#[derive(Deserialize)]
struct ErrorBody {
    error: String,
    message: String,
    highest: Option<u64>,
    holder: Option<String>,
}

/// A fencegate endpoint.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    key: Option<Arc<SigningKey>>,
}

/// An access key from fencegate's `[keys]` and its secret.
pub(crate) struct SigningKey {
    pub(crate) access_key_id: String,
    pub(crate) secret: String,
    pub(crate) region: String,
}

async fn refusal(resp: reqwest::Response, token: Option<u64>) -> ClientError {
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(1), Duration::from_secs);
    let body: Option<ErrorBody> = resp.json().await.ok();
    match body {
        Some(b) if b.error == "StaleFencingToken" => ClientError::Stale {
            token: token.unwrap_or_default(),
            highest: b.highest.unwrap_or_default(),
        },
        Some(b) if b.error == "LeaseHeld" => ClientError::Held {
            holder: b.holder.unwrap_or_default(),
            retry_after,
        },
        Some(b) => ClientError::Api {
            status,
            code: b.error,
            message: b.message,
        },
        None => ClientError::Api {
            status,
            code: String::new(),
            message: "no error body".into(),
        },
    }
}

impl Client {
    /// `base` is like `http://127.0.0.1:8080`.
    pub fn new(base: &str) -> Client {
        Client {
            http: reqwest::Client::new(),
            base: base.trim_end_matches('/').to_string(),
            key: None,
        }
    }

    /// Signs every request with this key (SigV4, region `us-east-1` unless
    /// [`Client::with_region`] says otherwise). Without it, requests are anonymous, which only
    /// a fencegate in development mode accepts.
    pub fn with_key(mut self, access_key_id: &str, secret_access_key: &str) -> Client {
        self.key = Some(Arc::new(SigningKey {
            access_key_id: access_key_id.to_string(),
            secret: secret_access_key.to_string(),
            region: "us-east-1".into(),
        }));
        self
    }

    /// The region signatures name (`[s3] region` on the server).
    pub fn with_region(mut self, region: &str) -> Client {
        if let Some(k) = &self.key {
            self.key = Some(Arc::new(SigningKey {
                access_key_id: k.access_key_id.clone(),
                secret: k.secret.clone(),
                region: region.to_string(),
            }));
        }
        self
    }

    /// Builds, signs (with a key) and sends a request.
    async fn send(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, ClientError> {
        let mut req = req.build()?;
        if let Some(key) = &self.key {
            sign(&mut req, key)?;
        }
        Ok(self.http.execute(req).await?)
    }

    fn lease_url(&self, name: &str) -> String {
        format!("{}/v1/leases/{}", self.base, urlencode(name))
    }

    /// Acquires `name` for `holder`, and renews it in the background every third of `ttl`.
    pub async fn acquire(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
        options: AcquireOptions,
    ) -> Result<Lease, ClientError> {
        let mut body = json!({
            "holder": holder,
            "ttl_ms": ttl.as_millis() as u64,
            "wait_ms": options.wait.as_millis() as u64,
            "s3_credentials": options.s3_credentials,
        });
        if let Some((bucket, key)) = &options.bind {
            body["bucket"] = bucket.clone().into();
            body["key"] = key.clone().into();
        }
        let resp = self
            .send(self.http.post(self.lease_url(name)).json(&body))
            .await?;
        if !resp.status().is_success() {
            return Err(refusal(resp, None).await);
        }
        let grant: GrantBody = resp.json().await?;
        let lost = Arc::new(AtomicBool::new(false));
        let renewer = tokio::spawn(renew_loop(
            self.clone(),
            name.to_string(),
            holder.to_string(),
            grant.token,
            grant.lease_secret.clone(),
            Duration::from_millis(grant.ttl_ms),
            lost.clone(),
        ));
        Ok(Lease {
            client: self.clone(),
            name: name.to_string(),
            holder: holder.to_string(),
            token: grant.token,
            secret: grant.lease_secret,
            scope: grant.scope,
            s3_credentials: grant.s3_credentials,
            lost,
            renewer,
        })
    }

    /// Writes `body` to `bucket`/`key` with `token` (the native API's fenced PUT).
    pub async fn put(
        &self,
        bucket: &str,
        key: &str,
        token: u64,
        body: impl Into<reqwest::Body>,
    ) -> Result<(), ClientError> {
        let url = format!(
            "{}/v1/objects/{}/{}",
            self.base,
            urlencode(bucket),
            urlencode_key(key)
        );
        let resp = self
            .send(
                self.http
                    .put(url)
                    .header("Fencing-Token", token.to_string())
                    .body(body),
            )
            .await?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(refusal(resp, Some(token)).await)
        }
    }

    /// Reads an object's bytes.
    pub async fn get(&self, bucket: &str, key: &str) -> Result<bytes::Bytes, ClientError> {
        let url = format!(
            "{}/v1/objects/{}/{}",
            self.base,
            urlencode(bucket),
            urlencode_key(key)
        );
        let resp = self.send(self.http.get(url)).await?;
        if resp.status().is_success() {
            Ok(resp.bytes().await?)
        } else {
            Err(refusal(resp, None).await)
        }
    }
}

async fn renew_loop(
    client: Client,
    name: String,
    holder: String,
    token: u64,
    secret: String,
    ttl: Duration,
    lost: Arc<AtomicBool>,
) {
    loop {
        tokio::time::sleep(ttl / 3).await;
        let body = json!({"holder": holder, "token": token, "secret": secret, "ttl_ms": ttl.as_millis() as u64});
        let ok = match client
            .send(client.http.put(client.lease_url(&name)).json(&body))
            .await
        {
            Ok(resp) => resp.status().is_success(),
            Err(_) => false,
        };
        if !ok {
            tracing::warn!(lease = %name, token, "lease renewal failed; the lease may be lost");
            lost.store(true, Ordering::SeqCst);
            return;
        }
    }
}

/// A held lease: its token, and a background renewal that stops when it is dropped.
pub struct Lease {
    client: Client,
    name: String,
    holder: String,
    token: u64,
    /// The lease's secret, which renew and release show.
    secret: String,
    scope: Option<String>,
    s3_credentials: Option<S3Credentials>,
    lost: Arc<AtomicBool>,
    renewer: tokio::task::JoinHandle<()>,
}

impl Lease {
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The fence scope a bound lease advanced.
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }

    pub fn s3_credentials(&self) -> Option<&S3Credentials> {
        self.s3_credentials.as_ref()
    }

    /// Whether a renewal failed. Liveness advice only: the fence decides safety.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Stops renewing without releasing: the lease runs out at its TTL. (What a paused or
    /// crashed holder looks like to fencegate.)
    pub fn stop_renewing(&self) {
        self.renewer.abort();
    }

    /// A fenced write with this lease's token.
    pub async fn put(
        &self,
        bucket: &str,
        key: &str,
        body: impl Into<reqwest::Body>,
    ) -> Result<(), ClientError> {
        self.client.put(bucket, key, self.token, body).await
    }

    /// Ends the lease now, so the next holder need not wait for the TTL.
    pub async fn release(self) -> Result<(), ClientError> {
        self.renewer.abort();
        let body = json!({"holder": self.holder, "token": self.token, "secret": self.secret});
        let resp = self
            .client
            .send(
                self.client
                    .http
                    .delete(self.client.lease_url(&self.name))
                    .json(&body),
            )
            .await?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(refusal(resp, None).await)
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

pub(crate) fn urlencode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, UNRESERVED_KEPT).to_string()
}

/// Everything but RFC 3986's unreserved characters is encoded, so a path in the server's
/// access log reads as the name it is (`stale.csv`, `job-c`, not `stale%2Ecsv`).
const UNRESERVED_KEPT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Keys keep their `/` separators.
pub(crate) fn urlencode_key(key: &str) -> String {
    key.split('/').map(urlencode).collect::<Vec<_>>().join("/")
}

/// Signs `req` with SigV4 as S3 clients do: `x-amz-content-sha256` carries the body's SHA-256
/// when the body is in memory, `UNSIGNED-PAYLOAD` when it streams. Every header present is
/// signed, `Fencing-Token` among them, as fencegate demands.
pub(crate) fn sign(req: &mut reqwest::Request, key: &SigningKey) -> Result<(), ClientError> {
    use aws_sigv4::http_request::{
        sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest,
        SigningSettings, UriPathNormalizationMode,
    };
    let fail = |e: &dyn std::fmt::Display| ClientError::Signing(e.to_string());
    let identity = aws_credential_types::Credentials::new(
        &key.access_key_id,
        &key.secret,
        None,
        None,
        "fencegate-client",
    )
    .into();
    let mut settings = SigningSettings::default();
    // The path is sent as encoded here, once: S3's convention, which fencegate verifies.
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(&key.region)
        .name("s3")
        .time(std::time::SystemTime::now())
        .settings(settings)
        .build()
        .map_err(|e| fail(&e))?
        .into();
    let in_memory = req.body().map(|b| b.as_bytes());
    let body = match in_memory {
        Some(None) => SignableBody::UnsignedPayload,
        Some(Some(bytes)) => SignableBody::Bytes(bytes),
        None => SignableBody::Bytes(&[]),
    };
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    let signable = SignableRequest::new(
        req.method().as_str(),
        req.url().as_str(),
        headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        body,
    )
    .map_err(|e| fail(&e))?;
    let (instructions, _) = sign(signable, &params).map_err(|e| fail(&e))?.into_parts();
    for (name, value) in instructions.headers() {
        let name =
            reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|e| fail(&e))?;
        let value = reqwest::header::HeaderValue::from_str(value).map_err(|e| fail(&e))?;
        req.headers_mut().insert(name, value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_their_unreserved_characters() {
        assert_eq!(urlencode("stale.csv"), "stale.csv");
        assert_eq!(urlencode("job-c_1~x"), "job-c_1~x");
        assert_eq!(urlencode("a b/c?d#e%"), "a%20b%2Fc%3Fd%23e%25");
        assert_eq!(urlencode_key("dir/r é.csv"), "dir/r%20%C3%A9.csv");
    }
}
