//! The fencegate client crate: the HTTP client and its requests (this file), leases and their
//! renewal (`lease.rs`), errors (`error.rs`) and the SigV4 signer (`signing.rs`). Its README
//! follows, with an example that compiles as a doctest.
#![doc = include_str!("../README.md")]

mod error;
mod lease;
pub mod signing;

pub use error::Error;
pub use lease::{Lease, LeaseHealth, S3Credentials};
use serde_json::json;
use signing::{urlencode, urlencode_key, SigningKey};
use std::sync::Arc;
use std::time::Duration;

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

/// An acquire's answer. No `Debug`: it holds the lease's secret and the S3 credentials.
#[derive(Clone, serde::Deserialize)]
pub(crate) struct Grant {
    token: u64,
    ttl_ms: u64,
    scope: Option<String>,
    s3_credentials: Option<S3Credentials>,
    lease_secret: String,
    /// How long the server took from the request to the grant (absent from servers before
    /// it was added).
    #[serde(default)]
    waited_ms: Option<u64>,
}

/// What a fenced write recorded.
#[derive(Debug, Clone, serde::Deserialize)]
#[non_exhaustive]
pub struct Written {
    /// The fence scope the key maps to.
    pub scope: Option<String>,
    pub token: Option<u64>,
    pub etag: Option<String>,
}

/// What a fenced delete recorded.
#[derive(Debug, Clone, serde::Deserialize)]
#[non_exhaustive]
pub struct Deleted {
    /// Whether there was an object to delete (a delete of an absent key still records its
    /// token, so a slow zombie cannot create the key afterwards).
    #[serde(default)]
    pub existed: bool,
    pub token: Option<u64>,
}

/// An object's description, from HEAD.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ObjectHead {
    pub etag: Option<String>,
    pub size: Option<u64>,
    /// The token that wrote it.
    pub token: Option<u64>,
}

/// Refuses a name with a `.` or `..` path segment: reqwest (as every URL library, after RFC
/// 3986) resolves them before sending, so `a/../b` would write `b`, and `../other/x` another
/// bucket, under a signature for the name given.
fn sendable(name: &str, key: &str) -> Result<(), Error> {
    if name
        .split('/')
        .any(|segment| segment == "." || segment == "..")
    {
        return Err(Error::InvalidKey {
            key: key.to_string(),
            message: "a `.` or `..` path segment is resolved away by HTTP clients before it is sent, and fencegate refuses such keys; rename the object".into(),
        });
    }
    Ok(())
}

/// A fencegate endpoint.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    key: Option<Arc<SigningKey>>,
    /// Each request's limit, from the send to the answer's end (an acquire's wait on top).
    timeout: Option<Duration>,
}

/// The longest wait one acquire asks the server for; longer waits are several acquires.
const MAX_WAIT: Duration = Duration::from_secs(60);

