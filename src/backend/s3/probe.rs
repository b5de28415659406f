//! The start-up probe: some stores accept `If-Match` / `If-None-Match` and ignore them, which
//! would silently void contract line 5 (docs/design.md). Before serving, fencegate proves on a scratch key that
//! the store refuses each kind of conditional commit it relies on.

use super::direct::Condition;
use super::errors::{classify, S3Failure};
use super::S3Backend;
use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::operation::complete_multipart_upload::CompleteMultipartUploadError;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use std::time::Duration;

/// What the probe writes.
const PROBE_BODY: &[u8] = b"fencegate probe";

/// The probe's body, as the commit sends a spooled one.
fn probe_body() -> super::spool::Spooled {
    bytes::Bytes::from_static(PROBE_BODY).into()
}

/// An ETag no object has.
const WRONG_ETAG: &str = "\"00000000000000000000000000000000\"";

/// The conditions fencegate's commits rely on, as the probe names them.
pub const CONDITIONS: [&str; 4] = [
    "If-None-Match: * on PutObject",
    "If-Match on PutObject",
    "If-None-Match: * on CompleteMultipartUpload",
    "If-Match on CompleteMultipartUpload",
];

/// What the probe learned: the conditions the store ignores (empty: all honoured).
#[derive(Debug, Default)]
pub struct ProbeReport {
    pub ignored: Vec<&'static str>,
    /// Conditional deletes are optional: without them a delete checks the ETag first.
    pub conditional_delete: bool,
    /// The store answered the probe's PutObject with the MD5 of its body as the ETag, so its
    /// answers can be checked against the bytes sent.
    pub etags_are_md5: bool,
    /// The concurrent races (empty when not run). A lost race counts its condition among
    /// `ignored`: a condition that holds only one request at a time is not honoured.
    pub races: Vec<super::Race>,
    /// What `ignored` held before the races: the conditions ignored one request at a time.
    pub ignored_alone: Vec<&'static str>,
}

impl ProbeReport {
    pub fn safe(&self) -> bool {
        self.ignored.is_empty()
    }

    /// Both conditions honoured on PutObject.
    pub fn puts_safe(&self) -> bool {
        !self.ignored.iter().any(|c| c.ends_with("on PutObject"))
    }

    /// Both conditions honoured on CompleteMultipartUpload.
    pub fn completes_safe(&self) -> bool {
        !self
            .ignored
            .iter()
            .any(|c| c.ends_with("on CompleteMultipartUpload"))
    }
}

type Outcome = Result<(), S3Failure>;

fn refused(outcome: Outcome) -> Result<bool, String> {
    match outcome {
        Ok(()) => Ok(false),
        Err(S3Failure::Precondition) => Ok(true),
        // Some stores answer If-Match on a missing object with 404; the probe's object exists.
        Err(S3Failure::NotFound) => Ok(true),
        Err(S3Failure::Fault(e)) => Err(e.to_string()),
    }
}

impl S3Backend {
    /// A conditional PutObject sent as the commit sends it (`direct.rs`), so that what is
    /// proved is what the commits rely on.
    async fn probe_put(&self, key: &str, condition: Condition<'_>) -> Outcome {
        self.put_now(key, probe_body(), Vec::new(), condition)
            .await
            .map(|_| ())
    }

