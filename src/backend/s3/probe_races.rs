//! The concurrent half of the store probe: a store can refuse a conditional write that arrives
//! alone and still let two through when they arrive together (a check, then a write, without
//! a lock between them). N writers race for one new key with `If-None-Match: *`, then for one
//! existing key with the same `If-Match` ETag, each race run with PutObject and again with
//! CompleteMultipartUpload; exactly one may win each, and the object must then hold the
//! winner's bytes.

pub use crate::backend::probe_race::Race;

use super::S3Backend;
use crate::backend::probe_race::Answer;
use aws_sdk_s3::error::SdkError;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;

fn answer<T, E>(op: &str, sent: Result<T, SdkError<E, HttpResponse>>) -> Answer
where
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match sent {
        Ok(_) => Answer::Won,
        Err(e) => match e.raw_response().map(|r| r.status().as_u16()) {
            Some(412 | 409) => Answer::Refused,
            _ => Answer::Failed(format!("{:?}", super::errors::classify(op, e))),
        },
    }
}

/// Writer `i`'s bytes: each writer's differ, so the object shows who won.
fn body(i: usize) -> Vec<u8> {
    format!("fencegate probe race, writer {i}").into_bytes()
}

impl S3Backend {
    /// A racer's PutObject, sent as the commit sends it (`direct.rs`).
    async fn put_racer(&self, key: &str, i: usize, if_match: Option<&str>) -> Answer {
        let sent = self
            .put_now(
                key,
                bytes::Bytes::from(body(i)).into(),
                Vec::new(),
                super::direct::Condition::on(if_match),
            )
            .await;
        match sent {
            Ok(_) => Answer::Won,
            Err(super::errors::S3Failure::Precondition)
            | Err(super::errors::S3Failure::Fault(crate::backend::BackendError::Refused {
                status: 409,
                ..
            })) => Answer::Refused,
            Err(failure) => Answer::Failed(format!("{failure:?}")),
        }
    }

    async fn complete_racer(
        &self,
        key: &str,
        upload: (String, String),
        if_match: Option<&str>,
    ) -> Answer {
        let sent = self
            .complete_of(key, &upload, if_match, if_match.is_none())
            .await;
        answer("CompleteMultipartUpload", sent)
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

    /// `writers` concurrent PutObjects, or CompleteMultipartUploads of as many uploads, of
    /// distinct bodies on `key`, under one condition.
    async fn race(
        &self,
        key: &str,
        writers: usize,
        multipart: bool,
        if_match: Option<&str>,
    ) -> Result<Race, String> {
        let answers = if multipart {
            // The uploads are made first, so that only the completions race.
            let mut uploads = Vec::with_capacity(writers);
            for i in 0..writers {
                let upload = self.upload_of(key, body(i)).await;
                uploads.push(upload.map_err(|e| format!("{e:?}"))?);
            }
            futures::future::join_all(
                uploads
                    .into_iter()
                    .map(|upload| self.complete_racer(key, upload, if_match)),
            )
            .await
        } else {
            futures::future::join_all((0..writers).map(|i| self.put_racer(key, i, if_match))).await
        };
        let operation = if multipart {
            "CompleteMultipartUpload"
        } else {
            "PutObject"
        };
        let condition = if if_match.is_some() {
            "If-Match"
        } else {
            "If-None-Match: *"
        };
        let (mut race, winner) = Race::tally(operation, condition, answers);
        if let Some(i) = winner {
            race.kept_winner = Some(self.read_back(key).await == Some(body(i)));
        }
        Ok(race)
    }

    /// The four races, each on a scratch key of run `run` (which the caller removes).
    pub async fn probe_races(&self, run: &str, writers: usize) -> Result<Vec<Race>, String> {
        let mut races = Vec::new();
        for multipart in [false, true] {
            races.push(
                self.race(&self.scratch_key(run), writers, multipart, None)
                    .await?,
            );
            let key = self.scratch_key(run);
            let first = self
                .put_now(
                    &key,
                    bytes::Bytes::from_static(b"fencegate probe race, before").into(),
                    Vec::new(),
                    super::direct::Condition::Always,
                )
                .await
                .map_err(|e| format!("cannot write the probe object {key}: {e:?}"))?;
            let etag = first.unwrap_or_default();
            races.push(self.race(&key, writers, multipart, Some(&etag)).await?);
        }
        Ok(races)
    }
}
