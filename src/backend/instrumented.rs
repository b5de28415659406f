//! Backend metrics, taken in one place: [`Instrumented`] wraps every backend the catalog
//! builds and times each call by operation and outcome, counting failures by kind. The gate
//! and the surfaces never see the difference.

use crate::backend::{
    Backend, BackendError, ByteStream, ListPage, ObjectInfo, ObjectMeta, ObjectPart, PartInfo,
    Staged,
};
use async_trait::async_trait;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// A backend whose calls are timed and counted under its configured name.
pub struct Instrumented {
    inner: Arc<dyn Backend>,
    name: String,
    /// How a fault's message names the backend (its name, the store, its deadline).
    label: String,
}

impl Instrumented {
    /// `inner`, timed and counted as backend `name` (a name from the configuration).
    pub fn wrap(name: &str, inner: Arc<dyn Backend>) -> Arc<dyn Backend> {
        Self::wrap_labelled(name, format!("backend {name:?}"), inner)
    }

    /// [`Instrumented::wrap`], a fault's message naming the backend as `label`.
    pub fn wrap_labelled(name: &str, label: String, inner: Arc<dyn Backend>) -> Arc<dyn Backend> {
        // Every error series at zero from the start, so that increase() sees the first one
        // (increment, not absolute: a bucket created later must not reset what was counted).
        for operation in OPERATIONS {
            for kind in ERROR_KINDS {
                metrics::counter!(crate::metrics::BACKEND_ERRORS, "backend" => name.to_string(), "operation" => operation, "kind" => kind)
                    .increment(0);
            }
        }
        Arc::new(Instrumented {
            inner,
            name: name.to_string(),
            label,
        })
    }

    async fn timed<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T, BackendError>>,
    ) -> Result<T, BackendError> {
        let started = Instant::now();
        let result = call.await;
        record(
            &self.name,
            operation,
            started.elapsed(),
            result.as_ref().err(),
        );
        result.map_err(|e| self.named(e))
    }

    /// A fault of the backend itself says which backend, and what to do.
    fn named(&self, e: BackendError) -> BackendError {
        let label = &self.label;
        match e {
            BackendError::Timeout(m) => {
                BackendError::Timeout(format!("{m} ({label}); retry later"))
            }
            BackendError::Unreachable(m) => {
                BackendError::Unreachable(format!("{m} ({label}); retry later"))
            }
            BackendError::Failing(m) => BackendError::Failing(format!("{m} ({label})")),
            BackendError::Throttled(m) => BackendError::Throttled(format!("{m} ({label})")),
            other => other,
        }
    }
}

/// The outcome label of a call, and for a failure of the backend itself, its kind.
fn outcome(error: Option<&BackendError>) -> (&'static str, Option<&'static str>) {
    let Some(e) = error else { return ("ok", None) };
    let kind = match e {
        // The object was not at the version the call was conditional on: a bypass, or a
        // lost race that the gate handles.
        BackendError::Conflict { .. } => return ("conflict", None),
        // The client's doing: its body, its part list, an upload that is gone.
        BackendError::Body(_)
        | BackendError::Invalid { .. }
        | BackendError::NoSuchUpload(_)
        | BackendError::NoSuchPart { .. }
        | BackendError::Unsupported(_) => return ("rejected", None),
        BackendError::Unreachable(_) => "unreachable",
        BackendError::Timeout(_) => "timeout",
        BackendError::Throttled(_) => "throttled",
        BackendError::Failing(_) => "failing",
        BackendError::Refused { status, .. } => match status {
            0 | 400 | 411 | 413 | 414 | 431 => return ("rejected", None),
            _ => "refused",
        },
        BackendError::Corrupt(_) => "corrupt",
        BackendError::KeptDifferentBytes(_) => "kept_different_bytes",
        BackendError::Expired(_) => "expired",
    };
    ("error", Some(kind))
}

/// The operations timed, as labelled.
const OPERATIONS: [&str; 12] = [
    "stage",
    "commit",
    "delete",
    "check_ready",
    "version",
    "head",
    "get",
    "list",
    "create_upload",
    "upload_part",
    "assemble",
    "finish_upload",
];

/// The `kind` of a failed call ([`outcome`]).
const ERROR_KINDS: [&str; 8] = [
    "unreachable",
    "timeout",
    "throttled",
    "failing",
    "refused",
    "corrupt",
    "kept_different_bytes",
    "expired",
];

