//! The start-up probe, which `fencegate probe-store` also runs: before serving, fencegate
//! proves on scratch blobs under `<prefix>.fencegate-probe/` that the service refuses every
//! conditional request its commits and deletes rely on, one at a time and in a race of
//! concurrent writers, and that it checks a body's Content-MD5. A service that fails any of
//! them is refused: there is no mode that trusts fencegate's own lock on this backend.

use super::client::Request;
use super::errors::AzFailure;
use super::{random_id, AzureBackend};
use crate::backend::probe_race::{Answer, Race};
use crate::backend::spool::Spooled;
use crate::backend::strict::{StrictProbe, StrictStore};
use crate::backend::BackendError;
use reqwest::Method;

/// The conditions fencegate relies on, as the probe names them.
pub const CONDITIONS: [&str; 8] = [
    "If-None-Match: * on Put Blob",
    "If-Match on Put Blob",
    "If-None-Match: * on Copy Blob",
    "If-Match on Copy Blob",
    "x-ms-source-if-match on Copy Blob",
    "If-Match on Delete Blob",
    "Content-MD5 on Put Blob",
    "the expiry of a SAS",
];

fn body(text: impl Into<String>) -> Spooled {
    bytes::Bytes::from(text.into()).into()
}

/// Writer `i`'s bytes in the race: each writer's differ, so the blob shows who won.
fn racer_body(i: usize) -> String {
    format!("fencegate probe race, writer {i}")
}

/// Whether an outcome is the refusal a condition must cause; a fault stops the probe.
fn refused(outcome: Result<reqwest::Response, AzFailure>) -> Result<bool, String> {
    match outcome {
        Ok(_) => Ok(false),
        Err(AzFailure::Precondition | AzFailure::NotFound) => Ok(true),
        Err(AzFailure::Fault(BackendError::Refused { code, .. }))
            if code == "Md5Mismatch" || code == "InvalidMd5" =>
        {
            Ok(true)
        }
        Err(AzFailure::Fault(e)) => Err(e.to_string()),
    }
}

/// Whether a request authorized by an expired SAS was refused (403: Azure answers
/// `AuthenticationFailed`, Azurite `AuthorizationFailure`).
fn expiry_refused(outcome: Result<reqwest::Response, AzFailure>) -> Result<bool, String> {
    match outcome {
        Ok(_) => Ok(false),
        Err(AzFailure::Fault(BackendError::Refused { status: 403, .. })) => Ok(true),
        Err(f) => Err(f.into_backend("the probe").to_string()),
    }
}

/// Whether a copy was refused because its source was not at the ETag named: Azure answers
/// 412 `SourceConditionNotMet`, which the client reports as a fault of the commit, Azurite
/// 412 `ConditionNotMet` (the copy carries no other condition here).
fn source_refused(outcome: Result<reqwest::Response, AzFailure>) -> Result<bool, String> {
    match outcome {
        Ok(_) => Ok(false),
        Err(AzFailure::Precondition) => Ok(true),
        Err(AzFailure::Fault(BackendError::Failing(m))) if m.contains("SourceConditionNotMet") => {
            Ok(true)
        }
        Err(f) => Err(f.into_backend("Copy Blob").to_string()),
    }
}

fn etag(r: &reqwest::Response) -> String {
    r.headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// The scratch blobs of probe run `run`.
fn scratch(backend: &AzureBackend, run: &str) -> [String; 3] {
    let p = &backend.prefix;
    // A name with the characters a key may hold that signing could get wrong (a space, `%`,
    // `+`, non-ASCII): a SAS signed for another spelling is refused here, not on every commit.
    [
        format!("{p}.fencegate-probe/p-{run}-a b%+é"),
        format!("{p}.fencegate-probe/p-{run}-b"),
        format!("{p}.fencegate-probe/p-{run}-race"),
    ]
}

#[async_trait::async_trait]
impl StrictStore for AzureBackend {
    const KIND: &'static str = "azure";
    const BUCKET_WORD: &'static str = "container";
    const CONDITIONS: &'static [&'static str] = &CONDITIONS;
    const RACERS: usize = 8;
    const CLOCK_MARGIN: std::time::Duration = super::CLOCK_MARGIN;
    const CREDENTIAL: &'static str = "SAS";

    fn location(&self) -> String {
        AzureBackend::location(self)
    }

    fn store_bucket(&self) -> &str {
        self.container()
    }

    fn prefix(&self) -> &str {
        AzureBackend::prefix(self)
    }

    fn refusal(&self, probe: &StrictProbe) -> String {
        format!("the blob service at {} does not honour what fencegate's commits rely on ({}); a stale write could overwrite a newer one, so fencegate does not serve it. Use Azure Blob Storage itself or Azurite 3.37 or later", self.location(), probe.lacking())
    }

    async fn check_exists(&self) -> Result<(), BackendError> {
        self.check_container().await
    }

    async fn probe_run(&self, run: &str, writers: usize) -> Result<StrictProbe, String> {
        let [a, b, race] = scratch(self, run);
        let result = probe(self, &a, &b, &race, writers).await;
        StrictStore::remove_run(self, run).await;
        result
    }

    async fn remove_run(&self, run: &str) {
        for name in scratch(self, run) {
            self.drop_staging(&name).await;
        }
    }

    async fn clock_offset_now(&self) -> Result<(i64, i64), String> {
        AzureBackend::clock_offset_now(self).await
    }

    async fn probe_expiry(
        &self,
        ttl: std::time::Duration,
        skew: std::time::Duration,
    ) -> Result<(), String> {
        AzureBackend::probe_expiry(self, ttl, skew).await
    }

    async fn sweep_staging(
        &self,
        known: &std::collections::HashSet<String>,
        min_age: std::time::Duration,
    ) -> Result<usize, BackendError> {
        AzureBackend::sweep_staging(self, known, min_age).await
    }
}

