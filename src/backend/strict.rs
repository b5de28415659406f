//! The stores with no opt-in (azure, gcs): what the start-up checks and `probe-store` need of
//! each, so that both run one sequence for every such store. Each proves on scratch objects
//! that it honours every condition fencegate's commits rely on, alone and in a race of
//! writers, and a store that fails any of them is refused: there is no mode that trusts
//! fencegate's own lock on these backends.

use super::probe_race::Race;
use super::{Backend, BackendError};
use async_trait::async_trait;
use std::collections::HashSet;
use std::time::Duration;

/// What a strict store's probe found: the conditions the service ignores (empty: all
/// honoured), and the race of writers creating one object.
#[derive(Debug)]
pub struct StrictProbe {
    pub ignored: Vec<&'static str>,
    pub race: Race,
}

impl StrictProbe {
    pub fn safe(&self) -> bool {
        self.ignored.is_empty() && self.race.held()
    }

    /// What the service lacks, in words, for its refusal.
    pub fn lacking(&self) -> String {
        let mut what = self.ignored.join(", ");
        if !self.race.held() {
            if !what.is_empty() {
                what += "; ";
            }
            what += &format!(
                "{} writers racing with {}: {}, where exactly 1 must win and be kept",
                self.race.writers,
                self.race.names(),
                self.race.result()
            );
        }
        what
    }
}

/// A store fencegate serves only if its probe finds every condition honoured.
#[async_trait]
pub trait StrictStore: Backend + Sized + 'static {
    /// The backend's kind, as configured.
    const KIND: &'static str;
    /// What the service calls a bucket (`container` on azure), for messages.
    const BUCKET_WORD: &'static str;
    /// The conditions the probe tries, as it names them.
    const CONDITIONS: &'static [&'static str];
    /// Writers in the start-up race, and by default in `probe-store`'s.
    const RACERS: usize;
    /// How far the service's clock may run behind this one's: a commit's credential expires
    /// by the service's clock, the gate's hold by this one's.
    const CLOCK_MARGIN: Duration;
    /// The credential each commit carries, which expires by the service's clock.
    const CREDENTIAL: &'static str;

    /// `bucket/prefix`, for messages.
    fn location(&self) -> String;
    fn store_bucket(&self) -> &str;
    fn prefix(&self) -> &str;
    /// Why the service cannot be fenced, for the start-up refusal.
    fn refusal(&self, probe: &StrictProbe) -> String;
    /// The bucket exists and the credentials reach it.
    async fn check_exists(&self) -> Result<(), BackendError>;
    /// The probe as run `run` (a fresh name), with `writers` in the race; it deletes what it
    /// wrote.
    async fn probe_run(&self, run: &str, writers: usize) -> Result<StrictProbe, String>;
    /// Deletes what probe run `run` wrote (after it was interrupted).
    async fn remove_run(&self, run: &str);
    /// How far this instance's clock runs ahead of the service's (ms, a range).
    async fn clock_offset_now(&self) -> Result<(i64, i64), String>;
    /// Cluster mode's checks: the clock against the service's, and whatever else other
    /// instances rely on to decide after an intent's deadline.
    async fn probe_expiry(&self, ttl: Duration, skew: Duration) -> Result<(), String>;
    /// Deletes abandoned staging objects, and upload pieces whose upload is not in `known`,
    /// last written more than `min_age` ago; returns how many.
    async fn sweep_staging(
        &self,
        known: &HashSet<String>,
        min_age: Duration,
    ) -> Result<usize, BackendError>;

    /// The probe on the bucket and prefix, as the start-up runs it.
    async fn probe_conditions(&self) -> Result<StrictProbe, String> {
        self.probe_run(&random_id(), Self::RACERS).await
    }
}

/// A fresh name for scratch objects, staging pieces and commit ids.
pub fn random_id() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}
