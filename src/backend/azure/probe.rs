//! The start-up probe: before serving, fencegate proves on scratch blobs under
//! `<prefix>.fencegate-probe/` that the service refuses every conditional request its commits
//! and deletes rely on, one at a time and in a race of concurrent writers, and that it checks
//! a body's Content-MD5. A service that fails any of them is refused: there is no mode that
//! trusts fencegate's own lock on this backend.

use super::client::Request;
use super::errors::AzFailure;
use super::{random_id, AzureBackend};
use crate::backend::spool::Spooled;
use reqwest::Method;

/// The conditions fencegate relies on, as the probe names them.
pub const CONDITIONS: [&str; 6] = [
    "If-None-Match: * on Put Blob",
    "If-Match on Put Blob",
    "If-None-Match: * on Copy Blob",
    "If-Match on Copy Blob",
    "If-Match on Delete Blob",
    "Content-MD5 on Put Blob",
];

/// Concurrent writers in the race.
pub const RACERS: usize = 8;

/// What the probe found: the conditions the service ignores (empty: all honoured), and the
/// race's count of writers that won.
#[derive(Debug, Default)]
pub struct AzureProbe {
    pub ignored: Vec<&'static str>,
    pub race_winners: usize,
}

impl AzureProbe {
    pub fn safe(&self) -> bool {
        self.ignored.is_empty() && self.race_winners == 1
    }

    /// Why the service cannot be fenced, for the start-up refusal.
    pub fn refusal(&self, location: &str) -> String {
        let mut what = self.ignored.join(", ");
        if self.race_winners != 1 {
            if !what.is_empty() {
                what += "; ";
            }
            what += &format!(
                "{} of {RACERS} concurrent Put Blob with If-None-Match: * on one new blob succeeded, where exactly 1 must",
                self.race_winners
            );
        }
        format!("the blob service at {location} does not honour what fencegate's commits rely on ({what}); a stale write could overwrite a newer one, so fencegate does not serve it. Use Azure Blob Storage itself or Azurite 3.37 or later")
    }
}

fn body(text: &'static str) -> Spooled {
    bytes::Bytes::from_static(text.as_bytes()).into()
}

/// Whether an outcome is the refusal a condition must cause; a fault stops the probe.
fn refused(outcome: Result<reqwest::Response, AzFailure>) -> Result<bool, String> {
    match outcome {
        Ok(_) => Ok(false),
        Err(AzFailure::Precondition | AzFailure::NotFound) => Ok(true),
        Err(AzFailure::Fault(crate::backend::BackendError::Refused { code, .. }))
            if code == "Md5Mismatch" || code == "InvalidMd5" =>
        {
            Ok(true)
        }
        Err(AzFailure::Fault(e)) => Err(e.to_string()),
    }
}

fn etag(r: &reqwest::Response) -> String {
    r.headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// Runs the probe on `backend`'s container and prefix, deleting what it wrote.
pub async fn probe_conditions(backend: &AzureBackend) -> Result<AzureProbe, String> {
    let run = random_id();
    // A name with the characters a key may hold that signing could get wrong (a space, `%`,
    // `+`, non-ASCII): a SAS signed for another spelling is refused here, not on every commit.
    let a = format!("{}.fencegate-probe/p-{run}-a b%+é", backend.prefix);
    let b = format!("{}.fencegate-probe/p-{run}-b", backend.prefix);
    let race = format!("{}.fencegate-probe/p-{run}-race", backend.prefix);
    let result = probe(backend, &a, &b, &race).await;
    for blob in [&a, &b, &race] {
        backend.drop_staging(blob).await;
    }
    result
}

async fn probe(backend: &AzureBackend, a: &str, b: &str, race: &str) -> Result<AzureProbe, String> {
    let client = &backend.client;
    let c = backend.container.as_str();
    // Authorized as the commits are: by a SAS for the one blob.
    let expiry = std::time::SystemTime::now() + std::time::Duration::from_secs(120);
    let sas = |blob: &str, permissions: &str| client.sas(c, blob, permissions, expiry);
    fn put_blob<'r>(c: &'r str, blob: &'r str, text: &'static str, sas: String) -> Request<'r> {
        Request::new(Method::PUT, c, blob)
            .header("x-ms-blob-type", "BlockBlob")
            .sas(sas)
            .body(body(text))
    }
    let fault = |f: AzFailure| f.into_backend("the probe").to_string();
    let mut report = AzureProbe::default();
    let mut check = |ok: bool, what: &'static str| {
        if !ok {
            report.ignored.push(what);
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
                    put_blob(c, a, "two", sas(a, "cw")).header("if-match", "\"0x8D000000000000\""),
                )
                .await,
        )?,
        CONDITIONS[1],
    );
    // The right ETag is taken (a service that refused every If-Match would pass the line
    // above and fence nothing).
    client
        .send(
            "Put Blob",
            put_blob(c, a, "three", sas(a, "cw")).header("if-match", first_etag),
        )
        .await
        .map_err(fault)?;
    // Copy Blob onto an existing blob with If-None-Match: *, and with a wrong If-Match.
    let source = backend.client.blob_url(c, a, Some(&sas(a, "r")));
    client
        .send("Put Blob", put_blob(c, b, "b", sas(b, "cw")))
        .await
        .map_err(fault)?;
    let copy = |cond: (&'static str, String)| {
        Request::new(Method::PUT, c, b)
            .sas(sas(b, "cw"))
            .header("x-ms-copy-source", source.clone())
            .header(cond.0, cond.1)
    };
    check(
        refused(
            client
                .send("Copy Blob", copy(("if-none-match", "*".into())))
                .await,
        )?,
        CONDITIONS[2],
    );
    check(
        refused(
            client
                .send(
                    "Copy Blob",
                    copy(("if-match", "\"0x8D000000000000\"".into())),
                )
                .await,
        )?,
        CONDITIONS[3],
    );
    check(
        refused(
            client
                .send(
                    "Delete Blob",
                    Request::new(Method::DELETE, c, a)
                        .sas(sas(a, "d"))
                        .header("if-match", "\"0x8D000000000000\""),
                )
                .await,
        )?,
        CONDITIONS[4],
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
        CONDITIONS[5],
    );
    // The race: writers create one new blob at once; exactly one may win.
    let racers = (0..RACERS).map(|_| {
        client.send(
            "Put Blob",
            Request::new(Method::PUT, c, race)
                .sas(sas(race, "cw"))
                .header("x-ms-blob-type", "BlockBlob")
                .header("if-none-match", "*")
                .body(body("race")),
        )
    });
    let mut winners = 0;
    for outcome in futures::future::join_all(racers).await {
        if !refused(outcome)? {
            winners += 1;
        }
    }
    report.race_winners = winners;
    Ok(report)
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