    /// A scratch upload of `body` as its one part: its id and the part's ETag.
    pub(super) async fn upload_of(
        &self,
        key: &str,
        body: Vec<u8>,
    ) -> Result<(String, String), S3Failure> {
        let upload = self
            .clients
            .writes
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| classify("CreateMultipartUpload", e))?;
        let id = upload.upload_id().unwrap_or_default().to_string();
        let part = self
            .clients
            .writes
            .upload_part()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(&id)
            .part_number(1)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|e| classify("UploadPart", e))?;
        Ok((id, part.e_tag().unwrap_or_default().to_string()))
    }

    /// Completes an [`S3Backend::upload_of`] upload under the given conditions; the store's
    /// answer as the SDK gives it, for each caller to judge.
    pub(super) async fn complete_of(
        &self,
        key: &str,
        (id, etag): &(String, String),
        if_match: Option<&str>,
        if_none_match: bool,
    ) -> Result<(), SdkError<CompleteMultipartUploadError, HttpResponse>> {
        let done = CompletedMultipartUpload::builder()
            .parts(CompletedPart::builder().part_number(1).e_tag(etag).build())
            .build();
        self.clients
            .writes
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(id)
            .multipart_upload(done)
            .set_if_match(if_match.map(str::to_string))
            .set_if_none_match(if_none_match.then(|| "*".to_string()))
            .send()
            .await
            .map(|_| ())
    }

    async fn probe_multipart(
        &self,
        key: &str,
        if_match: Option<&str>,
        if_none_match: bool,
    ) -> Outcome {
        let upload = self
            .upload_of(key, b"fencegate probe part".to_vec())
            .await?;
        let outcome = self
            .complete_of(key, &upload, if_match, if_none_match)
            .await
            .map_err(|e| classify("CompleteMultipartUpload", e));
        if outcome.is_err() {
            self.abort(key.strip_prefix(&self.prefix).unwrap_or(key), &upload.0)
                .await;
        }
        outcome
    }

    /// Cluster mode's probe (docs/design.md, "Bounded intents"): a presigned PutObject signed
    /// as the commits are goes through, and a PutObject and a DeleteObject whose expiry has
    /// passed are refused. A store that applies expired requests would let a paused instance's
    /// commit or delete land after newer decisions; on a store that ignores conditions nothing
    /// else stops them. Runs on a scratch key, removed afterwards.
    pub async fn probe_expiry(&self, ttl: Duration, skew: Duration) -> Result<(), String> {
        // The deadlines are judged by two clocks: this instance's and the store's.
        crate::backend::clock::check_offset(
            self.clients.signer.clock_offset().await?,
            ttl,
            skew,
            crate::backend::clock::Guarding::Cluster,
        )?;
        use super::signer::Request;
        use std::time::{SystemTime, UNIX_EPOCH};
        let run = super::scratch::new_run();
        let key = self.scratch_key(&run);
        // Signed as the commits are: with the condition only where the store honours it.
        let conditional = self
            .conditional_puts
            .load(std::sync::atomic::Ordering::Relaxed);
        let put = || Request {
            method: "PUT",
            bucket: &self.bucket,
            key: &key,
            upload_id: None,
            headers: conditional
                .then(|| ("if-none-match".into(), "*".into()))
                .into_iter()
                .collect(),
            body: bytes::Bytes::from_static(b"fencegate probe").into(),
        };
        let now = SystemTime::now();
        let whole = UNIX_EPOCH
            + Duration::from_secs(now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()));
        let signer = &self.clients.signer;
        let fresh = signer
            .send_signed(
                "PutObject",
                put(),
                (whole, Duration::from_secs(60)),
                now + Duration::from_secs(30),
            )
            .await;
        let expired = signer
            .send_signed(
                "PutObject",
                put(),
                (whole - Duration::from_secs(10), Duration::from_secs(1)),
                now + Duration::from_secs(30),
            )
            .await;
        // Deletes are bounded the same way: a late DeleteObject must be refused too, whether
        // or not the store honours its If-Match (a fence advance leaves the version as it was).
        let expired_delete = signer
            .send_signed(
                "DeleteObject",
                Request {
                    method: "DELETE",
                    bucket: &self.bucket,
                    key: &key,
                    upload_id: None,
                    headers: Vec::new(),
                    body: bytes::Bytes::new().into(),
                },
                (whole - Duration::from_secs(10), Duration::from_secs(1)),
                now + Duration::from_secs(30),
            )
            .await;
        self.remove_run(&run).await;
        if let Err(e) = fresh {
            return Err(format!(
                "a presigned PutObject, as cluster mode sends its commits, failed: {}; check the backend's credentials, region and endpoint",
                e.into_backend("PutObject")
            ));
        }
        match expired {
            Err(S3Failure::Fault(crate::backend::BackendError::Expired(_))) => {}
            // The first put created the key: a store that ignores expiry but honours the
            // condition answers 412.
            Err(S3Failure::Precondition) | Ok(_) => return Err("the store applied a presigned PutObject whose expiry had passed; cluster mode relies on the store refusing it (403 AccessDenied, \"Request has expired\"); run one instance on rocksdb with this store".into()),
            Err(other) => return Err(format!(
                "a presigned PutObject whose expiry had passed was refused, but not as expired: {}",
                other.into_backend("PutObject")
            )),
        }
        match expired_delete {
            Err(S3Failure::Fault(crate::backend::BackendError::Expired(_))) => Ok(()),
            Ok(_) | Err(S3Failure::NotFound) => Err("the store applied a presigned DeleteObject whose expiry had passed; cluster mode relies on the store refusing it (403 AccessDenied, \"Request has expired\"); run one instance on rocksdb with this store".into()),
            Err(other) => Err(format!(
                "a presigned DeleteObject whose expiry had passed was refused, but not as expired: {}",
                other.into_backend("DeleteObject")
            )),
        }
    }

    /// Runs the probe in a run of its own, then removes the run whatever ended it (and runs
    /// older probes left): the sequential checks on one scratch key, then, with `writers`
    /// above 1, the races of `writers` concurrent conditional writes.
    pub async fn probe(&self, writers: usize) -> Result<ProbeReport, String> {
        self.probe_as(&super::scratch::new_run(), writers).await
    }

    /// [`S3Backend::probe`] in run `run`, which a caller that may drop it removes itself.
    pub async fn probe_as(&self, run: &str, writers: usize) -> Result<ProbeReport, String> {
        let result = self.probe_run(run, writers).await;
        self.remove_run(run).await;
        self.sweep_left_over_runs().await;
        result
    }

    async fn probe_run(&self, run: &str, writers: usize) -> Result<ProbeReport, String> {
        let mut report = self.probe_on(&self.scratch_key(run)).await?;
        report.ignored_alone = report.ignored.clone();
        if writers > 1 {
            for race in self.probe_races(run, writers).await? {
                if let Some(e) = &race.first_failure {
                    // Not a verdict on the condition: the store could not take the load.
                    return Err(format!(
                        "{} of {} concurrent conditional {}s ({}) failed: {e}",
                        race.failed, race.writers, race.operation, race.condition
                    ));
                }
                if race.won == 0 {
                    // No condition explains refusing every writer: nothing to judge by.
                    return Err(format!(
                        "the store refused all {} concurrent conditional {}s ({}), though one of them met the condition; the probe cannot judge such a store",
                        race.writers, race.operation, race.condition
                    ));
                }
                let names = race.names();
                if !race.held() {
                    if let Some(condition) = CONDITIONS.iter().find(|c| **c == names) {
                        if !report.ignored.contains(condition) {
                            report.ignored.push(condition);
                        }
                    }
                }
                report.races.push(race);
            }
        }
        Ok(report)
    }

    async fn probe_on(&self, key: &str) -> Result<ProbeReport, String> {
        let mut report = ProbeReport::default();
        let first = self
            .put_now(key, probe_body(), Vec::new(), Condition::IfAbsent)
            .await
            .map_err(|e| format!("cannot write the probe object {key}: {:?}", e))?;
        let md5 = format!("{:x}", <md5::Md5 as md5::Digest>::digest(PROBE_BODY));
        report.etags_are_md5 =
            first.is_some_and(|e| e.trim_matches('"').eq_ignore_ascii_case(&md5));
        let checks: [(&'static str, Outcome); 4] = [
            (
                "If-None-Match: * on PutObject",
                self.probe_put(key, Condition::IfAbsent).await,
            ),
            (
                "If-Match on PutObject",
                self.probe_put(key, Condition::IfMatch(WRONG_ETAG)).await,
            ),
            (
                "If-Match on CompleteMultipartUpload",
                self.probe_multipart(key, Some(WRONG_ETAG), false).await,
            ),
            (
                "If-None-Match: * on CompleteMultipartUpload",
                self.probe_multipart(key, None, true).await,
            ),
        ];
        for (what, outcome) in checks {
            if !refused(outcome)? {
                report.ignored.push(what);
            }
        }
        let delete = self.delete_now(key, Some(WRONG_ETAG)).await;
        report.conditional_delete = refused(delete)?;
        Ok(report)
    }
}
