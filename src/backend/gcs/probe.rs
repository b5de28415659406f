//! The start-up probe: before serving, fencegate proves on scratch objects under
//! `<prefix>.fencegate-probe/` that the service refuses every conditional request its commits
//! and deletes rely on, one at a time and in a race of concurrent writers, that it checks a
//! body's Content-MD5, and that it refuses a signed URL that has expired. A service that fails
//! any of them is refused: there is no mode that trusts fencegate's own lock on this backend.

use super::client::Request;
use super::errors::GcsFailure;
use super::pieces::{compose_request, generation_of};
use super::GcsBackend;
use crate::backend::probe_race::{Answer, Race};
use crate::backend::spool::Spooled;
use crate::backend::strict::{StrictProbe, StrictStore};
use crate::backend::BackendError;
use reqwest::Method;
use std::time::{Duration, SystemTime};

/// What fencegate relies on, as the probe names it.
pub const CONDITIONS: [&str; 8] = [
    "x-goog-if-generation-match: 0 on PUT",
    "x-goog-if-generation-match on PUT",
    "x-goog-if-generation-match: 0 on Compose",
    "x-goog-if-generation-match on Compose",
    "a source's Generation on Compose",
    "x-goog-if-generation-match on DELETE",
    "Content-MD5 on PUT",
    "the expiry of a V4 signed URL",
];

fn body(text: impl Into<String>) -> Spooled {
    bytes::Bytes::from(text.into()).into()
}

/// Writer `i`'s bytes in the race: each writer's differ, so the object shows who won.
fn racer_body(i: usize) -> String {
    format!("fencegate probe race, writer {i}")
}

/// Whether an outcome is the refusal a condition must cause; a fault stops the probe.
fn refused(outcome: Result<reqwest::Response, GcsFailure>) -> Result<bool, String> {
    match outcome {
        Ok(_) => Ok(false),
        Err(GcsFailure::Precondition | GcsFailure::NotFound) => Ok(true),
        Err(GcsFailure::Fault(BackendError::Expired(_))) => Ok(true),
        Err(GcsFailure::Fault(BackendError::Refused { code, .. }))
            if code == "BadDigest" || code == "InvalidDigest" =>
        {
            Ok(true)
        }
        Err(GcsFailure::Fault(e)) => Err(e.to_string()),
    }
}

/// The scratch objects of probe run `run`.
fn scratch(backend: &GcsBackend, run: &str) -> [String; 3] {
    let p = &backend.prefix;
    // A name with the characters a key may hold that signing could get wrong (a space, `%`,
    // `+`, non-ASCII): a URL signed for another spelling is refused here, not on every commit.
    [
        format!("{p}.fencegate-probe/p-{run}-a b%+é"),
        format!("{p}.fencegate-probe/p-{run}-b"),
        format!("{p}.fencegate-probe/p-{run}-race"),
    ]
}

#[async_trait::async_trait]
impl StrictStore for GcsBackend {
    const KIND: &'static str = "gcs";
    const BUCKET_WORD: &'static str = "bucket";
    const CONDITIONS: &'static [&'static str] = &CONDITIONS;
    const RACERS: usize = 8;
    const CLOCK_MARGIN: Duration = super::CLOCK_MARGIN;
    const CREDENTIAL: &'static str = "signed URL";

    fn location(&self) -> String {
        GcsBackend::location(self)
    }

    fn store_bucket(&self) -> &str {
        self.bucket()
    }

    fn prefix(&self) -> &str {
        GcsBackend::prefix(self)
    }

    fn refusal(&self, probe: &StrictProbe) -> String {
        format!("the GCS endpoint at {} does not honour what fencegate's commits rely on ({}); a stale write could overwrite a newer one, so fencegate does not serve it. Use Google Cloud Storage itself (no installable emulator honours generation preconditions: docs/backends.md)", self.location(), probe.lacking())
    }

    async fn check_exists(&self) -> Result<(), BackendError> {
        self.check_bucket().await
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
        GcsBackend::clock_offset_now(self).await
    }

    async fn probe_expiry(&self, ttl: Duration, skew: Duration) -> Result<(), String> {
        GcsBackend::probe_expiry(self, ttl, skew).await
    }

    async fn sweep_staging(
        &self,
        known: &std::collections::HashSet<String>,
        min_age: Duration,
    ) -> Result<usize, BackendError> {
        GcsBackend::sweep_staging(self, known, min_age).await
    }
}