/// A call its caller abandoned at a deadline of its own (a readiness check), which the wrapper
/// never saw end: recorded as the timeout it was.
pub fn abandoned(backend: &str, operation: &'static str, took: Duration) {
    let timeout = BackendError::Timeout(String::new());
    record(backend, operation, took, Some(&timeout));
}

fn record(backend: &str, operation: &'static str, took: Duration, error: Option<&BackendError>) {
    let (outcome, kind) = outcome(error);
    metrics::histogram!(crate::metrics::BACKEND_DURATION, "backend" => backend.to_string(), "operation" => operation, "outcome" => outcome)
        .record(took.as_secs_f64());
    if let Some(kind) = kind {
        metrics::counter!(crate::metrics::BACKEND_ERRORS, "backend" => backend.to_string(), "operation" => operation, "kind" => kind)
            .increment(1);
    }
}

#[async_trait]
impl Backend for Instrumented {
    async fn stage(
        &self,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        body: ByteStream,
    ) -> Result<Staged, BackendError> {
        self.timed("stage", self.inner.stage(bucket, key, meta, body))
            .await
    }

    async fn commit(
        &self,
        staged: &Staged,
        expected: Option<&str>,
    ) -> Result<ObjectInfo, BackendError> {
        self.timed("commit", self.inner.commit(staged, expected))
            .await
    }

    async fn commit_by(
        &self,
        staged: &Staged,
        expected: Option<&str>,
        not_after: SystemTime,
    ) -> Result<ObjectInfo, BackendError> {
        self.timed("commit", self.inner.commit_by(staged, expected, not_after))
            .await
    }

    async fn delete_by(
        &self,
        bucket: &str,
        key: &str,
        expected: &str,
        not_after: SystemTime,
    ) -> Result<(), BackendError> {
        self.timed(
            "delete",
            self.inner.delete_by(bucket, key, expected, not_after),
        )
        .await
    }

    fn conditional_commit(&self, staged: &Staged) -> bool {
        self.inner.conditional_commit(staged)
    }

    fn in_flight_bound(&self) -> Option<Duration> {
        self.inner.in_flight_bound()
    }

    async fn clock_offset(&self) -> Option<Result<(i64, i64), String>> {
        self.inner.clock_offset().await
    }

    async fn check_ready(&self, bucket: &str) -> Result<(), BackendError> {
        self.timed("check_ready", self.inner.check_ready(bucket))
            .await
    }

    async fn discard(&self, staged: Staged) {
        let started = Instant::now();
        self.inner.discard(staged).await;
        record(&self.name, "discard", started.elapsed(), None);
    }

    async fn release(&self, staged: Staged) {
        let started = Instant::now();
        self.inner.release(staged).await;
        record(&self.name, "release", started.elapsed(), None);
    }

    async fn version(&self, bucket: &str, key: &str) -> Result<Option<String>, BackendError> {
        self.timed("version", self.inner.version(bucket, key)).await
    }

    async fn head(&self, bucket: &str, key: &str) -> Result<Option<ObjectInfo>, BackendError> {
        self.timed("head", self.inner.head(bucket, key)).await
    }

    async fn get(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        self.timed("get", self.inner.get(bucket, key)).await
    }

    async fn delete(&self, bucket: &str, key: &str, expected: &str) -> Result<(), BackendError> {
        self.timed("delete", self.inner.delete(bucket, key, expected))
            .await
    }

    async fn get_range(
        &self,
        bucket: &str,
        key: &str,
        start: u64,
        end: u64,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        self.timed("get", self.inner.get_range(bucket, key, start, end))
            .await
    }

    async fn get_part(
        &self,
        bucket: &str,
        key: &str,
        number: u32,
        body: bool,
    ) -> Result<Option<ObjectPart>, BackendError> {
        let operation = if body { "get" } else { "head" };
        self.timed(operation, self.inner.get_part(bucket, key, number, body))
            .await
    }

    async fn create_upload(
        &self,
        bucket: &str,
        key: &str,
        meta: &ObjectMeta,
    ) -> Result<String, BackendError> {
        self.timed("create_upload", self.inner.create_upload(bucket, key, meta))
            .await
    }

