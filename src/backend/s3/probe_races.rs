//! The concurrent half of the store probe: a store can refuse a conditional write that arrives
//! alone and still let two through when they arrive together (a check, then a write, without
//! a lock between them). N writers race for one new key with `If-None-Match: *`, then for one
//! existing key with the same `If-Match` ETag; exactly one may win each race, and the object
//! must then hold the winner's bytes.

use super::S3Backend;
use aws_sdk_s3::primitives::ByteStream;

/// One race's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Race {
    /// The condition raced: `If-None-Match: *` or `If-Match`.
    pub condition: &'static str,
    pub writers: usize,
    /// Writers the store answered 2xx.
    pub won: usize,
    /// Writers the store refused with 412 (or 409, as AWS answers a conditional write that
    /// collides with another in flight).
    pub refused: usize,
    /// With exactly one winner: whether the object holds its bytes.
    pub kept_winner: Option<bool>,
    /// Answers that were neither (throttling, faults), with the first one's text.
    pub failed: usize,
    pub first_failure: Option<String>,
}

impl Race {
    pub fn held(&self) -> bool {
        self.won == 1 && self.kept_winner == Some(true) && self.failed == 0
    }
}

enum Answer {
    Won,
    Refused,
    Failed(String),
}

impl S3Backend {
    async fn racer(&self, key: &str, body: Vec<u8>, if_match: Option<&str>) -> Answer {
        let sent = self
            .clients
            .writes
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(ByteStream::from(body))
            .set_if_match(if_match.map(str::to_string))
            .set_if_none_match(if_match.is_none().then(|| "*".to_string()))
            .send()
            .await;
        match sent {
            Ok(_) => Answer::Won,
            Err(e) => match e.raw_response().map(|r| r.status().as_u16()) {
                Some(412 | 409) => Answer::Refused,
                _ => Answer::Failed(format!("{:?}", super::errors::classify("PutObject", e))),
            },
        }
    }

    async fn read_back(&self, key: &str) -> Option<Vec<u8>> {
        let got = self
            .clients
            .reads
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .ok()?;
        Some(got.body.collect().await.ok()?.into_bytes().to_vec())
    }

    /// `writers` concurrent PutObjects of distinct bodies on one key under one condition.
    async fn race(&self, key: &str, writers: usize, if_match: Option<&str>) -> Race {
        let body = |i: usize| format!("fencegate probe race, writer {i}").into_bytes();
        let answers =
            futures::future::join_all((0..writers).map(|i| self.racer(key, body(i), if_match)))
                .await;
        let mut race = Race {
            condition: if if_match.is_some() {
                "If-Match"
            } else {
                "If-None-Match: *"
            },
            writers,
            won: 0,
            refused: 0,
            kept_winner: None,
            failed: 0,
            first_failure: None,
        };
        let mut winner = None;
        for (i, answer) in answers.into_iter().enumerate() {
            match answer {
                Answer::Won => {
                    race.won += 1;
                    winner = Some(i);
                }
                Answer::Refused => race.refused += 1,
                Answer::Failed(e) => {
                    race.failed += 1;
                    race.first_failure.get_or_insert(e);
                }
            }
        }
        if let (1, Some(i)) = (race.won, winner) {
            race.kept_winner = Some(self.read_back(key).await == Some(body(i)));
        }
        race
    }

    /// Both races, each on a scratch key of its own, removed afterwards.
    pub async fn probe_races(&self, writers: usize) -> Result<[Race; 2], String> {
        let create_key = self.scratch_key();
        let create = self.race(&create_key, writers, None).await;
        self.remove_scratch(&create_key).await;

        let overwrite_key = self.scratch_key();
        let first = self
            .clients
            .writes
            .put_object()
            .bucket(&self.bucket)
            .key(&overwrite_key)
            .body(ByteStream::from_static(b"fencegate probe race, before"))
            .send()
            .await
            .map_err(|e| {
                format!(
                    "cannot write the probe object {overwrite_key}: {:?}",
                    super::errors::classify("PutObject", e)
                )
            })?;
        let etag = first.e_tag().unwrap_or_default().to_string();
        let overwrite = self.race(&overwrite_key, writers, Some(&etag)).await;
        self.remove_scratch(&overwrite_key).await;
        Ok([create, overwrite])
    }
}