async fn probe(
    backend: &GcsBackend,
    a: &str,
    b: &str,
    race: &str,
    writers: usize,
) -> Result<StrictProbe, String> {
    let client = &backend.client;
    let bucket = backend.bucket.as_str();
    // Sent as the commits are: by a signed URL for the one object.
    let until = SystemTime::now() + Duration::from_secs(120);
    let put = |name: &str, text: &'static str, generation: &str| {
        Request::xml(Method::PUT, bucket, name)
            .header("x-goog-if-generation-match", generation)
            .signed_until(until)
            .body(body(text))
    };
    let compose = |generation: &str, source: (&str, String)| {
        Request::xml(Method::PUT, bucket, b)
            .query("compose", "")
            .header("x-goog-if-generation-match", generation)
            .signed_until(until)
            .body(compose_request(&[(source.0.to_string(), source.1)]))
    };
    let fault = |f: GcsFailure| f.into_backend("the probe").to_string();
    let mut ignored = Vec::new();
    let mut check = |ok: bool, what: &'static str| {
        if !ok {
            ignored.push(what);
        }
    };
    // A new object, created only if absent; then the same request again must be refused.
    let first = client
        .send("PUT Object", put(a, "one", "0"))
        .await
        .map_err(fault)?;
    let first_gen = generation_of(&first, "PUT Object").map_err(|e| e.to_string())?;
    check(
        refused(client.send("PUT Object", put(a, "two", "0")).await)?,
        CONDITIONS[0],
    );
    let wrong = "1";
    check(
        refused(client.send("PUT Object", put(a, "two", wrong)).await)?,
        CONDITIONS[1],
    );
    // The right generation is taken (a service that refused every condition would pass the
    // lines above and fence nothing).
    let second = client
        .send("PUT Object", put(a, "three", &first_gen))
        .await
        .map_err(fault)?;
    let a_gen = generation_of(&second, "PUT Object").map_err(|e| e.to_string())?;
    // Compose onto an existing object with generation 0 and with a wrong generation, and from
    // a source at a generation it no longer has.
    let b_first = client
        .send("PUT Object", put(b, "b", "0"))
        .await
        .map_err(fault)?;
    let b_gen = generation_of(&b_first, "PUT Object").map_err(|e| e.to_string())?;
    check(
        refused(
            client
                .send("Compose", compose("0", (a, a_gen.clone())))
                .await,
        )?,
        CONDITIONS[2],
    );
    check(
        refused(
            client
                .send("Compose", compose(wrong, (a, a_gen.clone())))
                .await,
        )?,
        CONDITIONS[3],
    );
    check(
        refused(
            client
                .send("Compose", compose(&b_gen, (a, first_gen.clone())))
                .await,
        )?,
        CONDITIONS[4],
    );
    check(
        refused(
            client
                .send(
                    "DELETE Object",
                    Request::xml(Method::DELETE, bucket, a)
                        .header("x-goog-if-generation-match", wrong)
                        .signed_until(until),
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
                    "PUT Object",
                    Request::xml(Method::PUT, bucket, b)
                        .header("content-md5", "AAAAAAAAAAAAAAAAAAAAAA==")
                        .signed_until(until)
                        .body(body("not these bytes")),
                )
                .await,
        )?,
        CONDITIONS[6],
    );
    // A signed URL whose time is up must be refused, however it got there late.
    let past = SystemTime::now() - Duration::from_secs(70);
    check(
        refused(
            client
                .send(
                    "PUT Object",
                    Request::xml(Method::PUT, bucket, b)
                        .signed_at(past)
                        .signed_until(past + Duration::from_secs(60))
                        .body(body("late")),
                )
                .await,
        )?,
        CONDITIONS[7],
    );
    let race = race_for(backend, race, writers).await?;
    Ok(StrictProbe { ignored, race })
}

/// `writers` PUTs with `x-goog-if-generation-match: 0` and distinct bodies on one new object at
/// once: exactly one may win, and the object must hold its bytes.
async fn race_for(backend: &GcsBackend, name: &str, writers: usize) -> Result<Race, String> {
    let client = &backend.client;
    let bucket = backend.bucket.as_str();
    let until = SystemTime::now() + Duration::from_secs(120);
    let racers = (0..writers).map(|i| {
        client.send(
            "PUT Object",
            Request::xml(Method::PUT, bucket, name)
                .header("x-goog-if-generation-match", "0")
                .signed_until(until)
                .body(body(racer_body(i))),
        )
    });
    let answers = futures::future::join_all(racers)
        .await
        .into_iter()
        .map(|outcome| match outcome {
            Ok(_) => Answer::Won,
            Err(GcsFailure::Precondition) => Answer::Refused,
            Err(f) => Answer::Failed(f.into_backend("PUT Object").to_string()),
        })
        .collect();
    let (mut race, winner) = Race::tally("PUT", "x-goog-if-generation-match: 0", answers);
    if let Some(refusal) = race.nobody_won() {
        return Err(refusal);
    }
    if let Some(i) = winner {
        let read = client
            .read("GET Object", || Request::xml(Method::GET, bucket, name))
            .await
            .map_err(|f| f.into_backend("GET Object").to_string())?;
        let kept = read
            .bytes()
            .await
            .map_err(|e| e.without_url().to_string())?;
        race.kept_winner = Some(kept == racer_body(i).as_bytes());
    }
    Ok(race)
}

impl GcsBackend {
    /// Cluster mode's check: this instance's clock against the service's (other instances
    /// decide after an intent's deadline without waiting for its commit, and the probe already
    /// proved an expired signed URL is refused).
    pub async fn probe_expiry(&self, ttl: Duration, skew: Duration) -> Result<(), String> {
        crate::backend::clock::check_offset(
            self.client.clock_offset(&self.bucket).await?,
            ttl,
            skew,
            crate::backend::clock::Guarding::Cluster,
        )
    }
}