    async fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        handle: &str,
        number: i32,
        body: ByteStream,
        size: Option<u64>,
    ) -> Result<PartInfo, BackendError> {
        self.timed(
            "upload_part",
            self.inner
                .upload_part(bucket, key, handle, number, body, size),
        )
        .await
    }

    async fn assemble(
        &self,
        bucket: &str,
        key: &str,
        handle: &str,
        parts: &[PartInfo],
        meta: ObjectMeta,
    ) -> Result<Staged, BackendError> {
        self.timed(
            "assemble",
            self.inner.assemble(bucket, key, handle, parts, meta),
        )
        .await
    }

    async fn finish_upload(
        &self,
        bucket: &str,
        key: &str,
        handle: &str,
    ) -> Result<(), BackendError> {
        self.timed(
            "finish_upload",
            self.inner.finish_upload(bucket, key, handle),
        )
        .await
    }

    async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<ListPage, BackendError> {
        self.timed("list", self.inner.list(bucket, prefix, start_after, max))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind a failure is labelled with is one created at zero.
    #[test]
    fn every_error_kind_is_registered() {
        let failures = [
            BackendError::Unreachable(String::new()),
            BackendError::Timeout(String::new()),
            BackendError::Throttled(String::new()),
            BackendError::Failing(String::new()),
            BackendError::Corrupt(String::new()),
            BackendError::KeptDifferentBytes(String::new()),
            BackendError::Expired(String::new()),
        ];
        for e in &failures {
            let (_, kind) = outcome(Some(e));
            let kind = kind.expect("a failure of the backend has a kind");
            assert!(ERROR_KINDS.contains(&kind), "{kind}");
        }
        // Every operation timed is one created at zero.
        let source = include_str!("instrumented.rs");
        for call in source.split("self.timed(").skip(1) {
            let name = call.trim_start().trim_start_matches('"');
            let name = &name[..name.find('"').unwrap_or(0)];
            if name.chars().all(|c| c.is_ascii_lowercase() || c == '_') && !name.is_empty() {
                assert!(OPERATIONS.contains(&name), "{name}");
            }
        }
    }

    #[test]
    fn only_the_backends_own_failures_are_errors() {
        assert_eq!(outcome(None), ("ok", None));
        let conflict = BackendError::Conflict {
            expected: None,
            found: None,
        };
        assert_eq!(outcome(Some(&conflict)), ("conflict", None));
        assert_eq!(
            outcome(Some(&BackendError::NoSuchUpload("u".into()))),
            ("rejected", None)
        );
        assert_eq!(
            outcome(Some(&BackendError::Timeout("t".into()))),
            ("error", Some("timeout"))
        );
        assert_eq!(
            outcome(Some(&BackendError::Failing("f".into()))),
            ("error", Some("failing"))
        );
    }

    /// A store the probe found ignoring If-Match, with requests that can land late: the
    /// metrics wrapper reports both as the store does, never a trusting default.
    struct Untrusted;

    #[async_trait]
    impl crate::backend::scripted::Script for Untrusted {
        fn conditional_commit(&self, _inner: &Arc<dyn Backend>, _staged: &Staged) -> bool {
            false
        }
        fn in_flight_bound(&self, _inner: &Arc<dyn Backend>) -> Option<Duration> {
            Some(Duration::from_secs(900))
        }
        async fn clock_offset(
            &self,
            _inner: &Arc<dyn Backend>,
        ) -> Option<Result<(i64, i64), String>> {
            Some(Ok((-3, 5)))
        }
    }

    #[tokio::test]
    async fn the_wrapper_reports_what_the_store_is() {
        let memory = Arc::new(crate::backend::memory::MemoryBackend::new());
        let store = Arc::new(crate::backend::scripted::Scripted::new(memory, Untrusted));
        let wrapped = Instrumented::wrap("s3", store);
        let staged = wrapped
            .stage(
                "b",
                "k",
                ObjectMeta::default(),
                Box::pin(futures::stream::iter([Ok(bytes::Bytes::from_static(b"x"))])),
            )
            .await
            .unwrap();
        assert!(!wrapped.conditional_commit(&staged));
        assert_eq!(wrapped.in_flight_bound(), Some(Duration::from_secs(900)));
        assert_eq!(wrapped.clock_offset().await, Some(Ok((-3, 5))));
    }
}