async fn probe(
    backend: &AzureBackend,
    a: &str,
    b: &str,
    race: &str,
    writers: usize,
) -> Result<StrictProbe, String> {
    let client = &backend.client;
    let c = backend.container.as_str();
    // Authorized as the commits are: by a SAS for the one blob.
    let expiry = std::time::SystemTime::now() + std::time::Duration::from_secs(120);
    let sas = |blob: &str, permissions: &str| client.sas(c, blob, permissions, expiry);
    fn put_blob<'r>(c: &'r str, blob: &'r str, text: &str, sas: String) -> Request<'r> {
        Request::new(Method::PUT, c, blob)
            .header("x-ms-blob-type", "BlockBlob")
            .sas(sas)
            .body(body(text))
    }
    let fault = |f: AzFailure| f.into_backend("the probe").to_string();
    let mut ignored = Vec::new();
    let mut check = |ok: bool, what: &'static str| {
        if !ok {
            ignored.push(what);
        }
    };
    // A new blob, created only if absent; then the same request again must be refused.
    let first = client
        .send(
            "Put Blob",
            put_blob(c, a, "one", sas(a, "cw")).header("if-none-match", "*"),
        )
        .await
        .map_err(fault)?;
    let first_etag = etag(&first);
    check(
        refused(
            client
                .send(
                    "Put Blob",
                    put_blob(c, a, "two", sas(a, "cw")).header("if-none-match", "*"),
                )
                .await,
        )?,
        CONDITIONS[0],
    );
    check(
        refused(
            client
                .send(
                    "Put Blob",
                    put_blob(c, a, "two", sas(a, "cw")).header("if-match", WRONG_ETAG),
                )
                .await,
        )?,
        CONDITIONS[1],
    );
    // The right ETag is taken (a service that refused every If-Match would pass the line
    // above and fence nothing).
    let source_etag = client
        .send(
            "Put Blob",
            put_blob(c, a, "three", sas(a, "cw")).header("if-match", first_etag),
        )
        .await
        .map_err(fault)?;
    let source_etag = etag(&source_etag);
    // Copy Blob onto an existing blob with If-None-Match: *, and with a wrong If-Match.
    let source = backend.client.blob_url(c, a, Some(&sas(a, "r")));
    client
        .send("Put Blob", put_blob(c, b, "b", sas(b, "cw")))
        .await
        .map_err(fault)?;
    let copy = |cond: (&'static str, &str)| {
        Request::new(Method::PUT, c, b)
            .sas(sas(b, "cw"))
            .header("x-ms-copy-source", source.clone())
            .header(cond.0, cond.1)
    };
    check(
        refused(client.send("Copy Blob", copy(("if-none-match", "*"))).await)?,
        CONDITIONS[2],
    );
    check(
        refused(
            client
                .send("Copy Blob", copy(("if-match", WRONG_ETAG)))
                .await,
        )?,
        CONDITIONS[3],
    );
    // The copy of a staged body names the source's version: another must be refused, and the
    // right one taken.
    check(
        source_refused(
            client
                .send("Copy Blob", copy(("x-ms-source-if-match", WRONG_ETAG)))
                .await,
        )?,
        CONDITIONS[4],
    );
    client
        .send("Copy Blob", copy(("x-ms-source-if-match", &source_etag)))
        .await
        .map_err(fault)?;
    check(
        refused(
            client
                .send(
                    "Delete Blob",
                    Request::new(Method::DELETE, c, a)
                        .sas(sas(a, "d"))
                        .header("if-match", WRONG_ETAG),
                )
                .await,
        )?,
        CONDITIONS[5],
    );
    // A body that is not its Content-MD5 must be refused.
    check(
        refused(
            client
                .send(
                    "Put Blob",
                    put_blob(c, b, "not these bytes", sas(b, "cw"))
                        .header("content-md5", "AAAAAAAAAAAAAAAAAAAAAA=="),
                )
                .await,
        )?,
        CONDITIONS[6],
    );
    // A Put Blob and a Delete Blob whose SAS expired 10 s ago must be refused: the expiry is
    // all that keeps a commit held in flight past its deadline from landing, on one instance
    // as in a cluster.
    let expired = std::time::SystemTime::now() - std::time::Duration::from_secs(10);
    let late_put = client
        .send(
            "Put Blob",
            put_blob(c, b, "late", client.sas(c, b, "cw", expired)),
        )
        .await;
    let late_delete = client
        .send(
            "Delete Blob",
            Request::new(Method::DELETE, c, b).sas(client.sas(c, b, "d", expired)),
        )
        .await;
    check(
        expiry_refused(late_put)? && expiry_refused(late_delete)?,
        CONDITIONS[7],
    );
    let race = race_for(backend, race, writers).await?;
    Ok(StrictProbe { ignored, race })
}

