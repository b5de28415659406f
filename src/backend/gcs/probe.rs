//! The start-up probe: before serving, fencegate proves on scratch objects under
//! `<prefix>.fencegate-probe/` that the service refuses every conditional request its commits
//! and deletes rely on, one at a time and in a race of concurrent writers, that it checks a
//! body's Content-MD5, and that it refuses a signed URL that has expired. A service that fails
//! any of them is refused: there is no mode that trusts fencegate's own lock on this backend.

use super::client::Request;
use super::errors::GcsFailure;
use super::pieces::{compose_request, generation_of};
use super::{random_id, GcsBackend};
use crate::backend::spool::Spooled;
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

/// Concurrent writers in the race.
pub const RACERS: usize = 8;

/// What the probe found: the conditions the service ignores (empty: all honoured), and the
/// race's count of writers that won.
#[derive(Debug, Default)]
pub struct GcsProbe {
    pub ignored: Vec<&'static str>,
    pub race_winners: usize,
}

impl GcsProbe {
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
                "{} of {RACERS} concurrent PUTs with x-goog-if-generation-match: 0 on one new object succeeded, where exactly 1 must",
                self.race_winners
            );
        }
        format!("the GCS endpoint at {location} does not honour what fencegate's commits rely on ({what}); a stale write could overwrite a newer one, so fencegate does not serve it. Use Google Cloud Storage itself (no installable emulator honours generation preconditions: docs/backends.md)")
    }
}

fn body(text: &'static str) -> Spooled {
    bytes::Bytes::from_static(text.as_bytes()).into()
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

/// Runs the probe on `backend`'s bucket and prefix, deleting what it wrote.
pub async fn probe_conditions(backend: &GcsBackend) -> Result<GcsProbe, String> {
    let run = random_id();
    // A name with the characters a key may hold that signing could get wrong (a space, `%`,
    // `+`, non-ASCII): a URL signed for another spelling is refused here, not on every commit.
    let a = format!("{}.fencegate-probe/p-{run}-a b%+é", backend.prefix);
    let b = format!("{}.fencegate-probe/p-{run}-b", backend.prefix);
    let race = format!("{}.fencegate-probe/p-{run}-race", backend.prefix);
    let result = probe(backend, &a, &b, &race).await;
    for name in [&a, &b, &race] {
        backend.drop_staging(name).await;
    }
    result
}

async fn probe(backend: &GcsBackend, a: &str, b: &str, race: &str) -> Result<GcsProbe, String> {
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
    let mut report = GcsProbe::default();
    let mut check = |ok: bool, what: &'static str| {
        if !ok {
            report.ignored.push(what);
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
    // The race: writers create one new object at once; exactly one may win.
    let racers = (0..RACERS).map(|_| client.send("PUT Object", put(race, "race", "0")));
    let mut winners = 0;
    for outcome in futures::future::join_all(racers).await {
        if !refused(outcome)? {
            winners += 1;
        }
    }
    report.race_winners = winners;
    Ok(report)
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