impl Client {
    /// `base` is like `http://127.0.0.1:8080`.
    ///
    /// Redirects are never followed: fencegate answers none, so a 3xx comes from something
    /// else, and following it would carry the request (an object's bytes, a lease's secret in a
    /// renew or release, every header but `Authorization`) to another host and take that host's
    /// answer as fencegate's. A 3xx is [`Error::Redirected`], naming where it pointed.
    ///
    /// Panics, as `reqwest::Client::new` does, if the TLS backend cannot be initialised.
    pub fn new(base: &str) -> Client {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("the HTTP client builds (reqwest::Client::new makes the same assumption)");
        Client {
            http,
            base: base.trim_end_matches('/').to_string(),
            key: None,
            timeout: None,
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

    /// Gives up on a request that has not been answered whole within `timeout` (none by
    /// default: a large body may take long). An acquire's wait is added to it.
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = Some(timeout);
        self
    }

    /// The region signatures name (`[s3] region` on the server).
    pub fn with_region(mut self, region: &str) -> Client {
        if let Some(k) = &self.key {
            self.key = Some(Arc::new(SigningKey {
                region: region.to_string(),
                ..SigningKey::clone(k)
            }));
        }
        self
    }

    /// Builds, signs (with a key) and sends a request.
    async fn send(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, Error> {
        self.send_within(req, Duration::ZERO).await
    }

    /// [`Client::send`], the timeout lengthened by `extra` (an acquire's wait).
    async fn send_within(
        &self,
        req: reqwest::RequestBuilder,
        extra: Duration,
    ) -> Result<reqwest::Response, Error> {
        let req = match self.timeout {
            Some(t) => req.timeout(t + extra),
            None => req,
        };
        let mut req = req.build()?;
        if let Some(key) = &self.key {
            signing::sign(&mut req, key)?;
        }
        let resp = self.http.execute(req).await?;
        if resp.status().is_redirection() {
            return Err(error::redirected(&resp));
        }
        Ok(resp)
    }

    fn lease_url(&self, name: &str) -> String {
        format!("{}/v1/leases/{}", self.base, urlencode(name))
    }

    /// `/v1/{what}/{bucket}/{key}`, or the refusal of a name an HTTP client would rewrite.
    fn object_url(&self, what: &str, bucket: &str, key: &str) -> Result<String, Error> {
        sendable(bucket, bucket)?;
        sendable(key, key)?;
        Ok(format!(
            "{}/v1/{what}/{}/{}",
            self.base,
            urlencode(bucket),
            urlencode_key(key)
        ))
    }

    /// Acquires `name` for `holder`, and renews it in the background every third of `ttl`.
    /// A wait longer than the server's limit (60 s) is several acquires.
    pub async fn acquire(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
        options: AcquireOptions,
    ) -> Result<Lease, Error> {
        let until = tokio::time::Instant::now() + options.wait;
        loop {
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            let once = AcquireOptions {
                wait: left.min(MAX_WAIT),
                ..options.clone()
            };
            match self.acquire_once(name, holder, ttl, once).await {
                Err(Error::Held { .. }) if left > MAX_WAIT => continue,
                other => return other,
            }
        }
    }

    async fn acquire_once(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
        options: AcquireOptions,
    ) -> Result<Lease, Error> {
        let mut body = json!({
            "holder": holder,
            "ttl_ms": ttl.as_millis() as u64,
            "wait_ms": options.wait.as_millis() as u64,
            "s3_credentials": options.s3_credentials,
        });
        if let Some((bucket, key)) = &options.bind {
            // The server refuses these too; refused here, a binding and a write agree.
            sendable(bucket, bucket)?;
            sendable(key, key)?;
            body["bucket"] = bucket.clone().into();
            body["key"] = key.clone().into();
        }
        let sent = tokio::time::Instant::now();
        let resp = self
            .send_within(
                self.http.post(self.lease_url(name)).json(&body),
                options.wait,
            )
            .await?;
        if !resp.status().is_success() {
            return Err(error::refusal(resp, None, false).await);
        }
        let grant: Grant = resp.json().await?;
        // The server's TTL runs from its grant, `waited_ms` after it received the request,
        // which is after the send: counted from here, the lease runs out no later than there,
        // however long the answer took to arrive. (A server that does not say: from the send,
        // which after a wait may count the lease lost early, never late.)
        let granted = sent + Duration::from_millis(grant.waited_ms.unwrap_or(0));
        Ok(Lease::start(self.clone(), name, holder, grant, granted))
    }

    /// Writes `body` to `bucket`/`key` with `token` (the native API's fenced PUT).
    pub async fn put(
        &self,
        bucket: &str,
        key: &str,
        token: u64,
        body: impl Into<reqwest::Body>,
    ) -> Result<Written, Error> {
        let req = self
            .http
            .put(self.object_url("objects", bucket, key)?)
            .header("Fencing-Token", token.to_string())
            .body(body);
        let resp = self.send(req).await?;
        if resp.status().is_success() {
            Ok(resp.json().await?)
        } else {
            Err(error::refusal(resp, Some(token), false).await)
        }
    }

    /// Deletes `bucket`/`key` with `token`; the fence keeps the token in a tombstone.
    pub async fn delete(&self, bucket: &str, key: &str, token: u64) -> Result<Deleted, Error> {
        let req = self
            .http
            .delete(self.object_url("objects", bucket, key)?)
            .header("Fencing-Token", token.to_string());
        let resp = self.send(req).await?;
        if resp.status().is_success() {
            Ok(resp.json().await?)
        } else {
            Err(error::refusal(resp, Some(token), false).await)
        }
    }

    /// Raises the scope's highest token to `token` without writing: a new holder fences out
    /// the old one before its first write.
    pub async fn advance(&self, bucket: &str, key: &str, token: u64) -> Result<(), Error> {
        let req = self
            .http
            .post(self.object_url("fences", bucket, key)?)
            .header("Fencing-Token", token.to_string());
        let resp = self.send(req).await?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(error::refusal(resp, Some(token), false).await)
        }
    }

    /// Reads an object's bytes.
    pub async fn get(&self, bucket: &str, key: &str) -> Result<bytes::Bytes, Error> {
        let resp = self
            .send(self.http.get(self.object_url("objects", bucket, key)?))
            .await?;
        if resp.status().is_success() {
            Ok(resp.bytes().await?)
        } else {
            Err(error::refusal(resp, None, false).await)
        }
    }

    /// An object's ETag, size and the token that wrote it.
    pub async fn head(&self, bucket: &str, key: &str) -> Result<ObjectHead, Error> {
        let resp = self
            .send(self.http.head(self.object_url("objects", bucket, key)?))
            .await?;
        if !resp.status().is_success() {
            return Err(error::refusal(resp, None, true).await);
        }
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        Ok(ObjectHead {
            etag: header("etag"),
            size: header("content-length").and_then(|v| v.parse().ok()),
            token: header("fencing-token").and_then(|v| v.parse().ok()),
        })
    }
}