/// An ETag no blob has.
const WRONG_ETAG: &str = "\"0x8D000000000000\"";

/// `writers` Put Blobs with `If-None-Match: *` and distinct bodies on one new blob at once:
/// exactly one may win, and the blob must hold its bytes.
async fn race_for(backend: &AzureBackend, blob: &str, writers: usize) -> Result<Race, String> {
    let client = &backend.client;
    let c = backend.container.as_str();
    let expiry = std::time::SystemTime::now() + std::time::Duration::from_secs(120);
    let racers = (0..writers).map(|i| {
        client.send(
            "Put Blob",
            Request::new(Method::PUT, c, blob)
                .sas(client.sas(c, blob, "cw", expiry))
                .header("x-ms-blob-type", "BlockBlob")
                .header("if-none-match", "*")
                .body(body(racer_body(i))),
        )
    });
    let answers = futures::future::join_all(racers)
        .await
        .into_iter()
        .map(|outcome| match outcome {
            Ok(_) => Answer::Won,
            Err(AzFailure::Precondition) => Answer::Refused,
            Err(f) => Answer::Failed(f.into_backend("Put Blob").to_string()),
        })
        .collect();
    let (mut race, winner) = Race::tally("Put Blob", "If-None-Match: *", answers);
    if let Some(refusal) = race.nobody_won() {
        return Err(refusal);
    }
    if let Some(i) = winner {
        let read = client
            .read("Get Blob", || Request::new(Method::GET, c, blob))
            .await
            .map_err(|f| f.into_backend("Get Blob").to_string())?;
        let kept = read
            .bytes()
            .await
            .map_err(|e| e.without_url().to_string())?;
        race.kept_winner = Some(kept == racer_body(i).as_bytes());
    }
    Ok(race)
}

impl AzureBackend {
    /// How far this instance's clock runs ahead of the service's (ms, a range).
    pub async fn clock_offset_now(&self) -> Result<(i64, i64), String> {
        self.client.clock_offset().await
    }

    /// Cluster mode's check: this instance's clock against the service's, and a Put Blob and
    /// a Delete Blob authorized by a SAS that expired 10 s ago must both be refused (a fresh
    /// one taken), since other instances decide after an intent's deadline without waiting
    /// for its commit.
    pub async fn probe_expiry(
        &self,
        ttl: std::time::Duration,
        skew: std::time::Duration,
    ) -> Result<(), String> {
        use std::time::{Duration, SystemTime};
        crate::backend::clock::check_offset(
            self.client.clock_offset().await?,
            ttl,
            skew,
            crate::backend::clock::Guarding::Cluster,
        )?;
        let blob = format!("{}.fencegate-probe/p-{}-expiry", self.prefix, random_id());
        let c = self.container.as_str();
        let now = SystemTime::now();
        let put = |expiry| {
            Request::new(Method::PUT, c, &blob)
                .header("x-ms-blob-type", "BlockBlob")
                .sas(self.client.sas(c, &blob, "cw", expiry))
                .body(body("fencegate probe"))
        };
        let delete = |expiry| {
            Request::new(Method::DELETE, c, &blob).sas(self.client.sas(c, &blob, "d", expiry))
        };
        let fresh = self
            .client
            .send("Put Blob", put(now + Duration::from_secs(60)))
            .await;
        let expired = self
            .client
            .send("Put Blob", put(now - Duration::from_secs(10)))
            .await;
        let expired_delete = self
            .client
            .send("Delete Blob", delete(now - Duration::from_secs(10)))
            .await;
        let gone = self
            .client
            .send("Delete Blob", delete(now + Duration::from_secs(60)))
            .await;
        if let Err(f) = fresh {
            return Err(format!(
                "a Put Blob authorized by a SAS, as cluster mode sends its commits, failed: {}; check the account key",
                f.into_backend("Put Blob")
            ));
        }
        if expired.is_ok() {
            return Err("the service applied a Put Blob whose SAS had expired; cluster mode relies on the service refusing it; run one instance on rocksdb with this store".into());
        }
        if expired_delete.is_ok() {
            return Err("the service applied a Delete Blob whose SAS had expired; cluster mode relies on the service refusing it; run one instance on rocksdb with this store".into());
        }
        if let Err(f) = gone {
            tracing::warn!(blob, error = %f.into_backend("Delete Blob"), "could not delete the expiry probe's blob");
        }
        Ok(())
    }
}
