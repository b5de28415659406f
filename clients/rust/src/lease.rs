//! A held lease: its token and secret, the renewal in the background, and whether it is lost.

use crate::{Client, Error, Written};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Lease-bound S3 credentials: every write signed with them carries the lease's token.
/// `Debug` shows all but the secret.
#[derive(Clone, serde::Deserialize)]
pub struct S3Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    /// The lease's bucket; the credentials change only objects in the lease's scope.
    pub bucket: String,
    pub scope: String,
}

impl std::fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret stays out of every log line and panic message.
        f.debug_struct("S3Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("bucket", &self.bucket)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// Whether a lease is still held, as far as this client can tell. Cloned freely, so a task
/// can wait on it while the lease writes.
#[derive(Clone, Debug)]
pub struct LeaseHealth {
    lost: watch::Sender<bool>,
    /// When the lease runs out unless a renewal lands first: the last grant's send time plus
    /// its TTL, so a renewal that was slow to answer never extends it past what the server
    /// counted.
    deadline: Arc<Mutex<Instant>>,
}

impl LeaseHealth {
    fn new(deadline: Instant) -> LeaseHealth {
        LeaseHealth {
            lost: watch::Sender::new(false),
            deadline: Arc::new(Mutex::new(deadline)),
        }
    }

    fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn extend(&self, to: Instant) {
        *self.deadline.lock().unwrap_or_else(|e| e.into_inner()) = to;
    }

    fn mark_lost(&self) {
        self.lost.send_replace(true);
    }

    /// A renewal failed, or the TTL passed without one. Advice for liveness: stop working.
    /// Safety never rests on it, because a pause can fall between this check and the write;
    /// the fence refuses the token once a newer one is recorded, whatever the clock says.
    pub fn is_lost(&self) -> bool {
        if *self.lost.borrow() {
            return true;
        }
        if Instant::now() >= self.deadline() {
            self.mark_lost();
            return true;
        }
        false
    }

    /// Resolves once the lease is lost, for a task that should stop work at that moment.
    pub async fn lost(&self) {
        let mut rx = self.lost.subscribe();
        loop {
            if self.is_lost() {
                return;
            }
            let deadline = self.deadline();
            tokio::select! {
                _ = rx.wait_for(|lost| *lost) => return,
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}

/// A held lease: its token, and a background renewal every third of its TTL that stops when
/// the lease is released or dropped. Dropping it without [`Lease::release`] leaves the lease to
/// run out at its TTL.
pub struct Lease {
    pub(crate) client: Client,
    pub(crate) name: String,
    pub(crate) holder: String,
    pub(crate) token: u64,
    pub(crate) secret: String,
    pub(crate) scope: Option<String>,
    pub(crate) s3_credentials: Option<S3Credentials>,
    pub(crate) health: LeaseHealth,
    pub(crate) renewer: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.name)
            .field("holder", &self.holder)
            .field("token", &self.token)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl Lease {
    pub(crate) fn start(
        client: Client,
        name: &str,
        holder: &str,
        grant: crate::Grant,
        sent: Instant,
    ) -> Lease {
        let ttl = Duration::from_millis(grant.ttl_ms);
        let health = LeaseHealth::new(sent + ttl);
        let renewer = tokio::spawn(renew_loop(
            client.clone(),
            name.to_string(),
            serde_json::json!({
                "holder": holder, "token": grant.token, "secret": grant.lease_secret,
                "ttl_ms": grant.ttl_ms,
            }),
            ttl,
            health.clone(),
        ));
        Lease {
            client,
            name: name.to_string(),
            holder: holder.to_string(),
            token: grant.token,
            secret: grant.lease_secret,
            scope: grant.scope,
            s3_credentials: grant.s3_credentials,
            health,
            renewer,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token of this grant, for writes made by other means (an S3 client's
    /// `x-amz-meta-fencing-token`, another HTTP client).
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The lease's secret, which renewing and releasing it need.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The fence scope a bound lease advanced.
    pub fn scope(&self) -> Option<&str> {
        self.scope.as_deref()
    }

    pub fn s3_credentials(&self) -> Option<&S3Credentials> {
        self.s3_credentials.as_ref()
    }

    /// Whether a renewal failed or the TTL passed ([`LeaseHealth::is_lost`]).
    pub fn is_lost(&self) -> bool {
        self.health.is_lost()
    }

    /// A handle to wait on the loss from another task.
    pub fn health(&self) -> LeaseHealth {
        self.health.clone()
    }

    /// Stops renewing without releasing: the lease runs out at its TTL. What a paused or
    /// crashed holder looks like to fencegate (demos and tests).
    pub fn stop_renewing(&self) {
        self.renewer.abort();
    }

    fn still_held(&self) -> Result<(), Error> {
        if self.is_lost() {
            return Err(Error::LeaseLost {
                name: self.name.clone(),
            });
        }
        Ok(())
    }

    /// A refusal as stale means a newer holder exists: the lease is lost, whatever its TTL.
    fn judged<T>(&self, result: Result<T, Error>) -> Result<T, Error> {
        if let Err(Error::Stale { .. }) = &result {
            self.health.mark_lost();
        }
        result
    }

    /// A fenced write with this lease's token. Once the lease is lost it fails with
    /// [`Error::LeaseLost`] without sending.
    pub async fn put(
        &self,
        bucket: &str,
        key: &str,
        body: impl Into<reqwest::Body>,
    ) -> Result<Written, Error> {
        self.still_held()?;
        self.judged(self.client.put(bucket, key, self.token, body).await)
    }

    /// A fenced delete with this lease's token; [`Error::LeaseLost`] without sending once lost.
    pub async fn delete(&self, bucket: &str, key: &str) -> Result<crate::Deleted, Error> {
        self.still_held()?;
        self.judged(self.client.delete(bucket, key, self.token).await)
    }

    /// Ends the lease now, so the next holder need not wait for the TTL.
    pub async fn release(self) -> Result<(), Error> {
        self.renewer.abort();
        let body =
            serde_json::json!({"holder": self.holder, "token": self.token, "secret": self.secret});
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
            Err(crate::error::refusal(resp, None, false).await)
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

async fn renew_loop(
    client: Client,
    name: String,
    body: serde_json::Value,
    ttl: Duration,
    health: LeaseHealth,
) {
    let mut wait = ttl / 3;
    let mut backoff = RETRY_FIRST;
    loop {
        tokio::time::sleep(wait).await;
        let sent = Instant::now();
        // A renewal still unanswered when the lease runs out has failed, whatever it says later.
        let left = health.deadline().saturating_duration_since(sent);
        let renewal = client.send(client.http.put(client.lease_url(&name)).json(&body));
        let outcome = match tokio::time::timeout(left, renewal).await {
            Ok(Ok(resp)) if resp.status().is_success() => Renewal::Renewed,
            // The server's answer: the lease is someone else's now, or gone.
            Ok(Ok(resp)) if resp.status().is_client_error() => Renewal::Refused(resp.status()),
            // A fault on the way or in the server: the lease may still be held.
            Ok(Ok(_)) | Ok(Err(_)) => Renewal::Failed,
            Err(_) => Renewal::OutOfTime,
        };
        match outcome {
            Renewal::Renewed => {
                health.extend(sent + ttl);
                wait = ttl / 3;
                backoff = RETRY_FIRST;
            }
            Renewal::Failed if Instant::now() + backoff < health.deadline() => {
                tracing::debug!(lease = %name, "lease renewal failed; retrying before the TTL runs out");
                wait = backoff;
                backoff = (backoff * 2).min(ttl / 6).max(RETRY_FIRST);
            }
            Renewal::Refused(status) => {
                tracing::warn!(lease = %name, %status, "lease renewal refused; the lease is lost");
                health.mark_lost();
                return;
            }
            Renewal::Failed | Renewal::OutOfTime => {
                tracing::warn!(lease = %name, "no renewal landed before the TTL ran out; the lease is lost");
                health.mark_lost();
                return;
            }
        }
    }
}

/// The first retry of a renewal that failed on the way (a reset connection, a 5xx); retries
/// double, up to a sixth of the TTL, until the lease would run out.
const RETRY_FIRST: Duration = Duration::from_millis(100);

enum Renewal {
    Renewed,
    Refused(reqwest::StatusCode),
    Failed,
    OutOfTime,
}
